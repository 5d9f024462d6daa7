"""Calibrate the simulated reader once, on No Memory and Oracle Reset, and report how much the results
depend on the reader parameters that are set a priori.

    python -m runners.llm.calibrate [--seeds 3] [--workers 2] [--out results]

writes `calibration.{json,md}` and `sensitivity.{json,md}` to `--out`. It never changes a default: it
reports the grid point the procedure selects next to the configured defaults (conf/llm/simulated.yaml,
conf/env/*.yaml), so that a mismatch is visible instead of silently fixed.

The procedure (global parameters, calibrated once for all methods and settings, on No
Memory and Oracle Reset, never per method):

- Targets: No Memory's paper numbers (`analysis.report.paper`) in the three drift settings, and, for Oracle
  Reset in the two settings whose phase boundaries are the true change points, the clean-memory ceiling
  `1 - lapse * (A - 1) / A` (shown only current evidence, a reader should err only when it lapses). The
  paper has no Oracle Reset number; no other method enters the loss.
- Knobs: what those two methods respond to: the reader's `lapse`, the drift settings' number of actions A
  (No Memory guesses one in A whatever the reader does) and the preference stream's `hint_rate` (how
  often a session states the preference: a property of the simulated users that the paper does not
  report and that alone sets No Memory's score there).
- Loss: squared errors against the targets plus `(lapse - LAPSE_PRIOR) ** 2`. Drift No Memory is blind
  to lapse and the preference target trades lapse against hint_rate along a ridge, so the data cannot
  place lapse by itself; the prior decides along the ridge. The loss without it is reported too.
- Set a priori, since neither No Memory (no memory lines) nor Oracle Reset in the drift settings (every
  line agrees with the current regime) responds to them: the weight ratios w_failure / w_support and
  w_hint / w_support and the recency half-life. w_support only fixes the unit: the reader's choices are
  invariant to scaling all three weights. `sensitivity` moves each of them (and lapse) to show which
  conclusions depend on them.

Runs are deduplicated by their parameters (a grid point that differs only in a knob a setting ignores
reuses that setting's runs) and spread over worker processes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import math
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from tqdm import tqdm

from analysis.report.paper import lookup
from runners.agent.loop import run_stream
from runners.compose import compose_spec
from runners.llm.simulated import SimulatedBackend
from runners.registry import build_memory

OVERALL = "overall"  # the phase label of "every episode of the stream"
LAPSE_PRIOR = 0.05
CALIBRATION_METHODS = ("no_memory", "oracle_reset")
SENSITIVITY_METHODS = ("no_memory", "append_only", "lww", "tepa_rev", "tepa_full", "oracle_reset")
# Real tool calls make executable drift the slow setting: the grid runs it with 200-episode phases.
CALIBRATION_OVERRIDES: dict[str, dict[str, Any]] = {"executable_drift": {"phase_length": 200}}
# Each a-priori reader parameter, and lapse (which the targets cannot place), moved one at a time.
SENSITIVITY_MOVES: dict[str, tuple[float, ...]] = {
    "lapse": (0.025, 0.1),
    "w_failure": (0.5, 2.0),
    "w_hint": (1.5, 6.0),
    "half_life": (200.0, 5000.0),
}
DEFAULTS_LABEL = "defaults"
SHORT = {"controlled_drift": "cd", "executable_drift": "ed", "preference_stream": "ps"}


@dataclass(frozen=True)
class Setting:
    """A calibration setting: the paper table of its No Memory target, the phase scored, the grid knobs
    that are parameters of its environment, and whether Oracle Reset's ceiling is a target there."""

    env: str
    experiment: str
    phase: str
    knobs: tuple[str, ...]
    oracle_ceiling: bool

    @property
    def target(self) -> float:
        number = lookup(self.experiment, self.env, self.phase, "no_memory")
        if number is None:
            raise ValueError(f"no paper number for No Memory in {self.experiment}/{self.env}/{self.phase}")
        return number.value


SETTINGS = (
    Setting("controlled_drift", "paper_controlled", "full_reversal", ("n_actions",), True),
    Setting("executable_drift", "paper_executable", "full_reversal", ("n_actions",), True),
    # Oracle Reset is run but not scored here: preferences change at random times, not at its one reset.
    Setting("preference_stream", "paper_preference", OVERALL, ("hint_rate",), False),
)
READER_KNOBS = ("lapse",)
SENSITIVITY_SETTINGS = (("controlled_drift", "full_reversal"), ("preference_stream", OVERALL))
# The paper's qualitative claims the sensitivity analysis checks: (setting, lower method, higher method).
CONCLUSIONS = (
    ("controlled_drift", "append_only", "no_memory"),
    ("controlled_drift", "lww", "no_memory"),
    ("controlled_drift", "no_memory", "tepa_rev"),
    ("preference_stream", "append_only", "no_memory"),
    ("preference_stream", "no_memory", "tepa_full"),
    ("preference_stream", "tepa_rev", "tepa_full"),
)


def _check_run(seeds: Sequence[int], workers: int) -> None:
    if not seeds or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seeds):
        raise ValueError(f"seeds must be a non-empty sequence of integers >= 0, got {seeds!r}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")


# ---------------------------------------------------------------------------------------------------
# Streams: one (environment, memory, reader, seed) run, and many of them over worker processes
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stream:
    """One run, hashable so that equal runs are made once. `env_cls` pickles by reference."""

    env: str
    env_cls: type
    env_params: tuple[tuple[str, Any], ...]
    memory: str
    memory_params: tuple[tuple[str, Any], ...]
    reader: tuple[tuple[str, Any], ...]
    seed: int


def run_one(stream: Stream) -> dict[str, float]:
    """Success rate per phase of one stream, and over all its episodes (`OVERALL`)."""
    memory = build_memory(stream.memory, **dict(stream.memory_params))
    backend = SimulatedBackend(**dict(stream.reader))
    with contextlib.closing(stream.env_cls(**dict(stream.env_params))) as env:
        result = asyncio.run(run_stream(env, memory, backend, seed=stream.seed, labels={}))
    counts: dict[str, list[int]] = {}
    for rec in result.records:
        for phase in (rec["phase"], OVERALL):
            tally = counts.setdefault(phase, [0, 0])
            tally[0] += rec["success"]
            tally[1] += 1
    return {phase: wins / n for phase, (wins, n) in counts.items()}


def run_all(streams: Iterable[Stream], workers: int, desc: str = "") -> dict[Stream, dict[str, float]]:
    """Run each distinct stream once, over `workers` processes (1: in this process)."""
    _check_run((0,), workers)
    # Real tool calls first, so that the slowest streams are not the last ones left.
    unique = sorted(dict.fromkeys(streams), key=lambda s: s.env != "executable_drift")
    bar = {"total": len(unique), "desc": desc, "unit": "run", "disable": not sys.stderr.isatty()}
    if workers == 1:
        return {s: run_one(s) for s in tqdm(unique, **bar)}
    with ProcessPoolExecutor(workers) as pool:
        return dict(zip(unique, tqdm(pool.map(run_one, unique), **bar), strict=True))


def mean_success(results: Mapping[Stream, dict[str, float]], streams: Sequence[Stream], phase: str) -> float:
    """Mean over the streams (one per seed) of the success rate in `phase`."""
    return sum(results[s][phase] for s in streams) / len(streams)


# ---------------------------------------------------------------------------------------------------
# The configured defaults
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Defaults:
    """What `python -m runners.run` would build, composed from conf/: each environment's class and
    parameters, each memory method's parameters, the simulated reader's parameters."""

    env: dict[str, tuple[type, dict[str, Any]]]
    memory: dict[str, dict[str, Any]]
    reader: dict[str, Any]

    def stream(
        self,
        env: str,
        memory: str,
        seed: int,
        *,
        env_params: Mapping[str, Any] | None = None,
        reader: Mapping[str, Any] | None = None,
    ) -> Stream:
        """A stream at the defaults, `env_params` and `reader` overriding them."""
        cls, params = self.env[env]
        return Stream(
            env=env,
            env_cls=cls,
            env_params=tuple(sorted({**params, **(env_params or {})}.items())),
            memory=memory,
            memory_params=tuple(sorted(self.memory[memory].items())),
            reader=tuple(sorted({**self.reader, **(reader or {})}.items())),
            seed=seed,
        )


def load_defaults(envs: Iterable[str], methods: Iterable[str]) -> Defaults:
    """Compose and validate conf/ for each environment and each method, as a run would."""
    env: dict[str, tuple[type, dict[str, Any]]] = {}
    memory: dict[str, dict[str, Any]] = {}
    reader = dict(compose_spec(["llm=simulated"]).llm.params)
    for name in envs:
        spec = compose_spec([f"env={name}"])
        env[name] = (spec.env.cls, dict(spec.env.params))
    for name in methods:
        memory[name] = dict(compose_spec([f"memory={name}"]).memory.params)
    return Defaults(env=env, memory=memory, reader=reader)


# ---------------------------------------------------------------------------------------------------
# Calibration
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Grid:
    """The calibration grid: the reader's lapse, the drift settings' number of actions A, the preference
    stream's hint rate. Every point is run (each setting only over the knobs it has)."""

    lapse: tuple[float, ...] = (0.0, 0.025, 0.05, 0.075, 0.1)
    n_actions: tuple[int, ...] = (2, 3, 4)
    hint_rate: tuple[float, ...] = (0.775, 0.8, 0.825, 0.85, 0.875, 0.9, 0.925, 0.95)

    def __post_init__(self) -> None:
        for f in fields(self):
            values, integer = getattr(self, f.name), f.name == "n_actions"
            if not values or not all(_axis_value(v, integer) for v in values):
                kind = "integers >= 2" if integer else "numbers in [0, 1]"
                raise ValueError(f"grid.{f.name} must be a non-empty tuple of {kind}, got {values!r}")

    def including(self, point: Mapping[str, Any]) -> Grid:
        """This grid with `point`'s values added to its axes (so that the defaults are always measured)."""
        return Grid(**{f.name: tuple(sorted({*getattr(self, f.name), point[f.name]})) for f in fields(self)})

    def points(self) -> list[dict[str, Any]]:
        names = [f.name for f in fields(self)]
        axes = [getattr(self, name) for name in names]
        return [dict(zip(names, values, strict=True)) for values in itertools.product(*axes)]


def _axis_value(v: Any, integer: bool) -> bool:
    if isinstance(v, bool):
        return False
    return isinstance(v, int) and v >= 2 if integer else isinstance(v, int | float) and 0 <= v <= 1


def ceiling(lapse: float, n_actions: int) -> float:
    """Success of a reader that always knows the answer but lapses into a uniform guess."""
    return 1.0 - lapse * (n_actions - 1) / n_actions


def loss_terms(point: Mapping[str, Any], measured: Mapping[str, float]) -> dict[str, float]:
    """The squared errors of one grid point (`measured` maps "<env>/<method>" to success): No Memory
    against the paper, Oracle Reset against the ceiling where it applies, lapse against its prior."""
    terms = {}
    for s in SETTINGS:
        terms[f"{s.env}/no_memory"] = (measured[f"{s.env}/no_memory"] - s.target) ** 2
        if s.oracle_ceiling:
            bound = ceiling(point["lapse"], point["n_actions"])
            terms[f"{s.env}/oracle_reset"] = (measured[f"{s.env}/oracle_reset"] - bound) ** 2
    terms["prior/lapse"] = (point["lapse"] - LAPSE_PRIOR) ** 2
    return terms


@dataclass
class Calibration:
    """Every grid point with its measurements and loss, the selected point and the defaults' point."""

    rows: list[dict[str, Any]]
    winner: dict[str, Any]
    defaults: dict[str, Any]
    reader: dict[str, Any]  # the configured reader parameters (the a-priori ones are used as they are)
    targets: dict[str, float]
    seeds: tuple[int, ...]
    env_overrides: dict[str, dict[str, Any]]
    runtime_s: float


def default_point(defaults: Defaults) -> dict[str, Any]:
    """The grid coordinates of the configured defaults."""
    drift_a = {defaults.env[s.env][1]["n_actions"] for s in SETTINGS if "n_actions" in s.knobs}
    if len(drift_a) != 1:
        raise ValueError(
            f"the drift settings' default n_actions differ ({sorted(drift_a)}); the grid has one A"
        )
    return {
        "lapse": defaults.reader["lapse"],
        "n_actions": drift_a.pop(),
        "hint_rate": defaults.env["preference_stream"][1]["hint_rate"],
    }


def calibrate(
    grid: Grid | None = None,
    seeds: Sequence[int] = (0, 1, 2),
    workers: int = 2,
    env_overrides: Mapping[str, Mapping[str, Any]] | None = None,
    defaults: Defaults | None = None,
) -> Calibration:
    """Run No Memory and Oracle Reset at every grid point (the defaults' values added to the grid) and
    select the point with the lowest loss (ties: the first in grid order).

    `env_overrides` (default `CALIBRATION_OVERRIDES`) fixes environment parameters for speed; `defaults`
    (default: composed from conf/) is what every other parameter is."""
    _check_run(seeds, workers)
    clock = time.perf_counter()
    overrides = CALIBRATION_OVERRIDES if env_overrides is None else env_overrides
    defaults = defaults or load_defaults([s.env for s in SETTINGS], CALIBRATION_METHODS)
    at_defaults = default_point(defaults)
    points = (grid or Grid()).including(at_defaults).points()

    def streams(point: Mapping[str, Any], s: Setting, method: str) -> list[Stream]:
        env_params = {**overrides.get(s.env, {}), **{k: point[k] for k in s.knobs}}
        reader = {k: point[k] for k in READER_KNOBS}
        return [defaults.stream(s.env, method, seed, env_params=env_params, reader=reader) for seed in seeds]

    plan = {
        (i, s.env, m): streams(point, s, m)
        for i, point in enumerate(points)
        for s in SETTINGS
        for m in CALIBRATION_METHODS
    }
    results = run_all(itertools.chain.from_iterable(plan.values()), workers, desc="calibration")
    rows = []
    for i, point in enumerate(points):
        measured = {
            f"{s.env}/{m}": mean_success(results, plan[i, s.env, m], s.phase)
            for s in SETTINGS
            for m in CALIBRATION_METHODS
        }
        terms = loss_terms(point, measured)
        data_loss = sum(v for k, v in terms.items() if k != "prior/lapse")
        row = {**point, **measured, "ceiling": ceiling(point["lapse"], point["n_actions"])}
        row |= {f"loss/{k}": v for k, v in terms.items()}
        row |= {"data_loss": data_loss, "loss": data_loss + terms["prior/lapse"]}
        rows.append({k: round(v, 6) if isinstance(v, float) else v for k, v in row.items()})
    return Calibration(
        rows=rows,
        winner=min(rows, key=lambda r: r["loss"]),
        defaults=next(r for r in rows if all(r[k] == v for k, v in at_defaults.items())),
        reader=dict(defaults.reader),
        targets={s.env: s.target for s in SETTINGS},
        seeds=tuple(seeds),
        env_overrides={k: dict(v) for k, v in overrides.items()},
        runtime_s=round(time.perf_counter() - clock, 1),
    )


# ---------------------------------------------------------------------------------------------------
# Sensitivity
# ---------------------------------------------------------------------------------------------------


@dataclass
class Sensitivity:
    """Success of each method per variant (the defaults, then one reader parameter moved at a time), and
    the margin of each of the paper's conclusions per variant."""

    rows: list[dict[str, Any]]  # variant, setting, phase, method, success
    conclusions: list[dict[str, Any]]  # variant, conclusion, margin (higher - lower), holds
    reader: dict[str, Any]
    seeds: tuple[int, ...]
    runtime_s: float


def variants(defaults: Defaults, moves: Mapping[str, Sequence[float]]) -> list[tuple[str, str, Any]]:
    """(label, parameter, value): the defaults first, then each move that differs from its default."""
    out: list[tuple[str, str, Any]] = [(DEFAULTS_LABEL, "", None)]
    for name, values in moves.items():
        if name not in defaults.reader:
            raise ValueError(f"moves: {name!r} is not a reader parameter (one of {sorted(defaults.reader)})")
        out += [(f"{name}={v:g}", name, v) for v in values if v != defaults.reader[name]]
    return out


def conclusion_name(env: str, lower: str, higher: str) -> str:
    return f"{env}: {lower} < {higher}"


def sensitivity(
    moves: Mapping[str, Sequence[float]] | None = None,
    methods: Sequence[str] = SENSITIVITY_METHODS,
    seeds: Sequence[int] = (0, 1, 2),
    workers: int = 2,
    env_overrides: Mapping[str, Mapping[str, Any]] | None = None,
    defaults: Defaults | None = None,
) -> Sensitivity:
    """Re-run `methods` on controlled drift (full reversal) and the preference stream (overall) with each
    reader parameter in `moves` (default `SENSITIVITY_MOVES`) moved, one at a time. Nothing is tuned."""
    _check_run(seeds, workers)
    clock = time.perf_counter()
    envs = [env for env, _ in SENSITIVITY_SETTINGS]
    phase_of = dict(SENSITIVITY_SETTINGS)
    defaults = defaults or load_defaults(envs, methods)
    overrides = env_overrides or {}
    labels = variants(defaults, SENSITIVITY_MOVES if moves is None else moves)
    plan = {
        (label, env, m): [
            defaults.stream(
                env, m, seed, env_params=overrides.get(env), reader={name: value} if name else None
            )
            for seed in seeds
        ]
        for label, name, value in labels
        for env in envs
        for m in methods
    }
    results = run_all(itertools.chain.from_iterable(plan.values()), workers, desc="sensitivity")
    success = {
        key: round(mean_success(results, streams, phase_of[key[1]]), 6) for key, streams in plan.items()
    }
    rows = [
        {"variant": label, "setting": env, "phase": phase_of[env], "method": m, "success": value}
        for (label, env, m), value in success.items()
    ]
    conclusions = []
    for label, _, _ in labels:
        for env, lower, higher in CONCLUSIONS:
            if (label, env, lower) in success and (label, env, higher) in success:
                margin = round(success[label, env, higher] - success[label, env, lower], 6)
                name = conclusion_name(env, lower, higher)
                conclusions.append(
                    {"variant": label, "conclusion": name, "margin": margin, "holds": margin > 0}
                )
    return Sensitivity(
        rows=rows,
        conclusions=conclusions,
        reader=dict(defaults.reader),
        seeds=tuple(seeds),
        runtime_s=round(time.perf_counter() - clock, 1),
    )


# ---------------------------------------------------------------------------------------------------
# Reports
# ---------------------------------------------------------------------------------------------------

KNOB_NAMES = {
    "lapse": "lapse (reader)",
    "n_actions": "A, actions per job (drift settings)",
    "hint_rate": "hint_rate (preference stream)",
}


def _table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _measured_keys() -> list[str]:
    return [f"{s.env}/{m}" for s in SETTINGS for m in CALIBRATION_METHODS]


def procedure(cal: Calibration) -> str:
    """The calibration procedure in a paragraph (also the README's)."""
    t, r = cal.targets, cal.reader
    shorter = "; ".join(
        f"{env} " + ", ".join(f"{k}={v}" for k, v in params.items())
        for env, params in cal.env_overrides.items()
    )
    return f"""\
The simulated reader's global parameters are calibrated once, for every method and setting together, on
No Memory and Oracle Reset only (never per method; no other method's result enters the loss), by
`python -m runners.llm.calibrate` over seeds {list(cal.seeds)} (shortened for time: {shorter or "nothing"}).
**Targets:** No Memory's paper numbers (controlled drift full reversal {t["controlled_drift"]:.3f},
executable drift full reversal {t["executable_drift"]:.3f}, preference stream overall
{t["preference_stream"]:.3f}) and, in the two drift settings, Oracle Reset at full reversal against the
clean-memory ceiling `1 - lapse (A-1)/A` (shown only current evidence, a reader should err only when it
lapses; the paper reports no Oracle Reset number). Oracle Reset in the preference stream is run and shown
but not scored: preferences change at random times there, not at its single reset. **Knobs:** what those
two methods respond to: the reader's `lapse`, the drift settings' number of actions A (No Memory guesses
one in A whatever the reader does) and the preference stream's `hint_rate`, treated as that setting's
calibration knob because it describes the simulated users (how often a session states its preference),
the paper does not report it, and it alone sets No Memory's score there. **Loss:** the sum of squared
errors against the targets plus `(lapse - {LAPSE_PRIOR})^2`. The prior is needed because the targets
cannot place lapse: drift No Memory is identical for every lapse, and the preference target trades lapse
against hint_rate along a ridge, which the prior resolves (a lapse 0.01 away from {LAPSE_PRIOR} costs as
much as missing a target by 0.01). **Set a priori** (neither No Memory, which sees no memory lines, nor
Oracle Reset in the drift settings, whose memory lines all agree with the current regime, responds to
them): w_failure / w_support = {r["w_failure"] / r["w_support"]:g}, w_hint / w_support =
{r["w_hint"] / r["w_support"]:g} and the recency half-life of {r["half_life"]:g} steps; w_support =
{r["w_support"]:g} only fixes the unit (scaling all three weights together changes no choice).
sensitivity.md shows what moving them, and lapse, does to the paper's conclusions."""


def calibration_markdown(cal: Calibration) -> str:
    win, dft = cal.winner, cal.defaults
    measured = _measured_keys()
    lapses = sorted({r["lapse"] for r in cal.rows})
    actions = sorted({r["n_actions"] for r in cal.rows})
    hints = sorted({r["hint_rate"] for r in cal.rows})
    drift = {(r["lapse"], r["n_actions"]): r for r in cal.rows}
    pref = {(r["lapse"], r["hint_rate"]): r for r in cal.rows}
    profile = [min((r for r in cal.rows if r["lapse"] == x), key=lambda r: r["data_loss"]) for x in lapses]
    ranked = sorted(cal.rows, key=lambda r: r["loss"])[:10]
    drift_cols = [f"{e}/{m}" for m in CALIBRATION_METHODS for e in ("controlled_drift", "executable_drift")]

    def target(key: str) -> str:
        env, method = key.split("/")
        if method == "no_memory":
            return f"{cal.targets[env]:.3f} (paper)"
        return "ceiling" if next(s for s in SETTINGS if s.env == env).oracle_ceiling else "(not scored)"

    def pref_table(method: str) -> str:
        rows = [[x, *(pref[x, h][f"preference_stream/{method}"] for h in hints)] for x in lapses]
        return _table(["lapse \\ hint_rate", *(f"{h:g}" for h in hints)], rows)

    return "\n".join(
        [
            "# Calibration of the simulated reader",
            "",
            procedure(cal),
            "",
            "## Selected point vs the configured defaults",
            "",
            _table(
                ["knob", "configured default", "selected"],
                [(KNOB_NAMES[k], dft[k], win[k]) for k in ("lapse", "n_actions", "hint_rate")],
            ),
            "",
            _table(
                ["measured", "target", "at defaults", "at selected"],
                [(m, target(m), dft[m], win[m]) for m in measured]
                + [
                    ("ceiling 1 - lapse (A-1)/A", "", dft["ceiling"], win["ceiling"]),
                    ("loss (with prior)", "", f"{dft['loss']:.5f}", f"{win['loss']:.5f}"),
                    ("loss (data only)", "", f"{dft['data_loss']:.5f}", f"{win['data_loss']:.5f}"),
                ],
            ),
            "",
            "## Drift settings at full reversal, by lapse and A",
            "",
            _table(
                ["lapse", "A", *drift_cols, "ceiling"],
                [
                    (x, a, *(drift[x, a][c] for c in drift_cols), drift[x, a]["ceiling"])
                    for x in lapses
                    for a in actions
                ],
            ),
            "",
            "## Preference stream, overall: No Memory",
            "",
            pref_table("no_memory"),
            "",
            "Oracle Reset (not scored):",
            "",
            pref_table("oracle_reset"),
            "",
            "## Profile: the best point for each lapse by the data alone",
            "",
            "A flat profile means the targets cannot place lapse; the prior then does.",
            "",
            _table(
                ["lapse", "A", "hint_rate", "data loss", "loss with prior"],
                [
                    (r["lapse"], r["n_actions"], r["hint_rate"], f"{r['data_loss']:.5f}", f"{r['loss']:.5f}")
                    for r in profile
                ],
            ),
            "",
            "## The ten best grid points",
            "",
            _table(
                ["lapse", "A", "hint_rate", *measured, "data loss", "loss"],
                [
                    (
                        r["lapse"],
                        r["n_actions"],
                        r["hint_rate"],
                        *(r[m] for m in measured),
                        f"{r['data_loss']:.5f}",
                        f"{r['loss']:.5f}",
                    )
                    for r in ranked
                ],
            ),
            "",
            f"All {len(cal.rows)} grid points, with each loss term, are in calibration.json.",
            "",
        ]
    )


def sensitivity_markdown(sens: Sensitivity) -> str:
    labels = list(dict.fromkeys(r["variant"] for r in sens.rows))
    methods = list(dict.fromkeys(r["method"] for r in sens.rows))
    value = {(r["variant"], r["setting"], r["method"]): r["success"] for r in sens.rows}
    experiment = {s.env: s.experiment for s in SETTINGS}
    reader = ", ".join(f"{k}={v:g}" for k, v in sens.reader.items() if isinstance(v, int | float))
    parts = [
        "# Sensitivity of the results to the simulated reader's parameters",
        "",
        f"`python -m runners.llm.calibrate`, seeds {list(sens.seeds)}. Every environment, memory method and "
        f"reader parameter is at its configured default ({reader}) except the one named in the row, "
        "moved one at a time. The weights and the half-life are set a priori (the calibration targets "
        "cannot identify them) and lapse is placed by its prior (calibration.md), so these rows show "
        "which of the paper's conclusions follow from the memory methods and which from the reader "
        "model. Nothing here is tuned.",
        "",
    ]
    for env, phase in SENSITIVITY_SETTINGS:
        rows = [[label, *(value.get((label, env, m), math.nan) for m in methods)] for label in labels]
        paper = [lookup(experiment[env], env, phase, m) for m in methods]
        rows.append(["paper", *((n.value if n else "") for n in paper)])
        title = f"## {env}, {phase.replace('_', ' ')}: success"
        parts += [title, "", _table(["variant", *methods], rows), ""]
    names = list(dict.fromkeys(c["conclusion"] for c in sens.conclusions))
    by_cell = {(c["variant"], c["conclusion"]): c for c in sens.conclusions}
    verdict = {True: "yes", False: "NO"}
    cells = [
        [
            label,
            *(
                f"{c['margin']:+.3f} {verdict[c['holds']]}" if c else ""
                for c in (by_cell.get((label, n)) for n in names)
            ),
        ]
        for label in labels
    ]
    parts += ["## The paper's conclusions: margin (higher minus lower) and whether it holds", ""]
    parts += [_table(["variant", *names], cells), ""]
    for n in names:
        failing = [c["variant"] for c in sens.conclusions if c["conclusion"] == n and not c["holds"]]
        parts.append(
            f"- `{n}`: " + (f"fails under {', '.join(failing)}." if failing else "holds under every variant.")
        )
    parts.append("")
    return "\n".join(parts)


def write_calibration(cal: Calibration, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "calibration.json").write_text(json.dumps(asdict(cal), indent=1) + "\n")
    (out_dir / "calibration.md").write_text(calibration_markdown(cal))


def write_sensitivity(sens: Sensitivity, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "sensitivity.json").write_text(json.dumps(asdict(sens), indent=1) + "\n")
    (out_dir / "sensitivity.md").write_text(sensitivity_markdown(sens))


def grid_text(cal: Calibration) -> str:
    """The grid as plain text, the selected point and the defaults marked."""
    short = [
        f"{SHORT[k.split('/')[0]]}/{'nm' if k.endswith('no_memory') else 'or'}" for k in _measured_keys()
    ]
    lines = [
        f"{'lapse':>6} {'A':>2} {'hint':>6} "
        + " ".join(f"{h:>6}" for h in short)
        + f" {'data':>8} {'loss':>8}"
    ]
    for r in cal.rows:
        mark = " <- selected" if r is cal.winner else ""
        mark += " <- defaults" if r is cal.defaults else ""
        values = " ".join(f"{r[m]:6.3f}" for m in _measured_keys())
        lines.append(
            f"{r['lapse']:6.3f} {r['n_actions']:2d} {r['hint_rate']:6.3f} {values} "
            f"{r['data_loss']:8.5f} {r['loss']:8.5f}{mark}"
        )
    for name, row in (("selected", cal.winner), ("defaults", cal.defaults)):
        knobs = ", ".join(f"{k}={row[k]:g}" for k in ("lapse", "n_actions", "hint_rate"))
        lines.append(f"{name}: {knobs} (loss {row['loss']:.5f}, data loss {row['data_loss']:.5f})")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m runners.llm.calibrate", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--seeds", type=int, default=3, help="run seeds 0..N-1 (default 3)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument(
        "--out", type=Path, default=Path("results"), help="output directory (default results)"
    )
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error(f"--seeds must be >= 1, got {args.seeds}")
    if args.workers < 1:
        parser.error(f"--workers must be >= 1, got {args.workers}")
    seeds = tuple(range(args.seeds))
    clock = time.perf_counter()
    cal = calibrate(seeds=seeds, workers=args.workers)
    print(grid_text(cal), flush=True)
    write_calibration(cal, args.out)
    sens = sensitivity(seeds=seeds, workers=args.workers)
    write_sensitivity(sens, args.out)
    print(sensitivity_markdown(sens))
    print(
        f"wrote {args.out}/calibration.{{json,md}} and {args.out}/sensitivity.{{json,md}} "
        f"in {time.perf_counter() - clock:.0f} s "
        f"(calibration {cal.runtime_s:.0f} s, sensitivity {sens.runtime_s:.0f} s)"
    )


if __name__ == "__main__":
    main()

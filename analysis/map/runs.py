"""The map's runs, one summary row each, and the choice of every method's parameters per cell.

The analysis reads the map as the driver wrote it (`map.json`: the grid, the methods, the seeds, each
method's defaults and tuning grid) and the run logs; it never imports the harness. A run belongs to the
map when it is a complete run of the map's experiment whose environment is the experiment's with one
cell's values, whose memory parameters are its method's defaults with at most a tuning grid point's
values, and whose truncation (`max_episodes`) is the map's. Each run is verified against its checksums
first, as every analysis does.

The choices read only runs on the tuning seeds: a run on an evaluation seed never decides a parameter
(`choose`) nor which simple baseline TEPA is compared with (`tuning_scores`).
"""

from __future__ import annotations

import json
import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from analysis.data.load import find_runs, read_events
from analysis.streamlog import stream

#: Keys of a logged memory config that are not the method's parameters.
_NOT_PARAMS = frozenset({"_target_", "display", "label"})
_READERS = 4
#: TEPA's revocation rules, as the first word of a revocation's reason names them.
RULES = ("posterior", "recent")


def read_map(path: str | Path) -> dict[str, Any]:
    """map.json, or a ValueError naming it: unreadable, not JSON, nested too deep to parse, or not the
    map the driver writes (`map_problem`)."""
    path = Path(path)
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:
        raise ValueError(f"{path}: cannot read the map (JSON nested too deep)") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read the map ({str(exc).splitlines()[0]})") from None
    problem = map_problem(spec)
    if problem is not None:
        raise ValueError(f"{path}: not a map as `python -m runners.map` writes it ({problem})")
    return spec


def _number(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value)


def _ints(value: Any) -> bool:
    return isinstance(value, list) and all(type(v) is int for v in value)


def map_problem(spec: Any) -> str | None:
    """What in a parsed map.json is not as the driver writes it (`runners.map.MapSpec.to_json`), or None:
    the fields the analysis reads, with their types."""
    if not isinstance(spec, dict):
        return f"a JSON {type(spec).__name__}, expected an object"
    for name in ("name", "experiment"):
        if not isinstance(spec.get(name), str):
            return f"{name!r} must be a text"
    axes = spec.get("axes")
    if not isinstance(axes, dict) or not axes:
        return "'axes' must be an object of env keys to lists of numbers"
    for key, values in axes.items():
        if not key.startswith("env.") or not isinstance(values, list) or not values:
            return f"axis {key!r} must be an env key with a non-empty list of numbers"
        if not all(_number(v) for v in values):
            return f"axis {key!r} holds a value that is not a finite number"
    methods = spec.get("methods")
    if not isinstance(methods, list) or not methods or not all(isinstance(m, str) for m in methods):
        return "'methods' must be a non-empty list of texts"
    for name in ("eval_seeds", "tuning_seeds"):
        if not _ints(spec.get(name)):
            return f"{name!r} must be a list of integers"
    if not isinstance(spec.get("env"), dict):
        return "'env' must be an object"
    defaults = spec.get("memory_defaults")
    if not isinstance(defaults, dict) or not all(isinstance(defaults.get(m), dict) for m in methods):
        return "'memory_defaults' must hold an object for every method"
    tune = spec.get("tune")
    if not isinstance(tune, dict):
        return "'tune' must be an object of methods to tuning grids"
    for method, grid in tune.items():
        if not isinstance(grid, dict) or not all(isinstance(v, list) and v for v in grid.values()):
            return f"the tuning grid of {method!r} must be an object of parameters to non-empty lists"
    if spec.get("max_episodes") is not None and type(spec["max_episodes"]) is not int:
        return "'max_episodes' must be an integer or null"
    if spec.get("evidence_budget") is not None and not _number(spec["evidence_budget"]):
        return "'evidence_budget' must be a number or null"
    return None


def params_key(params: dict[str, Any]) -> str:
    """A canonical text of a parameter set (the same values give the same text)."""
    return json.dumps(params, sort_keys=True)


def summarise(root: str | Path, spec: dict[str, Any]) -> pd.DataFrame:
    """One row per run of the map under `root`: method, cell (index into the grid), seed, `params`
    (params_key of the full memory parameters), the mean success overall and per phase (`success`,
    `success.<phase>`) and the mean prompt tokens per decision (`tokens`)."""
    root = Path(root)
    cells = grid_cells(spec["axes"])
    with ThreadPoolExecutor(max_workers=_READERS) as pool:
        rows = [r for r in pool.map(lambda d: _summary(d, spec, cells), find_runs(root)) if r is not None]
    columns = ["method", "cell", "seed", "params", "success", "tokens"]
    frame = pd.DataFrame(rows)
    if frame.empty:
        return pd.DataFrame(columns=columns)
    return frame.sort_values(["cell", "method", "params", "seed"], kind="stable").reset_index(drop=True)


def point_params(spec: dict[str, Any], method: str, point: dict[str, Any]) -> str:
    """params_key of a method's defaults with `point` over them."""
    return params_key({**spec["memory_defaults"][method], **point})


def grid_points(grid: dict[str, list[Any]] | None) -> list[dict[str, Any]]:
    """A tuning grid's points (param -> value) in declaration order, the last parameter varying fastest;
    none for no grid."""
    if not grid:
        return []
    points: list[dict[str, Any]] = [{}]
    for param, values in grid.items():
        points = [{**p, param: v} for p in points for v in values]
    return points


def grid_cells(axes: dict[str, list[float]]) -> list[dict[str, float]]:
    """The grid's cells (env key -> value) in grid order, the last axis varying fastest."""
    cells: list[dict[str, float]] = [{}]
    for key, values in axes.items():
        cells = [{**c, key: float(v)} for c in cells for v in values]
    return cells


def choose(runs: pd.DataFrame, spec: dict[str, Any]) -> dict[tuple[int, str], dict[str, Any]]:
    """Per (cell, tuned method), the grid point with the highest mean success over the tuning seeds
    (ties: the first in grid order). Only runs on tuning seeds are read; a ValueError names a point
    that lacks a tuning seed (stage 1 incomplete)."""
    seeds = set(spec["tuning_seeds"])
    tuning = _uncapped(runs[runs["seed"].isin(seeds)])
    chosen = {}
    for cell in range(len(grid_cells(spec["axes"]))):
        for method in spec["methods"]:
            best, best_score = None, -1.0
            for point in grid_points(spec["tune"].get(method)):
                sel = tuning[
                    (tuning["cell"] == cell)
                    & (tuning["method"] == method)
                    & (tuning["params"] == point_params(spec, method, point))
                ]
                if set(sel["seed"]) != seeds:
                    missing = sorted(seeds - set(sel["seed"]))
                    raise ValueError(
                        f"tuning incomplete: cell {cell}, {method} {point}: no run on seed {missing[0]}"
                    )
                score = float(sel["success"].mean())
                if score > best_score:
                    best, best_score = point, score
            if best is not None:
                chosen[(cell, method)] = best
    return chosen


def tuning_scores(
    runs: pd.DataFrame, spec: dict[str, Any], chosen: dict[tuple[int, str], dict[str, Any]]
) -> pd.DataFrame:
    """Mean success over the tuning seeds per (`setting`, cell, method), in the settings of `evaluation`
    (defaults; tuned: the chosen point, an untuned method's defaults; budget: the chosen point under the
    map's `evidence_budget`), as column `tuning`. Only runs on tuning seeds are read; a combination is
    left out unless every tuning seed ran it."""
    seeds = set(spec["tuning_seeds"])
    tuning = runs[runs["seed"].isin(seeds)]
    if "max_evidence" not in tuning:
        tuning = tuning.assign(max_evidence=None)
    capped = _capped(tuning)
    budget = spec.get("evidence_budget")
    rows = []
    for (cell, method), group in tuning.groupby(["cell", "method"], sort=True):
        free, cap = group[~capped[group.index]], group[capped[group.index]]
        tuned = point_params(spec, method, chosen.get((cell, method), {}))
        picks = {
            "defaults": free[free["params"] == point_params(spec, method, {})],
            "tuned": free[free["params"] == tuned],
            "budget": cap[(cap["params"] == tuned) & (cap["max_evidence"] == budget)],
        }
        for setting, sel in picks.items():
            if len(sel) and set(sel["seed"]) == seeds:
                rows.append({"setting": setting, "cell": int(cell), "method": method,
                             "tuning": float(sel["success"].mean())})  # fmt: skip
    return pd.DataFrame(rows, columns=["setting", "cell", "method", "tuning"])


def _capped(runs: pd.DataFrame) -> pd.Series:
    """Which runs ran under an evidence budget (`max_evidence` set)."""
    if "max_evidence" not in runs:
        return pd.Series(False, index=runs.index)
    return runs["max_evidence"].notna()


def _uncapped(runs: pd.DataFrame) -> pd.DataFrame:
    return runs[~_capped(runs)]


def evaluation(
    runs: pd.DataFrame, spec: dict[str, Any], chosen: dict[tuple[int, str], dict[str, Any]]
) -> pd.DataFrame:
    """The evaluation runs, each labelled `setting` "defaults", "tuned" (a run that is both appears
    twice) or "budget": the tuned map is every method at its chosen point (an untuned method: its
    defaults); the budget map the same with the map's `evidence_budget` as `max_evidence`."""
    runs = runs[runs["seed"].isin(set(spec["eval_seeds"]))]
    capped = _capped(runs)
    budget = spec.get("evidence_budget")
    parts = []
    for (cell, method), group in runs.groupby(["cell", "method"], sort=True):
        defaults = point_params(spec, method, {})
        tuned = point_params(spec, method, chosen.get((cell, method), {}))
        free, cap = group[~capped[group.index]], group[capped[group.index]]
        parts.append(free[free["params"] == defaults].assign(setting="defaults"))
        parts.append(free[free["params"] == tuned].assign(setting="tuned"))
        if budget is not None:
            parts.append(
                cap[(cap["params"] == tuned) & (cap["max_evidence"] == budget)].assign(setting="budget")
            )
    if not parts:
        return runs.assign(setting=pd.Series(dtype=str))
    return pd.concat(parts, ignore_index=True)


def _summary(run_dir: Path, spec: dict[str, Any], cells: list[dict[str, float]]) -> dict[str, Any] | None:
    meta = stream.read_meta(run_dir) or {}
    config = meta.get("config") or {}
    method = meta.get("memory")
    if meta.get("experiment") != spec["name"] or method not in spec["methods"]:
        return None
    if config.get("max_episodes") != spec.get("max_episodes"):
        return None
    env = {k: v for k, v in (config.get("env") or {}).items() if k != "_target_"}
    cell = next(
        (
            i
            for i, c in enumerate(cells)
            if env == {**spec["env"], **{k.removeprefix("env."): v for k, v in c.items()}}
        ),
        None,
    )
    if cell is None:
        return None
    params = {k: v for k, v in (config.get("memory") or {}).items() if k not in _NOT_PARAMS}
    problem = stream.verify(run_dir, meta) if "files" in meta else None
    if problem is not None:
        raise ValueError(f"{problem}; rerun the map to redo it")
    read_events(run_dir)  # its archive as the analysis checks it: JSON objects, `t` and `id` in range
    columns = ["t", "key", "correct", "phase", "success", "prompt_tokens", "revocations"]
    table = pq.read_table(run_dir / "episodes.parquet", columns=columns)
    success = table["success"].cast("int64")
    row: dict[str, Any] = {
        "method": method,
        "cell": cell,
        "seed": int(meta["seed"]),
        "params": params_key(params),
        "max_evidence": config.get("max_evidence"),
        "success": pc.mean(success).as_py(),
        "tokens": pc.mean(table["prompt_tokens"]).as_py(),
        "revocations": int(pc.max(table["revocations"]).as_py() or 0),  # a cumulative counter
    }
    phases = table["phase"].to_pylist()
    by_phase: dict[str, list[int]] = {}
    for phase, ok in zip(phases, success.to_pylist(), strict=True):
        by_phase.setdefault(phase, []).append(ok)
    row.update({f"success.{phase}": sum(v) / len(v) for phase, v in by_phase.items()})
    row.update(_revocations(run_dir, table))
    return row


def _revocations(run_dir: Path, table: pa.Table) -> dict[str, int]:
    """Revocations by rule (`posterior`, `recent`: the first word of the event's reason) and how many of
    them revoked a *good* precedent: its value was the right action of its key at that episode (the
    episode's `correct`; a revocation happens in the feedback of an episode of its key)."""
    counts = {f"revoked.{rule}": 0 for rule in RULES} | {f"revoked_good.{rule}": 0 for rule in RULES}
    path = run_dir / "archive.jsonl"
    if not path.is_file() or path.stat().st_size == 0:
        return counts
    correct = dict(zip(table["t"].to_pylist(), table["correct"].to_pylist(), strict=True))
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if '"revoked"' not in line:
                continue
            try:
                event = json.loads(line)
            except (ValueError, RecursionError):
                raise ValueError(f"{path}: unreadable (a line is not JSON or nested too deep)") from None
            if not isinstance(event, dict) or event.get("event") != "revoked":
                continue
            rule = str(event.get("reason", "")).split(":", 1)[0]
            if rule not in RULES:
                continue
            counts[f"revoked.{rule}"] += 1
            counts[f"revoked_good.{rule}"] += int(correct.get(event.get("t")) == event.get("value"))
    return counts

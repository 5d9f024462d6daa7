"""Metrics over run logs: success per phase, MPI, paired tests, adaptation speed, lifecycle and cost.

Every estimate is over seeds (one value per run), with the bootstrap CIs of analysis.stats. Frames are
built in a fixed order (`analysis.metrics.display`: paper experiments first, methods in METHOD_ORDER;
phases in stream order), so the tables and figures made from them are deterministic.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from analysis.data.load import LABELS, RunLogs, experiment_variants, in_sweep
from analysis.metrics import memory_quality
from analysis.metrics.display import (
    METHOD_LABELS,
    estimate_columns,
    settings,
    sorted_experiments,
    sorted_methods,
)
from analysis.metrics.runs import labelled, run_labels
from analysis.reference.configuration import paper_departures
from analysis.stats import (
    MIN_BOOTSTRAP_SEEDS,
    Estimate,
    PairedComparison,
    bootstrap_cis,
    holm,
    mean_cis,
    paired_comparisons,
    two_level_mean_cis,
)

NO_MEMORY = "no_memory"
ORACLE_RESET = "oracle_reset"
TEPA_REV = "tepa_rev"
TEPA_FULL = "tepa_full"
#: Pseudo-phase for the whole stream.
OVERALL = "overall"
CONDITION = ["experiment", "env", "memory"]
DEFAULT_WINDOW = 20
DEFAULT_TOLERANCE = 0.1
#: How the per-phase success intervals resample: seeds only (the default), or seeds and then the
#: episodes of each drawn seed (`analysis.stats.two_level_mean_cis`), which shows episode-level noise.
INTERVALS = ("seeds", "seeds+episodes")
#: Slack in threshold comparisons so that e.g. 18/20 >= 1 - 0.1 holds despite binary floating point.
_EPS = 1e-9


def phase_orders(episodes: pd.DataFrame) -> dict[tuple[str, str], list[str]]:
    """Phases of each (experiment, env) in order of first appearance in t (ties by name)."""
    first = episodes.groupby(["experiment", "env", "phase"], sort=False)["t"].min().reset_index()
    orders: dict[tuple[str, str], list[str]] = {}
    for (experiment, env), group in first.groupby(["experiment", "env"], sort=False):
        rows = sorted(zip(group["t"], group["phase"], strict=True))
        orders[(str(experiment), str(env))] = [str(p) for _, p in rows]
    return orders


def success_per_seed(episodes: pd.DataFrame) -> pd.DataFrame:
    """Success rate of each run in each phase and over the whole stream (phase OVERALL).

    Columns: run, experiment, env, memory, seed, phase, success, n_episodes.
    """
    labels = run_labels(episodes, LABELS)
    success = episodes.groupby(["run", "phase"], sort=False)["success"]
    by_phase = labelled(success.agg(["mean", "size"]), labels)
    overall = labelled(episodes.groupby("run", sort=False)["success"].agg(["mean", "size"]), labels)
    overall.insert(1 + len(LABELS), "phase", OVERALL)
    frame = pd.concat([by_phase, overall], ignore_index=True)
    return frame.rename(columns={"mean": "success", "size": "n_episodes"})


def _phases_with_overall(phases: dict[tuple[str, str], list[str]], setting: tuple[str, str]) -> list[str]:
    return [*phases.get(setting, []), OVERALL]


class _SeedValues:
    """Per-seed values of every (experiment, env, memory, phase), indexed once for fast matching."""

    _EMPTY = (np.empty(0, dtype=np.int64), np.empty(0))

    def __init__(self, frame: pd.DataFrame, value: str) -> None:
        self.values: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
        self.methods: dict[tuple[str, str], list[str]] = {}
        if frame.empty:
            return
        ordered = frame.sort_values("seed", kind="stable")
        for key, group in ordered.groupby(["experiment", "env", "memory", "phase"], sort=False):
            self.values[key] = (group["seed"].to_numpy(), group[value].to_numpy(dtype=float))
        for experiment, env, memory, _ in self.values:
            self.methods.setdefault((experiment, env), []).append(memory)
        self.methods = {k: sorted_methods(v) for k, v in self.methods.items()}

    def get(self, setting: tuple[str, str], method: str, phase: str) -> tuple[np.ndarray, np.ndarray]:
        """(seeds, values) in seed order; empty arrays when there is no such run."""
        return self.values.get((*setting, method, phase), self._EMPTY)

    def matched(self, setting: tuple[str, str], a: str, b: str, phase: str) -> tuple[np.ndarray, np.ndarray]:
        """Values of methods a and b on the seeds both have, in seed order."""
        seeds_a, values_a = self.get(setting, a, phase)
        seeds_b, values_b = self.get(setting, b, phase)
        _, ia, ib = np.intersect1d(seeds_a, seeds_b, return_indices=True)
        return values_a[ia], values_b[ib]


def summarize_success(
    per_seed: pd.DataFrame,
    phases: dict[tuple[str, str], list[str]],
    *,
    episodes: pd.DataFrame | None = None,
    intervals: str = "seeds",
) -> pd.DataFrame:
    """Mean success over seeds with 95% CI per (experiment, env, memory, phase).

    `intervals="seeds"`: BCa bootstrap over seeds. `"seeds+episodes"`: the two-level percentile
    bootstrap (seeds, then episodes within each drawn seed), which needs `episodes`.
    """
    if intervals not in INTERVALS:
        raise ValueError(f"intervals: must be one of {', '.join(INTERVALS)}, got {intervals!r}")
    index = _SeedValues(per_seed, "success")
    cells, samples = [], []
    for setting in settings(per_seed):
        for method in index.methods[setting]:
            for phase in _phases_with_overall(phases, setting):
                seeds, values = index.get(setting, method, phase)
                if len(values):
                    cells.append(
                        {"experiment": setting[0], "env": setting[1], "memory": method, "phase": phase}
                    )
                    samples.append(seeds if intervals != "seeds" else values)
    if intervals == "seeds":
        estimates = mean_cis(samples)
    else:
        if episodes is None:
            raise ValueError("episodes: the two-level bootstrap needs the episode outcomes")
        outcomes = _episode_outcomes(episodes)
        estimates = two_level_mean_cis(
            [
                [outcomes[(c["experiment"], c["env"], c["memory"], int(s), c["phase"])] for s in seeds]
                for c, seeds in zip(cells, samples, strict=True)
            ]
        )
    records = [c | estimate_columns(e) for c, e in zip(cells, estimates, strict=True)]
    return pd.DataFrame.from_records(records)


def _episode_outcomes(episodes: pd.DataFrame) -> dict[tuple, np.ndarray]:
    """0/1 success of every run's episodes, per phase and over the whole stream (phase OVERALL)."""
    success = episodes["success"].to_numpy(dtype=float)
    outcomes: dict[tuple, np.ndarray] = {}
    for (experiment, env, memory, seed), rows in episodes.groupby(list(LABELS), sort=False).indices.items():
        outcomes[(experiment, env, memory, int(seed), OVERALL)] = success[rows]
    keys = [*LABELS, "phase"]
    for (experiment, env, memory, seed, phase), rows in episodes.groupby(keys, sort=False).indices.items():
        outcomes[(experiment, env, memory, int(seed), phase)] = success[rows]
    return outcomes


def _pollution(reference: np.ndarray, method: np.ndarray, axis: int = -1) -> np.ndarray:
    ref = np.mean(reference, axis=axis)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (ref - np.mean(method, axis=axis)) / ref


def mpi(
    per_seed: pd.DataFrame, phases: dict[tuple[str, str], list[str]], *, reference: str = NO_MEMORY
) -> pd.DataFrame:
    """Memory Pollution Index per method and phase: (S_ref - S_m) / S_ref, S_ref = No Memory's success.

    S_ref and S_m are means over the seeds both methods ran (seed-matched), so MPI is a ratio of means
    (the paper's Append-Only: (0.309 - 0.210) / 0.309 = 0.32). The CI resamples seeds jointly (paired
    bootstrap of the ratio). MPI > 0: memory made the agent worse than no memory at all. NaN when
    S_ref = 0. Settings without `reference` runs are absent from the result.
    """
    index = _SeedValues(per_seed, "success")
    cells, pairs = [], []
    for setting in settings(per_seed):
        if reference not in index.methods[setting]:
            continue
        for method in index.methods[setting]:
            if method == reference:
                continue
            for phase in _phases_with_overall(phases, setting):
                ref, values = index.matched(setting, reference, method, phase)
                if len(ref):
                    cells.append(
                        {"experiment": setting[0], "env": setting[1], "memory": method, "phase": phase}
                    )
                    pairs.append((ref, values))
    defined = [i for i, (ref, _) in enumerate(pairs) if ref.mean() != 0]
    estimated = bootstrap_cis([pairs[i] for i in defined], _pollution, paired=True)
    estimates = dict(zip(defined, estimated, strict=True))
    records = []
    for i, (cell, (ref, values)) in enumerate(zip(cells, pairs, strict=True)):
        estimate = estimates.get(i, Estimate(float("nan"), float("nan"), float("nan"), len(ref)))
        records.append(
            cell | estimate_columns(estimate) | {"s_ref": float(ref.mean()), "s_method": float(values.mean())}
        )
    return pd.DataFrame.from_records(records)


def paired_tests(
    per_seed: pd.DataFrame, phases: dict[tuple[str, str], list[str]], *, method: str = TEPA_REV
) -> pd.DataFrame:
    """`method` against every other method on matched seeds, per setting and phase.

    Each row: mean difference (method - other) with paired bootstrap CI, two-sided sign-flip p-value
    (exact up to EXACT_MAX_PAIRS seeds: with fewer than 6 seeds it cannot fall below 0.05), its Holm
    adjustment across the other methods of the same setting and phase (one family), the paired
    bootstrap p-value (null imposed by centring, `analysis.stats.bootstrap_pvalue`) with its Holm
    adjustment, and Cohen's d_z.
    """
    index = _SeedValues(per_seed, "success")
    families, cells, pairs = [], [], []
    for setting in settings(per_seed):
        if method not in index.methods[setting]:
            continue
        others = [m for m in index.methods[setting] if m != method]
        for phase in _phases_with_overall(phases, setting):
            family = []
            for other in others:
                a, b = index.matched(setting, method, other, phase)
                if len(a):
                    family.append(len(cells))
                    cells.append(
                        {"experiment": setting[0], "env": setting[1], "phase": phase, "memory": method}
                        | {"other": other}
                    )
                    pairs.append((a, b))
            families.append(family)
    comparisons = [_withheld(c) for c in paired_comparisons(pairs)]
    records = []
    for family in families:
        adjusted = holm([comparisons[i].p_value for i in family])
        adjusted_boot = holm([comparisons[i].p_bootstrap for i in family])
        for i, p_holm, p_boot_holm in zip(family, adjusted, adjusted_boot, strict=True):
            c = comparisons[i]
            records.append(
                cells[i]
                | {"n": c.n, "mean_method": c.mean_a, "mean_other": c.mean_b}
                | {"diff": c.diff.mean, "diff_low": c.diff.low, "diff_high": c.diff.high}
                | {"p": c.p_value, "p_holm": float(p_holm), "d_z": c.d_z}
                | {"p_boot": c.p_bootstrap, "p_boot_holm": float(p_boot_holm)}
            )
    return pd.DataFrame.from_records(records)


def _withheld(comparison: PairedComparison) -> PairedComparison:
    """The comparison without what fewer than MIN_BOOTSTRAP_SEEDS seeds cannot support: the bootstrap
    interval and p-value and d_z (the exact sign-flip p holds at any n)."""
    if comparison.n >= MIN_BOOTSTRAP_SEEDS:
        return comparison
    nan = float("nan")
    diff = replace(comparison.diff, low=nan, high=nan)
    return replace(comparison, diff=diff, p_bootstrap=nan, d_z=nan)


def recovery_lag(
    success: Sequence[float] | np.ndarray, target: float, *, window: int, tolerance: float
) -> float:
    """Episodes of a phase that pass before its success rate is back at `target`.

    Precisely: the smallest i >= 0 such that the mean success over episodes i .. i + window - 1 of the
    phase (a window lying entirely inside the phase, counted from the boundary) is >= target - tolerance;
    NaN if no such window exists (the run never recovered within the phase). A phase shorter than
    `window` uses a window of its whole length. 0 means the first `window` episodes after the boundary
    were already at the target level.
    """
    if window < 1:
        raise ValueError(f"window: must be >= 1, got {window}")
    if tolerance < 0:
        raise ValueError(f"tolerance: must be >= 0, got {tolerance}")
    s = np.asarray(success, dtype=float)
    if not len(s):
        return float("nan")
    w = min(window, len(s))
    cumulative = np.concatenate(([0.0], np.cumsum(s)))
    means = (cumulative[w:] - cumulative[:-w]) / w
    hits = np.flatnonzero(means >= target - tolerance - _EPS)
    return float(hits[0]) if len(hits) else float("nan")


def adaptation(
    episodes: pd.DataFrame,
    phases: dict[tuple[str, str], list[str]],
    *,
    window: int = DEFAULT_WINDOW,
    tolerance: float = DEFAULT_TOLERANCE,
    reference: str | None = None,
) -> pd.DataFrame:
    """Adaptation lag of every run after every phase boundary.

    The target is a stable level: the run's mean success over the last `window` episodes of the first
    phase (its converged performance before any drift). With `reference=None` each run is measured
    against its own stable level; with a method name (e.g. "oracle_reset") against that method's stable
    level on the same seed, a common bar for all methods (NaN target and lag when that method has no
    run on the seed). The lag is `recovery_lag` of the new phase.
    Columns: experiment, env, memory, seed, phase (the phase entered), boundary_t, target, lag.
    """
    if window < 1:
        raise ValueError(f"window: must be >= 1, got {window}")
    ordered = episodes.sort_values(["run", "t"], kind="stable")
    phase_of = ordered["phase"].to_numpy()
    success = ordered["success"].to_numpy(dtype=float)
    t = ordered["t"].to_numpy()
    stable: dict[tuple[str, str, str, int], float] = {}
    segments = []
    for (experiment, env, memory, seed), rows in ordered.groupby(list(LABELS), sort=False).indices.items():
        order = phases[(experiment, env)]
        masks = {phase: rows[phase_of[rows] == phase] for phase in order}
        if len(order) < 2 or not len(masks[order[0]]):
            continue
        stable[(experiment, env, memory, seed)] = float(success[masks[order[0]]][-window:].mean())
        segments += [(experiment, env, memory, seed, p, masks[p]) for p in order[1:] if len(masks[p])]
    records = []
    for experiment, env, memory, seed, phase, rows in segments:
        target = stable.get((experiment, env, memory if reference is None else reference, seed), float("nan"))
        lag = (
            float("nan")
            if np.isnan(target)
            else recovery_lag(success[rows], target, window=window, tolerance=tolerance)
        )
        records.append(
            {"experiment": experiment, "env": env, "memory": memory, "seed": int(seed), "phase": phase}
            | {"boundary_t": int(t[rows[0]]), "target": target, "lag": lag}
        )
    columns = ["experiment", "env", "memory", "seed", "phase", "boundary_t", "target", "lag"]
    return pd.DataFrame.from_records(records, columns=columns)


def summarize_adaptation(
    lags: pd.DataFrame, phases: dict[tuple[str, str], list[str]], *, reference: str = ORACLE_RESET
) -> pd.DataFrame:
    """Mean lag over the seeds that recovered, and each method's lag minus `reference`'s.

    Seeds that never recovered are counted (n_recovered of n) but not averaged: their lag is censored
    at the phase end. The difference to `reference` is paired over seeds on which both recovered.
    """
    index = _SeedValues(lags, "lag")
    cells, n_runs, recovered, diffs = [], [], [], []
    for setting in settings(lags):
        for phase in phases[setting][1:]:
            for method in index.methods[setting]:
                _, lag = index.get(setting, method, phase)
                if not len(lag):
                    continue
                recovered.append(lag[~np.isnan(lag)])
                own, ref = index.matched(setting, method, reference, phase)
                both = ~np.isnan(own) & ~np.isnan(ref)
                # An empty sample estimates to NaN with n = 0: no difference to the reference itself.
                diffs.append(np.empty(0) if method == reference else own[both] - ref[both])
                cells.append({"experiment": setting[0], "env": setting[1], "phase": phase, "memory": method})
                n_runs.append(len(lag))
    records = [
        cell
        | estimate_columns(lag_estimate)
        | {"n_recovered": len(values), "n_runs": runs}
        | estimate_columns(diff_estimate, "diff_")
        for cell, runs, values, lag_estimate, diff_estimate in zip(
            cells, n_runs, recovered, mean_cis(recovered), mean_cis(diffs), strict=True
        )
    ]
    return pd.DataFrame.from_records(records)


def run_costs(episodes: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """Per run: prompt tokens per episode, lifecycle events from the archive, and trial cost.

    promotions / revocations / repromotions count the archive's "promoted" / "revoked" / "repromoted"
    events (`events`: one count per run and kind, columns run, event, count). trials and trial_passes
    are the memory's cumulative counters (a run's total is its largest value; 0 for methods that do not
    log them). trials_per_promotion = trials / (promotions + repromotions), NaN when nothing was
    promoted.
    """
    by_run = episodes.groupby("run", sort=False)
    frame = labelled(by_run[["trials", "trial_passes"]].max(), run_labels(episodes, LABELS))
    if "prompt_tokens" in episodes:
        frame["prompt_tokens"] = frame["run"].map(by_run["prompt_tokens"].mean())
    else:
        frame["prompt_tokens"] = np.nan
    counts = (
        events.set_index(["run", "event"])["count"].unstack(fill_value=0) if len(events) else pd.DataFrame()
    )
    for column, event in (
        ("promotions", "promoted"),
        ("revocations", "revoked"),
        ("repromotions", "repromoted"),
    ):
        per_run = counts[event] if event in counts else pd.Series(dtype="int64")
        frame[column] = frame["run"].map(per_run).fillna(0).astype("int64")
    promoted = frame["promotions"] + frame["repromotions"]
    frame["trials_per_promotion"] = (frame["trials"] / promoted.where(promoted > 0)).astype(float)
    return frame


COST_METRICS = (
    "prompt_tokens",
    "promotions",
    "revocations",
    "repromotions",
    "trials",
    "trials_per_promotion",
)


def summarize_costs(costs: pd.DataFrame) -> pd.DataFrame:
    """Mean over seeds with 95% CI of every per-run cost metric, per condition (long format)."""
    groups = dict(iter(costs.groupby(CONDITION, sort=False))) if len(costs) else {}
    cells, samples = [], []
    for setting in settings(costs):
        for method in sorted_methods(m for e, v, m in groups if (e, v) == setting):
            of_method = groups[(*setting, method)]
            for metric in COST_METRICS:
                cells.append(
                    {"experiment": setting[0], "env": setting[1], "memory": method, "metric": metric}
                )
                samples.append(of_method[metric].dropna().to_numpy(dtype=float))
    records = [c | estimate_columns(e) for c, e in zip(cells, mean_cis(samples), strict=True)]
    return pd.DataFrame.from_records(records)


def swept_parameters(runs: pd.DataFrame) -> list[str]:
    """Config keys of env, memory and llm parameters that vary across the given runs (meta.json's
    resolved config), sorted.

    A key qualifies when it is a parameter of the resolved config's env, memory or llm node and its
    values are numbers taking more than one value (e.g. "config.memory.theta_rev", "config.llm.lapse",
    "config.env.phase_length").
    """
    values: dict[str, set] = {}
    for config in runs["config"]:
        for key, value in config.items():
            numeric = isinstance(value, int | float) and not isinstance(value, bool)
            parts = key.split(".")
            if numeric and len(parts) > 2 and parts[0] == "config" and parts[1] in ("env", "memory", "llm"):
                values.setdefault(key, set()).add(value)
    return sorted(k for k, v in values.items() if len(v) > 1)


def sweep_method(config: dict[str, object], label: str) -> str:
    """The method a sweep run belongs to, for grouping its grid points.

    A sweep's memory labels carry the grid point (e.g. "tepa_rev-theta_rev=0.4-theta_rec=0.5"), so the
    method comes from the memory class in the resolved config: its module names the method
    ("tepa.tepa_rev.TEPARev" -> "tepa_rev") when that is a built-in one; otherwise the label is kept.
    """
    for key, value in config.items():
        if key.split(".")[-2:] == ["memory", "_target_"] and isinstance(value, str):
            parts = re.split(r"[.:]", value)
            if len(parts) >= 2 and parts[-2] in METHOD_LABELS:
                return parts[-2]
    return label


def sweep_success(
    per_seed: pd.DataFrame, runs: pd.DataFrame, phases: dict[tuple[str, str], list[str]]
) -> tuple[pd.DataFrame, dict[str, list[str]]]:
    """Success per phase (and overall) of each swept configuration, mean over seeds with CI, and the
    swept parameters of every experiment (`swept_parameters` of its runs).

    Columns: experiment, env, memory (the `sweep_method`), phase, one column per parameter of the
    experiment (named by its last key component; NaN for another experiment's), mean, low, high, n.
    """
    configs = runs.set_index("run")["config"]
    frame = per_seed.copy()
    frame["memory"] = [
        sweep_method(configs[r], m) for r, m in zip(frame["run"], frame["memory"], strict=True)
    ]
    params = {
        experiment: swept_parameters(runs[runs["experiment"] == experiment])
        for experiment in sorted_experiments(runs["experiment"])
    }
    cells, samples = [], []
    for experiment, env in settings(frame):
        names = [p.rsplit(".", 1)[-1] for p in params[experiment]]
        of_setting = frame[(frame["experiment"] == experiment) & (frame["env"] == env)].copy()
        for param, name in zip(params[experiment], names, strict=True):
            of_setting[name] = [float(configs[r].get(param, np.nan)) for r in of_setting["run"]]
        order = _phases_with_overall(phases, (experiment, env))
        for method in sorted_methods(of_setting["memory"]):
            of_method = of_setting[of_setting["memory"] == method]
            groups = of_method.groupby(names, sort=True, dropna=False) if names else [((), of_method)]
            for point, group in groups:
                point = point if isinstance(point, tuple) else (point,)
                for phase in order:
                    values = group.loc[group["phase"] == phase, "success"].to_numpy(dtype=float)
                    if len(values):
                        cells.append(
                            {"experiment": experiment, "env": env, "memory": method, "phase": phase}
                            | dict(zip(names, (float(x) for x in point), strict=True))
                        )
                        samples.append(values)
    records = [c | estimate_columns(e) for c, e in zip(cells, mean_cis(samples), strict=True)]
    return pd.DataFrame.from_records(records), {e: p for e, p in params.items() if p}


@dataclass(frozen=True)
class Analysis:
    """All metrics of a set of runs, computed once and shared by tables, figures and the report.

    Sweeps (the threshold-sweep experiment, and runs that share labels with another configuration, see
    `analysis.data.load.in_sweep`) are summarised only in `sweep` (by their swept parameters); every other
    frame covers the remaining runs.
    """

    phases: dict[tuple[str, str], list[str]]
    per_seed: pd.DataFrame
    success: pd.DataFrame
    mpi: pd.DataFrame
    paired: pd.DataFrame
    lags: pd.DataFrame
    adaptation: pd.DataFrame
    costs: pd.DataFrame
    cost_summary: pd.DataFrame
    sweep_params: dict[str, list[str]]
    sweep: pd.DataFrame
    window: int
    tolerance: float
    reference: str | None
    intervals: str = "seeds"
    #: The runs of paper experiments and how each departs from the experiment's configuration
    #: (`analysis.reference.configuration.paper_departures`): only matching runs are graded.
    departures: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: Experiment -> its runs' configuration variants, named in titles (`experiment_title`).
    variants: dict[str, list[str]] = field(default_factory=dict)
    #: Memory quality per method and phase, from the logged samples (`memory_quality.summarize`).
    memory: pd.DataFrame = field(default_factory=pd.DataFrame)


def analyse(
    logs: RunLogs,
    *,
    window: int = DEFAULT_WINDOW,
    tolerance: float = DEFAULT_TOLERANCE,
    reference: str | None = None,
    intervals: str = "seeds",
    mpi_ready: Callable[[pd.DataFrame, dict[tuple[str, str], list[str]], dict[str, list[str]]], object]
    | None = None,
) -> Analysis:
    """Compute every metric of the analysis from loaded run logs (see the functions above).

    `mpi_ready(mpi, phases, variants)` is called as soon as the MPI frame exists, before the slower
    metrics, so that the report's MPI figures are drawn meanwhile rather than after them."""
    swept = in_sweep(logs.runs)
    sweep_runs, regular_runs = logs.runs[swept], logs.runs[~swept]
    episodes, sweep_episodes, events = logs.episodes, logs.episodes.iloc[:0], logs.events
    if len(sweep_runs):  # a boolean filter copies every column: skip it when there is nothing to drop
        is_sweep = logs.episodes["run"].isin(set(sweep_runs["run"]))
        episodes, sweep_episodes = logs.episodes[~is_sweep], logs.episodes[is_sweep]
        events = logs.events[~logs.events["run"].isin(set(sweep_runs["run"]))]
    phases = phase_orders(logs.episodes)
    per_seed = success_per_seed(episodes) if len(episodes) else pd.DataFrame(columns=[*LABELS, "phase"])
    pollution, variants = mpi(per_seed, phases), experiment_variants(regular_runs)
    if mpi_ready is not None:
        mpi_ready(pollution, phases, variants)
    lags = adaptation(episodes, phases, window=window, tolerance=tolerance, reference=reference)
    costs = run_costs(episodes, events) if len(episodes) else pd.DataFrame(columns=["run", *LABELS])
    sweep, params = (
        sweep_success(success_per_seed(sweep_episodes), sweep_runs, phases)
        if len(sweep_runs)
        else (pd.DataFrame(), {})
    )
    return Analysis(
        phases=phases,
        per_seed=per_seed,
        success=summarize_success(per_seed, phases, episodes=episodes, intervals=intervals),
        mpi=pollution,
        paired=paired_tests(per_seed, phases),
        lags=lags,
        adaptation=summarize_adaptation(lags, phases),
        costs=costs,
        cost_summary=summarize_costs(costs),
        sweep_params=params,
        sweep=sweep,
        window=window,
        tolerance=tolerance,
        reference=reference,
        intervals=intervals,
        departures=paper_departures(regular_runs),
        variants=variants,
        memory=memory_quality.summarize(episodes, phases, OVERALL),
    )

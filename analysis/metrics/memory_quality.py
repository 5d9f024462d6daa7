"""Memory quality from the log alone: how much of what each prompt held was current, and how much stale.

Every number here rests on what a decision's prompt held and what the world held at that moment, and on
nothing else: not the reply, the action or the success. So they measure the memory itself, whatever
reads it. The agent loop applies the rule (`analysis.streamlog.staleness.episode_quality`) to each
decision's retrieved lines (the `evidence` column holds the same lines as text) and to the environment's
truth of each hop's key (the `truth` column), and logs the result in the QUALITY columns of
`analysis.streamlog.record`; the analysis reads those, never a reply.

A retrieved line is *current* when its verdict agrees with the truth of its hop (VALID and its value is
the truth, or FAILED and its value is not) and *stale* otherwise. Hops whose truth is null (the
environment cannot tell) count no lines. Per episode:
- `truth_known`: some hop's truth is known (else the three flags below are undefined);
- `current`, `stale`: the counts of such lines;
- `truth_present`: some VALID line asserts the truth;
- `stale_present`: some VALID line asserts a value other than the truth;
- `polluted`: at some hop, the VALID lines asserting another value outnumber those asserting the truth
  (a reader that follows the majority of its prompt's claims is pointed at a stale value).
In the analysis (`episode_columns`) the flags are NaN for an episode with no known truth, and every column
is NaN for a run whose log has no such columns (written before they existed) or whose environment reports
no truth, so nothing is ever guessed.

Per method and phase (and over the whole stream), means over seeds with 95% bootstrap CIs
(`analysis.stats.mean_cis`) of each run's: stale share (stale lines / retrieved lines, pooled over the
run's episodes), truth-present rate, stale-present rate, and the pollution index (the share of its
decisions that are `polluted`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from analysis.metrics.display import estimate_columns, settings, sorted_methods
from analysis.metrics.runs import labelled, run_labels
from analysis.stats import mean_cis
from analysis.streamlog.record import LABELS, QUALITY

#: The per-episode columns of the analysis (NaN where unavailable).
EPISODE_COLUMNS = ("current", "stale", "truth_present", "stale_present", "polluted")
#: The per-run aggregates, in report order, with their labels.
METRICS = {
    "stale_share": "Stale share",
    "truth_present": "Truth present",
    "stale_present": "Stale present",
    "pollution": "Pollution index",
}
#: Why a run has no memory metrics (the loader's `sample` column of the runs frame), else LOGGED.
LOGGED, NOT_LOGGED, NO_TRUTH = "logged", "not logged", "no truth"

_FLAGS = ("truth_present", "stale_present", "polluted")
_COUNTS = ("current", "stale")


def sample_status(table: pa.Table) -> str:
    """Whether a run's memory metrics can be computed from its episode table: LOGGED, NOT_LOGGED (no
    QUALITY columns) or NO_TRUTH (its environment knew the truth of no decision)."""
    if not set(QUALITY) <= set(table.column_names):
        return NOT_LOGGED
    return LOGGED if pc.any(table["truth_known"]).as_py() else NO_TRUTH


def episode_columns(table: pa.Table) -> dict[str, np.ndarray]:
    """EPISODE_COLUMNS of a run's episodes as float arrays, from its QUALITY columns: all NaN unless its
    status is LOGGED, the flags NaN for an episode with no known truth."""
    n = table.num_rows
    for name in QUALITY:
        if name in table.column_names:
            kind = table[name].type
            if not (pa.types.is_boolean(kind) if name not in _COUNTS else pa.types.is_integer(kind)):
                raise ValueError(f"column {name} must hold {'integers' if name in _COUNTS else 'booleans'}")
            if table[name].null_count:
                raise ValueError(f"column {name} has {table[name].null_count} null value(s)")
    if sample_status(table) != LOGGED:
        return {name: np.full(n, np.nan) for name in EPISODE_COLUMNS}
    known = table["truth_known"].to_numpy(zero_copy_only=False)
    columns = {name: table[name].to_numpy(zero_copy_only=False).astype(float) for name in EPISODE_COLUMNS}
    for name in _FLAGS:
        columns[name][~known] = np.nan
    return columns


def per_run(episodes: pd.DataFrame, overall: str) -> pd.DataFrame:
    """Each run's METRICS in each phase and over the whole stream (phase `overall`); NaN where undefined
    (no retrieved line, no decision with a known truth, no sample)."""
    labels = run_labels(episodes, [*LABELS, "seed"])
    frame = episodes[["run", "phase", *EPISODE_COLUMNS]].assign(lines=episodes["current"] + episodes["stale"])
    parts = []
    for by, phase in ((["run", "phase"], None), ("run", overall)):
        grouped = frame.groupby(by, sort=False)
        sums = grouped[["stale", "lines"]].sum(min_count=1)
        means = grouped[["truth_present", "stale_present", "polluted"]].mean()
        part = pd.DataFrame(
            {
                "stale_share": sums["stale"] / sums["lines"].where(sums["lines"] > 0),
                "truth_present": means["truth_present"],
                "stale_present": means["stale_present"],
                "pollution": means["polluted"],
                "lines": sums["lines"],
            }
        )
        part = labelled(part, labels)
        if phase is not None:
            part.insert(2 + len(LABELS), "phase", phase)
        parts.append(part)
    return pd.concat(parts, ignore_index=True)


def summarize(episodes: pd.DataFrame, phases: dict[tuple[str, str], list[str]], overall: str) -> pd.DataFrame:
    """Means over seeds with 95% CIs of METRICS per (experiment, env, memory, phase): columns experiment,
    env, memory, phase, metric, mean, low, high, n (seeds with a value). Cells no seed defines are left
    out; the interval is NaN over fewer than MIN_BOOTSTRAP_SEEDS seeds, as in every other summary."""
    columns = [*LABELS, "phase", "metric", "mean", "low", "high", "n"]
    if episodes.empty or episodes["current"].isna().all():
        return pd.DataFrame(columns=columns)
    runs = per_run(episodes, overall)
    cells, samples = [], []
    grouped = {
        k: g for k, g in runs.sort_values("seed", kind="stable").groupby([*LABELS, "phase"], sort=False)
    }
    for setting in settings(runs):
        methods = sorted_methods(
            runs.loc[(runs["experiment"] == setting[0]) & (runs["env"] == setting[1]), "memory"]
        )
        for method in methods:
            for phase in [*phases.get(setting, []), overall]:
                group = grouped.get((*setting, method, phase))
                if group is None:
                    continue
                for metric in METRICS:
                    values = group[metric].dropna().to_numpy(dtype=float)
                    if len(values):
                        cells.append(
                            {
                                "experiment": setting[0],
                                "env": setting[1],
                                "memory": method,
                                "phase": phase,
                                "metric": metric,
                            }
                        )
                        samples.append(values)
    estimates = mean_cis(samples) if samples else []
    records = [c | estimate_columns(e) for c, e in zip(cells, estimates, strict=True)]
    return pd.DataFrame.from_records(records, columns=columns)


def lookup(memory: pd.DataFrame, experiment: str, env: str, phase: str, method: str) -> dict[str, float]:
    """The means of METRICS in one cell of `summarize`'s frame (NaN where it has none)."""
    found = dict.fromkeys(METRICS, float("nan"))
    if not memory.empty:
        cell = memory[
            (memory["experiment"] == experiment)
            & (memory["env"] == env)
            & (memory["phase"] == phase)
            & (memory["memory"] == method)
        ]
        found |= dict(zip(cell["metric"], cell["mean"].astype(float), strict=True))
    return found

"""The rule-switch ablation (experiment=ablation_lifecycle): per-phase success and re-promotion delay of
each arm, so a reader sees which of TEPA-Rev's rule choices buys which result.

Re-promotion delay: for every key, the stream of its episodes' correct values is cut into regimes (a
value that holds for one episode between two episodes of another value, like a preference stream's
one-off glitch, is not a regime of its own). A regime *returns* when it starts on a value whose precedent
is revoked at that moment (in the archive log). Its delay is the number of the key's episodes from the
regime's first episode up to and including the one after which that precedent is active; a return that
is not re-promoted before its regime ends is counted as not back.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.json as pj
import pyarrow.parquet as pq

from analysis.metrics.compute import OVERALL, Analysis
from analysis.metrics.display import env_label, sorted_envs
from analysis.report.tables import MISSING, Table, number

ABLATION_EXPERIMENT = "ablation_lifecycle"
DEFAULT_ARM = "tepa_rev"
LITERAL_ARM = "tepa_rev_literal"
_EVENTS = pj.ParseOptions(
    explicit_schema=pa.schema(
        [("t", pa.int64()), ("key", pa.string()), ("value", pa.string()), ("state", pa.string())]
    ),
    unexpected_field_behavior="ignore",
)


def regimes(correct: Sequence[str]) -> list[tuple[int, int]]:
    """(start, end) index ranges of one key's regimes, one-episode blips folded into their regime."""
    smooth = list(correct)
    for j in range(1, len(smooth) - 1):
        if correct[j - 1] == correct[j + 1] != correct[j]:
            smooth[j] = correct[j - 1]
    starts = [j for j in range(len(smooth)) if j == 0 or smooth[j] != smooth[j - 1]]
    return list(zip(starts, [*starts[1:], len(smooth)][: len(starts)], strict=True))


class StateLog:
    """The state of each (key, value) precedent after every episode, from the archive log."""

    def __init__(self, events: Iterable[tuple[int, str, str, str]]) -> None:
        timeline: dict[tuple[str, str], dict[int, str]] = {}
        for t, key, value, state in events:  # in log order: the last event at t gives the state after t
            timeline.setdefault((key, value), {})[t] = state
        self._times = {kv: sorted(states) for kv, states in timeline.items()}
        self._states = {kv: [states[t] for t in self._times[kv]] for kv, states in timeline.items()}

    def after(self, key: str, value: str, t: int) -> str | None:
        """The precedent's state after episode t (None: it did not exist yet)."""
        times = self._times.get((key, value))
        i = bisect.bisect_right(times, t) if times else 0
        return self._states[(key, value)][i - 1] if i else None


def return_delays(episodes: pd.DataFrame, log: StateLog) -> list[int | None]:
    """Re-promotion delay of every regime return of one run (None: not back within its regime).
    `episodes` has the columns t, key, correct."""
    delays: list[int | None] = []
    for key, group in episodes.sort_values("t", kind="stable").groupby("key", sort=False):
        ts, correct = group["t"].tolist(), group["correct"].tolist()
        for start, end in regimes(correct):
            value = correct[start]
            if log.after(str(key), value, ts[start] - 1) != "revoked":
                continue
            back = (i - start + 1 for i in range(start, end) if log.after(str(key), value, ts[i]) == "active")
            delays.append(next(back, None))
    return delays


def run_delays(root: Path, run: str) -> list[int | None]:
    """Re-promotion delays of one run directory (relative to `root`)."""
    episodes = pq.read_table(root / run / "episodes.parquet", columns=["t", "key", "correct"]).to_pandas()
    archive = root / run / "archive.jsonl"
    rows: list[tuple[int, str, str, str]] = []
    if archive.is_file() and archive.stat().st_size:
        try:
            table = pj.read_json(archive, parse_options=_EVENTS)
        except pa.ArrowInvalid as error:
            raise ValueError(f"{archive}: not a lifecycle log ({str(error).splitlines()[0]})") from None
        rows = list(zip(*(table.column(c).to_pylist() for c in ("t", "key", "value", "state")), strict=True))
    return return_delays(episodes, StateLog(rows))


def arm_label(memory: str) -> str:
    """An arm's display name: "default", "literal rules", or the switch it flips ("counts=lifetime")."""
    if memory == DEFAULT_ARM:
        return "default"
    if memory == LITERAL_ARM:
        return "literal rules"
    return memory.removeprefix(f"{DEFAULT_ARM}-")


def _arm_order(memory: str) -> tuple[int, str]:
    return (0 if memory == DEFAULT_ARM else 2 if memory == LITERAL_ARM else 1, memory)


def ablation_table(analysis: Analysis, root: str | Path) -> Table | None:
    """Per-phase success (mean over seeds) and re-promotion delay of every arm in every setting of the
    ablation experiment; None when it has not been run. `root` is the run-log root the analysis read."""
    runs = analysis.per_seed[analysis.per_seed["experiment"] == ABLATION_EXPERIMENT]
    if runs.empty:
        return None
    root = Path(root)
    success = analysis.success[analysis.success["experiment"] == ABLATION_EXPERIMENT]
    mean = {(r.env, r.memory, r.phase): r.mean for r in success.itertuples()}
    phases: list[str] = []
    for env in sorted_envs(runs["env"]):
        phases += [p for p in analysis.phases.get((ABLATION_EXPERIMENT, env), []) if p not in phases]
    phases.append(OVERALL)
    rows, records = [], []
    for env in sorted_envs(runs["env"]):
        of_env = runs[runs["env"] == env]
        for memory in sorted(set(of_env["memory"]), key=_arm_order):
            delays = [
                d
                for run in sorted(set(of_env.loc[of_env["memory"] == memory, "run"]))
                for d in run_delays(root, run)
            ]
            back = [d for d in delays if d is not None]
            record = {
                "env": env,
                "arm": memory,
                **{p: mean.get((env, memory, p), float("nan")) for p in phases},
                "returns": len(delays),
                "back": len(back),
                "delay_mean": statistics.fmean(back) if back else float("nan"),
                "delay_median": statistics.median(back) if back else float("nan"),
            }
            records.append(record)
            rows.append(
                [
                    env_label(env),
                    arm_label(memory),
                    *(number(record[p]) for p in phases),
                    f"{len(back)}/{len(delays)}" if delays else MISSING,
                    number(record["delay_mean"], 1),
                    number(record["delay_median"], 1),
                ]
            )
    return Table(
        ABLATION_EXPERIMENT,
        "TEPA-Rev's rule switches: per-phase success and re-promotion delay",
        ["Setting", "Arm", *phases, "Returns re-promoted", "Delay (mean)", "Delay (median)"],
        rows,
        pd.DataFrame.from_records(records),
        note=(
            "Each arm flips one rule switch from TEPA-Rev's default (or sets all five: the literal rules). "
            "Success: mean over seeds (CIs in the ablation_lifecycle success table). A return is a key's "
            "regime starting on a value whose precedent is revoked; delay: that key's episodes from the "
            "return until the precedent is active again (returns never re-promoted within their regime are "
            "left out of the delay and counted in the re-promoted column)."
        ),
        experiment=ABLATION_EXPERIMENT,
    )

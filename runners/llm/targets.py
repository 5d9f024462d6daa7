"""The real-model run's three targets, each met or not, in numbers: `python -m runners.llm.targets --runs DIR
--out DIR` (writes tables/targets.{md,csv}, and appends the table to README.md when one exists).

1. the stable-phase gain of LWW or TEPA-Rev over No Memory is at least `MIN_GAIN`, its 95% CI above 0;
2. after the reversal (the full_reversal phase) Append-Only is below No Memory, its CI excluding 0;
3. after the reversal TEPA-Rev is above Append-Only.

Each difference is paired by seed (a stream's phase success minus the other method's on the same seed),
with the harness's bootstrap interval over seeds (`analysis.stats.mean_ci`) and the sign-flip p (exact up
to `EXACT_MAX_PAIRS` seeds, estimated from random sign patterns above). A difference whose two methods
share no complete seed (a run of some methods only) is left out and named under the table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from analysis.data.load import find_runs
from analysis.report.tables import markdown_table, publish_table
from analysis.stats import EXACT_MAX_PAIRS, N_RESAMPLES, mean_ci, sign_flip_pvalue
from analysis.streamlog import stream as logformat

MIN_GAIN = 0.25
STABLE, REVERSAL = "stable", "full_reversal"


def phase_success(root: Path) -> pd.DataFrame:
    """Success per (method, seed, phase) over every complete stream under `root`."""
    frames = [
        pd.read_parquet(run_dir / logformat.EPISODES, columns=["memory", "seed", "phase", "success"])
        for run_dir in find_runs(root)
    ]
    if not frames:
        raise ValueError(f"runs: no complete run under {root}")
    episodes = pd.concat(frames, ignore_index=True)
    return episodes.groupby(["memory", "phase", "seed"])["success"].mean().sort_index()


def paired(success: pd.Series, method: str, other: str, phase: str) -> dict | None:
    """`method` - `other` in `phase`, paired by seed: mean, 95% CI, sign-flip p, seeds; None when the
    two share no seed."""
    if (method, phase) not in success.index or (other, phase) not in success.index:
        return None
    a, b = success.loc[(method, phase)], success.loc[(other, phase)]
    seeds = sorted(set(a.index) & set(b.index))
    if not seeds:
        return None
    diffs = [float(a[s] - b[s]) for s in seeds]
    estimate = mean_ci(diffs)
    return {
        "phase": phase,
        "difference": f"{method} - {other}",
        "mean": estimate.mean,
        "low": estimate.low,
        "high": estimate.high,
        "p_sign_flip": sign_flip_pvalue(diffs),
        "seeds": len(seeds),
    }


#: (method, other, phase, target, whether a row's mean and CI meet it)
TARGETS = (
    *(
        (method, "no_memory", STABLE, f"1: gain >= {MIN_GAIN}, CI above 0",
         lambda r: r["mean"] >= MIN_GAIN and r["low"] > 0)
        for method in ("lww", "tepa_rev")
    ),
    ("append_only", "no_memory", REVERSAL, "2: below 0, CI excluding 0",
     lambda r: r["mean"] < 0 and r["high"] < 0),
    ("tepa_rev", "append_only", REVERSAL, "3: above 0", lambda r: r["mean"] > 0),
)  # fmt: skip


def targets(success: pd.Series) -> pd.DataFrame:
    """One row per difference the targets name that the runs hold, with the target and whether it is
    met; raises ValueError when they hold none."""
    rows = []
    for method, other, phase, target, met in TARGETS:
        row = paired(success, method, other, phase)
        if row is not None:
            rows.append({**row, "target": target, "met": met(row)})
    if not rows:
        raise ValueError("runs: no pair of methods the targets compare has a complete seed in common")
    return pd.DataFrame(rows)


def missing(table: pd.DataFrame) -> list[str]:
    """The differences the targets name that `table` lacks (their methods share no complete seed)."""
    return [f"{m} - {o}" for m, o, *_ in TARGETS if f"{m} - {o}" not in set(table["difference"])]


def _p(value: float) -> str:
    """A p-value to three decimals; below 0.001 as "<0.001", never as a p of 0."""
    return "<0.001" if value < 0.001 else f"{value:.3f}"


def to_markdown(table: pd.DataFrame) -> str:
    columns = ["Target", "Phase", "Difference", "Mean [95% CI]", "Sign-flip p", "Seeds", "Met"]
    rows = [
        [r["target"], r["phase"], r["difference"], f"{r['mean']:+.3f} [{r['low']:+.3f}, {r['high']:+.3f}]",
         _p(r["p_sign_flip"]), str(r["seeds"]), "yes" if r["met"] else "no"]
        for _, r in table.iterrows()
    ]  # fmt: skip
    note = (
        "Target 1 is met when either row 1 is (LWW or TEPA-Rev). Differences paired by seed; bootstrap "
        f"95% intervals over seeds; two-sided sign-flip p, exact up to {EXACT_MAX_PAIRS} seeds (above, from "
        f"{N_RESAMPLES:,} random sign patterns)."
    )
    if missing(table):
        note += f" Not run (no complete seed in common): {', '.join(missing(table))}."
    return f"## The real-model targets\n\n{markdown_table(columns, rows, 3)}\n{note}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runners.llm.targets", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=Path, required=True, help="root of the run logs")
    parser.add_argument("--out", type=Path, required=True, help="writes tables/targets.{md,csv}")
    args = parser.parse_args(argv)
    try:
        table = targets(phase_success(args.runs))
    except (ValueError, KeyError) as error:
        print(f"runners.llm.targets: {error}", file=sys.stderr)
        return 2
    text = to_markdown(table)
    publish_table(table, text, args.out, "targets")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

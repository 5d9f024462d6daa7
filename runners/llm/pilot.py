"""The scoring-mode pilot's table and choice: `python -m runners.llm.pilot --runs DIR [--out FILE]`.

Reads every complete stream under DIR (runs of `experiment=llm_pilot`, one per `llm.scoring` mode, on
seeds the evaluation does not use) and gives, per mode: how often No Memory picks the option listed first
(options are shuffled per task, so above 1/3 is position bias), each method's success, the memory gain
over No Memory, the requests per decision and the share of prompt tokens the server evaluated.

The criterion, fixed before the evaluation run: among the modes whose No Memory first-position rate is
within `GATE` of chance (1/n_options), the one with the largest memory gain (the mean success of the
memory methods minus No Memory's); a gain within `TIE` of the best goes to the mode with fewer requests
per decision. No mode through the gate: the one closest to chance.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from analysis.data.load import find_runs
from analysis.report.tables import markdown_table
from analysis.streamlog import stream as logformat

GATE = 0.10
TIE = 0.02
NO_MEMORY = "no_memory"


def decisions(root: Path) -> pd.DataFrame:
    """One row per decision: scoring mode, method, seed, phase, success, whether the first option listed
    was chosen; and each stream's backend counters (requests, server-evaluated share) once."""
    frames = []
    for run_dir in find_runs(root):
        meta = logformat.read_meta(run_dir) or {}
        scoring = meta["config"]["llm"].get("scoring", "n/a")
        frame = pd.read_parquet(run_dir / logformat.EPISODES, columns=["memory", "seed", "phase", "success",
                                                                        "action", "options"])  # fmt: skip
        options = frame["options"].map(json.loads)
        frame["first"] = [bool(o) and a == o[0] for a, o in zip(frame["action"], options, strict=True)]
        frame["n_options"] = options.map(len)
        frame["scoring"] = scoring
        stats = meta.get("backend_stats", {})
        frame["requests"] = stats.get("requests", 0)
        frame["share"] = stats.get("evaluated_prompt_share", float("nan"))
        frame["calls"] = stats.get("calls", 0) - stats.get("cache_hits", 0)  # the calls sent
        frame["wall"] = meta.get("wall_time_s", float("nan"))
        frames.append(frame)
    if not frames:
        raise ValueError(f"runs: no complete run under {root}")
    return pd.concat(frames, ignore_index=True)


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per scoring mode: the bias, the success rates and gains, the cost."""
    rows = []
    methods = sorted(m for m in frame["memory"].unique() if m != NO_MEMORY)
    for scoring, group in frame.groupby("scoring", sort=True):
        base = group[group["memory"] == NO_MEMORY]
        row = {
            "scoring": scoring,
            "no_memory_first": base["first"].mean(),
            "chance": (1 / base["n_options"]).mean(),
            "memory_first": group[group["memory"] != NO_MEMORY]["first"].mean(),
        }
        for method in [NO_MEMORY, *methods]:
            row[method] = group[group["memory"] == method]["success"].mean()
        row["gain"] = sum(row[m] for m in methods) / len(methods) - row[NO_MEMORY]
        # backend counters are per method (shared by its seeds): the largest stream's are the run's
        streams = group.groupby("memory").agg(requests=("requests", "max"), calls=("calls", "max"),
                                              share=("share", "max"), wall=("wall", "max"))  # fmt: skip
        row["requests_per_decision"] = streams["requests"].sum() / max(streams["calls"].sum(), 1)
        row["evaluated_share"] = streams["share"].mean()
        # a run's streams run concurrently: its wall time is its longest stream's
        row["decisions_per_s"] = len(group) / streams["wall"].sum()
        rows.append(row)
    return pd.DataFrame(rows)


def choose(pilot: pd.DataFrame) -> str:
    """The mode the module docstring's criterion picks."""
    pilot = pilot.assign(bias=(pilot["no_memory_first"] - pilot["chance"]).abs())
    gated = pilot[pilot["bias"] <= GATE]
    if gated.empty:
        return str(pilot.sort_values("bias").iloc[0]["scoring"])
    best = gated["gain"].max()
    close = gated[gated["gain"] >= best - TIE].sort_values(
        ["requests_per_decision", "gain"], ascending=[True, False]
    )
    return str(close.iloc[0]["scoring"])


def to_markdown(pilot: pd.DataFrame, chosen: str) -> str:
    methods = [c for c in pilot.columns if c not in {"scoring", "no_memory_first", "chance", "memory_first",
               "gain", "requests_per_decision", "evaluated_share", "decisions_per_s"}]  # fmt: skip
    columns = ["Scoring", "No Memory = first option", "memory methods = first option",
               *(f"{m} success" for m in methods), "memory gain", "requests / decision",
               "server-evaluated share", "decisions / s"]  # fmt: skip
    rows = [
        [
            f"**{r['scoring']}**" if r["scoring"] == chosen else r["scoring"],
            f"{r['no_memory_first']:.3f}",
            f"{r['memory_first']:.3f}",
            *(f"{r[m]:.3f}" for m in methods),
            f"{r['gain']:+.3f}",
            f"{r['requests_per_decision']:.1f}",
            f"{r['evaluated_share']:.3f}",
            f"{r['decisions_per_s']:.2f}",
        ]
        for _, r in pilot.iterrows()
    ]
    return markdown_table(columns, rows, 1) + f"\nChosen by the criterion: **{chosen}**.\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runners.llm.pilot", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=Path, required=True, help="root of the pilot's run logs")
    parser.add_argument("--out", type=Path, help="also write the table (markdown) and its CSV beside it")
    args = parser.parse_args(argv)
    try:
        pilot = table(decisions(args.runs))
    except (ValueError, KeyError) as error:
        print(f"runners.llm.pilot: {error}", file=sys.stderr)
        return 2
    chosen = choose(pilot)
    text = to_markdown(pilot, chosen)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
        pilot.to_csv(args.out.with_suffix(".csv"), index=False)
    print(text)
    print(json.dumps({"chosen": chosen}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What a model's choices follow, as its memory grows: `python -m runners.llm.choices --runs DIR --out DIR`.

Success rates say whether memory helped; they do not say what the model read. Each complete stream is
replayed (its environment and memory rebuilt from meta.json, the logged replies fed back, no model
called) to recover every prompt, and each decision is compared with what the prompt showed: the value of
the latest VALID memory line, the value most memory lines name (when one value leads), a value a FAILED
line names, and the first option listed (options are shuffled per task, so a reader that ignores the
prompt picks it a third of the time with three options). Rates are per method and per memory size (memory
lines in the prompt), over all seeds, with how many decisions each rests on.

Writes `tables/choices.{md,csv}` and appends the table to `README.md` when one exists.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import OmegaConf

from analysis.data.load import find_runs
from analysis.report.tables import markdown_table, publish_table
from analysis.streamlog import stream
from runners.agent.loop import _logged_replies, run_stream
from runners.agent.prompt import EVIDENCE_LINE, OPTION_LINE
from runners.agent.replay import read_records
from runners.config import validate
from runners.llm.backend import Reply, Request

BINS = ((0, 0), (1, 3), (4, 10), (11, 20), (21, None))
RATES = {
    "success": "success",
    "latest_valid": "= latest VALID",
    "most_frequent": "= most frequent",
    "failed": "= a FAILED value",
    "first_option": "= first option",
}
TITLE = "What the choices follow, by memory size"


class _Replayer:
    """A backend that answers with a stream's logged replies, in order, and keeps the prompts."""

    name = "replay"

    def __init__(self, rows: Sequence[dict[str, Any]]) -> None:
        self._replies = itertools.chain.from_iterable(map(_logged_replies, rows))
        self.prompts: list[str] = []

    async def complete(self, request: Request) -> Reply:
        self.prompts.append(request.messages[-1]["content"])
        return next(self._replies)

    def stats(self) -> dict:
        return {}


def replay_prompts(run_dir: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """A complete stream's episode rows and the user prompt of each decision."""
    meta = stream.read_meta(run_dir) or {}
    rows = read_records(run_dir)
    spec = validate(OmegaConf.create(dict(meta["config"])), {})  # as `runners.agent.replay` rebuilds a stream
    backend = _Replayer(rows)
    with contextlib.closing(spec.env.build()) as env:
        result = asyncio.run(
            run_stream(
                env,
                spec.memory.build(),
                backend,
                seed=meta["seed"],
                labels={},
                max_episodes=spec.max_episodes,
            )
        )
    if [r["action"] for r in result.records] != [r["action"] for r in rows]:
        raise ValueError(f"{run_dir}: the replay does not reproduce the logged actions")
    return rows, backend.prompts


def describe(prompt: str, action: str) -> dict[str, Any]:
    """What one decision's prompt showed, and whether the action copied it (None: not shown)."""
    lines = [(m.group("verdict"), json.loads(m.group("value"))) for m in EVIDENCE_LINE.finditer(prompt)]
    tail = prompt.rfind("\nOptions:\n")
    options = [m.group("text") for m in OPTION_LINE.finditer(prompt, tail)] if tail >= 0 else []
    valid = [v for verdict, v in lines if verdict == "VALID"]
    ranked = Counter(v for _, v in lines).most_common(2)
    leader = ranked[0][0] if ranked and (len(ranked) == 1 or ranked[0][1] > ranked[1][1]) else None
    failed = {v for verdict, v in lines if verdict == "FAILED"}
    return {
        "lines": len(lines),
        "latest_valid": (action == valid[-1]) if valid else None,
        "most_frequent": (action == leader) if leader is not None else None,
        "failed": (action in failed) if failed else None,
        "first_option": (action == options[0]) if options else None,
    }


def _bin(lines: int) -> str:
    for low, high in BINS:
        if lines >= low and (high is None or lines <= high):
            return str(low) if high == low else f"{low}-{high}" if high is not None else f"{low}+"
    raise AssertionError(lines)


def diagnose(root: Path) -> pd.DataFrame:
    """One row per decision of every complete stream under `root`."""
    frames = []
    for run_dir in find_runs(root):
        rows, prompts = replay_prompts(run_dir)
        described = [describe(p, r["action"]) for p, r in zip(prompts, rows, strict=True)]
        frame = pd.DataFrame(described)
        frame["memory"] = rows[0]["memory"]
        frame["seed"] = rows[0]["seed"]
        frame["success"] = [r["success"] for r in rows]
        frames.append(frame)
    if not frames:
        raise ValueError(f"runs: no complete run under {root}")
    decisions = pd.concat(frames, ignore_index=True)
    decisions["bin"] = decisions["lines"].map(_bin)
    return decisions


def summarise(decisions: pd.DataFrame, order: Sequence[str] = ()) -> pd.DataFrame:
    """Rates per method and memory-size bin (each over the decisions where the prompt showed the thing)."""
    bins = [_bin(low) for low, _ in BINS]
    out = []
    for (memory, name), group in decisions.groupby(["memory", "bin"], sort=False):
        row: dict[str, Any] = {"memory": memory, "bin": name, "decisions": len(group)}
        for column in RATES:
            shown = group[column].dropna().astype(bool)
            row[column] = shown.mean() if len(shown) else float("nan")
            row[f"{column}_n"] = len(shown)
        out.append(row)
    table = pd.DataFrame(out)
    rank = {m: i for i, m in enumerate(order)}
    table["_m"] = table["memory"].map(lambda m: rank.get(m, len(rank)))
    table["_b"] = table["bin"].map(bins.index)
    return table.sort_values(["_m", "memory", "_b"]).drop(columns=["_m", "_b"]).reset_index(drop=True)


def to_markdown(table: pd.DataFrame) -> str:
    def cell(row: pd.Series, column: str) -> str:
        n = int(row[f"{column}_n"])
        return "–" if n == 0 else f"{row[column]:.2f} ({n})"

    columns = ["Method", "Memory lines", "Decisions", *RATES.values()]
    rows = [
        [row["memory"], row["bin"], str(int(row["decisions"])), *(cell(row, c) for c in RATES)]
        for _, row in table.iterrows()
    ]
    note = (
        "Share of decisions (over all seeds) whose choice was right (success) or equals: the value of the "
        "prompt's latest VALID memory line; the value most memory lines name (only when one value leads); "
        "a value some FAILED line names; the first option listed. In brackets: the decisions where the "
        "prompt showed that; – where it never did."
    )
    return f"## {TITLE}\n\n{markdown_table(columns, rows, 2)}\n{note}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runners.llm.choices", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=Path, required=True, help="root of the run logs")
    parser.add_argument("--out", type=Path, required=True, help="writes tables/choices.{md,csv}")
    parser.add_argument("--order", default="", help="methods in this order (comma-separated config names)")
    args = parser.parse_args(argv)
    try:
        table = summarise(diagnose(args.runs), [m for m in args.order.split(",") if m])
    except ValueError as error:
        print(f"runners.llm.choices: {error}", file=sys.stderr)
        return 2
    text = to_markdown(table)
    publish_table(table, text, args.out, "choices")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

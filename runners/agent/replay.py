"""Rebuild one logged decision exactly: replay a stream's log up to episode t, no model calls.

The stream's environment and memory are rebuilt from its `meta.json` config and the logged replies
are fed back (as a resumed run does, `runners.agent.loop.run_stream`), so the prompt captured at episode t is
the one the model received, byte for byte. That holds only while the stream's data files are the ones
it read: their fingerprint is checked against meta.json's first, and a stream whose data changed (or
whose config no longer builds here) is refused with one line. This is the harness side of
`python -m analysis.inspect`, which reads logs only: for a run that logged no samples,
`python -m runners.agent.replay RUN_DIR --t T` prints the prompt of episode t, rebuilt.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from omegaconf import OmegaConf

from analysis.inspect import prompt_lines, visible
from analysis.streamlog.stream import EPISODES, META, read_meta, verify
from runners.agent.loop import ReplayMismatch, _logged_replies, run_stream
from runners.config import ConfigError, validate
from runners.llm.backend import Reply, Request


class ReplayRefused(ValueError):
    """The stream cannot be rebuilt as the run had it (one line saying why): its config no longer
    builds here, or its data files changed since the run."""


@dataclass
class Decision:
    """Episode t of a stream as the agent lived it: its log record and the messages of every model call
    (one, or one per hop)."""

    record: dict[str, Any]
    prompts: list[tuple[dict[str, str], ...]] = field(default_factory=list)


class _Reached(Exception):
    """Raised by the capturing backend once episode t's calls are over: the replay can stop."""


class _Capture:
    """A backend for the replay from episode t on: it answers with episode t's logged replies, keeps
    the requests, and stops the stream at the next episode's call."""

    name = "replay"

    def __init__(self, record: dict[str, Any], decision: Decision) -> None:
        self._replies: Iterator[Reply] = _logged_replies(record)
        self._decision = decision

    async def complete(self, request: Request) -> Reply:
        reply = next(self._replies, None)
        if reply is None:
            raise _Reached
        self._decision.prompts.append(request.messages)
        return reply

    def stats(self) -> dict:
        return {}


def read_records(run_dir: Path) -> list[dict[str, Any]]:
    """A stream's episode records, in order."""
    return pq.read_table(run_dir / EPISODES).to_pylist()


def replay_decision(run_dir: str | Path, t: int) -> Decision:
    """Replay the stream logged in `run_dir` up to its episode at step `t` (see the module docstring).

    Raises ValueError with one line when the directory is not a complete stream, its files fail their
    checksums, or it has no episode at `t`, and ReplayRefused when the config does not build here (a
    class not importable, refused) or the data files' fingerprint differs from the one meta.json
    records: a rebuilt prompt would then show what the model never saw.
    """
    run_dir = Path(run_dir)
    if not (run_dir / META).is_file() or not (run_dir / EPISODES).is_file():
        raise ValueError(f"{run_dir}: not a complete stream (needs {EPISODES} and {META})")
    meta = read_meta(run_dir)
    if meta is None or not isinstance(meta.get("config"), dict) or meta.get("complete") is not True:
        raise ValueError(f"{run_dir / META}: not the meta.json of a complete stream")
    problem = verify(run_dir, meta)  # the logs as the run wrote them, or no replay
    if problem is not None:
        raise ValueError(problem)
    records = read_records(run_dir)
    index = next((i for i, r in enumerate(records) if r["t"] == t), None)
    if index is None:
        steps = f"{records[0]['t']}..{records[-1]['t']}" if records else "none"
        raise ValueError(f"--t {t}: no episode at this step in {run_dir} (steps {steps})")
    config = dict(meta["config"])
    try:
        spec = validate(OmegaConf.create(config), {})
    except ConfigError as exc:
        raise ReplayRefused(f"meta.json's config does not build here: {exc}") from None
    record = records[index]
    decision = Decision(record=record)
    labels = {name: meta[name] for name in ("experiment", "env", "memory")}
    with contextlib.closing(_build(spec.env)) as env, contextlib.suppress(_Reached):
        _check_data(env, meta)
        asyncio.run(
            run_stream(
                env,
                _build(spec.memory),
                _Capture(record, decision),
                seed=int(config["seed"]),
                labels=labels,
                replay=records[:index],
                max_evidence=spec.max_evidence,
                ranker=spec.retrieval.ranker(),
            )
        )
    return decision


def _build(component: Any) -> Any:
    try:
        return component.build()
    except ConfigError as exc:
        raise ReplayRefused(f"meta.json's config does not build here: {exc}") from None


def _check_data(env: Any, meta: dict[str, Any]) -> None:
    """The environment's data fingerprint today against the one the stream's identity records."""
    logged = (meta.get("identity") or {}).get("data")
    today = json.loads(json.dumps(env.provenance)) if env.provenance is not None else None
    if logged != today:
        raise ReplayRefused(
            f"the data files changed since the run (fingerprint {_short(today)}, meta.json records "
            f"{_short(logged)}): a rebuilt prompt would show what the model never saw"
        )


def _short(fingerprint: Any) -> str:
    return "none" if fingerprint is None else json.dumps(fingerprint, sort_keys=True)[:80]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m runners.agent.replay", description=__doc__.split("\n")[0]
    )
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="one stream's log directory")
    parser.add_argument(
        "--t", type=int, required=True, help="the episode (stream step) whose prompt to rebuild"
    )
    args = parser.parse_args(argv)
    try:
        decision = replay_decision(args.run_dir, args.t)
    except (ValueError, ReplayMismatch) as refused:  # ReplayRefused, or a log the harness replays otherwise
        print(f"runners.agent.replay: {visible(refused)}", file=sys.stderr)
        return 2
    print("\n".join(prompt_lines(decision.prompts, "rebuilt by replay")))
    return 0


if __name__ == "__main__":
    sys.exit(main())

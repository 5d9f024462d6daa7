"""Rebuild one logged decision exactly: replay a stream's log up to episode t, no model calls.

The stream's environment and memory are rebuilt from its `meta.json` config and the logged replies
are fed back (as a resumed run does, `runners.agent.loop.run_stream`), so the prompt captured at episode t is
the one the model received, byte for byte, and the memory is in the state it was in at that decision.
This is the harness side of `python -m analysis.inspect`, which itself reads logs only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from omegaconf import OmegaConf

from runners.agent.loop import _logged_replies, run_stream
from runners.config import validate
from runners.llm.backend import Reply, Request
from runners.runlog import EPISODES, META


@dataclass
class Decision:
    """Episode t of a stream as the agent lived it: its log record, the messages of every model call
    (one, or one per hop), and the precedents of `key` with their state and history at that moment
    (None for a method that keeps no precedents)."""

    record: dict[str, Any]
    prompts: list[tuple[dict[str, str], ...]] = field(default_factory=list)
    precedents: list[dict[str, Any]] | None = None
    key: str = ""


class _Reached(Exception):
    """Raised by the capturing backend once episode t's calls are over: the replay can stop."""


class _Capture:
    """A backend for the replay from episode t on: it answers with episode t's logged replies, keeps
    the requests, notes the memory's precedents of the key at the first call, and stops the stream at
    the next episode's call."""

    name = "replay"

    def __init__(self, record: dict[str, Any], memory: Any, decision: Decision) -> None:
        self._replies: Iterator[Reply] = _logged_replies(record)
        self._memory = memory
        self._decision = decision

    async def complete(self, request: Request) -> Reply:
        reply = next(self._replies, None)
        if reply is None:
            raise _Reached
        if not self._decision.prompts:
            self._decision.precedents = precedents_of(self._memory, self._decision.key)
        self._decision.prompts.append(request.messages)
        return reply

    def stats(self) -> dict:
        return {}


def precedents_of(memory: Any, key: str) -> list[dict[str, Any]] | None:
    """Audit records (counts, state, history) of the memory's precedents whose key prints as `key`;
    None for a memory without precedents."""
    listing = getattr(memory, "precedents", None)
    if listing is None:
        return None
    return [p.record() for p in listing() if p.key_text() == key]


def read_records(run_dir: Path) -> list[dict[str, Any]]:
    """A stream's episode records, in order."""
    return pq.read_table(run_dir / EPISODES).to_pylist()


def replay_decision(run_dir: str | Path, t: int, key: str | None = None) -> Decision:
    """Replay the stream logged in `run_dir` up to its episode at step `t` (see the module docstring).

    `key` picks whose precedents are reported (default: the key of episode t). Raises ValueError with
    one line when the directory is not a complete stream or has no episode at `t`.
    """
    run_dir = Path(run_dir)
    if not (run_dir / META).is_file() or not (run_dir / EPISODES).is_file():
        raise ValueError(f"{run_dir}: not a complete stream (needs {EPISODES} and {META})")
    meta = json.loads((run_dir / META).read_text(encoding="utf-8"))
    records = read_records(run_dir)
    index = next((i for i, r in enumerate(records) if r["t"] == t), None)
    if index is None:
        steps = f"{records[0]['t']}..{records[-1]['t']}" if records else "none"
        raise ValueError(f"--t {t}: no episode at this step in {run_dir} (steps {steps})")
    config = dict(meta["config"])
    spec = validate(OmegaConf.create(config), {})
    record = records[index]
    decision = Decision(record=record, key=record["key"] if key is None else key)
    labels = {name: meta[name] for name in ("experiment", "env", "memory")}
    with contextlib.closing(spec.env.build()) as env, contextlib.suppress(_Reached):
        memory = spec.memory.build()
        asyncio.run(
            run_stream(
                env,
                memory,
                _Capture(record, memory, decision),
                seed=int(config["seed"]),
                labels=labels,
                replay=records[:index],
                ranker=spec.retrieval.ranker(),
            )
        )
    return decision

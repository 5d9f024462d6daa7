"""Run every memory method on short seeded streams of one environment (shared by the phenomena tests)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import pandas as pd

from envs.base import Environment
from runners.agent.loop import run_stream
from runners.llm.simulated import SimulatedBackend
from runners.registry import build_memory, memory_names


def run_methods(make_env: Callable[[], Environment], seeds: range, methods: list[str] | None = None):
    """Episodes and lifecycle events of each method x seed at default settings."""
    rows, events = [], []
    for m in methods or memory_names():
        for s in seeds:
            with contextlib.closing(make_env()) as env:
                res = asyncio.run(
                    run_stream(env, build_memory(m), SimulatedBackend(), seed=s, labels={"memory": m})
                )
            rows += res.records
            events += [{**e, "memory": m, "seed": s} for e in res.events]
    return pd.DataFrame(rows), pd.DataFrame(events)


def success(df: pd.DataFrame, phase: str | None = None) -> pd.Series:
    """Mean success per method (in one phase, or overall)."""
    sub = df if phase is None else df[df.phase == phase]
    return sub.groupby("memory").success.mean()


def early_success(df: pd.DataFrame, boundaries: list[int], window: int) -> pd.Series:
    """Mean success per method over the first `window` episodes after each phase boundary: how fast a
    method adapts."""
    mask = pd.Series(False, index=df.index)
    for b in boundaries:
        mask |= (df.t >= b) & (df.t < b + window)
    return df[mask].groupby("memory").success.mean()

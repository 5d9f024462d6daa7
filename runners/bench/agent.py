"""Benchmarks 2-4, on the real agent loop and the simulated backend: prompt footprint, end-to-end
episodes per second, and how the cost of an episode grows with the stream.

Components are composed from conf/ exactly as `python -m runners.run` composes them, so a benchmark
measures the configurations the paper experiments run.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from analysis.metrics.display import sorted_methods
from envs.base import Outcome, Task
from runners.agent.loop import run_stream
from runners.bench.memory import median
from runners.compose import compose_spec
from runners.config import ConfigError, RunSpec
from runners.registry import swept_memories
from runners.run import run_spec

# The memory config of each method in an environment's paper experiment, in table order (memoryagentbench
# runs TEPA-Rev with its stated-fact thresholds; conf/experiment/paper_memoryagentbench.yaml).
PAPER_MEMORIES = tuple(sorted_methods(swept_memories("paper_controlled")))
MAB_MEMORIES = tuple(swept_memories("paper_memoryagentbench"))


def _run(spec: RunSpec, seed: int, env: Any = None) -> list[dict[str, Any]]:
    """One stream through the agent loop (no logs written); its episode records."""
    with contextlib.closing(spec.env.build() if env is None else env) as env:
        result = asyncio.run(
            run_stream(
                env,
                spec.memory.build(),
                spec.llm.build(),
                seed=seed,
                labels={"memory": spec.memory.label},
                ranker=spec.retrieval.ranker(),
            )
        )
    return result.records


# --- 2. prompt footprint ----------------------------------------------------------------------------


def prompt_footprint(
    memories: Sequence[str] = PAPER_MEMORIES,
    episodes: int = 1000,
    seeds: Sequence[int] = (0,),
    tail: int = 100,
) -> dict[str, dict[str, float]]:
    """Mean prompt tokens per decision over `episodes` controlled_drift episodes (its four phases of
    episodes/4 each), and over the last `tail` of them (the prompt a method has grown to by then);
    averaged over `seeds`. Token counts are the simulated backend's estimate (runners.agent.prompt)."""
    if episodes < 4 or episodes % 4:
        raise ValueError(f"episodes must be a positive multiple of 4 (four phases), got {episodes!r}")
    if not 1 <= tail <= episodes:
        raise ValueError(f"tail must be between 1 and episodes={episodes}, got {tail!r}")
    out = {}
    for memory in memories:
        spec = compose_spec(["env=controlled_drift", f"env.phase_length={episodes // 4}", f"memory={memory}"])
        means, tails = [], []
        for seed in seeds:
            tokens = [r["prompt_tokens"] for r in _run(spec, seed)]
            means.append(sum(tokens) / len(tokens))
            tails.append(sum(tokens[-tail:]) / tail)
        out[spec.memory.label] = {
            "mean_prompt_tokens": sum(means) / len(means),
            "final_prompt_tokens": sum(tails) / len(tails),
        }
    return out


# --- 3. end to end ----------------------------------------------------------------------------------


def end_to_end(
    envs: Mapping[str, Sequence[str]],
    repeats: int,
    seed: int = 0,
    overrides: Mapping[str, Sequence[str]] | None = None,
    scratch: Path | None = None,
) -> dict[str, dict[str, Any]]:
    """Episodes per second of the runner (`runners.run.run_spec`: environment, memory, simulated
    backend, per-episode log and final files) for each environment and its memories, one seed,
    `repeats` times in rotated order after one untimed warm-up run; medians. `overrides` adds Hydra
    overrides per environment. An environment that cannot be built (e.g. its data is missing) is
    reported as skipped, with the reason."""
    overrides = overrides or {}
    out: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="tepa-bench-", dir=scratch) as tmp:
        for env, memories in envs.items():
            try:
                extra = tuple(overrides.get(env, ()))
                specs = [
                    compose_spec([f"env={env}", f"memory={m}", f"seed={seed}", "progress=false", *extra])
                    for m in memories
                ]
                specs[0].env.build().close()  # fail early; warms a data loader's cache for every timing alike
            except (ConfigError, OSError, ValueError, RuntimeError) as exc:
                out[env] = {"skipped": f"{type(exc).__name__}: {exc}"}
                continue
            asyncio.run(run_spec(replace(specs[0], results_dir=f"{tmp}/{env}/warmup", name="bench")))
            seconds: dict[str, list[float]] = {s.memory.label: [] for s in specs}
            episodes: dict[str, int] = {}
            for r in range(repeats):
                for spec in specs[r % len(specs) :] + specs[: r % len(specs)]:
                    spec = replace(spec, results_dir=f"{tmp}/{env}/{r}", name="bench")
                    start = time.perf_counter()
                    summary = asyncio.run(run_spec(spec))
                    seconds[spec.memory.label].append(time.perf_counter() - start)
                    episodes[spec.memory.label] = summary.episodes_run
            methods = {
                label: {
                    "episodes": episodes[label],
                    "seconds": secs,
                    "episodes_per_s": median([episodes[label] / s for s in secs]),
                }
                for label, secs in seconds.items()
            }
            total_s = sum(median(m["seconds"]) for m in methods.values())
            out[env] = {
                "methods": methods,
                "episodes_per_s": sum(m["episodes"] for m in methods.values()) / total_s,
            }
    return out


# --- 4. scaling -------------------------------------------------------------------------------------


class _Replayed:
    """controlled_drift with the first `warmup` episodes already lived: their outcomes (the current
    action with probability `p_correct`, else a random option) are handed to memory as ingest steps,
    then `window` real decision episodes follow. This gives a memory the state it would have after a
    long stream at a cost linear in the stream, so a window's cost can be measured at 100x the length."""

    def __init__(self, env: Any, warmup: int, window: int, p_correct: float = 0.7, seed: int = 0) -> None:
        self.env, self.name = env, env.name
        env.reset(seed)
        rng = random.Random(f"bench/{seed}")
        self._tasks: list[Task] = []
        for i, task in enumerate(env.tasks()):
            if i == warmup + window:
                break
            if i < warmup:
                action = task.correct if rng.random() < p_correct else rng.choice(task.options)
                obs = env.execute(task, action).observations
                task = Task(key=None, text="", phase=task.phase, t=task.t, observe=obs, decide=False)
            self._tasks.append(task)
        self.phase_boundaries = env.phase_boundaries

    def reset(self, seed: int) -> None:
        """The stream was drawn at construction; the environment keeps its regimes."""

    def tasks(self) -> Iterator[Task]:
        return iter(self._tasks)

    def execute(self, task: Task, action: str) -> Outcome:
        return self.env.execute(task, action)

    def trial(self, precedent: Any, kind: str) -> bool:
        return self.env.trial(precedent, kind)


def scaling(
    memories: Sequence[str] = PAPER_MEMORIES,
    base: int = 1000,
    factors: Sequence[int] = (1, 10, 100),
    window: int = 30,
    repeats: int = 3,
    seed: int = 0,
) -> dict[str, Any]:
    """Cost of one episode (wall seconds, prompt tokens) after a controlled_drift stream of
    base x factor episodes, for each factor: the mean over a window of `window` decision episodes,
    median over `repeats`. The slope is the least-squares slope of log(cost) on log(stream length):
    0 is flat, 1 grows in proportion to the stream."""
    if window < 2:
        raise ValueError(f"window must be >= 2 (the time between the first and last episode), got {window!r}")
    sizes = [base * f for f in factors]
    seconds: dict[str, list[float]] = {}
    tokens: dict[str, list[float]] = {}
    for size in sizes:
        phase_length = math.ceil((size + window) / 4)
        spec = compose_spec(["env=controlled_drift", f"env.phase_length={phase_length}"])
        env = _Replayed(spec.env.build(), size, window, seed=seed)  # one history for every method
        for memory in memories:
            spec = compose_spec(
                ["env=controlled_drift", f"env.phase_length={phase_length}", f"memory={memory}"]
            )
            per_rep, tok = [], 0.0
            for _ in range(repeats):
                stamps: list[float] = []
                records = asyncio.run(
                    run_stream(
                        env,
                        spec.memory.build(),
                        spec.llm.build(),
                        seed=seed,
                        labels={},
                        on_episode=lambda rec, events, stamps=stamps: stamps.append(time.perf_counter()),
                    )
                ).records
                per_rep.append((stamps[-1] - stamps[0]) / (len(stamps) - 1))
                tok = sum(r["prompt_tokens"] for r in records) / len(records)
            seconds.setdefault(spec.memory.label, []).append(median(per_rep))
            tokens.setdefault(spec.memory.label, []).append(tok)
    methods = {
        label: {
            "us_per_episode": [s * 1e6 for s in secs],
            "prompt_tokens": tokens[label],
            "slope_time": loglog_slope(sizes, secs),
            "slope_tokens": loglog_slope(sizes, tokens[label]),
        }
        for label, secs in seconds.items()
    }
    return {"sizes": sizes, "window": window, "methods": methods}


def loglog_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of log(y) on log(x)."""
    if len(xs) != len(ys) or len(xs) < 2:
        raise ValueError("loglog_slope needs two or more (x, y) pairs")
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / sum((a - mx) ** 2 for a in lx)

"""`check_env`: the properties every environment must keep, checked by running its stream a few times.

Run it on a class of one's own before plugging it in (`env=custom`); it raises `EnvCheckError` with one
line naming the first property that fails:
- the protocol's members are there (`envs.base.Environment`);
- `reset(seed)` gives the same stream (tasks and outcomes) every time, and another seed a different
  one (unless `varies_with_seed=False`: a benchmark's fixed data, say);
- `len(env)` is the number of decision tasks, and `t` never decreases along the stream;
- `phase_boundaries` lists exactly the tasks where the phase changes, with the new phase;
- trials of every kind, run between tasks, return a bool and leave the stream and its outcomes alone;
- when it reports the truth (`envs.base.TruthEnvironment`): `truth(key)` of every decision's key is a
  str or None, the same on every pass, None for a key not of the stream, and asking leaves the stream
  alone;
- when it offers `execute_async` (`envs.base.AsyncEnvironment`): awaiting it gives the outcomes
  `execute` gives;
- `close()` can be called twice (the check ends by closing the environment).

The stream is driven as the agent loop drives it: every decision task is executed, with its `correct`
answer when it has one, else its first option, else an empty answer.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from envs.base import TRIAL_KINDS, AsyncEnvironment, Environment, Outcome, Task, TruthEnvironment
from tepa.protocol import missing_members

Step = tuple[Task, Outcome | None]
#: A key no environment's stream has: its truth must be None.
FOREIGN_KEY = ("not a key of this stream",)


class EnvCheckError(AssertionError):
    """An environment broke a property of the protocol; the message names it."""


def check_env(
    env: Environment, seed: int = 0, *, other_seed: int | None = None, varies_with_seed: bool = True
) -> None:
    """Check `env` with `seed` (and `other_seed`, default `seed + 1`, for the seed's effect); see the
    module docstring. Closes `env` at the end."""
    _check_members(env)
    first = _run(env, seed)
    again = _run(env, seed)
    _same(first, again, "determinism", f"reset({seed}) twice gave different streams")
    decisions = sum(task.decide for task, _ in first)
    if len(env) != decisions:
        _fail(
            "length", f"len(env) is {len(env)} but the stream of seed {seed} has {decisions} decision task(s)"
        )
    _check_times(first)
    _check_boundaries(env, first)
    _same(first, _run(env, seed, trials=True), "trials", "running trials between tasks changed the stream")
    if isinstance(env, TruthEnvironment):
        truths: list[list[str | None]] = [[], []]
        _same(first, _run(env, seed, truths=truths[0]), "truth", "asking truth(key) changed the stream")
        _run(env, seed, truths=truths[1])
        if truths[0] != truths[1]:
            _fail("truth", f"reset({seed}) twice gave different truths")
    if isinstance(env, AsyncEnvironment):
        awaited = _run(env, seed, awaited=True)
        _same(first, awaited, "execute_async", "awaiting execute_async gave other outcomes than execute")
    if varies_with_seed:
        other = seed + 1 if other_seed is None else other_seed
        if _run(env, other) == first:
            _fail("seed", f"reset({other}) gave the same stream as reset({seed})")
    try:
        env.close()
        env.close()
    except Exception as exc:
        _fail("close", f"a second close() raised {type(exc).__name__}: {exc}")


def _check_members(env: Any) -> None:
    missing = missing_members(env, Environment)
    if missing:
        _fail(
            "protocol",
            f"{type(env).__name__} lacks {', '.join(missing)} of envs.base.Environment",
        )


def _run(
    env: Environment,
    seed: int,
    *,
    trials: bool = False,
    truths: list[str | None] | None = None,
    awaited: bool = False,
) -> list[Step]:
    """One pass over the stream of `seed`, executing every decision (and, with `trials`, running a trial of
    every kind on the executed action after it; with `truths`, collecting the truth of every decision's key
    before it is executed, checked as `_truth` says; with `awaited`, through `execute_async`)."""
    env.reset(seed)
    steps: list[Step] = []
    for task in env.tasks():
        outcome = None
        if task.decide:
            if truths is not None:
                truths.append(_truth(env, task))  # type: ignore[arg-type]
            action = task.correct or (task.options[0] if task.options else "")
            if awaited:
                outcome = asyncio.run(env.execute_async(task, action))  # type: ignore[attr-defined]
            else:
                outcome = env.execute(task, action)
            if trials:
                precedent = SimpleNamespace(key=task.key, value=action)
                for kind in TRIAL_KINDS:
                    if type(env.trial(precedent, kind)) is not bool:
                        _fail("trials", f"trial(precedent, {kind!r}) at t={task.t} did not return a bool")
        steps.append((task, outcome))
    return steps


def _truth(env: TruthEnvironment, task: Task) -> str | None:
    """The truth of the task's key, checked to be a str or None, and None for a key of no stream."""
    value = env.truth(task.key)
    if value is not None and type(value) is not str:
        _fail(
            "truth", f"truth({task.key!r}) at t={task.t} returned {type(value).__name__}, not a str or None"
        )
    foreign = env.truth(FOREIGN_KEY)
    if foreign is not None:
        _fail(
            "truth",
            f"truth({FOREIGN_KEY!r}) at t={task.t} returned {foreign!r}; a key not of the stream has None",
        )
    return value


def _same(a: list[Step], b: list[Step], prop: str, what: str) -> None:
    if a == b:
        return
    i = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    _fail(prop, f"{what} (first difference at task {i} of {len(a)} and {len(b)})")


def _check_times(steps: list[Step]) -> None:
    for (before, _), (task, _) in zip(steps, steps[1:], strict=False):
        if task.t < before.t:
            _fail("time", f"t goes back from {before.t} to {task.t}")


def _check_boundaries(env: Environment, steps: list[Step]) -> None:
    changes = [
        (task.t, task.phase)
        for (before, _), (task, _) in zip(steps, steps[1:], strict=False)
        if task.phase != before.phase
    ]
    declared = [tuple(b) for b in env.phase_boundaries]
    if declared != changes:
        _fail("phase boundaries", f"phase_boundaries is {declared} but the phase changes at {changes}")


def _fail(prop: str, detail: str) -> None:
    raise EnvCheckError(f"environment check failed: {prop}: {detail}")

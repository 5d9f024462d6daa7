"""The agent loop: one loop for every environment, memory method and backend.

retrieve -> render -> backend -> parse -> execute -> observe / feedback -> one record per episode.
A stream can be *replayed*: records logged by an interrupted run feed their replies back instead of
calling the model, so the environment and memory are rebuilt exactly (and for free) before the loop
carries on where it stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from envs.base import Environment, Task
from runners.backend import Backend, Reply, Request
from runners.parse import parse_choice, parse_free
from runners.prompt import labels_for, render
from tepa.evidence import Evidence, Query
from tepa.protocol import Memory

COUNTERS = ("promotions", "revocations", "repromotions", "trials", "trial_passes")


class ReplayMismatch(RuntimeError):
    """A replayed episode did not reproduce the logged one: the stream is not deterministic."""


@dataclass
class StreamResult:
    records: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)


def _replayed(rec: dict[str, Any]) -> Reply:
    return Reply(
        text=rec["reply"],
        prompt_tokens=int(rec["prompt_tokens"]),
        completion_tokens=int(rec["completion_tokens"]),
        latency=float(rec["latency"]),
        cached=bool(rec["cached"]),
        error=rec.get("error") or None,
    )


def _act(task: Task, reply: Reply) -> tuple[str, bool]:
    """The action a reply asks for, and whether it could be parsed."""
    if reply.error:
        return "", False
    if task.options:
        idx = parse_choice(reply.text, task.options)
        return (task.options[idx], True) if idx is not None else ("", False)
    answer = parse_free(reply.text)
    return answer, bool(answer)


async def run_stream(
    env: Environment,
    memory: Memory,
    backend: Backend,
    *,
    seed: int,
    labels: dict[str, str],
    replay: Sequence[dict[str, Any]] = (),
    on_episode: Callable[[dict[str, Any], list[dict[str, Any]]], None] | None = None,
    progress: Any = None,
) -> StreamResult:
    """Run one (environment, memory, seed) stream to the end and return its episode records and
    lifecycle events. See the module docstring for `replay`."""
    env.reset(seed)
    if hasattr(memory, "set_trial"):
        memory.set_trial(env.trial)
    boundaries = dict(env.phase_boundaries)
    drain = getattr(memory, "drain_events", None)
    result = StreamResult()
    for task in env.tasks():
        if task.t in boundaries:
            memory.on_phase_boundary(boundaries[task.t], task.t)
        for obs in task.observe:
            memory.observe(obs)
        if not task.decide:
            if drain:
                result.events.extend(drain())
            continue
        evidence = memory.retrieve(Query(key=task.key, text=task.text, t=task.t))
        messages = render(task, evidence)
        i = len(result.records)
        if i < len(replay):
            reply = _replayed(replay[i])
        else:
            reply = await backend.complete(Request(messages=messages, seed=seed, labels=labels_for(task)))
        action, parse_ok = _act(task, reply)
        outcome = env.execute(task, action)
        for obs in outcome.observations:
            memory.observe(obs)
        used: list[Evidence] = [e for e in evidence if e.value == action] if action else []
        memory.feedback(used, outcome.success, task.t)
        snap = memory.snapshot()
        rec = {
            **labels,
            "seed": seed,
            "t": task.t,
            "phase": task.phase,
            "key": "" if task.key is None else str(task.key),
            "action": action,
            "correct": task.correct or "",
            "success": bool(outcome.success),
            "parse_ok": parse_ok,
            "reply": reply.text,
            "error": reply.error or "",
            "n_evidence": len(evidence),
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "cached": reply.cached,
            "latency": reply.latency,
            "hypothesis": int(snap.get("hypothesis", 0)),
            "active": int(snap.get("active", 0)),
            "revoked": int(snap.get("revoked", 0)),
            **{c: int(snap.get(c, 0)) for c in COUNTERS},
        }
        if i < len(replay) and (replay[i]["t"], replay[i]["action"]) != (rec["t"], rec["action"]):
            raise ReplayMismatch(
                f"episode {i}: logged (t={replay[i]['t']}, action={replay[i]['action']!r}) but replay gave "
                f"(t={rec['t']}, action={rec['action']!r})"
            )
        events = drain() if drain else []
        result.records.append(rec)
        result.events.extend(events)
        if on_episode is not None and i >= len(replay):
            on_episode(rec, events)
        if progress is not None:
            progress.update(1)
    return result

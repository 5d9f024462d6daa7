"""`check_memory`: the properties every memory method must keep, checked on seeded random streams.

Run it on a class of one's own before plugging it in (`memory=custom`): it drives fresh instances
through the calls the agent loop makes (observe, retrieve, feedback, phase boundaries) and raises
`MemoryCheckError` with one line naming the first property that fails. The properties:
- the protocol's members are there (`tepa.protocol.Memory`);
- `retrieve` returns a list of `Evidence`, and for a query with a key only evidence of that key;
- `snapshot` returns a dict of counts (str -> non-negative int) after every call;
- the same calls on a fresh instance give the same retrievals, snapshots and events (resumed runs
  replay a stream and must end where an uninterrupted one does);
- the optional hooks keep their contracts: `drain_events` returns a list of events and hands out each
  event once (a memory with `set_trial` is first given `trial`, a stand-in for the environment's);
- every event is in the vocabulary the analysis reads (`analysis.streamlog.events`): all of its fields with
  their types, a known event name and state, the state the event implies (promoted and repromoted:
  active, revoked: revoked), an id's first event `created`, and one key and value per id.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

from analysis.streamlog.events import EVENTS, FIELDS, STATE_AFTER, STATES
from tepa.evidence import Evidence, Observation, Query
from tepa.protocol import EventMemory, Memory, TrialFn, TrialMemory, missing_members

KEYS: tuple[Hashable, ...] = (0, 1, "k", ("alice", "capital"))
VALUES = ("a", "b", "c")
#: One call of the agent loop: ("observe", key, value, holds, t, text), ("retrieve", key, text, t),
#: ("feedback", value acted on, success, t) (the evidence of that value from the last retrieval is
#: reported as used) or ("boundary", t).
Op = tuple[Any, ...]


class MemoryCheckError(AssertionError):
    """A memory broke a property of the protocol; the message names it."""


def stand_in_trial(precedent: Any, kind: str) -> bool:
    """A deterministic stand-in for `Environment.trial`: counterfactual trials fail, the others pass
    for values of odd length."""
    return kind != "counterfactual" and len(str(precedent.value)) % 2 == 1


def check_memory(
    memory_factory: Callable[[], Memory], *, seed: int = 0, streams: int = 10, trial: TrialFn = stand_in_trial
) -> None:
    """Check the memories `memory_factory()` builds on `streams` random streams of each kind (random
    calls, agent-loop-shaped episodes, many keys) drawn from `seed`; see the module docstring."""
    rng = random.Random(seed)
    for _ in range(streams):
        for ops in (random_ops(rng), episode_ops(rng), many_keys_ops(rng)):
            check_stream(memory_factory, ops, trial=trial)


def check_stream(
    memory_factory: Callable[[], Memory], ops: Sequence[Op], *, trial: TrialFn = stand_in_trial
) -> None:
    """Check the protocol's properties after every call of `ops`, then replay `ops` on a fresh instance
    and check it gives the same trace."""
    first = _trace(memory_factory(), ops, trial)
    again = _trace(memory_factory(), ops, trial)
    for i, (a, b) in enumerate(zip(first, again, strict=True)):
        if a != b:
            part = next(name for name, x, y in zip(_TRACED, a, b, strict=True) if x != y)
            _fail(
                "determinism", f"the same calls on a fresh instance differ at call {i} ({ops[i][0]}): {part}"
            )


#: What `_trace` records after every call.
_TRACED = ("what retrieve returned", "the snapshot", "the drained events")


def _trace(memory: Memory, ops: Sequence[Op], trial: TrialFn) -> list[tuple[Any, ...]]:
    """Run `ops` on `memory`, checking each result; after every call, the _TRACED values."""
    missing = missing_members(memory, Memory)
    if missing:
        _fail(
            "protocol",
            f"{type(memory).__name__} lacks {', '.join(missing)} of tepa.protocol.Memory",
        )
    if not isinstance(memory.name, str):
        _fail("protocol", f"name must be a str, got {type(memory.name).__name__}")
    if isinstance(memory, TrialMemory):
        memory.set_trial(trial)
    last: list[Evidence] = []
    trace: list[tuple[Any, ...]] = []
    precedents: dict[int, tuple[str, str]] = {}  # id -> (key, value), from the events so far
    for i, op in enumerate(ops):
        kind, *args = op
        result: Any = None
        if kind == "observe":
            key, value, holds, t, text = args
            memory.observe(Observation(key, value, holds, t, text))
        elif kind == "retrieve":
            key, text, t = args
            result = last = memory.retrieve(Query(key=key, text=text, t=t))
            _check_evidence(result, key, i)
        elif kind == "feedback":
            action, success, t = args
            memory.feedback([e for e in last if e.value == action], success, t)
        elif kind == "boundary":
            memory.on_phase_boundary("next", args[0])
        else:
            raise ValueError(f"ops[{i}]: unknown call {kind!r}")
        trace.append((result, _checked_snapshot(memory, i), _drained(memory, i, precedents)))
    return trace


def _check_evidence(result: Any, key: Hashable | None, i: int) -> None:
    if not isinstance(result, list) or not all(isinstance(e, Evidence) for e in result):
        _fail("retrieve", f"call {i}: must return a list of tepa.evidence.Evidence, got {_shape(result)}")
    if key is not None:
        others = [e.key for e in result if e.key != key]
        if others:
            _fail(
                "keyed retrieval",
                f"call {i}: retrieve(Query(key={key!r})) returned evidence of key {others[0]!r}",
            )


def _checked_snapshot(memory: Memory, i: int) -> dict[str, int]:
    snap = memory.snapshot()
    if not isinstance(snap, dict):
        _fail("snapshot", f"call {i}: must return a dict of counts, got {type(snap).__name__}")
    bad = next((k for k, v in snap.items() if not isinstance(k, str) or type(v) is not int or v < 0), None)
    if bad is not None:
        _fail(
            "snapshot",
            f"call {i}: counts must be non-negative ints keyed by name, got {bad!r}: {snap[bad]!r}",
        )
    return dict(snap)


def _drained(memory: Memory, i: int, precedents: dict[int, tuple[str, str]]) -> list[dict[str, Any]] | None:
    if not isinstance(memory, EventMemory):
        return None
    events = memory.drain_events()
    if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
        _fail("drain_events", f"call {i}: must return a list of dicts (events), got {_shape(events)}")
    if memory.drain_events():
        _fail("drain_events", f"call {i}: a second call right after the first returned events again")
    for event in events:
        _check_event(event, i, precedents)
    return events


def _check_event(event: dict[str, Any], i: int, precedents: dict[int, tuple[str, str]]) -> None:
    """One drained event against the vocabulary (`analysis.streamlog.events`); `precedents` learns its id."""
    for name, kind in FIELDS.items():
        if name not in event:
            _fail("events", f"call {i}: an event lacks {name!r} (every event has {', '.join(FIELDS)})")
        value = event[name]
        if type(value) is not kind:
            _fail("events", f"call {i}: event field {name}={value!r} must be {kind.__name__}")
    name, state, pid = event["event"], event["state"], event["id"]
    if name not in EVENTS:
        _fail("events", f"call {i}: unknown event {name!r} (the analysis reads: {', '.join(EVENTS)})")
    if state not in STATES:
        _fail("events", f"call {i}: {name} event with state {state!r} (one of: {', '.join(STATES)})")
    if STATE_AFTER.get(name, state) != state:
        _fail("events", f"call {i}: a {name} event must leave its precedent {STATE_AFTER[name]}, not {state}")
    named = (event["key"], event["value"])
    if pid not in precedents:
        if name != "created":
            _fail("events", f"call {i}: precedent id {pid}'s first event is {name!r}, not 'created'")
        precedents[pid] = named
    elif name == "created":
        _fail("events", f"call {i}: precedent id {pid} created twice (an id names one precedent)")
    elif precedents[pid] != named:
        was = precedents[pid]
        _fail("events", f"call {i}: precedent id {pid} changed its key or value from {was!r} to {named!r}")


def _shape(value: Any) -> str:
    if isinstance(value, list):
        return f"a list of {', '.join(sorted({type(x).__name__ for x in value})) or 'nothing'}"
    return type(value).__name__


def _fail(prop: str, detail: str) -> None:
    raise MemoryCheckError(f"memory check failed: {prop}: {detail}")


# --- streams ---------------------------------------------------------------------------------------


def random_ops(rng: random.Random, n: int = 40) -> list[Op]:
    """Any mix of the loop's calls, at non-decreasing times."""
    ops: list[Op] = []
    t = 0
    for _ in range(n):
        t += rng.random() < 0.5
        kind = rng.choice(("observe", "observe", "retrieve", "feedback", "boundary"))
        if kind == "observe":
            key, value = rng.choice(KEYS), rng.choice(VALUES)
            ops.append(("observe", key, value, rng.random() < 0.7, t, f"{key} {value}"))
        elif kind == "retrieve":
            ops.append(
                ("retrieve", rng.choice((None, *KEYS, "never")), rng.choice(("", "a k", "capital")), t)
            )
        elif kind == "feedback":
            ops.append(("feedback", rng.choice(VALUES), rng.random() < 0.5, t))
        else:
            ops.append(("boundary", t))
    return ops


def episode_ops(rng: random.Random, n: int = 60) -> list[Op]:
    """Agent-loop-shaped episodes: retrieve for a key, act, report the outcome, observe it."""
    return list(
        _episodes(
            (rng.choice(KEYS[:2]), rng.choice(VALUES), rng.random() < 0.6, rng.random() < 0.1)
            for _ in range(n)
        )
    )


def _episodes(draws: Iterable[tuple[Hashable, str, bool, bool]]) -> Iterable[Op]:
    for t, (key, action, success, boundary) in enumerate(draws):
        if boundary:
            yield ("boundary", t)
        yield ("retrieve", key, "", t)
        yield ("feedback", action, success, t)
        yield ("observe", key, action, success, t, f"{key} {action}")


def many_keys_ops(rng: random.Random, n_keys: int = 6, n: int = 60) -> list[Op]:
    """Observations spread over many keys, then a keyed retrieval for each."""
    ops: list[Op] = [
        ("observe", t % n_keys, VALUES[t % 3], rng.random() < 0.75, t, f"item {t % n_keys}") for t in range(n)
    ]
    return ops + [("retrieve", key, "", n) for key in range(n_keys)]

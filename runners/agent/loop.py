"""The agent loop: one loop for every environment, memory method and backend.

retrieve -> render -> backend -> parse -> execute -> observe / feedback -> one record per episode.
A multi-hop question (`Task.multi_hop`) is answered hop by hop: each hop retrieves by (entity, relation),
asks the model, and the answer becomes the next hop's entity. Each record keeps what the prompt held
(`runners.agent.sample`): the options, every hop's retrieved lines, the truth an environment that
reports it (`envs.base.TruthEnvironment`) gives for every hop's key before the action is executed, and,
with `log_prompts`, the messages sent.

While streams run, the garbage collector leaves alone what existed before (`_QuietCollector`).

A stream can be *replayed*: records logged by an interrupted run feed their replies back instead of
calling the model, so the environment and memory are rebuilt exactly (and for free) before the loop
carries on where it stopped. `replay_problem` says which logged records can be replayed at all.

A stream lets the event loop in every YIELD_EVERY_S seconds, so a cancelled run stops promptly even when
the backend answers without ever waiting (the simulated one): without that, a stream ran to its end
in one event-loop step and SIGINT was only seen after it.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import json
import time
from collections.abc import Awaitable, Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

from analysis.streamlog.record import COUNTERS, SAMPLE, STATE_COUNTS, TYPES, EpisodeRecord
from analysis.streamlog.staleness import episode_quality
from envs.base import AsyncEnvironment, Environment, Task, TruthEnvironment
from runners.agent.parse import parse_choice, parse_free
from runners.agent.prompt import MemoryLines, labels_for, render
from runners.agent.sample import Sampler, options_json, prompt_json, truth_json
from runners.llm.backend import Backend, Reply, Request
from tepa.evidence import Evidence, Ranker
from tepa.protocol import EventMemory, Memory, TrialMemory
from tepa.retrieval.rank import similarity_query

# Young-generation collection threshold while streams run (CPython's default: 700).
STREAM_GC_THRESHOLD = 20_000


#: Seconds a stream runs before it lets the event loop in: other streams, and a cancellation (SIGINT,
#: SIGTERM), get their turn at least this often, also with a backend that answers without waiting.
YIELD_EVERY_S = 0.05
#: The fields of a logged episode that replay reads, and their JSON types (a float may read as an int).
_REPLAYED = {
    name: (int, float) if TYPES[name] is float else (TYPES[name],)
    for name in ("t", "action", "reply", "prompt_tokens", "completion_tokens", "latency", "cached")
}


#: The counts of the record a memory's `snapshot()` gives (0 for one it does not keep).
_COUNTS = (*STATE_COUNTS, *COUNTERS)
#: The fields `log_samples=False` leaves out of the log (placeholders for the record, then dropped).
_UNSAMPLED = dict.fromkeys((n for n in SAMPLE if n != "prompt"), "") | episode_quality([], None)


class ReplayMismatch(RuntimeError):
    """A replayed episode did not reproduce the logged one (`index`: its position): the log was changed,
    or the stream is not deterministic."""

    def __init__(self, message: str, index: int) -> None:
        super().__init__(message)
        self.index = index


def replay_problem(rec: Mapping[str, Any]) -> str | None:
    """Why a logged episode cannot be replayed (a field missing or of the wrong type), or None."""
    for name, types in _REPLAYED.items():
        value = rec.get(name)
        if value is None:
            return f"missing field {name!r}"
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            return f"field {name!r} is {type(value).__name__}, expected {types[0].__name__}"
    if not isinstance(rec.get("error", ""), str):
        return "field 'error' is not a string"
    hops = rec.get("hop_replies", "")
    if not isinstance(hops, str):
        return "field 'hop_replies' is not a string"
    if hops:
        try:
            texts = json.loads(hops)
        except ValueError:
            texts = None
        if not isinstance(texts, list) or not texts or not all(isinstance(x, str) for x in texts):
            return "field 'hop_replies' is not a JSON list of replies"
    return None


@dataclass
class StreamResult:
    records: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)

    def __repr__(self) -> str:
        """Counts only: `asyncio.run` reprs its main task's result on the way out (Python 3.11), and
        the full repr of a 262k TEPA stream's events took about 0.15 s."""
        return f"StreamResult({len(self.records)} records, {len(self.events)} events)"


class _QuietCollector:
    """While streams run, the objects that existed before the first one are frozen (`gc.freeze`: never
    scanned again) and the young generation is collected less often.

    A fact-heavy stream builds tens of thousands of long-lived objects; each time they filled the oldest
    generation the collector rescanned everything in the process (the parsed sources, the memories of
    the seeds run before): close to half of a 262k TEPA stream's time. The collector is restored when
    the last running stream ends, and collects what became garbage meanwhile as usual. Objects someone
    else froze stay frozen.
    """

    def __init__(self) -> None:
        self._running = 0
        self._threshold = gc.get_threshold()
        self._froze = False

    def __enter__(self) -> None:
        if self._running == 0:
            self._threshold = gc.get_threshold()
            young, *older = self._threshold
            self._froze = gc.get_freeze_count() == 0
            if self._froze:
                gc.freeze()
            if 0 < young < STREAM_GC_THRESHOLD:  # 0: automatic collection is off, leave it so
                gc.set_threshold(STREAM_GC_THRESHOLD, *older)
        self._running += 1

    def __exit__(self, *exc: object) -> None:
        self._running -= 1
        if self._running == 0:
            gc.set_threshold(*self._threshold)
            if self._froze:
                gc.unfreeze()


_QUIET_COLLECTOR = _QuietCollector()


def _quiet_collector(run: Callable[..., Awaitable[StreamResult]]) -> Callable[..., Awaitable[StreamResult]]:
    """`run`, with the collector quiet while it runs (`_QuietCollector`)."""

    @functools.wraps(run)
    async def quiet(*args: Any, **kwargs: Any) -> StreamResult:
        with _QUIET_COLLECTOR:
            return await run(*args, **kwargs)

    return quiet


def _logged_replies(rec: dict[str, Any]) -> Iterator[Reply]:
    """The replies an episode record holds (one, or one per hop), in the order they were asked."""
    texts = json.loads(rec["hop_replies"]) if rec.get("hop_replies") else [rec["reply"]]
    for i, text in enumerate(texts):
        last = i == len(texts) - 1
        yield Reply(
            text=text,
            prompt_tokens=int(rec["prompt_tokens"]) if last else 0,
            completion_tokens=int(rec["completion_tokens"]) if last else 0,
            latency=float(rec["latency"]) if last else 0.0,
            cached=bool(rec["cached"]),
            error=(rec.get("error") or None) if last else None,
            truncated=bool(rec.get("truncated")),
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


@dataclass
class _Decision:
    """What deciding one task took: the action, all retrieved evidence, the replies, and per hop its
    key and its evidence (one hop unless the task is multi-hop)."""

    action: str = ""
    parse_ok: bool = False
    evidence: list[Evidence] = field(default_factory=list)
    replies: list[Reply] = field(default_factory=list)
    keys: list[Hashable | None] = field(default_factory=list)
    hops: list[list[Evidence]] = field(default_factory=list)


def _capped(evidence: list[Evidence], cap: int | None) -> list[Evidence]:
    """The last `cap` items (all without a cap)."""
    return evidence if cap is None else evidence[-cap:]


async def _decide(
    task: Task,
    memory: Memory,
    ask: Callable[[Task, list[Evidence]], Any],
    ranker: Ranker | None = None,
    cap: int | None = None,
) -> _Decision:
    """Retrieve (by key, or by similarity under `ranker`), ask and parse: once, or hop by hop for a
    multi-hop question. With `cap`, each prompt shows only the last `cap` retrieved items (retrieval
    returns them oldest first), and only those get feedback."""
    d = _Decision()
    chain = task.multi_hop
    if chain is None:
        d.evidence = _capped(memory.retrieve(similarity_query(task.key, task.text, task.t, ranker)), cap)
        d.keys.append(task.key)
        d.hops.append(d.evidence)
        reply = await ask(task, d.evidence)
        d.replies.append(reply)
        d.action, d.parse_ok = _act(task, reply)
        return d
    entity = chain.subject
    for relation, template in zip(chain.relations, chain.questions, strict=True):
        key = (entity, relation)
        text = template.replace("[X]", entity)
        sub = Task(key=key, text=text, phase=task.phase, t=task.t, instructions=task.instructions)
        evidence = _capped(memory.retrieve(similarity_query(key, sub.text, sub.t, ranker)), cap)
        d.evidence.extend(evidence)
        d.keys.append(key)
        d.hops.append(evidence)
        reply = await ask(sub, evidence)
        d.replies.append(reply)
        entity, d.parse_ok = _act(sub, reply)
        if not d.parse_ok:
            break
    d.action = entity if d.parse_ok else ""
    return d


@_quiet_collector
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
    max_episodes: int | None = None,  # stop after that many episodes (None: the whole stream)
    log_prompts: bool = False,
    log_samples: bool = True,  # log what each prompt held and its memory quality (False: leave them out)
    max_evidence: int | None = None,  # show at most that many retrieved items per prompt (None: all)
    ranker: Ranker | None = None,  # retrieval by similarity under this ranker (None: by key)
) -> StreamResult:
    """Run one (environment, memory, seed) stream to the end and return its episode records and
    lifecycle events. `on_episode(record, events)` sees each new (not replayed) episode as it ends, so
    the caller can log it for resume; see the module docstring for `replay`. `log_prompts` keeps every
    prompt's messages in the record (replayed episodes too: replay renders the same prompts)."""
    env.reset(seed)
    if isinstance(memory, TrialMemory):
        memory.set_trial(env.trial)
    boundaries = dict(env.phase_boundaries)
    drain = memory.drain_events if isinstance(memory, EventMemory) else None
    truth = env.truth if isinstance(env, TruthEnvironment) else None
    execute_async = env.execute_async if isinstance(env, AsyncEnvironment) else None
    sampler = Sampler()
    memory_lines = MemoryLines()
    sent: list[tuple[dict[str, str], ...]] = []  # the current episode's prompts, with log_prompts
    result = StreamResult()
    pending: list[dict[str, Any]] = []  # events of ingest steps, logged with the next episode
    logged: Iterator[Reply] | None = None  # the current episode's logged replies, when it is replayed

    async def ask(t: Task, evidence: list[Evidence]) -> Reply:
        if logged is not None and not log_prompts:
            return next(logged)
        messages = render(t, evidence, memory_lines)
        if log_prompts:
            sent.append(messages)
        if logged is not None:
            return next(logged)
        return await backend.complete(
            Request(messages=messages, seed=seed, labels=labels_for(t), options=t.options)
        )

    next_yield = time.monotonic() + YIELD_EVERY_S
    for task in env.tasks():
        if time.monotonic() >= next_yield:  # see YIELD_EVERY_S
            await asyncio.sleep(0)
            next_yield = time.monotonic() + YIELD_EVERY_S
        if task.t in boundaries:
            memory.on_phase_boundary(boundaries[task.t], task.t)
        for obs in task.observe:
            memory.observe(obs)
        if not task.decide:
            if drain:
                pending.extend(drain())
            continue
        i = len(result.records)
        logged = _logged_replies(replay[i]) if i < len(replay) else None
        sent.clear()
        d = await _decide(task, memory, ask, ranker, max_evidence)
        if log_samples:
            truths = [truth(key) for key in d.keys] if truth is not None else None
            held, held_quality = sampler.sample(d.hops, truths)  # now: acting may change a memory's lists
            sample = {
                "options": options_json(tuple(task.options)),
                "evidence": held,
                "truth": truth_json(truths),
                **held_quality,
            }
        else:
            sample = _UNSAMPLED
        outcome = await execute_async(task, d.action) if execute_async else env.execute(task, d.action)
        for obs in outcome.observations:
            memory.observe(obs)
        if outcome.feedback:
            used = [e for e in d.evidence if e.value == d.action] if d.action else []
            memory.feedback(used, outcome.told, task.t)
        snap = memory.snapshot()
        last = d.replies[-1]
        hops = d.replies if len(d.replies) > 1 else None  # totals over hops; one reply is its own total
        rec = EpisodeRecord(
            seed=seed,
            t=task.t,
            phase=task.phase,
            key="" if task.key is None else str(task.key),
            action=d.action,
            correct=task.correct or "",
            success=bool(outcome.success),
            parse_ok=d.parse_ok,
            reply=last.text,
            hop_replies=json.dumps([r.text for r in hops]) if hops else "",
            error=last.error or "",
            n_evidence=len(d.evidence),
            prompt_tokens=sum(r.prompt_tokens for r in hops) if hops else last.prompt_tokens,
            completion_tokens=sum(r.completion_tokens for r in hops) if hops else last.completion_tokens,
            cached=all(r.cached for r in hops) if hops else bool(last.cached),
            truncated=any(r.truncated for r in hops) if hops else bool(last.truncated),
            latency=sum(r.latency for r in hops) if hops else last.latency,
            **dict(zip(_COUNTS, map(int, map(snap.get, _COUNTS, repeat(0))), strict=False)),  # same lengths
            **sample,
            prompt=prompt_json(sent) if log_prompts else "",
        ).row(labels)
        if not log_samples:
            rec = {k: v for k, v in rec.items() if k not in _UNSAMPLED}
        if i < len(replay) and (replay[i]["t"], replay[i]["action"]) != (rec["t"], rec["action"]):
            raise ReplayMismatch(
                f"episode {i}: logged (t={replay[i]['t']}, action={replay[i]['action']!r}) but replay gave "
                f"(t={rec['t']}, action={rec['action']!r})",
                i,
            )
        events = pending + (drain() if drain else [])
        pending = []
        result.records.append(rec)
        result.events.extend(events)
        if on_episode is not None and i >= len(replay):
            on_episode(rec, events)
        if progress is not None:
            progress.update(1)
        if len(result.records) == max_episodes:
            break
    return result

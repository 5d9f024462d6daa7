"""The agent loop: scoring of bad replies, replay without model calls, multi-hop questions, the collector."""

import asyncio
import gc
from collections.abc import Iterator

import pytest

from baselines.append_only import AppendOnly
from envs.base import MultiHop, Outcome, Task
from envs.controlled_drift import ControlledDrift
from runners.agent.loop import STREAM_GC_THRESHOLD, ReplayMismatch, run_stream
from runners.llm.backend import Reply, Request
from runners.llm.simulated import SimulatedBackend
from tepa import Observation
from tepa.tepa_rev import TEPARev


class Scripted:
    """A backend that answers from a list and counts its calls."""

    name = "scripted"

    def __init__(self, texts, error=None):
        self.texts, self.error, self.calls, self.prompts = list(texts), error, 0, []

    async def complete(self, request: Request) -> Reply:
        self.calls += 1
        self.prompts.append(request.messages[-1]["content"])
        text = self.texts[(self.calls - 1) % len(self.texts)]
        return Reply(text="" if self.error else text, prompt_tokens=7, error=self.error)

    def stats(self):
        return {"calls": self.calls}


class NeverCalled(Scripted):
    async def complete(self, request):
        raise AssertionError("a replayed episode called the model")


def run(env, memory, backend, **kw):
    return asyncio.run(run_stream(env, memory, backend, seed=0, labels={"memory": "m"}, **kw))


def test_unparseable_and_failed_replies_are_logged_and_scored_as_failures():
    env = ControlledDrift(phase_length=5)
    res = run(env, AppendOnly(), Scripted(["I cannot decide {]garbage", "Answer: Z"]))
    assert len(res.records) == 20
    assert all(r["action"] == "" and not r["success"] and not r["parse_ok"] for r in res.records)
    assert res.records[0]["reply"] == "I cannot decide {]garbage"
    res = run(ControlledDrift(phase_length=5), AppendOnly(), Scripted(["x"], error="HTTP 500 after 5 tries"))
    assert all(r["error"] == "HTTP 500 after 5 tries" and not r["success"] for r in res.records)


def test_replay_rebuilds_the_stream_without_calling_the_model():
    full = run(ControlledDrift(phase_length=50), TEPARev(), SimulatedBackend())
    logged = full.records[:120]
    seen = []
    resumed = asyncio.run(
        run_stream(
            ControlledDrift(phase_length=50),
            TEPARev(),
            SimulatedBackend(),
            seed=0,
            labels={"memory": "m"},
            replay=logged,
            on_episode=lambda rec, ev: seen.append(rec["t"]),
        )
    )
    assert resumed.records == full.records
    assert resumed.events == full.events
    assert seen == [r["t"] for r in full.records[120:]]  # only new episodes are reported for logging
    with pytest.raises(AssertionError):
        run(ControlledDrift(phase_length=50), TEPARev(), NeverCalled([]), replay=logged)


def test_replay_that_diverges_is_an_error():
    full = run(ControlledDrift(phase_length=20), TEPARev(), SimulatedBackend())
    tampered = [dict(r) for r in full.records[:10]]
    tampered[3]["action"] = "not-an-action"
    with pytest.raises(ReplayMismatch, match="episode 3"):
        run(ControlledDrift(phase_length=20), TEPARev(), SimulatedBackend(), replay=tampered)


class TwoHops:
    """Facts a->b (r1), b->c (r2), then one two-hop question whose answer is c."""

    name = "two_hops"

    def reset(self, seed: int) -> None:
        pass

    def tasks(self) -> Iterator[Task]:
        facts = (
            Observation(("a", "r1"), "b", True, 0, "a r1 b"),
            Observation(("b", "r2"), "c", True, 1, "b r2 c"),
        )
        yield Task(key=None, text="facts", phase="ingest", t=0, observe=facts, decide=False)
        yield Task(
            key=None,
            text="What is r2 of r1 of a?",
            phase="questions",
            t=2,
            correct="c",
            multi_hop=MultiHop("a", ("r1", "r2"), ("What is r1 of [X]?", "What is r2 of [X]?")),
        )

    def execute(self, task: Task, action: str) -> Outcome:
        return Outcome(success=action == task.correct, feedback=False)

    @property
    def phase_boundaries(self):
        return []

    def trial(self, precedent, kind):
        return True


def test_multi_hop_questions_follow_the_chain_through_memory():
    backend = SimulatedBackend(lapse=0.0)
    res = run(TwoHops(), TEPARev(), backend)
    (rec,) = res.records
    assert rec["action"] == "c" and rec["success"] and rec["n_evidence"] == 2
    assert rec["hop_replies"] == '["Answer: b", "Answer: c"]'
    assert backend.stats()["calls"] == 2
    replayed = run(TwoHops(), TEPARev(), NeverCalled([]), replay=res.records)
    assert replayed.records == res.records


class Watched(ControlledDrift):
    """Controlled drift that notes the collector's state at each episode and can fail at one."""

    def __init__(self, seen, fail_at=None, **kw):
        super().__init__(**kw)
        self.seen, self.fail_at = seen, fail_at

    def execute(self, task, action):
        self.seen.append((gc.get_freeze_count() > 0, gc.get_threshold()[0]))
        if task.t == self.fail_at:
            raise RuntimeError("stream failed")
        return super().execute(task, action)


class Yielding(SimulatedBackend):
    """The simulated reader, but it lets other streams run while it 'waits', as a real endpoint does."""

    async def complete(self, request):
        await asyncio.sleep(0)
        return await super().complete(request)


def test_the_collector_is_quiet_while_streams_run_and_restored_after():
    before = (gc.get_threshold(), gc.get_freeze_count())
    seen = []
    run(Watched(seen, phase_length=3), AppendOnly(), SimulatedBackend())
    assert (gc.get_threshold(), gc.get_freeze_count()) == before
    with pytest.raises(RuntimeError, match="stream failed"):
        run(Watched(seen, fail_at=2, phase_length=3), AppendOnly(), SimulatedBackend())
    assert (gc.get_threshold(), gc.get_freeze_count()) == before

    async def overlapping():  # the collector is restored when the last of them ends, not the first
        return await asyncio.gather(
            *(
                run_stream(Watched(seen, phase_length=n), AppendOnly(), Yielding(), seed=0, labels={})
                for n in (2, 5)
            )
        )

    asyncio.run(overlapping())
    assert (gc.get_threshold(), gc.get_freeze_count()) == before
    assert len(seen) == 12 + 3 + 8 + 20
    assert set(seen) == {(True, STREAM_GC_THRESHOLD)}  # frozen, young generation collected less often

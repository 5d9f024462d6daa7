"""The streams of one process share tool-worker round trips: a batch answers each call as a call made
alone would, a batched call that overruns is still stopped at its time limit, and a worker killed under a
batch changes no outcome."""

import asyncio
import os
import signal
import time

import pytest

from envs.executable_drift.env import ExecutableDrift
from envs.executable_drift.worker import CallResult, ToolWorker

PL = 6  # episodes per phase: 24 tasks per stream


def noop(argv, version, root):
    return "ok " + " ".join(argv)


def spin(argv, version, root):
    while True:
        pass


def sleep(argv, version, root):
    time.sleep(60)


def die(argv, version, root):
    os.kill(os.getpid(), signal.SIGKILL)  # the worker itself: a tool runs in it


TOOLS = {"noop": noop, "spin": spin, "sleep": sleep, "die": die}


def _calls(root, *tools, limit=5.0):
    return [(tool, [str(i)], "1.0", str(root), limit) for i, tool in enumerate(tools)]


def test_a_batch_answers_every_call_as_a_call_made_alone_would(tmp_path):
    calls = _calls(tmp_path, "noop", "noop", "noop")
    with ToolWorker(TOOLS) as worker:
        alone = [worker.run(call) for call in calls]
        pid = worker.pid
        assert worker.run_batch(calls) == alone and worker.pid == pid
    assert alone == [CallResult(True, f"ok {i}") for i in range(3)]


@pytest.mark.parametrize("runaway", ["spin", "sleep"])
def test_a_batched_call_that_overruns_is_cut_at_its_limit_and_the_calls_after_it_are_left_unanswered(
    tmp_path, runaway
):
    with ToolWorker(TOOLS) as worker:
        start = time.monotonic()
        results = worker.run_batch(_calls(tmp_path, "noop", runaway, "noop", limit=0.3))
        assert time.monotonic() - start < 3.0
        assert results == [CallResult(True, "ok 0"), None, None]
        assert worker.pid is None  # stopped with the batch; the next call starts a fresh one
        assert worker.run(_calls(tmp_path, "noop")[0]).ok


def test_a_batch_whose_worker_is_killed_under_it_leaves_every_call_unanswered(tmp_path):
    with ToolWorker(TOOLS) as worker:
        assert worker.run_batch(_calls(tmp_path, "noop", "die", "noop")) == [None, None, None]
        assert worker.pid is None  # stopped with the batch; the next batch starts a fresh one
        again = worker.run_batch(_calls(tmp_path, "noop", "noop"))
        assert again == [CallResult(True, "ok 0"), CallResult(True, "ok 1")]


def _actions(env):
    """Each task's action: its options in turn, so that streams mix successes, failures and usage errors."""
    return [(task, task.options[task.t % len(task.options)]) for task in env.tasks()]


def _alone(seeds, sandbox_dir):
    outcomes = []
    for seed in seeds:
        with ExecutableDrift(phase_length=PL, sandbox_dir=sandbox_dir) as env:
            env.reset(seed)
            outcomes.append([env.execute(task, action) for task, action in _actions(env)])
    return outcomes


def _awaited(seeds, sandbox_dir, extra=None, action_at=None, time_limit=2.0):
    """The streams of `seeds` side by side in one event loop, each awaiting `execute_async`
    (`action_at(seed, task, action)` may replace an action)."""

    async def stream(env, seed):
        env.reset(seed)
        return [
            await env.execute_async(task, action_at(seed, task, action) if action_at else action)
            for task, action in _actions(env)
        ]

    async def main():
        envs = [
            ExecutableDrift(
                phase_length=PL, sandbox_dir=sandbox_dir, extra_tools=extra, time_limit=time_limit
            )
            for _ in seeds
        ]
        try:
            return await asyncio.gather(*(stream(env, seed) for env, seed in zip(envs, seeds, strict=True)))
        finally:
            for env in envs:
                env.close()

    return asyncio.run(main())


def _batch_sizes(monkeypatch):
    sizes, run_batch = [], ToolWorker.run_batch

    def counted(self, calls):
        sizes.append(len(calls))
        return run_batch(self, calls)

    monkeypatch.setattr(ToolWorker, "run_batch", counted)
    return sizes


def test_streams_awaiting_execute_share_round_trips_and_get_the_outcomes_of_execute(tmp_path, monkeypatch):
    seeds = [0, 1, 2]
    alone = _alone(seeds, str(tmp_path))
    sizes = _batch_sizes(monkeypatch)
    assert _awaited(seeds, str(tmp_path)) == alone
    assert max(sizes) == len(seeds) and sum(sizes) < sum(map(len, alone))


def test_a_worker_killed_under_a_batch_changes_no_outcome(tmp_path, monkeypatch):
    seeds = [0, 1, 2]
    alone = _alone(seeds, str(tmp_path))
    send, killed = ToolWorker._send, []

    def kill_then_send(self, message):
        if isinstance(message, list) and len(killed) < 3:  # the first three batches, before they are sent
            killed.append(self.pid)
            os.kill(self.pid, signal.SIGKILL)
            self._proc.wait()
        send(self, message)

    monkeypatch.setattr(ToolWorker, "_send", kill_then_send)
    assert _awaited(seeds, str(tmp_path)) == alone and len(killed) == 3


def test_a_runaway_call_in_a_batch_fails_alone_and_the_other_streams_carry_on(tmp_path):
    seeds = [0, 1, 2]
    alone = _alone(seeds, str(tmp_path))

    def runaway_at_t3(seed, task, action):
        return "spin forever" if (seed, task.t) == (1, 3) else action

    start = time.monotonic()
    awaited = _awaited(seeds, str(tmp_path), extra=TOOLS, action_at=runaway_at_t3, time_limit=0.5)
    assert time.monotonic() - start < 30
    stopped = awaited[1][3]
    assert not stopped.success and "stopped: no result within the time limit" in stopped.message
    awaited[1][3] = alone[1][3]
    assert awaited == alone  # the other streams, and the rest of the runaway's own, as without it

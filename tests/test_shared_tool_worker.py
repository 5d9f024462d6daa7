"""Environments open in one process share one tool worker; the last to close stops it."""

import os

import pytest

from envs.executable_drift.env import ExecutableDrift
from envs.executable_drift.worker import SharedToolWorker


def noop(argv, version, root):
    return "ok"


def test_handles_share_one_worker_until_the_last_closes(tmp_path):
    a, b = SharedToolWorker({"noop": noop}), SharedToolWorker({"noop": noop})
    assert a.call("noop", [], "v1", str(tmp_path), 5.0)[0] and b.call("noop", [], "v1", str(tmp_path), 5.0)[0]
    pid = a.pid
    assert pid is not None and b.pid == pid
    a.close()
    a.close()  # idempotent
    assert a.pid is None and b.pid == pid  # still serving the other handle
    os.kill(pid, 0)
    b.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert b.call("noop", [], "v1", str(tmp_path), 5.0)[0] and b.pid not in (None, pid)  # opens again
    b.close()


def test_the_seeds_of_a_run_share_one_worker_and_other_tools_get_their_own(tmp_path):
    envs = [ExecutableDrift(phase_length=2, sandbox_dir=str(tmp_path)) for _ in range(3)]
    other = ExecutableDrift(phase_length=2, sandbox_dir=str(tmp_path), extra_tools={"noop": noop})
    for seed, env in enumerate([*envs, other]):
        env.reset(seed)
        task = next(iter(env.tasks()))
        assert env.execute(task, task.correct).success
    assert len({env.worker.pid for env in envs}) == 1 and other.worker.pid != envs[0].worker.pid
    for env in [*envs, other]:
        env.close()
    assert all(env.worker.pid is None for env in [*envs, other])

"""A tool worker killed mid-run (SIGKILL from outside) changes nothing in the finished stream."""

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from envs.executable_drift.worker import ToolWorker
from tests.helpers.runner import run_overrides


def _kill_when_sending(monkeypatch, kill: Callable[[object, int, int], bool]) -> list[int]:
    """Kill the worker (SIGKILL, and wait until it is gone) just as it is to be sent a message for which
    `kill(message, calls, kills)` holds (the tool calls and kills so far); returns the killed pids.
    Killed before the message is written, the worker never runs it whatever the machine's load: killed
    after, a busy machine could let it run the call and reply first, and the schedule of kills shifted."""
    send, calls, killed = ToolWorker._send, [0], []

    def kill_then_send(self: ToolWorker, message: object) -> None:
        calls[0] += isinstance(message, tuple)  # a tool call (bytes: the start-up message)
        if kill(message, calls[0], len(killed)):
            killed.append(self.pid)
            os.kill(self.pid, signal.SIGKILL)
            self._proc.wait()
        send(self, message)

    monkeypatch.setattr(ToolWorker, "_send", kill_then_send)
    return killed


def _stream(results: Path) -> pd.DataFrame:
    run_overrides(
        "env=executable_drift", "env.phase_length=30", "memory=tepa_full", "seeds=[0]",
        f"results_dir={results}", "progress=false",
    )  # fmt: skip
    (parquet,) = results.glob("runs/**/episodes.parquet")
    return pd.read_parquet(parquet).drop(columns=["latency"])


def test_a_stream_whose_worker_is_killed_mid_call_equals_an_undisturbed_one(tmp_path, monkeypatch):
    undisturbed = _stream(tmp_path / "undisturbed")
    kill_at = {3, 40, 41, 90}  # tool calls (trials included) whose worker dies as it is sent them
    killed = _kill_when_sending(
        monkeypatch, lambda message, n, _: isinstance(message, tuple) and n in kill_at
    )
    disturbed = _stream(tmp_path / "disturbed")
    assert len(killed) == len(kill_at) and disturbed.shape == undisturbed.shape
    differs = (disturbed != undisturbed).any(axis=1)
    assert not differs.any(), f"{differs.sum()} episodes differ, the first at t={disturbed.t[differs].min()}"


def test_a_worker_killed_while_it_starts_is_started_again(tmp_path, monkeypatch):
    killed = _kill_when_sending(
        monkeypatch, lambda message, _, kills: isinstance(message, bytes) and not kills
    )
    with ToolWorker() as worker:
        ok, message = worker.call("checksum", ["--help"], "v1", str(tmp_path), 5.0)
        assert len(killed) == 1 and worker.pid not in (None, killed[0])
    assert "exit code" not in message

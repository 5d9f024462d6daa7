"""A tool worker killed mid-run (SIGKILL from outside) changes nothing in the finished stream."""

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from envs.executable_drift.worker import ToolWorker
from tests.helpers.runner import run_overrides


def _kill_after_sending(monkeypatch, kill: Callable[[object, int, int], bool]) -> list[int]:
    """Kill the worker (SIGKILL) right after it was sent a message for which `kill(message, calls,
    kills)` holds (the tool calls and kills so far); returns the killed pids."""
    send, calls, killed = ToolWorker._send, [0], []

    def send_then_kill(self: ToolWorker, message: object) -> None:
        send(self, message)
        calls[0] += isinstance(message, tuple)  # a tool call (bytes: the start-up message)
        if kill(message, calls[0], len(killed)):
            killed.append(self.pid)
            os.kill(self.pid, signal.SIGKILL)

    monkeypatch.setattr(ToolWorker, "_send", send_then_kill)
    return killed


def _stream(results: Path) -> pd.DataFrame:
    run_overrides(
        # a generous time limit: on a loaded machine a call's own limit (2 s) could stop one call in one
        # stream and not the other; what is tested here is the restart after a kill
        "env=executable_drift", "env.phase_length=30", "env.time_limit=60", "memory=tepa_full", "seeds=[0]",
        f"results_dir={results}", "progress=false",
    )  # fmt: skip
    (parquet,) = results.glob("runs/**/episodes.parquet")
    return pd.read_parquet(parquet).drop(columns=["latency"])


def test_a_stream_whose_worker_is_killed_mid_call_equals_an_undisturbed_one(tmp_path, monkeypatch):
    undisturbed = _stream(tmp_path / "undisturbed")
    kill_at = {3, 40, 41, 90}  # tool calls (trials included) whose worker dies as soon as it has them
    killed = _kill_after_sending(
        monkeypatch, lambda message, n, _: isinstance(message, tuple) and n in kill_at
    )
    disturbed = _stream(tmp_path / "disturbed")
    assert len(killed) == len(kill_at) and disturbed.shape == undisturbed.shape
    differs = (disturbed != undisturbed).any(axis=1)
    assert not differs.any(), f"{differs.sum()} episodes differ, the first at t={disturbed.t[differs].min()}"


def test_a_worker_killed_while_it_starts_is_started_again(tmp_path, monkeypatch):
    killed = _kill_after_sending(
        monkeypatch, lambda message, _, kills: isinstance(message, bytes) and not kills
    )
    with ToolWorker() as worker:
        ok, message = worker.call("checksum", ["--help"], "v1", str(tmp_path), 5.0)
        assert len(killed) == 1 and worker.pid not in (None, killed[0])
    assert "exit code" not in message

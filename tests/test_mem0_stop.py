"""A run stopped by a signal leaves nothing of mem0's behind: mem0's temporary home folder (a config
holding a user id) is removed by an exit hook, which the runner's immediate exit used to skip."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from analysis.streamlog.stream import PARTIAL_EPISODES
from runners.run import PROJECT_ROOT

pytest.importorskip("mem0")


def test_a_sigterm_to_a_mem0_run_removes_mem0s_temporary_home_folder(tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    results = tmp_path / "results"
    # MEM0_DIR unset: an earlier test's in-process mem0 sets it, and the run would then make no folder
    env = {k: v for k, v in os.environ.items() if k != "MEM0_DIR"}
    env |= {"PYTHONPATH": str(PROJECT_ROOT), "TMPDIR": str(scratch)}
    cmd = [sys.executable, "-m", "runners.run", "memory=mem0", "retrieval=dense", "seeds=[0]",
           f"results_dir={results}", "progress=false"]  # fmt: skip
    run = subprocess.Popen(cmd, env=env, cwd=PROJECT_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while (
            not list(results.rglob(PARTIAL_EPISODES)) and run.poll() is None and time.monotonic() < deadline
        ):
            time.sleep(0.1)  # until the stream has logged episodes
        assert list(scratch.glob("tepa-mem0-*")), "mem0's home folder never appeared"
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert not list(scratch.glob("tepa-mem0-*"))

"""An endpoint that goes down mid-run: the run stops cleanly with one line and a non-zero exit, keeps the
episodes logged so far, and a rerun of the same command resumes it to what an uninterrupted run gives.
No model: a scripted stub endpoint that answers k requests, then fails every one."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from analysis.streamlog.stream import EPISODES, META, PARTIAL_EPISODES
from runners.llm.backend import BackendExhausted, Request
from runners.llm.openai_backend import OpenAIBackend
from runners.run import PROJECT_ROOT, RunStopped
from tests.helpers.runner import run_overrides
from tests.helpers.stub_server import StubReply

OK = 13  # requests the endpoint answers before it goes down
STOPPED = (  # the one line a stopped run prints
    r"^stopped: endpoint http://127\.0\.0\.1:\d+/v1 failed 3 calls "
    r"\(max_failed_calls=3; the last: .*http_500.*\); rerun the same command to resume$"
)


def overrides(stub, results) -> list[str]:
    """Two seeds of append-only memory, 20 episodes each, against the stub; a call fails for good at its
    first error and the third such failure stops the run."""
    return [
        f"results_dir={results}", "env.phase_length=5", "memory=append_only", "seeds=[0,1]",
        "llm=openai", f"llm.base_url={stub.base_url}", "llm.model=stub", "llm.cache_path=null",
        "llm.max_retries=0", "llm.max_failed_calls=3", "llm.max_concurrency=1", "progress=false",
    ]  # fmt: skip


def episodes(results) -> list[dict]:
    """Every stream's episodes, without the wall-clock latency."""
    rows = []
    for path in sorted(results.glob(f"runs/**/seed=*/{EPISODES}")):
        rows += [{k: v for k, v in r.items() if k != "latency"} for r in pq.read_table(path).to_pylist()]
    return rows


def test_the_backend_raises_the_shared_exception(stub_server):
    assert issubclass(BackendExhausted, RuntimeError)
    stub_server.default = StubReply(status=500)
    backend = OpenAIBackend(stub_server.base_url, "stub", max_retries=0, max_failed_calls=1)

    async def go():
        try:
            await backend.complete(Request(({"role": "user", "content": "hi"},)))
        finally:
            await backend.aclose()

    with pytest.raises(BackendExhausted, match=r"failed 1 calls .*http_500"):
        asyncio.run(go())


def test_a_run_stops_cleanly_and_a_rerun_resumes_it_to_the_uninterrupted_result(stub_server, tmp_path):
    reference = run_overrides(*overrides(stub_server, tmp_path / "reference"))
    assert reference.episodes_run == 40 and len(stub_server.requests) == 40

    stub_server.requests.clear()
    stub_server.push(*[StubReply()] * OK)
    stub_server.default = StubReply(status=500)
    with pytest.raises(RunStopped, match=STOPPED):
        run_overrides(*overrides(stub_server, tmp_path / "r"))
    assert len(stub_server.requests) == OK + 3  # nothing is asked once the endpoint is presumed down
    streams = sorted((tmp_path / "r" / "runs").glob("**/seed=*"))
    assert len(streams) == 2 and not any((d / META).exists() for d in streams)
    logged = [
        json.loads(line) for d in streams for line in (d / PARTIAL_EPISODES).read_text().splitlines()[1:]
    ]
    assert len(logged) == OK + 2  # the third failure raised instead of logging an episode
    assert sum(bool(r["error"]) for r in logged) == 2

    stub_server.requests.clear()
    stub_server.default = StubReply()  # the endpoint is back
    resumed = run_overrides(*overrides(stub_server, tmp_path / "r"))
    replayed = sum(s.replayed for s in resumed.streams)
    assert 0 < replayed <= OK and resumed.episodes_run == 40 - replayed
    assert len(stub_server.requests) == 40 - replayed  # the failed calls are asked again, nothing more
    assert episodes(tmp_path / "r") == episodes(tmp_path / "reference")
    assert not any(r["error"] for r in episodes(tmp_path / "r"))


def test_the_command_line_prints_one_line_and_exits_non_zero(stub_server, tmp_path):
    stub_server.default = StubReply(status=500)
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    proc = subprocess.run(
        [sys.executable, "-m", "runners.run", *overrides(stub_server, tmp_path)],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
        env={**env, "PYTHONPATH": str(PROJECT_ROOT)},
    )  # fmt: skip
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    # Hydra frames it as it does a config error: the overrides, the message, a HYDRA_FULL_ERROR hint
    assert [line for line in proc.stderr.splitlines() if re.match(STOPPED, line)], proc.stderr
    assert len(list(tmp_path.glob(f"runs/**/seed=*/{PARTIAL_EPISODES}"))) == 2  # kept for the rerun

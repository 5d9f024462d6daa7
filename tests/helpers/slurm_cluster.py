"""The one-node SLURM cluster for the tests that submit through a real scheduler
(`runners.launch.slurm_cluster`), and what they read back: streams, job states, job processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from analysis.streamlog.stream import CHECKED, META, PARTIAL_EPISODES
from runners.compose import PROJECT_ROOT
from runners.launch.slurm_cluster import SlurmCluster, SlurmUnavailable, slurm_cluster

#: The environment variable that turns the SLURM tests' skip into a failure.
REQUIRE_SLURM = "TEPA_REQUIRE_SLURM"


def running_cluster(folder: Path) -> Iterator[SlurmCluster]:
    """A started cluster in `folder`, stopped after the tests whatever happened (`unavailable` where SLURM
    cannot start: not installed, not root, a daemon that fails)."""
    try:
        with slurm_cluster(folder) as cluster:
            yield cluster
    except SlurmUnavailable as exc:  # raised only while starting
        unavailable(str(exc))


def unavailable(reason: str) -> NoReturn:
    """Skip the test with `reason`, or fail it with TEPA_REQUIRE_SLURM=1 in the environment (CI, which
    installs SLURM: a skip there would hide a break)."""
    if os.environ.get(REQUIRE_SLURM) == "1":
        pytest.fail(f"{REQUIRE_SLURM}=1 but no one-node SLURM cluster here: {reason}")
    pytest.skip(f"no one-node SLURM cluster here: {reason}")


def environment(cluster: SlurmCluster) -> dict[str, str]:
    """The environment of a `python -m runners.run` that submits to `cluster` (and of its jobs, which
    sbatch gives the submitting environment)."""
    return {**os.environ, "PYTHONPATH": str(PROJECT_ROOT), **cluster.env}


def runner(*args: str) -> list[str]:
    return [sys.executable, "-m", "runners.run", *args]


def complete_streams(results: Path) -> dict[str, bytes]:
    """Every complete stream under `results`: its folder (relative) and the bytes of the files its
    meta.json checks (episodes.parquet, archive.jsonl); asserts each one verifies as complete."""
    streams = {}
    for meta in sorted(results.glob(f"runs/**/{META}")):
        assert json.loads(meta.read_text())["complete"], meta
        folder = meta.parent
        streams[str(folder.relative_to(results))] = b"".join((folder / name).read_bytes() for name in CHECKED)
    return streams


def partial_logs(results: Path) -> dict[Path, int]:
    """Each partial log under `results` and its episode lines (the first line is its header)."""
    return {p: p.read_bytes().count(b"\n") - 1 for p in results.glob(f"runs/**/{PARTIAL_EPISODES}")}


def metas(results: Path) -> dict[str, dict]:
    return {
        str(m.parent.relative_to(results)): json.loads(m.read_text()) for m in results.glob(f"runs/**/{META}")
    }


def wait_until(ready: Callable[[], object], timeout: float, what: str, poll: float = 0.1) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = ready()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"{what}: not within {timeout:.0f} s")


def queue(cluster: SlurmCluster, states: str = "PD,R,CG,S,CF") -> list[tuple[str, str, str]]:
    """This cluster's jobs in `states`: (array job id, state, reason) per job or pending range."""
    proc = cluster.command("squeue", "--noheader", f"--states={states}", "--format=%F|%i|%T|%r")
    return [tuple(line.split("|")[1:]) for line in proc.stdout.splitlines() if line.strip()]  # type: ignore[misc]


def arrays(cluster: SlurmCluster) -> list[str]:
    """The array job ids of every job this cluster knows, finished ones included."""
    proc = cluster.command("squeue", "--noheader", "--states=all", "--format=%F")
    return sorted(set(proc.stdout.split()), key=int)


def job_python(cluster: SlurmCluster, job: str) -> int:
    """The PID of the Python process (submitit's `_submit`) of `job` (an array task, `<array>_<task>`)."""
    job_id = cluster.command("squeue", "--noheader", f"--jobs={job}", "--format=%A").stdout.strip()
    proc = cluster.command("scontrol", "listpids", job_id)
    for line in proc.stdout.splitlines()[1:]:
        pid = line.split()[0]
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"submitit.core._submit" in cmdline and b"srun" not in cmdline.split(b"\0")[0]:
            return int(pid)
    raise AssertionError(f"no Python process in job {job}: {proc.stdout}{proc.stderr}")


def stop(proc: subprocess.Popen) -> None:
    """End a launcher this test started, if it still runs."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()

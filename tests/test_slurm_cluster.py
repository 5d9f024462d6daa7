"""`hydra/launcher=submitit_slurm` through a real scheduler: a one-node SLURM cluster started for these
tests (`runners.launch.slurm_cluster`; skipped where SLURM cannot start). A sweep finishes with the
streams a joblib sweep writes, byte for byte; `scancel` mid-sweep or a job killed on its node leaves
partial logs the same command resumes into the same streams; `array_parallelism` holds; the map's two
stages run through the scheduler; the dry run prints the script sbatch receives; a partition the cluster
lacks or a controller that does not answer stops the sweep with one line; and the cluster's own command
prints its environment and stops every daemon on Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import datetime
from itertools import pairwise
from pathlib import Path

import pytest

from runners.compose import PROJECT_ROOT
from runners.launch.slurm_cluster import free_port
from tests.helpers.slurm_cluster import (
    arrays,
    complete_streams,
    environment,
    job_python,
    metas,
    partial_logs,
    queue,
    runner,
    running_cluster,
    stop,
    unavailable,
    wait_until,
)

pytestmark = pytest.mark.slurm

# A paper-style sweep: three methods on controlled drift, one seed, 4,000 episodes each (seconds a job).
SWEEP = (
    "-m",
    "experiment=paper_controlled",
    "memory=lww,tepa_rev,no_memory",
    "seeds=[0]",
    "env.phase_length=1000",
    "progress=false",
)
# Small jobs: one CPU and 1 GB each, so that the node (the host's CPUs) can run several at once.
SLURM = (
    "hydra/launcher=submitit_slurm",
    "hydra.launcher.partition=debug",
    "hydra.launcher.cpus_per_task=1",
    "hydra.launcher.mem_gb=1",
)
RUN_S = 300


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from running_cluster(tmp_path_factory.mktemp("slurm"))


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[str, bytes]:
    """The sweep's streams under joblib, uninterrupted."""
    results = tmp_path_factory.mktemp("joblib") / "results"
    args = runner(*SWEEP, "hydra/launcher=joblib", f"results_dir={results}")
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    proc = subprocess.run(args, cwd=results.parent, env=env, capture_output=True, text=True, timeout=RUN_S)
    assert proc.returncode == 0, proc.stderr
    streams = complete_streams(results)
    assert len(streams) == 3
    return streams


def launch(cluster, cwd: Path, *args: str) -> subprocess.Popen:
    """`python -m runners.run ARGS` submitting to `cluster`, in the background (output in `cwd`)."""
    with open(cwd / "launcher.out", "ab") as out, open(cwd / "launcher.err", "ab") as err:
        return subprocess.Popen(runner(*args), cwd=cwd, env=environment(cluster), stdout=out, stderr=err)


def run(cluster, cwd: Path, *args: str, conf: Path | None = None) -> subprocess.CompletedProcess:
    """`python -m runners.run ARGS` submitting to `cluster` (or to the slurm.conf `conf`)."""
    env = {**environment(cluster), **({"SLURM_CONF": str(conf)} if conf else {})}
    return subprocess.run(runner(*args), cwd=cwd, env=env, capture_output=True, text=True, timeout=RUN_S)


def test_a_slurm_sweep_finishes_with_the_streams_of_the_same_sweep_under_joblib(cluster, reference, tmp_path):
    results = tmp_path / "results"
    before = set(arrays(cluster))
    proc = run(cluster, tmp_path, *SWEEP, *SLURM, f"results_dir={results}")
    assert proc.returncode == 0, proc.stderr
    assert complete_streams(results) == reference
    (array,) = set(arrays(cluster)) - before  # one array, its three tasks run by the scheduler
    logs = sorted(results.glob("hydra/*/multirun_*/.submitit/*/*_0_log.out"))
    assert [p.parent.name for p in logs] == [f"{array}_{i}" for i in range(3)]
    assert all(
        f"JobEnvironment(job_id={p.parent.name}, hostname={cluster.node}" in p.read_text() for p in logs
    )


def test_scancel_mid_sweep_then_the_same_command_reruns_only_what_is_missing(cluster, reference, tmp_path):
    results = tmp_path / "results"
    command = (*SWEEP, *SLURM, "hydra.launcher.array_parallelism=1", f"results_dir={results}")
    proc = launch(cluster, tmp_path, *command)
    try:  # job 0 (LWW) done, job 1 (TEPA-Rev) part way, job 2 (No Memory) waiting: cancel the array
        wait_until(lambda: metas(results) and max(partial_logs(results).values(), default=0) >= 300, RUN_S,
                   "a complete stream and a partial one")  # fmt: skip
        (array,) = {job.split("_")[0] for job, _, _ in queue(cluster)}
        assert cluster.command("scancel", array).returncode == 0
        status = proc.wait(RUN_S)
    finally:
        stop(proc)
    # submitit's launcher gives up at the first job without a result; later ones may still be queued
    assert status == 1 and "(state: CANCELLED)" in (tmp_path / "launcher.err").read_text()
    wait_until(lambda: not queue(cluster), RUN_S, "the cancelled array to leave the queue")
    done = metas(results)
    (partial,) = partial_logs(results).items()
    assert len(done) == 1 and partial[1] >= 300
    (finished,) = done
    stamps = {p: p.stat().st_mtime_ns for p in (results / finished).iterdir()}

    rerun = run(cluster, tmp_path, *command)
    assert rerun.returncode == 0, rerun.stderr
    assert complete_streams(results) == reference
    assert {p: p.stat().st_mtime_ns for p in (results / finished).iterdir()} == stamps  # skipped, untouched
    replayed = {name: meta["replayed"] for name, meta in metas(results).items()}
    assert replayed[str(partial[0].parent.relative_to(results))] == partial[1]  # resumed from its log
    assert sorted(replayed.values()) == [0, 0, partial[1]]  # the job never started ran from the start


def test_a_job_killed_on_its_node_leaves_a_partial_log_that_the_rerun_replays(cluster, reference, tmp_path):
    results = tmp_path / "results"
    sweep = tuple("memory=lww,tepa_rev" if a.startswith("memory=") else a for a in SWEEP)
    command = (*sweep, *SLURM, f"results_dir={results}")
    proc = launch(cluster, tmp_path, *command)

    def lww_partial() -> int:
        return sum(n for p, n in partial_logs(results).items() if "/lww/" in str(p))

    try:  # both jobs run at once; job 0's (LWW's) Python process is killed part way
        wait_until(lambda: lww_partial() >= 300, RUN_S, "job 0's partial log")
        (array,) = {job.split("_")[0] for job, _, _ in queue(cluster)}
        os.kill(job_python(cluster, f"{array}_0"), signal.SIGKILL)
        status = proc.wait(RUN_S)
    finally:
        stop(proc)
    err = (tmp_path / "launcher.err").read_text()
    assert status == 1 and f"Job {array}_0 (task: 0)" in err and "(state: FAILED)" in err
    wait_until(lambda: not queue(cluster), RUN_S, "the array's other job")
    (killed,) = partial_logs(results).items()
    assert "/lww/" in str(killed[0]) and not (killed[0].parent / "meta.json").exists()  # never complete
    assert [name for name in metas(results) if "/tepa_rev/" in name]  # the array's other job ran on

    rerun = run(cluster, tmp_path, *command)
    assert rerun.returncode == 0, rerun.stderr
    streams = complete_streams(results)
    assert len(streams) == 2 and streams == {name: reference[name] for name in streams}
    replayed = {name: meta["replayed"] for name, meta in metas(results).items()}
    assert replayed[str(killed[0].parent.relative_to(results))] == killed[1] > 0
    assert not partial_logs(results)


def test_array_parallelism_holds_no_more_jobs_run_at_once(cluster, tmp_path):
    results = tmp_path / "results"
    sweep = ("-m", "memory=lww,tepa_rev,no_memory", "seed=0", "env.phase_length=50", "progress=false")
    proc = launch(
        cluster, tmp_path, *sweep, *SLURM, "hydra.launcher.array_parallelism=1", f"results_dir={results}"
    )
    seen: list[list[tuple[str, str, str]]] = []
    try:
        while proc.poll() is None:
            seen.append(queue(cluster))
            time.sleep(0.1)
        status = proc.wait(RUN_S)
    finally:
        stop(proc)
    assert status == 0, (tmp_path / "launcher.err").read_text()
    running = [sum(state == "RUNNING" for _, state, _ in jobs) for jobs in seen]
    assert max(running) == 1
    assert any(
        reason == "JobArrayTaskLimit" for jobs in seen for _, state, reason in jobs if state == "PENDING"
    )
    spans = sorted(job_span(log) for log in results.glob("hydra/*/multirun_*/.submitit/*/*_0_log.out"))
    assert len(spans) == 3
    assert all(end <= start for (_, end), (start, _) in pairwise(spans)), spans  # one after another


def job_span(log: Path) -> tuple[datetime, datetime]:
    """When the job's Python process started and ended, from its submitit log."""
    stamps = re.findall(r"^submitit INFO \((.+?)\) - (Starting|Exiting)", log.read_text(), re.M)
    times = {what: datetime.strptime(at, "%Y-%m-%d %H:%M:%S,%f") for at, what in stamps}
    return times["Starting"], times["Exiting"]


def test_the_map_driver_runs_both_stages_through_the_scheduler(cluster, tmp_path):
    declaration = tmp_path / "tiny.yaml"
    declaration.write_text(
        json.dumps(
            {"experiment": "robustness_map", "tuning_seeds": [1000], "tune": {"reactive": {"c": [1, 3]}}}
        )
    )
    grid = (
        "memory=reactive",
        "env.noise=0.1",
        "env.reversal_rate=0.01",
        "env.phase_length=10",
        "seeds=[0]",
    )

    def drive(out: Path, *launcher: str) -> subprocess.CompletedProcess:
        args = ["-m", "runners.map", "--map", str(declaration), *grid, f"results_dir={out}", "progress=false"]
        return subprocess.run(
            [runner()[0], *args, *launcher], cwd=tmp_path, env=environment(cluster), capture_output=True,
            text=True, timeout=RUN_S,
        )  # fmt: skip

    before = set(arrays(cluster))
    proc = drive(tmp_path / "slurm", *SLURM)
    assert proc.returncode == 0, proc.stderr
    assert len(set(arrays(cluster)) - before) == 2  # one array per stage
    local = drive(tmp_path / "basic", "hydra/launcher=basic")
    assert local.returncode == 0, local.stderr
    streams = complete_streams(tmp_path / "slurm")
    assert streams == complete_streams(tmp_path / "basic")
    # one cell; tuning seed: c=1, c=3 and the defaults; evaluation seed: the defaults and the chosen c
    seeds = [json.loads((tmp_path / "slurm" / s / "meta.json").read_text())["seed"] for s in streams]
    assert sorted(seeds) == [0, 0, 1000, 1000, 1000]
    spec = json.loads((tmp_path / "slurm" / "map.json").read_text())
    assert spec["chosen"] == json.loads((tmp_path / "basic" / "map.json").read_text())["chosen"]


def test_the_dry_run_prints_the_script_that_sbatch_receives(cluster, tmp_path):
    sweep_dir = tmp_path / "sweep"
    args = ("-m", "memory=lww,tepa_rev", "seed=0", "env.phase_length=4", "progress=false", *SLURM,
            "hydra.launcher.array_parallelism=3", f"hydra.sweep.dir={sweep_dir}",
            f"results_dir={tmp_path}")  # fmt: skip
    plan = run(cluster, tmp_path, *args, "plan=true")
    assert plan.returncode == 0, plan.stderr
    assert not sweep_dir.exists()
    proc = run(cluster, tmp_path, *args)
    assert proc.returncode == 0, proc.stderr
    (submitted,) = sweep_dir.glob(".submitit/*/*_submission.sh")
    script = submitted.read_text()
    assert "#SBATCH --array=0-1%2" in script
    printed = plan.stdout.split("(one array of 2 tasks; not submitted):\n", 1)[1]
    assert printed.startswith(script.rstrip("\n") + "\n\ntask 0: ")


def test_a_slurm_sweep_naming_a_partition_the_cluster_lacks_stops_with_one_line(cluster, tmp_path):
    results = tmp_path / "results"
    proc = run(cluster, tmp_path, *SWEEP, *SLURM, "hydra.launcher.partition=gpu", f"results_dir={results}")
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        "error: hydra.launcher.partition=gpu: this cluster has no partition gpu (sinfo lists debug); nothing "
        "was submitted"
    )
    assert not results.exists()


def test_a_slurm_sweep_whose_controller_does_not_answer_stops_with_one_line(cluster, tmp_path):
    conf = tmp_path / "slurm.conf"  # the cluster's, with a port no controller listens on
    conf.write_text(
        re.sub(r"(?m)^SlurmctldPort=\d+$", f"SlurmctldPort={free_port()}", cluster.conf.read_text())
    )
    results = tmp_path / "results"
    proc = run(cluster, tmp_path, *SWEEP, *SLURM, f"results_dir={results}", conf=conf)
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert (
        "SLURM does not answer here (sinfo: " in proc.stderr
        and "Unable to contact slurm controller" in proc.stderr
    )
    assert not results.exists()


def cluster_command(folder: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    command = [sys.executable, "-m", "runners.launch.slurm_cluster", "--dir", str(folder)]
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT), **(env or {})}
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_the_cluster_command_prints_its_environment_and_ctrl_c_stops_every_daemon(tmp_path):
    folder = tmp_path / "cluster"
    proc = cluster_command(folder)
    try:
        lines = []
        while not lines or not lines[-1].startswith("Ctrl-C"):
            line = proc.stdout.readline()
            if not line:
                unavailable(proc.communicate(timeout=60)[1].strip())
            lines.append(line.strip())
        env = dict(line.removeprefix("export ").split("=", 1) for line in lines if line.startswith("export "))
        assert set(env) == {"SLURM_CONF", "PATH"}
        sinfo = subprocess.run(["sinfo", "--noheader", "--Node", "--format=%t"], env={**os.environ, **env},
                               capture_output=True, text=True, timeout=30)  # fmt: skip
        assert sinfo.stdout.strip() == "idle", sinfo.stderr
        pids = [
            int(p.read_text())
            for p in (folder / "slurmctld.pid", folder / "slurmd.pid", folder / "munge/munged.pid")
        ]
        assert all(map(alive, pids))
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0, proc.stderr.read()
    finally:
        stop(proc)
    assert not any(map(alive, pids))


def test_the_cluster_command_without_slurm_says_what_is_missing_in_one_line(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    proc = cluster_command(tmp_path / "cluster", env={"PATH": str(empty)})
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert (
        "SLURM cannot start here: no " in err and "sinfo" in err and "apt-get install slurm-wlm munge" in err
    )

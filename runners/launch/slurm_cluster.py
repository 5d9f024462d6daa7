"""A one-node SLURM cluster on this machine, in one scratch folder: to try `hydra/launcher=submitit_slurm`
without a cluster, and for the tests that submit through a real scheduler.

`python -m runners.launch.slurm_cluster [--dir DIR]` starts it, prints the environment to use in another
shell (`SLURM_CONF`, and `PATH` for `sacct`, below) and stops it on Ctrl-C or SIGTERM. It needs Debian's
`slurm-wlm` and `munge` packages (installed, never started: nothing under /etc is changed) and
root, since slurmd starts each job as its user.

Everything lives in the folder: a fresh munge key and munged on its own socket, a `slurm.conf` for this
host (its CPUs, 90% of its memory, free ports, no cgroups, no accounting database), then slurmctld and
slurmd as child processes, ready once `sinfo` reports the node idle. Stopping cancels every job first
(a job's processes are slurmstepd's, which would outlive slurmd), then ends each daemon by its PID.

Without slurmdbd, `sacct` only says accounting is disabled, and submitit, which asks `sacct` for the
state of a job that wrote no result, would wait forever for a cancelled or failed one. So the folder's
`bin/sacct` answers submitit's question (`JobID|State|NodeList`) from `squeue --states=all`: slurmctld
keeps finished jobs for `MinJobAge` seconds (an hour here).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import ctypes
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sinfo", "squeue", "sbatch", "srun", "scancel", "scontrol")
_SBIN = os.pathsep.join(("/usr/sbin", "/sbin", "/usr/local/sbin"))
_READY_S = 60.0
_STOP_S = 10.0

SACCT = """#!/bin/sh
# sacct without an accounting database: the states of submitit's jobs (-j ID ...) from slurmctld, which
# keeps finished jobs for MinJobAge seconds. Only `JobID|State|NodeList` (submitit's question) is answered.
ids=""
while [ $# -gt 0 ]; do
  case "$1" in
    -j|--jobs) ids="$ids,$2"; shift 2 ;;
    *) shift ;;
  esac
done
echo "JobID|State|NodeList"
[ -n "$ids" ] || exit 0
exec squeue --noheader --states=all --jobs="${ids#,}" --format='%i|%T|%N'
"""


class SlurmUnavailable(RuntimeError):
    """SLURM cannot run here (a binary missing, not root, a daemon that would not start): one line."""


@dataclass
class SlurmCluster:
    """A running one-node cluster: `env` is what a client (sbatch, submitit) needs to reach it."""

    folder: Path
    node: str
    conf: Path
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        """`SLURM_CONF`, and `PATH` with the folder's `bin/` (its `sacct`) first."""
        path = os.pathsep.join((str(self.folder / "bin"), os.environ.get("PATH", os.defpath)))
        return {"SLURM_CONF": str(self.conf), "PATH": path}

    def command(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
        """A SLURM client command against this cluster; its output as text."""
        env = {**os.environ, **self.env}
        return subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)


def find(name: str) -> str | None:
    """The path of a SLURM or munge program: on PATH or in the sbin folders, where Debian puts daemons."""
    return shutil.which(name) or shutil.which(name, path=_SBIN)


def missing_programs() -> list[str]:
    return [name for name in (*DAEMONS, *CLIENTS, "munge") if find(name) is None]


def host_resources() -> tuple[int, int]:
    """This host's CPUs and the memory (MB) the node offers: 90% of MemTotal, so slurmd, which compares
    the configured memory with what it finds, never marks the node invalid."""
    total_kb = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            total_kb = int(line.split()[1])
    return os.cpu_count() or 1, max(1, int(total_kb / 1024 * 0.9))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_conf(folder: Path, node: str, cpus: int, memory_mb: int, munge_socket: Path) -> Path:
    """A minimal slurm.conf for one node on this host, everything under `folder`."""
    ctld_port, slurmd_port = free_port(), free_port()
    lines = [
        "ClusterName=local",
        f"SlurmctldHost={node}(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={slurmd_port}",
        "SlurmUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={munge_socket}",
        f"StateSaveLocation={folder / 'state'}",
        f"SlurmdSpoolDir={folder / 'spool'}",
        f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
        f"SlurmdPidFile={folder / 'slurmd.pid'}",
        f"SlurmctldLogFile={folder / 'slurmctld.log'}",
        f"SlurmdLogFile={folder / 'slurmd.log'}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "ReturnToService=2",
        "MpiDefault=none",
        "JobAcctGatherType=jobacct_gather/none",
        "MinJobAge=3600",
        "MailProg=/bin/true",
        f"NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN",
        f"PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP",
    ]
    conf = folder / "slurm.conf"
    conf.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return conf


@contextlib.contextmanager
def slurm_cluster(folder: Path | None = None) -> Iterator[SlurmCluster]:
    """Start the cluster in `folder` (a new temporary folder by default), yield it once its node is
    idle, and stop every daemon on the way out, whatever happened. SlurmUnavailable when it cannot."""
    missing = missing_programs()
    if missing:
        raise SlurmUnavailable(f"no {', '.join(missing)} (Debian: apt-get install slurm-wlm munge)")
    if os.geteuid() != 0:
        raise SlurmUnavailable("slurmd must run as root (it starts each job as its user)")
    with contextlib.ExitStack() as stack:
        if folder is None:
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="slurm-")))
        cluster = _prepare(Path(folder).resolve())
        stack.callback(_stop, cluster)
        atexit.register(_stop, cluster)  # an interpreter that exits without unwinding (pytest's Ctrl-C)
        stack.callback(atexit.unregister, _stop)
        _start(cluster)
        yield cluster


def _prepare(folder: Path) -> SlurmCluster:
    for sub in ("state", "spool", "munge", "bin"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    (folder / "munge").chmod(0o700)
    key = folder / "munge" / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o400)
    sacct = folder / "bin" / "sacct"
    sacct.write_text(SACCT, encoding="utf-8")
    sacct.chmod(0o755)
    node = socket.gethostname().split(".")[0]
    cpus, memory_mb = host_resources()
    conf = write_conf(folder, node, cpus, memory_mb, folder / "munge" / "munge.socket")
    return SlurmCluster(folder=folder, node=node, conf=conf)


def _start(cluster: SlurmCluster) -> None:
    folder, munge = cluster.folder, cluster.folder / "munge"
    env = {**os.environ, **cluster.env}
    commands = {
        "munged": [
            find("munged"), "--foreground", "--force", f"--socket={munge / 'munge.socket'}",
            f"--key-file={munge / 'munge.key'}", f"--pid-file={munge / 'munged.pid'}",
            f"--log-file={munge / 'munged.log'}", f"--seed-file={munge / 'munged.seed'}",
        ],
        "slurmctld": [find("slurmctld"), "-D", "-c", "-f", str(cluster.conf)],
        "slurmd": [find("slurmd"), "-D", "-N", cluster.node, "-f", str(cluster.conf)],
    }  # fmt: skip
    for name, command in commands.items():
        with open(folder / f"{name}.out", "ab") as out:
            cluster.processes[name] = subprocess.Popen(
                command, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C in the terminal reaches this process, which stops them
                preexec_fn=_die_with_parent,
            )  # fmt: skip
        if name == "munged":
            _wait(cluster, lambda: (munge / "munge.socket").exists(), "munged made no socket")
    _wait(cluster, lambda: _node_state(cluster) == "idle", "the node never became idle")


def _die_with_parent() -> None:
    """In the daemon's process before exec: SIGTERM when its parent dies, even by SIGKILL (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG


def _node_state(cluster: SlurmCluster) -> str:
    try:
        proc = cluster.command("sinfo", "--noheader", "--Node", "--format=%t", timeout=10)
    except subprocess.TimeoutExpired:
        return ""
    return proc.stdout.strip()


def _wait(cluster: SlurmCluster, ready, problem: str) -> None:
    deadline = time.monotonic() + _READY_S
    while not ready():
        for name, proc in cluster.processes.items():
            if proc.poll() is not None:
                raise SlurmUnavailable(f"{name} exited with {proc.returncode}: {_last_line(cluster, name)}")
        if time.monotonic() > deadline:
            raise SlurmUnavailable(f"{problem} within {_READY_S:.0f} s (logs in {cluster.folder})")
        time.sleep(0.2)


def _last_line(cluster: SlurmCluster, name: str) -> str:
    lines = []
    for log in (cluster.folder / f"{name}.out", cluster.folder / f"{name}.log"):
        with contextlib.suppress(OSError):
            lines += [
                line for line in log.read_text(errors="replace").splitlines() if "error" in line.lower()
            ]
    return lines[-1].strip() if lines else f"see {cluster.folder}"


def _stop(cluster: SlurmCluster) -> None:
    """Cancel every job (this controller's jobs are all ours), wait for them to end, then end the
    daemons in reverse order by their PIDs: SIGTERM, and SIGKILL past a grace period."""
    if all(p.poll() is None for p in cluster.processes.values()) and len(cluster.processes) == 3:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            jobs = cluster.command("squeue", "--noheader", "--format=%A").stdout.split()
            if jobs:
                cluster.command("scancel", *sorted(set(jobs)))
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    left = cluster.command("squeue", "--noheader", "--states=R,CG,S", "--format=%A")
                    if not left.stdout.strip():
                        break
                    time.sleep(0.2)
    for name in reversed(list(cluster.processes)):
        proc = cluster.processes[name]
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(_STOP_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m runners.launch.slurm_cluster", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--dir", type=Path, help="the cluster's folder (default: a temporary one)")
    args = parser.parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        with slurm_cluster(args.dir) as cluster:
            print(
                f"one-node SLURM cluster up (node {cluster.node}, partition debug; folder {cluster.folder})"
            )
            print("in another shell:")
            for key, value in cluster.env.items():
                print(f"  export {key}={value}")
            print("Ctrl-C stops it (its running jobs are cancelled)", flush=True)
            stop.wait()
            print("stopping...", flush=True)
    except SlurmUnavailable as exc:
        print(f"slurm_cluster: SLURM cannot start here: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`make reproduce` at a reference commit and at this tree, in pairs: figures that compare across days.

The same commit's `make reproduce` takes from about 220 to 360 CPU seconds on the same kind of shared
2-core machine, from one day to the next and sometimes within the hour, so an absolute figure says as
much about the machine as about the code. Timed in pairs (the reference, then this tree, then this tree
and the reference, ...), the ratio of the two is what the code changed; but the speed drifts within
minutes too, so a pair can instead run at the same time, each tree on its own CPU (`side_by_side`, the
CPUs swapped from pair to pair), and then both see the same machine. Scaled by the figures the
reference had where the targets were set (TARGET_REFERENCE), it gives this tree's figures on that
machine: the ones the targets are met against.

Both trees run their own `make reproduce` commands (`python -m runners.launch.reproduce --results-dir
DIR`, then `python -m analysis --runs DIR/runs --out DIR --quiet`) with this interpreter, in their own
folder (the reference's is `git archive`d from this repository), into a temporary results folder.
"""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: The commit the targets of `make reproduce` were set against, and its figures then (wall and CPU
#: seconds, the analysis' wall seconds; a quiet 2-core machine, 2026-12-03): the targets (100 s wall,
#: 200 CPU s, 5 s of analysis) ask for about half of each.
TARGET_REFERENCE: dict[str, Any] = {
    "commit": "c21320c7b850130a02808a3fb9bc68e32c8d8f00",
    "wall_s": 194.5,
    "cpu_s": 378.7,
    "analysis_s": 9.4,
}
#: The paired figures: a pair's ratio is this tree's figure over the reference's.
FIGURES = ("wall_s", "cpu_s", "analysis_s")


def resolve(commit: str, root: Path) -> str:
    """The full hash of `commit` in the repository at `root`; ValueError (one line) when it is none."""
    done = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise ValueError(f"--reference {commit}: not a commit of the repository at {root}")
    return done.stdout.strip()


def extract(commit: str, root: Path, into: Path) -> Path:
    """The tree of `commit` (a full hash) written into the new folder `into`, as `git archive` gives it."""
    into.mkdir()
    with subprocess.Popen(
        ["git", "-C", str(root), "archive", "--format=tar", commit], stdout=subprocess.PIPE
    ) as git:
        assert git.stdout is not None
        with tarfile.open(fileobj=git.stdout, mode="r|") as tar:
            tar.extractall(into, filter="data")
    if git.returncode:
        raise RuntimeError(f"git archive {commit} exited with {git.returncode}")
    return into


def time_tree(tree: Path, cpu: int | None = None, lane: Lane | None = None) -> dict[str, Any]:
    """Wall and CPU seconds of `tree`'s `make reproduce` commands into a temporary results folder, and
    the analysis' wall seconds; on a failure, the failed command's last lines under `failed`. `cpu`: on
    that CPU alone (the calling thread is pinned to it, and `make reproduce` gets one slot, on it);
    `lane`: the commands can be stopped from another thread (`Lane.stop`), as a filler's are."""
    with tempfile.TemporaryDirectory(prefix="tepa-bench-pair-") as tmp:
        out = f"{tmp}/results"
        slots = [] if cpu is None else ["--slots", "1"]
        commands = (
            [sys.executable, "-m", "runners.launch.reproduce", "--results-dir", out, *slots],
            [sys.executable, "-m", "analysis", "--runs", f"{out}/runs", "--out", out, "--quiet"],
        )
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})  # this thread's: the processes it starts inherit it
        start, used = time.perf_counter(), 0.0
        marks = []
        for command in commands:
            code, seconds, output = _run(command, tree, lane)
            used += seconds
            marks.append(time.perf_counter())
            if code:
                tail = output.strip().splitlines()[-3:]
                return {"failed": f"{' '.join(command[1:3])}: exit {code}: {' / '.join(tail)}"}
    return {
        "wall_s": round(marks[-1] - start, 1),
        "cpu_s": round(used, 1),
        "analysis_s": round(marks[-1] - marks[0], 1),
    }


def _run(command: list[str], cwd: Path, lane: Lane | None) -> tuple[int, float, str]:
    """Run `command` in `cwd` to its end: its exit status, the CPU seconds of it and of the processes it
    waited for (its own figure: another tree may be timed at the same time), and its output."""
    with tempfile.TemporaryFile() as log:
        group = lane is not None  # a process group of its own, for `Lane.stop` to kill
        proc = subprocess.Popen(
            command, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=group
        )
        if lane is not None:
            lane.started(proc)
        _, status, usage = os.wait4(proc.pid, 0)
        code = os.waitstatus_to_exitcode(status)
        proc.returncode = code
        if lane is not None:
            lane.ended()
        log.seek(0)
        return code, usage.ru_utime + usage.ru_stime, log.read().decode(errors="replace")


class Lane:
    """The commands one thread runs, which another can stop: a filler's, killed (its whole process group)
    when the timing it keeps company ends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self.stopped = False

    def started(self, proc: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._proc = proc
            if self.stopped:
                _kill(proc)

    def ended(self) -> None:
        """The running command was reaped: its pid may be reused, so it is never killed now."""
        with self._lock:
            self._proc = None

    def stop(self) -> None:
        with self._lock:
            self.stopped = True
            if self._proc is not None:
                _kill(self._proc)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process group of `proc` (started in its own session, not reaped yet)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def side_by_side(
    sides: dict[str, Path], cpus: tuple[int, int], timer: Callable[..., dict[str, Any]] = time_tree
) -> dict[str, dict[str, Any]]:
    """Each side's tree timed at the same time as the other's, on its own CPU (the first side on the
    first): both timings see the same machine, however its speed drifts. A side that ends first runs
    its commands again, untimed, until the other ends, so neither timing ran beside an idle core."""
    names = list(sides)
    lanes = {name: Lane() for name in names}
    results: dict[str, dict[str, Any]] = {}

    def lane(name: str, cpu: int) -> None:
        results[name] = timer(sides[name], cpu)
        (other,) = (n for n in names if n != name)
        lanes[other].stop()
        if "failed" in results[name]:
            return  # the pair has no ratio: nothing to keep company
        while not lanes[name].stopped:
            if "failed" in timer(sides[name], cpu, lanes[name]) and not lanes[name].stopped:
                return  # failing on its own (not stopped): running it again would only fail again

    threads = [threading.Thread(target=lane, args=(n, c)) for n, c in zip(names, cpus, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def two_cpus() -> tuple[int, int]:
    """Two CPUs this process may use (ValueError, one line, when there are fewer or none can be pinned)."""
    if not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2:
        raise ValueError("--reference-together needs two CPUs it can pin processes to (Linux)")
    first, second = sorted(os.sched_getaffinity(0))[:2]
    return first, second


def paired(
    commit: str,
    root: Path,
    pairs: int = 1,
    timer: Callable[..., dict[str, Any]] = time_tree,
    together: bool = False,
) -> dict[str, Any]:
    """`pairs` pairs of timings of the reference `commit` and of the tree at `root`, in ABBA order (the
    reference first in odd pairs, this tree first in even ones), with the median of the pairs' ratios
    and, when `commit` is TARGET_REFERENCE's, this tree's figures scaled to the reference's there.
    `together`: a pair's two timings run at the same time, each on its own CPU (`side_by_side`; the
    reference on the first CPU in odd pairs, on the second in even ones)."""
    full = resolve(commit, root)
    cpus = two_cpus() if together else None
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tepa-bench-reference-") as tmp:
        tree = extract(full, root, Path(tmp) / "tree")
        for i in range(pairs):
            order = ("reference", "this") if i % 2 == 0 else ("this", "reference")
            trees = {side: tree if side == "reference" else root for side in order}
            if cpus is None:
                pair = {side: timer(path) for side, path in trees.items()}
            else:
                pair = side_by_side(trees, cpus, timer)
            runs.append({"reference": pair["reference"], "this": pair["this"]})
            if any("failed" in side for side in pair.values()):
                return {"commit": full, "pairs": runs, "failed": _failure(pair), "together": together}
    ratios = {
        figure: round(statistics.median(run["this"][figure] / run["reference"][figure] for run in runs), 3)
        for figure in FIGURES
    }
    report: dict[str, Any] = {"commit": full, "pairs": runs, "ratios": ratios, "together": together}
    if full == TARGET_REFERENCE["commit"]:
        report["scaled"] = {f: round(ratios[f] * TARGET_REFERENCE[f], 1) for f in FIGURES}
    return report


def _failure(pair: dict[str, dict[str, Any]]) -> str:
    return "; ".join(f"{side}: {run['failed']}" for side, run in pair.items() if "failed" in run)

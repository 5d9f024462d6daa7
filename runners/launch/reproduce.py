"""The experiments of `make reproduce`, side by side (`python -m runners.launch.reproduce`).

Every paper experiment on the offline simulated backend, each a Hydra sweep through the joblib launcher
(two jobs at a time). The experiments share nothing but the results folder, so they run at the same
time: one after another, each one's start-up and the end of its sweep, where its last and longest job
runs alone, left one of the two cores idle for about a fifth of the time; side by side, the others
fill it. Their jobs share CPU slots, one per core, each job on its slot's core (`runners.launch.slots`,
`--slots`): eight jobs switching on two cores cost about a sixth more CPU than two at a time. The
longest experiment's jobs go first, the others fill the gaps. Only that first experiment runs two jobs at
a time (its own sweep keeps both cores busy at the start); the others run one job at a time in their own
process (`hydra.launcher.n_jobs=1`), which starts no worker processes of its own to wait for a slot: six
fewer Python processes, and about 2-9% less CPU in pairs of runs measured back to back. MemoryAgentBench
runs only when its data is there (`python -m envs.memoryagentbench.data` says why not).

Each experiment's output is printed when it ends, with its wall time; meanwhile a progress line on stderr
gives the streams done / total of each, the episodes per second and the time left (`runners.launch.
progress`: redrawn on a terminal, one plain line every few seconds in a log), and the run ends with a
summary: wall time, streams done per experiment, the file to open. The exit status is 0 when every
experiment that ran succeeded, else the first failure's. SIGINT (Ctrl-C reaches every experiment) and
SIGTERM (passed on to them) stop them resumably, as they stop a single run.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any

from runners.launch import slots as job_slots
from runners.launch.progress import Progress

#: The experiments, longest first (all start at once; the order only decides whose output comes first).
EXPERIMENTS = ("paper_executable", "paper_memoryagentbench", "paper_controlled", "paper_preference")
#: The launcher setting of every experiment but the first (module docstring).
ONE_JOB_AT_A_TIME = "hydra.launcher.n_jobs=1"
#: An experiment runs only when its check exits 0 (MemoryAgentBench: its data is there or downloads).
GUARDS = {"paper_memoryagentbench": ("-m", "envs.memoryagentbench.data")}
#: Seconds between looks at the running experiments.
POLL_S = 0.1
#: Seconds after a SIGINT before it is passed on to the experiments still running.
PASS_ON_S = 5.0


@dataclass(frozen=True)
class Step:
    """One experiment: its name, the check that decides whether it runs (None: always) and its command."""

    name: str
    guard: list[str] | None
    command: list[str]


def steps(results_dir: str, python: str = sys.executable) -> list[Step]:
    """The experiments of `make reproduce` writing to `results_dir`, run by `python` (the first with the
    launcher's two jobs at a time, the others one at a time: module docstring)."""
    run = [python, "-m", "runners.run", "-m", "hydra/launcher=joblib", f"results_dir={results_dir}"]
    return [
        Step(
            name,
            [python, *GUARDS[name]] if name in GUARDS else None,
            [*run, f"experiment={name}", *([] if i == 0 else [ONE_JOB_AT_A_TIME])],
        )
        for i, name in enumerate(EXPERIMENTS)
    ]


def run_side_by_side(
    todo: Sequence[Step],
    echo: bool = True,
    cwd: str | os.PathLike[str] | None = None,
    slots: int | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Run the steps whose guard passes at the same time (in `cwd`) and wait for all of them; their
    jobs share `slots` CPU slots (None: one per core; 0: no limit), earlier steps' jobs first;
    `progress` (None: none) shows how far they are.

    Returns `steps_s` (each step's own wall seconds, from the start of all), `skipped_steps` (guard
    failed), `wall_s` (until the last ended) and, when one failed, `failed` ("name: exit N: last
    lines"). With `echo`, a guard's message and each step's output are printed (the latter when it ends)."""
    with tempfile.TemporaryDirectory(prefix="tepa-slots-") as folder:
        shared = dict(os.environ)
        if slots != 0:
            shared[job_slots.SLOTS_ENV] = str(job_slots.create(folder, slots))
        return _run(todo, echo, cwd, shared, progress)


def _run(
    todo: Sequence[Step],
    echo: bool,
    cwd: str | os.PathLike[str] | None,
    environ: dict[str, str],
    progress: Progress | None = None,
) -> dict[str, Any]:
    skipped: list[str] = []
    start = time.perf_counter()
    running: dict[str, tuple[subprocess.Popen[bytes], IO[bytes]]] = {}
    for priority, step in enumerate(todo):
        if step.guard is not None:
            check = subprocess.run(step.guard, cwd=cwd, capture_output=True, text=True)
            if check.returncode:
                skipped.append(step.name)
                if progress is not None:
                    progress.skip(step.name)
                if echo:
                    print(f"skipping {step.name}: {(check.stderr or check.stdout).strip()}", flush=True)
                continue
        log = tempfile.TemporaryFile()
        running[step.name] = (
            subprocess.Popen(
                step.command,
                cwd=cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(environ, **{job_slots.PRIORITY_ENV: str(priority)}),
            ),
            log,
        )
        if progress is not None:
            progress.add(step.name, step.command, log)
    times: dict[str, float] = {}
    failed: list[str] = []
    previous = signal.signal(signal.SIGTERM, lambda *_: _pass_on(running, signal.SIGTERM))
    interrupted: float | None = None
    try:
        while len(times) < len(running):
            try:
                time.sleep(POLL_S)
            except KeyboardInterrupt:  # Ctrl-C reached them too (one process group): let them stop
                interrupted = interrupted or time.perf_counter()
            if interrupted is not None and time.perf_counter() - interrupted > PASS_ON_S:
                _pass_on(running, signal.SIGINT)  # the signal was this process's alone
                interrupted = math.inf
            if progress is not None:
                progress.tick()
            for name, (proc, log) in running.items():
                if name in times or proc.poll() is None:
                    continue
                times[name] = round(time.perf_counter() - start, 1)
                if progress is not None:
                    progress.ended(name, proc.returncode == 0)
                log.seek(0)
                output = log.read().decode(errors="replace")
                log.close()
                if echo:
                    if progress is not None:
                        progress.clear()
                    print(
                        f"--- {name}: exit {proc.returncode} after {times[name]:g} s\n{output}",
                        end="",
                        flush=True,
                    )
                if proc.returncode:
                    tail = " / ".join(output.strip().splitlines()[-3:])
                    failed.append(f"{name}: exit {proc.returncode}: {tail}")
    finally:
        if progress is not None:
            progress.clear()
        signal.signal(signal.SIGTERM, previous)
        _pass_on(running, signal.SIGTERM)  # nothing left normally; on an error, no orphans
    result: dict[str, Any] = {"steps_s": times, "skipped_steps": skipped}
    if failed:
        result["failed"] = failed[0]
        result["exit_code"] = next(running[n][0].returncode for n in running if running[n][0].returncode)
    else:
        result["wall_s"] = round(time.perf_counter() - start, 1)
    return result


def _pass_on(running: dict[str, tuple[subprocess.Popen[bytes], IO[bytes]]], signum: int) -> None:
    for proc, _ in running.values():
        if proc.poll() is None:
            proc.send_signal(signum)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m runners.launch.reproduce", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--results-dir", default="results", help="the results folder (default: results)")
    parser.add_argument(
        "--slots",
        type=int,
        default=None,
        help="jobs running at once across the experiments (default: one per core; 0: no limit)",
    )
    args = parser.parse_args(argv)
    if args.slots is not None and args.slots < 0:
        parser.error(f"--slots must be >= 0, got {args.slots}")
    start = time.perf_counter()
    progress = Progress(workers=args.slots)
    result = run_side_by_side(steps(args.results_dir), slots=args.slots, progress=progress)
    wall = round(time.perf_counter() - start, 1)
    if "failed" in result:
        print(progress.summary(wall, args.results_dir), file=sys.stderr, flush=True)
        print(f"failed: {result['failed']}", file=sys.stderr)
        code = int(result["exit_code"])
        return 128 - code if code < 0 else code  # killed by a signal: the shell's 128 + its number
    print(f"all experiments done in {result['wall_s']:g} s", flush=True)
    print(progress.summary(wall, args.results_dir), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

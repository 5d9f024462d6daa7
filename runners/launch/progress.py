"""Progress of the experiments `runners.launch.reproduce` runs side by side, and the label of a job's bar.

`Progress` watches each experiment that is a `runners.run` command: its total streams come from its
sweep, composed as `plan=true` composes it (`runners.plan`: each job's overrides, its seeds), in a
thread of the parent while the experiments start; its finished streams are counted on disk, as the
`meta.json` files (a stream's completeness mark, written last) under `<results_dir>/runs/<name>/`
written since the start, plus the streams a job skipped as already complete, which its one summary line
says when the job ends. Nothing is asked of the children and nothing they write changes.

On a terminal (stderr a TTY) one line is redrawn every `TTY_EVERY_S` seconds; elsewhere (a log file)
one plain line is printed every `PLAIN_EVERY_S` seconds and whenever an experiment ends. Each line gives
the elapsed time, streams done / total per experiment, the episodes per second of the streams finished
so far and the time left: the experiments share the CPU slots, so it is the slot time
their remaining streams need, over the slots. A job runs its streams together, so a job's slot time is
its longest stream's wall time (`wall_time_s` in the stream's meta); an experiment's time per stream is
that over its finished jobs, and an experiment none of whose streams has finished yet is taken at the
average of the others. (Jobs that run fewer streams at once than they have, `streams_at_once`, make it
low; jobs without slots, `--slots 0`, make it high.)
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from runners.launch.slots import cores

#: Seconds between plain lines (stderr not a terminal).
PLAIN_EVERY_S = 5.0
#: Seconds between redraws of the line on a terminal.
TTY_EVERY_S = 1.0
#: Seconds an ended experiment's last line waits for its total to be composed.
COMPOSE_WAIT_S = 30.0
#: A job's summary line (`runners.run.RunSummary.describe`): its streams and how many it skipped.
_JOB_SUMMARY = re.compile(rb"(\d+) stream\(s\): \d+ run, (\d+) skipped \(complete\)")
_META = "meta.json"
#: Overrides a job label leaves out: the experiment is the label's head, the results folder says nothing.
_UNLABELLED = ("experiment", "results_dir", "progress")
#: Hydra's global state is composed from by one thread at a time.
_COMPOSING = threading.Lock()


def clock(seconds: float) -> str:
    """`seconds` as m:ss (h:mm:ss from an hour)."""
    s = max(0, round(seconds))
    h, m = divmod(s // 60, 60)
    return f"{h}:{m:02d}:{s % 60:02d}" if h else f"{m}:{s % 60:02d}"


def job_label(name: str, default: str) -> str:
    """The progress-bar label of a run: in a Hydra multirun's job, the experiment `name` and the job's
    own overrides (the swept values: every job of a sweep differs in them), else `default`."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hydra_cfg = HydraConfig.get()
        if hydra_cfg.mode != RunMode.MULTIRUN:
            return default
        task = list(hydra_cfg.overrides.task)
    except Exception:  # noqa: BLE001 (not a Hydra app, or no multirun: the plain label)
        return default
    shown = [o for o in task if o.lstrip("+~").split("=", 1)[0] not in _UNLABELLED]
    return " ".join([name, *shown]) if shown else default


@dataclass
class _Watched:
    """One experiment being watched."""

    name: str
    log: IO[bytes] | None
    total: int | None = None
    runs: Path | None = None  # <results_dir>/runs/<experiment name>
    counted: set[str] = field(default_factory=set)  # finished streams' meta.json seen so far
    episodes: int = 0
    jobs: dict[str, tuple[int, float]] = field(default_factory=dict)  # job folder -> (streams, slot seconds)
    skipped: int = 0
    read: int = 0  # bytes of its output read so far
    tail: bytes = b""
    ended: bool = False
    ok: bool = False
    composing: threading.Thread | None = None

    @property
    def done(self) -> int:
        n = len(self.counted) + self.skipped
        if self.ended and self.ok and self.total is not None:
            return self.total  # every stream either ran or was complete already
        return n if self.total is None else min(n, self.total)


class Progress:
    """Streams done / total of the experiments `add`ed, shown on `stream` (default stderr) by `tick`."""

    def __init__(
        self,
        stream: IO[str] | None = None,
        every: float | None = None,
        tty: bool | None = None,
        cwd: str | os.PathLike[str] | None = None,
        workers: int | None = None,
    ) -> None:
        """`workers`: the jobs that run at once across the experiments (their CPU slots; None: one per
        core)."""
        self.stream = sys.stderr if stream is None else stream
        self.tty = _isatty(self.stream) if tty is None else tty
        self.every = every if every is not None else (TTY_EVERY_S if self.tty else PLAIN_EVERY_S)
        self.cwd = Path(cwd) if cwd is not None else Path.cwd()
        self.workers = workers or cores()
        self.start = time.monotonic()
        self.start_wall = time.time()
        self.watched: dict[str, _Watched] = {}
        self.skipped: list[str] = []
        self._last = self.start
        self._drawn = False
        self._lock = threading.Lock()

    # ----- what is watched
    def add(self, name: str, command: Sequence[str], log: IO[bytes] | None = None) -> None:
        """Watch experiment `name`, run by `command` (its totals only for a `runners.run` command)
        writing its output to `log`; its total is composed in a background thread."""
        self.watched[name] = watched = _Watched(name, log)
        watched.composing = threading.Thread(target=self._compose, args=(watched, list(command)), daemon=True)
        watched.composing.start()

    def skip(self, name: str) -> None:
        self.skipped.append(name)

    def ended(self, name: str, ok: bool) -> None:
        """Experiment `name` ended (`ok`: exit 0): counted one last time and, in a log, a line."""
        watched = self.watched[name]
        if ok and watched.composing is not None:
            watched.composing.join(COMPOSE_WAIT_S)  # its total, for its last line
        self._count(watched)
        watched.ended, watched.ok = True, ok
        if not self.tty:
            self.tick(force=True)

    def _compose(self, watched: _Watched, command: list[str]) -> None:
        try:
            with _COMPOSING:
                found = sweep_total(command, self.cwd)
        except Exception:  # noqa: BLE001 (the experiment itself reports a config it cannot run)
            found = None
        if found is not None:
            with self._lock:
                watched.total, watched.runs = found

    # ----- drawing
    def clear(self) -> None:
        """Take the redrawn line off the terminal (before other output)."""
        if self.tty and self._drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._drawn = False

    def tick(self, force: bool = False) -> None:
        """Count and show a line when `every` seconds have passed since the last (or `force`)."""
        now = time.monotonic()
        if not force and now - self._last < self.every:
            return
        self._last = now
        for watched in self.watched.values():
            if not watched.ended:
                self._count(watched)
        line = self.line(now)
        if self.tty:
            width = _width(self.stream)
            self.stream.write("\r" + line[: width - 1] + "\x1b[K")
            self._drawn = True
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def line(self, now: float | None = None) -> str:
        """`progress 1:05 | streams a 12/200, b 40/100 | 850 ep/s | about 2:30 left`."""
        elapsed = (time.monotonic() if now is None else now) - self.start
        with self._lock:
            parts = []
            for w in self.watched.values():
                total = "?" if w.total is None else str(w.total)
                status = " ended" if w.ended and w.ok else " failed" if w.ended else ""
                parts.append(f"{w.name} {w.done}/{total}{status}")
            episodes = sum(w.episodes for w in self.watched.values())
            left = self._left()
        rate = f"{episodes / elapsed:.0f} ep/s" if elapsed > 0 and episodes else "- ep/s"
        return f"progress {clock(elapsed)} | streams {', '.join(parts) or 'none'} | {rate} | {left}"

    def _left(self) -> str:
        """The slot seconds the running experiments' remaining streams need, over the slots (module
        docstring)."""
        running = [w for w in self.watched.values() if not w.ended]
        if not running:
            return "time left: 0:00"
        if any(w.total is None for w in running):
            return "time left: estimating"
        jobs = [job for w in self.watched.values() for job in w.jobs.values()]
        if not jobs:
            return "time left: estimating"
        average = sum(s for _, s in jobs) / sum(n for n, _ in jobs)
        need = 0.0
        for w in running:
            n = sum(n for n, _ in w.jobs.values())
            per_stream = sum(s for _, s in w.jobs.values()) / n if n else average
            need += max(0, (w.total or 0) - w.done) * per_stream
        return f"about {clock(need / self.workers)} left" if need else "time left: finishing"

    # ----- counting
    def _count(self, watched: _Watched) -> None:
        """New finished streams on disk and the skipped streams of the jobs that ended (their lines)."""
        if watched.log is not None and not watched.log.closed:
            chunk = os.pread(watched.log.fileno(), 1 << 20, watched.read)
            while chunk:
                watched.read += len(chunk)
                text = watched.tail + chunk
                whole, _, watched.tail = text.rpartition(b"\n")
                watched.skipped += sum(int(m.group(2)) for m in _JOB_SUMMARY.finditer(whole))
                chunk = os.pread(watched.log.fileno(), 1 << 20, watched.read)
        with self._lock:
            runs = watched.runs
        if runs is None:
            return
        new, episodes, jobs = [], 0, dict(watched.jobs)
        for folder, _, files in os.walk(runs):
            if _META not in files:
                continue
            path = os.path.join(folder, _META)
            if path in watched.counted:
                continue
            try:
                if os.stat(path).st_mtime < self.start_wall:
                    continue  # a stream finished before this run (skipped, or another configuration's)
                meta = json.loads(Path(path).read_bytes())
                n, wall = int(meta.get("n_episodes") or 0), float(meta.get("wall_time_s") or 0)
            except (OSError, ValueError, TypeError, AttributeError):
                continue  # being replaced, or not ours to read: looked at again next time
            new.append(path)
            episodes += n
            job = os.path.dirname(folder)  # its seed=N folders are the job's streams, run together
            streams, seconds = jobs.get(job, (0, 0.0))
            jobs[job] = (streams + 1, max(seconds, wall))
        with self._lock:
            watched.counted.update(new)
            watched.episodes += episodes
            watched.jobs = jobs

    # ----- the end
    def summary(self, wall_s: float, results_dir: str | os.PathLike[str] = "results") -> str:
        """The closing lines: wall time, streams done per experiment, skipped ones, the file to open."""
        self.clear()
        done = ", ".join(
            f"{w.name} {w.done}/{'?' if w.total is None else w.total}" for w in self.watched.values()
        )
        skipped = f"; skipped: {', '.join(self.skipped)}" if self.skipped else ""
        readme = Path(results_dir) / "README.md"
        return (
            f"summary: {clock(wall_s)} wall ({wall_s:g} s); streams done: {done or 'none'}{skipped}\n"
            f"summary: the tables and figures come from the logs (make figures); then open {readme}"
        )


def sweep_total(command: Sequence[str], cwd: Path) -> tuple[int, Path] | None:
    """(streams, <results_dir>/runs/<name>) of a `python -m runners.run ...` command (None for any
    other command): every job of its sweep times its seeds, composed as `plan=true` does."""
    if "runners.run" not in command:
        return None
    argv = list(command[list(command).index("runners.run") + 1 :])
    from hydra import initialize_config_dir

    from runners import plan
    from runners.compose import CONF_DIR, compose_config

    # as runners.run: Hydra 1.3 warns that the launcher defaults use the plugins' own names
    warnings.filterwarnings(
        "ignore", message=r"(?s).*validated against ConfigStore schema", category=UserWarning
    )
    multirun = any(arg in ("-m", "--multirun") for arg in argv)
    overrides, search = plan._split(argv)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        jobs = plan._jobs(overrides + search, multirun)
        base = compose_config(jobs[0])
        total, names = 0, {str(base.name)}
        # a job is composed again only when the sweep varies its seeds or experiment
        swept = {_key(o) for o in {o for job in jobs for o in job} - set.intersection(*map(set, jobs))}
        again = bool(swept & {"seed", "seeds", "experiment"})
        for job in jobs:
            cfg = compose_config(job) if again and job is not jobs[0] else base
            total += len(cfg.seeds) if cfg.get("seeds") is not None else 1
            names.add(str(cfg.name))
    results = Path(str(base.results_dir))
    runs = (results if results.is_absolute() else cwd / results) / "runs"
    return total, runs / names.pop() if len(names) == 1 else runs


def _key(override: str) -> str:
    return override.lstrip("+~").split("=", 1)[0]


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _width(stream: Any) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return 100

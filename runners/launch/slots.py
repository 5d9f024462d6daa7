"""At most N jobs running at once across processes, the most urgent first: CPU slots for `make reproduce`.

`make reproduce` runs its experiments side by side, each a sweep with two jobs at a time. Left alone,
eight jobs would share the two cores, and switching between them cost about a sixth more CPU than
running them two at a time. So `runners.launch.reproduce` creates a slot folder and names it in the
environment (`TEPA_JOB_SLOTS`, with each experiment's `TEPA_JOB_PRIORITY`), and every job holds a slot
while it runs (`held`). A job waits while all slots are taken or a job of a more urgent priority (a
smaller number) waits, so the experiment on the critical path goes first and the others fill the gaps.

A slot is an `flock` on a file of the folder: the kernel releases it when its holder exits, however it
exits, so a killed job never keeps a slot. A slot names a CPU where that is possible (`create`):
its holder then runs on that CPU alone, and so do the processes it starts. A job of the executable
environment hands every tool call to a worker process and waits for its answer; on one CPU the two take
turns with warm caches, and this cut the CPU time of such a job by about a tenth. Without
`TEPA_JOB_SLOTS`, `held` does nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from runners.config import ConfigError

SLOTS_ENV = "TEPA_JOB_SLOTS"
PRIORITY_ENV = "TEPA_JOB_PRIORITY"
#: Seconds between looks for a free slot (only one waiting job looks at a time).
POLL_S = 0.02
_SLOT = "slot-"
_WAITING = "waiting-"
_TURNSTILE = "turnstile"


#: Whether a job can be pinned to a CPU (Linux).
PINNABLE = hasattr(os, "sched_setaffinity")


def cores() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if PINNABLE else os.cpu_count() or 1


def create(folder: str | os.PathLike[str], n: int | None = None) -> Path:
    """Make `folder` a slot folder of `n` slots (None: one per core; else n >= 1) and return it. Where
    jobs can be pinned and there is a CPU for every slot, slot i names the i-th CPU this process may
    use."""
    n = cores() if n is None else n
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"slots must be a positive integer, got {n!r}")
    cpus = sorted(os.sched_getaffinity(0)) if PINNABLE and n <= cores() else []
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (path / f"{_SLOT}{i}").write_text(str(cpus[i]) if cpus else "")
    return path


@contextlib.contextmanager
def held(environ: os._Environ[str] | dict[str, str] | None = None) -> Iterator[int | None]:
    """Hold a slot of the folder named by `TEPA_JOB_SLOTS` (yields its number) for the block; without
    that variable, yield None at once. The wait ends with KeyboardInterrupt on SIGINT like any sleep."""
    env = os.environ if environ is None else environ
    folder = env.get(SLOTS_ENV)
    if not folder:
        yield None
        return
    try:
        priority = int(env.get(PRIORITY_ENV, "0"))
    except ValueError:
        raise ConfigError(f"{PRIORITY_ENV} must be an integer, got {env[PRIORITY_ENV]!r}") from None
    slots = sorted(Path(folder).glob(f"{_SLOT}*"))
    if not slots:
        raise ConfigError(f"{SLOTS_ENV}={folder}: not a slot folder (no {_SLOT}* files)")
    # The marker is locked while its job waits (a marker nobody holds is a dead waiter's), so it is
    # locked before it gets its name: others would take a fresh unlocked one for a dead waiter's.
    marker = Path(folder) / f"{_WAITING}{priority}-{os.getpid()}"
    unnamed = Path(folder) / f"new-{os.getpid()}"
    mark = os.open(unnamed, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(mark, fcntl.LOCK_EX)
    os.rename(unnamed, marker)
    turn = os.open(Path(folder) / _TURNSTILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fd, number = _wait(Path(folder), slots, priority, turn)
    finally:
        marker.unlink(missing_ok=True)
        os.close(mark)
        os.close(turn)
    cpu = os.pread(fd, 32, 0).strip()  # empty unless the slot names a CPU (Linux)
    previous = os.sched_getaffinity(0) if cpu else set()
    try:
        if cpu:
            os.sched_setaffinity(0, {int(cpu)})
        yield number
    finally:
        if cpu:
            os.sched_setaffinity(0, previous)  # a launcher's worker runs more jobs
        os.close(fd)  # releases the lock


def _wait(folder: Path, slots: list[Path], priority: int, turn: int) -> tuple[int, int]:
    """Wait for a slot: (fd, number). One waiter at a time looks (it holds the turnstile; the others
    sleep in the kernel, costing nothing) and hands its turn on while a more urgent job waits."""
    while True:
        fcntl.flock(turn, fcntl.LOCK_EX)
        try:
            while not _more_urgent_waiting(folder, priority):
                handle = _take(slots)
                if handle is not None:
                    return handle
                time.sleep(POLL_S)
        finally:
            fcntl.flock(turn, fcntl.LOCK_UN)
        time.sleep(POLL_S)  # the more urgent waiter takes the turnstile meanwhile


def _take(slots: list[Path]) -> tuple[int, int] | None:
    """(fd, number) of a slot this process now holds, or None when every slot is held."""
    for number, slot in enumerate(slots):
        fd = _locked(slot)
        if fd is not None:
            return fd, number
    return None


def _more_urgent_waiting(folder: Path, priority: int) -> bool:
    """Whether a process of a smaller priority number waits for a slot (the markers of waiters that
    died waiting, which nobody holds any more, are removed)."""
    for name in os.listdir(folder):
        level = name[len(_WAITING) :].rpartition("-")[0] if name.startswith(_WAITING) else ""
        if not level.lstrip("-").isdigit() or int(level) >= priority:
            continue
        try:
            fd = _locked(folder / name)
        except FileNotFoundError:
            continue  # it got its slot meanwhile
        if fd is None:
            return True
        (folder / name).unlink(missing_ok=True)
        os.close(fd)
    return False


def _locked(path: Path) -> int | None:
    """An fd holding an exclusive lock on `path`, or None when another process holds one."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd

"""Stopping a multirun whose launcher runs its jobs in worker processes (`hydra/launcher=joblib`).

Left to Python's defaults, SIGTERM ended the launcher at once and its workers ran their streams to the
end, orphaned (on a paid endpoint they kept spending), and a worker that was signalled itself moved on
to its next job. So the launcher process stops like this (`install`): on SIGINT or SIGTERM it passes the
signal on to each worker, whose run stops within a second or two with its partial logs flushed
(`runners.run.run_interruptible`) and whose process then exits instead of taking another job
(`in_worker`); it waits for them at most `grace` seconds, kills any still alive, and unwinds with
`Stopped`, which `runners.run.cli` turns into one line and exit status 128 + signum. A rerun of the
same command resumes every stream.

A process that runs such a command as its child (`runners.map`, `runners.llm.local.serve -- COMMAND`)
stops with it through `Relay`: SIGTERM is passed on at once, a SIGINT (which Ctrl-C sent to the child
too) after `PASS_ON_S`, and the process unwinds with `Stopped` only once its child has exited.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import signal
import subprocess
import threading
import time
from types import TracebackType
from typing import Any

_POLL_S = 0.05
#: Seconds after a SIGINT before `Relay` passes it on to a child still running (Ctrl-C reached it too).
PASS_ON_S = 5.0


class Stopped(KeyboardInterrupt):
    """The launcher was stopped by `signum` once its workers were: unwinds the launcher (joblib frees
    its semaphores and shared-memory folders on the way) up to `runners.run.cli`, which says so."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def stopped_line(signum: int) -> str:
    """The one line a run or a multirun stopped by `signum` ends with."""
    name = signal.Signals(signum).name
    return f"stopped by {name}: the episodes run so far are logged; rerun the same command to resume"


def in_worker() -> bool:
    """True in a launcher's worker process (joblib's loky workers, multiprocessing children)."""
    return multiprocessing.parent_process() is not None


def install(grace: float) -> None:
    """Stop this launcher's workers on SIGINT and SIGTERM (module docstring). Without workers, SIGINT
    still raises KeyboardInterrupt and SIGTERM exits with its one line."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, functools.partial(_stop, grace))


def _stop(grace: float, signum: int, frame: Any) -> None:
    workers = multiprocessing.active_children()
    if not workers and signum == signal.SIGINT:
        raise KeyboardInterrupt
    for worker in workers:
        try:
            os.kill(worker.pid, signum)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(_POLL_S)
    for worker in multiprocessing.active_children():
        worker.kill()  # past its grace: what it logged so far is resumable (whole lines only)
        worker.join(1.0)
    raise Stopped(signum)


class Relay:
    """SIGINT and SIGTERM for a process that runs commands one at a time (`run`), each a process that
    stops itself on these signals (a multirun, an experiment). While a child runs, SIGTERM is passed on
    to it at once, SIGINT after `PASS_ON_S` if the child still runs (Ctrl-C reaches the whole process
    group, so it usually stopped already), and `run` raises `Stopped` once the child has exited: this
    process never leaves a child behind. With no child running, the first signal raises `Stopped` at once
    (later ones do not interrupt the unwinding), and a command asked for after a signal is not started.
    Handlers are installed for the `with` block (in the main thread; elsewhere signals are left alone)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._child: subprocess.Popen[Any] | None = None
        self._starting = False
        self._interrupted: float | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> Relay:
        if threading.current_thread() is threading.main_thread():  # else signals stay Python's defaults
            self._previous = {
                sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)
            }
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def run(self, command: list[str], **popen: Any) -> int:
        """Run `command` (keywords as for `subprocess.Popen`) to its end and return its exit status
        (negative: the signal that ended it); `Stopped` instead when a signal came meanwhile."""
        if self.signum is not None:
            raise Stopped(self.signum)
        self._starting = True  # a signal now only marks the stop: it is passed on once the child exists
        try:
            child = self._child = subprocess.Popen(command, **popen)
        finally:
            self._starting = False
        try:
            if self.signum == signal.SIGTERM:
                child.send_signal(signal.SIGTERM)
            while True:
                try:
                    code = child.wait(timeout=_POLL_S * 4)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if self._interrupted is not None and time.monotonic() - self._interrupted > PASS_ON_S:
                    child.send_signal(signal.SIGINT)  # the SIGINT was this process's alone
                    self._interrupted = float("inf")
        finally:
            self._child = None
        if self.signum is not None:
            raise Stopped(self.signum)
        return code

    def _handle(self, signum: int, frame: Any) -> None:
        first = self.signum is None
        if first:
            self.signum = signum
        child = self._child
        if child is not None and child.poll() is None:
            if signum == signal.SIGTERM:
                child.send_signal(signum)
            elif self._interrupted is None:
                self._interrupted = time.monotonic()
            return
        if self._starting:
            if signum == signal.SIGINT and self._interrupted is None:
                self._interrupted = time.monotonic()
            return
        if first:  # a later signal must not cut short the unwinding the first one started
            raise Stopped(signum)

"""Stopping a multirun whose launcher runs its jobs in worker processes (`hydra/launcher=joblib`).

Left to Python's defaults, SIGTERM ended the launcher at once and its workers ran their streams to the
end, orphaned (on a paid endpoint they kept spending), and a worker that was signalled itself moved on
to its next job. So the launcher process stops like this (`install`): on SIGINT or SIGTERM it passes the
signal on to each worker, whose run stops within a second or two with its partial logs flushed
(`runners.run.run_interruptible`) and whose process then exits instead of taking another job
(`in_worker`); it waits for them at most `grace` seconds, kills any still alive, and unwinds with
`Stopped`, which `runners.run.cli` turns into one line and exit status 128 + signum. A rerun of the
same command resumes every stream.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import signal
import time
from typing import Any

_POLL_S = 0.05


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

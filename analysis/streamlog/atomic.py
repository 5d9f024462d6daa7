"""Whole-file writes: a reader (or a later run after a kill) sees the old file or the new one, never a
truncated one. The one helper of the stream writer (`analysis.streamlog.stream`) and the analysis' outputs."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

#: The mode of an output meant to be read and shared (tables, figures, README.md, a page): the temporary
#: file would otherwise keep mkstemp's owner-only 0600.
SHARED = 0o644


def atomic_write_bytes(path: Path, data: bytes, durable: bool = True, mode: int | None = None) -> None:
    """Write `data` to `path` so that readers see the old file or the new one, never a torn one;
    `durable` also waits until it is on disk (the partial log, never synced later, need not); `mode`
    (e.g. SHARED) is set before the file takes its name (else it stays owner-only)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            if mode is not None:
                os.fchmod(f.fileno(), mode)
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def refuse_special(path: Path, option: str) -> None:
    """A ValueError when `path` exists and is not a regular file (a folder, a device, a FIFO): a
    named output replaces only a file."""
    try:
        mode = path.stat().st_mode  # a link to a file is fine: the link is replaced, not its target
    except (FileNotFoundError, NotADirectoryError):
        return  # a new path (an unusable folder above it is for the caller's check of the folder)
    except OSError as exc:
        raise ValueError(f"{option} {path}: cannot be examined ({exc.strerror or exc})") from None
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file (a device, a FIFO, a socket)"
        raise ValueError(f"{option} {path}: exists and is {kind}; name a file (it is replaced) or a new path")

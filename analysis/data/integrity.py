"""Is a stream's log what its writer wrote? One check, shared by the runner (before it skips a stream as
complete) and the analysis (before it trusts one).

The runner records in meta.json, under `files`, the sha256 and the row count of `episodes.parquet` and
`archive.jsonl` as it writes them; `verify` recomputes the digests. A stream that fails is *moved aside*
(`seed=0.corrupt-<UTC time>` beside it), never deleted: the analysis skips such directories and the
runner redoes the stream. This module imports neither the runner nor the environments (the analysis reads
logs only), so both sides can use it.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

META = "meta.json"
EPISODES = "episodes.parquet"
ARCHIVE = "archive.jsonl"
CHECKED = (EPISODES, ARCHIVE)
#: Deepest nesting of lists and objects a meta.json may have: the runner writes a handful of levels; a
#: deeper one is damage, and a very deep one would exhaust the recursion of whatever walks it.
MAX_DEPTH = 64
#: The suffix of a directory (or file) moved aside: "<name>.<reason>-<UTC time>", e.g. seed=0.corrupt-...
ASIDE = re.compile(r"\.[a-z-]+-\d{8}T\d{6}Z(-\d+)?$")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_record(data: bytes, rows: int) -> dict[str, Any]:
    """What meta.json's `files` holds for one file written with content `data`."""
    return {"sha256": sha256(data), "bytes": len(data), "rows": rows}


def read_file(path: Path) -> bytes:
    """The bytes of a regular file. Anything else is an OSError at once, never a wait: a FIFO in place
    of a log would block a plain read until some writer opened it (and a signal would not end it)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def load_meta(directory: Path) -> dict[str, Any]:
    """meta.json as a dict; a ValueError (one line naming the file) when it is missing, not a regular
    file, not JSON, not an object, or nested deeper than MAX_DEPTH."""
    path = directory / META
    try:
        meta = json.loads(read_file(path))
    except OSError as exc:
        raise ValueError(f"{path}: unreadable ({exc.strerror or exc})") from None
    except RecursionError:
        raise ValueError(f"{path}: nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise ValueError(f"{path}: not JSON ({str(exc).splitlines()[0]})") from None
    if not isinstance(meta, dict):
        raise ValueError(f"{path}: not a JSON object")
    if _depth(meta) > MAX_DEPTH:
        raise ValueError(f"{path}: nested deeper than {MAX_DEPTH} levels")
    return meta


def read_meta(directory: Path) -> dict[str, Any] | None:
    """meta.json as a dict; None when missing or unreadable (see `load_meta`)."""
    try:
        return load_meta(directory)
    except ValueError:
        return None


def _depth(value: Any) -> int:
    """How deeply `value` nests lists and dicts, counted without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            if depth <= MAX_DEPTH:
                stack += [(child, depth + 1) for child in (item.values() if isinstance(item, dict) else item)]
    return deepest


def verify(directory: Path, meta: dict[str, Any]) -> str | None:
    """None when every file meta.json lists has its recorded size and sha256; otherwise one line that
    names the file and what is wrong with it."""
    files = meta.get("files")
    if not isinstance(files, dict) or not all(isinstance(files.get(n), dict) for n in CHECKED):
        return f"{directory / META}: records no checksums of {', '.join(CHECKED)}"
    for name in CHECKED:
        path, want = directory / name, files[name]
        try:
            data = read_file(path)
        except FileNotFoundError:
            return f"{path}: missing"
        except OSError as exc:
            return f"{path}: unreadable ({exc.strerror or exc})"
        if len(data) != want.get("bytes"):
            return f"{path}: {len(data)} bytes, meta.json records {want.get('bytes')}"
        if sha256(data) != want.get("sha256"):
            return f"{path}: sha256 differs from the one meta.json records (the file was changed or damaged)"
    return None


def aside_path(path: Path, reason: str) -> Path:
    """A free name beside `path` for moving it aside: `<name>.<reason>-<UTC time>`."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    target = path.with_name(f"{path.name}.{reason}-{stamp}")
    n = 1
    while target.exists():
        target = path.with_name(f"{path.name}.{reason}-{stamp}-{n}")
        n += 1
    return target


def move_aside(path: Path, reason: str) -> Path:
    """Rename `path` (a stream directory or a file) to `aside_path(path, reason)`; returns the new name."""
    target = aside_path(path, reason)
    path.rename(target)
    return target


def is_aside(path: Path) -> bool:
    """Whether `path` or one of its parents was moved aside."""
    return any(ASIDE.search(part) for part in path.parts)

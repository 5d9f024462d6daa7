"""A stream's log from its start to its end, in one module: where its files are and what they are called,
reading meta.json back (bounded), verifying a stream, moving one aside, the partial log's lines, and the
one writer of a stream (`StreamLog`: its lock, completeness, replay on resume, batched appends, the final
files). The runner writes through `StreamLog`; the analysis reads with the functions above it. How values
become bytes is `analysis.streamlog.encoding`.

A stream directory `results/runs/<experiment>/<env>/<memory>/seed=<n>/` (`stream_dir`), once complete,
holds `episodes.parquet` (one row per decision episode; deterministic: the same config and seed give a
byte-identical file, no wall-clock columns), `archive.jsonl` (the lifecycle events) and `meta.json`: the
stream's identity (the whole configuration that decides its episodes, and the fingerprint of its input
data) and its hash, the resolved config, versions, git commit, wall time, backend stats, the sha256 and
row count of both files above (`files`, which `verify` recomputes), and `complete: true`. It is written
last, so its presence marks a complete stream; a rerun trusts it only after `verify`.

While a stream runs, each episode is appended to `episodes.partial.jsonl` (without what its prompt held,
which replay rebuilds), whose first line is the stream's identity; lines are written in batches (every
FLUSH_EVERY episodes or FLUSH_EVERY_S seconds, and when the stream stops, however it stops), so a killed
process loses at most the last batch, which resume asks again. Lifecycle events are not logged as they
happen: a resumed stream rebuilds them exactly by replay, and writing them twice doubled the cost of
fact-heavy streams. A killed stream resumes by replaying the valid prefix of its partial log (see
`runners.agent.loop.run_stream`), so its final files equal those of an uninterrupted run.

Nothing is ever deleted that holds results: a complete stream that fails verification, or that belongs
to another identity, and a partial log that is damaged or of another identity, are moved aside
(`<name>.<reason>-<UTC time>`, e.g. `seed=0.corrupt-...`) with one logged line; the analysis skips such
directories and the runner redoes the stream. One process writes a stream at a time:
`StreamLog.acquire` takes an OS lock (`fcntl.flock`) on `.seed=<n>.lock` beside the directory, which the
OS releases when its process dies. Every final file is written atomically (a temporary file, then
`os.replace`).
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import functools
import hashlib
import io
import json
import logging
import os
import re
import stat
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, TypeVar

from analysis.streamlog.atomic import atomic_write_bytes
from analysis.streamlog.encoding import dumps, fingerprint, jsonl_bytes, parquet_bytes, sha256
from analysis.streamlog.record import SAMPLE, record_problem

META = "meta.json"
EPISODES = "episodes.parquet"
ARCHIVE = "archive.jsonl"
CHECKED = (EPISODES, ARCHIVE)
#: Deepest nesting of lists and objects a meta.json may have: the runner writes a handful of levels; a
#: deeper one is damage, and a very deep one would exhaust the recursion of whatever walks it.
MAX_DEPTH = 64
#: The suffix of a directory (or file) moved aside: "<name>.<reason>-<UTC time>", e.g. seed=0.corrupt-...
ASIDE = re.compile(r"\.[a-z-]+-\d{8}T\d{6}Z(-\d+)?$")
PARTIAL_EPISODES = "episodes.partial.jsonl"
#: Beside the partial log: the backend stats of the invocations that stopped before the stream was done,
#: so that the finished stream's meta.json totals what all of them spent.
PARTIAL_STATS = "episodes.partial.stats.json"
#: A partial-log line longer than this is damage, not an episode (a reply is a few kB at most).
MAX_LINE_BYTES = 1 << 20


def stream_dir(
    results_dir: str | os.PathLike, experiment: str, env: str, memory: str, seed: int, variant: str = ""
) -> Path:
    """Where one stream's logs live; `variant` (a configuration that differs from the experiment's own,
    see `runners.store.identity`) adds one directory level above `seed=<n>`."""
    labelled = Path(results_dir) / "runs" / experiment / env / memory
    return (labelled / variant if variant else labelled) / f"seed={seed}"


def file_record(data: bytes, rows: int) -> dict[str, Any]:
    """What meta.json's `files` holds for one file written with content `data`."""
    return {"sha256": sha256(data), "bytes": len(data), "rows": rows}


def read_file(path: Path) -> bytes:
    """The bytes of a regular file. Anything else is an OSError at once, never a wait: a FIFO in place
    of a log would block a plain read until some writer opened it (and a signal would not end it)."""
    with _open_regular(path) as f:
        return f.read()


def file_sha256(path: Path) -> tuple[int, str]:
    """(bytes, sha256) of a regular file (else an OSError, as `read_file`), hashed as it is read in
    blocks: checking a log need not hold it whole (a reproduction's 800 streams: about 0.2 CPU s less)."""
    with _open_regular(path) as f:
        digest = hashlib.file_digest(f, "sha256")
        return f.tell(), digest.hexdigest()


def _open_regular(path: Path) -> io.FileIO:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
    except BaseException:
        os.close(fd)
        raise
    return io.FileIO(fd, "rb")


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
            size, digest = file_sha256(path)
        except FileNotFoundError:
            return f"{path}: missing"
        except OSError as exc:
            return f"{path}: unreadable ({exc.strerror or exc})"
        if size != want.get("bytes"):
            return f"{path}: {size} bytes, meta.json records {want.get('bytes')}"
        if digest != want.get("sha256"):
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


def read_line(f: IO[bytes]) -> tuple[bytes | None, bool]:
    """The next line without its newline (None at the end) and whether it ended with one. A line
    longer than MAX_LINE_BYTES is returned cut just past the limit, never read whole."""
    line = f.readline(MAX_LINE_BYTES + 1)
    if not line:
        return None, False
    if line.endswith(b"\n"):
        return line[:-1], True
    if len(line) > MAX_LINE_BYTES:
        while (more := f.readline(MAX_LINE_BYTES)) and not more.endswith(b"\n"):
            pass  # skip the rest of the over-long line
    return line, False


def parse_line(line: bytes) -> dict[str, Any] | None:
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the parser goes
        return None
    return obj if isinstance(obj, dict) else None


def partial_summary(path: Path) -> tuple[dict[str, Any] | None, int]:
    """A partial log's identity (None when its header is unreadable) and how many lines follow it."""
    with open(path, "rb") as f:
        header, _ = read_line(f)
        head = parse_line(header) if header is not None else None
        return (head or {}).get("identity"), sum(1 for _ in f)


log = logging.getLogger(__name__)
_R = TypeVar("_R")

#: How often a process waiting for another's lock looks again (seconds).
LOCK_POLL_S = 0.2
#: The partial log is written every FLUSH_EVERY episodes or FLUSH_EVERY_S seconds, whichever comes first:
#: one write per episode cost more than running a simulated episode.
FLUSH_EVERY = 256
FLUSH_EVERY_S = 0.5
_SAMPLE = frozenset(SAMPLE)


def differences(old: Any, new: Any, prefix: str = "") -> list[str]:
    """The dotted keys whose values differ between two identities, for messages."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        keys = sorted(set(old) | set(new), key=str)
        return [d for k in keys for d in differences(old.get(k), new.get(k), f"{prefix}{k}.")]
    return [] if old == new else [prefix.rstrip(".") or "(everything)"]


@functools.cache
def _log_unwritable() -> type[Exception]:
    """`LogUnwritable`, defined on first use: Hydra shows a `CompactHydraException` as one line, but
    importing Hydra costs a reader of the logs (the analysis, the viewer) about 0.1 s it does not need."""
    from hydra.errors import CompactHydraException

    class LogUnwritable(CompactHydraException):
        """A stream's files cannot be written (a full disk, a read-only or missing folder): one line
        naming the stream, instead of a traceback. Whatever was logged before stays, and a rerun
        resumes it."""

    LogUnwritable.__module__, LogUnwritable.__qualname__ = __name__, "LogUnwritable"  # pickles by name
    return LogUnwritable


def __getattr__(name: str) -> Any:
    """`LogUnwritable` (`_log_unwritable`), the module's one attribute defined on first use."""
    if name == "LogUnwritable":
        return _log_unwritable()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _one_line(method: Callable[..., _R]) -> Callable[..., _R]:
    """A `StreamLog` method whose OSError becomes `LogUnwritable` naming the stream's folder."""

    @functools.wraps(method)
    def wrapper(self: StreamLog, *args: Any, **kwargs: Any) -> _R:
        try:
            return method(self, *args, **kwargs)
        except OSError as exc:
            raise _log_unwritable()(
                f"{self.dir}: cannot write the stream's logs ({exc.strerror or exc}); what is logged is "
                "kept: free space or make the folder writable, then rerun the same command to resume"
            ) from None

    return wrapper


class StreamLog:
    """The files of one stream directory: its lock, completeness, the partial log, the final write.

    `identity` is everything that decides the stream's episodes (see `runners.store.identity`); its
    `fingerprint` is recorded in meta.json and in the partial log's first line.
    """

    def __init__(self, directory: Path, identity: Mapping[str, Any]) -> None:
        self.dir = directory
        self.identity = json.loads(dumps(identity))
        self.fingerprint = fingerprint(self.identity)
        self._episodes: IO[str] | None = None
        self._pending: list[str] = []  # encoded lines not yet written
        self._flush_at = 0.0
        self._lock: IO[str] | None = None

    # ----- one writer per stream
    @property
    def lock_path(self) -> Path:
        """`.seed=<n>.lock` beside the directory (not inside it: the directory may be moved aside)."""
        return self.dir.with_name(f".{self.dir.name}.lock")

    @_one_line
    def try_acquire(self) -> int | None:
        """Take the stream's lock without waiting: None when taken, else the holder's pid (0: unknown).

        An flock belongs to an open file description, so the OS releases it when its process ends,
        however it ends: a lock is never left behind by a dead writer."""
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        f = open(self.lock_path, "a+", encoding="utf-8")  # noqa: SIM115 (held until release())
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip()
            f.close()
            return int(holder) if holder.isdigit() else 0
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        self._lock = f
        return None

    async def acquire(self) -> None:
        """Take the stream's lock, waiting (with one logged line) while another process writes it."""
        holder = self.try_acquire()
        if holder is None:
            return
        log.warning("%s: being written by process %s; waiting for it to finish", self.dir, holder or "?")
        while self.try_acquire() is not None:
            await asyncio.sleep(LOCK_POLL_S)

    def release(self) -> None:
        if self._lock is not None:
            self._lock.close()  # closing the file releases the flock
        self._lock = None

    # ----- completeness
    @_one_line
    def is_complete(self) -> bool:
        """True when meta.json marks this identity's stream complete and both files verify.

        A complete stream of another identity (its configuration or data changed while its labels did
        not) and one that fails verification are moved aside with one logged line, so that this one
        is run afresh: results are never trusted unverified, overwritten or deleted."""
        meta = read_meta(self.dir)
        if meta is None and (self.dir / META).exists():
            moved = move_aside(self.dir, "corrupt")
            log.warning(
                "%s: not a JSON object; moved the stream to %s and running it again",
                self.dir / META,
                moved.name,
            )
            return False
        if meta is None or meta.get("complete") is not True:
            return False
        if meta.get("fingerprint") != self.fingerprint:
            changed = ", ".join(differences(meta.get("identity"), self.identity)) or "its fingerprint"
            moved = move_aside(self.dir, "other-config")
            log.warning(
                "%s: holds a complete run of another configuration (differs in: %s); moved it to %s "
                "and running this one", self.dir, changed, moved.name,
            )  # fmt: skip
            return False
        problem = verify(self.dir, meta)
        if problem is not None:
            moved = move_aside(self.dir, "corrupt")
            log.warning("%s; moved the stream to %s and running it again", problem, moved.name)
            return False
        return True

    @_one_line
    def discard_partial(self) -> None:
        path = self.dir / PARTIAL_EPISODES
        try:
            path.unlink(missing_ok=True)
        except IsADirectoryError:  # nothing the harness wrote: kept aside, as any damaged log
            self.set_aside_partial("damaged", "not a plain file")
        (self.dir / PARTIAL_STATS).unlink(missing_ok=True)

    def carried_stats(self) -> dict[str, Any]:
        """The backend stats that earlier invocations of this stream saved (`save_stats`), or {}."""
        try:
            saved = json.loads((self.dir / PARTIAL_STATS).read_bytes())
        except (OSError, ValueError, RecursionError):
            return {}
        ok = isinstance(saved, dict) and saved.get("fingerprint") == self.fingerprint
        return saved["stats"] if ok and isinstance(saved.get("stats"), dict) else {}

    def save_stats(self, stats: Mapping[str, Any]) -> None:
        """Keep the backend stats of an invocation that stops before the stream is done."""
        data = {"fingerprint": self.fingerprint, "stats": stats}
        atomic_write_bytes(self.dir / PARTIAL_STATS, dumps(data).encode(), durable=False)

    # ----- resume
    @_one_line
    def replay(self, problem: Callable[[Mapping[str, Any]], str | None] = lambda _: None) -> list[dict]:
        """The records an interrupted run of this identity logged: the partial log's valid prefix.

        A torn last line (a writer killed mid-line) is dropped silently. Any other damage (a line that
        is not JSON or nested too deep to parse, longer than MAX_LINE_BYTES, holding a value no episode
        can have (`record_problem`), a reply longer than the config's `llm.max_reply_chars`, or that
        `problem` rejects) ends the prefix: the log is kept beside
        as `...damaged-<time>` and the episodes after the prefix are asked again. A log of another
        identity, one whose first line is unreadable, and a path that is not a plain file are kept
        beside as well and nothing is replayed. Each of these says so in one logged line."""
        path = self.dir / PARTIAL_EPISODES
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):  # a folder, a FIFO, a link: never opened
                self.set_aside_partial("damaged", "not a plain file; starting afresh")
                return []
            f = open(path, "rb")  # noqa: SIM115
        except FileNotFoundError:
            return []
        with f:
            header, _ = read_line(f)
            head = parse_line(header) if header is not None else None
            if not head or "fingerprint" not in head:
                self.set_aside_partial("damaged", "its first line is not this log's header; starting afresh")
                return []
            if head["fingerprint"] != self.fingerprint:
                changed = ", ".join(differences(head.get("identity"), self.identity)) or "its fingerprint"
                self.set_aside_partial("other-config", f"another configuration's log (differs in: {changed})")
                return []
            records: list[dict] = []
            while True:
                line, complete = read_line(f)
                if line is None or (not complete and len(line) <= MAX_LINE_BYTES):  # end, or a torn tail
                    return records
                rec = parse_line(line) if len(line) <= MAX_LINE_BYTES else None
                why = (
                    f"longer than {MAX_LINE_BYTES} bytes" if len(line) > MAX_LINE_BYTES
                    else "not a JSON object" if rec is None
                    else record_problem(rec) or problem(rec) or self._reply_problem(rec)
                )  # fmt: skip
                if why is not None:
                    n = len(records)
                    what = f"line {n + 2} is {why}; replaying the {n} episode(s) before it, asking the rest"
                    self.set_aside_partial("damaged", what)
                    return records
                records.append(rec)

    def _reply_problem(self, rec: Mapping[str, Any]) -> str | None:
        """Why a logged reply is longer than any the run kept (its identity's `llm.max_reply_chars`:
        longer replies are cut before logging), or None; the others are checked as they replay."""
        llm = self.identity.get("llm")
        limit = llm.get("max_reply_chars") if isinstance(llm, dict) else None
        if type(limit) is not int:
            return None
        texts: list[Any] = [rec.get("reply")]
        try:
            hops = json.loads(rec.get("hop_replies") or "[]")
        except (TypeError, ValueError, RecursionError):
            hops = []
        texts += hops if isinstance(hops, list) else []
        longest = max((len(x) for x in texts if isinstance(x, str)), default=0)
        if longest > limit:
            return f"a reply of {longest} characters, over the config's max_reply_chars {limit}"
        return None

    @_one_line
    def set_aside_partial(self, reason: str, what: str) -> None:
        """Move the partial log aside (kept, never deleted), saying `what` happened in one line."""
        path = self.dir / PARTIAL_EPISODES
        moved = move_aside(path, reason)
        log.warning("%s: %s (the log is kept as %s)", path, what, moved.name)

    @_one_line
    def open(self, replay: Sequence[Mapping[str, Any]]) -> None:
        """Start appending: rewrite the partial log as its header plus `replay` (dropping a torn
        tail), then keep it open for `append`."""
        self.dir.mkdir(parents=True, exist_ok=True)
        header = {"fingerprint": self.fingerprint, "identity": self.identity}
        atomic_write_bytes(self.dir / PARTIAL_EPISODES, jsonl_bytes([header, *replay]), durable=False)
        self._episodes = open(self.dir / PARTIAL_EPISODES, "a", encoding="utf-8")
        self._pending, self._flush_at = [], time.monotonic() + FLUSH_EVERY_S

    def append(self, record: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> None:
        """Log one episode as it finishes (the loop's `on_episode`), written with its batch (module
        docstring). `events`, and the record's sample (`record.SAMPLE`: what its prompt held),
        are rebuilt by replay on resume, so neither is written: Append-Only's evidence alone would make
        the partial log several times the size of the finished stream."""
        assert self._episodes is not None, "StreamLog.open() first"
        line = dict(record)  # a copy less its few sample keys: a third of filtering every key
        for key in _SAMPLE:
            line.pop(key, None)
        self._pending.append(dumps(line))
        if len(self._pending) >= FLUSH_EVERY or time.monotonic() >= self._flush_at:
            self.flush()

    @_one_line
    def flush(self) -> None:
        """Write the episodes appended so far (whole lines only) and hand them to the OS."""
        pending, self._pending = self._pending, []  # written or lost, never written twice
        self._flush_at = time.monotonic() + FLUSH_EVERY_S
        if self._episodes is not None and pending:
            pending.append("")
            self._episodes.write("\n".join(pending))
            self._episodes.flush()

    @_one_line
    def close(self) -> None:
        """Write what is pending and close the partial log (the run calls it however the stream ends)."""
        episodes = self._episodes
        if episodes is None:
            return
        try:
            self.flush()
        finally:
            self._episodes = None  # closed once, even when the disk is full
            episodes.close()

    @_one_line
    def finish(
        self,
        records: Sequence[Mapping[str, Any]],
        events: Sequence[Mapping[str, Any]],
        meta: Mapping[str, Any],
    ) -> None:
        """Write the final files with their checksums (meta.json last: the completeness mark) and drop
        the partial log."""
        self.close()
        episodes, archive = parquet_bytes(records), jsonl_bytes(events)
        atomic_write_bytes(self.dir / EPISODES, episodes)
        atomic_write_bytes(self.dir / ARCHIVE, archive)
        full = {
            **meta,
            "identity": self.identity,
            "fingerprint": self.fingerprint,
            "n_episodes": len(records),
            "n_events": len(events),
            "files": {
                EPISODES: file_record(episodes, len(records)),
                ARCHIVE: file_record(archive, len(events)),
            },
        }
        atomic_write_bytes(
            self.dir / META, (json.dumps({**full, "complete": True}, indent=2, default=str) + "\n").encode()
        )
        self.discard_partial()

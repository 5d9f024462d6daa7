"""The streams a view shows, read and verified as the analysis reads them, and the ones it cannot show.

A stream is shown only if it is complete, its files match the checksums its meta.json records
(`analysis.data.logformat.verify`) and its episode columns pass the analysis' checks
(`analysis.data.load.read_episodes`); any other stream under the root is listed as skipped with the
reason, so that a tampered or half-written stream never looks valid.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from analysis.data.load import LABELS, _labels, read_episodes
from analysis.report.timeline import read_lifecycle, read_phases
from analysis.streamlog import stream as logformat
from analysis.streamlog.encoding import sha256
from analysis.view.samples import SAMPLE_COLUMNS

#: The episode columns the view shows (those a log has), besides the logged-sample ones.
SHOWN_COLUMNS = ("t", "phase", "key", "action", "correct", "success", "parse_ok", "reply", "hop_replies")
SHOWN_COLUMNS += ("error", "n_evidence")


@dataclass(frozen=True)
class Stream:
    """One stream's logs as the view needs them. `run` is its directory relative to the root, `path` the
    directory; `episodes` holds SHOWN_COLUMNS and SAMPLE_COLUMNS (those the log has) as lists, sorted
    by t (plain Python values: the page encodes every row, and pandas rows cost ten times more);
    `events` is `analysis.report.timeline.read_lifecycle`'s frame; `phases` (name, first t) in stream
    order, `end` the step after the last episode; `checksum` the sha256 of episodes.parquet as verified."""

    run: str
    path: Path
    labels: dict[str, object]
    variant: str
    episodes: dict[str, list]
    events: pd.DataFrame
    phases: list[tuple[str, int]]
    end: int
    overrides: dict[str, Any] = field(default_factory=dict)
    checksum: str = ""


@dataclass(frozen=True)
class Skipped:
    """A stream directory that is not shown, and why (one line)."""

    run: str
    reason: str


def _name(root: Path, run_dir: Path) -> str:
    return run_dir.relative_to(root).as_posix() if run_dir != root else run_dir.name


def _meta(run_dir: Path) -> dict[str, Any]:
    """The stream's meta.json, or a ValueError naming it. It is opened only if it is a regular file (a
    FIFO would block the reader until some writer came)."""
    path = run_dir / logformat.META
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise ValueError(f"{path}: unreadable ({exc.strerror or exc})") from None
    if not stat.S_ISREG(mode):
        raise ValueError(f"{path}: not a regular file")
    return logformat.load_meta(run_dir)


#: The widest value of a lifecycle event's `t` and `id` (they are int64 columns).
_INT64 = range(-(2**63), 2**63)


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def check_archive(run_dir: Path) -> None:
    """A ValueError naming archive.jsonl and its line when a line is not a JSON object whose `t` and
    `id` are integers (int64) and `state` a text, as the lifecycle reader needs them (a log with valid
    checksums is still untrusted)."""
    path = run_dir / logformat.ARCHIVE
    try:
        data = logformat.read_file(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ValueError(f"{path}: unreadable ({exc.strerror or exc})") from None
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            event = json.loads(line, parse_constant=_refuse_constant)
        except RecursionError:
            raise ValueError(f"{path}: line {number}: nested too deeply") from None
        except ValueError as exc:
            raise ValueError(f"{path}: line {number}: not JSON ({str(exc).splitlines()[0]})") from None
        if not isinstance(event, dict):
            raise ValueError(f"{path}: line {number}: not a JSON object")
        for name in ("t", "id"):
            value = event.get(name)
            if value is not None and not (
                isinstance(value, int) and not isinstance(value, bool) and value in _INT64
            ):
                shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
                raise ValueError(f"{path}: line {number}: {name} is {shown}, not an integer (int64)")
        if event.get("state") is not None and not isinstance(event.get("state"), str):
            raise ValueError(f"{path}: line {number}: state is not a text")


def read_stream(root: Path, run_dir: Path) -> Stream | Skipped:
    """One stream directory (under `root`) read and checked, or why it cannot be shown."""
    name = _name(root, run_dir)
    try:
        meta = _meta(run_dir)
    except ValueError as exc:
        return Skipped(name, str(exc))
    problem = logformat.verify(run_dir, meta)  # as the analysis: no checksums, no trust
    if problem is not None:
        return Skipped(name, problem)
    try:
        check_archive(run_dir)
        checked, _ = read_episodes(run_dir)
        if checked.num_rows == 0:
            return Skipped(name, "no episodes")
        labels = _labels(checked, name)
        path = run_dir / logformat.EPISODES
        present = pq.ParquetFile(path).schema_arrow.names
        episodes = _episodes(pq.read_table(path, columns=_columns(present)))
        events = read_lifecycle(run_dir)
        phases, end = read_phases(run_dir)
    except (ValueError, OSError, TypeError, OverflowError, RecursionError, pa.ArrowException) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else repr(exc)
        return Skipped(name, reason)
    variant = str(meta.get("variant") or "")
    overrides = meta.get("overrides")
    overrides = {str(k): v for k, v in overrides.items()} if isinstance(overrides, dict) else {}
    checksum = meta["files"][logformat.EPISODES]["sha256"]  # verified above
    return Stream(name, run_dir, labels, variant, episodes, events, phases, end, overrides, checksum)


def _columns(present: list[str]) -> list[str]:
    """The episode columns the view reads, of those a log has."""
    return [c for c in (*SHOWN_COLUMNS, *SAMPLE_COLUMNS) if c in present]


def _episodes(table: pa.Table, rows: Sequence[int] | None = None) -> dict[str, list]:
    """The columns of an episodes table sorted by t (the rows at those positions only, when given)."""
    table = table.sort_by("t")
    return (table if rows is None else table.take(rows)).to_pydict()


def read_rows(stream: Stream, rows: Sequence[int]) -> dict[str, list]:
    """The episode columns of `stream` at `rows` (positions in t order), read again: a page holds one
    stream's logs at a time. Read from the file as it was verified, or a ValueError."""
    path = stream.path / logformat.EPISODES
    try:
        data = logformat.read_file(path)
    except OSError as exc:
        raise ValueError(f"{path}: unreadable ({exc.strerror or exc})") from None
    if sha256(data) != stream.checksum:
        raise ValueError(f"{path}: changed while the page was being written; run it again")
    file = pq.ParquetFile(pa.BufferReader(data))
    return _episodes(file.read(columns=_columns(file.schema_arrow.names)), rows)


def find_streams(root: str | Path) -> tuple[list[Path], list[Skipped]]:
    """The complete stream directories under `root` (or `root` itself when it is one), sorted, and the
    others as skipped: incomplete, or with a meta.json that cannot be read (not a regular file, not a
    JSON object, nested too deeply), each with its reason. A ValueError when `root` holds no stream."""
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"{root}: not a directory")
    found = sorted(
        p.parent for p in root.rglob(logformat.META) if not logformat.is_aside(p.parent.relative_to(root))
    )
    if not found:
        raise ValueError(f"{root}: no stream logs under it (no {logformat.META})")
    incomplete = "incomplete (meta.json does not mark it complete)"
    complete, skipped = [], []
    for run_dir in found:
        try:
            meta = _meta(run_dir)
        except ValueError as exc:
            skipped.append(Skipped(_name(root, run_dir), str(exc)))
            continue
        if meta.get("complete") is True:
            complete.append(run_dir)
        else:
            skipped.append(Skipped(_name(root, run_dir), incomplete))
    return complete, skipped


def order(stream: Stream) -> tuple:
    """The order of streams in the page: by labels, configuration variant, then seed."""
    return (*(str(stream.labels[n]) for n in LABELS[:3]), stream.variant, stream.labels["seed"], stream.run)

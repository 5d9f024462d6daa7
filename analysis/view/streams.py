"""The streams a view shows, read and verified as the analysis reads them, and the ones it cannot show.

A stream is shown only if it is complete, its files match the checksums its meta.json records
(`analysis.data.logformat.verify`) and its episode columns pass the analysis' checks
(`analysis.data.load.read_episodes`); any other stream under the root is listed as skipped with the
reason, so that a tampered or half-written stream never looks valid.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from analysis.data import logformat
from analysis.data.load import LABELS, _labels, find_runs, read_episodes
from analysis.report.timeline import read_lifecycle, read_phases
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
    order, `end` the step after the last episode."""

    run: str
    path: Path
    labels: dict[str, object]
    variant: str
    episodes: dict[str, list]
    events: pd.DataFrame
    phases: list[tuple[str, int]]
    end: int


@dataclass(frozen=True)
class Skipped:
    """A stream directory that is not shown, and why (one line)."""

    run: str
    reason: str


def _name(root: Path, run_dir: Path) -> str:
    return run_dir.relative_to(root).as_posix() if run_dir != root else run_dir.name


def read_stream(root: Path, run_dir: Path) -> Stream | Skipped:
    """One stream directory (under `root`) read and checked, or why it cannot be shown."""
    name = _name(root, run_dir)
    meta = logformat.read_meta(run_dir) or {}
    problem = logformat.verify(run_dir, meta)  # as the analysis: no checksums, no trust
    if problem is not None:
        return Skipped(name, problem)
    try:
        checked, _ = read_episodes(run_dir)
        if checked.num_rows == 0:
            return Skipped(name, "no episodes")
        labels = _labels(checked, name)
        path = run_dir / logformat.EPISODES
        present = pq.ParquetFile(path).schema_arrow.names
        columns = [c for c in (*SHOWN_COLUMNS, *SAMPLE_COLUMNS) if c in present]
        episodes = pq.read_table(path, columns=columns).sort_by("t").to_pydict()
        events = read_lifecycle(run_dir)
        phases, end = read_phases(run_dir)
    except (ValueError, OSError, pa.ArrowException) as exc:  # a JSON error is a ValueError
        reason = str(exc).splitlines()[0] if str(exc) else repr(exc)
        return Skipped(name, reason)
    variant = str(meta.get("variant") or "")
    return Stream(name, run_dir, labels, variant, episodes, events, phases, end)


def find_streams(root: str | Path) -> tuple[list[Path], list[Skipped]]:
    """The complete stream directories under `root` (or `root` itself when it is one), sorted, and the
    incomplete ones as skipped. A ValueError when `root` holds no stream at all."""
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"{root}: not a directory")
    found = sorted(
        p.parent for p in root.rglob(logformat.META) if not logformat.is_aside(p.parent.relative_to(root))
    )
    if not found:
        raise ValueError(f"{root}: no stream logs under it (no {logformat.META})")
    complete = set(find_runs(root))
    incomplete = "incomplete (meta.json does not mark it complete)"
    skipped = [Skipped(_name(root, d), incomplete) for d in found if d not in complete]
    return [d for d in found if d in complete], skipped


def order(stream: Stream) -> tuple:
    """The order of streams in the page: by labels, configuration variant, then seed."""
    return (*(str(stream.labels[n]) for n in LABELS[:3]), stream.variant, stream.labels["seed"], stream.run)

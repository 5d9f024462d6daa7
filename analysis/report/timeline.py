"""Lifecycle timelines from one stream's logs: every precedent of a key over time, coloured by state.

Read from `archive.jsonl` alone (every lifecycle event carries the precedent's id, key, value, counts
and its state after the event: the vocabulary of `analysis.streamlog.events`, which any memory that
logs events keeps, not only TEPA's) and the phase labels of `episodes.parquet`, so drawing needs no harness.
A precedent's bar runs from its creation to the end of the stream, each stretch in the colour of the
state it was in (hypothesis, active, revoked); re-promotions are marked, phase boundaries drawn. The
transcript viewer reads the events and phases without drawing: matplotlib is imported only to draw.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import pyarrow.parquet as pq

from analysis.streamlog.events import FIELDS, STATES

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

STATE_COLORS = dict(zip(STATES, ("#bdbdbd", "#2ca02c", "#d62728"), strict=True))
EVENT_COLUMNS = list(FIELDS)
_LABEL_CHARS = 40


def read_lifecycle(run_dir: str | Path) -> pd.DataFrame:
    """The lifecycle events of one stream (EVENT_COLUMNS, in log order; no rows for a method that logs
    none; rows that name no precedent or no known state are skipped). Keys are compared as the text the
    log holds. A line that is not JSON raises ValueError."""
    path = Path(run_dir) / "archive.jsonl"
    rows = []
    if path.is_file():
        with path.open(encoding="utf-8") as lines:
            rows = [json.loads(line) for line in lines if line.strip()]
    frame = pd.DataFrame(rows, columns=EVENT_COLUMNS).dropna(subset=["t", "id", "key", "state"])
    frame = frame[frame["state"].isin(STATES)].astype({"t": "int64", "id": "int64"})
    frame["key"] = frame["key"].astype(str)
    return frame.reset_index(drop=True)


def read_phases(run_dir: str | Path) -> tuple[list[tuple[str, int]], int]:
    """(phase, first step) of every phase in stream order, and the step after the last episode."""
    table = pq.read_table(Path(run_dir) / "episodes.parquet", columns=["t", "phase"]).to_pandas()
    first = table.groupby("phase", sort=False)["t"].min().sort_values()
    return [(str(p), int(t)) for p, t in first.items()], int(table["t"].max()) + 1


def draw_timeline(
    ax: Axes,
    events: pd.DataFrame,
    key: str,
    phases: list[tuple[str, int]],
    end: int,
    *,
    until: int | None = None,
) -> int:
    """Draw the precedents of `key` on `ax` (up to step `until`, default the end); return how many."""
    stop = end if until is None else until + 1
    mine = events[(events["key"] == key) & (events["t"] < stop)]
    ids = list(dict.fromkeys(mine["id"]))
    for row, pid in enumerate(ids):
        history = mine[mine["id"] == pid]
        times = [*history["t"].tolist(), stop]
        for start, finish, state in zip(times[:-1], times[1:], history["state"], strict=True):
            ax.broken_barh([(start, max(finish - start, 0.5))], (row - 0.35, 0.7), color=STATE_COLORS[state])
        back = history[history["event"] == "repromoted"]["t"]
        ax.plot(back, [row] * len(back), marker="*", ms=9, ls="none", color="#1f1f1f")
    for i, (phase, start) in enumerate(phases):
        if i:
            ax.axvline(start, color="#555555", lw=0.8)
        ax.text(start, 1.01, " " + phase.replace("_", " "), transform=ax.get_xaxis_transform(), fontsize=8)
    values = [str(mine[mine["id"] == pid]["value"].iloc[0]) for pid in ids]
    ax.set_yticks(range(len(ids)), [_short(v) for v in values], fontsize=8)
    ax.set_ylim(-0.7, max(len(ids), 1) - 0.3)
    ax.set_xlim(0, end)
    return len(ids)


def legend_handles() -> list[Patch | Line2D]:
    """Patches for the three states and the re-promotion marker."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    patches: list[Patch | Line2D] = [Patch(color=c, label=s) for s, c in STATE_COLORS.items()]
    marker = Line2D([], [], marker="*", ms=9, ls="none", color="#1f1f1f", label="re-promoted")
    return [*patches, marker]


def busiest_key(events: pd.DataFrame) -> str | None:
    """The key with the most re-promotions, then the most lifecycle events, then the smallest key text:
    where the mechanism shows most. None without events."""
    counts = events.groupby("key").size()
    if counts.empty:
        return None
    back = events[events["event"] == "repromoted"].groupby("key").size()
    return str(sorted(counts.index, key=lambda k: (-back.get(k, 0), -counts[k], k))[0])


def _short(text: str) -> str:
    return text if len(text) <= _LABEL_CHARS else text[: _LABEL_CHARS - 1] + "…"

"""One page per experiment beside results/README.md (`<experiment>.md`): its tables, notes and figures,
headed by the runs they come from, so that the top page can stay short.

A table belongs to an experiment when it is computed from that experiment's runs alone (its `experiment`
field, or a per-experiment table's name); a figure, by its `experiment`. Everything else (the scorecard,
the paper tables, the references) stays on the top page. Page names are the experiment's name when it is
a plain file name that no other page of the folder uses; else a name derived from its digest, so that no
name read from a manifest writes outside the folder or over README.md.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Sequence
from pathlib import Path

from analysis.report.figures import FigureFile
from analysis.report.tables import Table, markdown_table, plain
from analysis.streamlog.atomic import SHARED, atomic_write_bytes

#: Per-experiment tables are named `<kind>_<experiment>`.
KINDS = ("success", "mpi", "paired", "adaptation", "cost", "memory", "sweep")
#: Pages the results folder has beside the experiments' (a report of another command, or the top page).
RESERVED = frozenset({"readme", "bench", "calibration", "sensitivity"})
_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_=+-]*")
_UNESCAPED_BRACKET = re.compile(r"(?<!\\)((?:\\\\)*)([\[\]])")  # after an even run of backslashes


def page_name(experiment: str) -> str:
    """The file name of an experiment's page (see the module docstring)."""
    if _PLAIN.fullmatch(experiment) and experiment.lower() not in RESERVED:
        return f"{experiment}.md"
    return f"experiment-{hashlib.sha256(experiment.encode()).hexdigest()[:12]}.md"


def owner(table: Table, experiments: Collection[str]) -> str:
    """The experiment whose page holds `table` ("" for the top page)."""
    if table.experiment in experiments:
        return table.experiment
    for experiment in experiments:
        if any(table.name == f"{kind}_{experiment}" for kind in KINDS):
            return experiment
    return ""


def table_parts(table: Table, notes: Sequence[str] = ()) -> list[str]:
    """A table's markdown, its note, extra paragraphs about it, and its files."""
    base = f"tables/{table.name}"
    return [
        markdown_table(table.columns, table.rows, table.labels),
        *([plain(table.note) + "\n"] if table.note else []),
        *notes,
        f"Files: [{base}.csv]({base}.csv), [{base}.tex]({base}.tex)\n",
    ]


def figure_parts(figure: FigureFile, root: Path, level: str = "###") -> list[str]:
    """A figure's heading and image, its title inert and its alt text whole."""
    relative = figure.path.relative_to(root).as_posix()
    title = plain(figure.title)
    alt = _UNESCAPED_BRACKET.sub(r"\1\\\2", title)  # no bracket of the title ends the alt text
    return [f"{level} {title}\n", f"![{alt}]({relative})\n"]


def render_page(
    title: str,
    tables: Sequence[Table],
    figures: Sequence[FigureFile],
    root: Path,
    *,
    provenance: str,
    notes: dict[str, list[str]],
) -> str:
    """An experiment's page: where its numbers come from, then its tables (each with the notes `notes`
    holds for its name), then its figures."""
    parts = [
        f"# {plain(title)}\n",
        f"[All results](README.md) · From {plain(provenance, links=True)}.\n",
    ]
    for table in tables:
        parts += [f"## {plain(table.title)}\n", *table_parts(table, notes.get(table.name, []))]
    if figures:
        parts.append("## Figures\n")
    for figure in figures:
        parts += figure_parts(figure, root)
    return "\n".join(parts)


def write_pages(pages: dict[str, str], root: Path, removable: Collection[str] | None) -> list[str]:
    """Write each page (file name -> text) into `root`; remove the pages an earlier analysis listed
    (`removable`) that are no longer written. Returns the names written."""
    for name, text in pages.items():
        atomic_write_bytes(root / name, text.encode(), mode=SHARED)
    for stale in sorted(set(removable or ()) - set(pages)):
        if page_name(Path(stale).stem) == stale and (root / stale).is_file():
            (root / stale).unlink()
    return sorted(pages)

"""results/README.md: the summary, the scorecard, the figures a reader looks at first, the runs with a page
per experiment, and the paper's tables, with the paper's numbers kept apart from ours."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pandas as pd

from analysis.data.load import SWEEP_EXPERIMENT, experiment_variants, in_sweep
from analysis.metrics.compute import Analysis, sweep_method
from analysis.metrics.display import EXPERIMENT_ORDER, method_label, sorted_experiments, sorted_methods
from analysis.report.deployed import deployed_section
from analysis.report.figures import FigureFile
from analysis.report.pages import figure_parts, owner, page_name, render_page, table_parts
from analysis.report.tables import SCORECARD, Table, markdown_table, plain
from analysis.report.titles import config_title
from analysis.report.trials import HEADING, trial_sentences
from analysis.streamlog.atomic import SHARED, atomic_write_bytes

SIMULATED_BACKEND_NOTE = (
    "**About the backend.** The default LLM backend, `SimulatedBackend` (`llm=simulated`), is a "
    "simulated LLM: a documented behaviour model that reads the same rendered prompt a real model "
    "receives and chooses an option from the evidence lines in it (with a small lapse rate, a prior "
    "guess when there is no evidence, and weights for support, failure reports, recency and in-session "
    "hints). Its few parameters were calibrated once, for all methods and settings together, never per "
    "method. Its numbers model an LLM's reading of the memory; they are not a real LLM's results. The "
    "Backend column of the Runs table says which backend produced each experiment; run the same "
    "experiments with `llm=openai` (any OpenAI-compatible endpoint) for a real model."
)

PROVENANCE_NOTE = (
    "**Whose numbers are these.** Columns and rows labelled *paper* or *[published]* are numbers "
    "reported in the TEPA paper or in the MemoryAgentBench paper (listed with their sources in the last "
    "table). Everything else, including every column labelled *ours*, is computed by this harness from "
    "the run logs under `results/runs/`: means over seeds with 95% bootstrap confidence intervals over "
    "seeds."
)


def backend(config: dict[str, object]) -> str:
    """The LLM backend of a run from its flattened config: class name, plus the model when set."""
    found = {key.split(".")[-1]: value for key, value in config.items() if key.split(".")[-2:-1] == ["llm"]}
    name = str(found.get("_target_", "unknown")).replace(":", ".").split(".")[-1]
    return f"{name} ({found['model']})" if found.get("model") else name


def inventory(runs: pd.DataFrame) -> dict[str, list[str]]:
    """Experiment -> its row of the Runs table: which methods, backends, envs, seeds and runs the tables
    are built from (the experiment named as headings name it, `config_title`)."""
    rows = {}
    variants = experiment_variants(runs[~in_sweep(runs)])
    for experiment in sorted_experiments(runs["experiment"]):
        of = runs[runs["experiment"] == experiment]
        labels = of["memory"]
        if experiment == SWEEP_EXPERIMENT:  # labels carry grid points: name the methods instead
            labels = [sweep_method(c, m) for c, m in zip(of["config"], of["memory"], strict=True)]
        methods = ", ".join(method_label(m) for m in sorted_methods(labels))
        backends = ", ".join(sorted({backend(c) for c in of["config"]}))
        counts = [str(of["env"].nunique()), str(of["seed"].nunique()), str(len(of))]
        rows[experiment] = [config_title(experiment, variants), methods, backends, *counts]
    return rows


def _inventory(rows: dict[str, list[str]], pages: dict[str, str], provenance: dict[str, str]) -> str:
    """The Runs table: each experiment's row, its page and where its numbers come from."""
    ordered = [
        [*rows[e], f"[{pages[e][:-3]}]({pages[e]})" if e in pages else "", provenance.get(e, "")]
        for e in sorted_experiments(rows)
    ]
    columns = ["Experiment", "Methods", "Backend", "Envs", "Seeds", "Runs", "Page", "From"]
    return markdown_table(columns, ordered, labels=3)


#: What the scorecard's rows beyond the paper come from (the map names its runs on its own page).
MAP_SOURCE = "runs of robustness_map (map/README.md; commit and date not recorded)"


def _with_sources(card: Table, provenance: dict[str, str]) -> Table:
    """The scorecard with a last column saying which runs each row comes from."""
    sources = [provenance.get(e, MAP_SOURCE) for e in card.data["experiment"]]
    rows = [[*row, source] for row, source in zip(card.rows, sources, strict=True)]
    return replace(card, columns=[*card.columns, "From (runs)"], rows=rows)


#: Figures a reader looks at first, on the top page as well as their experiment's: how success moves
#: over each paper stream.
FIRST_LOOK = "success_over_time_"


def _first_look(figure: FigureFile, pages: dict[str, str]) -> bool:
    return figure.experiment not in pages or (
        figure.path.name.startswith(FIRST_LOOK) and figure.experiment in EXPERIMENT_ORDER
    )


def render_report(
    tables: Sequence[Table],
    figures: Sequence[FigureFile],
    runs: dict[str, list[str]],
    root: Path,
    *,
    backend_note: str = SIMULATED_BACKEND_NOTE,
    sections: Sequence[str] = (),
    summary: Sequence[str] = (),
    pages: dict[str, str] | None = None,
    provenance: dict[str, str] | None = None,
    notes: dict[str, list[str]] | None = None,
) -> str:
    """The top page's text; `runs`: the Runs table's rows (`inventory`); paths of tables and figures are
    written relative to `root` (results/); `sections` (markdown) follow the scorecard; `summary`: the
    lines the page opens with; `pages`: experiment -> its page (whose tables and figures are left out
    here, but for the first-look figures); `provenance`: experiment -> which runs its numbers come from;
    `notes`: table name -> paragraphs set after that table."""
    pages, provenance, notes = pages or {}, provenance or {}, notes or {}
    shown = [f for f in figures if _first_look(f, pages)]
    parts = ["# Results\n"]
    if summary:
        parts += ["## Summary\n", "\n".join([*summary, _contents(root, pages, bool(shown))]) + "\n"]
    parts += [
        "Regenerate everything on this page from the run logs with `python -m analysis --runs "
        "results/runs --out results` (`make figures`); tables are also in `tables/` as CSV and LaTeX, and "
        "each experiment's tables and figures are on its own page (the Runs table links them).\n",
        PROVENANCE_NOTE + "\n",
        backend_note + "\n",
    ]
    for table in (t for t in tables if t.name == SCORECARD):  # what reproduces, before anything else
        table = _with_sources(table, provenance) if provenance else table
        parts += [f"## {plain(table.title)}\n", *table_parts(table, notes.get(table.name, []))]
    if shown:
        parts.append("## Figures\n")
    for figure in shown:
        parts += figure_parts(figure, root)
    parts += ["## Runs\n", _inventory(runs, pages, provenance), *sections, "## Tables\n"]
    for table in tables:
        if table.name != SCORECARD and owner(table, pages) == "":
            parts += [f"### {plain(table.title)}\n", *table_parts(table, notes.get(table.name, []))]
    return "\n".join(parts + _companions(root))


def _contents(root: Path, pages: dict[str, str], figures: bool) -> str:
    """The summary's last line: links to the sections of the page, every experiment's page and the
    reports of other commands that are there."""
    links = ["[scorecard](#reproduction-scorecard)", *(["[figures](#figures)"] if figures else [])]
    links += ["[runs](#runs)", "[paper tables](#tables)"]
    links += [f"[{pages[e][:-3]}]({pages[e]})" for e in sorted_experiments(pages)]
    others = (("map/README.md", "robustness map"), ("deployed/README.md", "deployed retrieval"))
    others += (("calibration.md", "calibration"), ("sensitivity.md", "sensitivity"), ("bench.md", "bench"))
    links += [f"[{label}]({name})" for name, label in others if (root / name).is_file()]
    return "- **Pages:** " + " · ".join(links)


def table_notes(
    analysis: Analysis, tables: Sequence[Table], outcomes: pd.DataFrame, sources: dict[str, str]
) -> dict[str, list[str]]:
    """Table name -> the paragraphs set after it: which runs each paper table comes from (`sources`:
    experiment -> text), and why TEPA-Full equals TEPA-Rev, under the success table of each experiment
    and the drift table, where it does (`outcomes`: `trials.trial_outcomes`)."""
    notes: dict[str, list[str]] = {}
    for table in tables:
        if table.name.startswith("paper_") and table.name != "paper_numbers" and "experiment" in table.data:
            named = [e for e in sorted_experiments(table.data["experiment"].dropna()) if e in sources]
            if named:
                notes[table.name] = ["From " + "; ".join(f"{e}: {sources[e]}" for e in named) + ".\n"]
    for experiment in sorted_experiments(analysis.success["experiment"]) if len(analysis.success) else []:
        sentences = " ".join(trial_sentences(analysis, experiment, outcomes))
        if sentences:
            notes.setdefault(f"success_{experiment}", []).extend([f"### {HEADING}\n", sentences + "\n"])
            notes.setdefault("paper_drift", []).append(sentences + "\n")
    return notes


def render_pages(
    tables: Sequence[Table],
    figures: Sequence[FigureFile],
    root: Path,
    *,
    titles: dict[str, str],
    provenance: dict[str, str],
    notes: dict[str, list[str]],
) -> dict[str, str]:
    """Page name -> text of each experiment's page (`titles`: experiment -> its heading)."""
    return {
        page_name(e): render_page(
            titles[e],
            [t for t in tables if owner(t, titles) == e],
            [f for f in figures if f.experiment == e],
            root,
            provenance=provenance.get(e, "runs not recorded"),
            notes=notes,
        )
        for e in sorted_experiments(titles)
    }


def _companions(root: Path) -> list[str]:
    """Reports written by other commands into the same folder: links to the reader's calibration and
    sensitivity analysis (`make calibrate`) and the benchmark (`make bench`), the robustness map's
    findings (`make map`) and the deployed retrieval's section."""
    parts = []
    links = [f"[{name}]({name})" for name in ("calibration.md", "sensitivity.md") if (root / name).is_file()]
    if links:
        parts += [
            "## The simulated reader: calibration and sensitivity\n",
            "How the reader's parameters were calibrated, and which results change when they move: "
            + ", ".join(links)
            + ".\n",
        ]
    robustness = root / "map" / "summary.md"  # written by `make map` (python -m analysis.map)
    if robustness.is_file():
        parts += [
            "## Beyond the paper: when revocation pays (the robustness map, `make map`)\n",
            "From the runs of experiment robustness_map (`make map`; cells and seeds in "
            "[map/README.md](map/README.md); commit and date not recorded).\n",
            robustness.read_text(encoding="utf-8"),
            "Figures, tables and definitions: [map/README.md](map/README.md).\n",
        ]
    parts += deployed_section(
        root
    )  # results/deployed/, written by `python -m analysis --out results/deployed`
    if (root / "bench.md").is_file():
        parts += [
            "## Performance (`make bench`)\n",
            "Time and prompt footprint of every method, and the wall time of `make reproduce` and "
            "`make map` against their targets: [bench.md](bench.md).\n",
        ]
    return parts


def write_report(
    tables: Sequence[Table],
    figures: Sequence[FigureFile],
    runs: dict[str, list[str]],
    root: str | Path,
    *,
    backend_note: str = SIMULATED_BACKEND_NOTE,
    sections: Sequence[str] = (),
    summary: Sequence[str] = (),
    pages: dict[str, str] | None = None,
    provenance: dict[str, str] | None = None,
    notes: dict[str, list[str]] | None = None,
) -> Path:
    """Write `root`/README.md and return its path."""
    root = Path(root)
    path = root / "README.md"
    text = render_report(
        tables,
        figures,
        runs,
        root,
        backend_note=backend_note,
        sections=sections,
        summary=summary,
        pages=pages,
        provenance=provenance,
        notes=notes,
    )
    atomic_write_bytes(path, text.encode(), mode=SHARED)
    return path

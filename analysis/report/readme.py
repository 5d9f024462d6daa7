"""results/README.md: every table and figure on one page, with the paper's numbers kept apart from ours."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from analysis.data.load import SWEEP_EXPERIMENT, experiment_variants, in_sweep
from analysis.metrics.compute import sweep_method
from analysis.metrics.display import experiment_title, method_label, sorted_experiments, sorted_methods
from analysis.report.deployed import deployed_section
from analysis.report.figures import FigureFile
from analysis.report.tables import SCORECARD, Table, markdown_table, plain
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

_UNESCAPED_BRACKET = re.compile(r"(?<!\\)((?:\\\\)*)([\[\]])")  # after an even run of backslashes


def backend(config: dict[str, object]) -> str:
    """The LLM backend of a run from its flattened config: class name, plus the model when set."""
    found = {key.split(".")[-1]: value for key, value in config.items() if key.split(".")[-2:-1] == ["llm"]}
    name = str(found.get("_target_", "unknown")).replace(":", ".").split(".")[-1]
    return f"{name} ({found['model']})" if found.get("model") else name


def inventory(runs: pd.DataFrame) -> dict[str, list[str]]:
    """Experiment -> its row of the Runs table: which methods, backends, envs, seeds and runs the tables
    are built from (the experiment named with its runs' configuration variants)."""
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
        rows[experiment] = [experiment_title(experiment, variants), methods, backends, *counts]
    return rows


def _inventory(rows: dict[str, list[str]]) -> str:
    ordered = [rows[e] for e in sorted_experiments(rows)]
    return markdown_table(["Experiment", "Methods", "Backend", "Envs", "Seeds", "Runs"], ordered, labels=3)


def render_report(
    tables: Sequence[Table],
    figures: Sequence[FigureFile],
    runs: dict[str, list[str]],
    root: Path,
    *,
    backend_note: str = SIMULATED_BACKEND_NOTE,
    sections: Sequence[str] = (),
) -> str:
    """The README text; `runs`: the Runs table's rows (`inventory`); paths of tables and figures are
    written relative to `root` (results/); `sections` (markdown) follow the scorecard."""
    parts = [
        "# Results\n",
        "Regenerate everything on this page from the run logs with `python -m analysis --runs "
        "results/runs --out results` (`make figures`); tables are also in `tables/` as CSV and LaTeX.\n",
        PROVENANCE_NOTE + "\n",
        backend_note + "\n",
    ]
    first = [t for t in tables if t.name == SCORECARD]
    for table in first:  # what reproduces, before anything else
        parts += [f"## {plain(table.title)}\n", *_table_parts(table)]
    parts += [*sections, "## Runs\n", _inventory(runs), "## Tables\n"]
    for table in tables:
        if table.name != SCORECARD:
            parts += [f"### {plain(table.title)}\n", *_table_parts(table)]
    if figures:
        parts.append("## Figures\n")
    for figure in figures:
        relative = figure.path.relative_to(root).as_posix()
        title = plain(figure.title)
        alt = _UNESCAPED_BRACKET.sub(r"\1\\\2", title)  # no bracket of the title ends the alt text
        parts += [f"### {title}\n", f"![{alt}]({relative})\n"]
    return "\n".join(parts + _companions(root))


def _table_parts(table: Table) -> list[str]:
    base = f"tables/{table.name}"
    return [
        markdown_table(table.columns, table.rows, table.labels),
        *([plain(table.note) + "\n"] if table.note else []),
        f"Files: [{base}.csv]({base}.csv), [{base}.tex]({base}.tex)\n",
    ]


def _companions(root: Path) -> list[str]:
    """Reports written by other commands into the same folder: the benchmark table (`make bench`)
    verbatim, links to the reader's calibration and sensitivity analysis (`make calibrate`), and the
    robustness map's findings (`make map`)."""
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
            robustness.read_text(encoding="utf-8"),
            "Figures, tables and definitions: [map/README.md](map/README.md).\n",
        ]
    parts += deployed_section(
        root
    )  # results/deployed/, written by `python -m analysis --out results/deployed`
    bench = root / "bench.md"
    if bench.is_file():
        parts.append(bench.read_text(encoding="utf-8"))
    return parts


def write_report(
    tables: Sequence[Table],
    figures: Sequence[FigureFile],
    runs: dict[str, list[str]],
    root: str | Path,
    *,
    backend_note: str = SIMULATED_BACKEND_NOTE,
    sections: Sequence[str] = (),
) -> Path:
    """Write `root`/README.md and return its path."""
    root = Path(root)
    path = root / "README.md"
    text = render_report(tables, figures, runs, root, backend_note=backend_note, sections=sections)
    atomic_write_bytes(path, text.encode(), mode=SHARED)
    return path

"""results/README.md: every table and figure on one page, with the paper's numbers kept apart from ours."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from analysis.data.load import SWEEP_EXPERIMENT
from analysis.metrics import method_label, sorted_experiments, sorted_methods, sweep_method
from analysis.report.figures import FigureFile
from analysis.report.tables import SCORECARD, Table, markdown_table

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


def _inventory(runs: pd.DataFrame) -> str:
    """Which experiments, methods, seeds and backends the tables are built from."""
    rows = []
    for experiment in sorted_experiments(runs["experiment"]):
        of = runs[runs["experiment"] == experiment]
        labels = of["memory"]
        if experiment == SWEEP_EXPERIMENT:  # labels carry grid points: name the methods instead
            labels = [sweep_method(c, m) for c, m in zip(of["config"], of["memory"], strict=True)]
        methods = ", ".join(method_label(m) for m in sorted_methods(labels))
        backends = ", ".join(sorted({backend(c) for c in of["config"]}))
        counts = [str(of["env"].nunique()), str(of["seed"].nunique()), str(len(of))]
        rows.append([experiment, methods, backends, *counts])
    return markdown_table(["Experiment", "Methods", "Backend", "Envs", "Seeds", "Runs"], rows, labels=3)


def render_report(
    tables: Sequence[Table],
    figures: Sequence[FigureFile],
    runs: pd.DataFrame,
    root: Path,
    *,
    backend_note: str = SIMULATED_BACKEND_NOTE,
) -> str:
    """The README text; paths of tables and figures are written relative to `root` (results/)."""
    parts = [
        "# Results\n",
        "Regenerate everything on this page from the run logs with `python -m analysis --runs "
        "results/runs --out results` (`make figures`); tables are also in `tables/` as CSV and LaTeX.\n",
        PROVENANCE_NOTE + "\n",
        backend_note + "\n",
    ]
    first = [t for t in tables if t.name == SCORECARD]
    for table in first:  # what reproduces, before anything else
        parts += [f"## {table.title}\n", *_table_parts(table)]
    parts += ["## Runs\n", _inventory(runs), "## Tables\n"]
    for table in tables:
        if table.name != SCORECARD:
            parts += [f"### {table.title}\n", *_table_parts(table)]
    if figures:
        parts.append("## Figures\n")
    for figure in figures:
        relative = figure.path.relative_to(root).as_posix()
        parts += [f"### {figure.title}\n", f"![{figure.title}]({relative})\n"]
    return "\n".join(parts + _companions(root))


def _table_parts(table: Table) -> list[str]:
    base = f"tables/{table.name}"
    return [
        markdown_table(table.columns, table.rows, table.labels),
        *([table.note + "\n"] if table.note else []),
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
    bench = root / "bench.md"
    if bench.is_file():
        parts.append(bench.read_text(encoding="utf-8"))
    return parts


def write_report(
    tables: Sequence[Table],
    figures: Sequence[FigureFile],
    runs: pd.DataFrame,
    root: str | Path,
    *,
    backend_note: str = SIMULATED_BACKEND_NOTE,
) -> Path:
    """Write `root`/README.md and return its path."""
    root = Path(root)
    path = root / "README.md"
    path.write_text(render_report(tables, figures, runs, root, backend_note=backend_note), encoding="utf-8")
    return path

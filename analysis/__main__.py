"""`python -m analysis --runs results/runs --out results`: regenerate tables, figures and README.md."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from analysis.data.load import load_runs
from analysis.data.validate import check_options, check_reference
from analysis.metrics import DEFAULT_TOLERANCE, DEFAULT_WINDOW, INTERVALS, analyse
from analysis.report.ablation import ablation_table
from analysis.report.figures import make_figures
from analysis.report.readme import SIMULATED_BACKEND_NOTE, write_report
from analysis.report.tables import build_tables, write_tables

log = logging.getLogger("analysis")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m analysis", description=__doc__)
    parser.add_argument("--runs", type=Path, default=Path("results/runs"), help="root of the run logs")
    parser.add_argument(
        "--out", type=Path, default=Path("results"), help="writes tables/, figures/, README.md"
    )
    parser.add_argument("--window", type=int, default=DEFAULT_WINDOW, help="rolling window in episodes")
    parser.add_argument(
        "--tolerance", type=float, default=DEFAULT_TOLERANCE, help="adaptation: distance to the stable level"
    )
    parser.add_argument(
        "--reference",
        default=None,
        help="adaptation target: a method whose stable level every method must regain (default: its own)",
    )
    parser.add_argument(
        "--intervals",
        choices=INTERVALS,
        default=INTERVALS[0],
        help="per-phase success intervals: bootstrap over seeds (default), or seeds and then episodes "
        "within each seed (two-level, shows episode-level noise)",
    )
    parser.add_argument(
        "--backend-note",
        type=Path,
        default=None,
        help="file with the README's backend paragraph (real-LLM runs)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO, format="%(message)s")
    started = time.perf_counter()
    try:  # every input is checked before anything is written (analysis.data.validate)
        check_options(args.window, args.tolerance, args.out)
        logs = load_runs(args.runs, progress=not args.quiet)
        check_reference(args.reference, set(logs.runs["memory"]))
    except ValueError as error:
        log.error("analysis: %s", error)
        return 2
    log.info(
        "loaded %d runs, %d episodes, %d archive events", len(logs.runs), len(logs.episodes), len(logs.events)
    )
    analysis = analyse(
        logs,
        window=args.window,
        tolerance=args.tolerance,
        reference=args.reference,
        intervals=args.intervals,
    )
    log.info("computed metrics")
    tables = build_tables(analysis)
    try:
        ablation = ablation_table(analysis, args.runs)
    except ValueError as error:
        log.error("analysis: %s", error)
        return 2
    if ablation is not None:
        tables.insert(-1, ablation)  # before the closing table of sources
    write_tables(tables, args.out / "tables")
    log.info("wrote %d tables to %s", len(tables), args.out / "tables")
    figures = make_figures(analysis, logs.episodes, args.out / "figures", runs=logs.runs, root=args.runs)
    log.info("wrote %d figures to %s", len(figures), args.out / "figures")
    note = (
        args.backend_note.read_text(encoding="utf-8").strip() if args.backend_note else SIMULATED_BACKEND_NOTE
    )
    readme = write_report(tables, figures, logs.runs, args.out, backend_note=note)
    log.info("wrote %s in %.1f s", readme, time.perf_counter() - started)
    return 0


if __name__ == "__main__":
    sys.exit(main())

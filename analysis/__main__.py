"""`python -m analysis --runs results/runs --out results`: regenerate tables, figures and README.md."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pandas as pd

from analysis.data.load import load_runs
from analysis.data.validate import check_options, check_reference
from analysis.metrics.compute import DEFAULT_TOLERANCE, DEFAULT_WINDOW, INTERVALS, analyse
from analysis.report import manifest, provenance
from analysis.report.ablation import ablation_table
from analysis.report.figures import (
    Drawing,
    Job,
    import_matplotlib,
    mpi_jobs,
    report_order,
    success_jobs,
    sweep_jobs,
    timeline_jobs,
    write_figures,
)
from analysis.report.memory_report import memory_jobs, memory_tables, section
from analysis.report.pages import page_name, write_pages
from analysis.report.readme import SIMULATED_BACKEND_NOTE, inventory, render_pages, table_notes, write_report
from analysis.report.summary import summary_lines
from analysis.report.tables import SCORECARD, Table, build_tables, write_tables
from analysis.report.titles import config_title, retitle
from analysis.report.trials import trial_outcomes
from analysis.selection import experiments_under, selection, unmatched
from analysis.streamlog.atomic import refuse_special

log = logging.getLogger("analysis")
#: Where `python -m analysis` writes by default: beside the committed results, never over them (the
#: committed ones are rebuilt by `make figures`, which names `--out results`).
DEFAULT_OUT = Path("results/report")


#: Drawing processes: two, one per core, so the figures drawn from the logs alone are done while this
#: process computes the metrics, and the logs are read in both (`load_runs`' readers).
DRAWERS = 2


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m analysis", description=__doc__)
    parser.add_argument("--runs", type=Path, default=Path("results/runs"), help="root of the run logs")
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help=f"writes tables/, figures/, README.md, manifest.json (default {DEFAULT_OUT}, apart from the "
        "committed results); results of experiments absent from --runs are kept",
    )
    parser.add_argument(
        "--replace",
        action="store_true",
        help="write --out from --runs alone: drop the results of experiments absent from --runs and "
        "replace those computed from runs that --runs lacks",
    )
    parser.add_argument(
        "--experiments",
        nargs="+",
        default=[],
        metavar="NAME",
        help="analyse only these experiments of --runs (shell patterns such as 'try_*'); with --listed-in, "
        "these as well; every pattern must match an experiment",
    )
    parser.add_argument(
        "--listed-in",
        type=Path,
        default=None,
        metavar="DIR",
        help="analyse only the experiments DIR's manifest.json lists (make figures: --listed-in results)",
    )
    parser.add_argument(
        "--not-listed-in",
        type=Path,
        default=None,
        metavar="DIR",
        help="leave out the experiments DIR's manifest.json lists (make figures writes the others to "
        "results/report)",
    )
    parser.add_argument(
        "--others-to",
        type=Path,
        default=None,
        metavar="DIR",
        help="with --listed-in: first analyse the experiments its manifest does not list into DIR, as "
        "--out DIR --not-listed-in would, in the same process (make figures: --others-to results/report)",
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
    args = parser.parse_args(argv)
    if args.others_to is not None and (args.listed_in is None or args.experiments or args.not_listed_in):
        parser.error("--others-to needs --listed-in, without --experiments or --not-listed-in")
    return args


def passes(args: argparse.Namespace) -> list[argparse.Namespace]:
    """The analyses one invocation runs: with `--others-to`, the experiments `--listed-in`'s manifest
    does not list into that folder first (before this analysis rewrites the manifest), then the listed
    ones. One process for both pays the imports once: `make figures` ran two, and the first, which has
    nothing to do after `make reproduce`, took a second of it."""
    if args.others_to is None:
        return [args]
    others = {"out": args.others_to, "listed_in": None, "not_listed_in": args.listed_in, "others_to": None}
    return [argparse.Namespace(**(vars(args) | others)), args]


def _start_drawing(parent: int) -> None:
    """In a drawing process: ignore Ctrl-C (the parent handles it) and end as soon as the parent is
    gone, even killed without a chance to stop it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


@contextmanager
def drawing_process(workers: int = 1) -> Iterator[Executor]:
    """Processes (`workers` of them) that draw figures while this one computes the metrics and tables.

    Started at once, before any log is read: where the platform forks (Linux) they start with this
    process' modules loaded. The first imports matplotlib, which this process imports only if it draws
    too (`collect`), while the others start reading logs for this one (`load_runs`' readers): they import
    it at their first figure, when they have time to spare while this one computes the metrics.
    They ignore Ctrl-C, which this process handles: on any way out of the block the jobs not started
    are cancelled, and the block ends once the workers have stopped (they also stop when this process
    is killed).
    """
    pool = ProcessPoolExecutor(workers, initializer=_start_drawing, initargs=(os.getpid(),))
    try:
        pool.submit(import_matplotlib)
        yield pool
    finally:
        pool.shutdown(cancel_futures=True)


def submit(pool: Executor, jobs: list[Job]) -> list[tuple[Job, Future]]:
    """Hand `jobs` to the drawing process; each with its future, for `collect`."""
    return [(job, pool.submit(job)) for job in jobs]


def collect(submitted: list[tuple[Job, Future]]) -> list[Drawing | None]:
    """The drawings of the submitted jobs, in their order. The jobs the drawing process has not started
    yet are drawn here instead (their futures cancel), from the end of the list since it takes them
    from the front: both processes draw until the last figure."""
    here = {i: job() for i, (job, future) in reversed(list(enumerate(submitted))) if future.cancel()}
    return [here[i] if i in here else future.result() for i, (_, future) in enumerate(submitted)]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO, format="%(message)s")
    try:
        for one in passes(args):
            with drawing_process(DRAWERS) as drawing:
                code = report(one, drawing)
            if code:
                return code
        return 0
    except KeyboardInterrupt:
        print("analysis: interrupted (Ctrl-C); the outputs written so far are whole files", file=sys.stderr)
        return 130


def report(args: argparse.Namespace, drawing: Executor) -> int:
    """Check every input, then compute and write tables, figures, README.md and the manifest; the exit
    code.

    The figures are drawn by `drawing` meanwhile (those that need only the logs while the metrics are
    computed) and written here, like everything else, only once every check has passed. Results of
    experiments absent from the runs are kept (`analysis.report.manifest`).
    """
    started = time.perf_counter()
    options = {"window": args.window, "tolerance": args.tolerance, "reference": args.reference}
    options |= {"intervals": args.intervals}
    try:  # every input is checked before anything is written (analysis.data.validate)
        check_options(args.window, args.tolerance, args.out)
        check_outputs(args.out)
        note = read_note(args.backend_note) if args.backend_note else SIMULATED_BACKEND_NOTE
        chosen = selection(args.experiments, args.listed_in, args.not_listed_in)
        if chosen is not None:
            present = experiments_under(args.runs)
            if missing := unmatched(args.experiments, present):
                raise ValueError(f"--experiments: no runs of {', '.join(missing)} under {args.runs}")
            if not any(map(chosen, present)):
                log.info("analysis: no runs of the chosen experiments under %s: %s is left as it is",
                         args.runs, args.out)  # fmt: skip
                return 0
        logs = load_runs(args.runs, progress=not args.quiet, experiments=chosen, readers=drawing)
        check_reference(args.reference, set(logs.runs["memory"]))
        kept = manifest.keep(args.out, logs.runs, options, replace=args.replace)
    except ValueError as error:
        log.error("analysis: %s", error)
        return 2
    if kept.dropped:
        log.warning(
            "analysis: --replace drops the results in %s of %s (no runs of them under %s)",
            args.out,
            ", ".join(kept.dropped),
            args.runs,
        )
    if kept.experiments:
        log.warning(
            "analysis: kept the results in %s of %s (no runs of them under %s; --replace drops them)",
            args.out,
            ", ".join(kept.experiments),
            args.runs,
        )
    events = logs.events["count"].sum()
    log.info("loaded %d runs, %d episodes, %d archive events", len(logs.runs), len(logs.episodes), events)
    from_logs = submit(drawing, success_jobs(logs.episodes, logs.runs, args.window))
    from_memory = submit(drawing, memory_jobs(logs.episodes, logs.runs, args.window))
    timelines = submit(drawing, timeline_jobs(logs.runs, logs.events, args.runs))
    from_metrics: list[tuple[Job, Future]] = []  # the MPI bars, handed over before the other metrics exist

    def draw_mpi(mpi: pd.DataFrame, phases: dict, variants: dict) -> None:
        from_metrics.extend(submit(drawing, mpi_jobs(mpi, phases, variants)))

    fresh = analyse(
        logs,
        window=args.window,
        tolerance=args.tolerance,
        reference=args.reference,
        intervals=args.intervals,
        mpi_ready=draw_mpi,
    )
    log.info("computed metrics")
    from_metrics += submit(drawing, sweep_jobs(fresh))
    analysis = manifest.merge(fresh, kept)
    records = provenance.from_runs(logs.runs, provenance.analysis_commit(), provenance.today())
    records = provenance.settled(records, kept, analysis)
    sources = provenance.sources(records, kept)
    tables = build_tables(analysis, args.out)
    try:
        ablation = ablation_table(fresh, args.runs)
    except ValueError as error:
        log.error("analysis: %s", error)
        return 2
    extras = ([ablation] if ablation is not None else []) + manifest.kept_tables(kept)
    tables[-1:-1] = sorted(extras, key=lambda t: t.name)  # before the closing table of sources
    tables[-1:-1] = memory_tables(analysis)
    write_tables(tables, args.out / "tables", kept.removable_tables)
    log.info("wrote %d tables to %s", len(tables), args.out / "tables")
    # what needs no figure first, while the drawing process draws
    rows = inventory(logs.runs) | {
        e: [config_title(e, analysis.variants), *entry["inventory"][1:]]
        for e, entry in kept.experiments.items()
    }
    outcomes = pd.concat(
        [trial_outcomes(fresh.costs, logs.events), *manifest.kept_frames(kept, "trial_outcomes")],
        ignore_index=True,
    )
    notes = table_notes(analysis, tables, outcomes, sources)
    titles = {e: row[0] for e, row in rows.items()}
    summary = summary_lines(tables, analysis, page_name)
    drawings = collect(from_logs + from_memory + from_metrics + timelines)
    figures = write_figures(drawings, args.out / "figures", kept.removable_figures)
    figures = report_order(figures + manifest.kept_figures(kept, args.out / "figures"))
    figures = [replace(f, title=retitle(f.title, f.experiment, analysis.variants)) for f in figures]
    log.info("wrote %d figures to %s", len(figures), args.out / "figures")
    pages = render_pages(tables, figures, args.out, titles=titles, provenance=sources, notes=notes)
    written = write_pages(pages, args.out, kept.removable_pages)
    readme = write_report(
        tables,
        figures,
        rows,
        args.out,
        backend_note=note,
        sections=[section(analysis, sources)],
        summary=summary,
        pages={e: page_name(e) for e in titles},
        provenance=sources,
        notes=notes,
    )
    manifest.write_manifest(
        args.out,
        analysis,
        logs.runs,
        rows,
        tables,
        extras,
        figures,
        kept,
        options,
        provenance=records,
        outcomes=outcomes,
        pages=written,
    )
    log.info("wrote %s in %.1f s", readme, time.perf_counter() - started)
    log.info("%s; open %s", tally(tables), readme)
    return 0


def tally(tables: list[Table]) -> str:
    """The scorecard's verdicts counted, for the last line a run of `make reproduce` prints."""
    card = next((t for t in tables if t.name == SCORECARD), None)
    if card is None or card.data.empty:
        return "scorecard: no paper number computed"
    counts = card.data["verdict"].value_counts()
    return f"scorecard: {len(card.data)} rows, " + ", ".join(f"{n} {v}" for v, n in counts.items())


def check_outputs(out: Path) -> None:
    """What the analysis writes in `out` must be folders and regular files where they exist: a
    ValueError names one that is not (a README.md that is a folder, a tables/ that is a FIFO)."""
    for name in ("tables", "figures"):
        if (out / name).exists() and not (out / name).is_dir():
            raise ValueError(f"--out {out}: {out / name} exists and is not a folder")
    for name in ("README.md", manifest.MANIFEST):
        refuse_special(out / name, "--out")


def read_note(path: Path) -> str:
    """The README's backend paragraph from `--backend-note`: a ValueError names a file it cannot read,
    before anything is written."""
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ValueError(f"--backend-note {path}: unreadable ({reason})") from None


def exit_now(code: int) -> None:
    """End the process with `code` once the logs and standard streams are flushed, without the
    interpreter's teardown: unwinding pandas', Arrow's and matplotlib's modules took a fifth of a
    second after every output was written (each file is already whole: written atomically)."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())

"""What an output folder holds, per experiment, and from which runs: the analysis never removes results
it did not compute.

Every analysis writes `manifest.json` beside README.md: for each experiment, the runs its results were
computed from, its summary frames (exact: JSON keeps every float's repr), its Runs-table row, the
names and titles of its tables and figures, its provenance (the commit that ran its runs and when, and
the commit and day of the analysis that wrote the entry: `analysis.report.provenance`) and the trial
outcomes of the methods that ran trials (`analysis.report.trials`). A later analysis of other runs
into the same folder *keeps* the results of every experiment it has no runs of: their tables are
rebuilt from the stored frames (byte for byte what a full analysis gives), their figures stay as they
are, and the scorecard, the paper tables and README.md cover them as before, the pages saying they are
kept and from where. It refuses, with one line naming `--replace`, to
recompute an experiment from runs that lack some of the ones its results came from (the user's own
subset of a paper experiment would otherwise replace the full one), or to mix results computed with
other options. `--replace` writes the folder from the given runs alone, as if it were empty. Files the
analysis did not list in a manifest (a folder written before manifests existed) are never removed.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from analysis.metrics.compute import Analysis
from analysis.report.figures import FigureFile
from analysis.report.tables import Table
from analysis.streamlog.atomic import SHARED, atomic_write_bytes
from analysis.streamlog.stream import read_file

log = logging.getLogger("analysis")
MANIFEST = "manifest.json"
VERSION = 1
#: The Analysis frames the tables are built from, stored per experiment (they all have `experiment`).
FRAMES = ("success", "mpi", "paired", "adaptation", "cost_summary", "sweep", "departures", "memory")


@dataclass(frozen=True)
class Kept:
    """The manifest entries of the experiments whose results stay (none without a manifest), and which
    files the analysis may remove when it no longer makes them (None: any, as with `--replace`)."""

    experiments: dict[str, dict]
    removable_tables: frozenset[str] | None
    removable_figures: frozenset[str] | None
    #: The experiments whose results `--replace` drops (the manifest's, absent from the runs).
    dropped: tuple[str, ...] = ()
    #: The experiment pages the analysis may remove when it no longer writes them.
    removable_pages: frozenset[str] = frozenset()
    #: The manifest's entries of the experiments this analysis recomputes (`same_numbers`).
    recomputed: dict[str, dict] = field(default_factory=dict)


def read_manifest(out: Path) -> dict | None:
    """The folder's manifest; None when it has none. A ValueError names a manifest it cannot read.

    Each entry carries `sha256`, the digest of its canonical JSON (`digest`): an entry whose digest does
    not match (a hand-edited number) or that is malformed is left out with one warning naming its
    experiment, which is then not kept. An entry without a digest (a manifest written before digests)
    is accepted with a warning and gets one when the manifest is next written."""
    path = out / MANIFEST
    try:
        manifest = json.loads(read_file(path))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise ValueError(f"{path}: unreadable ({reason}); --replace rewrites it") from None
    if not (isinstance(manifest, dict) and manifest.get("version") == VERSION):
        raise ValueError(
            f"{path}: not a manifest of this analysis (version {VERSION}); --replace rewrites it"
        )
    experiments = manifest.get("experiments")
    if not isinstance(experiments, dict):
        raise ValueError(f"{path}: records no experiments; --replace rewrites it")
    valid, undigested = {}, []
    for name, entry in experiments.items():
        problem = _entry_problem(entry)
        if problem:
            log.warning("analysis: %s: the entry of %s %s; its results are not kept", path, name, problem)
            continue
        if "sha256" not in entry:
            undigested.append(str(name))
        valid[name] = {k: v for k, v in entry.items() if k != "sha256"}
    if undigested:
        log.warning(
            "analysis: %s: no digest for %s (written before digests); accepted unverified, the next "
            "analysis into this folder adds them",
            path,
            ", ".join(undigested),
        )
    return manifest | {"experiments": valid}


def digest(entry: dict) -> str:
    """The sha256 of an entry's canonical JSON (sorted keys, no spaces; its own `sha256` left out)."""
    body = {k: v for k, v in entry.items() if k != "sha256"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def _entry_problem(entry: object) -> str | None:
    """Why a manifest entry cannot be used (malformed, or its digest does not match), or None."""
    if not _well_formed(entry):
        return "is malformed"
    stored = entry.get("sha256")
    if stored is not None and stored != digest(entry):
        return "does not match its digest (edited by hand?)"
    return None


_SCALARS = (str, int, float, bool, type(None))


def _is_frame(stored: object) -> bool:
    """A stored frame: columns (text) and rows, each a list of one plain value per column."""
    if not (isinstance(stored, dict) and isinstance(stored.get("columns"), list)):
        return False
    columns, rows = stored["columns"], stored.get("rows")
    return (
        all(isinstance(c, str) for c in columns)
        and isinstance(rows, list)
        and all(_is_row(row, len(columns)) for row in rows)
    )


def _is_row(row: object, width: int) -> bool:
    return isinstance(row, list) and len(row) == width and all(isinstance(v, _SCALARS) for v in row)


def _is_table(table: object) -> bool:
    """A stored table: every field of `Table`, its text columns and rows of one cell per column."""
    if not (isinstance(table, dict) and set(table) == set(TABLE_FIELDS)):
        return False
    columns, rows = table["columns"], table["rows"]
    texts = {"name": str, "title": str, "note": str, "experiment": str, "labels": int, "sources": list}
    return (
        all(isinstance(table[k], kind) for k, kind in texts.items())
        and isinstance(columns, list)
        and all(isinstance(c, str) for c in columns)
        and isinstance(rows, list)
        and all(_is_row(r, len(columns)) and all(isinstance(v, str) for v in r) for r in rows)
    )


def _well_formed(entry: object) -> bool:
    """Whether a manifest entry has every part `merge` and the report read, of the right kinds."""
    if not isinstance(entry, dict):
        return False
    kinds = {"runs": list, "frames": dict, "phases": dict, "inventory": list, "figures": list}
    kinds |= {"extra_tables": list, "sweep_params": list, "variants": list}
    if not all(isinstance(entry.get(key), kind) for key, kind in kinds.items()):
        return False
    frames = [entry["frames"].get(name) for name in FRAMES]
    frames += [t.get("data") if isinstance(t, dict) else None for t in entry["extra_tables"]]
    tables = all(_is_table(t) for t in entry["extra_tables"])
    figures = all(
        isinstance(f, dict) and isinstance(f.get("name"), str) and isinstance(f.get("title"), str)
        for f in entry["figures"]
    )
    shaped = all(_is_frame(f) for f in frames)
    phases = all(isinstance(order, list) for order in entry["phases"].values())
    return tables and figures and shaped and phases and all(isinstance(r, str) for r in entry["runs"])


def keep(out: Path, runs: pd.DataFrame, options: dict, *, replace: bool) -> Kept:
    """What of `out` stays, given the `runs` (RunLogs.runs) and options of this analysis: a ValueError
    (one line naming `--replace`) when the analysis would replace results of runs it does not have."""
    present = {str(e): set(group["run"]) for e, group in runs.groupby("experiment")}
    if replace:
        return _replacing(out, present)
    manifest = read_manifest(out)
    if manifest is None:
        return Kept({}, frozenset(), frozenset())
    entries = manifest["experiments"]
    for experiment in sorted(set(entries) & set(present)):
        lacking = sorted(set(entries[experiment].get("runs", [])) - present[experiment])
        if lacking:
            raise ValueError(
                f"--out {out} holds results of {experiment} computed from {len(lacking)} run(s) that "
                f"--runs lacks (e.g. {lacking[0]}); --replace replaces them with these runs' (or choose "
                "another --out)"
            )
    kept = {e: entry for e, entry in sorted(entries.items()) if e not in present}
    if kept and manifest.get("options") != options:
        raise ValueError(
            f"--out {out} holds results of {', '.join(kept)} computed with other options "
            f"({_options(manifest.get('options'))}); rerun with those, or --replace to drop them"
        )
    figures = set(_names(manifest.get("figures"))) - {
        f["name"] for e in kept.values() for f in e.get("figures", [])
    }
    pages = frozenset(_names(manifest.get("pages")))
    recomputed = {e: entry for e, entry in entries.items() if e in present}
    return Kept(
        kept,
        frozenset(_names(manifest.get("tables"))),
        frozenset(figures),
        removable_pages=pages,
        recomputed=recomputed,
    )


def _names(listed: object) -> list[str]:
    """The file names a manifest lists (anything else in the list is ignored)."""
    return [n for n in listed if isinstance(n, str)] if isinstance(listed, list) else []


def _replacing(out: Path, present: dict[str, set]) -> Kept:
    """`--replace`: nothing kept; only the files a manifest lists may be removed (a user's own files in
    tables/ or figures/ stay), and the experiments of the manifest absent from the runs are dropped."""
    try:
        manifest = read_manifest(out)
    except ValueError as error:
        log.warning("analysis: %s; --replace removes no file of it", error)
        manifest = None
    if manifest is None:
        return Kept({}, frozenset(), frozenset())
    raw = json.loads(read_file(out / MANIFEST))  # every experiment, the unusable entries' too
    listed = [e for e in raw.get("experiments", {}) if e not in present]
    return Kept(
        {},
        frozenset(_names(manifest.get("tables"))),
        frozenset(_names(manifest.get("figures"))),
        tuple(sorted(str(e) for e in listed)),
        frozenset(_names(manifest.get("pages"))),
    )


def _options(options: object) -> str:
    if not isinstance(options, dict):
        return "unknown"
    return ", ".join(f"--{k} {v}" for k, v in sorted(options.items()))


def merge(analysis: Analysis, kept: Kept) -> Analysis:
    """`analysis` with the stored frames, phases, sweep parameters and variants of the kept experiments."""
    if not kept.experiments:
        return analysis
    frames = {}
    for name in FRAMES:
        parts = [getattr(analysis, name)] + [
            _unframe(entry["frames"][name]) for entry in kept.experiments.values()
        ]
        parts = [p for p in parts if len(p)]
        frames[name] = pd.concat(parts, ignore_index=True) if parts else getattr(analysis, name)
    phases = dict(analysis.phases)
    sweep_params = dict(analysis.sweep_params)
    variants = dict(analysis.variants)
    for experiment, entry in kept.experiments.items():
        phases |= {(experiment, env): list(order) for env, order in entry["phases"].items()}
        if entry.get("sweep_params"):
            sweep_params[experiment] = list(entry["sweep_params"])
        if entry.get("variants"):
            variants[experiment] = list(entry["variants"])
    return replace(analysis, **frames, phases=phases, sweep_params=sweep_params, variants=variants)


def kept_tables(kept: Kept) -> list[Table]:
    """The stored tables of the kept experiments that are not built from frames (e.g. the ablation's)."""
    return [
        Table(**{k: v for k, v in t.items() if k != "data"}, data=_unframe(t["data"]))
        for entry in kept.experiments.values()
        for t in entry.get("extra_tables", [])
    ]


def kept_provenance(kept: Kept) -> dict[str, dict | None]:
    """Experiment -> the provenance record its kept entry holds (None: written before they were)."""
    return {
        e: entry["provenance"] if isinstance(entry.get("provenance"), dict) else None
        for e, entry in kept.experiments.items()
    }


def kept_frames(kept: Kept, key: str) -> list[pd.DataFrame]:
    """The frame stored under `key` in each kept entry that has one (a later addition to the entries,
    absent from those written before it)."""
    return [_unframe(entry[key]) for entry in kept.experiments.values() if _is_frame(entry.get(key))]


def kept_figures(kept: Kept, directory: Path) -> list[FigureFile]:
    """The figures of the kept experiments, as they are in `directory` (those still there)."""
    return [
        FigureFile(directory / f["name"], f["title"], experiment)
        for experiment, entry in kept.experiments.items()
        for f in entry.get("figures", [])
        if (directory / f["name"]).is_file()
    ]


def same_numbers(entry: dict, analysis: Analysis, experiment: str) -> bool:
    """Whether `analysis` gives `experiment` exactly the numbers `entry` (its earlier manifest entry)
    holds, compared as the manifest writes them (canonical JSON: a NaN equals a NaN)."""
    frames = {name: _frame(_of(getattr(analysis, name), experiment)) for name in FRAMES}
    return json.dumps(entry.get("frames"), sort_keys=True) == json.dumps(frames, sort_keys=True)


def write_manifest(
    out: Path,
    analysis: Analysis,
    runs: pd.DataFrame,
    inventory: dict[str, list[str]],
    tables: Sequence[Table],
    extra_tables: Iterable[Table],
    figures: Sequence[FigureFile],
    kept: Kept,
    options: dict,
    *,
    provenance: dict[str, dict] | None = None,
    outcomes: pd.DataFrame | None = None,
    pages: Sequence[str] = (),
) -> Path:
    """Write `out`/manifest.json: an entry per experiment of `runs` (see the module docstring; with
    its `provenance` record and its trial outcomes), the kept experiments' entries as they were, and
    the names of every table, figure and page written."""
    outcomes = outcomes if outcomes is not None else pd.DataFrame(columns=["experiment"])
    entries = {e: dict(entry) for e, entry in kept.experiments.items()}
    for experiment, group in runs.groupby("experiment"):
        experiment = str(experiment)
        entries[experiment] = {
            "runs": sorted(group["run"]),
            "frames": {name: _frame(_of(getattr(analysis, name), experiment)) for name in FRAMES},
            "phases": {env: order for (e, env), order in sorted(analysis.phases.items()) if e == experiment},
            "sweep_params": analysis.sweep_params.get(experiment, []),
            "variants": analysis.variants.get(experiment, []),
            "inventory": inventory.get(experiment, []),
            "extra_tables": [_table(t) for t in extra_tables if t.experiment == experiment],
            "figures": [
                {"name": f.path.name, "title": f.title} for f in figures if f.experiment == experiment
            ],
            "provenance": (provenance or {}).get(experiment),
            "trial_outcomes": _frame(_of(outcomes, experiment)),
        }
    entries = {e: entry | {"sha256": digest(entry)} for e, entry in entries.items()}
    manifest = {
        "version": VERSION,
        "options": options,
        "tables": sorted(t.name for t in tables),
        "figures": sorted(f.path.name for f in figures),
        "pages": sorted(pages),
        "experiments": dict(sorted(entries.items())),
    }
    path = out / MANIFEST
    atomic_write_bytes(path, (json.dumps(manifest, indent=1) + "\n").encode(), mode=SHARED)
    return path


def _of(frame: pd.DataFrame, experiment: str) -> pd.DataFrame:
    return frame[frame["experiment"] == experiment] if len(frame) else frame


def _frame(frame: pd.DataFrame) -> dict:
    """A frame as JSON: its columns in order and its rows, every value a plain Python one (a float's
    repr is exact, so the tables rebuilt from it are byte for byte the same)."""
    rows = [[v.item() if hasattr(v, "item") else v for v in row] for row in frame.itertuples(index=False)]
    return {"columns": [str(c) for c in frame.columns], "rows": rows}


def _unframe(stored: dict) -> pd.DataFrame:
    return pd.DataFrame(stored["rows"], columns=stored["columns"])


#: What a stored table records (the fields of `Table`).
TABLE_FIELDS = ("name", "title", "columns", "rows", "data", "labels", "note", "sources", "experiment")


def _table(table: Table) -> dict:
    return {
        "name": table.name,
        "title": table.title,
        "columns": table.columns,
        "rows": table.rows,
        "data": _frame(table.data),
        "labels": table.labels,
        "note": table.note,
        "sources": table.sources,
        "experiment": table.experiment,
    }

"""Find and read run logs: episodes.parquet, archive.jsonl and meta.json of every complete run.

A run directory is any directory under the root that holds a meta.json with `"complete": true` (the
runner writes it last, atomically), so interrupted runs are skipped and the layout below the root may
grow extra levels (a sweep's parameter folders, say). Labels (experiment, env, memory, seed) come from
the episode rows, not from the path. Directories the runner moved aside (`seed=0.corrupt-...`) are not
runs.

A run is trusted only once its files verify against the checksums its meta.json records
(`analysis.streamlog.stream.verify`, the runner's own check) and its episode columns pass
`analysis.data.validate.check_episodes`. Otherwise the analysis stops with one ValueError naming the file
(and the column) and what is wrong, before anything is written: rerunning the experiment's command
moves a damaged stream aside and redoes it.

Each run's logged sample (`evidence`, `truth`) is turned into its per-episode memory-quality columns
as it is read (`analysis.metrics.memory_quality`), and the text is not kept. A run logged before the sample
existed, or whose environment reports no truth, reads with those columns empty (NaN), and the load says
so in one line: it is analysed as before, without memory metrics.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TypeVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
import pyarrow.parquet as pq
from tqdm import tqdm

from analysis.data.validate import check_episodes, check_range
from analysis.metrics import memory_quality
from analysis.streamlog import stream
from analysis.streamlog.record import COUNTERS, QUALITY, STATE_COUNTS
from analysis.streamlog.record import LABELS as RUN_LABELS

log = logging.getLogger(__name__)
_T = TypeVar("_T")

#: What identifies a run: its labels and seed.
LABELS = (*RUN_LABELS, "seed")
REQUIRED_COLUMNS = (*LABELS, "t", "phase", "success")
#: The archive fields the analysis uses (lifecycle counts) or checks (`t`, `id`: integers in range, as
#: the inspector and the viewer read them): only these are decoded, the rest (reasons, keys, values of
#: any JSON type) are skipped by Arrow's parser, which keeps loading a full reproduction's millions of
#: events fast.
EVENT_SCHEMA = pa.schema([("event", pa.string()), ("t", pa.int64()), ("id", pa.int64())])
_EVENT_PARSING = pj.ParseOptions(explicit_schema=EVENT_SCHEMA, unexpected_field_behavior="ignore")
#: The episode columns the analysis uses (see `analysis.streamlog.record`); the others (task keys, actions,
#: raw replies) are not read, which keeps loading a full reproduction fast. Counters a run lacks read as 0.
ANALYSIS_COLUMNS = (*REQUIRED_COLUMNS, "prompt_tokens", *COUNTERS, *STATE_COUNTS)
#: Episode columns held as categoricals (categories sorted, so they sort and group as the texts do): every
#: metric groups a reproduction's ~10^6 episodes by them, which factorized the texts again each time.
CATEGORICAL = ("run", *RUN_LABELS, "phase")
#: Threads reading run files concurrently: one per core this process may run on, at most 4. More than
#: the cores only adds hand-overs of the interpreter lock (4 threads on 2 cores: 0.6 CPU s more, and
#: slower, for a full reproduction's logs).
_READERS = min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
#: Runs a reading process is handed at a time (`load_runs`' `readers`): few enough that the processes
#: end together, enough that handing them over costs little.
_CHUNK = 16
#: What a label (experiment, env, memory) may be: one plain directory name, as the runner's config allows.
PLAIN_LABEL = re.compile(r"[A-Za-z0-9_.=+-]+")
#: The threshold-sweep experiment: its runs share labels and differ only in their resolved config.
SWEEP_EXPERIMENT = "sweep_thresholds"


@dataclass(frozen=True)
class RunLogs:
    """Everything the analysis reads, one frame per log kind.

    episodes: one row per episode of every run, plus `run` (the run directory relative to the root);
    the CATEGORICAL columns are categoricals.
    events: how many lifecycle events of each kind every run's archive holds: `run`, the run's labels,
    `event` and `count` (one row per run and kind it logged).
    runs: one row per run: `run`, the labels, `n_episodes`, `config` (meta.json flattened to dotted
    keys, e.g. "config.memory.theta_rev") and `sample` (whether its memory metrics could be computed,
    `analysis.metrics.memory_quality.LOGGED`, or why not).
    """

    episodes: pd.DataFrame
    events: pd.DataFrame
    runs: pd.DataFrame


def flatten(mapping: dict, prefix: str = "") -> dict[str, object]:
    """Flatten nested dicts to dotted keys: {"a": {"b": 1}} -> {"a.b": 1}."""
    flat: dict[str, object] = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def find_runs(root: str | Path, experiments: Callable[[str], bool] | None = None) -> list[Path]:
    """Complete run directories under `root`, in sorted (deterministic) order; with `experiments`, only
    those of the experiments (the first folder under `root`) it accepts.

    Complete: its meta.json (which the runner writes last, atomically) says so; a stream without one
    is still being written. A meta.json that cannot be read (not a regular file, not a JSON object,
    nested absurdly deep) is damage, a ValueError naming it, as is a complete stream whose logs are
    missing (`_read_run`)."""
    return [run_dir for run_dir, _ in _complete_runs(Path(root), experiments)]


def _complete_runs(root: Path, experiments: Callable[[str], bool] | None) -> list[tuple[Path, dict]]:
    """`find_runs`' directories, each with its meta.json: the load reads every meta.json once."""
    if not root.is_dir():
        raise ValueError(f"root: {root} is not a directory")
    metas = root.rglob(stream.META)
    candidates = sorted(p.parent for p in metas if not stream.is_aside(p.parent.relative_to(root)))
    if experiments is not None:
        candidates = [c for c in candidates if experiments(c.relative_to(root).parts[0])]
    complete = []
    for run_dir in candidates:
        try:
            meta = stream.load_meta(run_dir)
        except ValueError as error:
            raise ValueError(f"{error}; rerun its experiment to redo it") from None
        if meta.get("complete") is True:
            complete.append((run_dir, meta))
    if len(complete) < len(candidates):
        log.info("skipping %d incomplete run(s) under %s", len(candidates) - len(complete), root)
    return complete


def read_episodes(run_dir: Path) -> tuple[pa.Table, str]:
    """The ANALYSIS_COLUMNS of one run's episodes.parquet (those it has) with its memory-quality columns
    (`analysis.metrics.memory_quality.EPISODE_COLUMNS`) as an Arrow table, and the run's sample status.

    One ParquetFile serves both the schema check and the read, single-threaded: files are small and
    load_runs already reads several at once, so the dataset API's and Arrow's thread start-up would
    cost more than the decoding. The logged sample's long texts are not read: the loop logged what they
    measure in the QUALITY columns. Columns that hold one value are not decoded (`_read_columns`).
    """
    path = run_dir / "episodes.parquet"
    file = pq.ParquetFile(path)
    names = file.schema_arrow.names
    missing = [c for c in REQUIRED_COLUMNS if c not in names]
    if missing:
        raise ValueError(f"{path}: missing column(s) {', '.join(missing)}")
    quality = [c for c in QUALITY if c in names]
    table = _read_columns(file, [c for c in (*ANALYSIS_COLUMNS, *quality) if c in names])
    check_episodes(table, path)
    try:
        columns = memory_quality.episode_columns(table)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    status = memory_quality.sample_status(table)
    table = table.drop_columns([c for c in quality if c not in ANALYSIS_COLUMNS])
    for name, values in columns.items():
        table = table.append_column(name, pa.array(values))
    return table, status


def _read_columns(file: pq.ParquetFile, names: list[str]) -> pa.Table:
    """The columns `names` of `file`, as `file.read` returns them; those its statistics show to hold one
    value (`_constant_columns`) are built from it instead of decoded. Most columns of a run hold one
    value (its labels and seed, the counters its method never moves), and decoding a column chunk costs
    about the same whatever it holds: this halves the decoding of a reproduction's logs."""
    schema = file.schema_arrow  # built anew at each access
    fields = [schema.field(c) for c in names]
    constant = _constant_columns(file, fields)
    decoded = file.read(columns=[c for c in names if c not in constant], use_threads=False)
    rows = file.metadata.num_rows
    columns = [
        pa.repeat(pa.scalar(constant[f.name], f.type), rows) if f.name in constant else decoded[f.name]
        for f in fields
    ]
    return pa.Table.from_arrays(columns, schema=pa.schema(fields, metadata=decoded.schema.metadata))


def _constant_columns(file: pq.ParquetFile, fields: list[pa.Field]) -> dict[str, object]:
    """The columns of `fields` (integers, booleans or texts, not nested) that every row group's
    statistics show to hold a single value and no null, with that value. The file's bytes are the ones
    its meta.json's checksum records, so these statistics are the ones its writer computed from the
    values; a column without them (or any other) is decoded."""
    metadata = file.metadata
    leaves = file.schema.names
    groups = [metadata.row_group(g) for g in range(metadata.num_row_groups)]
    found: dict[str, object] = {}
    for field in fields:
        if not groups or leaves.count(field.name) != 1 or not _exact_statistics(field.type):
            continue
        values = {_single_value(group, leaves.index(field.name)) for group in groups}
        if len(values) == 1 and None not in values:
            found[field.name] = values.pop()
    return found


def _exact_statistics(kind: pa.DataType) -> bool:
    """Whether a column's min and max statistics are its value when they are equal: integers, booleans
    and texts; not floats, whose statistics leave NaN out."""
    is_ = pa.types
    return is_.is_integer(kind) or is_.is_boolean(kind) or is_.is_string(kind) or is_.is_large_string(kind)


def _single_value(group: pq.RowGroupMetaData, column: int) -> object:
    """The one value a row group's column chunk holds by its statistics (no null), else None."""
    stats = group.column(column).statistics
    if stats is None or not (stats.has_min_max and stats.has_null_count) or stats.null_count:
        return None
    return stats.min if stats.min == stats.max and stats.num_values == group.num_rows else None


def read_events(run_dir: Path) -> pa.Table:
    """The EVENT_SCHEMA fields of one run's archive.jsonl, one row per lifecycle event (no rows when
    there is none). A line that is not a JSON object, a field of another type (`t` a text or 1e300,
    `id` beyond int64) or a step or id out of range (`check_range`) is a ValueError naming the file."""
    path = run_dir / "archive.jsonl"
    if not path.is_file() or path.stat().st_size == 0:  # Arrow refuses an empty file
        return EVENT_SCHEMA.empty_table()
    try:
        table = pj.read_json(path, parse_options=_EVENT_PARSING)
    except pa.ArrowException as exc:
        reason = str(exc).splitlines()[0] if str(exc) else repr(exc)
        raise ValueError(f"{path}: unreadable ({reason}); rerun its experiment to redo it") from None
    check_range(table, path, ("t", "id"))
    return table


def count_events(run_dir: Path) -> dict[str, int]:
    """How many lifecycle events of each kind one run's archive.jsonl holds (events naming no kind are not
    counted). Counted per run in Arrow, so that a full reproduction's millions of events never become
    rows of a frame."""
    counts = pc.value_counts(read_events(run_dir)["event"])
    kinds, numbers = counts.field("values").to_pylist(), counts.field("counts").to_pylist()
    return {kind: n for kind, n in zip(kinds, numbers, strict=True) if kind is not None}


def _labels(table: pa.Table, run: str) -> dict[str, object]:
    """A run's labels, one value per column. Labels name output files and stand in tables as they are,
    so each must be a plain name as the runner writes them (PLAIN_LABEL), never a path or markup."""
    labels = {}
    for name in LABELS:
        values = pc.unique(table[name]).to_pylist()
        if len(values) != 1:
            raise ValueError(f"run {run}: column {name} has {len(values)} distinct values, expected one")
        labels[name] = int(values[0]) if name == "seed" else str(values[0])
        if name != "seed" and not (PLAIN_LABEL.fullmatch(labels[name]) and labels[name].strip(".")):
            raise ValueError(
                f"run {run}: column {name} holds {labels[name]!r}, not a plain name "
                "(letters, digits, _ . = + -)"
            )
    return labels


def variants(runs: pd.DataFrame) -> pd.Series:
    """Each run's configuration variant: "" for its experiment's own configuration, else the keys that
    differ from it (meta.json's `variant`, which the runner also uses as a directory level)."""
    return runs["config"].map(lambda config: str(config.get("variant") or ""))


def experiment_variants(runs: pd.DataFrame) -> dict[str, list[str]]:
    """Experiment -> the configuration variants among its runs (sorted, "" left out): what its tables'
    and figures' titles name."""
    named = runs.assign(variant=variants(runs))
    named = named[named["variant"] != ""]
    return {str(e): sorted(set(group["variant"])) for e, group in named.groupby("experiment", sort=True)}


def in_sweep(runs: pd.DataFrame) -> pd.Series:
    """Which runs are grid points of a sweep: the threshold-sweep experiment's, and every run whose
    labels (experiment, env, memory) another run shares with another configuration variant, whatever
    key was swept (a threshold, a reader parameter, an environment size)."""
    shared = runs.assign(variant=variants(runs)).groupby(list(LABELS[:3]))["variant"].transform("nunique")
    return (runs["experiment"] == SWEEP_EXPERIMENT) | (shared > 1)


def _check_unique(runs: pd.DataFrame) -> None:
    """Two runs with the same labels and configuration would be averaged as if they were two seeds:
    refuse."""
    labelled = runs.assign(variant=variants(runs))  # before filtering: a Series assigned to an empty
    regular = labelled[labelled["experiment"] != SWEEP_EXPERIMENT]  # frame would add NaN rows
    dup = regular[regular.duplicated([*LABELS, "variant"], keep=False)]
    if not dup.empty:
        raise ValueError(
            "runs with identical (experiment, env, memory, seed) labels: " + ", ".join(sorted(dup["run"]))
        )


def _read_run(root: Path, run_dir: Path, meta: dict) -> tuple[str, tuple[pa.Table, str], dict]:
    """A run's episodes (its CATEGORICAL columns dictionary-encoded, `_encoded`) and meta.json, its files
    verified (see the module docstring); a ValueError names what cannot be trusted. Its archive is read
    by `_event_counts`."""
    problem = stream.verify(run_dir, meta)  # a run that records no checksums is not trusted either
    if problem is not None:
        raise ValueError(f"{problem}; rerun its experiment to redo it")
    run = run_dir.relative_to(root).as_posix()
    table, sample = _arrow_read(read_episodes, run_dir)
    return run, (_encoded(table, run), sample), meta


def _shipped(root: Path, run_dir: Path, meta: dict) -> tuple[str, tuple[pa.Buffer, str], dict]:
    """`_read_run` in a reading process, its table as Arrow IPC bytes (`_landed` reopens them): they
    cross to this process at a third of a pickled table's cost, and open here without a copy."""
    run, (table, sample), meta = _read_run(root, run_dir, meta)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return run, (sink.getvalue(), sample), meta


def _landed(
    read: tuple[str, tuple[pa.Table | pa.Buffer, str], dict],
) -> tuple[str, tuple[pa.Table, str], dict]:
    """A `_read_run` or `_shipped` result, its table opened."""
    run, (table, sample), meta = read
    if isinstance(table, pa.Buffer):
        table = pa.ipc.open_stream(table).read_all()
    return run, (table, sample), meta


def _encoded(table: pa.Table, run: str) -> pa.Table:
    """`table` with its `run` column added and the CATEGORICAL columns dictionary-encoded, on the
    reading threads: pandas then builds the categoricals from the dictionaries, where factorizing a
    reproduction's ~10^6 label texts in one thread took a good part of the load."""
    for name in (n for n in CATEGORICAL if n != "run"):
        column = table[name]
        if pa.types.is_large_string(column.type):
            column = column.cast(pa.string())
        table = table.set_column(table.schema.get_field_index(name), name, pc.dictionary_encode(column))
    codes = pa.array(np.zeros(table.num_rows, dtype=np.int32))
    return table.append_column("run", pa.DictionaryArray.from_arrays(codes, pa.array([run])))


def _arrow_read(read: Callable[[Path], _T], run_dir: Path) -> _T:
    """`read(run_dir)`; a file Arrow cannot read is a ValueError naming the run."""
    try:
        return read(run_dir)
    except (OSError, pa.ArrowException) as exc:  # a file Arrow cannot read (ArrowInvalid is both)
        reason = str(exc).splitlines()[0] if str(exc) else repr(exc)
        raise ValueError(f"{run_dir}: unreadable ({reason})") from None


def _event_counts(pool: Executor, run_dirs: list[Path], metas: list[dict]) -> Iterator[dict[str, int]]:
    """Each run's `count_events`, every distinct archive parsed once: submitted at once (the archives
    are parsed while the episodes are read), a fault raised only as the counts are iterated, so that
    the load names a run whose files do not verify first, as it did when it counted after reading.

    Archives with the same verified sha256 hold the same bytes, so the same counts and the same faults:
    the seeds of a deterministic environment's stream (MemoryAgentBench's, most of a reproduction's
    archive bytes) log one archive many times. A faulty one is named by the first run that has it."""
    keys = [_archive_key(run_dir, meta) for run_dir, meta in zip(run_dirs, metas, strict=True)]
    first = dict(zip(reversed(keys), reversed(run_dirs), strict=True))
    return _in_run_order(keys, first, pool.map(partial(_arrow_read, count_events), first.values()))


def _archive_key(run_dir: Path, meta: dict) -> object:
    """What identifies a run's archive bytes: the sha256 its meta.json records (checked before the
    counts are used), or the run itself when it records none (it then fails that check)."""
    files = meta.get("files")
    entry = files.get(stream.ARCHIVE) if isinstance(files, dict) else None
    digest = entry.get("sha256") if isinstance(entry, dict) else None
    return digest if isinstance(digest, str) else run_dir


def _in_run_order(keys: list[object], first: dict, counts: Iterator) -> Iterator[dict[str, int]]:
    """The counts of each key's first run, for every key in order (a generator: waits for them when
    iterated, not when called)."""
    counted = dict(zip(first, counts, strict=True))
    yield from (counted[key] for key in keys)


def _note_unavailable(runs: pd.DataFrame) -> None:
    """One line per reason some runs have no memory metrics (they are analysed without them)."""
    why = {
        memory_quality.NOT_LOGGED: "logged before episodes recorded what their prompts held",
        memory_quality.NO_TRUTH: "their environment reports no truth",
    }
    for status, reason in why.items():
        n = int((runs["sample"] == status).sum())
        if n:
            log.warning("memory metrics unavailable for %d of %d run(s): %s", n, len(runs), reason)


def load_runs(
    root: str | Path,
    *,
    progress: bool = False,
    experiments: Callable[[str], bool] | None = None,
    readers: Executor | None = None,
) -> RunLogs:
    """Read every complete run under `root` (of the experiments `experiments` accepts, by default all)
    into one RunLogs (episodes sorted by run and t).

    Files are read on a few threads (Arrow decodes without the GIL), concatenated as Arrow tables and
    converted to pandas once: per-run pandas work would dominate the load time of a full
    reproduction. Counters a run does not log are read as 0. With `readers` (processes), the episodes
    are verified and read there, a few runs at a time, while this process' threads parse the archives:
    the threads' Python work per run holds one interpreter lock, which left a core idle.
    """
    root = Path(root)
    found = _complete_runs(root, experiments)
    run_dirs = [run_dir for run_dir, _ in found]
    metas = [meta for _, meta in found]
    tables, events, runs = [], [], []
    with ThreadPoolExecutor(max_workers=_READERS) as pool:
        reader = _read_run if readers is None else _shipped
        read = (readers or pool).map(partial(reader, root), run_dirs, metas, chunksize=_CHUNK)
        counts = _event_counts(pool, run_dirs, metas)
        shown = tqdm(read, total=len(run_dirs), desc="reading runs", unit="run", disable=not progress)
        loaded = list(map(_landed, shown))
        counted = list(counts)
    for (run, (table, sample), meta), counts in zip(loaded, counted, strict=True):
        if table.num_rows == 0:
            log.info("run %s has no episodes; skipped", run)
            continue
        labels = _labels(table, run)
        tables.append(table)
        events += [{"run": run, **labels, "event": kind, "count": n} for kind, n in counts.items()]
        runs.append(
            {"run": run, **labels, "n_episodes": table.num_rows, "config": flatten(meta), "sample": sample}
        )
    if not runs:
        raise ValueError(f"root: no complete runs with episodes under {root}")
    runs_frame = pd.DataFrame(runs)
    _note_unavailable(runs_frame)
    _check_unique(runs_frame)
    episodes = pa.concat_tables(tables, promote_options="permissive").to_pandas()
    for name in CATEGORICAL:  # categories sorted, as pd.Categorical sorts them
        episodes[name] = episodes[name].cat.reorder_categories(sorted(episodes[name].cat.categories))
    for name in (*COUNTERS, *STATE_COUNTS):
        episodes[name] = episodes[name].fillna(0).astype("int64") if name in episodes else 0
    episodes["success"] = episodes["success"].astype(bool)
    episodes = episodes.sort_values(["run", "t"], kind="stable").reset_index(drop=True)
    events_frame = pd.DataFrame(events, columns=["run", *LABELS, "event", "count"])
    return RunLogs(episodes, events_frame, runs_frame)

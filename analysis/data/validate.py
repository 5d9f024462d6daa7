"""Input checks of the analysis, run before anything is written: run logs and options are not trusted.

Odd logs once passed silently or broke the analysis half-way: a null `success` read as a failure, a
NaN or repeated `t` crashed after the tables were written, `--reference nonexistent` or
`--tolerance nan` gave every method "0/2 recovered". Each problem is now one ValueError whose message
names the file or the option; `python -m analysis` prints it as one line and exits 2.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Collection
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from analysis.streamlog.record import LABELS, TYPES

# What each column the analysis relies on must hold (nulls are refused in all of them).
_CHECKS = {
    str: (pa.types.is_string, "text"),
    int: (pa.types.is_integer, "integers"),
    bool: (pa.types.is_boolean, "booleans"),
}
# The columns the analysis relies on, checked against their types in the episode record.
_COLUMN_TYPES = {name: _CHECKS[TYPES[name]] for name in (*LABELS, "phase", "seed", "t", "success")}
#: A step (an episode's or an event's `t`) is in [0, MAX_STEP): exact as a float, as the tables, windows
#: and figures use it. A log holding another is damage, as the runner's `record_problem` treats a
#: replayed number out of range.
MAX_STEP = 2**53
#: An event's `id` (a precedent's number) is in [0, 2**63 - 1], what the archive's int64 reading holds.
_RANGES = {"t": MAX_STEP - 1, "id": 2**63 - 1}


def check_range(table: pa.Table, path: Path, names: Collection[str] = ("t",)) -> None:
    """Each of the integer columns `names` that `table` holds is in its range (`_RANGES`): nulls aside,
    no value below 0 or above the column's bound."""
    for name in names:
        if name not in table.column_names or table.num_rows == table[name].null_count:
            continue
        low, high = pc.min_max(table[name]).values()
        if low.as_py() < 0 or high.as_py() > _RANGES[name]:
            bad = low.as_py() if low.as_py() < 0 else high.as_py()
            raise ValueError(
                f"{path}: {name} {bad} is out of range (expected an integer in [0, {_RANGES[name]}])"
            )


def check_episodes(table: pa.Table, path: Path) -> None:
    """A run's episode table: the required columns have their types and no nulls, and `t` (the step)
    is in [0, MAX_STEP) and unique, one row per step."""
    for name, (is_type, expected) in _COLUMN_TYPES.items():
        if name not in table.column_names:
            continue  # missing columns are the loader's message
        column = table[name]
        if not is_type(column.type) and not (pa.types.is_large_string(column.type) and expected == "text"):
            raise ValueError(f"{path}: column {name} must hold {expected}, found {column.type}")
        if column.null_count:
            raise ValueError(f"{path}: column {name} has {column.null_count} null value(s)")
    check_range(table, path)
    if "t" in table.column_names and pc.count_distinct(table["t"]).as_py() != table.num_rows:
        repeated = table.num_rows - pc.count_distinct(table["t"]).as_py()
        raise ValueError(f"{path}: column t repeats {repeated} step(s); a run has one row per step")


def check_options(window: int, tolerance: float, out: Path) -> None:
    """`--window` and `--tolerance` in range, and `--out` a folder this process can write."""
    if not window >= 1:
        raise ValueError(f"--window {window}: must be an integer >= 1")
    if not (math.isfinite(tolerance) and tolerance >= 0):
        raise ValueError(f"--tolerance {tolerance}: must be a finite number >= 0")
    problem = unwritable(out)
    if problem:
        raise ValueError(f"--out {out}: {problem}")


def unwritable(folder: str | os.PathLike[str]) -> str | None:
    """Why `folder` is not a directory this process can write (it is created if missing), or None."""
    try:
        os.makedirs(folder, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        return f"not a writable directory ({exc.strerror})"
    return None


def check_reference(reference: str | None, methods: Collection[str]) -> None:
    """`--reference` must name a method the runs hold (else every method shows nothing recovered)."""
    if reference is not None and reference not in methods:
        raise ValueError(
            f"--reference {reference}: no such method in the runs (present: {', '.join(sorted(methods))})"
        )

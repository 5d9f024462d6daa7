"""The load builds the columns a run's statistics show to hold one value instead of decoding them:
what it reads must be what decoding gives, whatever the statistics say."""

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analysis.data.load import _constant_columns, _read_columns, read_episodes


def _written(tmp_path: Path, table: pa.Table, **options: object) -> pq.ParquetFile:
    path = tmp_path / "episodes.parquet"
    pq.write_table(table, path, **options)
    return pq.ParquetFile(path)


def _same(read: pa.Table, decoded: pa.Table) -> bool:
    """Equal values (NaN equal to NaN) and schemas."""
    return read.schema == decoded.schema and str(read.to_pylist()) == str(decoded.to_pylist())


def _table(rows: int = 6) -> pa.Table:
    return pa.table(
        {
            "experiment": pa.array(["exp"] * rows),
            "big": pa.array(["x"] * rows, pa.large_string()),
            "seed": pa.array([3] * rows, pa.int64()),
            "small": pa.array([7] * rows, pa.int8()),
            "flag": pa.array([True] * rows),
            "t": pa.array(range(rows), pa.int64()),
            "nan": pa.array([float("nan")] + [1.0] * (rows - 1)),  # statistics leave NaN out
            "gap": pa.array([None] + [2] * (rows - 1), pa.int64()),
        }
    )


def test_columns_read_from_statistics_equal_the_decoded_ones(tmp_path):
    file = _written(tmp_path, _table())
    names = file.schema_arrow.names
    assert set(_constant_columns(file, [file.schema_arrow.field(n) for n in names])) == {
        "experiment",
        "big",
        "seed",
        "small",
        "flag",
    }
    assert _same(_read_columns(file, names), file.read())


@pytest.mark.parametrize(
    "options", [{"row_group_size": 2}, {"write_statistics": False}, {"write_statistics": ["t"]}]
)
def test_a_value_that_changes_between_row_groups_or_missing_statistics_are_decoded(tmp_path, options):
    table = _table().set_column(2, "seed", pa.array([3, 3, 3, 3, 4, 4], pa.int64()))
    file = _written(tmp_path, table, **options)
    fields = list(file.schema_arrow)
    constant = _constant_columns(file, fields)
    assert "seed" not in constant
    if options != {"row_group_size": 2}:
        assert constant == {}
    assert _same(_read_columns(file, file.schema_arrow.names), file.read())


def test_a_null_in_a_run_label_is_still_refused(tmp_path):
    table = pa.table(
        {
            "experiment": pa.array(["exp", None]),
            "env": pa.array(["env", "env"]),
            "memory": pa.array(["lww", "lww"]),
            "seed": pa.array([0, 0], pa.int64()),
            "t": pa.array([0, 1], pa.int64()),
            "phase": pa.array(["a", "a"]),
            "success": pa.array([True, False]),
        }
    )
    _written(tmp_path, table)
    with pytest.raises(ValueError, match="column experiment has 1 null value"):
        read_episodes(tmp_path)

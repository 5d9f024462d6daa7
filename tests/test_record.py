"""The episode record: the loop's rows and the written episodes.parquet have the columns and types
`analysis.streamlog.record` declares, and the analysis reads only columns it declares."""

from __future__ import annotations

import asyncio
import io

import pyarrow as pa
import pyarrow.parquet as pq

from analysis.data.load import ANALYSIS_COLUMNS
from analysis.streamlog.encoding import parquet_bytes
from analysis.streamlog.record import COLUMNS, COUNTERS, FIELDS, LABELS, STATE_COUNTS, TYPES
from envs.controlled_drift import ControlledDrift
from runners.agent.loop import run_stream
from runners.llm.simulated.reader import SimulatedBackend
from runners.registry import build_memory

ARROW = {str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_()}


def test_the_loop_writes_rows_with_the_declared_columns_in_order_and_types():
    labels = dict(zip(LABELS, ("exp", "controlled_drift", "tepa_full"), strict=True))
    result = asyncio.run(
        run_stream(
            ControlledDrift(phase_length=15),
            build_memory("tepa_full"),
            SimulatedBackend(),
            seed=2,
            labels=labels,
        )
    )
    assert result.records and all(tuple(rec) == COLUMNS for rec in result.records)
    assert all(type(rec[name]) is TYPES[name] for rec in result.records for name in COLUMNS)
    assert any(rec["promotions"] for rec in result.records)  # the counters come from the memory
    schema = pq.read_schema(io.BytesIO(parquet_bytes(result.records)))
    assert list(zip(schema.names, schema.types, strict=True)) == [(n, ARROW[TYPES[n]]) for n in COLUMNS]


def test_the_analysis_reads_declared_columns_and_the_counters_are_record_fields():
    assert set(ANALYSIS_COLUMNS) <= set(COLUMNS)
    assert set(STATE_COUNTS) | set(COUNTERS) <= set(FIELDS)

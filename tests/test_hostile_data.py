"""Data files that once passed: a blank gold answer (every reply matched it: No Memory scored 1.00), a
fact serial beyond the episode log's int64 (every episode ran, then the parquet write failed on every
rerun), and question templates missing a relation the facts have (`KeyError 'P50'` mid-stream). Each
is now one line naming the row or file, before the first episode."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from analysis.streamlog.record import INT64_MAX
from envs.memoryagentbench.data import DataError, FactConsolidationRecord, load_mquake_templates
from envs.memoryagentbench.env import MemoryAgentBench
from envs.memoryagentbench.parse import parse_source
from tests.helpers.hostile import one_line_error
from tests.helpers.runner import cli
from tests.helpers.shared_data import require_data

SH, MH = "factconsolidation_sh_6k", "factconsolidation_mh_6k"


def _data(tmp_path: Path, change_rows=None, change_questions=None) -> Path:
    """A copy of the shared data in `tmp_path / "data"`, the rows and question templates changed."""
    shared, data = require_data(), tmp_path / "data"
    shutil.copytree(shared / "mquake", data / "mquake")
    rows = json.loads((shared / "memoryagentbench" / "Conflict_Resolution.json").read_text())
    if change_rows:
        change_rows(rows)
    (data / "memoryagentbench").mkdir()
    (data / "memoryagentbench" / "Conflict_Resolution.json").write_text(json.dumps(rows))
    if change_questions:
        path = data / "mquake" / "question_templates.json"
        path.write_text(json.dumps(change_questions(json.loads(path.read_text()))))
    return data


def _row(rows: list, source: str) -> dict:
    return next(row for row in rows if row["metadata"]["source"] == source)


@pytest.mark.parametrize("blank", [[], [""], ["..."], ["The"], ["Paris", " ?! "]])
def test_a_blank_gold_answer_is_a_data_error_naming_the_row(tmp_path, blank):
    data = _data(tmp_path, lambda rows: _row(rows, SH)["answers"].__setitem__(7, blank))
    with pytest.raises(DataError) as error:
        MemoryAgentBench(SH, data_dir=data)
    message = str(error.value)
    assert "Conflict_Resolution.json: row " in message and f"({SH}): the answers of question 7" in message
    assert "\n" not in message


def test_a_blank_gold_answer_stops_the_run_with_one_line(tmp_path):
    data = _data(tmp_path, lambda rows: _row(rows, SH)["answers"].__setitem__(0, ["."]))
    proc = cli(tmp_path, "env=memoryagentbench", f"env.data_dir={data}", "memory=no_memory", "results_dir=r")
    assert f"({SH}): the answers of question 0 are missing or blank" in one_line_error(proc)
    assert not (tmp_path / "r" / "runs").exists()


def _record(last_serial: int, questions: int) -> FactConsolidationRecord:
    context = (
        "Here is a list of facts:\n0. Roy Rogers is married to Dale Evans.\n"
        f"{last_serial}. X is married to Y."
    )
    return FactConsolidationRecord(
        SH, context, ("Who is X married to?",) * questions, (("Y",),) * questions, ()
    )


def test_a_fact_serial_beyond_the_logs_int64_is_a_data_error(tmp_path):
    templates = load_mquake_templates(require_data())
    assert parse_source(_record(INT64_MAX - 3, 3), templates).lines[-1].serial == INT64_MAX - 3  # t fits
    for serial in (INT64_MAX - 2, 2**63, 10**30):
        with pytest.raises(DataError, match=rf"{SH}: context: fact serial {serial} is too large"):
            parse_source(_record(serial, 3), templates)


def test_a_huge_serial_in_the_data_file_names_the_row(tmp_path):
    def huge(rows):
        row = _row(rows, SH)
        row["context"] += f"\n{2**63}. Roy Rogers is married to Dale Evans."

    with pytest.raises(DataError, match=rf"Conflict_Resolution.json: row \d+ \({SH}\): context: fact serial"):
        MemoryAgentBench(SH, data_dir=_data(tmp_path, huge))


def test_question_templates_missing_a_relation_are_a_data_error_naming_the_file(tmp_path):
    data = _data(tmp_path, change_questions=lambda table: {k: v for k, v in table.items() if k != "P50"})
    with pytest.raises(DataError, match=r"question_templates.json: no question for the relation\(s\) P50 "):
        MemoryAgentBench(MH, data_dir=data)

"""A memory line shows its value's text as it is: `VALID "pesäpallo"`, as the fact text and the options spell
it, not `"pes\\u00e4pallo"` (2-6% of each MemoryAgentBench source's gold answers are non-ASCII). Only a
character that could end a line stays escaped. The viewer shows exactly the line the model saw."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from envs.base import Task
from runners.agent.prompt import EVIDENCE_LINE, evidence_line, render
from runners.llm.backend import Request
from runners.llm.simulated.reader import SimulatedBackend
from tepa.evidence import Evidence
from tests.test_hostile_prompt import _sent_to_endpoint
from tests.test_hostile_viewer import _build, _reseal
from tests.test_view import open_page, write_stream

VALUES = ["pesäpallo", "Ελλάδα", "東京", "naïve café", "emoji \U0001f600", 'quote " and \\ backslash']
LINE_ENDERS = ["a\u2028b", "a\u2029b", "a\x85b", "a\x7fb", "a\nb", "a\rb"]


def _evidence(value: str) -> Evidence:
    return Evidence(1, value, True, 3, text="seen", ref=0, support=2, conflict=0)


@pytest.mark.parametrize("value", VALUES)
def test_a_non_ascii_value_reaches_the_endpoint_spelled_as_its_options_spell_it(stub_server, value):
    task = Task(key=1, text="Pick one.", phase="stable", t=10, options=(value, "other"))
    sent = _sent_to_endpoint(stub_server, render(task, [_evidence(value)]))
    line = next(m for m in EVIDENCE_LINE.finditer(sent))
    assert line.group("value") == json.dumps(value, ensure_ascii=False)
    assert "\\u" not in sent
    assert f"A) {value}" in sent


@pytest.mark.parametrize("value", VALUES + LINE_ENDERS, ids=repr)
def test_the_simulated_reader_reads_back_exactly_the_value_the_memory_held(value):
    task = Task(key=1, text="Pick one.", phase="stable", t=10, options=(value, "other"))
    prompt = render(task, [_evidence(value)])[-1]["content"]
    found = [m.group("value") for m in EVIDENCE_LINE.finditer(prompt)]
    assert len(found) == 1 and json.loads(found[0]) == value
    assert len(prompt.splitlines()) == len(render(task, [_evidence("x")])[-1]["content"].splitlines())
    if value.isprintable():  # (an option line shows a line ender as a space, so only these name an option)
        # The reader follows the VALID memory of the value it names: it picks that option.
        assert SimulatedBackend(lapse=0.0).answer(
            Request(messages=render(task, [_evidence(value)]))
        ).text == ("Answer: A")


def test_the_viewer_shows_the_memory_lines_exactly_as_the_prompt_showed_them(tmp_path):
    """Logs without the prompt column: the page rebuilds each memory line from the logged evidence, and it
    must be the line the model saw (up to the memory text, which the evidence column does not log)."""
    values = ["pesäpallo", "東京", "a\u2028b", "a\x85b"]
    run = write_stream(tmp_path, "tepa_rev", logged=True)
    frame = pd.read_parquet(run / "episodes.parquet")
    lines = [[20 + i, "VALID", v, 2, 0] for i, v in enumerate(values)]
    frame.loc[frame["t"] == 25, "evidence"] = json.dumps([lines])
    frame.loc[frame["t"] == 25, "prompt"] = ""
    frame.to_parquet(run / "episodes.parquet", index=False)
    _reseal(run)
    page, _ = _build(tmp_path, tmp_path / "runs")
    shown = open_page(page, "run=exp/controlled_drift/tepa_rev/seed=0&t=25").text["ep-prompt"]
    for i, value in enumerate(values):
        saw = evidence_line(Evidence(1, value, True, 20 + i, support=2, conflict=0))
        assert saw.rsplit(": ", 1)[0] in shown
    assert "\\u00e4" not in shown and "\\u2028" in shown

"""MemoryAgentBench's loader, parser, environment and metric on generated data (tests/helpers/mab_fixture.py):
the real data's layout with invented facts, so these run on every machine, with no data and no network."""

import json
import urllib.error

import pyarrow.parquet as pq
import pytest

from analysis.streamlog.stream import EPISODES
from envs.base import Environment
from envs.memoryagentbench import data as mab_data
from envs.memoryagentbench.data import (
    CONFLICT_FILE,
    DATA_DIR_ENV,
    DataError,
    DataNotFoundError,
    load_conflict_resolution,
    load_mquake_templates,
)
from envs.memoryagentbench.env import INSTRUCTIONS, MemoryAgentBench
from envs.memoryagentbench.parse import Fact, parse_source, parser_for
from tests.helpers import mab_fixture
from tests.helpers.mab_fixture import FACTS, MH_QUESTIONS, SH_QUESTIONS, row, write_mab_data

SH, MH = "factconsolidation_sh_6k", "factconsolidation_mh_6k"


def _sh(folder, **kwargs) -> MemoryAgentBench:
    return MemoryAgentBench(SH, data_dir=folder, **kwargs)


def test_the_generated_folder_has_the_real_layout_and_loads(generated_mab_data):
    record = load_conflict_resolution(SH, generated_mab_data)
    assert record.source == SH and record.where.endswith(f"row 0 ({SH})")
    assert record.context.startswith("Here is a list of facts:\n0. ")
    assert record.questions == tuple(q for q, _, _ in SH_QUESTIONS)
    assert record.answers == tuple(tuple(golds) for _, golds, _ in SH_QUESTIONS)
    assert record.qa_pair_ids[0] == f"{SH}_no0" and len(record.sha256) == 64
    templates = load_mquake_templates(generated_mab_data)
    assert templates.cloze == mab_fixture.CLOZE and templates.question == mab_fixture.QUESTION
    assert set(templates.sha256) == {"cloze_templates.json", "question_templates.json"}


def test_the_env_var_finds_the_generated_folder_without_going_online(generated_mab_data, monkeypatch):
    monkeypatch.setenv(DATA_DIR_ENV, str(generated_mab_data))
    monkeypatch.setattr(mab_data.urllib.request, "urlopen", lambda *a, **k: pytest.fail("went online"))
    assert load_conflict_resolution(MH).source == MH
    assert load_mquake_templates().cloze["P26"] == "[X] is married to __"


def test_a_source_the_file_lacks_is_named_with_what_it_has(generated_mab_data):
    with pytest.raises(ValueError, match=f"'factconsolidation_sh_32k' is not in .*it has {MH}, {SH}"):
        load_conflict_resolution("factconsolidation_sh_32k", generated_mab_data)
    with pytest.raises(ValueError, match="source: 'factconsolidation_sh_7k' is not one of"):
        load_conflict_resolution("factconsolidation_sh_7k", generated_mab_data)


def test_a_folder_without_the_benchmark_file_names_both_ways_to_get_the_data(tmp_path):
    with pytest.raises(DataNotFoundError, match=f"has no {CONFLICT_FILE.as_posix()}.*{DATA_DIR_ENV}"):
        load_conflict_resolution(SH, tmp_path)


def test_no_configured_data_and_no_network_is_a_data_not_found_error(tmp_path, monkeypatch):
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    def offline(*args, **kwargs):
        raise urllib.error.URLError("offline")

    monkeypatch.setattr(mab_data.urllib.request, "urlopen", offline)
    mab_data._download_templates.cache_clear()
    try:
        with pytest.raises(DataNotFoundError, match="Could not download the MQuAKE template"):
            load_mquake_templates()
    finally:
        mab_data._download_templates.cache_clear()


def test_a_blank_gold_answer_is_refused_naming_the_file_and_row(tmp_path):
    bad = row(SH, [("Who is Ada Quill married to?", ["The"], None)])  # "the" normalises to ""
    folder = write_mab_data(tmp_path / "d", rows=[bad])
    with pytest.raises(
        DataError, match=r"Conflict_Resolution.json: row 0 \(factconsolidation_sh_6k\).*blank"
    ):
        load_conflict_resolution(SH, folder)


def test_a_question_template_missing_for_a_fact_relation_is_refused(generated_mab_data):
    questions = generated_mab_data / "mquake" / "question_templates.json"
    table = json.loads(questions.read_text())
    del table["P36"]
    questions.write_text(json.dumps(table))
    with pytest.raises(DataError, match="no question for the relation.*P36"):
        load_mquake_templates(generated_mab_data)


def test_every_generated_fact_and_question_parses_and_the_newest_facts_answer_them(generated_mab_data):
    templates = load_mquake_templates(generated_mab_data)
    sh = parse_source(load_conflict_resolution(SH, generated_mab_data), templates)
    assert [line.fact for line in sh.lines] == [Fact(*f) for f in FACTS]
    assert [line.serial for line in sh.lines] == list(range(len(FACTS)))
    assert [q.key for q in sh.questions] == [key for _, _, key in SH_QUESTIONS]
    cov = sh.coverage
    assert (cov.facts, cov.facts_parsed, cov.unparsed_facts) == (len(FACTS), len(FACTS), ())
    assert cov.questions == cov.questions_parsed == cov.answered_by_newest == len(SH_QUESTIONS)

    mh = parse_source(load_conflict_resolution(MH, generated_mab_data), templates)
    assert [q.hops for q in mh.questions] == [chain for _, _, chain in MH_QUESTIONS]
    assert mh.coverage.answered_by_newest == len(MH_QUESTIONS)


def test_the_more_specific_of_two_matching_templates_wins(generated_mab_data):
    parser = parser_for(load_mquake_templates(generated_mab_data))
    # "[X] is located in __" (P131) matches too; "... in the country of __" (P17) is more specific.
    assert parser.fact("Norvik is located in the country of Eldmark.") == Fact("Norvik", "P17", "Eldmark")
    assert parser.fact("Ostra is located in Vesland.") == Fact("Ostra", "P131", "Vesland")
    assert parser.fact("Nothing matches this sentence.") is None


def test_unparsed_facts_and_questions_are_kept_and_counted(tmp_path):
    rows = [row(SH, [*SH_QUESTIONS, ("Why is the sky blue?", ["Rayleigh"], None)])]
    rows[0]["context"] = rows[0]["context"].replace(
        "\n3. Norvik is located in the country of Eldmark.", "\n3. ???"
    )
    folder = write_mab_data(tmp_path / "d", rows=rows)
    env = _sh(folder)
    observations = [obs for task in env.tasks() for obs in task.observe]
    assert (observations[3].key, observations[3].value, observations[3].text) == (None, "???", "3. ???")
    assert env.coverage.unparsed_facts == ("3. ???",)
    assert env.coverage.unparsed_questions == ("Why is the sky blue?",)
    # Norvik's country was only in the unparsed fact: that question parses but nothing answers it.
    assert env.coverage.questions_parsed == len(SH_QUESTIONS)
    assert env.coverage.answered_by_newest == len(SH_QUESTIONS) - 1


def test_serial_numbers_that_do_not_increase_are_a_data_error_naming_the_row(tmp_path):
    rows = [row(SH, SH_QUESTIONS)]
    rows[0]["context"] = rows[0]["context"].replace("\n4. ", "\n2. ")
    folder = write_mab_data(tmp_path / "d", rows=rows)
    with pytest.raises(DataError, match=r"row 0 \(factconsolidation_sh_6k\): context: fact serial numbers"):
        _sh(folder)


def test_the_environment_ingests_every_fact_once_then_asks_the_questions(generated_mab_data):
    env = _sh(generated_mab_data, chunk_size=12)
    assert isinstance(env, Environment) and env.name == "memoryagentbench"
    tasks = list(env.tasks())
    ingest = [t for t in tasks if t.phase == "ingest"]
    questions = [t for t in tasks if t.phase == "questions"]
    assert tasks == ingest + questions and len(ingest) > 1 and len(env) == len(SH_QUESTIONS)
    observations = [obs for task in ingest for obs in task.observe]
    assert [obs.t for obs in observations] == list(range(len(FACTS)))
    assert [(obs.key, obs.value) for obs in observations] == [((s, r), o) for s, r, o in FACTS]
    assert all(not t.decide and t.t == t.observe[0].t for t in ingest)
    assert [q.t for q in questions] == list(range(len(FACTS), len(FACTS) + len(SH_QUESTIONS)))
    first = questions[0]
    assert (first.key, first.correct, first.instructions) == (("Ada Quill", "P26"), "Cato Wren", INSTRUCTIONS)
    assert first.meta == {"golds": ["Cato Wren"], "qa_pair_id": f"{SH}_no0"}
    assert env.phase_boundaries == [(len(FACTS), "questions")]
    assert set(env.provenance) == {"source_row_sha256", "templates_sha256"}
    assert len(_sh(generated_mab_data, chunk_size=100_000)._ingest) == 1


def test_answers_are_scored_with_the_upstream_substring_match(generated_mab_data):
    env = _sh(generated_mab_data)
    capital = next(t for t in env.tasks() if t.key == ("Eldmark", "P36"))
    assert env.execute(capital, "Answer: the city of Halden.").success
    assert env.execute(capital, "HALDEN CITY").success
    assert not env.execute(capital, "Norvik").success  # the older, overwritten fact
    ingest = next(iter(env.tasks()))
    with pytest.raises(ValueError, match="only question tasks"):
        env.execute(ingest, "Halden")
    with pytest.raises(ValueError, match="action: expected the answer text"):
        env.execute(capital, 7)


def test_truth_and_trials_see_only_the_facts_shown_so_far(generated_mab_data):
    env = _sh(generated_mab_data, chunk_size=1)  # one fact per chunk
    spouse = ("Ada Quill", "P26")
    seen = []
    for task in env.tasks():
        if task.phase != "ingest":
            break
        seen.append(env.truth(spouse))
    assert seen[:5] == ["Bram Toll"] * 5 and seen[5:] == ["Cato Wren"] * (len(FACTS) - 5)
    assert env.truth(("Nobody", "P26")) is None and env.truth(["unhashable"]) is None
    old = type("Precedent", (), {"key": spouse, "value": "Bram Toll"})()
    assert not env.trial(old, "support") and env.trial(old, "contamination")
    with pytest.raises(ValueError, match="kind"):
        env.trial(old, "nonsense")


def test_the_multi_hop_stream_carries_each_chain_with_its_question_templates(generated_mab_data):
    env = MemoryAgentBench(MH, data_dir=generated_mab_data)
    questions = [t for t in env.tasks() if t.phase == "questions"]
    hop = questions[0].multi_hop
    assert (hop.subject, hop.relations) == ("Ada Quill", ("P26", "P19"))
    assert hop.questions == (mab_fixture.QUESTION["P26"], mab_fixture.QUESTION["P19"])
    assert questions[0].key is None and questions[0].correct == "Halden"


def test_changed_data_changes_the_provenance(generated_mab_data, tmp_path):
    before = _sh(generated_mab_data).provenance
    rows = json.loads((generated_mab_data / CONFLICT_FILE).read_text())
    rows[0]["answers"][0] = ["Cato"]
    other = write_mab_data(tmp_path / "other", rows=rows)
    after = _sh(other).provenance
    assert after["source_row_sha256"] != before["source_row_sha256"]
    assert after["templates_sha256"] == before["templates_sha256"]


def test_a_run_on_the_generated_folder_logs_every_question_with_its_score(generated_mab_data, tiny_run):
    results = tiny_run("env=memoryagentbench", f"env.data_dir={generated_mab_data}", "memory=lww")
    logs = list(results.rglob(EPISODES))
    assert len(logs) == 1 and "memoryagentbench_sh_6k" in str(logs[0])
    episodes = pq.read_table(logs[0]).to_pylist()
    questions = [e for e in episodes if e.get("phase") == "questions"]
    assert len(questions) == len(SH_QUESTIONS)

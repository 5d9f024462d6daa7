"""Memory-level metrics from the logged sample: each definition on hand-made logs with known answers,
a stream where Append-Only's stale share is known exactly, that the metrics never read the reply, and
that logs without a sample (or without truth) still analyse, with the metrics marked unavailable."""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.data.load import load_runs
from analysis.metrics import memory_quality as mq
from analysis.metrics.compute import OVERALL, analyse
from analysis.report.memory_report import section
from analysis.streamlog.encoding import parquet_bytes
from analysis.streamlog.record import QUALITY, SAMPLE
from analysis.streamlog.staleness import episode_quality, is_stale
from analysis.streamlog.stream import EPISODES, StreamLog
from baselines.append_only import AppendOnly
from envs.base import EnvironmentBase, Outcome, Task
from runners.agent.loop import run_stream
from runners.agent.sample import evidence_json
from runners.llm.backend import Reply, Request
from tepa.evidence import Evidence, Observation


def line(t: int, holds: bool, value: str, support: int | None = None) -> Evidence:
    return Evidence("k", value, holds, t, support=support, conflict=None if support is None else 0)


def columns(rows: list[dict[str, object]]) -> dict[str, np.ndarray]:
    """The analysis' EPISODE_COLUMNS of logged QUALITY fields."""
    return mq.episode_columns(pa.Table.from_pylist(rows))


def quality(hops: list[list[Evidence]], truths: list[str | None]) -> dict[str, float]:
    """One decision's EPISODE_COLUMNS as the loop logs them and the analysis reads them."""
    got = columns([episode_quality(hops, truths), episode_quality([[]], ["x"])])
    return {name: float(values[0]) for name, values in got.items()}


# ----------------------------------------------------------------------------------- the definitions


def test_a_line_is_current_when_its_verdict_agrees_with_the_truth_and_stale_otherwise():
    hop = [
        line(0, True, "a"),
        line(1, True, "b"),
        line(2, False, "a"),
        line(3, False, "b"),
        line(4, False, "c"),
    ]
    got = quality([hop], ["b"])
    # VALID b and FAILED a, FAILED c agree with the truth b; VALID a and FAILED b do not
    assert (got["current"], got["stale"]) == (3, 2)
    assert got["truth_present"] == 1 and got["stale_present"] == 1
    assert got["polluted"] == 0  # one VALID line for another value against one for the truth


def test_pollution_counts_a_decision_whose_stale_valid_lines_outnumber_the_true_ones():
    hop = [line(0, True, "a"), line(1, True, "a"), line(2, True, "b"), line(3, False, "b")]
    got = quality([hop], ["b"])
    assert (got["current"], got["stale"]) == (1, 3)
    assert (got["truth_present"], got["stale_present"], got["polluted"]) == (1, 1, 1)
    assert quality([[line(0, False, "a")]], ["b"])["polluted"] == 0  # FAILED lines assert nothing


def test_an_empty_prompt_has_no_lines_and_neither_truth_nor_stale_present():
    assert quality([[]], ["b"]) == dict.fromkeys(mq.EPISODE_COLUMNS, 0.0)


def test_hops_whose_truth_is_null_count_no_lines_and_an_episode_without_any_truth_has_no_rates():
    two = [[line(0, True, "x"), line(1, True, "y")], [line(2, True, "z")]]
    got = quality(two, [None, "z"])
    assert (got["current"], got["stale"], got["truth_present"], got["polluted"]) == (1, 0, 1, 0)
    nothing = quality(two, [None, None])
    assert (nothing["current"], nothing["stale"]) == (0, 0)
    assert all(math.isnan(nothing[c]) for c in ("truth_present", "stale_present", "polluted"))


def test_a_multi_hop_episode_sums_its_hops_and_is_polluted_when_one_hop_is():
    hops = [[line(0, True, "x")], [line(1, True, "old"), line(2, True, "old"), line(3, True, "new")]]
    got = quality(hops, ["x", "new"])
    assert (got["current"], got["stale"], got["truth_present"], got["stale_present"], got["polluted"]) == (
        2,
        2,
        1,
        1,
        1,
    )


def test_an_environment_that_reports_no_truth_leaves_every_column_empty():
    logged = episode_quality([[line(0, True, "a")]], None)
    assert logged == dict.fromkeys(QUALITY, False) | {"current": 0, "stale": 0}
    assert all(np.isnan(values).all() for values in columns([logged, logged]).values())


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        ("current", "3", "column current must hold integers"),
        ("polluted", 1, "column polluted must hold booleans"),
        ("truth_known", None, "column truth_known has 1 null value"),
    ],
)
def test_a_malformed_quality_column_is_a_value_error_naming_it(column, value, message):
    rows = [episode_quality([[line(0, True, "a")]], ["a"]) for _ in range(2)]
    for row in rows if value is not None else rows[1:]:  # a column of the wrong type, or one null
        row[column] = value
    with pytest.raises(ValueError, match=f"^{message}"):
        columns(rows)


values = st.one_of(
    st.sampled_from(
        ["a", "b", "VALID", "FAILED", 'q"uote', "back\\slash", "]],[", "[],", "x,", "é", "tab\t"]
    ),
    st.text(max_size=6),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.booleans(), values, st.one_of(st.none(), st.integers(0, 9))), max_size=6),
        min_size=1,
        max_size=3,
    ),
    st.data(),
)
def test_the_logged_counts_agree_with_counting_the_logged_evidence_text_by_hand(hops, data):
    """What the loop logs in QUALITY is what the logged `evidence` and `truth` texts give by hand."""
    evidence = [
        [line(i, holds, value, support) for i, (holds, value, support) in enumerate(hop)] for hop in hops
    ]
    truths = [
        data.draw(st.one_of(st.none(), values, st.sampled_from([e.value for e in hop] or ["a"])))
        for hop in evidence
    ]
    got = quality(evidence, truths)
    texts = json.loads(evidence_json(evidence)), json.loads(json.dumps(truths, ensure_ascii=False))
    expected = _by_hand(*texts)
    assert np.allclose([got[name] for name in mq.EPISODE_COLUMNS], expected, equal_nan=True)


def _by_hand(hops: list[list[list]], truths: list[str | None]) -> tuple[float, ...]:
    """The module docstring's definitions over parsed `evidence` lines [t, verdict, value, ...]."""
    known = [(hop, v) for hop, v in zip(hops, truths, strict=True) if v is not None]
    if not known:
        return (0.0, 0.0, math.nan, math.nan, math.nan)
    current = sum(not is_stale(e[1], e[2], v) for hop, v in known for e in hop)
    stale = sum(len(hop) for hop, _ in known) - current
    true = [sum(e[1] == "VALID" and e[2] == v for e in hop) for hop, v in known]
    other = [sum(e[1] == "VALID" and e[2] != v for e in hop) for hop, v in known]
    return (current, stale, any(true), any(other), any(o > t for o, t in zip(other, true, strict=True)))


# ------------------------------------------------------------- a stream with a known stale share


class NoTruth(EnvironmentBase):
    """One key, options (a, b); the world holds "a" for three decisions, then "b" for three. It does
    not report the truth (not an `envs.base.TruthEnvironment`)."""

    name = "one_key"

    def reset(self, seed: int) -> None:
        self.now = 0

    def holds(self) -> str:
        return "a" if self.now < 3 else "b"

    def tasks(self) -> Iterator[Task]:
        for t in range(6):
            self.now = t
            phase = "first" if t < 3 else "second"
            yield Task(key="k", text="pick", phase=phase, t=t, options=("a", "b"), correct=self.holds())

    def execute(self, task: Task, action: str) -> Outcome:
        ok = action == task.correct
        return Outcome(
            ok, (Observation("k", action, ok, task.t, f"{action} {'worked' if ok else 'failed'}"),)
        )

    @property
    def phase_boundaries(self) -> list[tuple[int, str]]:
        return [(3, "second")]

    def trial(self, precedent: Any, kind: str) -> bool:
        return False

    def __len__(self) -> int:
        return 6


class OneKey(NoTruth):
    """The same stream, reporting the truth."""

    def truth(self, key: Any) -> str | None:
        return self.holds() if key == "k" else None


class AlwaysA:
    """A reader that always picks the first option, whatever the prompt holds."""

    name = "always_a"
    operational = frozenset()

    def __init__(self, reply: str = "Answer: A") -> None:
        self.reply = reply

    async def complete(self, request: Request) -> Reply:
        return Reply(text=self.reply)

    def stats(self) -> dict:
        return {}

    async def aclose(self) -> None:
        pass


def write_run(root: Path, records: list[dict], memory: str = "append_only", seed: int = 0) -> Path:
    """A complete stream directory as the runner writes it."""
    log = StreamLog(
        root / "runs" / "toy" / "one_key" / memory / f"seed={seed}", {"seed": seed, "memory": memory}
    )
    log.finish(records, [], {"experiment": "toy", "env": "one_key", "memory": memory, "seed": seed})
    return log.dir


def one_key_records(
    env: OneKey | None = None, memory: str = "append_only", seed: int = 0, reply: str = "Answer: A"
) -> list[dict]:
    labels = {"experiment": "toy", "env": "one_key", "memory": memory}
    result = asyncio.run(run_stream(env or OneKey(), AppendOnly(), AlwaysA(reply), seed=seed, labels=labels))
    return result.records


def test_append_only_stale_share_on_a_stream_with_a_known_answer(tmp_path):
    # Always picking "a": three VALID a lines pile up, then the world holds b and FAILED a lines follow.
    # Decisions 3, 4, 5 hold 3 stale VALID a lines each, and 0, 1, 2 current FAILED a lines: 9 / 12.
    for seed in (0, 1):
        write_run(tmp_path, one_key_records(seed=seed), seed=seed)
    logs = load_runs(tmp_path / "runs")
    episodes = logs.episodes[logs.episodes["seed"] == 0]
    assert episodes["stale"].tolist() == [0, 0, 0, 3, 3, 3]
    assert episodes["current"].tolist() == [0, 1, 2, 0, 1, 2]
    memory = analyse(logs).memory
    cell = memory[(memory["phase"] == "second")].set_index("metric")["mean"]
    assert cell["stale_share"] == pytest.approx(0.75)
    assert (cell["truth_present"], cell["stale_present"], cell["pollution"]) == (0, 1, 1)
    first = memory[(memory["phase"] == "first")].set_index("metric")["mean"]
    assert first["stale_share"] == 0 and first["truth_present"] == pytest.approx(2 / 3)
    overall = memory[(memory["phase"] == OVERALL)].set_index("metric")["mean"]
    assert overall["stale_share"] == pytest.approx(9 / 15)


def test_the_metrics_never_read_the_reply_the_action_or_the_success(tmp_path):
    records = one_key_records()
    scrambled = [
        r | {"reply": "Answer: B", "action": "b", "success": not r["success"], "parse_ok": False}
        for r in records
    ]
    write_run(tmp_path / "one", records)
    write_run(tmp_path / "two", scrambled)
    columns = list(mq.EPISODE_COLUMNS)
    one = load_runs(tmp_path / "one" / "runs").episodes[columns]
    two = load_runs(tmp_path / "two" / "runs").episodes[columns]
    pd.testing.assert_frame_equal(one, two)


def test_the_loop_logs_options_evidence_and_truth_per_hop_in_the_agreed_format():
    records = one_key_records()
    assert [json.loads(r["options"]) for r in records] == [["a", "b"]] * 6
    assert json.loads(records[4]["evidence"]) == [
        [
            [0, "VALID", "a", None, None],
            [1, "VALID", "a", None, None],
            [2, "VALID", "a", None, None],
            [3, "FAILED", "a", None, None],
        ]
    ]
    assert [json.loads(r["truth"]) for r in records] == [["a"]] * 3 + [["b"]] * 3
    assert all(r["prompt"] == "" for r in records)
    assert all(len(json.loads(r["evidence"])[0]) == r["n_evidence"] for r in records)


def test_log_prompts_keeps_the_messages_sent_and_changes_no_other_column():
    labels = {"experiment": "toy", "env": "one_key", "memory": "append_only"}
    sent: list[Any] = []

    class Recording(AlwaysA):
        async def complete(self, request: Request) -> Reply:
            sent.append([dict(m) for m in request.messages])
            return await super().complete(request)

    plain = one_key_records()
    logged = asyncio.run(
        run_stream(OneKey(), AppendOnly(), Recording(), seed=0, labels=labels, log_prompts=True)
    ).records
    assert [json.loads(r["prompt"]) for r in logged] == [[m] for m in sent]
    assert [{k: v for k, v in r.items() if k != "prompt"} for r in logged] == [
        {k: v for k, v in r.items() if k != "prompt"} for r in plain
    ]


# ------------------------------------------------------------------- logs the metrics cannot use


def test_a_log_written_before_the_sample_existed_analyses_with_memory_metrics_unavailable(tmp_path, caplog):
    old = [{k: v for k, v in r.items() if k not in (*SAMPLE, *QUALITY)} for r in one_key_records()]
    write_run(tmp_path, old)
    with caplog.at_level(logging.WARNING):
        logs = load_runs(tmp_path / "runs")
    warnings = [r.getMessage() for r in caplog.records if "memory metrics" in r.getMessage()]
    why = "logged before episodes recorded what their prompts held"
    assert warnings == [f"memory metrics unavailable for 1 of 1 run(s): {why}"]
    assert logs.episodes[list(mq.EPISODE_COLUMNS)].isna().all().all()
    analysis = analyse(logs)
    assert analysis.memory.empty and not analysis.success.empty
    assert (
        "Memory metrics are unavailable: toy (runs logged before episodes recorded their evidence, or an "
        "environment that reports no truth)." in section(analysis)
    )


def test_an_environment_without_truth_logs_an_empty_truth_and_gets_no_memory_metrics(tmp_path, caplog):
    records = one_key_records(NoTruth())
    assert all(r["truth"] == "" for r in records) and json.loads(records[1]["evidence"])
    write_run(tmp_path, records)
    with caplog.at_level(logging.WARNING):
        logs = load_runs(tmp_path / "runs")
    assert any("their environment reports no truth" in r.getMessage() for r in caplog.records)
    assert logs.runs["sample"].tolist() == [mq.NO_TRUTH]
    assert analyse(logs).memory.empty


def test_a_malformed_quality_column_stops_the_analysis_with_one_line_naming_the_file(tmp_path):
    records = one_key_records()
    records = [r | {"stale": str(r["stale"])} for r in records]
    run = write_run(tmp_path, records)
    with pytest.raises(ValueError, match=rf"^{run / EPISODES}: column stale must hold integers$"):
        load_runs(tmp_path / "runs")


def test_the_columns_before_the_sample_are_written_as_they_were_without_it(tmp_path):
    """The sample columns are compressed apart; every column before them keeps its bytes and encodings."""
    records = one_key_records()
    without = [{k: v for k, v in r.items() if k not in (*SAMPLE, *QUALITY)} for r in records]
    new, old = (
        pq.ParquetFile(pa.BufferReader(parquet_bytes(r))).metadata.row_group(0) for r in (records, without)
    )
    for i in range(old.num_columns):
        a, b = old.column(i), new.column(i)
        assert (a.path_in_schema, a.total_compressed_size, a.encodings) == (
            b.path_in_schema,
            b.total_compressed_size,
            b.encodings,
        )


class SharedList(AppendOnly):
    """Hands out its own list of the key's items: acting on the decision appends to it afterwards."""

    def retrieve(self, query):
        return self._by_key.setdefault(query.key, [])


def test_the_logged_evidence_is_what_the_prompt_held_even_if_acting_changes_the_memorys_lists():
    labels = {"experiment": "toy", "env": "one_key", "memory": "shared"}
    records = asyncio.run(run_stream(OneKey(), SharedList(), AlwaysA(), seed=0, labels=labels)).records
    assert [len(json.loads(r["evidence"])[0]) for r in records] == [0, 1, 2, 3, 4, 5]


def test_a_multi_hop_question_logs_each_hops_evidence_and_the_truth_of_the_key_it_reached():
    from tests.test_loop import TwoHops

    class KnownChain(TwoHops):
        asked: list = []

        def truth(self, key: Any) -> str | None:
            self.asked.append(key)
            return {("a", "r1"): "b", ("b", "r2"): "new c"}.get(key)

    env = KnownChain()
    (rec,) = asyncio.run(run_stream(env, AppendOnly(), AlwaysA("Answer: b"), seed=0, labels={})).records
    assert env.asked == [("a", "r1"), ("b", "r2")]  # the entity reached at hop 1 keys hop 2
    assert json.loads(rec["truth"]) == ["b", "new c"]
    assert json.loads(rec["evidence"]) == [[[0, "VALID", "b", None, None]], [[1, "VALID", "c", None, None]]]
    assert (rec["current"], rec["stale"], rec["polluted"]) == (1, 1, True)
    assert _by_hand(json.loads(rec["evidence"]), json.loads(rec["truth"])) == (1, 1, True, True, True)


def test_the_partial_log_leaves_out_the_sample_which_replay_rebuilds(tmp_path):
    records = one_key_records()
    log = StreamLog(tmp_path / "seed=0", {"seed": 0})
    log.open([])
    for record in records:
        log.append(record, [])
    log.close()
    lines = [json.loads(x) for x in (log.dir / "episodes.partial.jsonl").read_text().splitlines()[1:]]
    assert lines == [{k: v for k, v in r.items() if k not in SAMPLE} for r in records]
    labels = {"experiment": "toy", "env": "one_key", "memory": "append_only"}
    resumed = asyncio.run(
        run_stream(OneKey(), AppendOnly(), AlwaysA(), seed=0, labels=labels, replay=lines[:4])
    )
    assert resumed.records == records


def test_log_samples_false_leaves_out_what_the_prompt_held_and_changes_no_other_column(tmp_path, caplog):
    labels = {"experiment": "toy", "env": "one_key", "memory": "append_only"}
    logged = one_key_records()
    plain = asyncio.run(
        run_stream(OneKey(), AppendOnly(), AlwaysA(), seed=0, labels=labels, log_samples=False)
    ).records
    left_out = {"options", "evidence", "truth", *QUALITY}
    assert [set(r) for r in plain] == [set(r) - left_out for r in logged]
    assert plain == [{k: v for k, v in r.items() if k not in left_out} for r in logged]
    write_run(tmp_path, plain)
    with caplog.at_level(logging.WARNING):
        assert load_runs(tmp_path / "runs").runs["sample"].tolist() == [mq.NOT_LOGGED]


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_the_incremental_sampler_logs_what_encoding_and_counting_each_prompt_whole_gives(data):
    """A stream of decisions whose hops grow by appending (Append-Only's), are cut, reordered or rebuilt
    as equal but new objects, under truths that change: the sampler's evidence text and QUALITY fields
    are those of `evidence_json` and `episode_quality` at every decision."""
    from runners.agent.sample import Sampler

    sampler = Sampler()
    pool = [line(i, data.draw(st.booleans()), data.draw(values)) for i in range(3 * Sampler.SHORT)]
    hop: list = []
    for _ in range(data.draw(st.integers(1, 12))):
        move = data.draw(st.sampled_from(["grow", "grow", "cut", "swap", "copy", "empty"]))
        if move == "grow":
            hop = hop + pool[len(hop) : len(hop) + data.draw(st.integers(0, Sampler.SHORT))]
        elif move == "cut":
            hop = hop[: data.draw(st.integers(0, len(hop)))]
        elif move == "swap" and len(hop) > 1:
            hop = [hop[1], hop[0], *hop[2:]]
        elif move == "copy":
            hop = [e._replace() for e in hop]  # equal items, other objects
        elif move == "empty":
            hop = []
        truths = [data.draw(st.one_of(st.none(), values, st.sampled_from([e.value for e in hop] or ["a"])))]
        short = pool[: data.draw(st.integers(0, 3))]  # a second hop, short, with its own truth
        hops, truths = [hop, short], [*truths, data.draw(st.one_of(st.none(), values))]
        assert sampler.sample(hops, truths) == (evidence_json(hops), episode_quality(hops, truths))
        assert sampler.sample(hops, None) == (evidence_json(hops), episode_quality(hops, None))

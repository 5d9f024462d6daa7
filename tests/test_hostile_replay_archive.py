"""Replayed values out of range, once accepted silently or a traceback: a resumed reply longer than the
config's `max_reply_chars` (it reached the final parquet), an archive.jsonl with valid checksums holding
an `id` of 2**70, a text `t`, a JSON array for a line or a `t` of 1e300 (tracebacks in the analysis and
the inspector, or accepted), an episode `t` of 2**62, and a malformed map.json (tracebacks in
`python -m analysis.map`). A resume log is now kept aside as damaged and its valid prefix replayed; the
others are one line naming the file."""

from __future__ import annotations

import json
import logging
import re

import pandas as pd
import pyarrow as pa
import pytest

from analysis.__main__ import main as analyse
from analysis.inspect import main as inspect
from analysis.map.__main__ import main as analyse_map
from analysis.streamlog.stream import ARCHIVE, EPISODES, PARTIAL_EPISODES, StreamLog
from runners.agent.loop import replay_problem
from tests.helpers.runner import run_overrides
from tests.test_analysis_outputs import reseal, write_run
from tests.test_map_report import SPEC

DEEP = "[" * 100_000 + "]" * 100_000

# ----------------------------------------------------------------------------- a resumed long reply

LIMIT = 20_000
IDENTITY = {"llm": {"option": "openai", "max_reply_chars": LIMIT}, "seed": 0}


def _episode(t: int, reply: str = "Answer: A", **fields) -> dict:
    return {"t": t, "action": "a", "reply": reply, "prompt_tokens": 5, "completion_tokens": 1}| {
        "latency": 0.0, "cached": False, **fields,
    }  # fmt: skip


def _partial(tmp_path, episodes: list[dict]) -> StreamLog:
    slog = StreamLog(tmp_path / "seed=0", IDENTITY)
    slog.open(episodes)
    slog.close()
    return slog


@pytest.mark.parametrize(
    "long",
    [_episode(2, "A" * 900_010), _episode(2, hop_replies=json.dumps(["A", "B" * (LIMIT + 1), "C"]))],
    ids=["a reply", "a hop's reply"],
)
def test_a_replayed_reply_over_max_reply_chars_is_kept_aside_and_its_prefix_replays(tmp_path, caplog, long):
    slog = _partial(tmp_path, [_episode(0), _episode(1, "A" * LIMIT), long, _episode(3)])
    with caplog.at_level(logging.WARNING):
        replayed = slog.replay(replay_problem)
    assert [r["t"] for r in replayed] == [0, 1]  # a reply exactly at the limit (a cut one) replays
    [line] = [r.getMessage() for r in caplog.records]
    assert "line 4 is a reply of" in line and "max_reply_chars 20000" in line and "kept as" in line
    assert not (slog.dir / PARTIAL_EPISODES).exists()
    assert len(list(slog.dir.glob(f"{PARTIAL_EPISODES}.damaged-*"))) == 1


def test_a_log_whose_config_sets_no_reply_limit_replays_long_replies(tmp_path):
    slog = StreamLog(tmp_path / "seed=0", {"llm": {"option": "simulated"}, "seed": 0})
    slog.open([_episode(0, "A" * 900_010)])
    slog.close()
    assert len(slog.replay(replay_problem)) == 1


# ------------------------------------------------------------------------- a hostile archive.jsonl

HOSTILE_EVENTS = {
    "id 2**70": json.dumps({"t": 3, "event": "promoted", "id": 2**70}),
    "a text t": '{"t": "3", "event": "promoted", "id": 1}',
    "a JSON array": "[1, 2, 3]",
    "t 1e300": '{"t": 1e300, "event": "promoted", "id": 1}',
    "a negative t": '{"t": -1, "event": "promoted", "id": 1}',
    "t 2**62": json.dumps({"t": 2**62, "event": "promoted", "id": 1}),
    "a negative id": '{"t": 3, "event": "promoted", "id": -4}',
}


def _damage_archive(run, line: str) -> str:
    path = run / ARCHIVE
    path.write_text(path.read_text() + line + "\n")
    reseal(run)  # checksums as the file is now: the analysis must check what it reads
    return str(path)


def _damage_step(run) -> str:
    path = run / EPISODES
    frame = pd.read_parquet(path)
    frame.loc[3, "t"] = 2**62
    frame.to_parquet(path)
    reseal(run)
    return str(path)


@pytest.fixture
def runs(tmp_path):
    root = tmp_path / "runs"
    for memory in ("no_memory", "tepa_rev"):
        write_run(root, "exp", "controlled_drift", memory, 0)
    return root


def _analysis_error(runs, out, caplog) -> str:
    with caplog.at_level(logging.ERROR, logger="analysis"):
        assert analyse(["--runs", str(runs), "--out", str(out), "--quiet"]) == 2
    [error] = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert "\n" not in error
    assert not out.exists() or not any(out.iterdir())
    return error


@pytest.mark.parametrize("line", HOSTILE_EVENTS.values(), ids=HOSTILE_EVENTS)
def test_an_archive_line_out_of_range_is_one_line_naming_the_archive(runs, tmp_path, caplog, line):
    path = _damage_archive(next(runs.rglob("tepa_rev/seed=0")), line)
    assert path in _analysis_error(runs, tmp_path / "out", caplog)


def test_an_episode_step_of_2_62_is_one_line_naming_the_episode_log(runs, tmp_path, caplog):
    path = _damage_step(next(runs.rglob("no_memory/seed=0")))
    error = _analysis_error(runs, tmp_path / "out", caplog)
    assert path in error and "t 4611686018427387904 is out of range" in error


# ----------------------------------------------------------------------------------- the inspector


@pytest.fixture(scope="module")
def stream_logs(tmp_path_factory):
    results = tmp_path_factory.mktemp("stream")
    summary = run_overrides(
        f"results_dir={results}", "env.phase_length=5", "memory=tepa_rev", "progress=false"
    )
    directory = summary.streams[0].directory
    return {name: (directory / name).read_bytes() for name in (EPISODES, ARCHIVE, "meta.json")}


@pytest.fixture
def stream(tmp_path, stream_logs):
    for name, data in stream_logs.items():
        (tmp_path / name).write_bytes(data)
    return tmp_path


def _inspector_error(capsys, stream) -> str:
    assert inspect([str(stream), "--t", "3"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1, error
    return error


@pytest.mark.parametrize("line", HOSTILE_EVENTS.values(), ids=HOSTILE_EVENTS)
def test_the_inspector_refuses_an_archive_line_out_of_range_in_one_line(stream, capsys, line):
    path = _damage_archive(stream, line)
    assert path in _inspector_error(capsys, stream)


def test_the_inspector_refuses_an_archive_field_nested_100k_deep_in_one_line(stream, capsys):
    path = _damage_archive(stream, '{"t": 3, "event": "promoted", "id": 1, "value": ' + DEEP + "}")
    assert path in _inspector_error(capsys, stream)


def test_the_inspector_refuses_an_episode_step_of_2_62_in_one_line(stream, capsys):
    path = _damage_step(stream)
    assert path in _inspector_error(capsys, stream)


def test_the_inspector_still_reads_an_intact_stream(stream, capsys):
    assert inspect([str(stream), "--t", "3"]) == 0


# ------------------------------------------------------------------------------- a malformed map.json

BAD_MAPS = {
    "a list": "[]",
    "an empty object": "{}",
    "axes a number": json.dumps({**SPEC, "axes": 5}),
    "an axis of texts": json.dumps({**SPEC, "axes": {"env.noise": ["a"]}}),
    "methods a text": json.dumps({**SPEC, "methods": "lww"}),
    "a method without defaults": json.dumps({**SPEC, "methods": [*SPEC["methods"], "mem0"]}),
    "a tuning grid of a number": json.dumps({**SPEC, "tune": {"reactive": 3}}),
    "seeds of texts": json.dumps({**SPEC, "eval_seeds": ["0"]}),
    "100k-deep nesting": DEEP,
}


@pytest.mark.parametrize("text", BAD_MAPS.values(), ids=BAD_MAPS)
def test_a_malformed_map_json_is_one_line_naming_it(tmp_path, capsys, text):
    (tmp_path / "map.json").write_text(text)
    assert analyse_map(["--out", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and f"{tmp_path / 'map.json'}: " in error, error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["map.json"]


def test_the_map_the_driver_writes_reads(tmp_path):
    from analysis.map.runs import read_map

    (tmp_path / "map.json").write_text(json.dumps({**SPEC, "max_episodes": None, "evidence_budget": 4}))
    assert read_map(tmp_path / "map.json")["axes"] == SPEC["axes"]


def test_the_maps_revocation_count_refuses_a_line_nested_100k_deep_naming_the_archive(tmp_path):
    from analysis.map.runs import _revocations

    (tmp_path / ARCHIVE).write_text('["revoked"]\n{"event": "revoked", "x": ' + DEEP + "}\n")
    table = pa.table({"t": [0], "correct": ["a"]})
    with pytest.raises(ValueError, match=re.escape(str(tmp_path / ARCHIVE))):
        _revocations(tmp_path, table)

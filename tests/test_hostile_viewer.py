"""The transcript viewer (`python -m analysis.view`) against addresses it cannot resolve, names that are
also JavaScript object members, broken meta.json files and hostile archives with valid checksums."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from analysis.streamlog.stream import file_record
from analysis.view.__main__ import main
from tests.test_view import EVENTS, open_page, write_stream


def _index(page: Path) -> dict:
    """The runs table the page embeds."""
    found = re.search(r'<script type="application/json" id="index">(.*?)</script>', page.read_text())
    assert found is not None
    return json.loads(found.group(1))


def _reseal(run: Path) -> None:
    """Record the files' checksums in meta.json again, as the runner would have."""
    meta = json.loads((run / "meta.json").read_text())
    for name, record in meta["files"].items():
        record.update(file_record((run / name).read_bytes(), record["rows"]))
    (run / "meta.json").write_text(json.dumps(meta))


def _build(root: Path, folder: Path) -> tuple[Path, dict]:
    out = root / "view.html"
    assert main([str(folder), "--out", str(out)]) == 0
    return out, _index(out)


# --- addresses ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def experiment_page(tmp_path_factory) -> Path:
    """The page of two streams built from the experiment's folder (runs/exp), as the README's
    `results/runs/paper_controlled`."""
    root = tmp_path_factory.mktemp("logs")
    write_stream(root, "lww")
    write_stream(root, "tepa_rev", events=EVENTS)
    out = root / "view.html"
    assert main([str(root / "runs" / "exp"), "--out", str(out)]) == 0
    return out


def test_an_address_the_page_cannot_resolve_says_run_not_found_and_shows_no_other_run(experiment_page):
    dom = open_page(experiment_page, "run=exp/controlled_drift/nope/seed=0&t=25")
    assert dom.text["run-missing"].startswith("run not found: exp/controlled_drift/nope/seed=0")
    stream = next(attrs for tag, attrs, _ in dom.elements if attrs.get("id") == "stream")
    assert "hidden" in stream  # not the first run in its place


@pytest.mark.parametrize(
    "address",
    [
        "exp/controlled_drift/tepa_rev/seed=0",  # the README's form: from the runs folder
        "controlled_drift/tepa_rev/seed=0",  # relative to the folder the page was built from
        "runs/exp/controlled_drift/tepa_rev/seed=0",
    ],
)
def test_the_readme_address_forms_open_their_run_on_a_page_built_from_the_experiment_folder(
    experiment_page, address
):
    dom = open_page(experiment_page, f"run={address}&t=25")
    assert dom.text["stream-title"].startswith("exp / controlled_drift / tepa_rev / seed 0")
    assert "Step 25, phase return" in dom.text["ep-title"]
    assert not dom.text.get("run-missing", "")


def test_a_cfg_configuration_shows_the_keys_it_differs_in_next_to_its_name(tmp_path):
    for name, theta in (("cfg-644bd62099a1", 0.3), ("cfg-0123456789ab", 0.5)):
        run = write_stream(tmp_path / name, "tepa_rev")
        meta = json.loads((run / "meta.json").read_text())
        meta |= {"variant": name, "overrides": {"memory.theta_rev": theta, "llm.model": "m,1"}}
        (run / "meta.json").write_text(json.dumps(meta))
        target = tmp_path / "runs" / "exp" / "controlled_drift" / "tepa_rev" / name / "seed=0"
        target.parent.mkdir(parents=True)
        shutil.move(run, target)
    out, index = _build(tmp_path, tmp_path / "runs")
    configs = sorted(r["config"] for r in index["runs"])
    assert configs == ["cfg-0123456789ab (memory.theta_rev=0.5)", "cfg-644bd62099a1 (memory.theta_rev=0.3)"]
    dom = open_page(out, "run=exp/controlled_drift/tepa_rev/cfg-644bd62099a1/seed=0")
    assert "cfg-644bd62099a1 (memory.theta_rev=0.3)" in dom.text["runs"]
    assert "tepa_rev / cfg-644bd62099a1 (memory.theta_rev=0.3) / seed 0" in dom.text["stream-title"]


# --- names that are object members --------------------------------------------------------------------


def test_a_phase_named_like_an_object_member_in_one_stream_only_does_not_blank_the_page(tmp_path):
    renamed = {"lww": ("constructor", "toString"), "tepa_rev": ("__proto__", "stable")}
    for memory, (first, second) in renamed.items():
        run = write_stream(tmp_path, memory, events=EVENTS if memory == "tepa_rev" else ())
        frame = pd.read_parquet(run / "episodes.parquet")
        frame["phase"] = [first if t < 20 else second for t in frame["t"]]
        frame["key"] = "constructor" if memory == "lww" else "0"
        frame.to_parquet(run / "episodes.parquet")
        _reseal(run)
    out, index = _build(tmp_path, tmp_path / "runs")
    assert index["phases"] == ["constructor", "toString", "__proto__", "stable"]
    for address, title in (("exp/controlled_drift/lww/seed=0", "phase toString, key constructor"),
                           ("exp/controlled_drift/tepa_rev/seed=0", "phase stable, key 0")):  # fmt: skip
        dom = open_page(out, f"run={address}&t=25")
        body = next(attrs for tag, attrs, _ in dom.elements if tag == "body")
        assert body.get("data-ready") == "true"  # the script ran to its end
        assert len([r for r in dom.inside("tr", "runs") if "data-run" in r]) == 2
        assert title in dom.text["ep-title"]


# --- broken streams -----------------------------------------------------------------------------------


def _deep(path: Path) -> None:
    path.write_text('{"a":' * 100 + "1" + "}" * 100)


BROKEN_META = {
    "fifo": (lambda path: (path.unlink(), os.mkfifo(path)), "meta.json: not a regular file"),
    "too deep": (_deep, "meta.json: nested deeper than 64 levels"),
    "not json": (lambda path: path.write_text("{not json"), "meta.json: not JSON"),
    "a list": (lambda path: path.write_text("[1, 2]"), "meta.json: not a JSON object"),
}


@pytest.mark.parametrize("damage", BROKEN_META)
def test_a_stream_with_a_broken_meta_json_is_listed_with_its_reason_and_the_others_are_shown(
    tmp_path, capsys, damage
):
    write_stream(tmp_path, "lww")
    broken = write_stream(tmp_path, "tepa_rev")
    harm, reason = BROKEN_META[damage]
    harm(broken / "meta.json")
    out, index = _build(tmp_path, tmp_path / "runs")
    assert [r["run"] for r in index["runs"]] == ["exp/controlled_drift/lww/seed=0"]
    [skipped] = index["skipped"]
    assert skipped["run"] == "exp/controlled_drift/tepa_rev/seed=0" and reason in skipped["reason"]
    assert "Traceback" not in capsys.readouterr().err


HOSTILE_ARCHIVES = {
    "an id of 2**70": ({**EVENTS[0], "id": 2**70}, "line 1: id is 1180591620717411303424, not an integer"),
    "a t that is text": ({**EVENTS[0], "t": "soon"}, "line 1: t is 'soon', not an integer"),
    "a line that is an array": ([0, "created", 0], "line 1: not a JSON object"),
    "a NaN t": ({**EVENTS[0], "t": float("nan")}, "line 1: not JSON"),
    "a state that is a list": ({**EVENTS[0], "state": ["active"]}, "line 1: state is not a text"),
}


@pytest.mark.parametrize("hostile", HOSTILE_ARCHIVES)
def test_a_hostile_archive_with_valid_checksums_is_skipped_with_its_reason(tmp_path, capsys, hostile):
    event, reason = HOSTILE_ARCHIVES[hostile]
    write_stream(tmp_path, "lww")
    write_stream(tmp_path, "tepa_rev", events=(event, *EVENTS[1:]))  # checksums recorded as written
    out, index = _build(tmp_path, tmp_path / "runs")
    assert [r["run"] for r in index["runs"]] == ["exp/controlled_drift/lww/seed=0"]
    [skipped] = index["skipped"]
    assert skipped["run"] == "exp/controlled_drift/tepa_rev/seed=0"
    assert f"tepa_rev/seed=0/archive.jsonl: {reason}" in skipped["reason"]
    assert "Traceback" not in capsys.readouterr().err

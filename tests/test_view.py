"""The transcript viewer (`python -m analysis.view`): hand-made logs -> one HTML file, opened in a real
headless Chromium; the DOM after its script ran and a screenshot are checked, not only the HTML text."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.image import imread

from analysis.streamlog.record import QUALITY, SAMPLE, EpisodeRecord
from analysis.streamlog.staleness import episode_quality
from analysis.streamlog.stream import file_record
from analysis.view.__main__ import main
from analysis.view.page import encode
from analysis.view.sample import BOUNDARY
from analysis.view.samples import compact_evidence, decode, flag_counts, stale_lines
from analysis.view.streams import read_rows, read_stream

INJECTION = "</script><img src=x onerror=\"document.title='injected'\">"
NOT_LOGGED = "prompt not logged (rerun with log_prompts=true)"


def _correct(t: int, length: int) -> str:
    return "flip" if t < length // 2 else "rotate"


def _sample_columns(t: int, length: int, separators: tuple[str, str] | None = None) -> dict[str, str]:
    """The logged-sample columns of step t: a prompt, two memory lines, and the truth (null at t=30), as
    JSON with `separators` (json.dumps's)."""
    messages = [
        {"role": "system", "content": "You are an agent working in a world that can change."},
        {"role": "user", "content": f'Step {t}. Memory:\n- [step {t - 1}] VALID "flip"\nPROMPT OF STEP {t}'},
    ]
    lines = [[t - 1, "VALID", "flip", 2, 0], [t - 2, "FAILED", "rotate", None, None]]
    truth = None if t == 30 else _correct(t, length)
    return {
        "options": json.dumps(["flip", "rotate"], separators=separators),
        "evidence": json.dumps([lines], separators=separators),
        "truth": json.dumps([truth], separators=separators),
        "prompt": json.dumps([messages], separators=separators),
    }


def write_stream(
    root: Path,
    memory: str,
    *,
    length: int = 40,
    logged: bool = True,
    events: tuple = (),
    complete: bool = True,
    separators: tuple[str, str] | None = None,
) -> Path:
    """One stream as the runner writes it: episodes.parquet (the record's columns, plus the logged-sample
    columns when `logged`), archive.jsonl and a meta.json with the files' checksums."""
    run = root / "runs" / "exp" / "controlled_drift" / memory / "seed=0"
    run.mkdir(parents=True)
    rows = []
    for t in range(length):
        correct = _correct(t, length)
        action = correct if t % 5 else "wait"
        record = EpisodeRecord(
            seed=0, t=t, phase="stable" if t < length // 2 else "return", key="0", action=action,
            correct=correct, success=action == correct, parse_ok=True,
            reply=INJECTION if t == 7 else f"Answer: {action}", hop_replies="", error="", n_evidence=2,
            prompt_tokens=90, completion_tokens=3, cached=False, truncated=False, latency=0.0, hypothesis=0,
            active=1, revoked=0, promotions=1, revocations=0, repromotions=0, trials=0, trial_passes=0,
            **dict.fromkeys(SAMPLE, ""), **episode_quality([], None),
        )  # fmt: skip
        row = record.row({"experiment": "exp", "env": "controlled_drift", "memory": memory})
        if logged:
            rows.append(row | _sample_columns(t, length, separators))
        else:  # a log written before episodes recorded their samples
            rows.append({k: v for k, v in row.items() if k not in (*SAMPLE, *QUALITY)})
    pd.DataFrame(rows).to_parquet(run / "episodes.parquet")
    archive = "".join(json.dumps(e) + "\n" for e in events)
    (run / "archive.jsonl").write_text(archive)
    files = {
        "episodes.parquet": file_record((run / "episodes.parquet").read_bytes(), length),
        "archive.jsonl": file_record(archive.encode(), len(events)),
    }
    meta = {"experiment": "exp", "variant": "", "files": files, "complete": complete}
    (run / "meta.json").write_text(json.dumps(meta))
    return run


def _event(t: int, event: str, pid: int, value: str, state: str) -> dict:
    return dict(
        t=t, event=event, reason=f"{event} at {t}", id=pid, key="0", value=value, s=1, f=0, state=state
    )


EVENTS = (
    _event(0, "created", 0, "flip", "hypothesis"),
    _event(0, "promoted", 0, "flip", "active"),
    _event(21, "created", 1, "rotate", "hypothesis"),
    _event(22, "revoked", 0, "flip", "revoked"),
    _event(24, "promoted", 1, "rotate", "active"),
    _event(35, "repromoted", 0, "flip", "active"),
)


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    """The page of four streams: one with every sample column, one old log without them, one tampered
    with after it was written, one incomplete."""
    root = tmp_path_factory.mktemp("logs")
    write_stream(root, "tepa_rev", events=EVENTS)
    write_stream(root, "lww", logged=False)
    tampered = write_stream(root, "sliding_window")
    frame = pd.read_parquet(tampered / "episodes.parquet")
    frame.loc[3, "success"] = not frame.loc[3, "success"]
    frame.to_parquet(tampered / "episodes.parquet")
    write_stream(root, "append_only", complete=False)
    out = root / "view.html"
    assert main([str(root / "runs"), "--out", str(out)]) == 0
    return out


# --- the real browser ---------------------------------------------------------------------------------


def _chromium(*args: str) -> subprocess.CompletedProcess:
    binary = shutil.which("chromium")
    if binary is None:
        pytest.fail(
            "chromium not found: install it (apt-get install -y chromium) for the viewer tests", False
        )
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"]
    flags += ["--disable-background-networking", "--disable-component-update", "--disable-sync"]
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [binary, *flags, f"--user-data-dir={profile}", *args], capture_output=True, text=True, timeout=120
        )


class _Dom(HTMLParser):
    """The text under every element id, and every element with its attributes and enclosing ids."""

    VOID = {"meta", "input", "br", "img", "link", "hr", "col", "source", "wbr"}

    def __init__(self, html: str) -> None:
        super().__init__()
        self.stack: list[tuple[str, str | None]] = []
        self.text: dict[str, str] = {}
        self.elements: list[tuple[str, dict, tuple[str, ...]]] = []
        self.title = ""
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        self.elements.append((tag, attributes, tuple(i for _, i in self.stack if i)))
        if tag not in self.VOID:
            self.stack.append((tag, attributes.get("id")))

    def handle_endtag(self, tag):
        while self.stack and self.stack.pop()[0] != tag:
            pass

    def handle_data(self, data):
        if [tag for tag, _ in self.stack[-2:]] == ["head", "title"]:  # the document's, not an SVG title
            self.title += data
        for _, element_id in self.stack:
            if element_id:
                self.text[element_id] = self.text.get(element_id, "") + data

    def inside(self, tag: str, ancestor: str) -> list[dict]:
        return [attrs for t, attrs, ids in self.elements if t == tag and ancestor in ids]


def open_page(page: Path, fragment: str) -> _Dom:
    """The DOM of the page at `#fragment` after its script ran."""
    done = _chromium("--virtual-time-budget=5000", "--dump-dom", page.as_uri() + "#" + fragment)
    dom = _Dom(done.stdout)
    assert "body" in [t for t, _, _ in dom.elements], done.stderr[-2000:]
    return dom


def test_the_page_shows_the_runs_and_the_selected_episodes_prompt_in_a_real_browser(page):
    dom = open_page(page, "run=exp/controlled_drift/tepa_rev/seed=0&t=25")
    body = next(attrs for tag, attrs, _ in dom.elements if tag == "body")
    assert body.get("data-ready") == "true"  # the script ran to its end
    assert [r["data-run"] for r in dom.inside("tr", "runs") if "data-run" in r] == [
        "exp/controlled_drift/lww/seed=0",
        "exp/controlled_drift/tepa_rev/seed=0",
    ]
    assert "Step 25, phase return, key 0" in dom.text["ep-title"]
    prompt = dom.text["ep-prompt"]
    assert "PROMPT OF STEP 25" in prompt and "You are an agent working in a world" in prompt
    assert NOT_LOGGED not in prompt
    # In the return phase the world holds "rotate": the VALID "flip" and the FAILED "rotate" lines are stale.
    assert "2 stale" in dom.text["ep-outcome"] and dom.text["ep-outcome"].startswith('FAILURE: action "wait"')
    assert (
        dom.text["ep-memory"].count("stale") == 2 and 'the world holds "rotate" now' in dom.text["ep-memory"]
    )
    assert "promoted: #1" not in dom.text["ep-events"]  # step 25 has no event: "none"
    assert dom.text["ep-events"].strip() == "none"
    segments = [a for a in dom.inside("rect", "timeline-svg") if a.get("class") == "segment"]
    assert len(segments) == 6  # flip: hypothesis, active, revoked, active; rotate: hypothesis, active
    assert len(dom.inside("circle", "timeline-svg")) == 1  # the re-promotion of flip at t=35
    assert any(a.get("data-t") == "25" and "sel" in a.get("class", "") for a in dom.inside("tr", "episodes"))


def test_streams_that_cannot_be_trusted_are_listed_with_why_and_not_shown(page):
    dom = open_page(page, "")
    skipped = dom.text["skipped"]
    assert "sliding_window/seed=0" in skipped and "sha256 differs" in skipped
    assert "append_only/seed=0" in skipped and "incomplete" in skipped
    assert "2 not shown" in dom.text["summary"]


def test_an_old_log_without_sample_columns_says_the_prompt_was_not_logged(page):
    dom = open_page(page, "run=exp/controlled_drift/lww/seed=0&t=3")
    assert dom.text["ep-prompt"].strip() == NOT_LOGGED
    assert NOT_LOGGED in dom.text["stream-notes"]
    assert "Answer: wait" not in dom.text["ep-reply"] and "Answer: flip" in dom.text["ep-reply"]
    assert "memory lines or truth not logged" in dom.text["stream-notes"]


def test_a_reply_that_looks_like_markup_is_shown_as_text(page):
    dom = open_page(page, "run=exp/controlled_drift/tepa_rev/seed=0&t=7")
    assert dom.text["ep-reply-text"] == INJECTION
    assert not [tag for tag, _, _ in dom.elements if tag == "img"]
    assert dom.title == "Run viewer"  # the reply's onerror never ran


def test_filters_and_the_step_in_the_address_select_what_is_shown(page):
    dom = open_page(page, "run=exp/controlled_drift/tepa_rev/seed=0&outcome=failure&phase=return&t=3")
    listed = [int(a["data-t"]) for a in dom.inside("tr", "episodes") if "data-t" in a]
    assert listed == [20, 25, 30, 35]
    assert "4 of 40 episodes" in dom.text["list-count"]
    # Step 3 is filtered out: the nearest listed step is shown instead, and the page says so.
    assert dom.text["ep-title"].startswith("Step 20,")
    assert "step 3 is not among the episodes shown" in dom.text["ep-missing"]


def test_the_screenshot_is_a_drawn_page(page, tmp_path):
    shot = tmp_path / "shot.png"
    done = _chromium(f"--screenshot={shot}", "--window-size=1200,900", page.as_uri() + "#t=25")
    assert shot.is_file(), done.stderr[-2000:]
    pixels = imread(shot)
    assert pixels.shape[:2] == (900, 1200) and pixels.std() > 0.05  # text, tables and a timeline, not blank


# --- sampling, decoding and the command line (no browser) ----------------------------------------------


def _embedded(page: Path, i: int) -> dict:
    tag = re.search(
        rf'<script type="application/json" id="stream-{i}">(.*?)</script>', page.read_text(), re.S
    )
    assert tag is not None
    return json.loads(tag.group(1))


def test_a_big_stream_is_sampled_to_the_size_limit_boundaries_then_failures(tmp_path):
    write_stream(tmp_path, "tepa_rev", length=4000, events=EVENTS)
    out = tmp_path / "view.html"
    assert main([str(tmp_path / "runs"), "--out", str(out), "--max-mb", "1"]) == 0
    assert out.stat().st_size <= 1_000_000
    data = _embedded(out, 0)
    shown = {row[0] for row in data["rows"]}
    boundary = set(range(2000 - BOUNDARY, 2000 + BOUNDARY + 1))
    failures = {t for t in range(4000) if t % 5 == 0}
    assert boundary <= shown and failures <= shown and 0 < len(shown) < 4000
    assert data["sample"].startswith(f"{len(shown)} of 4000 episodes: all {len(boundary)} within")
    whole = tmp_path / "whole.html"
    assert main([str(tmp_path / "runs"), "--out", str(whole), "--max-mb", "20"]) == 0
    assert _embedded(whole, 0)["sample"] == "all 4000 episodes"


def test_stale_lines_follow_the_verdict_against_the_truth_of_each_hop():
    hops = [
        [
            [1, "VALID", "a", 1, 0],
            [2, "VALID", "b", 1, 0],
            [3, "FAILED", "a", None, None],
            [4, "FAILED", "b", 0, 1],
        ],
        [[5, "VALID", "a", None, None]],
    ]
    assert stale_lines(hops, ["a", None]) == [[False, True, True, False], [None]]
    assert stale_lines(hops, ["b"]) == [[True, False, False, True], [None]]


def test_sample_values_not_in_the_format_decode_as_not_logged_and_are_counted():
    assert decode("evidence", '[[[1, "VALID", "a", 1, 0]]]') == ([[[1, "VALID", "a", 1, 0]]], False)
    assert decode("evidence", '[[[1, "MAYBE", "a", 1, 0]]]') == (None, True)
    assert decode("prompt", '[[{"role": "user"}]]') == (None, True)
    assert decode("options", "not json") == (None, True)
    assert decode("prompt", "") == (None, False) and decode("truth", "") == (None, False)
    assert decode("truth", None) == (None, False)


def test_an_evidence_line_is_in_the_format_only_with_each_field_of_its_type():
    assert decode("evidence", '[[[1, "FAILED", "a", null, null]], []]')[1] is False
    for line in (
        '[true, "VALID", "a", 1, 0]',  # a step that is a bool
        '[1.0, "VALID", "a", 1, 0]',  # or a float
        '[1, "VALID", 7, 1, 0]',  # a value that is not a string
        '[1, "VALID", "a", false, 0]',  # a support that is a bool
        '[1, "VALID", "a", 1, 0.5]',  # a conflict that is a float
        '[1, "VALID", "a", 1]',  # four fields
        '[1, ["VALID"], "a", 1, 0]',  # a verdict that is a list
        '{"t": 1}',  # not a list
    ):
        assert decode("evidence", f"[[{line}]]") == (None, True), line
    assert decode("evidence", '["not a hop"]') == (None, True)


_LINES = [
    [3, "VALID", "a", 1, 0],
    [-4, "FAILED", "a", None, 2],
    [5, "VALID", "b<c\x7f", None, None],  # written longer on the page: \u003c, \u007f
    [6, "FAILED", "x,null,2],[7,", 0, 0],  # values that look like the text around them
    [7, "VALID", "]],[[", 123456789012345678, None],
    [8, "FAILED", "VALID", 0, 0],
    [9, "FAILED", "", 0, 0],
]
#: Evidence texts the runner writes (compact): measured without decoding. A value with a quote or a
#: backslash is escaped, so it is not compact, nor is a text with spaces, non-ASCII text or a -0.
COMPACT = [
    json.dumps(hops, separators=(",", ":"), ensure_ascii=False)
    for hops in ([_LINES], [_LINES[:2], [], _LINES[2:]], [], [[]])
]
NOT_COMPACT = [
    json.dumps([_LINES]),
    json.dumps([[[1, "VALID", 'say "a"', 1, 0]]], separators=(",", ":")),
    json.dumps([[[1, "VALID", "caf\u00e9", 1, 0]]], separators=(",", ":"), ensure_ascii=False),
    '[[[-0,"VALID","a",1,0]]]',
    '[[[1,"VALID","a",1,0]]',
    '[[[1,"MAYBE","a",1,0]]]',
    '[[[1,"VALID","a",1,0.5]]]',
    '[[[1,"VALID","a",1,' + "9" * 5000 + "]]]",
]


@pytest.mark.parametrize("text", COMPACT)
@pytest.mark.parametrize("truth", ["a", "b<c\x7f", "x,null,2],[7,", "]],[[", "VALID", "", 'a",', "z", None])
def test_a_compact_evidence_text_measures_as_its_decoded_value_encodes_and_flags(text, truth):
    compact = compact_evidence(text)
    assert compact is not None
    value, bad = decode("evidence", text)
    assert not bad and compact.size == len(encode(value)) and len(compact.hops) == len(value)
    for hop_text, hop in zip(compact.hops, value, strict=True):
        flags = stale_lines([hop], [truth])[0]
        assert flag_counts(hop_text, truth) == (len(hop), flags.count(True))
    assert compact.written(None) == encode(value)
    for truths in ([truth], [truth, "b<c\x7f", None]):  # a truth for the first hop only, or for each
        flags = stale_lines(value, truths)
        hops = zip(value, flags, strict=True)
        flagged = [[[*line, f] for line, f in zip(*hop, strict=True)] for hop in hops]
        assert compact.written(truths) == encode(flagged)
        assert compact.flagged(truths) == (sum(hop.count(True) for hop in flags), len(encode(flagged)))


def test_a_text_that_extends_an_earlier_one_measures_as_if_read_alone():
    earlier = compact_evidence(COMPACT[0])
    assert earlier is not None and earlier.flagged(["a"]) == compact_evidence(COMPACT[0]).flagged(["a"])
    more = json.dumps(_LINES[:3], separators=(",", ":"), ensure_ascii=False)[1:-1]
    longer = COMPACT[0][:-2] + "," + more + "]]"
    assert earlier.extended(longer) is not None  # its new lines only are checked
    extended, alone = compact_evidence(longer, earlier), compact_evidence(longer)
    assert extended is not None and alone is not None and extended.size == alone.size
    for truths in (["a"], ["z"], [None], []):  # counted against the earlier one's truth, or anew
        assert extended.flagged(truths) == alone.flagged(truths)
    assert extended.written(["a"]) == alone.written(["a"])
    assert compact_evidence(COMPACT[0][:-2] + ',[-0,"VALID","a",1,0]]]', earlier) is None
    assert compact_evidence('[[,[1,"VALID","a",1,0]]]', compact_evidence("[[]]")) is None


@pytest.mark.parametrize("text", NOT_COMPACT)
def test_evidence_not_in_the_compact_form_is_left_to_the_decoder(text):
    assert compact_evidence(text) is None


def test_a_page_samples_the_same_rows_from_compact_logs_as_from_spaced_ones(tmp_path):
    """The sizes the sample is drawn by are the same whether a row is measured or encoded."""
    pages = []
    for name, separators in (("spaced", None), ("compact", (",", ":"))):
        run = write_stream(tmp_path / name, "append_only", length=4000, separators=separators)
        out = tmp_path / f"{name}.html"
        assert main([str(run), "--out", str(out), "--max-mb", "1"]) == 0
        pages.append(_embedded(out, 0))
    assert pages[0] == pages[1] and 0 < len(pages[0]["rows"]) < 4000


def test_the_rows_written_are_read_again_from_the_file_as_it_was_verified(tmp_path):
    run = write_stream(tmp_path, "lww")
    stream = read_stream(tmp_path, run)
    assert read_rows(stream, [0, 3])["t"] == [0, 3]
    frame = pd.read_parquet(run / "episodes.parquet")
    frame.loc[3, "reply"] = "changed"
    frame.to_parquet(run / "episodes.parquet")
    with pytest.raises(ValueError, match="changed while the page was being written"):
        read_rows(stream, [0, 3])


def _damage(run, column: str, value: str) -> None:
    frame = pd.read_parquet(run / "episodes.parquet")
    frame.loc[4, column] = value
    frame.to_parquet(run / "episodes.parquet")
    meta = json.loads((run / "meta.json").read_text())
    meta["files"]["episodes.parquet"] = file_record((run / "episodes.parquet").read_bytes(), 40)
    (run / "meta.json").write_text(json.dumps(meta))


@pytest.mark.parametrize("separators", [None, (",", ":")], ids=["spaced", "compact"])
@pytest.mark.parametrize("column", ["options", "evidence"])
def test_a_malformed_sample_column_is_noted_on_the_stream(tmp_path, column, separators):
    _damage(write_stream(tmp_path, "tepa_rev", separators=separators), column, "[oops")
    out = tmp_path / "view.html"
    assert main([str(tmp_path / "runs"), "--out", str(out)]) == 0
    data = _embedded(out, 0)
    assert data["logged"]["notes"] == [
        f"column {column}: 1 value(s) not in the logged-sample format, shown as not logged"
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{root}/missing"], "missing: not a directory"),
        (["{root}"], "no stream logs under it"),
        (["{root}", "--max-mb", "nan"], "--max-mb nan: must be a finite number > 0"),
        (["{root}", "--max-mb", "0.001"], "too small for the table of"),
        (["{root}", "--out", "/proc/view.html"], "--out /proc/view.html"),
    ],
    ids=["missing root", "no streams", "NaN size", "size too small", "unwritable out"],
)
def test_bad_input_is_one_line_naming_it(tmp_path, capsys, args, message):
    if "--max-mb" in args and args[-1] == "0.001":
        write_stream(tmp_path, "lww")
    argv = [a.format(root=tmp_path) for a in args]
    argv += [] if "--out" in argv else ["--out", str(tmp_path / "view.html")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("analysis.view: ") and message in err

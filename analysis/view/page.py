"""The viewer's HTML file: the page template (`page.html`, inline script and style) with the data embedded.

The data are JSON in `<script type="application/json">` tags, one for the runs table and one per
stream, which the page parses only when the stream is opened (so a page of hundreds of streams opens at
once). Everything in them comes from logs and is untrusted: the page inserts it as text only, and every
`<` is written as `\\u003c`, so no text can close the tag. Output is ASCII and deterministic.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from importlib import resources
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.report.timeline import STATE_COLORS
from analysis.view import sample
from analysis.view.samples import (
    SAMPLE_COLUMNS,
    CompactEvidence,
    compact_evidence,
    decode,
    stale_lines,
)
from analysis.view.streams import SHOWN_COLUMNS, Skipped, Stream, find_streams, order, read_rows, read_stream

#: The fields of an episode row as the page reads them, in order.
COLUMNS = ("t", "phase", "key", "success", "action", "correct", "parse_ok", "reply", "hops", "error")
COLUMNS += ("n_evidence", "stale", "events", "prompt", "evidence", "options", "truth")
_INDEX, _STREAMS = "/*INDEX*/", "<!--STREAMS-->"


#: json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), allow_nan=False)'s C encoder, made once:
#: `JSONEncoder.encode` makes one per call, which cost more than encoding a row's head. No check for
#: circular values, which decoded JSON and Arrow's values cannot be.
_ENCODER = c_make_encoder(
    None, json.JSONEncoder().default, encode_basestring_ascii, None, ":", ",", False, False, False
)


def encode(value: Any) -> str:
    """`value` as JSON that is safe inside a script tag: ASCII, compact, no `<`."""
    return "".join(_ENCODER(value, 0)).replace("<", "\\u003c")


def _plain(value: Any) -> Any:
    """A pandas/numpy cell as a JSON value (None for a missing one, NaN included)."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or value is pd.NA or (isinstance(value, float) and not math.isfinite(value)):
        return None
    return value


_EVENT_FIELDS = ("event", "reason", "id", "value", "s", "f", "state")


def _events(stream: Stream) -> list[dict[str, Any]]:
    """The stream's lifecycle events as plain records (None for a missing field), converted column by
    column: a frame's `to_dict("records")` costs several times more."""
    frame = stream.events
    columns = [[_plain(v) for v in frame[name].tolist()] for name in frame.columns]
    return [dict(zip(frame.columns, values, strict=True)) for values in zip(*columns, strict=True)]


def _events_by_t(events: list[dict[str, Any]]) -> dict[int, str]:
    """Each step's lifecycle events, encoded: [[event, reason, id, value, s, f, state], ...]."""
    by_t: dict[int, list[list[Any]]] = {}
    for e in events:
        if e["t"] is not None:
            by_t.setdefault(e["t"], []).append([e[f] for f in _EVENT_FIELDS])
    return {t: encode(step) for t, step in by_t.items()}


def _timelines(events: list[dict[str, Any]]) -> dict[str, str]:
    """Each key's precedents, encoded: [id, value, [[t, state], ...] (changes of state only),
    [steps of re-promotions]], in order of creation."""
    keys: dict[str, dict[Any, list[Any]]] = {}
    for e in events:
        precedent = keys.setdefault(str(e["key"]), {}).setdefault(e["id"], [e["id"], str(e["value"]), [], []])
        changes = precedent[2]
        if not changes or changes[-1][1] != e["state"]:
            changes.append([e["t"], str(e["state"])])
        if e["event"] == "repromoted":
            precedent[3].append(e["t"])
    return {key: encode(list(precedents.values())) for key, precedents in keys.items()}


def _hops(text: object) -> list[str] | None:
    """The per-hop replies of a multi-hop question (None for a single reply or an odd value)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        hops = json.loads(text)
    except ValueError:
        return None
    return hops if isinstance(hops, list) and all(isinstance(h, str) for h in hops) else None


#: The characters that tell which earlier evidence text a text may extend (its first line or so).
_BEGIN = 64


class _Rows:
    """A stream's episodes as encoded COLUMNS rows (`row`) and what each costs (`costs`), with its
    lifecycle events (encoded, by step) at their step.

    Episodes log the same sample texts again and again (a job's options, the truth of a key), so each
    distinct text of a column is decoded, checked and encoded once: the JSON of a list is its items'
    JSON joined by commas, so a row is put together from encoded parts. An evidence text in the compact
    form (`compact_evidence`) is measured without decoding: most rows are never written, and decoding
    them was most of the viewer's time."""

    def __init__(self, stream: Stream, events: dict[int, str]) -> None:
        missing = [None] * len(stream.episodes["t"])
        get = {name: stream.episodes.get(name, missing) for name in (*SHOWN_COLUMNS, *SAMPLE_COLUMNS)}
        phases = {name: i for i, (name, _) in enumerate(stream.phases)}
        self.get, self.events = get, events
        #: Each row's fields before `stale` (COLUMNS).
        self.heads = list(
            zip(
                get["t"],
                [phases.get(phase) for phase in get["phase"]],
                [key or "" for key in get["key"]],
                *(get[name] for name in ("success", "action", "correct", "parse_ok", "reply")),
                map(_hops, get["hop_replies"]),
                get["error"],
                get["n_evidence"],
                strict=True,
            )
        )
        self.seen: dict[str, dict[Any, tuple[Any, bool, str]]] = {column: {} for column in SAMPLE_COLUMNS}
        self.flagged: dict[tuple[Any, Any], tuple[str, str]] = {}
        self.compact: dict[Any, CompactEvidence | None] = {}
        self.last: dict[str | None, CompactEvidence] = {}
        self.sizes: dict[tuple[Any, Any], int] = {}

    def _part(self, column: str, text: Any) -> tuple[Any, bool, str]:
        """A sample column's text decoded, whether it was malformed, and the decoded value encoded."""
        part = self.seen[column].get(text)
        if part is None:
            value, bad = decode(column, text)
            part = self.seen[column][text] = (value, bad, encode(value))
        return part

    def _compact(self, text: Any) -> CompactEvidence | None:
        """`compact_evidence` of a text, given the last compact text that began like it: an Append-Only
        prompt's lines for a key begin with that key's first line, and extend its last prompt's."""
        compact = self.compact.get(text, False)
        if compact is False:
            begin = text[:_BEGIN] if isinstance(text, str) else None
            compact = self.compact[text] = compact_evidence(text, self.last.get(begin))
            if compact is not None:
                self.last[begin] = compact
        return compact

    def _flagged(self, evidence_text: Any, truth_text: Any) -> tuple[str, str]:
        """A row's `stale` and `evidence` fields, encoded: its count of stale lines and its evidence with
        each line's flag, or null and the evidence as it is when either column is not logged."""
        key = (evidence_text, truth_text)
        if key not in self.flagged:
            self.flagged[key] = self._flag(evidence_text, truth_text)
        return self.flagged[key]

    def _flag(self, evidence_text: Any, truth_text: Any) -> tuple[str, str]:
        compact, truth = self._compact(evidence_text), self._part("truth", truth_text)[0]
        if compact is not None:  # written from its text, as `_evidence_size` measures it
            return "null" if truth is None else encode(compact.flagged(truth)[0]), compact.written(truth)
        evidence = self._part("evidence", evidence_text)
        if evidence[0] is None or truth is None:
            return "null", evidence[2]
        return _flag_stale(evidence[0], truth)

    def row(self, i: int) -> str:
        """Row `i`, encoded."""
        get, head = self.get, self.heads[i]
        stale, lines = self._flagged(get["evidence"][i], get["truth"][i])
        prompt, options, truth = (self._part(c, get[c][i])[2] for c in ("prompt", "options", "truth"))
        events = self.events.get(head[0], "[]")
        return f"{encode(head)[:-1]},{stale},{events},{prompt},{lines},{options},{truth}]"

    def costs(self) -> list[int]:
        """The bytes of every row as `row` writes it, and its comma."""
        get = self.get
        # the head without its "]", six commas, the row's "]" and the comma after it
        costs = [len(encode(head)) + 7 + len(self.events.get(head[0], "[]")) for head in self.heads]
        for column in ("prompt", "options", "truth"):
            sizes = {text: len(self._part(column, text)[2]) for text in set(get[column])}
            costs = [cost + sizes[text] for cost, text in zip(costs, get[column], strict=True)]
        evidence = zip(costs, get["evidence"], get["truth"], strict=True)
        return [cost + self._evidence_size(text, truth) for cost, text, truth in evidence]

    def _evidence_size(self, evidence_text: Any, truth_text: Any) -> int:
        """The bytes of a row's `stale` and `evidence` fields (`_flagged`)."""
        key = (evidence_text, truth_text)
        size = self.sizes.get(key)
        if size is None:
            compact, truth = self._compact(evidence_text), self._part("truth", truth_text)[0]
            if compact is None:
                size = sum(map(len, self._flagged(evidence_text, truth_text)))
            elif truth is None:
                size = len("null") + compact.size
            else:
                stale, flagged = compact.flagged(truth)
                size = len(encode(stale)) + flagged
            self.sizes[key] = size
        return size

    def malformed(self) -> dict[str, int]:
        """How many values of each sample column are not in the logged-sample format (a compact
        evidence text is)."""
        counts = {}
        for column in SAMPLE_COLUMNS:
            texts = self.get[column]
            if column == "evidence":
                texts = [text for text in texts if self._compact(text) is None]
            counts[column] = sum(self._part(column, text)[1] for text in texts)
        return counts


def _flag_stale(evidence: list[list[list[Any]]], truth: list[str | None]) -> tuple[str, str]:
    """The encoded count of stale lines and the encoded evidence with each line's stale flag appended."""
    flags = stale_lines(evidence, truth)
    flagged = [[[*line, f] for line, f in zip(hop, hop_flags, strict=True)]
               for hop, hop_flags in zip(evidence, flags, strict=True)]  # fmt: skip
    return encode(sum(f is True for hop_flags in flags for f in hop_flags)), encode(flagged)


def _success(stream: Stream) -> dict[str, float]:
    """The stream's success rate in each phase (over all its episodes, not the sample)."""
    wins: dict[str, list[int]] = {}
    for phase, ok in zip(stream.episodes["phase"], stream.episodes["success"], strict=True):
        wins.setdefault(phase, [0, 0])[ok] += 1
    return {name: round(w[1] / (w[0] + w[1]), 3) for name, w in wins.items()}


def _logged(stream: Stream, malformed: dict[str, int]) -> dict[str, Any]:
    """Which sample columns the log has, and notes on values that were not in the format."""
    columns = {c: c in stream.episodes for c in SAMPLE_COLUMNS}
    notes = [f"column {c}: {n} value(s) not in the logged-sample format, shown as not logged"
             for c, n in malformed.items() if n]  # fmt: skip
    return {"columns": columns, "notes": notes}


def _stream_parts(stream: Stream, description: str, logged: dict[str, Any]) -> tuple[str, str]:
    """The encoded stream payload around its rows and timelines: (before the rows, between the rows and
    the timelines); the timelines are followed by `}}`."""
    head = {"run": stream.run, "phases": stream.phases, "end": stream.end, "sample": description}
    head |= {"logged": logged, "columns": COLUMNS}
    return encode(head)[:-1] + ',"rows":[', '],"timelines":{'


def _tag(i: int, payload: str) -> str:
    return f'<script type="application/json" id="stream-{i}">{payload}</script>\n'


@dataclass(frozen=True)
class _Prepared:
    """One stream made ready for sampling: what each row and key timeline costs, without the rows (a
    stream's rows are read and encoded again for the page, only the chosen ones, so that memory holds
    one stream's logs at a time whatever the size of the run)."""

    stream: Stream  # without its episodes and events
    events: dict[int, str]  # its lifecycle events by step, encoded (`_events_by_t`)
    row_costs: list[int]
    keys: list[str]
    timelines: dict[str, str]
    tiers: list[sample.Tier]
    logged: dict[str, Any]
    success: dict[str, float]
    fixed: int  # the bytes of its tag without rows and timelines, at most

    @property
    def key_costs(self) -> dict[str, int]:
        return {key: len(encode(key)) + len(line) + 2 for key, line in self.timelines.items()}

    def need(self) -> int:
        """The bytes of the stream shown whole, beyond `fixed`."""
        return sum(self.row_costs) + sum(self.key_costs.values())


def _prepare(stream: Stream) -> _Prepared:
    events = _events(stream)
    columns = stream.episodes
    n = len(columns["t"])
    by_t = _events_by_t(events)
    rows = _Rows(stream, by_t)
    costs = rows.costs()
    keys = [k or "" for k in columns.get("key", [""] * n)]
    boundaries = [start for _, start in stream.phases[1:]]
    tiers = sample.tiers(columns["t"], columns["success"], boundaries)
    worst = sample.describe([(tier.name, len(tier.rows) - 1, len(tier.rows)) for tier in tiers])
    logged = _logged(stream, rows.malformed())
    fixed = sum(map(len, _stream_parts(stream, worst, logged))) + len(_tag(10**6, "")) + 2
    light = replace(stream, episodes={}, events=stream.events.iloc[0:0])
    return _Prepared(light, by_t, costs, keys, _timelines(events), tiers, logged, _success(stream), fixed)


def _value(value: Any) -> str:
    """An override's value as the directory names write it (text as is, others as JSON), shortened."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 40 else text[:39] + "\u2026"


def _differing(streams: list[Stream]) -> list[str]:
    """For each stream whose configuration is named `cfg-<hash>`, its name with the keys in which it
    differs from the other configurations of its experiment, env and method (all its keys when it has
    no other): `cfg-644bd62099a1 (memory.theta_rev=0.3)`."""
    groups: dict[tuple, dict[str, dict[str, Any]]] = {}
    for s in streams:
        group = tuple(str(s.labels[n]) for n in ("experiment", "env", "memory"))
        groups.setdefault(group, {}).setdefault(s.variant, s.overrides)
    names = {}
    for group, configs in groups.items():
        for variant, overrides in configs.items():
            if not variant.startswith("cfg-"):
                continue
            others = [o for v, o in configs.items() if v != variant]
            marker = object()
            keys = [k for k in sorted(overrides)
                    if not others or any(o.get(k, marker) != overrides[k] for o in others)]  # fmt: skip
            shown = ", ".join(f"{k}={_value(overrides[k])}" for k in keys)
            if len(shown) > 200:
                shown = shown[:199] + "\u2026"
            names[group, variant] = f"{variant} ({shown})" if shown else variant
    return [
        names.get((tuple(str(s.labels[n]) for n in ("experiment", "env", "memory")), s.variant), s.variant)
        for s in streams
    ]


def _aliases(stream: Stream) -> list[str]:
    """The addresses (`#run=...`) that name the stream besides its folder under the page's root: its
    path from the runs folder (experiment/env/memory[/variant]/seed=N), and the same under `runs/`."""
    labels = stream.labels
    parts = [str(labels["experiment"]), str(labels["env"]), str(labels["memory"])]
    full = "/".join([*parts, *([stream.variant] if stream.variant else []), f"seed={labels['seed']}"])
    return [full, "runs/" + full]


def _run_row(i: int, item: _Prepared, config: str) -> dict[str, Any]:
    s = item.stream
    return {"id": i, "run": s.run, **s.labels, "variant": s.variant} | {
        "config": config,
        "aliases": _aliases(s),
        "n": len(item.row_costs),
        "shown": len(item.row_costs),
        "success": item.success,
    }


def _rows_again(item: _Prepared, chosen: list[int]) -> Iterator[str]:
    """The chosen rows of a prepared stream, read and encoded again."""
    stream = replace(item.stream, episodes=read_rows(item.stream, chosen))
    return map(_Rows(stream, item.events).row, range(len(chosen)))


def render(root: str | Path, title: str, max_bytes: int) -> tuple[str, int, int]:
    """The page of the streams under `root` in at most `max_bytes` bytes; how many streams it shows and
    how many it lists as not shown."""
    root = Path(root)
    template = resources.files("analysis.view").joinpath("page.html").read_text(encoding="ascii")
    run_dirs, skipped = find_streams(root)
    prepared = []
    for run_dir in run_dirs:
        stream = read_stream(root, run_dir)
        if isinstance(stream, Skipped):
            skipped.append(stream)
        else:
            prepared.append(_prepare(stream))
    prepared.sort(key=lambda item: order(item.stream))
    skipped.sort(key=lambda s: s.run)
    configs = _differing([item.stream for item in prepared])
    index = {
        "title": title,
        "phases": list(dict.fromkeys(name for item in prepared for name, _ in item.stream.phases)),
        "states": STATE_COLORS,
        "boundary": sample.BOUNDARY,
        "max_bytes": max_bytes,
        "skipped": [{"run": s.run, "reason": s.reason} for s in skipped],
        "runs": [
            _run_row(i, item, config) for i, (item, config) in enumerate(zip(prepared, configs, strict=True))
        ],
    }
    overhead = len(template) + len(encode(index)) + sum(item.fixed for item in prepared)
    if overhead > max_bytes:
        raise ValueError(f"--max-mb {max_bytes / 1e6:g}: too small for the table of {len(prepared)} streams")
    budgets = sample.shares([item.need() for item in prepared], max_bytes - overhead)
    tags = []
    for i, (item, budget) in enumerate(zip(prepared, budgets, strict=True)):
        chosen, summary = sample.choose(item.tiers, item.row_costs, item.keys, item.key_costs, budget)
        index["runs"][i]["shown"] = len(chosen)
        head, middle = _stream_parts(item.stream, sample.describe(summary), item.logged)
        keys = dict.fromkeys(item.keys[r] for r in chosen if item.keys[r] in item.timelines)
        lines = ",".join(f"{encode(key)}:{item.timelines[key]}" for key in keys)
        rows = ",".join(_rows_again(item, chosen)) if chosen else ""
        tags.append(_tag(i, head + rows + middle + lines + "}}"))
    before, after = template.split(_INDEX)
    middle, end = after.split(_STREAMS)
    return before + encode(index) + middle + "".join(tags) + end, len(prepared), len(skipped)

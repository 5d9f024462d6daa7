"""`analysis.streamlog.encoding` writes lifecycle events from a template: each line must be the encoder's
text."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.streamlog.encoding import dumps, jsonl_bytes
from tepa.archive import EVENT_LAYOUT
from tepa.evidence import Observation
from tepa.tepa_rev import TEPARev

TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)  # quotes, controls, non-ASCII
INT = st.integers(-(2**70), 2**70)
NAMES = [name for name, _ in EVENT_LAYOUT]
EVENT = st.tuples(*(INT if kind is int else TEXT for _, kind in EVENT_LAYOUT)).map(
    lambda values: dict(zip(NAMES, values, strict=True))
)


def encoder_lines(rows: list[dict]) -> bytes:
    return "".join(dumps(r) + "\n" for r in rows).encode()


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(EVENT, max_size=5))
def test_events_are_written_as_the_encoder_writes_them(rows):
    assert jsonl_bytes(rows) == encoder_lines(rows)


def test_an_archives_events_have_the_templates_layout_and_round_trip():
    memory = TEPARev(n_min=2, theta_rev=0.55)
    for t, value in enumerate(["Paris", "Lyon", "Paris"]):
        memory.observe(Observation(('Fran\u00e7e "x"', "P36"), value, True, t, f"{t}. fact", "fact"))
    events = memory.drain_events()
    assert {e["event"] for e in events} >= {"created", "promoted", "revoked", "repromoted"}
    assert all(tuple((k, type(v)) for k, v in e.items()) == EVENT_LAYOUT for e in events)
    assert jsonl_bytes(events) == encoder_lines(events)
    assert [json.loads(line) for line in jsonl_bytes(events).splitlines()] == events


def test_a_row_that_only_looks_like_an_event_goes_through_the_encoder():
    event = dict.fromkeys(NAMES, "x") | {"t": 1, "id": 2, "s": 3, "f": 0}
    rows = [
        event | {"t": np.int64(5)},  # an Integral t: the encoder's default makes it an int
        event | {"s": True},  # a bool is not an int here
        {name: event[name] for name in reversed(NAMES)},  # other order
        event | {"extra": 1},
        {"t": 1, "event": "x"},
    ]
    assert jsonl_bytes(rows) == encoder_lines(rows)
    assert b'"s":true' in jsonl_bytes(rows[1:2])

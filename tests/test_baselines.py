"""Each baseline's defining behaviour, on small hand-written streams."""

from __future__ import annotations

import pytest

from baselines import AppendOnly, LastWriteWins, NoMemory, OracleReset, ReactiveForgetting, SlidingWindow
from tepa.evidence import Evidence, Observation, Query
from tepa.protocol import Memory

ALL = [NoMemory, AppendOnly, LastWriteWins, SlidingWindow, ReactiveForgetting, OracleReset]


def ob(key, value, holds=True, t=0, text=""):
    return Observation(key, value, holds, t, text)


def values(memory, key) -> list[str]:
    return [e.value for e in memory.retrieve(Query(key=key))]


@pytest.mark.parametrize("cls", ALL)
def test_implements_protocol_and_snapshot_has_common_counts(cls):
    memory = cls()
    assert isinstance(memory, Memory)
    memory.observe(ob("k", "a"))
    snap = memory.snapshot()
    for state in ("hypothesis", "active", "revoked"):
        assert type(snap[state]) is int
    assert snap["hypothesis"] == snap["revoked"] == 0


def test_names():
    names = [c.name for c in ALL]
    assert names == ["no_memory", "append_only", "lww", "sliding_window", "reactive", "oracle_reset"]


def test_no_memory_retrieves_nothing():
    memory = NoMemory()
    for t in range(5):
        memory.observe(ob("k", "a", t=t, text="use a for k"))
    assert memory.retrieve(Query(key="k")) == []
    assert memory.retrieve(Query(text="use a for k")) == []
    assert memory.snapshot()["active"] == 0


def test_append_only_keeps_everything_failures_included():
    memory = AppendOnly()
    stream = [ob("k", "a", True, 0), ob("k", "a", False, 1), ob("j", "b", True, 2), ob("k", "c", True, 3)]
    for o in stream:
        memory.observe(o)
    got = memory.retrieve(Query(key="k"))
    assert [(e.value, e.holds, e.t, e.ref) for e in got] == [
        ("a", True, 0, 0),
        ("a", False, 1, 1),
        ("c", True, 3, 3),
    ]
    assert all(e.support is None and e.conflict is None for e in got)
    assert values(memory, "j") == ["b"]
    assert memory.retrieve(Query(key="missing")) == []
    assert memory.snapshot()["active"] == 4


def test_append_only_text_retrieval_is_bm25_top_k():
    memory = AppendOnly(top_k=2)
    for t, text in enumerate(["aisle seat please", "window seat", "vegetarian meal", "aisle seat again"]):
        memory.observe(ob(f"u{t}", "x", t=t, text=text))
    got = memory.retrieve(Query(text="aisle seat"))
    assert [e.text for e in got] == ["aisle seat please", "aisle seat again"]
    assert memory.retrieve(Query(text="nothing matches")) == []


def test_lww_ignores_failures_and_keeps_one_entry_per_key():
    memory = LastWriteWins()
    memory.observe(ob("k", "a", True, 0))
    memory.observe(ob("k", "a", False, 1))  # the world reversed: "a" now fails...
    memory.observe(ob("k", "a", False, 2))
    assert values(memory, "k") == ["a"]  # ...but LWW still serves the stale value
    memory.observe(ob("k", "b", False, 3))
    assert values(memory, "k") == ["a"]
    memory.observe(ob("k", "b", True, 4))
    memory.observe(ob("j", "c", True, 5))
    assert [(e.value, e.t, e.ref) for e in memory.retrieve(Query(key="k"))] == [("b", 4, 4)]
    assert values(memory, "j") == ["c"]
    assert memory.snapshot() == {"hypothesis": 0, "active": 2, "revoked": 0, "forgotten": 1}


def test_lww_never_stores_a_key_seen_only_failing():
    memory = LastWriteWins()
    memory.observe(ob("k", "a", False))
    assert memory.retrieve(Query(key="k")) == []
    assert memory.retrieve(Query(text="k a")) == []


def test_sliding_window_forgets_exactly_the_oldest_beyond_n():
    memory = SlidingWindow(n=3)
    for t, key in enumerate(["k", "j", "k"]):
        memory.observe(ob(key, f"v{t}", t=t))
    assert values(memory, "k") == ["v0", "v2"] and values(memory, "j") == ["v1"]
    memory.observe(ob("j", "v3", t=3))  # the 4th observation pushes out the 1st, and only it
    assert values(memory, "k") == ["v2"] and values(memory, "j") == ["v1", "v3"]
    assert memory.snapshot() == {"hypothesis": 0, "active": 3, "revoked": 0, "forgotten": 1}


def test_sliding_window_steps_keeps_only_recent_time():
    memory = SlidingWindow(n=100, steps=3)
    for t in range(5):
        memory.observe(ob("k", f"v{t}", t=t))
    assert values(memory, "k") == ["v2", "v3", "v4"]  # now = 4: t in (1, 4]
    assert [e.value for e in memory.retrieve(Query(key="k", t=6))] == ["v4"]  # the clock moves on retrieve
    memory.feedback([], success=True, t=7)
    assert memory.retrieve(Query(key="k")) == []
    assert memory.snapshot()["forgotten"] == 5


def test_sliding_window_zero_keeps_nothing():
    memory = SlidingWindow(n=0)
    memory.observe(ob("k", "a"))
    assert memory.retrieve(Query(key="k")) == [] and memory.snapshot()["active"] == 0


def _fail(memory, key):
    memory.feedback(memory.retrieve(Query(key=key)), success=False, t=0)


def _succeed(memory, key):
    memory.feedback(memory.retrieve(Query(key=key)), success=True, t=0)


@pytest.mark.parametrize("c", [1, 2, 3])
def test_reactive_clears_after_exactly_c_consecutive_failures(c):
    memory = ReactiveForgetting(c=c)
    memory.observe(ob("k", "a"))
    memory.observe(ob("k", "a", t=1))
    memory.observe(ob("j", "b"))
    for _ in range(c - 1):
        _fail(memory, "k")
    assert values(memory, "k") == ["a", "a"]  # c - 1 failures: still there
    _fail(memory, "k")
    assert memory.retrieve(Query(key="k")) == []
    assert values(memory, "j") == ["b"]  # other keys untouched
    assert memory.snapshot()["forgotten"] == 2 and memory.snapshot()["clears"] == 1


def test_reactive_success_interrupts_the_run():
    memory = ReactiveForgetting(c=2)
    memory.observe(ob("k", "a"))
    _fail(memory, "k")
    _succeed(memory, "k")
    _fail(memory, "k")
    assert values(memory, "k") == ["a"]
    _fail(memory, "k")
    assert memory.retrieve(Query(key="k")) == []


def test_reactive_counts_per_key_and_restarts_after_a_clear():
    memory = ReactiveForgetting(c=2)
    memory.observe(ob("k", "a"))
    memory.observe(ob("j", "b"))
    _fail(memory, "k")
    _fail(memory, "j")  # a failure on another key does not count for k
    assert values(memory, "k") == ["a"] and values(memory, "j") == ["b"]
    _fail(memory, "k")
    memory.observe(ob("k", "c", t=1))
    _fail(memory, "k")  # the count restarted at the clear
    assert values(memory, "k") == ["c"]


def test_reactive_ignores_failure_observations_and_empty_feedback():
    memory = ReactiveForgetting(c=1)
    memory.observe(ob("k", "a"))
    memory.observe(ob("k", "a", holds=False, t=1))
    memory.feedback([], success=False, t=2)
    assert values(memory, "k") == ["a", "a"]


def test_oracle_reset_clears_at_a_boundary_and_nothing_else_does():
    memory = OracleReset()
    memory.observe(ob("k", "a"))
    memory.observe(ob("k", "b", holds=False, t=1))
    for _ in range(5):
        _fail(memory, "k")
    assert values(memory, "k") == ["a", "b"]
    memory.on_phase_boundary("reversal", t=2)
    assert memory.retrieve(Query(key="k")) == [] and memory.retrieve(Query(text="k a")) == []
    memory.observe(ob("k", "c", t=3))
    assert values(memory, "k") == ["c"]
    assert memory.snapshot() == {"hypothesis": 0, "active": 1, "revoked": 0, "forgotten": 2, "resets": 1}


@pytest.mark.parametrize("cls", [AppendOnly, LastWriteWins, SlidingWindow, ReactiveForgetting])
def test_only_oracle_reset_reacts_to_boundaries(cls):
    memory = cls()
    memory.observe(ob("k", "a"))
    memory.on_phase_boundary("reversal", t=1)
    assert values(memory, "k") == ["a"]


def test_feedback_changes_nothing_for_methods_that_ignore_it():
    for cls in (AppendOnly, LastWriteWins, SlidingWindow, OracleReset):
        memory = cls()
        memory.observe(ob("k", "a"))
        for _ in range(3):
            _fail(memory, "k")
        assert values(memory, "k") == ["a"]


@pytest.mark.parametrize(
    ("cls", "kwargs", "param"),
    [
        (NoMemory, {"top_k": 0}, "top_k"),
        (AppendOnly, {"top_k": -1}, "top_k"),
        (LastWriteWins, {"top_k": 1.5}, "top_k"),
        (SlidingWindow, {"n": -1}, "n"),
        (SlidingWindow, {"steps": -2}, "steps"),
        (SlidingWindow, {"n": True}, "n"),
        (SlidingWindow, {"top_k": 0}, "top_k"),
        (ReactiveForgetting, {"c": 0}, "c"),
        (ReactiveForgetting, {"top_k": 0}, "top_k"),
        (OracleReset, {"top_k": "8"}, "top_k"),
    ],
)
def test_bad_parameters_raise_value_error_naming_them(cls, kwargs, param):
    with pytest.raises(ValueError, match=rf"^{param}=.*: must be "):
        cls(**kwargs)


def test_retrieved_evidence_is_a_copy_not_the_store():
    memory = AppendOnly()
    memory.observe(ob("k", "a"))
    memory.retrieve(Query(key="k")).clear()
    assert values(memory, "k") == ["a"]
    assert isinstance(memory.retrieve(Query(key="k"))[0], Evidence)

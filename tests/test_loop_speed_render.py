"""What the stream loop remembers to render prompts and retrieve faster gives what it would without:
a stream's `MemoryLines` joins the lines `memory_lines` joins, and the append-only stores hand out
their items in the order `rank` sorts them into."""

from hypothesis import given, settings
from hypothesis import strategies as st

from baselines.append_only import AppendOnly
from baselines.oracle_reset import OracleReset
from baselines.reactive import ReactiveForgetting
from runners.agent.prompt import MemoryLines, memory_lines
from tepa.evidence import Evidence, Observation, Query
from tepa.retrieval.rank import rank

ITEMS = [Evidence("k", f"v{i % 3}", i % 2 == 0, i, f"text {i}", ref=i) for i in range(60)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 59), st.integers(0, 59), st.booleans()), min_size=1, max_size=12))
def test_memory_lines_of_a_stream_are_the_lines_joined_afresh(steps):
    # Each step hands a slice of one list of items (growing, shrinking, starting elsewhere) or, with
    # `copy`, equal items that are other objects.
    lines = MemoryLines()
    for start, stop, copy in steps:
        evidence = ITEMS[start:stop]
        evidence = [Evidence(*e) for e in evidence] if copy else evidence
        assert lines(evidence) == memory_lines(evidence)


OPS = st.sampled_from(["observe", "retrieve", "fail", "phase"])
STEPS = st.lists(st.tuples(OPS, st.integers(0, 2), st.integers(0, 9)), max_size=80)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([AppendOnly, ReactiveForgetting, OracleReset]), STEPS)
def test_append_only_stores_retrieve_in_the_order_rank_sorts_into(kind, steps):
    # Steps go back now and then, so some keys' items come out of chronological order.
    memory = kind()
    for op, key, t in steps:
        if op == "observe":
            memory.observe(Observation(key, f"v{t % 2}", True, t))
        elif op == "fail":
            memory.feedback(memory.retrieve(Query(key=key)), False, t)
        elif op == "phase":
            memory.on_phase_boundary("next", t)
        else:
            got = memory.retrieve(Query(key=key))
            assert got == rank(list(got), Query(key=key))


def test_reactive_forgetting_counts_the_keys_of_the_items_it_handed_out_once_each():
    memory = ReactiveForgetting()
    for t in range(6):
        memory.observe(Observation(t % 2, "v", True, t))
    mine = memory.retrieve(Query(key=0)) + memory.retrieve(Query(key=1))
    # Another key's, an item it never held, an unhashable key.
    foreign = [Evidence(2, "v", True, 0, ref=0), Evidence(1, "v", True, 9, ref=99)]
    foreign.append(Evidence([1], "v", True, 0))
    used = foreign + mine[:1] + foreign + mine
    assert memory._own_keys(used) == {e.key for e in used if memory.handed_out(e)} == {0, 1}
    assert memory._own_keys(foreign) == set()

"""The memory registry: every config name builds, errors name what is wrong, user classes plug in."""

from __future__ import annotations

import textwrap

import pytest

from baselines import LastWriteWins, SlidingWindow
from runners.registry import MEMORIES, build_memory, memory_class, memory_names
from tepa.evidence import Observation, Query
from tepa.protocol import Memory, TrialMemory

NAMES = [
    "tepa_rev",
    "tepa_full",
    "tepa_norev",
    "tepa_rev_literal",
    "no_memory",
    "append_only",
    "lww",
    "sliding_window",
    "reactive",
    "oracle_reset",
]


def test_registry_lists_the_ten_config_names():
    assert memory_names() == NAMES == list(MEMORIES)


@pytest.mark.parametrize("name", NAMES)
def test_every_name_builds_a_memory_called_by_its_config_name(name):
    memory = build_memory(name)
    assert isinstance(memory, Memory)
    if isinstance(memory, TrialMemory):  # as the agent loop does: TEPA-Full validates by execution
        memory.set_trial(lambda precedent, kind: kind == "support")
    assert memory.name == name
    memory.observe(Observation("k", "a"))
    assert all(e.key == "k" for e in memory.retrieve(Query(key="k")))


def test_parameters_reach_the_constructor():
    memory = build_memory("sliding_window", n=7, steps=3, top_k=2)
    assert isinstance(memory, SlidingWindow) and (memory.n, memory.steps, memory.top_k) == (7, 3, 2)


def test_unknown_name_lists_the_valid_names():
    with pytest.raises(ValueError, match="unknown memory 'lru'") as err:
        build_memory("lru")
    assert all(name in str(err.value) for name in NAMES)


def test_bad_parameter_value_propagates():
    with pytest.raises(ValueError, match="^n must be"):
        build_memory("sliding_window", n=-1)


def test_unknown_parameter_is_named():
    with pytest.raises(ValueError, match="'windw'.*takes: n, steps, top_k"):
        build_memory("sliding_window", windw=5)


@pytest.mark.parametrize("path", ["baselines.lww:LastWriteWins", "baselines.lww.LastWriteWins"])
def test_dotted_path_to_a_known_class(path):
    assert memory_class(path) is LastWriteWins
    assert isinstance(build_memory(path, top_k=3), LastWriteWins)


def test_users_own_class_by_dotted_path(tmp_path, monkeypatch):
    (tmp_path / "my_memory.py").write_text(
        textwrap.dedent("""
        class Echo:
            name = "echo"

            def __init__(self, depth=1):
                self.depth = depth
                self.seen = []

            def observe(self, obs):
                self.seen.append(obs)

            def retrieve(self, query):
                return []

            def feedback(self, used, success, t):
                pass

            def on_phase_boundary(self, phase, t):
                pass

            def snapshot(self):
                return {"hypothesis": 0, "active": len(self.seen), "revoked": 0}

        class NotAMemory:
            name = "broken"
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    memory = build_memory("my_memory:Echo", depth=2)
    assert memory.name == "echo" and memory.depth == 2 and isinstance(memory, Memory)
    with pytest.raises(TypeError, match="missing observe, retrieve"):
        build_memory("my_memory.NotAMemory")
    with pytest.raises(ValueError, match="has no attribute 'Nope'"):
        build_memory("my_memory:Nope")


def test_dotted_path_to_a_missing_module():
    with pytest.raises(ValueError, match="no module named 'no_such_pkg.mem'"):
        build_memory("no_such_pkg.mem:Thing")

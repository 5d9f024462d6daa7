"""The memory registry (the conf/memory/ group): every entry builds, errors name what is wrong, user
classes plug in, and building one method imports only its own module."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from baselines import LastWriteWins, SlidingWindow
from runners.registry import MEMORY_DIR, build_memory, memory_entry, memory_names
from runners.run import PROJECT_ROOT
from tepa.evidence import Observation, Query
from tepa.protocol import Memory, TrialMemory


def test_the_registry_lists_every_entry_of_the_memory_group_but_the_custom_slot_and_adapters():
    files = sorted(p.stem for p in MEMORY_DIR.glob("*.yaml"))
    assert memory_names() == [f for f in files if f not in ("custom", "mem0")]
    assert {"tepa_rev", "lww", "tepa_rev_facts"} <= set(memory_names())


@pytest.mark.parametrize("name", memory_names())
def test_every_name_builds_a_memory_called_by_its_results_label(name):
    memory = build_memory(name)
    assert isinstance(memory, Memory)
    if isinstance(memory, TrialMemory):  # as the agent loop does: TEPA-Full validates by execution
        memory.set_trial(lambda precedent, kind: kind == "support")
    assert memory.name == (memory_entry(name).get("label") or name)
    memory.observe(Observation("k", "a"))
    assert all(e.key == "k" for e in memory.retrieve(Query(key="k")))


def test_an_entry_is_composed_with_its_defaults_and_parameters_merge_over_it():
    facts = memory_entry("tepa_rev_facts")  # `defaults: [tepa_rev]` plus its own thresholds
    assert facts["_target_"] == "tepa.tepa_rev.TEPARev" and facts["n_min"] == 2 and facts["W"] == 5
    memory = build_memory("tepa_rev_facts", W=7)
    assert (memory.n_min, memory.theta_rev, memory.W) == (2, 0.55, 7)


def test_parameters_reach_the_constructor():
    memory = build_memory("sliding_window", n=7, steps=3, top_k=2)
    assert isinstance(memory, SlidingWindow) and (memory.n, memory.steps, memory.top_k) == (7, 3, 2)


def test_unknown_name_lists_the_valid_names():
    with pytest.raises(ValueError, match="unknown memory 'lru'") as err:
        build_memory("lru")
    assert all(name in str(err.value) for name in memory_names())


def test_bad_parameter_value_propagates_in_the_one_wording():
    with pytest.raises(ValueError, match=r"^n=-1: must be >= 0$"):
        build_memory("sliding_window", n=-1)


def test_unknown_parameter_is_named():
    with pytest.raises(ValueError, match="'windw'.*takes: n, steps, top_k"):
        build_memory("sliding_window", windw=5)


@pytest.mark.parametrize("path", ["baselines.lww:LastWriteWins", "baselines.lww.LastWriteWins"])
def test_dotted_path_to_a_known_class(path):
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


def test_building_one_method_imports_only_its_own_module():
    code = (
        "import sys\n"
        "from runners.registry import build_memory, memory_names\n"
        "memory_names(); build_memory('lww')\n"
        "print(' '.join(m for m in sys.modules if m.startswith(('tepa.', 'baselines.', 'envs', 'analysis'))))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=PROJECT_ROOT, check=True, timeout=60
    )
    loaded = set(proc.stdout.split())
    assert "baselines.lww" in loaded
    others = {f"baselines.{m}" for m in ("append_only", "sliding_window", "reactive", "oracle_reset")}
    others |= {"tepa.tepa_full", "tepa.tepa_rev", "tepa.tepa_norev", "tepa.lifecycle"}
    assert not loaded & others, loaded & others
    assert not any(m.startswith(("envs", "analysis")) for m in loaded)


def test_an_entry_builds_inside_a_running_hydra_app_and_leaves_it_as_it_was():
    with initialize_config_dir(config_dir=str(MEMORY_DIR.parent), version_base="1.3"):
        memory_entry.cache_clear()
        assert build_memory("tepa_norev").name == "tepa_norev"
        assert GlobalHydra.instance().is_initialized()
        assert compose("config", overrides=["memory=lww"]).memory._target_ == "baselines.lww.LastWriteWins"

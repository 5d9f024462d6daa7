"""Every environment follows the one protocol and knows its length (progress bars use it)."""

import pytest

from envs.base import Environment
from envs.controlled_drift import ControlledDrift
from envs.executable_drift.env import ExecutableDrift
from envs.memoryagentbench.env import MemoryAgentBench
from envs.preference_stream import PreferenceStream
from tests.helpers.shared_data import DATA_DIR

DATA = str(DATA_DIR)

FACTORIES = {
    "controlled_drift": lambda: ControlledDrift(phase_length=30),
    "preference_stream": lambda: PreferenceStream(stable_length=40, drift_length=60),
    "executable_drift": lambda: ExecutableDrift(phase_length=10),
    "memoryagentbench": lambda: MemoryAgentBench(source="factconsolidation_sh_6k", data_dir=DATA),
}


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_protocol_and_length(name):
    env = FACTORIES[name]()
    try:
        assert isinstance(env, Environment) and env.name == name
        env.reset(1)
        tasks = list(env.tasks())
        decisions = [t for t in tasks if t.decide]
        assert len(env) == len(decisions) > 0
        assert [t.t for t in tasks] == sorted(t.t for t in tasks)
        starts = [t for t, _ in env.phase_boundaries]
        assert all(any(task.t == b for task in tasks) for b in starts)
    finally:
        getattr(env, "close", lambda: None)()

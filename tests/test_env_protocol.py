"""Every built-in environment passes `envs.check_env`, and the checker fails an environment that breaks
a property with a one-line message naming it."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

from envs import EnvCheckError, Environment, EnvironmentBase, MultiHop, Outcome, Task, check_env
from envs.controlled_drift import ControlledDrift
from envs.executable_drift.env import ExecutableDrift
from envs.memoryagentbench.env import MemoryAgentBench
from envs.preference_stream import PreferenceStream
from runners.config import Component, ConfigError
from runners.registry import require_class
from tests.helpers.shared_data import require_data

FACTORIES = {
    "controlled_drift": lambda: ControlledDrift(phase_length=30),
    "preference_stream": lambda: PreferenceStream(stable_length=40, drift_length=60),
    "executable_drift": lambda: ExecutableDrift(phase_length=10),
    "memoryagentbench": lambda: MemoryAgentBench(
        source="factconsolidation_sh_6k", data_dir=str(require_data())
    ),
    "memoryagentbench_mh": lambda: MemoryAgentBench(
        source="factconsolidation_mh_6k", data_dir=str(require_data())
    ),
}
#: The questions and facts are the benchmark's; the seed drives only the choice of trials.
FIXED_STREAMS = {"memoryagentbench", "memoryagentbench_mh"}


@pytest.mark.parametrize("name", sorted(FACTORIES))
@pytest.mark.parametrize("seed", [0, 7])
def test_every_built_in_environment_passes_check_env(name, seed):
    env = FACTORIES[name]()
    assert isinstance(env, Environment) and isinstance(env, EnvironmentBase)
    check_env(env, seed=seed, varies_with_seed=name not in FIXED_STREAMS)


class Toy(EnvironmentBase):
    """A small well-behaved environment: two phases of five decisions each; the broken variants below
    each change one thing."""

    name = "toy"

    def __init__(self) -> None:
        self.seed = 0
        self.trial_rng = random.Random(0)

    def reset(self, seed: int) -> None:
        self.seed = seed
        self.trial_rng = random.Random(seed)

    def tasks(self) -> Iterator[Task]:
        rng = random.Random(self.seed)
        for t in range(10):
            yield Task(
                key=rng.randrange(3), text="pick", phase="a" if t < 5 else "b", t=t, options=("x", "y")
            )

    def execute(self, task: Task, action: str) -> Outcome:
        return Outcome(action == "x")

    def __len__(self) -> int:
        return 10

    @property
    def phase_boundaries(self) -> list[tuple[int, str]]:
        return [(5, "b")]

    def trial(self, precedent: Any, kind: str) -> bool:
        return self.trial_rng.random() < 0.5


class NoClose:
    """Everything but `close` and `__len__`."""

    name = "no_close"
    operational, provenance = frozenset(), None
    reset, tasks, execute, trial = Toy.reset, Toy.tasks, Toy.execute, Toy.trial
    phase_boundaries = Toy.phase_boundaries


class Unseeded(Toy):
    def tasks(self) -> Iterator[Task]:
        self.seed = random.randrange(1 << 30)
        return super().tasks()


class SeedBlind(Toy):
    def reset(self, seed: int) -> None:
        super().reset(0)


class Overcounted(Toy):
    def __len__(self) -> int:
        return 11


class MisplacedBoundary(Toy):
    @property
    def phase_boundaries(self) -> list[tuple[int, str]]:
        return [(4, "b")]


class TrialsShareTheStreamRng(Toy):
    """Trials draw from the stream's own generator, so running them changes the tasks that follow."""

    def tasks(self) -> Iterator[Task]:
        self.rng = random.Random(self.seed)
        for t in range(10):
            yield Task(
                key=self.rng.randrange(3), text="pick", phase="a" if t < 5 else "b", t=t, options=("x",)
            )

    def trial(self, precedent: Any, kind: str) -> bool:
        return self.rng.random() < 0.5


class AwaitsAnotherOutcome(Toy):
    """Its `execute_async` answers differently from its `execute`."""

    async def execute_async(self, task: Task, action: str) -> Outcome:
        return Outcome(action != "x")


class ClosesOnce(Toy):
    def __init__(self) -> None:
        super().__init__()
        self.open = True

    def close(self) -> None:
        if not self.open:
            raise RuntimeError("already closed")
        self.open = False


@pytest.mark.parametrize(
    ("cls", "message"),
    [
        (NoClose, r"protocol: NoClose lacks __len__, close of envs\.base\.Environment"),
        (Unseeded, r"determinism: reset\(0\) twice gave different streams \(first difference at task \d+"),
        (SeedBlind, r"seed: reset\(1\) gave the same stream as reset\(0\)"),
        (Overcounted, r"length: len\(env\) is 11 but the stream of seed 0 has 10 decision task\(s\)"),
        (
            MisplacedBoundary,
            r"phase boundaries: phase_boundaries is \[\(4, 'b'\)\] but the phase changes at ",
        ),
        (TrialsShareTheStreamRng, r"trials: running trials between tasks changed the stream"),
        (AwaitsAnotherOutcome, r"execute_async: awaiting execute_async gave other outcomes than execute"),
        (ClosesOnce, r"close: a second close\(\) raised RuntimeError: already closed"),
    ],
)
def test_check_env_names_the_property_a_broken_environment_fails(cls, message):
    check_env(Toy())  # the template itself passes
    with pytest.raises(EnvCheckError, match=f"^environment check failed: {message}") as caught:
        check_env(cls())
    assert "\n" not in str(caught.value)


def test_the_config_check_names_what_a_custom_environment_lacks_in_one_line():
    with pytest.raises(TypeError) as caught:
        require_class("mypkg.NoClose", NoClose, Environment)
    assert (
        str(caught.value)
        == "'mypkg.NoClose' does not implement envs.base.Environment: missing __len__, close"
    )
    with pytest.raises(ConfigError, match=r"^env._target_='mypkg.NoClose': .*\(missing: __len__, close\)$"):
        Component("env", "mypkg.NoClose", NoClose).build()
    assert isinstance(Component("env", "mypkg.Toy", Toy).build(), Toy)  # the base class supplies close


def test_a_multi_hop_chain_needs_one_question_per_relation():
    assert MultiHop("a", ("r1", "r2"), ("[X] r1?", "[X] r2?")).relations == ("r1", "r2")
    with pytest.raises(ValueError, match=r"^multi_hop: needs one question per relation, got 2 .* and 1 "):
        MultiHop("a", ("r1", "r2"), ("[X] r1?",))
    with pytest.raises(ValueError, match="multi_hop"):
        MultiHop("a", (), ())

"""Outcome noise and random reversals (envs.perturbation) in controlled_drift and executable_drift:
exact semantics on known streams, the defaults leave the streams as they were, bad values name the key."""

import hashlib
import random

import pytest

from envs import check_env
from envs.controlled_drift import ControlledDrift
from envs.executable_drift.env import ExecutableDrift
from envs.perturbation import OutcomeNoise, ReversalSchedule
from runners.config import ConfigError

# The digest of seed 3's default streams (tasks, and the outcome of the right action every 97th
# episode) as the environments gave them before noise and reversals existed.
DEFAULT_DIGESTS = {
    "controlled_drift": "9773fb013ce796a1b1ef1ed3b3de33266165574139f29e34e9c1bf7adabb693a",
    "executable_drift": "0d0876da7d93c823157b1c4f0109cb92e8cd0c9c636dfcb28cd44b9ce48f72a0",
}


def digest(env, seed: int) -> str:
    env.reset(seed)
    rows = []
    for task in env.tasks():
        out = env.execute(task, task.correct) if task.t % 97 == 0 else None
        told = None if out is None else (out.success, [(o.value, o.holds, o.text) for o in out.observations])
        rows.append(
            (
                task.key,
                task.text,
                task.phase,
                task.t,
                task.options,
                task.correct,
                told and (*told, out.message),
            )
        )
    return hashlib.sha256(repr(rows).encode()).hexdigest()


class Scripted:
    """An RNG whose random() returns the given values in order."""

    def __init__(self, values):
        self.values = list(values)

    def random(self):
        return self.values.pop(0)

    def choice(self, seq):
        (only,) = seq  # the tests leave one value to choose from
        return only


def noisy_episodes(seed: int, n: int, rate: float) -> set[int]:
    """The episodes whose draw falls below `rate`, as the module docstring defines the draws."""
    rng = random.Random(f"controlled_drift/{seed}/noise")
    return {t for t in range(n) if rng.random() < rate}


def test_the_default_streams_are_the_streams_as_they_were_before_noise_and_reversals():
    assert digest(ControlledDrift(), 3) == DEFAULT_DIGESTS["controlled_drift"]
    assert digest(ControlledDrift(noise=0.0, reversal_rate=0.0), 3) == DEFAULT_DIGESTS["controlled_drift"]
    with ExecutableDrift(phase_length=50) as env:
        assert digest(env, 3) == DEFAULT_DIGESTS["executable_drift"]


def test_a_right_action_is_reported_failed_exactly_on_the_noisy_episodes_and_scored_as_a_success():
    env = ControlledDrift(noise=0.2, false_success=0.0)
    env.reset(0)
    told_failed = set()
    for task in env.tasks():
        right = env.execute(task, task.correct)
        assert right.success
        (obs,) = right.observations
        assert obs.holds is right.reported is right.told
        if not right.told:
            told_failed.add(task.t)
            assert "failed" in obs.text
        wrong = env.execute(task, next(a for a in task.options if a != task.correct))
        assert not wrong.success and not wrong.told  # false_success=0: a wrong action is never praised
    assert told_failed == noisy_episodes(0, 1600, 0.2)
    assert len(told_failed) == 338  # of 1600 episodes (320 expected)


def test_symmetric_noise_misreports_right_and_wrong_actions_on_the_same_episodes():
    env = ControlledDrift(noise=0.1)
    env.reset(1)
    right_failed, wrong_praised = set(), set()
    for task in env.tasks():
        if not env.execute(task, task.correct).told:
            right_failed.add(task.t)
        if env.execute(task, next(a for a in task.options if a != task.correct)).told:
            wrong_praised.add(task.t)
    assert right_failed == wrong_praised == noisy_episodes(1, 1600, 0.1)


def test_separate_rates_misreport_a_wrong_action_more_often_than_a_right_one():
    env = ControlledDrift(noise=0.05, false_success=0.3)
    env.reset(2)
    tasks = list(env.tasks())
    failed = {t.t for t in tasks if not env.execute(t, t.correct).told}
    praised = {t.t for t in tasks if env.execute(t, next(a for a in t.options if a != t.correct)).told}
    assert failed == noisy_episodes(2, 1600, 0.05) and praised == noisy_episodes(2, 1600, 0.3)
    assert failed < praised  # one draw per episode: whatever misreports a right action misreports a wrong one


def test_trials_are_misreported_with_the_same_rates():
    clean, noisy = ControlledDrift(), ControlledDrift(noise=0.3, false_success=0.0)
    for env in (clean, noisy):
        env.reset(0)
        task = next(env.tasks())
        good = type("P", (), {"key": task.key, "value": task.correct})()
        env.passed = sum(env.trial(good, "support") for _ in range(1000))
    assert clean.passed == 1000
    assert 640 <= noisy.passed <= 760  # 700 expected, 5 standard deviations either side


def test_a_reversal_returns_to_the_previous_value_and_a_first_one_draws_another():
    # one unit, phases at 0 (a) and 3 (c); draws below the rate reverse: at t=2, t=3 (after the phase), t=4
    draws = Scripted([0.9, 0.1, 0.1, 0.1, 0.9, 0.9])
    schedule = ReversalSchedule([0, 3], [{0: "a"}, {0: "c"}], {0: ("a", "b")}, 0.5, 7, draws)
    # t=2: a first reversal draws the other value; t=3: the phase sets c, the reversal returns to b;
    # t=4: back to c
    assert [schedule.at(0, t) for t in range(7)] == ["a", "a", "b", "b", "c", "c", "c"]
    assert schedule.changes(0) == [(0, "a"), (2, "b"), (3, "b"), (4, "c")]
    assert schedule.reversals == 3


def test_with_hazard_one_every_job_alternates_between_two_actions_every_episode():
    env = ControlledDrift(phases=[("stable", "none", 12)], n_keys=2, reversal_rate=1.0)
    env.reset(0)
    list(env.tasks())
    for key in range(2):
        values = [env._correct(t, key) for t in range(12)]
        assert all(values[t] != values[t - 1] for t in range(1, 12))
        assert all(values[t] == values[t - 2] for t in range(3, 12))
    assert env._schedule.reversals == 2 * 11


def test_the_reversal_count_follows_the_hazard_and_the_stream_scores_against_it():
    env = ControlledDrift(reversal_rate=0.01)
    env.reset(4)
    expected = 0.01 * 4 * 1599
    assert abs(env._schedule.reversals - expected) <= 5 * (expected * 0.99) ** 0.5
    tasks = list(env.tasks())
    assert all(env.execute(t, t.correct).success for t in tasks)
    stable = [t for t in tasks if t.phase == "stable"]
    assert len({(t.key, t.correct) for t in stable}) > 4  # reversals inside a phase, not only at boundaries
    assert env.phase_boundaries == ControlledDrift().phase_boundaries  # reversals are not phases


def test_executable_drift_reverses_tools_and_misreports_outcomes():
    with ExecutableDrift(phase_length=5, reversal_rate=1.0, noise=0.5, false_success=0.0) as env:
        env.reset(0)
        tasks = list(env.tasks())
        versions = [env.versions_at(t) for t in range(20)]
        # every tool reverses every episode; at a boundary the phase's change comes first, and a
        # reversal of a tool it moved returns it to where it was
        for t in range(1, 20):
            moved = {n for n in versions[t] if versions[t][n] != versions[t - 1][n]}
            assert moved == set(versions[t]) or t in (5, 10, 15)
        outcomes = [env.execute(t, t.correct) for t in tasks]
    assert all(o.success for o in outcomes)
    told = [o.told for o in outcomes]
    rng = random.Random("executable_drift/0/noise")
    assert told == [not rng.random() < 0.5 for _ in range(20)]
    assert all(o.observations[0].holds == o.told for o in outcomes)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"noise": -0.1}, r"^noise=-0.1: must be in \[0, 0.5\]"),
        ({"noise": 0.7}, r"^noise=0.7: must be in \[0, 0.5\]"),
        ({"noise": "high"}, r"^noise='high': must be a finite number"),
        ({"false_success": 0.6}, r"^false_success=0.6: must be in \[0, 0.5\]"),
        ({"reversal_rate": 1.5}, r"^reversal_rate=1.5: must be in \[0, 1\]"),
        ({"reversal_rate": -0.01}, r"^reversal_rate=-0.01: must be in \[0, 1\]"),
    ],
)
def test_a_rate_out_of_range_is_refused_naming_the_key(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ControlledDrift(**kwargs)
    with pytest.raises(ValueError, match=message):
        ExecutableDrift(**kwargs)
    if "reversal_rate" not in kwargs:
        with pytest.raises(ValueError, match=message):
            OutcomeNoise(kwargs.get("noise", 0.0), kwargs.get("false_success"))


def test_a_bad_rate_in_a_config_is_one_line_naming_the_key(compose):
    with pytest.raises(ConfigError, match=r"^env.noise=0.9: must be in \[0, 0.5\]$"):
        compose("+env.noise=0.9").env.build()
    with pytest.raises(ConfigError, match=r"^env.reversal_rate=2.0: must be in \[0, 1\]$"):
        compose("env=executable_drift", "+env.reversal_rate=2.0").env.build()


def test_noisy_reversing_environments_pass_the_environment_check():
    check_env(ControlledDrift(noise=0.2, reversal_rate=0.01, phase_length=50))
    check_env(ExecutableDrift(noise=0.1, false_success=0.0, reversal_rate=0.02, phase_length=10))


def test_memory_is_told_the_reported_outcome_and_the_episode_is_scored_by_the_true_one():
    import asyncio

    from baselines.lww import LastWriteWins
    from runners.agent.loop import run_stream
    from runners.llm.simulated.reader import SimulatedBackend

    class Recording(LastWriteWins):
        def __init__(self):
            super().__init__()
            self.told, self.seen = [], []

        def observe(self, obs):
            self.seen.append((obs.t, obs.holds))
            super().observe(obs)

        def feedback(self, used, success, t):
            self.told.append((t, success))
            super().feedback(used, success, t)

    env, memory = ControlledDrift(phase_length=40, noise=0.3), Recording()
    result = asyncio.run(run_stream(env, memory, SimulatedBackend(), seed=5, labels={"memory": "m"}))
    noisy = noisy_episodes(5, 160, 0.3)
    for rec, (t, told), (t_obs, holds) in zip(result.records, memory.told, memory.seen, strict=True):
        assert rec["t"] == t == t_obs and told == holds
        assert told == (rec["success"] != (t in noisy))  # misreported exactly on the noisy episodes
    assert {rec["t"] for rec in result.records if rec["success"]} - noisy  # right actions, told right

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.base import TRIAL_KINDS, Environment, Task
from envs.controlled_drift import ACTION_NAMES, ControlledDrift, DriftPhase


def make(seed: int = 0, **kwargs) -> ControlledDrift:
    env = ControlledDrift(**kwargs)
    env.reset(seed)
    return env


def signature(tasks: list[Task]) -> list[tuple]:
    return [(t.key, t.text, t.phase, t.t, t.options, t.hint, t.correct) for t in tasks]


def regimes(env: ControlledDrift) -> dict[str, dict[int, str]]:
    """The regime of every phase as the stream reveals it (task.correct), checked to be one per phase."""
    seen: dict[str, dict[int, str]] = {}
    for task in env.tasks():
        assert seen.setdefault(task.phase, {}).setdefault(task.key, task.correct) == task.correct
    return seen


def precedent(key, value) -> SimpleNamespace:
    return SimpleNamespace(key=key, value=value)


def test_is_an_environment():
    assert isinstance(make(), Environment)
    assert ControlledDrift.name == "controlled_drift"


def test_default_phases_and_boundaries():
    env = make()
    tasks = list(env.tasks())
    assert len(tasks) == 1600
    assert [t.t for t in tasks] == list(range(1600))
    assert env.phase_boundaries == [(400, "full_reversal"), (800, "partial_reversal"), (1200, "return")]
    for start, phase in [(0, "stable"), *env.phase_boundaries]:
        assert {t.phase for t in tasks[start : start + 400]} == {phase}
    assert all(t.hint is None and sorted(t.options) == sorted(ACTION_NAMES[:3]) for t in tasks)
    assert len({t.options for t in tasks}) > 1  # options are shuffled per task


def test_configured_phases_in_every_accepted_form():
    phases = [DriftPhase("a"), {"name": "b", "change": "full", "length": 30}, ("c", "return", 5)]
    env = make(phases=phases, phase_length=20)
    tasks = list(env.tasks())
    assert env.phase_boundaries == [(20, "b"), (50, "c")]
    assert [t.phase for t in tasks] == ["a"] * 20 + ["b"] * 30 + ["c"] * 5


@given(seed=st.integers(0, 10_000), n_keys=st.integers(1, 10), n_actions=st.integers(2, 6))
@settings(max_examples=40, deadline=None)
def test_reversals_and_return(seed, n_keys, n_actions):
    env = make(seed, n_keys=n_keys, n_actions=n_actions, phase_length=60 * n_keys)
    r = regimes(env)
    r1, full, partial, back = r["stable"], r["full_reversal"], r["partial_reversal"], r["return"]
    assert all(len(regime) == n_keys for regime in r.values())  # every key occurs in every phase
    assert all(full[k] != r1[k] for k in range(n_keys))
    changed = [k for k in range(n_keys) if partial[k] != full[k]]
    assert len(changed) == max(1, round(n_keys / 2))
    if n_actions >= 3:  # a change moves to an action the key has not had while one is left
        assert all(partial[k] != r1[k] for k in changed)
    assert back == r1


def test_execute_correct_wrong_and_untrusted_actions():
    env = make()
    task = next(env.tasks())
    right = env.execute(task, task.correct)
    assert right.success
    (obs,) = right.observations
    assert (obs.key, obs.value, obs.holds, obs.t, obs.source) == (task.key, task.correct, True, 0, "outcome")
    assert f'"{task.correct}"' in obs.text and str(task.key) in obs.text
    wrong_action = next(a for a in task.options if a != task.correct)
    wrong = env.execute(task, wrong_action)
    assert not wrong.success
    assert [(o.value, o.holds) for o in wrong.observations] == [(wrong_action, False)]
    assert f'"{wrong_action}"' in wrong.observations[0].text
    for garbage in ["", "nonsense", task.correct.upper(), "x" * 10_000, None, 3, ["flip"], {"a": 1}]:
        outcome = env.execute(task, garbage)
        assert not outcome.success and outcome.observations == ()
        assert "invalid action" in outcome.message and len(outcome.message) < 200


def test_execute_scores_against_the_tasks_own_phase():
    env = make()
    tasks = list(env.tasks())
    stable = next(t for t in tasks if t.phase == "stable")
    reversed_ = next(t for t in tasks if t.phase == "full_reversal" and t.key == stable.key)
    assert env.execute(stable, stable.correct).success
    assert not env.execute(reversed_, stable.correct).success


def test_trials_follow_the_latest_task():
    env = make()
    stream = env.tasks()
    task = next(stream)
    good, bad = (
        precedent(task.key, task.correct),
        precedent(task.key, "flip" if task.correct != "flip" else "skip"),
    )
    assert env.trial(good, "support")
    assert not env.trial(bad, "support")
    for later in stream:
        if later.phase == "full_reversal":
            break
    assert not env.trial(good, "support")  # R1's action no longer completes the job


def test_counterfactual_and_contamination_trials():
    env = make()
    task = next(env.tasks())
    good = precedent(task.key, task.correct)
    assert env.trial(good, "counterfactual")
    assert env.trial(good, "contamination")
    for malformed in [
        precedent(99, task.correct),
        precedent(task.key, "teleport"),
        precedent([1], None),
        object(),
    ]:
        assert not any(env.trial(malformed, kind) for kind in TRIAL_KINDS)
    single = make(n_keys=1)
    only = next(single.tasks())
    alone = precedent(0, only.correct)
    assert single.trial(alone, "support")
    assert not single.trial(alone, "counterfactual")  # no job where the action should not apply
    assert single.trial(alone, "contamination")  # no other job to harm
    with pytest.raises(ValueError, match="kind"):
        env.trial(good, "vibes")


def test_use_before_reset_is_an_error():
    env = ControlledDrift()
    with pytest.raises(RuntimeError, match="reset"):
        env.tasks()
    with pytest.raises(RuntimeError, match="reset"):
        env.trial(precedent(0, "flip"), "support")


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"n_keys": 0}, "n_keys"),
        ({"n_keys": 2.5}, "n_keys"),
        ({"n_keys": True}, "n_keys"),
        ({"n_actions": 1}, "n_actions"),
        ({"n_actions": len(ACTION_NAMES) + 1}, "n_actions"),
        ({"phase_length": 0}, "phase_length"),
        ({"partial_fraction": 0.0}, "partial_fraction"),
        ({"partial_fraction": 1.5}, "partial_fraction"),
        ({"partial_fraction": "half"}, "partial_fraction"),
        ({"phases": []}, "phases"),
        ({"phases": "stable"}, "phases"),
        ({"phases": [("stable", "sideways")]}, "phases"),
        ({"phases": [("stable", "full")]}, "phases"),
        ({"phases": [{"title": "stable"}]}, "phases"),
        ({"phases": [("", "none")]}, "phases"),
        ({"phases": [("stable", "none", 0)]}, "phases"),
    ],
)
def test_bad_arguments_name_the_parameter(kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name}"):
        ControlledDrift(**kwargs)


def test_bad_seed_names_the_parameter():
    with pytest.raises(ValueError, match="^seed"):
        ControlledDrift().reset(-1)


WORDS = ("red", "blue", "green", "gold")


def test_a_configured_vocabulary_renames_the_actions_and_leaves_the_stream_as_it_was():
    renamed = {old: new for old, new in zip(ACTION_NAMES, WORDS, strict=False)}
    default = [
        (k, text, phase, t, tuple(renamed[o] for o in options), hint, renamed[correct])
        for k, text, phase, t, options, hint, correct in signature(list(make(5, n_actions=4).tasks()))
    ]
    assert signature(list(make(5, n_actions=4, actions=list(WORDS)).tasks())) == default
    env = make(5, n_actions=2, actions=list(WORDS))  # the first n_actions names
    assert {o for t in env.tasks() for o in t.options} == {"red", "blue"}
    assert env.trial(precedent(0, env._regimes[0][0]), "support")


def test_the_default_vocabulary_given_explicitly_changes_nothing():
    assert signature(list(make(2, actions=list(ACTION_NAMES)).tasks())) == signature(list(make(2).tasks()))


@pytest.mark.parametrize(
    ("actions", "message"),
    [
        (["red", "Red", "blue"], "distinct"),
        (["red", "", "blue"], "non-empty"),
        (["red", " blue", "green"], "surrounding spaces"),
        (["red", "blue\ngreen", "gold"], "printable"),
        (["red", 3, "blue"], "non-empty"),
        ("red,blue,green", "a list of action names"),
        (["red", "blue"], "n_actions must be at most the 2 action names, got 3"),
    ],
)
def test_a_bad_vocabulary_is_refused_naming_the_parameter(actions, message):
    with pytest.raises(ValueError, match=rf"^(actions|n_actions) .*{message}|^{message}"):
        ControlledDrift(actions=actions)

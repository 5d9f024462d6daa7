from collections import defaultdict
from types import SimpleNamespace

import pytest

from envs.base import TRIAL_KINDS, Environment
from envs.preference_stream import SLOTS, PreferenceStream


def make(seed: int = 0, **kwargs) -> PreferenceStream:
    env = PreferenceStream(**kwargs)
    env.reset(seed)
    return env


def precedent(key, value) -> SimpleNamespace:
    return SimpleNamespace(key=key, value=value)


def test_is_an_environment():
    assert isinstance(make(), Environment)
    assert PreferenceStream.name == "preference_stream"


def test_sessions_phases_and_boundaries():
    env = make()
    tasks = list(env.tasks())
    assert len(tasks) == 2000
    assert env.phase_boundaries == [(400, "drift")]
    assert [t.phase for t in tasks] == ["stable"] * 400 + ["drift"] * 1600
    slots = {slot.name: slot for slot in SLOTS[:3]}
    for task in tasks[:50]:
        user, slot = task.key
        assert 0 <= user < 20 and sorted(task.options) == sorted(slots[slot].values)
        assert task.text == f"User {user} asks for a {slots[slot].noun} recommendation."
    assert make(stable_length=0).phase_boundaries == []
    assert {t.phase for t in make(stable_length=0, drift_length=10).tasks()} == {"drift"}
    assert make(drift_length=0).phase_boundaries == []


def preferences_by_key(tasks):
    by_key = defaultdict(list)
    for task in tasks:
        by_key[task.key].append(task.meta["preference"])
    return by_key


def test_preferences_hold_still_when_stable_and_change_when_drifting():
    tasks = list(make(drift_rate=0.01).tasks())
    stable = preferences_by_key(t for t in tasks if t.phase == "stable")
    assert all(len(set(prefs)) == 1 for prefs in stable.values())
    drift = preferences_by_key(t for t in tasks if t.phase == "drift")
    assert sum(len(set(prefs)) > 1 for prefs in drift.values()) > len(drift) // 2
    frozen = preferences_by_key(make(drift_rate=0.0).tasks())
    assert all(len(set(prefs)) == 1 for prefs in frozen.values())


def test_rates_are_respected():
    tasks = list(make(1, drift_length=20_000, glitch_rate=0.1, hint_rate=0.5).tasks())
    assert abs(sum(t.meta["glitch"] for t in tasks) / len(tasks) - 0.1) < 0.01
    assert abs(sum(t.hint is not None for t in tasks) / len(tasks) - 0.5) < 0.01
    none = list(make(glitch_rate=0.0, hint_rate=0.0).tasks())
    assert not any(t.meta["glitch"] or t.hint for t in none)


def test_execute_correct_wrong_and_untrusted_actions():
    env = make(glitch_rate=0.0, hint_rate=0.0)
    task = next(env.tasks())
    right = env.execute(task, task.correct)
    assert right.success
    (obs,) = right.observations
    assert (obs.key, obs.value, obs.holds, obs.t, obs.source) == (task.key, task.correct, True, 0, "outcome")
    assert f'"{task.correct}"' in obs.text and f"user {task.key[0]} " in obs.text
    wrong_action = next(a for a in task.options if a != task.correct)
    wrong = env.execute(task, wrong_action)
    assert not wrong.success
    outcome, reveal = wrong.observations
    assert (outcome.value, outcome.holds, outcome.source) == (wrong_action, False, "outcome")
    assert (reveal.value, reveal.holds, reveal.source) == (task.correct, True, "feedback")
    assert reveal.text == f"user {task.key[0]} said they prefer {_says(task.key[1], task.correct)}"
    for garbage in ["", "nonsense", "x" * 10_000, None, 3, ["aisle"]]:
        result = env.execute(task, garbage)
        assert not result.success and "invalid action" in result.message and len(result.message) < 200
        assert [o.source for o in result.observations] == ["feedback"]  # no outcome for a non-answer
    quiet = make(glitch_rate=0.0, hint_rate=0.0, reveal_rate=0.0)
    first = next(quiet.tasks())
    assert [o.source for o in quiet.execute(first, "").observations] == []


def test_hints_state_the_true_current_preference():
    env = make(drift_rate=0.01, hint_rate=0.5)
    hinted = 0
    for task in env.tasks():
        truth = task.meta["preference"]
        assert env.trial(precedent(task.key, truth), "support")  # the environment's own truth, now
        if task.hint is None:
            continue
        hinted += 1
        assert task.hint == f"User {task.key[0]} says: I prefer " + _says(task.key[1], truth) + "."
        stated = env.execute(task, "").observations[0]
        assert (stated.value, stated.holds, stated.source) == (truth, True, "hint")
        assert stated.text == f"user {task.key[0]} prefers {_says(task.key[1], truth)}"
    assert hinted > 500


def _says(slot_name: str, value: str) -> str:
    return next(s for s in SLOTS if s.name == slot_name).says(value)


def test_glitches_contradict_feedback_without_changing_the_preference():
    env = make(2, drift_rate=0.0, glitch_rate=0.3, hint_rate=0.0)
    tasks = list(env.tasks())
    glitches = [t for t in tasks if t.meta["glitch"]]
    assert len(glitches) > 400
    for task in glitches:
        truth = task.meta["preference"]
        assert task.correct != truth and task.correct in task.options
        told = env.execute(task, truth)
        assert not told.success
        assert [(o.value, o.holds, o.source) for o in told.observations] == [
            (truth, False, "outcome"),
            (task.correct, True, "glitch"),
        ]
        assert f'"{task.correct}"' in told.observations[1].text
        assert env.execute(task, task.correct).success
    assert all(len(set(prefs)) == 1 for prefs in preferences_by_key(tasks).values())


def test_trial_rejects_a_glitch_candidate():
    env = make(3, glitch_rate=0.3)
    for task in env.tasks():
        if task.meta["glitch"]:
            break
    assert not env.trial(precedent(task.key, task.correct), "support")
    assert env.trial(precedent(task.key, task.meta["preference"]), "support")


def test_counterfactual_and_contamination_trials():
    env = make()
    task = next(env.tasks())
    good = precedent(task.key, task.meta["preference"])
    assert env.trial(good, "counterfactual")
    assert env.trial(good, "contamination")
    user, slot = task.key
    malformed = [
        precedent((99, slot), good.value),
        precedent((user, "hats"), good.value),
        precedent((user, slot), "teleport"),
        precedent((True, slot), good.value),
        precedent(user, good.value),
        precedent([user, slot], good.value),
        object(),
    ]
    for bad in malformed:
        assert not any(env.trial(bad, kind) for kind in TRIAL_KINDS)
    alone = make(n_users=1)
    only = next(alone.tasks())
    mine = precedent(only.key, only.meta["preference"])
    assert alone.trial(mine, "support")
    assert not alone.trial(mine, "counterfactual")  # no user for whom it should not apply
    assert alone.trial(mine, "contamination")  # no other user to harm
    with pytest.raises(ValueError, match="kind"):
        env.trial(good, "vibes")


def test_use_before_reset_is_an_error():
    env = PreferenceStream()
    with pytest.raises(RuntimeError, match="reset"):
        env.tasks()
    with pytest.raises(RuntimeError, match="reset"):
        env.trial(precedent((0, "seat"), "aisle"), "support")


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"n_users": 0}, "n_users"),
        ({"n_users": "20"}, "n_users"),
        ({"n_slots": 0}, "n_slots"),
        ({"n_slots": len(SLOTS) + 1}, "n_slots"),
        ({"stable_length": -1}, "stable_length"),
        ({"drift_length": 1.5}, "drift_length"),
        ({"stable_length": 0, "drift_length": 0}, "stable_length"),
        ({"drift_rate": -0.1}, "drift_rate"),
        ({"glitch_rate": 1.1}, "glitch_rate"),
        ({"glitch_rate": float("nan")}, "glitch_rate"),
        ({"hint_rate": True}, "hint_rate"),
        ({"reveal_rate": "often"}, "reveal_rate"),
    ],
)
def test_bad_arguments_name_the_parameter(kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name}"):
        PreferenceStream(**kwargs)


def test_bad_seed_names_the_parameter():
    with pytest.raises(ValueError, match="^seed"):
        PreferenceStream().reset("zero")

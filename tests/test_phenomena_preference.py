"""The paper's phenomena on preference_stream at default settings (simulated reader, 4 seeds).

Measured (10 seeds, `make reproduce`): TEPA-Full ~0.889, TEPA-Rev ~0.887 (Full ahead in 8 of 10 seeds,
in all of seeds 0-3 by +0.0046 on average), No Memory ~0.842, Append-Only ~0.711.
"""

import pytest

from envs.preference_stream import PreferenceStream
from tests.helpers.phenomena import run_methods, success

#: The methods these tests compare (each method's streams are independent of the others').
METHODS = ["no_memory", "append_only", "tepa_rev", "tepa_full"]


@pytest.fixture(scope="module")
def runs():
    return run_methods(PreferenceStream, range(4), METHODS)


def test_no_memory_scores_high_because_sessions_state_the_preference(runs):
    df, _ = runs
    assert success(df)["no_memory"] > 0.8


def test_tepa_full_beats_append_only_and_no_memory(runs):
    df, _ = runs
    s = success(df)
    assert s["tepa_full"] > s["append_only"] + 0.1
    assert s["tepa_full"] > s["no_memory"] + 0.02


def test_tepa_full_trials_reject_glitch_candidates(runs):
    _, events = runs
    full = events[events.memory == "tepa_full"]
    assert (full.event == "trial_failed").sum() > 0
    assert not (events[events.memory == "tepa_rev"].event == "trial").any()


def test_tepa_full_beats_tepa_rev(runs):
    """Full keeps glitch candidates out of the prompt; measured margin +0.0046 over these seeds."""
    df, _ = runs
    s = success(df)
    assert s["tepa_full"] > s["tepa_rev"] + 0.001


def test_glitch_candidates_are_promoted_at_once_by_tepa_rev_and_never_by_tepa_full(runs):
    """A glitch's whim is never the user's true preference, so the support trial at its creation fails."""
    _, events = runs
    for memory, promoted_at_once in (("tepa_rev", True), ("tepa_full", False)):
        ev = events[events.memory == memory]
        created = ev[(ev.event == "created") & ev.reason.str.contains("'glitch'")]
        assert len(created) > 20
        promoted = ev[ev.event == "promoted"].set_index(["seed", "id"]).t
        at_once = [promoted.get((r.seed, r.id)) == r.t for r in created.itertuples()]
        assert all(at_once) if promoted_at_once else not any(at_once)

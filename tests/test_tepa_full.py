"""TEPA-Full: trial validation before promotion (the 60% / one-support rule and its edge cases)."""

from __future__ import annotations

import inspect

import pytest

from tepa import Memory, Observation, State, TEPAFull, TEPARev

KEY = "door"
T, F = True, False


class Script:
    """A trial function that answers from a per-kind script and records every call."""

    def __init__(self, **answers: list[bool]) -> None:
        self.answers = {kind: list(a) for kind, a in answers.items()}
        self.calls: list[tuple[int, str, str]] = []

    def __call__(self, precedent, kind: str) -> bool:
        self.calls.append((precedent.id, precedent.value, kind))
        return self.answers[kind].pop(0)


def always(result: bool):
    return lambda precedent, kind: result


def see(m: TEPAFull, t: int, value: str, holds: bool = True):
    m.observe(Observation(KEY, value, holds, t, f"{KEY} opens with {value}", "test"))
    return m.lookup(KEY, value)


def test_implements_the_memory_protocol():
    m = TEPAFull(trial_fn=always(True))
    assert isinstance(m, Memory) and m.name == "tepa_full"


def test_without_a_trial_function_the_first_trial_raises():
    m = TEPAFull()  # constructing without one is fine: the runner sets it later
    with pytest.raises(RuntimeError, match="set_trial"):
        see(m, 0, "red")


@pytest.mark.parametrize(
    ("support", "counterfactual", "contamination", "promoted"),
    [
        ([T, F], [T], [T, F], True),  # 3/5 = 60% with a support pass -> promoted
        ([F, F], [T], [T, T], False),  # 3/5 = 60% but no support pass -> not
        ([T, F], [F], [T, F], False),  # 2/5 = 40% -> not
        ([T, T], [T], [T, T], True),  # 5/5
        ([T, T], [F], [F, F], False),  # 2/5 although both support trials pass
    ],
)
def test_sixty_percent_and_one_support_rule(support, counterfactual, contamination, promoted):
    trial = Script(support=support, counterfactual=counterfactual, contamination=contamination)
    m = TEPAFull(trial_fn=trial)
    p = see(m, 0, "red")  # s=1: 2/3 > theta_pro=0.6 -> one round of 2 + 1 + 2 trials
    assert len(trial.calls) == 5
    assert p.state is (State.ACTIVE if promoted else State.REVOKED)  # one failed round archives
    events = [e.event for e in p.history if e.event != "trial"]
    assert events == ["created", "promoted"] if promoted else ["created", "trial_failed", "revoked"]


@pytest.mark.parametrize(
    ("counts", "passes", "promoted"),
    [
        ((4, 3, 3), 6, True),  # exactly 60% of 10 (6/10 is 0.6 only up to float rounding)
        ((4, 3, 3), 5, False),  # 50%
        ((3, 2, 2), 4, False),  # 4/7 = 57%, just below
        ((3, 2, 2), 5, True),  # 5/7 = 71%
        ((1, 1, 1), 2, True),  # 2/3 = 67%
    ],
)
def test_exact_sixty_percent_boundary(counts, passes, promoted):
    n_s, n_c, n_x = counts
    answers = [True] * passes + [False] * (sum(counts) - passes)  # the support trials come first
    trial = Script(
        support=answers[:n_s], counterfactual=answers[n_s : n_s + n_c], contamination=answers[n_s + n_c :]
    )
    m = TEPAFull(trial_fn=trial, n_support=n_s, n_counterfactual=n_c, n_contamination=n_x)
    p = see(m, 0, "red")
    assert p.state is (State.ACTIVE if promoted else State.REVOKED)
    assert (m.trials, m.trial_passes) == (sum(counts), passes)


def test_trials_get_the_precedent_and_run_in_kind_order_and_are_counted():
    trial = Script(support=[T, T], counterfactual=[F], contamination=[T, T])
    m = TEPAFull(trial_fn=trial)
    p = see(m, 3, "red")
    assert trial.calls == [
        (p.id, "red", "support"),
        (p.id, "red", "support"),
        (p.id, "red", "counterfactual"),
        (p.id, "red", "contamination"),
        (p.id, "red", "contamination"),
    ]
    snap = m.snapshot()
    assert (snap["trials"], snap["trial_passes"], snap["promotions"]) == (5, 4, 1)
    log = m.drain_events()
    assert [e["event"] for e in log] == ["created"] + ["trial"] * 5 + ["promoted"]
    assert log[3]["reason"] == "round 1: counterfactual trial 1/1 failed"
    assert "trials round 1: 4/5 trials passed, 2 of them support" in log[-1]["reason"]


def test_failed_hypothesis_is_retried_only_on_new_supporting_evidence():
    trial = Script(support=[F, F, T, T], counterfactual=[F, T], contamination=[F, F, T, T])
    m = TEPAFull(trial_fn=trial, max_trial_rounds=3)
    a = see(m, 0, "red")  # round 1 fails (0/5)
    assert a.state is State.HYPOTHESIS and len(trial.calls) == 5
    see(m, 1, "red", holds=False)  # a failure: s=1, f=1, no new support -> no trial
    assert len(trial.calls) == 5
    see(m, 2, "red")  # support: s=2, f=1: 3/5 = 0.6, not above theta_pro -> no trial
    assert len(trial.calls) == 5
    see(m, 3, "red")  # support: s=3, f=1: 4/6 = 0.667 > 0.6 -> round 2 (5/5 pass)
    assert len(trial.calls) == 10 and a.state is State.ACTIVE
    assert [e.event for e in a.history if e.event != "trial"] == ["created", "trial_failed", "promoted"]


def test_by_default_one_failed_round_archives_so_conflicts_while_wrong_do_not_bar_it_later():
    """A glitch's candidate fails its trial; while it is wrong the key's true value is seen ten times.
    When the world then moves to the candidate's value, one observation re-promotes it. Left waiting as
    a hypothesis (max_trial_rounds=3) it would have counted those ten as conflicts."""
    now = {"value": "red"}

    def truthful(p, kind):
        return p.value == now["value"]

    for rounds, promoted_after in ((1, 1), (3, 15)):
        m = TEPAFull(trial_fn=truthful, max_trial_rounds=rounds)
        see(m, 0, "red")
        glitch = see(m, 1, "blue")  # its round fails: 2/5 trials, no support pass
        assert glitch.state is (State.REVOKED if rounds == 1 else State.HYPOTHESIS)
        for t in range(2, 12):
            see(m, t, "red")
        now["value"] = "blue"
        seen = 0
        while glitch.state is not State.ACTIVE:
            seen += 1
            see(m, 11 + seen, "blue")
        # waiting: (1+s)/(2+s+10) > 0.6 needs s = 16, 15 more; fresh in the archive: (1+1)/(2+1) > 0.6
        assert seen == promoted_after
        now["value"] = "red"


def test_archived_with_reason_failed_trial_after_max_rounds():
    m = TEPAFull(trial_fn=always(False), max_trial_rounds=3)
    a = see(m, 0, "red")  # round 1
    see(m, 1, "red")  # round 2
    assert a.state is State.HYPOTHESIS
    see(m, 2, "red")  # round 3 fails: archived
    assert a.state is State.REVOKED and a.history[-1].event == "revoked"
    assert a.history[-1].reason.startswith("failed trial")
    assert m.archive.revoked() == [a]
    assert m.snapshot()["hypothesis"] == 0 and m.snapshot()["revoked"] == 1
    assert [e.event for e in a.history].count("trial_failed") == 3
    assert m.trials == 15 and m.trial_passes == 0


def test_revoked_candidate_that_exhausts_its_rounds_starts_a_new_epoch():
    m = TEPAFull(trial_fn=always(False), max_trial_rounds=1)
    a = see(m, 0, "red")  # archived at once: 1 failed round
    assert a.state is State.REVOKED and a.epoch == 1
    see(m, 1, "red")  # since archiving s=1: 2/3 > 0.6 -> a re-promotion round, which fails
    assert a.state is State.REVOKED and a.epoch == 2 and (a.s_epoch, a.f_epoch) == (0, 0)
    assert a.history[-1].event == "trial_failed" and "new epoch" in a.history[-1].reason
    assert m.revocations == 1


def test_repromotion_goes_through_a_trial():
    trial = Script(support=[T, T, T, T, F, F, T, T], counterfactual=[T] * 4, contamination=[T] * 8)
    m = TEPAFull(trial_fn=trial)
    a = see(m, 0, "red")  # round passes: promoted
    see(m, 1, "red")
    for t in range(2, 6):
        see(m, t, "blue")  # blue promoted by its round at t=2; red revoked at t=5 (s=2, f=4: 0.375)
    assert a.state is State.REVOKED and len(trial.calls) == 10
    see(m, 6, "red")  # since revocation s=1: 2/3 > 0.6 -> trial round: 3/5 but no support pass
    assert a.state is State.REVOKED and a.history[-1].event == "trial_failed"
    see(m, 7, "red")  # s=2 since revocation: 3/4 -> next round passes
    assert a.state is State.ACTIVE and a.history[-1].event == "repromoted"
    assert m.lookup(KEY, "red") is a and m.repromotions == 1
    assert m.trials == 20


def test_revocation_rules_are_those_of_tepa_rev():
    m = TEPAFull(trial_fn=always(True))
    a = see(m, 0, "red")
    for t in range(1, 4):
        see(m, t, "blue")
    assert a.state is State.REVOKED  # s=1, f=3: (1+1)/(2+4)=0.333 < 0.4


@pytest.mark.parametrize(
    ("name", "value"),
    [("n_support", 0), ("n_counterfactual", -1), ("n_contamination", 1.5), ("max_trial_rounds", 0)],
)
def test_bad_trial_parameters_raise_value_error_naming_them(name, value):
    with pytest.raises(ValueError, match=name):
        TEPAFull(**{name: value})


def test_set_trial_validates_and_threshold_arguments_pass_through():
    m = TEPAFull(theta_pro=0.75, n_min=4)
    assert (m.theta_pro, m.n_min) == (0.75, 4)
    with pytest.raises(ValueError, match="trial_fn"):
        m.set_trial("not callable")
    with pytest.raises(ValueError, match="theta_rev"):
        TEPAFull(theta_rev=2)
    m.set_trial(always(True))
    assert see(m, 0, "red").state is State.HYPOTHESIS  # 2/3 <= 0.75: no trial yet
    assert m.trials == 0


def test_threshold_parameters_mirror_tepa_rev():
    full = inspect.signature(TEPAFull).parameters
    for name, param in inspect.signature(TEPARev).parameters.items():
        assert full[name].default == param.default and full[name].kind is param.KEYWORD_ONLY

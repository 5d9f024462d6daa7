import asyncio

import pytest

from envs.base import Task
from runners.agent.prompt import render
from runners.llm.backend import Request
from runners.llm.simulated import SimulatedBackend
from tepa.evidence import Evidence


def _req(task, evidence, seed=0):
    return Request(messages=render(task, evidence), seed=seed)


def _choice(backend, task, evidence, seed=0):
    return asyncio.run(backend.complete(_req(task, evidence, seed))).text


TASK = Task(key="k", text="Job 1: pick the action.", phase="p", t=100, options=("a", "b", "c"))


def test_choice_is_a_function_of_prompt_text_and_seed():
    sim = SimulatedBackend(lapse=0.5)
    ev = [Evidence(key="k", value="b", holds=True, t=90, text='"b" worked')]
    a = [_choice(sim, TASK, ev, seed=s) for s in range(30)]
    b = [_choice(SimulatedBackend(lapse=0.5), TASK, ev, seed=s) for s in range(30)]
    assert a == b
    # Different hidden state, same rendered text: identical answers (the reader sees text only).
    other = Task(key="zzz", text=TASK.text, phase="other", t=100, options=TASK.options, correct="c")
    c = [_choice(sim, other, ev, seed=s) for s in range(30)]
    assert a == c
    # The seed matters when the reader lapses.
    assert len(set(a)) > 1


def test_follows_support_and_avoids_failures():
    sim = SimulatedBackend(lapse=0.0)
    ev = [
        Evidence(key="k", value="a", holds=False, t=95, text='"a" failed'),
        Evidence(key="k", value="c", holds=True, t=96, text='"c" worked'),
    ]
    assert all(_choice(sim, TASK, ev, seed=s) == "Answer: C" for s in range(10))


def test_counts_saturate_and_recency_fades():
    sim = SimulatedBackend(lapse=0.0, half_life=10.0)
    old = Evidence(key="k", value="a", holds=True, t=0, text="", support=50, conflict=0)
    new = Evidence(key="k", value="b", holds=True, t=99, text="", support=1, conflict=0)
    # log1p(50) * 0.5**10 ~= 0.0038 < log1p(1) * 0.5**0.1 ~= 0.65
    assert _choice(sim, TASK, [old, new]) == "Answer: B"


def test_hint_names_option():
    sim = SimulatedBackend(lapse=0.0, w_hint=3.0)
    task = Task(key="k", text="t", phase="p", t=5, options=("a", "b"), hint='I prefer "b" now.')
    ev = [Evidence(key="k", value="a", holds=True, t=4, text="", support=3, conflict=0)]
    # log1p(3) = 1.39 < 3.0
    assert _choice(sim, task, ev) == "Answer: B"


def test_free_form_answers_best_value():
    sim = SimulatedBackend(lapse=0.0)
    task = Task(key=("x", "r"), text="What is r of x?", phase="q", t=1000)
    ev = [
        Evidence(key=("x", "r"), value="Paris", holds=True, t=10, text="", support=1, conflict=1),
        Evidence(key=("x", "r"), value="Rome", holds=True, t=20, text="", support=1, conflict=0),
    ]
    assert _choice(sim, task, ev) == "Answer: Rome"
    assert _choice(sim, task, []) == "Answer: unknown"


@pytest.mark.parametrize("kw", [{"lapse": 1.5}, {"w_hint": -1}, {"half_life": 0}])
def test_bad_parameters_name_the_key(kw):
    with pytest.raises(ValueError, match=next(iter(kw))):
        SimulatedBackend(**kw)

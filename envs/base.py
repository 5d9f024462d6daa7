"""The one environment protocol every setting follows (in the spirit of Gymnasium).

An environment is a seeded stream of `Task`s, each labelled with its phase. The agent loop asks memory,
renders a prompt, lets the backend choose, then calls `execute`, whose `Outcome` carries the
observations to write back to memory. `trial` lets TEPA-Full validate a candidate precedent by real
execution before it is promoted.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from tepa.evidence import Observation

TRIAL_KINDS = ("support", "counterfactual", "contamination")


@dataclass(frozen=True, slots=True)
class Task:
    """One decision (or, with `decide=False`, one ingestion step that only writes `observe` to memory).

    `options` are the choices shown to the model; empty for free-form answers. `hint` is something the
    session itself states (e.g. "I now prefer aisle seats"); the prompt shows it, memory does not.
    `observe` is evidence the environment shows before the decision (facts to ingest); the loop writes it
    to memory first. `correct` is the hidden right answer, used only for logging. A multi-hop question
    carries `meta["hops"] = [subject, r1, r2, ...]` and `meta["hop_questions"]` (one question template
    with "[X]" per relation): the loop then answers it hop by hop, retrieving by (entity, relation).
    """

    key: Hashable | None
    text: str
    phase: str
    t: int
    options: tuple[str, ...] = ()
    hint: str | None = None
    observe: tuple[Observation, ...] = ()
    decide: bool = True
    correct: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What acting did: success, the observations to write to memory, and the environment's message.
    With `feedback=False` the loop does not report the outcome to memory (a benchmark question's score is
    the evaluation, not experience)."""

    success: bool
    observations: tuple[Observation, ...] = ()
    message: str = ""
    feedback: bool = True  # False for a benchmark score the agent must not learn from


@runtime_checkable
class Environment(Protocol):
    """A seeded, phase-labelled stream of tasks."""

    name: str

    def reset(self, seed: int) -> None:
        """Start a fresh, reproducible stream (fresh sandbox, fresh regime draw)."""

    def tasks(self) -> Iterator[Task]:
        """The stream of tasks for the current seed, in order (`t` counts from 0)."""

    def execute(self, task: Task, action: str) -> Outcome:
        """Carry out `action` (untrusted model output) for `task` and report the outcome."""

    @property
    def phase_boundaries(self) -> list[tuple[int, str]]:
        """`(t, phase)` for the first task of every phase after the first."""

    def trial(self, precedent: Any, kind: str) -> bool:
        """Run `precedent` (anything with `.key` and `.value`) on a trial task of `kind`
        (one of TRIAL_KINDS) and say whether the trial passed."""

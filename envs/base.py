"""The one environment protocol every setting follows (in the spirit of Gymnasium).

An environment is a seeded stream of `Task`s, each labelled with its phase. The agent loop asks memory,
renders a prompt, lets the backend choose, then calls `execute`, whose `Outcome` carries the
observations to write back to memory. `trial` lets TEPA-Full validate a candidate precedent by real
execution before it is promoted. An environment may also say what the world holds now for a key
(`TruthEnvironment`, optional): the analysis then scores the retrieved evidence against it. A class
of one's own can inherit `EnvironmentBase` for the members most environments leave at their defaults
(`close`, `operational`, `provenance`), and check itself with `envs.check_env`.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

from tepa.evidence import Observation

TRIAL_KINDS = ("support", "counterfactual", "contamination")
#: The most keys (jobs, users) an environment takes: its tables grow with them (10^4 keys: about 15 MB and
#: a few seconds to set up; 10^12 exhausted memory), and a stream of 1600 decisions meets few of them.
MAX_KEYS = 10_000


@dataclass(frozen=True, slots=True)
class MultiHop:
    """A question answered along a chain: start at `subject`, follow `relations` in order; `questions`
    holds one question template per relation, with "[X]" where the entity reached so far goes."""

    subject: str
    relations: tuple[str, ...]
    questions: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.relations or len(self.questions) != len(self.relations):
            raise ValueError(
                f"multi_hop: needs one question per relation, got {len(self.relations)} relation(s) "
                f"and {len(self.questions)} question(s)"
            )


@dataclass(frozen=True, slots=True)
class Task:
    """One decision (or, with `decide=False`, one ingestion step that only writes `observe` to memory).

    `options` are the choices shown to the model; empty for free-form answers. `hint` is something the
    session itself states (e.g. "I now prefer aisle seats"); the prompt shows it, memory does not.
    `observe` is evidence the environment shows before the decision (facts to ingest); the loop writes it
    to memory first. `correct` is the hidden right answer, used only for logging. `instructions` replace
    the harness's system message (a benchmark's own instructions to the model). A multi-hop question
    carries its chain in `multi_hop`: the loop then answers it hop by hop, retrieving by (entity,
    relation). `meta` holds what only the environment itself reads back (gold answers, say).
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
    instructions: str | None = None
    multi_hop: MultiHop | None = None
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What acting did: success, the observations to write to memory, and the environment's message.
    With `feedback=False` the loop does not report the outcome to memory (a benchmark question's score is
    the evaluation, not experience). `reported` is what the agent is told when the environment
    misreports outcomes (outcome noise; None: the true `success`); the episode is scored by `success`."""

    success: bool
    observations: tuple[Observation, ...] = ()
    message: str = ""
    feedback: bool = True  # False for a benchmark score the agent must not learn from
    reported: bool | None = None

    @property
    def told(self) -> bool:
        """The outcome as the agent is told it: `reported`, or the true `success`."""
        return self.success if self.reported is None else self.reported


@runtime_checkable
class Environment(Protocol):
    """A seeded, phase-labelled stream of tasks (`EnvironmentBase` gives the usual defaults).

    `operational` names the constructor parameters that change where files live but not the stream (a
    data folder, a sandbox location): a rerun that changes only these continues the same streams.
    `provenance` fingerprints the input data files when the environment reads any (None otherwise): it
    is part of a stream's identity, so changed data makes a new stream."""

    name: str
    operational: ClassVar[frozenset[str]]
    provenance: dict[str, str] | None

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

    def __len__(self) -> int:
        """Decision tasks (`decide=True`) in the stream of the current seed (progress bars use it)."""

    def close(self) -> None:
        """Release what the environment holds (workers, sandboxes). Idempotent: a second call does
        nothing; the runner calls it once a stream is done, also after a failure."""


@runtime_checkable
class TruthEnvironment(Protocol):
    """Optional: an environment that can say what the world holds now. At every decision the agent loop
    asks it for the key of each hop (a multi-hop question: the (entity reached, relation) retrieved at
    that hop) and logs the answers beside the retrieved evidence, so that memory quality (current and
    stale lines) is measured from the log alone, without any reader. An environment without this hook
    logs no truth, and those metrics stay empty rather than guessed."""

    def truth(self, key: Hashable) -> str | None:
        """The value the world holds for `key` at the latest task handed out (the current regime's action,
        the user's true preference, the newest fact's object), or None when the environment cannot tell
        (a key not of this stream, say). Reads state only: asking never changes the stream."""


@runtime_checkable
class AsyncEnvironment(Protocol):
    """Optional: an environment whose `execute` waits on something outside the process can offer it as a
    coroutine too. The agent loop then awaits `execute_async`, so that the streams of a run that wait at
    the same time can be served together (executable drift sends their tool calls to its worker in one
    round trip). The outcome must be the one `execute` gives."""

    async def execute_async(self, task: Task, action: str) -> Outcome:
        """`execute(task, action)`, awaited."""


class EnvironmentBase:
    """Defaults for the members most environments need not write: `close` (nothing to release), no
    operational parameters, no data files (`provenance` None).

    Inherit it in an environment of your own and write the rest of `Environment`; the runner checks the
    members at start-up and names any that is missing.
    """

    operational: ClassVar[frozenset[str]] = frozenset()
    provenance: dict[str, str] | None = None

    def close(self) -> None:
        """Nothing to release."""

"""The one memory protocol every method implements (TEPA variants and baselines alike), the two
optional hooks a method may declare on top of it, and what an object needs to follow a protocol (the
config check and the public checkers of memories and environments ask the same question)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from tepa.evidence import Evidence, Observation, Query

#: `trial(precedent, kind) -> passed`: executes a candidate precedent (anything with `.key` and
#: `.value`) on a trial task of `kind` ("support", "counterfactual" or "contamination").
TrialFn = Callable[[Any, str], bool]


class _Bare(Protocol):
    """What every protocol class holds (typing's machinery), to tell it from what one declares."""


_MACHINERY = frozenset(vars(_Bare))


def protocol_methods(protocol: type) -> list[str]:
    """The methods a protocol declares (public ones and special ones such as `__len__`): what a class
    must define to follow it."""
    return [
        m
        for m, v in vars(protocol).items()
        if callable(v) and m not in _MACHINERY and (not m.startswith("_") or m.endswith("__"))
    ]


def protocol_members(protocol: type) -> list[str]:
    """A protocol's annotated attributes (`name`), properties and methods: what an object must have to
    follow it (attributes and properties may be set by the constructor)."""
    properties = [m for m, v in vars(protocol).items() if isinstance(v, property)]
    return [*getattr(protocol, "__annotations__", {}), *properties, *protocol_methods(protocol)]


def missing_members(obj: object, protocol: type) -> list[str]:
    """The members of `protocol` that `obj` lacks, in the protocol's order."""
    return [m for m in protocol_members(protocol) if not hasattr(obj, m)]


@runtime_checkable
class Memory(Protocol):
    """A memory method. Methods differ only in what they keep retrievable, not in how it is ranked:
    every implementation ranks through `tepa.retrieval.rank`. A class of one's own can check itself
    with `tepa.check_memory`."""

    name: str

    def observe(self, obs: Observation) -> None:
        """Take in new evidence (an outcome of acting, a stated fact, a trial result)."""

    def retrieve(self, query: Query) -> list[Evidence]:
        """Return what goes into the prompt: retrievable (for TEPA: active) evidence only."""

    def feedback(self, used: list[Evidence], success: bool, t: int) -> None:
        """Report the outcome of acting on `used` (the retrieved evidence the agent followed)."""

    def on_phase_boundary(self, phase: str, t: int) -> None:
        """Told at each true phase boundary; a no-op for every method but Oracle Reset."""

    def snapshot(self) -> dict:
        """Counts by state (and any method-specific counters) for the episode log."""


@runtime_checkable
class TrialMemory(Protocol):
    """Optional: a memory that validates candidates by execution. Before a stream starts, the agent
    loop hands it the environment's `trial`; a memory without this hook is never given one."""

    def set_trial(self, fn: TrialFn | None) -> None:
        """Use `fn` for every trial from now on (None: no trial function)."""


@runtime_checkable
class EventMemory(Protocol):
    """Optional: a memory that keeps an audit trail. After every step the agent loop collects its
    lifecycle events (they go to the run's archive.jsonl); a memory without this hook logs none."""

    def drain_events(self) -> list[dict[str, Any]]:
        """The lifecycle events since the last call (each a flat JSON-ready dict with at least `t`
        and `event`), oldest first; the next call returns only newer ones."""

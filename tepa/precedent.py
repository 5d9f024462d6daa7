"""A precedent: one (key, value) claim with its evidence counts, lifecycle state and audit trail."""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

from tepa.evidence import Evidence

# Builds an Evidence from a complete field tuple without the NamedTuple's Python-level __new__ (half the
# cost on the retrieval hot path); the tuple must list every field, in order.
new_evidence = tuple.__new__


class State(StrEnum):
    """Lifecycle state. Only ACTIVE precedents are retrievable; REVOKED ones live in the archive."""

    HYPOTHESIS = "hypothesis"
    ACTIVE = "active"
    REVOKED = "revoked"


_HYPOTHESIS = State.HYPOTHESIS  # a module constant: reading a member off the enum class costs more


class LifecycleEvent(NamedTuple):
    """One entry of a precedent's history: when, what happened, and why (with the numbers)."""

    t: int
    event: str
    reason: str


@dataclass(slots=True, eq=False, init=False)
class Precedent:
    """The belief "`value` is the current value for `key`", with the evidence for and against it.

    `s` / `f` are lifetime support / conflict counts (they never decrease). `s_epoch` / `f_epoch` count
    the same evidence since the current epoch began (creation, the last revocation, or a failure of its
    own value while revoked when `own_failure_new_epoch` is on): promotion reads them, so a revoked
    precedent is judged on what happened *after* it was revoked, and the posterior revocation rule reads
    them or the lifetime counts (`counts`). `recent` holds the outcomes of the last W uses (from
    feedback): an empty tuple until the first use, since most precedents of a fact stream are never
    used and a deque costs a 500-byte block. `history` is the audit trail. Identity is the object (and
    `id`), never the counts.
    """

    id: int
    key: Hashable
    value: str
    created_t: int
    recent: deque[bool] | tuple[()] = field(repr=False)
    s: int
    f: int
    s_epoch: int
    f_epoch: int
    epoch: int
    state: State
    updated_t: int
    text: str = field(repr=False)
    source: str = field(repr=False)
    trial_rounds: int
    _history: list[tuple[int, str, str]] = field(repr=False)  # see `history`
    _evidence: Evidence | None = field(repr=False)
    _key_text: str = field(repr=False)

    def __init__(self, id: int, key: Hashable, value: str, t: int, text: str = "", source: str = "") -> None:
        """A hypothesis created by its first supporting observation (of `value` for `key` at step `t`).
        Only the observation's fields are arguments: creation is a fact stream's hot path."""
        self.id = id
        self.key = key
        self.value = value
        self.created_t = t
        self.recent = ()
        self.s = 1
        self.f = 0
        self.s_epoch = 1
        self.f_epoch = 0
        self.epoch = 0
        self.state = _HYPOTHESIS
        self.updated_t = t
        self.text = text
        self.source = source
        self.trial_rounds = 0
        self._history = []
        self._evidence = None
        self._key_text = str(key)  # every precedent's first event logs it

    def posterior_mean(self, a0: float, b0: float) -> float:
        """Lifetime validity posterior mean, (a0 + s) / (a0 + b0 + s + f)."""
        return (a0 + self.s) / (a0 + b0 + self.s + self.f)

    def epoch_mean(self, a0: float, b0: float) -> float:
        """Posterior mean over the current epoch's evidence: the number promotion is decided on."""
        return (a0 + self.s_epoch) / (a0 + b0 + self.s_epoch + self.f_epoch)

    def evidence(self) -> Evidence:
        """The retrievable form (cached until the precedent is next updated)."""
        ev = self._evidence
        if ev is None:
            ev = self._evidence = new_evidence(
                Evidence,
                (
                    self.key,
                    self.value,
                    True,
                    self.updated_t,
                    self.text,
                    self.source,
                    self.id,
                    self.s,
                    self.f,
                    self.epoch,
                ),  # fmt: skip
            )
        return ev

    @property
    def history(self) -> list[LifecycleEvent]:
        """Every lifecycle event of this precedent, oldest first (a new list). Kept as plain tuples and
        made LifecycleEvents when read: building a NamedTuple costs several times a tuple, and a fact
        stream logs two or three events per fact while its history is seldom read."""
        return list(map(LifecycleEvent._make, self._history))

    def key_text(self) -> str:
        """`str(key)`, computed once: every lifecycle event logs it, and a tuple key's str is slow."""
        return self._key_text

    def record(self) -> dict[str, Any]:
        """A JSON-ready audit record: counts, state and the full history."""
        return {
            "id": self.id,
            "key": self.key_text(),
            "value": self.value,
            "state": self.state.value,
            "s": self.s,
            "f": self.f,
            "s_epoch": self.s_epoch,
            "f_epoch": self.f_epoch,
            "epoch": self.epoch,
            "created_t": self.created_t,
            "updated_t": self.updated_t,
            "text": self.text,
            "source": self.source,
            "recent": list(self.recent),
            "history": [e._asdict() for e in self.history],
        }

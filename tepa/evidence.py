"""Evidence types shared by every memory method, environment and backend.

They are NamedTuples: immutable, hashable and several times cheaper to build than frozen dataclasses,
which matters because every observation and every retrieved item creates one. The memory protocol
(`tepa.protocol.Memory`) speaks only in these types.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import NamedTuple


class Observation(NamedTuple):
    """A claim about the world: `value` is valid for `key` (holds=True) or failed for it (holds=False)."""

    key: Hashable
    value: str
    holds: bool = True
    t: int = 0
    text: str = ""
    source: str = ""


class Query(NamedTuple):
    """What the agent needs memory for: the task's key when it has one, and its text for ranking."""

    key: Hashable | None = None
    text: str = ""
    t: int = 0


class Evidence(NamedTuple):
    """One retrievable item, rendered as one line of the prompt.

    `ref` identifies the stored item inside its memory (a precedent id, an observation index) so that
    `feedback` can find what was used. `support` / `conflict` are the method's counts where it keeps
    them (TEPA precedents) and None where it does not (raw observations). `epoch` is the precedent's
    epoch when it was retrieved (None for methods without epochs): feedback that arrives after the
    precedent was revoked can then be told apart from feedback on its current epoch.
    """

    key: Hashable
    value: str
    holds: bool
    t: int
    text: str = ""
    source: str = ""
    ref: int = -1
    support: int | None = None
    conflict: int | None = None
    epoch: int | None = None

"""Evidence types shared by every memory method, environment and backend.

They are NamedTuples: immutable, hashable and several times cheaper to build than frozen dataclasses,
which matters because every observation and every retrieved item creates one. The memory protocol
(`tepa.protocol.Memory`) speaks only in these types.
"""

from __future__ import annotations

from collections.abc import Hashable
from numbers import Integral
from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    import numpy as np


class Observation(NamedTuple):
    """A claim about the world: `value` is valid for `key` (holds=True) or failed for it (holds=False)."""

    key: Hashable
    value: str
    holds: bool = True
    t: int = 0
    text: str = ""
    source: str = ""


class Ranker(Protocol):
    """Scores documents against a query text (higher: more similar), one float per document.
    `positive_only`: whether an item must score above 0 to be retrieved (BM25: it shares a term)."""

    positive_only: bool

    def scores(self, query: str, docs: list[str]) -> np.ndarray: ...


class Query(NamedTuple):
    """What the agent needs memory for: the task's key when it has one, and its text for ranking.

    `ranker` is how a query without a key ranks items against its text (None: BM25 over key, value and
    text); a similarity retrieval mode (`tepa.retrieval.rank.similarity_query`) sets it and drops the key.
    """

    key: Hashable | None = None
    text: str = ""
    t: int = 0
    ranker: Ranker | None = None


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


def check_observation(obs: Observation) -> None:
    """Raise ValueError, naming the field, for an observation a memory could not keep faithfully.

    Every memory's `observe` calls it first. A NaN key is stored but never equals itself, so it can
    never be retrieved; an unhashable key cannot be stored; a `holds` that is not a bool (the string
    "False" is truthy) would count as the opposite claim; `t` orders evidence and must be an integer.
    The common case (a str/int/None key or a tuple of str/int, bool holds, int t) costs a few type
    checks: such a key is hashable and holds no NaN.
    """
    key, holds, t = obs.key, obs.holds, obs.t
    if type(holds) is not bool:
        raise ValueError(f"observation.holds={holds!r}: must be a bool")
    if type(t) is not int and (isinstance(t, bool) or not isinstance(t, Integral)):
        raise ValueError(f"observation.t={t!r}: must be an int")
    if type(obs.value) is not str:
        raise ValueError(f"observation.value={obs.value!r}: must be a str")
    if key is None or type(key) is str or type(key) is int:
        return
    if type(key) is tuple and _PLAIN_PARTS.issuperset(map(type, key)):
        return
    try:
        hash(key)
    except TypeError:
        raise ValueError(f"observation.key={key!r}: must be hashable") from None
    if _has_nan(key):
        raise ValueError(f"observation.key={key!r}: must not be or contain NaN (it never equals itself)")


_PLAIN_PARTS = frozenset({str, int})  # key parts that are hashable and never NaN


def _has_nan(key: object) -> bool:
    if isinstance(key, float | complex):
        return key != key
    if isinstance(key, tuple | frozenset):
        return any(map(_has_nan, key))
    return False

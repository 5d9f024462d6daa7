"""Append-Only: persistent memory that never forgets, the method the paper shows is polluted by drift."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Hashable
from itertools import chain
from operator import attrgetter

from tepa.evidence import Evidence, Observation, Query, check_observation
from tepa.retrieval.rank import DEFAULT_TOP_K, rank
from tepa.validation import check_int

_REF = attrgetter("ref")


class AppendOnly:
    """Every observation stays retrievable, failures included (`Evidence.holds` mirrors
    `Observation.holds`; `Evidence.ref` is the observation's index in the stream this memory saw).

    Items are stored per key so that keyed retrieval costs O(items of the key); a key's items are in
    chronological order unless an observation came with an earlier step than the one before it (the key
    is then in `_unordered`), so retrieval need not sort them again. Reactive Forgetting and Oracle Reset
    are this store plus a rule for dropping items (`_drop_key`, `_drop_all`).
    """

    name = "append_only"

    def __init__(self, top_k: int = DEFAULT_TOP_K) -> None:
        self.top_k = check_int("top_k", top_k, 1)
        self._by_key: dict[Hashable, list[Evidence]] = {}
        self._unordered: set[Hashable] = set()
        self._size = 0
        self._seen = 0

    def observe(self, obs: Observation) -> None:
        check_observation(obs)
        ev = Evidence(obs.key, obs.value, obs.holds, obs.t, obs.text, obs.source, self._seen)
        self._seen += 1
        self._size += 1
        items = self._by_key.get(obs.key)
        if items is None:
            self._by_key[obs.key] = [ev]
        else:
            if items and obs.t < items[-1].t:  # refs only grow: (t, ref) order holds while t does not go back
                self._unordered.add(obs.key)
            items.append(ev)

    def retrieve(self, query: Query) -> list[Evidence]:
        if query.key is not None:
            items = self._by_key.get(query.key)
            return rank(items, query, self.top_k, query.key not in self._unordered) if items else []
        return rank(chain.from_iterable(self._by_key.values()), query, self.top_k)

    def feedback(self, used: list[Evidence], success: bool, t: int) -> None:
        """Outcomes do not change what an append-only store keeps."""

    def on_phase_boundary(self, phase: str, t: int) -> None:
        """Append-only memory is not told about phases."""

    def snapshot(self) -> dict:
        return {"hypothesis": 0, "active": self._size, "revoked": 0}

    def handed_out(self, ev: Evidence) -> bool:
        """Whether `ev` is an item this memory holds (its ref, under its key): feedback on evidence it
        did not hand out must change nothing. A key's items are in ref order, so this is a bisection."""
        try:
            items = self._by_key.get(ev.key)
        except TypeError:  # an unhashable key: not one of ours
            return False
        if not items:
            return False
        i = bisect_left(items, ev.ref, key=_REF)
        return i < len(items) and items[i].ref == ev.ref

    def _drop_key(self, key: Hashable) -> int:
        """Forget every item of `key`; return how many were dropped."""
        n = len(self._by_key.pop(key, ()))
        self._unordered.discard(key)
        self._size -= n
        return n

    def _drop_all(self) -> int:
        """Forget everything; return how many items were dropped."""
        n = self._size
        self._by_key.clear()
        self._unordered.clear()
        self._size = 0
        return n

"""Sliding Window: temporal forgetting, the simplest answer to drift."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Hashable
from itertools import chain

from tepa.evidence import Evidence, Observation, Query, check_observation
from tepa.retrieval.rank import DEFAULT_TOP_K, rank
from tepa.validation import check_int


class SlidingWindow:
    """Keeps the last `n` observations (all keys together) and, with `steps`, only those whose
    `t` lies within the last `steps` time steps (t > now - steps, `now` the latest t seen in
    observe / retrieve / feedback).

    Eviction runs oldest-first in arrival order, which is time order in the agent loop; a stream that
    delivers an older `t` after a newer one keeps it until everything before it has left.
    """

    name = "sliding_window"

    def __init__(self, n: int = 50, steps: int | None = None, top_k: int = DEFAULT_TOP_K) -> None:
        self.n = check_int("n", n, 0)
        self.steps = None if steps is None else check_int("steps", steps, 0)
        self.top_k = check_int("top_k", top_k, 1)
        self._order: deque[Evidence] = deque()
        self._by_key: dict[Hashable, deque[Evidence]] = {}
        self._now: float = -math.inf
        self._seen = 0
        self._forgotten = 0

    def observe(self, obs: Observation) -> None:
        check_observation(obs)
        ev = Evidence(obs.key, obs.value, obs.holds, obs.t, obs.text, obs.source, self._seen)
        self._seen += 1
        self._order.append(ev)
        items = self._by_key.get(obs.key)
        if items is None:
            self._by_key[obs.key] = deque((ev,))
        else:
            items.append(ev)
        if len(self._order) > self.n:
            self._evict_oldest()
        if self.steps is not None:
            self._advance(obs.t)

    def retrieve(self, query: Query) -> list[Evidence]:
        if self.steps is not None:
            self._advance(query.t)
        if query.key is not None:
            items = self._by_key.get(query.key)
            return rank(items, query, self.top_k) if items else []
        return rank(chain.from_iterable(self._by_key.values()), query, self.top_k)

    def feedback(self, used: list[Evidence], success: bool, t: int) -> None:
        """Outcomes only move the clock."""
        if self.steps is not None:
            self._advance(t)

    def on_phase_boundary(self, phase: str, t: int) -> None:
        """Temporal forgetting is not told about phases."""

    def snapshot(self) -> dict:
        return {"hypothesis": 0, "active": len(self._order), "revoked": 0, "forgotten": self._forgotten}

    def _evict_oldest(self) -> None:
        ev = self._order.popleft()
        items = self._by_key[ev.key]
        items.popleft()  # both queues grow in arrival order, so this is the same item
        if not items:
            del self._by_key[ev.key]
        self._forgotten += 1

    def _advance(self, t: int) -> None:
        if t > self._now:
            self._now = t
        cutoff = self._now - self.steps
        order = self._order
        while order and order[0].t <= cutoff:
            self._evict_oldest()

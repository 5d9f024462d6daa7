"""Reactive Forgetting: forget a key once acting on its memory keeps failing."""

from __future__ import annotations

from collections.abc import Hashable

from baselines.append_only import AppendOnly
from tepa.evidence import Evidence
from tepa.retrieval.rank import DEFAULT_TOP_K
from tepa.validation import check_int


class ReactiveForgetting(AppendOnly):
    """An append-only store that clears all of a key's items after `c` consecutive failed outcomes of
    acting on that key's retrieved evidence (`feedback(used, success=False)`); a success resets the
    key's count. Failure *observations* do not count: only outcomes of following memory do, so the
    method reacts to memory that misleads, not to the world reporting failures.
    """

    name = "reactive"

    def __init__(self, c: int = 2, top_k: int = DEFAULT_TOP_K) -> None:
        super().__init__(top_k=top_k)
        self.c = check_int("c", c, 1)
        self._failures: dict[Hashable, int] = {}
        self._forgotten = 0
        self._clears = 0

    def feedback(self, used: list[Evidence], success: bool, t: int) -> None:
        keys = self._own_keys(used)
        if not keys:
            return
        failures = self._failures
        if success:
            for key in keys:
                failures.pop(key, None)
            return
        for key in keys:
            count = failures.get(key, 0) + 1
            if count < self.c:
                failures[key] = count
                continue
            failures.pop(key, None)
            self._forgotten += self._drop_key(key)
            self._clears += 1

    def _own_keys(self, used: list[Evidence]) -> set[Hashable]:
        """The keys of the items in `used` this memory handed out (foreign evidence clears nothing). A
        key already found is not looked up again: a decision uses many items of one key."""
        keys: set[Hashable] = set()
        for e in used:
            try:
                if e.key in keys:
                    continue
            except TypeError:  # an unhashable key: not one of ours
                continue
            if self.handed_out(e):
                keys.add(e.key)
        return keys

    def snapshot(self) -> dict:
        snap = super().snapshot()
        snap["forgotten"] = self._forgotten
        snap["clears"] = self._clears
        return snap

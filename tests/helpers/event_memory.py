"""A memory of one's own that logs lifecycle events (not a TEPA class): the analysis must read its events
as it reads TEPA's."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from tepa.evidence import Evidence, Observation, Query, check_observation
from tepa.retrieval.rank import rank


class DistrustOnFailure:
    """One value per key, trusted until an observation says it failed: it is then revoked (and comes
    back, repromoted, when it holds again). Logs created / revoked / repromoted events."""

    name = "distrust_on_failure"

    def __init__(self) -> None:
        self._values: dict[tuple[Hashable, str], dict[str, Any]] = {}
        self._events: list[dict[str, Any]] = []

    def observe(self, obs: Observation) -> None:
        check_observation(obs)
        item = self._values.get((obs.key, obs.value))
        if item is None:
            if not obs.holds:
                return
            item = self._values[(obs.key, obs.value)] = {"id": len(self._values), "s": 0, "f": 0, "obs": obs}
            item["state"] = "active"
            self._log(item, obs, "created", "first observation")
        item["s" if obs.holds else "f"] += 1
        if not obs.holds and item["state"] == "active":
            item["state"] = "revoked"
            self._log(item, obs, "revoked", f"failed at t={obs.t}")
        elif obs.holds and item["state"] == "revoked":
            item["state"] = "active"
            self._log(item, obs, "repromoted", f"held again at t={obs.t}")

    def _log(self, item: dict[str, Any], obs: Observation, event: str, reason: str) -> None:
        self._events.append(
            {"t": obs.t, "event": event, "reason": reason, "id": item["id"], "key": str(obs.key),
             "value": obs.value, "s": item["s"], "f": item["f"], "state": item["state"]}
        )  # fmt: skip

    def retrieve(self, query: Query) -> list[Evidence]:
        live = [(i["obs"], i["id"]) for i in self._values.values() if i["state"] == "active"]
        found = [Evidence(o.key, o.value, True, o.t, o.text, o.source, ref) for o, ref in live]
        return rank(found, query)

    def feedback(self, used: list[Evidence], success: bool, t: int) -> None:
        pass

    def on_phase_boundary(self, phase: str, t: int) -> None:
        pass

    def snapshot(self) -> dict[str, int]:
        states = [i["state"] for i in self._values.values()]
        return {"hypothesis": 0, "active": states.count("active"), "revoked": states.count("revoked")}

    def drain_events(self) -> list[dict[str, Any]]:
        events, self._events = self._events, []
        return events

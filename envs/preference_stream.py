"""preference_stream: users whose preferences drift, with noisy one-off feedback and in-session hints.

Each session, a random user asks for a recommendation in one preference slot (seat, meal, ...); the key
is `(user, slot)`. The setting separates evidence that should be kept from evidence that should not:
- real changes: in the "drift" phase every key's true preference changes at random times (a per-session,
  per-key hazard `drift_rate`) and stays changed; the first `stable_length` sessions ("stable") have none;
- glitches: with probability `glitch_rate` a session's feedback is a one-off whim ("this time I wanted
  "window""): only that whim succeeds and the true preference is rated as failed, yet nothing changed;
- hints: with probability `hint_rate` the session states the current true preference itself (which is
  why an agent with no memory does well here);
- reveals: after a failed ordinary session without a hint, with probability `reveal_rate` the user says
  what they prefer.
Sessions show the slot's values in a freshly shuffled order. The stream never depends on the agent's
actions: every draw of a session is made when the session is generated.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_right
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from typing import Any

from envs.base import MAX_KEYS, TRIAL_KINDS, EnvironmentBase, Outcome, Task
from tepa.evidence import Observation
from tepa.validation import check_int, check_unit


@dataclass(frozen=True, slots=True)
class Slot:
    """A preference slot: its name (the key's second part), the noun a request uses, its values, and
    how a stated preference reads (`phrase` with `{}` for the quoted value)."""

    name: str
    noun: str
    values: tuple[str, ...]
    phrase: str

    def says(self, value: str) -> str:
        return self.phrase.format(f'"{value}"')


SLOTS = (
    Slot("seat", "seat", ("aisle", "window", "middle"), "{} seats"),
    Slot("meal", "meal", ("vegetarian", "chicken", "fish", "pasta"), "{} meals"),
    Slot("time", "departure time", ("morning", "afternoon", "evening"), "{} departures"),
    Slot("drink", "drink", ("coffee", "tea", "juice", "water"), "{} to drink"),
    Slot("music", "music", ("jazz", "rock", "classical", "pop"), "{} music"),
    Slot("room", "room", ("quiet", "lively", "accessible"), "{} rooms"),
)


class PreferenceStream(EnvironmentBase):
    """The preference-stream environment (see the module docstring).

    Phases: "stable" (the first `stable_length` sessions, no true changes) then "drift" (`drift_length`
    sessions with changes); glitches, hints and reveals occur in both. Either phase may be empty.

    Trials (TEPA-Full) are explicit check-ins answered truthfully (never glitches), on the true
    preferences at the latest session, with their own RNG so they never change the stream:
    - support: recommend the precedent's value to the same user for the same slot; passes iff it is the
      user's true current preference. A glitch's candidate fails here.
    - counterfactual: recommend it, in the same slot, to another user whose current preference differs
      (where it should not apply); passes iff that user rejects it. Fails when no such user exists.
    - contamination: after the trial, a random other user's current preference in the slot is still
      accepted. Users are independent, so this passes for every well-formed precedent (vacuously with a
      single user).
    A precedent whose key is not a (user, slot) of this stream, or whose value is not one of the slot's
    values, fails every trial.
    """

    name = "preference_stream"

    def __init__(
        self,
        *,
        n_users: int = 20,
        n_slots: int = 3,
        stable_length: int = 400,
        drift_length: int = 1600,
        drift_rate: float = 0.002,
        glitch_rate: float = 0.05,
        hint_rate: float = 0.875,
        reveal_rate: float = 1.0,
    ) -> None:
        self.n_users = check_int("n_users", n_users, 1, MAX_KEYS)
        self.n_slots = check_int("n_slots", n_slots, 1, len(SLOTS))
        self.stable_length = check_int("stable_length", stable_length, 0)
        self.drift_length = check_int("drift_length", drift_length, 0)
        if self.stable_length + self.drift_length == 0:
            raise ValueError("stable_length + drift_length must be >= 1 (the stream has no sessions)")
        self.drift_rate = check_unit("drift_rate", drift_rate)
        self.glitch_rate = check_unit("glitch_rate", glitch_rate)
        self.hint_rate = check_unit("hint_rate", hint_rate)
        self.reveal_rate = check_unit("reveal_rate", reveal_rate)
        self.slots = SLOTS[: self.n_slots]
        self._slot_index = {slot.name: i for i, slot in enumerate(self.slots)}
        self._values = tuple(frozenset(slot.values) for slot in self.slots)
        self._texts = tuple(
            tuple(f"User {u} asks for a {slot.noun} recommendation." for slot in self.slots)
            for u in range(self.n_users)
        )
        self._seed: int | None = None
        self._change_times: list[list[int]] = []  # per key index (user * n_slots + slot): sorted times
        self._prefs: list[list[str]] = []  # per key index: the preference before each change, then after
        self._trial_rng = random.Random(0)
        self._now = 0

    def __len__(self) -> int:
        """Decision episodes in the stream (for progress bars)."""
        return self.stable_length + self.drift_length

    @property
    def phase_boundaries(self) -> list[tuple[int, str]]:
        return [(self.stable_length, "drift")] if self.stable_length and self.drift_length else []

    def reset(self, seed: int) -> None:
        self._seed = check_int("seed", seed, 0)
        self._draw_preferences(random.Random(f"{self.name}/{self._seed}/preferences"))
        self._trial_rng = random.Random(f"{self.name}/{self._seed}/trials")
        self._now = 0

    def tasks(self) -> Iterator[Task]:
        if self._seed is None:
            raise RuntimeError(f"{self.name}: call reset(seed) before using the environment")
        return self._stream(random.Random(f"{self.name}/{self._seed}/sessions"))

    def _stream(self, rng: random.Random) -> Iterator[Task]:
        n_users, n_slots, slots = self.n_users, self.n_slots, self.slots
        glitch_rate, hint_rate, reveal_rate = self.glitch_rate, self.hint_rate, self.reveal_rate
        for t in range(self.stable_length + self.drift_length):
            user, s = rng.randrange(n_users), rng.randrange(n_slots)
            slot = slots[s]
            preference = self._preference(user * n_slots + s, t)
            glitch = rng.random() < glitch_rate
            hint = rng.random() < hint_rate
            reveal = rng.random() < reveal_rate
            wanted = rng.choice([v for v in slot.values if v != preference]) if glitch else preference
            self._now = t
            yield Task(
                key=(user, slot.name),
                text=self._texts[user][s],
                phase="stable" if t < self.stable_length else "drift",
                t=t,
                options=tuple(rng.sample(slot.values, len(slot.values))),
                hint=f"User {user} says: I prefer {slot.says(preference)}." if hint else None,
                correct=wanted,
                meta={"preference": preference, "glitch": glitch, "reveal": reveal},
            )

    def execute(self, task: Task, action: str) -> Outcome:
        """Score `action` against what this session's feedback accepts (`task.correct`: the true
        preference, or the whim in a glitch session) and report what the user said."""
        key, t, meta = task.key, task.t, task.meta
        user, slot_name = key  # type: ignore[misc]
        slot = self.slots[self._slot_index[slot_name]]
        preference = meta["preference"]
        said: list[Observation] = []
        if task.hint is not None:
            said.append(
                Observation(key, preference, True, t, f"user {user} prefers {slot.says(preference)}", "hint")
            )
        valid = isinstance(action, str) and action in slot.values
        success = valid and action == task.correct
        if valid:
            text = f"recommending {slot.says(action)} to user {user} {'worked' if success else 'failed'}"
            said.append(Observation(key, action, success, t, text, "outcome"))
        if meta["glitch"]:
            text = f"user {user} said this time they wanted {slot.says(task.correct)}"
            said.append(Observation(key, task.correct, True, t, text, "glitch"))
        elif not success and meta["reveal"] and task.hint is None:
            text = f"user {user} said they prefer {slot.says(preference)}"
            said.append(Observation(key, preference, True, t, text, "feedback"))
        if not valid:
            message = f"invalid action {_clip(action)}: choose one of {', '.join(task.options)}"
        else:
            message = f"user {user} {'accepted' if success else 'rejected'} {slot.says(action)}"
        return Outcome(success, tuple(said), message)

    def trial(self, precedent: Any, kind: str) -> bool:
        if kind not in TRIAL_KINDS:
            raise ValueError(f"kind must be one of {TRIAL_KINDS}, got {kind!r}")
        if self._seed is None:
            raise RuntimeError(f"{self.name}: call reset(seed) before using the environment")
        place = self._locate(getattr(precedent, "key", None))
        value = getattr(precedent, "value", None)
        if place is None or not isinstance(value, str) or value not in self._values[place[1]]:
            return False
        user, s = place
        now = self._now
        if kind == "support":
            return self._accepts(user, s, value, now)
        others = [u for u in range(self.n_users) if u != user]
        if kind == "counterfactual":
            elsewhere = [u for u in others if self._preference(u * self.n_slots + s, now) != value]
            return bool(elsewhere) and not self._accepts(self._trial_rng.choice(elsewhere), s, value, now)
        if not others:
            return True
        other = self._trial_rng.choice(others)
        return self._accepts(other, s, self._preference(other * self.n_slots + s, now), now)

    def truth(self, key: Hashable) -> str | None:
        """The user's true preference for `key` = (user, slot) at the latest session: what a truthful
        check-in accepts, never a glitch session's whim (None: not a key of this stream)."""
        if self._seed is None:
            raise RuntimeError(f"{self.name}: call reset(seed) before using the environment")
        place = self._locate(key)
        return None if place is None else self._preference(place[0] * self.n_slots + place[1], self._now)

    def _accepts(self, user: int, s: int, value: str, t: int) -> bool:
        """A truthful check-in: does `user` accept `value` for slot `s` at time `t`?"""
        return self._preference(user * self.n_slots + s, t) == value

    def _preference(self, index: int, t: int) -> str:
        return self._prefs[index][bisect_right(self._change_times[index], t)]

    def _locate(self, key: Any) -> tuple[int, int] | None:
        """(user, slot index) of a well-formed key of this stream, else None (keys are untrusted)."""
        if not isinstance(key, tuple) or len(key) != 2:
            return None
        user, slot_name = key
        s = self._slot_index.get(slot_name) if isinstance(slot_name, str) else None
        if s is None or isinstance(user, bool) or not isinstance(user, int) or not 0 <= user < self.n_users:
            return None
        return user, s

    def _draw_preferences(self, rng: random.Random) -> None:
        """Initial preferences, then change times as a Bernoulli(drift_rate) process per drift session
        (geometric gaps), each change moving to a different value."""
        start, end, rate = self.stable_length, self.stable_length + self.drift_length, self.drift_rate
        log_keep = math.log1p(-rate) if 0.0 < rate < 1.0 else 0.0
        self._change_times, self._prefs = [], []
        for _ in range(self.n_users):
            for slot in self.slots:
                value = rng.choice(slot.values)
                times, prefs = [], [value]
                t = start - 1
                while rate > 0.0:
                    t += 1 if rate == 1.0 else 1 + int(math.log(1.0 - rng.random()) / log_keep)
                    if t >= end:
                        break
                    value = rng.choice([v for v in slot.values if v != value])
                    times.append(t)
                    prefs.append(value)
                self._change_times.append(times)
                self._prefs.append(prefs)


def _clip(action: Any, limit: int = 60) -> str:
    """A log-safe rendering of an untrusted action."""
    text = repr(action)
    return text if len(text) <= limit else text[: limit - 3] + "..."

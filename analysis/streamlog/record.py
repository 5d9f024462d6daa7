"""The episode record: one row of `episodes.parquet`, its column names and their types, in one place.

The agent loop builds every row through `EpisodeRecord.row` and the analysis reads columns by the
names defined here. The column order (the run's labels, then the fields in declaration order) is the
file's, so changing it changes every run log. Imports nothing of the project: both sides import it.
"""

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

#: The run's labels, leading every row (the runner's results labels).
LABELS = ("experiment", "env", "memory")
#: The memory's counts by lifecycle state at the end of the episode.
STATE_COUNTS = ("hypothesis", "active", "revoked")
#: The memory's cumulative lifecycle counters; a method that keeps none logs 0.
COUNTERS = ("promotions", "revocations", "repromotions", "trials", "trial_passes")
#: The logged sample: what the decision's prompt held (JSON text; see EpisodeRecord). Logs written before
#: these columns existed lack them, which readers take as "not logged".
SAMPLE = ("options", "evidence", "truth", "prompt")
#: What the prompt held measured against the truth (`staleness.episode_quality` defines
#: them); logs written before these columns existed lack them, which readers take as "not logged".
QUALITY = ("truth_known", "current", "stale", "truth_present", "stale_present", "polluted")


class EpisodeRecord(NamedTuple):
    """One decision episode. Token counts, latency, `cached` and `truncated` total the replies of all
    hops of a multi-hop question; `reply` is the last hop's and `hop_replies` the JSON list of every
    hop's reply ("" for a single reply). `key`, `correct` and `error` are "" when there is none.

    The logged sample (what the prompt held), JSON text in four columns: `options`, the option texts in
    the order shown (`[]` when free-form); `evidence`, one list per hop of the retrieved lines in prompt
    order, each `[t, "VALID"|"FAILED", value, support, conflict]` (counts null where the method keeps
    none); `truth`, one entry per hop, the value the world holds now for that hop's key (null when the
    environment cannot tell), or "" (not JSON) when the environment reports no truth at all; `prompt`,
    "" unless the run logs prompts (`log_prompts`), else one list of chat messages per hop, as sent.
    The QUALITY fields count the retrieved lines that are current and stale against that truth.
    A NamedTuple: immutable and several times cheaper to build than a frozen dataclass (one per
    episode)."""

    seed: int
    t: int
    phase: str
    key: str
    action: str
    correct: str
    success: bool
    parse_ok: bool
    reply: str
    hop_replies: str
    error: str
    n_evidence: int
    prompt_tokens: int
    completion_tokens: int
    cached: bool
    truncated: bool
    latency: float
    hypothesis: int
    active: int
    revoked: int
    promotions: int
    revocations: int
    repromotions: int
    trials: int
    trial_passes: int
    options: str
    evidence: str
    truth: str
    truth_known: bool
    current: int
    stale: int
    truth_present: bool
    stale_present: bool
    polluted: bool
    prompt: str

    def row(self, labels: dict[str, str]) -> dict[str, object]:
        """The record as a log row: `labels` (normally LABELS), then the fields, in COLUMNS order."""
        row = labels.copy()
        row.update(zip(FIELDS, self, strict=False))  # a record has exactly FIELDS; strict costs a third more
        return row


#: The record's own fields, in order.
FIELDS = EpisodeRecord._fields
#: Every column of episodes.parquet, in order.
COLUMNS = (*LABELS, *FIELDS)
#: Each column's Python type (parquet: str -> string, int -> int64, float -> double, bool -> bool).
TYPES: dict[str, type] = {**dict.fromkeys(LABELS, str), **EpisodeRecord.__annotations__}
#: The largest value of an int column (parquet int64); a larger one cannot be written.
INT64_MAX = 2**63 - 1


def record_problem(rec: Mapping[str, Any]) -> str | None:
    """Why a logged episode holds a value no episode can have, or None. Every column of the record
    (`TYPES`, so a new column is checked too) must have its type, and every number is a
    count, a step or a time: an int in [0, 2**63 - 1] (what parquet's int64 holds), a float finite and
    >= 0. A missing column is left to the replay's own check (it rebuilds every column but the replies'
    own)."""
    for name, kind in TYPES.items():
        value = rec.get(name)
        if value is None:
            continue
        if kind is float:
            if type(value) not in (int, float):
                return f"field {name!r} is {type(value).__name__}, expected float"
            if not 0 <= value < math.inf:
                return f"field {name!r} is {value!r}, expected a finite number >= 0"
        elif type(value) is not kind:
            return f"field {name!r} is {type(value).__name__}, expected {kind.__name__}"
        elif kind is int and not 0 <= value <= INT64_MAX:
            return f"field {name!r} is {value}, expected an int in [0, 2**63 - 1]"
    return None

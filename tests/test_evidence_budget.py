"""`max_evidence`: the same evidence budget for every method (the last N retrieved items per prompt), a
stream of its own, and a bad value as one line naming the key."""

import pyarrow.parquet as pq
import pytest

from runners.config import ConfigError


def evidence_counts(results) -> dict[str, list[int]]:
    paths = sorted(results.rglob("episodes.parquet"))
    return {
        str(p.parent.relative_to(results)): pq.read_table(p, columns=["n_evidence"])["n_evidence"].to_pylist()
        for p in paths
    }


def test_a_capped_run_shows_at_most_that_many_items_and_is_a_stream_of_its_own(tiny_run):
    results = tiny_run("memory=append_only", episodes=60)
    results = tiny_run("memory=append_only", "max_evidence=2", episodes=60)
    counts = evidence_counts(results)
    (capped,) = [path for path in counts if "max_evidence=2" in path]
    (full,) = [path for path in counts if "max_evidence" not in path]
    assert max(counts[capped]) == 2 and max(counts[full]) > 2
    assert [min(n, 2) for n in counts[full]] == counts[capped]  # the same items, cut to the last two


def test_a_cap_below_one_is_refused_naming_the_key(compose):
    with pytest.raises(ConfigError, match=r"^max_evidence=0: must be >= 1"):
        compose("max_evidence=0")
    assert compose().max_evidence is None

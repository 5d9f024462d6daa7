"""The real-model design (conf/experiment/llm_drift*.yaml): the five methods on llm_drift's seeds, and
the paper's central pair (No Memory, Append-Only) on more seeds in experiment=llm_drift_reversal, whose
streams are llm_drift's own where the seeds meet, so that a run after llm_drift skips them or answers
them from its reply cache (results/llm/README.md: why this design)."""

from __future__ import annotations

import pytest

from runners.compose import compose_config
from runners.plan import plan
from runners.store.identity import stream_identity

PAIR = ("no_memory", "append_only")


def test_the_reversal_design_sweeps_only_the_central_pair_on_every_five_method_seed_and_sixteen_more(compose):
    five, pair = compose("experiment=llm_drift"), compose("experiment=llm_drift_reversal")
    assert pair.seeds[: len(five.seeds)] == five.seeds and len(five.seeds) == 12
    assert len(set(pair.seeds)) == len(pair.seeds) >= len(five.seeds) + 16
    swept = compose_config(["experiment=llm_drift_reversal"]).hydra.sweeper.params.memory
    assert tuple(swept.split(",")) == PAIR


@pytest.mark.parametrize("memory", PAIR)
def test_the_pairs_streams_are_llm_drifts_own_on_the_seeds_they_share(compose, memory):
    five = compose("experiment=llm_drift", f"memory={memory}")
    pair = compose("experiment=llm_drift_reversal", f"memory={memory}")
    assert pair.name == five.name and pair.streams_at_once == five.streams_at_once == 2
    for seed in five.seeds:
        assert stream_identity(pair, seed, None, None) == stream_identity(five, seed, None, None)


def test_the_plan_counts_one_append_only_stream_per_extra_seed_and_no_request_for_no_memory(compose):
    five = plan(compose("experiment=llm_drift", "memory=append_only"))
    pair = plan(compose("experiment=llm_drift_reversal", "memory=append_only"))
    no_memory = plan(compose("experiment=llm_drift_reversal", "memory=no_memory"))
    extra = pair.streams - five.streams
    assert extra >= 16 and pair.decisions == five.decisions / five.streams * pair.streams
    assert pair.calls - five.calls == pytest.approx(extra * five.calls / five.streams, rel=1e-3)
    assert five.calls > 0 and no_memory.calls == 0 and no_memory.streams == pair.streams

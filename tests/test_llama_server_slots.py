"""Which cache slot the local completions server evaluates a prompt in (runners.llm.local.llama_server):
a prompt goes where its shared prefix is longest when that is at least half of it, else to the least
recently used slot, so that a prompt sharing only the instructions never evicts another job's memory."""

from __future__ import annotations

import pytest

from runners.llm.local.llama_server import pick_slot

SYSTEM = [1, 2, 3]


def test_a_prompt_goes_to_the_slot_that_shares_the_longest_prefix():
    cached = [SYSTEM + [10, 11, 12, 13], SYSTEM + [20, 21, 22, 23]]
    assert pick_slot(cached, [1, 2], SYSTEM + [20, 21, 22, 99]) == 1
    assert pick_slot(cached, [2, 1], SYSTEM + [10, 11, 12, 13, 14]) == 0


def test_a_prompt_that_shares_only_the_instructions_takes_an_empty_slot_rather_than_evict_a_long_memory():
    memory = SYSTEM + list(range(100, 160))
    assert pick_slot([memory, []], [2, 0], SYSTEM + [7, 8, 9, 10]) == 1


def test_with_every_slot_full_a_prompt_sharing_little_evicts_the_least_recently_used_not_the_shortest():
    short, long_recent, long_old = (
        SYSTEM + [5],
        SYSTEM + list(range(100, 160)),
        SYSTEM + list(range(200, 260)),
    )
    assert pick_slot([short, long_recent, long_old], [9, 8, 3], SYSTEM + list(range(300, 310))) == 2


def test_among_slots_that_share_as_much_the_most_recently_used_keeps_serving():
    assert pick_slot([SYSTEM + [9], SYSTEM + [9]], [5, 4], SYSTEM + [9, 7]) == 0


@pytest.mark.parametrize("slots", [0, -1])
def test_a_server_needs_at_least_one_slot(slots, tmp_path):
    from runners.llm.local.llama_server import LoglikModel

    with pytest.raises(ValueError, match="slots: must be >= 1"):
        LoglikModel(tmp_path / "none.gguf", "m", 512, 1, swa_full=False, slots=slots)

"""A long memory block (Append-Only's) is remembered and read on from where the last one ended: its
scores must be the floats the plain rule gives for the whole prompt, whatever the steps (before 0, at or
after `now`, older than the recency table) and however the blocks extend one another."""

from hypothesis import given, settings
from hypothesis import strategies as st

from runners.llm.simulated import reader as reader_module
from runners.llm.simulated.reader import SimulatedBackend
from tests.test_loop_speed_reader import plain_scores

# Lines of about 120 characters: twenty of them make a block past the reader's short-block limit.
COUNT = st.integers(0, 40)
VALUES = st.sampled_from(["a", "b", "c"])
LINES = st.lists(st.tuples(st.integers(0, 300), COUNT, COUNT, VALUES), min_size=20, max_size=60)
# Each prompt's step: that many steps after its latest line (at or before it from 0 down).
PROMPTS = st.lists(st.tuples(st.integers(-5, 400), LINES), min_size=1, max_size=5)


def _prompt(now: int, lines: list[tuple[int, int, int, str]]) -> str:
    memory = "\n".join(
        f'- [step {t}] VALID "{value}" (support {s}, conflicts {f}): {"x" * 80}' for t, s, f, value in lines
    )
    return f"Step {now}. Pick.\nMemory:\n{memory}\nOptions:\nA) a\nB) b"


@settings(max_examples=200, deadline=None)
@given(PROMPTS, st.sampled_from([1.0, 7.0, 1e3]), st.sampled_from([64, 1 << 20]), st.booleans())
def test_a_long_block_extended_prompt_after_prompt_scores_as_the_plain_rule(
    prompts, half_life, table_ages, before_zero
):
    # A table of 64 ages (`now` past it) and a line before step 0 (older than any table) take the
    # reader's other paths.
    reader = SimulatedBackend(half_life=half_life)
    max_age, reader_module._MAX_AGE = reader_module._MAX_AGE, table_ages
    try:
        shown: list[tuple[int, int, int, str]] = [(-5, 1, 0, "a")] if before_zero else []
        for after, lines in prompts:
            shown += lines  # each block extends the one before, as Append-Only's do
            prompt = _prompt(max((t for t, *_ in shown), default=0) + after, shown)
            assert reader._scores(prompt) == plain_scores(reader, prompt)
    finally:
        reader_module._MAX_AGE = max_age


def test_the_blocks_checked_above_are_long_enough_to_be_remembered():
    block = _prompt(5, [(1, 1, 0, "a")] * 20).split("\n", 2)[2]
    assert len(block) >= reader_module._SHORT_BLOCK

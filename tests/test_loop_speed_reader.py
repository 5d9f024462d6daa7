"""The shortcuts of the simulated reader and of the reply parser give what the plain rules give, on any
text, not only on a rendered prompt or a simulated reply: the lines found, the options, the answer
parsed, and the scores' floats."""

import math
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from runners.agent.parse import parse_choice
from runners.agent.prompt import OPTION_LINE, STEP_LINE
from runners.llm.simulated import reader as reader_module
from runners.llm.simulated.reader import SimulatedBackend, _evidence_block, _evidence_lines, _option_texts

ANY_EVIDENCE_LINE = re.compile(r"^- \[step .*$", re.MULTILINE)

# Texts built from pieces that start, end and nearly make memory and option lines, dense in both.
MEMORY_PIECES = ["- [step ", '- [step 3] VALID "a": x', "-", "[step"]
PIECES = st.sampled_from([*MEMORY_PIECES, "\n", "\r", "a", "\u2028", "B) ", "b) ", ")", "Z", " "])
TEXTS = st.lists(PIECES, max_size=30).map("".join)


@settings(max_examples=200, deadline=None)
@given(TEXTS)
def test_evidence_lines_are_what_the_multiline_pattern_finds(text):
    assert _evidence_lines(_evidence_block(text)) == ANY_EVIDENCE_LINE.findall(text)


@settings(max_examples=200, deadline=None)
@given(TEXTS, TEXTS)
def test_option_texts_are_what_the_option_pattern_finds_after_the_options_line(head, tail):
    prompt = head + "\nOptions:\n" + tail
    at = prompt.rfind("\nOptions:\n")
    assert _option_texts(prompt[at:]) == [m.group("text") for m in OPTION_LINE.finditer(prompt, at)]


@settings(max_examples=300, deadline=None)
@given(st.characters(), st.lists(st.sampled_from(["a", "b", "B", "flip", ""]), max_size=5))
def test_a_one_letter_answer_parses_as_the_general_rules_read_it(letter, options):
    # A tab after the cue takes the general rules, which read it as the space.
    assert parse_choice("Answer: " + letter, options) == parse_choice("Answer:\t" + letter, options)


LINE = st.builds(
    '- [step {}] {} "{}": {}'.format,
    st.integers(0, 99),
    st.sampled_from(["VALID", "FAILED"]),
    st.sampled_from(["a", "b"]),
    st.sampled_from(["x" * 40, "x" * 41, "x" * 200]),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(LINE, max_size=60), min_size=1, max_size=6), st.booleans())
def test_a_block_read_from_the_one_before_it_scores_as_read_afresh(parts, cut):
    # Each prompt's memory extends the one before (as Append-Only's do), or, with `cut`, stops one
    # character into a line the next prompt finishes.
    reader, lines = SimulatedBackend(), []
    for part in parts:
        lines += part
        block = "\n".join(lines)
        block = block[:-1] if cut and part else block
        prompt = f"Step 100. Pick.\nMemory ({len(lines)} entries, oldest first):\n{block}\nOptions:\nA) a"
        assert reader._scores(prompt) == SimulatedBackend()._scores(prompt)


def plain_scores(reader, prompt):
    """The reader's scores as its rule states them: every memory line found, an exp per line."""
    now = int(m.group("t")) if (m := STEP_LINE.search(prompt)) else 0
    decay = math.log(2.0) / reader.half_life
    scores = {}
    for line in ANY_EVIDENCE_LINE.findall(prompt):
        if (info := reader._read_line(line)) is not None:
            value, t, weight = info
            scores[value] = scores.get(value, 0.0) + (
                math.exp((t - now) * decay) * weight if t < now else weight
            )
    return scores


STEPPED = st.lists(
    st.tuples(st.integers(-30, 300), st.sampled_from(["VALID", "FAILED"]), st.sampled_from(["a", "b"])),
    max_size=40,
)


PROMPTS = st.lists(st.tuples(st.integers(-20, 400), STEPPED), min_size=1, max_size=5)


@settings(max_examples=200, deadline=None)
@given(PROMPTS, st.sampled_from([1.0, 7.0, 1e3]))
def test_recency_by_age_gives_the_floats_of_an_exp_per_line(prompts, half_life):
    # Steps before 0, at or after `now`, and `now` past the table (cut to 64 ages, read from 2 lines on)
    # take every path.
    reader = SimulatedBackend(half_life=half_life)
    max_age, reader_module._MAX_AGE = reader_module._MAX_AGE, 64
    table_lines, reader_module._TABLE_LINES = reader_module._TABLE_LINES, 2
    try:
        for now, lines in prompts:
            memory = "\n".join(f'- [step {t}] {verdict} "{value}": x' for t, verdict, value in lines)
            prompt = f"Step {now}. Pick.\nMemory:\n{memory}\nOptions:\nA) a"
            assert reader._scores(prompt) == plain_scores(reader, prompt)
    finally:
        reader_module._MAX_AGE, reader_module._TABLE_LINES = max_age, table_lines

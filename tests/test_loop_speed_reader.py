"""The shortcuts of the simulated reader and of the reply parser find what the plain rules find, in any
text, not only in a rendered prompt or a simulated reply."""

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from runners.agent.parse import parse_choice
from runners.agent.prompt import OPTION_LINE
from runners.llm.simulated.reader import _evidence_lines, _option_texts

ANY_EVIDENCE_LINE = re.compile(r"^- \[step .*$", re.MULTILINE)

# Texts built from pieces that start, end and nearly make memory and option lines, dense in both.
MEMORY_PIECES = ["- [step ", '- [step 3] VALID "a": x', "-", "[step"]
PIECES = st.sampled_from([*MEMORY_PIECES, "\n", "\r", "a", "\u2028", "B) ", "b) ", ")", "Z", " "])
TEXTS = st.lists(PIECES, max_size=30).map("".join)


@settings(max_examples=500, deadline=None)
@given(TEXTS)
def test_evidence_lines_are_what_the_multiline_pattern_finds(text):
    assert _evidence_lines(text) == ANY_EVIDENCE_LINE.findall(text)


@settings(max_examples=500, deadline=None)
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

"""The simulated reader's shortcuts find what the plain rules find: the memory lines are those a
multiline `^- \\[step .*$` finds, in any text, not only in a rendered prompt."""

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from runners.llm.simulated.reader import _evidence_lines

ANY_EVIDENCE_LINE = re.compile(r"^- \[step .*$", re.MULTILINE)

# Lines built from pieces that start, end and nearly make memory lines, so that the cases are dense in them.
PIECES = st.sampled_from(["- [step ", '- [step 3] VALID "a": x', "-", "[step", "\n", "\r", "a", "\u2028"])


@settings(max_examples=500, deadline=None)
@given(st.lists(PIECES, max_size=30).map("".join))
def test_evidence_lines_are_what_the_multiline_pattern_finds(text):
    assert _evidence_lines(text) == ANY_EVIDENCE_LINE.findall(text)

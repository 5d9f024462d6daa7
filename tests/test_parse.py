import pytest

from runners.agent.parse import parse_choice, parse_free

OPTS = ("aisle", "window", "middle")


@pytest.mark.parametrize(
    "reply, expected",
    [
        ("Answer: B", 1),
        ("B", 1),
        ("(C)", 2),
        ("C) middle", 2),
        ("answer is A", 0),
        ("Answer: window", 1),
        ("I would recommend the middle seat.", 2),
        ("  Answer:   a", None),  # lower-case letter is not a label; "a" names no option
        ("", None),
        ("Z", None),  # label outside the options
        ("aisle or window", None),  # ambiguous
    ],
)
def test_parse_choice(reply, expected):
    assert parse_choice(reply, OPTS) == expected


def test_parse_free_takes_text_after_last_answer():
    assert parse_free("Let me think. Answer: Paris") == "Paris"
    assert parse_free("  Paris \n") == "Paris"
    assert parse_free("answer: x Answer: y") == "y"

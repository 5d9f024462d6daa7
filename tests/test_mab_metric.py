"""The upstream FactConsolidation metric: normalisation and substring exact match, by hand cases."""

import pytest

from envs.memoryagentbench.metric import extract_answer, normalize_answer, substring_exact_match


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("Washington, D.C.", "washington dc"),  # punctuation deleted, no space inserted
        ("The Beatles", "beatles"),
        ("a Tale of an Apple and the Tree", "tale of apple and tree"),
        ("  Rock   and\troll\n", "rock and roll"),
        ("Theatre", "theatre"),  # "the" inside a word stays
        ("Guinea-Bissau", "guineabissau"),
        ("Rogério Ceni", "rogério ceni"),  # non-ASCII letters are kept
        ("A", ""),
    ],
)
def test_normalize_answer(text, normalised):
    assert normalize_answer(text) == normalised


def test_gold_must_be_a_substring_of_the_prediction():
    assert substring_exact_match("It is Washington D.C. of course", ["Washington, D.C."])
    assert substring_exact_match("the United States of America", "United States")
    assert not substring_exact_match("United States", ["United States of America"])
    assert not substring_exact_match("Paris", ["London"])


def test_articles_and_case_do_not_matter():
    assert substring_exact_match("beatles", ["The Beatles"])
    assert substring_exact_match("An Apple", ["apple"])


def test_any_of_several_golds():
    assert substring_exact_match("Kolkata", ["Calcutta", "Kolkata"])
    assert not substring_exact_match("Mumbai", ["Calcutta", "Kolkata"])


def test_answer_prefix():
    output = "Let me think.\nAnswer: Tim Cook\nThe fact with serial 13."
    assert extract_answer(output) == "Tim Cook"
    assert extract_answer("answer:   Tim Cook") == "Tim Cook"
    assert extract_answer("Tim Cook\nbecause fact 13") == "Tim Cook"
    assert substring_exact_match(output, ["Tim Cook"])
    assert not substring_exact_match(output, ["Steve Jobs"])


def test_golds_are_required():
    with pytest.raises(ValueError, match="golds"):
        substring_exact_match("anything", [])

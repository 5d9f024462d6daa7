"""Parsing facts and questions with the MQuAKE patterns, on all six local sources."""

import time

import pytest

from envs.memoryagentbench.data import (
    FactConsolidationRecord,
    MQuAKETemplates,
    load_conflict_resolution,
    load_mquake_templates,
)
from envs.memoryagentbench.metric import substring_exact_match
from envs.memoryagentbench.parse import (
    Fact,
    FactGraph,
    MQuAKEParser,
    parse_context,
    parse_source,
    parser_for,
)
from tests.helpers.shared_data import require_data

SIZES = ("6k", "32k", "262k")
# A perfect last-write-wins reader (SOURCES.md): a few conflicted questions have the older value as gold.
LWW_SCORE = {"6k": 1.00, "32k": 0.98, "262k": 0.97}


@pytest.fixture(scope="module")
def templates() -> MQuAKETemplates:
    return load_mquake_templates(require_data())


@pytest.fixture(scope="module")
def parser(templates) -> MQuAKEParser:
    return parser_for(templates)


@pytest.fixture(scope="module")
def parsed(templates):
    """Every local source parsed once, with the time each parse took."""
    out = {}
    for hops in ("sh", "mh"):
        for size in SIZES:
            record = load_conflict_resolution(f"factconsolidation_{hops}_{size}", require_data())
            start = time.perf_counter()
            out[(hops, size)] = (parse_source(record, templates), time.perf_counter() - start)
    return out


@pytest.mark.parametrize("hops", ["sh", "mh"])
@pytest.mark.parametrize("size", SIZES)
def test_every_fact_line_parses(parsed, hops, size):
    source, seconds = parsed[(hops, size)]
    cov = source.coverage
    assert cov.facts == cov.facts_parsed > 0 and cov.unparsed_facts == ()
    assert [line.serial for line in source.lines] == list(range(cov.facts))
    assert all(line.fact.subject and line.fact.object for line in source.lines)
    assert seconds < 5.0, f"parsing {cov.source} took {seconds:.2f} s"


@pytest.mark.parametrize("size", SIZES)
def test_every_single_hop_question_parses_to_a_known_key(parsed, size):
    source, _ = parsed[("sh", size)]
    keys = {(line.fact.subject, line.fact.relation) for line in source.lines}
    assert source.coverage.questions_parsed == 100 and source.coverage.unparsed_questions == ()
    assert all(q.key in keys and q.hops is None for q in source.questions)


@pytest.mark.parametrize("size", SIZES)
def test_a_perfect_last_write_wins_reader_scores_as_upstream_reports(parsed, size):
    source, _ = parsed[("sh", size)]
    newest = {}
    for line in source.lines:  # serial order: a later fact overwrites
        newest[(line.fact.subject, line.fact.relation)] = line.fact.object
    score = sum(substring_exact_match(newest[q.key], q.golds) for q in source.questions) / 100
    assert score == pytest.approx(LWW_SCORE[size], abs=0.01)
    assert source.coverage.answered_by_newest == round(score * 100)


@pytest.mark.parametrize("size", SIZES)
def test_multi_hop_chains_are_grounded_in_the_facts(parsed, size):
    """Coverage of the multi-hop heuristic (a floor against regressions, not a target): at 6k / 32k /
    262k it parses 90 / 89 / 90 questions, and the newest facts walk 84 / 76 / 57 chains to a gold."""
    source, _ = parsed[("mh", size)]
    cov = source.coverage
    assert cov.questions_parsed >= 85
    assert cov.answered_by_newest >= {"6k": 80, "32k": 70, "262k": 50}[size]
    graph = FactGraph(line.fact for line in source.lines)
    for q in source.questions:
        if q.hops:
            assert q.key is None and len(q.hops) >= 3  # a subject and at least two relations
            assert graph.walk(q.hops[:2]) is not None  # the first hop exists among the facts
    assert len(cov.unparsed_questions) == 100 - cov.questions_parsed


def test_the_most_specific_pattern_wins(parser):
    # "The [X] is __" (P1308) and "[X] is located in __" (P131) match too; the longest literal text wins.
    assert parser.fact("The capital of Romania is Bucharest.") == Fact("Romania", "P36", "Bucharest")
    assert parser.fact("The headquarters of Apple Inc. is located in the city of Cupertino.") == Fact(
        "Apple Inc.", "P159", "Cupertino"
    )
    assert parser.fact("Kenya is located in the continent of Africa.") == Fact("Kenya", "P30", "Africa")
    assert parser.fact("The Prime Minister of Sweden is Stefan Löfven.") == Fact(
        "Prime Minister of Sweden", "P1308", "Stefan Löfven"
    )
    assert parser.fact("Pedro Pierluisi worked in the city of Washington, D.C..") == Fact(
        "Pedro Pierluisi", "P937", "Washington, D.C."
    )
    assert parser.question("Who is the author of Dune?") == ("Dune", "P50")
    assert parser.question("Who is the Mayor of Paris?") == ("Mayor of Paris", "P1308")
    assert parser.fact("Nothing here matches a template") is None


def test_specificity_rule_on_crafted_templates():
    crafted = MQuAKETemplates(
        cloze={"R_short": "[X] is __", "R_long": "[X] is the capital of __", "R_same": "[X] is __"},
        question={"R_short": "What is [X]?"},
    )
    parser = MQuAKEParser(crafted)
    assert parser.fact("Paris is the capital of France.") == Fact("Paris", "R_long", "France")
    assert parser.fact("Paris is big.") == Fact("Paris", "R_short", "big")
    assert parser.aliases == {"R_same": "R_short"}  # identical text: the first id in the file


def test_identical_mquake_templates_are_aliases(parser):
    assert parser.aliases == {"P276": "P131"}
    assert parser.fact("Eiffel Tower is located in Paris.") == Fact("Eiffel Tower", "P131", "Paris")


def test_unparsed_lines_are_kept_and_counted(templates):
    context = (
        "Here is a list of facts:\n0. Roy Rogers is married to Dale Evans.\n"
        "1. Something no template knows.\n2. Roy Rogers is married to John McVie.\n"
    )
    record = FactConsolidationRecord(
        "factconsolidation_sh_6k",
        context,
        ("Who is Roy Rogers married to?", "Why?"),
        (("John McVie",), ("x",)),
        (),
    )
    source = parse_source(record, templates)
    assert [line.fact is None for line in source.lines] == [False, True, False]
    assert source.lines[1].text == "1. Something no template knows."
    cov = source.coverage
    assert (cov.facts, cov.facts_parsed, cov.unparsed_facts) == (3, 2, ("1. Something no template knows.",))
    assert (cov.questions_parsed, cov.unparsed_questions, cov.answered_by_newest) == (1, ("Why?",), 1)


def test_serials_must_increase(parser):
    with pytest.raises(ValueError, match="context"):
        parse_context("Here is a list of facts:\n1. A is married to B.\n0. A is married to C.\n", parser)


def test_multi_hop_chain_on_a_small_graph():
    graph = FactGraph(
        [
            Fact("Our Mutual Friend", "P50", "Charles Dickens"),
            Fact("Charles Dickens", "P26", "Catherine Dickens"),
            Fact("Catherine Dickens", "P27", "United Kingdom"),
            Fact("Catherine Dickens", "P27", "Belgium"),  # newer
            Fact("Charles Dickens", "P19", "Portsmouth"),
        ]
    )
    question = "What is the country of citizenship of the spouse of the author of Our Mutual Friend?"
    assert graph.chain(question) == ("Our Mutual Friend", "P50", "P26", "P27")
    assert graph.walk(("Our Mutual Friend", "P50", "P26", "P27")) == "Belgium"
    assert graph.chain("Who wrote Bleak House?") is None  # no known subject

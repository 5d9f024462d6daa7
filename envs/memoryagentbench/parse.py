"""Parsing FactConsolidation facts and questions with the MQuAKE sentence patterns.

Facts ("12. The capital of Romania is Bucharest.") parse into (subject, relation, object) with the cloze
templates, single-hop questions ("What is the capital of Romania?") into (subject, relation) with the
question templates; relations are MQuAKE's Wikidata relation ids ("P36").

The most specific pattern wins. Several templates can match one sentence ("The [X] is __" matches almost
anything that starts with "The"; "[X] is located in __" matches every "[X] is located in the country of
__" sentence), so templates are tried in order of decreasing literal text (the template without its
"[X]" and "__" slots), ties in template-file order, and the first match is taken. Inside a template the
subject is the shortest leading span that lets the rest match. Templates with identical text
(P131 and P276 are both "[X] is located in __") cannot be told apart: the later id is an alias of the
first one in the file (`MQuAKEParser.aliases`).

Multi-hop questions are free paraphrases written for MQuAKE (no template), so they are parsed by a small
relation lexicon grounded in the facts: see `FactGraph.chain`. Nothing that fails to parse is dropped:
unparsed facts keep their sentence (`FactLine.fact is None`) and `ParseCoverage` counts them.
"""

from __future__ import annotations

import functools
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from analysis.streamlog.record import INT64_MAX
from envs.memoryagentbench.data import DataError, FactConsolidationRecord, MQuAKETemplates
from envs.memoryagentbench.metric import substring_exact_match

SUBJECT_SLOT, OBJECT_SLOT = "[X]", "__"


class Fact(NamedTuple):
    subject: str
    relation: str
    object: str


@dataclass(frozen=True, slots=True)
class FactLine:
    """One numbered line of the context; `fact` is None when no template matches it."""

    serial: int
    text: str  # the line as in the context, serial included
    sentence: str  # the line without its serial
    fact: Fact | None


class _TemplateMatcher:
    """The templates of one kind, tried most specific first. Each template is a compiled regex guarded by
    its longest literal piece: a C substring test rules out most templates before any regex runs."""

    def __init__(self, templates: dict[str, str], terminator: str = ""):
        canonical: dict[str, str] = {}
        self.aliases: dict[str, str] = {}
        for relation, template in templates.items():
            if template.count(SUBJECT_SLOT) != 1 or template.count(OBJECT_SLOT) > 1:
                raise ValueError(f"templates: {relation} ({template!r}) needs one {SUBJECT_SLOT} slot")
            if template in canonical:
                self.aliases[relation] = canonical[template]
            else:
                canonical[template] = relation
        self._templates: list[tuple[str, re.Pattern[str], str, bool]] = []
        for template in sorted(canonical, key=lambda tpl: -_literal_length(tpl)):
            parts = [p for p in re.split(r"(\[X\]|__)", template) if p]
            regex = "".join(
                "(?P<s>.+?)" if p == SUBJECT_SLOT else "(?P<o>.+)" if p == OBJECT_SLOT else re.escape(p)
                for p in parts
            )
            guard = max((p for p in parts if p not in (SUBJECT_SLOT, OBJECT_SLOT)), key=len, default="")
            compiled = re.compile(regex + terminator + r"\Z")
            self._templates.append((guard, compiled, canonical[template], OBJECT_SLOT in parts))

    def match(self, text: str) -> tuple[str, str, str | None] | None:
        """(subject, relation, object or None) by the most specific matching template, or None."""
        for guard, regex, relation, has_object in self._templates:
            if guard in text and (m := regex.match(text)):
                return m.group("s"), relation, (m.group("o") if has_object else None)
        return None


def _literal_length(template: str) -> int:
    """How specific a template is: the length of its text without the slots."""
    return len(template.replace(SUBJECT_SLOT, "").replace(OBJECT_SLOT, ""))


class MQuAKEParser:
    """Facts and single-hop questions by the MQuAKE templates (`parser_for` builds one per template set)."""

    def __init__(self, templates: MQuAKETemplates):
        self._cloze = _TemplateMatcher(templates.cloze, terminator=r"\.")
        self._question = _TemplateMatcher(templates.question)
        self.aliases = {**self._cloze.aliases, **self._question.aliases}

    def fact(self, sentence: str) -> Fact | None:
        """(subject, relation, object) of a fact sentence ending in ".", or None."""
        parsed = self._cloze.match(sentence)
        return Fact(*parsed) if parsed else None

    def question(self, text: str) -> tuple[str, str] | None:
        """(subject, relation) of a single-hop question, or None."""
        parsed = self._question.match(text.strip())
        return (parsed[0], parsed[1]) if parsed else None


def parser_for(templates: MQuAKETemplates) -> MQuAKEParser:
    """The parser of a template set, compiled once per process."""
    return _cached_parser(tuple(templates.cloze.items()), tuple(templates.question.items()))


@functools.cache
def _cached_parser(cloze: tuple[tuple[str, str], ...], question: tuple[tuple[str, str], ...]) -> MQuAKEParser:
    return MQuAKEParser(MQuAKETemplates(cloze=dict(cloze), question=dict(question)))


def parse_context(context: str, parser: MQuAKEParser) -> tuple[FactLine, ...]:
    """Every fact line of a context ("Here is a list of facts:\\n0. ...\\n1. ..."), in serial order.

    A line without a serial number is kept (serial = previous + 1, never parsed as a fact) so that the
    coverage counts show it.
    """
    raw = context.splitlines()
    if raw and not _numbered(raw[0]):
        raw = raw[1:]  # the "Here is a list of facts:" header
    lines = []
    serial = -1
    for line in raw:
        line = line.strip()
        if not line:
            continue
        numbered = _numbered(line)
        serial = int(numbered[0]) if numbered else serial + 1
        sentence = numbered[1] if numbered else line
        lines.append(FactLine(serial, line, sentence, parser.fact(sentence) if numbered else None))
    if any(a.serial >= b.serial for a, b in zip(lines, lines[1:], strict=False)):
        raise ValueError("context: fact serial numbers are not increasing")
    return tuple(lines)


def _numbered(line: str) -> tuple[str, str] | None:
    """("12", "The capital of ...") for "12. The capital of ...", else None."""
    serial, dot, sentence = line.partition(". ")
    return (serial, sentence.strip()) if dot and serial.isdigit() and sentence.strip() else None


# Phrases that name each relation in MQuAKE's multi-hop paraphrases (matched on the lower-cased question
# with its subject blanked out). A phrase may name several relations ("language"); the facts decide.
RELATION_CUES: dict[str, str] = {
    "P17": r"located in (?:the|which|what) country",
    "P19": r"\bborn\b|birth",
    "P20": r"\bd(?:ie|ied|ies)\b|death|pass(?:ed)? away|last breath|breathed? (?:his|her|their) last|demise",
    "P26": r"spouse|partner|married|wife|husband|significant other",
    "P27": r"citizen|nationality|belong|hold\w* .*citizenship|\bfrom\b|hail",
    "P30": r"continent",
    "P35": r"head of state|chief of state|president|highest-ranking|chief public representative",
    "P36": r"capital|seat of government|center of government",
    "P37": r"official|language",
    "P40": r"\bchild",
    "P50": r"author|\bwr(?:ote|itten|iter|iting)\b|creat",
    "P69": r"educat|universit|school|studied|college|alma mater",
    "P106": r"occupation|profession|\bjob\b|\bfield\b|kind of work|\brole\b|work as",
    "P108": r"employ|\bwork(?:s|ed)?\b",
    "P112": r"found|establish|creat",
    "P127": r"\bown",
    "P136": r"genre|music|style",
    "P140": r"religio|faith|believ|worship|practi[cs]",
    "P159": r"headquarter|head office",
    "P169": r"chief executive|\bceo\b|leads the company",
    "P170": r"creat",
    "P175": r"perform|\bsang\b|singer|artist",
    "P176": r"manufactur|produc|\bmade\b|\bmakes?\b",
    "P178": r"develop",
    "P264": r"label|represent",
    "P286": r"coach",
    "P364": r"original language",
    "P407": r"language",
    "P413": r"position",
    "P449": r"broadcast|\baired\b|network",
    "P463": r"member|part of",
    "P488": r"chair",
    "P495": r"origin|\bfrom\b|hail|gave rise|invented|developed|first practi[cs]ed|created in|derived",
    "P641": r"sport",
    "P740": r"founded in|established in|come into existence|first established",
    "P800": r"famous|notable|known for|significant|greatest contribution",
    "P937": r"\bwork(?:ed|s)? in\b|work location|location of (?:the )?work|place of (?:work|employment)"
    r"|work hours",
    "P1037": r"director|manag",
    "P1412": r"speak|spoken|language",
    "P6": r"head of (?:the )?government|prime minister|chief executive of the country|political leader"
    r"|leader of the government",
}
# Hops the paraphrases often leave unsaid, with the relations they lead into: "the sport of <player>" goes
# through the player's position, "the country of origin of <team>" through the team's sport, "the
# manager of <song>" through its performer, "the CEO of <software>" through its developer.
IMPLICIT_HOPS = {"P413": {"P641"}, "P641": {"P495"}, "P175": {"P1037"}, "P178": {"P169"}}
MAX_HOPS = 4
_SUBJECT_START = re.compile(r"(?:^|(?<=[\s\"“'(]))\S")
_SUBJECT_END = re.compile(r"(?=[\s\"”'),?:;]|$)")


class FactGraph:
    """The facts of one context as a graph (subject -> relation -> objects), for multi-hop questions.

    `chain` parses a multi-hop question into (subject, r1, r2, ...), grounded in the facts. Subject: a
    fact subject that occurs in the question between word boundaries. Chain: among the relation paths
    that can be walked from the subject through the facts (any version of a fact, up to `MAX_HOPS`, no
    relation twice), the one that uses the most relations the question names (`RELATION_CUES`; a hop of
    `IMPLICIT_HOPS` may stay unnamed when the next hop is one it leads into); ties go to a longer subject,
    then to a path that the newest facts can walk, then to fewer hops, then to relation ids in sorted
    order. A chain has at least two hops, as every multi-hop question does. The gold answers are never
    consulted. This is a heuristic: `ParseCoverage` reports how many chains parse and how many of them the
    newest facts walk to a gold answer.

    `walk` follows a chain (or a single-hop key) through the newest facts.
    """

    def __init__(self, facts: Iterable[Fact]):
        self._edges: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
        self._newest: dict[tuple[str, str], str] = {}
        for subject, relation, obj in facts:
            objects = self._edges[subject][relation]
            if obj in objects:
                objects.remove(obj)
            objects.append(obj)  # newest last
            self._newest[(subject, relation)] = obj
        self._edges = {s: dict(rels) for s, rels in self._edges.items()}

    def chain(self, question: str) -> tuple[str, ...] | None:
        """(subject, r1, ..., rn) with n >= 2 for a multi-hop question, or None when no chain is found."""
        best: tuple | None = None
        for subject, (start, end) in self._subjects_in(question):
            text = (question[:start] + " " + question[end:]).lower()
            named = {r for r, cue in _CUES.items() if cue.search(text)}
            for path in self._paths(subject, named):
                if len(path) < 2:
                    continue
                score = sum(r in named for r in path)
                rank = (score, len(subject), self.walk((subject, *path)) is not None, -len(path))
                if best is None or rank > best[0] or (rank == best[0] and (subject, *path) < best[1]):
                    best = (rank, (subject, *path))
        return best[1] if best else None

    def walk(self, chain: Sequence[str]) -> str | None:
        """The object reached by following `chain` through the newest facts, or None if it breaks."""
        node = chain[0]
        for relation in chain[1:]:
            node = self._newest.get((node, relation))
            if node is None:
                return None
        return node

    def _subjects_in(self, question: str) -> list[tuple[str, tuple[int, int]]]:
        starts = [m.start() for m in _SUBJECT_START.finditer(question)]
        ends = [m.start() for m in _SUBJECT_END.finditer(question)]
        found = {}
        for i in starts:
            for j in ends:
                if j > i and question[i:j] in self._edges:
                    found[question[i:j]] = (i, j)
        return list(found.items())

    def _paths(self, subject: str, named: set[str]) -> list[tuple[str, ...]]:
        allowed = named | {hop for hop, nexts in IMPLICIT_HOPS.items() if nexts & named}
        paths: list[tuple[str, ...]] = []

        def extend(node: str, path: tuple[str, ...]) -> None:
            if path and all(r in named or nxt in IMPLICIT_HOPS[r] for r, nxt in _pairs(path)):
                paths.append(path)
            if len(path) == MAX_HOPS:
                return
            for relation, objects in self._edges.get(node, {}).items():
                if relation in allowed and relation not in path:
                    for obj in objects:
                        extend(obj, (*path, relation))

        extend(subject, ())
        return sorted(set(paths))


def _pairs(path: tuple[str, ...]) -> list[tuple[str, str | None]]:
    """Each relation with the one after it (None after the last)."""
    return list(zip(path, (*path[1:], None), strict=True))


_CUES = {relation: re.compile(cue) for relation, cue in RELATION_CUES.items()}


@dataclass(frozen=True, slots=True)
class ParsedQuestion:
    """A question with its golds and what parsing made of it: `key` (single-hop sources) or `hops`
    (multi-hop sources: subject, r1, r2, ...); None where it did not parse."""

    text: str
    golds: tuple[str, ...]
    key: tuple[str, str] | None = None
    hops: tuple[str, ...] | None = None


def is_multi_hop(source: str) -> bool:
    """Whether a FactConsolidation source asks multi-hop questions (factconsolidation_mh_*)."""
    return source.startswith("factconsolidation_mh_")


def parse_questions(
    record: FactConsolidationRecord, parser: MQuAKEParser, graph: FactGraph
) -> tuple[ParsedQuestion, ...]:
    """The record's questions, parsed by template (single-hop sources) or by `graph.chain` (multi-hop)."""
    if not is_multi_hop(record.source):
        return tuple(
            ParsedQuestion(q, golds, key=parser.question(q))
            for q, golds in zip(record.questions, record.answers, strict=True)
        )
    return tuple(
        ParsedQuestion(q, golds, hops=graph.chain(q))
        for q, golds in zip(record.questions, record.answers, strict=True)
    )


@dataclass(frozen=True, slots=True)
class ParseCoverage:
    """How much of one source parsed. `questions_parsed` counts keys (single-hop) or chains (multi-hop);
    `answered_by_newest` counts parsed questions whose newest facts (the key's last value, or the chain
    walked through last values) match a gold answer under the upstream metric: for single-hop sources
    this is the score of a perfect last-write-wins reader."""

    source: str
    facts: int
    facts_parsed: int
    questions: int
    questions_parsed: int
    answered_by_newest: int
    unparsed_facts: tuple[str, ...] = ()
    unparsed_questions: tuple[str, ...] = ()


def parse_coverage(
    record: FactConsolidationRecord,
    lines: Sequence[FactLine],
    questions: Sequence[ParsedQuestion],
    graph: FactGraph,
) -> ParseCoverage:
    """Coverage counts of a parsed source (see `ParseCoverage`); `graph` holds the source's facts."""
    answered = 0
    for q in questions:
        chain = q.hops or q.key
        value = graph.walk(chain) if chain else None
        answered += value is not None and substring_exact_match(value, q.golds)
    return ParseCoverage(
        source=record.source,
        facts=len(lines),
        facts_parsed=sum(line.fact is not None for line in lines),
        questions=len(questions),
        questions_parsed=sum((q.hops or q.key) is not None for q in questions),
        answered_by_newest=answered,
        unparsed_facts=tuple(line.text for line in lines if line.fact is None),
        unparsed_questions=tuple(q.text for q in questions if (q.hops or q.key) is None),
    )


@dataclass(frozen=True, slots=True)
class ParsedSource:
    """Everything parsed from one source: its fact lines, questions and coverage counts."""

    record: FactConsolidationRecord
    lines: tuple[FactLine, ...]
    questions: tuple[ParsedQuestion, ...]
    coverage: ParseCoverage


def parse_source(record: FactConsolidationRecord, templates: MQuAKETemplates) -> ParsedSource:
    """Parse a record's facts and questions with `templates` and count the coverage. A context whose
    serials do not increase, or whose times would not fit the episode log, is a `DataError` naming
    the row."""
    parser = parser_for(templates)
    where = record.where or record.source
    try:
        lines = parse_context(record.context, parser)
    except ValueError as exc:
        raise DataError(f"{where}: {exc}") from None
    last = (lines[-1].serial if lines else -1) + len(record.questions)  # the last question's time
    if last > INT64_MAX:
        raise DataError(
            f"{where}: context: fact serial {lines[-1].serial} is too large: the questions' times follow "
            f"the last serial and must fit the episode log's int64 (<= 2**63 - 1)"
        )
    graph = FactGraph(line.fact for line in lines if line.fact)
    questions = parse_questions(record, parser, graph)
    return ParsedSource(record, lines, questions, parse_coverage(record, lines, questions, graph))

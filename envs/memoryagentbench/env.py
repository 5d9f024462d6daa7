"""memoryagentbench: FactConsolidation from MemoryAgentBench (Hu, Wang, McAuley 2025) on the real data.

A source (`factconsolidation_{sh,mh}_{6k,32k,262k}`) is a numbered list of facts, a larger serial being
a newer fact, some of which overwrite older ones, followed by 100 questions whose answer is the newest
fact. The stream follows upstream:

- phase "ingest": the facts in serial order, in chunks of about `chunk_size` tokens (upstream feeds
  512-token chunks to retrieval agents). Tokens are estimated as whitespace words x 4/3 (no tokenizer
  download); a chunk holds whole fact lines. Each chunk is a `Task(decide=False)` whose `observe` holds
  one `Observation(key=(subject, relation), value=object, t=serial, text=numbered line, source="fact")`
  per fact; a fact that does not parse is still ingested, with key None and its sentence as value.
- phase "questions": one task per question, `key=(subject, relation)` for single-hop questions (None
  for multi-hop ones and for any question that does not parse, so memories fall back to text
  retrieval), `correct` = the first gold, `meta` = the golds, `instructions` = the upstream query's
  instructions and one-shot example (the system message a real model receives; `QUERY_TEMPLATE` is the
  whole upstream query) and, for a parsed multi-hop question, its chain (`multi_hop`).

Time is one clock, the fact serial: an ingest task has the serial of its first fact, and question i has
`t = last serial + 1 + i`, so memories see observations and queries in one order.

`execute` scores a free-text answer with the upstream substring exact match. Nothing is executed in
this setting, so TEPA-Full's trials check a precedent against the facts shown so far (up to the end of
the chunk being ingested): support passes iff its value is the newest value of its key; counterfactual
(the precedent applied where it should not) picks, by the seeded stream, another key of the same
relation and passes iff the value is not that key's newest value (no such key: pass); contamination
passes always, because keys are disjoint here (a precedent is retrieved only for its own key), so one
key's precedent cannot change another key's answer.
"""

from __future__ import annotations

import bisect
import functools
import math
import os
import random
from collections import defaultdict
from collections.abc import Hashable, Iterator
from typing import Any, ClassVar

from envs.base import TRIAL_KINDS, EnvironmentBase, MultiHop, Outcome, Task
from envs.memoryagentbench.data import load_conflict_resolution, load_mquake_templates, local_data_dir
from envs.memoryagentbench.metric import substring_exact_match
from envs.memoryagentbench.parse import FactLine, ParsedSource, parse_source
from tepa.evidence import Observation

DEFAULT_SOURCE = "factconsolidation_sh_6k"
DEFAULT_CHUNK_SIZE = 512
# MemoryAgentBench's FactConsolidation query for long-context and retrieval agents (utils/templates.py).
QUERY_TEMPLATE = (
    "Pretend you are a knowledge management system. Each fact in the knowledge pool is provided with a "
    "serial number at the beginning, and the newer fact has larger serial number. \n You need to solve the "
    "conflicts of facts in the knowledge pool by finding the newest fact with larger serial number. You need "
    "to answer a question based on this rule. You should give a very concise answer without saying other "
    "words for the question **only** from the knowledge pool you have memorized rather than the real facts "
    "in real world. \n\nFor example:\n\n [Knowledge Pool] \n\n Question: Based on the provided Knowledge "
    "Pool, what is the name of the current president of Russia? \nAnswer: Donald Trump \n\n Now Answer the "
    "Question: Based on the provided Knowledge Pool, {question} \nAnswer:"
)
# What a question task carries as `instructions` (the prompt's system message): the upstream
# query up to its one-shot example; the prompt itself then asks the question.
INSTRUCTIONS = QUERY_TEMPLATE.split(" \n\n Now Answer the Question")[0]


def approx_tokens(text: str) -> int:
    """Token estimate without a tokenizer: whitespace words x 4/3, rounded up."""
    return math.ceil(len(text.split()) * 4 / 3)


@functools.lru_cache(maxsize=8)
def _parsed(source: str, folder: str | None) -> ParsedSource:
    return parse_source(load_conflict_resolution(source, folder), load_mquake_templates(folder))


def load_parsed_source(source: str, data_dir: str | os.PathLike | None = None) -> ParsedSource:
    """A source's parsed facts, questions and coverage (parsed once per process and data folder)."""
    return _parsed(source, _folder(data_dir))


def _folder(data_dir: str | os.PathLike | None) -> str | None:
    """The data folder as the per-source caches key it (None: online)."""
    folder = local_data_dir(data_dir)
    return str(folder) if folder else None


@functools.lru_cache(maxsize=8)
def _fact_index(source: str, folder: str | None) -> tuple[dict, dict, dict]:
    """For trials, built once per source (not per seed; keyed by the source's name, since hashing its
    parsed lines cost every seed tens of ms): key -> serials and values of its facts, oldest first;
    relation -> the first serial of each of its keys and the keys, in that order; key -> its index in
    its relation's list."""
    history: dict[Hashable, tuple[list[int], list[str]]] = {}
    relation_keys: dict[str, tuple[list[int], list[Hashable]]] = defaultdict(lambda: ([], []))
    index_in_relation: dict[Hashable, int] = {}
    for line in _parsed(source, folder).lines:
        if line.fact:
            key = (line.fact.subject, line.fact.relation)
            if key not in history:
                history[key] = ([], [])
                first_serials, keys = relation_keys[line.fact.relation]
                index_in_relation[key] = len(keys)
                first_serials.append(line.serial)
                keys.append(key)
            history[key][0].append(line.serial)
            history[key][1].append(line.fact.object)
    return history, dict(relation_keys), index_in_relation


@functools.lru_cache(maxsize=16)
def _ingest_tasks(source: str, folder: str | None, chunk_size: int) -> tuple[Task, ...]:
    """A source's ingest tasks, built once per source and chunk size (not per seed): nothing changes
    them, and building a 262k source's 18k observations again for every stream was most of its setup."""
    return tuple(_ingest_task(chunk) for chunk in _chunk(_parsed(source, folder).lines, chunk_size))


class MemoryAgentBench(EnvironmentBase):
    """The FactConsolidation stream of one source (see the module docstring)."""

    name = "memoryagentbench"
    operational: ClassVar[frozenset[str]] = frozenset({"data_dir"})  # its content is the provenance

    def __init__(
        self,
        source: str = DEFAULT_SOURCE,
        data_dir: str | os.PathLike | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
    ):
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"chunk_size: must be a positive number of tokens, got {chunk_size!r}")
        folder = _folder(data_dir)
        parsed = _parsed(source, folder)
        templates = load_mquake_templates(data_dir)
        self._question_templates = templates.question
        #: The fingerprint of the data this stream reads (the runner makes it part of its identity).
        self.provenance = {"source_row_sha256": parsed.record.sha256, "templates_sha256": templates.sha256}
        self.source = source
        self.chunk_size = chunk_size
        self.coverage = parsed.coverage
        self._questions = parsed.questions
        self._qa_ids = parsed.record.qa_pair_ids
        self._ingest = _ingest_tasks(source, folder, chunk_size)
        self._first_question_t = parsed.lines[-1].serial + 1 if parsed.lines else 0
        self._history, self._relation_keys, self._index_in_relation = _fact_index(source, folder)
        self.reset(0)

    def reset(self, seed: int) -> None:
        """Start the stream again; `seed` drives only the choice of counterfactual trials."""
        self._rng = random.Random(seed)
        self._shown = -1  # serial of the last fact shown to the agent

    def tasks(self) -> Iterator[Task]:
        """The ingest chunks in serial order, then the questions (see the module docstring)."""
        self._shown = -1
        for task in self._ingest:
            self._shown = task.observe[-1].t
            yield task
        for i, question in enumerate(self._questions):
            yield Task(
                key=question.key,
                text=question.text,
                phase="questions",
                t=self._first_question_t + i,
                correct=question.golds[0] if question.golds else None,
                instructions=INSTRUCTIONS,
                multi_hop=self._multi_hop(question.hops),
                meta={
                    "golds": list(question.golds),
                    "qa_pair_id": self._qa_ids[i] if i < len(self._qa_ids) else None,
                },
            )

    def _multi_hop(self, hops: tuple[str, ...] | None) -> MultiHop | None:
        """A parsed chain (subject, relation, ...) with each relation's question template."""
        if not hops:
            return None
        subject, *relations = hops
        return MultiHop(subject, tuple(relations), tuple(self._question_templates[r] for r in relations))

    def execute(self, task: Task, action: str) -> Outcome:
        """Score the free-text `action` against the task's golds (upstream substring exact match)."""
        if not task.decide or "golds" not in task.meta:
            raise ValueError("task: only question tasks take an answer; ingest steps have none")
        if not isinstance(action, str):
            raise ValueError(f"action: expected the answer text, got {type(action).__name__}")
        success = substring_exact_match(action, task.meta["golds"])
        return Outcome(
            success=success,
            message="matches a gold answer" if success else "matches no gold answer",
            feedback=False,
        )

    def __len__(self) -> int:
        """Decision episodes (questions) in the stream (for progress bars)."""
        return len(self._questions)

    @property
    def phase_boundaries(self) -> list[tuple[int, str]]:
        return [(self._first_question_t, "questions")]

    def trial(self, precedent: Any, kind: str) -> bool:
        """Check `precedent` against the facts shown so far (see the module docstring)."""
        if kind not in TRIAL_KINDS:
            raise ValueError(f"kind: {kind!r} is not one of {', '.join(TRIAL_KINDS)}")
        if kind == "contamination":
            return True
        if kind == "support":
            return self._newest(precedent.key) == precedent.value
        return self._counterfactual(precedent)

    def truth(self, key: Hashable) -> str | None:
        """The newest fact's object for a (subject, relation) key among the facts shown so far (at a
        question: all of them); None when no fact has that key (an unparsed question's key, say)."""
        try:
            return self._newest(key)
        except TypeError:  # an unhashable key has no fact
            return None

    def _counterfactual(self, precedent: Any) -> bool:
        """Another shown key of the precedent's relation, drawn by the seeded stream, must not have the
        precedent's value as its newest value."""
        key = precedent.key
        relation = key[1] if isinstance(key, tuple) and len(key) == 2 else None
        first_serials, keys = self._relation_keys.get(relation, ((), ()))
        shown = bisect.bisect_right(first_serials, self._shown)
        own = self._index_in_relation.get(key, shown)
        others = shown - (own < shown)
        if others == 0:
            return True
        i = self._rng.randrange(others)
        return self._newest(keys[i + (i >= own)]) != precedent.value

    def _newest(self, key: Hashable) -> str | None:
        """The newest value of `key` among the facts shown so far."""
        serials, values = self._history.get(key, ((), ()))
        i = bisect.bisect_right(serials, self._shown)
        return values[i - 1] if i else None


def _ingest_task(chunk: tuple[FactLine, ...]) -> Task:
    return Task(
        key=None,
        text="\n".join(line.text for line in chunk),
        phase="ingest",
        t=chunk[0].serial,
        observe=tuple(_observation(line) for line in chunk),
        decide=False,
    )


def _observation(line: FactLine) -> Observation:
    if line.fact is None:
        return Observation(key=None, value=line.sentence, t=line.serial, text=line.text, source="fact")
    subject, relation, obj = line.fact
    return Observation(key=(subject, relation), value=obj, t=line.serial, text=line.text, source="fact")


def _chunk(lines: tuple[FactLine, ...], chunk_size: int) -> list[tuple[FactLine, ...]]:
    """Whole fact lines, greedily packed into chunks of at most `chunk_size` estimated tokens (a line
    longer than that gets a chunk of its own)."""
    chunks: list[tuple[FactLine, ...]] = []
    current: list[FactLine] = []
    size = 0
    for line in lines:
        tokens = approx_tokens(line.text)
        if current and size + tokens > chunk_size:
            chunks.append(tuple(current))
            current, size = [], 0
        current.append(line)
        size += tokens
    if current:
        chunks.append(tuple(current))
    return chunks

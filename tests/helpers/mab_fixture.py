"""A tiny MemoryAgentBench data folder, generated: the layout of the real one (see `shared_data`) with
invented facts, so that the loader, parser, environment and metric are tested on every machine.

`write_mab_data(folder)` writes

    folder/memoryagentbench/Conflict_Resolution.json   a JSON list of rows, one per source
    folder/mquake/cloze_templates.json                 relation id -> "[X] ... __" fact pattern
    folder/mquake/question_templates.json              relation id -> "... [X] ...?" question pattern

Each row has the real keys: `context` ("Here is a list of facts:\\n0. <fact>\\n1. ..."; a larger serial
is a newer fact), `questions`, `answers` (a list of golds per question) and `metadata` (`source`,
`qa_pair_ids`, the other upstream fields null). As in the real data, the single-hop (sh) and multi-hop
(mh) rows of one length share their context. Everything here is made up: no real data is copied.
"""

from __future__ import annotations

import json
from pathlib import Path

CLOZE = {
    "P26": "[X] is married to __",
    "P19": "[X] was born in the city of __",
    "P36": "The capital of [X] is __",
    "P17": "[X] is located in the country of __",
    "P131": "[X] is located in __",  # matches every P17 sentence too: the more specific P17 must win
}
QUESTION = {
    "P26": "Who is [X] married to?",
    "P19": "Which city was [X] born in?",
    "P36": "What is the capital of [X]?",
    "P17": "Which country is [X] located in?",
    "P131": "Where is [X] located?",
}
# (subject, relation, object) in serial order; serials 5 and 7 overwrite serials 0 and 2.
FACTS = (
    ("Ada Quill", "P26", "Bram Toll"),
    ("Ada Quill", "P19", "Norvik"),
    ("Eldmark", "P36", "Norvik"),
    ("Norvik", "P17", "Eldmark"),
    ("Bram Toll", "P19", "Ostra"),
    ("Ada Quill", "P26", "Cato Wren"),
    ("Cato Wren", "P19", "Halden"),
    ("Eldmark", "P36", "Halden"),
    ("Ostra", "P131", "Vesland"),
    ("Halden", "P17", "Eldmark"),
)
# Single-hop questions: (question, golds, the (subject, relation) key it parses to). The golds are the
# newest facts' objects, so a perfect last-write-wins reader answers all of them.
SH_QUESTIONS = (
    ("Who is Ada Quill married to?", ["Cato Wren"], ("Ada Quill", "P26")),
    ("Which city was Ada Quill born in?", ["Norvik"], ("Ada Quill", "P19")),
    ("What is the capital of Eldmark?", ["Halden", "Halden City"], ("Eldmark", "P36")),
    ("Which city was Bram Toll born in?", ["Ostra"], ("Bram Toll", "P19")),
    ("Where is Ostra located?", ["Vesland"], ("Ostra", "P131")),
    ("Which country is Norvik located in?", ["Eldmark"], ("Norvik", "P17")),
)
# Multi-hop questions (free paraphrases, as upstream): (question, golds, the chain it parses to).
MH_QUESTIONS = (
    ("In which city was the spouse of Ada Quill born?", ["Halden"], ("Ada Quill", "P26", "P19")),
    (
        "The city where Ada Quill was born is located in which country?",
        ["Eldmark"],
        ("Ada Quill", "P19", "P17"),
    ),
)
UPSTREAM_NULL_FIELDS = (
    "demo",
    "haystack_sessions",
    "keypoints",
    "previous_events",
    "question_dates",
    "question_ids",
    "question_types",
)


def fact_sentence(subject: str, relation: str, obj: str) -> str:
    return CLOZE[relation].replace("[X]", subject).replace("__", obj) + "."


def context(facts=FACTS) -> str:
    lines = [f"{i}. {fact_sentence(*fact)}" for i, fact in enumerate(facts)]
    return "Here is a list of facts:\n" + "\n".join(lines)


def row(source: str, questions, facts=FACTS) -> dict:
    """One row of Conflict_Resolution.json for `source` with `questions` ((question, golds, ...), ...)."""
    metadata = dict.fromkeys(UPSTREAM_NULL_FIELDS)
    metadata["source"] = source
    metadata["qa_pair_ids"] = [f"{source}_no{i}" for i in range(len(questions))]
    return {
        "context": context(facts),
        "questions": [q[0] for q in questions],
        "answers": [list(q[1]) for q in questions],
        "metadata": metadata,
    }


def default_rows() -> list[dict]:
    return [
        row("factconsolidation_sh_6k", SH_QUESTIONS),
        row("factconsolidation_mh_6k", MH_QUESTIONS),
    ]


def write_mab_data(folder: Path, rows: list[dict] | None = None) -> Path:
    """Write the generated data folder (the default rows unless `rows` is given); returns `folder`."""
    (folder / "memoryagentbench").mkdir(parents=True, exist_ok=True)
    (folder / "mquake").mkdir(parents=True, exist_ok=True)
    rows = default_rows() if rows is None else rows
    (folder / "memoryagentbench" / "Conflict_Resolution.json").write_text(json.dumps(rows), encoding="utf-8")
    (folder / "mquake" / "cloze_templates.json").write_text(json.dumps(CLOZE, indent=4), encoding="utf-8")
    (folder / "mquake" / "question_templates.json").write_text(
        json.dumps(QUESTION, indent=4), encoding="utf-8"
    )
    return folder

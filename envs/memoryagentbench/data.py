"""Loading MemoryAgentBench FactConsolidation (the Conflict_Resolution split) and the MQuAKE templates.

The data is never part of the project. Where it comes from, in order:

1. an explicit `data_dir` (the config key `env.data_dir`), else
2. the environment variable `TEPA_DATA_DIR`;
   either folder holds `memoryagentbench/Conflict_Resolution.json` and
   `mquake/{cloze,question}_templates.json`;
3. otherwise, online: the split `Conflict_Resolution` of `ai-hyz/MemoryAgentBench` is downloaded from the
   Hugging Face Hub as one parquet file (`envs.memoryagentbench.download`, no extra library), and the two
   MQuAKE template files (about 2 kB each; they are not on the Hugging Face Hub) are fetched over HTTPS from
   `princeton-nlp/MQuAKE` at a pinned commit, checked against their sha256; both are kept in the user's
   cache folder.

Without any of these the loader raises `DataNotFoundError`, whose message names both ways. What is read
is checked (UTF-8, JSON, a non-empty context, questions and answers as lists of equal length, no blank
gold answer: one the metric normalises to nothing matches every reply; non-empty templates, a question
template for every relation of a fact): a problem is a `DataError`, one line naming the file and what is
wrong. Each record carries the sha256 of its row and the templates the sha256 of their files, which the
environment reports as its `provenance`, part of a stream's identity: changed data makes a new stream,
never a trusted old one.
Parsed files are cached per process: several runs in one process read the 2.7 MB JSON once.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envs.memoryagentbench.download import HF_DATASET, DownloadError, fetch_split_rows
from envs.memoryagentbench.metric import normalize_answer

DATA_DIR_ENV = "TEPA_DATA_DIR"
HF_SPLIT = "Conflict_Resolution"
CONFLICT_FILE = Path("memoryagentbench") / "Conflict_Resolution.json"
TEMPLATE_DIR = Path("mquake")
# The 64k rows are upstream but not in every local copy; a missing row raises a clear error.
SOURCES = tuple(
    f"factconsolidation_{hops}_{size}" for hops in ("sh", "mh") for size in ("6k", "32k", "64k", "262k")
)
MQUAKE_COMMIT = "a4f38bbb1f117db6f92d5b3cecae5e625a27734c"
MQUAKE_URL = f"https://raw.githubusercontent.com/princeton-nlp/MQuAKE/{MQUAKE_COMMIT}/prompts/templates/"
TEMPLATE_SHA256 = {
    "cloze_templates.json": "2b06da99237d67e40844e727efb24795d8990d99a00868d95c4276ff7e1c7d84",
    "question_templates.json": "d3a5421ce3cbd6d51e77e3b854d7fd13b98f161c0d54daa597456d804a170d96",
}
_HOW_TO_GET_DATA = (
    f"Either set {DATA_DIR_ENV} (or the config key `env.data_dir`) to a folder containing "
    f"{CONFLICT_FILE.as_posix()} and {TEMPLATE_DIR.as_posix()}/{{cloze,question}}_templates.json, "
    f"or run on a machine that is online so that {HF_DATASET} (split {HF_SPLIT}, from the Hugging Face "
    f"Hub or the mirror in HF_ENDPOINT) and the MQuAKE templates can be downloaded."
)


class DataNotFoundError(FileNotFoundError, ValueError):
    """The benchmark data is neither at a configured path nor downloadable. (A ValueError too, so that
    the runner reports it as one line naming `env`, like any bad value.)"""


class DataError(ValueError):
    """A data file that cannot be used as it is: one line naming the file and what is wrong."""


@dataclass(frozen=True, slots=True)
class FactConsolidationRecord:
    """One row of the Conflict_Resolution split: a numbered fact list and its 100 questions."""

    source: str
    context: str
    questions: tuple[str, ...]
    answers: tuple[tuple[str, ...], ...]
    qa_pair_ids: tuple[str, ...]
    sha256: str = ""  # of the row as read (canonical JSON): part of a stream's identity
    where: str = field(default="", compare=False)  # file and row it was read from, for error messages


def row_sha256(row: Any) -> str:
    """The sha256 of a row's canonical JSON (sorted keys, no spaces): the same for the local file and
    the Hub's copy of the same row."""
    text = json.dumps(row, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class MQuAKETemplates:
    """MQuAKE's sentence patterns by relation id: cloze ("[X] is married to __") and question."""

    cloze: dict[str, str]
    question: dict[str, str]
    sha256: dict[str, str] = field(default_factory=dict, compare=False)  # file name -> sha256 of its bytes


def load_conflict_resolution(
    source: str, data_dir: str | os.PathLike | None = None
) -> FactConsolidationRecord:
    """The row of `source` (one of `SOURCES`), from `data_dir`, `TEPA_DATA_DIR` or the Hub."""
    if source not in SOURCES:
        raise ValueError(f"source: {source!r} is not one of {', '.join(SOURCES)}")
    folder = local_data_dir(data_dir)
    rows = _read_local_rows(str(folder / CONFLICT_FILE)) if folder else _download_rows()
    if source not in rows:
        where = folder / CONFLICT_FILE if folder else f"{HF_DATASET} ({HF_SPLIT})"
        raise ValueError(f"source: {source!r} is not in {where}; it has {', '.join(sorted(rows))}")
    return rows[source]


def load_mquake_templates(data_dir: str | os.PathLike | None = None) -> MQuAKETemplates:
    """The MQuAKE cloze and question templates, from the same place as the benchmark data."""
    folder = local_data_dir(data_dir)
    if folder:
        return _read_local_templates(str(folder / TEMPLATE_DIR))
    return _download_templates()


def local_data_dir(data_dir: str | os.PathLike | None = None) -> Path | None:
    """The configured data folder (`data_dir`, else `TEPA_DATA_DIR`), checked to hold the benchmark
    file; None when neither is set (the loaders then go online)."""
    configured, origin = (data_dir, "data_dir") if data_dir else (os.environ.get(DATA_DIR_ENV), DATA_DIR_ENV)
    if not configured:
        return None
    folder = Path(configured).expanduser()
    if not (folder / CONFLICT_FILE).is_file():
        raise DataNotFoundError(
            f"{origin}={str(folder)!r} has no {CONFLICT_FILE.as_posix()}. {_HOW_TO_GET_DATA}"
        )
    return folder.resolve()


def _record(row: Any, where: str) -> FactConsolidationRecord:
    """A checked row: a non-empty context, questions and answers as lists of equal length (each answer
    a list of strings, none blank once normalised: "" is in every reply), a source name; `where` names
    the row in error messages."""
    meta = row.get("metadata") if isinstance(row, dict) else None
    if not isinstance(meta, dict) or not isinstance(meta.get("source"), str) or not meta["source"]:
        raise DataError(f"{where}: no metadata.source (the row's source name)")
    where = f"{where} ({meta['source']})"
    context, questions, answers = row.get("context"), row.get("questions"), row.get("answers")
    if not isinstance(context, str) or not context.strip():
        raise DataError(f"{where}: context is empty or not text")
    if not isinstance(questions, list) or not all(isinstance(q, str) and q for q in questions):
        raise DataError(f"{where}: questions must be a list of non-empty strings")
    if not isinstance(answers, list) or not all(
        isinstance(a, list) and all(isinstance(g, str) for g in a) for a in answers
    ):
        raise DataError(f"{where}: answers must be a list of lists of strings")
    if len(questions) != len(answers):
        raise DataError(f"{where}: {len(questions)} questions but {len(answers)} answers")
    blank = next(
        (i for i, golds in enumerate(answers) if not golds or not all(map(normalize_answer, golds))), None
    )
    if blank is not None:
        raise DataError(
            f"{where}: the answers of question {blank} are missing or blank after normalisation "
            f"({answers[blank]!r}); a blank gold answer would match every reply"
        )
    return FactConsolidationRecord(
        source=meta["source"],
        context=context,
        questions=tuple(questions),
        answers=tuple(tuple(golds) for golds in answers),
        qa_pair_ids=tuple(meta.get("qa_pair_ids") or ()),
        sha256=row_sha256(row),
        where=where,
    )


def _read_json(path: Path, data: bytes) -> Any:
    """`data` (the bytes of `path`) as JSON, or a DataError naming the file and the problem."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text (byte {e.start}: {e.reason})") from None
    try:
        return json.loads(text)
    except ValueError as e:
        raise DataError(f"{path}: not valid JSON ({e})") from None


@functools.cache
def _read_local_rows(path: str) -> dict[str, FactConsolidationRecord]:
    rows = _read_json(Path(path), Path(path).read_bytes())
    if not isinstance(rows, list) or not rows:
        raise DataError(f"{path}: expected a non-empty JSON list of rows")
    return {r.source: r for r in (_record(row, f"{path}: row {i}") for i, row in enumerate(rows))}


@functools.cache
def _read_local_templates(folder: str) -> MQuAKETemplates:
    payloads = {}
    for name in TEMPLATE_SHA256:
        path = Path(folder) / name
        if not path.is_file():
            raise DataNotFoundError(f"{str(path)!r} is missing. {_HOW_TO_GET_DATA}")
        payloads[name] = path.read_bytes()
    return _templates(payloads, Path(folder))


def _templates(payloads: dict[str, bytes], folder: Path | str) -> MQuAKETemplates:
    """Checked templates: each file a non-empty JSON object of relation id -> non-empty pattern."""
    parsed = {}
    for name, data in payloads.items():
        path = Path(folder) / name
        table = _read_json(path, data)
        if not isinstance(table, dict) or not table:
            raise DataError(f"{path}: expected a non-empty JSON object of relation id -> template")
        bad = next((k for k, v in table.items() if not isinstance(v, str) or not v.strip()), None)
        if bad is not None:
            raise DataError(f"{path}: the template of {bad!r} is not a non-empty string")
        parsed[name] = table
    missing = sorted(set(parsed["cloze_templates.json"]) - set(parsed["question_templates.json"]))
    if missing:
        raise DataError(
            f"{Path(folder) / 'question_templates.json'}: no question for the relation(s) "
            f"{', '.join(missing)} of cloze_templates.json (a multi-hop question asks each hop's relation)"
        )
    return MQuAKETemplates(
        cloze=parsed["cloze_templates.json"],
        question=parsed["question_templates.json"],
        sha256={name: hashlib.sha256(data).hexdigest() for name, data in payloads.items()},
    )


@functools.cache
def _download_rows() -> dict[str, FactConsolidationRecord]:
    try:
        split = fetch_split_rows()
    except DownloadError as e:  # offline, hub outage, a damaged copy: all mean "no data here"
        raise DataNotFoundError(f"No local data and {e}. {_HOW_TO_GET_DATA}") from None
    records = (_record(dict(row), f"{HF_DATASET} ({HF_SPLIT}) row {i}") for i, row in enumerate(split))
    return {r.source: r for r in records if r.source.startswith("factconsolidation_")}


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "tepa-harness" / "mquake" / MQUAKE_COMMIT


@functools.cache
def _download_templates() -> MQuAKETemplates:
    folder = _cache_dir()
    payloads = {}
    for name, sha256 in TEMPLATE_SHA256.items():
        path = folder / name
        if path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == sha256:
            payloads[name] = path.read_bytes()
            continue
        try:
            with urllib.request.urlopen(MQUAKE_URL + name, timeout=30) as response:
                payload = response.read()
        except (urllib.error.URLError, TimeoutError) as e:
            raise DataNotFoundError(
                f"Could not download the MQuAKE template {name} ({e}). {_HOW_TO_GET_DATA}"
            ) from e
        if hashlib.sha256(payload).hexdigest() != sha256:
            raise DataNotFoundError(f"{MQUAKE_URL + name} does not have the expected sha256 {sha256}")
        folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(payload)
        tmp.replace(path)
        payloads[name] = payload
    return _templates(payloads, folder)


def main() -> int:
    """`python -m envs.memoryagentbench.data`: locate (or download) the data once and say whether it is
    usable, so that     `make reproduce` can skip MemoryAgentBench with the reason instead of failing."""
    try:
        load_conflict_resolution(SOURCES[0])
        load_mquake_templates()
    except DataNotFoundError as err:
        print(f"MemoryAgentBench data unavailable: {err}", file=sys.stderr)
        return 1
    where = local_data_dir()
    print(f"MemoryAgentBench data: {where if where else 'downloaded from the Hugging Face Hub'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

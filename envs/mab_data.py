"""Loading MemoryAgentBench FactConsolidation (the Conflict_Resolution split) and the MQuAKE templates.

The data is never part of the project. Where it comes from, in order:

1. an explicit `data_dir` (the config key `env.data_dir`), else
2. the environment variable `TEPA_DATA_DIR`;
   either folder holds `memoryagentbench/Conflict_Resolution.json` and
   `mquake/{cloze,question}_templates.json`;
3. otherwise, online: the split `Conflict_Resolution` of `ai-hyz/MemoryAgentBench` is downloaded from
   the Hugging Face Hub as one parquet file (`envs.mab_download`, no extra library), and the two MQuAKE
   template files (about 2 kB each; they are not on the Hugging Face Hub) are fetched over HTTPS from
   `princeton-nlp/MQuAKE` at a pinned commit, checked against their sha256; both are kept in the user's
   cache folder.

Without any of these the loader raises `DataNotFoundError`, whose message names both ways. Parsed files
are cached per process: several runs in one process read the 2.7 MB JSON once.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envs.mab_download import HF_DATASET, DownloadError, fetch_split_rows

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


class DataNotFoundError(FileNotFoundError):
    """The benchmark data is neither at a configured path nor downloadable."""


@dataclass(frozen=True, slots=True)
class FactConsolidationRecord:
    """One row of the Conflict_Resolution split: a numbered fact list and its 100 questions."""

    source: str
    context: str
    questions: tuple[str, ...]
    answers: tuple[tuple[str, ...], ...]
    qa_pair_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class MQuAKETemplates:
    """MQuAKE's sentence patterns by relation id: cloze ("[X] is married to __") and question."""

    cloze: dict[str, str]
    question: dict[str, str]


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


def _record(row: dict[str, Any]) -> FactConsolidationRecord:
    meta = row["metadata"]
    return FactConsolidationRecord(
        source=meta["source"],
        context=row["context"],
        questions=tuple(row["questions"]),
        answers=tuple(tuple(golds) for golds in row["answers"]),
        qa_pair_ids=tuple(meta.get("qa_pair_ids") or ()),
    )


@functools.cache
def _read_local_rows(path: str) -> dict[str, FactConsolidationRecord]:
    with open(path, encoding="utf-8") as f:
        return {r.source: r for r in map(_record, json.load(f))}


@functools.cache
def _read_local_templates(folder: str) -> MQuAKETemplates:
    texts = {}
    for name in TEMPLATE_SHA256:
        path = Path(folder) / name
        if not path.is_file():
            raise DataNotFoundError(f"{str(path)!r} is missing. {_HOW_TO_GET_DATA}")
        texts[name] = path.read_text(encoding="utf-8")
    return _templates(texts)


def _templates(texts: dict[str, str]) -> MQuAKETemplates:
    return MQuAKETemplates(
        cloze=json.loads(texts["cloze_templates.json"]), question=json.loads(texts["question_templates.json"])
    )


@functools.cache
def _download_rows() -> dict[str, FactConsolidationRecord]:
    try:
        split = fetch_split_rows()
    except DownloadError as e:  # offline, hub outage, a damaged copy: all mean "no data here"
        raise DataNotFoundError(f"No local data and {e}. {_HOW_TO_GET_DATA}") from None
    return {r.source: r for r in map(_record, split) if r.source.startswith("factconsolidation_")}


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "tepa-harness" / "mquake" / MQUAKE_COMMIT


@functools.cache
def _download_templates() -> MQuAKETemplates:
    folder = _cache_dir()
    texts = {}
    for name, sha256 in TEMPLATE_SHA256.items():
        path = folder / name
        if path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == sha256:
            texts[name] = path.read_text(encoding="utf-8")
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
        texts[name] = payload.decode("utf-8")
    return _templates(texts)


def main() -> int:
    """`python -m envs.mab_data`: locate (or download) the data once and say whether it is usable, so that
    `make reproduce` can skip MemoryAgentBench with the reason instead of failing."""
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

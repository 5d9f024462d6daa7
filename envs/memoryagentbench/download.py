"""Download the Conflict_Resolution split of MemoryAgentBench from the Hugging Face Hub, without `datasets`.

The split is one parquet file in the dataset repository (`data/Conflict_Resolution-00000-of-00001.parquet`,
about 1 MB). It is fetched over HTTPS from the Hub's resolve URL, as `huggingface_hub` forms it:
`{HF_ENDPOINT}/datasets/{repo}/resolve/{revision}/{path}` (`HF_ENDPOINT` defaults to
https://huggingface.co; set it for a mirror), read with pyarrow (already a dependency) and kept in the
user's cache folder, so a later run reads the copy without the network. The revision is `HF_REVISION`,
or the environment variable `TEPA_MAB_REVISION` (a branch, tag or commit) to pin another one.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

HF_DATASET = "ai-hyz/MemoryAgentBench"
SPLIT_FILE = "data/Conflict_Resolution-00000-of-00001.parquet"
HF_REVISION = "main"
REVISION_ENV = "TEPA_MAB_REVISION"
ENDPOINT_ENV = "HF_ENDPOINT"
DEFAULT_ENDPOINT = "https://huggingface.co"
TIMEOUT_SECONDS = 60


class DownloadError(OSError):
    """The split could not be downloaded or read (offline, not found, not a parquet file)."""


def revision() -> str:
    """The dataset revision to download: `TEPA_MAB_REVISION`, else `HF_REVISION`."""
    return os.environ.get(REVISION_ENV) or HF_REVISION


def split_url(rev: str | None = None) -> str:
    """The Hub's resolve URL of the split file at `rev` (default `revision()`), honouring HF_ENDPOINT."""
    endpoint = (os.environ.get(ENDPOINT_ENV) or DEFAULT_ENDPOINT).rstrip("/")
    quoted = urllib.parse.quote(rev or revision(), safe="")
    return f"{endpoint}/datasets/{HF_DATASET}/resolve/{quoted}/{SPLIT_FILE}"


def cache_path(rev: str | None = None) -> Path:
    """Where the downloaded split is kept: the user's cache folder, one file per revision."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    safe = urllib.parse.quote(rev or revision(), safe="")
    return Path(base) / "tepa-harness" / "memoryagentbench" / safe / Path(SPLIT_FILE).name


def fetch_split_rows() -> list[dict[str, Any]]:
    """The split's rows (context, questions, answers, metadata) from the cache, else from the Hub."""
    rev = revision()
    path = cache_path(rev)
    if not path.is_file():
        _download(split_url(rev), path)
    try:
        return pq.read_table(path).to_pylist()
    except (pa.ArrowException, OSError) as exc:
        path.unlink(missing_ok=True)  # a damaged copy is fetched again next time
        raise DownloadError(f"{path} is not a readable parquet file ({exc})") from None


def _download(url: str, path: Path) -> None:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_SECONDS) as response:
            payload = response.read()
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise DownloadError(f"could not download {url} ({exc})") from None
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(payload)
    tmp.replace(path)

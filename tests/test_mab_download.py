"""The MemoryAgentBench split is downloaded from a Hub endpoint: here a file server on loopback that serves
the same split, built from the local copy (tests never go to the internet)."""

from __future__ import annotations

import http.server
import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from envs.memoryagentbench import data as mab_data
from envs.memoryagentbench import download as mab_download
from envs.memoryagentbench.data import DATA_DIR_ENV, DataNotFoundError, load_conflict_resolution
from tests.helpers.shared_data import require_data

ROOT = Path(__file__).resolve().parents[1]
RESOLVE = f"/datasets/{mab_download.HF_DATASET}/resolve"


class Hub(http.server.BaseHTTPRequestHandler):
    """Answers a resolve URL as the Hub does, with a redirect to the file's storage; logs every path."""

    files: dict[str, bytes] = {}
    requests: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (the http.server name)
        self.requests.append(self.path)
        if self.path.startswith(RESOLVE):
            self.send_response(302)
            self.send_header("Location", "/storage" + self.path[len(RESOLVE) :])
            self.end_headers()
            return
        body = self.files.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hub(monkeypatch, tmp_path):
    """A Hub on 127.0.0.1 serving the split (at every revision), no local data, an empty user cache with
    the MQuAKE templates already verified in it (they come from GitHub, not from the Hub)."""
    rows = json.loads((require_data() / mab_data.CONFLICT_FILE).read_text(encoding="utf-8"))
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(rows), sink)
    parquet = sink.getvalue().to_pybytes()
    Hub.files = {f"/storage/{rev}/{mab_download.SPLIT_FILE}": parquet for rev in ("main", "v1.0")}
    Hub.requests = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    cache = tmp_path / "cache"
    templates = cache / "tepa-harness" / "mquake" / mab_data.MQUAKE_COMMIT
    templates.mkdir(parents=True)
    for name in mab_data.TEMPLATE_SHA256:
        shutil.copy(require_data() / "mquake" / name, templates / name)
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    monkeypatch.delenv(mab_download.REVISION_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.setenv(mab_download.ENDPOINT_ENV, f"http://127.0.0.1:{server.server_port}")
    mab_data._download_rows.cache_clear()
    mab_data._download_templates.cache_clear()
    yield server
    server.shutdown()
    server.server_close()
    mab_data._download_rows.cache_clear()
    mab_data._download_templates.cache_clear()


def test_the_split_downloads_from_the_endpoint_once_and_is_read_from_the_cache(hub):
    record = load_conflict_resolution("factconsolidation_mh_32k")
    assert record == load_conflict_resolution("factconsolidation_mh_32k", require_data())
    assert Hub.requests == [
        f"{RESOLVE}/main/{mab_download.SPLIT_FILE}",
        f"/storage/main/{mab_download.SPLIT_FILE}",
    ]
    hub.shutdown()  # a new process reads the cached copy without the network
    mab_data._download_rows.cache_clear()
    assert load_conflict_resolution("factconsolidation_sh_6k") == load_conflict_resolution(
        "factconsolidation_sh_6k", require_data()
    )
    assert len(Hub.requests) == 2


def test_a_pinned_revision_is_what_is_downloaded(hub, monkeypatch):
    monkeypatch.setenv(mab_download.REVISION_ENV, "v1.0")
    assert load_conflict_resolution("factconsolidation_sh_6k").source == "factconsolidation_sh_6k"
    assert Hub.requests[0] == f"{RESOLVE}/v1.0/{mab_download.SPLIT_FILE}"
    assert mab_download.cache_path().parent.name == "v1.0"


def test_a_damaged_download_is_refused_and_not_kept(hub):
    Hub.files = {path: b"not parquet" for path in Hub.files}
    with pytest.raises(DataNotFoundError, match="not a readable parquet file"):
        load_conflict_resolution("factconsolidation_sh_6k")
    assert not mab_download.cache_path().exists()


def test_one_command_checks_the_data_online_and_offline(hub):
    check = [sys.executable, "-m", "envs.memoryagentbench.data"]
    online = subprocess.run(check, capture_output=True, text=True, cwd=ROOT)
    assert online.returncode == 0, online.stderr
    assert "downloaded from the Hugging Face Hub" in online.stdout
    hub.shutdown()
    hub.server_close()
    mab_download.cache_path().unlink()
    offline = subprocess.run(check, capture_output=True, text=True, cwd=ROOT)
    assert offline.returncode == 1 and offline.stderr.count("\n") == 1
    assert offline.stderr.startswith(
        "MemoryAgentBench data unavailable: No local data and could not download"
    )

"""A sentinel API key must reach no file under the results folder or the response cache, by any of the
paths it once took: the command line (which Hydra copies into .hydra/*.yaml), credentials in
`llm.base_url`, the key passed as `llm.api_key_env`, a config file, and an endpoint that echoes the
Authorization header into its replies and error messages."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hostile import SENTINEL, TINY, cli, files_containing, one_line_error, run
from llm_fixtures import completion


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ((f"+llm.api_key={SENTINEL}",), "llm.api_key: never put a secret in a config"),
        (("llm=openai", "llm.model=m", f"llm.base_url=http://u:{SENTINEL}@127.0.0.1:9/v1"), "llm.base_url"),
        (("llm=openai", "llm.model=m", f"llm.api_key_env={SENTINEL}"), "llm.api_key_env: must name"),
        ((f"+env.token={SENTINEL}",), "env.token: never put a secret"),
    ],
)
def test_a_key_on_the_command_line_is_refused_before_hydra_writes_anything(tmp_path, overrides, key):
    results = tmp_path / "results"
    proc = cli(tmp_path, *overrides, f"results_dir={results}", *TINY)
    error = one_line_error(proc)
    assert key in error and SENTINEL not in proc.stderr + proc.stdout
    assert files_containing(tmp_path, SENTINEL) == []
    assert not (results / "hydra").exists()


def test_a_key_in_a_config_file_is_refused_before_hydra_copies_it(tmp_path):
    (tmp_path / "conf" / "llm").mkdir(parents=True)
    (tmp_path / "conf" / "llm" / "mine.yaml").write_text(
        f"defaults:\n  - openai\n  - _self_\nmodel: m\nbase_url: https://x:{SENTINEL}@api.example/v1\n"
    )
    results = tmp_path / "results"
    proc = cli(tmp_path, "--config-dir", "conf", "llm=mine", f"results_dir={results}", *TINY)
    assert "base_url: the value looks like a credential" in one_line_error(proc)
    assert not results.exists() or files_containing(results, SENTINEL) == []


class EchoServer:
    """A loopback chat endpoint that puts the request's Authorization header into what it sends back:
    the first request gets an HTTP 400 whose message quotes it, every later one a completion whose text
    does."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                auth = self.headers.get("Authorization", "")
                server.seen.append(auth)
                if len(server.seen) == 1:
                    status, body = 400, {"error": {"message": f"bad request from {auth}"}}
                else:
                    status, body = 200, completion(f"Answer: A. You sent {auth}")
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


@pytest.fixture
def echo_server() -> Iterator[EchoServer]:
    server = EchoServer()
    server.thread.start()
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


def test_an_endpoint_echoing_the_key_leaves_it_in_no_log_and_no_cache(tmp_path, echo_server, monkeypatch):
    monkeypatch.setenv("TEPA_TEST_KEY", SENTINEL)
    results = tmp_path / "results"
    run(
        results, "llm=openai", "llm.model=m", f"llm.base_url={echo_server.base_url}",
        "llm.api_key_env=TEPA_TEST_KEY", "llm.backoff_base=0", "llm.backoff_max=0",
    )  # fmt: skip
    assert len(echo_server.seen) >= 2 and all(SENTINEL in auth for auth in echo_server.seen)  # echoed back
    written = sorted(p.name for p in results.rglob("*") if p.is_file())
    assert "episodes.parquet" in written and "llm_cache.sqlite" in written and "meta.json" in written
    assert files_containing(results, SENTINEL) == []
    assert files_containing(results, "[redacted]")  # the scrubbed replies and error are there

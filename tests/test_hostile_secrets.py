"""A sentinel API key must reach no file under the results folder or the response cache, by any of the
paths it once took: the command line (which Hydra copies into .hydra/*.yaml), credentials in
`llm.base_url` (also in its query string), the key passed as `llm.api_key_env`, a config file, an
endpoint that echoes the Authorization header into its replies and error messages, and a loglik
endpoint without /completions that echoes it into the one-line error. And the scrubber once redacted
any `sk-` with four more characters: options named `task-force` became `task-[redacted]`, so no reply
parsed, and the mangled text was cached."""

from __future__ import annotations

import sqlite3

import pyarrow.parquet as pq
import pytest

from tepa.redact import scrub
from tests.helpers.hostile import SENTINEL, TINY, files_containing, one_line_error, run
from tests.helpers.runner import cli
from tests.helpers.stub_server import StubReply, completion


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ((f"+llm.api_key={SENTINEL}",), "llm.api_key: never put a secret in a config"),
        (("llm=openai", "llm.model=m", f"llm.base_url=http://u:{SENTINEL}@127.0.0.1:9/v1"), "llm.base_url"),
        (
            ("llm=openai", "llm.model=m", "llm.base_url=https://h.example/v1?api_key=SENTINEL9"),
            "llm.base_url",
        ),
        (("llm=openai", "llm.model=m", f"llm.api_key_env={SENTINEL}"), "llm.api_key_env: must name"),
        ((f"+env.token={SENTINEL}",), "env.token: never put a secret"),
    ],
)
def test_a_key_on_the_command_line_is_refused_before_hydra_writes_anything(tmp_path, overrides, key):
    results = tmp_path / "results"
    proc = cli(tmp_path, *overrides, f"results_dir={results}", *TINY)
    error = one_line_error(proc)
    assert key in error and "SENTINEL" not in proc.stderr + proc.stdout
    assert files_containing(tmp_path, "SENTINEL") == []
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


def test_an_endpoint_echoing_the_key_leaves_it_in_no_log_and_no_cache(tmp_path, stub_server, monkeypatch):
    def echo(body: dict) -> StubReply:
        """The request's Authorization header in what goes back: first in an HTTP 400's message, then
        in every completion's text."""
        auth = stub_server.headers[-1].get("authorization", "")
        if len(stub_server.requests) == 1:
            return StubReply(status=400, body={"error": {"message": f"bad request from {auth}"}})
        return StubReply(body=completion(f"Answer: A. You sent {auth}"))

    stub_server.respond = echo
    monkeypatch.setenv("TEPA_TEST_KEY", SENTINEL)
    results = tmp_path / "results"
    run(
        results, "llm=openai", "llm.model=m", f"llm.base_url={stub_server.base_url}",
        "llm.api_key_env=TEPA_TEST_KEY", "llm.backoff_base=0", "llm.backoff_max=0",
    )  # fmt: skip
    seen = [headers.get("authorization", "") for headers in stub_server.headers]
    assert len(seen) >= 2 and all(SENTINEL in auth for auth in seen)  # echoed back
    written = sorted(p.name for p in results.rglob("*") if p.is_file())
    assert "episodes.parquet" in written and "llm_cache.sqlite" in written and "meta.json" in written
    assert files_containing(results, SENTINEL) == []
    assert files_containing(results, "[redacted]")  # the scrubbed replies and error are there


def test_a_loglik_endpoint_without_completions_echoing_the_key_leaves_it_out_of_the_error(
    tmp_path, stub_server
):
    def refuse(body: dict) -> StubReply:
        auth = stub_server.headers[-1].get("authorization", "")
        return StubReply(status=404, body={"error": {"message": f"no such route; you sent {auth}"}})

    stub_server.respond = refuse
    results = tmp_path / "results"
    proc = cli(
        tmp_path, "llm=openai", "llm.model=m", f"llm.base_url={stub_server.base_url}", "llm.scoring=loglik",
        "llm.api_key_env=TEPA_TEST_KEY", f"results_dir={results}", *TINY, env={"TEPA_TEST_KEY": SENTINEL},
    )  # fmt: skip
    error = one_line_error(proc)
    assert "has no /completions endpoint" in error and "[redacted]" in error
    assert SENTINEL in stub_server.headers[0]["authorization"]  # it was sent, and echoed
    assert SENTINEL not in proc.stderr + proc.stdout and files_containing(tmp_path, SENTINEL) == []


def test_replies_naming_options_that_contain_sk_parse_and_are_cached_unchanged(tmp_path, stub_server):
    stub_server.default = StubReply(body=completion("Answer: task-force"))
    results = tmp_path / "results"
    run(
        results, "llm=openai", "llm.model=m", f"llm.base_url={stub_server.base_url}",
        "+env.actions=[task-force,desk-lamp,risk-score]",
    )  # fmt: skip
    (episodes,) = results.rglob("episodes.parquet")
    table = pq.read_table(episodes).to_pydict()
    assert table["reply"] and set(table["reply"]) == {"Answer: task-force"}
    assert set(table["action"]) == {"task-force"}
    with sqlite3.connect(results / "llm_cache.sqlite") as conn:
        assert {text for (text,) in conn.execute("SELECT text FROM replies")} == {"Answer: task-force"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Answer: task-force, desk-lamp or risk-score", "Answer: task-force, desk-lamp or risk-score"),
        ("use sk-learn-estimators-pipeline here", "use sk-learn-estimators-pipeline here"),
        (f"Bearer {SENTINEL}.", "Bearer [redacted]."),
        ("key=sk-proj-Ab3dEf6hIj9kLm2nOp5q", "key=[redacted]"),
        ("hf_abcdefghijklmnopqrstuvwxyz12 and ghp_abcdefghijklmnopqrstuvwxyz", "[redacted] and [redacted]"),
        ("local key my-vllm-key-7, not my-vllm-key-7x", "local key [redacted], not my-vllm-key-7x"),
    ],
)
def test_the_scrubber_redacts_the_key_and_key_shaped_tokens_and_no_ordinary_word(text, expected):
    assert scrub(text, "my-vllm-key-7") == expected


def test_a_reply_that_had_to_be_redacted_is_logged_redacted_but_never_cached(
    tmp_path, stub_server, monkeypatch
):
    stub_server.default = StubReply(body=completion(f"Answer: A (key {SENTINEL})"))
    monkeypatch.setenv("TEPA_TEST_KEY", SENTINEL)
    results = tmp_path / "results"
    run(
        results, "llm=openai", "llm.model=m", f"llm.base_url={stub_server.base_url}",
        "llm.api_key_env=TEPA_TEST_KEY",
    )  # fmt: skip
    (episodes,) = results.rglob("episodes.parquet")
    assert set(pq.read_table(episodes).column("reply").to_pylist()) == {"Answer: A (key [redacted])"}
    with sqlite3.connect(results / "llm_cache.sqlite") as conn:
        assert conn.execute("SELECT COUNT(*) FROM replies").fetchone() == (0,)

"""mem0's own LLM endpoint (memory=mem0 memory.infer=true) is as untrusted as llm=openai's: a key it
echoes once reached Hydra's run.log through mem0's own logger, and stderr through the run's stop line;
and a silent endpoint held a run for minutes (the client's defaults allow ~30 per add)."""

from __future__ import annotations

import io
import json
import logging
import time

import pytest

from baselines.mem0_memory import Mem0Error, Mem0Memory
from runners.compose import compose_config
from runners.config import validate
from runners.run import CONF_DIR
from runners.store.identity import stream_identity, variant_of
from tepa.body_limit import MAX_BODY_BYTES
from tepa.evidence import Observation, Query
from tepa.redact import REDACTED, SCRUBBING_FILTER, register
from tests.helpers.hostile import SENTINEL, TINY, files_containing, one_line_error
from tests.helpers.runner import cli
from tests.helpers.stub_server import StubReply, completion

PLAIN_KEY = "local-vllm-key-TEPA42"  # a key without a provider's shape: redacted because it was read


def _refuse_echoing(stub_server):
    def refuse(body: dict) -> StubReply:
        auth = stub_server.headers[-1].get("authorization", "")
        return StubReply(status=401, body={"error": {"message": f"invalid key {auth}"}})

    return refuse


@pytest.mark.parametrize("key", [SENTINEL, PLAIN_KEY])
def test_a_key_echoed_by_mem0s_llm_endpoint_reaches_neither_the_run_log_nor_stderr(
    tmp_path, stub_server, key
):
    stub_server.respond = _refuse_echoing(stub_server)
    results = tmp_path / "results"
    proc = cli(
        tmp_path, "memory=mem0", "memory.infer=true", f"memory.llm_base_url={stub_server.base_url}",
        "memory.llm_model=m", "memory.llm_api_key_env=TEPA_TEST_KEY", f"results_dir={results}", *TINY,
        env={"TEPA_TEST_KEY": key},
    )  # fmt: skip
    assert key in stub_server.headers[0]["authorization"]  # it was sent, and echoed
    error = one_line_error(proc)
    assert "mem0's add failed at step t=0: LLMError" in error and REDACTED in error
    assert key not in proc.stderr + proc.stdout
    assert files_containing(tmp_path, key) == []
    (log,) = results.glob("hydra/**/*.log")
    assert "LLM extraction failed" in log.read_text() and REDACTED in log.read_text()  # mem0's own record


def test_the_log_filter_redacts_a_registered_key_from_a_libraries_record_and_its_traceback():
    register(PLAIN_KEY)
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(SCRUBBING_FILTER)
    logger = logging.getLogger("mem0.memory.main.test_hostile_mem0")
    logger.addHandler(handler)
    try:
        try:
            raise RuntimeError(f"invalid key Bearer {PLAIN_KEY}")
        except RuntimeError:
            logger.exception("LLM extraction failed: %s and %s", PLAIN_KEY, SENTINEL)
    finally:
        logger.removeHandler(handler)
    text = out.getvalue()
    assert (
        "LLM extraction failed: [redacted] and [redacted]" in text and "invalid key Bearer [redacted]" in text
    )
    assert PLAIN_KEY not in text and SENTINEL not in text


def test_a_memory_that_mem0s_llm_wrote_with_the_key_is_handed_back_redacted(stub_server, monkeypatch):
    monkeypatch.setenv("TEPA_TEST_KEY", PLAIN_KEY)
    stub_server.respond = lambda body: completion(json.dumps({"memory": [{"text": f"key is {PLAIN_KEY}"}]}))
    memory = Mem0Memory(
        infer=True, llm_base_url=stub_server.base_url, llm_model="m", llm_api_key_env="TEPA_TEST_KEY"
    )
    memory.observe(Observation(1, "a", True, 0, "a fact"))
    (found,) = memory.retrieve(Query(key=1, t=1))
    assert found.text == "key is [redacted]"


def test_a_silent_mem0_llm_endpoint_stops_the_stream_within_its_timeout_and_retries(stub_server):
    stub_server.push(StubReply(delay=30), StubReply(delay=30), StubReply(delay=30))
    memory = Mem0Memory(
        infer=True, llm_base_url=stub_server.base_url, llm_model="m", llm_timeout=0.5, llm_max_retries=1
    )
    start = time.monotonic()
    with pytest.raises(
        Mem0Error,
        match=r"^memory=mem0: mem0's add failed at step t=4: LLMError: mem0's LLM endpoint gave no complete "
        r"answer within 0.5 s, 2 attempts \(memory.llm_timeout\); rerun the same command to resume$",
    ):
        memory.observe(Observation(1, "a", True, 4, "a fact"))
    assert time.monotonic() - start < 8 and len(stub_server.requests) == 2


def test_a_mem0_llm_endpoint_trickling_its_answer_is_cut_off_at_the_timeout(stub_server):
    stub_server.push(StubReply(trickle=0.2))  # ~250 bytes, one every 0.2 s: never silent for a whole read
    memory = Mem0Memory(
        infer=True, llm_base_url=stub_server.base_url, llm_model="m", llm_timeout=1, llm_max_retries=0
    )
    start = time.monotonic()
    with pytest.raises(Mem0Error, match=r"no complete answer within 1 s, 1 attempt \("):
        memory.observe(Observation(1, "a", True, 0, "a fact"))
    assert time.monotonic() - start < 6


def test_a_mem0_llm_endpoint_flooding_its_answer_is_read_no_further_than_the_body_limit(stub_server):
    stub_server.default = StubReply(flood=300 << 20)
    memory = Mem0Memory(infer=True, llm_base_url=stub_server.base_url, llm_model="m", llm_max_retries=0)
    with pytest.raises(Mem0Error, match=rf"add failed at step t=0: .*longer than {MAX_BODY_BYTES} bytes"):
        memory.observe(Observation(1, "a", True, 0, "a fact"))
    time.sleep(0.2)  # the server notices the closed connection at its next write
    assert stub_server.flooded < 3 * MAX_BODY_BYTES


@pytest.mark.parametrize(
    ("param", "value", "message"),
    [
        ("llm_timeout", 0, r"llm_timeout=0: must be a number of seconds > 0"),
        ("llm_timeout", float("inf"), r"llm_timeout=inf: must be"),
        ("llm_max_retries", -1, r"llm_max_retries"),
    ],
)
def test_a_bad_mem0_llm_timeout_or_retry_count_is_refused_naming_it(param, value, message):
    with pytest.raises(ValueError, match=message):
        Mem0Memory(**{param: value})


def _mem0_identity(*overrides: str):
    options = ["memory=mem0", "memory.infer=true", "memory.llm_base_url=http://127.0.0.1:9/v1", *overrides]
    cfg = compose_config(options)
    choices = {"env": "controlled_drift", "memory": "mem0", "llm": "simulated"}
    variant = variant_of(cfg, choices, str(CONF_DIR))
    return variant.name, stream_identity(validate(cfg, choices), 0, variant, None)


def test_changing_only_mem0s_llm_timeout_or_retries_keeps_the_stream():
    name, identity = _mem0_identity()
    assert (name, identity) == _mem0_identity("memory.llm_timeout=5", "memory.llm_max_retries=0")
    assert "llm_timeout" not in identity["memory"] and "llm_max_retries" not in identity["memory"]
    assert _mem0_identity("memory.llm_model=other")[1] != identity

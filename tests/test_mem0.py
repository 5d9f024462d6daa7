"""mem0 (mem0ai's open-source Memory) as `memory=mem0`, against the real library: offline with
infer=False, and with infer=True against the loopback stub endpoint as mem0's LLM."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from baselines.mem0_memory import Mem0Error, Mem0Memory
from tepa import check_memory
from tepa.evidence import Observation, Query
from tepa.retrieval.rank import BM25Ranker, similarity_query
from tests.helpers.stub_server import StubReply, completion


def test_mem0_passes_check_memory():
    check_memory(Mem0Memory, seed=0, streams=2)


def test_mem0_retrieves_by_similarity_and_hands_back_the_observations_fields():
    memory = Mem0Memory(top_k=2)
    memory.observe(Observation((3, "seat"), "aisle", True, 0, 'user 3 prefers "aisle" seats', "hint"))
    memory.observe(Observation((5, "meal"), "fish", False, 1, 'recommending "fish" meals to user 5 failed'))
    memory.observe(
        Observation((3, "seat"), "window", True, 2, 'user 3 said this time they wanted "window" seats')
    )
    found = memory.retrieve(
        similarity_query((3, "seat"), "User 5 asks for a meal recommendation.", 3, BM25Ranker())
    )
    (meal,) = [e for e in found if e.key == (5, "meal")]
    assert len(found) == 2 and meal.holds is False and meal.value == "fish" and meal.t == 1
    keyed = memory.retrieve(Query(key=(3, "seat"), text="", t=3))
    assert [(e.value, e.t, e.source) for e in keyed] == [("aisle", 0, "hint"), ("window", 2, "")]
    assert memory.snapshot()["active"] == 3


def test_a_tiny_controlled_drift_run_with_mem0_works_offline(tiny_run):
    results = tiny_run("memory=mem0", "retrieval=dense")
    (episodes,) = results.glob("runs/adhoc/controlled_drift/mem0/*/seed=0/episodes.parquet")
    table = pq.read_table(episodes).to_pydict()
    assert len(table["t"]) == 8 and max(table["n_evidence"]) > 0
    meta = json.loads((episodes.parent / "meta.json").read_text())
    assert meta["identity"]["memory"]["option"] == "mem0" and meta["versions"]["mem0ai"] == "2.2.1"


def _extraction(request: dict) -> dict:
    """mem0's LLM, scripted: the fact it extracts is the observation's text with a prefix."""
    prompt = request["messages"][-1]["content"]
    fact = "remembered: " + ("user 3 likes aisle seats" if "aisle" in prompt else "user 3 likes window seats")
    return completion(json.dumps({"memory": [{"text": fact}]}))


def test_with_infer_mem0s_own_llm_decides_what_it_stores_and_drops_a_fact_it_holds(stub_server):
    stub_server.respond = _extraction
    memory = Mem0Memory(infer=True, llm_base_url=stub_server.base_url, llm_model="stub")
    memory.observe(Observation((3, "seat"), "aisle", True, 0, 'user 3 prefers "aisle" seats'))
    memory.observe(Observation((3, "seat"), "aisle", True, 1, 'user 3 prefers "aisle" seats again'))
    assert stub_server.paths == ["/v1/chat/completions"] * 2
    assert memory.snapshot()["active"] == 1  # the second extraction repeats a stored fact: not stored again
    (found,) = memory.retrieve(Query(key=(3, "seat"), t=2))
    assert found.text == "remembered: user 3 likes aisle seats" and found.value == "aisle" and found.t == 0


def test_a_mem0_failure_names_the_call_and_the_step_in_one_line(stub_server):
    stub_server.respond = lambda request: StubReply(status=400, body={"error": {"message": "bad"}})
    memory = Mem0Memory(infer=True, llm_base_url=stub_server.base_url, llm_model="stub")
    with pytest.raises(Mem0Error, match=r"^memory=mem0: mem0's add failed at step t=7: LLMError: .*rerun"):
        memory.observe(Observation(1, "a", True, 7, "a fact"))


def test_infer_without_an_endpoint_is_refused_naming_the_key(compose):
    with pytest.raises(
        Exception, match=r"memory.llm_base_url: infer=true needs an OpenAI-compatible endpoint"
    ):
        compose("memory=mem0", "memory.infer=true")


def test_a_stream_stopped_by_a_mem0_failure_resumes_on_rerun(stub_server, tiny_run):
    calls = []

    def flaky(request: dict) -> dict | StubReply:
        calls.append(request)
        if len(calls) == 4:
            return StubReply(status=400, body={"error": {"message": "bad"}})
        return _extraction(request)

    stub_server.respond = flaky
    run = (
        "memory=mem0",
        "memory.infer=true",
        f"memory.llm_base_url={stub_server.base_url}",
        "memory.llm_model=s",
    )
    with pytest.raises(Mem0Error, match=r"^memory=mem0: mem0's add failed at step t=3: LLMError"):
        tiny_run(*run)
    stub_server.respond = _extraction
    results = tiny_run(*run)
    (meta,) = results.glob("runs/adhoc/controlled_drift/mem0/*/seed=0/meta.json")
    assert json.loads(meta.read_text())["replayed"] == 3

"""The memoryagentbench environment: stream structure, scoring, trials, unparsed facts."""

import json
import shutil
from types import SimpleNamespace

import pytest

from envs.base import Environment
from envs.memoryagentbench.data import CONFLICT_FILE
from envs.memoryagentbench.env import QUERY_TEMPLATE, MemoryAgentBench, approx_tokens
from tests.helpers.shared_data import require_data


@pytest.fixture(scope="module")
def sh6k() -> MemoryAgentBench:
    return MemoryAgentBench("factconsolidation_sh_6k", data_dir=require_data())


def _split(tasks):
    ingest = [t for t in tasks if t.phase == "ingest"]
    questions = [t for t in tasks if t.phase == "questions"]
    assert tasks == ingest + questions  # all ingestion first
    return ingest, questions


def test_implements_the_environment_protocol(sh6k):
    assert isinstance(sh6k, Environment)
    assert sh6k.name == "memoryagentbench"


def test_ingest_chunks_carry_every_fact_once_in_serial_order(sh6k):
    ingest, _ = _split(list(sh6k.tasks()))
    observations = [obs for task in ingest for obs in task.observe]
    assert [obs.t for obs in observations] == list(range(455))
    for task in ingest:
        assert not task.decide and task.key is None
        assert task.t == task.observe[0].t
        assert task.text == "\n".join(obs.text for obs in task.observe)
        assert sum(approx_tokens(obs.text) for obs in task.observe) <= 512
    assert len(ingest) > 1
    first = observations[0]
    assert (first.key, first.value, first.holds, first.source) == (
        ("Thomas Kyd", "P19"),
        "London",
        True,
        "fact",
    )
    assert first.text == "0. Thomas Kyd was born in the city of London."


def test_chunk_size_is_configurable_and_checked():
    small = MemoryAgentBench("factconsolidation_sh_6k", data_dir=require_data(), chunk_size=64)
    big = MemoryAgentBench("factconsolidation_sh_6k", data_dir=require_data(), chunk_size=100_000)
    n_ingest = [sum(t.phase == "ingest" for t in env.tasks()) for env in (small, big)]
    assert n_ingest[0] > 50 and n_ingest[1] == 1
    for bad in (0, -1, 1.5, True, "512"):
        with pytest.raises(ValueError, match="chunk_size"):
            MemoryAgentBench("factconsolidation_sh_6k", data_dir=require_data(), chunk_size=bad)


def test_then_the_hundred_questions(sh6k):
    _, questions = _split(list(sh6k.tasks()))
    assert len(questions) == 100
    assert [q.t for q in questions] == list(range(455, 555))
    assert sh6k.phase_boundaries == [(455, "questions")]
    first = questions[0]
    assert first.decide and first.options == () and first.observe == ()
    assert first.text == "Which sport is goaltender associated with?"
    assert first.key == ("goaltender", "P641")
    assert first.correct == "pesäpallo" and first.meta["golds"] == ["pesäpallo"]
    instructions = first.instructions
    assert instructions.startswith("Pretend you are a knowledge management system. Each fact in the")
    assert instructions.endswith(
        "what is the name of the current president of Russia? \nAnswer: Donald Trump"
    )
    upstream_query = QUERY_TEMPLATE.format(question=first.text)
    assert upstream_query.startswith(instructions)
    assert upstream_query.endswith(f"Based on the provided Knowledge Pool, {first.text} \nAnswer:")
    assert first.multi_hop is None


def test_execute_scores_with_the_upstream_metric(sh6k):
    _, questions = _split(list(sh6k.tasks()))
    q = questions[0]
    assert sh6k.execute(q, "Pesäpallo.").success
    assert sh6k.execute(q, "Reasoning...\nAnswer: pesäpallo").success
    wrong = sh6k.execute(q, "ice hockey")
    assert not wrong.success and wrong.observations == () and "no gold" in wrong.message
    with pytest.raises(ValueError, match="action"):
        sh6k.execute(q, None)


def test_ingest_steps_take_no_action(sh6k):
    with pytest.raises(ValueError, match="task"):
        sh6k.execute(next(iter(sh6k.tasks())), "anything")


def test_a_last_write_wins_agent_scores_one_on_sh_6k(sh6k):
    newest = {}
    correct = 0
    for task in sh6k.tasks():
        for obs in task.observe:
            newest[obs.key] = obs.value
        if task.decide:
            correct += sh6k.execute(task, newest[task.key]).success
    assert correct == 100


def test_multi_hop_questions_have_no_key_but_a_chain():
    env = MemoryAgentBench("factconsolidation_mh_6k", data_dir=require_data())
    _, questions = _split(list(env.tasks()))
    assert all(q.key is None for q in questions)
    chains = [q.multi_hop for q in questions if q.multi_hop is not None]
    assert len(chains) == env.coverage.questions_parsed >= 85
    first = questions[0].multi_hop
    assert (first.subject, first.relations) == ("Our Mutual Friend", ("P50", "P26", "P27"))
    assert [q.count("[X]") for q in first.questions] == [1, 1, 1]


def _conflicted_key(env):
    """A key with two different values: (key, older value, newer value)."""
    seen = {}
    for task in env.tasks():
        for obs in task.observe:
            if obs.key in seen and seen[obs.key] != obs.value:
                return obs.key, seen[obs.key], obs.value
            seen[obs.key] = obs.value
    raise AssertionError("no conflicted key")


def test_support_trial_passes_only_for_the_newest_fact_shown():
    env = MemoryAgentBench(
        "factconsolidation_sh_6k", data_dir=require_data(), chunk_size=1
    )  # a fact per chunk
    key, old, new = _conflicted_key(env)
    env.reset(0)
    p_old, p_new = SimpleNamespace(key=key, value=old), SimpleNamespace(key=key, value=new)
    assert not env.trial(p_old, "support")  # nothing shown yet
    stream = env.tasks()
    for task in stream:
        if any(obs.key == key for obs in task.observe):
            break
    assert env.trial(p_old, "support") and not env.trial(p_new, "support")
    for task in stream:
        if any(obs.key == key and obs.value == new for obs in task.observe):
            break
    assert env.trial(p_new, "support") and not env.trial(p_old, "support")
    assert not env.trial(SimpleNamespace(key=None, value=new), "support")


def test_counterfactual_and_contamination_trials():
    env = MemoryAgentBench("factconsolidation_sh_6k", data_dir=require_data())
    list(env.tasks())  # everything shown
    tasks = [obs for t in env.tasks() if t.phase == "ingest" for obs in t.observe]
    # A value shared by every other key of its relation cannot pass a counterfactual trial.
    sport_keys = {o.key for o in tasks if o.key[1] == "P641"}
    shared = SimpleNamespace(key=("nobody", "P641"), value="association football")
    results = [env.trial(shared, "counterfactual") for _ in range(50)]
    newest = {}
    for o in tasks:
        newest[o.key] = o.value
    football = sum(newest[k] == "association football" for k in sport_keys) / len(sport_keys)
    assert 0 < football < 1 and True in results and False in results
    unique = SimpleNamespace(key=("nobody", "P641"), value="not a sport anywhere")
    assert all(env.trial(unique, "counterfactual") for _ in range(20))
    assert env.trial(unique, "contamination")
    with pytest.raises(ValueError, match="kind"):
        env.trial(unique, "bogus")


def test_counterfactual_trial_never_draws_the_precedents_own_key():
    env = MemoryAgentBench("factconsolidation_sh_6k", data_dir=require_data(), chunk_size=1)
    next(iter(env.tasks()))  # only fact 0 shown: the only P19 key is the precedent's own
    own = SimpleNamespace(key=("Thomas Kyd", "P19"), value="London")
    assert env.trial(own, "support")
    assert all(env.trial(own, "counterfactual") for _ in range(10))


def test_trials_are_reproducible_per_seed():
    env = MemoryAgentBench("factconsolidation_sh_6k", data_dir=require_data())
    p = SimpleNamespace(key=("nobody", "P641"), value="association football")

    def draws(seed):
        env.reset(seed)
        list(env.tasks())
        return [env.trial(p, "counterfactual") for _ in range(30)]

    assert draws(3) == draws(3)
    assert draws(3) != draws(4)


def test_unparsed_facts_are_ingested_as_text(tmp_path):
    rows = json.loads((require_data() / CONFLICT_FILE).read_text(encoding="utf-8"))
    row = next(r for r in rows if r["metadata"]["source"] == "factconsolidation_sh_6k")
    row["context"] = row["context"].replace(
        "\n3. Hines Ward plays the position of wide receiver.\n", "\n3. ???\n"
    )
    (tmp_path / CONFLICT_FILE).parent.mkdir()
    (tmp_path / CONFLICT_FILE).write_text(json.dumps([row]), encoding="utf-8")
    shutil.copytree(require_data() / "mquake", tmp_path / "mquake")
    env = MemoryAgentBench("factconsolidation_sh_6k", data_dir=tmp_path)
    observations = [obs for task in env.tasks() for obs in task.observe]
    assert len(observations) == 455
    assert (observations[3].key, observations[3].value, observations[3].text) == (None, "???", "3. ???")
    assert (env.coverage.facts_parsed, env.coverage.unparsed_facts) == (454, ("3. ???",))

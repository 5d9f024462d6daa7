"""The truth the built-in environments report (what the world holds now, never a whim), check_env's
contract for it, and `log_prompts`: its default per backend, outside a stream's identity."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from envs import EnvCheckError, TruthEnvironment, check_env
from envs.controlled_drift import ControlledDrift
from envs.executable_drift.env import ExecutableDrift
from envs.memoryagentbench.env import MemoryAgentBench
from envs.preference_stream import PreferenceStream
from runners.compose import compose_config
from runners.config import validate
from runners.run import CONF_DIR
from runners.store.identity import stream_identity, variant_of
from tests.helpers.runner import run_overrides
from tests.helpers.shared_data import require_data
from tests.test_env_protocol import Toy


def decisions(env: Any, seed: int = 0) -> Iterator[tuple[Any, str | None]]:
    env.reset(seed)
    for task in env.tasks():
        if task.decide:
            yield task, env.truth(task.key)


@pytest.mark.parametrize(
    "factory",
    [
        lambda: ControlledDrift(phase_length=20),
        lambda: ExecutableDrift(phase_length=5),
        lambda: ControlledDrift(phase_length=50, reversal_rate=0.05),  # random reversals within phases
        lambda: ExecutableDrift(phase_length=10, reversal_rate=0.05),
    ],
)
def test_the_drift_environments_truth_is_the_current_regimes_action(factory):
    env = factory()
    try:
        assert isinstance(env, TruthEnvironment)
        assert all(truth == task.correct for task, truth in decisions(env))
    finally:
        env.close()


def test_the_preference_streams_truth_is_the_true_preference_even_in_a_glitch_session():
    env = PreferenceStream(stable_length=50, drift_length=300, glitch_rate=0.3)
    pairs = list(decisions(env))
    assert all(truth == task.meta["preference"] for task, truth in pairs)
    glitches = [(task, truth) for task, truth in pairs if task.meta["glitch"]]
    assert glitches and all(truth != task.correct for task, truth in glitches)


def test_memoryagentbenchs_truth_is_the_newest_facts_object_for_the_questions_key():
    env = MemoryAgentBench(source="factconsolidation_sh_6k", data_dir=str(require_data()))
    pairs = [(task, truth) for task, truth in decisions(env) if task.key is not None]
    assert pairs and all(truth is not None for _, truth in pairs)
    # upstream's golds are the newest fact's object: our truth is one of them for almost every question
    agree = sum(truth in task.meta["golds"] for task, truth in pairs)
    assert agree / len(pairs) > 0.9
    assert env.truth(("no such subject", "no such relation")) is None


class BadTruth(Toy):
    def truth(self, key: Any) -> Any:
        return 3


class ForeignTruth(Toy):
    def truth(self, key: Any) -> str | None:
        return "x"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (BadTruth(), r"truth: truth\(\d\) at t=0 returned int, not a str or None"),
        (ForeignTruth(), r"truth: truth\(\('not a key of this stream',\)\) at t=0 returned 'x'"),
    ],
)
def test_check_env_names_a_truth_that_breaks_its_contract(env, message):
    with pytest.raises(EnvCheckError, match=message):
        check_env(env)


def test_check_env_passes_an_environment_without_truth():
    check_env(Toy())


def spec_of(*overrides: str, llm: str = "simulated"):
    options = [f"llm={llm}", *(["llm.model=m"] if llm == "openai" else []), *overrides]
    cfg = compose_config(options)
    choices = {"env": "controlled_drift", "memory": "tepa_rev", "llm": llm}
    return cfg, choices, validate(cfg, choices)


def test_log_prompts_defaults_to_off_for_the_simulated_reader_and_on_for_a_real_model():
    assert spec_of()[2].log_prompts is False
    assert spec_of(llm="openai")[2].log_prompts is True
    assert spec_of("log_prompts=true")[2].log_prompts is True
    assert spec_of("log_prompts=false", llm="openai")[2].log_prompts is False
    assert spec_of()[2].config["log_prompts"] is False  # meta.json records the setting applied


def test_log_prompts_is_not_part_of_a_streams_identity():
    identities = []
    for value in ("true", "false"):
        cfg, choices, spec = spec_of(f"log_prompts={value}")
        variant = variant_of(cfg, choices, str(CONF_DIR))
        identities.append((variant.name, stream_identity(spec, 0, variant, None)))
    assert identities[0] == identities[1]


def test_a_rerun_with_log_prompts_skips_the_complete_stream_and_a_new_one_logs_them(tmp_path: Path):
    common = (
        f"results_dir={tmp_path}",
        "max_episodes=6",
        "seeds=[0]",
        "progress=false",
        "memory=append_only",
    )
    run_overrides(*common)
    (path,) = tmp_path.glob("runs/**/episodes.parquet")
    before = path.read_bytes()
    run_overrides(*common, "log_prompts=true")
    assert path.read_bytes() == before  # complete: skipped, kept as it was
    run_overrides(*common, "log_prompts=true", "seed=1", "seeds=[1]")
    (other,) = tmp_path.glob("runs/**/seed=1/episodes.parquet")
    prompts = [json.loads(p) for p in pq.read_table(other).column("prompt").to_pylist()]
    assert len(prompts) == 6 and all(messages[0][1]["role"] == "user" for messages in prompts)
    assert all(p == "" for p in pq.read_table(path).column("prompt").to_pylist())

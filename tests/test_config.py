"""Composition and start-up validation of the Hydra configs (conf/ + runners/config.py)."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException, HydraException

from analysis.metrics.display import METHOD_ORDER
from runners.compose import compose_config, compose_spec
from runners.config import ConfigError, validate
from runners.registry import memory_names, swept_memories
from runners.run import CONF_DIR, PROJECT_ROOT
from tepa.evidence import Observation, Query


def _compose(*overrides: str):
    return compose_config(overrides)


def _spec(*overrides: str):
    return compose_spec(overrides)


def _error(*overrides: str) -> str:
    with pytest.raises(ConfigError) as info:
        spec = _spec(*overrides)
        for component in (spec.env, spec.memory, spec.llm):
            component.build()
    return str(info.value)


def test_defaults_compose_to_one_seed_of_tepa_rev_on_controlled_drift():
    spec = _spec()
    assert (spec.env.label, spec.memory.label, spec.llm.label) == (
        "controlled_drift",
        "tepa_rev",
        "simulated",
    )
    assert spec.seeds == (0,) and spec.name == "adhoc"
    assert spec.memory.params["theta_rev"] == 0.4 and "label" not in spec.memory.params
    assert _spec("seeds=[3,1,2]").seeds == (3, 1, 2)


@pytest.mark.parametrize("method", memory_names())
def test_every_memory_option_validates_and_builds(method):
    spec = _spec(f"memory={method}")
    memory = spec.memory.build()
    assert memory.retrieve(Query(key=0, text="job 0")) == []
    assert spec.memory.label == ("tepa_rev" if method == "tepa_rev_facts" else method)


@pytest.mark.parametrize("method", memory_names())
def test_memory_options_show_every_parameter_at_the_classes_default(method):
    """A method's YAML lists its parameters for overriding, each at the class's own default (only
    tepa_rev_facts, the variant for stated facts, sets other thresholds)."""
    spec = _spec(f"memory={method}")
    signature = inspect.signature(spec.memory.cls).parameters
    defaults = {k: p.default for k, p in signature.items() if p.default is not p.empty and k != "trial_fn"}
    assert set(spec.memory.params) == set(defaults), method
    differ = {k for k, v in spec.memory.params.items() if v != defaults[k]}
    assert differ == ({"n_min", "theta_rev"} if method == "tepa_rev_facts" else set()), method


@pytest.mark.parametrize(
    "env", ["controlled_drift", "executable_drift", "preference_stream", "memoryagentbench"]
)
def test_every_env_option_validates(env):
    spec = _spec(f"env={env}")
    assert spec.env.label == ("memoryagentbench_sh_6k" if env == "memoryagentbench" else env)


@pytest.mark.parametrize(
    "option", ["env=controlled_drift", "env=executable_drift", "env=preference_stream", "llm=simulated"]
)
def test_option_values_are_the_classes_defaults(option):
    """The yaml shows every knob for overriding, and must not silently diverge from a recalibration
    of the class's defaults."""
    group = option.split("=")[0]
    component = getattr(_spec(option), group)
    signature = inspect.signature(component.cls).parameters
    assert {k: signature[k].default for k in component.params} == component.params


def test_memoryagentbench_label_follows_its_source():
    cfg = _compose("env=memoryagentbench", "env.source=factconsolidation_mh_262k")
    assert cfg.env.label == "memoryagentbench_mh_262k"


def test_local_llm_points_the_openai_backend_at_llama_cpp():
    cfg = _compose("llm=local")
    assert cfg.llm._target_ == "runners.llm.openai_backend.OpenAIBackend"
    assert cfg.llm.base_url == "http://127.0.0.1:8080/v1" and cfg.llm.model == "smollm2-135m-instruct"
    assert "api_key" not in cfg.llm


@pytest.mark.parametrize(
    ("name", "seeds"), [("paper_controlled", 20), ("paper_executable", 20), ("paper_preference", 10)]
)
def test_paper_experiments_sweep_every_method_of_the_group_over_their_seeds(name, seeds):
    cfg = _compose(f"experiment={name}")
    assert cfg.name == name and list(cfg.seeds) == list(range(seeds))
    swept = swept_memories(name)
    assert swept == [m for m in memory_names() if m != "tepa_rev_facts"]
    assert sorted(swept) == sorted(METHOD_ORDER)  # each has its place and name in the tables


def test_paper_memoryagentbench_sweeps_sources_and_uses_the_fact_thresholds():
    cfg = _compose("experiment=paper_memoryagentbench")
    sources = cfg.hydra.sweeper.params["env.source"].split(",")
    assert sorted(s.removeprefix("factconsolidation_") for s in sources) == sorted(
        f"{h}_{n}" for h in ("sh", "mh") for n in ("6k", "32k", "262k")
    )
    assert "tepa_rev_facts" in cfg.hydra.sweeper.params.memory.split(",")
    assert list(cfg.seeds) == list(range(10))


def test_fact_thresholds_promote_one_stated_fact_and_revoke_it_on_one_newer_conflict():
    """The arithmetic documented in conf/memory/tepa_rev_facts.yaml, on the real TEPA-Rev."""
    memory = _spec("memory=tepa_rev_facts").memory.build()
    memory.observe(Observation(key="k", value="Paris", t=0))
    assert [e.value for e in memory.retrieve(Query(key="k"))] == ["Paris"]
    memory.observe(Observation(key="k", value="Rome", t=1))
    assert [e.value for e in memory.retrieve(Query(key="k"))] == ["Rome"]
    default = _spec("memory=tepa_rev").memory.build()  # n_min 3, theta_rev 0.4: both stay active
    default.observe(Observation(key="k", value="Paris", t=0))
    default.observe(Observation(key="k", value="Rome", t=1))
    assert sorted(e.value for e in default.retrieve(Query(key="k"))) == ["Paris", "Rome"]


def test_sweep_thresholds_labels_each_grid_point():
    cfg = _compose("experiment=sweep_thresholds", "memory.theta_rev=0.3", "memory.theta_rec=0.7")
    spec = validate(cfg, cfg.hydra.runtime.choices)
    assert spec.memory.label == "tepa_rev-theta_rev=0.3-theta_rec=0.7"
    assert set(cfg.hydra.sweeper.params) == {"memory.theta_rev", "memory.theta_rec"}


def test_hydra_outputs_go_under_results_dir():
    cfg = _compose("results_dir=somewhere")
    assert cfg.hydra.run.dir.startswith("somewhere/hydra/") and cfg.hydra.sweep.dir.startswith(
        "somewhere/hydra/"
    )


@pytest.mark.filterwarnings("ignore::UserWarning")  # Hydra on our shadowing launcher configs
def test_launcher_configs():
    joblib = _compose("hydra/launcher=joblib").hydra.launcher
    assert joblib.n_jobs == 2 and joblib._target_.endswith("JoblibLauncher")
    slurm = _compose(
        "hydra/launcher=submitit_slurm", "hydra.launcher.partition=gpu", "hydra.launcher.mem_gb=16"
    )
    launcher = slurm.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert (launcher.partition, launcher.mem_gb, launcher.timeout_min) == ("gpu", 16, 120)
    assert _compose("hydra/launcher=submitit_slurm").hydra.launcher.partition is None  # the cluster's default


# --- bad configs: each kind stops at start-up with a message naming the key -------------------------


def test_wrong_type_names_the_key():
    assert _error("memory.theta_rev=abc") == "memory.theta_rev='abc': wrong type, expected float"
    for method in ("tepa_rev", "tepa_rev_literal"):  # the latter's __init__ is a partialmethod
        assert _error(f"memory={method}", "memory.n_min=1.5") == "memory.n_min=1.5: wrong type, expected int"
    assert _error("memory=sliding_window", "memory.steps=2.5").startswith("memory.steps=2.5: wrong type")
    assert _error("env.phase_length=abc").startswith("env.phase_length='abc': wrong type")


def test_threshold_out_of_range_names_the_key():
    assert _error("memory.theta_rev=1.5") == "memory.theta_rev=1.5: must be in [0, 1]"
    assert _error("memory=tepa_full", "memory.n_support=0").startswith("memory.n_support=0")
    assert _error("memory.m_rec=9").startswith("memory.m_rec=9: must be <= W=5")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("memory.theta_rev=1.5",), "memory.theta_rev=1.5: must be in [0, 1]"),
        (("memory.a0=0",), "memory.a0=0.0: must be > 0"),
        (("memory.counts=weekly",), "memory.counts='weekly': must be one of epoch, lifetime"),
        (("memory=reactive", "memory.c=0"), "memory.c=0: must be >= 1"),
        (("memory=sliding_window", "memory.n=-1"), "memory.n=-1: must be >= 0"),
        (("memory=lww", "memory.top_k=0"), "memory.top_k=0: must be >= 1"),
    ],
)
def test_a_memory_range_is_checked_by_its_class_when_the_config_is_validated(overrides, message):
    with pytest.raises(ConfigError) as info:
        _spec(*overrides)  # validation alone, before anything is built for a run
    assert str(info.value) == message


def test_value_rejected_by_the_class_names_the_key():
    assert _error("env.phase_length=0").startswith("env.phase_length")
    assert _error("llm.lapse=2").startswith("llm.lapse=2")


def test_unknown_group_option_names_the_group():
    with pytest.raises(ConfigCompositionException, match="memory/nope"):
        _compose("memory=nope")


def test_missing_required_value_names_the_key():
    assert _error("llm=openai").startswith("llm.model: missing required value")
    assert _error("memory=custom").startswith("memory._target_: missing required value")


def test_unknown_parameter_names_the_key():
    assert _error("+memory.foo=1").startswith("memory.foo: not a parameter of tepa.tepa_rev.TEPARev")
    with pytest.raises(ConfigError, match=r"^memory\.foo: not a parameter of tepa\.tepa_rev\.TEPARev"):
        _compose("memory.foo=1")  # without +, composing refuses it in the same words


def test_a_secret_in_the_config_is_refused():
    assert _error("+llm.api_key=sk-test").startswith("llm.api_key: never put a secret in a config")


def test_bad_target_and_protocol_are_named():
    assert "no module named" in _error("memory=custom", "memory._target_=no_such_pkg.Mem")
    assert "does not implement tepa.protocol.Memory" in _error(
        "memory=custom", "memory._target_=collections.Counter"
    )


def test_bad_run_keys_are_named():
    assert _error("seeds=[1,1]").startswith("seeds=[1, 1]")
    assert _error("seed=-1").startswith("seed=-1")
    with pytest.raises(HydraException, match="seed"):
        _compose("seed=abc")


@pytest.mark.parametrize(
    ("override", "key"),
    [("memory.theta_rev=1.5", "memory.theta_rev=1.5: must be in [0, 1]"), ("memory=nope", "memory/nope")],
)
def test_cli_stops_with_a_short_message_naming_the_key(tmp_path, override, key):
    proc = subprocess.run(
        [sys.executable, "-m", "runners.run", override, f"results_dir={tmp_path}", "env.phase_length=2"],
        capture_output=True, text=True, cwd=tmp_path, timeout=60,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
    )  # fmt: skip
    assert proc.returncode != 0
    assert key in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_run_schema_is_in_the_config_store():
    from hydra.core.config_store import ConfigStore

    assert "run_schema.yaml" in ConfigStore.instance().list("")
    assert Path(CONF_DIR, "config.yaml").is_file()

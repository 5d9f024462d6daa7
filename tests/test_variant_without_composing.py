"""A job's stream directory compares its config with the one its group options compose to. A job whose
overrides provably leave every compared value alone (every job of the paper sweeps: `results_dir=...`,
Hydra's launcher settings) is its own comparison and is not composed a second time; any other job is
compared with the composed config, and both ways give the directory composing always gave."""

from __future__ import annotations

import shutil

import pytest
from omegaconf import open_dict

from runners.compose import CONF_DIR, compose_config
from runners.store import identity
from runners.store.identity import Variant, variant_of

PAPER_JOB = ("experiment=paper_preference", "memory=lww", "results_dir=other_results", "progress=false")
HYDRA = ("hydra/launcher=joblib", "hydra.launcher.n_jobs=1", "hydra.mode=MULTIRUN")

CASES = [
    (PAPER_JOB, False),
    ((*PAPER_JOB, *HYDRA), False),
    (("experiment=paper_executable", "memory=tepa_rev", "seeds=[0,1]", "name=x"), False),
    ((), False),
    (("experiment=paper_memoryagentbench", "memory=lww", "env.source=factconsolidation_mh_32k"), True),
    ((*PAPER_JOB, "max_episodes=1"), True),
    (("experiment=paper_preference", "memory=tepa_rev", "memory.theta_rev=0.3"), True),
    (("memory=sliding_window", "memory.steps=4"), True),
    (("experiment=sweep_thresholds", "memory.theta_rev=0.3"), True),
    (("retrieval=bm25",), True),
    (("retrieval=dense", "results_dir=other_results"), True),
    (("llm=openai", "results_dir=other_results"), True),  # its cache_path refers to results_dir
    (("+env.noise=0.1",), True),
    ((*PAPER_JOB, "hydra.searchpath=[pkg://hydra.conf]"), True),
]


def always_composed(cfg, conf_dir: str, monkeypatch) -> Variant:
    """The variant as it was found before: by composing the options, whatever the overrides."""
    with monkeypatch.context() as patched:
        patched.setattr(identity, "_composes_as_own", lambda *args: False)
        return variant_of(cfg, cfg.hydra.runtime.choices, conf_dir)


def composed_for(cfg, conf_dir: str) -> tuple[Variant, bool]:
    """The variant of `cfg` and whether finding it composed a config."""
    identity._compose.cache_clear()
    found = variant_of(cfg, cfg.hydra.runtime.choices, conf_dir)
    return found, identity._compose.cache_info().misses > 0


@pytest.mark.parametrize(("overrides", "composes"), CASES, ids=[" ".join(o) or "defaults" for o, _ in CASES])
def test_a_job_gets_the_directory_composing_its_options_gives(overrides, composes, monkeypatch):
    cfg = compose_config(overrides)
    found, composed = composed_for(cfg, str(CONF_DIR))
    assert composed == composes
    assert found == always_composed(cfg, str(CONF_DIR), monkeypatch)


def test_a_running_jobs_hydra_node_tells_its_overrides(monkeypatch):
    cfg = compose_config(PAPER_JOB)
    hydra = cfg.hydra
    job = cfg.copy()
    with open_dict(job):
        del job["hydra"]  # as Hydra hands a job its config: the node is HydraConfig's
    identity._compose.cache_clear()
    found = variant_of(job, hydra.runtime.choices, str(CONF_DIR), hydra)
    assert identity._compose.cache_info().misses == 0
    assert found == always_composed(cfg, str(CONF_DIR), monkeypatch)
    assert variant_of(job, hydra.runtime.choices, str(CONF_DIR)) == found  # no node: composed instead
    assert identity._compose.cache_info().misses == 1


def test_a_value_referring_to_an_overridden_key_is_compared_with_the_composed_options(tmp_path, monkeypatch):
    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    tied = "defaults:\n  - controlled_drift\n  - _self_\nphase_length: ${seed}\n"  # set by `seed=3`
    (conf / "env" / "tied.yaml").write_text(tied)
    cfg = compose_config(["env=tied", "seed=3"], conf)
    found, composed = composed_for(cfg, str(conf))
    assert composed
    assert found.name == "env.phase_length=3"
    assert found == always_composed(cfg, str(conf), monkeypatch)


def test_options_other_than_the_configs_own_are_composed(monkeypatch):
    cfg = compose_config(PAPER_JOB)
    identity._compose.cache_clear()
    other = {**cfg.hydra.runtime.choices, "memory": "append_only"}
    found = variant_of(cfg, other, str(CONF_DIR))
    assert identity._compose.cache_info().misses == 1
    assert found.overrides  # lww's values against append_only's

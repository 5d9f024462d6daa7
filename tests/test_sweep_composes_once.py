"""A sweep composes each job's config once where the launcher runs the job in its own process: the
sweeper's check before launching (which stops a sweep whose job cannot compose before any job runs)
hands its compositions to the launcher, which composed each job a second time. A launcher that sends
jobs to other processes sends the plain config loader, and those jobs compose their own."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import pytest
from hydra.core.config_loader import ConfigLoader
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext
from omegaconf import OmegaConf

from runners.compose import PROJECT_ROOT
from runners.launch import validated

BATCH = [["memory=lww", "seed=0"], ["memory=tepa_rev", "seed=0"]]


class CountingLoader(ConfigLoader):
    """Composes `{"job": overrides}` and counts it; a job whose overrides name `bad` cannot compose."""

    def __init__(self) -> None:
        self.composed: list[list[str]] = []

    def load_sweep_config(self, master_config, sweep_overrides):
        if "bad" in " ".join(sweep_overrides):
            raise ValueError(f"cannot compose {sweep_overrides}")
        self.composed.append(list(sweep_overrides))
        return OmegaConf.create({"job": list(sweep_overrides)})

    def load_configuration(self, *args, **kwargs):
        raise NotImplementedError

    def get_search_path(self):
        raise NotImplementedError

    def get_sources(self):
        raise NotImplementedError

    def list_groups(self, parent_name):
        raise NotImplementedError

    def get_group_options(self, *args, **kwargs):
        raise NotImplementedError

    def compute_defaults_list(self, *args, **kwargs):
        raise NotImplementedError


class Launcher:
    hydra_context: HydraContext | None = None


class StubSweeper(Sweeper):
    """What the check reads of a sweeper (Hydra's basic one has these too)."""

    def __init__(self, loader: ConfigLoader) -> None:
        self.hydra_context = HydraContext(config_loader=loader, callbacks=None)  # type: ignore[arg-type]
        self.config = OmegaConf.create({"master": True})
        self.launcher = Launcher()
        self.launcher.hydra_context = self.hydra_context

    def setup(self, *, hydra_context, task_function, config):
        raise NotImplementedError

    def sweep(self, arguments):
        raise NotImplementedError


@pytest.fixture
def sweeper(monkeypatch):
    monkeypatch.setattr(Sweeper, "validate_batch_is_legal", Sweeper.validate_batch_is_legal)  # undone after
    validated.install()
    return StubSweeper(CountingLoader())


def test_the_launcher_takes_each_job_the_check_composed(sweeper):
    loader = sweeper.hydra_context.config_loader
    sweeper.validate_batch_is_legal(BATCH)
    launching = sweeper.launcher.hydra_context.config_loader
    configs = [launching.load_sweep_config(sweeper.config, list(job)) for job in BATCH]
    assert [list(c.job) for c in configs] == BATCH
    assert loader.composed == BATCH  # each once: by the check alone


def test_a_job_taken_again_or_from_another_master_is_composed_anew(sweeper):
    loader = sweeper.hydra_context.config_loader
    sweeper.validate_batch_is_legal(BATCH)
    launching = sweeper.launcher.hydra_context.config_loader
    first = launching.load_sweep_config(sweeper.config, BATCH[0])
    again = launching.load_sweep_config(sweeper.config, BATCH[0])
    other = launching.load_sweep_config(OmegaConf.create({"master": True}), BATCH[1])
    assert again is not first and again == first and list(other.job) == BATCH[1]
    assert loader.composed == [*BATCH, BATCH[0], BATCH[1]]


def test_a_job_that_cannot_compose_stops_the_check_before_the_launcher_gets_any(sweeper):
    plain = sweeper.launcher.hydra_context
    with pytest.raises(ValueError, match="bad"):
        sweeper.validate_batch_is_legal([*BATCH, ["memory=bad"]])
    assert sweeper.launcher.hydra_context is plain


def test_a_job_sent_to_another_process_gets_the_plain_loader(sweeper):
    sweeper.validate_batch_is_legal(BATCH)
    sent = pickle.loads(pickle.dumps(sweeper.launcher.hydra_context))
    assert type(sent.config_loader) is CountingLoader and sent.config_loader.composed == BATCH


COUNTED_RUN = """
import sys
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from runners.run import cli
composed = []
load = ConfigLoaderImpl.load_sweep_config
ConfigLoaderImpl.load_sweep_config = lambda self, *a, **k: composed.append(1) or load(self, *a, **k)
sys.argv = ["runners.run", *sys.argv[1:]]
try:
    cli()
finally:
    print("composed", len(composed), file=sys.stderr)
"""


def test_a_sweep_run_in_the_launchers_process_composes_each_job_once(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", COUNTED_RUN, "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=1",
         f"results_dir={tmp_path}", "env.phase_length=4", "memory=no_memory,lww", "seed=0"],
        capture_output=True, text=True, cwd=tmp_path, timeout=240,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("0 skipped (complete)") == 2  # both jobs ran
    assert proc.stderr.splitlines()[-1] == "composed 2"  # by the check alone, not again to launch

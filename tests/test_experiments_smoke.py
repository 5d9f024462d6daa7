"""Every experiment config (conf/experiment/*.yaml) runs tiny: one seed, `max_episodes` episodes per
stream, and of each swept key only a point or two (for the memory methods the first and the last), the
rest as the experiment sets it. An experiment on a backend that needs a real endpoint is composed,
validated and planned (`plan=true`: a dry pass, no endpoint called) instead. One experiment also runs
through `python -m runners.run -m`, as a user types it."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.utils import get_class

from analysis.streamlog.stream import EPISODES, META
from runners.compose import CONF_DIR, compose_config
from runners.llm.openai_backend import OpenAIBackend
from tests.conftest import TINY_EPISODES
from tests.helpers.runner import cli
from tests.helpers.shared_data import require_data

EXPERIMENTS = sorted(path.stem for path in (CONF_DIR / "experiment").glob("*.yaml"))


def tiny_sweep(experiment: str) -> list[str]:
    """Overrides that shrink the experiment's sweep (`hydra.sweeper.params`, expanded as Hydra's basic
    sweeper expands them, `glob(...)` included): the first and last memory method, the first value of
    every other swept key."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        params = compose_config([f"experiment={experiment}"]).hydra.sweeper.params or {}
        parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
        swept = {
            o.key_or_group: list(o.sweep_string_iterator())
            for o in parser.parse_overrides([f"{key}={value}" for key, value in params.items()])
        }
    return [
        f"{key}={','.join(dict.fromkeys([values[0], values[-1]]) if key == 'memory' else values[:1])}"
        for key, values in swept.items()
    ]


def points(sweep: list[str]) -> list[list[str]]:
    """The single runs of a (shrunk) sweep: at most two values, of the memory key."""
    runs = [[]]
    for override in sweep:
        key, values = override.split("=", 1)
        runs = [[*run, f"{key}={value}"] for run in runs for value in values.split(",")]
    return runs


def streams(results: Path) -> dict[Path, int]:
    """Each complete stream's directory and its number of episodes."""
    return {meta.parent: pq.read_metadata(meta.parent / EPISODES).num_rows for meta in results.rglob(META)}


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_runs_tiny(experiment, tiny_run, capsys, monkeypatch):
    cfg = compose_config([f"experiment={experiment}"])
    if "data_dir" in cfg.env:  # reads data files: MemoryAgentBench
        monkeypatch.setenv("TEPA_DATA_DIR", str(require_data()))
    runs = points(tiny_sweep(experiment))
    assert runs, experiment
    if issubclass(get_class(cfg.llm._target_), OpenAIBackend):  # needs a real endpoint
        for run in runs:
            tiny_run(f"experiment={experiment}", *run, "plan=true")
        plans = [line for line in capsys.readouterr().out.splitlines() if line.startswith("plan ")]
        assert len(plans) == len(runs)
        assert all(f"1 stream(s), {TINY_EPISODES} decisions" in line for line in plans), plans
        return
    for run in runs:
        results = tiny_run(f"experiment={experiment}", *run)
    done = streams(results)
    assert len(done) == len(runs), sorted(done)
    assert set(done.values()) == {TINY_EPISODES}
    assert all(f"max_episodes={TINY_EPISODES}" in str(path) for path in done)


def test_an_experiment_runs_tiny_as_a_multirun_from_the_command_line(tmp_path):
    experiment = "paper_controlled"
    sweep = tiny_sweep(experiment)
    proc = cli(
        tmp_path, "-m", f"experiment={experiment}", *sweep, "seeds=[0]", f"max_episodes={TINY_EPISODES}",
        f"results_dir={tmp_path}", "progress=false", timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    done = streams(tmp_path / "runs" / experiment)
    assert len(done) == len(points(sweep)) == 2 and set(done.values()) == {TINY_EPISODES}
    for path in done:
        meta = json.loads((path / META).read_text())
        assert meta["variant"] == f"max_episodes={TINY_EPISODES}" and path.name == "seed=0"

"""The entry point end to end: run directories, determinism, skipping complete runs, user classes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pyarrow.parquet as pq
import pytest

from analysis.streamlog.stream import ARCHIVE, EPISODES, META, PARTIAL_EPISODES
from runners.config import ConfigError
from runners.run import PROJECT_ROOT
from tests.helpers.runner import run_overrides

TINY = ("env.phase_length=5",)  # controlled drift: 4 phases x 5 = 20 episodes per stream
VARIANT = "env.phase_length=5"  # the directory level that names TINY's difference from the defaults


def run(results, *overrides: str, tiny: bool = True):
    extra = TINY if tiny else ()
    return run_overrides(f"results_dir={results}", *extra, *overrides)


def cli(cwd, *args: str, pythonpath: str = "") -> subprocess.CompletedProcess:
    path = os.pathsep.join(p for p in (pythonpath, str(PROJECT_ROOT)) if p)
    return subprocess.run(
        [sys.executable, "-m", "runners.run", *args], capture_output=True, text=True, cwd=cwd, timeout=120,
        env={**os.environ, "PYTHONPATH": path},
    )  # fmt: skip


def test_cli_multirun_writes_eight_complete_run_directories(tmp_path):
    proc = cli(
        tmp_path,
        "-m",
        "memory=no_memory,append_only,lww,tepa_rev",
        "seed=0,1",
        f"results_dir={tmp_path}",
        *TINY,
    )
    assert proc.returncode == 0, proc.stderr
    dirs = sorted((tmp_path / "runs" / "adhoc" / "controlled_drift").glob(f"*/{VARIANT}/seed=*"))
    assert [f"{d.parent.parent.name}/{d.name}" for d in dirs] == [
        f"{m}/seed={s}" for m in ("append_only", "lww", "no_memory", "tepa_rev") for s in (0, 1)
    ]
    for d in dirs:
        meta = json.loads((d / META).read_text())
        assert meta["complete"] is True and meta["n_episodes"] == 20
        assert pq.read_metadata(d / EPISODES).num_rows == 20 and (d / ARCHIVE).is_file()
        assert not (d / PARTIAL_EPISODES).exists()
    assert not any(
        (tmp_path / name).exists() for name in ("outputs", "multirun")
    )  # Hydra's dirs: results/hydra
    assert (tmp_path / "hydra" / "adhoc").is_dir()


def test_one_run_covers_several_seeds_and_logs_what_analysis_needs(tmp_path):
    summary = run(tmp_path, "seeds=[0,1,2]", "memory=tepa_rev")
    assert [s.seed for s in summary.streams] == [0, 1, 2] and summary.episodes_run == 60
    d = tmp_path / "runs" / "adhoc" / "controlled_drift" / "tepa_rev" / VARIANT / "seed=1"
    table = pq.read_table(d / EPISODES)
    needed = {"experiment", "env", "memory", "seed", "t", "phase", "key", "action", "correct", "success",
              "n_evidence", "prompt_tokens", "cached", "latency", "active", "revoked"}  # fmt: skip
    assert needed <= set(table.column_names)
    assert set(table.column("seed").to_pylist()) == {1}
    assert set(table.column("latency").to_pylist()) == {0.0}  # the simulated backend: no wall clock
    meta = json.loads((d / META).read_text())
    assert meta["config"]["memory"]["theta_rev"] == 0.4 and meta["config"]["seed"] == 1
    assert meta["versions"]["hydra-core"] and "commit" in meta["git"] and meta["wall_time_s"] >= 0
    assert meta["backend_stats"] and meta["replayed"] == 0


def test_same_config_and_seed_give_byte_identical_episodes(tmp_path):
    for where in ("a", "b"):
        run(tmp_path / where, "memory=tepa_full", "seed=3")
    rel = f"runs/adhoc/controlled_drift/tepa_full/{VARIANT}/seed=3"
    for name in (EPISODES, ARCHIVE):
        assert (tmp_path / "a" / rel / name).read_bytes() == (tmp_path / "b" / rel / name).read_bytes()
    run(tmp_path / "c", "memory=tepa_full", "seed=4")
    assert (tmp_path / "c" / rel.replace("seed=3", "seed=4") / EPISODES).read_bytes() != (
        tmp_path / "a" / rel / EPISODES
    ).read_bytes()


def test_rerunning_a_complete_run_executes_no_episode(tmp_path):
    first = run(tmp_path, "seeds=[0,1]", "memory=lww")
    assert first.episodes_run == 40 and not any(s.skipped for s in first.streams)
    d = first.streams[0].directory
    stamps = {p.name: p.stat().st_mtime_ns for p in d.iterdir()}
    again = run(tmp_path, "seeds=[0,1,2]", "memory=lww")
    assert [s.skipped for s in again.streams] == [True, True, False]
    assert again.episodes_run == 20  # only the new seed
    assert {p.name: p.stat().st_mtime_ns for p in d.iterdir()} == stamps


def test_a_changed_setting_is_another_stream_beside_the_first(tmp_path):
    first = run(tmp_path, "memory=tepa_rev").streams[0].directory
    changed = run(tmp_path, "memory=tepa_rev", "memory.theta_rev=0.3")
    assert changed.episodes_run == 20
    variant = f"{VARIANT},memory.theta_rev=0.3"
    assert changed.streams[0].directory == first.parent.with_name(variant) / "seed=0"
    assert run(tmp_path, "memory=tepa_rev", "memory.theta_rev=0.4").streams[0].skipped  # 0.4: the default


USER_CODE = textwrap.dedent(
    '''
    from tepa.retrieval.rank import rank
    from envs.controlled_drift import ControlledDrift


    class KeepLast:
        """Remembers only the last observation of each key."""

        name = "keep_last"

        def __init__(self, horizon: int = 1):
            if horizon < 1:
                raise ValueError(f"horizon={horizon}: must be >= 1")
            self.items = {}

        def observe(self, obs):
            from tepa.evidence import Evidence
            self.items[obs.key] = Evidence(obs.key, obs.value, obs.holds, obs.t, obs.text, obs.source)

        def retrieve(self, query):
            return rank(self.items.values(), query)

        def feedback(self, used, success, t):
            pass

        def on_phase_boundary(self, phase, t):
            pass

        def snapshot(self):
            return {"active": len(self.items)}


    class ShortDrift(ControlledDrift):
        """A user's environment: controlled drift with two phases."""

        def __init__(self, length: int = 4):
            super().__init__(phase_length=length, phases=[("stable", "none"), ("flip", "full")])
    '''
)


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    folder = tmp_path / "userpkg"
    folder.mkdir()
    (folder / "my_methods.py").write_text(USER_CODE)
    monkeypatch.syspath_prepend(str(folder))
    return folder


def test_a_users_memory_and_env_run_without_touching_the_project(tmp_path, user_module):
    summary = run(
        tmp_path / "r", "memory=custom", "memory._target_=my_methods.KeepLast", "+memory.horizon=2",
        "env=custom", "env._target_=my_methods.ShortDrift", "+env.length=3", tiny=False,
    )  # fmt: skip
    assert summary.episodes_run == 6
    variant = "env.length=3,memory.horizon=2"  # the parameters the config options do not set
    d = tmp_path / "r" / "runs" / "adhoc" / "shortdrift" / "keeplast" / variant / "seed=0"
    assert pq.read_table(d / EPISODES).column("memory").to_pylist() == ["keeplast"] * 6
    with pytest.raises(ConfigError, match=r"memory.horizon=0: must be >= 1"):
        run(tmp_path / "r", "memory=custom", "memory._target_=my_methods.KeepLast", "+memory.horizon=0")
    with pytest.raises(
        ConfigError, match=r"memory.a0: not a parameter of my_methods.KeepLast.*memory=custom"
    ):
        run(tmp_path / "r", "memory._target_=my_methods.KeepLast")


def test_a_users_memory_runs_from_the_command_line(tmp_path, user_module):
    proc = cli(
        tmp_path, "memory=custom", "memory._target_=my_methods.KeepLast", "memory.label=mine",
        f"results_dir={tmp_path}", *TINY, pythonpath=str(user_module),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    meta = tmp_path / f"runs/adhoc/controlled_drift/mine/{VARIANT}/seed=0" / META
    assert json.loads(meta.read_text())["complete"]


def test_a_users_environment_is_labelled_by_the_name_its_class_sets(tmp_path, user_module):
    (user_module / "named_env.py").write_text(
        "from my_methods import ShortDrift\n\n\nclass NamedDrift(ShortDrift):\n    name = 'named_drift'\n"
    )
    named = run(tmp_path, "env=custom", "env._target_=named_env.NamedDrift", "+env.length=3", tiny=False)
    assert named.streams[0].directory.relative_to(tmp_path).parts[:3] == ("runs", "adhoc", "named_drift")
    inherited = run(tmp_path, "env=custom", "env._target_=my_methods.ShortDrift", "+env.length=3", tiny=False)
    # a class that only inherits a built-in's name is not filed with the built-in's runs
    assert inherited.streams[0].directory.relative_to(tmp_path).parts[2] == "shortdrift"


def test_the_run_summary_says_where_the_logs_are(tmp_path):
    one = run(tmp_path, "memory=lww")
    assert one.describe().endswith(f"; logs in {one.streams[0].directory}")
    several = run(tmp_path, "memory=lww", "seeds=[0,1]")
    assert several.describe().endswith(f"; logs in {several.streams[0].directory.parent}")

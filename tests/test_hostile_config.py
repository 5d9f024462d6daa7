"""Config values that once passed: non-finite reader weights (a crash mid-stream, or a silent run), a
seed the episode log cannot store (a failure after the whole stream), a `name` or label that leaves
the results tree, an unknown top-level key, an unwritable results_dir and a YAML syntax error (both
tracebacks). Each is now one line naming the key or file, before the first episode."""

from __future__ import annotations

import pytest

from runners.config import ConfigError
from tests.helpers.hostile import TINY, one_line_error, run
from tests.helpers.runner import cli


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("llm.w_support=nan", "llm.w_support=nan: must be a finite number"),
        ("llm.half_life=nan", "llm.half_life=nan: must be a finite number"),
        ("llm.w_hint=nan", "llm.w_hint=nan: must be a finite number"),
        ("llm.w_support=inf", "llm.w_support=inf: must be a finite number"),
        ("memory.a0=nan", "memory.a0=nan: must be a finite number"),
        ("seed=9223372036854775808", "seed=9223372036854775808: must be in [0, 2**63 - 1]"),
        ("seeds=[0,9223372036854775808]", "seed=9223372036854775808"),
        ("+bogus_top=1", "bogus_top: not a config key"),
        ("+memory.label=..", "memory.label='..': must be a plain directory name"),
        ("name=.", "name='.': must be a plain directory name"),
    ],
)
def test_a_bad_value_stops_the_run_before_the_first_episode(tmp_path, override, message):
    with pytest.raises(ConfigError) as error:
        run(tmp_path, override)
    assert str(error.value).startswith(message)
    assert not (tmp_path / "runs").exists()


def test_the_largest_storable_seed_is_accepted(tmp_path):
    summary = run(tmp_path, "seed=9223372036854775807", "memory=no_memory")
    assert [s.seed for s in summary.streams] == [2**63 - 1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("name=..",), "name='..': must be a plain directory name"),
        (("name=ok,../../escaped",), "name='../../escaped': must be a plain directory name"),
        (("+bogus_top=1",), "bogus_top: not a config key"),
    ],
)
def test_on_the_command_line_nothing_is_written_outside_the_results_tree(tmp_path, args, message):
    results = tmp_path / "a" / "b" / "results"
    results.mkdir(parents=True)
    proc = cli(results, *args, f"results_dir={results}", *TINY)
    assert message in one_line_error(proc)
    outside = [p for p in tmp_path.rglob("*") if p != results and results not in p.parents]
    assert sorted(outside) == [tmp_path / "a", tmp_path / "a" / "b"]
    assert not (results / "runs").exists()


def test_an_unwritable_results_dir_is_one_line(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    proc = cli(tmp_path, f"results_dir={tmp_path / 'file' / 'results'}", *TINY)
    assert "results_dir=" in one_line_error(proc) and "not a writable directory" in proc.stderr


def test_a_yaml_syntax_error_names_the_file_and_line(tmp_path):
    (tmp_path / "conf" / "experiment").mkdir(parents=True)
    (tmp_path / "conf" / "experiment" / "broken.yaml").write_text("name: broken\nseeds: [0, 1\nseed: 2\n")
    proc = cli(tmp_path, "--config-dir", "conf", "experiment=broken", f"results_dir={tmp_path}", *TINY)
    error = one_line_error(proc)
    assert "conf/experiment/broken.yaml, line 3: not valid YAML" in error

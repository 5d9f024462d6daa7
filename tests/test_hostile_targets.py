"""Hostile `_target_`s: a config may name only a class implementing its group's protocol, and nothing
else is ever called (before, a function or a foreign class ran first and was refused after)."""

from __future__ import annotations

import pytest

from runners.registry import build_memory
from tests.helpers.hostile import TINY, one_line_error
from tests.helpers.runner import cli


def test_a_function_as_memory_target_is_refused_and_never_called(tmp_path):
    proc = cli(
        tmp_path, "memory=custom", "memory._target_=subprocess.getoutput", '+memory.cmd="touch PWNED"',
        f"results_dir={tmp_path}", *TINY,
    )  # fmt: skip
    assert one_line_error(proc).startswith("memory._target_: 'subprocess.getoutput' is not a class")
    assert not (tmp_path / "PWNED").exists()


def test_a_function_as_env_target_is_refused_and_deletes_nothing(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "data.txt").write_text("keep me")
    proc = cli(
        tmp_path, "env=custom", "env._target_=shutil.rmtree", f"+env.path={victim}", f"results_dir={tmp_path}"
    )
    assert one_line_error(proc).startswith("env._target_: 'shutil.rmtree' is not a class")
    assert (victim / "data.txt").read_text() == "keep me"


def test_a_class_of_another_kind_is_refused_before_it_is_constructed(tmp_path):
    proc = cli(
        tmp_path, "llm._target_=subprocess.Popen", "+llm.args=[touch,PWNED]", f"results_dir={tmp_path}", *TINY
    )  # fmt: skip
    assert "does not implement runners.llm.backend.Backend" in one_line_error(proc)
    assert not (tmp_path / "PWNED").exists()


def test_an_experiment_file_naming_a_function_is_refused_too(tmp_path):
    (tmp_path / "conf" / "experiment").mkdir(parents=True)
    (tmp_path / "conf" / "experiment" / "evil.yaml").write_text(
        "# @package _global_\nmemory:\n  _target_: subprocess.getoutput\n  cmd: touch PWNED\n"
    )
    proc = cli(tmp_path, "--config-dir", "conf", "experiment=evil", f"results_dir={tmp_path}", *TINY)
    assert "memory._target_: 'subprocess.getoutput' is not a class" in one_line_error(proc)
    assert not (tmp_path / "PWNED").exists()


def test_build_memory_refuses_a_function_without_calling_it(tmp_path):
    with pytest.raises(TypeError, match="is not a class"):
        build_memory("subprocess:getoutput", cmd=f"touch {tmp_path / 'PWNED'}")
    assert not (tmp_path / "PWNED").exists()

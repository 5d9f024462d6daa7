"""Files planted in the executable sandbox from outside: a hard link let `configure ... --out hard.txt`
overwrite the outside file it points to; a symlink at a job's input parent made the correct action
fail forever (the path check ran before inputs were restored); files written outside job paths piled
up (373 B to 1 MB in 12 calls); an error message named the absolute sandbox path."""

from __future__ import annotations

import os

import pytest

from envs.base import Task
from envs.executable_drift.env import PHASES, ExecutableDrift
from envs.executable_drift.sandbox import Sandbox

PL = 20
CONFIGURE, CONVERT, PUBLISH = 0, 1, 2


def leaky(argv: list[str], version: str, root: str) -> str:
    """A tool whose error names its working folder and the folder above it (the worker imports it)."""
    raise RuntimeError(f"cannot use {root} (in {os.path.dirname(root)})")


@pytest.fixture
def env(tmp_path):
    """The sandbox on the test's own file system, so that hard links to files outside can be made."""
    (tmp_path / "sandboxes").mkdir()
    with ExecutableDrift(
        n_keys=3, tools=["configure", "convert", "publish"], phase_length=PL,
        sandbox_dir=str(tmp_path / "sandboxes"), extra_tools={"leaky": leaky},
    ) as environment:  # fmt: skip
        environment.reset(0)
        yield environment


def task(env: ExecutableDrift, key: int) -> Task:
    job = env.jobs[key]
    correct = job.tool.invocation(job.subject, env.versions_at(0)[job.tool.name])
    return Task(key=key, text=job.text, phase=PHASES[0], t=0, options=job.options, correct=correct)


def configure_to(env: ExecutableDrift, out: str) -> str:
    """The correct configure invocation, writing to `out` instead of its job's path."""
    return task(env, CONFIGURE).correct.replace(f"etc/{env.jobs[CONFIGURE].subject}.conf", out)


def total_bytes(root) -> int:
    return sum(p.lstat().st_size for p in root.rglob("*") if p.is_file())


def test_a_planted_hard_link_is_refused_and_the_outside_file_kept(env, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    os.link(outside, env.sandbox.root / "hard.txt")
    outcome = env.execute(task(env, CONFIGURE), configure_to(env, "hard.txt"))
    assert not outcome.success and "hard links" in outcome.message
    assert outside.read_text() == "precious"


def test_a_hard_link_planted_at_the_jobs_own_output_is_replaced(env, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    (env.sandbox.root / "etc").mkdir()
    os.link(outside, env.sandbox.root / "etc" / f"{env.jobs[CONFIGURE].subject}.conf")
    t = task(env, CONFIGURE)
    assert env.execute(t, t.correct).success
    assert outside.read_text() == "precious"


def test_a_symlink_at_a_jobs_input_parent_no_longer_blocks_the_correct_action(env, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / f"{env.jobs[CONVERT].subject}.csv").write_text("id,item,qty\n9,evil,9\n")
    (env.sandbox.root / "data").symlink_to(elsewhere)
    t = task(env, CONVERT)
    outcome = env.execute(t, t.correct)
    assert outcome.success, outcome.message
    assert [p.name for p in elsewhere.iterdir()] == [f"{env.jobs[CONVERT].subject}.csv"]


def test_a_symlink_inside_the_sandbox_is_refused_as_a_job_path(env):
    (env.sandbox.root / "etc").mkdir()
    (env.sandbox.root / "alias").symlink_to(env.sandbox.root / "etc")
    outcome = env.execute(task(env, CONFIGURE), configure_to(env, "alias/x.conf"))
    assert not outcome.success and "symbolic link" in outcome.message
    assert not (env.sandbox.root / "etc" / "x.conf").exists()


def test_a_planted_fifo_is_refused_at_once(env):
    os.mkfifo(env.sandbox.root / "pipe")
    outcome = env.execute(task(env, CONFIGURE), configure_to(env, "pipe"))
    assert not outcome.success and "not a regular file" in outcome.message
    assert env.worker.stopped_calls == 0  # refused, not stopped by the time limit


def test_files_outside_job_paths_are_removed_and_the_sandbox_stays_small(env):
    root = env.sandbox.root
    for key in (CONVERT, CONFIGURE):
        t = task(env, key)
        env.execute(t, t.correct)
    start = total_bytes(root)
    for i in range(12):
        (root / f"planted{i}").mkdir()
        (root / f"planted{i}" / "junk.bin").write_bytes(b"x" * 100_000)  # from outside, between calls
        (root / "data" / f"junk{i}.csv").write_bytes(b"y" * 100_000)  # beside a job's input
        env.execute(t, configure_to(env, f"written{i}.conf"))  # an action writing outside job paths
        assert total_bytes(root) <= start + 1_000
    names = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
    assert not any("junk" in n or "planted" in n or "written" in n for n in names)


def test_an_oversized_artefact_is_dropped_between_calls(env, monkeypatch):
    monkeypatch.setattr("envs.executable_drift.env.SANDBOX_BUDGET", 1_000)
    (env.sandbox.root / "out").mkdir()
    big = env.sandbox.root / "out" / f"{env.jobs[CONVERT].subject}.json"
    big.write_bytes(b"z" * 50_000)  # a job's output path, but past the budget
    t = task(env, CONFIGURE)
    env.execute(t, t.correct)
    assert not big.exists()


def test_failure_messages_name_no_absolute_path(env, tmp_path):
    root = env.sandbox.root
    (tmp_path / "outside.txt").write_text("x")
    os.link(tmp_path / "outside.txt", root / "hard.txt")
    os.mkfifo(root / "pipe")
    (root / "alias").symlink_to(root)
    publish = task(env, PUBLISH)
    actions = [
        configure_to(env, "hard.txt"),
        configure_to(env, "pipe"),
        configure_to(env, "alias/x.conf"),
        configure_to(env, "etc"),  # a folder where a file goes
        publish.correct.replace("release/", "missing/"),
        "leaky",
    ]
    messages = [env.execute(task(env, CONFIGURE), a).message for a in actions]
    assert all(messages)
    for message in messages:
        assert str(tmp_path) not in message and os.sep + "sandboxes" not in message, message
    assert Sandbox(root).scrub(f"{root}/a") == "a"

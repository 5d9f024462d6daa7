"""Another process that keeps swapping a folder of the sandbox for a link to a folder outside while the
tools run (a check-then-use race) once made them write outside the sandbox. Every write, read and
delete now walks from a held descriptor of the sandbox, one folder at a time without following links,
so the swap can fail a call but never reach outside."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

import pytest

from envs.executable_drift.env import ExecutableDrift
from envs.executable_drift.sandbox import Layout, Sandbox
from envs.executable_drift.tools import TOOLS, ToolError


def _swap_for_link(folder: Path, target: Path) -> None:
    """What the other process does, at the worst moment: move `folder` away, a link to `target` there."""
    folder.rename(folder.with_name(folder.name + ".moved"))
    folder.symlink_to(target, target_is_directory=True)


@pytest.fixture
def outside(tmp_path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "victim.txt").write_text("keep me")
    return folder


def _untouched(outside: Path) -> bool:
    return (
        sorted(p.name for p in outside.iterdir()) == ["victim.txt"]
        and (outside / "victim.txt").read_text() == "keep me"
    )


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_a_folder_swapped_after_the_check_cannot_redirect_a_tools_write(tmp_path, outside, monkeypatch, tool):
    root = tmp_path / "box"
    root.mkdir()
    program, version = TOOLS[tool], "1.0"
    subject = program.subjects[0]
    for path, data in program.fixture(subject).items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    out = program.params(subject, program.conventions[0])["out"]
    (root / out).parent.mkdir(parents=True)
    checked = Sandbox.job_path

    def check_then_swap(self, path):
        real = checked(self, path)
        if real.endswith(out):
            _swap_for_link(root / out.split("/")[0], outside)
        return real

    monkeypatch.setattr(Sandbox, "job_path", check_then_swap)
    argv = program.invocation(subject, version).split()[1:]
    with pytest.raises(ToolError, match="refused: a symbolic link is on the path"):
        program.run(argv, version, str(root))
    assert _untouched(outside)


def test_a_folder_swapped_while_the_sandbox_is_swept_cannot_redirect_its_deletes(
    tmp_path, outside, monkeypatch
):
    root = tmp_path / "box"
    for folder in ("build", "data"):
        (root / folder).mkdir(parents=True)
        (root / folder / "junk.txt").write_text("swept")
    box, listed, scandir = Sandbox(root), [], os.scandir

    def scandir_then_swap(folder):
        listed.append(folder)
        if len(listed) == 2:  # the root is listed; before its folders are, both become links
            for name in ("build", "data"):
                _swap_for_link(root / name, outside)
        return scandir(folder)

    monkeypatch.setattr(os, "scandir", scandir_then_swap)
    box.sweep(Layout({"build/x.tar.gz": None, "data/sales.csv": 10}, frozenset({"build", "data"})), 2**20)
    monkeypatch.undo()
    assert _untouched(outside)


def _swapping(link: str, target: str, stop: threading.Event) -> None:
    """Keep putting a link to `target` where the folder `link` belongs, and taking it away again."""
    while not stop.is_set():
        with contextlib.suppress(OSError):
            os.symlink(target, link)
        with contextlib.suppress(OSError):
            if os.path.islink(link):
                os.unlink(link)


def test_folders_swapped_for_links_all_along_never_let_the_environment_reach_outside(outside):
    with ExecutableDrift(phase_length=30) as env:
        env.reset(0)
        tasks = {}
        for task in env.tasks():
            tasks.setdefault(task.key, task)
        targets = []
        for task in tasks.values():  # every job's artefact folder, in both conventions
            job = env.jobs[task.key]
            targets += [out.split("/")[0] for out in job.tool.outputs(job.subject)]
        stop = threading.Event()
        attackers = [
            threading.Thread(
                target=_swapping, args=(str(env.sandbox.root / t), str(outside), stop), daemon=True
            )
            for t in dict.fromkeys(targets)
        ]
        for thread in attackers:
            thread.start()
        try:
            for _ in range(40):
                for task in tasks.values():
                    for option in task.options:
                        env.execute(task, option)
        finally:
            stop.set()
            for thread in attackers:
                thread.join()
    assert _untouched(outside)

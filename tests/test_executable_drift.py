import json
import os
import tarfile
import time
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envs.base import TRIAL_KINDS, Environment, Task
from envs.executable_drift.env import PHASES, ExecutableDrift
from envs.executable_drift.tools import TOOLS, VERSIONS

PL = 30  # phase length for tests


def hang(argv: list[str], version: str, root: str) -> str:
    """A test-only tool that never finishes (the worker imports it by name)."""
    time.sleep(60)
    return "unreachable"


@pytest.fixture
def env():
    with ExecutableDrift(phase_length=PL) as environment:
        environment.reset(0)
        yield environment


def task_for(env: ExecutableDrift, key: int, phase: str) -> Task:
    """A task for job `key` at the start of `phase` (as the stream would show it)."""
    t = PHASES.index(phase) * PL
    job = env.jobs[key]
    correct = job.tool.invocation(job.subject, env.versions_at(t)[job.tool.name])
    return Task(key=key, text=job.text, phase=phase, t=t, options=job.options, correct=correct)


def precedent(key, value) -> SimpleNamespace:
    return SimpleNamespace(key=key, value=value)


def syntax(version: str) -> int:
    return VERSIONS[version].syntax


def test_is_an_environment(env):
    assert isinstance(env, Environment)
    assert ExecutableDrift.name == "executable_drift"
    assert env.phase_boundaries == [(PL, "full_reversal"), (2 * PL, "partial_reversal"), (3 * PL, "return")]


def test_stream_shape(env):
    tasks = list(env.tasks())
    assert [t.t for t in tasks] == list(range(4 * PL))
    assert [t.phase for t in tasks] == [p for p in PHASES for _ in range(PL)]
    for task in tasks:
        assert len(task.options) == env.n_actions == 3 and len(set(task.options)) == 3
        assert task.correct in task.options
        assert task.text.startswith(f"Job {task.key}: ")
        assert task.meta["version"] == env.versions_at(task.t)[task.meta["tool"]]
        job = env.jobs[task.key]
        assert task.correct == job.tool.invocation(job.subject, task.meta["version"])
    assert len({t.options for t in tasks if t.key == 0}) > 1  # shown in a fresh order


def test_correct_invocation_writes_a_real_verified_file(env):
    archive_key = next(k for k in range(env.n_keys) if env.jobs[k].tool.name == "archive")
    task = task_for(env, archive_key, "stable")
    outcome = env.execute(task, task.correct)
    assert outcome.success, outcome.message
    subject = env.jobs[archive_key].subject
    with tarfile.open(env.sandbox.root / task.correct.split()[-1]) as tar:
        packed = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    assert packed == env.jobs[archive_key].fixture and all(n.startswith(f"{subject}/") for n in packed)
    convert_key = next(k for k in range(env.n_keys) if env.jobs[k].tool.name == "convert")
    task = task_for(env, convert_key, "stable")
    assert env.execute(task, task.correct).success
    text = (env.sandbox.root / "out" / f"{env.jobs[convert_key].subject}.json").read_text()
    records = json.loads(text) if text.startswith("[") else [json.loads(line) for line in text.splitlines()]
    assert len(records) == 4 and set(records[0]) == {"id", "item", "qty"}


def test_observation_names_the_invocation(env):
    task = task_for(env, 0, "stable")
    wrong = next(o for o in task.options if o != task.correct)
    outcome = env.execute(task, wrong)
    (obs,) = outcome.observations
    assert (obs.key, obs.value, obs.holds, obs.t, obs.source) == (0, wrong, False, task.t, "outcome")
    assert obs.text == f'"{wrong}" failed: {outcome.message}'
    (good,) = env.execute(task, task.correct).observations
    assert good.holds and good.value == task.correct and good.text == f'"{task.correct}" succeeded'


def _attacks(outside) -> dict[str, str]:
    return {
        "publish --file release/x.txt --dest ../../outside/canary.txt": "escapes the sandbox",
        f"publish --file release/x.txt --dest {outside}/canary.txt": "escapes the sandbox",
        "publish --file release/x.txt --dest evil/canary.txt": "escapes the sandbox",  # symlink escape
        "archive --src evil --out build/stolen.tar.gz": "escapes the sandbox",
        f"convert --in data/x.csv --out=../{outside.name}/canary.txt --format array": "escapes the sandbox",
        f"rm -rf {outside}": "not an allowed tool",
        "bash -c 'echo pwned > ../../outside/canary.txt'": "not an allowed tool",
        "python -c 'import os'": "not an allowed tool",
    }


def test_escapes_and_foreign_tools_are_refused_and_change_nothing_outside(tmp_path, env):
    outside = tmp_path / "outside"
    outside.mkdir()
    canary = outside / "canary.txt"
    canary.write_text("untouched")
    before = sorted(os.listdir(tmp_path)), sorted(os.listdir(outside))
    task = task_for(env, 0, "stable")
    evil = env.sandbox.root / "evil"
    for action, why in _attacks(outside).items():
        if not evil.is_symlink():  # planted anew whenever a sweep (after a call that ran a tool) removed it
            evil.symlink_to(outside)
        outcome = env.execute(task, action)
        assert not outcome.success and "refused" in outcome.message and why in outcome.message, action
        assert outcome.observations[0].holds is False
    assert canary.read_text() == "untouched"
    assert (sorted(os.listdir(tmp_path)), sorted(os.listdir(outside))) == before


def test_leftovers_of_earlier_actions_do_not_change_later_outcomes():
    with ExecutableDrift(n_keys=2, tools=["publish", "archive"], phase_length=PL) as env:
        env.reset(0)
        publish, archive = task_for(env, 0, "stable"), task_for(env, 1, "stable")
        base = publish.correct.rsplit(" ", 1)[0]
        for blocker in ("build", "dist"):  # a file where the archive's output folder belongs
            (env.sandbox.root / blocker).write_text("in the way")  # planted between episodes
        assert env.execute(archive, archive.correct).success
        env.execute(publish, f"{base} reports/junk.txt")  # a stray file in the folder to archive
        assert not (env.sandbox.root / "reports" / "junk.txt").exists()  # swept after the call
        (env.sandbox.root / "reports" / "junk.txt").write_text("planted")
        assert env.execute(archive, archive.correct).success
        assert not (env.sandbox.root / "reports" / "junk.txt").exists()


def test_a_hanging_tool_is_stopped_and_scored_as_a_failure(tmp_path):
    with ExecutableDrift(phase_length=PL, time_limit=0.3, extra_tools={"hang": hang}) as env:
        env.reset(0)
        task = task_for(env, 0, "stable")
        start = time.monotonic()
        outcome = env.execute(task, "hang --forever")
        assert time.monotonic() - start < 3.0
        assert not outcome.success and "stopped" in outcome.message
        assert env.worker.stopped_calls == 1
        assert env.execute(task, task.correct).success  # a fresh worker carries on


def test_an_invocation_argparse_rejects_fails_without_the_worker(env):
    """The environment reports argparse's error itself, word for word what the tool would say."""
    task = task_for(env, 0, "stable")
    tool = env.jobs[0].tool.name
    stale = f"{tool} --no-such-flag x"
    outcome = env.execute(task, stale)
    assert not outcome.success and env.worker.pid is None  # no worker was needed
    version = env.versions_at(0)[tool]
    ok, message = env.worker.call(tool, ["--no-such-flag", "x"], version, str(env.sandbox.root), 5.0)
    assert not ok and outcome.message == message
    assert outcome.observations[0].text == f'"{stale}" failed: {message}'


def _find(seed_range, predicate):
    """The first (env, tool) over seeds whose stable -> full-reversal change satisfies `predicate`."""
    for seed in seed_range:
        env = ExecutableDrift(phase_length=PL)
        env.reset(seed)
        before, after = env.versions_at(0), env.versions_at(PL)
        for key, job in enumerate(env.jobs):
            if predicate(before[job.tool.name], after[job.tool.name]):
                return env, key
        env.close()
    raise AssertionError("no seed gives such a change")


def test_renamed_flags_make_the_old_invocation_fail_with_argparse_error():
    env, key = _find(range(50), lambda old, new: syntax(old) != syntax(new) and syntax(new) != 2)
    with env:
        old = task_for(env, key, "stable")
        assert env.execute(old, old.correct).success
        new = task_for(env, key, "full_reversal")
        assert new.correct != old.correct
        outcome = env.execute(new, old.correct)
        assert not outcome.success
        assert outcome.message.startswith(f"{env.jobs[key].tool.name}: error: unrecognized arguments: ")
        assert env.execute(new, new.correct).success


def test_a_changed_convention_leaves_the_wrong_artefact_which_the_check_catches():
    env, key = _find(range(50), lambda old, new: syntax(old) == syntax(new))
    with env:
        old, new = task_for(env, key, "stable"), task_for(env, key, "full_reversal")
        outcome = env.execute(new, old.correct)
        assert not outcome.success and outcome.message.startswith("check failed: ")
        assert env.execute(new, new.correct).success


def test_phases_change_the_regime_and_return_restores_it(env):
    stable, full, partial, back = (env.versions_at(i * PL) for i in range(4))
    assert back == stable
    assert all(full[name] != stable[name] for name in stable)
    moved = [name for name in stable if partial[name] != full[name]]
    assert len(moved) == round(0.5 * len(TOOLS))
    assert all(partial[name] != stable[name] for name in moved)  # a third version, not a return
    by_key = {}
    for task in env.tasks():
        by_key.setdefault((task.key, task.phase), task.correct)
    for key in range(env.n_keys):
        if (key, "stable") in by_key and (key, "return") in by_key:
            assert by_key[key, "stable"] == by_key[key, "return"]
    task = task_for(env, 1, "return")
    assert env.execute(task, by_key[1, "stable"]).success


def test_two_actions_partial_reversal_goes_back_to_stable():
    with ExecutableDrift(n_actions=2, phase_length=PL) as env:
        env.reset(5)
        stable, full, partial = env.versions_at(0), env.versions_at(PL), env.versions_at(2 * PL)
        assert all(partial[n] in (stable[n], full[n]) for n in stable)
        assert all(len(task.options) == 2 and task.correct in task.options for task in env.tasks())


def _trace(seed: int) -> list[tuple]:
    with ExecutableDrift(phase_length=PL) as env:
        env.reset(seed)
        rows = []
        for task in env.tasks():
            outcome = env.execute(task, task.options[task.t % len(task.options)])
            rows.append((task.key, task.text, task.options, task.correct, outcome.success, outcome.message))
        return rows


def test_same_seed_same_stream_and_outcomes_other_seed_differs():
    first = _trace(3)
    assert _trace(3) == first
    assert _trace(4) != first
    assert any(row[4] for row in first) and not all(row[4] for row in first)


GARBAGE = [
    "", " ", "'", '"unterminated', "\\", "\x00", "archive\x00 --src x", "archive --src", "archive --src ''",
    "archive --src . --out .", "archive --src . --out build", "publish --file . --dest .", "convert --in /",
    "configure --name x --port notanumber --out etc/x --format ini",
    "configure --name '[x' --port 1 --out e --format ini",
    "archive " + "a" * 5000, "☃ ünïcode --src ☃", "archive --src=", "--src reports", "-", "publish -- --file",
]  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(action=st.one_of(st.sampled_from(GARBAGE), st.text(max_size=80)))
def test_garbage_actions_never_raise(env, action):
    task = task_for(env, 0, "stable")
    outcome = env.execute(task, action)
    assert outcome.success is False and outcome.message
    assert all(o.value == action and not o.holds for o in outcome.observations)


def test_what_is_not_a_command_line_leaves_no_observation(env):
    task = task_for(env, 0, "stable")
    for action in (None, 5, b"archive", ["archive"], "", "   ", "'unclosed", "a" * 5000):
        outcome = env.execute(task, action)  # type: ignore[arg-type]
        assert not outcome.success and outcome.observations == () and "refused" in outcome.message
    (obs,) = env.execute(task, "rm -rf /").observations  # an invocation, refused: worth remembering
    assert not obs.holds and "not an allowed tool" in obs.text


def test_trials(env):
    task = task_for(env, 2, "full_reversal")
    env.execute(task, task.correct)  # the env now sits in the full-reversal phase
    stale = task_for(env, 2, "stable").correct
    assert env.trial(precedent(2, task.correct), "support")
    assert not env.trial(precedent(2, stale), "support")
    assert env.trial(precedent(2, task.correct), "counterfactual")
    assert not env.trial(precedent(2, stale), "counterfactual")  # it works under the other version
    assert env.trial(precedent(2, task.correct), "contamination")
    for kind in TRIAL_KINDS:
        assert not env.trial(precedent(99, task.correct), kind)
        assert not env.trial(precedent([1], task.correct), kind)
        assert not env.trial(precedent(2, None), kind)
        assert not env.trial(precedent(2, ""), kind)
    with pytest.raises(ValueError, match="kind"):
        env.trial(precedent(2, task.correct), "bogus")


def test_contamination_catches_a_precedent_that_breaks_another_job():
    with ExecutableDrift(n_keys=2, tools=["publish", "convert"], phase_length=PL) as env:
        env.reset(0)
        version = env.versions_at(0)["publish"]
        clobber = TOOLS["publish"].invocation("changelog", version).rsplit(" ", 1)[0] + " data/sales.csv"
        assert env.trial(precedent(0, TOOLS["publish"].invocation("changelog", version)), "contamination")
        assert not env.trial(precedent(0, clobber), "contamination")


def test_trials_touch_neither_the_stream_nor_the_main_sandbox(env):
    def snapshot():
        root = env.sandbox.root
        return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}

    tasks = list(env.tasks())
    env.execute(tasks[0], tasks[0].correct)
    before = snapshot()
    for kind in TRIAL_KINDS:
        env.trial(precedent(tasks[0].key, tasks[0].correct), kind)
    assert snapshot() == before
    assert list(env.tasks()) == tasks


def test_close_removes_the_sandbox_and_stops_the_worker(tmp_path):
    env = ExecutableDrift(phase_length=PL, sandbox_dir=str(tmp_path))
    env.reset(0)
    task = task_for(env, 0, "stable")
    assert env.execute(task, task.correct).success
    root, pid = env.sandbox.root, env.worker.pid
    assert root.parent.parent == tmp_path.resolve()
    env.reset(1)  # a reset starts a fresh sandbox
    assert not root.parent.exists()
    root = env.sandbox.root
    env.close()
    assert not root.parent.exists() and env.worker.pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(RuntimeError, match="reset"):
        env.tasks()
    env.close()  # idempotent


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"n_keys": 1}, "n_keys"),
        ({"n_actions": 7}, "n_actions"),
        ({"n_actions": 1}, "n_actions"),
        ({"phase_length": 0}, "phase_length"),
        ({"partial_fraction": 0.0}, "partial_fraction"),
        ({"time_limit": 0}, "time_limit"),
        ({"time_limit": True}, "time_limit"),
        ({"tools": ["archive", "archive"]}, "tools"),
        ({"tools": ["sh"]}, "tools"),
        ({"extra_tools": {"archive": hang}}, "extra_tools"),
        ({"extra_tools": {"anon": lambda a, v, r: ""}}, "extra_tools"),
        ({"sandbox_dir": "no/such/dir"}, "sandbox_dir"),
    ],
)
def test_bad_parameters_name_themselves(kwargs, name):
    with pytest.raises(ValueError, match=name):
        ExecutableDrift(**kwargs)


def test_bad_tasks_raise(env):
    task = task_for(env, 0, "stable")
    with pytest.raises(ValueError, match="task.key"):
        env.execute(Task(key=42, text="", phase="stable", t=0), task.correct)
    with pytest.raises(ValueError, match="task.t"):
        env.execute(Task(key=0, text="", phase="stable", t=10**6), task.correct)
    with pytest.raises(ValueError, match="seed"):
        env.reset(-1)


def test_a_stream_shuffles_the_options_exactly_as_random_sample_does():
    import random

    from envs.executable_drift.env import _shuffled

    for n in [*range(0, 8), 22, 60]:  # sample takes its pool path for a whole population of any size
        options = tuple(f"o{i}" for i in range(n))
        mine, theirs = random.Random(n), random.Random(n)
        for _ in range(200):
            assert _shuffled(mine, options) == tuple(theirs.sample(options, n))
        assert mine.random() == theirs.random()  # the same draws taken


def test_the_regime_of_an_episode_is_the_same_whichever_episode_was_asked_for_before():
    env = ExecutableDrift(phase_length=3, reversal_rate=0.3)
    try:
        env.reset(4)
        order = [5, 5, 0, 11, 2, 5, 7, 0]
        fresh = {t: env.versions_at(t) for t in sorted(set(order))}
        env.reset(4)
        assert [env.versions_at(t) for t in order] == [fresh[t] for t in order]
    finally:
        env.close()

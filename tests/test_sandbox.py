"""The sandbox gate, the tools' versions and the tool worker, each on its own."""

import contextlib
import os
import shlex
import statistics
import tarfile
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envs.executable_drift import sandbox as sandbox_module
from envs.executable_drift.sandbox import (
    MAX_INVOCATION_CHARS,
    Layout,
    Refused,
    Sandbox,
    check_invocation,
    split_invocation,
)
from envs.executable_drift.tools import FLAVOURS, TOOLS, VERSIONS, ToolError, subject_for
from envs.executable_drift.worker import ToolWorker


# Test-only tools: module-level so that the worker can import them by name.
def noop(argv: list[str], version: str, root: str) -> str:
    return "noop: ok"


def hang(argv: list[str], version: str, root: str) -> str:
    time.sleep(60)
    return "unreachable"


def crash(argv: list[str], version: str, root: str) -> str:
    os._exit(3)


def echo(argv: list[str], version: str, root: str) -> str:
    return "".join(argv)


@pytest.fixture
def tree(tmp_path):
    """A sandbox with a folder, a file, a link inside it and a link out of it; and an outside dir."""
    root, outside = tmp_path / "box", tmp_path / "outside"
    (root / "a").mkdir(parents=True)
    (root / "a" / "f.txt").write_text("inside")
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    (root / "in_link").symlink_to(root / "a")
    (root / "out_link").symlink_to(outside)
    return Sandbox(root), outside


def test_resolve_confines_paths(tree):
    box, outside = tree
    root = box.root
    assert box.resolve("a/f.txt") == root / "a" / "f.txt"
    assert box.resolve("a/new/file") == root / "a" / "new" / "file"
    assert box.resolve(str(root / "a")) == root / "a"  # absolute, but inside
    assert box.resolve("in_link/f.txt") == root / "a" / "f.txt"
    assert box.resolve(".") == root
    escapes = ["../outside/secret.txt", "a/../../outside", str(outside), "/etc/passwd", "out_link/secret.txt"]
    for bad in [*escapes, "out_link", "in_link/../../outside", "", "a\x00b"]:
        with pytest.raises(Refused):
            box.resolve(bad)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    parts=st.lists(st.sampled_from(["a", "f.txt", "..", ".", "", "in_link", "out_link", "new"]), max_size=6),
    absolute=st.booleans(),
)
def test_resolve_agrees_with_realpath(tree, parts, absolute):
    """The fast path for plain relative paths gives exactly what os.path.realpath gives."""
    box, _ = tree
    path = ("/" if absolute else "") + "/".join(parts)
    if not path:
        return
    real = os.path.realpath(os.path.join(box.root, path))
    inside = real == str(box.root) or real.startswith(str(box.root) + os.sep)
    if inside:
        assert str(box.resolve(path)) == real
    else:
        with pytest.raises(Refused):
            box.resolve(path)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(st.sampled_from(["a", "f.txt", "..", ".", ""]), max_size=5))
def test_relative_agrees_with_relpath(tree, parts):
    """The shortcut for normalised paths names every path inside the root exactly as relpath does."""
    box, _ = tree
    path = str(box.root) + "/" + "/".join(parts)
    assert box.relative(path) == os.path.relpath(path, box.root)
    assert box.relative(box.root / "a" / "f.txt") == "a/f.txt"
    assert box.relative("/elsewhere/f.txt") == "/elsewhere/f.txt"  # outside: named as it is


def parse(text: str, allowed, box) -> list[str]:
    argv = split_invocation(text)
    check_invocation(argv, allowed, box)
    return argv


def test_invocation_gate(tree):
    box, outside = tree
    allowed = {"archive", "publish"}
    assert parse("archive --src a --out build/a.tar.gz", allowed, box) == [
        "archive", "--src", "a", "--out", "build/a.tar.gz"]  # fmt: skip
    assert parse("publish --file 'a/f.txt' --dest=www/x", allowed, box)[2] == "a/f.txt"
    refusals = {
        "rm -rf a": "not an allowed tool",
        "/bin/sh -c 'ls'": "not an allowed tool",
        "archive --src ../outside --out x": "escapes the sandbox",
        f"archive --src {outside} --out x": "escapes the sandbox",
        "archive --src out_link --out x": "escapes the sandbox",
        "archive --src=../outside --out x": "escapes the sandbox",
        "archive --src a; rm -rf /": "escapes the sandbox",  # no shell: ';' is just a character
        "archive 'unclosed": "cannot parse",
        "   ": "empty invocation",
        "x" * (MAX_INVOCATION_CHARS + 1): "longer than",
    }
    for text, why in refusals.items():
        with pytest.raises(Refused, match=why):
            parse(text, allowed, box)
    with pytest.raises(Refused, match="must be a string"):
        split_invocation(None)  # type: ignore[arg-type]


@given(st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=60))
def test_plain_text_splits_like_shlex(text):
    """The fast split for plain ASCII must agree with shlex wherever it is taken."""
    if any(c in text for c in "'\"\\"):
        return
    assert text.split() == shlex.split(text)


def test_restore_rewrites_only_what_differs(tmp_path):
    box = Sandbox(tmp_path)
    files = {"d/x.txt": b"x", "d/sub/y.txt": b"y"}
    box.restore("d", files)
    inode = os.stat(tmp_path / "d" / "x.txt").st_ino
    box.restore("d", files)  # already right: untouched
    assert os.stat(tmp_path / "d" / "x.txt").st_ino == inode
    (tmp_path / "d" / "extra").write_text("junk")
    (tmp_path / "d" / "sub" / "y.txt").write_text("changed")
    box.restore("d", files)
    found = {str(p.relative_to(tmp_path)): p.read_bytes() for p in (tmp_path / "d").rglob("*") if p.is_file()}
    assert found == files


def test_restore_sees_a_same_size_rewrite_a_planted_link_and_what_it_is_told_a_tool_wrote(tmp_path):
    box = Sandbox(tmp_path)
    files = {"d/x.txt": b"x", "d/sub/y.txt": b"y"}
    box.restore("d", files)
    (tmp_path / "d" / "sub" / "y.txt").write_bytes(b"Y")  # in place, same size, from outside
    box.restore("d", files)
    assert (tmp_path / "d" / "sub" / "y.txt").read_bytes() == b"y"
    elsewhere = tmp_path.parent / f"{tmp_path.name}-elsewhere"
    (tmp_path / "d").rename(elsewhere)
    (tmp_path / "d").symlink_to(elsewhere)  # the same files, behind a link
    box.restore("d", files)
    assert not (tmp_path / "d").is_symlink() and (tmp_path / "d" / "x.txt").read_bytes() == b"x"
    reads = []
    holds = box._holds
    box._holds = lambda path, files: reads.append(path) or holds(path, files)
    box.restore("d", files)  # unchanged since: not read again
    box.forget("e/z.txt")  # a write elsewhere
    box.restore("d", files)
    box.forget("d/sub/y.txt")  # a tool's write in place, which the environment names
    box.restore("d", files)
    assert reads == ["d"]


SWEPT = Layout({"build/x.tar.gz": None, "build/deep/y.txt": 1}, frozenset({"build", "build/deep"}))


@pytest.fixture(params=["inotify", "status"])
def watching(request, monkeypatch):
    """The sweep with Linux's inotify on its folders, and as it is without it (every folder's status
    taken): the same removals either way."""
    if request.param == "status":
        monkeypatch.setattr(sandbox_module._Watch, "add", lambda self, path, fd: False)
    elif not os.path.isdir("/proc/self/fd"):
        pytest.skip("inotify watches folders through /proc/self/fd")
    return request.param


def test_a_folder_moved_out_between_sweeps_is_never_swept_and_its_replacement_is(tmp_path, watching):
    root = tmp_path / "box"
    (root / "build" / "deep").mkdir(parents=True)
    box = Sandbox(root)
    box.sweep(SWEPT, 2**20)  # holds build/ and build/deep/ from now on
    (root / "build").rename(tmp_path / "moved")  # out of the sandbox, its inode still held
    (tmp_path / "moved" / "mine.txt").write_text("not the sandbox's any more")
    (root / "build" / "deep").mkdir(parents=True)  # a new folder under the old name
    (root / "build" / "junk.txt").write_text("swept")
    (root / "build" / "deep" / "junk.txt").write_text("swept")
    box.sweep(SWEPT, 2**20)
    assert (tmp_path / "moved" / "mine.txt").read_text() == "not the sandbox's any more"
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*")) == ["build", "build/deep"]


def test_a_kept_folder_renamed_to_another_kept_name_is_swept_under_its_new_one(tmp_path, watching):
    layout = Layout({"build/x.tar.gz": None, "dist/x.tar.gz": None}, frozenset({"build", "dist"}))
    root = tmp_path / "box"
    (root / "build").mkdir(parents=True)
    box = Sandbox(root)
    box.sweep(layout, 2**20)  # holds (and watches) build/
    (root / "build").rename(root / "dist")  # the same folder under another name the layout keeps
    box.sweep(layout, 2**20, touched=[])
    (root / "build").mkdir()  # a new folder under the old name: the old one's watch is dropped
    box.sweep(layout, 2**20, touched=[])
    (root / "dist" / "junk.txt").write_text("planted")
    box.sweep(layout, 2**20, touched=[])
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*")) == ["build", "dist"]


def test_the_sandboxes_of_a_process_share_one_inotify_instance_and_each_sees_its_own_events(tmp_path):
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("inotify watches folders through /proc/self/fd")
    boxes = []
    for name in ("one", "two"):
        (tmp_path / name / "build" / "deep").mkdir(parents=True)
        boxes.append(Sandbox(tmp_path / name))
        boxes[-1].sweep(SWEPT, 2**20)
    one, two = boxes
    if one._watch._inotify is None:
        pytest.skip("no inotify here")
    assert one._watch._inotify is two._watch._inotify
    (tmp_path / "one" / "build" / "deep" / "planted.txt").write_text("from outside")
    two.sweep(SWEPT, 2**20, touched=[])  # reads the event of one's folder: kept for one's next sweep
    one.sweep(SWEPT, 2**20, touched=[])
    assert not (tmp_path / "one" / "build" / "deep" / "planted.txt").exists()
    instance = one._watch._inotify
    del one, boxes
    (tmp_path / "two" / "build" / "planted.txt").write_text("from outside")
    two.sweep(SWEPT, 2**20, touched=[])  # the instance outlives the sandbox that made it
    assert two._watch._inotify is instance and not (tmp_path / "two" / "build" / "planted.txt").exists()


def test_a_sweep_told_what_was_written_still_removes_what_was_planted_and_what_was_overwritten(
    tmp_path, watching
):
    root = tmp_path / "box"
    (root / "build" / "deep").mkdir(parents=True)
    (root / "build" / "deep" / "y.txt").write_text("y")
    box = Sandbox(root)
    box.sweep(SWEPT, 2**20)  # every folder listed: remembered as it is now
    (root / "build" / "deep" / "y.txt").write_text("too long for its layout size")  # in place: no new entry
    box.sweep(SWEPT, 2**20, touched=["build/deep/y.txt"])
    assert not (root / "build" / "deep" / "y.txt").exists()  # looked at because it was named
    (root / "build" / "deep" / "planted.txt").write_text("from outside")  # a new entry: its folder changed
    (root / "planted").mkdir()
    box.sweep(SWEPT, 2**20, touched=[])
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*")) == ["build", "build/deep"]
    (root / "build" / "x.tar.gz").write_bytes(b"x" * 100)
    box.sweep(SWEPT, 2**20, touched=["build/x.tar.gz"])
    assert (root / "build" / "x.tar.gz").exists()  # an output of any size, within the budget
    (root / "build" / "x.tar.gz").write_bytes(b"x" * 2000)  # grown in place past the budget
    box.sweep(SWEPT, 1000, touched=["build/x.tar.gz"])
    assert not (root / "build" / "x.tar.gz").exists()


def test_a_watched_sweep_takes_the_status_only_of_folders_that_had_an_event(tmp_path, monkeypatch):
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("inotify watches folders through /proc/self/fd")
    root = tmp_path / "box"
    (root / "build" / "deep").mkdir(parents=True)
    (root / "build" / "deep" / "y.txt").write_text("y")
    box = Sandbox(root)
    box.sweep(SWEPT, 2**20)
    if box._watch._inotify is None:
        pytest.skip("no inotify here")
    assert sorted(box._watched) == ["", "build/", "build/deep/"]
    looked = []
    status = sandbox_module._status
    monkeypatch.setattr(sandbox_module, "_status", lambda fd: looked.append(fd) or status(fd))
    box.sweep(SWEPT, 2**20, touched=[])
    assert looked == []  # nothing happened: no fstat at all
    (root / "build" / "deep" / "planted.txt").write_text("from outside")  # an event of build/deep/ alone
    box.sweep(SWEPT, 2**20, touched=[])
    assert looked == [box._watched["build/deep/"]]
    assert not (root / "build" / "deep" / "planted.txt").exists()
    (root / "build" / "deep" / "y.txt").write_text("too long for its layout size")  # in place, not told
    monkeypatch.setattr(box._watch, "changed", lambda: None)  # as when the queue of events overflowed
    box.sweep(SWEPT, 2**20, touched=[])
    assert not (root / "build" / "deep" / "y.txt").exists()  # every folder listed again


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
def test_the_folders_a_sweep_holds_are_closed_with_the_sandbox(tmp_path):
    (tmp_path / "build" / "deep").mkdir(parents=True)

    def open_here() -> list[str]:
        """What this process holds open under tmp_path (other tests' descriptors may come and go)."""
        held = []
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                held.append(os.readlink(f"/proc/self/fd/{fd}"))
        return sorted(p for p in held if p == str(tmp_path) or p.startswith(f"{tmp_path}/"))

    box = Sandbox(tmp_path)
    for _ in range(3):
        box.sweep(SWEPT, 2**20)
    assert open_here() == [str(tmp_path), f"{tmp_path}/build", f"{tmp_path}/build/deep"]  # held once each
    del box
    assert open_here() == []


def _run(tool, flavour_or_version, subject, root):
    """Run a job's invocation in-process; return None on success, else the failure message."""
    box = Sandbox(root)
    fixture = tool.fixture(subject)
    tool.prepare(box, subject, fixture)
    argv = shlex.split(tool.render(flavour_or_version[0], subject))
    try:
        tool.run(argv[1:], flavour_or_version[1], str(root))
    except ToolError as exc:
        return str(exc)
    return tool.verify(box, subject, fixture, flavour_or_version[1])


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_each_version_accepts_exactly_its_own_flavour(name, tmp_path):
    tool = TOOLS[name]
    subject = subject_for(tool, 7)  # a numbered round, not just the first name
    kinds = set()
    for version, v in VERSIONS.items():
        for flavour in FLAVOURS:
            problem = _run(tool, (flavour, version), subject, tmp_path)
            if flavour == (v.syntax, v.convention):
                assert problem is None, (version, flavour, problem)
            else:
                assert problem is not None, (version, flavour)
                kinds.add("usage" if f"{name}: error:" in problem else "check")
                assert str(tmp_path) not in problem  # messages never show the temp path
    assert kinds == {"usage", "check"}  # a stale invocation can fail either way


def test_real_artefacts_on_disk(tmp_path):
    archive, convert = TOOLS["archive"], TOOLS["convert"]
    assert _run(archive, ((0, 1), "2.0"), "reports", tmp_path) is None
    with tarfile.open(tmp_path / "dist" / "reports.tar.gz") as tar:
        assert sorted(tar.getnames()) == sorted(archive.fixture("reports"))
    assert _run(convert, ((1, 1), "3.0"), "sales", tmp_path) is None
    lines = (tmp_path / "out" / "sales.json").read_text().splitlines()
    assert len(lines) == 4 and all(line.startswith("{") for line in lines)


def test_tools_confine_paths_themselves(tmp_path):
    """Defence in depth: a tool refuses an escaping path even if the gate were bypassed."""
    (tmp_path / "box").mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    publish = TOOLS["publish"]
    with pytest.raises(ToolError, match="escapes the sandbox"):
        publish.run(["--file", "x", "--dest", "../outside.txt"], "1.0", str(tmp_path / "box"))
    assert outside.read_text() == "keep"


def test_archive_never_follows_links(tmp_path):
    box = tmp_path / "box"
    (box / "docs").mkdir(parents=True)
    (box / "docs" / "a.txt").write_text("a")
    (tmp_path / "secret.txt").write_text("secret")
    (box / "docs" / "leak.txt").symlink_to(tmp_path / "secret.txt")
    TOOLS["archive"].run(["--src", "docs", "--out", "build/docs.tar.gz"], "1.0", str(box))
    with tarfile.open(box / "build" / "docs.tar.gz") as tar:
        assert tar.getnames() == ["docs/a.txt"]


def test_worker_runs_tools_and_reports_failures(tmp_path):
    with ToolWorker() as worker:
        ok, message = worker.call("publish", ["--nope"], "1.0", str(tmp_path), 5.0)
        assert not ok and message.startswith("publish: error: unrecognized arguments: --nope")
        ok, message = worker.call(
            "archive", ["--src", "missing", "--out", "x.tgz"], "1.0", str(tmp_path), 5.0
        )
        assert not ok and message == "archive: error: missing: not a directory"


def test_worker_stops_a_hanging_call_and_recovers(tmp_path):
    with ToolWorker({"hang": hang, "noop": noop}) as worker:
        assert worker.call("noop", [], "", str(tmp_path), 5.0) == (True, "noop: ok")
        first = worker.pid
        start = time.monotonic()
        ok, message = worker.call("hang", [], "", str(tmp_path), 0.3)
        assert time.monotonic() - start < 3.0
        assert not ok and "stopped" in message and "0.3 s" in message
        assert worker.pid is None and worker.stopped_calls == 1
        with pytest.raises(ProcessLookupError):
            os.kill(first, 0)  # killed and reaped
        assert worker.call("noop", [], "", str(tmp_path), 5.0) == (True, "noop: ok")
        assert worker.pid not in (None, first)


def test_worker_survives_a_crashing_tool(tmp_path):
    with ToolWorker({"crash": crash, "noop": noop}) as worker:
        ok, message = worker.call("crash", [], "", str(tmp_path), 5.0)
        assert not ok and "died (exit code 3)" in message
        assert worker.call("noop", [], "", str(tmp_path), 5.0) == (True, "noop: ok")


def test_worker_carries_messages_longer_than_a_pipe(tmp_path):
    """A message that does not fit one read (the pipe holds 64 KiB) arrives whole, both ways."""
    words = [f"{i:07d}" for i in range(40_000)]  # about 280 KB
    with ToolWorker({"echo": echo}) as worker:
        assert worker.call("echo", words, "", str(tmp_path), 5.0) == (True, "".join(words))
        assert worker.call("echo", ["short"], "", str(tmp_path), 5.0) == (True, "short")


def test_worker_close_stops_the_process(tmp_path):
    worker = ToolWorker({"noop": noop})
    worker.call("noop", [], "", str(tmp_path), 5.0)
    pid = worker.pid
    worker.close()
    worker.close()  # idempotent
    assert worker.pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_worker_rejects_tools_it_cannot_send():
    with pytest.raises(ValueError, match="extra_tools"):
        ToolWorker({"anon": lambda argv, version, root: "x"})


def test_worker_overhead_per_call(tmp_path):
    """A round trip to the persistent worker costs far less than a process start (measured: tens of us)."""
    with ToolWorker({"noop": noop}) as worker:
        worker.call("noop", [], "", str(tmp_path), 5.0)
        times = []
        for _ in range(300):
            start = time.perf_counter()
            worker.call("noop", [], "", str(tmp_path), 5.0)
            times.append(time.perf_counter() - start)
    assert statistics.median(times) < 1e-3


def test_failure_messages_never_name_the_temp_dir(tmp_path):
    box = tmp_path / "box"
    (box / "release").mkdir(parents=True)
    (box / "release" / "a.txt").write_text("a")
    publish = TOOLS["publish"]
    with pytest.raises(ToolError) as same:
        publish.run(["--file", "release/a.txt", "--dest", "release/a.txt"], "1.0", str(box))
    with pytest.raises(ToolError) as missing:
        publish.run(["--file", "release/none.txt", "--dest", "www/a.txt"], "1.0", str(box))
    assert "release/a.txt" in str(same.value) and "No such file" in str(missing.value)
    for message in (str(same.value), str(missing.value)):
        assert str(tmp_path) not in message


def test_a_memoised_archive_check_ignores_the_gzip_timestamp_but_not_the_content(tmp_path):
    tool, subject = TOOLS["archive"], "reports"
    fixture = tool.fixture(subject)
    assert _run(tool, ((0, 0), "1.0"), subject, tmp_path) is None
    out = tmp_path / tool.params(subject, tool.conventions[0])["out"]
    data = out.read_bytes()
    out.write_bytes(data[:4] + b"\x01\x02\x03\x04" + data[8:])  # another second's tarball of the same files
    assert tool.verify(Sandbox(tmp_path), subject, fixture, "1.0") is None
    out.write_bytes(data[: len(data) // 2])  # a truncated one
    assert tool.verify(Sandbox(tmp_path), subject, fixture, "1.0").startswith("check failed:")
    assert tool.verify(Sandbox(tmp_path), subject, {**fixture, "reports/x": b"x"}, "1.0") is not None


def test_clearing_a_path_the_last_sweep_saw_absent_still_removes_what_was_planted_there_since(
    tmp_path, watching
):
    root = tmp_path / "box"
    (root / "build" / "deep").mkdir(parents=True)
    box = Sandbox(root)
    box.sweep(SWEPT, 2**20)  # build/ listed without x.tar.gz
    box.clear("build/x.tar.gz")  # nothing there: nothing done
    (root / "build" / "x.tar.gz").write_text("planted")  # a new entry: build/ changed
    box.clear("build/x.tar.gz")
    assert not (root / "build" / "x.tar.gz").exists()
    box.sweep(SWEPT, 2**20)
    (root / "build").rename(tmp_path / "moved")  # the held folder moved out, a file in its place
    (root / "build").write_text("in the way")
    box.clear("build/x.tar.gz")
    assert not (root / "build").exists() and (tmp_path / "moved").is_dir()


def test_a_written_path_is_named_as_relative_names_it_normalised(tmp_path):
    box = Sandbox(tmp_path)
    for path in ["out/x.json", "./out//x.json", "a/../b", str(tmp_path / "c" / "d"), "/elsewhere/x", "."]:
        expected = box.relative(os.path.normpath(os.path.join(box.root, path)))
        assert box.named(path) == expected
        assert box.named(path) == expected  # kept

"""Signals to the processes that run others: the robustness map's driver (`python -m runners.map`) and the
local model server (`python -m runners.llm.local.serve -- COMMAND`). Left to Python's defaults, SIGTERM
ended either at once and left its children running: the map's multirun went on writing streams, the
model server kept its port and COMMAND ran on. Now both pass the signal on (`runners.launch.jobs.Relay`)
and exit only once their children have."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from analysis.streamlog.stream import PARTIAL_EPISODES
from runners.launch import jobs
from runners.llm.local.serve import free_port, port_in_use
from runners.llm.local.serve import main as serve_main
from runners.run import PROJECT_ROOT

ENV = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}

linux_only = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds children through /proc")


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (Linux)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    found, todo = [], [pid]
    while todo:
        above = todo.pop()
        below = [child for child, parent in parents.items() if parent == above]
        found += below
        todo += below
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def wait_gone(pids: list[int], seconds: float) -> list[int]:
    """The processes of `pids` still alive after waiting up to `seconds` for them to exit."""
    deadline = time.monotonic() + seconds
    while any(map(alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [pid for pid in pids if alive(pid)]


def kill_all(pids: list[int]) -> None:
    """This test's own processes, should any have survived."""
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


# ------------------------------------------------------------------------------------ the shared relay


def _signal_me(signum: int, after: float) -> threading.Timer:
    timer = threading.Timer(after, os.kill, args=(os.getpid(), signum))
    timer.start()
    return timer


def test_a_sigterm_while_the_relay_runs_a_child_is_passed_on_and_stops_once_the_child_has_exited():
    before = signal.getsignal(signal.SIGTERM)
    child = "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *_: sys.exit(7)); time.sleep(30)"
    with jobs.Relay() as relay:
        _signal_me(signal.SIGTERM, 1.0)
        started = time.monotonic()
        with pytest.raises(jobs.Stopped) as stop:
            relay.run([sys.executable, "-c", child])
        assert stop.value.signum == signal.SIGTERM and time.monotonic() - started < 10
        with pytest.raises(jobs.Stopped):  # no further command starts once stopped
            relay.run([sys.executable, "-c", "raise SystemExit(0)"])
    assert signal.getsignal(signal.SIGTERM) is before  # the handler is the relay's no more


def test_a_sigterm_between_the_relays_children_stops_at_once():
    with jobs.Relay() as relay:
        assert relay.run([sys.executable, "-c", "raise SystemExit(3)"]) == 3
        with pytest.raises(jobs.Stopped) as stop:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the signal raises before this ends
        assert stop.value.signum == signal.SIGTERM


# ------------------------------------------------------------------------------------ runners.map

MAP = {"experiment": "robustness_map", "tuning_seeds": [1000], "tune": {"reactive": {"c": [1, 3]}}}


def partial_logs(results: Path) -> dict[Path, int]:
    return {p: p.read_bytes().count(b"\n") - 1 for p in results.glob(f"runs/**/{PARTIAL_EPISODES}")}


@linux_only
def test_sigterm_to_the_map_driver_stops_its_multirun_and_the_driver_exits_after_it(tmp_path):
    declaration = tmp_path / "long.yaml"
    declaration.write_text(json.dumps(MAP), encoding="utf-8")
    results = tmp_path / "map"
    command = [sys.executable, "-m", "runners.map", "--map", str(declaration), "memory=reactive",
               "env.noise=0,0.2", "env.reversal_rate=0", "env.phase_length=10000", "seeds=[0]",
               f"results_dir={results}", "progress=false", "hydra.launcher.n_jobs=2"]  # fmt: skip
    out, err = tmp_path / "stdout", tmp_path / "stderr"  # files: a surviving child holds no pipe open
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        proc = subprocess.Popen(command, cwd=tmp_path, env=ENV, stdout=stdout, stderr=stderr)
    below: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            logs = partial_logs(results)
            if len(logs) == 2 and min(logs.values()) >= 100:
                break
            time.sleep(0.05)
        below = descendants(proc.pid)  # the multirun and its workers
        assert len(below) >= 3, (proc.poll(), partial_logs(results), err.read_text())
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        status = proc.wait(timeout=60)
        stopped = time.monotonic() - sent
        survivors = wait_gone(below, 0.5)  # the driver waited for them: nothing is left by now
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_all(below)
    assert status == 128 + signal.SIGTERM and stopped < 30, (status, stopped, err.read_text())
    assert survivors == [], err.read_text()
    assert "map: stopped by SIGTERM" in err.read_text() and "Traceback" not in err.read_text()
    logged = partial_logs(results)
    time.sleep(1.0)
    assert partial_logs(results) == logged and len(logged) == 2  # nothing writes on
    assert not (results / "jobs" / "evaluate").exists()  # and the second stage never started


# ------------------------------------------------------------------------------------ serve -- COMMAND

# The model server, stood in for by a loopback HTTP server that answers /v1/models (and stops by itself).
STUB_SERVER = """
import http.server, sys, time
class Models(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b'{"data": []}')
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Models)
server.timeout = 0.2
end = time.monotonic() + 60
while time.monotonic() < end:
    server.handle_request()
"""

SERVE = """
import sys
from pathlib import Path
import runners.llm.local.serve as serve
serve.require_local_llm = lambda model: Path("stub.gguf")
serve.server_command = lambda model, port, *rest: [sys.executable, "-c", {stub!r}, str(port)]
serve.main(sys.argv[1:])
"""


@linux_only
def test_sigterm_to_serve_stops_the_command_and_the_server_and_frees_the_port(tmp_path):
    port = free_port()
    marker = tmp_path / "running"
    cmd = f"import pathlib, time; pathlib.Path({str(marker)!r}).touch(); time.sleep(60)"
    driver = textwrap.dedent(SERVE).format(stub=textwrap.dedent(STUB_SERVER))
    command = [sys.executable, "-c", driver, "--port", str(port), "--", sys.executable, "-c", cmd]
    err = tmp_path / "stderr"
    with open(err, "wb") as stderr:
        proc = subprocess.Popen(command, cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL, stderr=stderr)
    below: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None and not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        below = descendants(proc.pid)  # the stand-in server and COMMAND
        assert len(below) == 2 and port_in_use(port), (proc.poll(), err.read_text())
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        status = proc.wait(timeout=30)
        stopped = time.monotonic() - sent
        survivors = wait_gone(below, 0.5)
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_all(below)
    assert status == 128 + signal.SIGTERM and stopped < 15, (status, stopped, err.read_text())
    assert survivors == [] and not port_in_use(port), err.read_text()
    assert "Traceback" not in err.read_text()


@pytest.mark.parametrize("port", ["70000", "-1", "http"])
def test_a_port_out_of_range_is_an_argument_error_naming_port(port, capsys):
    with pytest.raises(SystemExit) as exit_:
        serve_main(["--port", port, "--", "true"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "argument --port:" in err and "Traceback" not in err

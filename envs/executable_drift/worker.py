"""Tool execution with time limits, in one persistent child process.

A paper run makes about 10^5 tool calls, too many to start a process for each. `ToolWorker` keeps one
child (`python -m envs.executable_drift.worker`) that imports the tools once and serves calls over a pipe:
length-prefixed pickles, one request and one reply per call. The parent waits for a reply at most the
call's time limit; a call that overruns (or a child that dies) is stopped by killing that child, and a
fresh one is started for the next call. A call whose child died is counted in `died_calls`: the
environment runs it again from a clean sandbox, so that a worker killed from outside changes no outcome.
The child's stdout is the reply pipe, so tools never print.

The child keeps no state between calls, so the environments of one process that are open at the same
time (a run's seeds) share one child through `SharedToolWorker` handles: starting a Python child costs
about as much CPU as a thousand calls. The last handle to close stops it.

Those streams' calls can also share a round trip (`SharedToolWorker.submit`): the calls submitted while
the event loop runs the streams go to the child as one batch, which it runs one after another, each under
its own time limit (an alarm in the child), and answers in one message. On one core a round trip is two
process switches, and each side then runs with the other's data in its caches: calls one at a time cost
the child several times the tool's own work. A batch that does not come back whole (a call overran, the
child died, or the batch as a whole outlived the sum of its limits) is ended by killing the child, and
its unanswered calls are left to their callers to run again one at a time, where the rules above decide.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import select
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from envs.executable_drift.tools import TOOLS, ToolError

ToolFn = Callable[[list[str], str, str], str]
"""A tool: (argv without the tool name, version, sandbox root) -> success message; raises on failure."""

_HEADER = 4
_CHUNK = 2**16  # bytes asked of the first read of a message (a pipe's default capacity)
_MAX_FILE_BYTES = 16 * 2**20  # RLIMIT_FSIZE in the child: no tool call can fill the disk
_STARTUP_SECONDS = 60.0
_START_ATTEMPTS = 3
_BATCH_GRACE_S = 1.0  # beyond the sum of a batch's time limits, before the parent gives up on it

Call = tuple[str, list[str], str, str, float]
"""One tool call: (tool, argv without the tool name, version, sandbox root, time limit in seconds)."""


@dataclass(frozen=True, slots=True)
class CallResult:
    """What one call came to: `ok` and the tool's message; `stopped` when it overran or its process
    died (the worker was restarted, so the call's writes are unknown), `died` for the latter alone."""

    ok: bool
    message: str
    stopped: bool = False
    died: bool = False


class ToolWorker:
    """Runs tool calls in a persistent child process, killed and restarted when a call overruns.

    `extra_tools` adds tools by name (functions importable by module and name, as pickle sends them;
    tests use it for a tool that hangs). The child starts on the first call and after every kill.
    """

    def __init__(self, extra_tools: Mapping[str, ToolFn] | None = None) -> None:
        try:
            self._init = pickle.dumps(dict(extra_tools or {}))
        except (pickle.PicklingError, AttributeError, TypeError) as exc:
            raise ValueError(f"extra_tools must be importable module-level functions: {exc}") from None
        self._proc: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize | None = None
        self.stopped_calls = 0  # calls that overran or crashed, each costing a restart
        self.died_calls = 0  # of those, calls whose process died (killed from outside, or crashed)

    @property
    def pid(self) -> int | None:
        """The child's process id, or None when no child is running."""
        return self._proc.pid if self._proc is not None else None

    def call(
        self, tool: str, argv: list[str], version: str, root: str, time_limit: float
    ) -> tuple[bool, str]:
        """Run `tool` and return (ok, message); a call longer than `time_limit` seconds is stopped."""
        result = self.run((tool, argv, version, root, time_limit))
        return result.ok, result.message

    def run(self, call: Call) -> CallResult:
        """`call`, with how it ended (`CallResult`)."""
        tool, argv, version, root, time_limit = call
        self._ensure_started()
        try:
            self._send((tool, argv, version, root))
            ok, message = self._receive(time.monotonic() + time_limit)
            return CallResult(ok, message)
        except TimeoutError:
            self._stop()
            self.stopped_calls += 1
            return CallResult(
                False, f"{tool}: stopped: no result within the time limit of {time_limit:g} s", stopped=True
            )
        except (EOFError, OSError):
            code = self._stop()
            self.stopped_calls += 1
            self.died_calls += 1
            return CallResult(
                False, f"{tool}: stopped: the tool process died (exit code {code})", stopped=True, died=True
            )

    def run_batch(self, calls: list[Call]) -> list[CallResult | None]:
        """The calls' results in one round trip; None for each call left unanswered because the batch
        did not come back whole (the child is then stopped, and the caller runs that call again alone)."""
        if len(calls) == 1:
            return [self.run(calls[0])]
        self._ensure_started()
        try:
            self._send(calls)
            replies = self._receive(time.monotonic() + sum(c[4] for c in calls) + _BATCH_GRACE_S)
        except (TimeoutError, EOFError, OSError):
            replies = []
        if len(replies) < len(calls):
            self._stop()
        results: list[CallResult | None] = [CallResult(ok, message) for ok, message in replies]
        return results + [None] * (len(calls) - len(results))

    def close(self) -> None:
        """Stop the child (idempotent)."""
        self._stop()

    def __enter__(self) -> ToolWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _ensure_started(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            self._stop()
            self._start()

    def _start(self) -> None:
        """Start a child; one that dies while it starts (killed, e.g. by a kill meant for its
        predecessor) is started again, up to _START_ATTEMPTS times in all."""
        for attempt in range(1, _START_ATTEMPTS + 1):
            try:
                self._start_once()
                return
            except RuntimeError:
                if attempt == _START_ATTEMPTS:
                    raise

    def _start_once(self) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "envs.executable_drift.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        self._finalizer = weakref.finalize(self, _kill, self._proc)
        try:
            self._send(self._init)
            ready = self._receive(time.monotonic() + _STARTUP_SECONDS)
        except (TimeoutError, EOFError, OSError) as exc:
            code = self._stop()
            raise RuntimeError(f"the tool worker did not start (exit code {code}): {exc!r}") from None
        if ready != "ready":
            self._stop()
            raise RuntimeError(f"the tool worker failed to start: {ready}")

    def _stop(self) -> int | None:
        if self._proc is None:
            return None
        proc, self._proc = self._proc, None
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        return _kill(proc)

    def _send(self, message: Any) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        _write(self._proc.stdin.fileno(), message)

    def _receive(self, deadline: float) -> Any:
        assert self._proc is not None and self._proc.stdout is not None
        return pickle.loads(_read_message(self._proc.stdout.fileno(), deadline))


class _Shared:
    """What the open handles with the same extra tools share: the worker, the lock its pipe is used
    under, the handles' ids, and the calls submitted for the next batch with their futures."""

    def __init__(self, extra_tools: Mapping[str, ToolFn]) -> None:
        self.worker = ToolWorker(extra_tools)
        self.lock = threading.Lock()
        self.handles: set[int] = set()
        self.pending: list[tuple[Call, asyncio.Future[CallResult | None]]] = []

    def submit(self, call: Call) -> asyncio.Future[CallResult | None]:
        """Queue `call` for the batch sent once the event loop has run every stream that is ready now."""
        loop = asyncio.get_running_loop()
        if not self.pending:
            loop.call_soon(self.flush)
        future: asyncio.Future[CallResult | None] = loop.create_future()
        self.pending.append((call, future))
        return future

    def flush(self) -> None:
        """Send the queued calls (those whose caller still waits) as one batch and hand out the results."""
        queued, self.pending = [(c, f) for c, f in self.pending if not f.done()], []
        if not queued:
            return
        with self.lock:
            results = self.worker.run_batch([call for call, _ in queued])
        for (_, future), result in zip(queued, results, strict=True):
            future.set_result(result)


class SharedToolWorker:
    """A handle on the `ToolWorker` that every open handle with the same extra tools in this process
    shares. Calls go through the worker's lock (a call is one request and one reply on one pipe), or
    wait in `submit` for a batch with the other streams' calls. `close` releases the handle and the last
    open handle stops the worker; like a `ToolWorker`, a closed handle opens again on its next call."""

    _open: ClassVar[dict[bytes, _Shared]] = {}
    _guard: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, extra_tools: Mapping[str, ToolFn] | None = None) -> None:
        self._extra = dict(extra_tools or {})
        self._tools = ToolWorker(self._extra)._init  # validates the tools (starts nothing); the share key
        self._shared: _Shared | None = None

    @property
    def pid(self) -> int | None:
        """The shared child's process id; None when this handle is closed or no child runs."""
        return self._shared.worker.pid if self._shared is not None else None

    @property
    def stopped_calls(self) -> int:
        """Calls of the shared worker that overran or crashed (through any handle)."""
        return self._shared.worker.stopped_calls if self._shared is not None else 0

    @property
    def died_calls(self) -> int:
        """Calls of the shared worker whose process died (through any handle)."""
        return self._shared.worker.died_calls if self._shared is not None else 0

    def call(
        self, tool: str, argv: list[str], version: str, root: str, time_limit: float
    ) -> tuple[bool, str]:
        """`ToolWorker.call` on the shared worker."""
        result = self.run((tool, argv, version, root, time_limit))
        return result.ok, result.message

    def run(self, call: Call) -> CallResult:
        """`ToolWorker.run` on the shared worker, at once."""
        shared = self._handle()
        with shared.lock:
            return shared.worker.run(call)

    async def submit(self, call: Call) -> CallResult | None:
        """`call` in a batch with the calls the other handles submit meanwhile (see the module
        docstring); None when the batch came back without its result: then run it again alone."""
        return await self._handle().submit(call)

    def close(self) -> None:
        """Release this handle (idempotent); the last open handle stops the worker."""
        shared, self._shared = self._shared, None
        if shared is None:
            return
        with self._guard:
            shared.handles.discard(id(self))
            if shared.handles:
                return
            del self._open[self._tools]
        shared.worker.close()

    def __enter__(self) -> SharedToolWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _handle(self) -> _Shared:
        if self._shared is None:
            with self._guard:
                shared = self._open.get(self._tools)
                if shared is None:
                    shared = self._open[self._tools] = _Shared(self._extra)
                shared.handles.add(id(self))
                self._shared = shared
        return self._shared


def _kill(proc: subprocess.Popen[bytes]) -> int | None:
    """Kill and reap one child; return its exit code."""
    if proc.poll() is None:
        proc.kill()
    code = proc.wait()
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            stream.close()
    return code


def _write(fd: int, message: Any) -> None:
    """Send one message with one write(2) in the common case: no buffer to copy into and flush."""
    body = message if isinstance(message, bytes) else pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    data = memoryview(len(body).to_bytes(_HEADER, "little") + body)
    while data:
        data = data[os.write(fd, data) :]


def _read_message(fd: int, deadline: float | None) -> bytes:
    """One message's body. Each side sends one message and then waits for the other's, so the first read
    (up to _CHUNK bytes) normally brings the header and the whole body: one read(2) per message."""
    data = _read_some(fd, _CHUNK, deadline)
    while len(data) < _HEADER:
        data += _read_some(fd, _HEADER - len(data), deadline)
    size = int.from_bytes(data[:_HEADER], "little")
    body = data[_HEADER:]
    if len(body) > size:
        raise OSError("tool worker protocol: bytes beyond the end of a message")
    while len(body) < size:
        body += _read_some(fd, size - len(body), deadline)
    return body


def _read_some(fd: int, size: int, deadline: float | None) -> bytes:
    """1 to `size` bytes from `fd`; TimeoutError past `deadline`, EOFError when the writer is gone."""
    if deadline is not None:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            raise TimeoutError
    chunk = os.read(fd, size)
    if not chunk:
        raise EOFError
    return chunk


def serve() -> None:
    """The child's loop: read (tool, argv, version, root), run it, reply (ok, message); or read a batch of
    (tool, argv, version, root, time limit), run its calls in turn and reply with the list of (ok, message)
    (cut short at a call that overran); exit at EOF."""
    import resource

    requests = sys.stdin.buffer.fileno()
    replies = os.dup(sys.stdout.fileno())
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # a stray print must not corrupt the reply pipe
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when this process ends
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an oversized write fails with EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (_MAX_FILE_BYTES, _MAX_FILE_BYTES))
    try:
        registry: dict[str, ToolFn] = {name: tool.run for name, tool in TOOLS.items()}
        registry.update(pickle.loads(_read_message(requests, None)))
    except Exception as exc:  # report why, rather than die silently
        _write(replies, f"{type(exc).__name__}: {exc}")
        return
    _write(replies, "ready")
    signal.signal(signal.SIGALRM, _overrun)
    while True:
        try:
            request = pickle.loads(_read_message(requests, None))
        except EOFError:
            return
        if isinstance(request, tuple):
            _write(replies, _answer(registry, *request))
            continue
        answers = []
        try:
            for tool, argv, version, root, limit in request:
                signal.setitimer(signal.ITIMER_REAL, limit)
                try:
                    answers.append(_answer(registry, tool, argv, version, root))
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
        except _Overrun:
            pass  # the answers so far: the parent stops this process and has the rest run again alone
        _write(replies, answers)


class _Overrun(BaseException):
    """A batched call ran past its time limit (a BaseException: a tool's `except Exception` must not
    swallow it)."""


def _overrun(signum: int, frame: Any) -> None:
    raise _Overrun


def _answer(
    registry: Mapping[str, ToolFn], tool: str, argv: list[str], version: str, root: str
) -> tuple[bool, str]:
    """Run one call in the child: (ok, message), the message without the sandbox's location."""
    try:
        ok, text = True, registry[tool](argv, version, root)
    except ToolError as exc:
        ok, text = False, str(exc)
    except Exception as exc:  # a tool's bug is a failed call, not a dead worker
        ok, text = False, f"{tool}: internal error: {type(exc).__name__}: {exc}"
    return ok, _without(root, text)


def _without(root: str, text: str) -> str:
    """`text` without the sandbox's absolute location (messages become prompts: no temp paths)."""
    root = root.rstrip(os.sep)
    parent = os.path.dirname(root)
    if parent not in text:
        return text
    return text.replace(root + os.sep, "").replace(root, ".").replace(parent, "..")


if __name__ == "__main__":
    serve()

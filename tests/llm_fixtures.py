"""Fixtures for the LLM backend tests: a scripted stub endpoint (unit tests) and the real local server.

Test modules import the fixtures they use from here (tests/conftest.py is shared)."""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from runners.llm.local_llm import LocalLLMUnavailable, local_llm_server, require_local_llm


def completion(
    text: str = "Answer: A", usage: bool = True, top_logprobs: list[tuple[str, float]] | None = None
) -> dict:
    """A chat completion body as OpenAI and llama.cpp return it."""
    choice: dict = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
    if top_logprobs is not None:
        alternatives = [{"token": t, "logprob": lp, "bytes": None} for t, lp in top_logprobs]
        first = {"token": top_logprobs[0][0], "logprob": top_logprobs[0][1], "top_logprobs": alternatives}
        choice["logprobs"] = {"content": [first]}
    body: dict = {
        "id": "stub",
        "object": "chat.completion",
        "created": 0,
        "model": "stub",
        "choices": [choice],
    }
    if usage:
        body["usage"] = {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}
    return body


def echoed(body: dict, favour: str = "", usage: bool = False) -> dict:
    """A /completions body for an echo-with-logprobs request, as vLLM returns it: the prompt split into
    whitespace-led tokens, each scored -1 per character, except that a token containing `favour`
    scores 0 (so the option named `favour` is the likeliest); one generated token " x"."""
    prompt = body["prompt"]
    tokens, offsets, start = [], [], 0
    for i, ch in enumerate(prompt):
        if i > start and ch in " \n":
            tokens.append(prompt[start:i])
            offsets.append(start)
            start = i
    tokens += [prompt[start:], " x"]
    offsets += [start, len(prompt)]
    scores = [0.0 if favour and favour in t else -float(len(t)) for t in tokens]
    scores[0] = None
    choice = {
        "index": 0,
        "text": prompt + " x",
        "logprobs": {
            "tokens": tokens,
            "token_logprobs": scores,
            "text_offset": offsets,
            "top_logprobs": None,
        },
        "finish_reason": "length",
    }
    answer: dict = {"id": "stub", "object": "text_completion", "model": "stub", "choices": [choice]}
    if usage:
        answer["usage"] = {"prompt_tokens": len(tokens) - 1, "completion_tokens": 1}
    return answer


@dataclass
class StubReply:
    status: int = 200
    body: dict | bytes = field(default_factory=completion)
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


class StubServer:
    """A loopback endpoint that answers POSTs from a script of StubReply (then a default completion) and
    records every request body (and header set) it received and the most requests it held at once."""

    def __init__(self) -> None:
        self.script: deque[StubReply] = deque()
        self.requests: list[dict] = []
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []
        self.in_flight = self.max_in_flight = 0
        self._lock = threading.Lock()
        self.default = StubReply()
        # When set, answers every request that the script does not (from the request body).
        self.respond: Callable[[dict], dict] | None = None
        self._stop = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def push(self, *replies: StubReply) -> None:
        self.script.extend(replies)

    def start(self) -> StubServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with stub._lock:
                    stub.requests.append(json.loads(body))
                    stub.paths.append(self.path)
                    stub.headers.append({k.lower(): v for k, v in self.headers.items()})
                    if stub.script:
                        reply = stub.script.popleft()
                    elif stub.respond is not None:
                        reply = StubReply(body=stub.respond(stub.requests[-1]))
                    else:
                        reply = stub.default
                    stub.in_flight += 1
                    stub.max_in_flight = max(stub.max_in_flight, stub.in_flight)
                if reply.delay:
                    stub._stop.wait(reply.delay)
                with stub._lock:
                    stub.in_flight -= 1
                payload = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # the client gave up (a timeout test)

        return Handler


@pytest.fixture
def stub_server() -> Iterator[StubServer]:
    server = StubServer().start()
    yield server
    server.stop()


def _serve(model: str, n_ctx: int) -> Iterator[str]:
    try:
        require_local_llm(model)
    except LocalLLMUnavailable as exc:
        pytest.skip(f"local-llm extra not installed ({exc})")
    with local_llm_server(n_ctx=n_ctx, model=model) as base_url:
        yield base_url


@pytest.fixture(scope="session")
def llm_server() -> Iterator[str]:
    """The base_url of a real SmolLM2 llama.cpp server, started once per test session."""
    yield from _serve("smollm2", 4096)


@pytest.fixture(scope="session")
def gemma_server() -> Iterator[str]:
    """The base_url of a real Gemma 3 270M server (runners.llm.llama_server), started once per session."""
    yield from _serve("gemma3", 2048)

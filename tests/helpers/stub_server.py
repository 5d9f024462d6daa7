"""A scripted loopback endpoint for the LLM backend tests (the `stub_server` fixture), and the bodies it
answers with: chat completions as OpenAI and llama.cpp return them, echoed prompts with log-probabilities
as vLLM returns them."""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

from tests.helpers.loopback import LoopbackServer, send


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
    """One answer. `trickle`: send the headers, then the body one byte every `trickle` seconds (a
    slow-loris endpoint). `flood`: instead of `body`, stream that many bytes of filler without a
    Content-Length, until the client hangs up (`flooded` counts what was sent)."""

    status: int = 200
    body: dict | bytes = field(default_factory=completion)
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    trickle: float = 0.0
    flood: int = 0


MAX_TRICKLE_S = 60.0  # a trickled body is abandoned after this long, so a test can never hang on it


class StubServer(LoopbackServer):
    """A loopback endpoint that answers POSTs from a script of StubReply (then `respond`, then a default
    completion) and records every request body, path and header set it received and the most requests
    it held at once."""

    url_path = "/v1"

    def __init__(self) -> None:
        super().__init__()
        self.script: deque[StubReply] = deque()
        self.requests: list[dict] = []
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []
        self.in_flight = self.max_in_flight = 0
        self.flooded = 0
        self.default = StubReply()
        # When set, answers every request that the script does not: from the request body (its headers
        # are `headers[-1]`), a body or a whole StubReply.
        self.respond: Callable[[dict], dict | StubReply] | None = None

    def push(self, *replies: StubReply) -> None:
        self.script.extend(replies)

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        if request.command != "POST":
            send(request, 405, {}, b"")
            return
        body = request.rfile.read(int(request.headers.get("Content-Length") or 0))
        with self._lock:
            self.requests.append(json.loads(body))
            self.paths.append(request.path)
            self.headers.append({k.lower(): v for k, v in request.headers.items()})
            if self.script:
                reply = self.script.popleft()
            elif self.respond is not None:
                answer = self.respond(self.requests[-1])
                reply = answer if isinstance(answer, StubReply) else StubReply(body=answer)
            else:
                reply = self.default
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        if reply.delay:
            self._stop.wait(reply.delay)
        with self._lock:
            self.in_flight -= 1
        payload = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
        headers = {"Content-Type": "application/json", **reply.headers}
        if reply.flood:
            self._flood(request, reply.status, headers, reply.flood)
        elif reply.trickle:
            self._trickle(request, reply.status, headers, payload, reply.trickle)
        else:
            send(request, reply.status, headers, payload)

    def _trickle(
        self, request: BaseHTTPRequestHandler, status: int, headers: dict[str, str], body: bytes, every: float
    ) -> None:
        request.send_response(status)
        for name, value in {**headers, "Content-Length": str(len(body))}.items():
            request.send_header(name, value)
        request.end_headers()
        deadline = time.monotonic() + MAX_TRICKLE_S
        try:
            for i in range(len(body)):
                request.wfile.write(body[i : i + 1])
                request.wfile.flush()
                if self._stop.wait(every) or time.monotonic() > deadline:
                    break
        except (BrokenPipeError, ConnectionResetError):
            pass
        request.close_connection = True

    def _flood(
        self, request: BaseHTTPRequestHandler, status: int, headers: dict[str, str], size: int
    ) -> None:
        request.send_response(status)
        for name, value in {**headers, "Transfer-Encoding": "chunked"}.items():
            request.send_header(name, value)
        request.end_headers()
        chunk = b"x" * (1 << 16)
        try:
            while self.flooded < size and not self._stop.is_set():
                request.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                with self._lock:
                    self.flooded += len(chunk)
            request.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        request.close_connection = True

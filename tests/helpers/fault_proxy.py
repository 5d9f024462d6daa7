"""A loopback HTTP proxy that injects the failures real endpoints produce, to test the backend's retries.

Between the client and an OpenAI-compatible server it answers a POST, at configurable rates drawn from a
seeded RNG, with 429 + Retry-After, with 500, by hanging past the client's timeout, with a truncated body
or with JSON that is not a chat completion; everything else is forwarded. It counts what it did and how many
requests reached the upstream server (which is how tests see that a cached call is free).
"""

from __future__ import annotations

import http.client
import random
import threading
from collections import Counter
from dataclasses import dataclass, fields
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

GARBAGE_BODY = b'{"id": "garbage", "object": "chat.completion", "choices": []}'


@dataclass(frozen=True)
class FaultRates:
    """Probability of each fault per POST request (their sum must not exceed 1)."""

    rate_limited: float = 0.0
    server_error: float = 0.0
    hang: float = 0.0
    truncated: float = 0.0
    garbage: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            if not 0 <= getattr(self, f.name) <= 1:
                raise ValueError(f"{f.name}: rate must be in [0, 1]")
        if sum(getattr(self, f.name) for f in fields(self)) > 1:
            raise ValueError("rates: the fault rates sum to more than 1")

    @classmethod
    def uniform(cls, rate: float) -> FaultRates:
        return cls(**{f.name: rate for f in fields(cls)})


class FaultProxy:
    """Run with `with FaultProxy(upstream) as proxy:`; point the client at `proxy.base_url`.

    `rates` may be reassigned between batches (e.g. pass-through, then faulty)."""

    def __init__(
        self,
        upstream: str,
        rates: FaultRates = FaultRates(),
        seed: int = 0,
        retry_after: str = "1",
        hang_seconds: float = 5.0,
    ) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ValueError(f"upstream: expected http://host:port[/path], got {upstream!r}")
        self.upstream = (parts.hostname, parts.port)
        self._path = parts.path.rstrip("/")
        self.rates = rates
        self.retry_after = retry_after
        self.hang_seconds = hang_seconds
        self.counts: Counter[str] = Counter()
        self.upstream_requests = 0
        self.last_authorization: str | None = None  # what the client sent (tests check the key is used)
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def base_url(self) -> str:
        """The URL to give the client: the upstream's path (e.g. /v1) on the proxy's port."""
        return f"http://127.0.0.1:{self._server.server_address[1]}{self._path}"

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def reset_counts(self) -> None:
        with self._lock:
            self.counts.clear()
            self.upstream_requests = 0

    def _choose(self) -> str:
        with self._lock:
            u = self._rng.random()
            for f in fields(self.rates):
                u -= getattr(self.rates, f.name)
                if u < 0:
                    action = f.name
                    break
            else:
                action = "forwarded"
            self.counts[action] += 1
            return action

    def _forward(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict, bytes]:
        with self._lock:
            self.upstream_requests += 1
        conn = http.client.HTTPConnection(*self.upstream, timeout=300)
        try:
            conn.request(method, path, body=body or None, headers=headers)
            response = conn.getresponse()
            kept = {k: v for k, v in response.getheaders() if k.lower() in ("content-type", "retry-after")}
            return response.status, kept, response.read()
        finally:
            conn.close()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _send(self, status: int, headers: dict[str, str], body: bytes) -> None:
                try:
                    self.send_response(status)
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # the client timed out meanwhile

            def _relay(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                proxy.last_authorization = self.headers.get("Authorization")
                action = proxy._choose() if self.command == "POST" else "forwarded"
                json_type = {"Content-Type": "application/json"}
                if action == "rate_limited":
                    retry = {"Retry-After": proxy.retry_after, **json_type}
                    self._send(429, retry, b'{"error": {"message": "rate limited", "type": "rate_limit"}}')
                elif action == "server_error":
                    self._send(
                        500, json_type, b'{"error": {"message": "injected failure", "type": "server"}}'
                    )
                elif action == "hang":
                    proxy._stop.wait(proxy.hang_seconds)
                    self.close_connection = True
                elif action == "garbage":
                    self._send(200, json_type, GARBAGE_BODY)
                else:
                    status, kept, upstream_body = proxy._forward(self.command, self.path, headers, body)
                    if action == "truncated":
                        upstream_body = upstream_body[: len(upstream_body) // 2]
                    self._send(status, kept, upstream_body)

            do_GET = do_POST = _relay

        return Handler

"""A loopback HTTP proxy that injects the failures real endpoints produce, to test the backend's retries.

Between the client and an OpenAI-compatible server it answers a POST, at configurable rates drawn from a
seeded RNG, with 429 + Retry-After, with 500, by hanging past the client's timeout, with a truncated body
or with JSON that is not a chat completion; everything else is forwarded. It counts what it did and how many
requests reached the upstream server (which is how tests see that a cached call is free).
"""

from __future__ import annotations

import http.client
import random
from collections import Counter
from dataclasses import dataclass, fields
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlsplit

from tests.helpers.loopback import LoopbackServer, send

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


class FaultProxy(LoopbackServer):
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
        super().__init__()
        self.upstream = (parts.hostname, parts.port)
        self.url_path = parts.path.rstrip("/")  # the upstream's path (e.g. /v1) on the proxy's port
        self.rates = rates
        self.retry_after = retry_after
        self.hang_seconds = hang_seconds
        self.counts: Counter[str] = Counter()
        self.upstream_requests = 0
        self.last_authorization: str | None = None  # what the client sent (tests check the key is used)
        self._rng = random.Random(seed)

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

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        length = int(request.headers.get("Content-Length") or 0)
        body = request.rfile.read(length) if length else b""
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "connection")}
        self.last_authorization = request.headers.get("Authorization")
        action = self._choose() if request.command == "POST" else "forwarded"
        json_type = {"Content-Type": "application/json"}
        if action == "rate_limited":
            retry = {"Retry-After": self.retry_after, **json_type}
            send(request, 429, retry, b'{"error": {"message": "rate limited", "type": "rate_limit"}}')
        elif action == "server_error":
            send(request, 500, json_type, b'{"error": {"message": "injected failure", "type": "server"}}')
        elif action == "hang":
            self._stop.wait(self.hang_seconds)
            request.close_connection = True
        elif action == "garbage":
            send(request, 200, json_type, GARBAGE_BODY)
        else:
            status, kept, upstream_body = self._forward(request.command, request.path, headers, body)
            if action == "truncated":
                upstream_body = upstream_body[: len(upstream_body) // 2]
            send(request, status, kept, upstream_body)

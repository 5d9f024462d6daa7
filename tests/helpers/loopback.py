"""A threaded HTTP server on a free loopback port whose subclass answers each request (`handle`): the
base of the tests' stub endpoint and fault-injecting proxy."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self


class LoopbackServer:
    """Serve on 127.0.0.1 between `start()` and `stop()` (or `with server:`); `base_url` ends in
    `url_path`. `_stop` is set when the server stops, so a deliberately slow answer can wait on it."""

    url_path = ""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stop = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                owner.handle(self)

            do_GET = do_POST

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}{self.url_path}"

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        raise NotImplementedError

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def send(request: BaseHTTPRequestHandler, status: int, headers: dict[str, str], body: bytes) -> None:
    """Answer `request`; a client that has given up meanwhile (a timeout test) only closes the connection."""
    try:
        request.send_response(status)
        for name, value in headers.items():
            request.send_header(name, value)
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)
    except (BrokenPipeError, ConnectionResetError):
        request.close_connection = True

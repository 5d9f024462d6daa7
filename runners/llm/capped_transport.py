"""The HTTP transport of the openai backend: every response body is read up to a limit, uncompressed.

Imported only when a backend makes its first call (httpx and the openai client take most of a second to
import, and a plan never calls)."""

from __future__ import annotations

import httpx2

from tepa.body_limit import MAX_BODY_BYTES, Oversized

__all__ = ["MAX_BODY_BYTES", "CappedTransport", "Oversized"]


class CappedStream(httpx2.AsyncByteStream):
    def __init__(self, stream: httpx2.AsyncByteStream, limit: int) -> None:
        self._stream, self._limit = stream, limit

    async def __aiter__(self):  # noqa: ANN204 (an async generator)
        seen = 0
        async for chunk in self._stream:
            seen += len(chunk)
            if seen > self._limit:
                raise Oversized(f"response body longer than {self._limit} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


class CappedTransport(httpx2.AsyncHTTPTransport):
    """The HTTP transport, with every response body read up to MAX_BODY_BYTES at most. Bodies are asked
    for uncompressed (a compressed one could expand past any limit after it was counted)."""

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await super().handle_async_request(request)
        length = response.headers.get("content-length", "")
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        problem = (
            f"response body of {length} bytes, longer than {MAX_BODY_BYTES}"
            if length.isdigit() and int(length) > MAX_BODY_BYTES
            else f"response compressed ({encoding}) although none was asked for"
            if encoding not in ("", "identity")
            else None
        )  # fmt: skip
        if problem is not None:
            await response.aclose()
            raise Oversized(problem)
        response.stream = CappedStream(response.stream, MAX_BODY_BYTES)
        return response

"""A small OpenAI-compatible completions server over `llama_cpp.Llama`, for base models scored by the
log-likelihood of option texts (`llm.scoring=loglik`).

Why not llama-cpp-python's own server: it cannot keep Gemma 3's sliding-window cache whole (`swa_full`),
without which a cached prompt prefix cannot be reused, and for an echoed prompt's log-probabilities it
needs the logits of every prompt token (with Gemma's 262k-token vocabulary the output layer then costs
twice the rest of the model) and sorts the whole vocabulary in Python for each of them.

Here `echo` with `logprobs` scores the prompt's *last line* (after its last newline: the answer being
scored, as `runners.agent.prompt.completion_prompt` ends with "Answer: <option>"); earlier prompt tokens get
null, as the first token always does in OpenAI's API. Only that line's logits are computed, and the
options of one decision share everything before it, so reading the prompt is paid once per decision:
the evaluated tokens stay in the cache and the next prompt evaluates only what differs. An echoed
completion's `usage.prompt_tokens_details.cached_tokens` says how many prompt tokens came from the cache.

Several cache slots (`--slots`, default 6 per request served at once: a llama.cpp instance each, about
0.4 GB for Gemma) keep prompts that alternate between prefixes cached side by side: a drift stream's
jobs each have their own memory, and calibrated scoring alternates every decision's prompt with and
without it. A prompt is evaluated in aligned blocks up to its last line, so its scores are the same
floats whatever was cached before (see `LoglikModel._evaluate`): the slots and a run's history change
the time, never an answer.

Without `echo`, `logprobs` and `max_tokens` 1 ask for the next token's `logprobs` likeliest
alternatives (at most MAX_TOP_LOGPROBS) and one greedy token: one request scores every one-token option
of a prompt (`llm.option_logprobs`). The prompt is evaluated exactly as an echoed prompt ending where it
ends, so the next token's log-probabilities are those an echoed option would get, up to the one token
the echoed batch holds more.

Endpoints: `GET /v1/models`, `POST /v1/completions` (a string `prompt`; with `echo` and `logprobs`:
`tokens`, `text_offset`, `token_logprobs`, `top_logprobs` and, when `max_tokens` is 1, one greedy token;
with `logprobs` and `max_tokens` 1 alone: the next token's alternatives, as above; otherwise
`llama_cpp.Llama.create_completion` answers). There is no chat endpoint: a base model has no
chat template.

`--parallel N` serves N requests at once, each in a slot of its own (a llama.cpp instance with
`--n-threads` threads): a one-thread instance per request keeps both cores of a 2-core machine busy, where
one two-thread instance leaves one of them mostly idle on a small model's short batches. A score does not
depend on the slot, the thread count or what runs beside it (each instance computes alone, in the aligned
blocks above), so serving in parallel changes the time, never an answer.
"""

from __future__ import annotations

import argparse
import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np

MAX_TOP_LOGPROBS = 1000  # the likeliest alternatives a request may ask for
#: cache slots per request served at once: a drift stream's 4 jobs' prompts, with and without memory
SLOTS_PER_REQUEST = 6
#: tokens per evaluation block of a prompt's reusable part (see LoglikModel._evaluate)
BLOCK = 16


class BadRequest(ValueError):
    """A request this server cannot answer (HTTP 400)."""


class _Slot:
    """One llama.cpp context and the tokens in its cache, in order."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        self.tokens: list[int] = []
        self.canonical = 0  # how many of them were evaluated in whole aligned blocks (reusable)
        self.used = 0  # when it last served a request (a request counter)
        self.busy = False  # serving a request now


def pick_slot(cached: Sequence[Sequence[int]], used: Sequence[int], tokens: Sequence[int]) -> int:
    """The slot a prompt of `tokens` is evaluated in: the one sharing the longest prefix with it when
    that is at least half the prompt, else the least recently used (an empty slot first). So a prompt
    that shares only the instructions with a slot holding another job's memory takes a slot of its own
    rather than evict it (as llama.cpp's server picks a slot by prompt similarity), and slots left by a
    finished stream are reused oldest first. It assumes instructions shorter than half a prompt, as the
    harness's are: a prompt without memory then finds its own slot by the instructions and its header."""
    shared = [_shared(c, tokens) for c in cached]
    best = max(range(len(cached)), key=lambda i: (shared[i], used[i]))
    if 2 * shared[best] >= len(tokens):
        return best
    return min(range(len(cached)), key=lambda i: used[i])


def _shared(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class LoglikModel:
    """A llama.cpp model that scores the last line of a prompt, reusing the evaluated prefix. `slots`
    instances of the model each keep their own cache; a prompt is evaluated in the one `pick_slot`
    chooses, so prompts that alternate between prefixes are not read again."""

    def __init__(
        self, model: Path, alias: str, n_ctx: int, n_threads: int, swa_full: bool, *, slots: int
    ) -> None:
        if slots < 1:
            raise ValueError(f"slots: must be >= 1, got {slots}")
        from llama_cpp import Llama  # the local-llm extra

        self.alias = alias
        self.slots = [
            _Slot(
                Llama(
                    model_path=str(model),
                    n_ctx=n_ctx,
                    n_threads=n_threads,
                    n_threads_batch=n_threads,
                    swa_full=swa_full,
                    verbose=False,
                )
            )
            for _ in range(slots)
        ]
        self.llm = self.slots[0].llm  # the tokenizer (the model's vocabulary, read only)
        self._requests = 0
        self._picking = threading.Lock()  # slot choice and its busy flags

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = body.get("prompt")
        if not isinstance(prompt, str) or not prompt:
            raise BadRequest("prompt: must be a non-empty string (one prompt per request)")
        max_tokens = body.get("max_tokens", 16)
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
            raise BadRequest("max_tokens: must be an integer >= 0")
        logprobs = body.get("logprobs")
        if body.get("echo") and logprobs is not None:
            if isinstance(logprobs, bool) or not isinstance(logprobs, int) or logprobs < 0:
                raise BadRequest("logprobs: must be an integer >= 0")
            if max_tokens > 1:
                raise BadRequest("echo with logprobs: max_tokens must be 0 or 1 (one greedy token)")
            return self._echo(prompt, min(logprobs, MAX_TOP_LOGPROBS), max_tokens)
        if logprobs is not None and max_tokens == 1:
            if isinstance(logprobs, bool) or not isinstance(logprobs, int) or logprobs < 1:
                raise BadRequest("logprobs: must be an integer >= 1 without echo")
            return self._next(prompt, min(logprobs, MAX_TOP_LOGPROBS))
        keys = ("max_tokens", "temperature", "top_p", "seed", "stop")
        with self._slot([]) as slot:
            slot.tokens, slot.canonical = [], 0  # create_completion manages its own cache
            return slot.llm.create_completion(prompt, **{k: body[k] for k in keys if k in body})

    def _tokens(self, prompt: str, max_tokens: int) -> tuple[list[int], int, list[bytes], list[int], int]:
        """(tokens, 1 if the first is BOS else 0, each token's bytes, the character offset where each
        shown token ends, the first token of the prompt's last line) of a prompt that fits the context
        and whose tokens reproduce it exactly."""
        tokens = self.llm.tokenize(prompt.encode(), add_bos=True, special=False)
        bos = 1 if tokens and tokens[0] == self.llm.token_bos() else 0
        pieces = [self.llm.detokenize([t]) for t in tokens]
        text = b"".join(pieces[bos:]).decode(errors="replace")
        if text != prompt:
            raise BadRequest("prompt: the tokenizer does not reproduce it exactly, so it cannot be scored")
        if len(tokens) + max_tokens > self.llm.n_ctx():
            raise BadRequest(f"prompt: {len(tokens)} tokens do not fit the context ({self.llm.n_ctx()})")
        encoded = text.encode()
        ends, at = [], 0  # character offset where each shown token ends
        for piece in pieces[bos:]:
            at += len(piece)
            ends.append(len(encoded[:at].decode(errors="ignore")))
        line = prompt.rfind("\n") + 1  # the last line starts here
        first = bos + next((i for i, end in enumerate(ends) if end > line), len(ends) - 1)
        first = max(first, 1)  # the first token is never scored
        if len(tokens) - first + 1 + BLOCK > self.llm.n_batch:
            raise BadRequest(f"prompt: its last line is longer than {self.llm.n_batch - BLOCK} tokens")
        return tokens, bos, pieces, ends, first

    def _logits(self, tokens: list[int], start: int) -> tuple[Any, int, np.ndarray]:
        """(the llama.cpp instance, tokens reused from its cache, the logits of tokens[start:]) from the
        slot `pick_slot` chooses for `tokens`."""
        with self._slot(tokens) as slot:
            keep, rows = self._evaluate(slot, tokens, start)
            return slot.llm, keep, rows

    @contextmanager
    def _slot(self, tokens: Sequence[int]) -> Iterator[_Slot]:
        """The free slot `pick_slot` chooses for `tokens`, held for one request. A free one exists
        while no more requests run at once than there are slots (`serve` admits that many)."""
        with self._picking:
            free = [s for s in self.slots if not s.busy]
            if not free:
                raise RuntimeError("more requests at once than slots")
            slot = free[pick_slot([s.tokens for s in free], [s.used for s in free], tokens)]
            self._requests += 1
            slot.used, slot.busy = self._requests, True
        try:
            yield slot
        finally:
            with self._picking:
                slot.busy = False

    def _next(self, prompt: str, top: int) -> dict[str, Any]:
        """The next token's `top` likeliest alternatives and the greedy one. The prompt is evaluated from
        its last line's first token as `_echo` evaluates a prompt that continues it, so that an option's
        log-probability here is the one its echoed prompt gets."""
        tokens, _, _, _, first = self._tokens(prompt, 1)
        # One token more (its logits unused; attention is causal, so it changes no earlier row's value)
        # makes the batch the one an echoed one-token option is evaluated in: llama.cpp's numbers depend
        # on the batch's size.
        llm, keep, rows = self._logits([*tokens, tokens[-1]], first - 1)
        last, norm = rows[-2], float(_logsumexp(rows[-2:-1])[0])
        best = int(np.argmax(last))
        piece = llm.detokenize([best], prev_tokens=tokens).decode(errors="replace")
        lp = float(last[best] - norm)
        return {
            "id": "cmpl-local",
            "object": "text_completion",
            "model": self.alias,
            "choices": [
                {
                    "index": 0,
                    "text": piece,
                    "logprobs": {
                        "tokens": [piece],
                        "text_offset": [len(prompt)],
                        "token_logprobs": [lp],
                        "top_logprobs": [self._top(last, norm, piece, lp, top)],
                    },
                    "finish_reason": "length",
                }
            ],
            "usage": {
                "prompt_tokens": len(tokens),
                "completion_tokens": 1,
                "total_tokens": len(tokens) + 1,
                "prompt_tokens_details": {"cached_tokens": keep},
            },
        }

    def _echo(self, prompt: str, top: int, max_tokens: int) -> dict[str, Any]:
        tokens, bos, pieces, ends, first = self._tokens(prompt, max_tokens)
        text = prompt
        offsets = [0, *ends[:-1]]
        start = first - 1  # logits from here on: row j predicts token start + j + 1
        llm, keep, rows = self._logits(tokens, start)
        norm = _logsumexp(rows)
        scored = {
            i: float(rows[i - 1 - start, tokens[i]] - norm[i - 1 - start]) for i in range(first, len(tokens))
        }
        shown = range(bos, len(tokens))
        token_texts = [pieces[i].decode(errors="replace") for i in shown]
        token_logprobs: list[float | None] = [scored.get(i) for i in shown]
        top_logprobs = [None if i not in scored else self._top(rows[i - 1 - start], norm[i - 1 - start],
                                                               token_texts[i - bos], scored[i], top)
                        for i in shown]  # fmt: skip
        if token_logprobs:
            token_logprobs[0] = top_logprobs[0] = None  # as OpenAI: nothing predicts the first token
        generated = []
        if max_tokens:
            best = int(np.argmax(rows[-1]))
            piece = llm.detokenize([best], prev_tokens=tokens).decode(errors="replace")
            lp = float(rows[-1, best] - norm[-1])
            generated = [best]
            offsets.append(len(text))
            token_texts.append(piece)
            token_logprobs.append(lp)
            top_logprobs.append({piece: lp})
            text += piece
        return {
            "id": "cmpl-local",
            "object": "text_completion",
            "model": self.alias,
            "choices": [
                {
                    "index": 0,
                    "text": text,
                    "logprobs": {
                        "tokens": token_texts,
                        "text_offset": offsets,
                        "token_logprobs": token_logprobs,
                        "top_logprobs": top_logprobs,
                    },
                    "finish_reason": "length",
                }
            ],
            "usage": {
                "prompt_tokens": len(tokens),
                "completion_tokens": len(generated),
                "total_tokens": len(tokens) + len(generated),
                # the server's own count of prompt tokens it did not evaluate again (OpenAI's field)
                "prompt_tokens_details": {"cached_tokens": keep},
            },
        }

    @staticmethod
    def _evaluate(slot: _Slot, tokens: list[int], start: int) -> tuple[int, np.ndarray]:
        """(tokens reused from the cache, the logits of tokens[start:]) for a prompt evaluated in `slot`.

        Why blocks: llama.cpp's numbers for a token depend on the batch it was evaluated in (by up to a few
        tenths of a nat over a prompt, measured on Gemma 3 270M), so reusing whatever a cache holds would
        make a score depend on the prompts before it. Here the prompt up to the block boundary before
        `start` is always evaluated in aligned blocks of BLOCK tokens and the rest in one batch, so every
        token is computed the same way whatever was cached: a score is a function of its prompt alone."""
        llm = slot.llm
        aligned = start // BLOCK * BLOCK
        keep = min(_shared(slot.tokens, tokens), slot.canonical, aligned) // BLOCK * BLOCK
        llm._ctx.kv_cache_seq_rm(-1, keep, -1)
        for at in range(keep, aligned, BLOCK):
            llm._batch.set_batch(batch=tokens[at : at + BLOCK], n_past=at, logits_all=False)
            llm._ctx.decode(llm._batch)
        tail = tokens[aligned:]
        llm._batch.set_batch(batch=tail, n_past=aligned, logits_all=False)
        for i in range(len(tail)):
            llm._batch.batch.logits[i] = aligned + i >= start  # only the last line's logits
        llm._ctx.decode(llm._batch)
        n = len(tokens) - start
        rows = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(n * llm.n_vocab(),))
        llm.input_ids[: len(tokens)] = tokens
        llm.n_tokens = len(tokens)
        slot.tokens, slot.canonical = list(tokens), aligned
        return keep, rows.reshape(n, llm.n_vocab()).copy()

    def _top(self, row: np.ndarray, norm: float, token: str, logprob: float, k: int) -> dict[str, float]:
        """The token itself and the k likeliest tokens at its position, with log-probabilities."""
        best = np.argpartition(row, -k)[-k:] if k else []
        piece = self.llm.detokenize
        return {
            **{piece([int(t)]).decode(errors="replace"): float(row[t] - norm) for t in best},
            token: logprob,
        }


def _logsumexp(rows: np.ndarray) -> np.ndarray:
    peak = rows.max(axis=1, keepdims=True)
    return (peak + np.log(np.exp(rows - peak).sum(axis=1, keepdims=True)))[:, 0].astype(np.float64)


def serve(model: LoglikModel, port: int, parallel: int = 1) -> ThreadingHTTPServer:
    """An HTTP server for `model` on 127.0.0.1:port (call `serve_forever`); at most `parallel` requests
    are evaluated at once (each in its own slot), the others wait their turn."""
    if not 1 <= parallel <= len(model.slots):
        raise ValueError(f"parallel: must be between 1 and the slots ({len(model.slots)}), got {parallel}")
    turns = threading.BoundedSemaphore(parallel)  # requests evaluated at once

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int, message: str) -> None:
            self._send(status, {"error": {"message": message, "type": "invalid_request_error"}})

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": model.alias, "object": "model"}]})
            else:
                self._error(404, f"no endpoint {self.path}")

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path.rstrip("/") != "/v1/completions":
                self._error(404, f"no endpoint {self.path} (this server offers /v1/completions only)")
                return
            try:
                body = json.loads(raw)
                if not isinstance(body, dict):
                    raise BadRequest("the body must be a JSON object")
                with turns:
                    answer = model.complete(body)
            except (BadRequest, ValueError) as exc:
                self._error(400, str(exc))
                return
            self._send(200, answer)

    return ThreadingHTTPServer(("127.0.0.1", port), Handler)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m runners.llm.local.llama_server", description=__doc__.split(".")[0]
    )
    parser.add_argument("--model", type=Path, required=True, help="the GGUF file")
    parser.add_argument("--alias", required=True, help="the model name clients send")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--n-ctx", type=int, default=4096)
    parser.add_argument("--n-threads", type=int, default=1, help="threads of each slot's instance")
    parser.add_argument(
        "--slots", type=int, default=None,
        help="contexts, each with its own prompt cache (calibrated scoring alternates two prompts; "
        "default: 6 per request served at once)",
    )  # fmt: skip
    parser.add_argument("--parallel", type=int, default=1, help="requests evaluated at once (default 1)")
    args = parser.parse_args(argv)
    if args.parallel < 1:
        parser.error(f"--parallel: must be >= 1, got {args.parallel}")
    slots = args.slots if args.slots is not None else SLOTS_PER_REQUEST * args.parallel
    # swa_full: a sliding-window cache kept whole, so that a cached prefix can be reused (Gemma 3).
    model = LoglikModel(args.model, args.alias, args.n_ctx, args.n_threads, swa_full=True, slots=slots)
    try:
        server = serve(model, args.port, args.parallel)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()

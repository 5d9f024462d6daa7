"""A small OpenAI-compatible completions server over `llama_cpp.Llama`, for base models scored by the
log-likelihood of option texts (`llm.scoring=loglik`).

Why not llama-cpp-python's own server: it cannot keep Gemma 3's sliding-window cache whole (`swa_full`),
without which reusing a cached prompt prefix fails, and it computes the log-probabilities of an echoed
prompt by sorting the whole vocabulary in Python for every token (minutes per prompt with Gemma's
262k-token vocabulary). Here a prompt's token log-probabilities are one vectorised log-softmax over the
rows that are new since the previous prompt: the options of one decision share everything but their
last tokens, so the shared prefix is evaluated and scored once.

Endpoints: `GET /v1/models`, `POST /v1/completions` (a string `prompt`; `echo` with `logprobs` returns
every prompt token's log-probability with `tokens`, `text_offset` and `top_logprobs`, and, when
`max_tokens` >= 1, one greedy token; otherwise `llama_cpp.Llama.create_completion` answers). There is no
chat endpoint: a base model has no chat template. One request is served at a time.
"""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np

MAX_TOP_LOGPROBS = 5


class BadRequest(ValueError):
    """A request this server cannot answer (HTTP 400)."""


class LoglikModel:
    """A llama.cpp model with all logits kept, and the log-probability of each evaluated token cached
    alongside the evaluated tokens, so that a prompt sharing a prefix with the previous one costs only
    its new tokens."""

    def __init__(self, model: Path, alias: str, n_ctx: int, n_threads: int, swa_full: bool) -> None:
        from llama_cpp import Llama  # the local-llm extra

        self.alias = alias
        self.llm = Llama(
            model_path=str(model),
            n_ctx=n_ctx,
            n_threads=n_threads,
            n_threads_batch=n_threads,
            logits_all=True,
            swa_full=swa_full,
            verbose=False,
        )
        self._tokens: list[int] = []  # evaluated tokens, in the KV cache
        self._logprobs: list[float | None] = []  # log P(token i | tokens < i); None for the first

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = body.get("prompt")
        if not isinstance(prompt, str) or not prompt:
            raise BadRequest("prompt: must be a non-empty string (one prompt per request)")
        max_tokens = body.get("max_tokens", 16)
        if not isinstance(max_tokens, int) or max_tokens < 0:
            raise BadRequest("max_tokens: must be an integer >= 0")
        logprobs = body.get("logprobs")
        if body.get("echo") and logprobs is not None:
            if isinstance(logprobs, bool) or not isinstance(logprobs, int) or logprobs < 0:
                raise BadRequest("logprobs: must be an integer >= 0")
            if max_tokens > 1:
                raise BadRequest("echo with logprobs: max_tokens must be 0 or 1 (one greedy token)")
            return self._echo(prompt, min(logprobs, MAX_TOP_LOGPROBS), max_tokens)
        self._forget()  # create_completion reuses and overwrites the context its own way
        keys = ("max_tokens", "temperature", "top_p", "seed", "stop", "echo", "logprobs")
        return self.llm.create_completion(prompt, **{k: body[k] for k in keys if k in body})

    def _forget(self) -> None:
        self._tokens, self._logprobs = [], []
        self.llm.reset()

    def _echo(self, prompt: str, top: int, max_tokens: int) -> dict[str, Any]:
        llm = self.llm
        tokens = llm.tokenize(prompt.encode(), add_bos=True, special=False)
        if len(tokens) + max_tokens > llm.n_ctx():
            raise BadRequest(f"prompt: {len(tokens)} tokens do not fit the context ({llm.n_ctx()})")
        if llm.n_tokens != len(self._tokens):
            self._forget()
        keep = 0
        for a, b in zip(self._tokens, tokens[:-1], strict=False):  # evaluate at least the last token
            if a != b:
                break
            keep += 1
        llm.n_tokens = keep
        llm.eval(tokens[keep:])
        start = max(keep, 1)  # row i - 1 of the scores predicts token i
        rows = llm.scores[start - 1 : len(tokens) - 1]
        chosen = rows[np.arange(len(rows)), tokens[start:]].astype(np.float64)
        self._logprobs = self._logprobs[:keep] or [None]
        self._logprobs += (chosen - _logsumexp(rows)).tolist()
        self._tokens = list(tokens)
        last = llm.scores[len(tokens) - 1]
        generated = [int(np.argmax(last))] if max_tokens else []
        pieces = [llm.detokenize([t]) for t in tokens]
        text_bytes = b"".join(pieces[1:] if tokens[0] == llm.token_bos() else pieces)
        shown = range(1 if tokens[0] == llm.token_bos() else 0, len(tokens))
        offsets, position = [], 0
        for i in shown:
            offsets.append(len(text_bytes[:position].decode(errors="ignore")))
            position += len(pieces[i])
        token_texts = [pieces[i].decode(errors="replace") for i in shown]
        token_logprobs = [self._logprobs[i] for i in shown]
        top_logprobs = [self._top(i, top) for i in shown]
        text = text_bytes.decode(errors="replace")
        if text != prompt:
            raise BadRequest("prompt: the tokenizer does not reproduce it exactly, so it cannot be echoed")
        if generated:
            piece = llm.detokenize(generated, prev_tokens=tokens).decode(errors="replace")
            lp = float(last[generated[0]] - _logsumexp(last[None, :])[0])
            offsets.append(len(text))
            token_texts.append(piece)
            token_logprobs.append(lp)
            top_logprobs.append({piece: lp})
            text += piece
        if token_logprobs:
            token_logprobs[0], top_logprobs[0] = None, None  # as OpenAI: nothing predicts the first token
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
            },
        }

    def _top(self, i: int, k: int) -> dict[str, float] | None:
        """The token at position i and the k likeliest alternatives there, with log-probabilities."""
        if i == 0:
            return None
        chosen = {self.llm.detokenize([self._tokens[i]]).decode(errors="replace"): self._logprobs[i]}
        if k == 0:
            return chosen
        row = self.llm.scores[i - 1]
        best = np.argpartition(row, -k)[-k:]
        norm = _logsumexp(row[None, :])[0]
        piece = self.llm.detokenize
        return {**{piece([int(t)]).decode(errors="replace"): float(row[t] - norm) for t in best}, **chosen}


def _logsumexp(rows: np.ndarray) -> np.ndarray:
    peak = rows.max(axis=1, keepdims=True)
    return (peak + np.log(np.exp(rows - peak).sum(axis=1, keepdims=True)))[:, 0].astype(np.float64)


def serve(model: LoglikModel, port: int) -> ThreadingHTTPServer:
    """An HTTP server for `model` on 127.0.0.1:port (call `serve_forever`); requests run one at a time."""
    lock = threading.Lock()

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
                with lock:
                    answer = model.complete(body)
            except (BadRequest, ValueError) as exc:
                self._error(400, str(exc))
                return
            self._send(200, answer)

    return ThreadingHTTPServer(("127.0.0.1", port), Handler)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m runners.llama_server", description=__doc__.split(".")[0])
    parser.add_argument("--model", type=Path, required=True, help="the GGUF file")
    parser.add_argument("--alias", required=True, help="the model name clients send")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--n-ctx", type=int, default=4096)
    parser.add_argument("--n-threads", type=int, default=1)
    args = parser.parse_args(argv)
    # swa_full: a sliding-window cache kept whole, so that a cached prefix can be reused (Gemma 3).
    model = LoglikModel(args.model, args.alias, args.n_ctx, args.n_threads, swa_full=True)
    server = serve(model, args.port)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()

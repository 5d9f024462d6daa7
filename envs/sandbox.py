"""Confinement for untrusted tool invocations: a directory no path may leave, and the invocation gate.

A model's reply is untrusted input. It is split with `shlex` (never handed to a shell), its first word
must name a whitelisted tool, and every argument that could be a path must resolve, after symlinks, to a
location inside the sandbox. Anything else is refused with a `Refused` error before it runs, so a
refusal changes nothing at all. The tools check their path arguments again when they run (see
`envs.tools`), so a path the gate's generic view misses still cannot leave the sandbox.
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Collection
from pathlib import Path

MAX_INVOCATION_CHARS = 2000


class Refused(ValueError):
    """An invocation (or one of its paths) was refused; the message says why, for the model to read."""


class Sandbox:
    """A directory that every path of an untrusted invocation must stay inside."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        real = os.path.realpath(root)
        if not os.path.isdir(real):
            raise ValueError(f"root must be an existing directory, got {os.fspath(root)!r}")
        self.root = Path(real)
        self._prefix = real.rstrip(os.sep) + os.sep

    def resolve(self, path: str) -> Path:
        """`path` (relative to the root, or absolute) with every symlink resolved; `Refused` when the
        result lies outside the sandbox."""
        if not isinstance(path, str) or not path or "\x00" in path:
            raise Refused(f"invalid path {path!r}")
        real = os.path.realpath(os.path.join(self.root, path))
        if real != str(self.root) and not real.startswith(self._prefix):
            raise Refused(f"path escapes the sandbox: {path}")
        return Path(real)

    def relative(self, path: str | os.PathLike[str]) -> str:
        """How to name `path` in a message: relative to the root (absolute temp paths would make
        messages, and so prompts, differ from run to run)."""
        text = os.fspath(path)
        return os.path.relpath(text, self.root) if text.startswith(self._prefix) else text

    def remove(self, path: str) -> None:
        """Delete a file, symlink or directory tree inside the sandbox, without following symlinks."""
        target = os.path.join(self.resolve(os.path.dirname(path) or "."), os.path.basename(path))
        if os.path.islink(target) or os.path.isfile(target):
            os.unlink(target)
        elif os.path.isdir(target):
            shutil.rmtree(target)

    def write(self, path: str, data: bytes) -> None:
        """Write `data` to `path` inside the sandbox, creating parent directories."""
        target = self.resolve(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def parse_invocation(text: str, allowed: Collection[str], sandbox: Sandbox) -> list[str]:
    """Split an untrusted command line into argv, or raise `Refused`.

    Checks, in order: a string of at most MAX_INVOCATION_CHARS that shlex can split into at least one
    word; a first word in `allowed`; every argument that is not an option flag (and the value of every
    `--flag=value`) resolves inside `sandbox`. Arguments that are not paths (`8080`, `array`) resolve
    harmlessly inside the root, so the check needs no knowledge of any tool's interface.
    """
    if not isinstance(text, str):
        raise Refused(f"refused: an invocation must be a string, got {type(text).__name__}")
    if len(text) > MAX_INVOCATION_CHARS:
        raise Refused(f"refused: the invocation is longer than {MAX_INVOCATION_CHARS} characters")
    try:
        argv = shlex.split(text)
    except ValueError as exc:
        raise Refused(f"refused: cannot parse the invocation: {exc}") from None
    if not argv:
        raise Refused("refused: empty invocation")
    tool = argv[0]
    if tool not in allowed:
        raise Refused(f"{tool}: refused: not an allowed tool (allowed: {', '.join(sorted(allowed))})")
    for arg in argv[1:]:
        if arg.startswith("-"):
            if "=" not in arg:
                continue
            arg = arg.split("=", 1)[1]
        if not arg:
            continue
        try:
            sandbox.resolve(arg)
        except Refused as exc:
            raise Refused(f"{tool}: refused: {exc}") from None
    return argv

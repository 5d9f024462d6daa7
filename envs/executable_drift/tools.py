"""The command-line tools of the executable drift environment, each in four versions.

Every tool is a small real program: an argparse interface per version (so a stale invocation fails with
argparse's own message), an operation on real files, and the jobs it serves (input fixtures, the
invocation a version expects, the on-disk check of the artefact).

A version pairs one of three command-line *syntaxes* with one of two *conventions* (where the artefact
must go, or which format its consumers read). The same four versions exist for every tool:

    1.0 = (syntax 0, convention 0)   2.0 = (syntax 0, convention 1)
    3.0 = (syntax 1, convention 1)   4.0 = (syntax 2, convention 0)

so moving between two versions renames flags (the old invocation fails with a usage error), changes the
convention (the old invocation runs but its artefact fails the check), or both. The six
(syntax, convention) *flavours* are a job's candidate invocations; under each version exactly one
succeeds. Tools write only through paths confined to the sandbox, refuse a path with a symlink on
it or a file with more than one hard link (checked again when the file is opened for writing), and
never follow a symlink when they walk a folder; every file they open is reached from the sandbox's
held descriptor (`Sandbox.open_new`, `read`, `plain_files`), so a folder swapped for a link after the
check cannot redirect it.
"""

from __future__ import annotations

import argparse
import configparser
import csv
import hashlib
import io
import json
import os
import random
import shlex
import tarfile
import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar, NoReturn

from envs.executable_drift.sandbox import Refused, Sandbox


class ToolError(Exception):
    """A tool call failed; the message is what the tool would print."""


class ToolParser(argparse.ArgumentParser):
    """argparse with its real messages, raised instead of printed (a worker's stdout is its pipe).

    No `--help` (it would print) and no abbreviations (`--out` must not pass for `--output`). Unknown
    arguments are reported before missing options, as in "unrecognized arguments: --out build/x", which
    names the stale flag; plain argparse would only say which new options are missing.
    """

    def __init__(self, prog: str) -> None:
        super().__init__(prog=prog, add_help=False, allow_abbrev=False)
        self._required: list[tuple[str, str]] = []  # (flag, dest) of the options every call needs

    def add_required_option(self, flag: str, dest: str, **kwargs: Any) -> None:
        self.add_argument(flag, dest=dest, **kwargs)
        self._required.append((flag, dest))

    def parse_args(self, args: Any = None, namespace: Any = None) -> argparse.Namespace:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        missing = [flag for flag, dest in self._required if getattr(parsed, dest) is None]
        if missing:
            self.error(f"the following arguments are required: {', '.join(missing)}")
        return parsed

    def error(self, message: str) -> NoReturn:
        raise ToolError(f"{self.prog}: error: {message}")


@dataclass(frozen=True, slots=True)
class Arg:
    """One argument of a syntax: positional when `flag` is None, else a required `--flag value`."""

    dest: str
    flag: str | None = None
    choices: tuple[str, ...] | None = None
    path: bool = False
    type: Callable[[str], Any] = str


Syntax = tuple["str | Arg", ...]  # a str element is a literal sub-command word


@dataclass(frozen=True, slots=True)
class Version:
    """A tool version: which syntax it parses and which convention its artefacts must follow."""

    syntax: int
    convention: int


VERSIONS: dict[str, Version] = {
    "1.0": Version(0, 0),
    "2.0": Version(0, 1),
    "3.0": Version(1, 1),
    "4.0": Version(2, 0),
}
FLAVOURS: tuple[tuple[int, int], ...] = tuple((s, c) for s in range(3) for c in range(2))


class Tool(ABC):
    """A tool: its program (`run`) and its jobs (`describe`, `invocation`, `prepare`, `verify`)."""

    name: ClassVar[str]
    syntaxes: ClassVar[tuple[Syntax, Syntax, Syntax]]
    conventions: ClassVar[tuple[str, str]]
    subjects: ClassVar[tuple[str, ...]]  # the inputs jobs are about, in the order jobs take them

    def __init__(self) -> None:
        self._parsers = tuple(self._parser(syntax) for syntax in self.syntaxes)

    def _parser(self, syntax: Syntax) -> ToolParser:
        parser = ToolParser(self.name)
        for element in syntax:
            if isinstance(element, str):
                parser.add_argument("command", choices=[element])
            elif element.flag is None:
                parser.add_argument(element.dest, choices=element.choices, type=element.type)
            else:
                parser.add_required_option(
                    element.flag, element.dest, choices=element.choices, type=element.type
                )
        return parser

    # ----- the program
    def run(self, argv: list[str], version: str, root: str) -> str:
        """Run the tool as `version` would, inside the sandbox at `root`; raise ToolError on failure."""
        sandbox = _sandbox(root)
        index = VERSIONS[version].syntax
        namespace = _parsed(self._parsers[index], tuple(argv))
        if isinstance(namespace, str):
            raise ToolError(namespace)
        params: dict[str, Any] = {}
        for element in self.syntaxes[index]:
            if isinstance(element, str):
                continue
            value = namespace[element.dest]
            if element.path:
                try:
                    value = sandbox.job_path(value)
                except Refused as exc:
                    raise ToolError(
                        f"{self.name}: error: argument {element.flag or element.dest}: {exc}"
                    ) from None
            params[element.dest] = value
        try:
            return self.operate(sandbox, params)
        except Refused as exc:
            raise ToolError(f"{self.name}: error: {exc}") from None
        except OSError as exc:
            if exc.strerror is None:  # e.g. shutil's errors, whose text names absolute paths
                raise ToolError(f"{self.name}: error: {sandbox.scrub(str(exc))}") from None
            where = f": {sandbox.relative(exc.filename)}" if exc.filename else ""
            raise ToolError(f"{self.name}: error: {exc.strerror}{where}") from None

    def usage_error(self, argv: list[str], version: str) -> str | None:
        """The argparse error `run` would raise for `argv` under `version` (None when it parses): such a
        call fails before touching anything, so the environment need not send it to the worker."""
        namespace = _parsed(self._parsers[VERSIONS[version].syntax], tuple(argv))
        return namespace if isinstance(namespace, str) else None

    def written(self, argv: list[str], version: str) -> str | None:
        """The one path a call of `argv` under `version` may write, as given (its `out` argument: every
        tool writes its artefact there and nothing else); None when it does not parse."""
        namespace = _parsed(self._parsers[VERSIONS[version].syntax], tuple(argv))
        return None if isinstance(namespace, str) else namespace["out"]

    @abstractmethod
    def operate(self, sandbox: Sandbox, params: dict[str, Any]) -> str:
        """Do the work on already-confined paths; return the success message."""

    # ----- the jobs
    @abstractmethod
    def describe(self, subject: str) -> str:
        """The job in words, e.g. "archive the folder reports/ into a gzipped tarball"."""

    @abstractmethod
    def params(self, subject: str, convention: str) -> dict[str, str]:
        """The argument values of the invocation that does the job under `convention` (key "out" is
        the artefact's path)."""

    @abstractmethod
    def fixture(self, subject: str) -> dict[str, bytes]:
        """The job's input files (path -> content), the same for every run."""

    def inputs(self, subject: str) -> tuple[str, ...]:
        """The input paths `prepare` restores (default: the fixture's files; a folder for archive)."""
        return tuple(self.fixture(subject))

    @abstractmethod
    def check(self, data: bytes, subject: str, fixture: Mapping[str, bytes], convention: str) -> str | None:
        """What is wrong with the artefact `data` (None when it is right)."""

    def render(self, flavour: tuple[int, int], subject: str) -> str:
        """The command line of `flavour` = (syntax, convention) for the job on `subject`."""
        syntax, convention = flavour
        params = self.params(subject, self.conventions[convention])
        words = [self.name]
        for element in self.syntaxes[syntax]:
            if isinstance(element, str):
                words.append(element)
            elif element.flag is None:
                words.append(shlex.quote(params[element.dest]))
            else:
                words += [element.flag, shlex.quote(params[element.dest])]
        return " ".join(words)

    def invocation(self, subject: str, version: str) -> str:
        """The one invocation that does the job under `version`."""
        v = VERSIONS[version]
        return self.render((v.syntax, v.convention), subject)

    def outputs(self, subject: str) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.params(subject, c)["out"] for c in self.conventions))

    def prepare(
        self, sandbox: Sandbox, subject: str, fixture: Mapping[str, bytes], restore_inputs: bool = True
    ) -> None:
        """Give the job a clean start: no artefacts (so any found later are this call's) and, unless
        `restore_inputs` is False, pristine inputs."""
        outputs, inputs = _layout(self, subject)
        for path in outputs:
            sandbox.clear(path)
        if restore_inputs:
            for path in inputs:
                sandbox.restore(
                    path, {p: d for p, d in fixture.items() if p == path or p.startswith(path + "/")}
                )

    def verify(
        self, sandbox: Sandbox, subject: str, fixture: Mapping[str, bytes], version: str
    ) -> str | None:
        """Check the job's artefact on disk against `version`'s convention; None when it is right."""
        convention = self.conventions[VERSIONS[version].convention]
        out = self.params(subject, convention)["out"]
        try:
            data = sandbox.read_plain(out)
        except OSError as exc:
            problem: str | None = f"unreadable ({type(exc).__name__}: {exc})"
        else:
            if data is None:
                return f"check failed: {out} was not produced"
            key = (self.name, self.check_key(data), subject, frozenset(fixture.items()), convention)
            if key not in _CHECKED:
                if len(_CHECKED) >= MAX_CHECKED:
                    _CHECKED.clear()
                _CHECKED[key] = self._check(data, subject, fixture, convention)
            problem = _CHECKED[key]
        return None if problem is None else f"check failed: {out}: {problem}"

    def check_key(self, data: bytes) -> bytes:
        """What `check`'s verdict on `data` depends on (default: all of it); see `verify`'s memo."""
        return data

    def _check(self, data: bytes, subject: str, fixture: Mapping[str, bytes], convention: str) -> str | None:
        try:
            return self.check(data, subject, fixture, convention)
        except (OSError, ValueError, EOFError, tarfile.TarError, configparser.Error) as exc:
            return f"unreadable ({type(exc).__name__}: {exc})"


#: `verify`'s memo of `check` verdicts: a check is a pure function of its arguments, agents produce the
#: same few artefacts again and again, and unpacking one (a tarball) cost more than running the tool.
_CHECKED: dict[tuple[Any, ...], str | None] = {}
MAX_CHECKED = 4096


@lru_cache(maxsize=64)
def _sandbox(root: str) -> Sandbox:
    return Sandbox(root)


@lru_cache(maxsize=1024)
def _parsed(parser: ToolParser, argv: tuple[str, ...]) -> dict[str, Any] | str:
    """`parser`'s arguments for `argv` (read-only), or its error message. Parsing is a pure function of
    argv and agents repeat their invocations, so each distinct one is parsed once per process."""
    try:
        return vars(parser.parse_args(list(argv)))
    except ToolError as exc:
        return str(exc)


@lru_cache(maxsize=256)
def _layout(tool: Tool, subject: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The job's (output paths, input paths), fixed per subject; `inputs` would rebuild the fixture on
    every call."""
    return tool.outputs(subject), tool.inputs(subject)


#: Inputs up to this many bytes (a folder to pack, a table to convert) have their results memoised (256 of
#: each: a few MB at most).
MEMO_BYTES = 64 * 2**10


def _pack(members: tuple[tuple[str, bytes], ...]) -> bytes:
    small = sum(len(data) for _, data in members) <= MEMO_BYTES
    return _tarball(members) if small else _tarball.__wrapped__(members)


@lru_cache(maxsize=256)
def _tarball(members: tuple[tuple[str, bytes], ...]) -> bytes:
    """A gzipped tarball of (name, content) members. A pure function of them up to the gzip header's
    timestamp, which nothing reads, and agents pack the same few folders again and again: packing
    (tarfile is pure Python) was most of the tool worker's time."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as tar:
        for name, data in members:
            # A plain TarInfo: tar.add would look up user and group names on every file.
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _csv_to_json(data: bytes, layout: str) -> tuple[bytes, int]:
    """The JSON (`layout` "array" or "lines") of a UTF-8 CSV table's records, and how many there are;
    memoised for small tables like `_pack`: parsing and dumping were most of a conversion's time."""
    return _json_of_csv(data, layout) if len(data) <= MEMO_BYTES else _json_of_csv.__wrapped__(data, layout)


@lru_cache(maxsize=256)
def _json_of_csv(data: bytes, layout: str) -> tuple[bytes, int]:
    rows = list(csv.DictReader(io.StringIO(data.decode("utf-8"), newline="")))
    if layout == "array":
        text = json.dumps(rows, indent=2) + "\n"
    else:
        text = "".join(json.dumps(row) + "\n" for row in rows)
    return text.encode(), len(rows)


def subject_for(tool: Tool, index: int) -> str:
    """The subject of the tool's `index`-th job: the names in order, then numbered rounds."""
    names = tool.subjects
    base = names[index % len(names)]
    return base if index < len(names) else f"{base}{index // len(names) + 1}"


def _rng(*parts: str) -> random.Random:
    return random.Random("/".join(parts))


def _write_new(sandbox: Sandbox, path: str, data: bytes) -> None:
    with sandbox.open_new(path) as handle:
        handle.write(data)


class Archive(Tool):
    name = "archive"
    syntaxes = (
        (Arg("src", "--src", path=True), Arg("out", "--out", path=True)),
        (Arg("src", "--source", path=True), Arg("out", "--output", path=True)),
        ("create", Arg("src", path=True), Arg("out", "--dest", path=True)),
    )
    conventions = ("build", "dist")
    subjects = ("reports", "logs", "notes", "docs", "media", "scans")

    def operate(self, sandbox: Sandbox, params: dict[str, Any]) -> str:
        src, out = params["src"], params["out"]
        if not os.path.isdir(src):
            raise ToolError(f"archive: error: {sandbox.relative(src)}: not a directory")
        name, inside = os.path.basename(src), out.removeprefix(src.rstrip("/") + "/")
        with sandbox.open_new(out) as handle:
            members = [(f"{name}/{path}", data) for path, data in sandbox.plain_files(src, skip=inside)]
            handle.write(_pack(tuple(members)))
        return f"archive: packed {len(members)} files into {sandbox.relative(out)}"

    def describe(self, subject: str) -> str:
        return f"archive the folder {subject}/ into a gzipped tarball"

    def params(self, subject: str, convention: str) -> dict[str, str]:
        return {"src": subject, "out": f"{convention}/{subject}.tar.gz"}

    def fixture(self, subject: str) -> dict[str, bytes]:
        rng = _rng(self.name, subject)
        files = {f"{subject}/summary.txt": f"{subject}: {rng.randrange(10**6)} entries\n".encode()}
        for quarter in ("q1", "q2"):
            rows = "".join(f"{i},{rng.randrange(1000)}\n" for i in range(4))
            files[f"{subject}/2024/{quarter}.csv"] = f"id,value\n{rows}".encode()
        return files

    def inputs(self, subject: str) -> tuple[str, ...]:
        return (subject,)

    def check_key(self, data: bytes) -> bytes:
        """The tarball without its gzip header's timestamp (bytes 4-8), which unpacking ignores and
        which differs between calls a second apart."""
        return data[:4] + bytes(4) + data[8:] if data[:2] == b"\x1f\x8b" and len(data) >= 10 else data

    def check(self, data: bytes, subject: str, fixture: Mapping[str, bytes], convention: str) -> str | None:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            packed = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
        return None if packed == dict(fixture) else f"does not contain exactly the files of {subject}/"


class Convert(Tool):
    name = "convert"
    syntaxes = (
        (
            Arg("src", "--in", path=True),
            Arg("out", "--out", path=True),
            Arg("layout", "--format", ("array", "lines")),
        ),
        (
            Arg("src", "--input", path=True),
            Arg("out", "--output", path=True),
            Arg("layout", "--format", ("array", "lines")),
        ),
        (
            "to-json",
            Arg("src", path=True),
            Arg("out", "--dest", path=True),
            Arg("layout", "--layout", ("array", "lines")),
        ),
    )
    conventions = ("array", "lines")
    subjects = ("sales", "users", "orders", "events", "prices", "stock")

    def operate(self, sandbox: Sandbox, params: dict[str, Any]) -> str:
        src, out = params["src"], params["out"]
        data = sandbox.read(src)
        try:
            text, count = _csv_to_json(data, params["layout"])
        except (csv.Error, UnicodeDecodeError) as exc:
            raise ToolError(f"convert: error: {sandbox.relative(src)}: not a CSV table ({exc})") from None
        _write_new(sandbox, out, text)
        return f"convert: wrote {count} records to {sandbox.relative(out)}"

    def describe(self, subject: str) -> str:
        return f"convert the table data/{subject}.csv to JSON at out/{subject}.json"

    def params(self, subject: str, convention: str) -> dict[str, str]:
        return {"src": f"data/{subject}.csv", "out": f"out/{subject}.json", "layout": convention}

    def fixture(self, subject: str) -> dict[str, bytes]:
        rng = _rng(self.name, subject)
        rows = "".join(f"{i},item{rng.randrange(100)},{rng.randrange(1, 50)}\n" for i in range(4))
        return {f"data/{subject}.csv": f"id,item,qty\n{rows}".encode()}

    def check(self, data: bytes, subject: str, fixture: Mapping[str, bytes], convention: str) -> str | None:
        rows = list(csv.DictReader(io.StringIO(fixture[f"data/{subject}.csv"].decode())))
        text = data.decode()
        if convention == "array":
            try:
                records = json.loads(text)
            except ValueError:
                return "not a JSON array"
        else:
            try:
                records = [json.loads(line) for line in text.splitlines() if line.strip()]
            except ValueError:
                return "not JSON Lines (one record per line)"
            if not all(isinstance(record, dict) for record in records):
                return "not JSON Lines (one record per line)"
        return None if records == rows else f"records differ from data/{subject}.csv"


class Checksum(Tool):
    name = "checksum"
    syntaxes = (
        (
            Arg("src", "--file", path=True),
            Arg("out", "--out", path=True),
            Arg("style", "--style", ("gnu", "bsd")),
        ),
        (
            Arg("src", "--input", path=True),
            Arg("out", "--output", path=True),
            Arg("style", "--style", ("gnu", "bsd")),
        ),
        (
            "sha256",
            Arg("src", path=True),
            Arg("out", "--dest", path=True),
            Arg("style", "--format", ("gnu", "bsd")),
        ),
    )
    conventions = ("gnu", "bsd")
    subjects = ("firmware", "bootloader", "kernel", "initrd", "bios", "modem")

    @staticmethod
    def _line(digest: str, name: str, style: str) -> str:
        return f"{digest}  {name}\n" if style == "gnu" else f"SHA256 ({name}) = {digest}\n"

    def operate(self, sandbox: Sandbox, params: dict[str, Any]) -> str:
        src, out = params["src"], params["out"]
        digest = hashlib.sha256(sandbox.read(src)).hexdigest()
        _write_new(sandbox, out, self._line(digest, sandbox.relative(src), params["style"]).encode())
        return f"checksum: wrote the SHA-256 of {sandbox.relative(src)} to {sandbox.relative(out)}"

    def describe(self, subject: str) -> str:
        return f"write the SHA-256 checksum of bin/{subject}.bin to sums/{subject}.sha256"

    def params(self, subject: str, convention: str) -> dict[str, str]:
        return {"src": f"bin/{subject}.bin", "out": f"sums/{subject}.sha256", "style": convention}

    def fixture(self, subject: str) -> dict[str, bytes]:
        return {f"bin/{subject}.bin": _rng(self.name, subject).randbytes(512)}

    def check(self, data: bytes, subject: str, fixture: Mapping[str, bytes], convention: str) -> str | None:
        src = f"bin/{subject}.bin"
        expected = self._line(hashlib.sha256(fixture[src]).hexdigest(), src, convention)
        return None if data.decode() == expected else f"not a {convention}-style SHA-256 line for {src}"


class Configure(Tool):
    name = "configure"
    syntaxes = (
        (Arg("service", "--name"), Arg("port", "--port", type=int), Arg("out", "--out", path=True),
         Arg("format", "--format", ("ini", "json"))),
        (Arg("service", "--service"), Arg("port", "--port", type=int), Arg("out", "--output", path=True),
         Arg("format", "--format", ("ini", "json"))),
        ("write", Arg("service"), Arg("port", "--port", type=int), Arg("out", "--dest", path=True),
         Arg("format", "--syntax", ("ini", "json"))),
    )  # fmt: skip
    conventions = ("ini", "json")
    subjects = ("api", "web", "auth", "cache", "queue", "search")

    @staticmethod
    def _port(subject: str) -> int:
        return 8000 + zlib.crc32(subject.encode()) % 1000

    @staticmethod
    @lru_cache(maxsize=256)
    def _render(service: str, port: int, fmt: str) -> str:
        """The config text (memoised: a pure function of its arguments, and building a ConfigParser
        was most of a call's time)."""
        if fmt == "json":
            return json.dumps({service: {"port": port}}, indent=2) + "\n"
        config = configparser.ConfigParser()
        config[service] = {"port": str(port)}
        buffer = io.StringIO()
        config.write(buffer)
        return buffer.getvalue()

    def operate(self, sandbox: Sandbox, params: dict[str, Any]) -> str:
        out = params["out"]
        _write_new(sandbox, out, self._render(params["service"], params["port"], params["format"]).encode())
        return f"configure: wrote {params['format']} config of {params['service']} to {sandbox.relative(out)}"

    def describe(self, subject: str) -> str:
        return f"write the config of service {subject} (port {self._port(subject)}) to etc/{subject}.conf"

    def params(self, subject: str, convention: str) -> dict[str, str]:
        return {
            "service": subject,
            "port": str(self._port(subject)),
            "out": f"etc/{subject}.conf",
            "format": convention,
        }

    def fixture(self, subject: str) -> dict[str, bytes]:
        return {}

    def check(self, data: bytes, subject: str, fixture: Mapping[str, bytes], convention: str) -> str | None:
        text, port = data.decode(), self._port(subject)
        if convention == "json":
            try:
                ok = json.loads(text) == {subject: {"port": port}}
            except ValueError:
                return "not JSON"
        else:
            config = configparser.ConfigParser()
            try:
                config.read_string(text)
            except configparser.Error:
                return "not an INI file"
            ok = config.sections() == [subject] and dict(config[subject]) == {"port": str(port)}
        return None if ok else f"does not set port {port} for {subject}"


class Publish(Tool):
    name = "publish"
    syntaxes = (
        (Arg("src", "--file", path=True), Arg("out", "--dest", path=True)),
        (Arg("src", "--source", path=True), Arg("out", "--target", path=True)),
        ("copy", Arg("src", path=True), Arg("out", "--to", path=True)),
    )
    conventions = ("public", "www")
    subjects = ("changelog", "readme", "license", "notice", "authors", "security")

    def operate(self, sandbox: Sandbox, params: dict[str, Any]) -> str:
        src, out = params["src"], params["out"]
        if src == out:
            raise ToolError(f"publish: error: {sandbox.relative(src)}: source and destination are one file")
        _write_new(sandbox, out, sandbox.read(src))
        return f"publish: copied {sandbox.relative(src)} to {sandbox.relative(out)}"

    def describe(self, subject: str) -> str:
        return f"publish the file release/{subject}.txt to the release directory"

    def params(self, subject: str, convention: str) -> dict[str, str]:
        return {"src": f"release/{subject}.txt", "out": f"{convention}/{subject}.txt"}

    def fixture(self, subject: str) -> dict[str, bytes]:
        rng = _rng(self.name, subject)
        return {f"release/{subject}.txt": f"{subject} v{rng.randrange(1, 9)}.{rng.randrange(10)}\n".encode()}

    def check(self, data: bytes, subject: str, fixture: Mapping[str, bytes], convention: str) -> str | None:
        return None if data == fixture[f"release/{subject}.txt"] else f"differs from release/{subject}.txt"


TOOLS: dict[str, Tool] = {
    tool.name: tool for tool in (Archive(), Convert(), Checksum(), Configure(), Publish())
}

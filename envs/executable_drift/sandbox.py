"""Confinement for untrusted tool invocations: a directory no path may leave, and the invocation gate.

A model's reply is untrusted input. It is split with `shlex` (never handed to a shell), its first word
must name a whitelisted tool, and every argument that could be a path must resolve, after symlinks, to a
location inside the sandbox. Anything else is refused with a `Refused` error before it runs, so a refusal
changes nothing at all. The tools check their path arguments again when they run (see the `tools` module,
`Sandbox.job_path`): a path with a symlink on it, a file with more than one hard link (planted from outside,
it would let a write reach a file outside) or a special file is refused there, so a path the gate's generic
view misses still cannot leave the sandbox.

After every call that ran a tool the environment sweeps the sandbox (`Sandbox.sweep`): everything that
is not a job's input or output is removed, and outputs too once the sandbox holds more than its byte
budget, so whatever actions write cannot pile up (each file is also capped by the tool worker). It
lists only the folders whose status changed since it last looked; on Linux, inotify says which folders
had any change at all, so the others' status is not even taken.

The checks above look at paths, and a path can change after it was checked. So every file the tools
and the environment write, read or delete is reached from a descriptor of the sandbox folder held
since it was opened, one folder at a time, never through a link (`openat` with O_NOFOLLOW and
O_DIRECTORY; `shutil.rmtree` with `dir_fd`): even another process that swaps a folder for a link to
somewhere else between the check and the use can make the call fail, but not reach outside.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shlex
import shutil
import stat
import struct
import weakref
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, ClassVar, TypeVar

MAX_INVOCATION_CHARS = 2000
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC  # a folder, never through a link
_T = TypeVar("_T")
_NAMED_MAX = 1024


class Refused(ValueError):
    """An invocation (or one of its paths) was refused; the message says why, for the model to read."""


class Sandbox:
    """A directory that every path of an untrusted invocation must stay inside."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        real = os.path.realpath(root)
        if not os.path.isdir(real):
            raise ValueError(f"root must be an existing directory, got {os.fspath(root)!r}")
        self.root = Path(real)
        self._root = str(self.root)
        self._prefix = self._root.rstrip(os.sep) + os.sep
        self._fd = os.open(self._root, _DIR_FLAGS)  # every write, read and delete starts from it
        self._held: dict[str, tuple[int, int]] = {}  # the sweep's folders: name -> (descriptor, inode)
        self._memo: dict[str, _Seen] = {}  # what the last sweep saw of each kept folder, by path
        self._memo_layout: Layout | None = None
        self._intact: dict[str, list[tuple[str, tuple[int, ...]]]] = {}  # see restore
        self._watch: _Watch | None = None  # made by the first sweep (tools' sandboxes never sweep)
        self._watched: dict[str, int] = {}  # the sweep's folders watched: path -> the descriptor watched
        self._dirty: set[str] = set()  # watched folders with an event that no sweep has looked at yet
        self._named: dict[str, str] = {}  # see named
        weakref.finalize(self, _close_all, self._fd, self._held)

    def resolve(self, path: str) -> Path:
        """`path` (relative to the root, or absolute) with every symlink resolved; `Refused` when the
        result lies outside the sandbox."""
        return Path(self.real(path))

    def real(self, path: str) -> str:
        """`resolve` as a string: the gate checks every argument of every call and needs no Path."""
        return self._resolve(path)[0]

    def _resolve(self, path: str) -> tuple[str, os.stat_result | int | None]:
        """`real`, and the lstat of the result when `_plain` resolved it (None: not looked at)."""
        if not isinstance(path, str) or not path or "\x00" in path:
            raise Refused(f"invalid path {path!r}")
        try:
            real, last = self._plain(path) or (os.path.realpath(os.path.join(self._root, path)), None)
        except OSError:  # a link that vanished while it was read: the path is changing under us
            raise Refused(f"cannot resolve the path {path}") from None
        if real != self._root and not real.startswith(self._prefix):
            raise Refused(f"path escapes the sandbox: {path}")
        return real, last

    def _plain(self, path: str) -> tuple[str, os.stat_result | int | None] | None:
        """The resolution of a relative path with no `..` and no symlink on it (the common case),
        found with one lstat per part, and what the last lstat gave (a status, or the errno of a part
        that does not exist, which is no symlink; None: no part); None when `os.path.realpath` must
        decide. (An errno, not the error: a kept error would hold this frame in a reference cycle.)"""
        if path.startswith("/"):
            return None
        current, last = self._root, None
        for part in path.split("/"):
            if part in ("", "."):
                continue
            if part == "..":
                return None
            current = f"{current}/{part}"
            try:
                last = os.lstat(current)
            except OSError as exc:
                last = exc.errno
                continue
            if stat.S_ISLNK(last.st_mode):
                return None
        return current, last

    def job_path(self, path: str) -> str:
        """`real`, for a path a tool is about to read or write: refused as well when a symlink lies on
        it, or when it is an existing file that is not a plain one (a FIFO, a device) or has more than
        one hard link. A path `_plain` resolves needs no lstat beyond its own (the last one's is the
        file's); a string, as tools open it (a Path per argument cost a tenth of a call)."""
        real, st = self._resolve(path)
        if st is None and real != os.path.normpath(os.path.join(self._root, path)):
            raise Refused(f"refused: a symbolic link is on the path {path}")
        if st == errno.ENOENT:
            return real
        if not isinstance(st, os.stat_result):
            try:
                st = os.lstat(real)  # not looked at yet, or another error: raised as it is
            except FileNotFoundError:
                return real
        if stat.S_ISDIR(st.st_mode):
            return real
        if not stat.S_ISREG(st.st_mode):
            raise Refused(f"refused: {path} is not a regular file")
        if st.st_nlink > 1:
            raise Refused(f"refused: {path} has {st.st_nlink} hard links")
        return real

    def sweep(self, layout: Layout, budget: int, touched: Collection[str] | None = None) -> None:
        """Remove everything but the layout's files (plain files of the expected size; outputs any size)
        and the folders that hold them; then, when what is left exceeds `budget` bytes, the outputs too.
        Folders are entered by descriptor without following links, so a folder swapped for a link while
        the sweep runs cannot make it delete outside the sandbox. A kept folder's descriptor is held from
        one sweep to the next and used again while its name lists the same inode (which the held
        descriptor keeps from being reused).

        `touched` (root-relative paths) says that since the last sweep only those files may have been
        written in place; every other change adds, removes or renames an entry, which changes its
        folder's status (inode, size, links, modification and change times). Then a kept folder whose
        status is what the last sweep saw is not listed again (its kept files are as they were: one
        fstat instead of a listing and an lstat per file), and the touched files in it are looked at
        alone. A change from outside is seen in the status of its folder as well (Linux makes a folder's
        change time fine-grained once it was read, so no change after a sweep hides in the same clock
        tick). None: every folder is listed, as after a call of a tool whose writes are not known.

        Where Linux's inotify is there, each kept folder is watched from the time its descriptor is held
        (`_Watch`): every change of its status comes with an event, so a folder without one since the
        last sweep looked at it is as it was and its status is not even taken (one read of the events
        instead of an fstat per folder)."""
        if self._watch is None:
            self._watch = _Watch()
            weakref.finalize(self, self._watch.close)
            if self._watch.add("", self._fd):
                self._watched[""] = self._fd
        changed = self._watch.changed()
        if changed is None:  # events were lost: every folder is listed
            self._memo.clear()
        else:
            self._dirty |= changed
        if layout is not self._memo_layout or touched is None:
            self._memo.clear()
            self._memo_layout = layout
        touched_in: dict[str, list[str]] = {}
        for path in touched or ():
            folder, _, name = path.rpartition("/")
            touched_in.setdefault(f"{folder}/" if folder else "", []).append(name)
        kept, outputs = 0, []
        stack = [("", self._fd)]
        while stack:
            rel, fd = stack.pop()
            seen = self._memo.get(rel)
            if seen is not None and self._watched.get(rel) == fd and rel not in self._dirty:
                status = seen.status  # no event since it was looked at: unchanged
            else:
                status = _status(fd)
                self._dirty.discard(rel)
            if seen is None or seen.status != status:
                seen = self._list(rel, fd, layout, status)
            elif rel in touched_in:
                seen = self._recheck(rel, fd, layout, seen, touched_in[rel])
            stack.extend(seen.children)
            kept += seen.kept
            outputs.extend(seen.outputs)
        if kept > budget:
            self._memo.clear()
            for fd, name in outputs:
                _remove(name, fd)

    def _list(self, rel: str, fd: int, layout: Layout, status: tuple[int, ...]) -> _Seen:
        """List the folder `fd` (`rel` its path and a slash, "" for the root; `status` taken before
        listing it) and remove what the layout does not keep; what it keeps, remembered with that status
        (not with the one it has after a removal: then it is listed again next time)."""
        files: dict[str, int] = {}
        folders: list[str] = []
        removed = False
        with os.scandir(fd) as entries:
            for entry in entries:
                name = rel + entry.name
                if entry.is_dir(follow_symlinks=False):
                    if name in layout.dirs:
                        if self._held_folder(name, entry, fd) is not None:
                            folders.append(entry.name)
                    else:
                        _remove(entry.name, fd)
                        removed = True
                    continue
                size = layout.files.get(name, -1)
                if size != -1 and entry.is_file(follow_symlinks=False):
                    st = entry.stat(follow_symlinks=False)
                    if st.st_nlink == 1 and size in (None, st.st_size):
                        files[entry.name] = st.st_size
                        continue
                _remove(entry.name, fd)
                removed = True
        seen = self._seen(rel, fd, layout, status, files, folders)
        if removed:
            self._memo.pop(rel, None)
        else:
            self._memo[rel] = seen
        return seen

    def _recheck(self, rel: str, fd: int, layout: Layout, seen: _Seen, names: list[str]) -> _Seen:
        """`seen` after a look at its kept files among `names`, written in place since the last sweep:
        those the layout no longer keeps are removed (and the folder is listed next time)."""
        files = dict(seen.files)
        removed = False
        for name in names:
            if name in files and not self._keeps(rel + name, name, fd, layout, files):
                removed = True
        seen = self._seen(rel, fd, layout, seen.status, files, seen.folders)
        if removed:
            del self._memo[rel]  # its status changed with the removal
        else:
            self._memo[rel] = seen
        return seen

    def _seen(
        self,
        rel: str,
        fd: int,
        layout: Layout,
        status: tuple[int, ...],
        files: dict[str, int],
        folders: list[str],
    ) -> _Seen:
        """What a sweep adds up from a kept folder, worked out once for as long as it stays unchanged."""
        children = [(f"{rel}{name}/", self._held[rel + name][0]) for name in folders]
        outputs = [(fd, name) for name in files if layout.files[rel + name] is None]
        return _Seen(status, files, folders, children, sum(files.values()), outputs)

    def _keeps(self, path: str, name: str, fd: int, layout: Layout, files: dict[str, int]) -> bool:
        """Whether the layout keeps the file `name` (at `path`) in the folder `fd` as it is now, written
        in place since the last sweep; `files` is updated, and the file removed when it is not kept."""
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            del files[name]
            return False
        size = layout.files[path]
        if stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and size in (None, st.st_size):
            files[name] = st.st_size
            return True
        _remove(name, fd)
        del files[name]
        return False

    def _held_folder(self, name: str, entry: os.DirEntry[str], parent: int) -> int | None:
        """The held descriptor of the kept folder `name` (listed as `entry` in the folder `parent`): the
        one held since an earlier sweep while it is still the inode listed there, else one entered anew
        without following a link (None: no folder there any more)."""
        held = self._held.get(name)
        if held is not None and held[1] == entry.inode():
            return held[0]
        inner = _enter(entry.name, parent)
        path = f"{name}/"
        assert self._watch is not None  # made by the sweep that lists its parent
        if held is not None:
            os.close(self._held.pop(name)[0])
            self._watched.pop(path, None)
            self._watch.drop(path)
        if inner is not None:
            self._held[name] = (inner, os.fstat(inner).st_ino)
            if self._watch.add(path, inner):
                self._watched[path] = inner
            self._dirty.add(path)  # what a sweep saw under this name was another folder
        return inner

    def relative(self, path: str | os.PathLike[str]) -> str:
        """How to name `path` in a message: relative to the root (absolute temp paths would make
        messages, and so prompts, differ from run to run)."""
        text = os.fspath(path)
        if not text.startswith(self._prefix):
            return text
        tail = text[len(self._prefix) :]
        if tail and tail[0] != "/" and os.path.normpath(text) == text:
            return tail  # what relpath gives when there is nothing to normalise, at a tenth of the cost
        return os.path.relpath(text, self._root)

    def named(self, path: str) -> str:
        """`relative` of `path` (root-relative or absolute) joined to the root and normalised: how the
        environment names the file a call wrote. A pure function of the string, kept for the few paths
        agents write again and again (at most `_NAMED_MAX`)."""
        name = self._named.get(path)
        if name is None:
            if len(self._named) >= _NAMED_MAX:
                self._named.clear()
            name = self._named[path] = self.relative(os.path.normpath(os.path.join(self._root, path)))
        return name

    def scrub(self, text: str) -> str:
        """`text` with the sandbox's absolute location taken out of every path in it."""
        return text.replace(self._prefix, "").replace(self._root, ".")

    def clear(self, path: str) -> None:
        """Make room for `path` (root-relative, without `..`): delete whatever is there (a file, a link,
        a folder tree) and any file or link standing where one of its parent folders belongs. Links are
        deleted, never followed, also one planted while this runs (folders are entered by descriptor)."""
        parts = self._parts(path)
        seen = self._last_seen(parts)
        if seen is not None:
            folder, kept = seen
            if not kept:
                return
            try:  # a kept file seen there; nothing else stands in the way
                os.unlink(parts[-1], dir_fd=folder)
                return
            except FileNotFoundError:
                return
            except OSError:
                pass  # replaced by a folder a moment ago: looked at below
        fd = os.dup(self._fd)
        try:
            for i, part in enumerate(parts):
                inner = _enter(part, fd) if i < len(parts) - 1 else None
                if inner is None:  # the target itself, or a non-folder in its way (a folder of
                    _remove(part, fd)  # the target's path that is gone now needs no room made)
                    return
                os.close(fd)
                fd = inner
        finally:
            os.close(fd)

    def _last_seen(self, parts: Sequence[str]) -> tuple[int, bool] | None:
        """What the last sweep saw at `parts` when neither its folder nor any above it has changed since
        (an entry added or replaced changes its folder's status; see `sweep`): the held descriptor of
        its folder and whether a kept file is there (else nothing is); found with one fstat per folder.
        None: not known (a folder changed, or a kept folder stands there)."""
        rel, fd = "", self._fd
        for i, part in enumerate(parts):
            seen = self._memo.get(rel)
            if seen is None or _status(fd) != seen.status:
                return None
            if i == len(parts) - 1:
                return None if part in seen.folders else (fd, part in seen.files)
            if part not in seen.folders:
                return None  # no kept folder there: `clear` looks (it may have to remove a file)
            rel += part + "/"
            fd = self._held[rel[:-1]][0]
        return None

    def write(self, path: str, data: bytes) -> None:
        """Write `data` to a new file `path` inside the sandbox, creating parent directories (a file
        created anew: never one that a link planted there leads to)."""
        with self.open_new(path, exclusive=True) as handle:
            handle.write(data)

    def open_new(self, path: str, exclusive: bool = False) -> BinaryIO:
        """Open `path` (inside the sandbox, absolute or root-relative) for writing, emptied, creating its
        folders. Its folders are entered from the sandbox's descriptor one at a time without following
        a link, so a folder swapped for a link after the path was checked cannot redirect the write;
        a link or a special file at the end is refused (O_NOFOLLOW, O_NONBLOCK), and so is a file with
        more than one hard link, before anything is truncated. `exclusive`: replace whatever is there
        with a new file."""
        parts = self._parts(path)
        folder = self._folder(parts[:-1], path, create=True)
        try:
            if exclusive:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(parts[-1], dir_fd=folder)
            flags = _OPEN_FOR_WRITING | (os.O_EXCL if exclusive else 0)
            fd = _named(path, os.open, parts[-1], flags, 0o644, dir_fd=folder)
        finally:
            os.close(folder)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            os.close(fd)
            raise Refused(f"refused: {os.path.basename(path)} is not a plain file with one link")
        if st.st_size:  # a file created anew (the common case) is empty already
            os.ftruncate(fd, 0)
        return os.fdopen(fd, "wb")

    def read(self, path: str) -> bytes:
        """The content of the file `path` (inside the sandbox), reached as `open_new` reaches it: errors
        as `open` raises them, naming `path`; a link or a special file is refused."""
        parts = self._parts(path)
        folder = self._folder(parts[:-1], path)
        try:
            fd = _named(path, os.open, parts[-1], _OPEN_FOR_READING, dir_fd=folder)
        finally:
            os.close(folder)
        try:
            mode = os.fstat(fd).st_mode
            if stat.S_ISDIR(mode):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
            if not stat.S_ISREG(mode):
                raise Refused(f"refused: {self.relative(path)} is not a regular file")
            return _read_all(fd)
        finally:
            os.close(fd)

    def read_plain(self, path: str) -> bytes | None:
        """`read_plain` of `path` inside the sandbox, reached as `read` reaches it (None: no plain file)."""
        try:
            return self.read(path)
        except Refused:
            return None
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EISDIR):
                return None
            raise

    def plain_files(self, path: str, skip: str = "") -> Iterator[tuple[str, bytes]]:
        """(path relative to `path`, content) of every plain file under the folder `path`, but `skip`,
        in the order of a top-down os.walk with sorted names (a folder's files, then its subfolders').
        Links are neither followed nor read, and folders that cannot be listed are passed over, as
        os.walk does; folders are entered by descriptor, as `open_new` enters them."""
        try:
            fd = self._folder(self._parts(path, root=True), path)
        except (OSError, Refused):
            return
        yield from _plain_files_at(fd, "", skip)

    def _parts(self, path: str, root: bool = False) -> list[str]:
        """The components of `path` below the root (`path` absolute inside the sandbox, or relative);
        none for the root itself when `root` allows it."""
        if path.startswith("/"):
            if path != self._root and not path.startswith(self._prefix):
                raise Refused(f"path escapes the sandbox: {path}")
            path = path[len(self._prefix) :]
        parts = [part for part in path.split("/") if part not in ("", ".")]
        if (not parts and not root) or ".." in parts:
            raise Refused(f"invalid path {path!r}")
        return parts

    def _folder(self, parts: Sequence[str], path: str, create: bool = False) -> int:
        """A descriptor of the folder `parts` below the root, entered one folder at a time from the held
        root without following a link (created when `create`); the caller closes it. A link or a file
        on the way is refused; other errors are raised naming `path`. The root's own descriptor is
        entered from, never closed here (a copy of it is returned for the root itself)."""
        fd = self._fd
        try:
            for part in parts:
                try:
                    inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o755, dir_fd=fd)
                    inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
                if fd != self._fd:
                    os.close(fd)
                fd = inner
        except OSError as exc:
            link = exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(part, fd)  # O_DIRECTORY: ENOTDIR
            if fd != self._fd:
                os.close(fd)
            if link:
                raise Refused(f"refused: a symbolic link is on the path {self.relative(path)}") from None
            raise type(exc)(exc.errno, exc.strerror, path) from None
        return fd if fd != self._fd else os.dup(fd)

    def restore(self, path: str, files: Mapping[str, bytes]) -> None:
        """Make `path` (a file, or a folder) hold exactly `files` (root-relative paths under `path`).

        Disk is touched only where something differs: on many file systems rewriting a file costs
        milliseconds while reading it costs microseconds, and the environment restores inputs before
        every call. Reading costs more than looking: once `path` holds `files`, the status of everything
        it is made of (its folders from the root on, its files) is remembered, and while each is the same
        (inode, type, links, size, modification and change times: any write, rename, link or entry added
        or removed changes one of them) nothing is read again. `forget` drops what a tool call may have
        written in place within one clock tick of the look (Linux times a change that follows a look
        finely, other systems may not).
        """
        seen = self._intact.get(path)
        if seen is not None and _unchanged(self._fd, seen):
            return
        if not self._holds(path, files):
            self.clear(path)
            for name, data in files.items():
                self.write(name, data)
        self._intact[path] = _statuses(self._fd, path, files)

    def forget(self, written: str | None) -> None:
        """A tool call may have written the file `written` (root-relative; None: anything): what `restore`
        remembers of the inputs on its path, or under it, is dropped."""
        if written is None:
            self._intact.clear()
            return
        for path in [p for p in self._intact if _overlap(p, written)]:
            del self._intact[path]

    def _holds(self, path: str, files: Mapping[str, bytes]) -> bool:
        """Whether `path` holds exactly `files`, as plain files with one link each, reached without a
        symlink (a planted link or hard link is replaced, never read through): its folders are entered
        by descriptor, as `read` enters them, and each file is read only when its size is right."""
        try:
            parts = self._parts(path)
            folder = self._folder(parts[:-1], path)
        except (OSError, Refused):
            return False
        try:
            fd = os.open(parts[-1], _OPEN_FOR_READING, dir_fd=folder)
        except OSError:
            return False
        finally:
            os.close(folder)
        try:
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode):
                return len(files) == 1 and _holds_file(fd, st, files.get(path))
            found = [0]
            return stat.S_ISDIR(st.st_mode) and _holds_at(fd, path, files, found) and found[0] == len(files)
        except OSError:
            return False
        finally:
            os.close(fd)


@dataclass(frozen=True)
class Layout:
    """What a sandbox may keep between episodes: `files` maps a root-relative path to its exact size
    (a job's input) or None (a job's output, any size); `dirs` are the folders on their paths."""

    files: Mapping[str, int | None]
    dirs: frozenset[str]

    @classmethod
    def of(cls, inputs: Mapping[str, bytes], outputs: Collection[str]) -> Layout:
        files: dict[str, int | None] = dict.fromkeys(outputs)
        files.update((path, len(data)) for path, data in inputs.items())
        dirs = {path.rsplit("/", i)[0] for path in files for i in range(1, path.count("/") + 1)}
        return cls(files, frozenset(dirs))


class _Watch:
    """One sandbox's watches on the folders its sweep keeps, in the process's inotify instance
    (`_Inotify`): an event for every entry added to, removed from or renamed in a watched folder and
    every change of its own attributes or of its children's, so a watched folder that had no event has
    the status it had (its inode is the held descriptor's). Without inotify (another system, no /proc,
    the limit of watches reached) nothing is watched (the sweep takes every folder's status)."""

    def __init__(self) -> None:
        self._inotify = _Inotify.shared()
        self._wds: dict[str, int] = {}  # path -> watch descriptor
        self.events: set[str] = set()  # see changed; filled by `_Inotify.collect`
        self.lost = False  # events were lost since the last `changed`

    def add(self, path: str, fd: int) -> bool:
        """Watch the folder open at `fd` (by descriptor: its inode, wherever it is), named `path`."""
        wd = -1 if self._inotify is None else self._inotify.add(self, path, fd)
        if wd < 0:
            return False
        self._wds[path] = wd
        return True

    def drop(self, path: str) -> None:
        """Stop watching the folder named `path` (it is no longer the one held under that name)."""
        wd = self._wds.pop(path, None)
        if wd is not None and self._inotify is not None:
            self._inotify.remove(self, wd)

    def changed(self) -> set[str] | None:
        """The paths of the watched folders with an event since the last call; None: not known (the
        queue overflowed and events were lost)."""
        if self._inotify is not None:
            self._inotify.collect()
        events, lost, self.events, self.lost = self.events, self.lost, set(), False
        return None if lost else events

    def close(self) -> None:
        """Stop every watch of this sandbox (the instance stays: closing one waits for the kernel)."""
        for path in list(self._wds):
            self.drop(path)


class _Inotify:
    """The process's inotify instance, shared by its sandboxes' `_Watch`es: closing an instance waits
    some 16 ms for the kernel, and a user may open only 128. A forked child makes its own."""

    _shared: ClassVar[_Inotify | None] = None

    def __init__(self, libc: Any, fd: int) -> None:
        self.fd, self.pid = fd, os.getpid()
        self._add, self._remove = libc.inotify_add_watch, libc.inotify_rm_watch
        self._owners: dict[int, tuple[_Watch, str]] = {}  # watch descriptor -> whose, and its path

    @classmethod
    def shared(cls) -> _Inotify | None:
        """The instance of this process (None: inotify is not there)."""
        here = cls._shared
        if here is None or here.pid != os.getpid():
            try:
                import ctypes

                libc = ctypes.CDLL(None, use_errno=True)
                fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            except (OSError, AttributeError):
                return None
            if fd < 0:
                return None
            here = cls._shared = cls(libc, fd)
        return here

    def add(self, owner: _Watch, path: str, fd: int) -> int:
        """A watch on the folder open at `fd` for `owner`, as `path`; -1 when it cannot be made or the
        folder is watched already (under another name, or by another sandbox)."""
        wd = self._add(self.fd, f"/proc/self/fd/{fd}".encode(), _WATCHED)
        if wd < 0 or self._owners.get(wd, (owner, path)) != (owner, path):
            return -1
        self._owners[wd] = (owner, path)
        return wd

    def remove(self, owner: _Watch, wd: int) -> None:
        """Remove `owner`'s watch `wd` (unless the kernel did, as it does when its folder is deleted)."""
        if self._owners.get(wd, (None, ""))[0] is owner:
            del self._owners[wd]
            self._remove(self.fd, wd)

    def collect(self) -> None:
        """Hand every queued event to the `_Watch` of its folder (`events`; `lost` for all when the
        queue overflowed)."""
        while True:
            try:
                data = os.read(self.fd, _EVENTS_READ)
            except BlockingIOError:
                return
            at = 0
            while at < len(data):
                wd, mask, _, size = _EVENT.unpack_from(data, at)
                if mask & _IN_Q_OVERFLOW:
                    for owner, _ in self._owners.values():
                        owner.lost = True
                whose = self._owners.pop(wd, None) if mask & _IN_IGNORED else self._owners.get(wd)
                if whose is not None:
                    whose[0].events.add(whose[1])
                at += _EVENT.size + size
            if len(data) < _EVENTS_READ - _EVENT_MAX:  # everything queued fitted: nothing left
                return


# IN_ATTRIB, IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE, IN_DELETE_SELF, IN_MOVE_SELF, IN_ONLYDIR
_WATCHED = 0x4 | 0x40 | 0x80 | 0x100 | 0x200 | 0x400 | 0x800 | 0x01000000
_IN_Q_OVERFLOW = 0x4000
_IN_IGNORED = 0x8000  # the watch was removed (its folder deleted, or inotify_rm_watch)
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then len bytes of name)
_EVENT_MAX = _EVENT.size + 256  # NAME_MAX + 1
_EVENTS_READ = 2**16


@dataclass(frozen=True, slots=True)
class _Seen:
    """What a sweep saw of a kept folder: its status when listed, its kept files (name -> size) and
    folders; and what each sweep adds up from them (its folders' held (path, descriptor), its files'
    bytes, its outputs), so that a folder found unchanged costs one fstat and no loop over its files."""

    status: tuple[int, ...]
    files: dict[str, int]
    folders: list[str]
    children: list[tuple[str, int]]
    kept: int
    outputs: list[tuple[int, str]]


_OPEN_FOR_READING = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_OPEN_FOR_WRITING = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def read_plain(path: str) -> bytes | None:
    """The content of the regular file at `path`, or None when there is none (nothing there, a symlink
    at its end, a folder, a FIFO). Other errors (e.g. no permission) are raised. One open, fstat, the
    reads and a close: the environment reads a few files around every call, and `open` would add three
    system calls and a buffered file object to each."""
    try:
        fd = os.open(path, _OPEN_FOR_READING)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            return None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return _read_all(fd)
    finally:
        os.close(fd)


def _holds_file(fd: int, st: os.stat_result, data: bytes | None) -> bool:
    """Whether the file open at `fd` (status `st`) is a plain file with one link holding `data`."""
    return (
        data is not None
        and stat.S_ISREG(st.st_mode)
        and st.st_nlink == 1
        and st.st_size == len(data)
        and os.read(fd, len(data) + 1) == data
    )


def _holds_at(fd: int, rel: str, files: Mapping[str, bytes], found: list[int]) -> bool:
    """`Sandbox._holds` below the folder `fd` (`rel` its path): every entry is a folder (entered without
    following a link) or one of `files`, held as it should be; `found` counts the files seen."""
    with os.scandir(fd) as entries:
        for entry in entries:
            name = f"{rel}/{entry.name}"
            flags = _DIR_FLAGS if entry.is_dir(follow_symlinks=False) else _OPEN_FOR_READING
            inner = os.open(entry.name, flags, dir_fd=fd)
            try:
                if flags == _DIR_FLAGS:
                    held = _holds_at(inner, name, files, found)
                else:
                    held = _holds_file(inner, os.fstat(inner), files.get(name))
                    found[0] += 1
            finally:
                os.close(inner)
            if not held:
                return False
    return True


def _signature(st: os.stat_result) -> tuple[int, ...]:
    """What changes when a file or folder is replaced, written, linked or gains or loses an entry."""
    return (st.st_ino, st.st_mode, st.st_nlink, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _statuses(root: int, path: str, files: Collection[str]) -> list[tuple[str, tuple[int, ...]]]:
    """The `_signature` of each folder from the root down to `path`, of `path`, and of the folders and
    `files` under it, each looked at without following a link at its end (an earlier entry of the list
    is its folder: a link swapped in there changes that entry)."""
    parts = path.split("/")
    names = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for name in sorted(files):
        if name.startswith(path + "/"):
            inner = name[len(path) + 1 :].split("/")
            names += [f"{path}/{'/'.join(inner[: i + 1])}" for i in range(len(inner))]
    names = list(dict.fromkeys(names))
    return [(name, _signature(os.stat(name, dir_fd=root, follow_symlinks=False))) for name in names]


def _unchanged(root: int, seen: Sequence[tuple[str, tuple[int, ...]]]) -> bool:
    """Whether every entry of `seen` (from `_statuses`) still has its signature."""
    try:
        return all(_signature(os.stat(name, dir_fd=root, follow_symlinks=False)) == was for name, was in seen)
    except OSError:
        return False


def _overlap(a: str, b: str) -> bool:
    """Whether one of two root-relative paths is the other or lies under it."""
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def _status(fd: int) -> tuple[int, ...]:
    """What changes when a folder's entries change: inode, size, links, modification and change times."""
    st = os.fstat(fd)
    return (st.st_ino, st.st_size, st.st_nlink, st.st_mtime_ns, st.st_ctime_ns)


def _enter(name: str, fd: int) -> int | None:
    """A descriptor of the folder `name` in the folder `fd`, entered without following a link; None
    when there is no folder there (nothing, a file, a link: also one swapped in a moment ago)."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=fd)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            return None
        raise


def _close_all(fd: int, held: Mapping[str, tuple[int, int]]) -> None:
    """Close a sandbox's root descriptor and the folder descriptors its sweeps hold."""
    for inner, _ in held.values():
        os.close(inner)
    os.close(fd)


def _is_link(name: str, fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _remove(name: str, fd: int) -> None:
    """Delete `name` in the folder `fd`, whatever it is (a folder tree, a file, a link: never followed);
    nothing there is fine."""
    try:
        if stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
            try:
                shutil.rmtree(name, dir_fd=fd)
                return
            except OSError:  # swapped for a link or a file since: take that instead
                if stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                    raise
        os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        pass


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 2**16):
        chunks.append(chunk)
    return b"".join(chunks)


def _named(path: str, call: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """`call(*args, **kwargs)`, its OSError naming `path` (a call relative to a descriptor names only
    the last component) and a link at the end refused."""
    try:
        return call(*args, **kwargs)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused(f"refused: {os.path.basename(path)} is a symbolic link") from None
        raise type(exc)(exc.errno, exc.strerror, path) from None


def _plain_files_at(fd: int, rel: str, skip: str) -> Iterator[tuple[str, bytes]]:
    """`Sandbox.plain_files` below the folder descriptor `fd` (closed here), `rel` its path."""
    try:
        with os.scandir(fd) as entries:
            listed = sorted(
                (entry.name, entry.is_dir(follow_symlinks=False), entry.is_file(follow_symlinks=False))
                for entry in entries
            )
        files = []
        for name, _, is_file in listed:
            if is_file and rel + name != skip:
                member = os.open(name, _OPEN_FOR_READING, dir_fd=fd)
                try:
                    files.append((rel + name, _read_all(member)))
                finally:
                    os.close(member)
        folders = []
        for name, is_dir, _ in listed:
            if is_dir:
                with contextlib.suppress(OSError):
                    folders.append((name, os.open(name, _DIR_FLAGS, dir_fd=fd)))
    finally:
        os.close(fd)
    yield from files
    for name, inner in folders:
        yield from _plain_files_at(inner, f"{rel}{name}/", skip)


def split_invocation(text: str) -> list[str]:
    """Split an untrusted command line into argv like a POSIX shell would (without running one), or
    raise `Refused` when it is not a command line: not a string, longer than MAX_INVOCATION_CHARS,
    unbalanced quotes, or empty."""
    if not isinstance(text, str):
        raise Refused(f"refused: an invocation must be a string, got {type(text).__name__}")
    if len(text) > MAX_INVOCATION_CHARS:
        raise Refused(f"refused: the invocation is longer than {MAX_INVOCATION_CHARS} characters")
    if text.isascii() and text.isprintable() and not any(c in text for c in "'\"\\"):
        argv = text.split()  # what shlex.split gives for plain text, at a tenth of the cost
    else:
        try:
            argv = shlex.split(text)
        except ValueError as exc:
            raise Refused(f"refused: cannot parse the invocation: {exc}") from None
    if not argv:
        raise Refused("refused: empty invocation")
    return argv


def check_invocation(argv: list[str], allowed: Collection[str], sandbox: Sandbox) -> None:
    """Raise `Refused` unless argv[0] is in `allowed` and every argument that is not an option flag
    (and the value of every `--flag=value`) resolves inside `sandbox`. Arguments that are not paths
    (`8080`, `array`) resolve harmlessly inside the root, so no knowledge of a tool's interface is
    needed."""
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
            sandbox.real(arg)
        except Refused as exc:
            raise Refused(f"{tool}: refused: {exc}") from None

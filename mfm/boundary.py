"""The one guarded boundary for reading a file that a run names, and for writing a run's files.

A run's own rows name files (an index row's ``path`` and ``image``, frame strips under it,
an episode's ``state/state.json``). Every read of such a file goes through here, whoever
reads (the agent, ``mfm validate``, ``mfm import``, the loaders, the dashboard): the name
must be a plain relative path, what it leads to (symlinks followed) must stay inside the
run folder, and JSON files are bounded in size and nesting depth (``mfm.schema.parse_json``).

Every write of a run's file goes through here too (:func:`atomic_writer`,
:func:`write_file_inside`): a fresh temporary file made with O_EXCL|O_NOFOLLOW beside the
target, in a folder that lies inside the root, renamed onto the target; nothing planted
under any name is written through. A tree is taken (packed, copied) by
:func:`regular_files` / :func:`copy_regular_files`: regular files only, links and special
files refused, within bounds on files and bytes.
"""
from __future__ import annotations

import errno
import os
import secrets
import stat
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

from mfm.schema import JSONError, NotRegularFile, open_file, parse_json, plain_relative

MAX_JSON_FILE_BYTES = 16 * 1024 * 1024
"""An episode record (state, action, outcome) larger than this is refused unread."""


class UnsafePath(ValueError):
    """A path named by a run (or a URL) that would leave the folder it must stay in."""


@lru_cache(maxsize=1024)
def _real(base: str) -> str:
    return os.path.realpath(base)


def inside(base: Path, rel: str) -> Path:
    """``base / rel`` resolved; UnsafePath for absolute paths, ``..`` and symlinks that leave
    ``base``. The message names ``rel`` only (never the server's absolute paths)."""
    if not plain_relative(rel):
        raise UnsafePath(f"{rel!r} is not a plain relative path (absolute paths, '..', backslashes and NUL "
                         "are refused)" if isinstance(rel, str) and rel else f"empty or invalid path {rel!r}")
    root = _real(str(base))
    target = os.path.realpath(os.path.join(root, rel))
    if target != root and not target.startswith(root.rstrip(os.sep) + os.sep):
        raise UnsafePath(f"{rel!r} leads outside its folder (through a symlink), refused")
    return Path(target)


def read_json(base: Path, rel: str, max_bytes: int = MAX_JSON_FILE_BYTES) -> Any:
    """Parse the JSON file ``rel`` under ``base``. Raises UnsafePath (outside ``base``, or
    not a regular file: a FIFO or device is refused unopened), FileNotFoundError, OSError, or
    JSONError (too large, not UTF-8, not JSON, too deep)."""
    p = inside(base, rel)
    try:
        f = open_file(p, rel)
    except NotRegularFile as e:
        raise UnsafePath(str(e)) from None
    with f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise JSONError(f"larger than {max_bytes} bytes, not read")
    return parse_json(data)


# Writing, and walking a tree: the other side of the boundary. Every write of a run's file
# goes through a fresh temporary file beside its target (created with O_CREAT|O_EXCL|
# O_NOFOLLOW, so nothing planted under any name is ever opened for writing) and is renamed
# onto the target, whose folder must lie inside the root once every symlink is resolved.

_OPEN_FLAGS = getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
_TEMP_TRIES = 16


class Refused(UnsafePath):
    """A file :func:`regular_files` does not take: ``rel`` (relative to the walked root) and
    ``reason`` (e.g. ``not a regular file (a symlink), not followed``)."""

    def __init__(self, rel: str, reason: str) -> None:
        super().__init__(f"{shown(rel)}: {reason}")
        self.rel = rel
        self.reason = reason


class TooLarge(ValueError):
    """A tree holding more files or bytes than the caller's bound; nothing was taken."""


@dataclass(frozen=True, slots=True)
class FileEntry:
    """One regular file found by :func:`regular_files`."""

    rel: str
    """Its path relative to the walked root, POSIX separators."""
    size: int
    """Its size in bytes when it was walked."""


def shown(name: str) -> str:
    """``name`` fit for a one-line message: as is when it is printable UTF-8, else its Python
    repr (newlines, control characters and undecodable bytes escaped)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return repr(name)
    return name if name.isprintable() else repr(name)


def name_problem(name: str) -> str | None:
    """Why one path component cannot be a run's file name (None when it can): not UTF-8, a
    backslash, a control character, ``.`` or ``..``, or empty. Such a name cannot be stored
    in a zip, listed on one line, or named by a run's rows."""
    if name in ("", ".", ".."):
        return "an empty, '.' or '..' name"
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "a name that is not UTF-8"
    if "\\" in name:
        return "a backslash in the name"
    if not name.isprintable():
        return "a control character in the name"
    return None


def is_temporary(name: str) -> bool:
    """Whether ``name`` (one component) is a temporary file of :func:`atomic_writer`, or the
    ``.partial`` of an older writer: left only by a process killed mid-write, never data."""
    return name.endswith(".partial") or (name.startswith(".") and ".tmp-" in name)


def folder_inside(root: Path, rel_dir: str, create: bool = False) -> str:
    """The real path of the folder ``root/rel_dir`` (``""`` for ``root`` itself), checked to
    lie inside ``root`` once symlinks are resolved, one component at a time. With ``create``,
    missing folders are made (each checked as it is made). Raises UnsafePath (a bad name, or
    outside ``root``), NotADirectoryError or FileNotFoundError; messages name ``rel_dir`` only."""
    top = os.path.realpath(root)
    if rel_dir in ("", "."):
        return top
    if not plain_relative(rel_dir):
        raise UnsafePath(f"{shown(rel_dir)!s} is not a plain relative path")
    cur = top
    prefix = top.rstrip(os.sep) + os.sep
    for part in rel_dir.strip("/").split("/"):
        step = os.path.join(cur, part)
        if create:
            try:
                os.mkdir(step, 0o777)
            except FileExistsError:
                pass
        real = os.path.realpath(step)
        if real != top and not real.startswith(prefix):
            raise UnsafePath(f"{shown(rel_dir)}: leads outside its folder (through a symlink), refused")
        if not os.path.isdir(real):
            if os.path.lexists(real):
                raise NotADirectoryError(errno.ENOTDIR, "not a folder", rel_dir)
            raise FileNotFoundError(errno.ENOENT, "no such folder", rel_dir)
        cur = real
    return cur


@contextmanager
def atomic_writer(root: Path, rel: str, overwrite: bool = True, fsync: bool = False,
                  make_folders: bool = True) -> Iterator[BinaryIO]:
    """Write the file ``rel`` under ``root`` whole or not at all; yields a binary file
    (readable too, so a writer can check what it wrote before it is renamed).

    The bytes go to a new temporary file beside the target (``.NAME.tmp-RANDOM``, created with
    O_CREAT|O_EXCL|O_NOFOLLOW in the target's folder, opened by descriptor, so no link or file
    planted under any name is written through). When the block ends normally the file is
    flushed (and with ``fsync`` synced, its folder too) and renamed onto the target: a link
    at the target is replaced, never followed. With ``overwrite=False`` an existing target
    (even a dangling link) is left alone and FileExistsError raised. The target's folder must
    lie inside ``root`` after realpath (:func:`folder_inside`; made when ``make_folders``).
    On any error the temporary file is removed. Raises UnsafePath, OSError."""
    if not plain_relative(rel) or rel.endswith("/"):
        raise UnsafePath(f"{shown(rel) if isinstance(rel, str) else repr(rel)} is not a plain relative path")
    folder, _, name = rel.rpartition("/")
    real = folder_inside(root, folder, create=make_folders)
    dfd = os.open(real, os.O_RDONLY | os.O_DIRECTORY | _OPEN_FLAGS)
    try:
        fd, tmp = _new_temporary(dfd, name)
        try:
            with os.fdopen(fd, "w+b", closefd=True) as f:
                yield f
                f.flush()
                if fsync:
                    os.fsync(f.fileno())
            if overwrite:
                os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            else:
                _place_new(dfd, tmp, name, rel)
            if fsync:
                os.fsync(dfd)
        except BaseException:
            with suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise
    finally:
        os.close(dfd)


def _new_temporary(dfd: int, name: str) -> tuple[int, str]:
    """A new empty file in the folder ``dfd``, never an existing one nor a link."""
    for _ in range(_TEMP_TRIES):
        tmp = f".{name[:200]}.tmp-{secrets.token_hex(6)}"
        try:
            return os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | _OPEN_FLAGS, 0o666, dir_fd=dfd), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", name)


def _place_new(dfd: int, tmp: str, name: str, rel: str) -> None:
    """Give ``tmp`` the name ``name`` only if nothing (not even a link) has it; the temporary
    name is removed either way."""
    try:
        os.link(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
    except FileExistsError:
        raise FileExistsError(errno.EEXIST, "already there, kept", rel) from None
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS):
            raise
        try:
            os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            return
        raise FileExistsError(errno.EEXIST, "already there, kept", rel) from None
    os.unlink(tmp, dir_fd=dfd)


def write_file_inside(root: Path, rel: str, data: bytes, overwrite: bool = True, fsync: bool = False) -> None:
    """Write ``data`` as the file ``rel`` under ``root`` through :func:`atomic_writer`."""
    with atomic_writer(root, rel, overwrite=overwrite, fsync=fsync) as f:
        f.write(data)


def open_regular(root: Path, rel: str) -> BinaryIO:
    """Open the regular file ``rel`` under ``root`` for reading: its folder must lie inside
    ``root`` (:func:`folder_inside`), and the file itself must be neither a symlink nor a
    FIFO, socket or device (it is opened without blocking and checked by descriptor, so a FIFO
    never hangs the reader). Raises UnsafePath (naming ``rel``), OSError."""
    if not plain_relative(rel):
        raise UnsafePath(f"{shown(rel) if isinstance(rel, str) else repr(rel)} is not a plain relative path")
    folder, _, name = rel.rpartition("/")
    real = folder_inside(root, folder)
    try:
        fd = os.open(os.path.join(real, name), os.O_RDONLY | os.O_NONBLOCK | _OPEN_FLAGS)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UnsafePath(f"{shown(rel)}: a symlink, not followed") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UnsafePath(f"{shown(rel)}: not a regular file ({file_kind(mode)}), not read")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def file_kind(mode: int) -> str:
    """What a file of this mode is, for a message: ``a FIFO``, ``a socket``, ``a device``,
    ``a symlink``, ``a folder`` (or ``of an unknown kind``)."""
    for test, what in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device"), (stat.S_ISLNK, "a symlink"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return what
    return "of an unknown kind"


def regular_files(root: Path, max_files: int, max_bytes: int,
                  skipped: list[tuple[str, str]] | None = None,
                  ignore: Callable[[str], bool] | None = None) -> list[FileEntry]:
    """Every regular file under ``root``, sorted by relative path, for copying a tree safely.

    Nothing is followed: ``root`` itself must be a real folder (a symlink or a non-folder
    raises UnsafePath; a missing ``root`` gives ``[]``), and under it a symlink (to a file or a
    folder, inside or outside), a FIFO, socket or device, or a name that is not a run's name
    (:func:`name_problem`: not UTF-8, a backslash, a control character) is refused: raised as
    :class:`Refused` (an UnsafePath) naming it, or, when ``skipped`` is a list,
    appended to it as ``(rel, reason)`` and passed over. Names for which ``ignore(name)`` is
    true (e.g. :func:`is_temporary`) are passed over silently, folders included.

    Bounds, checked as the walk goes, before anything is read: more than ``max_files``
    entries (files, folders and refused entries all count) or more than ``max_bytes`` bytes of
    files raise :class:`TooLarge`. Copy with :func:`copy_regular_files`, which opens each
    file again without following links and checks it is still the regular file walked."""
    try:
        top = os.lstat(root)
    except FileNotFoundError:
        return []
    if stat.S_ISLNK(top.st_mode):
        raise UnsafePath(f"{Path(root).name}: a symlink, not followed")
    if not stat.S_ISDIR(top.st_mode):
        raise UnsafePath(f"{Path(root).name}: not a folder ({file_kind(top.st_mode)})")
    out: list[FileEntry] = []
    seen = total = 0

    def refuse(rel: str, reason: str) -> None:
        if skipped is None:
            raise Refused(rel, reason)
        skipped.append((rel, reason))

    stack = [""]
    while stack:
        rel_dir = stack.pop()
        with os.scandir(os.path.join(root, rel_dir) if rel_dir else root) as it:
            entries = sorted(it, key=lambda e: e.name, reverse=True)
        for e in entries:
            if ignore is not None and ignore(e.name):
                continue
            seen += 1
            if seen > max_files:
                raise TooLarge(f"{Path(root).name}: more than {max_files} files and folders, not taken")
            rel = f"{rel_dir}/{e.name}" if rel_dir else e.name
            bad = name_problem(e.name)
            if bad:
                refuse(rel, f"{bad}, refused")
                continue
            st = e.stat(follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                refuse(rel, "not a regular file (a symlink), not followed")
            elif stat.S_ISDIR(st.st_mode):
                stack.append(rel)
            elif stat.S_ISREG(st.st_mode):
                total += st.st_size
                if total > max_bytes:
                    raise TooLarge(f"{Path(root).name}: more than {max_bytes} bytes of files, not taken")
                out.append(FileEntry(rel, st.st_size))
            else:
                refuse(rel, f"not a regular file ({file_kind(st.st_mode)}), refused")
    out.sort(key=lambda f: f.rel)
    return out


def copy_regular_files(src: Path, dst: Path, max_files: int, max_bytes: int,
                       skipped: list[tuple[str, str]] | None = None,
                       ignore: Callable[[str], bool] | None = None) -> list[FileEntry]:
    """Copy every regular file under ``src`` to the same relative path under ``dst``; the
    files copied. The walk, its refusals and bounds are :func:`regular_files`' (nothing is
    read before the whole tree is within bounds). Each file is opened again with
    :func:`open_regular` (a file swapped for a link or FIFO since the walk is refused) and at
    most its walked size is copied; each is written with :func:`atomic_writer`
    (``overwrite=False``: a file already at ``dst`` raises FileExistsError, nothing written
    through a link). ``dst`` is made if missing. Raises UnsafePath, TooLarge, OSError."""
    files = regular_files(src, max_files, max_bytes, skipped, ignore)
    Path(dst).mkdir(parents=True, exist_ok=True)
    for entry in files:
        copy_walked_file(src, entry, dst)
    return files


def copy_walked_file(src: Path, entry: FileEntry, dst: Path) -> None:
    """Copy one file that :func:`regular_files` listed from ``src`` to the same relative name
    under ``dst``: opened again with :func:`open_regular`, at most its walked size copied,
    written with :func:`atomic_writer` (``overwrite=False``). Raises UnsafePath, OSError."""
    with open_regular(src, entry.rel) as f, atomic_writer(dst, entry.rel, overwrite=False) as out:
        left = entry.size
        while left > 0:
            chunk = f.read(min(left, 1 << 20))
            if not chunk:
                break
            out.write(chunk)
            left -= len(chunk)

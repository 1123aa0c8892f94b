"""The packed copy of a closed run's episodes: ``episodes.zip``, for storage and transfer.

A run is written, and may stay, as one folder per episode (``episodes/ep_N/...``). Those
small files cost more disk than their bytes (a 4 KiB block per file and per folder: 5.1 KB
allocated per step for 2.4 KB of contents, docs/benchmarks.md, "Where the disk goes").
:func:`pack_run` moves every file under ``episodes/`` into one zip in the run folder,
members stored (not compressed: the strips are WebP already) under the very same relative
paths, and removes the folders; :func:`unpack_run` puts them back. Readers
(:mod:`mfm.memory.retrieval`, :mod:`mfm.validate`) take a file from its folder when it is
there and else from the zip (:func:`member`), so a packed run opens, validates and shows
every frame as it did, and a pack or unpack killed at any moment leaves a run that reads the
same: the zip is written under another name and renamed only once complete and checked, and
the folders go only after that (unpacking: the zip goes only after every file is back).

Packing is for runs their writer closed (``run.json`` says so): a zip's directory is
written last, so a zip cannot grow episode by episode while a run goes on.

Reading a member: the zip's central directory is read once per zip file (while its device,
inode, modification time and size stay the same) and kept; a member is then read by its
offset (one ``open``, a ``seek`` and a read). Only stored and deflated members of at most
:data:`MAX_MEMBER_BYTES` are read, their CRC checked; member names are looked up by the
path a reader asks for, which passed :func:`mfm.boundary.inside` (a member with a hostile
name is never used), and the zip itself must lie inside the run and be a regular file.
A hostile zip costs no more than its own size to read: the directory is refused before it
is parsed when it declares more than :data:`MAX_MEMBERS` entries or :data:`MAX_DIRECTORY_BYTES`
bytes, and as a whole when two entries share or overlap their bytes, or when its deflated
members would inflate to more than :data:`MAX_INFLATION` times the zip's size. The kept
directories are bounded by their size in memory (:data:`KEPT_BYTES`), not their number.

Writing goes through :mod:`mfm.boundary` (:func:`~mfm.boundary.atomic_writer`): the zip
and every unpacked file are written under a fresh temporary name made with O_EXCL|
O_NOFOLLOW, and a link or file planted at any name is never written through. Packing takes
regular files only (:func:`~mfm.boundary.regular_files`): a symlink, FIFO or device under
``episodes/``, ``episodes/`` itself a link, or a name that is not UTF-8 or holds a
backslash or control character, refuses the pack before anything is written.
"""
from __future__ import annotations

import os
import shutil
import stat
import struct
import threading
import time
import zipfile
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from mfm.boundary import (Refused, TooLarge, UnsafePath, atomic_writer, file_kind, inside, is_temporary,
                          name_problem, open_regular, read_json, regular_files, shown)
from mfm.progress import counted
from mfm.schema import CLOSED_STATUSES, JSONError, plain_relative

PACK = "episodes.zip"
"""The packed copy's name, in the run folder."""
PARTIAL = PACK + ".partial"
"""The temporary name of older versions, left by one killed mid-pack; never opened now (a
pack is written under a fresh temporary name, :func:`mfm.boundary.atomic_writer`), and
unlinked (a link, never its target) once a new pack is in place."""
MAX_MEMBER_BYTES = 64 * 1024 * 1024
"""A member larger than this (stored or once inflated) is refused unread."""
MAX_MEMBERS = 500_000
"""A zip declaring more entries than this is refused before its directory is parsed (and a
run with more files under ``episodes/`` is not packed)."""
MAX_DIRECTORY_BYTES = 64 * 1024 * 1024
"""A central directory larger than this is refused unparsed."""
MAX_NAME_BYTES = 1024
"""A member name longer than this refuses the zip."""
MAX_INFLATION = 32
"""The deflated members of a zip may inflate to at most this many times the zip's size
(plus :data:`INFLATION_ALLOWANCE`); a zip bomb is refused before any member is read."""
INFLATION_ALLOWANCE = 16 * 1024 * 1024
MAX_PACK_BYTES = 1 << 40
"""A run with more bytes than this under ``episodes/`` is not packed."""
KEPT_BYTES = 256 * 1024 * 1024
"""Memory the kept central directories may take (estimated); the latest is kept even when
it alone is larger."""
_ENTRY_BYTES = 240
"""Estimated memory of one kept member besides its name (a Member, its key, a dict slot)."""
_LOCAL_HEADER = struct.Struct("<4s5H3L2H")
_CENTRAL = struct.Struct("<4s6H3L5H2L")
_EOCD = struct.Struct("<4s4H2LH")
_ZIP64_LOCATOR = struct.Struct("<4sLQL")
_ZIP64_EOCD = struct.Struct("<4sQ2H2L4Q")


class PackError(Exception):
    """A pack that cannot be read or made; the message names the file and what is wrong."""


@dataclass(frozen=True, slots=True)
class Member:
    """Where a member's bytes lie in the zip."""

    offset: int
    """Offset of its local header."""
    size: int
    """Bytes stored."""
    length: int
    """Bytes once read (inflated)."""
    method: int
    crc: int


@dataclass(frozen=True)
class Directory:
    """A zip's members, and the identity of the file they were read from."""

    path: str
    identity: tuple[int, int, int, int]
    members: dict[str, Member]

    def folders(self) -> set[str]:
        """The episode folders (``episodes/ep_N``) that have a member."""
        return {"/".join(name.split("/")[:2]) for name in self.members if name.count("/") >= 2}

    def weight(self) -> int:
        """Estimated bytes this directory holds in memory."""
        return sum(len(name) for name in self.members) + _ENTRY_BYTES * len(self.members) + 200


_dirs: OrderedDict[str, tuple[Directory, int]] = OrderedDict()
_dirs_bytes = 0
_lock = threading.Lock()


def identity(path: str) -> tuple[int, int, int, int] | None:
    """(device, inode, modification time in ns, size) of the file at ``path`` (symlinks
    followed); None if there is none."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size


def _ident(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size


def _open_pack(path: str) -> tuple[BinaryIO, os.stat_result]:
    """The zip at ``path`` opened for reading (without blocking on a FIFO) and its status;
    PackError if it is not a regular file or cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise PackError(f"{PACK}: cannot be read ({e.strerror or type(e).__name__})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise PackError(f"{PACK}: not a regular file ({file_kind(st.st_mode)}), not read")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb"), st


def directory(run_dir: Path) -> Directory | None:
    """The members of the run's pack; None if it has none. Raises PackError (the zip cannot
    be read, or is refused) or UnsafePath (the zip leads outside the run)."""
    global _dirs_bytes
    if not os.path.lexists(os.path.join(run_dir, PACK)):
        return None
    path = str(inside(run_dir, PACK))
    ident = identity(path)
    if ident is None:
        return None
    with _lock:
        hit = _dirs.get(path)
        if hit is not None and hit[0].identity == ident:
            _dirs.move_to_end(path)
            return hit[0]
    f, st = _open_pack(path)
    with f:
        found = Directory(path, _ident(st), _read_directory(f, st.st_size))
    weight = found.weight()
    with _lock:
        old = _dirs.pop(path, None)
        if old is not None:
            _dirs_bytes -= old[1]
        _dirs[path] = (found, weight)
        _dirs_bytes += weight
        while len(_dirs) > 1 and _dirs_bytes > KEPT_BYTES:
            _dirs_bytes -= _dirs.popitem(last=False)[1][1]
    return found


def kept_bytes() -> int:
    """Estimated memory the kept central directories take now."""
    return _dirs_bytes


def _end_record(f: BinaryIO, size: int) -> tuple[int, int, int]:
    """(entries, directory size, directory offset) from the zip's end records; PackError if
    there are none or they do not fit in the file."""
    tail_len = min(size, _EOCD.size + 0xFFFF + _ZIP64_LOCATOR.size)
    f.seek(size - tail_len)
    tail = f.read(tail_len)
    at = tail.rfind(b"PK\x05\x06", 0, max(0, len(tail) - _EOCD.size + 4))
    if at < 0:
        raise PackError(f"{PACK}: not a readable zip (no end of central directory record; truncated?)")
    _, _, _, _, entries, cd_size, cd_offset, _ = _EOCD.unpack_from(tail, at)
    if entries == 0xFFFF or cd_size == 0xFFFFFFFF or cd_offset == 0xFFFFFFFF:
        loc = at - _ZIP64_LOCATOR.size
        if loc < 0 or tail[loc:loc + 4] != b"PK\x06\x07":
            raise PackError(f"{PACK}: not a readable zip (its zip64 end record is missing)")
        z64_at = _ZIP64_LOCATOR.unpack_from(tail, loc)[2]
        if z64_at + _ZIP64_EOCD.size > size:
            raise PackError(f"{PACK}: not a readable zip (its zip64 end record lies beyond the file)")
        f.seek(z64_at)
        rec = f.read(_ZIP64_EOCD.size)
        if len(rec) < _ZIP64_EOCD.size or rec[:4] != b"PK\x06\x06":
            raise PackError(f"{PACK}: not a readable zip (its zip64 end record is damaged)")
        _, _, _, _, _, _, _, entries, cd_size, cd_offset = _ZIP64_EOCD.unpack(rec)
    if cd_offset + cd_size > size:
        raise PackError(f"{PACK}: not a readable zip (its directory lies beyond the end of the file; truncated?)")
    return entries, cd_size, cd_offset


def _zip64(extra: bytes, want: list[int]) -> list[int]:
    """The 8-byte values of the zip64 extra field, one per field that was 0xFFFFFFFF."""
    i = 0
    while i + 4 <= len(extra):
        tag, n = struct.unpack_from("<HH", extra, i)
        if tag == 1:
            vals = [struct.unpack_from("<Q", extra, i + 4 + 8 * k)[0] for k in range(min(len(want), n // 8))]
            if len(vals) == len(want):
                return vals
            break
        i += 4 + n
    raise PackError(f"{PACK}: not a readable zip (a zip64 entry without its sizes)")


def _read_directory(f: BinaryIO, size: int) -> dict[str, Member]:
    """Every file member of the zip open as ``f`` (``size`` bytes), checked before it is
    kept: the count and size of the directory, each name's length, no two entries sharing
    or overlapping bytes, all within the file, and the zip's total inflation."""
    try:
        entries, cd_size, cd_offset = _end_record(f, size)
        if entries > MAX_MEMBERS:
            raise PackError(f"{PACK}: declares {entries} entries, more than {MAX_MEMBERS}; refused unread")
        if cd_size > MAX_DIRECTORY_BYTES:
            raise PackError(f"{PACK}: a directory of {cd_size} bytes, more than {MAX_DIRECTORY_BYTES}; refused unread")
        f.seek(cd_offset)
        cd = f.read(cd_size)
    except OSError as e:
        raise PackError(f"{PACK}: cannot be read ({e.strerror or type(e).__name__})") from None
    if len(cd) < cd_size:
        raise PackError(f"{PACK}: not a readable zip (its directory is cut short)")
    members: dict[str, Member] = {}
    spans: list[tuple[int, int, str]] = []
    inflated = 0
    at = 0
    while at < len(cd):
        if len(spans) >= max(entries, 1) or len(spans) >= MAX_MEMBERS:
            raise PackError(f"{PACK}: more directory entries than the {entries} it declares (damaged or hostile)")
        if at + _CENTRAL.size > len(cd) or cd[at:at + 4] != b"PK\x01\x02":
            raise PackError(f"{PACK}: not a readable zip (a damaged directory entry at byte {cd_offset + at})")
        (_, _, _, flags, method, _, _, crc, csize, usize, n_name, n_extra, n_comment, _, _, _,
         offset) = _CENTRAL.unpack_from(cd, at)
        raw = cd[at + _CENTRAL.size:at + _CENTRAL.size + n_name]
        extra = cd[at + _CENTRAL.size + n_name:at + _CENTRAL.size + n_name + n_extra]
        at += _CENTRAL.size + n_name + n_extra + n_comment
        if at > len(cd) or len(raw) < n_name:
            raise PackError(f"{PACK}: not a readable zip (a directory entry runs past its end)")
        if n_name > MAX_NAME_BYTES:
            raise PackError(f"{PACK}: a member name of {n_name} bytes, more than {MAX_NAME_BYTES}; refused")
        want = [v for v in (usize, csize, offset) if v == 0xFFFFFFFF]
        if want:
            vals = iter(_zip64(extra, want))
            usize = next(vals) if usize == 0xFFFFFFFF else usize
            csize = next(vals) if csize == 0xFFFFFFFF else csize
            offset = next(vals) if offset == 0xFFFFFFFF else offset
        name = raw.decode("utf-8" if flags & 0x800 else "cp437", "replace")
        end = offset + _LOCAL_HEADER.size + n_name + csize
        if end > cd_offset:
            raise PackError(f"{PACK}: member {shown(name)!s} lies beyond the zip's data (damaged or hostile); "
                            "refused")
        spans.append((offset, end, name))
        if name.endswith("/"):
            continue
        if flags & 1:
            raise PackError(f"{PACK}: member {shown(name)} is encrypted; refused")
        if name in members:
            raise PackError(f"{PACK}: member {shown(name)} is in the zip twice; refused")
        if method == zipfile.ZIP_DEFLATED:
            inflated += usize
        members[name] = Member(offset, csize, usize, method, crc)
    spans.sort()
    for (a_start, a_end, a), (b_start, _, b) in zip(spans, spans[1:]):
        if b_start < a_end:
            what = "share their bytes" if b_start == a_start else "overlap"
            raise PackError(f"{PACK}: members {shown(a)} and {shown(b)} {what} (a hostile zip); refused")
    if inflated > MAX_INFLATION * size + INFLATION_ALLOWANCE:
        raise PackError(f"{PACK}: its members would inflate to {inflated} bytes, more than {MAX_INFLATION} times "
                        "the zip's size (a zip bomb?); refused")
    return members


def member(run_dir: Path, rel: str) -> bytes | None:
    """The bytes of ``rel`` (a path relative to the run) in the run's pack; None if the run
    has no pack or the pack no such member. Raises PackError naming the member and what is
    wrong, UnsafePath as :func:`directory`."""
    found = directory(run_dir)
    if found is None:
        return None
    m = found.members.get(rel)
    if m is None:
        return None
    return read_member(found.path, rel, m)


def read_member(path: str, name: str, m: Member) -> bytes:
    """One member's bytes, checked (size, method, CRC)."""
    _check_member(name, m)
    f, _ = _open_pack(path)
    with f:
        return _read_at(f, name, m)


def _check_member(name: str, m: Member) -> None:
    where = f"{PACK}: {shown(name)}"
    if m.method not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise PackError(f"{where}: compression method {m.method} is not read (stored or deflated only)")
    if m.size > MAX_MEMBER_BYTES or m.length > MAX_MEMBER_BYTES:
        raise PackError(f"{where}: larger than {MAX_MEMBER_BYTES} bytes, not read")


def _read_at(f: BinaryIO, name: str, m: Member) -> bytes:
    """The member's bytes from the open zip ``f``, checked against its size and CRC."""
    where = f"{PACK}: {shown(name)}"
    _check_member(name, m)
    try:
        f.seek(m.offset)
        head = f.read(_LOCAL_HEADER.size)
        if len(head) < _LOCAL_HEADER.size or head[:4] != b"PK\x03\x04":
            raise PackError(f"{where}: no local header at offset {m.offset} (the zip is damaged)")
        fields = _LOCAL_HEADER.unpack(head)
        f.seek(fields[-2] + fields[-1], os.SEEK_CUR)
        data = f.read(m.size)
    except OSError as e:
        raise PackError(f"{where}: cannot be read ({e.strerror or type(e).__name__})") from None
    if len(data) < m.size:
        raise PackError(f"{where}: cut short ({len(data)} of {m.size} bytes; the zip is truncated)")
    if m.method == zipfile.ZIP_DEFLATED:
        try:
            d = zlib.decompressobj(-zlib.MAX_WBITS)
            data = d.decompress(data, m.length + 1)
        except zlib.error:
            raise PackError(f"{where}: cannot be inflated (the zip is damaged)") from None
    if len(data) != m.length or zlib.crc32(data) != m.crc:
        raise PackError(f"{where}: its bytes do not match the zip's size and CRC (the zip is damaged)")
    return data


def forget() -> None:
    """Drop the kept central directories (tests; benchmarks of cold reads)."""
    global _dirs_bytes
    with _lock:
        _dirs.clear()
        _dirs_bytes = 0


@dataclass(frozen=True)
class Report:
    """What :func:`pack_run` or :func:`unpack_run` did."""

    run: str
    files: int
    bytes: int
    done: bool
    """False when there was nothing to do (already packed / not packed)."""


def _status(run_dir: Path) -> str | None:
    try:
        manifest = read_json(run_dir, "run.json")
    except (UnsafePath, OSError, JSONError, ValueError):
        return None
    return manifest.get("status") if isinstance(manifest, dict) else None


def _own_file(run_dir: Path, name: str, folder: bool) -> bool:
    """Whether the run has ``name`` (``episodes`` or the zip): False if it has none; PackError
    if it is a symlink or not the kind of file it must be (nothing is done then)."""
    try:
        mode = os.lstat(run_dir / name).st_mode
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(mode):
        raise PackError(f"{name}: a symlink, not followed (a run's {'episodes' if folder else 'pack'} must be "
                        "its own); nothing done")
    if not (stat.S_ISDIR(mode) if folder else stat.S_ISREG(mode)):
        raise PackError(f"{name}: not a {'folder' if folder else 'regular file'}; nothing done")
    return True


def _files(run_dir: Path) -> list[str]:
    """Every regular file under ``episodes/`` as a relative POSIX path, in sorted order;
    PackError for a symlink, a FIFO or other special file, a name that cannot be stored (not
    UTF-8, a backslash or control character), a file too large to be read back, or too many."""
    if not _own_file(run_dir, "episodes", folder=True):
        return []
    try:
        found = regular_files(run_dir / "episodes", 2 * MAX_MEMBERS, MAX_PACK_BYTES, ignore=is_temporary)
    except Refused as e:
        raise PackError(f"{shown('episodes/' + e.rel)}: {e.reason}; nothing packed (a pack holds the run's own "
                        "regular files)") from None
    except TooLarge as e:
        raise PackError(f"{e}; not packed") from None
    except OSError as e:
        raise PackError(f"episodes: cannot be listed ({e.strerror or type(e).__name__}); nothing packed") from None
    for entry in found:
        if entry.size > MAX_MEMBER_BYTES:
            raise PackError(f"episodes/{entry.rel}: larger than {MAX_MEMBER_BYTES} bytes, would not be read back; "
                            "nothing packed")
    return [f"episodes/{entry.rel}" for entry in found]


def _zip_info(name: str, st: os.stat_result) -> zipfile.ZipInfo:
    """A stored member's header for a file of that status."""
    when = time.localtime(st.st_mtime)
    info = zipfile.ZipInfo(name, tuple(when[:6]) if when.tm_year >= 1980 else (1980, 1, 1, 0, 0, 0))
    info.external_attr = (st.st_mode & 0xFFFF) << 16
    info.compress_type = zipfile.ZIP_STORED
    return info


def pack_run(run_dir: str | Path) -> Report:
    """Move the files under ``episodes/`` into ``episodes.zip`` (members stored, same
    relative paths) and remove the episode folders. A pack already there is merged (a pack
    stopped while it removed folders is finished). Refused (PackError) unless ``run.json``
    says the run was closed, and, before anything is written, for whatever the pack could
    not hold as the run's own regular file (:func:`_files`) or a pack that is not the run's
    own regular file."""
    run_dir = Path(run_dir)
    status = _status(run_dir)
    if status not in CLOSED_STATUSES:
        raise PackError(f"{run_dir.name}/run.json: status {status!r}; only a closed run is packed "
                        f"({', '.join(CLOSED_STATUSES)})")
    _own_file(run_dir, PACK, folder=False)
    on_disk = _files(run_dir)
    try:
        old = directory(run_dir)
    except UnsafePath as e:
        raise PackError(f"{PACK}: {e}") from None
    if not on_disk:
        return Report(run_dir.name, len(old.members) if old else 0, 0, False)
    if old is not None:
        _check_names(old)
    names = sorted(set(on_disk) | set(old.members if old else ()))
    if len(names) > MAX_MEMBERS:
        raise PackError(f"episodes: {len(names)} files, more than {MAX_MEMBERS}; not packed")
    disk = set(on_disk)
    total = 0
    try:
        with atomic_writer(run_dir, PACK, fsync=True, make_folders=False) as f:
            with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as z:
                for name in counted(names, "episode files packed"):
                    if name in disk:
                        with open_regular(run_dir, name) as src:
                            info = _zip_info(name, os.fstat(src.fileno()))
                            data = src.read(MAX_MEMBER_BYTES + 1)
                        if len(data) > MAX_MEMBER_BYTES:
                            raise PackError(f"{name}: grew beyond {MAX_MEMBER_BYTES} bytes while packed; "
                                            "nothing packed")
                    else:
                        info = zipfile.ZipInfo(name)
                        data = read_member(old.path, name, old.members[name])
                    z.writestr(info, data)
                    total += len(data)
            f.flush()
            _check(f, names)
    except UnsafePath as e:
        raise PackError(f"{e}; nothing packed") from None
    except OSError as e:
        raise PackError(f"{PACK}: cannot be written ({e.strerror or type(e).__name__}); nothing packed") from None
    forget()
    shutil.rmtree(run_dir / "episodes")
    _remove_stale(run_dir / PARTIAL)
    _sync_dir(run_dir)
    return Report(run_dir.name, len(names), total, True)


def _remove_stale(path: Path) -> None:
    """Unlink ``path`` if it is a file or a symlink (the link itself, never what it names)."""
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            os.unlink(path)
    except OSError:
        pass


def _check_names(found: Directory) -> None:
    """PackError unless every member name is a plain path under ``episodes/`` with names a
    run's files may have."""
    for name in found.members:
        if not (plain_relative(name) and name.startswith("episodes/")) or any(
                name_problem(part) for part in name.split("/")):
            raise PackError(f"{PACK}: member {shown(name)} is not a plain path under episodes/; nothing done")


def _check(f: BinaryIO, names: list[str]) -> None:
    """Every member of a new pack reads back with the size and CRC of the bytes written
    (:func:`_read_at` checks both), and the pack holds exactly ``names``; PackError, and
    nothing removed, if not."""
    size = os.fstat(f.fileno()).st_size
    members = _read_directory(f, size)
    if sorted(members) != names:
        raise PackError(f"{PACK}: the new pack does not hold the files written; nothing removed")
    for name, m in members.items():
        _read_at(f, name, m)


def _sync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def unpack_run(run_dir: str | Path) -> Report:
    """Put every member of ``episodes.zip`` back as a file under ``episodes/``, then remove
    the zip. Member names must be plain relative paths under ``episodes/``; any other makes
    it refuse before writing anything. A file already on disk is kept; the zip is removed
    only when every member is on disk with its bytes (written here, or already there with
    the same bytes), each read back and checked. Otherwise (a file on disk that differs, a
    link, folder or special file in a member's place, a folder leading outside the run)
    PackError names the first such member and how many there were, and the zip stays."""
    run_dir = Path(run_dir)
    if not _own_file(run_dir, PACK, folder=False):
        return Report(run_dir.name, 0, 0, False)
    try:
        found = directory(run_dir)
    except UnsafePath as e:
        raise PackError(f"{PACK}: {e}") from None
    if found is None:
        return Report(run_dir.name, 0, 0, False)
    _check_names(found)
    total = 0
    conflicts: list[str] = []
    for name, m in counted(sorted(found.members.items()), "episode files unpacked"):
        data = read_member(found.path, name, m)
        try:
            with atomic_writer(run_dir, name, overwrite=False) as out:
                out.write(data)
            total += len(data)
        except FileExistsError:
            why = _differs(run_dir, name, data)
            if why:
                conflicts.append(f"{name}: {why}")
        except UnsafePath as e:
            conflicts.append(str(e))
        except NotADirectoryError:
            conflicts.append(f"{name}: a file on disk where its folder goes")
        except OSError as e:
            conflicts.append(f"{name}: cannot be written ({e.strerror or type(e).__name__})")
    if not conflicts:
        os.sync()
        conflicts = [f"{name}: {why}" for name, m in sorted(found.members.items())
                     if (why := _differs(run_dir, name, read_member(found.path, name, m)))]
    if conflicts:
        more = f" (and {len(conflicts) - 1} more)" if len(conflicts) > 1 else ""
        raise PackError(f"{PACK}: {len(conflicts)} of {len(found.members)} members not unpacked, the zip kept: "
                        f"{conflicts[0]}{more}")
    os.remove(run_dir / PACK)
    _sync_dir(run_dir)
    forget()
    return Report(run_dir.name, len(found.members), total, True)


def _differs(run_dir: Path, name: str, data: bytes) -> str | None:
    """Why the file ``name`` on disk is not the member's ``data`` (None when it is)."""
    try:
        with open_regular(run_dir, name) as f:
            disk = f.read(len(data) + 1)
    except UnsafePath as e:
        return str(e).removeprefix(f"{shown(name)}: ")
    except IsADirectoryError:
        return "a folder on disk in its place"
    except OSError as e:
        return f"cannot be read back ({e.strerror or type(e).__name__})"
    return None if disk == data else "the file on disk differs from the zip's copy (both kept)"


class RangeFile:
    """A zip read by ranges instead of from a file (a pack in object storage): ``get(start,
    end)`` returns the bytes ``start``..``end`` (end excluded), one request each. Reads are
    served from the last range fetched when they fall inside it, so reading the end records
    and a directory that lies within :data:`TAIL_BYTES` of the end costs one request, and a
    member primed with :meth:`prime` one."""

    TAIL_BYTES = 1 << 20
    """Bytes fetched from the end of the zip at once, to find its directory (and usually
    hold all of it)."""

    def __init__(self, get, size: int) -> None:
        self.get = get
        self.size = size
        self.pos = 0
        self.start = 0
        self.buf = b""

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        self.pos = offset if whence == os.SEEK_SET else self.pos + offset if whence == os.SEEK_CUR else self.size + offset
        return self.pos

    def tell(self) -> int:
        return self.pos

    def prime(self, start: int, end: int) -> None:
        """Fetch ``start``..``end`` now (one request), for the reads that follow."""
        start, end = max(0, start), min(self.size, end)
        if not (self.start <= start and end <= self.start + len(self.buf)):
            self.buf = bytes(self.get(start, end))
            self.start = start

    def read(self, n: int = -1) -> bytes:
        end = self.size if n is None or n < 0 else min(self.size, self.pos + n)
        if end <= self.pos:
            return b""
        if not (self.start <= self.pos and end <= self.start + len(self.buf)):
            self.prime(self.pos, end)
        out = self.buf[self.pos - self.start:end - self.start]
        self.pos += len(out)
        return out

    def __enter__(self) -> RangeFile:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def directory_by_ranges(f: RangeFile, label: str) -> Directory:
    """The members of a zip read by ranges (checked as :func:`directory` checks a file's:
    :func:`_read_directory`); ``label`` names it (its URL). Raises PackError."""
    f.prime(f.size - RangeFile.TAIL_BYTES, f.size)
    return Directory(label, (0, 0, 0, f.size), _read_directory(f, f.size))


def member_by_ranges(f: RangeFile, name: str, m: Member) -> bytes:
    """One member's bytes read by one range (its local header, name, an allowance for an
    extra field, and its data), checked as :func:`read_member` checks them."""
    _check_member(name, m)
    f.prime(m.offset, m.offset + _LOCAL_HEADER.size + len(name.encode()) + 256 + m.size)
    return _read_at(f, name, m)

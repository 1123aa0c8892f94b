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
name is never used), and the zip itself must lie inside the run.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import struct
import threading
import zipfile
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from mfm.boundary import UnsafePath, inside
from mfm.schema import CLOSED_STATUSES, plain_relative

PACK = "episodes.zip"
"""The packed copy's name, in the run folder."""
PARTIAL = PACK + ".partial"
"""The name a pack is written under until it is complete and checked."""
MAX_MEMBER_BYTES = 64 * 1024 * 1024
"""A member larger than this (stored or once inflated) is refused unread."""
_LOCAL_HEADER = struct.Struct("<4s5H3L2H")
_KEPT = 64
"""Central directories kept (one per packed run read lately)."""


class PackError(Exception):
    """A pack that cannot be read or made; the message names the file and what is wrong."""


@dataclass(frozen=True)
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


_dirs: OrderedDict[str, Directory] = OrderedDict()
_lock = threading.Lock()


def identity(path: str) -> tuple[int, int, int, int] | None:
    """(device, inode, modification time in ns, size) of the file at ``path`` (symlinks
    followed); None if there is none."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size


def directory(run_dir: Path) -> Directory | None:
    """The members of the run's pack; None if it has none. Raises PackError (the zip cannot
    be read) or UnsafePath (the zip leads outside the run)."""
    if not os.path.lexists(os.path.join(run_dir, PACK)):
        return None
    path = str(inside(run_dir, PACK))
    ident = identity(path)
    if ident is None:
        return None
    with _lock:
        hit = _dirs.get(path)
        if hit is not None and hit.identity == ident:
            _dirs.move_to_end(path)
            return hit
    found = Directory(path, ident, _read_directory(path))
    with _lock:
        _dirs[path] = found
        while len(_dirs) > _KEPT:
            _dirs.popitem(last=False)
    return found


def _read_directory(path: str) -> dict[str, Member]:
    try:
        with zipfile.ZipFile(path) as z:
            infos = z.infolist()
    except OSError as e:
        raise PackError(f"{PACK}: cannot be read ({e.strerror or type(e).__name__})") from None
    except (zipfile.BadZipFile, ValueError, NotImplementedError) as e:
        raise PackError(f"{PACK}: not a readable zip ({e})") from None
    return {i.filename: Member(i.header_offset, i.compress_size, i.file_size, i.compress_type, i.CRC)
            for i in infos if not i.is_dir()}


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
    where = f"{PACK}: {name}"
    if m.method not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise PackError(f"{where}: compression method {m.method} is not read (stored or deflated only)")
    if m.size > MAX_MEMBER_BYTES or m.length > MAX_MEMBER_BYTES:
        raise PackError(f"{where}: larger than {MAX_MEMBER_BYTES} bytes, not read")
    try:
        with open(path, "rb") as f:
            f.seek(m.offset)
            head = f.read(_LOCAL_HEADER.size)
            if len(head) < _LOCAL_HEADER.size or head[:4] != b"PK\x03\x04":
                raise PackError(f"{where}: no local header at offset {m.offset} (the zip is damaged)")
            fields = _LOCAL_HEADER.unpack(head)
            f.seek(fields[-2] + fields[-1], os.SEEK_CUR)
            data = f.read(m.size)
    except OSError as e:
        raise PackError(f"{where}: cannot be read ({e.strerror or e})") from None
    if len(data) < m.size:
        raise PackError(f"{where}: cut short ({len(data)} of {m.size} bytes; the zip is truncated)")
    if m.method == zipfile.ZIP_DEFLATED:
        try:
            d = zlib.decompressobj(-zlib.MAX_WBITS)
            data = d.decompress(data, m.length + 1)
        except zlib.error as e:
            raise PackError(f"{where}: cannot be inflated ({e})") from None
    if len(data) != m.length or zlib.crc32(data) != m.crc:
        raise PackError(f"{where}: its bytes do not match the zip's size and CRC (the zip is damaged)")
    return data


def forget() -> None:
    """Drop the kept central directories (tests; benchmarks of cold reads)."""
    with _lock:
        _dirs.clear()


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
        return json.loads((run_dir / "run.json").read_text(encoding="utf-8")).get("status")
    except (OSError, ValueError, AttributeError):
        return None


def _files(run_dir: Path) -> list[str]:
    """Every regular file under ``episodes/`` as a relative POSIX path, in sorted order;
    PackError for a symlink or another kind of file (a pack holds files only)."""
    out: list[str] = []
    top = run_dir / "episodes"
    if not top.is_dir():
        return out
    for root, dirs, files in os.walk(top):
        dirs.sort()
        rel_root = Path(root).relative_to(run_dir).as_posix()
        for name in dirs:
            if os.path.islink(os.path.join(root, name)):
                raise PackError(f"{rel_root}/{name}: a symlink, not packed (a pack holds the run's own files)")
        for name in sorted(files):
            if name.endswith(".partial"):
                continue
            mode = os.lstat(os.path.join(root, name)).st_mode
            if not stat.S_ISREG(mode):
                raise PackError(f"{rel_root}/{name}: not a regular file, not packed")
            out.append(f"{rel_root}/{name}")
    return out


def pack_run(run_dir: str | Path) -> Report:
    """Move the files under ``episodes/`` into ``episodes.zip`` (members stored, same
    relative paths) and remove the episode folders. A pack already there is merged (a pack
    stopped while it removed folders is finished). Refused (PackError) unless ``run.json``
    says the run was closed."""
    run_dir = Path(run_dir)
    status = _status(run_dir)
    if status not in CLOSED_STATUSES:
        raise PackError(f"{run_dir.name}/run.json: status {status!r}; only a closed run is packed "
                        f"({', '.join(CLOSED_STATUSES)})")
    on_disk = _files(run_dir)
    old = directory(run_dir)
    if not on_disk:
        return Report(run_dir.name, len(old.members) if old else 0, 0, False)
    partial = run_dir / PARTIAL
    names = sorted(set(on_disk) | set(old.members if old else ()))
    disk = set(on_disk)
    total = 0
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as z:
        for name in names:
            if name in disk:
                info = zipfile.ZipInfo.from_file(run_dir / name, name, strict_timestamps=False)
                data = (run_dir / name).read_bytes()
            else:
                info = zipfile.ZipInfo(name)
                data = read_member(old.path, name, old.members[name])
            info.compress_type = zipfile.ZIP_STORED
            z.writestr(info, data)
            total += len(data)
    with open(partial, "rb") as f:
        os.fsync(f.fileno())
    _check(partial)
    os.replace(partial, run_dir / PACK)
    _sync_dir(run_dir)
    shutil.rmtree(run_dir / "episodes")
    _sync_dir(run_dir)
    return Report(run_dir.name, len(names), total, True)


def _check(path: Path) -> None:
    """Every member of a new pack reads back with the size and CRC of the bytes written
    (:func:`read_member` checks both); PackError, and nothing removed, if one does not."""
    for name, m in _read_directory(str(path)).items():
        read_member(str(path), name, m)


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
    """Put every member of ``episodes.zip`` back as a file under ``episodes/`` (a file
    already there is kept), then remove the zip. Member names must be plain relative paths
    under ``episodes/``; any other makes it refuse before writing anything."""
    run_dir = Path(run_dir)
    found = directory(run_dir)
    if found is None:
        return Report(run_dir.name, 0, 0, False)
    for name in found.members:
        if not (plain_relative(name) and name.startswith("episodes/")):
            raise PackError(f"{PACK}: member {name!r} is not a plain path under episodes/; nothing unpacked")
    total = 0
    for name, m in sorted(found.members.items()):
        target = run_dir / name
        if target.exists():
            continue
        try:
            inside(run_dir, name)
        except UnsafePath as e:
            raise PackError(f"{PACK}: {e}") from None
        data = read_member(found.path, name, m)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".partial")
        tmp.write_bytes(data)
        os.replace(tmp, target)
        total += len(data)
    os.sync()
    os.remove(found.path)
    _sync_dir(run_dir)
    forget()
    return Report(run_dir.name, len(found.members), total, True)

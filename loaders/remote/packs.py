"""A packed run's ``episodes.zip`` in the bucket, read by ranges: its directory once, then the members asked for.

:func:`remote_pack` reads the zip's directory once per version of the zip (one or two ranged
GETs) and keeps it in the mirror (:data:`PACK_DIR_MARK`); :func:`fetch_members` writes members
to their places in the mirror's episode folders, several read by one ranged GET. The zip is
never fetched whole (but by ``mfm validate``, which validates it as on disk).
"""
from __future__ import annotations

import threading
from pathlib import Path

from loaders.remote.downloads import save_bytes
from loaders.remote.mirror import RUN_MARK, read_mark, safe_rel, write_mark
from mfm.memory import packed
from mfm.memory.packed import PACK
from mfm.objectstore import StoreError, get_object, is_url, join

PACK_DIR_MARK = ".mfm-remote-pack.json"
"""In a mirrored packed run: the directory of its ``episodes.zip`` in the bucket (member ->
offset, sizes, method, CRC) and the stamp of the zip it was read from, so a new process
reads a member with one request."""
MAX_SPAN_BYTES = 64 << 20
"""Members brought together are read by one range only when it spans at most this."""
_lock = threading.Lock()
_packs: dict[str, tuple[list, packed.Directory]] = {}


def remote_pack(local: Path) -> tuple[str, packed.Directory] | None:
    """(URL, directory) of a mirrored run's ``episodes.zip`` read by ranges: its directory
    read once per version of the zip (the last listing's stamp) with one or two ranged GETs
    (:func:`mfm.memory.packed.directory_by_ranges`) and kept in the mirror. None when the
    bucket holds no pack for the run, the mirror holds the whole zip (``mfm validate``), or
    it cannot be read (its episodes are then missing, as for a damaged pack on disk)."""
    mark = read_mark(local / RUN_MARK)
    want = mark.get("listed", {}).get(PACK)
    url = mark.get("url")
    if want is None or not isinstance(url, str) or not is_url(url) or (local / PACK).exists():
        return None
    pack_url = join(url, PACK)
    with _lock:
        hit = _packs.get(str(local))
    if hit is not None and hit[0] == want:
        return pack_url, hit[1]
    kept = read_mark(local / PACK_DIR_MARK)
    found = None
    if kept.get("stamp") == want:
        try:
            found = packed.Directory(pack_url, (0, 0, 0, int(want[0])), {
                str(n): packed.Member(*(int(v) for v in m)) for n, m in kept["members"].items()})
        except (KeyError, TypeError, ValueError, AttributeError):
            found = None
    if found is None:
        try:
            found = packed.directory_by_ranges(_range_file(pack_url, int(want[0])), pack_url)
        except (packed.PackError, StoreError):
            return None
        write_mark(local / PACK_DIR_MARK, {"stamp": want, "members": {
            n: [m.offset, m.size, m.length, m.method, m.crc] for n, m in found.members.items()}})
    with _lock:
        _packs[str(local)] = (want, found)
    return pack_url, found


def _range_file(url: str, size: int) -> packed.RangeFile:
    """The object at ``url`` (``size`` bytes) as a file read by ranged GETs."""
    def get(start: int, end: int) -> bytes:
        """Bytes ``start`` to ``end`` of the object."""
        got = get_object(url, start=start, end=end)
        if got is None:
            raise StoreError(f"{url}: gone from the bucket")
        return got[0]

    return packed.RangeFile(get, size)


def fetch_members(local: Path, pack: tuple[str, packed.Directory], rels: list[str]) -> int:
    """Write members of a pack in the bucket to their places in the mirror (files never
    change once written, so one there is not read again), reading them with one ranged GET
    spanning them when that spans at most :data:`MAX_SPAN_BYTES`, else one each; each is
    checked against the zip's size and CRC. Members missing from the pack, or whose names
    cannot be local paths, are left out (the reader then says the file is missing). The
    number written."""
    url, found = pack
    todo = [(rel, found.members[rel]) for rel in dict.fromkeys(rels)
            if rel and rel in found.members and safe_rel(rel) and rel.startswith("episodes/")
            and not (local / rel).is_file()]
    if not todo:
        return 0
    f = _range_file(url, found.identity[3])
    start = min(m.offset for _, m in todo)
    end = max(m.offset + 30 + len(rel.encode()) + 256 + m.size for rel, m in todo)
    written = 0
    try:
        if end - start <= MAX_SPAN_BYTES:
            f.prime(start, end)
        for rel, m in todo:
            try:
                data = packed.member_by_ranges(f, rel, m)
            except packed.PackError:
                continue
            (local / rel).parent.mkdir(parents=True, exist_ok=True)
            save_bytes(local, rel, data)
            written += 1
    except (StoreError, OSError):
        pass
    return written

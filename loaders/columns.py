"""The columnar copy of a closed run, kept beside it in object storage (issue 48).

A run in a bucket is opened by reading its tables. Fetching them as JSONL and parsing them
costs a request per file and the parse; the *columnar copy* is one object,
``RUN/.mfm-columns`` (``mfm.objectstore.COLUMNS``), that holds what the loaders make of the
run's files: each table as the table cache keeps it (an Arrow IPC file for a table the fast
path vouched for, else its records, line numbers and problems as JSON:
``loaders.cachedread``), the file checks' problems, and the run's other small files
(``logs.txt``, ``mine/``). A cold open reads one listing of the run's folder and this one
object.

Nothing in it is trusted blindly. Its header records, for each table, the size and ETag the
table had in the bucket when the copy was made; a reader uses a table's columns only while
the listing shows that table with that size and ETag, and reads the JSONL otherwise (one
table at a time: a table changed since is fetched and parsed, the rest still come from the
copy). The file checks are used while ``index.jsonl`` has its recorded stamp (an episode's
files never change once its row is written; as for the local file checks' cache, a file
deleted from the bucket behind an unchanged index is not seen). The small files are used
while ``run.json`` has its recorded stamp (the writer uploads ``run.json`` last; a file under
``mine/`` changed behind an unchanged ``run.json`` is not seen). The copy also records the
hash of the code that made it (``loaders.tablecache.code_key``): a copy made by another
version of the loaders is not used at all. Its bytes carry a CRC-32.

Who writes it: ``mfm run`` and ``mfm import`` when a run closes into a bucket
(``mfm.objectstore.Uploader.close``), from the staging copy just uploaded; and a reader that
opened a closed run without a usable copy, from the files it fetched, when it may write to
the bucket (``MFM_WRITE_BACK`` is not ``0``/``off``; a refused write is remembered in the
mirror and not tried again).

Layout: 8 bytes magic, 4 bytes header length, 4 bytes CRC-32 of everything after these 16
bytes, the header (JSON), padded to 64 bytes, then the parts, each padded to 64 bytes; the
header lists each part's name, kind (``arrow``, ``json``, ``problems``, ``file``), stamp,
offset from the first part and length.
"""
from __future__ import annotations

import functools
import hashlib
import json
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from loaders import cachedread, tablecache
from mfm.objectstore import COLUMNS
from mfm.run_reader import TableRead
from mfm.schema import MANIFEST, TABLES, Problem
from mfm.validate import FileCheck, validate

MAGIC = b"MFMCOLS1"
FORMAT = 1
ALIGN = 64
EXTRAS_MAX_BYTES = 8 << 20
"""The run's other small files (``logs.txt``, ``mine/``, ...) go into the copy only when
they come to at most this many bytes together (else a reader fetches them as files)."""
SKIP_TOP = {MANIFEST, "data.json", "episodes", "episodes.zip", "inherited", *TABLES}
_HEAD = struct.Struct("<8sII")


def etag_of(data: bytes) -> str:
    """The ETag S3 gives an object of these bytes uploaded in one part (its MD5, quoted)."""
    return '"' + hashlib.md5(data, usedforsecurity=False).hexdigest() + '"'


def extras(run_dir: Path) -> dict[str, bytes] | None:
    """The run's files outside its tables, manifest and episodes (relative path -> bytes), or
    None when they come to more than :data:`EXTRAS_MAX_BYTES`."""
    out: dict[str, bytes] = {}
    total = 0
    for top in sorted(run_dir.iterdir()):
        if top.name in SKIP_TOP or top.name.startswith(".") or top.is_symlink():
            continue
        found = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file() and not p.is_symlink())
        for p in found:
            rel = p.relative_to(run_dir).as_posix()
            if any(part.startswith(".") for part in rel.split("/")):
                continue
            data = p.read_bytes()
            total += len(data)
            if total > EXTRAS_MAX_BYTES:
                return None
            out[rel] = data
    return out


class _Capture(FileCheck):
    """File checks that keep what they found (the problems go into the copy)."""

    def __init__(self, run_dir: Path, inner: Callable[[Path], FileCheck]) -> None:
        super().__init__(run_dir)
        self.inner = inner(run_dir)
        self.found: list[Problem] | None = None

    def known(self) -> list[Problem] | None:
        self.found = self.inner.known()
        return self.found

    def run(self, refs: list) -> list[Problem]:
        self.found = self.inner.run(refs)
        return self.found


def build(run_dir: Path, stamps: dict[str, list], files: Callable[[Path], FileCheck] = FileCheck,
          small: dict[str, bytes] | None = None) -> bytes | None:
    """The columnar copy of the run in the local folder ``run_dir``, whose files are copies
    of the bucket's objects of the given ``stamps`` (name -> [size, ETag], from one listing
    of the run's folder). Tables without a stamp are left out; ``files`` makes the file
    checks; ``small`` the run's other small files (default: :func:`extras` of the folder).
    None when the run cannot be read."""
    reads: dict[str, tuple[TableRead, object]] = {}

    def read(path: Path, name: str) -> TableRead:
        got = cachedread._read_one(path, name)
        reads[name] = got
        return got[0]

    holder: list[_Capture] = []

    def check(d: Path) -> FileCheck:
        holder.append(_Capture(d, files))
        return holder[0]

    c = validate(run_dir, read=read, files=check)
    if c.manifest is None and not c.tables:
        return None
    parts: list[tuple[dict, bytes]] = []
    for name in TABLES:
        if name not in reads or name not in stamps or not (run_dir / name).is_file():
            continue
        t, arrow = reads[name]
        if arrow is not None:
            payload, kind = tablecache.arrow_bytes(arrow).to_pybytes(), "arrow"
        else:
            payload, kind = cachedread._encode_records(t, TABLES[name]), "json"
        parts.append(({"name": name, "kind": kind, "stamp": list(stamps[name]), "rows": len(t.records)}, payload))
    found = holder[0].found if holder else None
    if found is not None and "index.jsonl" in stamps:
        parts.append(({"name": "files", "kind": "problems", "stamp": list(stamps["index.jsonl"])},
                      cachedread._problems_json(found)))
    small = extras(run_dir) if small is None else small
    if small is not None and MANIFEST in stamps:
        for rel, data in sorted(small.items()):
            parts.append(({"name": rel, "kind": "file", "stamp": list(stamps.get(rel) or [len(data), etag_of(data)])},
                          data))
    return pack(parts, {"run.json": list(stamps[MANIFEST]) if MANIFEST in stamps else None,
                        "extras": small is not None})


def pack(parts: list[tuple[dict, bytes]], extra: dict) -> bytes:
    """The copy's bytes: header (the parts' places), parts padded to :data:`ALIGN`."""
    offset = 0
    entries = []
    for meta, payload in parts:
        entries.append({**meta, "offset": offset, "length": len(payload)})
        offset += len(payload) + (-len(payload) % ALIGN)
    head = json.dumps({"format": FORMAT, "code": tablecache.code_key(), "parts": entries, **extra}).encode()
    head += b" " * (-(_HEAD.size + len(head)) % ALIGN)
    body = [head]
    for _, payload in parts:
        body += [payload, b"\0" * (-len(payload) % ALIGN)]
    data = b"".join(body)
    return _HEAD.pack(MAGIC, len(head), zlib.crc32(data)) + data


@dataclass
class Columns:
    """A columnar copy read from a local file: its header and its bytes."""

    head: dict
    data: memoryview
    base: int

    def part(self, name: str) -> dict | None:
        return next((p for p in self.head["parts"] if p.get("name") == name), None)

    def payload(self, p: dict) -> memoryview:
        start = self.base + int(p["offset"])
        return self.data[start:start + int(p["length"])]

    def tables(self) -> dict[str, list]:
        """Table name -> the stamp its columns were made from."""
        return {p["name"]: p["stamp"] for p in self.head["parts"] if p.get("kind") in ("arrow", "json")}

    def rows(self, name: str) -> int | None:
        """The rows read from a table when the copy was made (before de-duplication)."""
        p = self.part(name)
        return int(p["rows"]) if p is not None and isinstance(p.get("rows"), int) else None

    def table(self, name: str) -> TableRead:
        """One table as the loaders read it (raises if the part is damaged)."""
        p = self.part(name)
        if p is None or p.get("kind") not in ("arrow", "json"):
            raise KeyError(name)
        return cachedread._decode_table(p["kind"], self.payload(p), TABLES[name])

    def file_problems(self, index_stamp: list | None) -> list[Problem] | None:
        """The file checks' problems, if made for an ``index.jsonl`` of this stamp."""
        p = self.part("files")
        if p is None or index_stamp is None or list(p["stamp"]) != list(index_stamp):
            return None
        try:
            return cachedread._problems(json.loads(bytes(self.payload(p))))
        except (ValueError, TypeError):
            return None

    def small_files(self, manifest_stamp: list | None) -> dict[str, tuple[list, bytes]] | None:
        """The run's small files (path -> (stamp, bytes)) if the copy holds them and was
        made for a ``run.json`` of this stamp; None otherwise."""
        if not self.head.get("extras") or manifest_stamp is None or self.head.get("run.json") != list(manifest_stamp):
            return None
        return {p["name"]: (p["stamp"], bytes(self.payload(p))) for p in self.head["parts"] if p.get("kind") == "file"}


def parse(data: bytes | memoryview) -> Columns | None:
    """A columnar copy's header and parts; None if the bytes are not one, are damaged, or
    were made by other code (:func:`loaders.tablecache.code_key`)."""
    view = memoryview(data)
    try:
        magic, hlen, crc = _HEAD.unpack_from(view)
        if magic != MAGIC or zlib.crc32(view[_HEAD.size:]) != crc:
            return None
        head = json.loads(bytes(view[_HEAD.size:_HEAD.size + hlen]))
    except (struct.error, ValueError):
        return None
    if not isinstance(head, dict) or head.get("format") != FORMAT or head.get("code") != tablecache.code_key():
        return None
    if not isinstance(head.get("parts"), list):
        return None
    return Columns(head, view, _HEAD.size + hlen)


@functools.lru_cache(maxsize=8)
def _load(path: str, ident: tuple) -> Columns | None:
    try:
        return parse(Path(path).read_bytes())
    except OSError:
        return None


def load(run_dir: Path) -> Columns | None:
    """The columnar copy kept in a mirrored run's folder (``COLUMNS``), parsed once per
    version of the file; None if there is none or it is not usable."""
    path = run_dir / COLUMNS
    st = tablecache.stamp(path)
    if st is None:
        return None
    return _load(str(path), tuple(st))

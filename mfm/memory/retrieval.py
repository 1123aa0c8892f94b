"""Retrieval and inspection: filter the index, select references, load records and frames.

Plain functions over a run directory, used by the agent (to recover details the index
cues leave out) and by the dashboard (to show them). Nothing here writes. An episode's file
is read from its folder when it is there, else from the run's packed copy
(:mod:`mfm.memory.packed`).
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from PIL import Image

from mfm.boundary import MAX_JSON_FILE_BYTES, UnsafePath, inside, read_json
from mfm.memory import packed
from mfm.memory.index import EpisodeIndex, IndexQuery
from mfm.schema import FRAMES_PER_CHUNK, IndexRow, JSONError, NotRegularFile, frame_chunk, open_file, parse_json


class FrameError(ValueError):
    """A frame that cannot be read; the message names the file and why."""


class FrameMissing(FrameError):
    """The image file is not there (and, where a run was given, not in its pack)."""


@dataclass(frozen=True)
class EpisodeRecord:
    """An episode's stored records, loaded on demand from its folder."""

    ref: IndexRow
    state: dict | None
    action: dict | None
    outcome: dict | None


def _read_json(run_dir: Path, rel: str) -> dict | None:
    """An episode record file (from its folder, else the run's pack) as a dict; None where
    missing or unreadable. Raises UnsafePath when the file (through a symlink) lies outside
    the run."""
    try:
        obj = read_json(run_dir, rel)
    except UnsafePath:
        raise
    except FileNotFoundError:
        try:
            data = packed.member(run_dir, rel)
            obj = None if data is None or len(data) > MAX_JSON_FILE_BYTES else parse_json(data)
        except (packed.PackError, JSONError):
            return None
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


def search(index: EpisodeIndex, **predicates: Any) -> list[IndexRow]:
    """Filter the index (see :class:`~mfm.memory.index.IndexQuery`) and return references."""
    return index.query(IndexQuery(**predicates))


def read_trace(path: Path, offset: int, into: dict[int, tuple[int, int]]) -> int:
    """Add the positions of ``steps.jsonl`` (``path``) from byte ``offset`` to ``into`` (step
    -> (x, y)), whole lines only; the offset to read from next time."""
    if not path.exists():
        return offset
    with open_file(path, path.name) as f:
        f.seek(offset)
        data = f.read()
    end = data.rfind(b"\n") + 1
    for line in data[:end].splitlines():
        row = json.loads(line)
        into[int(row["step"])] = (int(row["x"]), int(row["y"]))
    return offset + end


def load_episode(run_dir: Path, ref: IndexRow) -> EpisodeRecord:
    """The state, action and outcome records of a referenced episode (None where missing).
    Raises UnsafePath if the index row or a symlink leads outside the run."""
    inside(run_dir, ref.path)
    return EpisodeRecord(ref, *(_read_json(run_dir, f"{ref.path}/{rel}")
                                for rel in ("state/state.json", "action.json", "outcome.json")))


MAX_PIXELS = 16_000_000
"""Images (frame strips, observations) with more pixels are refused before decoding."""
DECODED_BYTES = 256 * 1024 * 1024
"""Pixel bytes of decoded images :func:`read_png` keeps (least recently used go first)."""


def decode_png(path: Path | bytes, name: str | None = None) -> np.ndarray:
    """Decode an image (a file, or its bytes) to an HxWx3 uint8 array (read-only, not
    cached); raise FrameError naming it (``name``, else the file name: never the server's
    absolute path), FrameMissing if the file is not there."""
    label = name or ("image" if isinstance(path, bytes) else Path(path).name)
    try:
        src = io.BytesIO(path) if isinstance(path, bytes) else open_file(path, label)
        with src, Image.open(src) as im:
            if im.width * im.height > MAX_PIXELS:
                raise FrameError(f"{label}: image of {im.width}x{im.height} pixels is too large, not decoded")
            arr = np.asarray(im if im.mode == "RGB" else im.convert("RGB"))
    except FileNotFoundError:
        raise FrameMissing(f"{label}: missing") from None
    except NotRegularFile as e:
        raise FrameError(f"{label}: {e.reason}") from None
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:
        raise FrameError(f"{label}: not a readable image ({str(e).replace(str(path), label)})") from None
    arr.setflags(write=False)
    return arr


_decoded: OrderedDict[tuple[str, tuple[int, int] | None], np.ndarray] = OrderedDict()
_decoded_bytes = 0
_decoded_lock = threading.Lock()


def read_png(path: Path, name: str | None = None) -> np.ndarray:
    """:func:`decode_png`, served from a cache of decoded images bounded by their bytes
    (:data:`DECODED_BYTES`) while the file's modification time and size are unchanged."""
    return _cached((str(path), _stamp(path)), lambda: decode_png(path, name))


def _cached(key: tuple[str, tuple[int, int] | None], decode: Any) -> np.ndarray:
    """The decoded image of ``key`` (where, and its (modification time, size) stamp; never
    kept without a stamp), decoding it with ``decode()`` on a miss."""
    global _decoded_bytes
    with _decoded_lock:
        hit = _decoded.get(key)
        if hit is not None:
            _decoded.move_to_end(key)
            return hit
    arr = decode()
    if key[1] is not None and arr.nbytes <= DECODED_BYTES // 8:
        with _decoded_lock:
            if key not in _decoded:
                _decoded[key] = arr
                _decoded_bytes += arr.nbytes
            while _decoded_bytes > DECODED_BYTES:
                _decoded_bytes -= _decoded.popitem(last=False)[1].nbytes
    return arr


def _pack_member(run_dir: Path, rel: str) -> tuple[packed.Directory, packed.Member]:
    """The pack member ``rel`` of a run; FrameMissing if there is none, FrameError naming
    the pack if it cannot be read."""
    try:
        found = packed.directory(run_dir)
    except packed.PackError as e:
        raise FrameError(f"{rel}: not in its folder, and {e}") from None
    m = found.members.get(rel) if found is not None else None
    if m is None:
        raise FrameMissing(f"{rel}: missing")
    return found, m


def _member_bytes(found: packed.Directory, rel: str, m: packed.Member) -> bytes:
    try:
        return packed.read_member(found.path, rel, m)
    except packed.PackError as e:
        raise FrameError(str(e)) from None


def read_image(run_dir: Path, rel: str, path: Path | None = None) -> np.ndarray:
    """:func:`read_png` of the run's file ``rel`` (``path``: it, already through
    :func:`~mfm.boundary.inside`), or of its pack member when the file is not there."""
    try:
        return read_png(path or inside(run_dir, rel), rel)
    except FrameMissing:
        found, m = _pack_member(run_dir, rel)
    return _cached((f"{found.path}::{rel}", found.identity[2:]), lambda: decode_png(_member_bytes(found, rel, m), rel))


def decode_image(run_dir: Path, rel: str) -> np.ndarray:
    """:func:`decode_png` (not cached) of the run's file ``rel``, or of its pack member when
    the file is not there."""
    try:
        return decode_png(inside(run_dir, rel), rel)
    except FrameMissing:
        found, m = _pack_member(run_dir, rel)
    return decode_png(_member_bytes(found, rel, m), rel)


def forget_decoded() -> None:
    """Empty the decoded-image cache and the recent strips (benchmarks measure cold reads
    with it)."""
    global _decoded_bytes
    with _decoded_lock:
        _decoded.clear()
        _decoded_bytes = 0
    _forget_recent()


def _stamp(path: Path) -> tuple[int, int] | None:
    """(modification time in ns, size) of a file, None if it cannot be seen."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


WRITTEN_BYTES = 8_000_000
"""Pixel bytes of the frame strips this process wrote last that :func:`episode_frame` keeps
(about 30 episodes of the scripted agent; it looks back up to a few episodes)."""

_written: OrderedDict[str, tuple[tuple[int, int] | None, np.ndarray]] = OrderedDict()
_written_bytes = 0
_written_lock = threading.Lock()


def _note(path: Path, pixels: np.ndarray, stamp: tuple[int, int] | None) -> None:
    arr = np.ascontiguousarray(pixels, dtype=np.uint8)
    arr.setflags(write=False)
    _forget_recent()
    global _written_bytes
    with _written_lock:
        old = _written.pop(str(path), None)
        _written_bytes += arr.nbytes - (old[1].nbytes if old else 0)
        _written[str(path)] = (stamp, arr)
        for key in [k for k, (st, _) in _written.items() if st is not None]:
            if _written_bytes <= WRITTEN_BYTES or len(_written) <= 1:
                break
            _written_bytes -= _written.pop(key)[1].nbytes


def remember_pending(path: Path, pixels: np.ndarray) -> None:
    """Note the pixels of a frame strip this process is about to write losslessly to ``path``.

    Until :func:`remember_written` (or :func:`forget_pending`) is called for it, reads of
    ``path`` get these pixels whether or not the file is there yet: a run committing its
    episodes in the background serves the agent the episode it has just finished. Pending
    strips are never evicted."""
    _note(path, pixels, None)


def remember_written(path: Path, pixels: np.ndarray) -> None:
    """Note the pixels of a frame strip this process has just written losslessly to ``path``.

    The agent inspects its latest episode's frames right after committing it; with this
    they are not decoded back from the file it has just encoded. An entry holds only while
    the file's modification time and size are the ones seen here, after the write."""
    stamp = _stamp(path)
    if stamp is None:
        forget_pending(path)
    else:
        _note(path, pixels, stamp)


def forget_pending(path: Path) -> None:
    """Drop a strip noted by :func:`remember_pending` that was not written after all."""
    _forget_recent()
    global _written_bytes
    with _written_lock:
        old = _written.pop(str(path), None)
        if old is not None:
            _written_bytes -= old[1].nbytes


def forget_written() -> None:
    """Drop every strip noted by :func:`remember_written` (later reads decode the files)."""
    _forget_recent()
    global _written_bytes
    with _written_lock:
        _written.clear()
        _written_bytes = 0


RECENT_BYTES = 32 * 1024 * 1024
"""Pixel bytes of the frame strips :func:`episode_frame` read last and serves again without
resolving their path (one ``stat`` checks that the path still leads to the same file). The
arrays are those of the decoded-image cache, so this adds at most this much memory."""

_recent: OrderedDict[tuple[str, str], tuple[tuple[int, int, int, int], np.ndarray]] = OrderedDict()
_recent_bytes = 0
_recent_generation = 0
_recent_lock = threading.Lock()


def _where(key: tuple[str, str]) -> tuple[int, int, int, int] | None:
    """The identity of the file a strip is read from: its own, else (not there) the run's
    pack's."""
    return packed.identity(os.path.join(*key)) or packed.identity(os.path.join(key[0], packed.PACK))


def _recent_strip(key: tuple[str, str]) -> np.ndarray | None:
    """The strip :func:`episode_frame` read before for ``key`` (run folder, strip path as
    given) if that path still leads to the very file it was read from (same device, inode,
    modification time and size; the pack's, for a strip read from it): the same path passed
    the path check then, and nothing is read from the file now."""
    with _recent_lock:
        hit = _recent.get(key)
        if hit is not None:
            _recent.move_to_end(key)
    if hit is None or hit[0] != _where(key):
        return None
    return hit[1]


def _keep_recent(key: tuple[str, str], identity: tuple[int, int, int, int] | None, strip: np.ndarray,
                 generation: int) -> None:
    """Keep a strip just read for ``key`` (least recently used go first past
    :data:`RECENT_BYTES`); not if the file could not be seen before the read or the strips
    were forgotten since it began."""
    global _recent_bytes
    if identity is None or strip.nbytes > RECENT_BYTES // 4:
        return
    with _recent_lock:
        if generation != _recent_generation:
            return
        old = _recent.pop(key, None)
        _recent_bytes += strip.nbytes - (old[1].nbytes if old else 0)
        _recent[key] = (identity, strip)
        while _recent_bytes > RECENT_BYTES:
            _recent_bytes -= _recent.popitem(last=False)[1][1].nbytes


def _forget_recent() -> None:
    """Drop the recent strips (a strip noted as written or pending must be served from that
    note, and a read under way is not kept)."""
    global _recent_bytes, _recent_generation
    with _recent_lock:
        _recent.clear()
        _recent_bytes = 0
        _recent_generation += 1


def _read_strip(run_dir: Path, name: str, path: Path) -> np.ndarray:
    """A frame strip (``path``: the run's file ``name``): as this process wrote it (or is
    writing it) if the file is unchanged since, else decoded (from the pack if the file is
    not there)."""
    with _written_lock:
        hit = _written.get(str(path))
    if hit is not None and (hit[0] is None or hit[0] == _stamp(path)):
        return hit[1]
    return read_image(run_dir, name, path)


def frame_hash(frame: np.ndarray) -> str:
    """A short content hash of a frame (the index's ``observation_hash``)."""
    return hashlib.blake2b(np.ascontiguousarray(frame).tobytes(), digest_size=8).hexdigest()


def observation(run_dir: Path, ref: IndexRow) -> np.ndarray:
    """The frame recorded when the episode ended: ``observation/image.png`` if the index names
    it, else (format 1.1) the episode's last per-step frame, checked against the index's
    ``observation_hash``."""
    if ref.image:
        return read_image(run_dir, ref.image)
    if ends_in_strip(ref):
        frame = episode_frame(run_dir, ref, ref.frames - 1)
        check_end_frame(ref, frame)
        return frame
    raise FrameError(f"{ref.id}: the index names no observation image")


def ends_in_strip(ref: IndexRow) -> bool:
    """Whether the episode's end observation is its last per-step frame (format 1.1: no
    image named, frames stored, a hash to check them against)."""
    return not ref.image and ref.frames > 0 and bool(ref.observation_hash)


def check_end_frame(ref: IndexRow, frame: np.ndarray) -> None:
    """Raise FrameError unless ``frame`` is the end observation ``ref``'s hash names."""
    if frame_hash(frame) != ref.observation_hash:
        raise FrameError(f"{ref.id}: its last frame does not match the index's observation_hash "
                         f"{ref.observation_hash} (the frame strip was changed)")


def episode_frame(run_dir: Path, ref: IndexRow, i: int, size: int | None = None) -> np.ndarray:
    """The ``i``-th per-step frame of an episode (step ``first_step + 1 + i``). A strip read
    lately is served from :func:`_recent_strip` (no path resolution, no cache lookups)."""
    if not 0 <= i < ref.frames:
        raise FrameError(f"{ref.id}: frame {i} out of range (it has {ref.frames})")
    chunk, row = frame_chunk(ref.path, i)
    key = (os.fspath(run_dir), chunk)
    strip = _recent_strip(key)
    if strip is None:
        generation = _recent_generation
        inside(run_dir, chunk)
        identity = _where(key)
        strip = _read_strip(run_dir, chunk, run_dir / chunk)
        _keep_recent(key, identity, strip, generation)
    h = size or strip.shape[1]
    expected = min(FRAMES_PER_CHUNK, ref.frames - (i - row))
    if strip.shape[0] != expected * h:
        raise FrameError(f"{chunk}: strip is {strip.shape[0]} px high, expected {expected} frames of {h} px")
    return strip[row * h:(row + 1) * h]


def frame_at(run_dir: Path, index: EpisodeIndex, step: int) -> np.ndarray:
    """The frame of env step ``step`` (the observation after that step's action)."""
    ref = index.episode_at(step)
    if ref is None:
        raise FrameError(f"no stored frame for step {step}")
    return episode_frame(run_dir, ref, step - ref.first_step - 1)


def crop(frame: np.ndarray, box: tuple[int, int, int, int]) -> np.ndarray:
    """Pixels ``[y0:y1, x0:x1]`` for ``box = (x0, y0, x1, y1)``, clipped to the frame."""
    x0, y0, x1, y1 = box
    h, w = frame.shape[:2]
    x0, x1 = max(0, min(w, x0)), max(0, min(w, x1))
    y0, y1 = max(0, min(h, y0)), max(0, min(h, y1))
    if x1 <= x0 or y1 <= y0:
        raise ValueError(f"crop box {box} is empty inside a {w}x{h} frame")
    return frame[y0:y1, x0:x1]


def crop_tiles(frame: np.ndarray, cols: tuple[int, int], rows: tuple[int, int], grid: int = 9) -> np.ndarray:
    """Crop whole tiles of a Crafter-style frame: columns and rows as half-open tile ranges."""
    t = frame.shape[1] // grid
    return crop(frame, (cols[0] * t, rows[0] * t, cols[1] * t, rows[1] * t))


def enlarge(frame: np.ndarray, factor: int) -> np.ndarray:
    """Nearest-neighbour magnification by the integer ``factor`` (each pixel becomes a square), so
    pixel art stays crisp. The one enlargement every view uses."""
    if int(factor) != factor or factor < 1:
        raise ValueError(f"factor must be a positive integer, not {factor!r}")
    return np.repeat(np.repeat(np.asarray(frame), int(factor), axis=0), int(factor), axis=1)


def compare(frames: Sequence[np.ndarray], gap: int = 2) -> np.ndarray:
    """Frames side by side (padded to the tallest), separated by a white gap."""
    if not frames:
        raise ValueError("nothing to compare")
    h = max(f.shape[0] for f in frames)
    parts: list[np.ndarray] = []
    for i, f in enumerate(frames):
        if i:
            parts.append(np.full((h, gap, 3), 255, np.uint8))
        pad = np.zeros((h - f.shape[0], f.shape[1], 3), np.uint8)
        parts.append(np.concatenate([f, pad], axis=0) if len(pad) else f)
    return np.concatenate(parts, axis=1)


def difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A mask image of the pixels that differ between two frames of the same size."""
    if a.shape != b.shape:
        raise ValueError(f"frames differ in size: {a.shape} vs {b.shape}")
    mask = np.any(a != b, axis=-1)
    out = (a // 3).copy()
    out[mask] = (255, 0, 255)
    return out

"""Retrieval and inspection: filter the index, select references, load records and frames.

Plain functions over a run directory, used by the agent (to recover details the index
cues leave out) and by the dashboard (to show them). Nothing here writes.
"""
from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from PIL import Image

from mfm.memory.index import EpisodeIndex, IndexQuery
from mfm.schema import FRAMES_PER_CHUNK, IndexRow, frame_chunk


class FrameError(ValueError):
    """A frame that cannot be read; the message names the file and why."""


@dataclass(frozen=True)
class EpisodeRecord:
    """An episode's stored records, loaded on demand from its folder."""

    ref: IndexRow
    state: dict | None
    action: dict | None
    outcome: dict | None


def _read_json(path: Path) -> dict | None:
    try:
        obj = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


def search(index: EpisodeIndex, **predicates: Any) -> list[IndexRow]:
    """Filter the index (see :class:`~mfm.memory.index.IndexQuery`) and return references."""
    return index.query(IndexQuery(**predicates))


def load_episode(run_dir: Path, ref: IndexRow) -> EpisodeRecord:
    """The state, action and outcome records of a referenced episode (None where missing)."""
    base = run_dir / ref.path
    return EpisodeRecord(ref, _read_json(base / "state" / "state.json"), _read_json(base / "action.json"),
                         _read_json(base / "outcome.json"))


def read_png(path: Path) -> np.ndarray:
    """Decode a PNG to an HxWx3 uint8 array; raise FrameError naming the file on failure."""
    return _read_png_cached(str(path), _mtime(path))


def _stamp(path: Path) -> tuple[int, int] | None:
    """(modification time in ns, size) of a file, None if it cannot be seen."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def _mtime(path: Path) -> float:
    stamp = _stamp(path)
    return -1 if stamp is None else stamp[0]


@lru_cache(maxsize=256)
def _read_png_cached(path: str, mtime: float) -> np.ndarray:
    try:
        with Image.open(path) as im:
            if im.width * im.height > 16_000_000:
                raise FrameError(f"{path}: image of {im.width}x{im.height} pixels is too large, not decoded")
            arr = np.asarray(im.convert("RGB"))
    except FileNotFoundError:
        raise FrameError(f"{path}: missing") from None
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:
        raise FrameError(f"{path}: not a readable image ({e})") from None
    arr.setflags(write=False)
    return arr


WRITTEN_BYTES = 8_000_000
"""Pixel bytes of the frame strips this process wrote last that :func:`episode_frame` keeps
(about 30 episodes of the scripted agent; it looks back up to a few episodes)."""

_written: OrderedDict[str, tuple[tuple[int, int] | None, np.ndarray]] = OrderedDict()
_written_bytes = 0
_written_lock = threading.Lock()


def _note(path: Path, pixels: np.ndarray, stamp: tuple[int, int] | None) -> None:
    arr = np.ascontiguousarray(pixels, dtype=np.uint8)
    arr.setflags(write=False)
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
    global _written_bytes
    with _written_lock:
        old = _written.pop(str(path), None)
        if old is not None:
            _written_bytes -= old[1].nbytes


def forget_written() -> None:
    """Drop every strip noted by :func:`remember_written` (later reads decode the files)."""
    global _written_bytes
    with _written_lock:
        _written.clear()
        _written_bytes = 0


def _read_strip(path: Path) -> np.ndarray:
    """A frame strip: as this process wrote it (or is writing it) if the file is unchanged
    since, else decoded."""
    with _written_lock:
        hit = _written.get(str(path))
    if hit is not None and (hit[0] is None or hit[0] == _stamp(path)):
        return hit[1]
    return read_png(path)


def frame_hash(frame: np.ndarray) -> str:
    """A short content hash of a frame (the index's ``observation_hash``)."""
    return hashlib.blake2b(np.ascontiguousarray(frame).tobytes(), digest_size=8).hexdigest()


def observation(run_dir: Path, ref: IndexRow) -> np.ndarray:
    """The frame recorded when the episode ended: ``observation/image.png`` if the index names
    it, else (format 1.1) the episode's last per-step frame, checked against the index's
    ``observation_hash``."""
    if ref.image:
        return read_png(run_dir / ref.image)
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
    """The ``i``-th per-step frame of an episode (step ``first_step + 1 + i``)."""
    if not 0 <= i < ref.frames:
        raise FrameError(f"{ref.id}: frame {i} out of range (it has {ref.frames})")
    chunk, row = frame_chunk(ref.path, i)
    strip = _read_strip(run_dir / chunk)
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
    """Nearest-neighbour magnification, so pixel art stays crisp."""
    if factor < 1:
        raise ValueError("factor must be at least 1")
    return np.repeat(np.repeat(frame, factor, axis=0), factor, axis=1)


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

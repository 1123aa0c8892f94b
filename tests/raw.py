"""Independent readers for tests: run files read with json and PIL, HTML outputs parsed with
``html.parser``, never through the loaders, so a view can be checked against the raw files."""
from __future__ import annotations

import base64
import io
import json
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
from PIL import Image


class Page(HTMLParser):
    """The tables (rows of cell texts, header row first) and images (src, width, height, title) of an HTML page."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: list[list[list[str]]] = []
        self.images: list[dict[str, str]] = []
        self.tags: list[str] = []
        self._cell: list[str] | None = None
        self._depth = 0
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append(tag)
        if tag == "table":
            self._depth += 1
            self.tables.append([])
        elif tag == "tr" and self._depth:
            self.tables[-1].append([])
        elif tag in ("td", "th") and self._depth:
            self._cell = []
        elif tag == "img":
            self.images.append(dict(attrs))
        elif tag == "br" and self._cell is not None:
            self._cell.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._depth -= 1

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def decode(src: str) -> np.ndarray:
    """The pixels of a PNG data URI."""
    assert src.startswith("data:image/png;base64,"), src[:40]
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1]))).convert("RGB"))


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def stored_frame(run_dir: Path, step: int) -> np.ndarray:
    """The frame of env ``step`` cut straight from its episode's lossless WebP strip (frames
    stacked vertically, 64 per strip, square)."""
    for row in jsonl(run_dir / "index.jsonl"):
        if row["first_step"] < step <= row["first_step"] + row.get("frames", 0):
            k = step - row["first_step"] - 1
            strip = np.asarray(Image.open(run_dir / row["path"] / "frames" / f"{k // 64:05d}.webp").convert("RGB"))
            side = strip.shape[1]
            return strip[(k % 64) * side:(k % 64 + 1) * side]
    raise KeyError(step)


def shrink(image: np.ndarray, scale: int) -> np.ndarray:
    """Undo a nearest-neighbour enlargement, checking that each block is one colour."""
    small = image[::scale, ::scale]
    assert np.array_equal(np.repeat(np.repeat(small, scale, axis=0), scale, axis=1), image), \
        "not a pixel-exact (nearest-neighbour) enlargement"
    return small

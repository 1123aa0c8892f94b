"""Independent readers for tests: run files read with json and PIL, HTML outputs parsed with
``html.parser``, never through the loaders, so a view can be checked against the raw files;
and the situations tests need (a respawn turn, a failed collect, ...), picked from the raw
files of the sample runs rather than named by turn or episode, so that they survive the
samples' regeneration."""
from __future__ import annotations

import base64
import io
import json
import math
import zipfile
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


def episode_file(run_dir: Path, rel: str) -> bytes:
    """The bytes of a run's episode file ``rel`` (``episodes/ep_N/...``): from its folder, or,
    in a packed run, from ``episodes.zip`` read with the standard library's zipfile."""
    path = run_dir / rel
    if path.exists() or not (run_dir / "episodes.zip").exists():
        return path.read_bytes()
    with zipfile.ZipFile(run_dir / "episodes.zip") as z:
        return z.read(rel)


def episode_json(run_dir: Path, rel: str) -> dict:
    """An episode's JSON file (``action.json``, ``outcome.json``, ...) read by :func:`episode_file`."""
    return json.loads(episode_file(run_dir, rel).decode("utf-8"))


def strip_image(run_dir: Path, episode_path: str, strip: int) -> np.ndarray:
    """The RGB pixels of WebP strip ``strip`` of the episode at ``episode_path``."""
    data = episode_file(run_dir, f"{episode_path}/frames/{strip:05d}.webp")
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def stored_frame(run_dir: Path, step: int) -> np.ndarray:
    """The frame of env ``step`` cut straight from its episode's lossless WebP strip (frames
    stacked vertically, 64 per strip, square)."""
    for row in jsonl(run_dir / "index.jsonl"):
        if row["first_step"] < step <= row["first_step"] + row.get("frames", 0):
            k = step - row["first_step"] - 1
            strip = strip_image(run_dir, row["path"], k // 64)
            side = strip.shape[1]
            return strip[(k % 64) * side:(k % 64 + 1) * side]
    raise KeyError(step)


def shrink(image: np.ndarray, scale: int) -> np.ndarray:
    """Undo a nearest-neighbour enlargement, checking that each block is one colour."""
    small = image[::scale, ::scale]
    assert np.array_equal(np.repeat(np.repeat(small, scale, axis=0), scale, axis=1), image), \
        "not a pixel-exact (nearest-neighbour) enlargement"
    return small


def found_at_target(turn: dict) -> list[tuple[dict, dict]]:
    """The (inspect call, find) pairs of ``turn`` whose find is at the cell of its first target."""
    if not turn["targets"]:
        return []
    cell = (turn["targets"][0]["x"], turn["targets"][0]["y"])
    return [(c, f) for c in turn["calls"] if c["tool"] == "inspect" for f in c["result"]["found"]
            if (f["x"], f["y"]) == cell]


def respawn_turn(run_dir: Path) -> dict:
    """The first turn that starts a life at its respawn step, searches, and goes for a new
    target that one of its inspections found."""
    respawns = {(e["life"], e["step"]) for e in jsonl(run_dir / "lives.jsonl") if e["event"] == "respawn"}
    return next(t for t in sorted(jsonl(run_dir / "turns.jsonl"), key=lambda t: t["turn"])
                if (t["life"], t["first_step"]) in respawns and found_at_target(t)
                and not t["targets"][0]["in_plan"] and any(c["tool"] == "search" for c in t["calls"]))


def sample_runs(root: Path, first: str = "diamond_mfm_s2") -> list[Path]:
    """The agent runs under ``root`` (those with lives.jsonl), ``first`` first."""
    runs = sorted(p for p in root.iterdir() if (p / "lives.jsonl").is_file())
    return sorted(runs, key=lambda p: p.name != first)


def action_of(run_dir: Path, row: dict) -> dict:
    """The action.json of the episode of index row ``row``."""
    return episode_json(run_dir, f"{row['path']}/action.json")


def collect_failure(root: Path) -> tuple[Path, dict, str]:
    """A collect of a material that ended in a death, failed or was interrupted, with two
    frames or more, its target in view and the player standing still at its last two steps;
    deaths first, then in the order of :func:`sample_runs` and of the index: the run, the
    episode's index row and its outcome (``death`` or the index's)."""
    found = []
    for run in sample_runs(root):
        deaths = {e["episode"]: e["step"] for e in jsonl(run / "lives.jsonl") if e["event"] == "death"}
        steps = {(s["step"], s["life"]): s for s in jsonl(run / "steps.jsonl")}
        for r in jsonl(run / "index.jsonl"):
            outcome = "death" if r["id"] in deaths else r.get("outcome")
            if r["action_kind"] != "collect" or r["frames"] < 2 or outcome not in ("death", "failed", "interrupted"):
                continue
            args = action_of(run, r)["args"]
            last, before = steps[(r["last_step"], r["life"])], steps[(r["last_step"] - 1, r["life"])]
            if args.get("material") and 0 <= args["x"] - last["x"] + 4 < 9 and 0 <= args["y"] - last["y"] + 3 < 7 \
                    and (last["x"], last["y"]) == (before["x"], before["y"]):
                found.append((outcome != "death", run, r, outcome))
    assert found, "no sample run has a failed collect with frames, its target in view"
    first = min(found, key=lambda f: f[0])
    return first[1], first[2], first[3]


def crowded_turn(root: Path, gap: float) -> tuple[Path, dict]:
    """Of the agent runs under ``root``, the turn whose inspected episodes have the most pairs
    closer than ``gap`` cells (labels that would overlap without grouping): its run and row."""
    best: tuple[int, Path, dict] | None = None
    for run in sample_runs(root):
        idx = {r["id"]: r for r in jsonl(run / "index.jsonl")}
        for t in jsonl(run / "turns.jsonl"):
            pts = [(idx[e]["x"], idx[e]["y"]) for e in dict.fromkeys(
                c["args"]["episode"] for c in t["calls"] if c["tool"] == "inspect") if idx[e].get("x") is not None]
            close = sum(math.hypot(a[0] - b[0], a[1] - b[1]) < gap for i, a in enumerate(pts) for b in pts[i + 1:])
            if best is None or close > best[0]:
                best = (close, run, t)
    assert best and best[0] > 0, "no sample turn inspects episodes close together"
    return best[1], best[2]

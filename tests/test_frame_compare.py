"""loaders.frame_compare: threshold, tile counts and the world-aligned difference, checked
against frames read straight from the WebP strips of a sample run with PIL."""
from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from conftest import REPO
from raw import jsonl, stored_frame
from loaders import frame_compare as fc

RUN = REPO / "sample_runs" / "diamond_mfm_s2"


def raw_frame(step: int) -> np.ndarray:
    """The frame of ``step`` decoded with PIL from its episode's strip (64 frames per strip)."""
    return stored_frame(RUN, step)


@cache
def raw_positions() -> dict[int, tuple[int, int]]:
    """The player's cell at each step of steps.jsonl (its first row for the step)."""
    out: dict[int, tuple[int, int]] = {}
    for r in jsonl(RUN / "steps.jsonl"):
        out.setdefault(r["step"], (int(r["x"]), int(r["y"])))
    return out


def raw_position(step: int) -> tuple[int, int]:
    return raw_positions()[step]


def framed_pairs() -> list[tuple[int, int]]:
    """The steps (s, s + 1) whose frames are stored in one episode, in order."""
    return [(s, s + 1) for r in jsonl(RUN / "index.jsonl")
            for s in range(r["first_step"] + 1, r["first_step"] + r.get("frames", 0))]


@cache
def night_pair() -> tuple[int, int]:
    """The first two consecutive frames where the player stood still and only night noise
    changed: over 3000 pixels differ, fewer than 100 by more than 8 levels."""
    for s, t in framed_pairs():
        if raw_position(s) == raw_position(t):
            delta = np.abs(raw_frame(s).astype(int) - raw_frame(t).astype(int)).max(axis=-1)
            if (delta > 0).sum() > 3000 and (delta > 8).sum() < 100:
                return s, t
    raise AssertionError("no pair of frames with only night noise between them")


def death_episode() -> dict:
    """The index row of the last death whose episode stored two frames or more."""
    deaths = {e["episode"]: e["step"] for e in jsonl(RUN / "lives.jsonl") if e["event"] == "death"}
    return max((r for r in jsonl(RUN / "index.jsonl") if r["id"] in deaths and r.get("frames", 0) >= 2),
               key=lambda r: deaths[r["id"]])


def death_pair() -> tuple[int, int]:
    """The step before that death (:func:`death_episode`) and the death step."""
    ep = death_episode()["id"]
    step = next(e["step"] for e in jsonl(RUN / "lives.jsonl") if e["event"] == "death" and e["episode"] == ep)
    return step - 1, step


@cache
def move_pair() -> tuple[int, int]:
    """The last two consecutive frames of one episode, up to the last death (as
    :func:`death_pair`), between which the player moved one tile and, world-aligned, under a
    quarter of the changed pixels stay changed (counted here with :func:`raw_aligned`)."""
    death = death_pair()[1]
    for s, t in reversed(framed_pairs()):
        (xa, ya), (xb, yb) = raw_position(s), raw_position(t)
        if t > death or abs(xa - xb) + abs(ya - yb) != 1:
            continue
        a, b = raw_frame(s), raw_frame(t)
        plain = np.abs(a.astype(int) - b.astype(int)).max(axis=-1) > 8
        aligned = np.abs(a.astype(int) - raw_aligned(b, xa - xb, ya - yb).astype(int)).max(axis=-1) > 8
        if (aligned & raw_valid(a, xa - xb, ya - yb)).sum() < plain.sum() / 4:
            return s, t
    raise AssertionError("no move whose world-aligned difference is small")


def raw_valid(a: np.ndarray, dx: int, dy: int) -> np.ndarray:
    """Which pixels of ``a`` a frame moved by (dx, dy) tiles (as :func:`raw_aligned`) still
    shows: the inventory rows and the map tiles with a tile to show."""
    unit = a.shape[1] // 9
    valid = np.ones(a.shape[:2], bool)
    valid[:7 * unit, :9 * unit] = np.kron(np.array([[0 <= r + dy < 7 and 0 <= c + dx < 9 for c in range(9)]
                                                    for r in range(7)]), np.ones((unit, unit))).astype(bool)
    return valid


def raw_aligned(b: np.ndarray, dx: int, dy: int) -> np.ndarray:
    """``b`` with its 9x7 map view moved tile by tile so that tile (c, r) shows b's tile
    (c + dx, r + dy); black where there is none."""
    unit = b.shape[1] // 9
    out = b.copy()
    out[:7 * unit, :9 * unit] = 0
    for r in range(7):
        for c in range(9):
            if 0 <= r + dy < 7 and 0 <= c + dx < 9:
                out[r * unit:(r + 1) * unit, c * unit:(c + 1) * unit] = \
                    b[(r + dy) * unit:(r + dy + 1) * unit, (c + dx) * unit:(c + dx + 1) * unit]
    return out


def test_threshold_hides_the_night_noise() -> None:
    a, b = map(raw_frame, night_pair())
    delta = np.abs(a.astype(int) - b.astype(int)).max(axis=-1)
    d = fc.diff(a, b)
    assert d.threshold == fc.DEFAULT_THRESHOLD == 8
    assert d.pixels_any == int((delta > 0).sum()) > 3000
    assert d.pixels == int((delta > 8).sum()) < 100
    assert fc.diff(a, b, 0).pixels == d.pixels_any


def test_counts_are_in_tiles() -> None:
    a, b = map(raw_frame, death_pair())
    unit = a.shape[1] // 9
    delta = np.abs(a.astype(int) - b.astype(int)).max(axis=-1) > 8
    tiles = {(c, r) for r in range(9) for c in range(9)
             if delta[r * unit:(r + 1) * unit, c * unit:(c + 1) * unit].any()}
    d = fc.diff(a, b)
    assert d.map_tiles == len({t for t in tiles if t[1] < 7})
    assert d.inventory_tiles == len({t for t in tiles if t[1] >= 7})
    assert d.inventory_tiles >= 1  # health dropped to 0 at the death


def test_world_aligned_diff_undoes_the_camera_move() -> None:
    a, b = map(raw_frame, move_pair())
    pa, pb = map(raw_position, move_pair())
    assert pa != pb
    dx, dy = pa[0] - pb[0], pa[1] - pb[1]
    plain = fc.diff(a, b)
    aligned = fc.diff(a, b, positions=(pa, pb))
    assert aligned.shift == (dx, dy)
    assert np.array_equal(aligned.b_shown, raw_aligned(b, dx, dy))
    assert aligned.pixels < plain.pixels / 4


def test_aligned_diff_shows_only_the_changed_cell() -> None:
    rng = np.random.default_rng(1)
    unit = 7
    world = rng.integers(0, 255, (20 * unit, 20 * unit, 3), dtype=np.uint8)

    def view(x: int, y: int) -> np.ndarray:
        out = np.zeros((63, 63, 3), np.uint8)
        out[:49] = world[(y - 3) * unit:(y + 4) * unit, (x - 4) * unit:(x + 5) * unit]
        return out

    a = view(8, 8)
    world[9 * unit:10 * unit, 10 * unit:11 * unit] = 0
    b = view(9, 8)
    d = fc.diff(a, b, positions=((8, 8), (9, 8)))
    assert (d.map_tiles, d.inventory_tiles) == (1, 0)
    ys, xs = np.nonzero(d.mask)
    assert fc.cell_of_tile(int(xs.min()) // unit, int(ys.min()) // unit, (8, 8)) == (10, 9)
    assert fc.diff(a, b).map_tiles > 1


def test_tile_of_cell_and_outline() -> None:
    assert fc.tile_of_cell((15, 29), (16, 28)) == (3, 4)
    assert fc.tile_of_cell((30, 29), (16, 28)) is None
    frame = np.zeros((64, 64, 3), np.uint8)
    big = fc.outline_tiles(frame, [(3, 4)], factor=3)
    unit = 7 * 3
    assert big.shape == (192, 192, 3)
    assert tuple(big[4 * unit, 3 * unit]) == (255, 220, 0)
    assert tuple(big[4 * unit + unit - 1, 3 * unit + 5]) == (255, 220, 0)
    assert tuple(big[4 * unit + 5, 3 * unit + 5]) == (0, 0, 0)


def test_frames_differ_in_size() -> None:
    with pytest.raises(ValueError):
        fc.change_levels(np.zeros((64, 64, 3), np.uint8), np.zeros((32, 32, 3), np.uint8))


def test_frames_page_world_aligned(monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import open_app, texts, use_root

    use_root(monkeypatch, REPO / "sample_runs")
    s, t = move_pair()
    at = open_app("frames", runs="diamond_mfm_s2", frames=f"diamond_mfm_s2:{s},diamond_mfm_s2:{t}", diff="1",
                  align="1", thr="8")
    a, b = raw_frame(s), raw_frame(t)
    (xa, ya), (xb, yb) = raw_position(s), raw_position(t)
    valid = raw_valid(a, xa - xb, ya - yb)
    changed = np.abs(a.astype(int) - raw_aligned(b, xa - xb, ya - yb).astype(int)).max(axis=-1) > 8
    t = texts(at)
    assert f"{int((changed & valid).sum())} px changed by more than 8 levels" in t
    assert f"world-aligned, shifted {xa - xb:+d}, {ya - yb:+d} tiles" in t
    assert at.toggle(key="w_align").value is True
    assert at.number_input(key="w_thr").value == 8


def test_outline_groups_draw_later_groups_on_top() -> None:
    frame = np.zeros((64, 64, 3), np.uint8)
    big = fc.outline_groups(frame, [([(1, 1), (2, 2)], (255, 220, 0)), ([(2, 2)], (0, 230, 255))], factor=2, width=2)
    unit = 14
    assert tuple(big[unit, unit + 5]) == (255, 220, 0) and tuple(big[unit + 1, unit + 5]) == (255, 220, 0)
    assert tuple(big[2 * unit, 2 * unit + 5]) == (0, 230, 255)
    assert tuple(big[unit + 2, unit + 5]) == (0, 0, 0)

"""Issue 43 in a real browser: `mfm dashboard sample_runs` driven by Playwright + headless
Chromium. The retargeting audit shows every inspected episode's frame (pixels checked against
the WebP strips), a death's filmstrip reaches back into the episode before with the vitals, its
grid link opens the cell with the target marked, and a URL value the Failures page drops is
named in a warning. Every fact looked for is read from the raw files (json, PIL, tests/raw*.py).
Screenshots go to test-artifacts/screenshots/ (MFM_SHOTS to change)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

from conftest import REPO
from dash_browser import (checked_screenshot, dashboard, image_with_caption, needs_browser, no_exception, query, see,
                          settle, url)
from raw import jsonl, stored_frame
from raw_whole import death_with_causes_before, inspected_episodes, shown_step, strip_steps, target_of, trace

pytestmark = [needs_browser, pytest.mark.browser, pytest.mark.slow]

ROOT = REPO / "sample_runs"
SHOTS = Path(os.environ.get("MFM_SHOTS", REPO / "test-artifacts" / "screenshots"))
CYAN, YELLOW = (0, 230, 255), (255, 220, 0)
PER_PAGE = 4
"""Inspected episodes the Retargeting page shows at once (``loaders.turns.SHOTS_PER_PAGE``)."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with dashboard(ROOT, tmp_path_factory.mktemp("log")) as base:
        yield base


def shot(pg, name: str, tall: int = 2400) -> None:
    checked_screenshot(pg, SHOTS / f"{name}.png", tall)


def shot_at(pg, text: str, name: str, tall: int = 1500) -> None:
    """A screenshot of a ``tall``-pixel viewport whose top is the first element showing ``text``."""
    settle(pg)
    no_exception(pg)
    SHOTS.mkdir(parents=True, exist_ok=True)
    pg.set_viewport_size({"width": 1440, "height": tall})
    el = pg.get_by_text(text, exact=False).filter(visible=True).first
    el.evaluate("e => e.scrollIntoView({block: 'start'})")
    settle(pg)
    pg.screenshot(path=str(SHOTS / f"{name}.png"))
    pg.set_viewport_size({"width": 1440, "height": 1000})


def same_but_outlines(img: np.ndarray, frame: np.ndarray) -> np.ndarray:
    """``img`` (``frame`` enlarged by an integer factor, some tiles outlined) brought back to
    the frame's size; asserts every pixel that differs from the frame is an outline colour."""
    factor = img.shape[0] // frame.shape[0]
    assert img.shape == (frame.shape[0] * factor, frame.shape[1] * factor, 3)
    small = img[factor - 1::factor, factor - 1::factor]
    differ = np.any(small != frame, axis=-1)
    outline = np.all(small == CYAN, axis=-1) | np.all(small == YELLOW, axis=-1)
    assert not (differ & ~outline).any(), "a pixel differs from the stored frame and is no outline"
    assert differ.mean() < 0.5
    return small


def most_seen_turn() -> tuple[Path, dict]:
    """The retargeting turn that inspected more than four episodes and saw its new target in
    one of them (the most inspected), else more than three."""
    from raw_whole import retarget_seen_in_many

    try:
        return retarget_seen_in_many(ROOT, PER_PAGE)
    except AssertionError:
        return retarget_seen_in_many(ROOT, 3)


def test_retargeting_shows_every_inspected_frame(server, page) -> None:
    run_dir, turn = most_seen_turn()
    key, n, eps = run_dir.name, turn["turn"], inspected_episodes(turn)
    index = {r["id"]: r for r in jsonl(run_dir / "index.jsonl")}
    steps = trace(run_dir)
    new = {(g["x"], g["y"]) for g in turn["targets"] if not g.get("in_plan")}
    pages = -(-len(eps) // PER_PAGE)
    for p in range(1, pages + 1):
        page.goto(url(server, "retargeting", runs=key, run=key, turn=str(n), **({"shots": str(p)} if p > 1 else {})))
        settle(page, timeout=120)
        see(page, f"Inspected ({len(eps)} episode(s))")
        see(page, "Outlines: cyan")
        for ep in eps[(p - 1) * PER_PAGE:p * PER_PAGE]:
            step, why = shown_step(turn, ep, index.get(ep))
            img = image_with_caption(page, server, f"inspected {ep} · step {step} · ")
            small = same_but_outlines(img, stored_frame(run_dir, step))
            if why == "new":
                life = index[ep]["life"]
                x, y = steps[(step, life)]["x"], steps[(step, life)]["y"]
                for tx, ty in new:
                    col, row = tx - x + 4, ty - y + 3
                    if 0 <= col < 9 and 0 <= row < 7:
                        assert tuple(small[row * 7 + 6, col * 7 + 3]) == CYAN, "the new target's tile outlined cyan"
        shot_at(page, f"Turn {n} · life", f"retargeting_{key}_turn_{n}_shots_{p}", tall=1700)
    assert pages >= 1


def test_a_death_explained_by_the_episode_before(server, page) -> None:
    run_dir, row, death = death_with_causes_before(ROOT)
    key, ep = run_dir.name, row["id"]
    steps = trace(run_dir)
    target = target_of(run_dir, row)
    want = strip_steps(run_dir, row)
    page.goto(url(server, "failures", runs=key, run=key, ep=ep))
    settle(page, timeout=120)
    see(page, f"step {death['step'] - 1} · LAST BEFORE")
    see(page, f"step {death['step']} · FAILURE STEP")
    see(page, "Outlines: cyan")
    caps = [c for c in page.locator('[data-testid="stImageCaption"]').all_inner_texts() if c.startswith("step ")]
    assert [int(c.split(" ")[1]) for c in caps] == want and want[0] <= row["first_step"]
    for c, s in zip(caps, want):
        v = steps[(s, row["life"])]
        assert f"health {v['health']} · food {v['food']} · drink {v['drink']} · energy {v['energy']}" in c
    before = death["step"] - 1
    img = image_with_caption(page, server, f"step {before} · LAST BEFORE")
    same_but_outlines(img, stored_frame(run_dir, before))
    shot_at(page, f"{ep} · ", f"failures_{key}_{ep}_reaching_back", tall=1300)

    end = steps[(death["step"], row["life"])]
    page.get_by_text(f"Open cell ({end['x']}, {end['y']}) in the Spatial grid").first.click()
    settle(page, timeout=120)
    see(page, f"({end['x']}, {end['y']})")
    see(page, f"Red diamond: the failed action's target cell ({target[0]}, {target[1]})")
    q = query(page)
    assert (q["cell"], q["mark"], q["life"]) == (f"{end['x']},{end['y']}", f"{target[0]},{target[1]}",
                                                 str(row["life"]))
    assert page.locator('[data-testid="stNumberInput"] input').first.input_value() == str(end["x"])
    page.locator(".mfm-grid canvas[aria-label]").wait_for(timeout=60_000)
    inside = page.evaluate("""([x, y]) => { const st = document.querySelector('.mfm-grid').__mfm, k = st.k;
      return [k.X(x) - k.X(st.data.extent[0] - 0.5), k.pw, k.Y(y) - k.Y(st.data.extent[1] - 0.5), k.ph]; }""",
                           list(target))
    assert 0 < inside[0] < inside[1] and 0 < inside[2] < inside[3], "the failed target is drawn inside the map"
    shot(page, f"grid_{key}_cell_{end['x']}_{end['y']}_target_marked", tall=1800)


def test_dropped_url_values_are_named(server, page) -> None:
    run_dir = ROOT / "diamond_mfm_s2"
    key = run_dir.name
    page.goto(url(server, "failures", runs=key, run=key, act="collect,fly", mat="nosuchthing", ep="ep_999999"))
    settle(page, timeout=120)
    see(page, "nosuchthing")
    warnings = " ".join(page.locator('[data-testid="stAlertContentWarning"]').all_inner_texts())
    for value in ("fly", "nosuchthing", "ep_999999"):
        assert value in warnings, warnings
    nothing_overlaps_the_picker(page)
    shot(page, "failures_dropped_url_values", tall=1400)

    deaths = {e["episode"] for e in jsonl(run_dir / "lives.jsonl") if e["event"] == "death"}
    done = {(r["action_kind"], "death" if r["id"] in deaths else r.get("outcome"))
            for r in jsonl(run_dir / "index.jsonl")}
    act = next(a for a, _ in sorted(done, key=str) if a and (a, "death") not in done)
    page.goto(url(server, "failures", runs=key, run=key, act=act, outcome="death"))
    settle(page, timeout=120)
    see(page, "No failure or death matches these filters")
    assert page.locator('[data-testid="stDataFrame"]').count() == 0
    nothing_overlaps_the_picker(page)
    shot(page, "failures_no_match", tall=1000)


def nothing_overlaps_the_picker(pg) -> None:
    """No alert or table above the failure picker reaches into its box."""
    box = pg.locator('[data-testid="stSelectbox"]').filter(has_text="Open the filmstrip of").first.bounding_box()
    for el in pg.locator('[data-testid="stAlert"], [data-testid="stDataFrame"]').all():
        b = el.bounding_box()
        if b and b["y"] < box["y"]:
            assert b["y"] + b["height"] <= box["y"] + 1, "an element above overlaps the picker"


def test_grid_without_a_cell_is_empty(server, page) -> None:
    page.goto(url(server, "grid", runs="diamond_mfm_s2", run="diamond_mfm_s2"))
    settle(page, timeout=120)
    see(page, "Pick a cell")
    values = [i.input_value() for i in page.locator('[data-testid="stNumberInput"] input').all()]
    assert values[:2] == ["", ""], values


def test_a_plan_write_opens_memory_where_it_holds(server, page) -> None:
    run_dir = ROOT / "diamond_mfm_s2"
    key = run_dir.name
    turns = {t["turn"]: t for t in jsonl(run_dir / "turns.jsonl")}
    w = next(w for w in jsonl(run_dir / "memory_writes.jsonl") if w["path"] == "mine/working.md"
             and w["reason"].startswith("plan:") and w["turn"] in turns and turns[w["turn"]]["first_step"] < w["step"]
             and any(c["tool"] == "inspect" for c in turns[w["turn"]]["calls"]))
    t = turns[w["turn"]]
    page.goto(url(server, "turns", runs=key, run=key, turn=str(t["turn"])))
    settle(page, timeout=120)
    see(page, f"steps {t['first_step'] + 1}–{t['last_step']} (decided at step {t['first_step']})")
    see(page, "Outlines: cyan")
    shot_at(page, "Tool calls", f"turns_{key}_turn_{t['turn']}_legend", tall=1400)
    page.get_by_text(f"Open mine/working.md as of step {t['first_step']} in Memory").first.click()
    settle(page, timeout=120)
    q = query(page)
    assert (q["file"], q["asof"]) == ("mine/working.md", str(t["first_step"]))
    page.get_by_role("tab", name="Diff").click()
    settle(page)
    see(page, f"as of step {t['first_step']}")
    rows = page.evaluate("""() => Array.from(document.querySelectorAll('[data-testid="stDataFrame"] table tr'))
        .map(tr => Array.from(tr.querySelectorAll('td')).map(td => td.textContent))""")
    kinds = {r[0] for r in rows if r}
    assert "added" in kinds and "unchanged" in kinds
    assert all(not r[-1].startswith(" ") for r in rows if r)
    shot_at(page, "Compare steps", f"memory_{key}_working_md_diff_{t['first_step']}", tall=1200)


def test_timeline_scrubber_reaches_back(server, page) -> None:
    run_dir, row, death = death_with_causes_before(ROOT)
    key, ep = run_dir.name, row["id"]
    first = strip_steps(run_dir, row)[0]
    page.goto(url(server, "timeline", runs=key, run=key, ep=ep))
    settle(page, timeout=120)
    see(page, f"Steps {first}–{row['first_step']} belong to the episode(s) before {ep}")
    slider = page.locator("input.mfm-scrub-range").first
    assert slider.get_attribute("min") == str(first)
    assert slider.input_value() == str(row["first_step"] + 1)
    shot_at(page, "Step (scrub the episode's frames)", f"timeline_{key}_{ep}_scrubber_reaching_back", tall=1000)

"""Auditing a turn and a failure in a real browser: `mfm dashboard sample_runs` driven by
Playwright + headless Chromium. Every fact looked for is read from the run's raw files here
(json, PIL), not from the loaders. Screenshots go to /tmp/audit_shots/."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

from conftest import REPO
from dash_browser import (checked_screenshot, dashboard, image_with_caption, needs_browser, query, see, settle,
                          url)
from raw import action_of, collect_failure, crowded_turn, found_at_target, jsonl, respawn_turn, stored_frame
from raw_whole import strip_steps

pytestmark = [needs_browser, pytest.mark.browser, pytest.mark.slow]

ROOT = REPO / "sample_runs"
RUN = ROOT / "diamond_mfm_s2"
KEY = RUN.name
SHOTS = Path("/tmp/audit_shots")
OUTLINE = (0, 230, 255)
"""The outline of a decoded tile on a cell the turn chose as its target (cyan)."""
FIND = (255, 220, 0)
"""The outline of any other decoded tile (yellow)."""


def rows(name: str) -> list[dict]:
    return jsonl(RUN / name)


def raw_frame(step: int) -> np.ndarray:
    """The frame of env ``step``, decoded with PIL from its episode's WebP strip."""
    return stored_frame(RUN, step)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with dashboard(ROOT, tmp_path_factory.mktemp("log")) as base:
        yield base


def shot(pg, name: str, tall: int = 2400) -> None:
    """No Streamlit exception on the page, then a screenshot of its top ``tall`` pixels."""
    checked_screenshot(pg, SHOTS / f"{name}.png", tall)


def table_rows(pg) -> list[list[str]]:
    """The rows shown of every table of the page (``st.dataframe`` draws on a canvas; its cells
    are read from the accessible table it keeps beside it), as cell texts."""
    return pg.evaluate("""() => Array.from(document.querySelectorAll('[data-testid="stDataFrame"] table tr'))
        .map(tr => Array.from(tr.querySelectorAll('td')).map(td => td.textContent))""")


def code_texts(pg) -> str:
    return "\n".join(pg.locator('[data-testid="stCode"]').all_inner_texts())


def test_runs_path_is_a_page(server, page) -> None:
    page.goto(url(server, "runs", runs=KEY))
    settle(page)
    see(page, "Milestones")
    assert page.get_by_text("Page not found").count() == 0
    shot(page, "runs_path", tall=1200)


def test_a_respawn_turn_in_one_place(server, page) -> None:
    turn = respawn_turn(RUN)
    n, life = turn["turn"], turn["life"]
    respawn = next(e for e in rows("lives.jsonl") if e["event"] == "respawn" and e["life"] == life)
    assert respawn["step"] == turn["first_step"]
    ids = next(c for c in turn["calls"] if c["tool"] == "search")["result"]["ids"]
    returned = [i for c in turn["calls"] if c["tool"] == "search" for i in c["result"]["ids"]]
    insp, seen = found_at_target(turn)[0]
    episode = insp["args"]["episode"]
    ref = next(r for r in rows("index.jsonl") if r["id"] == episode)
    at = next(s for s in rows("steps.jsonl") if s["step"] == seen["step"] and s["life"] == ref["life"])
    col, row = seen["x"] - at["x"] + 4, seen["y"] - at["y"] + 3
    key = f"res:{seen['name']}@{seen['x']},{seen['y']}"
    write = next(w for w in rows("memory_writes.jsonl") if w["turn"] == n and w["path"] == "mine/GUIDE.md")
    added = next(x for _, _, lines in write["diff"] for x in lines if key in x).rstrip("\n")
    target = next(g for g in turn["targets"] if not g["in_plan"])

    page.goto(url(server, "turns", runs=KEY, turn=str(n)))
    settle(page, timeout=120)
    see(page, f"Turn {n} · life {life} · steps {turn['first_step'] + 1}–{turn['last_step']} "
              f"(decided at step {turn['first_step']})")
    see(page, f"({respawn['x']}, {respawn['y']}) in life {life}")
    see(page, f"first frame of life {life} after step {turn['first_step']}")
    see(page, f"search · {len(ids)} episode(s) returned")
    captions = page.locator('[data-testid="stImageCaption"]').all_inner_texts()
    assert sorted(c.strip() for c in captions if c.strip() in returned) == sorted(returned)
    cap = f"{episode} · step {seen['step']}"
    see(page, f"{seen['name']} ({seen['x']}, {seen['y']}) at tile ({col}, {row})")
    img = image_with_caption(page, server, cap)
    factor = img.shape[1] // 64
    unit = (64 // 9) * factor
    frame = raw_frame(seen["step"])
    assert img.shape == (64 * factor, 64 * factor, 3)
    assert tuple(img[row * unit, col * unit + unit // 2]) == OUTLINE
    assert tuple(img[row * unit + unit // 2, col * unit]) == OUTLINE
    expected = np.repeat(np.repeat(frame, factor, axis=0), factor, axis=1)
    plain = np.any(img != OUTLINE, axis=-1) & np.any(img != FIND, axis=-1)
    assert plain.mean() > 0.8 and np.array_equal(img[plain], expected[plain])  # pixel-exact but for outlines
    see(page, f"write {write['seq']} · mine/GUIDE.md")
    assert ["added", added] in [[r[0], r[-1]] for r in table_rows(page) if r]
    see(page, f"{target['kind']} ({target['x']}, {target['y']}): new target")
    shot(page, f"turn_{n}", tall=5200)
    assert query(page)["turn"] == str(n)


def _pick(pg, label: str, option: str) -> None:
    box = pg.locator('[data-testid="stMultiSelect"]').filter(has_text=label).first
    box.click()
    pg.get_by_role("option", name=option, exact=True).first.click()
    pg.keyboard.press("Escape")
    settle(pg)


def test_failure_finder_to_world_aligned_diff(server, page) -> None:
    run_dir, ep, outcome = collect_failure(ROOT)
    key = run_dir.name
    deaths = {e["episode"]: e for e in jsonl(run_dir / "lives.jsonl") if e["event"] == "death"}
    index = jsonl(run_dir / "index.jsonl")
    failed = [r for r in index if r.get("outcome") in ("failed", "interrupted") or r["id"] in deaths]
    material = action_of(run_dir, ep)["args"]["material"]
    match = [r for r in failed if r["action_kind"] == "collect" and action_of(run_dir, r)["args"].get("material") ==
             material and ("death" if r["id"] in deaths else r["outcome"]) == outcome]
    assert ep in match
    after = deaths[ep["id"]]["step"] if outcome == "death" else ep["last_step"]
    before = after - 1

    page.goto(url(server, "failures", runs=key))
    settle(page, timeout=120)
    see(page, f"{len(failed)} of {len(failed)} failures and deaths match")
    _pick(page, "Action", "collect")
    _pick(page, "Material", material)
    _pick(page, "Outcome", outcome)
    see(page, f"{len(match)} of {len(failed)} failures and deaths match")
    assert {k: query(page).get(k) for k in ("act", "mat", "outcome")} == {
        "act": "collect", "mat": material, "outcome": outcome}
    page.locator('[data-testid="stSelectbox"]').filter(has_text="Open the filmstrip of").first.click()
    page.keyboard.type(ep["id"])
    page.keyboard.press("Enter")
    settle(page)
    see(page, f"step {before} · LAST BEFORE")
    see(page, f"step {after} · FAILURE STEP")
    assert query(page)["ep"] == ep["id"]
    captions = [c for c in page.locator('[data-testid="stImageCaption"]').all_inner_texts() if c.startswith("step ")]
    assert [int(c.split(" ")[1]) for c in captions] == strip_steps(run_dir, ep)
    shot(page, f"failures_{ep['id']}", tall=1800)

    page.get_by_text(f"Compare step {before} with step {after} in Frames (world-aligned)").first.click()
    settle(page, timeout=120)
    see(page, "Difference")
    q = query(page)
    assert q["frames"] == f"{key}:{before},{key}:{after}" and q["align"] == "1" and q["diff"] == "1"
    steps = {s["step"]: s for s in jsonl(run_dir / "steps.jsonl") if s["life"] == ep["life"]}
    dx, dy = steps[before]["x"] - steps[after]["x"], steps[before]["y"] - steps[after]["y"]
    a, b = stored_frame(run_dir, before).astype(int), stored_frame(run_dir, after).astype(int)
    assert (dx, dy) == (0, 0)
    changed = int((np.abs(a - b).max(axis=-1) > 8).sum())
    differ = int((np.abs(a - b).max(axis=-1) > 0).sum())
    see(page, f"{changed} px changed by more than 8 levels ({differ} differ at all)")
    see(page, f"world-aligned, shifted {dx:+d}, {dy:+d} tiles")
    shot(page, f"frames_world_aligned_{before}_{after}", tall=2600)


def test_retarget_map_labels_do_not_overlap(server, page) -> None:
    from dashboard import vega_charts

    run_dir, turn = crowded_turn(ROOT, vega_charts.LABEL_GAP)
    n = turn["turn"]
    inspected = {c["args"]["episode"] for c in turn["calls"] if c["tool"] == "inspect"}
    page.goto(url(server, "retargeting", runs=run_dir.name, turn=str(n)))
    settle(page, timeout=120)
    see(page, f"Open turn {n} in Turns")
    maps = [svg for svg in page.evaluate("""() => Array.from(document.querySelectorAll('[data-testid="stMain"] img'))
        .map(i => i.src).filter(s => s.startsWith('data:image/svg+xml;base64,')).map(s => atob(s.split(',')[1]))""")
            if "x (cells)" in svg]
    assert len(maps) == 1, "the retarget map is one SVG image, drawn in the server"
    drawn = page.context.new_page()
    drawn.set_content(maps[0])  # the same markup, inline, so that its text can be measured as Chromium draws it
    boxes = drawn.evaluate("""() => Array.from(document.querySelectorAll('.mark-text.role-mark text'))
        .map(t => { const b = t.getBoundingClientRect();
                    return [b.left, b.top, b.right, b.bottom, t.textContent]; })""")
    drawn.close()
    assert boxes, "the retarget map draws no label"
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], f"labels {a[4]} and {b[4]} overlap"
    assert len(boxes) < len(inspected)
    shot(page, f"retargeting_turn_{n}", tall=2600)

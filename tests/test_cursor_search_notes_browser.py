"""Issue 43, the rest, in a real browser: `mfm dashboard ROOT` driven by Playwright + headless
Chromium over a copy of the reach sample run. The time cursor moved on the Timeline with the
keyboard is where Frames, the Spatial grid and Memory open (each compared with the raw files);
a search for "diamond" lands on the turn that found one; a note made on a turn survives a
server restart and shows on the Turns page and in a figure's manifest. Every fact looked for
is read from the raw files (json, PIL, tests/raw*.py). Screenshots go to
test-artifacts/screenshots/ (MFM_SHOTS to change)."""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Iterator

import pytest

from conftest import REPO
from dash_browser import (checked_screenshot, dashboard, image_with_caption, needs_browser, no_exception, query, see,
                          settle, url)
from raw import jsonl, shrink, stored_frame
from raw_whole import episode_playing, memory_as_of, trace, turn_taking, turns_mentioning

pytestmark = [needs_browser, pytest.mark.browser, pytest.mark.slow]

REACH = "reach-1000_mfm_s0"
SHOTS = Path(os.environ.get("MFM_SHOTS", REPO / "test-artifacts" / "screenshots"))


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A runs root holding a copy of the reach run (notes are written under the root)."""
    out = tmp_path_factory.mktemp("root") / "runs"
    shutil.copytree(REPO / "sample_runs" / REACH, out / REACH)
    return out


@pytest.fixture(scope="module")
def server(root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with dashboard(root, tmp_path_factory.mktemp("log")) as base:
        yield base


def shot(pg, name: str, tall: int = 1600) -> None:
    checked_screenshot(pg, SHOTS / f"{name}.png", tall)


def nav(pg, title: str) -> None:
    """Open a page through the sidebar's navigation (the session keeps its state)."""
    links = pg.locator('[data-testid="stSidebarNav"] a').filter(has_text=title)
    if not links.first.is_visible():
        more = pg.locator('[data-testid="stSidebarNavViewButton"]')
        if more.count():
            more.first.click()
    links.first.click()
    settle(pg, timeout=120)
    no_exception(pg)


def wait_query(pg, name: str, value: str) -> None:
    """Wait until the URL's ``name`` is ``value`` (the page answered a step sent from the browser)."""
    deadline = time.time() + 60
    while time.time() < deadline:
        if query(pg).get(name) == value:
            return
        time.sleep(0.25)
    assert query(pg).get(name) == value, query(pg)


def press(pg, key: str, times: int) -> None:
    """Press ``key`` on the page itself (no field focused), as a user stepping the cursor."""
    pg.locator("h1").first.click()
    for _ in range(times):
        pg.keyboard.press(key)
        time.sleep(0.05)


def test_the_cursor_moved_on_the_timeline_opens_frames_grid_and_memory(server, root, page) -> None:
    run_dir = root / REACH
    steps = trace(run_dir)
    ep = next(r for r in jsonl(run_dir / "index.jsonl") if r["frames"] >= 6 and r["first_step"] > 900)
    page.goto(url(server, "timeline", runs=REACH, run=REACH, ep=ep["id"]))
    settle(page, timeout=120)
    start = ep["first_step"] + 1
    wait_query(page, "step", str(start))
    see(page, "Step (scrub the episode")
    press(page, "ArrowRight", 3)
    step, life = start + 3, ep["life"]
    wait_query(page, "step", str(step))
    settle(page)
    assert query(page)["life"] == str(life)
    shot(page, "cursor_timeline_moved", 2200)

    nav(page, "Frames")
    assert (query(page)["step"], query(page)["life"]) == (str(step), str(life))
    see(page, f"Showing the frame at the time cursor (step {step})")
    img = image_with_caption(page, server, "left to right as above")
    frame = stored_frame(run_dir, step)
    tile = frame.shape[1] // 9  # the magnified region is the 9 x 9 tiles of the frame
    crop = frame[:9 * tile, :9 * tile]
    assert (shrink(img, img.shape[0] // crop.shape[0]) == crop).all(), "the cursor's frame, pixel for pixel"
    shot(page, "cursor_frames", 1500)

    nav(page, "Spatial grid")
    t, e, at = turn_taking(run_dir, life, step), episode_playing(run_dir, life, step), steps[(step, life)]
    see(page, f"Time cursor: life {life} · step {step} · turn {t['turn']} · {e['id']} · at ({at['x']}, {at['y']})")
    shot(page, "cursor_grid", 1500)

    nav(page, "Memory")
    _, version, versions = memory_as_of(run_dir, "mine/GUIDE.md", step)
    see(page, f"mine/GUIDE.md as of step {step}: version {version} of {versions}")
    assert query(page)["asof"] == str(step)
    shot(page, "cursor_memory", 1500)
    press(page, "ArrowLeft", 1)
    wait_query(page, "step", str(step - 1))
    wait_query(page, "asof", str(step - 1))
    _, version, versions = memory_as_of(run_dir, "mine/GUIDE.md", step - 1)
    see(page, f"mine/GUIDE.md as of step {step - 1}: version {version} of {versions}")

    nav(page, "Turns")
    t = turn_taking(run_dir, life, step - 1)
    assert query(page)["turn"] == str(t["turn"])
    see(page, f"Turn {t['turn']} · life {life}")


def test_a_search_for_diamond_lands_on_its_turn(server, root, page) -> None:
    run_dir = root / REACH
    asked, found = turns_mentioning(run_dir, "diamond")
    turn = max(found)
    assert turn == 141
    t = next(x for x in jsonl(run_dir / "turns.jsonl") if x["turn"] == turn)
    page.goto(url(server, "search", runs=REACH, run=REACH))
    settle(page, timeout=120)
    box = page.get_by_label("Search the open runs")
    box.fill("diamond")
    box.press("Enter")
    settle(page, timeout=120)
    for n in asked:
        tn = next(x for x in jsonl(run_dir / "turns.jsonl") if x["turn"] == n)
        see(page, f"turn {n} · step {tn['first_step']} · search")
    shot(page, "search_diamond", 1800)
    page.get_by_text(f"turn {turn} · step {t['first_step']} · find").first.click()
    settle(page, timeout=120)
    no_exception(page)
    q = query(page)
    start = t["first_step"] + 1
    assert (q["turn"], q["life"], q["step"]) == (str(turn), str(t["life"]), str(start))
    see(page, f"Turn {turn} · life {t['life']} · steps {start}–{t['last_step']}")
    shot(page, "search_landed_turn_141", 1400)


def test_a_note_on_a_turn_survives_a_restart(root, page, tmp_path) -> None:
    run_dir = root / REACH
    turn = max(turns_mentioning(run_dir, "diamond")[1])
    words = f"Why retarget at turn {turn}? checked {time.time():.0f}"
    with dashboard(root, tmp_path) as base:
        page.goto(url(base, "turns", runs=REACH, run=REACH, turn=str(turn)))
        settle(page, timeout=120)
        page.get_by_text(f"Add a note or a bookmark on turn {turn}").first.click()
        page.get_by_label("Note", exact=True).fill(words)
        page.get_by_role("button", name="Save the note").click()
        settle(page, timeout=120)
        see(page, "Saved note")
    lines = [json.loads(x) for x in (root / ".mfm" / "notes" / "notes.jsonl").read_text().splitlines()]
    mine = [x for x in lines if x.get("text") == words]
    assert len(mine) == 1 and (mine[0]["run"], mine[0]["target"], mine[0]["turn"]) == (REACH, "turn", turn)
    assert mine[0]["author"] and mine[0]["time"]
    assert not any(".mfm" in str(p) for p in run_dir.rglob("*")), "nothing written inside the run"

    with dashboard(root, tmp_path) as base:
        page.goto(url(base, "turns", runs=REACH, run=REACH, turn=str(turn)))
        settle(page, timeout=120)
        see(page, words)
        shot(page, "notes_on_turn_after_restart", 1300)
        page.goto(url(base, "notes", runs=REACH, run=REACH))
        settle(page, timeout=120)
        see(page, words)
        shot(page, "notes_page", 1300)
        page.goto(url(base, "timeline", runs=REACH, run=REACH))
        settle(page, timeout=120)
        page.get_by_role("button", name="Export figure").click()
        with page.expect_download(timeout=120_000) as got:
            page.get_by_role("button", name="Manifest JSON").click()
        manifest = json.loads(Path(got.value.path()).read_text())
    listed = [n for n in manifest["notes"] if n["id"] == mine[0]["id"]]
    assert len(listed) == 1 and (listed[0]["text"], listed[0]["turn"], listed[0]["author"]) == (
        words, turn, mine[0]["author"])
    assert f"turn={turn}" in listed[0]["query"]


class Clicks:
    """Clicks made on a page, counted (keys pressed are not clicks)."""

    def __init__(self, pg) -> None:
        self.pg, self.n = pg, 0

    def on(self, locator) -> None:
        locator.click()
        self.n += 1
        settle(self.pg, timeout=120)
        no_exception(self.pg)

    def open_run(self, key: str) -> None:
        """The Runs page's *Open runs* picker: open it, pick ``key``."""
        self.on(self.pg.locator('[data-testid="stMultiSelect"]').filter(has_text="Open runs").first)
        self.on(self.pg.get_by_role("option").filter(has_text=key).first)
        self.pg.keyboard.press("Escape")

    def nav(self, title: str) -> None:
        self.on(self.pg.locator('[data-testid="stSidebarNav"] a').filter(has_text=title).first)


def test_the_two_jobs_in_clicks_from_the_runs_page(server, root, page) -> None:
    run_dir = root / REACH
    turns = sorted(jsonl(run_dir / "turns.jsonl"), key=lambda t: t["turn"])
    retargets = [t["turn"] for t in turns if any(not g.get("in_plan") for g in t["targets"])]
    want = next(n for n in retargets if n > turns[0]["turn"])
    page.goto(url(server, ""))
    settle(page, timeout=120)
    job = Clicks(page)
    job.open_run(REACH)
    job.nav("Turns")
    job.on(page.get_by_role("button", name="next retargeting turn →"))
    see(page, f"Turn {want} · life")
    assert query(page)["turn"] == str(want) and job.n == 4
    shot(page, "job_retarget_audit_4_clicks", 1400)

    failed = {r["id"] for r in jsonl(run_dir / "index.jsonl") if r.get("outcome") in ("failed", "interrupted")}
    page.goto(url(server, ""))
    settle(page, timeout=120)
    job = Clicks(page)
    job.open_run(REACH)
    job.nav("Failures")
    job.on(page.locator('[data-testid="stSelectbox"]').filter(has_text="Open the filmstrip of").first)
    job.on(page.get_by_role("option").first)
    ep = query(page)["ep"]
    assert ep in failed and job.n == 5
    see(page, "FAILURE STEP")
    shot(page, "job_failed_action_5_clicks", 1600)

"""Rich display in Jupyter (issue 20): a run, an episode, a turn and a memory file render as HTML
(``loaders.display``), and the frame scrubber widget (``loaders.scrubber``). Every expectation
is computed from the run's files read here directly (json, PIL), not through the loaders."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from html import escape
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from PIL import Image

from conftest import REPO
from dash_browser import stop_group
from raw import Page, decode, jsonl, shrink, stored_frame
from loaders.display import Episode, MemoryFile, Turn, enlarge, run_html
from loaders.run import open_run

SAMPLES = REPO / "sample_runs"
MFM = SAMPLES / "diamond_mfm_s2"
RUNS = sorted(p.name for p in SAMPLES.iterdir() if (p / "run.json").is_file())
INDEX = jsonl(MFM / "index.jsonl")
TURNS = sorted(jsonl(MFM / "turns.jsonl"), key=lambda t: t["turn"])
LIVES = sorted({s["life"] for s in jsonl(MFM / "steps.jsonl")})


def first_episode(fits: Callable[[dict], bool]) -> str:
    """The id of the first episode of diamond_mfm_s2 whose index row ``fits``."""
    return next(r["id"] for r in INDEX if fits(r))


def inspected_turn() -> int:
    """The first turn that searched, wrote memory and inspected episodes, each inspection
    finding something."""
    return next(t["turn"] for t in TURNS if any(c["tool"] == "search" for c in t["calls"])
                and any(c["tool"] == "write" for c in t["calls"])
                and [c for c in t["calls"] if c["tool"] == "inspect"]
                and all(c["result"].get("found") for c in t["calls"] if c["tool"] == "inspect"))


def last_inspecting_turn() -> int:
    """The last turn that inspected episodes and did not start a life (a respawn step's frame
    is the previous life's, so such a turn has no frame of its first step)."""
    respawns = {(e["life"], e["step"]) for e in jsonl(MFM / "lives.jsonl") if e["event"] == "respawn"}
    return [t["turn"] for t in TURNS if any(c["tool"] == "inspect" for c in t["calls"])
            and (t["life"], t["first_step"]) not in respawns][-1]


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    """A copy of diamond_mfm_s2 whose run strings carry HTML: a milestone name, an episode
    summary and event, a turn's state block and a memory write's reason."""
    run = tmp_path / "hostile"
    shutil.copytree(MFM, run)
    p = run / "milestones.jsonl"
    rows = jsonl(p)
    rows[0]["name"] = "<script>alert('m')</script>"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    p = run / "index.jsonl"
    rows = jsonl(p)
    rows[45]["summary"] = '<img src=x onerror="alert(1)">'
    rows[45]["events"] = ["<marquee>moving</marquee>"]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    p = run / "turns.jsonl"
    rows = jsonl(p)
    t = next(r for r in rows if r["turn"] == inspected_turn())
    t["note"] = "</pre><script>alert('t')</script>"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    p = run / "memory_writes.jsonl"
    rows = jsonl(p)
    for r in rows:
        if r["turn"] == inspected_turn():
            r["reason"] = "<iframe src=javascript:alert(2)>"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return run


# --- a run ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", RUNS)
def test_run_shows_its_header_and_the_milestones_of_its_file(name):
    """Every row of milestones.jsonl is a row of the run's milestone table (name, step, life,
    episode, turn); the task's milestones not reached follow with no step; the header names the
    method, the seed and the status of run.json."""
    run_dir = SAMPLES / name
    manifest = json.loads((run_dir / "run.json").read_text())
    reached = jsonl(run_dir / "milestones.jsonl")
    page = Page(run_html(open_run(run_dir)))
    rows = page.tables[0]
    assert rows[0] == ["name", "step", "life", "episode", "turn"]
    body = rows[1:]
    expect = [[m["name"], str(m["step"]), str(m["life"]), m.get("episode") or "",
               "" if m.get("turn") is None else str(m["turn"])] for m in reached]
    assert sorted(body[:len(reached)]) == sorted(expect)
    missing = [n for n in manifest["milestone_order"] if n not in {m["name"] for m in reached}]
    assert [r[0] for r in body[len(reached):]] == missing and all(r[1] == "" for r in body[len(reached):])
    html = run_html(open_run(run_dir))
    for value in (manifest["method"], f"seed {manifest['seed']}", manifest["status"], manifest["task"]):
        assert str(value) in html
    from mfm.validate import validate

    assert f"problems {len(validate(run_dir).problems)} " in html  # a number, from the core's own reader
    text = repr(open_run(run_dir))
    got = sum(1 for n in manifest["milestone_order"] if n in manifest["milestones"])
    assert f"{got}/{len(manifest['milestone_order'])} milestones" in text and name in text
    assert f"step {manifest['last_step']}/{manifest['step_budget']}" in text


def test_a_run_renders_itself_in_jupyter():
    """The Run object carries the HTML repr IPython looks for."""
    from IPython.core.formatters import DisplayFormatter

    run = open_run(MFM)
    data, _ = DisplayFormatter().format(run)
    assert data["text/html"] == run_html(run) and data["text/plain"] == repr(run)


# --- an episode ------------------------------------------------------------------------------------

@pytest.mark.parametrize("ep_id, max_frames, scale", [
    (first_episode(lambda r: 8 < r.get("frames", 0) <= 64), 8, 3),
    (first_episode(lambda r: 1 < r.get("frames", 0) < 16), 16, 2),
    (first_episode(lambda r: r.get("frames", 0) > 64), 5, 4)])
def test_episode_strip_is_the_stored_frames_enlarged(ep_id, max_frames, scale):
    """Each image of the strip is a stored frame (cut from its WebP strip here) enlarged by the
    integer factor with nearest neighbour: size = frame size × scale, pixels equal; the strip
    spans the episode's steps evenly, first and last frame included. The episodes: more frames
    than shown in one strip file, fewer frames than may be shown, frames in two strip files."""
    row = next(r for r in jsonl(MFM / "index.jsonl") if r["id"] == ep_id)
    page = Page(Episode(open_run(MFM), ep_id, max_frames=max_frames, scale=scale)._repr_html_())
    shown = min(max_frames, row["frames"])
    assert len(page.images) == shown
    steps = [int(i["title"].split()[-1]) for i in page.images]
    assert steps[0] == row["first_step"] + 1 and steps[-1] == row["last_step"] and steps == sorted(set(steps))
    for im, step in zip(page.images, steps):
        pixels = decode(im["src"])
        frame = stored_frame(MFM, step)
        assert pixels.shape[:2] == (frame.shape[0] * scale, frame.shape[1] * scale)
        assert (int(im["width"]), int(im["height"])) == (frame.shape[1] * scale, frame.shape[0] * scale)
        assert np.array_equal(shrink(pixels, scale), frame)
    html = Episode(open_run(MFM), ep_id)._repr_html_()
    assert row["summary"].split("(")[0] in html and (row.get("outcome") or "") in html


def test_episode_without_frames_shows_its_end_observation():
    """An action that failed without a step recorded no per-step frame: its end observation
    (observation/image.png) is shown instead, pixel-exact."""
    row = next(r for r in INDEX if not r.get("frames") and r.get("outcome") == "failed" and r.get("image"))
    page = Page(Episode(open_run(MFM), row["id"], scale=2)._repr_html_())
    assert len(page.images) == 1
    expected = np.asarray(Image.open(MFM / row["image"]).convert("RGB"))
    assert np.array_equal(shrink(decode(page.images[0]["src"]), 2), expected)
    assert "failed" in repr(Episode(open_run(MFM), row["id"]))


def test_an_unknown_episode_or_turn_says_so():
    run = open_run(MFM)
    assert "no episode ep_999999" in Episode(run, "ep_999999")._repr_html_()
    assert "no turn 9999" in repr(Turn(run, 9999)) and "no turn 9999" in Turn(run, 9999)._repr_html_()


# --- a turn ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("number", [inspected_turn(), last_inspecting_turn(), TURNS[0]["turn"]])
def test_turn_shows_search_inspections_writes_plan_and_targets(number):
    """The turn view holds, from turns.jsonl and memory_writes.jsonl read here: every episode
    id a search returned, every inspected episode and the names of what it found, every memory
    write of the turn (seq and reason), the plan after the turn and its new targets; its first
    frame is the frame of the turn's first step, enlarged ×2. The turns: the first and the last
    that inspected episodes, and the first."""
    turn = next(t for t in jsonl(MFM / "turns.jsonl") if t["turn"] == number)
    run = open_run(MFM)
    html = Turn(run, number)._repr_html_()
    page = Page(html)
    for call in turn["calls"]:
        if call["tool"] == "search":
            assert all(i in html for i in call["result"]["ids"])
        if call["tool"] == "inspect":
            assert call["args"]["episode"] in html
            assert all(f["name"] in html for f in call["result"].get("found", []))
    writes = [w for w in jsonl(MFM / "memory_writes.jsonl") if w["turn"] == number]
    table = next(t for t in page.tables if t and t[0][:3] == ["seq", "step", "path"])
    assert [(r[0], r[5]) for r in table[1:]] == [(str(w["seq"]), w["reason"]) for w in writes]
    for p in turn["plan_after"]:
        assert f"({p['x']}, {p['y']}) {p['label']}" in html
    new = [g for g in turn["targets"] if not g.get("in_plan")]
    targets = next(t for t in page.tables if t and "kind" in t[0] and "x" in t[0])
    assert [(r[targets[0].index("x")], r[targets[0].index("y")]) for r in targets[1:]] == \
        [(str(g["x"]), str(g["y"])) for g in new or turn["targets"]]
    first = page.images[0]
    assert first["title"] == f"had · step {turn['first_step']}"
    if turn["first_step"] > 0:
        assert np.array_equal(shrink(decode(first["src"]), 2), stored_frame(MFM, turn["first_step"]))
    text = repr(Turn(run, number))
    assert f"Turn {number} of diamond_mfm_s2" in text and all(w["path"] in text for w in writes)


def test_turn_frames_show_what_was_inspected():
    """Beside the frame the agent had, the frames its inspections opened (the step of the
    first thing each saw), pixel-exact."""
    turn = next(t for t in TURNS if t["turn"] == inspected_turn())
    inspects = [c for c in turn["calls"] if c["tool"] == "inspect"]
    page = Page(Turn(open_run(MFM), turn["turn"])._repr_html_())
    assert len(page.images) == 1 + len(inspects)
    for im, call in zip(page.images[1:], inspects):
        step = min(f["step"] for f in call["result"]["found"])
        assert im["title"] == f"inspected {call['args']['episode']} · step {step}"
        assert np.array_equal(shrink(decode(im["src"]), 2), stored_frame(MFM, step))


# --- a memory file ---------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["mine/GUIDE.md", "mine/working.md"])
def test_memory_file_at_the_end_is_the_file_on_disk(path):
    """Rebuilt from the history as of the end, the file is the one in mine/; its HTML lists
    every line of it in order, each with a writer."""
    on_disk = (MFM / path).read_text(encoding="utf-8")
    mf = MemoryFile(open_run(MFM), path)
    assert mf.text == on_disk
    assert repr(mf).split("\n", 1)[1] == on_disk
    rows = Page(mf._repr_html_()).tables[0]
    assert rows[0] == ["line", "text", "step", "author", "reason", "sources"]
    assert [r[1] for r in rows[1:]] == [line.strip() for line in on_disk.splitlines()]
    writes = [w for w in jsonl(MFM / "memory_writes.jsonl") if w["path"] == path]
    assert all(r[3] in {w["author"] for w in writes} for r in rows[1:])
    assert f"{len(writes)} write(s)" in mf._repr_html_()


def test_memory_file_as_of_a_step_counts_the_writes_until_then():
    writes = [w for w in jsonl(MFM / "memory_writes.jsonl") if w["path"] == "mine/GUIDE.md"]
    step = writes[len(writes) // 2]["step"]
    mf = MemoryFile(open_run(MFM), "mine/GUIDE.md", step)
    assert f"{sum(w['step'] <= step for w in writes)} write(s)" in mf._repr_html_()
    assert max(int(r[2]) for r in Page(mf._repr_html_()).tables[0][1:]) <= step
    assert "not written yet" in repr(MemoryFile(open_run(MFM), "mine/GUIDE.md", -1))


def test_missing_frames_are_named_not_raised(tmp_path):
    """An episode whose frame strips are gone: its repr and the scrubber say which file is
    missing instead of raising; the rest of the episode still shows."""
    from loaders.scrubber import scrubber

    life = LIVES[1]
    row = next(r for r in INDEX if r["life"] == life and r.get("frames", 0) >= 2)
    inside = row["first_step"] + 1 + row["frames"] // 2
    later = next(r["first_step"] + 1 for r in INDEX if r["life"] == life and r.get("frames")
                 and r["first_step"] >= row["last_step"])
    run_dir = tmp_path / "damaged"
    shutil.copytree(MFM, run_dir)
    shutil.rmtree(run_dir / row["path"] / "frames")
    run = open_run(run_dir)
    html = Episode(run, row["id"])._repr_html_()
    assert "frames unavailable" in html and "00000.webp" in html and escape(row["summary"]) in html
    w = scrubber(run, life=life, step=inside)
    assert w.step == inside and w.frame == "" and "frame unavailable" in w.caption
    w.step = later
    assert np.array_equal(shrink(decode(w.frame), 4), stored_frame(MFM, later))


# --- untrusted strings ---------------------------------------------------------------------------

def test_strings_from_a_run_are_escaped(hostile):
    """HTML in a milestone name, an episode summary or event, a turn's state block or a memory
    write's reason shows as text: no tag from the run reaches the page."""
    run = open_run(hostile)
    pages = {"run": run._repr_html_(), "episode": Episode(run, "ep_000045")._repr_html_(),
             "turn": Turn(run, inspected_turn())._repr_html_(),
             "memory": MemoryFile(run, "mine/GUIDE.md", 90)._repr_html_()}
    for name, html in pages.items():
        tags = set(Page(html).tags)
        assert not tags & {"script", "iframe", "marquee"}, name
        assert all(i["src"].startswith("data:image/png;base64,") for i in Page(html).images), name
    assert "&lt;script&gt;alert(&#x27;m&#x27;)&lt;/script&gt;" in pages["run"]
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in pages["episode"]
    assert "&lt;/pre&gt;&lt;script&gt;" in pages["turn"] and "&lt;iframe" in pages["turn"]
    assert "&lt;marquee&gt;" in pages["episode"]


def test_sql_results_render_as_an_escaped_bounded_table(hostile):
    """``run.sql(...)`` renders itself (DuckDB's HTML repr): escaped, and cut to a few rows."""
    rel = open_run(hostile).sql("select id, summary from episodes where id >= 'ep_000044' order by id")
    bundle = rel._repr_mimebundle_()
    html = bundle["text/html"] if isinstance(bundle, dict) else bundle[0]["text/html"]
    page = Page(html)
    assert "img" not in page.tags and "&lt;img src=x" in html
    rows = page.tables[0]
    assert rows[0][0].startswith("id") and [r[0] for r in rows[1:3]] == ["ep_000044", "ep_000045"]
    assert 1 < len(rows) - 1 < len(jsonl(hostile / "index.jsonl")) - 44


# --- the scrubber ----------------------------------------------------------------------------------

def life_steps(run_dir: Path, life: int) -> list[dict]:
    return sorted((s for s in jsonl(run_dir / "steps.jsonl") if s["life"] == life), key=lambda s: s["step"])


@pytest.mark.parametrize("life", sorted({LIVES[0], LIVES[1], LIVES[-1]}))
def test_scrubber_steps_through_a_life_with_position_and_turn(life):
    """The scrubber's steps are the life's steps of steps.jsonl; at each step shown it has
    that step's stored frame enlarged, the position and action of the trace, and the turn
    of turns.jsonl whose steps hold it; frames are decoded one at a time, when shown."""
    from loaders.scrubber import scrubber

    trace = life_steps(MFM, life)
    turns = [t for t in jsonl(MFM / "turns.jsonl") if t["life"] == life]
    w = scrubber(open_run(MFM), life=life, scale=3)
    assert w.frames.steps == [s["step"] for s in trace] and w.count == len(trace)
    assert w.decoded == 1 and w.index == 0
    for k, i in enumerate((0, len(trace) // 3, len(trace) - 1, 5)):
        if k:
            w.index = i
        s = trace[i]
        assert np.array_equal(shrink(decode(w.frame), 3), stored_frame(MFM, s["step"]))
        assert (w.width, w.height) == (64 * 3, 64 * 3)
        assert f"step {s['step']} · life {life} · {s['episode']} · at ({s['x']}, {s['y']})" in w.caption
        assert f"action {s['action']}" in w.caption and f"h{s['health']}" in w.caption
        owner = [t for t in turns if t["first_step"] < s["step"] <= t["last_step"]]
        assert w.turn.startswith(f"turn {owner[0]['turn']} ") if owner else w.turn == "no turn recorded for this step"
        assert w.decoded == 1 + k
    w.step = trace[10]["step"]
    assert w.index == 10
    w.index = 10 ** 6
    assert w.index == len(trace) - 1
    w.index = -5
    assert w.index == 0


def test_scrubber_starts_at_a_step_and_shows_a_still_without_a_widget_manager():
    """The bundle holds the widget view and, for viewers without widgets, the current frame
    as a pixel-exact still."""
    from loaders.scrubber import scrubber

    trace = life_steps(MFM, LIVES[-1])
    step = trace[len(trace) // 2]["step"]
    w = scrubber(open_run(MFM), life=LIVES[-1], step=step, scale=2)
    assert w.step == step
    bundle = w._repr_mimebundle_()
    data = bundle[0] if isinstance(bundle, tuple) else bundle
    assert data["application/vnd.jupyter.widget-view+json"]["model_id"] == w.model_id
    page = Page(data["text/html"])
    assert np.array_equal(shrink(decode(page.images[0]["src"]), 2), stored_frame(MFM, step))
    assert f"step {step}" in data["text/plain"]


def test_scrubber_refuses_a_life_without_frames():
    from loaders.scrubber import scrubber

    with pytest.raises(ValueError, match="life 9 has no frames"):
        scrubber(open_run(MFM), life=9)


def test_scrubber_without_the_notebook_extra_names_it(monkeypatch):
    """Without anywidget the scrubber says which extra to install; the loaders still import."""
    from loaders import scrubber as sc

    sc.widget_class.cache_clear()
    monkeypatch.setitem(sys.modules, "anywidget", None)
    try:
        with pytest.raises(ImportError, match=r'pip install "mfm\[notebook\]"'):
            sc.scrubber(open_run(MFM))
    finally:
        sc.widget_class.cache_clear()


def test_display_and_scrubber_import_no_jupyter_library():
    """Importing the display and scrubber modules loads no widget or IPython library (the
    widget is built on first use)."""
    code = ("import sys, loaders.display, loaders.scrubber, loaders.run; "
            "print(sorted(m for m in ('anywidget', 'ipywidgets', 'IPython', 'traitlets') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_enlarge_refuses_a_fractional_factor():
    with pytest.raises(ValueError):
        enlarge(np.zeros((2, 2, 3), np.uint8), 1.5)
    assert enlarge(np.arange(4, dtype=np.uint8).reshape(2, 2), 2).tolist() == [[0, 0, 1, 1], [0, 0, 1, 1],
                                                                               [2, 2, 3, 3], [2, 2, 3, 3]]


# --- the scrubber in JupyterLab (real server, kernel and browser) -------------------------------------

def frame_on_page(pg) -> np.ndarray:
    return decode(pg.get_attribute(".mfm-scrubber img", "src"))


def shown_step(pg) -> int:
    return int(pg.inner_text(".mfm-scrubber .mfm-caption").split(" · ")[0].split()[1])


@pytest.mark.browser
@pytest.mark.slow
def test_scrubber_in_jupyterlab(tmp_path):
    """JupyterLab (its anywidget extension, no build step) shows the scrubber from a real kernel:
    the frame of the life's first step, pixel-exact at ×4; → and Shift+→ step by one and ten,
    End and Home jump, Space plays (frames keep coming from the kernel) and pauses."""
    import os
    import time
    import urllib.request

    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook
    from playwright.sync_api import sync_playwright

    from dash_browser import ARGS, CHROMIUM, SHOTS, free_port

    trace = [s["step"] for s in life_steps(MFM, 1)]
    root = tmp_path / "lab"
    root.mkdir()
    nbformat.write(new_notebook(cells=[new_code_cell(
        f"from loaders import open_run\nfrom loaders.scrubber import scrubber\n"
        f"scrubber(open_run({str(MFM)!r}), life=1, scale=4, fps=20)")], metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}), root / "scrub.ipynb")
    port = free_port()
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "JUPYTER_CONFIG_DIR": str(tmp_path / "cfg")}
    argv = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
            "--IdentityProvider.token=scrub", f"--ServerApp.root_dir={root}", "--LabApp.news_url="]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        argv.append("--allow-root")
    log = open(tmp_path / "lab.log", "w+")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 180  # a guard against a hang, generous for a loaded machine
        while time.time() < deadline and proc.poll() is None:
            try:
                urllib.request.urlopen(f"{base}/api/status?token=scrub", timeout=2)
                break
            except OSError:
                time.sleep(0.3)
        else:
            log.seek(0)
            pytest.fail(f"JupyterLab did not start:\n{log.read()}")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            pg = browser.new_page(viewport={"width": 1300, "height": 900})
            pg.set_default_timeout(120_000)
            pg.goto(f"{base}/lab/tree/scrub.ipynb?token=scrub")
            pg.wait_for_selector("text=Python 3 (ipykernel) | Idle")
            pg.click(".jp-Notebook .jp-Cell .jp-InputArea-editor")
            pg.keyboard.press("Shift+Enter")
            pg.wait_for_selector(".mfm-scrubber img")
            pg.wait_for_function("document.querySelector('.mfm-scrubber img').naturalWidth > 0")
            assert shown_step(pg) == trace[0]
            assert np.array_equal(shrink(frame_on_page(pg), 4), stored_frame(MFM, trace[0]))
            assert pg.evaluate("document.querySelector('.mfm-scrubber img').width") == 256

            def press(key: str, index: int) -> None:
                pg.keyboard.press(key)
                pg.wait_for_function(f"document.querySelector('.mfm-scrubber .mfm-caption').textContent"
                                     f".startsWith('step {trace[index]} ')")
                assert np.array_equal(shrink(frame_on_page(pg), 4), stored_frame(MFM, trace[index]))
                assert pg.inner_text(".mfm-scrubber .mfm-bar span").strip() == f"{index + 1} / {len(trace)}"

            pg.click(".mfm-scrubber img")
            press("ArrowRight", 1)
            press("Shift+ArrowRight", 11)
            press("End", len(trace) - 1)
            press("Home", 0)
            pg.keyboard.press(" ")
            pg.wait_for_function("Number(document.querySelector('.mfm-scrubber .mfm-bar span').textContent"
                                 ".trim().split(' ')[0]) >= 6")
            pg.keyboard.press(" ")
            pg.wait_for_function("document.querySelector('.mfm-scrubber button').textContent.includes('play')")
            index = int(pg.inner_text(".mfm-scrubber .mfm-bar span").split("/")[0]) - 1
            pg.wait_for_function(f"document.querySelector('.mfm-scrubber .mfm-caption').textContent"
                                 f".startsWith('step {trace[index]} ')")
            assert np.array_equal(shrink(frame_on_page(pg), 4), stored_frame(MFM, trace[index]))
            SHOTS.mkdir(parents=True, exist_ok=True)
            pg.screenshot(path=str(SHOTS / "scrubber_jupyterlab.png"))
            browser.close()
    finally:
        stop_group(proc, 30)
        log.close()


def death_episode() -> str:
    """The first episode that ended in a death and stored frames."""
    deaths = {e["episode"] for e in jsonl(MFM / "lives.jsonl") if e["event"] == "death"}
    return first_episode(lambda r: r["id"] in deaths and r.get("frames"))


def after_long_episode() -> str:
    """The first episode with frames after the first one stored in two strip files or more."""
    long = first_episode(lambda r: r.get("frames", 0) > 64)
    return first_episode(lambda r: r["id"] > long and r.get("frames"))


@pytest.mark.parametrize("ep_id", [first_episode(lambda r: r.get("frames", 0) > 64), after_long_episode(),
                                   death_episode()])
def test_the_dashboard_scrubber_sends_the_stored_frames_and_the_steps_trace(ep_id):
    """``episode_scrub`` (what the Timeline's in-browser scrubber gets): one PNG per step, the
    pixels cut from the episode's WebP strips, and per step the position, action, vitals and
    inventory of that step's row of ``steps.jsonl``, read here with ``json``. The episodes: the
    first with frames in two strip files, the next with frames, the first that ended in a death."""
    from loaders.scrubber import episode_scrub

    run_dir = SAMPLES / "diamond_mfm_s2"
    row = next(r for r in jsonl(run_dir / "index.jsonl") if r["id"] == ep_id)
    first, frames, captions = episode_scrub(open_run(run_dir), ep_id)
    steps = list(range(row["first_step"] + 1, row["first_step"] + row["frames"] + 1))
    assert first == steps[0] and len(frames) == len(captions) == len(steps)
    trace = {(t["step"], t["life"]): t for t in jsonl(run_dir / "steps.jsonl")}
    for step, uri, lines in zip(steps, frames, captions):
        assert np.array_equal(decode(uri), stored_frame(run_dir, step))
        t = trace[(step, row["life"])]
        assert lines[0] == f"Step {step}"
        assert f"at ({t['x']}, {t['y']}) · action {t['action']} · h{t['health']} f{t['food']} d{t['drink']}" in lines[1]
        held = sorted(f"{k} {v}" for k, v in t["inventory"].items() if v)
        assert lines[2] == "inventory: " + (", ".join(held) or "empty")

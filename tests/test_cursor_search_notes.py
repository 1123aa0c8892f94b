"""Issue 43, the rest: the run-wide time cursor (``loaders.cursor``), search (``loaders.search``)
and the researcher's notes (``loaders.notes``), without a browser. Every fact checked is worked
out from the run's raw files here (json, tests/raw_whole.py), never through the loaders; the
pages are driven through Streamlit's AppTest on copies of the sample runs."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import REPO, grid_map, grid_marks, open_app, texts, use_root
from raw import jsonl, sample_runs
from raw_whole import episode_playing, memory_as_of, trace, turn_taking, turns_mentioning
from loaders import cursor as cur
from loaders import notes
from loaders import search as sr
from loaders.run import open_run
from mfm.boundary import UnsafePath

SAMPLES = REPO / "sample_runs"
REACH = "reach-1000_mfm_s0"


@pytest.fixture()
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A runs root holding a copy of the reach run (notes are written under the root)."""
    out = tmp_path / "runs"
    shutil.copytree(SAMPLES / REACH, out / REACH)
    use_root(monkeypatch, out)
    return out


# The time cursor


def test_turn_and_episode_at_every_step_match_the_files() -> None:
    for run_dir in sample_runs(SAMPLES)[:3]:
        run = open_run(run_dir)
        steps = sorted(trace(run_dir))
        for step, life in steps[::17] + steps[-3:]:
            c = cur.Cursor(life, step)
            want = turn_taking(run_dir, life, step)
            got = cur.turn_at(run, c)
            assert (got.turn if got else None) == (want["turn"] if want else None), (run_dir.name, step)
            ep = episode_playing(run_dir, life, step)
            got_ep = cur.episode_at(run, c)
            assert (got_ep.id if got_ep else None) == (ep["id"] if ep else None), (run_dir.name, step)
            if want:
                assert cur.turn_contains(got, c)


def test_a_turn_puts_the_cursor_on_its_first_action() -> None:
    run_dir = SAMPLES / REACH
    run = open_run(run_dir)
    for t in jsonl(run_dir / "turns.jsonl")[::25]:
        c = cur.turn_start(next(r for r in run.records("turns.jsonl") if r.turn == t["turn"]))
        assert (c.life, c.step) == (t["life"], t["first_step"] + 1 if t["last_step"] > t["first_step"]
                                    else t["first_step"])
        assert cur.turn_at(run, c).turn == t["turn"] or t["last_step"] == t["first_step"]


def test_url_values_of_the_cursor_are_checked() -> None:
    run_dir = SAMPLES / "diamond_mfm_s2"
    run = open_run(run_dir)
    steps = trace(run_dir)
    lives = sorted({life for _, life in steps})
    step, life = max(steps)
    got, problems = cur.parse(run, None, str(step))
    assert got == cur.Cursor(life, step) and not problems
    got, problems = cur.parse(run, "x", "abc")
    assert got is None and problems == ["step = 'abc' is not a whole number: dropped"]
    got, problems = cur.parse(run, str(max(lives) + 7), str(step))
    assert got == cur.Cursor(life, step) and f"life = {max(lives) + 7} is no life" in problems[0]
    first = min(s for s, lv in steps if lv == lives[0])
    got, problems = cur.parse(run, str(lives[-1]), str(first))
    last_first = min([s for s, lv in steps if lv == lives[-1]]
                     + [r["first_step"] for r in jsonl(run_dir / "index.jsonl") if r["life"] == lives[-1]])
    assert got == cur.Cursor(lives[-1], last_first) and "moved to" in problems[0]
    assert cur.parse(run, "0", None) == (None, [])


def test_who_wins_between_a_page_target_and_the_cursor() -> None:
    assert cur.follow(True, False, False) == "target"
    assert cur.follow(True, True, False) == "cursor"
    assert cur.follow(False, False, False) == "cursor"
    assert cur.follow(False, True, True) == "both"


def test_pages_follow_a_cursor_from_the_url(root: Path) -> None:
    run_dir = root / REACH
    step = max(s for s, _ in trace(run_dir)) - 20
    life = next(lv for s, lv in trace(run_dir) if s == step)
    t = turn_taking(run_dir, life, step)
    ep = episode_playing(run_dir, life, step)
    at = open_app("turns", runs=REACH, run=REACH, step=str(step))
    assert (at.query_params["turn"], at.query_params["life"]) == (str(t["turn"]), str(life))
    assert f"Turn {t['turn']} · life {life}" in texts(at)
    at = open_app("timeline", runs=REACH, run=REACH, step=str(step))
    assert at.query_params["ep"] == ep["id"]
    _, version, versions = memory_as_of(run_dir, "mine/GUIDE.md", step)
    at = open_app("memory", runs=REACH, run=REACH, step=str(step))
    assert at.query_params["asof"] == str(step)
    assert f"as of step {step}: version {version} of {versions}" in texts(at)
    at = open_app("provenance", runs=REACH, run=REACH, step=str(step))
    assert at.toggle(key="w_prov_upto").label == f"Up to the time cursor (step {step})"
    assert any(c.value.startswith("Steps ") and f"–{step}: " in c.value for c in at.caption)
    at = open_app("grid", runs=REACH, run=REACH, step=str(step))
    assert f"Time cursor: life {life} · step {step} · turn {t['turn']} · {ep['id']}" in texts(at)
    drawn = grid_map(at)
    here = trace(run_dir)[(step, life)]
    assert drawn["here"] == [here["x"], here["y"], step, life]
    assert (here["x"], here["y"], "time cursor") in grid_marks(drawn)
    path = drawn["paths"]
    assert max(path["step"]) <= step and set(path["life"]) == {life}, "the path up to the cursor"
    at = open_app("turns", runs=REACH, run=REACH, turn=str(t["turn"] - 3), step=str(step))
    assert at.query_params["turn"] == str(t["turn"]), "a named step outside the named turn: the cursor wins"
    at = open_app("turns", runs=REACH, run=REACH, step="nope")
    assert any("step = 'nope' is not a whole number: dropped" in w.value for w in at.warning)


# Search


def test_search_finds_what_the_files_say() -> None:
    run_dir = SAMPLES / REACH
    hits = sr.search(open_run(run_dir), "diamond")
    asked, found = turns_mentioning(run_dir, "diamond")
    assert sorted(hits.loc[hits["kind"] == "search query", "turn"].unique()) == asked
    assert sorted(hits.loc[hits["kind"] == "inspection find", "turn"].unique()) == found
    assert 141 in found and 141 in asked
    summaries = {r["id"] for r in jsonl(run_dir / "index.jsonl") if "diamond" in r["summary"].lower()}
    assert set(hits.loc[hits["kind"] == "episode summary", "episode"]) == summaries
    for h in hits[hits["kind"].isin(["search query", "inspection find", "decision"])].itertuples():
        t = next(t for t in jsonl(run_dir / "turns.jsonl") if t["turn"] == h.turn)
        start = t["first_step"] + 1 if t["last_step"] > t["first_step"] else t["first_step"]
        assert (h.page, h.query) == ("turns", f"turn={t['turn']}&life={t['life']}&step={start}")
    notes_written = [w for w in jsonl(run_dir / "memory_writes.jsonl") if w["path"] == "mine/GUIDE.md"]
    for h in hits[hits["kind"] == "note"].itertuples():
        line = h.text.split(": ", 1)[1]
        assert any(line in (w.get("snapshot") or "") + json.dumps(w.get("diff")) + w["reason"]
                   for w in notes_written if w["turn"] == h.turn), h.text


def test_search_words_phrases_kinds_and_bad_input() -> None:
    run = open_run(SAMPLES / REACH)
    assert sr.words('iron "stone pickaxe"  Coal') == ["iron", "stone pickaxe", "coal"]
    assert len(sr.search(run, "   ")) == 0
    both = sr.search(run, "diamond coal")
    assert len(both) and all("diamond" in t.lower() and "coal" in t.lower() for t in both["text"])
    only = sr.search(run, "diamond", kinds=["inspection find"])
    assert set(only["kind"]) == {"inspection find"}
    with pytest.raises(ValueError, match="'finds'"):
        sr.search(run, "diamond", kinds=["finds"])
    assert sr.link({"page": "turns", "query": "turn=141&life=0&step=1027"}, REACH) == \
        f"turns?runs={REACH}&run={REACH}&turn=141&life=0&step=1027"


# Notes


def test_a_note_is_one_json_line_outside_every_run(root: Path) -> None:
    before = {p: p.stat().st_mtime_ns for p in (root / REACH).rglob("*")}
    n = notes.add(root, run=REACH, target="turn", turn=141, text="retargets to the diamond it saw", by="ana")
    r = notes.add(root, run=REACH, target="region", life=0, step=1030, region=(2, 5, 1, 4), kind="bookmark", by="bo")
    lines = [json.loads(x) for x in (root / ".mfm" / "notes" / "notes.jsonl").read_text().splitlines()]
    first = lines[0]
    assert (first["id"], first["author"], first["target"], first["turn"], first["text"]) == \
        (n.id, "ana", "turn", 141, "retargets to the diamond it saw")
    assert lines[1]["region"] == [2, 5, 1, 4] and lines[1]["kind"] == "bookmark" and lines[1]["time"]
    assert {p: p.stat().st_mtime_ns for p in (root / REACH).rglob("*")} == before, "nothing written in the run"
    got = notes.read(root)
    assert [x.id for x in got.notes] == [n.id, r.id] and not got.problems
    assert r.query() == f"frames={REACH}%3A1030&region=2%2C1%2C5%2C4&life=0&step=1030&note={r.id}"
    notes.retract(root, n.id, by="ana")
    assert [x.id for x in notes.read(root).notes] == [r.id]
    assert len((root / ".mfm" / "notes" / "notes.jsonl").read_text().splitlines()) == 3, "append-only"
    assert notes.at(notes.read(root).notes, REACH, life=0, lo=1027, hi=1056) == notes.read(root).notes


def test_a_bad_line_names_the_file_and_line(root: Path) -> None:
    notes.add(root, run=REACH, target="run", text="fine")
    with open(root / ".mfm" / "notes" / "notes.jsonl", "a") as f:
        f.write('{"id": "x", "time": "t", "author": "a", "run": "r", "target": "turn", "text": "no turn"}\n')
        f.write("not json\n")
        f.write('{"id": "y", "time": "t", "author": "a", "run": "r", "target": "step", "life": 0, "step": "9", '
                '"text": "t"}\n')
    got = notes.read(root)
    assert [n.text for n in got.notes] == ["fine"]
    assert got.problems == [".mfm/notes/notes.jsonl:2: a note on a turn needs turn",
                            ".mfm/notes/notes.jsonl:3: not JSON (Expecting value at column 1)",
                            ".mfm/notes/notes.jsonl:4: step must be a whole number or null, not '9'"]
    with pytest.raises(notes.NotesError, match=r"notes\.jsonl:2: "):
        notes.read(root, strict=True)
    with pytest.raises(notes.NotesError, match="region"):
        notes.add(root, run=REACH, target="region", life=0, step=3, region=(0, 12, 0, 2), text="x")
    with pytest.raises(notes.NotesError, match="needs turn"):
        notes.add(root, run=REACH, target="turn", text="x")


@pytest.mark.parametrize("where", [".mfm", ".mfm/notes"])
def test_a_symlinked_notes_folder_is_refused(root: Path, tmp_path: Path, where: str) -> None:
    elsewhere = root / "elsewhere"  # inside the root: still refused, the folder must be a real one
    elsewhere.mkdir()
    (root / ".mfm").mkdir(exist_ok=True)
    if where == ".mfm":
        (root / ".mfm").rmdir()
    os.symlink(elsewhere, root / where)
    with pytest.raises(UnsafePath, match="symlink"):
        notes.add(root, run=REACH, target="run", text="x")
    with pytest.raises(UnsafePath, match="symlink"):
        notes.read(root)
    assert list(elsewhere.iterdir()) == []


def test_a_symlinked_notes_file_and_a_run_as_root_are_refused(root: Path, tmp_path: Path) -> None:
    (root / ".mfm" / "notes").mkdir(parents=True)
    target = tmp_path / "planted.jsonl"
    target.write_text("")
    os.symlink(target, root / ".mfm" / "notes" / "notes.jsonl")
    with pytest.raises(UnsafePath, match="symlink"):
        notes.add(root, run=REACH, target="run", text="x")
    assert target.read_text() == ""
    with pytest.raises(UnsafePath, match="itself a run folder"):
        notes.add(root / REACH, run=".", target="run", text="x")
    assert not (root / REACH / ".mfm").exists()


def test_notes_reach_a_figure_manifest_and_the_turns_page(root: Path) -> None:
    from dashboard import figures

    n = notes.add(root, run=REACH, target="turn", turn=141, life=0, step=1026, text="why the diamond?", by="ana")
    run = open_run(root / REACH)
    m = figures.manifest(figures.timeline_figure(REACH, run), "double")
    assert [(x["id"], x["text"], x["turn"], x["author"]) for x in m["notes"]] == [(n.id, "why the diamond?", 141,
                                                                                   "ana")]
    at = open_app("turns", runs=REACH, run=REACH, turn="141")
    assert any("why the diamond?" in i.value and "turn 141" in i.value for i in at.info)
    at = open_app("turns", runs=REACH, run=REACH, turn="140")
    assert not any("why the diamond?" in i.value for i in at.info)


# The examples of docs/dashboard.md's cursor, search and notes sections


def _doc_links() -> list[str]:
    import re

    text = (REPO / "docs" / "dashboard.md").read_text(encoding="utf-8")
    return [x for x in dict.fromkeys(re.findall(r"`(…/[a-z_]*\?[^`\s]*)`", text)) if REACH in x]


def test_the_docs_cursor_search_and_notes_examples_land_where_they_say(monkeypatch: pytest.MonkeyPatch) -> None:
    from urllib.parse import parse_qs, urlsplit

    use_root(monkeypatch, SAMPLES)
    run_dir = SAMPLES / REACH
    steps = trace(run_dir)
    found = _doc_links()
    assert {urlsplit(x).path.strip("…/") for x in found} >= {"timeline", "turns", "frames", "grid", "memory",
                                                              "search", "notes"}
    for link in found:
        parts = urlsplit(link.replace("…", "http://localhost:8501", 1))
        page = parts.path.strip("/")
        params = {k: v[0] for k, v in parse_qs(parts.query).items()}
        at = open_app(page, **params)
        assert not at.warning and not at.error, (link, [w.value for w in (*at.warning, *at.error)])
        t = texts(at)
        if "step" in params:
            life, step = int(params["life"]), int(params["step"])
            turn, ep, here = turn_taking(run_dir, life, step), episode_playing(run_dir, life, step), steps[(step, life)]
            if page == "timeline":
                assert at.query_params["ep"] == ep["id"]
            if page == "turns":
                assert at.query_params["turn"] == str(turn["turn"]) and turn["turn"] == 141
            if page == "frames":
                assert f"Showing the frame at the time cursor (step {step})" in t
            if page == "grid":
                assert (f"Time cursor: life {life} · step {step} · turn {turn['turn']} · {ep['id']} · "
                        f"at ({here['x']}, {here['y']})") in t
            if page == "memory":
                _, version, versions = memory_as_of(run_dir, "mine/GUIDE.md", step)
                assert f"as of step {step}: version {version} of {versions}" in t
        if page == "search":
            asked, finds = turns_mentioning(run_dir, params["find"])
            labels = [n.proto.label for n in at.get("page_link")]
            for n in finds:
                t0 = next(x for x in jsonl(run_dir / "turns.jsonl") if x["turn"] == n)
                assert any(x.startswith(f"turn {n} · step {t0['first_step']} · find") for x in labels), labels
            if "among" not in params:
                for n in asked:
                    t0 = next(x for x in jsonl(run_dir / "turns.jsonl") if x["turn"] == n)
                    assert any(x.startswith(f"turn {n} · step {t0['first_step']} · search") for x in labels)


def test_step_and_region_notes_show_on_the_timeline_and_frames(root: Path) -> None:
    run_dir = root / REACH
    step = max(s for s, _ in trace(run_dir)) - 20
    life = next(lv for s, lv in trace(run_dir) if s == step)
    ep = episode_playing(run_dir, life, step)
    notes.add(root, run=REACH, target="step", life=life, step=step, text="the step to look at", by="ana")
    notes.add(root, run=REACH, target="region", life=life, step=step, region=(3, 6, 2, 5), text="this corner",
              by="ana")
    at = open_app("timeline", runs=REACH, run=REACH, ep=ep["id"])
    shown = [i.value for i in at.info]
    assert any("the step to look at" in v and f"step {step} of life {life}" in v for v in shown), shown
    at = open_app("frames", runs=REACH, run=REACH, frames=f"{REACH}:{step}")
    shown = [i.value for i in at.info]
    assert any("this corner" in v and f"tiles 3–5 × 2–4 of the frame of step {step}" in v for v in shown), shown
    at = open_app("frames", runs=REACH, run=REACH, frames=f"{REACH}:{step - 1}")
    assert not any("this corner" in i.value for i in at.info)
    (root / ".mfm" / "notes" / "notes.jsonl").open("a").write("{broken\n")
    at = open_app("notes", runs=REACH, run=REACH)
    assert ".mfm/notes/notes.jsonl:3: not JSON" in texts(at)


@pytest.mark.parametrize("run_dir", sample_runs(SAMPLES), ids=lambda p: p.name)
def test_each_lifes_first_and_last_step_are_those_of_its_trace_and_episodes(run_dir: Path) -> None:
    """``cursor.life_bounds`` against steps.jsonl and index.jsonl read with json: the smallest and
    largest step of each life's trace rows and episode spans; None for a life the run lacks."""
    run = open_run(run_dir)
    spans: dict[int, list[int]] = {}
    for row in jsonl(run_dir / "steps.jsonl"):
        spans.setdefault(row["life"], []).append(row["step"])
    for row in jsonl(run_dir / "index.jsonl"):
        spans.setdefault(row["life"], []).extend([row["first_step"], row["last_step"]])
    assert spans
    for life, steps in spans.items():
        assert cur.life_bounds(run, life) == (min(steps), max(steps)), life
    assert cur.life_bounds(run, max(spans) + 1) is None

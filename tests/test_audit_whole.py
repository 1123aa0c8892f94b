"""Issue 43, "Audit and debug to the end": the Retargeting audit shows every inspected episode
with the frame that showed the new target; a failure's filmstrip reaches back across episode
edges within the life with the vitals; a failure links to its Spatial-grid cell with the target
marked; the Failures picker follows the filters; dropped URL values warn; the small defects
(plan-write links, turn steps, diffs, the grid's empty cell) and every example link of
docs/dashboard.md. Each case is picked from the raw files and every fact checked is worked out
from them here (json, tests/raw_whole.py), never through the loaders."""
from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from conftest import REPO, grid_map, grid_marks, open_app, texts, use_root
from raw import action_of, jsonl, sample_runs
from raw_whole import (death_with_causes_before, inspected_episodes, most_inspected_retarget,
                       replay_memory, retarget_seen_in_many, shown_step, strip_steps, target_of, trace)
from loaders import failures as fl
from loaders import turns as tv
from loaders.run import open_run

SAMPLES = REPO / "sample_runs"
DOCS = REPO / "docs" / "dashboard.md"


@pytest.fixture(autouse=True)
def samples(monkeypatch: pytest.MonkeyPatch) -> None:
    use_root(monkeypatch, SAMPLES)


def captions(at) -> list[str]:
    """The captions of every image of an AppTest page, in page order."""
    def walk(node):
        yield node
        for child in getattr(node, "children", {}).values():
            yield from walk(child)

    return [i.caption for n in walk(at.main) if getattr(n, "type", "") == "image" for i in n.proto.imgs]


def links(at) -> dict[str, dict[str, str]]:
    """The page links of an AppTest page: label -> query parameters (one value each)."""
    return {n.proto.label: {k: v[0] for k, v in parse_qs(n.proto.query_string).items()}
            for n in at.get("page_link")}


def code(text: str, value: str) -> bool:
    """Whether ``value`` stands in ``text`` as an inline code span (however padded)."""
    return re.search(rf"`\s*{re.escape(value)}\s*`", text) is not None


def table(at, column: str):
    """The first table of an AppTest page that has ``column``."""
    return next(d.value for d in at.dataframe if column in d.value.columns)


# Retargeting: every inspected episode, the frame that showed the target, a found column


def test_inspection_shots_pick_the_frame_that_showed_the_target() -> None:
    checked = 0
    for run_dir in sample_runs(SAMPLES):
        run = open_run(run_dir)
        index = {r["id"]: r for r in jsonl(run_dir / "index.jsonl")}
        for t in jsonl(run_dir / "turns.jsonl"):
            if not any(not g.get("in_plan") for g in t["targets"]) or not inspected_episodes(t):
                continue
            shots = tv.inspection_shots(tv.turn_view(run, t["turn"]))
            assert [s.episode for s in shots] == inspected_episodes(t)
            for s in shots:
                step, why = shown_step(t, s.episode, index.get(s.episode))
                assert s.step == step, (run_dir.name, t["turn"], s.episode)
                assert s.shows_new_target == (why == "new")
                checked += 1
    assert checked > 20


def test_retargeting_lists_every_inspected_episode_with_the_frame_that_showed_the_target() -> None:
    run_dir, turn = retarget_seen_in_many(SAMPLES)
    key, n = run_dir.name, turn["turn"]
    eps = inspected_episodes(turn)
    index = {r["id"]: r for r in jsonl(run_dir / "index.jsonl")}
    seen = {(r["episode"], r["material"]): {tuple(c) for c in r["cells"]} for r in jsonl(run_dir / "seen.jsonl")}
    at = open_app("retargeting", runs=key, run=key, turn=str(n))
    assert not at.warning, [w.value for w in at.warning]
    got = table(at, "why this frame")
    assert list(got["episode"]) == eps and len(eps) > 3
    assert "found" in got.columns
    caps = captions(at)
    for page in range(2, -(-len(eps) // tv.SHOTS_PER_PAGE) + 1):
        caps += captions(open_app("retargeting", runs=key, run=key, turn=str(n), shots=str(page)))
    new = {(g["x"], g["y"]) for g in turn["targets"] if not g.get("in_plan")}
    hits = 0
    for ep, row in zip(eps, got.to_dict("records")):
        step, why = shown_step(turn, ep, index.get(ep))
        assert row["frame"] == step
        assert any(c.startswith(f"inspected {ep} · step {step} · ") for c in caps), (ep, caps)
        names = {f["name"] for c in turn["calls"] if c["tool"] == "inspect" and c["args"]["episode"] == ep
                 for f in c["result"].get("found") or []}
        assert all(name in row["found"] for name in names) or not names
        if why == "new":
            hits += 1
            f = next(f for c in turn["calls"] if c["tool"] == "inspect" and c["args"]["episode"] == ep
                     for f in c["result"]["found"] if (f["x"], f["y"]) in new and f["step"] == step)
            assert (f["x"], f["y"]) in seen[(ep, f["name"])], "seen.jsonl: the episode's frames showed the target"
            assert f"{f['name']} ({f['x']}, {f['y']}) [target]" in row["found"]
            assert "showed the new target" in row["why this frame"]
    assert hits >= 1
    assert any(c.value.startswith("Outlines: cyan") and "yellow" in c.value for c in at.caption), "the outline legend"


def test_retargeting_pages_many_inspected_episodes(monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir, turn = most_inspected_retarget(SAMPLES)
    key, n, eps = run_dir.name, turn["turn"], inspected_episodes(turn)
    per = tv.SHOTS_PER_PAGE
    assert len(eps) > per, "the sample runs hold a turn with more inspected episodes than fit on one page"
    index = {r["id"]: r for r in jsonl(run_dir / "index.jsonl")}
    shown: list[str] = []
    pages = -(-len(eps) // per)
    for page in range(1, pages + 1):
        at = open_app("retargeting", runs=key, run=key, turn=str(n), **({"shots": str(page)} if page > 1 else {}))
        assert not at.warning, [w.value for w in at.warning]
        assert at.selectbox(key="w_rt_shots").value == page - 1
        caps = [c for c in captions(at) if c.startswith("inspected ")]
        assert len(caps) == min(per, len(eps) - (page - 1) * per)
        shown += [c.split(" · ")[0].removeprefix("inspected ") for c in caps]
        for c in caps:
            ep = c.split(" · ")[0].removeprefix("inspected ")
            step, _ = shown_step(turn, ep, index.get(ep))
            assert c.startswith(f"inspected {ep} · step {step} · ")
    assert shown == eps


# Failures: the filmstrip reaches back, vitals, before/after, grid link


def test_filmstrip_reaches_back_within_the_life_with_vitals() -> None:
    run_dir, row, death = death_with_causes_before(SAMPLES)
    run = open_run(run_dir)
    steps = trace(run_dir)
    target = target_of(run_dir, row)
    strip = fl.filmstrip(run, row["id"], target, death["step"])
    want = strip_steps(run_dir, row)
    assert [f.step for f in strip] == want and want[0] <= row["first_step"], "reaches into the episode before"
    for f in strip:
        s = steps[(f.step, row["life"])]
        assert f.vitals == {k: s[k] for k in ("health", "food", "drink", "energy")}
        assert f.position == (s["x"], s["y"])
        assert f.episode == s["episode"]
    assert fl.around(strip) == (death["step"] - 1, death["step"])
    assert f"died ({death['cause']})" in strip[-1].damage
    hurt = {(g["step"]): g for g in jsonl(run_dir / "grid.jsonl") if g["kind"] == "hazard" and g["life"] == row["life"]
            and g.get("damage") is not None and g.get("cause")}
    for f in strip:
        if f.step in hurt:
            assert hurt[f.step]["cause"] in f.damage
    assert [f.step for f in fl.filmstrip(run, row["id"], target, death["step"], back=0)] == \
        strip_steps(run_dir, row, back=0)


def test_failures_page_shows_the_steps_before_and_links_to_the_grid() -> None:
    run_dir, row, death = death_with_causes_before(SAMPLES)
    key, ep = run_dir.name, row["id"]
    steps = trace(run_dir)
    target = target_of(run_dir, row)
    at = open_app("failures", runs=key, run=key, ep=ep)
    assert not at.warning, [w.value for w in at.warning]
    caps = [c for c in captions(at) if c.startswith("step ")]
    want = strip_steps(run_dir, row)
    assert [int(c.split(" ")[1]) for c in caps] == want
    for c, s in zip(caps, want):
        v = steps[(s, row["life"])]
        assert f"health {v['health']} · food {v['food']} · drink {v['drink']} · energy {v['energy']}" in c
        if v["episode"] != ep:
            assert f" · {v['episode']} · " in c
    assert any(c.startswith(f"step {death['step'] - 1} · LAST BEFORE") for c in caps)
    assert any(c.startswith(f"step {death['step']} · FAILURE STEP") and f"died ({death['cause']})" in c for c in caps)
    got = links(at)
    compare = got[f"Compare step {death['step'] - 1} with step {death['step']} in Frames (world-aligned)"]
    assert compare["frames"] == f"{key}:{death['step'] - 1},{key}:{death['step']}"
    end = steps[(death["step"], row["life"])]
    grid = next(v for k, v in got.items() if k.startswith(f"Open cell ({end['x']}, {end['y']}) in the Spatial grid"))
    assert grid["cell"] == f"{end['x']},{end['y']}" and grid["life"] == str(row["life"])
    assert grid["mark"] == f"{target[0]},{target[1]}"

    at = open_app("grid", **grid)
    assert not at.warning, [w.value for w in at.warning]
    assert (at.number_input(key="w_gx").value, at.number_input(key="w_gy").value) == (end["x"], end["y"])
    assert f"**({end['x']}, {end['y']})**" in texts(at)
    marks = grid_marks(grid_map(at))
    assert (target[0], target[1], "failed target") in marks
    assert (end["x"], end["y"], "selected cell") in marks
    at = open_app("failures", runs=key, run=key, ep=ep, back="0")
    assert [int(c.split(" ")[1]) for c in captions(at) if c.startswith("step ")] == strip_steps(run_dir, row, 0)


def _failures(run_dir: Path) -> list[tuple[dict, str, str]]:
    """Every failed or interrupted episode and every death with an episode: its index row,
    action and outcome, in the order of the steps they happened at."""
    deaths = {e["episode"]: e for e in jsonl(run_dir / "lives.jsonl") if e["event"] == "death" and e.get("episode")}
    out = []
    for r in jsonl(run_dir / "index.jsonl"):
        if r.get("outcome") in ("failed", "interrupted") or r["id"] in deaths:
            out.append((deaths[r["id"]]["step"] if r["id"] in deaths else r["last_step"], r,
                        "death" if r["id"] in deaths else r["outcome"]))
    return [(r, r["action_kind"] or "", o) for _, r, o in sorted(out, key=lambda x: x[0])]


def test_failures_picker_follows_the_filters() -> None:
    run_dir = SAMPLES / "diamond_mfm_s2"
    rows = _failures(run_dir)
    actions = sorted({a for _, a, _ in rows if a})
    act = max(actions, key=lambda a: (sum(x == a for _, x, _ in rows) < len(rows), sum(x == a for _, x, _ in rows)))
    other = next(r for r, a, _ in rows if a != act)
    want = list(dict.fromkeys(r["id"] for r, a, _ in rows if a == act))
    at = open_app("failures", runs=run_dir.name, run=run_dir.name, act=act, ep=other["id"])
    assert [o.split(" · ")[0] for o in at.selectbox(key="w_fail_ep").options] == want and other["id"] not in want
    assert at.selectbox(key="w_fail_ep").value is None
    assert any(code(w.value, "ep") and code(w.value, other["id"]) and "filters" in w.value for w in at.warning)
    assert not [c for c in captions(at) if c.startswith("step ")], "no filmstrip of a failure filtered out"


def test_dropped_url_values_warn() -> None:
    run_dir = SAMPLES / "diamond_mfm_s2"
    rows = _failures(run_dir)
    materials = {str(action_of(run_dir, r)["args"].get("material")) for r, _, _ in rows}
    absent = next(m for m in ("stone", "diamond", "sapling", "lava_rock") if m not in materials)
    lives = {r["life"] for r, _, _ in rows}
    at = open_app("failures", runs=run_dir.name, run=run_dir.name, mat=f"{absent}", life=f"x,{max(lives) + 5}",
                  act="collect,fly", range="zz", ep="ep_999999")
    warned = [w.value for w in at.warning]
    for param, value in (("mat", absent), ("life", "x"), ("life", str(max(lives) + 5)), ("act", "fly"),
                         ("range", "zz"), ("ep", "ep_999999")):
        assert any(code(w, param) and value in w for w in warned), (param, value, warned)
    assert at.multiselect(key="w_fail_act").value == ["collect"]
    assert not any(code(w, "act") and code(w, "collect") for w in warned)
    at = open_app("grid", runs=run_dir.name, run=run_dir.name, cell="3;4", mark="a,b", life="99", kinds="walked,fly")
    warned = [w.value for w in at.warning]
    for param, value in (("cell", "3;4"), ("mark", "a,b"), ("life", "99"), ("kinds", "fly")):
        assert any(code(w, param) and code(w, value) for w in warned), (param, value, warned)
    run_dir, turn = most_inspected_retarget(SAMPLES)
    pages = -(-len(inspected_episodes(turn)) // tv.SHOTS_PER_PAGE)
    at = open_app("retargeting", runs=run_dir.name, run=run_dir.name, turn=str(turn["turn"]), shots=str(pages + 1))
    assert any(code(w.value, "shots") and code(w.value, str(pages + 1)) for w in at.warning)
    at = open_app("failures", runs=run_dir.name, run=run_dir.name, back="-3")
    assert any(code(w.value, "back") and code(w.value, "-3") for w in at.warning)


def test_an_empty_filter_result_shows_no_empty_table() -> None:
    run_dir = SAMPLES / "diamond_mfm_s2"
    rows = _failures(run_dir)
    act, outcome = next((a, o) for a in sorted({a for _, a, _ in rows if a}) for o in ("death", "failed", "interrupted")
                        if not any(x == a and y == o for _, x, y in rows) and any(y == o for _, _, y in rows))
    at = open_app("failures", runs=run_dir.name, run=run_dir.name, act=act, outcome=outcome)
    assert f"0 of {len(rows)} failures and deaths match" in texts(at)
    assert not [d for d in at.dataframe if "summary" in d.value.columns]
    assert any("No failure or death matches" in i.value for i in at.info)


# Small defects


def test_plan_writes_link_to_memory_at_the_step_they_hold_from() -> None:
    run_dir = SAMPLES / "diamond_mfm_s2"
    turns = {t["turn"]: t for t in jsonl(run_dir / "turns.jsonl")}
    w = next(w for w in jsonl(run_dir / "memory_writes.jsonl") if w["path"] == "mine/working.md"
             and w["reason"].startswith("plan:") and w["turn"] in turns and turns[w["turn"]]["first_step"] < w["step"])
    first = turns[w["turn"]]["first_step"]
    at = open_app("turns", runs=run_dir.name, run=run_dir.name, turn=str(w["turn"]))
    got = links(at)
    assert got[f"Open mine/working.md as of step {first} in Memory"]["asof"] == str(first)
    assert not any(k == f"Open mine/working.md as of step {w['step']} in Memory" for k in got)
    assert f"at step {w['step']} (holds from step {first}" in texts(at)


def test_turn_header_counts_the_steps_as_its_scrubber_does() -> None:
    run_dir = SAMPLES / "diamond_mfm_s2"
    t = next(t for t in sorted(jsonl(run_dir / "turns.jsonl"), key=lambda t: t["turn"])
             if t["last_step"] - t["first_step"] > 2)
    at = open_app("turns", runs=run_dir.name, run=run_dir.name, turn=str(t["turn"]))
    head = next(s.value for s in at.subheader if s.value.startswith(f"Turn {t['turn']} "))
    assert f"steps {t['first_step'] + 1}–{t['last_step']} (decided at step {t['first_step']})" in head
    scrub = json.loads(at.get("bidi_component")[0].proto.json)
    lines = [line for cap in scrub["captions"] for line in cap]
    assert any(line.startswith(f"turn {t['turn']} (steps {t['first_step'] + 1}-{t['last_step']})") for line in lines)
    assert scrub["first"] == t["first_step"] + 1
    at = open_app("retargeting", runs=run_dir.name, run=run_dir.name)
    n = at.selectbox(key="w_rt_turn").value
    r = next(x for x in jsonl(run_dir / "turns.jsonl") if x["turn"] == n)
    assert f"steps {r['first_step'] + 1}–{r['last_step']} (decided at step {r['first_step']})" in texts(at)


def _held(w: dict, turns: dict[int, dict]) -> int:
    """The step from which a write holds: a plan update from its turn's first step."""
    plan = w["path"] == "mine/working.md" and w["reason"].startswith("plan:") and w["turn"] in turns
    return turns[w["turn"]]["first_step"] if plan else w["step"]


def _bullet_write(run_dir: Path) -> tuple[dict, str, str]:
    """A write that keeps a Markdown bullet (``- …``) unchanged next to a line it changes, the
    only write to its file that holds from its step (so the Memory page's default diff at that
    step is this write's)."""
    turns = {t["turn"]: t for t in jsonl(run_dir / "turns.jsonl")}
    writes = replay_memory(run_dir)
    for w, before, after in writes:
        old, new = before.splitlines(), after.splitlines()
        kept = [ln for ln in old if ln.startswith("- ") and ln in new]
        alone = sum(x["path"] == w["path"] and _held(x, turns) == _held(w, turns) for x, _, _ in writes) == 1
        if kept and old and set(new) - set(old) and alone:
            return w, before, after
    raise AssertionError("no write keeps a bullet unchanged")


def test_diffs_name_unchanged_lines_as_unchanged() -> None:
    run_dir = SAMPLES / "diamond_mfm_s2"
    w, before, after = _bullet_write(run_dir)
    rows = tv.line_diff(before, after)
    old, new = before.splitlines(), after.splitlines()
    for r in rows.itertuples():
        if r.change == "unchanged":
            assert old[r.old - 1] == r.text == new[r.new - 1]
        elif r.change == "removed":
            assert old[r.old - 1] == r.text
        elif r.change == "added":
            assert new[r.new - 1] == r.text
    assert sorted(rows.loc[rows["change"] == "added", "text"]) == sorted(
        (lambda o: [x for x in new if not (x in o and not o.remove(x))])(list(old)))
    assert not any(t.startswith(" ") for t in rows["text"] if isinstance(t, str) and t.strip().startswith("-"))

    turns = {t["turn"]: t for t in jsonl(run_dir / "turns.jsonl")}
    at = open_app("memory", runs=run_dir.name, run=run_dir.name, file=w["path"], asof=str(_held(w, turns)))
    shown = table(at, "change")
    assert list(shown.columns) == ["change", "old", "new", "text"]
    assert shown.drop(columns=["old", "new"]).values.tolist() == rows.drop(columns=["old", "new"]).values.tolist()
    bullets = shown[(shown["change"] == "unchanged") & shown["text"].str.startswith("- ")]
    assert len(bullets) and set(bullets["text"]) <= set(old) & set(new)
    assert not at.code or not any(c.language == "diff" for c in at.code)


def test_grid_without_a_cell_prefills_nothing() -> None:
    at = open_app("grid", runs="diamond_mfm_s2", run="diamond_mfm_s2")
    assert at.number_input(key="w_gx").value is None and at.number_input(key="w_gy").value is None
    assert any(i.value.startswith("Pick a cell") for i in at.info)


# Every example link of docs/dashboard.md lands where it says


def doc_links() -> list[str]:
    """Every complete example link of docs/dashboard.md (``http://localhost:8501/…`` or
    ``…/page?…`` with runs named), as written."""
    text = DOCS.read_text(encoding="utf-8")
    found = re.findall(r"`((?:http://localhost:8501|…)/[a-z_]*\?[^`\s]*runs=[^`\s]*)`", text)
    return list(dict.fromkeys(found))


def _landed(at, page: str, params: dict[str, str]) -> None:
    """What each parameter of an example link must show on its page."""
    t = texts(at)
    if page == "failures" and "ep" in params:
        assert any(s.value.startswith(params["ep"]) for s in at.subheader), params
        for p, k in (("act", "w_fail_act"), ("mat", "w_fail_mat"), ("outcome", "w_fail_out")):
            if p in params:
                assert at.multiselect(key=k).value == params[p].split(","), p
    if page in ("turns",) and "turn" in params:
        assert any(s.value.startswith(f"Turn {params['turn']} ") for s in at.subheader)
    if page == "retargeting" and "turn" in params:
        assert f"**Turn {params['turn']}**" in t
    if page == "timeline" and "ep" in params:
        assert any(s.value.startswith(params["ep"]) for s in at.subheader)
    if page == "grid" and "cell" in params:
        x, y = params["cell"].split(",")
        assert f"**({x}, {y})**" in t
    if page == "memory" and "asof" in params:
        assert f"as of step {params['asof']}" in t
    if page == "frames" and "frames" in params:
        assert len(captions(at)) + len(at.get("vega_lite_chart")) >= 1


def test_docs_example_links_land_where_they_say() -> None:
    found = doc_links()
    assert len(found) >= 15
    for link in found:
        parts = urlsplit(link.replace("…", "http://localhost:8501", 1) if link.startswith("…") else link)
        page = parts.path.strip("/") or None
        params = {k: v[0] for k, v in parse_qs(parts.query).items()}
        at = open_app(page, **params)
        assert not at.warning, (link, [w.value for w in at.warning])
        assert not at.error, (link, [e.value for e in at.error])
        _landed(at, page or "runs", params)

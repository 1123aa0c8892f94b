"""loaders.turns and the Turns page, checked against the raw files of a sample run (json) and
a small written run with a model-driven turn."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import REPO, open_app, texts, use_root, write_run
from raw import crowded_turn, found_at_target, respawn_turn
from loaders import turns as tv
from loaders.run import open_run

RUN = REPO / "sample_runs" / "diamond_mfm_s2"


def _rows(name: str, run: Path = RUN) -> list[dict]:
    return [json.loads(line) for line in (run / name).read_text().splitlines() if line.strip()]


def raw_turn(n: int) -> dict:
    return next(t for t in _rows("turns.jsonl") if t["turn"] == n)


def consolidation_turn() -> dict:
    """The first turn whose consolidation both added and removed facts."""
    return next(t for t in sorted(_rows("turns.jsonl"), key=lambda t: t["turn"]) for c in t["calls"]
                if c["tool"] == "consolidate" and c["result"]["added"] and c["result"]["removed"])


@pytest.fixture(scope="module")
def run():
    return open_run(RUN)


def test_a_respawn_turn_belongs_to_the_new_life(run) -> None:
    t = respawn_turn(RUN)
    respawn = next(e for e in _rows("lives.jsonl") if e["event"] == "respawn" and e["life"] == t["life"])
    death = next(e for e in _rows("lives.jsonl") if e["event"] == "death" and e["life"] == t["life"] - 1)
    assert respawn["step"] == death["step"] == t["first_step"]
    v = tv.turn_view(run, t["turn"])
    assert (v.life, v.first_step) == (t["life"], t["first_step"])
    assert v.position == (respawn["x"], respawn["y"])
    # the frame of the respawn step belongs to the death episode of the previous life: not shown as the start
    owner = next(r for r in _rows("index.jsonl") if r["first_step"] < t["first_step"] <= r["last_step"])
    assert owner["life"] != t["life"]
    first_of_life = min(s["step"] for s in _rows("steps.jsonl") if s["life"] == t["life"])
    assert [(f.step, f.life, f.exact) for f in v.start_frames] == [(first_of_life, t["life"], False)]


def test_calls_of_a_turn_retargeted_by_inspection_by_kind(run) -> None:
    t = respawn_turn(RUN)
    v = tv.turn_view(run, t["turn"])
    raw_search = next(c for c in t["calls"] if c["tool"] == "search")
    search = next(c for c in v.calls if c.tool == "search")
    assert list(search.ids) == raw_search["result"]["ids"] and search.query == raw_search["args"]
    steps = {s["step"]: s for s in _rows("steps.jsonl")}
    raw_insp, seen = found_at_target(t)[0]
    episode, cell = raw_insp["args"]["episode"], (seen["x"], seen["y"])
    key = f"res:{seen['name']}@{seen['x']},{seen['y']}"
    pos = steps[seen["step"]]
    insp = next(c for c in v.calls if c.tool == "inspect" and c.episode == episode)
    frame = next(f for f in insp.frames if f.step == seen["step"])
    find = next(f for f in frame.finds if f.name == seen["name"] and (f.x, f.y) == cell)
    assert (find.x, find.y) == cell == (t["targets"][0]["x"], t["targets"][0]["y"])
    assert find.tile == (seen["x"] - pos["x"] + 4, seen["y"] - pos["y"] + 3)
    assert f"{seen['name']} ({cell[0]}, {cell[1]}) at tile {find.tile} [target]" in tv.find_caption(frame.finds,
                                                                                                    {cell})
    ref = next(r for r in _rows("index.jsonl") if r["id"] == episode)
    looked = list(range(ref["frames"] - 1, -1, -raw_insp["args"]["stride"]))[:raw_insp["args"]["frames"]]
    assert sorted(f.step for f in insp.frames) == sorted(ref["first_step"] + 1 + i for i in looked)
    raw_write = next(w for w in _rows("memory_writes.jsonl")
                     if w["turn"] == t["turn"] and w["path"] == "mine/GUIDE.md")
    new_lines = [x.rstrip("\n") for _, _, lines in raw_write["diff"] for x in lines]
    write = next(c for c in v.calls if c.tool == "write" and c.args.get("path") == "mine/GUIDE.md")
    assert [w.seq for w in write.writes] == [raw_write["seq"]]
    assert set(new_lines) <= set(write.writes[0].added)
    assert any(key in line for line in write.writes[0].added)
    assert key in write.added


def test_targets_and_episodes_of_a_turn_retargeted_by_inspection(run) -> None:
    t = respawn_turn(RUN)
    v = tv.turn_view(run, t["turn"])
    assert [(g.x, g.y, g.in_plan, g.new) for g in v.targets] == [
        (g["x"], g["y"], g["in_plan"], not g["in_plan"]) for g in t["targets"]]
    target = v.targets[0]
    found_in = [c["args"]["episode"] for c in t["calls"] if c["tool"] == "inspect"
                and any((f["x"], f["y"]) == (target.x, target.y) for f in c["result"]["found"])]
    assert list(target.seen_in) == found_in and found_in
    idx = {r["id"]: r for r in _rows("index.jsonl")}
    assert [(e.id, e.outcome) for e in v.episodes] == [(e, idx[e]["outcome"]) for e in t["episodes"]]
    before = {(p["x"], p["y"], p["label"]) for p in t["plan_before"]}
    after = {(p["x"], p["y"], p["label"]) for p in t["plan_after"]}
    assert {(p.x, p.y, p.label) for p in v.plan if p.sign == "+"} == after - before
    assert {(p.x, p.y, p.label) for p in v.plan if p.sign == "-"} == before - after


def test_consolidation_turn(run) -> None:
    t = consolidation_turn()
    raw = next(c for c in t["calls"] if c["tool"] == "consolidate")
    c = next(c for c in tv.turn_view(run, t["turn"]).calls if c.tool == "consolidate")
    assert (list(c.added), list(c.removed)) == (raw["result"]["added"], raw["result"]["removed"])
    writes = [w["seq"] for w in _rows("memory_writes.jsonl") if w["turn"] == t["turn"]
              and w["author"] == "consolidation" and w["reason"].split(":")[0] == raw["args"]["reason"]]
    assert [w.seq for w in c.writes] == writes and writes


def test_navigation_steps_through_kinds(run) -> None:
    turns = sorted(_rows("turns.jsonl"), key=lambda t: t["turn"])
    idx = {r["id"]: r for r in _rows("index.jsonl")}
    dead = {e["episode"] for e in _rows("lives.jsonl") if e["event"] == "death"}
    retarget = [t["turn"] for t in turns if any(not g["in_plan"] for g in t["targets"])]
    failed = [t["turn"] for t in turns if any(idx[e]["outcome"] in ("failed", "interrupted") for e in t["episodes"])]
    deaths = [t["turn"] for t in turns if set(t["episodes"]) & dead]
    n = respawn_turn(RUN)["turn"]
    nav = tv.navigation(tv.turn_kinds(run), n)
    assert nav.prev == n - 1 and nav.next == n + 1
    assert nav.kinds["retarget"][1] == min(k for k in retarget if k > n)
    assert nav.kinds["failed"][1] == min(k for k in failed if k > n)
    assert nav.kinds["death"] == (max(k for k in deaths if k < n), min(k for k in deaths if k > n))


def test_model_turn(tmp_path: Path) -> None:
    w = write_run(tmp_path / "run", episodes=3)
    calls = [
        {"tool": "model", "args": {"model": "m1", "prompt": "state: here", "prompt_chars": 11},
         "result": {"error": "timeout", "latency_s": 1.5}},
        {"tool": "model", "args": {"model": "m1", "prompt_chars": 12},
         "result": {"content": "go", "tool_calls": [{"name": "go_to", "arguments": "{\"x\": 3}"}],
                    "usage": {"prompt_tokens": 120, "completion_tokens": 7, "cost_usd": 0.002}, "latency_s": 0.25}}]
    last = w.episodes[-1]
    line = {"turn": 3, "life": last.life, "first_step": last.last_step, "last_step": last.last_step, "policy": "llm",
            "calls": calls, "targets": [], "plan_before": [], "plan_after": [], "episodes": [], "latency_s": 1.75}
    with open(w.dir / "turns.jsonl", "a") as f:
        f.write(json.dumps(line) + "\n")
    v = tv.turn_view(open_run(w.dir), 3)
    assert v.tokens == (120, 7) and v.cost_usd == pytest.approx(0.002) and v.latency_s == 1.75
    models = [c for c in v.calls if c.tool == "model"]
    assert [c.request["status"] for c in models] == ["retried", "ok"]
    assert models[0].args["prompt"] == "state: here" and models[1].result["content"] == "go"


def test_turns_page(monkeypatch: pytest.MonkeyPatch) -> None:
    use_root(monkeypatch, REPO / "sample_runs")
    raw = respawn_turn(RUN)
    n, life, first, last = raw["turn"], raw["life"], raw["first_step"], raw["last_step"]
    respawn = next(e for e in _rows("lives.jsonl") if e["event"] == "respawn" and e["life"] == life)
    _, seen = found_at_target(raw)[0]
    at = open_app("turns", runs="diamond_mfm_s2", turn=str(n))
    t = texts(at)
    assert f"Turn {n} · life {life} · steps {first + 1}–{last} (decided at step {first})" in t
    assert f"({respawn['x']}, {respawn['y']}) in life {life}" in t
    search = next(c for c in raw["calls"] if c["tool"] == "search")
    assert f"{len(search['result']['ids'])} episode(s) returned" in t
    assert f"res:{seen['name']}@{seen['x']},{seen['y']}" in t
    assert at.selectbox(key="w_turn").value == n
    scrub = json.loads(at.get("bidi_component")[0].proto.json)
    framed = sorted(s for e in _rows("index.jsonl") if e["life"] == life and e.get("frames")
                    for s in range(e["first_step"] + 1, e["first_step"] + e["frames"] + 1) if first < s <= last)
    assert [c[0] for c in scrub["captions"]] == [f"Step {s}" for s in framed] and scrub["first"] == framed[0]
    nxt = next(b for b in at.button if b.label == "next death →")
    nxt.click().run()
    deaths = sorted(t["turn"] for t in _rows("turns.jsonl") if set(t["episodes"]) & {
        e["episode"] for e in _rows("lives.jsonl") if e["event"] == "death"})
    assert at.selectbox(key="w_turn").value == min(d for d in deaths if d > n)


def test_retarget_map_labels_do_not_overlap() -> None:
    import math

    from dashboard import vega_charts

    run_dir, turn = crowded_turn(REPO / "sample_runs", vega_charts.LABEL_GAP)
    idx = {r["id"]: r for r in _rows("index.jsonl", run_dir)}
    eps = [c["args"]["episode"] for c in turn["calls"] if c["tool"] == "inspect"]
    inspected = [{"episode": e, "x": idx[e]["x"], "y": idx[e]["y"]} for e in eps]
    position = tv.turn_view(open_run(run_dir), turn["turn"]).position
    targets = [{"x": g["x"], "y": g["y"], "near": True} for g in turn["targets"]]
    spec = vega_charts.retarget_map(position, inspected, targets, 8.0).to_dict()
    points = next(lay for lay in spec["layer"] if lay["mark"]["type"] == "point")  # the text layer repeats them
    marks = [v for v in spec["datasets"][points["data"]["name"]] if v["what"] == "inspected episodes"]
    pts = [(v["x"], v["y"]) for v in marks]
    assert len(pts) < len(set(eps))
    gap = vega_charts.LABEL_GAP
    assert all(math.hypot(a[0] - b[0], a[1] - b[1]) >= gap for i, a in enumerate(pts) for b in pts[i + 1:])
    labelled = [e for v in marks for e in v["detail"].split(", ")]
    assert sorted(labelled) == sorted(set(eps))
    assert sorted(int(v["label"]) for v in marks) == list(range(1, len(marks) + 1))
    counted = {(float(idx[e]["x"]), float(idx[e]["y"])) for e in eps}
    ring = [v for rows in spec["datasets"].values() for v in rows if "circle" in v]
    assert len({v["circle"] for v in ring}) == len(counted), "one 8-cell circle per inspected position"
    xs, ys = spec["layer"][0]["encoding"]["x"]["scale"]["domain"], spec["layer"][0]["encoding"]["y"]["scale"]["domain"]
    assert math.isclose(xs[1] - xs[0], ys[1] - ys[0]), "equal axes: a cell is square, a circle round"


def test_retargeting_rates_undefined_show_na(monkeypatch: pytest.MonkeyPatch) -> None:
    use_root(monkeypatch, REPO / "sample_runs")
    direct = "diamond_direct_s2_2500steps"
    inspecting = [t for t in _rows("turns.jsonl", REPO / "sample_runs" / direct)
                  if any(c["tool"] == "inspect" for c in t["calls"])]
    assert not inspecting
    at = open_app("retargeting", runs=direct)
    table = at.dataframe[0].value
    assert table["inspect_rate"].tolist() == ["n/a"]
    assert "None" not in table.astype(str).to_string()


def test_turns_page_of_a_model_turn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = write_run(tmp_path / "root" / "llm_run", episodes=3)
    last = w.episodes[-1]
    prompt = "state ![x](http://example.invalid/x.png) <b>bold</b>"
    line = {"turn": 3, "life": last.life, "first_step": last.last_step, "last_step": last.last_step, "policy": "llm",
            "calls": [{"tool": "model", "args": {"model": "m-test", "prompt": prompt, "prompt_chars": len(prompt)},
                       "result": {"content": "going", "tool_calls": [{"name": "go_to", "arguments": "{}"}],
                                  "usage": {"prompt_tokens": 1200, "completion_tokens": 34, "cost_usd": 0.0125},
                                  "latency_s": 0.5}}],
            "targets": [], "plan_before": [], "plan_after": [], "episodes": []}
    with open(w.dir / "turns.jsonl", "a") as f:
        f.write(json.dumps(line) + "\n")
    use_root(monkeypatch, tmp_path / "root")
    at = open_app("turns", runs="llm_run", turn="3")
    t = texts(at)
    assert "tokens in 1,200 / out 34 · 0.50 s · cost $0.0125" in t
    assert [m.value for m in at.metric] == ["1,200", "34", "0.50 s", "$0.0125"]
    assert prompt not in [c.value for c in at.code], "the prompt is built once its expander is opened"
    at.session_state["w_prompt_3_0"] = True
    at.run()
    codes = [c.value for c in at.code]
    assert prompt in codes and any("going" in c and "go_to({})" in c for c in codes)
    assert "example.invalid" not in t

"""The dashboard and the loaders on a run that inherited an earlier run's memory: ``inherited:``
episode ids are shown as such, with the run they came from, and their records and frames are
read from the copy in the run's ``inherited/`` folder, never from the new game. Real runs (an
earlier game, a new game in its world inheriting its memory), checked against the raw files."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from urllib.parse import parse_qs

import numpy as np
import pandas as pd
import pytest

from conftest import open_app, texts, use_root
from raw import jsonl, stored_frame
from raw_whole import inspected_episodes, shown_step
from loaders import agent_calls, lookups, timeline_data
from loaders import analysis_pages as ap
from loaders import provenance as pv
from loaders import turns as tv
from loaders.display import Episode, Turn
from loaders.inherited import copy_of, locate
from loaders.run import find_runs, open_run
from mfm.agent.config import RunConfig
from mfm.agent.runner import run as run_agent
from mfm.memory.consolidation import FACT_LINE
from mfm.memory.retrieval import FrameError

EARLIER, NEW = "earlier", "new"
COPY = f"{NEW}/inherited"
PAGES = ["timeline", "turns", "failures", "frames", "grid", "retargeting", "steps_per_turn", "memory", "provenance",
         "progress", "echo", "sql"]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A runs root: an earlier game (reach world of seed 0, 600 steps) and a new game of
    ore-iron in that world inheriting its memory."""
    base = tmp_path_factory.mktemp("inherit_dash")
    earlier = run_agent(RunConfig(task="reach-1000", seed=0, steps=600, out=base / EARLIER, fixed_clock=True))
    run_agent(RunConfig(task="ore-iron", seed=0, out=base / NEW, fixed_clock=True, inherit=earlier.writer.dir))
    return base


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    use_root(monkeypatch, root)


def origin_name(root: Path) -> str:
    """The inherited run's name, as the new run's raw manifest records it."""
    return json.loads((root / NEW / "run.json").read_text())["config"]["inherited"]["run"]


def inspections_raw(root: Path) -> list[tuple[dict, dict]]:
    """``(turn, call)`` of every inspect call of the new run's raw turns.jsonl."""
    return [(t, c) for t in jsonl(root / NEW / "turns.jsonl") for c in t["calls"] if c["tool"] == "inspect"]


def inherited_turn(root: Path) -> dict:
    """The first raw turn that inspected an inherited episode and found something in it."""
    return next(t for t, c in inspections_raw(root) if c["args"]["episode"].startswith("inherited:")
                and c["result"].get("found"))


def copy_index(root: Path) -> dict[str, dict]:
    """The copy's raw index rows by their own id."""
    return {r["id"]: r for r in jsonl(root / COPY / "index.jsonl")}


def images(at) -> list[str]:
    """The captions of every image of an AppTest page."""
    def walk(node):
        yield node
        for child in getattr(node, "children", {}).values():
            yield from walk(child)

    return [i.caption for n in walk(at.main) if getattr(n, "type", "") == "image" for i in n.proto.imgs]


def links(at) -> dict[str, dict[str, list[str]]]:
    """The page links of an AppTest page: label -> query parameters."""
    return {n.proto.label: parse_qs(n.proto.query_string) for n in at.get("page_link")}


def test_the_fixture_inherits(root: Path) -> None:
    raw = [c["args"]["episode"] for _, c in inspections_raw(root)]
    assert any(e.startswith("inherited:") for e in raw) and any(not e.startswith("inherited:") for e in raw)
    assert jsonl(root / NEW / "memory_writes.jsonl")[0]["author"] == "inherited"


def test_runs_page_lists_the_inherited_run_once(root: Path) -> None:
    assert [p.name for p in find_runs(root)] == [EARLIER, NEW]
    at = open_app()
    table = at.dataframe[0].value
    assert sorted(table["key"]) == [EARLIER, NEW]
    got = dict(zip(table["key"], table["inherited"]))
    assert got == {EARLIER: "", NEW: origin_name(root)}


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_the_inherited_run(page: str) -> None:
    at = open_app(page, runs=f"{NEW},{EARLIER}", run=NEW)
    assert not at.error, [e.value for e in at.error]
    assert "no stored frame" not in texts(at)


def test_inspections_keep_inherited_ids_and_look_them_up_in_the_copy(root: Path) -> None:
    run = open_run(root / NEW)
    got = agent_calls.run_inspections(run)
    raw = inspections_raw(root)
    assert list(got["episode"]) == [c["args"]["episode"] for _, c in raw]
    index, name = copy_index(root), origin_name(root)
    for row, (_, c) in zip(got.itertuples(), raw):
        ep = c["args"]["episode"]
        assert row.inherited == ep.startswith("inherited:")
        if row.inherited:
            own = index[ep.removeprefix("inherited:")]
            assert row.target_life == own.get("life", 0)
            where = "end observation" if row.target_step is pd.NA else f"step {row.target_step}"
            assert row.label.endswith(f"inspected {ep} (from run {name}) · {where} of that run")
    marks = timeline_data.timeline_marks(run, max_per_kind=10 ** 6)
    assert sorted(marks.loc[marks["kind"] == "inspect", "label"]) == sorted(f"inspect {c['args']['episode']}"
                                                                            for _, c in raw)


def test_inherited_frames_are_read_from_the_copy(root: Path) -> None:
    run = open_run(root / NEW)
    copy = copy_of(run)
    assert copy is not None and copy.path == (root / COPY).resolve()
    checked = 0
    for _, c in inspections_raw(root):
        ep = c["args"]["episode"]
        if not ep.startswith("inherited:"):
            continue
        for step in sorted({f["step"] for f in c["result"]["found"]}):
            holder, s, episode, life = lookups.frame_holder(run, ep, step)
            assert holder.path == (root / COPY).resolve() and (s, episode) == (step, None)
            assert np.array_equal(lookups.frame_for(holder, s, episode, life), stored_frame(root / COPY, step))
            checked += 1
        row = copy_index(root)[ep.removeprefix("inherited:")]
        strip = lookups.frame_strip(run, ep, max_frames=1000)
        assert [s for s, _ in strip] == list(range(row["first_step"] + 1, row["first_step"] + row["frames"] + 1))
        assert np.array_equal(lookups.frame_for(run, episode=ep), strip[-1][1])
    assert checked
    with pytest.raises(FrameError):
        lookups.frame_for(run, episode="inherited:ep_999999")


def test_turns_page_shows_inherited_inspections_from_the_copy(root: Path) -> None:
    turn, name = inherited_turn(root), origin_name(root)
    at = open_app("turns", runs=NEW, turn=str(turn["turn"]))
    for i, c in enumerate(turn["calls"]):  # each inspection's frames are built once its expander is opened
        if c["tool"] == "inspect":
            at.session_state[f"w_inspect_{turn['turn']}_{i}"] = True
    at.run()
    labels = [e.label for e in at.expander]
    captions = images(at)
    for c in turn["calls"]:
        ep = c["args"].get("episode") if c["tool"] == "inspect" else None
        if not ep or not ep.startswith("inherited:"):
            continue
        assert any(f"inspect {ep} (from run {name})" in lab for lab in labels), labels
        for step in {f["step"] for f in c["result"]["found"]}:
            assert any(cap.startswith(f"{ep} · step {step} · ") for cap in captions), (ep, step, captions)
    view = tv.turn_view(open_run(root / NEW), turn["turn"])
    for g, t in zip(turn["targets"], view.targets):
        seen = [c["args"]["episode"] for c in turn["calls"] if c["tool"] == "inspect"
                and any((f["x"], f["y"]) == (g["x"], g["y"]) for f in c["result"].get("found", []))]
        assert list(t.seen_in) == [f"{e} (from run {name})" if e.startswith("inherited:") else e
                                   for e in dict.fromkeys(seen)]


def test_retarget_audit_names_inherited_inspections(root: Path) -> None:
    run, name, index = open_run(root / NEW), origin_name(root), copy_index(root)
    turn = inherited_turn(root)
    audit = ap.retarget_audit(run, turn["turn"])
    calls = [c for c in turn["calls"] if c["tool"] == "inspect"]
    assert [i["episode"] for i in audit.inspections] == [c["args"]["episode"] for c in calls]
    for i in audit.inspections:
        if i["inherited"]:
            own = index[i["episode"].removeprefix("inherited:")]
            assert (i["from_run"], i["x"], i["y"], i["last_step"], i["counted"]) == (
                name, own["x"], own["y"], own["last_step"], False)
    table = ap.retarget_turns(run).set_index("turn")
    if turn["turn"] in table.index:
        shown = table.loc[turn["turn"], "inspected"]
        assert all(f"{c['args']['episode']} (from run {name})" in shown for c in calls
                   if c["args"]["episode"].startswith("inherited:"))


def test_retargeting_page_shows_inherited_frames_from_the_copy(root: Path) -> None:
    def shown(t: dict) -> list[str]:
        return inspected_episodes(t)[:3]

    def found(t: dict, ep: str) -> bool:
        return any(c["result"].get("found") for c in t["calls"] if c["tool"] == "inspect" and c["args"]["episode"] == ep)

    turn = next(t for t in jsonl(root / NEW / "turns.jsonl") if any(not g.get("in_plan") for g in t["targets"])
                and any(ep.startswith("inherited:") for ep in shown(t)) and all(found(t, ep) for ep in shown(t)))
    at = open_app("retargeting", runs=NEW, turn=str(turn["turn"]))
    assert not at.warning, [w.value for w in at.warning]
    name = origin_name(root)
    captions = images(at)
    frames = next(v for k, v in links(at).items() if k.startswith("Compare these frames in Frames"))["frames"][0]
    frames = frames.split(",")
    for ep in shown(turn):
        step, _ = shown_step(turn, ep, None)
        if ep.startswith("inherited:"):
            assert any(c.startswith(f"inspected {ep} (from run {name}) · step {step} of that run · ") for c in captions)
            assert f"{COPY}:{step}" in frames
        else:
            assert any(c.startswith(f"inspected {ep} · step {step} · ") for c in captions) and f"{NEW}:{step}" in frames


def test_provenance_graph_names_inherited_sources(root: Path) -> None:
    run, name, index = open_run(root / NEW), origin_name(root), copy_index(root)
    writes = jsonl(root / NEW / "memory_writes.jsonl")
    raw_sources = {s for w in writes for s in w["sources"] if s.startswith("inherited:")}
    cited = {s.strip() for line in writes[0]["snapshot"].splitlines() if (m := FACT_LINE.match(line)) and m["src"]
             for s in m["src"].split(",")}
    g = pv.build_graph(run)
    nodes = {n.id: n for n in g.nodes if n.kind == "episode" and n.id.startswith("inherited:")}
    assert cited <= set(nodes) <= raw_sources
    for ep, n in nodes.items():
        own = index[ep.removeprefix("inherited:")]
        assert n.label.startswith(f"{ep} (from run {name}), steps {own['first_step']}–{own['last_step']} of that run")
        d = pv.node_detail(run, g, ep).episodes.iloc[0]
        assert (d["from_run"], d["first_step"], d["last_step"], d["frames"]) == (
            name, own["first_step"], own["last_step"], own.get("frames", 0))


def test_provenance_page_opens_an_inherited_episode_in_the_copy(root: Path) -> None:
    writes = jsonl(root / NEW / "memory_writes.jsonl")
    index = copy_index(root)
    ep = next(s for s in writes[0]["sources"] if index[s.removeprefix("inherited:")].get("frames"))
    own = index[ep.removeprefix("inherited:")]
    at = open_app("provenance", runs=NEW, node=ep)
    strip = [c for c in images(at)]
    assert strip and all(c.startswith("step ") for c in strip)
    assert {int(c.split()[1]) for c in strip} <= set(range(own["first_step"] + 1, own["last_step"] + 1))
    got = links(at)
    timeline = got[f"{ep} in Timeline"]
    assert (timeline["run"], timeline["ep"], timeline["runs"]) == ([COPY], [own["id"]], [f"{NEW},{COPY}"])
    assert got[f"{ep} in Frames"]["frames"] == [f"{COPY}:{own['id']}"]
    there = open_app("timeline", **{k: v[0] for k, v in timeline.items()})
    assert there.subheader[0].value.startswith(own["id"])


def test_memory_page_links_inherited_sources_to_the_copy(root: Path) -> None:
    at = open_app("memory", runs=NEW, file="mine/GUIDE.md", asof="0")
    table = next(d.value for d in at.dataframe if "cites" in d.value.columns)
    facts = [(m["src"].split(", "), cites, link) for text, cites, link in
             zip(table["text"], table["cites"], table["episode"]) if (m := FACT_LINE.match(text)) and m["src"]]
    assert facts and all(s.startswith("inherited:") for src, _, _ in facts for s in src)
    for src, cites, link in facts:
        assert cites == ", ".join(src)
        query, _, shown = link.partition("?")[2].partition("#")
        params = parse_qs(query)
        assert shown == src[0] and params["run"] == [COPY] and params["ep"] == [src[0].removeprefix("inherited:")]
    assert all(isinstance(v, str) for v in table["turn"])


def test_timeline_names_an_inherited_episode_and_links_its_copy(root: Path) -> None:
    ep = jsonl(root / NEW / "memory_writes.jsonl")[0]["sources"][0]
    at = open_app("timeline", runs=NEW, ep=ep)
    assert f"{ep} (from run {origin_name(root)}) is an episode of the run whose memory" in texts(at)
    assert not at.warning
    link = links(at)[f"Open {ep} in the copy of that run"]
    assert (link["run"], link["ep"]) == ([COPY], [ep.removeprefix("inherited:")])


def test_frames_page_reads_inherited_frames_from_the_copy(root: Path) -> None:
    ep = jsonl(root / NEW / "memory_writes.jsonl")[0]["sources"][0]
    at = open_app("frames", runs=NEW, frames=f"{NEW}:{ep},{COPY}:{ep.removeprefix('inherited:')}")
    assert not at.error, [e.value for e in at.error]
    at = open_app("frames", runs=NEW)
    ins = agent_calls.run_inspections(open_run(root / NEW))
    k = next(i for i, r in enumerate(ins.itertuples()) if r.inherited and r.target_step is not pd.NA)
    at.session_state["w_pick"] = "From an inspection"
    at.run()
    at.selectbox(key="w_insp").set_value(k).run()
    at.button(key="use_insp").click().run()
    assert not at.exception and not at.error
    row = ins.iloc[k]
    assert at.query_params["frames"] == f"{COPY}:{row['target_step']},{NEW}:{row['step']}"


def test_notebook_helpers_read_inherited_episodes_from_the_copy(root: Path) -> None:
    run, name = open_run(root / NEW), origin_name(root)
    ep = jsonl(root / NEW / "memory_writes.jsonl")[0]["sources"][0]
    row = copy_index(root)[ep.removeprefix("inherited:")]
    assert repr(run).endswith(f", inherited memory of {name}>")
    assert repr(Episode(run, ep)).startswith(f"<Episode {ep} (from run {name}) of {NEW}: ")
    assert Episode(run, ep).row.last_step == row["last_step"]
    turn = inherited_turn(root)
    frames = Turn(run, turn["turn"]).frames()
    assert all(error is None for _, _, error in frames), frames
    assert any(caption.startswith("inspected inherited:") and caption.endswith(" of that run")
               for caption, _, _ in frames)


def test_a_copy_leading_outside_the_run_is_not_read(root: Path, tmp_path: Path, monkeypatch) -> None:
    evil_root = tmp_path / "runs"
    shutil.copytree(root / NEW, evil_root / NEW, ignore=shutil.ignore_patterns("inherited"))
    (evil_root / NEW / "inherited").symlink_to(root / EARLIER, target_is_directory=True)
    run = open_run(evil_root / NEW)
    assert copy_of(run) is None
    ref = locate(run, jsonl(root / NEW / "memory_writes.jsonl")[0]["sources"][0])
    assert ref.holder is None and ref.row is None and ref.origin == origin_name(root)
    use_root(monkeypatch, evil_root)
    turn = inherited_turn(root)
    at = open_app("turns", runs=NEW, turn=str(turn["turn"]))
    assert not any("inherited:" in c for c in images(at))
    at = open_app("provenance", runs=NEW, node=ref.id)
    assert "no link to it" in texts(at)

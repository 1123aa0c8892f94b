"""The provenance graph of agent-written memory, contradictions of memory lines, and figure
manifests, on hand-built runs whose answers are known by construction; the Provenance page
through Streamlit's AppTest."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from conftest import manifest, open_app, use_root, vega_tables
from dashboard import figures
from loaders import analysis_pages as ap
from loaders import provenance as pv
from loaders.run import open_run
from mfm.memory import RunWriter
from mfm.memory.consolidation import Fact, Target, WorkingPlan, consolidate
from mfm.memory.procedures import ProceduralMemory, Procedure
from mfm.schema import StepRow, TurnRow

APP = str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py")
ATOMS = ("go_to", "collect", "place")
IRON, TABLE = "res:iron@3,4", "place:table@1,1"


def write_memory_run(run_dir: Path) -> tuple[Path, list[str]]:
    """Three 10-step episodes A (steps 1-10), B (11-20), C (21-30); the agent stands at (0, 0)
    until step 15, then at (2, 2). Memory, in write order:

    - step 5: GUIDE.md gets facts IRON and TABLE (citing A); working.md plans targets (10, 10)
      and (2, 2);
    - step 8: procedure chop v1 (citing A); step 12: chop v2 (changed steps, citing B);
    - step 15: IRON's value changes (citing B); the plan drops (10, 10) — never reached;
    - step 20: chop disabled because of C; step 22: notes.md created;
    - step 25: TABLE retracted (citing C); the plan drops (2, 2) — reached at step 16.

    A turn beginning at step 10 runs chop — v1, the version current then — in episode B."""
    w = RunWriter(run_dir, manifest())
    frame = np.zeros((64, 64, 3), dtype=np.uint8)
    eps = []
    for i in range(3):
        rec = w.begin_episode(kind="episode", life=0, turn=i, action_kind="go_to", first_step=10 * i, action={})
        for s in range(10 * i + 1, 10 * i + 11):
            pos = (0, 0) if s <= 15 else (2, 2)
            rec.add_step(frame + s, StepRow(step=s, life=0, episode=rec.id, action="noop", x=pos[0], y=pos[1],
                                            facing=(1, 0), health=9, food=9, drink=9, energy=9, inventory={},
                                            reward=0.0))
        row = w.end_episode(rec, observation=frame, state={}, outcome={}, summary=f"episode {'ABC'[i]}", tags=[],
                            events=[], x=pos[0], y=pos[1], outcome_label="done")
        eps.append(row.id)
    a, b, c = eps
    w.record_turn(TurnRow(turn=1, life=0, first_step=10, last_step=20, policy="test",
                          calls=({"tool": "procedure", "args": {"name": "chop"}, "result": {"episode": b}},),
                          targets=(), plan_before=(), plan_after=(), episodes=(b,)))
    mem, pm = w.memory, ProceduralMemory(w.memory, ATOMS)
    plan = lambda *ts: WorkingPlan("diamond", tuple(Target(x, y, lab) for x, y, lab in ts))  # noqa: E731
    consolidate(mem, [Fact(IRON, "iron at (3, 4)", "Resources", (a,)), Fact(TABLE, "my table at (1, 1)", "Places",
                                                                             (a,))],
                plan=plan((10, 10, "iron"), (2, 2, "table")), step=5, reason="first look")
    chop = Procedure("chop", "collect wood", ({"atom": "go_to", "args": {"x": 1}},), sources=(a,))
    pm.save(chop, author="agent", reason="worked once", sources=(a,), step=8)
    pm.save(Procedure("chop", "collect wood", ({"atom": "go_to", "args": {"x": 1}}, {"atom": "collect"}),
                      sources=(b,)), author="agent", reason="needs a collect", sources=(b,), step=12)
    consolidate(mem, [Fact(IRON, "no iron at (3, 4)", "Resources", (b,))], plan=plan((2, 2, "table")), step=15,
                reason="iron gone")
    pm.disable("chop", reason="the player died while running it", sources=(c,), step=20, author="agent")
    mem.write("notes.md", "a note\n", author="agent", reason="remember", sources=[c], step=22)
    consolidate(mem, [Fact(TABLE, "", sources=(c,), retract=True)], plan=plan(), step=25, reason="table gone")
    w.close("finished", "budget")
    return run_dir, eps


def write_big_history(run_dir: Path, writes: int = 800) -> Path:
    """A run whose GUIDE.md gets ``writes`` consolidations, each adding one fact and revising
    another, every fact citing its own episode id: 3 * writes - 1 nodes, over the budget."""
    w = RunWriter(run_dir, manifest())
    for i in range(writes):
        consolidate(w.memory, [Fact(f"res:k{i}", f"thing {i}", "Resources", (f"ep_{i:06d}",)),
                               Fact(f"res:k{i // 2}", f"thing {i} again", "Resources", (f"ep_{i:06d}",))],
                    step=i, reason="grow")
    w.close("finished", "budget")
    return run_dir


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("prov")
    write_big_history(root / "big_s0")
    return write_memory_run(root / "mem_s0")


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch, built: tuple[Path, list[str]]) -> None:
    use_root(monkeypatch, built[0].parent)


def edges_of(g: pv.Graph, kind: str) -> set[tuple[str, str]]:
    return {(e.src, e.dst) for e in g.edges if e.kind == kind}


def test_graph_known_by_construction(built) -> None:
    path, (a, b, c) = built
    g = pv.build_graph(open_run(path))
    ids = {n.id for n in g.nodes}
    assert {f"fact:{IRON}#1", f"fact:{IRON}#2", f"fact:{TABLE}#1", "proc:chop#1", "proc:chop#2", "proc:chop#3",
            "plan:mine/working.md#1", "plan:mine/working.md#2", "plan:mine/working.md#3",
            "file:mine/notes.md#1", a, b, c} == ids
    cites = edges_of(g, "cites")
    assert {(f"fact:{IRON}#1", a), (f"fact:{TABLE}#1", a), ("proc:chop#1", a), ("proc:chop#2", b),
            ("file:mine/notes.md#1", c)} <= cites
    # the revised line cites what it says: its sources merged (A, B)
    assert {(f"fact:{IRON}#2", a), (f"fact:{IRON}#2", b)} <= cites
    assert edges_of(g, "revises") == {(f"fact:{IRON}#2", f"fact:{IRON}#1"), ("proc:chop#2", "proc:chop#1"),
                                      ("proc:chop#3", "proc:chop#2"),
                                      ("plan:mine/working.md#2", "plan:mine/working.md#1"),
                                      ("plan:mine/working.md#3", "plan:mine/working.md#2")}
    assert edges_of(g, "disabled_because") == {("proc:chop#3", c)}
    assert edges_of(g, "used_in") == {("proc:chop#1", b)}
    off = g.node("proc:chop#3")
    assert off.disabled and "the player died" in off.label and off.step == 20
    assert not g.node("proc:chop#2").disabled
    assert g.node(f"fact:{TABLE}#1").ended == 25 and g.node(f"fact:{IRON}#2").ended is None
    assert [g.node(f"proc:chop#{i}").label.split(" ")[1] for i in (1, 2)] == ["v1", "v2"]
    assert g.node(a).step == 10 and g.problems == []


def test_step_filter(built) -> None:
    path, (a, b, c) = built
    g = pv.filter_steps(pv.build_graph(open_run(path)), 12, 20)
    assert {n.id for n in g.nodes if n.kind != "episode"} == {"proc:chop#2", "proc:chop#3", f"fact:{IRON}#2",
                                                               "plan:mine/working.md#2"}
    assert {n.id for n in g.nodes if n.kind == "episode"} == {a, b, c}
    assert ("proc:chop#2", "proc:chop#1") not in edges_of(g, "revises")
    assert ("proc:chop#3", "proc:chop#2") in edges_of(g, "revises")


def big_graph(chains: int, versions: int, episodes: int) -> pv.Graph:
    """A synthetic history: ``chains`` knowledge lines of ``versions`` versions each, every
    version citing two of ``episodes`` episodes."""
    rng = np.random.default_rng(0)
    nodes, edges = [], []
    for e in range(episodes):
        nodes.append(pv.Node(f"ep_{e:06d}", "episode", f"ep {e}", 10 * e, lo=10 * e, hi=10 * e))
    for c in range(chains):
        for v in range(1, versions + 1):
            nid = f"fact:k{c}#{v}"
            step = int(rng.integers(0, 10 * episodes))
            nodes.append(pv.Node(nid, "knowledge", f"k{c} v{v}", step, f"k{c}", v, v, lo=step, hi=step))
            if v > 1:
                edges.append(pv.Edge(nid, f"fact:k{c}#{v - 1}", "revises"))
            for e in rng.choice(episodes, 2, replace=False):
                edges.append(pv.Edge(nid, f"ep_{int(e):06d}", "cites"))
    return pv.Graph(nodes, edges)


@pytest.mark.parametrize("chains,versions,episodes,notes", [(300, 3, 2000, 1), (1200, 3, 500, 2), (4000, 2, 3000, 3),
                                                            (100, 2, 500, 0)])
def test_aggregation_stays_under_budget(chains: int, versions: int, episodes: int, notes: int) -> None:
    g = big_graph(chains, versions, episodes)
    out = pv.aggregate(g, 1500)
    assert len(out.nodes) <= 1500 and len(out.aggregated) == notes
    assert out.total == len(g.nodes)
    # nothing lost: every node of the full graph is itself or inside exactly one aggregate
    held = [m for n in out.nodes for m in (n.members or (n.id,))]
    assert sorted(held) == sorted(n.id for n in g.nodes)
    assert sum(n.count for n in out.nodes) == len(g.nodes)
    ids = {n.id for n in out.nodes}
    assert all(e.src in ids and e.dst in ids and e.src != e.dst for e in out.edges)
    if notes:
        assert out.where("ep_000000").aggregate and "episodes merged" in out.aggregated[0]
        assert out.where("fact:k0#1").aggregate == (notes > 1)
        assert sum(e.count for e in out.edges if e.kind == "cites") == sum(e.kind == "cites" for e in g.edges)


def test_aggregation_skips_merges_that_merge_nothing() -> None:
    g = big_graph(3000, 1, 100)
    out = pv.aggregate(g, 1500)
    assert len(out.nodes) <= 1500 and len(out.aggregated) == 1 and "step bins" in out.aggregated[0]
    assert all(not n.aggregate for n in out.nodes if n.kind == "episode")
    assert all(n.count > 1 for n in out.nodes if n.aggregate)


def test_view_caps_edges() -> None:
    out = pv.view(big_graph(200, 2, 400), budget=5000, max_edges=300)
    assert len(out.edges) == 300 and "edges drawn" in out.aggregated[-1]
    assert sum(e.kind == "revises" for e in out.edges) == 200


def test_node_detail(built) -> None:
    path, (a, b, c) = built
    run = open_run(path)
    g = pv.build_graph(run)
    d = pv.node_detail(run, g, f"fact:{IRON}#2")
    assert "no iron at (3, 4)" in d.text and "my table at (1, 1)" in d.text
    assert f"-- [{IRON}] iron at (3, 4) ({a})" in d.diff and f"+- [{IRON}] no iron at (3, 4) ({a}, {b})" in d.diff
    assert d.write.step == 15 and d.revisions == [f"fact:{IRON}#1", f"fact:{IRON}#2"]
    assert list(d.episodes["id"]) == [a, b] and list(d.episodes["frames"]) == [10, 10]
    assert list(d.episodes["first_step"]) == [0, 10] and list(d.episodes["summary"]) == ["episode A", "episode B"]
    off = pv.node_detail(run, g, "proc:chop#3")
    assert json.loads(off.text)["disabled"] is True and '+ "disabled": true,' in off.diff
    assert list(zip(off.episodes["relation"], off.episodes["id"])) == [("disabled_because", c)]
    ep = pv.node_detail(run, g, b)
    assert set(ep.cited_by) == {"proc:chop#1", "proc:chop#2", f"fact:{IRON}#2"} and ep.text is None
    assert pv.node_detail(run, g, "fact:nothing#1") is None


def test_contradictions_known_by_construction(built) -> None:
    path, (a, b, c) = built
    run = open_run(path)
    prov = ap.memory_provenance(run, "mine/GUIDE.md", 5)
    by_text = {t: r for t, r in zip(prov["text"], prov.to_dict("records"))}
    iron = by_text[f"- [{IRON}] iron at (3, 4) ({a})"]
    assert (iron["contradicted_at"], iron["contradiction"], iron["now"]) == (15, "revised", "no iron at (3, 4)")
    assert "iron gone" in iron["contradicted_by"] and iron["contradicting_sources"] == b
    table = by_text[f"- [{TABLE}] my table at (1, 1) ({a})"]
    assert (table["contradicted_at"], table["contradiction"], table["contradicting_sources"]) == (25, "retracted", c)
    assert int(prov["contradicted_at"].notna().sum()) == 2
    # same key, same value, more sources: no contradiction
    assert ap.memory_provenance(run, "mine/GUIDE.md", 15)["contradiction"].isna().sum() == len(
        ap.memory_provenance(run, "mine/GUIDE.md", 15)) - 1
    plan = pv.contradictions(run, "mine/working.md", 5)
    text = [b_.text.rstrip("\n") for b_ in pv.blame_as_of(run, "mine/working.md", 5)]
    hits = {text[i - 1]: (s, k) for i, s, k in zip(plan["line"], plan["contradicted_at"], plan["contradiction"])
            if isinstance(k, str)}
    assert hits == {"1. (10, 10) iron": (15, "abandoned")}
    proc = pv.contradictions(run, "mine/procedures/chop.json", 12)
    assert set(proc["contradiction"]) == {"disabled"} and set(proc["contradicted_at"]) == {20}
    assert set(proc["now"]) == {"the player died while running it"} and set(proc["contradicting_sources"]) == {c}
    assert pv.contradictions(run, "mine/procedures/chop.json", 20)["contradiction"].isna().all()


def test_provenance_figure_manifest_records_filters(built, tmp_path: Path) -> None:
    path, _ = built
    run = open_run(path)
    fig = figures.provenance_figure("mem_s0", run, lo=12, hi=20)
    m = figures.manifest(fig, "double")
    assert m["filters"] == {"range": [12, 20], "bins": 40} and m["steps"] == [12, 20]
    assert "range=12-20" in m["deep_link"] and m["deep_link"].startswith("/provenance?")
    fig.view = {"runs": "mem_s0", "run": "mem_s0", "range": "12-20", "node": "proc:chop#3"}
    m = figures.manifest(fig, "double")
    assert m["view"]["node"] == "proc:chop#3" and "node=proc%3Achop%233" in m["deep_link"]
    tl = figures.manifest(figures.timeline_figure("mem_s0", run, lo=5, hi=18, color_by="outcome"), "double")
    assert tl["filters"] == {"color": "outcome", "range": [5, 18]} and tl["steps"] == [5, 18]
    gr = figures.manifest(figures.grid_figure("mem_s0", run, lo=16), "single")
    assert gr["filters"] == {"range": [16, 30]}
    gr = figures.manifest(figures.grid_figure("mem_s0", run, kinds=["walked"]), "single")
    assert gr["filters"] == {"range": [0, 30], "kinds": ["walked"]}
    written = figures.save(fig, tmp_path, "double")
    assert {p.suffix for p in written} == {".svg", ".pdf", ".png", ".csv", ".json"}
    assert b"<svg" in (tmp_path / "provenance.svg").read_bytes()


def app(**params: str) -> AppTest:
    return open_app("provenance", **params)


def test_provenance_page_pick_and_deep_link(built) -> None:
    _, (a, b, c) = built
    at = app(runs="mem_s0", run="mem_s0")
    assert at.get("vega_lite_chart") and not at.get("plotly_chart")
    assert any("13 node(s)" in cap.value for cap in at.caption)
    nodes = next(t for t in vega_tables(at) if "id" in t.columns)
    assert len(nodes) == 13 and nodes["id"].is_unique
    assert at.selectbox(key="w_prov_node").value is None
    at.selectbox(key="w_prov_node").set_value(f"fact:{IRON}#2").run()
    assert not at.exception and at.query_params["node"] == f"fact:{IRON}#2"
    assert any(cd.language == "diff" and "no iron at (3, 4)" in cd.value for cd in at.code)
    assert any(cd.language == "markdown" and "my table at (1, 1)" in cd.value for cd in at.code)
    assert any(f"cites {b}" in m.value for m in at.markdown)
    at = app(runs="mem_s0", run="mem_s0", node="proc:chop#3", range="12-20")
    assert at.slider(key="w_prov_range").value == (12, 20)
    assert any("**disabled**" in m.value for m in at.markdown)
    assert any(f"disabled because {c}" in m.value for m in at.markdown)
    assert [b_.label for b_ in at.get("download_button")][-1] == "Manifest JSON"
    at.selectbox(key="w_prov_rev").set_value("proc:chop#1").run()
    assert not at.exception and at.query_params["node"] == "proc:chop#1"


def test_provenance_page_bad_node_and_episode(built) -> None:
    _, (a, b, c) = built
    at = app(runs="mem_s0", run="mem_s0", node="fact:../../etc/passwd#1")
    assert any("is not in the provenance graph" in w.value for w in at.warning)
    at = app(runs="mem_s0", run="mem_s0", node=b)
    assert any("Linked from 3 memory version(s)" in m.value for m in at.markdown)
    assert at.get("imgs") or at.get("image")


def test_memory_page_shows_contradictions(built) -> None:
    at = open_app("memory", runs="mem_s0", run="mem_s0", file="mine/GUIDE.md", asof="5")
    prov = next(d.value for d in at.dataframe if "contradiction" in d.value.columns)
    assert sorted(c for c in prov["contradiction"] if c) == ["retracted", "revised"]
    assert any("2 contradicted later" in cap.value for cap in at.caption)


def test_provenance_page_aggregates_a_big_history(built) -> None:
    big = pv.build_graph(open_run(built[0].parent / "big_s0"))
    assert len(big.nodes) == 3 * 800 - 1
    at = app(runs="big_s0", run="big_s0")
    notes = [i.value for i in at.info if "Aggregated" in i.value]
    assert any("800 episodes merged into" in n for n in notes)
    markers = sum(len(t) for t in vega_tables(at) if "id" in t.columns)
    assert 0 < markers <= pv.NODE_BUDGET
    agg = next(n for n in pv.view(big).nodes if n.id.startswith("bin:episode"))
    at.selectbox(key="w_prov_node").set_value(agg.id).run()
    assert not at.exception and any(f"{agg.count} node(s) merged" in c.value for c in at.caption)
    member = agg.members[0]
    at.selectbox(key="w_prov_member").set_value(member).run()
    assert not at.exception and at.query_params["node"] == member
    at = app(runs="big_s0", run="big_s0", range="0-100")
    assert not [i.value for i in at.info if "Aggregated" in i.value]

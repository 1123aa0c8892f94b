"""The Echo learner in the real Crafter game: it does not read the recipes, its run is a valid
run whose CSDs and Echo episodes link to recorded episodes, ICAL induces the stone pickaxe
from a wood pickaxe learned from real attempts, removing an axis changes what is induced,
the measurement command runs, and the Echo page renders and lets a CSD be picked."""
from __future__ import annotations

import ast
import json
from statistics import mean
from pathlib import Path

import pytest

from conftest import REPO, chart_layers, open_app, use_root, vega_data
from mfm.cli import main
from mfm.echo import AXES, CSDLibrary, HashingVectorizer, induce
from mfm.echo.agent import ATTEMPTS_FILE, VOCABULARY, Learner, run_learner
from mfm.echo.measure import LearnerRun, find_runs, speedup, success_at, table
from mfm.validate import validate

FORBIDDEN_MODULES = {"mfm.envs.rules", "mfm.agent.policy", "mfm.agent.llm"}
FORBIDDEN_NAMES = {"load_rules", "load_task", "CRAFT", "PLACE_COST", "COLLECT_GIVES", "MINE_TOOL", "MFMPolicy"}


@pytest.fixture(scope="module")
def learned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A passive learner run, seed 9, 30 Echo episodes, in the real game (it learns the wood
    pickaxe along the way)."""
    root = tmp_path_factory.mktemp("echo")
    run_learner("passive", 9, root / "passive_s9", episodes=30)
    return root


def _index_ids(run: Path) -> set[str]:
    return {json.loads(line)["id"] for line in (run / "index.jsonl").read_text().splitlines()}


def test_the_learner_code_names_no_recipe_source():
    for path in sorted((REPO / "mfm" / "echo").glob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                assert node.module not in FORBIDDEN_MODULES, f"{path.name} imports {node.module}"
                bad = {a.name for a in node.names} & FORBIDDEN_NAMES
                assert not bad, f"{path.name} imports {bad}"
            elif isinstance(node, ast.Import):
                assert not {a.name for a in node.names} & FORBIDDEN_MODULES, path.name
            elif isinstance(node, ast.Name):
                assert node.id not in FORBIDDEN_NAMES, f"{path.name}:{node.lineno} uses {node.id}"


def test_the_learner_runs_with_the_recipes_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import mfm.agent.atoms as atoms
    import mfm.envs.rules as rules

    def refuse(*_a, **_k):
        raise AssertionError("the learner read Crafter's rules")

    monkeypatch.setattr(rules, "_read_json", refuse)
    monkeypatch.setattr(atoms, "CRAFT", {})
    monkeypatch.setattr(atoms, "PLACE_COST", {})
    d = Learner("ical", 0, tmp_path / "run", episodes=8).run()
    assert json.loads((d / "run.json").read_text())["status"] == "finished"
    assert len((d / ATTEMPTS_FILE).read_text().splitlines()) == 8
    kinds = [json.loads(line)["action_kind"] for line in (d / "index.jsonl").read_text().splitlines()]
    assert "wait" in kinds and "shelter" in kinds, "the run went through a night with its survival reflexes"


def _fresh_learner(config: str, tmp_path: Path) -> Learner:
    learner = Learner(config, 0, tmp_path / config, episodes=1)
    learner._pending, learner.fresh, learner.generalised = [], [], set()
    learner._start()
    return learner


def _verified(task: str, action: str, target: str | None, before: dict, after: dict, chain: tuple = ()):
    from mfm.echo import Attempt, describe

    return describe(Attempt(action=action, target=target, inventory_before=before, inventory_after=after,
                            nearby=("grass", "tree"), chain=chain), True)


@pytest.mark.parametrize("config", ["ical", "ical-no-proc"])
def test_an_induced_candidates_proc_plan_is_followed_in_order(tmp_path: Path, config: str):
    """A hand-built library: collect_wood verified; an induced candidate (place_table) whose
    proc axis holds the plan [collect_wood]. ICAL replays the plan's step before trying the
    candidate; without the proc axis the plan is not followed."""
    from dataclasses import replace

    learner = _fresh_learner(config, tmp_path)
    learner.library.put(_verified("collect_wood", "do", "tree", {}, {"wood": 1}))
    cand = _verified("place_table", "place_table", "grass", {"wood": 1}, {})
    cand = replace(cand, status="candidate", successes=0, proc={"chain": ["collect_wood"], "gives": {}},
                   induced_from=({"id": "task:collect_wood", "role": "representative", "score": 1.0},))
    learner.library.put(cand)
    assert learner.have("wood") == 0
    learner._attempt_candidate(cand)
    learner.writer.wait()
    acts = [(json.loads(line)["action_kind"], json.loads(line)["summary"])
            for line in (learner.writer.dir / "index.jsonl").read_text().splitlines()[1:]]
    tries = [i for i, (k, _) in enumerate(acts) if k == "try" and "place_table" in acts[i][1]]
    gathers = [i for i, (k, s) in enumerate(acts) if k == "do" and "target=tree" in s]
    assert tries, acts
    if config == "ical":
        assert learner.followed == ["collect_wood"]
        assert gathers and gathers[0] < tries[0], "the plan's step came before the try"
    else:
        assert learner.followed == []
    learner.writer.close("finished", "test")


def test_the_precheck_sends_the_learner_to_a_material_it_has_only_seen(tmp_path: Path):
    """A candidate predicted to consume stone, with no verified way to get stone: once stone
    has been seen, the candidate counts as feasible and the learner acts on the stone it saw
    before it tries the candidate (without a pickaxe that fails, and is recorded)."""
    from dataclasses import replace

    learner = _fresh_learner("ical", tmp_path)
    cand = _verified("place_stone", "place_stone", "grass", {"stone": 1}, {})
    cand = replace(cand, status="candidate", successes=0, proc={"chain": [], "gives": {}},
                   struct={"near": [], "faces": "grass"},
                   induced_from=({"id": "task:x", "role": "representative", "score": 1.0},))
    learner.library.put(cand)
    assert learner.source_of("stone", set()) is None and not learner._feasible(cand)
    for _ in range(10):
        if learner._seen("stone"):
            break
        learner._episode("explore", {}, "look", lambda atoms: (learner._explore(atoms, ["stone"]) or True, "x"))
    assert learner._feasible(cand), "a material seen as a tile counts as obtainable"
    learner.attempt_start = learner.p.step
    learner._attempt_candidate(cand)
    learner.writer.wait()
    acts = [json.loads(line)["summary"] for line in (learner.writer.dir / "index.jsonl").read_text().splitlines()]
    gather = next(i for i, a in enumerate(acts) if a.startswith("do(target=stone)"))
    attempt = next(i for i, a in enumerate(acts) if a.startswith("try(action=place_stone)"))
    assert gather < attempt
    assert learner.library.get("task:collect_stone") is not None
    learner.writer.close("finished", "test")


def test_a_learner_run_is_valid_and_its_csds_link_to_its_episodes(learned: Path):
    run = learned / "passive_s9"
    check = validate(run)
    assert check.errors == [], check.errors
    ids = _index_ids(run)
    lines = [json.loads(x) for x in (run / "csd.jsonl").read_text().splitlines()]
    assert lines and all(set(c["episodes"]) <= ids for c in lines)
    assert any(c["episodes"] for c in lines)
    attempts = [json.loads(x) for x in (run / ATTEMPTS_FILE).read_text().splitlines()]
    assert [a["episode"] for a in attempts] == list(range(30))
    seen: list[str] = []
    for a in attempts:
        assert set(a["mfm_episodes"]) <= ids
        seen += a["mfm_episodes"]
        assert a["success"] == (a["goal"] in a["unlocked"])
    assert len(seen) == len(set(seen)) and seen == sorted(seen), "Echo episodes own disjoint, ordered episodes"
    curve = [len(a["unlocked"]) for a in attempts]
    assert curve == sorted(curve) and curve[-1] >= 3


def test_ical_induces_the_stone_pickaxe_from_a_wood_pickaxe_learned_in_the_game(learned: Path):
    lib, problems = CSDLibrary.open(learned / "passive_s9", HashingVectorizer())
    assert problems == []
    rep = lib.get("task:make_wood_pickaxe")
    assert rep is not None and rep.status == "verified", "the run learned the wood pickaxe"
    assert rep.attr["consumes"] == {"wood": 1} and "table" in rep.struct["near"], "learned from its attempts"
    matches = lib.similar(rep, k=6, statuses=("verified", "failed"))
    stone = {c.task: c for c in induce(rep, matches, lib, VOCABULARY)}.get("make_stone_pickaxe")
    assert stone is not None
    assert stone.status == "candidate" and stone.induced_from[0]["id"] == rep.id
    assert "table" in stone.struct["near"] and stone.attr["consumes"].get("stone") == 1
    assert stone.inter["action"] == "make_stone_pickaxe"
    assert rep.proc["chain"] == ["collect_wood", "place_table"], "its plan, learned from its own library"
    assert stone.proc["chain"] == ["collect_stone", "place_table"], "the plan with the material substituted"


def test_removing_an_axis_changes_what_is_induced(learned: Path):
    lib, _ = CSDLibrary.open(learned / "passive_s9", HashingVectorizer())
    rep = lib.get("task:make_wood_pickaxe")

    def induced(axes) -> dict:
        return {c.task: c for c in induce(rep, lib.similar(rep, k=6, axes=axes, statuses=("verified", "failed")),
                                          lib, VOCABULARY, axes=axes)}

    full = induced(AXES)
    no = {a: induced(tuple(x for x in AXES if x != a)) for a in AXES}
    assert "make_stone_pickaxe" in full
    assert no["struct"]["make_stone_pickaxe"].struct["near"] == []
    assert no["inter"]["make_stone_pickaxe"].inter["action"] is None
    assert no["proc"]["make_stone_pickaxe"].proc == {"chain": [], "gives": {}}
    assert "make_stone_pickaxe" not in no["attr"] or no["attr"]["make_stone_pickaxe"].attr["consumes"] == {}
    assert not any(t.startswith("make_wood_") for t in no["func"]), "without func no form is substituted"


def _attempts(config: str, seed: int, unlocks: dict[int, list[str]], n: int = 30) -> LearnerRun:
    got: list[str] = []
    rows = []
    for e in range(n):
        got += unlocks.get(e, [])
        rows.append({"episode": e, "config": config, "seed": seed, "unlocked": list(got)})
    return LearnerRun(Path("."), config, seed, tuple(rows))


def test_success_at_k_and_speedup():
    slow = _attempts("passive", 0, {2: ["collect_wood"], 9: ["place_table"], 20: ["place_plant"]})
    fast = _attempts("ical", 0, {1: ["collect_wood"], 4: ["place_table", "place_plant"]})
    assert success_at(slow, "Utility blocks", 10) == pytest.approx(1 / 3)
    assert success_at(slow, "Utility blocks", 30) == pytest.approx(2 / 3)
    assert success_at(fast, "Utility blocks", 10) == pytest.approx(2 / 3)
    s = speedup([fast], [slow])
    assert s["episodes_ratio"] == pytest.approx(21 / 5)
    assert s["auc_ratio"] > 1
    assert s["per_seed"] == [pytest.approx(s["auc_ratio"])] and s["ci"] is None and s["iqr"] is None
    slow1 = _attempts("passive", 1, {0: ["collect_wood"]})
    fast1 = _attempts("ical", 1, {0: ["collect_wood"]})
    two = speedup([fast, fast1], [slow, slow1])
    assert two["per_seed"][1] == pytest.approx(1.0) and two["median"] == pytest.approx(mean(two["per_seed"]))
    low, high = two["ci"]
    assert 1.0 <= low <= two["auc_ratio"] <= high <= s["auc_ratio"]
    text = table([slow, fast])
    assert "| passive | 0 |" in text and "| ical | 0 |" in text and "Speed-up" in text


def test_mfm_echo_commands(tmp_path: Path, capsys: pytest.CaptureFixture):
    out = tmp_path / "echo"
    assert main(["echo", "run", "--configs", "passive,ical-no-func", "--seeds", "0", "--episodes", "3",
                 "--jobs", "1", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Recipe @0->10" in text and "| passive | 0 |" in text and "| ical-no-func | 0 |" in text
    assert main(["echo", "run", "--configs", "passive", "--seeds", "0", "--episodes", "3", "--out", str(out)]) == 0
    assert "kept (already finished)" in capsys.readouterr().out
    with open(out / "passive_s0" / ATTEMPTS_FILE, "a") as f:
        f.write("{broken\n")
    assert main(["echo", "report", str(out)]) == 0
    captured = capsys.readouterr()
    assert f"passive_s0/{ATTEMPTS_FILE}:4" in captured.err and "| passive | 0 |" in captured.out
    assert len(find_runs(out)[0]) == 2
    assert main(["echo", "run", "--configs", "ical-no-vision", "--out", str(out)]) == 2
    assert "unknown Echo configuration" in capsys.readouterr().err


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch, learned: Path) -> None:
    use_root(monkeypatch, learned)


def test_echo_page_renders_and_picks_a_csd(fresh, learned: Path):
    at = open_app("echo", runs="passive_s9")
    assert at.title[0].value == "Echo"
    assert len(at.get("vega_lite_chart")) == 1, "the unlock curve"
    picker = next(s for s in at.selectbox if s.label == "Descriptor")
    picker.set_value("task:make_wood_pickaxe").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.query_params["csd"] == ["task:make_wood_pickaxe"] or at.query_params["csd"] == "task:make_wood_pickaxe"
    assert any('"make_wood_pickaxe"' in c.value for c in at.code)
    links = [p for p in at.get("page_link")]
    assert links and all("ep_" in p.proto.label for p in links)


def test_echo_page_without_learner_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    from conftest import write_run

    write_run(tmp_path / "plain", episodes=3)
    use_root(monkeypatch, tmp_path)
    at = open_app("echo", runs="plain")
    assert any("No learner run" in i.value for i in at.info)


def test_echo_loader_reads_a_damaged_library(learned: Path, tmp_path: Path):
    from loaders import echo

    run = tmp_path / "copy"
    run.mkdir()
    text = (learned / "passive_s9" / "csd.jsonl").read_text()
    n = len(text.splitlines())
    (run / "csd.jsonl").write_text(text + '{"id": "task:x"}\n{broken\n')
    csds, problems = echo.read_csds(run)
    assert [(p.file, p.line) for p in problems] == [("csd.jsonl", n + 1), ("csd.jsonl", n + 2)]
    assert "task" in problems[0].message
    assert csds["task:make_wood_pickaxe"].status == "verified"
    table = echo.csd_table(csds)
    assert set(table["id"]) == set(csds) and table["episodes"].min() >= 0
    axes = echo.csd_axes(csds["task:make_wood_pickaxe"])
    assert list(axes) == ["meta", *AXES] and "vectors" not in axes


def test_analogy_graph_of_an_induced_task(learned: Path, tmp_path: Path):
    import shutil

    from dashboard import vega_charts
    from loaders import echo

    run = tmp_path / "ical"
    run.mkdir()
    shutil.copy(learned / "passive_s9" / "csd.jsonl", run / "csd.jsonl")
    lib, _ = CSDLibrary.open(run, HashingVectorizer(), writable=True)
    assert lib.get("task:collect_stone") is None or lib.get("task:collect_stone").status != "verified"
    lib.put(_verified("collect_stone", "do", "stone", {"wood_pickaxe": 1}, {"wood_pickaxe": 1, "stone": 1},
                      chain=("make_wood_pickaxe",)))
    rep = lib.get("task:make_wood_pickaxe")
    matches = lib.similar(rep, k=len(lib), statuses=("verified", "failed"))
    assert "task:collect_stone" in [m.csd.id for m in matches]
    induced = induce(rep, matches, lib, VOCABULARY)
    for c in induced:
        lib.put(c)
    plan = next(c for c in induced if c.task == "make_stone_pickaxe").proc["chain"]
    assert plan == ["make_wood_pickaxe", "collect_stone", "place_table"], "the donor's plan, then the analogy's"
    csds, problems = echo.read_csds(run)
    assert problems == []
    edges = echo.analogy_edges(csds)
    stone = edges[edges["target"] == "make_stone_pickaxe"]
    assert list(stone["role"])[0] == "representative" and list(stone["source"])[0] == "make_wood_pickaxe"
    assert len(stone) == 2 and list(stone["source"])[1] == "collect_stone" and "attr" in list(stone["axes"])[1]
    assert set(edges["status"]) == {"candidate"}
    graph = chart_layers(vega_charts.analogy_graph(echo.analogy_layout(csds, edges), edges))
    names = {r["task"] for la in graph if la["mark"]["type"] == "text" for r in la["rows"] if "task" in r}
    assert {"make_wood_pickaxe", "make_stone_pickaxe"} <= names
    drawn = {(r["axes"], r["role"]) for la in graph if la["mark"]["type"] == "rule" for r in la["rows"]}
    assert drawn == set(zip(edges["axes"], edges["role"]))


def test_echo_page_on_the_shipped_learner_samples(monkeypatch: pytest.MonkeyPatch):
    """sample_runs/echo holds an ical and a passive run of the same seed: the page draws both
    unlock curves and the ICAL run's analogy graph out of the box."""
    from mfm.samples import ECHO_SAMPLES

    names = [n for n, *_ in ECHO_SAMPLES]
    assert {c for _, c, *_ in ECHO_SAMPLES} == {"ical", "passive"} and len({s for *_, s, _ in ECHO_SAMPLES}) == 1
    use_root(monkeypatch, REPO / "sample_runs")
    ical = next(n for n in names if "/ical_" in n)
    at = open_app("echo", runs=",".join(names), run=ical)
    charts = vega_data(at)
    assert len(charts) == 2 and not at.get("plotly_chart"), "the unlock curves and the analogy graph"
    curves, graph = charts
    assert {"ical", "passive"} <= {m for t in curves if "mean" in t.columns for m in t["method"]}
    assert any("place_stone" in set(t["task"]) for t in graph if "task" in t.columns), "an induced task in the graph"

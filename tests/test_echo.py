"""Echo core: descriptors from attempts, per-axis retrieval, analogy induction, pre-checks."""
from __future__ import annotations

from pathlib import Path

import pytest

from mfm.echo import AXES, Attempt, CSDLibrary, HashingVectorizer, describe, induce, precheck, refine
from mfm.echo.csd import CSD, tokens
from mfm.envs.crafter_env import ACHIEVEMENTS, ACTIONS

VOCAB = set(ACTIONS) | set(ACHIEVEMENTS)


def attempt(action, before, after, nearby=(), target=None, unlocked=(), chain=(), ep="ep_000001"):
    return Attempt(action=action, target=target, inventory_before=before, inventory_after=after,
                   nearby=tuple(nearby), unlocked=tuple(unlocked), chain=tuple(chain), episodes=(ep,))


WOOD = attempt("do", {}, {"wood": 1}, ["tree", "grass"], target="tree", unlocked=["collect_wood"])
TABLE = attempt("place_table", {"wood": 3}, {"wood": 2}, ["grass"], target="grass", unlocked=["place_table"],
                chain=["collect_wood"])
WOOD_PICK = attempt("make_wood_pickaxe", {"wood": 2}, {"wood": 1, "wood_pickaxe": 1}, ["table", "grass"],
                    unlocked=["make_wood_pickaxe"], chain=["collect_wood", "place_table"])
STONE = attempt("do", {"wood_pickaxe": 1}, {"wood_pickaxe": 1, "stone": 1}, ["stone", "path"], target="stone",
                unlocked=["collect_stone"], chain=["make_wood_pickaxe"])
WOOD_SWORD = attempt("make_wood_sword", {"wood": 1}, {"wood_sword": 1}, ["table"], unlocked=["make_wood_sword"])


@pytest.fixture
def library(tmp_path: Path) -> CSDLibrary:
    lib, problems = CSDLibrary.open(tmp_path, HashingVectorizer(), writable=True)
    assert problems == []
    for a in (WOOD, TABLE, WOOD_PICK, STONE):
        lib.put(describe(a, True))
    return lib


def test_describe_reads_only_what_the_attempt_showed():
    c = describe(WOOD_PICK, True)
    assert c.task == "make_wood_pickaxe"
    assert c.attr["consumes"] == {"wood": 1} and c.proc["gives"] == {"wood_pickaxe": 1}
    assert c.struct["near"] == ["grass", "table"]
    assert c.func == {"product": "wood_pickaxe", "form": "pickaxe", "role": "tool", "material": "wood"}
    assert describe(STONE, True).attr["tools"] == ["wood_pickaxe"]
    failed = describe(attempt("make_stone_pickaxe", {"stone": 1}, {"stone": 1}, ["table"]), False)
    assert failed.status == "failed" and failed.inter["failed_contexts"] == [{"have": {"stone": 1},
                                                                              "near": ["table"]}]


def test_tokens_split_names_into_parts():
    toks = set(tokens({"consumes": {"wood": 1}, "product": "wood_pickaxe"}))
    assert {"consumes", "consumes.wood", "wood", "consumes.wood=1", "pickaxe", "product=wood_pickaxe"} <= toks


def test_per_axis_similarity_finds_the_same_form_and_material(library: CSDLibrary):
    query = describe(WOOD_SWORD, True)
    best = library.similar(query, k=4)
    assert best[0].csd.task == "make_wood_pickaxe"
    assert set(best[0].per_axis) == set(AXES)
    func_only = library.similar(describe(attempt("make_stone_pickaxe", {"wood": 1, "stone": 1},
                                                 {"stone_pickaxe": 1}, ["table"]), True), k=1, axes=("func",))
    assert func_only[0].csd.task == "make_wood_pickaxe" and func_only[0].per_axis["func"] > 0.5


def test_library_persists_versions_and_reports_damage(library: CSDLibrary, tmp_path: Path):
    c = library.get("task:make_wood_pickaxe")
    library.put(refine(c, WOOD_PICK, True))
    with open(tmp_path / "csd.jsonl", "a") as f:
        f.write("{broken\n")
    again, problems = CSDLibrary.open(tmp_path, HashingVectorizer())
    assert again.get("task:make_wood_pickaxe").successes == 2
    assert len(again) == 4 and len(again.history) == 5
    assert [(p.file, p.line) for p in problems] == [("csd.jsonl", 6)]
    assert again.representative().task == "make_wood_pickaxe"
    assert again.representative(exclude=["task:make_wood_pickaxe"]).task == "collect_stone"


def test_induce_substitutes_materials_and_forms(library: CSDLibrary):
    rep = library.get("task:make_wood_pickaxe")
    cands = induce(rep, library.similar(rep, k=3), library, VOCAB)
    tasks = {c.task for c in cands}
    assert "make_stone_pickaxe" in tasks
    assert all(c.status == "candidate" and c.task in VOCAB for c in cands)
    assert not tasks & {c.task for c in library if c.status == "verified"}
    stone = next(c for c in cands if c.task == "make_stone_pickaxe")
    assert stone.func["material"] == "stone" and stone.struct["near"] == ["grass", "table"]
    assert stone.induced_from[0]["id"] == rep.id and any("stone" in e["role"] for e in stone.induced_from[1:])


def test_a_failure_teaches_and_the_next_analogy_carries_it(library: CSDLibrary):
    rep = library.get("task:make_wood_pickaxe")
    stone_pick = next(c for c in induce(rep, library.similar(rep, k=3), library, VOCAB)
                      if c.task == "make_stone_pickaxe")
    assert precheck(stone_pick, {"stone": 1}, ["table"]) == (False, ["grass nearby"])
    ok, missing = precheck(stone_pick, {"stone": 1}, ["table", "grass"])
    assert ok, missing
    tried = attempt("make_stone_pickaxe", {"stone": 1}, {"stone": 1}, ["table", "grass"])
    stone_pick = refine(stone_pick, tried, False)
    ok, missing = precheck(stone_pick, {"stone": 1}, ["table", "grass"])
    assert not ok and "something new" in missing[-1]
    assert precheck(stone_pick, {"stone": 1, "wood": 1}, ["table", "grass"])[0]
    done = attempt("make_stone_pickaxe", {"stone": 1, "wood": 1}, {"stone_pickaxe": 1}, ["table", "grass"],
                   unlocked=["make_stone_pickaxe"])
    stone_pick = library.put(refine(stone_pick, done, True))
    assert stone_pick.status == "verified" and stone_pick.attr["consumes"] == {"stone": 1, "wood": 1}
    library.put(describe(WOOD_SWORD, True))
    sword = next(c for c in induce(stone_pick, library.similar(stone_pick, k=4), library, VOCAB)
                 if c.task == "make_stone_sword")
    assert sword.attr["consumes"] == {"stone": 1, "wood": 1}
    assert precheck(sword, {"wood": 1}, ["table", "grass"]) == (False, ["1 stone"])


def test_removing_an_axis_removes_what_it_carries(library: CSDLibrary):
    rep = library.get("task:make_wood_pickaxe")
    library.put(describe(WOOD_SWORD, True))
    matches = library.similar(rep, k=4)
    with_func = {c.task for c in induce(rep, matches, library, VOCAB)}
    no_func = {c.task for c in induce(rep, matches, library, VOCAB, axes=[a for a in AXES if a != "func"])}
    assert "make_wood_sword" not in with_func, "already verified, not a new task"
    stone_rep = library.put(describe(attempt("make_stone_pickaxe", {"stone": 1, "wood": 1}, {"stone_pickaxe": 1},
                                             ["table"], unlocked=["make_stone_pickaxe"]), True))
    m = library.similar(stone_rep, k=4)
    assert "make_stone_sword" in {c.task for c in induce(stone_rep, m, library, VOCAB)}
    assert "make_stone_sword" not in {c.task for c in induce(stone_rep, m, library, VOCAB,
                                                             axes=[a for a in AXES if a != "func"])}
    assert no_func <= with_func


def test_csd_from_dict_rejects_bad_input():
    with pytest.raises(ValueError, match="task"):
        CSD.from_dict({"id": "x"})
    with pytest.raises(ValueError, match="status"):
        CSD.from_dict({"id": "x", "task": "t", "status": "maybe"})


def test_a_repeated_success_is_named_by_what_it_gave():
    from mfm.echo.ical import task_name

    again = attempt("do", {"wood": 1}, {"wood": 2}, ["tree"], target="tree")
    assert task_name(again) == "collect_wood"
    cow = attempt("do", {"food": 3}, {"food": 9}, ["cow"], target="cow")
    assert task_name(cow) == "eat_cow"
    assert task_name(attempt("do", {}, {}, ["stone"], target="stone")) == "collect_stone"
    assert task_name(attempt("do", {}, {}, ["zombie"], target="zombie")) == "defeat_zombie"


def test_a_failed_task_is_no_donor(library: CSDLibrary):
    library.put(describe(attempt("make_stone_sword", {"stone": 3}, {"stone": 3}, ["table"]), False))
    rep = library.get("task:make_wood_pickaxe")
    matches = library.similar(rep, k=6, statuses=("verified", "failed"))
    assert any(m.csd.status == "failed" for m in matches)
    for c in induce(rep, matches, library, VOCAB):
        assert all(e["id"] != "task:make_stone_sword" for e in c.induced_from)

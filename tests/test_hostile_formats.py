"""Malformed foreign runs (issue 19, finding 6): a hostile MFM export or Crafter recording never
makes the loaders or ``mfm import`` raise. Each fault is one Problem naming the file (with the
data.json section or the .npz array key) and what is wrong; what is valid is still read."""
from __future__ import annotations

import copy
import io
import json
import shutil
import zipfile
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loaders import open_run, open_runs, runs_table
from loaders.formats import crafter_recorder
from loaders.provenance import blame_as_of, file_as_of
from loaders.run import TABLE_NAMES, Run
from loaders.runs_summary import problems_table, runs_overview
from mfm.boundary import UnsafePath
from mfm.cli import main
from mfm.memory.retrieval import FrameError
from mfm.schema import Problem
from mfm.validate import validate

from conftest import record_crafter, shared_export
SWAPS: dict[str, Any] = {"list": [1], "int": 7, "str": "x", "dict": {"a": 1}, "null": None, "bool": True}
BAD_NUMBERS = [float("nan"), float("inf"), -float("inf"), 1e15, -1e15, 1e308, 10 ** 30]
IDX = "data.json › index.jsonl"


@pytest.fixture(scope="module")
def raw() -> dict:
    """The shipped MFM export's data.json (the rule of tests/test_formats.py)."""
    return json.loads((shared_export() / "data.json").read_text())


@pytest.fixture(scope="module")
def recording(tmp_path_factory) -> Path:
    """One episode recorded by the real crafter.Recorder with a seeded random policy."""
    return next(record_crafter(tmp_path_factory.mktemp("rec"), seed=3, policy_seed=2, length=120).glob("*.npz"))


@pytest.fixture(scope="module")
def arrays(recording: Path) -> dict[str, np.ndarray]:
    with np.load(recording) as z:
        return {k: z[k] for k in z.files}


def write_export(d: Path, data: Any) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "data.json").write_text(data if isinstance(data, str) else json.dumps(data))
    return d


def write_npz(path: Path, a: dict[str, np.ndarray]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **a)
    return path


def exercise(path: Path) -> Run:
    """Every entry point of the loaders on one run: none may raise, but frame access may say
    there is no frame (FrameError) or refuse a path leaving the run (UnsafePath)."""
    run = open_run(path)
    assert run.manifest is not None, f"the source raised (a foreign run always has a manifest): {run.problems}"
    for p in run.problems:
        assert p.file and p.message and str(p).encode("utf-8")
    run.summary()
    problems_table(run)
    runs_overview([run], path.parent)
    for name in TABLE_NAMES.values():
        run.table(name)
    run.sql("select count(*) from episodes, (select count(*) from steps)").fetchall()
    assert run.status == "finished" and isinstance(run.is_3d, bool)
    for ref in run.records("index.jsonl"):
        run.episode_record(ref.id)
        try:
            run.observation(ref.id)
        except (FrameError, UnsafePath):
            pass
    for step in (-1, 0, 1, 5, 60, 10 ** 9):
        try:
            run.frame(step)
        except (FrameError, UnsafePath):
            pass
    for path in {w.path for w in run.records("memory_writes.jsonl")}:
        file_as_of(run, path)
        blame_as_of(run, path)
    return run


def problem(run: Run, file: str, *words: str, line: int | None = None) -> Problem:
    hits = [p for p in run.problems if p.file == file and all(w in p.message for w in words)
            and (line is None or p.line == line)]
    assert hits, f"no problem on {file}:{line} saying {words}; got {[str(p) for p in run.problems]}"
    return hits[0]


def ids(run: Run) -> list[str]:
    return [r.id for r in run.records("index.jsonl")]


# --- MFM export: the run section --------------------------------------------------------

RUN_KINDS = {"name": "str", "task": "str", "memory_mode": "str", "model": "str", "steps": "int",
             "last_step": "int", "ablations": "strs", "milestones": "dict", "title": None}


@pytest.mark.parametrize("swap", SWAPS)
def test_export_run_fields_of_any_type(raw, tmp_path, swap: str):
    data = copy.deepcopy(raw)
    data["run"].update({field: SWAPS[swap] for field in RUN_KINDS})
    run = exercise(write_export(tmp_path / "x", data))
    assert ids(run) == [r["id"] for r in raw["index"]] and len(run.turns()) == len(raw["turns"])
    said = " ".join(p.message for p in run.problems if p.file == "data.json › run")
    for field, kind in RUN_KINDS.items():
        fits = swap == "null" or kind in (None, swap)
        assert (f"{field} must" in said) != fits, (field, said)


@pytest.mark.parametrize("where, value, words", [
    ("achieved", ["water_1"], "milestones.achieved must be an object"),
    ("order", 3, "milestones.order must be a list of strings"),
    ("order", ["a", 1], "milestones.order"),
    ("achieved", {"water_1": float("nan"), "log_1": 3157}, "'water_1'"),
    ("achieved", {"water_1": 1e300, "log_1": 3157}, "'water_1'"),
    ("achieved", {"water_1": -5, "log_1": 3157}, "must not be negative"),
    ("achieved", {"water_1": "2322", "log_1": 3157}, "must be an integer"),
    ("achieved", {"water_1": True, "log_1": 3157}, "must be an integer"),
    ("achieved", {"water_1": [2322], "log_1": 3157}, "'water_1'"),
])
def test_export_milestones_of_any_type(raw, tmp_path, where: str, value: Any, words: str):
    data = copy.deepcopy(raw)
    data["run"]["milestones"][where] = value
    run = exercise(write_export(tmp_path / "x", data))
    problem(run, "data.json › run", words)
    if where == "achieved" and isinstance(value, dict):
        assert run.manifest.milestones == {"log_1": 3157}
        assert list(run.milestones()["name"]) == ["log_1"]
    assert len(ids(run)) == len(raw["index"])


def test_export_run_config_keeps_only_plain_json(raw, tmp_path):
    data = copy.deepcopy(raw)
    data["run"]["title"] = float("nan")
    data["run"]["own"] = {"deep": [1, 10 ** 30]}
    run = exercise(write_export(tmp_path / "x", data))
    problem(run, "data.json › run", "'title' holds nan")
    problem(run, "data.json › run", "'own' holds an integer beyond")
    assert "title" not in run.manifest.config and run.manifest.config["task"] == raw["run"]["task"]


# --- MFM export: index rows -------------------------------------------------------------

INDEX_FIELDS = ["id", "kind", "first_step", "last_step", "summary", "tags", "x", "y", "z", "path", "image",
                "action_kind", "observation_hash", "turn"]


@pytest.mark.parametrize("field", INDEX_FIELDS)
def test_export_index_rows_of_any_type(raw, tmp_path, field: str):
    values = [*SWAPS.values(), *BAD_NUMBERS, -1, "../../etc/passwd"]
    data = copy.deepcopy(raw)
    rows = range(3, 3 + len(values))
    for i, value in zip(rows, values):
        data["index"][i][field] = value
    run = exercise(write_export(tmp_path / "x", data))
    kept = ids(run)
    assert kept == [r["id"] for r in raw["index"] if r["id"] in kept]
    assert set(kept) >= {r["id"] for i, r in enumerate(raw["index"]) if i not in rows}
    for i, value in zip(rows, values):
        if raw["index"][i]["id"] in kept:
            assert not [p for p in run.problems if p.file == IDX and p.line == i + 1], value
            assert not (field in ("x", "y", "z") and value in BAD_NUMBERS), f"position {value} accepted"
        else:
            problem(run, IDX, field, line=i + 1)


@pytest.mark.parametrize("index", [5, "x", {"a": 1}, [5, "x", None, [1]]])
def test_export_index_not_a_list_of_rows(raw, tmp_path, index: Any):
    data = copy.deepcopy(raw)
    data["index"] = index
    run = exercise(write_export(tmp_path / "x", data))
    assert ids(run) == [] and len(run.grid()) == len(raw["grid"]["cells"]) and len(run.turns()) == len(raw["turns"])
    if isinstance(index, list):
        for i in range(1, 5):
            problem(run, IDX, "row", line=i)
    else:
        problem(run, "data.json › index", "must be an array")


@pytest.mark.parametrize("previous", [5, [5], [{"index": 5}], [{"index": [{"id": "ep_000001", "x": float("nan")}]}]])
def test_export_previous_lives_of_any_type(raw, tmp_path, previous: Any):
    data = copy.deepcopy(raw)
    data["previous"] = previous
    run = exercise(write_export(tmp_path / "x", data))
    assert ids(run) == [r["id"] for r in raw["index"]]
    assert [p for p in run.problems if p.file.startswith("data.json › previous")]


# --- MFM export: grid, turns, agent files, episode records, the file itself -------------------

BAD_CELLS = [
    [float("nan"), 69, 1402, 0, 1], [1e15, 69, 1402, 0, 1], [1, float("inf"), 2, 0, 1], [1, 2], "x", None, 5,
    {"a": 1}, [1, 2, 3, 99, 4], [1, 2, 3, -1, 4], [1, 2, 3, True, 4], [1, 2, 3, "0", 4], [1, 2, 3, 0.0, 4],
    [1, 2, 3, 0, -5], [1, 2, 3, 0, 10 ** 30], [1, 2, 3, 0, 1.5], [1, 2, 3, 0, "7"], [[1], 2, 3, 0, 4],
]


def test_export_grid_cells_of_any_type(raw, tmp_path):
    data = copy.deepcopy(raw)
    rows = range(2, 2 + 2 * len(BAD_CELLS), 2)
    for i, cell in zip(rows, BAD_CELLS):
        data["grid"]["cells"][i] = cell
    run = exercise(write_export(tmp_path / "x", data))
    assert len(run.grid()) == len(raw["grid"]["cells"]) - len(BAD_CELLS)
    for i, cell in zip(rows, BAD_CELLS):
        assert problem(run, "data.json › grid.jsonl", line=i + 1), cell
    assert len(ids(run)) == len(raw["index"])


@pytest.mark.parametrize("grid, words", [
    (5, "grid must be an object"), ({"kinds": 5, "cells": [[1, 2, 3, 0, 1]]}, "kinds"),
    ({"kinds": ["walked", 5], "cells": [[1, 2, 3, 0, 1]]}, "kinds"), ({"kinds": ["walked"], "cells": 5}, "cells"),
])
def test_export_grid_of_any_type(raw, tmp_path, grid: Any, words: str):
    data = copy.deepcopy(raw)
    data["grid"] = grid
    run = exercise(write_export(tmp_path / "x", data))
    assert run.grid().empty and len(ids(run)) == len(raw["index"])
    assert [p for p in run.problems if p.file.startswith("data.json › grid") and words in p.message], run.problems


TURN_KINDS = {"turn": "int", "step": "int", "prompt": "str", "messages": "list", "commands": "objects",
              "changes": "objects", "views": "strings", "usage": "dict"}


@pytest.mark.parametrize("field", TURN_KINDS)
def test_export_turn_fields_of_any_type(raw, tmp_path, field: str):
    data = copy.deepcopy(raw)
    for i, value in enumerate(SWAPS.values(), 1):
        data["turns"][i][field] = value
    run = exercise(write_export(tmp_path / "x", data))
    assert len(run.turns()) == len(raw["turns"])
    for i, swap in enumerate(SWAPS, 1):
        said = [p for p in run.problems if p.file == "data.json › turns" and p.line == i + 1]
        if swap == "null" or TURN_KINDS[field] == swap:
            assert not said, said
        else:
            problem(run, "data.json › turns", field, line=i + 1)


@pytest.mark.parametrize("mutate, words, kept", [
    (lambda t: t.__setitem__(1, 5), "turn must be an object", 1),
    (lambda t: t[1].__setitem__("usage", {"a": float("nan")}), "usage holds nan", 0),
    (lambda t: t[1]["commands"][0].__setitem__("kinds", 5), "commands[0].kinds", 0),
    (lambda t: t[1]["commands"][0].__setitem__("exit", float("inf")), "commands[0].exit holds inf", 0),
    (lambda t: t[1]["commands"].__setitem__(0, "x"), "commands[0] must be an object", 0),
    (lambda t: t[1]["changes"].__setitem__(0, {"path": 5}), "changes[0].path", 0),
    (lambda t: t[1].__setitem__("turn", 10 ** 30), "turn holds an integer beyond", 0),
    (lambda t: t[1].__setitem__("step", -3), "step must not be negative", 0),
])
def test_export_turn_contents(raw, tmp_path, mutate: Callable, words: str, kept: int):
    data = copy.deepcopy(raw)
    mutate(data["turns"])
    run = exercise(write_export(tmp_path / "x", data))
    problem(run, "data.json › turns", words, line=2)
    assert len(run.turns()) == len(raw["turns"]) - kept


NOTES = "mine/notes.md"


@pytest.mark.parametrize("mutate, words", [
    (lambda m: m.__setitem__("files", [1]), "files must be an object"),
    (lambda m: m["files"].__setitem__(NOTES, 5), "files['mine/notes.md'] must be a string"),
    (lambda m: m["files"].__setitem__("../evil.md", "x"), "not under mine/"),
    (lambda m: m["files"].__setitem__("/etc/passwd", "x"), "not under mine/"),
    (lambda m: m["files"].__setitem__("mine/../../evil", "x"), "not under mine/"),
    (lambda m: m["files"].__setitem__("mine/", "x"), "not under mine/"),
    (lambda m: m["files"].__setitem__("mine/a\x00b", "x"), "not under mine/"),
    (lambda m: m.__setitem__("history", 5), "history must be an object"),
    (lambda m: m["history"].__setitem__(NOTES, "x"), "history['mine/notes.md'] must be an array"),
    (lambda m: m["history"][NOTES].__setitem__(0, 7), "history['mine/notes.md'][0] must be an object"),
    (lambda m: m["history"][NOTES][0].__setitem__("added", 5), "[0].added must be a list of strings"),
    (lambda m: m["history"][NOTES][0].__setitem__("removed", "x"), "[0].removed"),
    (lambda m: m["history"][NOTES][0].__setitem__("step", float("nan")), "[0].step must be an integer"),
    (lambda m: m["history"][NOTES][0].__setitem__("step", -1), "[0].step must not be negative"),
    (lambda m: m["history"][NOTES][0].__setitem__("turn", "3"), "[0].turn must be an integer"),
])
def test_export_agent_files_of_any_type(raw, tmp_path, mutate: Callable, words: str):
    data = copy.deepcopy(raw)
    mutate(data["mine"])
    run = exercise(write_export(tmp_path / "x", data))
    problem(run, "data.json › mine", words)
    for path, text in raw["mine"]["files"].items():
        if path != NOTES and isinstance(data["mine"].get("files"), dict):
            assert file_as_of(run, path).rstrip("\n") == text.rstrip("\n")
    assert {w.path for w in run.records("memory_writes.jsonl")} <= set(raw["mine"]["files"])


@pytest.mark.parametrize("part, value, words", [
    ("action", "[" * 5000 + "]" * 5000, "nested deeper than 64 levels"),
    ("action", '{"turn": NaN}', "action holds nan"),
    ("action", "{", "not valid JSON"),
    ("action", 5, "action must be an object"),
    ("state", [1], "state must be an object"),
    ("outcome", '{"a": 100000000000000000000000000000}', "outcome holds an integer beyond"),
    ("outcome", '{"a": "\\ud800"}', "outcome holds a lone surrogate"),
])
def test_export_episode_records_of_any_type(raw, tmp_path, part: str, value: Any, words: str):
    data = copy.deepcopy(raw)
    ep = raw["index"][5]["id"]
    data["episodes"][ep][part] = value
    run = exercise(write_export(tmp_path / "x", data))
    problem(run, "data.json › episodes", ep, words)
    assert getattr(run.episode_record(ep), part) is None
    other = raw["index"][6]["id"]
    assert run.episode_record(other).state == json.loads(raw["episodes"][other]["state"])
    assert len(ids(run)) == len(raw["index"])


def test_export_target_out_of_range_is_left_out(raw, tmp_path):
    data = copy.deepcopy(raw)
    ep = next(k for k, e in raw["episodes"].items() if e.get("action") and
              json.loads(e["action"]).get("entry", {}).get("procedure") in ("go_to", "look_at"))
    action = json.loads(raw["episodes"][ep]["action"])
    action["entry"]["args"]["x"] = 1e15
    data["episodes"][ep]["action"] = json.dumps(action)
    run = exercise(write_export(tmp_path / "x", data))
    problem(run, "data.json › episodes", f"{ep} action.entry.args.x must be finite")
    assert len(run.turns()) == len(raw["turns"])
    targets = [t for ts in run.turns()["targets"] for t in json.loads(ts)]
    assert targets and all(abs(t["x"]) < 1e7 for t in targets)


@pytest.mark.parametrize("section", ["run", "episodes", "grid", "log", "turns", "mine", "previous"])
@pytest.mark.parametrize("swap", ["list", "int", "str", "bool"])
def test_export_sections_of_any_type(raw, tmp_path, section: str, swap: str):
    data = copy.deepcopy(raw)
    data[section] = SWAPS[swap]
    run = exercise(write_export(tmp_path / "x", data))
    expected = "array" if section == "previous" else "object"
    if (swap == "list") != (expected == "array"):
        problem(run, f"data.json › {section}", f"must be an {expected}")
    assert len(ids(run)) == len(raw["index"])


@pytest.mark.parametrize("text, words", [
    ("[]", "top level is not an object"), ("5", "top level is not an object"), ("null", "top level"),
    ("{", "not valid JSON"), ("", "not valid JSON"), ("\udcff", "not UTF-8"),
    ('{"a":' * 5000 + "1" + "}" * 5000, "nested deeper than 64 levels"),
])
def test_export_data_json_unreadable(tmp_path, text: str, words: str):
    d = tmp_path / "x"
    d.mkdir()
    (d / "data.json").write_bytes(text.encode("utf-8", "surrogateescape"))
    run = exercise(d)
    problem(run, "data.json", words)
    assert ids(run) == [] and run.summary()["problems"] == 1


def test_export_data_json_too_large(raw, tmp_path, monkeypatch):
    from loaders.formats import mfm_export

    monkeypatch.setattr(mfm_export, "MAX_BYTES", 1000)
    run = exercise(write_export(tmp_path / "x", raw))
    problem(run, "data.json", "larger than 1000 bytes")


def test_export_reads_nothing_outside_its_folder(raw, tmp_path):
    """A data.json or frames folder that links out of the export is refused, not read."""
    outside = write_export(tmp_path / "outside", raw)
    (outside / "frames").mkdir()
    from PIL import Image

    Image.fromarray(np.full((8, 8, 3), 7, np.uint8)).save(outside / "frames" / f"{raw['index'][1]['id']}.jpg")
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "data.json").symlink_to(outside / "data.json")
    run = exercise(linked)
    problem(run, "data.json", "leads outside")
    assert ids(run) == []
    frames = write_export(tmp_path / "frames_out", raw)
    (frames / "frames").symlink_to(outside / "frames")
    run = exercise(frames)
    with pytest.raises(UnsafePath):
        run.observation(raw["index"][1]["id"])


# --- Crafter recordings -----------------------------------------------------------------

def _nan_rows(a: dict, key: str, rows: list[int], value: float) -> dict:
    v = a[key].astype(np.float64)
    v[rows] = value
    return {**a, key: v}


def _without(a: dict, key: str) -> dict:
    return {k: v for k, v in a.items() if k != key}


NPZ_CASES: dict[str, tuple[Callable[[dict], dict], str | None, str, int | None]] = {
    # name: (mutation, array key of the problem (None: the file), words, steps read (None: all))
    "no player_pos": (lambda a: _without(a, "player_pos"), "player_pos", "missing", 0),
    "no action": (lambda a: _without(a, "action"), "action", "missing", 0),
    "no reward": (lambda a: _without(a, "reward"), "reward", "missing", 0),
    "1-D player_pos": (lambda a: {**a, "player_pos": a["player_pos"][:, 0]}, "player_pos", "has shape", 0),
    "3-column player_pos": (lambda a: {**a, "player_pos": np.c_[a["player_pos"], a["player_pos"][:, :1]]},
                            "player_pos", "has shape", 0),
    "string player_pos": (lambda a: {**a, "player_pos": a["player_pos"].astype(str)}, "player_pos", "not numbers", 0),
    "object player_pos": (lambda a: {**a, "player_pos": np.array([object()] * len(a["action"]), dtype=object)},
                          "player_pos", "Python objects", 0),
    "NaN positions": (lambda a: _nan_rows(a, "player_pos", [5, 6], np.nan), "player_pos", "2 row(s)", -2),
    "1e15 position": (lambda a: _nan_rows(a, "player_pos", [7], 1e15), "player_pos", "1 row(s)", -1),
    "infinite position": (lambda a: _nan_rows(a, "player_pos", [9], -np.inf), "player_pos", "beyond", -1),
    "2-D reward": (lambda a: {**a, "reward": np.c_[a["reward"], a["reward"]]}, "reward", "has shape", 0),
    "string reward": (lambda a: {**a, "reward": a["reward"].astype(str)}, "reward", "not numbers", 0),
    "NaN reward": (lambda a: _nan_rows(a, "reward", [3], np.nan), "reward", "1 row(s)", -1),
    "float action": (lambda a: {**a, "action": a["action"] + 0.5}, "action", "holds float64", 0),
    "0-d action": (lambda a: {**a, "action": np.array(5)}, "action", "has shape", 0),
    "short action": (lambda a: {**a, "action": a["action"][:10]}, "action", "holds 10 rows", 9),
    "short inventory": (lambda a: {**a, "ainventory_wood": a["ainventory_wood"][:10]}, "ainventory_wood",
                        "holds 10 rows", None),
    "2-D inventory": (lambda a: {**a, "ainventory_health": a["ainventory_health"][:, None]}, "ainventory_health",
                      "has shape", None),
    "string inventory": (lambda a: {**a, "ainventory_wood": a["ainventory_wood"].astype(str)}, "ainventory_wood",
                         "not numbers", None),
    "bad counts": (lambda a: _nan_rows(a, "ainventory_wood", [4, 8], -1.5), "ainventory_wood", "2 row(s) negative",
                   None),
    "NaN counts": (lambda a: _nan_rows(a, "ainventory_food", [4], np.nan), "ainventory_food", "1 row(s)", None),
    "2-D achievement": (lambda a: {**a, "achievement_collect_wood": a["achievement_collect_wood"][:, None]},
                        "achievement_collect_wood", "has shape", None),
    "short discount": (lambda a: {**a, "discount": a["discount"][:3]}, "discount", "holds 3 rows", None),
    "3-D image": (lambda a: {**a, "image": a["image"][..., 0]}, "image", "has shape", None),
    "float image": (lambda a: {**a, "image": a["image"].astype(np.float32)}, "image", "expected unsigned", None),
    "empty frames": (lambda a: {**a, "image": a["image"][:, :0]}, "image", "not shown", None),
    "object image": (lambda a: {**a, "image": np.array([None] * 3, dtype=object)}, "image", "Python objects", None),
}


@pytest.mark.parametrize("case", NPZ_CASES)
def test_recording_arrays_of_any_type(arrays, tmp_path, case: str):
    mutate, key, words, steps = NPZ_CASES[case]
    p = write_npz(tmp_path / "rec.npz", mutate(arrays))
    run = exercise(p)
    problem(run, f"rec.npz › {key}" if key else "rec.npz", words)
    n = len(arrays["action"]) - 1
    want = n + steps if steps is not None and steps < 0 else steps if steps is not None else n
    assert len(run.steps()) == want, run.problems
    if key == "image":
        with pytest.raises(FrameError):
            run.frame(1)
    else:
        assert np.array_equal(run.frame(1), arrays["image"][1])
    if want and steps is None:
        assert list(run.steps()["x"]) == list(arrays["player_pos"][1:, 0])


def test_recording_without_frames_or_counters_keeps_its_trace(arrays, tmp_path):
    a = {k: v for k, v in arrays.items() if not k.startswith(("ainventory_", "achievement_")) and k != "image"}
    run = exercise(write_npz(tmp_path / "rec.npz", a))
    assert len(run.steps()) == len(arrays["action"]) - 1 and run.problems == []
    with pytest.raises(FrameError):
        run.frame(1)


def _member(zf: zipfile.ZipFile, name: str, header: dict, payload: bytes) -> None:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, header)
    zf.writestr(name, buf.getvalue() + payload)


def _zip_with(arrays: dict, path: Path, extra: Callable[[zipfile.ZipFile], None], drop: str = "") -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for k, v in arrays.items():
            if k != drop:
                buf = io.BytesIO()
                np.save(buf, v)
                zf.writestr(f"{k}.npy", buf.getvalue())
        extra(zf)
    return path


def test_recording_declaring_a_huge_array_is_refused_unallocated(arrays, tmp_path):
    huge = {"descr": "<f8", "fortran_order": False, "shape": (10 ** 12, 2)}
    p = _zip_with(arrays, tmp_path / "rec.npz", lambda zf: _member(zf, "player_pos.npy", huge, b"\0" * 64),
                  drop="player_pos")
    run = exercise(p)
    problem(run, "rec.npz › player_pos", "declares shape (1000000000000, 2)")
    assert run.steps().empty and np.array_equal(run.frame(2), arrays["image"][2])


def test_recording_bounds_what_it_loads(arrays, tmp_path, monkeypatch):
    monkeypatch.setattr(crafter_recorder, "MAX_LOAD_BYTES", 64 * 1024)
    run = exercise(write_npz(tmp_path / "rec.npz", arrays))
    problem(run, "rec.npz › image", "would pass")
    assert len(run.steps()) == len(arrays["action"]) - 1
    monkeypatch.setattr(crafter_recorder, "MAX_ARRAYS", 12)
    run = exercise(write_npz(tmp_path / "many.npz", arrays))
    problem(run, "many.npz", "only the first 12 are read")
    assert len(run.steps()) == len(arrays["action"]) - 1


@pytest.mark.parametrize("damage, key, words", [
    (lambda zf: _member(zf, "action.npy", {"descr": "|O", "fortran_order": False, "shape": (3,)}, b"\x80\x04N."),
     "action", "Python objects"),
    (lambda zf: _member(zf, "action.npy", {"descr": "<i8", "fortran_order": False, "shape": (-3,)}, b""),
     "action", "negative"),
    (lambda zf: zf.writestr("action.npy", b"\x93NUMPY\x09\x00garbage"), "action", "unreadable"),
    (lambda zf: zf.writestr("action.npy", b"not an npy file"), "action", "unreadable"),
])
def test_recording_with_a_hostile_member(arrays, tmp_path, damage: Callable, key: str, words: str):
    run = exercise(_zip_with(arrays, tmp_path / "rec.npz", damage, drop=key))
    problem(run, f"rec.npz › {key}", words)
    assert run.steps().empty and np.array_equal(run.frame(3), arrays["image"][3])


def test_recording_with_a_duplicated_or_corrupt_member(arrays, recording, tmp_path):
    with pytest.warns(UserWarning, match="Duplicate name"):
        dup = _zip_with(arrays, tmp_path / "dup.npz", lambda zf: zf.writestr("achievement_x.npy", b"x") or
                        zf.writestr("achievement_x.npy", b"y"))
    problem(exercise(dup), "dup.npz › achievement_x", "stored twice")
    data = bytearray(recording.read_bytes())
    with zipfile.ZipFile(recording) as zf:
        info = zf.getinfo("reward.npy")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    for i in range(start + 5, start + info.compress_size - 2):
        data[i] ^= 0x5A
    (tmp_path / "bad.npz").write_bytes(bytes(data))
    run = exercise(tmp_path / "bad.npz")
    problem(run, "bad.npz › reward", "unreadable")
    assert run.steps().empty and np.array_equal(run.frame(1), arrays["image"][1])


@pytest.mark.parametrize("content", [b"", b"garbage", b"PK\x03\x04" + b"\0" * 40, "npy", "pickle", "half"])
def test_recording_that_is_no_npz(arrays, recording, tmp_path, content):
    p = tmp_path / "rec.npz"
    if content == "npy":
        with open(p, "wb") as f:
            np.save(f, arrays["image"])
    elif content == "pickle":
        import pickle

        p.write_bytes(pickle.dumps({"action": [1, 2]}))
    elif content == "half":
        p.write_bytes(recording.read_bytes()[: recording.stat().st_size // 2])
    else:
        p.write_bytes(content)
    run = exercise(p)
    problem(run, "rec.npz", "not a readable .npz")
    assert run.steps().empty


# --- A runs root with good and bad runs, and mfm import --------------------------------------

def test_runs_listing_shows_the_good_run_whole(arrays, recording, raw, tmp_path):
    root = tmp_path / "root"
    (root / "rec").mkdir(parents=True)
    shutil.copy(recording, root / "rec" / "good.npz")
    (root / "rec" / "stats.jsonl").write_text("{}\n")
    write_npz(root / "rec" / "bad.npz", {**arrays, "reward": np.c_[arrays["reward"], arrays["reward"]],
                                         "player_pos": arrays["player_pos"].astype(str)})
    (root / "rec" / "worse.npz").write_bytes(b"garbage")
    write_export(root / "export_bad", {"run": {"last_step": [1], "milestones": {"order": 3, "achieved": [1]}},
                                       "index": [{"id": "ep_000001", "x": float("nan")}], "grid": 5})
    runs = open_runs(root)
    table = runs_table(runs).set_index("run")
    assert set(table.index) == {"good.npz", "bad.npz", "worse.npz", "export_bad"}
    good = open_run(recording)
    assert table.loc["good.npz", "problems"] == 0
    assert table.loc["good.npz", "episodes"] == len(good.records("index.jsonl"))
    assert table.loc["good.npz", "milestones"] == len(good.manifest.milestones)
    assert all(table.loc[k, "problems"] > 0 for k in ("bad.npz", "worse.npz", "export_bad"))
    overview = runs_overview(runs, root).set_index("key")
    assert overview.loc["rec/good.npz", "episodes"] == len(good.records("index.jsonl"))
    ours = next(r for r in runs if r.name == "good.npz")
    assert ours.records("steps.jsonl") == good.records("steps.jsonl")


def _import(src: Path, dest: Path, capsys) -> tuple[int, str]:
    rc = main(["import", str(src), str(dest)])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return rc, err


def test_import_of_a_damaged_export_writes_what_is_valid(raw, tmp_path, capsys):
    data = copy.deepcopy(raw)
    data["run"]["last_step"] = [1]
    data["index"][3]["x"] = float("nan")
    data["grid"]["cells"][0] = [1e15, 0, 0, 0, 1]
    data["mine"]["files"]["mine/../../../evil.md"] = "x"
    src = write_export(tmp_path / "src", data)
    rc, _ = _import(src, tmp_path / "out" / "run", capsys)
    assert rc == 0
    c = validate(tmp_path / "out" / "run")
    assert c.manifest is not None and c.errors == [], c.errors
    assert len(c.tables["index.jsonl"]) == len(raw["index"]) - 1
    listed = c.manifest.config["imported_from"]["problems"]
    assert any("data.json › index.jsonl:4" in p for p in listed) and any("data.json › run" in p for p in listed)
    assert not list(tmp_path.rglob("evil.md"))


def test_import_of_a_damaged_recording_writes_what_is_valid(arrays, tmp_path, capsys):
    src = write_npz(tmp_path / "rec" / "r.npz", _nan_rows(arrays, "player_pos", [4], np.nan))
    rc, _ = _import(src, tmp_path / "out", capsys)
    assert rc == 0
    c = validate(tmp_path / "out", frames=True)
    assert c.errors == [] and len(c.tables["steps.jsonl"]) == len(arrays["action"]) - 2
    assert any("r.npz › player_pos" in p for p in c.manifest.config["imported_from"]["problems"])


@pytest.mark.parametrize("which", ["garbage npz", "garbage data.json", "linked data.json", "2-D reward"])
def test_import_of_an_unreadable_run_fails_clearly(arrays, raw, tmp_path, capsys, which: str):
    if which == "garbage npz":
        src = tmp_path / "src.npz"
        src.write_bytes(b"garbage")
    elif which == "2-D reward":
        src = write_npz(tmp_path / "src.npz", {**arrays, "reward": np.c_[arrays["reward"], arrays["reward"]]})
    else:
        src = write_export(tmp_path / "src", "[" if which == "garbage data.json" else {})
        if which == "linked data.json":
            (src / "data.json").unlink()
            (src / "data.json").symlink_to(write_export(tmp_path / "elsewhere", raw) / "data.json")
    rc, err = _import(src, tmp_path / "out", capsys)
    assert rc == 2 and err.startswith("mfm import:") and "nothing readable" in err, err
    assert not (tmp_path / "out").exists()


def test_import_writes_nowhere_but_dest(arrays, raw, tmp_path, capsys):
    rec = tmp_path / "rec"
    write_npz(rec / "...npz", arrays)
    (rec / "stats.jsonl").write_text("{}\n")
    (tmp_path / "dest").mkdir()
    before = sorted(tmp_path.rglob("*"))
    rc, err = _import(rec, tmp_path / "dest" / "x", capsys)
    assert rc == 2 and "cannot name a folder" in err and sorted(tmp_path.rglob("*")) == before
    (tmp_path / "file").write_text("x")
    rc, err = _import(write_npz(tmp_path / "ok.npz", arrays), tmp_path / "file", capsys)
    assert rc == 2 and "not an empty folder" in err
    outside = write_export(tmp_path / "outside", raw)
    (outside / "frames").mkdir()
    from PIL import Image

    Image.fromarray(np.full((8, 8, 3), 7, np.uint8)).save(outside / "frames" / f"{raw['index'][1]['id']}.jpg")
    src = write_export(tmp_path / "src", raw)
    (src / "frames").symlink_to(outside / "frames")
    rc, _ = _import(src, tmp_path / "out", capsys)
    assert rc == 0 and not list((tmp_path / "out").rglob("*.png"))
    c = validate(tmp_path / "out")
    assert any("observation not copied" in p for p in c.manifest.config["imported_from"]["problems"])


# --- Property: mutated foreign runs ---------------------------------------------------------

NUMBERS = ["0", "-1", "1e15", "-1e15", "1e308", "NaN", "Infinity", "-Infinity", str(10 ** 30), "1e400"]
TYPES = ["[1]", "7", '"x"', '{"a": 1}', "null", "true", "[]", "{}"]
HOLE = "@@HOLE@@"


@st.composite
def fragment(draw) -> str:
    """A JSON text: a value nested 1..5000 levels deep, a number of extreme magnitude, or a
    value of another type."""
    kind = draw(st.sampled_from(["nest", "number", "type"]))
    inner = draw(st.sampled_from(NUMBERS + TYPES))
    if kind != "nest":
        return inner if kind == "type" else draw(st.sampled_from(NUMBERS))
    depth = draw(st.sampled_from([1, 2, 5, 63, 64, 65, 300, 5000]))
    opener = draw(st.sampled_from(["[", '{"a":']))
    return opener * depth + inner + ("]" if opener == "[" else "}") * depth


def _export_path(draw, raw: dict) -> list:
    """A random place in data.json: a section, a row, a field, ... (at least a section)."""
    node, path = raw, []
    while isinstance(node, (dict, list)) and node and (not path or draw(st.booleans())):
        key = draw(st.sampled_from(sorted(node))) if isinstance(node, dict) else draw(st.integers(0, len(node) - 1))
        path.append(key)
        node = node[key]
    return path


def _check_import(src: Path, dest: Path, capsys) -> None:
    rc, err = _import(src, dest, capsys)
    if rc == 0:
        assert validate(dest).manifest is not None
    else:
        assert rc == 2 and err.startswith("mfm import:") and len(err.splitlines()) == 1, err


def _mutated_exports(examples: int):
    """Mutated exports, ``examples`` of them: opening and importing them never raises."""

    @settings(max_examples=examples, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(data=st.data())
    def test(raw, tmp_path_factory, capsys, data):
        mutations = []
        doc = copy.deepcopy(raw)
        for _ in range(data.draw(st.integers(1, 3))):
            path = _export_path(data.draw, doc)
            value = data.draw(fragment())
            if path[0] == "episodes" and data.draw(st.booleans()):
                value = json.dumps('{"turn": ' + value + ', "entry": {"procedure": "go_to", "args": {"x": 1, "z": 2}}}')
            node = doc
            for k in path[:-1]:
                node = node[k]
            node[path[-1]] = f"{HOLE}{len(mutations)}"
            mutations.append(value)
        text = json.dumps(doc)
        for i, value in enumerate(mutations):
            text = text.replace(f'"{HOLE}{i}"', value)
        d = tmp_path_factory.mktemp("export")
        src = write_export(d / "src", text)
        exercise(src)
        _check_import(src, d / "out", capsys)

    return test


test_mutated_exports_never_raise = _mutated_exports(15)
test_mutated_exports_never_raise_thoroughly = pytest.mark.slow(_mutated_exports(200))


def _mutated_recordings(examples: int):
    """Mutated Crafter recordings, ``examples`` of them: opening and importing them never raises."""

    @settings(max_examples=examples, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(data=st.data())
    def test(arrays, tmp_path_factory, capsys, data):
        a = dict(arrays)
        for _ in range(data.draw(st.integers(1, 3))):
            key = data.draw(st.sampled_from(sorted(a) + ["ainventory_new", "achievement_new"]))
            v = a.get(key, arrays["action"])
            v = v if v.dtype.kind in "biuf" else arrays["action"]
            op = data.draw(st.sampled_from(["delete", "value", "dtype", "ndim", "truncate"]))
            if op == "delete":
                a.pop(key, None)
                continue
            if op == "value" and v.size:
                v = v.astype(np.float64)
                v.flat[data.draw(st.integers(0, v.size - 1))] = data.draw(st.sampled_from(
                    [0, -1, 1e15, -1e15, 1e308, np.nan, np.inf, -np.inf, 1e30]))
            elif op == "dtype":
                small = key != "image"
                v = np.array([10 ** 30] * 3, dtype=object) if small and data.draw(st.booleans()) else v.astype(
                    data.draw(st.sampled_from([np.float16, np.bool_, np.uint64, np.int8] + ([str, np.complex64]
                                                                                              if small else []))))
            elif op == "ndim":
                v = data.draw(st.sampled_from([v[..., None], v.reshape(-1), np.array(v.flat[0]) if v.size else v]))
            elif op == "truncate":
                v = v[:data.draw(st.integers(0, len(v) if v.ndim else 0))] if v.ndim else v
            a[key] = v
        d = tmp_path_factory.mktemp("rec")
        src = write_npz(d / "src" / "r.npz", a)
        exercise(src)
        _check_import(src, d / "out", capsys)

    return test


test_mutated_recordings_never_raise = _mutated_recordings(15)
test_mutated_recordings_never_raise_thoroughly = pytest.mark.slow(_mutated_recordings(200))

"""Foreign runs: the original MFM project's export and Crafter's own recorder, in place and imported."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from loaders import find_runs, open_run
from loaders.convert import import_runs
from loaders.provenance import file_as_of
from mfm.cli import main
from mfm.memory.retrieval import FrameError
from mfm.validate import validate

from conftest import record_crafter, shared_export


@pytest.fixture(scope="module")
def export_dir() -> Path:
    return shared_export()


@pytest.fixture(scope="module")
def recording(tmp_path_factory) -> Path:
    """Two episodes recorded by the real crafter.Recorder with a seeded random policy."""
    return record_crafter(tmp_path_factory.mktemp("rec"), seed=5, policy_seed=0, length=150, episodes=2)


def test_export_opens_in_place(export_dir: Path):
    raw = json.loads((export_dir / "data.json").read_text())
    run = open_run(export_dir)
    assert run.format == "mfm-export" and run.is_3d
    assert run.problems == []
    assert [r.id for r in run.records("index.jsonl")] == [r["id"] for r in raw["index"]]
    assert len(run.grid()) == len(raw["grid"]["cells"])
    assert len(run.turns()) == len(raw["turns"])
    m = run.manifest
    assert m.milestones == raw["run"]["milestones"]["achieved"]
    assert list(m.milestone_order) == raw["run"]["milestones"]["order"]
    assert m.method == raw["run"]["memory_mode"] and m.task == raw["run"]["task"]
    for path, text in raw["mine"]["files"].items():
        assert file_as_of(run, path) == text or file_as_of(run, path).rstrip("\n") == text.rstrip("\n")
    first = raw["mine"]["history"]["mine/notes.md"][0]
    assert file_as_of(run, "mine/notes.md", first["step"] - 1) is None
    assert file_as_of(run, "mine/notes.md", first["step"]).splitlines() == first["added"]
    ep = raw["index"][5]["id"]
    assert run.episode_record(ep).action == json.loads(raw["episodes"][ep]["action"])
    with pytest.raises(FrameError, match="not included"):
        run.observation(ep)
    with pytest.raises(FrameError):
        run.frame(10)


def test_export_targets_use_the_horizontal_plane(export_dir: Path):
    raw = json.loads((export_dir / "data.json").read_text())
    run = open_run(export_dir)
    targets = [t for ts in run.turns()["targets"] for t in json.loads(ts)]
    actions = [json.loads(e["action"]) for e in raw["episodes"].values() if e.get("action")]
    go_to = [a["entry"]["args"] for a in actions if a.get("entry", {}).get("procedure") in ("go_to", "look_at")]
    assert go_to and len(targets) == len(go_to)
    assert {(t["x"], t["y"]) for t in targets} == {(a["x"], a["z"]) for a in go_to}


def test_export_with_frames_and_damage(export_dir: Path, tmp_path: Path):
    d = tmp_path / "export"
    d.mkdir()
    raw = json.loads((export_dir / "data.json").read_text())
    raw["index"][3] = {"id": "bad"}
    raw["grid"]["cells"].append([1, 2])
    (d / "data.json").write_text(json.dumps(raw))
    (d / "frames").mkdir()
    from PIL import Image

    Image.fromarray(np.full((36, 64, 3), 90, np.uint8)).save(d / "frames" / f"{raw['index'][1]['id']}.jpg")
    run = open_run(d)
    where = {(p.file, p.line) for p in run.problems}
    assert ("data.json › index.jsonl", 4) in where
    assert ("data.json › grid.jsonl", len(raw["grid"]["cells"])) in where
    assert run.observation(raw["index"][1]["id"]).shape == (36, 64, 3)
    (d / "data.json").write_text('{"run": {"name": "x"}, "index": [')
    broken = open_run(d)
    assert broken.records("index.jsonl") == [] and broken.problems[0].file == "data.json"


def test_crafter_recording_opens_in_place(recording: Path):
    paths = find_runs(recording)
    assert len(paths) == 2 and all(p.suffix == ".npz" for p in paths)
    for p in paths:
        raw = np.load(p)
        run = open_run(p)
        assert run.format == "crafter-recorder" and run.problems == []
        n = len(raw["action"]) - 1
        steps = run.steps()
        assert list(steps["step"]) == list(range(1, n + 1))
        assert list(steps["x"]) == list(raw["player_pos"][1:, 0])
        for s in (1, n // 2, n):
            assert np.array_equal(run.frame(s), raw["image"][s])
        firsts = {k[12:]: int(np.flatnonzero(raw[k] > 0)[0]) for k in raw.files
                  if k.startswith("achievement_") and raw[k].any()}
        assert run.manifest.milestones == firsts
        assert dict(zip(run.milestones()["name"], run.milestones()["step"])) == firsts
        died = raw["discount"][-1] == 0
        assert (len(run.lives()) == 1) == died
        eps = run.records("index.jsonl")
        assert sum(r.frames for r in eps) == n
        assert run.turns().empty and run.memory_writes().empty


@pytest.mark.parametrize("which", ["export", "recording"])
def test_import_is_lossless_for_what_both_share(which, export_dir, recording, tmp_path):
    src = export_dir if which == "export" else recording
    written = import_runs(src, tmp_path / "out")
    originals = [open_run(src)] if which == "export" else [open_run(p) for p in find_runs(src)]
    assert len(written) == len(originals)
    for dest, orig in zip(written, originals):
        c = validate(dest, frames=True)
        if orig.manifest.seed is None and [(p.file, p.message) for p in c.errors] == [("run.json",
                                                                                      "missing field 'seed'")]:
            pytest.xfail("a run that records no seed is imported with seed null, which run.json refuses until "
                         "mfm/schema.py makes RunManifest.seed optional (OptInt)")
        assert c.errors == [], c.errors
        ours = open_run(dest)
        assert ours.format == "mfm"
        for name in ("grid.jsonl", "turns.jsonl", "memory_writes.jsonl", "milestones.jsonl", "lives.jsonl",
                     "steps.jsonl"):
            assert ours.records(name) == orig.records(name), name
        a, b = orig.records("index.jsonl"), ours.records("index.jsonl")
        assert [(r.id, r.summary, r.tags, r.first_step, r.last_step, r.x, r.y, r.z) for r in a] == \
               [(r.id, r.summary, r.tags, r.first_step, r.last_step, r.x, r.y, r.z) for r in b]
        for r in a[1:4]:
            assert ours.episode_record(r.id).action == orig.episode_record(r.id).action
        if which == "recording":
            n = len(ours.steps())
            assert all(np.array_equal(ours.frame(s), orig.frame(s)) for s in range(1, n + 1))
        assert ours.manifest.config["imported_from"]["format"] == orig.format
    assert main(["import", str(src), str(tmp_path / "out")]) == 2


def test_import_refuses_what_it_cannot_read(tmp_path: Path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["import", str(tmp_path / "empty"), str(tmp_path / "x")]) == 2
    assert "no run in a format" in capsys.readouterr().err


def _original_folder(export_dir: Path, dest: Path) -> dict:
    """An original MFM run folder, laid out as the export says the harness wrote it."""
    raw = json.loads((export_dir / "data.json").read_text())
    dest.mkdir()
    (dest / "index.jsonl").write_text("".join(r["_raw"] + "\n" for r in raw["index"]))
    kinds = raw["grid"]["kinds"]
    (dest / "grid.jsonl").write_text("".join(json.dumps({"cell": c[:3], "kind": kinds[c[3]], "step": c[4]}) + "\n"
                                             for c in raw["grid"]["cells"]))
    for ep, rec in raw["episodes"].items():
        (dest / "episodes" / ep / "state").mkdir(parents=True)
        (dest / "episodes" / ep / "state" / "state.json").write_text(rec["state"] or "")
        (dest / "episodes" / ep / "action.json").write_text(rec["action"] or "")
        (dest / "episodes" / ep / "outcome.json").write_text(rec["outcome"] or "")
    (dest / "logs.txt").write_text("".join("=" * 80 + "\n" + s["text"] + "\n" for s in raw["log"]["sections"]))
    for path, text in raw["mine"]["files"].items():
        (dest / path).parent.mkdir(parents=True, exist_ok=True)
        (dest / path).write_text(text)
    return raw


def test_an_original_mfm_run_folder_opens(export_dir: Path, tmp_path: Path):
    raw = _original_folder(export_dir, tmp_path / "orig")
    run = open_run(tmp_path / "orig")
    assert run.format == "mfm-original" and run.is_3d
    assert [p.severity for p in run.problems if p.file == "run.json"] == ["warning"]
    assert not [p for p in run.problems if p.severity == "error" and "observation" not in p.message]
    assert [r.id for r in run.records("index.jsonl")] == [r["id"] for r in raw["index"]]
    assert len(run.grid()) == len(raw["grid"]["cells"]) and run.grid()["z"].notna().all()
    ep = raw["index"][7]["id"]
    assert run.episode_record(ep).outcome == json.loads(raw["episodes"][ep]["outcome"])
    assert run.manifest.env == "minecraft" and run.manifest.last_step == raw["index"][-1]["last_step"]
    with pytest.raises(FrameError):
        run.observation(ep)


def test_3d_distances_use_the_horizontal_plane_unless_asked(export_dir: Path):
    from loaders.paper_measures import position, retargeting, target_position

    run = open_run(export_dir)
    r = run.records("index.jsonl")[5]
    assert position(r) == (r.x, r.z) and position(r, three_d=True) == (r.x, r.z, r.y)
    g = {"kind": "go_to", "x": 1.0, "y": 2.0, "height": 60.0, "in_plan": None}
    assert target_position(g) == (1.0, 2.0) and target_position(g, three_d=True) == (1.0, 2.0, 60.0)
    flat = retargeting(run.records("turns.jsonl"), run.records("index.jsonl"))
    deep = retargeting(run.records("turns.jsonl"), run.records("index.jsonl"), three_d=True)
    assert flat.inspect_turns == deep.inspect_turns and flat.new_targets == deep.new_targets


@pytest.fixture(scope="module")
def g4_dir() -> Path:
    """The excerpt of the second MFM demo run (history not replayable, extra index fields, no seed)."""
    path = shared_export().parent / "g4_excerpt"
    if not (path / "data.json").is_file():
        pytest.skip(f"no MFM export excerpt at {path}")
    return path


def test_unreplayable_history_is_unknown_not_empty(g4_dir: Path):
    from loaders import analysis_pages as ap

    raw = json.loads((g4_dir / "data.json").read_text())
    run = open_run(g4_dir)
    for path, text in raw["mine"]["files"].items():
        hist = raw["mine"]["history"][path]
        assert raw["mine"]["replayable"][path] is False
        first, last = min(e["step"] for e in hist), max(e["step"] for e in hist)
        versions = ap.memory_versions(run, path)
        assert list(versions["step"]) == [last]
        assert file_as_of(run, path, last).rstrip("\n") == text.rstrip("\n")
        assert ap.memory_text(run, path, last).rstrip("\n") == text.rstrip("\n")
        assert ap.memory_unknown(run, path) == ((first, last) if first < last else None)
        if first < last:
            assert ap.memory_text(run, path, last - 1) is None
            assert any(path in p.message and "not replayable" in p.message for p in run.problems)


def test_export_index_fields_we_do_not_name_are_kept(g4_dir: Path):
    from loaders import lookups

    raw = json.loads((g4_dir / "data.json").read_text())
    ep = open_run(g4_dir).episodes().set_index("id")["extra"]
    for row in raw["index"]:
        extra = json.loads(ep[row["id"]])
        assert extra.get("inventory_delta") == row.get("inventory_delta")
        assert extra["_frame"] == row["_frame"]
        assert "_raw" not in extra
    detail = lookups.episode_detail(open_run(g4_dir), "ep_000521")
    assert detail.extra["inventory_delta"] == next(r for r in raw["index"] if r["id"] == "ep_000521")["inventory_delta"]


def test_export_without_a_seed_has_none(g4_dir: Path):
    from loaders import analysis_pages as ap
    from loaders import runs_summary

    assert "seed" not in json.loads((g4_dir / "data.json").read_text())["run"]
    run = open_run(g4_dir)
    assert run.manifest.seed is None and ap.seed_of(run) is None and run.summary()["seed"] is None
    assert runs_summary.runs_overview([run], g4_dir.parent).iloc[0]["seed"] is None
    table = ap.milestone_summary(ap.measures([("g4", run)]))
    assert f"{run.name} (no seed):" in table["per seed"].iloc[0]


def test_a_frame_the_export_left_out_is_not_pointed_at(export_dir: Path, tmp_path: Path):
    raw = json.loads((export_dir / "data.json").read_text())
    left_out = raw["index"][3]["id"]
    raw["index"][3]["_frame"] = False
    (tmp_path / "data.json").write_text(json.dumps(raw))
    run = open_run(tmp_path)
    assert run.episode(left_out).image is None
    assert run.episode(raw["index"][4]["id"]).image == f"frames/{raw['index'][4]['id']}.jpg"
    with pytest.raises(FrameError, match="did not include"):
        run.observation(left_out)

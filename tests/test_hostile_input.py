"""Hostile run folders (issue 19): deep nesting, paths and symlinks leading out of the run,
images built to exhaust memory, corrupt observation images. Each case is built on a copy of
a shipped sample run and checked at every entry point: ``open_run``, ``mfm validate``,
``mfm import`` and the frame/record readers the dashboard uses."""
from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from loaders import open_run
from loaders import lookups, runs_summary
from loaders.run import open_runs
from mfm.boundary import UnsafePath
from mfm.cli import main
from mfm.memory import retrieval
from mfm.schema import MAX_DEPTH, too_deep
from mfm.validate import validate

from conftest import REPO

SAMPLE = REPO / "sample_runs" / "diamond_mfm_s2"
SECRET = b"TOP-SECRET-outside-the-run-0451"


def _copy(tmp_path: Path, name: str = "run") -> Path:
    dest = tmp_path / name
    shutil.copytree(SAMPLE, dest)
    return dest


def _insert_line(path: Path, at: int, line: bytes) -> int:
    """Insert ``line`` before line ``at`` (1-based) of a JSONL file; return its line number."""
    lines = path.read_bytes().splitlines(keepends=True)
    lines.insert(at - 1, line.rstrip(b"\n") + b"\n")
    path.write_bytes(b"".join(lines))
    return at


def _cli(*args: str) -> subprocess.CompletedProcess:
    """``mfm`` in a child process: a crash of the reader (a segfault) fails the test instead
    of killing the test run."""
    return subprocess.run([sys.executable, "-m", "mfm.cli", *args], capture_output=True, text=True, cwd=REPO)


DEEP = {
    "objects": b'{"a":' * 50_000,
    "closed objects": b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
    "deep field": b'{"id":"ep_000999","extra":' + b"[" * 50_000 + b"]" * 50_000 + b"}",
    "arrays": b"[" * 50_000,
    "balanced": b"[" * 5_000 + b"]" * 5_000,
    "just over": b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1),
}


def test_depth_rule_counts_structure_not_strings() -> None:
    assert not too_deep(b'{"a": "' + b"[" * 500 + b'"}')
    assert not too_deep(b'["\\"' + b"[" * 500 + b'"]')
    assert not too_deep(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH)
    assert too_deep(b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1))
    assert too_deep(b'[{"a": "]]]]"}' + b"," + b"[" * 80)


DEEP_FILES = ["index.jsonl", "steps.jsonl", "turns.jsonl", "grid.jsonl", "memory_writes.jsonl", "lives.jsonl",
              "milestones.jsonl"]


@pytest.fixture(scope="module")
def deep_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, subprocess.CompletedProcess]:
    """A copy of the sample for each (file, variant of :data:`DEEP`), with the deep line
    inserted as line 2 of the file: ``{(file, variant): (run, line)}``, and what one ``mfm
    validate`` child process said of all of them (one interpreter start, not one per case)."""
    base = tmp_path_factory.mktemp("deep")
    runs = {}
    for file in DEEP_FILES:
        for variant in sorted(DEEP):
            run = _copy(base, f"run{len(runs)}")
            runs[file, variant] = run, _insert_line(run / file, 2, DEEP[variant])
    return runs, _cli("validate", *(str(run) for run, _ in runs.values()))


@pytest.mark.parametrize("variant", sorted(DEEP))
@pytest.mark.parametrize("file", DEEP_FILES)
def test_a_deeply_nested_line_is_one_problem_at_its_line(deep_runs: tuple[dict, subprocess.CompletedProcess],
                                                         file: str, variant: str) -> None:
    runs, p = deep_runs
    run, line = runs[file, variant]
    before = len(validate(SAMPLE).tables[file])
    assert p.returncode == 1, (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr
    out = [ln for ln in p.stdout.splitlines() if ln.startswith((f"{run}/", f"{run}:"))]
    assert f"{run}: INVALID: 1 error(s)" in "\n".join(out), out
    problems = [ln for ln in out if f"{file}:" in ln and ": error:" in ln]
    assert problems == [f"{run / file}:{line}: error: nested deeper than {MAX_DEPTH} levels, skipped"], out
    c = validate(run)
    assert len(c.tables[file]) == before
    assert [(x.file, x.line) for x in c.errors] == [(file, line)]


@pytest.mark.parametrize("field", ["inventory", "unlocked"])
def test_a_deep_value_inside_a_big_table_takes_the_tolerant_path(tmp_path: Path, field: str) -> None:
    """A row of a table large enough for the fast C++ readers, valid but for one field
    nested 50,000 deep: the reader must not recurse on it (it segfaulted)."""
    run = _copy(tmp_path)
    steps = run / "steps.jsonl"
    row = json.loads(steps.read_bytes().splitlines()[0])
    deep = b'{"a":' * 50_000 if field == "inventory" else b"[" * 50_000
    text = json.dumps(row, separators=(",", ":")).encode().replace(
        b'"' + field.encode() + b'":', b'"' + field.encode() + b'":' + deep + b"0,", 1)
    body = steps.read_bytes()
    steps.write_bytes(body * 2 if len(body) < 300_000 else body)
    _insert_line(steps, 1, text)
    assert steps.stat().st_size > 256 * 1024
    p = _cli("validate", str(run))
    assert p.returncode == 1, (p.returncode, p.stderr[-2000:])
    assert f"steps.jsonl:1: error: nested deeper than {MAX_DEPTH} levels, skipped" in p.stdout


@pytest.mark.parametrize("variant", ["objects", "arrays"])
def test_deep_manifest_and_episode_records(tmp_path: Path, variant: str) -> None:
    run = _copy(tmp_path)
    (run / "run.json").write_bytes(DEEP[variant])
    state = run / "episodes" / "ep_000003" / "state" / "state.json"
    state.write_bytes(DEEP[variant])
    p = _cli("validate", str(run))
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert f"run.json:1: error: nested deeper than {MAX_DEPTH} levels" in p.stdout
    r = open_run(run)
    assert r.manifest is None and r.summary()["status"] == "unknown"
    assert r.episode_record("ep_000003").state is None
    assert r.episode_record("ep_000004").state is not None


ESCAPES = [("path", "../outside/ep"), ("path", "{outside}/ep"), ("path", "episodes/../../outside/ep"),
           ("path", "episodes\\..\\..\\outside"), ("path", "episodes/ep_000003\x00"),
           ("image", "../outside/ep/observation/image.png"), ("image", "{outside}/ep/observation/image.png"),
           ("image", "episodes/ep_000003/../../../outside/ep/observation/image.png")]


def _outside(tmp_path: Path) -> Path:
    """A folder beside the run that looks like an episode and holds a secret."""
    ep = tmp_path / "outside" / "ep"
    shutil.copytree(SAMPLE / "episodes" / "ep_000002", ep)
    (ep / "state" / "state.json").write_bytes(json.dumps({"secret": SECRET.decode()}).encode())
    (ep / "observation").mkdir(exist_ok=True)
    Image.new("RGB", (64, 64), (255, 0, 0)).save(ep / "observation" / "image.png")
    return tmp_path / "outside"


def _leaked(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and SECRET in p.read_bytes()]


@pytest.mark.parametrize("field, value", ESCAPES)
def test_an_index_row_leading_outside_the_run_is_refused_at_every_entry_point(tmp_path: Path, field: str,
                                                                               value: str) -> None:
    outside = _outside(tmp_path)
    run = _copy(tmp_path)
    value = value.format(outside=outside.resolve())
    p = run / "index.jsonl"
    lines = p.read_text().splitlines()
    row = json.loads(lines[3])
    row[field] = value
    lines[3] = json.dumps(row)
    p.write_text("\n".join(lines) + "\n")

    res = _cli("validate", str(run))
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert f"index.jsonl:4: error: {field} must be a relative path inside the run" in res.stdout
    r = open_run(run)
    assert r.episode(row["id"]) is None
    assert any(x.file == "index.jsonl" and x.line == 4 for x in r.problems)
    dest = tmp_path / "imported"
    assert main(["import", str(run), str(dest)]) == 0
    assert _leaked(dest) == []


@pytest.mark.parametrize("field, value", [("path", "../outside/ep"), ("path", "/abs/ep"),
                                          ("image", "../outside/ep/observation/image.png")])
def test_the_core_readers_refuse_rows_built_in_code(tmp_path: Path, field: str, value: str) -> None:
    """A row made in code skips the schema's check; the read boundary still refuses it."""
    _outside(tmp_path)
    run = _copy(tmp_path)
    ref = dataclasses.replace(open_run(run).episode("ep_000002"), **{field: value})
    with pytest.raises(UnsafePath):
        if field == "path":
            retrieval.load_episode(run, ref)
        else:
            retrieval.observation(run, ref)
    if field == "path":
        with pytest.raises(UnsafePath):
            retrieval.episode_frame(run, ref, 0)


def _link(target: Path, link: Path) -> None:
    if link.is_dir() and not link.is_symlink():
        shutil.rmtree(link)
    elif link.exists() or link.is_symlink():
        link.unlink()
    link.symlink_to(target)


LINKS = {
    "state file": lambda ep, out: _link(out / "ep" / "state" / "state.json", ep / "state" / "state.json"),
    "state folder": lambda ep, out: _link(out / "ep" / "state", ep / "state"),
    "frame strip": lambda ep, out: _link(out / "ep" / "frames" / "00000.webp", ep / "frames" / "00000.webp"),
    "frames folder": lambda ep, out: _link(out / "ep" / "frames", ep / "frames"),
    "episode folder": lambda ep, out: _link(out / "ep", ep),
}


@pytest.mark.parametrize("kind", sorted(LINKS))
def test_a_symlink_leading_outside_the_run_is_not_followed(tmp_path: Path, kind: str) -> None:
    outside = _outside(tmp_path)
    run = _copy(tmp_path)
    ep = run / "episodes" / "ep_000002"
    LINKS[kind](ep, outside)
    r = open_run(run)
    ref = r.episode("ep_000002")
    step = ref.first_step + 1
    if "state" in kind or kind == "episode folder":
        with pytest.raises(UnsafePath, match="outside"):
            r.episode_record("ep_000002")
        with pytest.raises(UnsafePath):
            lookups.episode_detail(r, "ep_000002")
    if "frame" in kind or kind == "episode folder":
        with pytest.raises(UnsafePath, match="outside"):
            r.frame(step)
        with pytest.raises(UnsafePath):
            lookups.frame_for(r, step=step)
        c = validate(run, frames=True)
        assert any("leads outside the run" in x.message and x.line for x in c.errors), c.problems
    assert r.frame(r.episode("ep_000004").first_step + 1).shape[2] == 3
    res = _cli("validate", "--frames", str(run))
    assert "Traceback" not in res.stderr
    dest = tmp_path / "imported"
    main(["import", str(run), str(dest)])
    assert _leaked(dest) == []


def test_a_symlink_inside_the_run_still_reads(tmp_path: Path) -> None:
    run = _copy(tmp_path)
    a, b = run / "episodes" / "ep_000003", run / "episodes" / "ep_000004"
    r0 = open_run(SAMPLE)
    _link(a / "state" / "state.json", b / "state" / "state.json")
    r = open_run(run)
    assert r.episode_record("ep_000004").state == r0.episode_record("ep_000003").state
    assert validate(run).errors == []


def _big_strip_run(tmp_path: Path, strips: int) -> Path:
    """A run whose first ``strips`` episodes each hold one frame strip of ~16 Mpixel that
    compresses to a few kB (a memory bomb within the pixel limit)."""
    run = _copy(tmp_path, f"big{strips}")
    rows = [json.loads(x) for x in (run / "index.jsonl").read_text().splitlines()]
    frames = 4
    width = int((retrieval.MAX_PIXELS / frames) ** 0.5) - 1
    strip = Image.new("RGB", (width, width * frames), (20, 90, 30))
    n = 0
    for row in rows:
        if row["frames"] >= frames and n < strips:
            row["frames"] = frames
            row["image"], row["observation_hash"] = None, None
            for f in (run / row["path"] / "frames").glob("*.webp"):
                f.unlink()
            strip.save(run / row["path"] / "frames" / "00000.webp", lossless=True, method=0)
            n += 1
    assert n == strips
    (run / "index.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def _peak_rss_mb(*args: str) -> float:
    """Peak resident memory of ``mfm`` run in a fresh process, in MB."""
    code = ("import resource, subprocess, sys; subprocess.run([sys.executable, '-m', 'mfm.cli', *sys.argv[1:]], "
            "stdout=subprocess.DEVNULL); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO, check=True)
    return int(out.stdout.strip()) / 1024


@pytest.mark.slow
def test_validating_frames_holds_one_image_at_a_time(tmp_path: Path) -> None:
    few, many = _big_strip_run(tmp_path, 2), _big_strip_run(tmp_path, 12)
    one_image = retrieval.MAX_PIXELS * 3 / 2**20
    grow = _peak_rss_mb("validate", "--frames", str(many)) - _peak_rss_mb("validate", "--frames", str(few))
    assert grow < 3 * one_image, f"peak memory grew by {grow:.0f} MB for 10 more images of {one_image:.0f} MB"


def test_the_decoded_image_cache_is_bounded_by_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retrieval, "DECODED_BYTES", 1_000_000)
    retrieval.forget_decoded()
    sizes = []
    for i in range(12):
        p = tmp_path / f"{i}.png"
        Image.new("RGB", (200, 200 + i), (i, 0, 0)).save(p)
        assert retrieval.read_png(p).shape == (200 + i, 200, 3)
        sizes.append(200 * (200 + i) * 3)
        assert retrieval._decoded_bytes <= retrieval.DECODED_BYTES
    assert 0 < len(retrieval._decoded) < 12
    assert retrieval._decoded_bytes == sum(a.nbytes for a in retrieval._decoded.values())
    retrieval.forget_decoded()


@pytest.mark.parametrize("damage", ["truncated", "not an image", "empty"])
def test_validate_frames_decodes_the_observation_images(tmp_path: Path, damage: str) -> None:
    run = _copy(tmp_path)
    rows = [json.loads(x) for x in (run / "index.jsonl").read_text().splitlines()]
    named = [r for r in rows if r["image"]]
    assert named
    img = run / named[-1]["image"]
    data = img.read_bytes()
    img.write_bytes({"truncated": data[: len(data) // 2], "not an image": b"#!/bin/sh\necho hi\n",
                     "empty": b""}[damage])
    assert validate(run).errors == []
    c = validate(run, frames=True)
    assert [(x.file, x.severity) for x in c.errors] == [(named[-1]["image"], "error")]
    res = _cli("validate", "--frames", str(run))
    assert res.returncode == 1 and f"{named[-1]['image']}: error: not a readable image" in res.stdout


def _bad_runs(root: Path, tmp_path: Path) -> dict[str, str]:
    """One damaged copy of the sample run per kind of hostile input; name -> file at fault."""
    out = {}

    def bad(name: str, file: str, damage) -> None:
        d = root / name
        shutil.copytree(SAMPLE, d)
        damage(d)
        out[name] = file

    bad("deep_index", "index.jsonl", lambda d: _insert_line(d / "index.jsonl", 3, DEEP["objects"]))
    bad("deep_steps", "steps.jsonl", lambda d: _insert_line(d / "steps.jsonl", 3, DEEP["arrays"]))
    bad("deep_turns", "turns.jsonl", lambda d: _insert_line(d / "turns.jsonl", 3, DEEP["objects"]))
    bad("deep_grid", "grid.jsonl", lambda d: _insert_line(d / "grid.jsonl", 3, DEEP["arrays"]))
    bad("deep_memory", "memory_writes.jsonl", lambda d: _insert_line(d / "memory_writes.jsonl", 3, DEEP["objects"]))
    bad("deep_lives", "lives.jsonl", lambda d: _insert_line(d / "lives.jsonl", 1, DEEP["arrays"]))
    bad("deep_manifest", "run.json", lambda d: (d / "run.json").write_bytes(DEEP["objects"]))
    bad("escaping_path", "index.jsonl", lambda d: (d / "index.jsonl").write_text(
        (d / "index.jsonl").read_text().replace('"path":"episodes/ep_000005"', '"path":"../../etc"', 1)))
    outside = _outside(tmp_path)
    bad("linked_strip", "index.jsonl", lambda d: _link(outside / "ep" / "frames" / "00000.webp",
                                                       d / "episodes" / "ep_000002" / "frames" / "00000.webp"))
    export = root / "deep_export"
    export.mkdir()
    (export / "data.json").write_bytes(DEEP["objects"])
    out["deep_export"] = "data.json"
    return out


def test_the_runs_page_shows_the_good_run_whole_beside_one_bad_run_of_each_kind(tmp_path: Path,
                                                                                monkeypatch) -> None:
    from conftest import open_app, use_root

    alone = tmp_path / "alone"
    shutil.copytree(SAMPLE, alone / "good")
    expected = runs_summary.runs_overview(open_runs(alone), alone).set_index("key").loc["good"].to_dict()
    root = tmp_path / "root"
    shutil.copytree(SAMPLE, root / "good")
    bad = _bad_runs(root, tmp_path)

    table = runs_summary.runs_overview(open_runs(root), root).set_index("key")
    assert table.loc["good"].to_dict() == expected
    for name, file in bad.items():
        problems = open_run(root / name).problems
        assert problems and any(p.file.startswith(file) for p in problems), (name, problems)

    use_root(monkeypatch, root)
    at = open_app()
    shown = at.dataframe[0].value.set_index("key")
    assert set(shown.index) == {"good", *bad}
    good = shown.loc["good"]
    assert (good["episodes"], int(good["problems"]), good["milestones"]) == (
        expected["episodes"], expected["problems"], expected["milestones"])
    assert good["steps"].startswith(f"{expected['steps']:,} / "), "steps of the budget, as the page writes them"
    assert all(int(shown.loc[name, "problems"]) >= 1 for name in bad)
    damaged = [e.label for e in at.expander if "problem(s)" in e.label]
    assert sorted(label.split(":")[0].removeprefix("⚠️ ") for label in damaged) == sorted(bad)


@pytest.mark.parametrize("value", [-1e15, -1.0, 2.5, 1e400])
def test_an_integer_field_refuses_negative_and_fractional_floats(tmp_path: Path, value: float) -> None:
    """``-1e15`` is a float with an integer value: it was taken as the integer -10^15 (a
    negative step); found by the slow fuzz of foreign formats."""
    run = _copy(tmp_path)
    manifest = json.loads((run / "run.json").read_text())
    manifest["last_step"] = value
    (run / "run.json").write_text(json.dumps(manifest))
    c = validate(run)
    assert c.manifest is None
    assert [(p.file, p.line) for p in c.errors] == [("run.json", 1)]
    assert "last_step" in c.errors[0].message

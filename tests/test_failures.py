"""loaders.failures and the Failures page, checked against the raw files of a sample run."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import REPO, open_app, texts, use_root
from raw import action_of, collect_failure, sample_runs
from raw_whole import strip_steps
from loaders import failures as fl
from loaders.run import open_run

SAMPLES = REPO / "sample_runs"
RUN = SAMPLES / "diamond_mfm_s2"


def _rows(name: str, run: Path = RUN) -> list[dict]:
    return [json.loads(line) for line in (run / name).read_text().splitlines() if line.strip()]


def death_collects() -> tuple[Path, str, list[str]]:
    """The first sample run with a collect that ended in death: the run, the material of its
    first such collect, and every collect of that material that ended in death, in index order."""
    for run in sample_runs(SAMPLES):
        deaths = {e["episode"] for e in _rows("lives.jsonl", run) if e["event"] == "death"}
        died = [(r["id"], action_of(run, r)["args"].get("material")) for r in _rows("index.jsonl", run)
                if r["id"] in deaths and r["action_kind"] == "collect"]
        if died:
            return run, died[0][1], [e for e, m in died if m == died[0][1]]
    raise AssertionError("no sample run has a collect that ended in death")


def failed_collect() -> tuple[Path, dict]:
    """The first collect that failed or was interrupted without a death, in the first sample
    run that has one: the run and its index row."""
    for run in sample_runs(SAMPLES):
        deaths = {e["episode"] for e in _rows("lives.jsonl", run) if e["event"] == "death"}
        for r in _rows("index.jsonl", run):
            if r.get("outcome") in ("failed", "interrupted") and r["action_kind"] == "collect" \
                    and r["id"] not in deaths:
                return run, r
    raise AssertionError("no sample run has a failed collect")


def raw_cause(summary: str) -> str:
    """The reason of an episode summary (``... -> failed: <reason>; ...``) with its cells
    written ``(x, y)``."""
    reason = summary.split("->", 1)[1].split(";")[0].split(":", 1)[1]
    return re.sub(r"\(-?\d+, -?\d+\)", "(x, y)", reason).strip()


def causes_with_commas() -> tuple[Path, int, list[str]]:
    """The first sample run and life whose failures (no death) have a cause with a comma and
    another cause: the run, the life and the two causes, sorted."""
    for run in sample_runs(SAMPLES):
        deaths = {e["episode"] for e in _rows("lives.jsonl", run) if e["event"] == "death"}
        rows = [r for r in _rows("index.jsonl", run) if r.get("outcome") in ("failed", "interrupted")
                and r["id"] not in deaths and ":" in r["summary"].split("->", 1)[-1].split(";")[0]]
        for life in sorted({r["life"] for r in rows}):
            causes = sorted({raw_cause(r["summary"]) for r in rows if r["life"] == life})
            comma = [c for c in causes if "," in c]
            other = [c for c in causes if c not in comma[:1]]
            if comma and other:
                return run, life, sorted([comma[0], other[0]])
    raise AssertionError("no sample run has a failure whose cause holds a comma")


@pytest.fixture(scope="module")
def run():
    return open_run(RUN)


def test_every_failure_and_death_is_listed(run) -> None:
    idx = _rows("index.jsonl")
    deaths = {e["episode"]: e for e in _rows("lives.jsonl") if e["event"] == "death"}
    want = {r["id"] for r in idx if r.get("outcome") in ("failed", "interrupted")} | set(deaths)
    df = fl.failures(run)
    assert set(df["episode"]) == want and len(df) == len(want)
    for ep, e in deaths.items():
        row = df[df["episode"] == ep].iloc[0]
        assert (row["outcome"], row["cause"], row["step"], row["life"]) == (
            "death", f"died ({e['cause']})", e["step"], e["life"])
    run_dir, failed = failed_collect()
    other = fl.failures(open_run(run_dir))
    row = other[other["episode"] == failed["id"]].iloc[0]
    action = action_of(run_dir, failed)
    assert (row["action"], row["material"], row["target_x"], row["target_y"]) == (
        action["atom"], action["args"]["material"], action["args"]["x"], action["args"]["y"])


def test_filter_collects_of_a_material_ending_in_death(run) -> None:
    run_dir, material, want = death_collects()
    got = fl.filter_failures(fl.failures(open_run(run_dir)), ["collect"], [material], ["death"])
    assert list(got["episode"]) == want and want
    assert len(fl.filter_failures(fl.failures(run), lives=[0], steps=(0, 100))) == len(
        [r for r in fl.failures(run).itertuples() if r.life == 0 and r.step <= 100])


def test_filmstrip_outlines_the_target() -> None:
    run_dir, ref, _ = collect_failure(SAMPLES)
    run = open_run(run_dir)
    action = action_of(run_dir, ref)
    target = (action["args"]["x"], action["args"]["y"])
    steps = {s["step"]: s for s in _rows("steps.jsonl", run_dir) if s["life"] == ref["life"]}
    strip = fl.filmstrip(run, ref["id"], target)
    assert [f.step for f in strip] == strip_steps(run_dir, ref)
    assert [f.step for f in fl.filmstrip(run, ref["id"], target, back=0)] == list(
        range(ref["first_step"] + 1, ref["first_step"] + 1 + ref["frames"]))
    for f in strip:
        s = steps[f.step]
        col, row = target[0] - s["x"] + 4, target[1] - s["y"] + 3
        assert f.target_tile == ((col, row) if 0 <= col < 9 and 0 <= row < 7 else None)
    assert fl.around(strip) == (ref["last_step"] - 1, ref["last_step"])
    f = strip[-1]
    frame = run.frame(f.step)
    img = fl.strip_image(frame, f, factor=2)
    unit = 7 * 2
    col, row = f.target_tile
    assert img.shape == (128, 128, 3)
    assert img[row * unit:(row + 1) * unit, col * unit].tolist() == [[0, 230, 255]] * unit
    assert img[row * unit, col * unit:(col + 1) * unit].tolist() == [[0, 230, 255]] * unit
    assert tuple(img[row * unit + 5, col * unit + 5]) == tuple(frame[row * 7 + 2, col * 7 + 2])


def test_failure_without_frames(run) -> None:
    ref = next(r for r in _rows("index.jsonl") if r.get("outcome") == "failed" and r["frames"] == 0
               and r["first_step"] > 0)
    strip = fl.filmstrip(run, ref["id"], None)
    assert [f.step for f in strip] == strip_steps(RUN, ref) and strip[-1].step == ref["first_step"]
    assert [(f.step, f.role) for f in strip[-2:]] == [(ref["first_step"] - 1, "before"), (ref["first_step"], "after")]
    assert [(f.step, f.role) for f in fl.filmstrip(run, ref["id"], None, back=0)] == [(ref["first_step"], "after")]


def test_failures_page(monkeypatch: pytest.MonkeyPatch) -> None:
    use_root(monkeypatch, SAMPLES)
    run_dir, ref, outcome = collect_failure(SAMPLES)
    key, ep = run_dir.name, ref["id"]
    material = action_of(run_dir, ref)["args"]["material"]
    deaths = {e["episode"] for e in _rows("lives.jsonl", run_dir) if e["event"] == "death"}
    idx = _rows("index.jsonl", run_dir)
    failures = {r["id"] for r in idx if r.get("outcome") in ("failed", "interrupted")} | deaths
    want = [r["id"] for r in idx if r["id"] in failures and r["action_kind"] == "collect"
            and ("death" if r["id"] in deaths else r["outcome"]) == outcome
            and action_of(run_dir, r)["args"].get("material") == material]
    at = open_app("failures", runs=key, act="collect", mat=material, outcome=outcome, ep=ep)
    t = texts(at)
    assert f"{len(want)} of {len(failures)} failures" in t and f"{ep} · collect {material} · {outcome}" in t
    assert at.multiselect(key="w_fail_act").value == ["collect"]
    assert at.multiselect(key="w_fail_mat").value == [material]
    assert at.multiselect(key="w_fail_out").value == [outcome]
    table = at.dataframe(key="fail_table").value
    assert list(table["episode"]) == want and ep in want
    assert len(at.get("image")) >= 1
    links = {p.proto.page: p.proto.query_string for p in at.get("page_link")}
    assert f"frames={key}%3A{ref['last_step'] - 1}%2C{key}%3A{ref['last_step']}" in links["frames"]
    assert "align=1" in links["frames"] and f"turn={ref['turn']}" in links["turns"]


def test_failures_page_filters_by_causes_with_commas(monkeypatch: pytest.MonkeyPatch) -> None:
    use_root(monkeypatch, SAMPLES)
    run_dir, life, causes = causes_with_commas()
    deaths = {e["episode"] for e in _rows("lives.jsonl", run_dir) if e["event"] == "death"}
    want = [r["id"] for r in _rows("index.jsonl", run_dir) if r.get("outcome") in ("failed", "interrupted")
            and r["id"] not in deaths and r["life"] == life and raw_cause(r["summary"]) in causes]
    at = open_app("failures", runs=run_dir.name, cause="|".join(causes), life=f"{life},x")
    assert at.multiselect(key="w_fail_cause").value == causes
    assert at.multiselect(key="w_fail_life").value == [life]
    table = at.dataframe(key="fail_table").value
    assert list(table["episode"]) == want and want


def test_the_failures_page_lists_the_first_rows_and_still_opens_any(monkeypatch: pytest.MonkeyPatch) -> None:
    """With more matches than ``fl.LISTED``, the table and the picker list the first of them in
    step order and say so; a match beyond them named in the URL still opens its filmstrip."""
    use_root(monkeypatch, SAMPLES)
    deaths = {e["episode"] for e in _rows("lives.jsonl") if e["event"] == "death"}
    idx = _rows("index.jsonl")
    failed = [r for r in idx if r.get("outcome") in ("failed", "interrupted") or r["id"] in deaths]
    assert len(failed) > 4
    monkeypatch.setattr(fl, "LISTED", 3)
    last = max(failed, key=lambda r: r["last_step"])
    at = open_app("failures", runs=RUN.name, ep=last["id"])
    table = at.dataframe(key="fail_table").value
    assert len(table) == 3 and list(table["step"]) == sorted(table["step"])
    assert "The first 3 are listed" in texts(at) and f"{len(failed)} of {len(failed)} failures" in texts(at)
    picker = at.selectbox(key="w_fail_ep")
    assert picker.value == last["id"] and last["id"] not in set(table["episode"])
    assert len(picker.options) == 1 + len(set(table["episode"]))
    assert len(at.get("image")) >= 1

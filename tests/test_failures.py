"""loaders.failures and the Failures page, checked against the raw files of a sample run."""
from __future__ import annotations

import json

import pytest

from conftest import REPO, open_app, texts, use_root
from loaders import failures as fl
from loaders.run import open_run

RUN = REPO / "sample_runs" / "diamond_mfm_s2"


def _rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (RUN / name).read_text().splitlines() if line.strip()]


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
    failed = next(r for r in idx if r.get("outcome") == "failed" and r["action_kind"] == "collect")
    row = df[df["episode"] == failed["id"]].iloc[0]
    action = json.loads((RUN / failed["path"] / "action.json").read_text())
    assert (row["action"], row["material"], row["target_x"], row["target_y"]) == (
        action["atom"], action["args"]["material"], action["args"]["x"], action["args"]["y"])


def test_filter_collects_of_stone_ending_in_death(run) -> None:
    deaths = {e["episode"] for e in _rows("lives.jsonl") if e["event"] == "death"}
    want = []
    for r in _rows("index.jsonl"):
        if r["id"] in deaths and r["action_kind"] == "collect":
            action = json.loads((RUN / r["path"] / "action.json").read_text())
            if action["args"].get("material") == "stone":
                want.append(r["id"])
    got = fl.filter_failures(fl.failures(run), ["collect"], ["stone"], ["death"])
    assert list(got["episode"]) == want == ["ep_000077"]
    assert len(fl.filter_failures(fl.failures(run), lives=[0], steps=(0, 100))) == len(
        [r for r in fl.failures(run).itertuples() if r.life == 0 and r.step <= 100])


def test_filmstrip_outlines_the_target(run) -> None:
    ref = next(r for r in _rows("index.jsonl") if r["id"] == "ep_000077")
    action = json.loads((RUN / ref["path"] / "action.json").read_text())
    target = (action["args"]["x"], action["args"]["y"])
    steps = {s["step"]: s for s in _rows("steps.jsonl")}
    strip = fl.filmstrip(run, "ep_000077", target)
    assert [f.step for f in strip] == list(range(ref["first_step"] + 1, ref["first_step"] + 1 + ref["frames"]))
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
    assert img[row * unit:(row + 1) * unit, col * unit].tolist() == [[255, 220, 0]] * unit
    assert img[row * unit, col * unit:(col + 1) * unit].tolist() == [[255, 220, 0]] * unit
    assert tuple(img[row * unit + 5, col * unit + 5]) == tuple(frame[row * 7 + 2, col * 7 + 2])


def test_failure_without_frames(run) -> None:
    ref = next(r for r in _rows("index.jsonl") if r.get("outcome") == "failed" and r["frames"] == 0
               and r["first_step"] > 0)
    strip = fl.filmstrip(run, ref["id"], None)
    assert [(f.step, f.role) for f in strip] == [(ref["first_step"], "before")]


def test_failures_page(monkeypatch: pytest.MonkeyPatch) -> None:
    use_root(monkeypatch, REPO / "sample_runs")
    at = open_app("failures", runs="diamond_mfm_s2", act="collect", mat="stone", outcome="death", ep="ep_000077")
    t = texts(at)
    assert "1 of" in t and "ep_000077 · collect stone · death" in t
    assert at.multiselect(key="w_fail_act").value == ["collect"]
    table = at.dataframe(key="fail_table").value
    assert list(table["episode"]) == ["ep_000077"]
    ref = next(r for r in _rows("index.jsonl") if r["id"] == "ep_000077")
    assert len(at.get("image")) >= 1
    links = {p.proto.page: p.proto.query_string for p in at.get("page_link")}
    assert f"frames=diamond_mfm_s2%3A{ref['last_step'] - 1}%2Cdiamond_mfm_s2%3A{ref['last_step']}" in links["frames"]
    assert "align=1" in links["frames"] and f"turn={ref['turn']}" in links["turns"]


def test_failures_page_filters_by_causes_with_commas(monkeypatch: pytest.MonkeyPatch) -> None:
    use_root(monkeypatch, REPO / "sample_runs")
    causes = ["no tree at (x, y) (grass)", "zombie adjacent"]
    idx = _rows("index.jsonl")
    want = [r for r in idx if r.get("outcome") in ("failed", "interrupted")
            and ("-> failed: no tree at" in r["summary"] or "zombie adjacent" in r["summary"].split(";")[0])]
    at = open_app("failures", runs="diamond_mfm_s2", cause="|".join(causes), life="0,x")
    assert at.multiselect(key="w_fail_cause").value == causes
    assert at.multiselect(key="w_fail_life").value == [0]
    table = at.dataframe(key="fail_table").value
    assert list(table["episode"]) == [r["id"] for r in want if r["life"] == 0]

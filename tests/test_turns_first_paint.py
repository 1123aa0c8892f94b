"""The Turns and Retargeting pages' first paint (issue 49): a turn's small tables are static
tables, checked against the raw files (json), and a rerun of either page (what a click or a
widget change costs) builds none of its views again."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import REPO, open_app, use_root
from dashboard import vega_charts
from loaders import analysis_pages as ap
from loaders import paper_measures
from loaders import turns as tv

ROOT = REPO / "sample_runs"
RUN = ROOT / "diamond_mfm_s2"


def _rows(name: str, run: Path = RUN) -> list[dict]:
    return [json.loads(line) for line in (run / name).read_text().splitlines() if line.strip()]


def _plain_turn() -> dict:
    """The first turn that named a target and produced an episode but wrote no memory file."""
    written = {w["turn"] for w in _rows("memory_writes.jsonl")}
    return next(t for t in sorted(_rows("turns.jsonl"), key=lambda t: t["turn"])
                if t["targets"] and t["episodes"] and t["turn"] not in written)


def _retarget_turn() -> dict:
    """The first turn with a go_to/look_at target outside its plan that also searched."""
    return next(t for t in sorted(_rows("turns.jsonl"), key=lambda t: t["turn"])
                if any(not g.get("in_plan") for g in t["targets"]) and any(c["tool"] == "search" for c in t["calls"]))


def _cells(table) -> list[list[str]]:
    """The rows of a static table (``st.table``) as cell texts."""
    return table.value.astype(str).values.tolist()


def test_a_turn_without_writes_draws_static_tables_from_the_raw_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    use_root(monkeypatch, ROOT)
    t = _plain_turn()
    index = {r["id"]: r for r in _rows("index.jsonl")}
    at = open_app("turns", runs=RUN.name, turn=str(t["turn"]))
    assert not at.dataframe, "a turn that wrote nothing draws no data grid"
    targets, episodes = (tb.value for tb in at.table)
    assert [[r["kind"], f"{r['x']:g}", f"{r['y']:g}", "yes" if r.get("in_plan") else "no",
             "no" if r.get("in_plan") else "yes"] for r in t["targets"]] == \
        targets[["kind", "x", "y", "in plan", "new (retarget)"]].values.tolist()
    assert episodes["episode"].tolist() == t["episodes"]
    assert episodes["steps"].tolist() == [f"{index[e]['first_step']}–{index[e]['last_step']}" for e in t["episodes"]]


def test_a_retarget_turns_searches_and_plans_are_static_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    use_root(monkeypatch, ROOT)
    t = _retarget_turn()
    at = open_app("retargeting", runs=RUN.name, run=RUN.name, turn=str(t["turn"]))
    assert at.selectbox(key="w_rt_turn").value == t["turn"]
    tables = [tb.value for tb in at.table]
    searches = next(tb for tb in tables if "returned" in tb.columns)
    raw = [c["result"].get("ids") or [] for c in t["calls"] if c["tool"] == "search"]
    assert searches["returned"].tolist() == [len(ids) for ids in raw]
    assert searches["ids"].tolist() == [", ".join(ids) for ids in raw]
    plans = [tb for tb in tables if list(tb.columns) == ["label", "x", "y"]]
    assert [tb.values.tolist() for tb in plans] == [[[p["label"], p["x"], p["y"]] for p in t[k]]
                                                    for k in ("plan_before", "plan_after")]


def _counting(monkeypatch: pytest.MonkeyPatch, module: object, name: str, calls: dict[str, int]) -> None:
    real = getattr(module, name)

    def counted(*args, **kwargs):
        calls[name] = calls.get(name, 0) + 1
        return real(*args, **kwargs)

    counted.__qualname__ = counted.__name__ = f"counted_{name}"
    monkeypatch.setattr(module, name, counted)


def test_a_rerun_of_turns_builds_no_view_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counted where the views build (``dashboard.views`` holds the loaders' functions
    themselves): the menu reads the turns' kinds, a turn's view looks its turn up."""
    use_root(monkeypatch, ROOT)
    calls: dict[str, int] = {}
    for name in ("turn_kinds", "_turn"):
        _counting(monkeypatch, tv, name, calls)
    at = open_app("turns", runs=RUN.name, turn=str(_plain_turn()["turn"]))
    first = dict(calls)
    at.run()
    assert not at.exception
    assert first.get("turn_kinds", 0) >= 1 and first.get("_turn", 0) >= 1, first
    assert calls == first, "a rerun built a view again"


def test_a_rerun_of_retargeting_builds_no_view_or_chart_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counted where each view builds: the per-run statistics, each turn's new targets, the
    audit's position lookup, and the two charts."""
    use_root(monkeypatch, ROOT)
    calls: dict[str, int] = {}
    for name in ("run_retargeting", "position_at"):
        _counting(monkeypatch, ap, name, calls)
    _counting(monkeypatch, paper_measures, "retargets", calls)
    for name in ("rates_chart", "retarget_map"):
        _counting(monkeypatch, vega_charts, name, calls)
    at = open_app("retargeting", runs=RUN.name, run=RUN.name, turn=str(_retarget_turn()["turn"]))
    first = dict(calls)
    assert set(first) == {"run_retargeting", "position_at", "retargets", "rates_chart", "retarget_map"}
    at.run()
    assert not at.exception
    assert calls == first, "a rerun computed a view again"

"""The Timeline shows an LLM policy's model requests (issue 11): marks per turn coloured by
how its requests went, and each request (tokens, latency, cost, tool calls, failures) in the
episode details. The runs are real: the real game driven through the scripted
chat-completions server of ``scripted_llm``."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import components, open_app as app, texts, use_root
from dashboard.canvas import rows
from loaders import open_run
from loaders.agent_calls import model_calls, model_turns
from loaders.timeline_data import MAX_POINTS, timeline_marks
from mfm.agent import RunConfig, Runner
from scripted_llm import ScriptedModel, llm, serve

pytest.importorskip("openai")


def _llm_run(out: Path, model: ScriptedModel, steps: int, **kw) -> None:
    server, base = serve(model)
    try:
        Runner(RunConfig(seed=0, steps=steps, out=out, llm=llm(base, **kw)), command="test").run()
    finally:
        server.shutdown()
        server.server_close()


class FailsLater(ScriptedModel):
    """Answers its first ``ok`` requests, then only with HTTP 503 (the policy gives up)."""

    def __init__(self, ok: int) -> None:
        super().__init__(script=False)
        self.ok = ok

    def reply(self, body: dict) -> tuple[int, dict, float]:
        if len(self.requests) >= self.ok:
            self.requests.append(body)
            return 503, {"error": {"message": "unavailable", "type": "server_error"}}, 0.0
        return super().reply(body)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    mp = pytest.MonkeyPatch()
    mp.setenv("OPENAI_API_KEY", "test-key")
    root = tmp_path_factory.mktemp("llm_runs")
    try:
        _llm_run(root / "llm", ScriptedModel(), steps=150)
        _llm_run(root / "gave_up", FailsLater(ok=6), steps=200, max_failures=3)
    finally:
        mp.undo()
    return root


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    use_root(monkeypatch, root)


def recorded(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "turns.jsonl").read_text().splitlines() if line.strip()]


def test_model_calls_match_what_the_policy_recorded(root: Path) -> None:
    turns = recorded(root / "llm")
    calls = model_calls(open_run(root / "llm").turns())
    assert len(calls) == sum(t["usage"]["requests"] for t in turns)
    for t in turns:
        mine = calls[calls["turn"] == t["turn"]]
        assert mine["prompt_tokens"].sum() == t["usage"]["prompt_tokens"]
        assert mine["completion_tokens"].sum() == t["usage"]["completion_tokens"]
        assert mine["cost_usd"].sum() == pytest.approx(t["usage"]["cost_usd"])
        assert (mine["status"] != "ok").sum() == t["usage"]["failures"]
    first = calls[calls["turn"] == 0]
    assert list(first["status"]) == ["retried", "retried", "ok"]
    assert "malformed" in first["error"].iloc[0] and "429" in first["error"].iloc[1]
    assert first["tool_calls"].iloc[2].startswith(("explore(", "collect("))
    per_turn = model_turns(calls)
    assert len(per_turn) == len(turns)
    assert set(per_turn.loc[per_turn["turn"] == 0, "status"]) == {"retried"}
    assert {"ok", "retried"} <= set(per_turn["status"])

    gave_up = model_turns(model_calls(open_run(root / "gave_up").turns()))
    assert list(gave_up["status"]) == ["ok"] * 6 + ["failed"]
    assert "3 requests" in gave_up["label"].iloc[-1] and gave_up["label"].iloc[-1].count("server error 503") == 3


def test_model_marks_are_binned_in_long_runs(root: Path) -> None:
    run = open_run(root / "llm")
    marks = timeline_marks(run, max_per_kind=3)
    model = marks[marks["kind"].str.startswith("model_")]
    assert (model.groupby("kind").size() <= 3).all()
    assert model["count"].sum() == len(recorded(root / "llm"))
    assert len(timeline_marks(run)) < MAX_POINTS


def _marks(at) -> dict[str, list[str]]:
    """The Timeline chart's marks as Streamlit sent them: each kind's hover labels."""
    (drawn,) = components(at, "mfm_timeline_lanes")
    names = [k[0] for k in drawn["kinds"]]
    return {name: [m["label"] for m in rows(drawn["marks"]) if names[m["kind"]] == name] for name in names}


def _table(at, column: str):
    """The page's first table with ``column``."""
    return next(d.value for d in at.dataframe if column in d.value.columns)


def test_timeline_shows_model_marks_and_request_details(root: Path) -> None:
    run = open_run(root / "llm")
    ep = run.episodes()
    first_turn = ep[ep["turn"] == 0]["id"].iloc[0]
    at = app("timeline", runs="llm", ep=first_turn)
    marks = _marks(at)
    assert {"model requests ok", "model requests retried"} <= set(marks)
    assert len(marks["model requests ok"]) + len(marks["model requests retried"]) == len(recorded(root / "llm"))
    usage = recorded(root / "llm")[0]["usage"]
    hover = marks["model requests retried"][0]
    assert "turn 0 · 3 requests to scripted" in hover
    assert f"tokens in {usage['prompt_tokens']} / out {usage['completion_tokens']}" in hover
    assert f"${usage['cost_usd']:.4f}" in hover and "429" in hover
    table = _table(at, "tool_calls")
    assert list(table["status"]) == ["retried", "retried", "ok"]
    sent = [c["result"].get("usage", {}).get("prompt_tokens") for c in recorded(root / "llm")[0]["calls"]
            if c["tool"] == "model"]
    assert [None if v != v else int(v) for v in table["prompt_tokens"]] == sent
    assert "429" in table["error"].iloc[1]
    assert "Model requests of turn 0" in texts(at)
    assert not any("result" in d.value.columns for d in at.dataframe), "every call waits in its closed expander"
    at.session_state["w_calls"] = True
    at.run()
    calls = _table(at, "result")
    assert list(calls["tool"])[:3] == ["model", "model", "model"]
    assert "atom" in set(calls["tool"]) and calls["result"].str.contains("finish_reason").any()


def test_timeline_marks_a_turn_whose_requests_all_failed(root: Path) -> None:
    at = app("timeline", runs="gave_up")
    marks = _marks(at)
    failed = marks["model requests failed"]
    assert len(failed) == 1 and len(marks["model requests ok"]) == 6
    assert "server error 503" in failed[0]

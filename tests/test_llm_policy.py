"""The LLM policy end to end: a local chat-completions server with scripted tool calls drives
the real game through the same memory tools and atoms as the scripted policy."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Iterator

import pytest

from loaders import open_run
from mfm.agent import RunConfig, Runner
from mfm.agent.atoms import ATOMS
from mfm.agent.config import LLMConfig
from mfm.agent.llm import LLMUnavailable, make_client
from mfm.agent.policy import Decision
from mfm.cli import main
from mfm.validate import validate
from scripted_llm import ScriptedModel, llm, serve

pytest.importorskip("openai")


@pytest.fixture
def endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[ScriptedModel, str]]:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    model = ScriptedModel()
    server, url = serve(model)
    yield model, url
    server.shutdown()
    server.server_close()


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_llm_policy_runs_real_crafter_with_every_tool(endpoint: tuple[ScriptedModel, str], tmp_path: Path) -> None:
    model, url = endpoint
    out = tmp_path / "run"
    runner = Runner(RunConfig(seed=0, steps=300, out=out, llm=llm(url)), command="test")
    runner.run()
    m = runner.writer.manifest
    assert m.status == "finished" and m.end_reason == "budget" and m.last_step == 300
    assert m.policy == "llm:scripted" and m.config["llm"]["model"] == "scripted"
    assert "test-key" not in (out / "run.json").read_text()
    c = validate(out, frames=True)
    assert not c.errors, [str(e) for e in c.errors]
    assert model.tools_called >= set(ATOMS) | {"search", "inspect", "read_file", "write_file", "consolidate",
                                               "run_procedure", "teleport"}
    assert model.saw_image

    turns = lines(out / "turns.jsonl")
    assert len(turns) > 15
    for t in turns:
        assert t["policy"] == "llm:scripted" and t["latency_s"] is not None and t["latency_s"] >= 0
        u = t["usage"]
        assert u["requests"] >= 1 and u["prompt_tokens"] >= 1000 and u["cost_usd"] > 0
        assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
        model_calls = [c for c in t["calls"] if c["tool"] == "model"]
        assert len(model_calls) == u["requests"]
        assert all(c["args"]["prompt_sha256"] and c["args"]["prompt_chars"] > 0 for c in model_calls)
        assert sum(1 for c in t["calls"] if c["tool"] in ("atom", "procedure")) == 1
    first = [c["result"] for c in turns[0]["calls"] if c["tool"] == "model"]
    assert first[0]["tool_calls"][0]["arguments"] == '{"x": 3, "y": '
    assert "malformed" in first[0]["failure"] and first[0]["retry_in_s"] > 0
    assert "429" in first[1]["error"] and "429" in first[1]["failure"]
    assert turns[0]["usage"]["failures"] == 2 and turns[0]["usage"]["requests"] == 3
    errors = " ".join(str(c["result"].get("error") or c["result"].get("failure"))
                      for t in turns for c in t["calls"] if c["tool"] == "model")
    for kind in ("timeout", "server error 500", "refusal", "unknown tool", "rate limit 429"):
        assert kind in errors, kind

    writes = lines(out / "memory_writes.jsonl")
    procedure_writes = [w for w in writes if w["path"].startswith("mine/procedures/")]
    assert {w["path"] for w in procedure_writes} == {"mine/procedures/wood_at.json"}
    assert procedure_writes[0]["op"] == "create" and procedure_writes[0]["author"] == "agent"
    refused = [c for t in turns for c in t["calls"] if c["tool"] == "model" and "fly" in str(c["result"].get("failure"))]
    assert refused, "the invalid procedure was refused with the validation error"
    procs = [t for t in turns if any(c["tool"] == "procedure" for c in t["calls"])]
    assert procs and (out / "mine" / "procedures" / "wood_at.json").exists()
    assert any(w["path"] == "mine/working.md" and w["reason"] == "test" for w in writes)

    run = open_run(out)
    assert run.manifest is not None and run.manifest.policy == "llm:scripted"
    summary = m.config["agent_summary"]
    assert summary["requests"] == sum(t["usage"]["requests"] for t in turns)
    assert summary["failures"] >= 7 and summary["cost_usd"] > 0


def test_consecutive_failures_stop_the_run_cleanly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    model = ScriptedModel(always_fail=503)
    server, url = serve(model)
    try:
        out = tmp_path / "run"
        runner = Runner(RunConfig(seed=0, steps=300, out=out, llm=llm(url, max_failures=3)), command="test")
        runner.run()
    finally:
        server.shutdown()
        server.server_close()
    m = runner.writer.manifest
    assert m.status == "interrupted" and "3 failures in a row" in m.end_reason and "503" in m.end_reason
    assert len(model.requests) == 3
    c = validate(out)
    assert not c.errors, [str(e) for e in c.errors]
    (turn,) = lines(out / "turns.jsonl")
    assert turn["episodes"] == [] and turn["usage"]["failures"] == 3
    assert [("503" in c["result"]["error"]) for c in turn["calls"] if c["tool"] == "model"] == [True] * 3
    assert open_run(out).manifest.status == "interrupted"


def test_cli_reads_endpoint_from_environment(endpoint: tuple[ScriptedModel, str], tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    model, url = endpoint
    model.script = False
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    out = tmp_path / "cli"
    assert main(["run", "--policy", "llm", "--model", "scripted", "--steps", "60", "--out", str(out), "--quiet",
                 "--price-in", "1.0"]) == 0
    assert "requests" in capsys.readouterr().out
    assert not validate(out).errors and model.requests
    assert main(["run", "--model", "x", "--out", str(tmp_path / "bad")]) == 2


def test_missing_openai_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(LLMUnavailable, match=r'pip install -e "\.\[llm\]"'):
        make_client(LLMConfig(model="m", base_url="http://127.0.0.1:9/v1"))


def test_pro_long_model_greps_its_text_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    model = ScriptedModel(turns={3: ["grep", "act"], 4: ["bad_grep", "act"]})
    server, url = serve(model)
    try:
        out = tmp_path / "run"
        Runner(RunConfig(seed=0, steps=80, out=out, method="pro-long", llm=llm(url)), command="test").run()
    finally:
        server.shutdown()
        server.server_close()
    offered = {t["function"]["name"] for t in model.requests[0]["tools"]}
    assert "grep" in offered and "consolidate" in offered and not offered & {"search", "inspect"}
    assert not validate(out).errors
    turns = lines(out / "turns.jsonl")
    greps = [c for c in turns[3]["calls"] if c["tool"] == "search"]
    assert greps and greps[0]["args"]["grep"] == "tree|grass" and greps[0]["args"]["file"] == "logs.txt"
    answers = [json.loads(m["content"]) for r in model.requests for m in r["messages"]
               if m["role"] == "tool" and '"matches"' in str(m["content"])]
    assert answers and answers[0]["matches"] == greps[0]["result"]["lines"] > 0
    assert all(re.search("tree|grass", ln["text"]) for ln in answers[0]["lines"])
    bad = [c["result"] for c in turns[4]["calls"] if c["tool"] == "model"]
    assert any("not a regular expression" in str(r.get("failure")) for r in bad)


def test_outside_decision_makes_no_model_request(endpoint: tuple[ScriptedModel, str], tmp_path: Path) -> None:
    model, url = endpoint
    runner = Runner(RunConfig(seed=0, steps=100, out=tmp_path / "run", llm=llm(url)), command="test")
    runner.start()
    before = len(model.requests)
    runner.run_turn(Decision("atom", "face", {"direction": "left"}, "outside controller"))
    assert len(model.requests) == before
    turn = lines(tmp_path / "run" / "turns.jsonl")[-1]
    assert turn["usage"]["requests"] == 0 and "outside controller" in turn["note"]
    assert "[" in runner.policy.state_block

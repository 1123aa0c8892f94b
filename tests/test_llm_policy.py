"""The LLM policy end to end: a local chat-completions server with scripted tool calls drives
the real game through the same memory tools and atoms as the scripted policy."""
from __future__ import annotations

import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest

from loaders import open_run
from mfm.agent import RunConfig, Runner
from mfm.agent.atoms import ATOMS
from mfm.agent.config import LLMConfig
from mfm.agent.llm import LLMUnavailable, make_client
from mfm.agent.policy import Decision
from mfm.cli import main
from mfm.validate import validate

pytest.importorskip("openai")

POS = re.compile(r"pos \((-?\d+), (-?\d+)\)")
BAD_PROCEDURE = {"name": "fly_home", "description": "not an atom", "steps": [{"atom": "fly", "args": {}}]}
GOOD_PROCEDURE = {"name": "wood_at", "description": "collect the tree at a cell", "params": ["x", "y"],
                  "steps": [{"atom": "collect", "args": {"material": "tree", "x": "$x", "y": "$y"}}]}
FORCED_ATOMS = {9: "go_to", 10: "look_at", 11: "face", 12: "place", 13: "craft", 14: "drink", 15: "eat",
                16: "sleep", 17: "shelter", 18: "attack"}


def turn_script(k: int) -> list[str]:
    """What the scripted model does in its k-th turn (``act`` ends the turn with an atom)."""
    return {0: ["malformed", "rate_limit", "act"], 1: ["search", "act"], 2: ["search", "inspect", "act"],
            3: ["read", "act"], 4: ["bad_procedure", "good_procedure", "act"], 5: ["consolidate", "act"],
            6: ["procedure"], 7: ["unknown_tool", "act"], 8: ["refusal", "server_error", "timeout", "act"]}.get(k, ["act"])


class ScriptedModel:
    """A deterministic 'model': a per-turn script of tool calls, failures and simple rules."""

    def __init__(self, script: bool = True, always_fail: int | None = None,
                 turns: dict[int, list[str]] | None = None) -> None:
        self.script = script
        self.scripted_turns = turns
        self.always_fail = always_fail
        self.requests: list[dict[str, Any]] = []
        self.turn_key: str | None = None
        self.turns = -1
        self.queue: list[str] = []
        self.tools_called: set[str] = set()
        self.saw_image = False
        self.calls = 0

    def reply(self, body: dict[str, Any]) -> tuple[int, dict[str, Any], float]:
        """(HTTP status, JSON body, seconds to wait first) for one request."""
        self.requests.append(body)
        if self.always_fail is not None:
            return self.always_fail, {"error": {"message": "unavailable", "type": "server_error"}}, 0.0
        messages = body["messages"]
        for m in messages:
            if isinstance(m.get("content"), list):
                self.saw_image |= any(p.get("type") == "image_url" and p["image_url"]["url"].startswith(
                    "data:image/png;base64,") for p in m["content"])
        if messages[1]["content"] != self.turn_key:
            self.turn_key = messages[1]["content"]
            self.turns += 1
            if self.scripted_turns is not None:
                self.queue = self.scripted_turns.get(self.turns, ["act"])
            else:
                self.queue = turn_script(self.turns) if self.script else ["act"]
        item = self.queue.pop(0) if len(self.queue) > 1 else self.queue[0]
        offered = {t["function"]["name"] for t in body["tools"]}
        state = messages[1]["content"]
        if item == "rate_limit":
            return 429, {"error": {"message": "slow down", "type": "rate_limit"}}, 0.0
        if item == "server_error":
            return 500, {"error": {"message": "boom", "type": "server_error"}}, 0.0
        if item == "timeout":
            return 200, self.call("explore", {"x": 1, "y": 1}), 1.5
        if item == "refusal":
            return 200, {"id": "r", "object": "chat.completion", "created": 0, "model": body["model"], "choices": [{
                "index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": None,
                                                                 "refusal": "I cannot help with that."}}]}, 0.0
        if item == "malformed":
            return 200, self.call("explore", '{"x": 3, "y": ', raw=True), 0.0
        if item == "unknown_tool":
            return 200, self.call("teleport", {"x": 0, "y": 0}), 0.0
        if item == "grep":
            return 200, self.call("grep", {"pattern": "tree|grass", "limit": 5}), 0.0
        if item == "bad_grep":
            return 200, self.call("grep", {"pattern": "(unclosed"}), 0.0
        if item == "search":
            return 200, self.call("search", {"since_step": 0, "limit": 3}), 0.0
        if item == "inspect":
            found = json.loads(messages[-1]["content"])["episodes"]
            return 200, self.call("inspect", {"episode": found[0]["id"], "frame": -1}), 0.0
        if item == "read":
            return 200, self.call("read_file", {"path": "mine/working.md"}), 0.0
        if item in ("bad_procedure", "good_procedure"):
            proc = BAD_PROCEDURE if item == "bad_procedure" else GOOD_PROCEDURE
            return 200, self.call("write_file", {"path": f"mine/procedures/{proc['name']}.json",
                                                 "content": json.dumps(proc), "reason": "test"}), 0.0
        if item == "consolidate":
            x, y = self.pos(state)
            return 200, self.call("consolidate", {"reason": "test", "facts": [
                {"key": f"note:start@{x},{y}", "text": "a test fact", "section": "Notes"}],
                "plan": {"goal": "collect wood", "targets": [{"x": x, "y": y, "label": "here"}],
                         "prediction": "more wood", "contradictions": []}}), 0.0
        name, args = self.action(state, offered)
        return 200, self.call(name, args), 0.0

    def action(self, state: str, offered: set[str]) -> tuple[str, dict[str, Any]]:
        """The turn's action: a forced atom on some turns, else collect a tree in view or explore."""
        x, y = self.pos(state)
        tree = re.search(r"tree \((-?\d+),(-?\d+)\)", state)
        forced = FORCED_ATOMS.get(self.turns) if self.script else None
        if self.script and self.turns == 6 and "run_procedure" in offered:
            at = (int(tree[1]), int(tree[2])) if tree else (x + 1, y)
            return "run_procedure", {"name": "wood_at", "args": {"x": at[0], "y": at[1]}}
        if forced == "go_to":
            return "go_to", {"x": x + 2, "y": y}
        if forced == "look_at":
            return "look_at", {"x": x - 3, "y": y + 1}
        if forced == "face":
            return "face", {"direction": "left"}
        if forced == "place":
            return "place", {"item": "table"}
        if forced == "craft":
            return "craft", {"item": "wood_pickaxe", "table_x": x + 1, "table_y": y}
        if forced == "drink":
            return "drink", {"x": x, "y": y + 1}
        if forced in ("eat", "shelter", "attack"):
            return forced, {}
        if forced == "sleep":
            return "sleep", {"until_day": False}
        if tree:
            return "collect", {"material": "tree", "x": int(tree[1]), "y": int(tree[2]), "why": "wood in view"}
        leg = self.turns % 4
        return "explore", {"x": x + (12, 0, -12, 0)[leg], "y": y + (0, 12, 0, -12)[leg], "stop_on": ["tree"]}

    @staticmethod
    def pos(state: str) -> tuple[int, int]:
        m = POS.search(state)
        assert m, state
        return int(m[1]), int(m[2])

    def call(self, name: str, args: Any, raw: bool = False) -> dict[str, Any]:
        self.calls += 1
        self.tools_called.add(name)
        return {"id": f"c{self.calls}", "object": "chat.completion", "created": 0, "model": "scripted",
                "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                    "role": "assistant", "content": None, "tool_calls": [{
                        "id": f"call_{self.calls}", "type": "function",
                        "function": {"name": name, "arguments": args if raw else json.dumps(args)}}]}}],
                "usage": {"prompt_tokens": 1000, "completion_tokens": 20, "total_tokens": 1020}}


def serve(model: ScriptedModel) -> tuple[ThreadingHTTPServer, str]:
    """Start a chat-completions server for ``model`` on a free local port."""
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
            if self.path != "/v1/chat/completions":
                self.send_error(404)
                return
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                status, out, wait = model.reply(body)
            time.sleep(wait)
            data = json.dumps(out).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if status == 429:
                    self.send_header("Retry-After", "0")
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"


@pytest.fixture
def endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[ScriptedModel, str]]:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    model = ScriptedModel()
    server, url = serve(model)
    yield model, url
    server.shutdown()
    server.server_close()


def llm(url: str, **kw: Any) -> LLMConfig:
    base = dict(model="scripted", base_url=url, backoff_s=0.01, backoff_max_s=0.05, timeout_s=1.0,
                price_prompt_per_1k=0.5, price_completion_per_1k=1.5)
    base.update(kw)
    return LLMConfig(**base)


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
    assert "grep" in offered and not offered & {"search", "inspect", "consolidate"}
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

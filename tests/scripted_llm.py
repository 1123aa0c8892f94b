"""Test helper: a local chat-completions server (``serve``) answering with a scripted,
deterministic "model" (``ScriptedModel``): per-turn tool calls, failures (rate limit, server
error, timeout, refusal, malformed or unknown calls) and simple rules for the real game."""
from __future__ import annotations

import json
import re
import select
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from mfm.agent.config import LLMConfig

POS = re.compile(r"pos \((-?\d+), (-?\d+)\)")
BAD_PROCEDURE = {"name": "fly_home", "description": "not an atom", "steps": [{"atom": "fly", "args": {}}]}
TIMEOUT_DELAY_S = 30.0
"""How long the scripted "timeout" keeps the client waiting: far longer than any client timeout
the tests set (1 s), so a loaded machine cannot turn it into an answer; the server stops
waiting as soon as the client hangs up, so the test spends only the client's timeout on it."""
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
            return 200, self.call("explore", {"x": 1, "y": 1}), TIMEOUT_DELAY_S
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
            if wait and select.select([self.connection], [], [], wait)[0]:
                return  # the client hung up (timed out): nobody is left to answer
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


def llm(url: str, **kw: Any) -> LLMConfig:
    base = dict(model="scripted", base_url=url, backoff_s=0.01, backoff_max_s=0.05, timeout_s=1.0,
                price_prompt_per_1k=0.5, price_completion_per_1k=1.5)
    base.update(kw)
    return LLMConfig(**base)

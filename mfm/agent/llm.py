"""The LLM policy (issue 11): a model over an OpenAI-compatible chat-completions API drives
the same memory tools and atoms as the scripted policy.

Each turn the model gets a system prompt (rules, actions, how to use memory), the working
memory (``mine/working.md``, which survives any trimming of the context: a context reset),
GUIDE.md, the recent turns trimmed to a token budget, and the same per-turn state block as
the scripted policy plus the positions of what is in view. It then calls tools: memory tools
(search, inspect, read_file, write_file, consolidate) return results and the turn goes on;
one action tool (an atom or ``run_procedure``) ends the turn, and the runner executes it as
one episode. Every request is logged as a ``model`` call of the turn (prompt or its sha256
and length, tool calls, usage, latency, error); the turn's ``usage`` sums tokens and cost.

Failures (timeouts, 429, 5xx, connection errors, malformed tool calls, unknown tools, text
or refusals instead of a tool call) are recorded and retried with exponential backoff; after
``max_failures`` in a row :class:`ModelGaveUp` is raised and the runner closes the run with
status ``interrupted`` and an ``end_reason`` naming the last error.
"""
from __future__ import annotations

import base64
import hashlib
import inspect as pyinspect
import io
import json
import os
import re
import time
from collections import deque
from dataclasses import replace
from typing import Any

import numpy as np
from PIL import Image

from mfm.agent import events
from mfm.agent.atoms import ATOMS, AtomResult, Atoms, visible
from mfm.agent.config import LLMConfig
from mfm.agent.llm_tools import ACTIONS, ArgumentError, check_args, memory_tool_names, params_of, tool_specs
from mfm.agent.modes import MFM, MemoryMode
from mfm.agent.policy import MFMPolicy
from mfm.agent.protocol import Decision, PolicyGaveUp
from mfm.agent.tools import MemoryTools
from mfm.envs import Perception, Task, decode_frame, estimate_daylight
from mfm.envs.rules import LOCAL_VIEW
from mfm.memory import Fact, ProceduralMemory, Target, WorkingPlan
from mfm.memory.agent_memory import MemoryPathError
from mfm.memory.consolidation import GUIDE, WORKING
from mfm.memory.procedures import PROC_DIR, ProcedureError, parse_procedure
from mfm.memory.retrieval import FrameError
from mfm.schema import IndexRow

INSTALL_HINT = 'pip install -e ".[llm]"  (or: pip install "openai>=1.40")'
IMAGE_TOKENS = 300
RESULT_CHARS = 3000
GREP_MAX_PATTERN = 200
FATAL_STATUS = (401, 403, 404)
VIEW_KINDS = ("water", "tree", "stone", "coal", "iron", "diamond", "lava", "table", "furnace", "cow", "zombie",
              "skeleton", "sapling", "plant")


class LLMUnavailable(RuntimeError):
    """The LLM policy cannot start (no openai package, no key, bad settings)."""


class ModelGaveUp(PolicyGaveUp):
    """Too many model failures in a row: the run stops cleanly."""


class ModelFailure(Exception):
    """One failed model request or unusable reply (recorded, then retried)."""

    def __init__(self, kind: str, message: str, retry_after: float | None = None, fatal: bool = False) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.retry_after = retry_after
        self.fatal = fatal


def make_client(config: LLMConfig) -> Any:
    """An ``openai.OpenAI`` client for the endpoint (no retries of its own: ours are recorded)."""
    try:
        import openai
    except ImportError as e:
        raise LLMUnavailable(f"the llm policy needs the openai package: {INSTALL_HINT}") from e
    base = config.base_url or os.environ.get("OPENAI_BASE_URL") or None
    key = os.environ.get(config.api_key_env)
    if not key:
        if base is None:
            raise LLMUnavailable(f"set {config.api_key_env} (and OPENAI_BASE_URL for a non-OpenAI endpoint)")
        key = "none"
    return openai.OpenAI(base_url=base, api_key=key, timeout=config.timeout_s, max_retries=0)


def estimate_tokens(messages: list[dict[str, Any]]) -> int:
    """Tokens of a prompt, estimated as characters / 4 (images a fixed amount each)."""
    chars, images = 0, 0
    for m in messages:
        content = m.get("content")
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            for part in content:
                if part.get("type") == "image_url":
                    images += 1
                else:
                    chars += len(part.get("text", ""))
        for c in m.get("tool_calls") or ():
            chars += len(c["function"]["name"]) + len(c["function"]["arguments"])
    return chars // 4 + images * IMAGE_TOKENS


def prompt_text(messages: list[dict[str, Any]]) -> str:
    """The prompt as one text, images replaced by the sha256 of their data URL (for recording)."""
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            parts = []
            for part in content:
                if part.get("type") == "image_url":
                    url = part["image_url"]["url"]
                    parts.append(f"<image sha256={hashlib.sha256(url.encode()).hexdigest()[:16]} chars={len(url)}>")
                else:
                    parts.append(part.get("text", ""))
            content = "\n".join(parts)
        calls = " ".join(f"{c['function']['name']}({c['function']['arguments']})" for c in m.get("tool_calls") or ())
        out.append(f"[{m['role']}] {content or ''}{(' ' + calls) if calls else ''}")
    return "\n".join(out)


def png_data_url(frame: np.ndarray, scale: int = 4) -> str:
    """A frame as a base64 PNG data URL (scaled up, nearest neighbour)."""
    img = Image.fromarray(frame)
    if scale > 1:
        img = img.resize((img.width * scale, img.height * scale), Image.NEAREST)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def system_prompt(task: Task, mode: MemoryMode, tools: list[str]) -> str:
    """The fixed instructions: the game, the action reference, how to use memory."""
    milestones = ", ".join(task.milestones)
    return "\n".join([
        "You play Crafter, a 2D survival game, over a long horizon. Your task: reach these milestones in order: "
        f"{milestones}.",
        "World coordinates: x grows to the right, y grows downwards. You see a "
        f"{LOCAL_VIEW[0]}x{LOCAL_VIEW[1]} window centred on yourself.",
        "Rules: collect wood from trees; a table needs wood, a wood pickaxe needs a table nearby; stone needs a "
        "wood pickaxe, iron a stone pickaxe and a furnace by the table, diamond an iron pickaxe. Keep food, drink "
        "and energy up (eat cows, drink water, sleep in a sealed shelter at night); zombies and skeletons hurt.",
        "Each turn, call memory tools as you need, then exactly ONE action tool (an atom or run_procedure). The "
        "action runs as one closed-loop episode of several game steps; the next turn shows its outcome.",
        "Memory: every episode is stored with its frames and indexed. Search the index for places you were and "
        "inspect their frames to recover what the text does not say (where trees, water, ore were). Keep world "
        "knowledge in mine/GUIDE.md (consolidate with facts) and your current plan, next prediction and "
        "unresolved contradictions in mine/working.md: working memory is shown to you every turn and survives "
        "when older turns are dropped from your context. Procedures you write are JSON data and are validated.",
        f"Memory tools available: {', '.join(tools) or 'none'}.",
    ])


def view_block(p: Perception) -> str:
    """Positions of the notable things in view, nearest first (at most 3 of each)."""
    parts = []
    for kind in VIEW_KINDS:
        cells = [c for _, c in visible(p, {kind})][:3]
        if cells:
            parts.append(f"{kind} " + " ".join(f"({x},{y})" for x, y in cells))
    return f"[VIEW] facing {p.facing}; " + ("; ".join(parts) if parts else "nothing notable")


class LLMPolicy(MFMPolicy):
    """A model decides each turn through function calls over the same memory and atoms."""

    def __init__(self, task: Task, procedures: ProceduralMemory, config: LLMConfig, client: Any,
                 mode: MemoryMode = MFM, seed: int = 0, consolidate_every: int = 25) -> None:
        super().__init__(task, procedures, mode=mode, seed=seed)
        self.llm = config
        self.client = client
        self.name = f"llm:{config.model}"
        self.memory_tools = memory_tool_names(mode)
        self.system = system_prompt(task, mode, self.memory_tools)
        self.history: deque[str] = deque(maxlen=200)
        self.consolidate_every = consolidate_every
        self.since_consolidation = 0
        self.failures = 0
        self.last_error = ""
        self.turn_usage: dict[str, Any] | None = None
        self.turn_latency: float | None = None
        self.totals = {"requests": 0, "failures": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0,
                       "trimmed_turns": 0}

    # -- the prompt ---------------------------------------------------------------------------
    def _memory_text(self, tools: MemoryTools) -> str:
        parts = []
        if self.mode.notes:
            working = tools.peek(WORKING) or "(empty)"
            parts.append(f"[WORKING MEMORY] {WORKING} (survives context resets)\n{working}")
            guide = tools.peek(GUIDE) or "(empty)"
            limit = self.llm.guide_tokens * 4
            if len(guide) > limit:
                guide = guide[:limit] + f"\n... ({len(guide) - limit} more characters: read_file {GUIDE})"
            parts.append(f"[GUIDE] {GUIDE}\n{guide}")
        if self.mode.procedures:
            names = self.procedures.names()
            parts.append("[PROCEDURES] " + (", ".join(names) if names else "none yet"))
        return "\n\n".join(parts)

    def _recent_text(self) -> tuple[str, int]:
        """The recent turns, newest kept, within the token budget; and how many were dropped."""
        if not self.mode.recent:
            return "", 0
        budget = self.llm.recent_tokens * 4
        kept: list[str] = []
        used = 0
        for line in reversed(self.history):
            if used + len(line) + 1 > budget:
                break
            kept.append(line)
            used += len(line) + 1
        dropped = len(self.history) - len(kept)
        head = f"[RECENT] last {len(kept)} turns" + (f" ({dropped} older ones dropped)" if dropped else "")
        return head + "\n" + ("\n".join(reversed(kept)) or "-"), dropped

    def prompt(self, tools: MemoryTools) -> tuple[list[dict[str, Any]], int]:
        """The messages that open a turn, and how many old turns the budget dropped."""
        recent, dropped = self._recent_text()
        blocks = [b for b in (self._memory_text(tools), recent) if b]
        due = self.mode.consolidation and self.mode.notes and self.since_consolidation >= self.consolidate_every
        state = "[STATE]\n" + self.state_block
        if due:
            state += "\n[CONSOLIDATE] due: revise GUIDE.md and working.md from the evidence (consolidate tool)"
        blocks.append(state)
        return [{"role": "system", "content": self.system}, {"role": "user", "content": "\n\n".join(blocks)}], dropped

    # -- deciding -----------------------------------------------------------------------------
    def observe(self, p: Perception, tools: MemoryTools) -> dict[str, Fact]:
        """The state block (with the view as text) and fresh per-turn usage; no request is made."""
        self._update_seen(tools)
        facts = self.knowledge(p, tools)
        self.state_block = self.build_state(p, tools, facts) + "\n" + view_block(p)
        self.turn_usage = {"requests": 0, "failures": 0, "prompt_tokens": 0, "completion_tokens": 0,
                           "total_tokens": 0, "cost_usd": 0.0, "estimated": False}
        self.turn_latency = 0.0
        return facts

    def turn_cost(self) -> tuple[dict[str, Any] | None, float | None]:
        """The model usage and latency (seconds) of this turn so far."""
        return self.turn_usage, self.turn_latency

    def decide(self, p: Perception, tools: MemoryTools, source: str | None) -> Decision:
        """Ask the model until it names one valid action; memory tool calls run on the way."""
        self.observe(p, tools)
        messages, dropped = self.prompt(tools)
        self.totals["trimmed_turns"] = max(self.totals["trimmed_turns"], dropped)
        rounds = 0
        while True:
            forced = rounds >= self.llm.max_tool_rounds
            try:
                reply = self._request(messages, tools, forced, dropped)
                decision = self._handle(reply, messages, tools, forced)
            except ModelFailure as f:
                self._failed(f, tools)
                continue
            if decision is not None:
                self.failures = 0
                return decision
            rounds += 1
            if rounds == self.llm.max_tool_rounds:
                messages.append({"role": "user", "content": "Memory tool limit for this turn reached: call one "
                                                            "action tool now."})

    def _request(self, messages: list[dict[str, Any]], tools: MemoryTools, forced: bool, dropped: int) -> Any:
        """One chat-completions request, logged as a ``model`` call; raises ModelFailure."""
        text = prompt_text(messages)
        args: dict[str, Any] = {
            "model": self.llm.model, "messages": len(messages), "prompt_chars": len(text),
            "prompt_tokens_est": estimate_tokens(messages), "prompt_sha256": hashlib.sha256(text.encode()).hexdigest(),
            "actions_only": forced, "dropped_turns": dropped}
        if len(text) <= self.llm.record_prompt_chars:
            args["prompt"] = text
        kw: dict[str, Any] = {"model": self.llm.model, "messages": messages,
                              "tools": tool_specs(self.mode, actions_only=forced)}
        if self.llm.temperature is not None:
            kw["temperature"] = self.llm.temperature
        if self.llm.max_tokens is not None:
            kw["max_tokens"] = self.llm.max_tokens
        self.turn_usage["requests"] += 1
        self.totals["requests"] += 1
        start = time.monotonic()
        try:
            resp = self.client.chat.completions.create(**kw)
        except Exception as e:  # noqa: BLE001 - every client error is a recorded, retried failure
            latency = time.monotonic() - start
            self.turn_latency += latency
            failure = _classify(e)
            tools.log("model", args, {"error": str(failure), "latency_s": round(latency, 3)})
            raise failure from e
        latency = time.monotonic() - start
        self.turn_latency += latency
        usage = self._add_usage(resp, messages)
        choice = resp.choices[0] if getattr(resp, "choices", None) else None
        msg = choice.message if choice is not None else None
        calls = [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
                 for c in (getattr(msg, "tool_calls", None) or [])]
        result: dict[str, Any] = {"finish_reason": getattr(choice, "finish_reason", None), "tool_calls": calls,
                                  "usage": usage, "latency_s": round(latency, 3)}
        if msg is not None and msg.content:
            result["content"] = msg.content[:500]
        if msg is not None and getattr(msg, "refusal", None):
            result["refusal"] = msg.refusal[:500]
        tools.log("model", args, result)
        if msg is None:
            raise ModelFailure("empty reply", "no choices in the response")
        return msg

    def _add_usage(self, resp: Any, messages: list[dict[str, Any]]) -> dict[str, Any]:
        u = getattr(resp, "usage", None)
        if u is not None and getattr(u, "prompt_tokens", None) is not None:
            pt, ct = int(u.prompt_tokens), int(u.completion_tokens or 0)
        else:
            pt, ct = estimate_tokens(messages), 0
            self.turn_usage["estimated"] = True
        cost = pt / 1000 * self.llm.price_prompt_per_1k + ct / 1000 * self.llm.price_completion_per_1k
        for d in (self.turn_usage, self.totals):
            d["prompt_tokens"] += pt
            d["completion_tokens"] += ct
            d["cost_usd"] = round(d["cost_usd"] + cost, 8)
        self.turn_usage["total_tokens"] = self.turn_usage["prompt_tokens"] + self.turn_usage["completion_tokens"]
        return {"prompt_tokens": pt, "completion_tokens": ct, "cost_usd": round(cost, 8)}

    def _failed(self, f: ModelFailure, tools: MemoryTools) -> None:
        """Count a failure; give up after too many in a row, else wait (exponential backoff)."""
        self.failures += 1
        self.turn_usage["failures"] += 1
        self.totals["failures"] += 1
        self.last_error = str(f)
        if f.fatal or self.failures >= self.llm.max_failures:
            why = "a non-retryable error" if f.fatal else f"{self.failures} failures in a row"
            raise ModelGaveUp(f"model gave up after {why} (last: {f})")
        delay = min(self.llm.backoff_max_s, self.llm.backoff_s * 2 ** (self.failures - 1))
        if f.retry_after is not None:
            delay = min(self.llm.backoff_max_s, max(delay, f.retry_after))
        last = next((c for c in reversed(tools.calls) if c["tool"] == "model"), None)
        if last is not None:
            last["result"]["retry_in_s"] = round(delay, 3)
            last["result"]["failure"] = str(f)
        time.sleep(delay)

    def _handle(self, msg: Any, messages: list[dict[str, Any]], tools: MemoryTools, forced: bool) -> Decision | None:
        """Run the reply's tool calls; the action, if one was valid. Raises ModelFailure for a
        reply without usable calls (after telling the model what was wrong)."""
        calls = getattr(msg, "tool_calls", None) or []
        if not calls:
            refusal = getattr(msg, "refusal", None)
            text = (msg.content or "").strip()
            messages.append({"role": "assistant", "content": text or refusal or ""})
            messages.append({"role": "user", "content": "Reply with tool calls only: memory tools, then one action."})
            if refusal:
                raise ModelFailure("refusal", refusal[:200])
            raise ModelFailure("no tool call", text[:200] or "empty reply")
        messages.append({"role": "assistant", "content": msg.content or "", "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.function.name,
                                                          "arguments": c.function.arguments or ""}}
            for c in calls]})
        decision: Decision | None = None
        errors: list[str] = []
        images: list[dict[str, Any]] = []
        for c in calls:
            name, raw = c.function.name, c.function.arguments or "{}"
            try:
                args = json.loads(raw) if raw.strip() else {}
                if not isinstance(args, dict):
                    raise ArgumentError("arguments must be a JSON object")
                result = self._call(name, args, tools, forced, decision is not None, images)
                if isinstance(result, Decision):
                    decision, result = result, {"ok": "the action runs now"}
            except json.JSONDecodeError as e:
                result = {"error": f"arguments of {name} are not valid JSON: {e}"}
                errors.append(f"malformed arguments for {name}")
            except (ArgumentError, ProcedureError, MemoryPathError, FrameError) as e:
                result = {"error": str(e)}
                errors.append(f"{name}: {e}")
            messages.append({"role": "tool", "tool_call_id": c.id, "content": _clip(json.dumps(result))})
        if images:
            messages.append({"role": "user", "content": images})
        if decision is None and errors:
            raise ModelFailure("malformed tool call", "; ".join(errors)[:300])
        return decision

    def _call(self, name: str, args: dict[str, Any], tools: MemoryTools, forced: bool, acted: bool,
              images: list[dict[str, Any]]) -> dict[str, Any] | Decision:
        """One tool call: a memory tool's result, or the turn's Decision for an action."""
        schema = params_of(name)
        offered = name in ACTIONS and (name != "run_procedure" or self.mode.procedures)
        offered = offered or (name in self.memory_tools and not forced)
        if schema is None or not offered:
            raise ArgumentError(f"unknown tool {name!r}" if schema is None else f"tool {name} is not available now")
        check_args(schema, args, name)
        if name in ACTIONS:
            if acted:
                return {"error": "not run: one action per turn"}
            return self._action(name, args)
        if name == "search":
            return self._search(args, tools)
        if name == "grep":
            return self._grep(args, tools)
        if name == "inspect":
            return self._inspect(args, tools, images)
        if name == "read_file":
            text = tools.read(args["path"])
            return {"path": args["path"], "exists": text is not None, "content": _clip(text or "")}
        if name == "write_file":
            return self._write(args, tools)
        return self._consolidate(args, tools)

    def _action(self, name: str, args: dict[str, Any]) -> Decision:
        why = str(args.pop("why", "") or name)
        if name == "run_procedure":
            proc = self.procedures.load(args["name"])
            if proc is None or proc.disabled:
                raise ArgumentError(f"no usable procedure {args['name']!r} (known: {', '.join(self.procedures.names())})")
            for i, step in enumerate(proc.bind(args.get("args", {}))):
                check_args(params_of(step["atom"]) or {}, step["args"], f"{proc.name}.steps[{i}]")
            return Decision("procedure", proc.name, dict(args.get("args", {})), why)
        _bindable(name, args)
        targets: list[tuple[str, int, int]] = []
        if "x" in args and "y" in args:
            targets.append(("look_at" if name == "look_at" else "go_to", args["x"], args["y"]))
        elif name == "craft":
            targets.append(("go_to", args["table_x"], args["table_y"]))
        return Decision("atom", name, args, why, targets)

    def _search(self, args: dict[str, Any], tools: MemoryTools) -> dict[str, Any]:
        pred: dict[str, Any] = {"kind": "episode", "limit": max(1, min(int(args.get("limit", 8)), 20))}
        if args.get("text"):
            pred["text"] = args["text"]
        if args.get("tags"):
            pred["tags"] = tuple(args["tags"])
        if args.get("outcome"):
            pred["outcome"] = args["outcome"]
        if "near_x" in args and "near_y" in args:
            pred["near"] = (float(args["near_x"]), float(args["near_y"]))
            pred["radius"] = float(args.get("radius", 12.0))
        if "since_step" in args or "until_step" in args:
            pred["steps"] = (int(args.get("since_step", 0)), int(args.get("until_step", 10 ** 9)))
        rows = tools.search(**pred)
        return {"episodes": [{"id": r.id, "turn": r.turn, "steps": [r.first_step, r.last_step], "x": r.x, "y": r.y,
                              "frames": r.frames, "summary": r.summary[:160]} for r in rows]}

    def _grep(self, args: dict[str, Any], tools: MemoryTools) -> dict[str, Any]:
        pattern = args["pattern"]
        if len(pattern) > GREP_MAX_PATTERN:
            raise ArgumentError(f"grep.pattern: at most {GREP_MAX_PATTERN} characters")
        try:
            re.compile(pattern)
        except re.error as e:
            raise ArgumentError(f"grep.pattern is not a regular expression: {e}") from None
        hits = tools.grep(pattern, int(args.get("since_step", 0)))
        limit = max(1, min(int(args.get("limit", 20)), 50))
        return {"matches": len(hits), "lines": [{"episode": h.episode, "step": h.step, "text": h.text[:160]}
                                                for h in hits[-limit:][::-1]]}

    def _inspect(self, args: dict[str, Any], tools: MemoryTools, images: list[dict[str, Any]]) -> dict[str, Any]:
        ref = tools.episode(args["episode"])
        if ref is None or not ref.frames:
            raise ArgumentError(f"no stored frames for episode {args['episode']!r} (use an id from search)")
        i = int(args.get("frame", -1))
        i = ref.frames + i if i < 0 else i
        if not 0 <= i < ref.frames:
            raise ArgumentError(f"frame must be in 0..{ref.frames - 1} (or negative from the end)")
        frame = tools.frame(ref, i)
        step = ref.first_step + 1 + i
        pos = tools.position_in(ref, step)
        tiles = decode_frame(frame, estimate_daylight(frame))
        rows = []
        for r in range(len(tiles[0])):
            names = [tiles[c][r] for c in range(len(tiles))]
            y = None if pos is None else pos[1] + r - 3
            rows.append(f"y={y}: " + " ".join(names) if y is not None else " ".join(names))
        x0 = None if pos is None else pos[0] - 4
        found = sorted({(tiles[c][r], c, r) for c in range(len(tiles)) for r in range(len(tiles[0]))
                        if tiles[c][r] in VIEW_KINDS})
        where = [{"name": n, "x": x0 + c, "y": pos[1] + r - 3} for n, c, r in found] if pos else []
        tools.inspected_frames += 1
        tools.log("inspect", {"episode": ref.id, "turn": ref.turn, "by": "search", "frame": i, "frames": 1},
                  {"found": where, "step": step})
        if self.llm.send_images:
            images += [{"type": "text", "text": f"frame {i} of {ref.id} (step {step}, player at {pos})"},
                       {"type": "image_url", "image_url": {"url": png_data_url(frame)}}]
        return {"episode": ref.id, "step": step, "player": list(pos) if pos else None,
                "columns_x_from": x0, "tiles_by_row": rows, "notable": where}

    def _write(self, args: dict[str, Any], tools: MemoryTools) -> dict[str, Any]:
        path, content, reason = args["path"], args["content"], args["reason"]
        sources = [s for s in args.get("sources", []) if tools.episode(s) is not None]
        norm = path if path.startswith("mine/") else f"mine/{path}"
        if norm.startswith(PROC_DIR + "/"):
            if not self.mode.procedures:
                raise ArgumentError("procedures are not available in this memory mode")
            try:
                obj = json.loads(content)
            except json.JSONDecodeError as e:
                raise ProcedureError(f"a procedure must be JSON: {e}") from e
            if isinstance(obj, dict) and "sources" not in obj:
                obj["sources"] = sources
            proc = parse_procedure(obj, ATOMS)
            if norm != self.procedures.path(proc.name):
                raise ProcedureError(f"procedure {proc.name} must be written to {self.procedures.path(proc.name)}")
            for i, step in enumerate(proc.steps):
                schema = params_of(step["atom"]) or {}
                plain = {k: v for k, v in step.get("args", {}).items() if not (isinstance(v, str) and v.startswith("$"))}
                check_args({**schema, "required": []}, plain, f"{proc.name}.steps[{i}]")
            old = self.procedures.load(proc.name)
            if old is not None:
                proc = replace(proc, uses=old.uses, failures=old.failures, version=old.version)
            saved = self.procedures.save(proc, author="agent", reason=reason, sources=proc.sources, step=tools.step,
                                         life=tools.life, turn=tools.turn)
            tools.log("write", {"path": norm, "reason": reason, "sources": list(proc.sources)},
                      {"procedure": saved.name, "version": saved.version})
            return {"ok": f"procedure {saved.name} v{saved.version} stored"}
        if not self.mode.notes:
            raise ArgumentError("notes are not available in this memory mode")
        changed = tools.write(norm, content, reason=reason, sources=sources)
        return {"ok": "written" if changed else "unchanged", "path": norm}

    def _consolidate(self, args: dict[str, Any], tools: MemoryTools) -> dict[str, Any]:
        facts = [Fact(f["key"], f["text"], f.get("section", "Notes"),
                      tuple(s for s in f.get("sources", []) if tools.episode(s) is not None),
                      bool(f.get("retract", False))) for f in args.get("facts", [])]
        for f in facts:
            if "]" in f.key or "\n" in f.key + f.text:
                raise ArgumentError(f"fact key/text must be one line without ']': {f.key!r}")
        plan = None
        if "plan" in args:
            pl = args["plan"]
            plan = WorkingPlan(goal=pl["goal"], targets=tuple(Target(int(t["x"]), int(t["y"]), t["label"])
                                                              for t in pl.get("targets", [])),
                               prediction=pl.get("prediction", ""), contradictions=tuple(pl.get("contradictions", [])))
        result = tools.consolidate(facts, plan, args["reason"])
        self.since_consolidation = 0
        return result

    # -- after the episode ------------------------------------------------------------------------
    def after(self, d: Decision, result: AtomResult, row: IndexRow, died: bool, p: Perception,
              tools: MemoryTools) -> None:
        """Remember the outcome for the next prompts; keep a procedure's use counts."""
        self.recent.append((d.kind, d.name, {k: v for k, v in d.args.items() if k != "stop_on"}, result.label, row.id))
        tools.log("procedure" if d.kind == "procedure" else "atom", {"name": d.name, "args": d.args, "why": d.goal},
                  {"label": result.label, "reason": result.reason, "episode": row.id,
                   "steps": row.last_step - row.first_step, "died": died})
        args = ", ".join(f"{k}={v}" for k, v in d.args.items())
        self.history.append(f"turn {tools.turn} ({row.id}, steps {row.first_step}-{row.last_step}): {d.name}({args}) "
                            f"-> {result.label}: {result.reason}{' [DIED]' if died else ''}; now at {p.pos}")
        self.since_consolidation += 1
        if d.kind == "procedure" and self.mode.procedures:
            self._learn_procedures(d, result, row, died, tools)

    def consolidation(self, p: Perception, tools: MemoryTools, reason: str, death: tuple[str, Any, str] | None,
                      last: Decision | None) -> None:
        """The harness's part only: an initial working.md, and the place of a death. Revising
        knowledge and plan is the model's job (the state block says when it is due)."""
        if not self.mode.notes:
            return
        if reason == "start" and tools.peek(WORKING) is None:
            nxt = next((m for m in self.task.milestones if m not in p.achievements), "none")
            tools.consolidate([], WorkingPlan(goal=f"{self.task.name}: next milestone {nxt}",
                                              prediction="(no plan yet)"), "start")
        if death is not None:
            cause, cell, ep = death
            tools.consolidate([Fact(f"hazard:death@{cell[0]},{cell[1]}", events.died_of(cause, cell),
                                    "Hazards", (ep,))], None, "death")

    def update_plan(self, p: Perception, d: Decision, tools: MemoryTools) -> None:
        """The model keeps working.md itself."""

    def summary(self) -> dict[str, Any]:
        """Model totals for the run's record."""
        return {**super().summary(), "model": self.llm.model, **self.totals,
                "cost_usd": round(self.totals["cost_usd"], 6),
                "system_prompt_sha256": hashlib.sha256(self.system.encode()).hexdigest(),
                "last_error": self.last_error or None}


def _bindable(name: str, args: dict[str, Any]) -> None:
    """Check that an atom accepts ``args`` (its Python signature)."""
    try:
        pyinspect.signature(getattr(Atoms, f"atom_{name}")).bind(None, **args)
    except TypeError as e:
        raise ArgumentError(f"{name}: {e}") from e


def _clip(text: str) -> str:
    return text if len(text) <= RESULT_CHARS else text[:RESULT_CHARS] + f"... ({len(text) - RESULT_CHARS} more)"


def _classify(e: Exception) -> ModelFailure:
    """A client exception as a recorded failure (429, 5xx, timeout, connection, other status)."""
    status = getattr(e, "status_code", None)
    name = type(e).__name__
    if status is not None:
        retry_after = None
        resp = getattr(e, "response", None)
        if resp is not None:
            try:
                retry_after = float(resp.headers.get("retry-after", ""))
            except ValueError:
                retry_after = None
        kind = "rate limit" if status == 429 else "server error" if status >= 500 else "http error"
        return ModelFailure(f"{kind} {status}", f"{name}: {str(e)[:200]}", retry_after, fatal=status in FATAL_STATUS)
    if "Timeout" in name:
        return ModelFailure("timeout", name)
    return ModelFailure("connection error", f"{name}: {str(e)[:200]}")

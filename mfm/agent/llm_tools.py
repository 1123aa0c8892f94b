"""The function-calling tools of the LLM policy: JSON schemas, in one place, and a checker.

Memory tools (search, inspect, read_file, write_file, consolidate) return a result to the
model and the turn goes on; action tools (one per atom, and ``run_procedure``) end the turn:
one action = one episode, as for the scripted policy. Which tools a run offers follows its
memory mode (:mod:`mfm.agent.modes`).
"""
from __future__ import annotations

from typing import Any

from mfm.agent.atoms import ATOMS, COLLECT_GIVES, CRAFT, PLACE_COST
from mfm.agent.mapping import DIRS
from mfm.agent.modes import MemoryMode

INT = {"type": "integer"}
WHY = {"type": "string", "description": "why (recorded as the episode's goal)"}
XY = {"x": {**INT, "description": "world x (grows to the right)"},
      "y": {**INT, "description": "world y (grows downwards)"}}
SEEN = ["tree", "water", "stone", "coal", "iron", "diamond", "cow", "zombie", "skeleton", "lava", "table",
        "furnace", "grass", "sand"]


def _obj(props: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": {**props, "why": WHY}, "required": list(required),
            "additionalProperties": False}


ATOM_PARAMS: dict[str, dict[str, Any]] = {
    "go_to": _obj({**XY, "adjacent": {"type": "boolean", "description": "stop next to the cell"}}, ("x", "y")),
    "look_at": _obj(XY, ("x", "y")),
    "face": _obj({"direction": {"type": "string", "enum": sorted(DIRS)}}, ("direction",)),
    "collect": _obj({"material": {"type": "string", "enum": sorted(COLLECT_GIVES)}, **XY}, ("material", "x", "y")),
    "place": _obj({"item": {"type": "string", "enum": sorted(PLACE_COST)},
                   "near_x": {**INT, "description": "stay within 1 of this cell (optional)"}, "near_y": INT},
                  ("item",)),
    "craft": _obj({"item": {"type": "string", "enum": sorted(CRAFT)}, "table_x": INT, "table_y": INT,
                   "furnace_x": INT, "furnace_y": INT}, ("item", "table_x", "table_y")),
    "drink": _obj(XY, ("x", "y")),
    "eat": _obj({}),
    "sleep": _obj({"until_day": {"type": "boolean"}}),
    "shelter": _obj({}),
    "explore": _obj({**XY, "stop_on": {"type": "array", "items": {"type": "string", "enum": SEEN},
                                       "description": "stop as soon as one of these is in view"}}, ("x", "y")),
    "attack": _obj({}),
}
ATOM_HELP = {
    "go_to": "Walk (digging with a pickaxe) to a cell, or next to it.",
    "look_at": "Walk until a cell is in view; reports what is there.",
    "face": "Face a direction without leaving the cell.",
    "collect": "Go next to a cell and collect the material there (tree gives wood, grass a sapling).",
    "place": "Place a table (needs wood), furnace (needs stone, next to a table), stone or plant (sapling).",
    "craft": "Stand at the table (and furnace) at the given cells and make a tool.",
    "drink": "Go next to the water at a cell and drink until full.",
    "eat": "Hunt the nearest cow in view and eat it.",
    "sleep": "Sleep until rested (until_day: until daylight is back).",
    "shelter": "Dig a two-cell pocket into rock and seal it with a stone.",
    "explore": "Head for a far point, stopping when something in stop_on comes into view.",
    "attack": "Fight the hostile creature next to me.",
}

MEMORY_PARAMS: dict[str, dict[str, Any]] = {
    "search": {"type": "object", "additionalProperties": False, "properties": {
        "text": {"type": "string", "description": "words that must all appear in the episode's summary/events/tags"},
        "near_x": INT, "near_y": INT, "radius": {"type": "number"},
        "since_step": INT, "until_step": INT,
        "tags": {"type": "array", "items": {"type": "string"}},
        "outcome": {"type": "string", "enum": ["done", "failed", "interrupted"]},
        "limit": {**INT, "description": "at most this many episodes, newest first (default 8)"}}, "required": []},
    "grep": {"type": "object", "additionalProperties": False, "properties": {
        "pattern": {"type": "string", "description": "a regular expression, e.g. 'diamond|iron'"},
        "since_step": {**INT, "description": "only sections ending at or after this env step"},
        "limit": {**INT, "description": "at most this many lines, newest first (default 20)"}},
        "required": ["pattern"]},
    "inspect": {"type": "object", "additionalProperties": False, "properties": {
        "episode": {"type": "string", "description": "an episode id from search, e.g. ep_000012"},
        "frame": {**INT, "description": "frame index within the episode; -1 (default) is its last frame"}},
        "required": ["episode"]},
    "read_file": {"type": "object", "additionalProperties": False, "properties": {
        "path": {"type": "string", "description": "a file under mine/, e.g. mine/GUIDE.md"}}, "required": ["path"]},
    "write_file": {"type": "object", "additionalProperties": False, "properties": {
        "path": {"type": "string", "description": "a file under mine/; mine/procedures/NAME.json holds a procedure"},
        "content": {"type": "string"},
        "reason": {"type": "string"},
        "sources": {"type": "array", "items": {"type": "string"}, "description": "episode ids it rests on"}},
        "required": ["path", "content", "reason"]},
    "consolidate": {"type": "object", "additionalProperties": False, "properties": {
        "reason": {"type": "string"},
        "facts": {"type": "array", "items": {"type": "object", "properties": {
            "key": {"type": "string", "description": "stable key, e.g. res:iron@40,12 or place:table@30,31"},
            "text": {"type": "string"}, "section": {"type": "string"},
            "sources": {"type": "array", "items": {"type": "string"}}, "retract": {"type": "boolean"}},
            "required": ["key", "text"]}},
        "plan": {"type": "object", "properties": {
            "goal": {"type": "string"}, "prediction": {"type": "string"},
            "targets": {"type": "array", "items": {"type": "object", "properties": {
                "x": INT, "y": INT, "label": {"type": "string"}}, "required": ["x", "y", "label"]}},
            "contradictions": {"type": "array", "items": {"type": "string"}}}, "required": ["goal"]}},
        "required": ["reason"]},
}
MEMORY_HELP = {
    "search": "Search the episode index (every past episode: summary, events, tags, position). Returns episode ids.",
    "grep": "Search my text log (logs.txt: every past episode's observations as text) with a regular "
            "expression. Returns matching lines with their episode and env step.",
    "inspect": "Look at a stored frame of an episode: the decoded 9x7 tiles with world coordinates, and the image.",
    "read_file": "Read one of my files under mine/ (GUIDE.md knowledge, working.md plan, procedures/*.json).",
    "write_file": "Write a file under mine/ with a reason. A procedure (mine/procedures/NAME.json) is JSON: "
                  '{"name", "description", "params": [..], "steps": [{"atom": NAME, "args": {..}}], '
                  '"preconditions": [{"have": {"wood": 3}}]}; "$param" strings are filled when it runs.',
    "consolidate": "Merge facts into GUIDE.md (one line per key) and/or replace the plan in working.md.",
}
PROCEDURE_PARAMS = _obj({"name": {"type": "string"}, "args": {"type": "object", "description": "its parameters"}},
                        ("name",))
ACTIONS = frozenset(ATOMS) | {"run_procedure"}


def _fn(name: str, help_: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": help_, "parameters": params}}


def memory_tool_names(mode: MemoryMode) -> list[str]:
    """The memory tools a mode allows."""
    names = []
    if mode.search == "index":
        names.append("search")
    elif mode.search == "log":
        names.append("grep")
    if mode.frames is not None:
        names.append("inspect")
    if mode.notes or mode.procedures:
        names += ["read_file", "write_file"]
    if mode.notes:
        names.append("consolidate")
    return names


def tool_specs(mode: MemoryMode, actions_only: bool = False) -> list[dict[str, Any]]:
    """The ``tools`` of a chat-completions request for a memory mode."""
    specs = [] if actions_only else [_fn(n, MEMORY_HELP[n], MEMORY_PARAMS[n]) for n in memory_tool_names(mode)]
    specs += [_fn(a, ATOM_HELP[a] + " Ends the turn.", ATOM_PARAMS[a]) for a in ATOMS]
    if mode.procedures:
        specs.append(_fn("run_procedure", "Run a stored procedure of mine/procedures/ (one episode). Ends the turn.",
                         PROCEDURE_PARAMS))
    return specs


class ArgumentError(ValueError):
    """Tool arguments that do not fit the tool's schema."""


_TYPES = {"integer": int, "number": (int, float), "string": str, "boolean": bool, "array": list, "object": dict}


def check_args(schema: dict[str, Any], args: Any, where: str = "arguments") -> None:
    """Check ``args`` against a (small subset of) JSON schema: types, enums, required, no extras."""
    kind = schema.get("type")
    want = _TYPES.get(kind) if kind else None
    if want is not None:
        bad_bool = isinstance(args, bool) and kind in ("integer", "number")
        if not isinstance(args, want) or bad_bool:
            raise ArgumentError(f"{where} must be {kind}, got {type(args).__name__}")
    if "enum" in schema and args not in schema["enum"]:
        raise ArgumentError(f"{where} must be one of {', '.join(map(str, schema['enum']))}, got {args!r}")
    if kind == "object" and "properties" in schema:
        props = schema["properties"]
        missing = [k for k in schema.get("required", ()) if k not in args]
        if missing:
            raise ArgumentError(f"{where}: missing {', '.join(missing)}")
        if schema.get("additionalProperties") is False:
            extra = [k for k in args if k not in props]
            if extra:
                raise ArgumentError(f"{where}: unknown argument(s) {', '.join(extra)}")
        for k, v in args.items():
            if k in props:
                check_args(props[k], v, f"{where}.{k}")
    if kind == "array" and "items" in schema:
        for i, v in enumerate(args):
            check_args(schema["items"], v, f"{where}[{i}]")


def params_of(name: str) -> dict[str, Any] | None:
    """The parameter schema of a tool name (None: no such tool)."""
    if name in ATOM_PARAMS:
        return ATOM_PARAMS[name]
    if name == "run_procedure":
        return PROCEDURE_PARAMS
    return MEMORY_PARAMS.get(name)

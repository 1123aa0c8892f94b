"""Runs exported by the original MFM project: ``data.json`` plus ``frames/ep_NNNNNN.jpg``.

What the export holds (top-level keys of data.json): ``run`` (name, task, steps,
memory_mode, milestones{order, achieved, total}, model…), ``index`` (the rows of the
harness's index.jsonl, each with its raw line in ``_raw``), ``previous`` (earlier lives),
``episodes`` (raw text of state.json, action.json, outcome.json per episode), ``grid``
(``kinds`` and ``cells`` as ``[x, y, z, kind index, step]``), ``log`` (sections of
logs.txt), ``turns`` (per model turn: prompt, messages, commands, file changes, image
views, token usage), ``mine`` (agent files and their history), ``listing``. Missing or
unknown keys are tolerated. Positions are 3-D; ``y`` is height. No per-step frames or
trace are exported.

Every value is taken through :class:`Fields`, the one typed-extraction layer: a value of the
wrong type or out of range becomes one Problem naming ``data.json › section``, the row and
the field, and is left out (a bad row is skipped, the rest of the run is read).
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from loaders.records import table_frame
from loaders.sources import inferred_manifest
from mfm.boundary import UnsafePath, inside, read_json
from mfm.memory.agent_memory import sha256
from mfm.memory.index import EpisodeIndex
from mfm.memory.retrieval import EpisodeRecord, FrameError, read_png
from mfm.run_reader import RunContents
from mfm.schema import (GRID_KINDS, GridRow, IndexRow, JSONError, MemoryWrite, MilestoneRow, Problem, Record,
                        RunManifest, SchemaError, TurnRow, check_field, parse_json, plain_relative)

DATA = "data.json"
MAX_BYTES = 256 << 20
"""A data.json larger than this is refused unread (parsed JSON takes several times its size)."""
MAX_INT = 2 ** 53
"""Integers beyond ±MAX_INT are refused: float64 columns and the dashboard's browser side lose them."""
MAX_MESSAGE = 300
TARGET_ATOMS = ("go_to", "look_at")
RECORDS = ("state", "action", "outcome")
SECTIONS = {"run": dict, "index": list, "previous": list, "episodes": dict, "grid": dict, "log": dict,
            "turns": list, "mine": dict}
RUN_FIELDS = {"name": "str", "task": "str", "memory_mode": "str", "model": "str", "steps": "int",
              "last_step": "int", "ablations": "strs", "milestones": "object"}
SHALLOW = {"object": dict, "array": list}
INDEX_FIELDS = frozenset(f.name for f in dataclasses.fields(IndexRow))
"""Index fields our format names; the others of an export row are kept in ``extra``."""
DROPPED = frozenset({"_raw", "life"})
"""Export index keys not kept: the original line (the row itself) and a life we assign."""
EXTRA = "extra"
"""The episodes table's column of the export's own index fields (JSON text, or null)."""
"""Kinds checked by type only (containers whose items are taken one by one)."""


def unplain(v: Any) -> str | None:
    """What in a parsed JSON value no strict JSON writer takes (NaN, an infinity, an integer
    beyond ±MAX_INT, a lone surrogate in a string), or None if nothing is."""
    if isinstance(v, str):
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            return "a lone surrogate in a string"
        return None
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, float):
        return None if math.isfinite(v) else str(v)
    if isinstance(v, int):
        return None if -MAX_INT <= v <= MAX_INT else "an integer beyond ±2**53"
    if isinstance(v, dict):
        v = [x for kv in v.items() for x in kv]
    if not isinstance(v, (list, tuple)):
        return f"a {type(v).__name__}"
    return next((bad for bad in map(unplain, v) if bad), None)


def typed(name: str, kind: str, v: Any) -> Any:
    """``v`` checked as a field of kind ``kind`` (the kinds of ``mfm.schema`` and ``json``, any
    value; ``object``/``array``: the container's type only). SchemaError says what is wrong."""
    if kind in SHALLOW:
        if not isinstance(v, SHALLOW[kind]):
            raise SchemaError(f"{name} must be an {kind}, got {type(v).__name__}")
        return v
    v = v if kind == "json" else check_field(name, kind, v)
    bad = unplain(v)
    if bad:
        raise SchemaError(f"{name} holds {bad}")
    return v


def typed_record(rtype: type[Record], obj: dict) -> Any:
    """``rtype.from_dict(obj)``, also refusing fields :func:`unplain` finds fault with."""
    rec = rtype.from_dict(obj)
    for k, v in rec.to_dict().items():
        bad = unplain(v)
        if bad:
            raise SchemaError(f"{k} holds {bad}")
    return rec


class Fields:
    """Typed extraction from data.json: each call returns a checked value or, recording one
    Problem (``data.json › where``, row, field, what is wrong), its default. An absent or
    null field takes the default without a problem (every key of the export is optional);
    a null item of a list is reported."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems

    def report(self, where: str, line: int, message: str, severity: str = "error") -> None:
        if len(message) > MAX_MESSAGE:
            message = message[:MAX_MESSAGE] + "…"
        self.problems.append(Problem(f"{DATA} › {where}", line, message, severity))

    def take(self, v: Any, kind: str, where: str, line: int, name: str, default: Any = None) -> Any:
        """The field ``v`` checked as ``kind`` (see :func:`typed`), else ``default``."""
        if v is None:
            return default
        try:
            return typed(name, kind, v)
        except SchemaError as e:
            self.report(where, line, f"{e}; left out")
            return default

    def item(self, v: Any, kind: str, where: str, line: int, name: str) -> Any:
        """The list item ``v`` checked as ``kind``, else None."""
        if v is None:
            self.report(where, line, f"{name} is null; left out")
        return self.take(v, kind, where, line, name)

    def record(self, rtype: type[Record], obj: dict, where: str, line: int) -> Any:
        """A record of ``rtype`` built from ``obj``, or None (the row is skipped)."""
        try:
            return typed_record(rtype, obj)
        except SchemaError as e:
            self.report(where, line, f"{e}, skipped")
            return None


def mine_path(path: Any) -> bool:
    """Whether ``path`` names a file under ``mine/`` (plain, relative, no empty or ``.`` part)."""
    return plain_relative(path) and path.startswith("mine/") and all(p not in ("", ".") for p in path.split("/"))


def replay_history(entries: list[dict]) -> list[str]:
    """Versions of an exported ``mine/`` file from its history of added and removed lines
    (entries as :meth:`ExportSource._entry` returns them): removed lines are taken out (first
    match), added lines go at the end."""
    lines: list[str] = []
    versions = []
    for e in entries:
        for r in e["removed"]:
            if r in lines:
                lines.remove(r)
        lines.extend(e["added"])
        versions.append("\n".join(lines) + "\n" if lines else "")
    return versions


class ExportSource:
    """Reads an MFM export folder in place."""

    format = "mfm-export"

    def __init__(self, path: Path) -> None:
        self.path = path
        self._sections: dict[str, Any] | None = None
        self._problems: list[Problem] = []
        self.extras: dict[str, dict] = {}
        """Episode id -> the index fields of the export our format does not name (its own
        ``inventory_delta``, ``_frame``, ``attachment``…), kept as they were."""
        self.unknown: dict[str, tuple[int, int]] = {}
        """``mine/`` path -> ``(first, known)``: the file existed from step ``first`` but its
        history is not replayable, so its content is unknown until step ``known``, from which
        the exported version holds."""

    def sections(self) -> dict[str, Any]:
        """The top-level sections of data.json, each of its type (empty where absent or wrong)."""
        if self._sections is None:
            f = Fields(self._problems)
            d = self._read()
            self._sections = {k: f.take(d.get(k), "object" if t is dict else "array", k, 0, k, t())
                              for k, t in SECTIONS.items()}
        return self._sections

    def _read(self) -> dict:
        try:
            obj = read_json(self.path, DATA, MAX_BYTES)
        except JSONError as e:
            self._problems.append(Problem(DATA, e.lineno, str(e)))
            return {}
        except (OSError, UnsafePath) as e:
            self._problems.append(Problem(DATA, 0, f"cannot read: {getattr(e, 'strerror', None) or e}"))
            return {}
        if not isinstance(obj, dict):
            self._problems.append(Problem(DATA, 0, f"the top level is not an object (got {type(obj).__name__})"))
            return {}
        return obj

    def contents(self) -> RunContents:
        s = self.sections()
        problems = list(self._problems)
        f = Fields(problems)
        index = self._index(s["index"], s["previous"], f)
        actions = {r.id: self._records(s["episodes"], r.id, f)[1] or {} for r in index}
        grid = self._grid(s["grid"], f)
        turns = self._turns(s["turns"], index, actions, f)
        writes = self._memory(s["mine"], f)
        self._log(s["log"], f)  # for its problems: the text is read by log_text
        manifest, achieved = self._manifest(s["run"], index, f)
        milestones = [MilestoneRow(name=k, step=v, life=0, episode=self._episode_at(index, v))
                      for k, v in sorted(achieved.items(), key=lambda kv: kv[1])]
        tables: dict[str, list] = {
            "index.jsonl": index, "grid.jsonl": grid, "steps.jsonl": [], "turns.jsonl": turns,
            "memory_writes.jsonl": writes, "milestones.jsonl": milestones, "lives.jsonl": [], "seen.jsonl": [],
        }
        lines = {k: list(range(1, len(v) + 1)) for k, v in tables.items()}
        return RunContents(self.path, manifest, tables, lines, problems, columns={"index.jsonl": self._episodes(index)})

    def _episodes(self, index: list[IndexRow]) -> Any:
        """The episodes table with the export's own index fields in :data:`EXTRA` (JSON text)."""
        df = table_frame(index, IndexRow)
        df[EXTRA] = [json.dumps(self.extras[r.id], sort_keys=True) if r.id in self.extras else None for r in index]
        return df

    def _manifest(self, run: dict, index: list[IndexRow], f: Fields) -> tuple[RunManifest, dict[str, int]]:
        """The manifest from the ``run`` section, and the milestones it says were achieved."""
        v = {k: f.take(run.get(k), kind, "run", 0, k) for k, kind in RUN_FIELDS.items()}
        ms = v["milestones"] or {}
        order = f.take(ms.get("order"), "strs", "run", 0, "milestones.order", ())
        achieved: dict[str, int] = {}
        for k, step in f.take(ms.get("achieved"), "object", "run", 0, "milestones.achieved", {}).items():
            name = f"milestones.achieved[{k!r}]"
            n = f.take(step, "int", "run", 0, name)
            if n is not None and f.take(k, "str", "run", 0, name) is not None:
                achieved[k] = n
        config = {}
        for k, val in run.items():
            bad = unplain({k: val})
            if not bad:
                config[k] = val
            elif k not in RUN_FIELDS:
                f.report("run", 0, f"{k!r} holds {bad}; left out of the config")
        config.pop("milestones", None)
        last = max((r.last_step for r in index), default=0)
        return inferred_manifest(
            v["name"] or self.path.name, "minecraft", index, seed=f.take(run.get("seed"), "int", "run", 0, "seed"),
            task=v["task"] or "unknown",
            method=v["memory_mode"] or "unknown", step_budget=v["steps"] or last, milestone_order=tuple(order),
            milestones=achieved, last_step=v["last_step"] or last, policy=v["model"],
            ablations=tuple(v["ablations"] or ()), config=config), achieved

    @staticmethod
    def _episode_at(index: list[IndexRow], step: int) -> str | None:
        for r in index:
            if r.first_step < step <= r.last_step:
                return r.id
        return None

    def _index(self, items: list, previous: list, f: Fields) -> list[IndexRow]:
        lives: list[tuple[str, list]] = []
        for i, p in enumerate(previous, 1):
            life = f.item(p, "object", "previous", i, "life") or {}
            rows = f.take(life.get("index"), "array", "previous", i, "index")
            if rows is not None:
                lives.append((f"previous/life_{len(lives)}/index.jsonl", rows))
        lives.append(("index.jsonl", items))
        out: list[IndexRow] = []
        seen: set[str] = set()
        for life, (where, rows) in enumerate(lives):
            for i, raw in enumerate(rows, 1):
                raw = f.item(raw, "object", where, i, "row")
                if raw is None:
                    continue
                obj = {k: v for k, v in raw.items() if k in INDEX_FIELDS}
                ep = obj.get("id")
                included = raw.get("_frame", True) is not False
                obj.update(life=life, image=f"frames/{ep}.jpg" if isinstance(ep, str) and obj.get("image")
                           and included else None)
                row = f.record(IndexRow, obj, where, i)
                if row is None:
                    continue
                if row.id in seen:
                    f.report(where, i, f"duplicate episode id {row.id}, skipped")
                    continue
                seen.add(row.id)
                out.append(row)
                extra = {k: v for k, v in raw.items() if k not in INDEX_FIELDS and k not in DROPPED}
                bad = unplain(extra)
                if bad:
                    f.report(where, i, f"fields {', '.join(sorted(extra))} hold {bad}; left out", "warning")
                elif extra:
                    self.extras[row.id] = extra
        return out

    def _records(self, episodes: dict, ep: str, f: Fields) -> tuple[dict | None, ...]:
        """State, action and outcome of an episode (each JSON text, or an object)."""
        rec = f.take(episodes.get(ep), "object", "episodes", 0, ep, {})
        out = []
        for part in RECORDS:
            raw = rec.get(part)
            if isinstance(raw, str):
                try:
                    raw = parse_json(raw)
                except JSONError as e:
                    f.report("episodes", 0, f"{ep} {part}: {e}; left out")
                    raw = None
            out.append(f.take(raw, "dict", "episodes", 0, f"{ep} {part}"))
        return tuple(out)

    def _grid(self, g: dict, f: Fields) -> list[GridRow]:
        w = "grid.jsonl"
        kinds = f.take(g.get("kinds"), "strs", w, 0, "kinds", ())
        cells = f.take(g.get("cells"), "array", w, 0, "cells", [])
        if cells and not kinds:
            f.report(w, 0, f"{len(cells)} cells left out: no kinds to name them")
            return []
        rows: list[GridRow] = []
        unknown: set[str] = set()
        for i, c in enumerate(cells, 1):
            if not isinstance(c, list) or len(c) != 5:
                f.report(w, i, "cell is not [x, y, z, kind, step], skipped")
                continue
            x, y, z, k, step = c
            if type(k) is not int or not 0 <= k < len(kinds):
                f.report(w, i, f"kind index {k!r} is not one of the {len(kinds)} kinds, skipped")
                continue
            if kinds[k] not in GRID_KINDS:
                unknown.add(kinds[k])
                continue
            row = f.record(GridRow, {"cell": [x, y, z], "kind": kinds[k], "step": step}, w, i)
            if row is not None:
                rows.append(row)
        if unknown:
            f.report(w, 0, f"cell kinds not in the format, left out: {', '.join(sorted(unknown))}", "warning")
        return rows

    def _turns(self, items: list, index: list[IndexRow], actions: dict[str, dict], f: Fields) -> list[TurnRow]:
        w = "turns"
        by_turn: dict[int, list[IndexRow]] = {}
        for r in index:
            turn = f.take(actions[r.id].get("turn"), "int", "episodes", 0, f"{r.id} action.turn")
            if turn is not None:
                by_turn.setdefault(turn, []).append(r)
        read: list[tuple[int, int, int | None, dict]] = []
        for i, t in enumerate(items, 1):
            t = f.item(t, "object", w, i, "turn")
            if t is not None:
                read.append((i, f.take(t.get("turn"), "int", w, i, "turn", len(read)),
                             f.take(t.get("step"), "int", w, i, "step"), t))
        last_run_step = max((r.last_step for r in index), default=0)
        out: list[TurnRow] = []
        for j, (i, turn, step, t) in enumerate(read):
            first = step or 0
            nxt = read[j + 1][2] if j + 1 < len(read) else None
            last = nxt if nxt is not None else max(first, last_run_step)
            eps = by_turn.get(turn, [])
            row = f.record(TurnRow, {
                "turn": turn, "life": 0, "first_step": first, "last_step": max(first, last), "policy": "llm",
                "calls": self._calls(t, i, f), "targets": self._targets(eps, actions, f), "plan_before": [],
                "plan_after": [], "episodes": [r.id for r in eps],
                "usage": f.take(t.get("usage"), "dict", w, i, "usage")}, w, i)
            if row is not None:
                out.append(row)
        return out

    @staticmethod
    def _calls(t: dict, i: int, f: Fields) -> list[dict]:
        w = "turns"
        prompt = f.take(t.get("prompt"), "str", w, i, "prompt", "")
        messages = f.take(t.get("messages"), "array", w, i, "messages", [])
        calls = [{"tool": "model", "args": {"prompt_chars": len(prompt)}, "result": {"messages": len(messages)}}]
        for n, c in enumerate(f.take(t.get("commands"), "array", w, i, "commands", [])):
            name = f"commands[{n}]"
            c = f.item(c, "object", w, i, name)
            if c is None:
                continue
            kinds = list(f.take(c.get("kinds"), "strs", w, i, f"{name}.kinds", ()))
            script = f.take(c.get("script"), "str", w, i, f"{name}.script", "")
            result = {k: f.take(c.get(k), "json", w, i, f"{name}.{k}") for k in ("exit", "output_chars")}
            calls.append({"tool": "search" if "episodes" in kinds else "read",
                          "args": {"script": script[:4000], "kinds": kinds}, "result": result})
        for n, v in enumerate(f.take(t.get("views"), "array", w, i, "views", [])):
            path = f.item(v, "str", w, i, f"views[{n}]")
            if path is not None:
                calls.append({"tool": "inspect", "args": {"path": path}, "result": {}})
        for n, ch in enumerate(f.take(t.get("changes"), "array", w, i, "changes", [])):
            name = f"changes[{n}]"
            ch = f.item(ch, "object", w, i, name)
            if ch is not None:
                result = {k: f.take(ch.get(k), "json", w, i, f"{name}.{k}") for k in ("added", "removed")}
                calls.append({"tool": "write", "args": {"path": f.take(ch.get("path"), "str", w, i, f"{name}.path")},
                              "result": result})
        return calls

    @staticmethod
    def _targets(eps: list[IndexRow], actions: dict[str, dict], f: Fields) -> list[dict]:
        out = []
        for r in eps:
            entry = actions[r.id].get("entry")
            if not isinstance(entry, dict) or entry.get("procedure") not in TARGET_ATOMS:
                continue
            name = f"{r.id} action.entry.args"
            args = f.take(entry.get("args"), "object", "episodes", 0, name, {})
            x, z, y = (f.take(args.get(k), "num", "episodes", 0, f"{name}.{k}") for k in ("x", "z", "y"))
            if x is not None and z is not None:
                out.append({"kind": entry["procedure"], "x": x, "y": z, "in_plan": None,
                            **({"height": y} if y is not None else {})})
        return out

    @staticmethod
    def _entry(raw: Any, path: str, n: int, f: Fields) -> dict | None:
        """One step of a ``mine/`` file's history, typed (None if it is not an object)."""
        name = f"history[{path!r}][{n}]"
        e = f.item(raw, "object", "mine", 0, name)
        if e is None:
            return None
        return {"turn": f.take(e.get("turn"), "int", "mine", 0, f"{name}.turn"),
                "step": f.take(e.get("step"), "int", "mine", 0, f"{name}.step", 0),
                "kind": f.take(e.get("kind"), "str", "mine", 0, f"{name}.kind", "write"),
                **{k: f.take(e.get(k), "strs", "mine", 0, f"{name}.{k}", ()) for k in ("added", "removed")}}

    def _memory(self, mine: dict, f: Fields) -> list[MemoryWrite]:
        """One write per history entry of each exported file, its content replayed from the
        entry's added and removed lines. A file whose history the export marks not replayable
        (``mine.replayable[path]`` false), or whose entries name no line at all, gets one write:
        the exported file, from its last entry's step; from its first entry until then it is
        unknown (:attr:`unknown`), not empty."""
        files = f.take(mine.get("files"), "object", "mine", 0, "files", {})
        history = f.take(mine.get("history"), "object", "mine", 0, "history", {})
        replayable = f.take(mine.get("replayable"), "object", "mine", 0, "replayable", {})
        writes: list[tuple[int, str, MemoryWrite]] = []
        for path, text in files.items():
            if not mine_path(path):
                f.report("mine", 0, f"file {path!r} is not under mine/, left out")
                continue
            text = f.item(text, "str", "mine", 0, f"files[{path!r}]")
            if text is None:
                continue
            raw = f.take(history.get(path), "array", "mine", 0, f"history[{path!r}]", [])
            entries = [e for e in (self._entry(r, path, n, f) for n, r in enumerate(raw)) if e is not None]
            flag = f.take(replayable.get(path), "bool", "mine", 0, f"replayable[{path!r}]")
            blind = entries and not any(e["added"] or e["removed"] for e in entries) and text.strip()
            if flag is False or blind:
                first = min((e["step"] for e in entries), default=0)
                last = max((e["step"] for e in entries), default=0)
                if first < last:
                    self.unknown[path] = (first, last)
                if first < last or len(entries) > 1:
                        f.report("mine", 0, f"{path}: history of {len(entries)} changes is not replayable (no lines "
                                        f"recorded); only the exported file is known, from step {last}", "warning")
                entries = [{"turn": entries[-1]["turn"] if entries else None, "step": last,
                            "kind": "export (history not replayable)"}]
                versions = [text]
            else:
                versions = replay_history(entries)
                if not versions or versions[-1].rstrip("\n") != text.rstrip("\n"):
                    if versions:
                        f.report("mine", 0, f"{path}: history does not replay to the exported file; the file is "
                                            "kept as the last version", "warning")
                    entries = entries + [{"turn": None, "step": entries[-1]["step"] if entries else 0,
                                          "kind": "export"}]
                    versions = versions + [text]
            for e, content in zip(entries, versions):
                w = f.record(MemoryWrite, {
                    "seq": 0, "turn": e["turn"], "step": e["step"], "life": 0, "path": path,
                    "op": "create" if e is entries[0] else "edit", "author": "agent", "reason": e["kind"],
                    "sources": [], "time": "", "sha256": sha256(content), "snapshot": content}, "mine", 0)
                if w is not None:
                    writes.append((e["step"], path, w))
        writes.sort(key=lambda w: (w[0], w[1]))
        return [dataclasses.replace(w, seq=i) for i, (_, _, w) in enumerate(writes)]

    @staticmethod
    def _log(log: dict, f: Fields) -> str | None:
        """logs.txt rebuilt from the exported sections."""
        secs = f.take(log.get("sections"), "array", "log", 0, "sections")
        if secs is None:
            return None
        texts = []
        for n, s in enumerate(secs, 1):
            s = f.item(s, "object", "log", n, "section")
            if s is not None:
                texts.append(f.take(s.get("text"), "str", "log", n, "text", ""))
        rule = "=" * 80
        return "".join(f"{rule}\n{t}\n" for t in texts)

    def episode_record(self, ref: IndexRow) -> EpisodeRecord:
        return EpisodeRecord(ref, *self._records(self.sections()["episodes"], ref.id, Fields([])))

    def observation(self, ref: IndexRow) -> np.ndarray:
        """The episode's frame under ``frames/``; UnsafePath if it leads outside the export."""
        if not ref.image:
            raise FrameError(f"{ref.id}: the export did not include a frame for it")
        p = inside(self.path, ref.image)
        if not p.is_file():
            raise FrameError(f"{ref.image}: not included in this export")
        return read_png(p, ref.image)

    def step_frame(self, index: EpisodeIndex, step: int) -> np.ndarray:
        raise FrameError("an MFM export has no per-step frames, only one frame per episode")

    def log_text(self) -> str | None:
        """logs.txt rebuilt from the exported sections."""
        return self._log(self.sections()["log"], Fields([]))

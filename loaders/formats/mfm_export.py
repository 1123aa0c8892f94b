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
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from loaders.sources import inferred_manifest
from mfm.memory.agent_memory import sha256
from mfm.memory.index import EpisodeIndex
from mfm.memory.retrieval import EpisodeRecord, FrameError, read_png
from mfm.schema import (GRID_KINDS, EPISODE_ID, GridRow, IndexRow, MemoryWrite, MilestoneRow, Problem, SchemaError,
                        TurnRow)
from mfm.validate import RunContents

DATA = "data.json"
MAX_BYTES = 1 << 30
TARGET_ATOMS = ("go_to", "look_at")


def _load_json(text: Any) -> dict | None:
    if isinstance(text, dict):
        return text
    try:
        obj = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def replay_history(entries: list[dict]) -> list[str]:
    """Versions of an exported ``mine/`` file from its history of added and removed lines:
    removed lines are taken out (first match), added lines go at the end."""
    lines: list[str] = []
    versions = []
    for e in entries:
        for r in e.get("removed") or []:
            if r in lines:
                lines.remove(r)
        lines.extend(str(a) for a in e.get("added") or [])
        versions.append("\n".join(lines) + "\n" if lines else "")
    return versions


class ExportSource:
    """Reads an MFM export folder in place."""

    format = "mfm-export"

    def __init__(self, path: Path) -> None:
        self.path = path
        self._data: dict | None = None
        self._problems: list[Problem] = []

    def data(self) -> dict:
        if self._data is None:
            p = self.path / DATA
            try:
                if p.stat().st_size > MAX_BYTES:
                    raise ValueError(f"larger than {MAX_BYTES >> 20} MiB")
                obj = json.loads(p.read_bytes().decode("utf-8"))
                if not isinstance(obj, dict):
                    raise ValueError("the top level is not an object")
            except UnicodeDecodeError as e:
                self._problems.append(Problem(DATA, 0, f"not UTF-8 (byte {e.start})"))
                obj = {}
            except (OSError, ValueError) as e:
                self._problems.append(Problem(DATA, getattr(e, "lineno", 0) or 0, f"cannot read: {e}"))
                obj = {}
            self._data = obj
        return self._data

    def contents(self) -> RunContents:
        d = self.data()
        problems = list(self._problems)
        run = d.get("run") if isinstance(d.get("run"), dict) else {}
        index = self._index(d, problems)
        grid = self._grid(d, problems)
        turns = self._turns(d, index, problems)
        writes = self._memory(d, problems)
        ms = run.get("milestones") if isinstance(run.get("milestones"), dict) else {}
        achieved = {k: int(v) for k, v in (ms.get("achieved") or {}).items() if isinstance(v, (int, float))}
        milestones = [MilestoneRow(name=k, step=v, life=0, episode=self._episode_at(index, v))
                      for k, v in sorted(achieved.items(), key=lambda kv: kv[1])]
        manifest = inferred_manifest(
            str(run.get("name") or self.path.name), "minecraft", index, task=str(run.get("task") or "unknown"),
            method=str(run.get("memory_mode") or "unknown"),
            step_budget=int(run.get("steps") or 0) or max((r.last_step for r in index), default=0),
            milestone_order=tuple(str(m) for m in ms.get("order") or ()), milestones=achieved,
            last_step=int(run.get("last_step") or max((r.last_step for r in index), default=0)),
            policy=str(run.get("model")) if run.get("model") else None,
            ablations=tuple(str(a) for a in run.get("ablations") or ()),
            config={k: v for k, v in run.items() if k not in ("milestones",)},
        )
        tables: dict[str, list] = {
            "index.jsonl": index, "grid.jsonl": grid, "steps.jsonl": [], "turns.jsonl": turns,
            "memory_writes.jsonl": writes, "milestones.jsonl": milestones, "lives.jsonl": [],
        }
        lines = {k: list(range(1, len(v) + 1)) for k, v in tables.items()}
        return RunContents(self.path, manifest, tables, lines, problems)

    @staticmethod
    def _episode_at(index: list[IndexRow], step: int) -> str | None:
        for r in index:
            if r.first_step < step <= r.last_step:
                return r.id
        return None

    def _index(self, d: dict, problems: list[Problem]) -> list[IndexRow]:
        rows: list[IndexRow] = []
        seen: set[str] = set()
        prev = [p["index"] for p in d.get("previous") or [] if isinstance(p, dict) and isinstance(p.get("index"), list)]
        lives = prev + [d.get("index") or []]
        for life, items in enumerate(lives):
            where = "index.jsonl" if life == len(lives) - 1 else f"previous/life_{life}/index.jsonl"
            for i, raw in enumerate(items, 1):
                if not isinstance(raw, dict):
                    problems.append(Problem(f"{DATA} › {where}", i, "not an object, skipped"))
                    continue
                obj = {k: v for k, v in raw.items() if not k.startswith("_")}
                obj["life"] = life
                image = obj.get("image")
                ep = obj.get("id")
                obj["image"] = f"frames/{ep}.jpg" if isinstance(ep, str) and image else None
                try:
                    row = IndexRow.from_dict(obj)
                except (SchemaError, TypeError, ValueError) as e:
                    problems.append(Problem(f"{DATA} › {where}", i, f"{e}, skipped"))
                    continue
                if row.id in seen:
                    problems.append(Problem(f"{DATA} › {where}", i, f"duplicate episode id {row.id}, skipped"))
                    continue
                seen.add(row.id)
                rows.append(row)
        return rows

    def _grid(self, d: dict, problems: list[Problem]) -> list[GridRow]:
        g = d.get("grid") if isinstance(d.get("grid"), dict) else {}
        kinds = g.get("kinds") or []
        rows: list[GridRow] = []
        unknown: set[str] = set()
        for i, c in enumerate(g.get("cells") or [], 1):
            try:
                x, y, z, k, step = c
                kind = kinds[int(k)]
            except (TypeError, ValueError, IndexError):
                problems.append(Problem(f"{DATA} › grid.jsonl", i, "cell is not [x, y, z, kind, step], skipped"))
                continue
            if kind not in GRID_KINDS:
                unknown.add(str(kind))
                continue
            try:
                rows.append(GridRow.from_dict({"cell": [x, y, z], "kind": kind, "step": step}))
            except (SchemaError, TypeError, ValueError) as e:
                problems.append(Problem(f"{DATA} › grid.jsonl", i, f"{e}, skipped"))
        if unknown:
            problems.append(Problem(f"{DATA} › grid.jsonl", 0, f"cell kinds not in the format, left out: "
                                                               f"{', '.join(sorted(unknown))}", "warning"))
        return rows

    def _turns(self, d: dict, index: list[IndexRow], problems: list[Problem]) -> list[TurnRow]:
        items = [t for t in d.get("turns") or [] if isinstance(t, dict)]
        by_turn: dict[int, list[IndexRow]] = {}
        episodes = d.get("episodes") if isinstance(d.get("episodes"), dict) else {}
        actions = {}
        for r in index:
            rec = episodes.get(r.id) if isinstance(episodes.get(r.id), dict) else {}
            act = _load_json(rec.get("action")) or {}
            actions[r.id] = act
            if isinstance(act.get("turn"), int):
                by_turn.setdefault(act["turn"], []).append(r)
        out: list[TurnRow] = []
        last_run_step = max((r.last_step for r in index), default=0)
        for i, t in enumerate(items):
            try:
                turn = int(t.get("turn", i))
                first = int(t.get("step") or 0)
                nxt = items[i + 1].get("step") if i + 1 < len(items) else None
                last = int(nxt) if isinstance(nxt, (int, float)) else max(first, last_run_step)
                eps = by_turn.get(turn, [])
                out.append(TurnRow(
                    turn=turn, life=0, first_step=first, last_step=max(first, last), policy="llm",
                    calls=tuple(self._calls(t)), targets=tuple(self._targets(eps, actions)), plan_before=(),
                    plan_after=(), episodes=tuple(r.id for r in eps),
                    usage=t.get("usage") if isinstance(t.get("usage"), dict) else None,
                ))
            except (SchemaError, TypeError, ValueError) as e:
                problems.append(Problem(f"{DATA} › turns", i + 1, f"{e}, skipped"))
        return out

    @staticmethod
    def _calls(t: dict) -> list[dict]:
        calls = [{"tool": "model", "args": {"prompt_chars": len(str(t.get("prompt") or ""))},
                  "result": {"messages": len(t.get("messages") or [])}}]
        for c in t.get("commands") or []:
            if not isinstance(c, dict):
                continue
            kinds = c.get("kinds") or []
            tool = "search" if "episodes" in kinds else "read"
            calls.append({"tool": tool, "args": {"script": str(c.get("script", ""))[:4000], "kinds": kinds},
                          "result": {"exit": c.get("exit"), "output_chars": c.get("output_chars")}})
        for v in t.get("views") or []:
            calls.append({"tool": "inspect", "args": {"path": str(v)}, "result": {}})
        for ch in t.get("changes") or []:
            if isinstance(ch, dict):
                calls.append({"tool": "write", "args": {"path": str(ch.get("path"))},
                              "result": {"added": ch.get("added"), "removed": ch.get("removed")}})
        return calls

    @staticmethod
    def _targets(eps: list[IndexRow], actions: dict[str, dict]) -> list[dict]:
        out = []
        for r in eps:
            entry = actions.get(r.id, {}).get("entry") or {}
            args = entry.get("args") if isinstance(entry, dict) else None
            name = entry.get("procedure") if isinstance(entry, dict) else None
            if name in TARGET_ATOMS and isinstance(args, dict) and all(
                    isinstance(args.get(k), (int, float)) for k in ("x", "z")):
                t = {"kind": name, "x": args["x"], "y": args["z"], "in_plan": None}
                if isinstance(args.get("y"), (int, float)):
                    t["height"] = args["y"]
                out.append(t)
        return out

    def _memory(self, d: dict, problems: list[Problem]) -> list[MemoryWrite]:
        mine = d.get("mine") if isinstance(d.get("mine"), dict) else {}
        files = mine.get("files") if isinstance(mine.get("files"), dict) else {}
        history = mine.get("history") if isinstance(mine.get("history"), dict) else {}
        writes: list[tuple[int, str, MemoryWrite]] = []
        for path, text in files.items():
            if not isinstance(path, str) or not path.startswith("mine/") or ".." in path.split("/"):
                problems.append(Problem(f"{DATA} › mine", 0, f"file {path!r} is not under mine/, left out"))
                continue
            entries = [e for e in history.get(path) or [] if isinstance(e, dict)]
            versions = replay_history(entries)
            if not versions or versions[-1].rstrip("\n") != str(text).rstrip("\n"):
                if versions:
                    problems.append(Problem(f"{DATA} › mine", 0, f"{path}: history does not replay to the "
                                                                  "exported file; the file is kept as the last version",
                                            "warning"))
                last_step = int(entries[-1].get("step", 0)) if entries else 0
                entries = entries + [{"turn": None, "step": last_step, "kind": "export"}]
                versions = versions + [str(text)]
            for e, content in zip(entries, versions):
                step = int(e.get("step") or 0)
                writes.append((step, path, MemoryWrite(
                    seq=0, turn=e.get("turn") if isinstance(e.get("turn"), int) else None, step=step, life=0,
                    path=path, op="create" if e is entries[0] else "edit", author="agent",
                    reason=str(e.get("kind") or "write"), sources=(), time="", sha256=sha256(content),
                    snapshot=content)))
        writes.sort(key=lambda w: (w[0], w[1]))
        return [dataclasses.replace(w, seq=i) for i, (_, _, w) in enumerate(writes)]

    def episode_record(self, ref: IndexRow) -> EpisodeRecord:
        eps = self.data().get("episodes")
        rec = eps.get(ref.id) if isinstance(eps, dict) and isinstance(eps.get(ref.id), dict) else {}
        return EpisodeRecord(ref, _load_json(rec.get("state")), _load_json(rec.get("action")),
                             _load_json(rec.get("outcome")))

    def observation(self, ref: IndexRow) -> np.ndarray:
        if not ref.image or not EPISODE_ID.match(ref.id):
            raise FrameError(f"{ref.id}: this export has no frame for it")
        p = self.path / ref.image
        if not p.is_file():
            raise FrameError(f"{ref.image}: not included in this export")
        return read_png(p)

    def step_frame(self, index: EpisodeIndex, step: int) -> np.ndarray:
        raise FrameError("an MFM export has no per-step frames, only one frame per episode")

    def log_text(self) -> str | None:
        """logs.txt rebuilt from the exported sections."""
        log = self.data().get("log")
        secs = log.get("sections") if isinstance(log, dict) else None
        if not isinstance(secs, list):
            return None
        rule = "=" * 80
        return "".join(f"{rule}\n{s.get('text', '')}\n" for s in secs if isinstance(s, dict))

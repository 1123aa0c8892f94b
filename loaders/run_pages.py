"""Computations behind the pages that show one run (Runs, Timeline, Frames, Spatial grid) and
the frame helpers every page uses: plain functions over run tables, no Streamlit. The
cross-run analysis pages are served by :mod:`loaders.analysis_pages`.

Every function that feeds a chart bounds what it returns (``max_*`` arguments), binning or
striding long runs so a 36,000-step run never sends a browser more than ~50k points. Frame
access goes through :func:`frame_for`; the run's source refuses paths leaving the run folder
(``mfm.boundary``).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from loaders.inherited import copy_of, inherited_from, inherited_id, locate, origin
from loaders.run import Run
from mfm.envs.crafter_env import LOCAL_ROWS, VIEW, VITALS
from mfm.memory.retrieval import FrameError, ends_in_strip
from mfm.schema import EPISODE_REF, IndexRow

MAX_POINTS = 50_000
"""The most points any one chart built from these views may hold."""

MODEL_KINDS = ("model_ok", "model_retried", "model_failed")
"""Marks of an LLM policy's turns, by how its model requests went."""
MARK_KINDS = ("milestone", "death", "search", "inspect", "memory_write", *MODEL_KINDS)
DECISION_KINDS = ("search", "inspect", *MODEL_KINDS)
"""Marks made while deciding a turn (at its first step, before the action)."""
TILES_X, TILES_Y = VIEW
MAP_TILES_Y = LOCAL_ROWS
"""A Crafter frame in tiles, as the harness defines it (``mfm.envs.crafter_env``): a 9x9 grid
whose top 9x7 tiles are the map."""


EPISODE_IN_PATH = re.compile(r"ep_\d{6,}")
MAX_QUERY = 200
"""A search mark's query is cut to this many characters (a foreign run's command can be long)."""


def _bins(lo: int, hi: int, n: int) -> np.ndarray:
    return np.linspace(lo, hi + 1, max(2, n + 1))


def step_bounds(run: Run) -> tuple[int, int]:
    """First and last env step covered by the run's episodes or step trace."""
    ep = run.episodes()
    st = run.steps()
    lows = [int(ep["first_step"].min())] if len(ep) else []
    highs = [int(ep["last_step"].max())] if len(ep) else []
    if len(st):
        lows.append(int(st["step"].min()))
        highs.append(int(st["step"].max()))
    return (min(lows), max(highs)) if lows else (0, 0)


def _category(episodes: pd.DataFrame, color_by: str) -> pd.Series:
    if color_by == "outcome":
        return episodes["outcome"].fillna("none").astype(str)
    kinds = episodes["action_kind"].astype(object)
    return kinds.where(kinds.notna(), episodes["kind"]).astype(str)


def timeline_bars(episodes: pd.DataFrame, lo: int | None = None, hi: int | None = None,
                  color_by: str = "action_kind", max_bars: int = 3000) -> pd.DataFrame:
    """Episode bars for the timeline: one row per episode, or per step bin when too many.

    Columns: ``life, start, end, category, episode, label, count``. ``start``/``end`` are env
    steps; when more than ``max_bars`` episodes overlap ``[lo, hi]``, episodes of each life are
    merged into step bins coloured by their most frequent category (``count`` episodes each;
    ``episode`` is set only for a bin holding one episode).
    """
    cols = ["life", "start", "end", "category", "episode", "label", "count"]
    if not len(episodes):
        return pd.DataFrame(columns=cols)
    ep = episodes
    lo = int(ep["first_step"].min()) if lo is None else lo
    hi = int(ep["last_step"].max()) if hi is None else hi
    ep = ep[(ep["last_step"] >= lo) & (ep["first_step"] <= hi)]
    cat = _category(ep, color_by)
    if len(ep) <= max_bars:
        end = np.maximum(ep["last_step"].to_numpy(), ep["first_step"].to_numpy() + 0.5)
        return pd.DataFrame({
            "life": ep["life"].astype(int).to_numpy(), "start": ep["first_step"].to_numpy(), "end": end,
            "category": cat.to_numpy(), "episode": ep["id"].to_numpy(),
            "label": [f"{i} · {s}" for i, s in zip(ep["id"], ep["summary"])], "count": 1,
        }, columns=cols)
    edges = _bins(lo, hi, max(1, max_bars - ep["life"].nunique()))
    mid = (ep["first_step"].to_numpy() + ep["last_step"].to_numpy()) / 2
    b = np.clip(np.searchsorted(edges, mid, side="right") - 1, 0, len(edges) - 2)
    df = pd.DataFrame({"life": ep["life"].astype(int).to_numpy(), "bin": b, "category": cat.to_numpy(),
                       "first": ep["first_step"].to_numpy(), "last": ep["last_step"].to_numpy(),
                       "id": ep["id"].to_numpy()})
    keys = ["life", "bin"]
    agg = df.groupby(keys, sort=True).agg(start=("first", "min"), stop=("last", "max"), id=("id", "first"),
                                         count=("category", "size")).reset_index()
    cc = df.groupby([*keys, "category"]).size().rename("n").reset_index()
    cc = cc.sort_values([*keys, "n", "category"], ascending=[True, True, False, True])
    top = cc.drop_duplicates(keys).set_index(keys)["category"]
    head = cc.groupby(keys, sort=False).head(4)
    mix: dict[tuple[int, int], list[str]] = {}  # plain lists: a pandas string aggregation per bin took 0.2 s
    for life, b_, c, n in zip(head["life"].tolist(), head["bin"].tolist(), head["category"].tolist(),
                              head["n"].tolist()):
        mix.setdefault((life, b_), []).append(f"{c} {n}")
    idx = pd.MultiIndex.from_frame(agg[keys])
    return pd.DataFrame({
        "life": agg["life"], "start": agg["start"], "end": np.maximum(agg["stop"], agg["start"] + 0.5),
        "category": top.reindex(idx).to_numpy(), "episode": np.where(agg["count"] == 1, agg["id"], ""),
        "label": [f"{n} episodes, steps {a}–{z}: {', '.join(mix[(life, b_)])}" for n, a, z, life, b_ in
                  zip(agg["count"], agg["start"], agg["stop"], agg["life"].tolist(), agg["bin"].tolist())],
        "count": agg["count"]}, columns=cols)


_SCAN = json.JSONDecoder().scan_once
_BLANK = " \t\n\r"


def _json(v: Any) -> Any:
    """A JSON text parsed (None when it is not one value of JSON), anything else as it is.
    Calls the decoder's scanner directly: ``json.loads`` per turn was a third of a first
    Timeline's marks at 360k steps (18,000 turns)."""
    if isinstance(v, str):
        t = v.strip(_BLANK)
        try:
            out, end = _SCAN(t, 0)
        except (StopIteration, ValueError):
            return None
        return out if end == len(t) else None
    return v


def _first(d: dict, keys: Iterable[str]) -> Any:
    for k in keys:
        v = d.get(k)
        if v is not None:
            return v
    return None


def _fmt_num(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def search_text(args: dict) -> str:
    """A search call's query in words, from the arguments the agent logged: an index query
    (``mfm.memory.index.IndexQuery`` predicates: ``text``, ``tags``, ``action_kind``, ``kind``,
    ``outcome``, ``life``, ``steps``, ``near`` + ``radius``, ``as_of_step``, ``limit``), a
    grep over the text log (``grep``, ``file``, ``since_step``), or a foreign run's command
    (``script``/``query``/``q``). Empty only for a call with no arguments."""
    parts: list[str] = []
    if args.get("grep") is not None:
        parts.append(f"grep /{args['grep']}/ in {args.get('file') or 'the log'}")
        if args.get("since_step") is not None:
            parts.append(f"since step {args['since_step']}")
    for k in ("text", "query", "q", "script"):
        if isinstance(args.get(k), str) and args[k]:
            parts.append(f"'{args[k]}'")
    if args.get("tags"):
        tags = args["tags"] if isinstance(args["tags"], list) else [args["tags"]]
        parts.append("tags " + ", ".join(map(str, tags)))
    for k in ("action_kind", "kind", "outcome", "life"):
        if args.get(k) is not None:
            parts.append(f"{k.replace('_', ' ')} {args[k]}")
    steps = args.get("steps")
    if isinstance(steps, list) and len(steps) == 2:
        parts.append(f"steps {_fmt_num(steps[0])}–{_fmt_num(steps[1])}")
    near = args.get("near")
    if isinstance(near, list) and len(near) >= 2:
        r = args.get("radius")
        parts.append(f"near ({', '.join(_fmt_num(v) for v in near)})" + (f" within {_fmt_num(r)}" if r is not None
                                                                          else ""))
    if args.get("as_of_step") is not None:
        parts.append(f"as of step {args['as_of_step']}")
    if args.get("limit") is not None:
        parts.append(f"at most {args['limit']}")
    known = {"grep", "file", "since_step", "text", "query", "q", "script", "tags", "action_kind", "kind", "outcome",
             "life", "steps", "near", "radius", "as_of_step", "limit", "kinds"}
    parts += [f"{k} {json.dumps(v, sort_keys=True)}" for k, v in sorted(args.items()) if k not in known]
    return " · ".join(parts)


def search_hits(result: dict) -> int | None:
    """How many episodes a search returned: the length of its ``ids`` (what our agents log),
    or of ``episodes``/``results``/``hits``; None when the record holds no such list."""
    hits = _first(result, ("ids", "episodes", "results", "hits"))
    return len(hits) if isinstance(hits, list) else None


def search_label(text: str, hits: Any) -> str:
    """A search mark's words: ``search QUERY → N results``."""
    n = None if hits is None or pd.isna(hits) else int(hits)
    found = "results not recorded" if n is None else f"{n} result{'' if n == 1 else 's'}"
    text = text if len(text) <= MAX_QUERY else text[:MAX_QUERY - 1] + "…"
    return f"search {text or '(no arguments)'} → {found}"


def tool_calls(turns: pd.DataFrame, tools: Iterable[str] = ("search", "inspect")) -> pd.DataFrame:
    """Each call of the given tools made by a turn, one row per call.

    Columns: ``turn, life, step, tool, episode, target_step, frame_index, text, results``.
    ``step`` is the turn's ``first_step`` (the agent decides before acting). For inspections
    ``episode`` is the inspected episode (``args.episode``/``id``/``episode_id``, the same in
    ``result``, or an episode id inside ``args.path``; an inherited one keeps its
    ``inherited:`` id) and ``target_step`` the inspected
    frame's step when the call names one (``args.step``; else the first frame in which
    ``result.found`` saw something; or ``args.frame`` as an index into
    the episode's frames, resolved later by :func:`inspections`). For searches ``text`` is
    the query in words (:func:`search_text`) and ``results`` the number of episodes it
    returned (:func:`search_hits`; missing when the call record holds no result list).
    """
    cols = ["turn", "life", "step", "tool", "episode", "target_step", "frame_index", "text", "results"]
    want = set(tools)
    rows = []
    for turn, life, step, calls in zip(turns["turn"], turns["life"], turns["first_step"], turns["calls"]):
        parsed = _json(calls)
        if not isinstance(parsed, list):
            continue
        for c in parsed:
            if not isinstance(c, dict) or c.get("tool") not in want:
                continue
            args = c.get("args") if isinstance(c.get("args"), dict) else {}
            res = c.get("result") if isinstance(c.get("result"), dict) else {}
            ep = _first(args, ("episode", "id", "episode_id")) or _first(res, ("episode", "id", "episode_id"))
            if ep is None and isinstance(args.get("path"), str):
                found = EPISODE_IN_PATH.search(args["path"])
                ep = found.group(0) if found else None
            ep = ep if isinstance(ep, str) and EPISODE_REF.match(ep) else None
            tstep = _first(args, ("step", "frame_step"))
            seen = [f.get("step") for f in res.get("found") or [] if isinstance(f, dict)]
            seen = [v for v in seen if isinstance(v, int) and not isinstance(v, bool)]
            if tstep is None and seen:
                tstep = min(seen)
            fidx = args.get("frame")
            search = c["tool"] == "search"
            rows.append((int(turn), int(life), int(step), c["tool"], ep,
                         int(tstep) if isinstance(tstep, (int, float)) and not isinstance(tstep, bool) else None,
                         int(fidx) if isinstance(fidx, int) and not isinstance(fidx, bool) else None,
                         search_text(args) if search else "", search_hits(res) if search else None))
    df = pd.DataFrame(rows, columns=cols)
    for c in ("target_step", "frame_index", "results"):
        df[c] = df[c].astype("Int64")
    return df


def inspections(turns: pd.DataFrame, episodes: pd.DataFrame, inherited: pd.DataFrame | None = None,
                from_run: str | None = None) -> pd.DataFrame:
    """Every frame inspection with what the agent saw then and what it retrieved.

    Columns: ``turn, life, step, episode, target_step, target_life, inherited, retrieved,
    label`` (``retrieved``: the inspected episode and frame in words; ``label``: the whole
    inspection in words).
    ``step`` is the step whose frame the agent had when it looked (in the turn's ``life``);
    ``target_step`` the retrieved frame's step, or missing when the inspection opened the
    episode's end observation; ``target_life`` the inspected episode's life (pass both to
    :func:`frame_at`: at a death step the two lives differ). ``inherited`` marks an inspection
    of an ``inherited:`` episode: its target step and life are the earlier game's (looked up in
    ``inherited``, the episodes table of the inherited run, named ``from_run``), and its frame
    is read from that run's copy (:func:`frame_holder`), never from this run.
    """
    calls = tool_calls(turns, ("inspect",))
    own = episodes.set_index("id") if len(episodes) else None
    theirs = inherited.set_index("id") if inherited is not None and len(inherited) else None
    rows = []
    for r in calls.itertuples(index=False):
        bare = inherited_id(r.episode)
        by_id, ep = (theirs, bare) if bare is not None else (own, r.episode)
        target = None if pd.isna(r.target_step) else int(r.target_step)
        known = by_id is not None and ep in by_id.index
        if target is None and r.frame_index is not None and not pd.isna(r.frame_index) and known:
            target = int(by_id.loc[ep, "first_step"]) + 1 + int(r.frame_index)
        what = r.episode if isinstance(r.episode, str) else "?"
        if bare is not None:
            what += f" (from run {from_run or 'unknown'})"
        where = f"step {target}" if target is not None else "end observation"
        if bare is not None:
            where += " of that run"
        life = by_id.loc[ep, "life"] if known and "life" in by_id.columns else None
        rows.append((r.turn, r.life, r.step, r.episode, target, None if life is None or pd.isna(life) else int(life),
                     bare is not None, f"{what} · {where}",
                     f"turn {r.turn} (step {r.step}, life {r.life}) inspected {what} · {where}"))
    df = pd.DataFrame(rows, columns=["turn", "life", "step", "episode", "target_step", "target_life", "inherited",
                                     "retrieved", "label"])
    df["target_step"] = df["target_step"].astype("Int64")
    df["target_life"] = df["target_life"].astype("Int64")
    df["inherited"] = df["inherited"].astype(bool)
    return df


def run_inspections(run: Run) -> pd.DataFrame:
    """:func:`inspections` of a run, inspections of inherited episodes looked up in the copy of
    the run it inherited (:func:`loaders.inherited.copy_of`)."""
    copy = copy_of(run)
    return inspections(run.turns(), run.episodes(), copy.episodes() if copy is not None else None,
                       origin(run) if copy is not None else None)


def frame_holder(run: Run, episode: str | None, step: int | None = None, life: int | None = None
                 ) -> tuple[Run, int | None, str | None, int | None]:
    """Where a frame of episode ``episode`` is, as arguments of :func:`frame_for`: ``(run
    holding it, step, episode, life)``, the episode kept only when no ``step`` is named (its
    end observation). An inherited episode's frames are in the copy of the inherited run,
    under its own id there, and ``step``/``life`` count that run's. Raises FrameError for an
    inherited episode the copy lacks."""
    if episode is not None and inherited_id(episode) is not None:
        ref = locate(run, episode)
        if ref.holder is None:
            raise FrameError(f"{run.name}: no inherited episode {episode} (the copy in inherited/ lacks it)")
        return ref.holder, step, None if step is not None else ref.local_id, life
    return run, step, None if step is not None else episode, life


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def model_calls(turns: pd.DataFrame, turn: int | None = None) -> pd.DataFrame:
    """Each chat-completions request of an LLM policy (the ``model`` calls of ``turns.jsonl``),
    of every turn or of one ``turn``.

    Columns: ``turn, life, step, request, requests, status, model, prompt_tokens,
    completion_tokens, cost_usd, latency_s, prompt_chars, prompt_sha256, tool_calls, error``.
    ``request`` counts from 1 within the turn (of ``requests``). ``status`` is ``ok``, or for
    a request that failed (HTTP error, timeout, malformed or unknown tool call, refusal)
    ``retried`` when the turn asked again and ``failed`` when it was the turn's last request
    (the policy gave up). ``tool_calls`` lists the reply's calls as ``name(arguments)``.
    """
    cols = ["turn", "life", "step", "request", "requests", "status", "model", "prompt_tokens", "completion_tokens",
            "cost_usd", "latency_s", "prompt_chars", "prompt_sha256", "tool_calls", "error"]
    rows = []
    if turn is not None and len(turns):
        turns = turns[turns["turn"] == turn]
    for t, life, step, calls in zip(turns["turn"], turns["life"], turns["first_step"], turns["calls"]):
        if isinstance(calls, str) and "model" not in calls and "\\u" not in calls:
            continue  # no model request can be written here: not parsed (most turns of a scripted policy)
        parsed = _json(calls)
        reqs = [c for c in parsed if isinstance(c, dict) and c.get("tool") == "model"] \
            if isinstance(parsed, list) else []
        for k, c in enumerate(reqs, 1):
            args = c.get("args") if isinstance(c.get("args"), dict) else {}
            res = c.get("result") if isinstance(c.get("result"), dict) else {}
            usage = res.get("usage") if isinstance(res.get("usage"), dict) else {}
            error = res.get("failure") or res.get("error") or (f"refusal: {res['refusal']}" if res.get("refusal")
                                                                else None)
            status = "ok" if error is None else "retried" if k < len(reqs) else "failed"
            calls_made = [f"{t.get('name')}({t.get('arguments', '')})" for t in res.get("tool_calls") or []
                          if isinstance(t, dict)]
            rows.append((int(t), int(life), int(step), k, len(reqs), status, args.get("model"),
                         _num(usage.get("prompt_tokens")), _num(usage.get("completion_tokens")),
                         _num(usage.get("cost_usd")), _num(res.get("latency_s")), _num(args.get("prompt_chars")),
                         args.get("prompt_sha256"), "; ".join(calls_made), None if error is None else str(error)))
    return pd.DataFrame(rows, columns=cols)


def _money(v: float | None) -> str:
    return "?" if v is None or pd.isna(v) else f"${v:.4f}"


def model_turns(calls: pd.DataFrame, max_lines: int = 6) -> pd.DataFrame:
    """One row per turn of :func:`model_calls`: ``turn, life, step, status, requests, label``.

    A turn is ``ok`` when every request was, ``retried`` when some failed but its last one
    answered, ``failed`` when its last request failed. ``label`` (for a hover) gives the
    model, tokens in/out, latency and cost summed over the turn, then one line per request
    (at most ``max_lines``) with its tool calls or its error."""
    cols = ["turn", "life", "step", "status", "requests", "label"]
    if not len(calls):
        return pd.DataFrame(columns=cols)
    rows = []
    mark = {"ok": "✓", "retried": "↻", "failed": "✗"}
    for (turn, life, step), g in calls.groupby(["turn", "life", "step"], sort=True):
        last = g["status"].iloc[-1]
        status = "failed" if last == "failed" else "retried" if (g["status"] != "ok").any() else "ok"
        models = ", ".join(sorted({str(m) for m in g["model"].dropna()})) or "?"
        head = (f"turn {turn} · {len(g)} request{'s' if len(g) != 1 else ''} to {models}<br>"
                f"tokens in {int(g['prompt_tokens'].sum())} / out {int(g['completion_tokens'].sum())} · "
                f"{g['latency_s'].sum():.2f} s · {_money(g['cost_usd'].sum(min_count=1))}")
        lines = [f"{r.request}. {mark[r.status]} " + (r.error if isinstance(r.error, str) else
                                                       r.tool_calls or "no tool call")[:90]
                 for r in g.head(max_lines).itertuples(index=False)]
        if len(g) > max_lines:
            lines.append(f"… {len(g) - max_lines} more")
        rows.append((turn, life, step, status, len(g), "<br>".join([head, *lines])))
    return pd.DataFrame(rows, columns=cols)


def turn_calls(turns: pd.DataFrame, turn: int, max_chars: int = 400) -> pd.DataFrame:
    """Every call a turn made, in order (model requests, memory tools, the action):
    ``call, tool, args, result`` with arguments and result as JSON text cut at ``max_chars``."""
    cols = ["call", "tool", "args", "result"]
    hit = turns[turns["turn"] == turn] if len(turns) else turns
    parsed = _json(hit["calls"].iloc[0]) if len(hit) else None
    if not isinstance(parsed, list):
        return pd.DataFrame(columns=cols)

    def cut(v: Any) -> str:
        text = json.dumps(v, sort_keys=True)
        return text if len(text) <= max_chars else text[:max_chars - 1] + "…"

    return pd.DataFrame([(k, c.get("tool"), cut(c.get("args")), cut(c.get("result")))
                         for k, c in enumerate((c for c in parsed if isinstance(c, dict)), 1)], columns=cols)


def _bin_marks(df: pd.DataFrame, lo: int, hi: int, max_per_kind: int) -> pd.DataFrame:
    if len(df) <= max_per_kind:
        return df
    edges = _bins(lo, hi, max_per_kind)
    df = df.assign(bin=np.clip(np.searchsorted(edges, df["step"].to_numpy(), side="right") - 1, 0, len(edges) - 2))
    g = df.groupby(["life", "bin"], sort=True)
    out = g.agg(step=("step", "first"), count=("count", "sum"), label=("label", "first"), kind=("kind", "first"))
    out = out.reset_index()
    out["label"] = [f"{n} × {k}, from step {s}" for n, k, s in zip(out["count"], out["kind"], out["step"])]
    out["episode"] = ""
    return out[["kind", "step", "life", "label", "episode", "count"]]


def timeline_marks(run: Run, lo: int | None = None, hi: int | None = None, max_per_kind: int = 2000) -> pd.DataFrame:
    """:func:`marks` of a run over ``[lo, hi]`` (the whole run by default)."""
    a, b = step_bounds(run)
    return marks(run.milestones(), run.lives(), run.turns(), run.memory_writes(), a if lo is None else lo,
                 b if hi is None else hi, max_per_kind)


def marks(ms: pd.DataFrame, lv: pd.DataFrame, turns: pd.DataFrame, mw: pd.DataFrame, lo: int, hi: int,
          max_per_kind: int = 2000) -> pd.DataFrame:
    """Milestones, deaths, index searches, frame inspections, memory writes and the model
    requests of each LLM turn (:data:`MODEL_KINDS`, by :func:`model_turns`) as step marks.

    Columns: ``kind, step, life, label, episode, count``; kinds beyond ``max_per_kind`` marks
    are binned (``count`` marks per row).
    """
    parts = []
    if len(ms):
        parts.append(pd.DataFrame({"kind": "milestone", "step": ms["step"], "life": ms["life"],
                                   "label": "milestone: " + ms["name"].astype(str), "episode": ms["episode"]}))
    if len(lv):
        d = lv[lv["event"] == "death"]
        parts.append(pd.DataFrame({"kind": "death", "step": d["step"], "life": d["life"],
                                   "label": "death: " + d["cause"].fillna("unknown").astype(str),
                                   "episode": d["episode"]}))
    calls = tool_calls(turns)
    if len(calls):
        s = calls[calls["tool"] == "search"]
        parts.append(pd.DataFrame({"kind": "search", "step": s["step"], "life": s["life"],
                                   "label": [search_label(t, n) for t, n in zip(s["text"], s["results"])],
                                   "episode": None}))
        i = calls[calls["tool"] == "inspect"]
        parts.append(pd.DataFrame({"kind": "inspect", "step": i["step"], "life": i["life"],
                                   "label": "inspect " + i["episode"].fillna("?"), "episode": i["episode"]}))
    mt = model_turns(model_calls(turns[turns["first_step"].between(lo, hi)] if len(turns) else turns))
    if len(mt):
        parts.append(pd.DataFrame({"kind": "model_" + mt["status"], "step": mt["step"], "life": mt["life"],
                                   "label": mt["label"], "episode": None}))
    if len(mw):
        parts.append(pd.DataFrame({"kind": "memory_write", "step": mw["step"], "life": mw["life"],
                                   "label": mw["op"].astype(str) + " " + mw["path"].astype(str) + ": "
                                   + mw["reason"].astype(str).str.slice(0, 80), "episode": None}))
    cols = ["kind", "step", "life", "label", "episode", "count"]
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame(columns=cols)
    df = pd.concat(parts, ignore_index=True)
    df["count"] = 1
    df = df[(df["step"] >= lo) & (df["step"] <= hi)]
    out = [_bin_marks(g.sort_values("step"), lo, hi, max_per_kind) for _, g in df.groupby("kind", sort=False)]
    out = [o for o in out if len(o)]
    return pd.concat(out, ignore_index=True)[cols] if out else pd.DataFrame(columns=cols)


def vitals_series(steps: pd.DataFrame, lo: int | None = None, hi: int | None = None,
                  max_points: int = 2000) -> pd.DataFrame:
    """Health, food, drink and energy over steps; binned to the minimum per bin when long.

    Columns: ``step, life, health, food, drink, energy``.
    """
    cols = ["step", "life", *VITALS]
    if not len(steps):
        return pd.DataFrame(columns=cols)
    s = _window(steps[cols], lo, hi)
    if len(s) <= max_points:
        return s.reset_index(drop=True)
    edges = _bins(int(s["step"].min()), int(s["step"].max()), max_points)
    b = np.searchsorted(edges, s["step"].to_numpy(), side="right") - 1
    g = s.assign(bin=b).groupby(["life", "bin"], sort=True)
    out = g.agg(step=("step", "first"), health=("health", "min"), food=("food", "min"),
                drink=("drink", "min"), energy=("energy", "min")).reset_index()
    return out[cols].sort_values("step", ignore_index=True)


def _life_bounds(life: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For rows ordered by life: which row is its life's first, and which its life's last."""
    first = np.ones(len(life), bool)
    first[1:] = life[1:] != life[:-1]
    return first, np.roll(first, -1)


def vital_changes(vitals: pd.DataFrame) -> pd.DataFrame:
    """The vitals of :func:`vitals_series` in long form, only where a value changes.

    Columns: ``step, life, vital, value``. Per life and vital: its first point, every point
    whose value differs from the point before, and its last point. A step-after line through
    these rows is the line through all of them: the Timeline draws it with far fewer items
    (a vital changes every few dozen steps in Crafter; ~15-20x fewer on the sample runs).
    """
    cols = ["step", "life", "vital", "value"]
    if not len(vitals):
        return pd.DataFrame(columns=cols)
    v = vitals.sort_values(["life", "step"], kind="stable")
    life = v["life"].to_numpy()
    first, last = _life_bounds(life)
    ends = first | last
    parts = []
    for name in VITALS:
        a = v[name].to_numpy()
        keep = ends.copy()
        keep[1:] |= a[1:] != a[:-1]
        parts.append(pd.DataFrame({"step": v["step"].to_numpy()[keep], "life": life[keep], "vital": name,
                                   "value": a[keep]}))
    return pd.concat(parts, ignore_index=True)[cols]


def absent_records(run: Run) -> list[str]:
    """What a run did not record (a foreign format without turns or agent memory, say), in
    words for a note on the pages."""
    out = []
    if run.turns().empty:
        out.append("turns (so no searches, inspections or targets)")
    if run.memory_writes().empty:
        out.append("agent-written memory")
    if run.steps().empty:
        out.append("a per-step trace (so no per-step frames, vitals or paths)")
    return out


def height_band(df: pd.DataFrame, band: tuple[int, int]) -> pd.DataFrame:
    """Rows of a 3-D run whose height ``y`` lies in ``band`` (inclusive)."""
    return df[(df["y"] >= band[0]) & (df["y"] <= band[1])]


def _window(df: pd.DataFrame, lo: int | None, hi: int | None) -> pd.DataFrame:
    """Rows with ``lo <= step <= hi`` (either bound may be None)."""
    if lo is not None:
        df = df[df["step"] >= lo]
    if hi is not None:
        df = df[df["step"] <= hi]
    return df


MAX_PATH_POINTS = 6_000
"""The most path points the Grid map draws (eight per pixel of its 720-pixel side; a narrower
step range shows more): 20,000 took ~0.5 s more of a first visit's drawing in Chromium."""


def trajectories(steps: pd.DataFrame, lo: int | None = None, hi: int | None = None,
                 max_points: int = MAX_PATH_POINTS) -> pd.DataFrame:
    """Each life's path (``life, step, x, y``) through the points where it turns.

    A step that stays on the cell before it, or goes on straight in the same direction, adds
    nothing to the drawn polyline and is left out (on Crafter runs 4-6x fewer points; the
    line is the same); what is left is strided to at most ``max_points`` in all. Every life
    keeps its first and last point, so starts and ends stay exact.
    """
    cols = ["life", "step", "x", "y"]
    if not len(steps):
        return pd.DataFrame(columns=cols)
    s = _window(steps[cols], lo, hi).sort_values(["life", "step"], kind="stable")
    s = s[_turns(s["life"].to_numpy(), s["x"].to_numpy(), s["y"].to_numpy())]
    if len(s) <= max_points:
        return s.reset_index(drop=True)
    stride = int(np.ceil(len(s) / max_points))
    parts = []
    for _, g in s.groupby("life", sort=True):
        keep = np.zeros(len(g), bool)
        keep[::stride] = True
        keep[-1] = True
        parts.append(g[keep])
    return pd.concat(parts, ignore_index=True)


def _turns(life: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Which points of paths (rows ordered by life, then step) a polyline needs: each life's
    first and last, and every point where the path turns (not a repeat of the point before,
    not the middle of a straight run in one direction)."""
    if len(life) < 3:
        return np.ones(len(life), bool)
    first, last = _life_bounds(life)
    keep = first | last | (x != np.roll(x, 1)) | (y != np.roll(y, 1))
    idx = np.flatnonzero(keep)
    px, py, pl = x[idx], y[idx], life[idx]
    dx, dy = np.diff(px), np.diff(py)
    straight = ((dx[1:] * dy[:-1] - dy[1:] * dx[:-1] == 0) & (dx[1:] * dx[:-1] + dy[1:] * dy[:-1] > 0)
                & (pl[1:-1] == pl[:-2]) & (pl[1:-1] == pl[2:]))  # neighbours in its own life: not a first or last
    keep[idx[1:-1][straight]] = False
    return keep


def grid_cells(grid: pd.DataFrame, lo: int | None = None, hi: int | None = None,
               kinds: Iterable[str] | None = None) -> pd.DataFrame:
    """The traversed-cell grid: the latest kind of each cell within the filters.

    Columns: ``x, y, kind, count, first_step, last_step, lives``.
    """
    cols = ["x", "y", "kind", "count", "first_step", "last_step", "lives"]
    if not len(grid):
        return pd.DataFrame(columns=cols)
    g = grid
    if lo is not None:
        g = g[g["step"] >= lo]
    if hi is not None:
        g = g[g["step"] <= hi]
    if kinds is not None:
        g = g[g["kind"].isin(list(kinds))]
    if not len(g):
        return pd.DataFrame(columns=cols)
    g = g.sort_values("step", kind="stable")
    agg = g.groupby(["x", "y"], sort=True).agg(
        kind=("kind", "last"), count=("kind", "size"), first_step=("step", "min"), last_step=("step", "max"),
        lives=("life", lambda v: ",".join(str(i) for i in sorted(set(v))))).reset_index()
    return agg[cols]


def grid_extent(grid: pd.DataFrame, steps: pd.DataFrame, episodes: pd.DataFrame, pad: int = 2
                ) -> tuple[int, int, int, int]:
    """``(x0, y0, x1, y1)`` covering every cell, position and episode of a run, padded."""
    xs: list[float] = []
    ys: list[float] = []
    for df in (grid, steps, episodes):
        if len(df) and "x" in df:
            x = pd.to_numeric(df["x"], errors="coerce").dropna()
            y = pd.to_numeric(df["y"], errors="coerce").dropna()
            if len(x) and len(y):
                xs += [x.min(), x.max()]
                ys += [y.min(), y.max()]
    if not xs:
        return 0, 0, 8, 6
    return int(min(xs)) - pad, int(min(ys)) - pad, int(max(xs)) + pad, int(max(ys)) + pad


def episodes_at_cell(run: Run, x: int, y: int, plane: str = "y") -> pd.DataFrame:
    """Episodes that touched cell (x, y): the player stood there, or the grid records it.

    ``plane`` names the grid coordinate used as the map's second axis (``z`` for 3-D runs,
    whose horizontal plane is (x, z)). Columns: ``episode, life, first_step, last_step,
    action_kind, summary, how, step`` where ``step`` is the first step in the episode at
    that cell and ``how`` says why it is listed.
    """
    cols = ["episode", "life", "first_step", "last_step", "action_kind", "summary", "how", "step"]
    ep = run.episodes()
    if not len(ep):
        return pd.DataFrame(columns=cols)
    hits: dict[str, tuple[str, int]] = {}
    st = run.steps()
    if len(st) and plane == "y":
        here = st[(st["x"] == x) & (st["y"] == y)]
        for e, s in zip(here["episode"], here["step"]):
            if e not in hits:
                hits[e] = ("stood here", int(s))
    gr = run.grid()
    if len(gr):
        here = gr[(gr["x"] == x) & (gr[plane] == y)]
        for kind, s, life in zip(here["kind"], here["step"], here["life"]):
            ref = episode_holding(run, int(s), int(life)) or _episode_ending(run, int(s), int(life))
            if ref is not None:
                how, first = hits.get(ref.id, ("", int(s)))
                how = kind if not how else (how if kind in how else f"{how}, {kind}")
                hits[ref.id] = (how, min(first, int(s)))
    if not hits:
        return pd.DataFrame(columns=cols)
    sub = ep[ep["id"].isin(list(hits))].copy()
    sub["how"] = [hits[i][0] for i in sub["id"]]
    sub["step"] = [hits[i][1] for i in sub["id"]]
    sub = sub.rename(columns={"id": "episode"}).sort_values("first_step", ignore_index=True)
    return sub[cols]


def grid_at_cell(run: Run, x: int, y: int, plane: str = "y", life: int | None = None) -> pd.DataFrame:
    """The grid records of cell (x, y) (for ``plane`` ``z``: every height of column (x, z)),
    of one ``life`` or all: ``step, life, kind, item, damage, cause``."""
    cols = ["step", "life", "kind", "item", "damage", "cause"]
    g = run.grid()
    if not len(g):
        return pd.DataFrame(columns=cols)
    g = g[(g["x"] == x) & (g[plane] == y) & ((g["life"] == life) if life is not None else True)]
    return g[cols].reset_index(drop=True)


def lives_of(run: Run) -> list[int]:
    """Every life of a run that has an episode, a step or a grid record, sorted."""
    return sorted({int(v) for df in (run.grid(), run.episodes(), run.steps()) if len(df) for v in df["life"].dropna()})


def _episode_ending(run: Run, step: int, life: int | None = None) -> IndexRow | None:
    """The last episode (of ``life``, if given) that ended at env step ``step``."""
    hit = None
    for r in run.index.rows:
        if r.last_step == step and (life is None or r.life == life):
            hit = r
    return hit


def life_at(run: Run, step: int) -> int | None:
    """The life that took env step ``step`` (whose frame and trace row it is): the trace row's
    life, else the life of the episode holding the step, else of the newest respawn, episode
    or grid record at or before it. At a death step this is the life that died; the next
    life begins after it (a turn says which life it belongs to: pass that to the lookups)."""
    st = run.steps()
    if len(st):
        hit = st.loc[st["step"] == step, "life"]
        if len(hit):
            return int(hit.iloc[0])
    ref = run.index.episode_at(step)
    if ref is not None:
        return int(ref.life)
    best: tuple[int, int] | None = None
    for r in run.index.rows:
        if r.last_step <= step and (best is None or (r.last_step, r.life) >= best):
            best = (r.last_step, r.life)
    for e in run.records("lives.jsonl"):
        if e.event == "respawn" and e.step < step and (best is None or (e.step, e.life) >= best):
            best = (e.step, e.life)
    return None if best is None else best[1]


def episode_holding(run: Run, step: int, life: int | None = None) -> IndexRow | None:
    """The episode whose per-step frames hold env step ``step`` (``first_step < step <=
    first_step + frames``), only if it belongs to ``life`` (None: the life that took the step)."""
    ref = run.index.episode_at(step)
    if ref is None or step > ref.first_step + ref.frames:
        return None
    return ref if life is None or ref.life == life else None


def position_at(run: Run, step: int, life: int | None = None) -> tuple[float, float] | None:
    """Where the agent of ``life`` stood after env step ``step`` (None: the life that took the
    step, :func:`life_at`), in the map's plane ((x, z) for 3-D runs), or None if unknown.

    The newest of: the life's trace row at or before the step (``steps.jsonl``), its respawn
    at or before it (``lives.jsonl``: a life starts where it respawned, at the step the last
    one died), the end position of its newest episode ended by then (``index.jsonl``). At a
    step that is both a death and a respawn, life L's position is where it died, life L + 1's
    where it respawned."""
    life = life_at(run, step) if life is None else life
    if life is None:
        return None
    best: tuple[int, int, tuple[float, float]] | None = None

    def offer(at: int, rank: int, xy: tuple[float, float]) -> None:
        nonlocal best
        if best is None or (at, rank) > best[:2]:
            best = (at, rank, xy)

    three_d = run.is_3d
    for r in run.index.rows:
        if r.life == life and r.last_step <= step and r.x is not None:
            second = r.z if three_d else r.y
            if second is not None:
                offer(r.last_step, 0, (float(r.x), float(second)))
    for e in run.records("lives.jsonl"):
        if e.event == "respawn" and e.life == life and e.step <= step and e.x is not None and e.y is not None:
            offer(e.step, 1, (float(e.x), float(e.y)))
    st = run.steps()
    if len(st):
        mine = st[(st["life"] == life) & (st["step"] <= step) & st["x"].notna() & st["y"].notna()]
        if len(mine):
            row = mine.iloc[int(mine["step"].to_numpy().argmax())]
            offer(int(row["step"]), 2, (float(row["x"]), float(row["y"])))
    return None if best is None else best[2]


def frame_at(run: Run, step: int, life: int | None = None) -> np.ndarray:
    """The frame the agent of ``life`` had after env step ``step`` (None: the life that took the
    step, :func:`life_at`): the step's per-step frame if that life took it, else the end
    observation of an episode of that life ending at the step (a life's initial state).

    A life that began at a step another life died at has no frame there (its first frame is
    the next step's): FrameError says so rather than showing the other life's frame. Raises
    FrameError (missing/unreadable) or UnsafePath."""
    life = life_at(run, step) if life is None else life
    ref = episode_holding(run, step, life)
    if ref is not None:
        return run.frame(step)
    end = _episode_ending(run, step, life)
    if end is not None and (end.image or ends_in_strip(end)):
        return run.observation(end.id)
    other = episode_holding(run, step)
    if other is not None and life is not None and other.life != life:
        later = [r.first_step + 1 for r in run.index.rows if r.life == life and r.frames and r.first_step >= step]
        raise FrameError(f"{run.name}: no stored frame of life {life} at step {step} (that step's frame is life "
                         f"{other.life}'s)" + (f"; life {life}'s next frame is step {min(later)}" if later else ""))
    raise FrameError(f"{run.name}: no stored frame for step {step}" + (f" in life {life}" if life is not None else ""))


def frames_at_cell(steps: pd.DataFrame, x: int, y: int) -> pd.DataFrame:
    """Every step whose frame was taken with the player on cell (x, y): ``step, life, episode``."""
    if not len(steps):
        return pd.DataFrame(columns=["step", "life", "episode"])
    here = steps[(steps["x"] == x) & (steps["y"] == y)]
    return here[["step", "life", "episode"]].reset_index(drop=True)


def visits_per_cell(runs: list[Run]) -> pd.DataFrame:
    """How often each cell holds a frame, over several runs: ``x, y, frames, runs, lives``."""
    parts = []
    for r in runs:
        s = r.steps()
        if len(s):
            parts.append(s[["x", "y", "life"]].assign(run=r.name))
    if not parts:
        return pd.DataFrame(columns=["x", "y", "frames", "runs", "lives"])
    df = pd.concat(parts, ignore_index=True)
    return df.groupby(["x", "y"]).agg(frames=("life", "size"), runs=("run", "nunique"),
                                       lives=("life", "nunique")).reset_index()


def frame_for(run: Run, step: int | None = None, episode: str | None = None, life: int | None = None
              ) -> np.ndarray:
    """A frame of the run: the frame of env ``step`` as life ``life`` saw it (:func:`frame_at`;
    None: the life that took the step), or the end observation of ``episode`` (an inherited
    one's from the copy of its run, :func:`frame_holder`).
    Raises FrameError (missing/unreadable) or UnsafePath."""
    if episode is not None:
        run, _, episode, _ = frame_holder(run, episode)
        ref = run.episode(episode)
        if ref is None:
            raise FrameError(f"{run.name}: no episode {episode}")
        return run.observation(episode)
    if step is None:
        raise FrameError("name a step or an episode")
    return frame_at(run, step, life)


def frame_strip(run: Run, episode: str, max_frames: int = 32) -> list[tuple[int, np.ndarray]]:
    """Up to ``max_frames`` of an episode's per-step frames, evenly spaced: ``[(step, frame)]``;
    an inherited episode's from the copy of its run, at that run's steps (:func:`frame_holder`)."""
    run, _, episode, _ = frame_holder(run, episode)
    ref = run.episode(episode)
    if ref is None:
        raise FrameError(f"{run.name}: no episode {episode}")
    if ref.frames == 0:
        return []
    idx = sorted(set(np.linspace(0, ref.frames - 1, min(max_frames, ref.frames)).round().astype(int).tolist()))
    return [(ref.first_step + 1 + i, run.frame(ref.first_step + 1 + i)) for i in idx]


@dataclass(frozen=True)
class EpisodeDetail:
    """An episode's index row and its stored records (None where missing or unreadable)."""

    row: IndexRow
    state: dict | None
    action: dict | None
    outcome: dict | None
    steps: pd.DataFrame
    extra: dict = field(default_factory=dict)
    """Index fields of a foreign run that our format does not name (an MFM export's
    ``inventory_delta``, ``_frame``…), as the run recorded them."""


def episode_detail(run: Run, episode: str) -> EpisodeDetail:
    """Index row, state.json, action.json, outcome.json and step rows of one episode."""
    ref = run.episode(episode)
    if ref is None:
        raise KeyError(f"{run.name}: no episode {episode}")
    rec = run.episode_record(episode)
    st = run.steps()
    rows = st[st["episode"] == episode] if len(st) else st
    return EpisodeDetail(ref, rec.state, rec.action, rec.outcome, rows.reset_index(drop=True),
                         episode_extra(run, episode))


def episode_extra(run: Run, episode: str) -> dict:
    """The index fields of ``episode`` our format does not name, kept from a foreign run (the
    episodes table's ``extra`` column, JSON text); empty for our runs."""
    ep = run.episodes()
    if "extra" not in ep.columns or not len(ep):
        return {}
    hit = ep.loc[ep["id"] == episode, "extra"]
    text = hit.iloc[0] if len(hit) else None
    return json.loads(text) if isinstance(text, str) else {}


def step_row(run: Run, step: int, life: int | None = None) -> dict | None:
    """The step trace row of one env step (of ``life``, if given) as a dict, or None."""
    st = run.steps()
    if not len(st):
        return None
    hit = st[(st["step"] == step) & ((st["life"] == life) if life is not None else True)]
    return None if not len(hit) else hit.iloc[0].to_dict()


def tile_size(frame: np.ndarray) -> int:
    """Crafter tile edge in pixels for a frame (frame width // 9)."""
    return max(1, frame.shape[1] // TILES_X)


def upscale(frame: np.ndarray, target: int = 256) -> np.ndarray:
    """Nearest-neighbour magnification by the integer factor that brings the width near ``target``."""
    factor = max(1, int(round(target / max(1, frame.shape[1]))))
    return np.repeat(np.repeat(frame, factor, axis=0), factor, axis=1)


def wipe(a: np.ndarray, b: np.ndarray, position: float) -> np.ndarray:
    """A/B wipe: columns left of ``position`` (0..1 of the width) from ``a``, the rest from ``b``,
    with a one-pixel yellow divider."""
    if a.shape != b.shape:
        raise ValueError(f"frames differ in size: {a.shape} vs {b.shape}")
    w = a.shape[1]
    cut = int(round(min(1.0, max(0.0, position)) * w))
    out = b.copy()
    out[:, :cut] = a[:, :cut]
    if 0 < cut < w:
        out[:, cut - 1] = (255, 220, 0)
    return out


def difference_count(a: np.ndarray, b: np.ndarray) -> int:
    """How many pixels differ between two frames of the same size."""
    if a.shape != b.shape:
        raise ValueError(f"frames differ in size: {a.shape} vs {b.shape}")
    return int(np.any(a != b, axis=-1).sum())


def problems_table(run: Run) -> pd.DataFrame:
    """The run's problems as rows ``where, severity, message`` (``where`` is file:line)."""
    return pd.DataFrame([(f"{p.file}:{p.line}" if p.line else p.file, p.severity, p.message) for p in run.problems],
                        columns=["where", "severity", "message"])


def runs_overview(runs: list[Run], root: Path, check: bool = True) -> pd.DataFrame:
    """One row per run for the Runs page, keyed by its path relative to ``root``;
    ``inherited`` names the run whose memory it inherited ("" for none).

    With ``check`` every run's tables are read (once per change of its files) so that
    ``problems`` is counted; without it only manifests and line counts are read, and
    ``problems`` is counted only for runs already read (None for the others)."""
    root = root.resolve()
    rows = []
    for r in runs:
        s = r.summary()
        try:
            key = r.path.resolve().relative_to(root).as_posix()
        except ValueError:
            continue
        rows.append({
            "key": key, "task": s["task"], "method": s["method"], "ablations": s["ablations"] or "—",
            "seed": s["seed"], "steps": s["steps"], "budget": s["budget"], "lives": s["lives"],
            "deaths": s["deaths"], "milestones": f"{s['milestones']}/{s['milestones_total']}",
            "milestones_reached": s["milestones"], "milestones_total": s["milestones_total"],
            "status": s["status"], "episodes": s["episodes"],
            "problems": len(r.problems) if check or r.loaded else None,
            "inherited": str((inherited_from(r) or {}).get("run") or ""),
        })
    return pd.DataFrame(rows, columns=["key", "task", "method", "ablations", "seed", "steps", "budget", "lives",
                                       "deaths", "milestones", "milestones_reached", "milestones_total", "status",
                                       "episodes", "problems", "inherited"])


def milestone_steps(runs: list[Run], root: Path) -> pd.DataFrame:
    """When each run first reached each milestone: ``run, method, milestone, order, step``."""
    rows = []
    for r in runs:
        m = r.manifest
        if m is None:
            continue
        order = list(m.milestone_order)
        key = r.path.resolve().relative_to(root.resolve()).as_posix() if root.resolve() in r.path.resolve().parents \
            else r.name
        for name, step in m.milestones.items():
            rows.append((key, m.method, name, order.index(name) if name in order else len(order), int(step)))
    return pd.DataFrame(rows, columns=["run", "method", "milestone", "order", "step"])


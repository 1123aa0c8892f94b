"""The agent's calls as data: tool calls (searches, inspections) read from its turns, what an
inspection opened, and an LLM policy's model calls. Plain functions, no Streamlit."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Iterable

import pandas as pd

from loaders.inherited import copy_of, inherited_id, origin
from loaders.run import Run
from mfm.schema import EPISODE_REF

MODEL_KINDS = ("model_ok", "model_retried", "model_failed")
"""Marks of an LLM policy's turns, by how its model requests went."""


EPISODE_IN_PATH = re.compile(r"ep_\d{6,}")


MAX_QUERY = 200
"""A search mark's query is cut to this many characters (a foreign run's command can be long)."""


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


def run_tool_calls(run: Run) -> pd.DataFrame:
    """:func:`tool_calls` of a run's searches and inspections, parsed once per run version
    (``Run.derived``; 0.2 s at 360,000 steps): read it, never change it."""
    return run.derived("tool-calls", lambda r: tool_calls(r.turns()))


def inspections(turns: pd.DataFrame, episodes: pd.DataFrame, inherited: pd.DataFrame | None = None,
                from_run: str | None = None, calls: pd.DataFrame | None = None) -> pd.DataFrame:
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
    is read from that run's copy (:func:`frame_holder`), never from this run. ``calls``:
    ``tool_calls(turns)`` when the caller holds it already.
    """
    calls = tool_calls(turns, ("inspect",)) if calls is None else calls[calls["tool"] == "inspect"]
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
                       origin(run) if copy is not None else None, run_tool_calls(run))


@dataclass(frozen=True)
class InspectedFrame:
    """The frame an inspection retrieved: of the run's own episode ``episode``, or (``inherited``)
    of the episode with that id in the copy of the run whose memory it inherited; at env
    ``step`` of that run, or its end observation when ``step`` is None."""

    inherited: bool
    episode: str
    step: int | None


def inspected_frame(row: pd.Series | dict) -> InspectedFrame:
    """Where the frame a row of :func:`inspections` retrieved is read: an ``inherited:``
    episode under its own id in the copy of its run, at its ``target_step`` when the
    inspection opened a step, else the episode's end observation."""
    target = row["target_step"]
    step = None if target is None or pd.isna(target) else int(target)
    if bool(row["inherited"]):
        return InspectedFrame(True, inherited_id(row["episode"]) or str(row["episode"]), step)
    return InspectedFrame(False, str(row["episode"]), step)


def inspection_between(ins: pd.DataFrame, retrieved_step: int | None, retrieved_episode: str | None,
                       seen_step: int | None) -> pd.Series | None:
    """The first inspection of :func:`inspections` ``ins`` (of one run, not inherited) that
    compared these two frames of that run: the agent looked at step ``seen_step`` and retrieved
    the frame of step ``retrieved_step`` (an inspection that opened a step), or the end
    observation of ``retrieved_episode`` (one that opened an end observation). None when no
    inspection did."""
    if seen_step is None or not len(ins):
        return None
    for _, row in ins[(ins["step"] == seen_step) & ~ins["inherited"].astype(bool)].iterrows():
        target = row["target_step"]
        hit = retrieved_step == int(target) if not pd.isna(target) else (
            retrieved_step is None and retrieved_episode == row["episode"])
        if hit:
            return row
    return None


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

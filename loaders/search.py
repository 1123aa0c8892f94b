"""Search over what an agent asked, found, noted and did: one function for the dashboard's
Search page and for notebooks.

    from loaders.run import open_run
    from loaders.search import search
    search(open_run("sample_runs/reach-1000_mfm_s0"), "diamond")

Every hit is one row (:data:`COLUMNS`): what kind of record it is, the turn, life and env step
it belongs to, the episode, the text that matched, the run file it was read from, and the page
and URL query (``life``/``step`` for the time cursor) that open it in the dashboard.
"""
from __future__ import annotations

import json
from typing import Iterable, Sequence
from urllib.parse import urlencode

import pandas as pd

from loaders.provenance import held_writes
from loaders.run import Run
from mfm.memory.agent_memory import replay

KINDS = ("search query", "inspection find", "decision", "note", "plan", "memory file", "episode summary", "event")
"""What is searched: the turns' search calls, their inspections' finds and their decisions
(``turns.jsonl``); the lines the agent added to ``mine/GUIDE.md`` (notes), ``mine/working.md``
(plans) and its other files (``memory_writes.jsonl``); the episodes' summaries and events
(``index.jsonl``)."""
COLUMNS = ["kind", "turn", "life", "step", "episode", "text", "source", "page", "query"]
"""``page`` and ``query``: the dashboard page that opens the hit and its URL query (without the
run); ``source`` the run file the text is in."""
GUIDE, WORKING = "mine/GUIDE.md", "mine/working.md"
MAX_TEXT = 500
"""Longest text of a hit (longer ones are cut, with an ellipsis)."""


def _clip(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT - 1] + "…"


def _q(**params: object) -> str:
    return urlencode({k: str(v) for k, v in params.items() if v is not None})


def _turn_rows(run: Run) -> Iterable[dict]:
    for t in run.records("turns.jsonl"):
        start = t.first_step + 1 if t.last_step > t.first_step else t.first_step
        base = {"turn": t.turn, "life": t.life, "step": t.first_step, "source": "turns.jsonl", "page": "turns",
                "query": _q(turn=t.turn, life=t.life, step=start)}
        for c in t.calls:
            tool, args, result = c.get("tool"), c.get("args") or {}, c.get("result") or {}
            if tool == "search":
                text = "searched " + ", ".join(f"{k}={json.dumps(v, sort_keys=True)}" for k, v in sorted(args.items()))
                ids = result.get("ids") or []
                yield {**base, "kind": "search query", "episode": None,
                       "text": _clip(text + (f" → {len(ids)} episode(s)" if isinstance(ids, list) else ""))}
            elif tool == "inspect":
                found = [f for f in result.get("found") or [] if isinstance(f, dict)]
                if found:
                    ep = args.get("episode")
                    finds = "; ".join(f"{f.get('name')} ({f.get('x')}, {f.get('y')})"
                                      + (f" at step {f['step']}" if isinstance(f.get("step"), int) else "")
                                      for f in found)
                    yield {**base, "kind": "inspection find", "episode": ep if isinstance(ep, str) else None,
                           "text": _clip(f"inspected {ep}: {finds}")}
        for line in (t.note or "").splitlines():
            if line.startswith("decision:"):
                yield {**base, "kind": "decision", "episode": None, "text": _clip(line.split(":", 1)[1].strip())}


def _memory_rows(run: Run) -> Iterable[dict]:
    held = {w.seq: w.step for w in held_writes(run)}
    for v in replay(run.records("memory_writes.jsonl")):
        w = v.write
        old = set((v.before or "").splitlines())
        added = [line for line in (v.after or "").splitlines() if line.strip() and line not in old]
        kind = "note" if w.path == GUIDE else "plan" if w.path == WORKING else "memory file"
        step = held.get(w.seq, w.step)
        base = {"kind": kind, "turn": w.turn, "life": w.life, "step": step, "episode": None,
                "source": "memory_writes.jsonl", "page": "memory",
                "query": _q(file=w.path, asof=step, life=w.life, step=step)}
        for line in added:
            yield {**base, "text": _clip(f"{w.path}: {line.strip()}")}
        if w.reason:
            yield {**base, "text": _clip(f"{w.path} ({w.op}, write {w.seq}): {w.reason}")}


def _episode_rows(run: Run) -> Iterable[dict]:
    for r in run.index.rows:
        start = r.first_step + 1 if r.last_step > r.first_step else r.first_step
        base = {"turn": r.turn, "life": r.life, "step": start, "episode": r.id, "source": "index.jsonl",
                "page": "timeline", "query": _q(ep=r.id, life=r.life, step=start)}
        if r.summary:
            yield {**base, "kind": "episode summary", "text": _clip(f"{r.id}: {r.summary}")}
        for e in r.events:
            yield {**base, "kind": "event", "text": _clip(f"{r.id}: {e}")}


def corpus(run: Run) -> pd.DataFrame:
    """Everything :func:`search` looks through, one row per searchable text (:data:`COLUMNS`),
    in order of step (then kind)."""
    rows = [*_turn_rows(run), *_memory_rows(run), *_episode_rows(run)]
    df = pd.DataFrame(rows, columns=COLUMNS)
    if not len(df):
        return df
    df["turn"] = df["turn"].astype("Int64")
    df["life"] = df["life"].astype("Int64")
    df["step"] = df["step"].astype("Int64")
    order = {k: i for i, k in enumerate(KINDS)}
    return df.assign(_k=df["kind"].map(order)).sort_values(["step", "_k", "turn"], kind="stable").drop(
        columns="_k").reset_index(drop=True)


def words(text: str) -> list[str]:
    """The words of a search, lower-cased (a phrase in double quotes is one word)."""
    out, rest = [], str(text)
    while '"' in rest:
        before, _, after = rest.partition('"')
        phrase, _, rest = after.partition('"')
        out += before.split()
        if phrase.strip():
            out.append(phrase.strip())
    out += rest.split()
    return [w.lower() for w in out]


def matches(table: pd.DataFrame, text: str, kinds: Sequence[str] | None = None) -> pd.DataFrame:
    """The rows of a :func:`corpus` whose text holds every word of ``text`` (any case), of
    ``kinds`` only when given."""
    want = words(text)
    if kinds is not None:
        table = table[table["kind"].isin(list(kinds))]
    if not want or not len(table):
        return table.iloc[0:0].reset_index(drop=True)
    low = table["text"].str.lower()
    hit = pd.Series(True, index=table.index)
    for w in want:
        hit &= low.str.contains(w, regex=False)
    return table[hit].reset_index(drop=True)


def search(run: Run, text: str, kinds: Sequence[str] | None = None) -> pd.DataFrame:
    """The hits of ``text`` in one run: the rows of its :func:`corpus` holding every word of
    ``text`` (case-insensitive; ``"a phrase"`` as one word), of ``kinds`` (:data:`KINDS`) only
    when given. An empty search finds nothing."""
    unknown = [k for k in kinds or () if k not in KINDS]
    if unknown:
        raise ValueError(f"unknown kind(s) {', '.join(map(repr, unknown))}; use some of {', '.join(KINDS)}")
    return matches(corpus(run), text, kinds)


def hits_in(corpora: Iterable[tuple[str, pd.DataFrame]], text: str, kinds: Sequence[str] | None = None
            ) -> pd.DataFrame:
    """The hits of ``text`` (:func:`matches`) in several runs' corpora (``(run key, corpus)``
    pairs), with the run's key in column ``run``: by kind (in :data:`KINDS` order), then step,
    then turn, runs in the order given within each."""
    parts = [matches(table, text, kinds).assign(run=key) for key, table in corpora]
    hits = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=[*COLUMNS, "run"])
    order = {k: i for i, k in enumerate(KINDS)}
    return hits.assign(_k=hits["kind"].map(order)).sort_values(["_k", "step", "turn"], kind="stable").drop(
        columns="_k").reset_index(drop=True)


def link(row: pd.Series | dict, run_key: str, runs: str | None = None) -> str:
    """The dashboard link (page and query, relative to the app) that opens a hit of run
    ``run_key`` (``runs``: the runs to keep open, default that run)."""
    q = urlencode({"runs": runs or run_key, "run": run_key})
    return f"{row['page']}?{q}&{row['query']}"

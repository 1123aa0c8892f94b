"""Provenance of agent-written memory as a graph, and the contradictions of its lines.

Plain functions over an opened run, no Streamlit. Nodes are versions of the agent's own
memory — knowledge lines of GUIDE.md (one chain per fact key), procedure versions (disabled
ones marked, with the reason), plan versions (working.md) and versions of any other
``mine/`` file — and the episodes they cite. Edges:

- ``cites``: a version -> an episode that supports it (a knowledge line's own episode ids,
  else the sources of the write that set it);
- ``revises``: a version -> the previous version of the same line / file;
- ``disabled_because``: the write that disabled a procedure -> the episodes that showed it;
- ``used_in``: a procedure version -> an episode in which a turn ran it (``procedure`` calls).

An episode of the run a run inherited (``inherited:ep_…``, :mod:`loaders.inherited`) is a
node of its own, labelled with that run and read from its copy; it sits at the step of the
first write citing it (its own steps are the earlier game's).

Large histories are aggregated under a node budget (:func:`aggregate`): episodes collapse
into step bins, then versions into one node per chain, then chains into step bins, and the
graph says what it merged.
"""
from __future__ import annotations

import difflib
import json
import math
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from loaders.inherited import copy_of, is_inherited, locate, origin, qualify
from loaders.run import Run
from mfm.memory.agent_memory import Blame, blame, rebuild, replay
from mfm.memory.consolidation import FACT_LINE, GUIDE, PLAN_LINE, WORKING, parse_plan_targets
from mfm.memory.procedures import PROC_DIR
from mfm.schema import IndexRow, MemoryWrite

NODE_KINDS = ("knowledge", "procedure", "plan", "file", "episode")
PREFIX = {"knowledge": "fact", "procedure": "proc", "plan": "plan", "file": "file"}
"""Node ids are ``PREFIX:chain#version`` (episodes: their episode id)."""
EDGE_KINDS = ("cites", "revises", "disabled_because", "used_in")
NODE_BUDGET = 1500
"""The most nodes a graph sent to the browser holds (see :func:`aggregate`)."""
EPISODE_BINS = 100
MAX_EDGES = 12_000
"""Edges drawn at most: three points each keeps a chart under ~50k points."""
REACHED = 1
"""A plan target counts as reached when the agent stood within this many cells (Chebyshev)."""


PLAN_REASON = "plan:"
"""How a policy's plan update names its write to ``mine/working.md`` (``plan: GOAL``)."""


def holds_from(writes: Sequence[MemoryWrite], turn_starts: Mapping[int, int]) -> dict[int, int]:
    """The env step from which each write (by ``seq``) holds: the as-of rule of the readers.

    A write holds from its own ``step``, except a plan update: a write to ``mine/working.md``
    whose reason starts with ``plan:`` and whose turn is known. The policy logs it after the
    turn's actions, stamped with the turn's last step, but it records the plan decided at the
    turn's first step, which the agent follows from its first action on; it holds from that
    first step (``turn_starts``: turn → first step). A file's version contains every earlier
    write to it, so a write holds no later than any later write to the same file (the
    smallest such step). With this rule, a file as of step ``s`` is the replay of its writes
    holding from ``s`` or earlier, always a prefix of its log."""
    own: dict[int, int] = {}
    for w in writes:
        start = w.step
        first = turn_starts.get(w.turn) if w.turn is not None else None
        if w.path == WORKING and w.reason.startswith(PLAN_REASON) and first is not None and first <= w.step:
            start = first
        own[w.seq] = start
    out: dict[int, int] = {}
    low: dict[str, int] = {}
    for w in reversed(list(writes)):
        low[w.path] = min(own[w.seq], low.get(w.path, own[w.seq]))
        out[w.seq] = low[w.path]
    return out


def held_writes(run: Run) -> list[MemoryWrite]:
    """The run's memory writes in log order, each with ``step`` set to the step from which it
    holds (:func:`holds_from`), computed once per version of the run. Every as-of view of agent
    memory filters these."""
    return run.derived("held-writes", _held_writes)


def _held_writes(run: Run) -> list[MemoryWrite]:
    writes = list(run.records("memory_writes.jsonl"))
    starts = {t.turn: t.first_step for t in run.records("turns.jsonl")}
    held = holds_from(writes, starts)
    return [w if held[w.seq] == w.step else replace(w, step=held[w.seq]) for w in writes]


def file_as_of(run: Run, path: str, step: int | None = None) -> str | None:
    """``path`` as it stood at env step ``step`` under the as-of rule (None: not written yet,
    or deleted); ``step`` None: its last version."""
    return rebuild(held_writes(run), path, step)


def blame_as_of(run: Run, path: str, step: int | None = None) -> list[Blame]:
    """Each line of ``path`` as of ``step`` (the as-of rule) with the write that set it; the
    write's ``step`` is the step it holds from."""
    return blame(held_writes(run), path, step)


def kind_of(path: str) -> str:
    """The node kind of the versions of a ``mine/`` file."""
    if path == GUIDE:
        return "knowledge"
    if path.startswith(PROC_DIR + "/"):
        return "procedure"
    return "plan" if path == WORKING else "file"


def _knowledge_line(line: str) -> tuple[str, str, tuple[str, ...]] | None:
    s = line.strip()
    if not s or s.startswith("#"):
        return None
    m = FACT_LINE.match(s)
    if m is None:
        return s, s, ()
    return m["key"], s, tuple(x.strip() for x in m["src"].split(",")) if m["src"] else ()


def line_cites(line: str) -> tuple[str, ...]:
    """The episodes a knowledge line names itself (``(ep_…, inherited:ep_…)`` at its end)."""
    hit = _knowledge_line(line)
    return hit[2] if hit is not None else ()


def knowledge_lines(text: str | None, memo: dict | None = None) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Lines of a knowledge file by key: ``key -> (line, cited episodes)``. A fact line's key
    is its ``[key]``; any other non-heading line is keyed by its own text. ``memo`` caches
    parsed lines across the versions of a file."""
    memo = {} if memo is None else memo
    out: dict[str, tuple[str, tuple[str, ...]]] = {}
    for line in (text or "").splitlines():
        if line not in memo:
            memo[line] = _knowledge_line(line)
        hit = memo[line]
        if hit is not None and hit[0] not in out:
            out[hit[0]] = hit[1:]
    return out


def procedure_info(text: str | None) -> dict:
    """The fields of a procedure version that the graph shows (tolerant of bad JSON)."""
    try:
        obj = json.loads(text or "")
    except ValueError:
        return {}
    return obj if isinstance(obj, dict) else {}


@dataclass
class Node:
    """A node: a version of a memory item, an episode, or an aggregate of either."""

    id: str
    kind: str
    label: str
    step: int
    chain: str = ""
    """The line key, procedure name or file path this is a version of ("" for episodes)."""
    seq: int | None = None
    version: int = 1
    path: str | None = None
    author: str = ""
    reason: str = ""
    disabled: bool = False
    ended: int | None = None
    """Step at which a knowledge line was removed (or the file deleted)."""
    count: int = 1
    lo: int = 0
    hi: int = 0
    members: tuple[str, ...] = ()
    """For aggregates: the ids of the merged nodes of the full graph."""

    @property
    def aggregate(self) -> bool:
        return bool(self.members)


@dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    kind: str
    label: str = ""
    count: int = 1


@dataclass
class Graph:
    """Nodes and edges; ``aggregated`` says in words what was merged to stay under budget."""

    nodes: list[Node]
    edges: list[Edge]
    problems: list[str] = field(default_factory=list)
    aggregated: list[str] = field(default_factory=list)
    total: int = 0
    """Nodes before aggregation (after the step filter)."""

    def __post_init__(self) -> None:
        self._by_id = {n.id: n for n in self.nodes}
        self.total = self.total or len(self.nodes)

    def node(self, node_id: str) -> Node | None:
        return self._by_id.get(node_id)

    def where(self, node_id: str) -> Node | None:
        """The node shown for a full-graph id: itself, or the aggregate holding it."""
        if node_id in self._by_id:
            return self._by_id[node_id]
        return next((n for n in self.nodes if node_id in n.members), None)

    def nodes_frame(self) -> pd.DataFrame:
        cols = ["id", "kind", "label", "step", "chain", "version", "disabled", "ended", "count", "lo", "hi"]
        return pd.DataFrame([{c: getattr(n, c) for c in cols} for n in self.nodes], columns=cols)

    def edges_frame(self) -> pd.DataFrame:
        return pd.DataFrame([vars(e) for e in self.edges], columns=["src", "dst", "kind", "label", "count"])


def _episode_node(ep: str, index: dict, step: int, from_run: str | None = None) -> Node:
    """The node of an episode a write cites, at its own steps; an inherited one (``from_run``)
    at ``step``, the citing write's, its steps in the label."""
    r = index.get(ep)
    shown = f"{ep} (from run {from_run or 'unknown'})" if is_inherited(ep) else ep
    if r is None:
        return Node(ep, "episode", f"{shown} (not in {'its' if is_inherited(ep) else 'the'} index)", step, lo=step,
                    hi=step)
    if is_inherited(ep):
        return Node(ep, "episode", f"{shown}, steps {r.first_step}–{r.last_step} of that run: {r.summary}", step,
                    lo=step, hi=step)
    return Node(ep, "episode", f"{ep}: {r.summary}", int(r.last_step), lo=int(r.first_step), hi=int(r.last_step))


def episode_index(run: Run) -> tuple[dict[str, IndexRow], str | None]:
    """The index rows of every episode the run can cite, by the id it cites them with (the
    inherited run's under ``inherited:`` ids), and the inherited run's name (None: none)."""
    index = {r.id: r for r in run.records("index.jsonl")}
    copy = copy_of(run)
    if copy is None:
        return index, None
    index.update({qualify(r.id): r for r in copy.records("index.jsonl")})
    return index, origin(run)


def build_graph(run: Run) -> Graph:
    """The full provenance graph of a run's agent-written memory (no filter, no aggregation)."""
    index, from_run = episode_index(run)
    nodes: dict[str, Node] = {}
    edges: list[Edge] = []
    last: dict[tuple[str, str], Node] = {}
    problems: list[str] = []

    def add(w: MemoryWrite, kind: str, chain: str, label: str, cites: Iterable[str], **kw) -> Node:
        prev = last.get((kind, chain))
        n = (prev.version + 1) if prev else 1
        node = Node(f"{PREFIX[kind]}:{chain}#{n}", kind, label, w.step, chain, w.seq, n, w.path, w.author, w.reason,
                    lo=w.step, hi=w.step, **kw)
        nodes[node.id] = node
        last[(kind, chain)] = node
        if prev is not None:
            edges.append(Edge(node.id, prev.id, "revises"))
        rel = "disabled_because" if kw.get("disabled") and w.op == "disable" else "cites"
        for ep in dict.fromkeys(cites):
            nodes.setdefault(ep, _episode_node(ep, index, w.step, from_run))
            edges.append(Edge(node.id, ep, rel, w.reason if rel == "disabled_because" else ""))
        return node

    memo: dict = {}
    lines: dict[str, set[str]] = {}
    for w, old, new, error, hash_ok in replay(run.records("memory_writes.jsonl")):
        if error is not None:
            problems.append(f"memory_writes.jsonl: write {w.seq} ({w.path}) cannot be applied: {error}")
        if not hash_ok:
            problems.append(f"memory_writes.jsonl: write {w.seq} ({w.path}) does not rebuild to its recorded hash")
        kind = kind_of(w.path)
        if kind == "knowledge":
            before = lines[w.path] if w.path in lines else set((old or "").splitlines())
            after = lines[w.path] = set((new or "").splitlines())
            added = knowledge_lines("\n".join(sorted(after - before)), memo)
            for key, (line, src) in added.items():
                add(w, kind, key, line, src or w.sources)
            for key in knowledge_lines("\n".join(before - after), memo).keys() - added.keys():
                if (kind, key) in last:
                    last[(kind, key)].ended = w.step
        elif kind == "procedure":
            name = w.path[len(PROC_DIR) + 1:].removesuffix(".json")
            info = procedure_info(new)
            off = bool(info.get("disabled"))
            label = f"{name} v{info.get('version', '?')}" + (" (deleted)" if new is None else "") + \
                (f" (disabled: {info.get('disabled_reason') or 'no reason given'})" if off else "")
            cites = tuple(info.get("disabled_sources") or w.sources) if off and w.op == "disable" else w.sources
            add(w, kind, name, label, cites, disabled=off, ended=w.step if new is None else None)
        else:
            label = f"{w.path.removeprefix('mine/')} · {w.op} · {w.reason}"[:120]
            add(w, kind, w.path, label, w.sources, ended=w.step if new is None else None)
    _used_in(run, nodes, edges, index, from_run)
    return Graph(list(nodes.values()), edges, problems)


def _used_in(run: Run, nodes: dict[str, Node], edges: list[Edge], index: dict, from_run: str | None) -> None:
    """``used_in`` edges: each turn call running a procedure, from the procedure version
    current at the turn's first step to the episode it ran in."""
    chains: dict[str, list[Node]] = {}
    for n in nodes.values():
        if n.kind == "procedure":
            chains.setdefault(n.chain, []).append(n)
    for t in run.records("turns.jsonl"):
        for c in t.calls:
            if c.get("tool") != "procedure":
                continue
            name = str((c.get("args") or {}).get("name") or "")
            ep = (c.get("result") or {}).get("episode")
            current = [n for n in chains.get(name, []) if n.step <= t.first_step]
            if not current or not isinstance(ep, str):
                continue
            nodes.setdefault(ep, _episode_node(ep, index, t.last_step, from_run))
            edges.append(Edge(current[-1].id, ep, "used_in", f"turn {t.turn}"))


def filter_steps(g: Graph, lo: int | None, hi: int | None) -> Graph:
    """Memory versions written within ``[lo, hi]`` and the episodes they link to."""
    lo = -math.inf if lo is None else lo
    hi = math.inf if hi is None else hi
    keep = {n.id for n in g.nodes if n.kind != "episode" and lo <= n.step <= hi}
    edges = [e for e in g.edges if e.src in keep and (e.dst in keep or e.kind != "revises")]
    keep |= {e.dst for e in edges}
    return Graph([n for n in g.nodes if n.id in keep], edges, list(g.problems))


def _merge(g: Graph, group: dict[str, str], make: dict[str, Node], note: str) -> Graph:
    """Replace nodes by the aggregate named in ``group`` (node id -> aggregate id), labelled
    with how many nodes of the full graph it holds; a node alone in its group stays itself.
    Edges are redirected, merged with counts, and edges inside one aggregate dropped."""
    members: dict[str, list[Node]] = {}
    for n in g.nodes:
        if n.id in group:
            members.setdefault(group[n.id], []).append(n)
    alone = {ms[0].id for ms in members.values() if len(ms) == 1}
    group = {k: v for k, v in group.items() if k not in alone}
    members = {k: v for k, v in members.items() if len(v) > 1}
    new_nodes = [n for n in g.nodes if n.id not in group]
    for gid, ms in members.items():
        base = make[gid]
        flat = tuple(m for n in ms for m in (n.members or (n.id,)))
        count = sum(n.count for n in ms)
        new_nodes.append(replace(base, label=f"{count} {base.label}", count=count, lo=min(n.lo for n in ms),
                                 hi=max(n.hi for n in ms), members=flat,
                                 disabled=any(n.disabled for n in ms)))
    merged: dict[tuple[str, str, str], Edge] = {}
    for e in g.edges:
        s, d = group.get(e.src, e.src), group.get(e.dst, e.dst)
        if s == d:
            continue
        k = (s, d, e.kind)
        old = merged.get(k)
        merged[k] = Edge(s, d, e.kind, e.label if old is None else "", e.count + (old.count if old else 0))
    return Graph(new_nodes, list(merged.values()), g.problems, [*g.aggregated, note], g.total)


def _bin_edges(steps: list[int], bins: int) -> np.ndarray:
    lo, hi = min(steps), max(steps)
    return np.unique(np.linspace(lo, hi + 1, max(2, bins + 1)).astype(int))


def _binned(g: Graph, kinds: set[str], bins: int) -> tuple[dict[str, str], dict[str, Node]]:
    pick = [n for n in g.nodes if n.kind in kinds]
    edges_ = _bin_edges([n.step for n in pick], bins)
    group, make = {}, {}
    for n in pick:
        i = int(np.clip(np.searchsorted(edges_, n.step, side="right") - 1, 0, len(edges_) - 2))
        a, b = int(edges_[i]), int(edges_[i + 1]) - 1
        gid = f"bin:{n.kind}:{a}-{b}"
        group[n.id] = gid
        if gid not in make:
            what = "episodes" if n.kind == "episode" else f"{n.kind} versions"
            make[gid] = Node(gid, n.kind, f"{what}, steps {a}–{b}", (a + b) // 2, lo=a, hi=b)
    return group, make


def aggregate(g: Graph, budget: int = NODE_BUDGET) -> Graph:
    """Merge nodes until at most ``budget`` remain: episodes into step bins, then the versions
    of each line / procedure / file into one node, then those into step bins per kind."""
    if len(g.nodes) <= budget:
        return g
    items = sum(n.kind != "episode" for n in g.nodes)
    bins = max(1, min(EPISODE_BINS, budget - items if items < budget else budget // 10))
    group, make = _binned(g, {"episode"}, bins)
    g = _reduce(g, group, make, f"{len(group)} episodes merged into {len(make)} step bins")
    if len(g.nodes) <= budget:
        return g
    versions = Counter((n.kind, n.chain) for n in g.nodes if n.kind != "episode")
    group, make = {}, {}
    for n in g.nodes:
        if n.kind != "episode" and versions[(n.kind, n.chain)] > 1:
            gid = f"chain:{n.kind}:{n.chain}"
            group[n.id] = gid
            make.setdefault(gid, Node(gid, n.kind, f"versions of {n.chain}", n.step, n.chain, path=n.path))
    g = _reduce(g, group, make, f"{len(group)} versions merged into one node per line, procedure or file "
                                f"({len(make)} nodes)")
    if len(g.nodes) <= budget:
        return g
    sizes = pd.Series([n.kind for n in g.nodes if n.kind != "episode"]).value_counts(ascending=True)
    room = budget - sum(n.kind == "episode" for n in g.nodes)
    group, make = {}, {}
    for i, (k, size) in enumerate(sizes.items()):
        share = max(1, room // (len(sizes) - i))
        if size <= share:
            room -= size
            continue
        gk, mk = _binned(g, {k}, share)
        group.update(gk)
        make.update(mk)
        room -= len(mk)
    return _reduce(g, group, make, f"{len(group)} lines, procedures and files merged into {len(make)} step bins")


def _reduce(g: Graph, group: dict[str, str], make: dict[str, Node], note: str) -> Graph:
    """:func:`_merge`, unless it would merge nothing (every aggregate holding one node)."""
    return _merge(g, group, make, note) if len(make) < len(group) else g


def view(g: Graph, lo: int | None = None, hi: int | None = None, budget: int = NODE_BUDGET,
         max_edges: int = MAX_EDGES) -> Graph:
    """The graph the page draws: filtered to a step range, aggregated under the node budget,
    and at most ``max_edges`` edges (revisions and disabling first, then the heaviest)."""
    out = aggregate(filter_steps(g, lo, hi), budget)
    if len(out.edges) > max_edges:
        rank = sorted(out.edges, key=lambda e: (e.kind in ("cites", "used_in"), -e.count))
        out.aggregated.append(f"only {max_edges} of {len(out.edges)} edges drawn (revisions and disabling "
                              "first, then the links merging the most edges)")
        out.edges = rank[:max_edges]
    return out


@dataclass
class NodeDetail:
    """What the page shows for a picked node."""

    node: Node
    text: str | None = None
    """The file as it stood right after this version's write."""
    diff: str = ""
    """Unified diff from the file's previous version."""
    write: MemoryWrite | None = None
    episodes: pd.DataFrame = field(default_factory=pd.DataFrame)
    """Linked episodes: ``relation, id, from_run, first_step, last_step, summary, frames,
    image`` (``from_run``: the run an inherited episode came from, whose steps these are)."""
    revisions: list[str] = field(default_factory=list)
    """Ids of every version of the same chain, in order."""
    cited_by: list[str] = field(default_factory=list)
    """For an episode: the versions linking to it."""


def file_at(run: Run, path: str, seq: int) -> tuple[str | None, str | None, MemoryWrite | None]:
    """``path`` just before and just after write ``seq``, and that write."""
    for w, old, new, *_ in replay(run.records("memory_writes.jsonl")):
        if w.seq == seq and w.path == path:
            return old, new, w
    return None, None, None


def _episodes(run: Run, ids: list[tuple[str, str]]) -> pd.DataFrame:
    cols = ["relation", "id", "from_run", "first_step", "last_step", "summary", "frames", "image"]
    rows = []
    for rel, ep in ids:
        where = locate(run, ep)
        r = where.row
        rows.append({"relation": rel, "id": ep, "from_run": where.origin or "",
                     "first_step": r.first_step if r else None, "last_step": r.last_step if r else None,
                     "summary": r.summary if r else "(not in the index)",
                     "frames": r.frames if r else 0, "image": r.image if r else None})
    return pd.DataFrame(rows, columns=cols)


def node_detail(run: Run, g: Graph, node_id: str) -> NodeDetail | None:
    """Detail of a node of the full graph ``g`` (None if there is no such node)."""
    node = g.node(node_id)
    if node is None:
        return None
    out = NodeDetail(node)
    linked = [(e.kind, e.dst) for e in g.edges if e.src == node_id and e.kind != "revises"]
    out.episodes = _episodes(run, linked)
    if node.kind == "episode":
        out.cited_by = list(dict.fromkeys(e.src for e in g.edges if e.dst == node_id))
        out.episodes = _episodes(run, [("episode", node_id)])
        return out
    out.revisions = [n.id for n in g.nodes if n.kind == node.kind and n.chain == node.chain]
    if node.seq is not None and node.path:
        old, new, out.write = file_at(run, node.path, node.seq)
        out.text = new
        out.diff = "".join(difflib.unified_diff((old or "").splitlines(keepends=True),
                                                (new or "").splitlines(keepends=True),
                                                fromfile=f"{node.path} before write {node.seq}",
                                                tofile=f"{node.path} after write {node.seq} (step {node.step})"))
    return out


# -- contradictions ------------------------------------------------------------------------------

CONTRA_COLUMNS = ["line", "contradicted_at", "contradiction", "now", "contradicted_by", "contradicting_sources"]


def _reached(run: Run, x: int, y: int, lo: int, hi: int) -> bool:
    st = run.steps()
    if not len(st):
        return False
    s = st[(st["step"] > lo) & (st["step"] <= hi) & st["x"].notna()]
    return bool(((s["x"] - x).abs().le(REACHED) & (s["y"] - y).abs().le(REACHED)).any())


def removal_steps(run: Run, path: str, as_of_step: int | None, lines: list[Blame]) -> list[int | None]:
    """For each line of ``path`` as of a step (``lines``, from :func:`blame_as_of`), the
    step of the first later write that removed or rewrote it (None: it is still there). One
    replay of the later writes, matching lines the way :func:`mfm.memory.agent_memory.blame` does."""
    removed: list[int | None] = [None] * len(lines)
    if as_of_step is None:
        return removed
    origin: list[int | None] = list(range(len(lines)))
    for w, old, new, *_ in replay(held_writes(run)):
        if w.path != path or w.step <= as_of_step:
            continue
        a, b = (old or "").splitlines(keepends=True), (new or "").splitlines(keepends=True)
        nxt: list[int | None] = []
        for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
            if tag == "equal":
                nxt.extend(origin[i1:i2])
                continue
            for o in origin[i1:i2]:
                if o is not None and removed[o] is None:
                    removed[o] = w.step
            nxt.extend([None] * (j2 - j1))
        origin = nxt
        if not any(o is not None for o in origin):
            break
    return removed


def _fact_contradictions(lines: list[str], later: list[tuple[MemoryWrite, str | None]]
                         ) -> list[tuple[MemoryWrite, str, str] | None]:
    """The first later write giving each fact line's key another text, or dropping the key.
    Only the lines each write added or removed are parsed."""
    found: list[tuple[MemoryWrite, str, str] | None] = [None] * len(lines)
    want: dict[str, list[int]] = {}
    said: dict[str, str] = {}
    for i, line in enumerate(lines):
        m = FACT_LINE.match(line.strip())
        if m:
            want.setdefault(m["key"], []).append(i)
            said[m["key"]] = m["text"]
    memo: dict[str, tuple[str, str] | None] = {}

    def fact(line: str) -> tuple[str, str] | None:
        if line not in memo:
            m = FACT_LINE.match(line.strip())
            memo[line] = (m["key"], m["text"]) if m and m["key"] in want else None
        return memo[line]

    open_keys, prev = set(want), set(lines)
    for w, new in later:
        if not open_keys:
            break
        cur = set((new or "").splitlines())
        added = dict(f for f in map(fact, cur - prev) if f)
        gone = {f[0] for f in map(fact, prev - cur) if f} - added.keys()
        for key in open_keys & (added.keys() | gone):
            if key in added and added[key] == said[key]:
                continue
            hit = (w, "revised", added[key]) if key in added else (w, "retracted", "")
            for i in want[key]:
                found[i] = hit
            open_keys.discard(key)
        prev = cur
    return found


def contradictions(run: Run, path: str, as_of_step: int | None, blamed: list[Blame] | None = None
                   ) -> pd.DataFrame:
    """For each line of ``path`` as of a step (the lines of :func:`blame_as_of`), the first
    later write that contradicts it, beyond merely removing it:

    - a knowledge fact whose key later carries a different text (``revised``) or is retracted;
    - a procedure later disabled (every line of it: ``disabled``) or deleted;
    - a plan target that later leaves the plan without the agent having reached it
      (``abandoned``; a target dropped once reached is not contradicted).

    Columns: ``line, contradicted_at, contradiction, now, contradicted_by, contradicting_sources``.
    ``blamed``: the lines, if the caller has them already.
    """
    blamed = blame_as_of(run, path, as_of_step) if blamed is None else blamed
    lines = [b.text.rstrip("\n") for b in blamed]
    later = [(w, new) for w, _, new, *_ in replay(held_writes(run))
             if w.path == path and as_of_step is not None and w.step > as_of_step]
    found: list[tuple[MemoryWrite, str, str] | None] = [None] * len(lines)
    kind = kind_of(path)
    if kind == "knowledge":
        found = _fact_contradictions(lines, later)
    elif kind == "procedure":
        for w, new in later:
            info = procedure_info(new)
            if new is None or info.get("disabled"):
                what = "deleted" if new is None else "disabled"
                now = "" if new is None else str(info.get("disabled_reason") or "")
                found = [(w, what, now)] * len(lines)
                break
    elif kind == "plan":
        plans = [(w, {(t.x, t.y) for t in parse_plan_targets(new or "")}) for w, new in later]
        for i, line in enumerate(lines):
            m = PLAN_LINE.match(line.strip())
            if not m:
                continue
            x, y = int(m[1]), int(m[2])
            for w, targets in plans:
                if (x, y) in targets:
                    continue
                if not _reached(run, x, y, int(as_of_step), w.step):
                    found[i] = (w, "abandoned", "")
                break
    rows = []
    for i, hit in enumerate(found):
        w, what, now = hit if hit else (None, None, None)
        rows.append({"line": i + 1, "contradicted_at": w.step if w else None, "contradiction": what, "now": now,
                     "contradicted_by": f"{w.author}: {w.reason} (write {w.seq})" if w else None,
                     "contradicting_sources": ", ".join(w.sources) if w else None})
    df = pd.DataFrame(rows, columns=CONTRA_COLUMNS)
    df["contradicted_at"] = df["contradicted_at"].astype("Int64")
    return df


def summary(g: Graph, bins: int = 40) -> pd.DataFrame:
    """Memory versions written per step bin and kind, with the episodes they cite:
    ``kind, lo, hi, versions, citations, disabled`` (the provenance summary figure)."""
    cols = ["kind", "lo", "hi", "versions", "citations", "disabled"]
    items = [n for n in g.nodes if n.kind != "episode"]
    if not items:
        return pd.DataFrame(columns=cols)
    edges_ = _bin_edges([n.step for n in items], bins)
    cites = {}
    for e in g.edges:
        if e.kind in ("cites", "disabled_because"):
            cites[e.src] = cites.get(e.src, 0) + e.count
    rows: dict[tuple[str, int], dict] = {}
    for n in items:
        i = int(np.clip(np.searchsorted(edges_, n.step, side="right") - 1, 0, len(edges_) - 2))
        r = rows.setdefault((n.kind, i), {"kind": n.kind, "lo": int(edges_[i]), "hi": int(edges_[i + 1]) - 1,
                                          "versions": 0, "citations": 0, "disabled": 0})
        r["versions"] += n.count
        r["citations"] += cites.get(n.id, 0)
        r["disabled"] += int(n.disabled and n.kind == "procedure")
    return pd.DataFrame(sorted(rows.values(), key=lambda r: (r["lo"], NODE_KINDS.index(r["kind"]))), columns=cols)


def step_span(graph: Graph, last_step: int) -> tuple[int, int]:
    """The steps a view of ``graph`` (with nodes) spans: from its earliest node's step to its
    latest node's or the run's ``last_step``, whichever is later."""
    steps = [n.step for n in graph.nodes]
    return min(steps), max(max(steps), last_step)


def in_order(nodes: Iterable[Node]) -> list[Node]:
    """Nodes in the order a picker lists them: by step, then kind."""
    return sorted(nodes, key=lambda n: (n.step, n.kind))


def memory_span(written: Sequence[int], unknown: tuple[int, int] | None, last_step: int) -> tuple[int, int]:
    """The steps a file's history can be looked at: from its first version (``written``, the
    steps its versions hold from, sorted), or from where its unknown span (``unknown``) begins
    if that is earlier, to the later of its last version and the run's ``last_step``."""
    first = min(written[0], unknown[0]) if unknown else written[0]
    return first, max(last_step, written[-1])


def first_sources(cites: Sequence[str], sources: Sequence[str]) -> list[str | None]:
    """Per line of a memory provenance table (its ``cites`` and ``sources`` columns, episode
    ids joined by ``", "``): the first episode the line cites, else the first its write names
    (None: neither names one)."""
    return [(c or s).split(", ")[0] if c or s else None for c, s in zip(cites, sources)]


def all_sources(cites: Sequence[str], sources: Sequence[str]) -> list[str]:
    """Every episode the lines of a memory provenance table cite or their writes name, each
    once, cited ones first."""
    return list(dict.fromkeys(e for v in [*cites, *sources] for e in v.split(", ") if e))

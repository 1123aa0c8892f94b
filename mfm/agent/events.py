"""The event lines of a run (issue 21): the one place that writes and reads them.

The runner and the atoms write these texts into an episode's ``events`` (and so into the
``[EVENT]`` lines of ``logs.txt``), the runner writes the ``[STATE]`` line of each log
section, the policies write the death fact of GUIDE.md; the policy reads them back from the
index and the text log. A writer per kind returns the text, :func:`parse` reads one whole
line back into an :class:`Event`, :func:`find` every event inside a longer text (an
``[ACTION]`` summary, an ``[EVENT]`` line), and :data:`SITE_GREP` is the pattern the policy
greps the log with.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

Cell = tuple[int, int]

COLLECTED, PLACED, DRANK, ATE, MADE, SHELTER, WOKE_UP, LAVA, UNLOCKED, DIED, DIED_OF, STATE = (
    "collected", "placed", "drank", "ate", "made", "shelter", "woke_up", "lava", "unlocked", "died", "died_of",
    "state")
SUMMARY_KINDS = frozenset({COLLECTED, PLACED, UNLOCKED, DRANK, DIED})
"""The kinds an episode's summary repeats (the gains and the death)."""
SITE_GREP = r"collected \w+ at|drank at"
"""The grep of the text log for the places a thing was got (collected X, drank)."""
SITE_WORDS = ("collected", "drank")
"""The words of the same lines for a text search of the index."""


@dataclass(frozen=True)
class Event:
    """One event line read back: its ``kind``, the ``item`` it names (the thing collected,
    placed, eaten or made, the achievement, the cause of death; else None) and the ``cell``
    it happened at (None for ate, made, woke up and unlocked)."""
    kind: str
    item: str | None = None
    cell: Cell | None = None


def _at(cell: Cell) -> str:
    return f"({cell[0]}, {cell[1]})"


SEEN_HEAD = "[SEEN] "
"""The start of a log line naming cells the view showed for the first time (:func:`seen`)."""
SEEN_GREP = r"^\[SEEN\] "
"""The grep of the text log for those lines."""


def seen(material: str, cells: list[Cell]) -> str:
    """``[SEEN] diamond at (30, 31) (31, 31)``: a log line of cells of ``material`` the view
    showed for the first time in the run (what the text perception saw, for grep)."""
    return f"{SEEN_HEAD}{material} at " + " ".join(_at(c) for c in cells)


_SEEN_LINE = re.compile(r"^\[SEEN\] (?P<item>\w+) at (?P<cells>(?:\(-?\d+, -?\d+\) ?)+)$")
_SEEN_CELL = re.compile(r"\((-?\d+), (-?\d+)\)")


def parse_seen(text: str) -> tuple[str, list[Cell]] | None:
    """The material and cells of a :func:`seen` line; None for any other text."""
    m = _SEEN_LINE.match(text)
    if m is None:
        return None
    return m["item"], [(int(x), int(y)) for x, y in _SEEN_CELL.findall(m["cells"])]


def collected(item: str, cell: Cell) -> str:
    """``collected wood at (29, 34)``."""
    return f"collected {item} at {_at(cell)}"


def placed(item: str, cell: Cell) -> str:
    """``placed table at (30, 33)``."""
    return f"placed {item} at {_at(cell)}"


def drank(cell: Cell) -> str:
    """``drank at (12, 40)``."""
    return f"drank at {_at(cell)}"


def ate(animal: str) -> str:
    """``ate cow``."""
    return f"ate {animal}"


def made(item: str) -> str:
    """``made wood_pickaxe``."""
    return f"made {item}"


def shelter(cell: Cell) -> str:
    """``shelter at (40, 12)``: sealed in a pocket of rock."""
    return f"shelter at {_at(cell)}"


def woke_up() -> str:
    """``woke up``."""
    return "woke up"


def lava(cell: Cell) -> str:
    """``lava next to me at (50, 7)``."""
    return f"lava next to me at {_at(cell)}"


def unlocked(name: str) -> str:
    """``unlocked collect_wood``."""
    return f"unlocked {name}"


def died(cause: str | None, cell: Cell) -> str:
    """``died (zombie) at (31, 30)``: the event of a death."""
    return f"died ({cause}) at {_at(cell)}"


def died_of(cause: str, cell: Cell) -> str:
    """``died of zombie at (31, 30)``: GUIDE.md's fact about a death."""
    return f"died of {cause} at {_at(cell)}"


def state(cell: Cell, life: int, vitals: Mapping[str, int]) -> str:
    """The log's ``[STATE]`` line: where the player stands and how it is."""
    vit = " ".join(f"{k} {v}" for k, v in vitals.items())
    return f"[STATE] at {_at(cell)} life {life}, {vit}"


_CELL = r"\((?P<x>-?\d+), (?P<y>-?\d+)\)"
_LINES = {
    COLLECTED: re.compile(rf"\bcollected (?P<item>\w+) at {_CELL}"),
    PLACED: re.compile(rf"\bplaced (?P<item>\w+) at {_CELL}"),
    DRANK: re.compile(rf"\bdrank at {_CELL}"),
    ATE: re.compile(r"\bate (?P<item>\w+)\b"),
    MADE: re.compile(r"\bmade (?P<item>\w+)\b"),
    SHELTER: re.compile(rf"\bshelter at {_CELL}"),
    WOKE_UP: re.compile(r"\bwoke up\b"),
    LAVA: re.compile(rf"\blava next to me at {_CELL}"),
    UNLOCKED: re.compile(r"\bunlocked (?P<item>\w+)\b"),
    DIED: re.compile(rf"\bdied \((?P<item>[^)]*)\) at {_CELL}"),
    DIED_OF: re.compile(rf"\bdied of (?P<item>\w+) at {_CELL}"),
    STATE: re.compile(rf"^\[STATE\] at {_CELL} life \d+, .*"),
}


def _event(kind: str, m: re.Match[str]) -> Event:
    g = m.groupdict()
    cell = (int(g["x"]), int(g["y"])) if "x" in g else None
    return Event(kind, g.get("item"), cell)


def parse(text: str) -> Event | None:
    """The event ``text`` is, exactly as a writer wrote it; None for any other text."""
    for kind, rx in _LINES.items():
        m = rx.fullmatch(text)
        if m:
            return _event(kind, m)
    return None


def find(text: str) -> list[Event]:
    """Every event written inside ``text`` (a summary, a log line), in the order they appear."""
    hits = [(m.start(), _event(kind, m)) for kind, rx in _LINES.items() for m in rx.finditer(text)]
    return [e for _, e in sorted(hits, key=lambda h: h[0])]

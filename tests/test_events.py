"""The event lines (issue 21): every writer's text reads back to what it wrote, other text
reads to nothing, and the shipped sample run's events and log lines all read back."""
from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from conftest import REPO
from mfm.agent import events
from mfm.agent.events import Event

SAMPLE = REPO / "sample_runs" / "diamond_mfm_s2"
CELLS = [(0, 0), (29, 34), (-3, 7), (5, -12), (-40, -1)]
WITH_CELL = [
    (lambda c: events.collected("wood", c), Event(events.COLLECTED, "wood")),
    (lambda c: events.placed("table", c), Event(events.PLACED, "table")),
    (events.drank, Event(events.DRANK)),
    (events.shelter, Event(events.SHELTER)),
    (events.lava, Event(events.LAVA)),
    (lambda c: events.died("zombie", c), Event(events.DIED, "zombie")),
    (lambda c: events.died(None, c), Event(events.DIED, "None")),
    (lambda c: events.died_of("arrow", c), Event(events.DIED_OF, "arrow")),
    (lambda c: events.state(c, 2, {"health": 9, "food": 3, "drink": 0, "energy": 7}), Event(events.STATE)),
]
WITHOUT_CELL = [
    (events.unlocked("collect_wood"), Event(events.UNLOCKED, "collect_wood")),
    (events.made("wood_pickaxe"), Event(events.MADE, "wood_pickaxe")),
    (events.ate("cow"), Event(events.ATE, "cow")),
    (events.woke_up(), Event(events.WOKE_UP)),
]
PREFIXES = {"collected ": events.COLLECTED, "placed ": events.PLACED, "drank at ": events.DRANK,
            "ate ": events.ATE, "made ": events.MADE, "shelter at ": events.SHELTER, "woke up": events.WOKE_UP,
            "lava next to me at ": events.LAVA, "unlocked ": events.UNLOCKED, "died (": events.DIED}


def kind_by_prefix(text: str) -> str | None:
    """The kind of an event line by its first words: a check independent of the parser."""
    return next((k for p, k in PREFIXES.items() if text.startswith(p)), None)


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("write, want", WITH_CELL)
def test_a_written_line_with_a_cell_reads_back(write, want, cell):
    text = write(cell)
    assert events.parse(text) == Event(want.kind, want.item, cell)
    assert events.find(text) == [Event(want.kind, want.item, cell)]


@pytest.mark.parametrize("text, want", WITHOUT_CELL)
def test_a_written_line_without_a_cell_reads_back(text, want):
    assert events.parse(text) == want


@pytest.mark.parametrize("text", ["", "hello", "collected wood", "collected wood at (1, 2) and more",
                                  "drank 3", "placed table at 1, 2", "[STATE]", "unlocked", "died (zombie)"])
def test_other_text_reads_to_nothing(text):
    assert events.parse(text) is None


def test_find_reads_every_event_of_a_summary_in_order():
    summary = ("make(item=stone_pickaxe) -> done: made stone_pickaxe; 9 steps, 2 new cells; "
               f"{events.collected('stone', (-4, 2))}; {events.drank((3, -5))}; {events.unlocked('collect_stone')}")
    assert events.find(summary) == [Event(events.MADE, "stone_pickaxe"), Event(events.COLLECTED, "stone", (-4, 2)),
                                    Event(events.DRANK, None, (3, -5)), Event(events.UNLOCKED, "collect_stone")]


def test_the_site_grep_finds_the_site_lines():
    rx = re.compile(events.SITE_GREP)
    assert rx.search(events.collected("iron", (1, 2))) and rx.search(events.drank((1, 2)))
    assert not rx.search(events.placed("table", (1, 2)))


def test_the_sample_index_events_all_parse():
    lines = [e for row in SAMPLE.joinpath("index.jsonl").read_text(encoding="utf-8").splitlines()
             for e in json.loads(row)["events"]]
    expected = Counter(kind_by_prefix(e) for e in lines)
    parsed = [events.parse(e) for e in lines]
    assert None not in parsed
    assert Counter(e.kind for e in parsed if e is not None) == expected
    assert expected[events.COLLECTED] > 0 and None not in expected


def test_the_sample_log_lines_all_parse():
    lines = SAMPLE.joinpath("logs.txt").read_text(encoding="utf-8").splitlines()
    texts = [ln[len("[EVENT] "):] for ln in lines if ln.startswith("[EVENT] ")]
    expected = Counter(kind_by_prefix(t) for t in texts)
    expected[events.STATE] = sum(ln.startswith("[STATE] at (") for ln in lines)
    parsed = [events.parse(t) for t in texts] + [events.parse(ln) for ln in lines if ln.startswith("[STATE]")]
    assert None not in parsed
    assert Counter(e.kind for e in parsed if e is not None) == expected
    assert expected[events.STATE] > 0 and None not in expected

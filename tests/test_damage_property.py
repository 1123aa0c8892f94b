"""Property: random damage to a run's files never makes the loaders raise, and no valid line is lost.

Damage is byte-level (truncation, inserted or flipped bytes, garbage, duplicated and deleted
lines) and structural (a value nested up to 50,000 levels deep, numbers of extreme magnitude,
a field's value swapped for one of another type), on small tables and on tables large enough
for the fast C++ readers."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from loaders import open_run
from mfm.schema import TABLES, SchemaError

from conftest import write_run

FILES = sorted(TABLES) + ["run.json"]


@st.composite
def damage(draw):
    """A list of (file, operation, position, payload) mutations."""
    ops = []
    for _ in range(draw(st.integers(1, 4))):
        ops.append((draw(st.sampled_from(FILES)),
                    draw(st.sampled_from(["truncate", "insert", "garbage_line", "duplicate", "delete", "flip"])),
                    draw(st.floats(0, 1)), draw(st.binary(min_size=0, max_size=40))))
    return ops


EXTREMES = ["0", "-1", "1e15", "-1e15", "1e308", "NaN", "Infinity", "-Infinity", str(10 ** 30), "1e400", "0.5"]
OTHER_TYPES = ["null", "true", "[]", "{}", '"x"', "[1, 2]", '{"a": 1}', "[[1], [2, [3]]]", "-7", '""']


@st.composite
def structural(draw, files: list[str]):
    """Mutations of one field of one line: (file, kind, line position, field position, value)."""
    ops = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["nest", "nest", "magnitude", "retype"]))
        if kind == "nest":
            depth = draw(st.sampled_from([1, 64, 65, 999, 50_000, 50_000, 50_000, 50_000]))
            value = draw(st.sampled_from(["[", '{"a":'])) * depth
        else:
            value = draw(st.sampled_from(EXTREMES if kind == "magnitude" else OTHER_TYPES))
        ops.append((draw(st.sampled_from(files)), kind, draw(st.floats(0, 1)), draw(st.floats(0, 1)), value))
    return ops


def _mutate_field(path: Path, kind: str, where: float, which: float, value: str) -> None:
    """Replace one field's value of one line by ``value`` (for ``nest``: wrapped in it, or
    a field no reader knows added holding it)."""
    if not path.exists():
        return
    lines = path.read_bytes().splitlines(keepends=True)
    if not lines:
        return
    i = int(where * (len(lines) - 1))
    try:
        obj = json.loads(lines[i])
    except (ValueError, RecursionError):
        return
    if not isinstance(obj, dict) or not obj:
        return
    key = sorted(obj)[int(which * (len(obj) - 1))]
    if kind == "nest" and which < 0.5:
        key = "unknown_field"
        obj[key] = 1
    if kind == "nest":
        closing = "".join("]" if c == "[" else "}" for c in value if c in "[{")
        text = value + json.dumps(obj[key]) + closing[::-1]
    else:
        text = value
    obj[key] = "\x00PLACEHOLDER\x00"
    lines[i] = json.dumps(obj).replace('"\\u0000PLACEHOLDER\\u0000"', text).encode() + b"\n"
    path.write_bytes(b"".join(lines))


def _apply(path: Path, op: str, where: float, payload: bytes) -> None:
    if not path.exists():
        return
    data = path.read_bytes()
    lines = data.splitlines(keepends=True)
    i = int(where * max(len(lines) - 1, 0))
    k = int(where * len(data))
    if op == "truncate":
        data = data[:k]
    elif op == "insert":
        data = data[:k] + payload + data[k:]
    elif op == "flip" and data:
        data = data[:k] + bytes([data[min(k, len(data) - 1)] ^ 0x55]) + data[k + 1:]
    elif op == "garbage_line" and lines:
        lines[i] = payload.replace(b"\n", b" ") + b"\n"
        data = b"".join(lines)
    elif op == "duplicate" and lines:
        lines.insert(i, lines[i])
        data = b"".join(lines)
    elif op == "delete" and lines:
        del lines[i]
        data = b"".join(lines)
    path.write_bytes(data)


def _valid_lines(path: Path, rtype) -> dict[int, object]:
    """Line number -> record for every complete line that is, on its own, a valid record."""
    out = {}
    if not path.exists():
        return out
    for n, raw in enumerate(path.read_bytes().split(b"\n"), 1):
        try:
            out[n] = rtype.from_dict(json.loads(raw.decode("utf-8")))
        except (ValueError, SchemaError, TypeError, UnicodeDecodeError, OverflowError, RecursionError):
            pass
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=damage())
def test_random_damage_never_raises_and_loses_no_valid_row(tmp_path_factory, ops):
    base = tmp_path_factory.getbasetemp() / "pristine"
    if not base.exists():
        write_run(base, episodes=8)
    run_dir = tmp_path_factory.mktemp("damaged")
    shutil.rmtree(run_dir)
    shutil.copytree(base, run_dir)
    for file, op, where, payload in ops:
        _apply(run_dir / file, op, where, payload)
    _check_loaded(run_dir)


def _check_loaded(run_dir: Path) -> None:
    """Open the run and check that nothing raises and no valid line is lost."""
    run = open_run(run_dir)
    for p in run.problems:
        assert p.file and p.message
    reported = {(p.file, p.line) for p in run.problems}
    for name, rtype in TABLES.items():
        loaded = run.records(name)
        for n, rec in _valid_lines(run_dir / name, rtype).items():
            assert rec in loaded or (name, n) in reported, f"{name}:{n} is valid but neither loaded nor reported"
    run.episodes(), run.steps(), run.turns(), run.grid(), run.memory_writes()
    run.summary()


DEEP_UNKNOWN_FIELD = [("steps.jsonl", "nest", 0.5, 0.1, "[" * 50_000)]
"""A valid line with a field no reader knows holding 50,000 nested arrays (what crashed the
Arrow reader: it infers a type for unknown fields, recursively)."""


def _deep_extreme_and_retyped(examples: int):
    """The test below, with ``examples`` random examples (and the deep unknown field)."""

    @settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(small=structural(FILES), big=structural(["steps.jsonl"]))
    @example(small=DEEP_UNKNOWN_FIELD, big=DEEP_UNKNOWN_FIELD)
    def test(tmp_path_factory, small, big):
        """Nesting depth, numbers' magnitude and types, in every file of a small run, and in a
        table large enough (over 256 KiB) for the fast C++ readers, which crashed the process on
        deep lines."""
        for name, ops, size in (("pristine", small, dict(episodes=8)),
                                ("pristine_big", big, dict(episodes=80, steps_per_episode=20))):
            base = tmp_path_factory.getbasetemp() / name
            if not base.exists():
                write_run(base, **size)
            run_dir = tmp_path_factory.mktemp("mutated")
            shutil.rmtree(run_dir)
            shutil.copytree(base, run_dir)
            for file, kind, where, which, value in ops:
                _mutate_field(run_dir / file, kind, where, which, value)
            _check_loaded(run_dir)

    return test


test_deep_extreme_and_retyped_values_never_raise = _deep_extreme_and_retyped(6)
test_deep_extreme_and_retyped_values_never_raise_thoroughly = pytest.mark.slow(_deep_extreme_and_retyped(100))
"""Each example opens a table big enough for the fast readers (~0.7 s): a few in the default
run, many more with the slow tests."""

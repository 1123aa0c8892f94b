"""Property: random damage to a run's files never makes the loaders raise, and no valid line is lost."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from hypothesis import HealthCheck, given, settings
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

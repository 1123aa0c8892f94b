"""Field kinds are declared once, in the record annotations, and say what the reader enforces.

Every field of every record type has a kind (``mfm.schema.field_kinds`` refuses a field
without one), and each field's kind is inferred here from how ``from_dict`` treats a set of
probe values: of the kinds that accept everything the field accepted, the one that accepts
the fewest probes must be the declared one. A value of the wrong kind is refused with a message naming the field, and a
null is kept exactly when the kind ends with ``?`` (elsewhere it counts as absent). The expected kinds per field are
not written down here; only what each kind means (``KIND_ACCEPTS``, the vocabulary).
"""
from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Annotated, Any, Callable

import pytest

from loaders import fastread
from mfm import schema
from mfm.schema import FIELD_KINDS, MAX_COORD, TABLES, Record, RunManifest, SchemaError, field_kinds

RECORD_TYPES: tuple[type[Record], ...] = tuple(
    c for c in vars(schema).values() if isinstance(c, type) and issubclass(c, Record) and c is not Record)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and abs(v) <= MAX_COORD


def _point(v: Any, sizes: tuple[int, ...]) -> bool:
    return isinstance(v, list) and len(v) in sizes and all(_number(c) for c in v)


KIND_ACCEPTS: dict[str, Callable[[Any], bool]] = {
    "int": lambda v: (isinstance(v, int) and not isinstance(v, bool) and v >= 0)
    or (isinstance(v, float) and v.is_integer() and v >= 0),
    "num": _number,
    "str": lambda v: isinstance(v, str),
    "bool": lambda v: isinstance(v, bool),
    "strs": lambda v: isinstance(v, list) and all(isinstance(s, str) for s in v),
    "list": lambda v: isinstance(v, list),
    "dict": lambda v: isinstance(v, dict),
    "cell": lambda v: _point(v, (2, 3)),
    "vec2": lambda v: _point(v, (2,)),
    "counts": lambda v: isinstance(v, dict) and all(isinstance(c, int) and not isinstance(c, bool)
                                                    for c in v.values()),
}
"""What a JSON value of each kind looks like (docs/run-format.md, the type columns)."""

ITEM = {"tool": "search", "kind": "go_to", "x": 0, "y": 0}
"""A list item every list field takes (a turn's call and target alike)."""
VALID: dict[str, Any] = {"int": 0, "num": 0, "str": "x", "bool": True, "strs": [], "list": [ITEM], "dict": {},
                         "cell": [0, 0], "vec2": [0, 1], "counts": {}}
"""One valid value per kind, to fill the fields not under test."""
CHECKED: dict[tuple[type, str], Any] = {(schema.IndexRow, "id"): "ep_000001", (schema.MemoryWrite, "path"): "mine/x",
                                        (schema.SeenRow, "episode"): "ep_000001", (schema.SeenRow, "cells"): [[0, 0]]}
"""Values that the record's cross-field check asks for."""
PROBES: tuple[Any, ...] = (
    0, 3, 3.0, 2.5, -1, -2.5, 1e12, True, False, "s", "ep_000002", [], ["s"], [1, 2], [1, 2, 3], [1.5, -2],
    [1, 2, 3, 4], [True, 1], ["a", 1], [ITEM], [None], {}, {"a": 1}, {"a": "b"}, {"a": True}, {"a": 1.5},
)


def _valid(rtype: type[Record]) -> dict[str, Any]:
    """A valid JSON object for ``rtype``: every field present, none null."""
    out = {}
    for name, kind in rtype.KINDS.items():
        base = kind.rstrip("?")
        choices = rtype.CHOICES.get(name)
        out[name] = choices[0] if choices else CHECKED.get((rtype, name), VALID[base])
    return out


def _refusal(rtype: type[Record], obj: dict[str, Any]) -> str | None:
    """The message ``from_dict`` refuses ``obj`` with, or None if it takes it."""
    try:
        rtype.from_dict(obj)
    except SchemaError as e:
        return str(e)
    return None


def _accepts(kind: str) -> frozenset[int]:
    return frozenset(i for i, v in enumerate(PROBES) if KIND_ACCEPTS[kind](v))


FIELDS = [(rtype, f.name) for rtype in RECORD_TYPES for f in dataclasses.fields(rtype)]


def test_every_record_type_is_covered():
    assert set(TABLES.values()) | {RunManifest} <= set(RECORD_TYPES)
    assert set(KIND_ACCEPTS) == set(FIELD_KINDS)


@pytest.mark.parametrize("rtype", RECORD_TYPES, ids=lambda t: t.__name__)
def test_every_field_has_one_kind_in_field_order(rtype: type[Record]):
    assert list(rtype.KINDS) == [f.name for f in dataclasses.fields(rtype)]
    assert rtype.KINDS == field_kinds(rtype)
    for name, kind in rtype.KINDS.items():
        assert kind.rstrip("?") in FIELD_KINDS and kind.count("?") <= 1, (name, kind)
    assert _refusal(rtype, _valid(rtype)) is None


@pytest.mark.parametrize("rtype", RECORD_TYPES, ids=lambda t: t.__name__)
def test_values_read_have_the_annotated_python_type(rtype: type[Record]):
    rec = rtype.from_dict(_valid(rtype))
    hints = typing.get_type_hints(rtype)
    for f in dataclasses.fields(rtype):
        hint = hints[f.name]
        options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
        classes = tuple(typing.get_origin(o) or o for o in options)
        if float in classes:
            classes += (int,)
        assert isinstance(getattr(rec, f.name), classes), (f.name, hint, getattr(rec, f.name))


@pytest.mark.parametrize("rtype,name", FIELDS, ids=lambda x: x if isinstance(x, str) else x.__name__)
def test_the_declared_kind_is_what_the_reader_enforces(rtype: type[Record], name: str):
    kind = rtype.KINDS[name]
    base = _valid(rtype)
    accepted = set()
    for i, probe in enumerate(PROBES):
        why = _refusal(rtype, {**base, name: probe})
        if why is None:
            accepted.add(i)
        elif not KIND_ACCEPTS[kind.rstrip("?")](probe):
            assert name in why, f"refusing {probe!r} for {rtype.__name__}.{name}, the message does not name it: {why}"
    own = PROBES.index(base[name]) if base[name] in PROBES else None
    assert own is None or own in accepted
    fitting = [k for k in FIELD_KINDS if accepted <= _accepts(k) and KIND_ACCEPTS[k](base[name])]
    fewest = min(len(_accepts(k)) for k in fitting)
    narrowest = [k for k in fitting if len(_accepts(k)) == fewest]
    assert narrowest == [kind.rstrip("?")], (
        f"{rtype.__name__}.{name} is declared {kind!r} but takes {[PROBES[i] for i in sorted(accepted)]}")
    wrong = [PROBES[i] for i in accepted if not KIND_ACCEPTS[kind.rstrip("?")](PROBES[i])]
    assert not wrong, f"{rtype.__name__}.{name} ({kind}) took values of another kind: {wrong}"


@pytest.mark.parametrize("rtype,name", FIELDS, ids=lambda x: x if isinstance(x, str) else x.__name__)
def test_null_is_kept_exactly_when_the_kind_allows_it(rtype: type[Record], name: str):
    """A null stays null in a field whose kind ends with ``?``; elsewhere it counts as absent:
    the field's default if it has one, else refused naming the field."""
    why = _refusal(rtype, {**_valid(rtype), name: None})
    f = next(f for f in dataclasses.fields(rtype) if f.name == name)
    if rtype.KINDS[name].endswith("?"):
        assert why is None, why
        assert getattr(rtype.from_dict({**_valid(rtype), name: None}), name) is None
    elif f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
        assert why is None, why
        value = getattr(rtype.from_dict({**_valid(rtype), name: None}), name)
        assert value is not None and value == (f.default if f.default is not dataclasses.MISSING
                                               else f.default_factory())
    else:
        assert why is not None and name in why, why


def test_a_field_without_a_kind_is_refused_when_the_type_is_defined():
    with pytest.raises(TypeError, match="Bare.count"):
        @dataclasses.dataclass(frozen=True, slots=True)
        class Bare(Record):
            count: int

    with pytest.raises(TypeError, match="Odd.count"):
        @dataclasses.dataclass(frozen=True, slots=True)
        class Odd(Record):
            count: Annotated[int, "integer"]

    with pytest.raises(TypeError, match="Nullish.count"):
        @dataclasses.dataclass(frozen=True, slots=True)
        class Nullish(Record):
            count: Annotated[int | None, "int"]


def test_the_fast_reader_knows_every_kind():
    for kind in FIELD_KINDS:
        for k in (kind, kind + "?"):
            ok, val = fastread._rules("f", k, None)
            assert ok and val

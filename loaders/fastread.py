"""A fast path for large, clean JSONL tables: every line parsed and checked in C++.

The rules are those of ``mfm.schema`` (each field's kind, null allowed or not, allowed
values). Record types whose fields are all scalars, lists of scalars or name-to-integer
maps go through Arrow's JSON reader with an explicit schema (strict: a string where a
number belongs, a float where an integer belongs, a boolean anywhere else is an error) and
vectorised checks; the others through one DuckDB query with the rules compiled to SQL. If
the file parses and every row passes, the table comes back as columns in a fraction of the
time of the line-by-line reader. If anything is off (a broken line, a wrong type, a blank
line, steps out of order), this returns None and the caller reads the file with the tolerant
reader, which reports each problem with its line: the fast path never decides what is wrong,
only that nothing is, and it may refuse clean files the tolerant reader accepts.
"""
from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from mfm.schema import (MAX_COORD, MAX_DEPTH, MAX_EPISODE_FRAMES, MAX_LINE_BYTES, TOOLS, IndexRow, Record, TurnRow,
                        nesting)

MIN_BYTES = 256 * 1024
"""Smaller files are read faster line by line than by starting a DuckDB query."""
INTS = "('UBIGINT', 'BIGINT')"
NUMS = "('UBIGINT', 'BIGINT', 'DOUBLE')"


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _rules(name: str, kind: str, choices: tuple[str, ...] | None) -> tuple[str, str]:
    """(SQL that is true when the value is valid, SQL for the column's value)."""
    c = _quote(name)
    optional = kind.endswith("?")
    base = kind.rstrip("?")
    t = f"json_type({c})"
    if base == "int":
        ok = f"({t} = 'UBIGINT' OR ({t} = 'DOUBLE' AND CAST({c} AS DOUBLE) = floor(CAST({c} AS DOUBLE)) " \
             f"AND CAST({c} AS DOUBLE) >= 0))"
        val = f"CAST(CAST({c} AS DOUBLE) AS BIGINT)"
    elif base == "num":
        ok = f"({t} IN {NUMS} AND abs(CAST({c} AS DOUBLE)) <= {MAX_COORD})"
        val = f"CAST({c} AS DOUBLE)"
    elif base == "str":
        ok = f"{t} = 'VARCHAR'"
        val = f"{c}->>'$'"
    elif base == "bool":
        ok = f"{t} = 'BOOLEAN'"
        val = f"CAST({c} AS BOOLEAN)"
    elif base == "strs":
        ok = f"({t} = 'ARRAY' AND coalesce(list_bool_and(list_transform(json_type({c}, '$[*]'), lambda x: x = 'VARCHAR'))," \
             f" true))"
        val = f"CAST({c} AS VARCHAR[])"
    elif base in ("cell", "vec2"):
        sizes = "(2, 3)" if base == "cell" else "(2)"
        ok = (f"({t} = 'ARRAY' AND json_array_length({c}) IN {sizes} AND "
              f"coalesce(list_bool_and(list_transform(json_type({c}, '$[*]'), lambda x: x IN {NUMS})), true) AND "
              f"coalesce(list_bool_and(list_transform(CAST({c} AS DOUBLE[]), lambda x: abs(x) <= {MAX_COORD})), true))")
        val = f"CAST(CAST({c} AS DOUBLE[]) AS BIGINT[])"
    elif base == "counts":
        ok = f"({t} = 'OBJECT' AND coalesce(list_bool_and(list_transform(json_type({c}, '$.*'), lambda x: x IN {INTS}))," \
             f" true))"
        val = f"CAST({c} AS VARCHAR)"
    elif base == "dict":
        ok = f"{t} = 'OBJECT'"
        val = f"CAST({c} AS VARCHAR)"
    elif base == "list":
        ok = f"{t} = 'ARRAY'"
        val = f"CAST({c} AS VARCHAR)"
    else:
        raise AssertionError(f"unknown kind {kind}")
    if choices:
        ok = f"({ok} AND {c}->>'$' IN ({', '.join(repr(x) for x in choices)}))"
    if optional:
        ok = f"({c} IS NULL OR {t} = 'NULL' OR {ok})"
        val = f"CASE WHEN {c} IS NULL OR {t} = 'NULL' THEN NULL ELSE {val} END"
    return ok, val


ARROW_TYPES = {"int": pa.int64(), "num": pa.float64(), "str": pa.string(), "bool": pa.bool_(),
               "strs": pa.list_(pa.string()), "cell": pa.list_(pa.int64()), "vec2": pa.list_(pa.int64())}
"""Field kinds the Arrow reader checks by type (``counts`` too: inferred, then checked)."""


NOT_PLAIN_RELATIVE = r"^$|^/|\\|\x00|(^|/)\.\.(/|$)"
"""A path that ``mfm.schema.plain_relative`` refuses (RE2 syntax)."""


def _index_check(t: pa.Table) -> bool:
    """``IndexRow.check`` over columns."""
    return (pc.all(pc.match_substring_regex(t.column("id"), r"^ep_[0-9]{6,}$")).as_py()
            and not pc.any(pc.match_substring_regex(t.column("path"), NOT_PLAIN_RELATIVE)).as_py()
            and not pc.any(pc.fill_null(pc.match_substring_regex(t.column("image"), NOT_PLAIN_RELATIVE),
                                        False)).as_py()
            and pc.all(pc.greater_equal(t.column("last_step"), t.column("first_step"))).as_py()
            and pc.all(pc.less_equal(t.column("frames"), pc.subtract(t.column("last_step"),
                                                                      t.column("first_step")))).as_py()
            and pc.all(pc.less_equal(t.column("frames"), MAX_EPISODE_FRAMES)).as_py())


def _target_ok(axis: str) -> str:
    """SQL: a turn target's coordinate is a number within range (as ``TurnRow.check``)."""
    return f"(json_type(t, '$.{axis}') IN {NUMS} AND abs(CAST(t->'$.{axis}' AS DOUBLE)) <= {MAX_COORD})"


CROSS_CHECKS = {
    IndexRow: _index_check,
    TurnRow: ("coalesce(list_bool_and(list_transform(CAST(calls AS JSON[]), lambda c: json_type(c) = 'OBJECT' "
              f"AND json_type(c, '$.tool') = 'VARCHAR' AND c->>'$.tool' IN ({', '.join(repr(t) for t in TOOLS)}))), "
              "true) AND coalesce(list_bool_and(list_transform(CAST(targets AS JSON[]), lambda t: "
              "json_type(t) = 'OBJECT' AND json_type(t, '$.kind') = 'VARCHAR' AND t->>'$.kind' IN ('go_to', 'look_at') "
              f"AND {_target_ok('x')} AND {_target_ok('y')})), true)"),
}
"""Record types whose ``check`` has a twin (it must accept no more than ``check``): a
function of the Arrow table, or an SQL condition over the DuckDB path's converted columns."""


def _all(mask: pa.ChunkedArray | pa.Array) -> bool:
    return bool(pc.all(mask).as_py()) if len(mask) else True


def _arrow_columns(data: bytes, rtype: type[Record]) -> pa.Table | None:
    """The table if every line passes ``rtype``'s rules, else None (Arrow path)."""
    fields = dataclasses.fields(rtype)
    kinds = {f.name: rtype.KINDS[f.name] for f in fields}
    counts = [n for n, k in kinds.items() if k.rstrip("?") == "counts"]
    if counts and b"null" in data:
        return None
    schema = pa.schema([(n, ARROW_TYPES[k.rstrip("?")]) for n, k in kinds.items() if n not in counts])
    try:
        data.isascii() or data.decode("utf-8")  # the ASCII test is ten times faster than decoding
        t = pj.read_json(io.BytesIO(data), parse_options=pj.ParseOptions(explicit_schema=schema,
                                                                         unexpected_field_behavior="infer"))
    except (pa.ArrowException, UnicodeDecodeError):
        return None
    out = {}
    for f in fields:
        name, kind = f.name, kinds[f.name]
        if name not in t.column_names:
            return None
        col = t.column(name)
        base = kind.rstrip("?")
        if col.null_count and not kind.endswith("?"):
            return None
        if base == "counts":
            if not pa.types.is_struct(col.type) or not all(pa.types.is_int64(c.type) for c in col.type):
                return None
            out[name] = col
            continue
        if base == "int" and col.null_count < len(col) and pc.min(col).as_py() < 0:
            return None
        if base == "num" and col.null_count < len(col) and pc.max(pc.abs(col)).as_py() > MAX_COORD:
            return None
        if base in ("strs", "cell", "vec2"):
            flat = pc.list_flatten(col)
            if flat.null_count:
                return None
            if base != "strs":
                sizes = pc.list_value_length(col)
                fits = pc.is_in(sizes, pa.array([2, 3] if base == "cell" else [2]))
                if not _all(pc.or_kleene(pc.is_null(col), fits)):
                    return None
                if len(flat) and pc.max(pc.abs(flat)).as_py() > MAX_COORD:
                    return None
        choices = rtype.CHOICES.get(name)
        if choices and not _all(pc.or_kleene(pc.is_null(col), pc.is_in(col, pa.array(choices)))):
            return None
        out[name] = col
    t = pa.table(out)
    check = CROSS_CHECKS.get(rtype)
    if check is not None and (not callable(check) or not check(t)):
        return None
    return t


def _counts_as_json(col: pa.ChunkedArray) -> pa.ChunkedArray:
    """Name-to-integer maps (read as structs) back to compact JSON text with sorted keys (as
    the line-by-line reader writes them), in C++. A null struct field is a name the line did
    not have (the file holds no ``null`` at all)."""
    col = col.combine_chunks()
    empty = pa.array([""] * len(col), pa.string())
    parts = [pc.if_else(pc.is_valid(col.field(i)),
                        pc.binary_join_element_wise(json.dumps(f.name) + ":", pc.cast(col.field(i), pa.string()), ",",
                                                    ""), empty)
             for i, f in sorted(enumerate(col.type), key=lambda item: item[1].name)]
    inner = pc.utf8_rtrim(pc.binary_join_element_wise(*parts, ""), characters=",") if parts else empty
    return pa.chunked_array([pc.binary_join_element_wise("{", inner, "}", "")])


def read_columns(path: Path, rtype: type[Record], ordered_by: str | None = None,
                 unique: str | None = None) -> pd.DataFrame | None:
    """Every line of ``path`` as columns if the whole file is clean, else None.

    Record types with cross-field checks (``check``) are taken only when the check has a
    columnar twin in ``CROSS_CHECKS``. ``ordered_by``: a column that must increase strictly
    from line to line; ``unique``: a column whose values must all differ."""
    t = read_arrow(path, rtype, ordered_by, unique)
    return None if t is None else t.to_pandas()


def read_arrow(path: Path, rtype: type[Record], ordered_by: str | None = None,
               unique: str | None = None) -> pa.Table | None:
    """:func:`read_columns` before the conversion to pandas: the Arrow table whose
    ``to_pandas()`` is the DataFrame (what ``loaders.tablecache`` keeps), or None."""
    if rtype.check is not Record.check and rtype not in CROSS_CHECKS:
        return None
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if len(data) < MIN_BYTES or not data.endswith(b"\n"):
        return None
    ends = np.flatnonzero(np.frombuffer(data, np.uint8) == 10)
    if not _shallow_short_lines(data, ends):
        return None
    lines = len(ends)
    if all(k.rstrip("?") in ARROW_TYPES or k.rstrip("?") == "counts" for k in rtype.KINDS.values()):
        t = _arrow_columns(data, rtype)
        if t is None or t.num_rows != lines:
            return None
        for i, n in enumerate(t.column_names):
            if rtype.KINDS[n].rstrip("?") == "counts":
                t = t.set_column(i, n, _counts_as_json(t.column(n)))
        return _checked(t, ordered_by, unique)
    if rtype.check is not Record.check and not isinstance(CROSS_CHECKS.get(rtype), str):
        return None
    fields = [f.name for f in dataclasses.fields(rtype)]
    checks, values = [], []
    for f in fields:
        ok, val = _rules(f, rtype.KINDS[f], rtype.CHOICES.get(f))
        checks.append(ok)
        values.append(f"{val} AS {_quote(f)}")
    all_ok = " AND ".join(f"coalesce({c}, false)" for c in checks)
    try:
        con = duckdb.connect(":memory:")
        lines_read = con.read_json(io.BytesIO(data), format="newline_delimited", maximum_object_size=16777216,
                                   columns={f: "JSON" for f in fields})
        query = f"SELECT {', '.join(values)}, {all_ok} AS __ok FROM lines_read"
        cross = CROSS_CHECKS.get(rtype)
        if isinstance(cross, str):
            query = f"SELECT * EXCLUDE (__ok), __ok AND coalesce({cross}, false) AS __ok FROM ({query})"
        table = con.sql(query).to_arrow_table()
    except duckdb.Error:
        return None
    if table.num_rows != lines or not pc.all(table.column("__ok")).as_py():
        return None
    return _checked(table.drop_columns(["__ok"]), ordered_by, unique)


def _shallow_short_lines(data: bytes, ends: np.ndarray) -> bool:
    """No empty line, no line longer than ``MAX_LINE_BYTES`` and none nesting deeper than
    ``MAX_DEPTH`` (the C++ readers recurse on nesting and must never see a hostile line: the
    tolerant reader reports it instead). ``ends``: the offsets of the newlines, the last one
    ending ``data``. Lines with few brackets pass on a count; the rest are measured outside
    strings, vectorised."""
    lengths = np.diff(ends, prepend=-1)
    if lengths.min() == 1 or lengths.max() > MAX_LINE_BYTES:
        return False
    arr = np.frombuffer(data, np.uint8)
    opens = np.flatnonzero((arr | 32) == 123)  # "[" (91) and "{" (123), the only bytes b with b | 32 == 123
    if len(opens) <= MAX_DEPTH or int(np.diff(np.searchsorted(opens, ends), prepend=0).max()) <= MAX_DEPTH:
        return True
    depth, balanced = nesting(data, ends)
    return balanced and depth <= MAX_DEPTH


def _checked(t: pa.Table, ordered_by: str | None, unique: str | None) -> pa.Table | None:
    """``t`` if its ``ordered_by`` column has no nulls and increases strictly and its
    ``unique`` column has no repeats (nulls count as one value), else None."""
    if ordered_by and t.num_rows > 1:
        col = t.column(ordered_by).combine_chunks()
        if col.null_count or not pc.all(pc.greater(col.slice(1), col.slice(0, len(col) - 1))).as_py():
            return None
    if unique and pc.count_distinct(t.column(unique), mode="all").as_py() != t.num_rows:
        return None
    return t

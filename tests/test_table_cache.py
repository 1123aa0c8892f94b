"""The derived table cache (``loaders.tablecache``): a cached open gives exactly what an
uncached one gives, on every sample run and on damaged copies; a changed file or a bad
entry is a miss; nothing is written into a run folder; the cache can be turned off; and
``mfm validate`` never uses it."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

import loaders.fastread
import mfm.validate
from conftest import REPO
from loaders import cachedread, tablecache
from loaders.cachedread import validate
from loaders.run import TABLE_NAMES, Run, signature
from loaders.sources import DirSource
from mfm.memory.retrieval import FrameError
from mfm.schema import TABLES

SAMPLES = sorted(str(p.relative_to(REPO / "sample_runs")) for p in (REPO / "sample_runs").glob("**/run.json"))
SAMPLES = [str(Path(s).parent) for s in SAMPLES]


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache folder of this test's own (never ~/.cache); files just written count as settled."""
    d = tmp_path / "cache"
    monkeypatch.setenv("MFM_CACHE_DIR", str(d))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(tablecache, "RACY_SECONDS", 0.0)
    return d


class Calls:
    """Counts the real work done: tables parsed and file checks run."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.parsed: list[str] = []
        self.file_checks = 0
        read_one, file_problems = cachedread._read_one, mfm.validate._file_problems

        def counted_read(path, name):
            self.parsed.append(name)
            return read_one(path, name)

        def counted_checks(*a):
            self.file_checks += 1
            return file_problems(*a)

        monkeypatch.setattr(cachedread, "_read_one", counted_read)
        monkeypatch.setattr(mfm.validate, "_file_problems", counted_checks)

    def reset(self) -> None:
        self.parsed.clear()
        self.file_checks = 0


def assert_same(a, b) -> None:
    """Two RunContents hold the same manifest, problems, records (with their exact types),
    line numbers and columns."""
    assert a.manifest == b.manifest
    assert a.problems == b.problems
    assert sorted(a.tables) == sorted(b.tables) and sorted(a.columns) == sorted(b.columns)
    for name in a.tables:
        assert list(a.lines[name]) == list(b.lines[name]), name
        assert repr(list(a.tables[name])) == repr(list(b.tables[name])), name
    for name in a.columns:
        pd.testing.assert_frame_equal(a.columns[name], b.columns[name], check_exact=True)


def assert_same_run(path: Path) -> None:
    """The loaders' tables of a cached open equal those of an uncached one."""
    cached = Run(path, DirSource(path), signature(path))
    with pytest.MonkeyPatch.context() as m:
        m.setenv("MFM_CACHE_DIR", "off")
        plain = Run(path, DirSource(path), signature(path))
        plain._c  # noqa: B018 - read now, with the cache off
    for view in TABLE_NAMES.values():
        pd.testing.assert_frame_equal(cached.table(view), plain.table(view), check_exact=True)
    assert cached.problems == plain.problems


def tree(d: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under ``d`` with its size and modification time."""
    out = {}
    for root, dirs, files in os.walk(d):
        for n in dirs + files:
            st = os.stat(os.path.join(root, n))
            out[os.path.relpath(os.path.join(root, n), d)] = (st.st_size, st.st_mtime_ns)
    return out


def entries(cache: Path) -> list[Path]:
    tablecache.wait()
    return sorted(cache.glob(f"*{tablecache.SUFFIX}")) if cache.is_dir() else []


@pytest.mark.parametrize("fast", [False, True], ids=["default", "fast-path-for-all"])
@pytest.mark.parametrize("sample", SAMPLES)
def test_cached_open_is_identical_on_sample_runs(sample, fast, cache, monkeypatch):
    if fast:
        monkeypatch.setattr(loaders.fastread, "MIN_BYTES", 0)
    run = REPO / "sample_runs" / sample
    before = tree(run)
    calls = Calls(monkeypatch)
    plain = validate(run)
    calls.reset()
    first = validate(run, cache=True)
    assert calls.file_checks == 1
    big = [n for n in TABLES if (run / n).is_file() and (run / n).stat().st_size >= cachedread.CACHE_MIN_BYTES]
    assert big and len(entries(cache)) == len(big) + 1, "one entry per table worth caching, one for the file checks"
    calls.reset()
    again = validate(run, cache=True)
    assert calls.file_checks == 0 and not set(calls.parsed) & set(big), "served from the cache"
    assert_same(plain, first)
    assert_same(plain, again)
    if fast:
        assert "steps.jsonl" in again.columns, "the Arrow entries are exercised"
    assert_same_run(run)
    assert tree(run) == before, "nothing is written into the run folder"


@pytest.mark.parametrize("part", [slice(None, 50), slice(3, 10, 2), slice(-5, None), slice(10, 2), slice(None, None, -7)],
                         ids=["first 50", "a step", "the last", "empty", "backwards"])
def test_a_slice_of_records_read_as_columns_is_the_records(part, monkeypatch):
    """Records read as columns and asked for as a slice before any other (built alone) are the
    records the tolerant reader gives, and so is the same slice once all are built."""
    monkeypatch.setattr(loaders.fastread, "MIN_BYTES", 0)
    run = REPO / "sample_runs" / "diamond_mfm_s2"
    plain = mfm.validate.validate(run)
    for name in ("index.jsonl", "steps.jsonl"):
        lazy = validate(run).tables[name]
        assert isinstance(lazy, cachedread.LazyRecords), name
        assert lazy[part] == plain.tables[name][part], name
        assert list(lazy)[part] == lazy[part] == plain.tables[name][part], name


def damaged_copy(tmp_path: Path, damage: str) -> Path:
    run = tmp_path / "damaged"
    shutil.copytree(REPO / "sample_runs" / "diamond_mfm_s2", run)
    if damage == "bad lines":
        p = run / "steps.jsonl"
        lines = p.read_bytes().splitlines(keepends=True)
        p.write_bytes(b"".join(lines[:5] + [b'{"step": "7"}\n', b"not json\n"] + lines[5:] + [lines[-1][:30]]))
        p = run / "memory_writes.jsonl"
        lines = p.read_bytes().splitlines(keepends=True)
        p.write_bytes(b"".join(lines[:3] + [lines[3].replace(b'"sha256":"', b'"sha256":"00')] + lines[4:]))
    elif damage == "duplicate and disorder":
        p = run / "index.jsonl"
        lines = p.read_bytes().splitlines(keepends=True)
        p.write_bytes(b"".join(lines[:4] + [lines[2]] + lines[4:]))
        p = run / "steps.jsonl"
        lines = p.read_bytes().splitlines(keepends=True)
        p.write_bytes(b"".join(lines[:9] + [lines[3]] + lines[9:]))
    elif damage == "missing files":
        shutil.rmtree(run / "episodes" / "ep_000005")
        (run / "episodes" / "ep_000007" / "action.json").unlink()
        (run / "episodes" / "ep_999999").mkdir()
        (run / "turns.jsonl").write_bytes((run / "turns.jsonl").read_bytes()[:-40])
    return run


@pytest.mark.parametrize("fast", [False, True], ids=["default", "fast-path-for-all"])
@pytest.mark.parametrize("damage", ["bad lines", "duplicate and disorder", "missing files"])
def test_cached_open_is_identical_on_damaged_runs(tmp_path, damage, fast, monkeypatch, cache):
    if fast:
        monkeypatch.setattr(loaders.fastread, "MIN_BYTES", 0)
    run = damaged_copy(tmp_path, damage)
    plain = validate(run)
    assert plain.problems, "the damage shows"
    calls = Calls(monkeypatch)
    first = validate(run, cache=True)
    calls.reset()
    again = validate(run, cache=True)
    assert calls.file_checks == 0 and "steps.jsonl" not in calls.parsed
    assert_same(plain, first)
    assert_same(plain, again)
    assert_same_run(run)


def _copy(tmp_path: Path, sample: str = "diamond_mfm_s2") -> Path:
    run = tmp_path / "run"
    shutil.copytree(REPO / "sample_runs" / sample, run)
    return run


@pytest.mark.parametrize("fast", [False, True], ids=["default", "fast-path-for-all"])
def test_an_appended_line_invalidates(tmp_path, monkeypatch, fast):
    if fast:
        monkeypatch.setattr(loaders.fastread, "MIN_BYTES", 0)
    run = _copy(tmp_path)
    validate(run, cache=True)
    p = run / "steps.jsonl"
    last = json.loads(p.read_bytes().splitlines()[-1])
    n = len(validate(run, cache=True).tables["steps.jsonl"])
    last["step"] += 1
    with open(p, "a", encoding="utf-8") as f:
        f.write(json.dumps(last) + "\n")
    after = validate(run, cache=True)
    assert len(after.tables["steps.jsonl"]) == n + 1
    assert_same(validate(run), after)
    with open(p, "a", encoding="utf-8") as f:
        f.write('{"step": "oops"}\n')
    after = validate(run, cache=True)
    assert any(x.file == "steps.jsonl" and x.line == n + 2 for x in after.problems)
    assert_same(validate(run), after)


def test_a_same_size_rewrite_with_the_old_mtime_invalidates(tmp_path):
    run = _copy(tmp_path)
    p = run / "memory_writes.jsonl"
    author = validate(run, cache=True).tables["memory_writes.jsonl"][0].author
    st = os.stat(p)
    data = p.read_bytes()
    i = data.index(b'"author":"') + len(b'"author":"')
    p.write_bytes(data[:i] + (b"X" if data[i:i + 1] != b"X" else b"Y") + data[i + 1:])
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (os.stat(p).st_size, os.stat(p).st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    after = validate(run, cache=True)
    assert after.tables["memory_writes.jsonl"][0].author != author
    assert_same(validate(run), after)


@pytest.mark.parametrize("how", ["flip a byte", "truncate", "empty", "garbage", "valid frame, bad payload",
                                 "another file's entry"])
def test_a_bad_cache_entry_is_ignored_and_rebuilt(tmp_path, monkeypatch, cache, how):
    monkeypatch.setattr(loaders.fastread, "MIN_BYTES", 0)
    run = _copy(tmp_path)
    plain = validate(run)
    validate(run, cache=True)
    found = entries(cache)
    assert found
    for e in found:
        data = e.read_bytes()
        if how == "flip a byte":
            data = data[:len(data) // 2] + bytes([data[len(data) // 2] ^ 0x40]) + data[len(data) // 2 + 1:]
        elif how == "truncate":
            data = data[:len(data) // 2]
        elif how == "empty":
            data = b""
        elif how == "garbage":
            data = os.urandom(len(data))
        e.write_bytes(data)
    if how == "valid frame, bad payload":
        for i, name in enumerate(TABLES):
            st = tablecache.stamp(run / name)
            if st and st[0] >= cachedread.CACHE_MIN_BYTES:
                key = [*st, name, loaders.fastread.MIN_BYTES]
                tablecache.store("table", os.path.abspath(run / name), key, ("arrow", "json")[i % 2],
                                 b'{"rows": [[1, 2]]}')
        tablecache.store("files", os.path.abspath(run), cachedread._files_key(run), "json", b'[["x"]]')
    if how == "another file's entry":
        steps, turns = (tablecache._entry(cache, "table", os.path.abspath(run / n))
                        for n in ("steps.jsonl", "turns.jsonl"))
        a, b = steps.read_bytes(), turns.read_bytes()
        steps.write_bytes(b)
        turns.write_bytes(a)
    calls = Calls(monkeypatch)
    assert_same(plain, validate(run, cache=True))
    assert "steps.jsonl" in calls.parsed, "the bad entry was not used"
    calls.reset()
    assert_same(plain, validate(run, cache=True))
    assert calls.parsed == [n for n in TABLES if not (run / n).is_file()
                            or (run / n).stat().st_size < cachedread.CACHE_MIN_BYTES], \
        "rebuilt after the miss"


def test_an_entry_of_another_code_version_is_ignored(tmp_path, monkeypatch):
    run = _copy(tmp_path)
    validate(run, cache=True)
    monkeypatch.setattr(tablecache, "_CODE", "something else")
    plain = validate(run)
    calls = Calls(monkeypatch)
    assert_same(plain, validate(run, cache=True))
    assert "memory_writes.jsonl" in calls.parsed and calls.file_checks == 1


def test_cache_off_reads_everything_and_writes_nothing(tmp_path, monkeypatch, cache):
    run = _copy(tmp_path)
    monkeypatch.chdir(tmp_path)
    calls = Calls(monkeypatch)
    for off in ("off", "0", "OFF", "none"):
        monkeypatch.setenv("MFM_CACHE_DIR", off)
        assert tablecache.cache_dir() is None
        calls.reset()
        assert_same(validate(run), validate(run, cache=True))
        assert_same(validate(run), validate(run, cache=True))
        assert calls.parsed.count("memory_writes.jsonl") == 4 and calls.file_checks == 4
    assert not cache.exists() and not (tmp_path / "xdg").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_where_the_cache_lives(tmp_path, monkeypatch):
    monkeypatch.setenv("MFM_CACHE_DIR", str(tmp_path / "c"))
    assert tablecache.cache_dir() == tmp_path / "c"
    monkeypatch.delenv("MFM_CACHE_DIR")
    assert tablecache.cache_dir() == tmp_path / "xdg" / "mfm"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert tablecache.cache_dir() == tmp_path / "home" / ".cache" / "mfm"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/not/allowed")
    assert tablecache.cache_dir() == tmp_path / "home" / ".cache" / "mfm"


def test_mfm_validate_never_uses_the_cache(tmp_path, monkeypatch, cache, capsys):
    from mfm.cli import main

    run = _copy(tmp_path)
    assert main(["validate", str(run)]) == 0
    assert not entries(cache)
    validate(run, cache=True)
    assert entries(cache)
    calls = Calls(monkeypatch)
    main(["validate", str(run)])
    assert "memory_writes.jsonl" in calls.parsed and calls.file_checks == 1


def test_what_a_cached_file_check_sees_and_what_it_cannot(tmp_path, monkeypatch):
    run = _copy(tmp_path)
    assert not [p for p in validate(run, cache=True).problems if "missing" in p.message]
    shutil.rmtree(run / "episodes" / "ep_000004")
    seen = validate(run, cache=True)
    assert any("ep_000004: episode folder" in p.message for p in seen.problems), "a removed folder is seen"
    assert seen.problems == validate(run).problems
    strip = run / "episodes" / "ep_000006" / "frames" / "00000.webp"
    strip.unlink()
    cached = validate(run, cache=True)
    exact = validate(run)
    assert any("ep_000006: frame strip" in p.message for p in exact.problems), "mfm validate sees it"
    assert not any("ep_000006: frame strip" in p.message for p in cached.problems), \
        "documented: a cached check does not see a file deleted inside an episode folder"
    r = Run(run, DirSource(run), signature(run))
    ep = r.episode("ep_000006")
    with pytest.raises(FrameError, match="00000.webp"):
        r.frame(ep.first_step + 1)


def test_files_modified_just_now_are_not_cached(tmp_path, monkeypatch, cache):
    monkeypatch.setattr(tablecache, "RACY_SECONDS", 3600.0)
    run = _copy(tmp_path)
    assert_same(validate(run), validate(run, cache=True))
    assert not entries(cache)


def test_the_cache_is_bounded(tmp_path, monkeypatch, cache):
    monkeypatch.setenv("MFM_CACHE_MAX_MB", str(2.5 / 1024))
    for i in range(5):
        tablecache.store("table", f"/x/{i}", [i], "json", b"x" * 1000)
        os.utime(tablecache._entry(cache, "table", f"/x/{i}"), (1000 + i, 1000 + i))
    kept = entries(cache)
    assert len(kept) == 2 and sum(p.stat().st_size for p in kept) <= 2.5 * 1024
    assert tablecache.load("table", "/x/4", [4]) is not None and tablecache.load("table", "/x/0", [0]) is None
    (cache / ".tmp-old").write_bytes(b"x")
    os.utime(cache / ".tmp-old", (1, 1))
    tablecache.store("table", "/x/9", [9], "json", b"{}")
    assert not (cache / ".tmp-old").exists(), "a crashed writer's temporary file is cleared"


def test_an_unwritable_cache_is_silently_skipped(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("MFM_CACHE_DIR", str(blocker / "cache"))
    run = _copy(tmp_path)
    assert_same(validate(run), validate(run, cache=True))


def fields_as_read(record: object) -> list[str]:
    """A record's fields by ``repr`` (``1`` and ``1.0``, a tuple and a list, ``None`` and a
    value all differ there), but for two differences ``==`` does not see and the columns
    always had: numbers of ``num`` fields are floats there (a JSON ``34`` read line by line
    stays an int), and name-to-count maps have their names sorted."""
    kinds = type(record).KINDS
    out = []
    for f in dataclasses.fields(record):
        v, kind = getattr(record, f.name), kinds[f.name].rstrip("?")
        if kind == "num" and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        elif kind == "counts" and isinstance(v, dict):
            v = sorted(v.items())
        out.append(repr(v))
    return out


@pytest.mark.parametrize("sample", SAMPLES)
def test_records_read_as_columns_are_the_records_value_for_value(sample, monkeypatch):
    """Every record built from columns (each column converted at once, JSON text parsed as one
    array) is the tolerant reader's, field for field with its type. The grid's ``pose`` is
    absent on most lines (gaps in a JSON column)."""
    monkeypatch.setattr(loaders.fastread, "MIN_BYTES", 0)
    run = REPO / "sample_runs" / sample
    plain = mfm.validate.validate(run)
    got = validate(run)
    for name in cachedread.FAST_TABLES:
        lazy = got.tables.get(name)
        if lazy is None:
            continue
        assert isinstance(lazy, cachedread.LazyRecords), name
        assert [fields_as_read(r) for r in lazy] == [fields_as_read(r) for r in plain.tables[name]], name


def test_changing_a_table_handed_out_leaves_its_records(tmp_path, monkeypatch):
    """A table read as columns is handed out as a shallow copy of the columns its records are
    built from; a page that changes a value, adds or drops a column changes no record."""
    monkeypatch.setattr(loaders.fastread, "MIN_BYTES", 0)
    run_dir = tmp_path / "run"
    shutil.copytree(REPO / "sample_runs" / "diamond_mfm_s2", run_dir)
    plain = mfm.validate.validate(run_dir)
    run = Run(run_dir, DirSource(run_dir), signature(run_dir))
    for name, file in (("steps", "steps.jsonl"), ("episodes", "index.jsonl")):
        assert file in run._c.columns, "read as columns"
        table = run.table(name)
        column = table.columns[3]
        table.loc[0, column] = None
        table[column] = table[column].iloc[::-1].to_numpy()
        table["added"] = 1
        del table[table.columns[0]]
        assert list(run.records(file)) == list(plain.tables[file]), name

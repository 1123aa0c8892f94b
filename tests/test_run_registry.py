"""The one registry of open runs (issue 45): bounded by bytes, least recently used dropped first;
a changed run read again, ``run.json`` once per version; a run being written keeps its
unchanged tables (the same DataFrame objects); no module keeps a side table of runs."""
from __future__ import annotations

import ast
import os
import shutil
from pathlib import Path

import pytest
import raw
from conftest import REPO
from test_live import GrowingRun, load_all

from loaders.registry import RunRegistry, max_bytes
from loaders.run import REGISTRY, build_run, open_run, signature

SAMPLES = ["diamond_pro-long_s2_2500steps", "reach-1000_mfm_s0", "diamond_vista_s2_2500steps", "diamond_mfm_s2"]


def copies(tmp_path: Path, names: list[str]) -> list[Path]:
    """Copies of sample runs (a registry keys runs by their resolved path)."""
    out = []
    for name in names:
        shutil.copytree(REPO / "sample_runs" / name, tmp_path / name)
        out.append((tmp_path / name).resolve())
    return out


def read_all(registry: RunRegistry, path: Path):
    run = registry.get(path, signature(path))
    load_all(run)
    return run


def test_the_registry_is_bounded_by_bytes_and_drops_the_least_recently_used(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MFM_CACHE_DIR", "off")  # both registries read the same way, from the files
    paths = copies(tmp_path, SAMPLES)
    unbounded = RunRegistry(build_run, limit=1 << 60)
    sizes = [read_all(unbounded, p).nbytes() for p in paths]
    for p, size in zip(paths, sizes):
        df_bytes = sum(int(df.memory_usage(deep=False).sum()) for df in load_all(unbounded.held(p)).values())
        assert size >= df_bytes > 0, "a run counts at least the DataFrames it built"
    assert unbounded.nbytes() == sum(sizes)

    limit = sizes[2] + sizes[3]
    registry = RunRegistry(build_run, limit=limit)
    held = [read_all(registry, p) for p in paths]
    assert registry.paths() == [str(paths[2]), str(paths[3])], "the two oldest runs were dropped"
    assert registry.nbytes() == sizes[2] + sizes[3] <= limit
    assert registry.get(paths[3], signature(paths[3])) is held[3], "a held run of the same version is shared"

    again = read_all(registry, paths[0])
    assert again is not held[0], "a dropped run is read again"
    assert len(again.episodes()) == len(raw.jsonl(paths[0] / "index.jsonl"))
    assert str(paths[0]) in registry.paths() and registry.nbytes() <= limit
    assert registry.paths()[-1] == str(paths[0]), "the run just read is the most recently used"


def test_a_run_larger_than_the_bound_is_held_alone(tmp_path: Path) -> None:
    paths = copies(tmp_path, SAMPLES[:2])
    registry = RunRegistry(build_run, limit=1)
    first = read_all(registry, paths[0])
    assert registry.paths() == [str(paths[0])] and first.nbytes() > 1
    read_all(registry, paths[1])
    assert registry.paths() == [str(paths[1])]


def test_the_bound_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MFM_RUN_CACHE_MB", "3")
    assert max_bytes() == 3 * 1024 * 1024 == RunRegistry(build_run).bound()
    monkeypatch.setenv("MFM_RUN_CACHE_MB", "lots")
    assert max_bytes() == 512 * 1024 * 1024


def test_a_changed_run_is_read_again_and_its_manifest_once_per_version(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    (path,) = copies(tmp_path, SAMPLES[:1])
    manifest_opens = []
    real = os.open

    def counting(file, *args, **kwargs):
        if os.fspath(file) == str(path / "run.json"):
            manifest_opens.append(file)
        return real(file, *args, **kwargs)

    monkeypatch.setattr(os, "open", counting)
    first = open_run(path)
    assert first.manifest is not None and first.status == "finished"
    assert len(first.episodes()) == len(raw.jsonl(path / "index.jsonl")) and not first.problems
    assert open_run(path) is first
    assert len(manifest_opens) == 1

    lines = (path / "index.jsonl").read_bytes().splitlines(keepends=True)
    (path / "index.jsonl").write_bytes(b"".join(lines[:-1]))
    second = open_run(path)
    assert second is not first
    assert len(second.episodes()) == len(raw.jsonl(path / "index.jsonl")) == len(lines) - 1
    assert second.manifest == first.manifest
    assert len(manifest_opens) == 2, "run.json is read once for the new version too"
    assert REGISTRY.changes[str(path)].files == ("index.jsonl",)


def test_a_run_being_written_keeps_its_unchanged_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mfm.memory import run_writer

    monkeypatch.setattr(run_writer, "MANIFEST_EVERY_S", 0.0)
    g = GrowingRun(tmp_path / "run")
    g.add(2)
    first = open_run(g.dir)
    assert first.status == "running"
    before = load_all(first)
    g.add(1)
    second = open_run(g.dir)
    assert second is not first
    after = {name: second.table(name) for name in before}
    for name in ("lives", "milestones", "memory_writes"):
        assert after[name] is before[name], f"{name}: its file did not change, its DataFrame is the same object"
    for name in ("episodes", "steps", "turns", "grid"):
        assert after[name] is not before[name]
    assert list(after["episodes"]["id"]) == [r["id"] for r in raw.jsonl(g.dir / "index.jsonl")]
    g.close()
    closed = open_run(g.dir)
    assert closed.status == "finished" and closed.table("lives") is not before["lives"], \
        "a stopped run is read afresh, with every check"


def test_a_changed_run_of_another_format_is_read_again(tmp_path: Path) -> None:
    """A Crafter recording's status comes from reading it whole; the registry reads it outside
    its lock (a run that grows reports to the registry, which must not be waiting on itself)."""
    from conftest import record_crafter

    npz = next(record_crafter(tmp_path / "rec", seed=3, policy_seed=2, length=60).glob("*.npz")).resolve()
    first = open_run(npz)
    assert not first.loaded
    st = npz.stat()
    os.utime(npz, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    second = open_run(npz)
    assert second is not first and first.loaded
    assert REGISTRY.changes[str(npz)].files == ("",)
    assert second.status == first.status == "finished"
    assert len(second.steps()) == len(first.steps()) > 0


def test_no_module_keeps_a_weak_side_table_of_runs() -> None:
    """Values computed from a run are kept in ``Run.derived`` (one version of the run each) or
    in the registry, never in a module's weak dictionary keyed on runs."""
    found = []
    for folder in ("loaders", "dashboard"):
        for f in sorted((REPO / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(f.read_text(), str(f))):
                names = [a.name for a in node.names] if isinstance(node, (ast.Import, ast.ImportFrom)) else []
                module = node.module if isinstance(node, ast.ImportFrom) else ""
                if "weakref" in names or module == "weakref" or (
                        isinstance(node, ast.Attribute) and node.attr in ("WeakKeyDictionary", "WeakValueDictionary")):
                    found.append(f"{f.relative_to(REPO)}:{node.lineno}")
    assert found == []

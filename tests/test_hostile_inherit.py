"""Hostile input, round three (issue 47): inheriting from a run holding links, special files or
damage, and reading runs that hold FIFOs.

Real parts throughout: copies of the shipped sample run, real symlinks, FIFOs and sockets,
real ``mfm run --inherit`` / ``mfm validate`` / ``mfm import`` processes (each given a generous
``timeout=`` on ``subprocess.run`` only as a guard against a hang, never as a measure of speed),
and a real full tmpfs for the failure after the new run exists."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from conftest import REPO, bound_socket
from mfm.memory.inheritance import InheritError, check_source, copy_run
from mfm.validate import validate
from test_disk_full import tmpfs

SAMPLE = REPO / "sample_runs" / "reach-1000_mfm_s0"
HANG_GUARD = 600
"""Seconds after which a child process is taken to hang (each finishes in a few seconds)."""
SECRET = b"outside the run: never to be copied or read\n"


def mfm(*args: str) -> subprocess.CompletedProcess:
    """``mfm ARGS`` in a child process (raises TimeoutExpired, failing the test, if it hangs)."""
    return subprocess.run([sys.executable, "-m", "mfm.cli", *args], capture_output=True, text=True,
                          timeout=HANG_GUARD, cwd=REPO)


def inherit(src: Path, out: Path) -> subprocess.CompletedProcess:
    """A short new game of seed 0 (the sample run's world) inheriting ``src``."""
    return mfm("run", "--task", "ore-iron", "--seed", "0", "--inherit", str(src), "--steps", "20",
               "--out", str(out), "--quiet", "--fixed-clock")


def one_line(stderr: str) -> str:
    """The single line a refusal prints (no traceback)."""
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def put_lines(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def src(tmp_path: Path) -> Path:
    """A copy of the shipped sample run (finished, seed 0, memory history intact)."""
    d = tmp_path / "src"
    shutil.copytree(SAMPLE, d)
    return d


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder beside the run holding a secret file and a FIFO: a reader that follows a link
    to the FIFO would hang, one that copies the secret would leave it in the new run."""
    d = tmp_path / "outside"
    d.mkdir()
    (d / "secret.txt").write_bytes(SECRET)
    os.mkfifo(d / "pipe")
    return d


def secret_copies(root: Path, outside: Path) -> list[Path]:
    """Files under ``root`` (not under ``outside``) holding the secret, links not followed."""
    found = []
    for dirpath, _, files in os.walk(root):
        if Path(dirpath).is_relative_to(outside):
            continue
        for name in files:
            p = Path(dirpath) / name
            if p.is_file() and not p.is_symlink() and SECRET in p.read_bytes():
                found.append(p)
    return found


def first_episode(src: Path) -> str:
    return lines(src / "index.jsonl")[3]["path"]


# -- links: never followed, the source refused before the new run exists ----------------------

LINKS: dict[str, Callable[[Path, Path], str]] = {}


def link_case(fn: Callable[[Path, Path], str]) -> Callable[[Path, Path], str]:
    LINKS[fn.__name__] = fn
    return fn


@link_case
def folder_link_out(src: Path, out: Path) -> str:
    (src / first_episode(src) / "extra").symlink_to(out)
    return f"{first_episode(src)}/extra"


@link_case
def episode_folder_link_out(src: Path, out: Path) -> str:
    ep = src / first_episode(src)
    shutil.move(ep, out / "ep")
    ep.symlink_to(out / "ep")
    return first_episode(src)


@link_case
def file_link_out(src: Path, out: Path) -> str:
    (src / "notes.txt").symlink_to(out / "secret.txt")
    return "notes.txt"


@link_case
def state_json_link_out(src: Path, out: Path) -> str:
    rel = f"{first_episode(src)}/state/state.json"
    shutil.move(src / rel, out / "state.json")
    (src / rel).symlink_to(out / "state.json")
    return rel


@link_case
def link_to_an_outside_fifo(src: Path, out: Path) -> str:
    rel = "mine/GUIDE.md"
    (src / rel).unlink()
    (src / rel).symlink_to(out / "pipe")
    return rel


@link_case
def link_to_dev_zero(src: Path, out: Path) -> str:
    rel = f"{first_episode(src)}/action.json"
    (src / rel).unlink()
    (src / rel).symlink_to("/dev/zero")
    return rel


@link_case
def loop_to_the_run_itself(src: Path, out: Path) -> str:
    (src / "loop").symlink_to(".")
    return "loop"


@link_case
def two_links_to_each_other(src: Path, out: Path) -> str:
    (src / "episodes" / "b").symlink_to("a")
    (src / "episodes" / "a").symlink_to("b")
    return "episodes/a"


@link_case
def two_self_links(src: Path, out: Path) -> str:
    (src / "mine" / "x").symlink_to(".")
    (src / "mine" / "y").symlink_to("..")
    return "mine/x"


@link_case
def link_inside_the_run(src: Path, out: Path) -> str:
    (src / "episodes" / "alias").symlink_to(src / first_episode(src))
    return "episodes/alias"


@link_case
def dangling_link(src: Path, out: Path) -> str:
    (src / "gone").symlink_to(out / "nothing-here")
    return "gone"


@pytest.mark.parametrize("case", sorted(LINKS))
def test_a_link_in_the_source_is_refused_before_the_new_run_is_made(src: Path, outside: Path, tmp_path: Path,
                                                                    case: str) -> None:
    rel = LINKS[case](src, outside)
    before = sorted((p.name, p.stat().st_size) for p in outside.iterdir() if p.is_file())
    new = tmp_path / "new"
    out = inherit(src, new)
    said = one_line(out.stderr)
    assert out.returncode == 2, out.stderr
    assert said.startswith(f"mfm run: {src}/") and "symlink" in said and "not inherited" in said
    assert f"{src}/{rel}" in said or case in ("two_links_to_each_other", "two_self_links")
    assert not new.exists()
    assert secret_copies(tmp_path, outside) == []
    assert sorted((p.name, p.stat().st_size) for p in outside.iterdir() if p.is_file()) == before


# -- special files: refused without being opened --------------------------------------------

def make_fifo(path: Path) -> None:
    if path.exists():
        path.unlink()
    os.mkfifo(path)


FIFO_PLACES = ["run.json", "index.jsonl", "memory_writes.jsonl", "steps.jsonl", "logs.txt", "mine/GUIDE.md",
               "mine/procedures/table_tool.json", "EP/state/state.json", "EP/action.json", "EP/frames/00000.webp",
               "episodes.zip", "notes.fifo"]


def place(src: Path, where: str) -> str:
    return where.replace("EP", first_episode(src))


@pytest.mark.parametrize("where", FIFO_PLACES)
def test_a_fifo_in_the_source_is_refused_without_being_opened(src: Path, tmp_path: Path, where: str) -> None:
    rel = place(src, where)
    make_fifo(src / rel)
    new = tmp_path / "new"
    out = inherit(src, new)
    said = one_line(out.stderr)
    assert out.returncode == 2, out.stderr
    assert f"{src}/{rel}" in said and "not a regular file (a FIFO)" in said
    assert not new.exists()


def test_a_socket_or_device_in_the_source_is_refused(src: Path, tmp_path: Path) -> None:
    sock = bound_socket(src / "mine" / "agent.sock")
    try:
        out = inherit(src, tmp_path / "new")
    finally:
        sock.close()
    said = one_line(out.stderr)
    assert out.returncode == 2 and f"{src}/mine/agent.sock" in said and "socket" in said
    (src / "mine" / "agent.sock").unlink()
    try:
        os.mknod(src / "zero", 0o600 | 0o020000, os.makedev(1, 5))
    except PermissionError:
        pytest.skip("making a device file needs CAP_MKNOD")
    out = inherit(src, tmp_path / "new")
    said = one_line(out.stderr)
    assert out.returncode == 2 and f"{src}/zero" in said and "device" in said
    assert not (tmp_path / "new").exists()


# -- damage: the source checked whole, the line at fault named ------------------------------

def _last_hash(src: Path) -> str:
    rows = lines(src / "memory_writes.jsonl")
    rows[-1]["sha256"] = "0" * 64
    put_lines(src / "memory_writes.jsonl", rows)
    return f"memory_writes.jsonl:{len(rows)}"


def _middle_hash(src: Path) -> str:
    rows = lines(src / "memory_writes.jsonl")
    i = next(i for i, w in enumerate(rows) if w["path"] == "mine/GUIDE.md" and w.get("diff"))
    rows[i]["sha256"] = "f" * 64
    put_lines(src / "memory_writes.jsonl", rows)
    return f"memory_writes.jsonl:{i + 1}"


def _diff_out_of_range(src: Path) -> str:
    rows = lines(src / "memory_writes.jsonl")
    i = next(i for i, w in enumerate(rows) if w.get("diff"))
    rows[i]["diff"] = [[500, 900, ["x\n"]]]
    put_lines(src / "memory_writes.jsonl", rows)
    return f"memory_writes.jsonl:{i + 1}"


def _diff_lines_not_strings(src: Path) -> str:
    rows = lines(src / "memory_writes.jsonl")
    i = next(i for i, w in enumerate(rows) if w.get("diff"))
    rows[i]["diff"] = [[0, 0, [1, None]]]
    put_lines(src / "memory_writes.jsonl", rows)
    return f"memory_writes.jsonl:{i + 1}"


def _deep_manifest(src: Path) -> str:
    (src / "run.json").write_text('{"a":' * 100_000 + "1" + "}" * 100_000)
    return "run.json"


def _deep_unclosed_manifest(src: Path) -> str:
    (src / "run.json").write_text("[" * 100_000)
    return "run.json"


def _deep_memory_line(src: Path) -> str:
    rows = lines(src / "memory_writes.jsonl")
    with open(src / "memory_writes.jsonl", "a") as f:
        f.write('{"seq":' + "[" * 100_000 + "\n")
    return f"memory_writes.jsonl:{len(rows) + 1}"


def _bad_step_line(src: Path) -> str:
    n = len((src / "steps.jsonl").read_text().splitlines())
    with open(src / "steps.jsonl", "a") as f:
        f.write('{"step": "x", "x": [], "y": null}\n')
    return f"steps.jsonl:{n + 1}"


def _bad_path(path: str) -> Callable[[Path], str]:
    def damage(src: Path) -> str:
        rows = lines(src / "memory_writes.jsonl")
        rows.append({**rows[0], "seq": len(rows), "path": path})
        put_lines(src / "memory_writes.jsonl", rows)
        return f"memory_writes.jsonl:{len(rows)}"
    return damage


DAMAGE = {
    "hash mismatch (last write)": (_last_hash, "does not match its sha256"),
    "hash mismatch (a GUIDE.md diff)": (_middle_hash, "does not match its sha256"),
    "diff that does not fit": (_diff_out_of_range, "does not fit"),
    "diff whose lines are not strings": (_diff_lines_not_strings, "cannot be rebuilt"),
    "run.json nested 100,000 deep": (_deep_manifest, "nested deeper than 64 levels"),
    "run.json of 100,000 open brackets": (_deep_unclosed_manifest, "nested deeper than 64 levels"),
    "memory write nested 100,000 deep": (_deep_memory_line, "nested deeper than 64 levels"),
    "a step line of the wrong types": (_bad_step_line, "skipped"),
    "memory path with backslashes": (_bad_path("mine\\..\\..\\evil.md"), "backslash"),
    "memory path with a NUL": (_bad_path("mine/evil\x00.md"), "NUL"),
    "memory path leaving mine/": (_bad_path("mine/../../evil.md"), "'..'"),
    "absolute memory path": (_bad_path("/etc/evil.md"), "under mine/"),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_a_damaged_source_is_refused_naming_the_line(src: Path, tmp_path: Path, case: str) -> None:
    damage, says = DAMAGE[case]
    where = damage(src)
    new = tmp_path / "new"
    out = inherit(src, new)
    said = one_line(out.stderr)
    assert out.returncode == 2, out.stderr
    assert f"{src}/{where}" in said and says in said, said
    assert not new.exists()
    file, _, line = where.partition(":")
    errors = [(p.file, p.line) for p in validate(src).errors]
    assert (file, int(line) if line else 1) in errors


@pytest.mark.parametrize("path, says", [("mine\\evil.md", "backslash"), ("mine/evil\x00.md", "NUL"),
                                        ("mine/a\\..\\..\\..\\x", "backslash")])
def test_validate_reports_memory_paths_with_a_backslash_or_nul(src: Path, path: str, says: str) -> None:
    where = _bad_path(path)(src)
    out = mfm("validate", str(src))
    assert out.returncode == 1
    assert any(line.startswith(f"{src}/{where}: error:") and says in line for line in out.stdout.splitlines()), \
        out.stdout


def test_procedures_that_are_not_json_objects_are_inherited_as_text(src: Path, tmp_path: Path) -> None:
    rows = lines(src / "memory_writes.jsonl")
    odd = {"deep.json": "[" * 100_000, "list.json": "[1, 2]\n", "typed.json": '{"sources": 5, "extra": []}\n'}
    for name, text in odd.items():
        rows.append({**rows[0], "seq": len(rows), "path": f"mine/procedures/{name}", "op": "create", "diff": None,
                     "snapshot": text, "sha256": hashlib.sha256(text.encode()).hexdigest()})
    put_lines(src / "memory_writes.jsonl", rows)
    new = tmp_path / "new"
    out = inherit(src, new)
    assert out.returncode == 0, out.stderr
    seeded = {w["path"]: w for w in lines(new / "memory_writes.jsonl") if w["author"] == "inherited"}
    assert all(seeded[f"mine/procedures/{name}"]["sources"] == [] for name in odd)
    assert seeded["mine/procedures/deep.json"]["snapshot"] == odd["deep.json"]
    assert seeded["mine/procedures/list.json"]["snapshot"] == odd["list.json"]
    assert json.loads(seeded["mine/procedures/typed.json"]["snapshot"]) == {"sources": [], "extra": []}
    assert validate(new).errors == []


# -- after the new run exists: closed as crashed ---------------------------------------------

def test_a_failure_while_copying_closes_the_new_run_as_crashed(src: Path, tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", "3m") as disk:
        new = disk / "new"
        out = inherit(src, new)
        said = one_line(out.stderr)
        assert out.returncode == 1, out.stderr
        assert said.startswith(f"mfm run: inheriting {src} failed: inherited/") and "ENOSPC" in said
        assert said.endswith(f"the new run {new} was closed as crashed")
        m = json.loads((new / "run.json").read_text())
        assert m["status"] == "crashed" and m["end_reason"].startswith(f"inheriting {src} failed:")
        assert "ENOSPC" in m["end_reason"]
        assert validate(new).errors == []


@pytest.mark.parametrize("swap", ["fifo", "link out"])
def test_a_file_swapped_after_the_check_is_not_copied(src: Path, outside: Path, tmp_path: Path, swap: str) -> None:
    checked = check_source(src)
    rel = f"{first_episode(src)}/outcome.json"
    (src / rel).unlink()
    if swap == "fifo":
        os.mkfifo(src / rel)
    else:
        (src / rel).symlink_to(outside / "secret.txt")
    run = tmp_path / "new"
    run.mkdir()
    with pytest.raises(InheritError, match=f"{rel}: no longer a regular file"):
        copy_run(checked, run)
    assert all(p.is_file() and not p.is_symlink() for p in (run / "inherited").rglob("*") if not p.is_dir())
    assert not (run / "inherited" / rel).exists() and not (run / "inherited" / rel).is_symlink()
    assert secret_copies(tmp_path, outside) == []


def test_the_copy_is_bounded_in_files_and_bytes(src: Path) -> None:
    files = sum(1 for _ in src.rglob("*"))
    with pytest.raises(InheritError, match=f"more than {files - 1} files and folders"):
        check_source(src, max_files=files - 1)
    size = sum(p.stat().st_size for p in src.rglob("*") if p.is_file())
    with pytest.raises(InheritError, match=f"more than {size - 1} bytes"):
        check_source(src, max_bytes=size - 1)
    assert len(check_source(src, max_files=files, max_bytes=size).files) == sum(1 for p in src.rglob("*")
                                                                                if p.is_file())


def test_a_clean_source_is_copied_whole(src: Path, tmp_path: Path) -> None:
    new = tmp_path / "new"
    out = inherit(src, new)
    assert out.returncode == 0, out.stderr
    want = sorted(p.relative_to(src) for p in src.rglob("*") if p.is_file())
    copy = new / "inherited"
    assert sorted(p.relative_to(copy) for p in copy.rglob("*") if p.is_file()) == want
    assert all((copy / f).read_bytes() == (src / f).read_bytes() for f in want)
    assert validate(new).errors == []


# -- reading a run that holds a FIFO: never blocks, reported as not a regular file ----------

READ_PLACES = ["EP/state/state.json", "EP/action.json", "EP/frames/00000.webp", "index.jsonl", "steps.jsonl",
               "memory_writes.jsonl", "run.json"]


@pytest.mark.parametrize("where", READ_PLACES)
def test_validate_reports_a_fifo_as_not_a_regular_file(src: Path, where: str) -> None:
    rel = place(src, where)
    make_fifo(src / rel)
    out = mfm("validate", "--frames", str(src))
    assert out.returncode == 1 and "Traceback" not in out.stderr
    errors = [x for x in out.stdout.splitlines() if ": error: " in x]
    assert errors and all("missing" not in x for x in errors if rel in x)
    assert any(rel in x and "not a regular file" in x for x in errors), out.stdout


def test_validate_reports_a_fifo_in_the_inherited_copy_and_the_pack(src: Path, tmp_path: Path) -> None:
    new = tmp_path / "new"
    assert inherit(src, new).returncode == 0
    make_fifo(new / "inherited" / "index.jsonl")
    make_fifo(new / "episodes.zip")
    out = mfm("validate", str(new))
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert f"{new}/episodes.zip: error: not a regular file (a FIFO), not read" in out.stdout
    assert "has no inherited/index.jsonl inside it" in out.stdout


READER = """
import sys
from loaders import open_run
from mfm.boundary import UnsafePath
from mfm.memory.retrieval import FrameError
run = open_run(sys.argv[1])
for name in ("episodes", "steps", "turns", "grid", "memory_writes", "seen", "lives", "milestones"):
    run.table(name)
run.summary()
try:
    run.episode_record(sys.argv[2])
except UnsafePath as e:
    print("refused:", e)
except KeyError as e:
    print("not indexed:", e)
try:
    run.frame(int(sys.argv[3]))
except FrameError as e:
    print("frame:", e)
print("problems:", *[f"{p.file}:{p.line}: {p.message}" for p in run.problems], sep="\\n")
"""


@pytest.mark.parametrize("where", READ_PLACES + ["mine/GUIDE.md", "logs.txt"])
def test_readers_and_import_never_block_on_a_fifo(src: Path, tmp_path: Path, where: str) -> None:
    row = lines(src / "index.jsonl")[3]
    rel = place(src, where)
    make_fifo(src / rel)
    out = subprocess.run([sys.executable, "-c", READER, str(src), row["id"], str(row["first_step"] + 1)],
                         capture_output=True, text=True, timeout=HANG_GUARD, cwd=REPO)
    assert out.returncode == 0, out.stderr
    if where not in ("mine/GUIDE.md", "logs.txt"):
        assert "not a regular file (a FIFO)" in out.stdout, out.stdout
    dest = tmp_path / "dest"
    imported = mfm("import", str(src), str(dest))
    assert imported.returncode == 0 and "Traceback" not in imported.stderr, imported.stderr
    assert (dest / "run.json").is_file() and validate(dest).errors == []
    assert not any(p.is_fifo() for p in dest.rglob("*"))

"""Hostile input, round three (issue 47): what ``mfm pack``, ``mfm pack --unpack`` and the
other writers of a run do with links, FIFOs, damaged names and hostile zips planted in it.

Every case is built for real (symlinks, FIFOs, sockets, zips written byte by byte) on a copy
of a shipped sample run, and checked from the command line in a child process: one line on
stderr, no traceback, the exit code; nothing outside the run read or written (the outside
files' bytes, modification times and the outside folder's listing unchanged, none of their
bytes in the run); nothing of the run lost (it validates, or its episodes or its zip are as
they were)."""
from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import sys
import tracemalloc
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import REPO, bound_socket
from mfm.boundary import (TooLarge, UnsafePath, atomic_writer, copy_regular_files, open_regular, regular_files,
                          write_file_inside)
from mfm.memory import packed
from mfm.memory.appendlog import write_atomic
from mfm.memory.packed import PACK, pack_run
from mfm.validate import validate

SAMPLE = REPO / "sample_runs" / "diamond_mfm_s2"
SECRET = b"TOP-SECRET-outside-the-run-0473"
ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}|object at ")


@pytest.fixture(autouse=True)
def cold() -> None:
    packed.forget()


@dataclass
class Outside:
    """A folder beside the run holding a secret file, and how it looked when made."""

    folder: Path
    secret: Path
    listing: dict[str, tuple[bytes, int]]

    def untouched(self) -> None:
        """Every file outside is as it was (bytes and modification time) and no file was
        added, removed or made there."""
        assert _snapshot(self.folder) == self.listing


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    out = {}
    for p in sorted(folder.rglob("*")):
        st = p.lstat()
        out[p.relative_to(folder).as_posix()] = (p.read_bytes() if p.is_file() and not p.is_symlink() else b"",
                                                 st.st_mtime_ns)
    return out


@pytest.fixture
def outside(tmp_path: Path) -> Outside:
    folder = tmp_path / "outside"
    (folder / "ep_000000" / "state").mkdir(parents=True)
    secret = folder / "secret.txt"
    secret.write_bytes(SECRET)
    (folder / "ep_000000" / "state" / "state.json").write_bytes(SECRET)
    os.utime(secret, ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))
    return Outside(folder, secret, _snapshot(folder))


def _copy(tmp_path: Path, name: str = "run") -> Path:
    run = tmp_path / name
    shutil.copytree(SAMPLE, run)
    return run


def _first(run: Path) -> str:
    """The path, relative to the run, of the first episode folder holding a frame strip, a
    state and an action."""
    return next(f"episodes/{name}" for name in sorted(os.listdir(SAMPLE / "episodes"))
                if all((SAMPLE / "episodes" / name / f).is_file()
                       for f in ("frames/00000.webp", "state/state.json", "action.json")))


def _mfm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mfm.cli", *args], capture_output=True, text=True,
                          errors="backslashreplace", env={**os.environ, "PYTHONPATH": str(REPO)})


def _one_line(res: subprocess.CompletedProcess, code: int, *words: str) -> str:
    """The exit code is ``code`` and stderr is one line holding every word, no traceback and
    no object address."""
    assert "Traceback" not in res.stderr, res.stderr
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    for w in words:
        assert w in lines[0], lines[0]
    assert not ADDRESS.search(lines[0]), lines[0]
    return lines[0]


def _files(root: Path) -> dict[str, bytes]:
    """Every regular file under ``root`` and its bytes (links and other files left out)."""
    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = Path(dirpath) / n
            if p.is_file() and not p.is_symlink():
                out[p.relative_to(root).as_posix()] = p.read_bytes()
    return out


def _no_secret_in(run: Path) -> None:
    for rel, data in _files(run).items():
        assert SECRET not in data, rel


def _no_temporary_left(run: Path) -> None:
    left = [p for p in _names(run) if ".tmp-" in p]
    assert left == [], left


def _names(root: Path) -> list[str]:
    out = []
    for dirpath, dirs, names in os.walk(os.fsencode(root)):
        out += [os.fsdecode(os.path.join(dirpath, n)) for n in dirs + names]
    return out


def _members(run: Path) -> list[str]:
    with zipfile.ZipFile(run / PACK) as z:
        return sorted(z.namelist())


def _packed(tmp_path: Path) -> tuple[Path, bytes, list[str]]:
    """A packed copy of the sample run, its zip's bytes and member names."""
    run = _copy(tmp_path)
    assert pack_run(run).done
    return run, (run / PACK).read_bytes(), _members(run)


def _assert_validates(run: Path) -> None:
    c = validate(run)
    assert c.errors == [], c.errors


# --- 1. mfm pack --unpack with links planted where it writes ---------------------------------

def _plant_member_partial(run: Path, o: Outside) -> None:
    state = run / _first(run) / "state"
    state.mkdir(parents=True)
    (state / "state.json.partial").symlink_to(o.secret)


def _plant_member_link(run: Path, o: Outside) -> None:
    state = run / _first(run) / "state"
    state.mkdir(parents=True)
    (state / "state.json").symlink_to(o.secret)


def _plant_dangling_member_link(run: Path, o: Outside) -> None:
    state = run / _first(run) / "state"
    state.mkdir(parents=True)
    (state / "state.json").symlink_to(o.folder / "made-by-unpack.json")


def _plant_strip_link(run: Path, o: Outside) -> None:
    frames = run / _first(run) / "frames"
    frames.mkdir(parents=True)
    (frames / "00000.webp").symlink_to(o.secret)


def _plant_state_folder_link(run: Path, o: Outside) -> None:
    (run / _first(run)).mkdir(parents=True)
    (run / _first(run) / "state").symlink_to(o.folder / "ep_000000" / "state")


def _plant_episode_folder_link(run: Path, o: Outside) -> None:
    (run / "episodes").mkdir()
    (run / _first(run)).symlink_to(o.folder / "ep_000000")


def _plant_episodes_link(run: Path, o: Outside) -> None:
    (run / "episodes").symlink_to(o.folder)


def _plant_member_fifo(run: Path, o: Outside) -> None:
    state = run / _first(run) / "state"
    state.mkdir(parents=True)
    os.mkfifo(state / "state.json")


UNPACK_PLANTS = {
    "a link at a member's old temporary name": (_plant_member_partial, None),
    "a member's own name a link to a file outside": (_plant_member_link, "a symlink"),
    "a member's own name a dangling link leading outside": (_plant_dangling_member_link, "a symlink"),
    "a frame strip a link outside": (_plant_strip_link, "a symlink"),
    "a member's folder (state/) a link outside": (_plant_state_folder_link, "leads outside"),
    "an episode folder a link outside": (_plant_episode_folder_link, "leads outside"),
    "episodes/ a link outside": (_plant_episodes_link, "leads outside"),
    "a FIFO in a member's place": (_plant_member_fifo, "FIFO"),
}


@pytest.mark.parametrize("case", UNPACK_PLANTS)
def test_unpack_never_writes_through_a_planted_link(tmp_path: Path, outside: Outside, case: str) -> None:
    plant, refused = UNPACK_PLANTS[case]
    run, zip_bytes, members = _packed(tmp_path)
    plant(run, outside)
    res = _mfm("pack", "--unpack", str(run))
    outside.untouched()
    _no_temporary_left(run)
    if refused is None:
        assert res.returncode == 0 and res.stderr == "", res.stderr
        assert not (run / PACK).exists()
        state = run / _first(run) / "state" / "state.json"
        assert not state.is_symlink()
        assert state.read_bytes() == (SAMPLE / _first(run) / "state" / "state.json").read_bytes()
        assert _files(run / "episodes") == _files(SAMPLE / "episodes")
        _assert_validates(run)
        return
    _one_line(res, 1, f"mfm pack: {run}: {PACK}:", "members not unpacked, the zip kept", refused)
    assert (run / PACK).read_bytes() == zip_bytes and _members(run) == members
    _no_secret_in(run)
    assert not (outside.folder / "made-by-unpack.json").exists()


# --- 2. mfm pack with links planted where it writes or reads ---------------------------------

def test_pack_never_writes_through_a_link_at_the_zips_old_temporary_name(tmp_path: Path, outside: Outside) -> None:
    run = _copy(tmp_path)
    (run / packed.PARTIAL).symlink_to(outside.secret)
    res = _mfm("pack", str(run))
    assert res.returncode == 0 and res.stderr == "", res.stderr
    outside.untouched()
    assert (run / PACK).is_file() and not (run / PACK).is_symlink()
    assert not os.path.lexists(run / packed.PARTIAL)
    assert not (run / "episodes").exists()
    _assert_validates(run)
    res = _mfm("pack", "--unpack", str(run))
    assert res.returncode == 0, res.stderr
    assert _files(run / "episodes") == _files(SAMPLE / "episodes")
    _no_temporary_left(run)


def test_pack_skips_a_link_at_a_members_old_temporary_name(tmp_path: Path, outside: Outside) -> None:
    run = _copy(tmp_path)
    (run / _first(run) / "state" / "state.json.partial").symlink_to(outside.secret)
    res = _mfm("pack", str(run))
    assert res.returncode == 0, res.stderr
    outside.untouched()
    assert f"{_first(run)}/state/state.json.partial" not in _members(run)
    _no_secret_in(run)
    _assert_validates(run)


def _link_file(run: Path, rel: str, o: Outside) -> None:
    (run / rel).unlink()
    (run / rel).symlink_to(o.secret)


def _link_folder(run: Path, rel: str, o: Outside) -> None:
    shutil.rmtree(run / rel)
    (run / rel).symlink_to(o.folder / "ep_000000")


def _link_inside(run: Path, o: Outside) -> None:
    (run / _first(run) / "action.json").unlink()
    (run / _first(run) / "action.json").symlink_to(run / "run.json")


PACK_PLANTS = {
    "the zip's own name a link outside": (lambda run, o: (run / PACK).symlink_to(o.secret), PACK, "a symlink"),
    "a member a link outside": (lambda run, o: _link_file(run, f"{_first(run)}/state/state.json", o),
                                "state/state.json", "a symlink"),
    "a frame strip a link outside": (lambda run, o: _link_file(run, f"{_first(run)}/frames/00000.webp", o),
                                     "frames/00000.webp", "a symlink"),
    "an episode folder a link outside": (lambda run, o: _link_folder(run, _first(run), o), "episodes/ep_",
                                         "a symlink"),
    "a state folder a link outside": (lambda run, o: _link_folder(run, f"{_first(run)}/state", o), "/state",
                                      "a symlink"),
    "a link that stays inside the run": (_link_inside, "action.json", "a symlink"),
    "a FIFO": (lambda run, o: os.mkfifo(run / _first(run) / "state" / "pipe"), "state/pipe", "FIFO"),
    "a socket": (lambda run, o: bound_socket(run / _first(run) / "sock").close(), "sock", "socket"),
}


@pytest.mark.parametrize("case", PACK_PLANTS)
def test_pack_refuses_links_and_special_files_before_writing(tmp_path: Path, outside: Outside, case: str) -> None:
    plant, where, why = PACK_PLANTS[case]
    run = _copy(tmp_path)
    plant(run, outside)
    before = _files(run)
    res = _mfm("pack", str(run))
    _one_line(res, 1, f"mfm pack: {run}:", where, why)
    outside.untouched()
    assert _files(run) == before
    assert not (run / PACK).exists() or (run / PACK).is_symlink()
    _no_secret_in(run)
    _no_temporary_left(run)


# --- 4. episodes/ itself a link, or not a folder; the zip not a regular file ------------------

def test_pack_of_a_linked_episodes_folder_copies_nothing_and_validate_reports_it(
        tmp_path: Path, outside: Outside) -> None:
    run = _copy(tmp_path)
    kept = tmp_path / "kept"
    shutil.copytree(run / "episodes", kept)
    shutil.rmtree(run / "episodes")
    (run / "episodes").symlink_to(outside.folder)
    res = _mfm("pack", str(run))
    _one_line(res, 1, "episodes: a symlink, not followed", "nothing done")
    outside.untouched()
    assert not (run / PACK).exists() and (run / "episodes").is_symlink()
    _no_secret_in(run)
    res = _mfm("validate", str(run))
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert f"{run}/episodes: error: a symlink leading outside the run, not followed" in res.stdout, res.stdout
    assert "episode folder" not in res.stdout.replace("no episode folder is read", "")
    (run / "episodes").unlink()
    shutil.copytree(kept, run / "episodes")
    _assert_validates(run)


def test_a_linked_episodes_folder_inside_the_run_is_an_error_and_not_packed(tmp_path: Path) -> None:
    run = _copy(tmp_path)
    (run / "episodes").rename(run / "store")
    (run / "episodes").symlink_to("store")
    c = validate(run)
    assert [p.message for p in c.errors if p.file == "episodes"] == [
        "a symlink (a run's episodes must be its own folder or file; mfm pack refuses it)"], c.errors
    _one_line(_mfm("pack", str(run)), 1, "episodes: a symlink")
    assert _files(run / "store") == _files(SAMPLE / "episodes")


@pytest.mark.parametrize("kind", ["fifo", "file"])
def test_episodes_that_is_not_a_folder_is_an_error(tmp_path: Path, kind: str) -> None:
    run = _copy(tmp_path)
    shutil.rmtree(run / "episodes")
    if kind == "fifo":
        os.mkfifo(run / "episodes")
    else:
        (run / "episodes").write_bytes(b"x")
    res = _mfm("validate", str(run))
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert f"{run}/episodes: error: not a folder" in res.stdout, res.stdout
    _one_line(_mfm("pack", str(run)), 1, "episodes: not a folder")


@pytest.mark.parametrize("kind", ["link inside", "fifo", "folder"])
def test_a_zip_that_is_not_the_runs_own_regular_file_is_an_error(tmp_path: Path, kind: str) -> None:
    run, zip_bytes, _ = _packed(tmp_path)
    if kind == "link inside":
        (run / PACK).rename(run / "elsewhere.zip")
        (run / PACK).symlink_to("elsewhere.zip")
    elif kind == "fifo":
        (run / PACK).unlink()
        os.mkfifo(run / PACK)
    else:
        (run / PACK).unlink()
        (run / PACK).mkdir()
    res = _mfm("validate", "--frames", str(run))
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert f"{run}/{PACK}: error:" in res.stdout, res.stdout
    why = "a symlink, not followed" if kind == "link inside" else "not a regular file; nothing done"
    before = _files(run)
    for args in (("pack", "--unpack", str(run)), ("pack", str(run))):
        _one_line(_mfm(*args), 1, f"mfm pack: {run}: {PACK}: {why}")
    assert _files(run) == before
    if kind == "link inside":
        assert (run / "elsewhere.zip").read_bytes() == zip_bytes


# --- 11. hostile zips ----------------------------------------------------------------------

def _directory_entries(data: bytes) -> tuple[int, list[int]]:
    """The central directory's offset and the offset of each of its entries, read from the
    end record (a plain zip, no zip64)."""
    eocd = data.rfind(b"PK\x05\x06")
    count, _, cd_offset = struct.unpack_from("<HLL", data, eocd + 10)
    at, out = cd_offset, []
    for _ in range(count):
        assert data[at:at + 4] == b"PK\x01\x02"
        out.append(at)
        n_name, n_extra, n_comment = struct.unpack_from("<3H", data, at + 28)
        at += 46 + n_name + n_extra + n_comment
    return cd_offset, out


def _share(data: bytes, names: list[str], source: str) -> bytes:
    """``data`` with the entries ``names`` pointing at the bytes of the member ``source``
    (its offset, sizes, CRC and method): many names for one member."""
    out = bytearray(data)
    _, entries = _directory_entries(data)

    def name_at(at: int) -> str:
        n = struct.unpack_from("<H", data, at + 28)[0]
        return data[at + 46:at + 46 + n].decode()

    src = next(at for at in entries if name_at(at) == source)
    for at in entries:
        if name_at(at) in names and name_at(at) != source:
            out[at + 10:at + 12] = data[src + 10:src + 12]
            out[at + 16:at + 28] = data[src + 16:src + 28]
            out[at + 42:at + 46] = data[src + 42:src + 46]
    return bytes(out)


def _bomb_zip(path: Path, entries: int, size: int = 64 * 1024 * 1024 - 1) -> None:
    """A zip of ``entries`` names whose directory entries all point at one deflated member
    of ``size`` zero bytes."""
    body = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    comp = body.compress(bytes(size)) + body.flush()
    crc = zlib.crc32(bytes(size))
    first = "episodes/ep_000000/frames/00000.webp"
    local = struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 8, 0, 0, crc, len(comp), size, len(first), 0)
    data = local + first.encode() + comp
    cd = b""
    for k in range(entries):
        name = f"episodes/ep_{k:06d}/frames/00000.webp".encode()
        cd += struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, 8, 0, 0, crc, len(comp), size, len(name), 0, 0,
                          0, 0, 0, 0) + name
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, entries, entries, len(cd), len(data), 0)
    path.write_bytes(data + cd + end)


def _problems_of_the_zip(run: Path, *args: str) -> list[str]:
    res = _mfm("validate", *args, str(run))
    assert "Traceback" not in res.stderr, res.stderr
    assert res.returncode == 1, res.stdout
    lines = [line for line in res.stdout.splitlines() if f"/{PACK}: error:" in line]
    for line in res.stdout.splitlines():
        assert not ADDRESS.search(line), line
    return lines


def test_many_entries_sharing_one_inflated_member_are_refused_before_any_is_read(tmp_path: Path) -> None:
    run, _, _ = _packed(tmp_path)
    _bomb_zip(run / PACK, 100)
    lines = _problems_of_the_zip(run, "--frames")
    assert len(lines) == 1 and "share their bytes" in lines[0], lines
    with open(run / PACK, "rb") as f, pytest.raises(packed.PackError, match="share their bytes"):
        packed._read_directory(f, (run / PACK).stat().st_size)


def test_many_names_for_one_valid_strip_are_refused_at_every_entry_point(tmp_path: Path) -> None:
    run, zip_bytes, members = _packed(tmp_path)
    strips = [m for m in members if m.endswith(".webp")]
    (run / PACK).write_bytes(_share(zip_bytes, strips, strips[0]))
    lines = _problems_of_the_zip(run, "--frames")
    assert len(lines) == 1 and "share their bytes" in lines[0] and "a hostile zip" in lines[0], lines
    dest = tmp_path / "imported"
    res = _mfm("import", str(run), str(dest))
    assert "Traceback" not in res.stderr and res.returncode == 0, res.stderr
    assert "share their bytes" in res.stdout
    assert validate(dest).errors == [] and not (dest / PACK).exists()
    assert not [p for p in _files(dest) if p.endswith(".webp")]
    _one_line(_mfm("pack", "--unpack", str(run)), 1, "share their bytes")
    assert not (run / "episodes").exists()


def test_overlapping_members_are_refused(tmp_path: Path) -> None:
    run, zip_bytes, members = _packed(tmp_path)
    _, entries = _directory_entries(zip_bytes)
    out = bytearray(zip_bytes)
    second = struct.unpack_from("<L", zip_bytes, entries[1] + 42)[0]
    struct.pack_into("<L", out, entries[1] + 42, second - 8)
    (run / PACK).write_bytes(bytes(out))
    lines = _problems_of_the_zip(run)
    assert len(lines) == 1 and "overlap" in lines[0], lines


def test_a_zip_declaring_more_entries_than_the_bound_is_refused_unparsed(tmp_path: Path) -> None:
    run, zip_bytes, _ = _packed(tmp_path)
    eocd = zip_bytes.rfind(b"PK\x05\x06")
    _, _, _, _, entries, cd_size, cd_offset, _ = struct.unpack_from("<4s4H2LH", zip_bytes, eocd)
    declared = packed.MAX_MEMBERS * 20
    z64 = struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, declared, declared, cd_size, cd_offset)
    locator = struct.pack("<4sLQL", b"PK\x06\x07", 0, eocd, 1)
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    (run / PACK).write_bytes(zip_bytes[:eocd] + z64 + locator + end)
    lines = _problems_of_the_zip(run)
    assert len(lines) == 1 and f"declares {declared} entries" in lines[0], lines


def test_a_zip_bomb_of_small_members_is_refused_by_its_total_inflation(tmp_path: Path) -> None:
    run, _, members = _packed(tmp_path)
    with zipfile.ZipFile(run / PACK, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name in members:
            z.writestr(name, bytes(4 * 1024 * 1024) if name.endswith(".webp") else (SAMPLE / name).read_bytes())
    assert (run / PACK).stat().st_size * packed.MAX_INFLATION < 169 * 4 * 1024 * 1024
    lines = _problems_of_the_zip(run, "--frames")
    assert len(lines) == 1 and "zip bomb" in lines[0], lines


def _many_member_zip(path: Path, count: int) -> None:
    with zipfile.ZipFile(path, "w") as z:
        for k in range(count):
            z.writestr(f"episodes/ep_{k:06d}/state/state.json", b"{}")


def test_the_kept_directories_are_bounded_by_bytes_and_the_estimate_is_honest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = []
    for k in range(4):
        run = tmp_path / f"r{k}"
        run.mkdir()
        _many_member_zip(run / PACK, 20_000)
        runs.append(run)
    packed.forget()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    found = packed.directory(runs[0])
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    assert found is not None and len(found.members) == 20_000
    assert held <= found.weight(), (held, found.weight())
    monkeypatch.setattr(packed, "KEPT_BYTES", int(found.weight() * 2.5))
    for run in runs:
        packed.directory(run)
    assert packed.kept_bytes() <= packed.KEPT_BYTES
    assert list(packed._dirs) == [str(r / PACK) for r in runs[-2:]]


# --- 15. names a pack cannot hold ------------------------------------------------------------

NAMES = {
    "not UTF-8": b"state-\xff\xfe.json",
    "a backslash": b"state\\evil.json",
    "a newline": b"state\nsecond-line.json",
    "a control character": b"state\x07.json",
}


@pytest.mark.parametrize("case", NAMES)
def test_pack_refuses_a_name_it_cannot_store_and_leaves_nothing_behind(tmp_path: Path, case: str) -> None:
    run = _copy(tmp_path)
    bad = os.path.join(os.fsencode(run / _first(run)), NAMES[case])
    with open(bad, "wb") as f:
        f.write(b"{}")
    before = _files(run)
    res = _mfm("pack", str(run))
    _one_line(res, 1, f"mfm pack: {run}:", _first(run), "refused", "nothing packed")
    assert _files(run) == before and os.path.exists(bad)
    assert not (run / PACK).exists()
    _no_temporary_left(run)


@pytest.mark.parametrize("name", ["episodes/a\\b.json", "episodes/a\x07.json", "episodes/x/../../run.json"])
def test_unpack_refuses_a_member_name_before_writing_anything(tmp_path: Path, name: str) -> None:
    run, _, _ = _packed(tmp_path)
    with zipfile.ZipFile(run / PACK, "a") as z:
        z.writestr(name, b"x")
    zip_bytes = (run / PACK).read_bytes()
    _one_line(_mfm("pack", "--unpack", str(run)), 1, "is not a plain path under episodes/", "nothing done")
    assert not (run / "episodes").exists() and (run / PACK).read_bytes() == zip_bytes


# --- 16. unpacking over files already there ----------------------------------------------------

def _state(run: Path) -> Path:
    return run / _first(run) / "state" / "state.json"


CONFLICTS = {
    "a damaged copy on disk": (lambda p: p.write_bytes(b'{"damaged": tru'), "differs from the zip's copy"),
    "a folder in the member's place": (lambda p: p.mkdir(), "folder"),
    "a file in the member's folder's place": (lambda p: p.parent.rmdir() or p.parent.write_bytes(b"x"),
                                              "folder goes"),
}


@pytest.mark.parametrize("case", CONFLICTS)
def test_unpack_keeps_the_zip_and_reports_files_in_the_way(tmp_path: Path, case: str) -> None:
    make, why = CONFLICTS[case]
    run, zip_bytes, members = _packed(tmp_path)
    _state(run).parent.mkdir(parents=True)
    make(_state(run))
    res = _mfm("pack", "--unpack", str(run))
    line = _one_line(res, 1, f"1 of {len(members)} members not unpacked, the zip kept", why)
    assert f"{_first(run)}/state" in line
    assert (run / PACK).read_bytes() == zip_bytes
    on_disk = _files(run / "episodes")
    expected = {k: v for k, v in _files(SAMPLE / "episodes").items() if not k.startswith(_first(run)[9:] + "/state")}
    assert {k: v for k, v in on_disk.items() if k in expected} == expected
    assert res.stdout == ""


def test_unpack_over_identical_files_finishes_and_counts_every_member(tmp_path: Path) -> None:
    run, _, members = _packed(tmp_path)
    shutil.copytree(SAMPLE / _first(run), run / _first(run))
    res = _mfm("pack", "--unpack", str(run))
    assert res.returncode == 0 and res.stderr == ""
    assert f"unpacked; {len(members)} episode files" in res.stdout
    assert not (run / PACK).exists()
    assert _files(run / "episodes") == _files(SAMPLE / "episodes")


# --- the boundary's write and walk primitives ----------------------------------------------

def test_write_atomic_replaces_a_link_and_never_writes_through_one(tmp_path: Path, outside: Outside) -> None:
    run = _copy(tmp_path)
    (run / f".run.json.tmp{os.getpid()}").symlink_to(outside.secret)
    data = (run / "run.json").read_bytes()
    (run / "run.json").unlink()
    (run / "run.json").symlink_to(outside.secret)
    write_atomic(run / "run.json", data)
    outside.untouched()
    assert not (run / "run.json").is_symlink() and (run / "run.json").read_bytes() == data
    _no_temporary_left(run)


def test_atomic_writer_refuses_a_folder_outside_and_cleans_up_on_error(tmp_path: Path, outside: Outside) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "away").symlink_to(outside.folder)
    with pytest.raises(UnsafePath, match="leads outside"):
        write_file_inside(root, "away/new.json", b"x")
    with pytest.raises(UnsafePath, match="not a plain relative path"):
        write_file_inside(root, "../new.json", b"x")
    with pytest.raises(RuntimeError), atomic_writer(root, "a/b.json") as f:
        f.write(b"half")
        raise RuntimeError("stopped mid-write")
    assert os.listdir(root / "a") == []
    write_file_inside(root, "a/b.json", b"one")
    with pytest.raises(FileExistsError):
        write_file_inside(root, "a/b.json", b"two", overwrite=False)
    assert (root / "a" / "b.json").read_bytes() == b"one" and os.listdir(root / "a") == ["b.json"]
    outside.untouched()


def test_regular_files_reports_links_and_special_files_and_copies_regular_files_only(
        tmp_path: Path, outside: Outside) -> None:
    src = tmp_path / "src"
    (src / "a" / "b").mkdir(parents=True)
    (src / "a" / "b" / "keep.md").write_bytes(b"kept")
    (src / "top.md").write_bytes(b"top")
    (src / "a" / "file-link").symlink_to(outside.secret)
    (src / "a" / "folder-link").symlink_to(outside.folder)
    (src / "a" / "inside-link").symlink_to("b/keep.md")
    os.mkfifo(src / "a" / "pipe")
    with open(os.path.join(os.fsencode(src), b"bad-\xff"), "wb") as f:
        f.write(b"x")
    skipped: list[tuple[str, str]] = []
    copied = copy_regular_files(src, tmp_path / "dst", 100, 1000, skipped)
    assert [(e.rel, e.size) for e in copied] == [("a/b/keep.md", 4), ("top.md", 3)]
    assert _files(tmp_path / "dst") == {"a/b/keep.md": b"kept", "top.md": b"top"}
    assert sorted(r for r, _ in skipped) == ["a/file-link", "a/folder-link", "a/inside-link", "a/pipe",
                                             "bad-\udcff"]
    assert dict(skipped)["a/pipe"].startswith("not a regular file (a FIFO)")
    with pytest.raises(UnsafePath, match=r"'bad-\\udcff': a name that is not UTF-8, refused"):
        regular_files(src, 100, 1000)
    with pytest.raises(TooLarge, match="more than 3 bytes"):
        regular_files(src, 100, 3, [])
    with pytest.raises(TooLarge, match="more than 4 files and folders"):
        regular_files(src, 4, 1000, [])
    (tmp_path / "linked-root").symlink_to(src)
    with pytest.raises(UnsafePath, match="a symlink"):
        regular_files(tmp_path / "linked-root", 100, 1000, [])
    with pytest.raises(UnsafePath, match="FIFO"):
        open_regular(src, "a/pipe")
    outside.untouched()


@pytest.mark.parametrize("name", ["index.jsonl", "steps.jsonl", "grid.jsonl", "logs.txt", "run.json"])
def test_a_run_file_linked_outside_is_never_read(tmp_path: Path, outside: Outside, name: str) -> None:
    """A table, the log or the manifest replaced by a link to a file outside the run is
    reported as a link and not read: the outside file's text shows nowhere."""
    from loaders import open_run

    run = _copy(tmp_path)
    (run / name).unlink()
    (run / name).symlink_to(outside.secret)
    report = validate(run)
    assert any(p.file.endswith(name) and "symbolic link" in p.message for p in report.problems) or name == "logs.txt"
    opened = open_run(run)
    text = repr([str(p) for p in opened.problems]) + repr(opened.summary())
    assert SECRET.decode() not in text
    outside.untouched()


@pytest.mark.parametrize("where", ["strip", "state", "observation"])
def test_recording_never_writes_through_a_link_planted_at_an_episode_file(tmp_path: Path, outside: Outside,
                                                                        where: str) -> None:
    """An episode's files are created without following a link already at their name: the
    write fails (a WriteError naming the file) and the outside file keeps its bytes."""
    from mfm.memory.appendlog import WriteError, write_file, writing

    folder = tmp_path / "run" / "episodes" / "ep_000001"
    target = {"strip": folder / "frames" / "000000.webp", "state": folder / "state" / "state.json",
              "observation": folder / "observation" / "image.png"}[where]
    target.parent.mkdir(parents=True)
    target.symlink_to(outside.secret)
    with pytest.raises(WriteError), writing(target):
        write_file(target, b"new bytes")
    assert target.is_symlink()
    outside.untouched()

"""Hostile input, round three (issue 47): one run named many ways, counts from files that
drive loops, and objects in a bucket that are too large or both a file and a folder.

Everything is real: copies of a shipped sample run on disk, the dashboard through AppTest,
``mfm validate`` as a command, and a real S3 server on loopback (moto's, the ``s3`` fixture)
read through s3fs. Work is measured by what was done (runs opened, problems found, files
opened, object GETs in the server's log, files in the mirror), never by time."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import open_app, use_root
from loaders.provenance import file_as_of

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "sample_runs" / "diamond_mfm_s2"
OTHER = REPO / "sample_runs" / "diamond_direct_s2_2500steps"
GUARD = 600.0
"""Seconds after which a child process is taken to hang (each takes seconds here)."""
MiB = 1 << 20


def lines_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def write_lines(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def errors(problems: list) -> list:
    return [p for p in problems if p.severity == "error"]


# ---------------------------------------------------------------- 9: one run, many names

@pytest.fixture
def alias_root(tmp_path: Path) -> Path:
    """A runs root holding ``good`` (an mfm run), ``other`` (a direct run), ``twin`` (a
    second copy of ``good``: another run with the same content) and ``link``, a symlink to
    ``good`` inside the root."""
    root = tmp_path / "root"
    root.mkdir()
    shutil.copytree(SAMPLE, root / "good")
    shutil.copytree(OTHER, root / "other")
    shutil.copytree(SAMPLE, root / "twin")
    (root / "link").symlink_to(root / "good", target_is_directory=True)
    return root


ALIASES = ["good", "./good", "good/", "././good", ".//good", "good//", "link", "link/", "./link"]


def test_run_keys_naming_one_run_resolve_to_it_once(alias_root: Path) -> None:
    """Every spelling of one run's key (``./x``, ``x/``, a symlink to it inside the root)
    gives that run once, keyed by its folder; ``a/../x`` is refused (no ``..`` in a key),
    once however often it is given; a distinct run with the same content stays distinct."""
    from dashboard.ui import resolve_run_keys

    keys = ALIASES * 30 + ["other", "a/../good"] * 20 + ["twin", *ALIASES]
    found, refused = resolve_run_keys(alias_root, keys)
    assert [k for k, _ in found] == ["good", "other", "twin"]
    assert [p for _, p in found] == [alias_root / "good", alias_root / "other", alias_root / "twin"]
    assert len(refused) == 1 and "'a/../good'" in refused[0]


def test_the_dashboard_opens_an_aliased_run_once_and_counts_it_once(alias_root: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """``runs=`` naming ``good`` 270 ways, ``other`` once and ``a/../good`` 40 times: the
    Progress page opens two runs (the run picker lists each once), its table counts one
    seed per method, and the refused spelling is one message."""
    use_root(monkeypatch, alias_root)
    runs = ",".join(ALIASES * 30 + ["other"] + ["a/../good"] * 40)
    at = open_app("progress", runs=runs)
    assert at.selectbox(key="w_focus").options == ["good", "other"]
    table = next(d.value for d in at.dataframe if "seeds" in d.value.columns)
    assert sorted(table["method"]) == ["direct", "mfm"]
    assert table["seeds"].tolist() == [1, 1]
    refusals = [e.value for e in at.error]
    assert len(refusals) == 1 and "a/../good" in refusals[0]


def test_statistics_count_each_run_once(alias_root: Path) -> None:
    """Handed one run under many keys (and as separately opened objects), every statistic
    counts it once: the Progress bands and legend, the milestones, retargeting and paper
    tables; a second run with the same content (``twin``) is a second seed."""
    from loaders import analysis_pages as ap
    from loaders import chart_data, paper_tables
    from loaders.run import open_run

    good = open_run(alias_root / "good")
    pairs = [(k, good) for k in ALIASES] + [("link", open_run(alias_root / "link")),
                                            ("./good", open_run(f"{alias_root}/./good"))]
    bands = chart_data.progress(pairs)
    assert bands.seeds("mfm") == 1 and bands.label("mfm") == "mfm (1 run)"
    assert chart_data.steps_per_turn(pairs).seeds("mfm") == 1
    ms = ap.measures(pairs)
    assert len(ms) == 1
    assert ap.milestone_summary(ms + ms)["seeds"].tolist() == [1]
    per_run, per_method = ap.retarget_tables(pairs)
    assert len(per_run) == 1 and per_method["runs"].tolist() == [1]
    assert paper_tables.retargeting(ms * 5)["seeds"].tolist() == [1]
    both = pairs + [("twin", open_run(alias_root / "twin"))]
    assert chart_data.progress(both).seeds("mfm") == 2
    assert ap.milestone_summary(ap.measures(both))["seeds"].tolist() == [2]


def test_open_runs_and_figures_open_a_run_named_twice_once(alias_root: Path) -> None:
    """``open_runs`` and ``mfm figures`` given the same run under several spellings (and
    the root holding it) open it once."""
    from dashboard.figures import _expand
    from loaders.run import open_runs

    spellings = [alias_root / "good", f"{alias_root}/./good", f"{alias_root}/good/", alias_root / "link",
                 f"{alias_root}/other/../good"]
    runs = open_runs([*spellings, alias_root])
    assert sorted(r.name for r in runs) == ["good", "other", "twin"]
    assert [k for k, _ in _expand(spellings)] == ["good"]
    assert sorted(k for k, _ in _expand([*spellings, alias_root])) == ["good", "other", "twin"]


def test_bucket_urls_naming_one_run_open_it_once(s3, small_run: Path) -> None:
    """A bucket root and its runs named as ``s3://b/root``, ``s3://b/root/``,
    ``s3://b//root``, ``s3://b/root/./``, and one run by its own URL: each run once. Keys
    that differ only in case are different objects, so ``GOOD`` is another run."""
    from loaders.run import open_runs

    s3.mkdir("hb-alias")
    for name in ("good", "GOOD"):
        s3.put(str(small_run), f"hb-alias/root/{name}", recursive=True)
    s3.invalidate_cache()
    runs = open_runs(["s3://hb-alias/root", "s3://hb-alias/root/", "s3://hb-alias//root", "s3://hb-alias/root/./",
                      "s3://hb-alias/root/good", "s3://hb-alias/root/good/"])
    assert sorted(r.name for r in runs) == ["GOOD", "good"]


# ---------------------------------------------------------------- 10: counts that drive loops

@pytest.fixture
def count_run(tmp_path: Path) -> Path:
    run = tmp_path / "counts"
    shutil.copytree(SAMPLE, run)
    return run


def frames_row(run: Path, frames: object, steps: object = None) -> int:
    """Append an index row naming an existing episode folder that holds frames, with
    ``frames`` (and ``steps`` steps, default as many as the frames if they are a number);
    its line number."""
    rows = lines_of(run / "index.jsonl")
    donor = next(r for r in rows if r.get("frames", 0) >= 2)
    first = max(r["last_step"] for r in rows) + 1
    number = isinstance(frames, (int, float)) and not isinstance(frames, bool) and frames >= 1
    span = steps if steps is not None else (int(frames) if number else 5)
    row = {**donor, "id": f"ep_{len(rows) + 500:06d}", "first_step": first, "last_step": first + span,
           "frames": frames}
    write_lines(run / "index.jsonl", rows + [row])
    return len(rows) + 1


HOSTILE_FRAMES = [
    pytest.param(64_000_000, None, "exceeds the bound", id="64-million"),
    pytest.param(10_001, None, "exceeds the bound", id="one-over-the-bound"),
    pytest.param(10 ** 30, None, "exceeds the bound", id="10^30"),
    pytest.param(6.4e7, None, "exceeds the bound", id="float-64-million"),
    pytest.param(1e300, None, "exceeds the bound", id="1e300"),
    pytest.param(-5, None, "must not be negative", id="negative"),
    pytest.param(3.5, None, "must be an integer", id="fraction"),
    pytest.param("64000000", None, "must be an integer", id="string"),
    pytest.param(True, None, "must be an integer", id="bool"),
    pytest.param(64, 10, "exceeds the episode's 10 steps", id="more-than-its-steps"),
]


@pytest.mark.parametrize("frames,steps,message", HOSTILE_FRAMES)
def test_an_episode_claiming_too_many_frames_is_one_error_at_its_line(count_run: Path, frames: object,
                                                                       steps: object, message: str) -> None:
    """A row whose ``frames`` is beyond the bound (or negative, a fraction, a string) is one
    error at its line and skipped, by ``mfm.validate`` and by ``open_run``: no frame strip
    of it is looked for (else each of its strips past the first would be a missing-strip
    error: up to a million), every other row is kept, and the Runs page lists the run."""
    from loaders.run import open_run
    from loaders.runs_summary import runs_overview
    from mfm.validate import validate

    before = len(lines_of(count_run / "index.jsonl"))
    clean = validate(count_run).problems
    line = frames_row(count_run, frames, steps)
    run = open_run(count_run)
    assert len(run.episodes()) == before
    for problems in (validate(count_run).problems, run.problems):
        new = [p for p in problems if p not in clean]
        assert len(new) == 1, new
        assert (new[0].file, new[0].line, new[0].severity) == ("index.jsonl", line, "error")
        assert "frames" in new[0].message and message in new[0].message and len(new[0].message) < 200
    table = runs_overview([run], count_run.parent)
    assert table["key"].tolist() == ["counts"] and table["problems"].tolist() == [len(clean) + 1]


def test_the_bound_is_the_limit_of_the_work(count_run: Path) -> None:
    """A row at exactly the bound is valid: its strips are looked for, and the work is the
    bound's (157 strips, every one but the donor's first missing), not more."""
    from mfm.schema import FRAMES_PER_CHUNK, MAX_EPISODE_FRAMES
    from mfm.validate import validate

    clean = validate(count_run).problems
    line = frames_row(count_run, MAX_EPISODE_FRAMES)
    new = [p for p in validate(count_run).problems if p not in clean]
    strips = -(-MAX_EPISODE_FRAMES // FRAMES_PER_CHUNK)
    assert all(p.line == line and "frame strip" in p.message and "is missing" in p.message for p in new)
    assert len(new) == strips - 1


def test_mfm_validate_opens_no_more_files_for_a_hostile_count(count_run: Path, tmp_path: Path) -> None:
    """``mfm validate --frames`` (a child process counting every file it opens with an audit
    hook) opens as many files for the run with a 64-million-frame row as for the clean run,
    and prints that row's one error."""
    clean = tmp_path / "clean"
    shutil.copytree(count_run, clean)
    line = frames_row(count_run, 64_000_000)
    code = ("import atexit, sys\n"
            "opened = [0]\n"
            "sys.addaudithook(lambda event, args: opened.__setitem__(0, opened[0] + (event == 'open')))\n"
            "atexit.register(lambda: sys.stderr.write(f'OPENED {opened[0]}\\n'))\n"
            "from mfm.cli import main\n"
            "raise SystemExit(main(['validate', sys.argv[1], '--frames']))\n")

    def opened(run: Path) -> tuple[int, str]:
        done = subprocess.run([sys.executable, "-c", code, str(run)], capture_output=True, text=True, timeout=GUARD,
                              cwd=REPO)
        assert "Traceback" not in done.stderr, done.stderr
        return int(done.stderr.rsplit("OPENED ", 1)[1].split()[0]), done.stdout

    base, _ = opened(clean)
    got, out = opened(count_run)
    assert got <= base + 2, (got, base)
    assert f"index.jsonl:{line}: error: frames 64,000,000 exceeds the bound" in out
    assert len([x for x in out.splitlines() if ": error:" in x]) == 1 and "INVALID: 1 error(s)" in out, out


def test_the_fast_reader_declines_a_count_beyond_the_bound(tmp_path: Path) -> None:
    """An index large enough for the fast one-pass reader (over 256 KiB) with one row beyond
    the frames bound: the fast path declines and the tolerant reader reports that row alone
    (the same index without it is read by the fast path, as columns)."""
    from loaders.cachedread import read_one_table_fast
    from loaders.fastread import MIN_BYTES

    donors = lines_of(SAMPLE / "index.jsonl")
    rows, step = [], 0
    for i in range(1200):
        d = donors[i % len(donors)]
        span = d["last_step"] - d["first_step"]
        rows.append({**d, "id": f"ep_{i:06d}", "first_step": step, "last_step": step + span})
        step += span
    path = tmp_path / "index.jsonl"
    write_lines(path, rows)
    assert path.stat().st_size > MIN_BYTES
    assert read_one_table_fast(path, "index.jsonl").columns is not None
    rows[700] = {**rows[700], "frames": 64_000_000, "last_step": rows[700]["first_step"] + 64_000_000}
    write_lines(path, rows)
    read = read_one_table_fast(path, "index.jsonl")
    assert [(p.line, p.severity) for p in read.problems] == [(701, "error")]
    assert "exceeds the bound" in read.problems[0].message
    assert len(read.records) == 1199


def test_a_turn_spanning_a_trillion_steps_is_scrubbed_without_walking_them(count_run: Path) -> None:
    """A turn row claiming steps 0 to 10^12 in a life with no frames: the Turns page's frame
    scrubber looks only at the frames held, not at every step of the span (a child process,
    so a walk of 10^12 steps would be a hang caught by the guard, not a stuck test run)."""
    turns = lines_of(count_run / "turns.jsonl")
    turns.append({**turns[-1], "turn": turns[-1]["turn"] + 1, "life": 7, "first_step": 0, "last_step": 10 ** 12})
    write_lines(count_run / "turns.jsonl", turns)
    code = ("import sys\n"
            "from loaders.run import open_run\n"
            "from loaders.scrubber import steps_scrub\n"
            "run = open_run(sys.argv[1])\n"
            "t = run.records('turns.jsonl')[-1]\n"
            "print(t.last_step, steps_scrub(run, t.first_step + 1, t.last_step, t.life)[0])\n")
    done = subprocess.run([sys.executable, "-c", code, str(count_run)], capture_output=True, text=True, timeout=GUARD,
                          cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(10 ** 12), "0"]


# ---------------------------------------------------------------- 12: objects in a bucket

@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample run cut after its 30th episode (every table cut at that step, the later
    episode folders removed): a whole run that validates clean, quick to upload many times."""
    run = tmp_path_factory.mktemp("small") / "small"
    shutil.copytree(SAMPLE, run)
    rows = lines_of(run / "index.jsonl")
    last = rows[29]["last_step"]
    write_lines(run / "index.jsonl", rows[:30])
    for r in rows[30:]:
        shutil.rmtree(run / r["path"])
    for table, key in (("steps.jsonl", "step"), ("turns.jsonl", "last_step"), ("grid.jsonl", "step"),
                       ("seen.jsonl", "last_step"), ("memory_writes.jsonl", "step"), ("milestones.jsonl", "step"),
                       ("lives.jsonl", "step")):
        write_lines(run / table, [r for r in lines_of(run / table) if r[key] <= last])
    manifest = json.loads((run / "run.json").read_text())
    manifest.update(last_step=last, milestones={k: v for k, v in manifest["milestones"].items() if v <= last})
    (run / "run.json").write_text(json.dumps(manifest))
    return run


def moto_gets(factory: pytest.TempPathFactory, key: str) -> int:
    """How many GETs of the object ``key`` (``bucket/path``) the S3 server has served."""
    logs = sorted(factory.getbasetemp().glob("moto*/moto.log"))
    return sum(log.read_text(errors="replace").count(f'"GET /{key} ') for log in logs)


def parts(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.name.endswith(".part")]


@pytest.fixture
def small_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bounds of 1 MiB for tables, images and episode records, so objects over them are
    small to upload (the manifest's and agent memory's bounds stay as shipped: 16 MiB)."""
    from mfm.objectstore import OBJECT_LIMITS

    for kind in ("table", "image", "record"):
        monkeypatch.setitem(OBJECT_LIMITS, kind, MiB)


OVERSIZE = {
    "big-manifest": ("run.json", 17 * MiB),
    "big-memory": ("mine/GUIDE.md", 17 * MiB),
    "big-table": ("steps.jsonl", 2 * MiB),
    "big-strip": ("episodes/ep_000005/frames/00000.webp", 2 * MiB),
    "big-record": ("episodes/ep_000005/state/state.json", 2 * MiB),
}
"""Run name -> (the key replaced by a larger object, its size)."""


def test_oversize_objects_are_refused_before_download(s3, small_bounds: None, small_run: Path,
                                                      tmp_path_factory: pytest.TempPathFactory) -> None:
    """An object over its kind's bound (a manifest, an agent-memory file, a table, a frame
    strip, an episode record) is never downloaded (no GET of it reaches the server, no file
    of it in the mirror, no ``.part`` left): it is one error naming the key, the run opens
    with everything else, and every run of the root is listed."""
    from loaders.remote.mirror import mirror_dir
    from loaders.run import open_run, open_runs
    from loaders.runs_summary import runs_overview
    from mfm.memory.retrieval import FrameError
    from mfm.objectstore import OBJECT_LIMITS, StoreError, read_bytes

    b = "hb-oversize"
    s3.mkdir(b)
    for name in ("good", *OVERSIZE):
        s3.put(str(small_run), f"{b}/root/{name}", recursive=True)
    for name, (key, size) in OVERSIZE.items():
        s3.pipe_file(f"{b}/root/{name}/{key}", b"x" * size)
    s3.invalidate_cache()
    url = f"s3://{b}/root"
    runs = {r.name: r for r in open_runs(url)}
    assert sorted(runs) == sorted(["good", *OVERSIZE])
    table = runs_overview(list(runs.values()), mirror_dir(url))
    assert sorted(table["key"]) == sorted(runs)
    clean = set(map(str, runs["good"].problems))
    for name, (key, size) in OVERSIZE.items():
        run = runs[name]
        new = [p for p in run.problems if str(p) not in clean]
        assert len(new) == 1, (name, new)
        assert (new[0].file, new[0].line, new[0].severity) == (key, 0, "error")
        assert f"{size:,} bytes in the bucket, over the" in new[0].message and "not fetched" in new[0].message
    assert runs["big-manifest"].manifest is None and len(runs["big-manifest"].episodes()) == 30
    assert runs["big-table"].steps().empty and len(runs["big-table"].turns()) == len(runs["good"].turns()) > 10
    with pytest.raises(FrameError, match="over the 1 MiB bound"):
        runs["big-strip"].frame(next(r.first_step + 1 for r in runs["big-strip"].records("index.jsonl")
                                     if r.id == "ep_000005"))
    assert runs["big-record"].episode_record("ep_000005").state is None
    assert runs["big-strip"].frame(1).shape[2] == 3
    with pytest.raises(StoreError, match="over the 16 MiB bound for a run manifest"):
        read_bytes(f"{url}/big-manifest/run.json")
    for name, (key, _) in OVERSIZE.items():
        assert moto_gets(tmp_path_factory, f"{b}/root/{name}/{key}") == 0, key
        assert not (mirror_dir(url) / name / key).exists()
    assert parts(mirror_dir(url)) == []
    assert OBJECT_LIMITS["manifest"] == 16 * MiB


def test_mfm_validate_names_an_oversize_object_in_one_line(s3, small_run: Path) -> None:
    """``mfm validate s3://…`` of a run with a 17 MiB agent-memory file prints one error
    naming it and exits 1; with ``--frames`` too; no traceback."""
    b = "hb-validate-big"
    s3.mkdir(b)
    s3.put(str(small_run), f"{b}/run", recursive=True)
    s3.pipe_file(f"{b}/run/mine/GUIDE.md", b"y" * (17 * MiB))
    for extra in ((), ("--frames",)):
        done = subprocess.run([sys.executable, "-m", "mfm.cli", "validate", f"s3://{b}/run", *extra],
                              capture_output=True, text=True, timeout=GUARD, cwd=REPO)
        assert "Traceback" not in done.stderr, done.stderr
        assert done.returncode == 1
        bad = [line for line in done.stdout.splitlines() if ": error:" in line]
        assert bad == [f"s3://{b}/run/mine/GUIDE.md: error: 17,825,792 bytes in the bucket, over the 16 MiB bound "
                       "for an agent-memory file: not fetched"], done.stdout


CONFLICTS = {
    "c-mine": ("mine", "mine", "the object is left out"),
    "c-deep": ("mine/procedures", "mine/procedures", "the object is left out"),
    "c-table": ("index.jsonl/old/part.json", "index.jsonl", "the folder is left out"),
    "c-manifest": ("run.json/x", "run.json", "the folder is left out"),
    "c-episodes": ("episodes", "episodes", "the object is left out"),
    "c-frames": ("episodes/ep_000005/frames", "episodes/ep_000005/frames", "the object is left out"),
}
"""Run name -> (the key added beside the run's files, the key the problem names, which side goes)."""


def test_a_key_that_is_both_an_object_and_a_folder_is_one_problem(s3, small_run: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A key that is both an object and a folder of objects, in a run's top folder, in
    ``mine/``, deeper in ``mine/``, beside a table, beside the manifest, at ``episodes`` and
    inside an episode (and at the root, beside a run): every run of the root is listed (also
    by the dashboard's Runs page) and opens; each damaged run has one problem naming the key,
    and otherwise reads as the clean run (its tables, its memory, its frames); no ``.part``
    file is left in the mirror."""
    import numpy as np

    from loaders.remote.mirror import mirror_dir
    from loaders.remote.validate import validate_remote
    from loaders.run import open_runs
    from loaders.runs_summary import runs_overview
    from mfm.validate import validate

    b = "hb-conflict"
    s3.mkdir(b)
    for name in ("good", "c-root", *CONFLICTS):
        s3.put(str(small_run), f"{b}/root/{name}", recursive=True)
    for name, (key, _, _) in CONFLICTS.items():
        s3.pipe_file(f"{b}/root/{name}/{key}", b"in the way")
    s3.pipe_file(f"{b}/root/c-root", b"an object named as the run")
    s3.invalidate_cache()
    url = f"s3://{b}/root"
    runs = {r.name: r for r in open_runs(url)}
    assert sorted(runs) == sorted(["good", "c-root", *CONFLICTS])
    assert sorted(runs_overview(list(runs.values()), mirror_dir(url))["key"]) == sorted(runs)
    good = runs["good"]
    clean = set(map(str, good.problems))
    assert set(map(str, runs["c-root"].problems)) == clean
    step = next(r.first_step + 1 for r in good.records("index.jsonl") if r.id == "ep_000005")
    for name, (_, named, side) in CONFLICTS.items():
        run = runs[name]
        new = [p for p in run.problems if str(p) not in clean]
        assert len(new) == 1, (name, new)
        assert new[0].file == named and "both an object and a folder of objects" in new[0].message, new[0]
        assert side in new[0].message
        assert len(run.episodes()) == len(good.episodes()) and len(run.memory_writes()) == len(good.memory_writes())
        assert np.array_equal(run.frame(step), good.frame(step))
    assert file_as_of(runs["c-mine"], "mine/GUIDE.md") == file_as_of(good, "mine/GUIDE.md")
    assert (mirror_dir(url) / "c-mine" / "mine" / "GUIDE.md").is_file()
    local = mirror_dir(url) / "c-table"
    assert (local / "index.jsonl").is_file() and not (local / "index.jsonl" / "old").exists()
    assert parts(mirror_dir(url)) == []
    use_root(monkeypatch, url)
    assert sorted(open_app().dataframe[0].value["key"]) == sorted(runs)
    base = {str(p) for p in validate(mirror_dir(url) / "good").problems}
    for name in CONFLICTS:
        got = validate_remote(f"{url}/{name}", frames=name == "c-frames").problems
        assert [str(p) for p in got if str(p) not in base] == [str(p) for p in runs[name].problems
                                                               if str(p) not in clean], name
        assert parts(mirror_dir(f"{url}/{name}")) == []
    assert parts(mirror_dir(url)) == []


def test_part_files_left_by_a_dead_process_are_removed(s3, small_run: Path) -> None:
    """``.part`` files and folders that a process killed mid-download left in the mirror
    (named for a process that is gone) are removed when a process next brings the run up to
    date; the run then reads whole."""
    from loaders.remote.mirror import mirror_dir
    from loaders.run import find_runs

    b = "hb-stale"
    s3.mkdir(b)
    s3.put(str(small_run), f"{b}/root/run", recursive=True)
    s3.invalidate_cache()
    url = f"s3://{b}/root"
    (local,) = find_runs(url)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, timeout=GUARD)
    pid = int(gone.stdout)
    stale = [local / f".steps.jsonl.{pid}.part", local / "mine" / f".GUIDE.md.{pid}.part",
             local / "episodes" / f".ep_000003.{pid}.part" / "frames" / "00000.webp"]
    for p in stale:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"half")
    code = ("import sys\n"
            "from loaders.run import open_run\n"
            "run = open_run(sys.argv[1])\n"
            "run.frame(1)\n"
            "print(len(run.steps()), len([p for p in run.problems if p.severity == 'error']))\n")
    done = subprocess.run([sys.executable, "-c", code, str(local)], capture_output=True, text=True, timeout=GUARD,
                          cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(len(lines_of(small_run / "steps.jsonl"))), "0"]
    assert parts(mirror_dir(url)) == []
    assert not (local / "episodes" / f".ep_000003.{pid}.part").exists()

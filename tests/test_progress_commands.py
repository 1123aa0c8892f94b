"""Progress of the long commands (issue 46): ``mfm pack``, ``import``, ``validate --frames``,
``results``, ``echo run`` and ``figures`` count their work in words. Out of a terminal (a
pipe, as in CI) they write plain lines, never carriage returns; in a real 80-column
pseudo-terminal, read back through a terminal emulator (pyte), one line updated in place.
Every count is checked against the run's files read here (tests/raw.py), not against the
code that counts."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from raw import jsonl
from terminal import drawn_lines, screen_of

SAMPLES = REPO / "sample_runs"
RUN = SAMPLES / "diamond_mfm_s2"
LINE = re.compile(r"^(?P<desc>[a-z ]+): (?P<n>[\d,]+)(?:/(?P<total>[\d,]+))? (?P<unit>.+?) after \d+ s(?:: .*)?$")
"""A plain progress line: ``pack: 12/678 episode files packed after 3 s``."""


def mfm(*argv: str, cwd: Path, every: str | None = "0") -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("MFM_PROGRESS_SECONDS", None)
    if every is not None:
        env["MFM_PROGRESS_SECONDS"] = every
    return subprocess.run([sys.executable, "-m", "mfm.cli", *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900)


def progress_lines(stderr: str, desc: str) -> list[tuple[int, int | None, str]]:
    """(count, total, unit) of each plain progress line of ``desc`` on stderr."""
    out = []
    for line in stderr.splitlines():
        m = LINE.match(line)
        if m and m["desc"] == desc:
            out.append((int(m["n"].replace(",", "")), int(m["total"].replace(",", "")) if m["total"] else None,
                        m["unit"]))
    return out


def episode_files(run: Path) -> int:
    return sum(1 for p in (run / "episodes").rglob("*") if p.is_file())


def check_counted(got: subprocess.CompletedProcess, desc: str, unit: str, total: int) -> None:
    """The command succeeded; its progress lines count ``unit`` up to ``total``, in order,
    as plain lines."""
    assert got.returncode == 0, got.stderr
    assert "\r" not in got.stderr and "Traceback" not in got.stderr
    lines = progress_lines(got.stderr, desc)
    assert len(lines) >= 2, got.stderr
    counts = [n for n, _, _ in lines]
    assert counts == sorted(counts) and counts[-1] == total, counts
    assert {t for _, t, _ in lines} == {total} and {u for _, _, u in lines} == {unit}


@pytest.fixture
def run_copy(tmp_path: Path) -> Path:
    run = tmp_path / RUN.name
    shutil.copytree(RUN, run)
    return run


def test_pack_and_unpack_count_the_episode_files(run_copy: Path) -> None:
    files = episode_files(run_copy)
    check_counted(mfm("pack", str(run_copy), cwd=run_copy.parent), "pack", "episode files packed", files)
    check_counted(mfm("pack", "--unpack", str(run_copy), cwd=run_copy.parent), "pack", "episode files unpacked",
                  files)
    assert episode_files(run_copy) == files


def test_import_counts_the_episodes_copied(tmp_path: Path) -> None:
    got = mfm("import", str(RUN), str(tmp_path / "copy"), cwd=tmp_path)
    check_counted(got, "import", "episodes copied", len(jsonl(RUN / "index.jsonl")))


def test_validate_frames_counts_the_episodes_checked(tmp_path: Path) -> None:
    got = mfm("validate", "--frames", str(RUN), cwd=tmp_path)
    check_counted(got, "validate", "episodes' frames checked", len(jsonl(RUN / "index.jsonl")))
    plain = mfm("validate", str(RUN), cwd=tmp_path)
    assert plain.returncode == 0 and progress_lines(plain.stderr, "validate") == []  # nothing long to count


def test_results_counts_the_runs_measured(tmp_path: Path) -> None:
    runs = len(list(SAMPLES.rglob("run.json")))
    check_counted(mfm("results", str(SAMPLES), cwd=tmp_path), "results", "runs measured", runs)


def test_echo_run_counts_the_learner_runs(tmp_path: Path) -> None:
    got = mfm("echo", "run", "--configs", "passive", "--seeds", "0,1", "--episodes", "1", "--step-cap", "20",
              "--jobs", "1", "--no-report", "--out", str(tmp_path / "echo"), cwd=tmp_path)
    check_counted(got, "echo run", "learner runs", 2)
    assert sorted(p.name for p in (tmp_path / "echo").iterdir() if p.is_dir()) == ["passive_s0", "passive_s1"]


@pytest.mark.slow
def test_figures_count_the_figures_written(tmp_path: Path) -> None:
    run = SAMPLES / "diamond_direct_s3_1600steps"
    got = mfm("figures", str(run), "--out", str(tmp_path / "fig"), cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    lines = progress_lines(got.stderr, "figures")
    assert lines and all(t is None and u == "figures written" for _, t, u in lines), got.stderr
    svgs = list((tmp_path / "fig").rglob("*.svg"))
    assert lines[-1][0] == len(svgs) > 0


def test_a_quick_command_adds_no_progress_lines_by_default(run_copy: Path) -> None:
    """With the default 30 s between plain lines, a command that ends sooner writes none."""
    got = mfm("pack", str(run_copy), cwd=run_copy.parent, every=None)
    assert got.returncode == 0 and got.stderr == "", got.stderr


def test_q_silences_progress(run_copy: Path) -> None:
    got = mfm("-q", "pack", str(run_copy), cwd=run_copy.parent)
    assert got.returncode == 0 and got.stderr == "", got.stderr


def test_a_failing_command_ends_with_its_error_line_only(tmp_path: Path) -> None:
    """A counted task that stops on an error leaves no closing progress line after it."""
    got = mfm("import", str(RUN), str(tmp_path / "copy"), cwd=tmp_path)
    assert got.returncode == 0
    again = mfm("import", str(RUN), str(tmp_path / "copy"), cwd=tmp_path)
    lines = again.stderr.strip().splitlines()
    assert again.returncode == 2 and len(lines) == 1 and lines[0].startswith("mfm import: "), again.stderr


def test_the_library_stays_silent_outside_the_command_line(run_copy: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """The same loops called from Python (a notebook, the dashboard) print nothing."""
    from mfm.memory.packed import pack_run, unpack_run

    monkeypatch.setenv("MFM_PROGRESS_SECONDS", "0")
    assert pack_run(run_copy).done and unpack_run(run_copy).done
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_nested_tasks_count_only_in_the_outer_line(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from mfm import progress

    monkeypatch.setenv("MFM_PROGRESS_SECONDS", "0")
    with progress.command("demo"):
        with progress.task("outer things", 2) as tick:
            for _ in range(2):
                for _ in progress.counted(range(5), "inner things"):
                    pass
                tick(1, "one")
    err = capsys.readouterr().err
    assert [(n, t, u) for n, t, u in progress_lines(err, "demo")] == [(1, 2, "outer things"), (2, 2, "outer things"),
                                                                     (2, 2, "outer things")], err
    assert "inner" not in err


@pytest.mark.parametrize("argv, desc, unit", [
    (["pack", "{run}"], "pack", "episode files packed"),
    (["validate", "--frames", "{run}"], "validate", "episodes' frames checked"),
])
def test_progress_is_one_line_in_place_in_80_columns(run_copy: Path, argv: list[str], desc: str, unit: str) -> None:
    total = episode_files(run_copy) if desc == "pack" else len(jsonl(run_copy / "index.jsonl"))
    screen, raw = screen_of([sys.executable, "-m", "mfm.cli", *(a.format(run=run_copy) for a in argv)],
                            cwd=run_copy.parent)
    rows = [row for row in screen.display if row.startswith(f"{desc}:")]
    assert len(rows) == 1, screen.display
    assert f"{total}/{total} {unit}" in rows[0].replace(",", ""), rows[0]
    assert raw.count(f"{desc}:".encode()) >= 2, raw[:400]  # drawn more than once, in place
    for text in drawn_lines(raw):
        if f"{desc}:" in text:
            assert len(text.rstrip()) <= 80 or "\x1b" in text, text

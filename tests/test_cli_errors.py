"""The command line's failures are one line on stderr with the documented exit code
(0 ok, 1 problems found, 2 usage or environment, 3 unexpected), never a traceback."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from mfm import cli

SAMPLE = REPO / "sample_runs" / "diamond_direct_s2_2500steps"


def mfm(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mfm.cli", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def one_line(got: subprocess.CompletedProcess, code: int, *words: str) -> str:
    """The single stderr line of a failed command, checked for its exit code and words."""
    lines = got.stderr.strip().splitlines()
    assert got.returncode == code and len(lines) == 1, (got.returncode, got.stdout, got.stderr)
    assert "Traceback" not in got.stdout + got.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def test_missing_places_are_one_line_each(tmp_path: Path) -> None:
    line = one_line(mfm("validate", str(tmp_path / "nothing_here"), cwd=tmp_path), 2, "no such folder")
    assert line.count("nothing_here") == 1
    (tmp_path / "a_file").write_text("x")
    one_line(mfm("validate", str(tmp_path / "a_file"), cwd=tmp_path), 2, "not a folder")
    one_line(mfm("results", str(tmp_path / "nothing_here"), cwd=tmp_path), 2, "no such folder")
    (tmp_path / "empty").mkdir()
    got = mfm("results", str(tmp_path / "empty"), cwd=tmp_path)
    one_line(got, 1, "no runs under")
    assert got.stdout == ""


def test_validate_goes_on_past_a_missing_run_and_exits_with_the_worst(tmp_path: Path) -> None:
    got = mfm("validate", str(tmp_path / "gone"), str(SAMPLE), cwd=tmp_path)
    assert got.returncode == 2 and f"{SAMPLE}: valid" in got.stdout
    assert got.stderr.strip().endswith("gone: no such folder")


@pytest.mark.parametrize("kind", ["folder with files", "file"])
def test_a_run_is_never_written_over_something(tmp_path: Path, kind: str) -> None:
    out = tmp_path / "out"
    if kind == "file":
        out.write_text("keep")
    else:
        out.mkdir()
        (out / "keep.txt").write_text("keep")
    one_line(mfm("run", "--steps", "20", "--out", str(out), cwd=tmp_path), 2, str(out), "choose another --out")
    assert (out.read_text() if kind == "file" else (out / "keep.txt").read_text()) == "keep"


def test_an_unexpected_error_is_one_line_and_v_shows_its_traceback(monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    def broken(args: object) -> int:
        raise KeyError("no such thing")

    monkeypatch.setattr(cli, "cmd_validate", broken)
    assert cli.main(["validate", "x"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mfm validate: internal error: KeyError") and "-v" in err[0]
    with pytest.raises(KeyError):
        cli.main(["-v", "validate", "x"])


def test_dashboard_without_a_root_or_sample_runs_here_says_what_to_do(tmp_path: Path) -> None:
    one_line(mfm("dashboard", cwd=tmp_path), 2, "no runs root given", "--samples")
    one_line(mfm("dashboard", "x", "--samples", cwd=tmp_path), 2, "not both")
    one_line(mfm("dashboard", "--port", "80000", cwd=tmp_path), 2, "--port", "a port is 1-65535, not 80000")


@pytest.mark.slow
def test_the_samples_made_for_an_install_are_the_shipped_sample_runs(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """``mfm dashboard --samples`` plays the sample runs into the user cache once: the same
    bytes as sample_runs/ (so this is also the check that the shipped samples are what the
    code makes), and a second call reuses them."""
    from mfm.samples import names, same_tree

    monkeypatch.setenv("MFM_CACHE_DIR", str(tmp_path / "cache"))
    root = cli._sample_runs()
    assert root.is_relative_to(tmp_path / "cache")
    differ = [f"{n}/{d}" for n in names("all") for d in same_tree(REPO / "sample_runs" / n, root / n)]
    assert differ == []
    stamp = (root / ".complete").stat().st_mtime_ns
    assert cli._sample_runs() == root and (root / ".complete").stat().st_mtime_ns == stamp

"""Object storage that cannot be used is one line naming the URL and what is wrong, exit 2,
said before any work (issue 46): a bucket that is not there (asked of a real S3 server on
loopback, moto's, the ``s3`` fixture), an endpoint that does not answer (a closed loopback
port), never a traceback. And runs read from a bucket are named by their folders there,
uniquely within a root."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

pytest.importorskip("s3fs")
pytest.importorskip("moto")

SAMPLE = REPO / "sample_runs" / "diamond_direct_s3_1600steps"


def mfm(*argv: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mfm.cli", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=900, env=dict(os.environ, **(env or {})))


def one_line(got: subprocess.CompletedProcess, *words: str) -> str:
    lines = got.stderr.strip().splitlines()
    assert got.returncode == 2 and len(lines) == 1, (got.returncode, got.stdout, got.stderr)
    assert "Traceback" not in got.stdout + got.stderr and "internal error" not in lines[0]
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def commands(url: str, tmp_path: Path) -> dict[str, list[str]]:
    """Each command that reads or writes object storage, given ``url``."""
    return {
        "validate": ["validate", url],
        "results": ["results", url],
        "run": ["run", "--steps", "30", "--out", url],
        "sweep": ["sweep", "--methods", "direct", "--seeds", "0", "--steps", "30", "--out", url],
        "import": ["import", str(SAMPLE), url],
        "dashboard": ["dashboard", url, "--port", "1"],
    }


def staged_or_logged(cache: Path) -> list[Path]:
    """What a run or sweep would have written locally for a bucket: staging copies, sweep logs."""
    return [p for sub in ("staging", "sweeps") if (cache / sub).is_dir() for p in (cache / sub).rglob("*")]


@pytest.mark.parametrize("name", ["validate", "results", "run", "sweep", "import", "dashboard"])
def test_a_missing_bucket_is_one_line_before_any_work(s3, tmp_path: Path, name: str) -> None:
    cache = tmp_path / "cache"
    url = "s3://no-such-bucket-46/runs/x"
    got = mfm(*commands(url, tmp_path)[name], cwd=tmp_path, env={"MFM_CACHE_DIR": str(cache)})
    one_line(got, f"mfm {name}: ", url, "no bucket 'no-such-bucket-46'")
    assert got.stdout == ""
    assert staged_or_logged(cache) == []  # nothing was played, staged or logged
    assert "no-such-bucket-46" not in s3.ls("")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["validate", "run", "sweep", "import"])
def test_an_endpoint_that_does_not_answer_is_one_line(s3, tmp_path: Path, name: str) -> None:
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    cache = tmp_path / "cache"
    url = "s3://somebucket/runs/x"
    got = mfm(*commands(url, tmp_path)[name], cwd=tmp_path,
              env={"AWS_ENDPOINT_URL": closed, "AWS_MAX_ATTEMPTS": "1", "MFM_CACHE_DIR": str(cache)})
    one_line(got, f"mfm {name}: ", url, closed, "does not answer")
    assert staged_or_logged(cache) == []


def test_an_empty_prefix_of_a_bucket_is_one_line(s3, tmp_path: Path) -> None:
    s3.mkdir("empty-prefix-46")
    for argv in (["validate", "s3://empty-prefix-46/nothing_here"], ["results", "s3://empty-prefix-46/nothing"]):
        one_line(mfm(*argv, cwd=tmp_path), argv[1])


def test_runs_in_a_bucket_are_named_by_their_folders_unique_within_the_root(s3, tmp_path: Path,
                                                                           caplog: pytest.LogCaptureFixture) -> None:
    """A run opened by its URL is named by its folder (not the hash of its local mirror);
    two sweeps under one root holding a run of one name are told apart by their folders."""
    from loaders.run import open_run, open_runs

    s3.mkdir("names-46")
    for sweep in ("sweep_a", "sweep_b"):
        s3.put(str(SAMPLE), f"names-46/root/{sweep}/{SAMPLE.name}", recursive=True)
    s3.put(str(SAMPLE), "names-46/root/alone", recursive=True)
    assert open_run(f"s3://names-46/root/sweep_a/{SAMPLE.name}").name == SAMPLE.name
    with caplog.at_level("WARNING", logger="loaders.run"):
        runs = open_runs("s3://names-46/root")
    assert sorted(r.name for r in runs) == sorted(["alone", f"sweep_a/{SAMPLE.name}", f"sweep_b/{SAMPLE.name}"])
    assert any(f"2 runs named {SAMPLE.name}" in m for m in caplog.messages)

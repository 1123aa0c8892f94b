"""Nothing from a run is executed and user SQL cannot reach the machine."""
from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from PIL import Image

from loaders import open_run
from mfm.memory.retrieval import FrameError, read_png

from conftest import WrittenRun


@pytest.mark.parametrize("query", [
    "COPY episodes TO '{tmp}/out.csv'",
    "ATTACH '{tmp}/other.duckdb' AS other",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_text('/etc/hostname')",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SET enable_external_access = true",
])
def test_user_sql_cannot_touch_files_or_settings(written_run: WrittenRun, tmp_path: Path, query: str):
    run = open_run(written_run.dir)
    with pytest.raises(duckdb.Error):
        run.sql(query.format(tmp=tmp_path)).fetchall()
    assert not (tmp_path / "out.csv").exists() and not (tmp_path / "other.duckdb").exists()
    assert run.sql("select count(*) from episodes").fetchall()[0][0] == len(written_run.episodes)


def test_user_sql_cannot_read_python_variables(written_run: WrittenRun):
    import pandas as pd

    secret_frame = pd.DataFrame({"s": [1]})  # noqa: F841 - must stay invisible to SQL
    with pytest.raises(duckdb.Error):
        open_run(written_run.dir).sql("select * from secret_frame").fetchall()


def test_decompression_bomb_is_not_decoded(tmp_path: Path):
    p = tmp_path / "bomb.png"
    Image.new("RGB", (6000, 6000)).save(p, optimize=True)
    assert p.stat().st_size < 200_000
    with pytest.raises(FrameError, match="too large"):
        read_png(p)


def test_image_that_is_not_an_image(tmp_path: Path):
    p = tmp_path / "x.png"
    p.write_bytes(b"#!/bin/sh\necho pwned\n")
    with pytest.raises(FrameError, match="not a readable image"):
        read_png(p)

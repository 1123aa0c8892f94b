"""Test helper: a runs root for the dashboard tests (real Crafter runs, a synthetic run, a
damaged copy, nested folders)."""
from __future__ import annotations

import shutil
from pathlib import Path

from conftest import write_run
from crafter_walk import write_crafter_run
from mfm.schema import frame_chunk

CRAFTER = "crafter_random_s3"
NESTED = "ablations/crafter_mfm_s1"
SYNTHETIC = "synthetic"
DAMAGED = "damaged"


def damage(run_dir: Path) -> None:
    """Break a written run the ways real runs break: a garbage line, a truncated last line,
    a missing frame strip."""
    with open(run_dir / "index.jsonl", "a", encoding="utf-8") as f:
        f.write("this is not json\n")
    with open(run_dir / "steps.jsonl", "a", encoding="utf-8") as f:
        f.write('{"step": 9999, "life": 0, "epi')
    (run_dir / frame_chunk("episodes/ep_000002", 0)[0]).unlink()


def make_root(root: Path, crafter_steps: int = 400) -> Path:
    """Write the test runs under ``root`` and return it."""
    root.mkdir(parents=True, exist_ok=True)
    write_crafter_run(root / CRAFTER, steps=crafter_steps, seed=3, method="random")
    write_crafter_run(root / NESTED, steps=crafter_steps // 2, seed=1, method="mfm")
    write_run(root / SYNTHETIC)
    shutil.copytree(root / SYNTHETIC, root / DAMAGED)
    damage(root / DAMAGED)
    return root

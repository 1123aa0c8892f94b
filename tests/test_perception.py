"""``--perception pixels``: the live 9x7 view and daylight decoded from the frame (issue 23)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mfm.agent import RunConfig, Runner
from mfm.cli import build_parser
from mfm.envs import CrafterHarness
from mfm.validate import validate

STEPS = 400
"""Long enough to reach dusk (it darkens from about step 148 of each 300-step day)."""


def _actions(seed: int, count: int) -> list[str]:
    """Mostly moves and ``do``: the player wanders and changes the world."""
    rng = np.random.default_rng(seed)
    names = ["move_left", "move_right", "move_up", "move_down", "do", "noop"]
    return [names[i] for i in rng.choice(len(names), size=count, p=[0.2, 0.2, 0.2, 0.2, 0.15, 0.05])]


def test_pixels_view_is_the_map_view_on_most_cells() -> None:
    """Two harnesses of one seed play the same actions, one reading the world map, one decoding
    its frames: the game is the same step for step (decoding renders nothing), the decoded view
    names the same tile on most cells (all of them by day), and the daylight is close."""
    by_map, by_pixels = CrafterHarness(0), CrafterHarness(0, perception="pixels")
    assert (by_map.perception_source, by_pixels.perception_source) == ("map", "pixels")
    a, b = by_map.reset(), by_pixels.reset()
    same = cells = day_same = day_cells = 0
    light_error = []
    for action in _actions(1, STEPS):
        ra, rb = by_map.step(action), by_pixels.step(action)
        if ra.died:
            assert rb.died
            a, b = by_map.respawn(), by_pixels.respawn()
        else:
            a, b = ra.perception, rb.perception
        assert (a.step, a.pos, a.facing, a.vitals, a.inventory) == (b.step, b.pos, b.facing, b.vitals, b.inventory)
        assert np.array_equal(a.frame, b.frame)
        agree = sum(x == y for ca, cb in zip(a.local, b.local) for x, y in zip(ca, cb))
        same, cells = same + agree, cells + 63
        if a.daylight >= 0.5:
            day_same, day_cells = day_same + agree, day_cells + 63
        light_error.append(abs(a.daylight - b.daylight))
        assert b.tile(0, 0) == "player" or a.sleeping
    assert day_cells > 100 * 63 and cells > day_cells
    assert day_same / day_cells >= 0.99, day_same / day_cells
    assert same / cells >= 0.9, same / cells
    assert float(np.median(light_error)) < 0.05 and max(light_error) < 0.25


def test_unknown_perception_is_refused() -> None:
    with pytest.raises(ValueError, match="perception"):
        CrafterHarness(0, perception="semantic")
    with pytest.raises(ValueError, match="perception"):
        RunConfig(perception="semantic")
    assert build_parser().parse_args(["run"]).perception == "map"
    assert build_parser().parse_args(["run", "--perception", "pixels"]).perception == "pixels"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--perception", "semantic"])


def test_a_pixels_run_works_validates_and_records_the_choice(tmp_path: Path) -> None:
    runner = Runner(RunConfig(seed=0, steps=300, out=tmp_path / "pixels", fixed_clock=True, perception="pixels"))
    assert runner.harness.perception_source == "pixels"
    runner.run()
    assert runner.status == "finished" and runner.writer.manifest.last_step == 300
    checked = validate(tmp_path / "pixels", frames=True)
    assert not checked.errors, [str(e) for e in checked.errors]
    m = json.loads((tmp_path / "pixels" / "run.json").read_text())
    assert m["config"]["perception"] == "pixels"
    assert runner.summary()["turns"] > 10 and len(m["milestones"]) >= 1
    # the default is not written, so that default runs keep the manifest they always had
    default = RunConfig(seed=0, steps=5, out=tmp_path / "map")
    assert default.perception == "map" and "perception" not in default.to_manifest()

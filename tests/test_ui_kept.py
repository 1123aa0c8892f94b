"""``dashboard.caching.kept``: values built from arrays (the Frames page's panels) kept per the
arrays' content, every byte of it."""
from __future__ import annotations

import numpy as np
import streamlit as st

from dashboard import caching


def test_a_kept_value_follows_every_pixel_of_a_large_frame() -> None:
    st.cache_resource.clear()
    calls: list[tuple] = []

    def draw(frames: list[np.ndarray], tiles: bool = False) -> list[int]:
        calls.append((len(frames), tiles))
        return [int(f.sum()) for f in frames]

    big = np.zeros((600, 600, 3), np.uint8)  # 1,080,000 values: Streamlit's own hash samples 100,000 of them
    other = big.copy()
    other[599, 599, 2] = 1
    kept = caching.kept(draw)
    assert kept([big]) == [0] and len(calls) == 1
    assert kept([big.copy()]) == [0] and len(calls) == 1, "the same content is kept, whatever the object"
    assert kept([other]) == [1] and len(calls) == 2, "one value differs: built again"
    assert kept([big], tiles=True) == [0] and calls[-1] == (1, True), "another argument: built again"
    assert kept([big, other]) == [0, 1] and len(calls) == 4
    st.cache_resource.clear()

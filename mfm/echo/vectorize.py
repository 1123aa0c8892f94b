"""Vectors for CSD axes. The default works offline with no model: signed feature hashing of
the axis's symbolic tokens. Any sentence-embedding model can be plugged in instead."""
from __future__ import annotations

import hashlib
import json
from typing import Protocol, Sequence

import numpy as np

from mfm.echo.csd import AXES, CSD, tokens


class Vectorizer(Protocol):
    """Turns each axis of a CSD into a unit vector."""

    name: str

    def encode_axis(self, axis: str, content: dict) -> np.ndarray:
        """A unit-length vector for one axis's symbolic content."""


class HashingVectorizer:
    """Signed feature hashing of :func:`~mfm.echo.csd.tokens` (no model, no download)."""

    def __init__(self, dim: int = 512) -> None:
        self.dim = dim
        self.name = f"hashing-{dim}"

    def encode_axis(self, axis: str, content: dict) -> np.ndarray:
        v = np.zeros(self.dim)
        for tok in tokens(content):
            h = hashlib.blake2b(tok.encode("utf-8"), digest_size=8).digest()
            i = int.from_bytes(h[:4], "little") % self.dim
            v[i] += 1.0 if h[4] & 1 else -1.0
        n = np.linalg.norm(v)
        return v / n if n else v


class SentenceVectorizer:
    """Adapter for any model with ``encode(list[str]) -> array`` (e.g. sentence-transformers);
    the axis content is given to it as compact JSON text."""

    def __init__(self, model, name: str = "sentence") -> None:
        self.model = model
        self.name = name

    def encode_axis(self, axis: str, content: dict) -> np.ndarray:
        v = np.asarray(self.model.encode([f"{axis}: {json.dumps(content, sort_keys=True)}"])[0], dtype=float)
        n = np.linalg.norm(v)
        return v / n if n else v


def vectorize(csd: CSD, vec: Vectorizer) -> CSD:
    """The CSD with a vector for each axis (and the vectoriser's name in ``meta``)."""
    from dataclasses import replace

    vectors = {a: vec.encode_axis(a, csd.axis(a)).round(6).tolist() for a in AXES}
    return replace(csd, vectors=vectors, meta={**csd.meta, "vectorizer": vec.name})


def axis_similarity(a: CSD, b: CSD, axes: Sequence[str] = AXES) -> dict[str, float]:
    """Cosine similarity per axis (vectors must be present)."""
    out = {}
    for ax in axes:
        va, vb = a.vectors.get(ax), b.vectors.get(ax)
        if va is None or vb is None or len(va) != len(vb):
            out[ax] = 0.0
            continue
        out[ax] = float(np.dot(va, vb))
    return out

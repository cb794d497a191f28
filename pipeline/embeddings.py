"""Embedding providers behind one narrow protocol.

:class:`Embedder` is all the rest of mongomem sees. Providers:

* ``stand-in`` — :class:`HashingEmbedder`: a deterministic feature-hashing
  bag of words and character trigrams. **Not a model**: it captures word
  overlap, not meaning. It exists so tests and the offline demo run with no
  model at all, and it says so in its ``name``.
* ``openai`` / ``local`` — real providers (see :func:`make_embedder`).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

__all__ = ["Embedder", "HashingEmbedder", "cosine"]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors of a fixed size."""

    @property
    def name(self) -> str: ...

    @property
    def dimensions(self) -> int: ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit-length vector per text, in order."""
        ...


_WORD = re.compile(r"[\w']+", re.UNICODE)


class HashingEmbedder:
    """Deterministic feature hashing — a labelled stand-in, not a language model."""

    def __init__(self, dimensions: int = 384) -> None:
        if dimensions < 8:
            raise ValueError("dimensions must be at least 8")
        self._dimensions = dimensions

    @property
    def name(self) -> str:
        return f"stand-in:hashing-{self._dimensions} (NOT a model)"

    @property
    def dimensions(self) -> int:
        return self._dimensions

    def _features(self, text: str) -> list[tuple[str, float]]:
        words = [w.lower() for w in _WORD.findall(text)]
        feats: list[tuple[str, float]] = [("w:" + w, 1.0) for w in words]
        for w in words:
            padded = f"#{w}#"
            feats.extend(("c:" + padded[i : i + 3], 0.3) for i in range(len(padded) - 2))
        return feats

    def embed_one(self, text: str) -> list[float]:
        vec = [0.0] * self._dimensions
        for feat, weight in self._features(text):
            digest = hashlib.blake2b(feat.encode(), digest_size=8).digest()
            bucket = int.from_bytes(digest[:4], "little") % self._dimensions
            sign = 1.0 if digest[4] & 1 else -1.0
            vec[bucket] += sign * weight
        norm = math.sqrt(sum(v * v for v in vec))
        if norm == 0.0:
            vec[0] = 1.0
            return vec
        return [v / norm for v in vec]

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.embed_one(t) for t in texts]


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity of two vectors (0.0 when either is zero)."""
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    if na == 0.0 or nb == 0.0:
        return 0.0
    return dot / (na * nb)

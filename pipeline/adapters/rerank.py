"""Optional reranking of search results by a cross-encoder behind HTTP (SPEC M1).

No reranker model ships inside a package that can be installed here and run
offline, and nothing may download weights at run time, so mongomem does not
bundle one. A :class:`Reranker` is anything that scores ``(query, document)``
pairs; :class:`HttpReranker` calls the ``POST {base_url}/rerank`` endpoint that
Cohere, Jina, vLLM, llama.cpp's server, LocalAI and Hugging Face TEI (as
``/rerank``) share:

    request   {"model": M, "query": Q, "documents": [D0, D1, …], "top_n": n}
    response  {"results": [{"index": i, "relevance_score": s}, …]}

It is **off by default**: it is on when ``MONGOMEM_RERANK_BASE_URL`` is set
(:class:`~mongomem.settings.RerankSettings`). When on, memory search and turn
search fuse as usual, then the ``depth`` best fused hits are reordered by the
reranker's score (each hit keeps its fused rank beside its ``rerank_score``).
A reranker that fails or answers out of shape does not fail the search: the
fused order stands and a warning names the error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from mongomem.errors import RerankError
from mongomem.settings import RerankSettings

__all__ = ["HttpReranker", "Reranker", "http_reranker", "rerank"]

log = logging.getLogger(__name__)
T = TypeVar("T")


class Reranker(Protocol):
    """Scores documents against a query: higher is more relevant."""

    @property
    def name(self) -> str: ...

    async def scores(self, query: str, documents: Sequence[str]) -> list[float]:
        """One score per document, in the documents' order."""
        ...


class HttpReranker:
    """A ``/rerank`` endpoint (see the module docstring)."""

    def __init__(
        self,
        base_url: str,
        *,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        self.url = base_url.rstrip("/") + "/rerank"
        self.model = model
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = timeout_s

    @property
    def name(self) -> str:
        return f"http:{self.model}"

    async def scores(self, query: str, documents: Sequence[str]) -> list[float]:
        if not documents:
            return []
        body = {
            "model": self.model,
            "query": query,
            "documents": list(documents),
            "top_n": len(documents),
        }
        import httpx  # only where a reranker is configured: a plain read never loads it

        try:  # a client per call: nothing to close, and searches are not queued behind it
            async with httpx.AsyncClient(headers=self._headers, timeout=self._timeout) as client:
                answer = await client.post(self.url, json=body)
        except httpx.HTTPError as exc:
            raise RerankError(f"the reranker at {self.url} failed: {exc}") from exc
        if answer.status_code != 200:
            raise RerankError(f"the reranker at {self.url} answered {answer.status_code}")
        try:
            results = answer.json()["results"]
            out: list[float | None] = [None] * len(documents)
            for item in results:
                out[int(item["index"])] = float(item["relevance_score"])
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise RerankError(f"the reranker at {self.url} answered out of shape: {exc}") from exc
        if any(s is None for s in out):
            raise RerankError(f"the reranker at {self.url} left documents unscored")
        return [s for s in out if s is not None]


async def rerank(
    reranker: Reranker, query: str, items: Sequence[T], text: Callable[[T], str]
) -> list[tuple[T, float]] | None:
    """``items`` ordered by the reranker's score (ties keep their order), each with it;
    ``None`` when the reranker failed (logged: the caller keeps its own order)."""
    try:
        found = await reranker.scores(query, [text(item) for item in items])
    except RerankError as exc:
        log.warning("reranking skipped, the fused order stands: %s", exc)
        return None
    order = sorted(range(len(items)), key=lambda i: -found[i])
    return [(items[i], found[i]) for i in order]


def http_reranker(settings: RerankSettings) -> HttpReranker | None:
    """The configured reranker, or ``None`` (the default: ``base_url`` unset)."""
    if not settings.base_url:
        return None
    key = settings.api_key.get_secret_value() if settings.api_key else None
    return HttpReranker(
        settings.base_url, model=settings.model, api_key=key, timeout_s=settings.timeout_s
    )

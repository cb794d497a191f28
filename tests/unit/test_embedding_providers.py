"""Embedding providers: the factory, the OpenAI-compatible one, the offline local model."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
from pydantic import SecretStr

from mongomem.adapters.embeddings import (
    Embedder,
    HashingEmbedder,
    LocalE5Embedder,
    OpenAIEmbedder,
    cosine,
    embed_queries,
    make_embedder,
)
from mongomem.errors import ConfigError, EmbeddingError, NotReady
from mongomem.settings import EmbeddingSettings
from mongomem.testing import FakeOpenAIServer


def test_no_provider_is_not_ready_and_says_what_to_set() -> None:
    with pytest.raises(NotReady, match="MONGOMEM_EMBEDDING_PROVIDER"):
        make_embedder(EmbeddingSettings())


def test_stand_in_is_labelled_not_a_model() -> None:
    embedder = make_embedder(EmbeddingSettings(provider="stand-in", dimensions=64))
    assert isinstance(embedder, HashingEmbedder)
    assert "NOT a model" in embedder.name


def test_openai_provider_needs_a_key() -> None:
    with pytest.raises(NotReady, match="MONGOMEM_EMBEDDING_API_KEY"):
        make_embedder(EmbeddingSettings(provider="openai"))


def test_local_provider_has_fixed_dimensions() -> None:
    with pytest.raises(ConfigError, match="384"):
        make_embedder(EmbeddingSettings(provider="local", dimensions=256))


async def test_openai_compatible_endpoint() -> None:
    with FakeOpenAIServer() as server:
        embedder = make_embedder(
            EmbeddingSettings(
                provider="openai", base_url=server.base_url, api_key=SecretStr("k"), dimensions=32
            )
        )
        assert isinstance(embedder, OpenAIEmbedder)
        assert isinstance(embedder, Embedder)
        try:
            vectors = await embedder.embed(["a", "b c"])
            assert await embedder.embed([]) == []
        finally:
            await embedder.close()
        assert server.embedding_requests == [["a", "b c"]]
    assert [len(v) for v in vectors] == [32, 32]
    assert all(math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-6) for v in vectors)


async def test_openai_endpoint_errors_are_embedding_errors() -> None:
    refused = "http://127.0.0.1:9/v1"
    embedder = OpenAIEmbedder(
        EmbeddingSettings(provider="openai", base_url=refused, api_key=SecretStr("k"))
    )
    try:
        with pytest.raises(EmbeddingError):
            await embedder.embed(["x"])
    finally:
        await embedder.close()


async def test_local_model_ranks_meaning_not_word_overlap() -> None:
    embedder = make_embedder(EmbeddingSettings(provider="local"))
    assert isinstance(embedder, LocalE5Embedder)
    assert "NOT" not in embedder.name
    docs = [
        "The user's home airport is Boston Logan.",
        "The user is allergic to peanuts.",
        "A red-eye is an overnight flight that lands the next morning.",
    ]
    vectors = await embedder.embed(docs)
    assert all(len(v) == 384 for v in vectors)
    (query,) = await embed_queries(embedder, ["Which airport does the user fly from?"])
    scores = [cosine(query, v) for v in vectors]
    assert scores.index(max(scores)) == 0
    (nut,) = await embed_queries(embedder, ["food intolerance"])
    scores = [cosine(nut, v) for v in vectors]
    assert scores.index(max(scores)) == 1


@pytest.fixture(scope="module")
def local() -> LocalE5Embedder:
    embedder = make_embedder(EmbeddingSettings(provider="local"))
    assert isinstance(embedder, LocalE5Embedder)
    return embedder


LONG = " ".join(
    f"Fact {i}: the user flew from Lisbon to Oslo on trip number {i}." for i in range(400)
)


@pytest.mark.parametrize("is_query", [False, True])
def test_a_long_text_is_cut_to_what_the_model_reads(local: LocalE5Embedder, is_query: bool) -> None:
    """A 25 KB text was embedded window by window: seconds of a shared lock per call."""
    model = local._model
    assert model.token_count(LONG, is_query) > 5 * local.MAX_TOKENS
    fitted = local.fit(LONG, is_query)
    assert LONG.startswith(fitted)
    assert 0.9 * local.MAX_TOKENS <= model.token_count(fitted, is_query) <= local.MAX_TOKENS
    assert local.fit("The home airport is Boston.", is_query) == "The home airport is Boston."


async def test_the_vector_of_a_long_text_is_that_of_its_fitted_prefix(
    local: LocalE5Embedder,
) -> None:
    whole, prefix = await local.embed([LONG, local.fit(LONG)])
    assert cosine(whole, prefix) > 0.9999
    (query,) = await local.embed_query([LONG])
    (fitted,) = await local.embed_query([local.fit(LONG, True)])
    assert cosine(query, fitted) > 0.9999


async def test_a_repeated_query_is_answered_from_the_cache(
    local: LocalE5Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[list[str]] = []
    encode = local._query_model.encode

    def spy(texts: list[str], q: bool) -> Any:
        seen.append(texts)
        return encode(texts, q)

    monkeypatch.setattr(local._query_model, "encode", spy)
    first = await local.embed_query(["cached query one", "cached query two"])
    again = await local.embed_query(["cached query two", "cached query one"])
    assert again == [first[1], first[0]]
    assert seen == [["cached query one", "cached query two"]]


async def test_a_query_does_not_wait_behind_a_stored_text(local: LocalE5Embedder) -> None:
    """One tenant's saves held every search behind the embedder's one lock."""
    with local._lock:  # a long save holds the stored-text engine
        (query,) = await asyncio.wait_for(local.embed_query(["is the user vegan?"]), 30)
    assert len(query) == local.DIMENSIONS

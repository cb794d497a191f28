"""From a space and new inputs to scored items (the adapter around
:mod:`mongomem.spaces.scoring`).

Recall is an exact scan: every item of the space is read (and decrypted, in
an encrypted space) and scored in process. Spaces are meant to hold cases —
hundreds to a few thousands of items — not a whole memory; ``$vectorSearch``
is not used for them. Items store one vector per input argument (all of
them, not only today's keys), so changing a space's keys or weights needs no
re-embedding.

Items and queries are both embedded with :meth:`Embedder.embed`: the match
compares two cases with each other (symmetric), not a question with answers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from mongomem.adapters.embeddings import Embedder
from mongomem.errors import ConfigError, EmbeddingError, StateConflict
from mongomem.spaces.keys import InputValue, Summariser, derive_key_texts
from mongomem.spaces.models import RecallHit, RecallSettings, SearchKey, Space, SpaceItem
from mongomem.spaces.scoring import Scored, active_keys, score_item
from mongomem.spaces.store import Vectors

__all__ = ["Query", "build_query", "check_embedder", "embed_texts", "score_all", "to_hit"]

SummariserFactory = Callable[[], Awaitable[Summariser]]


@dataclass(frozen=True)
class Query:
    """The active keys' weights, key texts and vectors of one recall."""

    weights: dict[str, float]
    texts: dict[str, str]
    vectors: Vectors


def check_embedder(space: Space, embedder: Embedder) -> None:
    """Refuse to compare vectors of different models (:class:`ConfigError`)."""
    if embedder.name != space.embedder or embedder.dimensions != space.dimensions:
        raise ConfigError(
            f"space {space.space_id!r} was embedded with {space.embedder} "
            f"({space.dimensions}-d); this process embeds with {embedder.name} "
            f"({embedder.dimensions}-d). Export the space and import it to re-embed."
        )


async def embed_texts(embedder: Embedder, texts: Mapping[str, str]) -> Vectors:
    names = list(texts)
    vectors = await embedder.embed([texts[n] for n in names])
    if len(vectors) != len(names):
        raise EmbeddingError(f"asked for {len(names)} embeddings, got {len(vectors)}")
    return {n: [float(x) for x in v] for n, v in zip(names, vectors, strict=True)}


def _weights(keys: Sequence[SearchKey]) -> dict[str, float]:
    return {k.argument: k.weight for k in keys}


async def build_query(
    space: Space,
    inputs: Mapping[str, InputValue],
    *,
    agent_id: str | None,
    embedder: Embedder,
    summariser: SummariserFactory,
) -> Query:
    """Embed the inputs that are search keys (others are ignored)."""
    keys = space.keys_for(agent_id)
    weights = active_keys(_weights(keys), inputs)
    if not weights:
        wanted = ", ".join(k.argument for k in keys)
        raise StateConflict(
            f"inputs give none of the search keys of space {space.space_id!r} ({wanted})",
            field="inputs",
        )
    _, texts = await derive_key_texts(
        {a: inputs[a] for a in weights},
        long_text_chars=space.recall.long_text_chars,
        summariser=summariser,
    )
    return Query(weights=weights, texts=texts, vectors=await embed_texts(embedder, texts))


def score_all(
    query: Query, rows: Sequence[tuple[SpaceItem, Vectors]], recall: RecallSettings
) -> list[Scored[SpaceItem]]:
    """Every row scored (unranked)."""
    return [
        score_item(
            item,
            item.item_id,
            weights=query.weights,
            query_vectors=query.vectors,
            query_texts=query.texts,
            item_vectors=vectors,
            item_texts=item.key_texts,
            mode=recall.mode,
            alpha=recall.keyword_weight,
        )
        for item, vectors in rows
    ]


def to_hit(scored: Scored[SpaceItem]) -> RecallHit:
    return RecallHit(
        item=scored.candidate,
        score=scored.score,
        meaning=scored.meaning,
        keyword=scored.keyword,
        per_argument=scored.per_argument,
    )

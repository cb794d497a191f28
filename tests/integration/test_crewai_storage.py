"""The CrewAI memory storage (SPEC N2), through CrewAI's own ``Memory`` class.

CrewAI has an environment of its own (it cannot share one with the OpenAI Agents SDK:
see pyproject.toml), so these tests are skipped where it is not installed; `make
test-extras` runs them with ``[crewai]`` alone. A whole ``Crew`` run is in
test_crewai_crew.py.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator

import pytest

# CrewAI phones home unless told not to: nothing leaves the machine.
for _name, _value in {
    "CREWAI_DISABLE_TELEMETRY": "true",
    "CREWAI_DISABLE_TRACKING": "true",
    "CREWAI_TRACING_ENABLED": "false",
    "OTEL_SDK_DISABLED": "true",
}.items():
    os.environ.setdefault(_name, _value)

crewai = pytest.importorskip("crewai", reason="crewai has an environment of its own")

from crewai import Memory as CrewMemory  # noqa: E402
from crewai.memory.storage.backend import StorageBackend  # noqa: E402
from crewai.memory.types import MemoryRecord  # noqa: E402
from pymongo import AsyncMongoClient  # noqa: E402

from mongomem.adapters.embeddings import HashingEmbedder  # noqa: E402
from mongomem.adapters.mongo import Document  # noqa: E402
from mongomem.integrations.crewai import MongomemStorage  # noqa: E402
from mongomem.sdk import Memory, MemoryRequestContext  # noqa: E402
from mongomem.settings import Settings  # noqa: E402

pytestmark = pytest.mark.integration


def embed(texts: list[str]) -> list[list[float]]:
    """A bag-of-words hashing embedder for CrewAI (a stand-in, NOT a model)."""
    out = []
    for text in texts:
        vector = [0.0] * 32
        for word in text.lower().replace(".", " ").replace("'", " ").split():
            vector[int(hashlib.sha256(word.encode()).hexdigest(), 16) % 32] += 1.0
        out.append(vector)
    return out


@pytest.fixture
def memory(settings: Settings, mongo: AsyncMongoClient[Document]) -> Iterator[Memory]:
    with Memory(project_id="crew", settings=settings, embedder=HashingEmbedder(64)) as m:
        yield m


@pytest.fixture
def crew_memory(memory: Memory) -> Iterator[CrewMemory]:
    storage = MongomemStorage(memory, user_id="crew_1")
    assert isinstance(storage, StorageBackend)  # CrewAI's own protocol
    made = CrewMemory(storage=storage, llm="not-called", embedder=embed)
    yield made
    made.close()


def test_crewais_memory_remembers_recalls_forgets_and_resets_through_mongomem(
    crew_memory: CrewMemory, memory: Memory
) -> None:
    crew_memory.remember(
        "The user's home airport is Boston.",
        scope="/travel",
        categories=["airport"],
        importance=0.8,
    )
    crew_memory.remember(
        "The team ships on Fridays.", scope="/office/team", categories=["process"], importance=0.4
    )
    [best, *_] = crew_memory.recall("home airport Boston", depth="shallow")
    assert best.record.content == "The user's home airport is Boston."
    assert [
        m.record.content
        for m in crew_memory.recall("ships Fridays", scope="/office", depth="shallow")
    ] == ["The team ships on Fridays."]
    storage = crew_memory._storage
    assert storage.list_scopes("/") == ["/office", "/travel"]
    assert storage.list_scopes("/office") == ["/office/team"]
    assert storage.list_categories() == {"airport": 1, "process": 1}
    assert storage.get_scope_info("/office").record_count == 1

    # what the crew remembered are turns of short-term memory: the pipeline learns from them
    chat = memory.bind(MemoryRequestContext(user_id="crew_1", session_id="crewai-memory"))
    assert "The user's home airport is Boston." in [t.content for t in chat.recent_turns()]

    assert crew_memory.forget(scope="/office") == 1
    assert storage.count() == 1
    crew_memory.reset()
    assert storage.count() == 0
    assert crew_memory.recall("home airport", depth="shallow") == []


def test_records_come_back_whole_and_update_replaces(memory: Memory) -> None:
    storage = MongomemStorage(memory, user_id="crew_2")
    record = MemoryRecord(
        content="Prefers aisle seats.",
        scope="/travel/seats",
        categories=["seat", "preference"],
        metadata={"source_task": "booking", "n": 2},
        importance=0.9,
        embedding=[0.1, 0.2, 0.3],
        source="user_2",
        private=True,
    )
    storage.save([record])
    again = MongomemStorage(memory, user_id="crew_2").get_record(record.id)  # a new process
    assert again is not None
    assert again.model_dump() == record.model_dump()
    assert again.embedding == [0.1, 0.2, 0.3]
    storage.update(record.model_copy(update={"content": "Prefers window seats."}))
    assert [r.content for r in storage.list_records()] == ["Prefers window seats."]
    assert storage.search([0.1, 0.2, 0.3], metadata_filter={"n": 2})[0][1] == pytest.approx(1.0)
    assert storage.search([0.1, 0.2, 0.3], categories=["other"]) == []
    assert storage.delete(record_ids=[record.id]) == 1
    assert storage.get_record(record.id) is None

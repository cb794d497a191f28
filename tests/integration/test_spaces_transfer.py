"""Export/import of spaces (SPEC H9), and files and long texts as keys (SPEC H5),
against the real MongoDB-compatible server and the local OpenAI-compatible fake."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Iterator, Sequence

import pytest
from pymongo import AsyncMongoClient

from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.adapters.llm import OpenAILLM
from mongomem.adapters.mongo import Document
from mongomem.errors import InputError, NotReady, StateConflict
from mongomem.settings import LLMSettings, Settings
from mongomem.spaces import AsyncSpaces, FileInput, LLMSummariser, SpacesSettings
from mongomem.testing import Answer, ChatRequest, FakeOpenAIServer

pytestmark = pytest.mark.integration


class CountingEmbedder(HashingEmbedder):
    """The hashing stand-in (NOT a model) that counts its calls."""

    def __init__(self) -> None:
        super().__init__(64)
        self.calls = 0

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        return await super().embed(texts)


EMBEDDER = CountingEmbedder()
KEY = SpacesSettings(encryption_key=base64.b64encode(bytes(range(32))).decode())
CONTRACT = "This rental contract for a flat in Lisbon starts in May. " * 40


def scripted_summary(request: ChatRequest) -> Answer:
    """A scripted fake (NOT a model): 'summary:' plus the first eight words of the text."""
    text = request.text("user").split("\n\n")[-1]
    return Answer({"summary": "summary: " + " ".join(text.split()[:8])})


@pytest.fixture
def fake_llm() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(scripted_summary) as server:
        yield server


@pytest.fixture
async def spaces(
    settings: Settings, mongo: AsyncMongoClient[Document], fake_llm: FakeOpenAIServer
) -> AsyncIterator[AsyncSpaces]:
    llm = OpenAILLM(LLMSettings(base_url=fake_llm.base_url, api_key="test", model="fake"))
    async with AsyncSpaces(
        settings,
        project_id="tenant-a",
        embedder=EMBEDDER,
        client=mongo,
        summariser=LLMSummariser(llm),
        spaces_settings=KEY,
    ) as s:
        yield s
    await llm.close()


async def fill(spaces: AsyncSpaces, space_id: str, *, encrypted: bool = False) -> None:
    await spaces.create_space(
        space_id,
        keys=[{"argument": "question", "weight": 2}, {"argument": "document"}],
        recall={"threshold": 0.2, "long_text_chars": 200},
        encrypted=encrypted,
    )
    await spaces.attach_agent(space_id, "triage", keys=[{"argument": "question"}])
    await spaces.add_item(
        space_id,
        inputs={
            "question": "can I cancel my rental early",
            "document": FileInput(name="contract.txt", text=CONTRACT),
        },
        outputs={"reply": "Yes, with two months' notice."},
        outcome="answered",
        comment="correct",
        sentiment="positive",
    )
    await spaces.add_item(
        space_id, inputs={"question": "where do I pay the deposit"}, outcome="answered"
    )


async def test_files_are_summarised_and_long_texts_compressed(
    spaces: AsyncSpaces, fake_llm: FakeOpenAIServer
) -> None:
    await fill(spaces, "rentals")
    [with_file, _] = await spaces.list_items("rentals")
    stored = with_file.inputs["document"]
    assert stored["file"] == "contract.txt"
    assert stored["summary"] == "summary: This rental contract for a flat in Lisbon"
    assert "text" not in stored  # the file's text is not kept, its summary is the key
    assert with_file.key_texts["document"] == stored["summary"]
    assert [r.schema_name for r in fake_llm.chat_requests] == ["space_key_summary"]

    long_question = "why " + "was my deposit for the Lisbon flat not returned yet " * 10
    added = await spaces.add_item("rentals", inputs={"question": long_question})
    assert added.item is not None
    assert added.item.inputs["question"] == long_question  # kept in full
    assert added.item.key_texts["question"].startswith("summary: why was my deposit")
    assert len(fake_llm.chat_requests) == 2

    hits = await spaces.recall(
        "rentals", {"document": FileInput(name="other.txt", text=CONTRACT.upper())}
    )
    assert hits[0].item.item_id == with_file.item_id


async def test_without_an_llm_files_are_refused_and_nothing_is_stored(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    no_llm = settings.model_copy(
        update={"llm": LLMSettings(base_url=None, api_key=None, use_stand_in=False)}
    )
    async with AsyncSpaces(no_llm, project_id="p", embedder=EMBEDDER, client=mongo) as spaces:
        await spaces.create_space("s", keys=[{"argument": "doc"}])
        with pytest.raises(NotReady, match="no LLM endpoint"):
            await spaces.add_item("s", inputs={"doc": FileInput(name="a.txt", text="hello")})
        await spaces.add_item("s", inputs={"doc": "short text needs no summariser"})
        assert len(await spaces.list_items("s")) == 1


async def test_export_import_round_trip_into_another_project(
    settings: Settings, mongo: AsyncMongoClient[Document], spaces: AsyncSpaces
) -> None:
    await fill(spaces, "rentals", encrypted=True)
    lines = await spaces.export_space("rentals")
    header = json.loads(lines[0])
    assert header["format"] == "mongomem.space"
    assert header["items"] == 2
    assert len(lines) == 3
    before = await spaces.list_items("rentals")
    asked = EMBEDDER.calls

    async with AsyncSpaces(
        settings, project_id="tenant-b", embedder=EMBEDDER, client=mongo, spaces_settings=KEY
    ) as other:
        moved = await other.import_space(lines)
        assert EMBEDDER.calls == asked  # vectors were kept: same embedder
        assert moved.project_id == "tenant-b"
        assert moved.encrypted
        assert moved.item_count == 2
        assert moved.agents == (await spaces.get_space("rentals")).agents
        after = await other.list_items("rentals")
        assert [i.inputs for i in after] == [i.inputs for i in before]
        assert [i.feedback for i in after] == [i.feedback for i in before]
        assert {i.item_id for i in after}.isdisjoint({i.item_id for i in before})
        assert (await other.export_space("rentals"))[1:] != lines[1:]  # new ids
        hits = await other.recall("rentals", {"question": "cancel my rental early"})
        assert hits[0].item.outcome == "answered"

        plain = await other.import_space(lines, space_id="rentals-plain", encrypted=False)
        assert not plain.encrypted
        raw = await mongo[settings.mongodb.database]["space_items"].find_one(
            {"project_id": "tenant-b", "space_id": "rentals-plain"}
        )
        assert raw is not None
        assert "rental" in raw["payload"]
        with pytest.raises(InputError) as exists:
            await other.import_space(lines)
        assert exists.value.field == "space_id"
    assert len(await spaces.list_items("rentals")) == 2  # the source is untouched


async def test_import_re_embeds_for_another_embedder_and_validates_everything_first(
    settings: Settings, mongo: AsyncMongoClient[Document], spaces: AsyncSpaces
) -> None:
    await fill(spaces, "rentals")
    lines = await spaces.export_space("rentals")
    async with AsyncSpaces(
        settings, project_id="tenant-c", embedder=HashingEmbedder(32), client=mongo
    ) as other:
        bad_cases: list[tuple[list[str], str]] = [
            ([], "lines"),
            (["not json", *lines[1:]], "lines.0"),
            (lines[:2], "lines"),  # truncated
            ([lines[0], lines[1], '{"item": {}, "vectors": {}}'], "lines.2.item.item_id"),
            ([lines[0], lines[1], lines[2].replace('"answered"', "42")], "lines.2.item.outcome"),
        ]
        for bad, field in bad_cases:
            with pytest.raises(InputError) as refused:
                await other.import_space(bad)
            assert refused.value.field == field
        assert await other.list_spaces() == []

        moved = await other.import_space(lines)
        assert moved.embedder == HashingEmbedder(32).name
        assert moved.dimensions == 32
        hits = await other.recall("rentals", {"question": "where do I pay the deposit"})
        assert hits[0].item.inputs == {"question": "where do I pay the deposit"}
        assert hits[0].meaning == pytest.approx(1.0)  # re-embedded with the 32-d embedder


async def test_an_encrypted_import_where_the_deployment_has_no_key_is_a_state_conflict(
    settings: Settings, mongo: AsyncMongoClient[Document], spaces: AsyncSpaces
) -> None:
    """It was a 500 (ConfigError from the keyring); creating such a space was already a 409."""
    await fill(spaces, "keyless-source")
    lines = await spaces.export_space("keyless-source")
    async with AsyncSpaces(
        settings, project_id="tenant-keyless", embedder=EMBEDDER, client=mongo
    ) as keyless:
        with pytest.raises(StateConflict) as refused:
            await keyless.import_space(lines, encrypted=True)
        assert refused.value.field == "encrypted"
        assert await keyless.list_spaces() == []  # nothing stored

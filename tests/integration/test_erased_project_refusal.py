"""An erased project's refusal says "project erased" (issue 25).

After ``erase project``, even a brand-new user's first turn was refused with
"this session was erased", which never said that the *project* was.
"""

from __future__ import annotations

import pytest
from pymongo import AsyncMongoClient

from mongomem.adapters.mongo import Document, database
from mongomem.erasure.erase import Target, erase
from mongomem.errors import Erased
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.settings import EmbeddingSettings, Settings

pytestmark = pytest.mark.integration


async def test_each_refusal_names_what_was_erased(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    db = database(mongo, settings.mongodb)
    configured = settings.model_copy(update={"embedding": EmbeddingSettings(provider="stand-in")})
    for project, user in (("gone", "ana"), ("kept", "bo"), ("kept", "cy")):
        async with AsyncMemory(project_id=project, settings=configured) as memory:
            chat = memory.bind(MemoryRequestContext(user_id=user, session_id="s1"))
            await chat.record_turn("user", "hello")  # an erasure of nothing records nothing
    await erase(db, Target(project_id="gone"), actor="t")
    await erase(db, Target(project_id="kept", user_id="bo"), actor="t")
    await erase(db, Target(project_id="kept", user_id="cy", session_id="s1"), actor="t")
    cases = [
        ("gone", "brand-new-user", "s9", "project erased: project 'gone'"),
        ("gone", "ana", "s1", "project erased"),
        ("kept", "bo", "s2", "user erased: user 'bo'"),
        ("kept", "cy", "s1", "session erased: session 's1' of user 'cy'"),
    ]
    for project, user, session, said in cases:
        async with AsyncMemory(project_id=project, settings=configured) as memory:
            chat = memory.bind(MemoryRequestContext(user_id=user, session_id=session))
            with pytest.raises(Erased) as refused:
                await chat.record_turn("user", "hello again")
            assert str(refused.value).startswith(said), str(refused.value)
            with pytest.raises(Erased, match=said.split(":")[0]):
                await chat.save_semantic("x", "y")

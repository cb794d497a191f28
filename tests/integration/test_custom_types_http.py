"""A declared custom type over HTTP (SPEC C4, C6): the service saves, reads and deletes
it for the types its own project config declares, and refuses one it does not know."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr
from service_http import serving, start

from mongomem.errors import InputError
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.settings import Settings

pytestmark = pytest.mark.integration

KEY = "custom-types-key-0123456789abcdef"
CONFIG = """
memory:
  extraction:
    custom:
      - {name: preference, scope: user, key: [topic], fields: {topic: t, value: v, note: n},
         instructions: "Extract preferences."}
"""


async def test_the_service_saves_reads_and_deletes_a_declared_type(
    settings: Settings, tmp_path: Path
) -> None:
    config = tmp_path / "project-config.yaml"
    config.write_text(CONFIG)
    served = serving(settings, api_keys=(SecretStr(f"http-custom:{KEY}"),))
    runner, url = await start(served.model_copy(update={"project_config": config}))
    try:
        async with AsyncMemory(project_id="http-custom", base_url=url, api_key=KEY) as memory:
            chat = memory.bind(MemoryRequestContext(user_id="ana"))
            saved = await chat.save_custom("preference", {"topic": "seat", "value": "aisle"})
            assert saved.action == "ADD"
            updated = await chat.save_custom("preference", {"topic": "seat", "value": "window"})
            assert (updated.action, updated.memory_id) == ("UPDATE", saved.memory_id)
            seat = await chat.get_custom("preference", "seat")
            assert seat is not None
            assert seat.fields == {"topic": "seat", "value": "window"}
            with pytest.raises(InputError, match="no field 'colour'"):
                await chat.save_custom("preference", {"topic": "seat", "colour": "red"})
            with pytest.raises(InputError, match="unknown memory type 'shoes'"):
                await chat.save_custom("shoes", {"size": "42"})
            assert await chat.delete_by_key("preference", "seat") is not None
            assert await chat.get_custom("preference", "seat") is None
    finally:
        await runner.stop()

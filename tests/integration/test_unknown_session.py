"""The processing status of a session that does not exist says so (issue 25): the SDK
raises NotFound, the service answers 404, ``mongomem memory status`` prints one line.

It answered ``"state": "done"``, so a mistyped session id read as finished.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from service_http import start
from test_cli_first_try import cli, fresh_env, local_pipeline
from test_service import KEY_A, with_keys

from mongomem.errors import NotFound
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.settings import EmbeddingSettings, Settings

pytestmark = pytest.mark.integration


async def test_an_unknown_session_is_not_found_directly_and_over_http(settings: Settings) -> None:
    configured = settings.model_copy(update={"embedding": EmbeddingSettings(provider="stand-in")})
    nobody = MemoryRequestContext(user_id="u", session_id="no-such-session")
    async with AsyncMemory(project_id="travel", settings=configured) as memory:
        with pytest.raises(NotFound, match="no-such-session"):
            await memory.bind(nobody).processing_status()
        known = memory.bind(MemoryRequestContext(user_id="u", session_id="known"))
        await known.record_turn("user", "hello")
        assert (await known.processing_status()).last_turn_seq == 1
    runner, url = await start(with_keys(configured))
    try:
        async with httpx.AsyncClient(base_url=url) as http:
            answer = await http.get(
                "/v1/users/u/sessions/no-such-session/status",
                headers={"Authorization": f"Bearer {KEY_A}"},
            )
        assert answer.status_code == 404, answer.text
        assert answer.json()["error"]["type"] == "NotFound"
        async with AsyncMemory(project_id="travel", api_key=KEY_A, base_url=url) as remote:
            with pytest.raises(NotFound):  # the SDK over HTTP raises the same class
                await remote.bind(nobody).processing_status()
    finally:
        await runner.stop()


def test_memory_status_of_an_unknown_session_says_so(settings: Settings, tmp_path: Path) -> None:
    local_pipeline(settings, tmp_path)
    done = cli(
        "memory",
        "status",
        "--project-id",
        "p",
        "--user-id",
        "u",
        "--session-id",
        "nope",
        cwd=tmp_path,
        env=fresh_env(),
    )
    assert done.returncode == 1
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert "no session 'nope'" in line

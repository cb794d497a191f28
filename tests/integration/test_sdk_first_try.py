"""The SDK works on the first try: as a newcomer runs it, in a new process and shell.

After ``make run`` a script with no ``MONGOMEM_*`` variables finds the local
servers through ``.mongomem/stages/env.json`` (what ``mongomem up`` saves); a
turn write and reads need no embedder; a blocking client that is never closed
shuts down without tracebacks at interpreter exit. (The README's agent snippet, run the
same way, is in test_docs_snippets.py.)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from doc_snippets import fresh_env, local_pipeline

from mongomem.settings import Settings

pytestmark = pytest.mark.integration


def run(code: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


TURNS_ONLY = """
from mongomem import Memory, MemoryRequestContext

memory = Memory(project_id="first-try")
chat = memory.bind(MemoryRequestContext(user_id="user_1", session_id="thread_1"))
chat.record_turn("user", "My home airport is Boston.")
print(len(chat.recent_turns(limit=20)), chat.get_semantic("home-airport"))
"""


def test_a_turn_and_reads_need_no_embedder_and_no_variables(
    settings: Settings, tmp_path: Path
) -> None:
    """It raised ``NotReady: no embedding provider``, then ``no MongoDB URI``."""
    local_pipeline(settings, tmp_path)  # no embedding provider in it
    done = run(TURNS_ONLY, tmp_path, fresh_env())
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "None"]


def test_a_blocking_client_never_closed_exits_without_tracebacks(
    settings: Settings, tmp_path: Path
) -> None:
    """It printed a screen of ``RuntimeError: Event loop is closed`` at exit."""
    local_pipeline(settings, tmp_path)
    for _ in range(2):  # the tracebacks came from background tasks: not every time
        done = run(TURNS_ONLY, tmp_path, fresh_env())
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""


def test_without_a_local_pipeline_the_error_says_what_to_set(tmp_path: Path) -> None:
    done = run(TURNS_ONLY, tmp_path, fresh_env())
    assert done.returncode == 1
    assert "no MongoDB URI: set MONGOMEM_MONGODB_URI" in done.stderr


def test_mongomem_env_prints_the_exports(settings: Settings, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "mongomem.cli", "env"]
    missing = subprocess.run(
        command, cwd=tmp_path, env=fresh_env(), capture_output=True, text=True, check=False
    )
    assert missing.returncode == 1
    assert "no local pipeline runs here" in missing.stderr
    local_pipeline(settings, tmp_path, MONGOMEM_LLM_BASE_URL="http://127.0.0.1:1/v1 x")
    done = subprocess.run(
        command, cwd=tmp_path, env=fresh_env(), capture_output=True, text=True, check=True
    )
    assert f"export MONGOMEM_MONGODB_URI='{settings.mongodb.uri}'" in done.stdout
    assert "export MONGOMEM_LLM_BASE_URL='http://127.0.0.1:1/v1 x'" in done.stdout
    shell = f'eval "$({sys.executable} -m mongomem.cli env)" && echo "$MONGOMEM_MONGODB_DATABASE"'
    echoed = subprocess.run(
        ["bash", "-c", shell],
        cwd=tmp_path,
        env=fresh_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    assert echoed.stdout.strip() == settings.mongodb.database

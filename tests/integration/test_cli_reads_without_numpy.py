"""A CLI read loads no numpy, also when it reads real memories (issue 25).

``tests/unit/test_cli_lazy_imports.py`` checks each command's imports against a
server that does not answer. Here each read runs to completion, as a fresh
process, on memories that carry embeddings (and a space with items), and must
still not load numpy: vectors are decoded only where one is compared.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pymongo import AsyncMongoClient

from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.adapters.mongo import Document
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.settings import Settings
from mongomem.spaces import AsyncSpaces, SearchKey

pytestmark = pytest.mark.integration

EMBEDDER = HashingEmbedder(64)

PROBE = """
import sys
from mongomem.cli.main import main
code = main(sys.argv[1:])
print("LOADED", code, " ".join(sorted(m for m in sys.modules if "." not in m)))
"""

EXPORT = ("export", "--project-id", "reads", "--user-id", "u1")
READS = [
    ("memory", "list", "--project-id", "reads", "--user-id", "u1"),
    ("memory", "count", "--project-id", "reads", "--user-id", "u1"),
    ("memory", "sessions", "--project-id", "reads", "--user-id", "u1"),
    ("memory", "turns", "--project-id", "reads", "--user-id", "u1", "--session-id", "s1"),
    ("memory", "status", "--project-id", "reads", "--user-id", "u1", "--session-id", "s1"),
    EXPORT,
    ("spaces", "list", "--project-id", "reads"),
    ("spaces", "show", "refunds", "--project-id", "reads"),
]


async def seed(settings: Settings, mongo: AsyncMongoClient[Document]) -> None:
    async with AsyncMemory(project_id="reads", settings=settings, embedder=EMBEDDER) as memory:
        chat = memory.bind(MemoryRequestContext(user_id="u1", session_id="s1"))
        await chat.record_turn("user", "My home airport is Boston.")
        await chat.save_semantic("home-airport", "The user's home airport is Boston.")
        await chat.save_semantic("home-airport", "The user's home airport is Denver now.")
    async with AsyncSpaces(settings, project_id="reads", embedder=EMBEDDER, client=mongo) as sp:
        await sp.create_space("refunds", keys=[SearchKey(argument="question")])
        await sp.add_item("refunds", inputs={"question": "a late parcel"}, outcome="voucher")


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def loaded_by(command: tuple[str, ...], cwd: Path, env: dict[str, str]) -> set[str]:
    """The top-level modules ``mongomem COMMAND`` loaded, run to success in a fresh process."""
    done = run([sys.executable, "-c", PROBE, *command], cwd, env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("LOADED")]
    assert lines, (command, done.stdout, done.stderr)
    _, code, *loaded = lines[-1].split()
    assert code == "0", (command, done.stderr)
    return set(loaded)


async def test_reads_of_stored_vectors_load_no_numpy(
    settings: Settings, mongo: AsyncMongoClient[Document], tmp_path: Path
) -> None:
    await seed(settings, mongo)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONGOMEM_")}
    env |= {
        "MONGOMEM_MONGODB_URI": settings.mongodb.uri or "",
        "MONGOMEM_MONGODB_DATABASE": settings.mongodb.database,
        "MONGOMEM_KAFKA_BOOTSTRAP": settings.kafka.bootstrap or "",
        "MONGOMEM_KAFKA_TOPIC_PREFIX": settings.kafka.topic_prefix,
    }
    for command in READS:
        loaded = await asyncio.to_thread(loaded_by, command, tmp_path, env)
        assert "numpy" not in loaded, command
    export = [sys.executable, "-m", "mongomem.cli", *EXPORT]
    exported = await asyncio.to_thread(run, export, tmp_path, env)
    assert exported.returncode == 0, exported.stderr
    assert '"embedding"' in exported.stdout  # the export did carry the vectors, losslessly

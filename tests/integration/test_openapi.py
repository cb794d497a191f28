"""The service's OpenAPI document, and Schemathesis fuzzing it (SPEC G5; issue 15 item 4).

``mongomem serve`` runs as a real subprocess on the test servers. Its
``/openapi.json`` must be a valid OpenAPI 3.1 document naming every operation
of the route table with the API-key scheme; then Schemathesis, a tool this
project did not write, generates requests from that document alone — valid
and invalid ones — with a valid key, a bounded number per operation:

* ``not_a_server_error``: no answer is a 5xx;
* ``response_schema_conformance``: every answer fits its documented schema;
* ``negative_data_rejection``: no request that violates the schema is accepted.

The MongoDB database is checked afterwards: the fuzzing wrote only through the
API (what it stored is whatever valid requests asked for).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from mongomem.models import BUILTIN_MEMORY_TYPES
from mongomem.sdk.spaces.wire import SPACE_OPERATIONS, SPACES_PREFIX
from mongomem.sdk.wire import ROUTES
from mongomem.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KEY = "openapi-env-key-0123456789abcdef"
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
#: Test cases per operation and phase: enough to find a 500, small enough for CI.
MAX_EXAMPLES = 25
#: What answers a schema-violating request: Schemathesis' defaults and 413.
NEGATIVE_STATUSES = [
    "400",
    "401",
    "403",
    "404",
    "405",
    "406",
    "409",
    "413",
    "415",
    "422",
    "428",
    "429",
    "5xx",
]
#: The bound of the whole run (seconds of Schemathesis' own clock): about two minutes.
MAX_SECONDS = 150


@pytest.fixture
async def served(settings: Settings, subprocess_env: dict[str, str]) -> AsyncIterator[str]:
    env = {
        **subprocess_env,
        "MONGOMEM_EMBEDDING_PROVIDER": "stand-in",
        "MONGOMEM_EMBEDDING_DIMENSIONS": "64",
        "MONGOMEM_LLM_USE_STAND_IN": "true",
        "MONGOMEM_SERVICE_API_KEYS": f"travel:{KEY}",
        "MONGOMEM_LOG_LEVEL": "WARNING",  # not the access log of thousands of requests
    }
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mongomem.cli", "serve", "--port", str(port), env=env
    )
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as client:
            for _ in range(300):
                try:
                    if (await client.get(f"{url}/healthz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
        yield url
    finally:
        server.terminate()
        await asyncio.wait_for(server.wait(), 30)


async def test_the_document_is_openapi_3_1_with_every_operation(served: str) -> None:
    from openapi_spec_validator import validate

    async with httpx.AsyncClient(base_url=served) as client:
        document = (await client.get("/openapi.json")).json()
        docs = await client.get("/docs")
    validate(document)  # raises on an invalid document
    assert document["openapi"].startswith("3.1")
    assert document["components"]["securitySchemes"]["ApiKey"]["scheme"] == "bearer"
    operations = {
        op["operationId"]: (method.upper(), path)
        for path, item in document["paths"].items()
        for method, op in item.items()
    }
    for name, route in ROUTES.items():
        # a route of {memory_type} is documented once per type, at its concrete path
        typed = "{memory_type}" in route.path
        for memory_type in sorted(BUILTIN_MEMORY_TYPES) if typed else [None]:
            operation_id = f"{name}_{memory_type}" if memory_type else name
            path = route.path.replace("{memory_type}", memory_type or "{memory_type}")
            assert operations[operation_id] == (route.method, path)
            operation = document["paths"][path][route.method.lower()]
            assert operation["security"] == [{"ApiKey": []}]
            assert "422" in operation["responses"]
            assert "409" in operation["responses"]
    assert not [p for p in document["paths"] if "{memory_type}" in p]
    listing = document["paths"]["/v1/users/{user_id}/memories/semantic"]["get"]
    assert "domain" not in [p["name"] for p in listing["parameters"]]  # taxonomic only
    save = document["components"]["schemas"]["SaveBody_episodic"]["properties"]["fields"]
    assert save["required"] == ["title", "content"]
    for name, op in SPACE_OPERATIONS.items():  # the space routes: one per table entry
        assert operations[f"spaces_{name}"] == (op.method, SPACES_PREFIX + op.path), name
        operation = document["paths"][SPACES_PREFIX + op.path][op.method.lower()]
        assert operation["security"] == [{"ApiKey": []}]
        assert str(op.status) in operation["responses"]
    spaces = {n for n in operations if n.startswith("spaces_")}
    assert spaces == {f"spaces_{name}" for name in SPACE_OPERATIONS}
    assert docs.status_code == 200
    assert "swagger" in docs.text.lower()


def test_schemathesis_with_every_check_finds_nothing(served: str, tmp_path: Path) -> None:
    """Every check (stateful phase included), bounded: 0 server errors, 0 schema
    violations, 0 undocumented statuses, 0 invalid requests accepted, 0 valid requests
    rejected, the ``Allow`` of every 405 right; the NDJSON import routes too, written by
    the serializer of ``schemathesis_hooks.py``. A refusal that depends on stored state
    (a space's kind, a turn's order, a cursor no such listing returned) is a 409, which
    a valid request may get; what no schema can state is told to the fuzzer by the hooks,
    with the service's own rules."""
    # A body past the service's size limit is refused with 413 before it is parsed: a
    # rejection of invalid data too (a fuzzed text far over its maxLength), which
    # Schemathesis' default list of rejecting statuses leaves out.
    config = tmp_path / "schemathesis.toml"
    config.write_text(
        f"[checks.negative_data_rejection]\nexpected-statuses = {json.dumps(NEGATIVE_STATUSES)}\n"
    )
    command = [
        str(SCHEMATHESIS),
        "--config-file",
        str(config),
        "run",
        f"{served}/openapi.json",
        "--header",
        f"Authorization: Bearer {KEY}",
        "--checks",
        "all",
        "--phases",
        "examples,coverage,fuzzing,stateful",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        "20261201",
        "--workers",
        "1",  # hypothesis describes strategies with ast: not thread-safe on 3.11
        "--no-color",
        "--generation-database",
        "none",
        "--continue-on-failure",
        "--request-timeout",
        "30",
        "--max-time",
        str(MAX_SECONDS),
        "--report",
        "junit",
        "--report-dir",
        str(tmp_path),
        "--exclude-path",
        "/metrics",  # Prometheus text: no JSON schema to check
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONGOMEM_")}
    env["SCHEMATHESIS_HOOKS"] = "schemathesis_hooks"
    env["PYTHONPATH"] = str(Path(__file__).parent)
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=900, check=False, env=env, cwd=tmp_path
    )
    (tmp_path / "schemathesis.txt").write_text(done.stdout + done.stderr)
    failures = done.stdout[done.stdout.find("FAILURES") :] if "FAILURES" in done.stdout else ""
    report = (failures or done.stdout)[:20000] + done.stderr[-3000:]
    assert done.returncode == 0, report
    (junit,) = tmp_path.glob("junit*.xml")
    suites = junit.read_text()
    assert 'failures="0"' in suites, report
    assert 'errors="0"' in suites, report
    generated = re.search(r"(\d+) generated, (\d+) passed", done.stdout)
    assert generated is not None, report
    assert int(generated[1]) == int(generated[2]) >= 10 * len(ROUTES)  # it did test

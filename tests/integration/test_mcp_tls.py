"""The MCP server's streamable HTTP over TLS (``MONGOMEM_MCP_TLS_…``) with the bearer token,
as a real subprocess, reached by the official MCP client trusting a throw-away CA."""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx2
import pytest
from mcp_http import TOKEN, free_port, http_client, http_server, without_token
from mcp_stdio import ok
from pymongo import AsyncMongoClient
from refused import refused_start

from mongomem.adapters.mongo import Document
from mongomem.testing import Certificates, make_certificates

pytestmark = pytest.mark.integration

SERVER = ("--project-id", "travel", "--user-id", "alice", "--session-id", "s1")


@pytest.fixture
def certs(tmp_path: Path) -> Certificates:
    return make_certificates(tmp_path)


@pytest.fixture
def env(subprocess_env: dict[str, str], certs: Certificates) -> dict[str, str]:
    return {
        **without_token(subprocess_env),
        "MONGOMEM_EMBEDDING_PROVIDER": "stand-in",
        "MONGOMEM_EMBEDDING_DIMENSIONS": "64",
        "MONGOMEM_LOG_LEVEL": "INFO",
        "MONGOMEM_MCP_AUTH_TOKEN": TOKEN,
        "MONGOMEM_MCP_TLS_CERT_FILE": str(certs.cert_file),
        "MONGOMEM_MCP_TLS_KEY_FILE": str(certs.key_file),
    }


async def test_the_mcp_client_trusting_the_ca_is_served_over_https(
    env: dict[str, str], mongo: AsyncMongoClient[Document], certs: Certificates, tmp_path: Path
) -> None:
    log = tmp_path / "stderr.log"
    trust = ssl.create_default_context(cafile=certs.ca_file)
    with log.open("w") as stderr:
        async with http_server(env, *SERVER, stderr=stderr, scheme="https") as url:
            async with http_client(url, token=TOKEN, verify=trust) as client:
                ok(await client.call_tool("record_turn", {"role": "user", "content": "over TLS"}))
                turns = ok(await client.call_tool("recent_turns", {}))["result"]
                assert [t["content"] for t in turns] == ["over TLS"]

            async with httpx2.AsyncClient(timeout=10) as untrusting:  # the system's CAs only
                with pytest.raises(httpx2.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                    await untrusting.post(url, json={})
            async with httpx2.AsyncClient(timeout=10) as plain:
                with pytest.raises(httpx2.HTTPError):
                    await plain.post(url.replace("https://", "http://"), json={})
            async with httpx2.AsyncClient(timeout=10, verify=trust) as tokenless:
                assert (await tokenless.post(url, json={})).status_code == 401  # TLS, then token

    logged = log.read_text()
    assert f"MCP server on {url}: bearer-token authentication on, TLS on" in logged
    assert TOKEN not in logged
    assert "PRIVATE KEY" not in logged


async def test_a_certificate_that_cannot_be_loaded_is_refused_before_it_starts(
    env: dict[str, str], tmp_path: Path
) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    port = free_port()
    code, stderr = await refused_start(
        "-m",
        "mongomem.cli",
        "mcp",
        *SERVER,
        "--transport",
        "streamable-http",
        "--port",
        str(port),
        env={**env, "MONGOMEM_MCP_TLS_CERT_FILE": str(junk)},
    )
    assert code == 1
    assert stderr == (f"mongomem: MONGOMEM_MCP_TLS_CERT_FILE ({junk}) holds no PEM certificate")


async def test_a_key_that_is_not_the_certificates_is_refused(
    env: dict[str, str], tmp_path: Path
) -> None:
    other = make_certificates(tmp_path, name="other")
    code, stderr = await refused_start(
        "-m",
        "mongomem.mcp_server",
        *SERVER,
        "--transport",
        "streamable-http",
        "--port",
        str(free_port()),
        env={**env, "MONGOMEM_MCP_TLS_KEY_FILE": str(other.key_file)},
    )
    assert code == 1
    assert stderr.startswith(
        f"mongomem mcp: MONGOMEM_MCP_TLS_KEY_FILE ({other.key_file}) is not the key of"
    )

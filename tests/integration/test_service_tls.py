"""The memory service over HTTPS (``MONGOMEM_SERVICE_TLS_…``), driven by the real SDK.

A throw-away CA signs a certificate for the loopback hosts
(:func:`mongomem.testing.make_certificates`); the service runs through
:func:`~mongomem.service.serve`, as ``mongomem serve`` runs it, on a free port.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr
from pymongo import AsyncMongoClient
from refused import refused_start
from service_http import EMBEDDER, serving

from mongomem.adapters.mongo import Document
from mongomem.errors import ConfigError, StorageError
from mongomem.sdk import AsyncMemory, Memory, MemoryRequestContext
from mongomem.sdk.spaces import HttpSpaces, Spaces
from mongomem.service import serve
from mongomem.settings import Settings
from mongomem.testing import Certificates, make_certificates

pytestmark = pytest.mark.integration

KEY = "travel-env-key-0123456789abcdef"
ALICE = MemoryRequestContext(user_id="alice", session_id="thread_123")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
    except OSError:
        return False
    return True


def with_tls(settings: Settings, port: int, cert: Path, key: Path) -> Settings:
    """``settings`` serving project travel (``KEY``) with stand-ins on 127.0.0.1:``port``,
    with ``cert`` and ``key``."""
    return serving(
        settings,
        host="127.0.0.1",
        port=port,
        api_keys=(SecretStr(f"travel:{KEY}"),),
        tls_cert_file=cert,
        tls_key_file=key,
    )


@pytest.fixture
def certs(tmp_path: Path) -> Certificates:
    return make_certificates(tmp_path)


@pytest.fixture
async def port(
    settings: Settings,
    mongo: AsyncMongoClient[Document],
    certs: Certificates,
    caplog: pytest.LogCaptureFixture,
) -> AsyncIterator[int]:
    """The service over HTTPS on this port until the test ends."""
    caplog.set_level(logging.INFO, logger="mongomem.service.app")
    port = free_port()
    stop = asyncio.Event()
    task = asyncio.create_task(
        serve(with_tls(settings, port, certs.cert_file, certs.key_file), stop, embedder=EMBEDDER)
    )
    try:
        for _ in range(100):
            assert not task.done(), task.exception()
            if listening(port):
                break
            await asyncio.sleep(0.05)
        yield port
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def test_the_sdk_saves_and_reads_over_https_trusting_the_private_ca(
    port: int, certs: Certificates, caplog: pytest.LogCaptureFixture
) -> None:
    started = [r.getMessage() for r in caplog.get_records("setup")]
    assert any("over HTTPS (TLS on" in line and str(certs.cert_file) in line for line in started), (
        started
    )
    assert not any("PRIVATE KEY" in line or str(certs.key_file) in line for line in started)
    base = f"https://127.0.0.1:{port}"
    async with AsyncMemory(
        project_id="travel", api_key=KEY, base_url=base, verify=certs.ca_file
    ) as memory:
        alice = memory.bind(ALICE)
        saved = await alice.save_semantic(label="home-airport", text="Boston (BOS).")
        fact = await alice.get_semantic("home-airport")
    assert fact is not None
    assert (fact.memory_id, fact.text) == (saved.memory_id, "Boston (BOS).")

    def blocking() -> str | None:  # the sync client, by host name, on its own loop thread
        url = f"https://localhost:{port}"
        with Memory(project_id="travel", api_key=KEY, base_url=url, verify=certs.ca_file) as m:
            found = m.bind(ALICE).get_semantic("home-airport")
        return None if found is None else found.text

    assert await asyncio.to_thread(blocking) == "Boston (BOS)."

    async with HttpSpaces(base, KEY, verify=str(certs.ca_file)) as spaces:
        assert await spaces.list_spaces() == []
    with Spaces(base_url=base, api_key=KEY, verify=certs.ca_file) as sync_spaces:
        assert await asyncio.to_thread(sync_spaces.list_spaces) == []


async def test_plain_http_to_the_tls_port_gets_no_answer(port: int) -> None:
    async with httpx.AsyncClient(timeout=5) as client:
        with pytest.raises(httpx.HTTPError):
            await client.get(f"http://127.0.0.1:{port}/healthz")
    async with AsyncMemory(
        project_id="travel", api_key=KEY, base_url=f"http://127.0.0.1:{port}"
    ) as memory:
        with pytest.raises(StorageError, match="unreachable"):
            await memory.bind(ALICE).get_semantic("home-airport")


async def test_a_client_without_the_ca_is_refused(port: int) -> None:
    base = f"https://127.0.0.1:{port}"
    async with httpx.AsyncClient(timeout=5) as client:
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await client.get(f"{base}/healthz")
    async with AsyncMemory(project_id="travel", api_key=KEY, base_url=base) as memory:
        with pytest.raises(ConfigError, match="certificate verify failed") as e:
            await memory.bind(ALICE).get_semantic("home-airport")
    assert not e.value.retriable
    assert "pass verify= the CA bundle" in str(e.value)
    async with HttpSpaces(base, KEY) as spaces:
        with pytest.raises(ConfigError, match="is not trusted"):
            await spaces.list_spaces()


@pytest.mark.parametrize("problem", ["missing", "wrong key", "not PEM"])
async def test_a_pair_that_cannot_be_loaded_stops_the_service_before_it_listens(
    settings: Settings, certs: Certificates, tmp_path: Path, problem: str
) -> None:
    cert, key = certs.cert_file, certs.key_file
    if problem == "missing":
        key = tmp_path / "no-such-key.pem"
    elif problem == "wrong key":
        key = make_certificates(tmp_path, name="other").key_file
    else:
        cert = tmp_path / "junk.pem"
        cert.write_text("not a certificate\n")
    port = free_port()
    with pytest.raises(ConfigError, match=r"MONGOMEM_SERVICE_TLS_(CERT|KEY)_FILE") as caught:
        await serve(with_tls(settings, port, cert, key), asyncio.Event(), embedder=EMBEDDER)
    assert "\n" not in str(caught.value)
    assert not listening(port)


async def test_mongomem_serve_says_what_is_wrong_in_one_line(
    subprocess_env: dict[str, str], certs: Certificates, tmp_path: Path
) -> None:
    other = make_certificates(tmp_path, name="other")
    port = free_port()
    env = {
        **subprocess_env,
        "PYTHONPATH": os.getcwd(),
        "MONGOMEM_EMBEDDING_PROVIDER": "stand-in",
        "MONGOMEM_LLM_USE_STAND_IN": "true",
        "MONGOMEM_SERVICE_TLS_CERT_FILE": str(certs.cert_file),
        "MONGOMEM_SERVICE_TLS_KEY_FILE": str(other.key_file),
    }
    code, stderr = await refused_start(
        "-m",
        "mongomem.cli",
        "serve",
        "--port",
        str(port),
        env=env,
    )
    assert code == 1
    assert stderr == (
        f"mongomem: MONGOMEM_SERVICE_TLS_KEY_FILE ({other.key_file}) is not the key of the "
        f"certificate in MONGOMEM_SERVICE_TLS_CERT_FILE ({certs.cert_file})"
    )
    assert not listening(port)

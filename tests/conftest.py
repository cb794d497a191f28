"""Shared fixtures.

``servers`` (session scope) finds or starts a real Kafka broker and a real
MongoDB-compatible server with change streams — the selection order lives in
:mod:`mongomem.local.infra`. Only tests that ask for it (integration, e2e) start
servers; unit and property tests run without any.

``settings`` gives each test its own database and topic prefix on those
servers, so tests never see each other's data.

Under pytest-xdist (``make test``) each worker is a session of its own and starts its
own servers; the workers tell the controller which, for the summary.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import AsyncIterator, Generator, Iterator
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from mongomem.adapters.mongo import Document, connect
from mongomem.local.infra import Servers, start_servers
from mongomem.settings import KafkaSettings, MongoSettings, Settings, load_settings

_SERVERS: list[Servers] = []


def pytest_report_header(config: pytest.Config) -> str:
    return "mongomem servers: started on first use by integration tests (see summary)"


_WORKER_SERVERS: list[str] = []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    described = [servers.describe() for servers in _SERVERS] + _WORKER_SERVERS
    for text in described:
        terminalreporter.write_sep("-", "servers the integration tests ran against")
        terminalreporter.write_line(text)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On an xdist worker: hand the servers it started to the controller."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["mongomem_servers"] = [servers.describe() for servers in _SERVERS]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """On the xdist controller: collect what each worker ran against."""
    name = node.gateway.id
    for text in getattr(node, "workeroutput", {}).get("mongomem_servers", []):
        _WORKER_SERVERS.append(f"({name}) " + text.replace("\n", f"\n({name}) "))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Keep each phase's report on the item (``item.rep_call``) for diagnostic fixtures."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture(scope="session")
def servers() -> Iterator[Servers]:
    started = start_servers(load_settings(), for_tests=True)
    _SERVERS.append(started)
    try:
        yield started
    finally:
        started.stop()


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:40]


@pytest.fixture
def settings(servers: Servers, request: pytest.FixtureRequest) -> Settings:
    """Settings on the test servers, with a database and topic prefix of this test's own."""
    unique = f"{_slug(request.node.name)}-{uuid.uuid4().hex[:8]}"
    return load_settings(
        mongodb=MongoSettings(uri=servers.mongodb_uri, database=f"t-{unique}"[:60]),
        kafka=KafkaSettings(
            bootstrap=servers.kafka_bootstrap, topic_prefix=f"t.{unique}", partitions=3
        ),
    )


@pytest.fixture
async def mongo(settings: Settings) -> AsyncIterator[AsyncMongoClient[Document]]:
    client = connect(settings.mongodb)
    try:
        yield client
    finally:
        await client.drop_database(settings.mongodb.database)
        await client.close()


@pytest.fixture
def subprocess_env(settings: Settings) -> dict[str, str]:
    """Environment for a stage run as a real subprocess, pointing at the test servers."""
    env = dict(os.environ)
    env.update(
        {
            "MONGOMEM_MONGODB_URI": settings.mongodb.uri or "",
            "MONGOMEM_MONGODB_DATABASE": settings.mongodb.database,
            "MONGOMEM_KAFKA_BOOTSTRAP": settings.kafka.bootstrap or "",
            "MONGOMEM_KAFKA_TOPIC_PREFIX": settings.kafka.topic_prefix,
            "MONGOMEM_KAFKA_PARTITIONS": str(settings.kafka.partitions),
        }
    )
    return env

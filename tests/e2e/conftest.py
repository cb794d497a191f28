"""What the pipeline e2e tests share: the labelled LLM stand-in, servers of their own,
and every stage of the pipeline as a process (``pipeline``), with its diagnostics
printed when a test fails.

A test module gets one pair of servers (its own Kafka and MongoDB-compatible server,
started by the harness) and each test a pipeline under its own topic prefix and
database, named after the test, or ``PIPELINE_NAME`` when the module sets one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from mongomem.testing import FakeOpenAIServer
from mongomem.testing.harness import Pipeline, local_servers, stand_in_llm


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeOpenAIServer]:
    with stand_in_llm() as server:
        yield server


@pytest.fixture(scope="module")
def pipeline_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with local_servers(tmp_path_factory.mktemp("pipeline-servers")) as pair:
        yield pair


@pytest.fixture
async def pipeline(
    pipeline_servers: Any, llm: FakeOpenAIServer, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Pipeline]:
    kafka, mongo = pipeline_servers
    name = getattr(request.module, "PIPELINE_NAME", request.node.name.replace("_", "-")[:30])
    pipe = Pipeline(root=tmp_path, kafka=kafka, mongo=mongo, llm=llm, prefix=name, database=name)
    pipe.start_all()
    try:
        yield pipe
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            print(await pipe.diagnostics())
    finally:
        pipe.stop_all()

"""Which servers the integration tests run against (SPEC I4): real ones, in containers
where a container engine answers and as local processes where none does; addresses
given in the settings win over both. The starters are replaced by recorders here, so
nothing is started."""

from __future__ import annotations

from typing import Literal

import pytest

from mongomem.errors import InfraError
from mongomem.local import infra
from mongomem.local.infra import Servers, start_servers
from mongomem.settings import InfraSettings, KafkaSettings, MongoSettings, Settings

Mode = Literal["auto", "uri", "containers", "local"]


def _settings(mode: Mode = "auto", mongo: str | None = None, kafka: str | None = None) -> Settings:
    return Settings(
        mongodb=MongoSettings(uri=mongo),
        kafka=KafkaSettings(bootstrap=kafka),
        infra=InfraSettings(mode=mode),
    )


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The starters :func:`start_servers` called, in order."""
    calls: list[str] = []

    def recorder(name: str) -> object:
        def start(servers: Servers, *args: object) -> None:
            calls.append(name)
            if "mongo" in name:
                servers.mongodb_uri, servers.mongo_kind = "mongodb://started", name
            else:
                servers.kafka_bootstrap, servers.kafka_kind = "started:9092", name

        return start

    for name in ("_mongo_container", "_kafka_container", "_local_mongo", "_local_kafka"):
        monkeypatch.setattr(infra, name, recorder(name.lstrip("_")))
    return calls


def _engine(monkeypatch: pytest.MonkeyPatch, answers: bool) -> None:
    monkeypatch.setattr(infra, "container_engine_available", lambda settings: answers)


def test_with_a_container_engine_both_servers_run_in_containers(
    monkeypatch: pytest.MonkeyPatch, started: list[str]
) -> None:
    _engine(monkeypatch, True)
    servers = start_servers(_settings(), for_tests=True)
    assert started == ["mongo_container", "kafka_container"]
    assert (servers.mongo_kind, servers.kafka_kind) == ("mongo_container", "kafka_container")


def test_without_one_both_servers_run_as_local_processes(
    monkeypatch: pytest.MonkeyPatch, started: list[str]
) -> None:
    _engine(monkeypatch, False)
    start_servers(_settings(), for_tests=True)
    assert started == ["local_mongo", "local_kafka"]


def test_given_addresses_are_used_as_they_are_and_nothing_is_started(
    monkeypatch: pytest.MonkeyPatch, started: list[str]
) -> None:
    _engine(monkeypatch, True)
    given = _settings(mongo="mongodb://db.example:27017/?replicaSet=rs0", kafka="broker:9092")
    servers = start_servers(given, for_tests=True)
    assert started == []
    assert (servers.mongodb_uri, servers.kafka_bootstrap) == (
        "mongodb://db.example:27017/?replicaSet=rs0",
        "broker:9092",
    )


def test_a_forced_mode_wins_over_the_engine_check(
    monkeypatch: pytest.MonkeyPatch, started: list[str]
) -> None:
    _engine(monkeypatch, True)
    start_servers(_settings("local"), for_tests=True)
    assert started == ["local_mongo", "local_kafka"]
    _engine(monkeypatch, False)
    with pytest.raises(InfraError, match="no container engine answers"):
        start_servers(_settings("containers"), for_tests=True)

"""Which Kafka and MongoDB the pipeline and its tests talk to — decided here only.

Selection order, for each of the two servers:

1. an explicit address (``MONGOMEM_MONGODB_URI`` / ``MONGOMEM_KAFKA_BOOTSTRAP``):
   use it as it is (a real replica set, Atlas, a real cluster);
2. else, when a container engine answers: testcontainers, with the real
   ``mongo`` image as a single-node replica set and an Apache Kafka image;
3. else: local processes (:mod:`mongomem.local.servers`) — the Apache Kafka
   broker and mongo-java-server, from Maven Central jars.

``MONGOMEM_INFRA_MODE`` can force ``uri``, ``containers`` or ``local``.
The pytest fixtures, ``make infra-up``/``infra-down``/``infra-status`` and
``make run`` all go through :func:`start_servers`.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mongomem.errors import InfraError
from mongomem.local.servers import SERVERS_FILE, LocalKafka, LocalMongo, free_port, port_in_use
from mongomem.settings import Settings

__all__ = [
    "LocalKafka",
    "LocalMongo",
    "Servers",
    "container_engine_available",
    "free_port",
    "local_servers_status",
    "persistent_servers",
    "port_in_use",
    "start_missing_servers",
    "start_servers",
    "stop_local_servers",
]


@dataclass
class Servers:
    """The servers in use, and how to stop the ones we started."""

    mongodb_uri: str
    kafka_bootstrap: str
    mongo_kind: str
    kafka_kind: str
    kafka: LocalKafka | None = None
    mongo: LocalMongo | None = None
    _stops: list[Callable[[], None]] = field(default_factory=list, repr=False)

    def describe(self) -> str:
        return (
            f"MongoDB: {self.mongo_kind} at {self.mongodb_uri}\n"
            f"Kafka:   {self.kafka_kind} at {self.kafka_bootstrap}"
        )

    def stop(self) -> None:
        for stop in reversed(self._stops):
            with contextlib.suppress(Exception):
                stop()
        self._stops.clear()


def container_engine_available(settings: Settings) -> bool:
    """True when a Docker-compatible engine answers a ping (not just a client binary)."""
    if shutil.which("docker") is None:
        return False
    host = settings.infra.docker_host
    if host is None:
        sock = Path("/var/run/docker.sock")
        if not sock.exists():
            return False
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(2)
            try:
                probe.connect(str(sock))
            except OSError:
                return False
    try:
        import docker  # testcontainers' dependency

        client = docker.DockerClient(base_url=host, timeout=3) if host else docker.from_env()
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


def start_servers(settings: Settings, *, for_tests: bool = False) -> Servers:
    """Find or start a MongoDB-compatible server and a Kafka broker.

    ``for_tests`` picks free ports, a throw-away state folder and an in-memory
    MongoDB, so test runs never touch a developer's ``make run`` servers.
    """
    mode = settings.infra.mode
    given_mongo, given_kafka = settings.mongodb.uri, settings.kafka.bootstrap
    if mode == "uri" and not (given_mongo and given_kafka):
        raise InfraError(
            "MONGOMEM_INFRA_MODE=uri needs both MONGOMEM_MONGODB_URI and MONGOMEM_KAFKA_BOOTSTRAP"
        )
    use_containers = mode == "containers" or (
        mode == "auto"
        and not (given_mongo and given_kafka)
        and container_engine_available(settings)
    )
    if mode == "containers" and not container_engine_available(settings):
        raise InfraError("MONGOMEM_INFRA_MODE=containers but no container engine answers")

    servers = Servers("", "", "", "")
    try:
        if given_mongo:
            servers.mongodb_uri, servers.mongo_kind = given_mongo, "given by MONGOMEM_MONGODB_URI"
        elif use_containers:
            _mongo_container(servers)
        else:
            _local_mongo(servers, settings, for_tests)
        if given_kafka:
            servers.kafka_bootstrap = given_kafka
            servers.kafka_kind = "given by MONGOMEM_KAFKA_BOOTSTRAP"
        elif use_containers:
            _kafka_container(servers)
        else:
            _local_kafka(servers, settings, for_tests)
    except BaseException:
        servers.stop()
        raise
    return servers


def _state_dir(settings: Settings, for_tests: bool) -> Path:
    if for_tests:
        return Path(tempfile.mkdtemp(prefix="mongomem-test-"))
    return settings.infra.state_dir.resolve()


def _cache(settings: Settings) -> Path:
    return settings.infra.state_dir.resolve() / "cache"


def _local_mongo(servers: Servers, settings: Settings, for_tests: bool) -> None:
    state = _state_dir(settings, for_tests) / "mongo"
    state.mkdir(parents=True, exist_ok=True)
    port = free_port() if for_tests else settings.infra.mongo_port
    mongo = LocalMongo(
        port=port,
        state_dir=state,
        cache_dir=_cache(settings),
        persistent=settings.infra.persistent,
        die_with_parent=for_tests,
    )
    mongo.start()
    servers.mongo = mongo
    servers.mongodb_uri = mongo.uri
    backend = "H2 file" if mongo.persistent else "in memory"
    servers.mongo_kind = f"local mongo-java-server ({backend}, oplog on)"
    servers._stops.append(mongo.stop)


def _local_kafka(servers: Servers, settings: Settings, for_tests: bool) -> None:
    state = _state_dir(settings, for_tests) / "kafka"
    state.mkdir(parents=True, exist_ok=True)
    port = free_port() if for_tests else settings.infra.kafka_port
    kafka = LocalKafka(
        port=port,
        state_dir=state,
        cache_dir=_cache(settings),
        controller_port=0 if for_tests else port + 1,
        die_with_parent=for_tests,
    )
    kafka.start()
    servers.kafka = kafka
    servers.kafka_bootstrap = kafka.bootstrap
    servers.kafka_kind = "local Apache Kafka (KRaft, single node)"
    servers._stops.append(kafka.stop)


def _mongo_container(servers: Servers) -> None:
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.waiting_utils import wait_for_logs

    container = DockerContainer("mongo:8.0").with_command("--replSet rs0 --bind_ip_all")
    container.with_exposed_ports(27017)
    container.start()
    servers._stops.append(container.stop)
    wait_for_logs(container, "Waiting for connections", timeout=120)
    code, output = container.exec(
        [
            "mongosh",
            "--quiet",
            "--eval",
            "rs.initiate({_id:'rs0',members:[{_id:0,"
            "host:'localhost:27017'}]}); while(!db.hello().isWritablePrimary){sleep(200)}",
        ]
    )
    if code != 0:
        raise InfraError(f"could not initiate the mongo replica set: {output!r}")
    host, port = container.get_container_host_ip(), container.get_exposed_port(27017)
    servers.mongodb_uri = f"mongodb://{host}:{port}/?directConnection=true"
    servers.mongo_kind = "container mongo:8.0 (single-node replica set)"


def _kafka_container(servers: Servers) -> None:
    from testcontainers.kafka import KafkaContainer

    container = KafkaContainer().with_kraft()
    container.start()
    servers._stops.append(container.stop)
    servers.kafka_bootstrap = container.get_bootstrap_server()
    servers.kafka_kind = "container Kafka (KRaft)"


def persistent_servers(settings: Settings) -> tuple[LocalMongo, LocalKafka]:
    """The local servers of the state folder (``make run``'s), whether running or not."""
    root = settings.infra.state_dir.resolve()
    mongo = LocalMongo(
        port=settings.infra.mongo_port,
        state_dir=root / "mongo",
        cache_dir=_cache(settings),
        persistent=settings.infra.persistent,
    )
    port = settings.infra.kafka_port
    kafka = LocalKafka(
        port=port, state_dir=root / "kafka", cache_dir=_cache(settings), controller_port=port + 1
    )
    return mongo, kafka


def start_missing_servers(settings: Settings) -> Servers:
    """The persistent local servers: those running are kept, the missing ones started.

    (``start_servers`` alone would try to start both, and the running one's
    port is taken.) The result describes both; only the started ones stop
    with it.
    """
    mongo, kafka = persistent_servers(settings)
    mongodb, kafka_settings = settings.mongodb, settings.kafka
    running = []
    if mongo.running_pid() is not None:
        mongodb = mongodb.model_copy(update={"uri": mongo.uri})
        running.append("mongo")
    if kafka.running_pid() is not None:
        kafka_settings = kafka_settings.model_copy(update={"bootstrap": kafka.bootstrap})
        running.append("kafka")
    servers = start_servers(
        settings.model_copy(update={"mongodb": mongodb, "kafka": kafka_settings})
    )
    if "mongo" in running:
        servers.mongo_kind = "local mongo-java-server (already running)"
    if "kafka" in running:
        servers.kafka_kind = "local Apache Kafka (already running)"
    return servers


def stop_local_servers(settings: Settings) -> list[str]:
    """Stop the local servers recorded in the state folder; names of those stopped.

    First they are taken out of the supervisor's list, or it would start them again.
    """
    (settings.infra.state_dir.resolve() / "stages" / SERVERS_FILE).unlink(missing_ok=True)
    stopped = []
    for server in persistent_servers(settings):
        if server.running_pid() is not None:
            server.stop()
            stopped.append(server.name)
    return stopped


def local_servers_status(settings: Settings) -> dict[str, str]:
    """``{"mongo": "running (pid …) on port …", "kafka": "stopped"}``."""
    status = {}
    for server in persistent_servers(settings):
        pid = server.running_pid()
        if pid is not None:
            status[server.name] = f"running (pid {pid}) on 127.0.0.1:{server.port}"
        elif port_in_use(server.port):
            status[server.name] = f"stopped; port {server.port} is used by another process"
        else:
            status[server.name] = "stopped"
    return status

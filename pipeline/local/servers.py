"""Local server processes: the Apache Kafka broker and mongo-java-server.

Both come as jars from Maven Central, resolved by Maven with
``deploy/local/pom.xml``. The resolved class path is cached in the state
folder (keyed by the pom's hash), so a second start runs no Maven at all.

* Kafka: ``kafka.Kafka`` in KRaft combined mode, one node on 127.0.0.1. Ready
  once the broker answers a metadata request through aiokafka.
* MongoDB-compatible: ``deploy/local/MongoServerMain.java`` (compiled once
  with ``javac``) runs mongo-java-server with its oplog on, in memory or on an
  H2 file. Ready once pymongo's ``ping`` answers.

Every failure a newcomer can meet (no Java, no Maven, no network to Maven
Central, a busy port) becomes one :class:`~mongomem.errors.InfraError` whose
message says what to do.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mongomem.errors import InfraError

__all__ = [
    "ASSETS",
    "OPLOG_MAX",
    "SERVERS_FILE",
    "LocalKafka",
    "LocalMongo",
    "LocalServer",
    "free_port",
    "jars_cached",
    "pid_alive",
    "port_in_use",
]

#: deploy/local of the checkout this package runs from.
ASSETS = Path(__file__).resolve().parents[2] / "deploy" / "local"

Profile = Literal["kafka", "mongo"]

#: The JVM options of both local servers. ``-XX:-UsePerfData``: no performance-counter
#: file, whose sampling thread woke 20 times a second in each idle server (issue 28; the
#: servers are then not listed by ``jps``/``jstat``, ``jcmd <pid>`` still works).
IDLE_JVM_FLAGS = ("-XX:+UseG1GC", "-XX:-UsePerfData")
#: The local broker's own: its code compiled by C1 only. C2 kept compiling the broker's
#: request paths for minutes after a start, the largest part of an idle broker's CPU
#: (issue 28: 0.7% of a core of 2.3%); at this machine's loads the broker is never the
#: bound (100,000 records produced: 19,100/s with C1 only, 22,500/s with C2, the Python
#: producer's limit either way; the broker used 2.4 s of CPU against 4.1 s). Not for
#: mongo-java-server, whose scans are the store-alone bounds the benchmarks report.
KAFKA_JVM_FLAGS = ("-XX:TieredStopAtLevel=1",)
#: The local mongo-java-server keeps about this many latest oplog entries (issue 28).
OPLOG_MAX = 20_000


#: The local servers (by name: ``kafka``, ``mongo``) the supervisor of ``mongomem up``
#: keeps alive, in its stage folder (see :mod:`mongomem.local.supervisor`).
SERVERS_FILE = "servers.json"


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _need(tool: str, hint: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise InfraError(f"{tool} was not found on PATH. {hint}")
    return path


def _java() -> str:
    return _need(
        "java",
        "Java 17 or newer runs the local Kafka and MongoDB-compatible servers: install it "
        "(Debian/Ubuntu: apt-get install openjdk-17-jdk-headless), or point "
        "MONGOMEM_MONGODB_URI and MONGOMEM_KAFKA_BOOTSTRAP at servers you already run.",
    )


def _cached_classpath(profile: Profile, cache_dir: Path) -> str | None:
    """The cached class path of ``profile``'s jars if every jar on it is present."""
    pom = ASSETS / "pom.xml"
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()[:16]
    cached = cache_dir / f"classpath-{profile}-{digest}.txt"
    if cached.exists():
        classpath = cached.read_text().strip()
        if classpath and all(Path(p).exists() for p in classpath.split(os.pathsep)):
            return classpath
    return None


def jars_cached(cache_dir: Path) -> bool:
    """Whether both servers' jars are resolved already (a start runs no Maven)."""
    return all(_cached_classpath(p, cache_dir) is not None for p in ("kafka", "mongo"))


@contextlib.contextmanager
def _cache_lock(cache_dir: Path) -> Iterator[None]:
    """Hold the cache folder's lock: one process at a time resolves jars or builds.

    Parallel test workers (pytest-xdist) and two ``mongomem up`` runs share the cache;
    the first resolves and compiles, the others wait and find the result. Where
    ``fcntl`` is missing (Windows) there is no lock.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    cache_dir.mkdir(parents=True, exist_ok=True)
    with (cache_dir / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def resolve_classpath(profile: Profile, cache_dir: Path) -> str:
    """The class path of ``profile``'s jars, resolving them with Maven on first use."""
    found = _cached_classpath(profile, cache_dir)
    if found is not None:
        return found
    with _cache_lock(cache_dir):
        return _cached_classpath(profile, cache_dir) or _resolve_classpath(profile, cache_dir)


def _resolve_classpath(profile: Profile, cache_dir: Path) -> str:
    pom = ASSETS / "pom.xml"
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()[:16]
    cached = cache_dir / f"classpath-{profile}-{digest}.txt"
    mvn = _need(
        "mvn",
        "Maven fetches the server jars from Maven Central on first start: install it "
        "(Debian/Ubuntu: apt-get install maven).",
    )
    cache_dir.mkdir(parents=True, exist_ok=True)
    out = cache_dir / f"classpath-{profile}.tmp"
    log = cache_dir / f"maven-{profile}.log"
    cmd = [
        mvn,
        "-B",
        "-q",
        "-f",
        str(pom),
        f"-P{profile}",
        "dependency:build-classpath",
        f"-Dmdep.outputFile={out}",
    ]
    with log.open("wb") as sink:
        proc = subprocess.run(cmd, stdout=sink, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0 or not out.exists():
        tail = log.read_text(errors="replace")[-600:]
        offline = any(
            s in tail for s in ("Could not transfer", "Unknown host", "Connection", "resolve")
        )
        what = (
            "Maven could not download the server jars from Maven Central (no network?)"
            if offline
            else "Maven failed to resolve the server jars"
        )
        raise InfraError(
            f"{what}. Check network access to Maven Central, or set MONGOMEM_MONGODB_URI / "
            f"MONGOMEM_KAFKA_BOOTSTRAP to existing servers. Maven's output: {log}\n{tail}"
        )
    out.replace(cached)
    return cached.read_text().strip()


def _compile_launcher(source: Path, classpath: str, classes: Path) -> None:
    """Compile the MongoDB launcher into ``classes`` (written elsewhere, then moved in)."""
    javac = _need("javac", "A JDK (not only a JRE) 17+ is needed to build the launcher.")
    building = classes.with_name(f"{classes.name}.{os.getpid()}.tmp")
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir(parents=True)
    build = subprocess.run(
        [javac, "-cp", classpath, "-d", str(building), str(source)],
        capture_output=True,
        check=False,
    )
    if build.returncode != 0:
        shutil.rmtree(building, ignore_errors=True)
        raise InfraError("compiling the MongoDB launcher failed: " + build.stderr.decode())
    shutil.rmtree(classes, ignore_errors=True)
    building.replace(classes)


@dataclass(kw_only=True)
class LocalServer(ABC):
    """A server process we start, wait for, and stop; its pid is kept in a file."""

    name: str
    port: int
    state_dir: Path
    cache_dir: Path
    env: dict[str, str] | None = None
    #: End the server when the process that started it dies (Linux), so a
    #: killed test run leaves no servers behind. Only for servers started and
    #: stopped from one thread, such as the test session's.
    die_with_parent: bool = False
    process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def pid_file(self) -> Path:
        return self.state_dir / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return self.state_dir / "logs" / f"{self.name}.log"

    @abstractmethod
    def _command(self) -> list[str]:
        """The command line that starts the server."""

    @abstractmethod
    def _ready(self) -> bool:
        """True once the server answers requests."""

    def _ports(self) -> tuple[int, ...]:
        return (self.port,)

    def running_pid(self) -> int | None:
        """The pid from the pid file if that process is alive."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if pid_alive(pid) else None

    def start(self, timeout_s: float = 120.0) -> None:
        """Start the server and block until it serves requests."""
        for port in self._ports():
            if port_in_use(port):
                raise InfraError(
                    f"port {port} on 127.0.0.1 is already in use, so the local {self.name} "
                    f"cannot start there. Stop what listens on it (`make infra-status` shows "
                    f"ours), or choose another port with MONGOMEM_INFRA_"
                    f"{'KAFKA' if self.name == 'kafka' else 'MONGO'}_PORT."
                )
        command = self._command()
        setpriv = shutil.which("setpriv") if self.die_with_parent else None
        if setpriv is not None:  # Linux util-linux: SIGTERM the server if we die first
            command = [setpriv, "--pdeathsig", "TERM", "--", *command]
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("ab") as log:  # the child keeps its own copy
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=self.env,
            )
        self.pid_file.write_text(str(self.process.pid))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                tail = self.log_file.read_text(errors="replace")[-1500:]
                self._cleanup()  # forgets the process
                raise InfraError(
                    f"the local {self.name} exited at start (code {code}); "
                    f"log: {self.log_file}\n{tail}"
                )
            if self._ready():
                return
            time.sleep(0.3)
        self.stop()
        raise InfraError(
            f"the local {self.name} did not become ready within {timeout_s:.0f}s; "
            f"log: {self.log_file}"
        )

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop cleanly (SIGTERM, then SIGKILL after ``timeout_s``)."""
        pid = self.process.pid if self.process is not None else self.running_pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline and _alive(pid, self.process):
                time.sleep(0.1)
            if _alive(pid, self.process):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
                if self.process is not None:
                    self.process.wait(10)
        self._cleanup()

    def kill(self) -> None:
        """SIGKILL the server (fault injection)."""
        pid = self.process.pid if self.process is not None else self.running_pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            if self.process is not None:
                self.process.wait(10)
        self._cleanup()

    def _cleanup(self) -> None:
        self.process = None
        self.pid_file.unlink(missing_ok=True)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (killed, not yet reaped)."""
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs: existence is all we can tell
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def _alive(pid: int, process: subprocess.Popen[bytes] | None) -> bool:
    if process is not None:
        return process.poll() is None
    return pid_alive(pid)


def _run_in_thread(check: Coroutine[Any, Any, bool]) -> bool:
    """Run an async readiness probe in its own loop and thread (callers may be async)."""
    result: list[bool] = []

    def target() -> None:
        try:
            result.append(asyncio.run(check))
        except Exception:
            result.append(False)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(30)
    return bool(result and result[0])


@dataclass(kw_only=True)
class LocalKafka(LocalServer):
    """Apache Kafka (KRaft, single node) from Maven Central jars."""

    name: str = "kafka"
    controller_port: int = 0
    heap: str = "768m"

    def __post_init__(self) -> None:
        if self.controller_port == 0:
            self.controller_port = free_port()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _ports(self) -> tuple[int, ...]:
        return (self.port, self.controller_port)

    def _command(self) -> list[str]:
        java = _java()
        classpath = resolve_classpath("kafka", self.cache_dir)
        data_dir = self.state_dir / "kafka-data"
        data_dir.mkdir(parents=True, exist_ok=True)
        config = self.state_dir / "kafka.properties"
        template = (ASSETS / "kafka.properties.template").read_text()
        config.write_text(
            template.format(port=self.port, controller_port=self.controller_port, data_dir=data_dir)
        )
        if not (data_dir / "meta.properties").exists():
            cluster_id = _kafka_cluster_id()
            fmt = subprocess.run(
                [
                    java,
                    "-cp",
                    classpath,
                    "kafka.tools.StorageTool",
                    "format",
                    f"--cluster-id={cluster_id}",
                    "-c",
                    str(config),
                    "--ignore-formatted",
                ],
                capture_output=True,
                check=False,
            )
            if fmt.returncode != 0:
                raise InfraError(
                    "formatting the Kafka data folder failed: "
                    + fmt.stdout.decode(errors="replace")[-800:]
                    + fmt.stderr.decode(errors="replace")[-800:]
                )
        return [
            java,
            f"-Xmx{self.heap}",
            "-Xms128m",
            *IDLE_JVM_FLAGS,
            *KAFKA_JVM_FLAGS,
            "-Djava.awt.headless=true",
            "-cp",
            classpath,
            "kafka.Kafka",
            str(config),
        ]

    def _ready(self) -> bool:
        if not port_in_use(self.port):
            return False
        return _run_in_thread(_kafka_serves_metadata(self.bootstrap))


def _kafka_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


async def _kafka_serves_metadata(bootstrap: str) -> bool:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=3000)
    try:
        await admin.start()
        await admin.list_topics()
        return True
    finally:
        await admin.close()


@dataclass(kw_only=True)
class LocalMongo(LocalServer):
    """mongo-java-server with oplog (change streams), in memory or on an H2 file."""

    name: str = "mongo"
    persistent: bool = False
    #: The oplog is kept to about this many latest entries, as a replica set caps its
    #: oplog (``None``: it only grows, mongo-java-server's own way; every change-stream
    #: read scans all of it). See ``deploy/local/MongoServerMain.java``.
    oplog_max: int | None = OPLOG_MAX
    #: The Java heap (``-Xmx``); a benchmark of 100,000 memories needs more than 1g.
    heap: str = "1g"

    @property
    def uri(self) -> str:
        return f"mongodb://127.0.0.1:{self.port}/?directConnection=true"

    def _command(self) -> list[str]:
        java = _java()
        cache = self.cache_dir
        classpath = resolve_classpath("mongo", cache)
        source = ASSETS / "MongoServerMain.java"
        digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
        classes = cache / f"mongo-launcher-{digest}"
        if not (classes / "MongoServerMain.class").exists():
            with _cache_lock(cache):
                if not (classes / "MongoServerMain.class").exists():
                    _compile_launcher(source, classpath, classes)
        args = [
            java,
            f"-Xmx{self.heap}",
            *IDLE_JVM_FLAGS,
            "-cp",
            f"{classes}{os.pathsep}{classpath}",
            "MongoServerMain",
            "127.0.0.1",
            str(self.port),
        ]
        if self.persistent:
            args.append(str(self.state_dir / "mongo.h2"))
        if self.oplog_max is not None:
            args.append(f"--oplog-max={self.oplog_max}")
        return args

    def _ready(self) -> bool:
        from pymongo import MongoClient
        from pymongo.errors import PyMongoError

        client: MongoClient[dict[str, object]] = MongoClient(
            self.uri, serverSelectionTimeoutMS=1000
        )
        try:
            client.admin.command("ping")
            return True
        except PyMongoError:
            return False
        finally:
            client.close()

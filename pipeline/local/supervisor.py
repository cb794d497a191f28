"""Stages as separate processes: start, stop, status, supervision (``make run``).

Each stage runs as ``python -m mongomem.cli run <stage> [args]`` in its own
process group, with a pid file and a log file in the state folder. The end-to-
end tests use the same class to SIGKILL and restart stages.

``mongomem up`` writes the stage processes it started to a plan and starts a
supervisor process (:class:`StageSupervisor`, ``python -m mongomem.local.supervisor``)
that restarts any of them found dead, with capped back-off, and counts the
restarts for ``mongomem status`` (:func:`supervise_stages`).

The local servers ``up`` runs from the state folder (Kafka and the
MongoDB-compatible server, :mod:`mongomem.local.infra`) are listed in
:data:`SERVERS_FILE` and supervised the same way: a server found dead is
started again (on its own thread: a start waits until it serves) after the same
capped back-off, and counted under its name (``kafka``, ``mongo``). Servers
given by URI or run in containers are not ours to restart.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mongomem.errors import MongomemError
from mongomem.local.servers import SERVERS_FILE, LocalServer, pid_alive
from mongomem.settings import Settings

__all__ = [
    "PLAN_FILE",
    "RESTARTS_FILE",
    "SERVERS_FILE",
    "PlannedStage",
    "StageProcess",
    "StageSupervisor",
    "local_servers",
    "local_stage_processes",
    "read_plan",
    "read_restarts",
    "read_servers",
    "stage_env",
    "supervise_stages",
    "write_plan",
    "write_servers",
]

log = logging.getLogger("mongomem.local.supervisor")


@dataclass(kw_only=True)
class StageProcess(LocalServer):
    """One stage process. ``name`` is unique per instance (``extractor-semantic``)."""

    port: int = 0
    stage: str
    args: Sequence[str] = field(default_factory=tuple)
    settle_s: float = 0.5

    def _ports(self) -> tuple[int, ...]:
        return ()

    def _command(self) -> list[str]:
        return [sys.executable, "-m", "mongomem.cli", "run", self.stage, *self.args]

    def _ready(self) -> bool:
        # A stage has no port to probe: alive after a short settle is "started".
        # Whether it makes progress is what `mongomem status` (lag) reports.
        time.sleep(self.settle_s)
        return self.process is not None and self.process.poll() is None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


def stage_env(base: Mapping[str, str], overrides: Mapping[str, str]) -> dict[str, str]:
    """The environment of a stage process: ``base`` plus ``overrides``."""
    env = dict(base)
    env.update(overrides)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


#: The stage processes ``mongomem up`` started, which the supervisor keeps alive.
PLAN_FILE = "plan.json"
#: Restart counts the supervisor keeps, per process name (``mongomem status`` shows them).
RESTARTS_FILE = "restarts.json"
#: Back-off between restarts of one stage: doubles from the first value while the
#: stage keeps dying within ``HEALTHY_AFTER_S`` of its start, capped at the second.
RESTART_BACKOFF_S = (1.0, 30.0)
HEALTHY_AFTER_S = 60.0


@dataclass(frozen=True)
class PlannedStage:
    """One stage process of the plan: its name, stage, arguments and metrics port."""

    name: str
    stage: str
    args: tuple[str, ...] = ()
    metrics_port: int | None = None


def _write_json(path: Path, value: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(value, indent=2))
    tmp.replace(path)  # readers never see half a file


def write_plan(stage_dir: Path, stages: Sequence[PlannedStage]) -> None:
    _write_json(stage_dir / PLAN_FILE, [asdict(s) for s in stages])


def read_plan(stage_dir: Path) -> list[PlannedStage]:
    try:
        rows = json.loads((stage_dir / PLAN_FILE).read_text())
    except (OSError, ValueError):
        return []
    return [PlannedStage(r["name"], r["stage"], tuple(r["args"]), r["metrics_port"]) for r in rows]


def write_servers(stage_dir: Path, names: Sequence[str]) -> None:
    """Name the local servers the supervisor restarts (``[]``: none)."""
    _write_json(stage_dir / SERVERS_FILE, list(names))


def read_servers(stage_dir: Path) -> list[str]:
    try:
        names = json.loads((stage_dir / SERVERS_FILE).read_text())
    except (OSError, ValueError):
        return []
    return [str(n) for n in names] if isinstance(names, list) else []


def read_restarts(stage_dir: Path) -> dict[str, dict[str, Any]]:
    """``{process name: {"restarts": n, "last_restart_at": iso}}`` (empty if none)."""
    try:
        value: dict[str, dict[str, Any]] = json.loads((stage_dir / RESTARTS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return value


@dataclass
class _Watch:
    delay_s: float
    due: float | None = None  # when the next restart may happen (set once seen dead)
    started: float = 0.0
    restarts: int = 0
    process: StageProcess | None = None
    starting: threading.Thread | None = None  # a server's start, under way

    def dead_since(self, name: str, first: float, cap: float) -> bool:
        """Seen dead now: schedule the restart (back-off); True once it is due."""
        now = time.monotonic()
        if self.due is None:
            if self.restarts and now - self.started < HEALTHY_AFTER_S:
                self.delay_s = min(cap, self.delay_s * 2)
            elif self.restarts:
                self.delay_s = first
            self.due = now + self.delay_s
            log.warning("%s is not running; restarting in %.0fs", name, self.delay_s)
        if now < self.due:
            return False
        self.due, self.started = None, time.monotonic()
        self.restarts += 1
        return True


def _count(stage_dir: Path, counts: dict[str, dict[str, Any]], name: str) -> None:
    entry = counts.setdefault(name, {"restarts": 0})
    entry["restarts"] = int(entry["restarts"]) + 1
    entry["last_restart_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    _write_json(stage_dir / RESTARTS_FILE, counts)


def _restart_server(server: LocalServer) -> None:
    try:
        server.start()
        log.warning("%s restarted (pid %s)", server.name, server.running_pid())
    except MongomemError as exc:
        log.error("%s did not restart: %s", server.name, str(exc).splitlines()[0])


def _supervise_servers(
    stage_dir: Path,
    servers: Mapping[str, LocalServer],
    watches: dict[str, _Watch],
    counts: dict[str, dict[str, Any]],
    backoff_s: tuple[float, float],
) -> None:
    """One round over the local servers named in :data:`SERVERS_FILE`."""
    for name in read_servers(stage_dir):
        server = servers.get(name)
        if server is None:
            continue
        watch = watches.setdefault(f"server:{name}", _Watch(delay_s=backoff_s[0]))
        if watch.starting is not None:
            if watch.starting.is_alive():
                continue  # a start under way waits until the server serves
            watch.starting = None
        if server.process is not None:
            server.process.poll()  # reaps our own child once it exits
        if server.running_pid() is not None or not watch.dead_since(name, *backoff_s):
            continue
        watch.starting = threading.Thread(
            target=_restart_server, args=(server,), name=f"restart-{name}", daemon=True
        )
        watch.starting.start()
        _count(stage_dir, counts, name)


def supervise_stages(
    stage_dir: Path,
    cache_dir: Path,
    env: Mapping[str, str],
    stop: threading.Event,
    *,
    poll_s: float = 0.5,
    backoff_s: tuple[float, float] = RESTART_BACKOFF_S,
    servers: Mapping[str, LocalServer] | None = None,
) -> None:
    """Keep every process of the plan (and the named local ``servers``) alive until ``stop``.

    A process found dead (its pid file names no live, non-zombie process) is
    restarted with ``env`` after a back-off: ``backoff_s[0]``, doubling while
    it keeps dying within :data:`HEALTHY_AFTER_S` of its start, at most
    ``backoff_s[1]``. Each restart is counted in :data:`RESTARTS_FILE`. The
    plan is re-read every poll, so a process taken out of it (``apply``
    replacing extractors) is left stopped. ``servers`` (by name) are restarted
    when :data:`SERVERS_FILE` names them, the same way.
    """
    first, cap = backoff_s
    watches: dict[str, _Watch] = {}
    counts = read_restarts(stage_dir)
    while not stop.is_set():
        _supervise_servers(stage_dir, servers or {}, watches, counts, backoff_s)
        for planned in read_plan(stage_dir):
            watch = watches.setdefault(planned.name, _Watch(delay_s=first))
            if watch.process is not None:
                watch.process.alive()  # reaps our own child once it exits
            probe = StageProcess(
                name=planned.name, stage=planned.stage, state_dir=stage_dir, cache_dir=cache_dir
            )
            if probe.running_pid() is not None or not watch.dead_since(planned.name, first, cap):
                continue
            process = StageProcess(
                name=planned.name,
                stage=planned.stage,
                args=planned.args,
                state_dir=stage_dir,
                cache_dir=cache_dir,
                env=_with_metrics_port(env, planned.metrics_port),
                settle_s=1.0,
            )
            try:
                process.start(timeout_s=30)
                watch.process = process
                log.warning("%s restarted (pid %s)", planned.name, process.running_pid())
            except MongomemError as exc:
                log.error("%s did not restart: %s", planned.name, exc)
            _count(stage_dir, counts, planned.name)
        stop.wait(poll_s)


def _with_metrics_port(env: Mapping[str, str], port: int | None) -> dict[str, str]:
    return {**env, "MONGOMEM_METRICS_PORT": str(port)} if port is not None else dict(env)


@dataclass(kw_only=True)
class StageSupervisor(LocalServer):
    """The process that keeps ``mongomem up``'s stage processes alive (pid file ``supervisor``)."""

    name: str = "supervisor"
    port: int = 0

    def _ports(self) -> tuple[int, ...]:
        return ()

    def _command(self) -> list[str]:
        supervisor = [sys.executable, "-m", "mongomem.local.supervisor"]
        return [*supervisor, str(self.state_dir), str(self.cache_dir)]

    def _ready(self) -> bool:
        time.sleep(0.3)
        return self.process is not None and self.process.poll() is None


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m mongomem.local.supervisor STAGE_DIR CACHE_DIR``: supervise until signalled."""
    stage_dir, cache_dir = (Path(a) for a in (argv or sys.argv[1:]))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    from mongomem.local.infra import persistent_servers
    from mongomem.settings import load_settings

    settings = load_settings()  # what `up` gave this process; its servers keep their data
    kept = settings.model_copy(
        update={"infra": settings.infra.model_copy(update={"persistent": True})}
    )
    servers = {server.name: server for server in persistent_servers(kept)}
    supervise_stages(stage_dir, cache_dir, os.environ, stop, servers=servers)
    return 0


if __name__ == "__main__":
    sys.exit(main())


def local_servers(settings: Settings, *, supervised: bool = False) -> list[tuple[str, str]]:
    """(name, state) of the local servers (``mongo``, ``kafka``), with the supervisor's restarts.

    ``supervised``: only those the supervisor of ``mongomem up`` keeps alive here.
    """
    from mongomem.local.infra import local_servers_status

    stage_dir = settings.infra.state_dir.resolve() / "stages"
    restarts = read_restarts(stage_dir)
    kept = set(read_servers(stage_dir)) if supervised else None
    return [
        (name, f"{state}{_restarted(restarts.get(name))}")
        for name, state in local_servers_status(settings).items()
        if kept is None or name in kept
    ]


def local_stage_processes(settings: Settings) -> list[tuple[str, str]]:
    """(name, state) of each stage process ``mongomem up`` started here, by name."""
    stage_dir = settings.infra.state_dir.resolve() / "stages"
    pids = sorted(stage_dir.glob("*.pid")) if stage_dir.exists() else []
    restarts = read_restarts(stage_dir)
    return [(f.stem, f"{_pid_state(f)}{_restarted(restarts.get(f.stem))}") for f in pids]


def _restarted(seen: dict[str, Any] | None) -> str:
    """What the supervisor counted of one process: ``  restarted 2x (last …)``, or nothing."""
    if not seen:
        return ""
    return f"  restarted {seen['restarts']}x (last {seen.get('last_restart_at')})"


def _pid_state(pid_file: Path) -> str:
    try:
        pid = int(pid_file.read_text())
    except (OSError, ValueError):
        return "stopped"
    return f"running (pid {pid})" if pid_alive(pid) else "stopped"

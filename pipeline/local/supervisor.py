"""Stages as separate processes: start, stop, status, supervision (``make run``).

Each stage runs as ``python -m mongomem.cli run <stage> [args]`` in its own
process group, with a pid file and a log file in the state folder. The end-to-
end tests use the same class to SIGKILL and restart stages.

``mongomem up`` writes the stage processes it started to a plan and starts a
supervisor process (:class:`StageSupervisor`, ``python -m mongomem.local.supervisor``)
that restarts any of them found dead, with capped back-off, and counts the
restarts for ``mongomem status`` (:func:`supervise_stages`).
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
from mongomem.local.servers import LocalServer, pid_alive
from mongomem.settings import Settings

__all__ = [
    "PLAN_FILE",
    "RESTARTS_FILE",
    "PlannedStage",
    "StageProcess",
    "StageSupervisor",
    "local_stage_processes",
    "read_plan",
    "read_restarts",
    "stage_env",
    "supervise_stages",
    "write_plan",
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


def supervise_stages(
    stage_dir: Path,
    cache_dir: Path,
    env: Mapping[str, str],
    stop: threading.Event,
    *,
    poll_s: float = 0.5,
    backoff_s: tuple[float, float] = RESTART_BACKOFF_S,
) -> None:
    """Keep every process of the plan alive until ``stop`` is set.

    A process found dead (its pid file names no live, non-zombie process) is
    restarted with ``env`` after a back-off: ``backoff_s[0]``, doubling while
    it keeps dying within :data:`HEALTHY_AFTER_S` of its start, at most
    ``backoff_s[1]``. Each restart is counted in :data:`RESTARTS_FILE`. The
    plan is re-read every poll, so a process taken out of it (``apply``
    replacing extractors) is left stopped.
    """
    first, cap = backoff_s
    watches: dict[str, _Watch] = {}
    counts = read_restarts(stage_dir)
    while not stop.is_set():
        for planned in read_plan(stage_dir):
            watch = watches.setdefault(planned.name, _Watch(delay_s=first))
            if watch.process is not None:
                watch.process.alive()  # reaps our own child once it exits
            probe = StageProcess(
                name=planned.name, stage=planned.stage, state_dir=stage_dir, cache_dir=cache_dir
            )
            if probe.running_pid() is not None:
                continue
            now = time.monotonic()
            if watch.due is None:
                if watch.restarts and now - watch.started < HEALTHY_AFTER_S:
                    watch.delay_s = min(cap, watch.delay_s * 2)
                elif watch.restarts:
                    watch.delay_s = first
                watch.due = now + watch.delay_s
                log.warning("%s is not running; restarting in %.0fs", planned.name, watch.delay_s)
            if now < watch.due:
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
            watch.due, watch.started = None, time.monotonic()
            watch.restarts += 1
            try:
                process.start(timeout_s=30)
                watch.process = process
                log.warning("%s restarted (pid %s)", planned.name, process.running_pid())
            except MongomemError as exc:
                log.error("%s did not restart: %s", planned.name, exc)
            entry = counts.setdefault(planned.name, {"restarts": 0})
            entry["restarts"] = int(entry["restarts"]) + 1
            entry["last_restart_at"] = datetime.now(UTC).isoformat(timespec="seconds")
            _write_json(stage_dir / RESTARTS_FILE, counts)
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
    supervise_stages(stage_dir, cache_dir, os.environ, stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())


def local_stage_processes(settings: Settings) -> list[tuple[str, str]]:
    """(name, state) of each stage process ``mongomem up`` started here, by name."""
    stage_dir = settings.infra.state_dir.resolve() / "stages"
    pids = sorted(stage_dir.glob("*.pid")) if stage_dir.exists() else []
    restarts = read_restarts(stage_dir)
    out = []
    for pid_file in pids:
        seen = restarts.get(pid_file.stem)
        again = (
            f"  restarted {seen['restarts']}x (last {seen.get('last_restart_at')})" if seen else ""
        )
        out.append((pid_file.stem, f"{_pid_state(pid_file)}{again}"))
    return out


def _pid_state(pid_file: Path) -> str:
    try:
        pid = int(pid_file.read_text())
    except (OSError, ValueError):
        return "stopped"
    return f"running (pid {pid})" if pid_alive(pid) else "stopped"

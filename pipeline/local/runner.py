"""``mongomem up`` / ``down``: the whole pipeline on one machine (``make run`` / ``make stop``).

``up`` starts (or reuses) the local servers, a labelled LLM stand-in when no
endpoint is configured, and every stage as its own process; then it runs the
demo conversation (:mod:`mongomem.local.demo`) and returns, leaving the pipeline
running. ``down`` stops the stage processes and the servers.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mongomem.adapters.embeddings import local_model_installed
from mongomem.adapters.kafka import ensure_topics, pipeline_topics
from mongomem.adapters.readiness import check_ready
from mongomem.errors import ConfigError, NotReady
from mongomem.local import infra
from mongomem.local.project_env import configure, read_project_env
from mongomem.local.servers import (
    LocalKafka,
    LocalMongo,
    LocalServer,
    free_port,
    jars_cached,
    port_in_use,
)
from mongomem.local.supervisor import (
    PLAN_FILE,
    RESTARTS_FILE,
    SERVERS_FILE,
    PlannedStage,
    StageProcess,
    StageSupervisor,
    read_plan,
    stage_env,
    write_plan,
    write_servers,
)
from mongomem.project_config import enabled_types
from mongomem.settings import (
    KafkaSettings,
    MongoSettings,
    Settings,
    local_pipeline_env,
    overlay,
)

__all__ = [
    "LLMStandIn",
    "LocalService",
    "apply",
    "down",
    "inspector_key",
    "restart_extractors",
    "stage_specs",
    "up",
]

#: The environment ``up`` gave the stage processes (``apply`` reuses it).
ENV_FILE = "env.json"

#: Windowing values for the demo when the user set none: small windows, so the
#: demo's snapshots appear in seconds rather than after the 5-minute default.
DEMO_WINDOWING = {
    "MONGOMEM_WINDOW_MAX_MESSAGES": "6",
    "MONGOMEM_WINDOW_IDLE_TIMEOUT_S": "4",
}


#: Where ``up`` keeps the API key of the local service and inspector (mode 0600).
INSPECTOR_KEY_FILE = "inspector-key"


def inspector_key(stage_dir: Path) -> str:
    """The local service's API key: made once (random, 0600 file), then reused."""
    path = stage_dir / INSPECTOR_KEY_FILE
    if path.exists():
        return path.read_text().strip()
    key = secrets.token_urlsafe(24)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(key + "\n")
    return key


def stage_specs(types: tuple[str, ...]) -> list[tuple[str, str, tuple[str, ...]]]:
    """(process name, stage, args) for every stage process of a deployment."""
    specs: list[tuple[str, str, tuple[str, ...]]] = [
        ("watcher", "watcher", ()),
        ("windowing", "windowing", ()),
    ]
    specs += [(f"extractor-{t}", "extractor", ("--type", t)) for t in types]
    specs.append(("reconciler", "reconciler", ()))
    specs.append(("retention", "retention", ()))  # sweeps only if a type has a retention
    return specs


@dataclass(kw_only=True)
class LLMStandIn(LocalServer):
    """The rule-based OpenAI-compatible stand-in (``python -m mongomem.local.llm_stand_in``)."""

    name: str = "llm-stand-in"

    def _command(self) -> list[str]:
        return [sys.executable, "-m", "mongomem.local.llm_stand_in", "--port", str(self.port)]

    def _ready(self) -> bool:
        return port_in_use(self.port)


def _servers(settings: Settings) -> tuple[str, str, str]:
    """Reuse running local servers or start them; returns (mongo uri, bootstrap, description)."""
    if settings.mongodb.uri and settings.kafka.bootstrap:
        return settings.mongodb.uri, settings.kafka.bootstrap, "given by MONGOMEM_* URIs"
    status = infra.local_servers_status(settings)
    if all(s.startswith("running") for s in status.values()):
        uri = f"mongodb://127.0.0.1:{settings.infra.mongo_port}/?directConnection=true"
        return uri, f"127.0.0.1:{settings.infra.kafka_port}", "local servers (already running)"
    servers = infra.start_missing_servers(settings)
    return servers.mongodb_uri, servers.kafka_bootstrap, servers.describe()


def up(settings: Settings, *, demo: bool = True, say: Callable[[str], None] = print) -> int:
    """Start servers, the LLM stand-in if needed, every stage; then the demo."""
    root = settings.infra.state_dir.resolve()
    persistent = settings.model_copy(
        update={"infra": settings.infra.model_copy(update={"persistent": True})}
    )
    _refuse_stand_in_over_saved_llm(settings)
    if not (settings.mongodb.uri and settings.kafka.bootstrap):
        missing = not jars_cached(root / "cache")
        fetching = " (first start fetches jars from Maven Central)" if missing else ""
        say(f"mongomem: starting local servers{fetching} …")
    uri, bootstrap, described = _servers(persistent)
    say(described)
    ours = [  # the servers of the state folder this pipeline uses: the supervisor's to restart
        server.name
        for server in infra.persistent_servers(persistent)
        if server.running_pid() is not None
        and (uri, bootstrap)[server.name == "kafka"] == _address(server)
    ]
    overrides: dict[str, str] = {
        "MONGOMEM_MONGODB_URI": uri,
        "MONGOMEM_KAFKA_BOOTSTRAP": bootstrap,
        "MONGOMEM_INFRA_STATE_DIR": str(root),
    }
    if not settings.windowing.model_fields_set:
        overrides.update(DEMO_WINDOWING)
    stage_dir = root / "stages"
    stage_dir.mkdir(parents=True, exist_ok=True)
    if settings.llm.base_url is None:
        stand_in = LLMStandIn(port=_stand_in_port(stage_dir), state_dir=stage_dir, cache_dir=root)
        if stand_in.running_pid() is None:
            stand_in.start(timeout_s=30)
        overrides.update(
            {
                "MONGOMEM_LLM_BASE_URL": f"http://127.0.0.1:{stand_in.port}/v1",
                "MONGOMEM_LLM_API_KEY": "stand-in",
                "MONGOMEM_LLM_USE_STAND_IN": "true",
            }
        )
        say("")
        say("!" * 78)
        say("!! NO LLM IS CONFIGURED: extraction uses a rule-based STAND-IN, NOT A MODEL.")
        say("!! It only recognises simple phrasings. Set MONGOMEM_LLM_BASE_URL and")
        say("!! MONGOMEM_LLM_API_KEY to use a real OpenAI-compatible endpoint.")
        say("!" * 78)
        say("")
    else:  # the endpoint and model, never the key: `status` shows them, a re-run checks them
        overrides["MONGOMEM_LLM_BASE_URL"] = settings.llm.base_url
        overrides["MONGOMEM_LLM_MODEL"] = settings.llm.model
    if settings.embedding.provider is None:
        overrides["MONGOMEM_EMBEDDING_PROVIDER"] = _default_embedding_provider()
    project_env = read_project_env(settings)
    overrides.update(project_env)
    (stage_dir / ENV_FILE).write_text(json.dumps(overrides, indent=2))
    # The stage processes inherit this process's environment plus the overrides.
    env = stage_env(os.environ, overrides)
    child = settings.model_copy(
        update={
            "mongodb": MongoSettings(uri=uri, database=settings.mongodb.database),
            "kafka": settings.kafka.model_copy(update={"bootstrap": bootstrap}),
        }
    )
    child = overlay(child, project_env)
    types = enabled_types(child)
    asyncio.run(ensure_topics(child.kafka, _all_topics(child.kafka, types)))
    supervisor = StageSupervisor(state_dir=stage_dir, cache_dir=root, env=env)
    supervisor.stop(timeout_s=10)  # it would race us restarting what we start below
    planned = {p.name: p for p in read_plan(stage_dir)}
    plan: list[PlannedStage] = []
    for name, stage, args in stage_specs(types):
        metrics_port = free_port()
        process = StageProcess(
            name=name,
            stage=stage,
            args=args,
            state_dir=stage_dir,
            cache_dir=root,
            env={**env, "MONGOMEM_METRICS_PORT": str(metrics_port)},
            settle_s=1.0,
        )
        pid = process.running_pid()
        if pid is not None:
            say(f"  {name:<24} already running (pid {pid})")
            before = planned.get(name)
            plan.append(before or PlannedStage(name, stage, tuple(args), metrics_port))
            continue
        process.start(timeout_s=30)
        plan.append(PlannedStage(name, stage, tuple(args), metrics_port))
        metrics = f"http://127.0.0.1:{metrics_port}/metrics"
        say(f"  {name:<24} pid {process.running_pid()!s:<7} metrics {metrics}")
    write_plan(stage_dir, plan)
    write_servers(stage_dir, ours)
    supervisor.start(timeout_s=30)
    watched = "stopped stages" + (f" and {' and '.join(ours)}" if ours else "")
    say(f"  {'supervisor':<24} pid {supervisor.running_pid()!s:<7} restarts {watched}")
    _start_service(settings, stage_dir, root, env, say)
    say(f"  logs: {stage_dir / 'logs'}")
    say(f"extractions in force: {', '.join(types)}")
    if demo:
        from mongomem.local.demo import run_demo

        return asyncio.run(run_demo(child, env_overrides=overrides, say=say))
    return 0


def _address(server: LocalServer) -> str:
    """How the stages reach a local server: its URI (MongoDB) or bootstrap (Kafka)."""
    if isinstance(server, LocalKafka):
        return server.bootstrap
    if isinstance(server, LocalMongo):
        return server.uri
    return ""


def _refuse_stand_in_over_saved_llm(settings: Settings) -> None:
    """Refuse to put stages on the stand-in when the running pipeline uses a real LLM.

    ``up`` re-run from a shell without ``MONGOMEM_LLM_BASE_URL`` would start
    missing stages on the stand-in next to ones on the real endpoint. The API
    key is never saved, so the saved endpoint cannot simply be reused: say so.
    """
    saved = local_pipeline_env(settings) or {}
    endpoint = saved.get("MONGOMEM_LLM_BASE_URL")
    if settings.llm.base_url is not None or endpoint is None:
        return
    if saved.get("MONGOMEM_LLM_USE_STAND_IN") == "true":
        return
    raise ConfigError(
        f"the local pipeline runs with the LLM at {endpoint} (model "
        f"{saved.get('MONGOMEM_LLM_MODEL', '?')}), but this shell sets no MONGOMEM_LLM_BASE_URL, "
        "so stages started now would use the rule-based stand-in instead. Set "
        "MONGOMEM_LLM_BASE_URL and MONGOMEM_LLM_API_KEY as when the pipeline was started, "
        "or run `mongomem down` first to start over on the stand-in"
    )


def _all_topics(settings: KafkaSettings, types: tuple[str, ...]) -> list[str]:
    stages = ["watcher", "windowing", "reconciler"] + [f"extractor.{t}" for t in types]
    return pipeline_topics(settings, stages)


@dataclass(kw_only=True)
class LocalService(LocalServer):
    """``mongomem serve`` (memory service and the inspector at ``/ui``) for ``up``."""

    name: str = "service"

    def _command(self) -> list[str]:
        return [sys.executable, "-m", "mongomem.cli", "serve", "--port", str(self.port)]

    def _ready(self) -> bool:
        return port_in_use(self.port)


def _stand_in_port(stage_dir: Path) -> int:
    port_file = stage_dir / "llm-stand-in.port"
    if port_file.exists():
        return int(port_file.read_text())
    port = free_port()
    port_file.write_text(str(port))
    return port


def _default_embedding_provider() -> str:
    return "local" if local_model_installed() else "stand-in"


def _start_service(
    settings: Settings, stage_dir: Path, root: Path, env: dict[str, str], say: Callable[[str], None]
) -> None:
    """The memory service with the inspector, opened by a local key of the demo project."""
    from mongomem.local.demo import DEMO_PROJECT

    key = inspector_key(stage_dir)
    entries = [e.get_secret_value() for e in settings.service.api_keys]
    keys = ",".join([*entries, f"{DEMO_PROJECT}:{key}"])
    port = settings.service.port if not port_in_use(settings.service.port) else free_port()
    service = LocalService(
        port=port,
        state_dir=stage_dir,
        cache_dir=root,
        env={**env, "MONGOMEM_SERVICE_API_KEYS": keys},
    )
    pid = service.running_pid()
    if pid is None:
        service.start(timeout_s=60)
    say(f"  {'service':<24} pid {service.running_pid()!s:<7} http://127.0.0.1:{service.port}")
    say(
        f"inspector: http://127.0.0.1:{service.port}/ui  (project {DEMO_PROJECT}; its key is "
        f"in {stage_dir / INSPECTOR_KEY_FILE})"
    )


def restart_extractors(
    settings: Settings,
    types: tuple[str, ...],
    project_env: dict[str, str],
    say: Callable[[str], None] = print,
) -> Callable[[], dict[str, bool]]:
    """Replace the local extractor processes by one per type in ``types``.

    Returns a probe: process name → alive. Without a local pipeline (no
    ``make run``), nothing is started and the probe reports nothing.
    """
    root = settings.infra.state_dir.resolve()
    stage_dir = root / "stages"
    saved = stage_dir / ENV_FILE
    if not saved.exists():
        say("no local pipeline runs (make run); the settings are saved for its next start")
        return dict
    overrides = {**json.loads(saved.read_text()), **project_env}
    saved.write_text(json.dumps(overrides, indent=2))
    env = stage_env(os.environ, overrides)
    kept = [p for p in read_plan(stage_dir) if p.stage != "extractor"]
    write_plan(stage_dir, kept)  # the supervisor must not bring the old extractors back
    for pid_file in sorted(stage_dir.glob("extractor-*.pid")):
        old = StageProcess(
            name=pid_file.stem, stage="extractor", state_dir=stage_dir, cache_dir=root
        )
        old.stop(timeout_s=20)
        say(f"  {pid_file.stem:<24} stopped")
    started: list[StageProcess] = []
    for name, stage, args in stage_specs(types):
        if stage != "extractor":
            continue
        process = StageProcess(
            name=name,
            stage=stage,
            args=args,
            state_dir=stage_dir,
            cache_dir=root,
            env=env,
            settle_s=1.0,
        )
        process.start(timeout_s=30)
        say(f"  {name:<24} started (pid {process.running_pid()})")
        started.append(process)
        kept.append(PlannedStage(name, stage, tuple(args)))
    write_plan(stage_dir, kept)
    return lambda: {p.name: p.running_pid() is not None for p in started}


def down(settings: Settings, *, say: Callable[[str], None] = print) -> int:
    """Stop the stage processes, the LLM stand-in and the local servers."""
    root = settings.infra.state_dir.resolve()
    stage_dir = root / "stages"
    stopped: list[str] = []
    supervisor = StageSupervisor(state_dir=stage_dir, cache_dir=root)
    if supervisor.running_pid() is not None:  # first, or it restarts what we stop
        supervisor.stop(timeout_s=10)
        stopped.append(supervisor.name)
    for name in (PLAN_FILE, RESTARTS_FILE, SERVERS_FILE):
        (stage_dir / name).unlink(missing_ok=True)
    for pid_file in sorted(stage_dir.glob("*.pid")) if stage_dir.exists() else []:
        name = pid_file.stem
        process = StageProcess(name=name, stage=name, state_dir=stage_dir, cache_dir=root)
        if process.running_pid() is not None:
            process.stop(timeout_s=20)
            stopped.append(name)
        else:
            pid_file.unlink(missing_ok=True)
    (stage_dir / ENV_FILE).unlink(missing_ok=True)
    stopped += infra.stop_local_servers(settings)
    say("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
    return 0


def apply(
    settings: Settings, file: Path, *, timeout_s: float, say: Callable[[str], None] = print
) -> int:
    """Configure, restart the local extractors to match, wait for readiness."""
    configure(settings, file, say)
    env = read_project_env(settings)
    applied = overlay(settings, env)
    types = enabled_types(applied)
    running = restart_extractors(applied, types, env, say)
    deadline = time.monotonic() + timeout_s
    while True:
        problems = check_ready(applied)
        dead = [name for name, alive in running().items() if not alive]
        if not problems and not dead:
            say(f"ready: extractions in force: {', '.join(types)}")
            return 0
        if time.monotonic() > deadline:
            why = problems + [f"extractor process {n} is not running" for n in dead]
            raise NotReady("the memory server is not ready: " + "; ".join(why))
        time.sleep(0.5)

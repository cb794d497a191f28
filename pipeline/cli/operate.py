"""``mongomem status``, ``configure``, ``apply`` and ``replay`` (SPEC G4, I2, I5).

* ``status`` reports which extractions are in force (and where that came
  from), readiness, the last hour's LLM calls, tokens, dead letters and cost
  per type (``llm_usage``), each stage's consumer lag and dead-letter count,
  and the local processes.
* ``configure FILE`` validates ``project-config.yaml`` and saves the settings
  it implies to ``<state dir>/project.env``; ``make run`` passes them to the
  stage processes. For a deployment, print them and set them on the memory
  server (``MONGOMEM_ENABLED_EXTRACTIONS``, ``MONGOMEM_PROJECT_CONFIG``).
* ``apply FILE`` (:func:`mongomem.local.runner.apply`, beside the processes it
  restarts) configures, restarts the local extractor processes to match, and
  waits until the memory server reports ready and every enabled type's
  extractor is running.
* ``replay`` runs a stage in a *new* consumer group from an offset or a time
  (backfill, e.g. re-extracting a period with a newly enabled type). The
  stages' sinks are idempotent (deterministic ids, ledger), so a replay adds
  only what was missing.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Any

from mongomem.adapters.mongo import connect, database
from mongomem.adapters.readiness import check_ready
from mongomem.codec import kind_of
from mongomem.errors import BrokerError, StorageError
from mongomem.local.project_env import configure
from mongomem.local.supervisor import local_servers, local_stage_processes
from mongomem.models import Watermark, utcnow
from mongomem.operations.status import (
    dead_letter_counts,
    group_lag,
    set_group_position,
    stage_groups,
)
from mongomem.operations.usage import (
    LLM_USAGE,
    recent_runs,
    recent_usage,
    runs_table,
    usage_table,
)
from mongomem.project_config import enabled_types
from mongomem.settings import (
    Settings,
    with_local_pipeline,
)

__all__ = [
    "configure",
    "dead_letter_stages",
    "kafka_lines",
    "llm_line",
    "llm_usage_lines",
    "local_servers",
    "local_stage_processes",
    "print_status",
    "replay",
    "stage_groups",
    "stage_restart_lines",
    "with_local_defaults",
]


def with_local_defaults(settings: Settings) -> Settings:
    """The settings the local pipeline's stages run with (``make run``), if it runs.

    Those are the saved stage environment over ``settings``; without a local
    pipeline, the local servers' addresses fill in missing URIs.
    """
    settings = with_local_pipeline(settings)  # already done by the CLI; callers may not have
    kafka = settings.kafka
    if kafka.bootstrap is None:
        kafka = kafka.model_copy(update={"bootstrap": f"127.0.0.1:{settings.infra.kafka_port}"})
    mongodb = settings.mongodb
    if mongodb.uri is None:
        uri = f"mongodb://127.0.0.1:{settings.infra.mongo_port}/?directConnection=true"
        mongodb = mongodb.model_copy(update={"uri": uri})
    return settings.model_copy(update={"kafka": kafka, "mongodb": mongodb})


#: In-band records that are not data (the watcher's watermarks): not counted as lag.
MARKER_KINDS = frozenset({kind_of(Watermark)})


def dead_letter_stages(settings: Settings) -> list[str]:
    """The stages with a dead-letter topic: one per stage, one per enabled memory type."""
    types = enabled_types(settings)
    return ["watcher", "windowing", "reconciler"] + [f"extractor.{t}" for t in types]


def _source_of_types(settings: Settings) -> str:
    if settings.extraction.enabled is not None:
        return "MONGOMEM_ENABLED_EXTRACTIONS"
    if settings.project_config is not None:
        return str(settings.project_config)
    return "default: all built-in types"


async def print_status(settings: Settings, say: Callable[[str], None] = print) -> int:
    settings = with_local_defaults(settings)
    types = enabled_types(settings)
    say(f"extractions in force: {', '.join(types)}  (from {_source_of_types(settings)})")
    problems = check_ready(settings)
    say("readiness: ready" if not problems else "readiness: NOT READY — " + "; ".join(problems))
    for name, state in local_servers(settings):
        say(f"local {name}: {state}")
    say(llm_line(settings))
    for line in await llm_usage_lines(settings):
        say(line)
    for line in await stage_restart_lines(settings):
        say(line)
    say(f"kafka: {settings.kafka.bootstrap}  topic prefix: {settings.kafka.topic_prefix}")
    for line in await kafka_lines(settings, types):
        say(line)
    processes = local_stage_processes(settings)
    if processes:
        say("local stage processes:")
        for name, state in processes:
            say(f"  {name:<24} {state}")
    return 1 if problems else 0


#: How long ``status`` waits for Kafka's answers, all of them together.
KAFKA_STATUS_TIMEOUT_S = 15.0


async def kafka_lines(settings: Settings, types: tuple[str, ...]) -> list[str]:
    """Each consumer group's lag and the dead-letter counts, or one line: Kafka is unreachable.

    The groups are asked at once (each needs its own admin client), within
    :data:`KAFKA_STATUS_TIMEOUT_S` for all of them; a broker that does not answer
    costs that one line, and the other sections of ``status`` are shown all the same.
    """
    groups = [
        pair
        for stage in ("windowing", "extractor", "reconciler")
        for pair in stage_groups(settings.kafka, stage, types)
    ]

    async def ask() -> tuple[list[Any], dict[str, int]]:
        lags = await asyncio.gather(
            *(group_lag(settings.kafka, g, t, markers=MARKER_KINDS) for g, t in groups)
        )
        dead = await dead_letter_counts(settings.kafka, dead_letter_stages(settings))
        return list(lags), dead

    try:
        lags, dead = await asyncio.wait_for(ask(), KAFKA_STATUS_TIMEOUT_S)
    except (BrokerError, TimeoutError) as exc:
        reason = str(exc).splitlines()[0][:160] if str(exc) else "no answer"
        return [
            f"kafka: UNREACHABLE at {settings.kafka.bootstrap} ({reason}); "
            "consumer lag and dead letters unavailable"
        ]
    lines = ["consumer groups:"]
    for (group, _), lag in zip(groups, lags, strict=True):
        marked = f", {lag.markers} of them watermarks/markers" if lag.markers else ""
        text = f"lag {lag.data_lag:>6}  (committed {lag.committed}/{lag.end}{marked})"
        lines.append(f"  {group:<48} {text}")
    lines.append("dead letters: " + ", ".join(f"{s}={n}" for s, n in dead.items()))
    return lines


async def llm_usage_lines(settings: Settings, hours: float = 1.0) -> list[str]:
    """The last ``hours`` of ``llm_usage``: calls, unfinished calls, tokens and cost per
    purpose, then per memory type the snapshots that asked the LLM vs reused a stored answer
    (SPEC I6) and the dead letters."""
    title = f"LLM usage, last {hours:g} hour{'s' if hours != 1 else ''} (from {LLM_USAGE})"
    wait = min(5.0, settings.mongodb.server_selection_timeout_s)
    mongodb = settings.mongodb.model_copy(update={"server_selection_timeout_s": wait})
    client = connect(mongodb)
    try:
        collection = database(client, mongodb)[LLM_USAGE]
        since = utcnow() - timedelta(hours=hours)
        rows = await asyncio.wait_for(recent_usage(collection, since, settings.llm), 15)
        runs = await asyncio.wait_for(recent_runs(collection, since), 15)
    except (StorageError, TimeoutError) as exc:
        from mongomem.cli.failures import describe  # the address, not the driver's topology

        reason = describe(exc, settings.model_copy(update={"mongodb": mongodb})) or exc
        return [f"{title}: unavailable ({reason or 'MongoDB did not answer'})"]
    finally:
        await client.close()
    # "no LLM calls" and yet runs: every snapshot reused a stored answer
    return usage_table(rows, title=title, priced=bool(settings.llm.prices)) + runs_table(runs)


async def stage_restart_lines(settings: Settings) -> list[str]:
    """How often each stage restarted inside its process (``stage_restarts``, counted by
    the stage runtime wherever the stage runs), or one line saying they are unavailable."""
    from mongomem.operations.restarts import STAGE_RESTARTS, read_restarts

    wait = min(5.0, settings.mongodb.server_selection_timeout_s)
    mongodb = settings.mongodb.model_copy(update={"server_selection_timeout_s": wait})
    client = connect(mongodb)
    try:
        rows = await asyncio.wait_for(read_restarts(database(client, mongodb)), 15)
    except (StorageError, TimeoutError) as exc:
        from mongomem.cli.failures import describe

        reason = describe(exc, settings.model_copy(update={"mongodb": mongodb})) or exc
        return [f"stage restarts (from {STAGE_RESTARTS}): unavailable ({reason})"]
    finally:
        await client.close()
    if not rows:
        return [f"stage restarts (from {STAGE_RESTARTS}): none"]
    lines = [f"stage restarts (from {STAGE_RESTARTS}):"]
    for row in rows:
        error = row.last_error.splitlines()[0][:120] if row.last_error else ""
        lines.append(f"  {row.stage:<24} {row.restarts}x, last {row.last_at.isoformat()}  {error}")
    return lines


def llm_line(settings: Settings) -> str:
    """The LLM endpoint and model the stages use, and whether it is the stand-in (no key)."""
    llm = settings.llm
    if llm.base_url is None:
        return "LLM: none configured (set MONGOMEM_LLM_BASE_URL and MONGOMEM_LLM_API_KEY)"
    stand_in = "yes: a rule-based STAND-IN, NOT A MODEL" if llm.use_stand_in else "no"
    return f"LLM: {llm.base_url}  model {llm.model}  stand-in: {stand_in}"


async def replay(
    settings: Settings,
    args: argparse.Namespace,
    entry: Callable[[Settings, argparse.Namespace], Coroutine[Any, Any, None]],
    say: Callable[[str], None] = print,
) -> int:
    """Position a new consumer group, run the stage in it, stop once caught up."""
    settings = with_local_defaults(settings)
    types = tuple(args.types) if args.types else enabled_types(settings)
    groups = stage_groups(settings.kafka, args.stage, types, args.group_suffix)
    for group, topic in groups:
        positions = await set_group_position(
            settings.kafka, group, topic, offset=args.from_offset, since=args.since
        )
        say(f"{group}: starts at {sorted(positions.items())} of {topic}")
    task = asyncio.create_task(entry(settings, args))
    caught_up = 0
    try:
        while not task.done():
            await asyncio.sleep(2.0)
            lags = [await group_lag(settings.kafka, g, t) for g, t in groups]
            total = sum(lag.lag for lag in lags)
            say(f"replay progress: lag {total}")
            caught_up = caught_up + 1 if total == 0 else 0
            if caught_up >= 2 and not args.follow:
                say("caught up; stopping the replay")
                break
    finally:
        if not task.done():
            task.cancel()
        results = await asyncio.gather(task, return_exceptions=True)
    failure = results[0]
    if isinstance(failure, BaseException) and not isinstance(failure, asyncio.CancelledError):
        raise failure
    return 0

"""``mongomem erase user|session|project|resume``: erasures from the command line (SPEC J2).

::

    mongomem erase user --project-id P --user-id U --yes
    mongomem erase session --project-id P --user-id U --session-id S --yes
    mongomem erase project --project-id P --yes
    mongomem erase resume            complete every erasure a crash left running

Without ``--yes`` nothing is done (exit status 2). After MongoDB, the erased
sessions' window states get tombstones in the windowing changelog
(``<prefix>.windowing-windows-changelog``, plus ``--changelog-group`` for
other windowing groups, e.g. a replay's), so compaction drops them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mongomem.cli.options import add_project_id, add_user_id
from mongomem.errors import BrokerError

if TYPE_CHECKING:  # MongoDB and the erasure load when a command runs
    from mongomem.erasure.erase import ErasureResult, SessionsHook, StepHook
    from mongomem.models import SessionKey
    from mongomem.settings import Settings

__all__ = ["add_cli", "changelog_tombstones"]


def add_cli(subparsers: Any) -> None:
    """Add ``erase user|session|project|resume`` to the ``mongomem`` command."""
    parser = subparsers.add_parser(
        "erase",
        help="erase a user, a session or a project (needs --yes); resume a crashed erasure",
    )
    actions = parser.add_subparsers(dest="erase_what", required=True)
    for name in ("user", "session", "project", "resume"):
        sub = actions.add_parser(
            name,
            help=f"erase a {name}"
            if name != "resume"
            else "complete every erasure a crash left running",
        )
        if name != "resume":
            add_project_id(sub, help_text="the project to erase in (or to erase)")
            sub.add_argument("--yes", action="store_true", help="confirm: this is irreversible")
        if name in ("user", "session"):
            add_user_id(sub, help_text="the user to erase (or whose session)")
        if name == "session":
            sub.add_argument("--session-id", required=True, help="the session to erase")
        sub.add_argument("--actor", default="cli", help="who the erasure is recorded as")
        sub.add_argument(
            "--changelog-group",
            action="append",
            default=[],
            metavar="GROUP",
            help="another windowing consumer group whose changelog gets tombstones",
        )
        sub.add_argument(
            "--no-changelog",
            action="store_true",
            help="skip the changelog tombstones (no Kafka reachable)",
        )
        # crash drills: stop (sleep) after this step, to be killed there
        sub.add_argument("--pause-after", default=None, help=argparse.SUPPRESS)
        sub.set_defaults(handler=erase_command)


def _groups(settings: Settings, extra: Sequence[str]) -> list[str]:
    from mongomem.operations.status import consumer_group

    return [consumer_group(settings.kafka, "windowing"), *extra]  # the windowing stage's group


async def changelog_tombstones(
    settings: Settings, groups: Sequence[str], sessions: Sequence[SessionKey]
) -> int:
    """A tombstone for each session's window state in each group's windowing changelog.

    The state lives in the partition of the session's turns (co-partitioned), chosen
    by the producer's murmur2 partitioner. Returns the tombstones sent (and acknowledged).
    """
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.errors import KafkaError
    from aiokafka.partitioner import DefaultPartitioner

    from mongomem.adapters.kafka import TURNS, make_producer

    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka.bootstrap or "")
    try:
        await admin.start()
        existing = set(await admin.list_topics())
    except KafkaError as exc:
        raise BrokerError(f"could not list the changelog topics: {exc}") from exc
    finally:
        await admin.close()
    topics = [f"{g}-windows-changelog" for g in groups if f"{g}-windows-changelog" in existing]
    if not topics or settings.kafka.topic(TURNS) not in existing:
        return 0
    producer = make_producer(settings.kafka)
    sent = 0
    try:
        await producer.start()
        turns = await producer.partitions_for(settings.kafka.topic(TURNS))
        partitions = sorted(turns or ())
        if not partitions:
            return 0
        choose = DefaultPartitioner()
        futures = []
        for topic in topics:
            for session in sessions:
                key = session.kafka_key()
                partition = int(choose(key, partitions, partitions))
                futures.append(await producer.send(topic, None, key=key, partition=partition))
        await asyncio.gather(*futures)
        sent = len(futures)
    except KafkaError as exc:
        raise BrokerError(f"could not write the changelog tombstones: {exc}") from exc
    finally:
        await producer.stop()
    return sent


def _print(result: ErasureResult) -> None:
    print(result.message)
    print(json.dumps(result.model_dump(mode="json"), sort_keys=True))


async def _run(args: argparse.Namespace, settings: Settings) -> int:
    from mongomem.adapters.mongo import connect, database
    from mongomem.erasure.erase import Target, erase, resume_erasures

    hook: SessionsHook | None = None
    if not args.no_changelog:
        groups = _groups(settings, args.changelog_group)

        async def tombstones(sessions: Sequence[SessionKey]) -> None:
            await changelog_tombstones(settings, groups, sessions)

        hook = tombstones
    client = connect(settings.mongodb)
    try:
        db = database(client, settings.mongodb)
        if args.erase_what == "resume":
            done = await resume_erasures(db, actor=args.actor, on_sessions=hook)
            if not done:
                print("no erasure was left running")
            for result in done:
                _print(result)
            return 0
        target = Target(
            project_id=args.project_id,
            user_id=getattr(args, "user_id", None),
            session_id=getattr(args, "session_id", None),
        )
        pause: StepHook | None = None
        if args.pause_after is not None:

            async def pause(step: str) -> None:
                print(f"step {step} done", flush=True)
                if step == args.pause_after:
                    await asyncio.Event().wait()  # until killed

        _print(await erase(db, target, actor=args.actor, on_sessions=hook, on_step=pause))
        return 0
    finally:
        await client.close()


def erase_command(args: argparse.Namespace, settings: Settings) -> int:
    """Run ``mongomem erase …``; refuses (status 2) without ``--yes``."""
    if args.erase_what != "resume" and not args.yes:
        print(
            "mongomem: erasing is irreversible: add --yes to confirm (nothing was changed)",
            file=sys.stderr,
        )
        return 2
    return asyncio.run(_run(args, settings))

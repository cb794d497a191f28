"""Kafka plumbing shared by every stage: topic names, topic creation,
producers with safe defaults, and the dead-letter record.

Topics (all prefixed with ``MONGOMEM_KAFKA_TOPIC_PREFIX``):

==================  =======================  ==================================
topic               key                      value
==================  =======================  ==================================
``turns``           project/user/session     ``Turn`` (+ windowing ticks)
``snapshots``       project/user/session     ``Snapshot``
``candidates``      project[/user]           ``MemoryCandidate``
``dlq.<stage>``     the original key         ``DeadLetter`` (original bytes)
==================  =======================  ==================================

aiokafka errors are translated to :class:`~mongomem.errors.BrokerError` here.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict

from mongomem.codec import register
from mongomem.errors import BrokerError, MongomemError
from mongomem.extras import require
from mongomem.models import utcnow
from mongomem.settings import LOCAL_PIPELINE_HINT, KafkaSettings

with require("stages"):
    from aiokafka import AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import KafkaError, TopicAlreadyExistsError, for_code

__all__ = [
    "CANDIDATES",
    "SNAPSHOTS",
    "TURNS",
    "DeadLetter",
    "dead_letter_topic",
    "ensure_topics",
    "make_producer",
    "pipeline_topics",
    "until_topics_known",
]

TURNS = "turns"
SNAPSHOTS = "snapshots"
CANDIDATES = "candidates"


def dead_letter_topic(settings: KafkaSettings, stage: str) -> str:
    return settings.topic(f"dlq.{stage}")


def pipeline_topics(settings: KafkaSettings, stages: Iterable[str] = ()) -> list[str]:
    """The data topics plus a dead-letter topic per named stage."""
    names = [settings.topic(t) for t in (TURNS, SNAPSHOTS, CANDIDATES)]
    return names + [dead_letter_topic(settings, s) for s in stages]


async def ensure_topics(
    settings: KafkaSettings,
    topics: Iterable[str],
    *,
    partitions: int | None = None,
    configs: dict[str, str] | None = None,
) -> None:
    """Create the topics that do not exist yet (idempotent), with ``configs`` if given
    (``{"cleanup.policy": "compact"}`` for a changelog)."""
    admin = AIOKafkaAdminClient(
        bootstrap_servers=_bootstrap(settings),
        request_timeout_ms=int(settings.request_timeout_s * 1000),
    )
    try:
        await admin.start()
        existing = set(await admin.list_topics())
        wanted = [
            NewTopic(
                name=name,
                num_partitions=partitions or settings.partitions,
                replication_factor=settings.replication_factor,
                topic_configs=configs or {},
            )
            for name in dict.fromkeys(topics)
            if name not in existing
        ]
        if wanted:
            response = await admin.create_topics(wanted)
            _raise_refusals(response.topic_errors)
            # a created topic reaches the metadata a moment after the creation is answered
            # (a stage that read it at once found no such topic and restarted)
            names = {t.name for t in wanted}
            missing = await until_topics_known(admin.list_topics, names, settings.request_timeout_s)
            if missing:
                raise BrokerError(f"Kafka created {sorted(missing)} but does not list them")
    except KafkaError as exc:
        raise BrokerError(f"could not create topics on {_bootstrap(settings)}: {exc}") from exc
    finally:
        await admin.close()


def _raise_refusals(answers: Iterable[tuple[Any, ...]]) -> None:
    """Raise the first topic the broker did not create (one that exists already is fine).

    The admin client hands back the broker's answer per topic and raises nothing: a
    creation the broker refused, or left unfinished because it was shutting down, went
    unnoticed, and a stage ran on without its topic (a CI failure: the windowing
    changelog, missing after a broker restart during start-up, stalled the stage).
    """
    for topic, code, *rest in answers:
        if code in (0, TopicAlreadyExistsError.errno):
            continue
        error = for_code(code)
        detail = f" ({rest[0]})" if rest and rest[0] else ""
        raise BrokerError(f"Kafka did not create {topic}: {error.__name__}{detail}")


async def until_topics_known(
    list_topics: Callable[[], Awaitable[Iterable[str]]], names: Iterable[str], timeout_s: float
) -> set[str]:
    """Ask ``list_topics`` (an admin client's, a consumer's ``topics``) until it names every
    topic of ``names``, for at most ``timeout_s``; what it still lacks then (empty: all)."""
    deadline = time.monotonic() + timeout_s
    while True:
        missing = set(names) - set(await list_topics())
        if not missing or time.monotonic() >= deadline:
            return missing
        await asyncio.sleep(0.1)


def _bootstrap(settings: KafkaSettings) -> str:
    if not settings.bootstrap:
        raise BrokerError(
            f"no Kafka bootstrap servers: set MONGOMEM_KAFKA_BOOTSTRAP {LOCAL_PIPELINE_HINT}"
        )
    return settings.bootstrap


def make_producer(settings: KafkaSettings, **overrides: Any) -> AIOKafkaProducer:
    """An idempotent producer that waits for all in-sync replicas (not started).

    Batches are compressed as ``settings.compression`` says (zstd by default).
    """
    options: dict[str, Any] = {
        "bootstrap_servers": _bootstrap(settings),
        "acks": "all",
        "enable_idempotence": True,
        "linger_ms": 5,
        "compression_type": settings.compression_type,
        "request_timeout_ms": int(settings.request_timeout_s * 1000),
    }
    options.update(overrides)
    return AIOKafkaProducer(**options)


class DeadLetter(BaseModel):
    """A message a stage could not process, kept whole so nothing is lost.

    ``value_b64``/``key_b64`` are the original bytes; the source position lets
    an operator find (and replay) it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    stage: str
    source_topic: str
    source_partition: int
    source_offset: int
    key_b64: str | None
    value_b64: str | None
    error_class: str
    error: str
    retriable: bool
    attempts: int
    failed_at: AwareDatetime

    @classmethod
    def of(
        cls,
        *,
        stage: str,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        error: BaseException,
        attempts: int,
        at: datetime | None = None,
    ) -> DeadLetter:
        return cls(
            stage=stage,
            source_topic=topic,
            source_partition=partition,
            source_offset=offset,
            key_b64=base64.b64encode(key).decode() if key is not None else None,
            value_b64=base64.b64encode(value).decode() if value is not None else None,
            error_class=type(error).__name__,
            error=str(error)[:4000],
            retriable=isinstance(error, MongomemError) and error.retriable,
            attempts=attempts,
            failed_at=at or utcnow(),
        )

    def original_value(self) -> bytes | None:
        return base64.b64decode(self.value_b64) if self.value_b64 is not None else None


register("dead-letter", DeadLetter)

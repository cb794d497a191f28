"""MongoDB plumbing: the async client, collection names, capability probes.

The code never depends on multi-document transactions or ``$vectorSearch``
(mongo-java-server has neither); :func:`capabilities` says whether the server
offers them so callers can use them where present.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pymongo import AsyncMongoClient
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import ConfigurationError, ConnectionFailure, OperationFailure, PyMongoError

from mongomem.errors import ConfigError, StorageError
from mongomem.settings import LOCAL_PIPELINE_HINT, MongoSettings

__all__ = [
    "CHECKPOINTS",
    "DECISIONS",
    "EXTRACTIONS",
    "LEDGER",
    "MEMORIES",
    "SNAPSHOTS",
    "TURNS",
    "TURN_VECTORS",
    "Capabilities",
    "Document",
    "address",
    "capabilities",
    "connect",
    "database",
    "reachable",
    "unreachable",
]

Document = dict[str, Any]

TURNS = "turns"
#: Derived from turns: one embedding per turn, for turn search (erased with its turn).
TURN_VECTORS = "turn_vectors"
SNAPSHOTS = "snapshots"
MEMORIES = "memories"
LEDGER = "reconcile_ledger"
DECISIONS = "decision_log"
CHECKPOINTS = "checkpoints"
#: Stored extraction answers, one per snapshot, type, prompt, schema, model and mode (SPEC I6).
EXTRACTIONS = "extraction_results"


def connect(settings: MongoSettings, **options: Any) -> AsyncMongoClient[Document]:
    """An async client for ``settings.uri`` (tz-aware datetimes, UTC)."""
    if not settings.uri:
        raise StorageError(f"no MongoDB URI: set MONGOMEM_MONGODB_URI {LOCAL_PIPELINE_HINT}")
    try:
        return AsyncMongoClient(
            settings.uri,
            tz_aware=True,
            serverSelectionTimeoutMS=int(settings.server_selection_timeout_s * 1000),
            **options,
        )
    except ConfigurationError as exc:  # InvalidURI and bad options: fixed by the setting
        raise ConfigError(f"MONGOMEM_MONGODB_URI is not a usable MongoDB URI: {exc}") from exc


def address(uri: str | None) -> str:
    """The host list of a MongoDB URI, without credentials or options (``?`` if none)."""
    if not uri or "://" not in uri:
        return "?"
    hosts = uri.split("://", 1)[1].split("/", 1)[0].split("?", 1)[0]
    return hosts.rsplit("@", 1)[-1] or "?"


def unreachable(settings: MongoSettings) -> str:
    """One line saying the server did not answer: its address, the wait, the variable."""
    wait = settings.server_selection_timeout_s
    return (
        f"MongoDB at {address(settings.uri)} did not answer within {wait:g} s "
        "(MONGOMEM_MONGODB_URI); is it running? `mongomem infra status` shows the local servers"
    )


async def reachable(client: AsyncMongoClient[Document], settings: MongoSettings) -> None:
    """Fail at once, in one server-selection timeout, if the server does not answer.

    Called before a set-up of several steps, which would otherwise wait out
    the timeout once per step.
    """
    try:
        await client.admin.command("ping")
    except ConnectionFailure as exc:
        raise StorageError(unreachable(settings)) from exc


def database(
    client: AsyncMongoClient[Document], settings: MongoSettings
) -> AsyncDatabase[Document]:
    return client[settings.database]


@dataclass(frozen=True)
class Capabilities:
    transactions: bool
    server: str


async def capabilities(client: AsyncMongoClient[Document]) -> Capabilities:
    """Probe what the server offers (replica-set transactions).

    Whether ``$vectorSearch`` is there is a property of a collection's search
    indexes; the search adapter probes that itself.
    """
    try:
        try:
            hello = await client.admin.command("hello")
        except OperationFailure:  # servers that predate `hello` (mongo-java-server)
            hello = await client.admin.command("isMaster")
        info = await client.server_info()
    except PyMongoError as exc:
        raise StorageError(f"MongoDB is unreachable: {exc}") from exc
    transactions = bool(hello.get("setName")) and "logicalSessionTimeoutMinutes" in hello
    return Capabilities(transactions=transactions, server=str(info.get("version", "?")))

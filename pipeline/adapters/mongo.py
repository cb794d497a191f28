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
from pymongo.errors import OperationFailure, PyMongoError

from mongomem.errors import StorageError
from mongomem.settings import MongoSettings

__all__ = [
    "CHECKPOINTS",
    "DECISIONS",
    "EXTRACTIONS",
    "LEDGER",
    "MEMORIES",
    "SNAPSHOTS",
    "TURNS",
    "Capabilities",
    "Document",
    "capabilities",
    "connect",
    "database",
]

Document = dict[str, Any]

TURNS = "turns"
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
        raise StorageError("no MongoDB URI: set MONGOMEM_MONGODB_URI")
    return AsyncMongoClient(
        settings.uri,
        tz_aware=True,
        serverSelectionTimeoutMS=int(settings.server_selection_timeout_s * 1000),
        **options,
    )


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

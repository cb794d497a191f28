"""What a command prints when it fails: one line that says what to do.

A :class:`~mongomem.errors.MongomemError` prints as its message, unless its
cause is a server that did not answer: then, as for a driver error that
escaped an adapter, the line names the server's address and the variable that
sets it, never the driver's topology dump. Anything else is a defect and keeps
its traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

from mongomem.errors import MongomemError
from mongomem.settings import MongoSettings, Settings

__all__ = ["describe"]

_INFRA_HINT = "is it running? `mongomem infra status` shows the local servers"


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _is(exc: BaseException, module: str, *names: str) -> bool:
    """Whether ``exc`` is one of ``module``'s ``names`` (without importing the driver)."""
    loaded = sys.modules.get(module)
    classes = tuple(c for n in names if isinstance(c := getattr(loaded, n, None), type))
    return bool(classes) and isinstance(exc, classes)


def _unreachable(exc: BaseException, settings: Settings | None) -> str | None:
    for link in _chain(exc):
        if _is(link, "pymongo.errors", "ConnectionFailure"):
            from mongomem.adapters.mongo import unreachable  # pymongo is loaded already

            return unreachable(settings.mongodb if settings else MongoSettings())
        if _is(link, "pymongo.errors", "ConfigurationError"):
            return f"MONGOMEM_MONGODB_URI is not a usable MongoDB URI: {link}"
        if _is(
            link,
            "aiokafka.errors",
            "KafkaConnectionError",
            "KafkaTimeoutError",
            "NoBrokersAvailable",
        ):
            where = settings.kafka.bootstrap if settings else "?"
            return f"Kafka at {where} did not answer (MONGOMEM_KAFKA_BOOTSTRAP); {_INFRA_HINT}"
    return None


def describe(exc: BaseException, settings: Settings | None) -> str | None:
    """The one line ``exc`` prints as, or None for an error that is a defect (traceback)."""
    unreachable = _unreachable(exc, settings)
    if unreachable is not None:
        return unreachable
    if isinstance(exc, MongomemError):
        return str(exc) or type(exc).__name__
    return None

"""The one error tree of mongomem.

Every error the package raises on purpose is a :class:`MongomemError`. Each
class says whether trying the same operation again can help
(``retriable``), so retry loops ask the error instead of listing classes.
Errors of pymongo, aiokafka and openai are translated at the adapter boundary
(``raise StorageError(...) from exc``) and never leak past it.

::

    MongomemError
    ├── ConfigError                  bad settings or project-config.yaml   (final)
    ├── InputError                   a caller's bad input; nothing stored  (final)
    │   ├── MessageDecodeError       bytes on a topic that are not ours    (final)
    │   ├── BodyTimeout              a request body stalled or took too long (final)
    │   ├── StateConflict            well-formed, but the stored state refuses
    │                                it (a space's kind, a turn's order) (final)
    │   └── Unmappable               a framework's call (LangGraph store, …)
    │                                that memory cannot store as asked     (final)
    ├── InfraError                   a local server could not be started   (final)
    ├── StorageError                 MongoDB unreachable / failed write    (retriable
    │                                unless its pymongo cause is permanent)
    ├── BrokerError                  Kafka unreachable / produce failed    (retriable)
    ├── ChangeFeedError              the change stream broke               (retriable)
    │   └── ResumeTokenLost          the stored token left the oplog       (final: backfill)
    ├── ExtractionError              the LLM step failed                   (retriable)
    │   ├── LLMRateLimited           429; carries ``retry_after``          (retriable)
    │   ├── LLMUnavailable           5xx, timeout, connection refused      (retriable)
    │   └── LLMOutputInvalid         not JSON / fails the schema           (retriable)
    ├── EmbeddingError               the embedding provider failed         (retriable)
    ├── RerankError                  the optional reranker failed          (retriable)
    ├── ReconciliationError          a memory write could not be applied   (final)
    │   └── WriteConflict            a concurrent writer won; re-plan      (retriable)
    ├── NotReady                     a dependency is missing at start      (final)
    │   └── MissingExtra             an optional extra is not installed    (final)
    ├── RateLimitExceeded            a key over its rate; ``retry_after``  (retriable)
    ├── DeadlineExceeded             the request's deadline passed or its
    │                                client left; nothing stored          (retriable)
    ├── ProcessingTimeout            extraction not caught up in time      (retriable)
    ├── ProcessingFailed             a snapshot was dead-lettered          (final)
    ├── NotFound                     no such session (etc.) in the scope   (final)
    └── ScopeError                   identity or scope violation           (final)
        ├── Erased                   the user/session/project was erased   (final)
        └── AuthError                missing or wrong API key              (final)
"""

from __future__ import annotations

import sys

__all__ = [
    "AuthError",
    "BodyTimeout",
    "BrokerError",
    "ChangeFeedError",
    "ConfigError",
    "DeadlineExceeded",
    "EmbeddingError",
    "Erased",
    "ExtractionError",
    "InfraError",
    "InputError",
    "LLMOutputInvalid",
    "LLMRateLimited",
    "LLMUnavailable",
    "MessageDecodeError",
    "MissingExtra",
    "MongomemError",
    "NotFound",
    "NotReady",
    "ProcessingFailed",
    "ProcessingTimeout",
    "RateLimitExceeded",
    "ReconciliationError",
    "RerankError",
    "ResumeTokenLost",
    "ScopeError",
    "StateConflict",
    "StorageError",
    "Unmappable",
    "WriteConflict",
    "pymongo_error_is_transient",
]


class MongomemError(Exception):
    """Root of every error mongomem raises on purpose."""

    #: Whether the same operation can succeed later. A class attribute; only
    #: :class:`StorageError` narrows it per instance (from its pymongo cause).
    retriable: bool = False


class ConfigError(MongomemError):
    """A setting or ``project-config.yaml`` is wrong; the message names field and source."""


class InputError(MongomemError):
    """A caller passed bad input. Nothing was stored.

    ``field`` names the offending argument so an API can point at it.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class MessageDecodeError(InputError):
    """Bytes read from a topic are not a message this version understands."""


class BodyTimeout(InputError):
    """A streamed request body (an import) sent nothing for too long, or took longer in
    all than its limit (HTTP 408). Nothing of it was stored."""

    def __init__(self, message: str, *, field: str | None = "body") -> None:
        super().__init__(message, field=field)


class StateConflict(InputError):
    """A request any schema would call well formed that the stored state (or the
    deployment) refuses (HTTP 409): a space of another kind, an agent not attached, a
    space that exists already or has no key to rotate, an encrypted space where the
    deployment has no key, inputs that give none of the space's search keys, a turn
    earlier than its session's last one, a cursor that no listing like this one returned,
    an idempotency key already used for a different request.
    Nothing was stored; sending the same again fails the same way until the state
    changes."""


class Unmappable(InputError):
    """A framework integration's call has no faithful mapping onto memory (a LangGraph
    namespace that names no memory type, a value with fields the type does not have, a
    per-item TTL); the message names the mapping. Nothing was stored."""


class InfraError(MongomemError):
    """A local server (Kafka, MongoDB-compatible) could not be fetched or started."""


class StorageError(MongomemError):
    """MongoDB could not be reached or refused an operation.

    Retriable, except when its cause is a permanent pymongo error (a document
    too large, invalid BSON, a write or command rejected with a non-transient
    code: see :func:`pymongo_error_is_transient`): repeating those fails the
    same way, so a stage dead-letters the record instead of retrying it. The
    cause is ``cause`` when given, else the exception being handled where the
    error is made (the usual ``except PyMongoError as exc: raise
    StorageError(...) from exc``).
    """

    retriable = True

    def __init__(self, message: str, *, cause: BaseException | None = None) -> None:
        super().__init__(message)
        found = cause if cause is not None else sys.exception()
        if found is not None and not pymongo_error_is_transient(found):
            self.retriable = False


#: Server error codes that say "try again" (not-primary, shutting down, network,
#: time limits, lock or write conflicts): pymongo's own retryable set and a few more.
TRANSIENT_CODES = frozenset(
    {6, 7, 24, 50, 89, 91, 112, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436, 63, 150}
)


def pymongo_error_is_transient(error: BaseException) -> bool:
    """Whether a pymongo (or bson) ``error`` may pass if the operation is repeated.

    Connection failures, timeouts and not-primary / shutdown / conflict codes
    (:data:`TRANSIENT_CODES`, or an error label saying so) are transient.
    ``DocumentTooLarge``, invalid documents, BSON errors, configuration errors
    and any other ``OperationFailure`` (``WriteError``, ``BulkWriteError``
    whose write errors all carry other codes) are permanent. Errors that are
    not pymongo's or bson's are not judged here: transient.
    """
    from bson.errors import BSONError
    from pymongo import errors

    if isinstance(error, BSONError):
        return False
    if not isinstance(error, errors.PyMongoError):
        return True
    if isinstance(error, errors.ConnectionFailure | errors.WaitQueueTimeoutError):
        return True  # AutoReconnect, NetworkTimeout, ServerSelectionTimeoutError …
    if isinstance(error, errors.ExecutionTimeout | errors.WTimeoutError):
        return True
    if error.has_error_label("RetryableWriteError") or error.has_error_label(
        "TransientTransactionError"
    ):
        return True
    if isinstance(error, errors.BulkWriteError):
        details = error.details or {}
        codes = [e.get("code") for e in details.get("writeErrors", [])]
        codes += [e.get("code") for e in details.get("writeConcernErrors", [])]
        return not codes or any(code in TRANSIENT_CODES for code in codes)
    if isinstance(error, errors.OperationFailure):
        return error.code in TRANSIENT_CODES
    # DocumentTooLarge, InvalidOperation, ConfigurationError, InvalidName, InvalidURI are
    # permanent; other client-side conditions (cursor or encryption errors): keep trying
    permanent = (
        errors.DocumentTooLarge,
        errors.InvalidOperation,
        errors.ConfigurationError,
        errors.InvalidName,
        errors.InvalidURI,
    )
    return not isinstance(error, permanent)


class BrokerError(MongomemError):
    """Kafka could not be reached or did not acknowledge a write."""

    retriable = True


class ChangeFeedError(MongomemError):
    """The change stream broke; reopening it from the stored token may help."""

    retriable = True


class ResumeTokenLost(ChangeFeedError):
    """The stored resume token is no longer usable (history lost).

    Not retriable as such: the watcher must back-fill from the collection.
    """

    retriable = False


class ExtractionError(MongomemError):
    """The LLM step of a memory type failed."""

    retriable = True


class LLMRateLimited(ExtractionError):
    """The endpoint answered 429. ``retry_after`` is in seconds when it said so."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class LLMUnavailable(ExtractionError):
    """5xx, a timeout or a refused connection."""


class LLMOutputInvalid(ExtractionError):
    """The model's answer was not JSON or did not fit the schema."""


class EmbeddingError(MongomemError):
    """The embedding provider failed."""

    retriable = True


class RerankError(MongomemError):
    """The optional reranker failed or answered out of shape (a search then keeps its
    fused order: :func:`mongomem.adapters.rerank.rerank`)."""

    retriable = True


class ReconciliationError(MongomemError):
    """A memory write could not be applied."""


class WriteConflict(ReconciliationError):
    """A concurrent writer changed the memory first; plan again and retry."""

    retriable = True


class NotReady(MongomemError):
    """A component refuses to start: the message says which dependency is missing."""


class MissingExtra(NotReady):
    """A part of mongomem needs an optional extra that is not installed.

    ``extra`` names it; the message is one line with the ``pip install`` that
    brings it (see :mod:`mongomem.extras`).
    """

    def __init__(self, message: str, *, extra: str) -> None:
        super().__init__(message)
        self.extra = extra


class RateLimitExceeded(MongomemError):
    """An API key made more requests than the memory service allows it (HTTP 429).

    ``retry_after`` is in seconds: how long until the key may make a request
    again. The same call then succeeds; nothing of the refused one was applied.
    """

    retriable = True

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class DeadlineExceeded(MongomemError):
    """A request's deadline passed, or its client went away, before it was done (HTTP 503).

    Raised before anything is written: the request's embedding was dropped from
    its queue (or its result ignored) and nothing of it was stored. Sending it
    again may succeed once the service is less busy (:mod:`mongomem.deadlines`).
    ``retry_after``, when known, is the seconds the embedding queue it waited in
    is expected to take to drain (the service's ``Retry-After``).
    """

    retriable = True

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ProcessingTimeout(MongomemError):
    """``wait_until_processed`` ran out of time; the message names what is still pending.

    Waiting again can succeed: the pipeline goes on in the background.
    """

    retriable = True


class ProcessingFailed(MongomemError):
    """A snapshot's extraction (or one of its candidates) was dead-lettered: it will not
    be done without an operator (replay from the dead-letter topic); the message names it."""


class NotFound(MongomemError):
    """What a call is about does not exist in the caller's scope (HTTP 404).

    E.g. the processing status of a session in which no turn was ever
    recorded: a mistyped session id must not read as "done".
    """


class ScopeError(MongomemError):
    """A read or write would cross a user's or a project's scope."""


class Erased(ScopeError):
    """The user, session or project was erased (SPEC J2): its id is retired, nothing is
    written for it again."""


class AuthError(ScopeError):
    """The API key is missing, unknown, or not allowed for this project."""

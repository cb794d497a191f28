"""How :mod:`mongomem.errors` travel over HTTP, in both directions (SPEC G2).

=================================================  ======  =======================
error                                              status  notes
=================================================  ======  =======================
body that is not JSON                              400     ``InputError``, field ``body``
:class:`~mongomem.errors.BodyTimeout`              408     a streamed body stalled / too slow
:class:`~mongomem.errors.StateConflict`            409     well-formed; the state refuses it
:class:`~mongomem.errors.InputError`               422     ``field`` names the argument
:class:`~mongomem.errors.AuthError`                401     missing, unknown or revoked key
:class:`~mongomem.errors.ScopeError`               403     key of another project, reserved id
a memory that is not there (get, deletes)         404     type ``MemoryNotFound``
:class:`~mongomem.errors.NotFound`                 404     e.g. an unknown session's status
:class:`~mongomem.errors.RateLimitExceeded`        429     ``Retry-After`` header
any ``retriable`` error, :class:`NotReady`         503     ``Retry-After`` header
any other :class:`~mongomem.errors.MongomemError`  500
=================================================  ======  =======================

A 5xx answer never carries the error's own text, which can name a database
address, a driver's topology or an internal URL: :func:`error_body` with
``redact=True`` (what the service sends) says only what failed and that a
retry may help; the service logs the details.

The service sends :func:`error_body` with :func:`status_for`; the client turns
the answer back into the same class with :func:`error_from`, so code written
against :class:`~mongomem.sdk.DirectTransport` catches the same exceptions.
"""

from __future__ import annotations

import math
from typing import Any

from mongomem import errors
from mongomem.errors import (
    AuthError,
    BodyTimeout,
    DeadlineExceeded,
    InputError,
    LLMRateLimited,
    MongomemError,
    NotReady,
    RateLimitExceeded,
    ScopeError,
    StorageError,
)
from mongomem.sdk.wire import ErrorBody

__all__ = [
    "MAX_RETRY_AFTER_S",
    "MEMORY_NOT_FOUND",
    "error_body",
    "error_from",
    "public_message",
    "retry_after_s",
    "status_for",
]

#: The ``type`` of a 404 that means "no such memory" (``get`` answers ``None``).
MEMORY_NOT_FOUND = "MemoryNotFound"

_CLASSES: dict[str, type[MongomemError]] = {
    name: obj
    for name in errors.__all__
    if isinstance(obj := getattr(errors, name), type) and issubclass(obj, MongomemError)
}


def status_for(exc: MongomemError) -> int:
    """The HTTP status of an error (see the module table)."""
    if isinstance(exc, BodyTimeout):
        return 408
    if isinstance(exc, errors.StateConflict):
        return 409
    if isinstance(exc, InputError):
        return 400 if exc.field == "body" else 422
    if isinstance(exc, AuthError):
        return 401
    if isinstance(exc, ScopeError):
        return 403
    if isinstance(exc, errors.NotFound):
        return 404
    if isinstance(exc, RateLimitExceeded):
        return 429
    if exc.retriable or isinstance(exc, NotReady):
        return 503
    return 500


#: The longest ``Retry-After`` sent: a hint past it is a queue that will not drain soon.
MAX_RETRY_AFTER_S = 300


def retry_after_s(exc: MongomemError) -> int | None:
    """Whole seconds for ``Retry-After`` (429 and 503): the error's own hint (a rate
    limit's refill, an embedding queue's expected wait), else 1; at most
    :data:`MAX_RETRY_AFTER_S`."""
    if status_for(exc) not in (429, 503):
        return None
    hinted = (LLMRateLimited, RateLimitExceeded, DeadlineExceeded)
    hint = exc.retry_after if isinstance(exc, hinted) else None
    return min(MAX_RETRY_AFTER_S, max(1, math.ceil(hint))) if hint is not None else 1


#: What a 5xx answer says in place of the error's text, by class (first match wins).
_PUBLIC: tuple[tuple[type[MongomemError], str], ...] = (
    (errors.StorageError, "the database is unavailable; retry later"),
    (errors.BrokerError, "the message broker is unavailable; retry later"),
    (errors.ExtractionError, "the language model is unavailable; retry later"),
    (errors.EmbeddingError, "the embedding provider is unavailable; retry later"),
    (errors.WriteConflict, "a concurrent write won; retry"),
    (errors.NotReady, "the service is not ready; retry later"),
    (
        errors.DeadlineExceeded,
        "the service is busy: the request ran out of time and stored nothing; retry later",
    ),
)


def public_message(exc: MongomemError) -> str:
    """The text a caller may see: the error's own below 500, a generic one at 500 and above."""
    if status_for(exc) < 500:
        return str(exc)
    for cls, message in _PUBLIC:
        if isinstance(exc, cls):
            return message
    return "internal error; the service log has details"


def error_body(exc: MongomemError, *, redact: bool = False) -> ErrorBody:
    """``exc`` as an answer's body; ``redact`` keeps the details of a 5xx out of it."""
    return ErrorBody(
        type=type(exc).__name__,
        message=public_message(exc) if redact else str(exc),
        retriable=exc.retriable,
        field=exc.field if isinstance(exc, InputError) else None,
        retry_after=retry_after_s(exc),
    )


def _by_status(status: int) -> type[MongomemError]:
    if status in (400, 413, 422):
        return InputError
    if status == 401:
        return AuthError
    if status == 403:
        return ScopeError
    if status == 409:
        return errors.StateConflict
    if status == 429:
        return RateLimitExceeded
    if status == 503:
        return StorageError
    return MongomemError


def error_from(status: int, payload: Any, *, retry_after: float | None = None) -> MongomemError:
    """The exception an error answer stands for (its class by name, else by status).

    ``retry_after`` is the answer's ``Retry-After`` header in seconds, for an
    answer whose body does not say (a proxy's 429).
    """
    try:
        body = ErrorBody.model_validate(payload["error"])
    except (KeyError, TypeError, ValueError):
        body = ErrorBody(type="", message=f"the memory service answered HTTP {status}")
    cls = _CLASSES.get(body.type) or _by_status(status)
    if issubclass(cls, InputError):
        return cls(body.message, field=body.field)
    if issubclass(cls, (LLMRateLimited, RateLimitExceeded, DeadlineExceeded)):
        hint = body.retry_after if body.retry_after is not None else retry_after
        return cls(body.message, retry_after=hint)
    return cls(body.message)

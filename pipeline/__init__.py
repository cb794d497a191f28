"""mongomem: long-term memory for LLM agents.

One import package, ``mongomem``. The public surface is what this module
exports (``__all__``): the SDK (:class:`Memory`, :class:`AsyncMemory`,
:class:`MemoryRequestContext`, :class:`HttpTransport`), memory spaces
(:class:`Spaces`, :class:`AsyncSpaces`, :class:`HttpSpaces`), the error tree rooted at
:class:`MongomemError`, the event models and the settings; plus the test
doubles in ``mongomem.testing``. Every other module is internal and may change
between releases.

In the source tree ``mongomem`` is the folder ``pipeline/`` and
``mongomem.stages`` (the stream stages) is the folder ``stages/``, mapped by
setuptools' ``package-dir``. Every name loads on first use, so ``import
mongomem`` costs nothing beyond this module: a subpackage (``mongomem.cli``,
``mongomem.stages``) imports only what it needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mongomem.errors import (
        AuthError,
        BodyTimeout,
        BrokerError,
        ChangeFeedError,
        ConfigError,
        DeadlineExceeded,
        EmbeddingError,
        Erased,
        ExtractionError,
        InfraError,
        InputError,
        LLMOutputInvalid,
        LLMRateLimited,
        LLMUnavailable,
        MessageDecodeError,
        MissingExtra,
        MongomemError,
        NotFound,
        NotReady,
        ProcessingFailed,
        ProcessingTimeout,
        RateLimitExceeded,
        ReconciliationError,
        ResumeTokenLost,
        ScopeError,
        StateConflict,
        StorageError,
        Unmappable,
        WriteConflict,
    )
    from mongomem.models import (
        Action,
        Evidence,
        MemoryCandidate,
        MemoryScope,
        MemoryStatus,
        MemoryType,
        MemoryVersion,
        Role,
        SessionKey,
        Snapshot,
        SnapshotTurn,
        Turn,
    )
    from mongomem.sdk import AsyncMemory, HttpTransport, Memory, MemoryRequestContext
    from mongomem.sdk.spaces import HttpSpaces, Spaces
    from mongomem.settings import Settings, load_settings, resolve_settings
    from mongomem.spaces import AsyncSpaces

__version__ = "0.1.0"

#: Every public name, and the module it lives in: each loads on first use
#: (PEP 562), so ``import mongomem`` (and the ``mongomem`` command, which only
#: imports what its subcommand needs) pays for none of pydantic, the drivers or
#: numpy until a name is used.
_LAZY = {
    "Action": "mongomem.models",
    "AsyncMemory": "mongomem.sdk",
    "AsyncSpaces": "mongomem.spaces",
    "AuthError": "mongomem.errors",
    "BodyTimeout": "mongomem.errors",
    "BrokerError": "mongomem.errors",
    "ChangeFeedError": "mongomem.errors",
    "ConfigError": "mongomem.errors",
    "DeadlineExceeded": "mongomem.errors",
    "EmbeddingError": "mongomem.errors",
    "Erased": "mongomem.errors",
    "Evidence": "mongomem.models",
    "ExtractionError": "mongomem.errors",
    "HttpSpaces": "mongomem.sdk.spaces",
    "HttpTransport": "mongomem.sdk",
    "InfraError": "mongomem.errors",
    "InputError": "mongomem.errors",
    "LLMOutputInvalid": "mongomem.errors",
    "LLMRateLimited": "mongomem.errors",
    "LLMUnavailable": "mongomem.errors",
    "Memory": "mongomem.sdk",
    "MemoryCandidate": "mongomem.models",
    "MemoryRequestContext": "mongomem.sdk",
    "MemoryScope": "mongomem.models",
    "MemoryStatus": "mongomem.models",
    "MemoryType": "mongomem.models",
    "MemoryVersion": "mongomem.models",
    "MessageDecodeError": "mongomem.errors",
    "MissingExtra": "mongomem.errors",
    "MongomemError": "mongomem.errors",
    "NotFound": "mongomem.errors",
    "NotReady": "mongomem.errors",
    "ProcessingFailed": "mongomem.errors",
    "ProcessingTimeout": "mongomem.errors",
    "RateLimitExceeded": "mongomem.errors",
    "ReconciliationError": "mongomem.errors",
    "ResumeTokenLost": "mongomem.errors",
    "Role": "mongomem.models",
    "ScopeError": "mongomem.errors",
    "StateConflict": "mongomem.errors",
    "SessionKey": "mongomem.models",
    "Settings": "mongomem.settings",
    "Snapshot": "mongomem.models",
    "SnapshotTurn": "mongomem.models",
    "Spaces": "mongomem.sdk.spaces",
    "StorageError": "mongomem.errors",
    "Turn": "mongomem.models",
    "Unmappable": "mongomem.errors",
    "WriteConflict": "mongomem.errors",
    "load_settings": "mongomem.settings",
    "resolve_settings": "mongomem.settings",
}

__all__ = [
    "Action",
    "AsyncMemory",
    "AsyncSpaces",
    "AuthError",
    "BodyTimeout",
    "BrokerError",
    "ChangeFeedError",
    "ConfigError",
    "DeadlineExceeded",
    "EmbeddingError",
    "Erased",
    "Evidence",
    "ExtractionError",
    "HttpSpaces",
    "HttpTransport",
    "InfraError",
    "InputError",
    "LLMOutputInvalid",
    "LLMRateLimited",
    "LLMUnavailable",
    "Memory",
    "MemoryCandidate",
    "MemoryRequestContext",
    "MemoryScope",
    "MemoryStatus",
    "MemoryType",
    "MemoryVersion",
    "MessageDecodeError",
    "MissingExtra",
    "MongomemError",
    "NotFound",
    "NotReady",
    "ProcessingFailed",
    "ProcessingTimeout",
    "RateLimitExceeded",
    "ReconciliationError",
    "ResumeTokenLost",
    "Role",
    "ScopeError",
    "SessionKey",
    "Settings",
    "Snapshot",
    "SnapshotTurn",
    "Spaces",
    "StateConflict",
    "StorageError",
    "Turn",
    "Unmappable",
    "WriteConflict",
    "__version__",
    "load_settings",
    "resolve_settings",
]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

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
setuptools' ``package-dir``. The SDK and spaces names load on first use, so
``import mongomem`` stays cheap for the stages.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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
    RerankError,
    ResumeTokenLost,
    ScopeError,
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
from mongomem.settings import Settings, load_settings, resolve_settings

if TYPE_CHECKING:
    from mongomem.sdk import AsyncMemory, HttpTransport, Memory, MemoryRequestContext
    from mongomem.sdk.spaces import HttpSpaces, Spaces
    from mongomem.spaces import AsyncSpaces

__version__ = "0.1.0"

#: The names that load on first use, and the module each lives in.
_LAZY = {
    "AsyncMemory": "mongomem.sdk",
    "AsyncSpaces": "mongomem.spaces",
    "HttpSpaces": "mongomem.sdk.spaces",
    "HttpTransport": "mongomem.sdk",
    "Memory": "mongomem.sdk",
    "MemoryRequestContext": "mongomem.sdk",
    "Spaces": "mongomem.sdk.spaces",
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
    "RerankError",
    "ResumeTokenLost",
    "Role",
    "ScopeError",
    "SessionKey",
    "Settings",
    "Snapshot",
    "SnapshotTurn",
    "Spaces",
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
    return getattr(importlib.import_module(_LAZY[name]), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

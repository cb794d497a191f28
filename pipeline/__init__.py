"""mongomem: long-term memory for LLM agents.

The ``pipeline`` package holds what every part shares — settings, event
models, the error tree, adapters for MongoDB/Kafka/LLMs, the SDK and the CLI.
The stream stages live in the sibling package ``stages``.
"""

from pipeline.errors import (
    AuthError,
    BrokerError,
    ChangeFeedError,
    ConfigError,
    EmbeddingError,
    ExtractionError,
    InfraError,
    InputError,
    LLMOutputInvalid,
    LLMRateLimited,
    LLMUnavailable,
    MessageDecodeError,
    MongomemError,
    NotReady,
    RateLimitExceeded,
    ReconciliationError,
    ResumeTokenLost,
    ScopeError,
    StorageError,
    WriteConflict,
)
from pipeline.models import (
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
from pipeline.settings import Settings, load_settings

__version__ = "0.1.0"

__all__ = [
    "Action",
    "AuthError",
    "BrokerError",
    "ChangeFeedError",
    "ConfigError",
    "EmbeddingError",
    "Evidence",
    "ExtractionError",
    "InfraError",
    "InputError",
    "LLMOutputInvalid",
    "LLMRateLimited",
    "LLMUnavailable",
    "MemoryCandidate",
    "MemoryScope",
    "MemoryStatus",
    "MemoryType",
    "MemoryVersion",
    "MessageDecodeError",
    "MongomemError",
    "NotReady",
    "RateLimitExceeded",
    "ReconciliationError",
    "ResumeTokenLost",
    "Role",
    "ScopeError",
    "SessionKey",
    "Settings",
    "Snapshot",
    "SnapshotTurn",
    "StorageError",
    "Turn",
    "WriteConflict",
    "__version__",
    "load_settings",
]

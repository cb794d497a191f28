"""Token usage per snapshot and memory type: the extractor's view of :mod:`mongomem.usage`.

The accounting itself (the ``llm_usage`` collection, counting every call
before it is sent, Prometheus) lives in :mod:`mongomem.usage`; these are
the names the extraction stage uses.
"""

from __future__ import annotations

from mongomem.usage import (
    LLM_USAGE,
    MemoryUsageRecorder,
    MongoUsageRecorder,
    UsageKey,
    UsageMeter,
    UsageRecord,
    UsageRecorder,
)

__all__ = [
    "LLM_USAGE",
    "MemoryUsageRecorder",
    "MongoUsageRecorder",
    "UsageKey",
    "UsageMeter",
    "UsageRecord",
    "UsageRecorder",
]

"""The long-term memory SDK (SPEC E1–E2, F1–F3), sync and async.

::

    from mongomem.sdk import Memory, MemoryRequestContext

    memory = Memory(project_id="travel-agent")
    chat = memory.bind(MemoryRequestContext(user_id="user_1", session_id="thread_123"))
    chat.save_semantic(label="home-airport", text="The user's home airport is Boston.")
    chat.get_semantic("home-airport")
    chat.build_context("plan my next flight")

``AsyncMemory`` has the same calls as coroutines. Calls go through one
:class:`MemoryTransport`; :class:`DirectTransport` (the default) reaches
MongoDB directly, reconciling saves with the same core as the pipeline, and
:class:`HttpTransport` (``base_url=``) calls the memory service (SPEC G2)
with an API key, with the same results and errors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mongomem.lazy import lazy_exports

if TYPE_CHECKING:
    from mongomem.ltm.export import ExportResult, ImportResult
    from mongomem.operations.progress import ProcessingStatus, SnapshotProgress, TypeProgress
    from mongomem.sdk.client import DEFAULT_CONTEXT_TYPES, AsyncBoundMemory, AsyncMemory
    from mongomem.sdk.http import HttpTransport
    from mongomem.sdk.identity import SERVICE_ACCOUNT_PREFIX, Identity, resolve_identity
    from mongomem.sdk.models import (
        ContextItem,
        DeleteResult,
        Episode,
        MemoryContext,
        MemoryItem,
        MemoryPage,
        MemoryRecord,
        MemoryRequestContext,
        Procedure,
        SaveResult,
        SearchHit,
        SemanticMemory,
        TaxonomicTerm,
        VersionRecord,
    )
    from mongomem.sdk.render import render_context
    from mongomem.sdk.sync import BoundMemory, Memory
    from mongomem.sdk.transport import DirectTransport, MemoryTransport

#: Every name and the module it lives in: each loads on first use (PEP 562), so
#: ``from mongomem.sdk import AsyncMemory`` does not load the HTTP client (httpx)
#: and the HTTP transport does not load MongoDB's reconciliation core.
_LAZY = {
    "AsyncBoundMemory": "mongomem.sdk.client",
    "AsyncMemory": "mongomem.sdk.client",
    "BoundMemory": "mongomem.sdk.sync",
    "ContextItem": "mongomem.sdk.models",
    "DEFAULT_CONTEXT_TYPES": "mongomem.sdk.client",
    "DeleteResult": "mongomem.sdk.models",
    "DirectTransport": "mongomem.sdk.transport",
    "Episode": "mongomem.sdk.models",
    "ExportResult": "mongomem.ltm.export",
    "HttpTransport": "mongomem.sdk.http",
    "Identity": "mongomem.sdk.identity",
    "ImportResult": "mongomem.ltm.export",
    "Memory": "mongomem.sdk.sync",
    "MemoryContext": "mongomem.sdk.models",
    "MemoryItem": "mongomem.sdk.models",
    "MemoryPage": "mongomem.sdk.models",
    "MemoryRecord": "mongomem.sdk.models",
    "MemoryRequestContext": "mongomem.sdk.models",
    "MemoryTransport": "mongomem.sdk.transport",
    "Procedure": "mongomem.sdk.models",
    "ProcessingStatus": "mongomem.operations.progress",
    "SERVICE_ACCOUNT_PREFIX": "mongomem.sdk.identity",
    "SaveResult": "mongomem.sdk.models",
    "SearchHit": "mongomem.sdk.models",
    "SemanticMemory": "mongomem.sdk.models",
    "SnapshotProgress": "mongomem.operations.progress",
    "TaxonomicTerm": "mongomem.sdk.models",
    "TypeProgress": "mongomem.operations.progress",
    "VersionRecord": "mongomem.sdk.models",
    "render_context": "mongomem.sdk.render",
    "resolve_identity": "mongomem.sdk.identity",
}

__all__ = [
    "DEFAULT_CONTEXT_TYPES",
    "SERVICE_ACCOUNT_PREFIX",
    "AsyncBoundMemory",
    "AsyncMemory",
    "BoundMemory",
    "ContextItem",
    "DeleteResult",
    "DirectTransport",
    "Episode",
    "ExportResult",
    "HttpTransport",
    "Identity",
    "ImportResult",
    "Memory",
    "MemoryContext",
    "MemoryItem",
    "MemoryPage",
    "MemoryRecord",
    "MemoryRequestContext",
    "MemoryTransport",
    "Procedure",
    "ProcessingStatus",
    "SaveResult",
    "SearchHit",
    "SemanticMemory",
    "SnapshotProgress",
    "TaxonomicTerm",
    "TypeProgress",
    "VersionRecord",
    "render_context",
    "resolve_identity",
]


__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY, __all__)

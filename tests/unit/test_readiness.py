"""Readiness (SPEC C5): refusal names what is missing, whatever types are enabled."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from mongomem.adapters.readiness import check_ready, ensure_ready
from mongomem.errors import NotReady
from mongomem.settings import EmbeddingSettings, ExtractionSettings, LLMSettings, load_settings


def test_nothing_configured_names_both_dependencies() -> None:
    settings = load_settings(
        llm=LLMSettings(), embedding=EmbeddingSettings(), extraction=ExtractionSettings(enabled=())
    )
    with pytest.raises(NotReady) as caught:
        ensure_ready(settings)
    message = str(caught.value)
    assert "no embedding provider: set MONGOMEM_EMBEDDING_PROVIDER" in message
    assert "no LLM endpoint: set MONGOMEM_LLM_BASE_URL and MONGOMEM_LLM_API_KEY" in message


def test_endpoint_without_key_and_openai_embeddings_without_key() -> None:
    settings = load_settings(
        llm=LLMSettings(base_url="http://127.0.0.1:9/v1"),
        embedding=EmbeddingSettings(provider="openai"),
    )
    assert check_ready(settings) == [
        "embedding provider 'openai' has no key: set MONGOMEM_EMBEDDING_API_KEY",
        "no LLM provider key for http://127.0.0.1:9/v1: set MONGOMEM_LLM_API_KEY",
    ]


def test_local_model_with_wrong_dimensions() -> None:
    settings = load_settings(
        llm=LLMSettings(base_url="http://x/v1", api_key=SecretStr("k")),
        embedding=EmbeddingSettings(provider="local", dimensions=768),
    )
    (problem,) = check_ready(settings)
    assert "384-d" in problem


def test_stand_ins_count_only_when_enabled_explicitly() -> None:
    ready = load_settings(
        llm=LLMSettings(use_stand_in=True), embedding=EmbeddingSettings(provider="stand-in")
    )
    assert check_ready(ready) == []
    ensure_ready(ready)


def test_unknown_enabled_type_is_a_problem() -> None:
    settings = load_settings(
        llm=LLMSettings(use_stand_in=True),
        embedding=EmbeddingSettings(provider="local"),
        extraction=ExtractionSettings(enabled=("semantic", "nonsense")),
    )
    (problem,) = check_ready(settings)
    assert "nonsense" in problem

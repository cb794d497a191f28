"""An export names the configured embedder without making it (issue 25): no model loads,
no client starts, and the name is the one the embedder itself gives."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from mongomem.adapters.embeddings import (
    LocalE5Embedder,
    embedder_identity,
    local_model_installed,
    make_embedder,
)
from mongomem.settings import EmbeddingSettings


@pytest.mark.parametrize(
    "settings",
    [
        EmbeddingSettings(provider="stand-in", dimensions=64),
        EmbeddingSettings(provider="openai", api_key=SecretStr("k"), model="m", dimensions=256),
    ],
    ids=["stand-in", "openai"],
)
def test_the_identity_is_the_embedder_s_own(settings: EmbeddingSettings) -> None:
    embedder = make_embedder(settings)
    assert embedder_identity(settings) == (embedder.name, embedder.dimensions)


def test_settings_make_embedder_refuses_have_no_identity() -> None:
    assert embedder_identity(EmbeddingSettings()) is None  # no provider
    assert embedder_identity(EmbeddingSettings(provider="openai")) is None  # no key
    assert embedder_identity(EmbeddingSettings(provider="local", dimensions=64)) is None


def test_the_local_model_is_named_as_it_names_itself() -> None:
    named = embedder_identity(EmbeddingSettings(provider="local"))
    if local_model_installed():
        assert named == (LocalE5Embedder.NAME, LocalE5Embedder.DIMENSIONS)
    else:
        assert named is None

"""``mongomem run all`` as one process on the test servers, for the tests that need a pipeline."""

from __future__ import annotations

from pathlib import Path

from mongomem.local.supervisor import StageProcess
from mongomem.settings import EmbeddingSettings, Settings


def all_stages(
    subprocess_env: dict[str, str], tmp_path: Path, llm_url: str, **env: str
) -> StageProcess:
    """Every stage in one process (not started), the LLM at ``llm_url``, the hashing
    embedder (not a model), windows of two turns and a watermark every 0.5 s;
    ``env`` (``MONGOMEM_…`` names) changes any of it."""
    defaults = {
        "MONGOMEM_LLM_BASE_URL": llm_url,
        "MONGOMEM_LLM_API_KEY": "stand-in",
        "MONGOMEM_EMBEDDING_PROVIDER": "stand-in",
        "MONGOMEM_WINDOW_MAX_MESSAGES": "2",
        "MONGOMEM_STM_WATCHER_WATERMARK_INTERVAL_S": "0.5",
        "MONGOMEM_STM_WATCHER_WATERMARK_IDLE_INTERVAL_S": "0.5",
    }
    return StageProcess(
        name="all",
        stage="all",
        state_dir=tmp_path,
        cache_dir=tmp_path,
        env={**subprocess_env, **defaults, **env},
    )


def with_stand_in_embedder(settings: Settings) -> Settings:
    """The SDK's settings matching :func:`all_stages`' embedder."""
    return settings.model_copy(update={"embedding": EmbeddingSettings(provider="stand-in")})

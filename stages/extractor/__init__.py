"""Extraction fan-out (SPEC C1–C6): one LLM handler per memory type.

Each enabled memory type reads every snapshot in its own consumer group, asks
the LLM for its own kind of knowledge only (structured output, validated),
embeds each result and publishes :class:`~mongomem.models.MemoryCandidate`
events keyed by scope to the candidates topic. See :mod:`.worker` for the
delivery semantics, :mod:`.handler` for retries and dead letters,
:mod:`.types` for the types and their versioned prompts (``prompts/``).

Run: ``mongomem run extractor [--type semantic ...] [--group-suffix S]``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging

from mongomem.adapters.readiness import ensure_ready
from mongomem.errors import ConfigError
from mongomem.project_config import enabled_types, load_project_config
from mongomem.settings import Settings
from mongomem.stages.extractor.handler import HandledRecord, TypeHandler
from mongomem.stages.extractor.types import TypeSpec, spec_for
from mongomem.stages.extractor.worker import TypeConsumer, run_extractors
from mongomem.stages.runtime import run_stage

__all__ = [
    "ExtractorStage",
    "HandledRecord",
    "TypeConsumer",
    "TypeHandler",
    "TypeSpec",
    "main",
    "run_extractors",
    "specs",
]

log = logging.getLogger("mongomem.stages.extractor")


def specs(settings: Settings, types: list[str] | None = None) -> list[TypeSpec]:
    """The specs to run: ``types`` (each must be enabled), else every enabled type."""
    config = load_project_config(settings.project_config) if settings.project_config else None
    enabled = enabled_types(settings, config)
    wanted = list(dict.fromkeys(types)) if types else list(enabled)
    off = [t for t in wanted if t not in enabled]
    if off:
        raise ConfigError(
            f"memory types {off} are not enabled (enabled: {list(enabled)}); enable them in "
            "project-config.yaml memory.extraction.enabled or MONGOMEM_ENABLED_EXTRACTIONS"
        )
    return [spec_for(t, config) for t in wanted]


class ExtractorStage:
    """The extractor (one consumer group per memory type) as a runtime
    :class:`~mongomem.stages.runtime.ports.Stage`."""

    name = "extractor"

    def __init__(
        self,
        settings: Settings,
        chosen: list[TypeSpec],
        group_suffix: str = "",
        *,
        re_extract: bool = False,
    ) -> None:
        self.settings = settings
        self.chosen = chosen
        self.group_suffix = group_suffix
        self.re_extract = re_extract

    async def run(self, stop: asyncio.Event) -> None:
        if not self.chosen:
            await stop.wait()
            return
        await run_extractors(
            self.settings,
            self.chosen,
            stop,
            group_suffix=self.group_suffix,
            re_extract=self.re_extract,
        )


async def main(settings: Settings, args: argparse.Namespace) -> None:
    """Run the extractor until SIGTERM/SIGINT (then drain), restarting after outages."""
    chosen = specs(settings, getattr(args, "types", None))
    ensure_ready(settings)
    if not chosen:
        log.warning("no memory type is enabled: the extractor has nothing to do")
    suffix = getattr(args, "group_suffix", "") or ""
    re_extract = bool(getattr(args, "re_extract", False))
    await run_stage(ExtractorStage(settings, chosen, suffix, re_extract=re_extract), settings)
    log.info("extractor stopped")

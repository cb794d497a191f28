"""``project-config.yaml``: what a project turns on.

::

    project: travel-agent            # optional, for documentation
    memory:
      extraction:
        enabled: [semantic, episodic, procedural, taxonomic]
        custom:
          - name: preference
            scope: user                # user | project
            key: [topic]               # fields that form the natural key
            fields:
              topic: "what the preference is about"
              value: "the preference itself"
            instructions: "Extract stable preferences the user states."
      windowing:
        max_messages: 20
        idle_timeout_s: 300
        projects:                      # per-project overrides
          support-bot: {max_messages: 8}
      retention:                       # optional, per type: days without reinforcement
        episodic: {expire_after_days: 90}

``MONGOMEM_ENABLED_EXTRACTIONS`` wins over ``memory.extraction.enabled`` when
both are set (that is how the file reaches a deployed memory server).
Errors name the file and the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from mongomem.errors import ConfigError
from mongomem.models import BUILTIN_MEMORY_TYPES
from mongomem.settings import Settings

__all__ = [
    "CustomTypeConfig",
    "ExtractionConfig",
    "MemoryConfig",
    "ProjectConfig",
    "RetentionRule",
    "WindowOverride",
    "WindowingConfig",
    "enabled_types",
    "load_project_config",
]

_NAME = r"^[a-z][a-z0-9_-]{0,63}$"


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CustomTypeConfig(_Strict):
    """A project's own memory type (SPEC C6)."""

    name: str = Field(pattern=_NAME)
    scope: Literal["user", "project"] = "user"
    fields: dict[str, str] = Field(min_length=1)
    key: tuple[str, ...] = Field(min_length=1)
    instructions: str = Field(min_length=1, max_length=8000)

    @model_validator(mode="after")
    def _check(self) -> CustomTypeConfig:
        if self.name in BUILTIN_MEMORY_TYPES:
            raise ValueError(f"{self.name!r} is a built-in type; choose another name")
        for field in self.fields:
            if not field.isidentifier():
                raise ValueError(f"field name {field!r} must be an identifier")
        missing = [k for k in self.key if k not in self.fields]
        if missing:
            raise ValueError(f"key fields {missing} are not among the fields")
        return self


class ExtractionConfig(_Strict):
    enabled: tuple[str, ...] = BUILTIN_MEMORY_TYPES
    custom: tuple[CustomTypeConfig, ...] = ()

    @model_validator(mode="after")
    def _known(self) -> ExtractionConfig:
        known = set(BUILTIN_MEMORY_TYPES) | {c.name for c in self.custom}
        unknown = [name for name in self.enabled if name not in known]
        if unknown:
            raise ValueError(
                f"enabled names unknown memory types {unknown}; known: {sorted(known)}"
            )
        return self


class WindowOverride(_Strict):
    max_messages: int | None = Field(default=None, ge=1, le=10_000)
    idle_timeout_s: float | None = Field(default=None, gt=0)


class WindowingConfig(WindowOverride):
    projects: dict[str, WindowOverride] = Field(default_factory=dict)


class RetentionRule(_Strict):
    """A memory of the type expires once no evidence of its current version is newer than
    ``expire_after_days`` (SPEC J8; :mod:`mongomem.ltm.retention`)."""

    expire_after_days: float = Field(gt=0, le=36_500)


class MemoryConfig(_Strict):
    extraction: ExtractionConfig = Field(default_factory=ExtractionConfig)
    windowing: WindowingConfig = Field(default_factory=WindowingConfig)
    #: Memory type → its retention; a type not named here never expires.
    retention: dict[str, RetentionRule] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _retained_types_known(self) -> MemoryConfig:
        known = set(BUILTIN_MEMORY_TYPES) | {c.name for c in self.extraction.custom}
        unknown = sorted(t for t in self.retention if t not in known)
        if unknown:
            raise ValueError(
                f"retention names unknown memory types {unknown}; known: {sorted(known)}"
            )
        return self


class ProjectConfig(_Strict):
    project: str | None = None
    memory: MemoryConfig = Field(default_factory=MemoryConfig)

    def custom_type(self, name: str) -> CustomTypeConfig | None:
        return next((c for c in self.memory.extraction.custom if c.name == name), None)


def load_project_config(path: Path) -> ProjectConfig:
    """Read and validate ``project-config.yaml``; a :class:`ConfigError` names file and field."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read project config {path}: {exc.strerror}") from exc
    try:
        raw: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping")
    try:
        return ProjectConfig.model_validate(raw)
    except ValidationError as exc:
        lines = [f"{path}: invalid project config:"]
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"]) or "(root)"
            lines.append(f"  {where}: {err['msg']}")
        raise ConfigError("\n".join(lines)) from exc


def enabled_types(settings: Settings, config: ProjectConfig | None = None) -> tuple[str, ...]:
    """The memory types whose background extraction is on.

    ``MONGOMEM_ENABLED_EXTRACTIONS`` wins; then the project config; then all
    four built-ins. A name that is neither built in nor declared is an error.
    """
    if config is None and settings.project_config is not None:
        config = load_project_config(settings.project_config)
    if settings.extraction.enabled is not None:
        known = set(BUILTIN_MEMORY_TYPES)
        if config is not None:
            known |= {c.name for c in config.memory.extraction.custom}
        unknown = [t for t in settings.extraction.enabled if t not in known]
        if unknown:
            raise ConfigError(
                f"MONGOMEM_ENABLED_EXTRACTIONS names unknown memory types {unknown}; "
                f"known: {sorted(known)}"
            )
        return settings.extraction.enabled
    if config is not None:
        return config.memory.extraction.enabled
    return BUILTIN_MEMORY_TYPES

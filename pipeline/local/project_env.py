"""The project's saved extraction settings: what ``mongomem configure FILE`` writes to
``<state dir>/project.env`` and ``mongomem up`` passes to the stage processes (SPEC G4)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from mongomem.project_config import enabled_types, load_project_config
from mongomem.settings import ExtractionSettings, Settings

__all__ = ["configure", "read_project_env"]


def configure(settings: Settings, file: Path, say: Callable[[str], None] = print) -> Path:
    """Validate ``file`` and save the settings it implies; returns the saved env file."""
    config = load_project_config(file)
    types = enabled_types(settings.model_copy(update={"extraction": ExtractionSettings()}), config)
    lines = [
        f"MONGOMEM_PROJECT_CONFIG={file.resolve()}",
        f"MONGOMEM_ENABLED_EXTRACTIONS={','.join(types)}",
    ]
    target = settings.infra.state_dir.resolve() / "project.env"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(lines) + "\n")
    say(f"{file}: valid. Extractions: {', '.join(types)}")
    if config.memory.extraction.custom:
        say("custom types: " + ", ".join(c.name for c in config.memory.extraction.custom))
    say(f"saved to {target} (make run passes these to the stages):")
    for line in lines:
        say(f"  {line}")
    return target


def read_project_env(settings: Settings) -> dict[str, str]:
    """The settings saved by :func:`configure`, if any."""
    path = settings.infra.state_dir.resolve() / "project.env"
    if not path.exists():
        return {}
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {k.strip(): v.strip() for k, v in pairs}

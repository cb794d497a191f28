"""What every benchmark does with its report: keep it in ``bench/results/`` and show it."""

from __future__ import annotations

from pathlib import Path

__all__ = ["publish"]


def publish(text: str, path: Path | None) -> None:
    """Write ``text`` to ``path`` (its folder made if needed; ``None``: nowhere) and print it."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    print(text)

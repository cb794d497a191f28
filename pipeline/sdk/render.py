"""Rendering ``build_context`` results as text within a size budget (pure)."""

from __future__ import annotations

from collections.abc import Sequence

from mongomem.sdk.models import ContextItem, MemoryContext
from mongomem.stm.recall import RECALL_CLOSE, RECALL_OPEN, mark_recalled

__all__ = ["SECTION_TITLES", "TURN_SECTION", "render_context"]

#: The ``memory_type`` of a context item that is a raw turn (``build_context(include_turns=)``).
TURN_SECTION = "turn"

SECTION_TITLES = {
    "semantic": "Known facts",
    "episodic": "Past episodes",
    "procedural": "Procedures",
    "taxonomic": "Terms",
    TURN_SECTION: "From the conversation",
}


def render_context(
    query: str, items: Sequence[ContextItem], order: Sequence[str], max_chars: int
) -> MemoryContext:
    """Sections in ``order``; within a section best score first; stop at ``max_chars``.

    An item that does not fit is left out whole (never cut mid-line), and
    ``omitted`` counts those left out. The text never exceeds ``max_chars``,
    the recall markers of :mod:`mongomem.stm.recall` included: they wrap any text
    so that an agent that records it in a turn does not teach it back (K3).
    """
    lines: list[str] = []
    kept: list[ContextItem] = []
    size = len(RECALL_OPEN) + len(RECALL_CLOSE) + 2  # the markers and their newlines
    omitted = 0
    for memory_type in order:
        section = sorted(
            (i for i in items if i.memory_type == memory_type),
            key=lambda i: (-i.score, i.memory_id),
        )
        header_written = False
        for item in section:
            header = f"## {SECTION_TITLES.get(memory_type, memory_type)}\n"
            line = f"- {item.key}: {item.text}".replace("\n", " ") + "\n"
            cost = len(line) + (0 if header_written else len(header))
            if size + cost > max_chars:
                omitted += 1
                continue
            if not header_written:
                lines.append(header)
                header_written = True
            lines.append(line)
            kept.append(item)
            size += cost
    text = mark_recalled("".join(lines).rstrip("\n"))
    return MemoryContext(
        query=query, items=tuple(kept), text=text, truncated=omitted > 0, omitted=omitted
    )

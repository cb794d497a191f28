"""Marking what mongomem hands to an agent, so it never returns as evidence (SPEC K3).

``build_context`` (SDK, HTTP, MCP) wraps its text between :data:`RECALL_OPEN`
and :data:`RECALL_CLOSE`. When an agent records a turn that carries such a
block — recalled context pasted into a system prompt, echoed by the
assistant, or quoted back by the user — the extractor removes the block
(:func:`strip_recalled`) before the model sees the conversation, so a memory
is never confirmed by its own echo. An opening marker without its closing
one removes the rest of the turn.

**Where it stops.** Recalled text that an agent copies *without* the markers
(re-worded, or line by line) is not recognised here; the role rule
(``MONGOMEM_EXTRACTION_ROLES``: ``system`` and ``tool`` turns are not
extracted by default) covers the usual place agents paste context.
"""

from __future__ import annotations

import re

__all__ = ["RECALL_CLOSE", "RECALL_OPEN", "mark_recalled", "strip_recalled"]

RECALL_OPEN = "<<mongomem:recalled>>"
RECALL_CLOSE = "<</mongomem:recalled>>"

_BLOCK = re.compile(
    re.escape("<<mongomem:recalled") + r"[^>\n]*>>.*?(?:" + re.escape(RECALL_CLOSE) + r"|\Z)",
    re.DOTALL,
)


def mark_recalled(text: str) -> str:
    """``text`` between the markers (``""`` stays ``""``: nothing was recalled)."""
    if not text:
        return ""
    return f"{RECALL_OPEN}\n{text}\n{RECALL_CLOSE}"


def strip_recalled(text: str) -> str:
    """``text`` without any marked block, and without the blank lines left around them."""
    if "<<mongomem:recalled" not in text:
        return text
    return re.sub(r"\n{3,}", "\n\n", _BLOCK.sub("", text)).strip()

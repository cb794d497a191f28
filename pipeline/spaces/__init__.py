"""Memory spaces: case memory for agents (SPEC H).

A space is a project-wide container of past cases that several agents share.
:class:`AsyncSpaces` is the API; the scoring of a match is in
:mod:`mongomem.spaces.scoring`, the stored form in :mod:`mongomem.spaces.store`,
encryption at rest in :mod:`mongomem.spaces.crypto`. The clients are the SDK's
(:mod:`mongomem.sdk.spaces`: ``HttpSpaces`` makes the same calls through the
memory service, ``Spaces`` makes them blocking); this package imports no SDK,
service or MCP module.

Collections: ``spaces`` (one document per space) and ``space_items`` (one per item).
Names load on first use, so ``mongomem`` can add the ``spaces`` command cheaply.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mongomem.spaces.api import AsyncSpaces
    from mongomem.spaces.crypto import Keyring, PayloadCipher, SpacesSettings
    from mongomem.spaces.dedupe import AddAnyway, Merge, OnDuplicate, Replace
    from mongomem.spaces.editing import FEEDBACK_WINDOW, INPUTS_IMMUTABLE, UNSET
    from mongomem.spaces.keys import LLMSummariser, Summariser
    from mongomem.spaces.models import (
        AddResult,
        EscalationDecision,
        Feedback,
        FeedbackView,
        FileInput,
        PlaygroundResult,
        RecallHit,
        RecallSettings,
        RekeyResult,
        SearchKey,
        Space,
        SpaceItem,
        SpaceUpdate,
    )

__all__ = [
    "FEEDBACK_WINDOW",
    "INPUTS_IMMUTABLE",
    "UNSET",
    "AddAnyway",
    "AddResult",
    "AsyncSpaces",
    "EscalationDecision",
    "Feedback",
    "FeedbackView",
    "FileInput",
    "Keyring",
    "LLMSummariser",
    "Merge",
    "OnDuplicate",
    "PayloadCipher",
    "PlaygroundResult",
    "RecallHit",
    "RecallSettings",
    "RekeyResult",
    "Replace",
    "SearchKey",
    "Space",
    "SpaceItem",
    "SpaceUpdate",
    "SpacesSettings",
    "Summariser",
]

_HOME = {
    "AsyncSpaces": "api",
    **dict.fromkeys(["Keyring", "PayloadCipher", "SpacesSettings"], "crypto"),
    **dict.fromkeys(["AddAnyway", "Merge", "OnDuplicate", "Replace"], "dedupe"),
    **dict.fromkeys(["FEEDBACK_WINDOW", "INPUTS_IMMUTABLE", "UNSET"], "editing"),
    **dict.fromkeys(["LLMSummariser", "Summariser"], "keys"),
}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f"{__name__}.{_HOME.get(name, 'models')}")
    return getattr(module, name)

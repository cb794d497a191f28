"""Memory spaces: case memory for agents (SPEC H).

A space is a project-wide container of past cases that several agents share.
:class:`AsyncSpaces` is the API; the scoring of a match is in
:mod:`pipeline.spaces.scoring`, the stored form in :mod:`pipeline.spaces.store`,
encryption at rest in :mod:`pipeline.spaces.crypto`. :class:`HttpSpaces` makes the same
calls through the memory service (:mod:`pipeline.service.spaces_routes`), and
:class:`Spaces` makes them blocking, directly or over HTTP.

Collections: ``spaces`` (one document per space) and ``space_items`` (one per item).
"""

from pipeline.spaces.api import AsyncSpaces
from pipeline.spaces.crypto import PayloadCipher, SpacesSettings
from pipeline.spaces.dedupe import AddAnyway, Merge, OnDuplicate, Replace
from pipeline.spaces.editing import FEEDBACK_WINDOW, INPUTS_IMMUTABLE
from pipeline.spaces.http import HttpSpaces
from pipeline.spaces.keys import LLMSummariser, Summariser
from pipeline.spaces.models import (
    AddResult,
    EscalationDecision,
    Feedback,
    FeedbackView,
    FileInput,
    PlaygroundResult,
    RecallHit,
    RecallSettings,
    SearchKey,
    Space,
    SpaceItem,
    SpaceUpdate,
)
from pipeline.spaces.sync import Spaces

__all__ = [
    "FEEDBACK_WINDOW",
    "INPUTS_IMMUTABLE",
    "AddAnyway",
    "AddResult",
    "AsyncSpaces",
    "EscalationDecision",
    "Feedback",
    "FeedbackView",
    "FileInput",
    "HttpSpaces",
    "LLMSummariser",
    "Merge",
    "OnDuplicate",
    "PayloadCipher",
    "PlaygroundResult",
    "RecallHit",
    "RecallSettings",
    "Replace",
    "SearchKey",
    "Space",
    "SpaceItem",
    "SpaceUpdate",
    "Spaces",
    "SpacesSettings",
    "Summariser",
]

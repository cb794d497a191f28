"""The spaces API over HTTP, as one table: :data:`SPACE_OPERATIONS` (SPEC H over G2).

Every call of :class:`~mongomem.sdk.spaces.SpacesTransport` is one entry: its
request model (the call's arguments, by the same names), its method and path
under ``/v1/spaces``, the type of its result and what the route says of itself.
:class:`~mongomem.sdk.spaces.HttpSpaces` derives its requests from the table and
the memory service its routes and OpenAPI document
(:mod:`mongomem.service.spaces_routes`).

How an argument travels: the path's ``{placeholders}`` (percent-encoded); for a
``GET`` or ``DELETE`` the others are the query, for a ``POST`` or ``PATCH`` a
JSON object, except where an argument is the NDJSON body (``import_space``'s
``lines``; its other arguments are then the query). Only arguments the caller
gave are sent, so a call's own default applies to the others. Only two values
need a JSON form of their own:

* an **input value** is a string, or a file as ``{"name": ..., "text": ...}``
  (a :class:`~mongomem.spaces.FileInput`);
* a **duplicate choice** (``on_duplicate``) is ``{"choice": "add-anyway"}``,
  ``{"choice": "replace", "item_ids": [...]}`` or
  ``{"choice": "merge", "sentiment_wins": "existing" | "new" | null}``.

======================================================  ==================================
route                                                   call (result)
======================================================  ==================================
``GET    /v1/spaces?limit=&offset=``                    ``list_spaces`` ([Space], by id)
``POST   /v1/spaces``                                   ``create_space`` (Space, 201)
``POST   /v1/spaces/import?space_id=&encrypted=&reembed=``  ``import_space`` (Space, 201);
                                                        the body is the NDJSON export
``GET    /v1/spaces/{space}``                           ``get_space`` (Space)
``PATCH  /v1/spaces/{space}``                           ``update_space`` (SpaceUpdate)
``DELETE /v1/spaces/{space}``                           ``delete_space`` (items deleted)
``POST   /v1/spaces/{space}/agents``                    ``attach_agent`` (Space)
``DELETE /v1/spaces/{space}/agents/{agent}``            ``detach_agent`` (Space)
``GET    /v1/spaces/{space}/items``                     ``list_items`` ([SpaceItem])
``POST   /v1/spaces/{space}/items``                     ``add_item`` (AddResult)
``GET    /v1/spaces/{space}/items/{item}``              ``get_item`` (SpaceItem)
``PATCH  /v1/spaces/{space}/items/{item}``              ``update_item`` (SpaceItem)
``DELETE /v1/spaces/{space}/items/{item}``              ``delete_item`` (bool)
``POST   /v1/spaces/{space}/items/{item}/feedback``     ``add_feedback`` (SpaceItem)
``GET    /v1/spaces/{space}/feedback?item_id=``         ``feedback`` ([FeedbackView])
``POST   /v1/spaces/{space}/recall``                    ``recall`` ([RecallHit])
``POST   /v1/spaces/{space}/duplicates``                ``find_duplicates`` ([RecallHit])
``POST   /v1/spaces/{space}/playground``                ``playground`` (PlaygroundResult)
``POST   /v1/spaces/{space}/promote``                   ``promote_feedback`` (AddResult)
``POST   /v1/spaces/{space}/escalations``               ``resolve_escalation`` (SpaceItem)
``POST   /v1/spaces/{space}/escalations/check``         ``check_escalation``
                                                        (EscalationDecision)
``GET    /v1/spaces/{space}/export``                    ``export_space`` (NDJSON body)
``POST   /v1/spaces/{space}/rekey``                     ``rekey_space`` (RekeyResult)
======================================================  ==================================

A success answers ``{"result": ...}`` (201 for a new space), the JSON form of
what the call returns; ``export_space`` answers NDJSON lines. The request models
give each argument its JSON type (so the OpenAPI document types every body);
the checks of values beyond that (ids, the space's own keys) are left to
:class:`~mongomem.spaces.AsyncSpaces`, which names the field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool
from pydantic.json_schema import SkipJsonSchema

from mongomem.errors import InputError
from mongomem.models import NOT_BLANK
from mongomem.spaces.dedupe import AddAnyway, Merge, OnDuplicate, Replace
from mongomem.spaces.models import (
    MAX_ARGUMENTS,
    MAX_TEXT_CHARS,
    AddResult,
    EscalationDecision,
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
    validated,
)

__all__ = [
    "SPACES_PREFIX",
    "SPACE_OPERATIONS",
    "SpaceOperation",
    "SpacesRequest",
    "decode_argument",
    "decode_choice",
    "decode_inputs",
    "encode_argument",
    "encode_choice",
    "encode_inputs",
]


def encode_inputs(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Inputs as JSON: files become ``{"name", "text"}`` objects."""
    return {k: v.model_dump() if isinstance(v, FileInput) else v for k, v in inputs.items()}


def decode_inputs(value: Any, field: str = "inputs") -> Any:
    """Objects become :class:`FileInput`; anything else is left for the call to check."""
    if not isinstance(value, dict):
        return value
    return {
        k: validated(FileInput, v, prefix=f"{field}.{k}") if isinstance(v, dict) else v
        for k, v in value.items()
    }


def encode_choice(choice: OnDuplicate | None) -> dict[str, Any] | None:
    match choice:
        case None:
            return None
        case AddAnyway():
            return {"choice": "add-anyway"}
        case Replace():
            return {"choice": "replace", "item_ids": list(choice.item_ids)}
        case Merge():
            return {"choice": "merge", "sentiment_wins": choice.sentiment_wins}
    raise InputError(
        "on_duplicate must be AddAnyway(), Replace(item_ids=...) or Merge()", field="on_duplicate"
    )


def decode_choice(value: Any) -> OnDuplicate | None:
    """The choice a JSON object names, or an :class:`InputError` naming the field."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InputError("on_duplicate must be an object with a 'choice'", field="on_duplicate")
    rest = {k: v for k, v in value.items() if k != "choice"}
    match value.get("choice"):
        case "add-anyway":
            return validated(AddAnyway, rest, prefix="on_duplicate")
        case "replace":
            return validated(Replace, rest, prefix="on_duplicate")
        case "merge":
            return validated(Merge, rest, prefix="on_duplicate")
    raise InputError(
        "on_duplicate.choice must be 'add-anyway', 'replace' or 'merge'",
        field="on_duplicate.choice",
    )


def encode_argument(name: str, value: Any) -> Any:
    """An argument's JSON form (inputs, duplicate choices, keys and recall settings)."""
    match name:
        case "inputs":
            return encode_inputs(value) if isinstance(value, Mapping) else value
        case "on_duplicate":
            return encode_choice(value)
    return _plain(value)


def decode_argument(name: str, value: Any) -> Any:
    """What :class:`~mongomem.spaces.AsyncSpaces` takes for an argument's JSON form."""
    match name:
        case "inputs":
            return decode_inputs(value)
        case "on_duplicate":
            return decode_choice(value)
    return value


def _plain(value: Any) -> Any:
    """Models (keys, recall settings) as JSON values; anything else unchanged."""
    if isinstance(value, RecallSettings | SearchKey):
        return value.model_dump()
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


# -- the request models: the arguments of each call, shapes only ------------------


class SpacesRequest(BaseModel):
    """A call's arguments, by the names of its parameters."""

    model_config = ConfigDict(extra="forbid")


class NoArguments(SpacesRequest):
    pass


class ListSpacesRequest(SpacesRequest):
    """A page of the project's spaces, by id."""

    limit: int | None = Field(default=None, ge=1, le=1000, description="spaces in the page")
    offset: int = Field(default=0, ge=0, le=1_000_000, description="spaces skipped, by id")


class SpaceRequest(SpacesRequest):
    space_id: str


#: An id the call checks (:func:`~mongomem.models.check_identifier` names the field); its
#: OpenAPI ``format`` names that rule (:mod:`mongomem.service.contract`).
Id = Annotated[
    str, Field(min_length=1, max_length=128, json_schema_extra={"format": "mongomem-id"})
]
#: What the document says of inputs: 1 to MAX_ARGUMENTS arguments, each named like a
#: parameter, each text (not blank) or a file ``{"name", "text"}``
#: (:func:`mongomem.spaces.keys.check_inputs` is the rule; it names the field).
_INPUTS_SCHEMA: dict[str, Any] = {
    "propertyNames": {"pattern": r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$"},
    "additionalProperties": {
        "anyOf": [
            {"type": "string", "minLength": 1, "maxLength": MAX_TEXT_CHARS, "pattern": NOT_BLANK},
            {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "minLength": 1, "maxLength": 256},
                    "text": {"type": "string", "minLength": 1, "maxLength": MAX_TEXT_CHARS},
                },
                "required": ["name", "text"],
                "additionalProperties": False,
            },
        ]
    },
}
#: Text or a file per argument, at least one (the schema above).
Inputs = Annotated[
    dict[str, Any],
    Field(min_length=1, max_length=MAX_ARGUMENTS, json_schema_extra=_INPUTS_SCHEMA),
]
#: Free text that holds no control character (a name, who gave feedback).
Text = Annotated[str, Field(pattern=r"^[^\x00-\x1f\x7f]*$")]
Sentiment = Literal["positive", "negative", "neutral"]
#: A space's name: not blank, at most 200 characters (``check_text`` is the rule).
Name = Annotated[str, Field(min_length=1, max_length=200, pattern=NOT_BLANK)]


class AddAnywayChoice(BaseModel):
    """``on_duplicate``: store the new item even though near-duplicates exist."""

    model_config = ConfigDict(extra="forbid")
    choice: Literal["add-anyway"]


class ReplaceChoice(BaseModel):
    """``on_duplicate``: delete these items (of the same space) and store the new one."""

    model_config = ConfigDict(extra="forbid")
    choice: Literal["replace"]
    item_ids: list[Id] = Field(min_length=1, max_length=100)


class MergeChoice(BaseModel):
    """``on_duplicate``: merge the new feedback into the closest duplicate."""

    model_config = ConfigDict(extra="forbid")
    choice: Literal["merge"]
    sentiment_wins: Literal["existing", "new"] | None = None


DuplicateChoice = Annotated[
    AddAnywayChoice | ReplaceChoice | MergeChoice, Field(discriminator="choice")
]


class CreateSpaceRequest(SpaceRequest):
    space_id: Id
    keys: list[SearchKey] = Field(min_length=1)
    name: Name | None = None
    description: str = Field(default="", max_length=4000)
    kind: Literal["episodic", "escalation"] = "episodic"
    recall: RecallSettings | None = None
    encrypted: StrictBool = False


class UpdateSpaceRequest(SpaceRequest):
    name: Name | None = None
    description: str | None = Field(default=None, max_length=4000)
    recall: RecallSettings | None = None
    keys: list[SearchKey] | None = Field(default=None, min_length=1)
    #: Refused with the reason (encryption is chosen at creation): accepted by the model so
    #: the refusal can say so, but not in the document, since no value of it is valid.
    encrypted: SkipJsonSchema[StrictBool | None] = None
    confirm: StrictBool = False


class AttachAgentRequest(SpaceRequest):
    agent_id: Id
    keys: list[SearchKey] | None = Field(default=None, min_length=1)


class AgentRequest(SpaceRequest):
    agent_id: str


class LookupRequest(SpaceRequest):
    inputs: Inputs
    agent_id: Id | None = None


class AddItemRequest(SpaceRequest):
    inputs: Inputs
    outputs: dict[str, Any] | None = None
    outcome: str | None = None
    comment: str = ""
    sentiment: Sentiment = "neutral"
    agent_id: Id | None = None
    on_duplicate: DuplicateChoice | None = None


class PromoteRequest(SpaceRequest):
    trace_id: Id
    inputs: Inputs
    outputs: dict[str, Any]
    comment: str
    sentiment: Sentiment
    part: str | None = None
    outcome: str | None = None
    agent_id: Id | None = None
    on_duplicate: DuplicateChoice | None = None


class ResolveRequest(SpaceRequest):
    inputs: Inputs
    resolution: str
    outcome: str = Field(min_length=1, pattern=NOT_BLANK)
    agent_id: Id | None = None
    resolved_by: Id | None = None


class ItemRequest(SpaceRequest):
    item_id: str


class UpdateItemRequest(ItemRequest):
    """Only the fields sent change: ``outcome`` or ``inputs`` left out stay as they are."""

    outputs: dict[str, Any] | None = None
    outcome: str | None = None
    #: Refused with the reason (inputs cannot be edited), and so not in the document.
    inputs: SkipJsonSchema[dict[str, Any] | None] = None


class AddFeedbackRequest(ItemRequest):
    comment: str
    sentiment: Sentiment
    by: Id | None = None


class FeedbackRequest(SpaceRequest):
    item_id: str | None = None


class ImportRequest(SpacesRequest):
    lines: list[str]
    space_id: str | None = Field(
        default=None, description="the new space's id (default: the export's)"
    )
    encrypted: str | None = Field(default=None, description="true or false")
    reembed: str = Field(default="auto", description="auto or always")


@dataclass(frozen=True)
class SpaceOperation:
    """How one call travels (see the module docstring).

    ``lines_body``: the argument ``lines`` is the NDJSON body; ``lines_answer``:
    the result is NDJSON lines; ``missing_is_false``: the call answers ``False``
    where the service answers 404 for the path's last id; ``confirmable``: a 409
    carries a result, the change not applied until sent with ``confirm``.
    """

    method: Literal["GET", "POST", "PATCH", "DELETE"]
    path: str
    request: type[SpacesRequest]
    result: Any
    summary: str
    status: int = 200
    lines_body: bool = False
    lines_answer: bool = False
    missing_is_false: bool = False
    confirmable: bool = False

    @property
    def path_fields(self) -> tuple[str, ...]:
        """The names of the path's ``{placeholders}``, in order."""
        return tuple(re.findall(r"{(\w+)}", self.path))

    @property
    def arguments(self) -> tuple[str, ...]:
        """The arguments that travel outside the path."""
        return tuple(f for f in self.request.model_fields if f not in self.path_fields)

    @property
    def in_query(self) -> tuple[str, ...]:
        """The arguments that travel in the query."""
        if self.method in ("GET", "DELETE"):
            return self.arguments
        return tuple(a for a in self.arguments if self.lines_body and a != "lines")

    @property
    def in_body(self) -> tuple[str, ...]:
        """The arguments that travel as the JSON object of the body."""
        if self.method in ("GET", "DELETE") or self.lines_body:
            return ()
        return self.arguments


#: Where the space routes are.
SPACES_PREFIX = "/v1/spaces"
_SPACE = "/{space_id}"
_ITEM = "/{space_id}/items/{item_id}"

#: Call → how it travels. The service serves exactly these, in this order.
SPACE_OPERATIONS: dict[str, SpaceOperation] = {
    "list_spaces": SpaceOperation(
        "GET", "", ListSpacesRequest, list[Space], "The project's spaces by id, paged"
    ),
    "create_space": SpaceOperation(
        "POST", "", CreateSpaceRequest, Space, "Create a space", status=201
    ),
    "import_space": SpaceOperation(
        "POST",
        "/import",
        ImportRequest,
        Space,
        "Import a space from its JSON-lines export (the body)",
        status=201,
        lines_body=True,
    ),
    "get_space": SpaceOperation("GET", _SPACE, SpaceRequest, Space, "One space"),
    "update_space": SpaceOperation(
        "PATCH",
        _SPACE,
        UpdateSpaceRequest,
        SpaceUpdate,
        "Change a space (a key change needs confirm: true, else 409)",
        confirmable=True,
    ),
    "delete_space": SpaceOperation(
        "DELETE", _SPACE, SpaceRequest, int, "Delete a space (items deleted)"
    ),
    "attach_agent": SpaceOperation(
        "POST", f"{_SPACE}/agents", AttachAgentRequest, Space, "Attach an agent"
    ),
    "detach_agent": SpaceOperation(
        "DELETE", f"{_SPACE}/agents/{{agent_id}}", AgentRequest, Space, "Detach an agent"
    ),
    "list_items": SpaceOperation(
        "GET", f"{_SPACE}/items", SpaceRequest, list[SpaceItem], "The items"
    ),
    "add_item": SpaceOperation("POST", f"{_SPACE}/items", AddItemRequest, AddResult, "Add an item"),
    "get_item": SpaceOperation("GET", _ITEM, ItemRequest, SpaceItem, "One item"),
    "update_item": SpaceOperation("PATCH", _ITEM, UpdateItemRequest, SpaceItem, "Change an item"),
    "delete_item": SpaceOperation(
        "DELETE",
        _ITEM,
        ItemRequest,
        bool,
        "Delete an item (404 if none)",
        missing_is_false=True,
    ),
    "add_feedback": SpaceOperation(
        "POST", f"{_ITEM}/feedback", AddFeedbackRequest, SpaceItem, "Add feedback"
    ),
    "feedback": SpaceOperation(
        "GET",
        f"{_SPACE}/feedback",
        FeedbackRequest,
        list[FeedbackView],
        "The feedback of the last 30 days, newest first",
    ),
    "recall": SpaceOperation(
        "POST",
        f"{_SPACE}/recall",
        LookupRequest,
        list[RecallHit],
        "The most similar past cases, with scores",
    ),
    "find_duplicates": SpaceOperation(
        "POST",
        f"{_SPACE}/duplicates",
        LookupRequest,
        list[RecallHit],
        "Items that would be duplicates of these inputs",
    ),
    "playground": SpaceOperation(
        "POST",
        f"{_SPACE}/playground",
        LookupRequest,
        PlaygroundResult,
        "Recall with every score and threshold shown",
    ),
    "promote_feedback": SpaceOperation(
        "POST", f"{_SPACE}/promote", PromoteRequest, AddResult, "Promote feedback"
    ),
    "resolve_escalation": SpaceOperation(
        "POST", f"{_SPACE}/escalations", ResolveRequest, SpaceItem, "Resolve an escalation"
    ),
    "check_escalation": SpaceOperation(
        "POST",
        f"{_SPACE}/escalations/check",
        LookupRequest,
        EscalationDecision,
        "Whether a past resolution answers these inputs",
    ),
    "export_space": SpaceOperation(
        "GET",
        f"{_SPACE}/export",
        SpaceRequest,
        list[str],
        "The space and its items as JSON lines (header first)",
        lines_answer=True,
    ),
    "rekey_space": SpaceOperation(
        "POST", f"{_SPACE}/rekey", SpaceRequest, RekeyResult, "Re-seal a space"
    ),
}

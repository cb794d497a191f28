"""How space calls travel as JSON between :class:`~mongomem.spaces.http.HttpSpaces` and
the memory service's space routes (:mod:`mongomem.service.spaces_routes`).

Only two values need a JSON form of their own; everything else is the keyword
argument of :class:`~mongomem.spaces.AsyncSpaces` under the same name:

* an **input value** is a string, or a file as ``{"name": ..., "text": ...}``
  (a :class:`~mongomem.spaces.FileInput`);
* a **duplicate choice** (``on_duplicate``) is ``{"choice": "add-anyway"}``,
  ``{"choice": "replace", "item_ids": [...]}`` or
  ``{"choice": "merge", "sentiment_wins": "existing" | "new" | null}``.

A success answers ``{"result": ...}``, the JSON form of what the
:class:`~mongomem.spaces.AsyncSpaces` call returns. Decoding is strict about
shape and leaves the checks of values to :class:`~mongomem.spaces.AsyncSpaces`,
which names the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mongomem.errors import InputError
from mongomem.spaces.dedupe import AddAnyway, Merge, OnDuplicate, Replace
from mongomem.spaces.models import FileInput, validated

__all__ = ["decode_choice", "decode_inputs", "encode_choice", "encode_inputs"]


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

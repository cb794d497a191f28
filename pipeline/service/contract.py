"""What the OpenAPI document says of every route's parameters, applied in one place (G5).

FastAPI documents a path or query parameter as a bare ``string`` when the
endpoint takes a ``str`` that a model checks later. The server is stricter
than that, so a client (or a fuzzer) that trusts the document sends requests
the server refuses. :func:`exact_openapi` rewrites the document once, for
every route of the app (a route added later gets the same):

* an **id** parameter (``user_id``, ``session_id``, ``space_id``,
  ``agent_id``, ``item_id``, ``project_id``; in a space's body, the ``Id``
  fields of :mod:`mongomem.sdk.spaces.wire` say the same) is ``minLength`` 1, ``maxLength`` 128 and
  ``format: mongomem-id`` — the rule of :mod:`mongomem.identifiers` (NFC, no
  control or invisible character, one script, no ``$`` first, no ``..``, no
  ``.`` or whitespace at either end), which no JSON Schema pattern can state
  (scripts); the format names it;
* ``memory_type`` is an ``enum`` of the built-in memory types; ``memory_id`` is
  1–128 characters, not all whitespace;
* an erasure's ``confirm`` is required and ``true`` (erasing is irreversible).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mongomem.models import BUILTIN_MEMORY_TYPES

__all__ = ["ID_FORMAT", "ID_PARAMETERS", "exact_openapi"]

#: The OpenAPI ``format`` of an id (see the module docstring).
ID_FORMAT = "mongomem-id"
#: The parameters that are ids wherever they appear.
ID_PARAMETERS = frozenset(
    {"user_id", "session_id", "space_id", "agent_id", "item_id", "project_id"}
)

_ID_SCHEMA = {
    "type": "string",
    "minLength": 1,
    "maxLength": 128,
    "format": ID_FORMAT,
    "description": "an id: NFC; no control, invisible or bidi character; one script; "
    "not starting with '$'; no '..', no '.' or whitespace at either end",
}


def _exact(schema: dict[str, Any], parameter: dict[str, Any], method: str) -> dict[str, Any]:
    name = parameter.get("name")
    nullable = "anyOf" in schema  # an optional query parameter: the value, or nothing

    def maybe(exact: dict[str, Any]) -> dict[str, Any]:
        return {"anyOf": [exact, {"type": "null"}]} if nullable else exact

    if name in ID_PARAMETERS:
        return maybe(dict(_ID_SCHEMA))
    if name == "memory_type":
        return maybe({"type": "string", "enum": sorted(BUILTIN_MEMORY_TYPES)})
    if name == "memory_id":
        return {"type": "string", "minLength": 1, "maxLength": 128, "pattern": r"\S"}
    if name == "confirm" and method == "delete":  # an erasure: irreversible, so explicit
        parameter["required"] = True
        return {
            "type": "boolean",
            "enum": [True],
            "description": "must be true: erasing is irreversible",
        }
    return schema


def exact_openapi(build: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
    """``build`` (an app's ``openapi``) with every parameter made exact (module doc)."""
    done: dict[str, Any] = {}

    def openapi() -> dict[str, Any]:
        if not done:
            document = build()
            for item in document.get("paths", {}).values():
                for method, operation in item.items():
                    for parameter in operation.get("parameters", ()):
                        schema = parameter.get("schema", {})
                        parameter["schema"] = _exact(schema, parameter, method)
            done.update(document)
        return done

    return openapi

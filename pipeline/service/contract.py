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
* ``memory_type`` is an ``enum`` of the built-in memory types and the custom ones
  ``project-config.yaml`` declares (``MONGOMEM_PROJECT_CONFIG``); ``memory_id`` is
  1–128 characters, not all whitespace;
* a space import's ``encrypted`` is a flag (true/yes/1, false/no/0, any case) and its
  ``reembed`` ``auto`` or ``always``;
* a browse's ``status`` is an ``enum`` of the statuses a version can have;
* ``domain`` says it is for taxonomic memories only (the path's ``memory_type``
  decides, which no schema can tie to a parameter);
* an erasure's ``confirm`` is required and ``true`` (erasing is irreversible);
* an ``idempotency_key`` is 1–255 of the characters
  :func:`~mongomem.sdk.idempotency.check_idempotency_key` allows.

A route whose path has ``{memory_type}`` (save, list, search, get, delete by
key) is documented once per built-in type, at its concrete path
(``/v1/users/{user_id}/memories/semantic``, operation ``save_semantic``): what the
route takes depends on the type, which no schema can tie to a path parameter.
Each says the type's own ``fields`` (required, not blank, no control
character, at most :data:`~mongomem.ltm.kinds.MAX_FIELD_CHARS`; a label — the
natural key — at most 255 characters and of the ``mongomem-label`` format, the
rule of :func:`~mongomem.identifiers.clean_label`; see
:data:`~mongomem.ltm.kinds.MAX_LABEL_CHARS`), and only taxonomic
memories take a ``domain``. The server routes them as before (one route).
A declared custom type gets the same concrete paths, its save's ``fields`` its
declared ones (the key fields required, the others optional).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any, get_args

from mongomem.ltm.browse import StatusFilter
from mongomem.ltm.kinds import KINDS, MAX_FIELD_CHARS, MAX_LABEL_CHARS, Kind, custom_kind
from mongomem.models import BUILTIN_MEMORY_TYPES, NOT_BLANK, MemoryType
from mongomem.project_config import CustomTypeConfig
from mongomem.sdk.idempotency import IDEMPOTENCY_KEY_MAX_LENGTH

__all__ = ["ID_FORMAT", "ID_PARAMETERS", "LABEL_FORMAT", "exact_openapi"]

#: The OpenAPI ``format`` of an id (see the module docstring).
ID_FORMAT = "mongomem-id"
#: The OpenAPI ``format`` of a memory's label (its natural key's fields).
LABEL_FORMAT = "mongomem-label"

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


def _exact(
    schema: dict[str, Any], parameter: dict[str, Any], method: str, types: list[str]
) -> dict[str, Any]:
    name = parameter.get("name")
    nullable = "anyOf" in schema  # an optional query parameter: the value, or nothing

    def maybe(exact: dict[str, Any]) -> dict[str, Any]:
        return {"anyOf": [exact, {"type": "null"}]} if nullable else exact

    if name in ID_PARAMETERS:
        return maybe(dict(_ID_SCHEMA))
    if name == "memory_type":
        return maybe({"type": "string", "enum": types})
    if name == "status":
        return maybe({"type": "string", "enum": list(get_args(StatusFilter))})
    if name == "domain":
        return {**schema, "description": "taxonomic memories only: a domain of their terms"}
    if name == "encrypted":  # a flag in a query (a space's import)
        flag = "^([Tt][Rr][Uu][Ee]|[Yy][Ee][Ss]|1|[Ff][Aa][Ll][Ss][Ee]|[Nn][Oo]|0)$"
        return maybe({"type": "string", "pattern": flag, "description": "true or false"})
    if name == "reembed":
        return {"type": "string", "enum": ["auto", "always"], "default": "auto"}
    if name == "idempotency_key":
        return maybe(dict(_IDEMPOTENCY_KEY))
    if name == "memory_id":
        return {"type": "string", "minLength": 1, "maxLength": 128, "pattern": NOT_BLANK}
    if name == "confirm" and method == "delete":  # an erasure: irreversible, so explicit
        parameter["required"] = True
        return {
            "type": "boolean",
            "enum": [True],
            "description": "must be true: erasing is irreversible",
        }
    return schema


_IDEMPOTENCY_KEY = {
    "type": "string",
    "minLength": 1,
    "maxLength": IDEMPOTENCY_KEY_MAX_LENGTH,
    "pattern": "^[A-Za-z0-9_.:~+/=-]+$",
}


def _visible(never: str) -> str:
    """A pattern: none of ``never`` (a character class body), and one non-space character."""
    return f"^[^{never}]*[^\\s{never}][^{never}]*$"


#: A text field: no control character but tab and newlines, something visible.
_TEXT_PATTERN = _visible("\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f\\x7f-\\x9f")
#: A label: no control character at all, something visible; a domain has no '/'.
_LABEL_PATTERN = _visible("\\x00-\\x1f\\x7f-\\x9f")
_DOMAIN_PATTERN = _visible("/\\x00-\\x1f\\x7f-\\x9f")


def _fields_schema(kind: Kind) -> dict[str, Any]:
    """The ``fields`` of a save of ``kind``'s memories (see the module docstring)."""
    memory_type = kind.memory_type
    properties: dict[str, Any] = {}
    for name in kind.fields:
        if name in kind.key_fields:
            pattern = _DOMAIN_PATTERN if name == "domain" else _LABEL_PATTERN
            properties[name] = {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_LABEL_CHARS,
                "pattern": pattern,
                "format": LABEL_FORMAT,
            }
        else:
            properties[name] = {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_FIELD_CHARS,
                "pattern": _TEXT_PATTERN,
            }
    return {
        "type": "object",
        "properties": properties,
        "required": [name for name in kind.fields if name not in kind.optional],
        "additionalProperties": False,
        "description": f"the fields of a {memory_type} memory",
    }


def _per_type(document: dict[str, Any], kinds: list[Kind]) -> None:
    """Each ``{memory_type}`` path once per kind: the built-in types, then the declared
    custom ones (see the module docstring)."""
    paths: dict[str, Any] = document.get("paths", {})
    schemas: dict[str, Any] = document.setdefault("components", {}).setdefault("schemas", {})
    for path in [p for p in paths if "{memory_type}" in p]:
        item = paths.pop(path)
        for kind in kinds:
            memory_type = kind.memory_type
            concrete = copy.deepcopy(item)
            for operation in concrete.values():
                operation["operationId"] = f"{operation['operationId']}_{memory_type}"
                operation["parameters"] = [
                    p
                    for p in operation.get("parameters", ())
                    if p.get("name") != "memory_type"
                    and (p.get("name") != "domain" or memory_type == MemoryType.TAXONOMIC)
                ]
                content = operation.get("requestBody", {}).get("content", {})
                for media in content.values():
                    ref = media.get("schema", {}).get("$ref", "")
                    if not ref.startswith("#/components/schemas/"):
                        continue
                    body = copy.deepcopy(schemas[ref.rsplit("/", 1)[1]])
                    properties = body.get("properties", {})
                    if "fields" in properties:
                        properties["fields"] = _fields_schema(kind)
                    if "idempotency_key" in properties:
                        properties["idempotency_key"] = {
                            "anyOf": [_IDEMPOTENCY_KEY, {"type": "null"}]
                        }
                    if memory_type != MemoryType.TAXONOMIC:
                        properties.pop("domain", None)
                    name = f"{ref.rsplit('/', 1)[1]}_{memory_type}"
                    body["title"] = name
                    schemas[name] = body
                    media["schema"] = {"$ref": f"#/components/schemas/{name}"}
            paths[path.replace("{memory_type}", memory_type)] = concrete


def exact_openapi(
    build: Callable[[], dict[str, Any]],
    custom_types: Callable[[], Iterable[CustomTypeConfig]] = tuple,
) -> Callable[[], dict[str, Any]]:
    """``build`` (an app's ``openapi``) with every parameter made exact (module doc).

    ``custom_types`` gives the declared custom memory types; it is asked once, when
    the document is first built (as the server reads the project config on first use).
    """
    done: dict[str, Any] = {}

    def openapi() -> dict[str, Any]:
        if not done:
            document = build()
            custom = sorted(custom_types(), key=lambda config: config.name)
            kinds = [KINDS[name] for name in sorted(BUILTIN_MEMORY_TYPES)]
            kinds += [custom_kind(config) for config in custom]
            types = [kind.memory_type for kind in kinds]
            for item in document.get("paths", {}).values():
                for method, operation in item.items():
                    for parameter in operation.get("parameters", ()):
                        schema = parameter.get("schema", {})
                        parameter["schema"] = _exact(schema, parameter, method, types)
            _per_type(document, kinds)
            done.update(document)
        return done

    return openapi

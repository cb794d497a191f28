"""Schemathesis hooks of the service's fuzz test (``SCHEMATHESIS_HOOKS``): import's NDJSON,
the ids of ``format: mongomem-id``, the labels of ``format: mongomem-label``, the
speakers of ``format: mongomem-speaker``, and the
rules of the service that no JSON Schema can state, each decided by the service's own code.

The import routes take ``application/x-ndjson``, which Schemathesis cannot write
by itself. Their documented body is an array of JSON objects, one a line; this
serializer writes such an array as NDJSON (one compact object a line), and any
other generated value as its JSON text, so every generated case is sent.

What a schema cannot say, and how the fuzzer is told:

* an export's lines agree with each other (header first, the end line counts
  what came before): a *valid* import case is sent as a real export, made by
  the product's own line encoders (an empty one: header and end); invalid ones
  are sent as generated;
* a space's search keys name each argument once (``check_keys``): a valid case
  keeps the first key of each argument;
* a promoted run's ``part`` is one of its ``outputs``: a valid case that names
  another sends none;
* a turn search's ``since`` is not after its ``until``: a valid case sends them in order;
* a historical turn's ``at`` is not in the future (``record_turn``): a valid case that
  names a later time sends none (the turn is recorded now);
* a turn's nested metadata keys follow the top level's rule, and the whole stays
  within the size limit (``validate_metadata``): a valid case that breaks them is dropped.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import schemathesis
from hypothesis import strategies as st

from mongomem.errors import InputError
from mongomem.identifiers import clean_label
from mongomem.ltm.export_format import end_line, header_line
from mongomem.models import check_identifier, check_speaker
from mongomem.service.contract import ID_FORMAT, LABEL_FORMAT
from mongomem.stm.turns import validate_metadata

#: The project the fuzz test's key opens (test_openapi.py).
PROJECT = "travel"
USER_IMPORT = "/v1/users/{user_id}/import"
SPACE_IMPORT = "/v1/spaces/import"


@schemathesis.serializer("application/x-ndjson")
def ndjson(ctx: Any, value: Any) -> bytes:
    if isinstance(value, list):
        text = "".join(json.dumps(item, separators=(",", ":")) + "\n" for item in value)
    elif isinstance(value, str):
        text = value
    else:
        text = json.dumps(value)
    return text.encode("utf-8")  # sent as the body, as application/x-ndjson


def _valid_id(value: str) -> bool:
    try:
        return check_identifier(value) == value
    except ValueError:
        return False


#: The ids the document's ``format: mongomem-id`` stands for: the service's own rule
#: (mongomem.identifiers) decides, over a mix of plain and Unicode text.
schemathesis.openapi.format(
    ID_FORMAT,
    st.one_of(
        st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_:@-]{0,40}", fullmatch=True),
        st.text(min_size=1, max_size=128),
    ).filter(_valid_id),
)


def _valid_label(value: str) -> bool:
    label, why = clean_label(value)
    return why is None and bool(label.strip())


#: A memory's label: the rule of mongomem.identifiers.clean_label (the pattern says the rest).
schemathesis.openapi.format(
    LABEL_FORMAT,
    st.one_of(
        st.from_regex(r"[A-Za-z0-9][A-Za-z0-9 _-]{0,40}", fullmatch=True),
        st.text(min_size=1, max_size=255),
    ).filter(_valid_label),
)


def _valid_speaker(value: str) -> bool:
    try:
        return check_speaker(value) == value
    except ValueError:
        return False


#: A turn's speaker: the rule of mongomem.models.check_speaker (the pattern says the rest).
schemathesis.openapi.format(
    "mongomem-speaker",
    st.one_of(
        st.from_regex(r"[A-Za-z0-9][A-Za-z0-9 ._-]{0,40}", fullmatch=True),
        st.text(min_size=1, max_size=128),
    ).filter(_valid_speaker),
)


def _export(user_id: str) -> list[dict[str, Any]]:
    """An empty export of ``user_id`` in the key's project: its header and its end."""
    at = datetime.now(UTC)
    lines = [header_line(PROJECT, user_id, None, at, "fuzz"), end_line(0, 0)]
    return [json.loads(line) for line in lines]


def _space_export(query: dict[str, Any] | None) -> list[dict[str, Any]]:
    """A space export of no item (the id from the query, else a fresh one)."""
    space_id = (query or {}).get("space_id") or "fuzz-import"
    head: dict[str, Any] = {
        "space_id": space_id,
        "name": "fuzz",
        "description": "",
        "kind": "episodic",
        "encrypted": False,
        "keys": [{"argument": "question", "weight": 1.0}],
        "recall": {},
        "agents": [],
        "embedder": "stand-in",
        "dimensions": 64,
    }
    return [{"format": "mongomem.space", "version": 1, "items": 0, "space": head}]


def _positive(case: Any) -> bool:
    return case.meta is not None and case.meta.generation.mode.is_positive


def _in_order(body: dict[str, Any]) -> None:
    since, until = body.get("since"), body.get("until")
    if isinstance(since, str) and isinstance(until, str):
        try:
            if datetime.fromisoformat(since) > datetime.fromisoformat(until):
                body["since"], body["until"] = until, since
        except (TypeError, ValueError):  # the server says which is not a time
            return


def _not_ahead(body: dict[str, Any]) -> None:
    at = body.get("at")
    if isinstance(at, str):
        try:
            ahead = datetime.fromisoformat(at) > datetime.now(UTC)
        except (TypeError, ValueError):  # the server says it is not a time
            return
        if ahead:
            del body["at"]


@schemathesis.hook
def map_case(ctx: Any, case: Any) -> Any:
    """A valid case obeys the rules of the module docstring that a schema cannot state."""
    if not _positive(case):
        return case
    path = case.operation.path
    if path == USER_IMPORT:
        case.body = _export(case.path_parameters["user_id"])
    elif path == SPACE_IMPORT:
        case.body = _space_export(case.query)
    body = case.body
    if isinstance(body, dict):
        if isinstance(body.get("keys"), list):
            seen: set[Any] = set()
            kept = []
            for key in body["keys"]:
                name = key.get("argument") if isinstance(key, dict) else None
                if name not in seen:
                    seen.add(name)
                    kept.append(key)
            body["keys"] = kept
        outputs = body.get("outputs")
        part = body.get("part")
        if part is not None and isinstance(outputs, dict) and part not in outputs:
            body["part"] = None
        _in_order(body)
        _not_ahead(body)
    return case


@schemathesis.hook
def filter_case(ctx: Any, case: Any) -> bool:
    """Drop a valid case whose turn metadata the service's own rule refuses."""
    body = case.body
    if not _positive(case) or not isinstance(body, dict) or "metadata" not in body:
        return True
    try:
        validate_metadata(body["metadata"], 64 * 1024)
    except InputError:
        return False
    return True

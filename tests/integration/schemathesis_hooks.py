"""Schemathesis hooks of the service's fuzz test (``SCHEMATHESIS_HOOKS``): import's NDJSON,
and the ids of ``format: mongomem-id``.

The import routes take ``application/x-ndjson``, which Schemathesis cannot write
by itself. Their documented body is an array of JSON objects, one a line; this
serializer writes such an array as NDJSON (one compact object a line), and any
other generated value as its JSON text, so every generated case is sent.
"""

from __future__ import annotations

import json
from typing import Any

import schemathesis
from hypothesis import strategies as st

from mongomem.models import check_identifier
from mongomem.service.contract import ID_FORMAT


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

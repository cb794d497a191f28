"""A refusal that depends on stored state is a StateConflict: 409 over HTTP, and the same
class back in the client (issue 25: the fuzzer's "valid request rejected" were 422s).

It stays an InputError (nothing stored, not retriable), so code that catches InputError
still catches it.
"""

from __future__ import annotations

import pytest

from mongomem.errors import InputError, StateConflict
from mongomem.ltm.browse import MemoryFilter, decode_cursor
from mongomem.sdk.errormap import error_body, error_from, status_for


def test_a_state_conflict_is_409_and_comes_back_as_itself() -> None:
    refused = StateConflict("space 'refunds' already exists in this project", field="space_id")
    assert isinstance(refused, InputError)
    assert not refused.retriable
    assert status_for(refused) == 409
    body = error_body(refused, redact=True)
    assert body.message == str(refused)  # below 500: the caller sees why
    back = error_from(409, {"error": body.model_dump()})
    assert type(back) is StateConflict
    assert back.field == "space_id"
    # a 409 of a proxy (no body of ours) is one too
    assert type(error_from(409, {"nope": 1})) is StateConflict
    assert status_for(InputError("bad", field="x")) == 422


def test_a_cursor_no_listing_returned_is_a_state_conflict() -> None:
    with pytest.raises(StateConflict) as refused:
        decode_cursor(MemoryFilter(), "bm90LWEtY3Vyc29y")
    assert refused.value.field == "cursor"

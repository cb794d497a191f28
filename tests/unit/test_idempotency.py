"""Idempotency keys without servers: valid keys, the derived candidate id, the HTTP retries."""

from __future__ import annotations

import json

import httpx
import pytest

from mongomem.errors import InputError, NotReady, StorageError
from mongomem.ltm.writes import pending_entry
from mongomem.models import Action, utcnow
from mongomem.sdk import AsyncMemory, HttpTransport, Identity, MemoryRequestContext
from mongomem.sdk.errormap import error_body
from mongomem.sdk.idempotency import (
    IDEMPOTENCY_KEY_MAX_LENGTH,
    check_idempotency_key,
    keyed_candidate_id,
    request_fingerprint,
)

ALICE = Identity(project_id="travel", user_id="alice", session_id="s1")


@pytest.mark.parametrize(
    "key",
    [
        "a",
        "0b2f6c1e-8d4a-4d7e-9a55-3f1c2b7e9d10",
        "01HZX3J8Q5",
        "import:2024-06-01:42",
        "YWJj+/==",
        "a_b.c~d",
        "k" * IDEMPOTENCY_KEY_MAX_LENGTH,
    ],
)
def test_valid_keys(key: str) -> None:
    assert check_idempotency_key(key) == key


@pytest.mark.parametrize(
    "key",
    [
        "",
        "k" * (IDEMPOTENCY_KEY_MAX_LENGTH + 1),
        " lead",
        "trail ",
        "two words",
        "tab\there",
        "nl\n",
        "nul\x00",
        "naïve",
        "emoji-🙂",
        "semi;colon",
        'quote"',
        "$where",
        42,
        None,
        b"k",
    ],
)
def test_invalid_keys_name_the_field(key: object) -> None:
    with pytest.raises(InputError) as err:
        check_idempotency_key(key)
    assert err.value.field == "idempotency_key"


def test_the_candidate_id_is_derived_from_project_user_type_and_key() -> None:
    cid = keyed_candidate_id(ALICE, "semantic", "k")
    assert cid.startswith("cand_")
    assert cid == keyed_candidate_id(ALICE, "semantic", "k")
    # the session does not matter: a retry from another session is the same request
    assert cid == keyed_candidate_id(ALICE.model_copy(update={"session_id": "s2"}), "semantic", "k")
    others = {
        keyed_candidate_id(ALICE, "semantic", "k2"),
        keyed_candidate_id(ALICE, "episodic", "k"),
        keyed_candidate_id(ALICE.model_copy(update={"user_id": "bob"}), "semantic", "k"),
        keyed_candidate_id(ALICE.model_copy(update={"project_id": "other"}), "semantic", "k"),
        # the NUL join keeps parts apart: ("alice", "semantic") is not ("alic", "esemantic")
        keyed_candidate_id(ALICE.model_copy(update={"user_id": "alic"}), "esemantic", "k"),
    }
    assert cid not in others
    assert len(others) == 5


def test_the_fingerprint_is_the_type_and_fields_in_any_order() -> None:
    fp = request_fingerprint("semantic", {"label": "a", "text": "b"})
    assert fp == request_fingerprint("semantic", {"text": "b", "label": "a"})
    assert fp != request_fingerprint("semantic", {"label": "a", "text": "c"})
    assert fp != request_fingerprint("episodic", {"label": "a", "text": "b"})


def test_the_ledger_keeps_a_fingerprint_only_when_given() -> None:
    now = utcnow()
    assert set(pending_entry("c", now)) == {"_id", "state", "at"}
    assert pending_entry("c", now, "req_1")["fingerprint"] == "req_1"


RESULT = {"action": "ADD", "memory_id": "m", "version": 1, "version_id": "v", "reason": "new"}


def flaky(
    failures: list[httpx.Response | Exception],
) -> tuple[HttpTransport, list[dict[str, object]]]:
    """A transport whose service fails as listed, then answers ``RESULT``."""
    sent: list[dict[str, object]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        if failures:
            failure = failures.pop(0)
            if isinstance(failure, Exception):
                raise failure
            return failure
        return httpx.Response(200, json={"result": RESULT})

    client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    return HttpTransport(
        "http://m.test", api_key="k" * 20, client=client, retry_backoff_s=0.001
    ), sent


def unavailable(exc: StorageError | NotReady) -> httpx.Response:
    return httpx.Response(503, json={"error": error_body(exc).model_dump()})


async def test_a_keyed_save_is_retried_on_503_and_lost_connections_with_the_same_key() -> None:
    down: list[httpx.Response | Exception] = [
        unavailable(StorageError("MongoDB is away")),
        httpx.ConnectError("refused"),
    ]
    t, sent = flaky(down)
    saved = await t.save(ALICE, "semantic", {"label": "a", "text": "b"}, idempotency_key="k-1")
    assert saved.action is Action.ADD
    assert len(sent) == 3
    assert all(body == sent[0] for body in sent)
    assert sent[0]["idempotency_key"] == "k-1"


async def test_retries_are_bounded_and_only_for_retriable_failures_of_keyed_saves() -> None:
    t, sent = flaky([httpx.ReadTimeout("slow")] * 3)
    with pytest.raises(StorageError, match="timed out"):
        await t.save(ALICE, "semantic", {"label": "a", "text": "b"}, idempotency_key="k")
    assert len(sent) == 3  # one try and two retries
    t, sent = flaky([unavailable(StorageError("away"))])
    with pytest.raises(StorageError):  # without a key: the caller's to retry
        await t.save(ALICE, "semantic", {"label": "a", "text": "b"})
    assert len(sent) == 1
    assert "idempotency_key" not in sent[0]  # and the body is as before keys existed
    t, sent = flaky([unavailable(NotReady("no embedder"))])
    with pytest.raises(NotReady):  # 503, but not retriable
        await t.save(ALICE, "semantic", {"label": "a", "text": "b"}, idempotency_key="k")
    assert len(sent) == 1
    conflict = InputError("already used for a different request", field="idempotency_key")
    t, sent = flaky([httpx.Response(422, json={"error": error_body(conflict).model_dump()})])
    with pytest.raises(InputError) as err:
        await t.save(ALICE, "semantic", {"label": "a", "text": "b"}, idempotency_key="k")
    assert (err.value.field, len(sent)) == ("idempotency_key", 1)


async def test_a_bad_key_is_refused_before_anything_is_sent() -> None:
    t, sent = flaky([])
    memory = AsyncMemory(project_id="travel", transport=t)
    chat = memory.bind(MemoryRequestContext(user_id="alice"))
    for bad in ("", "no spaces please", "x" * 300):
        with pytest.raises(InputError) as err:
            await chat.save_episode("Trip", "Lisbon.", idempotency_key=bad)
        assert err.value.field == "idempotency_key"
    assert sent == []
    await memory.close()

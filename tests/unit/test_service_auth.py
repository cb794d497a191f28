"""The memory service's keys, identities and error mapping, without servers (SPEC G2, F1–F3)."""

from __future__ import annotations

import hashlib
import json

import httpx
import pytest
from pydantic import SecretStr

from mongomem import errors
from mongomem.errors import (
    AuthError,
    ConfigError,
    InputError,
    LLMRateLimited,
    MongomemError,
    NotReady,
    RateLimitExceeded,
    ReconciliationError,
    ScopeError,
    StorageError,
    WriteConflict,
)
from mongomem.sdk import HttpTransport, Identity
from mongomem.sdk.errormap import error_body, error_from, retry_after_s, status_for
from mongomem.sdk.wire import Caller
from mongomem.service import KeyRing, hash_key, identity_of, parse_env_keys

KEY_A = "travel-secret-0123456789"
KEY_B = "other-secret-9876543210"


def ring() -> KeyRing:
    keys = (SecretStr(f"travel:{KEY_A}"), SecretStr(f"other:{KEY_B}"))
    return KeyRing(parse_env_keys(keys), store=None)


def test_keys_are_kept_as_sha256_never_as_plaintext() -> None:
    [env] = parse_env_keys((SecretStr(f"travel:{KEY_A}"),))
    assert env.project_id == "travel"
    assert env.digest == hashlib.sha256(KEY_A.encode()).hexdigest() == hash_key(KEY_A)
    assert KEY_A not in env.model_dump_json()


@pytest.mark.parametrize(
    "entry",
    ["just-a-key-without-project-0123", ":no-project-0123456789", "travel:short", "$bad:" + KEY_A],
)
def test_an_env_key_must_name_its_project(entry: str) -> None:
    with pytest.raises(ConfigError, match="MONGOMEM_SERVICE_API_KEYS entry 1"):
        parse_env_keys((SecretStr(entry),))


def test_env_key_split_at_first_colon() -> None:
    [env] = parse_env_keys((SecretStr("travel:key:with:colons-0123456789"),))
    assert (env.project_id, env.digest) == ("travel", hash_key("key:with:colons-0123456789"))


async def test_each_key_opens_its_own_project_only() -> None:
    keys = ring()
    assert await keys.project_of(KEY_A) == "travel"
    assert await keys.project_of(KEY_B) == "other"
    for bad in (None, "", "travel", KEY_A + "x", f"travel:{KEY_A}", hash_key(KEY_A)):
        with pytest.raises(AuthError):
            await keys.project_of(bad)


def caller(**kw: object) -> Caller:
    base: dict[str, object] = {"project_id": "travel", "user_id": "alice", "session_id": "s1"}
    return Caller.model_validate(base | kw)


def test_identity_is_resolved_again_inside_the_keys_project() -> None:
    who = identity_of("travel", caller())
    assert (who.project_id, who.user_id, who.session_id) == ("travel", "alice", "s1")
    with pytest.raises(ScopeError, match="another project"):
        identity_of("other", caller())
    with pytest.raises(ScopeError):  # an end user cannot claim a service account's scope
        identity_of("travel", caller(user_id="sa:agent-7"))
    with pytest.raises(InputError) as err:
        identity_of("travel", caller(user_id="alice", service_account=True))
    assert err.value.field == "user_id"
    sa = identity_of("travel", caller(user_id="sa:agent-7", service_account=True))
    assert (sa.user_id, sa.service_account) == ("sa:agent-7", True)
    with pytest.raises(InputError) as err:
        identity_of("travel", caller(user_id="$where"))
    assert err.value.field == "user_id"


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (InputError("bad", field="label"), 422),
        (InputError("not json", field="body"), 400),
        (AuthError("no key"), 401),
        (ScopeError("other project"), 403),
        (RateLimitExceeded("over the limit", retry_after=1.5), 429),
        (StorageError("mongo away"), 503),
        (WriteConflict("raced"), 503),
        (LLMRateLimited("slow down", retry_after=2.5), 503),
        (NotReady("no embedder"), 503),
        (ReconciliationError("broken"), 500),
        (ConfigError("bad"), 500),
    ],
)
def test_errors_round_trip_through_http(exc: MongomemError, status: int) -> None:
    assert status_for(exc) == status
    payload = {"error": error_body(exc).model_dump(exclude_none=True)}
    back = error_from(status, json.loads(json.dumps(payload)))
    assert type(back) is type(exc)
    assert str(back) == str(exc)
    assert back.retriable == exc.retriable
    if isinstance(exc, InputError):
        assert isinstance(back, InputError)
        assert back.field == exc.field


def test_retry_after_only_for_429_and_503() -> None:
    assert retry_after_s(StorageError("x")) == 1
    assert retry_after_s(RateLimitExceeded("x", retry_after=0.4)) == 1
    assert retry_after_s(LLMRateLimited("x", retry_after=2.5)) == 3
    assert retry_after_s(InputError("x")) is None
    assert retry_after_s(AuthError("x")) is None


def test_an_answer_without_our_body_maps_by_status() -> None:
    assert type(error_from(401, None)) is AuthError
    assert type(error_from(403, "forbidden")) is ScopeError
    assert type(error_from(422, {"error": {}})) is InputError
    assert type(error_from(503, {})) is StorageError
    assert type(error_from(429, "Too Many Requests")) is RateLimitExceeded
    assert type(error_from(500, {"error": {"type": "NotAnError", "message": "x"}})) is (
        MongomemError
    )
    # a class name that is not one of ours is never instantiated
    assert type(error_from(500, {"error": {"type": "SystemExit", "message": "x"}})) is (
        MongomemError
    )
    assert "SystemExit" not in errors.__all__


WHO = Identity(project_id="travel", user_id="alice", session_id="s1")


def transport(handler: httpx.MockTransport) -> HttpTransport:
    client = httpx.AsyncClient(transport=handler, base_url="http://memory.test")
    return HttpTransport("http://memory.test", api_key=KEY_A, client=client)


async def test_http_transport_sends_the_key_and_identity_and_maps_errors() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.raw_path.startswith(b"/v1/users/alice/memories/semantic/a%2Fb?"):
            return httpx.Response(404, json={"error": {"type": "MemoryNotFound", "message": ""}})
        if request.url.path == "/v1/users/alice/domains":
            return httpx.Response(200, json={"result": ["airline"]})
        body = error_body(InputError("label is empty", field="label")).model_dump()
        return httpx.Response(422, json={"error": body})

    t = transport(httpx.MockTransport(answer))
    assert await t.list_domains(WHO) == ["airline"]
    assert await t.get(WHO, "semantic", "a/b") is None  # a key with "/" is one segment
    with pytest.raises(InputError) as err:
        await t.save(WHO, "semantic", {"label": "", "text": "x"})
    assert err.value.field == "label"
    assert seen[0].headers["Authorization"] == f"Bearer {KEY_A}"
    assert dict(seen[0].url.params) == {"project_id": "travel", "session_id": "s1"}
    assert seen[0].method == "GET"
    assert seen[2].method == "POST"
    assert json.loads(seen[2].content) == {"fields": {"label": "", "text": "x"}}
    assert KEY_A not in repr(t)
    await t.close()


async def test_http_transport_unreachable_or_garbled_service() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(StorageError, match="unreachable"):
        await transport(httpx.MockTransport(refuse)).list_domains(WHO)

    def garble(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"result": [{"not": "a record"}]})

    with pytest.raises(MongomemError, match="unexpected"):
        await transport(httpx.MockTransport(garble)).list_memories(WHO, "semantic", 5, None)

    def not_found_route(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, text="Not Found")

    with pytest.raises(MongomemError):  # a 404 that is not "no such memory" is no None
        await transport(httpx.MockTransport(not_found_route)).get(WHO, "semantic", "x")


async def test_http_transport_names_what_cannot_be_sent() -> None:
    def never(request: httpx.Request) -> httpx.Response:
        raise AssertionError("nothing may be sent")

    t = transport(httpx.MockTransport(never))
    with pytest.raises(InputError) as err:
        await t.record_turn(WHO, "user", "hi", {"when": object()})
    assert err.value.field == "metadata"
    with pytest.raises(InputError) as err:
        await t.record_turn(WHO, "user", "hi", {"x": float("nan")})
    assert err.value.field == "metadata"


def test_http_transport_key_rules() -> None:
    with pytest.raises(ConfigError):
        HttpTransport("memory.test:8080")
    t = HttpTransport("http://memory.test")
    t.use_api_key(KEY_A)
    t.use_api_key(KEY_A)
    with pytest.raises(ConfigError):
        t.use_api_key(KEY_B)


def test_adding_the_cli_commands_does_not_load_the_server() -> None:
    import subprocess
    import sys

    probe = (
        "import argparse, sys\n"
        "from mongomem.service import add_cli\n"
        "add_cli(argparse.ArgumentParser().add_subparsers())\n"
        "heavy = ('fastapi', 'uvicorn', 'pymongo', 'mongomem.service.app')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

"""The space clients mirror :class:`AsyncSpaces` call for call, and the JSON form of
duplicate choices and file inputs round-trips (no servers)."""

from __future__ import annotations

import inspect

import httpx
import pytest

from mongomem.errors import ConfigError, InputError, RateLimitExceeded, StorageError
from mongomem.sdk.spaces import HttpSpaces, Spaces
from mongomem.sdk.spaces.wire import decode_choice, decode_inputs, encode_choice, encode_inputs
from mongomem.sdk.sync import LoopThread, _LoopThread
from mongomem.spaces import (
    AddAnyway,
    AsyncSpaces,
    FileInput,
    Merge,
    Replace,
)

CALLS = sorted(
    name
    for name, fn in inspect.getmembers(AsyncSpaces, inspect.iscoroutinefunction)
    if not name.startswith("_") and name not in ("close",)
)


def test_the_calls_are_all_there() -> None:
    assert len(CALLS) >= 20
    assert {"recall", "add_item", "export_space", "import_space", "update_space"} <= set(CALLS)


@pytest.mark.parametrize("name", CALLS)
@pytest.mark.parametrize("client", [HttpSpaces, Spaces])
def test_every_call_has_the_same_parameters(client: type, name: str) -> None:
    want = inspect.signature(getattr(AsyncSpaces, name)).parameters
    got = inspect.signature(getattr(client, name)).parameters
    shape = [(p.name, p.kind, p.default is inspect.Parameter.empty) for p in want.values()]
    assert [(p.name, p.kind, p.default is inspect.Parameter.empty) for p in got.values()] == shape


@pytest.mark.parametrize(
    "choice",
    [
        None,
        AddAnyway(),
        Replace(item_ids=("item_a", "item_b")),
        Merge(),
        Merge(sentiment_wins="new"),
    ],
)
def test_duplicate_choices_round_trip(choice: object) -> None:
    assert decode_choice(encode_choice(choice)) == choice  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("merge", "on_duplicate"),
        ({"choice": "drop"}, "on_duplicate.choice"),
        ({"choice": "replace", "item_ids": []}, "on_duplicate.item_ids"),
        ({"choice": "merge", "sentiment_wins": "both"}, "on_duplicate.sentiment_wins"),
        ({"choice": "add-anyway", "extra": 1}, "on_duplicate.extra"),
    ],
)
def test_bad_choices_name_the_field(value: object, field: str) -> None:
    with pytest.raises(InputError) as bad:
        decode_choice(value)
    assert bad.value.field == field


def test_file_inputs_round_trip() -> None:
    inputs = {"question": "why", "document": FileInput(name="a.txt", text="hello")}
    assert decode_inputs(encode_inputs(inputs)) == inputs
    with pytest.raises(InputError) as bad:
        decode_inputs({"document": {"name": "a.txt"}})
    assert bad.value.field == "inputs.document.text"


def test_the_sync_spaces_refuse_mixed_arguments() -> None:
    with pytest.raises(ConfigError, match="API key decides the project"):
        Spaces(base_url="http://127.0.0.1:1", api_key="k", project_id="p")
    with pytest.raises(ConfigError):
        Spaces(base_url="http://127.0.0.1:1")
    with pytest.raises(ConfigError):
        Spaces()
    with pytest.raises(ConfigError):
        HttpSpaces("ftp://memory", "k")


def test_the_loop_thread_is_public_and_the_old_name_works() -> None:
    assert _LoopThread is LoopThread
    runner = LoopThread("test-loop")

    async def answer() -> int:
        return 42

    try:
        assert runner.call(answer(), 5) == 42
        assert runner.thread.name == "test-loop"
    finally:
        runner.stop()


@pytest.mark.parametrize(
    ("status", "headers", "error", "retry_after"),
    [
        (429, {"Retry-After": "7"}, RateLimitExceeded, 7.0),  # a proxy's 429: no body
        (503, {}, StorageError, None),
    ],
)
async def test_the_spaces_client_maps_bare_error_answers(
    status: int, headers: dict[str, str], error: type[Exception], retry_after: float | None
) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        assert request.headers["Authorization"] == "Bearer key-0123456789abcdef"
        return httpx.Response(status, headers=headers, text="busy")

    client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    async with HttpSpaces("http://memory:8080", "key-0123456789abcdef", client=client) as spaces:
        with pytest.raises(error) as raised:
            await spaces.list_spaces()
    if retry_after is not None:
        assert getattr(raised.value, "retry_after", None) == retry_after
    await client.aclose()

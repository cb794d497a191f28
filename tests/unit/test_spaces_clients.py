"""The space clients mirror :class:`AsyncSpaces` call for call, and the JSON form of
duplicate choices and file inputs round-trips (no servers)."""

from __future__ import annotations

import inspect
import json

import httpx
import pytest

from mongomem.errors import ConfigError, InputError, RateLimitExceeded, StorageError
from mongomem.sdk.spaces import SPACE_OPERATIONS, HttpSpaces, Spaces, SpacesTransport, wire
from mongomem.sdk.spaces.wire import (
    SPACES_PREFIX,
    decode_choice,
    decode_inputs,
    encode_choice,
    encode_inputs,
)
from mongomem.sdk.sync import LoopThread, _LoopThread
from mongomem.spaces import (
    UNSET,
    AddAnyway,
    AsyncSpaces,
    FileInput,
    Merge,
    Replace,
    SearchKey,
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


# -- the API written once: the protocol, the table and the derived clients ------------

PROTOCOL = sorted(
    n for n in vars(SpacesTransport) if not n.startswith("_") and callable(vars(SpacesTransport)[n])
)


def _shape(fn: object) -> list[tuple[str, object, bool]]:
    params = inspect.signature(fn).parameters.values()  # type: ignore[arg-type]
    return [(p.name, p.kind, p.default is inspect.Parameter.empty) for p in params]


def test_the_protocol_is_the_direct_api_and_the_table_covers_it() -> None:
    assert sorted([*CALLS, "close"]) == PROTOCOL
    assert sorted(SPACE_OPERATIONS) == CALLS
    for name in PROTOCOL:
        assert _shape(getattr(SpacesTransport, name)) == _shape(getattr(AsyncSpaces, name)), name


@pytest.mark.parametrize("name", CALLS)
def test_each_request_model_holds_the_calls_arguments(name: str) -> None:
    """The table's model names every parameter of the call (required where it is)."""
    params = list(inspect.signature(getattr(SpacesTransport, name)).parameters.values())[1:]
    fields = SPACE_OPERATIONS[name].request.model_fields
    assert [(p.name, p.default is inspect.Parameter.empty) for p in params] == [
        (f, info.is_required()) for f, info in fields.items()
    ]
    assert set(SPACE_OPERATIONS[name].path_fields) <= set(fields)


@pytest.mark.parametrize("name", CALLS)
@pytest.mark.parametrize("client", [HttpSpaces, Spaces])
def test_every_call_of_the_clients_is_derived(client: type, name: str) -> None:
    assert getattr(client, name) is not getattr(SpacesTransport, name)
    assert getattr(client, name).__doc__ == getattr(SpacesTransport, name).__doc__


def _space() -> dict[str, object]:
    now = "2026-12-01T09:00:00+00:00"
    return {
        "project_id": "p",
        "space_id": "refunds",
        "name": "refunds",
        "kind": "episodic",
        "encrypted": False,
        "keys": [{"argument": "q"}],
        "recall": {},
        "embedder": "e",
        "dimensions": 4,
        "created_at": now,
        "updated_at": now,
    }


class Recorder:
    """An httpx transport that keeps each request and answers from ``answers``."""

    def __init__(self, *answers: httpx.Response) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.answers.pop(0)


async def _over(recorder: Recorder) -> HttpSpaces:
    client = httpx.AsyncClient(transport=httpx.MockTransport(recorder))
    return HttpSpaces("http://memory:8080", "key-0123456789abcdef", client=client)


async def test_http_requests_follow_the_table() -> None:
    """Path segments quoted, JSON bodies with only the arguments given (inputs and
    duplicate choices in their JSON form), GET arguments in the query, NDJSON both ways."""
    space = _space()
    rec = Recorder(
        httpx.Response(201, json={"result": space}),
        httpx.Response(200, json={"result": []}),
        httpx.Response(200, json={"result": []}),
        httpx.Response(200, text='{"header": 1}\n{"item": 2}\n'),
        httpx.Response(201, json={"result": space}),
        httpx.Response(
            409,
            json={
                "error": {"type": "ConfirmationRequired", "message": "w"},
                "result": {"space": space, "applied": False, "warning": "w"},
            },
        ),
        httpx.Response(
            404, json={"error": {"type": "InputError", "message": "no item", "field": "item_id"}}
        ),
    )
    spaces = await _over(rec)
    assert (await spaces.create_space("refunds", keys=[SearchKey(argument="q")])).space_id == (
        "refunds"
    )
    await spaces.recall(
        "a b/c", {"q": "x", "doc": FileInput(name="f.txt", text="t")}, agent_id="bot"
    )
    await spaces.feedback("refunds", item_id="item_1")
    assert await spaces.export_space("refunds") == ['{"header": 1}', '{"item": 2}']
    await spaces.import_space(iter(['{"header": 1}', "", '{"item": 2}']), encrypted=False)
    update = await spaces.update_space("refunds", keys=[{"argument": "z"}])
    assert (update.applied, update.warning) == (False, "w")
    assert await spaces.delete_item("refunds", "item_9") is False
    create, recall, feedback, export, imported, patch, delete = rec.requests
    assert (create.method, create.url.path) == ("POST", "/v1/spaces")
    sent = json.loads(create.content)
    assert (sorted(sent), sent["keys"][0]["argument"]) == (["keys", "space_id"], "q")
    assert (recall.method, recall.url.raw_path) == ("POST", b"/v1/spaces/a%20b%2Fc/recall")
    assert json.loads(recall.content) == {
        "inputs": {"q": "x", "doc": {"name": "f.txt", "text": "t"}},
        "agent_id": "bot",
    }
    assert (feedback.method, feedback.url.path, dict(feedback.url.params)) == (
        "GET",
        "/v1/spaces/refunds/feedback",
        {"item_id": "item_1"},
    )
    assert (export.method, export.url.path) == ("GET", "/v1/spaces/refunds/export")
    assert (imported.url.path, dict(imported.url.params)) == (
        "/v1/spaces/import",
        {"encrypted": "false"},
    )
    assert imported.content == b'{"header": 1}\n{"item": 2}\n'
    assert (patch.method, json.loads(patch.content)) == ("PATCH", {"keys": [{"argument": "z"}]})
    assert (delete.method, delete.url.path) == ("DELETE", "/v1/spaces/refunds/items/item_9")
    await spaces.close()


async def test_http_refuses_what_cannot_travel_before_sending() -> None:
    rec = Recorder()
    spaces = await _over(rec)
    with pytest.raises(InputError) as bad:
        await spaces.get_space("..")
    assert bad.value.field == "space_id"
    with pytest.raises(InputError) as bad:
        await spaces.add_item("refunds", inputs={"q": "x"}, outputs={"when": {1, 2}})
    assert bad.value.field == "outputs"
    with pytest.raises(InputError) as bad:
        await spaces.import_space(["a\nb"])
    assert bad.value.field == "lines"
    with pytest.raises(TypeError, match="recall"):
        await spaces.recall("refunds")  # type: ignore[call-arg]
    assert rec.requests == []
    await spaces.close()


class Double:
    """A spaces transport that records each call (the blocking client's inner one)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[object, ...], dict[str, object]]] = []
        self.closed = False

    def __getattr__(self, name: str) -> object:
        async def call(*args: object, **kwargs: object) -> object:
            self.calls.append((name, args, kwargs))
            return f"{name} done"

        return call

    async def close(self) -> None:
        self.closed = True


def test_the_blocking_client_makes_the_same_call_on_any_transport() -> None:
    double = Double()
    with Spaces(transport=double) as spaces:  # type: ignore[arg-type]
        recalled: object = spaces.recall("refunds", {"q": "x"}, agent_id="bot")
        assert recalled == "recall done"  # the double's answer, passed through
        imported: object = spaces.import_space(line for line in ["a", "b"])
        assert imported == "import_space done"
        spaces.update_item("refunds", "item_1", outcome=None)
        with pytest.raises(TypeError):
            spaces.get_space()  # type: ignore[call-arg]
    assert double.calls == [
        ("recall", ("refunds", {"q": "x"}), {"agent_id": "bot"}),
        ("import_space", (["a", "b"],), {}),
        ("update_item", ("refunds", "item_1"), {"outcome": None}),
    ]
    assert double.closed
    with pytest.raises(ConfigError, match="transport"):
        Spaces(transport=double, project_id="p")  # type: ignore[arg-type]


async def test_http_update_item_sends_only_what_changes() -> None:
    """``outcome=None`` clears the outcome; an argument left out (or ``UNSET``) is not sent."""
    now = "2026-12-01T09:00:00+00:00"
    item = {
        "item_id": "item_1",
        "space_id": "refunds",
        "kind": "episodic",
        "inputs": {"q": "x"},
        "key_texts": {"q": "x"},
        "created_at": now,
        "updated_at": now,
    }
    rec = Recorder(*[httpx.Response(200, json={"result": item}) for _ in range(2)])
    spaces = await _over(rec)
    await spaces.update_item("refunds", "item_1", outcome=None)
    await spaces.update_item("refunds", "item_1", outputs={"a": 1}, inputs=UNSET)
    assert [json.loads(r.content) for r in rec.requests] == [
        {"outcome": None},
        {"outputs": {"a": 1}},
    ]
    await spaces.close()


@pytest.mark.parametrize("name", CALLS)
def test_the_wire_docstring_lists_every_route(name: str) -> None:
    """The table in the docstring of :mod:`mongomem.sdk.spaces.wire` says what the code does."""
    op = SPACE_OPERATIONS[name]
    path = (SPACES_PREFIX + op.path).replace("{space_id}", "{space}")
    path = path.replace("{item_id}", "{item}").replace("{agent_id}", "{agent}")
    rows = [
        r for r in (wire.__doc__ or "").splitlines() if r.startswith("``") and f"``{name}``" in r
    ]
    assert len(rows) == 1, name
    assert rows[0].startswith(f"``{op.method:<6} {path}"), rows[0]

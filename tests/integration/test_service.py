"""The memory service over real HTTP, driven by the real SDK (SPEC G2, E1, F1–F3).

The FastAPI app runs on a free loopback port against the test servers; the
SDK reaches it with :class:`HttpTransport`, and the direct transport on the
same database is the reference every answer is compared with.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from pymongo import AsyncMongoClient
from service_http import EMBEDDER, call, start

from mongomem.adapters.mongo import DECISIONS, MEMORIES, TURNS, Document
from mongomem.errors import AuthError, InputError, NotReady, ScopeError, StorageError
from mongomem.models import Action
from mongomem.sdk import AsyncMemory, HttpTransport, Memory, MemoryRequestContext
from mongomem.service import ApiKeyStore, keys_command, serve
from mongomem.settings import EmbeddingSettings, LLMSettings, MongoSettings, Settings

pytestmark = pytest.mark.integration

KEY_A = "travel-env-key-0123456789abcdef"
KEY_B = "other-env-key-0123456789abcdef"


def same_hits(left: list[Any], right: list[Any]) -> bool:
    """The same memories in the same order, with scores equal up to float rounding.

    The service embeds the query in its own process; the last bits of a float32
    dot product can differ between processes (vectorised summation order)."""
    return [h.memory for h in left] == [h.memory for h in right] and all(
        abs(a.score - b.score) < 1e-5 for a, b in zip(left, right, strict=True)
    )


def ctx(user: str, session: str = "thread_123") -> MemoryRequestContext:
    return MemoryRequestContext(user_id=user, session_id=session)


def with_keys(settings: Settings, **changes: Any) -> Settings:
    """The test's settings with env keys for projects travel and other, and stand-ins."""
    keys = (SecretStr(f"travel:{KEY_A}"), SecretStr(f"other:{KEY_B}"))
    return settings.model_copy(
        update={
            "service": settings.service.model_copy(update={"api_keys": keys}),
            "embedding": EmbeddingSettings(provider="stand-in", dimensions=64),
            "llm": LLMSettings(use_stand_in=True),
            **changes,
        }
    )


@pytest.fixture
async def url(settings: Settings, mongo: AsyncMongoClient[Document]) -> AsyncIterator[str]:
    runner, base = await start(with_keys(settings))
    try:
        yield base
    finally:
        await runner.stop()


@pytest.fixture
async def direct(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> AsyncIterator[AsyncMemory]:
    async with AsyncMemory(project_id="travel", settings=settings, embedder=EMBEDDER) as m:
        yield m


@pytest.fixture
async def remote(url: str) -> AsyncIterator[AsyncMemory]:
    async with AsyncMemory(project_id="travel", api_key=KEY_A, base_url=url) as m:
        yield m


async def post(url: str, op: str, body: dict[str, Any], key: str | None = KEY_A) -> httpx.Response:
    return await call(url, op, body, key)


ALICE = {"project_id": "travel", "user_id": "alice", "session_id": "s1"}


async def test_every_call_over_http_gives_the_direct_results(
    remote: AsyncMemory, direct: AsyncMemory
) -> None:
    chat = remote.bind(ctx("user_1"))
    first = await chat.save_semantic("home-airport", "The user's home airport is Boston.")
    second = await chat.save_semantic("home-airport", "The user's home airport is Denver.")
    third = await chat.save_semantic("Home Airport", "The user's home airport is Denver.")
    assert [first.action, second.action, third.action] == [
        Action.ADD,
        Action.UPDATE,
        Action.REINFORCE,
    ]
    await chat.save_episode(title="Vacation planning", content="Planned a summer trip to Lisbon.")
    await chat.save_procedure("compare-flights", "Compare flight options.", "Rank by price.")
    await chat.save_taxonomic("airline", "red-eye", "An overnight flight that lands next morning.")
    turn = await chat.record_turn("user", "Find me a flight to Lisbon", {"tool": ["search", 1]})
    assert (turn.seq, turn.metadata) == (1, {"tool": ["search", 1]})
    await chat.record_turn("assistant", "Here are three options.")

    ref = direct.bind(ctx("user_1"))
    fact = await chat.get_semantic("home-airport")
    assert fact is not None
    assert fact.reinforcement_count == 2
    assert fact == await ref.get_semantic("home-airport")
    assert await chat.get_semantic("nowhere") is None
    assert same_hits(
        await chat.search_semantic("home airport"), await ref.search_semantic("home airport")
    )
    assert same_hits(
        await chat.search_episodes("Lisbon trip"), await ref.search_episodes("Lisbon trip")
    )
    assert (await chat.list_episodes())[0].title == "Vacation planning"
    assert await chat.list_episodes() == await ref.list_episodes()
    assert same_hits(
        await chat.discover_procedures("flights"), await ref.discover_procedures("flights")
    )
    assert await chat.get_procedure("compare-flights") == await ref.get_procedure("compare-flights")
    term = await chat.get_taxonomic_term("airline", "red-eye")
    assert term is not None
    assert term == await ref.get_taxonomic_term("airline", "red-eye")
    hits = await chat.search_taxonomic("overnight flight", domain="airline")
    assert same_hits(hits, await ref.search_taxonomic("overnight flight", domain="airline"))
    assert hits[0].memory.term == "red-eye"
    assert await chat.list_domains() == await ref.list_domains() == ["airline"]
    everything = ["semantic", "episodic", "procedural", "taxonomic"]
    assert await chat.build_context("Lisbon flights", include=everything) == (
        await ref.build_context("Lisbon flights", include=everything)
    )
    history = await chat.history(first.memory_id)
    assert [v.version for v in history] == [1, 2]
    assert history == await ref.history(first.memory_id)
    turns = await chat.recent_turns(10)
    assert [t.seq for t in turns] == [1, 2]
    assert turns == await ref.recent_turns(10)
    assert turns[0] == turn
    assert await chat.list_sessions() == await ref.list_sessions()
    ended = await chat.end_session()
    assert (ended.session_id, ended.seq) == ("thread_123", 3)
    assert await chat.recent_turns(10) == await ref.recent_turns(10) == turns
    assert (await ref.end_session()).seq == 4, "the same session, over either transport"


async def test_the_sync_memory_over_http(url: str, direct: AsyncMemory) -> None:
    def work() -> tuple[str, int]:
        # transport without a key of its own: the Memory's api_key is used
        with Memory(project_id="travel", api_key=KEY_A, transport=HttpTransport(url)) as memory:
            chat = memory.bind(ctx("user_1"))
            saved = chat.save_semantic("seat", "The user prefers the aisle.")
            chat.record_turn("user", "hello")
            assert chat.end_session().seq == 2
            assert [t.content for t in chat.recent_turns()] == ["hello"]
            return saved.memory_id, len(chat.history(saved.memory_id))

    memory_id, versions = await asyncio.to_thread(work)
    assert versions == 1
    fact = await direct.bind(ctx("user_1")).get_semantic("seat")
    assert fact is not None
    assert fact.memory_id == memory_id


async def test_a_missing_wrong_or_revoked_key_is_refused(
    url: str, settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    for key in (None, "wrong-key-0123456789", KEY_A + "0", f"travel:{KEY_A}"):
        async with AsyncMemory(project_id="travel", api_key=key, base_url=url) as m:
            with pytest.raises(AuthError):
                await m.bind(ctx("alice")).list_domains()
    answer = await post(url, "list_domains", ALICE, key=None)
    assert answer.status_code == 401
    assert answer.headers["WWW-Authenticate"].startswith("Bearer")
    assert answer.json()["error"]["type"] == "AuthError"

    store = ApiKeyStore(mongo[settings.mongodb.database])
    key, info = await store.create("travel", "agent")
    async with AsyncMemory(project_id="travel", api_key=key, base_url=url) as m:
        chat = m.bind(ctx("alice"))
        await chat.save_semantic("tone", "Answer briefly.")  # a managed key works at once
        await store.revoke(info.key_id)
        with pytest.raises(AuthError, match="revoked"):  # and is refused at once, no restart
            await chat.get_semantic("tone")
    forged = key[:-4] + "AAAA"
    assert (await post(url, "list_domains", ALICE, key=forged)).status_code == 401


async def test_a_key_of_one_project_never_reads_or_writes_another(
    url: str, settings: Settings, direct: AsyncMemory
) -> None:
    """The service is scoped to its key's project (SPEC F2, F3)."""
    await direct.bind(ctx("alice")).save_semantic("home", "Alice lives in Boston.")
    async with AsyncMemory(project_id="travel", api_key=KEY_B, base_url=url) as m:  # B's key
        chat = m.bind(ctx("alice"))
        calls: list[Callable[[], Awaitable[object]]] = [
            lambda: chat.get_semantic("home"),
            lambda: chat.search_semantic("Boston"),
            lambda: chat.list_domains(),
            lambda: chat.recent_turns(),
            lambda: chat.save_semantic("home", "Alice lives in Denver."),
            lambda: chat.record_turn("user", "hi"),
        ]
        for call in calls:
            with pytest.raises(ScopeError, match="another project"):
                await call()
    body = ALICE | {"memory_type": "semantic", "key": "home"}
    assert (await post(url, "get", body, key=KEY_B)).status_code == 403
    # B's key opens B, where alice's memory of A is not
    async with AsyncMemory(project_id="other", api_key=KEY_B, base_url=url) as b:
        assert await b.bind(ctx("alice")).get_semantic("home") is None
        await b.bind(ctx("alice")).save_semantic("home", "Other-project fact.")
    fact = await direct.bind(ctx("alice")).get_semantic("home")
    assert fact is not None
    assert fact.text == "Alice lives in Boston."
    assert await direct.bind(ctx("alice", "thread_123")).list_sessions() == []


async def test_users_are_isolated_by_explicit_user_id(remote: AsyncMemory, url: str) -> None:
    """The project-scoped service takes the caller's explicit ``user_id`` (SPEC F2)."""
    alice, bob = remote.bind(ctx("alice")), remote.bind(ctx("bob"))
    a = await alice.save_semantic("home-airport", "The user's home airport is Boston.")
    b = await bob.save_semantic("home-airport", "The user's home airport is Denver.")
    assert a.memory_id != b.memory_id
    fact = await alice.get_semantic("home-airport")
    assert fact is not None
    assert "Boston" in fact.text
    await bob.save_episode("Ski trip", "Bob booked a ski trip to Aspen.")
    assert await alice.search_episodes("Bob booked a ski trip to Aspen.") == []
    assert await alice.history(b.memory_id) == []
    await bob.record_turn("user", "secret plans")
    assert await alice.recent_turns() == []
    # a path user beginning with "sa:" is that service account, not an end user
    await remote.bind(MemoryRequestContext(service_account="agent-7")).save_semantic(
        "tone", "Answer briefly."
    )
    body = ALICE | {"user_id": "sa:agent-7", "memory_type": "semantic", "key": "tone"}
    answer = await post(url, "get", body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["result"]["text"] == "Answer briefly."
    assert await alice.get_semantic("tone") is None


async def test_service_account_identity_ignores_the_end_user(
    remote: AsyncMemory, direct: AsyncMemory
) -> None:
    as_alice = remote.bind(MemoryRequestContext(service_account="agent-7", user_id="alice"))
    as_bob = remote.bind(MemoryRequestContext(service_account="agent-7", user_id="bob"))
    await as_alice.save_semantic("tone", "Answer briefly.")
    shared = await as_bob.get_semantic("tone")
    assert shared is not None
    assert shared == await direct.bind(
        MemoryRequestContext(service_account="agent-7")
    ).get_semantic("tone")
    assert await remote.bind(ctx("alice")).get_semantic("tone") is None


async def test_bad_input_names_the_field_and_stores_nothing(
    remote: AsyncMemory, url: str, mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    chat = remote.bind(ctx("alice"))
    int_keyed: dict[Any, Any] = {"deep": [{"x": 1}], 3: "int key"}
    cases: list[tuple[Callable[[], Awaitable[object]], str]] = [
        (lambda: chat.save_semantic("", "text"), "label"),
        (lambda: chat.save_episode("Trip", "   "), "content"),
        (lambda: chat.save_taxonomic("air/line", "red-eye", "x"), "domain"),
        (lambda: chat.record_turn("robot", "hello"), "role"),
        (lambda: chat.record_turn("user", "hi", int_keyed), "metadata"),
        (lambda: chat.search_episodes("   "), "query"),
        (lambda: chat.search_semantic("x", limit=0), "limit"),
    ]
    for attempt, field in cases:
        with pytest.raises(InputError) as err:
            await attempt()
        assert err.value.field == field, err.value
    raw: list[tuple[str, dict[str, Any], str]] = [
        ("save", ALICE | {"memory_type": "semantic", "fields": {"label": 7, "text": "x"}}, "label"),
        ("save", ALICE | {"memory_type": "gossip", "fields": {"label": "a"}}, "memory_type"),
        ("search", ALICE | {"memory_type": "semantic", "query": "x", "limit": 0}, "limit"),
        ("record_turn", ALICE | {"role": "user", "content": 5}, "content"),
        ("record_turn", ALICE | {"role": "user", "content": "x", "admin": True}, "admin"),
        ("recent_turns", ALICE | {"limit": "ten"}, "limit"),
    ]
    for op, body, field in raw:
        answer = await post(url, op, body)
        assert answer.status_code == 422, (op, answer.text)
        assert answer.json()["error"]["field"] == field
        assert answer.json()["error"]["message"]
    async with httpx.AsyncClient() as client:
        answer = await client.post(
            f"{url}/v1/users/alice/memories/semantic",
            content=b"{not json",
            headers={"Authorization": f"Bearer {KEY_A}"},
        )
    assert answer.status_code == 400
    assert answer.json()["error"] == answer.json()["error"] | {
        "type": "InputError",
        "field": "body",
    }
    db = mongo[settings.mongodb.database]
    assert await db[MEMORIES].count_documents({}) == 0
    assert await db[TURNS].count_documents({}) == 0


async def test_a_retriable_backend_failure_answers_503(settings: Settings) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    away = MongoSettings(
        uri=f"mongodb://127.0.0.1:{dead}/?directConnection=true",
        database="away",
        server_selection_timeout_s=0.5,
    )
    runner, base = await start(with_keys(settings, mongodb=away))
    try:
        async with AsyncMemory(project_id="travel", api_key=KEY_A, base_url=base) as m:
            with pytest.raises(StorageError) as err:
                await m.bind(ctx("alice")).save_semantic("home", "Boston.")
            assert err.value.retriable
        body = ALICE | {"memory_type": "semantic", "key": "home"}
        answer = await post(base, "get", body)
        assert answer.status_code == 503
        assert int(answer.headers["Retry-After"]) >= 1
        assert answer.json()["error"]["retriable"] is True
        async with httpx.AsyncClient() as client:
            ready = await client.get(f"{base}/readyz")
        assert ready.status_code == 503
        assert "MongoDB is unreachable" in ready.json()["problems"][0]
    finally:
        await runner.stop()


async def test_health_readiness_and_metrics(url: str) -> None:
    async with httpx.AsyncClient(base_url=url) as client:
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        ready = await client.get("/readyz")
        assert (ready.status_code, ready.json()) == (200, {"ready": True, "problems": []})
        assert (await client.post("/v1/drop_database", json={})).status_code == 404
        metrics = (await client.get("/metrics")).text
    assert 'mongomem_service_requests_total{operation="readyz",status="200"}' in metrics
    assert 'operation="other",status="404"' in metrics
    for lane in ("stored", "query"):  # the embedding queue's depth, per lane
        assert f'mongomem_service_embedding_queue_jobs{{lane="{lane}"}}' in metrics
        assert f'mongomem_service_embedding_queue_tokens{{lane="{lane}"}}' in metrics


async def test_serve_runs_until_stopped_and_refuses_when_not_ready(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ready = with_keys(settings)
    ready = ready.model_copy(
        update={"service": ready.service.model_copy(update={"host": "127.0.0.1", "port": port})}
    )
    stop = asyncio.Event()
    task = asyncio.create_task(serve(ready, stop, embedder=EMBEDDER))
    try:
        async with httpx.AsyncClient() as client:
            for _ in range(100):
                try:
                    answer = await client.get(f"http://127.0.0.1:{port}/healthz")
                    break
                except httpx.ConnectError:
                    await asyncio.sleep(0.05)
        assert answer.status_code == 200
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
    unready = ready.model_copy(update={"embedding": EmbeddingSettings(), "llm": LLMSettings()})
    with pytest.raises(NotReady, match="embedding provider"):
        await serve(unready, asyncio.Event())


async def test_keys_commands_create_list_and_revoke(
    settings: Settings, mongo: AsyncMongoClient[Document], capsys: pytest.CaptureFixture[str]
) -> None:
    def run(action: str, **kw: Any) -> str:
        args = argparse.Namespace(keys_action=action, **kw)
        assert keys_command(args, settings) == 0
        return capsys.readouterr().out

    created = await asyncio.to_thread(
        run, "create", project_id="travel", project=None, name="agent"
    )
    key = created.split("API key (shown only now, stored as a SHA-256 hash): ")[1].strip()
    key_id = key.split("_")[1]
    stored = await mongo[settings.mongodb.database]["api_keys"].find_one({"_id": key_id})
    assert stored is not None
    assert key not in str(stored)
    listed = await asyncio.to_thread(run, "list", project_id=None)
    assert key_id in listed
    assert "active" in listed
    assert key not in listed
    await asyncio.to_thread(run, "revoke", key_id=key_id)
    assert "revoked" in await asyncio.to_thread(run, "list", project_id="travel")
    assert key_id not in await asyncio.to_thread(run, "list", project_id="other")


async def test_the_cli_creates_a_key_serves_with_it_and_revokes_it(
    settings: Settings, subprocess_env: dict[str, str], mongo: AsyncMongoClient[Document]
) -> None:
    """``mongomem keys create`` → ``mongomem serve`` → SDK over HTTP → ``mongomem keys revoke``."""
    env = {
        **subprocess_env,
        "MONGOMEM_EMBEDDING_PROVIDER": "stand-in",
        "MONGOMEM_EMBEDDING_DIMENSIONS": "64",
        "MONGOMEM_LLM_USE_STAND_IN": "true",
    }

    async def cli(*args: str) -> str:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "mongomem.cli",
            *args,
            env=env,
            stdout=asyncio.subprocess.PIPE,
        )
        out, _ = await proc.communicate()
        assert proc.returncode == 0, args
        return out.decode()

    created = await cli("keys", "create", "travel", "--name", "cli")
    key = created.split("API key (shown only now, stored as a SHA-256 hash): ")[1].strip()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mongomem.cli", "serve", "--port", str(port), env=env
    )
    try:
        url = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient() as client:
            for _ in range(200):
                try:
                    if (await client.get(f"{url}/readyz")).status_code == 200:
                        break
                except httpx.ConnectError:
                    pass
                await asyncio.sleep(0.1)
        async with AsyncMemory(project_id="travel", api_key=key, base_url=url) as memory:
            chat = memory.bind(MemoryRequestContext(user_id="u1", session_id="s1"))
            await chat.save_semantic(label="home-airport", text="Home airport is Boston.")
            found = await chat.get_semantic("home-airport")
            assert found is not None
            assert found.text == "Home airport is Boston."
            await cli("keys", "revoke", key.split("_")[1])
            with pytest.raises(AuthError):
                await chat.get_semantic("home-airport")
    finally:
        server.terminate()
        assert await asyncio.wait_for(server.wait(), 20) == 0, "SIGTERM stops it cleanly"


# -- idempotency keys over HTTP ---------------------------------------------------------


class LoseFirstAnswers(httpx.AsyncBaseTransport):
    """Delivers every request, but loses the answer of the first ``n`` saves (a timeout)."""

    def __init__(self, n: int) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.lost, self.n = 0, n
        self.bodies: list[bytes] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if request.method == "POST" and request.url.path.endswith("/memories/semantic"):
            self.bodies.append(request.content)
            if self.lost < self.n:
                self.lost += 1
                await response.aread()
                raise httpx.ReadTimeout("the answer was lost", request=request)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_a_keyed_save_over_http_is_applied_once(
    remote: AsyncMemory,
    direct: AsyncMemory,
    url: str,
    mongo: AsyncMongoClient[Document],
    settings: Settings,
) -> None:
    db = mongo[settings.mongodb.database]
    chat = remote.bind(ctx("alice"))
    text = "The user's home airport is Boston."
    first = await chat.save_semantic("home-airport", text, idempotency_key="h-1")
    assert await chat.save_semantic("home-airport", text, idempotency_key="h-1") == first
    # the direct SDK on the same database shares the key space: same caller, same key
    assert (
        await direct.bind(ctx("alice")).save_semantic("home-airport", text, idempotency_key="h-1")
        == first
    )
    reinforced = await asyncio.gather(
        *[chat.save_semantic("home-airport", text, idempotency_key="h-2") for _ in range(6)]
    )
    assert {r.action for r in reinforced} == {Action.REINFORCE}
    assert all(r == reinforced[0] for r in reinforced)
    fact = await chat.get_semantic("home-airport")
    assert fact is not None
    assert (fact.version, fact.reinforcement_count) == (1, 2)
    counts = (await db[MEMORIES].count_documents({}), await db[DECISIONS].count_documents({}))

    # the same key with other content: 409 naming the key, nothing stored
    with pytest.raises(InputError, match="different request") as err:
        await chat.save_semantic("home-airport", "Denver.", idempotency_key="h-1")
    assert err.value.field == "idempotency_key"
    body = ALICE | {
        "memory_type": "semantic",
        "idempotency_key": "h-1",
        "fields": {"label": "home-airport", "text": "Denver."},
    }
    answer = await post(url, "save", body)
    assert answer.status_code == 409
    assert answer.json()["error"] | {"message": ""} == {
        "type": "StateConflict",
        "field": "idempotency_key",
        "message": "",
        "retriable": False,
    }
    for bad in ("", "x" * 256, "two words", 12, ["h-1"]):
        answer = await post(url, "save", body | {"idempotency_key": bad})
        assert answer.status_code == 422, bad
        assert answer.json()["error"]["field"] == "idempotency_key"
    # a raw repeat answers the first result, as JSON
    raw = body | {"fields": {"label": "home-airport", "text": text}}
    assert (await post(url, "save", raw)).json()["result"] == first.model_dump(mode="json")
    after = (await db[MEMORIES].count_documents({}), await db[DECISIONS].count_documents({}))
    assert after == counts
    assert (await chat.get_semantic("home-airport")) == fact


async def test_the_http_client_retries_a_keyed_save_whose_answer_was_lost(
    url: str, direct: AsyncMemory
) -> None:
    lossy = LoseFirstAnswers(2)
    client = httpx.AsyncClient(transport=lossy)
    transport = HttpTransport(url, api_key=KEY_A, client=client, retry_backoff_s=0.01)
    async with AsyncMemory(project_id="travel", transport=transport) as m:
        chat = m.bind(ctx("alice"))
        saved = await chat.save_semantic("seat", "Aisle.", idempotency_key="seat-1")
        assert (lossy.lost, len(lossy.bodies), len(set(lossy.bodies))) == (2, 3, 1)
        again = await chat.save_semantic("seat", "Aisle.")  # no key: a new save, not retried
        lossy.n += 1
        with pytest.raises(StorageError, match="timed out"):
            await chat.save_semantic("seat", "Aisle.")  # its answer is lost: the caller's to retry
    await client.aclose()
    assert (saved.action, again.action) == (Action.ADD, Action.REINFORCE)
    fact = await direct.bind(ctx("alice")).get_semantic("seat")
    assert fact is not None
    assert fact.reinforcement_count == 3  # once for the keyed save, once each without a key


async def test_build_context_over_http_is_one_request_with_the_direct_answer(
    url: str, direct: AsyncMemory
) -> None:
    """``POST …/context`` composes the context in the service: one round trip, not one
    search per type, and the same context the direct transport composes."""
    ref = direct.bind(ctx("user_1"))
    await ref.save_semantic("home-airport", "The user's home airport is Lisbon.")
    await ref.save_episode(title="Lisbon trip", content="Flew to Lisbon in May.")
    await ref.save_procedure("book-flights", "Book flights to Lisbon.", "Compare, then book.")
    await ref.save_taxonomic("airline", "red-eye", "An overnight flight to Lisbon.")
    sent: list[str] = []

    async def count(request: httpx.Request) -> None:
        sent.append(f"{request.method} {request.url.path}")

    everything = ["semantic", "episodic", "procedural", "taxonomic", "semantic"]
    async with httpx.AsyncClient(event_hooks={"request": [count]}) as shared:
        transport = HttpTransport(url, client=shared)
        async with AsyncMemory(project_id="travel", api_key=KEY_A, transport=transport) as m:
            chat = m.bind(ctx("user_1"))
            for options in [
                {},
                {"include": everything, "limit_per_type": 2, "max_chars": 120},
                {"include": everything, "min_score": 0.2},
            ]:
                sent.clear()
                got = await chat.build_context("Lisbon flights", **options)  # type: ignore[arg-type]
                assert sent == ["POST /v1/users/user_1/context"], sent
                assert got == await ref.build_context("Lisbon flights", **options)  # type: ignore[arg-type]
                assert got.items, options
            sent.clear()
            with pytest.raises(InputError) as bad:
                await chat.build_context("x", max_chars=0)
            assert (bad.value.field, sent) == ("max_chars", [])  # refused before sending
    answer = await post(url, "build_context", ALICE | {"query": "x", "include": ["gossip"]})
    assert (answer.status_code, answer.json()["error"]["field"]) == (422, "memory_type")
    answer = await post(url, "build_context", ALICE | {"query": "x", "max_chars": 0})
    assert (answer.status_code, answer.json()["error"]["field"]) == (422, "max_chars")

"""The local OpenAI-compatible server (the stand-in's, under the fake): HTTP as the client sees it.

Raw sockets check the HTTP/1.1 layer (keep-alive, chunked bodies, refusals,
a connection dropped mid-body); the real ``openai`` client checks TLS and the
stand-in's labels; subprocesses check that neither the stand-in nor the test
doubles need aiohttp, and that ``python -m mongomem.local.llm_stand_in`` serves.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from mongomem.local.infra import free_port
from mongomem.local.llm_stand_in import STAND_IN_BANNER, STAND_IN_MODEL, stand_in_server
from mongomem.local.llm_stand_in.http import HttpServer, Request, Response, json_response
from mongomem.local.runner import LLMStandIn
from mongomem.testing import (
    Answer,
    Dropped,
    FakeOpenAIServer,
    Slow,
    make_certificates,
)

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as srv:
        yield srv


def _request(method: str, path: str, body: bytes = b"", *, extra: str = "") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: localhost\r\n{extra}"
    if body:
        head += f"Content-Length: {len(body)}\r\nContent-Type: application/json\r\n"
    return head.encode() + b"\r\n" + body


def _read_response(conn: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One response off ``conn`` (status, headers, the body bytes that arrived)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before the headers: {data!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(status_line.split()[1]), headers, body


def _closed(conn: socket.socket) -> bool:
    conn.settimeout(5)
    try:
        return conn.recv(1) == b""
    except ConnectionResetError:
        return True


def test_one_connection_serves_several_requests(server: FakeOpenAIServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port)) as conn:
        for _ in range(3):
            conn.sendall(_request("POST", "/v1/chat/completions", json.dumps(CHAT).encode()))
            status, headers, body = _read_response(conn)
            assert status == 200
            assert json.loads(body)["model"] == "fake-model"
            assert headers["content-length"] == str(len(body))
        conn.sendall(_request("GET", "/v1/models"))
        status, _, body = _read_response(conn)
    assert (status, json.loads(body)["data"][0]["id"]) == (200, "fake-model")


def test_a_chunked_request_body_is_read_whole(server: FakeOpenAIServer) -> None:
    payload = json.dumps({"input": ["one text", "another"]}).encode()
    half = len(payload) // 2
    chunks = b"".join(
        f"{len(part):x}\r\n".encode() + part + b"\r\n" for part in (payload[:half], payload[half:])
    )
    with socket.create_connection(("127.0.0.1", server.port)) as conn:
        conn.sendall(
            _request("POST", "/v1/embeddings", extra="Transfer-Encoding: chunked\r\n")
            + chunks
            + b"0\r\n\r\n"
        )
        status, _, body = _read_response(conn)
    assert status == 200
    assert len(json.loads(body)["data"]) == 2
    assert server.embedding_requests[-1] == ["one text", "another"]


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"this is not http\r\n\r\n", 400),
        (_request("POST", "/v1/chat/completions", b"{not json"), 400),
        (_request("POST", "/v1/chat/completions", b"[1, 2]"), 400),
        (_request("POST", "/v1/embeddings", b'{"input": [1, 2]}'), 400),
        (_request("GET", "/v1/nowhere"), 404),
        (_request("GET", "/v1/chat/completions"), 405),
    ],
)
def test_bad_requests_are_refused_in_openai_shape(
    server: FakeOpenAIServer, raw: bytes, status: int
) -> None:
    with socket.create_connection(("127.0.0.1", server.port)) as conn:
        conn.sendall(raw)
        got, _, body = _read_response(conn)
    assert got == status
    assert json.loads(body)["error"]["message"]


async def _failing(request: Request) -> Response:
    if request.path == "/boom":
        raise RuntimeError("handler bug")
    return json_response({"path": request.path})


@pytest.fixture
def raw_server() -> Iterator[HttpServer]:
    """An :class:`HttpServer` with a 1 KiB body limit and a handler that can raise."""
    loop = asyncio.new_event_loop()
    http = HttpServer(_failing, max_body=1024)
    loop.run_until_complete(http.start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield http
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.run_until_complete(http.close())
        loop.close()


def test_an_oversized_body_is_413_and_the_connection_closes(raw_server: HttpServer) -> None:
    with socket.create_connection(("127.0.0.1", raw_server.port)) as conn:
        conn.sendall(_request("POST", "/big", b"x" * 2048))
        status, _, _ = _read_response(conn)
        assert status == 413
        assert _closed(conn)


def test_a_handler_that_raises_is_500_and_the_server_stays_up(raw_server: HttpServer) -> None:
    with socket.create_connection(("127.0.0.1", raw_server.port)) as conn:
        conn.sendall(_request("GET", "/boom"))
        assert _read_response(conn)[0] == 500
        conn.sendall(_request("GET", "/fine"))
        status, _, body = _read_response(conn)
    assert (status, json.loads(body)) == (200, {"path": "/fine"})


def test_dropped_sends_part_of_the_announced_body_then_closes(server: FakeOpenAIServer) -> None:
    server.script(Dropped(after_bytes=7))
    with socket.create_connection(("127.0.0.1", server.port)) as conn:
        conn.sendall(_request("POST", "/v1/chat/completions", json.dumps(CHAT).encode()))
        status, headers, body = _read_response(conn)
        assert status == 200
        assert len(body) == 7 < int(headers["content-length"])
        assert _closed(conn)


def test_stop_ends_requests_in_flight(capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeOpenAIServer().start()
    fake.script(Slow(3600))
    conn = socket.create_connection(("127.0.0.1", fake.port))
    conn.sendall(_request("POST", "/v1/chat/completions", json.dumps(CHAT).encode()))
    while not fake.chat_requests:  # the request is being answered (slowly)
        threading.Event().wait(0.01)
    fake.stop()
    assert _closed(conn)
    conn.close()
    assert "Task was destroyed" not in capsys.readouterr().err


def test_tls_with_the_real_client(tmp_path: Path) -> None:
    certs = make_certificates(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certs.cert_file, certs.key_file)
    with FakeOpenAIServer(ssl_context=context) as fake:
        fake.script(Answer({"items": []}))
        assert fake.base_url.startswith("https://")
        trusted = ssl.create_default_context(cafile=str(certs.ca_file))
        with openai.DefaultHttpxClient(verify=trusted) as http:
            client = openai.OpenAI(base_url=fake.base_url, api_key="k", http_client=http)
            answer = client.chat.completions.create(model="m", messages=[])
        assert answer.choices[0].message.content == '{"items": []}'
        with openai.DefaultHttpxClient() as http:  # the system's trust store lacks our CA
            client = openai.OpenAI(
                base_url=fake.base_url, api_key="k", http_client=http, max_retries=0
            )
            with pytest.raises(openai.APIConnectionError):
                client.chat.completions.create(model="m", messages=[])


def test_the_stand_in_labels_every_answer_as_not_a_model() -> None:
    with stand_in_server() as stand_in:
        client = openai.OpenAI(base_url=stand_in.base_url, api_key="any", max_retries=0)
        listed = [m.id for m in client.models.list()]
        answer = client.chat.completions.create(
            model="gpt-anything", messages=[{"role": "user", "content": "hi"}]
        )
        vectors = client.embeddings.create(model="e5", input=["hi"])
    assert listed == [STAND_IN_MODEL]
    assert answer.model == STAND_IN_MODEL
    assert "NOT a real model" in STAND_IN_MODEL
    assert "NOT a model" in vectors.model
    assert not hasattr(stand_in, "chat_requests")  # the product server keeps no requests


def _python(code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONGOMEM_")}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )


def test_neither_the_stand_in_nor_the_doubles_need_aiohttp() -> None:
    done = _python(
        "import sys\n"
        "sys.modules['aiohttp'] = None  # any import of it now fails\n"
        "import openai\n"
        "from mongomem.adapters.llm import StandInLLM\n"
        "from mongomem.local.llm_stand_in import stand_in_server\n"
        "from mongomem.testing import FakeOpenAIServer, RateLimited\n"
        "with stand_in_server() as s, FakeOpenAIServer() as f:\n"
        "    f.script(RateLimited(retry_after=2))\n"
        "    print(openai.OpenAI(base_url=s.base_url, api_key='k').models.list().data[0].id)\n"
        "    try:\n"
        "        openai.OpenAI(base_url=f.base_url, api_key='k', max_retries=0)"
        ".chat.completions.create(model='m', messages=[])\n"
        "    except openai.RateLimitError as exc:\n"
        "        print(exc.response.headers['retry-after'])\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == [STAND_IN_MODEL, "2"]


def test_the_stand_in_process_serves_and_shows_its_banner() -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONGOMEM_")}
    with subprocess.Popen(
        [sys.executable, "-m", "mongomem.local.llm_stand_in", "--port", str(port)],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as process:
        assert process.stderr is not None
        try:
            first = process.stderr.readline()
            assert first.strip() == f"OpenAI-compatible server on http://127.0.0.1:{port}/v1"
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k")
            assert [m.id for m in client.models.list()] == [STAND_IN_MODEL]
        finally:
            process.terminate()
        rest = process.stderr.read()
    assert STAND_IN_BANNER.strip() in rest


def test_the_stand_in_mongomem_up_starts_is_the_product_one(tmp_path: Path) -> None:
    stand_in = LLMStandIn(port=free_port(), state_dir=tmp_path, cache_dir=tmp_path)
    assert stand_in._command()[1:3] == ["-m", "mongomem.local.llm_stand_in"]
    stand_in.start(timeout_s=30)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{stand_in.port}/v1", api_key="k")
        assert [m.id for m in client.models.list()] == [STAND_IN_MODEL]
    finally:
        stand_in.stop()
    assert STAND_IN_BANNER.strip() in stand_in.log_file.read_text()

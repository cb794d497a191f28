"""What a newcomer sees when the local servers cannot start: one clear line each."""

from __future__ import annotations

import socket
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mongomem.cli.main import main
from mongomem.errors import InfraError
from mongomem.local.servers import LocalKafka, LocalMongo, LocalServer, free_port, resolve_classpath


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield int(sock.getsockname()[1])


def test_busy_port_names_the_port_and_the_setting(tmp_path: Path, busy_port: int) -> None:
    mongo = LocalMongo(port=busy_port, state_dir=tmp_path, cache_dir=tmp_path / "cache")
    with pytest.raises(InfraError, match=rf"port {busy_port} .*MONGOMEM_INFRA_MONGO_PORT"):
        mongo.start()


def _path_without(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, keep: dict[str, str]) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, script in keep.items():
        tool = bin_dir / name
        tool.write_text("#!/bin/sh\n" + script)
        tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(bin_dir))


def test_missing_java_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _path_without(monkeypatch, tmp_path, {})
    kafka = LocalKafka(port=1, state_dir=tmp_path, cache_dir=tmp_path / "cache")
    with pytest.raises(InfraError, match=r"java was not found.*install it"):
        kafka._command()


def test_no_network_to_maven_central_is_explained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _path_without(
        monkeypatch,
        tmp_path,
        {"mvn": 'echo "[ERROR] Could not transfer artifact org.apache.kafka:kafka_2.13"; exit 1\n'},
    )
    with pytest.raises(InfraError, match=r"could not download .* Maven Central"):
        resolve_classpath("kafka", tmp_path / "cache")


def test_missing_maven_is_explained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _path_without(monkeypatch, tmp_path, {})
    with pytest.raises(InfraError, match=r"mvn was not found.*apt-get install maven"):
        resolve_classpath("mongo", tmp_path / "cache")


def test_cli_prints_one_line_not_a_traceback(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    busy_port: int,
) -> None:
    monkeypatch.delenv("MONGOMEM_MONGODB_URI", raising=False)
    monkeypatch.delenv("MONGOMEM_KAFKA_BOOTSTRAP", raising=False)
    monkeypatch.setenv("MONGOMEM_INFRA_MODE", "local")
    monkeypatch.setenv("MONGOMEM_INFRA_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("MONGOMEM_INFRA_MONGO_PORT", str(busy_port))
    assert main(["infra", "up"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("mongomem: port ")
    assert "Traceback" not in err


def test_cli_rejects_an_impossible_port(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MONGOMEM_INFRA_KAFKA_PORT", "70000")
    assert main(["infra", "status"]) == 1
    err = capsys.readouterr().err
    assert "MONGOMEM_INFRA_KAFKA_PORT" in err
    assert "Traceback" not in err


class _ExitsAtStart(LocalServer):
    def _command(self) -> list[str]:
        return [sys.executable, "-c", "import sys; print('cannot start'); sys.exit(3)"]

    def _ready(self) -> bool:
        return False


def test_a_server_that_exits_at_start_is_an_infra_error_with_its_code(tmp_path: Path) -> None:
    """It was an AttributeError: the process was forgotten before its code was read."""
    server = _ExitsAtStart(name="broken", port=free_port(), state_dir=tmp_path, cache_dir=tmp_path)
    with pytest.raises(InfraError, match=r"exited at start \(code 3\)(.|\n)*cannot start"):
        server.start(timeout_s=30)
    assert not server.pid_file.exists()

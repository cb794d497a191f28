"""The blocking spaces client is typed: its generated stub matches the protocol.

``mongomem.sdk.spaces.blocking`` derives its calls from ``SpacesTransport`` at
import; ``blocking.pyi`` gives a type checker the same calls. These tests fail
when the stub is out of date, or when the stub and the runtime class disagree
on which calls exist or what they take.
"""

from __future__ import annotations

import ast
import inspect

from mongomem.sdk.spaces import Spaces
from mongomem.sdk.spaces.blocking import SpaceCalls
from mongomem.sdk.spaces.codegen import STUB_PATH, blocking_stub, main
from mongomem.sdk.spaces.transport import SpacesTransport
from mongomem.sdk.spaces.wire import SPACE_OPERATIONS


def test_the_stub_is_what_the_generator_writes_now() -> None:
    assert STUB_PATH.read_text(encoding="utf-8") == blocking_stub(), (
        "run: python -m mongomem.sdk.spaces.codegen"
    )
    assert main(["--check"]) == 0


def test_the_stub_types_every_call_the_runtime_class_has_with_its_parameters() -> None:
    stub = ast.parse(STUB_PATH.read_text(encoding="utf-8"))
    (cls,) = [n for n in stub.body if isinstance(n, ast.ClassDef)]
    typed = {
        n.name: [a.arg for a in (*n.args.args, *n.args.kwonlyargs)]
        for n in cls.body
        if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")
    }
    assert set(typed) == set(SPACE_OPERATIONS)
    for name, parameters in typed.items():
        runtime = inspect.signature(getattr(SpaceCalls, name))
        assert list(runtime.parameters) == parameters, name
        assert runtime == inspect.signature(getattr(SpacesTransport, name))
        assert not inspect.iscoroutinefunction(getattr(Spaces, name))


def test_a_stale_stub_is_reported(tmp_path, monkeypatch, capsys) -> None:
    stale = tmp_path / "blocking.pyi"
    stale.write_text(blocking_stub().replace("-> Space:", "-> object:", 1), encoding="utf-8")
    monkeypatch.setattr("mongomem.sdk.spaces.codegen.STUB_PATH", stale)
    assert main(["--check"]) == 1
    assert "out of date" in capsys.readouterr().out

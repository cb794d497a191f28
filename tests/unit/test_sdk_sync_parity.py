"""The blocking SDK has every call of the async one, with the same parameters.

``BoundMemory``'s calls are derived from ``AsyncBoundMemory``'s methods, so a
method added to the async SDK must appear here too, blocking, with the same
signature and docstring; these tests fail when one is missing or differs.
"""

from __future__ import annotations

import inspect

from mongomem.sdk import AsyncBoundMemory, BoundMemory


def _public(cls: type) -> set[str]:
    return {n for n, v in vars(cls).items() if callable(v) and not n.startswith("_")}


def test_every_async_call_has_a_blocking_twin_with_the_same_parameters() -> None:
    """The Python SDK is both async and blocking, call for call (SPEC G1)."""
    calls = _public(AsyncBoundMemory)
    assert calls
    assert calls == _public(BoundMemory)
    for name in calls:
        blocking, original = getattr(BoundMemory, name), getattr(AsyncBoundMemory, name)
        assert not inspect.iscoroutinefunction(blocking), name
        assert inspect.iscoroutinefunction(original), name
        want = list(inspect.signature(original).parameters.values())[1:]
        got = list(inspect.signature(blocking).parameters.values())[1:]
        assert [(p.name, p.kind, p.default) for p in got] == [
            (p.name, p.kind, p.default) for p in want
        ], name
        if name != "wait_until_processed":
            assert blocking.__doc__ == original.__doc__, name


class _Recording:
    """An inner async memory that records what a blocking call passed on."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[object, ...], dict[str, object]]] = []

    def __getattr__(self, name: str):
        async def call(*args: object, **kwargs: object) -> str:
            self.calls.append((name, args, kwargs))
            return f"result of {name}"

        return call


class _Loop:
    """Stands in for the Memory: runs the coroutine to completion on a new loop."""

    def _call(self, coro):
        import asyncio

        return asyncio.run(coro)


def test_a_blocking_call_passes_its_arguments_on_and_returns_the_async_result() -> None:
    inner = _Recording()
    bound = BoundMemory.__new__(BoundMemory)
    bound._m = _Loop()  # type: ignore[assignment]
    bound._inner = inner  # type: ignore[assignment]
    assert bound.search_turns("q", 3, speaker="Ann") == "result of search_turns"  # type: ignore[comparison-overlap]
    assert inner.calls == [("search_turns", ("q", 3), {"speaker": "Ann"})]

"""Where the SDK's exports go and its imports come from: files, paths, line iterables.

:func:`write_export` writes an export's lines to a path or an open file as they
arrive and checks that the last one is the ``end`` line (an export cut short —
a dropped connection — raises :class:`~mongomem.errors.StorageError`, retriable).
:func:`read_lines` reads a path, an open file (text or binary) or an iterable of
lines (sync or async) one line at a time.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from pathlib import Path
from typing import IO, Any

from mongomem.errors import InputError, StorageError
from mongomem.ltm.export import ExportResult

__all__ = ["ExportSink", "ImportSource", "read_lines", "write_export"]

#: A path, or a file open for writing (text or binary).
ExportSink = str | os.PathLike[str] | IO[str] | IO[bytes]
#: A path, a file open for reading, or lines.
ImportSource = (
    str
    | os.PathLike[str]
    | IO[str]
    | IO[bytes]
    | Iterable[str | bytes]
    | AsyncIterable[str | bytes]
)


def _binary(out: IO[Any]) -> bool:
    import io

    return isinstance(out, io.BufferedIOBase | io.RawIOBase) or "b" in getattr(out, "mode", "")


async def write_export(
    project_id: str, user_id: str, lines: AsyncIterator[str], out: ExportSink
) -> ExportResult:
    """Write ``lines`` to ``out`` one at a time; what was written (see the module doc)."""
    if isinstance(out, str | os.PathLike):
        # a local file, written a buffered line at a time: no thread needed
        with Path(out).open("w", encoding="utf-8", newline="\n") as f:  # noqa: ASYNC230
            return await write_export(project_id, user_id, lines, f)
    binary = _binary(out)
    count, last = 0, ""
    async for line in lines:
        out.write(line.encode("utf-8") if binary else line)  # type: ignore[arg-type]
        count, last = count + 1, line
    try:
        end = json.loads(last) if last else {}
    except ValueError:
        end = {}
    if end.get("kind") != "end":
        raise StorageError(f"the export was cut short after {count} lines; export again")
    return ExportResult(
        project_id=project_id,
        user_id=user_id,
        lines=count,
        versions=int(end["versions"]),
        decisions=int(end["decisions"]),
    )


async def read_lines(source: ImportSource) -> AsyncIterator[str | bytes]:
    """The lines of ``source`` (see the module doc)."""
    if isinstance(source, str | os.PathLike):
        try:  # a local file, read a buffered line at a time
            f = Path(source).open("rb")  # noqa: ASYNC230, SIM115 - closed by the with below
        except OSError as exc:
            raise InputError(f"cannot read {source}: {exc.strerror}", field="source") from None
        with f:
            for raw in f:
                yield raw
        return
    if isinstance(source, AsyncIterable):
        async for item in source:
            yield item
        return
    if isinstance(source, bytes | bytearray):
        raise InputError("pass a path, an open file or lines, not one bytes value", field="source")
    for item in source:
        yield item

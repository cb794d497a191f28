"""Input values → the texts that are embedded as search keys (SPEC H5).

* A plain text value is its own key text.
* A text longer than the space's ``long_text_chars`` is **compressed** by the
  :class:`Summariser` first, so the key captures its meaning rather than
  whatever fits an embedding model's window.
* A :class:`~mongomem.spaces.models.FileInput` is **summarised** to text; the
  summary is the key. The stored input keeps the file's name, its SHA-256 and
  the summary, not the file's text.

:class:`LLMSummariser` asks any :class:`~mongomem.adapters.llm.LLM` (an OpenAI-compatible
endpoint) for ``{"summary": ...}``. No summariser is needed while no file or
long text is given; when one is needed and none is configured, the call
fails with :class:`~mongomem.errors.NotReady` before anything is stored.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, Field

from mongomem.errors import InputError
from mongomem.spaces.models import MAX_ARGUMENTS, MAX_TEXT_CHARS, FileInput, check_argument

if TYPE_CHECKING:  # the OpenAI client loads when a summariser is made
    from mongomem.adapters.llm import LLM

__all__ = [
    "SCHEMA_NAME",
    "InputValue",
    "LLMSummariser",
    "Summariser",
    "check_inputs",
    "derive_key_texts",
]

SCHEMA_NAME = "space_key_summary"
InputValue = str | FileInput
Purpose = Literal["file", "compress"]


class Summariser(Protocol):
    """Turns a file's text or a very long text into a short text that keeps its meaning."""

    async def summarise(self, text: str, *, purpose: Purpose, name: str | None = None) -> str: ...


class _Summary(BaseModel):
    summary: str = Field(min_length=1, max_length=4000)


_INSTRUCTIONS: dict[Purpose, str] = {
    "file": (
        "Summarise the file below in at most 120 words. Keep names, numbers, and what the "
        "file is about; the summary is used as a search key. Answer as JSON: "
        '{"summary": "..."}.'
    ),
    "compress": (
        "Compress the text below to at most 120 words that keep its meaning, its names and "
        'its numbers; the result is used as a search key. Answer as JSON: {"summary": "..."}.'
    ),
}


class LLMSummariser:
    """A :class:`Summariser` on the project's LLM client (structured output)."""

    def __init__(self, llm: LLM) -> None:
        self._llm = llm

    @property
    def name(self) -> str:
        return self._llm.name

    async def summarise(self, text: str, *, purpose: Purpose, name: str | None = None) -> str:
        header = f"File name: {name}\n\n" if name else ""
        result = await self._llm.structured(
            [
                {"role": "system", "content": _INSTRUCTIONS[purpose]},
                {"role": "user", "content": header + text},
            ],
            _Summary,
            schema_name=SCHEMA_NAME,
        )
        return result.value.summary.strip()


def check_inputs(inputs: Any, *, field: str = "inputs") -> dict[str, InputValue]:
    """Validated input arguments (name → text or file), or an :class:`InputError`."""
    if not isinstance(inputs, Mapping) or not inputs:
        raise InputError(f"{field} must be a non-empty mapping of argument → value", field=field)
    if len(inputs) > MAX_ARGUMENTS:
        raise InputError(f"{field}: at most {MAX_ARGUMENTS} arguments", field=field)
    out: dict[str, InputValue] = {}
    for name, value in inputs.items():
        where = f"{field}.{name}"
        try:
            check_argument(name if isinstance(name, str) else "")
        except ValueError as exc:
            raise InputError(f"{field}: {exc}", field=field) from exc
        if isinstance(value, FileInput):
            out[name] = value
        elif isinstance(value, str):
            if not value.strip():
                raise InputError(f"{where} must not be blank", field=where)
            if len(value) > MAX_TEXT_CHARS:
                raise InputError(f"{where} is longer than {MAX_TEXT_CHARS} characters", field=where)
            out[name] = value
        else:
            raise InputError(f"{where} must be text or a FileInput", field=where)
    return out


async def derive_key_texts(
    inputs: Mapping[str, InputValue],
    *,
    long_text_chars: int,
    summariser: Callable[[], Awaitable[Summariser]],
) -> tuple[dict[str, Any], dict[str, str]]:
    """``(stored_inputs, key_texts)`` for validated inputs (see the module docstring)."""
    stored: dict[str, Any] = {}
    texts: dict[str, str] = {}
    for name, value in inputs.items():
        if isinstance(value, FileInput):
            summary = await (await summariser()).summarise(
                value.text, purpose="file", name=value.name
            )
            digest = hashlib.sha256(value.text.encode()).hexdigest()
            stored[name] = {"file": value.name, "sha256": digest, "summary": summary}
            texts[name] = summary
        elif len(value) > long_text_chars:
            stored[name] = value
            texts[name] = await (await summariser()).summarise(value, purpose="compress")
        else:
            stored[name] = value
            texts[name] = value
    return stored, texts

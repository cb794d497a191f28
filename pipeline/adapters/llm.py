"""The LLM behind one narrow protocol: structured output from chat messages.

:class:`LLM` is all the extraction stage sees. :class:`OpenAILLM` reaches any
OpenAI-compatible endpoint through the official ``openai`` client and asks for
JSON that fits a JSON schema derived from a pydantic model, then validates the
answer against that model. How it asks is ``MONGOMEM_LLM_STRUCTURED_OUTPUT``:

===============  ==============================================================
mode             request
===============  ==============================================================
``json_schema``  ``response_format: {"type": "json_schema", ...}`` (strict)
``json_object``  ``response_format: {"type": "json_object", "schema": ...}``
                 (llama.cpp / llama-cpp-python style), the schema also stated
                 in the system message for servers that only promise JSON
``tools``        one tool whose parameters are the schema, forced with
                 ``tool_choice``; its arguments are the answer
``prompt``       no ``response_format``: the schema in the system message; an
                 invalid answer gets one repair request, then
                 :class:`LLMOutputInvalid`
``auto``         ``json_schema``; when the endpoint refuses the request *and
                 names the response format or tools* (HTTP 400 / 422 / 500),
                 the next mode in that order, once each. The mode that answers
                 is remembered for the process (per endpoint and model) and
                 logged once.
===============  ==============================================================

Every openai error is translated here:

=====================================  =================================
what happened                          raised
=====================================  =================================
HTTP 429                               :class:`LLMRateLimited` (``retry_after``
                                       from ``Retry-After`` / ``retry-after-ms``)
HTTP 5xx, 408, 409, timeout, refused   :class:`LLMUnavailable`
HTTP 401, 403, 404 (key, model, URL)   :class:`ConfigError` (final: the stage
                                       stops rather than dead-letter everything)
the configured mode is refused         :class:`ConfigError` (every call would
(not ``auto``)                         fail the same way; names the setting)
other HTTP 4xx (request refused)       :class:`ExtractionError` (bounded retries,
                                       then dead letter)
not JSON, fails the schema, truncated  :class:`LLMOutputInvalid`
=====================================  =================================

The client never retries by itself (``max_retries=0``): the stage owns the
retry policy, bounded by ``ExtractionSettings.max_attempts``. Each result
carries the token usage and the latency of the call; a :class:`CallMeter`
hears of every request *before* it is sent and of every answer's usage.
"""

from __future__ import annotations

import copy
import json
import logging
import re
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Generic, Literal, Protocol, TypeVar, cast, get_args

import openai
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam
from pydantic import BaseModel, ValidationError

from mongomem.errors import (
    ConfigError,
    ExtractionError,
    LLMOutputInvalid,
    LLMRateLimited,
    LLMUnavailable,
    NotReady,
)
from mongomem.settings import LLMSettings

__all__ = [
    "CALL_HEADER",
    "DEFAULT_BASE_URL",
    "FALLBACK_ORDER",
    "LLM",
    "CallMeter",
    "ChatMessage",
    "LLMResult",
    "LLMUsage",
    "Mode",
    "OpenAILLM",
    "StandInLLM",
    "forget_working_modes",
    "is_format_refusal",
    "make_llm",
    "parse_retry_after",
    "schema_instruction",
    "strict_json_schema",
]

log = logging.getLogger(__name__)

#: The endpoint the ``openai`` client uses when only a key is configured.
DEFAULT_BASE_URL = "https://api.openai.com/v1"

M = TypeVar("M", bound=BaseModel)

ChatMessage = Mapping[str, str]

#: A way of asking for structured output (``auto`` is a choice among these).
Mode = Literal["json_schema", "json_object", "tools", "prompt"]

#: The order ``auto`` tries the modes in.
FALLBACK_ORDER: tuple[Mode, ...] = get_args(Mode)


@dataclass(frozen=True)
class LLMUsage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class LLMResult(Generic[M]):
    """A validated answer, with what it cost."""

    value: M
    model: str
    usage: LLMUsage
    latency_s: float


#: The header each request carries with its call id (the request's row in ``llm_usage``).
CALL_HEADER = "X-Mongomem-Call"


class CallMeter(Protocol):
    """Hears of every request to the endpoint, so usage can be accounted per call.

    ``call_started`` is awaited *before* the request is sent and returns the
    call's id, sent with the request as the :data:`CALL_HEADER` header; if it
    raises, the request is not sent (no request without its record). Then
    exactly one of ``answered`` (an answer arrived, also one then rejected as
    invalid) or ``failed`` (the request failed: timeout, refusal, HTTP error)
    is awaited with that id, unless the process dies first: a call cut off by
    a kill stays recorded as started, never finished.
    """

    async def call_started(self) -> str: ...

    async def answered(self, call_id: str, usage: LLMUsage, model: str) -> None: ...

    async def failed(self, call_id: str, error: str) -> None: ...


class LLM(Protocol):
    """Asks for structured output.

    Raises :class:`~mongomem.errors.ExtractionError` (and its subclasses) for
    anything that may pass on another try or with another input, and
    :class:`~mongomem.errors.ConfigError` when the endpoint rejects the
    configuration itself (key, model, URL).
    """

    @property
    def name(self) -> str: ...

    async def structured(
        self,
        messages: Sequence[ChatMessage],
        schema: type[M],
        *,
        schema_name: str,
        meter: CallMeter | None = None,
    ) -> LLMResult[M]:
        """Ask for JSON fitting ``schema``; ``meter`` hears of every request and answer."""
        ...

    async def close(self) -> None: ...


#: Keywords dropped from the schema sent to the endpoint: strict structured
#: output rejects them on some providers. The answer is still validated
#: against the full pydantic model, constraints included.
_UNSENT_KEYWORDS = frozenset(
    {"title", "default", "minLength", "maxLength", "pattern", "minItems", "maxItems", "format"}
)


def strict_json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema of ``model`` in the form strict structured output accepts.

    Every object gets ``additionalProperties: false`` and lists all of its
    properties as required (optional fields stay nullable); titles, defaults
    and length/pattern constraints are left out (see ``_UNSENT_KEYWORDS``).
    """

    def fix(node: Any) -> Any:
        if isinstance(node, list):
            return [fix(value) for value in node]
        if not isinstance(node, dict):
            return node
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _UNSENT_KEYWORDS:
                continue
            if key in ("properties", "$defs") and isinstance(value, dict):
                out[key] = {name: fix(sub) for name, sub in value.items()}
            else:
                out[key] = fix(value)
        if out.get("type") == "object" and "properties" in out:
            out["additionalProperties"] = False
            out["required"] = list(out["properties"])
        return out

    fixed: dict[str, Any] = fix(copy.deepcopy(model.model_json_schema()))
    return fixed


def parse_retry_after(headers: Mapping[str, str], now: datetime | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or HTTP date)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    raw_ms = lowered.get("retry-after-ms")
    if raw_ms is not None:
        try:
            return max(0.0, float(raw_ms) / 1000.0)
        except ValueError:
            pass
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def _translate(exc: openai.OpenAIError, where: str) -> Exception:
    if isinstance(exc, openai.APITimeoutError):
        return LLMUnavailable(f"{where}: timed out")
    if isinstance(exc, openai.APIConnectionError):
        return LLMUnavailable(f"{where}: cannot connect ({exc})")
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        if status == 429:
            retry_after = parse_retry_after(dict(exc.response.headers))
            return LLMRateLimited(f"{where}: rate limited (429)", retry_after=retry_after)
        if status >= 500 or status in (408, 409):
            return LLMUnavailable(f"{where}: HTTP {status}: {exc.message}")
        if status in (401, 403, 404):
            return ConfigError(
                f"{where} refused the configuration (HTTP {status}: {exc.message}); "
                "check MONGOMEM_LLM_BASE_URL, MONGOMEM_LLM_API_KEY and MONGOMEM_LLM_MODEL"
            )
        return ExtractionError(f"{where}: the request was refused: HTTP {status}: {exc.message}")
    return LLMUnavailable(f"{where}: {type(exc).__name__}: {exc}")


#: Words in an error body that say the *response format* was refused, per mode.
_FORMAT_WORDS = re.compile(
    r"response_format|response format|json_schema|json_object|'text'|structured output",
    re.IGNORECASE,
)
_TOOL_WORDS = re.compile(r"tool_choice|\btools?\b|function", re.IGNORECASE)


def is_format_refusal(exc: openai.OpenAIError, mode: Mode) -> bool:
    """Whether ``exc`` refuses how ``mode`` asked for structure (not the request as such).

    HTTP 400, 422 or 500 whose body names the response format (``json_schema``,
    ``json_object``, ``'text'`` …), or the tools for the ``tools`` mode. The
    ``prompt`` mode sends neither, so nothing it meets is a format refusal.
    """
    if mode == "prompt" or not isinstance(exc, openai.APIStatusError):
        return False
    if exc.status_code not in (400, 422, 500):
        return False
    text = f"{exc.message} {json.dumps(exc.body, default=str)}"
    words = _TOOL_WORDS if mode == "tools" else _FORMAT_WORDS
    return words.search(text) is not None


def schema_instruction(schema_name: str, schema: Mapping[str, Any]) -> str:
    """The system-message text that states the schema (``json_object`` and ``prompt``)."""
    return (
        "Answer with one JSON object and nothing else (no prose, no code fence). It must "
        f'fit this JSON schema "{schema_name}":\n'
        f"{json.dumps(schema, ensure_ascii=False, separators=(',', ':'))}"
    )


def _with_instruction(messages: Sequence[ChatMessage], instruction: str) -> list[dict[str, str]]:
    """``messages`` with ``instruction`` appended to the first system message (or one added)."""
    out = [dict(m) for m in messages]
    for message in out:
        if message.get("role") == "system":
            message["content"] = f"{message.get('content', '')}\n\n{instruction}"
            return out
    return [{"role": "system", "content": instruction}, *out]


_FENCE = re.compile(r"^\s*```[a-zA-Z0-9_-]*\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)


def _lenient_json(text: str) -> Any:
    """JSON from a chatty answer: a code fence is unwrapped, prose around one object dropped."""
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1)
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        first, last = text.find("{"), text.rfind("}")
        if first < 0 or last <= first:
            raise
        return json.loads(text[first : last + 1])


class _Refused(Exception):
    """The endpoint refused how a mode asked for structure (handled inside OpenAILLM)."""

    def __init__(self, mode: Mode, cause: openai.APIStatusError) -> None:
        super().__init__(f"{mode} refused: HTTP {cause.status_code}: {cause.message}")
        self.mode = mode
        self.cause = cause


#: The mode that answered, per (endpoint, model), for the life of the process.
_WORKING: dict[tuple[str, str], Mode] = {}


def forget_working_modes() -> None:
    """Forget the modes ``auto`` settled on (tests; or after an endpoint was replaced)."""
    _WORKING.clear()


class OpenAILLM:
    """Structured output from an OpenAI-compatible endpoint via ``openai.AsyncOpenAI``."""

    def __init__(
        self,
        settings: LLMSettings,
        *,
        client: openai.AsyncOpenAI | None = None,
        base_url: str | None = None,
    ) -> None:
        url = base_url or settings.base_url or DEFAULT_BASE_URL
        if client is None:
            if settings.api_key is None:
                raise NotReady("no LLM API key: set MONGOMEM_LLM_API_KEY")
            client = openai.AsyncOpenAI(
                api_key=settings.api_key.get_secret_value(),
                base_url=url,
                timeout=settings.timeout_s,
                max_retries=0,
            )
        self._client = client
        self._model = settings.model
        self._url = url
        self._setting = settings.structured_output

    @property
    def name(self) -> str:
        return f"openai-compatible:{self._model}@{self._url}"

    @property
    def model(self) -> str:
        """The model asked for (part of the key of a stored extraction answer)."""
        return self._model

    @property
    def structured_output(self) -> str:
        """The configured structured-output mode (``auto`` or one of :data:`Mode`)."""
        return self._setting

    @property
    def mode(self) -> Mode:
        """The mode the next call starts with (``auto``: the one remembered, if any)."""
        if self._setting != "auto":
            return self._setting
        return _WORKING.get((self._url, self._model), FALLBACK_ORDER[0])

    async def structured(
        self,
        messages: Sequence[ChatMessage],
        schema: type[M],
        *,
        schema_name: str,
        meter: CallMeter | None = None,
    ) -> LLMResult[M]:
        where = f"LLM {self._model} at {self._url}"
        mode = self.mode
        while True:
            try:
                result = await self._ask(mode, messages, schema, schema_name, meter, where)
            except _Refused as refused:
                nxt = self._after(mode)
                if nxt is None:
                    raise ConfigError(
                        f"{where} refuses structured output as {mode} "
                        f"(HTTP {refused.cause.status_code}: {refused.cause.message}); set "
                        "MONGOMEM_LLM_STRUCTURED_OUTPUT to a mode it supports, or to auto"
                    ) from refused.cause
                log.warning(
                    "%s refused structured output as %s (HTTP %d); trying %s",
                    where,
                    mode,
                    refused.cause.status_code,
                    nxt,
                )
                mode = nxt
                continue
            return result

    def _after(self, mode: Mode) -> Mode | None:
        """The mode ``auto`` tries after ``mode`` was refused (``None``: no fallback)."""
        if self._setting != "auto":
            return None
        index = FALLBACK_ORDER.index(mode)
        return FALLBACK_ORDER[index + 1] if index + 1 < len(FALLBACK_ORDER) else None

    def _remember(self, mode: Mode, where: str) -> None:
        if self._setting != "auto":
            return
        key = (self._url, self._model)
        if _WORKING.get(key) != mode:
            _WORKING[key] = mode
            log.info("%s: structured output as %s (remembered for this process)", where, mode)

    async def _ask(
        self,
        mode: Mode,
        messages: Sequence[ChatMessage],
        schema: type[M],
        schema_name: str,
        meter: CallMeter | None,
        where: str,
    ) -> LLMResult[M]:
        started = time.perf_counter()
        sent = strict_json_schema(schema)
        options: dict[str, Any] = {}
        chat: list[dict[str, str]] = [dict(m) for m in messages]
        if mode == "json_schema":
            options["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": schema_name, "schema": sent, "strict": True},
            }
        elif mode == "json_object":
            chat = _with_instruction(messages, schema_instruction(schema_name, sent))
            options["response_format"] = {"type": "json_object", "schema": sent}
        elif mode == "tools":
            options["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": schema_name,
                        "description": f"Record the answer as {schema_name}.",
                        "parameters": sent,
                    },
                }
            ]
            options["tool_choice"] = {"type": "function", "function": {"name": schema_name}}
        else:
            chat = _with_instruction(messages, schema_instruction(schema_name, sent))
        response = await self._call(mode, chat, options, meter, where)
        self._remember(mode, where)  # accepted, whether or not the answer turns out valid
        try:
            value = self._read(mode, response, schema, schema_name, where)
        except LLMOutputInvalid as invalid:
            if mode != "prompt":
                raise
            content = (response.choices[0].message.content or "") if response.choices else ""
            problem = str(invalid).removeprefix(f"{where}: ")
            repair = [
                *chat,
                {"role": "assistant", "content": content},
                {
                    "role": "user",
                    "content": (
                        f"That answer is invalid: {problem}. Answer again with only the "
                        f'JSON object that fits the schema "{schema_name}".'
                    ),
                },
            ]
            response = await self._call(mode, repair, options, meter, where)
            value = self._read(mode, response, schema, schema_name, where)
        return LLMResult(
            value=value,
            model=response.model or self._model,
            usage=_usage_of(response),
            latency_s=time.perf_counter() - started,
        )

    async def _call(
        self,
        mode: Mode,
        chat: list[dict[str, str]],
        options: dict[str, Any],
        meter: CallMeter | None,
        where: str,
    ) -> ChatCompletion:
        call_id = await meter.call_started() if meter is not None else None
        headers = {CALL_HEADER: call_id} if call_id else None
        try:
            response: ChatCompletion = await self._client.chat.completions.create(
                model=self._model,
                messages=cast("list[ChatCompletionMessageParam]", chat),
                temperature=0,
                stream=False,
                extra_headers=headers,
                **options,
            )
        except openai.OpenAIError as exc:
            if meter is not None and call_id is not None:
                await meter.failed(call_id, _failure(exc))
            if isinstance(exc, openai.APIStatusError) and is_format_refusal(exc, mode):
                raise _Refused(mode, exc) from exc
            raise _translate(exc, where) from exc
        if meter is not None and call_id is not None:
            await meter.answered(call_id, _usage_of(response), response.model or self._model)
        return response

    def _read(
        self, mode: Mode, response: ChatCompletion, schema: type[M], schema_name: str, where: str
    ) -> M:
        if not response.choices:
            raise _invalid(where, "the answer has no choices")
        choice = response.choices[0]
        if choice.finish_reason == "length":
            raise _invalid(where, "the answer was cut off (finish_reason=length)")
        refusal = getattr(choice.message, "refusal", None)
        if refusal:
            raise _invalid(where, f"the model refused: {refusal[:200]}")
        text = choice.message.content
        if mode == "tools":
            calls = [c for c in choice.message.tool_calls or [] if c.type == "function"]
            if calls:
                text = calls[0].function.arguments
        if not text:
            raise _invalid(where, "the answer is empty")
        try:
            data = _lenient_json(text) if mode in ("prompt", "tools") else json.loads(text)
        except json.JSONDecodeError as exc:
            raise _invalid(where, f"the answer is not JSON: {exc}") from exc
        try:
            return schema.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}"
                for e in exc.errors()[:5]
            )
            raise _invalid(where, f"the answer does not fit {schema_name}: {problems}") from exc

    async def close(self) -> None:
        await self._client.close()


def _failure(exc: openai.OpenAIError) -> str:
    """How a request failed, in a few words (the ``outcome`` of its usage record)."""
    if isinstance(exc, openai.APIStatusError):
        return f"http-{exc.status_code}"
    if isinstance(exc, openai.APITimeoutError):
        return "timeout"
    if isinstance(exc, openai.APIConnectionError):
        return "connection"
    return type(exc).__name__


def _usage_of(response: ChatCompletion) -> LLMUsage:
    return LLMUsage(
        prompt_tokens=response.usage.prompt_tokens if response.usage else 0,
        completion_tokens=response.usage.completion_tokens if response.usage else 0,
    )


def _invalid(where: str, detail: str) -> LLMOutputInvalid:
    return LLMOutputInvalid(f"{where}: {detail}")


class StandInLLM(OpenAILLM):
    """The rule-based demo stand-in (NOT a model) behind a loopback HTTP server.

    The real ``openai`` client talks to :func:`mongomem.local.llm_stand_in.stand_in_server`
    (:class:`~mongomem.local.llm_stand_in.StandInResponder` on a local
    OpenAI-compatible server), so the stage's code path is the production one.
    The start is announced loudly on stderr.

    The stand-in is a plug-in of this adapter, picked by settings
    (``MONGOMEM_LLM_USE_STAND_IN``): it lives with the local runner, which also
    serves it as a process of its own, and is imported only when it is used (the
    one import of ``mongomem.local`` below the surfaces; ``.importlinter`` names it).
    """

    def __init__(self, settings: LLMSettings) -> None:
        from mongomem.local.llm_stand_in import STAND_IN_BANNER, STAND_IN_MODEL, stand_in_server

        self._server = stand_in_server().start()
        print(STAND_IN_BANNER, file=sys.stderr, flush=True)
        log.warning("LLM STAND-IN in use at %s: NOT a real model", self._server.base_url)
        local = settings.model_copy(
            update={"model": STAND_IN_MODEL, "api_key": None, "base_url": None}
        )
        client = openai.AsyncOpenAI(
            api_key="stand-in",
            base_url=self._server.base_url,
            timeout=local.timeout_s,
            max_retries=0,
        )
        super().__init__(local, client=client, base_url=self._server.base_url)

    @property
    def name(self) -> str:
        return self._model  # STAND_IN_MODEL, set in __init__

    async def close(self) -> None:
        await super().close()
        self._server.stop()


def make_llm(settings: LLMSettings) -> LLM:
    """The configured endpoint; the stand-in only when enabled and no endpoint is set.

    Raises :class:`NotReady` naming what is missing.
    """
    if settings.base_url is not None or settings.api_key is not None:
        if settings.api_key is None:
            raise NotReady(f"no LLM API key for {settings.base_url}: set MONGOMEM_LLM_API_KEY")
        if settings.use_stand_in:
            log.warning(
                "an LLM endpoint is configured (%s): no in-process stand-in is started",
                settings.base_url,
            )
        return OpenAILLM(settings)
    if settings.use_stand_in:
        return StandInLLM(settings)
    raise NotReady(
        "no LLM endpoint: set MONGOMEM_LLM_BASE_URL and MONGOMEM_LLM_API_KEY "
        "(or MONGOMEM_LLM_USE_STAND_IN=true for the rule-based demo stand-in, NOT a model)"
    )

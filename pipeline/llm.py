"""The LLM behind one narrow protocol: structured output from chat messages.

:class:`LLM` is all the extraction stage sees. :class:`OpenAILLM` reaches any
OpenAI-compatible endpoint through the official ``openai`` client and asks for
JSON that fits a JSON schema derived from a pydantic model, then validates the
answer against that model. Every openai error is translated here:

=====================================  =================================
what happened                          raised
=====================================  =================================
HTTP 429                               :class:`LLMRateLimited` (``retry_after``
                                       from ``Retry-After`` / ``retry-after-ms``)
HTTP 5xx, 408, 409, timeout, refused   :class:`LLMUnavailable`
HTTP 401, 403, 404 (key, model, URL)   :class:`ConfigError` (final: the stage
                                       stops rather than dead-letter everything)
other HTTP 4xx (request refused)       :class:`ExtractionError` (bounded retries,
                                       then dead letter)
not JSON, fails the schema, truncated  :class:`LLMOutputInvalid`
=====================================  =================================

The client never retries by itself (``max_retries=0``): the stage owns the
retry policy, bounded by ``ExtractionSettings.max_attempts``. Each result
carries the token usage and the latency of the call.
"""

from __future__ import annotations

import copy
import json
import logging
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Generic, Protocol, TypeVar, cast

import openai
from openai.types.chat import ChatCompletionMessageParam
from openai.types.shared_params import ResponseFormatJSONSchema
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
    "DEFAULT_BASE_URL",
    "LLM",
    "ChatMessage",
    "LLMResult",
    "LLMUsage",
    "OpenAILLM",
    "StandInLLM",
    "make_llm",
    "parse_retry_after",
    "strict_json_schema",
]

log = logging.getLogger(__name__)

#: The endpoint the ``openai`` client uses when only a key is configured.
DEFAULT_BASE_URL = "https://api.openai.com/v1"

M = TypeVar("M", bound=BaseModel)

ChatMessage = Mapping[str, str]


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
        spent: list[LLMUsage] | None = None,
    ) -> LLMResult[M]:
        """Ask for JSON fitting ``schema``; ``spent`` gets the usage of every answer,
        also of one that is then rejected as invalid."""
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

    @property
    def name(self) -> str:
        return f"openai-compatible:{self._model}@{self._url}"

    async def structured(
        self,
        messages: Sequence[ChatMessage],
        schema: type[M],
        *,
        schema_name: str,
        spent: list[LLMUsage] | None = None,
    ) -> LLMResult[M]:
        where = f"LLM {self._model} at {self._url}"
        started = time.perf_counter()
        chat: list[ChatCompletionMessageParam] = [
            cast("ChatCompletionMessageParam", dict(m)) for m in messages
        ]
        response_format: ResponseFormatJSONSchema = {
            "type": "json_schema",
            "json_schema": {
                "name": schema_name,
                "schema": strict_json_schema(schema),
                "strict": True,
            },
        }
        try:
            response = await self._client.chat.completions.create(
                model=self._model,
                messages=chat,
                temperature=0,
                response_format=response_format,
            )
        except openai.OpenAIError as exc:
            raise _translate(exc, where) from exc
        latency = time.perf_counter() - started
        usage = LLMUsage(
            prompt_tokens=response.usage.prompt_tokens if response.usage else 0,
            completion_tokens=response.usage.completion_tokens if response.usage else 0,
        )
        if spent is not None:
            spent.append(usage)
        if not response.choices:
            raise LLMOutputInvalid(f"{where}: the answer has no choices")
        choice = response.choices[0]
        if choice.finish_reason == "length":
            raise LLMOutputInvalid(f"{where}: the answer was cut off (finish_reason=length)")
        refusal = getattr(choice.message, "refusal", None)
        if refusal:
            raise LLMOutputInvalid(f"{where}: the model refused: {refusal[:200]}")
        content = choice.message.content
        if not content:
            raise LLMOutputInvalid(f"{where}: the answer is empty")
        try:
            data = json.loads(content)
        except json.JSONDecodeError as exc:
            raise LLMOutputInvalid(f"{where}: the answer is not JSON: {exc}") from exc
        try:
            value = schema.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}"
                for e in exc.errors()[:5]
            )
            raise LLMOutputInvalid(
                f"{where}: the answer does not fit {schema_name}: {problems}"
            ) from exc
        return LLMResult(
            value=value, model=response.model or self._model, usage=usage, latency_s=latency
        )

    async def close(self) -> None:
        await self._client.close()


class StandInLLM(OpenAILLM):
    """The rule-based demo stand-in (NOT a model) behind a loopback HTTP server.

    The real ``openai`` client talks to :class:`~mongomem.testing.FakeOpenAIServer`
    with :class:`~mongomem.testing.StandInResponder`, so the stage's code path
    is the production one. The start is announced loudly on stderr.
    """

    def __init__(self, settings: LLMSettings) -> None:
        from mongomem.testing import STAND_IN_BANNER, STAND_IN_MODEL, FakeOpenAIServer
        from mongomem.testing.stand_in import StandInResponder

        self._server = FakeOpenAIServer(StandInResponder(), model=STAND_IN_MODEL).start()
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
        return "STAND-IN rule-based responder (NOT a real model)"

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

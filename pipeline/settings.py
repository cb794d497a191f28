"""Settings: one pydantic-settings root, nested per dependency.

Everything is read from the environment with the ``MONGOMEM_`` prefix (and an
optional ``.env`` file); nothing else in mongomem reads ``os.environ``. A bad
value fails at start with a :class:`~mongomem.errors.ConfigError` naming the
variable. ``project-config.yaml`` (see :mod:`mongomem.project_config`) is read
when ``MONGOMEM_PROJECT_CONFIG`` points at it.

=====================================  ==========================================
variable                               meaning
=====================================  ==========================================
MONGOMEM_MONGODB_URI                   MongoDB URI; unset → local server selection
MONGOMEM_MONGODB_DATABASE              database name (``mongomem``)
MONGOMEM_KAFKA_BOOTSTRAP               bootstrap servers; unset → local selection
MONGOMEM_KAFKA_TOPIC_PREFIX            prefix of every topic (``mongomem``)
MONGOMEM_KAFKA_PARTITIONS              partitions per topic (6)
MONGOMEM_KAFKA_REPLICATION_FACTOR      replication factor (1)
MONGOMEM_WINDOW_MAX_MESSAGES           turns that close a window (20)
MONGOMEM_WINDOW_IDLE_TIMEOUT_S         idle seconds that close a window (300)
MONGOMEM_WINDOW_STATE_TTL_S            retire a quiet session's state after (604800)
MONGOMEM_SPACES_ENCRYPTION_KEY         AES-256-GCM key of encrypted spaces (base64)
MONGOMEM_ENABLED_EXTRACTIONS           comma list of memory types to extract
MONGOMEM_LLM_BASE_URL / _API_KEY       OpenAI-compatible endpoint and key
MONGOMEM_LLM_MODEL / _TIMEOUT_S        model name, per-call timeout
MONGOMEM_LLM_STRUCTURED_OUTPUT         ``auto`` | ``json_schema`` | ``json_object`` |
                                       ``tools`` | ``prompt`` (see mongomem.adapters.llm)
MONGOMEM_LLM_PRICES                    JSON price table: model → input/output
                                       price per 1M tokens (cost in ``status``)
MONGOMEM_EMBEDDING_PROVIDER            ``openai`` | ``local`` | ``stand-in``
MONGOMEM_EMBEDDING_MODEL / _DIMENSIONS embedding model and vector size
MONGOMEM_PROJECT_CONFIG                path of project-config.yaml
MONGOMEM_STM_MAX_CONTENT_BYTES         largest turn content, UTF-8 bytes (256 KiB)
MONGOMEM_STM_MAX_METADATA_BYTES        largest turn metadata, as JSON (64 KiB)
MONGOMEM_STM_WATCHER_BATCH_MAX         turns that make a watcher flush due (500;
                                       held while Kafka acknowledges the last one)
MONGOMEM_STM_WATCHER_WATERMARK_        how often the watcher publishes a watermark
INTERVAL_S                             into every turns partition (1)
MONGOMEM_STM_WATCHER_WATERMARK_        how late a turn may reach the change stream
LATENESS_S                             after its created_at (2); idle closes wait it
=====================================  ==========================================
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import re
from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from mongomem.errors import ConfigError

__all__ = [
    "LOCAL_PIPELINE_ENV",
    "LOCAL_PIPELINE_HINT",
    "RETIRED_VARIABLES",
    "EmbeddingSettings",
    "ExtractionSettings",
    "InfraSettings",
    "KafkaSettings",
    "LLMSettings",
    "McpSettings",
    "ModelPrice",
    "MongoSettings",
    "ReconcileSettings",
    "RerankSettings",
    "ServiceSettings",
    "Settings",
    "SpacesSettings",
    "StmSettings",
    "StructuredOutput",
    "WatcherSettings",
    "WindowingSettings",
    "known_variables",
    "load_settings",
    "local_pipeline_env",
    "overlay",
    "resolve_settings",
    "unknown_variables",
    "with_local_pipeline",
]

TYPE_NAME = re.compile(r"[a-z][a-z0-9_-]{0,63}")


def _group(prefix: str) -> SettingsConfigDict:
    return SettingsConfigDict(
        env_prefix=prefix,
        env_file=".env",
        extra="ignore",
        frozen=True,
        populate_by_name=True,
    )


def _none_value(value: Any) -> Any:
    """``None`` for the words that switch an optional setting off (``none``, ``never``, empty)."""
    if isinstance(value, str) and value.strip().lower() in ("", "none", "never"):
        return None
    return value


def _empty_is_none(value: Any) -> Any:
    """``None`` for an empty (or blank) string: an unset variable written as ``X=``."""
    return None if isinstance(value, str) and not value.strip() else value


def _comma_list(value: Any) -> Any:
    """A comma-separated string as a tuple of its non-empty, stripped parts."""
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value


#: A number that ``none``/``never`` (or empty) switches off.
OptionalNumber = Annotated[float | None, BeforeValidator(_none_value)]


class MongoSettings(BaseSettings):
    """Where short- and long-term memory live."""

    model_config = _group("MONGOMEM_MONGODB_")

    uri: Annotated[str | None, BeforeValidator(_empty_is_none)] = None
    database: str = Field(default="mongomem", min_length=1, max_length=63)
    server_selection_timeout_s: float = Field(default=10.0, gt=0)

    @field_validator("uri")
    @classmethod
    def _scheme(cls, value: str | None) -> str | None:
        """Only a ``mongodb://`` or ``mongodb+srv://`` URI (the error shows the scheme only)."""
        if value is not None and not value.startswith(("mongodb://", "mongodb+srv://")):
            scheme = value.split("://", 1)[0] + "://" if "://" in value else "no scheme"
            raise ValueError(
                f"not a MongoDB URI (it starts with {scheme!r}; "
                "a URI starts with mongodb:// or mongodb+srv://)"
            )
        return value


class KafkaSettings(BaseSettings):
    """The broker and the topics of the pipeline."""

    model_config = _group("MONGOMEM_KAFKA_")

    bootstrap: str | None = None
    topic_prefix: str = Field(default="mongomem", pattern=r"^[A-Za-z0-9._-]{1,100}$")
    partitions: int = Field(default=6, ge=1, le=1024)
    replication_factor: int = Field(default=1, ge=1, le=16)
    request_timeout_s: float = Field(default=30.0, gt=0)
    compression: Literal["none", "gzip", "snappy", "lz4", "zstd"] = Field(
        default="zstd",
        description=(
            "how producers compress record batches; consumers read any of them. zstd costs the "
            "producer little and saves the broker most of its work per byte."
        ),
    )

    @property
    def compression_type(self) -> str | None:
        """:attr:`compression` as aiokafka and faust take it (``None``: uncompressed)."""
        return None if self.compression == "none" else self.compression

    def topic(self, name: str) -> str:
        """The full name of one of the pipeline's topics (``turns``, ``snapshots`` …)."""
        return f"{self.topic_prefix}.{name}"


class WindowingSettings(BaseSettings):
    """When a session's turns become a snapshot (defaults; projects may override)."""

    model_config = _group("MONGOMEM_WINDOW_")

    max_messages: int = Field(default=20, ge=1, le=10_000)
    idle_timeout_s: float = Field(default=300.0, gt=0)
    engine: Literal["aiokafka", "faust"] = Field(
        default="aiokafka",
        description=(
            "aiokafka: consumer group + changelog table (default). faust: the same logic as a "
            "faust agent and table (needs the faust extra), with a workaround for records "
            "faust-streaming loses after a rebalance."
        ),
    )
    state_ttl_s: OptionalNumber = Field(
        default=7 * 24 * 3600.0,
        gt=0,
        description=(
            "a session with nothing pending and no turn for this long (event time) is retired "
            "from the stage's table; 'none': never. Keep it far above the commit interval."
        ),
    )

    @property
    def idle_timeout(self) -> timedelta:
        return timedelta(seconds=self.idle_timeout_s)


class ExtractionSettings(BaseSettings):
    """Which memory types are extracted in the background, and how hard to try."""

    model_config = _group("MONGOMEM_EXTRACTION_")

    enabled: Annotated[tuple[str, ...] | None, NoDecode] = Field(
        default=None,
        validation_alias=AliasChoices("MONGOMEM_ENABLED_EXTRACTIONS", "enabled"),
    )
    max_attempts: int = Field(default=4, ge=1, le=50)
    backoff_base_s: float = Field(default=0.5, ge=0)
    backoff_max_s: float = Field(default=30.0, ge=0)
    concurrency: int = Field(default=4, ge=1, le=256)
    max_rps: float | None = Field(
        default=None, gt=0, description="LLM calls per second per memory type (unset: no limit)"
    )
    known_tokens: int = Field(
        default=300,
        ge=0,
        le=8000,
        description=(
            "budget (tokens of about 4 characters) for the scope's nearest known memories of "
            "the type shown to the model, so it reuses their labels; 0: none"
        ),
    )
    window_tokens: int = Field(
        default=6000,
        ge=500,
        le=200_000,
        description=(
            "budget (tokens of about 4 characters) for a snapshot's turns in one extraction "
            "prompt; over it, the longest turns are shortened first (their middle is cut), "
            "every turn keeps its place"
        ),
    )
    roles: Annotated[tuple[Literal["user", "assistant", "system", "tool"], ...], NoDecode] = Field(
        default=("user", "assistant"),
        min_length=1,
        description=(
            "the turn roles extraction learns from; system and tool turns (where agents "
            "paste recalled context) only if listed"
        ),
    )

    @field_validator("enabled", "roles", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("enabled")
    @classmethod
    def _names(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is None:
            return None
        for name in value:
            if not TYPE_NAME.fullmatch(name):
                raise ValueError(f"not a memory type name (a-z, 0-9, - and _): {name!r}")
        return tuple(dict.fromkeys(value))


class ReconcileSettings(BaseSettings):
    """How the reconciler looks for matches and when it asks the judge (see mongomem.ltm.plan).

    Similarity never decides a REINFORCE (SPEC K1): ``ambiguous_at`` only
    chooses which memories under another key the judge is shown. The old
    ``MONGOMEM_RECONCILE_REINFORCE_AT`` / ``_DUPLICATE_AT`` are refused with an
    explanation rather than silently ignored.
    """

    model_config = _group("MONGOMEM_RECONCILE_")

    reinforce_at: float | None = Field(default=None, exclude=True)
    duplicate_at: float | None = Field(default=None, exclude=True)
    ambiguous_at: float = Field(default=0.80, ge=-1, le=1)
    floor: float = Field(default=0.5, ge=-1, le=1)
    neighbours: int = Field(default=5, ge=1, le=100)
    ledger_ttl_s: OptionalNumber = Field(
        default=30 * 24 * 3600.0,
        gt=0,
        description=(
            "how long a settled candidate is remembered (its ledger entry, hence its idempotency "
            "key); 'none': forever. Keep it above the candidates topic's retention."
        ),
    )
    judge_linger_s: float = Field(
        default=1.0,
        ge=0,
        le=60,
        description=(
            "with a judge, how long the reconciler waits for more candidates after the last "
            "one arrived (at most three times this after the first) before reconciling, so a "
            "snapshot's memory types (extracted by separate consumers, published moments "
            "apart) share one judge call; 0: never waits"
        ),
    )
    retention_sweep_s: OptionalNumber = Field(
        default=3600.0,
        gt=0,
        description=(
            "how often `mongomem run retention` expires memories past their type's retention "
            "(memory.retention in project-config.yaml); 'none': never"
        ),
    )

    @model_validator(mode="after")
    def _no_similarity_reinforce(self) -> ReconcileSettings:
        for name in ("reinforce_at", "duplicate_at"):
            if getattr(self, name) is not None:
                raise ValueError(
                    f"MONGOMEM_RECONCILE_{name.upper()} no longer exists: similarity never decides "
                    "a REINFORCE (a changed value can score as high as a paraphrase). Remove it; "
                    "MONGOMEM_RECONCILE_AMBIGUOUS_AT chooses what the judge is shown"
                )
        return self


class ModelPrice(BaseModel):
    """What one model costs, in a currency of your choice, per 1M tokens."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input: float = Field(ge=0, description="price per 1M prompt (input) tokens")
    output: float = Field(ge=0, description="price per 1M completion (output) tokens")

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        """The price of these tokens."""
        return (prompt_tokens * self.input + completion_tokens * self.output) / 1_000_000


#: How structured output is asked for (see :mod:`mongomem.adapters.llm`).
StructuredOutput = Literal["auto", "json_schema", "json_object", "tools", "prompt"]


class LLMSettings(BaseSettings):
    """The OpenAI-compatible endpoint used for extraction (and the optional judge)."""

    model_config = _group("MONGOMEM_LLM_")

    base_url: str | None = None
    api_key: SecretStr | None = None
    model: str = "gpt-4o-mini"
    timeout_s: float = Field(default=60.0, gt=0)
    use_stand_in: bool = Field(
        default=False,
        description="Run the local scripted stand-in (NOT a model) when no endpoint is set.",
    )
    structured_output: StructuredOutput = Field(
        default="auto",
        description=(
            "json_schema: response_format json_schema (strict). json_object: response_format "
            "json_object with the schema attached (llama.cpp style) and stated in the prompt. "
            "tools: a forced tool call whose parameters are the schema. prompt: the schema in "
            "the prompt only, one repair request on an invalid answer. auto: json_schema, and "
            "on a refusal that names the response format the next of those, remembered for "
            "the process."
        ),
    )
    prices: Annotated[dict[str, ModelPrice], NoDecode] = Field(
        default_factory=dict,
        description=(
            'JSON, e.g. {"gpt-4o-mini": {"input": 0.15, "output": 0.6}}: price per 1M tokens '
            "by model name (a name also prices the dated versions it is a prefix of)"
        ),
    )

    @field_validator("prices", mode="before")
    @classmethod
    def _json(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return json.loads(value) if value.strip() else {}
            except json.JSONDecodeError as exc:
                raise ValueError(f"not JSON ({exc})") from exc
        return value

    def price_of(self, model: str) -> ModelPrice | None:
        """The price of ``model``: its own entry, else the longest name it starts with."""
        if model in self.prices:
            return self.prices[model]
        matches = [name for name in self.prices if model.startswith(name)]
        return self.prices[max(matches, key=len)] if matches else None


class EmbeddingSettings(BaseSettings):
    """The embedding provider."""

    model_config = _group("MONGOMEM_EMBEDDING_")

    provider: Literal["openai", "local", "stand-in"] | None = None
    base_url: str | None = None
    api_key: SecretStr | None = None
    model: str = "text-embedding-3-small"
    dimensions: int = Field(default=384, ge=8, le=8192)


class RerankSettings(BaseSettings):
    """The optional reranker (:mod:`mongomem.adapters.rerank`): off unless ``base_url``
    is set. It is an HTTP ``/rerank`` endpoint (Cohere/Jina/vLLM/llama.cpp/TEI style)."""

    model_config = _group("MONGOMEM_RERANK_")

    base_url: str | None = Field(
        default=None, description="the endpoint's base URL; unset: no reranking"
    )
    api_key: SecretStr | None = None
    model: str = "rerank"
    depth: int = Field(
        default=20, ge=1, le=200, description="the fused hits reordered by the reranker"
    )
    timeout_s: float = Field(default=10.0, gt=0)


class ServiceSettings(BaseSettings):
    """The standalone HTTP memory service."""

    model_config = _group("MONGOMEM_SERVICE_")

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)
    api_keys: Annotated[tuple[SecretStr, ...], NoDecode] = ()
    rate_limit_per_s: OptionalNumber = Field(
        default=None,
        gt=0,
        description="requests per second each API key may make (a token bucket); 'none': no limit",
    )
    rate_limit_burst: int = Field(
        default=20, ge=1, description="requests a key may make at once above its rate"
    )

    request_deadline_s: OptionalNumber = Field(
        default=30.0,
        gt=0,
        description=(
            "seconds a /v1 request may take before it is answered 503 with nothing stored "
            "(its queued embedding is dropped); a client that disconnects ends it at once; "
            "'none': no deadline"
        ),
    )
    import_idle_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description=(
            "seconds a streamed import body may send nothing before it is refused (408) and "
            "rolled back"
        ),
    )
    import_total_timeout_s: float = Field(
        default=3600.0,
        gt=0,
        description="seconds a streamed import body may take in all before it is refused (408)",
    )
    embedding_batch: int | None = Field(
        default=None,
        ge=1,
        le=256,
        description=(
            "most queued texts one embedding call takes at once (1: no batching); default 16 "
            "for an OpenAI-compatible endpoint, 1 for the local model (its engine embeds a "
            "batch no faster than one text at a time: bench.service)"
        ),
    )

    tls_cert_file: Path | None = Field(
        default=None, description="PEM certificate (chain) to serve HTTPS with; with the key"
    )
    tls_key_file: Path | None = Field(default=None, description="PEM private key of the cert")

    @field_validator("api_keys", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return _comma_list(value)

    @model_validator(mode="after")
    def _tls_pair(self) -> ServiceSettings:
        _check_tls_pair(self.tls_cert_file, self.tls_key_file, "MONGOMEM_SERVICE_")
        return self


class McpSettings(BaseSettings):
    """The MCP server (``mongomem mcp``)."""

    model_config = _group("MONGOMEM_MCP_")

    auth_token: SecretStr | None = Field(
        default=None,
        description=(
            "the bearer token every streamable-HTTP request must carry; required to listen "
            "on anything but loopback"
        ),
    )
    tls_cert_file: Path | None = Field(
        default=None, description="PEM certificate (chain) to serve streamable HTTP over TLS"
    )
    tls_key_file: Path | None = Field(default=None, description="PEM private key of the cert")

    @model_validator(mode="after")
    def _tls_pair(self) -> McpSettings:
        _check_tls_pair(self.tls_cert_file, self.tls_key_file, "MONGOMEM_MCP_")
        return self


def _check_tls_pair(cert: Path | None, key: Path | None, prefix: str) -> None:
    """TLS needs both a certificate and its key, or neither."""
    if (cert is None) != (key is None):
        raise ValueError(f"set both {prefix}TLS_CERT_FILE and {prefix}TLS_KEY_FILE, or neither")


class SpacesSettings(BaseSettings):
    """Memory spaces (:mod:`mongomem.spaces`)."""

    model_config = _group("MONGOMEM_SPACES_")

    encryption_key: SecretStr | None = Field(
        default=None, description="32 bytes, base64: the AES-256-GCM key of encrypted spaces"
    )
    previous_encryption_keys: Annotated[tuple[SecretStr, ...], NoDecode] = Field(
        default=(),
        description=(
            "comma list of keys that sealed items before the current one: still read, never "
            "written; `mongomem spaces rekey` moves a space to the current key"
        ),
    )

    @field_validator("previous_encryption_keys", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return _comma_list(value)


class InfraSettings(BaseSettings):
    """How local development servers are chosen and run (see :mod:`mongomem.local.infra`)."""

    model_config = _group("MONGOMEM_INFRA_")

    mode: Literal["auto", "uri", "containers", "local"] = "auto"
    kafka_port: int = Field(default=9092, ge=1, le=65535)
    mongo_port: int = Field(default=27017, ge=1, le=65535)
    state_dir: Path = Path(".mongomem")
    persistent: bool = False
    docker_host: str | None = Field(
        default=None, validation_alias=AliasChoices("DOCKER_HOST", "docker_host")
    )


class StmSettings(BaseSettings):
    """Short-term memory: the limits of a turn, and how the watcher batches them."""

    model_config = _group("MONGOMEM_STM_")

    max_content_bytes: int = Field(default=256 * 1024, ge=1, le=8 * 1024 * 1024)
    max_metadata_bytes: int = Field(default=64 * 1024, ge=2, le=4 * 1024 * 1024)
    max_recent_turns: int = Field(default=1000, ge=1, le=100_000)
    watcher_batch_max: int = Field(default=500, ge=1, le=100_000)
    watcher_flush_interval_s: float = Field(default=0.05, gt=0, le=60)
    watcher_poll_interval_s: float = Field(default=0.02, gt=0, le=10)
    watcher_watermark_interval_s: float = Field(
        default=1.0,
        gt=0,
        le=3600,
        description="how often the watcher publishes a watermark into every turns partition",
    )
    watcher_watermark_idle_interval_s: float = Field(
        default=10.0,
        gt=0,
        le=3600,
        description=(
            "while no turn is read, the wait between two watermarks doubles from "
            "watcher_watermark_interval_s up to this (an idle window closes at most this "
            "late); a turn read brings it back"
        ),
    )
    watcher_watermark_lateness_s: float = Field(
        default=2.0,
        ge=0,
        le=24 * 3600,
        description=(
            "how long after its created_at a turn may still reach the change stream (insert "
            "delay plus clock skew between writers and the watcher); a watermark lags the "
            "watcher's progress by this much, so idle windows close this much later"
        ),
    )


class WatcherSettings(BaseSettings):
    """Which share of the turns the watcher process owns (scaling out the watcher).

    Watcher ``shard`` of ``shards`` reads the turns whose session bucket
    (:func:`~mongomem.buckets.session_bucket`) is ``shard`` modulo ``shards``; run
    one process per share. ``shards = 1`` (the default) reads every turn.
    """

    model_config = _group("MONGOMEM_WATCHER_")

    shards: int = Field(
        default=1, ge=1, le=4096, description="how many watcher processes share the turns"
    )
    shard: int = Field(default=0, ge=0, description="this watcher's share, in [0, shards)")

    @model_validator(mode="after")
    def _shard_in_range(self) -> WatcherSettings:
        if self.shard >= self.shards:
            raise ValueError(
                f"MONGOMEM_WATCHER_SHARD={self.shard} is not in [0, {self.shards}) "
                f"(MONGOMEM_WATCHER_SHARDS={self.shards}): watcher shares are numbered "
                f"0 to {self.shards - 1}"
            )
        return self


class Settings(BaseSettings):
    """The root of all settings."""

    model_config = SettingsConfigDict(
        env_prefix="MONGOMEM_", env_file=".env", extra="ignore", frozen=True
    )

    mongodb: MongoSettings = Field(default_factory=MongoSettings)
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    windowing: WindowingSettings = Field(default_factory=WindowingSettings)
    extraction: ExtractionSettings = Field(default_factory=ExtractionSettings)
    llm: LLMSettings = Field(default_factory=LLMSettings)
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    rerank: RerankSettings = Field(default_factory=RerankSettings)
    service: ServiceSettings = Field(default_factory=ServiceSettings)
    infra: InfraSettings = Field(default_factory=InfraSettings)
    stm: StmSettings = Field(default_factory=StmSettings)
    watcher: WatcherSettings = Field(default_factory=WatcherSettings)
    reconcile: ReconcileSettings = Field(default_factory=ReconcileSettings)
    spaces: SpacesSettings = Field(default_factory=SpacesSettings)
    mcp: McpSettings = Field(default_factory=McpSettings)
    project_config: Path | None = None
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    metrics_host: str = "127.0.0.1"


def _describe(exc: ValidationError, source: str, prefix: str = "") -> str:
    """One line: each bad variable by its name, with what is wrong with it."""
    problems = []
    for err in exc.errors():
        where = ".".join(str(part) for part in err["loc"]) or (f"{prefix}*" if prefix else "(root)")
        if prefix and not where.startswith("MONGOMEM_") and not where.startswith("DOCKER_"):
            where = f"{prefix}{where}".upper()
        message = str(err["msg"]).removeprefix("Value error, ")
        problems.append(f"{where}: {message}")
    noun = "setting" if len(problems) == 1 else "settings"
    where_from = "" if source.startswith("environment") else f" (in {source})"
    return f"invalid {noun} " + "; ".join(problems) + where_from


_GROUPS: dict[str, type[BaseSettings]] = {
    "mongodb": MongoSettings,
    "kafka": KafkaSettings,
    "windowing": WindowingSettings,
    "extraction": ExtractionSettings,
    "llm": LLMSettings,
    "embedding": EmbeddingSettings,
    "service": ServiceSettings,
    "infra": InfraSettings,
    "stm": StmSettings,
    "watcher": WatcherSettings,
    "reconcile": ReconcileSettings,
    "spaces": SpacesSettings,
    "mcp": McpSettings,
}


def overlay(settings: Settings, env: Mapping[str, str], *, keep_set: bool = False) -> Settings:
    """``settings`` with the ``MONGOMEM_*`` variables of ``env`` applied on top.

    Used where a process must see the settings another process was given
    (``mongomem status`` reading the environment ``make run`` gave the stages).
    With ``keep_set``, values this process was given explicitly win.
    """
    updates: dict[str, Any] = {}
    for name, cls in _GROUPS.items():
        prefix = str(cls.model_config.get("env_prefix", ""))
        values: dict[str, Any] = {}
        already = getattr(settings, name).model_fields_set if keep_set else set()
        for key, value in env.items():
            field = key[len(prefix) :].lower() if key.startswith(prefix) else None
            if key == "MONGOMEM_ENABLED_EXTRACTIONS" and name == "extraction":
                field = "enabled"
            if field in cls.model_fields and field not in already:
                values[field] = value
        if values:
            current = getattr(settings, name).model_dump(exclude_unset=True)
            try:
                updates[name] = cls.model_validate({**current, **values})
            except ValidationError as exc:
                raise ConfigError(_describe(exc, "the saved stage environment", prefix)) from exc
    if "MONGOMEM_PROJECT_CONFIG" in env and not (keep_set and settings.project_config):
        updates["project_config"] = Path(env["MONGOMEM_PROJECT_CONFIG"])
    return settings.model_copy(update=updates)


#: The fix a missing setting's message ends with: where a local pipeline runs,
#: its settings are found by themselves; elsewhere this shell needs them.
LOCAL_PIPELINE_HINT = (
    '(or, for a local pipeline (`make run`) in another folder, eval "$(mongomem env)" there)'
)

#: Where ``mongomem up`` (``make run``) saves the environment it gave its
#: stages, under the state directory (``MONGOMEM_INFRA_STATE_DIR``).
LOCAL_PIPELINE_ENV = Path("stages") / "env.json"


def local_pipeline_env(settings: Settings) -> dict[str, str] | None:
    """The environment the local pipeline's stages run with, or None if none runs here."""
    saved = settings.infra.state_dir.resolve() / LOCAL_PIPELINE_ENV
    try:
        text = saved.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"cannot read the local pipeline's settings in {saved}: {exc}") from exc
    try:
        env = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{saved} is not JSON ({exc}); `mongomem up` rewrites it") from exc
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise ConfigError(f"{saved} is not a JSON object of strings; `mongomem up` rewrites it")
    return env


def with_local_pipeline(settings: Settings) -> Settings:
    """``settings`` completed from the local pipeline (``make run``), when one runs here.

    The discovery the SDK uses when it is given no settings: the file
    ``<state dir>/stages/env.json`` (state dir ``.mongomem`` in the current
    folder unless ``MONGOMEM_INFRA_STATE_DIR`` says otherwise) holds the
    ``MONGOMEM_*`` values ``mongomem up`` gave its stages — the servers'
    addresses, the embedding provider and the LLM endpoint. Values this process
    was given (its own environment, or arguments) win; without the file the
    settings are returned unchanged. ``mongomem env`` prints the same values as
    shell exports.
    """
    env = local_pipeline_env(settings)
    return settings if env is None else overlay(settings, env, keep_set=True)


def load_settings(**overrides: Any) -> Settings:
    """Read settings from the environment, failing with a :class:`ConfigError`.

    ``overrides`` replace whole groups (``kafka=KafkaSettings(...)``) or root
    fields, for tests and embedding applications.
    """
    values: dict[str, Any] = {}
    for name, cls in _GROUPS.items():
        if name in overrides:
            continue
        prefix = cls.model_config.get("env_prefix", "")
        try:
            values[name] = cls()
        except ValidationError as exc:
            raise ConfigError(_describe(exc, f"environment variables {prefix}*", prefix)) from exc
    values.update(overrides)
    try:
        return Settings(**values)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, "environment variables MONGOMEM_*")) from exc


#: Variables that no longer exist, with what replaced them (reported, never silently ignored).
RETIRED_VARIABLES: dict[str, str] = {
    "MONGOMEM_WINDOW_TICK_INTERVAL_S": (
        "removed: idle windows close on the watcher's watermarks; "
        "MONGOMEM_STM_WATCHER_WATERMARK_INTERVAL_S sets how often they come"
    ),
}


def known_variables() -> frozenset[str]:
    """Every ``MONGOMEM_*`` variable some setting reads (and the groups' JSON forms)."""
    names = {f"MONGOMEM_{field.upper()}" for field in Settings.model_fields}
    for cls in _GROUPS.values():
        prefix = str(cls.model_config.get("env_prefix", ""))
        for field, info in cls.model_fields.items():
            names.add(f"{prefix}{field}".upper())
            alias = info.validation_alias
            if isinstance(alias, AliasChoices):
                names.update(str(c) for c in alias.choices if str(c).startswith("MONGOMEM_"))
    return frozenset(names)


def unknown_variables(env: Mapping[str, str]) -> list[str]:
    """One sentence per ``MONGOMEM_*`` variable of ``env`` that no setting reads.

    A retired variable says what replaced it; any other names the nearest
    valid variable when one is close (a typo), so nothing is silently ignored.
    """
    known = known_variables()
    found = []
    for name in sorted(env):
        if not name.startswith("MONGOMEM_") or name in known:
            continue
        if name in RETIRED_VARIABLES:
            found.append(f"{name} is ignored: {RETIRED_VARIABLES[name]}")
            continue
        near = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        hint = f"; did you mean {near[0]}?" if near else ""
        found.append(f"{name} is not a mongomem setting and is ignored{hint}")
    return found


_log = logging.getLogger("mongomem.settings")
_reported: set[str] = set()


def _report_unknown(env: Mapping[str, str], say: Callable[[str], None] | None) -> None:
    """Say each unknown variable once per process (default: a WARNING on ``mongomem.settings``)."""
    for line in unknown_variables(env):
        if line not in _reported:
            _reported.add(line)
            if say is None:
                _log.warning("%s", line)
            else:
                say(line)


def resolve_settings(*, say: Callable[[str], None] | None = None, **overrides: Any) -> Settings:
    """The settings of every surface: the environment first, then the local pipeline's.

    The one loader the CLI's commands, the SDK (``Memory()`` without settings),
    ``Spaces``, the MCP server and the service use: :func:`load_settings`
    (``MONGOMEM_*`` variables and ``.env``; ``overrides`` as there), completed
    by :func:`with_local_pipeline` from the settings ``mongomem up`` (``make
    run``) saved in ``<state dir>/stages/env.json``. Each ``MONGOMEM_*``
    variable no setting reads is reported once per process, with the nearest
    valid name: to ``say`` if given, else as a logged warning.
    """
    _report_unknown(os.environ, say)
    return with_local_pipeline(load_settings(**overrides))

"""Settings and project-config.yaml: good values load, bad ones name field and source."""

from __future__ import annotations

from pathlib import Path

import pytest

from mongomem.errors import ConfigError
from mongomem.project_config import enabled_types, load_project_config
from mongomem.settings import ExtractionSettings, load_settings


def test_defaults_load_without_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MONGOMEM_ENABLED_EXTRACTIONS", raising=False)
    settings = load_settings()
    assert settings.kafka.topic("turns") == "mongomem.turns"
    assert settings.windowing.max_messages == 20
    assert enabled_types(settings) == ("semantic", "episodic", "procedural", "taxonomic")


def test_environment_values_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MONGOMEM_KAFKA_BOOTSTRAP", "broker:9092")
    monkeypatch.setenv("MONGOMEM_MONGODB_URI", "mongodb://db:27017")
    monkeypatch.setenv("MONGOMEM_WINDOW_MAX_MESSAGES", "7")
    monkeypatch.setenv("MONGOMEM_ENABLED_EXTRACTIONS", "semantic, taxonomic")
    monkeypatch.setenv("MONGOMEM_LLM_API_KEY", "sk-secret")
    settings = load_settings()
    assert settings.kafka.bootstrap == "broker:9092"
    assert settings.mongodb.uri == "mongodb://db:27017"
    assert settings.windowing.max_messages == 7
    assert settings.extraction.enabled == ("semantic", "taxonomic")
    assert settings.llm.api_key is not None
    assert "sk-secret" not in repr(settings)


def test_bad_value_names_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MONGOMEM_KAFKA_PARTITIONS", "zero")
    with pytest.raises(ConfigError, match=r"MONGOMEM_KAFKA_PARTITIONS: .*integer"):
        load_settings()


def test_bad_type_name_in_env_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MONGOMEM_ENABLED_EXTRACTIONS", "semantic,$bad")
    with pytest.raises(ConfigError, match=r"MONGOMEM_ENABLED_EXTRACTIONS: .*\$bad"):
        load_settings()


def test_unknown_type_in_env_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MONGOMEM_ENABLED_EXTRACTIONS", raising=False)
    settings = load_settings(extraction=ExtractionSettings(enabled=("semantic", "gossip")))
    with pytest.raises(ConfigError, match="gossip"):
        enabled_types(settings)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "project-config.yaml"
    path.write_text(text)
    return path


def test_project_config_enables_types_and_custom_type(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
memory:
  extraction:
    enabled: [semantic, preference]
    custom:
      - name: preference
        scope: user
        key: [topic]
        fields: {topic: "what it is about", value: "the preference"}
        instructions: "Extract stated preferences."
  windowing:
    max_messages: 5
    projects:
      support: {idle_timeout_s: 30}
""",
    )
    config = load_project_config(path)
    assert config.memory.extraction.enabled == ("semantic", "preference")
    custom = config.custom_type("preference")
    assert custom is not None
    assert custom.key == ("topic",)
    assert config.memory.windowing.projects["support"].idle_timeout_s == 30
    settings = load_settings(extraction=ExtractionSettings(), project_config=path)
    assert enabled_types(settings) == ("semantic", "preference")


def test_env_wins_over_project_config(tmp_path: Path) -> None:
    path = _write(tmp_path, "memory: {extraction: {enabled: [semantic]}}\n")
    settings = load_settings(
        extraction=ExtractionSettings(enabled=("episodic",)), project_config=path
    )
    assert enabled_types(settings) == ("episodic",)


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("memory: {extraction: {enabled: [gossip]}}\n", "memory.extraction"),
        ("memory: {windowing: {max_messages: 0}}\n", "memory.windowing.max_messages"),
        ("memory: {extraktion: {}}\n", "memory.extraktion"),
        ("- a list\n", "top level"),
        ("memory: [\n", "not valid YAML"),
        (
            "memory: {extraction: {custom: [{name: semantic, fields: {a: b}, key: [a], "
            "instructions: x}]}}\n",
            "built-in",
        ),
        (
            "memory: {extraction: {custom: [{name: pref, fields: {a: b}, key: [z], "
            "instructions: x}]}}\n",
            "key fields",
        ),
    ],
)
def test_bad_project_config_names_file_and_field(tmp_path: Path, text: str, where: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_project_config(path)
    assert str(path) in str(info.value)
    assert where in str(info.value)


def test_missing_project_config_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_project_config(tmp_path / "nope.yaml")


def test_overlay_applies_another_processes_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from mongomem.settings import overlay

    monkeypatch.delenv("MONGOMEM_ENABLED_EXTRACTIONS", raising=False)
    base = load_settings()
    seen = overlay(
        base,
        {
            "MONGOMEM_LLM_BASE_URL": "http://127.0.0.1:1/v1",
            "MONGOMEM_EMBEDDING_PROVIDER": "stand-in",
            "MONGOMEM_ENABLED_EXTRACTIONS": "semantic,episodic",
            "MONGOMEM_WINDOW_IDLE_TIMEOUT_S": "4",
            "UNRELATED": "x",
        },
    )
    assert seen.llm.base_url == "http://127.0.0.1:1/v1"
    assert seen.embedding.provider == "stand-in"
    assert seen.extraction.enabled == ("semantic", "episodic")
    assert seen.windowing.idle_timeout_s == 4
    assert seen.kafka == base.kafka
    with pytest.raises(ConfigError, match="MONGOMEM_EMBEDDING_PROVIDER"):
        overlay(base, {"MONGOMEM_EMBEDDING_PROVIDER": "telepathy"})


def test_overlay_can_keep_what_was_set_explicitly(monkeypatch: pytest.MonkeyPatch) -> None:
    from mongomem.settings import overlay

    monkeypatch.setenv("MONGOMEM_KAFKA_BOOTSTRAP", "mine:9092")
    base = load_settings()
    saved = {"MONGOMEM_KAFKA_BOOTSTRAP": "theirs:9092", "MONGOMEM_KAFKA_TOPIC_PREFIX": "theirs"}
    kept = overlay(base, saved, keep_set=True)
    assert kept.kafka.bootstrap == "mine:9092"
    assert kept.kafka.topic_prefix == "theirs"
    assert overlay(base, saved).kafka.bootstrap == "theirs:9092"


def test_reconcile_thresholds_come_from_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from mongomem.ltm import Thresholds

    monkeypatch.setenv("MONGOMEM_RECONCILE_AMBIGUOUS_AT", "0.7")
    thresholds = Thresholds.from_settings(load_settings().reconcile)
    assert thresholds.ambiguous_at == 0.7
    assert thresholds.floor == Thresholds().floor
    monkeypatch.setenv("MONGOMEM_RECONCILE_FLOOR", "0.9")  # above ambiguous_at
    with pytest.raises(ConfigError, match="MONGOMEM_RECONCILE_"):
        Thresholds.from_settings(load_settings().reconcile)


@pytest.mark.parametrize("name", ["REINFORCE_AT", "DUPLICATE_AT"])
def test_the_old_similarity_reinforce_thresholds_are_refused(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setenv(f"MONGOMEM_RECONCILE_{name}", "0.95")
    with pytest.raises(ConfigError, match=f"MONGOMEM_RECONCILE_{name} no longer exists"):
        load_settings()


def test_kafka_compression_reaches_the_producers(monkeypatch: pytest.MonkeyPatch) -> None:
    import mongomem.adapters.kafka

    made: list[dict[str, object]] = []
    monkeypatch.setattr(
        mongomem.adapters.kafka, "AIOKafkaProducer", lambda **options: made.append(options)
    )
    assert load_settings().kafka.compression == "zstd"
    monkeypatch.setenv("MONGOMEM_KAFKA_BOOTSTRAP", "broker:9092")
    for value, expected in (("none", None), ("lz4", "lz4"), ("zstd", "zstd")):
        monkeypatch.setenv("MONGOMEM_KAFKA_COMPRESSION", value)
        mongomem.adapters.kafka.make_producer(load_settings().kafka)
        assert made[-1]["compression_type"] == expected
    monkeypatch.setenv("MONGOMEM_KAFKA_COMPRESSION", "brotli")
    with pytest.raises(ConfigError, match="MONGOMEM_KAFKA_COMPRESSION"):
        load_settings()


@pytest.mark.parametrize("group", ["SERVICE", "MCP"])
def test_tls_takes_a_certificate_and_its_key_together(
    monkeypatch: pytest.MonkeyPatch, group: str, tmp_path: Path
) -> None:
    monkeypatch.setenv(f"MONGOMEM_{group}_TLS_CERT_FILE", str(tmp_path / "cert.pem"))
    with pytest.raises(ConfigError, match=f"MONGOMEM_{group}_TLS_KEY_FILE, or neither"):
        load_settings()
    monkeypatch.setenv(f"MONGOMEM_{group}_TLS_KEY_FILE", str(tmp_path / "key.pem"))
    tls = getattr(load_settings(), group.lower())
    assert (tls.tls_cert_file, tls.tls_key_file) == (tmp_path / "cert.pem", tmp_path / "key.pem")


def test_extraction_roles_default_to_user_and_assistant(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings().extraction.roles == ("user", "assistant")
    monkeypatch.setenv("MONGOMEM_EXTRACTION_ROLES", "user, assistant, system")
    assert load_settings().extraction.roles == ("user", "assistant", "system")
    monkeypatch.setenv("MONGOMEM_EXTRACTION_ROLES", "user,robot")
    with pytest.raises(ConfigError, match="MONGOMEM_EXTRACTION_ROLES"):
        load_settings()

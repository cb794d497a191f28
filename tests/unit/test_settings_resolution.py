"""One settings loader (SPEC I7): environment first, then the local pipeline's saved settings;
unknown variables reported; a bad URI refused in one line naming the variable."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from mongomem.errors import ConfigError
from mongomem.settings import (
    LOCAL_PIPELINE_ENV,
    known_variables,
    load_settings,
    resolve_settings,
    unknown_variables,
)


def _clean(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    import os

    for name in [n for n in os.environ if n.startswith("MONGOMEM_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(folder)


def _save(folder: Path, values: dict[str, str]) -> None:
    saved = folder / ".mongomem" / LOCAL_PIPELINE_ENV
    saved.parent.mkdir(parents=True)
    saved.write_text(json.dumps(values))


def test_the_environment_wins_then_the_saved_settings_fill_in(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _clean(monkeypatch, tmp_path)
    _save(
        tmp_path,
        {
            "MONGOMEM_MONGODB_URI": "mongodb://saved:1/",
            "MONGOMEM_EMBEDDING_PROVIDER": "stand-in",
        },
    )
    monkeypatch.setenv("MONGOMEM_MONGODB_URI", "mongodb://mine:2/")
    resolved = resolve_settings()
    assert resolved.mongodb.uri == "mongodb://mine:2/"
    assert resolved.embedding.provider == "stand-in"
    assert load_settings().embedding.provider is None  # load_settings: the environment only


def test_a_mistyped_scheme_is_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _clean(monkeypatch, tmp_path)
    monkeypatch.setenv("MONGOMEM_MONGODB_URI", "mongdb://user:secret@h:1/")
    with pytest.raises(ConfigError) as info:
        load_settings()
    message = str(info.value)
    assert "\n" not in message
    assert "MONGOMEM_MONGODB_URI" in message
    assert "mongdb://" in message
    assert "secret" not in message  # only the scheme is shown


def test_an_empty_uri_is_unset(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _clean(monkeypatch, tmp_path)
    monkeypatch.setenv("MONGOMEM_MONGODB_URI", "")
    assert load_settings().mongodb.uri is None


def test_known_variables_cover_groups_aliases_and_root_fields() -> None:
    known = known_variables()
    for name in (
        "MONGOMEM_MONGODB_URI",
        "MONGOMEM_ENABLED_EXTRACTIONS",
        "MONGOMEM_STM_WATCHER_WATERMARK_INTERVAL_S",
        "MONGOMEM_LOG_LEVEL",
        "MONGOMEM_PROJECT_CONFIG",
    ):
        assert name in known


def test_unknown_variables_name_the_nearest_valid_one() -> None:
    found = unknown_variables(
        {
            "MONGOMEM_WINDOW_TICK_INTERVAL_S": "1",
            "MONGOMEM_KAFKA_BOOTSTRAPS": "x",
            "MONGOMEM_MONGODB_URI": "mongodb://h/",
            "OTHER": "x",
        }
    )
    assert len(found) == 2
    assert "did you mean MONGOMEM_KAFKA_BOOTSTRAP?" in found[0]
    assert "MONGOMEM_STM_WATCHER_WATERMARK_INTERVAL_S" in found[1]  # the retired one's successor


def test_unknown_variables_are_reported_once_per_process(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _clean(monkeypatch, tmp_path)
    monkeypatch.setenv("MONGOMEM_LOG_LEVLE", "DEBUG")
    said: list[str] = []
    resolve_settings(say=said.append)
    resolve_settings(say=said.append)
    assert said == [
        "MONGOMEM_LOG_LEVLE is not a mongomem setting and is ignored; "
        "did you mean MONGOMEM_LOG_LEVEL?"
    ]
    with caplog.at_level(logging.WARNING, logger="mongomem.settings"):
        resolve_settings()
    assert caplog.records == []  # said once already

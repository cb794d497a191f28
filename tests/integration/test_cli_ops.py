"""`mongomem configure`, `apply` and `status` (SPEC G4) against the test servers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mongomem.cli.main import main
from mongomem.cli.operate import print_status
from mongomem.local.supervisor import StageProcess
from mongomem.settings import Settings, load_settings
from mongomem.testing.harness import stand_in_llm

pytestmark = pytest.mark.integration

CONFIG = """
memory:
  extraction:
    enabled: [semantic, taxonomic]
"""


def _env(settings: Settings, monkeypatch: pytest.MonkeyPatch, state: Path) -> None:
    monkeypatch.setenv("MONGOMEM_INFRA_STATE_DIR", str(state))
    monkeypatch.setenv("MONGOMEM_MONGODB_URI", settings.mongodb.uri or "")
    monkeypatch.setenv("MONGOMEM_MONGODB_DATABASE", settings.mongodb.database)
    monkeypatch.setenv("MONGOMEM_KAFKA_BOOTSTRAP", settings.kafka.bootstrap or "")
    monkeypatch.setenv("MONGOMEM_KAFKA_TOPIC_PREFIX", settings.kafka.topic_prefix)
    monkeypatch.delenv("MONGOMEM_ENABLED_EXTRACTIONS", raising=False)


def test_configure_saves_settings_and_rejects_bad_files(
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _env(settings, monkeypatch, tmp_path / "state")
    good = tmp_path / "project-config.yaml"
    good.write_text(CONFIG)
    assert main(["configure", str(good)]) == 0
    saved = (tmp_path / "state" / "project.env").read_text()
    assert "MONGOMEM_ENABLED_EXTRACTIONS=semantic,taxonomic" in saved
    assert f"MONGOMEM_PROJECT_CONFIG={good.resolve()}" in saved

    bad = tmp_path / "bad.yaml"
    bad.write_text("memory: {extraction: {enabled: [gossip]}}\n")
    assert main(["configure", str(bad)]) == 1
    err = capsys.readouterr().err
    assert str(bad) in err
    assert "gossip" in err


async def test_status_reports_extractions_readiness_and_lag(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _env(settings, monkeypatch, tmp_path / "state")
    monkeypatch.setenv("MONGOMEM_ENABLED_EXTRACTIONS", "semantic")
    lines: list[str] = []
    code = await print_status(load_settings(), say=lines.append)
    text = "\n".join(lines)
    assert code == 1  # no LLM and no embedding provider configured here
    assert "extractions in force: semantic  (from MONGOMEM_ENABLED_EXTRACTIONS)" in text
    assert "NOT READY" in text
    assert "embedding provider" in text
    assert f"{settings.kafka.topic_prefix}.extractor.semantic" in text
    assert "dead letters: " in text
    assert "LLM usage, last 1 hour (from llm_usage): no LLM calls" in text


def test_apply_restarts_extractors_to_match_and_waits_until_ready(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    _env(settings, monkeypatch, state)
    config = tmp_path / "project-config.yaml"
    config.write_text(CONFIG)
    with stand_in_llm() as llm:
        monkeypatch.setenv("MONGOMEM_LLM_BASE_URL", llm.base_url)
        monkeypatch.setenv("MONGOMEM_LLM_API_KEY", "stand-in")
        monkeypatch.setenv("MONGOMEM_EMBEDDING_PROVIDER", "stand-in")
        stages = state / "stages"
        stages.mkdir(parents=True)
        # What `make run` leaves behind: the stage environment it used.
        (stages / "env.json").write_text(json.dumps({"MONGOMEM_EMBEDDING_PROVIDER": "stand-in"}))
        try:
            # As a process, the way an operator runs it: the extractors it starts outlive it.
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "mongomem.cli",
                    "apply",
                    str(config),
                    "--timeout",
                    "60",
                ],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert done.returncode == 0, done.stderr[-3000:]
            assert "ready: extractions in force: semantic, taxonomic" in done.stdout
            running = sorted(p.stem for p in stages.glob("extractor-*.pid"))
            assert running == ["extractor-semantic", "extractor-taxonomic"]
        finally:
            for pid_file in stages.glob("*.pid"):
                StageProcess(
                    name=pid_file.stem, stage="extractor", state_dir=stages, cache_dir=state
                ).stop(timeout_s=20)

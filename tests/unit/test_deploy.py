"""Deployment manifests stay in step with the CLI: every stage is deployed, every command parses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from mongomem.cli.main import STAGES, _parser

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def _compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text())
    return data


def _k8s() -> list[dict[str, Any]]:
    return list(yaml.safe_load_all((DEPLOY / "k8s" / "mongomem.yaml").read_text()))


def _commands(verb: str = "run") -> list[list[str]]:
    """The ``mongomem`` commands the manifests run, those starting with ``verb``."""
    compose = [s["command"] for s in _compose()["services"].values() if "command" in s]
    k8s = [
        d["spec"]["template"]["spec"]["containers"][0]["args"]
        for d in _k8s()
        if d["kind"] == "Deployment"
    ]
    return [c for c in compose + k8s if c and c[0] == verb]


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_every_stage_is_deployed(stage: str) -> None:
    """Every stage is a service in compose and a Deployment on Kubernetes (SPEC I3)."""
    stages = {cmd[1] for cmd in _commands()}
    assert stage in stages


def test_every_deployed_command_parses() -> None:
    for command in _commands():
        args = _parser().parse_args(command)
        assert args.stage in STAGES


def test_the_memory_service_is_deployed_with_probes_and_a_service() -> None:
    served = _commands("serve")
    assert len(served) == 2, "in compose and on Kubernetes"
    for command in served:
        args = _parser().parse_args(command)
        assert (args.host, args.port) == ("0.0.0.0", 8080)
    (deployment,) = [
        d for d in _k8s() if d["kind"] == "Deployment" and d["metadata"]["name"] == "memory-service"
    ]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    services = [d for d in _k8s() if d["kind"] == "Service"]
    assert [s["metadata"]["name"] for s in services] == ["memory-service"]


def test_watcher_runs_as_a_single_replica() -> None:
    (watcher,) = [d for d in _k8s() if d["metadata"]["name"] == "watcher"]
    assert watcher["spec"]["replicas"] == 1
    assert watcher["spec"]["strategy"]["type"] == "Recreate"


def test_image_entrypoint_is_the_cli() -> None:
    """The container image runs the ``mongomem`` command (SPEC I3)."""
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["mongomem"]' in dockerfile

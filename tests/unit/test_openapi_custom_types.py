"""The OpenAPI document names the custom memory types project-config.yaml declares, at
concrete paths as the built-in types: a save takes the declared fields (the key's
required, the others optional); reads and deletions as for a built-in type."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI

from mongomem.service.app import make_app
from mongomem.settings import load_settings

CONFIG = """
memory:
  extraction:
    custom:
      - {name: preference, scope: user, key: [topic], fields: {topic: t, value: v},
         instructions: "Extract preferences."}
"""
USER = "/v1/users/{user_id}/memories"


def document(config: Path | None) -> dict[str, Any]:
    app: Any = make_app(load_settings(project_config=config))
    while not isinstance(app, FastAPI):  # under the service's middleware
        app = app.app
    built: dict[str, Any] = app.openapi()
    return built


def memory_type_enums(doc: dict[str, Any]) -> list[list[str]]:
    return [
        p["schema"].get("enum") or p["schema"]["anyOf"][0]["enum"]
        for item in doc["paths"].values()
        for operation in item.values()
        for p in operation.get("parameters", ())
        if p["name"] == "memory_type"
    ]


def test_a_declared_type_is_documented_at_its_own_paths(tmp_path: Path) -> None:
    path = tmp_path / "project-config.yaml"
    path.write_text(CONFIG)
    doc = document(path)
    paths = doc["paths"]
    assert set(paths[f"{USER}/preference"]) == {"get", "post"}  # a list and a save
    assert paths[f"{USER}/preference"]["get"]["operationId"] == "list_memories_preference"
    save = paths[f"{USER}/preference"]["post"]
    assert save["operationId"] == "save_preference"
    ref = save["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    body = doc["components"]["schemas"][ref.rsplit("/", 1)[1]]
    fields = body["properties"]["fields"]
    assert set(fields["properties"]) == {"topic", "value"}
    assert fields["required"] == ["topic"]  # the key; the value may be left out
    assert fields["additionalProperties"] is False
    assert "domain" not in body["properties"]
    assert set(paths[f"{USER}/preference/search"]) == {"post"}
    assert set(paths[f"{USER}/preference/{{key}}"]) == {"get", "delete"}
    assert "domain" not in {
        p["name"] for p in paths[f"{USER}/preference/search"]["post"].get("parameters", ())
    }
    assert set(paths[f"{USER}/semantic"]) == {"get", "post"}  # built-in types keep the save
    enums = memory_type_enums(doc)
    assert enums, "no memory_type parameter left to check"
    assert all("preference" in enum and "semantic" in enum for enum in enums)


def test_without_a_config_only_the_built_in_types_are_documented(tmp_path: Path) -> None:
    doc = document(None)
    assert not any("preference" in path for path in doc["paths"])
    assert all("preference" not in enum for enum in memory_type_enums(doc))
    # an unreadable config is the transport's error to tell; the document stays built-in
    assert document(tmp_path / "missing.yaml")["paths"] == doc["paths"]

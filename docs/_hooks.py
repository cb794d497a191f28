"""mkdocs hooks: the reference pages generated from the code, at build time.

A page holds a marker, and the build replaces it with what the code says now:

* ``<!-- mongomem:cli -->``: every ``mongomem`` command's ``--help``, from the argparse
  parser of :mod:`mongomem.cli.main`;
* ``<!-- mongomem:settings -->``: every ``MONGOMEM_*`` variable, its type and default,
  from the settings model (:mod:`mongomem.settings`);
* ``<!-- mongomem:openapi -->``: every route of the HTTP service, from its OpenAPI
  document (written beside the page as ``openapi.json``);
* ``<!-- mongomem:changelog -->``: ``CHANGELOG.md``.

Nothing here reaches the network: the app is built, never served.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MARKERS = ("cli", "settings", "openapi", "changelog")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    for name in MARKERS:
        marker = f"<!-- mongomem:{name} -->"
        if marker in markdown:
            markdown = markdown.replace(marker, GENERATORS[name]())
    return markdown


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    document = json.dumps(_openapi(), indent=2) + "\n"
    files.append(File.generated(config, "reference/openapi.json", content=document))
    return files


# --- the command line ------------------------------------------------------------------


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.append((name, sub))
    return found


def _cli() -> str:
    from mongomem.cli.main import _parser

    os.environ.setdefault("COLUMNS", "100")  # argparse wraps the help at this width
    parts: list[str] = []

    def walk(prefix: str, parser: argparse.ArgumentParser, depth: int) -> None:
        parts.append(f"{'#' * min(depth, 4)} `{prefix}`\n\n```text\n{parser.format_help()}```\n")
        for name, sub in _subcommands(parser):
            walk(f"{prefix} {name}", sub, depth + 1)

    walk("mongomem", _parser(), 2)
    return "\n".join(parts)


# --- the settings ----------------------------------------------------------------------


def _type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) or str(annotation)
    return text.replace("typing.", "").replace("pathlib.", "").replace("NoneType", "None")


def _default(field: Any) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "none"
    if isinstance(value, tuple | list | frozenset | set):
        return ",".join(str(v) for v in value) or "empty"
    if hasattr(value, "get_secret_value"):
        return "(secret)"
    return str(value)


def _variable(prefix: str, name: str, alias: Any) -> str:
    """The environment variable of a field: its alias that looks like one, else prefix+name."""
    choices = getattr(alias, "choices", None) or ([alias] if alias else [])
    for choice in choices:
        if isinstance(choice, str) and choice.startswith("MONGOMEM_"):
            return choice
    return f"{prefix}{name}".upper()


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _settings() -> str:
    from mongomem.settings import _GROUPS, Settings

    rows = ["| variable | type | default | meaning |", "|---|---|---|---|"]
    top = {name: field for name, field in Settings.model_fields.items() if name not in _GROUPS}
    for cls, fields in [(Settings, top)] + [(c, c.model_fields) for c in _GROUPS.values()]:
        prefix = str(cls.model_config.get("env_prefix", ""))
        for field_name, field in fields.items():
            variable = _variable(prefix, field_name, field.validation_alias)
            meaning = field.description or ""
            rows.append(
                f"| `{variable}` | `{_cell(_type_name(field.annotation))}` "
                f"| `{_cell(_default(field))}` | {_cell(meaning)} |"
            )
    return "\n".join(rows) + "\n"


# --- the HTTP API ----------------------------------------------------------------------


def _openapi() -> dict[str, Any]:
    from mongomem.adapters.embeddings import HashingEmbedder
    from mongomem.service import make_app
    from mongomem.settings import load_settings

    app: Any = make_app(load_settings(), embedder=HashingEmbedder(64))
    while not hasattr(app, "openapi"):  # the ASGI middleware around the FastAPI app
        app = app.app
    return dict(app.openapi())


def _openapi_table() -> str:
    document = _openapi()
    rows = ["| method | path | what it does |", "|---|---|---|"]
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            summary = operation.get("summary") or operation.get("operationId", "")
            rows.append(f"| `{method.upper()}` | `{path}` | {_cell(summary)} |")
    version = document.get("info", {}).get("version", "")
    head = f"OpenAPI {document.get('openapi', '')}, API version {version}.\n\n"
    return head + "\n".join(rows) + "\n"


# --- the changelog ---------------------------------------------------------------------


def _changelog() -> str:
    text = (ROOT / "CHANGELOG.md").read_text()
    return text.split("\n", 1)[1] if text.startswith("# ") else text


GENERATORS = {
    "cli": _cli,
    "settings": _settings,
    "openapi": _openapi_table,
    "changelog": _changelog,
}

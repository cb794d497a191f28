"""The documentation site builds with ``mkdocs build --strict``, offline, and its
generated reference pages say what the code says.

The build reads the package as installed (``mongomem`` = pipeline/, with stages/ as
``mongomem.stages``), laid out here the way ``make layout`` does for ``make docs``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).with_name("mkdocs")
#: A reference the browser would fetch: a script, a stylesheet, an image, a font, a frame.
ASSET = re.compile(
    r"""<(?:script|img|iframe|source|video|audio|embed)\b[^>]*\bsrc=["']?(https?:)?//"""
    r"""|<link\b[^>]*\bhref=["']?(https?:)?//"""
    r"""|url\(\s*["']?(https?:)?//""",
    re.IGNORECASE,
)


def _layout(folder: Path) -> Path:
    package = folder / "mongomem"
    package.mkdir(parents=True)
    for entry in (ROOT / "pipeline").iterdir():
        (package / entry.name).symlink_to(entry)
    (package / "stages").symlink_to(ROOT / "stages")
    return folder


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("docs")
    out = tmp / "site"
    env = {**os.environ, "DOCS_PACKAGE_PATH": str(_layout(tmp / "layout"))}
    env["NO_MKDOCS_2_WARNING"] = "1"
    done = subprocess.run(
        [str(MKDOCS), "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def test_the_site_fetches_nothing_from_elsewhere(site: Path) -> None:
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 20
    fetched = {}
    for page in pages:
        found = [m.group(0) for m in ASSET.finditer(page.read_text())]
        if found:
            fetched[str(page.relative_to(site))] = found
    for sheet in site.rglob("*.css"):
        found = [m.group(0) for m in ASSET.finditer(sheet.read_text())]
        if found:
            fetched[str(sheet.relative_to(site))] = found
    assert fetched == {}


def test_the_asset_check_sees_a_cdn_reference() -> None:
    for html in (
        '<script src="https://unpkg.com/mermaid.min.js"></script>',
        "<link rel=stylesheet href=//fonts.googleapis.com/css?family=Roboto>",
        '<img src="http://example.org/a.png">',
        "@import url('https://fonts.googleapis.com/css')",
    ):
        assert ASSET.search(html), html
    assert not ASSET.search('<a href="https://keepachangelog.com/">a link</a>')
    assert not ASSET.search('<img src="../assets/architecture.svg">')


def test_the_reference_is_generated_from_the_code(site: Path) -> None:
    cli = (site / "reference" / "cli" / "index.html").read_text()
    for command in ("mongomem serve", "mongomem erase", "mongomem dlq", "mongomem replay"):
        assert command in cli, command
    config = (site / "reference" / "configuration" / "index.html").read_text()
    for variable in ("MONGOMEM_MONGODB_URI", "MONGOMEM_ENABLED_EXTRACTIONS", "MONGOMEM_LLM_MODEL"):
        assert variable in config, variable
    openapi = json.loads((site / "reference" / "openapi.json").read_text())
    assert openapi["openapi"].startswith("3.")
    assert "/v1/users/{user_id}/context" in openapi["paths"]
    sdk = (site / "reference" / "sdk" / "index.html").read_text()
    assert "build_context" in sdk  # mkdocstrings read the SDK's docstrings
    assert (
        "mongomem.stages.runtime.ports"
        in (site / "reference" / "runtime" / "index.html").read_text()
    )

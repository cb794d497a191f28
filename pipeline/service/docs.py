"""``/docs``: Swagger UI served from the package, pinned, with no network (SPEC G5).

The page and its assets come from the ``swagger-ui-bundle-v2`` distribution
(Swagger UI |version|, Apache-2.0, its licence ships in the distribution),
pinned in the ``service`` extra; nothing is fetched from a CDN. The page has
no inline script (the initialiser is ``/docs/init.js``), so it is served under
the same Content-Security-Policy as the inspector's ``/ui`` (``'self'``
only): on the origin where ``/ui`` keeps its key, no third-party script runs.

=========================================  ==========================================
``GET /docs``                              the page (reads ``/openapi.json``)
``GET /docs/swagger-ui.css``               Swagger UI's stylesheet
``GET /docs/swagger-ui-bundle.js``         Swagger UI itself
``GET /docs/init.js``                      starts it on ``/openapi.json``
``GET /docs/favicon.png``                  its icon
=========================================  ==========================================
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from mongomem.extras import require
from mongomem.service.inspector import UI_HEADERS

with require("service"):
    from fastapi import APIRouter, Response

__all__ = ["SWAGGER_UI_VERSION", "docs_router"]

#: The Swagger UI the ``service`` extra pins (``swagger-ui-bundle-v2``).
SWAGGER_UI_VERSION = "5.31.0"

_PAGE = b"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>mongomem memory service - API</title>
<link rel="icon" type="image/png" href="/docs/favicon.png">
<link rel="stylesheet" href="/docs/swagger-ui.css">
</head>
<body>
<div id="swagger-ui"></div>
<script src="/docs/swagger-ui-bundle.js"></script>
<script src="/docs/init.js"></script>
</body>
</html>
"""

_INIT = b"""window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  deepLinking: true,
  presets: [SwaggerUIBundle.presets.apis],
  layout: "BaseLayout",
});
"""


def _static(body: bytes, media_type: str) -> Any:
    async def serve() -> Response:
        return Response(body, media_type=media_type, headers=UI_HEADERS)

    return serve


def docs_router() -> APIRouter:
    """The ``/docs`` routes (public, static, not in the OpenAPI document)."""
    with require("service"):
        dist = resources.files("swagger_ui_bundle") / "vendor" / f"swagger-ui-{SWAGGER_UI_VERSION}"
    files = {
        "/docs": (_PAGE, "text/html; charset=utf-8"),
        "/docs/init.js": (_INIT, "text/javascript"),
        "/docs/swagger-ui.css": ((dist / "swagger-ui.css").read_bytes(), "text/css"),
        "/docs/swagger-ui-bundle.js": (
            (dist / "swagger-ui-bundle.js").read_bytes(),
            "text/javascript",
        ),
        "/docs/favicon.png": ((dist / "favicon-32x32.png").read_bytes(), "image/png"),
    }
    router = APIRouter(include_in_schema=False)
    for path, (body, media_type) in files.items():
        router.add_api_route(path, _static(body, media_type), methods=["GET"], name=f"docs:{path}")
    return router

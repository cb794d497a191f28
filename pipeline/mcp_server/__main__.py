"""``python -m mongomem.mcp_server --project-id P --user-id U``."""

from __future__ import annotations

import sys

from mongomem.mcp_server.launch import main

sys.exit(main())

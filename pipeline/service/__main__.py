"""``python -m mongomem.service``: the memory service on its own."""

import sys

from mongomem.service.cli import main

sys.exit(main())

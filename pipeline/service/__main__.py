"""``python -m mongomem.service``: the memory service on its own."""

import sys

from mongomem.cli.service import main

sys.exit(main())

"""``python -m pipeline.service``: the memory service on its own."""

import sys

from pipeline.service.cli import main

sys.exit(main())

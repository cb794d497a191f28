"""``python -m mongomem.testing [--stand-in] [--host H] [--port N]``: serve until interrupted.

``--stand-in`` serves the product's stand-in (``python -m mongomem.local.llm_stand_in``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib

from mongomem.local.llm_stand_in import STAND_IN_BANNER, stand_in_server
from mongomem.local.llm_stand_in.server import OpenAICompatibleServer
from mongomem.testing.server import FakeOpenAIServer


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m mongomem.testing", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8089)
    parser.add_argument(
        "--stand-in", action="store_true", help="answer with the rule-based stand-in (NOT a model)"
    )
    args = parser.parse_args()
    if args.stand_in:
        server: OpenAICompatibleServer = stand_in_server(host=args.host, port=args.port)
        banner: str | None = STAND_IN_BANNER
    else:
        server = FakeOpenAIServer(host=args.host, port=args.port)
        banner = None
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(server.serve_forever(banner=banner))


if __name__ == "__main__":
    main()

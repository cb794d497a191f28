"""``python -m mongomem.local.llm_stand_in [--host H] [--port N]``: serve until interrupted."""

from __future__ import annotations

import argparse
import asyncio
import contextlib

from mongomem.local.llm_stand_in import STAND_IN_BANNER, stand_in_server


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m mongomem.local.llm_stand_in",
        description="The rule-based LLM stand-in (NOT a model) on an OpenAI-compatible port.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8089)
    args = parser.parse_args()
    server = stand_in_server(host=args.host, port=args.port)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(server.serve_forever(banner=STAND_IN_BANNER))


if __name__ == "__main__":
    main()

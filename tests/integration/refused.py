"""Start a command that must refuse to start; its exit status and stderr (helper for tests)."""

from __future__ import annotations

import asyncio
import os
import sys


async def refused_start(*argv: str, env: dict[str, str]) -> tuple[int | None, str]:
    """Run ``python <argv>`` (from this checkout); kill it if it serves instead of exiting."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *argv,
        env={**env, "PYTHONPATH": os.getcwd()},
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        _, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    finally:
        if process.returncode is None:  # it served: don't leave it listening
            process.kill()
            await process.wait()
    return process.returncode, stderr.decode().strip()

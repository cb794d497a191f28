"""The formatter runs over all of the code: nothing opts out of it."""

from __future__ import annotations

from pathlib import Path

import mongomem

ROOT = Path(mongomem.__file__).parent.parent
OPT_OUTS = ("# fmt: " + "skip", "# fmt: " + "off", "# yapf: " + "disable")


def test_no_code_opts_out_of_the_formatter() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for folder in ("pipeline", "stages", "tests", "bench")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if any(mark in line for mark in OPT_OUTS)
    ]
    assert found == []

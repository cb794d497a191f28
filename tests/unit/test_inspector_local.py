"""``mongomem up``'s way into the inspector: a local key made once, kept private, reused."""

from __future__ import annotations

import stat
from pathlib import Path

from mongomem.local.runner import INSPECTOR_KEY_FILE, LocalService, inspector_key


def test_the_local_key_is_made_once_private_and_reused(tmp_path: Path) -> None:
    key = inspector_key(tmp_path)
    path = tmp_path / INSPECTOR_KEY_FILE
    assert len(key) >= 16  # long enough for an environment key
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert inspector_key(tmp_path) == key
    assert inspector_key(tmp_path / ".." / tmp_path.name) == key


def test_up_serves_the_service_with_the_inspector(tmp_path: Path) -> None:
    service = LocalService(port=18099, state_dir=tmp_path, cache_dir=tmp_path)
    assert service._command()[-3:] == ["serve", "--port", "18099"]

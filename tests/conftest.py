"""Session setup shared by every test module."""

from __future__ import annotations

import contextlib
import os


def pytest_sessionstart(session) -> None:
    """Remove torch JIT build locks that a killed build left behind (older than preflight's stale age, with no
    compiler working in that directory): DeepSpeed's first `init_distributed` on the CPU builds its shm op, and a
    stale lock makes it wait forever, so the whole suite would hang instead of failing. `zerokit preflight` reports
    the same locks to users (check "torch extension locks")."""
    try:
        from zerokit.launch.preflight import STALE_LOCK_AGE_S, probe_building, probe_extension_locks
    except ImportError:
        return
    for path, age in probe_extension_locks():
        if age > STALE_LOCK_AGE_S and not probe_building(os.path.dirname(path)):
            with contextlib.suppress(OSError):
                os.unlink(path)
                print(f"conftest: removed a stale torch extension lock, {path} ({age / 60:.0f} min old)")

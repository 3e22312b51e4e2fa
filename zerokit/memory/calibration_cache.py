"""On-disk cache of activation calibrations, so a config is measured once per machine and library versions.

An entry is one JSON file named by the SHA-256 of its key: the config's content as canonical JSON, the attention
kernel, the dtype, the torch and transformers versions and the format version. The file repeats the key, so an
entry written for something else (a hash collision, a hand-copied file, another format) is told apart from a hit.

The cache is a convenience, never a failure: a missing, corrupt, foreign, oversized or non-regular entry reads as a
miss, and a directory that cannot be created or written means "compute, don't cache". Entries are written to a
temporary file in the same directory and renamed into place, so a reader never sees half a file.

Location: ``$ZEROKIT_CALIBRATION_DIR`` if set, else ``$XDG_CACHE_HOME/zerokit/calibration``, else
``~/.cache/zerokit/calibration``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["ENV_VAR", "cache_key", "default_dir", "entry_path", "load", "store"]

ENV_VAR = "ZEROKIT_CALIBRATION_DIR"
MAX_ENTRY_BYTES = 1 << 20  # a calibration is a few kB; anything bigger is not ours


def default_dir() -> Path | None:
    """Where calibrations live unless the caller names a directory; None where no home can be found (`~nosuchuser`,
    no HOME and a uid without a passwd entry): nothing is cached then, and calibrations are measured each time."""
    override = os.environ.get(ENV_VAR)
    try:
        if override:
            return Path(override).expanduser()
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = Path(xdg).expanduser() if xdg and os.path.isabs(os.path.expanduser(xdg)) else Path.home() / ".cache"
    except RuntimeError:  # pathlib: "Could not determine home directory."
        return None
    return root / "zerokit" / "calibration"


def cache_key(config: Mapping[str, Any], **parts: Any) -> dict[str, Any]:
    """The key material: the config itself (not a hash, so a hit can be checked field by field) plus ``parts``."""
    return {"config": json.loads(canonical_json(config)), **parts}


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace: equal content gives equal text whatever the key order of config.json."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)


def entry_path(key: Mapping[str, Any], directory: str | os.PathLike | None = None) -> Path | None:
    """The entry's file; None where there is no cache directory (`default_dir`)."""
    digest = hashlib.sha256(canonical_json(key).encode()).hexdigest()
    where = directory if directory is not None else default_dir()
    return None if where is None else Path(where) / f"{digest}.json"


def load(key: Mapping[str, Any], directory: str | os.PathLike | None = None) -> dict[str, Any] | None:
    """The stored payload for ``key``, or None for a miss of any kind (absent, unreadable, corrupt, foreign)."""
    path = entry_path(key, directory)
    if path is None:
        return None
    try:
        # O_NONBLOCK: a FIFO planted at the path must not hang the planner; fstat then rejects it
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_ENTRY_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            raw = f.read(MAX_ENTRY_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        entry = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("payload"), dict):
        return None
    if canonical_json(entry.get("key")) != canonical_json(key):
        return None  # written for another key: never trust it
    return entry["payload"]


def store(key: Mapping[str, Any], payload: Mapping[str, Any], directory: str | os.PathLike | None = None) -> bool:
    """Write the entry atomically; False (and nothing raised) when the directory cannot take it."""
    path = entry_path(key, directory)
    if path is None:
        return False
    text = json.dumps({"key": key, "payload": payload}, sort_keys=True, indent=1) + "\n"
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.parent.is_dir():
            return False
        with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=".tmp-", suffix=".json", delete=False,
                                         encoding="utf-8") as f:
            tmp = f.name
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        existing = _lstat(path)
        if existing is not None and not stat.S_ISREG(existing.st_mode):
            return False  # a directory, FIFO or link sits at the path: leave it alone
        os.replace(tmp, path)
        tmp = None
        return True
    except OSError:
        return False
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None

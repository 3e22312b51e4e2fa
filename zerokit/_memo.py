"""`IdentityMemo`: values remembered per object, for the planner's hot paths.

The planner asks the same questions of the same objects (a model's config dict, its ZeRO-3 module trace, a machine's
matmul curve) for every candidate of every plan; hashing their content each time showed in the profile. So the
answer is remembered under the object's id, with the object itself kept alive beside it: an id is never reused for
another object while it is remembered, and a hit is checked by identity.
"""

from __future__ import annotations

from typing import Any


class IdentityMemo:
    """A dict of key -> (object, value), cleared whole past `limit` entries (the objects are few: one per model or
    machine a session plans with). The key is `id(obj)`, or a tuple holding it and what else the value depends on."""

    __slots__ = ("_limit", "_store")

    def __init__(self, limit: int) -> None:
        self._store: dict[Any, tuple[Any, Any]] = {}
        self._limit = limit

    def get(self, key: Any, obj: Any) -> Any:
        """The value remembered under `key` for this very `obj`, or None."""
        hit = self._store.get(key)
        return hit[1] if hit is not None and hit[0] is obj else None

    def put(self, key: Any, obj: Any, value: Any) -> Any:
        """Remember `value` (never None) under `key` for `obj`; returns it."""
        if len(self._store) > self._limit:
            self._store.clear()
        self._store[key] = (obj, value)
        return value

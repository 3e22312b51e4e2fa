"""Model presets: public transformers config.json values, one file per model under zerokit/data/models/.

Each file is the model's config dict as published (the `_source` key says where), plus `_aliases`: hub ids and other
names the preset answers to. Keys starting with `_` are zerokit's, not the model's.
"""

from __future__ import annotations

import json
import os
from functools import cache, lru_cache
from typing import Any

from zerokit.errors import BadInput
from zerokit.units import closest

_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "models")

PRESET_NAMES: tuple[str, ...] = tuple(sorted(f[:-5] for f in os.listdir(_DIR) if f.endswith(".json")))
"""Canonical preset names: lowercase with dashes, e.g. `llama-2-7b`, `qwen2.5-7b`, `mixtral-8x7b`."""


@cache
def _raw(name: str) -> dict[str, Any]:
    with open(os.path.join(_DIR, name + ".json"), encoding="utf-8") as f:
        return json.load(f)


@lru_cache(maxsize=1)
def _alias_table() -> dict[str, str]:
    """Lowercased name or alias -> canonical preset name."""
    table: dict[str, str] = {}
    for name in PRESET_NAMES:
        table[name] = name
        for alias in _raw(name).get("_aliases", ()):
            table[alias.lower()] = name
            table.setdefault(alias.lower().rsplit("/", 1)[-1], name)  # `Llama-2-7b-hf` without its org
    return table


def find_preset(text: str) -> str | None:
    """The canonical preset name for a name or alias (case-insensitive), or None."""
    key = text.strip().lower()
    if key in PRESET_NAMES:  # the common case reads one file, not all of them (cold-start time)
        return key
    return _alias_table().get(key)


def load_preset(name: str) -> dict[str, Any]:
    """The preset's config dict (with `_source` and `_aliases`); raises BadInput naming the closest preset."""
    canonical = find_preset(name)
    if canonical is None:
        hint = " (other forms: a config.json path or a count like 7B)"
        raise BadInput(closest(name, PRESET_NAMES, "model preset") + hint)
    return dict(_raw(canonical))


def preset_source(name: str) -> str:
    return str(load_preset(name).get("_source", ""))

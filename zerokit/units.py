"""Sizes and counts as people write them: `80GB` is 10^9-based, `80GiB` 2^30-based, `7B` is 7e9."""

from __future__ import annotations

import difflib
import math
import re

from zerokit.errors import BadInput

_SIZE_UNITS = {
    "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50,
}
_COUNT_SUFFIXES = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}
_NUMBER = r"(?P<num>[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)"


def parse_size(text: str | int, what: str = "size") -> int:
    """Bytes from `80GB`, `80GiB`, `81920MiB` or a plain byte count. A bare `80G` is refused as ambiguous."""
    if isinstance(text, int):
        return _positive(text, what, text)
    s = str(text).strip().replace(" ", "").replace("_", "")
    m = re.fullmatch(_NUMBER + r"(?P<unit>[A-Za-z]*)", s)
    if not m:
        raise BadInput(f"{what} {text!r} is not a size; write it like 80GB (10^9 bytes) or 80GiB (2^30 bytes)")
    unit = m["unit"].lower()
    if unit == "":
        value = float(m["num"])
        if value != int(value):
            raise BadInput(f"{what} {text!r}: a plain number is a byte count and must be whole; or add a unit: 80GB, 80GiB")
        return _positive(int(value), what, text)
    if unit not in _SIZE_UNITS:
        hint = ""
        if unit in ("k", "m", "g", "t", "p"):
            hint = f"; did you mean {m['num']}{unit.upper()}B (10^n) or {m['num']}{unit.upper()}iB (2^n)?"
        else:
            close = difflib.get_close_matches(unit, _SIZE_UNITS, n=1)
            if close:
                hint = f"; did you mean {m['num']}{_canon(close[0])}?"
        raise BadInput(f"{what} {text!r} has an unknown unit {m['unit']!r}{hint}")
    return _positive(round(float(m["num"]) * _SIZE_UNITS[unit]), what, text)


def parse_count(text: str | int, what: str = "count") -> int:
    """A count from `7B`, `6.7e9`, `1M`, `500k` or `1000000`."""
    if isinstance(text, int):
        return _positive(text, what, text)
    s = str(text).strip().replace("_", "").replace(",", "")
    m = re.fullmatch(_NUMBER + r"(?P<suf>[A-Za-z]?)", s)
    if not m or m["suf"].lower() not in _COUNT_SUFFIXES:
        raise BadInput(f"{what} {text!r} is not a count; write it like 7B, 6.7e9, 1M or 500000")
    value = float(m["num"]) * _COUNT_SUFFIXES[m["suf"].lower()]
    if not math.isfinite(value):
        raise BadInput(f"{what} {text!r} is not a finite number")
    return _positive(round(value), what, text)


def parse_positive_int(text: str | int, what: str) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        raise BadInput(f"{what} must be a whole number >= 1, got {text!r}") from None
    return _positive(value, what, text)


def _positive(value: int, what: str, text: object) -> int:
    if value < 1:
        raise BadInput(f"{what} must be at least 1, got {text!r}")
    return value


def _canon(unit: str) -> str:
    return {"b": "B"}.get(unit, unit[0].upper() + unit[1:-1] + "B") if unit.endswith("b") else unit


def format_bytes(n: float, binary: bool = False) -> str:
    """`80.0 GB` (decimal, as GPU vendors sell it) or `74.5 GiB`."""
    base, units = (1024.0, ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]) if binary else (1000.0, ["B", "KB", "MB", "GB", "TB", "PB"])
    value, i = float(n), 0
    while abs(value) >= base and i < len(units) - 1:
        value /= base
        i += 1
    return f"{value:.0f} {units[i]}" if i == 0 else f"{value:.1f} {units[i]}"


def format_count(n: float) -> str:
    """`6.74B`, `124.4M` parameters."""
    for div, suf in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= div:
            return f"{n / div:.2f}{suf}" if div >= 1e9 else f"{n / div:.1f}{suf}"
    return str(int(n))


def closest(name: str, choices, what: str) -> str:
    """The error text for an unknown name, with the closest known one."""
    close = difflib.get_close_matches(name.lower(), [c.lower() for c in choices], n=1, cutoff=0.5)
    lookup = {c.lower(): c for c in choices}
    hint = f"; did you mean {lookup[close[0]]!r}?" if close else f"; known: {', '.join(sorted(choices))}"
    return f"unknown {what} {name!r}{hint}"

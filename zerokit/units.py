"""Sizes and counts as people write them: `80GB` is 10^9-based, `80GiB` 2^30-based, `7B` is 7e9."""

from __future__ import annotations

import functools
import math
import re
import sys
from typing import TYPE_CHECKING

from zerokit.errors import BadInput

if TYPE_CHECKING:
    from decimal import Decimal

_SIZE_UNITS = {
    "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50,
}
_COUNT_SUFFIXES = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}
_NUMBER = r"(?P<num>[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)"

MIN_GPU_MEMORY = 1 * 2**30
"""The smallest GPU memory zerokit plans or lints for: below this not even the CUDA context fits."""
LARGEST_GPU_BYTES = 288 * 10**9
"""The most memory one GPU has (NVIDIA B300, AMD MI355X: 288 GB): lint's bound for a bucket buffer without
--gpu-memory, and what its --gpu-memory ceiling is measured against."""
MAX_SIZE = 10**18
"""1 EB: above any GPU, host RAM or NVMe size; larger values are refused rather than computed with."""
MAX_COUNT = 10**18
"""Above any token, sample or parameter count anyone trains with."""
MAX_INT = 2**31 - 1
"""Default ceiling of a plain integer option (GPUs, nodes, sequence length, micro-batch)."""
MAX_GPUS_PER_NODE = 4096
"""Ranks on one node, for `plan --gpus-per-node` and a hostfile's slots alike (DeepSpeed lists every slot,
range(slots), so an absurd count is refused)."""


def _show(text: object) -> str:
    """The value as typed, shortened: a 5000-digit number would drown the message."""
    s = repr(str(text)) if not isinstance(text, int) or isinstance(text, bool) else str(text)
    return s if len(s) <= 40 else f"{s[:20]}...{s[-10:]} ({len(s)} characters)"


def _limit(maximum: int) -> str:
    """10^18 rather than 1,000,000,000,000,000,000."""
    exp = len(str(maximum)) - 1
    return f"10^{exp}" if maximum == 10**exp and exp >= 6 else f"{maximum:,}"


def _decimal(num: str) -> Decimal | None:
    """The number exactly (no float rounding, no overflow); None for one too long or too far out to be sane.

    decimal is imported here, not at the top: only sizes and counts need it, and most commands parse neither.
    """
    from decimal import Decimal

    exponent = num.lower().partition("e")[2].lstrip("+-")
    if len(num) > 400 or len(exponent) > 4:
        return None
    return Decimal(num)


def _whole(value: Decimal) -> int:
    """The nearest integer, ties to even (as `round` does), computed exactly."""
    from decimal import ROUND_HALF_EVEN

    return int(value.to_integral_value(ROUND_HALF_EVEN))


def parse_size(text: str | int, what: str = "size", maximum: int = MAX_SIZE) -> int:
    """Bytes from `80GB`, `80GiB`, `81920MiB` or a plain byte count. A bare `80G` is refused as ambiguous."""
    size = _size(text, what, maximum)
    if size < 1:
        raise BadInput(f"{what} {_show(text)} is {'0 bytes' if size == 0 else 'negative'}; give a size such as 80GB")
    return size


def _size(text: str | int, what: str, maximum: int) -> int:
    """`parse_size` before its lower bound, which each kind of size says in its own words."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text if text < 1 else _bounded(text, what, text, maximum)
    s = str(text).strip().replace(" ", "").replace("_", "")
    m = re.fullmatch(_NUMBER + r"(?P<unit>[A-Za-z]*)", s)
    if not m:
        raise BadInput(f"{what} {_show(text)} is not a size; write it like 80GB (10^9 bytes) or 80GiB (2^30 bytes)")
    unit = m["unit"].lower()
    if re.fullmatch(r"[KMGTP]i?b", m["unit"]):  # 80Gb: gigabits, as the bandwidth options read it
        raise BadInput(f"{what} {_show(text)} is in bits (a lowercase b, as in 100Gb/s); sizes are in bytes: did you "
                       f"mean {m['num']}{m['unit'][:-1]}B?")
    if unit and unit not in _SIZE_UNITS:
        hint = "; write it like 80GB (10^9 bytes) or 80GiB (2^30 bytes)"
        if unit in ("k", "m", "g", "t", "p"):
            hint = f"; did you mean {m['num']}{unit.upper()}B (10^n) or {m['num']}{unit.upper()}iB (2^n)?"
        else:
            import difflib  # only for this message: most runs never need it

            # not the bare "b" for a two-letter typo: `80XB` -> `80B` is 80 bytes, which nothing means
            close = difflib.get_close_matches(unit, [u for u in _SIZE_UNITS if len(u) > 1 or len(unit) == 1], n=1)
            if close:
                hint = f"; did you mean {m['num']}{_canon(close[0])}?"
        raise BadInput(f"{what} {_show(text)} has an unknown unit {m['unit']!r}{hint}")
    value = _decimal(m["num"])
    if value is None or value * _SIZE_UNITS[unit or "b"] > maximum:
        raise BadInput(f"{what} {_show(text)} is too large; at most {_limit(maximum)} bytes")
    if unit == "" and value != value.to_integral_value():
        raise BadInput(f"{what} {_show(text)}: a plain number is a byte count and must be whole; or add a unit: "
                       "80GB, 80GiB")
    size = _whole(value * _SIZE_UNITS[unit or "b"])
    return size if size < 1 else _bounded(size, what, text, maximum)


def parse_gpu_memory(text: str | int, what: str = "--gpu-memory") -> int:
    """A GPU's memory (`parse_size`), at least MIN_GPU_MEMORY: `80` is 80 bytes, a size without its unit."""
    memory = _size(text, what, MAX_SIZE)  # 0GB is below 1 GiB as 0.5GB is
    _refuse_unitless(text, memory, what, ", below 1 GiB")
    if memory < MIN_GPU_MEMORY:
        raise BadInput(f"{what} {text!r} is below 1 GiB: not even the CUDA context fits; give the GPU's memory with "
                       "a unit, e.g. 80GB or 81920MiB")
    return memory


MAX_GPU_MEMORY = 2**40
"""The most a --gpu-memory option may say one GPU has (1 TiB, well above LARGEST_GPU_BYTES): a larger value is a
typo (80TB for 80GB) that would plan every setup to fit."""


def parse_gpu_memory_option(text: str, what: str = "--gpu-memory") -> int:
    """`parse_gpu_memory` of a value a user typed, bounded by what a GPU can have (plan and lint alike; a probe
    profile's host RAM, which a CPU plan shares out among its ranks, is not bounded by it)."""
    memory = parse_gpu_memory(text, what)
    if memory > MAX_GPU_MEMORY:
        raise BadInput(f"{what} {_show(text)} is more than a GPU has; at most 1TiB (the largest GPU has "
                       f"{LARGEST_GPU_BYTES // 10**9} GB): give the memory of one GPU, e.g. 80GB")
    return memory


def parse_host_size(text: str | int, what: str) -> int:
    """Host RAM or NVMe space (`parse_size`). A plain number is a byte count, and one below 1 GiB is a size whose
    unit was left out (`--cpu-memory 64` meant 64GB, and planned against 64 bytes): refused, as --gpu-memory
    refuses it."""
    size = parse_size(text, what)
    _refuse_unitless(text, size, what)
    return size


def _refuse_unitless(text: str | int, size: int, what: str, below: str = "") -> None:
    """BadInput for a plain number typed (not an int from code) that reads below 1 GiB: a size whose unit was left
    out (`--gpu-memory 80`, `--cpu-memory 64`), which one message names for every option; `below` adds to it."""
    if size < MIN_GPU_MEMORY and not isinstance(text, int) and re.fullmatch(_NUMBER, str(text).strip()):
        typed = str(text).strip()
        raise BadInput(f"{what} {_show(text)} is {size:,} bytes{below}: a plain number is a byte count; give the "
                       f"unit, e.g. {typed}GB or {typed}GiB")


def parse_reserve(text: str | int, what: str) -> int:
    """A memory reserve: 0 (with or without a unit) for none, else as `parse_host_size` (a plain number below 1 GiB
    is a size whose unit was left out)."""
    if _size(text, what, MAX_SIZE) == 0:
        return 0
    return parse_host_size(text, what)


def parse_count(text: str | int, what: str = "count", maximum: int = MAX_COUNT, whole: bool = False) -> int:
    """A count from `7B`, `6.7e9`, `1M`, `500k` or `1000000`. With `whole`, `2.5` is refused instead of rounded
    (a number of samples); `1.5k` = 1500 is still fine."""
    if isinstance(text, int) and not isinstance(text, bool):
        return _bounded(text, what, text, maximum)
    s = str(text).strip().replace("_", "").replace(",", "").replace(" ", "")  # `7 B` as sizes take `80 GB`
    m = re.fullmatch(_NUMBER + r"(?P<suf>[A-Za-z]?)", s)
    if not m or m["suf"].lower() not in _COUNT_SUFFIXES:
        raise BadInput(f"{what} {_show(text)} is not a count; write it like 7B, 6.7e9, 1M or 500000")
    value = _decimal(m["num"])
    if value is None:
        raise BadInput(f"{what} {_show(text)} is too large; at most {_limit(maximum)}")
    value *= _COUNT_SUFFIXES[m["suf"].lower()]
    if value > maximum:
        raise BadInput(f"{what} {_show(text)} is too large; at most {_limit(maximum)}")
    if whole and value != value.to_integral_value():
        raise BadInput(f"{what} {_show(text)} is not a whole number; give a whole count such as {int(value) or 1}")
    return _bounded(_whole(value), what, text, maximum)


def parse_positive_int(text: str | int, what: str, maximum: int = MAX_INT) -> int:
    """A whole number in [1, maximum], written with ASCII digits (`int()` would also take `²`-like digits)."""
    if isinstance(text, int) and not isinstance(text, bool):
        return _bounded(text, what, text, maximum)
    s = str(text).strip().replace("_", "")
    if not re.fullmatch(r"[+-]?[0-9]+", s):
        raise BadInput(f"{what} must be a whole number >= 1, got {_show(text)}")
    digits = s.lstrip("+-").lstrip("0")
    if len(digits) > len(str(maximum)):
        raise BadInput(f"{what} {_show(text)} is too large; at most {_limit(maximum)}")
    return _bounded(int(s), what, text, maximum)


def _bounded(value: int, what: str, text: object, maximum: int) -> int:
    if value < 1:
        raise BadInput(f"{what} must be at least 1, got {_show(text)}")
    if value > maximum:
        raise BadInput(f"{what} {_show(text)} is too large; at most {_limit(maximum)}")
    return value


def finite_number(value: object) -> bool:
    """Whether a JSON value is a number (not true or false) that is finite as a float. An integer of 400 digits is
    one to JSON, and `math.isfinite` raises OverflowError on it."""
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) <= sys.float_info.max


def parse_finite(value: float, what: str, minimum: float | None = None, maximum: float | None = None,
                 exclusive_minimum: bool = False) -> float:
    """A float option that must be a real number in range: `nan` and `inf` would reach the config as NaN/Infinity."""
    if not math.isfinite(value):
        raise BadInput(f"{what} must be a finite number, got {value}")
    if minimum is not None and (value < minimum or (exclusive_minimum and value == minimum)):
        raise BadInput(f"{what} must be {'>' if exclusive_minimum else '>='} {minimum:g}, got {value:g}")
    if maximum is not None and value > maximum:
        raise BadInput(f"{what} must be at most {maximum:g}, got {value:g}")
    return value


def _canon(unit: str) -> str:
    return {"b": "B"}.get(unit, unit[0].upper() + unit[1:-1] + "B") if unit.endswith("b") else unit


_BINARY_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
_DECIMAL_UNITS = ("B", "KB", "MB", "GB", "TB", "PB")


@functools.lru_cache(maxsize=4096)
def format_bytes(n: float, binary: bool = False) -> str:
    """`80.0 GB` (decimal, as GPU vendors sell it) or `74.5 GiB`. Memoised: a plan prints the same hardware's and
    buffers' sizes as every plan before it of that machine."""
    base, units = (1024.0, _BINARY_UNITS) if binary else (1000.0, _DECIMAL_UNITS)
    value = float(n)
    if not abs(round(value, 0)) >= base:
        return f"{value:.0f} B"
    # by the value as printed: 999,960 bytes is `1.0 MB`, not `1000.0 KB`
    value /= base
    i = 1
    while i < 5 and abs(round(value, 1)) >= base:
        value /= base
        i += 1
    return f"{value:.1f} {units[i]}"


def format_count(n: float) -> str:
    """`6.74B`, `124.4M` parameters."""
    for div, suf in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        digits = 2 if div >= 1e9 else 1
        # by the value as printed (999,960 is `1.0M`, not `1000.0K`); below 1,000 the exact count
        if abs(n) >= div or (div > 1e3 and abs(round(n / div, digits)) >= 1):
            return f"{n / div:.{digits}f}{suf}"
    return str(int(n))


def format_rate(x: float) -> str:
    """Tokens per second in text: `34,500`, `12.3`, `0.293` (whole numbers from 100 up, else three significant
    figures: a 7B model planned on a CPU trains a fraction of a token a second, which printed as `0`)."""
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def format_seconds(t: float) -> str:
    """A step or a run: `850 ms`, `1.90 s`, `3.2 h`, `12.4 days`."""
    # each unit by the value as printed: 0.9996 s is `1.00 s`, not `1000 ms`; 99.996 s `1.7 min`, not `100.00 s`
    if t < 0.00995:
        return f"{t * 1000:.2f} ms"
    if round(t * 1000) < 1000:
        return f"{t * 1000:.0f} ms"
    if round(t, 2) < 100:
        return f"{t:.2f} s"
    if round(t / 60, 1) < 60:
        return f"{t / 60:.1f} min"
    if round(t / 3600, 1) < 48:
        return f"{t / 3600:.1f} h"
    return f"{t / 86400:,.1f} days"


def closest(name: str, choices, what: str, cutoff: float = 0.5) -> str:
    """The error text for an unknown name, with the closest known one (difflib's ratio at least `cutoff`)."""
    import difflib  # an error path: a run that succeeds never imports it

    close = difflib.get_close_matches(name.lower(), [c.lower() for c in choices], n=1, cutoff=cutoff)
    lookup = {c.lower(): c for c in choices}
    hint = f"; did you mean {lookup[close[0]]!r}?" if close else f"; known: {', '.join(sorted(choices))}"
    return f"unknown {what} {name!r}{hint}"

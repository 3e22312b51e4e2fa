"""Derive the engine figures of every committed probe profile again from its own measurements, under today's
time model, and write what moved.

    python benchmarks/rederive_profiles.py            # print what would move
    python benchmarks/rederive_profiles.py --write    # rewrite those figures in tests/data/**/profile.json

A probe writes its engine figures (`compute_scale`, `bucket_flush_s`, `zero3_module_overhead_s`, the host's) as the
time model of its day derived them from the step times it measured (`zerokit.perf.probe.engine_figures`), and
`tests/test_probe_cli.py` holds every committed profile to today's derivation: a model change that moves them
(2026-11-28: the bucket flushes counted as DeepSpeed flushes, `zerokit.perf.model.flushes`) fails there until the
profiles are derived again. This rewrites only those figures: each `engine_step`'s, and the profile's own
`bucket_flush_s`, `zero3_module_overhead_s` and `host_flush_s` (a median profile of several rounds,
benchmarks/step_time.py's: the median over its rounds, as it was made). The measurements are left as they are.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from zerokit.fileio import write_atomic
from zerokit.perf.probe import LINEAR_FREE_FIGURES, engine_figures_again

TOP = ("bucket_flush_s", "zero3_module_overhead_s", "host_flush_s")


def refigure(m: dict) -> bool:
    """`m`'s engine_step figures derived again in place (those it holds); False where it has no reference steps to
    derive from. A probe from before the timed linears (2026-11-23's) gets its `LINEAR_FREE_FIGURES` again, its
    compute scale kept."""
    figures = engine_figures_again(m)
    keys: tuple[str, ...] | None = None
    if figures is None:
        figures, keys = engine_figures_again(m, linears=False), LINEAR_FREE_FIGURES
    if figures is None:
        return False
    e = m["engine_step"]
    e.update({k: v for k, v in figures.items() if k in e and k not in ("model", "linears")
              and (keys is None or k in keys)})
    return True


def rederive(data: dict) -> list[str]:
    """`data` (a profile) with its engine figures derived again in place; what moved, a line each."""
    m, moved = data.get("measurements") or {}, []
    if "rounds" in m:
        derived = [refigure(r) for r in m["rounds"]]  # every round, not up to the first that has reference steps
        if not any(derived):
            return []
        engines = [r["engine_step"] for r in m["rounds"] if r.get("engine_step")]
        new = {k: statistics.median(e[k] for e in engines if k in e) for k in TOP[:2]}
    elif refigure(m):
        new = {k: m["engine_step"][k] for k in TOP if k in m["engine_step"]}
    else:
        return []
    for k, v in new.items():
        if k in data and abs(data[k] - v) > 1e-12 * max(abs(v), 1e-6):
            moved.append(f"{k} {data[k] * 1e6:,.0f} -> {v * 1e6:,.0f} us")
            data[k] = v
    return moved


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--write", action="store_true", help="rewrite the profiles (default: print what would move)")
    args = p.parse_args()
    for path in sorted((ROOT / "tests" / "data").glob("**/profile.json")):
        data = json.loads(path.read_text())
        moved = rederive(data)
        if moved:
            print(f"{path.relative_to(ROOT)}: {'; '.join(moved)}")
            if args.write:
                write_atomic(str(path), json.dumps(data, indent=1) + "\n", "probe profile", force=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

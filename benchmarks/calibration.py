#!/usr/bin/env python3
"""Held-out families: generic and calibrated activations against measure_activations.py, and calibration time.

Run: python benchmarks/calibration.py [--live] [--timing] [--family NAME]

The accuracy table comes from tests/data/calibrate/golden.json by default: the real measurements of
``measure_activations.py`` on miniatures of real checkpoints (4-6 layers, real depth for the extrapolation), and the
traced probes the calibration is solved from (regenerate both with tests/data/calibrate/regenerate.py). ``--live``
traces and measures again instead (minutes). "generic" is ``estimate_activations``' llama-like fallback for an
unknown model_type; "calibrated" is ``zerokit.memory.calibrate.calibrated_activations``.

``--timing`` calibrates tests/data/calibrate/olmo2-7b.json (OLMo-2-1124-7B's published config.json), a
Llama-3-70B-wide config with a 150k vocabulary and the tiny olmo2 miniature, each in a fresh process: cold (empty
cache: the call imports torch and transformers, then traces) and cached (the same cache directory again: the call
reads one file and imports neither library). "tracing" is the part of the cold call after the imports.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from zerokit.memory.activations import estimate_activations
from zerokit.memory.calibrate import CalibratedActivations

DATA = ROOT / "tests" / "data" / "calibrate"
FAMILIES = json.loads((DATA / "families.json").read_text())
GOLDEN = json.loads((DATA / "golden.json").read_text())

WIDE_70B = {"model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672, "num_attention_heads": 64,
            "num_key_value_heads": 8, "num_hidden_layers": 80, "vocab_size": 152064,
            "max_position_embeddings": 8192, "rope_theta": 500000.0}
TIMED = {"olmo2-7b (32 layers, vocab 100k)": json.loads((DATA / "olmo2-7b.json").read_text()),
         "llama-70b-wide (80 layers, vocab 152k)": WIDE_70B,
         "olmo2 miniature (4 layers)": FAMILIES["olmo2"]["config"]}


def _pct(pred: int, meas: int) -> str:
    return f"{100.0 * (pred - meas) / meas:+.1f} %"


def accuracy(families: list[str] | None, live: bool) -> None:
    print("| family | attention | dtype | seq | micro-batch | checkpointing | measured | generic | calibrated |")
    print("|---|---|---|---:|---:|---|---:|---:|---:|")
    worst: dict[str, tuple[float, float]] = {}
    for case in GOLDEN["cases"]:
        fam, att, dtype = case["family"], case["attention"], case["dtype"]
        if families and fam not in families:
            continue
        config = FAMILIES[fam]["config"]
        if live:
            from zerokit.memory.calibrate import calibrated_activations, measure

            cal = calibrated_activations(config, attention=att, dtype=dtype, use_cache=False)
            points = [(s, b, ck, measure(config, s, b, att, dtype, ck, backward=False)["activations"])
                      for s, b, ck, _ in case["measured"]]
        else:
            cal = CalibratedActivations.from_dict(case["calibration"], config)
            points = case["measured"]
        for s, b, ck, meas in points:
            gen = estimate_activations(config, s, b, attention=att, dtype=dtype, gradient_checkpointing=ck).activations
            calv = cal.activations(s, b, ck)
            w = worst.get(fam, (0.0, 0.0))
            worst[fam] = (max(w[0], abs(gen - meas) / meas), max(w[1], abs(calv - meas) / meas))
            print(f"| {fam} | {att} | {dtype} | {s} | {b} | {'on' if ck else 'off'} | {meas / 2**20:,.2f} MiB "
                  f"| {_pct(gen, meas)} | {'exact' if calv == meas else _pct(calv, meas)} |", flush=True)
    print()
    print("| family | source | max abs error, generic | max abs error, calibrated |")
    print("|---|---|---:|---:|")
    for fam, (g, c) in worst.items():
        print(f"| {fam} | {FAMILIES[fam]['source']} | {100 * g:.1f} % | {100 * c:.2f} % |")
    print(f"\nmeasured with {GOLDEN['measured_with']} ({'live' if live else 'golden.json'}), "
          f"torch {GOLDEN['versions']['torch']}, transformers {GOLDEN['versions']['transformers']}")


_CHILD = """
import json, sys, time
t0 = time.perf_counter()
from zerokit.memory.calibrate import calibrated_activations
cal = calibrated_activations(json.loads(sys.argv[1]), cache_dir=sys.argv[2])
print(json.dumps({"seconds": time.perf_counter() - t0, "traced": cal.seconds, "cached": cal.cached,
                  "exact": cal.exact, "runs": len(cal.probes) + len(cal.checks)}))
"""


def timing() -> None:
    print("| config | cache | process wall | calibrated_activations() | tracing (when traced) | traced passes | exact |")
    print("|---|---|---:|---:|---:|---:|---|")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for name, config in TIMED.items():
        with tempfile.TemporaryDirectory() as cache:
            for label in ("cold", "cached"):
                t0 = time.perf_counter()
                out = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(config), cache], env=env,
                                     capture_output=True, text=True, check=True).stdout
                wall = time.perf_counter() - t0
                r = json.loads(out.strip().splitlines()[-1])
                assert r["cached"] == (label == "cached"), r
                print(f"| {name} | {label} | {wall:.1f} s | {r['seconds']:.2f} s | "
                      f"{r['traced']:.1f} s | {r['runs']} | {r['exact']} |", flush=True)
    print(f"\nload average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--live", action="store_true", help="trace and measure again instead of reading golden.json")
    ap.add_argument("--timing", action="store_true", help="also time calibrations of 7B/70B-wide configs")
    ap.add_argument("--family", action="append", choices=sorted(k for k in FAMILIES if not k.startswith("_")))
    a = ap.parse_args()
    accuracy(a.family, a.live)
    if a.timing:
        print()
        timing()
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Regenerate golden.json: held-out families calibrated on fake tensors, and the same configs measured for real.

Run from the repository root (about 10 minutes on 2 CPU cores):

    .venv/bin/python tests/data/calibrate/regenerate.py [--script ../shared/measure_activations.py]

For each family in families.json, each attention kernel and dtype listed in CASES, it stores

- ``calibration``: ``zerokit.memory.calibrate.calibrated_activations(...).to_dict()``, the traced probes from which
  the extrapolation is solved (what the cache stores);
- ``measured``: ``[seq_len, micro_batch, gradient_checkpointing, bytes]`` from the ground-truth script
  ``measure_activations.py`` (imported from --script; zerokit's copy of its logic,
  ``zerokit.memory.calibrate.measure``, when the script is not there), run on the real model at its real depth.

``--resume`` keeps the cases already written (the file is rewritten after each case); ``--family`` redoes some.

``tests/test_calibrate.py`` checks without torch that the calibration reproduces every measured value, and re-traces
a sample live in a slow test. Each real measurement runs in a forked child, as benchmarks/activations.py does.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import multiprocessing
import re
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from zerokit.memory.calibrate import CalibrationUnavailable, calibrated_activations

HERE = Path(__file__).resolve().parent
FAMILIES = json.loads((HERE / "families.json").read_text())
# (family, attention, dtype): every family with both CPU kernels in bf16, plus fp32 and fp16 spot checks
CASES = [(f, a, "bf16") for f in FAMILIES if not f.startswith("_") for a in ("sdpa", "eager")]
CASES += [("olmo2", "sdpa", "fp32"), ("olmoe", "eager", "fp16")]
# (seq_len, micro_batch) measured with and without checkpointing; windowed configs add their window edge
SHAPES = [(96, 1), (300, 2), (512, 1), (512, 4), (768, 3)]
MEMORY_LIMIT = 12 * 2**30


def _load_measure(script: Path):
    if script.is_file():
        spec = importlib.util.spec_from_file_location("measure_activations", script)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod.measure, str(script.name)
    from zerokit.memory.calibrate import measure

    return measure, "zerokit.memory.calibrate.measure"


def _child(script: str, args: tuple) -> int:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    import transformers

    transformers.logging.set_verbosity_error()
    measure, _ = _load_measure(Path(script))
    return measure(*args)["activations"]


def measure_real(script: Path, config: dict, seq: int, batch: int, attention: str, dtype: str, ckpt: bool) -> int:
    with multiprocessing.get_context("fork").Pool(1, maxtasksperchild=1) as pool:
        return pool.apply(_child, (str(script), (config, seq, batch, attention, dtype, ckpt)))


def _write(path: Path, source: str, cases: list[dict]) -> None:
    import torch
    import transformers

    out = {"_generated_by": "python tests/data/calibrate/regenerate.py", "measured_with": source,
           "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
           "cases": sorted(cases, key=lambda c: (c["family"], c["attention"], c["dtype"]))}
    text = json.dumps(out, indent=1)
    # one line per probe and per measurement: lists of numbers are written flat
    text = re.sub(r"\[\s+([^\[\]{}\"]*?)\s+\]", lambda m: "[" + ", ".join(x.strip() for x in m[1].split(",")) + "]", text)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text + "\n")
    tmp.replace(path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--script", type=Path, default=ROOT.parent / "shared" / "measure_activations.py")
    ap.add_argument("--family", action="append", help="only these (repeatable); others are kept from golden.json")
    ap.add_argument("--resume", action="store_true",
                    help="keep cases already in the output whose config is unchanged (an interrupted run goes on)")
    ap.add_argument("--recalibrate-only", action="store_true",
                    help="trace the calibrations again but keep the measurements of unchanged configs (after a "
                         "change to the tracer or its probe plan; the real runs do not depend on either)")
    ap.add_argument("--out", type=Path, default=HERE / "golden.json")
    a = ap.parse_args()
    _, source = _load_measure(a.script)
    done = {(c["family"], c["attention"], c["dtype"]): c
            for c in (json.loads(a.out.read_text())["cases"] if a.out.is_file() else [])}
    cases = []
    for fam, att, dtype in CASES:
        config = FAMILIES[fam]["config"]
        old = done.get((fam, att, dtype))
        if (a.family and fam not in a.family) or (a.resume and old and old.get("config") == config):
            if old:
                cases.append(old)
            continue
        t0 = time.perf_counter()
        try:
            cal = calibrated_activations(config, attention=att, dtype=dtype, use_cache=False)
        except CalibrationUnavailable as exc:
            print(f"{fam} {att} {dtype}: not calibrated: {exc}")
            continue
        measured = []
        kept = {(s, b, ck): v for s, b, ck, v in old["measured"]} if a.recalibrate_only and old and (
            old.get("config") == config) else {}
        for s, b in list(SHAPES) + [(w, 2) for w in cal.windows]:
            for ckpt in (False, True):
                value = kept.get((s, b, ckpt)) or measure_real(a.script, config, s, b, att, dtype, ckpt)
                measured.append([s, b, ckpt, value])
                err = cal.activations(s, b, ckpt) - value
                print(f"{fam:12} {att:5} {dtype} seq {s:4} mb {b} ckpt {ckpt!s:5} measured {value:>11} "
                      f"calibrated {'=' if err == 0 else f'{err:+d}'}", flush=True)
        cases.append({"family": fam, "attention": att, "dtype": dtype, "config": config,
                      "calibration": cal.to_dict(), "measured": measured})
        print(f"{fam} {att} {dtype}: {time.perf_counter() - t0:.0f} s")
        _write(a.out, source, cases)  # after every case: an interrupted run keeps what it measured
    _write(a.out, source, cases)
    print(f"wrote {a.out} ({len(cases)} cases)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How fast `zerokit lint` is for CI: 500 configs in one cold call (target < 2 s wall), and a one-file cold start.

    python benchmarks/lint_speed.py              # 500 configs, 5 runs each, median
    python benchmarks/lint_speed.py --configs 2000 --runs 3

The configs are written to a temporary folder: the shipped example ds_configs, plan-style resolved configs and
broken variants (typos, wrong stage, "auto" for deepspeed, HJSON, Accelerate YAML with its ds_config), so the
rules and the did-you-mean search run, not just the parser. Each run is a fresh `python -m zerokit lint` process
with all files on one command line, as a pre-commit hook or CI step calls it; the wall time includes start-up.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET_S = 2.0

RESOLVED = {
    "train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
    "gradient_clipping": 1.0, "bf16": {"enabled": True},
    "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": True},
                          "overlap_comm": True, "contiguous_gradients": True, "reduce_bucket_size": 16777216,
                          "stage3_prefetch_bucket_size": 15099494, "stage3_param_persistence_threshold": 40960,
                          "stage3_gather_16bit_weights_on_model_save": True},
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-5, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 1e-5, "warmup_num_steps": 10}},
}
BROKEN = [
    {"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}, "overlap_com": True}},
    {"train_batch_size": "auto", "fp16": {"enabled": True}, "bf16": {"enabled": True}},
    {"optimizer": {"type": "AdamWW", "params": {"lr": 1e-4, "max_grad_norm": 1.0}}, "amp": {"enabled": True}},
    {"activation_checkpointing": {"partitioned_activations": True, "cpu_checkpointing": "false"},
     "scheduler": {"type": "WarmupLinear"}, "wall_clock_breakdwon": True},
]
HJSON = "{\n  // hjson\n  train_micro_batch_size_per_gpu: 2\n  zero_optimization: {\n    stage: 2\n  }\n}\n"
YAML = ("distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: {name}\n"
        "  zero3_init_flag: true\nnum_processes: 8\n")


def write_configs(folder: str, n: int) -> list[str]:
    examples = []
    for name in sorted(os.listdir(os.path.join(ROOT, "examples", "configs"))):
        if name.endswith(".json"):
            with open(os.path.join(ROOT, "examples", "configs", name), encoding="utf-8") as f:
                examples.append(json.load(f))
    kinds = examples + [RESOLVED] + [dict(RESOLVED, **b) for b in BROKEN]
    paths = []
    for i in range(n):
        k = i % (len(kinds) + 2)
        if k == len(kinds):
            path = os.path.join(folder, f"{i:04d}_ds_config.hjson")
            text = HJSON
        elif k == len(kinds) + 1:
            path = os.path.join(folder, f"{i:04d}_accelerate.yaml")
            text = YAML.format(name=f"{i - 1:04d}_ds_config.hjson")
        else:
            path = os.path.join(folder, f"{i:04d}_ds_config.json")
            text = json.dumps(kinds[k], indent=2)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        paths.append(path)
    return paths


def timed(argv: list[str]) -> tuple[float, subprocess.CompletedProcess, float]:
    """(wall seconds, the process, its CPU seconds): on a shared machine the wall clock counts others' time too."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, proc, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", type=int, default=500)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        paths = write_configs(folder, args.configs)
        many = [sys.executable, "-m", "zerokit", "lint", "--target", "deepspeed", "--world-size", "8",
                "--gpu-memory", "80GB", "--format", "json", *paths]
        one = [sys.executable, "-m", "zerokit", "lint", os.path.join(ROOT, "examples", "configs",
                                                                      "zero2_ds_config.json")]
        timed(one)  # warm the OS file cache and .pyc files
        walls, cpus, cold = [], [], []
        for _ in range(args.runs):
            wall, proc, cpu = timed(many)
            assert proc.returncode in (1, 2), proc.stderr
            walls.append(wall)
            cpus.append(cpu)
            cold.append(timed(one)[0])
        findings = json.loads(proc.stdout)
    median = statistics.median(walls)
    rows = [
        ("configs in one call", f"{args.configs}"),
        ("findings", f"{len(findings)}"),
        (f"wall, median of {args.runs} (s)", f"{median:.3f}"),
        ("wall, best (s)", f"{min(walls):.3f}"),
        ("CPU time of the process, median (s)", f"{statistics.median(cpus):.3f}"),
        ("per config (ms)", f"{1000 * median / args.configs:.2f}"),
        ("cold start, 1 clean file (s)", f"{statistics.median(cold):.3f}"),
        (f"target < {TARGET_S:.0f} s", "met" if median < TARGET_S else "MISSED"),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"zerokit lint speed ({platform.python_implementation()} {platform.python_version()}, "
          f"{platform.machine()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f})")
    for name, value in rows:
        print(f"  {name:<{width}}  {value:>10}")
    return 0 if median < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())

"""How fast the planner is: in-process plans per second, and a cold `zerokit plan` against `import click`.

    python benchmarks/plan_speed.py            # both parts, 11 cold runs each (DeepSpeed's estimator 5)
    python benchmarks/plan_speed.py --runs 21 --seconds 5 --deepspeed-runs 0

In-process: every preset model x a mix of hardware x two sequence lengths, models resolved beforehand (that is
the CLI's job), `plan()` timed alone, which includes the activation model and the step-time model (the ds_config is
the caller's to build). Every round plans inputs the process has not planned before: both sequence lengths (one
even, one odd) move up by 2 tokens a round, so a memo keyed on the inputs (the step-time model keeps one) cannot
turn a repeated plan into a lookup. Only what does not depend on the sequence is shared across rounds, as it is
across the plans of a real session: the model's FLOP and parameter tables, and each setup's memory apart from
activations on the same hardware (`Context.share_setups`: full training's model states, buffers and host memory). A model with learned positions refuses a longer sequence
(gpt2's 1,024, opt's 2,048: `check_positions`, bad input), so its two lengths are its own longest and one less, moving
down by 2 tokens a round instead (anew after about limit/2 rounds, 512 for gpt2). The target is >= 10,000 plans per
CPU second.

Cold: a fresh `python -m zerokit plan ... --format json` against a fresh `python -c "import click"`, alternated,
median of N wall times. The target (issue 9) is zerokit <= 1.5x click's time: a cold plan should cost little more than
the CLI framework it is built on. As extra information, a fresh interpreter running DeepSpeed's
`estimate_zero3_model_states_mem_needs_all_cold` for the same model and GPUs, in the same alternation (the earlier
target, zerokit <= 0.25x DeepSpeed's time: its estimator needs `import deepspeed`, which imports torch).

Every command first runs once untimed with bytecode caching on (PYTHONDONTWRITEBYTECODE is dropped for the runs), so
the timed runs load compiled modules as an installed zerokit does (pip compiles at install). Otherwise zerokit would
compile its sources in every run while click, installed with its bytecode, would not.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time

from zerokit.hardware import resolve_hardware
from zerokit.models.presets import PRESET_NAMES
from zerokit.models.resolve import resolve_model
from zerokit.planner.engine import learned_position_limit, plan
from zerokit.planner.types import Training

HARDWARE = (
    {"gpu": "a100-80gb", "gpus_per_node": 8},
    {"gpu": "h100-80gb", "gpus_per_node": 8, "nodes": 2},
    {"gpu": "a100-80gb"},
    {"gpu": "rtx4090", "cpu_memory": "64GB"},
    {"gpu": "v100-32gb", "gpus_per_node": 8},
    {"gpu": "l40s", "gpus_per_node": 4, "cpu_memory": "512GB", "nvme_path": "/local_nvme"},
)
SEQ_LENS = (2048, 4097)
SEQ_STEP = 2
"""Tokens the sequence lengths move up by each round: one stays even, the other odd, so no input ever repeats."""
WARM_SEQ_LEN = 1000
TARGET = 10_000
"""In-process plans per CPU second (issue 9)."""
CLI = ["-m", "zerokit", "plan", "--model", "llama-2-7b", "--gpu", "a100-80gb", "--gpus-per-node", "8",
       "--seq-len", "4096", "--format", "json"]
CLICK = "import click"
DEEPSPEED = ("from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs_all_cold; "
             "estimate_zero3_model_states_mem_needs_all_cold(total_params=6738415616, largest_layer_params=131072000, "
             "num_gpus_per_node=8, num_nodes=1)")


def sequence_lengths(limit: int | None, round_: int) -> tuple[int, ...]:
    """A model's sequence lengths in a round: SEQ_LENS moved up by SEQ_STEP a round, or, where the model's learned
    positions stop short of them, its longest and one less, moved down by SEQ_STEP a round (from the top again once
    they would reach 0)."""
    lengths = tuple(s + SEQ_STEP * round_ for s in SEQ_LENS)
    if limit is None or max(lengths) <= limit:
        return lengths
    top = limit - (SEQ_STEP * round_) % (limit - 1)
    return top, top - 1


def in_process(seconds: float) -> tuple[int, float, float, int]:
    """(plans, plans per wall second, plans per CPU second, inputs per round) over the mix, for about `seconds`.

    Each round shifts the sequence lengths by SEQ_STEP, so no round repeats an input of an earlier one; building
    a round's inputs is not timed. Both clocks are reported: on a shared machine the wall clock counts other
    processes' time slices too, while the CPU clock (`time.process_time`) counts only this single-threaded process.
    """
    models = [resolve_model(name) for name in PRESET_NAMES]
    limits = [learned_position_limit(m) for m in models]
    hardware = [resolve_hardware(**h) for h in HARDWARE]
    for m in models:  # warm imports, code paths and the per-model tables, at a sequence length no round uses
        plan(m, hardware[0], Training(seq_len=WARM_SEQ_LEN))
    done = rounds = 0
    wall = cpu = 0.0
    while wall < seconds:
        inputs = [(m, hw, Training(seq_len=s)) for m, limit in zip(models, limits) for hw in hardware
                  for s in sequence_lengths(limit, rounds)]
        start, cpu_start = time.perf_counter(), time.process_time()
        for args in inputs:
            plan(*args)
        wall += time.perf_counter() - start
        cpu += time.process_time() - cpu_start
        done += len(inputs)
        rounds += 1
    return done, done / wall, done / cpu, len(inputs)


def cold(runs: int, deepspeed_runs: int) -> dict[str, list[float]]:
    """Wall seconds of fresh processes per command, alternated so that all see the same machine load.

    Round -1 is the untimed run that leaves each command's bytecode behind; DeepSpeed takes part in the first
    `deepspeed_runs` rounds only (seconds each)."""
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    commands = {"zerokit": [sys.executable, *CLI], "click": [sys.executable, "-c", CLICK],
                "deepspeed": [sys.executable, "-c", DEEPSPEED]}
    times: dict[str, list[float]] = {name: [] for name in commands}
    for round_ in range(-1, runs):
        for name, argv in commands.items():
            if name == "deepspeed" and round_ >= deepspeed_runs:
                continue
            t0 = time.perf_counter()
            r = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
            if round_ >= 0:
                times[name].append(time.perf_counter() - t0)
            if r.returncode not in (0, 1):
                raise SystemExit(f"{argv[1:3]} failed with {r.returncode}: {r.stderr.strip()[-300:]}")
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=11, help="cold runs of zerokit and of click (median reported; 0: leave the cold part out)")
    ap.add_argument("--deepspeed-runs", type=int, default=5,
                    help="cold runs of DeepSpeed's estimator, seconds each (0: leave it out)")
    ap.add_argument("--seconds", type=float, default=3.0, help="how long to run the in-process loop")
    ap.add_argument("--skip-cold", action="store_true", help="only the in-process part")
    args = ap.parse_args()

    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    n, wall_rate, cpu_rate, per_round = in_process(args.seconds)
    limits = {name: learned_position_limit(resolve_model(name)) for name in PRESET_NAMES}
    capped = [name for name, limit in limits.items() if limit is not None and limit < max(SEQ_LENS)]
    print(f"\nin-process plan(): {n} plans, none repeated: rounds of {per_round} inputs "
          f"({len(PRESET_NAMES)} presets x {len(HARDWARE)} hardware x {len(SEQ_LENS)} seq lens), the seq lens "
          f"{SEQ_STEP} tokens longer each round ({len(capped)} presets with learned positions at their own longest, "
          f"{SEQ_STEP} shorter each round: {', '.join(capped)}); load average {load:.1f}")
    print(f"  per CPU second:  {cpu_rate:,.0f} plans/s ({1e6 / cpu_rate:,.0f} us per plan)   "
          f"target >= {TARGET:,} plans/s: {'met' if cpu_rate >= TARGET else 'NOT met'}")
    print(f"  per wall second: {wall_rate:,.0f} plans/s ({1e6 / wall_rate:,.0f} us per plan)")
    if args.skip_cold or args.runs < 1:
        return
    times = cold(args.runs, args.deepspeed_runs)
    labels = {"zerokit": "zerokit plan --model llama-2-7b --gpu a100-80gb (8 GPUs) json",
              "click": f'python -c "{CLICK}"',
              "deepspeed": "deepspeed estimate_zero3_model_states_mem_needs_all_cold"}
    median = {name: statistics.median(t) for name, t in times.items() if t}
    of_deepspeed = f" ({args.deepspeed_runs} of DeepSpeed's)" if args.deepspeed_runs else ""
    print(f"\ncold start, bytecode cached, alternated, median of {args.runs} fresh processes each{of_deepspeed}:")
    print(f"  {'command':<62} {'median s':>9} {'min s':>7} {'max s':>7}")
    for name, t in times.items():
        if t:
            print(f"  {labels[name]:<62} {median[name]:>9.3f} {min(t):>7.3f} {max(t):>7.3f}")
    z, c = median["zerokit"], median["click"]
    print(f"  ratio zerokit / import click: {z / c:.2f}x   target <= 1.5x: {'met' if z / c <= 1.5 else 'NOT met'}")
    if "deepspeed" in median:
        d = median["deepspeed"]
        print(f"  ratio zerokit / deepspeed: {z / d:.3f}x   (earlier target <= 0.25x: "
              f"{'met' if z / d <= 0.25 else 'NOT met'})")


if __name__ == "__main__":
    main()

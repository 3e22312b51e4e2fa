#!/usr/bin/env python3
"""Predicted vs measured per-rank memory of real DeepSpeed trainings, phase by phase.

    python benchmarks/realrun_memory.py                  # the table, from the committed golden measurements
    python benchmarks/realrun_memory.py --run CASE ...   # re-measure cases live (real 2-rank DeepSpeed runs)
    python benchmarks/realrun_memory.py --run all --update-golden   # regenerate tests/data/realrun/memory.json
    python benchmarks/realrun_memory.py --run subgroups --update-golden   # regenerate .../realrun/subgroups.json
    python benchmarks/realrun_memory.py --run live --update-golden        # regenerate .../realrun/live.json

Each case is planned by zerokit (`plan()` with the case's forced options, `--target deepspeed`, no overhead
reserve), and its ds_config trains a miniature model for a few optimizer steps through the real `deepspeed`
runner on N ranks (`benchmarks/_realrun_worker.py`): DeepSpeed's CPU accelerator here, CUDA where there is one.
The worker traces every tensor allocation from before the model exists (torch's profiler memory events) and
reports, for each phase of the last optimizer step, the peak of live tensor bytes, split into host-side bytes
(what DeepSpeed keeps on the host when it offloads) and device-side bytes (what would be on the GPU). The table
compares the plan's `memory.phases` (minus its overhead) with the device-side measurement, per phase; the
target is 3% on every case.

Golden data: tests/data/realrun/memory.json holds every case's measurement with the library versions; the fast
tests (tests/test_realrun_golden.py) re-plan each case and compare, without torch.

ZeRO-3's optimizer sub-groups (SUBGROUP_CASES, golden file tests/data/realrun/subgroups.json, tests in
tests/test_subgroup_step.py): DeepSpeed steps the optimizer one `sub_group_size` sub-group at a time, and the
cases above all have partitions below the default 1e9 elements, one sub-group. These cases set `sub_group_size` in
the plan's ds_config below the rank's partition (2.5M elements of the miniature llama) and predict with the
same value (`estimate()` with the plan's buffers and that `sub_group_size`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from zerokit.launch.runner import free_port, remove_shm_buffers

GOLDEN = ROOT / "tests" / "data" / "realrun" / "memory.json"
SUBGROUP_GOLDEN = ROOT / "tests" / "data" / "realrun" / "subgroups.json"
LIVE_GOLDEN = ROOT / "tests" / "data" / "realrun" / "live.json"
MODELS = ROOT / "tests" / "data" / "realrun" / "models"
WORKER = ROOT / "benchmarks" / "_realrun_worker.py"
PHASES = ("forward", "backward", "optimizer_step")
TOLERANCE = 0.03
HOST_TOLERANCE = 0.10
WORLD = 2


def _case(name: str, model: str, stage: int, *, opt: str = "none", param: str = "none", ckpt: bool = False,
          ga: int = 1, precision: str = "bf16", seq: int = 128, mb: int = 2, attention: str = "sdpa",
          steps: int = 3, peft: str = "none", lora_rank: int = 16, lora_targets: str = "all-linear",
          lora_dropout: float = 0.05, sub_group_size: int | None = None, modules_to_save: str = "",
          max_live: int | None = None) -> dict:
    case = {"name": name, "model": model, "zero_stage": stage, "offload_optimizer": opt, "offload_param": param,
            "gradient_checkpointing": ckpt, "gradient_accumulation": ga, "precision": precision, "seq_len": seq,
            "micro_batch": mb, "attention": attention, "steps": steps}
    if peft != "none":  # the full fine-tuning cases keep the golden file's case dicts as they were
        case.update(peft=peft, lora_rank=lora_rank, lora_targets=lora_targets, lora_dropout=lora_dropout)
        if modules_to_save:  # PEFT's trainable copies of the embedding and the head
            case["lora_modules_to_save"] = modules_to_save
    if sub_group_size is not None:  # written into the ds_config, and the estimate uses it
        case["sub_group_size"] = sub_group_size
    if max_live is not None:  # stage3_max_live_parameters and stage3_max_reuse_distance, as a plan writes them
        case["max_live_parameters"] = max_live
    return case


CASES = [
    _case("llama-z0", "llama", 0),
    _case("llama-z1", "llama", 1),
    _case("llama-z2", "llama", 2),
    _case("llama-z3", "llama", 3),
    _case("llama-z1-fp32", "llama", 1, precision="fp32"),
    _case("llama-z0-fp32", "llama", 0, precision="fp32"),
    _case("llama-z2-ckpt", "llama", 2, ckpt=True),
    _case("llama-z1-ga4", "llama", 1, ga=4),
    _case("llama-z2-ga4", "llama", 2, ga=4),
    _case("llama-z3-ga4", "llama", 3, ga=4),
    _case("llama-z2-offload", "llama", 2, opt="cpu"),
    _case("llama-z3-offload", "llama", 3, opt="cpu"),
    _case("llama-z3-offload-all", "llama", 3, opt="cpu", param="cpu"),
    _case("llama-z3-nvme", "llama", 3, opt="nvme", param="nvme"),
    _case("qwen3-z1", "qwen3", 1),
    _case("qwen3-z2", "qwen3", 2),
    _case("qwen3-z3", "qwen3", 3),
    _case("qwen3-z2-ckpt", "qwen3", 2, ckpt=True),
    _case("qwen3-z3-ckpt", "qwen3", 3, ckpt=True),
    _case("qwen3-z3-offload", "qwen3", 3, opt="cpu"),
    _case("mixtral-z2", "mixtral", 2),
    _case("mixtral-z3", "mixtral", 3),
    _case("mixtral-z2-ckpt", "mixtral", 2, ckpt=True),
    # a third MoE family, Qwen2-MoE (Qwen1.5-MoE's): eight experts of 256 beside a shared expert and its gate,
    # biased q/k/v
    _case("qwen2moe-z2", "qwen2moe", 2),
    _case("qwen2moe-z3", "qwen2moe", 3),
    # LoRA rank 16 on every linear layer, dropout 0.05 (what `zerokit plan --peft lora` defaults to): a frozen
    # bf16 base, adapters with gradients, fp32 master and Adam moments
    _case("llama-lora-z2", "llama", 2, peft="lora"),
    _case("llama-lora-z3", "llama", 3, peft="lora"),
    _case("llama-lora-z2-ckpt", "llama", 2, ckpt=True, peft="lora"),
    # LoRA with trainable copies of the embedding and the head (`--lora-modules-to-save`), as a fine-tune that adds
    # tokens trains them: the copies' weights, gradients and optimizer states, and the head's weight gradient
    _case("llama-lora-save-z2", "llama", 2, peft="lora", modules_to_save="embed_tokens,lm_head"),
    _case("llama-lora-save-z2-ckpt", "llama", 2, ckpt=True, peft="lora", modules_to_save="embed_tokens,lm_head"),
    # at ZeRO-3 with PEFT's adapters in 16 bits (the plan's autocast_adapter_dtype=False): fp32 ones beside the
    # copies fail deepspeed.initialize
    _case("llama-lora-save-z3", "llama", 3, peft="lora", modules_to_save="embed_tokens,lm_head"),
    # QLoRA: the same adapters on a bitsandbytes NF4 base (`--peft qlora`, the plan's BitsAndBytesConfig)
    _case("llama-qlora-z2", "llama", 2, peft="qlora"),
    _case("llama-qlora-z2-ckpt", "llama", 2, ckpt=True, peft="qlora"),
    _case("llama-qlora-z3", "llama", 3, peft="qlora"),
    _case("llama-qlora-save-z3", "llama", 3, peft="qlora", modules_to_save="embed_tokens,lm_head"),
]
# ZeRO-3 with the rank's partition (2,499,712 elements of the miniature llama on 2 ranks) in several optimizer
# sub-groups: 750,000 gives three (798,720, 813,568 and 887,424 elements), the largest's 16-bit flat copy and fp32
# cast the step's peak; 100,000 gives ten, the embedding alone in the first (a view: no flat copy), where the
# norm's fp64 copy of the embedding's gradient (524,288 elements) is the peak
SUBGROUP_CASES = [
    _case("llama-z3-subgroups", "llama", 3, sub_group_size=750_000),
    _case("llama-z3-subgroups-small", "llama", 3, sub_group_size=100_000),
]
# ZeRO-3 with a live limit (and so a reuse distance: a plan writes both the same) below the model, as a frugal rung's
# 1e8 is below a 7B model's parameters: what stays gathered from forward into backward (golden file
# tests/data/realrun/live.json; at 2M DeepSpeed's prefetcher keeps more than the reuse window:
# `zerokit.perf.flops.ModelFlops.regathered`)
LIVE_CASES = [
    _case("llama-z3-live2m", "llama", 3, max_live=2_000_000),
    _case("llama-z3-live1m", "llama", 3, max_live=1_000_000),
    _case("qwen3-z3-live1500k", "qwen3", 3, max_live=1_500_000),  # a tied head: the embedding's weight again
    _case("mixtral-z3-live3m", "mixtral", 3, max_live=3_000_000),  # four experts a layer, stacked
    # the window keeps the head alone: all three layers' experts stay through their saved views
    _case("mixtral-z3-live1m", "mixtral", 3, max_live=1_000_000),
    _case("mixtral-z3-ckpt-live3m", "mixtral", 3, ckpt=True, max_live=3_000_000),  # recomputed: no views saved
    # a second MoE family (Qwen3MoeExperts, eight experts of 256), whose views the rule was not fitted on
    _case("qwen3moe-z3-live3m", "qwen3moe", 3, max_live=3_000_000),
    _case("qwen3moe-z3-live1m", "qwen3moe", 3, max_live=1_000_000),
    # a third (Qwen2MoeExperts beside a shared expert, which is a plain MLP: no views), measured after the rule
    _case("qwen2moe-z3-live3m", "qwen2moe", 3, max_live=3_000_000),
    _case("qwen2moe-z3-live1m", "qwen2moe", 3, max_live=1_000_000),
    _case("mixtral-lora-z3-live3m", "mixtral", 3, peft="lora", lora_targets="q_proj,k_proj,v_proj,o_proj",
          max_live=3_000_000),  # LoRA on the attention: the frozen experts are held alike
    # QLoRA: bitsandbytes' MatMul4Bit keeps `B.view(-1, 1)` of each 4-bit weight in ctx.tensors for backward
    _case("llama-qlora-z3-live1m", "llama", 3, peft="qlora", max_live=1_000_000),
    _case("llama-qlora-z3-ckpt-live1m", "llama", 3, ckpt=True, peft="qlora", max_live=1_000_000),
]
BY_NAME = {c["name"]: c for c in CASES + SUBGROUP_CASES + LIVE_CASES}


def golden_file(name: str) -> Path:
    """The golden file that holds a case's measurement."""
    if any(c["name"] == name for c in LIVE_CASES):
        return LIVE_GOLDEN
    return SUBGROUP_GOLDEN if any(c["name"] == name for c in SUBGROUP_CASES) else GOLDEN


def model_config(case: dict) -> dict:
    return json.loads((MODELS / f"{case['model']}.json").read_text())


def plan_case(case: dict, nvme_path: str | None = None):
    """zerokit's plan for the case: forced setup, --target deepspeed, no overhead reserve (a CPU has no CUDA
    context; the harness compares the bytes of tensors)."""
    from zerokit.hardware import resolve_hardware
    from zerokit.models.resolve import spec_from_config
    from zerokit.planner import Training, plan

    nvme = "nvme" in (case["offload_optimizer"], case["offload_param"])
    hardware = replace(resolve_hardware(gpu_memory="16GB", gpus_per_node=WORLD,
                                        nvme_path=(nvme_path or "/tmp/zerokit-nvme") if nvme else None),
                       accelerator="cpu")
    spec = spec_from_config(model_config(case), case["model"], source="config")
    training = Training(seq_len=case["seq_len"], micro_batch=case["micro_batch"],
                        global_batch=case["micro_batch"] * case["gradient_accumulation"] * WORLD,
                        zero_stage=case["zero_stage"], offload_optimizer=case["offload_optimizer"],
                        offload_param=case["offload_param"], gradient_checkpointing=case["gradient_checkpointing"],
                        attention=case["attention"], precision=case["precision"], target="deepspeed",
                        overhead_bytes=0, peft=case.get("peft", "none"), lora_rank=case.get("lora_rank", 16),
                        lora_targets=case.get("lora_targets", "all-linear"),
                        lora_dropout=case.get("lora_dropout", 0.05),
                        lora_modules_to_save=case.get("lora_modules_to_save", ""))
    return plan(spec, hardware, training)


def predicted_phases(result, case: dict | None = None) -> dict:
    """The plan's phase totals; for a case that sets `sub_group_size`, the estimate of the plan's setup with it."""
    if case is not None and ("sub_group_size" in case or "max_live_parameters" in case):
        return {p: m.total for p, m in estimate_case(result, case.get("sub_group_size"),
                                                     case.get("max_live_parameters")).phases.items()}
    return {p: m.total for p, m in result.phases.items()}


def estimate_case(result, sub_group_size: int | None, max_live: int | None = None):
    """`zerokit.memory.estimate.estimate()` of the plan's own setup and buffers with another ZeRO-3
    `sub_group_size` or live limit (the values the case's ds_config gets; None: the plan's)."""
    from zerokit.memory.buffers import DEFAULT_SUB_GROUP_SIZE, BufferSettings
    from zerokit.memory.estimate import estimate
    from zerokit.planner.types import Setup

    d = result.decision
    setup = Setup(d.zero_stage, d.offload_optimizer, d.offload_param, d.micro_batch_size, d.gradient_checkpointing,
                  d.gradient_accumulation_steps)
    buffers = BufferSettings(d.overlap_comm, d.reduce_bucket_size, d.allgather_bucket_size, d.prefetch_bucket_size,
                             d.param_persistence_threshold, max_live or d.max_live_parameters, False,
                             sub_group_size or DEFAULT_SUB_GROUP_SIZE)
    return estimate(result.model, result.hardware, result.training, setup, buffers=buffers)


def measured_phases(rank: dict, steps: int) -> dict:
    """Device-side peak of each phase over the last optimizer step (every micro-batch of it), and the bytes live
    when that step began."""
    out = {}
    for phase in PHASES:
        rows = [v for k, v in rank["phases"].items() if k.split(":")[0] == phase and int(k.split(":")[1]) == steps]
        out[phase] = max(v["peak"] - v["host"] for v in rows)
    first = rank["phases"][f"forward:{steps}:0"]
    out["start"] = first["start"] - first.get("start_host", first["host"])
    return out


def clean_start(measurement: dict) -> int:
    """The fewest bytes any rank of any run held when the measured step began: a start without leftovers."""
    steps = measurement["case"]["steps"]
    return min(measured_phases(rk, steps)["start"] for run in measurement["runs"] for rk in run["ranks"])


CLEAN_START = 100_000
"""Bytes a run may start above its rank's cleanest start and still count as clean (a leftover is a whole gradient,
0.1 MB and up on these models)."""


def measured(measurement: dict, base: int | None = None) -> dict:
    """Per phase: (the peak of the rank that needs most, the largest raw figure), device side.

    On DeepSpeed's CPU accelerator a few parameter gradients (seen: 1 to 4 weight or embedding gradients) stay
    allocated from one step into the next in some runs and on some ranks, not in others: the same config and
    data leave different leftovers from run to run. They show as more bytes live when the step begins. Within a
    step it is a race with gloo's worker thread: `_reduce_scatter_base_` clones its input (the gradient, as ZeRO
    reduces it) and the clone lives until the thread has finished that collective; `--diagnose` (which
    lists live bytes by call site) found 0.1 to 2.1 MB of such clones live at ZeRO-3's optimizer step on some ranks of
    some runs (2.1 MB, up to 3.6% of the step's peak, in about 1 run of 10), none on others. NCCL makes no such
    copy. Each rank's figure is the smallest of its runs with the fewest leftovers (those that start within
    CLEAN_START of its cleanest start: a race within a step only adds), less what it still started with above the
    cleanest start of any rank; the ranks themselves differ legitimately (which one holds the lm_head's gradient in
    its partition, say), so the larger rank counts. Not the smallest netted figure of all runs: a leftover the step
    frees before its peak does not raise the peak, and netting it out of that run's peak under-counted
    (mixtral-z3: raw peaks of 97.57 MB on three rank-runs, a run starting 2.1 MB high netted to 95.47; llama-z3 by
    0.5%).

    One run can leave leftovers on every rank; `base`, the clean start of earlier runs of the same case
    (`clean_start` of its golden figures), nets them out of it too.
    """
    steps = measurement["case"]["steps"]
    per_run = [[measured_phases(rk, steps) for rk in run["ranks"]] for run in measurement["runs"]]
    base = min([r["start"] for ranks in per_run for r in ranks] + ([base] if base is not None else []))
    clean = []  # per rank, its runs that start cleanest
    for i in range(len(per_run[0])):
        lowest = min(ranks[i]["start"] for ranks in per_run)
        clean.append([ranks[i] for ranks in per_run if ranks[i]["start"] - lowest <= CLEAN_START])
    out = {}
    for p in PHASES:
        by_rank = [min(r[p] - (r["start"] - base) for r in runs) for runs in clean]
        out[p] = (max(by_rank), max(r[p] for ranks in per_run for r in ranks))
    return out


def run_case(case: dict, workdir: Path, diagnose: bool = False) -> dict:
    """Train the case on WORLD ranks through the deepspeed runner; both ranks' measurements.

    With `diagnose`, the last step is profiled with Python stacks instead, and each phase's live allocations of that
    step are listed by call site (to see what DeepSpeed allocates where)."""
    from zerokit.dsconfig import build_ds_config

    nvme_dir = workdir / "nvme"
    nvme_dir.mkdir(exist_ok=True)
    result = plan_case(case, str(nvme_dir))
    ds_config = result.ds_config or build_ds_config(result)
    if "sub_group_size" in case:
        ds_config = dict(ds_config, zero_optimization=dict(ds_config["zero_optimization"],
                                                           sub_group_size=case["sub_group_size"]))
    if "max_live_parameters" in case:
        ds_config = dict(ds_config, zero_optimization=dict(ds_config["zero_optimization"],
                                                           stage3_max_live_parameters=case["max_live_parameters"],
                                                           stage3_max_reuse_distance=case["max_live_parameters"]))
    spec = {"ds_config": ds_config, "model_config": model_config(case), "seq_len": case["seq_len"],
            "steps": case["steps"], "attention": case["attention"],
            "gradient_checkpointing": case["gradient_checkpointing"], "diagnose": diagnose,
            "lora_config": result.peft.lora_config() if result.peft is not None else None,
            # as the plan's snippet wraps it: PEFT's adapters in 16 bits where modules_to_save trains at ZeRO-3
            "autocast_adapter_dtype": not (result.peft is not None
                                           and result.peft.autocast_off(result.decision.zero_stage)),
            "quantization_config": (result.peft.quantization_config(result.decision.precision, result.decision.zero_stage)
                                    if result.peft is not None else None)}
    (workdir / "case.json").write_text(json.dumps(spec))
    port = free_port()
    cmd = [str(Path(sys.executable).parent / "deepspeed"), "--num_gpus", str(WORLD), "--master_port", str(port),
           str(WORKER), "--case", str(workdir / "case.json"), "--out", str(workdir)]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=workdir, check=False)
    remove_shm_buffers(port)  # DeepSpeed's CPU allreduce buffers, 69 MB per rank, never unlinked by DeepSpeed
    if r.returncode != 0:
        raise RuntimeError(f"{case['name']}: the training failed (exit {r.returncode}):\n{(r.stdout + r.stderr)[-4000:]}")
    ranks = [json.loads((workdir / f"rank{i}.json").read_text()) for i in range(WORLD)]
    finite = all(rk["finite"] for rk in ranks)
    if not finite:  # the bytes are still right; say so, as the table does
        print(f"  warning: {case['name']}: a loss is not finite: {ranks[0]['losses']}", file=sys.stderr)
    if diagnose:
        return {"case": case, "diagnose": ranks[0]["diagnose"]}
    out = {"seconds": round(time.time() - t0, 1), "optimizer": ranks[0]["optimizer"], "finite": finite,
           "ranks": [{"phases": rk["phases"], "losses": rk["losses"]} for rk in ranks]}
    if "sub_groups" in ranks[0]:  # the cases that set sub_group_size: DeepSpeed's own sub-groups, rank 0's
        out["sub_groups"] = ranks[0]["sub_groups"]
    return out


def measure_case(case: dict, repeats: int) -> dict:
    runs = []
    for i in range(repeats):
        with tempfile.TemporaryDirectory(prefix=f"zk-realrun-{case['name']}-") as d:
            runs.append(run_case(case, Path(d)))
        print(f"  run {i + 1}: {runs[-1]['seconds']} s, {runs[-1]['optimizer']}", file=sys.stderr, flush=True)
    return {"case": case, "optimizer": runs[0]["optimizer"], "finite": all(r["finite"] for r in runs), "runs": runs}


def versions() -> dict:
    out = {}
    for mod in ("torch", "deepspeed", "transformers"):
        try:
            out[mod] = __import__(mod).__version__
        except ImportError:
            out[mod] = None
    return out


def measured_host(measurement: dict) -> int:
    """Host bytes DeepSpeed holds while training (the offloaded states, staging buffers), per rank: the most any
    rank held during the last step. aio's page-locked NVMe swap buffers are not allocated through torch and so
    are not in it."""
    steps = measurement["case"]["steps"]
    return max(v.get("host_peak", v["host"]) for run in measurement["runs"] for rk in run["ranks"]
               for k, v in rk["phases"].items() if k != "load" and int(k.split(":")[1]) == steps)


def compare(measurement: dict, base: int | None = None) -> list[dict]:
    """One row per phase: predicted (plan) vs measured (the larger rank), device side; a host row when the case
    offloads. Each phase's error is relative to the measured peak of the step (the figure that must fit). `base`:
    as `measured`'s."""
    case = measurement["case"]
    result = plan_case(case)
    predicted = predicted_phases(result, case)
    got = measured(measurement, base)
    peak = max(m for m, _ in got.values())
    rows = []
    for phase in PHASES:
        m, spread = got[phase]
        p = predicted[phase]
        rows.append({"case": case["name"], "phase": phase, "predicted": p, "measured": m, "spread": spread - m,
                     "error": (p - m) / peak, "peak": m == peak})
    if case["offload_optimizer"] != "none" or case["offload_param"] != "none":
        # torch-visible host bytes: the offloaded states and staging buffers, not aio's page-locked swap buffers
        host = plan_host(result) // WORLD
        m = measured_host(measurement)
        rows.append({"case": case["name"], "phase": "host steady state", "predicted": host, "measured": m,
                     "spread": 0, "error": host / m - 1, "peak": False, "host": True})
    return rows


def plan_host(result) -> int:
    """The plan's host bytes while training, per node, without the page-locked NVMe swap buffers."""
    from zerokit.memory.host import host_memory
    from zerokit.memory.states import DTYPE_BYTES

    m, hw, d = result.model, result.hardware, result.decision
    return host_memory(m.parameters, m.largest_layer_parameters, hw.gpus_per_node, hw.nodes, d.zero_stage,
                       d.offload_optimizer, d.offload_param, DTYPE_BYTES[d.precision]).offloaded


def print_table(rows: list[dict]) -> None:
    print("| case | phase | predicted MB | measured MB | leftovers MB | error |\n|---|---|---:|---:|---:|---:|")
    for r in rows:
        limit = HOST_TOLERANCE if r.get("host") else TOLERANCE
        flag = "" if abs(r["error"]) <= limit else " **"
        name = f"**{r['phase']}**" if r["peak"] else r["phase"]
        print(f"| {r['case']} | {name} | {r['predicted'] / 1e6:.2f} | {r['measured'] / 1e6:.2f} | "
              f"+{r['spread'] / 1e6:.2f} | {r['error'] * 100:+.1f}%{flag} |")
    peak_rows = [r for r in rows if r["peak"]]
    host_rows = [r for r in rows if r.get("host")]
    print(f"\n{len(peak_rows)} cases. Peak phase (bold): worst error {max(abs(r['error']) for r in peak_rows) * 100:.1f}%"
          f" (target {TOLERANCE * 100:.0f}%)." + (f" Host steady state: worst error "
          f"{max(abs(r['error']) for r in host_rows) * 100:.1f}% (target {HOST_TOLERANCE * 100:.0f}%)."
          if host_rows else ""))
    print("Phase errors are relative to the measured peak of the step; leftovers: the most bytes a run or rank held"
          " above the figure counted (gradients DeepSpeed on the CPU accelerator sometimes keeps into the next step).")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", nargs="*", default=None, help="case names to measure live ('all' for every case)")
    ap.add_argument("--update-golden", action="store_true", help="write the live measurements into the golden file")
    ap.add_argument("--repeats", type=int, default=2, help="runs per case (the smallest peak per phase counts)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--diagnose", metavar="CASE", help="list what each phase of CASE's last step allocates, by site")
    ap.add_argument("--steps", type=int, help="with --diagnose: train this many steps (the last one is listed)")
    a = ap.parse_args()
    if a.list:
        for c in CASES + SUBGROUP_CASES + LIVE_CASES:
            print(c["name"])
        return 0
    goldens = {path: json.loads(path.read_text()) if path.exists() else {"cases": {}}
               for path in (GOLDEN, SUBGROUP_GOLDEN, LIVE_GOLDEN)}
    if a.diagnose:
        with tempfile.TemporaryDirectory(prefix="zk-realrun-diag-") as d:
            case = dict(BY_NAME[a.diagnose], steps=a.steps or BY_NAME[a.diagnose]["steps"])
            out = run_case(case, Path(d), diagnose=True)
        for phase, sites in out["diagnose"].items():
            for when in ("peak", "end"):
                print(f"== {phase} at its {when}: bytes allocated in this step and still live")
                for size, count, site in sites[when][:15]:
                    print(f"  {size / 1e6:9.3f} MB {count:4d}x  {site[:220]}")
        return 0
    if a.run is not None:
        groups = {"subgroups": SUBGROUP_CASES, "live": LIVE_CASES}
        names = ([c["name"] for c in CASES + SUBGROUP_CASES] if a.run in ([], ["all"]) else
                 [c["name"] for c in groups[a.run[0]]] if len(a.run) == 1 and a.run[0] in groups else a.run)
        unknown = [n for n in names if n not in BY_NAME]
        if unknown:
            print(f"unknown case(s): {', '.join(unknown)}; --list shows them", file=sys.stderr)
            return 2
        live = {}
        for n in names:
            print(f"measuring {n} ...", file=sys.stderr, flush=True)
            live[n] = measure_case(BY_NAME[n], a.repeats)
            if a.update_golden:  # after every case: a long regeneration that breaks keeps what it measured
                path = golden_file(n)
                golden = goldens[path]
                golden.setdefault("cases", {})[n] = live[n]
                golden["versions"] = versions()
                golden["command"] = ("python benchmarks/realrun_memory.py --run " +
                                     {SUBGROUP_GOLDEN: "subgroups", LIVE_GOLDEN: "live"}.get(path, "all")
                                     + " --update-golden")
                tmp = path.with_suffix(".tmp")
                tmp.write_text(json.dumps(golden, indent=1) + "\n")
                os.replace(tmp, path)
        measurements = list(live.values())
    else:
        measurements = [goldens[golden_file(c["name"])]["cases"][c["name"]]
                        for c in CASES + SUBGROUP_CASES + LIVE_CASES
                        if c["name"] in goldens[golden_file(c["name"])].get("cases", {})]
    rows = [row for m in measurements for row in compare(m)]
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Real DeepSpeed trainings on a GPU against zerokit's plans: step time, and memory phase by phase.

    python benchmarks/gpu_runs.py              # the tables, from the committed measurements in tests/data/gpu/
    python benchmarks/gpu_runs.py --measure    # on a GPU machine: probe it, plan and train every case (minutes),
                                               # rewrite tests/data/gpu/{profile,measured}.json
    python benchmarks/gpu_runs.py --measure --cases sweep --out DIR   # the tokens-per-micro-batch sweep (SWEEP)
    python benchmarks/gpu_runs.py --out DIR --profile OTHER/profile.json   # DIR's runs planned with another
                                               # lease's probe of that GPU (the sweep's, with the first probe that
                                               # timed the host)
    python benchmarks/gpu_runs.py --out DIR --rederive   # DIR's profile written again from its own measurements

--measure runs `zerokit probe` (one rank per GPU, as the deepspeed runner starts them), then plans each case with
the probe's profile exactly as `zerokit plan --hardware profile.json --target deepspeed` does (the case's setup
forced, or nothing forced for "planned"), and trains the plan's own ds_config through the real `deepspeed` runner
(`benchmarks/_step_time_worker.py`: a llama of about 0.9B parameters built from its config with random weights,
`warmup` untimed steps, then `steps` timed ones with the device synchronised at each step's end, then one step
with the caching allocator's peaks read phase by phase).

The committed H100 data came from a machine with torch but no DeepSpeed and no network: DeepSpeed 0.19.8 was built
here as a wheel (`DS_BUILD_OPS=0 pip wheel --no-deps --no-build-isolation .` in its sdist) and carried with the
wheels of pydantic, pydantic-core, annotated-types, typing-inspection, hjson, jsonschema, jsonschema-specifications,
referencing and rpds-py; there: `pip install --no-deps --target /tmp/site *.whl`, PYTHONPATH=/tmp/site and
/tmp/site/bin first on PATH, FusedAdam and cpu_adam built once before the probe (`FusedAdamBuilder().load()`,
`CPUAdamBuilder().load()`, about a minute with TORCH_CUDA_ARCH_LIST=9.0), then `--measure --out DIR`. The H200
data of 2026-11-26 came the same way (the ops built through `get_accelerator().create_op_builder(...)` in 46-54 s):
nine cases in 7 min 12 s of one call, the probe's 73 s included; the offload cases alone (`--cases`) in 5 min.

The tables compare, per case:
- the plan's step time (`performance.step_time_s`) with the median timed step; target 20%, and the ranking of
  setups that differ by more than 15% the same as measured;
- each phase's plan figure without its overhead reserve with the most bytes of live tensors the allocator saw in
  that phase (torch.cuda.max_memory_allocated); target 3% of the step's peak, as for the CPU runs of
  benchmarks/realrun_memory.py;
- the plan's total (overhead included: CUDA context, NCCL, allocator slack) with what the device really held at the
  peak (reserved blocks + what lies outside the allocator): "fits" must hold.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from zerokit.fileio import write_atomic
from zerokit.launch.runner import free_port, remove_shm_buffers

DATA = ROOT / "tests" / "data" / "gpu"
PROFILE = DATA / "profile.json"
MEASURED = DATA / "measured.json"
MISSHAPED = {DATA: "the first H100's probe ran its ZeRO-3 reference with a 5461-wide MLP, so its engine factor (1.86) "
                   "is not the GPU's: these step times are for memory's sake only, not the target (the same nine runs "
                   "from the h100-80gb preset are within 20%, tests/test_gpu_golden.py; a second H100 with the fixed "
                   "probe: --out tests/data/gpu/2026-11-27-h100)"}
"""Data whose own probe profile cannot time its runs, and why: their step-time errors are printed, not judged."""
WORKER = ROOT / "benchmarks" / "_step_time_worker.py"
PHASES = ("forward", "backward", "optimizer_step")

# About 0.9B parameters: 14 GB of bf16 mixed-precision Adam states and ~10 GB of activations at 8,192 tokens per
# micro-batch, so every setup below fits one 80 GB GPU and a step takes a tenth of a second or more.
MODEL = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 5504, "num_hidden_layers": 16,
         "num_attention_heads": 16, "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 2048,
         "tie_word_embeddings": False, "rms_norm_eps": 1e-6}
# --small: a model the CPU runs in seconds, to try the pipeline without a GPU
SMALL = {**MODEL, "hidden_size": 128, "intermediate_size": 344, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 256}
SEQ_LEN, MICRO_BATCH = 2048, 4
SMALL_SEQ_LEN = 128
CASES = {
    "zero0": {"stage": 0},
    "zero1": {"stage": 1},
    "zero2": {"stage": 2},
    "zero3": {"stage": 3},
    "zero2_ckpt": {"stage": 2, "checkpointing": True},
    "zero2_accum4": {"stage": 2, "accumulation": 4},
    "zero2_offload_optimizer": {"stage": 2, "offload_optimizer": "cpu"},
    "zero3_offload_param": {"stage": 3, "offload_optimizer": "cpu", "offload_param": "cpu"},
    "zero3_offload_optimizer": {"stage": 3, "offload_optimizer": "cpu"},
    # nothing forced: the plan's own choice for 32 sequences per optimizer step
    "planned": {"global_batch": 32},
    # LoRA (all-linear, rank 8, dropout 0.05, as the CPU benchmark's) on the frozen bf16 base
    "lora_zero2": {"stage": 2, "peft": "lora", "lora_rank": 8},
    "lora_zero3": {"stage": 3, "peft": "lora", "lora_rank": 8},
}
DEFAULT_CASES = tuple(CASES)
# A sweep of the tokens in a micro-batch (512 to 16,384), full training and LoRA at ZeRO-2 on one GPU: whether a
# pass takes the device's kernel time plus the host's launches (the time model's sum, which the runs above at 8,192
# tokens fit), or the longer of the two (the host queues kernels ahead of an asynchronous device), which the Qwen
# team's published LoRA steps at 256-1,024 tokens suggest (benchmarks/step_time.py; the README's "Step time"
# section). `--cases sweep` trains them; a per-case seq_len is scaled by SEQ_LEN's share under --small.
SWEEP = {
    "zero2_mb1_seq512": {"stage": 2, "micro_batch": 1, "seq_len": 512},
    "zero2_mb1_seq1024": {"stage": 2, "micro_batch": 1, "seq_len": 1024},
    "zero2_mb1": {"stage": 2, "micro_batch": 1},
    "zero2_mb8": {"stage": 2, "micro_batch": 8},
    "lora_zero2_mb1_seq512": {"stage": 2, "peft": "lora", "lora_rank": 8, "micro_batch": 1, "seq_len": 512},
    "lora_zero2_mb1_seq1024": {"stage": 2, "peft": "lora", "lora_rank": 8, "micro_batch": 1, "seq_len": 1024},
    "lora_zero2_mb1": {"stage": 2, "peft": "lora", "lora_rank": 8, "micro_batch": 1},
    "lora_zero2_mb8": {"stage": 2, "peft": "lora", "lora_rank": 8, "micro_batch": 8},
}
CASES.update(SWEEP)


def plan_case(case: dict, perf, device_memory: int, ranks: int, model: dict, seq_len: int):
    """What `zerokit plan --hardware profile.json --target deepspeed` plans for the case."""
    from zerokit.hardware import resolve_hardware
    from zerokit.models.resolve import spec_from_config
    from zerokit.planner import Training, plan

    hardware = resolve_hardware(gpu_memory=device_memory, gpus_per_node=ranks)
    spec = spec_from_config(model, "llama-0.9b", source="config")
    forced = "stage" in case
    accumulation, micro_batch = case.get("accumulation", 1), case.get("micro_batch", MICRO_BATCH)
    training = Training(
        seq_len=case.get("seq_len", seq_len), target="deepspeed",
        micro_batch=micro_batch if forced else None,
        global_batch=micro_batch * accumulation * ranks if forced else case["global_batch"],
        zero_stage=case.get("stage"),
        offload_optimizer=case.get("offload_optimizer", "none") if forced else None,
        offload_param=case.get("offload_param", "none") if forced else None,
        gradient_checkpointing=case.get("checkpointing", False) if forced else None,
        peft=case.get("peft", "none"), lora_rank=case.get("lora_rank", 16))
    return plan(spec, hardware, training, machine=perf)


def train(name: str, ds_config: dict, checkpointing: bool, ranks: int, model: dict, seq_len: int, warmup: int,
          steps: int, lora_config: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    with tempfile.TemporaryDirectory(prefix="zerokit-gpu-") as tmp:
        spec = {"model": model, "seq_len": seq_len, "ds_config": ds_config, "warmup": warmup, "steps": steps,
                "gradient_checkpointing": checkpointing, "attention": "sdpa",
                **({"lora_config": lora_config} if lora_config else {})}
        case_file, out = Path(tmp) / "case.json", Path(tmp) / "times.json"
        case_file.write_text(json.dumps(spec))
        port = free_port()
        cmd = ["deepspeed", "--num_gpus", str(ranks), "--master_port", str(port), str(WORKER),
               "--case", str(case_file), "--out", str(out)]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
        remove_shm_buffers(port)  # --small on DeepSpeed's CPU accelerator: its allreduce buffers, never unlinked
        if proc.returncode != 0 or not out.exists():
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-25:]
            return {"error": f"exit {proc.returncode}", "log_tail": tail}
        data = json.loads(out.read_text())
    times = data["step_times_s"][warmup:]
    return {"median_s": statistics.median(times), "steps_s": times, "loss": data["loss"],
            "memory": data.get("memory"), "wall_s": round(time.perf_counter() - t0, 1)}


def _device_name() -> str | None:
    """The GPU the runs train on, as nvidia-smi names it (None where there is none)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=60, check=True).stdout.split("\n")[0].strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out or None


def _write(path: Path, data: dict) -> None:
    write_atomic(str(path), json.dumps(data, indent=1) + "\n", "GPU run data", force=True, make_parents=True)


def measure(cases: list[str], warmup: int, steps: int, small: bool, out_dir: Path, reuse_profile: bool,
            keep: Path | None, layers: int | None = None) -> None:
    from realrun_memory import versions  # benchmarks/, this script's folder

    from zerokit.perf import profile_from_json, profile_to_json
    from zerokit.perf.probe import run_probe

    model, seq_len = (SMALL, SMALL_SEQ_LEN) if small else (MODEL, SEQ_LEN)
    if layers is not None:  # e.g. ZeRO-3's hook cost at another depth (see the README: it did not scale per module)
        model = {**model, "num_hidden_layers": layers}
    if reuse_profile and (out_dir / PROFILE.name).exists():
        profile = json.loads((out_dir / PROFILE.name).read_text())
        raw = profile["measurements"]
    else:
        t0 = time.perf_counter()
        perf, raw = run_probe(ranks=None, progress=lambda line: print(line, flush=True))
        profile = profile_to_json(perf, raw)
        _write(out_dir / PROFILE.name, profile)
        print(f"probe: {time.perf_counter() - t0:.0f} s", flush=True)
    perf = profile_from_json(profile, "the probe")
    ranks, device_memory = raw["ranks"], raw["device_memory_bytes"]
    kept = keep if keep is not None and keep.exists() else out_dir / MEASURED.name
    old = json.loads(kept.read_text()) if keep is not None and kept.exists() else {}
    device = _device_name() or raw["name"]  # --reuse-profile may bring another machine's profile
    measured = {"command": "python benchmarks/gpu_runs.py --measure", "date": time.strftime("%Y-%m-%d %H:%M"),
                "device": device, **({"profile_device": raw["name"]} if device != raw["name"] else {}),
                "ranks": ranks, "model": model, "seq_len": seq_len, "micro_batch": MICRO_BATCH,
                "warmup_steps": warmup, "timed_steps": steps, "versions": versions(),
                "cases": dict(old.get("cases", {}))}
    from zerokit.dsconfig import build_ds_config

    for name in cases:
        setup = case_setup(name, small)
        result = plan_case(setup, perf, device_memory, ranks, model, seq_len)
        d = result.decision
        ds_config = result.ds_config or build_ds_config(result)
        lora = result.peft.lora_config() if result.peft is not None else None
        run = train(name, ds_config, d.gradient_checkpointing, ranks, model, setup.get("seq_len", seq_len), warmup,
                    steps, lora)
        run["setup"] = setup
        run["warmup_steps"], run["timed_steps"] = warmup, steps
        run["ds_config"] = ds_config
        if lora is not None:
            run["lora_config"] = lora
        measured["cases"][name] = run
        _write(out_dir / MEASURED.name, measured)
        print(f"{name}: " + (f"median {run['median_s']:.3f} s/step, planned {result.performance.step_time_s:.3f} s "
                             f"({run['wall_s']} s)" if "error" not in run
                             else f"FAILED {run['error']}\n  " + "\n  ".join(run["log_tail"])), flush=True)


def rederive(path: Path) -> dict:
    """The probe profile at `path` made again from its own measurements under today's derivation
    (`zerokit.perf.probe.engine_figures`, then the profile as `zerokit probe` writes it): for a profile whose
    measurements hold a figure its zerokit did not derive yet (tests/data/gpu/2026-11-28-h200-host: the host's
    timings, taken by the probe before it made figures of them)."""
    from zerokit.perf import profile_to_json
    from zerokit.perf.probe import _machine_from_measurements, engine_figures_again

    raw = json.loads(path.read_text())["measurements"]
    figures = engine_figures_again(raw)
    if figures:
        raw["engine_step"].update(figures)
    return profile_to_json(_machine_from_measurements(raw), raw)


def case_setup(name: str, small: bool) -> dict:
    """The case's setup as trained and recorded (`plan_case` plans it again from the record): a sweep case's
    sequence under --small in the share of the small model's sequence that it is of SEQ_LEN."""
    setup = dict(CASES[name])
    if small and "seq_len" in setup:
        setup["seq_len"] = max(8, setup["seq_len"] * SMALL_SEQ_LEN // SEQ_LEN)
    return setup


def case_names(text: str) -> list[str]:
    """--cases: comma-separated case names, `sweep` for the sweep's; an unknown name is a usage error."""
    names = [n for c in text.split(",") if c for n in (SWEEP if c == "sweep" else (c,))]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        raise SystemExit(f"gpu_runs.py: unknown case {unknown[0]!r}: give {', '.join(CASES)} or sweep")
    return names


def report(data_dir: Path, compute_scale: float | None = None, profile_path: Path | None = None) -> int:
    from dataclasses import replace

    from zerokit.perf import load_profile

    if not (data_dir / MEASURED.name).exists():
        print(f"no GPU measurements in {data_dir}: run `python benchmarks/gpu_runs.py --measure` on a GPU machine")
        return 0
    profile_path = profile_path or data_dir / PROFILE.name
    perf = load_profile(str(profile_path))
    if compute_scale is not None:
        perf = replace(perf, compute_scale=compute_scale)
    measured = json.loads((data_dir / MEASURED.name).read_text())
    profile = json.loads(profile_path.read_text())
    device_memory = profile["measurements"]["device_memory_bytes"]
    model, seq_len, ranks = measured["model"], measured["seq_len"], measured["ranks"]
    print(f"Real DeepSpeed trainings on {measured['device']} x {ranks} ({measured['date']}; llama "
          f"{model['hidden_size']} x {model['num_hidden_layers']} layers, seq {seq_len}, bf16; "
          f"{', '.join(f'{k} {v}' for k, v in measured['versions'].items())}), each the plan's own ds_config, "
          "against the plan with "
          + (f"the probe profile {profile_path} (another lease's)" if profile_path != data_dir / PROFILE.name else
             "this GPU's probe profile" if "profile_device" not in measured else
             f"the probe profile of another machine, an {measured['profile_device']}")
          + f" (compute scale {perf.compute_scale:.2f}"
          + (", set by --compute-scale)" if compute_scale is not None else ")"))
    print(f"\n{'case':24} {'setup':34} {'measured':>9} {'predicted':>9} {'error':>7}  {'compute':>8} {'comm':>7} "
          f"{'offload':>8} {'optim':>7} {'overhead':>8}")
    rows, worst, mem_rows = [], 0.0, []
    for name, run in measured["cases"].items():
        if "error" in run:
            print(f"{name:24} training failed: {run['error']}")
            continue
        result = plan_case(run["setup"], perf, device_memory, ranks, model, seq_len)
        d, t = result.decision, result.performance
        setup = (f"Z{d.zero_stage} mb{d.micro_batch_size} ga{d.gradient_accumulation_steps}"
                 + (" ckpt" if d.gradient_checkpointing else "")
                 + (f" off-opt:{d.offload_optimizer}" if d.offload_optimizer != "none" else "")
                 + (f" off-par:{d.offload_param}" if d.offload_param != "none" else "")
                 + (f" lora r{result.peft.rank}" if result.peft is not None else "")
                 + (f" seq {run['setup']['seq_len']}" if "seq_len" in run["setup"] else ""))
        got = run["median_s"]
        err = (t.step_time_s - got) / got
        worst = max(worst, abs(err))
        rows.append((name, got, t.step_time_s, t.tokens_per_step))
        print(f"{name:24} {setup:34} {got:8.3f}s {t.step_time_s:8.3f}s {err:+7.1%}  {t.compute_s:7.3f}s "
              f"{t.exposed_communication_s:6.3f}s {t.offload_s:7.3f}s {t.optimizer_s:6.3f}s {t.overhead_s:7.3f}s")
        if run.get("memory"):
            mem_rows.append((name, result, run["memory"]))
    flips = []
    for i, (a, ma, pa, sa) in enumerate(rows):
        for b, mb, pb, sb in rows[i + 1:]:
            ta, tb = ma / sa, mb / sb  # per token: the planned and sweep cases train more or fewer a step
            qa, qb = pa / sa, pb / sb
            if max(ta, tb) / min(ta, tb) > 1.15 and (ta < tb) != (qa < qb):
                flips.append(f"{a} vs {b}")
    misshaped = MISSHAPED.get(data_dir.resolve()) if profile_path == data_dir / PROFILE.name and compute_scale is None else None
    if misshaped:
        print(f"step time: worst error {worst:.1%}, not judged: {misshaped}")
        worst, flips = 0.0, []
    else:
        print(f"step time: worst error {worst:.1%} (target 20%: {'met' if worst <= 0.20 else 'NOT met'}); ranking "
              "(time per token) of setups that differ by > 15%: "
              + ("same as measured" if not flips else "differs for " + ", ".join(flips)))
    mem_ok = memory_table(mem_rows) if mem_rows else True
    return 0 if worst <= 0.20 and not flips and mem_ok else 1


def memory_table(rows: list) -> bool:
    print(f"\n{'case':24} {'phase':15} {'predicted':>10} {'allocated':>10} {'error':>7}")
    worst, covered, lines = 0.0, True, []
    for name, result, memory in rows:
        phases = memory["phases"]
        peak = max(phases[p]["allocated"] for p in PHASES)
        for p in PHASES:
            m = result.phases[p]
            predicted = m.total - m.overhead
            got = phases[p]["allocated"]
            err = (predicted - got) / peak
            worst = max(worst, abs(err))
            print(f"{name:24} {p:15} {predicted / 1e9:8.2f}GB {got / 1e9:8.2f}GB {err:+7.1%}")
        # what must fit: the live tensors at the peak and what lies outside the allocator (CUDA context, NCCL,
        # cuBLAS); the allocator's cache on top is slack it gives back (empties) before it reports out of memory
        plan_peak = max(result.phases[p].total for p in PHASES)
        floor = peak + memory["outside_allocator"]
        held = max(phases[p]["reserved"] for p in PHASES) + memory["outside_allocator"]
        covered &= plan_peak >= floor
        lines.append(f"{name:24} {plan_peak / 1e9:8.2f}GB {floor / 1e9:10.2f}GB {held / 1e9:10.2f}GB "
                     f"{memory['device_total'] / 1e9:8.2f}GB" + ("" if plan_peak >= floor else "  plan below the floor"))
    print(f"memory: worst phase error {worst:.1%} of the step's peak (target 3%: "
          f"{'met' if worst <= 0.03 else 'NOT met'})")
    print(f"\n{'case':24} {'plan peak':>10} {'live+outside':>12} {'held+outside':>12} {'device':>10}   (plan peak: the "
          "plan's total with its overhead reserve; live: allocated tensors at the peak; held: the allocator's "
          "reserved blocks, its cache included; outside: what the device holds beyond the allocator)")
    print("\n".join(lines))
    print(f"the plan's peak covers the live tensors and what lies outside the allocator in "
          f"{'every case' if covered else 'NOT every case'}; every run trained without running out of memory")
    return worst <= 0.03 and covered


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--measure", action="store_true", help="probe this GPU machine and train every case (minutes)")
    p.add_argument("--cases", default=",".join(DEFAULT_CASES),
                   help="comma list of cases to train (`sweep`: the tokens-per-micro-batch sweep's)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--out", type=Path, default=DATA, help="where --measure writes (default: the committed data)")
    p.add_argument("--small", action="store_true", help="a tiny model, to try the pipeline on a CPU")
    p.add_argument("--layers", type=int, help="the llama at this many decoder layers instead (--measure)")
    p.add_argument("--compute-scale", type=float, help="the table with this compute_scale instead of the profile's")
    p.add_argument("--profile", type=Path, help="the table with this profile.json (another lease's probe of the same "
                   "GPU) instead of --out's")
    p.add_argument("--reuse-profile", action="store_true", help="keep --out's profile instead of probing again")
    p.add_argument("--keep", type=Path, nargs="?", const=MEASURED, default=None,
                   help="keep the other cases' trainings from this measured.json (default: the committed one)")
    p.add_argument("--rederive", action="store_true",
                   help="write --out's profile.json again from its own measurements under today's derivation")
    args = p.parse_args()
    if args.rederive:
        _write(args.out / PROFILE.name, rederive(args.out / PROFILE.name))
    if args.layers is not None and not 1 <= args.layers <= 256:
        p.error(f"--layers {args.layers}: give 1..256 decoder layers")
    if args.measure:
        measure(case_names(args.cases), args.warmup, args.steps, args.small, args.out,
                args.reuse_profile, args.keep, args.layers)
    return report(args.out, args.compute_scale, args.profile)


if __name__ == "__main__":
    sys.exit(main())

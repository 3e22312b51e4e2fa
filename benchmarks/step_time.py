"""Step time, predicted against measured: real 2-rank DeepSpeed trainings on this CPU, and published GPU figures.

    python benchmarks/step_time.py                 # print both tables from the committed golden data
    python benchmarks/step_time.py --measure       # re-probe this machine and re-time the trainings, then
                                                   # rewrite tests/data/step_time/{profile,measured}.json
    python benchmarks/step_time.py --measure --cases zero1,zero3,lora_zero2,lora_zero3 \
        --data tests/data/step_time/2026-11-26-lora   # the LoRA measurement
    python benchmarks/step_time.py --measure --repeats 5 --cases zero1,lora_zero2,qlora_zero2,qlora_zero2_ckpt \
        --data tests/data/step_time/2026-11-26-qlora  # the QLoRA measurement (needs bitsandbytes)
    python benchmarks/step_time.py --measure --repeats 5 --cases zero1,lora_zero3,qlora_zero2,qlora_zero3 \
        --data tests/data/step_time/2026-11-27-amd-qlora-zero3  # QLoRA at ZeRO-3 (AMD EPYC: not met, README)
    python benchmarks/step_time.py --measure --repeats 5 \
        --cases zero1,lora_zero2,lora_zero3,qlora_zero2,qlora_zero3 \
        --data tests/data/step_time/2026-11-27-amd-input-grad  # the same, with the probe's input-gradient curve
    python benchmarks/step_time.py --measure \
        --data tests/data/step_time/2026-11-27-amd-engine256  # all eleven cases, with the shorter CPU reference engines

--measure runs `--repeats` rounds; each round runs `zerokit probe` (2 ranks, as the deepspeed runner starts them)
and then each case once with `deepspeed --num_gpus 2 benchmarks/_step_time_worker.py`, keeping the median of the
steady-state steps (warm-up steps excluded). A case's figure is the median over the rounds, the profile's figures
the medians over the probes. Run it on a quiet machine: it records the load average around every run.
tests/test_perf_golden.py checks the model against the committed data.
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
from zerokit.memory.buffers import buffer_ladder, zero_buffer_keys
from zerokit.models.params import count_parameters
from zerokit.perf import build_machine, load_profile, profile_from_json, step_time
from zerokit.perf.probe import linear_correction

DATA = ROOT / "tests" / "data" / "step_time"
"""The golden measurement `tests/test_perf_golden.py` holds the model to; `--data DIR` reads or writes another
(tests/data/step_time/2026-11-23-1220 keeps a later one on the same Intel Xeon, worst 29.5%, and
tests/data/step_time/2026-11-25-amd one on an AMD EPYC that emulates bf16, which the golden test holds too: see the
README)."""
PROFILE = DATA / "profile.json"
MEASURED = DATA / "measured.json"

# A llama small enough that a bf16 step stays near 10 GFLOP per rank (3.9M parameters, 512 tokens per micro-batch).
MODEL = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 4,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 2048, "max_position_embeddings": 256,
         "tie_word_embeddings": False, "rms_norm_eps": 1e-6}
SEQ_LEN, MICRO_BATCH, RANKS = 128, 4, 2
# One OpenMP thread per rank, what `deepspeed --bind_cores_to_rank` sets on this 2-core machine. With torch's default
# (one thread per core in every rank: 4 threads on 2 cores) any outside load makes OpenMP's barriers stall, and a
# 64^3 bf16 product went from 0.2 ms to 82 ms under load 14; one thread per rank keeps the timings meaningful. The
# probe runs with the same environment, so its profile describes these runs.
THREADS = {"OMP_NUM_THREADS": "1"}
CASES = {
    "zero1": {"stage": 1},
    "zero3": {"stage": 3},
    "zero2_ckpt": {"stage": 2, "checkpointing": True},
    "zero2_accum4": {"stage": 2, "accumulation": 4},
    "zero2_offload_optimizer": {"stage": 2, "offload_optimizer": "cpu"},
    "zero3_offload_param": {"stage": 3, "offload_optimizer": "cpu", "offload_param": "cpu"},
    # optimizer offload with accumulation (tests/data/step_time/2026-11-29-amd-offload-accum): DeepSpeed 0.19 keeps
    # the accumulating gradients on the host between micro-batches, ZeRO-2 whole tensors in bf16 (copied down, and up
    # again to add the next micro-batch's: `async_accumulate_grad_in_cpu_via_gpu`), ZeRO-3 its bf16 partition
    "zero2_offload_accum4": {"stage": 2, "offload_optimizer": "cpu", "accumulation": 4},
    "zero3_offload_accum4": {"stage": 3, "offload_optimizer": "cpu", "accumulation": 4},
    # LoRA (tests/data/step_time/2026-11-26-lora): the frozen base skips its weight gradients, only the adapters
    # are reduced and stepped
    "lora_zero2": {"stage": 2, "lora_rank": 8},
    "lora_zero3": {"stage": 3, "lora_rank": 8},
    # QLoRA (tests/data/step_time/2026-11-26-qlora): the same adapters on a bitsandbytes NF4 base, which dequantizes
    # each 4-bit weight in every forward, backward and recomputation
    "qlora_zero2": {"stage": 2, "lora_rank": 8, "quantized": True},
    "qlora_zero2_ckpt": {"stage": 2, "lora_rank": 8, "quantized": True, "checkpointing": True},
    # QLoRA at ZeRO-3 (tests/data/step_time/2026-11-27-amd-qlora-zero3): the 4-bit weights partitioned and gathered in
    # their bf16 storage, loaded without zero.Init
    "qlora_zero3": {"stage": 3, "lora_rank": 8, "quantized": True},
    # LoRA with trainable copies of the embedding and the head (`--lora-modules-to-save`): the copies' gradients,
    # reduces and optimizer step, and the head's weight-gradient product
    "lora_save_zero2": {"stage": 2, "lora_rank": 8, "save": "embed_tokens,lm_head"},
}


def lora_config(case: dict) -> dict | None:
    """The `peft.LoraConfig` keywords a plan writes for `--peft lora --lora-rank R` (all-linear, alpha 2r, dropout
    0.05), or None for full fine-tuning."""
    if not case.get("lora_rank"):
        return None
    r = case["lora_rank"]
    config = {"r": r, "lora_alpha": 2 * r, "lora_dropout": 0.05, "target_modules": "all-linear", "bias": "none",
              "task_type": "CAUSAL_LM"}
    if case.get("save"):
        config["modules_to_save"] = case["save"].split(",")
    return config


def quantization_config(case: dict) -> dict | None:
    """The `transformers.BitsAndBytesConfig` keywords a `--peft qlora` plan writes for the case (dtypes by name)."""
    if not case.get("quantized"):
        return None
    from zerokit.planner.peft import qlora_quantization_config

    return qlora_quantization_config("bf16", case["stage"])


def lora_work(case: dict) -> tuple[int | None, tuple | None, tuple[int, int]]:
    """(trainable parameters, the step-time model's `lora`, its `saved`) of a LoRA case, as a plan passes them (the
    adapters as PEFT counts them, and any modules_to_save copies; QLoRA's 4-bit weights and linears as
    `zerokit.models.quant` counts them); (None, None, (0, 0)) for full fine-tuning."""
    config = lora_config(case)
    if config is None:
        return None, None, (0, 0)
    from zerokit.models.lora import lora_parameters, saved_modules, saved_work
    from zerokit.models.quant import frozen_base_bytes

    count = lora_parameters(MODEL, config["r"])
    lora: tuple = (config["r"], config["lora_dropout"], count.linears)
    if case.get("quantized"):
        base = frozen_base_bytes(MODEL, "qlora", "bf16")
        lora += (base.quantized_parameters, base.quantized_modules)
    saved = saved_work(saved_modules(MODEL, config.get("modules_to_save", [])))
    return count.trainable + saved[0], lora, saved


def buffers(case: dict):
    """The buffer sizes a plan writes for this model and stage (the ladder's first rung: HF's "auto" sizes)."""
    return buffer_ladder(MODEL["hidden_size"], case["stage"])[0]


def ds_config(case: dict) -> dict:
    """The case's ds_config, with the buffer keys a zerokit plan writes (`zero_buffer_keys`, as the plan's
    ds_config has them)."""
    zero: dict = {"stage": case["stage"], **zero_buffer_keys(buffers(case), case["stage"])}
    for kind in ("offload_optimizer", "offload_param"):
        if case.get(kind):
            zero[kind] = {"device": case[kind], "pin_memory": True}
    if case["stage"] == 3 and case.get("lora_rank"):
        zero["memory_efficient_linear"] = False  # as a LoRA/QLoRA plan writes it at ZeRO-3 (zerokit.dsconfig)
    if "reuse_distance" in case:  # a case that sets ZeRO-3's reuse window itself (benchmarks/step_time_nodes.py)
        zero["stage3_max_reuse_distance"] = case["reuse_distance"]
    return {"train_micro_batch_size_per_gpu": MICRO_BATCH, "gradient_accumulation_steps": case.get("accumulation", 1),
            "train_batch_size": MICRO_BATCH * case.get("accumulation", 1) * RANKS,
            "bf16": {"enabled": True}, "gradient_clipping": 1.0, "steps_per_print": 10**9,
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.0}},
            "zero_optimization": zero}


def predict(case: dict, perf, nodes: int = 1) -> object:
    """The model's step time of a case: its RANKS on one node, or one rank on each of `nodes`."""
    total, _ = count_parameters(MODEL)
    b = buffers(case)
    trainable, lora, saved = lora_work(case)
    return step_time(MODEL, perf, parameters=total, seq_len=SEQ_LEN, micro_batch=MICRO_BATCH,
                     overlap_comm=b.overlap_comm, reduce_bucket_size=b.reduce_bucket_size,
                     allgather_bucket_size=b.allgather_bucket_size, prefetch_bucket_size=b.prefetch_bucket_size,
                     persistence_threshold=b.param_persistence_threshold,
                     reuse_distance=case.get("reuse_distance", b.max_live_parameters), nodes=nodes,
                     grad_accum=case.get("accumulation", 1), gpus_per_node=RANKS // nodes, zero_stage=case["stage"],
                     offload_optimizer=case.get("offload_optimizer", "none"),
                     offload_param=case.get("offload_param", "none"),
                     gradient_checkpointing=case.get("checkpointing", False), precision="bf16", attention="sdpa",
                     trainable_parameters=trainable, lora=lora, saved=saved)


def load_average() -> float:
    return os.getloadavg()[0]


def runner_env() -> dict[str, str]:
    """The environment the benchmarks start the `deepspeed` runner in: this one without a rank's variables, this
    interpreter's bin first on PATH (the runner and its ranks are the venv's), THREADS."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(THREADS)
    return env


def worker_spec(case: dict, warmup: int, steps: int) -> dict:
    """What benchmarks/_step_time_worker.py trains for a case (its --case file)."""
    return {"model": MODEL, "seq_len": SEQ_LEN, "ds_config": ds_config(case), "warmup": warmup, "steps": steps,
            "gradient_checkpointing": case.get("checkpointing", False), "attention": "sdpa",
            "lora_config": lora_config(case), "quantization_config": quantization_config(case)}


def time_case(name: str, case: dict, warmup: int, steps: int) -> dict:
    env = runner_env()
    with tempfile.TemporaryDirectory(prefix="zerokit-steptime-") as tmp:
        spec = worker_spec(case, warmup, steps)
        case_file, out = Path(tmp) / "case.json", Path(tmp) / "times.json"
        case_file.write_text(json.dumps(spec))
        before = load_average()
        port = free_port()
        cmd = ["deepspeed", "--num_gpus", str(RANKS), "--master_port", str(port),
               str(ROOT / "benchmarks" / "_step_time_worker.py"), "--case", str(case_file), "--out", str(out)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800, check=False)
        remove_shm_buffers(port)  # DeepSpeed's CPU allreduce buffers, never unlinked by DeepSpeed
        if proc.returncode != 0 or not out.exists():
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
            raise SystemExit(f"{name}: the training failed:\n" + "\n".join(tail))
        times = json.loads(out.read_text())["step_times_s"][warmup:]
    return {"median_s": statistics.median(times), "steps_s": times, "load_before": before, "load_after": load_average()}


def probe() -> dict:
    """One probe with the trainings' environment; returns the profile JSON (with the load around it)."""
    from zerokit.perf import profile_to_json
    from zerokit.perf.probe import run_probe

    before = load_average()
    os.environ.update(THREADS)  # the probe's ranks inherit it, as the trainings' ranks do
    perf, raw = run_probe(ranks=RANKS, progress=lambda line: print(line, flush=True))
    raw["load_before"], raw["load_after"] = before, load_average()
    print(f"probe: load average {before:.1f} -> {raw['load_after']:.1f}", flush=True)
    return profile_to_json(perf, raw)


def median_curve(curves: list[list]) -> list[list[float]]:
    """Point by point the median of curves whose points may differ: a slow machine's probe leaves out a llama block
    width that does not fit its budget in one round and runs it in another (`halve_to_fit`)."""
    at: dict[float, list[float]] = {}
    for curve in curves:
        for x, y in curve:
            at.setdefault(x, []).append(y)
    return [[x, statistics.median(ys)] for x, ys in sorted(at.items())]


def median_profile(profiles: list[dict]) -> dict:
    """Figure by figure (curve point by curve point) the median over the probes, so one probe taken while the
    machine was busy does not set the model's speeds (compute_scale re-derived against the median figures, see
    _rescale); the raw probes are kept under measurements.rounds."""
    out = json.loads(json.dumps(profiles[0]))
    for key, value in profiles[0].items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and key != "zerokit_profile":
            # a count (ranks_measured) stays a whole number with an even number of rounds
            pick = statistics.median_low if isinstance(value, int) else statistics.median
            out[key] = pick(p[key] for p in profiles if p.get(key) is not None)
        elif key in ("matmul", "matmul_forward", "matmul_input_grad", "attention"):
            out[key] = {d: median_curve([p[key][d] for p in profiles if d in p.get(key, {})]) for d in value}
        elif key == "elementwise":
            out[key] = median_curve([p[key] for p in profiles if key in p])
    rounds = [p.get("measurements") or {} for p in profiles]
    # what `zerokit plan --hardware` reads for the device memory when no --gpu/--gpu-memory is given
    out["measurements"] = {"device_memory_bytes": rounds[0].get("device_memory_bytes"), "rounds": rounds}
    _rescale(out, rounds)
    return out


def _rescale(out: dict, rounds: list[dict]) -> None:
    """A probe's compute_scale is its reference step's time over what *its own* kernel figures give for that step,
    so it is only right beside them: a median scale beside median curves from other rounds is not. Re-derive it
    against the median figures: each round's measured ZeRO-2 step less the model's non-compute time, over the
    compute the median profile gives (its weight matmuls as the reference's own shapes ran, where the probe timed
    them), and the median of that over the rounds."""
    refs = [r["engine_step"] for r in rounds if r.get("engine_step")]
    if not refs:
        return
    perf = profile_from_json({**out, "compute_scale": 1.0}, "the median profile")

    def kernels(r: dict) -> float:  # a round's reference (a slow machine runs fewer sequences: `halve_to_fit`)
        t = step_time(r["model"], perf, parameters=count_parameters(r["model"])[0], seq_len=r["seq_len"],
                      micro_batch=r["micro_batch"], gpus_per_node=RANKS, zero_stage=2)
        # the reference's own linears as they ran in that round, against the median curve (`linear_correction`)
        return t.compute_s + linear_correction(perf, r.get("linears", ()))
    out["compute_scale"] = statistics.median((r["step_s"] - r["predicted_rest_s"]) / kernels(r) for r in refs)


def measure(repeats: int, warmup: int, steps: int, cases: list[str]) -> None:
    """Round-robin: each round probes, then times every case once, so a busy spell of the shared machine falls on
    all cases alike rather than on one. The files are rewritten after every round, so an interrupted measurement
    keeps the rounds it finished."""
    runs: dict[str, list[dict]] = {name: [] for name in cases}
    profiles = []
    for r in range(repeats):
        profiles.append(probe())
        for name in cases:
            run = time_case(name, CASES[name], warmup, steps)
            runs[name].append(run)
            print(f"round {r + 1}/{repeats} {name}: median {run['median_s']:.3f} s/step "
                  f"(load {run['load_before']:.1f} -> {run['load_after']:.1f})", flush=True)
        write_measurement(profiles, runs, warmup, steps)


def _write_json(path: Path, value: dict) -> None:
    write_atomic(str(path), json.dumps(value, indent=1) + "\n", "step-time data", force=True, make_parents=True)


def write_measurement(profiles: list[dict], runs: dict[str, list[dict]], warmup: int, steps: int) -> None:
    _write_json(PROFILE, median_profile(profiles))
    old = json.loads(MEASURED.read_text()) if MEASURED.exists() else {}
    results = dict(old.get("cases", {}))
    for name, case_runs in runs.items():
        results[name] = {"setup": CASES[name], "ds_config": ds_config(CASES[name]),
                         **({"lora_config": lora_config(CASES[name])} if lora_config(CASES[name]) else {}),
                         **({"quantization_config": quantization_config(CASES[name])}
                            if quantization_config(CASES[name]) else {}),
                         "median_s": statistics.median(r["median_s"] for r in case_runs), "runs": case_runs}
    _write_json(MEASURED, {
        "command": "python benchmarks/step_time.py --measure",
        "date": time.strftime("%Y-%m-%d %H:%M"), "model": MODEL, "seq_len": SEQ_LEN, "micro_batch": MICRO_BATCH,
        "ranks": RANKS, "environment": THREADS, "warmup_steps": warmup, "timed_steps": steps,
        "repeats": len(profiles), "cpu_count": os.cpu_count(), "cases": results})


def ranking_summary(rows: list[tuple[str, float, float, list[float]]], worst: float) -> list[str]:
    """Print the worst error and how the setups rank, of rows (case, measured s, predicted s, each run's s); return
    the pairs that differ by > 15% and are ranked the other way round. A pair counts as told apart by the runs where
    it differs by > 15% and by more than the spread of either case's runs (slowest / fastest)."""
    flips, apart = [], []
    for i, (a, ma, pa, ra) in enumerate(rows):
        for b, mb, pb, rb in rows[i + 1:]:
            if max(ma, mb) / min(ma, mb) > 1.15 and (ma < mb) != (pa < pb):
                flips.append(f"{a} vs {b}")
            ratio, spread = max(ma, mb) / min(ma, mb), max(max(ra) / min(ra), max(rb) / min(rb))
            if ratio > 1.15 and ratio > spread:
                apart.append((a, b, (ma < mb) == (pa < pb)))
    print(f"worst error {worst:.1%} (target 20%: {'met' if worst <= 0.20 else 'NOT met'}); ranking of setups that "
          "differ by > 15%: " + ("same as measured" if not flips else "differs for " + ", ".join(flips)))
    print(f"pairs that differ by > 15% and by more than their runs' spread: {len(apart)}, ranked as measured: "
          f"{sum(ok for _, _, ok in apart)}")
    return flips


def report() -> int:
    perf = load_profile(str(PROFILE))
    measured = json.loads(MEASURED.read_text())
    print(f"Real 2-rank DeepSpeed trainings on this CPU ({measured['date']}; llama {MODEL['hidden_size']} x "
          f"{MODEL['num_hidden_layers']} layers, seq {SEQ_LEN}, micro-batch {MICRO_BATCH}, bf16), against the time "
          f"model with the probe profile ({perf.name})")
    print(f"{'case':26} {'measured':>9} {'predicted':>9} {'error':>7}  {'compute':>8} {'comm':>7} {'offload':>8} "
          f"{'optim':>7} {'overhead':>8}  runs (s)     load before each run")
    rows, worst, ok = [], 0.0, True
    for name, case in CASES.items():
        if name not in measured["cases"]:
            continue
        got = measured["cases"][name]["median_s"]
        t = predict(case, perf)
        err = (t.step_time_s - got) / got
        worst = max(worst, abs(err))
        runs = measured["cases"][name]["runs"]
        loads = [f"{r['load_before']:.1f}" for r in runs]
        run_times = "/".join(f"{r['median_s']:.2f}" for r in runs)
        rows.append((name, got, t.step_time_s, [r["median_s"] for r in runs]))
        print(f"{name:26} {got:8.3f}s {t.step_time_s:8.3f}s {err:+7.1%}  {t.compute_s:7.3f}s "
              f"{t.exposed_communication_s:6.3f}s {t.offload_s:7.3f}s {t.optimizer_s:6.3f}s {t.overhead_s:7.3f}s  "
              f"{run_times:12} {'/'.join(loads)}")
        ok &= abs(err) <= 0.20
    flips = ranking_summary(rows, worst)
    published_table()
    return 0 if ok and not flips else 1


# Published step times and throughputs of DeepSpeed runs on GPUs, each with its source. Shapes the source leaves out
# are marked as assumed.
GPT3_175B = {"model_type": "gpt2", "n_embd": 12288, "n_layer": 96, "n_head": 96, "vocab_size": 51200,
             "n_positions": 2048}
"""GPT-3 175B as the Megatron-LM paper trains it (Table 1: 96 layers, hidden 12288, 96 heads, vocabulary 51,200,
sequence 2048; 174.6B parameters, as zerokit counts it too)."""
QWEN_7B = {"model_type": "qwen2", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 151936, "tie_word_embeddings": False,
           "max_position_embeddings": 8192}
"""Qwen-7B (v1: its own modeling code, fused qkv with a bias, untied head), as the qwen2 architecture of its shape."""
QWEN_72B = {**QWEN_7B, "hidden_size": 8192, "intermediate_size": 24576, "num_hidden_layers": 80,
            "num_attention_heads": 64, "num_key_value_heads": 64, "vocab_size": 152064}
QWEN_1_8B = {**QWEN_7B, "hidden_size": 2048, "intermediate_size": 5504, "num_hidden_layers": 24,
             "num_attention_heads": 16, "num_key_value_heads": 16}
QWEN_14B = {**QWEN_7B, "hidden_size": 5120, "intermediate_size": 13696, "num_hidden_layers": 40,
            "num_attention_heads": 40, "num_key_value_heads": 40, "vocab_size": 152064}
"""Qwen-1.8B and Qwen-14B (v1) as qwen2 of their shapes: their config.json's intermediate_size (11008, 27392) is
both MLP branches together (w1 and w2 each take half), as for the 7B (22016)."""
QWEN_SEQS = (256, 512, 1024, 2048, 4096, 8192)
QWEN_SOURCE = ("QwenLM/Qwen README.md, 'Profiling of Memory and Speed' (also recipes/finetune/deepspeed/readme.md): "
               "'a single A100-SXM4-80G GPU ... CUDA 11.8 and Pytorch 2.0. Flash attention 2 is applied. We uniformly "
               "use a batch size of 1 and gradient accumulation of 8', seconds per optimizer step (s/it)")
QWEN_LORA = {
    "title": "Qwen LoRA r64 on one A100-80GB, 1 x 8 accumulation (the table's 'LoRA' rows)",
    "source": QWEN_SOURCE + "; 'LoRA has no trainable embedding and output layer'",
    "assumed": "Qwen (v1) as the qwen2 architecture of its shape (1.8B: 2048 x 24 layers, MLP 5504; 7B: 4096 x 32, "
               "11008; 14B: 5120 x 40, 13696; vocabulary 151,936 or 152,064); finetune_lora_single_gpu.sh passes no "
               "--deepspeed (planned as ZeRO-0)"}
QWEN_LORA_EMB = {
    "title": "Qwen LoRA r64 with the embedding and head trained, on one A100-80GB, 1 x 8 accumulation ('LoRA (emb)')",
    "source": QWEN_SOURCE + "; 'LoRA (emb) refers to training the embedding and output layer'; finetune.py: "
                            "modules_to_save = ['wte', 'lm_head'] for a base (not chat) model",
    "assumed": "as the LoRA rows, with --lora-modules-to-save embed_tokens,lm_head (the qwen2 names of wte and "
               "lm_head)"}
QWEN_72B_LORA = {
    "title": "Qwen-72B LoRA r64, ZeRO-3 on 4 x A100-80GB, 1 x 8 accumulation ('LoRA + Deepspeed Zero3')",
    "source": QWEN_SOURCE + "; 'Lora fintuning + DeepSpeed ZeRO 3 on 4 A100-SXM4-80G GPUs'",
    "assumed": "the qwen2 architecture of its shape (8192 x 80 layers, MLP 24576, vocabulary 152,064); no parameter "
               "offload: at 2,048 and 8,192 tokens the table's 57.2 and 72.3 GB per GPU hold the bf16 shards (the "
               "plan: 54.5 and 73.9 GB; a forked copy of its ds_config_zero3.json offloads parameters, which would "
               "leave 17.5 and 36.9); the plan prices today's PEFT, which promotes the adapters to fp32 (since PEFT "
               "0.11, huggingface/peft#1706; ZeRO-3 leaves them so) and so casts each adapted linear's input and "
               "sum, 10% of the planned step at 8,192 tokens: the team's 2023 PEFT gave the adapters the base's bf16"}
QWEN_7B_FULL = {
    "title": "Qwen-7B full fine-tuning, ZeRO-3 on 2 x A100-80GB, 1 x 8 accumulation ('Full-parameter', 1 node, 2 GPUs)",
    "source": QWEN_SOURCE + "; 'full-parameter finetuning with Qwen-7B on 2 A100 GPUs. We only report the statistics "
                            "of 256, 512, and 1024 tokens'; of finetune_ds.sh: 'we use DeepSpeed ZeRO 3 in this script'",
    "assumed": "no offload (the repository's test copy of ds_config_zero3.json offloads nothing; its finetune/ copy "
               "is not in the index); bf16, checkpointing, flash attention, as the other rows"}
QWEN_1_8B_FULL = {
    "title": "Qwen-1.8B full fine-tuning, ZeRO-3 on one A100-80GB, 1 x 8 accumulation ('Full-parameter', 1 GPU)",
    "source": QWEN_SOURCE + "; of finetune_ds.sh: 'we use DeepSpeed ZeRO 3 in this script'",
    "assumed": "no offload, as the 7B's. Unsure: the row trains 8,192 tokens faster than the same model's LoRA row "
               "(5.6 against 6.8 s), which computes no weight gradients, and stays at 2.1-2.3 s up to 2,048 tokens, "
               "as if ZeRO-3's hooks hid behind the compute; DeepSpeed 0.19 waits for the device before every module "
               "on one GPU (the lent H100's and H200s' runs), so the plan adds the hooks to the kernels"}
LLAMA_SWEEP = {
    "title": "LLaMA-7B on 8 x A800-80GB, seq 4096, a sweep: each row's throughput over the first's (x)",
    "source": "chenyaofo, https://gist.github.com/chenyaofo/d4cd6a20ab4b95cb3a49491747e2139a: 'A800 x 8, 1 TB CPU "
              "memory, Intel 8358 CPU x 2 ... CUDA 12.1, PyTorch 2.2.0, Deepspeed 0.14.2 ... Benchmark of LLaMA-7B "
              "models using deepspeed-based traning code. The squence length is 4096', the Th.put column (5.33 for "
              "ZeRO-2 without checkpointing)",
    "assumed": "llama-2-7b's shape; BS a/b = micro-batch a, global batch b on 8 GPUs; bf16, sdpa attention; A800 = "
               "A100 with 400 GB/s NVLink (--intra-node-bandwidth 200GB/s); the ZeRO++ row left out (not modelled)"}
PUBLISHED = [
    {"what": "ZeRO-Offload, 10B GPT-2 on one V100-32GB (ZeRO-2 + CPU optimizer offload, fp16)",
     "source": "Ren et al., ZeRO-Offload: Democratizing Billion-Scale Model Training, arXiv:2101.06840, abstract: "
               "'40 TFlops/GPU on a single NVIDIA V100 GPU for 10B parameter model'",
     "model": {"model_type": "gpt2", "n_embd": 4096, "n_layer": 50, "n_head": 32, "vocab_size": 50257,
               "n_positions": 1024},
     "assumed": "shape: the DeepSpeed ZeRO-Offload tutorial's 10B GPT-2 (50 layers x 4096); seq 1024, micro-batch 10",
     "gpu": "v100-32gb", "gpus": 1, "seq": 1024, "mb": 10, "ga": 1, "stage": 2, "offload_optimizer": "cpu",
     "ckpt": True, "precision": "fp16", "metric": "tflops_per_gpu", "value": 40.0},
    {"what": "LLaMA-7B, DeepSpeed ZeRO-3 on 8 x A800-80GB, micro-batch 8, seq 512",
     "source": "hpcaitech/ColossalAI issue #4342 (and #4311): 'zero3 with batch size 8 ... 64.101 samples/sec in "
               "deepspeed (the seq len is 512 too)', https://github.com/hpcaitech/ColossalAI/issues/4342",
     "model": "llama-2-7b", "assumed": "gradient checkpointing on (the same run in deepspeedai/DeepSpeed issue #4036: "
                                       "'batch size 8 and gradient checkpoint is true'); A800 = A100 with 400 GB/s "
                                       "NVLink (--intra-node-bandwidth 200GB/s); seq 512 is the run's cap: the "
                                       "stanford_alpaca train.py it ran pads each batch to its longest sample only, "
                                       "so its samples were shorter and the figure is an upper bound for 512 tokens",
     "gpu": "a100-80gb", "gpus": 8, "intra": "200GB/s", "seq": 512, "mb": 8, "ga": 1, "stage": 3, "ckpt": True,
     "precision": "bf16", "metric": "samples_per_s", "value": 64.101},
    # Table 2 of the Megatron-LM paper: DeepSpeed's ZeRO-3 without model parallelism, global batch fixed, so the
    # micro-batch shrinks as GPUs are added and ZeRO-3's parameter gathers stop hiding behind compute.
    *({"what": f"GPT-3 175B, ZeRO-3 on {gpus} x A100-80GB ({gpus // 8} nodes), micro-batch {mb}",
       "source": "Narayanan et al., Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM, "
                 f"SC'21, arXiv:2104.04473, Table 2: ZeRO-3 (DeepSpeed) 175B on {gpus} GPUs, batch 1536: "
                 f"{value:.0f} TFLOP/s per GPU",
       "model": GPT3_175B, "assumed": "fp16, activation recomputation (the paper counts its FLOPs); 8 x 200 Gb/s HDR "
                                     "InfiniBand per node (--inter-node-bandwidth 200GB/s)",
       "gpu": "a100-80gb", "gpus": gpus, "nodes": gpus // 8, "inter": "200GB/s", "seq": 2048, "mb": mb, "ga": 1,
       "stage": 3, "ckpt": True, "precision": "fp16", "metric": "tflops_per_gpu", "value": value}
      for gpus, mb, value in ((384, 4, 144.0), (1536, 1, 44.0))),
    # The Qwen team's profile (Qwen (v1) README, "Profiling of Memory and Speed"): A100-SXM4-80G, CUDA 11.8,
    # PyTorch 2.0, flash attention 2, batch 1 and gradient accumulation 8, their finetune.py (HF Trainer, bf16,
    # gradient checkpointing; LoRA r 64, dropout 0.05 on c_attn, c_proj, w1, w2: every linear but the head; every
    # sample padded to the column's length), seconds per optimizer step. LoRA rows planned through `plan()` with
    # each option forced, so the adapters are priced as any LoRA plan prices them.
    *({"what": f"Qwen-{size} LoRA r64 on one A100-80GB, seq {seq}, 1 x 8 accumulation", "series": QWEN_LORA,
       "model": config, "gpu": "a100-80gb", "gpus": 1, "seq": seq, "mb": 1, "ga": 8, "stage": 0, "ckpt": True,
       "precision": "bf16", "attention": "flash", "peft": ("lora", 64, 0.05), "metric": "s_per_step", "value": value}
      for size, config, values in (("1.8B", QWEN_1_8B, (1.0, 1.0, 1.1, 1.7, 3.3, 6.8)),
                                   ("7B", QWEN_7B, (1.2, 1.5, 2.8, 5.2, 10.1, 21.3)),
                                   ("14B", QWEN_14B, (1.6, 2.4, 4.4, 8.4, 17.0, 36.0)))
      for seq, value in zip(QWEN_SEQS, values)),
    *({"what": f"Qwen-{size} LoRA r64 + embedding and head on one A100-80GB, seq {seq}, 1 x 8 accumulation",
       "series": QWEN_LORA_EMB, "model": config, "gpu": "a100-80gb", "gpus": 1, "seq": seq, "mb": 1, "ga": 8,
       "stage": 0, "ckpt": True, "precision": "bf16", "attention": "flash", "peft": ("lora", 64, 0.05),
       "save": "embed_tokens,lm_head", "metric": "s_per_step", "value": value}
      for size, config, values in (("1.8B", QWEN_1_8B, (1.0, 1.0, 1.1, 1.8, 3.4, 7.0)),
                                   ("7B", QWEN_7B, (1.4, 1.6, 2.9, 5.3, 10.3, 21.7)),
                                   ("14B", QWEN_14B, (1.7, 2.6, 4.6, 8.6, 17.2, 36.3)))
      for seq, value in zip(QWEN_SEQS, values)),
    *({"what": f"Qwen-72B LoRA r64, ZeRO-3 on 4 x A100-80GB, seq {seq}, 1 x 8 accumulation", "series": QWEN_72B_LORA,
       "model": QWEN_72B, "gpu": "a100-80gb", "gpus": 4, "seq": seq, "mb": 1, "ga": 8, "stage": 3, "ckpt": True,
       "precision": "bf16", "attention": "flash", "peft": ("lora", 64, 0.05), "metric": "s_per_step", "value": value}
      for seq, value in zip(QWEN_SEQS, (17.6, 20.5, 29.4, 45.7, 83.4, 161.5))),
    *({"what": f"Qwen-7B full fine-tuning, ZeRO-3 on 2 x A100-80GB, seq {seq}, 1 x 8 accumulation",
       "series": QWEN_7B_FULL, "model": QWEN_7B, "gpu": "a100-80gb", "gpus": 2, "seq": seq, "mb": 1, "ga": 8,
       "stage": 3, "ckpt": True, "precision": "bf16", "attention": "flash", "metric": "s_per_step", "value": value}
      for seq, value in zip(QWEN_SEQS, (4.0, 4.0, 4.5))),
    *({"what": f"Qwen-1.8B full fine-tuning, ZeRO-3 on one A100-80GB, seq {seq}, 1 x 8 accumulation",
       "series": QWEN_1_8B_FULL, "model": QWEN_1_8B, "gpu": "a100-80gb", "gpus": 1, "seq": seq, "mb": 1, "ga": 8,
       "stage": 3, "ckpt": True, "precision": "bf16", "attention": "flash", "metric": "s_per_step", "value": value}
      for seq, value in zip(QWEN_SEQS, (2.1, 2.2, 2.2, 2.3, 2.8, 5.6))),
    # A sweep of one setup at a time on one 8-GPU node: its throughput's unit is not in the part of the page read,
    # so each row is compared as a ratio to the first (ZeRO-2, no checkpointing), which needs no unit
    *({"what": f"{label}, micro-batch {mb} x {ga} accumulation",
       "series": LLAMA_SWEEP, "model": "llama-2-7b", "gpu": "a100-80gb", "gpus": 8, "intra": "200GB/s", "seq": 4096,
       "mb": mb, "ga": ga, "stage": stage, "ckpt": ckpt, "offload_optimizer": opt, "offload_param": param,
       "precision": "bf16", "attention": "sdpa", "metric": "relative", "value": value / 5.33,
       "base": {"mb": 1, "ga": 8, "stage": 2, "ckpt": False}}
      for label, stage, ckpt, opt, param, mb, ga, value in (
          ("ZeRO-2", 2, False, "none", "none", 1, 8, 5.33),
          ("ZeRO-2 + checkpointing", 2, True, "none", "none", 1, 8, 4.19),
          ("ZeRO-2 + checkpointing + optimizer offload", 2, True, "cpu", "none", 1, 8, 1.81),
          ("ZeRO-2 + checkpointing", 2, True, "none", "none", 4, 2, 4.69),
          ("ZeRO-3", 3, False, "none", "none", 2, 4, 4.95),
          ("ZeRO-3 + checkpointing", 3, True, "none", "none", 2, 4, 4.45),
          ("ZeRO-3 + checkpointing + optimizer offload", 3, True, "cpu", "none", 2, 4, 2.05),
          ("ZeRO-3 + checkpointing + full offload", 3, True, "cpu", "cpu", 4, 2, 2.06),
          ("ZeRO-3 + checkpointing", 3, True, "none", "none", 8, 1, 4.73),
          ("ZeRO-3 + checkpointing", 3, True, "none", "none", 8, 2, 4.32))),
    {"what": "Offload copies on an H100 host: 28 GB GPU->CPU",
     "source": "zerokit issue 9 seed fact: '28 GB moves GPU->CPU in about 2 s and CPU->GPU in under 1 s over "
               "pinned memory'",
     "assumed": "the pageable rate: the probe on the hosts of an H100 and two H200s lent to this project moved 28 GB "
                "GPU->CPU in 2.0-2.2 s pageable and 0.51 s pinned (tests/data/gpu/*/profile.json)",
     "gpu": "h100-80gb", "metric": "d2h_28gb_s", "value": 2.0},
    {"what": "Offload copies on an H100 host: 28 GB CPU->GPU, pinned (published: under 1 s)",
     "source": "zerokit issue 9 seed fact, as above",
     "gpu": "h100-80gb", "metric": "h2d_28gb_s", "value": 1.0, "bound": "max"},
]


def published_table() -> None:
    from zerokit.models.resolve import resolve_model

    print("\nPublished GPU figures, predicted from the GPU presets (no GPU was timed for this table)")
    print(f"{'figure':80} {'published':>13} {'predicted':>13} {'error':>6}")
    series, ratios = None, []
    for i, row in enumerate(PUBLISHED):
        if row.get("series") is not series:  # a series' source and assumptions once, above its rows
            series = row.get("series")
            if series is not None:
                print(series["title"])
                print(f"    source: {series['source']}")
                print(f"    assumed: {series['assumed']}")
        perf = build_machine(gpu=row["gpu"], intra_node_bandwidth=row.get("intra"),
                             inter_node_bandwidth=row.get("inter"))
        if row["metric"] == "d2h_28gb_s":
            predicted, unit = 28e9 / perf.d2h_pageable, "s"
        elif row["metric"] == "h2d_28gb_s":
            predicted, unit = 28e9 / perf.h2d_pinned, "s"
        elif row["metric"] == "relative":  # samples/s of the row over those of its series' first setting
            base = {**row, **row["base"], "offload_optimizer": "none", "offload_param": "none"}
            predicted, unit = _samples_per_s(row, perf) / _samples_per_s(base, perf), "x"
            ratios.append((row["value"], predicted))
        elif row.get("peft") or row.get("series"):
            predicted, unit = _planned(row, perf).performance.step_time_s, "s"
        else:
            model = row["model"]
            spec = resolve_model(model) if isinstance(model, str) else None
            config = spec.config if spec else model
            params = spec.parameters if spec else count_parameters(config)[0]
            t = step_time(config, perf, parameters=params, seq_len=row["seq"], micro_batch=row["mb"],
                          grad_accum=row["ga"], gpus_per_node=row["gpus"] // row.get("nodes", 1),
                          nodes=row.get("nodes", 1), zero_stage=row["stage"],
                          offload_optimizer=row.get("offload_optimizer", "none"),
                          gradient_checkpointing=row["ckpt"], precision=row["precision"])
            if row["metric"] == "tflops_per_gpu":
                predicted, unit = t.flops_per_step / t.step_time_s / 1e12, "TF/s"
                # the paper counts recomputation as work done, as Megatron's TFLOPs formula does
                if row["ckpt"]:
                    predicted *= 4.0 / 3.0
            else:
                predicted, unit = row["mb"] * row["gpus"] * row["ga"] / t.step_time_s, "smp/s"
        error = (predicted - row["value"]) / row["value"]
        digits = 2 if unit in ("s", "x") else 1
        verdict = ("within" if predicted <= row["value"] else "over") if row.get("bound") else f"{error:>+6.0%}"
        what = f"  {row['what']}" if series is not None else row["what"]
        print(f"{what:80} {'<' if row.get('bound') else ' '}{row['value']:>6.{digits}f} {unit:<5} "
              f"{predicted:>7.{digits}f} {unit:<5} {verdict:>6}")
        if series is None:
            print(f"    source: {row['source']}")
            if row.get("assumed"):
                print(f"    assumed: {row['assumed']}")
        if row["metric"] == "relative" and (i + 1 == len(PUBLISHED) or PUBLISHED[i + 1]["metric"] != "relative"):
            apart = [(a, b) for j, a in enumerate(ratios) for b in ratios[j + 1:]
                     if max(a[0], b[0]) / min(a[0], b[0]) > 1.15]
            if apart:
                print(f"  the sweep's pairs whose published throughputs differ by > 15%: {len(apart)}, ranked as "
                      f"published: {sum((a[0] < b[0]) == (a[1] < b[1]) for a, b in apart)}")
            ratios = []


def _samples_per_s(row: dict, perf: object) -> float:
    return row["mb"] * row["ga"] * row["gpus"] / _planned(row, perf).performance.step_time_s


def _planned(row: dict, perf: object) -> object:
    """The plan of a published run with every option it names forced (ZeRO stage, offload, micro-batch, global
    batch, checkpointing, attention, precision, adapters), on the preset's machine: what `zerokit plan` prints."""
    from zerokit.hardware import resolve_hardware
    from zerokit.models.resolve import resolve_model, spec_from_config
    from zerokit.planner.engine import plan
    from zerokit.planner.types import Training

    model = resolve_model(row["model"]) if isinstance(row["model"], str) else spec_from_config(row["model"],
                                                                                                row["what"])
    method, rank, dropout = row.get("peft", ("none", 16, None))
    training = Training(seq_len=row["seq"], micro_batch=row["mb"], global_batch=row["mb"] * row["ga"] * row["gpus"],
                        zero_stage=row["stage"], offload_optimizer=row.get("offload_optimizer", "none"),
                        offload_param=row.get("offload_param", "none"), gradient_checkpointing=row["ckpt"],
                        attention=row["attention"], precision=row["precision"], peft=method, lora_rank=rank,
                        lora_dropout=dropout, lora_modules_to_save=row.get("save", ""))
    hardware = resolve_hardware(row["gpu"], gpus_per_node=row["gpus"], cpu_memory=row.get("cpu_memory"))
    result = plan(model, hardware, training, machine=perf)
    if result.performance is None:
        raise SystemExit(f"{row['what']}: the plan does not fit")
    return result


def speed(repeat: int = 5, number: int = 20000) -> None:
    """Microseconds per step_time call for the planner's 7 candidate setups (llama-2-7b, 8 GPUs), best of `repeat`."""
    import timeit

    from zerokit.models.resolve import resolve_model

    spec = resolve_model("llama-2-7b")
    perf = build_machine(gpu="h100-80gb")
    setups = [(0, "none", "none"), (1, "none", "none"), (2, "none", "none"), (3, "none", "none"),
              (2, "cpu", "none"), (3, "cpu", "none"), (3, "cpu", "cpu")]

    def plan_once() -> None:
        for stage, opt, par in setups:
            step_time(spec.config, perf, parameters=spec.parameters, seq_len=4096, micro_batch=1, grad_accum=4,
                      gpus_per_node=8, zero_stage=stage, offload_optimizer=opt, offload_param=par)
    from zerokit.perf.flops import model_flops
    from zerokit.perf.model import step_time_of

    mf = model_flops(spec.config)

    def plan_uncached() -> None:  # the model's arithmetic without the per-setup memo (the compute parts stay cached)
        for stage, opt, par in setups:
            step_time_of(mf, perf, spec.parameters, 4096, 1, 4, 8, 1, stage, opt, par, False, "bf16", "sdpa", True,
                       5e8, 5e8, 5e7, 1e5, True, None)

    def baseline() -> None:  # 60 multiply-adds in a Python loop, to compare machines and loads
        x = 1.0
        for _ in range(60):
            x = x * 1.0000001 + 0.5
    n = number // len(setups)
    hit = min(timeit.repeat(plan_once, repeat=repeat, number=n)) / n / len(setups) * 1e6
    cold = min(timeit.repeat(plan_uncached, repeat=repeat, number=n)) / n / len(setups) * 1e6
    base = min(timeit.repeat(baseline, repeat=repeat, number=n)) / n * 1e6
    print(f"step_time per call, 7 setups of llama-2-7b on 8 x h100-80gb, best of {repeat} (load average "
          f"{load_average():.1f}): {hit:.2f} us answered from the memo, {cold:.2f} us computed; a 60-step Python "
          f"loop takes {base:.2f} us here")


def main() -> int:
    global DATA, PROFILE, MEASURED
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--measure", action="store_true", help="re-probe and re-time (minutes; run on a quiet machine)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--cases", default=",".join(CASES), help="comma list of cases to re-time")
    p.add_argument("--speed", action="store_true", help="only time step_time itself (microseconds per call)")
    p.add_argument("--probe-only", action="store_true", help="re-probe, keep the measured trainings")
    p.add_argument("--data", metavar="DIR", help="the measurement to read or write (default tests/data/step_time)")
    args = p.parse_args()
    if args.data:
        DATA = Path(args.data).absolute()
        PROFILE, MEASURED = DATA / "profile.json", DATA / "measured.json"
    if args.probe_only:
        _write_json(PROFILE, probe())
    if args.speed:
        speed()
        return 0
    if args.measure:
        measure(args.repeats, args.warmup, args.steps, [c for c in args.cases.split(",") if c])
    return report()


if __name__ == "__main__":
    sys.exit(main())

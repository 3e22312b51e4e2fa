"""What fp32 LoRA adapters cost over bf16 ones, measured on one CPU rank, against the time model.

    python benchmarks/lora_widths.py                # print the committed measurement against the model
    python benchmarks/lora_widths.py --measure      # re-time here (a minute), print, and rewrite the JSON

LoRA's adapters train in fp32 at ZeRO-3 (`zerokit.perf.model.adapters_in_fp32`: zero.Init builds the model, and
the engine casts nothing PEFT adds after it), in bf16 at ZeRO-0/1/2. PEFT's LoRA linear then casts each input to
fp32, runs the scaling and the add on 4-byte elements and casts the sum back; backward, their gradients are cast too.
This script builds the step-time benchmark's llama (benchmarks/step_time.py's MODEL: 256 x 4 layers, random
weights) with PEFT's all-linear rank-8 adapters (dropout 0.05, a plan's), the base in bf16, and times one micro-batch
(4 x 128 tokens) forward and backward on one rank with one thread (the benchmark's OMP_NUM_THREADS=1), adapters in
bf16 and in fp32, alternated over rounds, keeping each one's fastest median. It compares the difference with what
`zerokit.perf.model._lora_parts` gives for the same adapters in the two widths, on the probe profile of the AMD
EPYC measurement of the same day (tests/data/step_time/2026-11-28-amd-all2), on which it was measured.
2026-11-28: 23 ms measured, 22 ms modelled (before the casts were priced: 3.5 ms).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))  # step_time's model and cases

from zerokit.fileio import write_atomic

DATA = ROOT / "tests" / "data" / "step_time" / "2026-11-28-amd-lora-widths.json"
PROFILE = ROOT / "tests" / "data" / "step_time" / "2026-11-28-amd-all2" / "profile.json"
ROUNDS, STEPS, WARMUP = 3, 8, 2


def measure() -> dict:
    import torch
    from peft import LoraConfig, get_peft_model
    from step_time import MICRO_BATCH, MODEL, SEQ_LEN, lora_config  # benchmarks/, this script's folder
    from transformers import AutoModelForCausalLM, LlamaConfig

    torch.set_num_threads(1)
    config = LlamaConfig(**{k: v for k, v in MODEL.items() if k != "model_type"})
    lora = lora_config({"lora_rank": 8})
    ids = torch.randint(0, config.vocab_size, (MICRO_BATCH, SEQ_LEN), generator=torch.Generator().manual_seed(0))

    def one(width: str) -> tuple[float, float]:
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").to(torch.bfloat16)
        model = get_peft_model(model, LoraConfig(**lora))
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.data = p.data.to(getattr(torch, {"bf16": "bfloat16", "fp32": "float32"}[width]))
        model.train()
        forward, backward = [], []
        for i in range(WARMUP + STEPS):
            t0 = time.perf_counter()
            loss = model(input_ids=ids, labels=ids).loss
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            if i >= WARMUP:
                forward.append(t1 - t0)
                backward.append(t2 - t1)
        return statistics.median(forward), statistics.median(backward)

    runs: dict[str, list[tuple[float, float]]] = {"bf16": [], "fp32": []}
    for _ in range(ROUNDS):
        for width, timed in runs.items():
            timed.append(one(width))
    best = {w: min(r, key=sum) for w, r in runs.items()}
    return {"date": time.strftime("%Y-%m-%d %H:%M"), "model": MODEL, "seq_len": SEQ_LEN, "micro_batch": MICRO_BATCH,
            "lora_config": lora, "threads": 1, "rounds": ROUNDS, "steps": STEPS,
            "forward_s": {w: b[0] for w, b in best.items()}, "backward_s": {w: b[1] for w, b in best.items()},
            "runs": {w: [list(r) for r in rs] for w, rs in runs.items()}}


def modelled(data: dict) -> dict[str, float]:
    """The time model's seconds of the adapters' work in one micro-batch, forward and backward, in each width."""
    from step_time import lora_work

    from zerokit.perf import load_profile
    from zerokit.perf.model import _lora_parts

    perf = load_profile(str(PROFILE))
    trainable, lora, _ = lora_work({"lora_rank": data["lora_config"]["r"]})
    tokens = data["seq_len"] * data["micro_batch"]
    return {w: _lora_parts(perf, lora, trainable, tokens, "bf16", perf.peak_flops("bf16"), w == "fp32")[0]
            for w in ("bf16", "fp32")}


def report(data: dict) -> None:
    model = modelled(data)
    step = {w: data["forward_s"][w] + data["backward_s"][w] for w in ("bf16", "fp32")}
    print(f"LoRA r{data['lora_config']['r']} all-linear on llama {data['model']['hidden_size']} x "
          f"{data['model']['num_hidden_layers']} layers, {data['micro_batch']} x {data['seq_len']} tokens, one rank, "
          f"{data['threads']} thread ({data['date']}); the model on {PROFILE.parent.name}'s profile")
    print(f"  {'adapters':10} {'forward':>9} {'backward':>9} {'both':>9}   modelled adapter work")
    for w in ("bf16", "fp32"):
        print(f"  {w:10} {data['forward_s'][w] * 1e3:7.1f}ms {data['backward_s'][w] * 1e3:7.1f}ms "
              f"{step[w] * 1e3:7.1f}ms   {model[w] * 1e3:7.1f}ms")
    measured, predicted = step["fp32"] - step["bf16"], model["fp32"] - model["bf16"]
    print(f"  fp32 over bf16: measured {measured * 1e3:.1f} ms, modelled {predicted * 1e3:.1f} ms "
          f"({(predicted - measured) / measured:+.0%})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measure", action="store_true", help="re-time here and rewrite the committed JSON")
    args = ap.parse_args()
    if args.measure:
        os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch loads: one thread, as the benchmark's ranks
        data = measure()
        write_atomic(str(DATA), json.dumps(data, indent=1) + "\n", "the measurement", force=True)
    else:
        data = json.loads(DATA.read_text())
    report(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())

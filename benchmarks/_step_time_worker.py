"""One rank of a timed DeepSpeed training for benchmarks/step_time.py (started by the `deepspeed` runner).

    deepspeed --num_gpus 2 benchmarks/_step_time_worker.py --case case.json --out times.json

Builds the case's llama from its config dict (random weights), trains `warmup + steps` optimizer steps on random
tokens and has rank 0 write the wall time of every optimizer step (from the end of the previous one).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--case", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--local_rank", type=int, default=-1)
    args = p.parse_args()
    with open(args.case, encoding="utf-8") as f:
        case = json.load(f)

    import deepspeed
    import torch
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM, LlamaConfig

    deepspeed.init_distributed()
    rank = dist.get_rank()
    torch.manual_seed(0)
    ds_config = case["ds_config"]
    config = LlamaConfig(**{k: v for k, v in case["model"].items() if k != "model_type"})
    config._attn_implementation = case.get("attention", "sdpa")
    zero3 = ds_config["zero_optimization"]["stage"] == 3
    with deepspeed.zero.Init(config_dict_or_path=ds_config, enabled=zero3):
        model = AutoModelForCausalLM.from_config(config, attn_implementation=case.get("attention", "sdpa"))
    if case.get("gradient_checkpointing"):
        model.gradient_checkpointing_enable()
    model.train()
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)
    mb, ga, seq = engine.train_micro_batch_size_per_gpu(), engine.gradient_accumulation_steps(), case["seq_len"]
    g = torch.Generator().manual_seed(rank)
    times = []
    last = time.perf_counter()
    for _ in range(case["warmup"] + case["steps"]):
        for _ in range(ga):
            ids = torch.randint(0, config.vocab_size, (mb, seq), generator=g).to(engine.device)
            loss = engine(input_ids=ids, labels=ids).loss
            engine.backward(loss)
            engine.step()
        now = time.perf_counter()
        times.append(now - last)
        last = now
    if rank == 0:
        with open(args.out + ".tmp", "w", encoding="utf-8") as f:
            json.dump({"step_times_s": times, "warmup": case["warmup"], "loss": float(loss.item())}, f)
        os.replace(args.out + ".tmp", args.out)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

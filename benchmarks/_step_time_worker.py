"""One rank of a timed DeepSpeed training for benchmarks/step_time.py (started by the `deepspeed` runner).

    deepspeed --num_gpus 2 benchmarks/_step_time_worker.py --case case.json --out times.json

Builds the case's llama from its config dict (random weights), trains `warmup + steps` optimizer steps on random
tokens and has rank 0 write the wall time of every optimizer step (from the end of the previous one; on a GPU the
device is synchronised at each step's end, so a step's time is its kernels', not their launches').

On a GPU one more optimizer step follows the timed ones, with the caching allocator's peak read around each phase
(forward, backward, optimizer step; every micro-batch of the step): `memory` in the output holds, per phase, the
most bytes of live tensors (torch.cuda.max_memory_allocated) and of reserved blocks, and what the device holds
beyond the allocator (CUDA context, NCCL, cuBLAS: total - free - reserved).
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
    gpu = torch.cuda.is_available()
    if gpu:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    # a GPU-sized model initialises on the device (seconds instead of a minute of CPU init); zero.Init places
    # ZeRO-3's partitions itself
    if case.get("quantization_config"):
        from _qlora_base import quantized_base  # benchmarks/, this script's folder

        model = quantized_base(case, config, ds_config, torch, rank, gpu)
    else:
        with deepspeed.zero.Init(config_dict_or_path=ds_config, enabled=zero3), \
                torch.device(f"cuda:{torch.cuda.current_device()}" if gpu and not zero3 else "cpu"):
            model = AutoModelForCausalLM.from_config(config, attn_implementation=case.get("attention", "sdpa"))
    if case.get("lora_config"):
        # as the HF Trainer does: the base loaded (under zero.Init for ZeRO-3), then wrapped outside it; only what
        # trains reaches the optimizer
        from peft import LoraConfig, get_peft_model

        if case.get("gradient_checkpointing"):
            model.enable_input_require_grads()  # a plan's code does this: a frozen base's inputs need gradients
        model = get_peft_model(model, LoraConfig(**case["lora_config"]))
    if case.get("gradient_checkpointing"):
        model.gradient_checkpointing_enable()
    model.train()
    engine, _, _, _ = deepspeed.initialize(model=model, config=ds_config,
                                           model_parameters=[p for p in model.parameters() if p.requires_grad])
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
        if gpu:
            torch.cuda.synchronize()
        now = time.perf_counter()
        times.append(now - last)
        last = now
    result = {"step_times_s": times, "warmup": case["warmup"], "loss": float(loss.item())}
    if gpu:
        result["memory"] = phase_memory(engine, torch, g, config.vocab_size, mb, seq, ga)
    if rank == 0:
        with open(args.out + ".tmp", "w", encoding="utf-8") as f:
            json.dump(result, f)
        os.replace(args.out + ".tmp", args.out)
    dist.barrier()
    dist.destroy_process_group()
    return 0


def phase_memory(engine, torch, g, vocab: int, mb: int, seq: int, ga: int) -> dict:
    """One more optimizer step, with the allocator's peaks read phase by phase (the most over its micro-batches)."""
    cuda = torch.cuda
    out = {p: {"allocated": 0, "reserved": 0, "start": 0} for p in ("forward", "backward", "optimizer_step")}
    outside = 0

    def phase(name: str, fn):
        nonlocal outside
        cuda.synchronize()
        cuda.reset_peak_memory_stats()
        start = cuda.memory_allocated()
        value = fn()
        cuda.synchronize()
        row = out[name]
        row["allocated"] = max(row["allocated"], cuda.max_memory_allocated())
        row["reserved"] = max(row["reserved"], cuda.max_memory_reserved())
        row["start"] = max(row["start"], start)
        free, total = cuda.mem_get_info()
        outside = max(outside, total - free - cuda.memory_reserved())
        return value

    for _ in range(ga):
        ids = torch.randint(0, vocab, (mb, seq), generator=g).to(engine.device)
        loss = phase("forward", lambda ids=ids: engine(input_ids=ids, labels=ids).loss)
        phase("backward", lambda loss=loss: engine.backward(loss))
        phase("optimizer_step", engine.step)
    return {"phases": out, "outside_allocator": outside, "device_total": cuda.mem_get_info()[1]}


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

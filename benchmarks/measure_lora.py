#!/usr/bin/env python3
"""Measure activation memory with or without LoRA/QLoRA adapters, on the CPU or on CUDA (the golden-data source).

The quantity is ``shared/measure_activations.py``'s: the bytes autograd holds for backward at the end of the training
forward pass of one micro-batch, loss included, parameters excluded, each storage once, seen through saved-tensor
hooks. This copy adds what that script leaves out: ``device="cuda"``, and ``qlora=True`` (the base saved with
``save_pretrained`` and reloaded in 4-bit nf4 with double quantization through ``transformers.BitsAndBytesConfig``,
as QLoRA does; the parameters excluded are then the 4-bit data). ``transient=True`` also returns the backward peak
above the end of forward (parameter gradients allocated beforehand, as ``zerokit.memory.calibrate.measure`` does): on
CUDA from ``torch.cuda.max_memory_allocated``, on the CPU from the profiler's replay of allocations (an upper bound).

    python benchmarks/measure_lora.py CONFIG.json --seq-len 512 --micro-batch 2 [--device cuda]
        [--attention sdpa|eager] [--dtype bf16] [--gradient-checkpointing]
        [--lora-rank 16 [--lora-targets all-linear|q_proj,v_proj] [--lora-dropout 0.05] [--qlora]
        [--modules-to-save embed_tokens,lm_head]] [--transient]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from typing import Any


def measure(config: dict, seq_len: int, micro_batch: int, attention: str = "sdpa", dtype: str = "bf16",
            gradient_checkpointing: bool = False, *, device: str = "cpu", lora_rank: int = 0,
            lora_targets: str = "all-linear", lora_dropout: float = 0.0, qlora: bool = False,
            transient: bool = False, modules_to_save: list[str] | None = None) -> dict[str, Any]:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    config = dict(config)
    model_type = config.pop("model_type")
    cfg = AutoConfig.for_model(model_type, **config)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attention).to(dtypes[dtype])
    if qlora:
        from transformers import BitsAndBytesConfig

        with tempfile.TemporaryDirectory() as folder:
            model.save_pretrained(folder)
            quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                       bnb_4bit_compute_dtype=dtypes[dtype], bnb_4bit_quant_storage=dtypes[dtype])
            model = AutoModelForCausalLM.from_pretrained(folder, quantization_config=quant, dtype=dtypes[dtype],
                                                         attn_implementation=attention, device_map=device)
    else:
        model = model.to(device)
    if lora_rank:
        from peft import LoraConfig, get_peft_model

        targets = lora_targets if lora_targets == "all-linear" else lora_targets.split(",")
        model = get_peft_model(model, LoraConfig(r=lora_rank, lora_alpha=2 * lora_rank, lora_dropout=lora_dropout,
                                                 target_modules=targets, task_type="CAUSAL_LM",
                                                 modules_to_save=modules_to_save or None))
    model.train()
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if lora_rank:
            model.enable_input_require_grads()  # what the HF Trainer does for PEFT models with checkpointing
    param_storages = {p.untyped_storage().data_ptr() for p in model.parameters()}
    held: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr and ptr not in param_storages:
            held[ptr] = max(held.get(ptr, 0), storage.nbytes())
        return t

    ids = torch.randint(0, cfg.vocab_size, (micro_batch, seq_len), device=device)
    if transient:
        for p in model.parameters():
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(input_ids=ids, labels=ids, use_cache=False)
    result: dict[str, Any] = {}
    loss = out.loss
    del out
    if transient and device == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        loss.backward()
        torch.cuda.synchronize()
        result["transient"] = torch.cuda.max_memory_allocated() - base
    elif transient:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            loss.backward()
        events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                        key=lambda e: e.start_ns())
        live = peak = 0
        for e in events:
            live += e.nbytes()
            peak = max(peak, live)
        result["transient"] = peak
    else:
        loss.backward()  # proves the graph is a real training graph
    result.update({
        "activations": sum(held.values()),
        "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
    })
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", help="a transformers config.json (must contain model_type)")
    ap.add_argument("--seq-len", type=int, required=True)
    ap.add_argument("--micro-batch", type=int, default=1)
    ap.add_argument("--attention", default="sdpa", choices=["sdpa", "eager"])
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--lora-rank", type=int, default=0)
    ap.add_argument("--lora-targets", default="all-linear")
    ap.add_argument("--lora-dropout", type=float, default=0.0)
    ap.add_argument("--qlora", action="store_true")
    ap.add_argument("--modules-to-save", help="comma list: PEFT's trainable copies (e.g. embed_tokens,lm_head)")
    ap.add_argument("--transient", action="store_true")
    a = ap.parse_args()
    with open(a.config) as f:
        config = json.load(f)
    json.dump(measure(config, a.seq_len, a.micro_batch, a.attention, a.dtype, a.gradient_checkpointing,
                      device=a.device, lora_rank=a.lora_rank, lora_targets=a.lora_targets,
                      lora_dropout=a.lora_dropout, qlora=a.qlora, transient=a.transient,
                      modules_to_save=a.modules_to_save.split(",") if a.modules_to_save else None), sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())

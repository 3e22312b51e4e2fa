"""ZeRO-3's module hooks, counted and timed: full training against LoRA, on one rank of this machine.

    python benchmarks/zero3_hooks.py            # the table (about 20 s on a 2-core CPU)

DeepSpeed's ZeRO-3 registers a forward pre/post hook and a backward pre/post hook on every module of the model
(`DeepSpeedZeRoOffload._register_deepspeed_module`, runtime/zero/parameter_offload.py), and every module whose
forward runs calls them, whether it owns parameters or not. The time model prices ZeRO-3's hooks per
parameter-owning module and pass (`zerokit.perf.model.step_time`, `zero3_module_overhead_s`, which the probe
derives on a full-training reference llama), with LoRA's adapters adding two modules (A and B) per adapted linear.
PEFT runs four modules per adapted linear (its LoRA wrapper, the base linear, A and B) and a dropout (an Identity
without dropout), and wraps the model twice: this script counts the modules each forward hooks and times the four
hook functions per call, for the same small llama trained both ways under a one-rank ZeRO-3 engine (gloo, bf16,
the plan's buckets for its hidden size), so the two counts can be set side by side.

Measured on an AMD EPYC (2026-11-28, one rank, one thread, three runs): full training hooked 58 modules a forward
(39 own parameters: the time model's count), LoRA 172 (the model counts 95). The hook functions took 12.4-13.1 ms a
step in full training (214-226 us a module) and 25.4-26.2 ms with LoRA (148-153 us: PEFT's wrappers and dropouts
own nothing to fetch): LoRA over full x2.0, where the model's count gives x2.44. So on one rank the model does not
under-price LoRA's hooks; the step times were alike (0.218-0.227 s full, 0.221-0.231 s LoRA). What LoRA at ZeRO-3
cost beyond the model on two ranks (tests/data/step_time/2026-11-28-amd-all, then -18.7%) was mostly elsewhere: the
all-gather of every adapter weight kept whole after each optimizer step (`zerokit.perf.model.adapter_persistence`).
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOOKS = ("pre_sub_module_forward_function", "post_sub_module_forward_function", "pre_sub_module_backward_function",
         "post_sub_module_backward_function")
MODEL = {"hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 4, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 4096, "max_position_embeddings": 512}
WARMUP, STEPS = 3, 5


def measure(mode: str) -> dict:
    """One engine's counts and times (run in a fresh process: a ZeRO-3 engine patches torch for good)."""
    import deepspeed
    import torch
    from deepspeed.runtime.zero import parameter_offload
    from transformers import LlamaConfig, LlamaForCausalLM

    from zerokit.memory.buffers import buffer_ladder

    torch.set_num_threads(1)
    calls: dict[str, list] = collections.defaultdict(lambda: [0, 0.0])
    classes: collections.Counter = collections.Counter()
    owning: set[int] = set()

    def wrap(name: str) -> None:
        hook = getattr(parameter_offload.DeepSpeedZeRoOffload, name)

        def timed(self, sub_module, *args, **kwargs):
            start = time.perf_counter()
            out = hook(self, sub_module, *args, **kwargs)
            calls[name][0] += 1
            calls[name][1] += time.perf_counter() - start
            if name == HOOKS[0]:
                classes[type(sub_module).__name__] += 1
                if any(True for _ in sub_module.parameters(recurse=False)):
                    owning.add(id(sub_module))
            return out

        setattr(parameter_offload.DeepSpeedZeRoOffload, name, timed)

    for name in HOOKS:
        wrap(name)
    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**MODEL)).to(torch.bfloat16)
    if mode == "lora":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.05, target_modules="all-linear",
                                                 task_type="CAUSAL_LM"), autocast_adapter_dtype=False)
    b = buffer_ladder(MODEL["hidden_size"], 3)[0]
    config = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
              "zero_optimization": {"stage": 3, "reduce_bucket_size": b.reduce_bucket_size,
                                    "stage3_prefetch_bucket_size": b.prefetch_bucket_size,
                                    "stage3_param_persistence_threshold": b.param_persistence_threshold},
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "torch_adam": True}}}
    engine, *_ = deepspeed.initialize(model=model, config=config,
                                      model_parameters=[p for p in model.parameters() if p.requires_grad])
    tokens = torch.randint(0, MODEL["vocab_size"], (4, 128))
    steps = []
    for step in range(WARMUP + STEPS):
        if step == WARMUP:
            calls.clear()
            classes.clear()
        start = time.perf_counter()
        engine.backward(engine(input_ids=tokens, labels=tokens).loss)
        engine.step()
        steps.append(time.perf_counter() - start)
    torch.distributed.destroy_process_group()
    return {"mode": mode, "step_s": sorted(steps[WARMUP:])[STEPS // 2],
            "calls": {k: [n / STEPS, s / STEPS] for k, (n, s) in calls.items()},
            "forward_modules": sum(classes.values()) / STEPS, "owning_modules": len(owning),
            "classes": {k: v // STEPS for k, v in classes.most_common()}}


def run(mode: str, port: int) -> dict:
    env = dict(os.environ, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, __file__, "--worker", mode], env=env, capture_output=True, text=True,
                          timeout=900, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode or not lines:
        raise SystemExit(f"zero3_hooks.py: the {mode} engine failed (exit {proc.returncode}):\n"
                         + "\n".join((proc.stdout + proc.stderr).splitlines()[-15:]))
    return json.loads(lines[-1])


def main() -> int:
    if sys.argv[1:2] == ["--worker"]:
        print(json.dumps(measure(sys.argv[2])))
        return 0
    from zerokit.launch.runner import free_port
    from zerokit.models.lora import lora_parameters
    from zerokit.perf.flops import model_flops

    config = {"model_type": "llama", **MODEL}
    base = model_flops(config).parameter_modules
    adapted = sum(copies for _, _, copies in lora_parameters(config, 8, "all-linear").linears)
    counted = {"full": base, "lora": base + 2 * adapted}  # what the time model prices ZeRO-3's hooks by
    print(f"ZeRO-3's module hooks on one rank of this machine (llama {MODEL['hidden_size']} x "
          f"{MODEL['num_hidden_layers']} layers, 4 x 128 tokens, bf16; LoRA r8 all-linear, dropout 0.05), "
          f"median of {STEPS} steps")
    print(f"{'training':9} {'step':>8} {'modules hooked':>15} {'own parameters':>15} {'model counts':>13} "
          f"{'hooks/step':>11} {'per module':>11}")
    rows = {}
    for mode in ("full", "lora"):
        r = rows[mode] = run(mode, free_port())
        hooks = sum(s for _, s in r["calls"].values())
        print(f"{mode:9} {r['step_s']:7.3f}s {r['forward_modules']:15.0f} {r['owning_modules']:15d} "
              f"{counted[mode]:13d} {hooks * 1e3:9.1f}ms {hooks / r['forward_modules'] * 1e6:9.0f}us")
    full, lora = rows["full"], rows["lora"]
    print(f"LoRA over full: modules hooked x{lora['forward_modules'] / full['forward_modules']:.2f}, the model's "
          f"count x{counted['lora'] / counted['full']:.2f}; LoRA's hooked modules by class: {lora['classes']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

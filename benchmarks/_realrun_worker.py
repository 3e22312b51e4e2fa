"""One rank of a real DeepSpeed training whose every tensor allocation is traced, phase by phase.

Started by `benchmarks/realrun_memory.py` through the real `deepspeed` runner (never run it by hand):

    deepspeed --num_gpus 2 benchmarks/_realrun_worker.py --case case.json --out result-dir

The profiler starts before the model exists, so the replayed allocation events give the exact bytes of live
tensors at every moment of the run. The model is built from its config.json with random weights (under
`deepspeed.zero.Init` for ZeRO-3, as the HF Trainer loads it), trained for a few optimizer steps with
`engine(...)`, `engine.backward`, `engine.step` (LoRA cases: wrapped by `peft.get_peft_model` first, and only the
adapters handed to DeepSpeed), and each phase is marked with a profiler range:

- forward: `engine(input_ids, labels)` of one micro-batch;
- backward: `engine.backward(loss)`, gradient reduction hooks included;
- optimizer_step: `engine.step()` at the accumulation boundary (the other micro-batches' `step` calls are no-ops).

Host-side bytes are separated from device-side bytes by address: at the end of each phase the storages that
DeepSpeed keeps on the host (offloaded fp32 partitions, Adam moments, CPU gradient buffers, offloaded 16-bit
parameters, pinned swap buffers) are listed, and an allocation whose address range lies inside one of them is
host-side. Everything else is what would sit on the GPU. Each rank writes `rank<N>.json`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--case", required=True, help="case JSON written by realrun_memory.py")
    p.add_argument("--out", required=True, help="directory for rank<N>.json")
    p.add_argument("--local_rank", "--local-rank", type=int, default=-1)
    return p.parse_args()


def storages_of(obj, seen: set, out: dict, depth: int = 0) -> None:
    """Every tensor storage reachable through lists, tuples, dicts and tensors: data_ptr -> nbytes."""
    import torch

    if depth > 6 or id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        if obj.device.type == "meta":
            return
        s = obj.untyped_storage()
        if s.data_ptr():
            out[s.data_ptr()] = max(out.get(s.data_ptr(), 0), s.nbytes())
        return
    if isinstance(obj, dict):
        for v in obj.values():
            storages_of(v, seen, out, depth + 1)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            storages_of(v, seen, out, depth + 1)


def host_storages(engine) -> dict:
    """Storages DeepSpeed keeps on the host when it offloads (address -> bytes), by the attributes its optimizers
    hold them in (runtime/zero/stage_1_and_2.py and stage3.py; the swap buffers of runtime/swap_tensor)."""
    import torch

    opt = engine.optimizer
    out: dict = {}
    seen: set = set()

    def add(obj, with_grads: bool = False) -> None:
        storages_of(obj, seen, out)
        if with_grads:
            for t in obj if isinstance(obj, (list, tuple)) else [obj]:
                if isinstance(t, torch.Tensor) and t.grad is not None:
                    storages_of(t.grad, seen, out)

    offload_opt = getattr(opt, "cpu_offload", False) or getattr(opt, "offload_optimizer", False)
    if offload_opt:
        # master weights and their fp32 gradients; ZeRO-1/2's pinned 16-bit copy and accumulation buffers
        add(getattr(opt, "single_partition_of_fp32_groups", None), with_grads=True)
        add(getattr(opt, "fp32_partitioned_groups_flat", None), with_grads=True)
        for name in ("param_buffer_of_bit16_for_cpu_offload_groups", "temp_grad_buffer_for_cpu_offload",
                     "accumulated_grads_in_cpu", "grad_partitions_flat_buffer", "norm_for_param_grads"):
            add(getattr(opt, name, None))
        base = getattr(opt, "optimizer", None)
        if base is not None:
            add(dict(base.state))
    if getattr(opt, "offload_param", False):
        for p in engine.module.parameters():
            t = getattr(p, "ds_tensor", None)
            if isinstance(t, torch.Tensor):
                add(t)
        add(getattr(opt, "param_groups_fp16_flat_cpu_memory", None))
        add(getattr(opt, "lp_param_buffer", None))
    swapper = getattr(opt, "optimizer_swapper", None)
    if swapper is not None:
        add(getattr(getattr(swapper, "swap_buffer_manager", None), "all_buffers", None))
    for p in engine.module.parameters():
        param_swapper = getattr(p, "nvme_swapper", None)
        if param_swapper is not None:
            add(getattr(param_swapper, "buffers", None))
            break
    return out


def _repair_uninitialised(model, deepspeed, torch, rank: int) -> None:
    """Under zero.Init transformers leaves some weights as torch.empty left them (mixtral's stacked experts): NaN
    losses, every step then skipped as an overflow, and Adam's states never allocated. Give those weights the
    normal(0, 0.02) init `from_config` gives them without ZeRO-3 (load phase only: not a measured step)."""
    params = list(model.parameters())
    with deepspeed.zero.GatheredParameters(params, modifier_rank=0):
        if rank == 0:
            with torch.no_grad():
                for p in params:
                    if p.dim() >= 2 and not (torch.isfinite(p).all() and p.abs().max() < 10):
                        p.normal_(0.0, 0.02)


def main() -> int:
    args = parse_args()
    case = json.loads(Path(args.case).read_text())
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    out_dir = Path(args.out)
    prof = None
    if not case.get("diagnose"):  # kineto profiles one range at a time: diagnosing profiles the last step only
        prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        prof.__enter__()  # before deepspeed, transformers or the model allocate anything
    else:
        # the profiler above imports torch._dynamo before deepspeed does; without it, zero.Init's tensor
        # constructor trips a dynamo polyfill's signature check ("Signature mismatch ... tensor_pynew")
        import torch._dynamo

    import deepspeed
    import torch.distributed as dist
    from transformers import AutoConfig, AutoModelForCausalLM

    ds_config = case["ds_config"]
    deepspeed.init_distributed()
    rank = dist.get_rank()
    torch.manual_seed(0)
    cfg_dict = dict(case["model_config"])
    model_type = cfg_dict.pop("model_type")
    config = AutoConfig.for_model(model_type, **cfg_dict)
    stage = (ds_config.get("zero_optimization") or {}).get("stage", 0)

    with record_function("phase:load"):
        if case.get("quantization_config"):
            from _qlora_base import quantized_base  # benchmarks/, this script's folder

            model = quantized_base(case, config, ds_config, torch, rank)
        else:
            with deepspeed.zero.Init(config_dict_or_path=ds_config, enabled=stage == 3):
                model = AutoModelForCausalLM.from_config(config, attn_implementation=case.get("attention", "sdpa"))
        if stage == 3 and not case.get("quantization_config"):  # a loaded checkpoint has every weight set
            _repair_uninitialised(model, deepspeed, torch, rank)
        if case.get("lora_config"):
            # as with the HF Trainer: the base is loaded (under zero.Init for ZeRO-3), then wrapped outside it; the
            # adapters are ordinary tensors that deepspeed.initialize converts to ZeRO-3 parameters itself
            from peft import LoraConfig, get_peft_model

            model = get_peft_model(model, LoraConfig(**case["lora_config"]),
                                   autocast_adapter_dtype=case.get("autocast_adapter_dtype", True))
        if case.get("gradient_checkpointing"):
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            if case.get("lora_config"):
                model.enable_input_require_grads()  # what the HF Trainer does for PEFT models with checkpointing
        model.config.use_cache = False
        model.train()  # as the HF Trainer does: from_pretrained (QLoRA's base) hands the model over in eval mode
        # only what trains reaches the optimizer (the Trainer's optimizer groups skip frozen parameters)
        trainable = [p for p in model.parameters() if p.requires_grad]
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=trainable, config=ds_config)
        del trainable
    del model
    micro_batch = engine.train_micro_batch_size_per_gpu()
    accumulation = engine.gradient_accumulation_steps()
    seq = case["seq_len"]
    steps = case["steps"]
    g = torch.Generator().manual_seed(rank)
    host_at: dict = {}
    losses = []
    diag = None
    for step in range(1, steps + 1):
        if step == steps and case.get("diagnose"):
            diag = profile(activities=[ProfilerActivity.CPU], profile_memory=True, with_stack=True)
            diag.__enter__()
        for micro in range(accumulation):
            start = torch.randint(0, config.vocab_size, (micro_batch, 1), generator=g)
            ids = ((start + torch.arange(seq)) % config.vocab_size).to(engine.device)
            with record_function(f"phase:forward:{step}:{micro}"):
                loss = engine(input_ids=ids, labels=ids, use_cache=False).loss
            host_at[f"forward:{step}:{micro}"] = set(host_storages(engine))
            with record_function(f"phase:backward:{step}:{micro}"):
                engine.backward(loss)
            host_at[f"backward:{step}:{micro}"] = set(host_storages(engine))
            boundary = micro == accumulation - 1
            name = f"{'optimizer_step' if boundary else 'noop_step'}:{step}:{micro}"
            with record_function(f"phase:{name}"):
                engine.step()
            host_at[name] = set(host_storages(engine))
            losses.append(float(loss.detach().float().item()))
            del loss, ids
    if diag is not None:
        diag.__exit__(None, None, None)
    dist.barrier()
    result = {}
    if prof is not None:
        prof.__exit__(None, None, None)
        result["phases"] = replay(prof.profiler.kineto_results, host_at)
    if diag is not None:
        result["diagnose"] = diagnose(diag.profiler.kineto_results)
    result.update(rank=rank, losses=losses, finite=all(math.isfinite(x) for x in losses),
                  optimizer=type(engine.optimizer).__name__,
                  basic_optimizer=type(getattr(engine, "basic_optimizer", None)).__name__)
    if ds_config.get("zero_optimization", {}).get("sub_group_size") is not None:
        # ZeRO-3's optimizer sub-groups as DeepSpeed cut them: (partition elements, tensors) of each
        result["sub_groups"] = [[sum(p.partition_numel() for p in group), len(group)]
                                for group in engine.optimizer.fp16_groups]
    (out_dir / f"rank{rank}.json").write_text(json.dumps(result, indent=1))
    dist.barrier()
    dist.destroy_process_group()
    return 0


def _phase_ranges(results) -> list:
    ranges = [(e.name()[len("phase:"):], e.start_ns(), e.start_ns() + e.duration_ns())
              for e in results.events() if e.name().startswith("phase:")]
    return sorted(ranges, key=lambda r: r[1])


def allocations(results) -> list:
    """(time, address, bytes) of every allocation (+) and free (-) the profiler saw, in time order."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    out = []
    stack = list(results.experimental_event_tree())
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        f = node.extra_fields
        if type(f).__name__.endswith("Allocation") and f.device.type == device:
            out.append((node.start_time_ns, f.ptr, f.alloc_size, node))
    out.sort(key=lambda a: a[0])
    return out


def replay(results, host_at: dict) -> dict:
    """Live tensor bytes at the start, device-side peak and end of every phase, replaying allocations by address.

    The profiler records the allocations and frees of the threads it profiles; a tensor whose last reference
    dies on one of gloo's threads (the buffers of a finished asynchronous collective) is freed unseen. Such a
    block is known to be gone when the allocator hands its address out again, and is dropped then.
    Host bytes are the live blocks at the addresses of the storages DeepSpeed keeps on the host (listed at the
    end of the phase; they are allocated at initialisation or at the first step and stay); a block the
    allocator did not hand out (aio's page-locked buffers) is counted on neither side. "peak" is the moment of
    the most device-side bytes, with the host bytes live then.
    """
    allocs = allocations(results)
    out: dict = {}
    blocks: dict = {}
    live = i = 0
    for name, start, end in _phase_ranges(results):
        host_ptrs = host_at.get(name, set())
        while i < len(allocs) and allocs[i][0] < start:
            live = _replay_one(blocks, allocs[i], live)
            i += 1
        host = sum(blocks.get(p, 0) for p in host_ptrs)
        first, first_host = live, host
        peak, peak_host, host_peak = live, host, host
        while i < len(allocs) and allocs[i][0] <= end:
            ptr = allocs[i][1]
            if ptr in host_ptrs:
                host -= blocks.get(ptr, 0)
            live = _replay_one(blocks, allocs[i], live)
            if ptr in host_ptrs:
                host += blocks.get(ptr, 0)
                host_peak = max(host_peak, host)
            if live - host > peak - peak_host:
                peak, peak_host = live, host
            i += 1
        out[name] = {"start": first, "start_host": first_host, "peak": peak, "host": peak_host, "end": live,
                     "end_host": host, "host_peak": host_peak}
    return out


def _replay_one(blocks: dict, alloc: tuple, live: int) -> int:
    _, ptr, size, _ = alloc
    old = blocks.pop(ptr, 0)  # a new block at a live address: the old one was freed where the profiler was not
    if size > 0:
        blocks[ptr] = size
        return live - old + size
    return live - old


def diagnose(results) -> dict:
    """For each phase of the profiled step: the allocations made in this step and live at the phase's peak and
    at its end, grouped by the Python call site that made them (bytes, count, site)."""
    allocs = allocations(results)
    out: dict = {}
    live: dict = {}
    total = i = 0
    for name, start, end in _phase_ranges(results):
        while i < len(allocs) and allocs[i][0] < start:
            total = _track(live, allocs[i], total)
            i += 1
        peak, at_peak = total, dict(live)
        while i < len(allocs) and allocs[i][0] <= end:
            total = _track(live, allocs[i], total)
            if total > peak:
                peak, at_peak = total, dict(live)
            i += 1
        out[name] = {"peak": _summarise(at_peak), "end": _summarise(live)}
    return out


def _track(live: dict, alloc: tuple, total: int) -> int:
    _, ptr, size, node = alloc
    old = live.pop(ptr, None)
    total -= old[0] if old is not None else 0
    if size > 0:
        live[ptr] = (size, node)
        total += size
    return total


def _site(node) -> str:
    names = []
    n = node.parent
    while n is not None and len(names) < 8:
        nm = n.name
        if "site-packages/" in nm:
            nm = nm.split("site-packages/")[1]
        if not nm.startswith(("<built-in", "torch/nn/modules/module.py", "torch/utils/_contextlib", "contextlib",
                              "torch/autograd/", "torch/_tensor.py", "deepspeed/utils/nvtx")):
            names.append(nm[:100])
        n = n.parent
    return " < ".join(names)


def _summarise(live: dict) -> list:
    by: dict = {}
    for size, node in live.values():
        c = by.setdefault(_site(node), [0, 0])
        c[0] += size
        c[1] += 1
    return sorted(([v[0], v[1], k] for k, v in by.items()), reverse=True)[:30]


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

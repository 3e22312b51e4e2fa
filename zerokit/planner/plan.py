"""`plan(model, hardware, training) -> Plan`: run the rules table, assemble the result, build the ds_config.

Pure: no I/O, no torch, no DeepSpeed. The CLI calls this and renders the result.
"""

from __future__ import annotations

from dataclasses import replace

from zerokit.dsconfig import build_ds_config
from zerokit.memory.buffers import buffer_ladder, comm_buffers, default_overhead
from zerokit.memory.host import host_memory
from zerokit.memory.states import DTYPE_BYTES, model_states
from zerokit.models.spec import ModelSpec
from zerokit.planner.rules import RULES, Context
from zerokit.planner.types import Decision, Hardware, Plan, Training
from zerokit.units import format_bytes


def plan(model: ModelSpec, hardware: Hardware, training: Training) -> Plan:
    """The fastest setup that fits, every candidate evaluated, one reason per decision, and its ds_config."""
    ctx = Context(model, hardware, training)
    reasons = []
    for name, rule in RULES:
        value, reason = rule(ctx)
        setattr(ctx, name, value)
        if reason:
            reasons.append(reason)
    chosen = ctx.chosen.candidate
    setup, buffers = chosen.setup, ctx.chosen.buffers
    decision = Decision(
        zero_stage=setup.zero_stage,
        offload_optimizer=setup.offload_optimizer,
        offload_param=setup.offload_param,
        micro_batch_size=setup.micro_batch_size,
        gradient_accumulation_steps=ctx.accumulation,
        gradient_checkpointing=setup.gradient_checkpointing,
        precision=ctx.precision,
        overlap_comm=buffers.overlap_comm,
        reduce_bucket_size=buffers.reduce_bucket_size,
        allgather_bucket_size=buffers.allgather_bucket_size,
        prefetch_bucket_size=buffers.prefetch_bucket_size,
        param_persistence_threshold=buffers.param_persistence_threshold,
        max_live_parameters=buffers.max_live_parameters,
        fits=chosen.fits,
    )
    result = Plan(
        model=model,
        hardware=hardware,
        training=training,
        decision=decision,
        memory=chosen.memory,
        cpu_bytes_per_node=chosen.cpu_bytes_per_node,
        nvme_bytes_per_node=chosen.nvme_bytes_per_node,
        candidates=tuple(e.candidate for e in ctx.evaluations),
        reasons=tuple(reasons),
        missing=None if chosen.fits else missing(ctx),
        warnings=tuple(model.notes) + tuple(ctx.warnings),
    )
    return replace(result, ds_config=build_ds_config(result))


def missing(ctx: Context) -> str:
    """What would make the plan fit, in words: more GPUs for ZeRO-3 without offload, or host memory for offload."""
    model, hw, t = ctx.model, ctx.hardware, ctx.training
    options = []
    gpus = gpus_needed(ctx)
    if gpus is not None and gpus > hw.world_size:
        extra = gpus - hw.world_size
        text = f"{extra} more {ctx.gpu_label} GPU{'s' if extra > 1 else ''} ({gpus} in all, ZeRO-3 without offload"
        if hw.gpus_per_node > 1:
            nodes = -(-gpus // hw.gpus_per_node)
            text += f": {nodes} nodes of {hw.gpus_per_node}"
        text += ")"
        options.append(text)
    w = DTYPE_BYTES[ctx.precision]
    full = host_memory(model.parameters, model.largest_layer_parameters, hw.gpus_per_node, hw.nodes, 3, "cpu", "cpu",
                       w)
    if full_offload_fits_gpu(ctx):
        have = f" (have {format_bytes(hw.cpu_memory_bytes)})" if hw.cpu_memory_bytes else ""
        options.append(f"{format_bytes(full.cpu_bytes)} of CPU RAM per node for full offload{have}")
        if not hw.nvme_path:
            nvme = host_memory(model.parameters, model.largest_layer_parameters, hw.gpus_per_node, hw.nodes, 3,
                               "nvme", "nvme", w)
            if hw.cpu_memory_bytes is None or nvme.cpu_bytes <= hw.cpu_memory_bytes:
                options.append(f"an NVMe drive with {format_bytes(nvme.nvme_bytes)} free per node "
                               f"(--nvme-path) for ZeRO-Infinity offload")
    else:
        options.append(f"GPUs with more than {format_bytes(hw.gpu_memory_bytes)}: even with everything offloaded "
                       "the largest layer, activations and overhead do not fit")
    forced = [o for o, v in (("--zero-stage", t.zero_stage), ("--offload-optimizer", t.offload_optimizer),
                             ("--offload-param", t.offload_param), ("--micro-batch", t.micro_batch),
                             ("--gradient-checkpointing", t.gradient_checkpointing)) if v is not None]
    text = "needs " + ", or ".join(options)
    if forced:
        text += f"; or drop {', '.join(forced)} to let the planner choose"
    return text


def gpus_needed(ctx: Context) -> int | None:
    """GPUs of this size for ZeRO-3 without offload, at the smallest micro-batch with checkpointing (if allowed).

    Per GPU: fixed costs (working set, buffers, activations, overhead) + partitioned states / N <= capacity.
    None when even one GPU's fixed costs exceed its capacity.
    """
    model, hw, _t = ctx.model, ctx.hardware, ctx.training
    cap = hw.gpu_memory_bytes
    partitioned = model_states(model.parameters, model.largest_layer_parameters, 1, 3, "none", "none", ctx.precision)
    working = model_states(0, model.largest_layer_parameters, 1, 3, "none", "none", ctx.precision).total
    fixed = working + _fixed_without_states(ctx, 3)
    room = cap - fixed
    if room <= 0:
        return None
    return max(1, -(-(partitioned.total - working) // room))


def full_offload_fits_gpu(ctx: Context) -> bool:
    model = ctx.model
    states = model_states(model.parameters, model.largest_layer_parameters, ctx.hardware.world_size, 3, "cpu", "cpu",
                          ctx.precision)
    return states.total + _fixed_without_states(ctx, 3) <= ctx.hardware.gpu_memory_bytes


def _fixed_without_states(ctx: Context, stage: int) -> int:
    """Smallest buffers, smallest micro-batch (checkpointed unless forced off), overhead."""
    model, hw, t = ctx.model, ctx.hardware, ctx.training
    frugal = buffer_ladder(model.hidden_size, stage)[-1]
    buffers = comm_buffers(frugal, stage, model.parameters, model.largest_layer_parameters, DTYPE_BYTES[ctx.precision])
    ck = t.gradient_checkpointing if t.gradient_checkpointing is not None else True
    act, transient = ctx.activations(ctx.batch.micro_batches[0], ck)
    overhead = t.overhead_bytes if t.overhead_bytes is not None else default_overhead(hw.gpu_memory_bytes)
    return buffers + act + transient + overhead

"""`plan(model, hardware, training) -> Plan`: run the rules table, assemble the result, build the ds_config.

Pure: no I/O, no torch, no DeepSpeed. The CLI calls this and renders the result.
"""

from __future__ import annotations

from dataclasses import replace

from zerokit.dsconfig import build_ds_config
from zerokit.memory.buffers import OVERHEAD_FIXED, OVERHEAD_FRACTION, buffer_ladder, comm_buffers, default_overhead
from zerokit.memory.host import host_memory
from zerokit.memory.states import DTYPE_BYTES, model_states
from zerokit.models.spec import ModelSpec
from zerokit.planner.rules import RULES, Context, setup_label
from zerokit.planner.types import Decision, Hardware, Plan, Training
from zerokit.units import format_bytes


def plan(model: ModelSpec, hardware: Hardware, training: Training) -> Plan:
    """The fastest setup that fits, every candidate evaluated, one reason per decision, and its ds_config."""
    ctx, reasons = run_rules(model, hardware, training)
    if not ctx.chosen.candidate.fits and (training.micro_batch or 1) > 1:
        # "The largest micro-batch up to the one requested": the requested one first, smaller ones only if it fits
        # nowhere.
        relaxed, relaxed_reasons = run_rules(model, hardware, training, relax_micro_batch=True)
        if relaxed.chosen.candidate.fits:
            ctx, reasons = relaxed, relaxed_reasons
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


def run_rules(model: ModelSpec, hardware: Hardware, training: Training,
              relax_micro_batch: bool = False) -> tuple[Context, list[str]]:
    """Run the rules table in order; each rule's decision lands on the context under its name."""
    ctx = Context(model, hardware, training, relax_micro_batch=relax_micro_batch)
    reasons = []
    for name, rule in RULES:
        value, reason = rule(ctx)
        setattr(ctx, name, value)
        if reason:
            reasons.append(reason)
    return ctx, reasons


def missing(ctx: Context) -> str:
    """What would make the plan fit, in words: more GPUs for ZeRO-3 without offload, or host memory for offload."""
    model, hw, t = ctx.model, ctx.hardware, ctx.training
    forced = [f"{o} {_flag(v)}" for o, v in (("--zero-stage", t.zero_stage), ("--offload-optimizer", t.offload_optimizer),
                                             ("--offload-param", t.offload_param), ("--micro-batch", t.micro_batch),
                                             ("--gradient-checkpointing", t.gradient_checkpointing)) if v is not None]
    if forced:  # would the planner's own choice fit? Then the forced options are what is missing.
        free = replace(t, zero_stage=None, offload_optimizer=None, offload_param=None, micro_batch=None,
                       gradient_checkpointing=None)
        alt = run_rules(model, hw, free)[0].chosen.candidate
        if alt.fits:
            s = alt.setup
            return (f"with {' and '.join(forced)} forced, the closest setup {ctx.chosen.candidate.why_not}; without "
                    f"{'them' if len(forced) > 1 else 'it'} the plan fits as "
                    f"{setup_label(s.zero_stage, s.offload_optimizer, s.offload_param)} at micro-batch "
                    f"{s.micro_batch_size}" + (" with gradient checkpointing" if s.gradient_checkpointing else ""))
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
        options.append(f"a GPU with at least {format_bytes(smallest_gpu(ctx))}: even with everything offloaded, the "
                       "largest layer, one micro-batch's activations and the overhead need that much")
    return "needs " + ", or ".join(options)


def _flag(value: object) -> str:
    return ("on" if value else "off") if isinstance(value, bool) else str(value)


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
    return _full_offload_need(ctx) <= ctx.hardware.gpu_memory_bytes


def smallest_gpu(ctx: Context) -> int:
    """The GPU memory at which full offload would fit, with the default overhead growing with the GPU."""
    need = _full_offload_need(ctx)
    if ctx.training.overhead_bytes is not None:
        return need
    rest = need - default_overhead(ctx.hardware.gpu_memory_bytes)
    return int((rest + OVERHEAD_FIXED) / (1 - OVERHEAD_FRACTION)) + 1


def _full_offload_need(ctx: Context) -> int:
    model = ctx.model
    states = model_states(model.parameters, model.largest_layer_parameters, ctx.hardware.world_size, 3, "cpu", "cpu",
                          ctx.precision)
    return states.total + _fixed_without_states(ctx, 3)


def _fixed_without_states(ctx: Context, stage: int) -> int:
    """Smallest buffers, smallest micro-batch (checkpointed unless forced off), overhead."""
    model, hw, t = ctx.model, ctx.hardware, ctx.training
    frugal = buffer_ladder(model.hidden_size, stage)[-1]
    buffers = comm_buffers(frugal, stage, model.parameters, model.largest_layer_parameters, DTYPE_BYTES[ctx.precision])
    ck = t.gradient_checkpointing if t.gradient_checkpointing is not None else True
    act, transient = ctx.activations(ctx.batch.micro_batches[0], ck)
    overhead = t.overhead_bytes if t.overhead_bytes is not None else default_overhead(hw.gpu_memory_bytes)
    return buffers + act + transient + overhead

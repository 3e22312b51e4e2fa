"""`plan(model, hardware, training) -> Plan`: run the rules table and assemble the result.

Pure: no I/O, no torch, no DeepSpeed. Memory comes from the cost layer (`zerokit.memory.estimate`); the ds_config
is the caller's to build (`zerokit.dsconfig.build_ds_config(plan)`), so the planner does not depend on it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace

from zerokit.errors import BadInput
from zerokit.memory.activations import ActivationEstimate, kernel_run, no_sdpa_note
from zerokit.memory.buffers import OVERHEAD_FIXED, OVERHEAD_FRACTION, default_overhead
from zerokit.memory.estimate import costs_of, saves_views
from zerokit.models.spec import ModelSpec
from zerokit.perf.devices import DEVICE_FIGURES
from zerokit.perf.machine import (
    MachinePerf,
    machine_from_preset,
    other_gpu,
    shared_cpu_adam,
    stand_in_cpu_adam,
    unmeasured_links,
    unmeasured_nvme,
)
from zerokit.perf.model import StepTime
from zerokit.planner.rules import ADVICE_GAIN, GLOBAL_BATCH_SLACK, RULES, TIE_TOLERANCE, TIGHT, Context, setup_label
from zerokit.planner.types import Decision, Hardware, Plan, Training
from zerokit.units import format_bytes, format_count, format_rate

ActivationModel = Callable[[int, int, bool], ActivationEstimate]
FALLBACK_GPU = "a100-80gb"


def plan(model: ModelSpec, hardware: Hardware, training: Training, *, activations: ActivationModel | None = None,
         activations_source: str | None = None, machine: MachinePerf | None = None,
         adapters_hint: bool = False) -> Plan:
    """The fastest setup that fits, every candidate evaluated, one reason per decision.

    `activations(seq_len, micro_batch, checkpointing)` replaces the analytic activation model (a calibrated one,
    `zerokit.memory.calibrate.CalibratedActivations.estimate`); `activations_source` names it in the plan.
    `machine` is what the step-time model times candidates on: a probe profile or a preset with overrides
    (`zerokit.perf.build_machine`); None = the GPU preset's published figures.

    Raises BadInput for a sequence longer than a learned-position model's positions (`check_positions`). A family
    without sdpa is planned for the eager attention a run asking for sdpa computes (memory and step time alike).

    `adapters_hint`: where full fine-tuning fits nowhere, plan LoRA and then QLoRA on the same machine too, and add
    the first that fits to `missing` (`adapters_instead`: up to two more plans, which `zerokit plan` spends and a
    sweep need not).
    """
    check_positions(model, training.seq_len)
    extra_warnings = []
    kernel = kernel_run(model.model_type, training.attention)
    if kernel != training.attention:
        training = replace(training, attention=kernel)
        extra_warnings.append(no_sdpa_note(model.model_type))
    if machine is None:
        machine, note = default_machine(hardware)
        if note:
            extra_warnings.append(note)
    else:
        extra_warnings += other_gpu(machine, hardware.gpu_name)
        extra_warnings += unmeasured_links(machine, hardware.gpus_per_node, hardware.nodes)
    extra_warnings += context_notes(model, training.seq_len)
    ctx, reasons = run_rules(model, hardware, training, activations=activations, machine=machine)
    if not ctx.chosen.candidate.fits and (training.micro_batch or 1) > 1:
        # "The largest micro-batch up to the one requested": the requested one first, smaller ones only if it fits
        # nowhere.
        relaxed, relaxed_reasons = run_rules(model, hardware, training, relax_micro_batch=True,
                                             activations=activations, machine=machine)
        if relaxed.chosen.candidate.fits:
            ctx, reasons = relaxed, relaxed_reasons
    if len(ctx.batch.options) > 1:
        ctx, reasons = batch_by_speed(ctx, reasons, activations)
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
        overlap_comm=buffers.overlap_comm and setup.zero_stage > 0,  # ZeRO-0 writes no buckets: nothing overlaps
        reduce_bucket_size=buffers.reduce_bucket_size,
        allgather_bucket_size=buffers.allgather_bucket_size,
        prefetch_bucket_size=buffers.prefetch_bucket_size,
        param_persistence_threshold=buffers.param_persistence_threshold,
        max_live_parameters=buffers.max_live_parameters,
        fits=chosen.fits,
    )
    if activations_source is None:
        generic = ctx.activation(setup.micro_batch_size, setup.gradient_checkpointing, setup.zero_stage).generic
        activations_source = "generic" if generic else "modelled"
    extra_warnings += held_gathered(ctx)
    extra_warnings += tight_fit(ctx)
    extra_warnings += unmeasured_nvme(machine, setup.offload_optimizer, setup.offload_param, hardware.nvme_path)
    extra_warnings += stand_in_cpu_adam(machine, setup.offload_optimizer)
    extra_warnings += shared_cpu_adam(machine, setup.offload_optimizer, hardware.gpus_per_node)
    host = ctx.chosen.host
    performance = chosen.performance
    time_to_train = None
    if performance is not None and training.train_tokens is not None:
        time_to_train = performance.time_to_train_s(training.train_tokens)
        extra_warnings += steps_against_tokens(training, performance)
    return Plan(
        model=model,
        hardware=hardware,
        training=training,
        decision=decision,
        memory=chosen.memory,
        cpu_bytes_per_node=chosen.cpu_bytes_per_node,
        nvme_bytes_per_node=chosen.nvme_bytes_per_node,
        candidates=tuple(e.candidate for e in ctx.evaluations),
        reasons=tuple(reasons),
        missing=None if chosen.fits else missing(ctx) + (adapters_instead(ctx) if adapters_hint else ""),
        warnings=tuple(model.notes) + tuple(ctx.warnings) + tuple(extra_warnings),
        phases=ctx.chosen.phases,
        peak_phase=chosen.peak_phase,
        host_steady_state=ctx.host_training(host, chosen.memory.total),  # the ranks' too on DeepSpeed's CPU accelerator
        host_load_peak=host.load_peak,
        activations_source=activations_source,
        performance=performance,
        time_to_train_s=time_to_train,
        peft=ctx.peft,
    )


def run_rules(model: ModelSpec, hardware: Hardware, training: Training, relax_micro_batch: bool = False,
              activations: ActivationModel | None = None, machine: MachinePerf | None = None,
              global_batch: int | None = None, batch_note: str = "") -> tuple[Context, list[str]]:
    """Run the rules table in order; each rule's decision lands on the context under its name. `global_batch`: one
    of the rounded global batches `BatchChoice.options` lists (None: the first, the nearest), and `batch_note` why
    (rule_batch says it where it says the rounding)."""
    if machine is None:
        machine = default_machine(hardware)[0]
    ctx = Context(model, hardware, training, relax_micro_batch=relax_micro_batch, activation_model=activations,
                  machine=machine, global_batch=global_batch, batch_note=batch_note)
    reasons = []
    for name, rule in RULES:
        value, reason = rule(ctx)
        setattr(ctx, name, value)
        if reason:
            reasons.append(reason)
    return ctx, reasons


def batch_by_speed(ctx: Context, reasons: list[str], activations: ActivationModel | None
                   ) -> tuple[Context, list[str]]:
    """The global batch asked for, or a multiple of the GPUs near it that trains faster.

    A global batch that must be rounded anyway (not a multiple of the GPUs, or given in tokens) becomes the fitting
    option of `BatchChoice.options` with the most tokens/s; within TIE_TOLERANCE of it, the one nearest the samples
    asked (the nearest multiple first). Its samples per GPU set the micro-batches: 4M tokens of 4,096 on 32 GPUs
    rounds to 992, 31 a GPU, which allows micro-batch 1 or 31, and a 70B ZeRO-3 run at micro-batch 1 spends most of
    each step gathering parameters: 960 trains at micro-batch 5, 2.4x the tokens/s. A global batch asked that divides
    evenly is kept, and an option more than ADVICE_GAIN faster is named in a warning.
    """
    t, b = ctx.training, ctx.batch
    runs = [ctx] + [run_rules(ctx.model, ctx.hardware, t, activations=activations, machine=ctx.machine,
                              global_batch=g)[0] for g in b.options[1:]]
    timed = [(c.chosen.candidate.performance.tokens_per_s, g, c) for c, g in zip(runs, b.options)
             if c.chosen.candidate.fits]
    if not timed:
        return ctx, reasons
    speed, g, alt = max(timed, key=lambda x: x[0])
    if b.exact:  # divides evenly: kept, and a faster option advised
        own = ctx.chosen.candidate.performance
        if g != b.asked and (own is None or speed > (1 + ADVICE_GAIN) * own.tokens_per_s):
            dp = ctx.hardware.world_size
            ctx.warnings.append(
                f"global batch {b.asked} is {b.asked // dp} samples per GPU, which "
                + (f"trains at micro-batch {ctx.chosen.candidate.setup.micro_batch_size} ({format_rate(own.tokens_per_s)} "
                   "tokens/s)" if own is not None else "fits no setup")
                + f"; {g} ({g // dp} per GPU, {_off(g, b.asked)}) trains at micro-batch "
                f"{alt.chosen.candidate.setup.micro_batch_size}, {format_rate(speed)} tokens/s: pass --global-batch {g}")
        return ctx, reasons
    _, g, chosen = min((x for x in timed if x[0] >= (1 - TIE_TOLERANCE) * speed),
                       key=lambda x: (abs(x[1] - b.asked), b.options.index(x[1])))
    if g == b.options[0]:
        return ctx, reasons
    perf, mb = chosen.chosen.candidate.performance, chosen.chosen.candidate.setup.micro_batch_size
    nearest = ctx.chosen.candidate
    versus = (f"the nearest, {b.options[0]}, trains at micro-batch {nearest.setup.micro_batch_size}, "
              f"{format_rate(nearest.performance.tokens_per_s)} tokens/s" if nearest.fits else
              f"the nearest, {b.options[0]}, fits no setup")
    why = (f" ({_off(g, b.asked)}: the fastest of the multiples within {GLOBAL_BATCH_SLACK:.0%}, micro-batch {mb} at "
           f"{format_rate(perf.tokens_per_s)} tokens/s; {versus})")
    # the chosen option's rules run again with the comparison, which rule_batch adds where it says the rounding
    return run_rules(ctx.model, ctx.hardware, t, activations=activations, machine=ctx.machine, global_batch=g,
                     batch_note=why)


LEARNED_POSITIONS = frozenset({"gpt2", "opt", "gpt_bigcode", "gpt_neo", "biogpt"})
"""Families whose positions are an embedding table with a row per position (transformers' `wpe`, `embed_positions`):
a token past its rows is an index out of range, on the first step. The others (rotary, ALiBi, xglm's sinusoids,
which transformers extends on demand) run any length."""


def position_limit(model: ModelSpec) -> tuple[str, int] | None:
    """(config key, positions) the model's config.json gives it: max_position_embeddings, or GPT-2's own n_positions;
    None for a bare count (a borrowed shape) or a config without a usable one."""
    if model.source == "count":
        return None
    config = model.config
    key = next((k for k in ("n_positions", "max_position_embeddings") if k in config), None)
    limit = config.get(key) if key else None
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        return None
    return key, limit


def learned_position_limit(model: ModelSpec) -> int | None:
    """The longest sequence a learned-position model takes (`LEARNED_POSITIONS`); None where any length runs."""
    found = position_limit(model)
    return found[1] if found and model.model_type in LEARNED_POSITIONS else None


def check_positions(model: ModelSpec, seq_len: int) -> None:
    """BadInput for a sequence past a learned-position model's positions: its first step would fail."""
    limit = learned_position_limit(model)
    if limit is not None and seq_len > limit:
        key = position_limit(model)[0]
        raise BadInput(f"--seq-len {seq_len:,} is past the {limit:,} positions {model.model_type} learns ({key}): "
                       f"its first step fails with an index out of range; use --seq-len {limit} or less, or raise "
                       f"{key} in config.json (the new positions start untrained)")


def tight_fit(ctx: Context) -> list[str]:
    """A warning when the decision fits with more than TIGHT of the GPU's memory (the overhead reserve counted): the
    largest micro-batch that fits is chosen, so about one plan in seven does; how to leave room: the largest smaller
    --micro-batch whose own plan leaves it (one whose peak is the optimizer step, or that then plans another tight
    setup, would not), else a larger --overhead. On DeepSpeed's CPU accelerator, of the node's RAM, which the ranks
    share with what offload keeps there (`Context.host_training`)."""
    c, hw = ctx.chosen.candidate, ctx.hardware
    share = _filled(ctx)
    if not c.fits or share <= TIGHT:
        return []
    if hw.accelerator == "cpu" and hw.cpu_memory_bytes:  # the ranks and what offload keeps share one RAM
        states = " and the offloaded states" if ctx.chosen.host.steady_state else ""
        what, where = (f"the node's {format_bytes(hw.cpu_memory_bytes)} of RAM (its {hw.gpus_per_node} ranks"
                       f"{states})"), "the machine"
    else:
        what, where = f"each GPU's {format_bytes(hw.gpu_memory_bytes)}", "the GPU"
    reserve = f", its {format_bytes(ctx.overhead)} overhead reserve counted" if ctx.overhead else ""
    mb = c.setup.micro_batch_size
    roomy = None
    for m in reversed([m for m in ctx.batch.micro_batches if m < mb]):  # what `--micro-batch m` plans
        alt = run_rules(ctx.model, hw, replace(ctx.training, micro_batch=m), activations=ctx.activation_model,
                        machine=ctx.machine)[0]
        if alt.chosen.candidate.fits and _filled(alt) <= TIGHT:
            roomy = m
            break
    how = f"--micro-batch {roomy} or a larger --overhead" if roomy else "a larger --overhead"
    return [(f"the plan fills {share:.0%} of {what}{reserve}: it fits as planned, with little room for what a plan "
             f"does not see, such as another process on {where}; for headroom, plan with {how}")]


def _filled(ctx: Context) -> float:
    """The share of the GPU's memory the chosen setup needs; on DeepSpeed's CPU accelerator, of the node's RAM."""
    c, hw = ctx.chosen.candidate, ctx.hardware
    if hw.accelerator == "cpu" and hw.cpu_memory_bytes:
        return ctx.host_training(ctx.chosen.host, c.memory.total) / hw.cpu_memory_bytes
    return c.memory.total / hw.gpu_memory_bytes


def held_gathered(ctx: Context) -> list[str]:
    """A warning when the decision is ZeRO-3 and the autograd graph keeps gathered parameters that DeepSpeed
    releases (`zerokit.memory.buffers.kept_with_views`): an MoE's stacked experts without gradient checkpointing,
    QLoRA's 4-bit weights (`zerokit.memory.estimate.quantized_held`); how many bytes per GPU that is."""
    s = ctx.chosen.candidate.setup
    if s.zero_stage != 3:
        return []
    args = (3, s.offload_optimizer, s.offload_param, ctx.chosen.level, s.gradient_accumulation_steps)
    if ctx.qlora:
        held = ctx.costs(*args, s.gradient_checkpointing).step_held
        return [(f"QLoRA at ZeRO-3: every GPU holds the gathered 4-bit base from forward to the end of the "
                 f"optimizer step, {format_bytes(held)} on top of its partition (the parameters row counts it): "
                 "bitsandbytes' MatMul4Bit keeps a view of each gathered weight on its autograd node, which lives "
                 "until the loss goes, so DeepSpeed's release frees the parameter but not its storage")] \
            if held > 0 else []
    if s.gradient_checkpointing or not saves_views(ctx.model):
        return []
    # the plan's own costs (views held; LoRA's frozen experts alike) against the same setup without the views
    hw = ctx.hardware
    without = costs_of(ctx.model, hw.world_size, hw.accelerator, 3, s.offload_optimizer, s.offload_param,
                       s.gradient_accumulation_steps, ctx.precision, ctx.chosen.buffers, ctx.overhead,
                       front_released=True, **ctx.peft_costs(3))
    held = ctx.costs(*args, False).gathered - without.gathered
    if held <= 0:
        return []
    return [(f"ZeRO-3 without gradient checkpointing keeps {format_bytes(held)} per GPU of the MoE layers' stacked "
            "experts gathered from forward to backward: transformers' grouped_mm (and eager) experts pass each "
            "weight as a view, which autograd saves for backward, so DeepSpeed's release frees the parameter but not "
            "its gathered storage (the parameters row counts it); gradient checkpointing saves no views")]


def context_notes(model: ModelSpec, seq_len: int) -> list[str]:
    """A warning when the sequence is longer than the positions the model's config.json gives it and the model still
    runs it (rotary, ALiBi): a context the model was not trained for. Learned positions are `check_positions`'."""
    found = position_limit(model)
    if found is None or seq_len <= found[1] or model.model_type in LEARNED_POSITIONS:
        return []
    key, limit = found
    return [(f"--seq-len {seq_len:,} is past {model.model_type}'s {key} ({limit:,}): transformers runs it, but the "
             f"model was trained on shorter sequences; train at --seq-len {limit}, or extend its context first (a "
             f"rotary model: rope_scaling in config.json, which sets {key} too)")]


def _off(g: int, asked: int) -> str:
    """'+4.8%': how far a global batch is from the one asked."""
    return f"{100 * (g - asked) / asked:+.1f}%"


@functools.cache
def _preset_machine(name: str) -> MachinePerf:
    return machine_from_preset(name)


def default_machine(hardware: Hardware) -> tuple[MachinePerf, str | None]:
    """The GPU preset's published figures; for a GPU given by memory alone, an A100-80GB's, said in a warning."""
    if hardware.gpu_name in DEVICE_FIGURES:
        return _preset_machine(hardware.gpu_name), None
    return _preset_machine(FALLBACK_GPU), (
        f"step times assume an {FALLBACK_GPU}'s compute and links (the GPU was given by memory alone): give --gpu "
        "PRESET, or --hardware from `zerokit probe`, for figures that describe yours")


def missing(ctx: Context) -> str:
    """What would make the plan fit, in words: more GPUs for ZeRO-3 without offload, or host memory for offload."""
    model, hw, t = ctx.model, ctx.hardware, ctx.training
    forced = [f"{o} {_flag(v)}" for o, v in (("--zero-stage", t.zero_stage), ("--offload-optimizer", t.offload_optimizer),
                                             ("--offload-param", t.offload_param), ("--micro-batch", t.micro_batch),
                                             ("--gradient-checkpointing", t.gradient_checkpointing)) if v is not None]
    if forced:  # would the planner's own choice fit? Then the forced options are what is missing.
        free = replace(t, zero_stage=None, offload_optimizer=None, offload_param=None, micro_batch=None,
                       gradient_checkpointing=None)
        # the whole plan, not its rules alone: a global batch that must be rounded is timed at each option
        # (`batch_by_speed`), which can change the setup and micro-batch that leaving the options out plans
        alt = plan(model, hw, free, activations=ctx.activation_model, machine=ctx.machine).decision
        if alt.fits:
            return (f"with {' and '.join(forced)} forced, the closest setup {ctx.chosen.candidate.why_not}; without "
                    f"{'them' if len(forced) > 1 else 'it'} the plan fits as "
                    f"{setup_label(alt.zero_stage, alt.offload_optimizer, alt.offload_param)} at micro-batch "
                    f"{alt.micro_batch_size}" + (" with gradient checkpointing" if alt.gradient_checkpointing else ""))
    options = []
    gpus = gpus_needed(ctx)
    if gpus is not None and gpus > hw.world_size:
        extra = gpus - hw.world_size
        nodes = -(-gpus // hw.gpus_per_node)
        if hw.accelerator == "cpu":  # a host's ranks share its RAM: only more hosts add memory
            more = nodes - hw.nodes
            text = (f"{more} more host{'s' if more > 1 else ''} like this one ({nodes} in all, "
                    f"{hw.gpus_per_node} rank{'s' if hw.gpus_per_node > 1 else ''} each, ZeRO-3 without offload)")
        else:
            text = f"{extra} more {ctx.gpu_label} GPU{'s' if extra > 1 else ''} ({gpus} in all, ZeRO-3 without offload"
            if hw.gpus_per_node > 1:
                text += f": {nodes} nodes of {hw.gpus_per_node}"
            text += ")"
        options.append(text)
    full = ctx.host_of(3, "cpu", _param_offload(ctx, "cpu"))
    full_bytes = ctx.host_need(full, _full_offload_need(ctx))  # the ranks' too on DeepSpeed's CPU accelerator
    have = f" (have {format_bytes(hw.cpu_memory_bytes)})" if hw.cpu_memory_bytes else ""
    short = hw.cpu_memory_bytes is not None and full_bytes > hw.cpu_memory_bytes
    if full_offload_fits_gpu(ctx):
        options.append(f"{format_bytes(full_bytes)} of CPU RAM per node for full offload{have}")
        nvme = ctx.host_of(3, "nvme", _param_offload(ctx, "nvme"))
        if not hw.nvme_path:
            if hw.cpu_memory_bytes is None or nvme.cpu_bytes <= hw.cpu_memory_bytes:
                options.append(f"an NVMe drive with {format_bytes(nvme.nvme_bytes)} free per node "
                               f"(--nvme-path) for ZeRO-Infinity offload")
        else:  # the NVMe setups were evaluated: what they lack
            lacks = []
            if hw.cpu_memory_bytes is not None and nvme.cpu_bytes > hw.cpu_memory_bytes:
                lacks.append(f"{format_bytes(nvme.cpu_bytes)} of CPU RAM per node{have}")
            if hw.nvme_bytes is not None and nvme.nvme_bytes > hw.nvme_bytes:
                lacks.append(f"{format_bytes(nvme.nvme_bytes)} free on the NVMe per node "
                             f"(have {format_bytes(hw.nvme_bytes)})")
            if lacks:
                options.append(" and ".join(lacks) + " for ZeRO-Infinity offload to NVMe")
    elif ctx.qlora and ctx.qlora_load > hw.gpu_memory_bytes:
        base = format_bytes(ctx.peft.frozen_bytes_at(3))
        if ctx.qlora_load >= _frugal_need(ctx, 3, "cpu", "none", hw.world_size):  # the load is what sets the size
            why = (f"transformers loads the whole {base} 4-bit base onto every GPU before ZeRO-3 partitions it, "
                   "however many GPUs there are")
        else:  # a step needs more than the load: its activations (checkpointing forced off, a long sequence)
            why = ("even at ZeRO-3 with the optimizer offloaded, a step's activations, the base's partition and the "
                   f"overhead need that much (and transformers first loads the whole {base} 4-bit base onto every "
                   "GPU)")
        options.append(f"a GPU with at least {format_bytes(smallest_gpu(ctx))}: {why}")
        lora = lora_instead(ctx)
        if lora:
            options.append(lora)
    elif ctx.qlora:  # the base loads, but a step holds it gathered: neither more GPUs nor offload removes that
        held = _frugal_held(ctx)
        holds = (f"every GPU holds the gathered 4-bit base through the step ({format_bytes(held)}, however many GPUs "
                 "there are) beside its partition" if held else
                 f"the whole {format_bytes(ctx.peft.frozen_bytes_at(3))} 4-bit base")
        text = (f"a GPU with at least {format_bytes(smallest_gpu(ctx))}: even at ZeRO-3 with the optimizer offloaded "
                f"(the 4-bit weights cannot be offloaded), {holds}, a micro-batch's activations and the overhead need "
                "that much")
        if short:
            text += f", with {format_bytes(full_bytes)} of CPU RAM per node for the optimizer's offload{have}"
        options.append(text)
        lora = lora_instead(ctx)
        if lora:
            options.append(lora)
    else:
        text = (f"a GPU with at least {format_bytes(smallest_gpu(ctx))}: even with everything offloaded, the "
                "largest layer, one micro-batch's activations and the overhead need that much")
        if short:  # that GPU offloads everything: the host must hold it too
            text += f", with {format_bytes(full_bytes)} of CPU RAM per node for that offload{have}"
        options.append(text)
    return "needs " + ", or ".join(options)


def adapters_instead(ctx: Context) -> str:
    """For full fine-tuning that fits nowhere: '; or train adapters on a frozen base: --peft lora fits as ...', the
    first of LoRA and QLoRA that fits this machine with the options given (planned with the analytic activation
    model), else nothing."""
    t = ctx.training
    if t.peft != "none":
        return ""
    for method in ("lora", "qlora"):
        try:
            p = plan(ctx.model, ctx.hardware, replace(t, peft=method), machine=ctx.machine)
        except BadInput:  # QLoRA in fp32, or a forced parameter offload: what the options rule out
            continue
        if p.decision.fits:
            d = p.decision
            return (f"; or train adapters on a frozen base, not every weight: --peft {method} fits as "
                    f"{setup_label(d.zero_stage, d.offload_optimizer, d.offload_param)} at micro-batch "
                    f"{d.micro_batch_size}" + (" with gradient checkpointing" if d.gradient_checkpointing else "")
                    + f", {format_bytes(p.memory.total)} per GPU, {format_rate(p.performance.tokens_per_s)} tokens/s")
    return ""


def lora_instead(ctx: Context) -> str:
    """For QLoRA whose 4-bit base does not load onto the GPU: '--peft lora instead, which fits as ...', where LoRA
    with the same options fits this machine (its base loads partitioned at ZeRO-3), else nothing."""
    try:
        p = plan(ctx.model, ctx.hardware, replace(ctx.training, peft="lora"), machine=ctx.machine)
    except BadInput:  # an option LoRA refuses too
        return ""
    if not p.decision.fits:
        return ""
    d = p.decision
    return (f"--peft lora instead, which fits as {setup_label(d.zero_stage, d.offload_optimizer, d.offload_param)} at "
            f"micro-batch {d.micro_batch_size}" + (" with gradient checkpointing" if d.gradient_checkpointing else "")
            + ": ZeRO-3 builds a 16-bit base under zero.Init, partitioned as it loads")


def _flag(value: object) -> str:
    return ("on" if value else "off") if isinstance(value, bool) else str(value)


def gpus_needed(ctx: Context) -> int | None:
    """GPUs of this size for ZeRO-3 without offload, at the smallest micro-batch with checkpointing (if allowed),
    with the most frugal buffers: the smallest world size at which the cost layer's peak fits. None when even
    an unbounded number of GPUs would not do (the fixed costs alone exceed the GPU)."""
    cap = ctx.hardware.gpu_memory_bytes
    if _frugal_need(ctx, 3, "none", "none", 1 << 40) > cap or (ctx.qlora and ctx.qlora_load > cap):
        return None  # QLoRA's base loads whole onto every GPU, however many there are
    lo, hi = 1, 1
    while _frugal_need(ctx, 3, "none", "none", hi) > cap:
        lo, hi = hi + 1, hi * 2
    while lo < hi:
        mid = (lo + hi) // 2
        if _frugal_need(ctx, 3, "none", "none", mid) <= cap:
            hi = mid
        else:
            lo = mid + 1
    return lo


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
    """Full offload's per-GPU peak; QLoRA's whole 4-bit base on every GPU while it loads, where that is more."""
    need = _frugal_need(ctx, 3, "cpu", _param_offload(ctx, "cpu"), ctx.hardware.world_size)
    return max(need, ctx.qlora_load) if ctx.qlora else need


def _frugal_held(ctx: Context) -> int:
    """QLoRA at ZeRO-3, optimizer offloaded: the gathered 4-bit weights every GPU holds from forward to the end of the
    step (`held_gathered`'s warning), at the smallest micro-batch `_frugal_need` weighs."""
    t = ctx.training
    ck = t.gradient_checkpointing if t.gradient_checkpointing is not None else True
    return ctx.frugal_costs(3, "cpu", "none", ctx.hardware.world_size, ctx.accumulation_steps(1), ck).step_held


def _param_offload(ctx: Context, device: str) -> str:
    """QLoRA's 4-bit weights stay on the GPU (zerokit.planner.peft.QLORA_NO_PARAM_OFFLOAD)."""
    return "none" if ctx.qlora else device


def _frugal_need(ctx: Context, stage: int, opt: str, param: str, world_size: int) -> int:
    """The cost layer's peak at `world_size` GPUs: the smallest micro-batch (checkpointed unless forced off) and
    the most frugal buffers."""
    t = ctx.training
    ck = t.gradient_checkpointing if t.gradient_checkpointing is not None else True
    mb = 1  # a --micro-batch that fits nowhere is a ceiling: the plan takes a smaller one (`plan`), down to 1
    costs = ctx.frugal_costs(stage, opt, param, world_size, ctx.accumulation_steps(mb), ck)
    return costs.need(ctx.activation(mb, ck, stage))


def steps_against_tokens(training: Training, performance: StepTime) -> list[str]:
    """A warning when --total-steps trains more than 5% more or fewer tokens than --train-tokens asks, unless they
    are the steps those tokens take (a partial last step is a step): the scheduler decays over the steps, and the
    Trainer stops at them (max_steps)."""
    total, tokens = training.total_steps, training.train_tokens
    if total is None or tokens is None:
        return []
    per_step, steps = performance.tokens_per_step, performance.train_steps(tokens)
    if total == steps or abs(total * per_step - tokens) <= GLOBAL_BATCH_SLACK * tokens:
        return []
    return [(f"--total-steps {total:,} trains {total * per_step:,} tokens ({per_step:,} a step), "
            f"{100 * (total * per_step - tokens) / tokens:+.1f}% from --train-tokens {format_count(round(tokens))}: "
            f"{steps:,} step{'s' if steps > 1 else ''} train{'' if steps > 1 else 's'} those; the scheduler decays over "
            "--total-steps" + (" and the Trainer stops there" if training.target != "deepspeed" else ""))]

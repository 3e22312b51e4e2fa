"""How a Plan reaches people and scripts: a text table, a markdown report, and CONTRACT.md's JSON object.

All three draw on the same few pure helpers (labels, bars, rows), so the table, the report and the JSON never
disagree. jinja2 is imported only for markdown: `zerokit plan` stays fast.
"""

from __future__ import annotations

from typing import Any

from zerokit.dsconfig import training_arguments, training_arguments_hint
from zerokit.planner.rules import TIE_TOLERANCE, TIGHT
from zerokit.planner.types import Candidate, GpuMemory, Plan
from zerokit.units import format_bytes, format_count, format_rate, format_seconds

# Stacked-bar segments, in the order memory is drawn: (GpuMemory field, bar character, legend label).
SEGMENTS = (
    ("parameters", "P", "parameters"),
    ("gradients", "G", "gradients"),
    ("optimizer_states", "O", "optimizer states"),
    ("activations", "A", "activations"),
    ("transient", "T", "transient"),
    ("buffers", "B", "buffers"),
    ("overhead", "o", "overhead"),
)
CAPACITY_MARK = "|"
OVERFLOW_MARK = ">"
BAR_WIDTH = 45  # the capacity mark at column 30 of 45: bars run to 1.5x the GPU, beyond that they end in `>`
LEGEND = ("  ".join(f"{ch} {label}" for _, ch, label in SEGMENTS)
          + f"  {CAPACITY_MARK} GPU capacity  {OVERFLOW_MARK} beyond 1.5x capacity")


# ---------------------------------------------------------------- JSON (CONTRACT.md `zerokit plan --format json`)

def plan_to_json(plan: Plan) -> dict[str, Any]:
    """CONTRACT.md's object, sizes in bytes; extra fields only ever added, never renamed."""
    m, hw, d = plan.model, plan.hardware, plan.decision
    return {
        "model": {
            "parameters": m.parameters, "largest_layer_parameters": m.largest_layer_parameters,
            "hidden_size": m.hidden_size, "num_layers": m.num_layers, "source": m.source,
            "name": m.name, "vocab_size": m.vocab_size, "model_type": m.model_type, "notes": list(m.notes),
            "trainable_parameters": plan.peft.trainable if plan.peft else m.parameters,
            "frozen_parameters": plan.peft.frozen_parameters if plan.peft else 0,
        },
        "hardware": {
            "gpu_memory_bytes": hw.gpu_memory_bytes, "gpus_per_node": hw.gpus_per_node, "nodes": hw.nodes,
            "world_size": hw.world_size, "cpu_memory_bytes": hw.cpu_memory_bytes, "nvme_bytes": hw.nvme_bytes,
            "bf16": hw.bf16, "gpu_name": hw.gpu_name, "nvme_path": hw.nvme_path,
        },
        "decision": {
            "zero_stage": d.zero_stage, "offload_optimizer": d.offload_optimizer, "offload_param": d.offload_param,
            "micro_batch_size": d.micro_batch_size, "gradient_accumulation_steps": d.gradient_accumulation_steps,
            "gradient_checkpointing": d.gradient_checkpointing, "precision": d.precision,
            "overlap_comm": d.overlap_comm, "fits": d.fits,
            "train_batch_size": global_batch(plan), "reduce_bucket_size": d.reduce_bucket_size,
            "allgather_bucket_size": d.allgather_bucket_size, "prefetch_bucket_size": d.prefetch_bucket_size,
            "param_persistence_threshold": d.param_persistence_threshold,
            "max_live_parameters": d.max_live_parameters,
        },
        "memory": {
            "per_gpu": plan.memory.as_dict(),
            "gpu_capacity": hw.gpu_memory_bytes,
            "phases": {name: m.total for name, m in plan.phases.items()},
            "phase_breakdown": {name: m.as_dict() for name, m in plan.phases.items()},
            "peak_phase": plan.peak_phase,
            "per_node_cpu": {"total": plan.cpu_bytes_per_node, "capacity": hw.cpu_memory_bytes,
                             "steady_state": plan.host_steady_state, "load_peak": plan.host_load_peak},
            "nvme": {"total": plan.nvme_bytes_per_node, "capacity": hw.nvme_bytes},
            "activations_source": plan.activations_source,
        },
        "performance": performance_json(plan),
        "candidates": [_candidate_json(c) for c in plan.candidates],
        "reasons": list(plan.reasons),
        "missing": plan.missing,
        "warnings": list(plan.warnings),
        "target": plan.training.target,
        "training_arguments": training_arguments(plan),
        "ds_config": plan.ds_config,
        "peft": peft_json(plan),
    }


def peft_json(plan: Plan) -> dict[str, Any] | None:
    """CONTRACT.md's `peft`: the keyword arguments of peft.LoraConfig and transformers.BitsAndBytesConfig."""
    p = plan.peft
    if p is None:
        return None
    return {"method": p.method, "lora_config": p.lora_config(),
            "quantization_config": p.quantization_config(plan.decision.precision, plan.decision.zero_stage)}


def _candidate_json(c: Candidate) -> dict[str, Any]:
    s = c.setup
    return {
        "zero_stage": s.zero_stage, "offload_optimizer": s.offload_optimizer, "offload_param": s.offload_param,
        "micro_batch_size": s.micro_batch_size, "gradient_checkpointing": s.gradient_checkpointing,
        "gradient_accumulation_steps": s.gradient_accumulation_steps,
        "fits": c.fits, "per_gpu_total": c.memory.total,
        "per_gpu": c.memory.as_dict(), "phases": dict(c.phases), "peak_phase": c.peak_phase,
        "micro_batch_activations": c.micro_batch_activations,
        "cpu_bytes_per_node": c.cpu_bytes_per_node, "nvme_bytes_per_node": c.nvme_bytes_per_node,
        "why_not": c.why_not,
        "step_time_s": c.performance.step_time_s if c.performance is not None else None,
        "tokens_per_s": c.performance.tokens_per_s if c.performance is not None else None,
    }


PERFORMANCE_FIELDS = ("step_time_s", "tokens_per_s", "mfu", "compute_s", "communication_s", "exposed_communication_s",
                      "offload_s", "optimizer_s", "overhead_s", "tokens_per_step", "flops_per_step")


def performance_json(plan: Plan) -> dict[str, Any] | None:
    """CONTRACT.md's `performance`: the chosen setup's predicted step (null when nothing fits)."""
    p = plan.performance
    if p is None:
        return None
    out = {name: getattr(p, name) for name in PERFORMANCE_FIELDS}
    out["time_to_train_s"] = plan.time_to_train_s
    tokens = plan.training.train_tokens
    out["train_tokens"] = None if tokens is None else round(tokens)  # a count: 10000000000, not 1e10
    out["train_steps"] = plan.train_steps
    return out


# ---------------------------------------------------------------- shared pieces

def global_batch(plan: Plan) -> int:
    d = plan.decision
    return d.micro_batch_size * d.gradient_accumulation_steps * plan.hardware.world_size


def offload_label(optimizer: str, param: str) -> str:
    parts = [f"optimizer->{optimizer}" if optimizer != "none" else "", f"params->{param}" if param != "none" else ""]
    return ", ".join(p for p in parts if p) or "no offload"


def setup_label(stage: int, optimizer: str, param: str) -> str:
    return f"ZeRO-{stage}" + ("" if optimizer == param == "none" else f" + {offload_label(optimizer, param)}")


def bar_scale(plan: Plan) -> int:
    """Bytes per full bar: 1.5x the GPU, so the capacity mark sits at the same column in every bar and every run."""
    return plan.hardware.gpu_memory_bytes * 3 // 2


def stacked_bar(memory: GpuMemory, capacity: int, scale: int, width: int = BAR_WIDTH) -> str:
    """`PPPGGOOOOAAT.|....`: one character per share of `scale`, `|` at the GPU's capacity, `>` where it runs off."""
    cells: list[str] = []
    running = 0
    for field_name, ch, _ in SEGMENTS:
        start = round(running / scale * width)
        running += getattr(memory, field_name)
        # past the bar's end only one more cell matters (it becomes `>`): a need of petabytes against a GPU of
        # gigabytes must not build a list of billions of cells
        cells += [ch] * (min(round(running / scale * width), width + 1) - min(start, width + 1))
    if len(cells) > width:
        cells = cells[:width - 1] + [OVERFLOW_MARK]
    cells += [" "] * (width - len(cells))
    cells.insert(min(width, round(capacity / scale * width)), CAPACITY_MARK)
    return "".join(cells).rstrip()


PHASE_LABELS = {"forward": "forward", "backward": "backward", "optimizer_step": "optimizer step"}


def memory_rows(plan: Plan) -> list[tuple[str, ...]]:
    """(label, size at each phase ..., share of capacity at the peak) per segment, then the total."""
    cap = plan.hardware.gpu_memory_bytes
    phases = [plan.phases[p] for p in PHASE_LABELS if p in plan.phases] or [plan.memory]
    rows = [(label, *(format_bytes(getattr(m, name)) for m in phases), _pct(getattr(plan.memory, name), cap))
            for name, _, label in SEGMENTS]
    rows.append(("total", *(format_bytes(m.total) for m in phases), _pct(plan.memory.total, cap)))
    return rows


def peak_line(plan: Plan) -> str:
    """Which phase is the peak, and by how much it exceeds the next one."""
    if not plan.phases:
        return ""
    totals = sorted(((m.total, p) for p, m in plan.phases.items()), reverse=True)
    (top, name), (second, other) = totals[0], totals[1]
    return (f"peak at {PHASE_LABELS[name]}: {format_bytes(top)}, {format_bytes(top - second)} above "
            f"{PHASE_LABELS[other]}")


def decision_line(plan: Plan) -> str:
    d, samples = plan.decision, global_batch(plan)
    return (f"{setup_label(d.zero_stage, d.offload_optimizer, d.offload_param)}, micro-batch {d.micro_batch_size} x "
            f"{d.gradient_accumulation_steps} accumulation x {_gpus(plan.hardware.world_size)} = {samples:,} "
            f"sample{'s' * (samples != 1)}/step, gradient checkpointing {_onoff(d.gradient_checkpointing)}, "
            f"{d.precision}"
            + (f", overlap_comm {_onoff(d.overlap_comm)}" if d.zero_stage else ""))


def headline(plan: Plan) -> str:
    m, hw = plan.model, plan.hardware
    nodes = f"{hw.nodes} nodes x " if hw.nodes > 1 else ""
    return (f"{m.name} ({format_count(m.parameters)} parameters, {m.source}), seq {plan.training.seq_len}, on "
            f"{nodes}{hw.gpus_per_node} x {hw.gpu_name} ({format_bytes(hw.gpu_memory_bytes)}, "
            f"{'bf16' if hw.bf16 else 'no bf16'})")


def peft_line(plan: Plan) -> str:
    """Trainable and frozen parameters: every one trains without --peft."""
    p, m = plan.peft, plan.model
    if p is None:
        return f"trainable: all {m.parameters:,} parameters (full fine-tuning); frozen: 0"
    store = f"4-bit NF4, {format_bytes(p.frozen_bytes)}" if p.method == "qlora" else \
        f"{plan.decision.precision}, {format_bytes(p.frozen_bytes)}"
    share = f"{100 * p.trainable / max(1, p.frozen_parameters):.2f}% of the base"
    kind = "QLoRA" if p.method == "qlora" else "LoRA"
    trains = f"{p.trainable:,} {kind} adapter parameters (rank {p.rank}, {share})" if not p.modules_to_save else (
        f"{p.trainable - p.saved_parameters:,} {kind} adapter parameters (rank {p.rank}) and "
        f"{p.saved_parameters:,} in copies of {', '.join(p.modules_to_save)} (modules_to_save), {share}")
    return f"trainable: {trains}; frozen: {p.frozen_parameters:,} base parameters ({store})"


def peft_code(plan: Plan, output: str | None = None) -> str:
    """The Python that loads the base, wraps it with the plan's adapters and hands it to the HF Trainer (a plan for
    Accelerate or plain DeepSpeed gets none: its config, with "auto" where the Trainer does not fill it, or none at
    all, would fail the Trainer's checks; the warnings say how those scripts load and save)."""
    peft = peft_json(plan)
    if peft is None or plan.training.target != "trainer":
        return ""
    dtype = {"bf16": "torch.bfloat16", "fp16": "torch.float16"}.get(plan.decision.precision, "torch.float32")
    q = peft["quantization_config"]
    # TrainingArguments first: with a ZeRO-3 config it makes from_pretrained build the model under zero.Init
    # (transformers' HfDeepSpeedConfig), which a quantized model never uses (modeling_utils.get_init_context)
    # and for a quantized model it sets the rank's GPU (accelerate's PartialState), where bitsandbytes puts the whole
    # 4-bit base (`device_map={"": current_device()}` when none is given): created after it, every rank loads on GPU 0
    why = ("  # first: ZeRO-3 loads under zero.Init" if plan.decision.zero_stage == 3 and q is None else
           "  # first: it picks this rank's GPU, where bitsandbytes loads the 4-bit base" if q is not None else "")
    lines = ["import torch", "from peft import LoraConfig, get_peft_model",
             "from transformers import AutoModelForCausalLM, " + ("BitsAndBytesConfig, " if q is not None else "")
             + "Trainer, TrainingArguments", "",
             f"args = TrainingArguments(..., deepspeed={output or 'ds_config.json'!r}){why}"]
    load = f"model = AutoModelForCausalLM.from_pretrained(MODEL, dtype={dtype}"
    if q is not None:
        lines.append(f"quantization_config = BitsAndBytesConfig({_bnb_kwargs(q)})")
        load += ", quantization_config=quantization_config"
    lines.append(load + ")")
    if plan.decision.gradient_checkpointing:
        lines.append("model.enable_input_require_grads()  # checkpointing a frozen base: the inputs need gradients")
    if plan.peft.autocast_off(plan.decision.zero_stage):
        # ZeRO-3's optimizer takes one dtype: PEFT's fp32 upcast beside the 16-bit copies fails deepspeed.initialize
        lines.append(f"model = get_peft_model(model, LoraConfig(**{peft['lora_config']!r}), "
                     "autocast_adapter_dtype=False)  # ZeRO-3: the adapters in the copies' 16 bits")
    else:
        lines.append(f"model = get_peft_model(model, LoraConfig(**{peft['lora_config']!r}))")
    lines.append("trainer = Trainer(model=model, args=args, train_dataset=...)")
    lines.append("trainer.train()")
    # not model.save_pretrained: at ZeRO-3 the adapters are partitioned and PEFT writes them zero-sized; save_model
    # gathers a PEFT model's trainable weights first (exclude_frozen_parameters) and writes from the main rank only
    lines.append("trainer.save_model(OUTPUT)  # the adapter only" + (", gathered from the ZeRO-3 partitions"
                                                                   if plan.decision.zero_stage == 3 else ""))
    return "\n".join(lines)


def _bnb_kwargs(q: dict[str, Any]) -> str:
    """BitsAndBytesConfig's keywords as Python, dtypes as torch attributes (uint8 storage as transformers names it)."""
    return ", ".join(f"{k}={v!r}" if not str(k).endswith("_dtype") and k != "bnb_4bit_quant_storage"
                     or v == "uint8" else f"{k}=torch.{v}" for k, v in q.items())


def peft_config_line(plan: Plan) -> str | None:
    """The table's one line of what to pass PEFT and transformers (the markdown report prints the whole code)."""
    peft = peft_json(plan)
    if peft is None:
        return None
    lora = ", ".join(f"{k}={v!r}" for k, v in peft["lora_config"].items())
    q = peft["quantization_config"]
    bnb = f"; from_pretrained(..., quantization_config=BitsAndBytesConfig({_bnb_kwargs(q)}))" if q else ""
    return f"PEFT: LoraConfig({lora}){bnb} (--format markdown prints the code)"


def host_lines(plan: Plan) -> list[str]:
    hw = plan.hardware
    lines = []
    if plan.cpu_bytes_per_node or hw.cpu_memory_bytes:
        cap = f" of {format_bytes(hw.cpu_memory_bytes)}" if hw.cpu_memory_bytes else ""
        lines.append(f"CPU RAM per node (peak): {format_bytes(plan.cpu_bytes_per_node)}{cap}: "
                     f"{format_bytes(plan.host_load_peak)} while loading the model, "
                     f"{format_bytes(plan.host_steady_state)} while training")
    if plan.nvme_bytes_per_node or hw.nvme_path:
        cap = f" of {format_bytes(hw.nvme_bytes)}" if hw.nvme_bytes else ""
        where = f" at {hw.nvme_path}" if hw.nvme_path else ""
        lines.append(f"NVMe per node{where}: {format_bytes(plan.nvme_bytes_per_node)}{cap}")
    return lines


def candidate_rows(plan: Plan) -> list[dict[str, str]]:
    cap, scale = plan.hardware.gpu_memory_bytes, bar_scale(plan)
    chosen = _chosen_setup(plan)
    rows = []
    for c in plan.candidates:
        s = c.setup
        rows.append({
            "mark": "*" if (s.zero_stage, s.offload_optimizer, s.offload_param, s.micro_batch_size,
                            s.gradient_checkpointing) == chosen else "",
            "setup": setup_label(s.zero_stage, s.offload_optimizer, s.offload_param),
            "micro_batch": str(s.micro_batch_size),
            "checkpointing": _onoff(s.gradient_checkpointing),
            "activations": format_bytes(c.micro_batch_activations),
            "total": format_bytes(c.memory.total),
            "peak": PHASE_LABELS.get(c.peak_phase, c.peak_phase).replace("optimizer step", "step"),
            "fits": "yes" if c.fits else "no",
            "step_time": format_seconds(c.performance.step_time_s) if c.performance is not None else "-",
            "tokens_per_s": format_rate(c.performance.tokens_per_s) if c.performance is not None else "-",
            "bar": stacked_bar(c.memory, cap, scale),
            "why_not": c.why_not or "",
        })
    return rows


def performance_line(plan: Plan) -> str:
    """`Speed: 1.90 s/step, 34,500 tokens/s (4,312 per GPU), MFU 48%; 10B tokens in 3.4 days`."""
    p = plan.performance
    if p is None:
        return ""
    n = plan.hardware.world_size
    line = (f"Speed (predicted): {format_seconds(p.step_time_s)}/step, {format_rate(p.tokens_per_s)} tokens/s"
            + (f" ({format_rate(p.tokens_per_s / n)} per GPU)" if n > 1 else "") + f", MFU {100 * p.mfu:.0f}%")
    if plan.time_to_train_s is not None:
        line += (f"; {format_count(int(plan.training.train_tokens))} tokens in {plan.train_steps:,} steps, "
                 f"{format_seconds(plan.time_to_train_s)}")
    parts = [("compute", p.compute_s), ("exposed communication", p.exposed_communication_s),
             ("offload", p.offload_s), ("optimizer", p.optimizer_s), ("overhead", p.overhead_s)]
    split = ", ".join(f"{name} {format_seconds(t)}" for name, t in parts if t > 0)
    return line + (f" ({split})" if split else "")


def _chosen_setup(plan: Plan) -> tuple:
    d = plan.decision
    return (d.zero_stage, d.offload_optimizer, d.offload_param, d.micro_batch_size, d.gradient_checkpointing)


def _gpus(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n:,} GPUs"


def _onoff(flag: bool) -> str:
    return "on" if flag else "off"


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole else ""


# ---------------------------------------------------------------- table (default)

def render_table(plan: Plan, output: str | None = None) -> str:
    """The human view: decision and reasons, the chosen setup's memory, every candidate with its bar."""
    d, cap = plan.decision, plan.hardware.gpu_memory_bytes
    out = [f"zerokit plan: {headline(plan)}"]
    if plan.peft is not None:
        out.append(f"  {peft_line(plan)}")
    out.append("")
    verdict = "FITS" if d.fits else "DOES NOT FIT"
    out.append(f"Decision ({verdict}): {decision_line(plan)}")
    out += [f"  - {r}" for r in plan.reasons]
    if plan.missing:
        out.append(f"Missing: {plan.missing}")
    if plan.performance is not None:
        out.append(performance_line(plan))
    out.append("")
    out.append(f"Per-GPU memory, chosen setup, at each phase's peak (capacity {format_bytes(cap)}; "
               f"{peak_line(plan)}):")
    names = [PHASE_LABELS[p] for p in PHASE_LABELS if p in plan.phases] or ["peak"]
    out.append(f"  {'':<17} " + " ".join(f"{n:>14}" for n in names) + "  of GPU at the peak")
    for label, *sizes, pct in memory_rows(plan):
        out.append(f"  {label:<17} " + " ".join(f"{x:>14}" for x in sizes) + f"  {pct:>5}")
    out.append(f"  [{stacked_bar(plan.memory, cap, bar_scale(plan))}]  (the {PHASE_LABELS.get(plan.peak_phase, 'peak')}"
               " phase)")
    if plan.activations_source != "modelled":
        out.append(f"  activations: {plan.activations_source}")
    out += [f"  {line}" for line in host_lines(plan)]
    out.append("")
    rows = candidate_rows(plan)
    if rows:
        chosen = ("the closest miss" if not plan.decision.fits else
                  f"the most tokens/s that fits, or within {TIE_TOLERANCE:.0%} of it the earliest, "
                  f"one at most {TIGHT:.0%} full first")
        out.append(f"Candidates (in search order; * = chosen, {chosen}):")
        w_setup = max(len("setup"), *(len(r["setup"]) for r in rows))
        out.append(f"    {'setup':<{w_setup}}  {'mb':>3}  ckpt  {'activ.':>9}  {'per GPU':>9}  {'peak at':<8}  fits  "
                   f"{'step':>9}  {'tokens/s':>10}  memory")
        for r in rows:
            line = (f"  {r['mark']:1} {r['setup']:<{w_setup}}  {r['micro_batch']:>3}  {r['checkpointing']:<4}  "
                    f"{r['activations']:>9}  {r['total']:>9}  {r['peak']:<8}  {r['fits']:<4}  {r['step_time']:>9}  "
                    f"{r['tokens_per_s']:>10}  [{r['bar']}]")
            out.append(line + (f"  {r['why_not']}" if r["why_not"] else ""))
        out.append(f"  activ. = activations + transient of one micro-batch;  legend: {LEGEND}")
        out.append("")
    for w in plan.warnings:
        out.append(f"warning: {w}")
    for note in plan.model.notes:
        if note not in plan.warnings:
            out.append(f"note: {note}")
    out.append(f"Training: {training_arguments_hint(plan, output)}")
    if plan.peft is not None:
        out.append(peft_config_line(plan))
    if output:
        out.append(f"ds_config ({plan.training.target}) written to {output}")
    return "\n".join(out).rstrip() + "\n"


# ---------------------------------------------------------------- markdown (templates/plan_report.md.j2)

def render_markdown(plan: Plan, output: str | None = None) -> str:
    """The report for a PR or a wiki page; jinja2 with StrictUndefined, so a missing field fails loudly."""
    import json

    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("zerokit.templates", "."),
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
        autoescape=False,
    )
    template = env.get_template("plan_report.md.j2")
    d = plan.decision
    return template.render(
        plan=plan, headline=headline(plan), decision=decision_line(plan), fits=d.fits,
        reasons=list(plan.reasons), missing=plan.missing,
        warnings=list(plan.warnings) + [n for n in plan.model.notes if n not in plan.warnings],
        memory_rows=memory_rows(plan), phase_names=[PHASE_LABELS[p] for p in PHASE_LABELS if p in plan.phases],
        peak_line=peak_line(plan), activations_source=plan.activations_source,
        performance_line=performance_line(plan),
        bar=stacked_bar(plan.memory, plan.hardware.gpu_memory_bytes, bar_scale(plan)),
        host_lines=host_lines(plan), candidates=candidate_rows(plan), legend=LEGEND,
        training_hint=training_arguments_hint(plan, output), target=plan.training.target, output=output,
        ds_config_json=json.dumps(plan.ds_config, indent=2),
        peft=peft_json(plan), peft_line=peft_line(plan), peft_code=peft_code(plan, output),
        tie=f"{TIE_TOLERANCE:.0%}", tight=f"{TIGHT:.0%}",
    )

"""`zerokit plan`: model + hardware + sequence length -> decision, memory table, ds_config; exit 0 fits, 1 not, 2 bad input.

Only parsing, printing and the exit code live here; the planner is `zerokit.planner.engine.plan`. Each option's help
is the attribute docstring of the dataclass field it fills (zerokit/planner/types.py), so it is written once.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import re
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import click

from zerokit.errors import EXIT_FINDINGS, EXIT_OK, BadInput
from zerokit.planner import types
from zerokit.units import MAX_INT, parse_count, parse_finite, parse_gpu_memory_option, parse_positive_int

MAX_SEQ_LEN = 2**24
"""16M tokens per sample: beyond the longest context any model trains with."""
MAX_MICRO_BATCH = 2**16
MAX_GLOBAL_BATCH = 2**40
MAX_TRAIN_TOKENS = 10**16
"""10 quadrillion tokens: a thousand times the largest training runs published."""

_CLASS = re.compile(r"^class (\w+)\b", re.MULTILINE)
_FIELD_DOC = re.compile(r'^    (\w+): [^\n]*\n    """(.*?)"""', re.MULTILINE | re.DOTALL)


@functools.cache
def _attribute_docs(class_name: str) -> dict[str, str]:
    """Attribute docstrings of a class in zerokit/planner/types.py: the string literal under each field.

    A regex rather than `ast`: this runs on every `zerokit plan` start, and the file is ours and regular.
    """
    with open(types.__file__, encoding="utf-8") as f:
        source = f.read()
    bounds = [(m.group(1), m.start()) for m in _CLASS.finditer(source)] + [("", len(source))]
    for (name, begin), (_, finish) in itertools.pairwise(bounds):
        if name == class_name:
            return {m.group(1): " ".join(m.group(2).split()) for m in _FIELD_DOC.finditer(source, begin, finish)}
    return {}


def _doc(class_name: str, field: str, extra: str = "") -> str:
    text = _attribute_docs(class_name).get(field, "")
    # The dataclass says None where the command line says auto.
    text = text.replace("None (`auto`) =", "auto =").replace("None =", "auto =")
    return f"{text} {extra}".strip()


def _options(*decorators: Callable) -> Callable:
    """Bundle click options into one decorator: a shared option group."""
    def apply(f: Callable) -> Callable:
        for decorator in reversed(decorators):
            f = decorator(f)
        return f
    return apply


def _choice(*values: str) -> click.Choice:
    return click.Choice(values, case_sensitive=False)


model_options = _options(
    click.option("--model", "model", required=True, metavar="MODEL",
                 help="A parameter count (7B, 6.7e9), a transformers config.json or a folder holding one, a preset "
                      "(llama-2-7b, mistral-7b, qwen2.5-7b, ...), or the hub id of a model in the local Hugging Face "
                      "cache; config.json and presets give exact counts."),
    click.option("--no-calibrate", is_flag=True,
                 help="Do not measure the activations of an architecture zerokit does not model (by default a 1- and "
                      "2-layer miniature is traced on the CPU when torch and transformers are installed, once per "
                      "config, cached under ~/.cache/zerokit/calibration); use the generic llama-like estimate."),
)

hardware_options = _options(
    click.option("--gpu", metavar="PRESET", help=_doc("Hardware", "gpu_name", "Sets memory and bf16 support.")),
    click.option("--gpu-memory", metavar="SIZE", help=_doc("Hardware", "gpu_memory_bytes", "E.g. 80GB, 80GiB.")),
    click.option("--gpus-per-node", default="1", show_default=True, metavar="N",
                 help=_doc("Hardware", "gpus_per_node")),
    click.option("--nodes", default="1", show_default=True, metavar="N", help=_doc("Hardware", "nodes")),
    click.option("--cpu-memory", metavar="SIZE", help=_doc("Hardware", "cpu_memory_bytes")),
    click.option("--nvme-path", metavar="PATH", help=_doc("Hardware", "nvme_path")),
    click.option("--nvme-size", metavar="SIZE", help=_doc("Hardware", "nvme_bytes")),
    click.option("--hardware", "hardware_profile", metavar="PROFILE.json",
                 help="A profile from `zerokit probe`: measured compute, bandwidths and CPU Adam speed replace the "
                      "GPU preset's published figures in the step-time model (and give the GPU memory when neither "
                      "--gpu nor --gpu-memory is given). A CPU profile's host RAM is shared out among the node's "
                      "ranks and is the RAM offload can use unless --cpu-memory says otherwise."),
    click.option("--intra-node-bandwidth", metavar="RATE",
                 help="Per-GPU bandwidth to the other GPUs of a node, one direction (e.g. 300GB/s, 600Gbps); "
                      "default: the preset's NVLink or PCIe."),
    click.option("--inter-node-bandwidth", metavar="RATE",
                 help="A node's network bandwidth to the others, all NICs, one direction (e.g. 400Gbps, 50GB/s); "
                      "default: the preset's reference server, else one 100 Gb/s NIC."),
    click.option("--pcie-bandwidth", metavar="RATE",
                 help="The host link's rate per direction, for offload copies (e.g. 32GB/s); default: the preset's "
                      "PCIe generation."),
)

training_options = _options(
    click.option("--seq-len", required=True, metavar="N", help=_doc("Training", "seq_len")),
    click.option("--micro-batch", default="auto", show_default=True, metavar="N|auto",
                 help=_doc("Training", "micro_batch")),
    click.option("--global-batch", metavar="N", help=_doc("Training", "global_batch")),
    click.option("--global-batch-tokens", metavar="COUNT", help=_doc("Training", "global_batch_tokens")),
    click.option("--zero-stage", type=_choice("auto", "0", "1", "2", "3"), default="auto", show_default=True,
                 help=_doc("Training", "zero_stage")),
    click.option("--offload-optimizer", type=_choice("auto", *types.OFFLOAD_DEVICES), default="auto",
                 show_default=True, help=_doc("Training", "offload_optimizer")),
    click.option("--offload-param", type=_choice("auto", *types.OFFLOAD_DEVICES), default="auto",
                 show_default=True, help=_doc("Training", "offload_param")),
    click.option("--gradient-checkpointing", type=_choice("auto", "on", "off"), default="auto", show_default=True,
                 help=_doc("Training", "gradient_checkpointing")),
    click.option("--attention", type=_choice(*types.ATTENTION_KERNELS), default="sdpa", show_default=True,
                 help=_doc("Training", "attention")),
    click.option("--precision", type=_choice("auto", *types.PRECISIONS), default="auto", show_default=True,
                 help=_doc("Training", "precision")),
    click.option("--overhead", metavar="SIZE", help=_doc("Training", "overhead_bytes")),
    click.option("--train-tokens", metavar="COUNT", help=_doc("Training", "train_tokens")),
)

optimizer_options = _options(
    click.option("--lr", type=float, default=None, help=_doc("Training", "lr")),
    click.option("--weight-decay", type=float, default=0.0, show_default=True, help=_doc("Training", "weight_decay")),
    click.option("--warmup-steps", type=click.IntRange(min=0, max=MAX_INT), default=0, show_default=True,
                 help=_doc("Training", "warmup_steps")),
    click.option("--total-steps", metavar="N|auto", default=None, help=_doc("Training", "total_steps")),
)

peft_options = _options(
    click.option("--peft", type=_choice(*types.PEFT_METHODS), default="none", show_default=True,
                 help=_doc("Training", "peft")),
    click.option("--lora-rank", metavar="N", help=_doc("Training", "lora_rank", "Default 16.")),
    click.option("--lora-targets", metavar="all-linear|NAMES", help=_doc("Training", "lora_targets",
                                                                         "Default all-linear.")),
    click.option("--lora-dropout", metavar="P", help=_doc("Training", "lora_dropout")),
    click.option("--lora-modules-to-save", metavar="NAMES", help=_doc("Training", "lora_modules_to_save")),
)

output_options = _options(
    click.option("--target", type=_choice(*types.TARGETS), default="trainer", show_default=True,
                 help=_doc("Training", "target")),
    click.option("--format", "fmt", type=_choice("table", "json", "markdown"), default="table", show_default=True,
                 help="table for people, json for scripts (CONTRACT.md fields), markdown for a PR or wiki page."),
    click.option("-o", "--output", metavar="PATH",
                 help="Write the ds_config here, atomically; an existing file is kept unless --force is given."),
    click.option("--force", is_flag=True, help="Let -o/--output overwrite an existing file."),
)


@click.command("plan", context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@model_options
@hardware_options
@training_options
@optimizer_options
@peft_options
@output_options
def command(model: str, no_calibrate: bool, gpu: str | None, gpu_memory: str | None, gpus_per_node: str,
            nodes: str, cpu_memory: str | None, nvme_path: str | None, nvme_size: str | None,
            hardware_profile: str | None, intra_node_bandwidth: str | None, inter_node_bandwidth: str | None,
            pcie_bandwidth: str | None, fmt: str, output: str | None, force: bool, **training: Any) -> int:
    """Predict per-GPU memory and write the fastest ds_config that fits.

    \b
    Exit codes: 0 fits, 1 nothing fits (the closest plan and what is missing are still shown), 2 bad input.

    \b
      zerokit plan --model llama-2-7b --gpu h100-80gb --gpus-per-node 8 --seq-len 4096 -o ds_config.json
    """
    if output is not None:
        from zerokit.models.resolve import model_file

        check_output_path(output, force, {"--model config.json": model_file(model), "--hardware": hardware_profile})
    if unless_auto(gpu_memory) is not None:  # 80TB for 80GB would plan every setup to fit: refused as lint does
        gpu_memory = parse_gpu_memory_option(gpu_memory)
    gpu = _gpu_preset(gpu, gpu_memory)
    from zerokit.hardware import resolve_hardware
    from zerokit.models.resolve import resolve_model
    from zerokit.planner.engine import check_positions
    from zerokit.planner.engine import plan as make_plan

    machine, profile_memory, profile_notes = build_perf(gpu, hardware_profile, intra_node_bandwidth,
                                                        inter_node_bandwidth, pcie_bandwidth)
    memory_from_profile = gpu is None and gpu_memory is None and profile_memory is not None
    if memory_from_profile:
        gpu_memory = profile_memory
    hardware = resolve_hardware(gpu=gpu, gpu_memory=gpu_memory, gpus_per_node=gpus_per_node, nodes=nodes,
                                cpu_memory=unless_auto(cpu_memory), nvme_path=unless_auto(nvme_path),
                                nvme_size=unless_auto(nvme_size))
    if machine is not None and machine.device == "cpu":
        hardware = replace(hardware, gpu_name="cpu", accelerator="cpu", bf16="bf16" in machine.matmul)
        if memory_from_profile:  # the host's RAM, which every rank shares
            hardware = replace(hardware, gpu_memory_bytes=profile_memory // hardware.gpus_per_node)
        if profile_memory is not None and hardware.cpu_memory_bytes is None:  # and what offload moves states into
            hardware = replace(hardware, cpu_memory_bytes=profile_memory)
    elif hardware_profile is not None and gpu is None:  # the GPU the probe measured: its name, its bf16 kernels
        hardware = replace(hardware, gpu_name=machine.name, bf16="bf16" in machine.matmul)
    settings = build_training(**training)
    spec = resolve_model(model)
    check_positions(spec, settings.seq_len)  # before a calibration, which can take a minute
    spec, activations, source, settings = calibration(spec, hardware, settings, skip=no_calibrate)
    result = make_plan(spec, hardware, settings, activations=activations, activations_source=source,
                       machine=machine, adapters_hint=True)
    from zerokit.dsconfig import build_ds_config
    result = replace(result, ds_config=build_ds_config(result), warnings=(*result.warnings, *profile_notes))

    fits = result.decision.fits
    written = None
    if output is not None and fits:
        write_atomic(output, json.dumps(result.ds_config, indent=2) + "\n", force=force)
        written = output
    emit(result, fmt, written)
    if output is not None and not fits:
        click.echo(f"zerokit plan: nothing fits, so {output} was not written", err=True)
    return EXIT_OK if fits else EXIT_FINDINGS


def calibration(spec: Any, hardware: types.Hardware, settings: types.Training, skip: bool
                ) -> tuple[Any, Any, Any, types.Training]:
    """(spec, activation model, source, training) for the planner: an architecture zerokit does not model is
    calibrated on a CPU miniature (cached), unless skipped or impossible, which the plan then says in a warning.

    A family transformers builds without sdpa (gpt-oss: `attn_implementation="sdpa"` raises) runs eager attention
    when none is asked for, and a run that asks for sdpa fails at load: the plan is made for eager then (the
    activations calibrated and the scores priced as eager computes them), and says so."""
    from zerokit.memory.activations import MODELLED_FAMILIES

    if spec.model_type in MODELLED_FAMILIES or spec.source == "count" or settings.peft != "none":
        return spec, None, None, settings  # --peft: only modelled families are counted, the planner refuses the rest
    if skip:
        return spec, None, "generic", settings
    from zerokit.memory.calibrate import CalibrationUnavailable, calibrated_activations

    precision = settings.precision or ("bf16" if hardware.bf16 else "fp16")
    attention = "sdpa" if settings.attention == "flash" else settings.attention

    def calibrated(kernel: str) -> Any:
        return calibrated_activations(spec.config, attention=kernel, dtype=precision,
                                      progress=lambda line: click.echo(f"zerokit plan: {line}", err=True))

    try:
        return spec, calibrated(attention).estimate, "calibrated", settings
    except CalibrationUnavailable as e:
        error = e
    if error.kernel_refused and settings.attention == "sdpa":
        try:
            cal = calibrated("eager")
        except CalibrationUnavailable as e:
            error = e
        else:
            note = (f"{spec.model_type} has no sdpa attention in this transformers (attn_implementation='sdpa' "
                    "raises), so a run uses eager attention: planned with --attention eager (activations and scores "
                    "as eager computes them); a flash kernel, where the family has one, needs --attention flash")
            return (replace(spec, notes=spec.notes + (note,)), cal.estimate, "calibrated",
                    replace(settings, attention="eager"))
    return replace(spec, notes=spec.notes + (f"activations not calibrated: {error}",)), None, "generic", settings


def build_perf(gpu: str | None, profile: str | None, intra: str | None, inter: str | None, pcie: str | None
               ) -> tuple[Any, int | None, list[str]]:
    """(the step-time model's machine, the profile's device memory, the profile's warnings) from the options;
    (None, None, []) when the GPU preset's published figures will do (the planner builds those itself)."""
    if profile is None and intra is None and inter is None and pcie is None:
        return None, None, []
    from zerokit.perf.machine import build_machine, load_profile_for_plan, with_datasheet, with_overrides

    if profile is None and gpu is None:
        raise BadInput("--intra-node-bandwidth, --inter-node-bandwidth and --pcie-bandwidth adjust a GPU preset's "
                       "figures: give --gpu PRESET too (or --hardware profile.json from `zerokit probe`)")
    if profile is None:
        return build_machine(gpu, None, intra_node_bandwidth=intra, inter_node_bandwidth=inter,
                             pcie_bandwidth=pcie), None, []
    # the profile wins over the preset (it was measured), the options over both (as build_machine does)
    machine, memory, notes = load_profile_for_plan(profile)
    if machine.device == "cpu" and gpu is not None:  # a profile of a login node, planned for the GPU nodes
        raise BadInput(f"--hardware {profile} was probed on DeepSpeed's CPU accelerator (no GPU there), and --gpu "
                       f"{gpu} plans for GPUs: its step times would be the CPU's. Run `zerokit probe` where the GPUs "
                       f"are and pass that profile, leave out --hardware to use the {gpu} preset's figures, or leave "
                       "out --gpu to plan for this CPU")
    machine = with_overrides(with_datasheet(machine, gpu), intra_node_bandwidth=intra, inter_node_bandwidth=inter,
                             pcie_bandwidth=pcie)
    return machine, memory, notes


def _gpu_preset(gpu: str | None, gpu_memory: str | int | None) -> str | None:
    """`--gpu custom` (what the plan calls a GPU given by --gpu-memory alone) means no preset."""
    if gpu is None or gpu.strip().lower() != "custom":
        return gpu
    if gpu_memory is None:
        raise BadInput("--gpu custom needs --gpu-memory (e.g. 80GB): a custom GPU is only its memory size")
    return None


def unless_auto(value: Any) -> Any:
    """None for an option left out or given as `auto` (what the help calls unknown or not asked), else the value."""
    return None if value is None or (isinstance(value, str) and value.strip().lower() == "auto") else value


def parse_overhead(text: str) -> int:
    """--overhead: the per-GPU reserve for the CUDA context, NCCL and the allocator (`parse_reserve`: 0 is none, and
    `--overhead 2`, 2 bytes, is refused as a size without its unit)."""
    from zerokit.units import parse_reserve

    return parse_reserve(text, "--overhead")


def build_training(seq_len: str, micro_batch: str, global_batch: str | None, global_batch_tokens: str | None,
                   zero_stage: str, offload_optimizer: str, offload_param: str, gradient_checkpointing: str,
                   attention: str, precision: str, overhead: str | None, lr: float | None, weight_decay: float,
                   warmup_steps: int, total_steps: str | int | None, target: str, peft: str = "none",
                   lora_rank: str | None = None, lora_targets: str | None = None,
                   lora_dropout: str | None = None, train_tokens: str | None = None,
                   lora_modules_to_save: str | None = None) -> types.Training:
    """Training from option strings; `auto` becomes None (the planner decides, or the figure is unknown)."""
    overhead, train_tokens, total_steps = unless_auto(overhead), unless_auto(train_tokens), unless_auto(total_steps)
    global_batch, global_batch_tokens = unless_auto(global_batch), unless_auto(global_batch_tokens)
    if global_batch is not None and global_batch_tokens is not None:
        raise BadInput("give --global-batch or --global-batch-tokens, not both")
    lr = parse_finite(lr, "--lr", minimum=0.0, exclusive_minimum=True) if lr is not None else None
    weight_decay = parse_finite(weight_decay, "--weight-decay", minimum=0.0)
    seq = parse_positive_int(seq_len, "--seq-len", maximum=MAX_SEQ_LEN)
    return types.Training(
        seq_len=seq,
        micro_batch=(None if micro_batch.strip().lower() == "auto"
                     else parse_positive_int(micro_batch, "--micro-batch", maximum=MAX_MICRO_BATCH)),
        global_batch=(parse_count(global_batch, "--global-batch", maximum=MAX_GLOBAL_BATCH, whole=True)
                      if global_batch is not None else None),
        global_batch_tokens=(parse_count(global_batch_tokens, "--global-batch-tokens",
                                         maximum=MAX_GLOBAL_BATCH * seq)  # --global-batch's cap, in samples
                             if global_batch_tokens is not None else None),
        zero_stage=None if zero_stage == "auto" else int(zero_stage),
        offload_optimizer=None if offload_optimizer.lower() == "auto" else offload_optimizer.lower(),
        offload_param=None if offload_param.lower() == "auto" else offload_param.lower(),
        gradient_checkpointing={"auto": None, "on": True, "off": False}[gradient_checkpointing.lower()],
        attention=attention.lower(),
        precision=None if precision.lower() == "auto" else precision.lower(),
        target=target.lower(),
        overhead_bytes=parse_overhead(overhead) if overhead is not None else None,
        lr=lr, weight_decay=weight_decay, warmup_steps=warmup_steps,
        total_steps=parse_positive_int(total_steps, "--total-steps") if total_steps is not None else None,
        train_tokens=(float(parse_count(train_tokens, "--train-tokens", maximum=MAX_TRAIN_TOKENS))
                      if train_tokens is not None else None),
        **peft_settings(peft, lora_rank, lora_targets, lora_dropout, lora_modules_to_save),
    )


def peft_settings(peft: str, rank: str | None, targets: str | None, dropout: str | None,
                  modules_to_save: str | None = None) -> dict[str, Any]:
    """The Training fields of --peft and the --lora-* options (given without --peft they would do nothing: refused)."""
    peft = peft.lower()
    given = [name for name, v in (("--lora-rank", rank), ("--lora-targets", targets), ("--lora-dropout", dropout),
                                  ("--lora-modules-to-save", modules_to_save)) if v is not None]
    if peft == "none":
        if given:
            raise BadInput(f"{', '.join(given)} {'needs' if len(given) == 1 else 'need'} --peft lora or --peft qlora")
        return {}
    out: dict[str, Any] = {"peft": peft}
    if rank is not None:
        out["lora_rank"] = parse_positive_int(rank, "--lora-rank", maximum=1 << 20)
    if targets is not None:
        names = targets.strip()
        if not names:
            raise BadInput("--lora-targets is empty; give all-linear or a comma list of module names")
        out["lora_targets"] = names
    if dropout is not None and dropout.strip().lower() != "auto":
        try:
            value = parse_finite(float(dropout), "--lora-dropout", minimum=0.0)
        except ValueError:
            raise BadInput(f"--lora-dropout must be a number in [0, 1), got {dropout!r}") from None
        if value >= 1:
            raise BadInput(f"--lora-dropout must be in [0, 1), got {dropout}")
        out["lora_dropout"] = value
    if modules_to_save is not None:
        names = ",".join(n.strip() for n in modules_to_save.split(",") if n.strip())
        if not names:
            raise BadInput("--lora-modules-to-save is empty; give the input embedding and/or the output head, e.g. "
                           "embed_tokens,lm_head")
        out["lora_modules_to_save"] = names
    return out


def emit(result: types.Plan, fmt: str, written: str | None) -> None:
    from zerokit import report

    if fmt == "json":
        text = json.dumps(report.plan_to_json(result), indent=2) + "\n"
    elif fmt == "markdown":
        text = report.render_markdown(result, written)
    else:
        text = report.render_table(result, written)
    sys.stdout.write(text)
    sys.stdout.flush()


def check_output_path(path: str, force: bool, inputs: dict[str, str | None] | None = None) -> None:
    """Refuse early, before planning, so a script learns about a bad -o path at once; never one of the files the plan
    reads (`inputs`: option -> path), which --force would replace with the ds_config."""
    from zerokit.fileio import check_target, same_path

    check_target(path, "-o", force)
    for what, source in (inputs or {}).items():
        if source and os.path.exists(path) and same_path(path, source):
            raise BadInput(f"-o {path} is the {what} this plan reads; write the ds_config elsewhere")



def write_atomic(path: str, text: str, force: bool = True) -> None:
    """Temp file in the same directory, then os.replace: a reader never sees half a config, and a failed write
    leaves neither a temp file nor a changed target (zerokit.fileio.write_atomic)."""
    from zerokit.fileio import write_atomic as write

    write(path, text, "-o", force=force)

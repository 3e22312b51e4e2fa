"""What users type for zerokit's options, from the tools they come from: DeepSpeed's runner, torchrun, the HF
Trainer's TrainingArguments, PEFT, Megatron. An unknown option found here is answered with the zerokit option it
means, where click's own guess goes by spelling alone (`--num-gpus` is closest to `--gpu`, `--batch-size` to
`--nvme-size`)."""

from __future__ import annotations

_MEANS: dict[str, tuple[str, ...]] = {
    "--gpus-per-node": ("--gpus", "--num-gpus", "--ngpus", "--n-gpus", "--nproc-per-node", "--gpus-per-host",
                        "--devices", "--world-size"),
    "--nodes": ("--num-nodes", "--nnodes", "--node-count"),
    "--micro-batch": ("--batch-size", "--micro-batch-size", "--per-device-train-batch-size",
                      "--train-micro-batch-size-per-gpu", "--mbs", "--per-gpu-batch-size"),
    "--global-batch": ("--global-batch-size", "--train-batch-size", "--gbs", "--gradient-accumulation-steps",
                       "--grad-accum", "--gradient-accumulation", "--accumulation"),
    "--seq-len": ("--max-seq-length", "--max-seq-len", "--seq-length", "--sequence-length", "--model-max-length",
                  "--block-size", "--context-length", "--max-length", "--seqlen", "--ctx-len"),
    "--zero-stage": ("--zero", "--stage", "--zero-optimization-stage", "--zero-opt-stage"),
    "--precision": ("--bf16", "--fp16", "--fp32", "--dtype", "--mixed-precision", "--torch-dtype"),
    "--lr": ("--learning-rate",),
    "--warmup-steps": ("--warmup", "--num-warmup-steps", "--lr-warmup-iters"),
    "--total-steps": ("--max-steps", "--train-steps", "--num-steps", "--train-iters"),
    "--lora-rank": ("--lora-r", "--rank"),
    "--lora-targets": ("--target-modules", "--lora-target-modules", "--lora-target"),
    "--gradient-checkpointing": ("--activation-checkpointing", "--checkpoint-activations", "--recompute"),
    "--offload-optimizer": ("--offload", "--cpu-offload", "--offload-optimizer-device"),
    "--offload-param": ("--offload-params", "--offload-parameters", "--offload-param-device"),
    "--model": ("--model-name-or-path", "--model-name", "--model-path", "--model-id"),
    "--gpu": ("--gpu-type", "--gpu-name", "--device-type"),
    "--gpu-memory": ("--gpu-mem", "--vram", "--gpu-memory-gb"),
    "--cpu-memory": ("--ram", "--cpu-ram", "--host-memory", "--cpu-mem"),
    "--attention": ("--attn-implementation", "--attn", "--flash-attention", "--flash-attn", "--use-flash-attn"),
    "--peft": ("--lora", "--use-lora", "--qlora", "--use-peft", "--load-in-4bit"),
    "--hostfile": ("-H", "--host-file"),
    "--include": ("-i",),
    "--exclude": ("-e",),
    "--config": ("--deepspeed", "--deepspeed-config", "--ds-config", "--deepspeed-config-file"),
    "--world-size": ("--gpus", "--num-gpus", "--ngpus", "--nproc-per-node", "--total-gpus", "--gpus-per-node"),  # lint's
    "--ranks": ("--num-gpus", "--gpus", "--ngpus", "--nproc-per-node", "--gpus-per-node", "--world-size"),  # probe's
}
SPELLINGS: dict[str, tuple[str, ...]] = {}
"""Another tool's option name (lower case, `-` for `_`) -> the zerokit options it means, the likelier first (a
command has at most one of them: plan's --gpus-per-node is lint's --world-size)."""
for _option, _aliases in _MEANS.items():
    for _alias in _aliases:
        SPELLINGS[_alias] = SPELLINGS.get(_alias, ()) + (_option,)


def normalized(name: str) -> str:
    """`--Num_GPUs=8` -> `--num-gpus`: the option's name as SPELLINGS keys it."""
    name = name.split("=", 1)[0]
    return name if not name.startswith("--") else name.lower().replace("_", "-")


def meant(name: str, options: list[str] | set[str]) -> str | None:
    """The option of `options` that the unknown `name` means: its own spelling with `-` for `_`, else the zerokit
    option another tool's name stands for, where the command has it; None otherwise."""
    spelled = normalized(name)
    if spelled in options:
        return spelled
    return next((option for option in SPELLINGS.get(spelled, ()) if option in options), None)

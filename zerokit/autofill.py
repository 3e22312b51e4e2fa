"""Which ds_config keys each consumer fills when they hold `"auto"`.

Read off the installed sources (transformers 5.x `HfTrainerDeepSpeedConfig.trainer_config_process` /
`trainer_config_finalize`, accelerate 1.x `DeepSpeedPlugin.__post_init__`, `set_mixed_precision` and
`Accelerator._prepare_deepspeed`). The Trainer hands its config to Accelerate's DeepSpeedPlugin too, which fills
the ZeRO stage, offload devices and 16-bit gather flag from its own defaults (`ACCELERATE_PLUGIN_DEFAULTS`). An
`"auto"` anywhere else is never filled: DeepSpeed then fails at `initialize` or, worse, reads the string as a
default.
"""

from __future__ import annotations

TARGETS = ("trainer", "accelerate", "deepspeed")

_HIDDEN_SIZE_KEYS = frozenset({
    "zero_optimization.reduce_bucket_size",
    "zero_optimization.stage3_prefetch_bucket_size",
    "zero_optimization.stage3_param_persistence_threshold",
})

ACCELERATE_PLUGIN_DEFAULTS = {
    # DeepSpeedPlugin.__post_init__ fills these from its own fields (the ACCELERATE_DEEPSPEED_* variables
    # `accelerate launch` exports from `accelerate config`; without them the defaults below), not from the training
    # setup. The HF Trainer builds the same plugin (TrainingArguments.__post_init__), so both targets fill them.
    "zero_optimization.stage": 2,
    "zero_optimization.offload_optimizer.device": "none",
    "zero_optimization.offload_param.device": "none",
    "zero_optimization.offload_optimizer.nvme_path": "none",
    "zero_optimization.offload_param.nvme_path": "none",
    "zero_optimization.stage3_gather_16bit_weights_on_model_save": False,
}
"""Key -> the value Accelerate's plugin fills an "auto" with when nothing configured it."""

ACCELERATE_OWN_DEFAULTS = frozenset(ACCELERATE_PLUGIN_DEFAULTS) | {
    # Accelerate fills this one only when the DummyScheduler was given a step count
    "scheduler.params.total_num_steps",
}
"""Keys Accelerate would fill, that a planned config keeps explicit: an "auto" here silently undoes a plan."""

TRAINER_FILLS = frozenset({
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "train_batch_size",
    "gradient_clipping",
    "optimizer.params.lr",
    "optimizer.params.betas",
    "optimizer.params.eps",
    "optimizer.params.weight_decay",
    "scheduler.params.warmup_min_lr",
    "scheduler.params.warmup_max_lr",
    "scheduler.params.warmup_num_steps",
    "scheduler.params.total_num_steps",
    "fp16.enabled",
    "bf16.enabled",
}) | frozenset(ACCELERATE_PLUGIN_DEFAULTS) | _HIDDEN_SIZE_KEYS

ACCELERATE_FILLS = frozenset({
    "train_micro_batch_size_per_gpu",  # from the prepared DataLoader's batch_size
    "gradient_accumulation_steps",
    "train_batch_size",
    "gradient_clipping",
    "fp16.enabled",
    "bf16.enabled",
    # only with accelerate.utils.DummyOptim / DummyScheduler, which is how a config-defined optimizer is used
    "optimizer.params.lr",
    "optimizer.params.weight_decay",
    "scheduler.params.warmup_min_lr",
    "scheduler.params.warmup_max_lr",
    "scheduler.params.warmup_num_steps",
}) | ACCELERATE_OWN_DEFAULTS | _HIDDEN_SIZE_KEYS

FILLED_BY = {"trainer": TRAINER_FILLS, "accelerate": ACCELERATE_FILLS, "deepspeed": frozenset()}

# DeepSpeed 0.19 also accepts the stage-3 keys without their `stage3_` prefix; the fillers look up the
# prefixed names only, so an `"auto"` under the short alias is never filled.


def fills(target: str, dotted_key: str) -> bool:
    """True when `target` replaces an `"auto"` at `dotted_key`."""
    return dotted_key in FILLED_BY[target]

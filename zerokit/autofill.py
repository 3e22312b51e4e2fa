"""Which ds_config keys each consumer fills when they hold `"auto"`.

Read off the installed sources (transformers 5.x `HfTrainerDeepSpeedConfig.trainer_config_process` /
`trainer_config_finalize`, accelerate 1.x `DeepSpeedPlugin.__post_init__`, `set_mixed_precision` and
`Accelerator._prepare_deepspeed`). An `"auto"` anywhere else is never filled: DeepSpeed then fails at
`initialize` or, worse, reads the string as a default.
"""

from __future__ import annotations

TARGETS = ("trainer", "accelerate", "deepspeed")

_HIDDEN_SIZE_KEYS = frozenset({
    "zero_optimization.reduce_bucket_size",
    "zero_optimization.stage3_prefetch_bucket_size",
    "zero_optimization.stage3_param_persistence_threshold",
})

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
}) | _HIDDEN_SIZE_KEYS

ACCELERATE_OWN_DEFAULTS = frozenset({
    # Accelerate fills these from its DeepSpeedPlugin defaults (stage 2, no offload, no 16-bit gather, its own
    # scheduler step count), not from the training setup: an "auto" here silently undoes a plan.
    "zero_optimization.stage",
    "zero_optimization.offload_optimizer.device",
    "zero_optimization.offload_param.device",
    "zero_optimization.offload_optimizer.nvme_path",
    "zero_optimization.offload_param.nvme_path",
    "zero_optimization.stage3_gather_16bit_weights_on_model_save",
    "scheduler.params.total_num_steps",
})
"""Keys Accelerate would fill, that a planned config keeps explicit."""

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

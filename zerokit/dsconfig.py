"""The ds_config a plan writes: a dict built from the decision, serialised by the caller.

One resolved config is built first (every value a number or a string DeepSpeed 0.19 reads), then the keys the
consumer fills itself are turned back into `"auto"` (`zerokit.autofill`). That keeps `--target deepspeed` and
`--target trainer` the same config apart from who supplies the training-loop values, so the trainer never
sees a value that could mismatch its `TrainingArguments`.

Deliberate differences from the fill tables:
- The hidden-size bucket keys stay explicit unless the planner chose exactly what the trainer would fill
  (reduce = h^2, prefetch = int(0.9 h^2), persistence = 10 h) and the model's shape is known (not a bare count).
- For Accelerate and the Trainer (which hands its config to Accelerate's DeepSpeedPlugin), the ZeRO stage, offload
  devices, NVMe paths and `stage3_gather_16bit_weights_on_model_save` stay explicit: the plugin fills them from its
  own defaults (stage 2, no offload, no gathering), which would silently undo the plan.
  `scheduler.params.total_num_steps` stays explicit for Accelerate too: it fills it only when the DummyScheduler was
  given one.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from zerokit.autofill import ACCELERATE_OWN_DEFAULTS, ACCELERATE_PLUGIN_DEFAULTS, FILLED_BY
from zerokit.memory.buffers import zero_buffer_keys
from zerokit.planner.types import Plan, Training

AUTO = "auto"

# DeepSpeed's dynamic loss scaling: loss_scale 0 = dynamic, starting at 2**16, halving after 2 overflows in a row.
FP16_DYNAMIC = {"loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 16, "hysteresis": 2,
                "min_loss_scale": 1}
# transformers' TrainingArguments defaults, so a resolved config trains like the Trainer would.
ADAM_BETAS = [0.9, 0.999]
ADAM_EPS = 1e-8
GRADIENT_CLIPPING = 1.0
DEFAULT_LR = 1e-5
"""The learning rate zerokit writes when --lr is not given (`Training.lr` None); the Trainer then keeps its own."""
# libaio settings DeepSpeed's own NVMe tutorials use; DeepSpeed's defaults except overlap_events.
AIO = {"block_size": 1048576, "queue_depth": 8, "intra_op_parallelism": 1, "single_submit": False,
       "overlap_events": True}
NVME_PARAM_BUFFER_COUNT = 5
# Elements per parameter swap buffer (DeepSpeed's default). Each rank swaps its 1/world_size partition of a tensor
# and asserts it fits one buffer (partitioned_param_swapper.get_buffer), so it is raised to the largest layer's
# partition when that is bigger.
NVME_PARAM_BUFFER_SIZE = 100_000_000
NVME_OPTIMIZER_BUFFER_COUNT = 4
DEFAULT_NVME_PATH = "/local_nvme"
DEEPSPEED_WARMUP_FLOOR = 2
"""WarmupLR's `max(2, warmup_num_steps)` (deepspeed/runtime/lr_schedules.py): its warm-up is never shorter."""
_TRAINING_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Training)}

_KEPT_EXPLICIT = {"trainer": frozenset(ACCELERATE_PLUGIN_DEFAULTS), "accelerate": ACCELERATE_OWN_DEFAULTS,
                  "deepspeed": frozenset()}
_FILLED_HERE = {target: frozenset(FILLED_BY[target] - _KEPT_EXPLICIT[target]) for target in FILLED_BY}
_SPLIT = {key: tuple(key.split(".")) for keys in FILLED_BY.values() for key in keys}


def build_ds_config(plan: Plan) -> dict[str, Any]:
    """The ds_config for `plan.decision`, with `"auto"` exactly where `plan.training.target` fills it."""
    config = resolved_config(plan)
    if plan.training.target == "deepspeed":
        return config
    if plan.training.target == "trainer":
        # No scheduler: the Trainer then runs its own (transformers deepspeed_optim_sched: lr_scheduler_type,
        # warmup_steps/warmup_ratio, max_steps, on DeepSpeed's optimizer too), as it would without DeepSpeed. An
        # "auto" WarmupDecayLR replaced it silently (a cosine lr_scheduler_type ran linear), and without warm-up
        # the Trainer fills warmup_num_steps 1 and warmup_min_lr 0, which DeepSpeed's WarmupLR raises to two steps
        # from 0 (lr_schedules.py): the first two optimizer steps trained at a learning rate of 0.
        del config["scheduler"]
    for key in auto_keys(plan):
        _set_if_present(config, _SPLIT[key], AUTO)
    return config


def resolved_config(plan: Plan) -> dict[str, Any]:
    """Every value explicit: what `--target deepspeed` writes."""
    d, t, hw = plan.decision, plan.training, plan.hardware
    config: dict[str, Any] = {
        "train_batch_size": d.micro_batch_size * d.gradient_accumulation_steps * hw.world_size,
        "train_micro_batch_size_per_gpu": d.micro_batch_size,
        "gradient_accumulation_steps": d.gradient_accumulation_steps,
        "gradient_clipping": GRADIENT_CLIPPING,
    }
    config.update(_precision(plan))
    config["zero_optimization"] = _zero(plan)
    if "nvme" in (d.offload_optimizer, d.offload_param):
        config["aio"] = dict(AIO)
    config["optimizer"] = {
        "type": "AdamW",
        "params": {"lr": learning_rate(t), "betas": list(ADAM_BETAS), "eps": ADAM_EPS, "weight_decay": t.weight_decay},
    }
    config["scheduler"] = _scheduler(plan)
    return config


def auto_keys(plan: Plan) -> list[str]:
    """Dotted keys that become `"auto"` for this plan's target, in a stable order."""
    keys = set(_FILLED_HERE[plan.training.target])
    d, h = plan.decision, plan.model.hidden_size
    shape_known = plan.model.source != "count" and h > 0
    filled_value = {
        "zero_optimization.reduce_bucket_size": (d.reduce_bucket_size, h * h),
        "zero_optimization.stage3_prefetch_bucket_size": (d.prefetch_bucket_size, int(0.9 * h * h)),
        "zero_optimization.stage3_param_persistence_threshold": (d.param_persistence_threshold, 10 * h),
    }
    for key, (chosen, filled) in filled_value.items():
        if not shape_known or chosen != filled:
            keys.discard(key)
    if plan.training.target == "accelerate" and _constant_rate(plan.training):
        # Accelerate's DummyScheduler fill writes warmup_min_lr 0, which WarmupLR holds for two steps (`_scheduler`)
        keys.discard("scheduler.params.warmup_min_lr")
    return sorted(keys)


def learning_rate(t: Training) -> float:
    """--lr, or zerokit's default where it was not given."""
    return DEFAULT_LR if t.lr is None else t.lr


def _constant_rate(t: Training) -> bool:
    """A schedule zerokit writes as WarmupLR from `--lr` to itself: no warm-up and no decay, under a target that
    takes the config's scheduler (the Trainer's has none)."""
    return t.target != "trainer" and not t.warmup_steps and t.total_steps is None


def training_arguments(plan: Plan) -> dict[str, Any]:
    """What the consumer must be told so its "auto" fills match the plan.

    trainer: TrainingArguments fields (`--lr`/`--weight-decay` only when given, as the config leaves them "auto").
    accelerate: the DataLoader batch size, the Accelerator arguments, and DummyOptim/DummyScheduler values, which
    Accelerate requires when the config defines the optimizer and reads lr/weight decay/warmup from.
    """
    d, t = plan.decision, plan.training
    # --lr given at all (zerokit's default is not the Trainer's 5e-5, so `--lr 1e-5` must be passed on too)
    given = {"lr": t.lr} if t.lr is not None else {}
    if t.weight_decay != _TRAINING_DEFAULTS["weight_decay"]:
        given["weight_decay"] = t.weight_decay
    if t.target == "trainer":
        args: dict[str, Any] = {
            "per_device_train_batch_size": d.micro_batch_size,
            "gradient_accumulation_steps": d.gradient_accumulation_steps,
        }
        if d.precision in ("bf16", "fp16"):
            args[d.precision] = True
        args["gradient_checkpointing"] = d.gradient_checkpointing
        if "lr" in given:
            args["learning_rate"] = given["lr"]
        if "weight_decay" in given:
            args["weight_decay"] = given["weight_decay"]
        if t.warmup_steps:
            args["warmup_steps"] = t.warmup_steps
        if t.total_steps is not None:
            args["max_steps"] = t.total_steps
        elif plan.train_steps is not None:  # --train-tokens: the steps that train them (the scheduler's total)
            args["max_steps"] = plan.train_steps
        return args
    if t.target == "accelerate":
        return {
            "dataloader_batch_size": d.micro_batch_size,
            "gradient_accumulation_steps": d.gradient_accumulation_steps,
            "mixed_precision": d.precision if d.precision in ("bf16", "fp16") else "no",
            "gradient_checkpointing": d.gradient_checkpointing,
            "lr": learning_rate(t),
            "weight_decay": t.weight_decay,
            "warmup_num_steps": max(1, t.warmup_steps),
        }
    return {"gradient_checkpointing": d.gradient_checkpointing}


def training_arguments_hint(plan: Plan, output: str | None = None) -> str:
    """One line telling the user how to start training so it matches the plan; `output`: where -o wrote the config
    (else ds_config.json). Accelerate gets its DeepSpeedPlugin named: an Accelerator without one uses DeepSpeed only
    under `accelerate launch` with DeepSpeed configured (ACCELERATE_USE_DEEPSPEED), so a script started by `zerokit
    launch` or `deepspeed` would train without it, the config unread."""
    args, target = training_arguments(plan), plan.training.target
    if target == "trainer":
        flags = [f"--per_device_train_batch_size {args['per_device_train_batch_size']}",
                 f"--gradient_accumulation_steps {args['gradient_accumulation_steps']}"]
        flags += [f"--{p}" for p in ("bf16", "fp16") if args.get(p)]
        if args["gradient_checkpointing"]:
            flags.append("--gradient_checkpointing")
        keys = ("learning_rate", "weight_decay", "warmup_steps", "max_steps")
        flags += [f"--{k} {args[k]}" for k in keys if k in args]
        return "pass the HF Trainer " + " ".join(flags)
    gc = "; call model.gradient_checkpointing_enable()" if args["gradient_checkpointing"] else ""
    if target == "accelerate":
        return (f"use DataLoader(batch_size={args['dataloader_batch_size']}), "
                f"Accelerator(deepspeed_plugin=DeepSpeedPlugin(hf_ds_config={output or 'ds_config.json'!r}), "
                f"gradient_accumulation_steps={args['gradient_accumulation_steps']}, "
                f"mixed_precision={args['mixed_precision']!r}), DummyOptim(params, lr={args['lr']}, "
                f"weight_decay={args['weight_decay']}) and DummyScheduler(optimizer, "
                f"warmup_num_steps={args['warmup_num_steps']}){gc}")
    return "the config is complete; pass it to deepspeed.initialize(config=...)" + gc


def _precision(plan: Plan) -> dict[str, Any]:
    precision, target = plan.decision.precision, plan.training.target
    if target == "deepspeed":
        if precision == "bf16":
            return {"bf16": {"enabled": True}}
        if precision == "fp16":
            return {"fp16": {"enabled": True, **FP16_DYNAMIC}}
        return {}
    # Both sections, so the consumer's own --bf16/--fp16 decides; the chosen one becomes "auto" afterwards.
    fp16: dict[str, Any] = {"enabled": precision == "fp16"}
    if precision == "fp16":
        fp16.update(FP16_DYNAMIC)
    return {"fp16": fp16, "bf16": {"enabled": precision == "bf16"}}


def _zero(plan: Plan) -> dict[str, Any]:
    d = plan.decision
    zero: dict[str, Any] = {"stage": d.zero_stage}
    if d.zero_stage == 0:
        return zero
    if d.offload_optimizer != "none":
        zero["offload_optimizer"] = _offload(plan, d.offload_optimizer, param=False)
    if d.zero_stage == 3 and d.offload_param != "none":
        zero["offload_param"] = _offload(plan, d.offload_param, param=True)
    zero.update(zero_buffer_keys(d, d.zero_stage))
    if d.zero_stage == 3:
        zero["stage3_gather_16bit_weights_on_model_save"] = True
        if plan.peft is not None:
            # DeepSpeed's default replaces F.linear with LinearFunctionForZeroStage3, which saves every linear's
            # input for backward, a frozen base's too: plain F.linear keeps none of those (zerokit.planner.rules)
            zero["memory_efficient_linear"] = False
    return zero


def _offload(plan: Plan, device: str, param: bool) -> dict[str, Any]:
    section: dict[str, Any] = {"device": device, "pin_memory": True}
    if device != "nvme":
        return section
    section["nvme_path"] = plan.hardware.nvme_path or DEFAULT_NVME_PATH
    if param:
        section["buffer_count"] = NVME_PARAM_BUFFER_COUNT
        partition = -(-plan.model.largest_layer_parameters // plan.hardware.world_size)
        section["buffer_size"] = max(NVME_PARAM_BUFFER_SIZE, partition)
    else:
        section["buffer_count"] = NVME_OPTIMIZER_BUFFER_COUNT
    return section


def _scheduler(plan: Plan) -> dict[str, Any]:
    """Linear warmup (`warmup_type`, which DeepSpeed would take as "log") then linear decay (the Trainer's default
    shape) when the total is known or filled.

    DeepSpeed's WarmupLR/WarmupDecayLR (lr_schedules.py, 0.19) raise warmup_num_steps to at least 2 and set the rate
    to warmup_min_lr at construction and again at the first step(): with a minimum of 0 the first two optimizer steps
    train at 0 and the third at half the rate. A run without warm-up therefore gets, at a constant rate, a warm-up
    from the rate to itself; with a decay, a schedule that starts past DeepSpeed's two warm-up steps
    (`last_batch_iteration` 2, so construction leaves the optimizer's own rate for the first step) and ends 2 steps
    later: step k of T trains at lr x (T - k + 1) / T, as the Trainer's linear schedule without warm-up. The
    Accelerate target gets the same: Accelerate fills only the params left "auto" (its DummyScheduler fill writes
    warmup_min_lr 0), so `auto_keys` keeps the constant rate's warmup_min_lr explicit. The Trainer target has no
    scheduler section (`build_ds_config`)."""
    t = plan.training
    no_warmup = t.target != "trainer" and not t.warmup_steps
    decays = t.total_steps is not None or t.target == "trainer"
    params: dict[str, Any] = {
        "warmup_min_lr": learning_rate(t) if _constant_rate(t) else 0,
        "warmup_max_lr": learning_rate(t),
        # DeepSpeed >= 0.19.6 rejects warmup_num_steps <= 0; the Trainer and Accelerate fill max(1, ...) too.
        "warmup_num_steps": max(1, t.warmup_steps),
        # DeepSpeed's Warmup* schedulers default to a logarithmic warmup (half the peak a tenth of the way in)
        "warmup_type": "linear",
    }
    if not decays:
        return {"type": "WarmupLR", "params": params}
    params["total_num_steps"] = t.total_steps if t.total_steps is not None else max(1, t.warmup_steps)
    if no_warmup:
        params["total_num_steps"] += DEEPSPEED_WARMUP_FLOOR
        params["last_batch_iteration"] = DEEPSPEED_WARMUP_FLOOR
    return {"type": "WarmupDecayLR", "params": params}


def _set_if_present(config: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = config
    *parents, leaf = path
    for part in parents:
        node = node.get(part)
        if not isinstance(node, dict):
            return
    if leaf in node:
        node[leaf] = value


def walk(config: Any, prefix: str = ""):
    """Yield (dotted_key, value) for every leaf; lists are leaves."""
    if isinstance(config, dict):
        for k, v in config.items():
            yield from walk(v, f"{prefix}.{k}" if prefix else k)
    else:
        yield prefix, config

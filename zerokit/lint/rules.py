"""Semantic lint rules: the config mistakes DeepSpeed accepts silently, misreads, or rejects only at initialize.

Each rule is a small function `(doc, ctx) -> Iterable[Hit]` in the ordered `RULES` table with a stable code and
a default severity. Every rule cites where DeepSpeed (0.19), transformers or Accelerate shows the fault, and
`tests/test_lint_rules.py` shows each one against the installed DeepSpeed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from zerokit._dataclass import dataclass
from zerokit.autofill import ACCELERATE_PLUGIN_DEFAULTS, fills
from zerokit.lint import schema as schema_mod
from zerokit.lint.findings import ERROR, WARNING, Finding, dotted
from zerokit.lint.loader import Document
from zerokit.lint.schema import AUTO, Hit
from zerokit.units import LARGEST_GPU_BYTES

# deepspeed/runtime/config.py DEEPSPEED_OPTIMIZERS (matched case-insensitively)
DEEPSPEED_OPTIMIZERS = ("adagrad", "adam", "adamw", "lamb", "muadam", "muadamw", "musgd", "lion", "muon")
# torch.optim classes DeepSpeed falls back to with getattr(torch.optim, name) (case-sensitive); torch 2.x
TORCH_OPTIMIZERS = ("ASGD", "Adadelta", "Adafactor", "Adagrad", "Adam", "AdamW", "Adamax", "LBFGS", "Muon", "NAdam",
                    "RAdam", "RMSprop", "Rprop", "SGD", "SparseAdam")
# What ZeRO accepts without zero_allow_untested_optimizer (deepspeed/runtime/zero/utils.py ZERO_SUPPORTED_OPTIMIZERS:
# torch Adam/AdamW/Adagrad, FusedAdam, DeepSpeedCPUAdam/Adagrad/Lion, FusedLion; MuonWithAuxAdam for muon).
ZERO_TESTED = ("adam", "adamw", "adagrad", "lion", "muon", "Adam", "AdamW", "Adagrad")
# deepspeed/runtime/lr_schedules.py VALID_LR_SCHEDULES, then torch.optim.lr_scheduler by name
DEEPSPEED_SCHEDULERS = ("LRRangeTest", "OneCycle", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR")
TORCH_SCHEDULERS = ("ChainedScheduler", "ConstantLR", "CosineAnnealingLR", "CosineAnnealingWarmRestarts", "CyclicLR",
                    "ExponentialLR", "LambdaLR", "LinearLR", "MultiStepLR", "MultiplicativeLR", "OneCycleLR",
                    "PolynomialLR", "ReduceLROnPlateau", "SequentialLR", "StepLR")
# Constructor keywords of DeepSpeed's schedulers (lr_schedules.py); DeepSpeed calls scheduler(optimizer, **params)
DEEPSPEED_SCHEDULER_PARAMS = {
    "LRRangeTest": ("lr_range_test_min_lr", "lr_range_test_step_size", "lr_range_test_step_rate",
                    "lr_range_test_staircase", "last_batch_iteration"),
    "OneCycle": ("cycle_min_lr", "cycle_max_lr", "decay_lr_rate", "cycle_first_step_size", "cycle_second_step_size",
                 "cycle_first_stair_count", "cycle_second_stair_count", "decay_step_size", "cycle_momentum",
                 "cycle_min_mom", "cycle_max_mom", "decay_mom_rate", "last_batch_iteration"),
    "WarmupLR": ("warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type", "last_batch_iteration"),
    "WarmupDecayLR": ("total_num_steps", "warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type",
                      "last_batch_iteration"),
    "WarmupCosineLR": ("total_num_steps", "warmup_min_ratio", "warmup_num_steps", "cos_min_ratio", "warmup_type",
                       "last_batch_iteration"),
}
DEEPSPEED_SCHEDULER_REQUIRED = {"OneCycle": ("cycle_min_lr", "cycle_max_lr"), "WarmupDecayLR": ("total_num_steps",),
                                "WarmupCosineLR": ("total_num_steps",)}
# Stage-3-only keys of zero_optimization (pydantic field name and its stage3_ alias): engine._configure_zero_optimizer
# hands them to DeepSpeedZeroOptimizer_Stage3 (or zero.Init) alone, never to the stage 1/2 optimizer
FUSED_ADAM_PARAMS = ("lr", "betas", "eps", "weight_decay", "bias_correction", "amsgrad", "set_grad_none")
"""deepspeed.ops.adam.FusedAdam's keywords (ops/adam/fused_adam.py), but params and adam_w_mode."""
CPU_ADAM_PARAMS = ("lr", "betas", "eps", "weight_decay", "bias_correction", "amsgrad")
"""DeepSpeedCPUAdam's (ops/adam/cpu_adam.py), but model_params and the adamw_mode and fp32_optimizer_states the
engine passes itself (in params they would be given twice: TypeError)."""
ADAM_OWN_PARAMS = ("adam_w_mode", "torch_adam", "fp32_optimizer_states")
"""optimizer.params keys engine._configure_basic_optimizer and get_optimizer_configuration pop before the call."""
FUSED_LION_PARAMS = ("lr", "betas", "weight_decay", "set_grad_none")
"""deepspeed.ops.lion.FusedLion's keywords (ops/lion/fused_lion.py), but params: no eps, unlike Adam."""
CPU_LION_PARAMS = ("lr", "betas", "weight_decay", "fp32_optimizer_states")
"""DeepSpeedCPULion's (ops/lion/cpu_lion.py), but model_params; the engine passes Lion's params as written."""
OPTIMIZER_KEYWORDS = {
    "adam": (("FusedAdam", FUSED_ADAM_PARAMS), ("DeepSpeedCPUAdam", CPU_ADAM_PARAMS), ADAM_OWN_PARAMS),
    "adamw": (("FusedAdam", FUSED_ADAM_PARAMS), ("DeepSpeedCPUAdam", CPU_ADAM_PARAMS), ADAM_OWN_PARAMS),
    "lion": (("FusedLion", FUSED_LION_PARAMS), ("DeepSpeedCPULion", CPU_LION_PARAMS), ()),
}
"""DeepSpeed optimizer name -> (the class without optimizer offload, its keywords), (the class with it, its
keywords), the params keys the engine pops itself (engine._configure_basic_optimizer)."""
# zero_quantized_gradients: the engine builds its all-to-all group at any stage, but only the stage-3 optimizer
# receives it (engine.py _configure_zero_optimizer)
STAGE3_KEYS = ("prefetch_bucket_size", "param_persistence_threshold", "model_persistence_threshold",
               "max_live_parameters", "max_reuse_distance", "gather_16bit_weights_on_model_save",
               "module_granularity_threshold", "use_all_reduce_for_fetch_params", "allgather_sequential",
               "sub_group_size", "zero_hpz_partition_size", "zero_quantized_weights",
               "zero_quantized_nontrainable_weights", "zero_quantized_gradients", "log_trace_cache_warnings")
STAGE3_OFFLOAD_KEYS = ("super_offload", "cpuadam_cores_perc")
"""offload_optimizer keys only ZeRO-3 reads: engine._configure_zero_optimizer picks SuperOffloadOptimizer_Stage3 by
super_offload in its stage-3 branch alone (cpuadam_cores_perc is that optimizer's)."""
# Keys only DeepSpeedZeroOptimizer (stage 1/2) takes; engine._configure_zero_optimizer never hands them to stage 3
STAGE12_KEYS = ("allgather_bucket_size", "ignore_unused_parameters", "parameter_alignment", "round_robin_gradients",
                "use_multi_rank_bucket_allreduce")
GRADIENT_CLIPPING_DEFAULT = 1.0  # deepspeed/runtime/constants.py (0.19)
WARMUP_SCHEDULERS = ("WarmupLR", "WarmupDecayLR", "WarmupCosineLR")
WARMUP_TYPES = ("log", "linear")  # lr_schedules.py WARMUP_LOG_RATE, WARMUP_LINEAR_RATE
MAX_BUCKET_ELEMENTS = 10**15  # a bucket size past this (a PB of bf16) is a typo, whatever the GPU
BUCKET_SHARE_WARN = 0.25  # warn when communication buckets alone take more than this share of the GPU
PYDANTIC_INT_FLOAT_LIMIT = 2**63
"""pydantic refuses a float at or past this for an int field (int_parsing_size): 1e30 fails DeepSpeedConfig."""
BUCKET_DEFAULTS = {"reduce_bucket_size": "5e8", "allgather_bucket_size": "5e8", "prefetch_bucket_size": "5e7",
                   "stage3_prefetch_bucket_size": "5e7"}
"""DeepSpeedZeroConfig's defaults (runtime/zero/config.py) for the bucket sizes, as written in a ds_config."""

TARGET_NAMES = {"trainer": "the HF Trainer", "accelerate": "Accelerate", "deepspeed": "DeepSpeed"}


@dataclass(frozen=True)
class Context:
    """What the config is linted for: the --target consumer, and --world-size / --gpu-memory when given."""

    target: str = "trainer"
    world_size: int | None = None
    gpu_memory: int | None = None  # bytes


@dataclass(frozen=True)
class Rule:
    code: str
    severity: str
    name: str
    check: Callable[[Document, Context], Iterable[Hit]]


# ---------------------------------------------------------------- helpers


def _int(value: Any) -> int | None:
    """An integer-valued JSON number, else None ("auto", strings, missing)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


def _zero(cfg: dict) -> dict:
    z = cfg.get("zero_optimization")
    return z if isinstance(z, dict) else {}


def _stage(cfg: dict) -> int | None:
    """The ZeRO stage DeepSpeed will run, or None when it is "auto" / unreadable."""
    z = cfg.get("zero_optimization")
    if isinstance(z, bool):
        return 1 if z else 0
    if not isinstance(z, dict):
        return 0
    stage = z.get("stage", 0)
    if isinstance(stage, str) and stage.strip() in ("0", "1", "2", "3"):
        return int(stage)  # pydantic converts "3" to 3 (ZK103 warns of the type): the stage's rules still apply
    return _int(stage) if _int(stage) in (0, 1, 2, 3) else None


def _section(cfg: dict, *names: str) -> dict:
    for name in names:
        if isinstance(cfg.get(name), dict):
            return cfg[name]
    return {}


def _is_true(value: Any) -> bool:
    return value is True or (isinstance(value, (int, float)) and not isinstance(value, bool) and value == 1)


def _bf16_key(cfg: dict) -> str:
    # get_bfloat16_config reads "bf16" and falls back to the old name "bfloat16"
    return "bf16" if isinstance(cfg.get("bf16"), dict) or "bfloat16" not in cfg else "bfloat16"


def _offload(cfg: dict, which: str) -> tuple[str | None, tuple]:
    """(device, key path) of zero_optimization.offload_{which}; device None when absent."""
    sec = _zero(cfg).get(f"offload_{which}")
    if isinstance(sec, dict):
        dev = sec.get("device", "none")
        return (dev if isinstance(dev, str) else None), ("zero_optimization", f"offload_{which}", "device")
    legacy = {"param": "cpu_offload_param", "optimizer": "cpu_offload"}[which]
    if _zero(cfg).get(legacy) is True:
        return "cpu", ("zero_optimization", legacy)
    return None, ()


def _dtype_bytes(cfg: dict) -> int:
    half = _is_true(_section(cfg, "fp16").get("enabled")) or _is_true(_section(cfg, _bf16_key(cfg)).get("enabled"))
    auto = AUTO in (_section(cfg, "fp16").get("enabled"), _section(cfg, _bf16_key(cfg)).get("enabled"))
    return 2 if half or auto else 4


# ---------------------------------------------------------------- schema rules (ZK1xx)


TRAINER_MATCHES = ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size",
                   "gradient_clipping", "optimizer.params.lr", "optimizer.params.betas", "optimizer.params.eps",
                   "optimizer.params.weight_decay", "scheduler.params.warmup_max_lr", "fp16.enabled", "bf16.enabled",
                   "scheduler.params.total_num_steps", "scheduler.params.warmup_num_steps")
"""Keys HfTrainerDeepSpeedConfig compares with TrainingArguments when they are not "auto" (fill_match with
must_match, in trainer_config_process and trainer_config_finalize); Accelerate's own fill never compares
(DeepSpeedPlugin.deepspeed_config_process and set_mixed_precision run with must_match=False)."""


def schema_checks(doc: Document, ctx: Context) -> Iterator[Hit]:
    """Unknown, removed, deprecated keys and wrong values, from the shipped JSON Schema (ZK100-ZK105); a deprecated
    key or a converted string is an error where its consumer fails on it."""
    for hit in schema_mod.walk(doc.data):
        yield (_deprecated_beside_replacement(hit, doc, ctx) or _old_bf16_section(hit, doc, ctx)
               or _string_hf_compares(hit, ctx) or _string_stage_behind_hf(hit, ctx) or hit)
    if isinstance(doc.data.get("zero_optimization"), bool):
        yield Hit(("zero_optimization",), "'zero_optimization': true/false is the deprecated form (true means "
                  "stage 1); write {\"stage\": 1}", '{"stage": 1}', WARNING, "ZK102")


def _given(section: Any, key: str, dotted_key: str, ctx: Context) -> bool:
    """Whether pydantic sees `key` as set: DeepSpeedConfigModel.__init__ drops an "auto" value before it validates,
    unless the HF Trainer or Accelerate fill it first."""
    return (isinstance(section, dict) and key in section
            and (section[key] != AUTO or (ctx.target != "deepspeed" and fills(ctx.target, dotted_key))))


def _deprecated_beside_replacement(hit: Hit, doc: Document, ctx: Context) -> Hit | None:
    """DeepSpeedConfigModel._process_deprecated_field (runtime/config_utils.py) moves a deprecated field given in the
    config (model_fields_set: any value, false and null included) to its new_param, first asserting that new_param
    was not given too: 'Cannot provide deprecated parameter 'cpu_offload' and replacing parameter
    'offload_optimizer' together', from DeepSpeedConfig and so at initialize. x-exclusive-with names that new_param
    (schema_gen); either spelling of it counts, pydantic's field name or its alias."""
    node = schema_mod.node_at(hit.key) if hit.code == "ZK102" else None
    new = (node or {}).get("x-exclusive-with")
    parent = _at(doc.data, hit.key[:-1])
    if not new or not _given(parent, hit.key[-1], dotted(hit.key), ctx):
        return None
    *inner, name = new.split(".")
    section = _at(parent, tuple(inner))
    field = schema_mod.node_at(hit.key[:-1] + tuple(new.split("."))) or {}
    for spelling in (name, field.get("x-alias-of")):
        where = hit.key[:-1] + tuple(inner) + (spelling,)
        if spelling and _given(section, spelling, dotted(where), ctx):
            return Hit(hit.key, f"'{dotted(hit.key)}' is deprecated and its replacement '{dotted(where)}' is set "
                       "too: DeepSpeed asserts at initialize ('Cannot provide deprecated parameter ... and replacing "
                       f"parameter ... together'), whatever the values; delete '{hit.key[-1]}'", None, ERROR, "ZK102")
    return None


def _old_bf16_section(hit: Hit, doc: Document, ctx: Context) -> Hit | None:
    """get_bfloat16_config (runtime/precision_config.py) reads the "bf16" section and falls back to "bfloat16" only
    where "bf16" is missing. Behind the HF Trainer and Accelerate it never is: DeepSpeedPlugin.set_mixed_precision
    (AcceleratorState, whatever the precision) adds "bf16": {"enabled": <mixed precision is bf16>}, so the old
    section is never read; bf16 follows TrainingArguments.bf16 / --mixed_precision alone, and the Trainer's own
    check of bf16.enabled against TrainingArguments (fill_match) finds no "bf16" to compare. A real Trainer and
    Accelerator show it: {"enabled": true} trains in fp32 without bf16=True, {"enabled": false} in bf16 with it."""
    if hit.code != "ZK102" or hit.key != ("bfloat16",):
        return None
    if isinstance(doc.data.get("bf16"), dict):
        return Hit(hit.key, "'bfloat16' is the old name of the 'bf16' section, and this config has both: DeepSpeed "
                   "reads 'bf16' alone and ignores this section (get_bfloat16_config); move what it sets into 'bf16' "
                   "and delete it", None, WARNING, "ZK102")
    if ctx.target not in ("trainer", "accelerate"):
        return None
    who, on, flag = (("the HF Trainer", "TrainingArguments sets bf16=True", "TrainingArguments.bf16")
                     if ctx.target == "trainer" else
                     ("Accelerate", "the mixed precision is bf16", "Accelerate's --mixed_precision"))
    return Hit(hit.key, f"'bfloat16' is the old name of the 'bf16' section, and {who} never lets DeepSpeed read it: "
               "DeepSpeedPlugin.set_mixed_precision adds a 'bf16' section of its own ({\"enabled\": false} unless "
               f"{on}), which DeepSpeed reads first, so this section is ignored and bf16 silently follows {flag} "
               "alone; rename it to 'bf16'", "bf16", ERROR, "ZK102")


def _at(data: Any, keypath: tuple) -> Any:
    for key in keypath:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def _string_hf_compares(hit: Hit, ctx: Context) -> Hit | None:
    """A string pydantic converts ("true" for bf16.enabled) is compared as written by the HF Trainer:
    HfTrainerDeepSpeedConfig.fill_match adds '- ds bf16.enabled=true vs hf bf16|bf16_full_eval=True' to its
    mismatches ("true" != True, and "false" != False), and trainer_config_finalize raises ValueError on them."""
    if ctx.target != "trainer" or hit.code != "ZK103" or hit.severity != WARNING or hit.suggestion is None:
        return None
    name = dotted(hit.key)
    if name not in TRAINER_MATCHES:
        return None
    return Hit(hit.key, f"'{name}' is a string, and {TARGET_NAMES[ctx.target]} compares it with TrainingArguments "
               "as written (HfTrainerDeepSpeedConfig.fill_match): no string equals the argument, so it stops with "
               f"ValueError ('mismatch TrainingArguments values'); write {hit.suggestion} without quotes, or \"auto\"",
               hit.suggestion, ERROR, "ZK103")


def _string_stage_behind_hf(hit: Hit, ctx: Context) -> Hit | None:
    """HfDeepSpeedConfig.is_zero3() (accelerate utils/deepspeed.py, transformers' subclass) is `stage == 3` on the
    value as written, so "3" reads as not ZeRO-3: no zero.Init at from_pretrained (is_deepspeed_zero3_enabled), the
    Trainer's "auto" stage3_prefetch_bucket_size / stage3_param_persistence_threshold left for DeepSpeed to drop,
    DeepSpeedPlugin.zero3_init_flag off, and Accelerator.get_state_dict returning the partitioned (empty)
    parameters instead of gathering them. DeepSpeed itself converts "3" to 3 (the warning under --target
    deepspeed).

    Any other stage as a string under Accelerate: DeepSpeedPlugin.__post_init__ copies the config's stage onto
    itself as written, and Accelerator.no_sync compares `zero_stage < 2`, a TypeError in `accumulate()` on every
    micro-batch that does not step, under gradient accumulation on several processes (the HF Trainer never enters
    no_sync with DeepSpeed: its sync_context is a nullcontext)."""
    if (ctx.target not in ("trainer", "accelerate") or hit.code != "ZK103" or hit.severity != WARNING
            or hit.key != ("zero_optimization", "stage") or hit.suggestion not in ("0", "1", "2", "3")):
        return None
    if hit.suggestion != "3":
        if ctx.target != "accelerate":
            return None
        return Hit(hit.key, f"'zero_optimization.stage' is a string: DeepSpeed converts it, but Accelerate keeps it as "
                   f"written (DeepSpeedPlugin.zero_stage) and Accelerator.no_sync compares it with 2, a TypeError in "
                   f"accumulate() under gradient accumulation on several processes; write {hit.suggestion} without "
                   "quotes", hit.suggestion, ERROR, "ZK103")
    return Hit(hit.key, f"'zero_optimization.stage' is a string: DeepSpeed converts it, but {TARGET_NAMES[ctx.target]} "
               "checks stage == 3 as written (HfDeepSpeedConfig.is_zero3), so it runs without its ZeRO-3 handling (no "
               "zero.Init, no \"auto\" stage3_* fills, no gathered weights at save); write 3 without quotes",
               "3", ERROR, "ZK103")


def duplicate_keys(doc: Document, ctx: Context) -> Iterator[Hit]:
    """DeepSpeed loads files with dict_raise_error_on_duplicate_keys; HF's json.load keeps the last one silently.
    One pydantic field under both its names (prefetch_bucket_size and its alias stage3_prefetch_bucket_size) is a
    duplicate too: DeepSpeedConfigModel validates with populate_by_name and extra="forbid" (runtime/config_utils.py),
    so pydantic takes the alias and refuses the field's own name as an extra input, at initialize."""
    for key, _pos in doc.duplicates:
        yield Hit(key, f"'{dotted(key)}' appears twice in one object: DeepSpeed refuses the file, json.load (HF "
                  "Trainer, Accelerate) silently keeps the last value; delete one")
    for parent, name, alias in schema_mod.alias_pairs():
        section = _at(doc.data, parent)
        key, other = parent + (name,), parent + (alias,)
        if _given(section, name, dotted(key), ctx) and _given(section, alias, dotted(other), ctx):
            keep = (f" (keep '{alias}', the name the HF Trainer and Accelerate read and fill)"
                    if alias.startswith("stage3_") else "")
            yield Hit(key, f"'{dotted(key)}' and '{dotted(other)}' are one DeepSpeed field under two names: pydantic "
                      f"reads '{alias}' and refuses '{name}' beside it (extra inputs are not permitted), so the config "
                      f"fails at initialize; delete one{keep}")


def hjson_behind_hf(doc: Document, ctx: Context) -> Iterator[Hit]:
    """HfDeepSpeedConfig reads the file with json.load, so HJSON syntax works only with the deepspeed launcher. A
    UTF-8 byte-order mark is its own fault, reported beside the syntax: DeepSpeedConfig's hjson.load skips it,
    Accelerate's HfDeepSpeedConfig (utils/deepspeed.py: open(encoding="utf-8"), json.load) stops at it before it
    reads any syntax, so a file fixed for the syntax alone still fails."""
    if ctx.target not in ("trainer", "accelerate") or doc.syntax == "accelerate":
        return
    if doc.bom:
        yield Hit((), f"the file starts with a UTF-8 byte-order mark (BOM): DeepSpeed skips it, but "
                  f"{TARGET_NAMES[ctx.target]} reads the file with json.load, which refuses it ('Unexpected UTF-8 "
                  "BOM'); save it as UTF-8 without BOM", pos=(1, 1))
    if doc.syntax == "yaml" and doc.json_error:  # a YAML that is no Accelerate config, linted as a ds_config
        yield Hit((), f"YAML, not JSON ({doc.json_error}): {TARGET_NAMES[ctx.target]} loads a ds_config with "
                  "json.load and fails; write it as JSON", pos=doc.json_error_pos)
    elif doc.syntax == "hjson":
        yield Hit((), f"not strict JSON ({doc.json_error}): DeepSpeed reads HJSON, but {TARGET_NAMES[ctx.target]} "
                  "loads the file with json.load and fails; quote keys, drop comments and trailing commas, or lint "
                  "with --target deepspeed", pos=doc.json_error_pos)


# ---------------------------------------------------------------- batch and precision


def batch_size_mismatch(doc: Document, ctx: Context) -> Iterator[Hit]:
    """DeepSpeedConfig._batch_assertion: train_batch_size == micro * accumulation * data-parallel world size."""
    cfg = doc.data
    if ctx.world_size is not None:
        yield from _autotp_split(cfg, ctx.world_size)
    tbs, mbs, gas = (cfg.get(k) for k in ("train_batch_size", "train_micro_batch_size_per_gpu",
                                          "gradient_accumulation_steps"))
    if AUTO in (tbs, mbs, gas) or (ctx.target == "trainer" and "train_batch_size" in cfg
                                   and _sequence_parallel_size(cfg) > 1):
        return  # ZK212 reports the Trainer's: no train_batch_size passes both it and DeepSpeed
    t, m, g = _int(tbs), _int(mbs), _int(gas)
    if any(v is not None and v <= 0 for v in (t, m, g)):
        return  # ZK105 reports it
    if ctx.target != "deepspeed" and "gradient_accumulation_steps" not in cfg:
        g = 1  # DeepSpeedPlugin.__post_init__ writes 1 where the key is missing: DeepSpeed derives nothing
    key = ("train_batch_size",)
    w, why = ctx.world_size, ""
    if w is not None:
        w, why, hit = _data_parallel_size(cfg, w)
        if hit is not None:
            yield hit
            return
        if not why and _autotp_size(cfg) > 1:
            why = (f" (every rank, though each group of tensor_parallel.autotp_size {_autotp_size(cfg)} shares its "
                   "micro batches: DeepSpeed's batch check counts them all)")
    if t is not None and m is not None and g is not None:
        if w is not None and t != m * g * w:
            written = ("" if "gradient_accumulation_steps" in cfg else
                       f" (not in the file: {TARGET_NAMES[ctx.target]}'s DeepSpeedPlugin writes 1 there, so DeepSpeed "
                       "derives nothing)")
            yield Hit(key, f"train_batch_size {t} != micro batch {m} x gradient_accumulation_steps {g}{written} x "
                      f"world size {w}{why} = {m * g * w}; DeepSpeed asserts this at initialize; set train_batch_size "
                      f"to {m * g * w}", str(m * g * w))
        elif w is None and t % (m * g):
            yield Hit(key, f"train_batch_size {t} is not a multiple of micro batch {m} x gradient_accumulation_steps "
                      f"{g} = {m * g}, so no world size satisfies DeepSpeed's batch assertion; fix one of the three")
        return
    if w is None:
        if t is not None and m is not None and t % m:
            yield Hit(key, f"train_batch_size {t} is not a multiple of micro batch {m}, so no world size and "
                      "gradient accumulation satisfy DeepSpeed's batch assertion; fix one of the two")
        return
    if t is not None and m is not None and t % (m * w):
        yield Hit(key, f"train_batch_size {t} is not divisible by micro batch {m} x world size {w}{why}: DeepSpeed "
                  f"derives gradient_accumulation_steps = {t // m // w} and its batch assertion fails")
    elif t is not None and g is not None and t % (g * w):
        yield Hit(key, f"train_batch_size {t} is not divisible by gradient_accumulation_steps {g} x world size "
                  f"{w}{why}: DeepSpeed's derived micro batch fails its batch assertion")
    elif t is not None and m is None and g is None and t % w:
        yield Hit(key, f"train_batch_size {t} is not divisible by world size {w}{why}: DeepSpeed's derived micro "
                  f"batch {t // w} fails its batch assertion")


def _data_parallel_size(cfg: dict, ranks: int) -> tuple[int, str, Hit | None]:
    """The world size DeepSpeedConfig checks the batch against, the words saying where it came from, and the Hit
    when the ranks cannot be split so. With sequence_parallel_size it divides the ranks by it (config.py, without an
    mpu; a Ulysses mpu gives the same); with data_parallel_size too, deepspeed.initialize builds a
    (data_parallel_size, sequence_parallel_size) device mesh, which must hold every rank, and counts its data axis."""
    sp = _sequence_parallel_size(cfg)
    if sp < 1:
        return ranks, "", None  # absent, "auto" or out of range: ZK103/ZK105 report a bad one
    dp = _int(cfg.get("data_parallel_size"))
    if "data_parallel_size" in cfg and dp is not None and dp >= 1:
        if dp * sp != ranks:
            fix = str(ranks // sp) if ranks % sp == 0 else None
            return ranks, "", Hit(("data_parallel_size",), f"data_parallel_size {dp} x sequence_parallel_size {sp} = "
                                  f"{dp * sp}, not the world size {ranks}: deepspeed.initialize builds its device "
                                  "mesh from the two and fails; "
                                  + (f"set data_parallel_size to {fix}" if fix else
                                     "make their product the world size"),
                                  fix)
        return dp, f" (data_parallel_size {dp})", None
    if sp == 1:
        return ranks, "", None
    if ranks % sp:
        return ranks, "", Hit(("sequence_parallel_size",), f"sequence_parallel_size {sp} does not divide the world "
                              f"size {ranks}: DeepSpeed's sequence-parallel groups (Ulysses' "
                              "initialize_sequence_parallel, AutoSP's mesh) refuse it, and its batch check divides the "
                              "ranks into a fraction; use a divisor of the world size")
    return ranks // sp, f" ({ranks} ranks / sequence_parallel_size {sp})", None


def _autotp_split(cfg: dict, ranks: int) -> Iterator[Hit]:
    """AutoTP groups the ranks in a (ranks // autotp_size, autotp_size) data x tensor-parallel device mesh
    (utils/groups.py _init_tp_mesh_device, from DeepSpeedEngine.__init__), which must hold every rank. The batch
    check is not affected: deepspeed.initialize builds DeepSpeedConfig before the engine builds that mesh, and it
    counts every rank, the tensor-parallel ones too, or with sequence_parallel_size the ranks / that size alone
    (_data_parallel_size): AutoTP never divides them further."""
    tp = _autotp_size(cfg)
    if tp > 1 and ranks % tp:
        fails = ("an AssertionError on every rank" if tp > ranks else
                 f"an IndexError on the {ranks % tp} of {ranks} ranks left outside it")
        yield Hit(("tensor_parallel", "autotp_size"), f"tensor_parallel.autotp_size {tp} does not divide the world "
                  f"size {ranks}: deepspeed.initialize builds a ({ranks // tp}, {tp}) data x tensor-parallel device "
                  f"mesh from it and fails ({fails}); use a divisor of the world size")


def _sequence_parallel_size(cfg: dict) -> int:
    """The ds_config's sequence_parallel_size, 0 where absent or not an integer."""
    return _int(cfg.get("sequence_parallel_size")) or 0


def sequence_parallel_behind_hf(doc: Document, ctx: Context) -> Iterator[Hit]:
    """A ds_config's sequence_parallel_size behind the HF Trainer or Accelerate. Only their parallelism_config
    (sp_backend "deepspeed") builds Ulysses' groups and hands deepspeed.initialize the mpu (accelerator.py
    _prepare_deepspeed); without it DeepSpeedConfig still divides the ranks by the key for its batch check (config.py,
    no mpu), while the Trainer sets train_batch_size to micro x accumulation x every rank (trainer_config_process:
    fills "auto", records any other number as a mismatch unless auto_find_batch_size) and Accelerate fills "auto" so.
    Two real gloo ranks show the assertion, the Trainer's ValueError, and that a config that starts trains
    data-parallel, unsharded."""
    cfg = doc.data
    sp = _sequence_parallel_size(cfg)
    if ctx.target not in ("trainer", "accelerate") or sp <= 1:
        return
    who = TARGET_NAMES[ctx.target]
    fix = (f"configure sequence parallelism with {'TrainingArguments' if ctx.target == 'trainer' else 'Accelerator'}"
           f"(parallelism_config=ParallelismConfig(sp_backend=\"deepspeed\", sp_size={sp})) and delete "
           "sequence_parallel_size")
    key = ("sequence_parallel_size",)
    if cfg.get("train_batch_size") == AUTO:
        yield Hit(key, f"sequence_parallel_size {sp} behind {who}: it fills \"auto\" train_batch_size with micro batch "
                  f"x gradient_accumulation_steps x every rank, DeepSpeed checks it against the ranks / {sp}, and its "
                  f"batch assertion fails at initialize; {fix}")
    elif ctx.target == "trainer" and "train_batch_size" in cfg:
        yield Hit(key, f"sequence_parallel_size {sp} behind the HF Trainer: it wants train_batch_size = micro batch x "
                  f"gradient_accumulation_steps x every rank, DeepSpeed the ranks / {sp}, so any number fails one of "
                  f"the two (the Trainer's mismatch ValueError or DeepSpeed's batch assertion); {fix}")
    else:
        yield Hit(key, f"sequence_parallel_size {sp} in the ds_config shards no sequence behind {who} (only its "
                  "parallelism_config builds DeepSpeed's Ulysses groups): the ranks train data-parallel while "
                  f"DeepSpeed's batch count divides them by {sp}; {fix}", severity=WARNING)


def batch_size_missing(doc: Document, ctx: Context) -> Iterator[Hit]:
    """DeepSpeedConfig._set_batch_related_parameters asserts one of the two is given, a null being none
    (param_dict.get). The HF Trainer and Accelerate fill only an "auto" value (fill_match), never a missing or null
    key, so they stop there too: a real Trainer and Accelerator.prepare show the assertion."""
    cfg = doc.data
    if cfg.get("train_batch_size") is None and cfg.get("train_micro_batch_size_per_gpu") is None:
        said = "set" if "train_batch_size" not in cfg and "train_micro_batch_size_per_gpu" not in cfg else "given"
        if ctx.target == "deepspeed":
            yield Hit((), f"neither train_batch_size nor train_micro_batch_size_per_gpu is {said}: DeepSpeed stops at "
                      "initialize; set train_micro_batch_size_per_gpu", "train_micro_batch_size_per_gpu")
        else:
            yield Hit((), f"neither train_batch_size nor train_micro_batch_size_per_gpu is {said}: "
                      f"{TARGET_NAMES[ctx.target]} fills only \"auto\" values, so DeepSpeed stops at initialize "
                      "('Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided'); set "
                      "\"train_micro_batch_size_per_gpu\": \"auto\"", "train_micro_batch_size_per_gpu")


def null_batch_behind_hf(doc: Document, ctx: Context) -> Iterator[Hit]:
    """A null batch key is "derive it" to DeepSpeed, not to Accelerate (the HF Trainer prepares through it too).
    Accelerator._prepare_deepspeed reads gradient_accumulation_steps back (get_value: None), makes it the
    Accelerator's own, and computes train_batch_size = micro batch x None whenever it knows the micro batch: a
    TypeError at prepare. With a null micro batch it skips that line, DeepSpeed derives gradient accumulation 1, and
    the Accelerator keeps None, so accumulate() fails (GradientState step % None); the Trainer, which counts its own
    accumulation, trains. A null micro batch also leaves Accelerate nothing to fill an "auto" train_batch_size with
    (ValueError: `train_batch_size` not found in kwargs); the Trainer fills it from TrainingArguments."""
    cfg = doc.data
    if ctx.target not in ("trainer", "accelerate") or doc.syntax == "accelerate":
        return  # an Accelerate YAML's null is its own ZK103 (accelerate.yaml_findings)
    micro = cfg.get("train_micro_batch_size_per_gpu")
    if "gradient_accumulation_steps" in cfg and cfg["gradient_accumulation_steps"] is None:
        fix = "write the number of micro-batches per step, or \"auto\""
        if micro is not None:
            via = "" if ctx.target == "accelerate" else "prepares through Accelerate, which "
            yield Hit(("gradient_accumulation_steps",), "'gradient_accumulation_steps' is null: DeepSpeed would "
                      f"derive it, but {TARGET_NAMES[ctx.target]} {via}reads the null back and multiplies the micro "
                      f"batch by it to fill train_batch_size: TypeError in Accelerator._prepare_deepspeed; {fix}",
                      "auto")
        elif ctx.target == "accelerate":
            yield Hit(("gradient_accumulation_steps",), "'gradient_accumulation_steps' is null: DeepSpeed derives 1, "
                      "but Accelerator._prepare_deepspeed takes the null as the Accelerator's own "
                      "gradient_accumulation_steps, and accumulate() then fails (TypeError: step % None); " + fix,
                      "auto")
    if ctx.target == "accelerate" and "train_micro_batch_size_per_gpu" in cfg and micro is None \
            and cfg.get("train_batch_size") == AUTO:
        yield Hit(("train_batch_size",), "'train_batch_size' is \"auto\" and train_micro_batch_size_per_gpu null: "
                  "Accelerate fills train_batch_size from the micro batch, which the null leaves unknown, and stops at "
                  "prepare (ValueError: `train_batch_size` not found in kwargs); make train_micro_batch_size_per_gpu "
                  "\"auto\" (the dataloader's batch size) or a number", None)


def fp16_and_bf16(doc: Document, ctx: Context) -> Iterator[Hit]:
    """DeepSpeedConfig asserts 'bfloat16 and fp16 modes cannot be simultaneously enabled'."""
    cfg = doc.data
    bkey = _bf16_key(cfg)
    if _is_true(_section(cfg, "fp16").get("enabled")) and _is_true(_section(cfg, bkey).get("enabled")):
        # at fp16.enabled: the key the message and the suggestion "false" are for
        yield Hit(("fp16", "enabled"), "fp16 and bf16 are both enabled; DeepSpeed refuses this at initialize; keep "
                  "bf16 on GPUs that have it (A100, H100) and set fp16.enabled to false", "false")


def fp16_loss_scale(doc: Document, ctx: Context) -> Iterator[Hit]:
    """DeepSpeedFP16Config: with dynamic scaling (loss_scale 0) a window or floor <= 0 fails at initialize."""
    fp16 = _section(doc.data, "fp16")
    if not _is_true(fp16.get("enabled")) or fp16.get("loss_scale", 0) != 0:
        return
    for key in ("loss_scale_window", "min_loss_scale"):
        v = _int(fp16.get(key))
        if v is not None and v <= 0:
            yield Hit(("fp16", key), f"fp16.{key} is {v}, but dynamic loss scaling (loss_scale 0) needs it > 0: "
                      "DeepSpeed refuses it at initialize (a window of 0 would divide by zero)", "1")


DYNAMIC_SCALE_KEYS = ("initial_scale_power", "loss_scale_window", "hysteresis", "consecutive_hysteresis",
                      "min_loss_scale")
"""DeepSpeedFP16Config.dynamic_loss_scale_args: what tunes dynamic loss scaling (runtime/precision_config.py)."""


def fp16_static_scale_dynamic_keys(doc: Document, ctx: Context) -> Iterator[Hit]:
    """A static loss_scale (non-zero) turns dynamic scaling off (engine.dynamic_loss_scale: loss_scale == 0), and
    the keys that tune it are parsed and never used: DeepSpeedExamples' ZeRO-Infinity config sets 1024 with all
    four."""
    fp16 = _section(doc.data, "fp16")
    scale = fp16.get("loss_scale", 0)
    if not _is_true(fp16.get("enabled")) or isinstance(scale, bool) or not isinstance(scale, (int, float)) \
            or scale <= 0:
        return
    given = [k for k in DYNAMIC_SCALE_KEYS if k in fp16]
    if given:  # no suggestion: the fix is removing the key (or another key's value), none of its own values
        yield Hit(("fp16", given[0]), f"fp16.loss_scale {scale:g} is a static scale, so DeepSpeed ignores "
                  f"{', '.join('fp16.' + k for k in given)}, which tune dynamic scaling only; remove "
                  f"{'it' if len(given) == 1 else 'them'}, or set fp16.loss_scale to 0 for dynamic scaling")


MAX_SCALE_POWER = 63
"""torch takes a Python int scalar up to 2**64 - 1: loss * 2**64 raises OverflowError ('int too big to convert')."""


def _dynamic_fp16_with_zero(cfg: dict) -> dict | None:
    """The fp16 section where ZeRO's DynamicLossScaler runs it (fp16 on or "auto", loss_scale 0, ZeRO stage 1-3 or
    not known yet), else None. Without ZeRO the engine's FP16 optimizers keep their own scale: no hysteresis, and
    engine.backward scales only a ZeROOptimizer's loss (engine.py backward: scale_if_loss)."""
    fp16 = _section(cfg, "fp16")
    enabled = fp16.get("enabled")
    if not (_is_true(enabled) or enabled == AUTO) or fp16.get("loss_scale", 0) != 0 or _stage(cfg) == 0:
        return None
    return fp16


def fp16_hysteresis(doc: Document, ctx: Context) -> Iterator[Hit]:
    """DynamicLossScaler.update_scale (runtime/fp16/loss_scaler.py) lowers the scale on an overflow only when
    delayed_shift (hysteresis) is 1 or cur_hysteresis has counted down to 1; otherwise it decrements cur_hysteresis
    and skips the step. From 0 or below the count never reaches 1: the scale never comes down, and every step that
    overflows at it is skipped, with an info-level log line and no error."""
    fp16 = _dynamic_fp16_with_zero(doc.data)
    value = _int(fp16.get("hysteresis")) if fp16 is not None else None
    if value is not None and value < 1:
        yield Hit(("fp16", "hysteresis"), f"fp16.hysteresis {value}: ZeRO's dynamic loss scaler lowers the scale only "
                  "when its hysteresis count reaches 1, which it never does from below 1, so after the first overflow "
                  "every step is skipped and the model stops training, without an error; write 2 (DeepSpeed's "
                  "default) or 1", "2")


def fp16_scale_power(doc: Document, ctx: Context) -> Iterator[Hit]:
    """DeepSpeedFP16Config.dynamic_loss_scale_args hands the scaler 2**initial_scale_power as a Python int, and
    LossScalerBase.scale_loss multiplies the loss by it: torch refuses an int of 2**64 or more."""
    fp16 = _dynamic_fp16_with_zero(doc.data)
    power = _int(fp16.get("initial_scale_power")) if fp16 is not None else None
    if power is not None and power > MAX_SCALE_POWER:
        yield Hit(("fp16", "initial_scale_power"), f"fp16.initial_scale_power {power} makes the first loss scale "
                  f"2**{power}, an integer torch cannot multiply the loss by: the first backward raises OverflowError "
                  "('int too big to convert'); write 16 (DeepSpeed's default)", "16")


def master_weights_need_zero(doc: Document, ctx: Context) -> Iterator[Hit]:
    """DeepSpeedConfig._do_error_check: *_master_weights_and_grads and bf16_optimizer_states need ZeRO 1-3."""
    cfg = doc.data
    stage = _stage(cfg)
    bkey = _bf16_key(cfg)
    checks = [(("fp16", "fp16_master_weights_and_grads"), _section(cfg, "fp16")),
              ((bkey, "bf16_master_weights_and_grads"), _section(cfg, bkey)),
              ((bkey, "bf16_optimizer_states"), _section(cfg, bkey))]
    for key, sec in checks:
        if _is_true(sec.get(key[1])) and stage == 0:
            yield Hit(key, f"{dotted(key)} needs ZeRO stage 1, 2 or 3; DeepSpeed asserts at initialize; set "
                      "zero_optimization.stage or drop the key")
    b = _section(cfg, bkey)
    if _is_true(b.get("bf16_optimizer_states")) and b.get("bf16_master_weights_and_grads") is not True:
        yield Hit((bkey, "bf16_optimizer_states"), "bf16_optimizer_states requires bf16_master_weights_and_grads: "
                  "true; DeepSpeed asserts at initialize")


_DTYPE_NAMES = {"fp16": "fp16", "torch.float16": "fp16", "float16": "fp16", "half": "fp16",
                "fp32": "fp32", "torch.float32": "fp32", "float32": "fp32", "float": "fp32",
                "bf16": "bf16", "torch.bfloat16": "bf16", "bfloat16": "bf16"}
"""DeepSpeed's DtypeEnum spellings (runtime/config.py), by the dtype they name."""


def _model_dtype(cfg: dict) -> str:
    """The dtype the engine trains the model in: fp16, then bf16, else fp32 (engine.get_data_types)."""
    return ("fp16" if _is_true(_section(cfg, "fp16").get("enabled")) else
            "bf16" if _is_true(_section(cfg, _bf16_key(cfg)).get("enabled")) else "fp32")


def _data_type(cfg: dict, key: str) -> str | None:
    """The dtype a data_types key names, exactly as DtypeEnum reads it (None: unset or not a spelling; the
    schema's ZK104 reports those)."""
    value = _section(cfg, "data_types").get(key)
    return _DTYPE_NAMES.get(value) if isinstance(value, str) else None


def grad_accum_dtype_without_zero(doc: Document, ctx: Context) -> Iterator[Hit]:
    """engine._do_optimizer_sanity_check: without ZeRO the gradients accumulate in the model's dtype; another
    data_types.grad_accum_dtype raises NotImplementedError('unsupported mix of model_dtype ... and
    grad_accum_dtype ...') when the engine builds its optimizer."""
    cfg = doc.data
    wanted = _data_type(cfg, "grad_accum_dtype")
    if wanted is None or _stage(cfg) != 0:  # no zero_optimization section is stage 0 too
        return
    model = _model_dtype(cfg)
    if wanted != model:
        yield Hit(("data_types", "grad_accum_dtype"), f"data_types.grad_accum_dtype {wanted} with {model} weights "
                  "and no ZeRO: DeepSpeed accumulates gradients in the model's dtype without ZeRO and raises "
                  "NotImplementedError (unsupported mix) when it builds the optimizer; use ZeRO stage 1-3 or drop "
                  "the key")


def param_dtype_conflict(doc: Document, ctx: Context) -> Iterator[Hit]:
    """engine._assert_valid_mixed_precision_config: data_types.param_dtype must name the dtype the fp16/bf16
    flags train in (fp32 without them); another asserts at initialize ('conflicts with the enabled precision
    mode')."""
    cfg = doc.data
    wanted = _data_type(cfg, "param_dtype")
    model = _model_dtype(cfg)
    if wanted is not None and wanted != model:
        section = {"fp16": "fp16", "bf16": _bf16_key(cfg)}
        fix = f"set {section[wanted]}.enabled to true" if wanted != "fp32" else f"set {section[model]}.enabled to false"
        yield Hit(("data_types", "param_dtype"), f"data_types.param_dtype {wanted} with {model} training: DeepSpeed "
                  f"asserts at initialize that it matches the fp16/bf16 mode; {fix}, or drop the key (the mode "
                  "sets the parameters' dtype)")


# ---------------------------------------------------------------- ZeRO and offload


def offload_param_below_stage3(doc: Document, ctx: Context) -> Iterator[Hit]:
    """Only ZeRO-3 partitions (and so offloads) parameters; stage 1/2 parse offload_param and never use it."""
    stage = _stage(doc.data)
    dev, key = _offload(doc.data, "param")
    if stage is not None and stage < 3 and dev in ("cpu", "nvme"):
        yield Hit(key, f"parameter offload to {dev} only works with ZeRO stage 3; at stage {stage} DeepSpeed ignores "
                  "it and keeps parameters on the GPU; set zero_optimization.stage to 3 or remove offload_param",
                  "none")  # the key's own value: what DeepSpeed runs (stage 3 is the other fix, the message's first)


def _autotp_size(cfg: dict) -> int:
    """tensor_parallel.autotp_size as a whole number (0 when absent or not one): AutoTP shards weights above 1."""
    return _int(_section(cfg, "tensor_parallel").get("autotp_size")) or 0


def stage3_keys_below_stage3(doc: Document, ctx: Context) -> Iterator[Hit]:
    """DeepSpeedZeroConfig parses the stage-3 knobs at any stage; only DeepSpeedZeroOptimizer_Stage3 reads them."""
    stage = _stage(doc.data)
    if stage is None or stage == 3:
        return
    zero = _zero(doc.data)
    autotp = _autotp_size(doc.data) > 1
    for name in STAGE3_KEYS:
        if autotp and name == "gather_16bit_weights_on_model_save":
            continue  # AutoTP reads it at any stage (Accelerator.get_state_dict: zero3 or autotp_size > 1)
        for key in (name, "stage3_" + name):
            if key in zero:
                yield Hit(("zero_optimization", key), f"zero_optimization.{key} only applies to ZeRO stage 3; at "
                          f"stage {stage} DeepSpeed ignores it; remove it or use stage 3")
    opt = zero.get("offload_optimizer")
    for key in STAGE3_OFFLOAD_KEYS if isinstance(opt, dict) else ():
        if key in opt:
            yield Hit(("zero_optimization", "offload_optimizer", key), f"zero_optimization.offload_optimizer.{key} "
                      f"only applies to ZeRO stage 3; at stage {stage} DeepSpeed ignores it; remove it or use stage 3")
    if "stage3_gather_fp16_weights_on_model_save" in zero:
        yield Hit(("zero_optimization", "stage3_gather_fp16_weights_on_model_save"),
                  f"zero_optimization.stage3_gather_fp16_weights_on_model_save only applies to ZeRO stage 3; at stage "
                  f"{stage} DeepSpeed ignores it")


def legacy_stage1(doc: Document, ctx: Context) -> Iterator[Hit]:
    """DeepSpeedZeroConfig still parses legacy_stage1; engine._configure_zero_optimizer raises on it at any stage."""
    if _is_true(_zero(doc.data).get("legacy_stage1")) and (_stage(doc.data) or 0) > 0:
        yield Hit(("zero_optimization", "legacy_stage1"), "zero_optimization.legacy_stage1 is the ZeRO-1 DeepSpeed "
                  "removed in 0.5.9: initialize raises 'The deprecated version of ZeRO Stage 1 is not supported'; "
                  "delete it (stage 1 is today's ZeRO-1)")


def stage12_keys_at_stage3(doc: Document, ctx: Context) -> Iterator[Hit]:
    """DeepSpeedZeroOptimizer_Stage3 takes none of the stage-1/2 knobs; the config parses them anyway."""
    if _stage(doc.data) != 3:
        return
    zero = _zero(doc.data)
    for key in STAGE12_KEYS:
        if key in zero:
            instead = "; stage 3 gathers with stage3_prefetch_bucket_size" if key == "allgather_bucket_size" else ""
            yield Hit(("zero_optimization", key), f"zero_optimization.{key} only applies to ZeRO stage 1 and 2; at "
                      f"stage 3 DeepSpeed ignores it{instead}; remove it")


def nvme_without_path(doc: Document, ctx: Context) -> Iterator[Hit]:
    """offload device 'nvme' with nvme_path null: the swapper joins None into a path at initialize."""
    for which in ("param", "optimizer"):
        sec = _zero(doc.data).get(f"offload_{which}")
        if not isinstance(sec, dict) or sec.get("device") != "nvme":
            continue
        path = sec.get("nvme_path")
        if path == AUTO and ctx.target == "accelerate":
            continue  # Accelerate fills it from offload_*_nvme_path
        if path in (None, "", "none"):
            got = "is missing" if path is None else f"is {json.dumps(path)}"
            yield Hit(("zero_optimization", f"offload_{which}", "device"),
                      f"offload_{which} goes to NVMe but nvme_path {got}: DeepSpeed accepts the config and fails "
                      f"at initialize; set zero_optimization.offload_{which}.nvme_path to a directory on a local NVMe "
                      "drive", f"zero_optimization.offload_{which}.nvme_path")


def partial_offload_below_stage3(doc: Document, ctx: Context) -> Iterator[Hit]:
    """DeepSpeedZeroConfig.offload_ratio_check: 'Partial offloading only supported for ZeRO Stage 3'."""
    sec = _zero(doc.data).get("offload_optimizer")
    stage = _stage(doc.data)
    if isinstance(sec, dict) and stage is not None and stage < 3:
        ratio = sec.get("ratio", 1.0)
        if isinstance(ratio, (int, float)) and not isinstance(ratio, bool) and ratio < 1:
            yield Hit(("zero_optimization", "offload_optimizer", "ratio"),
                      f"offload_optimizer.ratio {ratio} (partial offload) needs ZeRO stage 3; DeepSpeed asserts at "
                      f"initialize; use stage 3 or ratio 1.0", "1.0")


def nvme_optimizer_below_stage3(doc: Document, ctx: Context) -> Iterator[Hit]:
    """Stage 1/2 offload any device but 'none' to CPU memory (stage_1_and_2.py: `cpu_offload = device != none`):
    only ZeRO-3 swaps optimizer states to NVMe."""
    dev, key = _offload(doc.data, "optimizer")
    stage = _stage(doc.data)
    if dev == "nvme" and stage in (1, 2):
        yield Hit(key, f"optimizer offload to nvme needs ZeRO stage 3; at stage {stage} DeepSpeed keeps the optimizer "
                  "states in CPU memory instead, without a word (nothing is swapped to the drive); set "
                  "zero_optimization.stage to 3 or the device to cpu", "cpu")


def offload_optimizer_stage0(doc: Document, ctx: Context) -> Iterator[Hit]:
    """Offload lives in the ZeRO optimizers; at stage 0 no ZeRO optimizer is built and offload_optimizer is unused."""
    dev, key = _offload(doc.data, "optimizer")
    if _stage(doc.data) == 0 and dev in ("cpu", "nvme"):
        yield Hit(key, f"optimizer offload to {dev} needs ZeRO stage 1, 2 or 3; at stage 0 DeepSpeed ignores it; set "
                  "zero_optimization.stage", "zero_optimization.stage")


QUANTIZED_INIT_KEYS = ("num_bits", "group_size", "group_dim", "symmetric")
"""What inference/quantization/utils.Quantizer reads off weight_quantization.quantized_initialization."""


def quantized_initialization(doc: Document, ctx: Context) -> Iterator[Hit]:
    """zero.Init (partition_parameters.py) quantizes every Linear and Embedding weight as the model is built whenever
    weight_quantization.quantized_initialization is non-empty; its Quantizer asserts num_bits 4 or 8 and symmetric
    false and indexes the four keys, and nothing reads weight_quantization.enabled."""
    sec = _section(doc.data, "weight_quantization")
    yield from _weight_quantization_unread(sec, ctx)
    init = sec.get("quantized_initialization")
    if not isinstance(init, dict) or not init:
        return
    key = ("weight_quantization", "quantized_initialization")
    missing = [k for k in QUANTIZED_INIT_KEYS if k not in init]
    if missing:
        yield Hit(key, f"weight_quantization.quantized_initialization lacks {', '.join(missing)}: zero.Init raises "
                  "KeyError as it builds the model; give num_bits, group_size, group_dim and symmetric, e.g. "
                  '{"num_bits": 8, "group_size": 64, "group_dim": 1, "symmetric": false}')
    if "num_bits" in init and init["num_bits"] not in (4, 8):
        yield Hit(key + ("num_bits",), f"quantized_initialization.num_bits {schema_mod._show(init['num_bits'])}: "
                  "zero.Init asserts 'Only INT4 and INT8 quantization is supported' as it builds the model; write 4 or "
                  "8", "8")
    if "symmetric" in init and init["symmetric"] not in (False,):
        yield Hit(key + ("symmetric",), "quantized_initialization.symmetric must be false: zero.Init asserts 'Only "
                  "asymmetric quantization is supported' as it builds the model; write false", "false")
    if sec.get("enabled") is False:
        yield Hit(("weight_quantization", "enabled"), "weight_quantization.enabled false does not turn "
                  "quantized_initialization off: DeepSpeed never reads enabled, and zero.Init quantizes the weights "
                  "all the same; delete quantized_initialization to train unquantized", "quantized_initialization",
                  WARNING)


def _weight_quantization_unread(sec: dict, ctx: Context) -> Iterator[Hit]:
    """WeightQuantConfig parses num_bits, q_type and q_groups, and training reads none of them: zero.Init takes
    quantized_initialization alone (partition_parameters.py). post_init_quant is read only by
    _init_group_wise_weight_quantization(model, ds_config), which neither deepspeed.initialize, the HF Trainer nor
    Accelerate calls; it maps module-name substrings to Quantizer settings, so a flat section matches no module."""
    for name in ("num_bits", "q_type", "q_groups"):
        if name in sec:
            yield Hit(("weight_quantization", name), f"weight_quantization.{name} is parsed but never read in "
                      "training: the only weight quantization DeepSpeed applies is quantized_initialization, which "
                      "zero.Init reads with its own num_bits, group_size, group_dim and symmetric; set those there, "
                      "or delete it", "weight_quantization.quantized_initialization", WARNING)
    post = sec.get("post_init_quant")
    if not isinstance(post, dict) or not post:
        return
    key = ("weight_quantization", "post_init_quant")
    if ctx.target != "deepspeed":
        yield Hit(key, f"{TARGET_NAMES[ctx.target]} never applies weight_quantization.post_init_quant: only "
                  "deepspeed.inference.quantization.quantization._init_group_wise_weight_quantization(model, "
                  "ds_config) reads it, called by a script itself; to quantize while the model is built use "
                  "quantized_initialization", None, WARNING)
    flat = sorted(k for k, v in post.items() if not isinstance(v, dict))
    if flat:
        yield Hit(key, f"weight_quantization.post_init_quant maps parts of module names to quantization settings, "
                  f"and {', '.join(repr(k) for k in flat[:4])} hold no settings: written flat like "
                  "quantized_initialization, it matches no module and _init_group_wise_weight_quantization quantizes "
                  'nothing, silently; write {"<module name part>": {"num_bits": 8, "group_size": 64, "group_dim": 1, '
                  '"symmetric": false}}', None, WARNING)


def odd_allgather_bucket(doc: Document, ctx: Context) -> Iterator[Hit]:
    """DeepSpeedZeroOptimizer asserts allgather_bucket_size % nccl_start_alignment_factor (2) == 0 (stage 1/2)."""
    v = _int(_zero(doc.data).get("allgather_bucket_size"))
    if _stage(doc.data) in (1, 2) and v is not None and v % 2:
        yield Hit(("zero_optimization", "allgather_bucket_size"), f"allgather_bucket_size {v} is odd; ZeRO stage 1/2 "
                  "asserts it is a multiple of 2 at initialize", str(v + 1))


def bucket_memory(doc: Document, ctx: Context) -> Iterator[Hit]:
    """With overlap_comm the buckets take about 4.5 x (reduce + allgather/prefetch bucket) elements x dtype bytes."""
    if ctx.gpu_memory is None:
        return
    cfg = doc.data
    stage = _stage(cfg)
    zero = _zero(cfg)
    if stage in (None, 0) or any(True for _ in bucket_exceeds_gpu(doc, ctx)):
        return  # ZK314 has the error: a share of a GPU the buckets do not fit on says nothing more
    overlap = zero.get("overlap_comm", stage == 3)  # DeepSpeedZeroConfig.overlap_comm_valid: default True at stage 3
    if overlap is not True:
        return
    reduce = _int(zero.get("reduce_bucket_size", 500_000_000))
    other_key = "allgather_bucket_size" if stage < 3 else (
        "stage3_prefetch_bucket_size" if "stage3_prefetch_bucket_size" in zero else "prefetch_bucket_size")
    other = _int(zero.get(other_key, 500_000_000 if stage < 3 else 50_000_000))
    if reduce is None or other is None:
        return  # "auto": the Trainer sizes them from hidden_size
    if max(reduce, other) > MAX_BUCKET_ELEMENTS:  # beyond float arithmetic, and any GPU: say so plainly
        key = "reduce_bucket_size" if reduce >= other else other_key
        yield Hit(("zero_optimization", key), f"zero_optimization.{key} is a {len(str(max(reduce, other)))}-digit "
                  "number of elements, more than any GPU holds; with overlap_comm DeepSpeed allocates buckets of it; "
                  "use e.g. 5e7", "5e7")
        return
    nbytes = bucket_bytes(reduce, other, _dtype_bytes(cfg))
    share = nbytes / ctx.gpu_memory
    if share > BUCKET_SHARE_WARN:
        yield Hit(("zero_optimization", "overlap_comm"),
                  f"overlap_comm with reduce_bucket_size {reduce:.3g} and {other_key} {other:.3g} needs about "
                  f"{nbytes / 1e9:.1f} GB of buckets (4.5 x ({reduce:.3g} + {other:.3g}) x {_dtype_bytes(cfg)} bytes), "
                  f"{share:.0%} of the {ctx.gpu_memory / 1e9:.0f} GB GPU; lower both bucket sizes (e.g. 5e7) or set "
                  "overlap_comm to false", "false")  # the key's own value (lower buckets are the other fix)


def _count(n: int) -> str:
    """A whole number as 5e+08, its digits read off past float range (a JSON integer may have 4000 of them)."""
    if n < 10**300:
        return f"{n:.3g}"
    digits = str(n)
    return f"{digits[0]}.{digits[1:3]}e+{len(digits) - 1}"


def _bucket_fix(ctx: Context, key: str) -> str:
    default = BUCKET_DEFAULTS[key]
    auto = (f", or \"auto\" ({TARGET_NAMES[ctx.target]} fills it from the model's hidden_size)"
            if fills(ctx.target, f"zero_optimization.{key}") else "")
    return f"write {default} (DeepSpeed's default){auto}"


def bucket_exceeds_gpu(doc: Document, ctx: Context) -> Iterator[Hit]:
    """A bucket size DeepSpeed cannot start with. DeepSpeedZeroConfig types the sizes as int, and pydantic refuses a
    float at or past 2^63 (1e30: int_parsing_size) at initialize. The ZeRO optimizers allocate `reduce_bucket_size`
    gradient elements up front with torch.empty on the GPU, in the model's dtype (ZeRO-1 with a wider
    grad_accum_dtype in that one, so the bytes here are a lower bound): stage 3 one buffer at initialize
    (stage3.py), stage 1/2 one, and a second with overlap_comm, at the first backward (stage_1_and_2.py
    setup_buckets); both only with contiguous_gradients, the default. A buffer larger than the GPU is an
    out-of-memory at startup. allgather_bucket_size and the prefetch bucket only cap how much is gathered at once:
    nothing is allocated from them, so only the pydantic limit applies to them."""
    zero = doc.data.get("zero_optimization")
    if not isinstance(zero, dict):
        return
    refused = set()
    for key, default in BUCKET_DEFAULTS.items():
        value = zero.get(key)
        if isinstance(value, float) and math.isfinite(value) and value >= PYDANTIC_INT_FLOAT_LIMIT:
            refused.add(key)
            yield Hit(("zero_optimization", key), f"zero_optimization.{key} {value:.3g} is no bucket size: "
                      "DeepSpeed reads it as an integer and pydantic refuses a float of 2^63 or more "
                      f"(int_parsing_size), so initialize fails; {_bucket_fix(ctx, key)}", default)
    stage = _stage(doc.data)
    reduce = _int(zero.get("reduce_bucket_size", 500_000_000))
    if ("reduce_bucket_size" in refused or stage not in (1, 2, 3) or zero.get("contiguous_gradients") is False
            or reduce is None or reduce <= 0):
        return
    buffers = 2 if stage < 3 and zero.get("overlap_comm") is True else 1
    dtype = _dtype_bytes(doc.data)
    nbytes = buffers * reduce * dtype  # an int: exact for any size
    limit = ctx.gpu_memory or LARGEST_GPU_BYTES
    if nbytes <= limit:
        return
    gpu = (f"the {ctx.gpu_memory / 1e9:.0f} GB of --gpu-memory" if ctx.gpu_memory else
           f"any GPU has (the largest, {LARGEST_GPU_BYTES // 10**9} GB)")
    size = f"{nbytes / 1e9:,.0f} GB" if nbytes < MAX_BUCKET_ELEMENTS else f"{_count(nbytes)} bytes"
    what = "two gradient buckets (overlap_comm) of 2 x" if buffers == 2 else "a gradient bucket of"
    yield Hit(("zero_optimization", "reduce_bucket_size"), f"zero_optimization.reduce_bucket_size {_count(reduce)} "
              f"makes ZeRO stage {stage} allocate {what} {_count(reduce)} x {dtype} bytes = {size} on every GPU up "
              f"front, more than {gpu}: an out-of-memory at startup; "
              f"{_bucket_fix(ctx, 'reduce_bucket_size')}", BUCKET_DEFAULTS["reduce_bucket_size"])


def bucket_bytes(reduce_bucket: int, other_bucket: int, dtype_bytes: int) -> int:
    """Bytes of communication buckets under overlap_comm: 4.5 x (reduce + allgather bucket elements) x dtype bytes.

    What they hold (DeepSpeed 0.19): stage 1/2 (stage_1_and_2.py) fill `reduce_bucket_size`-element ipg buffers
    with gradients, a second one while the first is being reduced (overlap_comm), plus the flattened gradients
    being reduced and the allgather of updated partitions in `allgather_bucket_size` chunks; stage 3 (stage3.py)
    allocates a `reduce_bucket_size` ipg buffer per dtype and prefetches up to `stage3_prefetch_bucket_size`
    parameter elements. The 4.5 factor is the transformers DeepSpeed guide's rule of thumb for all of this
    ("5e8 x 2 bytes x 2 x 4.5 = 9 GB" for two 5e8 buckets in 16-bit); zerokit uses the prefetch bucket in place
    of the allgather bucket at stage 3. An estimate for a warning, not an allocator model.
    """
    return 9 * (reduce_bucket + other_bucket) * dtype_bytes // 2  # whole numbers: exact for any int


def sum_allreduce_zero3(doc: Document, ctx: Context) -> Iterator[Hit]:
    """DeepSpeedConfig._do_error_check: gradient_allreduce_op='sum' is not supported with ZeRO stage 3, ZenFlow or
    DeepCompile."""
    op = doc.data.get("gradient_allreduce_op")
    if not (isinstance(op, str) and op.lower() == "sum"):
        return
    compile_ = _section(doc.data, "compile")
    with_ = ("ZeRO stage 3" if _stage(doc.data) == 3 else
             "ZenFlow" if isinstance(_zero(doc.data).get("zenflow"), dict) else
             "DeepCompile" if _is_true(compile_.get("deepcompile")) else None)
    if with_:
        yield Hit(("gradient_allreduce_op",), f"gradient_allreduce_op 'sum' is not supported with {with_}; "
                  "DeepSpeed refuses it at initialize; use 'mean' (scale the loss instead)", "mean")


def gradient_prescaling(doc: Document, ctx: Context) -> Iterator[Hit]:
    """How DeepSpeed averages gradients with gradient_allreduce_op mean. With reduce_scatter (its default)
    DeepSpeedZeroOptimizer at stage 2 and DeepSpeedZeroOptimizer_Stage3 assert at initialize that
    gradient_predivide_factor is 1.0 and prescale_gradients is off ('not yet supported'). Elsewhere the factor
    divides: engine.allreduce_bucket (stage 0) and stage_1_and_2 allreduce_bucket (reduce_scatter false) compute
    1. / factor, ZeroDivisionError at the first step; stage 3 divides the gradient buffer by it, so every gradient is
    inf or NaN and every step is skipped as an overflow. At stage 1 with reduce_scatter the average ignores it."""
    cfg = doc.data
    op = cfg.get("gradient_allreduce_op", "mean")
    stage = _stage(cfg)
    if (isinstance(op, str) and op.lower() == "sum") or stage is None:
        return  # sum: no averaging, the factor is never read (ZK308 has stage 3)
    reduce_scatter = _zero(cfg).get("reduce_scatter", True) is not False
    factor = cfg.get("gradient_predivide_factor", 1.0)
    number = isinstance(factor, (int, float)) and not isinstance(factor, bool)  # ZK103 reports the rest
    asserts = stage in (2, 3) and reduce_scatter
    if number and asserts and factor != 1:
        yield Hit(("gradient_predivide_factor",), f"gradient_predivide_factor {factor:g} with ZeRO stage {stage} and "
                  "reduce_scatter (its default): DeepSpeed asserts at initialize that it is 1.0 ('not yet "
                  "supported'); remove it, or set zero_optimization.reduce_scatter to false", "1.0")
    elif number and factor == 0 and not (stage == 1 and reduce_scatter):
        effect = ("divides the gradients by it before the allreduce, so every gradient is inf or NaN and every step "
                  "is skipped as an overflow" if stage == 3 else
                  "averages the gradients with 1 / gradient_predivide_factor, so the first step raises "
                  "ZeroDivisionError")
        yield Hit(("gradient_predivide_factor",), f"gradient_predivide_factor 0: DeepSpeed {effect}; remove it (1.0 "
                  "is DeepSpeed's default)", "1.0")
    if asserts and _is_true(cfg.get("prescale_gradients")):
        yield Hit(("prescale_gradients",), f"prescale_gradients with ZeRO stage {stage} and reduce_scatter (its "
                  "default): DeepSpeed asserts at initialize that pre-scaling is off ('not yet supported'); remove "
                  "it, or set zero_optimization.reduce_scatter to false", "false")


GATHER_KEYS = ("stage3_gather_16bit_weights_on_model_save", "gather_16bit_weights_on_model_save",
               "stage3_gather_fp16_weights_on_model_save")
"""The names DeepSpeedZeroConfig reads gather_16bit_weights_on_model_save under."""


def zero3_no_16bit_save(doc: Document, ctx: Context) -> Iterator[Hit]:
    """ZeRO-3 partitions weights: without gather_16bit_weights_on_model_save, save_16bit_model writes no weights.
    AutoTP shards them at any stage: behind Accelerate (the HF Trainer's path too) get_state_dict raises
    ValueError without the flag, and the Trainer's save_model falls back to the sharded checkpoint."""
    zero = _zero(doc.data)
    stage = _stage(doc.data)
    tp = _autotp_size(doc.data)
    autotp = tp > 1 and stage != 3 and ctx.target in ("trainer", "accelerate")
    if stage != 3 and not autotp:
        return
    if doc.syntax != "accelerate" and any(zero.get(k) is False for k in GATHER_KEYS):
        return  # written false: the user chose sharded checkpoints only (`accelerate config` writes false itself)
    if any(zero.get(k) is True or zero.get(k) == AUTO for k in GATHER_KEYS):
        return
    if autotp:
        yield Hit(("tensor_parallel", "autotp_size"), f"AutoTP (autotp_size {tp}) shards the weights, and without "
                  f"zero_optimization.stage3_gather_16bit_weights_on_model_save {TARGET_NAMES[ctx.target]} cannot "
                  "save them whole: Accelerate's get_state_dict raises ValueError, the Trainer's save_model writes "
                  "only the sharded checkpoint; set zero_optimization.stage3_gather_16bit_weights_on_model_save to "
                  "true (read at any ZeRO stage)", "zero_optimization.stage3_gather_16bit_weights_on_model_save")
    elif ctx.target == "deepspeed":  # a plain script may save with save_checkpoint, or gather the weights itself
        yield Hit(("zero_optimization", "stage"), "ZeRO-3 without stage3_gather_16bit_weights_on_model_save: "
                  "engine.save_16bit_model() saves nothing (it logs at info level and returns False); if your script "
                  "saves with it, set zero_optimization.stage3_gather_16bit_weights_on_model_save to true "
                  "(save_checkpoint is unaffected)", "zero_optimization.stage3_gather_16bit_weights_on_model_save")
    else:
        yield Hit(("zero_optimization", "stage"), "ZeRO-3 without stage3_gather_16bit_weights_on_model_save: "
                  f"{TARGET_NAMES[ctx.target]}'s save_model writes no usable weights, only the sharded checkpoint; set "
                  "zero_optimization.stage3_gather_16bit_weights_on_model_save to true",
                  "zero_optimization.stage3_gather_16bit_weights_on_model_save")


# ---------------------------------------------------------------- optimizer and scheduler


def adam_is_adamw(doc: Document, ctx: Context) -> Iterator[Hit]:
    """engine._configure_basic_optimizer: adam_w_mode defaults to true, so "type": "Adam" with weight decay runs
    AdamW's decoupled decay, not Adam's L2 term, without a word."""
    opt = _section(doc.data, "optimizer")
    params = _section(opt, "params")
    decay = params.get("weight_decay")
    if (isinstance(opt.get("type"), str) and opt["type"].lower() == "adam" and "adam_w_mode" not in params
            and isinstance(decay, (int, float)) and not isinstance(decay, bool) and decay > 0):
        yield Hit(("optimizer", "type"), f"optimizer type 'Adam' with weight_decay {decay} runs AdamW (decoupled "
                  "weight decay): DeepSpeed's adam_w_mode defaults to true; write \"type\": \"AdamW\" to say so, or "
                  "\"adam_w_mode\": false in params for Adam's L2 decay", "AdamW")


def unknown_optimizer(doc: Document, ctx: Context) -> Iterator[Hit]:
    """DeepSpeed lower-cases its own names; anything else goes to getattr(torch.optim, name) at initialize."""
    name = _section(doc.data, "optimizer").get("type")
    if not isinstance(name, str) or name == AUTO:
        return
    if name.lower() in DEEPSPEED_OPTIMIZERS or name in TORCH_OPTIMIZERS:
        return
    known = list(DEEPSPEED_OPTIMIZERS) + list(TORCH_OPTIMIZERS)
    guess = schema_mod._did_you_mean(name, known)
    yield Hit(("optimizer", "type"), f"optimizer type '{name}' is neither a DeepSpeed optimizer ("
              + ", ".join(DEEPSPEED_OPTIMIZERS) + ") nor a torch.optim class (case-sensitive): initialize fails with "
              "'not a supported DeepSpeed Optimizer'"
              + (f" (did you mean '{guess}'?)" if guess else ""), guess)


def untested_zero_optimizer(doc: Document, ctx: Context) -> Iterator[Hit]:
    """engine._do_optimizer_sanity_check asserts zero_allow_untested_optimizer for optimizers ZeRO has not tested."""
    cfg = doc.data
    name = _section(cfg, "optimizer").get("type")
    stage = _stage(cfg)
    if not isinstance(name, str) or not stage or cfg.get("zero_allow_untested_optimizer") is True:
        return
    if name in TORCH_OPTIMIZERS and name not in ZERO_TESTED or name.lower() in ("lamb", "muadam", "muadamw", "musgd"):
        yield Hit(("optimizer", "type"), f"ZeRO has not been tested with optimizer '{name}': initialize stops with "
                  "'You are using an untested ZeRO Optimizer'; set \"zero_allow_untested_optimizer\": true or use "
                  "AdamW", "zero_allow_untested_optimizer")


def offload_client_optimizer(doc: Document, ctx: Context) -> Iterator[Hit]:
    """With optimizer offload and no optimizer section, engine._configure_optimizer raises ZeRORuntimeException on
    a client optimizer that is not DeepSpeedCPUAdam / DeepSpeedCPULion (zero_force_ds_cpu_optimizer, default true).
    Behind the HF Trainer (transformers deepspeed_optim_sched: no "optimizer" -> trainer.create_optimizer(), a torch
    AdamW) and Accelerate, Accelerator._prepare_deepspeed swaps a torch optimizer for DeepSpeedCPUAdam
    (map_pytorch_optim_to_deepspeed), but only when it finds zero_optimization.offload_optimizer.device: the
    deprecated `cpu_offload: true`, which DeepSpeed still reads as optimizer offload, gets the raise."""
    cfg = doc.data
    dev, key = _offload(cfg, "optimizer")
    if dev not in ("cpu", "nvme") or "optimizer" in cfg or cfg.get("zero_force_ds_cpu_optimizer", True) is False:
        return
    if ctx.target == "deepspeed":
        yield Hit(key, "optimizer offload without an 'optimizer' section: the optimizer you pass to "
                  "deepspeed.initialize must be DeepSpeedCPUAdam or DeepSpeedCPULion (a torch optimizer raises "
                  "ZeRORuntimeException); add "
                  "an optimizer section, or set zero_force_ds_cpu_optimizer to false", "optimizer")
    elif key[-1] == "cpu_offload":
        instead = "write \"offload_optimizer\": {\"device\": \"cpu\"} in its place, or add an \"optimizer\" section"
        if ctx.target == "trainer":
            yield Hit(key, "zero_optimization.cpu_offload with no 'optimizer' section: the HF Trainer builds its "
                      "own optimizer (torch AdamW by default), which Accelerate swaps for DeepSpeedCPUAdam only when it finds "
                      "offload_optimizer.device, not the deprecated cpu_offload that DeepSpeed still offloads by, so "
                      f"initialize raises ZeRORuntimeException; {instead} (\"type\": \"AdamW\" with \"auto\" params, "
                      "which the Trainer fills)", "zero_optimization.offload_optimizer", ERROR)
        else:
            yield Hit(key, "zero_optimization.cpu_offload with no 'optimizer' section: Accelerate swaps the torch "
                      "optimizer you prepare for DeepSpeedCPUAdam only when it finds offload_optimizer.device, not "
                      "the deprecated cpu_offload that DeepSpeed still offloads by, and anything but DeepSpeedCPUAdam "
                      f"or DeepSpeedCPULion raises ZeRORuntimeException at initialize; {instead} (\"type\": "
                      "\"AdamW\", \"params\": {\"lr\": \"auto\", \"weight_decay\": \"auto\"}) and prepare a "
                      "DummyOptim", "zero_optimization.offload_optimizer")


def optimizer_lr_type(doc: Document, ctx: Context) -> Iterator[Hit]:
    """engine._configure_basic_optimizer hands optimizer.params to the optimizer's constructor as written: torch's
    optimizers compare lr with 0.0 (TypeError at initialize), DeepSpeed's FusedAdam hands it to its kernel
    (TypeError at the first step). A numeric string fails too; behind the HF Trainer it also mismatches
    learning_rate (HfTrainerDeepSpeedConfig.fill_match compares the written value)."""
    params = _section(doc.data, "optimizer").get("params")
    if not isinstance(params, dict) or "lr" not in params:
        return
    lr = params["lr"]
    if lr == AUTO or isinstance(lr, (int, float)):  # a bool too: torch reads true as 1.0
        return
    try:
        number = float(lr) if isinstance(lr, str) else math.nan
    except ValueError:
        number = math.nan
    written = json.dumps(number) if math.isfinite(number) else None
    if fills(ctx.target, "optimizer.params.lr"):
        fix, how = AUTO, (f"write \"auto\" ({TARGET_NAMES[ctx.target]} fills it with the learning rate)"
                          + (f" or the number {written}" if written else " or a number"))
    else:
        fix, how = written, f"write the number {written}" if written else "write a number, e.g. 1e-5"
    yield Hit(("optimizer", "params", "lr"), f"optimizer.params.lr is {schema_mod._show(lr)}, not a number: DeepSpeed "
              "hands it to the optimizer as written, which fails with TypeError (torch optimizers at initialize, "
              f"DeepSpeed's fused Adam at the first step); {how}", fix)


def optimizer_params(doc: Document, ctx: Context) -> Iterator[Hit]:
    """engine._configure_basic_optimizer hands optimizer.params, less the keys it reads itself (ADAM_OWN_PARAMS for
    Adam), to the optimizer's constructor as keywords: for "Adam"/"AdamW" DeepSpeed's FusedAdam, or DeepSpeedCPUAdam
    with optimizer offload; for "Lion" FusedLion or DeepSpeedCPULion (OPTIMIZER_KEYWORDS). A keyword the class does
    not take is a TypeError at initialize. With torch_adam: true the class is torch's, whose keywords zerokit does not
    list (it imports without torch): not checked."""
    opt = _section(doc.data, "optimizer")
    name, params = opt.get("type"), opt.get("params")
    if not isinstance(name, str) or name.lower() not in OPTIMIZER_KEYWORDS or not isinstance(params, dict):
        return
    if name.lower() in ("adam", "adamw") and params.get("torch_adam") not in (None, False):
        return
    (plain, plain_taken), (offloaded, offloaded_taken), own = OPTIMIZER_KEYWORDS[name.lower()]
    device = _offload(doc.data, "optimizer")[0]
    cpu = device in ("cpu", "nvme")
    cls, taken = (offloaded, offloaded_taken) if cpu else (plain, plain_taken)
    if device == AUTO:  # the consumer fills the device: only what neither class takes
        cls, cpu, taken = f"{plain} (or {offloaded})", False, tuple(dict.fromkeys(plain_taken + offloaded_taken))
    for key in params:
        if key in taken or key in own or key == "max_grad_norm":  # max_grad_norm: ZK404
            continue
        if key in plain_taken + offloaded_taken:  # set_grad_none with optimizer offload, Lion's reverse
            why = (f"{cls} (" + ("the optimizer offload's" if cpu else f"DeepSpeed's {name} without optimizer offload")
                   + f") has no keyword '{key}'")
        elif key == "adamw_mode" and cpu and own:  # get_optimizer_configuration passes it from adam_w_mode
            why = f"DeepSpeed passes {cls} adamw_mode itself (from params.adam_w_mode), so it would be given twice"
        else:
            why = f"'{key}' is not a keyword of {cls}, DeepSpeed's {name}" + (" with optimizer offload" if cpu else "")
        guess = schema_mod._did_you_mean(key, list(taken) + list(own))
        if key in ("beta1", "beta2", "adam_beta1", "adam_beta2"):
            guess = "betas"
        yield Hit(("optimizer", "params", key), f"{why}: initialize fails with TypeError (unexpected keyword "
                  f"argument); it takes {', '.join(taken)}"
                  + (f" (and DeepSpeed reads {', '.join(own)} itself)" if own else "")
                  + (" (did you mean 'betas'? one list, [beta1, beta2])" if guess == "betas" else
                     f" (did you mean '{guess}'?)" if guess else ""), guess)


def max_grad_norm_param(doc: Document, ctx: Context) -> Iterator[Hit]:
    """engine._configure_basic_optimizer raises on optimizer.params.max_grad_norm; clipping is gradient_clipping."""
    params = _section(doc.data, "optimizer").get("params")
    if isinstance(params, dict) and "max_grad_norm" in params:
        yield Hit(("optimizer", "params", "max_grad_norm"), "'max_grad_norm' is not an optimizer parameter in "
                  "DeepSpeed: initialize raises ValueError; move the value to top-level gradient_clipping",
                  "gradient_clipping")


def unknown_scheduler(doc: Document, ctx: Context) -> Iterator[Hit]:
    """engine._scheduler_from_config: lr_schedules by name, else torch.optim.lr_scheduler, else an assertion."""
    name = _section(doc.data, "scheduler").get("type")
    if not isinstance(name, str) or name == AUTO or name in DEEPSPEED_SCHEDULERS or name in TORCH_SCHEDULERS:
        return
    guess = schema_mod._did_you_mean(name, list(DEEPSPEED_SCHEDULERS) + list(TORCH_SCHEDULERS))
    yield Hit(("scheduler", "type"), f"scheduler type '{name}' is unknown: initialize fails with 'DeepSpeed does not "
              f"recognize LR scheduler'; use one of {', '.join(DEEPSPEED_SCHEDULERS)} or a torch.optim.lr_scheduler "
              "class" + (f" (did you mean '{guess}'?)" if guess else ""), guess)


def scheduler_params(doc: Document, ctx: Context) -> Iterator[Hit]:
    """engine._scheduler_from_config calls scheduler(optimizer, **params): a wrong or missing keyword is a TypeError."""
    sched = _section(doc.data, "scheduler")
    name, params = sched.get("type"), sched.get("params", {})
    if isinstance(name, str) and name != AUTO and sched.get("params") is None:
        # runtime/config.get_scheduler_params gives None without params, and engine._scheduler_from_config calls
        # scheduler(optimizer, **None); neither the HF Trainer nor Accelerate adds params (they fill written keys)
        yield Hit(("scheduler",), f"scheduler {name} has no params: initialize fails with TypeError (argument after ** "
                  'must be a mapping); add "params": {...} (an empty {} takes the scheduler\'s defaults)',
                  "scheduler.params")
        return
    if not isinstance(name, str) or name not in DEEPSPEED_SCHEDULER_PARAMS or not isinstance(params, dict):
        return
    accepted = DEEPSPEED_SCHEDULER_PARAMS[name]
    for key in params:
        if key not in accepted:
            guess = schema_mod._did_you_mean(key, list(accepted))
            yield Hit(("scheduler", "params", key), f"{name} has no parameter '{key}': initialize fails with "
                      f"TypeError (unexpected keyword); it takes {', '.join(accepted)}"
                      + (f" (did you mean '{guess}'?)" if guess else ""), guess)
    for key in DEEPSPEED_SCHEDULER_REQUIRED.get(name, ()):
        if key not in params:
            yield Hit(("scheduler", "params"), f"{name} needs scheduler.params.{key}: without it initialize fails "
                      "with TypeError (missing argument)" + ("; write \"auto\" to let the Trainer fill it"
                                                               if fills(ctx.target, f"scheduler.params.{key}") else ""),
                      f"scheduler.params.{key}")


def _warmup_params(doc: Document, key: str) -> tuple[str, dict] | None:
    """(scheduler type, params) of a Warmup* scheduler whose params give `key`, else None."""
    sched = _section(doc.data, "scheduler")
    params = sched.get("params")
    if sched.get("type") not in WARMUP_SCHEDULERS or not isinstance(params, dict) or key not in params:
        return None
    return sched["type"], params


def _positive_int_fix(value: Any, fallback: str) -> str | None:
    """None where a scheduler's step count is fine (a JSON integer above 0, or "auto", which ZK501 judges), else
    the value to write: the whole number a float like 100.0 names, or `fallback`. The schedulers test
    isinstance(value, int), so 100.0 raises too."""
    if value == AUTO or (isinstance(value, int) and not isinstance(value, bool) and value > 0):
        return None
    whole = _int(value)
    return str(whole) if whole is not None and whole > 0 else fallback


def scheduler_warmup(doc: Document, ctx: Context) -> Iterator[Hit]:
    """WarmupLR and WarmupCosineLR raise ValueError unless warmup_num_steps is a positive int (a JSON 100.0 too)."""
    found = _warmup_params(doc, "warmup_num_steps")
    if found is None:
        return
    name, params = found
    steps = params["warmup_num_steps"]
    fix = _positive_int_fix(steps, "1")
    if fix is not None:
        yield Hit(("scheduler", "params", "warmup_num_steps"), f"warmup_num_steps must be a positive integer, got "
                  f"{json.dumps(steps)}: {name} raises ValueError at initialize; write {fix}", fix)


def scheduler_step_size(doc: Document, ctx: Context) -> Iterator[Hit]:
    """lr_schedules.py raises ValueError at initialize: LRRangeTest unless lr_range_test_step_size is a positive int
    (a JSON 2000.0 too); OneCycle unless cycle_first_step_size is positive and cycle_second_step_size not negative."""
    sched = _section(doc.data, "scheduler")
    params = sched.get("params")
    if not isinstance(params, dict):
        return
    name = sched.get("type")
    if name == "LRRangeTest" and "lr_range_test_step_size" in params:
        steps = params["lr_range_test_step_size"]
        fix = _positive_int_fix(steps, "2000")
        if fix is not None:
            yield Hit(("scheduler", "params", "lr_range_test_step_size"), "lr_range_test_step_size must be a positive "
                      f"integer, got {json.dumps(steps)}: LRRangeTest raises ValueError at initialize; write {fix}",
                      fix)
    elif name == "OneCycle":
        for key, positive in (("cycle_first_step_size", True), ("cycle_second_step_size", False)):
            value = params.get(key)
            if value is None or value == AUTO:
                continue  # None: the second half mirrors the first
            try:
                number = float(value)  # as OneCycle._initialize_cycle reads it (a numeric string too)
            except (TypeError, ValueError):
                number = math.nan
            if not math.isfinite(number) or number < 0 or (positive and number == 0):
                yield Hit(("scheduler", "params", key), f"{key} must be {'positive' if positive else 'zero or more'}, "
                          f"got {json.dumps(value)}: OneCycle raises ValueError at initialize; write the steps "
                          "of that half cycle (2000 is DeepSpeed's default)", "2000")


def scheduler_warmup_past_total(doc: Document, ctx: Context) -> Iterator[Hit]:
    """WarmupDecayLR/WarmupCosineLR with the warmup longer than the run: DeepSpeed logs a warning and trains on; the
    rate never reaches its peak before the schedule says it is over."""
    found = _warmup_params(doc, "total_num_steps")  # WarmupLR has no total
    if found is None:
        return
    params = found[1]
    warmup, total = _int(params.get("warmup_num_steps", 1000)), _int(params["total_num_steps"])
    if warmup is not None and total is not None and 0 < total < warmup:
        yield Hit(("scheduler", "params", "warmup_num_steps"), f"warmup_num_steps {warmup} is more than "
                  f"total_num_steps {total}: the warmup never ends before the schedule does, and DeepSpeed only logs a "
                  "warning; lower warmup_num_steps", str(total))


def scheduler_total_steps(doc: Document, ctx: Context) -> Iterator[Hit]:
    """WarmupDecayLR and WarmupCosineLR compare total_num_steps with warmup_num_steps at construction (a TypeError
    for anything but a number) and decay over it: at 0 or below the schedule is over when the warmup ends, and the
    rate sits at its floor from then on (DeepSpeed logs only ZK409's warning)."""
    found = _warmup_params(doc, "total_num_steps")
    if found is None:
        return
    name, params = found
    total = params["total_num_steps"]
    if total == AUTO:
        return
    key = ("scheduler", "params", "total_num_steps")
    auto = (f" or \"auto\" ({TARGET_NAMES[ctx.target]} fills it)"
            if fills(ctx.target, "scheduler.params.total_num_steps") else "")
    if isinstance(total, bool) or not isinstance(total, (int, float)):
        yield Hit(key, f"total_num_steps must be the run's number of optimizer steps, got {schema_mod._show(total)}: "
                  f"{name} compares it with warmup_num_steps at initialize, a TypeError; write the steps{auto}", None)
    elif not math.isfinite(total):
        yield Hit(key, f"total_num_steps is {total}: {name} decays the rate over a number of steps; write the run's "
                  f"optimizer steps{auto}", None)
    elif total <= 0:
        yield Hit(key, f"total_num_steps {total}: {name} decays the rate over it, so from the end of the warmup on the "
                  "rate sits at the schedule's floor (warmup_min_lr; cos_min_ratio for WarmupCosineLR) and the run "
                  f"stops learning; DeepSpeed only logs a warning; write the run's optimizer steps{auto}", None)


def scheduler_warmup_type(doc: Document, ctx: Context) -> Iterator[Hit]:
    """An unknown warmup_type only logs a warning and warms up logarithmically (lr_schedules.py)."""
    found = _warmup_params(doc, "warmup_type")
    if found is None:
        return
    kind = found[1]["warmup_type"]
    if kind in WARMUP_TYPES:
        return
    guess = schema_mod._did_you_mean(kind, list(WARMUP_TYPES)) if isinstance(kind, str) else None
    yield Hit(("scheduler", "params", "warmup_type"), f"warmup_type {json.dumps(kind)} is not 'log' or 'linear': "
              "DeepSpeed logs a warning and warms up logarithmically; write \"linear\" (the HF Trainer's shape) or "
              "\"log\"", guess or "linear")


def compute_grad_norm_stage(doc: Document, ctx: Context) -> Iterator[Hit]:
    """DeepSpeedZeroConfig.compute_grad_norm_valid: false is supported only with ZeRO stage 1 or 2."""
    zero = _zero(doc.data)
    stage = _stage(doc.data)
    if zero.get("compute_grad_norm") is False and stage in (0, 3):
        yield Hit(("zero_optimization", "compute_grad_norm"), f"compute_grad_norm false is supported only with ZeRO "
                  f"stage 1 or 2 (this is stage {stage}); DeepSpeed refuses the config; remove it", "true")


def compute_grad_norm_off(doc: Document, ctx: Context) -> Iterator[Hit]:
    """DeepSpeedZeroOptimizer (stage 1/2) refuses compute_grad_norm false beside clipping, optimizer offload or
    ZenFlow, and the engine beside ZeRO-1 with bf16 parameters and fp32 gradient accumulation."""
    cfg = doc.data
    zero = _zero(cfg)
    if zero.get("compute_grad_norm") is not False or _stage(cfg) not in (1, 2):
        return
    clip = cfg.get("gradient_clipping", GRADIENT_CLIPPING_DEFAULT)
    if clip == AUTO or (isinstance(clip, (int, float)) and not isinstance(clip, bool) and clip > 0):
        got = ("gradient_clipping \"auto\" (the Trainer fills max_grad_norm, 1.0 unless set)" if clip == AUTO else
               f"gradient_clipping {clip}" if "gradient_clipping" in cfg else
               f"DeepSpeed's default gradient_clipping {GRADIENT_CLIPPING_DEFAULT}")
        yield Hit(("zero_optimization", "compute_grad_norm"), f"compute_grad_norm false with {got}: clipping needs "
                  "the norm, and DeepSpeed raises ValueError at initialize; set gradient_clipping to 0 (max_grad_norm "
                  "0 for the Trainer) or remove compute_grad_norm", "gradient_clipping")
    dev, _ = _offload(cfg, "optimizer")
    if dev in ("cpu", "nvme"):
        yield Hit(("zero_optimization", "compute_grad_norm"), "compute_grad_norm false does not support optimizer "
                  "offload: DeepSpeed raises ValueError at initialize; remove compute_grad_norm or the offload", "true")
    elif (_stage(cfg) == 1 and _model_dtype(cfg) == "bf16" and _data_type(cfg, "grad_accum_dtype") == "fp32"):
        # engine._do_optimizer_sanity_check: that mix trains with the BF16 optimizer, which needs the norm
        yield Hit(("zero_optimization", "compute_grad_norm"), "compute_grad_norm false does not support ZeRO-1 with "
                  "bf16 parameters and fp32 gradient accumulation (data_types.grad_accum_dtype): DeepSpeed raises "
                  "ValueError at initialize; remove compute_grad_norm or grad_accum_dtype", "true")
    if isinstance(zero.get("zenflow"), dict):
        yield Hit(("zero_optimization", "compute_grad_norm"), "compute_grad_norm false does not support ZenFlow "
                  "(zero_optimization.zenflow): DeepSpeed raises ValueError at initialize; remove one of them", "true")


def unmanaged_accumulation(doc: Document, ctx: Context) -> Iterator[Hit]:
    """engine._do_sanity_check asserts at initialize: managed_gradient_accumulation false neither with DeepCompile nor
    with overlap_comm below ZeRO stage 2."""
    cfg = doc.data
    if cfg.get("managed_gradient_accumulation") is not False:
        return
    stage = _stage(cfg)
    if _is_true(_section(cfg, "compile").get("deepcompile")):
        yield Hit(("managed_gradient_accumulation",), "managed_gradient_accumulation false is not supported with "
                  "DeepCompile (compile.deepcompile): DeepSpeed asserts at initialize; remove "
                  "managed_gradient_accumulation or set compile.deepcompile to false", "true")
    elif stage in (0, 1) and _is_true(_zero(cfg).get("overlap_comm")):
        yield Hit(("zero_optimization", "overlap_comm"), f"overlap_comm with managed_gradient_accumulation false "
                  f"needs ZeRO stage 2 or 3: at stage {stage} DeepSpeed asserts at initialize; set "
                  "zero_optimization.overlap_comm to false", "false")


# ---------------------------------------------------------------- DeepCompile and engine.compile()


def _compile(cfg: dict) -> tuple[dict, bool, list[str]]:
    """The compile section, whether DeepCompile is on, and its pass names."""
    sec = _section(cfg, "compile")
    passes = sec.get("passes")
    return sec, _is_true(sec.get("deepcompile")), [p for p in passes if isinstance(p, str)] if isinstance(
        passes, list) else []


def compile_fails(doc: Document, ctx: Context) -> Iterator[Hit]:
    """What engine.compile() raises on, though DeepSpeed starts with the config (engine.py compile,
    get_deepspeed_compile_backend; compile/init_z3.py validates its offloads before it compiles)."""
    cfg = doc.data
    sec, deepcompile, passes = _compile(cfg)
    stage = _stage(cfg)
    with_autotp = sorted({"autosp", "z1", "z3"} & set(passes))
    if deepcompile and "autotp" in passes and with_autotp:
        yield Hit(("compile", "passes"), "compile.passes combines 'autotp' with " + ", ".join(
                  f"'{p}'" for p in with_autotp) + ": engine.compile() raises NotImplementedError (the AutoTP pass "
                  "does not compose yet); keep 'autotp' alone or drop it")
    if _is_true(sec.get("autoep_non_moe")):
        offloaded = [w for w in ("optimizer", "param") if _offload(cfg, w)[0] not in (None, "none")]
        why, other = (("DeepCompile", "set compile.deepcompile to false") if deepcompile else
                      ("ZeRO stage 3", "use ZeRO stage 1 or 2") if stage == 3 else
                      (f"zero_optimization.offload_{offloaded[0]}", "remove the offload") if offloaded else
                      (None, None))
        if why:
            yield Hit(("compile", "autoep_non_moe"), f"compile.autoep_non_moe does not support {why}: "
                      f"engine.compile() raises ValueError; set compile.autoep_non_moe to false, or {other}", "false")
        return  # engine.compile() takes the AutoEP path: DeepCompile's own checks never run
    if not deepcompile or stage != 3 or "autosp" in passes or "autotp" in passes:
        return
    zero = _zero(cfg)
    both_cpu = all(isinstance(zero.get(f"offload_{w}"), dict) and zero[f"offload_{w}"].get("device") == "cpu"
                   for w in ("param", "optimizer"))  # get_deepcompile_backend turns offload_parameters on then
    if _is_true(sec.get("offload_activation")):
        other = ("offload_opt_states" if _is_true(sec.get("offload_opt_states")) else
                 "offload_parameters" if _is_true(sec.get("offload_parameters")) else
                 "offload_parameters (DeepCompile sets it with offload_param and offload_optimizer both on cpu)"
                 if both_cpu else None)
        if other:
            yield Hit(("compile", "offload_activation"), f"compile.offload_activation cannot be combined with {other}: "
                      "engine.compile() raises ValueError; keep one offloading target", "false")
    if _is_true(sec.get("offload_opt_states")) and _offload(cfg, "optimizer")[0] in ("cpu", "nvme"):
        yield Hit(("compile", "offload_opt_states"), "compile.offload_opt_states cannot be combined with "
                  "zero_optimization.offload_optimizer on cpu or nvme (both manage the optimizer states): "
                  "engine.compile() raises ValueError; enable one of them", "false")


def compile_ignored(doc: Document, ctx: Context) -> Iterator[Hit]:
    """compile settings engine.compile() passes over without an error, compiling with plain torch.compile: every key
    but autoep_non_moe is read on the DeepCompile path alone, which needs ZeRO stage 1-3 (AutoSP: 0 or 1; AutoTP:
    tensor_parallel.autotp_size above 1), each fallback logged at info level."""
    cfg = doc.data
    sec, deepcompile, passes = _compile(cfg)
    if not deepcompile:
        props = (schema_mod.node_at(("compile",)) or {}).get("properties", {})
        for key, value in sec.items():
            if key in ("deepcompile", "autoep_non_moe") or key not in props or value == AUTO:
                continue
            if value != props[key].get("default") and not (key == "passes" and value == []):
                yield Hit(("compile", key), f"compile.{key} is a DeepCompile setting and compile.deepcompile is not "
                          "true: DeepSpeed ignores it (engine.compile() runs plain torch.compile); set "
                          f"compile.deepcompile to true or delete compile.{key}", "compile.deepcompile")
        return
    if _is_true(sec.get("autoep_non_moe")):
        return  # compile_fails reports the clash
    stage = _stage(cfg)
    if "autosp" in passes:
        if stage in (2, 3):
            yield Hit(("compile", "passes"), f"the AutoSP pass does not compose with ZeRO stage {stage}: "
                      "engine.compile() falls back to plain torch.compile without sequence parallelism; use ZeRO "
                      "stage 0 or 1", "zero_optimization.stage")
    elif "autotp" in passes:
        tp = _section(cfg, "tensor_parallel").get("autotp_size", 0)
        if isinstance(tp, (int, float)) and not isinstance(tp, bool) and tp <= 1:
            yield Hit(("compile", "passes"), "the AutoTP pass needs tensor_parallel.autotp_size above 1: "
                      "engine.compile() falls back to plain torch.compile; set tensor_parallel.autotp_size",
                      "tensor_parallel.autotp_size")
    elif stage == 0:
        yield Hit(("compile", "deepcompile"), "DeepCompile needs ZeRO stage 1, 2 or 3: at stage 0 engine.compile() "
                  "falls back to plain torch.compile; set zero_optimization.stage", "zero_optimization.stage")


# ---------------------------------------------------------------- hybrid engine


def hybrid_engine_tp(doc: Document, ctx: Context) -> Iterator[Hit]:
    """DeepSpeedHybridEngine (chosen by deepspeed.initialize when hybrid_engine.enabled) gives each inference
    container inference_tp_size as its tensor-parallel degree and, without an mpu, groups the ranks in blocks of
    it (runtime/hybrid_engine.py create_inference_module). A degree of 0, or blocks that leave ranks out, fail as
    the engine is built, for any model DeepSpeed has an inference policy for (module_inject/replace_policy.py: Llama,
    GPT-NeoX, BLOOM, ...); other models never read the key. A negative degree passes HybridEngineConfig (a bare int,
    where max_out_tokens beside it is gt=0) and create_inference_module (no groups, as for 1), but
    new_inference_container still hands it to every container: create_ds_model_config asserts heads % degree == 0,
    and past that the inference layers take heads // degree, a negative number, as their heads per rank
    (ops/transformer/inference/ds_attention.py)."""
    sec = _section(doc.data, "hybrid_engine")
    tp = _int(sec.get("inference_tp_size"))
    if sec.get("enabled") is not True or tp is None:
        return
    key = ("hybrid_engine", "inference_tp_size")
    if tp == 0:
        yield Hit(key, "hybrid_engine.inference_tp_size 0: deepspeed.initialize raises ZeroDivisionError building the "
                  "hybrid engine's inference containers (the heads are divided among 0 ranks); write 1 for no "
                  "inference tensor parallelism", "1")
    elif tp < 0:
        yield Hit(key, f"hybrid_engine.inference_tp_size {tp} is negative: DeepSpeed accepts it but hands it to the "
                  "hybrid engine's inference containers as their degree (an AssertionError at deepspeed.initialize "
                  "unless it divides the attention heads, negative heads per rank if it does); write 1 for no "
                  "inference tensor parallelism", "1")
    elif tp > 1 and ctx.world_size is not None and ctx.world_size % tp:
        w = ctx.world_size
        left = "every rank" if tp > w else f"the {w % tp} of {w} ranks left over"
        yield Hit(key, f"hybrid_engine.inference_tp_size {tp} does not divide the world size {w}: the hybrid engine "
                  f"groups the ranks in blocks of {tp}, and {left} get no group (AttributeError: no attribute "
                  "'mp_group' at deepspeed.initialize, unless an mpu is passed); use a divisor of the world size")


# ---------------------------------------------------------------- "auto"


def _auto_leaves(node: Any, path: tuple) -> Iterator[tuple]:
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _auto_leaves(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _auto_leaves(v, path + (i,))
    elif node == AUTO:
        yield path


def _current_name(key: tuple) -> str | None:
    """The dotted name of `key` with its deprecated section renamed as DeepSpeed's config says (bfloat16.enabled ->
    bf16.enabled), or None where no section on its path is deprecated."""
    for i in range(1, len(key)):
        node = schema_mod.node_at(key[:i]) or {}
        if node.get("deprecated") and node.get("x-replaced-by"):
            return dotted(key[:i - 1] + (node["x-replaced-by"],) + key[i:])
    return None


def unfilled_auto(doc: Document, ctx: Context) -> Iterator[Hit]:
    """'auto' is a placeholder for HF Trainer / Accelerate (zerokit.autofill); DeepSpeed itself never fills it."""
    for key in _auto_leaves(doc.data, ()):
        name = dotted(key)
        node = schema_mod.node_at(key)
        if node is not None and node.get("default") == AUTO:
            # a value DeepSpeed itself understands (data_types.keep_in_fp32_modules, pipeline.stages, ...), but
            # Accelerate's deepspeed_config_process (the Trainer's prepare too) fills every "auto" leaf it meets
            # and raises on one it has no value for
            if ctx.target != "deepspeed" and not fills(ctx.target, name) and isinstance(key[-1], str):
                yield Hit(key, f"'{name}' is \"auto\", DeepSpeed's own default, but {TARGET_NAMES[ctx.target]} "
                          f"stops at prepare on it (ValueError: `{name}` not found in kwargs, from Accelerate's "
                          "fill of \"auto\" values); delete the key: DeepSpeed then takes \"auto\" itself")
            continue
        if fills(ctx.target, name):
            continue
        parent = schema_mod.node_at(key[:1]) or {}
        if ctx.target != "deepspeed":  # accelerate's DeepSpeedPlugin.fill_match, at prepare (the Trainer's too)
            effect = f"Accelerate stops at prepare (ValueError: `{name}` not found in kwargs)"
        else:
            effect = ("DeepSpeed drops it and silently uses its default" if parent.get("x-pydantic")
                      else "DeepSpeed reads the string 'auto' as the value and fails or misbehaves")
        who = TARGET_NAMES[ctx.target]
        if ctx.target == "deepspeed":
            msg = f"'{name}' is \"auto\", which only HF Trainer / Accelerate replace: {effect}; write a value"
        else:
            other = "accelerate" if ctx.target == "trainer" else "trainer"
            also = (f" ({TARGET_NAMES[other]} does fill it)" if fills(other, name) else "")
            msg = f"'{name}' is \"auto\" but {who} does not fill it{also}: {effect}; write a value"
            if key[:1] == ("zero_optimization",) and fills(ctx.target, "zero_optimization.stage3_" + str(key[-1])):
                msg += f", or use the name 'stage3_{key[-1]}' that {who} fills"
            current = _current_name(key)
            if current is not None and fills(ctx.target, current):
                msg += f", or use the current name '{current}', which {who} fills"
        yield Hit(key, msg)


def auto_from_accelerate_defaults(doc: Document, ctx: Context) -> Iterator[Hit]:
    """DeepSpeedPlugin.__post_init__ fills the ZeRO stage, offload devices, NVMe paths and the 16-bit gather flag
    from its own fields, not from the training: the ACCELERATE_DEEPSPEED_* variables `accelerate launch` exports from
    `accelerate config`, else stage 2, no offload, no gathering. The HF Trainer builds the same plugin."""
    if ctx.target not in ("trainer", "accelerate") or doc.syntax == "accelerate":
        return
    for key in _auto_leaves(doc.data, ()):
        name = dotted(key)
        if name in ACCELERATE_PLUGIN_DEFAULTS:
            default = json.dumps(ACCELERATE_PLUGIN_DEFAULTS[name])
            via = ("TrainingArguments(deepspeed=...) hands the config to Accelerate's DeepSpeedPlugin, which"
                   if ctx.target == "trainer" else "Accelerate's DeepSpeedPlugin")
            yield Hit(key, f"'{name}' is \"auto\": {via} fills it with {default} (or what `accelerate config` "
                      "set, under `accelerate launch`), not from the training; write the value you want")


def accelerate_needs_zero_section(doc: Document, ctx: Context) -> Iterator[Hit]:
    """DeepSpeedPlugin: 'Please specify the ZeRO optimization config in the DeepSpeed config.' The HF Trainer builds
    one from TrainingArguments(deepspeed=...) too (transformers' training_args), so both targets need the section, as
    a section: the plugin reads zero_optimization.get(...) (a bare `true` raises AttributeError there)."""
    if ctx.target not in ("accelerate", "trainer") or doc.syntax == "accelerate":
        return
    who = "Accelerate refuses" if ctx.target == "accelerate" else "TrainingArguments(deepspeed=...) refuses"
    zero = doc.data.get("zero_optimization")
    if zero is None:
        yield Hit((), f"{who} a DeepSpeed config without a zero_optimization section; add "
                  "\"zero_optimization\": {\"stage\": ...}", "zero_optimization")
    elif not isinstance(zero, dict):
        yield Hit(("zero_optimization",), f"{who} zero_optimization written as {json.dumps(zero)}: Accelerate's "
                  "DeepSpeedPlugin reads it as a section (AttributeError); write {\"stage\": ...}",
                  '{"stage": 1}' if zero is True else "zero_optimization")


RULES: tuple[Rule, ...] = (
    Rule("ZK100", ERROR, "schema", schema_checks),  # also reports ZK101-ZK105 with their own severities
    Rule("ZK106", ERROR, "duplicate-key", duplicate_keys),
    Rule("ZK107", ERROR, "hjson-behind-hf", hjson_behind_hf),
    Rule("ZK201", ERROR, "batch-size-mismatch", batch_size_mismatch),
    Rule("ZK202", ERROR, "batch-size-missing", batch_size_missing),
    Rule("ZK203", ERROR, "fp16-and-bf16", fp16_and_bf16),
    Rule("ZK204", ERROR, "fp16-dynamic-loss-scale", fp16_loss_scale),
    Rule("ZK208", WARNING, "fp16-static-scale-dynamic-keys", fp16_static_scale_dynamic_keys),
    Rule("ZK209", ERROR, "fp16-hysteresis-below-1", fp16_hysteresis),
    Rule("ZK210", ERROR, "fp16-scale-power-overflow", fp16_scale_power),
    Rule("ZK211", ERROR, "unmanaged-accumulation", unmanaged_accumulation),
    Rule("ZK212", ERROR, "sequence-parallel-behind-hf", sequence_parallel_behind_hf),
    Rule("ZK213", ERROR, "null-batch-behind-hf", null_batch_behind_hf),
    Rule("ZK205", ERROR, "master-weights-need-zero", master_weights_need_zero),
    Rule("ZK206", ERROR, "grad-accum-dtype-without-zero", grad_accum_dtype_without_zero),
    Rule("ZK207", ERROR, "param-dtype-conflict", param_dtype_conflict),
    Rule("ZK301", ERROR, "offload-param-below-stage3", offload_param_below_stage3),
    Rule("ZK302", WARNING, "stage3-key-below-stage3", stage3_keys_below_stage3),
    Rule("ZK311", WARNING, "stage12-key-at-stage3", stage12_keys_at_stage3),
    Rule("ZK316", ERROR, "legacy-stage1", legacy_stage1),
    Rule("ZK317", ERROR, "quantized-initialization", quantized_initialization),
    Rule("ZK303", ERROR, "nvme-without-path", nvme_without_path),
    Rule("ZK304", ERROR, "partial-offload-below-stage3", partial_offload_below_stage3),
    Rule("ZK305", ERROR, "offload-optimizer-stage0", offload_optimizer_stage0),
    Rule("ZK312", ERROR, "nvme-optimizer-below-stage3", nvme_optimizer_below_stage3),
    Rule("ZK306", ERROR, "odd-allgather-bucket", odd_allgather_bucket),
    Rule("ZK307", WARNING, "bucket-memory", bucket_memory),
    Rule("ZK314", ERROR, "bucket-exceeds-gpu", bucket_exceeds_gpu),
    Rule("ZK308", ERROR, "sum-allreduce-zero3", sum_allreduce_zero3),
    Rule("ZK315", ERROR, "gradient-prescaling", gradient_prescaling),
    Rule("ZK309", WARNING, "zero3-no-16bit-save", zero3_no_16bit_save),
    Rule("ZK310", ERROR, "compute-grad-norm-stage", compute_grad_norm_stage),
    Rule("ZK313", ERROR, "compute-grad-norm-off", compute_grad_norm_off),
    Rule("ZK401", ERROR, "unknown-optimizer", unknown_optimizer),
    Rule("ZK402", ERROR, "untested-zero-optimizer", untested_zero_optimizer),
    Rule("ZK403", WARNING, "offload-needs-ds-optimizer", offload_client_optimizer),
    Rule("ZK404", ERROR, "max-grad-norm-param", max_grad_norm_param),
    Rule("ZK413", ERROR, "optimizer-params", optimizer_params),
    Rule("ZK412", ERROR, "optimizer-lr-not-a-number", optimizer_lr_type),
    Rule("ZK405", ERROR, "unknown-scheduler", unknown_scheduler),
    Rule("ZK406", ERROR, "scheduler-params", scheduler_params),
    Rule("ZK407", ERROR, "scheduler-warmup-steps", scheduler_warmup),
    Rule("ZK411", ERROR, "scheduler-step-size", scheduler_step_size),
    Rule("ZK414", ERROR, "scheduler-total-steps", scheduler_total_steps),
    Rule("ZK408", WARNING, "scheduler-warmup-type", scheduler_warmup_type),
    Rule("ZK409", WARNING, "scheduler-warmup-past-total", scheduler_warmup_past_total),
    Rule("ZK410", WARNING, "adam-is-adamw", adam_is_adamw),
    Rule("ZK701", ERROR, "compile-fails", compile_fails),
    Rule("ZK702", WARNING, "compile-ignored", compile_ignored),
    Rule("ZK801", ERROR, "hybrid-engine-tp", hybrid_engine_tp),
    Rule("ZK501", ERROR, "unfilled-auto", unfilled_auto),
    Rule("ZK502", ERROR, "accelerate-needs-zero-section", accelerate_needs_zero_section),
    Rule("ZK503", WARNING, "auto-from-accelerate-defaults", auto_from_accelerate_defaults),
)


def run_rules(doc: Document, ctx: Context, key_names: dict[str, str] | None = None,
              skip: tuple[str, ...] = ()) -> list[Finding]:
    """Every rule over one document, in table order; `key_names` renames synthetic keys (Accelerate YAML)."""
    out: list[Finding] = []
    for rule in RULES:
        if rule.code in skip:
            continue
        for hit in rule.check(doc, ctx):
            line, col = hit.pos or doc.where(hit.key)
            key, message, suggestion = dotted(hit.key), hit.message, hit.suggestion
            if key_names:  # speak the YAML's language: zero_optimization.stage -> deepspeed_config.zero_stage
                key = key_names.get(key, key)
                for synth in sorted(key_names, key=len, reverse=True):
                    if "." in synth:
                        message = message.replace(synth, key_names[synth])
                suggestion = key_names.get(suggestion, suggestion) if suggestion else None
            out.append(Finding(doc.path, line, col, hit.severity or rule.severity, hit.code or rule.code, key,
                               message, suggestion))
    return out

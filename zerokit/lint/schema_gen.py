"""Regenerate `zerokit/data/ds_config.schema.json` from the installed DeepSpeed (a maintainer tool).

    python -m zerokit.lint.schema_gen            # rewrites zerokit/data/ds_config.schema.json

The pydantic-validated sections (zero_optimization, fp16, bf16, monitors, compile, ...) are walked from
DeepSpeed's own models, docstrings included; the sections DeepSpeed parses as plain dicts
(optimizer, scheduler, aio, checkpoint, activation_checkpointing, ...) are described in `DICT_SECTIONS`
below, read off `deepspeed/runtime/config.py`, `constants.py` and the `*_config.py` parsers.
`tests/test_schema.py` keeps the result true. This module imports deepspeed; the lint path never imports it.
"""

from __future__ import annotations

import ast
import enum
import inspect
import json
import sys
import textwrap
import typing
from pathlib import Path

SCHEMA_ID = "https://github.com/zerokit/zerokit/ds_config.schema.json"


def leaf(type_, default=None, description="", **extra) -> dict:
    out = {"type": type_, "description": description}
    if default is not None or extra.pop("null_default", False):
        out["default"] = default
    out.update(extra)
    return out


def section(description: str, props: dict, open_: bool = False, type_="object") -> dict:
    return {"type": type_, "description": description, "properties": props, "additionalProperties": open_}


def free(description: str) -> dict:
    return {"type": "object", "description": description, "additionalProperties": True}


B, I, N, S = "boolean", "integer", "number", "string"
DTYPES = ["fp32", "fp16", "bf16"]
TORCH_DTYPES = ["fp32", "float32", "float", "torch.float32", "fp16", "float16", "half", "torch.float16",
                "bf16", "bfloat16", "torch.bfloat16"]
"""The data_types keys' spellings: the engine resolves them with runtime.config.DtypeEnum, which takes these
(exactly as written: 'BF16' raises ValueError; its int8 fails the engine's dtype checks) -- not only DTYPES."""

DICT_SECTIONS: dict[str, dict] = {
    # null is omitted: runtime/config.py reads the three with param_dict.get(key, None) and derives a None
    # (_set_batch_related_parameters); what the HF Trainer and Accelerate make of a null is rules.null_batch_behind_hf
    "train_batch_size": leaf([I, "null"], None, "Global batch: micro batch x gradient accumulation x data-parallel "
                             "world size. DeepSpeed derives it when omitted or null.", exclusiveMinimum=0),
    "train_micro_batch_size_per_gpu": leaf([I, "null"], None, "Samples per GPU per forward/backward. Derived from "
                                           "train_batch_size / (gradient_accumulation_steps x world size) when omitted "
                                           "or null.", exclusiveMinimum=0),
    "gradient_accumulation_steps": leaf([I, "null"], None, "Micro-batches accumulated before each optimizer step. "
                                        "Derived from the other two when omitted or null.", exclusiveMinimum=0),
    "managed_gradient_accumulation": leaf(B, True, "Let the engine track gradient accumulation boundaries."),
    "steps_per_print": leaf([I, "null"], None, "Print progress every N training steps (null: never).",
                            exclusiveMinimum=0, **{"x-out-of-range": (
                                "DeepSpeed prints when (global_steps + 1) % steps_per_print == 0 (engine.py "
                                "_take_model_step), so 0 raises ZeroDivisionError at the end of the first step; "
                                "write the interval in steps, or null (DeepSpeed's default) to print nothing")}),
    "dump_state": leaf(B, False, "Print the optimizer state after initialization (debugging)."),
    "disable_python_gc": leaf(B, False, "Disable Python's automatic cyclic garbage collector during training."),
    "disable_allgather": leaf(B, False, "Disable allgather (legacy ZeRO stage-1 option)."),
    "communication_data_type": leaf([S, "null"], None, "Dtype of gradient communication; null picks it from "
                                    "the training precision.", enum=DTYPES + [None], **{"x-ignore-case": True}),
    "seq_parallel_communication_data_type": leaf([S, "null"], "fp32", "Dtype of sequence-parallel communication; "
                                                 "null picks it from the training precision, as for "
                                                 "communication_data_type.", enum=DTYPES + [None],
                                                 **{"x-ignore-case": True}),
    "prescale_gradients": leaf(B, False, "Scale gradients before allreduce instead of after."),
    "gradient_predivide_factor": leaf(N, 1.0, "Divide gradients by this factor before allreduce, the rest after."),
    "gradient_allreduce_op": leaf(S, "mean", "Reduction of data-parallel gradients. 'sum' is rejected with "
                                  "ZeRO stage 3, ZenFlow and DeepCompile.", enum=["mean", "sum"],
                                  **{"x-ignore-case": True}),
    "gradient_clipping": leaf(N, 1.0, "Clip gradients to this global norm (0 disables).", minimum=0),
    "wall_clock_breakdown": leaf(B, False, "Time forward/backward/step and print the breakdown."),
    "memory_breakdown": leaf(B, False, "Print memory usage at points of the step (debugging)."),
    "zero_allow_untested_optimizer": leaf(B, False, "Allow ZeRO with an optimizer DeepSpeed has not tested "
                                          "(anything but Adam, AdamW, Adagrad, Lion, Muon)."),
    "zero_force_ds_cpu_optimizer": leaf(B, True, "With optimizer offload, refuse a client optimizer that is not "
                                        "DeepSpeedCPUAdam / DeepSpeedCPULion."),
    "vocabulary_size": leaf([I, "null"], None, "Vocabulary size, only used to warn when not a multiple of 8."),
    "dataloader_drop_last": leaf(B, False, "Drop the last incomplete batch of DeepSpeed's data loader."),
    "use_data_before_expert_parallelism": leaf(B, False, "Order process-group axes data-parallel before "
                                               "expert-parallel."),
    "log_level": leaf([S, "null"], None, "DeepSpeed logger level for the engine (utils/logging.log_levels, any "
                      "case; another word raises ValueError at initialize).",
                      enum=["debug", "info", "warning", "error", "critical", None], **{"x-ignore-case": True}),
    "sequence_parallel_size": leaf(I, 1, "Ulysses sequence-parallel degree; the data-parallel world size is the "
                                   "world size divided by it.", minimum=1),
    "data_parallel_size": leaf(I, None, "Data-parallel degree of the (data_parallel_size, sequence_parallel_size) "
                               "device mesh deepspeed.initialize builds when both are given (their product must be "
                               "the world size); read only beside sequence_parallel_size.", minimum=1),
    "datastates_ckpt": {"description": "DataStates-LLM asynchronous checkpointing settings (any value but false "
                        "enables it).", "type": ["object", "boolean"], "additionalProperties": True},
    "optimizer": section("Optimizer DeepSpeed builds when none is passed to initialize.", {
        "type": leaf(S, None, "Optimizer name: one of DeepSpeed's (adam, adamw, adagrad, lamb, lion, muon, muadam, "
                     "muadamw, musgd; case-insensitive) or a torch.optim class name (case-sensitive)."),
        "params": free("Keyword arguments of the optimizer's constructor (lr, betas, eps, weight_decay, ...)."),
        "legacy_fusion": leaf(B, False, "Legacy fused optimizer kernels."),
    }),
    "scheduler": section("Learning-rate scheduler DeepSpeed builds when none is passed to initialize.", {
        "type": leaf(S, None, "Scheduler name: LRRangeTest, OneCycle, WarmupLR, WarmupDecayLR, WarmupCosineLR, "
                     "or a torch.optim.lr_scheduler class name."),
        "params": free("Keyword arguments of the scheduler's constructor."),
    }),
    "activation_checkpointing": section("DeepSpeed activation checkpointing (deepspeed.checkpointing); "
                                        "HF models use their own gradient checkpointing instead.", {
        "partition_activations": leaf(B, False, "Partition checkpointed activations across model-parallel GPUs."),
        "number_checkpoints": leaf([I, "null"], None, "Number of checkpoints in the model, for "
                                   "contiguous_memory_optimization.", null_default=True),
        "contiguous_memory_optimization": leaf(B, False, "Copy checkpoints into a contiguous buffer."),
        "cpu_checkpointing": leaf(B, False, "Move partitioned activations to CPU (needs partition_activations)."),
        "profile": leaf(B, False, "Time the forward and backward of checkpointed regions."),
        "synchronize_checkpoint_boundary": leaf(B, False, "Synchronize the device at each checkpoint boundary."),
    }),
    "flops_profiler": section("DeepSpeed flops profiler.", {
        "enabled": leaf(B, False, "Run the flops profiler."),
        "recompute_fwd_factor": leaf(N, 0.0, "Share of the forward recomputed by activation checkpointing."),
        "profile_step": leaf(I, 1, "Training step at which to profile."),
        "module_depth": leaf(I, -1, "Depth of the module tree to print (-1: all)."),
        "top_modules": leaf(I, 1, "Number of top modules to print."),
        "detailed": leaf(B, True, "Print the detailed per-module profile."),
        "output_file": leaf([S, "null"], None, "File to write the profile to (null: stdout).", null_default=True),
    }),
    "aio": section("Asynchronous I/O settings for NVMe offload (ZeRO-Infinity); null keeps the defaults "
                   "(swap_tensor/aio_config.get_aio_config).", type_=["object", "null"], props={
        "block_size": leaf(I, 1048576, "I/O block size in bytes.", minimum=1),
        "queue_depth": leaf(I, 8, "I/O queue depth.", minimum=1),
        "intra_op_parallelism": leaf(I, 1, "Parallel I/O threads per request.", minimum=1),
        "single_submit": leaf(B, False, "Submit requests one at a time instead of in a batch."),
        "overlap_events": leaf(B, True, "Overlap request submission and completion."),
        "use_gds": leaf(B, False, "Use NVIDIA GPUDirect Storage (CUDA only)."),
    }),
    "checkpoint": section("Checkpoint saving and loading.", {
        "tag_validation": leaf(S, "Warn", "Check that checkpoint tags match across ranks.",
                               enum=["WARN", "IGNORE", "FAIL"], **{"x-ignore-case": True}),
        "load_universal": leaf(B, False, "Load a universal checkpoint (any parallelism)."),
        "use_node_local_storage": leaf(B, False, "Each node writes its own checkpoint to local storage."),
        "parallel_write": section("Parallel checkpoint writing.", {
            "pipeline_stage": leaf(B, False, "Write the checkpoint of each pipeline stage in parallel."),
        }),
        "checkpoint_serialization": leaf(B, True, "Use torch.save serialization."),
        "writer": section("Fast checkpoint writer.", {
            "type": leaf(S, "FAST", "Writer type.", enum=["MOCK", "PYTHON", "FAST"], **{"x-ignore-case": True}),
            "io_buffer_size": leaf(I, 67108864, "I/O buffer size in bytes."),
            "io_buffer_double": leaf(B, True, "Double-buffer the I/O."),
            "show_statistics": leaf(B, False, "Print write statistics."),
            "data_parallel": leaf([S, "null"], None, "Data-parallel write unit.",
                                  enum=["REPLICA", "SOCKET", "MACHINE", None], **{"x-ignore-case": True}),
            "decoupled": leaf(B, False, "Decouple the writer from the training loop."),
            "io_multiplier": leaf(I, 1, "I/O multiplier."),
        }),
    }),
    "data_types": section("Dtypes of gradient accumulation, parameters and buffers.", {
        "grad_accum_dtype": leaf([S, "null"], None, "Dtype gradients accumulate in.", enum=TORCH_DTYPES + [None]),
        "param_dtype": leaf([S, "null"], None, "Dtype of the model parameters.", enum=TORCH_DTYPES + [None]),
        "buffer_dtype": leaf([S, "null"], None, "Dtype of module buffers (null keeps them).",
                             enum=TORCH_DTYPES + [None]),
        # one pattern as a bare string raises DeepSpeedConfigError ('must be "auto" or a list of name patterns')
        "keep_in_fp32_modules": {"description": "'auto' or a list of module-name patterns whose buffers stay fp32.",
                                 "anyOf": [{"type": "array", "items": {"type": "string"}}, {"const": "auto"}],
                                 "default": "auto"},
    }),
    "pipeline": section("Pipeline-parallel engine settings (PipelineModule).", {
        "stages": {"description": "Number of pipeline stages ('auto' takes it from the PipelineModule).",
                   "type": ["integer", "string"], "default": "auto"},
        "partition": leaf(S, "best", "How layers are split into stages."),
        "seed_layers": leaf(B, False, "Use a different seed for each layer."),
        "activation_checkpoint_interval": leaf(I, 0, "Checkpoint activations every N layers (0: off).", minimum=0),
        "pipe_partitioned": leaf(B, True, "Partition activations sent between stages."),
        "grad_partitioned": leaf(B, True, "Partition gradients sent between stages."),
        "use_reentrant": leaf(B, True, "Use reentrant activation checkpointing."),
    }),
    "torch_autocast": section("torch.autocast mixed precision instead of fp16/bf16 sections.", {
        "enabled": leaf(B, False, "Run forward under torch.autocast."),
        "dtype": leaf(S, None, "Autocast dtype.", enum=["torch.float16", "fp16", "float16", "half", "torch.bfloat16",
                                                         "bf16", "bfloat16", "torch.float32", "fp32", "float32",
                                                         "float", "torch.int8", "int8"]),
        "lower_precision_safe_modules": {"type": "array", "items": {"type": "string"},
                                         "description": "Module classes (with package) autocast may run in low "
                                                        "precision."},
    }),
    "autotuning": section("DeepSpeed autotuner (the `deepspeed --autotuning` launcher mode).", {
        "enabled": leaf(B, False, "Enable the autotuner."),
        "fast": leaf(B, True, "Tune only the micro batch size and ZeRO stage."),
        "results_dir": leaf(S, "autotuning_results", "Where results are written."),
        "exps_dir": leaf(S, "autotuning_exps", "Where experiment configs are written."),
        "overwrite": leaf(B, True, "Overwrite earlier results."),
        "start_profile_step": leaf(I, 3, "First profiled step."),
        "end_profile_step": leaf(I, 5, "Last profiled step."),
        "metric": leaf(S, "throughput", "Metric to optimize.", enum=["latency", "throughput", "flops", "forward",
                                                                      "step"]),
        "metric_path": leaf([S, "null"], None, "Path of the metric file.", null_default=True),
        "tuner_type": leaf(S, "gridsearch", "Search strategy.", enum=["gridsearch", "random", "model_based"]),
        "tuner_early_stopping": leaf(I, 5, "Stop after N experiments without improvement."),
        "tuner_num_trials": leaf(I, 50, "Maximum experiments."),
        "arg_mappings": free("Map of ds_config keys to training-script arguments."),
        "model_info": free("Model facts for the tuner: profile, num_params, hidden_size, num_layers."),
        "model_info_path": leaf([S, "null"], None, "Path of a model-info file.", null_default=True),
        "mp_size": leaf(I, 1, "Model-parallel size."),
        "max_train_batch_size": leaf([I, "null"], None, "Largest global batch to try.", null_default=True),
        "min_train_batch_size": leaf(I, 1, "Smallest global batch to try."),
        "max_train_micro_batch_size_per_gpu": leaf(I, 1024, "Largest micro batch to try."),
        "min_train_micro_batch_size_per_gpu": leaf(I, 1, "Smallest micro batch to try."),
        "num_tuning_micro_batch_sizes": leaf(I, 3, "Micro batch sizes tried per ZeRO stage."),
    }),
    "data_efficiency": section("Data efficiency library: curriculum learning, dynamic batching, random-LTD.", {
        "enabled": leaf(B, False, "Enable the data efficiency library."),
        "seed": leaf(I, 1234, "Seed of the data sampler."),
        "data_sampling": section("Data sampling.", {
            "enabled": leaf(B, False, "Enable data sampling."),
            "num_epochs": leaf(I, 1000, "Epochs the sampler plans for."),
            "num_workers": leaf(I, 0, "Data loader workers."),
            "pin_memory": leaf(B, False, "Pin data loader memory."),
            "curriculum_learning": free("Curriculum learning: enabled, data_cluster_path, curriculum_metrics, ..."),
            "dynamic_batching": free("Dynamic batching: enabled, lr_scaling_method, min_batch_size, max_tokens, ..."),
        }),
        "data_routing": section("Data routing.", {
            "enabled": leaf(B, False, "Enable data routing."),
            "random_ltd": free("Random layerwise token dropping settings."),
        }),
    }),
}


# top-level key -> (pydantic model import path, docstring)
PYDANTIC_SECTIONS = {
    "zero_optimization": ("deepspeed.runtime.zero.config:DeepSpeedZeroConfig", None),
    "fp16": ("deepspeed.runtime.precision_config:DeepSpeedFP16Config", None),
    "bf16": ("deepspeed.runtime.precision_config:DeepSpeedBF16Config", None),
    "bfloat16": ("deepspeed.runtime.precision_config:DeepSpeedBF16Config", "Old name of the `bf16` section."),
    "comms_logger": ("deepspeed.comm.config:CommsLoggerConfig", "Log collective communication calls."),
    "tensorboard": ("deepspeed.monitor.config:TensorBoardConfig", None),
    "wandb": ("deepspeed.monitor.config:WandbConfig", None),
    "csv_monitor": ("deepspeed.monitor.config:CSVConfig", None),
    "comet": ("deepspeed.monitor.config:CometConfig", None),
    "hybrid_engine": ("deepspeed.runtime.config:HybridEngineConfig", "DeepSpeed hybrid engine (RLHF)."),
    "weight_quantization": ("deepspeed.inference.config:WeightQuantConfig", "Weight quantization."),
    "compile": ("deepspeed.compile.config:CompileConfig", None),
    "tensor_parallel": ("deepspeed.runtime.tensor_parallel.config:TPTrainingConfig", "AutoTP training."),
}


_INTERVAL = {"select_interval": {"anyOf": [{"type": "integer"}, {"const": "auto"}]},
             "update_interval": {"anyOf": [{"type": "integer", "minimum": 1}, {"const": "auto"}]}}
VALIDATOR_BOUNDS = {
    ("fp16", "loss_scale"): {"minimum": 0},  # DeepSpeedFP16Config._validate_loss_scale: "must be >= 0"
    # ZenFlowConfig.validate_fields (runtime/zenflow/zenflow_config.py): one of three strategies; an interval is an
    # int (update_interval at least 1) or the one string "auto"
    ("zero_optimization", "zenflow", "select_strategy"): {"enum": ["auto", "step", "epoch"]},
    **{("zero_optimization", "zenflow", key): value for key, value in _INTERVAL.items()},
    # DeepSpeedZeroLeafModuleConfig._coerce_container_types (runtime/zero/leaf_module_config.py): null is {}, and
    # one string is a list of it
    ("zero_optimization", "leaf_module"): {"type": ["object", "null"]},
    **{("zero_optimization", "leaf_module", key): {"type": ["array", "string"]}
       for key in ("classes", "names", "name_suffixes")},
}
"""What a pydantic section enforces or converts in a validator, where model_schema cannot read it off the Field
annotation (key path -> the schema keywords that replace the generated ones). The fp16 window and floor are
checked only with dynamic scaling (lint's ZK204)."""

AUTOEP_BOUNDS = {
    "comm_num_sm": {"minimum": 1},  # validate_autoep_config: "comm_num_sm must be a positive integer"
    "comm_qp_margin": {"minimum": 0},  # "... must be a non-negative integer"
    "comm_max_tokens_per_rank": {"minimum": 0},  # "... must be a non-negative integer"
    "num_expert_groups": {"minimum": 1},  # "num_expert_groups must be >= 1"
    "num_limited_groups": {"minimum": 1},  # "num_limited_groups must be >= 1"
}
"""The bounds deepspeed/module_inject/auto_ep_config.py validate_autoep_config checks at engine start (where
DeepSpeedEngine._configure_expert_parallel calls it), which AutoEPConfig's annotations do not carry. Its enums are
generated: the Literal annotations (score_apply, combine_impl, ...), PRESET_MODELS and EXPERT_ACTIVATIONS."""


def _import(path: str):
    mod, _, name = path.partition(":")
    module = __import__(mod, fromlist=[name])
    return getattr(module, name)


def _attr_docs(cls) -> dict[str, str]:
    """Attribute docstrings (a string literal right after a field), following the MRO."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        try:
            src = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        try:
            body = ast.parse(src).body[0].body
        except (SyntaxError, IndexError, AttributeError):
            continue
        for stmt, nxt in zip(body, body[1:] + [None]):
            if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and isinstance(nxt, ast.Expr)
                    and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)):
                docs[stmt.target.id] = " ".join(nxt.value.value.split())
    return docs


def _json_default(value):
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int, float, bool)) for v in value):
        return list(value)
    return None


def _type_schema(annotation) -> dict:
    from pydantic import BaseModel

    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Union or (origin is not None and str(origin) == "<class 'types.UnionType'>"):
        parts = [_type_schema(a) for a in args if a is not type(None)]
        nullable = type(None) in args
        if len(parts) == 1:
            out = dict(parts[0])
            if nullable and "type" in out:
                t = out["type"] if isinstance(out["type"], list) else [out["type"]]
                out["type"] = t + ["null"]
                if "enum" in out:
                    out["enum"] = out["enum"] + [None]
            elif nullable:
                out = {"anyOf": [out, {"type": "null"}]}
            return out
        return {"anyOf": parts + ([{"type": "null"}] if nullable else [])}
    if origin is typing.Literal:
        return {"type": "string", "enum": list(args)}
    if origin in (list, list):
        return {"type": "array", "items": _type_schema(args[0])} if args else {"type": "array"}
    if origin in (dict, dict):
        return {"type": "object", "additionalProperties": True}
    if origin is tuple:
        return {"type": "array"}
    if isinstance(annotation, type):
        if issubclass(annotation, BaseModel):
            return model_schema(annotation)
        if issubclass(annotation, enum.Enum):
            values = [m.value for m in annotation if m.name != "max_stage"]
            t = "integer" if all(isinstance(v, int) for v in values) else "string"
            return {"type": t, "enum": values}
        if annotation is bool:
            return {"type": "boolean"}
        if annotation is int:
            return {"type": "integer"}
        if annotation is float:
            return {"type": "number"}
        if annotation is str or annotation.__name__ in ("Path", "PosixPath"):
            return {"type": "string"}
        if annotation is list:
            return {"type": "array"}
        if annotation is dict:
            return {"type": "object", "additionalProperties": True}
        if annotation.__name__ == "dtype":  # pydantic checks isinstance(value, torch.dtype): no JSON value is one
            return {"x-torch-dtype": True, "not": {}}  # "not": {}: a plain JSON Schema validator refuses it too
    return {}


def model_schema(cls, description: str | None = None) -> dict:
    """JSON Schema of one DeepSpeedConfigModel: fields, pydantic aliases, constraints, defaults, docstrings."""
    import annotated_types as at
    from pydantic_core import PydanticUndefined

    docs = _attr_docs(cls)
    props: dict[str, dict] = {}
    for name, field in cls.model_fields.items():
        sch = dict(_type_schema(field.annotation))
        for m in field.metadata:
            if isinstance(m, at.Gt):
                sch["exclusiveMinimum"] = m.gt
            elif isinstance(m, at.Ge):
                sch["minimum"] = m.ge
            elif isinstance(m, at.Lt):
                sch["exclusiveMaximum"] = m.lt
            elif isinstance(m, at.Le):
                sch["maximum"] = m.le
        default = field.default
        if default is not PydanticUndefined and sch.get("type") != "object":
            jd = _json_default(default)
            if jd is not None or default is None:
                sch["default"] = jd
        sch["description"] = docs.get(name) or sch.get("description") or f"{cls.__name__}.{name}"
        extra = field.json_schema_extra or {}
        if isinstance(extra, dict) and extra.get("deprecated"):
            sch["deprecated"] = True
            if extra.get("new_param"):
                sch["x-replaced-by"] = extra["new_param"]
            if extra.get("new_param") and extra.get("set_new_param", True):
                # DeepSpeedConfigModel._process_deprecated_field moves the value to new_param, asserting that
                # new_param was not given too (cpu_offload_use_pin_memory sets nothing, so it asserts nothing)
                sch["x-exclusive-with"] = extra["new_param"]
        if field.alias and field.alias != name:
            props[field.alias] = dict(sch, description=sch["description"])
            sch = dict(sch, description=f"Same as `{field.alias}` (DeepSpeed accepts both names). "
                       + sch["description"], **{"x-alias-of": field.alias})
        props[name] = sch
    doc = description or " ".join((cls.__doc__ or cls.__name__).split())
    # x-pydantic: DeepSpeed validates this section with pydantic (lax: "2" -> 2, "true" -> True; unknown keys rejected)
    return {"type": "object", "description": doc, "properties": props, "additionalProperties": False,
            "x-pydantic": True}


def build_schema() -> dict:
    import deepspeed

    props = dict(DICT_SECTIONS)
    for key, (path, desc) in PYDANTIC_SECTIONS.items():
        props[key] = model_schema(_import(path), desc)
    import re

    from deepspeed.module_inject.auto_ep_config import parse_autoep_config

    ep_src = inspect.getsource(parse_autoep_config)
    ep_props = {key: {"description": f"AutoEP setting '{key}' (read by deepspeed.module_inject.auto_ep_config)."}
                for key in re.findall(r'"(\w+)" in param_dict', ep_src)}
    # the types are AutoEPConfig's annotations (parse_autoep_config copies each value into that dataclass as given)
    from deepspeed.module_inject.auto_ep_presets.base import AutoEPConfig

    hints = typing.get_type_hints(AutoEPConfig)
    for key, default in re.findall(r'param_dict\.get\("(\w+)",\s*([^)]*)\)', ep_src):
        ep_props[key] = {"description": f"AutoEP setting '{key}' (read by deepspeed.module_inject.auto_ep_config)."}
        try:
            value = ast.literal_eval(default)
        except (ValueError, SyntaxError):
            value = None
        else:
            ep_props[key]["default"] = value
        if key in hints:
            ep_props[key].update(_autoep_type(hints[key], value))
        ep_props[key].update(AUTOEP_BOUNDS.get(key, {}))
    # validate_autoep_config checks these two against DeepSpeed's own tables, not a Literal
    from deepspeed.module_inject.auto_ep_config import PRESET_MODELS
    from deepspeed.moe.ep_experts import EXPERT_ACTIVATIONS

    ep_props["preset_model"]["enum"] = list(PRESET_MODELS) + [None]
    ep_props["expert_activation"]["enum"] = list(EXPERT_ACTIVATIONS) + [None]
    for (sec, *inner), bounds in VALIDATOR_BOUNDS.items():
        node = props[sec]
        for key in inner:
            node = node["properties"][key]
        node.update(bounds)
    props["expert_parallel"] = section("AutoEP: automatic expert parallelism for MoE models.",
                                       dict(sorted(ep_props.items())))
    # DeepSpeedEngine._configure_expert_parallel returns before validate_autoep_config unless enabled, and
    # parse_autoep_config checks nothing: a disabled section's values are read by no one
    props["expert_parallel"]["x-checked-when-enabled"] = True
    props["timers"] = section("Engine timers.", {"throughput": model_schema(
        _import("deepspeed.utils.config:DeepSpeedThroughputTimerConfig"))})
    zero = props["zero_optimization"]
    zero["type"] = ["object", "boolean"]
    zero["description"] = ("ZeRO memory optimizations. A bare true/false is the deprecated form (true means "
                           "stage 1).")
    # DeepSpeed's removed lists: DeepSpeedConfig raises DeepSpeedConfigError with these messages
    from deepspeed.runtime import config as ds_config

    for key, message in ds_config._REMOVED_ZERO_CONFIG_KEYS.items():
        zero["properties"][key] = _removed(message)
    props["bfloat16"]["deprecated"] = True
    props["bfloat16"]["x-replaced-by"] = "bf16"
    props["allgather_size"] = leaf(I, 500000000, "Deprecated: only read with the boolean form of "
                                   "zero_optimization; use zero_optimization.allgather_bucket_size.",
                                   deprecated=True, **{"x-replaced-by": "zero_optimization.allgather_bucket_size"})
    for key, message in ds_config._REMOVED_TOP_LEVEL_CONFIG_KEYS.items():
        props[key] = _removed(message)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": f"DeepSpeed {deepspeed.__version__.rsplit('.', 1)[0]} configuration (ds_config.json)",
        "description": "Every key DeepSpeed reads from a ds_config, generated from DeepSpeed "
                       f"{deepspeed.__version__} by zerokit. 'auto' values are for HF Trainer / Accelerate.",
        "type": "object",
        "x-deepspeed-version": deepspeed.__version__,
        "properties": dict(sorted(props.items())),
        "additionalProperties": False,
    }


def _autoep_type(annotation, default) -> dict:
    """An AutoEP key's type from its AutoEPConfig annotation. `int | str` with the default "auto" (top_k,
    routed_scaling_factor) means a number or the word "auto", which validate_autoep_config checks: the string
    branch is that one word. A bare `object` (expert_w3, load_balance_coeff's sentinel) leaves the value free."""
    args = typing.get_args(annotation)
    if object in args or annotation is object:
        return {}
    sch = _type_schema(annotation)
    if default == "auto" and str in args:
        numeric = [_type_schema(a) for a in args if a not in (str, type(None))]
        sch = {"anyOf": numeric + [{"const": "auto"}]}
    return sch


def _removed(message: str) -> dict:
    return {"description": message, "deprecated": True, "x-removed": True, "not": {}}


VALUE_KEYWORDS = ("type", "enum", "items", "minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum",
                  "x-ignore-case")
"""What describes a value itself; a key HF may fill keeps them in the first branch of its anyOf."""


def _allow_auto(schema: dict, path: tuple = ()) -> dict:
    """Let "auto" through where the HF Trainer or Accelerate replace it before DeepSpeed reads the config
    (zerokit.autofill, read off HfTrainerDeepSpeedConfig.trainer_config_process/trainer_config_finalize and
    Accelerate's DeepSpeedPlugin), and nowhere else: `steps_per_print: "auto"` is left as the string "auto".
    A key typed without strings becomes anyOf [its constraints, {"const": "auto"}], so a plain JSON Schema
    validator accepts "auto" and still refuses any other string ({"train_batch_size": "eight"})."""
    from zerokit.autofill import ACCELERATE_FILLS, TRAINER_FILLS
    from zerokit.lint.schema import AUTO_ALTERNATIVE

    filled = TRAINER_FILLS | ACCELERATE_FILLS
    for key, sub in schema.get("properties", {}).items():
        here = path + (key,)
        if sub.get("properties"):
            _allow_auto(sub, here)
            continue
        if ".".join(here) not in filled or "type" not in sub or sub.get("x-removed"):
            continue
        types = sub["type"] if isinstance(sub["type"], list) else [sub["type"]]
        if "string" in types:  # "auto" is already a string; only an enum has to name it
            if "enum" in sub and "auto" not in sub["enum"]:
                sub["enum"] = sub["enum"] + ["auto"]
            continue
        value = {k: sub.pop(k) for k in VALUE_KEYWORDS if k in sub}
        sub["anyOf"] = [value, dict(AUTO_ALTERNATIVE)]
    return schema


def main(argv: list[str] | None = None) -> int:
    import os

    args = sys.argv[1:] if argv is None else argv
    if len(args) > 1 or (args and args[0].startswith("-")):  # `--help` was written as a schema file named --help
        print("usage: python -m zerokit.lint.schema_gen [OUT.json]  (default: zerokit/data/ds_config.schema.json)",
              file=sys.stderr)
        return 0 if args[0] in ("-h", "--help") else 2
    out = Path(args[0]) if args else Path(__file__).resolve().parent.parent / "data" / "ds_config.schema.json"
    text = json.dumps(_allow_auto(build_schema()), indent=1) + "\n"  # deepspeed logs to stdout: write a file
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, out)
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Lint an Accelerate config YAML (`accelerate config` output) that uses DeepSpeed.

Two shapes exist. With `deepspeed_config_file`, Accelerate loads that ds_config and refuses the YAML's own
ZeRO fields (DeepSpeedPlugin._deepspeed_config_checks). Without it, DeepSpeedPlugin.__post_init__ builds a
ds_config from the YAML fields; `synthesize` builds the same dict so the ds_config rules apply to it, with
findings pointing at the YAML lines.
"""

from __future__ import annotations

import json
from typing import Any

from zerokit.lint.findings import ERROR, Finding
from zerokit.lint.loader import Document
from zerokit.lint.schema import _did_you_mean, _show
from zerokit.units import finite_number

# accelerate/commands/launch.py deepspeed_args
YAML_DS_KEYS = ("deepspeed_config_file", "zero_stage", "offload_optimizer_device", "offload_param_device",
                "offload_optimizer_nvme_path", "offload_param_nvme_path", "gradient_accumulation_steps",
                "gradient_clipping", "zero3_init_flag", "zero3_save_16bit_model", "deepspeed_hostfile",
                "deepspeed_exclusion_filter", "deepspeed_inclusion_filter", "deepspeed_multinode_launcher",
                "deepspeed_moe_layer_cls_names")
# DeepSpeedPlugin._deepspeed_config_checks: these conflict with deepspeed_config_file
IGNORED_WITH_FILE = ("gradient_accumulation_steps", "gradient_clipping", "zero_stage", "offload_optimizer_device",
                     "offload_param_device", "offload_param_nvme_path", "offload_optimizer_nvme_path",
                     "zero3_save_16bit_model")
DEVICES = ("none", "cpu", "nvme")
# accelerate/commands/config/config_args.py: the fields of BaseConfig, ClusterConfig and SageMakerConfig, and the two
# old keys process_config converts ("fp16", "dynamo_backend"); from_yaml_file refuses any other key
CONFIG_KEYS = frozenset((
    "additional_args", "base_job_name", "command_file", "commands", "compute_environment", "debug",
    "deepspeed_config", "distributed_type", "downcast_bf16", "dynamo_config", "ec2_instance_type",
    "enable_cpu_affinity", "fp8_config", "fsdp_config", "gpu_ids", "iam_role_name", "image_uri", "machine_rank",
    "main_process_ip", "main_process_port", "main_training_function", "megatron_lm_config", "mixed_precision",
    "mpirun_config", "num_machines", "num_processes", "parallelism_config", "profile", "py_version",
    "pytorch_version", "rdzv_backend", "region", "sagemaker_inputs_file", "sagemaker_metrics_file", "same_network",
    "tpu_env", "tpu_name", "tpu_use_cluster", "tpu_use_sudo", "tpu_vm", "tpu_zone", "transformers_version",
    "use_cpu", "fp16", "dynamo_backend"))


def is_accelerate_yaml(doc: Document) -> bool:
    """A YAML with at least one key of an Accelerate config; any other YAML is linted as the ds_config it would
    be, so that its unknown keys are reported as a JSON file's are."""
    return doc.syntax == "yaml" and any(key in CONFIG_KEYS for key in doc.data)


def yaml_findings(doc: Document) -> list[Finding]:
    """Checks of the YAML's own deepspeed_config block (unknown keys, bad values, ZK601 conflicts)."""
    out: list[Finding] = []
    ds = doc.data.get("deepspeed_config")

    def add(key: tuple, severity: str, code: str, message: str, suggestion: str | None = None) -> None:
        line, col = doc.where(key)
        out.append(Finding(doc.path, line, col, severity, code, ".".join(map(str, key)), message, suggestion))

    for key in doc.data:
        if key not in CONFIG_KEYS:
            guess = _did_you_mean(str(key), sorted(CONFIG_KEYS))
            add((key,), ERROR, "ZK100", f"unknown key '{key}' in an Accelerate config: accelerate launch refuses the "
                "file ('had unknown keys')" + (f" (did you mean '{guess}'?)" if guess else "; delete it"), guess)

    if not isinstance(ds, dict):
        if ds is not None:
            add(("deepspeed_config",), ERROR, "ZK103", "deepspeed_config must be a mapping of Accelerate's DeepSpeed "
                "fields")
        return out
    for key in ds:
        if key not in YAML_DS_KEYS:
            guess = _did_you_mean(str(key), list(YAML_DS_KEYS))
            add(("deepspeed_config", key), ERROR, "ZK100", f"unknown key '{key}' in deepspeed_config: accelerate launch "
                "does not know it" + (f" (did you mean '{guess}'?)" if guess else ""), guess)
    for key in ("offload_optimizer_device", "offload_param_device"):
        if key in ds and ds[key] not in DEVICES:
            add(("deepspeed_config", key), ERROR, "ZK104", f"deepspeed_config.{key} is {ds[key]!r}; use one of "
                + ", ".join(DEVICES), _did_you_mean(str(ds[key]), list(DEVICES)))
    if "deepspeed_config_file" in ds:
        ref = ds["deepspeed_config_file"]
        key = ("deepspeed_config", "deepspeed_config_file")
        if ref is not None and not isinstance(ref, str):
            add(key, ERROR, "ZK103", f"deepspeed_config.deepspeed_config_file must be a path, not {json.dumps(ref)}: "
                "accelerate launch hands str() of it to HfDeepSpeedConfig, which raises ValueError; write the ds_config "
                "file's path (or remove the key)")
        elif isinstance(ref, str) and not ref.strip():
            add(key, ERROR, "ZK104", "deepspeed_config.deepspeed_config_file is empty: HfDeepSpeedConfig('') raises "
                "ValueError; write the ds_config file's path, or remove the key to configure ZeRO in this YAML")
    # accelerate launch hands each field on as str(value) in an environment variable, which DeepSpeedPlugin reads
    # back with int() (when all digits), float() or as a path: a list or a date there fails at launch or misleads
    if "gradient_accumulation_steps" in ds:
        gas = ds["gradient_accumulation_steps"]
        if gas != "auto" and (isinstance(gas, bool) or not str(gas).isdigit() or int(str(gas)) < 1):
            add(("deepspeed_config", "gradient_accumulation_steps"), ERROR, "ZK103", "deepspeed_config."
                f"gradient_accumulation_steps is {_show(gas)}; write a whole number >= 1 (or auto): accelerate launch "
                "passes anything else on as a string DeepSpeed refuses")
    if "gradient_clipping" in ds:
        clip = ds["gradient_clipping"]
        if clip != "auto" and (not finite_number(clip) or clip < 0):
            add(("deepspeed_config", "gradient_clipping"), ERROR, "ZK103", f"deepspeed_config.gradient_clipping is "
                f"{_show(clip)}; write a number >= 0 (1.0 is usual; 0 turns clipping off)")
    for key in ("offload_optimizer_nvme_path", "offload_param_nvme_path"):
        if key in ds and ds[key] is not None and not isinstance(ds[key], str):
            add(("deepspeed_config", key), ERROR, "ZK103", f"deepspeed_config.{key} is {_show(ds[key])}; write the "
                "NVMe directory's path (accelerate launch would pass on its str() as the path)")
    if "zero_stage" in ds and str(ds["zero_stage"]) not in ("0", "1", "2", "3"):  # launch passes it through int()
        add(("deepspeed_config", "zero_stage"), ERROR, "ZK104", f"deepspeed_config.zero_stage is {ds['zero_stage']!r}; "
            "use 0, 1, 2 or 3")
    if config_file(doc) is not None:
        for key in IGNORED_WITH_FILE:
            if key in ds:
                add(("deepspeed_config", key), ERROR, "ZK601", f"deepspeed_config.{key} conflicts with "
                    "deepspeed_config_file: Accelerate raises 'the following accelerate config variables will be "
                    "ignored'; set it in the ds_config file and remove it here")
        if doc.data.get("mixed_precision") is not None:
            add(("mixed_precision",), ERROR, "ZK601", "mixed_precision conflicts with deepspeed_config_file: "
                "Accelerate raises at launch; set fp16/bf16 in the ds_config file and remove mixed_precision here")
    return out


def config_file(doc: Document) -> str | None:
    ds = doc.data.get("deepspeed_config")
    if isinstance(ds, dict):
        path = ds.get("deepspeed_config_file")
        if isinstance(path, str) and path.strip() and path != "none":
            return path
    return None


def _truth(value: Any) -> bool:
    """zero3_save_16bit_model as `accelerate launch` hands it on: str(value).lower() in an environment variable,
    which DeepSpeedPlugin compares with "true" (the string "false" is false, and so is "yes")."""
    return str(value).lower() == "true"


def synthesize(doc: Document) -> tuple[Document, dict[str, str]]:
    """The ds_config DeepSpeedPlugin.__post_init__ builds from the YAML fields, positions pointing at the YAML."""
    ds: dict[str, Any] = doc.data.get("deepspeed_config") or {}
    stage = ds.get("zero_stage", 2)
    stage = int(stage) if str(stage) in ("0", "1", "2", "3") else stage
    opt_dev = ds.get("offload_optimizer_device", "none")
    par_dev = ds.get("offload_param_device", "none")
    cfg: dict[str, Any] = {
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": ds.get("gradient_accumulation_steps", "auto"),
        "zero_optimization": {
            "stage": stage,
            "offload_optimizer": {"device": opt_dev, "nvme_path": ds.get("offload_optimizer_nvme_path", "none")
                                  if opt_dev == "nvme" else None},
            "offload_param": {"device": par_dev, "nvme_path": ds.get("offload_param_nvme_path", "none")
                              if par_dev == "nvme" else None},
        },
    }
    if "zero3_save_16bit_model" in ds:  # Accelerate always sets it; only what the YAML says is the user's
        cfg["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] = _truth(ds["zero3_save_16bit_model"])
    if ds.get("gradient_clipping"):
        cfg["gradient_clipping"] = ds["gradient_clipping"]
    mp = doc.data.get("mixed_precision")
    if mp in ("fp16", "bf16"):  # Accelerator.set_mixed_precision fills the precision section
        cfg[mp] = {"enabled": True}
    mapping = {
        "gradient_accumulation_steps": "deepspeed_config.gradient_accumulation_steps",
        "gradient_clipping": "deepspeed_config.gradient_clipping",
        "zero_optimization.stage": "deepspeed_config.zero_stage",
        "zero_optimization.offload_optimizer.device": "deepspeed_config.offload_optimizer_device",
        "zero_optimization.offload_param.device": "deepspeed_config.offload_param_device",
        "zero_optimization.offload_optimizer.nvme_path": "deepspeed_config.offload_optimizer_nvme_path",
        "zero_optimization.offload_param.nvme_path": "deepspeed_config.offload_param_nvme_path",
        "zero_optimization.stage3_gather_16bit_weights_on_model_save": "deepspeed_config.zero3_save_16bit_model",
        "zero_optimization": "deepspeed_config",
        "zero_optimization.offload_optimizer": "deepspeed_config.offload_optimizer_device",
        "zero_optimization.offload_param": "deepspeed_config.offload_param_device",
        "zero_optimization.stage3_gather_16bit_weights_on_model_save.": "deepspeed_config.zero3_save_16bit_model",
    }
    positions = {}
    for synth, real in mapping.items():
        pos = doc.positions.get(tuple(real.split(".")))
        if pos is None and real.startswith("deepspeed_config."):
            pos = doc.positions.get(("deepspeed_config",))
        if pos:
            positions[tuple(synth.split("."))] = pos
    if mp in ("fp16", "bf16") and ("mixed_precision",) in doc.positions:
        positions[(mp,)] = positions[(mp, "enabled")] = doc.positions[("mixed_precision",)]
        mapping[f"{mp}.enabled"] = "mixed_precision"
    synth = Document(doc.path, cfg, positions, syntax="accelerate", base_dir=doc.base_dir)
    return synth, mapping

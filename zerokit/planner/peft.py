"""LoRA and QLoRA in a plan: what trains, what stays frozen and in how many bytes, and what to pass to PEFT.

Pure arithmetic on top of `zerokit.models.lora` (adapter counts, as `peft.get_peft_model` builds them) and
`zerokit.models.quant` (the frozen base's bytes, as bitsandbytes stores them); no torch, no peft.

`lora_config()` and `quantization_config()` are the keyword arguments of `peft.LoraConfig` (peft 0.21) and
`transformers.BitsAndBytesConfig` (transformers 5); tests/test_peft_plan.py builds both from the plan's JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zerokit._dataclass import dataclass
from zerokit.errors import BadInput
from zerokit.memory.activations import LoraSetup
from zerokit.models.spec import ModelSpec

LORA_ALPHA_PER_RANK = 2
"""lora_alpha = 2 r, the common recipe (the update is scaled by alpha / r = 2 whatever the rank)."""
DEFAULT_LORA_DROPOUT = 0.05
"""--lora-dropout when not given, except on MoE expert or router targets, where PEFT refuses any (0 there)."""
TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
QLORA_PRECISIONS = ("bf16", "fp16")
QLORA_NO_PARAM_OFFLOAD = (
    "bitsandbytes 4-bit weights cannot be offloaded: transformers refuses to dispatch a 4-bit model's modules to the "
    "CPU or disk (only unquantized, in fp32, with llm_int8_enable_fp32_cpu_offload), and each weight's quantization "
    "state (absmax, code tables) lives outside the tensors ZeRO-3 moves")
ADAPTERS_16BIT = (
    "pass autocast_adapter_dtype=False to get_peft_model: DeepSpeed 0.19's ZeRO-3 optimizer flattens the trainable "
    "parameters into one buffer of one dtype (runtime/zero/utils.py defragment), and by default PEFT upcasts the "
    "adapters to fp32 beside the modules_to_save copies' 16 bits, which the engine leaves as they are on a model "
    "zero.Init built: deepspeed.initialize fails its assertion (a traced 2-rank run). A trainer that calls "
    "get_peft_model itself (TRL's SFTTrainer with peft_config) upcasts: wrap the model yourself first")


@dataclass(frozen=True)
class PeftPlan:
    """The adapters of a plan and the frozen base beneath them."""

    method: str
    """lora or qlora."""
    rank: int
    dropout: float
    target_modules: str | tuple[str, ...]
    """`LoraConfig.target_modules`: "all-linear" or module names as PEFT reads them."""
    trainable: int
    """Adapter parameters and the modules_to_save copies: the only ones with gradients and optimizer states."""
    frozen_parameters: int
    """The base model's parameters, all frozen."""
    frozen_bytes: int
    """One whole copy of the frozen base on the GPU: 16-bit for lora, NF4 (bnb_4bit_quant_storage uint8) for qlora."""
    frozen_bytes_zero3: int
    """The same with bnb_4bit_quant_storage = the compute dtype, as ZeRO-3 needs it (equal for lora)."""
    quantized_parameters: int = 0
    quantization_constants: int = 0
    """QLoRA: bytes of absmax, nested absmax and code tables in one whole copy."""
    adapter_linears: tuple[tuple[int, int, int], ...] = ()
    """(in, out, copies) of each adapted linear module (`LoraCount.linears`)."""
    quantized_modules: int = 0
    """QLoRA: how many modules become bitsandbytes 4-bit linears."""
    saved: tuple[tuple[str, str, int], ...] = ()
    """PEFT's modules_to_save copies, trained whole beside their frozen originals: (name, role, parameters) of each
    (`zerokit.models.lora.saved_modules`), their parameters part of `trainable`."""

    @property
    def modules_to_save(self) -> tuple[str, ...]:
        """`LoraConfig.modules_to_save`: the input embedding and/or output head."""
        return tuple(name for name, _, _ in self.saved)

    @property
    def saved_roles(self) -> tuple[str, ...]:
        """The copies' roles ("embedding", "head"), as the activation model takes them."""
        return tuple(role for _, role, _ in self.saved)

    @property
    def saved_parameters(self) -> int:
        return sum(params for _, _, params in self.saved)

    @property
    def saved_work(self) -> tuple[int, int]:
        """What the step-time model prices the copies by (`zerokit.perf.model.step_time`'s `saved`)."""
        from zerokit.models.lora import saved_work

        return saved_work(self.saved)

    def autocast_off(self, zero_stage: int) -> bool:
        """Whether the plan has PEFT keep the adapters in 16 bits (`get_peft_model(..., autocast_adapter_dtype=False)`,
        `ADAPTERS_16BIT`): LoRA with modules_to_save copies at ZeRO-3, whose optimizer takes one dtype."""
        return zero_stage == 3 and self.method == "lora" and bool(self.saved)

    @property
    def lora_work(self) -> tuple:
        """What the step-time model prices the adapters by (`zerokit.perf.model.step_time`'s `lora`): QLoRA adds
        the 4-bit weights and linears it dequantizes in every pass."""
        if self.method == "qlora":
            return self.rank, self.dropout, self.adapter_linears, self.quantized_parameters, self.quantized_modules
        return self.rank, self.dropout, self.adapter_linears

    def activation_setup(self, zero_stage: int, dtype_bytes: int) -> LoraSetup:
        """The adapters as the activation model takes them, in the dtype they train in under DeepSpeed.

        PEFT leaves adapters on a 16-bit base in fp32 (`autocast_adapter_dtype`). DeepSpeed's engine then casts
        every parameter to the training dtype (`_cast_module_mixed_precision`), except on a model that zero.Init
        built: at ZeRO-3 the base was partitioned as it loaded and the engine casts nothing, so the adapters, made
        afterwards by `get_peft_model`, stay fp32 (runtime/engine.py, DeepSpeed 0.19). QLoRA's base never loads
        under zero.Init (transformers' `get_init_context` skips it for a quantized model): `deepspeed.initialize`
        partitions it, and the engine casts the adapters as at ZeRO-0 to 2 (a traced QLoRA ZeRO-3 run: its
        activations are ZeRO-2's). With modules_to_save at ZeRO-3 the plan has PEFT keep the adapters in 16 bits
        (`autocast_adapter_dtype=False`, `ADAPTERS_16BIT`): ZeRO-3's optimizer takes one dtype."""
        adapter = 4 if self.fp32_adapters(zero_stage) else dtype_bytes
        return LoraSetup(self.rank, self.target_modules, self.dropout, quantized=self.method == "qlora",
                         adapter_bytes=adapter, saved=self.saved_roles)

    def fp32_adapters(self, zero_stage: int) -> bool:
        """Whether the adapters train in fp32: LoRA at ZeRO-3 (PEFT's upcast, which the engine leaves on a model
        zero.Init built), unless modules_to_save copies train beside them (`ADAPTERS_16BIT`)."""
        return zero_stage == 3 and self.method == "lora" and not self.autocast_off(zero_stage)

    def costs_at(self, zero_stage: int, dtype_bytes: int) -> dict[str, int]:
        """`costs_for`'s arguments: only the adapters train (in the width `activation_setup` says), on a frozen base."""
        costs = {"trainable": self.trainable, "frozen_bytes": self.frozen_bytes_at(zero_stage),
                 "adapter_bytes": self.activation_setup(zero_stage, dtype_bytes).adapter_bytes,
                 # the largest copy: the largest trainable tensor, which ZeRO-1/2's gradient norm copies to fp64
                 "largest_trainable": max((params for _, _, params in self.saved), default=0),
                 "saved_parameters": self.saved_parameters,
                 "embedding_trains": "embedding" in self.saved_roles}
        if zero_stage == 3 and self.method == "qlora":
            # the absmax and code tables are attributes of each 4-bit weight, not parameters: ZeRO-3 leaves them
            # whole on every rank, and counts the weights by their stored elements (`estimate.costs_of`)
            costs["replicated_bytes"] = self.quantization_constants
        return costs

    def frozen_bytes_at(self, zero_stage: int) -> int:
        return self.frozen_bytes_zero3 if zero_stage == 3 else self.frozen_bytes

    def lora_config(self) -> dict[str, Any]:
        """`peft.LoraConfig(**lora_config())`; target_modules a list (JSON has no tuples)."""
        targets = self.target_modules if isinstance(self.target_modules, str) else list(self.target_modules)
        config = {"r": self.rank, "lora_alpha": LORA_ALPHA_PER_RANK * self.rank, "lora_dropout": self.dropout,
                  "target_modules": targets, "bias": "none", "task_type": "CAUSAL_LM"}
        if self.modules_to_save:
            config["modules_to_save"] = list(self.modules_to_save)
        return config

    def quantization_config(self, precision: str, zero_stage: int) -> dict[str, Any] | None:
        """`transformers.BitsAndBytesConfig(**quantization_config(...))` for qlora, else None.

        Under ZeRO-3 the 4-bit weights must be stored in the compute dtype (`bnb_4bit_quant_storage`): DeepSpeed
        partitions and gathers parameters as floating-point tensors of one dtype, which uint8 storage breaks."""
        return qlora_quantization_config(precision, zero_stage) if self.method == "qlora" else None


def qlora_quantization_config(precision: str, zero_stage: int) -> dict[str, Any]:
    """The `transformers.BitsAndBytesConfig` keywords of a QLoRA plan (`PeftPlan.quantization_config`), dtypes by
    name as transformers takes them: NF4 with double quantization, computing in `precision`, stored in uint8 below
    ZeRO-3 and in the compute dtype at ZeRO-3."""
    dtype = TORCH_DTYPES[precision]
    return {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True,
            "bnb_4bit_compute_dtype": dtype, "bnb_4bit_quant_storage": dtype if zero_stage == 3 else "uint8"}


def plan_peft(model: ModelSpec, method: str, rank: int, targets: str, dropout: float | None, precision: str,
              modules_to_save: str = "") -> PeftPlan | None:
    """The adapters for `--peft method`, or None for full fine-tuning; BadInput for anything PEFT would refuse.
    `modules_to_save`: PEFT's trainable copies, a comma list (`zerokit.models.lora.saved_modules`)."""
    if method == "none":
        return None
    # Imported here: a full fine-tuning plan (the usual one) never counts adapters or quantized bytes.
    from zerokit.models.lora import ALL_LINEAR, lora_parameters, refuses_dropout, saved_modules
    from zerokit.models.quant import frozen_base_bytes

    if method not in ("lora", "qlora"):
        raise BadInput(f"--peft must be none, lora or qlora, got {method!r}")
    if method == "qlora" and precision not in QLORA_PRECISIONS:
        raise BadInput(f"--peft qlora computes in bf16 or fp16 (bnb_4bit_compute_dtype), not {precision}; "
                       "use --precision bf16 or fp16 (or auto)")
    config = _countable_config(model)
    if rank > model.hidden_size:
        raise BadInput(f"--lora-rank {rank} is above the model's hidden size {model.hidden_size}: an update B x A "
                       f"has rank at most min(in, out) <= {model.hidden_size}, so the extra adapter parameters learn "
                       "nothing; use a rank up to the hidden size (8-256 is usual)")
    names: str | list[str] = ALL_LINEAR if targets.strip().lower() == ALL_LINEAR else targets.split(",")
    count = lora_parameters(config, rank, names, dropout=dropout or 0.0)
    if dropout is None:  # the default where PEFT takes it
        dropout = 0.0 if refuses_dropout(count.adapted) else DEFAULT_LORA_DROPOUT
    saved = saved_modules(config, modules_to_save)
    both = [name for name, _, _ in saved if name in count.adapted]
    if both:
        raise BadInput(f"{', '.join(both)} {'is' if len(both) == 1 else 'are'} in --lora-targets and "
                       "--lora-modules-to-save: PEFT either adapts a module or trains a copy of it; drop "
                       f"{'it' if len(both) == 1 else 'each'} from one of them")
    trainable = count.trainable + sum(params for _, _, params in saved)
    n = model.parameters
    e = 2 if precision in QLORA_PRECISIONS else 4
    if method == "lora":
        return PeftPlan("lora", rank, dropout, count.target_modules, trainable, n, e * n, e * n,
                        adapter_linears=count.linears, saved=saved)
    low = frozen_base_bytes(config, "qlora", precision, quant_storage="uint8")
    z3 = frozen_base_bytes(config, "qlora", precision, quant_storage=precision)
    scale = n / max(1, low.quantized_parameters + low.unquantized // e) if model.source == "count" else 1.0
    return PeftPlan("qlora", rank, dropout, count.target_modules, trainable, n, round(low.total * scale),
                    round(z3.total * scale), round(low.quantized_parameters * scale), round(low.constants * scale),
                    count.linears, low.quantized_modules, saved)


def _countable_config(model: ModelSpec) -> Mapping[str, Any]:
    """The config the adapters are counted on; a bare count uses its inferred llama-like shape."""
    config = {k: v for k, v in model.config.items() if not str(k).startswith("_")}
    from zerokit.models.params import FAMILIES

    if str(config.get("model_type", "")) not in FAMILIES:
        raise BadInput(f"--peft: zerokit counts LoRA adapters for these families: {', '.join(sorted(FAMILIES))}; "
                       f"model_type {model.model_type!r} is not one of them (give a preset or a config.json of one)")
    return config

"""Bytes of a frozen base model for LoRA (16-bit) and QLoRA (bitsandbytes 4-bit), by arithmetic, without torch.

QLoRA loads the base with `transformers.BitsAndBytesConfig(load_in_4bit=True, ...)`. What that stores, from
transformers 5.23 `integrations/bitsandbytes.py` and bitsandbytes 0.50 `functional.quantize_4bit`:

- Which modules become `bnb.nn.Linear4bit`: every module whose type is exactly `nn.Linear`, and gpt2's `Conv1D`
  (`replace_with_bnb_linear`), except the output embedding, tied weights and the model's last parameter
  (`get_keys_to_not_convert`). Subclasses stay 16-bit: falcon's `FalconLinear` layers are never quantized. Embeddings,
  norms, MoE routers and the stacked 3-D experts of transformers 5 are not `nn.Linear`, so they stay 16-bit too.
- A quantized weight of n elements: the packed 4-bit data, `(n + 1) // (2 * s)` elements of the
  `bnb_4bit_quant_storage` dtype (s bytes each, so n / 2 bytes); one fp32 absmax per block of 64 (`blocksize`);
  the 16-entry fp32 code table of nf4/fp4 (a new tensor per weight, `get_4bit_type`). With double quantization
  (`bnb_4bit_use_double_quant`, compress_statistics) the absmax is stored as uint8, plus its fp32 mean (`offset`),
  one fp32 absmax per 256 of them and a private copy of the 256-entry fp32 dynamic code (`quantize_blockwise`
  copies it per weight).
- Biases of quantized layers stay in the load dtype.

tests/test_quant.py holds these against real bitsandbytes-quantized miniatures (loaded on the CPU) and by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zerokit._dataclass import dataclass
from zerokit.errors import BadInput
from zerokit.models.params import Part, model_parts

_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
_STORAGE_BYTES = {"uint8": 1, "int8": 1, "bf16": 2, "fp16": 2, "fp32": 4}
_SUBCLASSED_LINEARS = frozenset({"falcon"})  # FalconLinear(nn.Linear): replace_with_bnb_linear checks `type is Linear`
_CODE_4BIT = 16 * 4  # get_4bit_type: 16 fp32 values per quantized weight
_CODE_DYNAMIC = 256 * 4  # create_dynamic_map copied per weight for the nested state
_NESTED_BLOCK = 256  # quantize_4bit(compress_statistics=True) quantizes absmax in blocks of 256


@dataclass(frozen=True)
class FrozenBase:
    """Bytes of the frozen base model's parameters (one full copy, before any ZeRO partitioning)."""

    total: int
    quantized: int
    """Packed 4-bit weights (0 for LoRA)."""
    constants: int
    """Quantization constants: absmax, nested absmax, offsets and code tables (0 for LoRA)."""
    unquantized: int
    """Parameters kept in the 16-bit load dtype: embeddings, norms, lm_head, biases, routers, 3-D experts."""
    quantized_parameters: int
    """Parameters stored in 4 bits."""
    quantized_modules: int
    """How many modules become `bnb.nn.Linear4bit`."""


def frozen_base_bytes(config: Mapping[str, Any], method: str = "qlora", dtype: str = "bf16", *,
                      quant_storage: str = "uint8", double_quant: bool = True, quant_type: str = "nf4",
                      blocksize: int = 64) -> FrozenBase:
    """Bytes of the frozen base for `method` "lora" (all in `dtype`) or "qlora" (bitsandbytes 4-bit linears).

    `dtype` is the load dtype (`from_pretrained(dtype=...)`) of what is not quantized; `quant_storage`,
    `double_quant` and `quant_type` are `bnb_4bit_quant_storage`, `bnb_4bit_use_double_quant` and
    `bnb_4bit_quant_type` (QLoRA's recipe: nf4 with double quantization).
    """
    e = _DTYPE_BYTES.get(dtype)
    if e is None:
        raise BadInput(f"dtype must be one of {', '.join(_DTYPE_BYTES)}, got {dtype!r}")
    if method not in ("lora", "qlora"):
        raise BadInput(f"method must be lora or qlora, got {method!r}")
    s = _STORAGE_BYTES.get(quant_storage)
    if s is None:
        raise BadInput(f"bnb_4bit_quant_storage must be one of {', '.join(_STORAGE_BYTES)}, got {quant_storage!r}")
    if quant_type not in ("nf4", "fp4"):
        raise BadInput(f"bnb_4bit_quant_type must be nf4 or fp4, got {quant_type!r}")
    if blocksize not in (32, 64, 128, 256, 512, 1024, 2048, 4096):
        raise BadInput(f"blocksize must be a power of two from 32 to 4096, got {blocksize!r}")
    parts = model_parts(config)
    total_params = sum(p.params * p.copies for p in parts if not p.tied)
    if method == "lora":
        return FrozenBase(total_params * e, 0, 0, total_params * e, 0, 0)
    quantized = constants = q_params = q_modules = 0
    for part in quantized_parts(parts, str(config.get("model_type"))):
        n_in, n_out = part.linear
        n = n_in * n_out
        quantized += part.copies * ((n + 1) // (2 * s)) * s
        constants += part.copies * _constants(n, blocksize, double_quant)
        q_params += part.copies * n
        q_modules += part.copies
    unquantized = (total_params - q_params) * e
    return FrozenBase(quantized + constants + unquantized, quantized, constants, unquantized, q_params, q_modules)


def quantized_parts(parts: list[Part], model_type: str) -> list[Part]:
    """The parts bitsandbytes makes `Linear4bit` (see the module docstring)."""
    if model_type in _SUBCLASSED_LINEARS:
        return []
    head = parts[-1].name  # the output embedding is the last part of every family (and never quantized)
    return [p for p in parts if p.linear is not None and p.name != head and not p.tied and p.copies > 0]


def _constants(n: int, blocksize: int, double_quant: bool) -> int:
    blocks = -(-n // blocksize)
    if not double_quant:
        return blocks * 4 + _CODE_4BIT
    nested = -(-blocks // _NESTED_BLOCK)
    return blocks + 4 + nested * 4 + _CODE_DYNAMIC + _CODE_4BIT

"""Frozen-base bytes for LoRA and QLoRA: by hand, and against real bitsandbytes 4-bit models loaded on the CPU."""

from __future__ import annotations

import pytest

from zerokit.errors import BadInput
from zerokit.models import load_preset
from zerokit.models.quant import FrozenBase, frozen_base_bytes


def _preset(name: str) -> dict:
    return {k: v for k, v in load_preset(name).items() if not k.startswith("_")}


def test_llama_2_7b_nf4_double_quant_by_hand():
    # per layer: q, k, v, o are 4096 x 4096 (n = 16,777,216), gate, up, down 4096 x 11008 (n = 45,088,768)
    # packed: n / 2 bytes; double quantization: n / 64 uint8 absmax + 4 (offset) + n / 64 / 256 fp32 nested absmax
    # + 1,024 (dynamic code copy) + 64 (nf4 code)
    q_const = 262_144 + 4 + 1_024 * 4 + 1_024 + 64
    mlp_const = 704_512 + 4 + 2_752 * 4 + 1_024 + 64
    packed = 32 * (4 * 16_777_216 + 3 * 45_088_768) // 2
    constants = 32 * (4 * q_const + 3 * mlp_const)
    unquantized = 2 * (2 * 32_000 * 4_096 + 65 * 4_096)  # embed, lm_head (never quantized), 65 RMSNorms, in bf16
    base = frozen_base_bytes(_preset("llama-2-7b"), "qlora", "bf16")
    assert base == FrozenBase(packed + constants + unquantized, packed, constants, unquantized,
                              32 * (4 * 16_777_216 + 3 * 45_088_768), 32 * 7)
    assert base.total == 3_865_836_416  # 3.87 GB against 13.48 GB in bf16
    assert frozen_base_bytes(_preset("llama-2-7b"), "lora").total == 2 * 6_738_415_616


def test_single_quant_and_storage_dtype():
    c = _preset("llama-2-7b")
    single = frozen_base_bytes(c, quant_type="fp4", double_quant=False)
    # fp32 absmax per 64 weights: 4 / 64 = 0.5 bit per weight, against ~0.127 bit with double quantization
    assert single.constants == 32 * (4 * (262_144 * 4 + 64) + 3 * (704_512 * 4 + 64))
    # bnb_4bit_quant_storage changes the element type of the packed data, not its bytes (n even)
    assert frozen_base_bytes(c, quant_storage="bf16").total == frozen_base_bytes(c).total


def test_falcon_linears_stay_16_bit():
    # transformers quantizes modules whose type IS nn.Linear; FalconLinear is a subclass
    base = frozen_base_bytes(_preset("falcon-7b"), "qlora")
    assert base.quantized_modules == 0 and base.total == 2 * 6_921_720_704


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"method": "int8"}, "method must be lora or qlora"),
    ({"dtype": "fp8"}, "dtype must be one of bf16, fp16, fp32"),
    ({"quant_storage": "int4"}, "bnb_4bit_quant_storage must be one of"),
    ({"quant_type": "int4"}, "bnb_4bit_quant_type must be nf4 or fp4"),
    ({"blocksize": 100}, "blocksize must be a power of two"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(BadInput, match=match):
        frozen_base_bytes(_preset("llama-2-7b"), **kwargs)


# --- against bitsandbytes ------------------------------------------------------------------------------------------

S = {"hidden_size": 128, "num_hidden_layers": 2, "vocab_size": 1000, "num_attention_heads": 4, "intermediate_size": 200}
REAL = [
    ({"model_type": "llama", **S, "num_key_value_heads": 2, "attention_bias": True}, "uint8", True, "nf4"),
    ({"model_type": "llama", **S, "num_key_value_heads": 2}, "bf16", False, "fp4"),
    ({"model_type": "gpt2", "n_embd": 128, "n_layer": 2, "n_head": 4, "vocab_size": 1000, "n_positions": 64},
     "bf16", True, "nf4"),
    ({"model_type": "falcon", "hidden_size": 128, "num_hidden_layers": 2, "vocab_size": 1000,
      "num_attention_heads": 4}, "uint8", True, "nf4"),
    ({"model_type": "qwen2_moe", **S, "num_experts": 4, "moe_intermediate_size": 64,
      "shared_expert_intermediate_size": 96}, "fp32", True, "nf4"),
    ({"model_type": "mixtral", **S, "num_local_experts": 4}, "uint8", False, "nf4"),
    ({"model_type": "opt", "hidden_size": 128, "num_hidden_layers": 2, "ffn_dim": 200, "vocab_size": 1000,
      "num_attention_heads": 4, "word_embed_proj_dim": 64}, "uint8", True, "nf4"),
]


@pytest.mark.parametrize(("config", "storage", "double_quant", "quant_type"), REAL,
                         ids=[f"{c['model_type']}-{s}-{'dq' if d else 'sq'}-{q}" for c, s, d, q in REAL])
def test_equals_bitsandbytes_storage(config, storage, double_quant, quant_type, tmp_path):
    """Every parameter and quantization-state tensor of a real 4-bit model, each storage once, buffers excluded."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("bitsandbytes")
    transformers.logging.set_verbosity_error()
    dtypes = {"bf16": torch.bfloat16, "fp32": torch.float32, "uint8": torch.uint8}
    rest = {k: v for k, v in config.items() if k != "model_type"}
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(config["model_type"],
                                                                                            **rest))
    model.to(torch.bfloat16).save_pretrained(tmp_path)
    quant = transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=quant_type,
                                            bnb_4bit_use_double_quant=double_quant,
                                            bnb_4bit_compute_dtype=torch.bfloat16,
                                            bnb_4bit_quant_storage=dtypes[storage])
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, quantization_config=quant,
                                                               dtype=torch.bfloat16, device_map="cpu")
    storages: dict[int, int] = {}

    def add(t):
        if t is not None:
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()

    n_quantized = 0
    for p in loaded.parameters():
        add(p.data)
        state = getattr(p, "quant_state", None)
        if state is not None:
            n_quantized += 1
            for t in (state.absmax, state.code, state.offset):
                add(t)
            if state.state2 is not None:
                add(state.state2.absmax)
                add(state.state2.code)
    predicted = frozen_base_bytes(config, "qlora", "bf16", quant_storage=storage, double_quant=double_quant,
                                  quant_type=quant_type)
    assert predicted.total == sum(storages.values())
    assert predicted.quantized_modules == n_quantized

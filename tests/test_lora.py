"""LoRA adapter counts: arithmetic against peft.get_peft_model on the meta device, hand-checked values, bad input."""

from __future__ import annotations

import subprocess
import sys

import pytest

from zerokit.errors import BadInput
from zerokit.models import PRESET_NAMES, load_preset
from zerokit.models.lora import ALL_LINEAR, LoraCount, lora_parameters, valid_targets
from zerokit.models.params import FAMILIES


def _preset(name: str) -> dict:
    return {k: v for k, v in load_preset(name).items() if not k.startswith("_")}


@pytest.fixture(scope="module")
def peft_count():
    """Trainable parameters of peft.get_peft_model(AutoModelForCausalLM.from_config(config) on meta, LoraConfig(...))."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    transformers.logging.set_verbosity_error()

    def count(config: dict, rank: int, targets) -> int:
        rest = {k: v for k, v in config.items() if k != "model_type"}
        hf_config = transformers.AutoConfig.for_model(config["model_type"], **rest)
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(hf_config)
        lora = peft.LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=targets, task_type="CAUSAL_LM")
        wrapped = peft.get_peft_model(model, lora)
        return sum(p.numel() for p in wrapped.parameters() if p.requires_grad)

    return count


# --- hand-checked ------------------------------------------------------------------------------------------------


def test_llama_2_7b_rank_16_all_linear_is_the_published_figure():
    # 32 layers x 16 x [4 x (4096 + 4096) + 3 x (4096 + 11008)] = 39,976,960 (the figure PEFT prints for Llama-2-7B)
    count = lora_parameters(_preset("llama-2-7b"), 16)
    assert count.trainable == 39_976_960
    assert count.modules == 32 * 7
    assert count.per_module["self_attn.q_proj"] == 32 * 16 * (4096 + 4096)
    assert count.per_module["mlp.down_proj"] == 32 * 16 * (11008 + 4096)
    assert count.target_modules == ALL_LINEAR
    assert isinstance(count, LoraCount) and count.rank == 16


def test_q_v_only_and_gqa_shapes():
    # Llama-3-8B: k/v project 4096 -> 1024 (8 kv heads of 128): v_proj adds 16 x (4096 + 1024) per layer
    count = lora_parameters(_preset("llama-3-8b"), 16, "q_proj,v_proj")
    assert count.trainable == 32 * 16 * ((4096 + 4096) + (4096 + 1024))
    assert count.adapted == {"self_attn.q_proj", "self_attn.v_proj"}
    assert count.target_modules == ("q_proj", "v_proj")


def test_gpt2_conv1d_suffix_matching():
    # c_proj matches attn.c_proj (768 -> 768) and mlp.c_proj (3072 -> 768): PEFT matches by dotted suffix
    count = lora_parameters(_preset("gpt2"), 8, ["c_attn", "c_proj"])
    assert count.trainable == 12 * 8 * ((768 + 2304) + (768 + 768) + (3072 + 768))


def test_mixtral_experts_become_parameter_targets_with_doubled_gate_up_rank():
    # transformers 5 stacks the experts; PEFT maps w1+w3 -> gate_up_proj at rank 2r, w2 -> down_proj, gate -> router
    c = _preset("mixtral-8x7b")
    h, i, e, r, layers = 4096, 14336, 8, 4, 32
    experts = lora_parameters(c, r, "experts")
    assert experts.target_modules == ("w1", "w3", "w2")
    assert experts.trainable == layers * (2 * r * e * (h + 2 * i) + r * e * (i + h))
    router = lora_parameters(c, r, "gate")
    assert router.trainable == layers * r * (h + e)
    attention = lora_parameters(c, r, "q_proj,k_proj,v_proj,o_proj").trainable
    assert lora_parameters(c, r).trainable == experts.trainable + router.trainable + attention


def test_moe_dropout_is_refused_like_peft():
    with pytest.raises(BadInput, match=r"cannot put LoRA dropout on MoE expert or router parameters.*--lora-dropout 0"):
        lora_parameters(_preset("mixtral-8x7b"), 16, dropout=0.05)
    assert lora_parameters(_preset("mixtral-8x7b"), 16, "q_proj,v_proj", dropout=0.05).trainable > 0


@pytest.mark.parametrize(("model", "targets", "match"), [
    ("llama-2-7b", "c_attn", (r"'c_attn' is not a module of llama that LoRA can adapt; valid: all-linear, or a comma "
                             r"list of q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, lm_head")),
    ("gpt2", "q_proj,v_proj", r"'q_proj', 'v_proj' are not modules of gpt2 .* c_attn, c_proj, c_fc, lm_head"),
    ("falcon-7b", "dense_h_to_4h,qkv", r"'qkv' is not a module of falcon .*query_key_value, dense, dense_h_to_4h"),
    ("gpt-neox-20b", "", r"--lora-targets is empty"),
    # it said "'all-linear' is not a module of llama ...; valid: all-linear, or ..."
    ("llama-2-7b", "all-linear,q_proj", (r"all-linear adapts every linear but the head on its own; give it alone, or a "
                                        r"comma list of llama modules: q_proj, k_proj")),
    # PEFT can put LoRA on an nn.Embedding; zerokit prices linears only, and says how to train the embedding instead
    ("llama-2-7b", "q_proj,embed_tokens", (r"'embed_tokens' is llama's input embedding, and zerokit plans LoRA on linear "
                                           r"layers only; to train the embedding \(new tokens\), give "
                                           r"--lora-modules-to-save embed_tokens \(PEFT trains a whole copy of it\), and "
                                           r"adapt linears: q_proj, k_proj")),
    ("gpt2", "wte", r"'wte' is gpt2's input embedding.*--lora-modules-to-save wte .*: c_attn, c_proj, c_fc, lm_head$"),
    ("mixtral-8x7b", "w1", r"w1 is fused with w3 into mixtral's gate_up_proj.*target them together \(or use experts\)"),
    ("mixtral-8x7b", "experts,gate_proj", (r"'gate_proj' is not a module of mixtral.*o_proj, lm_head, gate, w1, w3, w2, "
                                          r"experts")),
])
def test_bad_targets_list_the_valid_names(model, targets, match):
    with pytest.raises(BadInput, match=match):
        lora_parameters(_preset(model), 16, targets)


@pytest.mark.parametrize("rank", [0, -1, 1.5, True])
def test_bad_rank(rank):
    with pytest.raises(BadInput, match="LoRA rank must be a whole number >= 1"):
        lora_parameters(_preset("llama-2-7b"), rank)


def test_valid_targets_per_family():
    assert valid_targets({"model_type": "gpt_neox"}) == ("query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h",
                                                         "lm_head")  # transformers 5's name (4: embed_out)
    assert valid_targets({"model_type": "phi3"}) == ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "lm_head")
    assert "experts" not in valid_targets({"model_type": "qwen2_moe"})  # peft 0.21 has no conversion for it


def test_counting_does_not_import_torch_or_peft():
    code = ("import sys; from zerokit.models.lora import lora_parameters; "
            "lora_parameters({'model_type': 'llama'}, 16); "
            "sys.exit(1 if {'torch', 'peft', 'transformers'} & set(sys.modules) else 0)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# --- against peft.get_peft_model ----------------------------------------------------------------------------------

S = {"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 100, "num_attention_heads": 4, "intermediate_size": 96}
MOE = {"num_experts": 4, "moe_intermediate_size": 32}
FAMILY_CASES = {
    "llama": ({**S, "num_key_value_heads": 2, "attention_bias": True, "mlp_bias": True},
              ["q_proj,v_proj", "down_proj", "o_proj,lm_head"]),
    "granite": ({**S, "num_key_value_heads": 2}, ["q_proj,k_proj"]),
    "mistral": ({**S, "num_key_value_heads": 2}, ["q_proj,v_proj"]),
    "mixtral": ({**S, "num_key_value_heads": 2, "num_local_experts": 4}, ["experts", "gate", "q_proj,w2", "w1,w3"]),
    "qwen2": ({**S, "num_key_value_heads": 2}, ["q_proj,v_proj"]),
    "qwen2_moe": ({**S, **MOE, "shared_expert_intermediate_size": 48, "mlp_only_layers": [0]},
                  ["down_proj", "shared_expert_gate", "q_proj,gate_proj"]),
    "qwen3": ({**S, "num_key_value_heads": 2, "head_dim": 8}, ["q_proj,v_proj"]),
    "qwen3_moe": ({**S, **MOE, "mlp_only_layers": [1]}, ["experts", "gate", "down_proj", "q_proj,v_proj"]),
    "gemma": ({**S, "pad_token_id": 0, "head_dim": 8}, ["q_proj,v_proj"]),
    "gemma2": ({**S, "pad_token_id": 0, "head_dim": 8}, ["gate_proj,up_proj"]),
    "gemma3_text": ({**S, "pad_token_id": 0, "head_dim": 8}, ["q_proj,v_proj"]),
    "phi3": ({**S, "pad_token_id": None}, ["qkv_proj", "gate_up_proj,down_proj"]),
    "gpt2": ({"n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 50, "vocab_size": 100}, ["c_attn", "c_proj"]),
    "gpt_neox": (S, ["query_key_value,dense", "dense_h_to_4h"]),
    "opt": ({"hidden_size": 64, "num_hidden_layers": 2, "ffn_dim": 96, "vocab_size": 100, "num_attention_heads": 4,
             "word_embed_proj_dim": 32, "pad_token_id": 1}, ["q_proj,v_proj", "project_in,fc1"]),
    "falcon": ({"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 100, "num_attention_heads": 4},
               ["query_key_value", "dense"]),
}


def test_family_cases_cover_every_family():
    assert set(FAMILY_CASES) == set(FAMILIES)


@pytest.mark.parametrize(("family", "targets"), [(f, t) for f, (_, ts) in sorted(FAMILY_CASES.items())
                                                 for t in [ALL_LINEAR, *ts]])
def test_family_count_equals_peft(family, targets, peft_count):
    config = {"model_type": family, **FAMILY_CASES[family][0]}
    count = lora_parameters(config, 4, targets)
    emitted = count.target_modules if count.target_modules == ALL_LINEAR else list(count.target_modules)
    assert count.trainable == peft_count(config, 4, emitted)


@pytest.mark.slow  # 50 meta-device instantiations with PEFT wrapping: minutes on 2 cores
@pytest.mark.parametrize("name", PRESET_NAMES)
def test_preset_all_linear_equals_peft(name, peft_count):
    config = _preset(name)
    assert lora_parameters(config, 16).trainable == peft_count(config, 16, ALL_LINEAR)


def test_one_layers_module_is_refused_as_such_not_as_no_module(peft_count):
    """'model.layers.0.self_attn.q_proj' is a module PEFT adapts (its dotted name matches), in layer 0 alone; the
    refusal said it 'is not a module of llama that LoRA can adapt'. zerokit plans every layer alike, and says so."""
    config = {"model_type": "llama", **FAMILY_CASES["llama"][0]}
    assert peft_count(config, 4, ["model.layers.0.self_attn.q_proj"]) == 4 * (64 + 64)  # PEFT takes it: one layer
    with pytest.raises(BadInput, match=r"^--lora-targets: 'model.layers.0.self_attn.q_proj' names one layer's module, "
                                       r"and zerokit plans adapters on every layer alike; give q_proj \(PEFT matches it "
                                       r"in each layer\), or a comma list of llama modules: q_proj, k_proj"):
        lora_parameters(config, 4, "model.layers.0.self_attn.q_proj")
    assert lora_parameters(config, 4, "self_attn.q_proj").trainable == 2 * 4 * (64 + 64)  # a suffix of every layer's

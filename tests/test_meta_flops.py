"""An architecture zerokit does not count by arithmetic (instantiated on the meta device) is priced as the llama of its
shape with its own matmuls per token and its own ZeRO-3 modules: held against the arithmetic families, whose counts
are exact, by sending their configs down the meta path."""

from __future__ import annotations

import pytest

from zerokit.memory.estimate import module_trace
from zerokit.models.resolve import _spec_from_meta, resolve_model, spec_from_config
from zerokit.perf.flops import meta_model_flops, model_flops

pytest.importorskip("torch")
pytest.importorskip("transformers")

LLAMA = {"model_type": "llama", "hidden_size": 128, "intermediate_size": 352, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "tie_word_embeddings": False}
MIXTRAL = {"model_type": "mixtral", "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "num_local_experts": 8,
           "num_experts_per_tok": 2, "tie_word_embeddings": False}
QWEN2_MOE = {"model_type": "qwen2_moe", "hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "num_experts": 8,
             "num_experts_per_tok": 2, "moe_intermediate_size": 64, "shared_expert_intermediate_size": 256,
             "decoder_sparse_step": 1, "tie_word_embeddings": False}


def _by_size(sizes) -> dict[int, float]:
    """(parameters, copies) entries summed per size: the arithmetic lists a size once per kind of module."""
    out: dict[int, float] = {}
    for n, copies in sizes:
        out[n] = out.get(n, 0) + copies
    return out


@pytest.mark.parametrize("config", [LLAMA, MIXTRAL, QWEN2_MOE], ids=lambda c: c["model_type"])
def test_the_meta_path_prices_a_known_family_as_its_arithmetic_does(config):
    arithmetic = model_flops(config)
    meta = meta_model_flops(_spec_from_meta(config, config["model_type"]))
    # the same weight-matmul FLOPs a token (the MLP's width rounded to a whole number: under 0.5%)
    assert meta.matmul_flops_per_token == pytest.approx(arithmetic.matmul_flops_per_token, rel=5e-3)
    # and the same modules for ZeRO-3 to gather and hook
    assert _by_size(meta.module_sizes) == _by_size(arithmetic.module_sizes)
    assert meta.parameter_modules == arithmetic.parameter_modules
    assert meta.gathered(1280) == arithmetic.gathered(1280)


def test_a_dense_meta_model_keeps_its_mlp_width():
    spec = _spec_from_meta(LLAMA, "llama")
    # 2 layers x (q 128x128, k and v 128x64, o 128x128, gate/up/down 3 x 128x352): embeddings and head left out
    assert spec.active_matmul_parameters == 2 * (2 * 128 * 128 + 2 * 128 * 64 + 3 * 128 * 352)
    assert meta_model_flops(spec).intermediate_size == 352


def test_routed_experts_count_at_top_k_and_shared_ones_whole():
    spec = _spec_from_meta(QWEN2_MOE, "qwen2_moe")
    attention = 2 * 128 * 128 + 2 * 128 * 64
    experts = 8 * 3 * 128 * 64  # routed: 2 of 8 a token
    shared = 3 * 128 * 256 + 128  # the shared expert and its gate, every token
    router = 128 * 8
    assert spec.active_matmul_parameters == 2 * (attention + experts * 2 // 8 + shared + router)


def test_experts_without_a_top_k_in_the_config_fall_back_to_the_config_shape():
    spec = _spec_from_meta(MIXTRAL, "mixtral")
    config = {k: v for k, v in spec.config.items() if k != "num_experts_per_tok"}
    import torch
    import transformers

    from zerokit.models.resolve import active_matmul_parameters

    hf = transformers.AutoConfig.for_model("mixtral", **{k: v for k, v in MIXTRAL.items() if k != "model_type"})
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf)
    assert active_matmul_parameters(torch, model, config) == 0
    assert active_matmul_parameters(torch, model, spec.config) == spec.active_matmul_parameters > 0


@pytest.mark.parametrize("name", ["mixtral-8x7b", "qwen3-30b-a3b", "qwen1.5-moe-a2.7b"])
def test_full_size_moe_presets_down_the_meta_path(name):
    # measured: matmul FLOPs a token within 0.004% of the arithmetic (the MLP width rounded), gathers and modules equal
    spec = resolve_model(name)
    arithmetic, meta = model_flops(spec.config), meta_model_flops(_spec_from_meta(dict(spec.config), name))
    assert meta.matmul_flops_per_token == pytest.approx(arithmetic.matmul_flops_per_token, rel=1e-4)
    threshold = 10 * spec.hidden_size  # the HF Trainer's "auto" persistence threshold
    assert meta.gathered(threshold) == arithmetic.gathered(threshold)
    assert meta.parameter_modules == arithmetic.parameter_modules


@pytest.mark.parametrize("config", [LLAMA, {**LLAMA, "tie_word_embeddings": True}, MIXTRAL, QWEN2_MOE],
                         ids=["llama", "llama-tied", "mixtral", "qwen2_moe"])
@pytest.mark.parametrize("threshold", [0, 1280, 10**5])
def test_the_zero3_memory_trace_of_the_meta_model_is_the_arithmetic_one(config, threshold):
    # (parameters per module in forward order, those below the persistence threshold as 0; parameters below the
    # threshold): the embedding, each layer's modules, the head (a tied one again); the arithmetic builds it from
    # its part lists in the order a layer uses its modules (the step time's `forward_trace`), the meta path from
    # the instantiated model's own modules in registration order (its step time's): the same modules
    arithmetic, meta = spec_from_config(config, "arithmetic"), _spec_from_meta(config, "meta")
    _same_modules(module_trace(meta, threshold), module_trace(arithmetic, threshold), config["num_hidden_layers"])


def _same_modules(meta: tuple, arithmetic: tuple, layers: int) -> None:
    """Two `module_trace`s with the same modules, each layer's in its own order, and the same persistent count."""
    (m, m_persistent, _), (a, a_persistent, _) = meta, arithmetic
    assert m_persistent == a_persistent and len(m) == len(a) and m[0] == a[0] and m[-1] == a[-1]
    per = (len(m) - 3) // layers  # the embedding before the stack, the norm and the head after it
    assert len(m) == 1 + per * layers + 2
    for layer in range(layers):
        span = slice(1 + layer * per, 1 + (layer + 1) * per)
        assert sorted(m[span]) == sorted(a[span])


@pytest.mark.parametrize("name", ["mixtral-8x7b", "qwen3-30b-a3b", "gemma-2-2b"])
def test_full_size_presets_trace_alike_down_the_meta_path(name):
    spec = resolve_model(name)
    meta = _spec_from_meta(dict(spec.config), name)
    threshold = 10 * spec.hidden_size
    _same_modules(module_trace(meta, threshold), module_trace(spec, threshold), spec.num_layers)


@pytest.mark.parametrize("name", ["mixtral-8x7b", "qwen3-30b-a3b", "qwen1.5-moe-a2.7b", "gemma-2-2b"])
def test_the_experts_views_of_the_meta_model_are_the_arithmetic_ones(name):
    # the stacked experts an MoE's matmuls take as views (`kept_with_views`): the arithmetic from its part lists,
    # the meta path from the modules transformers' use_experts_implementation decorates; Mixtral-8x7B's are
    # 8 x 3 x 4096 x 14336 a layer, a dense model's none
    from zerokit.memory.estimate import held_trace

    spec = resolve_model(name)
    meta = _spec_from_meta(dict(spec.config), name)
    threshold = 10 * spec.hidden_size
    meta_held, held = held_trace(meta, threshold), held_trace(spec, threshold)
    assert sorted(meta_held) == sorted(held) and len(held) in (0, len(module_trace(spec, threshold)[0]))
    for h, trace in ((meta_held, module_trace(meta, threshold)[0]), (held, module_trace(spec, threshold)[0])):
        assert all(n >= v for n, v in zip(trace, h))  # each held on its own module
    if name == "mixtral-8x7b":  # the experts module of each layer, nothing else
        experts = 8 * 3 * 4096 * 14336
        assert sorted(v for v in held if v) == [experts] * 32 and sum(held) == 32 * experts
    if name == "gemma-2-2b":
        assert held_trace(meta, threshold) == () and meta.expert_views == ()


def test_only_untransposed_stacked_experts_are_views():
    # OLMoE (meta only): 8 experts x 3 x 256 x 128 a layer, taken as grouped_mm's weight.transpose(-2, -1);
    # gpt_oss stores its experts transposed (use_experts_implementation(is_transposed=True)) and passes them whole
    from zerokit.memory.estimate import held_trace

    olmoe = _spec_from_meta({"model_type": "olmoe", "hidden_size": 256, "intermediate_size": 128,
                             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
                             "vocab_size": 1000, "num_experts": 8, "num_experts_per_tok": 2}, "olmoe")
    assert sorted(v for v in held_trace(olmoe, 0) if v) == [8 * 3 * 256 * 128] * 2
    gpt_oss = _spec_from_meta({"model_type": "gpt_oss", "hidden_size": 256, "intermediate_size": 128,
                               "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                               "head_dim": 64, "vocab_size": 1000, "num_local_experts": 4,
                               "num_experts_per_tok": 2}, "gpt_oss")
    assert gpt_oss.expert_views == () and held_trace(gpt_oss, 0) == ()


def test_experts_stacked_under_another_name_count_at_top_k():
    # JetMoE's MLP experts are one [experts, out, in] tensor named mlp.input_linear / mlp.output_linear, its
    # attention experts self_attention.experts.*: both routed, 2 of 4 a token; routers and kv_proj every token
    config = {"model_type": "jetmoe", "hidden_size": 64, "num_hidden_layers": 2, "num_key_value_heads": 2,
              "kv_channels": 16, "num_local_experts": 4, "num_experts_per_tok": 2, "intermediate_size": 32,
              "vocab_size": 100}
    spec = _spec_from_meta(config, "jetmoe")
    mlp = 4 * 64 * 64 + 4 * 64 * 32  # input_linear [4, 64, 64] (gated: 2 x 32), output_linear [4, 64, 32]
    attention_experts = 4 * 32 * 64 + 4 * 64 * 32  # input_linear [4, 32, 64], output_linear [4, 64, 32]
    every_token = 4 * 64 + 4 * 64 + 64 * 64  # the two routers, kv_proj
    assert spec.active_matmul_parameters == 2 * ((mlp + attention_experts) * 2 // 4 + every_token)


def test_experts_whose_top_k_sits_in_a_sub_config_count_at_top_k():
    # DBRX keeps moe_top_k and moe_num_experts in its ffn_config: it was priced as the dense llama of 4 x hidden, and
    # the plan said "no top-k for its experts"
    config = {"model_type": "dbrx", "d_model": 64, "n_heads": 4, "n_layers": 2, "vocab_size": 100,
              "attn_config": {"kv_n_heads": 2, "rope_theta": 10000},
              "ffn_config": {"ffn_hidden_size": 32, "moe_num_experts": 4, "moe_top_k": 2}}
    spec = _spec_from_meta(config, "dbrx")
    attention = 64 * (64 + 2 * 32) + 64 * 64  # Wqkv (q 64, k and v 2 heads of 16), out_proj
    experts = 4 * 3 * 64 * 32  # w1, v1, w2 of 4 experts, 2 a token
    router = 4 * 64
    assert spec.active_matmul_parameters == 2 * (attention + experts * 2 // 4 + router)

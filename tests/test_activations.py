"""Activation memory: the analytic model against live measurements of real transformers models on the CPU.

Expected numbers are never stored: each live test builds a tiny model from a config, counts the bytes autograd
saves (zerokit.memory.calibrate.measure, the method of shared/measure_activations.py) and compares.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import timeit

import pytest

from zerokit.memory.activations import MODELLED_FAMILIES, NO_SDPA, ActivationEstimate, LoraSetup, estimate_activations

LLAMA_8B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
            "num_key_value_heads": 8, "num_hidden_layers": 32, "vocab_size": 128256}

# tiny miniatures keeping the structural features (GQA, q/k norms, dropout defaults, MoE top-k)
TINY = {
    "llama": {"model_type": "llama", "hidden_size": 256, "intermediate_size": 896, "num_attention_heads": 4,
              "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 4000},
    "gpt2": {"model_type": "gpt2", "n_embd": 256, "n_head": 4, "n_layer": 2, "vocab_size": 4000},
    "qwen3": {"model_type": "qwen3", "hidden_size": 256, "intermediate_size": 768, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 128, "num_hidden_layers": 2, "vocab_size": 4000},
    "mixtral": {"model_type": "mixtral", "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
                "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 4000, "num_local_experts": 4,
                "num_experts_per_tok": 2},
}


# ------------------------------------------------------------------------------------------ pure arithmetic
def test_returns_estimate_with_documented_fields():
    est = estimate_activations(LLAMA_8B, 2048, 1)
    assert isinstance(est, ActivationEstimate)
    assert est.activations > 0 and est.transient > 0
    assert est.generic is False and est.note is None


def test_monotonic_in_seq_and_batch():
    for att in ("sdpa", "eager"):
        for ck in (False, True):
            by_seq = [estimate_activations(LLAMA_8B, s, 2, attention=att, gradient_checkpointing=ck).activations
                      for s in (256, 512, 1024, 2048)]
            by_batch = [estimate_activations(LLAMA_8B, 1024, b, attention=att, gradient_checkpointing=ck).activations
                        for b in (1, 2, 3, 4)]
            assert by_seq == sorted(by_seq) and len(set(by_seq)) == 4
            assert by_batch == sorted(by_batch) and len(set(by_batch)) == 4


# On the CPU, sdpa falls back to the fp32 math kernel for gpt2 (dropout 0.1) and falcon-7b style multi-query
# (explicit mask, unequal heads), which keeps more than eager; these overrides select the flash-style kernel.
FLASH_STYLE = {"gpt2": {"attn_pdrop": 0.0}, "falcon": {"new_decoder_architecture": True, "num_kv_heads": 8}}


@pytest.mark.parametrize("family", MODELLED_FAMILIES)
def test_eager_above_sdpa_and_checkpointing_below_full(family):
    cfg = {"model_type": family, **FLASH_STYLE.get(family, {})}  # each family fills in its transformers defaults
    # a family without sdpa runs eager when sdpa is asked; flash is its kernel without score matrices
    fused = "flash" if family in NO_SDPA else "sdpa"
    sdpa = estimate_activations(cfg, 2048, 2, attention=fused, device="cpu")
    eager = estimate_activations(cfg, 2048, 2, attention="eager", device="cpu")
    ckpt = estimate_activations(cfg, 2048, 2, attention=fused, gradient_checkpointing=True, device="cpu")
    assert eager.activations > sdpa.activations
    assert ckpt.activations < sdpa.activations
    assert ckpt.transient >= sdpa.transient  # the recomputed layer comes on top during backward
    flash = estimate_activations(cfg, 2048, 2, attention="flash", device="cpu")
    assert flash.activations <= sdpa.activations  # flash never needs a materialised mask or the math kernel
    if family in ("llama", "mistral", "qwen2", "qwen3", "mixtral", "granite"):
        assert flash.activations == sdpa.activations


def test_flash_has_no_cpu_math_fallback():
    gpt2 = {"model_type": "gpt2"}  # dropout 0.1: CPU sdpa takes the fp32 math kernel, flash-attn does not
    flash = estimate_activations(gpt2, 1024, 1, attention="flash", device="cpu").activations
    assert flash < estimate_activations(gpt2, 1024, 1, attention="sdpa", device="cpu").activations
    assert flash == estimate_activations({**gpt2, "attn_pdrop": 0.0}, 1024, 1, attention="sdpa",
                                         device="cpu").activations


def test_cpu_math_fallback_makes_gpt2_sdpa_exceed_eager():
    cfg = {"model_type": "gpt2"}  # attn_pdrop 0.1: CPU sdpa uses the math kernel in fp32 (measured below)
    assert (estimate_activations(cfg, 1024, 1, device="cpu").activations
            > estimate_activations(cfg, 1024, 1, attention="eager", device="cpu").activations)


def test_transient_covers_the_fp32_logits_gradient():
    est = estimate_activations(LLAMA_8B, 4096, 2)
    assert est.transient >= 4096 * 2 * 128256 * 8  # fp32 grad of log-probs + fp32 grad of logits


def test_llama_layer_bytes_match_the_issue_order_of_magnitude():
    # issue 5: llama holds about 43 bytes per (seq x batch x hidden) element per layer with sdpa in bf16
    one = estimate_activations(LLAMA_8B, 2048, 1).activations
    two = estimate_activations({**LLAMA_8B, "num_hidden_layers": 33}, 2048, 1).activations
    per_element = (two - one) / (2048 * 4096)
    assert 35 < per_element < 50


def test_unknown_family_is_generic_with_a_note():
    est = estimate_activations({"model_type": "my_new_lm", "hidden_size": 1024, "num_attention_heads": 8,
                                "num_hidden_layers": 4, "vocab_size": 1000}, 512, 1)
    assert est.generic is True
    assert "not modelled" in est.note and "calibrate" in est.note
    assert estimate_activations({"model_type": "llama"}, 512, 1).generic is False


def test_gemma2_sdpa_is_the_eager_a_run_gets_and_says_how_to_get_flash():
    """transformers 5.23 has no sdpa for gemma2 (Gemma2PreTrainedModel._supports_sdpa = False): a load that names no
    kernel falls back to eager, attn_implementation="sdpa" raises. Either way the run keeps eager's score matrices."""
    gemma2 = {"model_type": "gemma2"}
    for ckpt in (True, False):
        sdpa = estimate_activations(gemma2, 1024, 4, gradient_checkpointing=ckpt)
        eager = estimate_activations(gemma2, 1024, 4, attention="eager", gradient_checkpointing=ckpt)
        assert dataclasses.replace(sdpa, note=None) == eager
    assert eager.note is None
    assert sdpa.note.startswith("gemma2 has no sdpa attention in transformers: a default load runs eager attention")
    assert "pass --attention flash" in sdpa.note and "attn_implementation='flash_attention_2'" in sdpa.note
    flash = estimate_activations(gemma2, 1024, 4, attention="flash")
    assert flash.activations < sdpa.activations and flash.note is None
    assert estimate_activations({"model_type": "gemma"}, 1024, 4).note is None  # gemma (1) has sdpa


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"dtype": "int8"}, "dtype must be one of"),
    ({"attention": "xformers"}, "attention must be one of"),
    ({"device": "tpu"}, "device must be one of"),
])
def test_bad_arguments_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        estimate_activations(LLAMA_8B, 512, 1, **kwargs)


def test_bad_sizes_raise():
    with pytest.raises(ValueError, match="must be >= 1"):
        estimate_activations(LLAMA_8B, 0, 1)


def test_fast_enough_for_the_planner():
    n = 2000
    per_call = timeit.timeit(lambda: estimate_activations(LLAMA_8B, 2048, 4, gradient_checkpointing=True),
                             number=n) / n
    assert per_call < 50e-6


def test_pure_module_does_not_import_torch():
    code = ("import sys, zerokit.memory.activations, zerokit.memory.calibrate; "
            "sys.exit(1 if {'torch', 'transformers'} & set(sys.modules) else 0)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# ----------------------------------------------------------------------------------------- live measurement
LIVE = [
    ("llama", 256, 2, "sdpa", False), ("llama", 256, 1, "eager", False), ("llama", 512, 2, "sdpa", True),
    ("gpt2", 256, 2, "sdpa", False), ("gpt2", 256, 1, "eager", False), ("gpt2", 256, 2, "eager", True),
    ("qwen3", 256, 2, "sdpa", False), ("qwen3", 512, 1, "eager", False), ("qwen3", 256, 2, "eager", True),
    ("mixtral", 256, 2, "sdpa", False), ("mixtral", 256, 1, "eager", False), ("mixtral", 512, 2, "sdpa", True),
]


@pytest.mark.parametrize(("family", "seq", "batch", "attention", "ckpt"), LIVE)
def test_prediction_within_10_percent_of_live_measurement(family, seq, batch, attention, ckpt):
    pytest.importorskip("transformers")
    from zerokit.memory.calibrate import measure

    cfg = TINY[family]
    measured = measure(cfg, seq, batch, attention, "bf16", ckpt)["activations"]
    predicted = estimate_activations(cfg, seq, batch, attention=attention, gradient_checkpointing=ckpt,
                                     device="cpu").activations
    assert abs(predicted - measured) <= 0.10 * measured, (predicted, measured)


def test_eager_measures_above_sdpa_live():
    pytest.importorskip("transformers")
    from zerokit.memory.calibrate import measure

    sdpa = measure(TINY["llama"], 256, 1, "sdpa")["activations"]
    eager = measure(TINY["llama"], 256, 1, "eager")["activations"]
    assert eager > sdpa


def test_calibrate_extrapolates_layers_exactly_for_an_unmodelled_family():
    pytest.importorskip("transformers")
    from zerokit.memory.calibrate import calibrate, measure

    # olmo is a decoder-only family the analytic model does not know: calibration must still be exact
    cfg = {"model_type": "olmo", "hidden_size": 256, "intermediate_size": 688, "num_attention_heads": 4,
           "num_hidden_layers": 4, "vocab_size": 4000}
    measured = measure(cfg, 256, 2)["activations"]
    est = calibrate(cfg, 256, 2)
    assert est.generic is False and est.note == "measured on a CPU miniature"
    assert abs(est.activations - measured) <= 0.01 * measured, (est.activations, measured)


def test_transient_matches_the_measured_loss_backward_peak():
    pytest.importorskip("transformers")
    from zerokit.memory.calibrate import measure

    # sdpa without checkpointing: the peak is the fp32 log-prob and logits gradients at the start of backward
    measured = measure(TINY["llama"], 256, 2, transient=True)["transient"]
    predicted = estimate_activations(TINY["llama"], 256, 2, device="cpu").transient
    assert abs(predicted - measured) <= 0.10 * measured, (predicted, measured)


# ------------------------------------------------------------------------------------- CUDA path, by hand
def test_gpt2_on_cuda_by_hand():
    # gpt2 small (h 768, 12 layers, 12 heads, i 3072, V 50257, dropout 0.1 everywhere), bf16, sdpa, seq 1024, mb 1.
    # CUDA: sdpa takes dropout in its fused kernel (q, k, v = the c_attn storage 3 x 768, output 768, fp32 lse
    # 12 heads) and dropout masks are 1-byte bools. Per layer and token: 2 LayerNorms 2 x (1536 + 4 + 1536)
    # + attention 2 x 4 x 768 + 48 + gelu_new/c_proj 5 x 2 x 3072 + 2 residual masks 2 x 768 = 44,600.
    # Outside the layers: ids 8 + embedding mask 768; final LayerNorm 3,076 + fp32 log-probs 4 x 50257 + labels 8;
    # position ids 8 per position; the loss scalar 4; micro-batch 1 keeps one more label (8).
    layer = 2 * (1536 + 4 + 1536) + 2 * 4 * 768 + 48 + 5 * 2 * 3072 + 2 * 768
    assert layer == 44_600
    expected = 1024 * (8 + 768 + 12 * layer + 3_076 + 4 * 50_257 + 8) + 8 * 1024 + 4 + 8
    assert estimate_activations({"model_type": "gpt2"}, 1024, 1, device="cuda").activations == expected == 757_858_316
    # the CPU runs sdpa's fp32 math kernel with dropout and keeps masks in bf16: 3.5x more (measured, golden data)
    assert estimate_activations({"model_type": "gpt2"}, 1024, 1, device="cpu").activations == 2_645_491_724


def test_cuda_dropout_masks_are_one_byte():
    cfg = {"model_type": "llama", "attention_dropout": 0.1, "num_hidden_layers": 2}
    cuda = estimate_activations(cfg, 1024, 2, attention="eager", device="cuda").activations
    cpu = estimate_activations(cfg, 1024, 2, attention="eager", device="cpu").activations
    # eager attention keeps a mask per score: 32 heads x 1024 x 1024 x 2 sequences x 2 layers, bf16 on the CPU
    assert cpu - cuda == 32 * 1024 * 1024 * 2 * 2 * (2 - 1)
    # sdpa on CUDA: dropout inside the flash kernel, nothing more kept than without dropout
    assert (estimate_activations(cfg, 1024, 2, device="cuda").activations
            == estimate_activations({**cfg, "attention_dropout": 0.0}, 1024, 2, device="cuda").activations)


def test_falcon_7b_multi_query_on_cuda_by_hand():
    # falcon-7b (h 4544, 71 heads of 64, one kv head, i 18176, V 65024, 32 layers): transformers always passes a
    # mask; CUDA's efficient kernel takes it with a single k/v head instead of the CPU's fp32 math kernel.
    # Per layer and token: LayerNorm 9088 + 4 + 9088; q 9088, k 128, the fused qkv storage behind v
    # 2 x (4544 + 128), output 9088, lse 4 x 71; MLP 2 x 2 x 18176.
    layer = 18_180 + 2 * (3 * 4544 + 3 * 64) + 4 * 71 + 2 * 2 * 18_176
    per_token = 8 + 32 * layer + 18_180 + 4 * 65_024 + 8
    # plus one bf16 float mask per layer (2 bytes x 2048 positions per token), cos/sin 2 x 2 x 64 per position,
    # two int64 scalars per layer, the loss scalar and micro-batch 1's extra label
    expected = 2048 * per_token + 2048 * 32 * 2 * 2048 + 256 * 2048 + 16 * 32 + 4 + 8
    assert estimate_activations({"model_type": "falcon"}, 2048, 1, device="cuda").activations == expected
    assert estimate_activations({"model_type": "falcon"}, 2048, 1, device="cpu").activations > 5 * expected


def test_device_default_is_cuda_and_matches_cpu_without_dropout_or_masks():
    cfg = {"model_type": "llama", "num_hidden_layers": 4}
    assert estimate_activations(cfg, 2048, 2) == estimate_activations(cfg, 2048, 2, device="cuda")
    for attention in ("sdpa", "eager", "flash"):
        assert (estimate_activations(cfg, 2048, 2, attention=attention, device="cuda")
                == estimate_activations(cfg, 2048, 2, attention=attention, device="cpu"))


# ------------------------------------------------------------------------------------------ LoRA, by hand
TINY_LLAMA = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4,
              "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 100}


def test_lora_with_checkpointing_by_hand():
    # PEFT + checkpointing (enable_input_require_grads): each layer keeps its bf16 input (2 x 64), then the final
    # RMSNorm its fp32 input and rstd (4 x 64 + 4; frozen weight: no normalised copy), the frozen lm_head nothing,
    # the loss its fp32 log-probs and labels (4 x 100 + 8), plus the loss scalar. Measured: 14,788 bytes (seq 8, mb 2).
    expected = 16 * (2 * 2 * 64 + 4 * 64 + 4 + 4 * 100 + 8) + 4
    lora = LoraSetup(4)
    assert estimate_activations(TINY_LLAMA, 8, 2, gradient_checkpointing=True, device="cpu",
                                lora=lora).activations == expected == 14_788


def test_lora_dropout_masks_on_cuda_are_one_byte():
    # each adapter keeps its dropout mask over the fp32 input: 4 bytes per element on the CPU, 1 on CUDA.
    # Per layer the adapters read 5 x 64 (q, k, v, gate, up) + 64 (o) + 96 (down) = 480 elements per token; the
    # first layer's q, k, v adapters keep no mask (their input needs no gradient): 2 x 480 - 3 x 64 per token.
    lora = LoraSetup(4, "all-linear", dropout=0.1)
    cpu = estimate_activations(TINY_LLAMA, 8, 2, device="cpu", lora=lora).activations
    cuda = estimate_activations(TINY_LLAMA, 8, 2, device="cuda", lora=lora).activations
    assert cpu - cuda == 16 * (4 - 1) * (2 * 480 - 3 * 64)
    assert cpu == 169_092  # measured with benchmarks/measure_lora.py (seq 8, mb 2, rank 4)


def test_lora_adapters_order_and_qlora_transient():
    cfg = {"model_type": "llama", "num_hidden_layers": 4}
    full = estimate_activations(cfg, 2048, 1)
    qv = estimate_activations(cfg, 2048, 1, lora=LoraSetup(16, ("q_proj", "v_proj")))
    all_linear = estimate_activations(cfg, 2048, 1, lora=LoraSetup(16))
    dropout = estimate_activations(cfg, 2048, 1, lora=LoraSetup(16, dropout=0.1))
    assert qv.activations < full.activations < all_linear.activations < dropout.activations
    # QLoRA keeps what LoRA keeps; its backward dequantizes the largest base weight (4096 x 11008 bf16) at a time
    qlora = estimate_activations(cfg, 2048, 1, lora=LoraSetup(16, quantized=True))
    assert qlora.activations == all_linear.activations
    assert qlora.transient >= 2 * 4096 * 11008


def test_lora_bad_targets_are_bad_input():
    from zerokit.errors import BadInput

    with pytest.raises(BadInput, match="'c_attn' is not a module of llama"):
        estimate_activations({"model_type": "llama"}, 512, 1, lora=LoraSetup(16, "c_attn"))

"""Model input: exact counts against real transformers (meta device), presets, --model resolution, bad input."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from zerokit.errors import BadInput
from zerokit.models import PRESET_NAMES, count_parameters, load_preset, resolve_model, spec_from_count
from zerokit.models.params import FAMILIES, model_parts
from zerokit.models.resolve import spec_from_config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE_MODELS = os.path.join(REPO, "examples", "models")


def _model_config(name: str) -> dict:
    return {k: v for k, v in load_preset(name).items() if k not in ("_source", "_aliases")}


@pytest.fixture(scope="module")
def meta_count():
    """(total, largest layer) of AutoModelForCausalLM.from_config on the meta device, largest counted as DeepSpeed does.

    DeepSpeed's model_to_params (runtime/zero/stage3.py) takes, over model.modules(), the most parameters any one
    module has of its own (recurse=False). Its total dedups by data_ptr, which is 0 for every meta tensor, so the total
    here is model.parameters(), which dedups tied weights by identity, as the brief asks.
    """
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()

    def count(config: dict) -> tuple[int, int]:
        rest = {k: v for k, v in config.items() if k != "model_type"}
        hf_config = transformers.AutoConfig.for_model(config["model_type"], **rest)
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(hf_config)
        total = sum(p.numel() for p in model.parameters())
        largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
        return total, largest

    return count


# --- every preset equals what transformers instantiates ----------------------------------------------------------


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_preset_count_equals_transformers(name, meta_count):
    config = _model_config(name)
    assert count_parameters(config) == meta_count(config)


# Families counted by arithmetic without a preset: no hub config.json was copied for them (a preset must cite one);
# SMALL_CASES and the defaults test below hold them against transformers instead.
FAMILIES_WITHOUT_PRESET = {"granite"}


def test_presets_cover_every_family_in_the_table():
    families = {load_preset(n)["model_type"] for n in PRESET_NAMES}
    assert families == set(FAMILIES) - FAMILIES_WITHOUT_PRESET


def test_every_preset_cites_a_public_source_and_has_its_hub_id_as_alias():
    for name in PRESET_NAMES:
        raw = load_preset(name)
        assert raw["_source"].startswith("https://huggingface.co/"), name
        assert raw["_source"].endswith("/config.json"), name
        repo = raw["_source"].split("huggingface.co/")[1].split("/blob/")[0]
        assert repo in raw["_aliases"], name
        assert name == name.lower() and " " not in name and "_" not in name


# Published totals, hand-checked: model cards and the papers. Llama-2-7b e.g.
# 32000*4096*2 (embed, untied head) + 32*(4*4096^2 + 3*4096*11008 + 2*4096) + 4096 = 6,738,415,616.
KNOWN_TOTALS = {
    "llama-2-7b": 6_738_415_616,
    "llama-2-13b": 13_015_864_320,
    "llama-2-70b": 68_976_648_192,
    "llama-3-8b": 8_030_261_248,
    "llama-3.1-70b": 70_553_706_496,
    "llama-3.1-405b": 405_853_388_800,
    "llama-3.2-1b": 1_235_814_400,
    "mistral-7b": 7_241_732_096,
    "mixtral-8x7b": 46_702_792_704,
    "qwen2.5-0.5b": 494_032_768,
    "qwen2.5-7b": 7_615_616_512,
    "gemma-2-9b": 9_241_705_984,
    "gemma-7b": 8_537_680_896,
    "phi-3-mini": 3_821_079_552,
    "gpt2": 124_439_808,
    "gpt2-xl": 1_557_611_200,
    "opt-125m": 125_239_296,
    "falcon-7b": 6_921_720_704,
    "qwen1.5-moe-a2.7b": 14_315_784_192,
}


@pytest.mark.parametrize("name,total", sorted(KNOWN_TOTALS.items()))
def test_known_public_totals(name, total):
    assert count_parameters(_model_config(name))[0] == total


def test_largest_layer_hand_checked():
    # Untied llama: embedding and lm_head are both 32000 x 4096.
    assert count_parameters(_model_config("llama-2-7b"))[1] == 32000 * 4096
    # Mixtral: transformers 5 fuses a layer's 8 experts into one module with (8, 2*14336, 4096) + (8, 4096, 14336).
    assert count_parameters(_model_config("mixtral-8x7b"))[1] == 8 * 3 * 4096 * 14336
    # gpt2's tied lm_head is still a module that owns (the shared) 50257 x 768 weight.
    assert count_parameters(_model_config("gpt2"))[1] == 50257 * 768


def test_tied_head_counted_once_untied_twice():
    tied = {**_model_config("qwen2.5-0.5b")}
    untied = {**tied, "tie_word_embeddings": False}
    assert count_parameters(untied)[0] - count_parameters(tied)[0] == 151936 * 896
    assert any(p.tied for p in model_parts(tied)) and not any(p.tied for p in model_parts(untied))


# --- family formulas on small configs: every structural switch, and the families' defaults ----------------------

S = {"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 100, "num_attention_heads": 4, "intermediate_size": 96}
OPT_S = {"hidden_size": 64, "num_hidden_layers": 2, "ffn_dim": 96, "vocab_size": 100, "num_attention_heads": 4,
         "max_position_embeddings": 50, "pad_token_id": 1}
FALCON_S = {"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 100, "num_attention_heads": 4}
MOE_S = {"num_experts": 4, "moe_intermediate_size": 32}
SMALL_CASES = {
    "llama": {**S},
    "llama-gqa-bias-headdim-tied": {**S, "num_key_value_heads": 2, "attention_bias": True, "mlp_bias": True,
                                    "head_dim": 8, "tie_word_embeddings": True},
    "llama-kv-null": {**S, "num_key_value_heads": None},
    "granite": {**S, "num_key_value_heads": 2, "embedding_multiplier": 12.0, "logits_scaling": 8.0},
    "granite-bias-tied": {**S, "attention_bias": True, "mlp_bias": True, "tie_word_embeddings": True},
    "mistral-default-kv": {**S},
    "mistral-gqa": {**S, "num_key_value_heads": 2},
    "mixtral": {**S, "num_key_value_heads": 2},
    "mixtral-3-experts-headdim": {**S, "num_local_experts": 3, "head_dim": 32},
    "mixtral-num-experts-alias": {**S, "num_experts": 5},
    "qwen2-default-kv-32": {**S},
    "qwen2-kv-null-tied": {**S, "num_key_value_heads": None, "tie_word_embeddings": True},
    "qwen2_moe": {**S, **MOE_S, "num_key_value_heads": 2, "shared_expert_intermediate_size": 48},
    "qwen2_moe-mlp-only-no-bias": {**S, **MOE_S, "mlp_only_layers": [0], "qkv_bias": False},
    "qwen2_moe-sparse-step": {**S, **MOE_S, "num_hidden_layers": 4, "decoder_sparse_step": 2},
    "qwen3": {**S, "num_key_value_heads": 2, "head_dim": 8},
    "qwen3-bias-default-headdim": {**S, "attention_bias": True},
    "qwen3_moe": {**S, **MOE_S, "num_key_value_heads": 2, "mlp_only_layers": [1]},
    "qwen3_moe-local-experts-alias": {**S, "num_local_experts": 4, "moe_intermediate_size": 32},
    "gemma-mqa": {**S, "pad_token_id": 0, "num_key_value_heads": 1, "head_dim": 8},
    "gemma-default-headdim": {**S, "pad_token_id": 0},
    "gemma2": {**S, "pad_token_id": 0, "head_dim": 8},
    "gemma3_text": {**S, "pad_token_id": 0, "head_dim": 8},
    "phi3": {**S, "pad_token_id": None},
    "phi3-gqa": {**S, "pad_token_id": None, "num_key_value_heads": 2},
    "gpt2": {"n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 50, "vocab_size": 100},
    "gpt2-canonical-names-n_inner-untied": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                                            "n_inner": 40, "vocab_size": 100, "tie_word_embeddings": False},
    "gpt_neox": {**S, "max_position_embeddings": 50},
    "gpt_neox-no-attn-bias-tied": {**S, "attention_bias": False, "tie_word_embeddings": True},
    "opt": {**OPT_S, "word_embed_proj_dim": 64},
    "opt-projection-postnorm-nobias": {**OPT_S, "word_embed_proj_dim": 32, "do_layer_norm_before": False,
                                       "enable_bias": False},
    "opt-no-affine-norm": {**OPT_S, "word_embed_proj_dim": 64, "layer_norm_elementwise_affine": False},
    "falcon-multi-query": {**FALCON_S},
    "falcon-new-arch-bias": {**FALCON_S, "new_decoder_architecture": True, "num_kv_heads": 2, "bias": True},
    "falcon-mha-sequential": {**FALCON_S, "multi_query": False, "parallel_attn": False, "ffn_hidden_size": 40},
    "falcon-new-arch-one-norm": {**FALCON_S, "new_decoder_architecture": True, "num_kv_heads": 2,
                                 "num_ln_in_parallel_attn": 1},
}


def _family(case: str) -> str:
    return case.split("-")[0]


@pytest.mark.parametrize("case", sorted(SMALL_CASES))
def test_family_formula_equals_transformers(case, meta_count):
    config = {"model_type": _family(case), **SMALL_CASES[case]}
    assert count_parameters(config) == meta_count(config)


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_family_defaults_equal_transformers_defaults(model_type, meta_count):
    """A config.json that leaves keys out counts like transformers fills them: the bare default model."""
    assert count_parameters({"model_type": model_type}) == meta_count({"model_type": model_type})


DEEPSPEED_CASES = ["llama-gqa-bias-headdim-tied", "mixtral", "gpt2", "qwen2_moe", "falcon-new-arch-bias"]


@pytest.mark.parametrize("case", DEEPSPEED_CASES)
def test_counts_equal_deepspeeds_own_model_to_params(case):
    """DeepSpeed's estimators take (total, largest layer) from model_to_params; on real CPU tensors it must agree."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    stage3 = pytest.importorskip("deepspeed.runtime.zero.stage3")
    config = {"model_type": _family(case), **SMALL_CASES[case]}
    rest = {k: v for k, v in config.items() if k != "model_type"}
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(_family(case), **rest))
    assert count_parameters(config) == stage3.model_to_params(model)


# --- resolve_model ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text,expected", [("7B", 7_000_000_000), ("6.7e9", 6_700_000_000), ("125M", 125_000_000),
                                           ("100_000_000", 100_000_000), ("70b", 70_000_000_000)])
def test_counts(text, expected):
    spec = resolve_model(text)
    assert spec.parameters == expected
    assert spec.source == "count"
    assert spec.name == text
    assert "inferred" in spec.notes[0] and "config.json" in spec.notes[0]


def test_count_shape_is_llama_like_with_layers_scaled():
    spec = spec_from_count(7_000_000_000)
    assert spec.config["_inferred_from"] == "llama-2-7b"
    assert (spec.hidden_size, spec.vocab_size) == (4096, 32000)
    assert spec.num_layers == 33  # 6.74B has 32 layers of 202.4M; 7B - 262M of embeddings -> 33.3
    assert spec.largest_layer_parameters == 32000 * 4096
    for key in ("num_attention_heads", "num_key_value_heads", "intermediate_size", "head_dim"):
        assert spec.config[key] >= 1
    assert spec_from_count(70_000_000_000).config["_inferred_from"] == "llama-3.1-70b"
    assert spec_from_count(125_000_000).hidden_size == 768
    # below one 768-wide layer and its 32k embeddings no shape fits: the largest layer would outweigh the model
    with pytest.raises(BadInput, match=r"count 1 is below the smallest shape zerokit infers from a count \(56,232,192:"):
        spec_from_count(1)
    smallest = spec_from_count(56_232_192)
    # the largest a count shape can stand for (405b's layers, at most 16,384 of them), not a config.json's fault
    assert spec_from_count(50 * 10**12).num_layers <= 16384
    with pytest.raises(BadInput, match="'1e14' is too large; at most 50,000,000,000,000"):
        resolve_model("1e14")
    assert smallest.num_layers == 1 and smallest.largest_layer_parameters < smallest.parameters


@pytest.mark.parametrize("text,name", [("llama-2-7b", "llama-2-7b"), ("LLAMA-2-7B", "llama-2-7b"),
                                       ("meta-llama/Llama-2-7b-hf", "llama-2-7b"), ("Llama-2-7b-hf", "llama-2-7b"),
                                       ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b"),
                                       ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"), (" gpt2 ", "gpt2")])
def test_presets_and_aliases(text, name):
    spec = resolve_model(text)
    assert spec.name == name
    assert spec.source == "preset"
    assert spec.parameters == count_parameters(_model_config(name))[0]


def test_preset_spec_carries_the_keys_the_activation_model_reads():
    spec = resolve_model("qwen2.5-7b")
    assert (spec.hidden_size, spec.num_layers, spec.vocab_size) == (3584, 28, 152064)
    assert spec.model_type == "qwen2"
    c = spec.config
    assert (c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["intermediate_size"]) == \
           (28, 4, 128, 18944)
    gpt2 = resolve_model("gpt2").config
    assert (gpt2["hidden_size"], gpt2["num_hidden_layers"], gpt2["intermediate_size"], gpt2["head_dim"]) == \
           (768, 12, 3072, 64)
    falcon = resolve_model("falcon-7b").config
    assert (falcon["num_key_value_heads"], falcon["intermediate_size"]) == (1, 4 * 4544)


@pytest.mark.parametrize("name", sorted(os.listdir(EXAMPLE_MODELS)) if os.path.isdir(EXAMPLE_MODELS) else [])
def test_example_configs_resolve_exactly(name):
    folder = os.path.join(EXAMPLE_MODELS, name)
    by_folder = resolve_model(folder)
    by_file = resolve_model(os.path.join(folder, "config.json"))
    assert by_folder.parameters == by_file.parameters > 0
    assert by_folder.source == "config"
    if name in PRESET_NAMES:
        assert by_folder.parameters == resolve_model(name).parameters


def test_existing_path_wins_over_count_and_preset(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for odd_name in ("7B", "gpt2"):
        (tmp_path / odd_name).mkdir()
        (tmp_path / odd_name / "config.json").write_text(json.dumps({"model_type": "llama", **S}))
        spec = resolve_model(odd_name)
        assert spec.source == "config" and spec.parameters == count_parameters({"model_type": "llama", **S})[0]


def test_config_json_missing_keys_use_family_defaults(tmp_path):
    # Llama-2 era config.json files have no head_dim and (13B) no num_key_value_heads: transformers derives them.
    config = {k: v for k, v in _model_config("llama-2-13b").items() if k not in ("num_key_value_heads", "head_dim")}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert resolve_model(str(path)).parameters == 13_015_864_320


# --- bad input: one line that says how to fix it ---------------------------------------------------------------


def _write(tmp_path, text: str, name: str = "config.json") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("text,match", [
    ("0", r"must be at least 1"),
    ("-7B", r"negative; give a positive count like 7B"),
    ("7X", r"is not a count; write it like 7B"),
    ("", r"--model is empty; give a preset name"),
    ("lama-2-7b", r"unknown model preset 'lama-2-7b'; did you mean 'llama-2-7b'\?"),
    ("mixtral-8x7", r"did you mean 'mixtral-8x7b'\?"),
    ("zzzz-unknown", r"unknown model preset 'zzzz-unknown'; known: .*llama-2-7b"),
    ("./missing/config.json", r"model config './missing/config.json' does not exist; check the path"),
    ("someorg/Some-Model-7B", (r"neither a file, a known preset alias nor a model in the Hugging Face cache "
                               r"\(.*\).*save the model's config.json")),
    ("meta-llama/Llama-2-7b-hff", (r"save the model's config.json and pass its path; or the preset: did you mean "
                                  r"'llama-2-7b'\?$")),
    # a hub id's own name that only shares '-7b' with a preset is not a typo of it (it suggested 'gemma-7b')
    ("foo/bar-7b", r"save the model's config.json and pass its path$"),
])
def test_bad_text(text, match, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # an empty cache: the hub ids are in none
    with pytest.raises(BadInput, match=match) as info:
        resolve_model(text)
    assert "\n" not in str(info.value)


def test_folder_without_config(tmp_path):
    with pytest.raises(BadInput, match=r"has no config.json; point --model at the model's transformers config.json"):
        resolve_model(str(tmp_path))


def test_a_folders_config_json_that_is_a_folder(tmp_path):
    """It said '...is a directory, not a regular file; pass the config files in it (a glob such as dir/*.json); point
    --model at ...': the middle clause is lint's advice."""
    (tmp_path / "config.json").mkdir()
    with pytest.raises(BadInput) as info:
        resolve_model(str(tmp_path))
    assert str(info.value) == (f"--model {tmp_path / 'config.json'}: is a directory, not a regular file; point "
                               "--model at a transformers config.json (or a folder holding one)")


def test_a_config_with_a_byte_order_mark_is_refused_as_transformers_refuses_it(tmp_path):
    """transformers reads config.json as UTF-8 and json.loads it: AutoConfig.from_pretrained raises "not a valid JSON
    file" on a byte-order mark (checked with the installed transformers), so zerokit says what the mark is."""
    path = tmp_path / "config.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"model_type": "llama", **S}).encode())
    with pytest.raises(BadInput, match="starts with a UTF-8 byte-order mark.*save it as UTF-8 without BOM"):
        resolve_model(str(path))
    from transformers import AutoConfig

    with pytest.raises(OSError, match="not a valid JSON file"):
        AutoConfig.from_pretrained(str(tmp_path))


def test_malformed_json_names_path_and_line(tmp_path):
    path = _write(tmp_path, '{\n  "model_type": "llama",\n  "hidden_size": 64,,\n}')
    # Line 3 is `  "hidden_size": 64,,`: the second comma is column 21.
    with pytest.raises(BadInput, match=re.escape(path) + r": malformed JSON at line 3, column 21: Expecting property"):
        resolve_model(path)


@pytest.mark.parametrize("text,match", [
    ('{"hidden_size": 4096, "num_hidden_layers": 32}', r"has no model_type.*add \"model_type\""),
    ("[1, 2]", r"is not a transformers config.json"),
    ('{"model_type": "llama", "num_hidden_layers": 32, "vocab_size": 32000}', r"\(llama\) lacks hidden_size"),
    ('{"model_type": "gpt2", "n_embd": 768, "vocab_size": 50257}', r"\(gpt2\) lacks n_layer"),
    ('{"model_type": "llama", "hidden_size": 0, "num_hidden_layers": 2, "vocab_size": 10}',
     r"hidden_size must be a whole number >= 1, got 0"),
    ('{"model_type": "mistral", "hidden_size": "4096", "num_hidden_layers": 2, "vocab_size": 10}',
     r"hidden_size must be a whole number >= 1, got '4096'"),
    ('{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 10, "num_attention_heads": -4}',
     r"num_attention_heads must be a whole number >= 1, got -4"),
])
def test_bad_config_json(tmp_path, text, match):
    with pytest.raises(BadInput, match=match):
        resolve_model(_write(tmp_path, text))


def test_load_preset_unknown_suggests_closest():
    with pytest.raises(BadInput, match=r"did you mean 'qwen2.5-7b'\?"):
        load_preset("qwen2.5-7")


def test_spec_from_count_refuses_nonpositive():
    with pytest.raises(BadInput, match=r"whole number >= 1, got 0"):
        spec_from_count(0)


# --- unknown architectures: meta device with transformers, one clear error without -------------------------------

OLMO = {"model_type": "olmo", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 4, "vocab_size": 100, "pad_token_id": 1}


def test_unknown_family_falls_back_to_meta_device(tmp_path, meta_count):
    assert "olmo" not in FAMILIES
    spec = resolve_model(_write(tmp_path, json.dumps(OLMO)))
    assert spec.source == "meta"
    assert (spec.parameters, spec.largest_layer_parameters) == meta_count(OLMO)
    # olmo: LayerNorm without weights, so embed + untied head + 2 * (4*64*64 + 3*64*96).
    assert spec.parameters == 2 * 100 * 64 + 2 * (4 * 64 * 64 + 3 * 64 * 96)
    assert (spec.hidden_size, spec.num_layers, spec.vocab_size) == (64, 2, 100)
    assert spec.config["num_key_value_heads"] == 4 and spec.config["head_dim"] == 16
    assert "meta device" in spec.notes[0]


def test_meta_fallback_errors_are_one_line(tmp_path):
    pytest.importorskip("transformers")
    with pytest.raises(BadInput, match=r"does not know model_type 'no_such_arch'"):
        resolve_model(_write(tmp_path, '{"model_type": "no_such_arch", "hidden_size": 8}'))
    with pytest.raises(BadInput, match=r"transformers has no causal LM for model_type 'vit' \(AutoModelForCausalLM does "
                                       r"not build ViTConfig"):
        spec_from_config({"model_type": "vit", "hidden_size": 64, "num_attention_heads": 4}, "vit")


def test_an_unknown_family_plans_with_its_matmuls_priced_as_a_llama_of_its_shape(tmp_path):
    """The step-time model counts FLOPs by family; an architecture built on the meta device still plans (its
    parameters exact, its matmuls those of the llama of its shape), and the plan says so."""
    pytest.importorskip("transformers")
    from zerokit.hardware import resolve_hardware
    from zerokit.models.params import llama_like
    from zerokit.perf.flops import model_flops
    from zerokit.planner import plan
    from zerokit.planner.types import Training

    spec = resolve_model(_write(tmp_path, json.dumps(OLMO)))
    assert llama_like(spec.config)["model_type"] == "llama"
    # olmo's matmuls are a llama's: q, k, v, o of 64 x 64, gate/up/down of 64 x 96, the 100-token head
    assert model_flops(spec.config).layer_matmuls == model_flops({**OLMO, "model_type": "llama"}).layer_matmuls
    p = plan(spec, resolve_hardware("a100-80gb"), Training(seq_len=256))
    assert p.decision.fits and p.performance.step_time_s > 0
    assert any(w.startswith("step times price olmo as a llama of its shape (hidden 64, 2 layers) whose MLP, 96 wide, "
                            "gives its own weight matrices' matmuls per token") for w in p.warnings)
    # ZeRO-3 gathers and hooks its own modules: embeddings, head, 4 projections and 3 MLP linears a layer (olmo's
    # LayerNorms own no parameters)
    layer = [64 * 64] * 4 + [64 * 96] * 3  # q, k, v, o, gate, up, down
    assert spec.module_trace == ((-1, 100 * 64), *((i, n) for i in (0, 1) for n in layer), (-1, 100 * 64))
    assert any("gathering its 16 modules under ZeRO-3" in w for w in p.warnings)


def test_config_values_transformers_refuses_are_one_line(tmp_path):
    pytest.importorskip("transformers")
    for config, says in (({"model_type": "llava", "text_config": [1, 2]}, "Validation error for field 'text_config'"),
                         ({**OLMO, "model_type": "olmo2", "rope_scaling": [1]}, "field 'rope_parameters'")):
        with pytest.raises(BadInput, match=r"transformers refuses \S+config.json \(model_type '\w+'\): ") as e:
            resolve_model(_write(tmp_path, json.dumps(config)))
        assert says in str(e.value) and "\n" not in str(e.value) and str(e.value).endswith("fix the config.json")


def test_a_sliding_window_that_is_not_a_size_is_bad_input(tmp_path):
    llama = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
             "num_attention_heads": 4, "vocab_size": 100}
    for window in ("x", [1], 0, 1.5):
        with pytest.raises(BadInput, match=r"llama config: sliding_window must be a whole number >= 1, got"):
            resolve_model(_write(tmp_path, json.dumps({**llama, "sliding_window": window})))
    assert resolve_model(_write(tmp_path, json.dumps({**llama, "sliding_window": None}))).parameters > 0


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, cwd=REPO,
                          timeout=120)


def test_unknown_family_without_transformers_is_one_clear_error(tmp_path):
    path = _write(tmp_path, json.dumps(OLMO))
    # sys.modules[name] = None makes `import name` raise ImportError: an environment without the extra.
    code = ("import sys\nsys.modules['torch'] = None\nsys.modules['transformers'] = None\n"
            "from zerokit.errors import BadInput\nfrom zerokit.models.resolve import resolve_model\n"
            f"try:\n    resolve_model({path!r})\nexcept BadInput as e:\n    print(e)\n")
    out = _run(code)
    assert out.returncode == 0, out.stderr
    line = out.stdout.strip()
    assert "\n" not in line
    assert "zerokit counts these model families by itself: falcon, gemma" in line
    assert "pip install 'zerokit[deepspeed]'" in line and "'olmo'" in line


def test_import_does_not_load_torch_or_transformers():
    out = _run("import sys, zerokit.models.resolve, zerokit.models\n"
               "from zerokit.models import resolve_model\nresolve_model('llama-3.1-70b')\nresolve_model('7B')\n"
               "assert 'torch' not in sys.modules, 'torch'\nassert 'transformers' not in sys.modules, 'transformers'\n")
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("key, value", [("tie_word_embeddings", "yes"), ("attention_bias", 1), ("mlp_bias", "false")])
def test_a_switch_of_the_config_that_is_not_true_or_false_is_refused(tmp_path, key, value):
    """"yes" was read as true: the plan counted a tied head the config's author may not have meant."""
    config = json.loads((Path(__file__).resolve().parent.parent / "examples" / "models" / "llama-2-7b" /
                         "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, key: value}))
    with pytest.raises(BadInput, match=f"llama config: {key} must be true or false, got {str(value)!r}; fix the "
                                       "config.json"):
        resolve_model(str(tmp_path / "config.json"))


def test_a_config_json_cut_short_is_planned_with_transformers_defaults_and_says_which(tmp_path):
    """A phi config.json without num_hidden_layers builds transformers' default 24 layers: planned, and said."""
    cut = tmp_path / "phi.json"
    cut.write_text(json.dumps({"model_type": "phi", "hidden_size": 256, "num_attention_heads": 4, "vocab_size": 1000}))
    spec = resolve_model(str(cut))
    assert spec.num_layers == 24
    assert [n for n in spec.notes if "gives no" in n] == [
        (f"{cut} gives no num_hidden_layers: planned with transformers' phi defaults, num_hidden_layers (24); add them "
        "to the config.json if those are not the model's")]
    aliased = tmp_path / "gptj.json"  # GPT-J names them n_embd and n_layer: given, under its own names
    aliased.write_text(json.dumps({"model_type": "gptj", "n_embd": 256, "n_layer": 2, "n_head": 4, "vocab_size": 1000}))
    assert not [n for n in resolve_model(str(aliased)).notes if "gives no" in n]


def test_a_wrapper_config_giving_its_sizes_in_text_config_is_not_said_to_give_none(tmp_path):
    """Gemma 3's and Llama 4's config.json give the text model's sizes under text_config: the plan said they gave no
    hidden_size, num_hidden_layers or vocab_size and were planned with defaults, when they were the config's own."""
    text = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 1000}
    spec = resolve_model(_write(tmp_path, json.dumps({"model_type": "gemma3", "text_config": text})))
    assert (spec.hidden_size, spec.num_layers, spec.vocab_size) == (64, 2, 1000)
    assert not [n for n in spec.notes if "gives no" in n]
    cut = {k: v for k, v in text.items() if k not in ("num_hidden_layers", "vocab_size")}
    cut_path = _write(tmp_path, json.dumps({"model_type": "gemma3", "text_config": cut}), "cut.json")
    assert [n for n in resolve_model(cut_path).notes if "gives no" in n] == [
        (f"{cut_path} gives no num_hidden_layers, vocab_size: planned with transformers' gemma3 defaults, "
         "num_hidden_layers (26), vocab_size (262208); add them to the config.json if those are not the model's")]


def test_a_model_type_without_a_causal_lm_is_one_line_that_says_what_to_do(tmp_path):
    """Qwen2-VL and Llava build with AutoModelForImageTextToText, not AutoModelForCausalLM: the error was transformers'
    "Unrecognized configuration class", cut off in its list of hundreds of classes."""
    pytest.importorskip("transformers")
    with pytest.raises(BadInput, match=r"^transformers has no causal LM for model_type 'qwen2_vl' \(AutoModelForCausal"
                                       r"LM does not build Qwen2VLConfig: .*; use a decoder's config.json, a preset or "
                                       r"a count like 7B$") as e:
        resolve_model(_write(tmp_path, json.dumps({"model_type": "qwen2_vl"})))
    assert "\n" not in str(e.value)
    llava = {"model_type": "llava", "text_config": {"model_type": "llama", "hidden_size": 64}}
    with pytest.raises(BadInput, match=r"save its text_config as a config.json \(model_type 'llama'\)"):
        resolve_model(_write(tmp_path, json.dumps(llava)))


def test_infinities_saved_as_transformers_5_writes_them_are_read_back(tmp_path):
    """transformers 5's save_pretrained writes a Mamba-2's time_step_limit [0.0, inf] as [0.0, {"__float__":
    "Infinity"}] and reads it back; zerokit passed the object on, and transformers refused the config."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    config = transformers.AutoConfig.for_model("mamba2", hidden_size=64, num_heads=4, head_dim=32, n_groups=1,
                                               state_size=16, num_hidden_layers=2, vocab_size=1000)
    config.save_pretrained(tmp_path)
    assert '"__float__": "Infinity"' in (tmp_path / "config.json").read_text()
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(tmp_path))
    spec = resolve_model(str(tmp_path))
    assert spec.parameters == sum(p.numel() for p in model.parameters())


# --- a hub id downloaded before: its config.json in the Hugging Face cache ----------------------------------------


def _cached(cache: Path, repo_id: str, commit: str, config: str, main: bool = True) -> Path:
    """A model in a hub cache as huggingface_hub lays one out: the file a blob, the snapshot's config.json a link to
    it, refs/main naming the snapshot."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    (repo / "snapshots" / commit).mkdir(parents=True)
    blob = repo / "blobs" / f"blob-{commit}"
    blob.write_text(config)
    (repo / "snapshots" / commit / "config.json").symlink_to(os.path.join("..", "..", "blobs", blob.name))
    if main:
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(commit)
    return repo / "snapshots" / commit / "config.json"


MISTRAL = Path(__file__).resolve().parents[1] / "examples" / "models" / "mistral-7b" / "config.json"


def test_a_hub_id_in_the_hugging_face_cache_is_its_cached_config(monkeypatch, tmp_path):
    """`--model ORG/NAME` of a model downloaded before reads the config.json huggingface_hub finds offline, as
    transformers' from_pretrained would (where it said 'zerokit does not download from the hub')."""
    pytest.importorskip("huggingface_hub")
    home = tmp_path / "hf"
    path = _cached(home / "hub", "acme/mistral-ft", "c0ffee", MISTRAL.read_text())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    env["HF_HOME"] = str(home)
    lookup = "import huggingface_hub as h; print(h.try_to_load_from_cache('acme/mistral-ft', 'config.json'))"
    found = subprocess.run([sys.executable, "-c", lookup], check=True, capture_output=True, text=True,
                           env=env).stdout.strip()
    assert found == str(path)  # the library's own lookup, offline
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(home))
    spec = resolve_model("acme/mistral-ft")
    direct = resolve_model(str(MISTRAL))
    assert spec.name == "acme/mistral-ft" and spec.source == "config"
    assert (spec.parameters, spec.hidden_size, spec.num_layers) == (direct.parameters, direct.hidden_size,
                                                                   direct.num_layers)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere"))  # HF_HUB_CACHE wins over HF_HOME, as there
    with pytest.raises(BadInput, match=re.escape(f"Hugging Face cache ({tmp_path / 'elsewhere'})")):
        resolve_model("acme/mistral-ft")


def test_a_cached_model_without_refs_main_takes_its_newest_snapshot(monkeypatch, tmp_path):
    config = json.loads(MISTRAL.read_text())
    _cached(tmp_path, "acme/m", "old", json.dumps({**config, "num_hidden_layers": 2}), main=False)
    newest = _cached(tmp_path, "acme/m", "new", json.dumps({**config, "num_hidden_layers": 3}), main=False)
    os.utime(newest, (2_000_000_000, 2_000_000_000))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    assert resolve_model("acme/m").num_layers == 3
    with pytest.raises(BadInput, match="malformed JSON"):  # a cached file is read as any config.json is
        _cached(tmp_path, "acme/broken", "x", "{")
        resolve_model("acme/broken")

"""Exact parameter counts from a transformers config dict, by arithmetic: no torch, no transformers.

Each family is a small function that lists the modules of `AutoModelForCausalLM.from_config(cfg)` that own parameters
(`recurse=False`), with their sizes and how many copies the model has. From that list:

- the total is what `sum(p.numel() for p in model.parameters())` gives, tied weights counted once;
- the largest layer is the module with the most parameters of its own, the way DeepSpeed's
  `model_to_params` (deepspeed/runtime/zero/stage3.py) walks `model.modules()`. A tied `lm_head` still owns its
  (shared) weight there, so it is a candidate for the largest layer even though the total counts it once.

Family defaults are those of the transformers 5.x config classes, so a config.json that leaves a key out counts the
same as transformers would build it. tests/test_models.py holds every family against a meta-device instantiation.

`FAMILIES` is zerokit's one family registry: the same entry gives the parameter count (here), the LoRA targets
(`Part.linear`, `Part.stacked`; zerokit.models.lora), the 4-bit storage (zerokit.models.quant) and, through
`Family.layout` and the defaults, the activation model (zerokit.memory.activations).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from zerokit.errors import BadInput


class Part(NamedTuple):
    """One module that owns parameters."""

    name: str
    params: int
    """Parameters of its own (`module.parameters(recurse=False)`)."""
    copies: int = 1
    """How many such modules the model has (one per layer, usually)."""
    tied: bool = False
    """Its weight is another module's (tied lm_head): counted once in the total, still a layer for DeepSpeed."""
    linear: tuple[int, int] | None = None
    """(in_features, out_features) when the module is an `nn.Linear` (or gpt2's `Conv1D`): what LoRA can adapt and
    bitsandbytes can quantize."""
    bias: bool = False
    """The linear module has a bias."""
    stacked: tuple[tuple[str, int, int, int], ...] = ()
    """Parameters PEFT wraps directly (`lora.ParamWrapper`), as (name, experts, dim 1, dim 2): transformers 5's fused
    MoE expert stacks, and the router weight as a 2-D one (experts = 1)."""
    layer: bool = False
    """One of the decoder layers' modules (`copies` of them over the stack), not one before or after it: a
    one-layer model's, or a MoE block in one layer of several, has one copy too."""


def part_tensors(p: Part) -> list[int]:
    """The elements of each parameter tensor of a `Part`: a linear's weight and bias apart, transformers 5's fused
    expert stacks (and the router) apart."""
    if p.stacked:
        stacked = [experts * a * b for _, experts, a, b in p.stacked]
        return stacked + ([p.params - sum(stacked)] if p.params > sum(stacked) else [])
    if p.linear is not None and p.bias:
        weight = p.linear[0] * p.linear[1]
        return [weight, p.params - weight]
    return [p.params]


class Layout(NamedTuple):
    """What one decoder layer keeps for backward, as `zerokit.memory.activations` models it.

    `kind` picks the activation builder (llama, moe, gpt2, opt, gpt_neox, falcon); the flags are the structural
    switches inside it that the measurements showed to matter.
    """

    kind: str
    qk_norm: bool = False
    """RMSNorm on q and k per head (qwen3, gemma3)."""
    gemma: int = 0
    """0: llama RMSNorm; 1: gemma's fp32 (1 + w) norms; 2: gemma2 (4 norms, softcaps); 3: gemma3 (4 norms, gemma q/k
    norms, sliding and global layers with their own rotary tables)."""
    fused_qkv: bool = False
    """phi3: one qkv projection, v stays a view of its output."""
    qwen_router: bool = False
    """Qwen-MoE routing (optional top-k renormalisation, moe_intermediate_size) rather than Mixtral's."""
    shared_expert: bool = False
    """qwen2_moe: a gated shared expert beside the routed ones."""


class Family(NamedTuple):
    """How one `model_type` is built: its config defaults, derived keys, modules and activation layout.

    This is the one registry of model families: parameter counting (here), LoRA targets (`zerokit.models.lora`),
    quantized storage (`zerokit.models.quant`) and activations (`zerokit.memory.activations`) all read it.
    """

    defaults: Mapping[str, Any]
    parts: Callable[[dict], list[Part]]
    derive: Callable[[dict], None] = lambda c: None
    aliases: Mapping[str, str] = MappingProxyType({})
    """Canonical key -> the key this family's config class stores it under (transformers' `attribute_map`)."""
    layout: Layout = Layout("llama")
    """How the activation model lays out its layers."""


# ---------------------------------------------------------------------------------------------------------------------
# Building blocks


def _linear(n_in: int, n_out: int, bias: bool) -> int:
    return n_in * n_out + (n_out if bias else 0)


def _lin(name: str, n_in: int, n_out: int, bias: bool = False) -> Part:
    """An `nn.Linear(n_in, n_out)` (or a gpt2 `Conv1D` of the same shape)."""
    return Part(name, _linear(n_in, n_out, bias), linear=(n_in, n_out), bias=bias)


def _head_dim_or_split(c: dict) -> None:
    """`head_dim` missing or null means hidden_size // num_attention_heads (llama, mistral, mixtral, qwen2, phi3)."""
    if c.get("head_dim") is None:
        c["head_dim"] = c["hidden_size"] // c["num_attention_heads"]


def _kv_or_all_heads(c: dict) -> None:
    """`num_key_value_heads: null` means plain multi-head attention."""
    if c.get("num_key_value_heads") is None:
        c["num_key_value_heads"] = c["num_attention_heads"]


def _derive_decoder(c: dict) -> None:
    _kv_or_all_heads(c)
    _head_dim_or_split(c)


def _attention(c: dict, *, qkv_bias: bool = False, o_bias: bool = False, qk_norm: bool = False,
               fused_qkv: bool = False) -> list[Part]:
    h, hd = c["hidden_size"], c["head_dim"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    if fused_qkv:
        parts = [_lin("self_attn.qkv_proj", h, q + 2 * kv, qkv_bias)]
    else:
        parts = [_lin("self_attn.q_proj", h, q, qkv_bias), _lin("self_attn.k_proj", h, kv, qkv_bias),
                 _lin("self_attn.v_proj", h, kv, qkv_bias)]
    parts.append(_lin("self_attn.o_proj", q, h, o_bias))
    if qk_norm:
        parts += [Part("self_attn.q_norm", hd), Part("self_attn.k_norm", hd)]
    return parts


def _gated_mlp(h: int, inter: int, *, bias: bool = False, fused: bool = False, prefix: str = "mlp") -> list[Part]:
    """SwiGLU / GeGLU: gate and up projections, then down."""
    if fused:
        return [_lin(f"{prefix}.gate_up_proj", h, 2 * inter, bias), _lin(f"{prefix}.down_proj", inter, h, bias)]
    return [_lin(f"{prefix}.gate_proj", h, inter, bias), _lin(f"{prefix}.up_proj", h, inter, bias),
            _lin(f"{prefix}.down_proj", inter, h, bias)]


def _experts(h: int, inter: int, n: int) -> list[Part]:
    """transformers 5 fuses all experts of a layer into one module: gate_up_proj (n, 2i, h) and down_proj (n, h, i).

    The router (`mlp.gate`) is a plain module with an (n, h) weight, not an `nn.Linear`."""
    return [Part("mlp.gate", n * h, stacked=(("weight", 1, n, h),)),
            Part("mlp.experts", n * 3 * h * inter, stacked=(("gate_up_proj", n, 2 * inter, h), ("down_proj", n, h, inter)))]


def _times(parts: list[Part], copies: int) -> list[Part]:
    """A decoder layer's modules over `copies` layers."""
    return [p._replace(copies=p.copies * copies, layer=True) for p in parts if copies > 0]


def stack_split(parts: list[Part]) -> tuple[list[Part], list[Part], list[Part]]:
    """(the modules registered before the decoder stack, the layers' modules, those registered after it) of
    `model_parts`: the embedding (and OPT's final norm, registered before its layers), the layers, the final norm and
    the head. By `Part.layer`, so a one-layer model splits as a deep one does."""
    stack = [i for i, p in enumerate(parts) if p.layer]
    if not stack:
        return list(parts), [], []
    return list(parts[:stack[0]]), [p for p in parts if p.layer], list(parts[stack[-1] + 1:])


def _embed_and_head(c: dict, layers: list[Part], final_norm: int) -> list[Part]:
    v, h = c["vocab_size"], c["hidden_size"]
    return [Part("embed_tokens", v * h), *layers, Part("norm", final_norm), _head(c, h)]


def _head(c: dict, n_in: int, name: str = "lm_head") -> Part:
    """The output projection: a bias-free `nn.Linear`, tied to the input embedding when the config says so."""
    v = c["vocab_size"]
    return Part(name, n_in * v, tied=bool(c["tie_word_embeddings"]), linear=(n_in, v))


def _sparse_layers(c: dict) -> int:
    """Qwen-MoE: layer i is sparse unless listed in mlp_only_layers or off the decoder_sparse_step grid."""
    only = set(c.get("mlp_only_layers") or ())
    step = c["decoder_sparse_step"]
    n_exp = c["num_experts"]
    return sum(1 for i in range(c["num_hidden_layers"]) if i not in only and n_exp > 0 and (i + 1) % step == 0)


# ---------------------------------------------------------------------------------------------------------------------
# Families


def _llama(c: dict) -> list[Part]:
    h = c["hidden_size"]
    layer = [*_attention(c, qkv_bias=c["attention_bias"], o_bias=c["attention_bias"]),
             *_gated_mlp(h, c["intermediate_size"], bias=c["mlp_bias"]),
             Part("input_layernorm", h), Part("post_attention_layernorm", h)]
    return _embed_and_head(c, _times(layer, c["num_hidden_layers"]), h)


def _mistral(c: dict) -> list[Part]:
    h = c["hidden_size"]
    layer = [*_attention(c), *_gated_mlp(h, c["intermediate_size"]),
             Part("input_layernorm", h), Part("post_attention_layernorm", h)]
    return _embed_and_head(c, _times(layer, c["num_hidden_layers"]), h)


def _mixtral(c: dict) -> list[Part]:
    h = c["hidden_size"]
    layer = [*_attention(c), *_experts(h, c["intermediate_size"], c["num_local_experts"]),
             Part("input_layernorm", h), Part("post_attention_layernorm", h)]
    return _embed_and_head(c, _times(layer, c["num_hidden_layers"]), h)


def _qwen2(c: dict) -> list[Part]:
    h = c["hidden_size"]
    layer = [*_attention(c, qkv_bias=True), *_gated_mlp(h, c["intermediate_size"]),
             Part("input_layernorm", h), Part("post_attention_layernorm", h)]
    return _embed_and_head(c, _times(layer, c["num_hidden_layers"]), h)


def _qwen2_moe(c: dict) -> list[Part]:
    h, n_layers = c["hidden_size"], c["num_hidden_layers"]
    sparse = _sparse_layers(c)
    common = [*_attention(c, qkv_bias=c["qkv_bias"]), Part("input_layernorm", h), Part("post_attention_layernorm", h)]
    moe = [*_experts(h, c["moe_intermediate_size"], c["num_experts"]),
           *_gated_mlp(h, c["shared_expert_intermediate_size"], prefix="mlp.shared_expert"),
           _lin("mlp.shared_expert_gate", h, 1)]
    layers = _times(common, n_layers) + _times(moe, sparse) + _times(_gated_mlp(h, c["intermediate_size"]),
                                                                     n_layers - sparse)
    return _embed_and_head(c, layers, h)


def _qwen3(c: dict) -> list[Part]:
    h = c["hidden_size"]
    bias = c["attention_bias"]
    layer = [*_attention(c, qkv_bias=bias, o_bias=bias, qk_norm=True), *_gated_mlp(h, c["intermediate_size"]),
             Part("input_layernorm", h), Part("post_attention_layernorm", h)]
    return _embed_and_head(c, _times(layer, c["num_hidden_layers"]), h)


def _qwen3_moe(c: dict) -> list[Part]:
    h, n_layers = c["hidden_size"], c["num_hidden_layers"]
    sparse = _sparse_layers(c)
    bias = c["attention_bias"]
    common = [*_attention(c, qkv_bias=bias, o_bias=bias, qk_norm=True),
              Part("input_layernorm", h), Part("post_attention_layernorm", h)]
    layers = (_times(common, n_layers) + _times(_experts(h, c["moe_intermediate_size"], c["num_experts"]), sparse)
              + _times(_gated_mlp(h, c["intermediate_size"]), n_layers - sparse))
    return _embed_and_head(c, layers, h)


def _gemma_family(n_norms: int, qk_norm: bool) -> Callable[[dict], list[Part]]:
    """Gemma: 2 RMSNorms per layer; Gemma 2 and 3 add pre/post feed-forward norms; Gemma 3 adds q/k norms."""
    names = ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm")

    def parts(c: dict) -> list[Part]:
        h, bias = c["hidden_size"], c["attention_bias"]
        layer = [*_attention(c, qkv_bias=bias, o_bias=bias, qk_norm=qk_norm), *_gated_mlp(h, c["intermediate_size"]),
                 *(Part(n, h) for n in names[:n_norms])]
        return _embed_and_head(c, _times(layer, c["num_hidden_layers"]), h)

    return parts


def _phi3(c: dict) -> list[Part]:
    h = c["hidden_size"]
    layer = [*_attention(c, fused_qkv=True), *_gated_mlp(h, c["intermediate_size"], fused=True),
             Part("input_layernorm", h), Part("post_attention_layernorm", h)]
    return _embed_and_head(c, _times(layer, c["num_hidden_layers"]), h)


def _gpt2(c: dict) -> list[Part]:
    h, inter = c["n_embd"], c["intermediate_size"]
    layer = [Part("ln_1", 2 * h), _lin("attn.c_attn", h, 3 * h, True), _lin("attn.c_proj", h, h, True),
             Part("ln_2", 2 * h), _lin("mlp.c_fc", h, inter, True), _lin("mlp.c_proj", inter, h, True)]
    if c.get("add_cross_attention"):
        layer += [_lin("crossattention.c_attn", h, 2 * h, True), _lin("crossattention.q_attn", h, h, True),
                  _lin("crossattention.c_proj", h, h, True), Part("ln_cross_attn", 2 * h)]
    return [Part("wte", c["vocab_size"] * h), Part("wpe", c["n_positions"] * h),
            *_times(layer, c["n_layer"]), Part("ln_f", 2 * h), _head(c, h)]


def _gpt_neox(c: dict) -> list[Part]:
    h, inter, bias = c["hidden_size"], c["intermediate_size"], c["attention_bias"]
    layer = [Part("input_layernorm", 2 * h), Part("post_attention_layernorm", 2 * h),
             _lin("attention.query_key_value", h, 3 * h, bias), _lin("attention.dense", h, h, bias),
             _lin("mlp.dense_h_to_4h", h, inter, True), _lin("mlp.dense_4h_to_h", inter, h, True)]
    return [Part("embed_in", c["vocab_size"] * h), *_times(layer, c["num_hidden_layers"]),
            Part("final_layer_norm", 2 * h), _head(c, h)]  # lm_head: transformers 5 renamed embed_out


def _opt(c: dict) -> list[Part]:
    h, ffn, bias = c["hidden_size"], c["ffn_dim"], c["enable_bias"]
    proj, v = c["word_embed_proj_dim"], c["vocab_size"]
    ln = 2 * h if c["layer_norm_elementwise_affine"] else 0
    layer = [*(_lin(f"self_attn.{n}", h, h, bias) for n in ("k_proj", "v_proj", "q_proj", "out_proj")),
             Part("self_attn_layer_norm", ln), _lin("fc1", h, ffn, bias), _lin("fc2", ffn, h, bias),
             Part("final_layer_norm", ln)]
    parts = [Part("embed_tokens", v * proj), Part("embed_positions", (c["max_position_embeddings"] + 2) * h)]
    if proj != h:
        parts += [_lin("project_out", h, proj), _lin("project_in", proj, h)]
    if c["do_layer_norm_before"] and not c["_remove_final_layer_norm"]:
        parts.append(Part("decoder.final_layer_norm", ln))
    return [*parts, *_times(layer, c["num_hidden_layers"]), _head(c, proj)]


def falcon_qkv_width(c: dict) -> int:
    """The output width of falcon's fused query_key_value: grouped KV heads (new_decoder_architecture), one shared
    KV head (multi_query), or a K and V per head."""
    h, heads = c["hidden_size"], c["num_attention_heads"]
    hd = h // heads
    if c["new_decoder_architecture"]:
        return (2 * c["num_kv_heads"] + heads) * hd
    if c["multi_query"]:
        return h + 2 * hd
    return 3 * h


def _falcon(c: dict) -> list[Part]:
    h, bias = c["hidden_size"], c["bias"]
    qkv = falcon_qkv_width(c)
    ffn = c["ffn_hidden_size"]
    layer = [_lin("self_attention.query_key_value", h, qkv, bias), _lin("self_attention.dense", h, h, bias),
             _lin("mlp.dense_h_to_4h", h, ffn, bias), _lin("mlp.dense_4h_to_h", ffn, h, bias)]
    n_ln = c.get("num_ln_in_parallel_attn")
    if n_ln is None and c["new_decoder_architecture"]:
        n_ln = 2
    if not c["parallel_attn"]:
        layer += [Part("post_attention_layernorm", 2 * h), Part("input_layernorm", 2 * h)]
    elif n_ln == 2:
        layer += [Part("ln_attn", 2 * h), Part("ln_mlp", 2 * h)]
    else:
        layer.append(Part("input_layernorm", 2 * h))
    return [Part("word_embeddings", c["vocab_size"] * h), *_times(layer, c["num_hidden_layers"]), Part("ln_f", 2 * h),
            _head(c, h)]


# ---------------------------------------------------------------------------------------------------------------------
# Derived keys: the canonical names the activation model reads (num_key_value_heads, head_dim, intermediate_size, ...)


def _derive_gpt2(c: dict) -> None:
    c["intermediate_size"] = c.get("n_inner") or 4 * c["n_embd"]
    c.update(hidden_size=c["n_embd"], num_hidden_layers=c["n_layer"], num_attention_heads=c["n_head"],
             num_key_value_heads=c["n_head"], head_dim=c["n_embd"] // c["n_head"],
             max_position_embeddings=c["n_positions"])


def _derive_mha(c: dict) -> None:
    c["num_key_value_heads"] = c["num_attention_heads"]
    c["head_dim"] = c["hidden_size"] // c["num_attention_heads"]


def _derive_opt(c: dict) -> None:
    _derive_mha(c)
    c["intermediate_size"] = c["ffn_dim"]
    if c.get("word_embed_proj_dim") is None:
        c["word_embed_proj_dim"] = c["hidden_size"]


def _derive_falcon(c: dict) -> None:
    if c.get("n_embed") is not None:
        c["hidden_size"] = c["n_embed"]
    if c.get("num_kv_heads") is None:
        c["num_kv_heads"] = c["num_attention_heads"]
    if c.get("ffn_hidden_size") is None:
        c["ffn_hidden_size"] = 4 * c["hidden_size"]
    c["intermediate_size"] = c["ffn_hidden_size"]
    c["head_dim"] = c["hidden_size"] // c["num_attention_heads"]
    multi_query_only = c["multi_query"] and not c["new_decoder_architecture"]
    c["num_key_value_heads"] = 1 if multi_query_only else c["num_kv_heads"]


def _derive_qwen_moe(c: dict) -> None:
    _derive_decoder(c)
    if c.get("mlp_only_layers") is None:
        c["mlp_only_layers"] = []


# Defaults of the transformers 5.x config classes (configuration_<family>.py), for the keys that change the count or
# what the activation model reads (dropouts, sliding windows, softcaps).
_LLAMA = {
    "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": None, "head_dim": None, "tie_word_embeddings": False,
    "attention_bias": False, "mlp_bias": False, "max_position_embeddings": 2048, "attention_dropout": 0.0,
}
_GRANITE = dict(_LLAMA)  # llama plus scalar multipliers (embedding, residual, attention, logits), same modules
_MISTRAL = {
    "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": None, "tie_word_embeddings": False,
    "max_position_embeddings": 131072, "attention_dropout": 0.0, "sliding_window": 4096,
}
_MIXTRAL = {**_MISTRAL, "num_local_experts": 8, "num_experts_per_tok": 2, "sliding_window": None}
_QWEN2 = {
    "vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 32, "tie_word_embeddings": False,
    "max_position_embeddings": 32768, "attention_dropout": 0.0, "use_sliding_window": False, "sliding_window": 4096,
    "max_window_layers": 28,
}
_QWEN2_MOE = {
    "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 24,
    "num_attention_heads": 16, "num_key_value_heads": 16, "tie_word_embeddings": False,
    "max_position_embeddings": 32768, "decoder_sparse_step": 1, "moe_intermediate_size": 1408,
    "shared_expert_intermediate_size": 5632, "num_experts_per_tok": 4, "num_experts": 60,
    "mlp_only_layers": None, "qkv_bias": True, "norm_topk_prob": False, "attention_dropout": 0.0,
    "use_sliding_window": False,
}
_QWEN3 = {**_QWEN2, "head_dim": 128, "attention_bias": False}
_QWEN3_MOE = {
    "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 24,
    "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": None, "tie_word_embeddings": False,
    "attention_bias": False, "max_position_embeddings": 32768, "decoder_sparse_step": 1,
    "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8, "mlp_only_layers": None,
    "norm_topk_prob": False, "attention_dropout": 0.0, "use_sliding_window": False,
}
_GEMMA = {
    "vocab_size": 256000, "hidden_size": 3072, "intermediate_size": 24576, "num_hidden_layers": 28,
    "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256, "tie_word_embeddings": True,
    "attention_bias": False, "max_position_embeddings": 8192, "attention_dropout": 0.0,
}
_GEMMA2 = {**_GEMMA, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
           "num_attention_heads": 8, "num_key_value_heads": 4, "sliding_window": 4096,
           "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0}
_GEMMA3 = {**_GEMMA2, "vocab_size": 262208, "max_position_embeddings": 131072, "attn_logit_softcapping": None,
           "final_logit_softcapping": None}
_PHI3 = {
    "vocab_size": 32064, "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": None, "tie_word_embeddings": False,
    "max_position_embeddings": 4096, "attention_dropout": 0.0, "sliding_window": None,
}
_GPT2 = {
    "vocab_size": 50257, "n_embd": 768, "n_layer": 12, "n_head": 12, "n_inner": None, "n_positions": 1024,
    "tie_word_embeddings": True, "add_cross_attention": False, "resid_pdrop": 0.1, "embd_pdrop": 0.1,
    "attn_pdrop": 0.1,
}
_GPT_NEOX = {
    "vocab_size": 50432, "hidden_size": 6144, "intermediate_size": 24576, "num_hidden_layers": 44,
    "num_attention_heads": 64, "tie_word_embeddings": False, "attention_bias": True, "max_position_embeddings": 2048,
    "attention_dropout": 0.0, "use_parallel_residual": True,
}
_OPT = {
    "vocab_size": 50272, "hidden_size": 768, "num_hidden_layers": 12, "ffn_dim": 3072, "num_attention_heads": 12,
    "max_position_embeddings": 2048, "word_embed_proj_dim": 768, "do_layer_norm_before": True, "enable_bias": True,
    "layer_norm_elementwise_affine": True, "_remove_final_layer_norm": False, "tie_word_embeddings": True,
    "dropout": 0.1, "attention_dropout": 0.0,
}
_FALCON = {
    "vocab_size": 65024, "hidden_size": 4544, "num_hidden_layers": 32, "num_attention_heads": 71,
    "num_ln_in_parallel_attn": None, "num_kv_heads": None, "new_decoder_architecture": False, "multi_query": True,
    "parallel_attn": True, "bias": False, "ffn_hidden_size": None, "tie_word_embeddings": True,
    "max_position_embeddings": 2048, "attention_dropout": 0.0, "alibi": False,
}

_GPT2_ALIASES = {"hidden_size": "n_embd", "max_position_embeddings": "n_positions", "num_attention_heads": "n_head",
                 "num_hidden_layers": "n_layer"}
_MOE_LAYOUT = Layout("moe")

FAMILIES: dict[str, Family] = {
    "llama": Family(_LLAMA, _llama, _derive_decoder),
    "granite": Family(_GRANITE, _llama, _derive_decoder),
    "mistral": Family(_MISTRAL, _mistral, _derive_decoder),
    "mixtral": Family(_MIXTRAL, _mixtral, _derive_decoder, {"num_experts": "num_local_experts"}, _MOE_LAYOUT),
    "qwen2": Family(_QWEN2, _qwen2, _derive_decoder),
    "qwen2_moe": Family(_QWEN2_MOE, _qwen2_moe, _derive_qwen_moe,
                        layout=Layout("moe", qwen_router=True, shared_expert=True)),
    "qwen3": Family(_QWEN3, _qwen3, _derive_decoder, layout=Layout("llama", qk_norm=True)),
    "qwen3_moe": Family(_QWEN3_MOE, _qwen3_moe, _derive_qwen_moe, {"num_local_experts": "num_experts"},
                        Layout("moe", qk_norm=True, qwen_router=True)),
    "gemma": Family(_GEMMA, _gemma_family(2, qk_norm=False), _derive_decoder, layout=Layout("llama", gemma=1)),
    "gemma2": Family(_GEMMA2, _gemma_family(4, qk_norm=False), _derive_decoder, layout=Layout("llama", gemma=2)),
    "gemma3_text": Family(_GEMMA3, _gemma_family(4, qk_norm=True), _derive_decoder,
                          layout=Layout("llama", qk_norm=True, gemma=3)),
    "phi3": Family(_PHI3, _phi3, _derive_decoder, layout=Layout("llama", fused_qkv=True)),
    "gpt2": Family(_GPT2, _gpt2, _derive_gpt2, _GPT2_ALIASES, Layout("gpt2")),
    "gpt_neox": Family(_GPT_NEOX, _gpt_neox, _derive_mha, layout=Layout("gpt_neox")),
    "opt": Family(_OPT, _opt, _derive_opt, layout=Layout("opt")),
    "falcon": Family(_FALCON, _falcon, _derive_falcon, layout=Layout("falcon")),
}
"""model_type -> how it is built and what it keeps. Anything else is counted on the meta device (see resolve.py)."""

KNOWN_FAMILIES: tuple[str, ...] = tuple(sorted(FAMILIES))


_LLAMA_LIKE_KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                    "num_key_value_heads", "head_dim", "vocab_size", "tie_word_embeddings", "max_position_embeddings")


def llama_like(config: Mapping[str, Any]) -> dict:
    """An architecture zerokit does not count by arithmetic (one built on the meta device) as the llama of its
    shape: width, depth, heads, MLP width, vocabulary. What the step-time model prices its matmuls as; the
    parameter count stays the meta device's exact one."""
    return {"model_type": "llama", **{k: config[k] for k in _LLAMA_LIKE_KEYS if config.get(k) is not None}}


def complete_config(config: Mapping[str, Any]) -> dict:
    """The config with this family's defaults filled in and the canonical keys the planner reads set.

    Canonical keys: hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim,
    intermediate_size, vocab_size, tie_word_embeddings. Every size is checked (a whole number, in a sane range)
    and so is the shape (the heads split hidden_size; the key/value heads divide the heads), so a broken config.json
    is one line of bad input rather than a wrong count, a crash or hours of arithmetic. Whether the shape can run
    (heads split hidden_size, ...) is `check_shape`, for configs people hand in: counting alone needs no more.
    """
    model_type = config.get("model_type")
    family = FAMILIES.get(str(model_type))
    if family is None:
        raise BadInput(f"zerokit cannot count model_type {model_type!r} by arithmetic; "
                       f"it knows: {', '.join(KNOWN_FAMILIES)}")
    given = dict(config)
    for canonical, actual in family.aliases.items():
        if canonical in given and actual not in given:
            given[actual] = given[canonical]
    c = {**family.defaults, **given}
    check_config_values(c, str(model_type))
    family.derive(c)
    for key in _SIZE_KEYS:
        _check_size(str(model_type), key, c.get(key))
    return c


_SIZE_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
              "intermediate_size", "vocab_size")

# Upper bounds far above any released model (the largest today: hidden 16384 or 18432, 126 layers, 256 experts,
# vocab 256k), low enough that the arithmetic and the planner's loops stay instant.
_WIDTH, _DEPTH, _HEADS = 2**20, 2**14, 2**14
_LIMITS: dict[str, int] = {
    "hidden_size": _WIDTH, "n_embd": _WIDTH, "n_embed": _WIDTH, "intermediate_size": _WIDTH * 8, "n_inner": _WIDTH * 8,
    "ffn_dim": _WIDTH * 8, "ffn_hidden_size": _WIDTH * 8, "moe_intermediate_size": _WIDTH * 8,
    "shared_expert_intermediate_size": _WIDTH * 8, "word_embed_proj_dim": _WIDTH,
    "num_hidden_layers": _DEPTH, "n_layer": _DEPTH, "decoder_sparse_step": _DEPTH,
    "num_attention_heads": _HEADS, "n_head": _HEADS, "num_key_value_heads": _HEADS, "num_kv_heads": _HEADS,
    "head_dim": _HEADS,
    "vocab_size": 2**24, "max_position_embeddings": 2**26, "n_positions": 2**26,
    "num_local_experts": 2**16, "num_experts": 2**16, "num_experts_per_tok": 2**16,
    "sliding_window": 2**26, "sliding_window_pattern": _DEPTH,
}
"""Config keys that are sizes or counts, and their largest sane value. None is fine where transformers derives
the value (head_dim, num_key_value_heads, ...); a missing key takes the family default."""


_NULLABLE = frozenset({"head_dim", "num_key_value_heads", "num_kv_heads", "n_inner", "ffn_hidden_size", "n_embed",
                       "word_embed_proj_dim", "sliding_window", "sliding_window_pattern"})
"""null in a config.json means "derive it" for these (transformers does; a null sliding_window: no window); for any
other size it is a mistake."""


_FRACTIONS = ("attention_dropout", "resid_pdrop", "embd_pdrop", "attn_pdrop", "dropout", "hidden_dropout",
              "rotary_pct", "partial_rotary_factor")
"""Config keys the activation model reads as a number from 0 to 1 (a dropout probability, the rotary share of a
head); null means 0 (or the family's default)."""


def check_config_values(config: Mapping[str, Any], model_type: str) -> None:
    """Every size or count a config.json gives is a whole number >= 1 and at most its bound in `_LIMITS`; every
    fraction (`_FRACTIONS`) a number from 0 to 1; and the few other fields the models read have their types."""
    for key in _FRACTIONS:
        _check_fraction(model_type, key, config.get(key))
    rope = config.get("rope_parameters")
    if isinstance(rope, tuple) and all(isinstance(kv, tuple) and len(kv) == 2 for kv in rope):
        rope = dict(rope)  # a spec's frozen config holds its objects as item tuples
    if rope is not None:
        if not isinstance(rope, dict):
            raise BadInput(f"{model_type} config: rope_parameters must be an object {{...}}, got {_shown(rope)}; fix "
                           "the config.json")
        _check_fraction(model_type, "rope_parameters.partial_rotary_factor", rope.get("partial_rotary_factor"))
    for key, allowed in (("num_ln_in_parallel_attn", (1, 2)),):
        value = config.get(key)
        if value is not None and (isinstance(value, bool) or value not in allowed):
            raise BadInput(f"{model_type} config: {key} must be {' or '.join(map(str, allowed))} (or null), got "
                           f"{_shown(value)}; fix the config.json")
    window_layers = config.get("max_window_layers")
    if window_layers is not None and (isinstance(window_layers, bool) or not isinstance(window_layers, int)
                                      or not 0 <= window_layers <= _DEPTH):
        raise BadInput(f"{model_type} config: max_window_layers must be a whole number from 0 to {_DEPTH:,}, got "
                       f"{_shown(window_layers)}; fix the config.json")
    for key, limit in _LIMITS.items():
        value = config.get(key)
        if value is None:
            if key in config and key not in _NULLABLE:
                _check_size(model_type, key, value)
            continue
        _check_size(model_type, key, value)
        if value > limit:
            raise BadInput(f"{model_type} config: {key} {value} is larger than any real model's (at most {limit:,}); "
                           "fix the config.json")


def _shown(value: Any) -> str:
    return repr(value) if len(repr(value)) <= 40 else repr(value)[:30] + "..."


def _check_size(model_type: str, key: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadInput(f"{model_type} config: {key} must be a whole number >= 1, got {_shown(value)}; fix the "
                       "config.json")


def _check_fraction(model_type: str, key: str, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise BadInput(f"{model_type} config: {key} must be a number from 0 to 1, got {_shown(value)}; fix the "
                       "config.json")


def check_shape(config: Mapping[str, Any], full: Mapping[str, Any]) -> None:
    """What transformers' attention needs to run the model `config` describes (`full` = `complete_config(config)`):
    without an explicit head_dim, the heads split hidden_size; the key/value heads divide the query heads (repeat_kv);
    top-k routing picks at most all experts. transformers builds such a model, then fails in its first forward."""
    model_type = str(full.get("model_type"))
    family = FAMILIES[model_type]
    for key, default in family.defaults.items():  # "yes" for tie_word_embeddings read as true
        if isinstance(default, bool) and config.get(key) is not None and not isinstance(config[key], bool):
            raise BadInput(f"{model_type} config: {key} must be true or false, got {str(config[key])[:40]!r}; fix the "
                           "config.json")
    given_head_dim = config["head_dim"] if "head_dim" in config else family.defaults.get("head_dim")
    head_dim_derived = given_head_dim is None or full["head_dim"] != given_head_dim
    c = full
    experts = c.get("num_local_experts", c.get("num_experts"))
    top_k = c.get("num_experts_per_tok")
    check_heads_and_experts(model_type, c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"],
                            head_dim_derived, experts if isinstance(experts, int) else None,
                            top_k if isinstance(top_k, int) else None)


def check_heads_and_experts(model_type: str, hidden: int | None, heads: int | None, kv: int | None,
                            head_dim_derived: bool, experts: int | None, top_k: int | None) -> None:
    """`check_shape`'s rules on the counts themselves (None: not given), for the families zerokit counts and those it
    builds on the meta device alike: without an explicit head_dim the heads split hidden_size, the key/value heads
    divide the query heads, top-k picks at most all experts."""
    if head_dim_derived and hidden and heads and hidden % heads:
        raise BadInput(f"{model_type} config: hidden_size {hidden} is not divisible by num_attention_heads {heads}: "
                       "each head gets hidden_size / num_attention_heads dimensions; fix the config.json")
    if heads and kv and heads % kv:
        raise BadInput(f"{model_type} config: num_key_value_heads {kv} does not divide num_attention_heads {heads}: "
                       "each key/value head serves num_attention_heads / num_key_value_heads query heads; fix the "
                       "config.json")
    if experts is not None and top_k is not None and top_k > experts:
        raise BadInput(f"{model_type} config: num_experts_per_tok {top_k} is more than the {experts} experts; fix the "
                       "config.json")


def model_parts(config: Mapping[str, Any]) -> list[Part]:
    """The parameter-owning modules of the model this config builds (see `Part`)."""
    c = complete_config(config)
    try:
        return FAMILIES[c["model_type"]].parts(c)
    except TypeError as e:
        raise BadInput(f"{c['model_type']} config has a value of the wrong type ({e}); fix the config.json") from None


def count_parameters(config: Mapping[str, Any]) -> tuple[int, int]:
    """(total parameters, largest-layer parameters) of `AutoModelForCausalLM.from_config(config)`, tied weights once."""
    parts = model_parts(config)
    total = sum(p.params * p.copies for p in parts if not p.tied)
    largest = max(p.params for p in parts if p.copies > 0)
    return int(total), int(largest)

"""Activation memory of decoder-only causal LMs, predicted from config.json by arithmetic alone.

Definitions (``../shared/CONTRACT.md``):

- ``activations``: the bytes autograd holds for backward at the end of the training forward pass of ONE
  micro-batch, loss included, parameters excluded -- exactly what ``measure_activations.py`` counts with
  saved-tensor hooks on real transformers code (each storage counted once).
- ``transient``: the extra peak above that during backward, parameter gradients excluded (they are
  ``gradients``). It is the larger of
  (a) the loss backward: the fp32 gradient of the log-probabilities plus the fp32 gradient of the logits,
  8 bytes per vocabulary entry per token, alive together while ``log_softmax``'s saved output is still held
  (matches the CPU profiler's replay of backward allocations to the byte, ``calibrate.measure(transient=True)``);
  (b) the lm_head backward: the logits gradient in the activation dtype plus the lm_head weight gradient;
  (c) one decoder layer's backward working set: gradients of its largest intermediates (3 x the MLP width,
  plus one score gradient per head and position with eager attention) and its largest weight gradient as
  materialised before accumulation (for MoE the stacked gate_up of all experts, often the largest term);
  with gradient checkpointing plus the recompute of that layer, i.e. one layer's full activations.

Design, chosen on the evidence: an analytic model per family is the default, and it is exact. Tracing every
saved tensor of CPU miniatures showed that what transformers keeps is a short, regular list per family (norm
inputs and their fp32 copies, q/k/v/output and the fp32 logsumexp of sdpa, the MLP intermediates, the fp32
log-probabilities of the loss), so each family is a small function in ``_FAMILIES`` built from shared pieces
(norms, attention kernels, MLPs, MoE routing, loss) and reproduces the measurement to the byte on the
families below (see ``benchmarks/activations.py``). It costs a few microseconds (memoised per config object),
which the planner needs. ``zerokit.memory.calibrate.calibrate`` is the measured mode for architectures not
modelled here: it runs the same config with 1 and 2 layers on the CPU and extrapolates per layer (exact, but
seconds to a minute, and needs torch + transformers). Unknown ``model_type`` values fall back to a llama-like
layout and come back with ``generic=True`` and a note that points to calibration; measured errors of that
fallback: olmo +10 %, stablelm +17 %, olmo2 -22 %, starcoder2 +61 %.

Ground truth is the CPU measurement, so CPU behaviour is modelled where it differs from CUDA:
- sdpa with attention dropout > 0 (gpt2 defaults) or with unequal q/kv heads and an explicit mask (falcon-7b
  multi-query) falls back to the math kernel, which upcasts bf16 to fp32 and keeps seq x seq probabilities
  (CUDA's flash/efficient kernels would not);
- dropout masks are stored in the activation dtype (CUDA stores 1-byte bool masks);
- at micro-batch 1 some eager matmuls keep a view instead of a copy (multi-query k/v, fused-qkv v).
"flash" is treated like sdpa (no seq x seq term); it cannot be measured on the CPU. A sliding window narrower
than the sequence makes sdpa receive a materialised mask (one per layer) and repeated k/v.
Known gap: gpt2 in fp32 with sdpa at micro-batch 1 is 4 % low.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

__all__ = ["MODELLED_FAMILIES", "ActivationEstimate", "estimate_activations"]

_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
_ATTENTION = ("sdpa", "flash", "eager")


@dataclass(frozen=True)
class ActivationEstimate:
    activations: int
    """Bytes autograd holds at the end of forward for ONE micro-batch (loss included, parameters excluded)."""
    transient: int
    """Extra peak above ``activations`` during backward (loss/logits gradients, one recomputed layer)."""
    generic: bool
    """True when ``model_type`` is not specifically modelled: the plan should warn."""
    note: str | None = None


class _Arch(NamedTuple):
    """Per-token byte coefficients of one family at one (attention, dtype) setting."""

    pre: float  # before the first layer (token ids, embedding dropout mask)
    layer: float  # sum over layers, per token
    layer_s2: float  # sum over layers, per token per position of the sequence (seq x seq terms)
    max_layer: float  # the largest single layer, per token
    max_layer_s2: float
    post: float  # final norm, logits, loss
    ckpt: float  # per layer and token kept under gradient checkpointing (the layer input)
    n_layers: int
    grad_tok: float  # one layer's backward gradient working set, per token
    grad_s2: float
    vocab: int
    pre_const: float = 0.0  # bytes per position shared by the batch (rotary cos/sin, position ids)
    fixed: float = 0.0  # bytes independent of batch and sequence
    layer_pos: float = 0.0  # like pre_const but inside the layers (gone under checkpointing): rotary cos/sin
    layer_fixed: float = 0.0  # like fixed, inside the layers
    window: int = 0  # sliding window: beyond it sdpa gets a materialised mask and repeated k/v
    window_tok: float = 0.0  # per token, all layers, added when seq > window (k/v repeated to all heads)
    mask_s: float = 0.0  # per token per position: materialised (b, 1, s, s) masks, one per layer
    ckpt_s2: float = 0.0  # per token per position kept under checkpointing (an eager float mask passed to layers)
    param_grad: float = 0.0  # the largest decoder-layer weight's gradient, materialised before it is accumulated
    hidden: int = 0
    b1: float = 0.0  # per token, added when micro_batch == 1 (views that need a copy at larger batches)
    note: str | None = None


def _get(c: Mapping[str, Any], *keys: str, default: Any = None) -> Any:
    for k in keys:
        v = c.get(k)
        if v is not None:
            return v
    return default


# ---------------------------------------------------------------------------------------------- shared pieces
def _rmsnorm(h: int, e: int) -> float:
    """llama-style RMSNorm: fp32 input copy, fp32 rstd, the cast-back normalised x (for weight grad), its output."""
    return 4 * h + 4 + 2 * e * h


def _gemma_norm(h: int, e: int) -> float:
    """Gemma RMSNorm multiplies by (1 + w) in fp32: fp32 input, rstd, fp32 normalised x, cast output."""
    return 8 * h + 4 + e * h


def _layernorm(h: int, e: int, new_input: bool = True) -> float:
    """nn.LayerNorm: input (unless already held), mean and rstd in the input dtype, the output for the next linear."""
    return (e * h if new_input else 0) + 2 * e + e * h


def _sdpa(e: int, q: int, kv: int, nh: int) -> float:
    """Flash-style sdpa: q, k, v (kv heads stay unrepeated via enable_gqa), output, fp32 logsumexp."""
    return e * (2 * q + 2 * kv) + 4 * nh


def _eager(e: int, q: int, nh: int, *, softmax_fp32: bool = True, dropout: bool = False,
           softcap: bool = False) -> tuple[float, float]:
    """Eager attention: q, repeated k and v, merged output (4 x q) plus the seq x seq terms per head."""
    s2 = 0.0
    if softcap:
        s2 += e  # tanh output of the softcapped scores
    s2 += 4 if softmax_fp32 else e  # softmax output (fp32 where the model upcasts)
    if dropout:
        s2 += 2 * e  # dropout mask + dropped probabilities, which the matmul keeps (CPU masks use the input dtype)
    elif softmax_fp32 and e != 4:
        s2 += e  # the probabilities cast back to the activation dtype, kept by the matmul
    return 4 * e * q, nh * s2


def _sdpa_math(e: int, q: int, nh: int) -> tuple[float, float]:
    """CPU sdpa math kernel (taken with dropout > 0, or unequal heads with a mask): fp32 q, k, v at full heads,
    fp32 softmax, dropout mask and dropped probabilities, plus the merged output in the activation dtype."""
    return 12 * q + e * q, 12 * nh


def _gated_mlp(e: int, i: int) -> float:
    """SwiGLU/GeGLU: gate output, activation output, up output, their product (down_proj input)."""
    return 4 * e * i


def _loss(e: int, vocab: int, softcap: bool = False) -> float:
    """ForCausalLMLoss: fp32 log_softmax output, shifted int64 labels, (tanh output when logits are softcapped)."""
    return 4 * vocab + 8 + (e * vocab if softcap else 0)


class _Dims(NamedTuple):
    h: int
    nh: int
    nkv: int
    hd: int
    i: int
    L: int
    V: int


def _dims(c: Mapping[str, Any], d: Mapping[str, Any]) -> _Dims:
    h = int(_get(c, "hidden_size", "n_embd", "d_model", default=d.get("hidden_size", 4096)))
    nh = int(_get(c, "num_attention_heads", "n_head", "num_heads", default=d.get("num_attention_heads", 32)))
    nkv = int(_get(c, "num_key_value_heads", "num_kv_heads", default=d.get("num_key_value_heads") or nh))
    hd = _get(c, "head_dim", default=d.get("head_dim"))
    hd = int(hd) if hd else h // nh
    i = int(_get(c, "intermediate_size", "ffn_dim", "n_inner", "ffn_hidden_size",
                 default=d.get("intermediate_size") or 4 * h))
    L = int(_get(c, "num_hidden_layers", "n_layer", "num_layers", default=d.get("num_hidden_layers", 32)))
    V = int(_get(c, "vocab_size", default=d.get("vocab_size", 32000)))
    return _Dims(h, nh, nkv, hd, i, L, V)


def _grad(e: int, h: int, i: int, s2_per_head: float, nh: int) -> tuple[float, float]:
    """One layer's backward working set: gradients of the MLP intermediates (and eager score gradients).

    The seq x seq part (about one activation-dtype score gradient per head plus a byte of fp32 slack) is fitted to
    CPU profiler measurements of eager llama/gpt2 layers (``calibrate.measure(transient=True)``).
    """
    return 3 * e * max(i, h), (nh * (e + 1) if s2_per_head else 0.0)


# ------------------------------------------------------------------------------------------------- families
def _llama_like(c: Mapping[str, Any], e: int, attention: str, *, defaults: Mapping[str, Any],
                qk_norm: bool = False, gemma: int = 0, fused_qkv: bool = False) -> _Arch:
    """llama, mistral, qwen2, qwen3 (q/k norms), gemma (fp32 (1+w) norms), gemma2 (4 norms, softcaps), phi3."""
    D = _dims(c, defaults)
    h, nh, nkv, hd, i, L, V = D
    q, kv = nh * hd, nkv * hd
    norm = _gemma_norm(h, e) if gemma else _rmsnorm(h, e)
    # gemma2 adds post-attention/post-feedforward norms whose output goes to the residual (no linear keeps it)
    norms = 2 * norm + (2 * (norm - e * h) if gemma == 2 else 0)
    dropout = float(_get(c, "attention_dropout", default=0.0) or 0.0) > 0
    if attention == "eager":
        attn, s2 = _eager(e, q, nh, dropout=dropout, softcap=gemma == 2 and bool(
            _get(c, "attn_logit_softcapping", default=defaults.get("attn_logit_softcapping"))))
    elif dropout and attention == "sdpa":  # the CPU has no flash kernel with dropout
        attn, s2 = _sdpa_math(e, q, nh)
    else:
        attn, s2 = _sdpa(e, q, kv, nh), 0.0
        if fused_qkv:  # v stays a view of the fused qkv output (whole storage held); o_proj gets a merged copy
            attn = e * (2 * q + kv) + e * (q + 2 * kv) + 4 * nh + e * q
    if qk_norm:
        attn += 4 * (q + kv) + 4 * (nh + nkv) + e * (q + kv)
    layer = norms + attn + _gated_mlp(e, i)
    softcap = gemma == 2 and bool(_get(c, "final_logit_softcapping", default=defaults.get("final_logit_softcapping")))
    g, gs2 = _grad(e, h, i, s2, nh)
    # cos/sin of the rotary embedding are shared by the batch and all layers; gemma keeps each norm's fp32 (1+w)
    layer_fixed = 4 * h * (4 if gemma == 2 else 2) * L if gemma else 0
    b1 = 0.0  # micro-batch 1: matmul folds (1, heads, ...) into a view instead of a copy
    if attention == "eager" and nkv == 1 < nh:
        b1 = -2 * e * (q - kv)  # repeated MQA k/v stay views of the single kv head
    elif attention == "eager" and fused_qkv and nkv == nh:
        b1 = 2 * e * kv  # v stays a view of the whole fused qkv storage
    window = _get(c, "sliding_window", default=defaults.get("sliding_window")) if (
        c.get("use_sliding_window", "use_sliding_window" not in defaults)) else None
    if gemma == 2 or dropout or attention != "sdpa":  # flash handles windows natively
        window = None  # eager adds the mask without keeping it; math-kernel and gemma2 cases are modelled above
    return _Arch(8, L * layer, L * s2, layer, s2, norm + _loss(e, V, softcap), e * h, L, g, gs2, V,
                 param_grad=e * h * max(i * (2 if fused_qkv else 1), q + 2 * kv), hidden=h,
                 layer_pos=2 * e * hd, b1=L * b1, fixed=4 * h if gemma else 0,
                 layer_fixed=layer_fixed, window=int(window or 0), window_tok=L * 2 * e * (q - kv), mask_s=L * e)


# transformers' defaults per family, used where config.json leaves a key out
_LLAMA_D = {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
                "vocab_size": 32000}
_MISTRAL_D = dict(_LLAMA_D, intermediate_size=14336, num_key_value_heads=8, sliding_window=4096)
_QWEN2_D = dict(_LLAMA_D, intermediate_size=22016, vocab_size=151936, num_key_value_heads=32,
                use_sliding_window=False, sliding_window=4096)
_QWEN3_D = dict(_QWEN2_D, head_dim=128)
_GEMMA_D = {"hidden_size": 3072, "intermediate_size": 24576, "num_hidden_layers": 28, "num_attention_heads": 16,
                "num_key_value_heads": 16, "head_dim": 256, "vocab_size": 256000}
_GEMMA2_D = {"hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26, "num_attention_heads": 8,
                 "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 256000, "final_logit_softcapping": 30.0,
                 "attn_logit_softcapping": 50.0}
_PHI3_D = {"hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32, "num_attention_heads": 32,
               "vocab_size": 32064}
_MIXTRAL_D = dict(_MISTRAL_D, num_local_experts=8, num_experts_per_tok=2)
_QWEN2_MOE_D = {"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 24, "num_attention_heads": 16,
                    "num_key_value_heads": 16, "vocab_size": 151936, "moe_intermediate_size": 1408,
                    "shared_expert_intermediate_size": 5632, "num_experts_per_tok": 4, "num_experts": 60}
_QWEN3_MOE_D = {"hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 24, "num_attention_heads": 32,
                "num_key_value_heads": 4, "vocab_size": 151936, "moe_intermediate_size": 768, "num_experts_per_tok": 8,
                "num_experts": 128}
_GPT2_D = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "vocab_size": 50257}
_OPT_D = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12, "num_attention_heads": 12, "vocab_size": 50272}
_NEOX_D = {"hidden_size": 6144, "intermediate_size": 24576, "num_hidden_layers": 44, "num_attention_heads": 64,
               "vocab_size": 50432}
_FALCON_D = {"hidden_size": 4544, "num_hidden_layers": 32, "num_attention_heads": 71, "vocab_size": 65024}


def _moe(c: Mapping[str, Any], e: int, attention: str, *, defaults: Mapping[str, Any], qwen: bool,
         shared: bool = True, qk_norm: bool = False) -> _Arch:
    """mixtral, qwen2_moe, qwen3_moe: attention as llama; the MLP is a router (fp32 softmax, top-k) and the top-k
    experts run grouped (each token's hidden state gathered k times), plus qwen2_moe's gated shared expert."""
    base = _llama_like(c, e, attention, defaults=defaults, qk_norm=qk_norm)
    D = _dims(c, defaults)
    h, L = D.h, D.L
    k = int(_get(c, "num_experts_per_tok", default=defaults["num_experts_per_tok"]))
    n_exp = int(_get(c, "num_local_experts", "num_experts", default=defaults.get("num_local_experts")
                     or defaults.get("num_experts")))
    if qwen:
        ie = int(_get(c, "moe_intermediate_size", default=defaults["moe_intermediate_size"]))
        norm_topk = bool(_get(c, "norm_topk_prob", default=False))
        router = 4 * n_exp + 8 * k + (4 + 4 * k if norm_topk else 0)
        weights = 4 * k if norm_topk else e * k
        moe = router + 24 * k + weights + 2 * e * h * k + 4 * e * ie * k
        if shared:  # shared expert MLP, its sigmoid gate output and the gated product's input
            ish = int(_get(c, "shared_expert_intermediate_size", default=defaults["shared_expert_intermediate_size"]))
            moe += _gated_mlp(e, ish) + e + e * h
        dense = _gated_mlp(e, D.i)
        sparse_step = int(_get(c, "decoder_sparse_step", default=1))
        only = set(_get(c, "mlp_only_layers", default=()) or ())
        n_moe = sum(1 for li in range(L) if li not in only and n_exp > 0 and (li + 1) % sparse_step == 0)
    else:
        ie = D.i
        moe = 4 * n_exp + 8 * k + 4 + 4 * k + 24 * k + 4 * k + 2 * e * h * k + 4 * e * ie * k
        dense, n_moe = moe, L
    per_dense = base.max_layer - _gated_mlp(e, D.i)
    layer_sum = per_dense * L + moe * n_moe + dense * (L - n_moe)
    max_layer = per_dense + max(moe if n_moe else 0, dense if n_moe < L else 0)
    g = 3 * e * max(ie * k, h)
    # experts are stacked 3-D parameters: the gate_up gradient of all experts of a layer is one tensor
    return base._replace(layer=layer_sum, max_layer=max_layer, grad_tok=g,
                         param_grad=max(base.param_grad, e * n_exp * 2 * ie * h))


def _gpt2(c: Mapping[str, Any], e: int, attention: str) -> _Arch:
    D = _dims(c, _GPT2_D)
    h, nh, _, hd, i, L, V = D
    q = nh * hd
    resid = float(_get(c, "resid_pdrop", default=0.1)) > 0
    embd = float(_get(c, "embd_pdrop", default=0.1)) > 0
    attn_drop = float(_get(c, "attn_pdrop", default=0.1)) > 0
    if attention == "eager":
        attn, s2 = 4 * e * q, nh * (e + (2 * e if attn_drop else 0))
    elif attn_drop and attention == "sdpa":  # CPU sdpa + dropout: fp32 math kernel (q, k, v, softmax, mask, probs)
        attn, s2 = 12 * q + e * q, 12 * nh
    else:
        attn, s2 = _sdpa(e, q, q, nh), 0.0
    mlp = 5 * e * i  # gelu_new is python: x, x^3 terms, tanh output, the product; c_proj input
    layer = 2 * _layernorm(h, e) + attn + mlp + (2 * e * h if resid else 0)
    g, gs2 = _grad(e, h, i, s2, nh)
    if attention == "sdpa" and attn_drop:
        gs2 = 9 * nh  # the math kernel's fp32 score gradients
    return _Arch(8 + (e * h if embd else 0), L * layer, L * s2, layer, s2, _layernorm(h, e) + _loss(e, V),
                 e * h, L, g, gs2, V, pre_const=8, ckpt_s2=e if attention == "eager" else 0,
                 param_grad=e * h * i, hidden=h)


def _opt(c: Mapping[str, Any], e: int, attention: str) -> _Arch:
    D = _dims(c, _OPT_D)
    h, nh, _, hd, i, L, V = D
    q = nh * hd
    drop = float(_get(c, "dropout", default=0.1)) > 0
    attn_drop = float(_get(c, "attention_dropout", default=0.0)) > 0
    if attention == "eager":
        attn, s2 = _eager(e, q, nh, dropout=attn_drop)
    else:
        attn, s2 = _sdpa(e, q, q, nh), 0.0
    layer = 2 * _layernorm(h, e) + attn + e * i + (2 * e * h if drop else 0)
    proj = int(_get(c, "word_embed_proj_dim", default=h) or h)
    pre_ln = bool(_get(c, "do_layer_norm_before", default=True))
    post = (_layernorm(h, e) if pre_ln else e * h) + _loss(e, V)  # post-LN (opt-350m) has no final norm
    if proj != h:  # project_in / project_out keep their inputs
        post += e * proj
    g, gs2 = _grad(e, h, i, s2, nh)
    return _Arch(16 + (e * proj if proj != h else 0), L * layer, L * s2, layer, s2, post, e * h, L, g, gs2, V,
                 param_grad=e * h * i, hidden=h)


def _gpt_neox(c: Mapping[str, Any], e: int, attention: str) -> _Arch:
    D = _dims(c, _NEOX_D)
    h, nh, _, hd, i, L, V = D
    q = nh * hd
    parallel = bool(_get(c, "use_parallel_residual", default=True))
    if attention == "eager":
        attn, s2 = _eager(e, q, nh)
    else:  # q, k after rotary, the fused qkv storage behind v, lse, output and its merged copy
        attn, s2 = e * (2 * q + 3 * q + 2 * q) + 4 * nh, 0.0
    ln2 = _layernorm(h, e, new_input=not parallel)
    layer = _layernorm(h, e) + ln2 + attn + 2 * e * i
    g, gs2 = _grad(e, h, i, s2, nh)
    rot = int(hd * float(_get(c, "rotary_pct", "partial_rotary_factor", default=0.25)))
    b1 = 2 * e * q if attention == "eager" else 0  # v stays a view of the fused qkv storage at micro-batch 1
    return _Arch(8, L * layer, L * s2, layer, s2, _layernorm(h, e) + _loss(e, V), e * h, L, g, gs2, V,
                 param_grad=e * h * max(i, 3 * q), hidden=h,
                 layer_pos=2 * e * rot, b1=L * b1)


def _falcon(c: Mapping[str, Any], e: int, attention: str) -> _Arch:
    D = _dims(c, _FALCON_D)
    h, nh, _, hd, _, L, V = D
    q = nh * hd
    i = int(_get(c, "ffn_hidden_size", default=4 * h))
    new_arch = bool(_get(c, "new_decoder_architecture", default=False))
    multi_query = not new_arch and bool(_get(c, "multi_query", default=True))
    mask = 0
    if attention == "eager":
        attn, s2 = 4 * e * q, nh * e  # softmax in the activation dtype, kv broadcast to all heads
    elif attention == "flash":  # flash-attn takes multi-query/grouped k, v and needs no mask
        attn, s2 = _sdpa(e, q, (nh if new_arch or not multi_query else 1) * hd, nh), 0.0
    elif new_arch:  # k/v broadcast and flattened into copies at all heads; the mask is always materialised
        attn, s2, mask = e * 4 * q + 4 * nh, 0.0, e
    elif not multi_query:  # q, k after rotary, the fused qkv storage behind v, lse, output
        attn, s2, mask = e * 6 * q + 4 * nh, 0.0, e
    else:  # explicit mask + unequal heads: CPU math kernel, fp32 q/k/v (broadcast) and probabilities
        attn, s2 = 12 * q + e * q, 4 * nh
    n_ln = int(_get(c, "num_ln_in_parallel_attn", default=2 if new_arch else 1) or 1)
    parallel = bool(_get(c, "parallel_attn", default=True)) or new_arch
    if parallel:
        lns = _layernorm(h, e) + (n_ln - 1) * _layernorm(h, e, new_input=False)
    else:
        lns = 2 * _layernorm(h, e)
    layer = lns + attn + 2 * e * i
    g, gs2 = _grad(e, h, i, s2, nh)
    if attention == "sdpa" and multi_query:
        gs2 = 9 * nh  # the math kernel's fp32 score gradients
    b1 = 0.0  # micro-batch 1, eager: k/v of multi-query stay unbroadcast; v of plain MHA stays a view of qkv
    if attention == "eager" and multi_query:
        b1 = -2 * e * (q - hd)
    elif attention == "sdpa" and multi_query:
        b1 = -2 * 4 * (q - hd)  # the fp32 k/v of the math kernel
    elif attention == "eager" and not new_arch:
        b1 = 2 * e * q
    rope = 0 if _get(c, "alibi", default=False) else 2 * e * hd
    return _Arch(8, L * layer, L * s2, layer, s2, _layernorm(h, e) + _loss(e, V), e * h, L, g, gs2, V,
                 param_grad=e * h * max(i, 3 * q), hidden=h,
                 layer_pos=rope, b1=L * b1, window=1 if mask else 0, mask_s=L * mask)


_Family = Callable[[Mapping[str, Any], int, str], _Arch]

_FAMILIES: dict[str, _Family] = {
    "llama": lambda c, e, a: _llama_like(c, e, a, defaults=_LLAMA_D),
    "mistral": lambda c, e, a: _llama_like(c, e, a, defaults=_MISTRAL_D),
    "qwen2": lambda c, e, a: _llama_like(c, e, a, defaults=_QWEN2_D),
    "qwen3": lambda c, e, a: _llama_like(c, e, a, defaults=_QWEN3_D, qk_norm=True),
    "gemma": lambda c, e, a: _llama_like(c, e, a, defaults=_GEMMA_D, gemma=1),
    "gemma2": lambda c, e, a: _llama_like(c, e, a, defaults=_GEMMA2_D, gemma=2),
    "phi3": lambda c, e, a: _llama_like(c, e, a, defaults=_PHI3_D, fused_qkv=True),
    "mixtral": lambda c, e, a: _moe(c, e, a, defaults=_MIXTRAL_D, qwen=False),
    "qwen2_moe": lambda c, e, a: _moe(c, e, a, defaults=_QWEN2_MOE_D, qwen=True),
    "qwen3_moe": lambda c, e, a: _moe(c, e, a, defaults=_QWEN3_MOE_D, qwen=True, shared=False, qk_norm=True),
    # granite = llama plus scalar multipliers, which keep nothing for backward (measured identical)
    "granite": lambda c, e, a: _llama_like(c, e, a, defaults=_LLAMA_D),
    "gpt2": _gpt2,
    "opt": _opt,
    "gpt_neox": _gpt_neox,
    "falcon": _falcon,
}
MODELLED_FAMILIES = tuple(sorted(_FAMILIES))


_CACHE: dict[tuple[int, int, str], tuple[dict, _Arch]] = {}


def _arch(config: Mapping[str, Any], family: _Family, e: int, attention: str) -> _Arch:
    """The family's coefficients, memoised per config object: the planner asks thousands of times per config."""
    key = (id(config), e, attention)
    hit = _CACHE.get(key)
    if hit is not None and hit[0] == config:  # equality guards against a reused id or a mutated dict
        return hit[1]
    arch = family(config, e, attention)
    if len(_CACHE) > 256:
        _CACHE.clear()
    _CACHE[key] = (dict(config), arch)
    return arch


def estimate_activations(config: Mapping[str, Any], seq_len: int, micro_batch: int, *, attention: str = "sdpa",
                         dtype: str = "bf16", gradient_checkpointing: bool = False) -> ActivationEstimate:
    """Predict activations and the backward transient of one micro-batch from a transformers config dict."""
    e = _DTYPE_BYTES.get(dtype)
    if e is None:
        raise ValueError(f"dtype must be one of {sorted(_DTYPE_BYTES)}, got {dtype!r}")
    if attention not in _ATTENTION:
        raise ValueError(f"attention must be one of {list(_ATTENTION)}, got {attention!r}")
    if seq_len < 1 or micro_batch < 1:
        raise ValueError(f"seq_len and micro_batch must be >= 1, got {seq_len} and {micro_batch}")
    model_type = str(config.get("model_type", ""))
    family = _FAMILIES.get(model_type)
    generic = family is None
    arch = _arch(config, family or _FAMILIES["llama"], e, attention)
    s, b = seq_len, micro_batch
    tokens = s * b
    note = arch.note
    if generic:
        note = (f"model_type {model_type or '(missing)'!r} is not modelled: llama-like layout assumed; "
                "use zerokit.memory.calibrate for an exact figure")
    elif model_type == "gemma2" and attention == "sdpa":
        note = "transformers refuses sdpa for gemma2 (attention softcapping): estimated as flash"
    masked = arch.window and s > arch.window
    if gradient_checkpointing:
        acts = tokens * (arch.pre + arch.n_layers * arch.ckpt + arch.post + arch.ckpt_s2 * s)
        # the recomputed layer is freed tensor by tensor as its backward runs: its gradients overlap it only partly
        layer_peak = tokens * (arch.max_layer + arch.max_layer_s2 * s + (arch.grad_tok + arch.grad_s2 * s) / 2)
    else:
        acts = tokens * (arch.pre + arch.layer + arch.layer_s2 * s + arch.post)
        layer_peak = tokens * (arch.grad_tok + arch.grad_s2 * s)
    acts += arch.fixed + arch.pre_const * s
    if not gradient_checkpointing:
        acts += arch.layer_fixed + arch.layer_pos * s + (arch.b1 * tokens if b == 1 else 0)
        if masked:
            acts += tokens * (arch.window_tok + arch.mask_s * s)
    loss_peak = tokens * 8 * arch.vocab  # fp32 grads of the log-probs and of the logits
    head_peak = tokens * 2 * arch.vocab + e * arch.vocab * arch.hidden  # bf16 logits grad + lm_head weight grad
    layer_peak += arch.param_grad / (2 if gradient_checkpointing else 1)
    return ActivationEstimate(int(acts), int(max(loss_peak, head_peak, layer_peak)), generic, note)

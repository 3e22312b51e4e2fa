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
  with gradient checkpointing plus the recompute of that layer, i.e. one layer's full activations. With
  QLoRA, the 4-bit base weights are dequantized one at a time in forward and backward: the largest one, in the
  compute dtype, takes the weight gradient's place.

Design, chosen on the evidence: an analytic model per family is the default, and it is exact. Tracing every
saved tensor of CPU miniatures showed that what transformers keeps is a short, regular list per family (norm
inputs and their fp32 copies, q/k/v/output and the fp32 logsumexp of sdpa, the MLP intermediates, the fp32
log-probabilities of the loss), so each layout is a small function built from shared pieces (norms, attention
kernels, MLPs, MoE routing, loss). Which layout a ``model_type`` uses, and its defaults, come from the one family
registry, ``zerokit.models.params.FAMILIES``. It costs a few microseconds (memoised per config object), which the
planner needs. ``zerokit.memory.calibrate.calibrate`` is the measured mode for architectures not modelled here.
Unknown ``model_type`` values fall back to a llama-like layout and come back with ``generic=True``. A family that
transformers builds without sdpa (``NO_SDPA``: gemma2) runs eager attention when sdpa is asked (the default load falls
back to it), so ``attention="sdpa"`` is estimated as eager there, with a note.

LoRA (``lora=LoraSetup(...)``): the base weights are frozen, so every tensor that only a weight gradient needed is
gone (a frozen linear's input, a norm's normalised input), and each adapted module adds what PEFT's ``lora.Linear``
keeps: its input cast to the fp32 of the adapter weights (``autocast_adapter_dtype``; one copy per module), or with
``lora_dropout`` the dropout mask and the dropped fp32 input, plus the fp32 rank-r output of ``lora_A``. Before the
first adapter of the first layer nothing requires a gradient, so that layer keeps less; with checkpointing, PEFT
needs ``enable_input_require_grads`` (the HF Trainer calls it) and each layer keeps its input as without LoRA.
QLoRA's ``Linear4bit`` keeps no input either, so its activations are LoRA's.

Devices (``device=``). The CPU path is exact against ``measure_activations.py``; a GPU plan uses ``"cuda"``, which
differs where the kernels do (read from torch 2.x ``sdp_utils.cpp``/``Dropout.cpp`` and transformers 5.23; no GPU
measured them here):
- dropout masks: the CPU keeps the ``bernoulli`` noise in the input dtype (``_dropout_impl``), CUDA the fused
  ``native_dropout``'s 1-byte bool mask (attention, residual and embedding dropout, LoRA dropout);
- sdpa with dropout: the CPU has no fused kernel with dropout and runs the math kernel (fp32 q, k, v at full heads,
  fp32 softmax, mask and dropped probabilities); CUDA's flash/efficient/cuDNN kernels take dropout and keep only
  q, k, v, the output and the fp32 logsumexp (the dropout pattern is regenerated from the RNG state);
- sdpa with a mask and unequal heads (falcon-7b multi-query): the CPU math kernel again; CUDA's efficient kernel
  supports multi-query with a mask (``supports_mqa``) and keeps q, the single k/v head, the output, the logsumexp
  and the float mask it was given;
- fp32 sdpa and head_dim > 256: flash refuses them, the efficient kernel takes them (same saved tensors);
- ``attention="flash"`` (flash-attn 2) never materialises masks, handles sliding windows and grouped k/v itself,
  on either device.
What does not differ: transformers still repeats k/v to every head when it passes a mask (``use_gqa_in_sdpa``),
a sliding window narrower than the sequence still materialises a mask (one float copy per layer), eager attention
is the same code. The efficient kernel pads its logsumexp to 32 positions and flash keeps a few bytes of RNG state
per layer; both are ignored.
Known gap on the CPU: gpt2 in fp32 with sdpa at micro-batch 1 is 4 % low.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from zerokit._dataclass import dataclass
from zerokit.models.params import FAMILIES, Layout, complete_config

__all__ = ["DEVICES", "MODELLED_FAMILIES", "NO_SDPA", "ActivationEstimate", "LoraSetup", "analytic_figures",
           "estimate_activations", "kernel_run", "no_sdpa_note"]

_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
_ATTENTION = ("sdpa", "flash", "eager")
DEVICES = ("cuda", "cpu")
"""`device=` values; "cuda" (the default) is what a GPU plan uses, "cpu" matches measure_activations.py."""
NO_SDPA = frozenset({"gemma2"})
"""Modelled families transformers 5.23 builds without sdpa (`_supports_sdpa = False`; gemma2: sdpa cannot softcap
the scores, modeling_gemma2.py). `get_correct_attn_implementation` (modeling_utils.py) turns a load that names no
kernel into eager and raises on `attn_implementation="sdpa"`: either way such a run computes eager attention."""


def kernel_run(model_type: str, attention: str) -> str:
    """The attention kernel a run asking for `attention` computes: eager where sdpa is asked of a family without it."""
    return "eager" if attention == "sdpa" and model_type in NO_SDPA else attention


def no_sdpa_note(model_type: str) -> str:
    """The warning of a plan made for eager attention because the family has no sdpa (`kernel_run`)."""
    return (f"{model_type} has no sdpa attention in transformers: a default load runs eager attention and "
            "attn_implementation='sdpa' raises, so this is planned as --attention eager (score matrices kept); with "
            "flash-attn installed, pass --attention flash and load the model with "
            "attn_implementation='flash_attention_2' for a plan without them")


@dataclass(frozen=True)
class ActivationEstimate:
    """One micro-batch's activation memory: what autograd holds for backward, and the transient peaks above it."""

    activations: int
    """Bytes autograd holds at the end of forward for ONE micro-batch (loss included, parameters excluded)."""
    transient: int
    """Extra peak above ``activations`` during backward (loss/logits gradients, one recomputed layer)."""
    generic: bool
    """True when ``model_type`` is not specifically modelled: the plan should warn."""
    note: str | None = None
    forward_transient: int = 0
    """Extra peak above ``activations`` at the end of forward: the logits and their fp32 upcast, alive while the
    loss allocates its fp32 log-probabilities (the phase model's forward peak)."""
    loss_transient: int = 0
    """The three candidates for ``transient``, kept apart because DeepSpeed's buffers differ at each moment of
    backward: the loss backward (fp32 gradients of log-probs and logits), ..."""
    head_transient: int = 0
    """... the lm_head backward (the logits gradient and the head's weight gradient), ..."""
    layer_transient: int = 0
    """... and one decoder layer's backward working set (with checkpointing, its recompute)."""
    head_weight_gradient: int = 0
    """The lm_head's weight gradient (part of head_transient; none when the head is frozen): the first gradient
    DeepSpeed reduces, still alive when the logits gradient is already freed."""


@dataclass(frozen=True)
class LoraSetup:
    """The adapters, as `peft.LoraConfig` takes them (see `zerokit.models.lora`)."""

    rank: int
    targets: str | tuple[str, ...] = "all-linear"
    """`"all-linear"` or module names; resolved per family by `zerokit.models.lora.lora_parameters`."""
    dropout: float = 0.0
    quantized: bool = False
    """QLoRA: the base linears are bitsandbytes 4-bit (dequantized one at a time: a transient, not an activation)."""
    adapter_bytes: int = 4
    """Bytes per element of the adapter weights, which their inputs are cast to: 4 as PEFT leaves them on a 16-bit
    base (`get_peft_model(autocast_adapter_dtype=True)` upcasts them to fp32); the training dtype's width where
    DeepSpeed's engine casts every parameter to it (ZeRO-0/1/2: `_cast_module_mixed_precision`)."""
    saved: tuple[str, ...] = ()
    """PEFT's `modules_to_save` by role: "embedding" (the input embedding) and "head" (the output head), each a
    trainable copy beside the frozen original. A trainable embedding makes every layer's input need a gradient (the
    first layer keeps what the others keep, the token ids stay for the embedding's backward); a trainable head
    keeps its input (the final norm's output) and computes its weight gradient."""

    def __post_init__(self) -> None:
        if not isinstance(self.targets, str):  # hashable, for the memo
            object.__setattr__(self, "targets", tuple(self.targets))


class _Arch(NamedTuple):
    """Per-token byte coefficients of one family at one (attention, dtype, device, adapters) setting."""

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
    window: int = 0  # sliding window: from this length on sdpa gets a materialised mask and repeated k/v
    window_tok: float = 0.0  # per token, all windowed layers, added when seq >= window (k/v repeated to all heads)
    mask_s: float = 0.0  # per token per position: materialised (b, 1, s, s) masks, one per windowed layer
    ckpt_s2: float = 0.0  # per token per position kept under checkpointing (an eager float mask passed to layers)
    param_grad: float = 0.0  # the largest decoder-layer weight's gradient (or QLoRA dequantized weight) in backward
    hidden: int = 0
    b1: float = 0.0  # per token, added when micro_batch == 1 (views that need a copy at larger batches)
    head_weight_grad: bool = True  # the lm_head weight trains (its gradient is part of the lm_head backward)
    ckpt_pre: float = 0.0  # per token, added under checkpointing only (LoRA: what enable_input_require_grads keeps)
    max_layer_fixed: float = 0.0  # batch-independent bytes one recomputed layer holds (merged MoE expert stacks)
    note: str | None = None


class _Ctx(NamedTuple):
    """What the layout builders need to know besides the config."""

    e: int  # bytes per activation element
    cuda: bool
    lora: bool  # the base weights are frozen
    adapted: frozenset[str] = frozenset()
    rank: int = 0
    dropout: bool = False
    quantized: bool = False
    a: int = 4  # bytes per element of the adapter weights (LoraSetup.adapter_bytes)
    embedding: bool = False  # the input embedding trains (a modules_to_save copy): its output needs a gradient
    head: bool = False  # the output head trains (a modules_to_save copy): its input is kept, its weight has a gradient

    def mask(self, elem: int) -> int:
        """Bytes per element of a dropout mask over a tensor of `elem`-byte elements (CUDA: 1-byte bool)."""
        return 1 if self.cuda else elem

    def ad(self, *names: str) -> bool:
        return any(n in self.adapted for n in names)

    def adapters(self, names: tuple[str, ...], n_in: int, input_kept: bool = False) -> float:
        """Per token: PEFT lora.Linear on each adapted module of `names`, which all read one input of width n_in.

        Each keeps its input cast to the adapters' dtype (a copy per module unless the adapters are in the
        activations' dtype, where the input itself is kept once) or, with dropout, the mask and the dropped input in
        the adapters' dtype; and lora_A's rank-r output in that dtype.
        """
        k = sum(1 for n in names if n in self.adapted)
        if not k:
            return 0.0
        a = self.a
        if self.dropout:
            per = (self.mask(a) + a) * n_in
        elif self.e != a:
            per = a * n_in
        else:
            per = 0
        shared = a * n_in if (self.e == a and not self.dropout and not input_kept) else 0
        return k * (per + a * self.rank) + shared


def _get(c: Mapping[str, Any], *keys: str, default: Any = None) -> Any:
    for k in keys:
        v = c.get(k)
        if v is not None:
            return v
    return default


# ---------------------------------------------------------------------------------------------- shared pieces
def _gated_mlp(e: int, i: int) -> float:
    """SwiGLU/GeGLU: gate output, activation output, up output, their product (down_proj input)."""
    return 4 * e * i


def _loss(e: int, vocab: int, softcap: bool = False) -> float:
    """ForCausalLMLoss: fp32 log_softmax output, shifted int64 labels, (tanh output when logits are softcapped)."""
    return 4 * vocab + 8 + (e * vocab if softcap else 0)


def _layernorm(h: int, e: int, new_input: bool = True, trains: bool = True) -> float:
    """nn.LayerNorm: input (unless already held), mean and rstd, and (for the next linear's weight) its output."""
    return (e * h if new_input else 0) + 2 * e + (e * h if trains else 0)


def _sdpa(e: int, q: int, kv: int, nh: int) -> float:
    """Flash-style sdpa: q, k, v (kv heads stay unrepeated via enable_gqa), output, fp32 logsumexp."""
    return e * (2 * q + 2 * kv) + 4 * nh


def _sdpa_math(e: int, q: int, nh: int) -> tuple[float, float]:
    """CPU sdpa math kernel (taken with dropout > 0, or unequal heads with a mask): fp32 q, k, v at full heads,
    fp32 softmax, dropout mask and dropped probabilities, plus the merged output in the activation dtype."""
    return 12 * q + e * q, 12 * nh


def _eager_s2(x: _Ctx, *, softmax_fp32: bool = True, dropout: bool = False, softcap: bool = False) -> float:
    """Eager attention's seq x seq bytes per head: softcap tanh, softmax output, dropout mask and dropped/cast probs."""
    e = x.e
    s2 = e if softcap else 0.0
    s2 += 4 if softmax_fp32 else e
    if dropout:
        s2 += x.mask(e) + e  # dropout mask + dropped probabilities, which the matmul keeps
    elif softmax_fp32 and e != 4:
        s2 += e  # the probabilities cast back to the activation dtype, kept by the matmul
    return s2


class _Dims(NamedTuple):
    h: int
    nh: int
    nkv: int
    hd: int
    i: int
    L: int
    V: int


_GENERIC = {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
            "vocab_size": 32000}


def _dims(c: Mapping[str, Any]) -> _Dims:
    h = int(_get(c, "hidden_size", "n_embd", "d_model", default=_GENERIC["hidden_size"]))
    nh = int(_get(c, "num_attention_heads", "n_head", "num_heads", default=_GENERIC["num_attention_heads"]))
    nkv = int(_get(c, "num_key_value_heads", "num_kv_heads", default=nh))
    hd = _get(c, "head_dim")
    hd = int(hd) if hd else h // nh
    i = int(_get(c, "intermediate_size", "ffn_dim", "n_inner", "ffn_hidden_size", default=4 * h))
    L = int(_get(c, "num_hidden_layers", "n_layer", "num_layers", default=_GENERIC["num_hidden_layers"]))
    V = int(_get(c, "vocab_size", default=_GENERIC["vocab_size"]))
    return _Dims(h, nh, nkv, hd, i, L, V)


def _grad(e: int, h: int, i: int, s2_per_head: float, nh: int) -> tuple[float, float]:
    """One layer's backward working set: gradients of the MLP intermediates (and eager score gradients).

    The seq x seq part (about one activation-dtype score gradient per head plus a byte of fp32 slack) is fitted to
    CPU profiler measurements of eager llama/gpt2 layers (``calibrate.measure(transient=True)``).
    """
    return 3 * e * max(i, h), (nh * (e + 1) if s2_per_head else 0.0)


def _windowed_layers(c: Mapping[str, Any], L: int, rule: str) -> int:
    """How many layers attend through a sliding window (transformers' layer_types, or the family's rule)."""
    if c.get("sliding_window") is None:
        return 0
    types = c.get("layer_types")
    if isinstance(types, (list, tuple)) and types:
        return sum(1 for t in list(types)[:L] if t == "sliding_attention")
    if rule == "qwen":
        if not c.get("use_sliding_window"):
            return 0
        return max(0, L - int(_get(c, "max_window_layers", default=28)))
    if rule == "gemma2":
        return sum(1 for li in range(L) if (li + 1) % 2)
    if rule == "gemma3":
        pattern = int(_get(c, "sliding_window_pattern", default=6))
        return sum(1 for li in range(L) if (li + 1) % pattern)
    return L  # mistral, phi3: every layer


# ------------------------------------------------------------------------------------------------- families
def _llama_like(c: Mapping[str, Any], x: _Ctx, attention: str, lay: Layout, window_rule: str = "all") -> _Arch:
    """llama, granite, mistral, qwen2, qwen3 (q/k norms), gemma (fp32 (1+w) norms), gemma2 (4 norms, softcaps),
    gemma3 (4 norms, gemma q/k norms, sliding and global layers), phi3 (fused qkv and gate_up)."""
    e = x.e
    h, nh, nkv, hd, i, L, V = _dims(c)
    q, kv = nh * hd, nkv * hd
    gemma, fused = lay.gemma, lay.fused_qkv
    trains = not x.lora
    # a norm keeps its fp32 input and rstd for the input gradient; for its weight gradient the normalised input
    # (gemma: the fp32 one); its output is kept by the next linear for that linear's weight gradient
    norm_keep = 4 * h + 4
    norm_w = (4 * h if gemma else e * h) if trains else 0
    out_w = e * h if trains else 0
    n_norms = 4 if gemma >= 2 else 2
    norm = norm_keep + norm_w + out_w
    norms = 2 * norm + (2 * (norm_keep + norm_w) if gemma >= 2 else 0)
    dropout = float(_get(c, "attention_dropout", default=0.0) or 0.0) > 0
    softcap = gemma == 2 and bool(c.get("attn_logit_softcapping"))
    merged = 0.0  # o_proj's input when it is a copy of its own (kept only for o_proj's weight gradient)
    s2 = 0.0
    kernel = "flash"
    if attention == "eager":
        attn, s2, merged = 3 * e * q, nh * _eager_s2(x, dropout=dropout, softcap=softcap), e * q
        kernel = "eager"
    elif dropout and attention == "sdpa" and not x.cuda:  # the CPU has no fused kernel with dropout
        attn, s2 = _sdpa_math(e, q, nh)
        attn, merged = attn - e * q, e * q
        kernel = "math"
    else:
        attn = _sdpa(e, q, kv, nh)
        if fused:  # v stays a view of the fused qkv output (whole storage held); o_proj gets a merged copy
            attn, merged = e * (2 * q + kv) + e * (q + 2 * kv) + 4 * nh, e * q
    attn += merged if trains else 0
    qk = 0.0
    if lay.qk_norm:  # per-head norms on q and k: as the layer norms, over head_dim
        qk_w = (4 if gemma else e) * (q + kv) if trains else 0
        qk = 4 * (q + kv) + 4 * (nh + nkv) + qk_w
    mlp = _gated_mlp(e, i) - (0 if trains else e * i)  # down_proj's input only serves its weight gradient
    adapters = 0.0
    if x.lora:
        qkv_names = ("self_attn.qkv_proj",) if fused else ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")
        up_names = ("mlp.gate_up_proj",) if fused else ("mlp.gate_proj", "mlp.up_proj")
        adapters = (x.adapters(qkv_names, h) + x.adapters(("self_attn.o_proj",), q, input_kept=not merged)
                    + x.adapters(up_names, h) + x.adapters(("mlp.down_proj",), i))
    layer = norms + attn + qk + mlp + adapters
    first_cut = first_cut_s2 = first_fixed_cut = 0.0
    attention_cut = False  # the first layer's attention keeps nothing (LoRA without adapters on q, k, v)
    if x.lora and not x.embedding:
        first_cut, first_cut_s2 = _llama_first_layer(x, lay, dims=(h, nh, nkv, hd, i), attn=attn, s2=s2, mlp=mlp,
                                                     norm_keep=norm_keep, kernel=kernel)
        attention_cut = not x.ad("self_attn.qkv_proj", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")
        if gemma:  # the fp32 (1 + w) of the first layer's norms whose input needs no gradient
            first_fixed_cut = _gemma_first_fixed(x, lay, h, hd)
    final_softcap = gemma == 2 and bool(c.get("final_logit_softcapping"))
    g, gs2 = _grad(e, h, i, s2, nh)
    # cos/sin of the rotary embedding are shared by the batch and all layers (gemma3: one pair per layer type);
    # gemma keeps each norm's fp32 (1 + w), and the embedding scale (a scalar); repeat_kv of a single kv head is a
    # view (expand), so multi-query k/v stay unrepeated even with a mask
    layer_fixed = (4 * h * n_norms + (8 * hd if gemma == 3 else 0)) * L if gemma else 0
    b1 = 0.0  # micro-batch 1: matmul folds (1, heads, ...) into a view instead of a copy
    if attention == "eager" and nkv == 1 < nh:
        b1 = -2 * e * (q - kv)  # repeated MQA k/v stay views of the single kv head
    elif attention == "eager" and fused and nkv == nh:
        b1 = 2 * e * kv  # v stays a view of the whole fused qkv storage
    n_win = _windowed_layers(c, L, window_rule)
    window = c.get("sliding_window") if n_win else None
    if kernel == "math" or attention != "sdpa":  # flash handles windows natively
        window = None  # eager adds the mask without keeping it; the math kernel's case is modelled above
    rotary_tables = 2 if gemma == 3 and 0 < n_win < L else 1
    if rotary_tables == 2 and attention_cut:  # the first layer's table goes unless another layer of its type keeps it
        types = list(c.get("layer_types") or [])[:L]
        if types and types.count(types[0]) == 1:
            rotary_tables = 1
    post = (norm_keep + norm_w + (e * h if x.head else out_w)) + _loss(e, V, final_softcap)
    if x.lora:
        post += x.adapters(("lm_head",), h)
    if x.quantized:
        param_grad = e * h * max(i * (2 if fused else 1), q + 2 * kv)  # the dequantized weight, not a gradient
    else:
        param_grad = e * h * max(i * (2 if fused else 1), q + 2 * kv) if trains else 0
    return _Arch(8 if trains or x.embedding else 0, L * layer - first_cut, L * s2 - first_cut_s2, layer, s2, post,
                 e * h, L, g, gs2, V, param_grad=param_grad, hidden=h, layer_pos=2 * e * hd * rotary_tables,
                 b1=(L - (1 if first_cut_s2 else 0)) * b1,  # a first layer without attention adapters keeps none
                 fixed=(4 * h + (e if trains or x.embedding else 0)) if gemma else 0,
                 layer_fixed=layer_fixed - first_fixed_cut,
                 window=int(window or 0),
                 window_tok=n_win * 2 * e * (q - kv) if nkv > 1 else 0, mask_s=n_win * e,
                 head_weight_grad=trains or x.head)


def _llama_first_layer(x: _Ctx, lay: Layout, *, dims: tuple[int, int, int, int, int], attn: float, s2: float,
                       mlp: float, norm_keep: float, kernel: str) -> tuple[float, float]:
    """LoRA without checkpointing: what the first layer does NOT keep because its input needs no gradient.

    A tensor is kept only once something upstream of it requires a gradient, i.e. after the first adapter.
    """
    h, nh, nkv, hd, i = dims
    e = x.e
    q, kv = nh * hd, nkv * hd
    gq = x.ad("self_attn.qkv_proj", "self_attn.q_proj")
    gk = x.ad("self_attn.qkv_proj", "self_attn.k_proj")
    gv = x.ad("self_attn.qkv_proj", "self_attn.v_proj")
    cut, cut_s2 = norm_keep, 0.0  # the input norm
    if lay.qk_norm:  # each per-head norm keeps its input only when its projection is adapted
        cut += (0 if gq else 4 * q + 4 * nh) + (0 if gk else 4 * kv + 4 * nkv)
    if not (gq or gk or gv):
        cut, cut_s2 = cut + attn, s2
    elif kernel == "eager" and not lay.fused_qkv:  # q @ k^T keeps q only for k's gradient and k only for q's
        cut += (0 if gk else e * q) + (0 if gq else e * q)
    g1 = gq or gk or gv or x.ad("self_attn.o_proj")  # the residual after attention
    if not g1:  # post-attention norm (gemma2/3: and pre-feedforward)
        cut += norm_keep * (2 if lay.gemma >= 2 else 1)
    gate = g1 or x.ad("mlp.gate_proj", "mlp.gate_up_proj")
    up = g1 or x.ad("mlp.up_proj", "mlp.gate_up_proj")
    # the activation keeps the gate output, the product keeps up's output (for the activation's gradient) and
    # the activation's output (for up's gradient)
    cut += (0 if gate else 2 * e * i) + (0 if up else e * i)
    if lay.gemma >= 2 and not (gate or up or x.ad("mlp.down_proj")):
        cut += norm_keep  # post_feedforward_layernorm
    if x.dropout:  # an adapter whose input needs no gradient keeps its dropped input but not the mask
        m = x.mask(x.a)
        cut += m * h * sum(1 for n in ("self_attn.qkv_proj", "self_attn.q_proj", "self_attn.k_proj",
                                       "self_attn.v_proj") if x.ad(n))
        cut += m * q if x.ad("self_attn.o_proj") and not (gq or gk or gv) else 0
        if not g1:
            cut += m * h * sum(1 for n in ("mlp.gate_up_proj", "mlp.gate_proj", "mlp.up_proj") if x.ad(n))
        cut += m * i if x.ad("mlp.down_proj") and not (gate or up) else 0
    return cut, cut_s2


def _gemma_first_fixed(x: _Ctx, lay: Layout, h: int, hd: int) -> float:
    """LoRA without checkpointing: gemma norms of the first layer that keep no fp32 (1 + w) (their input has no
    gradient): the input norm, q/k norms of unadapted projections, and the norms before the first adapter."""
    gq = x.ad("self_attn.q_proj")
    gk = x.ad("self_attn.k_proj")
    g1 = gq or gk or x.ad("self_attn.v_proj", "self_attn.o_proj")
    mlp = g1 or x.ad("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
    cut = 4 * h
    if lay.qk_norm:
        cut += (0 if gq else 4 * hd) + (0 if gk else 4 * hd)
    if lay.gemma >= 2:
        cut += (0 if g1 else 2 * 4 * h) + (0 if mlp else 4 * h)
    elif not g1:
        cut += 4 * h  # post_attention_layernorm
    return cut


def _moe(c: Mapping[str, Any], x: _Ctx, attention: str, lay: Layout) -> _Arch:
    """mixtral, qwen2_moe, qwen3_moe: attention as llama; the MLP is a router (fp32 softmax, top-k) and the top-k
    experts run grouped (each token's hidden state gathered k times), plus qwen2_moe's gated shared expert.

    LoRA: frozen experts no longer keep the gathered input (gate_up's weight gradient) nor down_proj's input. PEFT
    adapts the stacked experts and the router through `lora.ParamWrapper`, which folds W + BA into a new tensor that
    requires a gradient: every adapted stack then keeps, per layer and whatever the batch, that merged copy and its
    two low-rank factors in the activation dtype, and the inputs again.
    """
    mlp_names = frozenset(n for n in x.adapted if n.startswith("mlp."))
    base = _llama_like(c, x._replace(adapted=x.adapted - mlp_names), attention, Layout("llama", qk_norm=lay.qk_norm))
    e = x.e
    D = _dims(c)
    h, L = D.h, D.L
    k = int(c["num_experts_per_tok"])
    n_exp = int(_get(c, "num_local_experts", "num_experts"))
    ish = 0
    if lay.qwen_router:
        ie = int(c["moe_intermediate_size"])
        norm_topk = bool(c.get("norm_topk_prob"))
        router = 4 * n_exp + 8 * k + (4 + 4 * k if norm_topk else 0)
        weights = 4 * k if norm_topk else e * k
        moe = router + 24 * k + weights + 2 * e * h * k + 4 * e * ie * k
        if lay.shared_expert:  # shared expert MLP, its sigmoid gate output and the gated product's input
            ish = int(c["shared_expert_intermediate_size"])
            moe += _gated_mlp(e, ish) + e + e * h
        sparse_step = int(_get(c, "decoder_sparse_step", default=1))
        only = set(_get(c, "mlp_only_layers", default=()) or ())
        n_moe = sum(1 for li in range(L) if li not in only and n_exp > 0 and (li + 1) % sparse_step == 0)
    else:
        ie = D.i
        moe = 4 * n_exp + 8 * k + 4 + 4 * k + 24 * k + 4 * k + 2 * e * h * k + 4 * e * ie * k
        n_moe = L
    dense = _gated_mlp(e, D.i)
    moe_fixed = 4 * n_exp  # grouped experts keep an int32 token count per expert
    if x.lora:
        gate_up, down, router_ad = (x.ad("mlp.experts.gate_up_proj"), x.ad("mlp.experts.down_proj"),
                                    x.ad("mlp.gate.weight"))
        r = x.rank
        moe -= (0 if gate_up else e * h * k) + (0 if down else e * ie * k)
        moe += e * h if router_ad else 0  # the router's input, for its (merged) weight's gradient
        moe_fixed += ((e * n_exp * (2 * ie * h + 2 * r * (2 * ie + h)) if gate_up else 0)
                      + (e * n_exp * (ie * h + r * (ie + h)) if down else 0) + (e * n_exp * h if router_ad else 0))
        if ish:
            moe += (-e * ish + x.adapters(("mlp.shared_expert.gate_proj", "mlp.shared_expert.up_proj"), h)
                    + x.adapters(("mlp.shared_expert.down_proj",), ish) + x.adapters(("mlp.shared_expert_gate",), h))
        dense += -e * D.i + x.adapters(("mlp.gate_proj", "mlp.up_proj"), h) + x.adapters(("mlp.down_proj",), D.i)
    if not lay.qwen_router:
        dense = moe
    per_dense = base.max_layer - _gated_mlp(e, D.i) + (e * D.i if x.lora else 0)
    layer_sum = per_dense * L + moe * n_moe + dense * (L - n_moe)
    max_layer = per_dense + max(moe if n_moe else 0, dense if n_moe < L else 0)
    g = 3 * e * max(ie * k, h)
    # experts are stacked 3-D parameters: the gate_up gradient of all experts of a layer is one tensor
    param_grad = max(base.param_grad, e * n_exp * 2 * ie * h) if not x.lora else 0
    first_cut = base.n_layers * base.max_layer - base.layer
    attention_adapted = any(n.startswith("self_attn.") for n in x.adapted)
    fixed_cut = 0.0
    routed = ("mlp.gate.weight", "mlp.experts.gate_up_proj", "mlp.experts.down_proj", "mlp.shared_expert.gate_proj",
              "mlp.shared_expert.up_proj", "mlp.shared_expert.down_proj")
    if x.lora and not x.embedding and not attention_adapted and n_moe == L and ish and not x.ad(*routed):
        # only shared_expert_gate is adapted: the first layer keeps its adapter (no dropout mask), the sigmoid's
        # output and the shared expert's output it scales, nothing of the routed experts (nor their counts)
        gate_ad = x.ad("mlp.shared_expert_gate")
        kept = x.adapters(("mlp.shared_expert_gate",), h) - (x.mask(x.a) * h if x.dropout and gate_ad else 0)
        kept += e + e * h if gate_ad else 0
        first_cut += -3 * e * D.i + moe - kept
        fixed_cut = 4 * n_exp
    elif x.lora and not x.embedding and not attention_adapted and n_moe == L:
        # nothing before the experts needs a gradient in the first layer: its router keeps nothing, its merged
        # gate_up stack is not kept for the (gradient-free) input, nor are the index tensors and the weighted output
        first_cut += -3 * e * D.i + 4 * n_exp + 8 * k + 4 + 4 * k + e * h * k + 16 * k
        fixed_cut = e * n_exp * 2 * ie * h if x.ad("mlp.experts.gate_up_proj") else 0
    return base._replace(layer=layer_sum - first_cut, max_layer=max_layer,
                         layer_fixed=base.layer_fixed + moe_fixed * n_moe - fixed_cut, grad_tok=g,
                         param_grad=param_grad, max_layer_fixed=moe_fixed if n_moe else 0.0)


def _gpt2(c: Mapping[str, Any], x: _Ctx, attention: str, lay: Layout) -> _Arch:
    e = x.e
    h, nh, _, hd, i, L, V = _dims(c)
    q = nh * hd
    trains = not x.lora
    resid = float(c.get("resid_pdrop") or 0) > 0
    embd = float(c.get("embd_pdrop") or 0) > 0
    attn_drop = float(c.get("attn_pdrop") or 0) > 0
    merged = 0.0
    if attention == "eager":
        attn, s2, merged = 3 * e * q, nh * (e + ((x.mask(e) + e) if attn_drop else 0)), e * q
    elif attn_drop and attention == "sdpa" and not x.cuda:  # CPU sdpa + dropout: fp32 math kernel
        attn, s2, merged = 12 * q, 12 * nh, e * q  # fp32 q, k, v, softmax, mask, probs; c_proj's merged input
    else:
        attn, s2 = _sdpa(e, q, q, nh), 0.0
    attn += merged if trains else 0
    mlp = 5 * e * i - (0 if trains else e * i)  # gelu_new is python: x, x^3 terms, tanh output, the product; c_proj in
    layer = 2 * _layernorm(h, e, trains=trains) + attn + mlp + (2 * x.mask(e) * h if resid else 0)
    first_cut = first_cut_s2 = 0.0
    if x.lora:
        layer += (x.adapters(("attn.c_attn",), h) + x.adapters(("attn.c_proj",), q, input_kept=not merged)
                  + x.adapters(("mlp.c_fc",), h) + x.adapters(("mlp.c_proj",), i))
        if not x.embedding:
            first_cut, first_cut_s2 = _gpt2_first_layer(x, h, q, i, attn, s2, resid)
    g, gs2 = _grad(e, h, i, s2, nh)
    if attention == "sdpa" and attn_drop and not x.cuda:
        gs2 = 9 * nh  # the math kernel's fp32 score gradients
    pre = (8 if trains or x.embedding else 0) + (x.mask(e) * h if embd and (trains or x.embedding) else 0)
    post = (_layernorm(h, e, trains=trains or x.head) + _loss(e, V)
            + (x.adapters(("lm_head",), h) if x.lora else 0))
    # LoRA with checkpointing: enable_input_require_grads makes the embeddings need a gradient, so the embedding
    # dropout keeps its mask again (a trainable embedding keeps it anyway: `pre`)
    ckpt_pre = x.mask(e) * h if embd and x.lora and not x.embedding else 0
    return _Arch(pre, L * layer - first_cut, L * s2 - first_cut_s2, layer, s2, post, e * h, L, g, gs2, V,
                 ckpt_pre=ckpt_pre,
                 pre_const=8 if trains else 0, ckpt_s2=e if attention == "eager" else 0,
                 param_grad=e * h * i if (trains or x.quantized) else 0, hidden=h, head_weight_grad=trains or x.head)


def _gpt2_first_layer(x: _Ctx, h: int, q: int, i: int, attn: float, s2: float, resid: bool) -> tuple[float, float]:
    """LoRA without checkpointing: what gpt2's first layer does not keep (see _llama_first_layer)."""
    e, m = x.e, x.mask(x.a) if x.dropout else 0
    c_attn, c_proj, c_fc = x.ad("attn.c_attn"), x.ad("attn.c_proj"), x.ad("mlp.c_fc")
    cut, cut_s2 = e * h + 2 * e, 0.0  # ln_1
    cut += m * h if c_attn else attn  # c_attn's adapter keeps no mask; without it attention keeps nothing
    cut_s2 = 0.0 if c_attn else s2
    cut += m * q if c_proj and not c_attn else 0
    g1 = c_attn or c_proj
    if not g1:  # the residual dropout after attention, ln_2, c_fc's adapter mask
        cut += (x.mask(e) * h if resid else 0) + e * h + 2 * e + m * h * c_fc
    g_fc = g1 or c_fc
    if not g_fc:
        cut += 4 * e * i + m * i * x.ad("mlp.c_proj")
    if not (g_fc or x.ad("mlp.c_proj")):
        cut += x.mask(e) * h if resid else 0
    return cut, cut_s2


def _opt(c: Mapping[str, Any], x: _Ctx, attention: str, lay: Layout) -> _Arch:
    e = x.e
    h, nh, _, hd, i, L, V = _dims(c)
    q = nh * hd
    trains = not x.lora
    drop = float(c.get("dropout") or 0) > 0
    attn_drop = float(c.get("attention_dropout") or 0) > 0
    merged = 0.0
    if attention == "eager":
        attn, s2, merged = 3 * e * q, nh * _eager_s2(x, dropout=attn_drop), e * q
    else:
        attn, s2 = _sdpa(e, q, q, nh), 0.0
    attn += merged if trains else 0
    # ReLU keeps its output (fc2's input too) for its own gradient, frozen or not
    layer = 2 * _layernorm(h, e, trains=trains) + attn + e * i + (2 * x.mask(e) * h if drop else 0)
    if x.lora:
        layer += (x.adapters(("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), h)
                  + x.adapters(("self_attn.out_proj",), q, input_kept=not merged)
                  + x.adapters(("fc1",), h) + x.adapters(("fc2",), i))
    proj = int(_get(c, "word_embed_proj_dim", default=h) or h)
    pre_ln = bool(_get(c, "do_layer_norm_before", default=True))
    post = (_layernorm(h, e, trains=trains or x.head) if pre_ln else (e * h if trains or x.head else 0)) + _loss(e, V)
    if proj != h:  # project_in / project_out keep their inputs
        post += e * proj if trains else 0
    g, gs2 = _grad(e, h, i, s2, nh)
    pre = 16 + (e * proj if proj != h else 0) if trains else (8 if x.embedding else 0)
    first_cut = first_cut_s2 = 0.0
    if x.lora and not x.embedding:  # the first layer keeps nothing upstream of its first adapter (_gpt2_first_layer)
        m = x.mask(x.a) if x.dropout else 0
        qkv = sum(1 for n in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj") if x.ad(n))
        first_cut = (e * h + 2 * e if pre_ln else 0) + m * h * qkv
        if qkv and attention == "eager":  # q @ k^T keeps q only for k's gradient and k only for q's
            first_cut += (0 if x.ad("self_attn.k_proj") else e * q) + (0 if x.ad("self_attn.q_proj") else e * q)
        if not qkv:
            first_cut += attn + m * q * x.ad("self_attn.out_proj")
            first_cut_s2 = s2
            if not x.ad("self_attn.out_proj"):  # attention dropout, the second norm, fc1's adapter mask
                first_cut += (x.mask(e) * h if drop else 0) + e * h + 2 * e + m * h * x.ad("fc1")
                if not x.ad("fc1"):
                    first_cut += e * i + m * i * x.ad("fc2")
    return _Arch(pre, L * layer - first_cut, L * s2 - first_cut_s2, layer, s2, post, e * h, L, g, gs2, V,
                 param_grad=e * h * i if (trains or x.quantized) else 0, hidden=h, head_weight_grad=trains or x.head)


def _gpt_neox(c: Mapping[str, Any], x: _Ctx, attention: str, lay: Layout) -> _Arch:
    e = x.e
    h, nh, _, hd, i, L, V = _dims(c)
    q = nh * hd
    trains = not x.lora
    parallel = bool(_get(c, "use_parallel_residual", default=True))
    if attention == "eager":
        attn, s2 = 3 * e * q, nh * _eager_s2(x)
    else:  # q, k after rotary, the fused qkv storage behind v, lse, output
        attn, s2 = e * (2 * q + 3 * q + q) + 4 * nh, 0.0
    attn += e * q if trains else 0  # dense's input: a merged copy of the output
    ln2 = _layernorm(h, e, new_input=not parallel, trains=trains)
    layer = _layernorm(h, e, trains=trains) + ln2 + attn + (2 if trains else 1) * e * i
    first_cut = first_cut_s2 = 0.0
    if x.lora:
        layer += (x.adapters(("attention.query_key_value",), h) + x.adapters(("attention.dense",), q)
                  + x.adapters(("mlp.dense_h_to_4h",), h) + x.adapters(("mlp.dense_4h_to_h",), i))
        # the first layer keeps nothing upstream of its first adapter (see _llama_first_layer)
        m = x.mask(x.a) if x.dropout else 0
        qkv, dense = x.ad("attention.query_key_value"), x.ad("attention.dense")
        fc, proj = x.ad("mlp.dense_h_to_4h"), x.ad("mlp.dense_4h_to_h")
        if not x.embedding:
            first_cut = e * h + 2 * e + (m * h if qkv else attn) + (m * q if dense and not qkv else 0)
            first_cut_s2 = 0.0 if qkv else s2
            mlp_input_grad = not parallel and (qkv or dense)  # sequential: the MLP reads the attention residual
            if not mlp_input_grad:
                first_cut += 2 * e + (0 if parallel else e * h)  # post_attention_layernorm
                first_cut += m * h if fc else e * i  # gelu keeps its input only after an adapter
                first_cut += m * i if proj and not fc else 0
    g, gs2 = _grad(e, h, i, s2, nh)
    rot = int(hd * float(_get(c, "rotary_pct", "partial_rotary_factor", default=(c.get("rope_parameters") or {})
                              .get("partial_rotary_factor", 0.25))))
    b1 = 2 * e * q if attention == "eager" else 0  # v stays a view of the fused qkv storage at micro-batch 1
    post = (_layernorm(h, e, trains=trains or x.head) + _loss(e, V)
            + (x.adapters(("lm_head",), h) if x.lora else 0))
    return _Arch(8 if trains or x.embedding else 0, L * layer - first_cut, L * s2 - first_cut_s2, layer, s2, post,
                 e * h, L, g, gs2, V, param_grad=e * h * max(i, 3 * q) if (trains or x.quantized) else 0, hidden=h,
                 layer_pos=2 * e * rot, b1=(L - (1 if first_cut_s2 or (x.lora and not x.embedding and not x.ad(
                     "attention.query_key_value")) else 0)) * b1, head_weight_grad=trains or x.head)


def _falcon(c: Mapping[str, Any], x: _Ctx, attention: str, lay: Layout) -> _Arch:
    e = x.e
    h, nh, _, hd, _, L, V = _dims(c)
    q = nh * hd
    trains = not x.lora
    i = int(c.get("ffn_hidden_size") or 4 * h)
    new_arch = bool(c.get("new_decoder_architecture"))
    multi_query = not new_arch and bool(c.get("multi_query", True))
    mask = 0
    math = False
    merged = 0.0  # dense's input when it is a copy of its own (kept only for dense's weight gradient)
    if attention == "eager":
        attn, s2, merged = 3 * e * q, nh * e, e * q  # softmax in the activation dtype, kv broadcast to all heads
    elif attention == "flash":  # flash-attn takes multi-query/grouped k, v and needs no mask
        attn, s2 = _sdpa(e, q, (nh if new_arch or not multi_query else 1) * hd, nh), 0.0
    elif new_arch:  # k/v broadcast and flattened into copies at all heads; the mask is always materialised
        attn, s2, mask = e * 4 * q + 4 * nh, 0.0, e
    elif not multi_query:  # q, k after rotary, the fused qkv storage behind v, lse, output
        attn, s2, mask = e * 6 * q + 4 * nh, 0.0, e
    elif x.cuda:  # efficient kernel, multi-query with the mask: q, k, the fused qkv storage (v), output, lse
        attn, s2, mask = e * (q + hd + (q + 2 * hd) + q) + 4 * nh, 0.0, e
    else:  # explicit mask + unequal heads: CPU math kernel, fp32 q/k/v (broadcast) and probabilities
        attn, s2, merged = 12 * q, 4 * nh, e * q
        math = True
    attn += merged if trains else 0
    n_ln = int(_get(c, "num_ln_in_parallel_attn", default=2 if new_arch else 1) or 1)
    parallel = bool(_get(c, "parallel_attn", default=True)) or new_arch
    if parallel:
        lns = _layernorm(h, e, trains=trains) + (n_ln - 1) * _layernorm(h, e, new_input=False, trains=trains)
    else:
        lns = 2 * _layernorm(h, e, trains=trains)
    layer = lns + attn + (2 if trains else 1) * e * i
    first_cut = first_cut_s2 = 0.0
    if x.lora:
        layer += (x.adapters(("self_attention.query_key_value",), h)
                  + x.adapters(("self_attention.dense",), q, input_kept=not merged)
                  + x.adapters(("mlp.dense_h_to_4h",), h) + x.adapters(("mlp.dense_4h_to_h",), i))
        # the first layer: its norm(s) read an input that needs no gradient; with parallel attention so does the MLP
        m = x.mask(x.a) if x.dropout else 0
        qkv, fc = x.ad("self_attention.query_key_value"), x.ad("mlp.dense_h_to_4h")
        if not x.embedding:
            first_cut = e * h + 2 * e + (n_ln - 1) * 2 * e if parallel else e * h + 2 * e
            first_cut += m * h if qkv else attn
            first_cut += m * q if x.ad("self_attention.dense") and not qkv else 0
            first_cut_s2 = 0.0 if qkv else s2
            if parallel:
                first_cut += m * h if fc else e * i
                first_cut += m * i if x.ad("mlp.dense_4h_to_h") and not fc else 0
    g, gs2 = _grad(e, h, i, s2, nh)
    if math:
        gs2 = 9 * nh  # the math kernel's fp32 score gradients
    b1 = 0.0  # micro-batch 1, eager: k/v of multi-query stay unbroadcast; v of plain MHA stays a view of qkv
    if attention == "eager" and multi_query:
        b1 = -2 * e * (q - hd)
    elif math:
        b1 = -2 * 4 * (q - hd)  # the fp32 k/v of the math kernel
    elif attention == "eager" and not new_arch:
        b1 = 2 * e * q
    rope = 0 if c.get("alibi") else 2 * e * hd
    post = (_layernorm(h, e, trains=trains or x.head) + _loss(e, V)
            + (x.adapters(("lm_head",), h) if x.lora else 0))
    # layers whose attention keeps anything: not the first one under LoRA without an adapter on query_key_value
    attending = L - (1 if x.lora and not x.embedding and not x.ad("self_attention.query_key_value") else 0)
    return _Arch(8 if trains or x.embedding else 0, L * layer - first_cut, L * s2 - first_cut_s2, layer, s2, post,
                 e * h, L, g, gs2, V, param_grad=e * h * max(i, 3 * q) if trains else 0, hidden=h,
                 layer_pos=rope, window=1 if mask else 0, mask_s=attending * mask, head_weight_grad=trains or x.head,
                 b1=attending * b1, layer_fixed=16 * attending)  # two int64 scalars per attending layer


_Builder = Callable[[Mapping[str, Any], _Ctx, str, Layout], _Arch]

_WINDOW_RULE = {"qwen2": "qwen", "qwen3": "qwen", "gemma2": "gemma2", "gemma3_text": "gemma3"}
_LAYOUTS: dict[str, _Builder] = {
    "llama": lambda c, x, a, lay: _llama_like(c, x, a, lay, _WINDOW_RULE.get(str(c.get("model_type")), "all")),
    "moe": _moe,
    "gpt2": _gpt2,
    "opt": _opt,
    "gpt_neox": _gpt_neox,
    "falcon": _falcon,
}
MODELLED_FAMILIES = tuple(sorted(t for t, f in FAMILIES.items() if f.layout.kind in _LAYOUTS))


_CACHE: dict[tuple, tuple[dict, _Arch]] = {}
_LOSS_SCALAR = 4  # the fp32 scalar the loss reduction keeps (every family)
_LABELS_VIEW = 8  # micro-batch 1: the shifted labels stay a view of the padded (1, s + 1) labels, one more int64


def _arch(config: Mapping[str, Any], e: int, attention: str, device: str, lora: LoraSetup | None) -> _Arch:
    """The family's coefficients, memoised per config object: the planner asks thousands of times per config."""
    key = (id(config), e, attention, device, lora)
    hit = _CACHE.get(key)
    if hit is not None and hit[0] == config:  # equality guards against a reused id or a mutated dict
        return hit[1]
    family = FAMILIES.get(str(config.get("model_type", "")))
    ctx = _context(config, e, device, lora)
    if family is None:  # generic: llama-like on whatever keys the config has
        arch = _llama_like(dict(config), ctx, attention, Layout("llama"))
    else:
        arch = _LAYOUTS[family.layout.kind](complete_config(config), ctx, attention, family.layout)
    if len(_CACHE) > 256:
        _CACHE.clear()
    _CACHE[key] = (dict(config), arch)
    return arch


def _context(config: Mapping[str, Any], e: int, device: str, lora: LoraSetup | None) -> _Ctx:
    if lora is None:
        return _Ctx(e, device == "cuda", False)
    from zerokit.models.lora import lora_parameters

    if str(config.get("model_type", "")) in FAMILIES:
        adapted = lora_parameters(config, lora.rank, lora.targets, dropout=lora.dropout).adapted
    else:  # generic llama-like layout: PEFT's all-linear, or the names as given
        names = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
        wanted = names if lora.targets == "all-linear" else tuple(lora.targets)
        adapted = frozenset(f"{'self_attn' if n in names[:4] else 'mlp'}.{n}" for n in wanted)
    return _Ctx(e, device == "cuda", True, adapted, lora.rank, lora.dropout > 0, lora.quantized, lora.adapter_bytes,
                "embedding" in lora.saved, "head" in lora.saved)


def estimate_activations(config: Mapping[str, Any], seq_len: int, micro_batch: int, *, attention: str = "sdpa",
                         dtype: str = "bf16", gradient_checkpointing: bool = False, device: str = "cuda",
                         lora: LoraSetup | None = None) -> ActivationEstimate:
    """Predict activations and the backward transient of one micro-batch from a transformers config dict.

    `device` is where the model trains ("cuda" for a GPU plan, "cpu" for DeepSpeed's CPU accelerator); `lora`
    describes LoRA/QLoRA adapters on a frozen base (None: full fine-tuning).
    """
    e = _check(dtype, attention, device)
    if seq_len < 1 or micro_batch < 1:
        raise ValueError(f"seq_len and micro_batch must be >= 1, got {seq_len} and {micro_batch}")
    arch = _arch(config, e, kernel_run(str(config.get("model_type", "")), attention), device, lora)
    generic, note = _note(config, attention, arch)
    figures = _figures(arch, e, seq_len, micro_batch, gradient_checkpointing)
    return ActivationEstimate(figures[0], figures[1], generic, note, *figures[2:])


def analytic_figures(config: Mapping[str, Any], *, attention: str = "sdpa", dtype: str = "bf16", device: str = "cuda",
                     lora: LoraSetup | None = None) -> tuple[bool, str | None, Callable[[int, int, bool], tuple]]:
    """(generic, note, figures): `estimate_activations` for one config and setting with the family's coefficients
    looked up once, as `figures(seq_len, micro_batch, checkpointing)` -> the ActivationEstimate's integer fields
    in its order (activations, transient, forward, loss, head and layer transients, head weight gradient).

    The planner's search asks for a dozen micro-batches of one setting per plan; the setting is checked here, the
    sequence length and micro-batch (>= 1) are the caller's to check."""
    e = _check(dtype, attention, device)
    arch = _arch(config, e, kernel_run(str(config.get("model_type", "")), attention), device, lora)
    terms: dict[tuple[int, bool], tuple] = {}

    def figures(seq_len: int, micro_batch: int, checkpointing: bool) -> tuple[int, ...]:
        hit = terms.get((seq_len, checkpointing))
        if hit is None:
            hit = terms[seq_len, checkpointing] = _sequence_terms(arch, e, seq_len, checkpointing)
        return _batch_figures(hit, micro_batch)

    return (*_note(config, attention, arch), figures)


def _check(dtype: str, attention: str, device: str) -> int:
    """The bytes of `dtype`, after refusing a setting the model does not know."""
    e = _DTYPE_BYTES.get(dtype)
    if e is None:
        raise ValueError(f"dtype must be one of {sorted(_DTYPE_BYTES)}, got {dtype!r}")
    if attention not in _ATTENTION:
        raise ValueError(f"attention must be one of {list(_ATTENTION)}, got {attention!r}")
    if device not in DEVICES:
        raise ValueError(f"device must be one of {list(DEVICES)}, got {device!r}")
    return e


def _note(config: Mapping[str, Any], attention: str, arch: _Arch) -> tuple[bool, str | None]:
    """(generic, note) of an estimate: the same for every micro-batch of a config and attention kernel."""
    model_type = str(config.get("model_type", ""))
    if model_type not in FAMILIES:
        return True, (f"model_type {model_type or '(missing)'!r} is not modelled: llama-like layout assumed; "
                      "use zerokit.memory.calibrate for an exact figure")
    if kernel_run(model_type, attention) != attention:
        return False, no_sdpa_note(model_type)
    return False, arch.note


def _figures(arch: _Arch, e: int, s: int, b: int, gradient_checkpointing: bool) -> tuple[int, ...]:
    """The ActivationEstimate's integer fields, in its order, from the family's coefficients."""
    return _batch_figures(_sequence_terms(arch, e, s, gradient_checkpointing), b)


def _sequence_terms(arch: _Arch, e: int, s: int, gradient_checkpointing: bool) -> tuple:
    """What `_batch_figures` needs of one sequence length: every term that does not depend on the micro-batch,
    computed as the whole expression computes it (the planner asks for several micro-batches of one)."""
    if gradient_checkpointing:
        per_token = arch.pre + arch.ckpt_pre + arch.n_layers * arch.ckpt + arch.post + arch.ckpt_s2 * s
        # the recomputed layer is freed tensor by tensor as its backward runs: its gradients overlap it only partly
        layer = arch.max_layer + arch.max_layer_s2 * s + (arch.grad_tok + arch.grad_s2 * s) / 2
        inside = masked = None
    else:
        per_token = arch.pre + arch.layer + arch.layer_s2 * s + arch.post
        layer = arch.grad_tok + arch.grad_s2 * s
        inside = arch.layer_fixed + arch.layer_pos * s  # gone under checkpointing
        masked = arch.window_tok + arch.mask_s * s if arch.window and s >= arch.window else None
    head_grad = e * arch.vocab * arch.hidden if arch.head_weight_grad else 0
    return (s, per_token, arch.fixed + _LOSS_SCALAR + arch.pre_const * s, inside, arch.b1, masked, arch.vocab, e,
            head_grad, layer, arch.max_layer_fixed if gradient_checkpointing else None,
            arch.param_grad / (2 if gradient_checkpointing else 1))


def _batch_figures(terms: tuple, b: int) -> tuple[int, ...]:
    """The ActivationEstimate's integer fields of micro-batch `b` from `_sequence_terms`."""
    s, per_token, const, inside, b1, masked, vocab, e, head_grad, layer, layer_fixed, param_grad = terms
    tokens = s * b
    acts = tokens * per_token
    layer_peak = tokens * layer
    if layer_fixed is not None:  # checkpointing
        layer_peak += layer_fixed
    acts += const + (_LABELS_VIEW if b == 1 else 0)
    if inside is not None:  # no checkpointing
        acts += inside + (b1 * tokens if b == 1 else 0)
        if masked is not None:
            acts += tokens * masked
    loss_peak = tokens * 8 * vocab  # fp32 grads of the log-probs and of the logits
    head_peak = tokens * e * vocab + head_grad  # the logits gradient in the logits' dtype, the weight gradient
    layer_peak += param_grad
    # forward's own peak: the loss upcasts the logits to fp32 (a copy unless they already are) and allocates the
    # fp32 log-probabilities while both are alive; the log-probabilities are part of `acts`
    forward_peak = tokens * vocab * (e + (4 if e != 4 else 0))
    return (int(acts), int(max(loss_peak, head_peak, layer_peak)), int(forward_peak), int(loss_peak), int(head_peak),
            int(layer_peak), int(head_grad))

"""Matrix-multiply FLOPs of one forward pass, from a transformers config dict: no torch, no transformers.

Each family lists the matmuls its decoder layer runs for one token, as (name, in, out, copies) weight matmuls, and
the shape of its attention. FLOPs of a weight matmul are 2 x in x out per token (a multiply and an add); biases,
norms, activations and the embedding lookup are no matmuls and are left to the elementwise term of the time model.

The attention scores are QK^T and PV, 2 x 2 x heads x head_dim FLOPs for every (query, key) pair the kernel
computes. What it computes depends on the kernel (`attention_pairs`):
- eager builds the full s x s score matrix and masks it afterwards: s^2 pairs;
- sdpa with a causal mask and flash skip the blocks above the diagonal: s(s+1)/2 pairs;
- a sliding-window layer computes min(position + 1, window) keys per query under flash; sdpa and eager get the window
  as an explicit mask (transformers builds one), so they compute every pair once the sequence is longer than it.

tests/test_perf_flops.py holds these counts against torch.utils.flop_counter.FlopCounterMode on real transformers
models (eager attention, where both count s^2).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field, replace
from typing import Any, NamedTuple

from zerokit._dataclass import dataclass
from zerokit._memo import IdentityMemo
from zerokit.errors import BadInput
from zerokit.memory.buffers import kept_gathered
from zerokit.models.params import (
    FAMILIES,
    complete_config,
    falcon_qkv_width,
    llama_like,
    model_parts,
    part_tensors,
    stack_split,
)


class Matmul(NamedTuple):
    """One weight matmul of the model: `in_features` -> `out_features`, `copies` times per token."""

    name: str
    in_features: int
    out_features: int
    copies: float = 1.0
    """How many such matmuls one token passes through: layers, times top-k for MoE experts."""
    token_share: float = 1.0
    """The share of a batch's tokens one such product sees (top-k / experts for an MoE expert): sets its size."""

    @property
    def flops_per_token(self) -> float:
        return 2.0 * self.in_features * self.out_features * self.copies


class AttentionLayers(NamedTuple):
    """The attention shape of a group of layers that score alike."""

    layers: int
    heads: int
    head_dim: int
    window: int | None = None
    """Sliding-window width; None = full causal attention."""


@dataclass(frozen=True)
class ModelFlops:
    """What the time model needs from an architecture, computed once per config (`model_flops`)."""

    model_type: str
    hidden_size: int
    num_layers: int
    vocab_size: int
    intermediate_size: int
    """The MLP width one token passes through (top-k experts and the shared expert summed, for MoE)."""
    layer_matmuls: tuple[Matmul, ...]
    """Weight matmuls inside the decoder layers (recomputed under gradient checkpointing)."""
    head_matmuls: tuple[Matmul, ...]
    """Matmuls outside the layers: the LM head (and OPT's projections)."""
    attention: tuple[AttentionLayers, ...]
    parameter_modules: int
    """Modules that own parameters: ZeRO-3 fetches and releases each one in every forward and backward."""
    module_sizes: tuple[tuple[int, int], ...] = ()
    """(parameters of its own, copies) of every parameter-owning module: ZeRO-3 gathers the ones above
    `stage3_param_persistence_threshold` and keeps the others whole on every rank."""
    elementwise_per_token: float = 0.0
    """Element passes of the forward's elementwise kernels per token, all layers (`elementwise_passes`)."""
    score_softcap: bool = False
    """Attention logits are soft-capped (gemma2's `attn_logit_softcapping`): eager runs three more passes over the
    score matrix (divide, tanh, multiply)."""
    forward_trace: tuple[int, ...] = ()
    """Parameters of each parameter-owning module in the order a forward fetches them (ZeRO-3's trace; a tied head
    again, the embedding's weight), which sets what ZeRO-3 keeps gathered into backward (`regathered`); empty:
    backward gathers everything again."""
    gradient_order: tuple[int, ...] = ()
    """Elements of each parameter tensor in the order a backward hands DeepSpeed their gradients
    (`backward_order`), which sets how often ZeRO-1/2/3 flush a gradient bucket (`zerokit.perf.model.flushes`);
    empty: counted as ceil(parameters / bucket)."""
    _cache: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def matmul_flops_per_token(self) -> float:
        """Forward weight-matmul FLOPs per token (scores excluded)."""
        return sum(m.flops_per_token for m in self.layer_matmuls + self.head_matmuls)

    def attention_pairs(self, seq_len: int, attention: str = "sdpa") -> list[tuple[AttentionLayers, float]]:
        """(layers, query-key pairs one sequence computes in each of them) for this kernel."""
        full, causal = float(seq_len) * seq_len, seq_len * (seq_len + 1) / 2.0
        out = []
        for group in self.attention:
            w = group.window
            if attention == "eager":
                pairs = full
            elif w is None or w >= seq_len:
                pairs = causal
            elif attention == "flash":
                pairs = w * (w + 1) / 2.0 + (seq_len - w) * float(w)  # the first w queries see all before them
            else:
                pairs = full
            out.append((group, pairs))
        return out

    def gathered(self, persistence_threshold: float) -> tuple[int, int]:
        """(modules, parameters) ZeRO-3 all-gathers in each pass: those above the persistence threshold. A tied
        LM head is the embedding's weight, gathered twice (DeepSpeed fetches it for each module that uses it)."""
        key = ("gathered", persistence_threshold)
        hit = self._cache.get(key)
        if hit is None:
            big = [(n, c) for n, c in self.module_sizes if n > persistence_threshold]
            hit = (sum(c for _, c in big), sum(n * c for n, c in big))
            self._cache[key] = hit
        return hit

    def regathered(self, persistence_threshold: float, reuse_distance: float) -> tuple[int, int]:
        """(modules, parameters) of `gathered` that ZeRO-3 gathers again in backward: those it did not keep gathered
        from forward (`zerokit.memory.buffers.kept_gathered`, which the memory side asks too). `reuse_distance` is
        the ds_config's `stage3_max_reuse_distance` and `stage3_max_live_parameters` (a plan writes the two alike).
        Counted in real steps (benchmarks/zero3_gathers.py): exact at 1e9, 2e6 and 1e6 on a 3.9M llama."""
        key = ("regathered", persistence_threshold, reuse_distance)
        hit = self._cache.get(key)
        if hit is None:
            gathers, gathered = self.gathered(persistence_threshold)
            kept_modules, kept = kept_gathered(self.forward_trace, reuse_distance, persistence_threshold)
            hit = (max(0, gathers - kept_modules), max(0, gathered - kept))
            self._cache[key] = hit
        return hit

    def score_flops(self, seq_len: int, attention: str = "sdpa") -> float:
        """Forward QK^T + PV FLOPs of one sequence."""
        return sum(4.0 * g.heads * g.head_dim * g.layers * pairs for g, pairs in self.attention_pairs(seq_len, attention))

    def forward_flops(self, seq_len: int, micro_batch: int = 1, attention: str = "sdpa") -> float:
        """Forward matmul FLOPs of one micro-batch: weight matmuls of every token plus the attention scores."""
        return micro_batch * (seq_len * self.matmul_flops_per_token + self.score_flops(seq_len, attention))


def _cfg_int(c: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = c.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadInput(f"{c.get('model_type')} config: {key} must be a whole number >= 0, got {value!r}; "
                       "fix the config.json")
    return value


def _attention_matmuls(c: Mapping[str, Any], fused_qkv: bool) -> list[Matmul]:
    h, hd, n = c["hidden_size"], c["head_dim"], c["num_hidden_layers"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    if fused_qkv:
        proj = [Matmul("qkv_proj", h, q + 2 * kv, n)]
    else:
        proj = [Matmul("q_proj", h, q, n), Matmul("k_proj", h, kv, n), Matmul("v_proj", h, kv, n)]
    return [*proj, Matmul("o_proj", q, h, n)]


def _gated(h: int, inter: int, copies: float, fused: bool = False, prefix: str = "mlp",
           share: float = 1.0) -> list[Matmul]:
    if fused:
        return [Matmul(f"{prefix}.gate_up_proj", h, 2 * inter, copies, share),
                Matmul(f"{prefix}.down_proj", inter, h, copies, share)]
    return [Matmul(f"{prefix}.gate_proj", h, inter, copies, share), Matmul(f"{prefix}.up_proj", h, inter, copies, share),
            Matmul(f"{prefix}.down_proj", inter, h, copies, share)]


def _sparse_layer_count(c: Mapping[str, Any]) -> int:
    only = set(c.get("mlp_only_layers") or ())
    step, n_exp = c["decoder_sparse_step"], c["num_experts"]
    return sum(1 for i in range(c["num_hidden_layers"]) if i not in only and n_exp > 0 and (i + 1) % step == 0)


def _layer_types(c: Mapping[str, Any]) -> list[bool]:
    """Per layer: True if it is a sliding-window layer, the way each family's config class sets `layer_types`."""
    n, mt = c["num_hidden_layers"], c["model_type"]
    types = c.get("layer_types")
    if isinstance(types, list) and len(types) == n:
        return [t == "sliding_attention" for t in types]
    if mt == "gemma2":
        return [i % 2 == 0 for i in range(n)]
    if mt == "gemma3_text":
        pattern = c.get("sliding_window_pattern") or 6
        return [bool((i + 1) % pattern) for i in range(n)]
    if mt in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe"):
        if not c.get("use_sliding_window"):
            return [False] * n
        return [i >= (c.get("max_window_layers") or 0) for i in range(n)]
    if mt in ("mistral", "mixtral", "phi3"):
        return [c.get("sliding_window") is not None] * n
    return [False] * n


def _decoder_attention(c: Mapping[str, Any]) -> tuple[AttentionLayers, ...]:
    heads, hd = c["num_attention_heads"], c["head_dim"]
    sliding = _layer_types(c)
    window = c.get("sliding_window")  # checked by complete_config (check_config_values)
    n_sliding = sum(sliding) if window is not None else 0
    groups = [AttentionLayers(len(sliding) - n_sliding, heads, hd)]
    if n_sliding:
        groups.append(AttentionLayers(n_sliding, heads, hd, window))
    return tuple(g for g in groups if g.layers)


def _decoder(c: dict) -> tuple[list[Matmul], list[Matmul], int]:
    """llama-like families: attention projections, gated MLP or MoE experts; returns (layer, head, mlp width)."""
    mt, h, n = c["model_type"], c["hidden_size"], c["num_hidden_layers"]
    fused = mt == "phi3"
    layer = _attention_matmuls(c, fused_qkv=fused)
    width = c["intermediate_size"]
    if mt == "mixtral":
        e, k = _cfg_int(c, "num_local_experts"), _cfg_int(c, "num_experts_per_tok")
        layer += [Matmul("mlp.gate", h, e, n), *_gated(h, c["intermediate_size"], n * k, prefix="mlp.experts",
                                                            share=k / e)]
        width = k * c["intermediate_size"]
    elif mt in ("qwen2_moe", "qwen3_moe"):
        sparse = _sparse_layer_count(c)
        e, k, mi = _cfg_int(c, "num_experts"), _cfg_int(c, "num_experts_per_tok"), _cfg_int(c, "moe_intermediate_size")
        layer += [Matmul("mlp.gate", h, e, sparse), *_gated(h, mi, sparse * k, prefix="mlp.experts", share=k / e)]
        width = k * mi
        if mt == "qwen2_moe":
            si = _cfg_int(c, "shared_expert_intermediate_size")
            layer += [*_gated(h, si, sparse, prefix="mlp.shared_expert"), Matmul("mlp.shared_expert_gate", h, 1, sparse)]
            width += si
        layer += _gated(h, c["intermediate_size"], n - sparse)
        if sparse == 0:
            width = c["intermediate_size"]
    else:
        layer += _gated(h, c["intermediate_size"], n, fused=fused)
    return layer, [Matmul("lm_head", h, c["vocab_size"])], width


def _gpt2(c: dict) -> tuple[list[Matmul], list[Matmul], int]:
    h, n, i = c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"]
    layer = [Matmul("attn.c_attn", h, 3 * h, n), Matmul("attn.c_proj", h, h, n), Matmul("mlp.c_fc", h, i, n),
             Matmul("mlp.c_proj", i, h, n)]
    return layer, [Matmul("lm_head", h, c["vocab_size"])], i


def _gpt_neox(c: dict) -> tuple[list[Matmul], list[Matmul], int]:
    h, n, i = c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"]
    layer = [Matmul("attention.query_key_value", h, 3 * h, n), Matmul("attention.dense", h, h, n),
             Matmul("mlp.dense_h_to_4h", h, i, n), Matmul("mlp.dense_4h_to_h", i, h, n)]
    return layer, [Matmul("lm_head", h, c["vocab_size"])], i


def _opt(c: dict) -> tuple[list[Matmul], list[Matmul], int]:
    h, n, i, proj = c["hidden_size"], c["num_hidden_layers"], c["ffn_dim"], c["word_embed_proj_dim"]
    layer = [*(Matmul(f"self_attn.{x}", h, h, n) for x in ("q_proj", "k_proj", "v_proj", "out_proj")),
             Matmul("fc1", h, i, n), Matmul("fc2", i, h, n)]
    head = [Matmul("lm_head", proj, c["vocab_size"])]
    if proj != h:
        head = [Matmul("project_in", proj, h), Matmul("project_out", h, proj), *head]
    return layer, head, i


def _falcon(c: dict) -> tuple[list[Matmul], list[Matmul], int]:
    h, n, ffn = c["hidden_size"], c["num_hidden_layers"], c["ffn_hidden_size"]
    qkv = falcon_qkv_width(c)
    layer = [Matmul("self_attention.query_key_value", h, qkv, n), Matmul("self_attention.dense", h, h, n),
             Matmul("mlp.dense_h_to_4h", h, ffn, n), Matmul("mlp.dense_4h_to_h", ffn, h, n)]
    return layer, [Matmul("lm_head", h, c["vocab_size"])], ffn


# Element passes (an element read or written once) of a decoder layer's elementwise kernels in the forward, per token,
# counted from transformers' modeling code: an RMSNorm in decomposed ops (upcast, square, mean, scale, downcast,
# weight) is ~18 passes of the hidden width, a fused LayerNorm ~3, a residual add 3; rotary embeddings ~12 passes of
# the query and key widths (two products, a negation, a concatenation, a sum); the MLP's activation 2 passes of its
# width, plus 3 for a gated MLP's product; attention's output transpose 2 passes of the query width. The backward
# moves about twice as much. `zerokit probe` turns these passes into seconds by timing a reference llama block.
_RMS_NORM, _LAYER_NORM, _RESIDUAL, _ROPE, _ACT, _GATE, _ATTN_OUT = 18, 3, 3, 12, 2, 3, 2
_RMS_FAMILIES = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2",
                 "gemma3_text", "phi3"}
_NORMS = {"gemma2": 4, "gemma3_text": 4}
_NO_ROPE = {"gpt2", "opt"}


def elementwise_passes(c: Mapping[str, Any], mlp_width: int, gated: bool) -> float:
    """Forward element passes of the elementwise kernels of all layers, per token (see the constants above)."""
    mt, h = c["model_type"], c["hidden_size"]
    q = c["num_attention_heads"] * c["head_dim"]
    qk = q + c["num_key_value_heads"] * c["head_dim"]
    norm = _RMS_NORM if mt in _RMS_FAMILIES else _LAYER_NORM
    per_layer = (_NORMS.get(mt, 2) * norm * h + 2 * _RESIDUAL * h + (0 if mt in _NO_ROPE else _ROPE * qk)
                 + (_ACT + (_GATE if gated else 0)) * mlp_width + _ATTN_OUT * q)
    return float(per_layer * c["num_hidden_layers"] + norm * h)


_FAMILY_MATMULS = {"gpt2": _gpt2, "gpt_neox": _gpt_neox, "opt": _opt, "falcon": _falcon}

_CACHE = IdentityMemo(256)


def model_flops(config: Mapping[str, Any] | ModelFlops) -> ModelFlops:
    """The ModelFlops of a transformers config dict (any of the 15 families zerokit counts; any other architecture
    as the llama of its shape, `llama_like`).

    Cached by the identity of the dict (the planner passes the same ModelSpec.config for every candidate), so a
    repeated call costs a dictionary lookup.
    """
    if isinstance(config, ModelFlops):
        return config
    hit = _CACHE.get(id(config), config)
    if hit is not None:
        return hit
    # an architecture counted on the meta device: priced as the llama of its shape (the planner says so)
    c = complete_config(config if config.get("model_type") in FAMILIES else llama_like(config))
    build = _FAMILY_MATMULS.get(c["model_type"], _decoder)
    try:
        layer, head, width = build(c)
        attention = (_decoder_attention(c) if build is _decoder
                     else (AttentionLayers(c["num_hidden_layers"], c["num_attention_heads"], c["head_dim"]),))
        parts = [p for p in model_parts(c) if p.params > 0 and p.copies > 0]
        modules = sum(p.copies for p in parts)
    except (TypeError, KeyError) as e:
        raise BadInput(f"{c['model_type']} config has a missing or wrongly typed value ({e}); fix the config.json") \
            from None
    result = ModelFlops(
        model_type=c["model_type"], hidden_size=c["hidden_size"], num_layers=c["num_hidden_layers"],
        vocab_size=c["vocab_size"], intermediate_size=width, layer_matmuls=tuple(m for m in layer if m.copies > 0),
        head_matmuls=tuple(head), attention=attention, parameter_modules=int(modules),
        module_sizes=tuple((p.params, p.copies) for p in parts),
        elementwise_per_token=elementwise_passes(c, width, gated=build is _decoder),
        score_softcap=bool(c.get("attn_logit_softcapping")),
        forward_trace=forward_trace(parts, c["num_hidden_layers"]),
        gradient_order=backward_order(parts, c["num_hidden_layers"]))
    return _CACHE.put(id(config), config, result)


_BEFORE_ATTENTION = ("input_layernorm", "ln_1", "attention_norm", "input_norm", "self_attn_layer_norm")
_AFTER_ATTENTION = ("post_attention_layernorm", "ln_2", "ffn_norm", "final_layer_norm", "pre_feedforward_layernorm",
                    "post_attention_norm")


def backward_order(parts: list, layers: int) -> tuple[int, ...]:
    """The parameter tensors of `parts` (`model_parts`, registration order) in the order a backward hands their
    gradients over: the modules after the decoder stack last to first (the head, the final norm), then each layer
    from the last, its modules in the reverse of their forward use, then the modules before the stack. A layer
    registers its norms after its attention and MLP (transformers' llama and most decoders), but uses the input norm
    first and the post-attention norm between the two: so reversed, the MLP's modules come first, then the
    post-attention norm, the attention's, the input norm. benchmarks/flush_count.py counted DeepSpeed's flushes in
    real backwards of four llamas, and this order replays them exactly. A tied head is the embedding's weight."""
    first, per_layer, behind = stack_split(parts)
    if not per_layer:
        return ()
    last = [p for p in behind if not p.tied]
    use = _use_order(per_layer)
    out: list[int] = []
    for p in reversed(last):
        out += reversed(part_tensors(p))
    for layer in reversed(range(layers)):
        for p in reversed(use):
            out += list(reversed(part_tensors(p))) * _in_layer(p, layer, layers)
    for p in reversed(first):
        out += reversed(part_tensors(p))
    return tuple(n for n in out if n > 0)


def forward_trace(parts: list, layers: int) -> tuple[int, ...]:
    """Parameters of each module of `parts` in the order a forward uses them (`forward_parts`), a tied head as the
    embedding's weight again (DeepSpeed fetches it for each module that uses it)."""
    if not stack_split(parts)[1]:
        return ()
    return tuple(p.params for p, _ in forward_parts(parts, layers) if p.params > 0)


def forward_parts(parts: list, layers: int) -> list[tuple[Any, int]]:
    """(part, its decoder layer: -1 before the stack, `layers` after it) of each module ZeRO-3 fetches, in the order
    a forward uses them (`backward_order`'s order, reversed, module by module): the modules before the stack, each
    layer's in use order, those after it (a tied head again). One trace for the step time (`forward_trace`) and the
    memory (`zerokit.memory.estimate.module_trace`)."""
    first, per_layer, behind = stack_split(parts)  # only a layer's parts have copies (`models.params._times`)
    entries = [(p, -1) for p in first]
    use = _use_order(per_layer)
    for layer in range(layers):
        for p in use:
            entries += [(p, layer)] * _in_layer(p, layer, layers)
    return entries + [(p, layers) for p in behind]


def _use_order(per_layer: list) -> list:
    """A layer's modules in the order its forward uses them. A layer registers its norms after its attention and MLP
    (transformers' llama and most decoders), but uses the input norm first and the post-attention norm between."""
    before = [p for p in per_layer if p.name.endswith(_BEFORE_ATTENTION)]
    after = [p for p in per_layer if p.name.endswith(_AFTER_ATTENTION)]
    rest = [p for p in per_layer if p not in before and p not in after]
    attention = [p for p in rest if "attn" in p.name or "attention" in p.name]
    return before + attention + after + [p for p in rest if p not in attention]


def _in_layer(p: Any, layer: int, layers: int) -> int:
    """Copies of a per-layer part in `layer`: spread over the layers (a multiple of them for experts of their own)."""
    return (p.copies * (layer + 1)) // layers - (p.copies * layer) // layers


_META_CACHE = IdentityMemo(64)


def meta_model_flops(spec: Any) -> ModelFlops:
    """The ModelFlops of an architecture counted on the meta device (`ModelSpec.source == "meta"`): the llama of its
    shape (`llama_like`), its MLP as wide as the model's own weight matrices make one token's matmuls
    (`ModelSpec.active_matmul_parameters`: routed experts at top-k of all, MLA's or fused projections as they are),
    and ZeRO-3's gathers and hooks over the instantiated model's own modules (`ModelSpec.module_trace`). Without
    those figures (a spec built by hand), the llama of its config's shape as `model_flops` prices it.

    Gpt-oss-120b's config says intermediate_size 2,880, the width of one of its 128 experts: as the llama of that
    shape its MLP was a quarter of the four experts a token runs (10.3 GFLOP a token now, 4.9 then), and ZeRO-3
    gathered 3.0B parameters a pass where the model has 116.8B (DeepSeek-V3: 40B of 671B)."""
    hit = _META_CACHE.get(id(spec.config), spec.config)
    if hit is not None:
        return hit
    c = complete_config(llama_like(spec.config))
    h, layers = c["hidden_size"], c["num_hidden_layers"]
    q, kv = c["num_attention_heads"] * c["head_dim"], c["num_key_value_heads"] * c["head_dim"]
    attention = layers * (2 * h * q + 2 * h * kv)
    if spec.active_matmul_parameters:
        width = round((spec.active_matmul_parameters - attention) / (3 * h * layers))
        if width >= 1:
            c["intermediate_size"] = width
    mf = model_flops(c)
    if spec.module_trace:
        sizes: dict[int, int] = {}
        for _, n in spec.module_trace:
            sizes[n] = sizes.get(n, 0) + 1
        # a memo of its own: `gathered` keys on the threshold alone, so the llama's answers must not carry over
        mf = replace(mf, parameter_modules=len(spec.module_trace), module_sizes=tuple(sorted(sizes.items())),
                     # in registration order, where a layer's norms follow its projections: a norm off
                     forward_trace=tuple(n for _, n in spec.module_trace), _cache={})
    return _META_CACHE.put(id(spec.config), spec.config, mf)

"""LoRA adapter parameter counts, exactly as `peft.get_peft_model` (peft 0.21) builds them, without torch or peft.

Which modules PEFT adapts:

- `target_modules="all-linear"` (`peft.tuners.tuners_utils._maybe_include_all_linear_layers`): every `nn.Linear` and
  transformers `Conv1D` (gpt2) except the model's output embedding (`lm_head`; gpt_neox's too in transformers 5,
  which renamed its `embed_out`).
- A list of names: a module is adapted when its dotted name equals a listed name or ends with `"." + name`
  (`check_target_module_exists`), so `c_proj` takes both of gpt2's and `dense` only neox's attention output.
- transformers 5 MoE (mixtral, qwen3_moe; peft has no conversion for qwen2_moe): the experts are stacked 3-D parameters and the router a plain
  module, so PEFT rewrites the config before it injects (`peft.utils.transformers_weight_conversion`): the transformers
  4 names (mixtral `gate`, `w1`, `w3`, `w2`; Qwen `gate`, `gate_proj`, `up_proj`, `down_proj`) become
  `target_parameters`: the router weight `gate.weight`, the fused `gate_up_proj` (rank doubled when both halves are
  targeted, as they must be) and `down_proj`, each wrapped by `lora.ParamWrapper`. `all-linear` includes them. A
  name that moves to the experts no longer adapts the `nn.Linear` modules of the same name (qwen3_moe's dense
  `mlp_only_layers`). `ParamWrapper` refuses `lora_dropout != 0`.

Per adapted module (bias-free adapters, PEFT's default): `nn.Linear(in, out)` gains `r * (in + out)`; a 2-D parameter
of shape (out, in) the same; a 3-D expert stack (E, d1, d2) gains `r * E * (d1 + d2)`.
tests/test_lora.py holds every family against `peft.get_peft_model` on the meta device.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from zerokit._dataclass import dataclass
from zerokit.errors import BadInput
from zerokit.models.params import Part, complete_config, model_parts
from zerokit.units import _show

ALL_LINEAR = "all-linear"

# transformers-4 expert/router names PEFT maps onto the transformers-5 parameters, per MoE family:
# v4 name -> (v5 parameter, the v4 names fused into it). Mirrors peft's _MOE_TARGET_MODULE_MAPPING/_MOE_FUSED_TARGETS.
_MIXTRAL_MOE = {"gate": ("gate.weight", ("gate",)), "w1": ("gate_up_proj", ("w1", "w3")),
                "w3": ("gate_up_proj", ("w1", "w3")), "w2": ("down_proj", ("w2",))}
_QWEN_MOE = {"gate": ("gate.weight", ("gate",)), "gate_proj": ("gate_up_proj", ("gate_proj", "up_proj")),
             "up_proj": ("gate_up_proj", ("gate_proj", "up_proj")), "down_proj": ("down_proj", ("down_proj",))}
# peft applies it where transformers has a checkpoint conversion and peft a pattern: mixtral and qwen3_moe. qwen2_moe
# has no pattern in peft 0.21, so its experts and router cannot be adapted; all-linear takes its nn.Linear modules.
_MOE_NAMES: dict[str, dict[str, tuple[str, tuple[str, ...]]]] = {"mixtral": _MIXTRAL_MOE, "qwen3_moe": _QWEN_MOE}
EXPERTS = "experts"
"""zerokit's shorthand for every expert projection of a MoE family (mixtral w1,w2,w3; Qwen gate/up/down_proj)."""


@dataclass(frozen=True)
class LoraCount:
    """What `peft.get_peft_model(model, LoraConfig(r=rank, target_modules=..., ...))` trains."""

    trainable: int
    """Adapter parameters: `sum(p.numel() for p in peft_model.parameters() if p.requires_grad)`."""
    per_module: Mapping[str, int]
    """Adapter parameters by module (or parameter) name inside one layer, summed over the layers."""
    modules: int
    """How many modules (and wrapped expert/router parameters) get an adapter."""
    target_modules: str | tuple[str, ...]
    """What to pass as `LoraConfig.target_modules`: `"all-linear"` or the module names, as PEFT reads them."""
    adapted: frozenset[str]
    """The adapted parts (`Part.name`, e.g. `self_attn.q_proj`, or `mlp.experts.gate_up_proj`, `mlp.gate.weight`)."""
    rank: int
    linears: tuple[tuple[int, int, int], ...] = ()
    """(in_features, out_features, copies) of each adapted linear module: each gets an A (in -> rank) and a B
    (rank -> out) of its own, which the step-time model prices by shape (MoE expert and router adapters are not
    linear modules and are not listed)."""


def valid_targets(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The module names `--lora-targets` accepts for this config's family, in model order."""
    return _valid(_key(config))


def refuses_dropout(adapted: tuple[str, ...] | list[str]) -> bool:
    """Whether PEFT refuses `lora_dropout != 0` on these adapted names: MoE experts and routers are parameters,
    which PEFT adapts through `lora.ParamWrapper`, and it has no dropout."""
    return any(name.startswith("mlp.experts.") or name == "mlp.gate.weight" for name in adapted)


def lora_parameters(config: Mapping[str, Any], rank: int, targets: str | Sequence[str] = ALL_LINEAR, *,
                    dropout: float = 0.0) -> LoraCount:
    """Exact adapter counts of rank `rank` on `targets` (`"all-linear"`, or module names; BadInput for bad names)."""
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise BadInput(f"LoRA rank must be a whole number >= 1, got {rank!r}")
    if isinstance(targets, str) and targets.strip().lower() != ALL_LINEAR:
        targets = [t for t in targets.split(",")]
    key = _key(config)
    names = ALL_LINEAR if isinstance(targets, str) else tuple(t.strip() for t in targets)
    adapted, ranks, emitted = _resolve(key, names)
    if dropout and refuses_dropout(adapted):
        raise BadInput(f"PEFT cannot put LoRA dropout on MoE expert or router parameters (lora.ParamWrapper); "
                       f"set --lora-dropout 0 or target only the attention projections "
                       f"({', '.join(n for n in _valid(key) if 'proj' in n and n not in _MOE_NAMES.get(key[0], {}))})")
    per_module: dict[str, int] = {}
    modules = 0
    linears = []
    for part in model_parts(dict(key[1])):
        for name, size, copies in _adapter_sizes(part, adapted, ranks, rank):
            per_module[name] = per_module.get(name, 0) + size * copies
            modules += copies
            if name == part.name and part.linear is not None:
                linears.append((*part.linear, copies))
    return LoraCount(sum(per_module.values()), per_module, modules, emitted, adapted, rank, tuple(linears))


def saved_modules(config: Mapping[str, Any], names: str | Sequence[str]) -> tuple[tuple[str, str, int], ...]:
    """PEFT's `modules_to_save` for this config's family: (name, role, parameters) of each module given, where the
    role is "embedding" (the input embedding: embed_tokens, gpt2's wte, neox's embed_in, falcon's word_embeddings)
    or "head" (lm_head). PEFT keeps the original frozen and trains a whole copy of each
    (`ModulesToSaveWrapper`), found by the end of its dotted name; a tied head gets a copy of its own (PEFT warns
    without `ensure_weight_tying`). Other modules are refused: a norm's name ends many modules' names."""
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",")] if names.strip() else []
    key = _key(config)
    roles = _saveable(key)
    out: list[tuple[str, str, int]] = []
    for name in dict.fromkeys(n.strip() for n in names):
        if name not in roles:
            raise BadInput(f"--lora-modules-to-save: {_show(name)} is not the input embedding or the output head of "
                           f"{key[0]}; give {' or '.join(roles)} (or both, comma-separated)")
        out.append((name, *roles[name]))
    return tuple(out)


def saveable_names(config: Mapping[str, Any]) -> dict[str, str]:
    """{role: name} of the modules `saved_modules` takes for this config's family ("embedding": embed_tokens, wte,
    embed_in or word_embeddings; "head": lm_head)."""
    return {role: name for name, (role, _) in _saveable(_key(config)).items()}


def saved_work(saved: Sequence[tuple[str, str, int]]) -> tuple[int, int]:
    """(parameters, of which the head's) of `saved_modules`' copies: what the step-time model prices them by
    (`zerokit.perf.model.step_time`'s `saved`)."""
    return sum(params for _, _, params in saved), sum(params for _, role, params in saved if role == "head")


@lru_cache(maxsize=256)
def _saveable(key: tuple[str, tuple]) -> dict[str, tuple[str, int]]:
    """{leaf name: (role, parameters)} of the input embedding (the model's first module) and the output head."""
    parts = [p for p in model_parts(dict(key[1])) if p.copies > 0]
    head = _head_name(key)
    embedding = parts[0]
    out = {_leaf(embedding.name): ("embedding", embedding.params)}
    for p in parts:
        if p.name == head:
            out[head] = ("head", p.params)
    return out


# ---------------------------------------------------------------------------------------------------------------------


def _key(config: Mapping[str, Any]) -> tuple[str, tuple]:
    c = complete_config(config)
    return str(c["model_type"]), tuple(sorted((k, _freeze(v)) for k, v in c.items()))


def _freeze(v: Any) -> Any:
    """Hashable stand-in for a config value (lists and dicts such as rope_scaling), for the caches below."""
    if isinstance(v, Mapping):
        return tuple(sorted((str(k), _freeze(x)) for k, x in v.items()))
    return tuple(_freeze(x) for x in v) if isinstance(v, (list, tuple)) else v


def _leaf(name: str) -> str:
    return name.rsplit(".", 1)[-1]


@lru_cache(maxsize=256)
def _linear_parts(key: tuple[str, tuple]) -> tuple[Part, ...]:
    return tuple(p for p in model_parts(dict(key[1])) if p.linear is not None and p.copies > 0)


def _head_name(key: tuple[str, tuple]) -> str:
    return "lm_head"  # every family in transformers 5 (gpt_neox's embed_out became lm_head)


@lru_cache(maxsize=256)
def _valid(key: tuple[str, tuple]) -> tuple[str, ...]:
    moe = _MOE_NAMES.get(key[0], {})
    names = [_leaf(p.name) for p in _linear_parts(key) if _leaf(p.name) not in moe]
    if moe:
        names += [*moe, EXPERTS]
    return tuple(dict.fromkeys(names))


def _matches(module: str, target: str) -> bool:
    return module == target or module.endswith("." + target)


@lru_cache(maxsize=1024)
def _resolve(key: tuple[str, tuple], names: str | tuple[str, ...]
             ) -> tuple[frozenset[str], tuple[tuple[str, int], ...], str | tuple[str, ...]]:
    """(adapted part names, rank multipliers of fused expert stacks, LoraConfig.target_modules)."""
    family = key[0]
    moe = _MOE_NAMES.get(family, {})
    head = _head_name(key)
    linears = [p.name for p in _linear_parts(key)]
    if names == ALL_LINEAR:
        chosen_modules = {n for n in linears if n != head}
        v4 = set(moe)
        emitted: str | tuple[str, ...] = ALL_LINEAR
    else:
        if not names or any(not n for n in names):
            raise BadInput(f"--lora-targets is empty or has an empty name; give all-linear or a comma list of "
                           f"{family} modules: {', '.join(_valid(key))}")
        if ALL_LINEAR in names:  # it said "'all-linear' is not a module ...; valid: all-linear, or ..."
            raise BadInput(f"--lora-targets: {ALL_LINEAR} adapts every linear but the head on its own; give it alone, "
                           f"or a comma list of {family} modules: {', '.join(_valid(key))}")
        expanded: list[str] = []
        for n in names:
            expanded += [v for v in moe if v != "gate"] if n == EXPERTS and moe else [n]
        bad = [n for n in expanded if n not in moe and not any(_matches(m, n) for m in linears)]
        embedding = next((n for n in bad if _saveable(key).get(n, ("",))[0] == "embedding"), None)
        if embedding is not None:  # PEFT has LoRA for nn.Embedding; zerokit plans the linears' only
            raise BadInput(f"--lora-targets: {_show(embedding)} is {family}'s input embedding, and zerokit plans LoRA "
                           f"on linear layers only; to train the embedding (new tokens), give --lora-modules-to-save "
                           f"{embedding} (PEFT trains a whole copy of it), and adapt linears: "
                           f"{', '.join(_valid(key))}")
        one_layer = next((n for n in bad if _leaf(n) in _valid(key) and any(c.isdigit() for c in n)), None)
        if one_layer is not None:  # PEFT adapts it (a dotted suffix); zerokit counts every layer alike
            raise BadInput(f"--lora-targets: {_show(one_layer)} names one layer's module, and zerokit plans adapters "
                           f"on every layer alike; give {_leaf(one_layer)} (PEFT matches it in each layer), or a "
                           f"comma list of {family} modules: {', '.join(_valid(key))}")
        if bad:
            raise BadInput(f"--lora-targets: {', '.join(_show(b) for b in bad)} "
                           f"{'is not a module' if len(bad) == 1 else 'are not modules'} of {family} that LoRA can "
                           f"adapt; valid: all-linear, or a comma list of {', '.join(_valid(key))}")
        v4 = {n for n in expanded if n in moe}
        chosen_modules = {m for m in linears if any(_matches(m, n) for n in expanded if n not in moe)}
        emitted = tuple(dict.fromkeys(expanded))
    # PEFT moves every v4 MoE name (and the Linear modules that share it) from target_modules to target_parameters
    chosen_modules = {m for m in chosen_modules if _leaf(m) not in v4}
    adapted = set(chosen_modules)
    ranks: dict[str, int] = {}
    for name in sorted(v4):
        param, fused = moe[name]
        missing = [f for f in fused if f not in v4]
        if missing:
            raise BadInput(f"--lora-targets: {name} is fused with {', '.join(missing)} into {family}'s {param} in "
                           f"transformers 5; target them together (or use {EXPERTS})")
        full = f"mlp.{param}" if param == "gate.weight" else f"mlp.experts.{param}"
        adapted.add(full)
        ranks[full] = len(fused)
    return frozenset(adapted), tuple(sorted(ranks.items())), emitted


def _adapter_sizes(part: Part, adapted: frozenset[str], ranks: tuple[tuple[str, int], ...], rank: int
                   ) -> list[tuple[str, int, int]]:
    """(name, adapter parameters per copy, copies) of the adapters this part gets."""
    if part.copies == 0:
        return []
    multiplier = dict(ranks)
    out = []
    if part.linear is not None and part.name in adapted:
        out.append((part.name, rank * sum(part.linear), part.copies))
    for pname, n_exp, d1, d2 in part.stacked:
        full = f"{part.name}.{pname}"
        if full in adapted:
            out.append((full, rank * multiplier.get(full, 1) * n_exp * (d1 + d2), part.copies))
    return out

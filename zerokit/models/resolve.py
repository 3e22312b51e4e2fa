"""`--model` as people write it: a parameter count, a transformers config.json (file or folder), or a preset name.

Interpretation order, so that no input means two things: an existing path wins; then anything that starts like a
number is a count (`7B`, `6.7e9`, `125M`); then a preset name or alias (`llama-2-7b`, `meta-llama/Llama-2-7b-hf`);
then another hub id's config.json in the local Hugging Face cache (`cached_config`): zerokit never downloads.
Known families are counted by arithmetic (params.py); any other model_type is instantiated on the meta device when
transformers and torch are installed. Importing this module imports neither.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from typing import Any

from zerokit.errors import BadInput, one_line
from zerokit.models.params import (
    FAMILIES,
    KNOWN_FAMILIES,
    check_config_values,
    check_heads_and_experts,
    check_shape,
    complete_config,
    count_parameters,
)
from zerokit.models.presets import PRESET_NAMES, find_preset, load_preset
from zerokit.models.spec import ModelSpec
from zerokit.units import closest, format_count, parse_count

_ZEROKIT_KEYS = ("_source", "_aliases")
MAX_PARAMETERS = 5 * 10**13
"""50 trillion parameters: 25x the largest models trained so far, and about the most the largest count shape
(llama-3.1-405b's layers, up to the 16,384 a config may have) can stand for; a bare count above it is refused."""
_HOW = "give a preset name (e.g. llama-2-7b), a transformers config.json or its folder, or a count like 7B"

# Shapes a bare count borrows: llama-family presets from 1B to 405B, smallest first.
_COUNT_SHAPES = ("llama-3.2-1b", "llama-3.2-3b", "llama-2-7b", "llama-3-8b", "llama-2-13b", "llama-2-70b",
                 "llama-3.1-70b", "llama-3.1-405b")
# Below ~1B the embeddings of those presets alone are too big: a GPT-2-small-sized llama instead.
_SMALL_SHAPE = {
    "model_type": "llama", "hidden_size": 768, "intermediate_size": 2048, "num_hidden_layers": 12,
    "num_attention_heads": 12, "num_key_value_heads": 12, "vocab_size": 32000, "tie_word_embeddings": False,
    "max_position_embeddings": 2048,
}


def resolve_model(text: str) -> ModelSpec:
    """The ModelSpec for `--model TEXT`; BadInput (one line, with the fix) for anything unusable."""
    s = str(text).strip()
    if not s:
        raise BadInput(f"--model is empty; {_HOW}")
    path = os.path.expanduser(s)
    if os.path.exists(path):
        return spec_from_path(path)
    if re.match(r"[+-]?\.?[0-9]", s):
        if s.startswith("-"):
            raise BadInput(f"model parameter count {s!r} is negative; give a positive count like 7B or 6.7e9")
        return spec_from_count(parse_count(s, "model parameter count", maximum=MAX_PARAMETERS), name=s)
    preset = find_preset(s)
    if preset is not None:
        return spec_from_preset(preset)
    if os.path.islink(path):  # exists() is False for a link to nothing, or a loop of links
        raise BadInput(f"model config {s!r} is a symbolic link to nothing that exists (or a loop of links); "
                       f"point it at a config.json, or {_HOW}")
    if s.endswith(".json") or s.startswith((".", "~", os.sep)):
        raise BadInput(f"model config {s!r} does not exist; check the path, or {_HOW}")
    if "/" in s:
        cached = cached_config(s)
        if cached is not None:  # downloaded before: its config.json, as transformers finds it offline
            return spec_from_path(cached, name=s)
        # a hub id names a model of its own: only a near-typo of a preset's name is one (not 'foo/bar-7b', whose
        # '-7b' alone matched gemma-7b at the default cutoff)
        hint = closest(s.rsplit("/", 1)[-1], PRESET_NAMES, "model preset", cutoff=HUB_HINT_CUTOFF).split("; ", 1)[1]
        hint = f"; or the preset: {hint}" if hint.startswith("did you mean") else ""
        raise BadInput(f"{s!r} is neither a file, a known preset alias nor a model in the Hugging Face cache "
                       f"({hub_cache()}), and zerokit does not download from the hub: save the model's config.json "
                       f"and pass its path{hint}")
    raise BadInput(closest(s, PRESET_NAMES, "model preset") + " (other forms: a config.json path or a count like 7B)")


HUB_HINT_CUTOFF = 0.75
"""How close a hub id's name must be to a preset's (difflib's ratio) for the error to name the preset."""


def spec_from_preset(name: str) -> ModelSpec:
    raw = load_preset(name)
    canonical = find_preset(name) or name
    config = {k: v for k, v in raw.items() if k not in _ZEROKIT_KEYS}
    return spec_from_config(config, canonical, source="preset")


def model_file(text: str) -> str | None:
    """The file `--model TEXT` reads where TEXT is a path that exists (`resolve_model` reads it as one): a
    config.json, or the one in a folder; None for a preset, a count or a hub id."""
    path = os.path.expanduser(str(text).strip())
    return _config_file(path) if path and os.path.exists(path) else None


def _config_file(path: str) -> str:
    return os.path.join(path, "config.json") if os.path.isdir(path) else path


def hub_cache() -> str:
    """The Hugging Face hub cache folder, as huggingface_hub's constants find it: HF_HUB_CACHE, else the legacy
    HUGGINGFACE_HUB_CACHE, else HF_HOME/hub, HF_HOME defaulting to XDG_CACHE_HOME/huggingface (~/.cache)."""
    home = os.getenv("HF_HOME", os.path.join(os.getenv("XDG_CACHE_HOME", os.path.join("~", ".cache")), "huggingface"))
    folder = os.getenv("HF_HUB_CACHE", os.getenv("HUGGINGFACE_HUB_CACHE", os.path.join(home, "hub")))
    return os.path.expandvars(os.path.expanduser(folder))


HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")
"""A hub model id, ORG/NAME (huggingface_hub's validate_repo_id allows letters, digits, '-', '_' and '.')."""


def cached_config(repo_id: str) -> str | None:
    """The config.json of hub model `repo_id` in the local cache (`hub_cache`), where a download put it:
    models--ORG--NAME/snapshots/COMMIT/config.json, COMMIT the one refs/main names, else the newest snapshot that has
    one; None where the cache has none."""
    if not HUB_ID.fullmatch(repo_id) or ".." in repo_id:
        return None
    repo = os.path.join(hub_cache(), "models--" + repo_id.replace("/", "--"))
    try:
        with open(os.path.join(repo, "refs", "main"), encoding="utf-8") as f:
            main = f.read(100).strip()
    except (OSError, UnicodeDecodeError):
        main = ""
    snapshots = os.path.join(repo, "snapshots")
    if main and os.path.isfile(os.path.join(snapshots, main, "config.json")):
        return os.path.join(snapshots, main, "config.json")
    try:
        found = [os.path.join(snapshots, d, "config.json") for d in os.listdir(snapshots)]
    except OSError:
        return None
    found = [f for f in found if os.path.isfile(f)]
    return max(found, key=os.path.getmtime) if found else None


def spec_from_path(path: str, name: str | None = None) -> ModelSpec:
    """A config.json, or a folder holding one (a checkpoint directory); `name`: what the plan calls the model (the
    path by default)."""
    from zerokit.fileio import Unreadable, read_bytes

    file = _config_file(path)
    try:
        raw = read_bytes(file, "--model")
    except Unreadable as e:
        if os.path.isdir(path) and e.reason == "no such file":
            raise BadInput(f"folder {path!r} has no config.json; point --model at the model's transformers "
                           "config.json") from None
        raise BadInput(f"{e}; point --model at a transformers config.json (or a folder holding one)") from None
    try:
        config = json.loads(raw.decode("utf-8"), object_hook=_special_float)
    except json.JSONDecodeError as e:
        if raw.startswith(b"\xef\xbb\xbf"):  # transformers reads config.json as plain UTF-8 and fails on it too
            raise BadInput(f"{file} starts with a UTF-8 byte-order mark, which transformers' json.loads refuses "
                           "too; save it as UTF-8 without BOM") from None
        raise BadInput(f"{file}: malformed JSON at line {e.lineno}, column {e.colno}: {e.msg}; fix the file") from None
    except UnicodeDecodeError:
        raise BadInput(f"{file} is not UTF-8 text, so it is not a config.json; point --model at one") from None
    except (ValueError, RecursionError) as e:  # a number of more than 4300 digits, absurd nesting
        what = "nested too deeply" if isinstance(e, RecursionError) else "a number of more than 4300 digits"
        raise BadInput(f"{file}: not a usable config.json ({what}); fix the file") from None
    if not isinstance(config, dict):
        raise BadInput(f"{file} is not a transformers config.json (expected a JSON object with model_type)")
    if "model_type" not in config:
        raise BadInput(f"{file} has no model_type, so it is not a transformers config.json; add \"model_type\" "
                       f"(e.g. \"llama\") or use a preset")
    model_type = str(config["model_type"])
    check_config_values(config, model_type)
    family = FAMILIES.get(model_type)
    if family is not None:
        for key in ("hidden_size", "num_hidden_layers", "vocab_size"):
            alias = family.aliases.get(key, key)
            if key not in config and alias not in config:
                raise BadInput(f"{file} ({model_type}) lacks {alias}; copy the model's full config.json, "
                               "or use a preset")
    return spec_from_config(config, name or path, source="config")


_FLOAT_TAGS = {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}


def _special_float(obj: dict) -> Any:
    """`{"__float__": "Infinity"}` as the float, each object as json decodes it (no walk of its own, which absurd
    nesting overran): transformers 5's save_pretrained writes infinities and NaN so (a Mamba-2's time_step_limit
    [0.0, inf]), and its from_pretrained reads them back (`_decode_special_floats`)."""
    tag = obj.get("__float__") if len(obj) == 1 else None
    return _FLOAT_TAGS[tag] if isinstance(tag, str) and tag in _FLOAT_TAGS else obj


def spec_from_config(config: Mapping[str, Any], name: str, source: str = "config") -> ModelSpec:
    """Exact counts for a transformers config dict: arithmetic for known families, else the meta device."""
    model_type = str(config.get("model_type", ""))
    if model_type not in FAMILIES:
        return _spec_from_meta(config, name)
    full = complete_config(config)
    check_shape(config, full)
    total, largest = count_parameters(config)
    return ModelSpec(name=name, parameters=total, largest_layer_parameters=largest,
                     hidden_size=full["hidden_size"], num_layers=full["num_hidden_layers"],
                     vocab_size=full["vocab_size"], source=source, config=full)


def spec_from_count(n: int, name: str | None = None) -> ModelSpec:
    """A bare count: parameters are exactly `n`; the shape (for activations) is a llama-family one, layers scaled."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise BadInput(f"model parameter count must be a whole number >= 1, got {n!r}")
    if n > MAX_PARAMETERS:
        raise BadInput(f"model parameter count {format_count(n)} is too large for a bare count; at most "
                       f"{format_count(MAX_PARAMETERS)} (give a config.json to plan anything larger)")
    smallest = count_parameters({**_SMALL_SHAPE, "num_hidden_layers": 1})[0]
    if n < smallest:
        raise BadInput(f"model parameter count {n:,} is below the smallest shape zerokit infers from a count "
                       f"({smallest:,}: one 768-wide llama layer and a 32k vocabulary); give the model's config.json "
                       "for anything smaller")
    base, shape = _inferred_shape(n)
    _, largest = count_parameters(shape)
    full = complete_config(shape)
    note = (f"model shape inferred from {format_count(n)} parameters ({base}-like, {full['num_hidden_layers']} layers, "
            f"hidden {full['hidden_size']}); a preset or config.json gives exact figures")
    return ModelSpec(name=name or str(n), parameters=n, largest_layer_parameters=largest,
                     hidden_size=full["hidden_size"], num_layers=full["num_hidden_layers"],
                     vocab_size=full["vocab_size"], source="count", config={**full, "_inferred_from": base},
                     notes=(note,))


def _inferred_shape(n: int) -> tuple[str, dict]:
    """The llama-family preset nearest to `n` in log scale, with its layer count scaled so the total is near `n`."""
    candidates = [(name, {k: v for k, v in load_preset(name).items() if k not in _ZEROKIT_KEYS})
                  for name in _COUNT_SHAPES]
    candidates.insert(0, ("small llama", dict(_SMALL_SHAPE)))
    sized = [(name, cfg, count_parameters(cfg)[0]) for name, cfg in candidates]
    name, cfg, total = min(sized, key=lambda t: abs(math.log(n / t[2])))
    layers = cfg["num_hidden_layers"]
    one_layer_less = count_parameters({**cfg, "num_hidden_layers": layers - 1})[0]
    per_layer, fixed = total - one_layer_less, one_layer_less - (layers - 1) * (total - one_layer_less)
    scaled = max(1, round((n - fixed) / per_layer))
    return name, {**cfg, "num_hidden_layers": scaled}


def _known_model_types() -> Any:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    return CONFIG_MAPPING


def _check_meta_shape(hf_config: Any, model_type: str) -> None:
    """`check_shape`'s rules (`check_heads_and_experts`) for a family zerokit does not count, read off transformers'
    config object. transformers builds such a model, and it fails in its first forward."""
    def whole(key: str) -> int | None:
        value = getattr(hf_config, key, None)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    check_heads_and_experts(model_type, whole("hidden_size"), whole("num_attention_heads"),
                            whole("num_key_value_heads"), getattr(hf_config, "head_dim", None) is None,
                            whole("num_local_experts") or whole("num_experts") or whole("n_routed_experts"),
                            whole("num_experts_per_tok"))


def _spec_from_meta(config: Mapping[str, Any], name: str) -> ModelSpec:
    """Any architecture transformers knows: instantiate on the meta device (no memory) and count like DeepSpeed."""
    model_type = str(config.get("model_type", ""))
    try:
        import torch
        import transformers
        from transformers import AutoConfig, AutoModelForCausalLM
    except ImportError:
        raise BadInput(f"zerokit counts these model families by itself: {', '.join(KNOWN_FAMILIES)}; "
                       f"for model_type {model_type!r} run pip install 'zerokit[deepspeed]' (transformers counts "
                       "any architecture), or use a preset or a count like 7B") from None
    rest = {k: v for k, v in config.items() if k != "model_type"}
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        try:
            hf_config = AutoConfig.for_model(model_type, **rest)
        except Exception as e:  # noqa: BLE001 - unknown types raise ValueError; bad fields, huggingface_hub's
            if isinstance(e, (ValueError, KeyError)) and model_type not in _known_model_types():  # Strict* errors
                raise BadInput(f"transformers {transformers.__version__} does not know model_type {model_type!r}; "
                               f"check the config.json, or use a preset or a count like 7B") from None
            raise BadInput(f"transformers refuses {name} (model_type {model_type!r}): {one_line(e, 300)}; fix the "
                           "config.json") from None
        _check_meta_shape(hf_config, model_type)
        _check_causal_lm(hf_config, model_type)
        try:
            with torch.device("meta"):
                model = AutoModelForCausalLM.from_config(hf_config)
        except Exception as e:  # noqa: BLE001 - transformers raises many kinds for configs it cannot build
            raise BadInput(f"transformers cannot build a causal LM from {name} (model_type {model_type!r}): "
                           f"{one_line(e, 300)}") from None
    finally:
        transformers.logging.set_verbosity(verbosity)
    total = sum(p.numel() for p in model.parameters())
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    text = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
    full = {**text.to_dict(), "model_type": model_type}
    hidden = int(getattr(text, "hidden_size", 0) or 0)
    heads = getattr(text, "num_attention_heads", None)
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"):  # under their canonical
        if full.get(key) is None and isinstance(getattr(text, key, None), int):  # names (gpt-j's n_embd, ...)
            full[key] = getattr(text, key)
    full.setdefault("num_key_value_heads", heads)
    if full.get("num_key_value_heads") is None:
        full["num_key_value_heads"] = heads
    if full.get("head_dim") is None and heads:
        full["head_dim"] = hidden // heads
    if full.get("intermediate_size") is None and hidden:
        full["intermediate_size"] = 4 * hidden
    notes = [(f"counted by instantiating {type(model).__name__} on the meta device "
             f"(transformers {transformers.__version__})")]
    aliases = getattr(text, "attribute_map", {}) or {}  # gpt-j's n_layer for num_hidden_layers
    given = config if text is hf_config else _sub_config(config, hf_config, text)  # a VLM's under its text_config
    absent = [f"{key} ({getattr(text, key)})" for key in ("hidden_size", "num_hidden_layers", "vocab_size")
              if key not in given and aliases.get(key) not in given and getattr(text, key, None) is not None]
    if absent:  # transformers fills them in: a cut config.json builds its family's default shape, silently
        notes.append(f"{name} gives no {', '.join(k.split(' ')[0] for k in absent)}: planned with transformers' "
                     f"{model_type} defaults, {', '.join(absent)}; add them to the config.json if those are not "
                     "the model's")
    layers = int(getattr(text, "num_hidden_layers", 0) or 0)
    return ModelSpec(name=name, parameters=int(total), largest_layer_parameters=int(largest), hidden_size=hidden,
                     num_layers=layers, vocab_size=int(getattr(text, "vocab_size", 0) or 0), source="meta",
                     config=full, notes=tuple(notes), module_trace=(trace := module_trace(torch, model, layers)),
                     expert_views=expert_views(model) if trace else (),
                     active_matmul_parameters=active_matmul_parameters(torch, model, full))


def _check_causal_lm(hf_config: Any, model_type: str) -> None:
    """BadInput for a model_type AutoModelForCausalLM has no class for (a vision-language model such as Qwen2-VL or
    Llava, an encoder, an encoder-decoder): it raised "Unrecognized configuration class", cut off in its list of
    hundreds of classes. The plan, the memory model and the training script all build AutoModelForCausalLM."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    if getattr(hf_config, "model_type", model_type) in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return
    text = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
    text_type = getattr(text, "model_type", None)
    hint = (f"to plan its language model alone, save its text_config as a config.json (model_type {text_type!r}); "
            if text is not hf_config and text_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES else "")
    raise BadInput(f"transformers has no causal LM for model_type {model_type!r} (AutoModelForCausalLM does not build "
                   f"{type(hf_config).__name__}: a vision-language, encoder or encoder-decoder model), and zerokit plans "
                   f"causal LMs; {hint}use a decoder's config.json, a preset or a count like 7B")


def _sub_config(config: Mapping[str, Any], hf_config: Any, text: Any) -> Mapping[str, Any]:
    """What the config.json gives for the text model of a wrapper (Gemma 3's, Llama 4's): the object under the key
    (`text_config`) whose config `get_text_config` returned; empty where it gives none, so every size is the default."""
    key = next((k for k in getattr(hf_config, "sub_configs", None) or {} if getattr(hf_config, k, None) is text), None)
    sub = config.get(key) if key is not None else None
    return sub if isinstance(sub, Mapping) else {}


def module_trace(torch: Any, model: Any, layers: int) -> tuple[tuple[int, int], ...]:
    """(decoder layer, parameters of its own) of every module that owns parameters, in registration order (the
    order a decoder's forward runs them): the layer -1 outside the decoder stack (the shallowest ModuleList of
    `layers` entries: an MoE's expert list sits deeper), -2 for a module whose parameters an earlier one owns (a
    tied LM head). Empty when the model has no such stack."""
    stacks = [n for n, m in model.named_modules() if isinstance(m, torch.nn.ModuleList) and len(m) == layers and n]
    if not layers or not stacks:
        return ()
    stack = min(stacks, key=lambda n: n.count(".")) + "."
    trace = []
    for name, _, params, tied in _owning_modules(model):
        layer = -2 if tied else int(name[len(stack):].split(".", 1)[0]) if name.startswith(stack) else -1
        trace.append((layer, sum(int(p.numel()) for p in params)))
    return tuple(trace)


def _owning_modules(model: Any) -> Any:
    """(name, module, its own parameters, whether an earlier module owns them all: a tied head) of every module with
    parameters of its own, in registration order: `module_trace`'s entries, and `expert_views`'."""
    seen: set[int] = set()
    for name, m in model.named_modules():
        params = list(m.parameters(recurse=False))
        if not sum(p.numel() for p in params):
            continue
        tied = all(id(p) in seen for p in params)
        seen.update(id(p) for p in params)
        yield name, m, params, tied


def expert_views(model: Any) -> tuple[int, ...]:
    """Per entry of `module_trace` (the modules that own parameters, in the same order), the parameters of its
    stacked expert tensors (three dimensions or more) that its matmuls take as views: a module transformers'
    `use_experts_implementation` decorates without `is_transposed` (grouped_mm passes `weight.transpose(-2, -1)`, the
    eager loop `weight[expert]`); a transposed one (gpt_oss) passes the weight itself; a tied head holds nothing.
    Empty when no module has them."""
    views = tuple(sum(int(p.numel()) for p in params if p.dim() >= 3)
                  if not tied and getattr(m, "is_transposed", None) is False and hasattr(m, "is_concatenated") else 0
                  for _, m, params, tied in _owning_modules(model))
    return views if any(views) else ()


EXPERT_PARAMETER = re.compile(r"(^|\.)experts(\.|$)")
"""A routed MoE expert's parameter by its name: `mlp.experts.3.w1.weight`, `mlp.experts.gate_up_proj` (experts
fused in one tensor); not a shared expert (`shared_expert.`, `shared_experts.`), which every token runs."""
TOP_K_KEYS = ("num_experts_per_tok", "moe_topk", "num_selected_experts", "n_activated_experts", "top_k", "moe_top_k")
EXPERTS_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts", "num_routed_experts")


def _config_count(config: Mapping[str, Any], keys: tuple[str, ...]) -> int | None:
    """The first of `keys` the config sets to a whole number >= 1: at its top level, else in a sub-config one level
    down (DBRX keeps moe_top_k and moe_num_experts in its ffn_config)."""
    levels = [config, *(v for v in config.values() if isinstance(v, Mapping))]
    return next((c[key] for c in levels for key in keys
                 if isinstance(c.get(key), int) and not isinstance(c[key], bool) and c[key] > 0), None)


def active_matmul_parameters(torch: Any, model: Any, config: Mapping[str, Any]) -> int:
    """The weight-matrix parameters one token passes through: every parameter of two or more dimensions but the
    input embeddings and the LM head, routed experts' at the config's top-k of all of them. 0 when the model has
    routed experts but the config names no top-k and expert count this reads (the step-time model then prices the
    architecture by its config's shape alone)."""
    skip = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    head = model.get_output_embeddings()
    if head is not None and getattr(head, "weight", None) is not None:
        skip.add(id(head.weight))
    k, e = _config_count(config, TOP_K_KEYS), _config_count(config, EXPERTS_KEYS)
    dense = routed = 0
    for name, p in model.named_parameters():
        if p.dim() < 2 or id(p) in skip:
            continue
        # by name (not a router kept beside them: JetMoE's self_attention.experts.router), or stacked one slice an
        # expert (JetMoE's mlp.input_linear is [experts, out, in])
        if ((EXPERT_PARAMETER.search(name) and "router" not in name)
                or (e is not None and p.dim() >= 3 and p.shape[0] == e)):
            routed += p.numel()
        else:
            dense += p.numel()
    if not routed:
        return int(dense)
    if k is None or e is None or k > e:
        return 0
    return int(dense + routed * k / e)

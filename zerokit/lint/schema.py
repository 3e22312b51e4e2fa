"""The shipped JSON Schema of a ds_config and the structural checks drawn from it.

A small walker instead of `jsonschema`: it needs only the keywords the schema uses (properties,
additionalProperties, type, enum, ranges), reports every problem with its key path, adds did-you-mean,
and keeps `zerokit lint` fast to start. `jsonschema` validates the schema itself, in the tests.
"""

from __future__ import annotations

import difflib
import itertools
import json
import math
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

from zerokit._dataclass import dataclass
from zerokit.lint.findings import ERROR, WARNING, dotted

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "data" / "ds_config.schema.json"
AUTO = "auto"
AUTO_ALTERNATIVE = {"const": AUTO}
"""The second branch of a filled key's anyOf (`schema_gen._allow_auto` writes it, `value_node` reads it)."""


@dataclass(frozen=True)
class Hit:
    """What a check found: the key path, the message, the fix; severity None means the rule's default."""

    key: tuple
    message: str
    suggestion: str | None = None
    severity: str | None = None
    code: str | None = None  # schema checks report several codes from one walk
    pos: tuple[int, int] | None = None  # where the key path does not say (a syntax error's position)


@lru_cache(maxsize=1)
def load_schema() -> dict:
    with open(SCHEMA_PATH, encoding="utf-8") as f:
        return json.load(f)


def schema_text() -> str:
    return SCHEMA_PATH.read_text(encoding="utf-8")


def node_at(keypath: tuple, schema: dict | None = None) -> dict | None:
    """The schema node describing `keypath`, or None where the schema does not describe it."""
    node = schema or load_schema()
    for key in keypath:
        props = node.get("properties")
        if not props or key not in props:
            return None
        node = props[key]
    return node


def value_node(node: dict) -> dict:
    """What a value under `node` must be. A key the HF Trainer or Accelerate fill is written anyOf [its constraints,
    {"const": "auto"}] (so that a plain JSON Schema validator refuses any other string); the walker never checks an
    "auto" itself (ZK501 decides whether the consumer fills it), so it reads the first branch, with the key's
    description and default beside it."""
    alts = node.get("anyOf")
    if not isinstance(alts, list) or len(alts) != 2 or alts[1] != AUTO_ALTERNATIVE:
        return node
    out = {k: v for k, v in node.items() if k != "anyOf"}
    out.update(alts[0])
    return out


@lru_cache(maxsize=1)
def _leaf_index() -> dict[str, list[str]]:
    """key name -> dotted paths where the schema has it; for 'did you mean zero_optimization.X'."""
    index: dict[str, list[str]] = {}
    stack = [((), load_schema())]
    while stack:
        path, node = stack.pop()
        for key, sub in (node.get("properties") or {}).items():
            if sub.get("x-removed") or sub.get("deprecated"):
                continue
            index.setdefault(key, []).append(".".join(path + (key,)))
            stack.append((path + (key,), sub))
    return index


@lru_cache(maxsize=1)
def alias_pairs() -> tuple[tuple[tuple, str, str], ...]:
    """(section path, pydantic field name, its alias) for every field DeepSpeed accepts under two names
    (x-alias-of: zero_optimization's stage3_* names, tensor_parallel's tp and kernel_inject)."""
    pairs = []
    stack = [((), load_schema())]
    while stack:
        path, node = stack.pop()
        for key, sub in (node.get("properties") or {}).items():
            if sub.get("x-alias-of"):
                pairs.append((path, key, sub["x-alias-of"]))
            stack.append((path + (key,), sub))
    return tuple(sorted(pairs))


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if math.isfinite(value) and value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


_ARTICLE = {"integer": "an integer", "number": "a number", "boolean": "true or false", "string": "a string",
            "array": "a list", "object": "an object {...}", "null": "null"}


def _type_ok(value: Any, types: list[str]) -> bool:
    t = _json_type(value)
    return t in types or (t == "integer" and "number" in types)


def _pydantic_coerces(value: Any, types: list[str], bools: bool = False) -> Any:
    """The value pydantic's lax mode would turn this into, or None when it rejects it. It reads a boolean word in
    any case but not padded (" true" fails), a number with the padding stripped, an integer written "500.0" but
    not "5e8", and with `bools` a JSON true/false as 1/0 for a number (not for a did-you-mean's type check)."""
    if isinstance(value, str):
        v = value.lower()
        if "boolean" in types and v in ("true", "false", "yes", "no", "on", "off", "1", "0", "t", "f", "y", "n"):
            return v in ("true", "yes", "on", "1", "t", "y")
        if "integer" in types or "number" in types:
            v = v.strip()
            try:
                num = float(v)
            except ValueError:
                return None
            if "integer" in types and num.is_integer() and "e" not in v and "n" not in v:  # not 5e8, inf, nan
                return int(num)
            if "number" in types and math.isfinite(num):
                return num
    if "boolean" in types and isinstance(value, (int, float)) and not isinstance(value, bool) and value in (0, 1):
        return bool(value)
    if bools and isinstance(value, bool) and "boolean" not in types:
        return int(value) if "integer" in types else float(value) if "number" in types else None
    return None


def _show(value: Any) -> str:
    text = json.dumps(value, default=str)  # default: a YAML date or time
    return text if len(text) <= 40 else text[:37] + "..."


def _did_you_mean(key: str, candidates: list[str]) -> str | None:
    return _closest(key, tuple(candidates))


@lru_cache(maxsize=4096)  # CI lints many copies of the same configs: the same typos recur
def _closest(key: str, candidates: tuple[str, ...]) -> str | None:
    lowered = {c.lower(): c for c in candidates}
    if key.lower() in lowered:
        return lowered[key.lower()]
    match = difflib.get_close_matches(key.lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[match[0]] if match else None


def check_value(value: Any, node: dict, keypath: tuple, pydantic: bool, shown: str | None = None) -> Iterator[Hit]:
    """Type, enum and range of one value (`shown`: the value as written, where pydantic converted it)."""
    node = value_node(node)
    if node.get("x-torch-dtype"):  # a pydantic field typed torch.dtype (is_instance_of): JSON has no such value
        yield Hit(keypath, f"'{dotted(keypath)}' cannot be set from a config file: DeepSpeed's field is a torch.dtype "
                  f"object, so {_show(value)} (any JSON value) fails validation when the engine starts; delete it",
                  None, ERROR, "ZK103")
        return
    types = node.get("type")
    if isinstance(types, str):
        types = [types]
    if types and not _type_ok(value, types):
        want = " or ".join(_ARTICLE.get(t, t) for t in types)
        name = dotted(keypath)
        fixed = _pydantic_coerces(value, types, bools=pydantic)
        fix = json.dumps(fixed) if fixed is not None else None
        if pydantic and fixed is not None:
            refused = list(check_value(fixed, node, keypath, pydantic, _show(value)))
            if refused:  # converted, and still out of range or enum: "0" for a bucket size, "5" for the stage
                yield from refused
                return
            yield Hit(keypath, f"'{name}' should be {want}, not {_show(value)}: DeepSpeed converts it, but HF's "
                      f"'auto' filling and other tools compare it as written; write {fix}",
                      fix, WARNING, "ZK103")
        else:
            extra = (" DeepSpeed reads this section as a plain dict, so the string is used as is (a non-empty "
                     "string counts as true)." if not pydantic and "boolean" in types and isinstance(value, str)
                     else "")
            yield Hit(keypath, f"'{name}' must be {want}, not {_show(value)}.{extra}"
                      + (f" Write {fix}." if fix else ""), fix, ERROR, "ZK103")
        return
    enum = node.get("enum")
    if enum is not None:
        ok = value in enum
        if not ok and node.get("x-ignore-case") and isinstance(value, str):
            ok = value.lower() in [e.lower() for e in enum if isinstance(e, str)]
        if not ok:
            name = dotted(keypath)
            options = [e for e in enum if e != AUTO or node.get("default") == AUTO]  # DeepSpeed's own "auto"
            guess = _did_you_mean(str(value), [str(e) for e in options]) if isinstance(value, str) else None
            yield Hit(keypath, f"'{name}' is {shown or _show(value)}; DeepSpeed accepts "
                      + ", ".join(_show(e) for e in options), guess, ERROR, "ZK104")
            return
    if _json_type(value) in ("integer", "number") and not isinstance(value, bool):
        for kw, bad, words in (("minimum", lambda v, b: v < b, ">="), ("exclusiveMinimum", lambda v, b: v <= b, ">"),
                               ("maximum", lambda v, b: v > b, "<="), ("exclusiveMaximum", lambda v, b: v >= b, "<")):
            if kw in node and ((isinstance(value, float) and math.isnan(value)) or bad(value, node[kw])):
                default = node.get("default")
                fix = (json.dumps(default) if _json_type(default) in ("integer", "number")
                       and not isinstance(default, bool) else None)
                why = node.get("x-out-of-range")  # what DeepSpeed does with it, where it does not refuse it
                yield Hit(keypath, f"'{dotted(keypath)}' is {shown or _show(value)}; it must be {words} {node[kw]}"
                          + (f": {why}" if why else "; DeepSpeed refuses it at initialize" if pydantic else "")
                          + (f"; write {fix} (DeepSpeed's default)" if fix else ""), fix, ERROR, "ZK105")
                return


MAX_SUGGESTIONS = 100
"""Did-you-mean searches per document: each costs ~0.2 ms, so a file of 200k unknown keys would take a minute.
Past this many unknown keys the rest are still reported, without a suggestion."""


def walk(data: dict) -> Iterator[Hit]:
    """Unknown (ZK100), removed (ZK101), deprecated (ZK102) keys and bad values (ZK103-ZK105), at every level."""
    budget = [MAX_SUGGESTIONS]
    stack: list[tuple[Any, dict, tuple, bool, bool]] = [(data, load_schema(), (), False, False)]
    while stack:
        obj, node, path, pydantic, dormant = stack.pop()
        props = node.get("properties") or {}
        pydantic = pydantic or bool(node.get("x-pydantic"))
        for key, value in obj.items():
            keypath = path + (key,)
            sub = props.get(key)
            if sub is None:
                if node.get("additionalProperties", True) is not False:
                    continue
                if key.startswith("_") and not pydantic:
                    continue  # "_comment": a comment, which DeepSpeed ignores here as the writer meant
                yield _unknown(key, value, keypath, props, pydantic, budget)
                continue
            if sub.get("x-removed"):
                yield Hit(keypath, f"'{dotted(keypath)}' was removed from DeepSpeed, which now refuses the config: "
                          + sub["description"].strip() + " Delete it.", None, ERROR, "ZK101")
                continue
            if sub.get("deprecated"):
                new = sub.get("x-replaced-by")
                if new and "stage3_" + new in props:  # the name HF's and Accelerate's docs and fills use
                    new = "stage3_" + new
                yield Hit(keypath, f"'{dotted(keypath)}' is deprecated" + (f"; use '{new}' instead" if new else ""),
                          new, WARNING, "ZK102")
            if value == AUTO:
                continue  # ZK501 decides whether the consumer fills it
            if isinstance(value, dict) and "properties" in sub:
                stack.append((value, sub, keypath, pydantic,
                              dormant or (bool(sub.get("x-checked-when-enabled")) and not value.get("enabled"))))
                continue
            if key == "zero_optimization" and isinstance(value, bool):
                continue  # the deprecated boolean form; ZK102 above covers it via rules
            hits = check_value(value, sub, keypath, pydantic)
            items = value_node(sub).get("items")
            if isinstance(value, list) and items and "type" in items:
                hits = itertools.chain(hits, *(check_value(item, items, keypath + (i,), pydantic)
                                               for i, item in enumerate(value)))
            yield from (_dormant(h, path[0]) for h in hits) if dormant else hits


def _dormant(hit: Hit, section: str) -> Hit:
    """A bad value in a section DeepSpeed checks only when it is enabled (`x-checked-when-enabled`), which it is not:
    nothing reads it yet, so a warning that it fails once enabled."""
    return Hit(hit.key, f"{hit.message} ({section} is not enabled, so DeepSpeed reads none of it yet; this fails once "
               "it is)", hit.suggestion, WARNING, hit.code, hit.pos)


_OLD_COMPILE = (" (an older compile section's key: DeepSpeed's compile section configures DeepCompile only; delete "
                "it, and call engine.compile(backend=...) to compile)")
_BF16_SCALING = " (bf16 needs no loss scaling, and DeepSpeed's bf16 section has none: delete it)"
MOVED = {
    "aio.thread_count": ("aio.intra_op_parallelism",
                         " (DeepSpeed renamed it intra_op_parallelism: 'aio.intra_op_parallelism')"),
    "monitor_config": (None, (" (DeepSpeed reads tensorboard, wandb, csv_monitor and comet at the top level: move "
                              "them out of monitor_config)")),
    "compile.disable": (None, _OLD_COMPILE),
    "compile.backend": (None, _OLD_COMPILE),
    **{f"bf16.{k}": (None, _BF16_SCALING) for k in ("loss_scale", "initial_scale_power", "loss_scale_window",
                                                     "hysteresis", "consecutive_hysteresis", "min_loss_scale")},
    "zero_optimization.cpu_offload_pin_memory": (
        "zero_optimization.offload_optimizer.pin_memory",
        (" (pin_memory is a key of offload_optimizer and offload_param: "
         "'zero_optimization.offload_optimizer.pin_memory')")),
    "bf16.auto_cast": (None, (" (fp16's key, which casts the inputs to fp16; DeepSpeed's bf16 section has none: "
                              "delete it)")),
    # LLaMA-Factory's ds_z3_fp8_config.json has one; DeepSpeed 0.19's config reads no fp8 key anywhere
    "fp8": (None, (" (DeepSpeed has no fp8 section, so the training runs in bf16 or fp16 as the rest says: fp8 "
                   "matmuls are set outside the ds_config, e.g. Accelerate's mixed_precision=\"fp8\"; delete it)")),
}
"""Unknown keys whose fix a did-you-mean would get wrong: renamed, moved out of a section, or meaningless where
they are (dotted path -> the suggestion, or None, and the hint)."""


def _holds(value: Any, node: dict | None) -> bool:
    """Whether a schema node could hold `value`: a did-you-mean that changes its type (a '_comment' string to the
    comet section, a sequence_parallel dict to the sequence_parallel_size integer) would break the config."""
    if node is None or value == AUTO:
        return True
    node = value_node(node)
    if "properties" in node:
        return isinstance(value, dict)
    types = node.get("type")
    if not types:
        return True
    types = [types] if isinstance(types, str) else types
    if isinstance(value, str) and types != ["object"]:
        return True  # a placeholder HF fills, or a value ZK103 reports once the key is right
    return _type_ok(value, types) or _pydantic_coerces(value, types) is not None


IGNORED = "DeepSpeed silently ignores it"
"""What ZK100 says of an unknown key in a section DeepSpeed does not validate: the engine starts, without it
(the preflight reports such keys without failing: `zerokit.launch.preflight.check_config_lint`)."""


def _unknown(key: str, value: Any, keypath: tuple, props: dict, pydantic: bool, budget: list[int]) -> Hit:
    where = "in " + dotted(keypath[:-1]) if keypath[:-1] else "at the top level"
    if pydantic and value == AUTO:  # DeepSpeedConfigModel.__init__ drops "auto" values before it validates
        effect = "DeepSpeed drops a key set to \"auto\" before it validates the section, so it silently ignores it"
    else:
        effect = ("DeepSpeed rejects it when the engine starts (pydantic: extra fields not permitted)" if pydantic
                  else IGNORED)
    moved = MOVED.get(dotted(keypath))
    if moved is not None:
        return Hit(keypath, f"unknown key '{key}' {where}: {effect}{moved[1]}", moved[0], ERROR, "ZK100")
    if key.startswith("_"):  # a comment key, in a section that refuses them: no typo to guess at
        return Hit(keypath, f"unknown key '{key}' {where}: {effect}; a comment key is safe only outside the "
                   "sections DeepSpeed checks, e.g. at the top level: move or delete it", None, ERROR, "ZK100")
    elsewhere = [p for p in _leaf_index().get(key, []) if _holds(value, node_at(tuple(p.split("."))))]
    guess = None
    if budget[0] > 0:
        budget[0] -= 1
        # not a deprecated name: the fix is the current one (and cpu_offload_use_pin_memory, deprecated, is read by
        # nothing at all)
        guess = _did_you_mean(key, [k for k, v in props.items() if not v.get("x-removed") and not v.get("deprecated")])
        if guess is not None and not _holds(value, props[guess]):
            guess = None
    suggestion = None
    hint = ""
    if len(elsewhere) > 1 and keypath[:-1]:  # prefer the sections inside this one (pin_memory: the offloads)
        inside = [p for p in elsewhere if p.startswith(dotted(keypath[:-1]) + ".")]
        elsewhere = inside or elsewhere
    if len(elsewhere) > 1 and guess is None and len({p.rpartition(".")[0] for p in elsewhere}) > 2:
        # a name many sections have ('enabled'): which one was meant is a guess, and a wrong one adds a section
        hint = f"; {len(elsewhere)} other sections have the key '{key}', this one has not: move it to the section " \
               "you meant, or delete it"
    elif elsewhere and (guess is None or guess.lower() != key.lower()):  # the right key in the wrong section
        suggestion = elsewhere[0]
        parent = suggestion.rpartition(".")[0]
        hint = f" (it belongs {'in ' + parent if parent else 'at the top level'}: '{suggestion}'"
        hint += "".join(f" or '{p}'" for p in elsewhere[1:]) + ")"
    elif guess:
        suggestion = ".".join(str(k) for k in keypath[:-1] + (guess,))
        hint = f" (did you mean '{guess}'?)"
    else:
        hint = "; correct its name or delete it"
    return Hit(keypath, f"unknown key '{key}' {where}: {effect}{hint}", suggestion, ERROR, "ZK100")

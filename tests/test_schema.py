"""The shipped ds_config schema matches what the installed DeepSpeed reads: no key missing, no key invented.

DeepSpeed's keys come from DeepSpeed itself, not from zerokit's generator: every key DeepSpeedConfig looks up in
the dict sections (recorded by handing it a dict that notes each lookup), every field and pydantic alias of the
pydantic models it builds, its removed-keys lists, and the few keys other modules read from the raw dict.
"""

from __future__ import annotations

import copy
import inspect
import json
import re
import subprocess
import sys

import pytest

from zerokit.cli import main
from zerokit.lint.schema import SCHEMA_PATH, load_schema


def schema_paths(node: dict, prefix: tuple = ()) -> tuple[set[tuple], set[tuple]]:
    """(every property path, the paths of open objects whose contents are free-form)."""
    paths, open_ = set(), set()
    for key, sub in (node.get("properties") or {}).items():
        p = prefix + (key,)
        paths.add(p)
        if sub.get("type") == "object" and sub.get("additionalProperties") is True and not sub.get("properties"):
            open_.add(p)
        a, b = schema_paths(sub, p)
        paths |= a
        open_ |= b
    return paths, open_


class Recorder(dict):
    """A dict that notes every key looked up in it (get, [], in, keys()), nested dicts included."""

    seen: set

    def __init__(self, data: dict, path: tuple, seen: set):
        super().__init__({k: Recorder(v, path + (k,), seen) if isinstance(v, dict) else v for k, v in data.items()})
        self.path, self.seen = path, seen

    def _note(self, key):
        if isinstance(key, str):
            self.seen.add(self.path + (key,))

    def get(self, key, default=None):
        self._note(key)
        return super().get(key, default)

    def __getitem__(self, key):
        self._note(key)
        return super().__getitem__(key)

    def __contains__(self, key):
        self._note(key)
        return super().__contains__(key)

    def keys(self):
        outer = self

        class Keys:
            def __contains__(self, key):
                outer._note(key)
                return dict.__contains__(outer, key)

            def __iter__(self):
                return iter(dict.keys(outer))

            def __len__(self):
                return dict.__len__(outer)

        return Keys()


# Every dict-parsed section present (so DeepSpeedConfig looks inside it), pydantic sections present too.
PROBE = {
    "train_batch_size": 1, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
    "optimizer": {"type": "Adam", "params": {}}, "scheduler": {"type": "WarmupLR", "params": {}},
    "activation_checkpointing": {}, "flops_profiler": {}, "aio": {}, "autotuning": {},
    "checkpoint": {"writer": {}, "parallel_write": {}}, "data_types": {}, "pipeline": {},
    "data_efficiency": {"data_sampling": {"curriculum_learning": {}, "dynamic_batching": {}},
                        "data_routing": {"random_ltd": {}}},
    "timers": {"throughput": {}}, "torch_autocast": {"enabled": False},
    "comms_logger": {}, "weight_quantization": {}, "expert_parallel": {"enabled": False},
}


def pydantic_paths(model, prefix: tuple) -> set[tuple]:
    from pydantic import BaseModel

    out = set()
    for name, field in model.model_fields.items():
        names = {name} | ({field.alias} if field.alias else set())
        inner = [a for a in (field.annotation, *getattr(field.annotation, "__args__", ()))
                 if isinstance(a, type) and issubclass(a, BaseModel)]
        for n in names:
            out.add(prefix + (n,))
            for sub in inner:
                out |= pydantic_paths(sub, prefix + (n,))
    return out


@pytest.fixture(scope="module")
def deepspeed_keys() -> set[tuple]:
    pytest.importorskip("deepspeed")
    from deepspeed.monitor.config import DeepSpeedMonitorConfig
    from deepspeed.runtime import config as ds_config
    from deepspeed.runtime.config import DeepSpeedConfig

    seen: set = set()
    cfg = DeepSpeedConfig(Recorder(copy.deepcopy(PROBE), (), seen))
    DeepSpeedConfig(Recorder({"train_batch_size": 1, "zero_optimization": True}, (), seen))  # the deprecated form
    keys = set(seen)
    # the models DeepSpeedConfig built, read off the parsed object
    models = {
        ("zero_optimization",): type(cfg.zero_config), ("fp16",): type(cfg.float16_config),
        ("bf16",): type(cfg.bfloat16_config), ("bfloat16",): type(cfg.bfloat16_config),
        ("comms_logger",): type(cfg.comms_config.comms_logger), ("hybrid_engine",): type(cfg.hybrid_engine),
        ("weight_quantization",): type(cfg.weight_quantization_config), ("compile",): type(cfg.compile_config),
        ("timers", "throughput"): type(cfg.timers_config), ("tensor_parallel",): type(cfg.tensor_parallel_config),
    }
    for name, field in DeepSpeedMonitorConfig.model_fields.items():
        models[(name,)] = field.annotation
    for prefix, model in models.items():
        keys |= pydantic_paths(model, prefix)
    keys |= {(k,) for k in ds_config._REMOVED_TOP_LEVEL_CONFIG_KEYS}
    keys |= {("zero_optimization", k) for k in ds_config._REMOVED_ZERO_CONFIG_KEYS}
    # read outside the recorded path: pipeline defaults and the pipe engine, AutoEP, Ulysses world size and mesh
    from deepspeed.module_inject import auto_ep_config
    from deepspeed.runtime.pipe import engine as pipe_engine

    keys |= {("pipeline", k) for k in cfg.pipeline}
    keys |= {("pipeline", k) for k in re.findall(r"pipeline\['(\w+)'\]", inspect.getsource(pipe_engine))}
    keys |= {("expert_parallel", k) for k in re.findall(r'param_dict\.get\("(\w+)"',
                                                        inspect.getsource(auto_ep_config.parse_autoep_config))}
    assert '"sequence_parallel_size" in config' in inspect.getsource(DeepSpeedConfig.__init__)
    keys.add(("sequence_parallel_size",))
    import deepspeed  # initialize builds a device mesh from data_parallel_size beside sequence_parallel_size

    assert '"sequence_parallel_size" in config and "data_parallel_size" in config' in inspect.getsource(
        deepspeed.initialize)
    keys.add(("data_parallel_size",))
    return keys


def test_schema_is_valid_draft_2020_12():
    jsonschema = pytest.importorskip("jsonschema")
    schema = load_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


def test_schema_names_the_installed_deepspeed():
    deepspeed = pytest.importorskip("deepspeed")
    assert load_schema()["x-deepspeed-version"] == deepspeed.__version__


def test_deepspeed_knows_no_key_the_schema_lacks(deepspeed_keys):
    paths, open_ = schema_paths(load_schema())
    missing = {k for k in deepspeed_keys if not any(k[:len(o)] == o and len(k) > len(o) for o in open_)} - paths
    assert not missing, f"DeepSpeed reads keys the schema lacks: {sorted(missing)}"


def test_schema_has_no_key_deepspeed_does_not_know(deepspeed_keys):
    paths, _ = schema_paths(load_schema())
    invented = paths - deepspeed_keys
    assert not invented, f"schema keys DeepSpeed never reads: {sorted(invented)}"


def test_stage3_aliases_and_deprecated_keys():
    zero = load_schema()["properties"]["zero_optimization"]["properties"]
    assert zero["stage3_prefetch_bucket_size"]["default"] == 50_000_000
    assert zero["prefetch_bucket_size"]["x-alias-of"] == "stage3_prefetch_bucket_size"
    for key in ("cpu_offload", "cpu_offload_param", "stage3_gather_fp16_weights_on_model_save"):
        assert zero[key]["deprecated"] is True
    assert zero["mics_shard_size"]["x-removed"] is True
    top = load_schema()["properties"]
    for key in ("amp", "sparse_attention", "elasticity"):
        assert top[key]["x-removed"] is True


def test_every_key_has_a_description_and_leaves_a_type():
    paths, _ = schema_paths(load_schema())
    from zerokit.lint.schema import node_at

    for p in paths:
        node = node_at(p)
        assert node.get("description"), p
        if not node.get("x-removed") and "properties" not in node and not node.get("x-torch-dtype"):
            # typed `object` in DeepSpeed: pydantic's mpu and groups, AutoEP's sentinel-defaulted fields
            assert "type" in node or "anyOf" in node or p[-1] in ("mpu", "tp_group", "injection_policy_tuple",
                                                                  "expert_w3", "load_balance_coeff"), p


def test_zerokit_configs_validate_against_the_schema_with_jsonschema():
    """The schema an editor uses accepts what zerokit calls clean (auto placeholders included)."""
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(load_schema())
    cfg = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 4, "gradient_clipping": 1.0,
           "bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": "auto",
                                                              "offload_param": {"device": "cpu"}}}
    assert list(validator.iter_errors(cfg)) == []
    bad = {"zero_optimization": {"stage": 3, "overlap_com": True}, "amp": {}}
    assert len(list(validator.iter_errors(bad))) == 2


def test_a_plain_validator_takes_auto_only_where_hf_fills_it_and_no_other_string():
    """"auto" is a placeholder the HF Trainer or Accelerate replace (zerokit.autofill); a string anywhere else, or
    "auto" where nobody fills it, reaches DeepSpeed as is. A third-party validator has only the schema to go by."""
    jsonschema = pytest.importorskip("jsonschema")
    from zerokit.autofill import ACCELERATE_FILLS, TRAINER_FILLS
    from zerokit.lint.schema import node_at

    validator = jsonschema.Draft202012Validator(load_schema())

    def errors(cfg: dict) -> list[str]:
        return [".".join(map(str, e.absolute_path)) for e in validator.iter_errors(cfg)]

    assert errors({"train_batch_size": "auto", "gradient_clipping": "auto", "fp16": {"enabled": "auto"},
                   "zero_optimization": {"stage": "auto", "reduce_bucket_size": "auto",
                                         "offload_optimizer": {"device": "auto", "nvme_path": "auto"}}}) == []
    assert errors({"train_batch_size": "eight"}) == ["train_batch_size"]
    assert errors({"zero_optimization": {"stage": "two"}}) == ["zero_optimization.stage"]
    assert errors({"gradient_accumulation_steps": 0}) == ["gradient_accumulation_steps"]  # the bound still holds
    # nothing fills these: "auto" is the string DeepSpeed reads
    assert errors({"steps_per_print": "auto"}) == ["steps_per_print"]
    assert errors({"fp16": {"loss_scale_window": "auto"}}) == ["fp16.loss_scale_window"]
    assert errors({"zero_optimization": {"prefetch_bucket_size": "auto"}}) == ["zero_optimization.prefetch_bucket_size"]
    assert not any(node.get("x-auto-only") for node in _leaves(load_schema()))
    for key in TRAINER_FILLS | ACCELERATE_FILLS:  # every key either fills has a node that takes "auto"
        node = node_at(tuple(key.split(".")))
        assert node is None or key.split(".")[0] in ("optimizer", "scheduler") or not errors(_nest(key, "auto")), key


def _leaves(node: dict):
    for sub in (node.get("properties") or {}).values():
        yield sub
        yield from _leaves(sub)


def _nest(dotted: str, value) -> dict:
    out = value
    for part in reversed(dotted.split(".")):
        out = {part: out}
    return out


def test_fp16_loss_scale_and_steps_per_print_bounds_are_what_deepspeed_does():
    """DeepSpeedFP16Config._validate_loss_scale refuses a negative loss_scale (a field_validator, not a Field bound,
    so the generator adds it); steps_per_print 0 is a ZeroDivisionError in the engine after the first step (see
    test_lint_rules)."""
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(load_schema())
    assert not validator.is_valid({"fp16": {"loss_scale": -1}})
    assert validator.is_valid({"fp16": {"loss_scale": 0}}) and validator.is_valid({"fp16": {"loss_scale": 128.0}})
    assert not validator.is_valid({"steps_per_print": 0})
    assert validator.is_valid({"steps_per_print": None}) and validator.is_valid({"steps_per_print": 10})
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.precision_config import DeepSpeedFP16Config
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=r"fp16.loss_scale must be >= 0 \(0 enables dynamic loss scaling\)"):
        DeepSpeedFP16Config(loss_scale=-1)


def test_schema_command_prints_the_shipped_schema(capsys):
    assert main(["schema"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out) == load_schema()
    assert out == SCHEMA_PATH.read_text(encoding="utf-8")


def test_schema_command_in_a_subprocess():
    proc = subprocess.run([sys.executable, "-m", "zerokit", "schema"], capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 0 and proc.stderr == ""
    stage = json.loads(proc.stdout)["properties"]["zero_optimization"]["properties"]["stage"]
    assert stage["anyOf"] == [{"type": "integer", "enum": [0, 1, 2, 3]}, {"const": "auto"}]


def test_exclusive_with_marks_every_deprecated_field_deepspeed_moves_and_no_other():
    """x-exclusive-with (ZK102's error) is DeepSpeedConfigModel's new_param where set_new_param is left on: only then
    does _process_deprecated_field assert that the two were not given together."""
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    moved = {name: f.json_schema_extra["new_param"] for name, f in DeepSpeedZeroConfig.model_fields.items()
             if isinstance(f.json_schema_extra, dict) and f.json_schema_extra.get("deprecated")
             and f.json_schema_extra.get("new_param") and f.json_schema_extra.get("set_new_param", True)}
    zero = load_schema()["properties"]["zero_optimization"]["properties"]
    assert {k: v["x-exclusive-with"] for k, v in zero.items() if "x-exclusive-with" in v} == moved
    assert "cpu_offload_use_pin_memory" not in moved and moved["cpu_offload"] == "offload_optimizer"
    assert sum("x-exclusive-with" in node for node in _leaves(load_schema())) == len(moved)  # in no other section

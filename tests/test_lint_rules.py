"""Every lint rule, and the installed DeepSpeed (transformers, Accelerate) showing that the fault it reports is real.

Each test lints a config and then hands the same config to the real consumer: DeepSpeed ignores the setting,
misreads it, or fails only at `deepspeed.initialize`. DeepSpeed runs on its CPU accelerator with a one-rank gloo
group, on a tiny torch model.
"""

from __future__ import annotations

import copy
import inspect
import json
import math
import os
import socket
import tempfile
from pathlib import Path

import pytest
from _support import LEAVE_WITHOUT_DESTRUCTORS, free_port, one_rank_gloo_group

from zerokit.launch.runner import remove_shm_buffers
from zerokit.lint.engine import lint_document
from zerokit.lint.loader import parse_json
from zerokit.lint.rules import RULES, Context

BASE = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1}
ADAGRAD = {"optimizer": {"type": "Adagrad", "params": {"lr": 1e-3}}}  # a ZeRO-tested optimizer that needs no JIT build
ZERO0 = {"zero_optimization": {"stage": 0}}  # what TrainingArguments(deepspeed=...) needs at least (ZK502)


def lint(cfg: dict, target: str = "deepspeed", **ctx) -> list:
    return lint_document(parse_json(json.dumps(cfg, indent=1), "cfg.json"), Context(target, **ctx))


def codes(cfg: dict, target: str = "deepspeed", **ctx) -> set[str]:
    return {f.code for f in lint(cfg, target, **ctx)}


def with_(*parts: dict) -> dict:
    out: dict = copy.deepcopy(BASE)
    for p in parts:
        out.update(copy.deepcopy(p))
    return out


@pytest.fixture(scope="module")
def ds():
    """deepspeed with a one-rank gloo process group (what deepspeed.initialize needs), torn down at the end."""
    pytest.importorskip("deepspeed")
    with one_rank_gloo_group() as deepspeed:
        yield deepspeed


def ds_config(cfg, mpu=None):
    from deepspeed.runtime.config import DeepSpeedConfig

    return DeepSpeedConfig(copy.deepcopy(cfg), mpu=mpu)


def initialize(deepspeed, cfg: dict, client_optimizer: bool = False):
    import torch

    model = torch.nn.Linear(8, 8)
    kwargs = {"optimizer": torch.optim.AdamW(model.parameters())} if client_optimizer else {}
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=copy.deepcopy(cfg),
                                      **kwargs)
    return engine


def train(engine, steps: int = 3, dtype=None, scale: float = 1.0) -> None:
    """A few optimizer steps of the tiny model; `scale` blows the loss up until fp16 gradients overflow."""
    import torch

    for _ in range(steps):
        x = torch.randn(1, 8, dtype=dtype or torch.float32)
        engine.backward(engine(x).float().pow(2).sum() * scale)
        engine.step()


@pytest.fixture
def fp16_on_cpu(ds, monkeypatch):
    """DeepSpeed's CPU accelerator says it has no fp16 unless oneDNN does; torch runs fp16 on the CPU anyway, which
    is all the loss-scaling code needs."""
    from deepspeed.accelerator import get_accelerator

    monkeypatch.setattr(get_accelerator(), "is_fp16_supported", lambda: True)
    return ds


class DataParallel:
    """DeepSpeed's mpu interface: what DeepSpeedConfig asks for the data-parallel world size."""

    def __init__(self, n: int):
        self.n = n

    def get_data_parallel_world_size(self) -> int:
        return self.n


def test_rule_table_codes_are_unique_and_stable():
    assert len({r.code for r in RULES}) == len(RULES)
    assert [r.code for r in RULES][:4] == ["ZK100", "ZK106", "ZK107", "ZK201"]


def test_clean_config_has_no_findings(ds):
    cfg = with_(ADAGRAD, {"zero_optimization": {"stage": 2}, "bf16": {"enabled": True}})
    assert lint(cfg) == []
    assert initialize(ds, cfg).zero_optimization_stage() == 2


# ---------------------------------------------------------------- schema: ZK100-ZK105


def test_zk100_unknown_top_level_key_is_silently_ignored(ds):
    cfg = with_({"wall_clock_breakdwon": True})
    [f] = lint(cfg)
    assert (f.code, f.key, f.suggestion) == ("ZK100", "wall_clock_breakdwon", "wall_clock_breakdown")
    assert "did you mean 'wall_clock_breakdown'" in f.message
    assert ds_config(cfg).wall_clock_breakdown is False  # parsed without complaint, setting not applied


def test_zk100_unknown_key_in_dict_section_is_silently_ignored(ds):
    # DeepSpeed's own ACTIVATION_CHKPT_FORMAT docstring spells it "partitioned_activations"
    cfg = with_({"activation_checkpointing": {"partitioned_activations": True}})
    [f] = lint(cfg)
    assert (f.code, f.key, f.suggestion) == ("ZK100", "activation_checkpointing.partitioned_activations",
                                             "activation_checkpointing.partition_activations")
    assert ds_config(cfg).activation_checkpointing_config.partition_activations is False


def test_zk100_key_in_the_wrong_section_points_to_the_right_one(ds):
    cfg = with_({"offload_optimizer": {"device": "cpu"}})
    [f] = lint(cfg)
    assert f.suggestion == "zero_optimization.offload_optimizer"
    assert "(it belongs in zero_optimization: 'zero_optimization.offload_optimizer')" in f.message
    assert ds_config(cfg).zero_config.offload_optimizer is None
    # a top-level key inside a section: the message names the top level, not the same key again
    [f] = lint(with_({"zero_optimization": {"stage": 2, "gradient_clipping": 1.0}}))
    assert f.message.endswith("(it belongs at the top level: 'gradient_clipping')")


def test_zk100_unknown_zero_key_fails_only_when_deepspeed_starts(ds):
    from pydantic import ValidationError

    cfg = with_({"zero_optimization": {"stage": 2, "contigous_gradients": True}})
    [f] = lint(cfg)
    assert (f.code, f.suggestion) == ("ZK100", "zero_optimization.contiguous_gradients")
    with pytest.raises(ValidationError, match="contigous_gradients"):
        ds_config(cfg)


def test_zk101_removed_keys_are_refused(ds):
    from deepspeed.runtime.config import DeepSpeedConfigError

    for cfg in (with_({"amp": {"enabled": True}}), with_({"zero_optimization": {"stage": 3, "mics_shard_size": 8}})):
        assert [f.code for f in lint(cfg) if f.code == "ZK101"] == ["ZK101"]
        with pytest.raises(DeepSpeedConfigError, match="removed"):
            ds_config(cfg)


def test_zk102_deprecated_alias_is_accepted_with_a_warning(ds):
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    cfg = with_({"zero_optimization": {"stage": 2, "cpu_offload": True}})
    found = [f for f in lint(cfg) if f.code == "ZK102"]
    assert [(f.severity, f.suggestion) for f in found] == [("warning", "offload_optimizer")]
    assert DeepSpeedZeroConfig.model_fields["cpu_offload"].json_schema_extra["deprecated"] is True
    assert ds_config(cfg).zero_config.offload_optimizer.device == "cpu"


def test_zk103_string_boolean_in_dict_section_is_read_as_true(ds):
    cfg = with_({"activation_checkpointing": {"cpu_checkpointing": "false"}})
    [f] = lint(cfg)
    assert (f.code, f.severity, f.suggestion) == ("ZK103", "error", "false")
    assert ds_config(cfg).activation_checkpointing_config.cpu_checkpointing == "false"  # truthy


def test_zk103_wrong_type_in_pydantic_section(ds):
    from pydantic import ValidationError

    cfg = with_({"zero_optimization": {"stage": "two"}})
    assert [(f.code, f.severity) for f in lint(cfg)] == [("ZK103", "error")]
    with pytest.raises(ValidationError):
        ds_config(cfg)
    fraction = with_({"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 15099494.4,
                                            "stage3_gather_16bit_weights_on_model_save": True}})  # accelerate#2814
    assert [(f.code, f.severity) for f in lint(fraction)] == [("ZK103", "error")]
    with pytest.raises(ValidationError, match="fractional part"):
        ds_config(fraction)
    coerced = with_({"zero_optimization": {"stage": "2"}})  # pydantic converts it: only a warning
    assert [(f.code, f.severity, f.suggestion) for f in lint(coerced)] == [("ZK103", "warning", "2")]
    assert ds_config(coerced).zero_optimization_stage == 2


def test_zk103_what_pydantic_converts_is_a_warning_and_what_it_refuses_an_error(ds):
    """pydantic's lax mode reads a boolean word in any case but not padded, an integer written "500.0" (not "5e8")
    and true as 1; a converted value is still checked against the field's enum and bounds."""
    from pydantic import ValidationError

    def zero(**kw) -> dict:
        return with_({"zero_optimization": {"stage": 2, **kw}})

    converted = {"overlap_comm": ("TRUE", True), "reduce_bucket_size": ("500.0", 500),
                 "allgather_bucket_size": (True, 1), "contiguous_gradients": (0, False)}
    for key, (written, read) in converted.items():
        [f] = lint(zero(**{key: written}))
        assert (f.code, f.severity, f.suggestion) == ("ZK103", "warning", json.dumps(read)), key
        assert getattr(ds_config(zero(**{key: written})).zero_config, key) == read
    refused = {"overlap_comm": (" true", "ZK103", "valid boolean"), "reduce_bucket_size": ("5e8", "ZK103", "integer"),
               "allgather_bucket_size": ("-2", "ZK105", "greater than or equal to 0"),
               "stage": ("5", "ZK104", "Input should be 0, 1, 2, 3")}
    for key, (written, code, message) in refused.items():
        assert [(f.code, f.severity) for f in lint(zero(**{key: written}))] == [(code, "error")], key
        with pytest.raises(ValidationError, match=message):
            ds_config(zero(**{key: written}))
    [f] = lint(zero(reduce_bucket_size="0"))
    assert (f.code, f.suggestion) == ("ZK105", "500000000") and "is \"0\"; it must be > 0" in f.message
    assert lint(zero(reduce_bucket_size=500000000)) == []


def test_zk104_value_outside_enum(ds):
    from deepspeed.runtime.config import DeepSpeedConfigError

    cfg = with_({"checkpoint": {"tag_validation": "Warning"}})
    [f] = lint(cfg)
    assert (f.code, f.suggestion) == ("ZK104", "WARN")
    with pytest.raises(DeepSpeedConfigError, match="tag_validation"):
        ds_config(cfg)
    assert lint(with_({"checkpoint": {"tag_validation": "fail"}})) == []  # DeepSpeed upper-cases it


def test_zk105_out_of_range(ds):
    from pydantic import ValidationError

    cfg = with_({"zero_optimization": {"stage": 2, "reduce_bucket_size": 0}})
    assert [f.code for f in lint(cfg)] == ["ZK105"]
    with pytest.raises(ValidationError, match="greater than 0"):
        ds_config(cfg)


def test_zk103_to_zk105_what_pydantic_validators_refuse_or_convert(ds):
    """Constraints DeepSpeed's models enforce in validators, not Field annotations: ZenFlowConfig.validate_fields
    refuses a strategy but auto/step/epoch, an interval string but "auto", an update_interval below 1;
    DeepSpeedZeroLeafModuleConfig takes null for {} and one string for a list of it; and
    seq_parallel_communication_data_type null picks the dtype from the precision (engine.communication_data_type)."""
    from pydantic import ValidationError

    zenflow = {"stage": 2}
    for bad, code, message in (({"select_strategy": "bogus"}, "ZK104", "select_strategy must be one of"),
                               ({"select_interval": "often"}, "ZK103", "select_interval is a string, it must be"),
                               ({"update_interval": 0}, "ZK105", "update_interval is a number, it must be at least")):
        cfg = with_({"zero_optimization": dict(zenflow, zenflow=bad)})
        assert [f.code for f in lint(cfg)] == [code], bad
        with pytest.raises(ValidationError, match=message):
            ds_config(cfg)
    [f] = lint(with_({"zero_optimization": dict(zenflow, zenflow={"select_strategy": "epochs"})}))
    assert f.suggestion == "epoch" and '"auto", "step", "epoch"' in f.message
    good = with_({"zero_optimization": dict(zenflow, zenflow={"select_strategy": "step", "select_interval": 5,
                                                              "update_interval": 1})})
    assert lint(good) == []
    ds_config(good)
    leaf = {"stage": 3, "stage3_gather_16bit_weights_on_model_save": True}
    one = with_({"zero_optimization": dict(leaf, leaf_module={"classes": "my.Block", "names": ["moe"]})})
    assert lint(one) == [] and ds_config(one).zero_config.leaf_module.classes == ["my.Block"]
    null = with_({"zero_optimization": dict(leaf, leaf_module=None)})
    assert lint(null) == [] and ds_config(null).zero_config.leaf_module.names == []
    number = with_({"zero_optimization": dict(leaf, leaf_module={"classes": 5})})
    assert [f.code for f in lint(number)] == ["ZK103"]
    with pytest.raises(ValidationError, match="Input should be a valid list"):
        ds_config(number)
    seq = with_({"seq_parallel_communication_data_type": None})
    assert lint(seq) == [] and ds_config(seq).seq_parallel_communication_data_type is None


def test_zk106_duplicate_key(ds, tmp_path):
    from transformers.integrations.deepspeed import HfDeepSpeedConfig

    path = tmp_path / "dup.json"
    path.write_text('{"train_micro_batch_size_per_gpu": 1,\n "zero_optimization": {"stage": 3, "stage": 2}}\n')
    found = lint_document(__import__("zerokit.lint.loader", fromlist=["x"]).load_file(str(path)), Context())
    [f] = [f for f in found if f.code == "ZK106"]
    assert (f.line, f.key) == (2, "zero_optimization.stage")
    with pytest.raises(ValueError, match="Duplicate keys"):
        ds_config(str(path))
    assert HfDeepSpeedConfig(str(path)).get_value("zero_optimization.stage") == 2  # json.load: last one wins


def test_zk106_one_field_under_both_its_names_is_refused(ds, tmp_path):
    """DeepSpeedConfigModel validates with populate_by_name and extra="forbid": pydantic reads the alias and refuses
    the field's own name beside it. An "auto" DeepSpeed drops does not count; one the HF Trainer fills does."""
    pytest.importorskip("transformers")
    zero = {"stage": 3, "prefetch_bucket_size": 10, "stage3_prefetch_bucket_size": 20,
            "stage3_gather_16bit_weights_on_model_save": True}
    both = with_({"zero_optimization": zero})
    [f] = [f for f in lint(both) if f.code == "ZK106"]
    assert (f.key, f.severity, f.suggestion) == ("zero_optimization.prefetch_bucket_size", "error", None)
    assert "delete one (keep 'stage3_prefetch_bucket_size'" in f.message
    with pytest.raises(ValueError, match="prefetch_bucket_size\n  Extra inputs are not permitted"):
        ds_config(both)
    tp = with_({"tensor_parallel": {"tp": {"tp_size": 1}, "tensor_parallel": {"tp_size": 1}}})
    assert [f.key for f in lint(tp) if f.code == "ZK106"] == ["tensor_parallel.tensor_parallel"]
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):
        ds_config(tp)
    for one in ("prefetch_bucket_size", "stage3_prefetch_bucket_size"):  # either name alone is fine
        alone = with_({"zero_optimization": {k: v for k, v in zero.items() if k != one}})
        assert "ZK106" not in codes(alone)
        ds_config(alone)
    auto = with_({"zero_optimization": dict(zero, stage3_prefetch_bucket_size="auto")})
    assert "ZK106" not in codes(auto)  # DeepSpeedConfigModel drops "auto" before it validates
    ds_config(auto)
    assert "ZK106" in codes(auto, "trainer")
    [said] = hf_trainer(tmp_path, [[auto, False]])
    assert said[0] == "ok" and said[2]["stage3_prefetch_bucket_size"] == int(0.9 * 64 * 64)
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):
        ds_config(with_(auto, {"zero_optimization": said[2]}))


def test_zk107_hjson_works_for_deepspeed_but_not_behind_hf(ds, tmp_path):
    from transformers.integrations.deepspeed import HfDeepSpeedConfig

    path = tmp_path / "ds.hjson"
    path.write_text("{\n  // HJSON\n  train_micro_batch_size_per_gpu: 1\n  gradient_accumulation_steps: 1\n"
                    "  zero_optimization: {stage: 0}\n}\n")
    from zerokit.lint.loader import load_file

    doc = load_file(str(path))
    assert [f.code for f in lint_document(doc, Context("trainer"))] == ["ZK107"]
    assert lint_document(doc, Context("deepspeed")) == []
    assert ds_config(str(path)).train_micro_batch_size_per_gpu == 1
    with pytest.raises(json.JSONDecodeError):
        HfDeepSpeedConfig(str(path))


def test_zk107_a_byte_order_mark_is_reported_beside_hjson_syntax(ds, tmp_path):
    """json.load stops at the byte-order mark before it reads the comment, and a file saved with its comment gone
    but the mark kept still fails behind HF: the mark is its own finding, not hidden behind the HJSON one (which
    used to be the only one). DeepSpeed's hjson skips the mark."""
    from transformers.integrations.deepspeed import HfDeepSpeedConfig

    from zerokit.lint.loader import load_file

    body = '{\n  // HJSON\n  "train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 0}\n}\n'
    path = tmp_path / "ds.json"
    path.write_bytes(b"\xef\xbb\xbf" + body.encode())
    found = lint_document(load_file(str(path)), Context("trainer"))
    assert [(f.code, f.line) for f in found] == [("ZK107", 1), ("ZK107", 2)]
    assert found[0].message.startswith("the file starts with a UTF-8 byte-order mark (BOM): DeepSpeed skips it, but "
                                       "the HF Trainer reads the file with json.load")
    assert found[0].message.endswith("; save it as UTF-8 without BOM") and "\n" not in found[0].message
    assert found[1].message.startswith("not strict JSON (Expecting property name enclosed in double quotes)")
    assert lint_document(load_file(str(path)), Context("deepspeed")) == []
    assert ds_config(str(path)).train_micro_batch_size_per_gpu == 1
    with pytest.raises(json.JSONDecodeError, match="Unexpected UTF-8 BOM"):
        HfDeepSpeedConfig(str(path))
    path.write_bytes(b"\xef\xbb\xbf" + body.replace("  // HJSON\n", "").encode())  # the HJSON finding fixed alone
    assert [f.code for f in lint_document(load_file(str(path)), Context("trainer"))] == ["ZK107"]
    with pytest.raises(json.JSONDecodeError, match="Unexpected UTF-8 BOM"):
        HfDeepSpeedConfig(str(path))


# ---------------------------------------------------------------- batch and precision


def test_zk201_batch_mismatch_with_world_size(ds):
    cfg = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4}
    [f] = lint(cfg, world_size=8)
    assert (f.code, f.suggestion) == ("ZK201", "128")
    assert lint(cfg, world_size=4) == []
    with pytest.raises(AssertionError, match="Check batch related parameters"):
        ds_config(cfg, mpu=DataParallel(8))
    assert ds_config(cfg, mpu=DataParallel(4)).train_batch_size == 64


def test_zk201_batch_not_divisible(ds):
    cfg = {"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4}
    assert codes(cfg, world_size=2) == {"ZK201"}
    with pytest.raises(AssertionError, match="Check batch related parameters"):
        ds_config(cfg, mpu=DataParallel(2))
    assert codes({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4}) \
        == {"ZK201"}  # 30 is no multiple of 16: no world size works


SEQUENCE_PARALLEL_RANKS = """
import copy, json, os, sys
import deepspeed
from deepspeed import comm as dist
from deepspeed.runtime.config import DeepSpeedConfig
from deepspeed.runtime.sequence_parallel import parallel_state_sp

deepspeed.init_distributed(dist_backend="gloo", verbose=False)
said = []
for cfg in json.loads(sys.argv[1]):
    try:
        said.append(DeepSpeedConfig(copy.deepcopy(cfg)).world_size)
    except AssertionError as e:
        said.append(str(e))
for shape in ((1, 2), (2, 2)):  # what deepspeed.initialize builds from data_parallel_size, sequence_parallel_size
    try:
        said.append(dist.get_world_size(dist.initialize_mesh_device(shape, ("data_parallel", "sequence_parallel"))
                                        .get_group(mesh_dim="data_parallel")))
    except RuntimeError as e:
        said.append(str(e))
try:
    parallel_state_sp.initialize_sequence_parallel(3)  # Ulysses' groups
except RuntimeError as e:
    said.append(str(e))
print("RESULT " + json.dumps(said), flush=True)
dist.destroy_process_group()
"""


def gloo_ranks(tmp_path, source: str, ranks: int, arg) -> list:
    """Runs `source` as `ranks` real gloo ranks of one job, `arg` as JSON in argv[1]; what each rank printed after
    RESULT, parsed (a rank that printed none fails the test)."""
    import subprocess
    import sys

    script = tmp_path / "ranks.py"
    script.write_text(source + LEAVE_WITHOUT_DESTRUCTORS)
    port = str(free_port())
    env = dict(os.environ, WORLD_SIZE=str(ranks), LOCAL_WORLD_SIZE=str(ranks), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=port)
    procs = [subprocess.Popen([sys.executable, str(script), json.dumps(arg)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)))
             for r in range(ranks)]
    try:
        out = [p.communicate(timeout=600) for p in procs]
    finally:
        remove_shm_buffers(int(port))
    said = []
    for p, (stdout, stderr) in zip(procs, out):
        lines = [line[7:] for line in stdout.splitlines() if line.startswith("RESULT ")]
        assert p.returncode == 0 and lines, stderr[-3000:]
        said.append(json.loads(lines[0]))
    return said


def test_zk201_sequence_parallel_ranks_are_not_data_parallel(ds, tmp_path):
    """DeepSpeedConfig checks the batch against the ranks divided by sequence_parallel_size, or, with
    data_parallel_size beside it, against the data axis of the mesh deepspeed.initialize builds. Two real gloo
    ranks: lint's world size 2 is one data-parallel rank here (it used to ask for a batch of 4, which fails)."""
    sp = {"train_batch_size": 2, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
          "sequence_parallel_size": 2}
    old_fix = dict(sp, train_batch_size=4)
    assert lint(sp, world_size=2) == []
    [f] = lint(old_fix, world_size=2)
    assert (f.code, f.suggestion) == ("ZK201", "2") and "(2 ranks / sequence_parallel_size 2)" in f.message
    mesh = dict(sp, data_parallel_size=1)
    assert lint(mesh, world_size=2) == []
    [f] = lint(dict(sp, data_parallel_size=2), world_size=2)
    assert (f.code, f.key, f.suggestion) == ("ZK201", "data_parallel_size", "1")
    [f] = lint(dict(sp, sequence_parallel_size=3), world_size=2)
    assert (f.code, f.key) == ("ZK201", "sequence_parallel_size") and "does not divide the world size 2" in f.message
    said = gloo_ranks(tmp_path, SEQUENCE_PARALLEL_RANKS, 2, [sp, old_fix])[0]
    assert said[0] == 1.0  # 2 ranks / sequence_parallel_size 2
    assert "4 != 2 * 1 * 1.0" in said[1]
    assert said[2] == 1  # the (1, 2) mesh: one data-parallel rank
    assert "Mesh should not be bigger than default world size 2, but found 4 ranks" in said[3]
    assert "world_size (2) is less than sequence_parallel_size 3" in said[4]


SEQUENCE_PARALLEL_BEHIND_HF = """
import json, os, sys, torch, transformers
from accelerate import Accelerator, PartialState
from accelerate.parallelism_config import ParallelismConfig
from accelerate.state import AcceleratorState
from accelerate.utils import DeepSpeedPlugin, DeepSpeedSequenceParallelConfig, DummyOptim

configs = json.loads(sys.argv[1])
conf = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                num_attention_heads=2, num_key_value_heads=2)
conf._attn_implementation = "sdpa"
data = [{"input_ids": torch.arange(8), "labels": torch.arange(8), "position_ids": torch.arange(8)}] * 4
said = []
for cfg in configs["trainer"]:
    kw = {}
    if cfg.pop("parallelism_config", None):  # Ulysses through TrainingArguments: its groups, its mpu
        kw["parallelism_config"] = ParallelismConfig(sp_backend="deepspeed", sp_size=2, sp_handler=(
            DeepSpeedSequenceParallelConfig(sp_attn_implementation="sdpa")))
    try:
        args = transformers.TrainingArguments(output_dir=os.path.join(os.path.dirname(__file__), "out"), use_cpu=True,
                                              deepspeed=cfg, per_device_train_batch_size=1, max_steps=1,
                                              save_strategy="no", report_to=[], **kw)
        trainer = transformers.Trainer(model=transformers.LlamaForCausalLM(conf), args=args, train_dataset=data)
        seen = []  # the tokens each rank's step computes the loss of
        trainer.compute_loss = lambda model, inputs, *a, _loss=trainer.compute_loss, **k: (
            seen.append(inputs["input_ids"].shape[-1]), _loss(model, inputs, *a, **k))[1]
        trainer.train()
        said.append(["trained", trainer.model_wrapped.train_batch_size(), seen])
    except (AssertionError, ValueError) as e:
        said.append(f"{type(e).__name__}: {e}")
os.environ["ACCELERATE_USE_DEEPSPEED"] = "true"
for cfg in configs["accelerate"]:
    AcceleratorState._reset_state(reset_partial_state=True)
    PartialState(cpu=True)  # the gloo group over both ranks, as TrainingArguments(use_cpu=True) sets it up
    acc = Accelerator(deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=cfg))
    model = torch.nn.Linear(8, 8)
    try:
        engine, _, _ = acc.prepare(model, DummyOptim(model.parameters()),
                                   torch.utils.data.DataLoader(torch.randn(8, 8), batch_size=1))
        said.append(["prepared", engine.train_batch_size()])
    except AssertionError as e:
        said.append(f"{type(e).__name__}: {e}")
print("RESULT " + json.dumps(said), flush=True)
torch.distributed.barrier()
torch.distributed.destroy_process_group()
"""


def test_zk212_sequence_parallel_size_behind_the_trainer_or_accelerate(ds, tmp_path):
    """Behind the HF Trainer or Accelerate, sequence parallelism is their parallelism_config's: a ds_config's
    sequence_parallel_size builds no Ulysses groups, yet DeepSpeed's batch check still divides the ranks by it,
    against the "auto" train_batch_size they fill for every rank (and, the Trainer, against any number it checks).
    Two real gloo ranks with a tiny Llama: each failure, the run that starts unsharded, and the fix that shards."""
    pytest.importorskip("accelerate")
    base = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
            "gradient_accumulation_steps": "auto", "zero_optimization": {"stage": 0}, "sequence_parallel_size": 2}
    number = dict(base, train_batch_size=1)  # what DeepSpeed counts: 1 x 1 x (2 ranks / 2)
    absent = {k: v for k, v in base.items() if k != "train_batch_size"}
    fixed = {k: v for k, v in base.items() if k != "sequence_parallel_size"}
    for target, how in (("trainer", "TrainingArguments"), ("accelerate", "Accelerator")):
        [f] = lint(base, target, world_size=2)
        assert (f.code, f.severity, f.key) == ("ZK212", "error", "sequence_parallel_size")
        assert f.message.endswith(f'configure sequence parallelism with {how}(parallelism_config=ParallelismConfig('
                                  'sp_backend="deepspeed", sp_size=2)) and delete sequence_parallel_size')
        [f] = lint(absent, target, world_size=2)
        assert (f.code, f.severity) == ("ZK212", "warning") and "shards no sequence" in f.message
        assert lint(fixed, target, world_size=2) == []
    [f] = lint(number, "trainer", world_size=2)
    assert (f.code, f.severity) == ("ZK212", "error") and "mismatch ValueError" in f.message
    assert [(f.code, f.severity) for f in lint(number, "accelerate", world_size=2)] == [("ZK212", "warning")]
    # ZK201's fix for DeepSpeed's count (1) is one the Trainer refuses: ZK212 alone speaks for it
    full = dict(number, train_batch_size=2, train_micro_batch_size_per_gpu=1, gradient_accumulation_steps=1)
    assert [f.code for f in lint(full, "trainer", world_size=2)] == ["ZK212"]
    assert [f.code for f in lint(full, "accelerate", world_size=2)] == ["ZK201", "ZK212"]
    assert "ZK212" not in codes(full, world_size=2)
    adagrad = {"optimizer": {"type": "Adagrad", "params": {"lr": "auto"}}}
    said = gloo_ranks(tmp_path, SEQUENCE_PARALLEL_BEHIND_HF, 2, {
        "trainer": [base, number, absent, dict(fixed, parallelism_config=True)],
        "accelerate": [dict(base, **adagrad), dict(number, **adagrad)]})
    assert said[0] == said[1]
    trainer_auto, trainer_number, trainer_absent, trainer_fixed, accelerate_auto, accelerate_number = said[0]
    assert trainer_auto == accelerate_auto == ("AssertionError: Check batch related parameters. train_batch_size is "
                                               "not equal to micro_batch_per_gpu * gradient_acc_step * world_size "
                                               "2 != 1 * 1 * 1.0")
    assert trainer_number.startswith("ValueError: Please correct the following DeepSpeed config values that mismatch "
                                     "TrainingArguments values:\n- ds train_batch_size=1 vs hf train_batch_size "
                                     "(calculated)=2")
    assert trainer_absent == ["trained", 1.0, [8]]  # every rank its whole 8 tokens, DeepSpeed counting half the batch
    assert trainer_fixed == ["trained", 1, [4]]  # Ulysses: each rank half the sequence
    assert accelerate_number == ["prepared", 1]  # starts (ZK201 checks the number), sharding nothing


AUTOTP_RANKS = """
import json, sys
import deepspeed
import torch
from deepspeed import comm as dist
from transformers import LlamaConfig, LlamaForCausalLM

deepspeed.init_distributed(dist_backend="gloo", verbose=False)
said = []
for autotp_size, batch, *more in json.loads(sys.argv[1]):
    cfg = {"train_batch_size": batch, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
           "optimizer": {"type": "SGD", "params": {"lr": 0.1}}, "tensor_parallel": {"autotp_size": autotp_size},
           **(more[0] if more else {})}
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2))
    try:
        engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    except (AssertionError, IndexError) as e:
        said.append(f"{type(e).__name__}: {e}")
        continue
    ids = torch.randint(0, 64, (2, 4))
    engine.backward(engine(input_ids=ids, labels=ids).loss)
    engine.step()
    said.append([engine.dp_world_size, engine.train_batch_size(), list(model.model.layers[0].mlp.up_proj.weight.shape)])
print("RESULT " + json.dumps(said), flush=True)
dist.barrier()
dist.destroy_process_group()
"""


def test_zk201_autotp_ranks_count_in_the_batch_and_must_fill_the_mesh(ds, tmp_path):
    """AutoTP does not change DeepSpeed's batch check: DeepSpeedConfig counts every rank, though the engine's
    data-parallel world size is the ranks / autotp_size. Its (ranks // autotp_size, autotp_size) device mesh must
    hold every rank: an autotp_size above the world size is an AssertionError, one that leaves ranks outside the mesh
    an IndexError on those. Two and three real gloo ranks on a tiny Llama that AutoTP shards."""
    pytest.importorskip("transformers")
    tp = {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
          "tensor_parallel": {"autotp_size": 2}}
    assert lint(tp, world_size=2) == []
    [f] = lint(dict(tp, train_batch_size=2), world_size=2)  # not divided by autotp_size: DeepSpeed asserts it
    assert (f.code, f.suggestion) == ("ZK201", "4") and "tensor_parallel.autotp_size 2 shares" in f.message
    [f] = lint(dict(tp, tensor_parallel={"autotp_size": 3}), world_size=2)
    assert (f.code, f.key) == ("ZK201", "tensor_parallel.autotp_size") and "an AssertionError on every" in f.message
    [f] = lint(dict(tp, train_batch_size=6), world_size=3)
    assert (f.code, f.key) == ("ZK201", "tensor_parallel.autotp_size") and "IndexError on the 1 of 3" in f.message
    [said, _] = gloo_ranks(tmp_path, AUTOTP_RANKS, 2, [[3, 4], [2, 2], [2, 4]])
    assert said[0] == "AssertionError: "  # torch's mesh layout, asked for a (0, 3) mesh of 2 ranks
    assert said[1].endswith("2 != 2 * 1 * 2")
    assert said[2] == [1, 4, [16, 16]]  # one data-parallel rank, a batch of 4, up_proj's 32 rows halved
    said = gloo_ranks(tmp_path, AUTOTP_RANKS, 3, [[2, 6]])
    assert said[:2] == [[[1, 6, [16, 16]]]] * 2 and said[2] == ["IndexError: list index out of range"]


def test_zk201_autotp_beside_sequence_parallel_divides_the_ranks_by_sequence_parallel_alone(ds, tmp_path):
    """With both keys (no mpu, no data_parallel_size) DeepSpeedConfig checks the batch against the ranks /
    sequence_parallel_size (config.py, before the engine builds AutoTP's mesh), while the engine's data-parallel
    world size is the ranks / autotp_size. Four real gloo ranks, autotp_size 4 and sequence_parallel_size 2: three
    counts of the data-parallel ranks (4 / 2 = 2, 4 / 4 = 1, all 4) ask for three batches, and only the first, the one
    ZK201 asks for, initializes."""
    pytest.importorskip("transformers")
    both = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "tensor_parallel": {"autotp_size": 4},
            "sequence_parallel_size": 2}
    assert lint(dict(both, train_batch_size=4), world_size=4) == []
    for batch in (2, 8):  # micro 2 x the engine's one data-parallel rank; x every rank
        [f] = lint(dict(both, train_batch_size=batch), world_size=4)
        assert (f.code, f.suggestion) == ("ZK201", "4") and "(4 ranks / sequence_parallel_size 2)" in f.message
    said = gloo_ranks(tmp_path, AUTOTP_RANKS, 4, [[4, b, {"sequence_parallel_size": 2}] for b in (4, 2, 8)])
    refused = "AssertionError: Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu"
    for rank in said:
        assert rank[0] == [1, 4, [8, 16]]  # one engine data-parallel rank, a batch of 4, up_proj's 32 rows quartered
        assert rank[1] == f"{refused} * gradient_acc_step * world_size 2 != 2 * 1 * 2.0"
        assert rank[2] == f"{refused} * gradient_acc_step * world_size 8 != 2 * 1 * 2.0"


def test_zk202_no_batch_size_for_deepspeed(ds):
    cfg = {"gradient_accumulation_steps": 1}
    assert codes(cfg) == {"ZK202"}
    for target in ("trainer", "accelerate"):  # they fill "auto" alone (hf_runs: the real ones assert)
        [f] = lint({**cfg, **ZERO0}, target=target)
        assert (f.code, f.suggestion) == ("ZK202", "train_micro_batch_size_per_gpu")
        assert f.message.endswith('set "train_micro_batch_size_per_gpu": "auto"')
    with pytest.raises(AssertionError, match="Either train_batch_size or train_micro_batch_size_per_gpu"):
        ds_config(cfg)
    nulls = {"train_batch_size": None, "train_micro_batch_size_per_gpu": None}
    assert codes({**cfg, **nulls}) == {"ZK202"}  # a null is no value: param_dict.get gives None
    with pytest.raises(AssertionError, match="Either train_batch_size or train_micro_batch_size_per_gpu"):
        ds_config({**cfg, **nulls})


def test_a_null_batch_key_is_derived_by_deepspeed(ds):
    """DeepSpeedConfig reads the three with param_dict.get(key, None) and derives a None as if the key were absent;
    the batch check (ZK201) runs on what it derives."""
    for null, derived in (("train_batch_size", 8), ("train_micro_batch_size_per_gpu", 2),
                          ("gradient_accumulation_steps", 2)):
        cfg = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, null: None}
        assert lint(cfg, world_size=2) == [], null
        assert getattr(ds_config(cfg, mpu=DataParallel(2)), null) == derived
    odd = {"train_batch_size": 9, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": None}
    assert codes(odd, world_size=2) == {"ZK201"}
    with pytest.raises(AssertionError, match="Check batch related parameters"):
        ds_config(odd, mpu=DataParallel(2))


HF_RUNS = """
import json, os, sys, traceback, torch, transformers
from accelerate import Accelerator, PartialState
from accelerate.state import AcceleratorState
from accelerate.utils import DeepSpeedPlugin, DummyOptim

cases = json.loads(sys.argv[1])
conf = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                num_attention_heads=2, num_key_value_heads=2)
data = [{"input_ids": torch.arange(8), "labels": torch.arange(8)}] * 8

def failed(e):
    return f"{type(e).__name__} in {traceback.extract_tb(e.__traceback__)[-1].name}: {e}"

out = {"trainer": [], "accelerate": []}
for cfg, bf16 in cases:  # TrainingArguments: 2 samples per rank, 2 micro-batches per step, one rank
    AcceleratorState._reset_state(reset_partial_state=True)
    try:
        args = transformers.TrainingArguments(output_dir=sys.argv[2], use_cpu=True, deepspeed=json.loads(json.dumps(cfg)),
                                              per_device_train_batch_size=2, gradient_accumulation_steps=2,
                                              max_steps=1, save_strategy="no", report_to=[], bf16=bf16)
        trainer = transformers.Trainer(model=transformers.LlamaForCausalLM(conf), args=args, train_dataset=data)
        trainer.train()
        e = trainer.model_wrapped
        out["trainer"].append([e.train_batch_size(), e.train_micro_batch_size_per_gpu(),
                               e.gradient_accumulation_steps(), e.bfloat16_enabled()])
    except Exception as e:
        out["trainer"].append(failed(e))
os.environ["ACCELERATE_USE_DEEPSPEED"] = "true"
for cfg, bf16 in cases:  # an Accelerate loop: a dataloader of 2 samples, accumulate() around each step
    AcceleratorState._reset_state(reset_partial_state=True)
    PartialState(cpu=True)
    try:
        acc = Accelerator(deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=json.loads(json.dumps(cfg))),
                          mixed_precision="bf16" if bf16 else "no")
        model = torch.nn.Linear(8, 8)
        e, opt, loader = acc.prepare(model, DummyOptim(model.parameters()),
                                     torch.utils.data.DataLoader(torch.randn(8, 8), batch_size=2))
        for x in loader:
            with acc.accumulate(e):
                acc.backward(e(x.to(e.module.weight.dtype)).float().pow(2).sum())
                opt.step()
                opt.zero_grad()
        out["accelerate"].append([e.train_batch_size(), e.train_micro_batch_size_per_gpu(),
                                  e.gradient_accumulation_steps(), e.bfloat16_enabled()])
    except Exception as e:
        out["accelerate"].append(failed(e))
print("RESULT " + json.dumps(out), flush=True)
torch.distributed.destroy_process_group()
""" + LEAVE_WITHOUT_DESTRUCTORS


def hf_runs(tmp_path, cases: list) -> dict:
    """Each (config, bf16) through a real HF Trainer (TrainingArguments(deepspeed=...), train) and a real Accelerate
    loop (Accelerator.prepare, accumulate), one rank on the CPU: [train_batch_size, micro batch, accumulation,
    bf16 on] of the engine each built, or the exception that stopped it, per target."""
    import subprocess
    import sys

    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1",
               LOCAL_RANK="0", ACCELERATE_USE_DEEPSPEED="false")
    proc = subprocess.run([sys.executable, "-c", HF_RUNS, json.dumps(cases), str(tmp_path)], capture_output=True,
                          text=True, timeout=600, env=env, check=False)
    said = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert said, proc.stderr[-3000:]
    return json.loads(said[-1][len("RESULT "):])


def test_zk213_null_batch_keys_behind_the_trainer_and_accelerate(ds, tmp_path):
    """DeepSpeed derives a null batch key; Accelerate (the Trainer prepares through it) reads a null
    gradient_accumulation_steps back as its own and multiplies the micro batch by it; a null micro batch leaves it
    nothing to fill an "auto" train_batch_size with. ZK201 and ZK202 follow what DeepSpeed then gets: the plugin
    writes gradient_accumulation_steps 1 where it is missing, and nobody fills a missing or null batch size."""
    pytest.importorskip("transformers")
    z = {"zero_optimization": {"stage": 2}, "optimizer": {"type": "Adagrad", "params": {"lr": "auto"}}}
    mbs, gas, tbs = "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size"
    cases = [{**z, mbs: "auto", gas: None, tbs: "auto"},
             {**z, mbs: None, gas: None, tbs: 4},
             {**z, mbs: None, gas: "auto", tbs: "auto"},
             {**z, mbs: "auto", gas: "auto", tbs: None},
             {**z, mbs: 2, tbs: 4},
             {**z, gas: 2}]
    found = {t: [sorted((f.code, f.key) for f in lint(c, t, world_size=1)) for c in cases]
             for t in ("trainer", "accelerate")}
    assert found["trainer"] == [[("ZK213", gas)], [], [], [], [("ZK201", tbs)], [("ZK202", "")]]
    assert found["accelerate"] == [[("ZK213", gas)], [("ZK213", gas)], [("ZK213", tbs)], [], [("ZK201", tbs)],
                                   [("ZK202", "")]]
    [f] = lint(cases[0], "accelerate")
    assert "TypeError in Accelerator._prepare_deepspeed" in f.message and f.suggestion == "auto"
    [f] = lint(cases[1], "accelerate")
    assert "accumulate() then fails (TypeError: step % None)" in f.message
    [f] = lint(cases[4], "trainer", world_size=1)
    assert f.suggestion == "2" and "DeepSpeedPlugin writes 1 there" in f.message
    # DeepSpeed alone derives accumulation 1, micro batch 4
    assert codes(cases[1], "deepspeed", world_size=1) == {"ZK501"}  # optimizer.params.lr "auto" alone
    said = hf_runs(tmp_path, [[c, False] for c in cases])
    trainer, accelerate = said["trainer"], said["accelerate"]
    for run in (trainer[0], accelerate[0]):
        assert run.startswith("TypeError in _prepare_deepspeed: unsupported operand type(s) for *"), run
    assert trainer[1] == [4, 4, 1, False]
    assert accelerate[1].startswith("TypeError in _do_sync: unsupported operand type(s) for %"), accelerate[1]
    assert trainer[2] == [4, 2, 2, False]
    assert accelerate[2].startswith("ValueError in fill_match: `train_batch_size` not found in kwargs"), accelerate[2]
    assert trainer[3] == [4, 2, 2, False] and accelerate[3] == [2, 2, 1, False]
    for run in (trainer[4], accelerate[4]):
        assert run.startswith("AssertionError in _batch_assertion: Check batch related parameters") \
            and run.endswith("4 != 2 * 1 * 1"), run  # DeepSpeed alone derives accumulation 2: 4 == 2 * 2 * 1
    for run in (trainer[5], accelerate[5]):
        assert run.startswith("AssertionError in _set_batch_related_parameters: Either train_batch_size"), run


def test_zk203_fp16_and_bf16(ds):
    cfg = with_({"fp16": {"enabled": True}, "bf16": {"enabled": True}})
    assert codes(cfg) == {"ZK203"}
    [f] = lint(cfg)  # the suggestion "false" is for the key the message says to turn off, not bf16's
    assert (f.key, f.suggestion) == ("fp16.enabled", "false") and "set fp16.enabled to false" in f.message
    assert codes(with_({"fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}}, ZERO0), target="trainer") == set()
    with pytest.raises(AssertionError, match="cannot be simultaneously enabled"):
        ds_config(cfg)


def test_zk204_dynamic_loss_scale_window_zero(ds):
    from pydantic import ValidationError

    cfg = with_({"fp16": {"enabled": True, "loss_scale_window": 0}})
    assert codes(cfg) == {"ZK204"}
    assert codes(with_({"fp16": {"enabled": True, "loss_scale": 128, "loss_scale_window": 0}})) == {"ZK208"}  # a static scale: the window is unused
    with pytest.raises(ValidationError, match="loss_scale_window must be > 0"):
        ds_config(cfg)


def test_zk205_master_weights_need_zero(ds):
    cfg = with_({"bf16": {"enabled": True, "bf16_master_weights_and_grads": True}})
    assert codes(cfg) == {"ZK205"}
    with pytest.raises(AssertionError, match="only supported with ZeRO Stage 1, 2, or 3"):
        ds_config(cfg)


def test_zk105_a_negative_fp16_loss_scale_is_refused(ds):
    from pydantic import ValidationError

    cfg = with_({"fp16": {"enabled": True, "loss_scale": -1}})
    [f] = lint(cfg)
    assert (f.code, f.key, f.suggestion) == ("ZK105", "fp16.loss_scale", "0")
    assert "DeepSpeed refuses it at initialize" in f.message
    with pytest.raises(ValidationError, match="fp16.loss_scale must be >= 0"):
        ds_config(cfg)
    with pytest.raises(ValidationError, match="fp16.loss_scale must be >= 0"):  # whether fp16 is on or not
        ds_config(with_({"fp16": {"loss_scale": -1}}))


def test_zk105_steps_per_print_0_divides_by_zero_after_the_first_step(ds):
    cfg = with_(ADAGRAD, {"steps_per_print": 0})
    [f] = lint(cfg)
    assert (f.code, f.key) == ("ZK105", "steps_per_print") and "ZeroDivisionError" in f.message
    engine = initialize(ds, cfg)  # DeepSpeedConfig takes it
    with pytest.raises(ZeroDivisionError):
        train(engine, steps=1)
    assert lint(with_(ADAGRAD, {"steps_per_print": None})) == lint(with_(ADAGRAD, {"steps_per_print": 1})) == []
    train(initialize(ds, with_(ADAGRAD, {"steps_per_print": None})), steps=1)


def test_zk209_fp16_hysteresis_below_1_never_lowers_the_scale(fp16_on_cpu):
    """Each step's gradients overflow at the starting scale; DeepSpeed skips the step. With hysteresis 0 the scale
    stays where it was, step after step; with 1 it halves at each overflow."""
    import torch

    stuck = with_(ADAGRAD, {"zero_optimization": {"stage": 1}, "fp16": {"enabled": True, "hysteresis": 0}})
    [f] = lint(stuck)
    assert (f.code, f.key, f.suggestion) == ("ZK209", "fp16.hysteresis", "2")
    engine = initialize(fp16_on_cpu, stuck)
    train(engine, steps=4, dtype=torch.half, scale=1e4)
    assert (engine.skipped_steps, engine.optimizer.loss_scaler.cur_scale) == (4, 2**16)
    moving = copy.deepcopy(stuck)
    moving["fp16"]["hysteresis"] = 1
    assert lint(moving) == []
    engine = initialize(fp16_on_cpu, moving)
    train(engine, steps=4, dtype=torch.half, scale=1e4)
    assert (engine.skipped_steps, engine.optimizer.loss_scaler.cur_scale) == (4, 2**12)
    # unused: a static scale, fp16 off, no ZeRO (the FP16 optimizers have no hysteresis)
    for cfg in ({"fp16": {"enabled": True, "hysteresis": 0, "loss_scale": 128}, "zero_optimization": {"stage": 1}},
                {"fp16": {"enabled": False, "hysteresis": 0}, "zero_optimization": {"stage": 1}},
                {"fp16": {"enabled": True, "hysteresis": 0}}):
        assert "ZK209" not in codes(with_(ADAGRAD, cfg))
    assert "ZK209" in codes(with_(stuck, {"fp16": {"enabled": "auto", "hysteresis": -1}}), "trainer")


def test_zk210_an_initial_scale_of_2_64_or_more_overflows_at_the_first_backward(fp16_on_cpu):
    import torch

    for stage in (1, 3):
        cfg = with_(ADAGRAD, {"zero_optimization": {"stage": stage}, "fp16": {"enabled": True,
                                                                           "initial_scale_power": 64}})
        assert [(f.code, f.suggestion) for f in lint(cfg) if f.code != "ZK309"] == [("ZK210", "16")]
        engine = initialize(fp16_on_cpu, cfg)
        with pytest.raises(OverflowError, match="int too big to convert"):
            train(engine, steps=1, dtype=torch.half)
    ok = with_(ADAGRAD, {"zero_optimization": {"stage": 1}, "fp16": {"enabled": True, "initial_scale_power": 63}})
    assert lint(ok) == []
    train(initialize(fp16_on_cpu, ok), steps=1, dtype=torch.half)


def test_zk211_unmanaged_accumulation_with_deepcompile_or_early_overlap(ds):
    deepcompile = with_(ADAGRAD, {"managed_gradient_accumulation": False, "compile": {"deepcompile": True},
                                  "zero_optimization": {"stage": 1}})
    overlap = with_(ADAGRAD, {"managed_gradient_accumulation": False,
                              "zero_optimization": {"stage": 1, "overlap_comm": True}})
    [f] = lint(deepcompile)
    assert (f.code, f.key) == ("ZK211", "managed_gradient_accumulation")
    [f] = lint(overlap)
    assert (f.code, f.key, f.suggestion) == ("ZK211", "zero_optimization.overlap_comm", "false")
    with pytest.raises(AssertionError, match="not supported with DeepCompile"):
        initialize(ds, deepcompile)
    with pytest.raises(AssertionError, match="supports ZeRO overlap_comm only with ZeRO stage 2"):
        initialize(ds, overlap)
    fine = with_(ADAGRAD, {"managed_gradient_accumulation": False,
                           "zero_optimization": {"stage": 2, "overlap_comm": True}})
    assert lint(fine) == []
    assert initialize(ds, fine).managed_gradient_accumulation() is False


# ---------------------------------------------------------------- ZeRO and offload


def test_zk301_offload_param_below_stage3_is_ignored(ds):


    from deepspeed.runtime.zero.stage_1_and_2 import DeepSpeedZeroOptimizer

    cfg = with_(ADAGRAD, {"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}})
    [f] = lint(cfg)
    # the suggestion is a value for the finding's key (CONTRACT): "3", the stage's, would set device to "3"
    assert (f.code, f.key, f.suggestion) == ("ZK301", "zero_optimization.offload_param.device", "none")
    engine = initialize(ds, cfg)  # accepted without a word...
    assert type(engine.optimizer) is DeepSpeedZeroOptimizer
    params = inspect.signature(DeepSpeedZeroOptimizer).parameters  # ...by an optimizer that cannot offload params
    assert "offload_optimizer_config" in params and not any("offload_param" in p for p in params)


def test_zk302_stage3_keys_below_stage3_are_ignored(ds):


    from deepspeed.runtime.zero.stage3 import DeepSpeedZeroOptimizer_Stage3
    from deepspeed.runtime.zero.stage_1_and_2 import DeepSpeedZeroOptimizer

    cfg = with_({"zero_optimization": {"stage": 2, "stage3_max_live_parameters": 1e8}})
    assert [(f.code, f.severity) for f in lint(cfg)] == [("ZK302", "warning")]
    assert ds_config(cfg).zero_config.max_live_parameters == 1e8
    assert "max_live_parameters" in inspect.signature(DeepSpeedZeroOptimizer_Stage3).parameters
    assert "max_live_parameters" not in inspect.signature(DeepSpeedZeroOptimizer).parameters


@pytest.mark.parametrize("key, value", [("sub_group_size", 1e9), ("zero_hpz_partition_size", 8),
                                        ("zero_quantized_weights", True),
                                        ("zero_quantized_nontrainable_weights", True),
                                        ("log_trace_cache_warnings", True)])
def test_zk302_the_zero_plus_plus_and_sub_group_knobs_are_stage3_only(ds, key, value):
    """LLaVA's scripts/zero2.json sets sub_group_size 1e9 at stage 2: parsed, then handed to nothing."""
    from deepspeed.runtime.zero.stage3 import DeepSpeedZeroOptimizer_Stage3
    from deepspeed.runtime.zero.stage_1_and_2 import DeepSpeedZeroOptimizer

    cfg = with_({"zero_optimization": {"stage": 2, key: value}})
    assert [(f.code, f.key) for f in lint(cfg)] == [("ZK302", f"zero_optimization.{key}")]
    assert getattr(ds_config(cfg).zero_config, key) == value  # the config takes it...
    assert key in inspect.signature(DeepSpeedZeroOptimizer_Stage3).parameters  # ...for stage 3 alone
    assert key not in inspect.signature(DeepSpeedZeroOptimizer).parameters
    assert not codes(with_({"zero_optimization": {"stage": 3, key: value}})) & {"ZK302"}


def test_zk311_stage12_keys_at_stage3_are_ignored(ds):
    from deepspeed.runtime.zero.stage3 import DeepSpeedZeroOptimizer_Stage3
    from deepspeed.runtime.zero.stage_1_and_2 import DeepSpeedZeroOptimizer

    from zerokit.lint.rules import STAGE12_KEYS

    cfg = with_({"zero_optimization": {"stage": 3, "allgather_bucket_size": 5e8, "round_robin_gradients": True,
                                       "stage3_gather_16bit_weights_on_model_save": True}})
    assert [(f.code, f.severity, f.key) for f in lint(cfg)] == [
        ("ZK311", "warning", "zero_optimization.allgather_bucket_size"),
        ("ZK311", "warning", "zero_optimization.round_robin_gradients")]
    assert ds_config(cfg).zero_config.round_robin_gradients is True  # parsed...
    stage3 = inspect.signature(DeepSpeedZeroOptimizer_Stage3).parameters  # ...and never handed to stage 3
    stage12 = inspect.signature(DeepSpeedZeroOptimizer).parameters
    assert all(k in stage12 and k not in stage3 for k in STAGE12_KEYS)


QUANTIZED_INIT = """
import copy, json, sys
import deepspeed
import torch

deepspeed.init_distributed(dist_backend="gloo", verbose=False)
for cfg in json.loads(sys.argv[1]):
    try:
        with deepspeed.zero.Init(config_dict_or_path=copy.deepcopy(cfg)):
            model = torch.nn.Linear(16, 16)
        print("RESULT quantized:", getattr(model.weight, "weight_quantized", False), flush=True)
    except (KeyError, AssertionError) as e:
        print(f"RESULT {type(e).__name__}: {e}", flush=True)
"""


def test_zk317_quantized_initialization_is_read_by_zero_init_alone(ds):
    """zero.Init quantizes each Linear weight as the model is built, with Quantizer's four keys, whatever
    weight_quantization.enabled says. In a process of its own: the quantized init leaves torch.nn.functional.linear
    wrapped for good."""
    import subprocess
    import sys

    good = {"num_bits": 8, "group_size": 8, "group_dim": 1, "symmetric": False}

    def config(init: dict, enabled: bool = True) -> dict:
        return with_({"zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": True},
                      "weight_quantization": {"enabled": enabled, "quantized_initialization": init}})

    key = "weight_quantization.quantized_initialization"
    cases = [(config(good), [], "quantized: True"),
             (config({"num_bits": 8, "group_size": 8}), [("ZK317", "error", key)], "KeyError: 'symmetric'"),
             (config(dict(good, symmetric=True)), [("ZK317", "error", key + ".symmetric")],
              "AssertionError: Only asymmetric quantization is supported"),
             (config(dict(good, num_bits=2)), [("ZK317", "error", key + ".num_bits")],
              "AssertionError: Only INT4 and INT8 quantization is supported"),
             (config(good, enabled=False), [("ZK317", "warning", "weight_quantization.enabled")], "quantized: True")]
    for cfg, found, _ in cases:
        assert [(f.code, f.severity, f.key) for f in lint(cfg)] == found
    env = dict(os.environ, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()))
    proc = subprocess.run([sys.executable, "-c", QUANTIZED_INIT, json.dumps([c for c, _, _ in cases])],
                          capture_output=True, text=True, timeout=600, env=env, check=False)
    said = [line[7:] for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert len(said) == len(cases), proc.stderr[-3000:]
    for (_, _, raised), got in zip(cases, said):
        assert got.startswith(raised)


WEIGHT_QUANTIZATION_UNREAD = """
import copy, json, sys
import deepspeed
import torch
from deepspeed.inference.quantization.quantization import _init_group_wise_weight_quantization

deepspeed.init_distributed(dist_backend="gloo", verbose=False)
top_level, post_init, settings = json.loads(sys.argv[1])
with deepspeed.zero.Init(config_dict_or_path=copy.deepcopy(top_level)):
    model = torch.nn.Linear(16, 16)
print("RESULT zero.Init quantized:", getattr(model.weight, "weight_quantized", False), flush=True)
model = torch.nn.Sequential(torch.nn.Linear(16, 16))
engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=copy.deepcopy(post_init))
print("RESULT initialize:", type(engine.module[0]).__name__, flush=True)
for post_init_quant in ({"0": settings}, settings):
    model = _init_group_wise_weight_quantization(torch.nn.Sequential(torch.nn.Linear(16, 16)).half(),
                                                 {"weight_quantization": {"post_init_quant": post_init_quant}})
    print("RESULT post_init_quant:", type(model[0]).__name__, flush=True)
"""


def test_zk317_weight_quantization_keys_training_never_reads(ds):
    """weight_quantization.num_bits, q_type and q_groups parse (WeightQuantConfig) and nothing reads them: zero.Init
    builds unquantized weights beside them. post_init_quant is read only by _init_group_wise_weight_quantization,
    which deepspeed.initialize does not call (its Linear stays a Linear) and transformers and Accelerate never name;
    that function matches post_init_quant's keys against module names, so quantized_initialization's flat shape
    quantizes nothing and raises nothing. In a process of its own, as the quantized init wraps torch functions."""
    import subprocess
    import sys

    import accelerate
    import transformers

    settings = {"num_bits": 8, "group_size": 8, "group_dim": 1, "symmetric": False}
    top_level = with_({"zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": True},
                       "weight_quantization": {"num_bits": 4, "q_type": "asymmetric", "q_groups": 8}})
    assert [(f.code, f.severity, f.key) for f in lint(top_level)] == [
        ("ZK317", "warning", f"weight_quantization.{k}") for k in ("num_bits", "q_type", "q_groups")]
    post_init = with_(ADAGRAD, {"weight_quantization": {"post_init_quant": {"0": settings}}})
    assert lint(post_init) == []  # a script of its own may call _init_group_wise_weight_quantization
    for target in ("trainer", "accelerate"):
        [f] = lint(with_(post_init, ZERO0), target)
        assert (f.code, f.severity, f.key) == ("ZK317", "warning", "weight_quantization.post_init_quant")
    [f] = lint(with_(ADAGRAD, {"weight_quantization": {"post_init_quant": settings}}))
    assert (f.code, f.severity) == ("ZK317", "warning") and "it matches no module" in f.message
    for package in (transformers, accelerate):
        assert not any("post_init_quant" in path.read_text(errors="replace")
                       for path in Path(package.__file__).parent.rglob("*.py"))
    env = dict(os.environ, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()))
    proc = subprocess.run([sys.executable, "-c", WEIGHT_QUANTIZATION_UNREAD,
                           json.dumps([top_level, post_init, settings])],
                          capture_output=True, text=True, timeout=600, env=env, check=False)
    said = [line[7:] for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert said == ["zero.Init quantized: False", "initialize: Linear", "post_init_quant: QuantizedLinear",
                    "post_init_quant: Linear"], proc.stderr[-3000:]


def test_zk303_nvme_without_path_fails_at_initialize(ds):
    cfg = with_(ADAGRAD, {"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"},
                                                "stage3_gather_16bit_weights_on_model_save": True}})
    assert codes(cfg) == {"ZK303"}
    assert ds_config(cfg).zero_config.offload_param.nvme_path is None  # the config parses
    with pytest.raises(AssertionError, match="nvme_path.*cannot be None"):
        initialize(ds, cfg)


def test_zk304_partial_offload_below_stage3(ds):
    from pydantic import ValidationError

    cfg = with_({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.3}}})
    assert "ZK304" in codes(cfg)
    with pytest.raises(ValidationError, match="Partial offloading only supported for ZeRO Stage 3"):
        ds_config(cfg)


def test_zk305_offload_optimizer_at_stage0_is_ignored(ds):
    cfg = with_(ADAGRAD, {"zero_optimization": {"stage": 0, "offload_optimizer": {"device": "cpu"}}})
    assert codes(cfg) == {"ZK305"}
    parsed = ds_config(cfg)
    assert parsed.zero_config.offload_optimizer.device == "cpu" and parsed.zero_enabled is False


def test_zk306_odd_allgather_bucket_fails_at_initialize(ds):
    cfg = with_(ADAGRAD, {"zero_optimization": {"stage": 1, "allgather_bucket_size": 50001}})
    [f] = lint(cfg)
    assert (f.code, f.suggestion) == ("ZK306", "50002")
    ds_config(cfg)  # parses
    with pytest.raises(AssertionError, match="allgather_bucket_size must be a multiple"):
        initialize(ds, cfg)


def test_zk307_bucket_memory_follows_the_bucket_sizes(ds):
    from zerokit.lint.rules import bucket_bytes

    cfg = with_({"bf16": {"enabled": True},
                 "zero_optimization": {"stage": 2, "overlap_comm": True, "reduce_bucket_size": 5e8,
                                       "allgather_bucket_size": 5e8}})
    assert bucket_bytes(500_000_000, 500_000_000, 2) == 9_000_000_000  # the docs' "9GB footprint"
    [f] = lint(cfg, gpu_memory=24 * 10**9)
    assert (f.code, f.severity) == ("ZK307", "warning") and "9.0 GB" in f.message and "38%" in f.message
    assert (f.key, f.suggestion) == ("zero_optimization.overlap_comm", "false")  # its key's value, not a bucket's
    assert lint(cfg, gpu_memory=80 * 10**9) == []  # 11%: fine
    assert lint(cfg) == []  # no --gpu-memory, no check
    # DeepSpeed allocates what the config asks, without a check: ZeRO-3's reduce bucket has exactly that many elements
    engine = initialize(ds, with_(ADAGRAD, {"zero_optimization": {"stage": 3, "reduce_bucket_size": 12345,
                                                                  "stage3_gather_16bit_weights_on_model_save": True}}))
    assert {b.buffer.numel() for b in engine.optimizer.ipg_buckets.values()} == {12345}


def test_zk314_a_float_bucket_of_2_63_or_more_fails_at_initialize(ds):
    """1e30 used to lint clean: DeepSpeed's pydantic refuses a float that large for an int field, at any stage."""
    cfg = with_({"zero_optimization": {"stage": 2, "reduce_bucket_size": 1e30, "allgather_bucket_size": 1e30}})
    found = lint(cfg)
    assert [(f.code, f.severity, f.key, f.suggestion) for f in found] == [
        ("ZK314", "error", "zero_optimization.reduce_bucket_size", "5e8"),
        ("ZK314", "error", "zero_optimization.allgather_bucket_size", "5e8")]
    assert found[0].message.startswith("zero_optimization.reduce_bucket_size 1e+30 is no bucket size")
    assert found[0].message.endswith("write 5e8 (DeepSpeed's default)")
    trainer = lint(with_({"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 5e20,
                                                "stage3_gather_16bit_weights_on_model_save": True}}), target="trainer")
    assert [(f.code, f.key, f.suggestion) for f in trainer] == [
        ("ZK314", "zero_optimization.stage3_prefetch_bucket_size", "5e7")]
    assert trainer[0].message.endswith("write 5e7 (DeepSpeed's default), or \"auto\" (the HF Trainer fills it from the "
                                       "model's hidden_size)")
    for key in ("reduce_bucket_size", "allgather_bucket_size"):
        with pytest.raises(ValueError, match=f"{key}\n.*exceeded maximum size"):
            ds_config(with_({"zero_optimization": {"stage": 2, key: 1e30}}))
    assert ds_config(with_({"zero_optimization": {"stage": 2, "reduce_bucket_size": 9.2e18}})).zero_config \
        .reduce_bucket_size == 9_200_000_000_000_000_000  # under 2^63 pydantic takes it: the GPU check's business
    assert codes(with_({"zero_optimization": {"stage": 2, "reduce_bucket_size": 5e8, "allgather_bucket_size": 5e8}})) \
        == set()


def test_zk314_a_reduce_bucket_larger_than_the_gpu_is_allocated_up_front(ds):
    """The reduce bucket is torch.empty(reduce_bucket_size) at initialize (stage 3), so one past the GPU is an
    out-of-memory before the first step; the lint arithmetic is buffers x elements x dtype bytes."""
    big = with_({"bf16": {"enabled": True}, "zero_optimization": {"stage": 2, "overlap_comm": True,
                                                                  "reduce_bucket_size": 5e10}})
    assert lint(big) == []  # 2 x 5e10 x 2 bytes = 200 GB: under the largest GPU's 288 GB
    [f] = lint(big, gpu_memory=80 * 10**9)  # ... but not on an 80 GB one; ZK307's share warning gives way
    assert (f.code, f.severity, f.key, f.suggestion) == ("ZK314", "error", "zero_optimization.reduce_bucket_size", "5e8")
    assert f.message == ("zero_optimization.reduce_bucket_size 5e+10 makes ZeRO stage 2 allocate two gradient buckets "
                         "(overlap_comm) of 2 x 5e+10 x 2 bytes = 200 GB on every GPU up front, more than the 80 GB of "
                         "--gpu-memory: an out-of-memory at startup; write 5e8 (DeepSpeed's default)")
    one = with_({"bf16": {"enabled": True}, "zero_optimization": {"stage": 2, "reduce_bucket_size": 3e10}})
    assert lint(one, gpu_memory=80 * 10**9) == []  # one 60 GB buffer without overlap_comm's second: it fits
    huge = with_(ADAGRAD, {"zero_optimization": {"stage": 3, "reduce_bucket_size": 2**50,
                                                 "stage3_gather_16bit_weights_on_model_save": True}})
    [f] = lint(huge)
    assert "a gradient bucket of 1.13e+15 x 4 bytes = 4.5e+15 bytes" in f.message
    assert "more than any GPU has (the largest, 288 GB)" in f.message
    off = copy.deepcopy(huge)
    off["zero_optimization"]["contiguous_gradients"] = False  # no bucket buffer is allocated at all
    assert codes(off) == set()
    with pytest.raises(RuntimeError, match="allocate"):  # 4 PiB: past any allocator, the CPU accelerator's too
        initialize(ds, huge)


def test_zk308_sum_allreduce_with_zero3(ds):
    cfg = with_({"gradient_allreduce_op": "sum", "zero_optimization": {"stage": 3,
                 "stage3_gather_16bit_weights_on_model_save": True}})
    assert codes(cfg) == {"ZK308"}
    assert codes(with_({"gradient_allreduce_op": "sum", "zero_optimization": {"stage": 2}})) == set()
    with pytest.raises(ValueError, match="'sum' is not supported with ZeRO stage 3"):
        ds_config(cfg)


def test_zk315_gradient_predivide_factor_and_prescaling(ds):
    cases = [  # config, what DeepSpeed does with it
        ({"gradient_predivide_factor": 0}, ZeroDivisionError),
        ({"gradient_predivide_factor": 0, "zero_optimization": {"stage": 2, "reduce_scatter": False}},
         ZeroDivisionError),
        ({"gradient_predivide_factor": 2.0, "zero_optimization": {"stage": 2}}, AssertionError),
        ({"gradient_predivide_factor": 0, "zero_optimization": {"stage": 3}}, AssertionError),
        ({"prescale_gradients": True, "zero_optimization": {"stage": 2}}, AssertionError),
        ({"gradient_predivide_factor": 0, "zero_optimization": {"stage": 3, "reduce_scatter": False}}, "skipped"),
    ]
    for extra, effect in cases:
        cfg = with_(ADAGRAD, extra)
        assert [f.code for f in lint(cfg) if f.code != "ZK309"] == ["ZK315"], extra
        if effect is AssertionError:
            with pytest.raises(AssertionError, match="not yet supported"):
                initialize(ds, cfg)
            continue
        engine = initialize(ds, cfg)
        if effect is ZeroDivisionError:
            with pytest.raises(ZeroDivisionError):
                train(engine, steps=1)
        else:
            train(engine, steps=2)
            assert engine.skipped_steps == 2  # fp32 gradients divided by 0: inf/NaN, skipped as overflows
    for extra in ({"gradient_predivide_factor": 2.0, "zero_optimization": {"stage": 2, "reduce_scatter": False}},
                  {"gradient_predivide_factor": 0, "zero_optimization": {"stage": 1}},  # reduce_scatter: unread
                  {"gradient_predivide_factor": 0, "gradient_allreduce_op": "sum"}):
        cfg = with_(ADAGRAD, extra)
        assert lint(cfg) == []
        engine = initialize(ds, cfg)
        train(engine, steps=2)
        assert engine.skipped_steps == 0


@pytest.mark.parametrize("opt, lr", [("Adagrad", "1e-3"), ("SGD", "fast"), ("Adagrad", None), ("Adagrad", [1e-3])])
def test_zk412_a_learning_rate_that_is_no_number_fails(ds, opt, lr):
    cfg = with_({"optimizer": {"type": opt, "params": {"lr": lr}}})
    [f] = lint(cfg)
    assert (f.code, f.key, f.suggestion) == ("ZK412", "optimizer.params.lr", "0.001" if lr == "1e-3" else None)
    with pytest.raises(TypeError, match="not supported between instances"):
        initialize(ds, cfg)
    [f] = lint(with_(ZERO0, cfg), "trainer")
    assert f.suggestion == "auto" and "the HF Trainer fills it with the learning rate" in f.message
    assert lint(with_(ZERO0, {"optimizer": {"type": opt, "params": {"lr": "auto"}}}), "trainer") == []


def test_zk412_deepspeeds_fused_adam_fails_at_the_first_step(ds):
    cfg = with_({"optimizer": {"type": "AdamW", "params": {"lr": "1e-3"}}})
    assert codes(cfg) == {"ZK412"}
    engine = initialize(ds, cfg)
    with pytest.raises(TypeError, match="multi_tensor_adam"):
        train(engine, steps=1)


def test_zk309_zero3_without_16bit_gather_saves_no_weights(ds):
    cfg = with_(ADAGRAD, {"zero_optimization": {"stage": 3}})
    assert [(f.code, f.severity) for f in lint(cfg)] == [("ZK309", "warning")]
    engine = initialize(ds, cfg)
    with tempfile.TemporaryDirectory() as d:
        assert engine.save_16bit_model(d) is False
        assert os.listdir(d) == []


def test_zk310_compute_grad_norm_off_at_stage3(ds):
    from pydantic import ValidationError

    cfg = with_({"zero_optimization": {"stage": 3, "compute_grad_norm": False,
                                       "stage3_gather_16bit_weights_on_model_save": True}})
    assert codes(cfg) == {"ZK310"}
    with pytest.raises(ValidationError, match="compute_grad_norm=false is supported only"):
        ds_config(cfg)


def compiled(deepspeed, cfg: dict, client_optimizer: bool = False) -> str:
    """engine.compile() on the tiny model (eager backend): what it raised, or whether DeepCompile took over."""
    engine = initialize(deepspeed, cfg, client_optimizer)
    try:
        engine.compile(backend="eager")
    except (NotImplementedError, ValueError) as e:
        return f"{type(e).__name__}: {e}"
    return f"compiled, DeepCompile active: {engine.is_deepcompile_active()}"


def test_zk701_compile_settings_engine_compile_refuses(ds):
    """DeepSpeed starts with each of these; engine.compile() raises."""
    z1, z3 = {"zero_optimization": {"stage": 1}}, {"zero_optimization": {"stage": 3}}
    cases = [
        (with_(ADAGRAD, z1, {"compile": {"deepcompile": True, "passes": ["autotp", "autosp"]}}), "compile.passes",
         "NotImplementedError: The AutoTP compile pass cannot yet be combined with AutoSP"),
        (with_(ADAGRAD, z1, {"compile": {"deepcompile": True, "autoep_non_moe": True}}), "compile.autoep_non_moe",
         "ValueError: compile.autoep_non_moe=True uses vanilla torch.compile and cannot be combined with DeepCompile"),
        (with_(ADAGRAD, z3, {"compile": {"autoep_non_moe": True}}), "compile.autoep_non_moe",
         "ValueError: compile.autoep_non_moe=True does not support ZeRO Stage 3"),
        (with_(ADAGRAD, z3, {"compile": {"deepcompile": True, "offload_activation": True, "offload_parameters": True}}),
         "compile.offload_activation", "ValueError: compile.offload_activation cannot be combined with offload_param"),
    ]
    for cfg, key, raised in cases:
        assert [(f.code, f.key) for f in lint(cfg) if f.code != "ZK309"] == [("ZK701", key)]
        assert compiled(ds, cfg).startswith(raised)
    # a client optimizer: DeepSpeed's own would build its CPU Adagrad first (JIT)
    offload = with_({"zero_force_ds_cpu_optimizer": False, "compile": {"deepcompile": True, "offload_opt_states": True},
                     "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}})
    assert [(f.code, f.key) for f in lint(offload) if f.code not in ("ZK309", "ZK403")] == \
        [("ZK701", "compile.offload_opt_states")]
    assert "compile.offload_opt_states cannot be combined with ZeRO's" in compiled(ds, offload, client_optimizer=True)


def test_zk702_compile_settings_engine_compile_passes_over(ds):
    """engine.compile() compiles these with plain torch.compile, DeepCompile never active."""
    cases = [
        (with_(ADAGRAD, {"compile": {"passes": ["autosp"]}}), "compile.passes"),
        (with_(ADAGRAD, {"compile": {"free_activation": True}}), "compile.free_activation"),
        (with_(ADAGRAD, {"compile": {"deepcompile": True}}), "compile.deepcompile"),  # ZeRO stage 0
        (with_(ADAGRAD, {"zero_optimization": {"stage": 2}}, {"compile": {"deepcompile": True, "passes": ["autosp"]}}),
         "compile.passes"),
        (with_(ADAGRAD, {"zero_optimization": {"stage": 1}}, {"compile": {"deepcompile": True, "passes": ["autotp"]}}),
         "compile.passes"),  # no tensor_parallel.autotp_size
    ]
    for cfg, key in cases:
        [f] = lint(cfg)
        assert (f.code, f.severity, f.key) == ("ZK702", "warning", key)
        assert compiled(ds, cfg) == "compiled, DeepCompile active: False"
    assert lint(with_(ADAGRAD, {"compile": {"deepcompile": False, "passes": [], "double_buffer": True}})) == []


HYBRID_ENGINE_RANKS = """
import json, sys
import deepspeed
from deepspeed import comm as dist
from transformers import LlamaConfig, LlamaForCausalLM

deepspeed.init_distributed(dist_backend="gloo", verbose=False)
said = []
for hybrid in json.loads(sys.argv[1]):
    cfg = {"train_batch_size": 2 * dist.get_world_size(), "train_micro_batch_size_per_gpu": 2,
           "optimizer": {"type": "SGD", "params": {"lr": 0.1}}, "hybrid_engine": hybrid}
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2))
    try:
        deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
        said.append("initialized")
    except (ZeroDivisionError, AttributeError, ValueError, AssertionError) as e:
        said.append(f"{type(e).__name__}: {e}")
print("RESULT " + json.dumps(said), flush=True)
dist.barrier()
dist.destroy_process_group()
"""


def test_zk801_hybrid_engine_inference_tp_size(ds, tmp_path):
    """deepspeed.initialize builds DeepSpeedHybridEngine when hybrid_engine.enabled; for a model DeepSpeed has an
    inference policy for (a tiny Llama here) it makes an inference container per layer with inference_tp_size as
    its degree, and without an mpu groups the ranks in blocks of it. Three real gloo ranks: 0 is a
    ZeroDivisionError (module_inject/containers/base.py create_ds_model_config, heads % mp_size), 2 leaves rank 2 in
    no group and 4 every rank (AttributeError: runtime/hybrid_engine.py new_inference_container reads self.mp_group,
    which create_inference_module sets only on ranks inside a block). A fitting degree gets past the grouping to the
    inference kernels, which DeepSpeed's CPU accelerator lacks (ValueError): the engine itself needs CUDA. A
    negative degree passes the config and groups no ranks, as 1 does (at -2 rank 2 gets as far as ranks 0 and 1,
    where 2 left it in no group), yet reaches the containers as their degree: -3 fails the heads % degree assertion
    (create_ds_model_config) on every rank, -2 divides the 2 heads and goes on to the kernels, -1 heads per rank.
    enable_cuda_graph beside ZeRO-3, release_inference_cache or inference_tp_size above 1 is not reported: the
    engine logs a warning that it runs without CUDA graphs (hybrid_engine.py, validate_cuda_graph_support)."""
    pytest.importorskip("transformers")
    cases = [{"enabled": True, "inference_tp_size": 0}, {"enabled": True, "inference_tp_size": 2},
             {"enabled": True, "inference_tp_size": 4}, {"enabled": False, "inference_tp_size": 0},
             {"enabled": True, "inference_tp_size": -2}, {"enabled": True, "inference_tp_size": -3}]
    key = "hybrid_engine.inference_tp_size"
    assert [[(f.code, f.key, f.suggestion) for f in lint(with_({"hybrid_engine": c}), world_size=3)] for c in cases] \
        == [[("ZK801", key, "1")], [("ZK801", key, None)], [("ZK801", key, None)], [], [("ZK801", key, "1")],
            [("ZK801", key, "1")]]
    assert "inference_tp_size -3 is negative" in lint(with_({"hybrid_engine": cases[5]}))[0].message
    assert ds_config(with_({"hybrid_engine": cases[4]})).hybrid_engine.inference_tp_size == -2  # no bound
    assert "the 1 of 3 ranks left over get no group" in lint(with_({"hybrid_engine": cases[1]}), world_size=3)[0].message
    assert lint(with_({"hybrid_engine": cases[1]}), world_size=4) == []
    assert lint(with_({"hybrid_engine": cases[1]})) == []  # no --world-size: nothing to divide
    assert lint(with_({"hybrid_engine": dict(cases[1], enable_cuda_graph=True,
                                             release_inference_cache=True)}), world_size=2) == []
    said = gloo_ranks(tmp_path, HYBRID_ENGINE_RANKS, 3, cases)
    no_group = "AttributeError: 'DeepSpeedHybridEngine' object has no attribute 'mp_group'"
    no_kernel = "ValueError: This op had not been implemented on CPU backend."
    heads = "AssertionError: To run the model parallel across the GPUs, the attention_heads require to be divisible"
    assert said[0][:4] == said[1][:4] == ["ZeroDivisionError: integer modulo by zero", no_kernel, no_group,
                                          "initialized"]
    assert said[2][:4] == ["ZeroDivisionError: integer modulo by zero", no_group, no_group, "initialized"]
    assert all(s[4] == no_kernel and s[5].startswith(heads) for s in said)  # -2, -3: no groups, yet the degree


# ---------------------------------------------------------------- optimizer and scheduler


def test_zk401_unknown_optimizer(ds):
    import torch
    from deepspeed.runtime.config import DEEPSPEED_OPTIMIZERS

    from zerokit.lint import rules

    cfg = with_({"optimizer": {"type": "AdamWW", "params": {"lr": 1e-3}}})
    [f] = lint(cfg)
    assert (f.code, f.suggestion) == ("ZK401", "AdamW")
    with pytest.raises(AssertionError, match="AdamWW is not a supported DeepSpeed Optimizer"):
        initialize(ds, cfg)
    assert codes(with_({"optimizer": {"type": "sgd", "params": {"lr": 1e-3}}})) == {"ZK401"}  # torch names: exact
    assert set(rules.DEEPSPEED_OPTIMIZERS) == set(DEEPSPEED_OPTIMIZERS)
    real = {n for n in dir(torch.optim) if isinstance(getattr(torch.optim, n), type)
            and issubclass(getattr(torch.optim, n), torch.optim.Optimizer) and n != "Optimizer"}
    assert set(rules.TORCH_OPTIMIZERS) == real


def test_zk402_untested_optimizer_with_zero(ds):
    cfg = with_({"optimizer": {"type": "SGD", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 1}})
    assert codes(cfg) == {"ZK402"}
    with pytest.raises(AssertionError, match="untested ZeRO Optimizer"):
        initialize(ds, cfg)
    allowed = dict(cfg, zero_allow_untested_optimizer=True)
    assert codes(allowed) == set()
    assert type(initialize(ds, allowed).basic_optimizer).__name__ == "SGD"


def test_zk403_offload_with_a_client_torch_optimizer(ds):
    from deepspeed.runtime.zero.utils import ZeRORuntimeException

    cfg = with_({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}})
    assert [(f.code, f.severity) for f in lint(cfg)] == [("ZK403", "warning")]
    assert codes(cfg, target="trainer") == set()  # Accelerate maps a torch optimizer to DeepSpeedCPUAdam
    with pytest.raises(ZeRORuntimeException, match="zero_force_ds_cpu_optimizer"):
        initialize(ds, cfg, client_optimizer=True)


CLIENT_OPTIMIZER_PREPARE = """
import json, sys, torch
from accelerate import Accelerator
from accelerate.utils import DeepSpeedPlugin

acc = Accelerator(deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=json.loads(sys.argv[1])))
model = torch.nn.Linear(8, 8)
try:
    _, optimizer = acc.prepare(model, torch.optim.AdamW(model.parameters()))
    print("prepared " + type(optimizer.optimizer.optimizer).__name__)  # AcceleratedOptimizer > ZeRO > basic
except Exception as e:
    print(type(e).__name__)
"""


def test_zk403_the_deprecated_cpu_offload_gets_no_deepspeed_optimizer_behind_hf(ds):
    """With no optimizer section the Trainer prepares its own torch AdamW (transformers deepspeed_optim_sched), as an
    Accelerate script prepares its own optimizer. Accelerator._prepare_deepspeed swaps it for DeepSpeedCPUAdam when
    offload_optimizer.device is set, not for the deprecated cpu_offload, which DeepSpeed offloads by all the same:
    then DeepSpeed raises. (A real Trainer run shows the same: DeepSpeedCPUAdam with offload_optimizer, the
    exception with cpu_offload.)"""
    pytest.importorskip("accelerate")
    import subprocess
    import sys

    offload = with_({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}})
    legacy = with_({"zero_optimization": {"stage": 2, "cpu_offload": True}})
    for target in ("trainer", "accelerate"):
        assert codes(offload, target) == set()
        [f] = [f for f in lint(legacy, target) if f.code == "ZK403"]
        assert f.suggestion == "zero_optimization.offload_optimizer"
        assert f.severity == ("error" if target == "trainer" else "warning")
        assert "ZeRORuntimeException" in f.message and '"offload_optimizer": {"device": "cpu"}' in f.message
    assert '"type": "AdamW" with "auto" params, which the Trainer fills' in lint(legacy, "trainer")[-1].message
    assert "DummyOptim" in lint(legacy, "accelerate")[-1].message
    assert codes(dict(legacy, zero_force_ds_cpu_optimizer=False), "trainer") == {"ZK102"}
    said = []
    for cfg in (offload, legacy):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = dict(os.environ, ACCELERATE_USE_DEEPSPEED="true", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
        proc = subprocess.run([sys.executable, "-c", CLIENT_OPTIMIZER_PREPARE, json.dumps(cfg)], capture_output=True,
                              text=True, timeout=600, env=env, check=False)
        said.append(proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-300:])
    assert said == ["prepared DeepSpeedCPUAdam", "ZeRORuntimeException"]  # the swap builds cpu_adam once (JIT)


def test_zk404_max_grad_norm_in_optimizer_params(ds):
    cfg = with_({"optimizer": {"type": "Adagrad", "params": {"lr": 1e-3, "max_grad_norm": 1.0}}})
    [f] = lint(cfg)
    assert (f.code, f.suggestion) == ("ZK404", "gradient_clipping")
    with pytest.raises(ValueError, match="'max_grad_norm' is not supported"):
        initialize(ds, cfg)


def test_zk405_unknown_scheduler(ds):
    import torch
    from deepspeed.runtime.lr_schedules import VALID_LR_SCHEDULES

    from zerokit.lint import rules

    cfg = with_(ADAGRAD, {"scheduler": {"type": "WarmupLinear", "params": {}}})
    [f] = lint(cfg)
    assert (f.code, f.suggestion) == ("ZK405", "WarmupLR")
    with pytest.raises(AssertionError, match="does not recognize LR scheduler WarmupLinear"):
        initialize(ds, cfg)
    assert set(rules.DEEPSPEED_SCHEDULERS) == set(VALID_LR_SCHEDULES)
    sched = torch.optim.lr_scheduler
    real = {n for n in dir(sched) if isinstance(getattr(sched, n), type) and n[0] != "_"
            and (issubclass(getattr(sched, n), sched.LRScheduler) or n == "ReduceLROnPlateau")
            and n != "LRScheduler"}
    assert set(rules.TORCH_SCHEDULERS) == real


def test_zk406_scheduler_params(ds):
    from deepspeed.runtime import lr_schedules

    from zerokit.lint import rules

    # HF fills warmup_min_lr / warmup_max_lr, which WarmupCosineLR does not take
    cfg = with_(ADAGRAD, {"scheduler": {"type": "WarmupCosineLR",
                                        "params": {"warmup_min_lr": 0, "warmup_num_steps": 10, "total_num_steps": 100}}})
    [f] = lint(cfg)
    assert (f.code, f.key, f.suggestion) == ("ZK406", "scheduler.params.warmup_min_lr", "warmup_min_ratio")
    with pytest.raises(TypeError, match="unexpected keyword argument 'warmup_min_lr'"):
        initialize(ds, cfg)
    missing = with_(ADAGRAD, {"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 10}}})
    [f] = lint(missing)
    assert (f.code, f.suggestion) == ("ZK406", "scheduler.params.total_num_steps")
    with pytest.raises(TypeError, match="total_num_steps"):
        initialize(ds, missing)
    for name, params in rules.DEEPSPEED_SCHEDULER_PARAMS.items():
        sig = inspect.signature(getattr(lr_schedules, name)).parameters
        assert tuple(p for p in sig if p != "optimizer") == params
        required = tuple(p for p, v in sig.items() if v.default is inspect.Parameter.empty and p != "optimizer")
        assert required == rules.DEEPSPEED_SCHEDULER_REQUIRED.get(name, ())


# ---------------------------------------------------------------- "auto"


def test_zk501_auto_for_deepspeed_crashes_or_is_dropped(ds):
    cfg = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1}
    [f] = lint(cfg)
    assert (f.code, f.key) == ("ZK501", "train_batch_size")
    with pytest.raises(TypeError):
        ds_config(cfg)
    dropped = with_({"zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}})
    assert codes(dropped) == {"ZK501"}
    assert "drops it" in lint(dropped)[0].message
    assert ds_config(dropped).zero_config.reduce_bucket_size == 500_000_000  # silently DeepSpeed's default


def test_zk503_auto_the_accelerate_plugin_fills_from_its_own_defaults(ds):
    """The Trainer fills the batch and the buckets from TrainingArguments and the model; the ZeRO stage, offload
    devices and 16-bit gather flag Accelerate's DeepSpeedPlugin fills (TrainingArguments builds one), from its own
    defaults: stage 2, no offload, no gathering. A plan's ZeRO-3 with offload would silently become ZeRO-2."""
    pytest.importorskip("transformers")
    from transformers import TrainingArguments

    cfg = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
           "train_batch_size": "auto", "zero_optimization": {"stage": "auto", "reduce_bucket_size": "auto",
                                                            "offload_optimizer": {"device": "auto"},
                                                            "stage3_gather_16bit_weights_on_model_save": "auto"}}
    for target in ("trainer", "accelerate"):
        found = lint(cfg, target=target)
        assert {(f.code, f.severity) for f in found} == {("ZK503", "warning")}
        assert [f.key for f in found] == ["zero_optimization.stage", "zero_optimization.offload_optimizer.device",
                                          "zero_optimization.stage3_gather_16bit_weights_on_model_save"]
        assert "fills it with 2" in found[0].message and "fills it with false" in found[2].message
    with tempfile.TemporaryDirectory() as d:
        env = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("ACCELERATE_DEEPSPEED_")}
        try:
            args = TrainingArguments(output_dir=d, use_cpu=True, per_device_train_batch_size=2, report_to=[],
                                     deepspeed=copy.deepcopy(cfg))
        finally:
            os.environ.update(env)
    filled = args.hf_deepspeed_config.config
    assert filled["train_micro_batch_size_per_gpu"] == 2
    assert filled["zero_optimization"]["stage"] == 2
    assert filled["zero_optimization"]["offload_optimizer"]["device"] == "none"
    assert filled["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is False
    assert codes(with_(ZERO0, {"zero_optimization": {"stage": 3}}), target="trainer") == {"ZK309"}


def test_zk501_stage3_short_alias_is_not_filled(ds):
    cfg = with_({"zero_optimization": {"stage": 3, "prefetch_bucket_size": "auto",
                                       "stage3_gather_16bit_weights_on_model_save": True}})
    [f] = lint(cfg, target="trainer")
    assert f.code == "ZK501" and "stage3_prefetch_bucket_size" in f.message
    ok = with_({"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": "auto",
                                      "stage3_gather_16bit_weights_on_model_save": True}})
    assert codes(ok, target="trainer") == set()


ACCELERATE_PREPARE = """
import json, os, sys, torch
from accelerate import Accelerator
from accelerate.utils import DeepSpeedPlugin, DummyOptim
acc = Accelerator(deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=json.loads(sys.argv[1])))
model = torch.nn.Linear(8, 8)
try:
    acc.prepare(model, DummyOptim(model.parameters()), torch.utils.data.DataLoader(torch.randn(8, 8), batch_size=2))
    print("prepared")
except ValueError as e:
    print(e)
torch.distributed.destroy_process_group()
""" + LEAVE_WITHOUT_DESTRUCTORS


def accelerate_prepare(cfg: dict) -> str:
    """What Accelerator.prepare (the HF Trainer's path too) says of `cfg`, in a fresh one-rank process."""
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, ACCELERATE_USE_DEEPSPEED="true", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    proc = subprocess.run([sys.executable, "-c", ACCELERATE_PREPARE, json.dumps(cfg)], capture_output=True, text=True,
                          timeout=600, env=env, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


AUTOTP_SAVE = """
import json, os, sys, torch, transformers
from accelerate import Accelerator
from accelerate.utils import DeepSpeedPlugin, DummyOptim
acc = Accelerator(deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=json.loads(sys.argv[-2])))
model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(sys.argv[-1]))
model, opt = acc.prepare(model, DummyOptim(model.parameters(), lr=1e-3))
torch.manual_seed(0)  # the same batch on both ranks of the tensor-parallel group
batch = torch.randint(0, 256, (2, 16)).to(acc.device)
acc.backward(model(input_ids=batch, labels=batch).loss)
opt.step()
try:
    state = acc.get_state_dict(model)
    result = "saved" if state else "saved elsewhere"  # the consolidated weights land on global rank 0
except ValueError as e:
    result = "ValueError: " + str(e)[:60]
if torch.distributed.get_rank() == 0:
    print("RESULT", result)
torch.distributed.barrier()
torch.distributed.destroy_process_group()
""" + LEAVE_WITHOUT_DESTRUCTORS


@pytest.mark.slow
def test_zk309_autotp_behind_accelerate_needs_the_gather_flag(ds, tmp_path):
    """AutoTP shards the weights at any ZeRO stage: Accelerate's get_state_dict (the Trainer's save_model) refuses
    without the gather flag. A real two-rank AutoTP training with Accelerate, without and with it."""
    pytest.importorskip("accelerate")
    import shutil
    import subprocess

    cfg = with_({"zero_optimization": {"stage": 1}, "tensor_parallel": {"autotp_size": 2},
                 "optimizer": {"type": "Adagrad", "params": {"lr": "auto"}}})
    cfg["train_micro_batch_size_per_gpu"] = 2
    for target in ("accelerate", "trainer"):
        [f] = lint(cfg, target=target)
        assert (f.code, f.key) == ("ZK309", "tensor_parallel.autotp_size") and "get_state_dict" in f.message
    plain = with_(cfg, {"optimizer": ADAGRAD["optimizer"]})
    assert codes(plain) == set()  # DeepSpeed's own save_16bit_model does not read the flag below stage 3
    fixed = copy.deepcopy(cfg)
    fixed["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] = True
    assert codes(fixed, target="accelerate") == set()
    script = tmp_path / "autotp.py"
    script.write_text(AUTOTP_SAVE)
    model = os.path.join(os.path.dirname(__file__), "..", "examples", "models", "tiny-llama")
    said = []
    for config in (cfg, fixed):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            proc = subprocess.run([shutil.which("deepspeed") or "deepspeed", "--num_gpus", "2", "--master_port",
                                   str(port), str(script), json.dumps(config), model], capture_output=True, text=True,
                                  timeout=600, env=dict(os.environ, ACCELERATE_USE_DEEPSPEED="true"), cwd=tmp_path,
                                  check=False)
        finally:  # DeepSpeed's CPU allreduce buffers, which it never unlinks (zerokit launch removes its own)
            remove_shm_buffers(port)
        assert proc.returncode == 0, proc.stderr[-3000:]
        said.append(next(line[7:] for line in proc.stdout.splitlines() if line.startswith("RESULT ")))
    assert said[0].startswith("ValueError: Cannot get 16bit model weights")
    assert said[1] == "saved"


def test_auto_where_deepspeed_itself_takes_auto_is_fine_for_deepspeed_only(ds):
    cfg = with_({"data_types": {"keep_in_fp32_modules": "auto"}})
    assert lint(cfg) == []
    assert ds_config(cfg).keep_in_fp32_modules == "auto"
    # behind Accelerate (and the Trainer, which prepares through it) the same "auto" stops at prepare
    pytest.importorskip("accelerate")
    acc = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
           "zero_optimization": {"stage": 1}, "optimizer": {"type": "Adagrad", "params": {"lr": 1e-3}},
           "data_types": {"keep_in_fp32_modules": "auto"}}
    for target in ("accelerate", "trainer"):
        [f] = lint(acc, target=target)
        assert (f.code, f.key) == ("ZK501", "data_types.keep_in_fp32_modules") and "delete the key" in f.message
    assert "`data_types.keep_in_fp32_modules` not found in kwargs" in accelerate_prepare(acc)
    del acc["data_types"]  # the fix the finding gives
    assert lint(acc, target="accelerate") == []
    assert accelerate_prepare(acc) == "prepared"


def test_zk502_accelerate_needs_a_zero_section(ds):
    pytest.importorskip("accelerate")
    from accelerate.utils import DeepSpeedPlugin

    cfg = {"train_micro_batch_size_per_gpu": "auto"}
    assert codes(cfg, target="accelerate") == {"ZK502"}
    with pytest.raises(ValueError, match="Please specify the ZeRO optimization config"):
        DeepSpeedPlugin(hf_ds_config=copy.deepcopy(cfg))


def test_zk312_nvme_optimizer_offload_below_stage3_stays_in_cpu_memory(ds, tmp_path):
    cfg = with_({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": str(tmp_path)}},
                 "zero_force_ds_cpu_optimizer": False})
    [f] = lint(cfg)
    assert (f.code, f.key, f.suggestion) == ("ZK312", "zero_optimization.offload_optimizer.device", "cpu")
    engine = initialize(ds, cfg, client_optimizer=True)  # accepted without a word...
    assert engine.optimizer.cpu_offload is True  # ...and offloaded to CPU memory: stage 1/2 have no NVMe swapper
    assert not engine.zero_cpu_offload() and os.listdir(tmp_path) == []
    assert codes(with_(cfg, {"zero_optimization": {"stage": 3, "offload_optimizer": {
        "device": "nvme", "nvme_path": str(tmp_path)}}})) & {"ZK312"} == set()


def test_zk313_compute_grad_norm_off_with_clipping_or_offload(ds):
    clipped = with_(ADAGRAD, {"gradient_clipping": 1.0, "zero_optimization": {"stage": 2, "compute_grad_norm": False}})
    [f] = lint(clipped)
    assert (f.code, f.suggestion) == ("ZK313", "gradient_clipping")
    with pytest.raises(ValueError, match="compute_grad_norm=false requires gradient_clipping=0"):
        initialize(ds, clipped)
    default = with_(ADAGRAD, {"zero_optimization": {"stage": 2, "compute_grad_norm": False}})
    from deepspeed.runtime import constants

    from zerokit.lint import rules

    assert rules.GRADIENT_CLIPPING_DEFAULT == constants.GRADIENT_CLIPPING_DEFAULT
    [f] = lint(default)  # DeepSpeed clips at 1.0 unless told otherwise
    assert f.code == "ZK313" and "default gradient_clipping 1.0" in f.message
    with pytest.raises(ValueError, match="compute_grad_norm=false requires gradient_clipping=0"):
        initialize(ds, default)
    offloaded = with_({"gradient_clipping": 0, "zero_optimization": {"stage": 1, "compute_grad_norm": False,
                                             "offload_optimizer": {"device": "cpu"}},
                       "zero_force_ds_cpu_optimizer": False})
    assert codes(offloaded) == {"ZK313"}
    with pytest.raises(ValueError, match="does not support optimizer offload"):
        initialize(ds, offloaded, client_optimizer=True)
    assert codes(with_(ADAGRAD, {"gradient_clipping": 0.0, "zero_optimization": {"stage": 2,
                                                                                 "compute_grad_norm": False}})) == set()


@pytest.mark.parametrize("steps", [0, -5, 10.0, "10"])
def test_zk407_warmup_steps_must_be_a_positive_int(ds, steps):
    cfg = with_(ADAGRAD, {"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": steps}}})
    [f] = lint(cfg)
    assert (f.code, f.key) == ("ZK407", "scheduler.params.warmup_num_steps")
    assert f.suggestion == ("10" if steps in (10.0,) else "1")
    with pytest.raises(ValueError, match="warmup_num_steps must be a positive integer"):
        initialize(ds, cfg)
    assert codes(with_(ADAGRAD, {"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10}}})) == set()
    assert codes(with_(ADAGRAD, ZERO0, {"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": "auto"}}}),
                 target="trainer") == set()


@pytest.mark.parametrize(("sched", "key", "bad", "error"), [
    ("LRRangeTest", "lr_range_test_step_size", 2000.0, "lr_range_test_step_size must be a positive integer"),
    ("LRRangeTest", "lr_range_test_step_size", 0, "lr_range_test_step_size must be a positive integer"),
    ("OneCycle", "cycle_first_step_size", 0, "cycle_first_step_size must be positive"),
    ("OneCycle", "cycle_second_step_size", -10, "cycle_second_step_size must be non-negative"),
])
def test_zk411_scheduler_step_sizes_deepspeed_refuses(ds, sched, key, bad, error):
    base = {"LRRangeTest": {"lr_range_test_min_lr": 1e-4},
            "OneCycle": {"cycle_min_lr": 1e-4, "cycle_max_lr": 1e-3, "cycle_momentum": False}}[sched]
    cfg = with_(ADAGRAD, {"scheduler": {"type": sched, "params": {**base, key: bad}}})
    [f] = lint(cfg)
    assert (f.code, f.key) == ("ZK411", f"scheduler.params.{key}")
    with pytest.raises(ValueError, match=error):
        initialize(ds, cfg)
    fixed = with_(ADAGRAD, {"scheduler": {"type": sched, "params": {**base, key: int(f.suggestion)}}})
    assert codes(fixed) == set()
    initialize(ds, fixed)
    # "auto" is ZK501's to judge (nothing fills these): one finding, not two
    auto = with_(ADAGRAD, {"scheduler": {"type": sched, "params": {**base, key: "auto"}}})
    assert codes(auto) == {"ZK501"}


def test_zk408_unknown_warmup_type_warms_up_logarithmically(ds):
    cfg = with_(ADAGRAD, {"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 100, "warmup_max_lr": 1.0,
                                                                        "warmup_type": "linaer"}}})
    [f] = lint(cfg)
    assert (f.code, f.severity, f.suggestion) == ("ZK408", "warning", "linear")
    sched = initialize(ds, cfg).lr_scheduler
    sched.step(1)
    # log warmup: log(2) / log(100) = 0.15 of the peak at step 1, where linear gives 0.01
    assert sched.warmup_type == "log" and sched.get_lr()[0] == pytest.approx(math.log(2) / math.log(100))


def test_zk409_warmup_longer_than_the_run(ds):
    cfg = with_(ADAGRAD, {"scheduler": {"type": "WarmupDecayLR", "params": {
        "warmup_num_steps": 100, "total_num_steps": 10, "warmup_max_lr": 1.0, "warmup_type": "linear"}}})
    [f] = lint(cfg)
    assert (f.code, f.severity, f.suggestion) == ("ZK409", "warning", "10")
    sched = initialize(ds, cfg).lr_scheduler  # accepted, with a log line at most
    sched.step(10)  # the last step of the run: still warming up, a tenth of the peak
    assert sched.get_lr()[0] == pytest.approx(0.1)
    assert codes(with_(ADAGRAD, {"scheduler": {"type": "WarmupDecayLR", "params": {
        "warmup_num_steps": 10, "total_num_steps": 100}}})) == set()


def test_a_stage_written_as_a_string_still_gets_its_stages_rules(ds):
    """pydantic turns "3" into 3, so the ZeRO-3 rules apply (ZK103 warns of the type)."""
    cfg = with_(ADAGRAD, {"zero_optimization": {"stage": "3"}})
    assert codes(cfg) == {"ZK103", "ZK309"}
    assert ds_config(cfg).zero_config.stage == 3


# ---------------------------------------------------------------- found by linting 34 real-world configs


def test_zk201_batch_no_multiple_of_the_micro_batch(ds):
    cfg = {"train_batch_size": 10, "train_micro_batch_size_per_gpu": 4}
    [f] = lint(cfg)
    assert f.code == "ZK201" and "not a multiple of micro batch 4" in f.message
    with pytest.raises(AssertionError, match="Check batch related parameters"):
        ds_config(cfg)
    assert codes({"train_batch_size": 12, "train_micro_batch_size_per_gpu": 4}) == set()


def test_zk206_grad_accum_dtype_other_than_the_models_needs_zero(ds):
    cfg = with_(ADAGRAD, {"bf16": {"enabled": True}, "data_types": {"grad_accum_dtype": "fp32"}})
    [f] = lint(cfg)
    assert (f.code, f.key) == ("ZK206", "data_types.grad_accum_dtype")
    with pytest.raises(NotImplementedError, match="unsupported mix"):
        initialize(ds, cfg)
    assert codes(with_(cfg, {"zero_optimization": {"stage": 1}})) == set()  # ZeRO accumulates in fp32 itself
    assert codes(with_(ADAGRAD, {"bf16": {"enabled": True}, "data_types": {"grad_accum_dtype": "bf16"}})) == set()


def test_zk207_param_dtype_other_than_the_precision_mode(ds):
    cfg = with_(ADAGRAD, {"bf16": {"enabled": True}, "data_types": {"param_dtype": "fp16"}})
    [f] = lint(cfg)
    assert (f.code, f.key) == ("ZK207", "data_types.param_dtype")
    assert "set fp16.enabled to true" in f.message
    with pytest.raises(AssertionError, match="conflicts with the enabled precision mode"):
        initialize(ds, cfg)
    fp32 = with_(ADAGRAD, {"data_types": {"param_dtype": "bf16"}})
    assert codes(fp32) == {"ZK207"}
    with pytest.raises(AssertionError, match="conflicts with the enabled precision mode"):
        initialize(ds, fp32)
    [f] = lint(with_(ADAGRAD, {"bf16": {"enabled": True}, "data_types": {"param_dtype": "float32"}}))
    assert "set bf16.enabled to false" in f.message
    # every DtypeEnum spelling of the mode's own dtype trains: no ZK207, and no ZK104 from the schema either
    for spelling in ("bf16", "bfloat16", "torch.bfloat16"):
        same = with_(ADAGRAD, {"bf16": {"enabled": True}, "data_types": {"param_dtype": spelling}})
        assert codes(same) == set(), spelling
        initialize(ds, same)


def test_data_types_take_every_dtype_enum_spelling_and_only_those(ds):
    """The engine resolves data_types with runtime.config.DtypeEnum: its aliases are valid, other case is not."""
    from deepspeed.runtime.config import DtypeEnum

    for spelling in ("bfloat16", "torch.bfloat16", "float32", "float", "half", "torch.float16"):
        DtypeEnum(spelling)
        for key in ("grad_accum_dtype", "buffer_dtype"):
            assert "ZK104" not in codes(with_({"data_types": {key: spelling}})), (key, spelling)
    with pytest.raises(ValueError):
        DtypeEnum("BF16")
    assert "ZK104" in codes(with_({"data_types": {"grad_accum_dtype": "BF16"}}))
    assert "ZK206" not in codes(with_({"data_types": {"grad_accum_dtype": "BF16"}}))  # one finding: the spelling


def test_zk308_sum_allreduce_with_deepcompile(ds):
    cfg = with_({"gradient_allreduce_op": "sum", "compile": {"deepcompile": True}, "zero_optimization": {"stage": 1}})
    assert codes(cfg) == {"ZK308"}
    with pytest.raises(ValueError, match="DeepCompile"):
        ds_config(cfg)
    assert codes(with_({"gradient_allreduce_op": "sum"})) == set()


def test_zk410_adam_with_weight_decay_runs_adamw(ds):
    import torch

    cfg = with_({"optimizer": {"type": "Adam", "params": {"lr": 1e-3, "weight_decay": 0.1}}})
    [f] = lint(cfg)
    assert (f.code, f.severity, f.suggestion) == ("ZK410", "warning", "AdamW")
    def adamw(optimizer) -> bool:  # FusedAdam keeps the mode as an int; torch's AdamW is its own class
        return bool(getattr(optimizer, "adam_w_mode", isinstance(optimizer, torch.optim.AdamW)))

    assert adamw(initialize(ds, cfg).basic_optimizer)  # decoupled decay, not Adam's L2
    explicit = with_({"optimizer": {"type": "Adam", "params": {"lr": 1e-3, "weight_decay": 0.1, "adam_w_mode": False}}})
    assert codes(explicit) == set() and not adamw(initialize(ds, explicit).basic_optimizer)
    assert codes(with_({"optimizer": {"type": "Adam", "params": {"lr": 1e-3}}})) == set()


def test_zk502_the_trainer_needs_a_zero_section_too():
    """TrainingArguments(deepspeed=...) builds Accelerate's DeepSpeedPlugin, which refuses a config without a
    zero_optimization section and cannot read a bare `true` (it calls .get on it)."""
    transformers = pytest.importorskip("transformers")
    for cfg, error in (({"train_micro_batch_size_per_gpu": "auto"}, "Please specify the ZeRO optimization config"),
                       ({"train_micro_batch_size_per_gpu": "auto", "zero_optimization": True}, "no attribute 'get'")):
        assert "ZK502" in codes(cfg, target="trainer")
        with pytest.raises((ValueError, AttributeError), match=error):
            transformers.TrainingArguments(output_dir="/tmp/zerokit-zk502", deepspeed=cfg, use_cpu=True)
    assert codes({"train_micro_batch_size_per_gpu": 1}) == set()  # deepspeed.initialize itself does not need it


def test_zk302_keeps_quiet_on_autotps_gather_flag_and_zk309_on_a_written_false():
    """Accelerate's get_state_dict gathers 16-bit weights with AutoTP at any stage (zero3 or autotp_size > 1), so
    the flag is not a stage-3 key there; a gather flag written false at ZeRO-3 is a choice, not an omission."""
    autotp = {"zero_optimization": {"stage": 2, "gather_16bit_weights_on_model_save": True},
              "tensor_parallel": {"autotp_size": 4}}
    assert codes(with_(autotp)) == set()
    assert codes(with_({"zero_optimization": {"stage": 2, "gather_16bit_weights_on_model_save": True}})) == {"ZK302"}
    assert codes(with_({"zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": False}})) \
        == set()
    assert codes(with_({"zero_optimization": {"stage": 3}})) == {"ZK309"}


# ---------------------------------------------------------------- what real-world configs showed (42 public ones)

def test_a_comment_key_passes_where_deepspeed_ignores_it_and_is_an_error_where_it_refuses_it(ds):
    """LLaMA-Factory's ds_z2_autotp_config.json has a top-level "_comment": DeepSpeed ignores it, as meant. In a
    pydantic section the same key stops initialize, and no did-you-mean is offered (it named 'comet' before)."""
    top = with_(ZERO0, {"_comment": "ZeRO-2 with AutoTP"})
    assert lint(top) == [] and ds_config(top).zero_optimization_stage == 0
    inside = with_({"zero_optimization": {"stage": 2, "_comment": "x"}})
    [f] = lint(inside)
    assert (f.code, f.key, f.suggestion) == ("ZK100", "zero_optimization._comment", None)
    assert "comment key is safe only outside" in f.message
    with pytest.raises(Exception, match="Extra inputs are not permitted"):
        ds_config(inside)


def test_a_did_you_mean_never_changes_the_values_type():
    """A dict renamed to an integer key (sequence_parallel -> sequence_parallel_size), or a string to a section
    (_comment -> comet), breaks the config the suggestion was meant to fix."""
    [f] = lint(with_(ZERO0, {"sequence_parallel": {"size": 2}}))
    assert f.code == "ZK100" and f.suggestion is None and "correct its name or delete it" in f.message
    [f] = lint(with_(ZERO0, {"sequence_parallel_siz": 2}))  # an integer where an integer goes: still suggested
    assert f.suggestion == "sequence_parallel_size"


@pytest.mark.parametrize("extra, key, fix, words", [
    ({"aio": {"thread_count": 2}}, "aio.thread_count", "aio.intra_op_parallelism", "renamed it intra_op_parallelism"),
    ({"monitor_config": {"tensorboard": {"enabled": True}}}, "monitor_config", None, "at the top level: move them"),
    ({"compile": {"disable": False}}, "compile.disable", None, "engine.compile(backend=...)"),
    ({"bf16": {"enabled": True, "loss_scale": 0}}, "bf16.loss_scale", None, "bf16 needs no loss scaling"),
    ({"bf16": {"enabled": True, "auto_cast": False}}, "bf16.auto_cast", None, "bf16 section has none: delete it"),
    ({"fp8": {"enabled": True}}, "fp8", None, "DeepSpeed has no fp8 section, so the training runs in bf16 or fp16"),
])
def test_moved_and_renamed_keys_say_what_to_do(extra, key, fix, words):
    [f] = lint(with_(ZERO0, extra))
    assert (f.code, f.key, f.suggestion) == ("ZK100", key, fix) and words in f.message


def test_the_current_name_of_a_deprecated_section_is_offered_for_an_unfilled_auto():
    [f] = [f for f in lint(with_(ZERO0, {"bfloat16": {"enabled": "auto"}}), "trainer") if f.code == "ZK501"]
    assert "use the current name 'bf16.enabled', which the HF Trainer fills" in f.message


def test_the_deprecated_gather_flag_points_at_the_name_hf_and_accelerate_read():
    cfg = with_({"zero_optimization": {"stage": 3, "stage3_gather_fp16_weights_on_model_save": True}})
    [f] = [f for f in lint(cfg) if f.code == "ZK102"]
    assert f.suggestion == "stage3_gather_16bit_weights_on_model_save"


def test_a_bound_finding_says_deepspeed_refuses_it_and_offers_the_default(ds):
    cfg = with_({"zero_optimization": {"stage": 2, "reduce_bucket_size": 0}})
    [f] = [f for f in lint(cfg) if f.code == "ZK105"]
    assert f.suggestion == "500000000" and "DeepSpeed refuses it at initialize" in f.message
    with pytest.raises(Exception, match="greater than 0"):
        ds_config(cfg)


def test_zk309_under_the_deepspeed_target_names_save_16bit_model_not_hf():
    cfg = with_({"zero_optimization": {"stage": 3}})
    [f] = lint(cfg)
    assert f.code == "ZK309" and "engine.save_16bit_model()" in f.message and "HF" not in f.message
    [f] = lint(with_(cfg), "trainer")
    assert f.code == "ZK309" and "the HF Trainer's save_model" in f.message


def test_zk208_dynamic_scaling_keys_beside_a_static_loss_scale_are_ignored(ds):
    cfg = with_({"fp16": {"enabled": True, "loss_scale": 1024, "loss_scale_window": 1000, "hysteresis": 2,
                          "min_loss_scale": 1}})
    [f] = lint(cfg)
    assert (f.code, f.severity, f.key, f.suggestion) == ("ZK208", "warning", "fp16.loss_scale_window", None)
    assert "fp16.loss_scale_window, fp16.hysteresis, fp16.min_loss_scale" in f.message
    fp16 = ds_config(cfg).float16_config
    assert fp16.loss_scale == 1024  # the engine scales dynamically only at 0 (engine.dynamic_loss_scale)
    assert not codes(with_({"fp16": {"enabled": True, "loss_scale": 0, "loss_scale_window": 1000}}))
    assert not codes(with_({"fp16": {"enabled": True, "loss_scale": 1024}}))


# ---------------------------------------------------------------- DeepSpeed 0.19 read against the schema (session 41)

def test_zk413_adam_params_are_fusedadams_or_cpuadams_keywords(ds):
    """engine._configure_basic_optimizer hands optimizer.params (less adam_w_mode, torch_adam,
    fp32_optimizer_states) to FusedAdam, or to DeepSpeedCPUAdam with optimizer offload, as keywords."""
    from deepspeed.ops.adam import DeepSpeedCPUAdam, FusedAdam

    from zerokit.lint import rules

    fused = set(inspect.signature(FusedAdam.__init__).parameters) - {"self", "params", "adam_w_mode"}
    cpu = set(inspect.signature(DeepSpeedCPUAdam.__init__).parameters) - {"self", "model_params", "adamw_mode",
                                                                            "fp32_optimizer_states"}
    assert fused == set(rules.FUSED_ADAM_PARAMS) and cpu == set(rules.CPU_ADAM_PARAMS)
    source = inspect.getsource(ds.runtime.engine.DeepSpeedEngine)
    for key in rules.ADAM_OWN_PARAMS:
        assert f"optimizer_parameters.pop({key.upper() + '_PARAM' if key == 'torch_adam' else key.upper()}" in source \
            or f"optimizer_parameters.pop('{key}'" in source, key
    cfg = with_({"zero_optimization": {"stage": 2},
                 "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "beta1": 0.9, "betas": [0.9, 0.95]}}})
    [f] = lint(cfg)
    assert (f.code, f.key, f.suggestion) == ("ZK413", "optimizer.params.beta1", "betas")
    import torch

    with pytest.raises(TypeError, match="unexpected keyword argument 'beta1'"):
        FusedAdam([torch.nn.Parameter(torch.zeros(2))], lr=1e-4, beta1=0.9)  # Python refuses it before any kernel
    offload = with_({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
                     "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "set_grad_none": True}}})
    assert [(f.code, f.key) for f in lint(offload)] == [("ZK413", "optimizer.params.set_grad_none")]
    assert "set_grad_none" not in inspect.signature(DeepSpeedCPUAdam.__init__).parameters
    # what DeepSpeed reads itself, "auto" under the Trainer, and torch's Adam (torch_adam) pass
    fine = with_({"zero_optimization": {"stage": 2}, "optimizer": {"type": "Adam", "params": {
        "lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto", "adam_w_mode": False,
        "bias_correction": True}}})
    assert not codes(fine, "trainer") & {"ZK413"}
    assert not codes(with_({"optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "torch_adam": True,
                                                                       "foreach": True}}})) & {"ZK413"}


def test_zk413_lion_params_are_fusedlions_or_cpulions_keywords(ds):
    """Lion's params reach FusedLion, or DeepSpeedCPULion with optimizer offload, as written: neither takes Adam's
    eps (a TypeError at initialize, where ZK413 checked Adam alone), and each lacks one keyword of the other."""
    from deepspeed.ops.lion import DeepSpeedCPULion, FusedLion

    from zerokit.lint import rules

    assert set(inspect.signature(FusedLion.__init__).parameters) - {"self", "params"} == set(rules.FUSED_LION_PARAMS)
    assert set(inspect.signature(DeepSpeedCPULion.__init__).parameters) - {"self", "model_params"} == set(
        rules.CPU_LION_PARAMS)
    offload = {"stage": 2, "offload_optimizer": {"device": "cpu"}}
    for zero, extra, cls in (({"stage": 0}, "eps", "FusedLion"), (offload, "eps", "DeepSpeedCPULion"),
                             ({"stage": 0}, "fp32_optimizer_states", "FusedLion"),
                             (offload, "set_grad_none", "DeepSpeedCPULion")):
        cfg = with_({"zero_optimization": zero, "optimizer": {"type": "Lion", "params": {"lr": 1e-4, extra: True}}})
        assert [(f.code, f.key) for f in lint(cfg) if f.code != "ZK403"] == [("ZK413", f"optimizer.params.{extra}")]
        with pytest.raises(TypeError, match=f"{cls}.__init__\\(\\) got an unexpected keyword argument '{extra}'"):
            initialize(ds, cfg)  # Python refuses the keyword before FusedLion looks for its kernel
    fine = with_({"zero_optimization": offload, "optimizer": {"type": "Lion", "params": {
        "lr": 1e-4, "betas": [0.9, 0.99], "weight_decay": 0.01, "fp32_optimizer_states": True}}})
    assert lint(fine) == []
    assert type(initialize(ds, fine).basic_optimizer).__name__ == "DeepSpeedCPULion"


def test_zk406_a_scheduler_without_params_fails_at_initialize(ds):
    cfg = with_(ADAGRAD, {"scheduler": {"type": "WarmupLR"}})
    [f] = lint(cfg)
    assert (f.code, f.key, f.suggestion) == ("ZK406", "scheduler", "scheduler.params")
    with pytest.raises(TypeError, match="must be a mapping"):
        initialize(ds, cfg)
    ok = with_(ADAGRAD, {"scheduler": {"type": "WarmupLR", "params": {}}})
    assert not lint(ok)
    initialize(ds, ok)


def test_zk316_legacy_stage1_is_refused_at_initialize(ds):
    cfg = with_(ADAGRAD, {"zero_optimization": {"stage": 1, "legacy_stage1": True}})
    [f] = lint(cfg)
    assert (f.code, f.key, f.severity) == ("ZK316", "zero_optimization.legacy_stage1", "error")
    with pytest.raises(Exception, match="deprecated version of ZeRO Stage 1"):
        initialize(ds, cfg)


def test_zk302_quantized_gradients_and_super_offload_are_read_at_stage3_only(ds):
    """engine._configure_zero_optimizer: the all-to-all group zero_quantized_gradients builds goes to the stage-3
    optimizer alone, and super_offload picks SuperOffloadOptimizer_Stage3 in the stage-3 branch alone."""
    source = inspect.getsource(ds.runtime.engine.DeepSpeedEngine._configure_zero_optimizer)
    stage3 = source[source.index("zero_stage == ZeroStageEnum.weights"):]
    assert "all2all_process_group=self.local_all_to_all_group" in stage3
    assert "all2all_process_group" not in source[:source.index("zero_stage == ZeroStageEnum.weights")]
    assert "self.super_offload(" in stage3 and "super_offload" not in source[:source.index(
        "zero_stage == ZeroStageEnum.weights")]
    cfg = with_({"zero_optimization": {"stage": 2, "zero_quantized_gradients": True,
                                       "offload_optimizer": {"device": "cpu", "super_offload": True}},
                 "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}})
    assert {(f.code, f.key) for f in lint(cfg)} == {
        ("ZK302", "zero_optimization.zero_quantized_gradients"),
        ("ZK302", "zero_optimization.offload_optimizer.super_offload")}
    zero = ds_config(cfg).zero_config
    assert zero.zero_quantized_gradients and zero.offload_optimizer.super_offload  # parsed, then unused
    cfg["zero_optimization"]["stage"] = 3
    assert not codes(cfg) & {"ZK302"}


def test_values_deepspeed_refuses_when_it_reads_the_config(ds):
    """log_level is a logging word (utils/logging.get_log_level_from_string), keep_in_fp32_modules a list or
    "auto", and tensor_parallel.dtype a torch.dtype no JSON value is."""
    from deepspeed.utils.logging import get_log_level_from_string

    [f] = lint(with_({"log_level": "warn"}))
    assert (f.code, f.key) == ("ZK104", "log_level")
    with pytest.raises(ValueError, match="not one of the valid logging levels"):
        get_log_level_from_string("warn")
    assert not lint(with_({"log_level": "WARNING"}))
    get_log_level_from_string("WARNING")

    keep = with_({"data_types": {"keep_in_fp32_modules": "lm_head"}})
    [f] = lint(keep)
    assert (f.code, f.key) == ("ZK103", "data_types.keep_in_fp32_modules")
    with pytest.raises(Exception, match="list of name patterns"):
        ds_config(keep)
    for fine in (["lm_head"], "auto"):
        cfg = with_({"data_types": {"keep_in_fp32_modules": fine}})
        assert not lint(cfg)
        ds_config(cfg)

    tp = with_({"tensor_parallel": {"autotp_size": 1, "dtype": "bf16"}})
    [f] = lint(tp)
    assert (f.code, f.key, f.severity) == ("ZK103", "tensor_parallel.dtype", "error")
    with pytest.raises(Exception, match="dtype"):
        ds_config(tp)


@pytest.mark.parametrize(("key", "value", "code"), [
    ("score_apply", "before", "ZK104"), ("combine_impl", "sum", "ZK104"), ("row_weighting_impl", "triton", "ZK104"),
    ("gate_up_impl", "packed", "ZK104"), ("comm_backend", "nccl", "ZK104"), ("score_func", "relu", "ZK104"),
    ("preset_model", "llama", "ZK104"), ("expert_activation", "gelu", "ZK104"), ("comm_num_sm", 0, "ZK105"),
    ("comm_qp_margin", -1, "ZK105"), ("comm_max_tokens_per_rank", -1, "ZK105"), ("num_expert_groups", 0, "ZK105"),
    ("num_limited_groups", 0, "ZK105"),
])
def test_autoep_values_validate_autoep_config_refuses_at_engine_start(ds, key, value, code):
    """DeepSpeedConfig stores the expert_parallel section unchecked (parse_autoep_config); validate_autoep_config
    refuses these values when DeepSpeedEngine._configure_expert_parallel starts AutoEP. The enums come from
    AutoEPConfig's Literal annotations, PRESET_MODELS and EXPERT_ACTIVATIONS, the bounds from AUTOEP_BOUNDS."""
    from deepspeed.module_inject.auto_ep_config import parse_autoep_config, validate_autoep_config

    ep = {"enabled": True, key: value}
    [f] = lint(with_({"expert_parallel": ep}))
    assert (f.code, f.key, f.severity) == (code, f"expert_parallel.{key}", "error")
    assert ds_config(with_({"expert_parallel": ep})).expert_parallel_config.enabled is True  # not checked here
    with pytest.raises(ValueError, match=key):
        validate_autoep_config(parse_autoep_config(ep), 1, 1, 1, 1)
    good = {"enabled": True, "score_apply": "post", "combine_impl": "legacy_bmm", "row_weighting_impl": "eager",
            "gate_up_impl": "fused", "score_func": "sigmoid", "preset_model": "mixtral", "expert_activation": "swiglu",
            "comm_num_sm": 1, "comm_qp_margin": 0, "num_expert_groups": 2, "num_limited_groups": 1}
    assert lint(with_({"expert_parallel": good})) == []
    validate_autoep_config(parse_autoep_config(good), 1, 1, 1, 1)


def test_autoep_values_of_a_disabled_section_are_warnings_deepspeed_trains_with(ds):
    """DeepSpeedEngine._configure_expert_parallel returns before validate_autoep_config unless expert_parallel is
    enabled, and parse_autoep_config checks nothing: a disabled section's bad values were lint errors (exit 1) for a
    config that trains. They are warnings that say so, and errors again once it is enabled."""
    bad = {"score_apply": "before", "comm_num_sm": 0, "nested_typo": 1}
    for enabled in (False, None):  # written false, or left out (DeepSpeed's default: false)
        ep = {**bad, **({} if enabled is None else {"enabled": enabled})}
        cfg = with_(ADAGRAD, {"expert_parallel": ep})
        found = {f.code: f for f in lint(cfg)}
        assert {c: f.severity for c, f in found.items()} == {"ZK104": "warning", "ZK105": "warning", "ZK100": "error"}
        assert found["ZK104"].message.endswith("(expert_parallel is not enabled, so DeepSpeed reads none of it yet; "
                                               "this fails once it is)")
        train(initialize(ds, cfg), steps=1)  # the typo too: parse_autoep_config reads its own keys alone
    assert {f.severity for f in lint(with_({"expert_parallel": {**bad, "enabled": True}}))} == {"error"}


def test_values_deepspeed_takes_that_the_schema_once_refused(ds):
    """AutoEP's top_k and routed_scaling_factor are numbers or "auto" (AutoEPConfig: int | str, float | str), and
    "aio": null keeps the defaults (swap_tensor/aio_config.get_aio_config)."""
    from deepspeed.module_inject.auto_ep_config import parse_autoep_config

    ep = {"enabled": True, "top_k": 2, "routed_scaling_factor": 2.5}
    cfg = with_({"zero_optimization": {"stage": 2}, "expert_parallel": ep})
    assert not lint(cfg)
    ds_config(cfg)
    parsed = parse_autoep_config(ep)
    assert (parsed.top_k, parsed.routed_scaling_factor) == (2, 2.5)
    [f] = lint(with_({"expert_parallel": {"enabled": True, "top_k": "two"}}))
    assert (f.code, f.key) == ("ZK103", "expert_parallel.top_k")
    assert not lint(with_({"expert_parallel": {"enabled": True, "top_k": "auto"}}))

    aio = with_({"aio": None})
    assert not lint(aio)
    assert ds_config(aio).aio_config["block_size"] == 1048576


def test_zk100_says_what_deepspeed_does_and_suggests_a_current_key(ds):
    # a misspelt key set to "auto": DeepSpeedConfigModel drops "auto" values before it validates
    typo = with_({"zero_optimization": {"stage": 2, "reduce_bucket_sise": "auto"}})
    f = next(f for f in lint(typo) if f.code == "ZK100")
    assert "silently ignores it" in f.message and f.suggestion == "zero_optimization.reduce_bucket_size"
    ds_config(typo)  # accepted
    # a name seventeen sections have: no section picked for it (weight_quantization.enabled defaults to true)
    [f] = lint(with_({"zero_optimization": {"stage": 2, "enabled": True}}))
    assert f.code == "ZK100" and f.suggestion is None and "delete it" in f.message
    # pin_memory is the offload sections' key; cpu_offload_use_pin_memory (deprecated) is read by nothing
    [f] = lint(with_({"zero_optimization": {"stage": 2, "cpu_offload_pin_memory": True}}))
    assert f.suggestion == "zero_optimization.offload_optimizer.pin_memory"
    [f] = lint(with_({"zero_optimization": {"stage": 2, "pin_memory": True}}))
    assert f.suggestion == "zero_optimization.offload_optimizer.pin_memory"
    assert "zero_optimization.offload_param.pin_memory" in f.message


def test_zk313_compute_grad_norm_off_with_bf16_zero1_fp32_accumulation_or_zenflow(ds):
    mixed = with_(ADAGRAD, {"gradient_clipping": 0, "bf16": {"enabled": True},
                            "data_types": {"grad_accum_dtype": "fp32"},
                            "zero_optimization": {"stage": 1, "compute_grad_norm": False}})
    [f] = lint(mixed)
    assert (f.code, f.key) == ("ZK313", "zero_optimization.compute_grad_norm") and "ZeRO-1 with bf16" in f.message
    with pytest.raises(ValueError, match="does not support ZeRO Stage 1 with BF16 parameters"):
        initialize(ds, mixed)
    assert not codes(with_(mixed, {"zero_optimization": {"stage": 2, "compute_grad_norm": False}}))
    # ZenFlow: DeepSpeedZeroOptimizer refuses the pair before it builds anything
    from deepspeed.runtime.zero.stage_1_and_2 import DeepSpeedZeroOptimizer

    assert "compute_grad_norm=false does not support ZenFlow" in inspect.getsource(DeepSpeedZeroOptimizer.__init__)
    zenflow = with_({"gradient_clipping": 0, "zero_optimization": {"stage": 2, "compute_grad_norm": False,
                                                                   "zenflow": {"topk_ratio": 0.1}}})
    assert [f.code for f in lint(zenflow)] == ["ZK313"]
    ds_config(zenflow)  # the config itself parses


@pytest.mark.parametrize("name", ["WarmupDecayLR", "WarmupCosineLR"])
@pytest.mark.parametrize("total", ["x", None, [100]])
def test_zk414_total_num_steps_not_a_number_fails_at_initialize(ds, name, total):
    cfg = with_(ADAGRAD, {"scheduler": {"type": name, "params": {"warmup_num_steps": 10, "total_num_steps": total}}})
    [f] = lint(cfg)
    assert (f.code, f.key) == ("ZK414", "scheduler.params.total_num_steps")
    with pytest.raises(TypeError):
        initialize(ds, cfg)


@pytest.mark.parametrize("total", [0, -5])
def test_zk414_total_num_steps_at_or_below_zero_stops_learning_after_the_warmup(ds, total):
    import torch

    cfg = with_(ADAGRAD, {"scheduler": {"type": "WarmupDecayLR", "params": {
        "warmup_num_steps": 2, "total_num_steps": total, "warmup_max_lr": 1e-3, "warmup_min_lr": 0.0}}})
    [f] = lint(cfg)
    assert (f.code, f.key, f.severity) == ("ZK414", "scheduler.params.total_num_steps", "error")
    engine = initialize(ds, cfg)  # DeepSpeed takes it, with a warning
    train(engine, steps=4)
    assert engine.get_lr() == [0.0]  # the warmup is over: the rate is the floor
    fine = with_(ADAGRAD, {"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 2,
                                                                            "total_num_steps": 100}}})
    assert not codes(fine) & {"ZK414"}
    assert torch.isfinite(torch.tensor(initialize(ds, fine).get_lr()[0]))


# ---------------------------------------------------------------- what DeepSpeed converts but refuses, or HF reads as written


DEPRECATED_PAIRS = [
    ({"stage": 2, "cpu_offload": True, "offload_optimizer": {"device": "cpu"}}, "cpu_offload"),
    ({"stage": 2, "cpu_offload": False, "offload_optimizer": {"device": "cpu"}}, "cpu_offload"),  # any value
    ({"stage": 2, "cpu_offload": None, "offload_optimizer": {"device": "none"}}, "cpu_offload"),
    ({"stage": 3, "cpu_offload_param": False, "offload_param": {"device": "cpu"}}, "cpu_offload_param"),
    ({"stage": 3, "stage3_gather_fp16_weights_on_model_save": True,
      "stage3_gather_16bit_weights_on_model_save": False}, "stage3_gather_fp16_weights_on_model_save"),
    ({"stage": 3, "stage3_gather_fp16_weights_on_model_save": False,  # pydantic's field name, not the alias
      "gather_16bit_weights_on_model_save": True}, "stage3_gather_fp16_weights_on_model_save"),
]


@pytest.mark.parametrize("zero, deprecated", DEPRECATED_PAIRS)
def test_zk102_a_deprecated_key_beside_its_replacement_fails_at_initialize(ds, zero, deprecated):
    """DeepSpeedConfigModel._process_deprecated_field asserts when a deprecated field and its new_param are both in
    the config, whatever the deprecated value."""
    cfg = with_({"zero_optimization": zero})
    for target in ("deepspeed", "trainer", "accelerate"):
        [f] = [f for f in lint(cfg, target) if f.code == "ZK102"]
        assert (f.key, f.severity) == (f"zero_optimization.{deprecated}", "error"), target
        assert f"delete '{deprecated}'" in f.message
    with pytest.raises(AssertionError, match=f"Cannot provide deprecated parameter '{deprecated}' and replacing"):
        ds_config(cfg)


@pytest.mark.parametrize("zero", [
    {"stage": 2, "cpu_offload": True},  # alone: DeepSpeed moves it to offload_optimizer
    {"stage": 2, "cpu_offload": "auto", "offload_optimizer": {"device": "cpu"}},  # "auto" is dropped first
    {"stage": 2, "cpu_offload": True, "offload_optimizer": "auto"},
    # cpu_offload_use_pin_memory names offload_param / offload_optimizer, but with set_new_param False: no assertion
    {"stage": 3, "cpu_offload_use_pin_memory": True, "offload_param": {"device": "cpu"},
     "offload_optimizer": {"device": "cpu"}},
])
def test_zk102_a_deprecated_key_deepspeed_takes_stays_a_warning(ds, zero):
    cfg = with_({"zero_optimization": zero})
    found = [f for f in lint(cfg) if f.code == "ZK102"]
    assert found and all(f.severity == "warning" for f in found)
    ds_config(cfg)


def test_zk102_an_auto_replacement_accelerate_fills_meets_the_deprecated_key(ds):
    """DeepSpeedPlugin fills an "auto" stage3_gather_16bit_weights_on_model_save (False unless `accelerate config`
    said otherwise; the Trainer builds the same plugin), so DeepSpeed sees both keys; alone, DeepSpeed drops it."""
    from accelerate.utils import DeepSpeedPlugin

    cfg = with_({"zero_optimization": {"stage": 3, "stage3_gather_fp16_weights_on_model_save": True,
                                       "stage3_gather_16bit_weights_on_model_save": "auto"}})
    for target, severity in (("deepspeed", "warning"), ("trainer", "error"), ("accelerate", "error")):
        [f] = [f for f in lint(cfg, target) if f.code == "ZK102"]
        assert f.severity == severity, target
    ds_config(cfg)
    filled = DeepSpeedPlugin(hf_ds_config=copy.deepcopy(cfg)).deepspeed_config
    assert filled["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is False
    with pytest.raises(AssertionError, match="Cannot provide deprecated parameter"):
        ds_config({k: v for k, v in filled.items() if k != "steps_per_print"})  # float("inf"): Accelerate's own


HF_TRAINER_COMPARES = """
import json, sys, types
from transformers import TrainingArguments
from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

out = []
for cfg, bf16 in json.loads(sys.argv[1]):
    hf = HfTrainerDeepSpeedConfig(cfg)
    args = TrainingArguments(output_dir=sys.argv[2], per_device_train_batch_size=1, bf16=bf16, use_cpu=True,
                             report_to=[])
    hf.trainer_config_process(args)
    try:
        hf.trainer_config_finalize(args, types.SimpleNamespace(config=types.SimpleNamespace(hidden_size=64)), 100)
        out.append(["ok", hf.is_zero3(), hf.config["zero_optimization"]])
    except ValueError as e:
        out.append(["ValueError", str(e)])
print(json.dumps(out))
"""


def hf_trainer(tmp_path, cases: list) -> list:
    """HfTrainerDeepSpeedConfig's trainer_config_process and _finalize (what TrainingArguments(deepspeed=...) and
    deepspeed_init run) on each (config, TrainingArguments.bf16), in a fresh interpreter."""
    import subprocess
    import sys

    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1",
               LOCAL_RANK="0")  # TrainingArguments starts its own one-rank group: not on the ds fixture's port
    proc = subprocess.run([sys.executable, "-c", HF_TRAINER_COMPARES, json.dumps(cases), str(tmp_path)],
                          capture_output=True, text=True, timeout=300, env=env, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_zk102_the_old_bfloat16_section_is_never_read_behind_the_trainer_or_accelerate(ds, tmp_path):
    """get_bfloat16_config reads "bf16" and falls back to "bfloat16" only without it; DeepSpeedPlugin.
    set_mixed_precision always adds a "bf16" section, so behind the HF Trainer and Accelerate the old section is dead:
    bf16 follows TrainingArguments.bf16 / the mixed precision alone, either way. Renamed, it is read as written (the
    Trainer compares it with TrainingArguments; Accelerate keeps it)."""
    pytest.importorskip("transformers")
    z = {"zero_optimization": {"stage": 2}, "optimizer": {"type": "Adagrad", "params": {"lr": "auto"}},
         "train_micro_batch_size_per_gpu": "auto"}
    on, off = {**z, "bfloat16": {"enabled": True}}, {**z, "bfloat16": {"enabled": False}}
    for target in ("trainer", "accelerate"):
        [f] = lint(on, target)
        assert (f.code, f.key, f.severity, f.suggestion) == ("ZK102", "bfloat16", "error", "bf16"), target
        assert "this section is ignored and bf16 silently follows" in f.message
    [f] = lint(with_({"bfloat16": {"enabled": True}}))
    assert (f.code, f.severity, f.suggestion) == ("ZK102", "warning", "bf16")  # DeepSpeed alone reads it
    assert ds_config(with_({"bfloat16": {"enabled": True}})).bfloat16_config.enabled is True
    both = with_({"bfloat16": {"enabled": True}, "bf16": {"enabled": False}})
    for target in ("deepspeed", "trainer", "accelerate"):
        [f] = [f for f in lint(both, target) if f.code == "ZK102"]
        assert (f.severity, f.suggestion) == ("warning", None) and "ignores this section" in f.message, target
    assert ds_config(both).bfloat16_config.enabled is False
    renamed = {**z, "bf16": {"enabled": True}}
    assert lint(renamed, "trainer") == [] and lint(renamed, "accelerate") == []
    said = hf_runs(tmp_path, [[on, False], [off, True], [renamed, False]])
    assert [run[3] for run in said["trainer"][:2]] == [False, True]  # the opposite of what the section says
    assert [run[3] for run in said["accelerate"]] == [False, True, True]
    assert said["trainer"][2].startswith("ValueError") and "- ds bf16.enabled=True vs hf bf16" in said["trainer"][2]


def test_zk103_a_string_boolean_the_trainer_compares_is_an_error(ds, tmp_path):
    """fill_match compares bf16.enabled as written with TrainingArguments.bf16: "true" != True, "false" != False."""
    pytest.importorskip("transformers")
    cfg = with_({"bf16": {"enabled": "true"}, "zero_optimization": {"stage": 2, "contiguous_gradients": "true"}})
    found = {f.key: f for f in lint(cfg, "trainer") if f.code == "ZK103"}
    assert (found["bf16.enabled"].severity, found["bf16.enabled"].suggestion) == ("error", "true")
    assert "write true without quotes" in found["bf16.enabled"].message
    assert found["zero_optimization.contiguous_gradients"].severity == "warning"  # nothing in HF compares it
    for target in ("deepspeed", "accelerate"):
        assert {f.severity for f in lint(cfg, target) if f.code == "ZK103"} == {"warning"}, target
    assert ds_config(cfg).bfloat16_config.enabled is True  # DeepSpeed converts it
    fp16_off = with_({"fp16": {"enabled": "false"}, "zero_optimization": {"stage": 2}})
    assert [(f.key, f.severity) for f in lint(fp16_off, "trainer")] == [("fp16.enabled", "error")]
    said = hf_trainer(tmp_path, [[cfg, True], [with_(cfg, {"bf16": {"enabled": "false"}}), False],
                                 [fp16_off, False], [with_(cfg, {"bf16": {"enabled": True}}), True]])
    assert said[0] == ["ValueError", said[0][1]] and "- ds bf16.enabled=true vs hf bf16|bf16_full_eval=True" in said[0][1]
    assert "- ds bf16.enabled=false vs hf bf16|bf16_full_eval=False" in said[1][1]
    assert "- ds fp16.enabled=false vs hf fp16|fp16_full_eval=False" in said[2][1]
    assert said[3][0] == "ok"


def test_zk103_accelerate_alone_never_compares_a_string_boolean(ds):
    """Accelerate fills "auto" with must_match=False (set_mixed_precision, deepspeed_config_process), so a string
    passes to DeepSpeed, which converts it: the warning stays."""
    from accelerate.utils import DeepSpeedPlugin

    for value in ("true", "false"):
        plugin = DeepSpeedPlugin(hf_ds_config=with_({"bf16": {"enabled": value}, "zero_optimization": {"stage": 2}}))
        plugin.set_mixed_precision("bf16")
        plugin.deepspeed_config_process(must_match=False, gradient_clipping=1.0)
        assert plugin.deepspeed_config["bf16"]["enabled"] == value


def test_zk103_a_string_stage_3_turns_off_hfs_zero3_handling(ds, tmp_path):
    """HfDeepSpeedConfig.is_zero3() is `stage == 3` on the value as written; DeepSpeed converts "3" to 3."""
    pytest.importorskip("transformers")
    from accelerate.utils import DeepSpeedPlugin
    from transformers.integrations.deepspeed import HfDeepSpeedConfig

    zero = {"stage": "3", "stage3_prefetch_bucket_size": "auto", "stage3_gather_16bit_weights_on_model_save": True}
    cfg = with_({"zero_optimization": zero})
    for target in ("trainer", "accelerate"):
        [f] = [f for f in lint(cfg, target) if f.code == "ZK103"]
        assert (f.key, f.severity, f.suggestion) == ("zero_optimization.stage", "error", "3"), target
        assert "write 3 without quotes" in f.message
    [f] = [f for f in lint(cfg) if f.code == "ZK103"]
    assert f.severity == "warning"
    assert ds_config(with_({"zero_optimization": {"stage": "3"}})).zero_config.stage == 3
    assert HfDeepSpeedConfig(cfg).is_zero3() is False
    assert HfDeepSpeedConfig(with_({"zero_optimization": dict(zero, stage=3)})).is_zero3() is True
    assert DeepSpeedPlugin(hf_ds_config=copy.deepcopy(cfg)).zero3_init_flag is False
    [as_string, as_int] = hf_trainer(tmp_path, [[cfg, False], [with_({"zero_optimization": dict(zero, stage=3)}), False]])
    assert as_string[:2] == ["ok", False] and as_string[2]["stage3_prefetch_bucket_size"] == "auto"  # left unfilled
    assert as_int[:2] == ["ok", True] and as_int[2]["stage3_prefetch_bucket_size"] == int(0.9 * 64 * 64)
    two = with_({"zero_optimization": {"stage": "2"}})  # is_zero2 is off too, which costs an info line at most
    assert [(f.code, f.severity) for f in lint(two, "trainer")] == [("ZK103", "warning")]


@pytest.mark.parametrize("stage", ["0", "1", "2"])
def test_zk103_a_string_stage_breaks_accelerates_no_sync(stage):
    """Accelerate copies the config's stage onto DeepSpeedPlugin.zero_stage as written, and Accelerator.no_sync
    (entered by accumulate() on each micro-batch that does not step, on several processes) compares it with 2: a
    TypeError. The HF Trainer never enters no_sync under DeepSpeed, so there it stays a warning, as for DeepSpeed."""
    from accelerate.utils import DeepSpeedPlugin

    cfg = with_({"zero_optimization": {"stage": stage}})
    [f] = [f for f in lint(cfg, "accelerate") if f.code == "ZK103"]
    assert (f.key, f.severity, f.suggestion) == ("zero_optimization.stage", "error", stage)
    assert f.message.endswith(f"write {stage} without quotes") and "TypeError in accumulate()" in f.message
    for target in ("trainer", "deepspeed"):
        assert [(g.code, g.severity) for g in lint(cfg, target) if g.code == "ZK103"] == [("ZK103", "warning")]
    plugin = DeepSpeedPlugin(hf_ds_config=copy.deepcopy(cfg))
    assert plugin.zero_stage == stage
    with pytest.raises(TypeError):
        bool(plugin.zero_stage < 2)  # accelerator.py no_sync: `self.state.deepspeed_plugin.zero_stage < 2`
    assert DeepSpeedPlugin(hf_ds_config=with_({"zero_optimization": {"stage": int(stage)}})).zero_stage < 3

"""Every model config shipped under examples/ plans, and what it emits is accepted downstream.

ds_configs (`*ds_config*.json`) and other non-model JSON under examples/ are linted elsewhere; a model config is a
JSON object with a `model_type`, as transformers writes it.
"""

from __future__ import annotations

import copy
import fnmatch
import json
import os
import socket

import pytest
from _support import LEAVE_WITHOUT_DESTRUCTORS, DataParallelMpu, one_rank_gloo_group

from zerokit.cli import main

pytest.importorskip("zerokit.models.resolve")
pytest.importorskip("zerokit.planner.engine")

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def model_configs() -> list[str]:
    found = []
    for root, _, files in os.walk(EXAMPLES):
        for name in sorted(files):
            if not name.endswith(".json") or fnmatch.fnmatch(name, "*ds_config*.json"):
                continue
            path = os.path.join(root, name)
            with open(path, encoding="utf-8") as f:
                try:
                    doc = json.load(f)
                except json.JSONDecodeError:
                    continue  # not a model config; lint tests own malformed examples
            if isinstance(doc, dict) and "model_type" in doc:
                found.append(path)
    return sorted(found)


MODEL_CONFIGS = model_configs()
IDS = [os.path.relpath(p, EXAMPLES) for p in MODEL_CONFIGS]


def test_examples_hold_at_least_one_model_config():
    assert MODEL_CONFIGS, f"no model config.json under {EXAMPLES}"


def plan_json(capsys, config_path: str, *extra: str) -> tuple[int, dict]:
    code = main(["plan", "--model", config_path, "--gpu", "a100-80gb", "--gpus-per-node", "2", "--seq-len", "256",
                 "--format", "json", *extra])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    return code, json.loads(out)


@pytest.mark.parametrize("config_path", MODEL_CONFIGS, ids=IDS)
@pytest.mark.parametrize("target", ["trainer", "accelerate", "deepspeed"])
def test_example_model_plans(capsys, config_path, target):
    code, doc = plan_json(capsys, config_path, "--target", target)
    assert code == 0 and doc["decision"]["fits"] is True
    assert doc["model"]["source"] == "config"
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    assert doc["model"]["hidden_size"] == config.get("hidden_size", config.get("n_embd"))
    assert doc["ds_config"]["zero_optimization"]["stage"] == doc["decision"]["zero_stage"]


def test_example_folder_is_accepted_like_its_config_json(capsys):
    folders = sorted({os.path.dirname(p) for p in MODEL_CONFIGS if os.path.basename(p) == "config.json"})
    assert folders
    _, by_file = plan_json(capsys, os.path.join(folders[0], "config.json"))
    _, by_folder = plan_json(capsys, folders[0])
    assert by_folder["model"]["parameters"] == by_file["model"]["parameters"]


@pytest.fixture(scope="module")
def deepspeed_dist():
    pytest.importorskip("deepspeed")
    with one_rank_gloo_group() as deepspeed:
        yield deepspeed


@pytest.mark.parametrize("config_path", MODEL_CONFIGS, ids=IDS)
@pytest.mark.parametrize("forced", [[], ["--zero-stage", "3", "--offload-optimizer", "cpu", "--offload-param", "cpu"]],
                         ids=["auto", "zero3-offload"])
def test_example_deepspeed_config_parses_at_the_plan_world_size(capsys, deepspeed_dist, config_path, forced):
    from deepspeed.runtime.config import DeepSpeedConfig

    _, doc = plan_json(capsys, config_path, "--target", "deepspeed", *forced)
    parsed = DeepSpeedConfig(copy.deepcopy(doc["ds_config"]), mpu=DataParallelMpu(doc["hardware"]["world_size"]))
    assert parsed.world_size == 2
    assert parsed.zero_optimization_stage == doc["decision"]["zero_stage"]
    assert parsed.train_micro_batch_size_per_gpu == doc["decision"]["micro_batch_size"]


@pytest.mark.parametrize("config_path", MODEL_CONFIGS, ids=IDS)
def test_example_trainer_config_fills_from_training_arguments(capsys, tmp_path, config_path):
    """The whole trainer path on the example's own model (on the meta device: the filler reads only its config and
    parameters): TrainingArguments built from the plan fill every "auto", with no mismatch."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    code = main(["plan", "--model", config_path, "--gpu", "a100-80gb", "--gpus-per-node", "1", "--seq-len", "256",
                 "--format", "json", "--zero-stage", "3"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    with open(config_path, encoding="utf-8") as f:
        values = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
    config = transformers.AutoConfig.for_model(**values)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    assert sum(p.numel() for p in model.parameters()) == doc["model"]["parameters"]

    targs = doc["training_arguments"]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), use_cpu=True, report_to=[],
        per_device_train_batch_size=targs["per_device_train_batch_size"],
        gradient_accumulation_steps=targs["gradient_accumulation_steps"],
        bf16=targs.get("bf16", False), fp16=targs.get("fp16", False),
        gradient_checkpointing=targs["gradient_checkpointing"])
    hf = HfTrainerDeepSpeedConfig(copy.deepcopy(doc["ds_config"]))
    hf.trainer_config_process(args)
    hf.trainer_config_finalize(args, model, num_training_steps=10)
    assert hf.mismatches == []
    leaves = json.dumps(hf.config)
    assert '"auto"' not in leaves
    assert hf.config["train_micro_batch_size_per_gpu"] == doc["decision"]["micro_batch_size"]


def documented_plan_commands() -> list[tuple[str, list[str]]]:
    """`zerokit plan ...` lines (with backslash continuations) in the docstrings of examples/*.py."""
    import shlex

    found = []
    for name in sorted(os.listdir(EXAMPLES)):
        if not name.endswith(".py"):
            continue
        with open(os.path.join(EXAMPLES, name), encoding="utf-8") as f:
            text = f.read().replace("\\\n", " ")
        for line in text.splitlines():
            words = shlex.split(line.strip()) if line.strip().startswith("zerokit plan ") else []
            if words:
                found.append((name, words[1:]))
    return found


PLAN_COMMANDS = documented_plan_commands()


@pytest.mark.parametrize(("source", "args"), PLAN_COMMANDS, ids=[s for s, _ in PLAN_COMMANDS])
def test_documented_plan_command_runs(capsys, tmp_path, source, args):
    """The command an example opens with works as written (run from the repository root, -o into a temp dir)."""
    root = os.path.dirname(EXAMPLES)
    if "-o" in args:
        args[args.index("-o") + 1] = str(tmp_path / args[args.index("-o") + 1])
    cwd = os.getcwd()
    os.chdir(root)
    try:
        code = main(args)
    finally:
        os.chdir(cwd)
    assert code == 0, capsys.readouterr().err
    assert any(tmp_path.iterdir())


ACCELERATE_SCRIPT = '''
import json, os, sys, torch, transformers
from accelerate import Accelerator
from accelerate.utils import DeepSpeedPlugin, DummyOptim, DummyScheduler

cfg_path, model_dir, hint = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
config = transformers.AutoConfig.from_pretrained(model_dir)
model = transformers.AutoModelForCausalLM.from_config(config)
acc = Accelerator(deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=cfg_path), mixed_precision=hint["mixed_precision"],
                  gradient_accumulation_steps=hint["gradient_accumulation_steps"])
data = torch.utils.data.DataLoader(torch.randint(0, config.vocab_size, (8, 64)),
                                   batch_size=hint["dataloader_batch_size"])
opt = DummyOptim(model.parameters(), lr=hint["lr"], weight_decay=hint["weight_decay"])
sched = DummyScheduler(opt, warmup_num_steps=hint["warmup_num_steps"])
model, opt, data, sched = acc.prepare(model, opt, data, sched)
rates = []
for i, batch in enumerate(data):
    with acc.accumulate(model):
        loss = model(input_ids=batch, labels=batch).loss
        rates.append(model.get_lr()[0])  # the rate this step trains at (acc.backward runs the engine's step)
        acc.backward(loss)
        opt.step(); sched.step(); opt.zero_grad()
    if i == 1:
        break
cfg = acc.deepspeed_config
print(json.dumps({"type": str(acc.distributed_type), "config": cfg, "loss": loss.item(), "rates": rates}))
torch.distributed.destroy_process_group()
''' + LEAVE_WITHOUT_DESTRUCTORS


@pytest.mark.slow
def test_accelerate_target_trains_with_the_hinted_accelerate_objects(capsys, tmp_path):
    """--target accelerate, for real: Accelerate fills every "auto" from the objects the plan names, keeps the
    plan's stage and CPU offload (its own defaults would be stage 2 without offload), and two steps train, both at
    --lr (no warm-up asked: the all-"auto" scheduler trained both at 0)."""
    pytest.importorskip("accelerate")
    pytest.importorskip("deepspeed")
    import subprocess
    import sys

    capsys.readouterr()  # importing deepspeed logs to stdout

    model_dir = os.path.join(EXAMPLES, "models", "tiny-llama")
    out = tmp_path / "ds_config.json"
    code = main(["plan", "--model", model_dir, "--gpu-memory", "16GB", "--seq-len", "64", "--micro-batch", "2",
                 "--precision", "bf16", "--zero-stage", "1", "--offload-optimizer", "cpu", "--lr", "3e-4",
                 "--target", "accelerate", "--format", "json", "-o", str(out)])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    script = tmp_path / "run.py"
    script.write_text(ACCELERATE_SCRIPT)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, ACCELERATE_USE_DEEPSPEED="true", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    proc = subprocess.run([sys.executable, str(script), str(out), model_dir, json.dumps(doc["training_arguments"])],
                          capture_output=True, text=True, timeout=900, env=env, cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["type"] == "DistributedType.DEEPSPEED"
    config = result["config"]
    assert '"auto"' not in json.dumps(config)
    assert config["zero_optimization"]["stage"] == 1
    assert config["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert config["train_micro_batch_size_per_gpu"] == 2 and config["bf16"]["enabled"] is True
    assert config["optimizer"]["params"]["lr"] == 3e-4
    assert result["loss"] > 0
    assert result["rates"] == [3e-4, 3e-4]

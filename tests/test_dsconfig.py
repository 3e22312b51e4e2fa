"""The emitted ds_config is accepted by whoever consumes it: DeepSpeed's own parser at the plan's world size,
transformers' HfTrainerDeepSpeedConfig filling every "auto", and no "auto" at all for --target deepspeed.

Plans here are built by hand from a Decision, because build_ds_config is a pure function of the decision; the
planner's own scenarios are covered at the end when zerokit.planner.engine is importable.
"""

from __future__ import annotations

import copy
import dataclasses
import os

import pytest
from _support import ROOT, DataParallelMpu, one_rank_gloo_group

from zerokit.dsconfig import (
    ADAM_BETAS,
    AUTO,
    build_ds_config,
    training_arguments,
    training_arguments_hint,
    walk,
)
from zerokit.models.spec import ModelSpec
from zerokit.planner.types import Decision, GpuMemory, Hardware, Plan, Training

HIDDEN = 64
LARGEST_LAYER = 256 * HIDDEN  # the tiny model's embedding: vocab 256 x hidden 64


def make_plan(stage: int = 2, offload_optimizer: str = "none", offload_param: str = "none", precision: str = "bf16",
              target: str = "deepspeed", micro_batch: int = 2, accumulation: int = 4, gpus_per_node: int = 8,
              nodes: int = 1, nvme_path: str | None = None, source: str = "config", hidden: int = HIDDEN,
              reduce_bucket: int | None = None, prefetch_bucket: int | None = None,
              persistence: int | None = None, **training: object) -> Plan:
    model = ModelSpec(name="tiny-llama", parameters=100_000, largest_layer_parameters=LARGEST_LAYER,
                      hidden_size=hidden, num_layers=2, vocab_size=256, source=source,
                      config={"model_type": "llama"})
    hardware = Hardware(gpu_name="h100-80gb", gpu_memory_bytes=80 * 10**9, bf16=precision != "fp16",
                        gpus_per_node=gpus_per_node, nodes=nodes, nvme_path=nvme_path)
    decision = Decision(
        zero_stage=stage, offload_optimizer=offload_optimizer, offload_param=offload_param,
        micro_batch_size=micro_batch, gradient_accumulation_steps=accumulation, gradient_checkpointing=True,
        precision=precision, overlap_comm=True,
        reduce_bucket_size=hidden * hidden if reduce_bucket is None else reduce_bucket,
        allgather_bucket_size=500_000_000,
        prefetch_bucket_size=int(0.9 * hidden * hidden) if prefetch_bucket is None else prefetch_bucket,
        param_persistence_threshold=10 * hidden if persistence is None else persistence,
        max_live_parameters=1_000_000_000, fits=True,
    )
    plan = Plan(model=model, hardware=hardware, training=Training(seq_len=512, target=target, **training),
                decision=decision, memory=GpuMemory(1, 1, 1, 1, 1, 1, 1), cpu_bytes_per_node=0,
                nvme_bytes_per_node=0, candidates=(), reasons=())
    return plan


# Every stage with every offload DeepSpeed supports there: CPU optimizer offload from stage 1 (ZeRO-Offload),
# parameter offload and NVMe only at stage 3 (ZeRO-Infinity).
SETUPS = [
    (0, "none", "none"), (1, "none", "none"), (1, "cpu", "none"), (2, "none", "none"), (2, "cpu", "none"),
    (3, "none", "none"), (3, "cpu", "none"), (3, "cpu", "cpu"), (3, "nvme", "none"), (3, "nvme", "nvme"),
    (3, "cpu", "nvme"),
]
SETUP_IDS = [f"z{s}-opt_{o}-param_{p}" for s, o, p in SETUPS]


def autos(config: dict) -> list[str]:
    return [key for key, value in walk(config) if value == AUTO]


# ---------------------------------------------------------------- pure structure

@pytest.mark.parametrize("precision", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize(("stage", "opt", "param"), SETUPS, ids=SETUP_IDS)
def test_deepspeed_target_leaves_no_auto(stage, opt, param, precision):
    config = build_ds_config(make_plan(stage, opt, param, precision, nvme_path="/nvme"))
    assert autos(config) == []


def test_trainer_target_autos_are_exactly_what_the_trainer_fills():
    config = build_ds_config(make_plan(3, "cpu", "none", target="trainer"))
    assert sorted(autos(config)) == sorted([
        "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping",
        "fp16.enabled", "bf16.enabled",
        "zero_optimization.reduce_bucket_size", "zero_optimization.stage3_prefetch_bucket_size",
        "zero_optimization.stage3_param_persistence_threshold",
        "optimizer.params.lr", "optimizer.params.betas", "optimizer.params.eps", "optimizer.params.weight_decay",
    ])
    assert "scheduler" not in config  # the Trainer's own scheduler runs (test_the_trainer_target_leaves_...)
    assert config["zero_optimization"]["stage"] == 3
    assert config["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": True}


def test_hidden_size_keys_stay_explicit_when_the_planner_chose_otherwise():
    config = build_ds_config(make_plan(3, target="trainer", reduce_bucket=200_000_000, prefetch_bucket=50_000_000,
                                       persistence=100_000))
    zero = config["zero_optimization"]
    assert zero["reduce_bucket_size"] == 200_000_000
    assert zero["stage3_prefetch_bucket_size"] == 50_000_000
    assert zero["stage3_param_persistence_threshold"] == 100_000


def test_hidden_size_keys_stay_explicit_for_a_bare_parameter_count():
    # The real model's hidden size is unknown for `--model 7B`, so the trainer's h^2 could differ from ours.
    zero = build_ds_config(make_plan(3, target="trainer", source="count"))["zero_optimization"]
    assert zero["reduce_bucket_size"] == HIDDEN * HIDDEN
    assert zero["stage3_prefetch_bucket_size"] == int(0.9 * HIDDEN * HIDDEN)
    assert zero["stage3_param_persistence_threshold"] == 10 * HIDDEN


def test_accelerate_keeps_the_plans_stage_and_offload_explicit():
    config = build_ds_config(make_plan(3, "nvme", "nvme", target="accelerate", nvme_path="/local_nvme"))
    zero = config["zero_optimization"]
    assert zero["stage"] == 3
    assert zero["offload_optimizer"]["device"] == "nvme" and zero["offload_optimizer"]["nvme_path"] == "/local_nvme"
    assert zero["offload_param"]["device"] == "nvme" and zero["offload_param"]["nvme_path"] == "/local_nvme"
    assert zero["stage3_gather_16bit_weights_on_model_save"] is True
    assert config["train_micro_batch_size_per_gpu"] == AUTO and config["gradient_accumulation_steps"] == AUTO
    # Accelerate does not fill betas/eps: they must be numbers.
    assert config["optimizer"]["params"]["betas"] == ADAM_BETAS
    assert config["optimizer"]["params"]["lr"] == AUTO
    assert config["scheduler"]["type"] == "WarmupLR"


def test_zero3_gathers_16bit_weights_and_lower_stages_have_no_stage3_keys():
    assert build_ds_config(make_plan(3))["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True
    for stage in (0, 1, 2):
        zero = build_ds_config(make_plan(stage))["zero_optimization"]
        assert [k for k in zero if k.startswith("stage3")] == []
        assert "offload_param" not in zero


def test_fp16_uses_dynamic_loss_scaling_and_bf16_is_plain():
    fp16 = build_ds_config(make_plan(2, precision="fp16"))
    assert fp16["fp16"] == {"enabled": True, "loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 16,
                            "hysteresis": 2, "min_loss_scale": 1}
    assert "bf16" not in fp16
    bf16 = build_ds_config(make_plan(2, precision="bf16"))
    assert bf16["bf16"] == {"enabled": True} and "fp16" not in bf16


def test_nvme_offload_writes_paths_buffers_and_aio():
    config = build_ds_config(make_plan(3, "nvme", "nvme", nvme_path="/mnt/nvme0"))
    param = config["zero_optimization"]["offload_param"]
    assert param["nvme_path"] == "/mnt/nvme0" and param["buffer_count"] == 5
    assert param["buffer_size"] == 100_000_000  # DeepSpeed's default already holds the tiny model's largest layer
    assert config["aio"]["block_size"] == 1048576
    assert "aio" not in build_ds_config(make_plan(3, "cpu", "cpu"))


def test_nvme_param_buffer_holds_the_largest_layers_partition():
    # A 1.2e9-parameter embedding on 8 GPUs: each rank swaps 150M elements, more than the 1e8 default buffer.
    plan = make_plan(3, "nvme", "nvme", nvme_path="/nvme", gpus_per_node=8)
    plan = dataclasses.replace(plan, model=dataclasses.replace(plan.model, largest_layer_parameters=1_200_000_001))
    assert build_ds_config(plan)["zero_optimization"]["offload_param"]["buffer_size"] == 150_000_001


def test_no_activation_checkpointing_section_for_any_target():
    # Gradient checkpointing is TrainingArguments.gradient_checkpointing / model.gradient_checkpointing_enable().
    for target in ("trainer", "accelerate", "deepspeed"):
        assert "activation_checkpointing" not in build_ds_config(make_plan(3, target=target))


def test_training_arguments_carry_the_plan_to_the_trainer():
    plan = make_plan(2, target="trainer", micro_batch=4, accumulation=8, warmup_steps=100, total_steps=1000)
    assert training_arguments(plan) == {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 8,
                                        "bf16": True, "gradient_checkpointing": True, "warmup_steps": 100,
                                        "max_steps": 1000}
    assert training_arguments_hint(plan) == (
        "pass the HF Trainer --per_device_train_batch_size 4 --gradient_accumulation_steps 8 --bf16 "
        "--gradient_checkpointing --warmup_steps 100 --max_steps 1000")


def test_resolved_values_for_deepspeed_target():
    config = build_ds_config(make_plan(2, micro_batch=3, accumulation=5, gpus_per_node=8, nodes=2, lr=2e-5,
                                       weight_decay=0.1, warmup_steps=10, total_steps=500))
    assert (config["train_batch_size"], config["train_micro_batch_size_per_gpu"],
            config["gradient_accumulation_steps"]) == (3 * 5 * 16, 3, 5)
    assert config["optimizer"] == {"type": "AdamW", "params": {"lr": 2e-5, "betas": [0.9, 0.999], "eps": 1e-8,
                                                               "weight_decay": 0.1}}
    assert config["scheduler"] == {"type": "WarmupDecayLR", "params": {
        "warmup_min_lr": 0, "warmup_max_lr": 2e-5, "warmup_num_steps": 10, "warmup_type": "linear",
        "total_num_steps": 500}}


def test_the_warmup_is_linear_as_deepspeed_runs_it():
    """DeepSpeed's WarmupDecayLR, built from the plan's params as the engine builds it (`scheduler(optimizer,
    **params)`): a tenth of the way through the warmup the rate is a tenth of the peak (log would give half)."""
    torch = pytest.importorskip("torch")
    lr_schedules = pytest.importorskip("deepspeed.runtime.lr_schedules")
    params = build_ds_config(make_plan(2, lr=1e-4, warmup_steps=100, total_steps=1000))["scheduler"]["params"]
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e-4)
    sched = lr_schedules.WarmupDecayLR(optimizer, **params)
    sched.step(10)
    assert sched.get_lr()[0] == pytest.approx(1e-5)
    sched.step(550)  # halfway through the decay
    assert sched.get_lr()[0] == pytest.approx(0.5e-4)


# ---------------------------------------------------------------- DeepSpeed's own parser

@pytest.fixture(scope="module")
def deepspeed_dist():
    """A one-process gloo group: DeepSpeedConfig asks dist.get_rank() before it asks the mpu for the DP size."""
    pytest.importorskip("deepspeed")
    with one_rank_gloo_group() as deepspeed:
        yield deepspeed


def parse_with_deepspeed(config: dict, world_size: int):
    from deepspeed.runtime.config import DeepSpeedConfig

    return DeepSpeedConfig(copy.deepcopy(config), mpu=DataParallelMpu(world_size))


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
@pytest.mark.parametrize(("stage", "opt", "param"), SETUPS, ids=SETUP_IDS)
def test_deepspeed_parser_accepts_config_at_plan_world_size(deepspeed_dist, stage, opt, param, precision):
    plan = make_plan(stage, opt, param, precision, gpus_per_node=8, nodes=2, micro_batch=3, accumulation=5,
                     nvme_path="/local_nvme", total_steps=1000)
    parsed = parse_with_deepspeed(build_ds_config(plan), plan.hardware.world_size)
    assert parsed.world_size == 16
    assert (parsed.train_batch_size, parsed.train_micro_batch_size_per_gpu,
            parsed.gradient_accumulation_steps) == (240, 3, 5)
    assert parsed.zero_optimization_stage == stage
    assert parsed.float16_config.enabled is (precision == "fp16")
    assert parsed.bfloat16_config.enabled is (precision == "bf16")
    zero = parsed.zero_config
    assert (zero.offload_optimizer.device if zero.offload_optimizer else "none") == opt
    assert (zero.offload_param.device if zero.offload_param else "none") == param
    if stage == 3:
        assert zero.gather_16bit_weights_on_model_save is True
        assert zero.prefetch_bucket_size == int(0.9 * HIDDEN * HIDDEN)
    if "nvme" in (opt, param):
        assert parsed.aio_config["overlap_events"] is True


def test_deepspeed_parser_is_strict_enough_for_these_tests_to_fail(deepspeed_dist):
    """A misspelt ZeRO key is rejected, and a batch that does not multiply out at the world size too."""
    config = build_ds_config(make_plan(3))
    config["zero_optimization"]["stage3_prefetch_bucket"] = 1
    with pytest.raises(Exception, match="stage3_prefetch_bucket"):
        parse_with_deepspeed(config, 8)
    with pytest.raises(AssertionError, match="train_batch_size is not equal"):
        parse_with_deepspeed(build_ds_config(make_plan(2, gpus_per_node=8)), 4)


def _deepspeed_rates(config: dict, steps: int) -> list[float]:
    """The rate each of the first `steps` optimizer steps trains at, as DeepSpeed's engine runs the scheduler the
    config names: built once with `scheduler(optimizer, **params)` on the optimizer the config defines, stepped after
    every optimizer step (engine._take_model_step)."""
    torch = pytest.importorskip("torch")
    from deepspeed.runtime import lr_schedules

    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=config["optimizer"]["params"]["lr"])
    scheduler = getattr(lr_schedules, config["scheduler"]["type"])(optimizer, **config["scheduler"]["params"])
    rates = []
    for _ in range(steps):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return rates


def test_deepspeed_would_start_a_warmup_of_one_step_at_zero_for_two_steps():
    """Why a run without warm-up cannot be written as warmup_num_steps 1 from 0: WarmupLR raises it to 2 and sets
    warmup_min_lr at construction and at the first step(), so steps 1 and 2 train at 0 and step 3 at half the rate."""
    config = build_ds_config(make_plan(2, lr=1e-4, warmup_steps=5))
    config["scheduler"]["params"].update(warmup_num_steps=1, warmup_min_lr=0)
    assert _deepspeed_rates(config, 4) == pytest.approx([0.0, 0.0, 0.5e-4, 1e-4])


def test_without_warmup_deepspeed_trains_at_the_rate_from_the_first_step():
    config = build_ds_config(make_plan(2, lr=1e-4))
    assert config["scheduler"] == {"type": "WarmupLR", "params": {
        "warmup_min_lr": 1e-4, "warmup_max_lr": 1e-4, "warmup_num_steps": 1, "warmup_type": "linear"}}
    assert _deepspeed_rates(config, 3) == [1e-4, 1e-4, 1e-4]


def test_without_warmup_deepspeed_decays_as_the_trainers_linear_schedule():
    """With --total-steps and no warm-up, step k of T trains at lr x (T - k + 1) / T from the first step on: what
    transformers' get_linear_schedule_with_warmup(optimizer, 0, T) gives the Trainer."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = build_ds_config(make_plan(2, lr=1e-4, total_steps=10))
    assert config["scheduler"] == {"type": "WarmupDecayLR", "params": {
        "warmup_min_lr": 0, "warmup_max_lr": 1e-4, "warmup_num_steps": 1, "warmup_type": "linear",
        "total_num_steps": 12, "last_batch_iteration": 2}}
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=1e-4)
    hf = transformers.get_linear_schedule_with_warmup(optimizer, 0, 10)
    trainer = []
    for _ in range(12):
        trainer.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        hf.step()
    assert _deepspeed_rates(config, 12) == pytest.approx(trainer)
    assert trainer[:3] == pytest.approx([1e-4, 0.9e-4, 0.8e-4])


def _accelerate_filled(config: dict, lr: float, warmup: int) -> dict:
    """`config` with its optimizer and scheduler filled as Accelerate 1.x fills them for the
    `DummyOptim(params, lr=...)` and `DummyScheduler(optimizer, warmup_num_steps=...)` the plan's hint names: the
    kwargs of `Accelerator._prepare_deepspeed` (accelerator.py, its DummyOptim and DummyScheduler branches), through
    Accelerate's own `DeepSpeedPlugin.deepspeed_config_process`, which fills only what is "auto"."""
    from accelerate.utils import DeepSpeedPlugin

    plugin = DeepSpeedPlugin(hf_ds_config=copy.deepcopy(config))
    kwargs = {"optimizer.params.lr": lr, "optimizer.params.weight_decay": 0.0, "scheduler.params.warmup_min_lr": 0,
              "scheduler.params.warmup_max_lr": lr, "scheduler.params.warmup_num_steps": max(1, warmup)}
    for section in ("optimizer", "scheduler"):
        plugin.deepspeed_config_process(prefix=f"{section}.", config=plugin.deepspeed_config[section],
                                        must_match=False, **kwargs)
    return plugin.deepspeed_config


@pytest.mark.parametrize("total", [None, 10])
def test_without_warmup_accelerate_trains_at_the_rate_from_the_first_step(total):
    """Accelerate's DummyScheduler fill writes warmup_min_lr 0 and warmup_num_steps 1, which DeepSpeed's WarmupLR
    held at 0 for the first two optimizer steps; the plan keeps the constant rate's minimum explicit, and with
    --total-steps starts past DeepSpeed's warm-up as the deepspeed target does, so step k of T trains at
    lr x (T - k + 1) / T."""
    pytest.importorskip("accelerate")
    plan = make_plan(2, target="accelerate", lr=1e-4, total_steps=total)
    config = build_ds_config(plan)
    assert config["scheduler"]["params"]["warmup_max_lr"] == AUTO
    filled = _accelerate_filled(config, 1e-4, 0)
    if total is None:
        assert _deepspeed_rates(filled, 3) == [1e-4, 1e-4, 1e-4]
    else:
        assert _deepspeed_rates(filled, 4) == pytest.approx([1e-4, 0.9e-4, 0.8e-4, 0.7e-4])
    # what the all-"auto" section it replaced trained at
    old = copy.deepcopy(config)
    old["scheduler"]["params"].update(warmup_min_lr=AUTO, warmup_num_steps=AUTO)
    old["scheduler"]["params"].pop("last_batch_iteration", None)
    if total is not None:
        old["scheduler"]["params"]["total_num_steps"] = total
    assert _deepspeed_rates(_accelerate_filled(old, 1e-4, 0), 3)[:2] == [0.0, 0.0]


def test_with_warmup_accelerate_fills_the_warmup_itself():
    """With a warm-up the minimum stays "auto" (Accelerate writes 0) and warms up linearly over its steps."""
    pytest.importorskip("accelerate")
    config = build_ds_config(make_plan(2, target="accelerate", lr=1e-4, warmup_steps=4, total_steps=10))
    params = config["scheduler"]["params"]
    assert (params["warmup_min_lr"], params["warmup_num_steps"]) == (AUTO, AUTO)
    assert "last_batch_iteration" not in params and params["total_num_steps"] == 10
    assert _deepspeed_rates(_accelerate_filled(config, 1e-4, 4), 4) == pytest.approx([0.0, 0.0, 0.25e-4, 0.5e-4])


@pytest.mark.parametrize("warmup, total", [(0, None), (100, 1000)])
def test_the_trainer_target_leaves_the_schedule_to_the_trainer(warmup, total):
    """With no scheduler section the Trainer runs its own (transformers deepspeed_optim_sched: DummyScheduler with
    its create_scheduler, lr_scheduler_type included) on DeepSpeed's optimizer. An "auto" WarmupDecayLR replaced a
    cosine lr_scheduler_type silently, and without warm-up the Trainer filled warmup_num_steps 1 and warmup_min_lr
    0, which DeepSpeed's WarmupLR raises to two steps from 0: the first two steps trained at 0 (shown here with
    DeepSpeed's own class). The plan still tells the Trainer the warm-up and the total."""
    from deepspeed.runtime import lr_schedules

    plan = make_plan(2, target="trainer", warmup_steps=warmup, total_steps=total)
    assert "scheduler" not in build_ds_config(plan)
    args = training_arguments(plan)
    assert args.get("warmup_steps", 0) == warmup and args.get("max_steps") == total
    if warmup == 0:  # what the Trainer's fill of the old "auto" section made of it
        import torch

        optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1e-4)
        old = lr_schedules.WarmupDecayLR(optimizer, warmup_min_lr=0, warmup_max_lr=1e-4, warmup_num_steps=1,
                                         total_num_steps=100, warmup_type="linear")
        rates = []
        for _ in range(2):
            rates.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            old.step()
        assert rates == [0.0, 0.0]


# ---------------------------------------------------------------- transformers' HfTrainerDeepSpeedConfig

@pytest.fixture(scope="module")
def tiny_model():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(hidden_size=HIDDEN, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=256)
    return transformers.LlamaForCausalLM(config)


@pytest.mark.parametrize("precision", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize(("stage", "opt", "param"), [(0, "none", "none"), (1, "cpu", "none"), (2, "none", "none"),
                                                     (3, "cpu", "cpu"), (3, "nvme", "nvme")])
def test_trainer_fills_every_auto_without_mismatch(tiny_model, tmp_path, stage, opt, param, precision):
    from transformers import TrainingArguments
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    plan = make_plan(stage, opt, param, precision, target="trainer", gpus_per_node=1, micro_batch=4,
                     accumulation=8, nvme_path="/local_nvme")
    config = build_ds_config(plan)
    assert autos(config), "a trainer config without any auto would not exercise the filler"
    flags = {k: v for k, v in training_arguments(plan).items() if k in ("bf16", "fp16")}
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[],
                             per_device_train_batch_size=training_arguments(plan)["per_device_train_batch_size"],
                             gradient_accumulation_steps=training_arguments(plan)["gradient_accumulation_steps"],
                             **flags)
    assert args.world_size == plan.hardware.world_size == 1
    hf = HfTrainerDeepSpeedConfig(copy.deepcopy(config))
    hf.trainer_config_process(args)
    hf.trainer_config_finalize(args, tiny_model, num_training_steps=100)
    assert hf.mismatches == []
    assert autos(hf.config) == []
    assert (hf.config["train_batch_size"], hf.config["train_micro_batch_size_per_gpu"],
            hf.config["gradient_accumulation_steps"]) == (32, 4, 8)
    assert hf.config["fp16"]["enabled"] is (precision == "fp16")
    assert hf.config["bf16"]["enabled"] is (precision == "bf16")
    assert hf.config["zero_optimization"]["stage"] == stage
    if stage:
        assert hf.config["zero_optimization"]["reduce_bucket_size"] == HIDDEN * HIDDEN
    assert "scheduler" not in hf.config  # the Trainer's own schedule runs


def test_trainer_reports_a_mismatch_when_the_config_is_not_auto(tiny_model, tmp_path):
    """The counter-check: a resolved (deepspeed-target) config with a different micro-batch is a mismatch."""
    from transformers import TrainingArguments
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    config = build_ds_config(make_plan(2, gpus_per_node=1, micro_batch=4, accumulation=8))
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[], per_device_train_batch_size=2,
                             gradient_accumulation_steps=8, bf16=True)
    hf = HfTrainerDeepSpeedConfig(config)
    hf.trainer_config_process(args)
    assert any("train_micro_batch_size_per_gpu" in m for m in hf.mismatches)


# ---------------------------------------------------------------- zerokit lint, strict, for the config's own target

@pytest.mark.parametrize("target", ["trainer", "accelerate", "deepspeed"])
@pytest.mark.parametrize("precision", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize(("stage", "opt", "param"), SETUPS, ids=SETUP_IDS)
def test_every_emitted_config_lints_clean_for_its_target(stage, opt, param, precision, target):
    import json

    lint = pytest.importorskip("zerokit.lint.engine")
    from zerokit.lint.rules import Context

    plan = make_plan(stage, opt, param, precision, target=target, gpus_per_node=8, nodes=2, nvme_path="/local_nvme")
    findings = lint.lint_text(json.dumps(build_ds_config(plan), indent=2), Context(target=target, world_size=16))
    assert [(f.severity, f.code, f.key, f.message) for f in findings] == []


def test_lint_would_catch_a_broken_emitted_config():
    """The counter-check: the same lint call does flag an "auto" the deepspeed target cannot fill."""
    import json

    lint = pytest.importorskip("zerokit.lint.engine")
    from zerokit.lint.rules import Context

    config = build_ds_config(make_plan(2))
    config["gradient_accumulation_steps"] = AUTO
    assert lint.lint_text(json.dumps(config), Context(target="deepspeed", world_size=8))


# ---------------------------------------------------------------- the planner's own plans, end to end

SCENARIOS = {
    "7b-1x80gb": ("llama-2-7b", {"gpu": "h100-80gb"}, {}),
    "7b-8x80gb": ("llama-2-7b", {"gpu": "h100-80gb", "gpus_per_node": 8}, {}),
    "70b-2x8x80gb": ("llama-2-70b", {"gpu": "a100-80gb", "gpus_per_node": 8, "nodes": 2}, {}),
    "7b-v100": ("llama-2-7b", {"gpu": "v100-32gb", "gpus_per_node": 8}, {}),
    "70b-nvme": ("llama-2-70b", {"gpu": "a100-80gb", "gpus_per_node": 4, "nvme_path": "/local_nvme"},
                 {"zero_stage": 3, "offload_optimizer": "nvme", "offload_param": "nvme"}),
    "mixtral-global-batch": ("mixtral-8x7b", {"gpu": "h100-80gb", "gpus_per_node": 8, "nodes": 4},
                             {"global_batch_tokens": 1_000_000}),
    "7b-lora-zero3": ("llama-2-7b", {"gpu": "a100-80gb", "gpus_per_node": 8}, {"peft": "lora", "zero_stage": 3}),
    "70b-qlora-zero3": ("llama-2-70b", {"gpu": "a100-80gb", "gpus_per_node": 8},
                        {"peft": "qlora", "zero_stage": 3}),
    "7b-lora-zero2": ("llama-2-7b", {"gpu": "a100-80gb", "gpus_per_node": 8}, {"peft": "lora", "zero_stage": 2}),
}


def planned(name: str, target: str) -> Plan:
    plan_mod = pytest.importorskip("zerokit.planner.engine")
    resolve = pytest.importorskip("zerokit.models.resolve")
    from dataclasses import replace

    from zerokit.hardware import resolve_hardware

    model, hardware, training = SCENARIOS[name]
    result = plan_mod.plan(resolve.resolve_model(model), resolve_hardware(**hardware),
                           Training(seq_len=4096, target=target, **training))
    return replace(result, ds_config=build_ds_config(result))  # what `zerokit plan` does


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_planner_configs_parse_in_deepspeed_and_lint_clean(deepspeed_dist, name):
    import json

    from zerokit.lint.engine import lint_text
    from zerokit.lint.rules import Context

    plan = planned(name, "deepspeed")
    assert plan.ds_config == build_ds_config(plan)
    assert autos(plan.ds_config) == []
    parsed = parse_with_deepspeed(plan.ds_config, plan.hardware.world_size)
    d = plan.decision
    assert parsed.world_size == plan.hardware.world_size
    assert parsed.train_batch_size == d.micro_batch_size * d.gradient_accumulation_steps * plan.hardware.world_size
    assert parsed.zero_optimization_stage == d.zero_stage
    assert parsed.float16_config.enabled is (d.precision == "fp16")
    for target in ("trainer", "accelerate", "deepspeed"):
        config = planned(name, target).ds_config
        findings = lint_text(json.dumps(config), Context(target=target, world_size=plan.hardware.world_size))
        assert [(f.code, f.key, f.message) for f in findings] == []


def test_lora_and_qlora_at_zero3_turn_deepspeeds_saving_linear_off(deepspeed_dist):
    """ZeRO-3's default `memory_efficient_linear` swaps F.linear for LinearFunctionForZeroStage3, which saves every
    linear's input, a frozen base's too (a traced LoRA ZeRO-3 run held 2.4 MB more on its miniature, README): the
    plan turns it off where the base is frozen, and only there; DeepSpeed reads the key as written."""
    for name in ("7b-lora-zero3", "70b-qlora-zero3"):
        plan = planned(name, "trainer")
        assert plan.decision.zero_stage == 3
        assert plan.ds_config["zero_optimization"]["memory_efficient_linear"] is False
        parsed = parse_with_deepspeed(planned(name, "deepspeed").ds_config, plan.hardware.world_size)
        assert parsed.zero_config.memory_efficient_linear is False
        assert any("memory_efficient_linear is off" in r for r in plan.reasons), plan.reasons
    assert "memory_efficient_linear" not in planned("7b-lora-zero2", "trainer").ds_config["zero_optimization"]
    full = build_ds_config(make_plan(3))["zero_optimization"]
    assert "memory_efficient_linear" not in full  # full fine-tuning saves those inputs anyway: the default stays


def test_given_lr_reaches_the_consumer_that_fills_it():
    trainer = make_plan(2, target="trainer", lr=3e-5, weight_decay=0.01)
    assert training_arguments(trainer)["learning_rate"] == 3e-5
    assert training_arguments(trainer)["weight_decay"] == 0.01
    assert "--learning_rate 3e-05 --weight_decay 0.01" in training_arguments_hint(trainer)
    assert "learning_rate" not in training_arguments(make_plan(2, target="trainer"))  # the default stays HF's
    accelerate = make_plan(2, target="accelerate", lr=3e-5)
    assert "DummyOptim(params, lr=3e-05, weight_decay=0.0)" in training_arguments_hint(accelerate)


def test_the_accelerate_hint_names_the_deepspeed_plugin_without_which_accelerator_uses_no_deepspeed():
    """An Accelerator() with no DeepSpeedPlugin uses DeepSpeed only under `accelerate launch` configured for it (its
    ACCELERATE_USE_DEEPSPEED): a script that `zerokit launch` or `deepspeed` starts would train without DeepSpeed,
    the planned config unread. The hint names the plugin and the file -o wrote."""
    pytest.importorskip("accelerate")
    import subprocess
    import sys

    plan = make_plan(3, target="accelerate")
    assert "Accelerator(deepspeed_plugin=DeepSpeedPlugin(hf_ds_config='ds_config.json'), " in (
        training_arguments_hint(plan))
    assert "DeepSpeedPlugin(hf_ds_config='out/ds.json')" in training_arguments_hint(plan, "out/ds.json")
    # what the deepspeed runner gives a one-rank script: no ACCELERATE_* variable
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_")}
    env.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29599")
    code = "from accelerate import Accelerator; print(Accelerator(cpu=True).distributed_type)"
    out = subprocess.run([sys.executable, "-c", code], check=False, env=env, capture_output=True, text=True,
                         timeout=120)
    # torch.distributed over the runner's variables, without DeepSpeed
    assert out.returncode == 0 and out.stdout.strip().splitlines()[-1] == "DistributedType.MULTI_CPU", out.stderr[-2000:]


@pytest.mark.parametrize("lr_args, rate", [([], 5e-5), (["--lr", "1e-5"], 1e-5), (["--lr", "3e-4"], 3e-4)])
def test_the_trainer_trains_at_the_given_lr_even_when_it_is_zerokits_default(capsys, tmp_path, tiny_model, lr_args,
                                                                              rate):
    """The plan's `Training:` line, parsed as the Trainer parses its command line, then transformers' own fill and
    the Trainer's own schedule (no scheduler section): the rate is --lr whenever --lr is given. `--lr 1e-5`, zerokit's
    default, was taken for not given and left out of the line, so the Trainer trained at its own 5e-5; without --lr
    the Trainer's default stays."""
    import shlex

    import torch
    import transformers
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    from zerokit.cli import main

    code = main(["plan", "--model", str(ROOT / "examples" / "models" / "tiny-llama"), "--gpu", "h100-80gb", "--seq-len", "64",
                 "--micro-batch", "2", "--global-batch", "8", "--warmup-steps", "10", "--total-steps", "100",
                 *lr_args, "-o", str(tmp_path / "ds_config.json")])
    text = capsys.readouterr().out
    assert code == 0
    line = next(ln for ln in text.splitlines() if ln.startswith("Training: pass the HF Trainer "))
    (args,) = transformers.HfArgumentParser(transformers.TrainingArguments).parse_args_into_dataclasses(
        [*shlex.split(line.removeprefix("Training: pass the HF Trainer ")), "--output_dir", str(tmp_path),
         "--use_cpu", "--report_to", "none"])
    hf = HfTrainerDeepSpeedConfig(str(tmp_path / "ds_config.json"))
    hf.trainer_config_process(args)
    hf.trainer_config_finalize(args, tiny_model, num_training_steps=args.max_steps)
    assert hf.mismatches == [] and autos(hf.config) == []
    assert hf.config["optimizer"]["params"]["lr"] == rate
    params = hf.config["optimizer"]["params"]
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=params["lr"], betas=params["betas"],
                                  eps=params["eps"], weight_decay=params["weight_decay"])
    scheduler = transformers.get_scheduler(args.lr_scheduler_type, optimizer,
                                           num_warmup_steps=args.get_warmup_steps(args.max_steps),
                                           num_training_steps=args.max_steps)
    rates = []
    for _ in range(args.max_steps):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert (rates[0], rates[10], rates[55], rates[99]) == pytest.approx((0, rate, rate / 2, rate / 90))

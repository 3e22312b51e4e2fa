"""`zerokit.memory.estimate.estimate()` honours `Training.peft` as the planner does (the adapters train, the base is
frozen, the activations are those of the adapted layers)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from zerokit.hardware import resolve_hardware
from zerokit.memory.buffers import BufferSettings
from zerokit.memory.estimate import estimate
from zerokit.models.resolve import spec_from_config
from zerokit.planner import Training, plan
from zerokit.planner.types import Setup

ROOT = Path(__file__).resolve().parent.parent
LLAMA = json.loads((ROOT / "tests" / "data" / "realrun" / "models" / "llama.json").read_text())
LORA_TRAINABLE = 295_936
"""Rank 16 on every linear layer of the miniature llama: 4 layers x (q 256+256, k 256+128, v 256+128, o 256+256,
gate 256+688, up 256+688, down 688+256) x 16 = 4 x 4624 x 16."""


def _plan_and_estimate(stage: int, peft: str):
    hardware = replace(resolve_hardware(gpu_memory="16GB", gpus_per_node=2), accelerator="cpu")
    spec = spec_from_config(LLAMA, "llama", source="config")
    training = Training(seq_len=128, micro_batch=2, global_batch=4, zero_stage=stage, offload_optimizer="none",
                        offload_param="none", gradient_checkpointing=False, precision="bf16", target="deepspeed",
                        overhead_bytes=0, peft=peft)
    result = plan(spec, hardware, training)
    d = result.decision
    setup = Setup(d.zero_stage, d.offload_optimizer, d.offload_param, d.micro_batch_size, d.gradient_checkpointing,
                  d.gradient_accumulation_steps)
    buffers = BufferSettings(d.overlap_comm, d.reduce_bucket_size, d.allgather_bucket_size, d.prefetch_bucket_size,
                             d.param_persistence_threshold, d.max_live_parameters, False)
    return result, estimate(spec, hardware, training, setup, buffers=buffers)


def test_the_adapter_count_is_the_hand_count():
    assert 4 * (512 + 384 + 384 + 512 + 944 + 944 + 944) * 16 == LORA_TRAINABLE
    result, _ = _plan_and_estimate(2, "lora")
    assert result.peft.trainable == LORA_TRAINABLE


@pytest.mark.parametrize("stage", [2, 3])
@pytest.mark.parametrize("peft", ["none", "lora"])
def test_estimate_gives_the_plans_phases(stage, peft):
    result, est = _plan_and_estimate(stage, peft)
    assert {p: m.as_dict() for p, m in est.phases.items()} == {p: m.as_dict() for p, m in result.phases.items()}
    assert est.peak_phase == result.peak_phase


def test_lora_states_are_the_adapters_only():
    """ZeRO-2 on 2 ranks: the fp32 master and Adam's moments of half the adapters, 12 bytes each."""
    _, est = _plan_and_estimate(2, "lora")
    _, full = _plan_and_estimate(2, "none")
    assert est.phases["optimizer_step"].optimizer_states == 12 * LORA_TRAINABLE // 2 == 1_775_616
    assert full.phases["optimizer_step"].optimizer_states > 10 * est.phases["optimizer_step"].optimizer_states


@pytest.mark.parametrize(("stage", "adapter_bytes"), [(0, 2), (1, 2), (2, 2), (3, 4)])
def test_adapters_train_in_the_dtype_deepspeed_leaves_them(stage, adapter_bytes):
    """The engine casts PEFT's fp32 adapters to bf16, except on a zero.Init model (ZeRO-3), where it casts nothing
    (traced: llama-lora-z2 and llama-lora-z3 in tests/data/realrun/memory.json)."""
    result, _ = _plan_and_estimate(2, "lora")
    assert result.peft.activation_setup(stage, 2).adapter_bytes == adapter_bytes

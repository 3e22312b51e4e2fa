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


def test_qloras_adapters_are_cast_at_zero3_too():
    """QLoRA's base never loads under zero.Init (transformers' get_init_context skips it for a quantized model), so
    the engine casts its adapters to bf16 at every stage (traced: llama-qlora-z3's activations are ZeRO-2's)."""
    result, _ = _plan_and_estimate(3, "qlora")
    assert [result.peft.activation_setup(stage, 2).adapter_bytes for stage in (0, 1, 2, 3)] == [2, 2, 2, 2]


# The miniature llama's modules, by hand (tests/data/realrun/models/llama.json: hidden 256, 4 heads of 64, 2 k/v
# heads, MLP 688, vocab 4096, untied): embedding and lm_head 4096 x 256; per layer q and o 256 x 256, k and v
# 256 x 128, gate/up/down 256 x 688, two 256-wide norms.
EMBED = 4096 * 256
QKV = 256 * 256 + 2 * 256 * 128
LINEARS = 4 * (QKV + 256 * 256 + 3 * 256 * 688)


def test_the_zero3_trace_counts_4bit_weights_by_their_stored_elements():
    """At ZeRO-3 the plan stores 4-bit weights in bf16 (`bnb_4bit_quant_storage`): four weights an element, which
    DeepSpeed partitions, gathers and compares with its thresholds. Everything else is one element a parameter."""
    from zerokit.memory.estimate import module_trace, quantized_module_trace

    spec = spec_from_config(LLAMA, "llama", source="config")
    modules, persistent, front = module_trace(spec, 2560)
    q_modules, q_persistent, q_front, total, largest = quantized_module_trace(spec, 2560)
    assert persistent == q_persistent == 9 * 256  # the norms, below the threshold (10 x hidden) either way
    assert sum(modules) == 2 * EMBED + LINEARS
    assert sum(q_modules) == 2 * EMBED + LINEARS // 4 and total == sum(q_modules) + q_persistent
    assert largest == EMBED
    # front: the embedding and layer 0's q, k, v projections (backward never reaches them on a frozen base)
    assert front == EMBED + QKV and q_front == EMBED + QKV // 4


def _zero3_forward(peft: str, checkpointing: bool):
    result, _ = _plan_and_estimate(3, peft)
    hardware = replace(resolve_hardware(gpu_memory="16GB", gpus_per_node=2), accelerator="cpu")
    spec = spec_from_config(LLAMA, "llama", source="config")
    training = replace(result.training, gradient_checkpointing=checkpointing)
    d = result.decision
    setup = Setup(3, "none", "none", d.micro_batch_size, checkpointing, 1)
    buffers = BufferSettings(d.overlap_comm, d.reduce_bucket_size, d.allgather_bucket_size, d.prefetch_bucket_size,
                             d.param_persistence_threshold, d.max_live_parameters, False)
    return estimate(spec, hardware, training, setup, buffers=buffers).phases["forward"]


@pytest.mark.parametrize("peft", ["lora", "qlora"])
def test_zero3_releases_what_a_frozen_bases_backward_never_reaches(peft):
    """Without checkpointing the embedding and layer 0's q, k, v are released after forward (a traced run: their
    ZeroParamStatus NOT_AVAILABLE at the end of forward, the other 25 weights AVAILABLE); with checkpointing PEFT's
    enable_input_require_grads puts them in backward again. The adapters on q, k, v train: they stay."""
    without, with_ckpt = _zero3_forward(peft, False), _zero3_forward(peft, True)
    stored = QKV if peft == "lora" else QKV // 4
    assert with_ckpt.parameters - without.parameters == 2 * (EMBED + stored)


def test_qlora_constants_stay_whole_on_every_rank_at_zero3():
    """The absmax and code tables are attributes of each 4-bit weight, not parameters: ZeRO-3 partitions the packed
    weights and the 16-bit rest, not them. At the step DeepSpeed has released every gathered parameter, but the
    autograd graph still holds the 4-bit weights bitsandbytes kept (`quantized_held`): all 28 but layer 0's q, k and
    v without checkpointing, 4 x 181,248 - 32,768 stored elements."""
    result, est = _plan_and_estimate(3, "qlora")
    p = result.peft
    step = est.phases["optimizer_step"]  # the partition, persistent norms, the constants and the held weights
    whole = 2 * p.trainable + p.frozen_bytes_at(3) - p.quantization_constants
    assert not result.decision.gradient_checkpointing
    assert step.parameters == -(-whole // 2) + p.quantization_constants + 2 * 9 * 256 + 2 * (4 * 181_248 - 32_768)


def test_a_family_the_trace_cannot_split_falls_back_to_the_16bit_trace():
    """An overestimate, never an error: the 4-bit weights counted as 16-bit ones."""
    from zerokit.memory.estimate import module_trace, quantized_module_trace
    from zerokit.models.spec import ModelSpec

    spec = ModelSpec(name="odd", parameters=1_000_000, largest_layer_parameters=100_000, hidden_size=64,
                     num_layers=4, vocab_size=1000, source="config", config={"model_type": "no-such-family"})
    modules, persistent, front, total, largest = quantized_module_trace(spec, 640)
    assert (modules, persistent, front) == module_trace(spec, 640) and front == 0
    assert (total, largest) == (1_000_000, 100_000)

"""The rules engine on the seed scenarios, forced options, batch arithmetic and the nothing-fits path."""

from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import replace

import pytest

from zerokit.errors import BadInput
from zerokit.hardware import resolve_hardware
from zerokit.memory.activations import estimate_activations
from zerokit.memory.buffers import buffer_ladder, comm_buffers, default_overhead
from zerokit.models.resolve import resolve_model
from zerokit.planner import plan
from zerokit.planner.types import Training

LLAMA7 = resolve_model("llama-2-7b")
LLAMA70 = resolve_model("llama-2-70b")


def _no_offload(c) -> bool:
    return c.setup.offload_optimizer == "none" and c.setup.offload_param == "none"


# ------------------------------------------------------------------------------------------- seed scenarios

def test_7b_on_one_80gb_gpu_fits_only_by_offloading_the_optimizer():
    p = plan(LLAMA7, resolve_hardware("a100-80gb"), Training(seq_len=4096))
    assert p.decision.fits
    assert p.decision.offload_optimizer == "cpu" and p.decision.offload_param == "none"
    # Every no-offload stage was tried and failed: 20 bytes per parameter (135 GB) exceed one GPU.
    assert [c.setup.zero_stage for c in p.candidates if _no_offload(c)] == [0, 1, 2, 3]
    assert not any(c.fits for c in p.candidates if _no_offload(c))
    assert p.memory.total <= p.hardware.gpu_memory_bytes
    assert p.cpu_bytes_per_node > 16 * LLAMA7.parameters  # fp32 master + Adam moments + fp32 grads live in RAM


def test_7b_on_8x80gb_fits_without_offload_at_zero1_or_zero2():
    p = plan(LLAMA7, resolve_hardware("a100-80gb", gpus_per_node=8), Training(seq_len=4096))
    d = p.decision
    assert d.fits and d.zero_stage in (1, 2)
    assert (d.offload_optimizer, d.offload_param) == ("none", "none")
    assert not p.candidates[0].fits  # plain data parallel: 20 bytes x 6.7B = 135 GB per GPU
    assert not d.gradient_checkpointing  # 4096 tokens per micro-batch fit without recomputation
    # HF's "auto" bucket sizes were chosen, so the trainer config can leave them "auto".
    assert d.reduce_bucket_size == 4096**2 and d.overlap_comm
    assert p.ds_config["zero_optimization"]["reduce_bucket_size"] == "auto"
    assert p.ds_config["zero_optimization"]["stage"] == d.zero_stage


def test_llama2_70b_on_2_nodes_of_8x80gb_needs_zero3():
    p = plan(LLAMA70, resolve_hardware("h100-80gb", gpus_per_node=8, nodes=2), Training(seq_len=4096))
    assert p.decision.fits and p.decision.zero_stage == 3
    assert not any(c.fits for c in p.candidates if c.setup.zero_stage < 3)


def test_70b_on_one_24gb_gpu_with_64gb_ram_does_not_fit_and_says_what_is_missing():
    p = plan(LLAMA70, resolve_hardware(gpu_memory="24GB", cpu_memory="64GB"), Training(seq_len=4096))
    assert not p.decision.fits
    assert not any(c.fits for c in p.candidates)
    assert not any(c.setup.offload_optimizer == "nvme" for c in p.candidates)  # no --nvme-path, no NVMe candidates
    # The closest plan is full CPU offload; what it lacks is host RAM: 18 bytes x 69B x 1.5 = 1.9 TB.
    assert (p.decision.zero_stage, p.decision.offload_optimizer, p.decision.offload_param) == (3, "cpu", "cpu")
    assert "1.9 TB of CPU RAM per node for full offload (have 64.0 GB)" in p.missing
    assert "more 24.0 GB GPUs" in p.missing and "--nvme-path" in p.missing
    # ZeRO-3 without offload: (2 + 16) x 69B = 1.24 TB of partitioned states over N GPUs, plus per-GPU fixed costs:
    # the gathered largest layer (params + grads), the most frugal buffers, one checkpointed sample's activations,
    # and the overhead reserve.
    act = estimate_activations(LLAMA70.config, 4096, 1, attention="sdpa", dtype="bf16", gradient_checkpointing=True)
    buffers = comm_buffers(buffer_ladder(8192, 3)[-1], 3, LLAMA70.parameters, LLAMA70.largest_layer_parameters)
    fixed = 4 * LLAMA70.largest_layer_parameters + buffers + act.activations + act.transient + default_overhead(24e9)
    n = math.ceil(18 * LLAMA70.parameters / (24e9 - fixed))
    assert f"needs {n - 1} more 24.0 GB GPUs ({n} in all, ZeRO-3 without offload)" in p.missing
    assert 51 < n < 200  # 1.24 TB / 24 GB = 52 if nothing else took memory


def test_cli_exits_1_when_nothing_fits():
    r = subprocess.run([sys.executable, "-m", "zerokit", "plan", "--model", "llama-2-70b", "--gpu-memory", "24GB",
                        "--cpu-memory", "64GB", "--seq-len", "4096", "--format", "json"],
                       check=False, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    assert '"fits": false' in r.stdout


def test_v100_trains_in_fp16():
    p = plan(LLAMA7, resolve_hardware("v100-32gb", gpus_per_node=8), Training(seq_len=2048))
    assert p.decision.precision == "fp16"
    assert any("fp16 with dynamic loss scaling" in r for r in p.reasons)
    with pytest.raises(BadInput, match="v100-32gb has no bf16 support; use --precision fp16"):
        plan(LLAMA7, resolve_hardware("v100-32gb"), Training(seq_len=2048, precision="bf16"))


# ------------------------------------------------------------------------------------------ rules and options

def test_memory_breakdown_is_the_sum_of_its_parts():
    t = Training(seq_len=4096)
    p = plan(LLAMA7, resolve_hardware("a100-80gb", gpus_per_node=8), t)
    m, d = p.memory, p.decision
    est = estimate_activations(LLAMA7.config, 4096, d.micro_batch_size, attention="sdpa", dtype="bf16",
                               gradient_checkpointing=d.gradient_checkpointing)
    assert (m.activations, m.transient) == (est.activations, est.transient)
    assert m.overhead == default_overhead(81920 * 2**20)
    assert m.total == sum(v for k, v in m.as_dict().items() if k != "total")
    chosen = next(c for c in p.candidates if c.setup.zero_stage == d.zero_stage and _no_offload(c))
    assert chosen.memory == m


def test_overhead_override():
    p = plan(LLAMA7, resolve_hardware("a100-80gb", gpus_per_node=8), Training(seq_len=4096, overhead_bytes=10**9))
    assert p.memory.overhead == 10**9


def test_forced_options_are_kept():
    hw = resolve_hardware("a100-80gb", gpus_per_node=8)
    p = plan(LLAMA7, hw, Training(seq_len=4096, zero_stage=3, micro_batch=2, gradient_checkpointing=True))
    d = p.decision
    assert (d.zero_stage, d.micro_batch_size, d.gradient_checkpointing) == (3, 2, True)
    assert {c.setup.zero_stage for c in p.candidates} == {3}
    assert p.reasons[0].startswith("Forced by you: ZeRO-3, micro-batch 2, checkpointing on")
    # A forced stage that cannot fit is reported, not silently changed.
    p = plan(LLAMA7, resolve_hardware("a100-80gb"), Training(seq_len=4096, zero_stage=0))
    assert not p.decision.fits and p.decision.zero_stage == 0
    assert "with --zero-stage 0 forced, the closest setup needs" in p.missing
    assert p.missing.endswith("without it the plan fits as ZeRO-2 + cpu optimizer offload at micro-batch 2")


def test_forced_zero1_may_offload():
    p = plan(LLAMA7, resolve_hardware("a100-80gb"), Training(seq_len=1024, zero_stage=1))
    assert [(c.setup.zero_stage, c.setup.offload_optimizer) for c in p.candidates] == [(1, "none"), (1, "cpu")]


@pytest.mark.parametrize("kwargs,match", [
    ({"zero_stage": 2, "offload_param": "cpu"}, r"--offload-param cpu needs ZeRO stage 3"),
    ({"zero_stage": 0, "offload_optimizer": "cpu"}, r"needs ZeRO stage 1 or higher"),
    ({"offload_optimizer": "nvme"}, r"NVMe offload needs --nvme-path"),
    ({"global_batch": 8, "global_batch_tokens": 10**6}, r"not both"),
    ({"seq_len": 0}, r"--seq-len must be at least 1"),
])
def test_impossible_forced_options_are_bad_input(kwargs, match):
    t = replace(Training(seq_len=4096), **kwargs)
    with pytest.raises(BadInput, match=match):
        plan(LLAMA7, resolve_hardware("a100-80gb"), t)


def test_global_batch_sets_accumulation():
    hw = resolve_hardware("a100-80gb", gpus_per_node=8)
    p = plan(LLAMA7, hw, Training(seq_len=4096, global_batch=64))
    d = p.decision
    assert d.micro_batch_size * d.gradient_accumulation_steps * 8 == 64
    assert p.ds_config["gradient_accumulation_steps"] == "auto"  # trainer target: the Trainer fills it


def test_global_batch_is_rounded_to_a_multiple_of_the_gpus():
    hw = resolve_hardware("a100-80gb", gpus_per_node=8)
    p = plan(LLAMA7, hw, Training(seq_len=4096, global_batch=100))
    d = p.decision
    assert d.micro_batch_size * d.gradient_accumulation_steps * 8 == 104
    assert any("using 104" in w for w in p.warnings)


def test_global_batch_tokens():
    # 1,000,000 / 4096 = 244.1 samples -> 244; over 8 GPUs 30.5 -> 31 per GPU -> 248 samples.
    hw = resolve_hardware("a100-80gb", gpus_per_node=8)
    p = plan(LLAMA7, hw, Training(seq_len=4096, global_batch_tokens=10**6, target="deepspeed"))
    assert p.ds_config["train_batch_size"] == 248
    d = p.decision
    assert 31 % d.micro_batch_size == 0 and d.micro_batch_size * d.gradient_accumulation_steps == 31


def test_checkpointing_only_when_needed():
    hw = resolve_hardware("h100-80gb", gpus_per_node=8, nodes=2)
    p = plan(LLAMA70, hw, Training(seq_len=4096))
    assert p.decision.gradient_checkpointing
    assert any("gradient checkpointing on: without it not even micro-batch 1 fits" in r for r in p.reasons)
    small = plan(resolve_model("gpt2"), resolve_hardware("a100-80gb"), Training(seq_len=1024))
    assert not small.decision.gradient_checkpointing and small.decision.zero_stage == 0
    mb = small.decision.micro_batch_size
    assert mb in (1, 2, 4, 8, 16, 32)  # auto tries powers of two up to 64; the next one up does not fit
    bigger = plan(resolve_model("gpt2"), resolve_hardware("a100-80gb"),
                  Training(seq_len=1024, micro_batch=2 * mb, zero_stage=0, gradient_checkpointing=False))
    # Asked for twice that, the planner says it fits no setup and falls back to the largest below it that does.
    assert bigger.decision.fits and bigger.decision.micro_batch_size == mb
    assert any(f"micro-batch {2 * mb} fits no setup" in r for r in bigger.reasons)


def test_nvme_candidates_only_with_a_path():
    hw = resolve_hardware(gpu_memory="24GB", cpu_memory="512GB", nvme_path="/local_nvme", nvme_size="4TB")
    p = plan(LLAMA70, hw, Training(seq_len=2048))
    assert [c.setup.offload_optimizer for c in p.candidates][-3:] == ["nvme", "nvme", "nvme"]
    assert p.decision.fits and p.decision.offload_optimizer == "nvme"
    on_nvme = 16 + (2 if p.decision.offload_param == "nvme" else 0)  # fp32 master, moments, grads (+16-bit params)
    assert p.nvme_bytes_per_node == on_nvme * LLAMA70.parameters


def test_reasons_are_sentences_in_rule_order():
    p = plan(LLAMA7, resolve_hardware("a100-80gb"), Training(seq_len=4096))
    assert p.reasons[0].startswith("bf16")
    assert p.reasons[1].startswith("Batch:")
    assert p.reasons[2].startswith("Candidates, fastest to most frugal: ZeRO-0, ZeRO-1, ZeRO-2, ZeRO-3")
    assert all(r.endswith(".") for r in p.reasons)
    assert any("tokens per optimizer step" in r and "1M" in r for r in p.reasons)


def test_a_later_stage_without_checkpointing_beats_an_earlier_one_with_it():
    # 7B on 8 x L40S at 512 tokens: without checkpointing, ZeRO-1 and ZeRO-2 fit less than the comfortable
    # 8 x 512 = 4096 tokens per micro-batch, so they would need it; ZeRO-3 fits micro-batch 8 without recomputation.
    p = plan(LLAMA7, resolve_hardware("l40s", gpus_per_node=8), Training(seq_len=512))
    d = p.decision
    assert (d.zero_stage, d.micro_batch_size, d.gradient_checkpointing) == (3, 8, False)
    earlier = [c for c in p.candidates if c.setup.zero_stage in (1, 2) and _no_offload(c)]
    assert all(c.fits and c.setup.gradient_checkpointing for c in earlier)


def test_smaller_buffers_only_when_they_change_the_outcome():
    # One 40 GB A100, 512 tokens: with HF's auto buckets and overlap_comm (302 MB) only micro-batch 4 fits next to
    # ZeRO-Offload's 13.5 GB of 16-bit weights; quarter-size buckets without overlap reach the comfortable 8.
    p = plan(LLAMA7, resolve_hardware("a100-40gb"), Training(seq_len=512))
    d = p.decision
    assert (d.zero_stage, d.offload_optimizer, d.micro_batch_size) == (2, "cpu", 8)
    assert not d.overlap_comm and d.reduce_bucket_size == 4096**2 // 4
    assert p.ds_config["zero_optimization"]["reduce_bucket_size"] == 4096**2 // 4  # explicit, not "auto"
    assert any("overlap_comm off" in r for r in p.reasons)
    # With the auto sizes it would have been micro-batch 4: the same plan forced to 4 keeps overlap_comm on.
    p4 = plan(LLAMA7, resolve_hardware("a100-40gb"), Training(seq_len=512, micro_batch=4))
    assert p4.decision.overlap_comm and p4.decision.reduce_bucket_size == 4096**2


def test_planning_imports_neither_torch_nor_deepspeed():
    code = ("import sys; from zerokit.models.resolve import resolve_model; from zerokit.hardware import resolve_hardware;"
            "from zerokit.planner import plan, Training;"
            "plan(resolve_model('llama-2-7b'), resolve_hardware('a100-80gb'), Training(seq_len=4096));"
            "print(sorted(m for m in ('torch', 'deepspeed', 'transformers') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == "[]"


def test_requested_micro_batch_is_kept_when_any_setup_fits_it():
    hw = resolve_hardware("a100-80gb", gpus_per_node=8)
    p = plan(LLAMA7, hw, Training(seq_len=4096, micro_batch=4))
    d = p.decision
    assert d.fits and d.micro_batch_size == 4
    # 4 x 4096 tokens without checkpointing need ~100 GB of activations: checkpointing is what makes 4 fit.
    assert d.gradient_checkpointing
    # Nothing holds 64: the first setup that fits, at the largest micro-batch up to 64 (a divisor of the 192 per GPU).
    p = plan(LLAMA7, hw, Training(seq_len=4096, micro_batch=64, global_batch=1536))
    d = p.decision
    assert d.fits and d.micro_batch_size < 64 and 192 % d.micro_batch_size == 0
    assert d.micro_batch_size * d.gradient_accumulation_steps * 8 == 1536

"""The cost layer against real DeepSpeed trainings: every case of tests/data/realrun/memory.json, re-planned.

The golden file holds 2-rank DeepSpeed 0.19.8 runs on the CPU accelerator whose every allocation was traced
(`python benchmarks/realrun_memory.py --run all --update-golden` regenerates it). These tests need neither torch
nor deepspeed: they plan each case again and compare with what was measured. The slow test at the end measures
a small sample live.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _support import benchmark

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "data" / "realrun" / "memory.json"


def _harness():
    return benchmark("realrun_memory")


harness = _harness()
GOLDEN_DATA = json.loads(GOLDEN.read_text())
CASES = sorted(GOLDEN_DATA["cases"])


def test_the_golden_file_covers_every_case_of_the_harness():
    assert set(CASES) == {c["name"] for c in harness.CASES}
    assert GOLDEN_DATA["versions"]["deepspeed"].startswith("0.19.")
    families = {harness.model_config(c)["model_type"] for c in harness.CASES}
    assert {"llama", "qwen3", "mixtral", "qwen2_moe"} <= families
    stages = {(c["zero_stage"], c["offload_optimizer"], c["offload_param"]) for c in harness.CASES}
    assert {(0, "none", "none"), (1, "none", "none"), (2, "none", "none"), (3, "none", "none"), (2, "cpu", "none"),
            (3, "cpu", "none"), (3, "cpu", "cpu"), (3, "nvme", "nvme")} <= stages
    assert {c["precision"] for c in harness.CASES} >= {"bf16", "fp32"}
    assert {c["gradient_accumulation"] for c in harness.CASES} >= {1, 4}
    assert {c["gradient_checkpointing"] for c in harness.CASES} == {False, True}
    # LoRA and QLoRA (bitsandbytes NF4 base), at ZeRO-2 and ZeRO-3, with and without checkpointing
    peft = {(c.get("peft"), c["zero_stage"], c["gradient_checkpointing"]) for c in harness.CASES}
    assert {("lora", 2, False), ("lora", 3, False), ("lora", 2, True), ("qlora", 2, False), ("qlora", 3, False),
            ("qlora", 2, True)} <= peft


@pytest.mark.parametrize("name", CASES)
def test_the_peak_phase_is_within_3_percent_of_the_traced_run(name):
    rows = harness.compare(GOLDEN_DATA["cases"][name])
    peak = next(r for r in rows if r["peak"])
    assert abs(peak["error"]) <= harness.TOLERANCE, peak
    assert all(r["measured"] > 0 for r in rows)
    # the plan names the phase that really is the peak, or one within the tolerance of it
    predicted_peak = max((r for r in rows if not r.get("host")), key=lambda r: r["predicted"])
    assert predicted_peak["phase"] == peak["phase"] or \
        abs(predicted_peak["measured"] - peak["measured"]) <= harness.TOLERANCE * peak["measured"], rows


@pytest.mark.parametrize("name", [n for n in CASES if GOLDEN_DATA["cases"][n]["case"]["offload_optimizer"] != "none"])
def test_host_steady_state_is_within_10_percent(name):
    host = next(r for r in harness.compare(GOLDEN_DATA["cases"][name]) if r.get("host"))
    assert abs(host["error"]) <= harness.HOST_TOLERANCE, host


def test_leftover_gradients_are_taken_out_rank_by_rank():
    """A rank that began the step holding leftovers counts less them; a rank that legitimately peaks higher counts."""
    case = {"case": {"steps": 1}, "runs": [{"ranks": [
        {"phases": {"forward:1:0": {"start": 110, "peak": 150, "host": 0, "start_host": 0},
                    "backward:1:0": {"start": 150, "peak": 160, "host": 0},
                    "optimizer_step:1:0": {"start": 120, "peak": 130, "host": 0}}},
        {"phases": {"forward:1:0": {"start": 100, "peak": 140, "host": 0, "start_host": 0},
                    "backward:1:0": {"start": 140, "peak": 155, "host": 0},
                    "optimizer_step:1:0": {"start": 110, "peak": 120, "host": 0}}},
    ]}]}
    got = harness.measured(case)
    assert got["forward"] == (140, 150)  # rank 0 started 10 bytes up: 150 - 10
    assert got["backward"] == (155, 160)  # rank 1's 155 is its own, above rank 0's 160 - 10
    # a cleaner start seen in another run of the case: both ranks' leftovers come out
    assert harness.clean_start(case) == 100
    assert harness.measured(case, base=95)["forward"] == (135, 150)
    assert harness.measured(case, base=120)["forward"] == (140, 150)  # a dirtier base changes nothing


@pytest.mark.slow
def test_a_live_sample_reproduces_the_golden_figures(tmp_path):
    """Re-measure two cases for real (ZeRO-2 and ZeRO-3, 2 ranks through the deepspeed runner). One run can leave
    leftover gradients on both ranks (the golden llama-z3 has a rank that began its step 5.1 MB up): they are
    netted out against the golden runs' clean start."""
    pytest.importorskip("deepspeed")
    for name in ("llama-z2", "llama-z3"):
        live = harness.measure_case(harness.BY_NAME[name], repeats=1)
        for row in harness.compare(live, base=harness.clean_start(GOLDEN_DATA["cases"][name])):
            if row["peak"]:
                assert abs(row["error"]) <= harness.TOLERANCE, row


LIVE = json.loads((ROOT / "tests" / "data" / "realrun" / "live.json").read_text())


def test_zero3_with_a_live_limit_below_the_model():
    """stage3_max_live_parameters (and the reuse distance a plan writes beside it) below the miniature models'
    4-7M parameters, as a frugal rung's 1e8 is below a 7B's. The llama at 1M: the reuse window keeps the head
    (1.05M); at 2M DeepSpeed's prefetcher keeps the last modules up to the limit (the head and layer 3, 1.77M), where
    the window alone kept the head and the plan was 3.2% under (now 0.8%). qwen3 (a tied head) at 1.5M: 1.5% under. Mixtral at
    3M: 0.7% under; it was 7.1% under before the experts' saved views (`kept_with_views`): its forward peak held
    12.19 MB of gathered buffers, 6.1M parameters, where the window keeps 2.82M and the released layers' stacked
    experts (3.15M) stay allocated through the views grouped_mm saved for backward. At 1M the window keeps the head
    alone and all three layers' experts stay (0.9% over; 8.9% under without them); with checkpointing at 3M no view
    is saved (0.9% under). QLoRA at 1M: bitsandbytes keeps a view of each gathered 4-bit weight in its autograd node
    until the graph goes (`quantized_held`): 4.6% under without checkpointing and 6.4% with it before, 1.2% and
    0.3% since. A second MoE family the views rule was not fitted on, Qwen3-MoE (eight experts of 256): at 3M
    0.5% under and at 1M 1.0% over, where without the views they would be 7.1% and 8.9% under. LoRA on Mixtral's
    attention at 3M: the frozen experts are held alike, 1.6% under (14.7% without the views). A third family,
    measured after the rule, Qwen2-MoE (a shared expert beside eight of 256): 1.2% under at 3M, 0.7% over at 1M."""
    names = {"llama-z3-live2m", "llama-z3-live1m", "qwen3-z3-live1500k", "mixtral-z3-live3m", "mixtral-z3-live1m",
             "mixtral-z3-ckpt-live3m", "qwen3moe-z3-live3m", "qwen3moe-z3-live1m", "mixtral-lora-z3-live3m",
             "llama-qlora-z3-live1m", "llama-qlora-z3-ckpt-live1m", "qwen2moe-z3-live3m", "qwen2moe-z3-live1m"}
    assert set(LIVE["cases"]) == {c["name"] for c in harness.LIVE_CASES} == names
    for name, m in LIVE["cases"].items():
        assert m["case"]["zero_stage"] == 3 and m["case"]["max_live_parameters"] < 7_000_000
        peak = next(r for r in harness.compare(m) if r["peak"])
        assert abs(peak["error"]) <= harness.TOLERANCE, (name, peak)

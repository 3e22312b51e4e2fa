"""The cost layer against real DeepSpeed trainings on GPUs, re-planned: tests/data/gpu/ (one H100 80 GB,
2026-11-23) and tests/data/gpu/2026-11-26-h200 (one H200 141 GB).

`python benchmarks/gpu_runs.py --measure [--out DIR]` on a GPU machine wrote the golden data: a 0.9B llama trained
by the `deepspeed` runner with each plan's own ds_config, the caching allocator's peaks read phase by phase. These
tests need neither torch nor a GPU: they plan each case again (with the probe profile taken with the runs) and
compare.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "gpu"


def _harness():
    spec = importlib.util.spec_from_file_location("gpu_runs", ROOT / "benchmarks" / "gpu_runs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gpu_runs", module)
    spec.loader.exec_module(module)
    return module


harness = _harness()
# directory, the GPU its data came from, the planned case's (stage, micro-batch, checkpointing)
GPUS = {"h100": (DATA, "H100", (0, 16, False)), "h200": (DATA / "2026-11-26-h200", "H200", (0, 32, False))}
MEASURED = {gpu: json.loads((d / "measured.json").read_text()) for gpu, (d, _, _) in GPUS.items()}
PROFILE = {gpu: json.loads((d / "profile.json").read_text()) for gpu, (d, _, _) in GPUS.items()}
RUNS = [(gpu, name) for gpu in GPUS for name in sorted(MEASURED[gpu]["cases"])]


def _plan(gpu: str, name: str):
    from zerokit.perf import load_profile

    perf = load_profile(str(GPUS[gpu][0] / "profile.json"))
    measured = MEASURED[gpu]
    return harness.plan_case(measured["cases"][name]["setup"], perf,
                             PROFILE[gpu]["measurements"]["device_memory_bytes"], measured["ranks"],
                             measured["model"], measured["seq_len"])


@pytest.mark.parametrize("gpu", GPUS)
def test_the_golden_data_is_a_real_gpu_run_of_every_case(gpu):
    measured = MEASURED[gpu]
    assert set(harness.CASES) <= set(measured["cases"])
    assert GPUS[gpu][1] in measured["device"] and measured["versions"]["deepspeed"].startswith("0.19.")
    for name, run in measured["cases"].items():
        assert "error" not in run and run["memory"], name
        assert run["median_s"] > 0 and len(run["steps_s"]) >= 8


@pytest.mark.parametrize("gpu,name", RUNS)
def test_every_phase_is_within_3_percent_of_the_allocators_peak(gpu, name):
    result, memory = _plan(gpu, name), MEASURED[gpu]["cases"][name]["memory"]
    peak = max(memory["phases"][p]["allocated"] for p in harness.PHASES)
    for phase in harness.PHASES:
        m = result.phases[phase]
        error = (m.total - m.overhead - memory["phases"][phase]["allocated"]) / peak
        assert abs(error) <= 0.03, (phase, error)


@pytest.mark.parametrize("gpu,name", RUNS)
def test_the_plans_total_covers_the_live_tensors_and_what_lies_outside_the_allocator(gpu, name):
    result, memory = _plan(gpu, name), MEASURED[gpu]["cases"][name]["memory"]
    live = max(memory["phases"][p]["allocated"] for p in harness.PHASES) + memory["outside_allocator"]
    assert max(result.phases[p].total for p in harness.PHASES) >= live


@pytest.mark.parametrize("gpu", GPUS)
def test_the_planned_case_is_the_plans_own_choice_and_it_ran(gpu):
    """Nothing forced: the planner filled 93% of the H100's 85 GB (micro-batch 16, no checkpointing) and 95% of the
    H200's 150 GB (micro-batch 32), and both runs trained without running out of memory."""
    result, planned = _plan(gpu, "planned"), MEASURED[gpu]["cases"]["planned"]
    d = result.decision
    assert (d.zero_stage, d.micro_batch_size, d.gradient_checkpointing) == GPUS[gpu][2]
    assert planned["ds_config"]["train_micro_batch_size_per_gpu"] == GPUS[gpu][2][1]
    held = max(p["reserved"] for p in planned["memory"]["phases"].values())
    assert held > 0.9 * planned["memory"]["device_total"] - 2e9

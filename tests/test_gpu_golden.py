"""The cost layer against real DeepSpeed trainings on an H100: tests/data/gpu/measured.json, re-planned.

`python benchmarks/gpu_runs.py --measure` on a GPU machine wrote the golden data: a 0.9B llama trained by the
`deepspeed` runner with each plan's own ds_config, the caching allocator's peaks read phase by phase. These tests
need neither torch nor a GPU: they plan each case again (with the committed probe profile) and compare.
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
MEASURED = json.loads((DATA / "measured.json").read_text())
PROFILE = json.loads((DATA / "profile.json").read_text())
CASES = sorted(MEASURED["cases"])


def _plan(name: str):
    from zerokit.perf import load_profile

    perf = load_profile(str(DATA / "profile.json"))
    return harness.plan_case(MEASURED["cases"][name]["setup"], perf, PROFILE["measurements"]["device_memory_bytes"],
                             MEASURED["ranks"], MEASURED["model"], MEASURED["seq_len"])


def test_the_golden_data_is_a_real_gpu_run_of_every_case():
    assert set(CASES) == set(harness.CASES)
    assert "H100" in MEASURED["device"] and MEASURED["versions"]["deepspeed"].startswith("0.19.")
    for name in CASES:
        run = MEASURED["cases"][name]
        assert "error" not in run and run["memory"], name
        assert run["median_s"] > 0 and len(run["steps_s"]) >= 8


@pytest.mark.parametrize("name", CASES)
def test_every_phase_is_within_3_percent_of_the_allocators_peak(name):
    result, memory = _plan(name), MEASURED["cases"][name]["memory"]
    peak = max(memory["phases"][p]["allocated"] for p in harness.PHASES)
    for phase in harness.PHASES:
        m = result.phases[phase]
        error = (m.total - m.overhead - memory["phases"][phase]["allocated"]) / peak
        assert abs(error) <= 0.03, (phase, error)


@pytest.mark.parametrize("name", CASES)
def test_the_plans_total_covers_the_live_tensors_and_what_lies_outside_the_allocator(name):
    result, memory = _plan(name), MEASURED["cases"][name]["memory"]
    live = max(memory["phases"][p]["allocated"] for p in harness.PHASES) + memory["outside_allocator"]
    assert max(result.phases[p].total for p in harness.PHASES) >= live


def test_the_planned_case_is_the_plans_own_choice_and_it_ran():
    """Nothing forced: the planner filled 93% of the 85 GB GPU (micro-batch 16, no checkpointing) and the run
    trained without running out of memory."""
    result = _plan("planned")
    d = result.decision
    assert (d.zero_stage, d.micro_batch_size, d.gradient_checkpointing) == (0, 16, False)
    assert MEASURED["cases"]["planned"]["ds_config"]["train_micro_batch_size_per_gpu"] == 16
    held = max(p["reserved"] for p in MEASURED["cases"]["planned"]["memory"]["phases"].values())
    assert held > 0.9 * MEASURED["cases"]["planned"]["memory"]["device_total"] - 2e9

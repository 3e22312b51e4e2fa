"""The step-time model against real 2-rank DeepSpeed trainings timed on this CPU (no torch needed here).

tests/data/step_time/measured.json holds the median steady-state step time of each setup and profile.json the
`zerokit probe` profile taken with them; both are rewritten by `python benchmarks/step_time.py --measure`.

The issue's target is 20%, and this test holds the model to it on every case. The committed data: five rounds,
each a `zerokit probe` and then every case once (load average 1.5-2.3 with the two ranks running), with the probe's
reference llama steps under ZeRO-2 and ZeRO-3 engines setting `compute_scale` (1.56: forward and backward inside a
DeepSpeed step take that much longer than the kernel figures say) and ZeRO-3's per-module cost (726 us). Worst
error 16.8% (zero3_offload_param). The ranking is checked wherever two setups differ by > 15% and by more than the
spread of either one's runs (slowest run / fastest run), so that the measurement itself tells them apart: all 7
such pairs are ranked as measured. (zero3 against zero3_offload_param differ by 23% in these medians but not in
the three earlier measurements of this session, and their runs overlap: the model has them within 2%.)
"""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path

import pytest

from zerokit.models.params import count_parameters
from zerokit.perf import load_profile, step_time

DATA = Path(__file__).parent / "data" / "step_time"
TOLERANCE = 0.20
MEASURED = json.loads((DATA / "measured.json").read_text())
PERF = load_profile(str(DATA / "profile.json"))


def predicted(case: dict) -> float:
    """The model's step time for a case, with the bucket sizes its ds_config ran with (a plan's)."""
    model, setup, zero = MEASURED["model"], case["setup"], case["ds_config"]["zero_optimization"]
    return step_time(model, PERF, parameters=count_parameters(model)[0], seq_len=MEASURED["seq_len"],
                     micro_batch=MEASURED["micro_batch"], grad_accum=setup.get("accumulation", 1),
                     gpus_per_node=MEASURED["ranks"], zero_stage=setup["stage"],
                     offload_optimizer=setup.get("offload_optimizer", "none"),
                     offload_param=setup.get("offload_param", "none"),
                     gradient_checkpointing=setup.get("checkpointing", False), overlap_comm=zero["overlap_comm"],
                     reduce_bucket_size=zero["reduce_bucket_size"],
                     allgather_bucket_size=zero.get("allgather_bucket_size", 5e8),
                     prefetch_bucket_size=zero.get("stage3_prefetch_bucket_size", 5e7),
                     persistence_threshold=zero.get("stage3_param_persistence_threshold", 1e5)).step_time_s


def test_golden_data_covers_the_six_setups():
    assert set(MEASURED["cases"]) == {"zero1", "zero3", "zero2_ckpt", "zero2_accum4", "zero2_offload_optimizer",
                                      "zero3_offload_param"}
    assert MEASURED["command"] == "python benchmarks/step_time.py --measure"
    assert PERF.device == "cpu" and PERF.ranks_measured == MEASURED["ranks"] == 2


def test_the_cases_ran_with_the_buckets_a_plan_writes():
    """What a zerokit user runs: the ladder's first rung (HF's "auto" sizes for the model's hidden size)."""
    from zerokit.memory.buffers import buffer_ladder

    for name, case in MEASURED["cases"].items():
        zero = case["ds_config"]["zero_optimization"]
        b = buffer_ladder(MEASURED["model"]["hidden_size"], case["setup"]["stage"])[0]
        assert zero["reduce_bucket_size"] == b.reduce_bucket_size == MEASURED["model"]["hidden_size"] ** 2, name
        if zero["stage"] == 3:
            assert zero["stage3_prefetch_bucket_size"] == b.prefetch_bucket_size, name
            assert zero["stage3_param_persistence_threshold"] == b.param_persistence_threshold, name
        else:
            assert zero["allgather_bucket_size"] == b.allgather_bucket_size, name


@pytest.mark.parametrize("name", sorted(MEASURED["cases"]))
def test_within_20_percent_of_measured(name):
    case = MEASURED["cases"][name]
    assert predicted(case) == pytest.approx(case["median_s"], rel=TOLERANCE)


def test_ranking_matches_where_the_runs_tell_setups_apart():
    cases = MEASURED["cases"]
    checked = 0
    for a, b in combinations(sorted(cases), 2):
        ra = [r["median_s"] for r in cases[a]["runs"]]
        rb = [r["median_s"] for r in cases[b]["runs"]]
        ma, mb = cases[a]["median_s"], cases[b]["median_s"]
        ratio, spread = max(ma, mb) / min(ma, mb), max(max(ra) / min(ra), max(rb) / min(rb))
        if ratio > 1.15 and ratio > spread:
            assert (predicted(cases[a]) < predicted(cases[b])) == (ma < mb), (a, b)
            checked += 1
    assert checked >= 7  # 7 pairs on the committed data

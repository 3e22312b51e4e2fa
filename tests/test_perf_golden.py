"""The step-time model against real 2-rank DeepSpeed trainings timed on two CPUs (no torch needed here).

Each measurement directory holds measured.json (the median steady-state step time of each setup, over rounds that
each probe and then run every case once) and profile.json (the median `zerokit probe` profile of those rounds);
`python benchmarks/step_time.py --measure [--data DIR]` rewrites them.

- tests/data/step_time: an Intel Xeon with AMX (bf16 in hardware), five rounds, worst error 9.6% (19.5% before the
  bucket flushes were counted as DeepSpeed flushes, `zerokit.perf.model.flushes`), all 7 pairs of setups that the
  runs tell apart ranked as measured.
- tests/data/step_time/2026-11-25-amd: an AMD EPYC without AVX-512 (bf16 emulated, steps ~15x slower), three
  rounds, worst error 4.5% (5.3% before), 5 pairs told apart and ranked as measured.
- tests/data/step_time/2026-11-26-intel: an Intel Xeon with AMX again, three rounds with the probe and model that
  price offload's host casts, worst error 3.5% (10.8% before), 10 pairs told apart and ranked as measured.

- tests/data/step_time/2026-11-26-lora: LoRA (all-linear rank 8, dropout 0.05) at ZeRO-2 and ZeRO-3 beside full
  fine-tuning at ZeRO-1 and ZeRO-3, three rounds, worst error 14.3%, 5 pairs told apart and ranked as measured.
- tests/data/step_time/2026-11-26-qlora: QLoRA (the same adapters on a bitsandbytes NF4 base) at ZeRO-2 with and
  without checkpointing, beside LoRA ZeRO-2 and full ZeRO-1, five rounds, worst error 10.4% (16.6% before), 3 pairs
  ranked as measured. (2026-11-26-qlora-noisy, three rounds the same afternoon while the VM's speed shifted 2x between runs,
  reached 49.2%: kept, not held; the README says why.)
- tests/data/step_time/2026-11-27-amd-input-grad: LoRA and QLoRA at ZeRO-2 and ZeRO-3 beside full ZeRO-1 on the AMD
  EPYC that emulates bf16, five rounds with the probe that times the backward's input-gradient product alone:
  worst error 12.5% (the same cases were 33-36% fast without that curve, 2026-11-27-amd-qlora-zero3, kept).
- tests/data/step_time/2026-11-27-amd-engine256: all eleven cases (the six, LoRA and QLoRA) on the same AMD EPYC,
  three rounds with the probe whose reference engines are shorter (about a minute a probe): worst error 6.0% (7.1%
  since the adapters' ZeRO-3 gathers are priced), 17 pairs told apart and ranked as measured.
- tests/data/step_time/2026-11-28-intel: all eleven cases on an Intel Xeon with AMX (a fresh machine), three rounds
  with the probe and model of that day: worst error 9.1% (10.7% since the adapters' ZeRO-3 gathers are priced,
  11.0% since the flushes are counted as DeepSpeed flushes), 39 pairs told apart and ranked as measured.
- tests/data/step_time/2026-11-28-amd-all: the eleven and LoRA with trainable copies on an AMD EPYC with AVX-512
  BF16, three rounds: worst error 8.7% (15.8% before the flushes were counted as DeepSpeed flushes); all 46 pairs
  ranked as measured (45 until fp32 LoRA adapters' casts were priced).
- tests/data/step_time/2026-11-28-amd-all2: the same twelve on the same machine 75 minutes later: worst error 16.0%
  (full training was planned 9-24% slow, worst +23.5%, before the flushes were counted as DeepSpeed flushes), 41 of
  43 pairs ranked as measured (41 until fp32 LoRA adapters' casts were priced).
  (2026-11-28-amd-all3 and -all4, the same twelve that evening while the VM ran 10-30% slower and its rounds spread
  by up to 40%, reached 27.8% and 26.7%: kept, not held; the README says why.)

- tests/data/step_time/2026-12-07-amd: all fourteen cases on an AMD EPYC with AVX-512 BF16, one round after a fresh
  probe, eight days after the time model last changed (2026-11-29): worst error 17.7%, all 70 pairs ranked as
  measured.

The issue's target is 20% on every case. The ranking is checked wherever two setups differ by > 15% and by more
than the spread of either one's runs (slowest run / fastest run), so that the measurement itself tells them apart.
(A later Intel measurement, tests/data/step_time/2026-11-23-1220, reached 29.5%, 16.5% since the flushes are
counted as DeepSpeed flushes: the README says why it is kept and not held here.)
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import replace
from itertools import combinations
from pathlib import Path

import pytest
from _support import benchmark

from zerokit.models.params import count_parameters
from zerokit.perf import load_profile, profile_from_json, step_time

CASES = ("zero1", "zero3", "zero2_ckpt", "zero2_accum4", "zero2_offload_optimizer", "zero3_offload_param")

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "step_time"
TOLERANCE = 0.20


class Measurement:
    """One committed measurement: its trainings, the probe profile taken with them, and how many pairs of setups
    its runs tell apart (the ranking check must not pass by checking none)."""

    def __init__(self, directory: Path, pairs: int):
        self.measured = json.loads((directory / "measured.json").read_text())
        self.perf = load_profile(str(directory / "profile.json"))
        if "link" in self.measured:  # ranks on nodes of their own: the link between them, as gloo measured it
            self.perf = replace(self.perf, inter_node_bandwidth=self.measured["link"]["bus_bandwidth"])
        self.pairs = pairs


# Two machines: the Intel Xeon with AMX the model was built on (bf16 in hardware), and an AMD EPYC without
# AVX-512 (bf16 emulated, each step ~15x slower) whose probe fits its reference workloads to the machine.
MEASUREMENTS = {"intel-xeon-amx": (DATA, 7), "amd-epyc": (DATA / "2026-11-25-amd", 5),
                "intel-xeon-amx-2026-11-26": (DATA / "2026-11-26-intel", 10)}


@pytest.fixture(scope="module", params=sorted(MEASUREMENTS))
def m(request) -> Measurement:
    return Measurement(*MEASUREMENTS[request.param])


def predicted(m: Measurement, case: dict) -> float:
    """The model's step time for a case, with the bucket sizes its ds_config ran with (a plan's); a LoRA case with
    its adapters as a plan passes them (`PeftPlan.lora_work`)."""
    model, setup, zero = m.measured["model"], case["setup"], case["ds_config"]["zero_optimization"]
    trainable = lora = None
    saved = (0, 0)
    if case.get("lora_config"):
        from zerokit.models.lora import lora_parameters, saved_modules, saved_work

        cfg = case["lora_config"]
        count = lora_parameters(model, cfg["r"], cfg["target_modules"])
        trainable, lora = count.trainable, (cfg["r"], cfg["lora_dropout"], count.linears)
        # PEFT's trainable copies, as a plan counts and prices them
        saved = saved_work(saved_modules(model, cfg.get("modules_to_save", [])))
        trainable += saved[0]
        if case.get("quantization_config"):  # QLoRA: the 4-bit weights and linears, as zerokit.models.quant counts
            from zerokit.models.quant import frozen_base_bytes

            base = frozen_base_bytes(model, "qlora", "bf16")
            lora += (base.quantized_parameters, base.quantized_modules)
    return step_time(model, m.perf, parameters=count_parameters(model)[0], seq_len=m.measured["seq_len"],
                     trainable_parameters=trainable, lora=lora, saved=saved,
                     micro_batch=m.measured["micro_batch"], grad_accum=setup.get("accumulation", 1),
                     gpus_per_node=m.measured.get("gpus_per_node", m.measured["ranks"]),
                     nodes=m.measured.get("nodes", 1), zero_stage=setup["stage"],
                     offload_optimizer=setup.get("offload_optimizer", "none"),
                     offload_param=setup.get("offload_param", "none"),
                     gradient_checkpointing=setup.get("checkpointing", False), overlap_comm=zero["overlap_comm"],
                     reduce_bucket_size=zero["reduce_bucket_size"],
                     allgather_bucket_size=zero.get("allgather_bucket_size", 5e8),
                     prefetch_bucket_size=zero.get("stage3_prefetch_bucket_size", 5e7),
                     persistence_threshold=zero.get("stage3_param_persistence_threshold", 1e5),
                     reuse_distance=zero.get("stage3_max_reuse_distance", 1e9)).step_time_s


def test_golden_data_covers_the_six_setups(m):
    assert set(m.measured["cases"]) == set(CASES)
    assert m.measured["command"] == "python benchmarks/step_time.py --measure"
    assert m.perf.device == "cpu" and m.perf.ranks_measured == m.measured["ranks"] == 2


def test_the_cases_ran_with_the_buckets_a_plan_writes(m):
    """What a zerokit user runs: the ladder's first rung (HF's "auto" sizes for the model's hidden size)."""
    from zerokit.memory.buffers import buffer_ladder

    hidden = m.measured["model"]["hidden_size"]
    for name, case in m.measured["cases"].items():
        zero = case["ds_config"]["zero_optimization"]
        b = buffer_ladder(hidden, case["setup"]["stage"])[0]
        assert zero["reduce_bucket_size"] == b.reduce_bucket_size == hidden ** 2, name
        if zero["stage"] == 3:
            assert zero["stage3_prefetch_bucket_size"] == b.prefetch_bucket_size, name
            assert zero["stage3_param_persistence_threshold"] == b.param_persistence_threshold, name
        else:
            assert zero["allgather_bucket_size"] == b.allgather_bucket_size, name


@pytest.mark.parametrize("name", CASES)
def test_within_20_percent_of_measured(m, name):
    case = m.measured["cases"][name]
    assert predicted(m, case) == pytest.approx(case["median_s"], rel=TOLERANCE)


def told_apart(m: Measurement) -> list[tuple[str, str, bool]]:
    """(case, case, whether the model ranks them as measured) for every pair whose medians differ by > 15% and by
    more than the spread of either one's runs (slowest / fastest)."""
    cases = m.measured["cases"]
    pairs = []
    for a, b in combinations(sorted(cases), 2):
        ra = [r["median_s"] for r in cases[a]["runs"]]
        rb = [r["median_s"] for r in cases[b]["runs"]]
        ma, mb = cases[a]["median_s"], cases[b]["median_s"]
        ratio, spread = max(ma, mb) / min(ma, mb), max(max(ra) / min(ra), max(rb) / min(rb))
        if ratio > 1.15 and ratio > spread:
            pairs.append((a, b, (predicted(m, cases[a]) < predicted(m, cases[b])) == (ma < mb)))
    return pairs


def test_ranking_matches_where_the_runs_tell_setups_apart(m):
    pairs = told_apart(m)
    assert all(same for _, _, same in pairs), [(a, b) for a, b, same in pairs if not same]
    assert len(pairs) >= m.pairs


# LoRA (2026-11-26, the Intel Xeon with AMX, three rounds): all-linear rank 8 with the plan's dropout 0.05 at ZeRO-2
# and ZeRO-3, beside full fine-tuning at ZeRO-1 and ZeRO-3 in the same rounds, with the probe that measures the
# dropout's rate (137-150 M elements/s here: its random numbers cost more than the LoRA products). Every case within
# 20% (worst 14.3%, ZeRO-3 LoRA), all 5 pairs the runs tell apart ranked as measured. Before the adapters were
# priced by their shapes, kernels, dropout and hooks, a first measurement had the LoRA cases 37% and 45% slow.
LORA = Measurement(DATA / "2026-11-26-lora", 5)
LORA_CASES = ("zero1", "zero3", "lora_zero2", "lora_zero3")


@pytest.mark.parametrize("name", LORA_CASES)
def test_lora_cases_within_20_percent_of_measured(name):
    assert set(LORA.measured["cases"]) == set(LORA_CASES)
    assert LORA.perf.dropout_elements_per_s > 0 and LORA.perf.sources["dropout_elements_per_s"] == "probe"
    case = LORA.measured["cases"][name]
    assert predicted(LORA, case) == pytest.approx(case["median_s"], rel=TOLERANCE)
    if name.startswith("lora"):
        assert case["lora_config"]["r"] == 8 and case["lora_config"]["target_modules"] == "all-linear"
        assert case["lora_config"]["lora_dropout"] == 0.05


def test_lora_ranking_matches_where_the_runs_tell_setups_apart():
    test_ranking_matches_where_the_runs_tell_setups_apart(LORA)


# QLoRA (2026-11-26, the Intel Xeon with AMX, three rounds): the same adapters on a bitsandbytes NF4 base (double
# quantization, bf16 compute: the plan's BitsAndBytesConfig, `from_pretrained` as a plan's code loads it) at ZeRO-2,
# with and without checkpointing, beside LoRA at ZeRO-2 and full ZeRO-1 in the same rounds, with the probe that
# times PEFT-adapted 4-bit linears against bf16 ones (`quantized_linear_overhead_s`, `dequant_elements_per_s`).
QLORA = Measurement(DATA / "2026-11-26-qlora", 3)
QLORA_CASES = ("zero1", "lora_zero2", "qlora_zero2", "qlora_zero2_ckpt")


@pytest.mark.parametrize("name", QLORA_CASES)
def test_qlora_cases_within_20_percent_of_measured(name):
    assert set(QLORA.measured["cases"]) == set(QLORA_CASES)
    assert QLORA.perf.sources["quantized_linear"] == "probe" and QLORA.perf.quantized_linear_overhead_s > 0
    case = QLORA.measured["cases"][name]
    assert predicted(QLORA, case) == pytest.approx(case["median_s"], rel=TOLERANCE)
    if name.startswith("qlora"):
        assert case["quantization_config"]["bnb_4bit_quant_type"] == "nf4"
        assert case["quantization_config"]["bnb_4bit_use_double_quant"] is True


def test_qlora_ranking_matches_where_the_runs_tell_setups_apart():
    test_ranking_matches_where_the_runs_tell_setups_apart(QLORA)


# LoRA and QLoRA on the AMD EPYC that emulates bf16 (2026-11-27, five rounds): there the backward's input-gradient
# product (g W, all a frozen base runs) is the slow one, 1.1-1.8 GFLOP/s against 3-7 for the forward, so a LoRA step
# takes nearly as long as full fine-tuning. The probe times that product alone (`matmul_input_grad`); without it
# the model split the backward evenly and these cases came out 33-36% fast (2026-11-27-amd-qlora-zero3, kept).
FROZEN = Measurement(DATA / "2026-11-27-amd-input-grad", 0)
FROZEN_CASES = ("zero1", "lora_zero2", "lora_zero3", "qlora_zero2", "qlora_zero3")


@pytest.mark.parametrize("name", FROZEN_CASES)
def test_frozen_base_cases_within_20_percent_of_measured(name):
    assert set(FROZEN.measured["cases"]) == set(FROZEN_CASES)
    assert FROZEN.perf.sources["matmul_input_grad"] == "probe" and FROZEN.perf.matmul_input_grad["bf16"]
    case = FROZEN.measured["cases"][name]
    assert predicted(FROZEN, case) == pytest.approx(case["median_s"], rel=TOLERANCE)


@pytest.mark.parametrize("name", FROZEN_CASES[1:])
def test_frozen_base_cases_need_the_input_gradient_curve(name):
    """The same profile without the curve (the even split, as before it was measured) misses every LoRA/QLoRA case
    by more than 20%: the measurement is what tells the model the frozen base's backward."""
    even = copy.copy(FROZEN)
    even.perf = replace(FROZEN.perf, matmul_input_grad={})
    case = FROZEN.measured["cases"][name]
    assert predicted(even, case) < (1 - TOLERANCE) * case["median_s"]


def test_frozen_base_ranking_matches_where_the_runs_tell_setups_apart():
    test_ranking_matches_where_the_runs_tell_setups_apart(FROZEN)


# Every case at once on the AMD EPYC (2026-11-27, three rounds), with the probe whose reference engines train a
# 256-wide llama in steps of about 0.7 s (ENGINE_STEP_BUDGET_S) for 15 s of rounds, where a 384-wide one had
# taken 1.4 s steps for 30 s: the probe took about a minute (63 s here) instead of 83-87 s. Worst error 6.0% (7.1%
# since the adapters' ZeRO-3 gathers are priced, 13.3% since fp32 adapters' casts are: LoRA at ZeRO-3, planned slow),
# 17 pairs told apart and ranked as measured: the shorter reference lost nothing the model needs.
ENGINES = Measurement(DATA / "2026-11-27-amd-engine256", 17)
ALL_CASES = CASES + ("lora_zero2", "lora_zero3", "qlora_zero2", "qlora_zero2_ckpt", "qlora_zero3")


def test_the_short_reference_engines_ran():
    assert set(ENGINES.measured["cases"]) == set(ALL_CASES)
    for probe in json.loads((DATA / "2026-11-27-amd-engine256" / "profile.json").read_text())["measurements"]["rounds"]:
        engines = probe["engine_step"]
        assert engines["model"]["hidden_size"] == 256 and engines["seq_len"] * engines["micro_batch"] == 64
        assert engines["rounds"] >= 3 and probe["threads_per_rank"] == 1
    assert ENGINES.perf.sources["zero3_module_overhead_s"] == ENGINES.perf.sources["bucket_flush_s"] == "probe"


@pytest.mark.parametrize("name", ALL_CASES)
def test_every_case_within_20_percent_with_the_short_reference_engines(name):
    case = ENGINES.measured["cases"][name]
    assert predicted(ENGINES, case) == pytest.approx(case["median_s"], rel=TOLERANCE)


def test_every_case_ranked_as_measured_with_the_short_reference_engines():
    test_ranking_matches_where_the_runs_tell_setups_apart(ENGINES)


# The same eleven cases on an Intel Xeon with AMX, 2026-11-28: bf16 in hardware, so the reference engines ran at
# full size (4 x 128 tokens a step, ten rounds); every case within 10.7% (9.1% before the adapters' ZeRO-3 gathers
# were priced), 39 pairs told apart and ranked as measured.
INTEL_ALL = Measurement(DATA / "2026-11-28-intel", 39)


@pytest.mark.parametrize("name", ALL_CASES)
def test_every_case_within_20_percent_on_the_intel_xeon_too(name):
    assert set(INTEL_ALL.measured["cases"]) == set(ALL_CASES)
    case = INTEL_ALL.measured["cases"][name]
    assert predicted(INTEL_ALL, case) == pytest.approx(case["median_s"], rel=TOLERANCE)


def test_every_case_ranked_as_measured_on_the_intel_xeon_too():
    test_ranking_matches_where_the_runs_tell_setups_apart(INTEL_ALL)


# LoRA with trainable copies of the embedding and the head (--lora-modules-to-save) beside plain LoRA and ZeRO-1, on
# an AMD EPYC, 2026-11-28, three rounds: the copies' reduces, bucket flushes, optimizer step and the head's
# weight-gradient product; lora_save_zero2 within 0.1%.
SAVE = Measurement(DATA / "2026-11-28-amd-save", 2)
SAVE_CASES = ("zero1", "lora_zero2", "lora_save_zero2")


@pytest.mark.parametrize("name", SAVE_CASES)
def test_lora_with_modules_to_save_within_20_percent(name):
    assert set(SAVE.measured["cases"]) == set(SAVE_CASES)
    case = SAVE.measured["cases"][name]
    assert (case.get("lora_config") or {}).get("modules_to_save") == (["embed_tokens", "lm_head"] if "save" in name
                                                                     else None)
    assert predicted(SAVE, case) == pytest.approx(case["median_s"], rel=TOLERANCE)


def test_lora_with_modules_to_save_ranked_as_measured():
    test_ranking_matches_where_the_runs_tell_setups_apart(SAVE)


# Optimizer offload with gradient accumulation, on an AMD EPYC, 2026-11-29, two rounds: the setups no other
# measurement timed (DeepSpeed 0.19 keeps the accumulating gradients on the host between micro-batches), beside their
# counterparts without accumulation and without offload; within 2.7% (ZeRO-2) and 6.5% (ZeRO-3).
OFFLOAD_ACCUM = Measurement(DATA / "2026-11-29-amd-offload-accum", 5)
OFFLOAD_ACCUM_CASES = ("zero2_accum4", "zero2_offload_optimizer", "zero2_offload_accum4", "zero3_offload_accum4")


@pytest.mark.parametrize("name", OFFLOAD_ACCUM_CASES)
def test_optimizer_offload_with_accumulation_within_20_percent(name):
    assert set(OFFLOAD_ACCUM.measured["cases"]) == set(OFFLOAD_ACCUM_CASES)
    case = OFFLOAD_ACCUM.measured["cases"][name]
    zero = case["ds_config"]["zero_optimization"]
    assert case["ds_config"]["gradient_accumulation_steps"] == (4 if "accum4" in name else 1)
    assert ("offload_optimizer" in zero) == ("offload" in name)
    assert predicted(OFFLOAD_ACCUM, case) == pytest.approx(case["median_s"], rel=TOLERANCE)


def test_optimizer_offload_with_accumulation_ranked_as_measured():
    test_ranking_matches_where_the_runs_tell_setups_apart(OFFLOAD_ACCUM)


# Two nodes, one rank each (benchmarks/step_time_nodes.py, an AMD EPYC, 2026-11-29, two rounds): two network
# namespaces joined by a veth pair throttled to 200 Mbit/s (tc tbf; gloo measured 21.1 MB/s), so that communication
# is 60-70% of a step. Within 10.7% (ZeRO-2's reduce and gather: -10.7%), all 10 pairs the runs tell apart ranked.
# The ZeRO-3 case held what the model said before it counted DeepSpeed's reuse window and the CPU's async gathers:
# +49% (it had backward gather everything again; DeepSpeed's comms counted 26 all-gathers of 3.95M elements a step,
# forward's alone), and ZeRO-3 slower than ZeRO-2 where it ran 15% faster.
NODES = Measurement(DATA / "2026-11-29-amd-two-nodes", 10)
NODES_CASES = ("zero1", "zero2", "zero3", "zero1_accum4", "zero2_accum4", "zero3_reuse0")


@pytest.mark.parametrize("name", NODES_CASES)
def test_two_nodes_over_a_throttled_link_within_20_percent(name):
    m = NODES.measured
    assert set(m["cases"]) == set(NODES_CASES) and (m["nodes"], m["gpus_per_node"]) == (2, 1)
    assert m["command"] == "python benchmarks/step_time_nodes.py --measure" and m["tbf_rate"] == "200mbit"
    zero = m["cases"][name]["ds_config"]["zero_optimization"]
    assert zero.get("stage3_max_reuse_distance", 1e9) == (0 if name == "zero3_reuse0" else
                                                        zero.get("stage3_max_live_parameters", 1e9))
    assert predicted(NODES, m["cases"][name]) == pytest.approx(m["cases"][name]["median_s"], rel=TOLERANCE)


def test_two_nodes_ranked_as_measured_and_zero3_ahead_of_zero2():
    test_ranking_matches_where_the_runs_tell_setups_apart(NODES)
    cases = NODES.measured["cases"]
    assert cases["zero3"]["median_s"] < cases["zero2"]["median_s"] / 1.15
    assert predicted(NODES, cases["zero3"]) < predicted(NODES, cases["zero2"])


def test_zero3_gathers_what_deepspeed_gathers_at_the_reuse_distance_a_plan_writes():
    """ZeRO-3's all-gathers in one step of real trainings (benchmarks/zero3_gathers.py, counted at
    `deepspeed.comm.allgather_fn`), the reuse distance and the live limit set alike, as a plan writes them: at 1e9
    (HF's "auto") backward gathers nothing again; at 2e6 and 1e6, below the model's 3.9M, it gathers again what
    neither the reuse window nor the prefetcher's live limit kept (`ModelFlops.regathered`). The model's elements
    are DeepSpeed's exactly at all three (with the window alone it gathered 15.6% and 5.0% more at 2e6 and 1e6)."""
    from zerokit.memory.buffers import buffer_ladder
    from zerokit.perf.flops import model_flops

    data = json.loads((DATA / "2026-11-29-zero3-gathers.json").read_text())
    threshold = buffer_ladder(data["model"]["hidden_size"], 3)[0].param_persistence_threshold
    mf = model_flops(data["model"])
    counts = {c["reuse_distance"]: c for c in data["counts"]}
    assert set(counts) == {1_000_000_000, 2_000_000, 1_000_000}
    forward = mf.gathered(threshold)[1]
    assert mf.regathered(threshold, 1e9) == (0, 0)
    for distance, c in counts.items():
        assert forward + mf.regathered(threshold, distance)[1] == c["elements"], distance
    # DeepSpeed coalesces some modules' gathers into one call: the model counts a call a module, never fewer
    assert all(mf.gathered(threshold)[0] + mf.regathered(threshold, d)[0] >= c["calls"] for d, c in counts.items())


def test_the_two_node_and_gather_benchmarks_print_the_committed_data(capsys):
    nodes = benchmark("step_time_nodes", register=False)
    assert nodes.report(nodes.DATA) == 0  # every case within 20%, ranked as measured
    out = capsys.readouterr().out
    assert "worst error 10.7% (target 20%: met)" in out and "throttled to 200mbit" in out
    assert nodes.tc_rate("200mbit") == 25e6 and nodes.tc_rate("1gbit") == 125e6
    with pytest.raises(SystemExit, match="tc's units"):
        nodes.tc_rate("200Mbps")
    gathers = benchmark("zero3_gathers", register=False)
    gathers.report()
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[2:]]
    assert [row[0] for row in rows] == ["1,000,000,000", "2,000,000", "1,000,000"]
    assert [row[-1] for row in rows] == ["+0.0%"] * 3


def _step_time_benchmark():
    return benchmark("step_time", "step_time_benchmark", register=False)


def test_the_median_profile_takes_each_point_over_the_rounds_that_measured_it():
    """A slow machine's probe leaves out a llama block width in one round and runs it in another; two rounds of
    2 ranks are still 2 ranks (the median of [2, 2] is 2.0, which a profile refuses)."""
    bench = _step_time_benchmark()
    assert bench.median_curve([[[1, 2], [3, 4]], [[1, 4]], [[1, 6], [2, 1]]]) == [[1, 4], [2, 1], [3, 4]]
    profile = json.loads((DATA / "2026-11-25-amd" / "profile.json").read_text())
    rounds = profile["measurements"]["rounds"][:2]
    one, two = ({**profile, "measurements": r} for r in rounds)
    one["elementwise"] = profile["elementwise"][:1]
    two["elementwise"] = [[x, 2 * y] for x, y in profile["elementwise"]]
    out = bench.median_profile([one, two])
    (x0, y0), (x1, y1) = profile["elementwise"]
    assert out["elementwise"] == [[x0, 1.5 * y0], [x1, 2 * y1]]
    assert out["ranks_measured"] == 2 and isinstance(out["ranks_measured"], int)
    assert len(out["measurements"]["rounds"]) == 2
    assert profile_from_json(out, "the median profile").compute_scale > 0  # and it loads as a profile


def test_the_published_table_prices_every_row_and_the_sweep_keeps_its_order(capsys):
    """benchmarks/step_time.py's published GPU figures, predicted from the presets: every row gets a finite
    prediction (the plans fit as the sources ran them), each Qwen series prints its source once, and the LLaMA-7B
    sweep's rows that differ by more than 15% are ranked as published (25 pairs; offload's magnitude is not: the
    README says by how much)."""
    st = benchmark("step_time")
    st.published_table()
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if re.search(r"[-+]\d+%$|within$", line)]
    assert len(rows) == len(st.PUBLISHED)
    assert out.count("source: QwenLM/Qwen README.md") == 5
    assert "the sweep's pairs whose published throughputs differ by > 15%: 25, ranked as published: 25" in out


# All twelve cases on an AMD EPYC with AVX-512 BF16 (bf16 in hardware), 2026-11-28, three rounds, each a probe and
# then every case once: every case within 20% (worst 8.7%), and all 46 pairs the runs tell apart ranked as measured.
# Until fp32 adapters' casts were priced (`zerokit.perf.model._adapter_pass_bytes`) LoRA at ZeRO-3 was planned 11.4%
# fast and ranked against ZeRO-2 with checkpointing the wrong way; before the adapters' ZeRO-3 gathers were priced
# (the kept ones after every step, the others in each pass: `zerokit.perf.model.adapter_persistence`) LoRA and QLoRA
# at ZeRO-3 were 18.7% and 13.6% fast and 7 pairs flipped; before the bucket flushes were counted as DeepSpeed
# flushes (`zerokit.perf.model.flushes`) full training was planned up to 15.8% slow and 2 flipped.
AMD_ALL = Measurement(DATA / "2026-11-28-amd-all", 46)


# The same twelve cases on the same AMD EPYC 75 minutes later (2026-11-28, three rounds, a probe in each): every case
# within 20% (worst zero2_ckpt, +16.0%), and all 43 pairs told apart ranked as measured.
# Until fp32 adapters' casts were priced LoRA at ZeRO-3 was planned 10.0% fast, and ranked against ZeRO-3 and ZeRO-2
# with checkpointing the wrong way. Until the bucket flushes were counted as DeepSpeed flushes (36 a backward for this
# model, where ceil(parameters / bucket) said 61, and 52 for the probe's reference, against 71), full training was
# planned 9-24% slow here (zero1 +23.4%, zero2_ckpt +23.5%: not met) and 3 pairs flipped.
AMD_ALL2 = Measurement(DATA / "2026-11-28-amd-all2", 43)


# the two AMD EPYC measurements
AMD = {"first": AMD_ALL, "second": AMD_ALL2}


@pytest.mark.parametrize("name", ALL_CASES + ("lora_save_zero2",))
@pytest.mark.parametrize("which", AMD)
def test_every_case_within_its_tolerance_on_the_amd_epyc_with_avx512_bf16(which, name):
    m = AMD[which]
    assert set(m.measured["cases"]) == set(ALL_CASES) | {"lora_save_zero2"}
    case = m.measured["cases"][name]
    assert predicted(m, case) == pytest.approx(case["median_s"], rel=TOLERANCE)


@pytest.mark.parametrize("which", AMD)
def test_the_amd_epycs_pairs_are_ranked_as_measured(which):
    test_ranking_matches_where_the_runs_tell_setups_apart(AMD[which])


# All fourteen cases (the twelve, and ZeRO-2 and ZeRO-3 with CPU optimizer offload and accumulation 4) on an AMD EPYC
# with AVX-512 BF16, 2026-12-07, one round after a fresh probe, with the time model as it stood since 2026-11-29: a
# measurement nothing was fitted to. Every case within 20% (worst lora_save_zero2, +17.7%), and all 70 pairs that
# differ by more than 15% ranked as measured.
AMD_DEC7 = Measurement(DATA / "2026-12-07-amd", 70)


@pytest.mark.parametrize("name", sorted(AMD_DEC7.measured["cases"]))
def test_every_case_within_its_tolerance_on_a_measurement_made_after_the_model(name):
    assert set(AMD_DEC7.measured["cases"]) == set(ALL_CASES) | {"lora_save_zero2", "zero2_offload_accum4",
                                                                  "zero3_offload_accum4"}
    case = AMD_DEC7.measured["cases"][name]
    assert predicted(AMD_DEC7, case) == pytest.approx(case["median_s"], rel=TOLERANCE)


def test_a_measurement_made_after_the_model_ranks_its_pairs_as_measured():
    test_ranking_matches_where_the_runs_tell_setups_apart(AMD_DEC7)


# fp32 LoRA adapters against bf16 ones on one rank of the same AMD EPYC (benchmarks/lora_widths.py, 2026-11-28):
# PEFT casts each adapted linear's input to fp32 and the sum back, and the scaling and the add move 4-byte elements.
LORA_WIDTHS = DATA / "2026-11-28-amd-lora-widths.json"


def test_fp32_adapters_cost_what_one_rank_measured_over_bf16_ones():
    """The time model's fp32-over-bf16 difference for the benchmark's adapters (rank 8 on every linear of the
    256 x 4-layer llama, 512 tokens) within 20% of the 23 ms measured; before the casts were priced it gave 3.5 ms,
    which left LoRA at ZeRO-3 10-11% fast on the AMD EPYC's step-time measurements."""
    data = json.loads(LORA_WIDTHS.read_text())
    assert data["lora_config"]["r"] == 8 and data["threads"] == 1 and data["rounds"] >= 3
    measured = sum(data[k]["fp32"] - data[k]["bf16"] for k in ("forward_s", "backward_s"))
    model = benchmark("lora_widths", register=False).modelled(data)
    assert measured > 0.015
    assert model["fp32"] - model["bf16"] == pytest.approx(measured, rel=TOLERANCE)


def test_adapter_pass_bytes_by_hand():
    """bf16 base, fp32 adapters, per output element forward: the scaling reads and writes 2 bytes more, the add
    reads the adapter's output and writes the sum 2 bytes wider (4 x 2), and the sum's cast back reads 4 and writes
    2 (6): 14; per input element the input's cast, 6. Backward per output: the scaling's gradient 2 x 2 wider, the
    sum's gradient cast to fp32 and the frozen output's cast back (6 each): 16; per input the gradient's cast, 6.
    Matching widths add nothing beyond their kernels."""
    from zerokit.perf.model import _adapter_pass_bytes

    assert _adapter_pass_bytes(2, 4) == (14, 6, 16, 6)
    assert _adapter_pass_bytes(2, 2) == _adapter_pass_bytes(4, 4) == (0, 0, 0, 0)

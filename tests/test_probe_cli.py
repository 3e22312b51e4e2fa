"""`zerokit probe`: bad input exits 2 before anything is measured; a quick real probe writes a profile that
`load_profile` reads back; a full probe (slow) takes about a minute and measures every figure."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from zerokit.cli import main
from zerokit.errors import ZerokitError
from zerokit.perf import load_profile


@pytest.mark.parametrize("args, message", [
    (["--ranks", "0"], "--ranks must be at least 1"),
    (["--ranks", "two"], "--ranks must be a whole number"),
    (["--ranks", "65"], "--ranks '65' is too large; at most 64"),
    (["--ranks", "99999999999"], "--ranks '99999999999' is too large; at most 64"),
    (["--nvme-path", "/nonexistent/nvme"], "--nvme-path /nonexistent/nvme: not a directory"),
])
def test_bad_options_exit_2(args, message, capsys):
    assert main(["probe", "--quick", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.skipif(not os.path.isdir("/sys/kernel"), reason="Linux sysfs")
def test_an_nvme_path_that_refuses_a_file_exits_2_before_measuring(capsys):
    """As root, access() calls every directory writable: the probe measured for a minute, then its rank 0 failed to
    create the NVMe test file in /sys/kernel ("probe rank 0 failed: PermissionError ...")."""
    assert main(["probe", "--quick", "--nvme-path", "/sys/kernel"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("zerokit probe: error: --nvme-path /sys/kernel: ") and len(err.strip().splitlines()) == 1
    assert ("cannot create a file there (Permission denied)" in err or "not writable" in err) and "[1/12]" not in err


@pytest.mark.parametrize("quick, size", [(["--quick"], "16.0 MiB"), ([], "512.0 MiB")])
def test_an_nvme_path_without_room_for_the_test_file_exits_2_before_measuring(tmp_path, capsys, monkeypatch, quick,
                                                                                 size):
    """A drive with too little free space: rank 0 failed a minute in, at the NVMe step ("probe rank 0 failed:
    [rank0]: OSError: [Errno 28] No space left on device"), which said neither what nor how to fix it."""
    real = os.statvfs

    def nearly_full(path):
        st = real(path)
        return os.statvfs_result((st.f_bsize, 4096, st.f_blocks, 16, 16, *st[5:]))

    monkeypatch.setattr(os, "statvfs", nearly_full)
    assert main(["probe", *quick, "--nvme-path", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"zerokit probe: error: --nvme-path {tmp_path}: 65.5 KB free, and the probe "
                                       f"writes a {size} test file there; free some space or choose another "
                                       "directory on the NVMe drive\n")


def test_output_path_is_checked_before_measuring(tmp_path, capsys):
    existing = tmp_path / "profile.json"
    existing.write_text("{}")
    assert main(["probe", "-o", str(existing)]) == 2
    assert "file exists; pass --force to overwrite it" in capsys.readouterr().err
    assert main(["probe", "-o", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert main(["probe", "--force", "-o", str(fifo)]) == 2  # --force never writes into a FIFO
    assert "is a FIFO (named pipe); zerokit writes only regular files" in capsys.readouterr().err
    link = tmp_path / "link.json"
    link.symlink_to(existing)
    assert main(["probe", "--force", "-o", str(link)]) == 2  # nor replaces a symlink
    assert "is a symbolic link" in capsys.readouterr().err
    assert main(["probe", "-o", ""]) == 2
    assert "-o is empty; give a file name such as profile.json" in capsys.readouterr().err
    assert main(["probe", "-o", str(tmp_path / "missing" / "p.json")]) == 2
    assert "does not exist; create it first" in capsys.readouterr().err
    assert existing.read_text() == "{}"


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="Linux procfs")
@pytest.mark.parametrize("path", ["/proc/zerokit-profile.json", "/proc/version"])
def test_an_output_directory_that_refuses_a_file_exits_2_before_measuring(capsys, path):
    """As root, access() calls /proc writable: the probe measured for a minute, then could not write its profile."""
    assert main(["probe", "--quick", "--force", "-o", path]) == 2
    err = capsys.readouterr().err
    assert err == (f"zerokit probe: error: -o {path}: cannot create a file in /proc (no such file or directory); "
                   "write elsewhere\n"), err  # and no progress line: nothing was measured


def test_probe_is_listed(capsys):
    with pytest.raises(SystemExit):
        from zerokit.cli import cli
        cli.main(args=["--help"], prog_name="zerokit")
    assert "probe" in capsys.readouterr().out


@pytest.mark.heavy
def test_quick_probe_writes_a_profile(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    # run where a file is named like a package the ranks import: `-m` put this directory first on their sys.path, and
    # an h2.py there broke huggingface_hub's import in every rank (PYTHONSAFEPATH, `zerokit.perf.probe.safe_path`)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "h2.py").write_text("raise SystemExit('the probe imported h2.py from the directory it ran in')\n")
    out = tmp_path / "profile.json"
    assert main(["probe", "--quick", "--ranks", "2", "--nvme-path", str(tmp_path), "-o", str(out)]) == 0
    captured = capsys.readouterr()
    assert "[1/12] device and memory" in captured.err and "[12/12] NVMe read/write" in captured.err
    assert "matmul bf16 GFLOP/s by size" in captured.out and f"profile written to {out}" in captured.out
    perf = load_profile(str(out))
    assert perf.device == "cpu" and perf.ranks_measured == 2 and not perf.comm_overlaps_compute
    assert set(perf.matmul) == {"bf16", "fp32"} and [s for s, _ in perf.matmul["bf16"]] == [32.0, 64.0]
    assert [s for s, _ in perf.matmul_forward["bf16"]] == [32.0, 64.0]  # the forward product alone, same sizes
    assert "forward's share, bf16" in captured.out and "the forward's share by size: bf16 32: " in captured.err
    # the backward's input-gradient product alone (a frozen LoRA base's whole backward), same sizes
    assert [s for s, _ in perf.matmul_input_grad["bf16"]] == [32.0, 64.0]
    assert perf.sources["matmul_input_grad"] == "probe"
    assert "input gradient's share, bf16" in captured.out and "the input gradient's: bf16 32: " in captured.err
    assert perf.intra_node_bandwidth > 0 and perf.collective_latency_s > 0
    assert perf.sources["nvme"] == "probe" and perf.nvme_read > 0 and perf.nvme_write > 0
    # LoRA's dropout: its random mask, compute-bound on a CPU (137-150 M elements/s on this Xeon's full probe)
    assert perf.dropout_elements_per_s > 1e6 and perf.sources["dropout_elements_per_s"] == "probe"
    assert ", dropout " in captured.err and " M elements/s" in captured.err
    # QLoRA's 4-bit linears, timed against bf16 ones (bitsandbytes is in the test extra)
    assert perf.sources["quantized_linear"] == "probe" and perf.dequant_elements_per_s > 0
    # with a cost per weight element, or, where this busy VM's noise hid it, without (`quantized_summary`)
    assert perf.quantized_linear_overhead_s >= 0 and (" us per module and pass + its weight at " in captured.err or
                                                      " (no cost per weight element stood out" in captured.err)
    assert "4-bit linear over bf16 (QLoRA)" in captured.out and "LoRA dropout (bf16, p = 0.05)" in captured.out
    assert "[WARNING]" not in captured.err and "built successfully" not in captured.err  # DeepSpeed's own lines
    # --quick starts at 128 rows and halves them (to 16 at least) while a pair would take over QUANTIZED_PAIR_S by
    # the curve just measured: 64 or 128 here when quiet, 16 under a full suite's load
    assert json.loads(out.read_text())["measurements"]["quantized_linear"]["rows"] in (16, 32, 64, 128)
    raw = json.loads(out.read_text())["measurements"]
    assert raw["collectives"]["backend"] == "gloo" and raw["quick"] is True
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".zerokit-probe-")]  # the NVMe test file is gone


@pytest.mark.slow
def test_full_probe(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    # one OpenMP thread a rank, as `deepspeed --bind_cores_to_rank` gives them: with torch's default (a thread per
    # core in every rank) a 2-core machine's figures stall at random (the probe's table says so), and the reference
    # step's time less the communication the stalled collectives predict can come out below zero
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "profile.json"
    assert main(["probe", "-o", str(out)]) == 0
    perf = load_profile(str(out))
    assert [s for s, _ in perf.matmul["bf16"]] == [64.0, 128.0, 256.0, 512.0]
    # one elementwise point per llama-block width that fit the step budget: all three where bf16 runs in hardware,
    # one or two where it is emulated (the first always runs)
    assert 1 <= len(perf.elementwise) <= 3 and perf.cpu_adam_params_per_s > 0 and perf.device_adam_params_per_s > 0
    # the host's fp32 -> bf16 cast that optimizer offload runs after CPU-Adam; the ZeRO-3 copy is a GPU's alone
    assert perf.host_cast_params_per_s > 0 and perf.sources["host_cast_params_per_s"] == "probe"
    assert perf.h2d_cast_params_per_s == 0 and perf.sources["h2d_cast_params_per_s"].startswith("default")
    # the reference ZeRO-2 training step ran and set the compute scale
    assert perf.sources["compute_scale"].startswith("probe") and 0.25 <= perf.compute_scale <= 8.0
    measurements = json.loads(out.read_text())["measurements"]
    raw = measurements["engine_step"]
    assert raw["step_s"] > 0 and raw["predicted_compute_s"] > 0 and raw["measured_compute_scale"] > 0
    # what ran is recorded: the engines' rounds and sequences a step, the llama blocks' widths and tokens
    assert 3 <= raw["rounds"] <= 10 and raw["micro_batch"] in (1, 2, 4) and raw["seq_len"] in (64, 128)
    # the reference's five linear shapes, timed, price its matmuls in the compute the scale divides by
    assert [row[:4] for row in raw["linears"]] == [[raw["seq_len"] * raw["micro_batch"], k, n, c] for k, n, c in (
        (256, 256, 12), (256, 128, 12), (256, 682, 12), (682, 256, 6), (256, 512, 1))]
    assert all(row[4] > 0 for row in raw["linears"]) and raw["curve_compute_s"] > 0
    shapes = measurements["reference_block_shapes"]
    # one point per activation size: 640 x 512 (a width halved to fit) and 320 x 1024 share one
    assert shapes[0] == [128, 512] and len({h * t for h, t in shapes}) == len(perf.elementwise)


def test_a_reference_step_runs_half_the_tokens_until_the_measured_figures_fit_the_budget():
    from zerokit.perf.probe import ENGINE_STEP_BUDGET_S, STEP_BUDGET_S, halve_to_fit

    per_token = STEP_BUDGET_S / 100  # 100 tokens take the whole budget
    assert halve_to_fit(512, 1, lambda n: n * per_token) == 64
    assert halve_to_fit(64, 1, lambda n: n * per_token) == 64  # fits as it is: the full size runs
    assert halve_to_fit(1024, 256, lambda n: n * per_token) == 256  # the floor, even when it does not fit
    # the CPU reference engines on a CPU that emulates bf16: 4 s a step at 4 sequences of 128 tokens, one sequence
    # of 64 left within their own, shorter budget (where the blocks' budget would keep 128)
    assert ENGINE_STEP_BUDGET_S < STEP_BUDGET_S
    assert halve_to_fit(4, 1, lambda mb: 1.0 * mb, ENGINE_STEP_BUDGET_S) == 1
    assert halve_to_fit(128, 64, lambda s: 1.0 * s / 128, ENGINE_STEP_BUDGET_S) == 64
    assert halve_to_fit(128, 64, lambda s: 1.0 * s / 128) == 128
    assert halve_to_fit(4, 1, lambda mb: 0.3 * mb / 4, ENGINE_STEP_BUDGET_S) == 4  # a CPU with AMX: 0.3 s


@pytest.mark.parametrize("rate, rows", [
    # 12 x rows x 1024 x 2048 FLOP a pair: 25.8 MFLOP a row
    (3e9, 32),  # the AMD EPYC that emulates bf16 (~3 GFLOP/s): 4.3 s a pair at 512 rows, 0.27 s at 32
    (0.1e9, 16),  # slower still: the floor, even over the budget
    (100e9, 512),  # bf16 in hardware (the Intel Xeon with AMX): 0.13 s, the full 512
])
def test_the_4bit_pairs_run_fewer_rows_where_their_matmuls_would_not_fit_the_budget(rate, rows):
    from zerokit.perf.probe import quantized_rows

    assert quantized_rows(512, (1024, 2048), [[64.0, rate], [512.0, rate]]) == rows
    # --quick's 128 rows of 512 x 512 (3.1 MFLOP a row) at 0.1 GFLOP/s: 4.0 s, 2.0, 1.0, then the floor's 0.5
    assert quantized_rows(128, (512, 512), [[64.0, 0.1e9]]) == 16
    assert quantized_rows(128, (512, 512), [[64.0, 1e9]]) == 64  # 0.4 s at 128 rows, 0.2 at 64


@pytest.mark.parametrize("points, rate, overhead", [
    ([[65536, 2.2e-4], [524288, 3.4e-4], [2097152, 7.8e-4]], 1 / 2.75e-10, 2.0e-4),  # a line: both figures
    ([[65536, 3e-4], [524288, 2e-4], [2097152, 1e-4]], 100e12, 2e-4),  # noise, no positive slope: all per module
    ([[65536, -1e-5], [524288, -2e-5], [2097152, -3e-5]], 100e12, 0.0),  # 4-bit no slower: nothing
])
def test_the_4bit_fit_always_gives_figures_a_profile_loads(tmp_path, points, rate, overhead):
    """A quick probe's noisy points once gave no positive slope, and the probe wrote a rate the profile loader
    refuses (1e15 > its 1e14 bound): `zerokit plan --hardware` then rejected the probe's own profile."""
    from zerokit.perf import profile_to_json
    from zerokit.perf.machine import machine_from_preset
    from zerokit.perf.probe import fit_quantized

    fit = fit_quantized(points)
    assert fit["elements_per_s"] == pytest.approx(rate, rel=0.05)
    assert fit["overhead_s"] == pytest.approx(overhead, rel=0.05, abs=1e-9)
    perf = machine_from_preset("h100-80gb")
    doc = profile_to_json(perf)
    doc.update(dequant_elements_per_s=fit["elements_per_s"], quantized_linear_overhead_s=fit["overhead_s"])
    (tmp_path / "p.json").write_text(json.dumps(doc))
    loaded = load_profile(str(tmp_path / "p.json"))
    assert loaded.dequant_elements_per_s == fit["elements_per_s"]


REFERENCE = {"model_type": "llama", "hidden_size": 384, "intermediate_size": 1024, "num_hidden_layers": 6,
             "num_attention_heads": 6, "num_key_value_heads": 3, "vocab_size": 512, "tie_word_embeddings": False}


def test_a_models_linears_are_listed_by_shape_with_how_many_run():
    from zerokit.perf.flops import model_flops
    from zerokit.perf.probe import linear_shapes

    # the CPU reference llama at 4 x 128 tokens: q and o 384 -> 384 in each of 6 layers, k and v 384 -> 192 (3 KV
    # heads of 64), gate and up 384 -> 1024, down 1024 -> 384, and the LM head 384 -> 512 once
    assert linear_shapes(model_flops(REFERENCE), 512) == {
        (512, 384, 384): 12, (512, 384, 192): 12, (512, 384, 1024): 12, (512, 1024, 384): 6, (512, 384, 512): 1}


def test_linears_that_ran_slower_or_faster_than_the_curve_move_the_kernel_time():
    from zerokit.perf.machine import MachinePerf
    from zerokit.perf.probe import linear_correction

    flat = MachinePerf(name="flat", matmul={"bf16": ((64.0, 3e9), (512.0, 3e9))}, elementwise=((1.0, 1e9),))
    # 512 x 384 x 384 at 3 GFLOP/s: 6 x 75.5M FLOPs = 0.1510 s on the curve; it ran in 0.1036 s (4.4 GFLOP/s), 12 of
    # them. 512 x 1024 x 384: 0.4027 s on the curve, ran 0.3989 s, 6 of them.
    timed = [[512, 384, 384, 12, 0.1036], [512, 1024, 384, 6, 0.3989]]
    on_curve = (6 * 512 * 384 * 384 / 3e9, 6 * 512 * 1024 * 384 / 3e9)
    assert on_curve == pytest.approx((0.151, 0.4027), abs=1e-4)
    expected = 12 * (0.1036 - on_curve[0]) + 6 * (0.3989 - on_curve[1])
    assert linear_correction(flat, timed) == pytest.approx(expected) and expected == pytest.approx(-0.591, abs=1e-3)
    assert linear_correction(flat, []) == 0.0  # a profile from before the linears were timed: the curve alone


def test_the_reference_engines_stop_after_the_timed_budget_but_not_before_three_rounds():
    from zerokit.perf.probe import ENGINE_ROUNDS, ENGINE_TIMED_S, more_rounds

    assert ENGINE_ROUNDS == (3, 10)
    assert more_rounds(0, 0.0) and more_rounds(2, 10 * ENGINE_TIMED_S)  # three rounds, however slow
    assert not more_rounds(3, ENGINE_TIMED_S) and more_rounds(3, ENGINE_TIMED_S - 0.1)
    assert not more_rounds(10, 0.0)  # ten at most, however fast


@pytest.mark.parametrize("ranks, threads, cores, device, expected", [
    (2, 2, 2, "cpu", "note: 2 ranks x 2 threads on 2 cores"),  # torch's default under the runner, this VM
    (4, 8, 8, "cpu", "OMP_NUM_THREADS=2"),
    (3, 2, 2, "cpu", "OMP_NUM_THREADS=1"),  # more ranks than cores: one thread each still
    (2, 1, 2, "cpu", None),  # OMP_NUM_THREADS=1, or --bind_cores_to_rank
    (8, 26, 208, "gpu", None),  # a GPU machine's ranks run their matmuls on the GPUs
    (2, 2, None, "cpu", None),  # a profile written before the core count was recorded
])
def test_thread_note(ranks, threads, cores, device, expected):
    from zerokit.commands.probe import thread_note

    note = thread_note({"ranks": ranks, "threads_per_rank": threads, "cores": cores, "device": device})
    assert note == expected if expected is None else expected in note


def _measurements(engine_step: dict) -> dict:
    """The fields `_machine_from_measurements` reads, at round figures."""
    return {"name": "cpu: test", "device": "cpu", "ranks": 2, "matmul": {"bf16": [[64, 1e10], [512, 1e11]]},
            "elementwise": [[1e6, 5e9]], "op_overhead_s": 5e-6,
            "copies": {k: 5e9 for k in ("h2d_pinned", "d2h_pinned", "h2d_pageable", "d2h_pageable")},
            "cpu_adam": {"source": "probe", "params_per_s_node": 2e8}, "device_adam": {"source": "probe",
                                                                                      "params_per_s": 1e8},
            "engine_step": engine_step}


@pytest.mark.parametrize("measured, kept, bounded", [(1.37, 1.37, False), (0.21, 0.25, True), (9.5, 8.0, True)])
def test_compute_scale_at_its_bound_says_so(measured, kept, bounded):
    from zerokit.perf.probe import _machine_from_measurements

    perf = _machine_from_measurements(_measurements({"compute_scale": kept, "measured_compute_scale": measured}))
    assert perf.compute_scale == kept
    source = perf.sources["compute_scale"]
    assert (source == "probe") is not bounded
    assert not bounded or f"measured x {measured:.2f}" in source and "re-run the probe on an idle machine" in source


def test_llama_blocks_that_meet_at_one_activation_size_give_one_point_a_plan_loads(tmp_path, capsys):
    """The full probe on this 2-core VM ran the llama blocks at 128 x 512, 320 x 1024 and 640 x 512 (the widest
    halved to fit the step budget): two points at 655,360 bytes, and `zerokit plan --hardware` refused the profile
    the probe had just written, "elementwise: sizes must be strictly ascending"."""
    from zerokit.perf import profile_to_json
    from zerokit.perf.probe import _machine_from_measurements, ascending_curve

    assert ascending_curve([[655360.0, 6e9], [131072.0, 3e9], [655360.0, 8e9]]) == [[131072.0, 3e9],
                                                                                   [655360.0, 7e9]]
    raw = _measurements({"compute_scale": 1.0})
    raw["elementwise"] = [[131072.0, 3e9], [655360.0, 6e9], [655360.0, 8e9]]
    raw["reference_block_shapes"] = [[128, 512], [320, 1024], [640, 512]]
    raw["device_memory_bytes"] = 25_300_000_000
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(profile_to_json(_machine_from_measurements(raw), raw)))
    assert load_profile(str(path)).elementwise == ((131072.0, 3e9), (655360.0, 7e9))
    assert main(["plan", "--hardware", str(path), "--model", "125M", "--seq-len", "128", "--gpus-per-node", "2",
                 "--format", "json"]) == 0
    assert "strictly ascending" not in capsys.readouterr().err


def test_profiles_before_the_measured_scale_read_as_probed():
    from zerokit.perf.probe import _machine_from_measurements

    perf = _machine_from_measurements(_measurements({"compute_scale": 0.25}))
    assert perf.compute_scale == 0.25 and perf.sources["compute_scale"] == "probe"


PROFILES = Path(__file__).resolve().parent / "data"
ENGINE_FIGURES = ("compute_scale", "measured_compute_scale", "bucket_flush_s", "zero3_module_overhead_s",
                  "predicted_compute_s", "predicted_rest_s", "predicted_zero3_rest_s",
                  "host_op_s", "host_adapter_s", "host_flush_s", "host_optimizer_s")


def _references():
    """Every committed probe's reference engines (a GPU profile's, each round of a CPU median profile's) that kept
    their three step times: (label, measurements, engine_step)."""
    found = []
    for path in sorted(PROFILES.glob("**/profile.json")):
        measurements = json.loads(path.read_text()).get("measurements") or {}
        for i, m in enumerate([measurements, *measurements.get("rounds", ())]):
            engine = m.get("engine_step") or {}
            if "plan_buckets_step_s" in engine and "linears" in engine:  # the probe of today writes both
                found.append((f"{path.parent.relative_to(PROFILES)}#{i}", m, engine))
    return found


@pytest.mark.parametrize("label, measurements, engine", [pytest.param(*r, id=r[0]) for r in _references()])
def test_the_engine_figures_are_what_the_time_model_makes_of_the_reference_steps_measured(label, measurements, engine):
    """`engine_figures` is the probe's derivation alone: from the step times a committed probe measured (GPUs and
    this CPU), the time model of today gives back the figures that probe wrote. A change to the time model that
    moves them (the reference's compute, its communication, what ZeRO-3 costs) shows here: profiles written before
    it would then plan with figures the model no longer means; a change that keeps them is safe for them."""
    from zerokit.perf.probe import _machine_from_measurements, engine_figures

    partial = _machine_from_measurements({**measurements, "engine_step": None})
    steps = {"zero2": engine["step_s"], "zero2_plan": engine["plan_buckets_step_s"],
             "zero3_plan": engine["zero3_step_s"]}
    figures = engine_figures(partial, engine["model"], steps, engine["linears"], measurements["ranks"],
                             engine["seq_len"], engine["micro_batch"], engine.get("host"))
    for key in ENGINE_FIGURES:
        if key in engine:
            assert figures[key] == pytest.approx(engine[key], rel=1e-9, abs=1e-12), key


def test_a_probe_on_several_gpus_adds_back_the_compute_its_hooks_hid_behind():
    """On several GPUs the reference's ZeRO-3 step shows only the hooks beyond its compute (`exposed_hooks`):
    `engine_figures` adds the compute back, and where nothing showed it takes the default, at most the compute.
    The steps are built from a committed H100 reference's, as the model prices them at 2 ranks."""
    from zerokit.perf.flops import model_flops
    from zerokit.perf.machine import DEFAULT_ZERO3_MODULE_OVERHEAD_S
    from zerokit.perf.probe import _machine_from_measurements, engine_figures

    label, measurements, engine = next(r for r in _references() if r[0].startswith("gpu/2026-11-27-h100"))
    partial = _machine_from_measurements({**measurements, "engine_step": None})
    steps = {"zero2": engine["step_s"], "zero2_plan": engine["plan_buckets_step_s"]}

    def figures(exposed: float) -> dict:
        probe = engine_figures(partial, engine["model"], {**steps, "zero3_plan": 0.0}, engine["linears"], 2,
                               engine["seq_len"], engine["micro_batch"])  # what the model leaves out at 2 ranks
        zero3 = (steps["zero2_plan"] - probe["predicted_plan_buckets_rest_s"] + probe["predicted_zero3_rest_s"]
                 + exposed)
        return engine_figures(partial, engine["model"], {**steps, "zero3_plan": zero3}, engine["linears"], 2,
                              engine["seq_len"], engine["micro_batch"])

    modules = model_flops(engine["model"]).parameter_modules
    hidden = figures(0.0)
    kernels = hidden["compute_scale"] * hidden["predicted_compute_s"]
    assert hidden["zero3_module_overhead_s"] == pytest.approx(
        min(DEFAULT_ZERO3_MODULE_OVERHEAD_S, kernels / (2 * modules)))
    hooks = 2 * modules * 900e-6  # a host-bound reference: the hooks take longer than its kernels
    assert hooks > kernels, label
    assert figures(hooks - kernels)["zero3_module_overhead_s"] == pytest.approx(900e-6)


def test_the_committed_probes_keep_enough_to_derive_their_figures_again():
    labels = [label for label, _, _ in _references()]
    assert sum(label.startswith("gpu/") for label in labels) >= 7, labels
    assert sum(label.startswith("step_time/") for label in labels) >= 3, labels


def test_the_table_says_how_the_reference_workloads_ran():
    from zerokit.commands.probe import render_table
    from zerokit.perf.probe import _machine_from_measurements

    raw = _measurements({"compute_scale": 0.96, "rounds": 4, "micro_batch": 1, "seq_len": 64})
    raw["reference_block_shapes"] = [[128, 512], [320, 256]]
    lines = render_table(_machine_from_measurements(raw), raw).splitlines()
    assert any(line.split() == ["from", "llama", "blocks,", "width", "x", "tokens", "128", "x", "512,", "320", "x",
                                "256"] for line in lines)
    assert any(line.split()[:3] == ["from", "reference", "training"] and line.endswith(
        "4 alternated rounds, 1 x 64 tokens a step") for line in lines)
    # a profile from before the probe recorded them: no such rows
    old = _measurements({"compute_scale": 0.96})
    assert "from reference training" not in render_table(_machine_from_measurements(old), old)
    # with each round's ZeRO-2 step (the mean over the ranks), the table says how far apart the rounds ran: a shared
    # VM's speed can shift while the probe runs, and every figure is a median over them
    steady = _measurements({"compute_scale": 0.96, "rounds": 4, "micro_batch": 1, "seq_len": 64,
                            "round_steps_s": {"zero2": [0.36, 0.40, 0.56, 0.38], "zero3_plan": [0.5] * 4}})
    assert render_table(_machine_from_measurements(steady), steady).count(
        "4 alternated rounds, 1 x 64 tokens a step; ZeRO-2 steps 0.36-0.56 s over the rounds (+56%)") == 1


def test_the_table_gives_zero3s_blocking_copy_as_the_probe_measured_it():
    """The second H200's profile (one GPU): the measured figure itself, for the one rank that ran."""
    from pathlib import Path

    from zerokit.commands.probe import render_table

    path = Path(__file__).parent / "data" / "gpu" / "2026-11-26-h200-offload" / "profile.json"
    perf = load_profile(str(path))
    row = next(line for line in render_table(perf, json.loads(path.read_text())).splitlines() if "blocking" in line)
    assert f"{perf.h2d_cast_params_per_s / 1e6:.0f} M params/s per rank (1 at once)" in row
    assert perf.h2d_cast_rate(8, 2) < perf.h2d_cast_params_per_s  # eight ranks share the host's cast


def test_a_killed_probes_leftovers_are_swept_once_its_process_is_gone(tmp_path):
    """SIGKILL skips every cleanup: the next probe removes the dead one's temp directory and its port's DeepSpeed
    shared-memory buffers, and nothing of a live process, another port or another name."""
    import subprocess
    import sys

    from zerokit.launch.runner import SHM_PREFIX
    from zerokit.perf.probe import PROBE_DIR_PREFIX, sweep_stale_probes

    gone = subprocess.Popen([sys.executable, "-c", ""])
    gone.wait()  # a pid no process holds now
    tmp, shm = tmp_path / "tmp", tmp_path / "shm"
    tmp.mkdir()
    shm.mkdir()
    dead = tmp / f"{PROBE_DIR_PREFIX}{gone.pid}-29511-abc"
    live = tmp / f"{PROBE_DIR_PREFIX}{os.getpid()}-29512-def"
    other = tmp / "zerokit-probe-notapid-x"
    for d in (dead, live, other):
        d.mkdir()
        (d / "rank0.log").write_text("log")
    buffers = [f"{SHM_PREFIX}{os.getuid()}_127.0.0.1_{port}_{rank}" for port in (29511, 29512) for rank in (0, 1)]
    for name in buffers:
        (shm / name).write_bytes(b"")
    assert sweep_stale_probes(str(tmp), str(shm)) == 1
    assert sorted(p.name for p in tmp.iterdir()) == sorted([live.name, other.name])
    assert sorted(p.name for p in shm.iterdir()) == buffers[2:]


def test_only_the_probes_own_lines_are_progress():
    """DeepSpeed logs to rank 0's stdout too; its lines read as the probe's in the progress on stderr."""
    from zerokit.perf.probe import is_progress

    assert is_progress("[11/12] training steps of a reference llama under ZeRO-2 and ZeRO-3 engines ...\n")
    assert is_progress("      up to 19.7 GFLOP/s per rank (1.3 s)\n")
    assert not is_progress("[2026-11-28 01:23:04,468] [WARNING] [real_accelerator.py:213:get_accelerator] Setting "
                           "accelerator to CPU. If you have GPU or other accelerator, we were unable to detect it.\n")
    assert not is_progress("DeepSpeed deepspeed.ops.comm.deepspeed_shm_comm_op built successfully\n")
    assert not is_progress("\n")


def test_the_table_gives_the_lora_figures_the_probe_measured():
    """Dropout's mask and the 4-bit linears' fit were measured and planned with, but the table left them out; a fit
    whose rate noise left at MAX_BANDWIDTH read "100000000 M elements/s" in the progress."""
    from zerokit.commands.probe import render_table
    from zerokit.perf.machine import MAX_BANDWIDTH
    from zerokit.perf.probe import _machine_from_measurements, quantized_summary

    raw = _measurements({"compute_scale": 1.0})
    raw.update(dropout_elements_per_s=53e6, quantized_linear={"elements_per_s": 3.6e9, "overhead_s": 2e-4})
    lines = render_table(_machine_from_measurements(raw), raw).splitlines()
    assert any(line.split() == ["LoRA", "dropout", "(bf16,", "p", "=", "0.05)", "53", "M", "elements/s", "per", "rank"]
               for line in lines)
    assert any(line.strip().startswith("4-bit linear over bf16 (QLoRA)") and line.endswith(
        "200 us per module and pass + its weight at 3,600 M elements/s") for line in lines)
    assert quantized_summary({"elements_per_s": MAX_BANDWIDTH, "overhead_s": 4.213e-3}) == (
        "4213 us per module and pass (no cost per weight element stood out of the noise)")
    bare = _measurements({"compute_scale": 1.0})  # a probe without bitsandbytes: no such rows
    table = render_table(_machine_from_measurements(bare), bare)
    assert "4-bit linear" not in table and "LoRA dropout" not in table


_BUILDING_RANK = """
import os, sys, time
from torch.utils.file_baton import FileBaton
from zerokit.perf.probe import _stop_on_signals
_stop_on_signals()  # as every probe rank starts
baton = FileBaton(sys.argv[1])  # what torch's JIT build of a DeepSpeed op holds while ninja runs
assert baton.try_acquire()
try:
    print("building", flush=True)
    for _ in range(600):  # a main thread that returns to Python, as the probe's measurements do (see stop_ranks)
        time.sleep(0.1)
finally:
    time.sleep(0.5)  # a release that takes a moment, as a build's cleanup does
    baton.release()
"""


@pytest.mark.parametrize("ctrl_c", [False, True])
def test_an_interrupted_probe_lets_its_ranks_release_torchs_build_lock(tmp_path, ctrl_c):
    """Interrupted, the probe SIGKILLed its ranks; one inside torch's JIT build of DeepSpeed's shared-memory comm op
    (deepspeed.initialize builds it on the CPU accelerator, in the reference-engine step) left the FileBaton `lock`
    in ~/.cache/torch_extensions, and every later DeepSpeed run there waited on it, silently, forever. A Ctrl-C at the
    terminal reaches the ranks too (SIGINT), and the probe's SIGTERM after it must not cut their cleanup short."""
    import signal
    import subprocess
    import sys

    pytest.importorskip("torch")
    from zerokit.perf.probe import safe_path, stop_ranks

    lock = tmp_path / "lock"
    rank = subprocess.Popen([sys.executable, "-c", _BUILDING_RANK, str(lock)], stdout=subprocess.PIPE, text=True,
                            env=safe_path(dict(os.environ)))
    assert rank.stdout.readline() == "building\n" and lock.exists()
    if ctrl_c:
        rank.send_signal(signal.SIGINT)
    stop_ranks([rank], grace_s=30)
    # with both signals sent, either may reach the rank's main thread first (the kernel hands a process's signal to
    # any of its threads, torch's among them, on a busy machine late): the first stops it, the second is ignored and
    # cuts nothing short; never SIGKILLed (-9), and the lock released
    codes = (128 + signal.SIGINT, 128 + signal.SIGTERM) if ctrl_c else (128 + signal.SIGTERM,)
    assert rank.returncode in codes
    assert not lock.exists()


def test_the_hosts_figures_by_hand():
    """`host_figures` from an H200's timings of the 8-layer reference at 32 tokens (tests/data/gpu/2026-11-28-h200-
    host): 33.6 ms of forward and backward over the 990 kernels the model counts (3 x (40 x 8 + 10)), LoRA's 64.2 ms
    less that over its 56 adapted linears, the optimizer step's 24.1 ms; a flush from the plan-bucket engine timed at
    a few tokens, or where it was not (that probe), the most its full-token step allows."""
    from zerokit.perf.probe import host_figures

    config = json.loads((PROFILES / "gpu/2026-11-28-h200-host/profile.json").read_text())["measurements"][
        "engine_step"]["model"]
    host = {"forward_backward_s": 0.0336, "step_s": 0.0241, "lora_forward_backward_s": 0.0642,
            "adapted_linears": 56}
    got = host_figures(config, host, plan_engine=0.0820, extra_flushes=120)
    assert got == pytest.approx({"host_op_s": 0.0336 / 990, "host_adapter_s": (0.0642 - 0.0336) / 56,
                                 "host_optimizer_s": 0.0241, "host_flush_s": (0.0820 - 0.0336) / 120})
    timed = host_figures(config, {**host, "plan_buckets_forward_backward_s": 0.0456}, 0.0820, 120)
    assert timed["host_flush_s"] == pytest.approx(0.012 / 120)
    bare = host_figures(config, {"forward_backward_s": 0.0336, "step_s": 0.0241}, 0.02, 120)  # no peft; a device-
    assert bare["host_adapter_s"] == 0.0 and bare["host_flush_s"] == 0.0  # paced plan step bounds no flush


def test_the_lora_engine_counts_the_linears_peft_adapted():
    """The probe's LoRA host timing divides by the linears PEFT adapted, counted on the model: 7 a layer on a 2-layer
    llama with all-linear adapters (q, k, v, o, gate, up, down; the head is left out), 2 a layer with q and v only."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, LlamaConfig

    from zerokit.perf.probe import adapted_linears

    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=128)
    for targets, per_layer in (("all-linear", 7), (["q_proj", "v_proj"], 2)):
        torch.manual_seed(0)
        model = get_peft_model(AutoModelForCausalLM.from_config(config),
                               LoraConfig(r=4, target_modules=targets, task_type="CAUSAL_LM"))
        assert adapted_linears(model) == per_layer * 2


def test_the_hosts_figures_stay_within_what_a_profile_accepts():
    """A slow host's optimizer step of 5 s is kept (a profile takes up to a minute for it), a forward and backward of
    2,000 s is cut to the second a kernel may take; every figure written loads back as a profile."""
    from zerokit.perf.machine import PROFILE_RANGES
    from zerokit.perf.probe import host_figures

    config = json.loads((PROFILES / "gpu/2026-11-28-h200-host/profile.json").read_text())["measurements"][
        "engine_step"]["model"]
    slow = host_figures(config, {"forward_backward_s": 0.0336, "step_s": 5.0}, 0.0820, 120)
    assert slow["host_optimizer_s"] == 5.0
    huge = host_figures(config, {"forward_backward_s": 2000.0, "step_s": 100.0, "lora_forward_backward_s": 1e6,
                                 "adapted_linears": 1}, 0.0, 1)
    assert huge == {"host_op_s": 1.0, "host_adapter_s": 1.0, "host_flush_s": 0.0, "host_optimizer_s": 60.0}
    assert all(PROFILE_RANGES[k][0] <= v <= PROFILE_RANGES[k][1] for k, v in {**slow, **huge}.items())


def test_a_gpu_profile_with_the_hosts_figures_shows_them():
    from zerokit.commands.probe import _host_rows
    from zerokit.perf import load_profile

    perf = load_profile(str(PROFILES / "gpu/2026-11-28-h200-host/profile.json"))
    assert perf.host_op_s == pytest.approx(33.9e-6, rel=1e-3) and perf.sources["host_op_s"] == "probe"
    rows = _host_rows(perf)
    assert rows[0][1] == "33.9 us, 547 us per LoRA-adapted linear" and rows[1][1] == "734 us, 24.1 ms"
    assert _host_rows(load_profile(str(PROFILES / "gpu/2026-11-26-h200/profile.json"))) == []


@pytest.mark.parametrize("steps, noted", [
    ([0.175, 0.177, 0.173, 0.188, 0.179, 0.187, 0.182, 0.177, 0.181, 0.188], False),  # 2026-11-29, quiet: +9%
    ([0.257, 0.313, 0.285, 0.239, 0.233, 0.194, 0.208, 0.229], True),  # the same day, minutes before: +61%
    ([0.20, 0.2799], False),  # under 40%
    ([0.20, 0.2801], True),
    ([0.0, 0.3], False),  # not a step time: nothing to compare
    ([], False),
])
def test_an_unsteady_machine_gets_a_note_under_the_table(steps, noted):
    """The reference's ZeRO-2 steps over the probe's rounds (committed probes of 2026-11-29 among them): more than
    40% apart, the machine's speed shifted while it was measured, and the table says to probe again."""
    from zerokit.commands.probe import render_table, steadiness_note
    from zerokit.perf.probe import _machine_from_measurements

    ref = {"compute_scale": 0.96, "rounds": len(steps), "micro_batch": 1, "seq_len": 64,
           "round_steps_s": {"zero2": steps}}
    note = steadiness_note(ref)
    assert (note is not None) == noted
    if noted:
        assert note.startswith(f"note: the reference's ZeRO-2 steps ran {min(steps):.3g}-{max(steps):.3g} s")
        assert note.endswith("Probe again when nothing else runs on it.")
        raw = _measurements(ref)
        assert render_table(_machine_from_measurements(raw), raw).count(note) == 1
    assert steadiness_note(None) is None and steadiness_note({"rounds": 4}) is None


def test_the_committed_probes_rounds_are_the_notes_evidence():
    """UNSTEADY_SPREAD's two data points are the rounds of tests/data/step_time/2026-11-29-amd-offload-accum."""
    from zerokit.commands.probe import steadiness_note

    profile = json.loads((PROFILES / "step_time" / "2026-11-29-amd-offload-accum" / "profile.json").read_text())
    busy, quiet = (r["engine_step"] for r in profile["measurements"]["rounds"])
    assert steadiness_note(busy) is not None and steadiness_note(quiet) is None


@pytest.mark.heavy
def test_a_bound_probe_starts_its_ranks_as_a_bound_launch_does(tmp_path, capsys, monkeypatch):
    """`zerokit probe --bind-cores-to-rank`: each rank under the numactl command DeepSpeed's own get_numactl_cmd gives
    it, OMP_NUM_THREADS its share of the physical cores, as `zerokit launch --bind-cores-to-rank` starts a job's; the
    profile records it, the table says so, and no oversubscription note follows (each rank has its own cores)."""
    pytest.importorskip("torch")
    if shutil.which("numactl") is None:
        pytest.skip("numactl is not installed here (make system-deps installs it)")
    from zerokit.launch.preflight import physical_cores

    share = (physical_cores() or 0) // 2
    if share < 1:
        pytest.skip("one physical core: nothing to share out between 2 ranks")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    out = tmp_path / "profile.json"
    assert main(["probe", "--quick", "--ranks", "2", "--bind-cores-to-rank", "-o", str(out)]) == 0
    captured = capsys.readouterr()
    measured = json.loads(out.read_text())["measurements"]
    assert measured["core_binding"]["threads_per_rank"] == share and measured["core_binding"]["rank0_command"][0] == \
        "numactl"
    assert (measured["threads_per_rank"], measured["cores"], measured["omp_num_threads"]) == (share, share, str(share))
    assert "ranks bound to cores" in captured.out and f"{share} cores and OpenMP threads a rank (numactl " in \
        captured.out
    assert "OpenMP's threads outnumber the cores" not in captured.out
    assert "[WARNING]" not in captured.out  # DeepSpeed's import, for its numactl command, logs nothing to stdout


def test_a_bound_probe_refuses_what_deepspeed_would_stop_at(capsys, monkeypatch):
    from zerokit.launch.preflight import physical_cores

    assert main(["probe", "--quick", "--bind-core-list", "0-1"]) == 2
    assert "read only with --bind-cores-to-rank" in capsys.readouterr().err
    assert main(["probe", "--quick", "--bind-cores-to-rank", "--bind-core-list", "0", "--ranks", "2"]) == 2
    err = capsys.readouterr().err
    assert ("gives 1 core for 2 ranks" in err or "numactl, which is not installed" in err) and err.count("\n") == 1
    if shutil.which("numactl"):
        beyond = os.cpu_count()
        args = ["probe", "--quick", "--bind-cores-to-rank", "--bind-core-list", f"0,{beyond}", "--ranks", "2"]
        assert main(args) == 2
        assert f"names core {beyond}" in capsys.readouterr().err
    cores = physical_cores()
    if cores is not None and shutil.which("numactl"):
        assert main(["probe", "--quick", "--bind-cores-to-rank", "--ranks", str(cores + 1)]) == 2
        assert f"this node has {cores} physical core" in capsys.readouterr().err
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable))  # this Python's directory: no numactl there
    if shutil.which("numactl") is None:
        assert main(["probe", "--quick", "--bind-cores-to-rank", "--ranks", "1"]) == 2
        assert "numactl, which is not installed here" in capsys.readouterr().err


def test_a_product_share_no_timing_can_have_prints_as_noise():
    """A quick probe's smallest sizes read the forward's share of a linear's forward and backward as 8510% (products
    too brief to time, or a 0 GFLOP/s reading): a share outside 0-100% prints as noise."""
    from zerokit.perf.probe import product_share

    matmul = [[32, 1e9], [64, 3e9], [128, 0.0], [256, 6e9]]
    product = [[32, 1e6], [64, 4e9], [128, 1e9], [256, 0.0]]
    assert product_share(matmul, product) == "32: noise, 64: 25%, 128: noise, 256: noise"


def _rank_pid(rank: int) -> int:
    """The pid of this process's probe rank `rank` (its child whose environment says RANK=rank)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if parent == os.getpid() and f"RANK={rank}".encode() in env:
            return int(pid)
    raise AssertionError(f"no probe rank {rank} among this process's children")


@pytest.mark.heavy
@pytest.mark.parametrize("rank, signum, said", [
    (1, 9, ("probe rank 1 was killed by SIGKILL, as the kernel's out-of-memory killer stops a process (see `dmesg`): "
            "probe with fewer --ranks or more memory free; the other ranks stopped with it")),
    (0, 15, "probe rank 0 was killed by SIGTERM, sent from outside the probe; the other ranks stopped with it"),
])
def test_a_rank_killed_mid_probe_is_the_one_named(capsys, rank, signum, said):
    """Rank 1 killed (the OOM killer's SIGKILL), the probe said 'probe rank 0 failed: [rank0]: RuntimeError: ...
    Connection closed by peer', gloo's error in the rank that was left; rank 0 killed, it quoted a bitsandbytes
    warning rank 0 had printed before."""
    pytest.importorskip("torch")
    if not os.path.isdir("/proc/self"):
        pytest.skip("Linux /proc")
    from zerokit.perf.probe import run_probe

    def progress(line: str) -> None:
        if line.startswith("[3/12]"):
            os.kill(_rank_pid(rank), signum)

    with pytest.raises(ZerokitError) as failed:
        run_probe(ranks=2, quick=True, progress=progress)
    assert str(failed.value) == said


def test_a_stale_jit_build_lock_is_refused_before_measuring(tmp_path, capsys, monkeypatch):
    """A lock a killed build of a DeepSpeed op left in torch's extension cache held the probe at '[11/12] training
    steps ...' until it was interrupted: the reference engines' deepspeed.initialize loads the shared-memory comm op
    through torch's FileBaton, which waits on it forever. A lock of a build in progress (younger than the preflight's
    STALE_LOCK_AGE_S) is left to its build."""
    from zerokit.perf.probe import stale_extension_locks

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    stale, fresh = tmp_path / "deepspeed_shm_comm" / "lock", tmp_path / "cpu_adam" / "lock"
    for lock in (stale, fresh):
        lock.parent.mkdir()
        lock.touch()
    os.utime(stale, (0, 0))
    assert stale_extension_locks() == [str(stale)]
    assert main(["probe", "--quick"]) == 2
    assert capsys.readouterr().err == (
        f"zerokit probe: error: stale JIT build lock {stale}: a killed build of a DeepSpeed op left it, and the probe's "
        f"ranks (like every DeepSpeed run here) would wait on it forever; remove it: rm {stale}\n")
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # torch's own cache: <XDG_CACHE_HOME>/torch_extensions/py3X_cpu
    moved = tmp_path / "torch_extensions" / "py311_cpu"
    moved.mkdir(parents=True)
    stale.parent.rename(moved / "deepspeed_shm_comm")
    assert stale_extension_locks() == [str(moved / "deepspeed_shm_comm" / "lock")]


@pytest.mark.heavy
def test_a_hang_up_stops_the_probe_as_sigterm_does(tmp_path):
    """The terminal closed or the ssh session dropped mid-probe: SIGHUP killed the probe outright and its ranks
    with it (SIGKILL, where one inside torch's JIT build leaves its lock), and its temp directory stayed behind. Now
    the probe and its ranks unwind as on SIGTERM: exit 128 + SIGHUP, no rank left, nothing left in the temp dir."""
    import signal
    import subprocess
    import sys

    pytest.importorskip("torch")
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    probe = subprocess.Popen([sys.executable, "-m", "zerokit", "probe", "--quick"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    for line in probe.stderr:
        if line.startswith("[3/12]"):
            break
    ranks = [p for p in os.listdir("/proc") if p.isdigit() and _parent(p) == probe.pid]
    assert ranks
    os.killpg(probe.pid, signal.SIGHUP)  # as a hang-up reaches the terminal's foreground process group
    probe.stderr.read()
    assert probe.wait(timeout=60) == 128 + signal.SIGHUP
    assert not [p for p in ranks if os.path.exists(f"/proc/{p}")] and os.listdir(tmp_path) == []


def _parent(pid: str) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None

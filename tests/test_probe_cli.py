"""`zerokit probe`: bad input exits 2 before anything is measured; a quick real probe writes a profile that
`load_profile` reads back; a full probe (slow) takes about a minute and measures every figure."""

from __future__ import annotations

import json
import os

import pytest

from zerokit.cli import main
from zerokit.perf import load_profile


@pytest.mark.parametrize("args, message", [
    (["--ranks", "0"], "--ranks must be at least 1"),
    (["--ranks", "two"], "--ranks must be a whole number"),
    (["--ranks", "65"], "--ranks must be 1..64"),
    (["--nvme-path", "/nonexistent/nvme"], "--nvme-path /nonexistent/nvme: not a directory"),
])
def test_bad_options_exit_2(args, message, capsys):
    assert main(["probe", "--quick", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


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


def test_probe_is_listed(capsys):
    with pytest.raises(SystemExit):
        from zerokit.cli import cli
        cli.main(args=["--help"], prog_name="zerokit")
    assert "probe" in capsys.readouterr().out


@pytest.mark.heavy
def test_quick_probe_writes_a_profile(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "profile.json"
    assert main(["probe", "--quick", "--ranks", "2", "--nvme-path", str(tmp_path), "-o", str(out)]) == 0
    captured = capsys.readouterr()
    assert "[1/11] device and memory" in captured.err and "[11/11] NVMe read/write" in captured.err
    assert "matmul bf16 GFLOP/s by size" in captured.out and f"profile written to {out}" in captured.out
    perf = load_profile(str(out))
    assert perf.device == "cpu" and perf.ranks_measured == 2 and not perf.comm_overlaps_compute
    assert set(perf.matmul) == {"bf16", "fp32"} and [s for s, _ in perf.matmul["bf16"]] == [32.0, 64.0]
    assert [s for s, _ in perf.matmul_forward["bf16"]] == [32.0, 64.0]  # the forward product alone, same sizes
    assert "forward's share, bf16" in captured.out and "the forward's share by size: bf16 32: " in captured.err
    assert perf.intra_node_bandwidth > 0 and perf.collective_latency_s > 0
    assert perf.sources["nvme"] == "probe" and perf.nvme_read > 0 and perf.nvme_write > 0
    raw = json.loads(out.read_text())["measurements"]
    assert raw["collectives"]["backend"] == "gloo" and raw["quick"] is True
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".zerokit-probe-")]  # the NVMe test file is gone


@pytest.mark.slow
def test_full_probe(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "profile.json"
    assert main(["probe", "-o", str(out)]) == 0
    perf = load_profile(str(out))
    assert [s for s, _ in perf.matmul["bf16"]] == [64.0, 128.0, 256.0, 512.0]
    assert len(perf.elementwise) == 3 and perf.cpu_adam_params_per_s > 0 and perf.device_adam_params_per_s > 0
    # the reference ZeRO-2 training step ran and set the compute scale
    assert perf.sources["compute_scale"].startswith("probe") and 0.25 <= perf.compute_scale <= 8.0
    raw = json.loads(out.read_text())["measurements"]["engine_step"]
    assert raw["step_s"] > 0 and raw["predicted_compute_s"] > 0 and raw["measured_compute_scale"] > 0


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


def test_profiles_before_the_measured_scale_read_as_probed():
    from zerokit.perf.probe import _machine_from_measurements

    perf = _machine_from_measurements(_measurements({"compute_scale": 0.25}))
    assert perf.compute_scale == 0.25 and perf.sources["compute_scale"] == "probe"

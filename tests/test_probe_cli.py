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
    assert "not a regular file" in capsys.readouterr().err
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
    assert perf.sources["compute_scale"] == "probe" and 0.25 <= perf.compute_scale <= 8.0
    raw = json.loads(out.read_text())["measurements"]["engine_step"]
    assert raw["step_s"] > 0 and raw["predicted_compute_s"] > 0

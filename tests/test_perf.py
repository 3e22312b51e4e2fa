"""The step-time library without torch: device figures, bandwidth parsing, profiles, FLOPs and the model's arithmetic,
each against values computed by hand."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from zerokit.errors import BadInput
from zerokit.hardware import GPU_PRESETS
from zerokit.models.params import count_parameters
from zerokit.perf import (
    DEVICE_FIGURES,
    MachinePerf,
    build_machine,
    load_profile,
    machine_from_preset,
    model_flops,
    parse_bandwidth,
    profile_to_json,
    step_time,
    time_to_train_s,
)
from zerokit.perf.machine import load_profile_and_memory

TINY_LLAMA = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 512,
              "tie_word_embeddings": False}


# ---------------------------------------------------------------------------------------------------------------------
# Device figures


def test_every_gpu_preset_has_cited_figures():
    assert set(DEVICE_FIGURES) == set(GPU_PRESETS)
    for fig in DEVICE_FIGURES.values():
        assert fig.sources and all(s for s in fig.sources)
        assert any("http" in s for s in fig.sources), fig.name
        assert {"fp16", "fp32"} <= set(fig.tflops)
        assert fig.memory_bandwidth > 1e11 and fig.intra_node_bandwidth > 1e10 and fig.inter_node_bandwidth > 1e9


def test_dense_figures_are_half_the_sparsity_ones():
    assert DEVICE_FIGURES["h100-80gb"].tflops["bf16"] == 989.5e12  # 1,979 TF with sparsity
    assert DEVICE_FIGURES["a100-80gb"].tflops["bf16"] == 312e12
    assert DEVICE_FIGURES["a100-80gb"].tflops["tf32"] == 156e12
    assert DEVICE_FIGURES["a100-80gb"].tflops["fp32"] == 19.5e12
    assert DEVICE_FIGURES["l4"].tflops["bf16"] == 121e12  # 242 with sparsity
    # the L40S datasheet gives its dense figure, 362.05, which is not half of the 733 with sparsity
    assert DEVICE_FIGURES["l40s"].tflops["bf16"] == DEVICE_FIGURES["l40s"].tflops["fp16"] == 362.05e12
    assert "bf16" not in DEVICE_FIGURES["v100-32gb"].tflops and "bf16" not in DEVICE_FIGURES["t4"].tflops
    assert DEVICE_FIGURES["h100-80gb"].intra_node_bandwidth == 450e9  # NVLink 4: 900 GB/s both ways
    assert DEVICE_FIGURES["h100-80gb"].pcie_bandwidth == 63e9 and DEVICE_FIGURES["v100-16gb"].pcie_bandwidth == 15.75e9


def test_preset_machine_and_overrides():
    perf = machine_from_preset("h100")  # alias
    assert perf.name == "h100-80gb"
    assert perf.peak_flops("bf16") == pytest.approx(989.5e12 * 0.8)
    assert perf.matmul_flops_at("bf16", 512) == pytest.approx(989.5e12 * 0.5)
    assert perf.matmul_flops_at("bf16", 32) == pytest.approx(989.5e12 * 0.02 * 32 / 64)  # below the curve: linear
    assert perf.h2d_pinned == pytest.approx(0.8 * 63e9)
    # pageable copies: the host's staging copy caps them on a Gen5 link (the lent H100/H200 hosts: 6.7-8.0 GB/s up,
    # 12.8-13.9 GB/s down); on a Gen3 link (V100) 40% of the link is below both caps
    assert (perf.h2d_pageable, perf.d2h_pageable) == (7e9, 13e9)
    v100 = machine_from_preset("v100-16gb")
    assert v100.h2d_pageable == v100.d2h_pageable == pytest.approx(0.4 * 15.75e9)
    assert perf.inter_node_bandwidth == 400e9 and perf.sources["inter_node_bandwidth"] == "preset:h100-80gb"
    over = build_machine(gpu="h100-80gb", intra_node_bandwidth="300GB/s", inter_node_bandwidth="3200Gbps",
                         pcie_bandwidth="25GiB/s")
    assert over.intra_node_bandwidth == 300e9 and over.inter_node_bandwidth == 400e9
    assert over.h2d_pinned == pytest.approx(0.8 * 25 * 2**30)
    assert (over.h2d_pageable, over.d2h_pageable) == (7e9, pytest.approx(0.4 * 25 * 2**30))
    assert over.sources["pcie"] == "option:--pcie-bandwidth"
    with pytest.raises(BadInput, match="unknown GPU preset 'h1000'"):
        machine_from_preset("h1000")
    with pytest.raises(BadInput, match="needs --gpu"):
        build_machine()
    with pytest.raises(BadInput, match="no bf16 matmul figure"):
        machine_from_preset("v100-32gb").peak_flops("bf16")


# ---------------------------------------------------------------------------------------------------------------------
# Bandwidth strings


@pytest.mark.parametrize("text, value", [
    ("300GB/s", 300e9), ("300 GB/s", 300e9), ("400Gbps", 50e9), ("400Gb/s", 50e9), ("25GiB/s", 25 * 2**30),
    ("3.2Tb/s", 400e9), ("1.6Tbps", 200e9), ("100MB/s", 100e6), ("900GBps", 900e9), (12.5e9, 12.5e9),
])
def test_parse_bandwidth(text, value):
    assert parse_bandwidth(text) == pytest.approx(value)


@pytest.mark.parametrize("text, message", [
    ("300", r"add a unit: 300GB/s \(bytes\) or 300Gbps \(bits\)"),
    ("300G", r"write it as a rate: 300GB/s"),
    ("300GB", r"write it as a rate: 300GB/s"),
    ("fast", "is not a bandwidth; write it like 300GB/s"),
    ("300XB/s", "is not a bandwidth"),
    ("0GB/s", "must be a positive bandwidth"),
    ("-5GB/s", "is not a bandwidth"),
    ("1000TB/s", "above 100 TB/s"),
    ("5e-324B/s", "below 1 kB/s"),  # a denormal rate made the time model divide by zero (exit 70)
    ("100b/s", "below 1 kB/s"),
    ("25iB/s", "'i' needs a prefix"),
    (float("nan"), "must be a positive bandwidth"),
    ("1e400GB/s", "above 100 TB/s"),  # an infinite rate, which read as "must be a positive bandwidth"
    (float("inf"), "above 100 TB/s"),
])
def test_parse_bandwidth_refuses(text, message):
    with pytest.raises(BadInput, match=message):
        parse_bandwidth(text, "--intra-node-bandwidth")


# ---------------------------------------------------------------------------------------------------------------------
# Profiles


def _profile(tmp_path, **changes) -> str:
    perf = replace(machine_from_preset("a100-80gb"), name="test box", ranks_measured=2)
    data = profile_to_json(perf, {"ranks": 2})
    for key, value in changes.items():
        if value is None:
            data.pop(key)
        else:
            data[key] = value
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_profile_round_trip(tmp_path):
    perf = load_profile(_profile(tmp_path))
    base = machine_from_preset("a100-80gb")
    assert base.compute_scale == 1.2 and base.sources["compute_scale"].startswith("default: forward and backward")
    assert perf.compute_scale == 1.2  # the preset's, written to the profile
    assert load_profile(_profile(tmp_path, compute_scale=None)).compute_scale == 1.0  # a profile before it existed
    assert load_profile(_profile(tmp_path, compute_scale=1.25)).compute_scale == 1.25
    assert perf.matmul_forward == {}  # a preset's, and a profile's from before the probe measured it
    forward = {"bf16": [[64.0, 2e10], [512.0, 4e11]]}
    assert load_profile(_profile(tmp_path, matmul_forward=forward)).matmul_forward == {
        "bf16": ((64.0, 2e10), (512.0, 4e11))}
    assert perf.matmul_input_grad == {}
    assert load_profile(_profile(tmp_path, matmul_input_grad=forward)).matmul_input_grad == {
        "bf16": ((64.0, 2e10), (512.0, 4e11))}
    assert load_profile(_profile(tmp_path, matmul_input_grad=None)).matmul_input_grad == {}  # a profile before it
    assert perf.name == "test box" and perf.ranks_measured == 2
    assert perf.matmul == base.matmul and perf.elementwise == base.elementwise
    assert perf.intra_node_bandwidth == base.intra_node_bandwidth and perf.sources["pcie"] == "preset:a100-80gb"
    over = build_machine(hardware_profile=_profile(tmp_path), inter_node_bandwidth="100Gbps")
    assert over.inter_node_bandwidth == 12.5e9 and over.intra_node_bandwidth == base.intra_node_bandwidth


@pytest.mark.parametrize("changes, message", [
    ({"zerokit_profile": None}, "not a zerokit probe profile"),
    # another zerokit's version: said so, not "not a profile" (a newer probe's profile read by an older zerokit)
    ({"zerokit_profile": 99}, (r"a profile of version 99, which this zerokit does not read \(it reads version 1\); "
                              r"probe again with this zerokit: `zerokit probe -o .* --force`")),
    ({"zerokit_profile": "1"}, "not a zerokit probe profile"),
    ({"matmul": None}, "missing matmul"),
    ({"bogus": 1}, r"unknown key\(s\) bogus"),
    ({"name": ""}, "name must be a non-empty string"),
    ({"device": "tpu"}, 'device must be "gpu" or "cpu"'),
    ({"matmul": {}}, "matmul must map dtypes"),
    ({"matmul": {"int8": [[1, 1e12]]}}, "unknown dtype 'int8'"),
    ({"matmul": {"bf16": [[512, 1e12], [256, 1e12]]}}, "strictly ascending"),
    ({"matmul": {"bf16": [[512, -1]]}}, r"point \[512, -1\] is not \[size > 0, rate 1000\.\.1e\+18\]"),
    ({"matmul": {"bf16": [[512, 5e-324]]}}, r"is not \[size > 0, rate 1000"),
    ({"elementwise": [[1, 1e-300]]}, r"elementwise: point \[1, 1e-300\] is not"),
    # a size far beyond any product: below it the curve's rate falls in proportion, and the step took 1.8e300 s
    ({"matmul": {"bf16": [[1e300, 1e17]]}}, r"matmul.bf16: point \[1e\+300, 1e\+17\] has a size outside 1\.\.1e\+06"),
    ({"attention": {"bf16": [[64, 1e12], [1e7, 1e12]]}}, r"attention.bf16: point .* has a size outside 1\.\.1e\+06"),
    ({"elementwise": [[0.5, 1e9]]}, r"elementwise: point \[0\.5, 1000000000\.0\] has a size outside 1\.\.1e\+18"),
    ({"matmul": {"bf16": [[512, True]]}}, "is not"),
    ({"matmul_forward": {"bf16": [[512, 1e12], [64, 1e12]]}}, "matmul_forward.bf16: sizes must be strictly"),
    ({"matmul_forward": {"int4": [[1, 1e12]]}}, "matmul_forward has unknown dtype 'int4'"),
    ({"matmul_input_grad": {"bf16": [[512, 0]]}}, r"matmul_input_grad.bf16: point \[512, 0\] is not"),
    ({"matmul_input_grad": "slow"}, "matmul_input_grad must map dtypes"),
    ({"elementwise": "fast"}, "elementwise must be a list"),
    ({"h2d_pinned": -1}, "h2d_pinned must be a finite number >= 0"),
    ({"h2d_pinned": "1GB/s"}, "h2d_pinned must be a finite number"),
    ({"h2d_pinned": 0}, "h2d_pinned must be > 0"),
    # rates the time model divides by (a hand-edited 0 was an internal error, exit 70, before)
    ({"h2d_pageable": 0}, "h2d_pageable must be > 0"),
    ({"d2h_pageable": 0}, "d2h_pageable must be > 0"),
    ({"intra_node_bandwidth": 0}, "intra_node_bandwidth must be > 0"),
    ({"inter_node_bandwidth": 0}, "inter_node_bandwidth must be > 0"),
    ({"nvme_read": 0}, "nvme_read must be > 0"),
    ({"nvme_write": 0}, "nvme_write must be > 0"),
    ({"cpu_adam_params_per_s": 5e-324}, r"cpu_adam_params_per_s = 5e-324 is outside 1000\.\.1e\+14"),
    ({"host_cast_params_per_s": 1e-300}, "host_cast_params_per_s = 1e-300 is outside"),
    ({"h2d_pinned": 1e30}, "outside"),
    ({"collective_efficiency": 3}, "collective_efficiency = 3 is outside 0.01..1"),
    ({"compute_scale": 0.1}, "compute_scale = 0.1 is outside 0.25..8"),
    ({"host_op_s": 2.0}, "host_op_s = 2.0 is outside 0..1"),  # a second a kernel: a broken or hand-edited profile
    ({"host_optimizer_s": -1}, "host_optimizer_s must be a finite number >= 0"),
    ({"comm_overlaps_compute": "yes"}, "comm_overlaps_compute must be true or false"),
    ({"ranks_measured": 0}, "ranks_measured must be a whole number 1..1024"),
    ({"sources": {"a": 1}}, "sources must map figure names to one line of printable text"),
    # JSON integers beyond a float's range: math.isfinite raised OverflowError, exit 70 (zerokit probe fuzz)
    ({"h2d_pinned": 10**400}, r"h2d_pinned must be a finite number >= 0, got 10000000000000000000000000+\.\.\.; "),
    ({"collective_efficiency": -10**400}, "collective_efficiency must be a finite number >= 0, got -1000"),
    ({"matmul": {"bf16": [[512, 10**400]]}}, r"matmul.bf16: point \[512, 10000000000+\.\.\. is not"),
    ({"elementwise": [[10**400, 1e9]]}, r"elementwise: point \[10000000000+\.\.\. is not"),
    # the plan's table and warnings print these: a newline split a warning, an escape code reached the terminal
    ({"name": "NVIDIA\nH100"}, r"name must be one line of printable text, at most 200 .*got 'NVIDIA\\nH100'"),
    ({"name": "\x1b[31mH100"}, "name must be one line of printable text"),
    ({"name": "H100 " * 100}, "name must be one line of printable text"),
    ({"sources": {"pcie": "measured\nby hand"}}, "sources must map figure names to one line of printable text"),
])
def test_profile_refuses(tmp_path, changes, message):
    with pytest.raises(BadInput, match=message):
        load_profile(_profile(tmp_path, **changes))


@pytest.mark.parametrize("changes", [{"device": "x" * 200_000}, {"h2d_pinned": "x" * 200_000},
                                     {"h2d_pinned": [1.0] * 50_000}, {"matmul": {"x" * 200_000: [[1, 1e12]]}},
                                     {"elementwise": [["x" * 200_000, 1e9]]}, {"ranks_measured": 10**400},
                                     {f"bogus{i}" + "x" * 1000: 1 for i in range(100)}])
def test_a_profile_error_quotes_at_most_a_few_words_of_the_value(tmp_path, changes):
    """The value was quoted whole: one error line of 200 KB for a hand-edited profile."""
    with pytest.raises(BadInput) as e:
        load_profile(_profile(tmp_path, **changes))
    assert len(str(e.value)) < 400 and "..." in str(e.value), str(e.value)[:500]


def test_a_key_given_twice_in_a_profile_is_refused(tmp_path):
    """JSON keeps the last of two: a hand edit's appended figure silently replaced the measured one, or not."""
    path = Path(_profile(tmp_path))
    path.write_text(path.read_text()[:-1] + ', "h2d_pinned": 1e3}')
    with pytest.raises(BadInput, match=r"'h2d_pinned' is given twice in one object; keep the figure you mean"):
        load_profile(str(path))
    path = Path(_profile(tmp_path))
    path.write_text(path.read_text().replace('"sources": {', '"sources": {"pcie": "a", '))
    with pytest.raises(BadInput, match="is given twice in one object"):  # nested objects too
        load_profile(str(path))


def test_a_profile_without_the_optional_rates_takes_what_the_probe_would_have_assumed(tmp_path):
    """Missing, they were 0 and the time model divided by them (exit 70 for a multi-node or NVMe plan)."""
    perf = load_profile(_profile(tmp_path, h2d_pageable=None, d2h_pageable=None, inter_node_bandwidth=None,
                                 nvme_read=None, nvme_write=None))
    # half the pinned rate, but no faster than the host's staging copy (the lent H100/H200 hosts')
    assert perf.h2d_pageable == min(0.5 * perf.h2d_pinned, 7e9) and perf.d2h_pageable == min(0.5 * perf.d2h_pinned,
                                                                                               13e9)
    assert (perf.inter_node_bandwidth, perf.nvme_read, perf.nvme_write) == (12.5e9, 6.5e9, 3.5e9)
    assert perf.sources["nvme_read"].startswith("default: ") and perf.sources["h2d_pageable"].startswith("default: ")
    t = step_time(TINY_LLAMA, perf, parameters=P, seq_len=32, micro_batch=2, gpus_per_node=8, nodes=2,
                  zero_stage=3, offload_optimizer="nvme", pin_memory=False)
    assert 0 < t.step_time_s < 60


def test_profile_file_errors(tmp_path):
    with pytest.raises(BadInput, match="no such file; write one with `zerokit probe -o"):
        load_profile(str(tmp_path / "missing.json"))
    with pytest.raises(BadInput, match="not a regular file"):
        load_profile(str(tmp_path))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(BadInput, match="not a regular file"):
        load_profile(str(fifo))
    big = tmp_path / "big.json"
    big.write_text(" " * (2 << 20))
    with pytest.raises(BadInput, match="over the 1 MiB"):
        load_profile(str(big))
    bad = tmp_path / "bad.json"
    bad.write_text('{"zerokit_profile": 1,')
    with pytest.raises(BadInput, match="malformed JSON at line 1"):
        load_profile(str(bad))
    binary = tmp_path / "bin.json"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(BadInput, match="not UTF-8"):
        load_profile(str(binary))
    listing = tmp_path / "list.json"
    listing.write_text("[]")
    with pytest.raises(BadInput, match="not a zerokit probe profile"):
        load_profile(str(listing))
    with pytest.raises(BadInput, match="--hardware is empty"):
        load_profile("")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(BadInput, match=r"not a probe profile \(nested too deeply\)"):
        load_profile(str(deep))
    h200 = json.loads((Path(__file__).parent / "data" / "gpu" / "2026-11-26-h200" / "profile.json").read_text())
    # saved again with a byte-order mark (an editor's UTF-8 with BOM): it said "malformed JSON at line 1, column 1:
    # Unexpected UTF-8 BOM (decode using utf-8-sig); re-run `zerokit probe`"; zerokit alone reads it, so it loads
    marked = tmp_path / "bom.json"
    marked.write_bytes(b"\xef\xbb\xbf" + json.dumps(h200).encode())
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(h200))
    assert load_profile_and_memory(str(marked)) == load_profile_and_memory(str(plain))
    for broken, says in (({"zerokit_profile": True}, "not a zerokit probe profile"),
                         ({"attention": 0}, "attention must map dtypes"),
                         ({"measurements": {"device_memory_bytes": 1}},
                          "measurements.device_memory_bytes must be a whole number of bytes from 1 GiB"),
                         # a list or a string was read as no measurements: the plan then asked for --gpu
                         ({"measurements": [1]}, r"measurements must be an object \(the probe's raw figures\), got \[1\]"),
                         ({"measurements": "x"}, "measurements must be an object")):
        edited = tmp_path / "edited.json"
        edited.write_text(json.dumps({**h200, **broken}))
        with pytest.raises(BadInput, match=says):
            load_profile_and_memory(str(edited))
    digits = tmp_path / "digits.json"
    digits.write_text('{"zerokit_profile": ' + "9" * 5000 + "}")
    with pytest.raises(BadInput, match=r"not a probe profile \(a number of more than 4300 digits\)"):
        load_profile(str(digits))


# ---------------------------------------------------------------------------------------------------------------------
# FLOPs, by hand


def test_llama_flops_by_hand():
    mf = model_flops(TINY_LLAMA)
    # per layer: q 64x64, k and v 64x32, o 64x64, gate/up/down 3 x 64x172; LM head 64x512; 2 FLOPs per weight
    layer = 2 * (64 * 64 + 64 * 32 + 64 * 32 + 64 * 64 + 3 * 64 * 172)
    assert layer == 90624
    assert mf.matmul_flops_per_token == 2 * layer + 2 * 64 * 512 == 246784
    # scores: QK^T and PV, 4 x heads x head_dim FLOPs per (query, key) pair, 2 layers, seq 32
    assert mf.score_flops(32, "eager") == 4 * 4 * 16 * 2 * 32 * 32 == 524288
    assert mf.score_flops(32, "sdpa") == 4 * 4 * 16 * 2 * (32 * 33 // 2) == 270336
    assert mf.score_flops(32, "flash") == mf.score_flops(32, "sdpa")
    assert mf.forward_flops(32, 2, "sdpa") == 2 * (32 * 246784 + 270336)
    assert model_flops(TINY_LLAMA) is mf  # cached per dict


def test_moe_counts_only_the_active_experts():
    mixtral = {"model_type": "mixtral", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
               "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 2,
               "vocab_size": 100, "sliding_window": None}
    mf = model_flops(mixtral)
    attention = 2 * (32 * 32 + 2 * 32 * 16 + 32 * 32)
    router, experts, head = 2 * 32 * 4, 2 * 2 * 3 * 32 * 64, 2 * 32 * 100
    assert mf.matmul_flops_per_token == attention + router + experts + head == 37376
    expert = next(m for m in mf.layer_matmuls if m.name == "mlp.experts.gate_proj")
    assert expert.token_share == 0.5  # each expert sees top-k / experts of the tokens


def test_plain_families_by_hand():
    gpt2 = {"model_type": "gpt2", "n_embd": 32, "n_layer": 2, "n_head": 4, "vocab_size": 100, "n_positions": 64}
    per_layer = 2 * (32 * 96 + 32 * 32 + 32 * 128 + 128 * 32)
    assert model_flops(gpt2).matmul_flops_per_token == 2 * per_layer + 2 * 32 * 100 == 55552
    falcon = {"model_type": "falcon", "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
              "vocab_size": 100, "multi_query": True}
    # multi-query: q = 64, one k and v head of 16
    assert model_flops(falcon).matmul_flops_per_token == 2 * (64 * (64 + 32) + 64 * 64 + 2 * 64 * 256) + 2 * 64 * 100
    phi3 = {"model_type": "phi3", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
            "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 100}
    mf = model_flops(phi3)
    assert [m.name for m in mf.layer_matmuls] == ["qkv_proj", "o_proj", "mlp.gate_up_proj", "mlp.down_proj"]
    assert mf.matmul_flops_per_token == 2 * (64 * 192 + 64 * 64 + 64 * 256 + 128 * 64) + 2 * 64 * 100


def test_sliding_window_by_kernel():
    mistral = {"model_type": "mistral", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
               "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 100, "sliding_window": 8}
    mf = model_flops(mistral)
    per_pair = 4 * 4 * 16
    assert mf.score_flops(32, "flash") == per_pair * (8 * 9 / 2 + (32 - 8) * 8)  # each query sees at most 8 keys
    assert mf.score_flops(32, "sdpa") == per_pair * 32 * 32  # the window reaches sdpa as an explicit mask
    assert mf.score_flops(8, "sdpa") == per_pair * 8 * 9 / 2  # within the window: plain causal
    gemma2 = {"model_type": "gemma2", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100,
              "sliding_window": 8}
    groups = model_flops(gemma2).attention
    assert [(g.layers, g.window) for g in groups] == [(2, None), (2, 8)]  # even layers slide


def test_every_family_has_flops():
    from zerokit.models.presets import PRESET_NAMES
    from zerokit.models.resolve import resolve_model

    seen = set()
    for name in PRESET_NAMES:
        spec = resolve_model(name)
        mf = model_flops(spec.config)
        seen.add(mf.model_type)
        # forward matmul FLOPs per token are about 2 x the parameters that multiply (embeddings excluded);
        # an MoE multiplies by its active experts only
        low = 0.15 if mf.model_type.endswith("moe") or mf.model_type == "mixtral" else 1.2
        assert low * spec.parameters < mf.matmul_flops_per_token < 2.2 * spec.parameters, name
    assert len(seen) == 15


# ---------------------------------------------------------------------------------------------------------------------
# The model's arithmetic, on a flat machine: 1 TFLOP/s at every size, free elementwise work and launches


FLAT = MachinePerf(name="flat", device="gpu", matmul={"bf16": ((1.0, 1e12),)}, elementwise=((1.0, 1e30),),
                   op_overhead_s=0.0, intra_node_bandwidth=1e9, inter_node_bandwidth=1e9, collective_efficiency=1.0,
                   collective_latency_s=0.0, comm_overlaps_compute=False, h2d_pinned=1e9, d2h_pinned=5e8,
                   h2d_pageable=2.5e8, d2h_pageable=2.5e8, cpu_adam_params_per_s=1e8, device_adam_params_per_s=1e9,
                   nvme_read=2e9, nvme_write=1e9, zero3_module_overhead_s=0.0, bucket_flush_s=0.0,
                   step_overhead_s=0.0)
P = 156480  # count_parameters(TINY_LLAMA): embed 32768 + 2 x 45440 + norm 64 + head 32768
FWD = 2 * (32 * 246784 + 270336)  # forward FLOPs of micro-batch 2 x seq 32, sdpa
RECOMPUTE = 2 * (32 * (246784 - 2 * 64 * 512) + 270336)  # the layers again, LM head excluded


def _t(**kw):
    args = {"parameters": P, "seq_len": 32, "micro_batch": 2}
    args.update(kw)
    return step_time(TINY_LLAMA, FLAT, **args)


def test_bucket_flushes_by_hand():
    """Each full reduce bucket costs `bucket_flush_s`: ZeRO-2 and 3 flush in every micro-batch's backward, ZeRO-1
    once a step, ZeRO-0 has no ZeRO buckets; one rank flushes too."""
    flushing = replace(FLAT, bucket_flush_s=1e-3)
    # 16 buckets of 10,000 elements hold 156,480 gradients, but DeepSpeed flushes before any gradient that would
    # overfill the bucket (`flushes`), in backward order: the head (32,768) flushes the empty bucket, the norm
    # flushes the head; in each layer down, up, gate (11,008 each) and the post-attention norm flush what came
    # before, o, v and k fill it (8,256), q flushes them, the input norm joins q: 5 a layer; the embedding flushes
    # the last input norm and q, and the epilogue the embedding: 2 + 2 x 5 + 2 = 14
    flushes = 14
    for stage, per_step in ((0, 0), (1, 1), (2, 4), (3, 4)):
        for gpus in (1, 2):
            args = {"parameters": P, "seq_len": 32, "micro_batch": 2, "grad_accum": 4, "zero_stage": stage,
                    "gpus_per_node": gpus, "reduce_bucket_size": 10_000}
            base, paid = step_time(TINY_LLAMA, FLAT, **args), step_time(TINY_LLAMA, flushing, **args)
            assert paid.overhead_s - base.overhead_s == pytest.approx(per_step * flushes * 1e-3), (stage, gpus)
            assert paid.step_time_s - base.step_time_s == pytest.approx(per_step * flushes * 1e-3)
    # DeepSpeed's default bucket (5e8 elements) holds every gradient: one flush per reduce
    default = step_time(TINY_LLAMA, flushing, parameters=P, seq_len=32, micro_batch=2, zero_stage=2)
    assert default.overhead_s == pytest.approx(1e-3)


def test_single_rank_step_by_hand():
    assert count_parameters(TINY_LLAMA)[0] == P
    t = _t()
    assert t.compute_s == pytest.approx(3 * FWD / 1e12)
    assert t.optimizer_s == pytest.approx(P / 1e9)
    assert t.communication_s == 0 and t.offload_s == 0
    assert t.step_time_s == pytest.approx(3 * FWD / 1e12 + P / 1e9)
    assert t.tokens_per_step == 64 and t.tokens_per_s == pytest.approx(64 / t.step_time_s)
    assert t.mfu == pytest.approx(3 * FWD / (t.step_time_s * 1e12))
    ckpt = _t(gradient_checkpointing=True)
    assert ckpt.compute_s - t.compute_s == pytest.approx(RECOMPUTE / 1e12)
    assert ckpt.flops_per_step == t.flops_per_step  # recomputation is not model FLOPs
    assert time_to_train_s(t, 640) == pytest.approx(10 * t.step_time_s)
    assert t.time_to_train_s(650) == pytest.approx(11 * t.step_time_s)  # a partial step is a step


LAYER_MATMULS = 64 * (246784 - 2 * 64 * 512)  # forward FLOPs of the layers' products (LM head excluded), 64 tokens


@pytest.mark.parametrize("forward_rate, layer_forward_s", [
    (1.5e12, LAYER_MATMULS / 1.5e12),  # the forward product 1.5x the forward-and-backward average (a CPU's)
    (10e12, 0.5 * LAYER_MATMULS / 1e12),  # beyond 2x is noise: held to half the average product's time
    (0.5e12, 1.5 * LAYER_MATMULS / 1e12),  # and to 1.5x it the other way
])
def test_a_measured_forward_rate_prices_recomputation(forward_rate, layer_forward_s):
    """With a forward curve, the forward products run at its rate and the backward ones at the rest of the
    forward-and-backward time: a step without checkpointing takes as long as before, recomputation less (or more)."""
    split = replace(FLAT, matmul_forward={"bf16": ((1.0, forward_rate),)})
    base, ckpt = _t(), _t(gradient_checkpointing=True)
    t = step_time(TINY_LLAMA, split, parameters=P, seq_len=32, micro_batch=2)
    t_ckpt = step_time(TINY_LLAMA, split, parameters=P, seq_len=32, micro_batch=2, gradient_checkpointing=True)
    assert t.compute_s == pytest.approx(base.compute_s, rel=1e-12)
    assert t_ckpt.compute_s - t.compute_s == pytest.approx(RECOMPUTE / 1e12 - LAYER_MATMULS / 1e12 + layer_forward_s)
    assert (t_ckpt.compute_s < ckpt.compute_s) is (forward_rate > 1e12)


def test_no_forward_curve_is_the_same_step():
    """Presets and older profiles have no forward curve: every figure of every setup is exactly as before."""
    empty = replace(FLAT, matmul_forward={"fp32": ((1.0, 3e12),)})  # another dtype's curve: bf16 reads the average
    for kw in ({}, {"gradient_checkpointing": True}, {"zero_stage": 3, "gpus_per_node": 2}):
        assert step_time(TINY_LLAMA, empty, parameters=P, seq_len=32, micro_batch=2, **kw) == _t(**kw)


LAYERS_AND_HEAD = 64 * 246784  # forward FLOPs of every weight product, LM head included, 64 tokens
LORA_TRAINABLE = 1564  # adapters: 1% of P, priced at the peak (no `lora` shapes given)


@pytest.mark.parametrize("input_grad_rate, input_grad_s", [
    (0.6e12, LAYERS_AND_HEAD / 0.6e12),  # a CPU's slow input-gradient product: 5/3 of the average product
    (0.4e12, 1.95 * LAYERS_AND_HEAD / 1e12),  # held to what the forward (1 third) leaves less 1/60 of the whole
    (4e12, 0.5 * LAYERS_AND_HEAD / 1e12),  # and to half the average product the other way
])
def test_a_measured_input_gradient_rate_prices_a_frozen_base(input_grad_rate, input_grad_s):
    """With an input-gradient curve, a frozen (LoRA) base's backward runs at its rate, and the weight gradients at
    what the forward and it leave of the forward and backward: full fine-tuning takes as long as before, a LoRA
    step (whose base skips its weight gradients) longer where the input gradient is the slow product."""
    split = replace(FLAT, matmul_input_grad={"bf16": ((1.0, input_grad_rate),)})
    for kw in ({}, {"gradient_checkpointing": True}, {"zero_stage": 3, "gpus_per_node": 2}):
        t = step_time(TINY_LLAMA, split, parameters=P, seq_len=32, micro_batch=2, **kw)
        assert t.compute_s == pytest.approx(_t(**kw).compute_s, rel=1e-12)
    lora = step_time(TINY_LLAMA, split, parameters=P, seq_len=32, micro_batch=2,
                     trainable_parameters=LORA_TRAINABLE)
    even = _t(trainable_parameters=LORA_TRAINABLE)  # no curve: the backward's two products split evenly
    third = LAYERS_AND_HEAD / 1e12
    # the frozen base runs no weight-gradient product in either: only its input gradient's rate differs
    assert lora.compute_s - even.compute_s == pytest.approx(input_grad_s - third, rel=1e-9)


def test_forward_and_input_gradient_curves_together():
    """Both curves: forward at 1.5x the average rate, input gradient at 0.6x; the weight gradients take the rest,
    so full fine-tuning is unchanged and a LoRA step runs the forward and the input gradient (plus its adapters)."""
    both = replace(FLAT, matmul_forward={"bf16": ((1.0, 1.5e12),)}, matmul_input_grad={"bf16": ((1.0, 0.6e12),)})
    assert step_time(TINY_LLAMA, both, parameters=P, seq_len=32, micro_batch=2).compute_s == pytest.approx(
        _t().compute_s, rel=1e-12)
    frozen = step_time(TINY_LLAMA, both, parameters=P, seq_len=32, micro_batch=2, trainable_parameters=0)
    flat_frozen = _t(trainable_parameters=0)
    third = LAYERS_AND_HEAD / 1e12
    forward, input_grad = LAYERS_AND_HEAD / 1.5e12, LAYERS_AND_HEAD / 0.6e12
    assert frozen.compute_s - flat_frozen.compute_s == pytest.approx(forward + input_grad - 2 * third, rel=1e-9)


def test_no_input_gradient_curve_is_the_same_step():
    """Presets and older profiles (every committed GPU and CPU measurement before 2026-11-27) have no input-gradient
    curve, and another dtype's curve is not read: every figure of every setup is exactly as before."""
    other = replace(FLAT, matmul_input_grad={"fp32": ((1.0, 1e11),)})
    for kw in ({}, {"trainable_parameters": LORA_TRAINABLE}, {"zero_stage": 3, "gpus_per_node": 2}):
        assert step_time(TINY_LLAMA, other, parameters=P, seq_len=32, micro_batch=2, **kw) == _t(**kw)


def test_zero_communication_by_hand():
    # 2 ranks: a ring moves half the data per rank; bf16 = 2 bytes; 1 GB/s -> 1e-9 s per element
    per = 0.5 * 2 / 1e9
    z0 = _t(gpus_per_node=2, zero_stage=0, grad_accum=3)
    assert z0.communication_s == pytest.approx(2 * P * per)  # one all-reduce per optimizer step
    z1 = _t(gpus_per_node=2, zero_stage=1, grad_accum=3)
    assert z1.communication_s == pytest.approx(2 * P * per)  # reduce-scatter + all-gather, once per step
    z2 = _t(gpus_per_node=2, zero_stage=2, grad_accum=3)
    assert z2.communication_s == pytest.approx(3 * P * per + P * per)  # reduce-scatter in every backward
    assert z2.exposed_communication_s == z2.communication_s  # this machine cannot overlap
    assert z2.optimizer_s == pytest.approx(P / 2 / 1e9)
    # with no reuse window (stage3_max_reuse_distance 0) backward gathers every parameter again
    z3 = _t(gpus_per_node=2, zero_stage=3, persistence_threshold=0, reuse_distance=0)
    assert z3.communication_s == pytest.approx(2 * P * per + P * per)  # gathers in forward and backward + reduce
    # DeepSpeed's default stage3_param_persistence_threshold (1e5) keeps every tensor of this tiny model whole
    assert _t(gpus_per_node=2, zero_stage=3).communication_s == pytest.approx(P * per)
    mf = model_flops(TINY_LLAMA)
    assert mf.gathered(30000) == (2, 2 * 32768)  # only the embedding and the LM head are above 30,000
    assert mf.gathered(0) == (2 + 2 * 9 + 1, P)
    two_nodes = _t(gpus_per_node=1, nodes=2, zero_stage=3, persistence_threshold=0, reuse_distance=0)
    assert two_nodes.communication_s == pytest.approx(z3.communication_s)  # 1 GB/s node NIC, one GPU per node
    four = _t(gpus_per_node=2, nodes=2, zero_stage=3, persistence_threshold=0, reuse_distance=0)  # NIC shared
    assert four.communication_s == pytest.approx(3 * P * 0.75 * 2 / 0.5e9)  # 0.5 GB/s each


def test_zero3_reuse_window_by_hand():
    """ZeRO-3 keeps a module gathered from forward into backward by the reuse window (fewer than
    `stage3_max_reuse_distance` parameters fetched between its two uses: twice what follows it in forward) or,
    whichever keeps more, as DeepSpeed's prefetcher does: the last modules up to that many gathered parameters (the
    live limit, which a plan writes alike). TINY_LLAMA's forward ends ... layer 0's up 11,008 and down 11,008, then
    layer 1: its input norm 64, q 4,096, k 2,048, v 2,048, o 4,096, its post-attention norm 64, gate, up and down
    11,008 each, then the final norm 64 and the head 32,768. At 100,000 the window keeps the head (0 after it), the
    norm (2 x 32,768 = 65,536 < 100,000), down (65,664) and up (87,680), not gate (109,696); the prefetcher's rule
    keeps on to layer 0's down, 89,280 parameters, as its up would bring them to 100,288."""
    per = 0.5 * 2 / 1e9
    mf = model_flops(TINY_LLAMA)
    layer = (64, 4096, 2048, 2048, 4096, 64, 11008, 11008, 11008)  # norms, q, k, v, o, gate, up, down in use order
    assert mf.forward_trace == (32768, *layer, *layer, 64, 32768) and sum(mf.forward_trace) == P
    kept = 32768 + 64 + 3 * 11008 + 64 + 4096 + 2 * 2048 + 4096 + 64 + 11008
    assert kept == 89280 and mf.regathered(0, 100_000) == (21 - 12, P - kept)
    assert mf.regathered(0, 1e9) == (0, 0) and mf.regathered(0, 0) == mf.gathered(0)
    # at 40,000 the window (head, norm) keeps more than the limit alone would (nothing: the head is 32,768 and the
    # norm and down bring 43,840)
    assert mf.regathered(0, 40_000) == (21 - 2, P - 32768 - 64)
    # above the persistence threshold the norms are kept whole anyway: not among the gathers, nor the live limit's
    gathers, gathered = mf.gathered(100)
    assert (gathers, gathered) == (21 - 5, P - 5 * 64)
    assert mf.regathered(100, 100_000) == (gathers - 9, gathered - (kept - 3 * 64))  # three norms among them
    window = _t(gpus_per_node=2, zero_stage=3, persistence_threshold=0, reuse_distance=100_000)
    assert window.communication_s == pytest.approx((P + P - kept) * per + P * per)
    whole = _t(gpus_per_node=2, zero_stage=3, persistence_threshold=0)  # DeepSpeed's default, 1e9
    assert whole.communication_s == pytest.approx(P * per + P * per)  # forward's gathers and the reduce


def test_zero3_gathers_travel_beside_the_cpu_ranks_compute_and_hooks():
    """DeepSpeed's CPU accelerator has no streams, but ZeRO-3's all-gathers are issued async and gloo runs them on its
    own threads: a prefetched gather hides behind the rank's compute and hooks of its pass; the first module's
    gather and the reduce-scatter (which waits) do not. FLAT at 1 GB/s: each pass gathers P elements, 2 bytes, half
    of them from the other rank."""
    per, hook = 0.5 * 2 / 1e9, 1e-6
    cpu = replace(FLAT, device="cpu", zero3_module_overhead_s=hook)
    t = step_time(TINY_LLAMA, cpu, parameters=P, seq_len=32, micro_batch=2, gpus_per_node=2, zero_stage=3,
                  persistence_threshold=0, reuse_distance=0)
    fwd, gathers = FWD / 1e12, 21  # FLAT's flat rate: backward twice forward
    assert t.compute_s == pytest.approx(3 * fwd)
    hooks = gathers * hook  # a pass's: every module that owns parameters
    gather = P * per
    assert t.communication_s == pytest.approx(3 * gather)
    assert t.exposed_communication_s == pytest.approx((gather - fwd - hooks) + gather / gathers
                                                      + (gather - 2 * fwd - hooks) + gather)
    assert t.overhead_s == pytest.approx(2 * hooks)  # the hooks themselves still run on the rank
    # a GPU profile that cannot overlap (FLAT) waits for every gather; without prefetch the CPU waits too
    gpu = step_time(TINY_LLAMA, replace(FLAT, zero3_module_overhead_s=hook), parameters=P, seq_len=32, micro_batch=2,
                    gpus_per_node=2, zero_stage=3, persistence_threshold=0, reuse_distance=0)
    assert gpu.exposed_communication_s == pytest.approx(3 * gather)
    no_prefetch = step_time(TINY_LLAMA, cpu, parameters=P, seq_len=32, micro_batch=2, gpus_per_node=2, zero_stage=3,
                            persistence_threshold=0, reuse_distance=0, prefetch_bucket_size=0)
    assert no_prefetch.exposed_communication_s == pytest.approx(3 * gather)


def test_overlap_hides_what_compute_covers():
    overlapping = replace(FLAT, comm_overlaps_compute=True, intra_node_bandwidth=1e12)
    t = step_time(TINY_LLAMA, overlapping, parameters=P, seq_len=32, micro_batch=2, gpus_per_node=2, zero_stage=3,
                  persistence_threshold=0)
    assert t.communication_s > 0 and t.exposed_communication_s < t.communication_s
    off = step_time(TINY_LLAMA, overlapping, parameters=P, seq_len=32, micro_batch=2, gpus_per_node=2, zero_stage=3,
                    overlap_comm=False, persistence_threshold=0)
    assert off.exposed_communication_s == pytest.approx(off.communication_s)


def test_a_profile_from_before_the_host_casts_were_measured_loads_with_their_defaults():
    """The first H200 profile (2026-11-26) has neither figure: 2.5 x CPU-Adam's rate for the cast, and the cast then
    the pageable copy for ZeRO-3's return; the sources say so."""
    perf = load_profile(str(Path(__file__).parent / "data" / "gpu" / "2026-11-26-h200" / "profile.json"))
    assert perf.host_cast_params_per_s == 0 and perf.h2d_cast_params_per_s == 0
    assert perf.host_cast_rate == pytest.approx(2.5 * perf.cpu_adam_params_per_s)
    assert perf.h2d_cast_rate(1, 2) == pytest.approx(1 / (1 / perf.host_cast_rate + 2 / perf.h2d_pageable))
    assert perf.sources["host_cast_params_per_s"].startswith("default: 2.5 x the CPU-Adam rate")
    assert perf.sources["h2d_cast_params_per_s"].startswith("default")


def test_offload_by_hand():
    """DeepSpeed 0.19's offload path, priced on FLAT: gradients go down as fp32 (cast on the device first), the
    updated fp32 partition is cast to bf16 on the host (both ranks share the node's rate: 2.5 x CPU-Adam's 1e8
    where the probe did not measure it) and goes back."""
    shard = P / 2
    cast = shard * 2 / 2.5e8
    z2 = _t(gpus_per_node=2, zero_stage=2, offload_optimizer="cpu", grad_accum=2)
    # fp32 gradients down in every backward (4 bytes at 0.5 GB/s), the bf16 buffer up once (1 GB/s, pinned)
    assert z2.offload_s == pytest.approx(2 * shard * 4 / 5e8 + cast + shard * 2 / 1e9)
    assert z2.optimizer_s == pytest.approx(shard * 2 / 1e8)  # both ranks share the node's CPU-Adam rate
    measured = step_time(TINY_LLAMA, replace(FLAT, host_cast_params_per_s=1e9), parameters=P, seq_len=32,
                         micro_batch=2, grad_accum=2, gpus_per_node=2, zero_stage=2, offload_optimizer="cpu")
    assert measured.offload_s == pytest.approx(2 * shard * 4 / 5e8 + shard * 2 / 1e9 + shard * 2 / 1e9)
    z3 = _t(gpus_per_node=2, zero_stage=3, offload_optimizer="cpu", offload_param="cpu", persistence_threshold=0,
            reuse_distance=0)
    # the bf16 partition stays on the host: the cast alone; params up in forward and backward
    assert z3.offload_s == pytest.approx(shard * 4 / 5e8 + cast + 2 * shard * 2 / 1e9)
    # what the reuse window keeps gathered into backward is not fetched again (DeepSpeed's default: all of it here)
    kept = _t(gpus_per_node=2, zero_stage=3, offload_optimizer="cpu", offload_param="cpu", persistence_threshold=0)
    assert kept.offload_s == pytest.approx(shard * 4 / 5e8 + cast + shard * 2 / 1e9)
    pageable = _t(gpus_per_node=2, zero_stage=3, offload_optimizer="cpu", offload_param="cpu", pin_memory=False,
                  persistence_threshold=0, reuse_distance=0)
    assert pageable.offload_s == pytest.approx(shard * 4 / 2.5e8 + cast + 2 * shard * 2 / 2.5e8)
    # ZeRO-3 without parameter offload: one blocking copy_ into the device's partition, cast on the host into a
    # pageable temporary (pageable rate although pin_memory is on); measured, it is one figure
    z3_opt = _t(gpus_per_node=2, zero_stage=3, offload_optimizer="cpu")
    assert z3_opt.offload_s == pytest.approx(shard * 4 / 5e8 + cast + shard * 2 / 2.5e8)
    probed = step_time(TINY_LLAMA, replace(FLAT, h2d_cast_params_per_s=1e8), parameters=P, seq_len=32,
                       micro_batch=2, gpus_per_node=2, zero_stage=3, offload_optimizer="cpu")
    assert probed.offload_s == pytest.approx(shard * 4 / 5e8 + shard / 1e8)
    # measured with one rank and planned for two, the second rank's share of the host cast joins the figure
    one = replace(FLAT, h2d_cast_params_per_s=1e8, ranks_measured=1)
    assert one.h2d_cast_rate(2, 2) == pytest.approx(1 / (1 / 1e8 + 1 / 2.5e8))
    assert one.h2d_cast_rate(1, 2) == 1e8
    # measured with eight and planned for one: the other ranks' cast shares leave, the pageable copy stays
    eight = replace(FLAT, h2d_cast_params_per_s=1e7, ranks_measured=8)
    assert eight.h2d_cast_rate(1, 2) == pytest.approx(1 / (1 / 1e7 - 7 / 2.5e8))
    assert replace(eight, h2d_cast_params_per_s=5e7).h2d_cast_rate(1, 2) == pytest.approx(2.5e8 / 2)
    # on DeepSpeed's CPU accelerator the device partition is host memory: that copy_ is the cast
    cpu = step_time(TINY_LLAMA, replace(FLAT, device="cpu"), parameters=P, seq_len=32, micro_batch=2,
                    gpus_per_node=2, zero_stage=3, offload_optimizer="cpu")
    assert cpu.offload_s == pytest.approx(shard * 4 / 5e8 + cast)
    nvme = _t(gpus_per_node=2, zero_stage=3, offload_optimizer="nvme")
    assert nvme.offload_s == pytest.approx(shard * 4 / 5e8 + cast + shard * 2 / 2.5e8
                                           + shard * 12 * 2 * (1 / 2e9 + 1 / 1e9))


def test_lora_trains_few_parameters_but_gathers_all():
    full = _t(gpus_per_node=2, zero_stage=3, persistence_threshold=0)
    lora = _t(gpus_per_node=2, zero_stage=3, trainable_parameters=1000, persistence_threshold=0, reuse_distance=0)
    per = 0.5 * 2 / 1e9
    assert lora.communication_s == pytest.approx(2 * P * per + 1000 * per)  # frozen weights are still gathered
    assert lora.optimizer_s == pytest.approx(500 / 1e9)
    # no weight-gradient product for the frozen base (as many FLOPs as its forward, 246,784 a token over 64 tokens),
    # all of it: the adapters are not among its P, so no share of it trains; the adapters' own products (2 FLOPs per
    # parameter and token, 3 passes)
    weight_grads = LAYERS_AND_HEAD
    assert full.compute_s - lora.compute_s == pytest.approx((weight_grads - 3 * 2 * 1000 * 64) / 1e12)
    # MFU's numerator the same way: forward and input gradients of the base, and the adapters' three passes
    assert full.flops_per_step - lora.flops_per_step == pytest.approx(weight_grads - 3 * 2 * 1000 * 64)


def test_lora_adapters_priced_by_their_shapes_by_hand():
    """`lora`: each adapted linear (in -> out) runs A (in x r) and B (r x out) three times at the rate of their
    shapes, a dozen kernels (three more with dropout), the dropout's 12 bytes an input element, and at ZeRO-3 two
    more modules for the hooks (A and B each own a weight); FLAT's curve is one point, so every size runs at 1e12."""
    linears = ((64, 64, 2), (64, 172, 2))  # two shapes, two layers each
    r, tokens = 4, 64
    adapters = sum(r * (i + o) * c for i, o, c in linears)
    flat = replace(FLAT, op_overhead_s=1e-6, elementwise=((1.0, 1e9),), zero3_module_overhead_s=1e-3)

    def t(**kw):
        return step_time(TINY_LLAMA, flat, parameters=P, seq_len=32, micro_batch=2, trainable_parameters=adapters,
                         **kw)

    products = sum(6 * tokens * (i * r + r * o) * c for i, o, c in linears)
    plain, no_drop = t(lora=(r, 0.0, linears)), t(lora=(r, 0.0, ()))
    # without shapes the same FLOPs ran at the peak (6 per adapter parameter and token): only the kernels differ
    assert products == 6 * adapters * tokens and no_drop.flops_per_step == plain.flops_per_step
    assert plain.compute_s - no_drop.compute_s == pytest.approx(12 * 4 * 1e-6)
    dropped = t(lora=(r, 0.05, linears))
    assert dropped.compute_s - plain.compute_s == pytest.approx(3 * 4 * 1e-6 + sum(12 * tokens * i * c
                                                                                   for i, _, c in linears) / 1e9)
    z3, z3_base = t(lora=(r, 0.0, linears), zero_stage=3), t(lora=(r, 0.0, ()), zero_stage=3)
    assert z3.overhead_s - z3_base.overhead_s == pytest.approx(2 * 4 * 2 * 1e-3)  # 4 adapted modules, 2 passes
    # checkpointing runs the adapters' forward again: their products (a third), 4 + 2 kernels a module and a fresh
    # dropout mask (6 of its 12 bytes an input element); at FLAT's one rate the products cost what the
    # shape-less adapters' forward does, so only the kernels and the mask remain
    def recomputed(lora):
        return t(lora=lora, gradient_checkpointing=True).compute_s - t(lora=lora).compute_s

    assert recomputed((r, 0.05, linears)) - recomputed((r, 0.0, ())) == pytest.approx(
        6 * 4 * 1e-6 + sum(6 * tokens * i * c for i, _, c in linears) / 1e9)


def test_zero3_hooks_add_on_one_gpu_and_hide_behind_compute_on_several():
    """One GPU: every fetch synchronizes the device (`NoGatherHandle.wait`), so the hooks' host time adds to the
    kernels'. Several GPUs: the host runs ahead of the kernels, and only what exceeds a micro-batch's compute shows.
    On the CPU accelerator the host is the device: they add. FLAT prices nothing else as overhead."""
    modules = model_flops(TINY_LLAMA).parameter_modules
    slow, fast = replace(FLAT, zero3_module_overhead_s=1e-3), replace(FLAT, zero3_module_overhead_s=1e-9)
    hooks = 2 * modules * 1e-3  # forward and backward, no checkpointing

    def z3(perf, gpus, **kw):
        return step_time(TINY_LLAMA, perf, parameters=P, seq_len=32, micro_batch=2, zero_stage=3,
                         gpus_per_node=gpus, **kw)

    assert z3(slow, 1).overhead_s == pytest.approx(hooks)
    several = z3(slow, 2)
    assert hooks > several.compute_s > 0  # the host-bound case: the hooks take longer than the kernels
    assert several.overhead_s == pytest.approx(hooks - several.compute_s)
    assert several.step_time_s == pytest.approx(hooks + several.exposed_communication_s + several.optimizer_s)
    accumulated = z3(slow, 2, grad_accum=3)  # per micro-batch: each hides behind its own compute
    assert accumulated.overhead_s == pytest.approx(3 * hooks - accumulated.compute_s)
    assert z3(fast, 2).overhead_s == 0.0 and z3(fast, 1).overhead_s == pytest.approx(2 * modules * 1e-9)
    nodes = step_time(TINY_LLAMA, slow, parameters=P, seq_len=32, micro_batch=2, zero_stage=3, nodes=2)
    assert nodes.overhead_s == pytest.approx(hooks - nodes.compute_s)  # one GPU a node, two nodes: several
    cpu = replace(slow, device="cpu")
    assert z3(cpu, 2).overhead_s == pytest.approx(hooks)
    ckpt = z3(slow, 2, gradient_checkpointing=True)  # the recomputation's hooks, and its compute to hide behind
    assert ckpt.overhead_s == pytest.approx(3 * modules * 1e-3 - ckpt.compute_s)


def test_a_thin_adapter_product_is_its_memory_pass_where_the_curve_measures_launches():
    """A LoRA product (2048 -> 8 over 8,192 tokens) has the volume of a 512^3 square one, where a GPU's curve
    measures kernel launches (the H100's probe: 2.2 TFLOP/s at 512, 665 at 4096); priced there it took 10x its
    memory pass and the H200's LoRA ZeRO-2 run came out 45% slow. It moves its wide operand (tokens x 2048 in 16
    bits) in each of its three passes: that bounds it. Where the curve is compute-bound at that volume (FLAT: one
    rate) the curve's time is the smaller and stays."""
    from zerokit.perf.model import _lora_parts

    tokens, lora = 8192, (8, 0.0, ((2048, 2048, 1),))
    flops = 2 * 6 * tokens * 2048 * 8  # A and B, three passes each
    gpu = replace(FLAT, matmul={"bf16": ((256.0, 1e12), (1024.0, 2e12), (8192.0, 1e15))}, elementwise=((1.0, 1e12),))
    seconds, f, modules, forward = _lora_parts(gpu, lora, 2 * 2048 * 8, tokens, "bf16", 1e15, False)
    memory_pass = tokens * 2048 * 2 / 1e12
    assert (f, modules) == (flops, 2)
    assert seconds == pytest.approx(2 * 3 * memory_pass) and forward == pytest.approx(2 * memory_pass)
    by_curve = flops / 1.5e12  # 512 lies halfway from 256 to 1024 in log: 1.5 TFLOP/s
    assert by_curve > 5 * seconds
    seconds, *_ = _lora_parts(replace(FLAT, elementwise=((1.0, 1e12),)), lora, 2 * 2048 * 8, tokens, "bf16", 1e12,
                              False)
    assert seconds == pytest.approx(flops / 1e12)  # compute-bound at the curve's rate: the curve's time


def test_qlora_gathers_its_4bit_weights_in_their_bf16_storage_at_zero3():
    """At ZeRO-3 QLoRA's 4-bit weights are partitioned and all-gathered as bf16 elements holding four weights each:
    a quarter of the 16-bit bytes for those weights, the rest of the model as LoRA's."""
    linears, elements = ((64, 64, 2), (64, 172, 2)), 50_000
    kw = {"gpus_per_node": 2, "zero_stage": 3, "trainable_parameters": 1000, "persistence_threshold": 0,
          "reuse_distance": 0}
    lora = _t(lora=(4, 0.0, linears), **kw)
    qlora = _t(lora=(4, 0.0, linears, elements, 8), **kw)
    per = 0.5 * 2 / 1e9
    adapters = 4 * (64 + 64) * 2 + 4 * (64 + 172) * 2  # A and B of each copy: none kept whole at threshold 0
    # the base and the adapters gathered in forward and backward (LoRA's adapters in fp32 at ZeRO-3: twice the
    # bytes of a bf16 element; QLoRA's in bf16), the gradients reduced once
    assert lora.communication_s == pytest.approx(2 * P * per + 2 * 2 * adapters * per + 1000 * per)
    assert lora.communication_s - qlora.communication_s == pytest.approx(2 * 0.75 * elements * per
                                                                         + 2 * adapters * per)


def test_zero3_gathers_the_adapters_it_keeps_whole_after_every_optimizer_step():
    """ZeRO-3 keeps a parameter of at most stage3_param_persistence_threshold elements whole on every rank and
    all-gathers each one, one collective apiece, after every optimizer step (`_post_step`): for LoRA's adapters
    (A: rank x in, B: out x rank) that is a latency per adapter weight a step, exposed; the larger ones are gathered
    with the base in each pass. The base's own kept parameters are in the probe's ZeRO-3 reference, not priced
    here. Rank 4 at threshold 300: A of (64, 64) and (64, 172) and B of (64, 64) are kept (256 elements each), B of
    (64, 172) (688) is gathered."""
    from zerokit.perf.model import adapter_persistence

    linears = ((64, 64, 2), (64, 172, 2))
    assert adapter_persistence((4, 0.0, linears), 300) == (6, 6 * 256.0, 2, 2 * 688.0)
    assert adapter_persistence((4, 0.0, linears), 1000) == (8, 6 * 256.0 + 2 * 688.0, 0, 0.0)
    lat = 1e-4
    perf = replace(FLAT, collective_latency_s=lat)
    kw = {"zero_stage": 3, "trainable_parameters": 1000, "persistence_threshold": 1000, "grad_accum": 4}

    def t(lora, gpus=2, **more):
        return step_time(TINY_LLAMA, perf, parameters=P, seq_len=32, micro_batch=2, gpus_per_node=gpus, lora=lora,
                         **kw, **more)

    per = 0.5 * 2 / 1e9  # (world - 1) / world x 2 bytes over the FLAT machine's 1 GB/s bus
    kept = 6 * 256 + 2 * 688
    with_adapters, without = t((4, 0.0, linears)), t((4, 0.0, ()))
    # once a step, not per micro-batch: fp32 adapters (LoRA at ZeRO-3) move twice a bf16 element's bytes
    assert with_adapters.communication_s - without.communication_s == pytest.approx(8 * lat + 2 * kept * per)
    assert (with_adapters.exposed_communication_s - without.exposed_communication_s
            == pytest.approx(8 * lat + 2 * kept * per))
    qlora, qlora_without = t((4, 0.0, linears, 0, 0)), t((4, 0.0, (), 0, 0))
    assert qlora.communication_s - qlora_without.communication_s == pytest.approx(8 * lat + kept * per)
    assert t((4, 0.0, linears), gpus=1).communication_s == t((4, 0.0, ()), gpus=1).communication_s == 0.0


def test_qlora_dequantization_priced_per_pass_by_hand():
    """QLoRA's `lora` adds (4-bit weights, 4-bit linears): bitsandbytes dequantizes each weight whole in the forward,
    the input gradient and a recomputation. Measured: a fixed cost per module and pass plus the elements at the
    measured rate; unmeasured: a 2.5-byte memory pass at the elementwise rate and two kernels per module."""
    linears, r = ((64, 64, 2), (64, 172, 2)), 4
    adapters = sum(r * (i + o) * c for i, o, c in linears)
    elements, modules = 50_000, 8
    flat = replace(FLAT, op_overhead_s=1e-6, elementwise=((1.0, 1e9),))
    measured = replace(flat, dequant_elements_per_s=1e8, quantized_linear_overhead_s=1e-4)

    def t(perf, lora, **kw):
        return step_time(TINY_LLAMA, perf, parameters=P, seq_len=32, micro_batch=2, trainable_parameters=adapters,
                         lora=lora, **kw)

    lora, qlora = (r, 0.0, linears), (r, 0.0, linears, elements, modules)
    per_pass = elements / 1e8 + modules * 1e-4
    assert t(measured, qlora).compute_s - t(measured, lora).compute_s == pytest.approx(2 * per_pass)
    ckpt = t(measured, qlora, gradient_checkpointing=True).compute_s
    assert ckpt - t(measured, lora, gradient_checkpointing=True).compute_s == pytest.approx(3 * per_pass)
    unmeasured = 2.5 * elements / 1e9 + modules * 2 * 1e-6
    assert t(flat, qlora).compute_s - t(flat, lora).compute_s == pytest.approx(2 * unmeasured)
    assert t(flat, (r, 0.0, linears, 0, 0)).compute_s == t(flat, lora).compute_s


@pytest.mark.parametrize("kw, message", [
    ({"zero_stage": 1, "offload_param": "cpu"}, "parameter offload needs ZeRO-3"),
    ({"zero_stage": 0, "offload_optimizer": "cpu"}, "optimizer offload needs ZeRO-1, 2 or 3"),
    ({"precision": "int4"}, "precision 'int4' is not one of"),
    ({"zero_stage": 5}, "zero_stage must be 0-3"),
    ({"micro_batch": 0}, "must be >= 1"),
])
def test_step_time_refuses(kw, message):
    with pytest.raises(BadInput, match=message):
        _t(**kw)


def test_time_to_train_refuses_nothing_to_train():
    with pytest.raises(BadInput, match="--train-tokens must be positive"):
        time_to_train_s(_t(), 0)


def test_compute_scale_stretches_forward_backward_and_recomputation_only():
    """A machine whose DeepSpeed steps run forward and backward 1.5x slower than its kernel figures: every compute
    second grows by half (recomputation and LoRA's adapter products too), and nothing else moves."""
    slow = replace(FLAT, compute_scale=1.5)
    for kw in ({}, {"gradient_checkpointing": True}, {"gpus_per_node": 2, "zero_stage": 3},
               {"trainable_parameters": P // 10, "zero_stage": 2, "gpus_per_node": 2}):
        base, scaled = _t(**kw), step_time(TINY_LLAMA, slow, **{"parameters": P, "seq_len": 32, "micro_batch": 2,
                                                                 **kw})
        assert scaled.compute_s == pytest.approx(1.5 * base.compute_s)
        assert scaled.step_time_s - scaled.compute_s == pytest.approx(base.step_time_s - base.compute_s)
        assert scaled.flops_per_step == base.flops_per_step  # the work is the same; only its time grows


def test_mfu_stays_under_one_when_the_step_outruns_the_kernel_figures():
    """compute_scale < 1 (a probe whose reference step ran faster than its square-product curve says: the AMD
    profile committed with the step-time data, x0.97) would put a matmul-bound step above the curve's best rate:
    MFU is then held to the rate the step showed, 1 / compute_scale of the curve's best."""
    fast = replace(FLAT, compute_scale=0.5)
    t = step_time(TINY_LLAMA, fast, parameters=P, seq_len=32, micro_batch=2)
    assert t.compute_s == pytest.approx(0.5 * 3 * FWD / 1e12)
    assert t.mfu == pytest.approx(3 * FWD / (t.step_time_s * 2e12))
    slow = step_time(TINY_LLAMA, replace(FLAT, compute_scale=1.5), parameters=P, seq_len=32, micro_batch=2)
    assert slow.mfu == pytest.approx(3 * FWD / (slow.step_time_s * 1e12))  # above 1 the curve's best stands
    amd = load_profile(str(Path(__file__).parent / "data" / "step_time" / "2026-11-25-amd" / "profile.json"))
    big = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000}
    t = step_time(big, amd, parameters=count_parameters(big)[0], seq_len=2048, micro_batch=1)
    # 0.44: MFU's peak is its forward products' best, 6.8 GFLOP/s, twice its square-product curve's (3.1: this CPU
    # emulates bf16, and the backward's products ran slower); 0.89 when the attention curve's best was the peak
    assert amd.compute_scale < 1 and 0.4 < t.mfu <= 1.0


def test_mfu_stays_under_one_where_the_attention_kernel_outruns_the_matmul_curve():
    """A quick probe's curves (64-wide products at most) put causal attention at 3.0 GFLOP/s and the best matmul at
    2.4: a 7B QLoRA plan at 2,048 tokens, its scores a large share of the FLOPs, came out at MFU 109%. MFU's peak is
    the best of both curves now; the time is unchanged."""
    fast_scores = replace(FLAT, attention={"bf16": ((1.0, 4e12),)})
    big = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
           "num_attention_heads": 2, "num_key_value_heads": 2, "vocab_size": 512}
    t = step_time(big, fast_scores, parameters=count_parameters(big)[0], seq_len=8192, micro_batch=1)
    assert t.mfu == pytest.approx(t.flops_per_step / (t.step_time_s * 4e12)) and t.mfu <= 1.0
    assert step_time(big, FLAT, parameters=count_parameters(big)[0], seq_len=8192, micro_batch=1).mfu <= 1.0


def test_mfu_stays_under_one_where_the_input_gradient_product_outruns_the_matmul_curve():
    """A frozen (LoRA) base runs forward and input-gradient products only. A profile whose input-gradient curve
    outran its square-product curve (the helper's fuzz: 1e15 at 64 against 1e12) timed that backward at the clamp's
    least, half a product, and counted two products' FLOPs: MFU 1.3. Its peak is the best of every product curve
    now (forward and input-gradient too), and the time is unchanged."""
    fast = replace(FLAT, matmul_input_grad={"bf16": ((1.0, 1e15),)}, matmul_forward={"bf16": ((1.0, 1.5e12),)})
    adapters = 4 * (64 + 64) * 2

    def t(machine):
        return step_time(TINY_LLAMA, machine, parameters=P, seq_len=32, micro_batch=2, trainable_parameters=adapters,
                         lora=(4, 0.0, ()))

    lora, before = t(fast), t(replace(fast, matmul_input_grad={}))
    assert lora.mfu == pytest.approx(lora.flops_per_step / (lora.step_time_s * 1e15)) and lora.mfu <= 1.0
    assert lora.compute_s < before.compute_s  # the fast curve still prices the backward
    assert before.mfu == pytest.approx(before.flops_per_step / (before.step_time_s * 1.5e12)) and before.mfu <= 1.0


def test_mfu_divides_by_the_gpus_published_dense_peak_where_there_is_one():
    """PaLM's MFU, and every published MFU, divide by the datasheet's dense peak; the preset curve tops out at 80% of
    it (GPU_EFFICIENCY), which put the README's 37% llama-2-7b plan at 46%. A profile of the --gpu preset's GPU
    takes the preset's peak, and so does a profile alone of a GPU that only one published peak fits; another, or a
    CPU, the best rate its figures show."""
    big = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000}
    n = count_parameters(big)[0]
    h100 = build_machine("h100-80gb")
    assert h100.dense_peak["bf16"] == 989.5e12 == 1.25 * h100.peak_flops("bf16")
    t = step_time(big, h100, parameters=n, seq_len=4096, micro_batch=2)
    assert t.mfu == pytest.approx(t.flops_per_step / (t.step_time_s * 989.5e12))
    profile = str(Path(__file__).parent / "data" / "gpu" / "2026-11-27-h100" / "profile.json")
    probed = build_machine("h100-80gb", profile)
    assert probed.dense_peak == h100.dense_peak and not load_profile(profile).dense_peak
    t = step_time(big, probed, parameters=n, seq_len=4096, micro_batch=2)
    assert t.mfu == pytest.approx(t.flops_per_step / (t.step_time_s * 989.5e12))
    assert not build_machine("a100-80gb", profile).dense_peak  # another GPU's datasheet says nothing of this one
    assert "dense_peak" not in profile_to_json(probed)  # the datasheet's, never written as a measurement
    # a profile alone: the peak its name can only be (an H200's), as beside --gpu h200 (MFU read 51% alone, 36%
    # beside it, for one plan); an "H100 80GB HBM3" may be an SXM, PCIe or NVL preset, which publish three peaks
    h200 = str(Path(__file__).parent / "data" / "gpu" / "2026-11-26-h200" / "profile.json")
    assert build_machine(None, h200).dense_peak == build_machine("h200", h200).dense_peak == {
        "fp16": 989.5e12, "fp32": 67e12, "bf16": 989.5e12, "tf32": 494.5e12}
    assert not build_machine(None, profile).dense_peak


def test_the_probes_reference_steps_set_the_compute_scale_and_zero3_hooks():
    """The profile takes compute_scale, the bucket-flush cost and ZeRO-3's per-module cost from the probe's reference
    training steps when they ran, else 1.0, 450 us and 190 us, and says which; a profile from before them keeps the
    tiny-layer ZeRO-3 figure it measured."""
    import copy

    from zerokit.perf.probe import _machine_from_measurements

    with open(Path(__file__).parent / "data" / "step_time" / "profile.json", encoding="utf-8") as f:
        measured = copy.deepcopy(json.load(f)["measurements"]["rounds"][0])
    measured.pop("engine_step", None)
    measured.pop("zero3", None)
    default = _machine_from_measurements(measured)
    assert default.compute_scale == 1.0 and default.sources["compute_scale"].startswith("default")
    assert (default.zero3_module_overhead_s, default.bucket_flush_s) == (450e-6, 190e-6)
    assert default.sources["zero3_module_overhead_s"].startswith("default")
    assert default.sources["bucket_flush_s"].startswith("default")
    older = _machine_from_measurements({**measured, "zero3": {"module_overhead_s": 800e-6}})
    assert older.zero3_module_overhead_s == 800e-6 and older.sources["zero3_module_overhead_s"] == "probe"
    measured["engine_step"] = {"compute_scale": 1.3, "zero3_module_overhead_s": 600e-6, "step_s": 0.2}
    probed = _machine_from_measurements(measured)
    assert probed.compute_scale == 1.3 and probed.sources["compute_scale"] == "probe"
    assert probed.zero3_module_overhead_s == 600e-6 and probed.sources["zero3_module_overhead_s"] == "probe"
    assert probed.sources["bucket_flush_s"].startswith("default")  # measured before the flush engine existed
    measured["engine_step"]["bucket_flush_s"] = 900e-6
    flushed = _machine_from_measurements(measured)
    assert flushed.bucket_flush_s == 900e-6 and flushed.sources["bucket_flush_s"] == "probe"




def test_a_plan_from_a_profile_probed_oversubscribed_says_so(tmp_path, capsys):
    """A CPU profile whose ranks ran more OpenMP threads than cores (torch's default under the runner: this VM's
    2 ranks x 2 threads on 2 cores, where today's probes held the compute scale at its 0.25 bound) describes no
    run, an oversubscribed one neither (`profile_warnings`): the plan warns, with the OMP_NUM_THREADS to probe and train with. One thread a rank,
    a GPU profile, or measurements that are not counts: no warning, and no error."""
    from zerokit.cli import main

    cpu = json.loads((Path(__file__).parent / "data" / "step_time" / "profile.json").read_text())
    note = ("the profile was probed with 2 ranks x 2 OpenMP threads on 2 cores, more threads than cores, where small "
            "ops stall at random: its figures change from probe to probe, and its step times can be off several-fold, "
            "for a run as oversubscribed too. Probe again with OMP_NUM_THREADS=1 and "
            "train with the same (`zerokit launch --env OMP_NUM_THREADS=1`)")
    cases = ((cpu, {"ranks": 2, "threads_per_rank": 2, "cores": 2}, [note]),
             (cpu, {"ranks": 2, "threads_per_rank": 1, "cores": 2}, []),
             (cpu, {"ranks": 4, "threads_per_rank": 56, "cores": 56}, [note.replace("2 ranks x 2 OpenMP threads on 2",
              "4 ranks x 56 OpenMP threads on 56").replace("=1", "=14")]),
             (cpu, {"ranks": "2", "threads_per_rank": True, "cores": None}, []),
             # no machine's counts: not a measurement (the warning quoted the 400-digit number whole)
             (cpu, {"ranks": 10**400, "threads_per_rank": 2, "cores": 2}, []),
             (json.loads((Path(__file__).parent / "data" / "gpu" / "2026-11-27-h100" / "profile.json").read_text()),
              {"ranks": 1, "threads_per_rank": 16, "cores": 4}, []))
    for profile, measured, expected in cases:
        path = tmp_path / "profile.json"
        path.write_text(json.dumps({**profile, "measurements": {**profile.get("measurements", {}), **measured}}))
        code = main(["plan", "--model", "llama-2-7b", "--hardware", str(path), "--gpu-memory", "80GB",
                     "--seq-len", "512", "--format", "json"])
        warnings = json.loads(capsys.readouterr().out)["warnings"]
        assert code in (0, 1)
        assert [w for w in warnings if w.startswith("the profile was probed")] == expected, measured


def test_eager_attention_moves_its_score_matrix_through_memory_pass_by_pass():
    """transformers' eager_attention_forward scales, masks, softmaxes in fp32 and casts back the whole s x s score
    matrix (gemma2 also soft-caps it): passes sdpa and flash fuse into the score kernel. At the elementwise rate of
    the flat machine, 1e12 B/s, every pass is priced; the matmuls are the same FLOPs as sdpa's full-square scores."""
    from zerokit.perf.model import eager_score_bytes

    assert eager_score_bytes(2) == (4 + 4 + 6 + 6, 6 + 12 + 6 + 4) == (20, 28)
    assert eager_score_bytes(4) == (24, 20)  # fp32: no casts
    assert eager_score_bytes(2, softcap=True) == (20 + 12, 28 + 14)
    cfg = dict(TINY_LLAMA)
    n = count_parameters(cfg)[0]
    slow = replace(FLAT, elementwise=((1.0, 1e9),))  # FLAT's elementwise passes are free

    def extra(config: dict, attention: str) -> float:
        """What a finite elementwise rate adds to the compute (the per-token passes, and eager's score passes)."""
        return (step_time(config, slow, parameters=n, seq_len=64, micro_batch=2, attention=attention).compute_s
                - step_time(config, FLAT, parameters=n, seq_len=64, micro_batch=2, attention=attention).compute_s)

    heads, layers = cfg["num_attention_heads"], cfg["num_hidden_layers"]
    elements = layers * heads * 64 * 64 * 2  # eager scores full squares, both sequences of the micro-batch
    assert extra(cfg, "eager") - extra(cfg, "sdpa") == pytest.approx(elements * (20 + 28) / 1e9)
    capped = dict(cfg, attn_logit_softcapping=50.0)
    assert extra(capped, "eager") - extra(capped, "sdpa") == pytest.approx(elements * (32 + 42) / 1e9)


def test_a_gpu_host_paces_a_micro_batch_of_few_tokens_by_hand():
    """Where the probe timed the GPU's host (`host_op_s`...), a ZeRO-0/1/2 micro-batch takes the longer of the
    device's time (its kernels, a `bucket_flush_s` stall a flush) and the host's (`host_op_s` for each of the 270
    kernels `host_kernels` counts in this 2-layer model, `host_flush_s` a flush), and a step at least the host's
    optimizer step: what is beyond the device's lands in `overhead_s` (`host_excess`)."""
    from zerokit.perf.flops import model_flops
    from zerokit.perf.model import host_kernels

    assert host_kernels(model_flops(TINY_LLAMA)) == 3 * (40 * 2 + 10) == 270
    device = replace(FLAT, bucket_flush_s=5e-6)
    host = replace(device, host_op_s=1e-6, host_flush_s=2e-5, host_optimizer_s=1e-3, host_adapter_s=1e-5)
    kw = {"parameters": P, "seq_len": 32, "grad_accum": 4, "reduce_bucket_size": 10_000}

    def extra(stage: int, micro_batch: int = 2, **more) -> tuple[float, float]:
        base = step_time(TINY_LLAMA, device, zero_stage=stage, micro_batch=micro_batch, **kw, **more)
        paced = step_time(TINY_LLAMA, host, zero_stage=stage, micro_batch=micro_batch, **kw, **more)
        assert paced.compute_s == base.compute_s and paced.optimizer_s == base.optimizer_s
        assert paced.step_time_s - base.step_time_s == pytest.approx(paced.overhead_s - base.overhead_s)
        return paced.overhead_s - base.overhead_s, base.compute_s / 4

    micro_host, flushes, wait = 270e-6, 14, 1e-3 - P / 1e9  # DeepSpeed's 14 flushes (test_bucket_flushes_by_hand)
    got, micro = extra(2)
    assert micro == pytest.approx(3 * FWD / 1e12) and micro < micro_host
    assert got == pytest.approx(4 * (micro_host + flushes * 2e-5 - micro - flushes * 5e-6) + wait)
    got, _ = extra(1)  # ZeRO-1 flushes in the last micro-batch's backward only
    assert got == pytest.approx(3 * (micro_host - micro) + (micro_host + flushes * 15e-6 - micro) + wait)
    got, _ = extra(0)  # no ZeRO buckets, and the plain engine's optimizer step was not timed
    assert got == pytest.approx(4 * (micro_host - micro))
    got, _ = extra(2, offload_optimizer="cpu")  # CPU Adam steps on the host: no device step to wait for
    assert got == pytest.approx(4 * (micro_host + flushes * 15e-6 - micro))
    got, micro = extra(2, gradient_checkpointing=True)  # a third of the kernels again, recomputed
    assert got == pytest.approx(4 * (micro_host * 4 / 3 + flushes * 15e-6 - micro) + wait)
    lora = (4, 0.0, ((64, 64, 2), (64, 172, 2)))  # four adapted linears
    got, micro = extra(2, lora=lora, trainable_parameters=1000)
    assert got == pytest.approx(4 * (micro_host + 4 * 1e-5 + 15e-6 - micro) + 1e-3 - 1000 / 1e9)  # one flush
    got, micro = extra(2, micro_batch=128)  # the device's kernels outlast the host's: only the optimizer's wait
    assert micro > micro_host + flushes * 2e-5 and got == pytest.approx(wait)
    assert extra(3)[0] == 0.0  # ZeRO-3's hooks synchronise one GPU before each module: the sum stands
    cpu_base = step_time(TINY_LLAMA, replace(device, device="cpu"), zero_stage=2, micro_batch=2, **kw)
    cpu = step_time(TINY_LLAMA, replace(host, device="cpu"), zero_stage=2, micro_batch=2, **kw)
    assert cpu.step_time_s == cpu_base.step_time_s  # a CPU's host is its device: nothing runs ahead

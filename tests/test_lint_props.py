"""Property-based: whatever the input, `zerokit lint` answers 0, 1 or 2 with findings, never a traceback."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zerokit.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# ZEROKIT_HYPOTHESIS_EXAMPLES=1500 for a longer hunt (passes); 150 keeps the suite quick
SETTINGS = settings(max_examples=int(os.environ.get("ZEROKIT_HYPOTHESIS_EXAMPLES", "150")), deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

VALID = [
    json.loads(Path(ROOT, "examples", "configs", name).read_text(encoding="utf-8"))
    for name in ("zero3_offload_ds_config.json", "zero2_ds_config.json")
] + [{
    "train_batch_size": 32, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
    "fp16": {"enabled": True, "loss_scale": 0}, "gradient_allreduce_op": "mean",
    "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/nvme"},
                          "offload_optimizer": {"device": "cpu", "ratio": 0.5}},
    "optimizer": {"type": "Adam", "params": {"lr": 1e-4}}, "scheduler": {"type": "WarmupLR"},
    "aio": {"block_size": 1048576}, "activation_checkpointing": {"partition_activations": True},
}]

scalars = st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=12) \
    | st.sampled_from(["auto", "cpu", "nvme", "none", "sum", "true", "1e9", "AdamW", "WARN"])
json_values = st.recursive(scalars, lambda kids: st.lists(kids, max_size=4)
                           | st.dictionaries(st.text(max_size=12) | st.sampled_from(
                               ["stage", "enabled", "zero_optimization", "offload_param", "device", "type", "params",
                                "fp16", "bf16", "optimizer", "scheduler", "ratio", "nvme_path"]), kids, max_size=5),
                           max_leaves=30)


def lint_bytes(capsys, raw: bytes, suffix: str = ".json", *args: str) -> int:
    with tempfile.NamedTemporaryFile("wb", suffix=suffix, delete=False) as f:
        f.write(raw)
    try:
        code = main(["lint", "--format", "json", *args, f.name])
    finally:
        os.unlink(f.name)
    out, err = capsys.readouterr()
    assert code in (0, 1, 2), (code, err)
    assert "Traceback" not in err and "internal error" not in err, err
    findings = json.loads(out)
    assert isinstance(findings, list)
    if code == 2:
        assert any(f["code"] in ("ZK001", "ZK107") for f in findings)
    for f in findings:
        assert f["line"] >= 1 and f["column"] >= 1 and f["severity"] in ("error", "warning")
    return code


@SETTINGS
@given(value=json_values)
def test_any_json_value(capsys, value):
    code = lint_bytes(capsys, json.dumps(value).encode())
    if not isinstance(value, dict):
        assert code == 2


@SETTINGS
@given(raw=st.binary(max_size=200))
def test_any_bytes(capsys, raw):
    lint_bytes(capsys, raw)
    lint_bytes(capsys, raw, ".yaml")


@SETTINGS
@given(text=st.text(max_size=200))
def test_any_text_as_hjson_and_yaml(capsys, text):
    lint_bytes(capsys, text.encode(), ".hjson", "--target", "deepspeed")
    lint_bytes(capsys, text.encode(), ".yml")


def _mutate(cfg: dict, data) -> dict:
    cfg = copy.deepcopy(cfg)
    for _ in range(data.draw(st.integers(1, 4))):
        # pick a container somewhere in the config
        node = cfg
        while True:
            dicts = [k for k, v in node.items() if isinstance(v, dict)]
            if not dicts or data.draw(st.booleans()):
                break
            node = node[data.draw(st.sampled_from(dicts))]
        if not node:
            node["x"] = 1
        key = data.draw(st.sampled_from(sorted(node)))
        action = data.draw(st.sampled_from(["delete", "rename", "value", "auto", "nest"]))
        if action == "delete":
            del node[key]
        elif action == "rename":
            node[key[:-1] + data.draw(st.sampled_from("xse_"))] = node.pop(key)
        elif action == "value":
            node[key] = data.draw(json_values)
        elif action == "auto":
            node[key] = "auto"
        else:
            node[key] = {key: node[key]}
    return cfg


@SETTINGS
@given(data=st.data(), base=st.sampled_from(VALID), target=st.sampled_from(["trainer", "accelerate", "deepspeed"]),
       world=st.sampled_from([None, "1", "8"]), indent=st.sampled_from([None, 2]))
def test_mutated_valid_configs(capsys, data, base, target, world, indent):
    cfg = _mutate(base, data)
    args = ["--target", target, "--gpu-memory", "16GB"] + (["--world-size", world] if world else [])
    lint_bytes(capsys, json.dumps(cfg, indent=indent).encode(), ".json", *args)


@SETTINGS
@given(fields=st.dictionaries(st.sampled_from(["zero_stage", "offload_optimizer_device", "offload_param_device",
                                               "offload_param_nvme_path", "deepspeed_config_file", "gradient_clipping",
                                               "zero3_save_16bit_model", "gradient_accumulation_steps", "typo"]),
                              json_values, max_size=5),
       mixed=st.sampled_from([None, "bf16", "fp16", "no", 3]))
def test_any_accelerate_yaml(capsys, fields, mixed):
    import yaml

    doc = {"distributed_type": "DEEPSPEED", "deepspeed_config": fields, "mixed_precision": mixed}
    lint_bytes(capsys, yaml.safe_dump(doc).encode(), ".yaml")


@SETTINGS
@given(world=st.integers(-2**70, 2**70).map(str) | st.text(max_size=12),
       memory=st.sampled_from(["80GB", "1TiB", "1025GiB", "2TB", "1e30GB", "80", "0.5GiB", "x"]))
def test_any_world_size_and_gpu_memory(capsys, world, memory):
    """Within the bounds the findings decide (0 or 1); anything else is one line of bad input (2), never a crash."""
    code = main(["lint", "--world-size", world, "--gpu-memory", memory, os.path.join(ROOT, "examples", "configs",
                                                                                     "zero2_ds_config.json")])
    out, err = capsys.readouterr()
    digits = world.strip().replace("_", "")
    ok = bool(re.fullmatch(r"\+?[0-9]+", digits)) and 1 <= int(digits) <= 1_000_000 and memory in ("80GB", "1TiB")
    assert code == (0 if ok else 2), (world, memory, err)
    if not ok:
        assert out == "" and err.count("\n") == 1 and "Traceback" not in err


@SETTINGS
@given(name=st.text(st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)), min_size=1,
                    max_size=16).filter(lambda n: n not in (".", "..")),
       exists=st.booleans(), fmt=st.sampled_from(["text", "github"]))
def test_any_file_name_keeps_one_line_per_finding(capsys, name, exists, fmt):
    """A file name may hold any character but / and NUL (a newline, \\v, \\u2028): every finding stays one line."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, name)
        if exists:
            Path(path).write_text('{"zero_optimization": {"stage": 2, "reduce_bucket_size": 1e30}, "bad\\nkey": 1}')
        main(["lint", "--format", "json", path])
        findings = json.loads(capsys.readouterr()[0])
        main(["lint", "--format", fmt, path])
        out = capsys.readouterr()[0]
    assert findings and len(out.splitlines()) == len(findings), out


def test_deeply_nested_input(capsys):
    assert lint_bytes(capsys, b"[" * 100_000 + b"]" * 100_000) == 2
    assert lint_bytes(capsys, b'{"a":' * 5000 + b"1" + b"}" * 5000) == 2
    assert lint_bytes(capsys, b'{"a":' * 50 + b"1" + b"}" * 50) == 1  # deep but sane: an unknown key
    assert lint_bytes(capsys, b"a:\n" + b"".join(b"  " * i + b"b:\n" for i in range(1, 200)), ".yaml") == 2


@pytest.mark.parametrize(("payload", "code"), [(b"", 2), (b"\n\n", 2), (b"[]", 2), (b"42", 2), (b'"x"', 2),
                                               (b"null", 2), (b"{}", 1), (b"\xff\xfe{", 2)])
def test_edge_inputs(capsys, payload, code):
    assert lint_bytes(capsys, payload) == code


def test_real_subprocess_on_garbage(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000)
    proc = subprocess.run([sys.executable, "-m", "zerokit", "lint", str(bad), str(deep)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stdout.count("error ZK001") == 2

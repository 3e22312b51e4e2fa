"""`zerokit plan` end to end: exit codes, CONTRACT.md's JSON fields, -o atomic with --force, one-line bad input.

Most runs are in-process through `zerokit.cli.main([...])` (fast); a few go through a real subprocess, the way a CI
script would call it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from zerokit.cli import main

pytest.importorskip("zerokit.models.resolve")
pytest.importorskip("zerokit.planner.engine")

LLAMA_7B_8xH100 = ["plan", "--model", "llama-2-7b", "--gpu", "h100-80gb", "--gpus-per-node", "8", "--seq-len", "4096"]
# The "nothing fits" scenario: 70B on one 24 GB GPU, 64 GB of RAM and no NVMe.
LLAMA_70B_ON_4090 = ["plan", "--model", "llama-2-70b", "--gpu", "rtx4090", "--cpu-memory", "64GB", "--seq-len", "4096"]
EXAMPLE_MODEL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "models",
                             "tiny-llama")


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *args: str) -> tuple[int, dict]:
    code, out, _ = run(capsys, *args, "--format", "json")
    return code, json.loads(out)


def subprocess_plan(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zerokit", "plan", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd, check=False)


# ---------------------------------------------------------------- JSON per CONTRACT.md

CONTRACT_FIELDS = {
    "model": {"parameters", "largest_layer_parameters", "hidden_size", "num_layers", "source"},
    "hardware": {"gpu_memory_bytes", "gpus_per_node", "nodes", "world_size", "cpu_memory_bytes", "nvme_bytes", "bf16"},
    "decision": {"zero_stage", "offload_optimizer", "offload_param", "micro_batch_size",
                 "gradient_accumulation_steps", "gradient_checkpointing", "precision", "overlap_comm", "fits"},
}
PER_GPU = {"parameters", "gradients", "optimizer_states", "activations", "transient", "buffers", "overhead", "total"}
CANDIDATE = {"zero_stage", "offload_optimizer", "offload_param", "micro_batch_size", "gradient_checkpointing", "fits",
             "per_gpu_total"}


def test_json_has_every_contract_field_with_bytes_as_integers(capsys):
    code, doc = run_json(capsys, *LLAMA_7B_8xH100)
    assert code == 0
    assert {"model", "hardware", "decision", "memory", "candidates", "reasons", "ds_config"} <= set(doc)
    for section, fields in CONTRACT_FIELDS.items():
        assert fields <= set(doc[section]), (section, fields - set(doc[section]))
    memory = doc["memory"]
    assert set(memory["per_gpu"]) >= PER_GPU
    assert all(isinstance(v, int) for v in memory["per_gpu"].values())
    assert memory["per_gpu"]["total"] == sum(v for k, v in memory["per_gpu"].items() if k != "total")
    assert memory["gpu_capacity"] == doc["hardware"]["gpu_memory_bytes"]
    assert isinstance(memory["per_node_cpu"]["total"], int) and isinstance(memory["nvme"]["total"], int)
    assert doc["candidates"] and all(CANDIDATE <= set(c) for c in doc["candidates"])
    assert all(isinstance(c["per_gpu_total"], int) for c in doc["candidates"])
    assert doc["reasons"] and all(isinstance(r, str) for r in doc["reasons"])
    assert doc["hardware"]["world_size"] == 8 and doc["hardware"]["bf16"] is True
    assert doc["model"]["parameters"] == 6_738_415_616  # LlamaForCausalLM(llama-2-7b config), counted by transformers


def test_seed_scenario_7b_on_8x80gb_needs_no_offload(capsys):
    code, doc = run_json(capsys, *LLAMA_7B_8xH100)
    decision = doc["decision"]
    assert code == 0 and decision["fits"] is True
    assert decision["zero_stage"] in (1, 2, 3)
    assert (decision["offload_optimizer"], decision["offload_param"]) == ("none", "none")
    assert decision["precision"] == "bf16"
    assert doc["training_arguments"]["per_device_train_batch_size"] == decision["micro_batch_size"]
    assert doc["ds_config"]["train_micro_batch_size_per_gpu"] == "auto"
    assert doc["ds_config"]["zero_optimization"]["stage"] == decision["zero_stage"]


def test_json_ds_config_is_exactly_what_o_writes(capsys, tmp_path):
    out = tmp_path / "ds_config.json"
    code, doc = run_json(capsys, *LLAMA_7B_8xH100, "--target", "deepspeed", "-o", str(out))
    assert code == 0
    assert json.loads(out.read_text()) == doc["ds_config"]
    assert doc["ds_config"]["train_batch_size"] == (doc["decision"]["micro_batch_size"]
                                                    * doc["decision"]["gradient_accumulation_steps"] * 8)


def test_target_deepspeed_resolves_everything_and_takes_optimizer_options(capsys):
    code, doc = run_json(capsys, *LLAMA_7B_8xH100, "--target", "deepspeed", "--lr", "3e-5", "--weight-decay", "0.1",
                         "--warmup-steps", "50", "--total-steps", "2000")
    assert code == 0
    leaves = []

    def walk(node):
        if isinstance(node, dict):
            for value in node.values():
                walk(value)
        else:
            leaves.append(node)

    walk(doc["ds_config"])
    assert "auto" not in leaves
    assert doc["ds_config"]["optimizer"]["params"]["lr"] == 3e-5
    assert doc["ds_config"]["optimizer"]["params"]["weight_decay"] == 0.1
    assert doc["ds_config"]["scheduler"] == {"type": "WarmupDecayLR", "params": {
        "warmup_min_lr": 0, "warmup_max_lr": 3e-5, "warmup_num_steps": 50, "warmup_type": "linear",
        "total_num_steps": 2000}}


def test_v100_plans_fp16_with_dynamic_loss_scaling(capsys):
    code, doc = run_json(capsys, "plan", "--model", "llama-2-7b", "--gpu", "v100-32gb", "--gpus-per-node", "8",
                         "--seq-len", "2048")
    assert code == 0
    assert doc["decision"]["precision"] == "fp16"
    assert doc["ds_config"]["fp16"]["loss_scale"] == 0
    assert doc["ds_config"]["fp16"]["enabled"] == "auto"
    assert doc["training_arguments"]["fp16"] is True and "bf16" not in doc["training_arguments"]


def test_global_batch_sets_accumulation(capsys):
    code, doc = run_json(capsys, *LLAMA_7B_8xH100, "--micro-batch", "2", "--global-batch", "256")
    assert code == 0
    assert doc["decision"]["micro_batch_size"] == 2
    assert doc["decision"]["gradient_accumulation_steps"] == 256 // (2 * 8)


# ---------------------------------------------------------------- exit codes and output formats

def test_nothing_fits_exits_1_shows_the_closest_plan_and_what_is_missing(capsys, tmp_path):
    out = tmp_path / "ds_config.json"
    code, stdout, stderr = run(capsys, *LLAMA_70B_ON_4090, "-o", str(out))
    assert code == 1
    assert "DOES NOT FIT" in stdout and "Missing:" in stdout
    assert "Candidates" in stdout
    assert not out.exists() and "was not written" in stderr
    code, doc = run_json(capsys, *LLAMA_70B_ON_4090)
    assert code == 1 and doc["decision"]["fits"] is False and doc["missing"]


def test_table_shows_decision_bars_legend_and_training_arguments(capsys):
    code, stdout, _ = run(capsys, *LLAMA_7B_8xH100)
    assert code == 0
    assert "Decision (FITS)" in stdout
    assert "legend: P parameters  G gradients  O optimizer states" in stdout
    assert "* ZeRO-" in stdout  # the chosen candidate is marked
    assert "pass the HF Trainer --per_device_train_batch_size" in stdout
    bars = [line for line in stdout.splitlines() if line.strip().endswith("]") and "[" in line]
    assert len(bars) >= 2 and all("|" in b for b in bars)


def test_every_candidate_row_shows_its_activations(capsys):
    """One micro-batch's activations and transient, whatever the peak: ZeRO-0's peak is the optimizer step, whose
    breakdown holds no activations and the step's temporaries (53.9 GB) as transient; its row showed those."""
    from zerokit.units import format_bytes

    _, plan = run_json(capsys, *LLAMA_7B_8xH100)
    _, stdout, _ = run(capsys, *LLAMA_7B_8xH100)
    rows = [line for line in stdout.splitlines() if line.startswith(("  * ZeRO-", "    ZeRO-"))]
    assert len(rows) == len(plan["candidates"])
    for row, cand in zip(rows, plan["candidates"]):
        assert format_bytes(cand["micro_batch_activations"]) in row
        assert format_bytes(cand["per_gpu_total"]) in row
        if cand["peak_phase"] != "optimizer_step":  # at a forward or backward peak: that phase's own figures
            assert cand["micro_batch_activations"] == cand["per_gpu"]["activations"] + cand["per_gpu"]["transient"]
    zero0 = plan["candidates"][0]
    assert zero0["peak_phase"] == "optimizer_step" and zero0["per_gpu"]["activations"] == 0
    assert 0 < zero0["micro_batch_activations"] < zero0["per_gpu"]["transient"]


def test_markdown_report_renders_from_the_template(capsys):
    code, stdout, _ = run(capsys, *LLAMA_7B_8xH100, "--format", "markdown")
    assert code == 0
    assert stdout.startswith("# zerokit plan\n")
    assert "## Decision: fits" in stdout
    assert "| component | forward | backward | optimizer step | share of GPU at the peak |" in stdout
    assert "Speed (predicted): " in stdout and "tokens/s" in stdout and "MFU" in stdout
    assert "| step | tokens/s |" in stdout
    assert "```json\n{" in stdout and '"zero_optimization"' in stdout


def test_markdown_template_is_strict():
    jinja2 = pytest.importorskip("jinja2")
    env = jinja2.Environment(loader=jinja2.PackageLoader("zerokit.templates", "."), undefined=jinja2.StrictUndefined)
    with pytest.raises(jinja2.UndefinedError, match="headline"):
        env.get_template("plan_report.md.j2").render()


# ---------------------------------------------------------------- -o: atomic, refuses to overwrite without --force

def test_output_refuses_to_overwrite_without_force_and_replaces_with_it(capsys, tmp_path):
    out = tmp_path / "ds_config.json"
    out.write_text("keep me\n")
    code, stdout, stderr = run(capsys, *LLAMA_7B_8xH100, "-o", str(out))
    assert code == 2 and stdout == ""
    assert stderr.count("\n") == 1 and "exists; pass --force" in stderr
    assert out.read_text() == "keep me\n"

    inode_before = out.stat().st_ino
    code, _, _ = run(capsys, *LLAMA_7B_8xH100, "-o", str(out), "--force")
    assert code == 0
    assert json.loads(out.read_text())["zero_optimization"]["stage"] == 3
    assert out.stat().st_ino != inode_before  # os.replace of a new file, not a rewrite in place
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds_config.json"]  # no temp file left behind


def test_output_into_a_missing_directory_is_bad_input(capsys, tmp_path):
    code, _, stderr = run(capsys, *LLAMA_7B_8xH100, "-o", str(tmp_path / "nope" / "ds.json"))
    assert code == 2 and "does not exist" in stderr


# ---------------------------------------------------------------- bad input: exit 2, one line, no traceback

def _malformed(tmp_path) -> str:
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama", "hidden_size": 64,')
    return str(path)


BAD_INPUT = [
    ("wrong-unit", ["--model", "7B", "--gpu-memory", "80G", "--seq-len", "512"], r"80GB"),
    ("zero-gpus", ["--model", "7B", "--gpu", "h100-80gb", "--gpus-per-node", "0", "--seq-len", "512"],
     r"--gpus-per-node must be at least 1"),
    ("negative-nodes", ["--model", "7B", "--gpu", "h100-80gb", "--nodes", "-2", "--seq-len", "512"], r"--nodes"),
    ("zero-seq-len", ["--model", "7B", "--gpu", "h100-80gb", "--seq-len", "0"], r"--seq-len must be at least 1"),
    ("micro-batch", ["--model", "7B", "--gpu", "h100-80gb", "--seq-len", "512", "--micro-batch", "lots"],
     r"--micro-batch"),
    ("both-global", ["--model", "7B", "--gpu", "h100-80gb", "--seq-len", "512", "--global-batch", "64",
                     "--global-batch-tokens", "1M"], r"not both"),
    ("missing-config", ["--model", "does/not/exist/config.json", "--gpu", "h100-80gb", "--seq-len", "512"],
     r"does/not/exist"),
    ("unknown-preset", ["--model", "llama-2-7c", "--gpu", "h100-80gb", "--seq-len", "512"], r"llama-2-7b"),
    ("unknown-gpu", ["--model", "7B", "--gpu", "h100-81gb", "--seq-len", "512"], r"h100-80gb"),
    ("no-gpu", ["--model", "7B", "--seq-len", "512"], r"--gpu"),
    # Sold in two sizes: `a100` had been planned as an 80 GB A100, a plan that OOMs on the 40 GB one.
    ("ambiguous-a100", ["--model", "7B", "--gpu", "A100", "--seq-len", "512"], r"--gpu a100-40gb or --gpu a100-80gb"),
    ("ambiguous-v100", ["--model", "7B", "--gpu", "v100", "--seq-len", "512"], r"--gpu v100-16gb or --gpu v100-32gb"),
    ("bad-choice", ["--model", "7B", "--gpu", "h100-80gb", "--seq-len", "512", "--zero-stage", "4"],
     r"--zero-stage"),
]


@pytest.mark.parametrize(("args", "message"), [b[1:] for b in BAD_INPUT], ids=[b[0] for b in BAD_INPUT])
def test_bad_input_is_one_line_exit_2(capsys, args, message):
    code, stdout, stderr = run(capsys, "plan", *args)
    assert code == 2
    assert stdout == ""
    assert stderr.count("\n") == 1 and stderr.startswith("zerokit plan: error: ")
    assert "Traceback" not in stderr
    assert message in stderr


@pytest.mark.parametrize("args", [["--model", "gpt2", "--gpu", "a100-40gb", "--seq-len", "4096"],
                                  ["--model", "gpt2", "--gpu", "a100-40gb", "--seq-len", "4096", "--target",
                                   "deepspeed", "--format", "json"]])
def test_a_sequence_past_learned_positions_is_bad_input_and_writes_nothing(capsys, tmp_path, args):
    """gpt2 learns 1,024 positions: at 4,096 tokens its first step fails with an index out of range, so the plan
    would have written a config sure to crash, with exit 0."""
    out = tmp_path / "ds_config.json"
    code, stdout, stderr = run(capsys, "plan", *args, "-o", str(out))
    assert code == 2 and stdout == "" and stderr.count("\n") == 1
    assert stderr == ("zerokit plan: error: --seq-len 4,096 is past the 1,024 positions gpt2 learns (n_positions): "
                      "its first step fails with an index out of range; use --seq-len 1024 or less, or raise "
                      "n_positions in config.json (the new positions start untrained)\n")
    assert list(tmp_path.iterdir()) == []
    code, _, _ = run(capsys, "plan", *["1024" if a == "4096" else a for a in args], "-o", str(out))
    assert code == 0 and out.exists()  # at its 1,024 positions it plans and writes


def test_gemma2_with_the_default_attention_is_planned_as_the_eager_it_runs(capsys):
    """The reviewer's plan: gemma-2-2b on 8 A100-80GB at 1,024 tokens had been planned at micro-batch 8 (80.1 GB,
    sdpa estimated as flash), which OOMs under the eager attention transformers falls back to."""
    args = ["plan", "--model", "gemma-2-2b", "--gpu", "a100-80gb", "--gpus-per-node", "8", "--seq-len", "1024"]
    code, default = run_json(capsys, *args)
    _, eager = run_json(capsys, *args, "--attention", "eager")
    assert code == 0 and default["decision"]["micro_batch_size"] == 4
    assert (default["decision"], default["memory"], default["performance"]) == \
        (eager["decision"], eager["memory"], eager["performance"])
    said = [w for w in default["warnings"] if "sdpa" in w]
    assert len(said) == 1 and "pass --attention flash" in said[0]
    assert "attn_implementation='flash_attention_2'" in said[0]


def test_malformed_config_json_is_one_line_exit_2(capsys, tmp_path):
    code, stdout, stderr = run(capsys, "plan", "--model", _malformed(tmp_path), "--gpu", "h100-80gb",
                               "--seq-len", "512")
    assert code == 2 and stdout == "" and stderr.count("\n") == 1
    assert "config.json" in stderr


# ---------------------------------------------------------------- real subprocesses, as a script sees them

def test_subprocess_exit_0_writes_config_and_json(tmp_path):
    out = tmp_path / "ds_config.json"
    proc = subprocess_plan("--model", EXAMPLE_MODEL, "--gpu-memory", "16GB", "--gpus-per-node", "2", "--seq-len", "64",
                           "--format", "json", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["model"]["source"] == "config" and doc["model"]["hidden_size"] == 64
    assert json.loads(out.read_text()) == doc["ds_config"]


def test_subprocess_exit_1_when_nothing_fits():
    proc = subprocess_plan(*LLAMA_70B_ON_4090[1:])
    assert proc.returncode == 1
    assert "Missing:" in proc.stdout


@pytest.mark.parametrize("args", [["--model", "7B", "--gpu-memory", "80G", "--seq-len", "512"],
                                  ["--model", "nonexistent-model-xyz", "--gpu", "h100-80gb", "--seq-len", "512"]])
def test_subprocess_bad_input_is_one_line_without_traceback(args):
    proc = subprocess_plan(*args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_plan_imports_no_heavy_module():
    """Startup speed: the plan path must not import torch, deepspeed, transformers, jsonschema or jinja2."""
    code = ("import sys, io, contextlib\n"
            "from zerokit.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    rc = main({LLAMA_7B_8xH100 + ['--format', 'json']!r})\n"
            "heavy = {'torch', 'deepspeed', 'transformers', 'jsonschema', 'jinja2', 'numpy'}\n"
            "print(rc, sorted({m.split('.')[0] for m in sys.modules} & heavy))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert proc.stdout.strip() == "0 []", proc.stderr


# ---------------------------------------------------------------- --help draws on the dataclass docstrings

def test_help_text_comes_from_the_dataclass_docstrings(capsys):
    code, stdout, _ = run(capsys, "plan", "--help")
    assert code == 0
    flat = " ".join(stdout.split())
    assert "Tokens per sample." in flat  # Training.seq_len
    assert "Host RAM per node available for offload; auto = unknown" in flat  # Hardware.cpu_memory_bytes
    for option in ("--model", "--gpu", "--gpu-memory", "--gpus-per-node", "--nodes", "--seq-len", "--micro-batch",
                   "--global-batch", "--global-batch-tokens", "--zero-stage", "--offload-optimizer",
                   "--offload-param", "--gradient-checkpointing", "--attention", "--precision", "--cpu-memory",
                   "--nvme-path", "--nvme-size", "--target", "--format", "--output", "--lr", "--weight-decay",
                   "--warmup-steps", "--total-steps", "--force"):
        assert option in stdout


def test_attribute_docs_match_the_dataclass_source():
    """The cheap regex reader agrees with a real parse of types.py, for every documented field."""
    import ast
    import dataclasses

    from zerokit.commands.plan import _attribute_docs
    from zerokit.planner import types

    with open(types.__file__, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for cls in (types.Hardware, types.Training):
        node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls.__name__)
        expected = {a.target.id: " ".join(b.value.value.split()) for a, b in zip(node.body, node.body[1:])
                    if isinstance(a, ast.AnnAssign) and isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant)}
        assert _attribute_docs(cls.__name__) == expected
        assert set(expected) == {f.name for f in dataclasses.fields(cls)}  # every option has its meaning written


def test_stacked_bar_by_hand():
    from zerokit.planner.types import GpuMemory
    from zerokit.report import stacked_bar

    # capacity 90, scale 135 (1.5x), 45 columns: one column per 3 bytes, the capacity mark after column 30.
    fits = GpuMemory(parameters=30, gradients=15, optimizer_states=0, activations=30, transient=6, buffers=3,
                     overhead=6)
    assert stacked_bar(fits, 90, 135) == "P" * 10 + "G" * 5 + "A" * 10 + "TT" + "B" + "oo" + "|"
    over = GpuMemory(parameters=150, gradients=0, optimizer_states=0, activations=0, transient=0, buffers=0,
                     overhead=0)
    assert stacked_bar(over, 90, 135) == "P" * 30 + "|" + "P" * 14 + ">"
    small = GpuMemory(parameters=9, gradients=0, optimizer_states=0, activations=0, transient=0, buffers=0, overhead=0)
    assert stacked_bar(small, 90, 135) == "PPP" + " " * 27 + "|"


def test_folder_without_config_json_is_one_line_exit_2(capsys, tmp_path):
    code, stdout, stderr = run(capsys, "plan", "--model", str(tmp_path), "--gpu", "h100-80gb", "--seq-len", "512")
    assert code == 2 and stdout == "" and stderr.count("\n") == 1
    assert "config.json" in stderr


# ---------------------------------------------------------------------------------------------- step time

PROFILE = os.path.join(os.path.dirname(__file__), "data", "step_time", "profile.json")
TINY = os.path.join(os.path.dirname(__file__), "..", "examples", "models", "tiny-llama")


def test_performance_is_the_chosen_candidates_step_and_time_to_train_is_whole_steps(capsys):
    import math

    code, plan = run_json(capsys, *LLAMA_7B_8xH100, "--global-batch-tokens", "1M", "--train-tokens", "10B")
    assert code == 0
    perf = plan["performance"]
    chosen = next(c for c in plan["candidates"] if (c["zero_stage"], c["offload_optimizer"], c["offload_param"])
                  == (plan["decision"]["zero_stage"], "none", "none"))
    assert perf["step_time_s"] == chosen["step_time_s"] and perf["tokens_per_s"] == chosen["tokens_per_s"]
    d = plan["decision"]
    assert perf["tokens_per_step"] == 4096 * d["micro_batch_size"] * d["gradient_accumulation_steps"] * 8
    assert perf["tokens_per_s"] == pytest.approx(perf["tokens_per_step"] / perf["step_time_s"])
    assert perf["time_to_train_s"] == pytest.approx(math.ceil(10e9 / perf["tokens_per_step"]) * perf["step_time_s"])
    assert 0 < perf["mfu"] < 1
    # every candidate that fits is timed, the others are null
    assert all((c["step_time_s"] is None) == (not c["fits"]) for c in plan["candidates"])
    # and the choice is the most tokens/s, up to the 2% tie rule
    best = max(c["tokens_per_s"] for c in plan["candidates"] if c["fits"])
    assert perf["tokens_per_s"] >= 0.98 * best
    code, plan = run_json(capsys, *LLAMA_7B_8xH100)
    assert plan["performance"]["time_to_train_s"] is None


def test_slower_links_slow_a_multi_node_plan(capsys):
    args = ["plan", "--model", "llama-2-70b", "--gpu", "h100-80gb", "--gpus-per-node", "8", "--nodes", "4",
            "--seq-len", "4096", "--zero-stage", "3", "--micro-batch", "1", "--gradient-checkpointing", "on"]
    _, fast = run_json(capsys, *args)
    _, slow = run_json(capsys, *args, "--inter-node-bandwidth", "100Gbps")
    assert slow["performance"]["exposed_communication_s"] > fast["performance"]["exposed_communication_s"]
    assert slow["performance"]["step_time_s"] > fast["performance"]["step_time_s"]


def test_a_cpu_profiles_host_ram_is_what_offload_can_use(capsys):
    """DeepSpeed's CPU accelerator keeps the ranks' states and the offloaded ones in one RAM, which the probe measured:
    a 7B plan on two ranks "fitted" with 140 GB of offloaded states on that host, since --cpu-memory was unknown."""
    with open(PROFILE, encoding="utf-8") as f:
        host = json.load(f)["measurements"]["device_memory_bytes"]
    code, plan = run_json(capsys, "plan", "--hardware", PROFILE, "--model", "llama-2-7b", "--gpus-per-node", "2",
                          "--seq-len", "128")
    assert code == 1 and not plan["decision"]["fits"]
    assert plan["hardware"]["cpu_memory_bytes"] == host and plan["hardware"]["gpu_memory_bytes"] == host // 2
    code, plan = run_json(capsys, "plan", "--hardware", PROFILE, "--model", "llama-2-7b", "--gpus-per-node", "2",
                          "--seq-len", "128", "--cpu-memory", "1TB")  # what the user says stands
    assert code == 0 and plan["hardware"]["cpu_memory_bytes"] == 10**12


def test_an_nvme_plan_says_when_the_profile_did_not_measure_the_drive(capsys, tmp_path):
    """A probe without --nvme-path priced NVMe offload at a typical drive's 6.5/3.5 GB/s, and the plan said nothing;
    the table's "(default: ...)" was the only trace. A profile that measured the drive plans at its figures, quietly."""
    args = ("plan", "--model", TINY, "--gpus-per-node", "2", "--seq-len", "128", "--micro-batch", "4", "--zero-stage",
            "3", "--offload-optimizer", "nvme", "--nvme-path", str(tmp_path))
    code, plan = run_json(capsys, *args, "--hardware", PROFILE)
    assert code == 0 and (f"step times assume NVMe at 6.5 GB/s read and 3.5 GB/s write, which the profile did not "
                          f"measure: probe with `zerokit probe --nvme-path {tmp_path}` for this drive's"
                          ) in plan["warnings"]
    with open(PROFILE, encoding="utf-8") as f:
        measured = json.load(f)
    measured.update(nvme_read=2.1e9, nvme_write=1.2e9, sources={**measured["sources"], "nvme": "probe"})
    (tmp_path / "nvme.json").write_text(json.dumps(measured))
    code, plan = run_json(capsys, *args, "--hardware", str(tmp_path / "nvme.json"))
    assert code == 0 and not [w for w in plan["warnings"] if "NVMe at" in w]
    code, plan = run_json(capsys, *args[:-4], "--hardware", PROFILE)  # no NVMe offload: nothing to say
    assert code == 0 and not [w for w in plan["warnings"] if "NVMe at" in w]


def test_a_cpu_offload_plan_says_when_the_profile_timed_torchs_adamw_for_cpu_adam(capsys):
    """Where cpu_adam was not compiled, the probe times torch's AdamW in its place (the source says so in the probe's
    table), and the plans that offload the optimizer to it said nothing of it."""
    args = ("plan", "--model", TINY, "--gpus-per-node", "2", "--seq-len", "128", "--micro-batch", "4", "--zero-stage",
            "2")
    note = ("the profile's CPU Adam figure is torch.optim.AdamW's: DeepSpeed's cpu_adam was not compiled when it was "
            "probed, and the offloaded optimizer steps with it; probe again after one offload run has built it")
    code, plan = run_json(capsys, *args, "--offload-optimizer", "cpu", "--hardware", PROFILE)
    assert code == 0 and note in plan["warnings"]
    code, plan = run_json(capsys, *args, "--offload-optimizer", "none", "--hardware", PROFILE)
    assert code == 0 and note not in plan["warnings"]
    amd = os.path.join(os.path.dirname(PROFILE), "2026-11-25-amd", "profile.json")  # DeepSpeedCPUAdam timed
    code, plan = run_json(capsys, *args, "--offload-optimizer", "cpu", "--hardware", amd)
    assert code == 0 and note not in plan["warnings"]


def test_link_options_need_a_preset_or_a_profile(capsys):
    code, _, err = run(capsys, "plan", "--model", "llama-2-7b", "--gpu-memory", "80GB", "--seq-len", "4096",
                       "--pcie-bandwidth", "32GB/s")
    assert code == 2 and "give --gpu PRESET too" in err
    code, _, err = run(capsys, *LLAMA_7B_8xH100, "--inter-node-bandwidth", "fast")
    assert code == 2 and "--inter-node-bandwidth" in err and "\n" == err[-1] and err.count("\n") == 1
    code, _, err = run(capsys, *LLAMA_7B_8xH100, "--train-tokens", "lots")
    assert code == 2 and "--train-tokens" in err


def test_a_probe_profile_plans_for_the_machine_it_measured(capsys):
    from zerokit.models.resolve import resolve_model
    from zerokit.perf import load_profile, step_time

    code, plan = run_json(capsys, "plan", "--hardware", PROFILE, "--model", TINY, "--gpus-per-node", "2",
                          "--seq-len", "128", "--micro-batch", "4", "--zero-stage", "2")
    assert code == 0
    assert plan["hardware"]["gpu_name"] == "cpu"  # the profile is of DeepSpeed's CPU accelerator
    # DeepSpeed's CPU accelerator: the probe measured the host's RAM, which the two ranks share; each was planned
    # against all of it, so a plan at 20 GB a rank "fitted" two ranks on a 25 GB host
    with open(PROFILE, encoding="utf-8") as f:
        assert plan["hardware"]["gpu_memory_bytes"] == json.load(f)["measurements"]["device_memory_bytes"] // 2
    assert plan["memory"]["per_gpu"]["overhead"] == 0  # no CUDA context on a CPU
    spec = resolve_model(TINY)
    d = plan["decision"]
    expected = step_time(spec.config, load_profile(PROFILE), parameters=spec.parameters, seq_len=128, micro_batch=4,
                         gpus_per_node=2, zero_stage=2, offload_optimizer=d["offload_optimizer"],
                         gradient_checkpointing=d["gradient_checkpointing"],
                         reduce_bucket_size=d["reduce_bucket_size"], allgather_bucket_size=d["allgather_bucket_size"],
                         prefetch_bucket_size=d["prefetch_bucket_size"],
                         persistence_threshold=d["param_persistence_threshold"], overlap_comm=d["overlap_comm"])
    assert plan["performance"]["step_time_s"] == pytest.approx(expected.step_time_s)
    code, _, err = run(capsys, "plan", "--hardware", "missing.json", "--model", TINY, "--seq-len", "128")
    assert code == 2 and "zerokit probe" in err


def test_a_cpu_profile_does_not_plan_gpus(capsys):
    """A profile probed where no GPU is (a login node) with --gpu PRESET planned the GPUs at the CPU's speed: a 7B step
    at 2.6 days on 8 A100s, with no word. The two contradict each other: exit 2, one line, the three ways out."""
    code, out, err = run(capsys, "plan", "--hardware", PROFILE, "--model", "llama-2-7b", "--gpu", "a100-80gb",
                         "--gpus-per-node", "8", "--seq-len", "4096")
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert "probed on DeepSpeed's CPU accelerator" in err and "--gpu a100-80gb plans for GPUs" in err
    assert "Run `zerokit probe` where the GPUs are" in err and "leave out --hardware" in err
    assert "leave out --gpu" in err
    # the CPU's own memory budget, by size, is still the CPU's: planned for it, as before
    code, plan = run_json(capsys, "plan", "--hardware", PROFILE, "--model", TINY, "--gpu-memory", "16GB",
                          "--seq-len", "128")
    assert code == 0 and plan["hardware"]["gpu_name"] == "cpu" and plan["hardware"]["gpu_memory_bytes"] == 16 * 10**9


def test_a_gpu_profile_beside_another_gpu_preset_is_said(capsys):
    """An H100's profile with --gpu a100-80gb plans A100 memory at H100 speed: allowed (the figures may be the best at
    hand), but said. The preset that names the GPU measured, in any case or form, says nothing."""
    from zerokit.perf.machine import same_gpu

    assert same_gpu("a100-80gb", "NVIDIA A100-SXM4-80GB") and same_gpu("rtx4090", "NVIDIA GeForce RTX 4090")
    assert same_gpu("H100-PCIE", "NVIDIA H100 80GB HBM3") and same_gpu("mi300x", "AMD Instinct MI300X")
    assert not same_gpu("a100-80gb", "NVIDIA H100 80GB HBM3") and not same_gpu("h200", "NVIDIA H100 80GB HBM3")
    h100 = os.path.join(os.path.dirname(__file__), "data", "gpu", "2026-11-27-h100", "profile.json")
    args = ("plan", "--hardware", h100, "--model", "llama-2-7b", "--gpus-per-node", "8", "--seq-len", "4096")
    code, plan = run_json(capsys, *args, "--gpu", "a100-80gb")
    said = [w for w in plan["warnings"] if "another GPU" in w]
    assert code == 0 and said == [("the step times are the NVIDIA H100 80GB HBM3's figures and the memory the "
                                  "a100-80gb's, another GPU: probe the GPU you plan for (`zerokit probe` there, then "
                                  "--hardware), or plan without a profile for the a100-80gb preset's figures")]
    assert plan["hardware"]["gpu_memory_bytes"] == 80 * 2**30 and plan["hardware"]["gpu_name"] == "a100-80gb"
    for gpu in ("h100-80gb", "H100-80GB"):
        code, plan = run_json(capsys, *args, "--gpu", gpu)
        assert code == 0 and not [w for w in plan["warnings"] if "another GPU" in w]


def test_pythons_plan_says_another_gpus_figures_too():
    """The warning lives in plan(), so a library caller timing a preset on another GPU's figures (a profile, or another
    preset's) hears it as the CLI does; a profile of the GPU planned, or a GPU given by memory alone, says nothing."""
    from zerokit.hardware import resolve_hardware
    from zerokit.models.resolve import resolve_model
    from zerokit.perf import load_profile
    from zerokit.perf.machine import machine_from_preset
    from zerokit.planner.engine import plan
    from zerokit.planner.types import Training

    spec, training = resolve_model("llama-2-7b"), Training(seq_len=4096)
    h100 = load_profile(os.path.join(os.path.dirname(__file__), "data", "gpu", "2026-11-27-h100", "profile.json"))

    def said(gpu: str | None, machine) -> list[str]:
        hardware = resolve_hardware(gpu, gpus_per_node=8) if gpu else resolve_hardware(gpu_memory="80GB",
                                                                                         gpus_per_node=8)
        return [w for w in plan(spec, hardware, training, machine=machine).warnings if "another GPU" in w]

    assert said("a100-80gb", h100) and said("h100-80gb", machine_from_preset("a100-80gb"))
    assert not said("h100-80gb", h100) and not said(None, h100) and not said("a100-80gb", None)


def test_a_plan_slower_than_a_token_a_second_prints_its_rate(capsys):
    """A 7B on a CPU's profile trains a few tokens a second (9 on the Intel Xeon's, 0.08 on the AMD EPYC's): the text
    printed `9` and `0 tokens/s`; now three significant figures below 100."""
    from zerokit.units import format_rate

    assert [format_rate(x) for x in (34_499.6, 100.0, 99.94, 12.345, 0.29307, 0.0)] == [
        "34,500", "100", "99.9", "12.3", "0.293", "0"]
    # a host with the RAM for it: the ranks' 80 GB each are that RAM on DeepSpeed's CPU accelerator
    code, out, _ = run(capsys, "plan", "--hardware", PROFILE, "--model", "llama-2-7b", "--gpu-memory", "80GB",
                       "--cpu-memory", "512GB", "--gpus-per-node", "2", "--seq-len", "512")
    speed = next(line for line in out.splitlines() if line.startswith("Speed (predicted)"))
    printed = speed.split(", ")[1].split(" tokens/s")[0]
    assert code == 0 and "." in printed and 0 < float(printed) < 100, speed
    code, plan = run_json(capsys, "plan", "--hardware", PROFILE, "--model", "llama-2-7b", "--gpu-memory", "80GB",
                          "--cpu-memory", "512GB", "--gpus-per-node", "2", "--seq-len", "512")
    assert f"{plan['performance']['tokens_per_s']:.3g}" == printed


@pytest.mark.parametrize("ranks, said", [(2, False), (8, True), (1, True)])
def test_a_cpu_profile_planned_for_other_ranks_a_node_is_said(capsys, ranks, said):
    """A CPU profile's kernel figures are per rank, as the probe's ranks shared the cores (2 here): 8 ranks on the
    same node would each get a quarter of what those had, and the plan said nothing."""
    code, plan = run_json(capsys, "plan", "--hardware", PROFILE, "--model", TINY, "--gpus-per-node", str(ranks),
                          "--seq-len", "128")
    warned = [w for w in plan["warnings"] if w.startswith("step times are per rank")]
    assert code == 0 and warned == ([
        (f"step times are per rank as 2 ranks shared this CPU when it was probed; {ranks} a node would share its "
        f"cores otherwise: probe with `zerokit probe --ranks {ranks}` (and the OMP_NUM_THREADS they will train "
        "with) for their figures")] if said else [])
    h100 = os.path.join(os.path.dirname(__file__), "data", "gpu", "2026-11-27-h100", "profile.json")
    code, plan = run_json(capsys, "plan", "--hardware", h100, "--model", "llama-2-7b", "--gpus-per-node", "8",
                          "--intra-node-bandwidth", "450GB/s", "--seq-len", "4096")
    assert code == 0 and not [w for w in plan["warnings"] if w.startswith("step times are per rank")]  # GPUs


def test_train_tokens_give_the_time_to_train_as_whole_steps(capsys):
    code, plan = run_json(capsys, *LLAMA_7B_8xH100, "--train-tokens", "10B")
    perf = plan["performance"]
    assert code == 0 and perf["train_tokens"] == 10_000_000_000 and isinstance(perf["train_tokens"], int)
    steps = -(-10_000_000_000 // perf["tokens_per_step"])  # a partial step is a step
    assert perf["time_to_train_s"] == pytest.approx(steps * perf["step_time_s"])
    # the steps, for the Trainer's max_steps (which fills the scheduler's "auto" total)
    assert perf["train_steps"] == steps and plan["training_arguments"]["max_steps"] == steps
    code, plan = run_json(capsys, *LLAMA_7B_8xH100)
    assert plan["performance"]["train_tokens"] is None and plan["performance"]["time_to_train_s"] is None
    assert plan["performance"]["train_steps"] is None and "max_steps" not in plan["training_arguments"]


@pytest.mark.parametrize("total_steps, said", [("5", True), ("steps", False), ("steps-4%", False), ("steps+6%", True)])
def test_total_steps_far_from_the_train_tokens_are_said(capsys, total_steps, said):
    """--total-steps sets the Trainer's max_steps and the scheduler's decay: 5 steps of a plan asked for 10B tokens
    train 0.05% of them, which the plan now says (with the steps that would); within 5% it is the user's choice."""
    code, plan = run_json(capsys, *LLAMA_7B_8xH100, "--train-tokens", "10B")
    steps = plan["performance"]["train_steps"]
    total = {"5": 5, "steps": steps, "steps-4%": int(steps * 0.96), "steps+6%": int(steps * 1.06)}[total_steps]
    code, plan = run_json(capsys, *LLAMA_7B_8xH100, "--train-tokens", "10B", "--total-steps", str(total))
    warned = [w for w in plan["warnings"] if w.startswith("--total-steps")]
    assert code == 0 and plan["training_arguments"]["max_steps"] == total
    assert warned == ([(f"--total-steps {total:,} trains {total * plan['performance']['tokens_per_step']:,} tokens "
                       f"({plan['performance']['tokens_per_step']:,} a step), "
                       f"{100 * (total * plan['performance']['tokens_per_step'] - 10**10) / 10**10:+.1f}% from "
                       f"--train-tokens 10.00B: {steps:,} steps train those; the scheduler decays over --total-steps "
                       "and the Trainer stops there")] if said else [])


def test_a_profile_of_one_rank_plans_several_gpus_at_its_host_link_rate_and_says_so(capsys):
    """The H100's profile probed one rank: no collective was timed. Its 1 GB/s placeholder, read as measured, made
    an 8-GPU plan spend 23.6 s a step communicating, without a word; now the GPUs of a node talk at the host-link
    rate the probe measured (55 GB/s), and the plan says so and how to give the real figure."""
    h100 = os.path.join(os.path.dirname(__file__), "data", "gpu", "profile.json")
    args = ("plan", "--hardware", h100, "--model", "llama-2-7b", "--seq-len", "4096")
    code, plan = run_json(capsys, *args, "--gpus-per-node", "8", "--nodes", "2")
    assert code == 0
    intra, inter = (w for w in plan["warnings"] if w.startswith("step times assume"))
    assert intra.startswith("step times assume 55 GB/s between the GPUs of a node") and "--intra-node-bandwidth" in intra
    assert inter.startswith("step times assume 100 Gb/s between nodes") and "--inter-node-bandwidth" in inter
    slow = plan["performance"]["communication_s"]
    code, plan = run_json(capsys, *args, "--gpus-per-node", "8", "--intra-node-bandwidth", "450GB/s")
    assert not [w for w in plan["warnings"] if w.startswith("step times assume")]
    assert plan["performance"]["communication_s"] < slow
    code, plan = run_json(capsys, *args)  # one GPU: no link to assume
    assert code == 0 and not [w for w in plan["warnings"] if w.startswith("step times assume")]
    # the GPU is the one the probe measured, by name, with the bf16 kernels it timed (it was "custom", "assuming")
    assert plan["hardware"]["gpu_name"] == "NVIDIA H100 80GB HBM3" and plan["hardware"]["bf16"] is True
    assert "bf16 because NVIDIA H100 80GB HBM3 supports it" in plan["reasons"][0]


@pytest.mark.parametrize("option", ["--cpu-memory", "--nvme-size", "--overhead", "--train-tokens", "--total-steps"])
def test_auto_is_what_the_help_says_it_is_leaving_the_option_out(capsys, option):
    """`plan --help` documents `auto` for these (unknown, the default, not asked): it was refused as a bad size."""
    code, out, err = run(capsys, *LLAMA_7B_8xH100, option, "AUTO", "--target", "deepspeed", "--format", "json")
    assert code == 0, err
    _, left_out, _ = run(capsys, *LLAMA_7B_8xH100, "--target", "deepspeed", "--format", "json")
    assert json.loads(out) == json.loads(left_out)
    assert f"{option} " in " ".join(run(capsys, "plan", "--help")[1].split())


GPT_OSS = {"model_type": "gpt_oss", "hidden_size": 64, "intermediate_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 300,
           "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 32}


def test_a_family_without_sdpa_is_planned_for_the_eager_attention_a_run_gets(capsys, tmp_path, monkeypatch):
    # transformers builds gpt-oss without sdpa (attn_implementation="sdpa" raises): a run falls back to eager, and
    # the plan is made for eager (the calibration and the scores) instead of a generic estimate for sdpa
    pytest.importorskip("transformers")
    monkeypatch.setenv("ZEROKIT_CALIBRATION_DIR", str(tmp_path / "cache"))
    (tmp_path / "config.json").write_text(json.dumps(GPT_OSS))
    args = ["plan", "--model", str(tmp_path / "config.json"), "--gpu", "a100-80gb", "--seq-len", "256"]
    code, doc = run_json(capsys, *args)
    assert code == 0
    assert any(w.startswith("gpt_oss has no sdpa attention in this transformers") for w in doc["warnings"])
    assert not any("not calibrated" in w for w in doc["warnings"])
    # the same plan as asking for eager outright
    code, eager = run_json(capsys, *args, "--attention", "eager")
    assert (eager["decision"], eager["performance"]) == (doc["decision"], doc["performance"])


@pytest.mark.parametrize("tokens, total, said", [("1", "1", False), ("70000", "2", False), ("70000", "3", True)])
def test_total_steps_that_are_the_steps_a_small_budget_takes_are_not_said(capsys, tokens, total, said):
    """65,536 tokens a step: one token, or 70,000, take one and two steps (a partial last step is a step), however
    far those steps' tokens are from the budget; a third step is one too many."""
    code, plan = run_json(capsys, *LLAMA_7B_8xH100, "--train-tokens", tokens, "--total-steps", total)
    assert code == 0 and plan["performance"]["tokens_per_step"] == 65_536
    assert any(w.startswith("--total-steps") for w in plan["warnings"]) == said


@pytest.mark.parametrize("seconds, text", [
    (0.0099, "9.90 ms"), (0.00996, "10 ms"), (0.9994, "999 ms"), (0.9996, "1.00 s"), (99.994, "99.99 s"),
    (99.996, "1.7 min"), (3599.99, "1.0 h"), (172790, "2.0 days"),
])
def test_durations_print_in_the_unit_their_rounded_value_belongs_to(seconds, text):
    """A step of 0.9996 s printed `1000 ms/step`, a run of 3,599.99 s `60.0 min`: each unit by the value as shown."""
    from zerokit.units import format_seconds

    assert format_seconds(seconds) == text


@pytest.mark.parametrize("n, size, count", [
    (999_960, "1.0 MB", "1.0M"), (999.96e9, "1.0 TB", "1.00T"), (999_999_999_999, "1.0 TB", "1.00T"),
    (999, "999 B", "999"), (124.4e6, "124.4 MB", "124.4M"),
])
def test_sizes_and_counts_print_in_the_unit_their_rounded_value_belongs_to(n, size, count):
    """999,960 bytes printed `1000.0 KB` and 999,960 parameters `1000.0K`."""
    from zerokit.units import format_bytes, format_count

    assert (format_bytes(n), format_count(n)) == (size, count)


@pytest.mark.parametrize("n, binary, text", [
    (0, False, "0 B"), (999.4, False, "999 B"), (999.5, False, "1.0 KB"), (1023.6, True, "1.0 KiB"),
    (1023, True, "1023 B"), (-999_960, False, "-1.0 MB"), (80 * 2**30, True, "80.0 GiB"),
    (10**21, False, "1000000.0 PB"), (float("inf"), False, "inf PB"),
])
def test_sizes_print_bytes_whole_and_larger_units_to_a_tenth_up_to_petabytes(n, binary, text):
    from zerokit.units import format_bytes

    assert format_bytes(n, binary) == text


def test_batch_reasons_count_one_gpu_and_one_sample_in_the_singular(capsys):
    """'30 x 1 x 1 GPUs' and '1 samples per GPU' read wrong; the sums stay as computed by hand."""
    _, one = run_json(capsys, "plan", "--model", "gpt2", "--gpu", "a100-80gb", "--seq-len", "1024", "--global-batch", "30")
    assert "global batch 30 = 30 samples per GPU x 1 GPU;" in one["reasons"][1]
    assert any(r.startswith("Gradient accumulation 1: 30 x 1 x 1 GPU = 30 samples, 30,720 tokens")
               for r in one["reasons"])
    _, many = run_json(capsys, "plan", "--model", "gpt2", "--gpu", "a100-80gb", "--gpus-per-node", "64", "--seq-len", "1024",
                       "--global-batch", "30")
    assert any("global batch 64 = 1 sample per GPU x 64 GPUs;" in r for r in many["reasons"])
    assert any(r.startswith("Gradient accumulation 1: 1 x 1 x 64 GPUs = 64 samples, 65,536 tokens")
               for r in many["reasons"])


def test_the_candidates_header_says_how_the_star_was_chosen(capsys):
    """Within 2% the earlier (simpler) setup is kept, one with 5% headroom before one without, so * is not always
    the most tokens/s; where nothing fits it marks the closest miss."""
    assert main(["plan", "--model", "llama-2-7b", "--gpu", "h100-80gb", "--gpus-per-node", "8", "--seq-len", "4096"]) == 0
    assert ("Candidates (in search order; * = chosen, the most tokens/s that fits, or within 2% of it the earliest, "
            "one at most 95% full first):") in capsys.readouterr().out
    assert main(["plan", "--model", "70B", "--gpu", "rtx4090", "--seq-len", "4096", "--cpu-memory", "64GB"]) == 1
    assert "Candidates (in search order; * = chosen, the closest miss):" in capsys.readouterr().out


def test_total_steps_under_the_deepspeed_target_name_no_trainer(capsys):
    """With --target deepspeed the user's own loop decides when to stop; the scheduler still decays over the steps."""
    run_json(capsys, *LLAMA_7B_8xH100, "--train-tokens", "10B")
    code, plan = run_json(capsys, *LLAMA_7B_8xH100, "--train-tokens", "10B", "--total-steps", "5", "--target",
                          "deepspeed")
    [warned] = [w for w in plan["warnings"] if w.startswith("--total-steps")]
    assert code == 0 and warned.endswith("the scheduler decays over --total-steps") and "Trainer" not in warned


@pytest.mark.parametrize("target", ["trainer", "accelerate", "deepspeed"])
def test_markdown_shows_the_hf_trainer_code_only_for_the_trainer(capsys, target):
    """An Accelerate or plain DeepSpeed config handed to TrainingArguments fails the Trainer's checks (a
    --target deepspeed lr against its learning_rate): the Trainer's code block is the trainer target's alone."""
    code, stdout, _ = run(capsys, "plan", "--model", "llama-2-7b", "--gpu", "h100-80gb", "--seq-len", "2048",
                          "--peft", "lora", "--target", target, "--format", "markdown")
    assert code == 0
    assert ("With the HF Trainer:" in stdout) == (target == "trainer")
    assert ("## Candidates (in search order; the chosen one trains the most tokens/s that fits, or within 2% of it "
            "the earliest, one at most 95% full first)") in stdout



def test_an_offload_plan_for_several_gpus_a_node_says_their_cpu_adam_shares_the_host(capsys):
    """Where the chosen setup offloads the optimizer for several GPUs of a node, their ranks step CPU Adam on its host
    at once: the plan says which rate it priced (the preset's one-rank figure), and how to bind the ranks' cores and
    probe the node's own rate. One GPU, or no offload, or DeepSpeed's CPU accelerator: nothing to say."""
    args = ("plan", "--model", "llama-2-7b", "--gpu", "a100-80gb", "--seq-len", "4096", "--zero-stage", "3")
    code, plan = run_json(capsys, *args, "--gpus-per-node", "8", "--offload-optimizer", "cpu")
    notes = [w for w in plan["warnings"] if w.startswith("the optimizer steps on the host")]
    assert code == 0 and len(notes) == 1
    assert "the 8 ranks of a node run CPU Adam at once, priced at the preset's 4e9 parameters/s" in notes[0]
    assert "zerokit launch --bind-cores-to-rank" in notes[0] and "zerokit probe --bind-cores-to-rank" in notes[0]
    for extra in (("--gpus-per-node", "1", "--offload-optimizer", "cpu"), ("--gpus-per-node", "8",
                                                                          "--offload-optimizer", "none")):
        code, plan = run_json(capsys, *args, *extra)
        assert code == 0 and not [w for w in plan["warnings"] if w.startswith("the optimizer steps on the host")]
    code, plan = run_json(capsys, "plan", "--model", TINY, "--gpus-per-node", "2", "--seq-len", "128",
                          "--micro-batch", "4", "--zero-stage", "2", "--offload-optimizer", "cpu", "--hardware", PROFILE)
    assert code == 0 and not [w for w in plan["warnings"] if w.startswith("the optimizer steps on the host")]


def test_full_fine_tuning_that_fits_nowhere_names_the_adapters_that_fit(capsys):
    """`Missing:` listed GPUs, CPU RAM and NVMe for mistral-7b on one RTX 4090 with 64 GB, never that LoRA fits that
    very machine. The CLI plans LoRA (then QLoRA) where full fine-tuning fits nowhere and names the first that fits;
    the in-process plan() does so only when asked (two more plans a miss)."""
    from zerokit.hardware import resolve_hardware
    from zerokit.models.resolve import resolve_model
    from zerokit.planner import Training, plan
    from zerokit.units import format_bytes, format_rate

    argv = ["plan", "--model", "mistral-7b", "--gpu", "rtx4090", "--cpu-memory", "64GB", "--seq-len", "2048"]
    code, out, _ = run(capsys, *argv, "--format", "json")
    missing = json.loads(out)["missing"]
    lora = plan(resolve_model("mistral-7b"), resolve_hardware("rtx4090", cpu_memory="64GB"),
                Training(seq_len=2048, peft="lora"))
    d = lora.decision
    assert code == 1 and lora.decision.fits and d.micro_batch_size >= 1
    assert missing.endswith(
        f"; or train adapters on a frozen base, not every weight: --peft lora fits as ZeRO-{d.zero_stage} at "
        f"micro-batch {d.micro_batch_size}" + (" with gradient checkpointing" if d.gradient_checkpointing else "")
        + f", {format_bytes(lora.memory.total)} per GPU, {format_rate(lora.performance.tokens_per_s)} tokens/s")
    full = plan(resolve_model("mistral-7b"), resolve_hardware("rtx4090", cpu_memory="64GB"), Training(seq_len=2048))
    assert not full.decision.fits and "--peft" not in full.missing and missing.startswith(full.missing)
    # nothing to add where no adapters fit (a 70B's 4-bit base alone is over the 4090's 24 GB) or they were asked for
    for extra in (["--model", "llama-2-70b"], ["--peft", "lora", "--cpu-memory", "16GB", "--model", "llama-2-70b"]):
        code, out, _ = run(capsys, *argv, *extra, "--format", "json")
        assert code == 1 and "--peft" not in json.loads(out)["missing"]


@pytest.mark.parametrize("model", ["1.2B", "0.6B", "llama-2-7b"])
def test_a_cpu_plan_counts_the_ranks_and_the_offloaded_states_in_one_ram(capsys, model):
    """On DeepSpeed's CPU accelerator each rank's "GPU" is its share of the host's RAM, and offload keeps its states
    in that same RAM: a 1.2B on two ranks of the probed 25.3 GB host planned ZeRO-2 + optimizer offload with 9.4 GB a
    rank and 22.7 GB of offloaded states, 41.6 GB in all, and called it a fit. Every setup that fits now holds the
    ranks' peaks and its offloaded states within the RAM, and the CPU RAM the plan reports is that sum."""
    from zerokit.memory.host import host_memory
    from zerokit.models.resolve import resolve_model

    with open(PROFILE, encoding="utf-8") as f:
        ram = json.load(f)["measurements"]["device_memory_bytes"]
    code, plan = run_json(capsys, "plan", "--hardware", PROFILE, "--model", model, "--gpus-per-node", "2",
                          "--seq-len", "512")
    spec = resolve_model(model)
    assert plan["hardware"]["cpu_memory_bytes"] == ram and plan["hardware"]["gpu_memory_bytes"] == ram // 2
    fitting = [c for c in plan["candidates"] if c["fits"]]
    assert (code == 0) == bool(fitting)
    for c in fitting:
        offloaded = host_memory(spec.parameters, spec.largest_layer_parameters, 2, 1, c["zero_stage"],
                                c["offload_optimizer"], c["offload_param"]).steady_state
        assert 2 * c["per_gpu_total"] + offloaded == c["cpu_bytes_per_node"] <= ram
    for c in plan["candidates"]:
        if not c["fits"] and c["offload_optimizer"] != "none":
            assert "its offload keeps in the same RAM" in c["why_not"] or "offloaded states in the node's RAM" in c["why_not"]
    if model == "1.2B":  # what the reviewer planned: nothing fits, and full offload's RAM says so
        assert code == 1 and "for full offload (have 25.3 GB)" in plan["missing"]
    if model == "0.6B":
        assert code == 0 and plan["decision"]["offload_optimizer"] == "none"
        assert plan["memory"]["per_node_cpu"]["total"] == 2 * plan["memory"]["per_gpu"]["total"]
    # "while training" is the ranks and the offloaded states, the load peak apart
    d, cpu = plan["decision"], plan["memory"]["per_node_cpu"]
    offloaded = host_memory(spec.parameters, spec.largest_layer_parameters, 2, 1, d["zero_stage"],
                            d["offload_optimizer"], d["offload_param"]).steady_state
    assert cpu["steady_state"] == 2 * plan["memory"]["per_gpu"]["total"] + offloaded
    assert cpu["total"] == max(cpu["steady_state"], cpu["load_peak"])


def test_a_cpu_plan_that_fills_the_ram_says_so(capsys):
    """On DeepSpeed's CPU accelerator the tight-fit warning weighed a rank's peak against its --gpu-memory (the RAM
    split among the ranks) and missed the offloaded states in the same RAM: 0.7B with CPU optimizer offload filled 97%
    of the 25.3 GB host (4.5 GB a rank, 47% of its split) and said nothing. The smaller micro-batch it names plans
    below TIGHT."""
    argv = ("plan", "--hardware", PROFILE, "--model", "0.7B", "--gpus-per-node", "2", "--seq-len", "512",
            "--offload-optimizer", "cpu")
    code, plan = run_json(capsys, *argv)
    ram, cpu = plan["hardware"]["cpu_memory_bytes"], plan["memory"]["per_node_cpu"]["steady_state"]
    assert code == 0 and plan["decision"]["micro_batch_size"] == 4 and cpu / ram > 0.95
    assert plan["memory"]["per_gpu"]["total"] / plan["hardware"]["gpu_memory_bytes"] < 0.5
    said = [w for w in plan["warnings"] if w.startswith("the plan fills")]
    assert said == [(f"the plan fills {cpu / ram:.0%} of the node's 25.3 GB of RAM (its 2 ranks and the offloaded "
                     "states): it fits as planned, with little room for what a plan does not see, such as another "
                     "process on the machine; for headroom, plan with --micro-batch 2 or a larger --overhead")]
    code, roomy = run_json(capsys, *argv, "--micro-batch", "2")
    assert code == 0 and roomy["memory"]["per_node_cpu"]["steady_state"] / ram < 0.95
    assert not any(w.startswith("the plan fills") for w in roomy["warnings"])


def test_a_plan_from_a_quick_probe_says_its_figures_are_rough(capsys, tmp_path):
    """`zerokit probe --quick` writes `"quick": true` in its measurements (a smoke test: a few small sizes, each timed
    briefly, where the matmul curve can read 0 GFLOP/s), and a plan made from it said nothing of it."""
    with open(PROFILE, encoding="utf-8") as f:
        profile = json.load(f)
    said = ("the profile is from `zerokit probe --quick`, a smoke test that times each figure briefly at a few small "
            "sizes: its step times are rough (its matmul curve may read 0 GFLOP/s at the smallest sizes); probe "
            "without --quick for a plan to trust")
    for quick in (True, False):
        path = tmp_path / f"{quick}.json"
        path.write_text(json.dumps({**profile, "measurements": {**profile["measurements"], "quick": quick}}))
        code, plan = run_json(capsys, "plan", "--hardware", str(path), "--model", TINY, "--gpus-per-node", "2",
                              "--seq-len", "128")
        assert code == 0 and (said in plan["warnings"]) is quick

"""`zerokit lint` as users and CI call it: formats, positions, exit codes, inputs, Accelerate YAML, start-up cost."""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from zerokit.cli import main
from zerokit.lint.loader import load_file

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data", "lint")
ROOT = os.path.dirname(HERE)
EXAMPLES = os.path.join(ROOT, "examples")
BROKEN = os.path.join(DATA, "broken_ds_config.json")


def data(name: str) -> str:
    return os.path.join(DATA, name)


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["lint", *args])
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *args: str) -> tuple[int, list[dict]]:
    code, out, _ = run(capsys, "--format", "json", *args)
    return code, json.loads(out)


def write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# ---------------------------------------------------------------- output formats


def test_text_format_is_path_line_col_severity_code_message(capsys):
    code, out, err = run(capsys, "--world-size", "8", BROKEN)
    lines = out.splitlines()
    assert code == 1
    assert lines[0] == (f"{BROKEN}:2:3: error ZK201 train_batch_size 64 != micro batch 4 x gradient_accumulation_steps "
                        "4 x world size 8 = 128; DeepSpeed asserts this at initialize; set train_batch_size to 128")
    assert f"{BROKEN}:22:3: error ZK100 unknown key 'wall_clock_breakdwon' at the top level: DeepSpeed silently " \
           "ignores it (did you mean 'wall_clock_breakdown'?)" in lines
    assert err.strip() == "1 file checked: 15 errors, 1 warning"


def test_json_format_lists_findings_with_dotted_keys(capsys):
    code, findings = run_json(capsys, BROKEN)
    assert code == 1
    assert set(findings[0]) == {"path", "line", "column", "severity", "code", "key", "message", "suggestion"}
    by_key = {f["key"]: f for f in findings}
    typo = by_key["zero_optimization.contigous_gradients"]
    assert (typo["line"], typo["column"], typo["code"], typo["suggestion"]) == \
        (18, 5, "ZK100", "zero_optimization.contiguous_gradients")
    assert by_key["zero_optimization.offload_param.device"]["code"] == "ZK301"
    assert by_key["zero_optimization.offload_optimizer.ratio"]["line"] == 13


def test_github_format(capsys):
    code, out, _ = run(capsys, "--format", "github", BROKEN)
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith(f"::error file={BROKEN},line=6,col=12,title=ZK203::fp16 and bf16 are both enabled")
    assert any(line.startswith("::warning ") and "title=ZK302" in line for line in lines)


def test_json_format_of_a_clean_file_is_an_empty_list(capsys):
    code, findings = run_json(capsys, os.path.join(EXAMPLES, "configs", "zero2_ds_config.json"))
    assert (code, findings) == (0, [])


# ---------------------------------------------------------------- exit codes and unreadable input


def test_warnings_pass_unless_strict(capsys, tmp_path):
    path = write(tmp_path, "ds_config.json", '{"train_micro_batch_size_per_gpu": 1,\n'
                 ' "zero_optimization": {"stage": 2, "stage3_max_live_parameters": 1e9}}\n')
    code, out, _ = run(capsys, path)
    assert code == 0 and "warning ZK302" in out
    assert run(capsys, "--strict", path)[0] == 1


@pytest.mark.parametrize(("name", "position", "reason"), [
    ("malformed.json", "6:1", "syntax error: Expecting ',' delimiter"),
    ("empty.json", "1:1", "empty file"),
    ("garbage.bin", "1:1", "binary file"),
    ("list_top_level.json", "1:1", "top level is a list"),
])
def test_unreadable_files_exit_2_with_the_position(capsys, name, position, reason):
    code, out, _ = run(capsys, data(name))
    assert code == 2
    assert out.startswith(f"{data(name)}:{position}: error ZK001 {reason}")


def test_missing_file_exits_2_but_the_rest_is_linted(capsys, tmp_path):
    code, findings = run_json(capsys, str(tmp_path / "nope.json"), str(tmp_path / "*.json"), BROKEN)
    assert code == 2
    assert [(f["severity"], f["message"]) for f in findings[:2]] == [("warning", "no file matches this pattern"),
                                                                      ("error", "no such file")]
    assert any(f["path"] == BROKEN for f in findings)


def test_a_glob_matching_nothing(capsys, tmp_path):
    clean = os.path.join(EXAMPLES, "configs", "zero2_ds_config.json")
    assert run(capsys, str(tmp_path / "*.yaml"), clean)[0] == 0  # other patterns found files: a warning
    assert run(capsys, "--strict", str(tmp_path / "*.yaml"), clean)[0] == 1
    code, out, _ = run(capsys, str(tmp_path / "*.yaml"))  # nothing at all to lint
    assert code == 2 and "error ZK001 no file matches this pattern" in out


def test_a_directory_is_told_to_pass_its_files(capsys, tmp_path):
    """The glob advice is lint's own (read_bytes' directory_hint): `plan --model` gives its own advice instead."""
    code, out, _ = run(capsys, str(tmp_path))
    assert code == 2 and ("error ZK001 is a directory, not a regular file; pass the config files in it (a glob such "
                          "as dir/*.json)") in out


def test_malformed_json_that_hjson_reads(capsys):
    path = data("trailing_comma.json")
    code, out, _ = run(capsys, path)
    assert code == 1  # an error finding (json.load behind the Trainer cannot read it), as the README documents ZK107
    assert out.startswith(f"{path}:5:3: error ZK107 not strict JSON (Expecting property name")
    assert run(capsys, "--target", "deepspeed", path)[0] == 0  # DeepSpeed reads HJSON


@pytest.mark.parametrize("args", [["--format", "xml", BROKEN], [], ["--gpu-memory", "80G", BROKEN],
                                  ["--world-size", "0", BROKEN], ["-", "-"], ["--target", "megatron", BROKEN]])
def test_bad_usage_exits_2_with_one_line(capsys, args):
    code, out, err = run(capsys, *args)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


# ---------------------------------------------------------------- inputs


def test_many_files_and_a_glob_in_one_call(capsys, tmp_path):
    for i in range(3):
        shutil.copy(BROKEN, tmp_path / f"{i}_ds_config.json")
    code, findings = run_json(capsys, str(tmp_path / "*.json"), os.path.join(EXAMPLES, "configs", "*.json"))
    assert code == 1
    assert {os.path.basename(f["path"]) for f in findings} == {"0_ds_config.json", "1_ds_config.json",
                                                               "2_ds_config.json"}


def test_stdin(capsys, monkeypatch):
    import io

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b'{"train_micro_batch_size_per_gpu": 1,\n'
                                                                  b' "fp16": {"enabld": true}, "zero_optimization": '
                                                                  b'{"stage": 0}}')))
    code, out, _ = run(capsys, "-")
    assert code == 1
    assert out.startswith("<stdin>:2:11: error ZK100 unknown key 'enabld' in fp16")


def test_hjson_positions(capsys):
    path = data("broken.hjson")
    code, findings = run_json(capsys, "--target", "deepspeed", path)
    assert code == 1
    assert [(f["line"], f["column"], f["code"], f["key"]) for f in findings] == [
        (8, 7, "ZK301", "zero_optimization.offload_param.device"),
        (10, 5, "ZK100", "zero_optimization.overlap_com"),
    ]


def test_key_positions_and_duplicates():
    doc = load_file(BROKEN)
    assert doc.positions[("zero_optimization", "offload_optimizer", "ratio")] == (13, 45)
    assert doc.where(("zero_optimization", "offload_param", "nvme_path")) == (12, 5)  # missing key: its section


# ---------------------------------------------------------------- Accelerate YAML


def test_accelerate_yaml_with_deepspeed_config_file(capsys):
    code, findings = run_json(capsys, data("accelerate_with_file.yaml"))
    assert code == 1
    yaml_side = [(f["line"], f["code"], f["key"]) for f in findings if f["path"].endswith(".yaml")]
    # run from elsewhere than the YAML's directory: Accelerate would open the relative path from here (ZK602)
    assert yaml_side == [(4, "ZK602", "deepspeed_config.deepspeed_config_file"),
                         (5, "ZK601", "deepspeed_config.zero_stage"), (7, "ZK601", "mixed_precision")]
    child = [(f["line"], f["code"], f["key"]) for f in findings if f["path"].endswith("accelerate_ds_config.json")]
    assert child == [(7, "ZK303", "zero_optimization.offload_param.device"),
                     # the YAML sets no zero3_save_16bit_model: the plugin fills its "auto" with false
                     (8, "ZK503", "zero_optimization.stage3_gather_16bit_weights_on_model_save"),
                     (10, "ZK501", "optimizer.params.betas")]


def test_accelerate_yaml_fields_become_a_ds_config(capsys):
    code, findings = run_json(capsys, data("accelerate_fields.yaml"))
    assert code == 1
    assert [(f["line"], f["column"], f["code"], f["key"]) for f in findings] == [
        (6, 3, "ZK301", "deepspeed_config.offload_param_device"),
        (7, 3, "ZK100", "deepspeed_config.offload_optimzer_nvme_path"),
    ]


def test_a_relative_deepspeed_config_file_is_opened_from_where_accelerate_runs(capsys, tmp_path, monkeypatch):
    """transformers' HfDeepSpeedConfig opens deepspeed_config_file as given, so from the directory `accelerate
    launch` runs in; lint reads it next to the YAML, and warns where the two differ."""
    sub = tmp_path / "configs"
    sub.mkdir()
    write(sub, "ds.json", json.dumps({"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": "auto"}))
    yaml = write(sub, "acc.yaml", "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: ds.json\n")
    monkeypatch.chdir(tmp_path)
    code, findings = run_json(capsys, yaml)
    assert code == 0 and [(f["line"], f["code"], f["severity"]) for f in findings] == [(3, "ZK602", "warning")]
    assert "./ds.json, where there is no such file" in findings[0]["message"]
    assert "launch from configs" in findings[0]["message"]
    write(tmp_path, "ds.json", "{}")  # a file of that name here: the one Accelerate would read
    assert "./ds.json, which exists" in run_json(capsys, yaml)[1][0]["message"]
    monkeypatch.chdir(sub)  # launched next to the YAML: both read the same file
    assert run_json(capsys, "acc.yaml") == (0, [])
    ds = pytest.importorskip("transformers.integrations.deepspeed")
    assert ds.HfDeepSpeedConfig("ds.json").config["zero_optimization"] == {"stage": 2}  # next to the YAML: its own
    monkeypatch.chdir(tmp_path)
    assert ds.HfDeepSpeedConfig("ds.json").config == {}  # launched from above it: this directory's file, not the YAML's


def test_accelerate_yaml_nvme_without_path(capsys, tmp_path):
    path = write(tmp_path, "acc.yaml", "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n"
                 "  offload_param_device: nvme\n  zero3_save_16bit_model: true\n")
    assert run_json(capsys, path)[0] == 1
    _, findings = run_json(capsys, path)
    assert [(f["line"], f["code"], f["key"]) for f in findings] == [
        (4, "ZK303", "deepspeed_config.offload_param_device")]
    assert "nvme_path is \"none\"" in findings[0]["message"]  # Accelerate's default for a missing path


def test_accelerate_really_refuses_yaml_fields_next_to_a_config_file(monkeypatch):
    pytest.importorskip("accelerate")
    from accelerate.utils import DeepSpeedPlugin

    # accelerate launch passes the YAML's deepspeed_config keys (and mixed_precision) in this variable
    monkeypatch.setenv("ACCELERATE_CONFIG_DS_FIELDS", "deepspeed_config_file,zero_stage,zero3_init_flag")
    with pytest.raises(ValueError, match="following accelerate config variables will be ignored"):
        DeepSpeedPlugin(hf_ds_config=data("accelerate_ds_config.json"))
    monkeypatch.setenv("ACCELERATE_CONFIG_DS_FIELDS", "deepspeed_config_file,zero3_init_flag")
    DeepSpeedPlugin(hf_ds_config=data("accelerate_ds_config.json"))


def test_accelerate_launch_does_not_know_the_misspelled_yaml_key():
    pytest.importorskip("accelerate")
    from accelerate.commands.launch import launch_command_parser

    from zerokit.lint.accelerate import YAML_DS_KEYS

    dests = {a.dest for a in launch_command_parser()._actions}
    assert set(YAML_DS_KEYS) <= dests
    assert "offload_optimzer_nvme_path" not in dests


def test_a_yaml_that_is_no_accelerate_config_is_linted_as_the_ds_config_it_would_be(capsys, tmp_path):
    """Before, any YAML counted as an Accelerate config, and one with none of its keys linted clean (exit 0). Now it
    gets what a JSON file with the same keys gets, and ZK107 where HF would json.load it."""
    as_yaml = write(tmp_path, "y.yaml", "a: &a [1, 2]\nb: *a\n")
    as_json = write(tmp_path, "y.json", json.dumps({"a": [1, 2], "b": [1, 2]}))
    for target in ("trainer", "accelerate", "deepspeed"):
        code, from_yaml = run_json(capsys, "--target", target, as_yaml)
        json_code, from_json = run_json(capsys, "--target", target, as_json)
        assert code == json_code == 1
        yaml_codes = sorted((f["code"], f["key"]) for f in from_yaml if f["code"] != "ZK107")
        assert yaml_codes == sorted((f["code"], f["key"]) for f in from_json)
        assert ("ZK100", "a") in yaml_codes and ("ZK100", "b") in yaml_codes
        assert [f["line"] for f in from_yaml if f["code"] == "ZK100"] == [1, 2]
        assert [f["code"] for f in from_yaml if f["code"] == "ZK107"] == ([] if target == "deepspeed" else ["ZK107"])
    # keys YAML writes as other types are linted as json.dumps would write them; still no traceback
    odd = write(tmp_path, "odd.yml", "2020-01-01: x\n7: !!binary aGk=\ns: !!set {a, b}\nzero_optimization: {stage: 2}\n")
    code, findings = run_json(capsys, "--target", "deepspeed", odd)
    assert code == 1 and {f["key"] for f in findings if f["code"] == "ZK100"} == {"2020-01-01", "7", "s"}
    # a YAML ds_config written in JSON syntax is what json.load reads: no ZK107
    flow = write(tmp_path, "flow.yaml", json.dumps({"train_micro_batch_size_per_gpu": 1,
                                                    "zero_optimization": {"stage": 2}}))
    assert run_json(capsys, "--target", "trainer", flow) == (0, [])
    hf = pytest.importorskip("transformers.integrations.deepspeed")
    with pytest.raises(json.JSONDecodeError):
        hf.HfDeepSpeedConfig(as_yaml)
    assert hf.HfDeepSpeedConfig(flow).config["zero_optimization"] == {"stage": 2}


def test_an_unknown_key_in_an_accelerate_config_is_refused_by_accelerate(capsys, tmp_path):
    path = write(tmp_path, "acc.yaml", "distributed_type: DEEPSPEED\nnum_proceses: 2\ndeepspeed_config:\n"
                 "  zero_stage: 2\n")
    code, findings = run_json(capsys, path)
    assert code == 1 and [(f["line"], f["code"], f["key"], f["suggestion"]) for f in findings] == [
        (2, "ZK100", "num_proceses", "num_processes")]
    config_args = pytest.importorskip("accelerate.commands.config.config_args")
    with pytest.raises(ValueError, match=r"had unknown keys \(\['num_proceses'\]\)"):
        config_args.load_config_from_file(path)
    fixed = write(tmp_path, "fixed.yaml", "distributed_type: DEEPSPEED\nnum_processes: 2\nfp16: false\n"
                  "deepspeed_config:\n  zero_stage: 2\n")  # fp16: the old key Accelerate still converts
    assert run_json(capsys, fixed) == (0, [])
    assert config_args.load_config_from_file(fixed).num_processes == 2
    import dataclasses

    from zerokit.lint.accelerate import CONFIG_KEYS

    fields = {f.name for c in (config_args.ClusterConfig, config_args.SageMakerConfig) for f in dataclasses.fields(c)}
    assert CONFIG_KEYS == fields | {"fp16", "dynamo_backend"}


# ---------------------------------------------------------------- what zerokit ships and emits lints clean


def shipped_configs() -> list[str]:
    found = []
    for root, _, files in os.walk(EXAMPLES):
        for name in sorted(files):
            if fnmatch.fnmatch(name, "*ds_config*.json") or name.endswith((".yaml", ".yml")) and "accelerate" in name:
                found.append(os.path.join(root, name))
    return found


def test_examples_hold_ds_configs():
    assert len(shipped_configs()) >= 2


@pytest.mark.parametrize("path", shipped_configs(), ids=lambda p: os.path.relpath(p, EXAMPLES))
def test_every_example_config_lints_clean(capsys, monkeypatch, path):
    monkeypatch.chdir(os.path.dirname(path))  # where its comments say to launch it (a relative deepspeed_config_file)
    code, findings = run_json(capsys, "--strict", "--gpu-memory", "80GB", path)  # world size: the example's own
    assert (code, findings) == (0, [])


@pytest.mark.parametrize("target", ["trainer", "accelerate", "deepspeed"])
@pytest.mark.parametrize(("model", "gpu", "extra"), [
    ("7B", "a100-80gb", []), ("70B", "a100-80gb", []), ("1B", "v100-32gb", []),
    ("70B", "v100-32gb", ["--offload-param", "nvme", "--nvme-path", "/local_nvme"]),
])
def test_every_plan_output_lints_clean(capsys, tmp_path, target, model, gpu, extra):
    pytest.importorskip("zerokit.planner.engine")
    code = main(["plan", "--model", model, "--gpu", gpu, "--gpus-per-node", "8", "--seq-len", "4096",
                 "--target", target, "--format", "json", *extra])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    path = write(tmp_path, "ds_config.json", json.dumps(json.loads(out)["ds_config"], indent=2))
    mem = "80GB" if gpu.startswith("a100") else "32GB"
    result = run_json(capsys, "--strict", "--target", target, "--world-size", "8", "--gpu-memory", mem, path)
    assert result == (0, [])


# ---------------------------------------------------------------- the light path


def test_lint_never_imports_torch_deepspeed_transformers(tmp_path):
    code = ("import sys; from zerokit.cli import main; rc = main(['lint', '--format', 'json', sys.argv[1]]); "
            "heavy = sorted({m.split('.')[0] for m in sys.modules} & "
            "{'torch', 'deepspeed', 'transformers', 'accelerate', 'jsonschema', 'pydantic', 'numpy'}); "
            "print(rc, heavy, file=sys.stderr)")
    for path in (BROKEN, data("accelerate_with_file.yaml"), data("broken.hjson")):
        proc = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, timeout=60,
                              check=False, cwd=ROOT)
        assert proc.stderr.strip().splitlines()[-1] in ("1 []", "2 []"), proc.stderr


def test_cli_subprocess_exit_codes_and_cold_start(tmp_path):
    clean = os.path.join(EXAMPLES, "configs", "zero2_ds_config.json")
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "zerokit", "lint", clean], capture_output=True, text=True,
                              timeout=60, check=False)
        best = min(best, time.perf_counter() - t0)
        assert proc.returncode == 0 and proc.stdout == ""
    assert best < 2.0, f"cold start {best:.2f}s"  # measured ~0.2s; generous for loaded CI machines
    proc = subprocess.run([sys.executable, "-m", "zerokit", "lint", BROKEN, data("garbage.bin")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "garbage.bin:1:1: error ZK001 binary file" in proc.stdout


def test_ci_workflow_installs_the_light_package_and_lints_with_github_format():
    import yaml

    with open(os.path.join(EXAMPLES, "ci", "lint-ds-configs.yml"), encoding="utf-8") as f:
        workflow = yaml.safe_load(f)
    steps = [s.get("run", "") for s in workflow["jobs"]["zerokit-lint"]["steps"]]
    # The workflow is copied into the user's repository, where `pip install .` (as it had) installs their project.
    assert "pip install zerokit" in steps and "pip install ." not in steps
    [lint_step] = [s for s in steps if s.startswith("zerokit lint")]
    assert "--format github" in lint_step


def test_pre_commit_hooks_match_the_shipped_configs():
    import re

    import yaml

    with open(os.path.join(ROOT, ".pre-commit-hooks.yaml"), encoding="utf-8") as f:
        hooks = {h["id"]: h for h in yaml.safe_load(f)}
    assert hooks["zerokit-lint"]["entry"] == "zerokit lint"
    names = [os.path.relpath(p, ROOT) for p in shipped_configs()]
    matched = [n for n in names if any(re.search(h["files"], n) for h in hooks.values())]
    assert matched == names
    assert not re.search(hooks["zerokit-lint"]["files"], "examples/models/tiny-llama/config.json")


def test_accelerate_yaml_field_types_as_accelerate_launch_hands_them_on(capsys, tmp_path, monkeypatch):
    """accelerate launch passes each field as str(value) in an environment variable; DeepSpeedPlugin reads
    gradient_accumulation_steps back with int() only when all digits, and compares zero3_save_16bit_model with
    "true": a list stays the string "[1]", and "false" is false (was bool("false"), true, hiding ZK309)."""
    pytest.importorskip("accelerate")
    from accelerate.utils import DeepSpeedPlugin

    path = write(tmp_path, "acc.yaml", "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n"
                 "  gradient_accumulation_steps: [1]\n  gradient_clipping: .inf\n  offload_param_nvme_path: 5\n"
                 "  zero3_save_16bit_model: 'false'\n")
    code, findings = run_json(capsys, path)
    assert code == 1
    assert [(f["line"], f["code"], f["key"]) for f in findings] == [
        (3, "ZK309", "deepspeed_config.zero_stage"),  # ZeRO-3 that saves no 16-bit weights
        (4, "ZK103", "deepspeed_config.gradient_accumulation_steps"), (5, "ZK103", "deepspeed_config.gradient_clipping"),
        (6, "ZK103", "deepspeed_config.offload_param_nvme_path")]
    monkeypatch.setenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", str([1]))
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL", "false")
    plugin = DeepSpeedPlugin(zero_stage=3)
    assert plugin.gradient_accumulation_steps == "[1]" and plugin.zero3_save_16bit_model is False


def test_values_no_float_holds_are_findings_not_crashes(capsys, tmp_path):
    """A 310-digit integer went through math.isnan, and 1e308 buckets through 4.5 x float: OverflowError, exit 70."""
    huge = write(tmp_path, "huge.json", '{"zero_optimization": {"stage": 0}, "train_micro_batch_size_per_gpu": 1'
                 + "0" * 309 + "}")
    assert run(capsys, huge)[0] == 0
    buckets = write(tmp_path, "buckets.json", '{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2, '
                    '"overlap_comm": true, "reduce_bucket_size": 1e308, "allgather_bucket_size": 1e308}}')
    code, findings = run_json(capsys, "--gpu-memory", "80GB", buckets)
    assert [(f["code"], f["key"]) for f in findings] == [("ZK314", "zero_optimization.reduce_bucket_size"),
                                                         ("ZK314", "zero_optimization.allgather_bucket_size")]
    assert "1e+308 is no bucket size" in findings[0]["message"]
    ints = write(tmp_path, "ints.json", '{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2, '
                 '"overlap_comm": true, "reduce_bucket_size": 1' + "0" * 400 + ', "allgather_bucket_size": 1'
                 + "0" * 308 + "}}")
    code, findings = run_json(capsys, "--gpu-memory", "80GB", ints)
    assert [(f["code"], f["key"]) for f in findings] == [("ZK314", "zero_optimization.reduce_bucket_size")]
    assert "2 x 1.00e+400 x 4 bytes = 8.00e+400 bytes" in findings[0]["message"]
    gather = write(tmp_path, "gather.json", '{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2, '
                   '"overlap_comm": true, "allgather_bucket_size": 1' + "0" * 308 + "}}")
    code, findings = run_json(capsys, "--gpu-memory", "80GB", gather)
    assert [(f["code"], f["key"]) for f in findings] == [("ZK307", "zero_optimization.allgather_bucket_size")]
    assert "309-digit number of elements" in findings[0]["message"]
    nul = write(tmp_path, "acc.yaml", 'distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: "a\\0b"\n')
    code, findings = run_json(capsys, nul)
    assert code == 2 and findings[0]["code"] == "ZK001" and "has a NUL byte" in findings[0]["message"]


def test_gpu_memory_without_a_unit_is_refused_as_plan_refuses_it(capsys):
    code, out, err = run(capsys, "--gpu-memory", "80", BROKEN)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "--gpu-memory '80' is 80 bytes, below 1 GiB: a plain number is a byte count; give the unit, e.g. 80GB" in err


def test_a_newline_in_a_key_keeps_one_finding_on_one_line(capsys, tmp_path):
    path = write(tmp_path, "nl.json", '{"bad\\nkey": 1, "zero_optimization": {"stage": 0}, '
                 '"train_micro_batch_size_per_gpu": "auto"}')
    code, out, _ = run(capsys, path)
    line = f"{path}:1:2: error ZK100 unknown key 'bad\\nkey' at the top level: DeepSpeed silently ignores it; "
    line += "correct its name or delete it"
    assert code == 1 and out.splitlines() == [line]


# ---------------------------------------------------------------- bad input: bounds, syntax messages, paths


@pytest.mark.parametrize("value", ["1000000000000000000000000000000", "1000001", "1" + "0" * 5000])
def test_world_size_past_a_million_ranks_is_bad_input(capsys, value):
    """--world-size 10^30 used to lint clean: no DeepSpeed job has a million ranks, so the value is a typo."""
    code, out, err = run(capsys, "--world-size", value, BROKEN)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("zerokit lint: error: --world-size '") and err.rstrip().endswith("is too large; at most 10^6")
    assert len(err) < 200  # a 5000-digit value is shortened, not echoed
    assert run(capsys, "--world-size", "1000000", BROKEN)[0] == 1  # the bound itself is fine: the findings decide


def test_gpu_memory_past_any_gpu_is_bad_input(capsys):
    code, out, err = run(capsys, "--gpu-memory", "2TB", BROKEN)
    assert code == 2 and out == ""
    assert err == ("zerokit lint: error: --gpu-memory '2TB' is more than a GPU has; at most 1TiB (the largest GPU has "
                   "288 GB): give the memory of one GPU, e.g. 80GB\n")
    assert run(capsys, "--gpu-memory", "1TiB", BROKEN)[0] == 1


def test_an_absurd_reduce_bucket_is_an_error_not_clean(capsys, tmp_path):
    """The config from the bug report linted as "no problems"; DeepSpeed refuses 1e30 at initialize."""
    path = write(tmp_path, "ds_config.json", '{"zero_optimization": {"stage": 2, "reduce_bucket_size": 1e30}, '
                 '"train_micro_batch_size_per_gpu": 1}')
    code, out, err = run(capsys, path)
    assert code == 1 and err == "1 file checked: 1 error, 0 warnings\n"
    assert out.startswith(f"{path}:1:36: error ZK314 zero_optimization.reduce_bucket_size 1e+30 is no bucket size")
    assert out.rstrip().endswith('write 5e8 (DeepSpeed\'s default), or "auto" (the HF Trainer fills it from the '
                                 "model's hidden_size)")


@pytest.mark.parametrize(("name", "text", "position", "message"), [
    ("tab.json", '{"zero_optimization": {"stage": 0},\n "x": "a\tb"}', "2:9",
     ("Invalid control character (a raw tab) inside a string at line 2, column 9: JSON strings cannot hold one; "
      "escape it as \\t, or remove it")),
    ("newline.json", '{"x": "a\nb"}', "1:9",
     ("Invalid control character (a raw line break) inside a string at line 1, column 9: JSON strings cannot hold "
      "one; escape it as \\n, or remove it")),
    ("soh.hjson", '{"x": "a\x01b"}', "1:9",  # hjson's decoder: `%r` left unformatted, the offset one past
     ("Invalid control character (a raw U+0001) inside a string at line 1, column 9: JSON strings cannot hold one; "
      "escape it as \\u0001, or remove it")),
    ("open.json", '{"x": "ab}', "1:7", ("Unterminated string starting at line 1, column 7: the file ends before "
      'its closing "; add it')),
    ("escape.hjson", '{"x": "a\\qb"}', "1:10", "Invalid \\X escape sequence 'q'"),
])
def test_syntax_errors_say_where_and_how_to_fix(capsys, tmp_path, name, text, position, message):
    """json's "Invalid control character at" and "Unterminated string starting at" leave the position to str(e);
    the finding used to end at "at"."""
    path = write(tmp_path, name, text)
    code, out, _ = run(capsys, path)
    assert code == 2 and out == f"{path}:{position}: error ZK001 syntax error: {message}\n"


def test_a_newline_in_a_path_keeps_every_message_on_one_line(capsys, tmp_path):
    """A file name is the user's: with a newline (or a vertical tab, a line break to str.splitlines) in it every
    format still gives one line per finding (text and github escape it; json holds it as JSON does)."""
    odd = str(tmp_path / "a\nb\x0bc.json")
    for fmt in ("text", "github"):
        code, out, _ = run(capsys, "--format", fmt, odd)
        assert code == 2 and len(out.splitlines()) == 1, out
    ref = write(tmp_path, "acc.yaml", 'distributed_type: DEEPSPEED\ndeepspeed_config:\n'
                '  deepspeed_config_file: "x\\ny.json"\n')
    shown = os.path.relpath(tmp_path / "x\ny.json")  # the name as the YAML wrote it, relative to here
    code, findings = run_json(capsys, ref)
    [f] = [f for f in findings if f["code"] == "ZK001"]
    assert code == 2 and f["message"] == f"deepspeed_config_file {shown}: no such file"
    code, out, _ = run(capsys, ref)
    escaped = shown.replace("\n", "\\n")
    assert code == 2 and out.endswith(f"error ZK001 deepspeed_config_file {escaped}: no such file\n"), out
    from zerokit.lint.loader import LoadError

    assert str(LoadError("a\nb.json", 1, 2, "not UTF-8\ttext")) == "a\\nb.json:1:2: not UTF-8\\ttext"


# What the suggestion test below sets, a few at a time, on the example configs: values that set off the rules with
# suggestions (a stage, offload devices, buckets, precision, batch sizes, the optimizer and scheduler).
SUGGESTION_MUTATIONS = (
    (("zero_optimization", "stage"), (0, 1, 2, 3, "3", "auto")),
    (("zero_optimization", "offload_param", "device"), ("cpu", "nvme", "none")),
    (("zero_optimization", "offload_optimizer", "device"), ("cpu", "nvme", "none")),
    (("zero_optimization", "overlap_comm"), (True, False)),
    (("zero_optimization", "reduce_bucket_size"), (5e8, 5e9, "auto", 1e13)),
    (("zero_optimization", "allgather_bucket_size"), (5e8, 5e9)),
    (("zero_optimization", "stage3_prefetch_bucket_size"), (5e8, 5e9)),
    (("zero_optimization", "stage3_gather_16bit_weights_on_model_save"), (True, False)),
    (("fp16", "enabled"), (True, False, "auto", "true")),
    (("fp16", "loss_scale"), (0, 1, 128)),
    (("fp16", "initial_scale_power"), (16, 64)),
    (("fp16", "hysteresis"), (0, 2)),
    (("bf16", "enabled"), (True, False, "auto")),
    (("train_batch_size",), (32, 33, "auto", 7)),
    (("train_micro_batch_size_per_gpu",), (1, 2, 3, "auto")),
    (("gradient_accumulation_steps",), (1, 2, 5, "auto")),
    (("gradient_clipping",), (1.0, -1, "auto")),
    (("optimizer", "type"), ("Adam", "AdamW", "OneBitAdam", "Lamb", "adagrad")),
    (("optimizer", "params", "lr"), (1e-4, "auto", 0)),
    (("scheduler", "type"), ("WarmupLR", "WarmupDecayLR", "OneCycle")),
    (("zero_allow_untested_optimizer",), (True, False)),
    (("communication_data_type",), ("fp16", "bf16", "fp32")),
    (("gradient_predivide_factor",), (1.0, 2.0)),
    (("prescale_gradients",), (True,)),
)


def _set(cfg: dict, path: tuple, value) -> None:
    for key in path[:-1]:
        if not isinstance(cfg.get(key), dict):
            cfg[key] = {}
        cfg = cfg[key]
    cfg[path[-1]] = value


def _suggested_value(f, node: dict | None):
    """The finding's suggestion as a value of its key (a JSON number, boolean or null; a string of the key's enum),
    or None where it names a key (the corrected name, or the key to set: `zero_optimization.stage`)."""
    from zerokit.lint.schema import value_node

    try:
        return (json.loads(f.suggestion),)
    except ValueError:
        pass
    return (f.suggestion,) if node is not None and f.suggestion in value_node(node).get("enum", ()) else None


def test_a_findings_suggested_value_fixes_its_key():
    """CONTRACT: `suggestion` is the corrected key or value of the finding's `key`, so a tool may apply a value
    suggestion to the key. ZK301 suggested the stage's "3" for offload_param.device, ZK307 a bucket size for
    overlap_comm, ZK208 loss_scale's "0" for the keys a static scale ignores. Over seeded mutations of the example
    configs, every value suggested, set on its key, clears the finding and is of the key's type."""
    import copy
    import random
    from pathlib import Path

    from zerokit.lint.engine import lint_text
    from zerokit.lint.rules import Context
    from zerokit.lint.schema import node_at

    bases = [json.loads(Path(ROOT, "examples", "configs", name).read_text(encoding="utf-8")) for name in
             ("zero3_offload_ds_config.json", "zero2_ds_config.json", "accelerate_zero3_ds_config.json")]
    bases.append({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
                  "fp16": {"enabled": True, "loss_scale": 0, "loss_scale_window": 1000, "hysteresis": 2},
                  "zero_optimization": {"stage": 2}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}})
    rng = random.Random(2026)
    checked, wrong = set(), []
    for _ in range(600):
        cfg = copy.deepcopy(rng.choice(bases))
        for path, values in rng.sample(SUGGESTION_MUTATIONS, rng.randint(1, 5)):
            _set(cfg, path, rng.choice(values))
        ctx = Context(target=rng.choice(["trainer", "accelerate", "deepspeed"]), world_size=rng.choice([None, 1, 8]),
                      gpu_memory=rng.choice([None, 16 * 10**9, 80 * 10**9]))
        for f in lint_text(json.dumps(cfg, indent=2), ctx):
            path = tuple(f.key.split("."))
            value = _suggested_value(f, node_at(path)) if f.suggestion is not None and f.key else None
            if value is None:
                continue
            checked.add(f.code)
            fixed = copy.deepcopy(cfg)
            _set(fixed, path, value[0])
            # the same finding, or a schema one (a wrong type or value: ZK1xx), at the key
            if any(g.key == f.key and (g.code == f.code or g.code.startswith("ZK1")) for g in
                   lint_text(json.dumps(fixed), ctx)):
                wrong.append((f.code, f.key, f.suggestion, f.message[:100]))
    assert not wrong, "\n".join(map(str, sorted(set(wrong))[:20]))
    assert {"ZK301", "ZK307"} <= checked and len(checked) >= 10, checked  # most rules that suggest one

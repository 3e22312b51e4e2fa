"""The README's examples are what zerokit prints: its plan excerpt, its JSON excerpt and its Python session.

A model or preset change that moves a figure fails here until the README shows the new one (the From Python
example had drifted to another decision before this test existed)."""

from __future__ import annotations

import doctest
import json
import os
import re
import shlex
import sys
from pathlib import Path

import pytest

from zerokit.cli import main

pytest.importorskip("zerokit.planner.engine")

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
PLAN = ["plan", "--model", "llama-2-7b", "--gpu", "h100-80gb", "--gpus-per-node", "8", "--seq-len", "4096"]


def _block_after(line: str) -> str:
    """The text of the README's code block from the line after `line` to the block's end."""
    start = README.index(line + "\n") + len(line) + 1
    return README[start:README.index("\n```", start)]


def _run(capsys, *args: str) -> str:
    code = main(list(args))
    out = capsys.readouterr().out
    assert code == 0
    return out


def test_the_plan_excerpt_is_what_zerokit_plan_prints(capsys):
    assert _block_after("$ zerokit " + " ".join(PLAN)) == _run(capsys, *PLAN).rstrip("\n")


def test_the_speed_line_with_a_token_budget_is_what_zerokit_plan_prints(capsys):
    args = [*PLAN, "--global-batch-tokens", "1M", "--train-tokens", "10B"]
    shown = _block_after("$ zerokit " + " ".join(args) + " | grep Speed").splitlines()[0]
    assert shown == next(line for line in _run(capsys, *args).splitlines() if line.startswith("Speed"))


def test_the_json_excerpts_figures_are_the_plans(capsys):
    shown = _block_after("```json").replace("...", "0")
    doc = json.loads(_run(capsys, *PLAN, "--format", "json"))
    per_gpu = json.loads(re.search(r'"per_gpu": (\{[^}]*\})', shown).group(1))
    assert per_gpu == doc["memory"]["per_gpu"]
    for key in ("gpu_capacity", "phases", "peak_phase", "per_node_cpu", "nvme", "activations_source"):
        value = json.loads(re.search(rf'"{key}": ("[^"]*"|\{{[^}}]*\}}|\d+)', shown).group(1))
        assert value == doc["memory"][key], key
    perf = json.loads(re.search(r'"performance": (\{[^}]*\})', shown).group(1))
    perf.pop("0")  # the excerpt's "...": "..."
    for key, value in perf.items():
        actual = doc["performance"][key]
        assert value == actual if value is None else value == pytest.approx(actual, abs=0.051 if key == "tokens_per_s"
                                                                            else 0.0005), key
    decision = json.loads(re.search(r'"decision": (\{.*?\}),\n', shown, re.DOTALL).group(1).replace(", 0}", "}"))
    assert decision.items() <= doc["decision"].items()


def test_the_from_python_session_runs_as_shown():
    block = README[README.index("## From Python"):]
    block = block[block.index("```python\n") + 10:block.index("\n```", block.index("```python\n"))]
    test = doctest.DocTestParser().get_doctest(block, {}, "README From Python", "README.md", 0)
    result = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS).run(test)
    assert result.failed == 0 and result.attempted >= 5


# ---------------------------------------------------------------- the README's shell sessions, run as shown

# Each session is the README block that starts with this command; `tmp` runs it in a scratch directory shown as
# /tmp/zkr (a ds_config.json and a train.py there), `repo` in the checkout (the lint examples' paths).
SESSIONS = {
    "plan-exit-codes": ("$ zerokit plan --model llama-2-7b --gpu h100-80gb --gpus-per-node 8 --seq-len 4096 -o", "tmp"),
    "lint": ("$ zerokit lint --world-size 8 --gpu-memory 24GB tests/data/lint/broken_ds_config.json", "repo"),
    "lint-malformed": ("$ zerokit lint tests/data/lint/malformed.json", "repo"),
    "schema": ("$ zerokit schema | head -8", "repo"),
    "launch-one-node": ("$ zerokit launch --config ds_config.json --gpus-per-node 2 --dry-run", "tmp"),
    "launch-pdsh": ("$ zerokit launch --config ds_config.json --hosts node1:8,node2:8 --master-addr node1 --env",
                    "tmp"),
    "launch-no-ssh": ("$ zerokit launch --config ds_config.json --hosts node1:8,node2:8 --master-addr node1 --no-ssh",
                      "tmp"),
    "launch-sbatch": ("$ zerokit launch --config ds_config.json --hosts gpu-a,gpu-b", "tmp"),
    "launch-hostile-host": ("$ zerokit launch --hosts 'a;rm -rf ~:8'", "tmp"),
}
README_CWD = "/tmp/zkr"
README_RUNNER = "/work/main/.venv/bin/deepspeed"
_EXIT = re.compile(r"(?:^|\s{2,})# exit(?: code)? (\d+)\b.*$")


def _session_block(first: str) -> list[str]:
    start = README.index(first)
    start = README.rindex("\n", 0, start) + 1
    return README[start:README.index("\n```", start)].splitlines()


def _steps(lines: list[str]) -> list[tuple[str, list[str], int | None]]:
    """(command, expected output lines, expected exit code or None) for each `$ ` line of a session."""
    steps: list[tuple[str, list[str], int | None]] = []
    i = 0
    while i < len(lines):
        assert lines[i].startswith("$ "), lines[i]
        command = lines[i][2:]
        while command.endswith("\\"):
            i += 1
            command = command[:-1] + " " + lines[i].strip()
        code, shown = None, []
        found = _EXIT.search(command)
        if found:
            code, command = int(found.group(1)), command[:found.start()]
        i += 1
        while i < len(lines) and not lines[i].startswith("$ "):
            found = _EXIT.search(lines[i])
            if found:
                code = int(found.group(1))
                if found.start() > 0:
                    shown.append(lines[i][:found.start()])
            else:
                shown.append(lines[i])
            i += 1
        steps.append((command.strip(), shown, code))
    return steps


def _shell(capsys, command: str, tmp: Path) -> tuple[str, int]:
    """The output and exit code of one README command: `zerokit ...` in-process, with `| grep P` / `| head -N`
    applied to its stdout, or `grep -e P ... FILE`."""
    stages = [shlex.split(part) for part in command.split(" | ")]
    argv = stages[0]
    if argv[0] == "grep":
        patterns = [argv[k + 1] for k, a in enumerate(argv) if a == "-e"]
        text = Path(argv[-1]).read_text()
        out, code = "".join(line for line in text.splitlines(True) if any(p in line for p in patterns)), 0
    else:
        assert argv[0] == "zerokit", command
        code = main(argv[1:])
        captured = capsys.readouterr()
        out = captured.out
        for stage in stages[1:]:
            lines = out.splitlines(True)
            if stage[0] == "grep":
                out = "".join(line for line in lines if re.search(stage[1], line))
            elif stage[0] == "head":
                out = "".join(lines[:int(stage[1].lstrip("-"))])
            else:
                raise AssertionError(f"unsupported pipe in the README: {command}")
        out += captured.err
    out = out.replace(str(tmp), README_CWD)
    out = re.sub(r"(?<!\S)/\S*/deepspeed(?=\s)", README_RUNNER, out)
    return out, code


def _matches(shown: list[str], out: str) -> bool:
    """`out` is the lines shown, a `...` line standing for any lines."""
    pattern = "".join(r"(?:[^\n]*\n)*?" if line == "..." else re.escape(line.rstrip()) + r"[ \t]*\n" for line in shown)
    return re.fullmatch(pattern, out if out.endswith("\n") or not out else out + "\n") is not None


@pytest.mark.parametrize("name", list(SESSIONS))
def test_the_readme_shell_sessions_print_what_they_show(name, capsys, tmp_path, monkeypatch):
    first, where = SESSIONS[name]
    steps = _steps(_session_block(first))
    if name.startswith("launch"):
        from zerokit.commands.launch import runner_path

        if runner_path(required=False) == "deepspeed":
            pytest.skip("the deepspeed runner is not installed (zerokit[deepspeed])")
        monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.deepspeed_env of the user's in the output
        monkeypatch.delenv("DS_ENV_FILE", raising=False)
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if where == "tmp":
        monkeypatch.chdir(tmp_path)
        if name.startswith("launch"):
            assert main(["plan", "--model", "gpt2", "--gpu", "h100-80gb", "--seq-len", "512", "-o",
                         "ds_config.json"]) == 0
            Path("train.py").write_text("")
            capsys.readouterr()
    else:
        monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    for command, shown, code in steps:
        out, actual = _shell(capsys, command, tmp_path)
        assert _matches(shown, out), f"$ {command}\nREADME shows:\n" + "\n".join(shown) + f"\nzerokit prints:\n{out}"
        if code is not None:
            assert actual == code, command


def test_the_lint_rule_table_lists_every_code_lint_reports_and_counts_them():
    source = "".join(p.read_text() for p in (Path(__file__).resolve().parent.parent / "zerokit" / "lint").glob("*.py"))
    reported = set(re.findall(r'"(ZK\d{3})"', source))
    table = README[README.index("| code | severity | what |"):README.index("## `zerokit schema`")]
    assert set(re.findall(r"ZK\d{3}", table)) == reported
    # the intro names four (unknown keys, batch-size arithmetic, offload_param below stage 3, "auto") "and N more"
    assert f'nobody fills, and {len(reported) - 4} more rules' in README


def test_the_lora_stage_figures_are_the_plans(capsys):
    args = ["plan", "--model", "llama-2-70b", "--gpu", "a100-80gb", "--gpus-per-node", "8", "--seq-len", "2048",
            "--peft", "lora", "--micro-batch", "1", "--gradient-checkpointing", "on", "--format", "json"]
    total = {c["zero_stage"]: c["per_gpu_total"] for c in json.loads(_run(capsys, *args))["candidates"]
             if c["offload_optimizer"] == c["offload_param"] == "none"}
    shown = (f"micro-batch 1 with checkpointing: {total[2] / 1e9:.1f} GB per GPU at ZeRO-2, {total[3] / 1e9:.1f} GB "
             "at ZeRO-3;")
    assert shown in " ".join(README.split())


def _plan_json(capsys, *args: str) -> dict:
    return json.loads(_run(capsys, "plan", *args, "--format", "json"))


def test_how_the_planner_decides_quotes_the_plans(capsys):
    text = " ".join(README[README.index("## How the planner decides"):README.index("### Activation memory")].split())
    reasons = _plan_json(capsys, "--model", "llama-2-7b", "--gpu", "l40s", "--gpus-per-node", "8", "--seq-len",
                         "512")["reasons"]
    quote = re.search(r'512 tokens: "([^"]*)"', text).group(1)
    assert any(quote in reason for reason in reasons), quote
    # the global batch rounded to the fastest multiple within 5%, not the nearest
    rounded = _plan_json(capsys, "--model", "llama-2-70b", "--gpu", "h100-80gb", "--gpus-per-node", "8", "--nodes", "4",
                         "--seq-len", "4096", "--global-batch-tokens", "4M")
    assert rounded["decision"]["train_batch_size"] == 960 and rounded["decision"]["micro_batch_size"] == 5
    nearest = _plan_json(capsys, "--model", "llama-2-70b", "--gpu", "h100-80gb", "--gpus-per-node", "8", "--nodes", "4",
                         "--seq-len", "4096", "--global-batch", "992")
    assert nearest["decision"]["micro_batch_size"] == 1
    assert (f"micro-batch 1 and spends most of each step gathering parameters ({nearest['performance']['tokens_per_s']:,.0f}"
            f" tokens/s predicted); 960, 30 per GPU, trains at micro-batch 5 "
            f"({rounded['performance']['tokens_per_s']:,.0f})") in text
    # the tie that goes to the setup with headroom
    tie = _plan_json(capsys, "--model", "phi-3-medium", "--gpu", "v100-32gb", "--gpus-per-node", "8", "--seq-len",
                     "2048")
    fits = {(c["offload_optimizer"], c["offload_param"]): c for c in tie["candidates"] if c["zero_stage"] == 3}
    full, opt = fits["cpu", "cpu"], fits["cpu", "none"]
    capacity = tie["memory"]["gpu_capacity"]
    assert (tie["decision"]["offload_param"], tie["decision"]["offload_optimizer"]) == ("cpu", "cpu")
    assert (f"ZeRO-3 with full offload at {full['per_gpu_total'] / capacity:.1%}, {full['step_time_s']:.2f} s a step, "
            f"over optimizer offload alone at {opt['per_gpu_total'] / capacity:.1%}, {opt['step_time_s']:.2f} s") in text
    # an explicit micro-batch rounds the global batch to a multiple of GPUs x micro-batch, however far
    forced = _plan_json(capsys, "--model", "llama-2-7b", "--gpu", "h100-80gb", "--gpus-per-node", "8", "--seq-len",
                        "1024", "--micro-batch", "3", "--global-batch", "16")
    assert forced["decision"]["train_batch_size"] == 24 and any("+50.0%" in w for w in forced["warnings"])
    assert "(`--micro-batch 3 --global-batch 16` on 8 GPUs trains 24, and the warning says +50.0%)" in text


def test_the_demo_plan_is_what_examples_demo_sh_plans(capsys, monkeypatch):
    root = Path(__file__).resolve().parent.parent
    script = (root / "examples" / "demo.sh").read_text()
    command = re.search(r"^zerokit plan (.*?)(?<!\\)$", script, re.MULTILINE | re.DOTALL).group(1)
    args = shlex.split(command.replace("\\\n", " ").replace('"$MODEL"', "examples/models/tiny-llama")
                       .replace('"$OUT/ds_config.json"', "ds_config.json"))
    args = [a for a in args if a != "--force"]
    del args[args.index("-o"):args.index("-o") + 2]
    monkeypatch.chdir(root)
    start = README.index("== 1/4 zerokit plan")
    shown = README[README.index("\n", start) + 1:README.index("\nds_config (trainer) written to demo-out", start)]
    assert _run(capsys, "plan", *args).rstrip("\n") == shown

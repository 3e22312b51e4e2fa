"""The README's examples are what zerokit prints: its plan excerpt, its JSON excerpt and its Python session.

A model or preset change that moves a figure fails here until the README shows the new one (the From Python
example had drifted to another decision before this test existed)."""

from __future__ import annotations

import doctest
import json
import re
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

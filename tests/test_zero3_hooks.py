"""What the time model counts for ZeRO-3's hooks against the modules a real ZeRO-3 engine hooks
(`benchmarks/zero3_hooks.py`): one rank on this CPU, full training and LoRA, about 20 s."""

from __future__ import annotations

import pytest
from _support import benchmark, free_port

pytest.importorskip("deepspeed")
pytest.importorskip("peft")
pytestmark = pytest.mark.slow


def test_the_models_hook_count_is_the_parameter_owning_modules_a_real_engine_hooks():
    """The model prices ZeRO-3's hooks per parameter-owning module and pass: the base model's own, and A and B of
    each adapted linear. A real engine's forward hooks those (39 and 95 here) and, beside them, the modules that own
    nothing (19 in full training; with LoRA also PEFT's wrapper and dropout of each of the 28 adapted linears and
    its two model wrappers: 77)."""
    from zerokit.models.lora import lora_parameters
    from zerokit.perf.flops import model_flops

    hooks = benchmark("zero3_hooks")
    config = {"model_type": "llama", **hooks.MODEL}
    adapted = sum(copies for _, _, copies in lora_parameters(config, 8, "all-linear").linears)
    full, lora = hooks.run("full", free_port()), hooks.run("lora", free_port())
    assert adapted == 28
    assert full["owning_modules"] == model_flops(config).parameter_modules == 39
    assert lora["owning_modules"] == 39 + 2 * adapted
    assert (full["forward_modules"], lora["forward_modules"]) == (58, 58 + 4 * adapted + 2)
    assert lora["classes"]["Dropout"] == adapted
    for r in (full, lora):  # every hooked forward is released; backward hooks only where gradients flow
        calls = {name: n for name, (n, _) in r["calls"].items()}
        assert calls[hooks.HOOKS[0]] == calls[hooks.HOOKS[1]] == r["forward_modules"]
        assert 0 < calls[hooks.HOOKS[3]] <= calls[hooks.HOOKS[2]] <= r["forward_modules"]

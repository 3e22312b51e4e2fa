"""The analytic activation model against committed measurements of every modelled family (no torch needed).

tests/data/activations_cpu.json holds what benchmarks/measure_lora.py (the method of shared/measure_activations.py)
measured on 2-layer miniatures of real checkpoints (benchmarks/activations.py MINIATURES, most at half width), on
the CPU, for full fine-tuning, LoRA and QLoRA, sdpa and eager, with and without gradient checkpointing; each case
carries its config. Regenerate it with

    python benchmarks/activations_golden.py --device cpu -o tests/data/activations_cpu.json

Full fine-tuning, LoRA and QLoRA must match to the byte (the issue asks for 3 % on LoRA).
"""

from __future__ import annotations

import json
import os

import pytest

from zerokit.errors import BadInput
from zerokit.memory.activations import MODELLED_FAMILIES, LoraSetup, estimate_activations
from zerokit.models.lora import lora_parameters

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(REPO, "tests", "data", "activations_cpu.json")


def _load() -> list[dict]:
    with open(GOLDEN) as f:
        return json.load(f)["cases"]


CASES = _load()


def _id(case: dict) -> str:
    lora = case.get("lora")
    tail = ""
    if lora:
        tail = f"-{'qlora' if lora.get('qlora') else 'lora'}{lora['rank']}-{lora['targets']}-d{lora['dropout']}"
        tail += f"-save-{'+'.join(lora['save'])}" if lora.get("save") else ""
    extra = "-" + "-".join(f"{k}={v}" for k, v in case.get("overrides", {}).items()) if case.get("overrides") else ""
    return (f"{case['family']}{case['config'].get('hidden_size', case['config'].get('n_embd'))}-{case['seq']}x"
            f"{case['batch']}-{case['attention']}-{'ckpt' if case['ckpt'] else 'full'}-{case.get('dtype', 'bf16')}"
            f"{tail}{extra}")


def _predict(case: dict) -> int:
    config = case["config"]
    lora = case.get("lora")
    setup = LoraSetup(lora["rank"], lora["targets"], lora["dropout"], lora.get("qlora", False),
                      saved=tuple(lora.get("save", ()))) if lora else None
    return estimate_activations(config, case["seq"], case["batch"], attention=case["attention"],
                                dtype=case.get("dtype", "bf16"), gradient_checkpointing=case["ckpt"], device="cpu",
                                lora=setup).activations


def test_every_modelled_family_is_measured():
    measured = {c["family"] for c in CASES if "activations" in c and not c.get("lora")}
    assert measured == set(MODELLED_FAMILIES)
    with_lora = {c["family"] for c in CASES if "activations" in c and c.get("lora")}
    assert {"llama", "qwen3", "mistral", "gpt2", "gpt_neox", "falcon", "mixtral"} <= with_lora
    # PEFT's modules_to_save (the embedding and the head trained as copies) on every family LoRA is measured on
    # (gemma2 by eager attention only: transformers refuses it sdpa)
    with_save = {c["family"] for c in CASES if "activations" in c and (c.get("lora") or {}).get("save")}
    assert with_save == with_lora


FULL = [c for c in CASES if "activations" in c and not c.get("lora")]
LORA = [c for c in CASES if "activations" in c and c.get("lora")]
REFUSED = [c for c in CASES if "error" in c]


@pytest.mark.parametrize("case", FULL, ids=[_id(c) for c in FULL])
def test_full_fine_tuning_matches_to_the_byte(case):
    assert _predict(case) == case["activations"]


@pytest.mark.parametrize("case", LORA, ids=[_id(c) for c in LORA])
def test_lora_matches_to_the_byte(case):
    predicted, measured = _predict(case), case["activations"]
    assert predicted == measured  # exact, like full fine-tuning (the issue asks for 3 %)


@pytest.mark.parametrize("case", REFUSED, ids=[_id(c) for c in REFUSED])
def test_what_the_libraries_refuse_zerokit_flags(case):
    config = case["config"]
    if "ParamWrapper does not work with lora_dropout" in case["error"]:
        with pytest.raises(BadInput, match="cannot put LoRA dropout on MoE expert or router parameters"):
            lora_parameters(config, case["lora"]["rank"], case["lora"]["targets"], dropout=case["lora"]["dropout"])
    elif case["family"] == "gemma2" and case["attention"] == "sdpa":  # estimated as the eager a run falls back to
        assert "gemma2 has no sdpa attention" in estimate_activations(config, case["seq"], case["batch"],
                                                                      device="cpu").note
    else:
        pytest.fail(f"unexpected refusal: {case['error']}")


TRANSIENT = [c for c in CASES if "transient" in c]


@pytest.mark.parametrize("case", TRANSIENT, ids=[_id(c) for c in TRANSIENT])
def test_backward_transient(case):
    """The backward peak above the end of forward, against the CPU profiler's replay of allocations (an upper bound
    of the true peak: frees of blocks allocated before backward are invisible to it).

    Exact where the loss backward dominates (8 bytes per vocabulary entry per token); the decoder-layer estimate is
    fitted and runs within 25 % on the narrow miniatures where a layer's working set dominates.
    """
    lora = case.get("lora")
    setup = LoraSetup(lora["rank"], lora["targets"], lora["dropout"], lora.get("qlora", False),
                      saved=tuple(lora.get("save", ()))) if lora else None
    predicted = estimate_activations(case["config"], case["seq"], case["batch"], attention=case["attention"],
                                     gradient_checkpointing=case["ckpt"], device="cpu", lora=setup).transient
    assert abs(predicted - case["transient"]) <= 0.25 * case["transient"], (predicted, case["transient"])


SAVED = [c for c in LORA if c["lora"].get("save")]


@pytest.mark.parametrize("case", SAVED, ids=[_id(c) for c in SAVED])
def test_modules_to_save_train_the_copies_zerokit_counts(case):
    """PEFT trained the adapters and a whole copy of each module saved (found by the name zerokit gives it: gpt_neox's
    head is lm_head in transformers 5, where an embed_out copy would have trained nothing)."""
    from zerokit.models.lora import saveable_names, saved_modules

    lora = case["lora"]
    names = saveable_names(case["config"])
    copies = saved_modules(case["config"], [names[role] for role in lora["save"]])
    assert [role for _, role, _ in copies] == list(lora["save"])
    adapters = lora_parameters(case["config"], lora["rank"], lora["targets"]).trainable
    assert adapters + sum(params for _, _, params in copies) == case["trainable_parameters"]

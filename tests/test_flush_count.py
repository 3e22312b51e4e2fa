"""DeepSpeed's gradient-bucket flushes, counted in a real ZeRO-2 backward (benchmarks/flush_count.py), against the
time model's replay of its rule (`zerokit.perf.model.flushes`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from _support import free_port

ROOT = Path(__file__).resolve().parent.parent


def test_the_backward_order_and_the_replay_by_hand():
    """A 2-layer, 4-wide llama (MLP 8, vocabulary 16, kv 2) and a 16-element bucket, gradient by gradient: the head
    (64) flushes the empty bucket and fills it alone; the final norm (4) flushes the head; in each layer down, up and
    gate (32 each) flush what came before, the post-attention norm (4) flushes gate, o (16) flushes the norm, v (8)
    flushes o, k (8) joins v (16, not over), q (16) flushes them, the input norm (4) flushes q: 8 a layer; the
    embedding flushes the last norm, and the epilogue flushes the embedding: 2 + 2 x 8 + 2 = 20, where the former
    count was ceil(436 / 16) = 28."""
    from zerokit.perf.flops import model_flops
    from zerokit.perf.model import bucket_flushes, flushes

    mf = model_flops({"model_type": "llama", "hidden_size": 4, "intermediate_size": 8, "num_hidden_layers": 2,
                      "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 16,
                      "tie_word_embeddings": False})
    assert mf.gradient_order == (64, 4) + (32, 32, 32, 4, 16, 8, 8, 16, 4) * 2 + (64,)
    assert flushes(mf, 436, 16) == 2 + 2 * 8 + 2 == 20 and bucket_flushes(436, 16) == 28
    assert flushes(mf, 100, 16) == bucket_flushes(100, 16) == 7  # adapters (fewer trainable): end to end
    assert flushes(mf, 436, 5e8) == 1  # DeepSpeed's default bucket: the epilogue's flush alone


def test_deepspeed_flushes_as_the_model_replays_it():
    """One CPU rank, a plan's hidden^2 buckets: DeepSpeed 0.19 called `reduce_ipg_grads` 36, 52, 132 and 68 times a
    backward for the CPU benchmark's model, the CPU probe's reference and 1/8-wide stand-ins of the GPU runs' 0.9B
    llama and the GPU probe's reference, and 10 for a one-layer llama with a tied head; the model's replay gives the
    same (its former count: 61, 71, 209, 122, 20)."""
    env = {**os.environ, "MASTER_PORT": str(free_port())}
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "flush_count.py")], capture_output=True,
                         text=True, timeout=600, env=env, check=True).stdout
    rows = [line.split() for line in out.splitlines() if line[:1].islower() and line.split()[-1].isdigit()]
    assert len(rows) == 5
    for row in rows:
        buckets, zerokit, real = int(row[-4]), int(row[-3]), int(row[-2])
        assert zerokit == real and real < 0.75 * buckets, row


def test_a_one_layer_tied_model_splits_as_a_deep_one():
    """A one-layer llama with a tied head: every part has one copy, so the stack is told by `Part.layer`, not by the
    copies. The embedding comes before the layer, the final norm and the (tied) head after it; backward hands over
    the norm first and the embedding last (the tied head's gradient joins the embedding's), and the gradients'
    tensors count each parameter once: the embedding's 64, the layer's 152 and the final norm's 4, 220 (the 2-layer
    untied model above: 436 = 64 + 2 x 152 + 4 + 64)."""
    from zerokit.memory.estimate import _config_key, _tensor_sizes
    from zerokit.models.params import count_parameters, model_parts, stack_split
    from zerokit.perf.flops import model_flops

    config = {"model_type": "llama", "hidden_size": 4, "intermediate_size": 8, "num_hidden_layers": 1,
              "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 16, "tie_word_embeddings": True}
    before, layer, after = stack_split(model_parts(config))
    assert [p.name for p in before] == ["embed_tokens"] and [p.name for p in after] == ["norm", "lm_head"]
    assert len(layer) == 9 and all(p.copies == 1 for p in layer)
    total = count_parameters(config)[0]
    assert total == 64 + (16 + 8 + 8 + 16 + 32 * 3 + 4 + 4) + 4 == 220
    assert model_flops(config).gradient_order == (4, 32, 32, 32, 4, 16, 8, 8, 16, 4, 64)
    assert sum(_tensor_sizes(_config_key(config), 1)) == total  # the tied head once (it had counted it twice)


@pytest.mark.parametrize("layers", [1, 2])
def test_every_presets_gradients_count_each_parameter_once(layers):
    """Every preset's architecture cut to one and two layers: the backward order and the gradient partition's tensors
    (`zerokit.memory.estimate._tensor_sizes`) both sum to the parameters `count_parameters` counts, tied weights once."""
    from zerokit.memory.estimate import _config_key, _tensor_sizes
    from zerokit.models.params import FAMILIES, count_parameters
    from zerokit.models.presets import PRESET_NAMES
    from zerokit.models.resolve import resolve_model
    from zerokit.perf.flops import model_flops

    for name in PRESET_NAMES:
        config = dict(resolve_model(name).config)
        key = FAMILIES[config["model_type"]].aliases.get("num_hidden_layers", "num_hidden_layers")
        config[key] = config["num_hidden_layers"] = layers
        for drop in ("first_k_dense_replace", "mlp_only_layers", "layer_types"):  # per-layer lists of a deep model
            config.pop(drop, None)
        total = count_parameters(config)[0]
        assert sum(model_flops(config).gradient_order) == total, name
        assert sum(_tensor_sizes(_config_key(config), layers)) == total, name

"""DeepSpeed's gradient-bucket flushes, counted in a real ZeRO-2 backward (benchmarks/flush_count.py), against the
time model's replay of its rule (`zerokit.perf.model.flushes`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
    llama and the GPU probe's reference; the model's replay gives the same (its former count: 61, 71, 209, 122)."""
    env = {**os.environ, "MASTER_PORT": str(free_port())}
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "flush_count.py")], capture_output=True,
                         text=True, timeout=600, env=env, check=True).stdout
    rows = [line.split() for line in out.splitlines() if line[:1].islower() and line.split()[-1].isdigit()]
    assert len(rows) == 4
    for row in rows:
        buckets, zerokit, real = int(row[-4]), int(row[-3]), int(row[-2])
        assert zerokit == real and real < 0.75 * buckets, row

"""How many times a real DeepSpeed ZeRO-2 backward flushes its gradient bucket, against the time model's count.

    python benchmarks/flush_count.py     # about a minute on this CPU

The time model charges `bucket_flush_s` per flush and counts ceil(trainable / reduce_bucket_size) flushes a backward
(`zerokit.perf.model.bucket_flushes`), and the probe derives that figure by the same count on its reference. DeepSpeed
0.19 flushes otherwise (`DeepSpeedZeroOptimizer.reduce_independent_p_g_buckets_and_remove_grads`): a gradient that
would overfill the bucket flushes it first, and a tensor larger than the bucket goes alone, so a 65M-element
embedding is one flush, not sixteen. This script trains one step of each model on one CPU rank (gloo) with a plan's
hidden^2 buckets and counts the calls to `reduce_ipg_grads` (the epilogue's included, an empty bucket's apart).
Flush counts depend on the tensors' sizes against the bucket only, and a plan's bucket is hidden^2: a 256-wide
llama with the same ratios (MLP, vocabulary and key-value width over hidden) flushes as often as its 2048-wide
original, which stands in for the GPU runs' 0.9B llama and the GPU probe's reference here. The "in order" column
replays DeepSpeed's rule over the tensors in the order a llama's backward hands them over (`llama_backward_order`):
it gives DeepSpeed's count for all four (2026-11-28: 36, 52, 132 and 68, against the model's 61, 71, 209 and 122).
The time model does not use it yet: the probe's flush figure is derived with the model's count, so the change must
re-derive every committed profile with it (tests/test_probe_cli.py).
"""

from __future__ import annotations

import math
import os
import sys

# the CPU step-time benchmark's model and the CPU probe's reference (zerokit.perf.probe), as they train
MODELS = {
    "cpu benchmark (4 x 256)": {"hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 4,
                                "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 2048},
    "cpu probe reference (6 x 256)": {"hidden_size": 256, "intermediate_size": 682, "num_hidden_layers": 6,
                                      "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512},
    # the GPU runs' 0.9B llama (2048 wide, MLP 5504, 16 layers, vocabulary 32,000, kv half the heads), at 1/8 width
    "gpu runs' 0.9B llama, 1/8 wide": {"hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 16,
                                       "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 4000},
    # the GPU probe's reference (2048 wide, MLP 5632, 8 layers, 32,000), at 1/8 width
    "gpu probe reference, 1/8 wide": {"hidden_size": 256, "intermediate_size": 704, "num_hidden_layers": 8,
                                      "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 4000},
}


def llama_backward_order(c: dict) -> list[int]:
    """A llama's trainable tensors in the order a backward hands DeepSpeed their gradients: the head, the final
    norm, then each layer from the last (down, up, gate, the post-attention norm, o, v, k, q, the input norm), then
    the embedding."""
    h, kv = c["hidden_size"], c["num_key_value_heads"] * c["hidden_size"] // c["num_attention_heads"]
    mlp = h * c["intermediate_size"]
    layer = [mlp, mlp, mlp, h, h * h, h * kv, h * kv, h * h, h]
    return [c["vocab_size"] * h, h] + layer * c["num_hidden_layers"] + [c["vocab_size"] * h]


def ordered_flushes(order: list[int], bucket: int) -> int:
    """`reduce_ipg_grads` calls of one ZeRO-2 backward: a gradient that would overfill the bucket flushes it first
    (an empty one too), and the epilogue flushes what is left."""
    calls = filled = 0
    for n in order:
        if filled + n > bucket:
            calls, filled = calls + 1, 0
        filled += n
    return calls + 1


def main() -> int:
    for key, value in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29561", "RANK": "0", "WORLD_SIZE": "1",
                       "LOCAL_RANK": "0"}.items():
        os.environ.setdefault(key, value)
    import deepspeed
    import torch
    from deepspeed.runtime.zero import stage_1_and_2
    from transformers import LlamaConfig, LlamaForCausalLM

    deepspeed.init_distributed(dist_backend="gloo")
    calls = {"all": 0, "filled": 0}
    reduce = stage_1_and_2.DeepSpeedZeroOptimizer.reduce_ipg_grads

    def counted(self, *args, **kwargs):
        calls["all"] += 1
        calls["filled"] += any(b.elements for b in self.ipg_buckets.values())
        return reduce(self, *args, **kwargs)

    stage_1_and_2.DeepSpeedZeroOptimizer.reduce_ipg_grads = counted
    print(f"{'model':32} {'parameters':>11} {'bucket':>7} {'model count':>11} {'in order':>8} {'DeepSpeed':>9} "
          f"{'(filled)':>8}")
    for name, config in MODELS.items():
        torch.manual_seed(0)
        model = LlamaForCausalLM(LlamaConfig(**config, tie_word_embeddings=False, max_position_embeddings=64))
        bucket = config["hidden_size"] ** 2
        ds_config = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                     "zero_allow_untested_optimizer": True,
                     "zero_optimization": {"stage": 2, "overlap_comm": True, "contiguous_gradients": True,
                                           "reduce_bucket_size": bucket, "allgather_bucket_size": bucket}}
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config,
                                               optimizer=torch.optim.AdamW(model.parameters(), lr=1e-5))
        ids = torch.randint(0, config["vocab_size"], (1, 16))
        for step in range(2):  # the second step is counted
            calls.update(all=0, filled=0)
            engine.backward(engine(input_ids=ids, labels=ids).loss)
            engine.step()
        parameters = sum(p.numel() for p in model.parameters())
        print(f"{name:32} {parameters:11,} {bucket:7,} {math.ceil(parameters / bucket):11} "
              f"{ordered_flushes(llama_backward_order(config), bucket):8} {calls['all']:9} {calls['filled']:8}",
              flush=True)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

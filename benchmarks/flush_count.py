"""How many times a real DeepSpeed ZeRO-2 backward flushes its gradient bucket, against the time model's count.

    python benchmarks/flush_count.py     # seconds on this CPU

The time model charges `bucket_flush_s` per flush, and the probe derives that figure from its reference by the same
count. DeepSpeed 0.19 flushes before any gradient that would overfill the bucket
(`DeepSpeedZeroOptimizer.reduce_independent_p_g_buckets_and_remove_grads`), so a tensor larger than the bucket goes
alone: a 65M-element embedding is one flush, not the sixteen buckets its elements fill. `zerokit.perf.model.flushes`
replays that rule over the model's tensors in backward order (`zerokit.perf.flops.backward_order`); until
2026-11-28 the model counted ceil(parameters / bucket), the "buckets" column. This script trains one step of each
model on one CPU rank (gloo) with a plan's hidden^2 buckets and counts the calls to `reduce_ipg_grads` (the
epilogue's included; "filled" leaves out the one that flushes an empty bucket). Flush counts depend on the tensors'
sizes against the bucket only, and a plan's bucket is hidden^2: a 256-wide llama with the same ratios (MLP,
vocabulary and key-value width over hidden) flushes as often as its 2048-wide original, which stands in for the
GPU runs' 0.9B llama and the GPU probe's reference here. 2026-11-28: DeepSpeed 36, 52, 132 and 68, zerokit the
same, the former count 61, 71, 209 and 122; and a one-layer model with a tied head, whose modules all have one copy
(the stack told apart by `zerokit.models.params.Part.layer`), 10 and 10 (20 buckets).
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
    # one layer and a tied head: every module has one copy, and the head's gradient is the embedding's
    "one layer, tied head (1 x 256)": {"hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 1,
                                       "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 2048,
                                       "tie_word_embeddings": True},
}


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
    from zerokit.perf.flops import model_flops
    from zerokit.perf.model import flushes

    print(f"{'model':32} {'parameters':>11} {'bucket':>7} {'buckets':>7} {'zerokit':>7} {'DeepSpeed':>9} "
          f"{'(filled)':>8}")
    for name, config in MODELS.items():
        torch.manual_seed(0)
        full = {"model_type": "llama", "tie_word_embeddings": False, **config, "max_position_embeddings": 64}
        model = LlamaForCausalLM(LlamaConfig(**{k: v for k, v in full.items() if k != "model_type"}))
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
        print(f"{name:32} {parameters:11,} {bucket:7,} {math.ceil(parameters / bucket):7} "
              f"{flushes(model_flops(full), parameters, bucket):7} {calls['all']:9} {calls['filled']:8}", flush=True)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

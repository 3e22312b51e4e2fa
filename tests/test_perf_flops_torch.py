"""zerokit/perf/flops.py against torch.utils.flop_counter.FlopCounterMode on real transformers models.

Each tiny model is built from its config with eager attention (it computes the full s x s scores, as the count for
`attention="eager"` says) and run forward once; the counter sees every matmul transformers runs.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.heavy

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from zerokit.perf import model_flops

CONFIGS = {
    "llama": {"model_type": "llama", "hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128},
    "qwen2": {"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 1, "vocab_size": 128},
    "qwen3": {"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 128},
    "mistral": {"model_type": "mistral", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128, "sliding_window": None},
    "mixtral": {"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128, "num_local_experts": 4,
                "num_experts_per_tok": 2, "sliding_window": None},
    "gemma2": {"model_type": "gemma2", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
               "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 128},
    "phi3": {"model_type": "phi3", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128, "pad_token_id": 0},
    "gpt2": {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 128, "n_positions": 64},
    "gpt_neox": {"model_type": "gpt_neox", "hidden_size": 64, "intermediate_size": 256, "num_hidden_layers": 2,
                 "num_attention_heads": 4, "vocab_size": 128},
    "opt": {"model_type": "opt", "hidden_size": 64, "ffn_dim": 256, "num_hidden_layers": 2,
            "num_attention_heads": 4, "vocab_size": 128, "word_embed_proj_dim": 32, "max_position_embeddings": 64},
    "falcon": {"model_type": "falcon", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
               "vocab_size": 128, "new_decoder_architecture": True, "num_kv_heads": 2},
    "qwen3_moe": {"model_type": "qwen3_moe", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
                  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 128,
                  "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32},
}


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_forward_flops_match_flop_counter(family):
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoConfig, AutoModelForCausalLM

    config = CONFIGS[family]
    hf = AutoConfig.for_model(**config)
    torch.manual_seed(0)
    # experts_implementation="eager": transformers' per-expert loop of F.linear, which the counter sees (its default
    # grouped kernel is an op FlopCounterMode does not count)
    extra = {"experts_implementation": "eager"} if family in ("mixtral", "qwen3_moe") else {}
    model = AutoModelForCausalLM.from_config(hf, attn_implementation="eager", **extra).eval()
    batch, seq = 2, 16
    ids = torch.randint(0, config["vocab_size"], (batch, seq))
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(input_ids=ids)
    expected = model_flops(config).forward_flops(seq, batch, "eager")
    assert counter.get_total_flops() == expected

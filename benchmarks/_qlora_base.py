"""QLoRA's base as the real-run workers load it (`_realrun_worker.py`, `_step_time_worker.py`): shared, not copied."""

from __future__ import annotations


def quantized_base(case: dict, config, ds_config: dict, torch, rank: int, gpu: bool = False):
    """QLoRA's base as a training script loads it: the (random, seeded) bf16 checkpoint saved by rank 0 (transformers
    saves on the main rank only), then `from_pretrained(..., quantization_config=BitsAndBytesConfig(**the plan's
    keywords))` on every rank: each linear but lm_head a bitsandbytes NF4 `Linear4bit`.

    At ZeRO-3 it loads as under the HF Trainer, with `HfDeepSpeedConfig` alive and no device map: transformers
    skips zero.Init for a quantized model (`get_init_context`), so each rank loads it whole and
    `deepspeed.initialize` partitions it, the 4-bit weights stored in the compute dtype as the plan's
    `bnb_4bit_quant_storage` says."""
    import shutil
    import tempfile

    import torch.distributed as dist
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig
    from transformers.integrations import HfDeepSpeedConfig

    where = [tempfile.mkdtemp(prefix="zerokit-qlora-") if rank == 0 else None]
    if rank == 0:
        AutoModelForCausalLM.from_config(config, attn_implementation=case.get("attention", "sdpa")).save_pretrained(
            where[0])
    dist.broadcast_object_list(where, src=0)
    zero3 = (ds_config.get("zero_optimization") or {}).get("stage", 0) == 3
    keep = HfDeepSpeedConfig(ds_config) if zero3 else None  # noqa: F841 (transformers holds a weak reference)
    placement = {} if zero3 else {"device_map": {"": torch.cuda.current_device()} if gpu else "cpu"}
    try:
        return AutoModelForCausalLM.from_pretrained(
            where[0], dtype=torch.bfloat16, quantization_config=BitsAndBytesConfig(**case["quantization_config"]),
            attn_implementation=case.get("attention", "sdpa"), **placement)
    finally:
        dist.barrier()
        if rank == 0:
            shutil.rmtree(where[0], ignore_errors=True)

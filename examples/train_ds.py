"""Train a model built from a config.json (random weights) with plain `deepspeed.initialize`.

    zerokit plan --model examples/models/tiny-llama --gpu-memory 16GB --gpus-per-node 2 --seq-len 64 \
        --micro-batch 2 --precision fp32 --target deepspeed -o ds_config.json
    zerokit launch --config ds_config.json --gpus-per-node 2 examples/train_ds.py --max-steps 4

A `--target deepspeed` config resolves every value (batch sizes, optimizer, scheduler, precision), so this
script takes them all from it: the engine builds the optimizer, and the batch size comes from
`train_micro_batch_size_per_gpu`. Rank 0 prints one `step N loss X` line per optimizer step.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--deepspeed", required=True, help="ds_config JSON with every value resolved (--target deepspeed)")
    p.add_argument("--model", default=str(HERE / "models" / "tiny-llama"), help="folder holding config.json")
    p.add_argument("--max-steps", type=int, default=4, help="optimizer steps")
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--loss-file", help="rank 0 writes {step, loss} JSON lines here")
    p.add_argument("--local_rank", "--local-rank", type=int, default=-1, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import deepspeed
    import torch
    import torch.distributed as dist
    from transformers import AutoConfig, AutoModelForCausalLM

    ds_config = json.loads(Path(args.deepspeed).read_text())
    unresolved = [k for k, v in ds_config.items() if v == "auto"]
    if unresolved:
        raise SystemExit(f"train_ds.py: {args.deepspeed} leaves {', '.join(unresolved)} as \"auto\"; "
                         "plan it with --target deepspeed")
    deepspeed.init_distributed()
    rank = dist.get_rank()
    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(args.model)
    zero3 = (ds_config.get("zero_optimization") or {}).get("stage") == 3
    with deepspeed.zero.Init(config_dict_or_path=ds_config, enabled=zero3):
        model = AutoModelForCausalLM.from_config(config)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)
    dtype = torch.bfloat16 if engine.bfloat16_enabled() else torch.float16 if engine.fp16_enabled() else torch.float32
    micro_batch = engine.train_micro_batch_size_per_gpu()
    accumulation = engine.gradient_accumulation_steps()
    if rank == 0:
        print(f"model {config.model_type}: ZeRO-{engine.zero_optimization_stage()}, {dtype}, micro-batch "
              f"{micro_batch} x {accumulation} accumulation x {dist.get_world_size()} ranks", flush=True)

    g = torch.Generator().manual_seed(rank)  # each rank its own data, as a DistributedSampler would give
    losses = []
    for step in range(1, args.max_steps + 1):
        step_loss = 0.0
        for _ in range(accumulation):
            start = torch.randint(0, config.vocab_size, (micro_batch, 1), generator=g)
            ids = ((start + torch.arange(args.seq_len)) % config.vocab_size).to(engine.device)
            loss = engine(input_ids=ids, labels=ids).loss
            engine.backward(loss)
            engine.step()  # DeepSpeed steps the optimizer at the accumulation boundary only
            step_loss += loss.item() / accumulation
        if rank == 0:
            losses.append({"step": step, "loss": step_loss})
            print(f"step {step} loss {step_loss:.4f}", flush=True)
    if rank == 0:
        final = losses[-1]["loss"]
        print(f"final loss {final:.4f} ({'finite' if math.isfinite(final) else 'NOT finite'})", flush=True)
        if args.loss_file:
            Path(args.loss_file).write_text("".join(json.dumps(x) + "\n" for x in losses))
    dist.barrier()  # no rank tears gloo down while another still uses it
    dist.destroy_process_group()  # a gloo rank that skips this lingers for minutes
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    code = main()
    # Everything is written and the process group is gone; leave without running C++ static destructors, which
    # on the CPU accelerator occasionally abort a rank at exit ("terminate called without an active exception").
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

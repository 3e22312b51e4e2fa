"""Train a model built from a config.json (random weights) with the HF Trainer and a DeepSpeed config.

    zerokit plan --model examples/models/tiny-llama --gpu-memory 16GB --gpus-per-node 2 --seq-len 64 \
        --precision fp32 --target trainer -o ds_config.json
    zerokit launch --config ds_config.json --gpus-per-node 2 examples/train_hf.py --max-steps 4

Nothing is downloaded: the model comes from `--model` (a folder holding config.json) and the data is a
small synthetic token stream, so the same script runs on a laptop's CPU and on a GPU cluster. Without
CUDA the Trainer runs with `use_cpu=True` and the ranks use DeepSpeed's CPU accelerator (gloo).
Rank 0 prints one `step N loss X` line per logged step and, with `--loss-file`, writes them as JSON lines.

LoRA: `--peft lora` (or `--plan plan.json`, the output of `zerokit plan --peft lora --format json`, whose
`peft.lora_config` is used as is) wraps the model with `peft.get_peft_model`; `--save` then saves the adapter only
(`model.save_pretrained`, gathered under ZeRO-3), and `--logits-file` writes the trained model's logits on a fixed
input, so a reloaded adapter can be checked against them:

    zerokit plan --model examples/models/tiny-llama --gpu-memory 16GB --gpus-per-node 2 --seq-len 64 \
        --precision bf16 --peft lora --zero-stage 3 --format json -o ds_config.json
    (save what it prints as plan.json)
    zerokit launch --config ds_config.json --gpus-per-node 2 examples/train_hf.py --plan plan.json --bf16 --save

The base is built from the config with seed 0 before the Trainer exists, so a fresh `from_config` under the same
seed is the same base. With a real checkpoint under ZeRO-3, create TrainingArguments(deepspeed=...) first: then
`from_pretrained` loads inside deepspeed.zero.Init and no rank ever holds the whole base.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--deepspeed", help="ds_config JSON (zerokit launch appends it)")
    p.add_argument("--model", default=str(HERE / "models" / "tiny-llama"), help="folder holding config.json")
    p.add_argument("--output-dir", default="out-train-hf", help="Trainer output dir")
    p.add_argument("--max-steps", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--micro-batch", type=int, default=None,
                   help="per-device batch; default: the config's train_micro_batch_size_per_gpu, else 2")
    p.add_argument("--grad-accum", type=int, default=None,
                   help="default: the config's gradient_accumulation_steps, else 1")
    p.add_argument("--samples", type=int, default=256, help="size of the synthetic dataset")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--precision", choices=["auto", "bf16", "fp16", "fp32"], default="auto",
                   help="auto: what the ds_config enables outright, else fp32 (\"auto\" blocks follow this flag)")
    p.add_argument("--bf16", dest="precision", action="store_const", const="bf16", help="same as --precision bf16")
    p.add_argument("--fp16", dest="precision", action="store_const", const="fp16", help="same as --precision fp16")
    p.add_argument("--save", action="store_true", help="save the final model (gathered under ZeRO-3) to --output-dir")
    p.add_argument("--loss-file", help="rank 0 writes {step, loss} JSON lines here")
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--plan", help="zerokit plan JSON: its peft.lora_config configures LoRA (implies --peft lora)")
    p.add_argument("--peft", choices=["none", "lora"], default=None, help="default: the plan's, else none")
    p.add_argument("--lora-rank", type=int, default=16)
    p.add_argument("--lora-targets", default="all-linear", help="all-linear or a comma list of module names")
    p.add_argument("--lora-dropout", type=float, default=0.05)
    p.add_argument("--logits-file", help="write the trained model's float32 logits on FIXED_INPUT here (torch.save)")
    p.add_argument("--local_rank", "--local-rank", type=int, default=-1, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def config_value(ds_config: dict, key: str):
    """A numeric value from the ds_config, or None where it is absent or left as "auto" for the Trainer."""
    value = ds_config.get(key)
    return value if isinstance(value, int) else None


def precision_from_config(ds_config: dict) -> str:
    """bf16/fp16 where the ds_config enables it outright; `"auto"` leaves the choice to the Trainer flags (fp32)."""
    if (ds_config.get("bf16") or {}).get("enabled") is True or ds_config.get("bfloat16", {}).get("enabled") is True:
        return "bf16"
    if (ds_config.get("fp16") or {}).get("enabled") is True:
        return "fp16"
    return "fp32"


def lora_config_kwargs(args: argparse.Namespace) -> dict | None:
    """peft.LoraConfig keyword arguments: the plan's `peft.lora_config`, else the flags; None without LoRA."""
    plan = json.loads(Path(args.plan).read_text()) if args.plan else {}
    peft = plan.get("peft")
    if args.peft == "none" or (args.peft is None and not peft):
        return None
    if peft:
        if peft["method"] != "lora":
            raise SystemExit(f"train_hf.py trains LoRA; the plan says {peft['method']}")
        return dict(peft["lora_config"])
    targets = args.lora_targets if args.lora_targets == "all-linear" else args.lora_targets.split(",")
    return {"r": args.lora_rank, "lora_alpha": 2 * args.lora_rank, "lora_dropout": args.lora_dropout,
            "target_modules": targets, "bias": "none", "task_type": "CAUSAL_LM"}


def fixed_input(vocab: int, seq_len: int = 16):
    """The input whose logits --logits-file records: the same on every rank and in every process."""
    import torch

    return (torch.arange(seq_len) * 7 % vocab).unsqueeze(0)


def synthetic_dataset(n: int, seq_len: int, vocab: int, seed: int = 0):
    """Token sequences with a learnable pattern (each token predicts the next), so the loss falls within steps."""
    import torch

    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, vocab, (n, 1), generator=g)
    strides = torch.randint(1, 8, (n, 1), generator=g)
    ids = (starts + strides * torch.arange(seq_len)) % vocab
    return [{"input_ids": row, "labels": row.clone()} for row in ids]


def save(trainer, output_dir: str, rank: int, adapter: bool = False) -> None:
    """Save loadable weights. Under ZeRO-3 they are gathered explicitly, so that `from_pretrained` works even when
    the config leaves stage3_gather_16bit_weights_on_model_save off (the Trainer then saves no weights at all).
    With LoRA (`adapter`) only the trainable adapter weights are gathered, and PeftModel.save_pretrained keeps
    only them."""
    engine = trainer.model_wrapped
    if hasattr(engine, "zero_optimization_partition_weights") and engine.zero_optimization_partition_weights():
        # a collective: every rank calls it
        state_dict = engine._zero3_consolidated_16bit_state_dict(exclude_frozen_parameters=adapter)
        if rank == 0:
            trainer.model.save_pretrained(output_dir, state_dict=state_dict)
    else:
        trainer.save_model(output_dir)
    if rank == 0:
        print(f"saved model to {output_dir}", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch
    import torch.distributed as dist
    from transformers import AutoConfig, AutoModelForCausalLM, Trainer, TrainerCallback, TrainingArguments

    ds_config = json.loads(Path(args.deepspeed).read_text()) if args.deepspeed else {}
    precision = precision_from_config(ds_config) if args.precision == "auto" else args.precision
    micro_batch = args.micro_batch or config_value(ds_config, "train_micro_batch_size_per_gpu") or 2
    grad_accum = args.grad_accum or config_value(ds_config, "gradient_accumulation_steps") or 1
    rank = int(os.environ.get("RANK", "0"))

    config = AutoConfig.from_pretrained(args.model)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)  # random weights: nothing to download
    lora = lora_config_kwargs(args)
    if lora is not None:
        from peft import LoraConfig, get_peft_model

        if args.gradient_checkpointing:
            model.enable_input_require_grads()  # a frozen embedding: checkpointed layers need an input with grad
        # with modules_to_save at ZeRO-3 the adapters stay in the copies' 16 bits, as the plan's code has it: ZeRO-3's
        # optimizer takes one dtype (here the model is built outside zero.Init, so the engine would cast them anyway)
        stage = (ds_config.get("zero_optimization") or {}).get("stage", 0)
        model = get_peft_model(model, LoraConfig(**lora),
                               autocast_adapter_dtype=not (lora.get("modules_to_save") and stage == 3))
        if rank == 0:
            trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
            print(f"LoRA {lora}: {trainable:,} trainable parameters", flush=True)
    if rank == 0:
        n_params = sum(p.numel() for p in model.parameters())
        print(f"model {config.model_type} from {args.model}: {n_params:,} parameters; precision {precision}; "
              f"micro-batch {micro_batch} x grad-accum {grad_accum}; cuda={torch.cuda.is_available()}", flush=True)

    losses: list[dict] = []

    class PrintLoss(TrainerCallback):
        def on_log(self, _args, state, _control, logs=None, **_):
            if state.is_world_process_zero and logs and "loss" in logs:
                losses.append({"step": state.global_step, "loss": float(logs["loss"])})
                print(f"step {state.global_step} loss {logs['loss']:.4f}", flush=True)

    # transformers 5 renamed gradient_checkpointing to activation_checkpointing; pass whichever this version has.
    ckpt_name = "activation_checkpointing" if "activation_checkpointing" in inspect.signature(TrainingArguments).parameters \
        else "gradient_checkpointing"
    training_args = TrainingArguments(
        output_dir=args.output_dir,
        deepspeed=args.deepspeed,
        max_steps=args.max_steps,
        per_device_train_batch_size=micro_batch,
        gradient_accumulation_steps=grad_accum,
        learning_rate=args.lr,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=not torch.cuda.is_available(),
        bf16=precision == "bf16",
        fp16=precision == "fp16",
        **{ckpt_name: args.gradient_checkpointing},
        dataloader_num_workers=0,
        disable_tqdm=True,
        seed=0,
    )
    dataset = synthetic_dataset(args.samples, args.seq_len, config.vocab_size)
    trainer = Trainer(model=model, args=training_args, train_dataset=dataset, callbacks=[PrintLoss()])
    trainer.train()

    if args.logits_file:
        import torch

        module = trainer.model  # under ZeRO-3 its forward gathers the partitions: every rank runs it
        module.eval()
        with torch.no_grad():
            logits = module(input_ids=fixed_input(config.vocab_size)).logits.float()
        if rank == 0:
            torch.save(logits, args.logits_file)
    if args.save:
        save(trainer, args.output_dir, rank, adapter=lora is not None)
    if rank == 0:
        final = losses[-1]["loss"] if losses else float("nan")
        weights = next(trainer.model_wrapped.parameters()).dtype  # what the DeepSpeed engine really trains in
        print(f"final loss {final:.4f} ({'finite' if math.isfinite(final) else 'NOT finite'}; weights {weights})",
              flush=True)
        if args.loss_file:
            Path(args.loss_file).write_text("".join(json.dumps(x) + "\n" for x in losses))
    if dist.is_available() and dist.is_initialized():
        dist.barrier()  # no rank tears gloo down while another still uses it
        dist.destroy_process_group()  # a gloo rank that skips this lingers for minutes
    return 0


if __name__ == "__main__":
    code = main()
    # Everything is written and the process group is gone; leave without running C++ static destructors, which
    # on the CPU accelerator occasionally abort a rank at exit ("terminate called without an active exception").
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

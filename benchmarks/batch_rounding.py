"""What choosing the rounded global batch by speed buys: every preset x a hardware mix x three sequence lengths x
three token budgets per step, planned as `zerokit plan --global-batch-tokens N` plans it (the multiple of the GPUs
within 5% that trains fastest) against the nearest multiple (what the planner used before, and still uses when no
other multiple beats it by more than 2%). Predictions of the step-time model on the GPU presets' published figures;
no GPU runs here. A preset with learned positions is planned only at the lengths it takes (gpt2 at none of them, opt
at 2,048): past its positions a plan is bad input (`check_positions`).

    python benchmarks/batch_rounding.py            # about a minute
    python benchmarks/batch_rounding.py --top 20
"""

from __future__ import annotations

import argparse
import statistics

from zerokit.hardware import resolve_hardware
from zerokit.models.presets import PRESET_NAMES
from zerokit.models.resolve import resolve_model
from zerokit.planner.engine import learned_position_limit, plan, run_rules
from zerokit.planner.types import Training

HARDWARE = (
    {"gpu": "a100-80gb", "gpus_per_node": 8},
    {"gpu": "a100-40gb", "gpus_per_node": 8, "nodes": 2},
    {"gpu": "h100-80gb", "gpus_per_node": 8, "nodes": 2},
    {"gpu": "h100-80gb", "gpus_per_node": 8, "nodes": 4},
    {"gpu": "l40s", "gpus_per_node": 4},
    {"gpu": "rtx4090", "gpus_per_node": 2},
)
SEQ_LENS = (2048, 4096, 8192)
TOKENS = (10**6, 2 * 10**6, 4 * 10**6)


def hardware_label(h: dict) -> str:
    return f"{h.get('nodes', 1)}x{h['gpus_per_node']} {h['gpu']}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=10, help="rows of the largest gains to print")
    args = parser.parse_args()
    rows, planned, fitting, skipped = [], 0, 0, 0
    for name in PRESET_NAMES:
        model = resolve_model(name)
        limit = learned_position_limit(model)
        seq_lens = [s for s in SEQ_LENS if limit is None or s <= limit]
        skipped += (len(SEQ_LENS) - len(seq_lens)) * len(HARDWARE) * len(TOKENS)
        for h in HARDWARE:
            hw = resolve_hardware(**h)
            for seq in seq_lens:
                for tokens in TOKENS:
                    training = Training(seq_len=seq, global_batch_tokens=tokens)
                    chosen = plan(model, hw, training)
                    nearest = run_rules(model, hw, training)[0]  # the rules alone: the nearest multiple
                    planned += 1
                    if not chosen.decision.fits:
                        continue
                    fitting += 1
                    d = chosen.decision
                    batch = d.micro_batch_size * d.gradient_accumulation_steps * hw.world_size
                    was = nearest.chosen.candidate
                    if batch == nearest.batch.options[0]:
                        continue
                    gain = (chosen.performance.tokens_per_s / was.performance.tokens_per_s - 1 if was.fits
                            else float("inf"))
                    rows.append((gain, name, hardware_label(h), seq, tokens, nearest.batch.options[0],
                                 was.setup.micro_batch_size if was.fits else None, batch, d.micro_batch_size))
    rows.sort(key=lambda r: -r[0])
    print(f"{planned} plans with --global-batch-tokens ({len(PRESET_NAMES)} presets x {len(HARDWARE)} hardware x "
          f"{len(SEQ_LENS)} seq lens x {len(TOKENS)} token budgets, less {skipped} past a model's learned positions), "
          f"{fitting} fit")
    print(f"  another multiple than the nearest: {len(rows)} ({len(rows) / max(fitting, 1):.0%} of those that fit)")
    if rows:
        gains = [r[0] for r in rows]
        print(f"  predicted tokens/s gain over the nearest: median {statistics.median(gains):+.1%}, "
              f"{sum(g > 0.10 for g in gains)} over +10%, {sum(g > 0.5 for g in gains)} over +50%, "
              f"{sum(g > 1.0 for g in gains)} over 2x")
        print(f"\n{'gain':>9}  {'model':18} {'hardware':20} {'seq':>5} {'tokens':>6}  {'nearest (mb)':>13}  "
              f"{'chosen (mb)':>12}")
        for gain, name, hw, seq, tokens, was, was_mb, batch, mb in rows[:args.top]:
            print(f"{gain:>+9.1%}  {name:18} {hw:20} {seq:>5} {tokens / 1e6:>5.0f}M  {was:>8} ({was_mb})  "
                  f"{batch:>7} ({mb})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

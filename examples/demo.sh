#!/usr/bin/env bash
# `make demo`: the whole zerokit path on this machine, in under a minute once DeepSpeed's ops are cached (14-30 s here).
#   plan -> lint -> preflight -> launch a tiny llama on 2 CPU ranks (DeepSpeed's CPU accelerator), printing losses.
# Everything it writes goes to demo-out/. Run it with the venv's bin first on PATH (the Makefile does).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=demo-out
mkdir -p "$OUT"
MODEL=examples/models/tiny-llama
# The 2 ranks share the cores: DeepSpeed's runner leaves each one torch's default thread per core, which
# oversubscribes them (the preflight's advice); `deepspeed --bind_cores_to_rank` would set the same.
CORES="$(nproc)"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(( CORES >= 4 ? CORES / 2 : 1 ))}"
# A free port for the rendezvous, so that a job already holding 29500 does not fail the demo's preflight.
PORT="${ZEROKIT_DEMO_PORT:-$(python -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')}"

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "1/4 zerokit plan: ZeRO-2, 2 ranks, the tiny llama from $MODEL"
zerokit plan --model "$MODEL" --gpu-memory 16GB --gpus-per-node 2 --seq-len 64 --micro-batch 4 \
  --zero-stage 2 --precision bf16 --target trainer -o "$OUT/ds_config.json" --force

step "2/4 zerokit lint"
zerokit lint --target trainer --world-size 2 "$OUT/ds_config.json"

step "3/4 zerokit preflight"
zerokit preflight --config "$OUT/ds_config.json" --gpus-per-node 2 --master-port "$PORT"

step "4/4 zerokit launch: 2 ranks on this CPU (full log: $OUT/train.log)"
zerokit launch --dry-run --config "$OUT/ds_config.json" --gpus-per-node 2 --master-port "$PORT" \
  examples/train_hf.py --max-steps 8 --micro-batch 4 --bf16 --output-dir "$OUT/run" --loss-file "$OUT/losses.jsonl"
if ! zerokit launch --no-preflight --config "$OUT/ds_config.json" --gpus-per-node 2 --master-port "$PORT" \
    examples/train_hf.py --max-steps 8 --micro-batch 4 --bf16 --output-dir "$OUT/run" --loss-file "$OUT/losses.jsonl" \
    2>&1 | tee "$OUT/train.log" | grep --line-buffered -E '^(model|step|final) '; then
  echo "demo: training failed; the last lines of $OUT/train.log:" >&2
  tail -n 40 "$OUT/train.log" >&2
  exit 1
fi
echo
echo "demo: done. Config $OUT/ds_config.json, losses $OUT/losses.jsonl, log $OUT/train.log"

#!/bin/bash
# The GPU measurement of benchmarks/gpu_runs.py on a lent machine that has torch but no DeepSpeed and no network.
#
#   bash benchmarks/gpu_device.sh prepare        # here: constraints.txt's DeepSpeed built as a wheel, its and
#                                                # zerokit's missing dependencies (the same pins) downloaded for
#                                                # Python 3.12, all into .whl/ (git-ignored)
#   bash benchmarks/gpu_device.sh run [ARGS]     # there (carry .whl): install them into /tmp/site, build cpu_adam and
#                                                # fused_adam, then `gpu_runs.py --measure --out $OUT/gpu ARGS`
#   bash benchmarks/gpu_device.sh depths [LAYERS]  # there, after `run --cases zero2,zero3 --layers 8`: ZeRO-2 and
#                                                # ZeRO-3 again at each depth (default "16 4") with run's profile,
#                                                # packed into $OUT/depths.tgz (the device tool brings back 8 files)
#   bash benchmarks/gpu_device.sh run --cases sweep  # the tokens-per-micro-batch sweep (gpu_runs.py SWEEP: 512 to
#                                                # 16,384 tokens, full and LoRA at ZeRO-2), after the probe
#
# 2026-11-26 on an H200: prepare ~1 min here; run: the ops in 46-54 s, the probe 73-83 s, each case 25-60 s
# (nine cases in 7 min 12 s, the three offload cases alone in 5 min). The data come back under $OUT/gpu: copy them
# to tests/data/gpu/<date>-<gpu> and read them with `python benchmarks/gpu_runs.py --out DIR`. The depth runs of
# tests/data/gpu/2026-11-26-h200-depths: `run --cases zero2,zero3 --layers 8` in 6 min 7 s (the ops and probe
# included), then the 16- and 4-layer runs in 3 min (about 40 s a case). 2026-11-28, `run --cases sweep`
# (tests/data/gpu/2026-11-28-h200-sweep): 6 min 28 s, the probe 56 s and eight cases of 31-38 s. The ranks of the
# probe and of the runs import zerokit from this checkout: PYTHONPATH holds it beside /tmp/site (without it the
# probe's rank failed: "No module named zerokit").
set -o pipefail
cd "$(dirname "$0")/.." || exit 1
case "$1" in
prepare)
  grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
  mkdir -p .whl
  # the tested stack's versions (constraints.txt) of what that machine's image lacks
  pins=$(grep -iE '^(pydantic|pydantic_core|annotated-types|typing-inspection|hjson|jsonschema|jsonschema-specifications|referencing|rpds-py|typing_extensions|peft|accelerate)==' constraints.txt)
  deepspeed=$(grep -i '^deepspeed==' constraints.txt) || exit 1
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
    $pins || exit 1
  build=$(mktemp -d)
  python3 -m pip download -q --no-deps --no-binary :all: "$deepspeed" -d "$build" || exit 1
  tar xzf "$build"/deepspeed-*.tar.gz -C "$build" || exit 1
  # DS_BUILD_OPS=0: a pure-Python wheel; the ops are JIT-built there, against that machine's torch and CUDA
  (cd "$build"/deepspeed-*/ && DS_BUILD_OPS=0 "$OLDPWD"/.venv/bin/python -m pip wheel -q --no-deps \
    --no-build-isolation . -w "$OLDPWD"/.whl) || exit 1
  rm -rf "$build"
  ls .whl ;;
run)
  shift
  [ -n "$OUT" ] || { echo "gpu_device.sh run: \$OUT is not set (run it through the device tool)"; exit 2; }
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 PYTHONUNBUFFERED=1
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT"/nvidia-smi.txt
  for op in FusedAdamBuilder CPUAdamBuilder; do
    python3 -c "from deepspeed.accelerator import get_accelerator as g; g().create_op_builder('$op').load()" \
      > "$OUT"/build_$op.log 2>&1 &
  done
  wait
  python3 benchmarks/gpu_runs.py --measure --out "$OUT"/gpu "$@" 2>&1 | tee "$OUT"/log.txt ;;
depths)
  [ -n "$OUT" ] || { echo "gpu_device.sh depths: \$OUT is not set (run it through the device tool)"; exit 2; }
  [ -f "$OUT"/gpu/profile.json ] || [ -f /tmp/zerokit-depths/profile.json ] \
    || { echo "gpu_device.sh depths: no probe profile: run \`gpu_device.sh run --cases zero2,zero3 --layers 8\` first"; exit 2; }
  export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH TORCH_CUDA_ARCH_LIST=9.0 PYTHONUNBUFFERED=1
  mkdir -p /tmp/zerokit-depths
  [ -f "$OUT"/gpu/profile.json ] && cp "$OUT"/gpu/profile.json /tmp/zerokit-depths/
  for layers in ${2:-16 4}; do
    mkdir -p /tmp/zerokit-depths/layers"$layers"
    cp /tmp/zerokit-depths/profile.json /tmp/zerokit-depths/layers"$layers"/
    python3 benchmarks/gpu_runs.py --measure --reuse-profile --out /tmp/zerokit-depths/layers"$layers" \
      --cases zero2,zero3 --layers "$layers" 2>&1 | tee /tmp/zerokit-depths/layers"$layers"/log.txt
  done
  tar czf "$OUT"/depths.tgz -C /tmp/zerokit-depths . ;;
*)
  echo "usage: bash benchmarks/gpu_device.sh prepare | run [gpu_runs.py arguments] | depths [LAYERS]"; exit 2 ;;
esac

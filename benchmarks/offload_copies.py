"""What DeepSpeed's optimizer-offload step moves besides CPU-Adam, timed on a GPU machine's host (issue 9).

    python benchmarks/offload_copies.py [--params 873000000]

DeepSpeed 0.19 (zero/stage_1_and_2.py, zero/stage3.py) copies each gradient partition to the host in fp32 (cast on
the device first), and after CPU-Adam casts the updated fp32 partition to bf16 on the host: ZeRO-1/2 into a pinned
bit16 buffer that it then copies up; ZeRO-3 with one blocking `device_bf16.copy_(host_fp32)`, which torch casts on
the host into a fresh pageable temporary. This times each of those moves for a model's worth of parameters (the
0.9B llama of benchmarks/gpu_runs.py by default); `zerokit probe` measures the host cast and the ZeRO-3 copy itself
(`host_cast_params_per_s`, `h2d_cast_params_per_s`). On one H200's host (16 cores, torch 2.11, 873M parameters;
the run was this script's first form, the same copies under other names):

    host cast fp32 -> bf16 into pinned               75.4 ms
    host cast fp32 -> bf16 into pageable             74.9 ms
    h2d bf16 pinned, non_blocking                    31.7 ms
    h2d bf16 pageable                               266.2 ms
    zero3: device_bf16.copy_(host_fp32), blocking   501.3 ms
    d2h fp32 pinned, non_blocking                    63.3 ms
    gradients: device bf16 -> fp32, d2h pinned       65.8 ms
    host cast with 1 thread                         645.7 ms
"""

from __future__ import annotations

import argparse
import time


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--params", type=int, default=873_000_000, help="parameters per rank (default: the 0.9B llama)")
    args = p.parse_args()
    if not 1 <= args.params <= 10**11:
        p.error(f"--params {args.params}: give 1..1e11 parameters per rank")
    import torch

    if not torch.cuda.is_available():
        print("offload_copies: needs a CUDA GPU (the copies it times are host <-> device)")
        return 0
    n = args.params

    def timed(fn, reps: int = 5) -> float:
        fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        return sorted(times)[len(times) // 2]

    print(f"{n / 1e6:.0f}M parameters, torch {torch.__version__}, {torch.get_num_threads()} host threads, "
          f"{torch.cuda.get_device_name()}")
    src = torch.empty(n, dtype=torch.float32).uniform_().pin_memory()
    pinned = torch.empty(n, dtype=torch.bfloat16).pin_memory()
    pageable = torch.empty(n, dtype=torch.bfloat16)
    dev16 = torch.empty(n, dtype=torch.bfloat16, device="cuda")
    dev32 = torch.empty(n, dtype=torch.float32, device="cuda")
    rows = {
        "host cast fp32 -> bf16 into pinned": lambda: pinned.copy_(src),
        "host cast fp32 -> bf16 into pageable": lambda: pageable.copy_(src),
        "h2d bf16 pinned, non_blocking": lambda: dev16.copy_(pinned, non_blocking=True),
        "h2d bf16 pageable": lambda: dev16.copy_(pageable),
        "zero3: device_bf16.copy_(host_fp32), blocking": lambda: dev16.copy_(src),
        "d2h fp32 pinned, non_blocking": lambda: src.copy_(dev32, non_blocking=True),
        "gradients: device bf16 -> fp32, d2h pinned": lambda: src.copy_(dev16.to(torch.float32), non_blocking=True),
    }
    for name, fn in rows.items():
        print(f"{name:46} {timed(fn) * 1e3:8.1f} ms", flush=True)
    torch.set_num_threads(1)
    print(f"{'host cast with 1 thread':46} {timed(lambda: pinned.copy_(src), 3) * 1e3:8.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`zerokit probe`'s measurements: this machine's speeds, taken the way a real run meets them.

The probe starts the ranks the `deepspeed` runner would (one per GPU, or `--ranks` on DeepSpeed's CPU accelerator),
with the environment the runner gives them: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_SIZE, MASTER_ADDR/PORT and nothing
for threads (deepspeed/launcher/launch.py sets OMP_NUM_THREADS only with --bind_cores_to_rank), so each rank runs
torch's default thread count, as in training. Every measurement runs on all ranks at once, so a figure is what one
rank gets while the others are busy too; rank 0 reports the mean over the ranks.

Imported by the CLI only when `zerokit probe` runs; the worker imports torch (and deepspeed and transformers, for
the Adam ops and the reference training steps).
"""

from __future__ import annotations

import json
import os
import re
import stat
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from zerokit.errors import BadInput, ZerokitError
from zerokit.fileio import create_and_remove
from zerokit.launch.runner import SHM_DIR, free_port, remove_shm_buffers
from zerokit.memory.buffers import BufferSettings, buffer_ladder, zero_buffer_keys
from zerokit.perf.flops import ModelFlops
from zerokit.perf.machine import (
    COMPUTE_SCALE_BOUNDS,
    DEFAULT_BUCKET_FLUSH_S,
    DEFAULT_INTER_NODE_BANDWIDTH,
    DEFAULT_NVME_READ,
    DEFAULT_NVME_WRITE,
    DEFAULT_ZERO3_MODULE_OVERHEAD_S,
    MAX_BANDWIDTH,
    MIN_RATE,
    PROFILE_RANGES,
    MachinePerf,
    throughput_at,
    unmeasured_intra_node,
)

CPU_SIZES = {"bf16": (64, 128, 256, 512), "fp32": (64, 128, 256, 512, 1024)}
GPU_SIZES = {d: (256, 512, 1024, 2048, 4096, 8192) for d in ("bf16", "fp16", "fp32", "tf32")}
QUICK_SIZES = {"bf16": (32, 64), "fp32": (32, 64)}
MAX_RANKS = 64
"""The most local ranks one probe starts (`--ranks`)."""
NVME_TEST_BYTES = {False: 512 << 20, True: 16 << 20}
"""What the NVMe measurement writes to --nvme-path (and removes), by --quick."""
WORKER_TIMEOUT_S = 600
STOP_GRACE_S = 10.0
"""How long an interrupted probe's ranks have to unwind (`stop_ranks`) before they are killed."""
STEP_BUDGET_S = 1.5
"""The longest one step of a reference workload (the llama blocks, the engines' training step) may take by the kernel
figures measured before it. A longer one runs fewer tokens (the blocks drop a width they cannot fit), so that a slow
machine still probes in about a minute: a CPU without AVX-512 BF16 emulates bf16 at 2-3 GFLOP/s, where the CPU
reference's 512-token step took 9 s and the probe 11 minutes. A machine fast enough for the full sizes measures
them as before."""
QUANTIZED_PAIR_S = 0.3
"""The longest one pair of the 4-bit linear measurement (a 4-bit and a bf16 linear's forward and backward at the
largest shape) may take by the bf16 curve: fewer rows, down to 16, where it would take longer. What the pairs measure
(bitsandbytes dequantizing each weight, PEFT's module overhead) is a cost per weight and module, not per row, so the
rows' matmuls are noise around it: on the AMD EPYC that emulates bf16, three fits at 128 rows (1 s a pair, 21-27 s in
all) put the 4-bit weight at 226-3,020 M elements/s, and three at 32 rows (5.6-6.2 s) at 345-464."""
ENGINE_TIMED_S = 15.0
"""Seconds of timed engine steps (every engine's together) after which the alternated rounds stop, once
ENGINE_ROUNDS[0] have run (a GPU's ten rounds take a few seconds)."""
ENGINE_STEP_BUDGET_S = 0.6
"""STEP_BUDGET_S of the reference engines' steps on a CPU, so that their rounds cost about 20 s of the probe. On the
AMD EPYC that emulates bf16, 1.3-1.7 s steps of a 384-wide reference (4 rounds in 30 s) took 45 s of an 85 s probe;
0.7 s steps of the 256-wide one take 21-24 s of a 63-72 s probe, and the model planned every case of a measurement
made with it within 6% (tests/data/step_time/2026-11-27-amd-engine256). Its flush and hook figures are no steadier
for the shorter steps (ZeRO-3's hooks 191-1,320 us in six probes, against 823-1,443 us in three): they move with the
collective latency they are measured beside."""
ENGINE_ROUNDS = (3, 10)
"""The fewest and the most alternated rounds of the reference engines (two timed steps each per round)."""
HOST_FIELDS = ("host_op_s", "host_adapter_s", "host_flush_s", "host_optimizer_s")
HOST_TOKENS, HOST_STEPS = 32, 6
"""The GPU host floor (`Probe.host_floor`): tokens of its one sequence, and the steps whose median it takes."""


def runner_env(rank: int, ranks: int, port: int, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment deepspeed/launcher/launch.py gives local rank `rank` of one node (no core binding), started
    as a `deepspeed` found in this interpreter's environment starts it: that environment's bin first on PATH. Torch
    JIT-builds DeepSpeed's ops with the `ninja` on PATH, and ninja 1.11 and 1.13 hash build commands differently: a
    probe that met the system's ninja rebuilt fused_adam (about a minute) and judged cpu_adam unbuilt, and the next
    training rebuilt them back."""
    env = dict(os.environ if base is None else base)
    env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(ranks), LOCAL_SIZE=str(ranks),
               CROSS_RANK="0", CROSS_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    bin_dir = os.path.dirname(sys.executable)
    path = env.get("PATH", "")
    if bin_dir and bin_dir not in path.split(os.pathsep):
        env["PATH"] = bin_dir + (os.pathsep + path if path else "")
    return safe_path(env)


def safe_path(env: dict[str, str]) -> dict[str, str]:
    """`env` for a child Python that must not import from the directory the user ran zerokit in: `-m` and `-c` put
    it first on sys.path, and a file there named like a package (h2.py, torch.py) broke the probe's ranks with a
    traceback from huggingface_hub. PYTHONSAFEPATH (Python 3.11) leaves it out; zerokit's own directory goes on
    PYTHONPATH instead, for a checkout run without installing it."""
    home = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    extra = env.get("PYTHONPATH", "")
    return {**env, "PYTHONSAFEPATH": "1", "PYTHONPATH": home + (os.pathsep + extra if extra else "")}


def run_probe(ranks: int | None = None, nvme_path: str | None = None, quick: bool = False,
              progress: Callable[[str], None] | None = None, bind_cores_to_rank: bool = False,
              bind_core_list: str | None = None) -> tuple[MachinePerf, dict[str, Any]]:
    """Measure this machine; returns the MachinePerf and the raw measurements (for the table and the profile).

    `bind_cores_to_rank`: start each rank as `deepspeed --bind_cores_to_rank` starts it (`core_binding`), so the
    figures, CPU Adam's above all, are those of a job launched so."""
    if nvme_path is not None:
        if not nvme_path.strip():
            raise BadInput("--nvme-path is empty; give the NVMe mount, e.g. /local_nvme, or leave it out")
        if not os.path.isdir(nvme_path):
            raise BadInput(f"--nvme-path {nvme_path}: not a directory; give the NVMe mount, e.g. /local_nvme")
        if not os.access(nvme_path, os.W_OK):
            raise BadInput(f"--nvme-path {nvme_path}: not writable; choose a directory on the NVMe drive you can write")
        try:  # access() passes root everywhere: /sys/kernel refused the file a minute into the probe
            create_and_remove(nvme_path, ".zerokit-probe-")
        except OSError as e:
            raise BadInput(f"--nvme-path {nvme_path}: cannot create a file there ({e.strerror}); choose a directory "
                           "on the NVMe drive you can write") from None
        st = os.statvfs(nvme_path)
        if st.f_bavail * st.f_frsize < NVME_TEST_BYTES[quick]:  # the rank failed with ENOSPC a minute in
            from zerokit.units import format_bytes

            raise BadInput(f"--nvme-path {nvme_path}: {format_bytes(st.f_bavail * st.f_frsize)} free, and the probe "
                           f"writes a {format_bytes(NVME_TEST_BYTES[quick], binary=True)} test file there; free some "
                           "space or choose another directory on the NVMe drive")
    if ranks is None:
        ranks = _gpu_count() or 2
    if not 1 <= ranks <= MAX_RANKS:
        raise BadInput(f"--ranks must be 1..{MAX_RANKS}, got {ranks}")
    stale = stale_extension_locks()
    if stale:
        more = f" and {len(stale) - 1} more" if len(stale) > 1 else ""
        raise BadInput(f"stale JIT build lock {stale[0]}{more}: a killed build of a DeepSpeed op left it, and the "
                       "probe's ranks (like every DeepSpeed run here) would wait on it forever; remove it: rm "
                       + " ".join(stale))
    binding = core_binding(ranks, bind_core_list) if bind_cores_to_rank else None
    sweep_stale_probes()
    port = free_port()
    previous = _raise_on_sigterm()
    try:
        return _run_ranks(ranks, port, nvme_path, quick, progress, binding)
    finally:
        import signal

        for signum, handler in previous.items():
            if handler is not None:  # None: not installed from Python, nothing to put back
                signal.signal(signum, handler)


def stale_extension_locks(environ: Mapping[str, str] = os.environ) -> list[str]:
    """The `lock` files in torch's JIT extension cache that a killed build left: older than the preflight's
    STALE_LOCK_AGE_S, with no build running in their directory. torch's FileBaton waits on one forever, and the
    reference engines' deepspeed.initialize loads DeepSpeed's shared-memory comm op through it: such a lock held a
    probe at "[11/12] training steps ..." until it was interrupted (2026-12-08). Found as torch finds its cache
    ($TORCH_EXTENSIONS_DIR/<op>, else $XDG_CACHE_HOME or ~/.cache, then torch_extensions/<python and device>/<op>)
    without importing torch here."""
    from pathlib import Path

    from zerokit.launch.preflight import STALE_LOCK_AGE_S, probe_building

    custom = environ.get("TORCH_EXTENSIONS_DIR")
    if custom:
        root, pattern = Path(custom), "*/lock"
    else:
        root, pattern = Path(environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "torch_extensions"), "*/*/lock"
    now, stale = time.time(), []
    for path in sorted(root.glob(pattern)):
        try:
            old = path.is_file() and now - path.stat().st_mtime > STALE_LOCK_AGE_S
        except OSError:
            continue
        if old and not probe_building(str(path.parent)):
            stale.append(str(path))
    return stale


def _raise_on_sigterm() -> dict[int, Any]:
    """SIGTERM and SIGHUP become SystemExit, so the ranks are stopped on the way out (no rank outlives the probe) and
    its temp directory goes; the handlers they replaced, to put back. A hang-up (the terminal closed, the ssh session
    dropped) killed the probe outright: its ranks, SIGKILLed with it, could leave a JIT build lock behind
    (`stop_ranks`), and its temp directory stayed until the next probe."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return {}

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)
    return {signum: signal.signal(signum, stop) for signum in (signal.SIGTERM, signal.SIGHUP)}


PROBE_DIR_PREFIX = "zerokit-probe-"
"""A probe's temp directory: zerokit-probe-<pid>-<port>-<random>, in the system's temp directory."""


def sweep_stale_probes(directory: str | None = None, shm_directory: str = SHM_DIR) -> int:
    """Remove what probes killed outright (SIGKILL, the OOM killer) left behind: each one's temp directory and its
    port's DeepSpeed shared-memory buffers (69 MB a rank in the RAM-backed /dev/shm), once its process is gone. Its
    ranks died with it (`_die_with_parent`), and its NVMe test file was never linked. Only this user's directories,
    and only those of a pid no process holds; how many were removed."""
    import shutil

    directory = directory or tempfile.gettempdir()
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    removed = 0
    for name in names:
        parts = name[len(PROBE_DIR_PREFIX):].split("-", 2) if name.startswith(PROBE_DIR_PREFIX) else ()
        if len(parts) != 3 or not (parts[0].isdigit() and parts[1].isdigit()) or _alive(int(parts[0])):
            continue
        path = os.path.join(directory, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid():
            shutil.rmtree(path, ignore_errors=True)
            remove_shm_buffers(int(parts[1]), shm_directory)
            removed += 1
    return removed


def _alive(pid: int) -> bool:
    """Whether a process holds `pid` (another user's included)."""
    if pid <= 0:
        return True  # never a probe's: leave it alone
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: someone else's process
        return True
    return True


def core_binding(ranks: int, bind_core_list: str | None) -> list[tuple[int, list[str]]]:
    """(OMP_NUM_THREADS, command prefix) of each local rank under `deepspeed --bind_cores_to_rank`, from DeepSpeed's
    own `get_numactl_cmd` (deepspeed/utils/numa.py, which launch.py calls): numactl on the rank's share of the
    physical cores, or of `bind_core_list`'s. What it would stop at is bad input here, said first."""
    from zerokit.launch.preflight import binding_problem, deepspeed_quietly

    problem = binding_problem(ranks, bind_core_list, os.environ)
    if problem is not None:
        raise BadInput(f"{problem[0]}; {problem[1]}")
    with deepspeed_quietly():  # its import logs, and its package-manager check prints where dpkg has no numactl
        from deepspeed.utils.numa import get_numactl_cmd

        try:
            return [(n, list(cmd)) for n, cmd in (get_numactl_cmd(bind_core_list, ranks, r) for r in range(ranks))]
        except (AssertionError, ValueError, OSError) as e:  # its own refusals (a NUMA layout it cannot bind, say)
            raise BadInput(f"DeepSpeed's core binding refuses this machine ({type(e).__name__}: {e}); probe without "
                           "--bind-cores-to-rank, and launch without it too") from None


def _run_ranks(ranks: int, port: int, nvme_path: str | None, quick: bool,
               progress: Callable[[str], None] | None,
               binding: list[tuple[int, list[str]]] | None = None) -> tuple[MachinePerf, dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix=f"{PROBE_DIR_PREFIX}{os.getpid()}-{port}-") as tmp:
        result_file = os.path.join(tmp, "result.json")
        args = json.dumps({"nvme_path": nvme_path, "quick": quick, "result": result_file, "tmp": tmp})
        procs, logs = [], []
        for rank in range(ranks):
            log = open(os.path.join(tmp, f"rank{rank}.log"), "w+")  # noqa: SIM115 (closed below, after the ranks)
            logs.append(log)
            env, prefix = runner_env(rank, ranks, port), []
            if binding is not None:  # as deepspeed/launcher/launch.py starts a bound rank
                threads, prefix = binding[rank]
                env["OMP_NUM_THREADS"] = str(threads)
            procs.append(subprocess.Popen([*prefix, sys.executable, "-u", "-m", "zerokit.perf.probe", args], env=env,
                                          stdout=subprocess.PIPE if rank == 0 else log, stderr=log, text=True))
        try:
            for line in procs[0].stdout:  # rank 0 prints one progress line per measurement
                if progress is not None and is_progress(line):
                    progress(line.rstrip("\n"))
            deadline = time.monotonic() + WORKER_TIMEOUT_S
            codes = [p.wait(timeout=max(1.0, deadline - time.monotonic())) for p in procs]
        except BaseException:
            stop_ranks(procs)
            raise
        finally:
            for log in logs:
                log.flush()
            remove_shm_buffers(port)  # the reference training steps' DeepSpeed CPU allreduce buffers
        if any(codes) or not os.path.exists(result_file):
            bad = failed_rank(codes)
            logs[bad].seek(0)
            lines = [x.strip() for x in logs[bad].read().splitlines() if x.strip()]
            last = lines[-1] if lines else f"exit code {codes[bad]}"
            for log in logs:
                log.close()
            signum = signalled(codes[bad])
            if signum is not None:  # its log's last line is whatever it printed before, not why it stopped
                raise ZerokitError(killed_message(bad, signum))
            if "No module named 'torch'" in last:
                raise BadInput("zerokit probe needs torch: pip install 'zerokit[deepspeed]'")
            raise ZerokitError(f"probe rank {bad} failed: {last}")
        for log in logs:
            log.close()
        with open(result_file, encoding="utf-8") as f:
            data = json.load(f)
    if binding is not None:
        data["core_binding"] = {"threads_per_rank": binding[0][0], "rank0_command": binding[0][1]}
    return _machine_from_measurements(data), data


def failed_rank(codes: Sequence[int]) -> int:
    """The rank whose failure stopped the probe, from the ranks' exit codes: one a signal stopped (the OOM killer's
    SIGKILL, a SIGTERM from outside: `signalled`) before one that raised, for the others then fail in their next
    collective ("Connection closed by peer"): with rank 1 killed, the probe blamed rank 0 and quoted gloo's error;
    rank 0 killed, a bitsandbytes warning it had printed before. Rank 0 where none failed (no result written)."""
    return next((r for r, c in enumerate(codes) if signalled(c)), next((r for r, c in enumerate(codes) if c), 0))


def signalled(code: int) -> int | None:
    """The signal that stopped a rank of exit code `code`: killed by it (a negative code), or SIGINT, SIGTERM or
    SIGHUP, which a rank turns into exit code 128 + the signal (`_stop_on_signals`); None otherwise."""
    import signal

    if code < 0:
        return -code
    return code - 128 if code - 128 in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP) else None


def killed_message(rank: int, signum: int) -> str:
    """The probe's error for a rank stopped by signal `signum`."""
    import signal

    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    why = (", as the kernel's out-of-memory killer stops a process (see `dmesg`): probe with fewer --ranks or more "
           "memory free" if signum == signal.SIGKILL else ", sent from outside the probe")
    return f"probe rank {rank} was killed by {name}{why}; the other ranks stopped with it"


def stop_ranks(procs: Sequence[subprocess.Popen], grace_s: float = STOP_GRACE_S) -> None:
    """Stop the ranks of an interrupted probe: SIGTERM, which each turns into SystemExit (`_stop_on_signals`), so its
    finally blocks run, then SIGKILL for any still there after `grace_s`. Killed outright, a rank inside torch's JIT
    build of a DeepSpeed op (the shared-memory comm op that deepspeed.initialize builds on the CPU accelerator) left
    its FileBaton `lock` in ~/.cache/torch_extensions, and every later DeepSpeed run there waited on it forever.
    Not airtight: a signal the kernel hands to another of the rank's threads (OpenMP's, gloo's) waits until the main
    thread returns to Python, which a main thread blocked in one long call (waiting for ninja) may not do in time."""
    import signal

    live = [p for p in procs if p.poll() is None]
    for p in live:
        try:
            p.send_signal(signal.SIGTERM)
        except OSError:
            pass
    deadline = time.monotonic() + grace_s
    for p in live:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def is_progress(line: str) -> bool:
    """Whether a line of rank 0's stdout is the probe's own (`[3/12] ...` and its indented result), not what the
    libraries it runs print there: DeepSpeed logs to stdout ("[WARNING] [real_accelerator.py:213:get_accelerator]
    Setting accelerator to CPU ...", "... deepspeed_shm_comm_op built successfully"), which read as the probe's."""
    return bool(re.match(r"\[\d+/\d+\] |      \S", line))


def _gpu_count() -> int:
    """GPUs visible here, asked of nvidia-smi/rocm-smi-free torch in a child (the parent stays torch-free)."""
    try:
        out = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                             capture_output=True, text=True, timeout=120, check=False, env=safe_path(dict(os.environ)))
        return int(out.stdout.strip() or 0)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return 0


def product_share(matmul: Sequence[Sequence[float]], product: Sequence[Sequence[float]]) -> str:
    """`64: 22%, 128: 19%, ...`: one product's time (the forward's, or the input gradient's) over a linear layer's
    forward and backward, by size. A share no timing can have (not between 0 and 100%: a `--quick` probe's smallest
    sizes read 8510%, their products too brief to time) prints as `noise`."""
    def share(fb: float, f: float) -> str:
        ratio = fb / (3.0 * f) if f > 0 else 0.0
        return f"{ratio:.0%}" if 0 < ratio < 1 else "noise"

    return ", ".join(f"{int(n)}: {share(fb, f)}" for (n, fb), (_, f) in zip(matmul, product))


def halve_to_fit(value: int, floor: int, cost: Callable[[int], float], budget: float = STEP_BUDGET_S) -> int:
    """`value` halved until `cost(value)` is within `budget`, but not below `floor` (returned even if over): the
    tokens a reference step runs on this machine."""
    while value > floor and cost(value) > budget:
        value = max(floor, value // 2)
    return value


def more_rounds(rounds: int, timed_s: float) -> bool:
    """Whether the reference engines run another alternated round, after `rounds` rounds and `timed_s` seconds of
    timed steps."""
    least, most = ENGINE_ROUNDS
    return rounds < most and (rounds < least or timed_s < ENGINE_TIMED_S)


def linear_shapes(flops: ModelFlops, tokens: int) -> dict[tuple[int, int, int], float]:
    """The weight matmuls of one micro-batch of `tokens` as {(rows, in, out): how many}: the products a linear
    layer's forward and backward run, each as the matmul curve measures them."""
    shapes: dict[tuple[int, int, int], float] = {}
    for m in flops.layer_matmuls + flops.head_matmuls:
        key = (max(1, round(tokens * m.token_share)), m.in_features, m.out_features)
        shapes[key] = shapes.get(key, 0.0) + m.copies
    return shapes


def quantized_rows(rows: int, shape: tuple[int, int], matmul: Sequence[Sequence[float]]) -> int:
    """The rows the probe's 4-bit linear pairs run: `rows` halved (down to 16) until one pair at the largest weight
    `shape` (in, out), two linears' forward and backward at the bf16 curve `matmul` ([[size, FLOP/s], ...]), fits
    QUANTIZED_PAIR_S."""
    curve = tuple((float(n), float(f)) for n, f in matmul)
    n_in, n_out = shape
    return halve_to_fit(rows, min(rows, 16), lambda r: 2 * 6.0 * r * n_in * n_out
                        / throughput_at(curve, (r * n_in * n_out) ** (1 / 3)), QUANTIZED_PAIR_S)


def fit_quantized(points: Sequence[Sequence[float]]) -> dict[str, Any]:
    """The probe's 4-bit linear figures from [weight elements, extra seconds a pass] points: a least-squares line,
    the intercept a cost per module and pass, the slope the seconds per element. Where noise leaves no positive slope
    the whole cost is per module (the rate then the fastest a profile may hold). Both within what a profile loads."""
    n = len(points)
    mx = sum(e for e, _ in points) / n
    my = sum(t for _, t in points) / n
    slope = sum((e - mx) * (t - my) for e, t in points) / max(sum((e - mx) ** 2 for e, _ in points), 1.0)
    if slope <= 0:
        rate, overhead = MAX_BANDWIDTH, my
    else:
        rate, overhead = 1.0 / slope, my - slope * mx
    return {"points": [list(p) for p in points], "elements_per_s": min(max(rate, MIN_RATE), MAX_BANDWIDTH),
            "overhead_s": min(max(overhead, 0.0), 1.0)}


def quantized_summary(fit: Mapping[str, Any]) -> str:
    """A 4-bit linear fit (`fit_quantized`) in words: where noise left no cost per element, the fit's rate is
    MAX_BANDWIDTH, which read "100000000 M elements/s"."""
    per_module = f"{fit['overhead_s'] * 1e6:.0f} us per module and pass"
    if fit["elements_per_s"] >= MAX_BANDWIDTH:
        return per_module + " (no cost per weight element stood out of the noise)"
    return per_module + f" + its weight at {fit['elements_per_s'] / 1e6:,.0f} M elements/s"


def linear_correction(perf: MachinePerf, timed: Sequence[Sequence[float]], dtype: str = "bf16") -> float:
    """Seconds the timed linears ([rows, in, out, how many, seconds of one forward and backward], ...) took beyond
    what `perf`'s matmul curve gives them, summed: how far a model's own matmul shapes run from the square products
    the curve measured. On a CPU that emulates bf16 the rate varies with the shape at one size (2.3-5.9 GFLOP/s
    for the products of two small llamas, 3.1-3.3 for the squares): the probe's reference llama, priced by the
    curve alone, came out at 10.8 s a step against 8.6 s in plain PyTorch, and `compute_scale` took that for the
    engine's doing (x 0.47 where the engine added nothing)."""
    return sum(n * (t - 6.0 * m * k * o / perf.matmul_flops_at(dtype, (m * k * o) ** (1 / 3)))
               for m, k, o, n, t in timed)


def engine_setups(hidden: int) -> dict[str, tuple[int, BufferSettings | None]]:
    """The reference's three engines (`Probe.engine_steps`) as (ZeRO stage, a plan's buffers for this hidden size, or
    None for DeepSpeed's default buckets): what the probe trains and what `engine_figures` prices, one table."""
    return {"zero2": (2, None), "zero2_plan": (2, buffer_ladder(hidden, 2)[0]),
            "zero3_plan": (3, buffer_ladder(hidden, 3)[0])}


def engine_figures(partial: MachinePerf, config: dict[str, Any], measured: Mapping[str, float],
                   timed: Sequence[Sequence[float]], ranks: int, seq: int, micro_batch: int,
                   host: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The engine figures (`compute_scale`, `bucket_flush_s`, `zero3_module_overhead_s`) of the reference llama
    `config` from its three engines' measured step times (`engine_setups`, seconds) and its timed linears, against
    the time model on `partial` (the kernel figures, no engine's): `Probe.engine_steps` documents the derivation.
    Pure, so that a committed probe's figures can be derived again from what it measured, under today's time model
    (tests/test_probe_cli.py holds every one to what it wrote). `host`: a GPU's host timings at a few tokens
    (`Probe.host_floor`), whose optimizer step the ZeRO-1/2 engines wait for beyond the device's
    (`zerokit.perf.model.host_excess`), and of which `host_figures` makes the host's figures."""
    from zerokit.models.params import count_parameters
    from zerokit.perf.flops import model_flops
    from zerokit.perf.model import flushes, step_time

    setups = engine_setups(config["hidden_size"])
    parameters = count_parameters(config)[0]
    default = {"overlap_comm": True, "reduce_bucket_size": 5e8, "allgather_bucket_size": 5e8}

    def predict(stage: int, buffers: BufferSettings | None) -> Any:
        sizes = default if buffers is None else {
            "overlap_comm": buffers.overlap_comm, "reduce_bucket_size": buffers.reduce_bucket_size,
            "allgather_bucket_size": buffers.allgather_bucket_size,
            "prefetch_bucket_size": buffers.prefetch_bucket_size,
            "persistence_threshold": buffers.param_persistence_threshold,
            "reuse_distance": buffers.max_live_parameters}
        return step_time(config, partial, parameters=parameters, seq_len=seq, micro_batch=micro_batch,
                         gpus_per_node=ranks, zero_stage=stage, **sizes)

    predicted = {name: predict(stage, buffers) for name, (stage, buffers) in setups.items()}
    # the model's time for everything but compute and the engine's own costs (flushes, ZeRO-3's hooks)
    rest = {name: t.step_time_s - t.compute_s - t.overhead_s for name, t in predicted.items()}
    # a GPU host's optimizer step beyond the device's: the ZeRO-2 engines wait for it (`host_excess`)
    waits = {name: max(0.0, host["step_s"] - predicted[name].optimizer_s) if host and stage < 3 else 0.0
             for name, (stage, _) in setups.items()}
    engine = {name: measured[name] - rest[name] - waits[name] for name in setups}  # compute, the engine's costs
    # the reference's kernels: its weight matmuls as their own shapes run here, the rest as the figures give it
    compute = predicted["zero2"].compute_s + linear_correction(partial, timed)
    measured_scale = engine["zero2"] / compute
    scale = min(COMPUTE_SCALE_BOUNDS[1], max(COMPUTE_SCALE_BOUNDS[0], measured_scale))
    mf = model_flops(config)
    extra_flushes = (flushes(mf, parameters, setups["zero2_plan"][1].reduce_bucket_size)
                     - flushes(mf, parameters, default["reduce_bucket_size"]))
    flush = min(1.0, max(0.0, (engine["zero2_plan"] - engine["zero2"]) / max(extra_flushes, 1)))
    modules = model_flops(config).parameter_modules
    extra = engine["zero3_plan"] - engine["zero2_plan"]  # the hooks the step waited for (`exposed_hooks`)
    if ranks > 1 and partial.device == "gpu":
        # several GPUs hide the hooks behind the step's compute: what shows is what exceeds it, and a step that
        # shows none bounds them by its compute (then the default, where that is lower)
        kernels = scale * compute
        extra = extra + kernels if extra > 0 else min(2 * modules * DEFAULT_ZERO3_MODULE_OVERHEAD_S, kernels)
    hooks = min(1.0, max(0.0, extra / (2 * modules)))
    figures = host_figures(config, host, engine["zero2_plan"], extra_flushes) if host else {}
    return {**figures, "compute_scale": scale, "measured_compute_scale": measured_scale, "bucket_flush_s": flush,
            "zero3_module_overhead_s": hooks,
            "step_s": measured["zero2"], "plan_buckets_step_s": measured["zero2_plan"],
            "zero3_step_s": measured["zero3_plan"], "predicted_compute_s": compute,
            "curve_compute_s": predicted["zero2"].compute_s, "linears": [list(t) for t in timed],
            "predicted_rest_s": rest["zero2"], "predicted_plan_buckets_rest_s": rest["zero2_plan"],
            "predicted_zero3_rest_s": rest["zero3_plan"], "extra_flushes": extra_flushes,
            "parameter_modules": modules, "model": config, "seq_len": seq, "micro_batch": micro_batch}


LINEAR_FREE_FIGURES = ("bucket_flush_s", "zero3_module_overhead_s", "predicted_rest_s",
                       "predicted_plan_buckets_rest_s", "predicted_zero3_rest_s", "extra_flushes")
"""`engine_figures` that do not rest on the timed linears: the flush and hook figures are differences of two engines'
steps less the model's rest of each, which counts no compute (on a CPU, only as what the ZeRO-3 reference's gathers
hide behind: its forward at least, where they take a few milliseconds) (`engine_figures_again`'s `linears`)."""


def engine_figures_again(measurements: Mapping[str, Any], linears: bool = True) -> dict[str, Any] | None:
    """`engine_figures` of a probe's stored `measurements` (its `engine_step` steps and timed linears, the kernel
    figures beside them) under today's time model: what that probe would write now. None where it kept no reference
    steps to derive from (a probe from before the plan-bucket engine or the timed linears). `linears` False: a probe
    from before the timed linears (2026-11-27) too, priced without them, of whose figures only `LINEAR_FREE_FIGURES`
    are what it would write now."""
    engine = measurements.get("engine_step")
    if not (engine and "plan_buckets_step_s" in engine and ("linears" in engine or not linears)):
        return None
    partial = _machine_from_measurements({**measurements, "engine_step": None})
    steps = {"zero2": engine["step_s"], "zero2_plan": engine["plan_buckets_step_s"],
             "zero3_plan": engine["zero3_step_s"]}
    return engine_figures(partial, engine["model"], steps, engine.get("linears", ()), measurements["ranks"],
                          engine["seq_len"], engine["micro_batch"], engine.get("host"))


def host_figures(config: dict[str, Any], host: Mapping[str, Any], plan_engine: float,
                 extra_flushes: int) -> dict[str, float]:
    """The GPU host's figures (`MachinePerf.host_op_s`, `host_adapter_s`, `host_flush_s`, `host_optimizer_s`) from
    `Probe.host_floor`'s timings of the reference `config` at a few tokens (`host`), `engine_figures`'s part:
    - a kernel: the ZeRO-2 reference's forward and backward over the kernels the time model counts for it;
    - an adapted linear: the same with LoRA on every linear, less without, over the adapted linears;
    - a flush: the plan-bucket engine's forward and backward at a few tokens, less the default buckets', over the
      `extra_flushes`. A host timing from before the probe timed that engine at a few tokens (2026-11-28) takes
      the most the time model allows from the plan-bucket engine's forward and backward at the reference's full
      tokens (`plan_engine`: its step less the rest of the model's and the optimizer's host wait): that, less
      the default buckets' host time, over the extra flushes (a micro-batch takes at least the host's time; one
      the device paced makes the figure less);
    - the optimizer step: the ZeRO-2 reference's, timed to the device's end.
    Each is kept within the range a profile accepts for it (`PROFILE_RANGES`: a second for the per-kernel, per-linear
    and per-flush figures, a minute for the optimizer step), so that what the probe writes, `zerokit plan --hardware`
    reads."""
    from zerokit.perf.flops import model_flops
    from zerokit.perf.model import host_kernels

    fb, optimizer = host["forward_backward_s"], host["step_s"]
    out = {"host_op_s": fb / host_kernels(model_flops(config)), "host_optimizer_s": optimizer,
           "host_adapter_s": 0.0, "host_flush_s": 0.0}
    if host.get("lora_forward_backward_s") is not None and host.get("adapted_linears"):
        out["host_adapter_s"] = max(0.0, (host["lora_forward_backward_s"] - fb) / host["adapted_linears"])
    extra = max(extra_flushes, 1)
    plan = host.get("plan_buckets_forward_backward_s")
    out["host_flush_s"] = max(0.0, ((plan_engine if plan is None else plan) - fb) / extra)
    return {k: min(v, PROFILE_RANGES[k][1]) for k, v in out.items()}


def adapted_linears(module: Any) -> int:
    """The linears PEFT's LoRA adapted in `module` (its `LoraLayer`s): what `host_figures` shares the LoRA engine's
    extra host time over (7 a decoder layer of the probe's llama reference, counted rather than assumed)."""
    from peft.tuners.lora import LoraLayer

    return sum(isinstance(m, LoraLayer) for m in module.modules())


def ascending_curve(points: Sequence[Sequence[float]]) -> list[list[float]]:
    """[[size, rate], ...] sorted by size, the points at one size merged into one at their mean rate: a profile's
    curves must ascend strictly. The llama blocks' widths can meet at one activation size where a wide one runs half
    its tokens (640 x 512 and 320 x 1024 are both 655,360 bytes); the probe wrote both points, and `zerokit plan
    --hardware` refused the profile it had just written ("sizes must be strictly ascending")."""
    merged: dict[float, list[float]] = {}
    for size, rate in points:
        merged.setdefault(float(size), []).append(float(rate))
    return [[size, sum(rates) / len(rates)] for size, rates in sorted(merged.items())]


def _curves(measured: dict[str, list[list[float]]] | None) -> dict[str, tuple[tuple[float, float], ...]]:
    """A measurement's {dtype: [[size, rate], ...]} as MachinePerf holds its curves (none measured: empty)."""
    return {d: tuple((float(s), float(f)) for s, f in pts) for d, pts in (measured or {}).items()}


def _machine_from_measurements(m: dict[str, Any]) -> MachinePerf:
    from zerokit.perf.machine import DEFAULT_NOTES

    sources = {k: "probe" for k in ("matmul", "matmul_forward", "matmul_input_grad", "attention", "elementwise",
                                    "op_overhead_s", "intra_node_bandwidth", "collective_latency_s", "pcie",
                                    "cpu_adam_params_per_s", "device_adam_params_per_s")}
    sources["cpu_adam_params_per_s"] = m["cpu_adam"]["source"]
    sources["device_adam_params_per_s"] = m["device_adam"]["source"]
    sources["host_cast_params_per_s"] = ("probe" if m["cpu_adam"].get("cast_params_per_s_node")
                                         else "default: " + DEFAULT_NOTES["host_cast_params_per_s"])
    sources["h2d_cast_params_per_s"] = ("probe" if m["copies"].get("h2d_cast_params_per_s")
                                        else "default: " + DEFAULT_NOTES["h2d_cast_params_per_s"])
    sources["dropout_elements_per_s"] = ("probe" if m.get("dropout_elements_per_s")
                                         else "default: " + DEFAULT_NOTES["dropout_elements_per_s"])
    quantized = m.get("quantized_linear") or {}
    sources["quantized_linear"] = "probe" if quantized else "default: " + DEFAULT_NOTES["quantized_linear"]
    nvme = m.get("nvme")
    if nvme:
        sources["nvme"] = "probe"
        read, write = nvme["read"], nvme["write"]
    else:
        sources["nvme"] = "default: " + DEFAULT_NOTES["nvme"]
        read, write = DEFAULT_NVME_READ, DEFAULT_NVME_WRITE
    coll = m.get("collectives") or {}
    sources["inter_node_bandwidth"] = "default: one node measured; give --inter-node-bandwidth for multi-node plans"
    intra = coll.get("bus_bandwidth", 0.0)
    if not intra:  # one rank: no collective to time
        intra, sources["intra_node_bandwidth"] = unmeasured_intra_node(m["device"], m["copies"]["h2d_pinned"], 1e9)
    for k in ("zero3_module_overhead_s", "bucket_flush_s", "step_overhead_s"):
        sources[k] = "default: " + DEFAULT_NOTES.get(k, "not measured by the probe")
    engine = m.get("engine_step") or {}
    sources["compute_scale"] = "probe" if engine else "default: " + DEFAULT_NOTES["compute_scale"]
    measured_scale = engine.get("measured_compute_scale", engine.get("compute_scale"))
    if engine and measured_scale != engine["compute_scale"]:
        sources["compute_scale"] = (f"probe, held at its bound: the reference step measured x {measured_scale:.2f}, "
                                    "so the kernel figures were taken under contention (other load, or more threads "
                                    "than cores); re-run the probe on an idle machine")
    hooks = engine.get("zero3_module_overhead_s", (m.get("zero3") or {}).get("module_overhead_s"))
    if hooks is not None:
        sources["zero3_module_overhead_s"] = "probe"
    flush = engine.get("bucket_flush_s")
    if flush is not None:
        sources["bucket_flush_s"] = "probe"
    host = {k: engine.get(k, 0.0) for k in HOST_FIELDS}
    for k in HOST_FIELDS:
        sources[k] = "probe" if "host_op_s" in engine else "default: " + DEFAULT_NOTES["host"]
    return MachinePerf(
        name=m["name"], device=m["device"],
        matmul=_curves(m["matmul"]), matmul_forward=_curves(m.get("matmul_forward")),
        matmul_input_grad=_curves(m.get("matmul_input_grad")),
        attention=_curves(m.get("attention")),
        elementwise=tuple((s, b) for s, b in ascending_curve(m["elementwise"])), op_overhead_s=m["op_overhead_s"],
        intra_node_bandwidth=intra, inter_node_bandwidth=DEFAULT_INTER_NODE_BANDWIDTH,
        collective_efficiency=1.0, collective_latency_s=coll.get("latency_s", 30e-6),
        comm_overlaps_compute=m["device"] == "gpu",
        h2d_pinned=m["copies"]["h2d_pinned"], d2h_pinned=m["copies"]["d2h_pinned"],
        h2d_pageable=m["copies"]["h2d_pageable"], d2h_pageable=m["copies"]["d2h_pageable"],
        cpu_adam_params_per_s=m["cpu_adam"]["params_per_s_node"],
        host_cast_params_per_s=m["cpu_adam"].get("cast_params_per_s_node", 0.0),
        h2d_cast_params_per_s=m["copies"].get("h2d_cast_params_per_s", 0.0),
        device_adam_params_per_s=m["device_adam"]["params_per_s"],
        nvme_read=read, nvme_write=write, dropout_elements_per_s=m.get("dropout_elements_per_s", 0.0),
        dequant_elements_per_s=quantized.get("elements_per_s", 0.0),
        quantized_linear_overhead_s=quantized.get("overhead_s", 0.0),
        zero3_module_overhead_s=DEFAULT_ZERO3_MODULE_OVERHEAD_S if hooks is None else hooks,
        bucket_flush_s=DEFAULT_BUCKET_FLUSH_S if flush is None else flush,
        step_overhead_s=0.0, compute_scale=engine.get("compute_scale", 1.0), ranks_measured=m["ranks"],
        sources=sources, **host)


# ---------------------------------------------------------------------------------------------------------------------
# The worker: one per rank, started by run_probe with the runner's environment.


class _Worker:
    def __init__(self, opts: dict[str, Any]):
        import torch
        import torch.distributed as dist

        self.torch, self.dist, self.opts = torch, dist, opts
        self.rank, self.ranks = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        self.gpu = torch.cuda.is_available()
        if self.gpu:
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
            self.device = torch.device("cuda", torch.cuda.current_device())
        else:
            self.device = torch.device("cpu")
        self.quick = bool(opts.get("quick"))
        self.budget = 0.05 if self.quick else (0.25 if not self.gpu else 0.1)
        dist.init_process_group("nccl" if self.gpu else "gloo", rank=self.rank, world_size=self.ranks)
        self.step_no, self.steps = 0, 12
        self._linear_times: dict[tuple[int, int, int], float] = {}

    def say(self, text: str) -> None:
        if self.rank == 0:
            print(text, flush=True)

    def sync(self) -> None:
        if self.gpu:
            self.torch.cuda.synchronize()

    def mean(self, value: float) -> float:
        """The mean over the ranks of a figure each measured."""
        t = self.torch.tensor([value], dtype=self.torch.float64, device=self.device)
        self.dist.all_reduce(t)
        return float(t.item()) / self.ranks

    def fixed(self, fn: Callable[[], Any], reps: int, warm_up: bool = True) -> float:
        """Seconds per call over a fixed count (collectives must be called as often on every rank), after one
        untimed call unless `warm_up` is False (the caller warmed `fn` up already)."""
        self.dist.barrier()
        if warm_up:
            fn()
        self.sync()
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        self.sync()
        return (time.perf_counter() - start) / reps

    def seconds(self, fn: Callable[[], Any], min_reps: int = 3) -> float:
        """Seconds per call: one warm-up, then calls timed one by one until the time budget is spent (all ranks at
        once); the median call, so a moment of outside load does not decide the figure."""
        return self._median_over_budget((fn,), lambda t: t[0], min_reps)

    def _median_over_budget(self, fns: Sequence[Callable[[], Any]], sample: Callable[[list[float]], float],
                            minimum: int) -> float:
        """After one warm-up call of each (all ranks at once), `fns` timed in turn, round after round, until the time
        budget is spent and at least `minimum` rounds ran; the median of `sample` of each round's seconds."""
        self.dist.barrier()
        for fn in fns:
            fn()
        self.sync()
        samples: list[float] = []
        spent = 0.0
        while len(samples) < minimum or (spent < self.budget and len(samples) < 10000):
            times = []
            for fn in fns:
                start = time.perf_counter()
                fn()
                self.sync()
                times.append(time.perf_counter() - start)
            samples.append(sample(times))
            spent += sum(times)
        samples.sort()
        return samples[len(samples) // 2]

    def ffn(self, hidden: int) -> int:
        """A reference llama's MLP width: 8/3 of the hidden size, on a GPU rounded up to a multiple of 256 as Llama's
        own configs are (11008 for 4096). A GPU runs a matmul dimension such as 5461 on slower kernels than the
        square powers of two the matmul curve measures: on an H100 a 2048-wide reference with 5461 ran 1.7x slower
        than a 0.9B llama of the same FLOPs with 5504, in plain PyTorch too (0.307 vs 0.183 s/step), and the probe
        took that for the engine's cost. The CPU references keep the widths their committed calibration used."""
        width = hidden * 8 // 3
        return -(-width // 256) * 256 if self.gpu else width

    def begin(self, what: str) -> float:
        self.step_no += 1
        self.say(f"[{self.step_no}/{self.steps}] {what} ...")
        return time.perf_counter()

    # -- measurements ---------------------------------------------------------------------------------------------

    def matmul(self) -> tuple[dict[str, list[list[float]]], ...]:
        """FLOP/s of a linear layer's forward and backward (x W^T, then g W and g^T x: 3 products of 2n^3 FLOPs), the
        pattern training runs: on some CPUs a transposed operand takes another kernel than a plain a @ b. Then the
        forward product alone (what checkpointing recomputes), and the backward's input-gradient product alone (all
        a frozen LoRA base runs in its backward), at each size: on this project's CPUs the forward took 17-26% of the
        forward and backward, not a third, and the input gradient 60-80% of it on the AMD EPYC (emulated bf16)."""
        torch = self.torch
        sizes = QUICK_SIZES if self.quick else (GPU_SIZES if self.gpu else CPU_SIZES)
        out: dict[str, list[list[float]]] = {}
        forward: dict[str, list[list[float]]] = {}
        input_grad: dict[str, list[list[float]]] = {}
        for name, ns in sizes.items():
            if self.gpu:
                torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
            points, forward_points, input_points = [], [], []
            for n in ns:
                fwd_bwd, fwd, in_grad = self._linear(n, n, n, name)
                points.append([float(n), self.mean(6.0 * n**3 / self.seconds(fwd_bwd))])
                forward_points.append([float(n), self.mean(2.0 * n**3 / self.seconds(fwd))])
                input_points.append([float(n), self.mean(2.0 * n**3 / self.seconds(in_grad))])
            out[name], forward[name], input_grad[name] = points, forward_points, input_points
            if self.gpu:
                torch.backends.cuda.matmul.allow_tf32 = False
        return out, forward, input_grad

    def _linear(self, rows: int, n_in: int, n_out: int, dtype: str = "bf16") -> tuple[Callable[[], Any], ...]:
        """(forward and backward, forward alone, the input gradient alone) of one linear layer: x [rows, in] by
        W [out, in]; the input gradient as autograd runs it for a frozen W (the graph kept, the gradient dropped)."""
        torch = self.torch
        dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "tf32": torch.float32}
        linear = torch.nn.functional.linear
        x = torch.randn(rows, n_in, device=self.device).to(dtypes[dtype]).requires_grad_()
        w = torch.randn(n_out, n_in, device=self.device).to(dtypes[dtype]).requires_grad_()
        g = torch.randn(rows, n_out, device=self.device).to(dtypes[dtype])

        def fwd_bwd() -> None:
            torch.autograd.backward(linear(x, w), g, inputs=[x, w])
            x.grad = w.grad = None

        graph: list[Any] = []  # the frozen forward, built by the first (untimed warm-up) call: `linears` needs none

        def in_grad() -> Any:
            if not graph:
                graph.append(linear(x, w.detach()))
            return torch.autograd.grad(graph[0], x, g, retain_graph=True)
        return fwd_bwd, lambda: linear(x, w), in_grad

    def linears(self, flops: ModelFlops, tokens: int) -> list[list[float]]:
        """A model's own weight matmuls at `tokens` tokens a micro-batch: [rows, in, out, how many, seconds of one
        bf16 forward and backward], each shape timed as the matmul curve's points are (once per probe)."""
        timed = []
        for (m, k, n), count in linear_shapes(flops, tokens).items():
            t = self._linear_times.get((m, k, n))
            if t is None:
                t = self._linear_times[m, k, n] = self.mean(self.seconds(self._linear(m, k, n)[0]))
            timed.append([m, k, n, count, t])
        return timed

    def attention(self) -> dict[str, list[list[float]]]:
        """FLOP/s of causal scaled_dot_product_attention forward and backward in bf16 (the kernel transformers' sdpa
        path calls), counted as the time model counts it: 12 x heads x head_dim per (query, key) pair computed."""
        torch = self.torch
        sdpa = torch.nn.functional.scaled_dot_product_attention
        seqs = (64, 128) if self.quick else ((512, 1024, 2048, 4096) if self.gpu else (64, 128, 256, 512))
        heads, hd, batch = 4, 64, (4 if self.gpu else 2)
        points = []
        for s in seqs:
            q, k, v = (torch.randn(batch, heads, s, hd, device=self.device).to(torch.bfloat16).requires_grad_()
                       for _ in range(3))
            g = torch.randn(batch, heads, s, hd, device=self.device).to(torch.bfloat16)

            def fwd_bwd(q=q, k=k, v=v, g=g) -> None:
                torch.autograd.backward(sdpa(q, k, v, is_causal=True), g, inputs=[q, k, v])
                q.grad = k.grad = v.grad = None
            t = self.seconds(fwd_bwd)
            pairs = s * (s + 1) / 2
            points.append([(pairs * hd) ** (1 / 3), self.mean(12.0 * batch * heads * hd * pairs / t)])
        return {"bf16": points}

    def elementwise(self) -> tuple[list[list[float]], float]:
        """Bytes/s of a bf16 product z = x * y (read two, write one) by tensor size, and one kernel's launch time."""
        torch = self.torch
        exps = (16, 20) if self.quick else ((20, 24, 28) if self.gpu else (14, 16, 18, 20, 22, 24))
        curve = []
        for e in exps:
            n = 1 << e
            x = torch.randn(n, device=self.device).to(torch.bfloat16)
            y, z = x.clone(), torch.empty_like(x)
            t = self.seconds(lambda x=x, y=y, z=z: torch.mul(x, y, out=z))
            curve.append([float(n * 2), self.mean(3 * n * 2 / t)])
        tiny = torch.ones(1, device=self.device)

        def launches() -> None:
            for _ in range(100):
                tiny.add_(1.0)
        overhead = self.mean(self.seconds(launches) / 100)
        return curve, overhead

    def dropout(self) -> float:
        """Elements/s of a bf16 dropout forward (p = 0.05, training): the random mask and its product, what LoRA's
        dropout runs on every adapted module's input."""
        torch = self.torch
        n = 1 << (16 if self.quick else (24 if self.gpu else 20))
        x = torch.randn(n, device=self.device).to(torch.bfloat16)
        t = self.seconds(lambda: torch.nn.functional.dropout(x, 0.05, True))
        return self.mean(n / t)

    def quantized_linears(self, matmul: Sequence[Sequence[float]] = ()) -> dict[str, Any] | None:
        """QLoRA's bitsandbytes 4-bit linears (NF4, double quantization, bf16 compute, frozen, LoRA-adapted) against
        the bf16 linears they replace, forward and backward at several weight shapes: the extra seconds a pass, fitted
        as a fixed cost per module plus the weight's elements at a rate (bitsandbytes dequantizes the whole weight on
        every call). None where bitsandbytes is not installed or cannot run on this device.

        `matmul`: the bf16 linear curve just measured ([[size, FLOP/s], ...]). Where one pair of the largest shape
        would take over QUANTIZED_PAIR_S by it, fewer rows run (halved, down to 16): the dequantization is a cost per
        weight, not per row, and on a CPU that emulates bf16 the pairs' matmuls took 84 s of a 155 s probe at 512
        rows, and 21-27 s at 128, while the difference they were there to show drowned in their noise."""
        try:
            import bitsandbytes as bnb
        except Exception:  # noqa: BLE001 -- not installed, or no build for this platform: the default stands
            return None
        rows = 128 if self.quick else (4096 if self.gpu else 512)
        shapes = (((128, 128), (128, 512), (512, 512)) if self.quick else
                  ((2048, 2048), (4096, 4096), (4096, 11008)) if self.gpu else
                  ((256, 256), (512, 1024), (1024, 2048)))
        if matmul:
            rows = quantized_rows(rows, shapes[-1], matmul)
        points = []
        try:
            for n_in, n_out in shapes:
                extra = self._quantized_extra(bnb, rows, n_in, n_out)
                points.append([float(n_in * n_out), self.mean(extra / 2.0)])  # two passes: forward, input gradient
        except Exception:  # noqa: BLE001 -- bitsandbytes without a kernel for this device: the default stands
            return None
        return {**fit_quantized(points), "rows": rows}

    def _quantized_extra(self, bnb: Any, rows: int, n_in: int, n_out: int) -> float:
        """Seconds a frozen 4-bit linear's forward and backward take beyond a frozen bf16 linear's, each adapted by a
        rank-8 LoRA as `peft.get_peft_model` wraps it (where peft is installed): PEFT's 4-bit layer clones the base's
        output and runs its own casts, which cost as much here as the dequantization (a miniature llama's 28 linears:
        19 ms a micro-batch wrapped, 7 ms bare, against 15-19 ms measured in the model)."""
        torch = self.torch
        w = torch.randn(n_out, n_in) * 0.02
        plain = torch.nn.Linear(n_in, n_out, bias=False, device=self.device, dtype=torch.bfloat16)
        plain.weight.data.copy_(w)
        plain.weight.requires_grad_(False)
        four = bnb.nn.Linear4bit(n_in, n_out, bias=False, compute_dtype=torch.bfloat16, quant_type="nf4",
                                 compress_statistics=True, quant_storage=torch.uint8)
        four.weight = bnb.nn.Params4bit(w.to(torch.bfloat16), requires_grad=False, quant_type="nf4",
                                        compress_statistics=True, quant_storage=torch.uint8)
        four = four.to(self.device)
        if not four.weight.bnb_quantized:  # a CPU tensor stays put: quantize it where it is
            four.weight._quantize(self.device)
        layers = [_adapted(torch, plain), _adapted(torch, four)]
        x = torch.randn(rows, n_in, device=self.device).to(torch.bfloat16).requires_grad_()
        g = torch.randn(rows, n_out, device=self.device).to(torch.bfloat16)

        def passes(layer: Any) -> None:
            trained = [x, *(p for p in layer.parameters() if p.requires_grad)]
            torch.autograd.backward(layer(x), g, inputs=trained)
            for t in trained:
                t.grad = None

        return self.paired_difference(lambda: passes(layers[1]), lambda: passes(layers[0]))

    def paired_difference(self, slow: Callable[[], Any], fast: Callable[[], Any], min_pairs: int = 9) -> float:
        """Median seconds `slow` takes beyond `fast`, the two timed back to back in pairs until the time budget is
        spent: a difference of a fraction of a millisecond between two timings of a few milliseconds, which two
        separate medians lose when the machine's speed shifts between them (it did here, by 2x, between rounds)."""
        return self._median_over_budget((slow, fast), lambda t: t[0] - t[1], min_pairs)

    def reference_block(self, matmul: dict[str, list[list[float]]], attention: dict[str, list[list[float]]],
                        product: list[list[float]], launch_s: float) -> dict[str, Any] | None:
        """Elementwise bytes/s as training meets them, by activation size. A 2-layer llama (transformers' own code,
        vocabulary 256) runs forward and backward in bf16 at three widths; its time less the matmuls (from the curve
        just measured) and the kernel launches, over the element passes the time model counts for it
        (zerokit/perf/flops.py), is the rate at that width's activation size (tokens x hidden x 2 bytes). At small
        sizes this rate holds the framework's per-kernel costs too, as training pays them.

        A width whose step the figures measured so far (`product`: the plain elementwise rate) put beyond
        STEP_BUDGET_S runs half the tokens, down to one 256-token sequence, and is left out if even that does not fit
        (the first width always runs). Returns {"curve": [[bytes, bytes/s], ...] (one point a size),
        "shapes": [[hidden, tokens], ...]} of what ran; None without transformers. The block's weight matmuls are priced as their own shapes ran
        (`linears`), not by the curve, so the rate is the elementwise kernels' and not the curve's error."""
        torch = self.torch
        try:
            from transformers import LlamaConfig, LlamaForCausalLM
        except ImportError:
            return None
        from zerokit.perf.flops import model_flops
        from zerokit.perf.machine import MachinePerf
        from zerokit.perf.model import forward_backward_parts

        perf = MachinePerf(name="probe", matmul={d: tuple((s, f) for s, f in pts) for d, pts in matmul.items()},
                           attention={d: tuple((s, f) for s, f in pts) for d, pts in attention.items()},
                           elementwise=tuple((s, b) for s, b in product), op_overhead_s=launch_s)
        shapes = ((64, 256), (128, 512)) if self.quick else (((1024, 4096), (2048, 4096), (4096, 4096)) if self.gpu
                                                              else ((128, 512), (320, 1024), (640, 1024)))
        curve, ran = [], []
        for hidden, tokens in shapes:
            config = {"model_type": "llama", "hidden_size": hidden, "intermediate_size": self.ffn(hidden),
                      "num_hidden_layers": 2, "num_attention_heads": max(1, hidden // 64),
                      "num_key_value_heads": max(1, hidden // 64), "vocab_size": 256, "tie_word_embeddings": False,
                      "max_position_embeddings": 256}
            flops = model_flops(config)

            def predicted(tokens: int, flops=flops, hidden=hidden) -> float:
                mm, elem_bytes, launches = forward_backward_parts(flops, perf, tokens // 256, 256)
                return mm + launches + elem_bytes / perf.elementwise_at(tokens * hidden * 2)
            tokens = halve_to_fit(tokens, 256, predicted)
            if ran and predicted(tokens) > STEP_BUDGET_S:
                continue
            with torch.device(self.device):  # its random weights drawn where it runs (`_training_step`)
                model = LlamaForCausalLM(LlamaConfig(**{**config, "attn_implementation": "sdpa"}))
            model = model.to(dtype=torch.bfloat16)
            ids = torch.randint(0, 256, (tokens // 256, 256), device=self.device)

            def step(model=model, ids=ids) -> None:
                model(input_ids=ids, labels=ids).loss.backward()
                for p in model.parameters():
                    p.grad = None
            t = self.seconds(step, min_reps=2)
            mm, elem_bytes, launches = forward_backward_parts(flops, perf, tokens // 256, 256)
            mm += linear_correction(perf, self.linears(flops, tokens))  # the block's own matmul shapes, as they ran
            rest = max(t - mm - launches, 0.1 * t)  # a matmul curve taken under other load can overshoot
            curve.append([float(tokens * hidden * 2), self.mean(elem_bytes / rest)])
            ran.append([hidden, tokens])
        return {"curve": ascending_curve(curve), "shapes": ran}

    def copies(self) -> dict[str, float]:
        torch = self.torch
        n = (1 << 22) if self.quick else ((1 << 28) if self.gpu else (1 << 25))
        dev = torch.empty(n, dtype=torch.uint8, device=self.device)
        out = {}
        pinnable = self.gpu
        for kind in ("pinned", "pageable"):
            host = torch.empty(n, dtype=torch.uint8, pin_memory=(kind == "pinned" and pinnable))
            host.fill_(1)
            out[f"h2d_{kind}"] = self.mean(n / self.seconds(lambda h=host: dev.copy_(h, non_blocking=True)))
            out[f"d2h_{kind}"] = self.mean(n / self.seconds(lambda h=host: h.copy_(dev, non_blocking=True)))
        if self.gpu:
            # how ZeRO-3 returns an optimizer-offloaded partition: a blocking copy of fp32 host memory into the bf16
            # device partition, which torch casts on the host into a fresh pageable temporary
            params = n // 4  # fp32 parameters in the copies' buffer size
            src = torch.empty(params, dtype=torch.float32).uniform_()
            dst = torch.empty(params, dtype=torch.bfloat16, device=self.device)
            out["h2d_cast_params_per_s"] = self.mean(params / self.seconds(lambda: dst.copy_(src)))
        return out

    def collectives(self) -> dict[str, float]:
        torch, dist = self.torch, self.dist
        if self.ranks == 1:
            return {}
        n = (1 << 18) if self.quick else ((1 << 26) if self.gpu else (1 << 22))
        x = torch.ones(n, dtype=torch.float32, device=self.device)
        w = self.ranks
        reps = 3 if self.quick else 10
        t = self.fixed(lambda: dist.all_reduce(x), reps)
        reduce_bus = self.mean(2 * (w - 1) / w * n * 4 / t)
        parts = [torch.empty(n // w, dtype=torch.float32, device=self.device) for _ in range(w)]
        mine = torch.ones(n // w, dtype=torch.float32, device=self.device)  # gloo refuses an input that is an output
        t = self.fixed(lambda: dist.all_gather(parts, mine), reps)
        gather_bus = self.mean((w - 1) / w * n * 4 / t)
        one = torch.ones(1, device=self.device)
        latency = self.mean(self.fixed(lambda: dist.all_reduce(one), 20 if self.quick else 200))
        return {"all_reduce_bus_bandwidth": reduce_bus, "all_gather_bus_bandwidth": gather_bus,
                "bus_bandwidth": (reduce_bus + gather_bus) / 2, "latency_s": latency,
                "backend": dist.get_backend()}

    def _op_built(self, builder_name: str) -> tuple[bool, str]:
        """Whether a DeepSpeed op loads without compiling: prebuilt, or in torch's JIT extension cache."""
        try:
            import importlib

            from deepspeed.ops import op_builder
            builder = getattr(op_builder, builder_name)()
            try:
                importlib.import_module(builder.absolute_name())
                return True, "prebuilt"
            except ImportError:
                pass
            from torch.utils.cpp_extension import _get_build_directory
            build = _get_build_directory(builder.name, verbose=False)
            so = os.path.join(build, f"{builder.name}.so")
            if not os.path.exists(so) or os.path.exists(os.path.join(build, "lock")):
                return False, so
            # Loading runs ninja; when it has work to do, that is a compile of minutes, not a measurement.
            dry = subprocess.run(["ninja", "-n", "-C", build], capture_output=True, text=True, timeout=60, check=False)
            return "no work to do" in dry.stdout, so
        except Exception as e:  # noqa: BLE001 (deepspeed missing or broken: the fallback says so)
            return False, f"{type(e).__name__}: {e}"

    def _adam_rate(self, make: Callable[[Any], Any], n: int, device: Any) -> float:
        torch = self.torch
        p = torch.nn.Parameter(torch.zeros(n, dtype=torch.float32, device=device))
        p.grad = torch.full_like(p, 1e-3)
        opt = make([p])
        return self.mean(n / self.seconds(opt.step))

    def cpu_adam(self) -> dict[str, Any]:
        """DeepSpeed's CPU Adam, every rank at once. On a GPU machine over 1 GB of states per rank, beyond any cache:
        offload moves billions of parameters, and there the step is bound by the host's memory bandwidth (on an
        H100 host 8.4M parameters ran at 8.2G params/s, a 0.9B model's offloaded step at well under half that).
        Then the host's fp32 -> bf16 cast of as many parameters, all ranks at once: offload casts the updated
        partition before it goes back (on an H200's host 873M parameters took 75 ms, 11.6G/s)."""
        torch = self.torch
        n = (1 << 18) if self.quick else ((1 << 26) if self.gpu else (1 << 23))
        built, where = self._op_built("CPUAdamBuilder")
        if built:
            from deepspeed.ops.adam import DeepSpeedCPUAdam
            rate = self._adam_rate(lambda ps: DeepSpeedCPUAdam(ps, lr=1e-5), n, "cpu")
            source = "probe: DeepSpeedCPUAdam"
        else:
            rate = self._adam_rate(lambda ps: torch.optim.AdamW(ps, lr=1e-5), n, "cpu")
            source = ("probe: torch.optim.AdamW, because DeepSpeed's cpu_adam is not compiled (or is out of date) "
                      "and would build now, for minutes; re-run the probe after one offload run")
        # what offload does to the updated fp32 partition before it goes back: a cast to bf16 on the host
        src = torch.empty(n, dtype=torch.float32).uniform_()
        dst = torch.empty(n, dtype=torch.bfloat16)
        cast = self.mean(n / self.seconds(lambda: dst.copy_(src)))
        return {"params_per_s_rank": rate, "params_per_s_node": rate * self.ranks, "source": source,
                "built": built, "where": where, "cast_params_per_s_rank": cast,
                "cast_params_per_s_node": cast * self.ranks}

    def device_adam(self) -> dict[str, Any]:
        torch = self.torch
        n = (1 << 18) if self.quick else ((1 << 26) if self.gpu else (1 << 23))
        if self.gpu:
            rate = self._adam_rate(lambda ps: torch.optim.AdamW(ps, lr=1e-5, fused=True), n, self.device)
            return {"params_per_s": rate, "source": "probe: torch.optim.AdamW(fused=True), as fast as FusedAdam"}
        built, _ = self._op_built("FusedAdamBuilder")
        if built:
            from deepspeed.ops.adam import FusedAdam
            rate = self._adam_rate(lambda ps: FusedAdam(ps, lr=1e-5), n, self.device)
            return {"params_per_s": rate, "source": "probe: DeepSpeed FusedAdam (CPU build)"}
        rate = self._adam_rate(lambda ps: torch.optim.AdamW(ps, lr=1e-5), n, self.device)
        return {"params_per_s": rate, "source": "probe: torch.optim.AdamW, because DeepSpeed's fused_adam is not "
                                                 "compiled yet (it builds on first use)"}

    def engine_steps(self, partial: MachinePerf) -> dict[str, Any] | None:
        """What a real DeepSpeed training step adds to the kernel figures, on a reference llama (transformers' code,
        random weights, a shape of its own, not any benchmark's) trained as the HF Trainer runs it (bf16,
        overlap_comm, AdamW, clipping), every rank at once, under three engines, alternated:
        - ZeRO-2 with DeepSpeed's default buckets (5e8 elements: one gradient-bucket flush a step): its step time
          less what the time model gives for the step's communication and optimizer, over what the model gives
          for forward and backward, is `compute_scale` (the engine's gradient hooks, and the ranks sharing caches
          and memory);
        - ZeRO-2 with the buckets a plan writes (HF's "auto" sizes for this hidden size: hidden^2, so dozens of
          flushes): its extra time over the first, less the extra communication the model gives, per extra flush,
          is `bucket_flush_s`;
        - ZeRO-3 with a plan's buckets (prefetch 0.9 hidden^2, persistence 10 hidden): its extra time over the
          second (the same flushes), less the extra communication, per parameter-owning module and pass (forward,
          backward), is `zero3_module_overhead_s` (the fetch and release hooks and the coordinator's bookkeeping;
          on several GPUs the host runs them while the device computes, so the extra time is what exceeds the
          step's compute: `zerokit.perf.model.exposed_hooks`, which `engine_figures` inverts).
        On a CPU whose kernel figures put the reference's ZeRO-2 step beyond ENGINE_STEP_BUDGET_S, it trains fewer
        tokens a step (4, 2, 1 sequences of 128 tokens, then one of 64), and the rounds stop after ENGINE_TIMED_S of
        timed steps (three at least), so that the probe stays near a minute where bf16 is emulated.
        None with --quick, on one CPU rank (the quick probes the tests run), or without DeepSpeed or transformers.
        A GPU machine with one GPU measures them too: a one-rank engine still runs ZeRO's hooks and copies."""
        if self.quick or (self.ranks == 1 and not self.gpu):
            return None
        try:
            import deepspeed  # noqa: F401 -- checked here; the engines import it
            import transformers  # noqa: F401
        except ImportError:
            return None
        from zerokit.models.params import count_parameters
        from zerokit.perf.flops import model_flops
        from zerokit.perf.model import step_time

        # Deep enough that ZeRO-3's hooks stand out of a shared machine's noise (57 modules on the CPU), wide enough
        # that its projections exceed the persistence threshold (10 x hidden) and are gathered. On
        # a GPU, big enough that the device, not the host's dispatch, sets the pace, as in the trainings zerokit
        # plans: 0.5B parameters and as many tokens as the GPU holds beside three engines (8,192 on 80 GB). On an
        # H100 a 1024-wide 4,096-token reference ran at 1.9x its kernel figures and this one at 2,048-wide, 4,096
        # tokens at 1.45x and at 16,384 tokens 1.86x, while a 0.9B llama at 8,192 tokens ran at 0.9-1.0x: most of
        # that was the MLP width 5461 (see ffn), which real models do not use.
        hidden, layers, seq, micro_batch, vocab = (2048, 8, 2048, 2, 32000) if self.gpu else (256, 6, 128, 4, 512)
        if self.gpu:
            memory = self.torch.cuda.get_device_properties(self.device).total_memory
            micro_batch = 4 if memory >= 60e9 else (2 if memory >= 30e9 else 1)
        config = {"model_type": "llama", "hidden_size": hidden, "intermediate_size": self.ffn(hidden),
                  "num_hidden_layers": layers, "num_attention_heads": hidden // 64,
                  "num_key_value_heads": hidden // 128, "vocab_size": vocab, "tie_word_embeddings": False,
                  "max_position_embeddings": seq}
        parameters = count_parameters(config)[0]
        if not self.gpu:  # a slow CPU (emulated bf16) trains fewer tokens a step: fewer sequences, then shorter ones

            def kernels(mb: int, s: int) -> float:
                return step_time(config, partial, parameters=parameters, seq_len=s, micro_batch=mb,
                                 gpus_per_node=self.ranks, zero_stage=2).compute_s
            micro_batch = halve_to_fit(micro_batch, 1, lambda mb: kernels(mb, seq), ENGINE_STEP_BUDGET_S)
            seq = halve_to_fit(seq, 64, lambda s: kernels(micro_batch, s), ENGINE_STEP_BUDGET_S)
        # DeepSpeed's "AdamW" would JIT-build fused_adam for minutes where it is not built: the engines then run the
        # torch AdamW that the optimizer figure measured, so the model's "rest" prices the optimizer that ran
        torch_adam = self.gpu or not self._op_built("FusedAdamBuilder")[0]
        # A ZeRO-3 engine replaces torch.nn.functional.linear with its memory-efficient autograd function, for good
        # ("This will persist unless manually reset"): a ZeRO-2 training never runs it, a ZeRO-3 one always does,
        # so each engine steps with its own (on an H100 the ZeRO-2 reference took the same time under either, 0.336 s;
        # what made it slow there was its MLP width, see ffn).
        functional = self.torch.nn.functional
        plain = functional.linear
        engines = engine_setups(hidden)
        try:
            built = {name: self._training_step(config, stage, seq, micro_batch, torch_adam, buffers)
                     for name, (stage, buffers) in engines.items()}
            steps = {name: step for name, (step, _) in built.items()}
            linear = {name: plain if stage < 3 else functional.linear for name, (stage, _) in engines.items()}
            # alternated, so that a slow spell of a shared machine falls on every engine alike: the flush and hook
            # figures are differences. Each engine's first step (allocations, the optimizer's state) runs untimed
            # once; after that, the first step after a switch of engines ran no slower than the second on this CPU
            # (0.35-0.50 s against 0.36-0.56 s for ZeRO-2, 10 rounds), so the rounds time every step they run:
            # 20 timed steps an engine, as before, in 17 s less (one probe, 70 -> 53 s here)
            # The rounds stop after ENGINE_TIMED_S of timed steps (at least ENGINE_ROUNDS[0], at most [1]): ten on
            # a machine where a step takes a fraction of a second, three where it takes seconds. Every rank adds
            # the mean over the ranks, so all of them stop after the same round (the steps hold collectives).
            times: dict[str, list[float]] = {name: [] for name in engines}
            for name, step in steps.items():
                functional.linear = linear[name]
                self.fixed(step, 1, warm_up=False)
            rounds, spent = 0, 0.0
            while more_rounds(rounds, spent):
                for name, step in steps.items():
                    functional.linear = linear[name]
                    times[name].append(self.fixed(step, 2, warm_up=False))
                spent += self.mean(sum(2.0 * t[-1] for t in times.values()))
                rounds += 1
        finally:
            functional.linear = plain
        measured = {name: self.mean(statistics.median(t)) for name, t in times.items()}
        # every round's step, the mean over the ranks: how steady the machine was while the probe ran
        rounds_s = {name: [self.mean(x) for x in t] for name, t in times.items()}
        host = None
        try:  # the engine figures stand whatever befalls the host's timing (on every rank alike)
            if self.gpu:
                host = self.host_floor(config, built["zero2"][1], built["zero2_plan"][1])
            steps = built = None  # the reference's engines go before LoRA's is built
            if host:
                host.update(self.lora_host_floor(config, torch_adam))
        except Exception as e:  # noqa: BLE001 -- said; what was timed stands, the rest is taken to keep ahead
            self.say(f"      the host's time not measured in full ({type(e).__name__}: {e})")
        steps = built = None
        figures = engine_figures(partial, config, measured, self.linears(model_flops(config), seq * micro_batch),
                                 self.ranks, seq, micro_batch, host)
        return {**figures, "rounds": rounds, "round_steps_s": rounds_s, **({"host": host} if host else {})}

    def host_floor(self, config: dict[str, Any], engine: Any, plan_engine: Any) -> dict[str, Any]:
        """A GPU's host time of a training step of the reference, at HOST_TOKENS tokens, where the device has next to
        nothing to do and the host's own work (transformers' Python, autograd, DeepSpeed's engine and hooks, the
        kernel launches) sets the pace: forward and backward, then the optimizer step (to the device's end), the
        median of HOST_STEPS steps each, under the ZeRO-2 reference engine (full training) and under the one with a
        plan's buckets (its flushes); `lora_host_floor` adds LoRA's, and `host_figures` makes the figures of them.
        A device queues kernels while the host runs ahead, so a micro-batch takes the longer of its kernels and this
        host time (on an H200 a 16-layer 2048-wide llama trained at 512, 1,024 and 2,048 tokens a micro-batch took
        0.15-0.19 s a step, full or LoRA, where its kernels take a third of that)."""
        full = self._host_phases(engine, config["vocab_size"])
        plan = self._host_phases(plan_engine, config["vocab_size"])
        return {"tokens": HOST_TOKENS, "steps": HOST_STEPS, "forward_backward_s": full[0], "step_s": full[1],
                "plan_buckets_forward_backward_s": plan[0], "plan_buckets_step_s": plan[1]}

    def lora_host_floor(self, config: dict[str, Any], torch_adam: bool) -> dict[str, Any]:
        """`host_floor` under a ZeRO-2 engine of the reference's base with PEFT's LoRA adapters on every linear (rank
        8, dropout 0.05), only they trained: what PEFT's modules add to the host's time. Built once the reference's
        engines are gone; {} without peft, or where a rank's device has no room for it (its base is drawn in fp32,
        then cast: 6 bytes a parameter and 1 GiB, asked of every rank at once, so that all skip it together): the
        full-training figures stand, and LoRA's adapters then cost the host nothing in the plans."""
        try:
            import peft  # noqa: F401 -- optional
        except ImportError:
            return {}
        import gc

        from zerokit.models.params import count_parameters

        torch = self.torch
        gc.collect()
        torch.cuda.empty_cache()
        free = torch.tensor([float(torch.cuda.mem_get_info(self.device)[0])], dtype=torch.float64, device=self.device)
        self.dist.all_reduce(free, op=self.dist.ReduceOp.MIN)
        if free.item() < 6 * count_parameters(config)[0] + 2**30:
            return {}
        _, engine = self._training_step(config, 2, HOST_TOKENS, 1, torch_adam, None, lora=True)
        forward_backward, step = self._host_phases(engine, config["vocab_size"])
        return {"lora_forward_backward_s": forward_backward, "lora_step_s": step,
                "adapted_linears": adapted_linears(engine.module)}

    def _host_phases(self, engine: Any, vocab: int) -> tuple[float, float]:
        """(forward and backward, optimizer step) host seconds of `engine` at HOST_TOKENS tokens: medians of
        HOST_STEPS steps after one untimed, each started on an idle device."""
        torch = self.torch
        ids = torch.randint(0, vocab, (1, HOST_TOKENS), device=engine.device)

        def phases() -> tuple[float, float]:
            self.dist.barrier()
            self.sync()
            start = time.perf_counter()
            engine.backward(engine(input_ids=ids, labels=ids).loss)
            middle = time.perf_counter()
            engine.step()
            self.sync()
            return middle - start, time.perf_counter() - middle

        phases()
        samples = [phases() for _ in range(HOST_STEPS)]
        return (self.mean(statistics.median(s[0] for s in samples)),
                self.mean(statistics.median(s[1] for s in samples)))

    def _training_step(self, config: dict[str, Any], stage: int, seq: int, micro_batch: int,
                       torch_adam: bool, buffers: BufferSettings | None,
                       lora: bool = False) -> tuple[Callable[[], None], Any]:
        """One training step of `config` under a fresh ZeRO-`stage` engine, with `buffers` written as a plan's
        ds_config writes them (None: DeepSpeed's defaults) and torch's AdamW instead of DeepSpeed's when
        `torch_adam`, as a function (every rank must call it as often as the others: the step holds
        collectives), and its engine. `lora`: PEFT's LoRA adapters (rank 8, dropout 0.05) on every linear of a
        frozen base, only they trained."""
        import deepspeed
        from transformers import LlamaConfig, LlamaForCausalLM

        torch = self.torch
        zero: dict[str, Any] = {"stage": stage, "overlap_comm": True, "contiguous_gradients": True}
        if buffers is not None:
            zero.update(zero_buffer_keys(buffers, stage))
        ds_config = {"train_micro_batch_size_per_gpu": micro_batch, "gradient_accumulation_steps": 1,
                     "bf16": {"enabled": True}, "gradient_clipping": 1.0, "steps_per_print": 10**9,
                     "optimizer": {"type": "AdamW", "params": {"lr": 1e-5, "weight_decay": 0.0}},
                     "zero_optimization": zero}
        torch.manual_seed(0)
        # built on the device: drawing a 0.5B reference's random weights on the host took 6.5 s on one core of the
        # AMD EPYC, for each of the three engines, where the GPU draws them in milliseconds
        with torch.device(self.device):
            model = LlamaForCausalLM(LlamaConfig(**{k: v for k, v in config.items() if k != "model_type"},
                                                 attn_implementation="sdpa"))
        if lora:
            from peft import LoraConfig, get_peft_model

            model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.05,
                                                     target_modules="all-linear"))
        trained = [p for p in model.parameters() if p.requires_grad]
        optimizer = None
        if torch_adam:
            optimizer = torch.optim.AdamW(trained, lr=1e-5, weight_decay=0.0, fused=self.gpu or None)
            ds_config["zero_allow_untested_optimizer"] = True
            del ds_config["optimizer"]
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=trained, config=ds_config,
                                               optimizer=optimizer)
        ids = torch.randint(0, config["vocab_size"], (micro_batch, seq), device=engine.device)

        def step() -> None:
            engine.backward(engine(input_ids=ids, labels=ids).loss)
            engine.step()

        return step, engine

    def nvme(self) -> dict[str, float] | None:
        path = self.opts.get("nvme_path")
        if not path:
            return None
        result = None
        if self.rank == 0:  # the drive is the node's: one writer, like ZeRO-Infinity's swapper per rank share
            size = NVME_TEST_BYTES[self.quick]
            chunk = os.urandom(8 << 20)
            fd, name = tempfile.mkstemp(dir=path, prefix=".zerokit-probe-")
            os.unlink(name)  # the open file stays usable; nothing is left on the drive however the probe dies
            try:
                start = time.perf_counter()
                for _ in range(size // len(chunk)):
                    os.write(fd, chunk)
                os.fsync(fd)
                write = size / (time.perf_counter() - start)
                if hasattr(os, "posix_fadvise"):
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # read from the drive, not the page cache
                os.lseek(fd, 0, os.SEEK_SET)
                start = time.perf_counter()
                while os.read(fd, 8 << 20):
                    pass
                read = size / (time.perf_counter() - start)
            finally:
                os.close(fd)
            result = {"read": read, "write": write, "bytes": size}
        self.dist.barrier()
        return result

    def describe(self) -> dict[str, Any]:
        torch = self.torch
        if self.gpu:
            props = torch.cuda.get_device_properties(self.device)
            return {"name": props.name, "device": "gpu", "device_memory_bytes": int(props.total_memory)}
        model = "CPU"
        try:
            with open("/proc/cpuinfo", encoding="utf-8") as f:
                model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), model)
        except OSError:
            pass
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return {"name": f"cpu: {model}, {self.ranks} ranks x {torch.get_num_threads()} threads", "device": "cpu",
                "device_memory_bytes": int(memory)}

    def run(self) -> dict[str, Any]:
        torch = self.torch
        out: dict[str, Any] = {"ranks": self.ranks, "threads_per_rank": torch.get_num_threads(),
                               "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                               else os.cpu_count(),
                               "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "torch": torch.__version__,
                               "quick": self.quick}
        t0 = self.begin("device and memory")
        out.update(self.describe())
        self.say(f"      {out['name']}, {out['device_memory_bytes'] / 1e9:.1f} GB ({time.perf_counter() - t0:.1f} s)")
        t0 = self.begin("matmul throughput per dtype and size")
        out["matmul"], out["matmul_forward"], out["matmul_input_grad"] = self.matmul()
        best = ", ".join(f"{d} {max(f for _, f in pts) / 1e9:.1f}" for d, pts in out["matmul"].items())
        share, grad = (", ".join(f"{d} {product_share(out['matmul'][d], pts)}" for d, pts in out[key].items())
                       for key in ("matmul_forward", "matmul_input_grad"))
        self.say(f"      best linear forward+backward GFLOP/s per rank: {best}; the forward's share by size: {share}; "
                 f"the input gradient's: {grad} ({time.perf_counter() - t0:.1f} s)")
        t0 = self.begin("attention kernel (causal sdpa, forward and backward, bf16)")
        out["attention"] = self.attention()
        best = max(f for _, f in out["attention"]["bf16"])
        self.say(f"      up to {best / 1e9:.1f} GFLOP/s per rank ({time.perf_counter() - t0:.1f} s)")
        t0 = self.begin("elementwise bandwidth and kernel launch time")
        out["elementwise"], out["op_overhead_s"] = self.elementwise()
        best = max(b for _, b in out["elementwise"])
        out["dropout_elements_per_s"] = self.dropout()
        self.say(f"      up to {best / 1e9:.1f} GB/s, {out['op_overhead_s'] * 1e6:.1f} us per op, dropout "
                 f"{out['dropout_elements_per_s'] / 1e6:.0f} M elements/s ({time.perf_counter() - t0:.1f} s)")
        t0 = self.begin("4-bit linears (bitsandbytes NF4, QLoRA's base) against bf16 ones")
        out["quantized_linear"] = self.quantized_linears(out["matmul"]["bf16"])
        q = out["quantized_linear"]
        self.say(f"      {quantized_summary(q)}, {q['rows']} rows ({time.perf_counter() - t0:.1f} s)" if q else
                 "      bitsandbytes not installed or no kernel here: priced as a memory pass")
        t0 = self.begin("elementwise rate of a reference llama block (forward and backward, bf16)")
        block = self.reference_block(out["matmul"], out["attention"], out["elementwise"], out["op_overhead_s"])
        out["elementwise_product"] = out["elementwise"]
        if block:
            out["elementwise"], out["reference_block_shapes"] = block["curve"], block["shapes"]
        self.say("      " + (", ".join(f"{s / 1e6:.2f} MB activations: {b / 1e9:.2f} GB/s" for s, b in block["curve"])
                             if block else "transformers is not installed: the plain product's rate stands in")
                 + f" ({time.perf_counter() - t0:.1f} s)")
        t0 = self.begin("host <-> device copies, pinned and pageable")
        out["copies"] = self.copies()
        self.say("      " + ", ".join(f"{k} {v / 1e9:.1f} GB/s" if not k.endswith("_per_s")
                                      else f"fp32 host -> bf16 device {v / 1e6:.0f} M params/s"
                                      for k, v in out["copies"].items())
                 + f" ({time.perf_counter() - t0:.1f} s)")
        t0 = self.begin(f"collectives across {self.ranks} local ranks ({self.dist.get_backend()})")
        out["collectives"] = self.collectives()
        c = out["collectives"]
        self.say(f"      bus {c['bus_bandwidth'] / 1e9:.2f} GB/s, latency {c['latency_s'] * 1e6:.0f} us "
                 f"({time.perf_counter() - t0:.1f} s)" if c else "      one rank: nothing to measure")
        t0 = self.begin("CPU Adam (DeepSpeed cpu_adam), all ranks at once")
        out["cpu_adam"] = self.cpu_adam()
        self.say(f"      {out['cpu_adam']['params_per_s_rank'] / 1e6:.0f} M params/s per rank"
                 + ("" if out["cpu_adam"]["built"] else " (cpu_adam not compiled yet: torch AdamW measured instead)")
                 + f"; fp32 -> bf16 cast {out['cpu_adam']['cast_params_per_s_rank'] / 1e6:.0f} M params/s per rank"
                 + f" ({time.perf_counter() - t0:.1f} s)")
        t0 = self.begin("optimizer step on the device")
        out["device_adam"] = self.device_adam()
        self.say(f"      {out['device_adam']['params_per_s'] / 1e6:.0f} M params/s per rank "
                 f"({time.perf_counter() - t0:.1f} s)")
        t0 = self.begin("training steps of a reference llama under ZeRO-2 and ZeRO-3 engines")
        why = "one rank, or --quick"
        try:
            out["engine_step"] = self.engine_steps(_machine_from_measurements(out))
        except Exception as e:  # noqa: BLE001 -- DeepSpeed absent, refusing, out of memory: the defaults stand, said
            out["engine_step"], why = None, f"{type(e).__name__}: {e}"
        ref = out["engine_step"]
        self.say(f"      ZeRO-2 {ref['step_s']:.3f} s/step: compute x {ref['compute_scale']:.2f} of the kernel "
                 f"figures; at a plan's buckets {ref['plan_buckets_step_s']:.3f} s/step: "
                 f"{ref['bucket_flush_s'] * 1e6:.0f} us per bucket flush; ZeRO-3 {ref['zero3_step_s']:.3f} s/step: "
                 f"{ref['zero3_module_overhead_s'] * 1e6:.0f} us per module and pass; {ref['rounds']} rounds at "
                 f"{ref['micro_batch']} x {ref['seq_len']} tokens ({time.perf_counter() - t0:.1f} s)"
                 if ref else f"      not measured ({why}): x 1.00 and 100 us assumed")
        if ref and ref.get("host"):
            h = ref["host"]
            self.say(f"      host floor at {h['tokens']} tokens: forward and backward {h['forward_backward_s'] * 1e3:.1f} "
                     f"ms, optimizer step {h['step_s'] * 1e3:.1f} ms"
                     + (f"; with LoRA on every linear {h['lora_forward_backward_s'] * 1e3:.1f} and "
                        f"{h['lora_step_s'] * 1e3:.1f} ms" if "lora_step_s" in h else ""))
        t0 = self.begin("NVMe read/write" + (f" at {self.opts['nvme_path']}" if self.opts.get("nvme_path") else ""))
        out["nvme"] = self.nvme()
        self.say("      " + (f"read {out['nvme']['read'] / 1e9:.2f} GB/s, write {out['nvme']['write'] / 1e9:.2f} GB/s"
                             if out["nvme"] else "skipped: no --nvme-path") + f" ({time.perf_counter() - t0:.1f} s)")
        return out


def _adapted(torch: Any, linear: Any) -> Any:
    """`linear` with a rank-8 LoRA adapter as `peft.get_peft_model` adds it, in bf16 as DeepSpeed's engine casts it
    (`linear` itself where peft is not installed)."""
    try:
        from peft import LoraConfig, get_peft_model
    except Exception:  # noqa: BLE001 -- peft is optional: the bare layers then
        return linear

    class Holder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = linear

        def forward(self, x: Any) -> Any:
            return self.lin(x)

    model = get_peft_model(Holder(), LoraConfig(r=8, lora_alpha=16, target_modules=["lin"]))
    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.to(device=p.device, dtype=torch.bfloat16)
    return model


def _die_with_parent() -> None:
    """Linux: the kernel kills this rank when the probe that started it dies, however it dies."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _stop_on_signals() -> None:
    """SIGTERM, SIGINT and SIGHUP (the probe's `stop_ranks`, a Ctrl-C at the terminal, its hang-up) become
    SystemExit in a rank, once:
    the rest are ignored, so that a Ctrl-C and the probe's SIGTERM after it do not cut short the finally blocks the
    first one runs (torch's JIT build releases its lock in one)."""
    import signal

    def stop(signum: int, frame: Any) -> None:
        for ignored in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(ignored, signal.SIG_IGN)
        raise SystemExit(128 + signum)

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # a hang-up reaches the terminal's ranks too
        signal.signal(signum, stop)


def _worker_main(opts: dict[str, Any]) -> int:
    _die_with_parent()
    _stop_on_signals()
    worker = _Worker(opts)
    result = worker.run()
    if worker.rank == 0:
        tmp = opts["result"] + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(result, f)
        os.replace(tmp, opts["result"])
    worker.dist.barrier()
    worker.dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = _worker_main(json.loads(sys.argv[1]))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip C++ static destructors that sometimes abort a gloo rank at exit

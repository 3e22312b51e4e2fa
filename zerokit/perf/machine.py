"""`MachinePerf`: the speeds the step-time model reads, from a GPU preset (+ overrides) or a `zerokit probe` profile.

Every figure is per rank as a real run meets it (all local ranks busy at once), except the node-wide ones named so.
`sources` says where each came from: `preset:<gpu>` (a datasheet, see devices.py), `default` (an assumed typical
value, with the reason in DEFAULT_NOTES), `option:--<flag>`, or `probe` (measured by `zerokit probe`).
"""

from __future__ import annotations

import bisect
import json
import math
import operator
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import field, fields, replace
from typing import Any

from zerokit._dataclass import dataclass
from zerokit._memo import IdentityMemo
from zerokit.errors import BadInput
from zerokit.perf.devices import DEVICE_FIGURES, DeviceFigures
from zerokit.units import MAX_SIZE, MIN_GPU_MEMORY, finite_number

PROFILE_VERSION = 1
COMPUTE_SCALE_BOUNDS = (0.25, 8.0)
"""The range a profile's `compute_scale` may take (the probe holds its measurement to it): beyond it the kernel
figures, not the engine, are what is off."""
MAX_CORES = 1 << 16  # more ranks, threads or cores than any node has: a profile saying so is not a measurement
MAX_PROFILE_BYTES = 1 << 20  # a probe profile is a few KB; anything near a MiB is not one
DTYPES = ("bf16", "fp16", "fp32", "tf32")
HOST_CAST_PER_ADAM = 2.5  # host fp32 -> bf16 casts per CPU-Adam parameter step, where the probe did not measure it
DEFAULT_NVME_READ, DEFAULT_NVME_WRITE = 6.5e9, 3.5e9  # DEFAULT_NOTES["nvme"]: where no drive was measured
DEFAULT_INTER_NODE_BANDWIDTH = 12.5e9  # 100 Gb/s, where one node was probed
PAGEABLE_H2D_CAP, PAGEABLE_D2H_CAP = 7e9, 13e9  # DEFAULT_NOTES["pcie"]: a pageable copy is the host's memcpy
DEFAULT_ZERO3_MODULE_OVERHEAD_S = 450e-6  # DEFAULT_NOTES["zero3_module_overhead_s"]
DEFAULT_BUCKET_FLUSH_S = 190e-6  # DEFAULT_NOTES["bucket_flush_s"]
PRESET_COMPUTE_SCALE = 1.2
"""A GPU preset's `compute_scale` (DEFAULT_NOTES["preset_compute_scale"]): what a DeepSpeed step adds to the
preset's kernel figures."""

# Matmul efficiency of a GPU at a size, as a fraction of the dense peak, by the cube root of m*n*k of the product.
# The shape of NVIDIA's "Matrix Multiplication Background" guide (docs.nvidia.com/deeplearning/performance/
# dl-performance-matrix-multiplication): small products cannot fill the SMs; large ones reach ~80% of peak, which is
# what an 8192^3 bf16 product ran at on an H100 SXM lent to this project (798 of 989 TFLOP/s).
GPU_EFFICIENCY = ((64, 0.02), (128, 0.08), (256, 0.25), (512, 0.5), (1024, 0.68), (2048, 0.76), (4096, 0.8),
                  (8192, 0.8))

DEFAULT_NOTES = {
    "collective_efficiency": "NCCL's all-reduce bus bandwidth reaches about 80% of the link rate at large messages "
                             "(nccl-tests PERFORMANCE.md: busbw vs link rate)",
    "collective_latency_s": "NCCL ring latency, tens of microseconds per collective at small messages",
    "pcie": "pinned copies reach ~80% of the PCIe x16 link rate per direction (55 GB/s of Gen5's 64 on the hosts of "
            "an H100 and two H200s lent to this project); pageable ones pass through the driver's staging copy on "
            "the host (NVIDIA CUDA C++ Best Practices Guide, 'Pinned Memory'): at most 40% of the link, and no more "
            "than 7 GB/s host->device and 13 GB/s device->host, as the probe measured on those hosts (6.7-8.0 and "
            "12.8-13.9 GB/s)",
    "cpu_adam_params_per_s": "DeepSpeed CPU-Adam: ~4e9 parameters/s for a node's cores, as `zerokit probe` measured "
                             "it over 1 GB+ of states on the hosts of an H100 and two H200s lent to this project "
                             "(16-core VMs: 3.8-5.1e9; memory-bound at offload's sizes; the earlier default, ~1e9 "
                             "after ZeRO-Offload, Ren et al. 2021, arXiv:2101.06840, was 4-5x slow on them); "
                             "per rank = node / ranks",
    "host_cast_params_per_s": "2.5 x the CPU-Adam rate: the host casts fp32 to bf16 2.7x as fast as it steps "
                              "CPU-Adam (an H200's host: 11.6G against 4.3G parameters/s, 873M parameters)",
    "h2d_cast_params_per_s": "the host cast, then the pageable copy",
    "nvme": "one datacenter PCIe Gen4 NVMe SSD: ~6.5 GB/s read, ~3.5 GB/s write sequential; measure with "
            "`zerokit probe --nvme-path`",
    "elementwise": "elementwise kernels move memory at ~70% of the device memory bandwidth",
    "dropout_elements_per_s": "not measured: LoRA's dropout costs its mask's memory passes at the elementwise rate "
                              "(a GPU generates the random numbers faster than it moves them)",
    "quantized_linear": "not measured: each 4-bit linear's weight is dequantized in every forward, backward and "
                        "recomputation, priced as a memory pass (0.5 B read, 2 B written an element) at the "
                        "elementwise rate and two kernel launches; `zerokit probe` with bitsandbytes installed times "
                        "bitsandbytes' own 4-bit linears",
    "intra_node_unmeasured": "the probe ran one rank, so it timed no collective: the GPUs of a node are assumed to "
                             "reach each other at the host-link rate it measured (PCIe, no NVLink); give "
                             "--intra-node-bandwidth (NVLink 4: 450GB/s a direction)",
    "op_overhead_s": "~10 us of launch and framework time per kernel (PyTorch eager)",
    "zero3_module_overhead_s": "DeepSpeed ZeRO-3 fetch/release hooks: ~0.45 ms of host time per parameter-owning "
                               "module per pass, within what the hosts of an H100 and two H200s lent to this project "
                               "cost (0.34-0.55 ms a module and pass in ZeRO-3 runs over ZeRO-2 on one GPU, 0.59-0.77 "
                               "ms in the probe's 8-layer reference); hosts differ: `zerokit probe` measures it. "
                               "One GPU waits for them (each fetch synchronizes the device); on several, the host "
                               "runs them while the GPU computes, and only what exceeds the micro-batch's compute "
                               "shows",
    "bucket_flush_s": "~0.19 ms per gradient-bucket flush (an H100 ran ZeRO-2 with hidden^2 buckets, 132 flushes a "
                      "step, 25 ms slower than ZeRO-0)",
    "compute_scale": "forward and backward inside a DeepSpeed step run as fast as the kernels measured alone",
    "host": "not measured (the probe times a GPU's host): the host is taken to keep ahead of the device",
    "preset_compute_scale": "forward and backward inside a DeepSpeed step take 1.2x the preset's kernel figures: the "
                            "38 full fine-tuning runs on the H100s and H200s lent to this project were planned 9.6% "
                            "fast on average at 1x (1.0% slow at 1.2x), the probes there measured "
                            "1.27-1.39x against their own kernel curves, and at 1x the published ZeRO-Offload and "
                            "ZeRO-3 throughputs were planned higher than DeepSpeed reached",
}


@dataclass(frozen=True)
class MachinePerf:
    """The speeds of one node type, as the step-time model reads them. Bandwidths in bytes/s, one direction."""

    name: str
    """The GPU preset, or what the probe measured (e.g. `cpu: Intel Xeon, 2 ranks x 2 threads`)."""
    device: str = "gpu"
    """`gpu` or `cpu` (DeepSpeed's CPU accelerator)."""
    matmul: Mapping[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)
    """dtype -> ((size, FLOP/s), ...): matmul throughput of one rank at each size (cube root of m*n*k), ascending."""
    matmul_forward: Mapping[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)
    """dtype -> ((size, FLOP/s), ...): the forward product alone (x W^T), at the sizes of `matmul`; empty = the
    `matmul` curve's (a GPU runs the three products of a linear layer at about one rate). On a CPU the backward's
    transposed products run slower: a bf16 linear's forward was 17-26% of its forward and backward on this
    project's VM, not a third, and recomputation under checkpointing is a forward."""
    matmul_input_grad: Mapping[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)
    """dtype -> ((size, FLOP/s), ...): the backward's input-gradient product alone (g W, as autograd runs it for a
    frozen weight), at the sizes of `matmul`; empty = half of what the forward leaves of the linear's forward and
    backward. What a LoRA/QLoRA base pays in its backward: on a CPU that emulates bf16 this product is the slow
    one (1.1-2.4 GFLOP/s against 6-10 forward and 17-25 for the weight gradient, one thread of an AMD EPYC), so a
    frozen linear's backward costs nearly a trained one's."""
    attention: Mapping[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)
    """dtype -> ((size, FLOP/s), ...): the attention kernel's QK^T and PV throughput (SDPA, causal, forward and
    backward) by the cube root of (query-key pairs x head_dim); empty = the matmul curve's."""
    elementwise: tuple[tuple[float, float], ...] = ()
    """((tensor bytes, bytes/s), ...): what one rank's elementwise kernels (norms, activations, residuals, loss) move
    per second, by the size of the tensor they work on (small ones stay in cache on a CPU), ascending."""
    op_overhead_s: float = 10e-6
    """Launch/dispatch time of one kernel."""
    intra_node_bandwidth: float = 0.0
    """Collective bus bandwidth per rank between ranks of one node (NVLink, PCIe or shared memory)."""
    inter_node_bandwidth: float = 0.0
    """Network bandwidth of one node to the others, all NICs together (shared by its ranks)."""
    collective_efficiency: float = 0.8
    """Fraction of the link rates a large collective reaches (1.0 for probe figures: they are measured)."""
    collective_latency_s: float = 30e-6
    """Fixed time of one collective call."""
    comm_overlaps_compute: bool = True
    """Whether collectives run beside compute (GPU: own engines; CPU accelerator: they share the cores)."""
    h2d_pinned: float = 0.0
    """Host -> device copy bandwidth per rank from pinned memory."""
    d2h_pinned: float = 0.0
    h2d_pageable: float = 0.0
    d2h_pageable: float = 0.0
    cpu_adam_params_per_s: float = 0.0
    """DeepSpeed CPU-Adam parameters/s of the whole node (all local ranks stepping at once); per rank = / ranks."""
    device_adam_params_per_s: float = 0.0
    """Optimizer-step parameters/s of one rank when the optimizer stays on the device."""
    host_cast_params_per_s: float = 0.0
    """fp32 -> bf16 casts per second on the host, all local ranks at once (node total): optimizer offload casts the
    updated fp32 partition before it goes back. 0 = not measured: `host_cast_rate` takes 2.5 x the CPU-Adam rate."""
    h2d_cast_params_per_s: float = 0.0
    """Parameters per second of one rank (all ranks at once) through `device_bf16.copy_(host_fp32)`, blocking: how
    ZeRO-3 returns an optimizer-offloaded partition (without parameter offload). Torch casts on the host into a
    fresh pageable temporary, then copies it (an H200's host: 873M parameters in 0.50 s, where the cast took 0.075 s
    and a pageable copy from memory already touched 0.27 s). 0 = not measured: the host cast, then the pageable
    copy (`h2d_cast_rate`)."""
    nvme_read: float = 0.0
    """NVMe read bandwidth of the node (shared by its ranks)."""
    nvme_write: float = 0.0
    zero3_module_overhead_s: float = DEFAULT_ZERO3_MODULE_OVERHEAD_S
    """Host time ZeRO-3's hooks spend per parameter-owning module in each forward and backward pass."""
    dropout_elements_per_s: float = 0.0
    """Elements per second one rank's dropout forward masks (`torch.nn.functional.dropout`, bf16): random numbers,
    compute-bound on a CPU (about 7 ns an element on the Intel Xeon here, where a product moves GB/s). 0 = not
    measured: the mask's memory passes at the elementwise rate (LoRA's dropout, `zerokit.perf.model._lora_parts`)."""
    dequant_elements_per_s: float = 0.0
    quantized_linear_overhead_s: float = 0.0
    """QLoRA: what a bitsandbytes 4-bit linear (NF4, double quantization) costs one rank beyond the 16-bit linear it
    replaces, in each pass over it (forward, input gradient, recomputation): `quantized_linear_overhead_s` per
    module and pass, plus its weight's elements at `dequant_elements_per_s`; the probe fits both to PEFT-adapted 4-bit
    against bf16 linears of three shapes, timed back to back (on the Intel Xeon here about 0.2 ms and 3.6 G
    elements/s: bitsandbytes runs a Python autograd function and dequantizes the whole weight on every call, PEFT's
    4-bit layer clones its output). 0 = not measured (`zerokit.perf.model.dequantization_s`)."""
    bucket_flush_s: float = 100e-6
    """Time one gradient-bucket flush of ZeRO-1/2/3 adds beyond its collective (copying gradients into the
    `reduce_bucket_size` bucket, the stream waits, copying the reduced bucket into the partition): a plan's
    hidden^2 buckets flush hundreds of times per backward where DeepSpeed's default 5e8 flushes once."""
    step_overhead_s: float = 0.0
    """Fixed time per optimizer step (engine bookkeeping, scheduler, logging)."""
    host_op_s: float = 0.0
    """A GPU host's own time per kernel of a micro-batch's forward and backward (`zerokit.perf.model.host_kernels`
    counts them): transformers' Python, autograd, DeepSpeed's engine and the launches, which the host runs while the
    device works through what it queued. A micro-batch of ZeRO-0/1/2 takes the longer of the device's time and the
    host's (`zerokit.perf.model.host_excess`). The probe times a ZeRO-2 training step of its reference at a few
    tokens, where the device idles (`Probe.host_floor`): an H200's host took 34 ms for an 8-layer llama, 34 us a
    kernel, three times the bare launch (`op_overhead_s`). 0 = not measured (a CPU, a preset, a profile from before
    2026-11-28): the host is taken to keep ahead of the device."""
    host_adapter_s: float = 0.0
    """Host time one LoRA-adapted linear adds to a micro-batch's forward and backward (PEFT's dropout, A, B, scaling
    and sum, and their autograd), beyond the frozen base's: the probe's reference with LoRA on every linear, less
    the same without, per adapted linear (an H200's host: 0.55 ms). 0 = not measured."""
    host_flush_s: float = 0.0
    """Host time of one gradient-bucket flush of ZeRO-1/2 (DeepSpeed's bucket bookkeeping, the reduce calls, the
    stream waits), which `bucket_flush_s`, the device's stall per flush, does not hold where the host sets the pace.
    0 = not measured."""
    host_optimizer_s: float = 0.0
    """Host time of a ZeRO-1/2 engine's optimizer step on a GPU (the gradient norm, which waits for the device, the
    clipping, the optimizer's launches, the copy back to bf16): the probe's reference step at a few tokens (an
    H200's host: 24 ms). A step takes at least this. 0 = not measured."""
    compute_scale: float = 1.0
    """Forward and backward time inside a real DeepSpeed training step over the time the kernel figures above give
    for them: what the engine's gradient hooks and bucket copies, and the ranks sharing caches and memory, add.
    The probe measures it on a reference llama under a ZeRO-2 engine; GPU presets take PRESET_COMPUTE_SCALE (1.2),
    and a profile written before it existed 1.0."""
    ranks_measured: int | None = None
    """Local ranks that ran at once while a probe measured these figures (None for presets)."""
    dense_peak: Mapping[str, float] = field(default_factory=dict)
    """The GPU's published dense peak FLOP/s per dtype, MFU's denominator as PaLM defines it: a preset's datasheet
    figure, or the --gpu preset's beside a profile of that GPU (without --gpu, of the presets its name can be, where
    they publish one peak: `with_datasheet`). Empty (a CPU, a GPU without a preset): MFU divides by the best rate the
    kernel figures show. Never written to a profile: it is the datasheet's, not measured."""
    sources: Mapping[str, str] = field(default_factory=dict)
    """Figure -> where it came from: preset:<gpu>, default, option:--<flag>, probe."""

    @property
    def host_cast_rate(self) -> float:
        """`host_cast_params_per_s`, or where it was not measured 2.5 x the CPU-Adam rate (DEFAULT_NOTES)."""
        return self.host_cast_params_per_s or HOST_CAST_PER_ADAM * self.cpu_adam_params_per_s

    def h2d_cast_rate(self, ranks: int, nbytes: int) -> float:
        """Parameters per second of one of `ranks` local ranks through ZeRO-3's blocking cast-and-copy: the host
        cast (the node's rate, shared by the ranks) followed by the pageable copy of `nbytes` per parameter.

        Measured (`h2d_cast_params_per_s`), the figure holds the host-cast share of the `ranks_measured` ranks that
        ran at once; a plan for another number of local ranks (a profile of one GPU used for eight) moves the
        cast's share by the difference, never below the pageable copy alone."""
        if self.h2d_cast_params_per_s:
            extra = ranks - (self.ranks_measured or ranks)
            if not extra:
                return self.h2d_cast_params_per_s
            per_parameter = 1.0 / self.h2d_cast_params_per_s + extra / self.host_cast_rate
            return 1.0 / max(per_parameter, nbytes / self.h2d_pageable)
        return 1.0 / (ranks / self.host_cast_rate + nbytes / self.h2d_pageable)

    def peak_flops(self, dtype: str) -> float:
        """The highest matmul FLOP/s measured or published for `dtype` (MFU's denominator)."""
        curve = self._curve(dtype)
        peak = _PEAKS.get(id(curve), curve)  # every plan's step times ask: remembered per curve object
        return peak if peak is not None else _PEAKS.put(id(curve), curve, max(f for _, f in curve))

    def matmul_flops_at(self, dtype: str, size: float) -> float:
        """Matmul FLOP/s at an equivalent cube size (cube root of m*n*k), interpolated on log(size). Below the
        smallest size measured the rate falls in proportion (a product that small is latency-bound)."""
        return throughput_at(self._curve(dtype), size)

    def matmul_forward_flops_at(self, dtype: str, size: float) -> float:
        """The forward product's FLOP/s at a size, read as `matmul_flops_at` reads its curve; the matmul curve's where
        no forward curve was measured."""
        curve = self.matmul_forward.get(dtype)
        return throughput_at(curve, size) if curve else self.matmul_flops_at(dtype, size)

    def matmul_input_grad_flops_at(self, dtype: str, size: float) -> float:
        """The input-gradient product's FLOP/s at a size, read as `matmul_flops_at` reads its curve; the matmul
        curve's where none was measured (`_compute_parts` then splits the backward evenly instead)."""
        curve = self.matmul_input_grad.get(dtype)
        return throughput_at(curve, size) if curve else self.matmul_flops_at(dtype, size)

    def attention_flops_at(self, dtype: str, size: float) -> float:
        """The attention kernel's FLOP/s at a size; the matmul curve's where no attention curve was measured."""
        curve = self.attention.get(dtype)
        return throughput_at(curve, size) if curve else self.matmul_flops_at(dtype, size)

    def elementwise_at(self, nbytes: float) -> float:
        """Elementwise bytes/s for tensors of `nbytes`, interpolated on log(size), clamped at the ends."""
        if not self.elementwise:
            raise BadInput(f"{self.name} has no elementwise bandwidth; re-run `zerokit probe`")
        return interpolate(self.elementwise, nbytes)

    def _curve(self, dtype: str) -> tuple[tuple[float, float], ...]:
        curve = self.matmul.get(dtype)
        if not curve:
            raise BadInput(f"{self.name} has no {dtype} matmul figure; choose a precision it supports "
                           f"({', '.join(sorted(self.matmul))})")
        return curve


_X = operator.itemgetter(0)
_PEAKS = IdentityMemo(256)


def throughput_at(curve: tuple[tuple[float, float], ...], size: float) -> float:
    """A kernel's rate at `size` on its ascending ((size, rate), ...) curve: interpolated on log(size) within it,
    the last rate above it, and below the smallest size falling in proportion (a product that small is
    latency-bound)."""
    if size < curve[0][0]:
        return curve[0][1] * max(size, 1.0) / curve[0][0]
    return interpolate(curve, size)


def interpolate(curve: tuple[tuple[float, float], ...], x: float) -> float:
    """y at x on an ascending ((x, y), ...) curve, linear in log(x); the end values beyond the ends."""
    if x <= curve[0][0] or len(curve) == 1:
        return curve[0][1]
    i = bisect.bisect_left(curve, x, key=_X)  # no list of the x values per call: a hot path of step_time
    if i >= len(curve):
        return curve[-1][1]
    (x0, y0), (x1, y1) = curve[i - 1], curve[i]
    return y0 + math.log(x / x0) / math.log(x1 / x0) * (y1 - y0)


# ---------------------------------------------------------------------------------------------------------------------
# Bandwidth strings

_BANDWIDTH = (r"(?P<num>[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(?P<prefix>[kKMGTP]?)(?P<i>i?)"
              r"(?P<unit>B|b)(?:/s|ps)")
"""A pattern string, compiled (and cached by `re`) on first use: most plans give no bandwidth."""
_PREFIX = {"": 1, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BINARY = {"": 1, "k": 2**10, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40, "P": 2**50}
MAX_BANDWIDTH = 100e12  # 100 TB/s: above any link or memory sold today
MIN_RATE = 1e3  # 1 kB/s or 1,000 parameters/s: below any link, drive or CPU a profile describes


def parse_bandwidth(text: str | float, what: str = "bandwidth") -> float:
    """Bytes/s from `300GB/s`, `25GiB/s`, `400Gbps`, `3.2Tb/s` (B = bytes, b = bits) or a number of bytes/s."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        s = str(text).strip().replace(" ", "").replace("_", "")
        m = re.fullmatch(_BANDWIDTH, s)
        if not m:
            hint = ""
            if re.fullmatch(r"[0-9.eE+-]+", s):
                hint = f"; add a unit: {s}GB/s (bytes) or {s}Gbps (bits)"
            elif re.fullmatch(r"[0-9.eE+-]+[kKMGTP]i?[Bb]?", s):
                hint = f"; write it as a rate: {s.rstrip('Bb')}B/s (bytes) or {s.rstrip('Bb')}bps (bits)"
            raise BadInput(f"{what} {text!r} is not a bandwidth{hint or '; write it like 300GB/s, 25GiB/s or 400Gbps'}")
        scale = (_BINARY if m["i"] else _PREFIX)[m["prefix"]]
        if m["i"] and not m["prefix"]:
            raise BadInput(f"{what} {text!r}: 'i' needs a prefix, e.g. 25GiB/s")
        value = float(m["num"]) * scale / (8 if m["unit"] == "b" else 1)
    if math.isnan(value) or value <= 0:
        raise BadInput(f"{what} {text!r} must be a positive bandwidth, e.g. 300GB/s")
    if value < MIN_RATE:
        raise BadInput(f"{what} {text!r} is below 1 kB/s, slower than any link; check the unit "
                       "(GB/s is bytes, Gbps bits)")
    if value > MAX_BANDWIDTH:
        raise BadInput(f"{what} {text!r} is above 100 TB/s, more than any link sold; check the unit "
                       "(GB/s is bytes, Gbps bits)")
    return value


# ---------------------------------------------------------------------------------------------------------------------
# From a preset


def host_copy_rates(pcie: float) -> dict[str, float]:
    """The four host<->device copy rates over a host link of `pcie` bytes/s per direction (DEFAULT_NOTES["pcie"]):
    pinned copies at 80% of the link; pageable ones at 40%, but never faster than the host's staging copy."""
    return {"h2d_pinned": 0.8 * pcie, "d2h_pinned": 0.8 * pcie,
            "h2d_pageable": min(0.4 * pcie, PAGEABLE_H2D_CAP), "d2h_pageable": min(0.4 * pcie, PAGEABLE_D2H_CAP)}


def machine_from_preset(gpu: str, *, intra_node_bandwidth: str | float | None = None,
                        inter_node_bandwidth: str | float | None = None,
                        pcie_bandwidth: str | float | None = None) -> MachinePerf:
    """MachinePerf of a GPU preset (zerokit/hardware.py name or alias), with the CLI's overrides applied.

    `pcie_bandwidth` is the host link's rate per direction (`host_copy_rates`).
    """
    from zerokit.hardware import gpu_preset

    preset = gpu_preset(gpu)
    fig: DeviceFigures = DEVICE_FIGURES[preset.name]
    src = f"preset:{preset.name}"
    matmul = {dtype: tuple((float(s), peak * e) for s, e in GPU_EFFICIENCY) for dtype, peak in fig.tflops.items()}
    sources = {"matmul": src, "elementwise": src, "intra_node_bandwidth": src,
               "inter_node_bandwidth": src, "pcie": src, "collective_efficiency": "default",
               "collective_latency_s": "default", "cpu_adam_params_per_s": "default", "nvme": "default",
               "host_cast_params_per_s": "default", "h2d_cast_params_per_s": "default",
               "dropout_elements_per_s": "default", "quantized_linear": "default",
               "op_overhead_s": "default", "zero3_module_overhead_s": "default", "bucket_flush_s": "default",
               "device_adam_params_per_s": src,
               "compute_scale": "default: " + DEFAULT_NOTES["preset_compute_scale"]}
    intra, inter, pcie = fig.intra_node_bandwidth, fig.inter_node_bandwidth, fig.pcie_bandwidth
    if intra_node_bandwidth is not None:
        intra = parse_bandwidth(intra_node_bandwidth, "--intra-node-bandwidth")
        sources["intra_node_bandwidth"] = "option:--intra-node-bandwidth"
    if inter_node_bandwidth is not None:
        inter = parse_bandwidth(inter_node_bandwidth, "--inter-node-bandwidth")
        sources["inter_node_bandwidth"] = "option:--inter-node-bandwidth"
    if pcie_bandwidth is not None:
        pcie = parse_bandwidth(pcie_bandwidth, "--pcie-bandwidth")
        sources["pcie"] = "option:--pcie-bandwidth"
    # A fused Adam step reads fp32 param, grad, m, v (16 B) and writes param, m, v and the half copy (14 B).
    return MachinePerf(
        name=preset.name, device="gpu", matmul=matmul, elementwise=((1.0, 0.7 * fig.memory_bandwidth),),
        op_overhead_s=10e-6, intra_node_bandwidth=intra, inter_node_bandwidth=inter, collective_efficiency=0.8,
        collective_latency_s=30e-6, comm_overlaps_compute=True,
        **host_copy_rates(pcie),
        cpu_adam_params_per_s=4e9, device_adam_params_per_s=0.7 * fig.memory_bandwidth / 30.0,
        nvme_read=DEFAULT_NVME_READ, nvme_write=DEFAULT_NVME_WRITE, zero3_module_overhead_s=DEFAULT_ZERO3_MODULE_OVERHEAD_S,
        bucket_flush_s=DEFAULT_BUCKET_FLUSH_S,
        step_overhead_s=0.0, compute_scale=PRESET_COMPUTE_SCALE,
        sources=sources, dense_peak=dict(fig.tflops))


def with_overrides(perf: MachinePerf, *, intra_node_bandwidth: str | float | None = None,
                   inter_node_bandwidth: str | float | None = None,
                   pcie_bandwidth: str | float | None = None) -> MachinePerf:
    """`perf` with the CLI's bandwidth overrides (for a probe profile: the network it could not measure)."""
    changes: dict[str, Any] = {}
    sources = dict(perf.sources)
    if intra_node_bandwidth is not None:
        changes["intra_node_bandwidth"] = parse_bandwidth(intra_node_bandwidth, "--intra-node-bandwidth")
        sources["intra_node_bandwidth"] = "option:--intra-node-bandwidth"
    if inter_node_bandwidth is not None:
        changes["inter_node_bandwidth"] = parse_bandwidth(inter_node_bandwidth, "--inter-node-bandwidth")
        sources["inter_node_bandwidth"] = "option:--inter-node-bandwidth"
    if pcie_bandwidth is not None:
        pcie = parse_bandwidth(pcie_bandwidth, "--pcie-bandwidth")
        changes.update(host_copy_rates(pcie))
        sources["pcie"] = "option:--pcie-bandwidth"
    return replace(perf, **changes, sources=sources) if changes else perf


def with_datasheet(perf: MachinePerf, gpu: str | None) -> MachinePerf:
    """A GPU profile with the --gpu preset's published dense peaks for MFU (`dense_peak`), where the preset may be
    the GPU the probe measured (`same_gpu`); without --gpu, the peaks of the presets the measured name can be, where
    they all publish the same (an H200's; not an H100's, whose SXM, PCIe and NVL peaks differ): the same plan of an
    H200 profile read MFU 51% alone and 36% beside --gpu h200. Unchanged otherwise."""
    if perf.device != "gpu" or perf.dense_peak:
        return perf
    if gpu is None:
        peaks = {tuple(sorted(DEVICE_FIGURES[name].tflops.items())) for name in DEVICE_FIGURES
                 if same_gpu(name, perf.name)}
        return replace(perf, dense_peak=dict(peaks.pop())) if len(peaks) == 1 else perf
    from zerokit.hardware import gpu_preset

    name = gpu_preset(gpu).name
    if name not in DEVICE_FIGURES or not same_gpu(name, perf.name):
        return perf
    return replace(perf, dense_peak=dict(DEVICE_FIGURES[name].tflops))


def build_machine(gpu: str | None = None, hardware_profile: str | None = None, *,
                  intra_node_bandwidth: str | float | None = None, inter_node_bandwidth: str | float | None = None,
                  pcie_bandwidth: str | float | None = None) -> MachinePerf:
    """What `zerokit plan` builds from `--gpu`, `--hardware` and the bandwidth overrides: the profile wins over the
    preset (it was measured), and the options win over both."""
    if hardware_profile is not None:
        perf = with_datasheet(load_profile(hardware_profile), gpu)
        return with_overrides(perf, intra_node_bandwidth=intra_node_bandwidth,
                              inter_node_bandwidth=inter_node_bandwidth, pcie_bandwidth=pcie_bandwidth)
    if gpu is None:
        raise BadInput("the step-time model needs --gpu (a preset such as h100-80gb) or --hardware profile.json "
                       "(from `zerokit probe`)")
    return machine_from_preset(gpu, intra_node_bandwidth=intra_node_bandwidth,
                               inter_node_bandwidth=inter_node_bandwidth, pcie_bandwidth=pcie_bandwidth)


# ---------------------------------------------------------------------------------------------------------------------
# Probe profiles

_NUMBER_FIELDS = ("op_overhead_s", "intra_node_bandwidth", "inter_node_bandwidth",
                  "collective_efficiency", "collective_latency_s", "h2d_pinned", "d2h_pinned", "h2d_pageable",
                  "d2h_pageable", "cpu_adam_params_per_s", "device_adam_params_per_s", "host_cast_params_per_s",
                  "h2d_cast_params_per_s", "nvme_read", "nvme_write", "dropout_elements_per_s",
                  "dequant_elements_per_s", "quantized_linear_overhead_s",
                  "zero3_module_overhead_s", "bucket_flush_s", "step_overhead_s", "compute_scale",
                  "host_op_s", "host_adapter_s", "host_flush_s", "host_optimizer_s")
_REQUIRED = ("name", "device", "matmul", "elementwise", "intra_node_bandwidth", "h2d_pinned", "d2h_pinned",
             "cpu_adam_params_per_s", "device_adam_params_per_s")
PROFILE_RANGES = {
    "op_overhead_s": (0.0, 1.0), "collective_efficiency": (0.01, 1.0), "collective_latency_s": (0.0, 10.0),
    "zero3_module_overhead_s": (0.0, 1.0), "bucket_flush_s": (0.0, 1.0), "step_overhead_s": (0.0, 3600.0),
    "quantized_linear_overhead_s": (0.0, 1.0),
    "compute_scale": COMPUTE_SCALE_BOUNDS,
    "host_op_s": (0.0, 1.0), "host_adapter_s": (0.0, 1.0), "host_flush_s": (0.0, 1.0), "host_optimizer_s": (0.0, 60.0),
}
"""Plausible ranges of a profile's figures: one outside is a broken or hand-edited profile, not a machine (the probe
writes none beyond them: `zerokit.perf.probe.host_figures`)."""


def profile_to_json(perf: MachinePerf, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The profile JSON `zerokit probe` writes: every MachinePerf field, plus free-form `measurements`."""
    out: dict[str, Any] = {"zerokit_profile": PROFILE_VERSION}
    for f in fields(MachinePerf):
        if f.name == "dense_peak":
            continue
        value = getattr(perf, f.name)
        if f.name in ("matmul", "matmul_forward", "matmul_input_grad", "attention"):
            value = {k: [[s, fl] for s, fl in v] for k, v in value.items()}
        elif f.name == "elementwise":
            value = [[s, b] for s, b in value]
        elif f.name == "sources":
            value = dict(value)
        out[f.name] = value
    if extra:
        out["measurements"] = dict(extra)
    return out


def load_profile(path: str) -> MachinePerf:
    """A MachinePerf from a `zerokit probe` profile; BadInput (one line, with the fix) for anything else."""
    return load_profile_and_memory(path)[0]


def load_profile_and_memory(path: str) -> tuple[MachinePerf, int | None]:
    """`load_profile`, and the device memory the probe measured (None when the profile does not say), from one
    read of the file: `zerokit plan --hardware` takes the GPU memory from it when none is given."""
    return load_profile_for_plan(path)[:2]


def load_profile_for_plan(path: str) -> tuple[MachinePerf, int | None, list[str]]:
    """`load_profile_and_memory`, and the warnings a plan from this profile carries (`profile_warnings`)."""
    data = _read_profile(path)
    perf = profile_from_json(data, path)
    measured = data.get("measurements")
    if measured is None:
        measured = {}
    elif not isinstance(measured, dict):  # else the plan asked for --gpu, as if the profile had measured no memory
        raise BadInput(f"--hardware {path}: measurements must be an object (the probe's raw figures), got "
                       f"{_shown(measured)}; re-run `zerokit probe`")
    notes = profile_warnings(perf, measured)
    if measured.get("quick") is True:  # `zerokit probe --quick`: a smoke test's few short timings
        notes.insert(0, "the profile is from `zerokit probe --quick`, a smoke test that times each figure briefly "
                        "at a few small sizes: its step times are rough (its matmul curve may read 0 GFLOP/s at "
                        "the smallest sizes); probe without --quick for a plan to trust")
    memory = measured.get("device_memory_bytes")
    if memory is None:
        return perf, None, notes
    if isinstance(memory, bool) or not isinstance(memory, int) or not MIN_GPU_MEMORY <= memory <= MAX_SIZE:
        raise BadInput(f"--hardware {path}: measurements.device_memory_bytes must be a whole number of bytes from 1 GiB "
                       f"to 1 EB, got {str(memory)[:40]}; re-run `zerokit probe`, or give --gpu-memory")
    return perf, memory, notes


def profile_warnings(perf: MachinePerf, measured: Mapping[str, Any]) -> list[str]:
    """What a plan should say about a profile's own measurement: on DeepSpeed's CPU accelerator, ranks whose OpenMP
    threads outnumbered the cores (torch's default under the runner), where small ops stall at random, so that the
    kernel figures, and the step times built on them, describe no run, an oversubscribed one neither: a 2-rank
    training of a 768-wide llama on this 2-core VM, 2 threads a rank, took 0.70-0.77 s a step, and two probes so,
    minutes apart, planned it at 0.44 and 2.45 s (their bf16 512^3 linears at 777 and 435 GFLOP/s, 2026-12-08)."""
    ranks, threads, cores = (measured.get(k) for k in ("ranks", "threads_per_rank", "cores"))
    # counts no machine has are not a measurement (a hand-edited 400-digit one was quoted whole in the warning)
    if perf.device != "cpu" or not all(isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_CORES
                                       for v in (ranks, threads, cores)):
        return []
    per_rank = oversubscribed(ranks, threads, cores)
    if per_rank is None:
        return []
    note = (f"the profile was probed with {ranks} ranks x {threads} OpenMP threads on {cores} cores, more threads "
            "than cores, where small ops stall at random: its figures change from probe to probe, and its step "
            "times can be off several-fold, for a run as oversubscribed too. Probe again "
            f"with OMP_NUM_THREADS={per_rank} and train with the same (`zerokit launch --env OMP_NUM_THREADS="
            f"{per_rank}`)")
    return [note]


def oversubscribed(ranks: int, threads: int, cores: int) -> int | None:
    """The OMP_NUM_THREADS a rank should run where `ranks` x `threads` outnumber `cores` (the cores shared out,
    one at least), else None: the probe's thread note, the preflight's cpu-threads check and a profile's plans."""
    return max(1, cores // ranks) if ranks * threads > cores else None


def profile_from_json(data: Any, path: str) -> MachinePerf:
    """The MachinePerf of a profile's JSON (`profile_to_json`'s inverse), read from `path`; BadInput (one line,
    with the fix) for anything that is not one."""
    where = f"--hardware {path}"
    version = data.get("zerokit_profile") if isinstance(data, dict) else None
    if isinstance(version, int) and not isinstance(version, bool) and version != PROFILE_VERSION:
        raise BadInput(f"{where}: a profile of version {str(version)[:20]}, which this zerokit does not read (it reads "
                       f"version {PROFILE_VERSION}); probe again with this zerokit: `zerokit probe -o {path} --force`")
    if isinstance(version, bool) or version != PROFILE_VERSION:
        raise BadInput(f"{where}: not a zerokit probe profile (no \"zerokit_profile\": {PROFILE_VERSION}); "
                       "write one with `zerokit probe -o profile.json`")
    missing = [k for k in _REQUIRED if k not in data]
    if missing:
        raise BadInput(f"{where}: missing {', '.join(missing)}; write a fresh one with `zerokit probe -o {path} --force`")
    known = {f.name for f in fields(MachinePerf)} | {"zerokit_profile", "measurements"}
    unknown = sorted(set(data) - known)
    if unknown:
        listed = ", ".join(_shown(key, quote=False) for key in unknown[:5]) + (", ..." if len(unknown) > 5 else "")
        raise BadInput(f"{where}: unknown key(s) {listed}; write a fresh one with `zerokit probe`")
    values: dict[str, Any] = {}
    for key in ("name", "device"):
        if not isinstance(data[key], str) or not data[key].strip():
            raise BadInput(f"{where}: {key} must be a non-empty string")
        values[key] = data[key]
    if values["device"] not in ("gpu", "cpu"):
        raise BadInput(f"{where}: device must be \"gpu\" or \"cpu\", got {_shown(data['device'])}")
    if not _plain_text(values["name"], MAX_NAME):  # the plan's table and warnings print it: a newline split one
        raise BadInput(f"{where}: name must be one line of printable text, at most {MAX_NAME} characters (the probe "
                       f"writes the device's name), got {_shown(values['name'])}; re-run `zerokit probe`")
    values["matmul"] = _matmul_from_json(data["matmul"], where)
    for key in ("matmul_forward", "matmul_input_grad", "attention"):
        if data.get(key) is not None and data[key] != {}:  # absent, null or {}: not measured
            values[key] = _matmul_from_json(data[key], where, key)
    values["elementwise"] = _curve_from_json(data["elementwise"], f"{where}: elementwise", 1e15)
    for key in _NUMBER_FIELDS:
        if key not in data:
            continue
        value = data[key]
        if not finite_number(value) or value < 0:
            raise BadInput(f"{where}: {key} must be a finite number >= 0, got {_shown(value)}; re-run `zerokit probe`")
        # a rate (bytes or parameters per second) is 0 (not measured; refused below where the model needs it) or
        # at least MIN_RATE: a denormal one made the time model divide by zero
        low, high = PROFILE_RANGES.get(key, (MIN_RATE, MAX_BANDWIDTH))
        if not (low <= value <= high or (value == 0 and key not in PROFILE_RANGES)):
            raise BadInput(f"{where}: {key} = {_shown(value)} is outside {low:g}..{high:g}; re-run `zerokit probe`")
        values[key] = float(value)
    # The probe always writes these; a profile without one (written by hand, or cut) takes what the probe would
    # have assumed, not 0, which the time model divides by.
    absent = {"h2d_pageable": (min(0.5 * values["h2d_pinned"], PAGEABLE_H2D_CAP), DEFAULT_NOTES["pcie"]),
              "d2h_pageable": (min(0.5 * values["d2h_pinned"], PAGEABLE_D2H_CAP), DEFAULT_NOTES["pcie"]),
              "inter_node_bandwidth": (DEFAULT_INTER_NODE_BANDWIDTH,
                                       "100 Gb/s; give --inter-node-bandwidth for multi-node plans"),
              "nvme_read": (DEFAULT_NVME_READ, DEFAULT_NOTES["nvme"]),
              "nvme_write": (DEFAULT_NVME_WRITE, DEFAULT_NOTES["nvme"])}
    defaulted = {key: note for key, (value, note) in absent.items() if key not in values}
    values.update({key: absent[key][0] for key in defaulted})
    for key in ("h2d_pinned", "d2h_pinned", *absent, "intra_node_bandwidth", "cpu_adam_params_per_s",
                "device_adam_params_per_s"):
        if values[key] <= 0:
            raise BadInput(f"{where}: {key} must be > 0; re-run `zerokit probe`")
    if "comm_overlaps_compute" in data:
        if not isinstance(data["comm_overlaps_compute"], bool):
            raise BadInput(f"{where}: comm_overlaps_compute must be true or false")
        values["comm_overlaps_compute"] = data["comm_overlaps_compute"]
    ranks = data.get("ranks_measured")
    if ranks is not None and (isinstance(ranks, bool) or not isinstance(ranks, int) or not 1 <= ranks <= 1024):
        raise BadInput(f"{where}: ranks_measured must be a whole number 1..1024, got {_shown(ranks)}")
    values["ranks_measured"] = ranks
    sources = data.get("sources", {})
    # the plan's warnings quote them (`unmeasured_links`): a newline split one in two
    if not isinstance(sources, dict) or not all(isinstance(k, str) and _plain_text(v, MAX_SOURCE)
                                                for k, v in sources.items()):
        raise BadInput(f"{where}: sources must map figure names to one line of printable text each, at most "
                       f"{MAX_SOURCE} characters; re-run `zerokit probe`")
    values["sources"] = {**{k: "probe" for k in _NUMBER_FIELDS if k in values}, "matmul": "probe", **sources}
    for key in ("host_cast_params_per_s", "h2d_cast_params_per_s"):
        if key not in values:  # a profile from before the probe measured it
            values["sources"][key] = "default: " + DEFAULT_NOTES[key]
    for key, note in defaulted.items():
        values["sources"][key] = "default: " + note
    if ranks == 1 and values["sources"].get("intra_node_bandwidth") == "probe":
        # a profile written before the probe said so: one rank timed no collective, whatever the figure says
        values["intra_node_bandwidth"], values["sources"]["intra_node_bandwidth"] = unmeasured_intra_node(
            values["device"], values["h2d_pinned"], values["intra_node_bandwidth"])
    return MachinePerf(**values)


def unmeasured_intra_node(device: str, h2d_pinned: float, written: float) -> tuple[float, str]:
    """(bandwidth, source) between the ranks of a node that a probe of one rank could not time: a GPU's peers at
    its host-link rate (DEFAULT_NOTES["intra_node_unmeasured"]); a CPU keeps the figure written."""
    if device == "gpu":
        return h2d_pinned, "default: " + DEFAULT_NOTES["intra_node_unmeasured"]
    return written, "default: the probe ran one rank, so it timed no collective; give --intra-node-bandwidth"


def same_gpu(preset: str, measured: str) -> bool:
    """Whether a GPU preset's name (`a100-80gb`, `rtx4090`) may be the GPU a probe measured (`NVIDIA A100-SXM4-80GB`,
    `NVIDIA GeForce RTX 4090`): the preset's model, its name up to the first dash, within the measured name, both
    without case, spaces or dashes. Loose on purpose (`l4` is within `L40S`): it flags only a plain mismatch."""
    def squeeze(text: str) -> str:
        return "".join(ch for ch in text.lower() if ch.isalnum())
    return squeeze(preset.split("-")[0]) in squeeze(measured)


def other_gpu(perf: MachinePerf, gpu_name: str) -> list[str]:
    """A warning when a GPU preset's plan is timed on another GPU's figures (an H100's profile beside --gpu
    a100-80gb): allowed, the figures may be the best at hand, but the step times are not the preset GPU's."""
    if perf.device != "gpu" or gpu_name not in DEVICE_FIGURES or same_gpu(gpu_name, perf.name):
        return []
    return [(f"the step times are the {perf.name}'s figures and the memory the {gpu_name}'s, another GPU: probe the "
            f"GPU you plan for (`zerokit probe` there, then --hardware), or plan without a profile for the "
            f"{gpu_name} preset's figures")]


def unmeasured_links(perf: MachinePerf, gpus_per_node: int, nodes: int) -> list[str]:
    """Warnings for the links a plan crosses that neither a probe nor an option measured: between the GPUs of a
    node, and between nodes; and, on DeepSpeed's CPU accelerator, ranks a node that share its cores otherwise than the
    probe's did (its kernel figures are per rank, as that many ranks ran at once)."""
    notes = []
    probed = perf.ranks_measured
    if perf.device == "cpu" and probed and probed != gpus_per_node:
        notes.append(f"step times are per rank as {probed} rank{'s' if probed > 1 else ''} shared this CPU when it was "
                     f"probed; {gpus_per_node} a node would share its cores otherwise: probe with `zerokit probe --ranks "
                     f"{gpus_per_node}` (and the OMP_NUM_THREADS they will train with) for their figures")
    intra, inter = (perf.sources.get(k, "") for k in ("intra_node_bandwidth", "inter_node_bandwidth"))
    if gpus_per_node > 1 and intra.startswith("default"):
        notes.append(f"step times assume {perf.intra_node_bandwidth / 1e9:,.0f} GB/s between the GPUs of a node: "
                     f"{intra.removeprefix('default: ')}")
    if nodes > 1 and inter.startswith("default"):
        notes.append(f"step times assume {perf.inter_node_bandwidth * 8 / 1e9:,.0f} Gb/s between nodes, which the "
                     "profile did not measure: give --inter-node-bandwidth (e.g. 400Gbps a node)")
    return notes


def unmeasured_nvme(perf: MachinePerf, offload_optimizer: str, offload_param: str, nvme_path: str | None) -> list[str]:
    """A warning when a plan from a probe profile offloads to NVMe at drive speeds the probe did not measure (it was
    run without --nvme-path): the step time then rests on a typical drive's figures, not the one planned for."""
    if perf.ranks_measured is None or "nvme" not in (offload_optimizer, offload_param):
        return []
    if not perf.sources.get("nvme", "probe").startswith("default"):
        return []
    where = nvme_path or "/local_nvme"
    note = (f"step times assume NVMe at {perf.nvme_read / 1e9:.1f} GB/s read and {perf.nvme_write / 1e9:.1f} GB/s "
            f"write, which the profile did not measure: probe with `zerokit probe --nvme-path {where}` for this "
            "drive's")
    return [note]


def stand_in_cpu_adam(perf: MachinePerf, offload_optimizer: str) -> list[str]:
    """A warning when a plan offloads the optimizer to the CPU and the profile's CPU Adam figure is torch's AdamW,
    which the probe times where DeepSpeed's cpu_adam was not compiled yet (it would have built for minutes): the
    run steps DeepSpeedCPUAdam, at its own speed."""
    source = perf.sources.get("cpu_adam_params_per_s", "")
    if offload_optimizer != "cpu" or not source.startswith("probe: torch.optim.AdamW"):
        return []
    note = ("the profile's CPU Adam figure is torch.optim.AdamW's: DeepSpeed's cpu_adam was not compiled when it was "
            "probed, and the offloaded optimizer steps with it; probe again after one offload run has built it")
    return [note]


def shared_cpu_adam(perf: MachinePerf, offload_optimizer: str, gpus_per_node: int) -> list[str]:
    """A note when a plan steps an offloaded optimizer's CPU Adam for several GPUs of a node at once: the node's
    ranks share its cores, each with torch's default threads on all of them unless they are bound (DeepSpeed's
    ZeRO-Offload tutorial advises `--bind_cores_to_rank`), and the step time takes the node's CPU-Adam rate (the
    preset's, or what the probe measured with its own threads) shared out."""
    if offload_optimizer == "none" or gpus_per_node < 2 or perf.device != "gpu":
        return []
    rate = f"{perf.cpu_adam_params_per_s / 1e9:.2g}e9 parameters/s for the node"
    if perf.sources.get("cpu_adam_params_per_s", "").startswith("probe"):
        priced = f"priced at the profile's {rate}, which holds for the threads the probe ran"
    else:
        priced = (f"priced at the preset's {rate}, one rank's rate on the lent 16-core hosts (a published 8-GPU "
                  "sweep's offload steps ran 2.2x as long as without it, where this model gives 1.3x)")
    note = (f"the optimizer steps on the host: the {gpus_per_node} ranks of a node run CPU Adam at once, {priced}; "
            "launch with `zerokit launch --bind-cores-to-rank` (each rank on its own cores, as DeepSpeed's "
            "ZeRO-Offload tutorial advises), and probe the node so (`zerokit probe --bind-cores-to-rank`) for its "
            "own rate")
    return [note]


def _read_profile(path: str) -> Any:
    if not isinstance(path, str) or not path.strip():
        raise BadInput("--hardware is empty; give the profile JSON `zerokit probe -o profile.json` wrote")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise BadInput(f"--hardware {path}: no such file; write one with `zerokit probe -o {path}`") from None
    except OSError as e:
        raise BadInput(f"--hardware {path}: cannot read it ({e.strerror}); check the path") from None
    if not stat.S_ISREG(st.st_mode):
        raise BadInput(f"--hardware {path}: not a regular file; give the profile JSON `zerokit probe` wrote")
    if st.st_size > MAX_PROFILE_BYTES:
        raise BadInput(f"--hardware {path}: {st.st_size} bytes, over the 1 MiB a probe profile can be; "
                       "is this the right file?")
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_PROFILE_BYTES + 1)
        # utf-8-sig: a profile edited and saved with a byte-order mark (zerokit alone reads it) loads as written
        return json.loads(raw.decode("utf-8-sig"), object_pairs_hook=lambda pairs: _one_of_each(pairs, path))
    except UnicodeDecodeError:
        raise BadInput(f"--hardware {path}: not UTF-8 text; give the profile JSON `zerokit probe` wrote") from None
    except json.JSONDecodeError as e:
        raise BadInput(f"--hardware {path}: malformed JSON at line {e.lineno}, column {e.colno}: {e.msg}; "
                       "re-run `zerokit probe`") from None
    except (ValueError, RecursionError) as e:  # a number of more than 4300 digits, absurd nesting
        what = "nested too deeply" if isinstance(e, RecursionError) else "a number of more than 4300 digits"
        raise BadInput(f"--hardware {path}: not a probe profile ({what}); re-run `zerokit probe`") from None
    except OSError as e:
        raise BadInput(f"--hardware {path}: cannot read it ({e.strerror}); check the permissions") from None


def _one_of_each(pairs: list[tuple[str, Any]], path: str) -> dict[str, Any]:
    """A JSON object of the profile, refused where it gives a key twice: the probe never does, and of a hand edit's
    two figures JSON keeps the last without a word."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise BadInput(f"--hardware {path}: {_shown(key)} is given twice in one object; keep the figure you "
                           "mean, or re-run `zerokit probe`")
        out[key] = value
    return out


def _matmul_from_json(value: Any, where: str, what: str = "matmul") -> dict[str, tuple[tuple[float, float], ...]]:
    if not isinstance(value, dict) or not value:
        raise BadInput(f"{where}: {what} must map dtypes ({', '.join(DTYPES)}) to [[size, FLOP/s], ...]")
    out = {}
    for dtype, curve in value.items():
        if dtype not in DTYPES:
            raise BadInput(f"{where}: {what} has unknown dtype {_shown(dtype)}; known: {', '.join(DTYPES)}")
        out[dtype] = _curve_from_json(curve, f"{where}: {what}.{dtype}", 1e18, MAX_KERNEL_SIZE)
    return out


MAX_KERNEL_SIZE = 1e6
"""The largest size a profile's matmul or attention curve may give (the cube root of m*n*k): a 10^18-FLOP product,
over 100 times the largest a probe times (8192). Below its smallest size a curve's rate falls in proportion, so a
hand-edited 1e300 put every step at 10^300 seconds."""


def _curve_from_json(curve: Any, what: str, high: float, max_size: float = MAX_SIZE) -> tuple[tuple[float, float], ...]:
    if not isinstance(curve, list) or not curve or len(curve) > 64:
        raise BadInput(f"{what} must be a list of 1..64 [size, rate] pairs")
    points = []
    for point in curve:
        if (not isinstance(point, list) or len(point) != 2
                or not all(finite_number(x) and x > 0 for x in point) or not MIN_RATE <= point[1] <= high):
            raise BadInput(f"{what}: point {_shown(point)} is not [size > 0, rate {MIN_RATE:g}..{high:g}]")
        if not 1 <= point[0] <= max_size:
            raise BadInput(f"{what}: point {_shown(point)} has a size outside 1..{max_size:g}; re-run `zerokit probe`")
        points.append((float(point[0]), float(point[1])))
    sizes = [s for s, _ in points]
    if sizes != sorted(sizes) or len(set(sizes)) != len(sizes):
        raise BadInput(f"{what}: sizes must be strictly ascending")
    return tuple(points)


MAX_NAME, MAX_SOURCE = 200, 1000
"""The longest name and source a profile may give: the probe writes a device's name (`NVIDIA H100 80GB HBM3`, `cpu:
` and the CPU's model), and sources of at most a DEFAULT_NOTES sentence (about 500 characters)."""


def _plain_text(value: Any, limit: int) -> bool:
    return isinstance(value, str) and len(value) <= limit and value.isprintable()


def _shown(value: Any, quote: bool = True) -> str:
    """A profile's value as an error quotes it, cut to 40 characters: a 200 KB string or a 400-digit number was
    echoed whole, one line of that length."""
    text = repr(value) if quote else str(value)
    return text if len(text) <= 40 else text[:37] + "..."

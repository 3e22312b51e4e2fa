"""GPU presets and `resolve_hardware`: what the planner knows about the machines.

Memory is what the driver reports as the device's total (`nvidia-smi --query-gpu=memory.total`, or `rocm-smi
--showmeminfo vram` for AMD), in MiB. That is less than the marketing figure (an "80GB" H100 reports 81559 MiB,
85.5 GB) and it is the number the allocator can actually use, before the CUDA context takes its share.
"""

from __future__ import annotations

from typing import NamedTuple

from zerokit.errors import BadInput
from zerokit.planner.types import Hardware
from zerokit.units import MAX_GPUS_PER_NODE, closest, parse_gpu_memory, parse_host_size, parse_positive_int

MIB = 2**20
MAX_NODES = 65536
MAX_WORLD_SIZE = 1 << 20
"""The most GPUs a plan may span, about ten times the largest training clusters built (100,000-200,000 GPUs):
beyond it a typo, not a cluster."""



class GpuPreset(NamedTuple):
    """A GPU as `--gpu` names it: its memory and whether it computes in bf16."""

    name: str
    memory_mib: int
    """memory.total as nvidia-smi (rocm-smi for AMD) reports it."""
    bf16: bool
    """Native bf16 math: Ampere (sm_80/86), Ada, Hopper, CDNA2/3. Volta and Turing have none."""
    description: str

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * MIB


_PRESETS = (
    GpuPreset("a100-40gb", 40960, True, "NVIDIA A100-SXM4-40GB / A100-PCIE-40GB"),
    GpuPreset("a100-80gb", 81920, True, "NVIDIA A100-SXM4-80GB / A100 80GB PCIe"),
    GpuPreset("h100-80gb", 81559, True, "NVIDIA H100 80GB HBM3 (SXM5)"),
    GpuPreset("h100-pcie", 81559, True, "NVIDIA H100 PCIe (80 GB HBM2e)"),
    GpuPreset("h100-nvl", 95830, True, "NVIDIA H100 NVL (94 GB)"),
    GpuPreset("h200", 143771, True, "NVIDIA H200 (141 GB HBM3e)"),
    GpuPreset("l40s", 46068, True, "NVIDIA L40S (48 GB GDDR6)"),
    GpuPreset("a10g", 23028, True, "NVIDIA A10G (AWS g5, 24 GB)"),
    GpuPreset("l4", 23034, True, "NVIDIA L4 (24 GB)"),
    GpuPreset("rtx3090", 24576, True, "NVIDIA GeForce RTX 3090 (24 GB)"),
    GpuPreset("rtx4090", 24564, True, "NVIDIA GeForce RTX 4090 (24 GB)"),
    GpuPreset("v100-16gb", 16160, False, "Tesla V100-SXM2-16GB"),
    GpuPreset("v100-32gb", 32510, False, "Tesla V100-SXM2-32GB"),
    GpuPreset("t4", 15360, False, "Tesla T4 (16 GB)"),
    GpuPreset("mi250x", 65520, True, "AMD Instinct MI250X, one GCD (64 GB HBM2e; a card is two GCDs = two ranks)"),
    GpuPreset("mi300x", 196288, True, "AMD Instinct MI300X (192 GB HBM3)"),
)

GPU_PRESETS: dict[str, GpuPreset] = {p.name: p for p in _PRESETS}

# Spellings people type that are not the canonical name.
_ALIASES = {
    "a100-40g": "a100-40gb", "a100-80g": "a100-80gb", "a100-40": "a100-40gb",
    "a100-80": "a100-80gb", "h100": "h100-80gb", "h100-sxm": "h100-80gb", "h100-80": "h100-80gb",
    "h200-141gb": "h200", "rtx-3090": "rtx3090", "rtx-4090": "rtx4090", "3090": "rtx3090", "4090": "rtx4090",
    "v100-16": "v100-16gb", "v100-32": "v100-32gb",
}
# Names sold with two memory sizes: picking one would plan a 40 GB A100 as an 80 GB one, a plan that OOMs.
_AMBIGUOUS = {"a100": ("a100-40gb", "a100-80gb"), "v100": ("v100-16gb", "v100-32gb")}


def gpu_preset(name: str) -> GpuPreset:
    """The preset for `name` (case-insensitive, `_` and ` ` read as `-`); BadInput naming the closest one."""
    key = name.strip().lower().replace("_", "-").replace(" ", "-")
    if key in _AMBIGUOUS:
        small, large = (GPU_PRESETS[n] for n in _AMBIGUOUS[key])
        raise BadInput(f"--gpu {key} comes in two memory sizes: give --gpu {small.name} or --gpu {large.name} "
                       f"(nvidia-smi shows {small.memory_mib} or {large.memory_mib} MiB)")
    key = _ALIASES.get(key, key)
    if key not in GPU_PRESETS:
        raise BadInput(closest(name, GPU_PRESETS, "GPU preset") + " (or give --gpu-memory instead)")
    return GPU_PRESETS[key]


def resolve_hardware(
    gpu: str | None = None,
    gpu_memory: str | int | None = None,
    gpus_per_node: int | str = 1,
    nodes: int | str = 1,
    cpu_memory: str | int | None = None,
    nvme_path: str | None = None,
    nvme_size: str | int | None = None,
    bf16: bool | None = None,
) -> Hardware:
    """Hardware from CLI-style values. `gpu_memory` overrides the preset's memory; bf16 follows the preset
    (a custom size without a preset is assumed to have bf16, as every GPU sold since 2020 does; pass bf16=False
    for Volta/Turing)."""
    if gpu is None and gpu_memory is None:
        raise BadInput("give --gpu (a preset such as a100-80gb, h100-80gb, v100-32gb) or --gpu-memory (e.g. 80GB)")
    preset = gpu_preset(gpu) if gpu is not None else None
    memory = parse_gpu_memory(gpu_memory) if gpu_memory is not None else preset.memory_bytes
    gpn = parse_positive_int(gpus_per_node, "--gpus-per-node", maximum=MAX_GPUS_PER_NODE)
    n_nodes = parse_positive_int(nodes, "--nodes", maximum=MAX_NODES)
    if gpn * n_nodes > MAX_WORLD_SIZE:
        raise BadInput(f"--gpus-per-node {gpn} x --nodes {n_nodes} is {gpn * n_nodes:,} GPUs, more than any cluster "
                       f"has; zerokit plans up to {MAX_WORLD_SIZE:,}: check both options")
    cpu = parse_host_size(cpu_memory, "--cpu-memory") if cpu_memory is not None else None
    if nvme_size is not None and nvme_path is None:
        raise BadInput("--nvme-size needs --nvme-path (the NVMe mount to offload to)")
    nvme = parse_host_size(nvme_size, "--nvme-size") if nvme_size is not None else None
    if nvme_path is not None and not str(nvme_path).strip():
        raise BadInput("--nvme-path is empty; give the NVMe mount, e.g. /local_nvme")
    has_bf16 = bf16 if bf16 is not None else (preset.bf16 if preset is not None else True)
    return Hardware(
        gpu_name=preset.name if preset is not None else "custom",
        gpu_memory_bytes=memory,
        bf16=has_bf16,
        gpus_per_node=gpn,
        nodes=n_nodes,
        cpu_memory_bytes=cpu,
        nvme_path=nvme_path,
        nvme_bytes=nvme,
    )

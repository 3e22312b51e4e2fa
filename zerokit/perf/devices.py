"""Published figures of every GPU preset in zerokit/hardware.py: what the step-time model starts from.

Throughput is the vendor's peak *dense* matrix (tensor core / matrix core) figure per dtype, in TFLOP/s: where a
datasheet prints "with sparsity" figures only, the dense one is half of it (the datasheets say so in a footnote).
`fp32` is plain fp32 matrix math (PyTorch's default since 1.12: `allow_tf32` off for matmuls); `tf32` is listed where
the GPU has it. Bandwidths are in bytes/s, one direction. Every row cites the public document it copies, as the model
presets cite their hub configs.
"""

from __future__ import annotations

from typing import NamedTuple

GB = 10**9
TFLOPS = 10**12

# PCIe x16 link rate per direction (PCI-SIG: 8, 16, 32 GT/s per lane, 128b/130b encoding).
PCIE_X16_BYTES_PER_S = {3: 15.75 * GB, 4: 31.5 * GB, 5: 63.0 * GB}
PCIE_SOURCE = "PCI-SIG, PCI Express Base Specification 3.0/4.0/5.0: 8/16/32 GT/s per lane, 128b/130b (pcisig.com/specifications)"


class DeviceFigures(NamedTuple):
    """A GPU's published peak figures and the interconnect its usual server uses."""

    name: str
    """The GPU preset name (zerokit/hardware.py)."""
    tflops: dict[str, float]
    """Peak dense matrix TFLOP/s per dtype: bf16, fp16, fp32 and tf32 where the GPU has them."""
    memory_bandwidth: float
    """Device memory (HBM/GDDR) bandwidth, bytes/s."""
    interconnect: str
    """The default intra-node link between GPUs: `nvlink2`..`nvlink4`, `infinity-fabric`, or `pcie3`..`pcie5`."""
    intra_node_bandwidth: float
    """Per-GPU bandwidth to the other GPUs of its node over that link, one direction, bytes/s."""
    pcie_gen: int
    """Generation of the host PCIe x16 link (host <-> device copies, offload)."""
    inter_node_bandwidth: float
    """Default network bandwidth of one node to the others, all NICs together, one direction, bytes/s."""
    sources: tuple[str, ...] = ()
    """Public documents the figures come from (title and URL)."""

    @property
    def pcie_bandwidth(self) -> float:
        """The host link's rate per direction (bytes/s), before copy efficiency."""
        return PCIE_X16_BYTES_PER_S[self.pcie_gen]


# Inter-node defaults: the reference servers' networks. Anything else defaults to one 100 Gb/s Ethernet NIC per node.
_DGX_A100_NET = 8 * 200e9 / 8  # 8 x 200 Gb/s HDR InfiniBand for compute traffic
_DGX_H100_NET = 8 * 400e9 / 8  # 8 x 400 Gb/s NDR InfiniBand (ConnectX-7)
_ETHERNET_100G = 100e9 / 8
_DGX_A100 = "NVIDIA DGX A100 datasheet: 8x single-port ConnectX-6 200Gb/s HDR InfiniBand " \
            "(https://images.nvidia.com/aem-dam/Solutions/Data-Center/nvidia-dgx-a100-datasheet.pdf)"
_DGX_H100 = "NVIDIA DGX H100 datasheet: 8x single-port ConnectX-7 VPI, up to 400Gb/s InfiniBand/Ethernet " \
            "(https://resources.nvidia.com/en-us-dgx-systems/ai-enterprise-dgx)"
_NO_NET = "inter-node default: one 100 Gb/s Ethernet NIC per node (no vendor reference system); " \
          "give --inter-node-bandwidth for your network"
_A100 = "NVIDIA A100 Tensor Core GPU datasheet " \
        "(https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf): " \
        "BF16/FP16 312 TF, TF32 156 TF, FP32 19.5 TF; HBM2 1,555 GB/s (40GB), HBM2e 2,039 GB/s (80GB SXM); " \
        "NVLink 600 GB/s (bidirectional); PCIe Gen4"
_H100 = "NVIDIA H100 Tensor Core GPU datasheet (https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet): " \
        "SXM: BF16/FP16 1,979 TF and TF32 989 TF with sparsity (dense = half), FP32 67 TF, 3.35 TB/s, NVLink 900 GB/s; " \
        "PCIe: BF16/FP16 1,513 TF, TF32 756 TF with sparsity, FP32 51 TF, 2 TB/s; NVL: BF16/FP16 1,671 TF, TF32 835 TF " \
        "with sparsity, FP32 60 TF, 3.9 TB/s, NVLink bridge 600 GB/s; PCIe Gen5 128 GB/s (bidirectional)"
_H200 = "NVIDIA H200 Tensor Core GPU product page and datasheet (https://www.nvidia.com/en-us/data-center/h200/): " \
        "H200 SXM BF16/FP16 1,979 TF and TF32 989 TF with sparsity, FP32 67 TF; 4.8 TB/s HBM3e; NVLink 900 GB/s; " \
        "PCIe Gen5 128 GB/s"
_L40S = "NVIDIA L40S datasheet (https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413): BF16/FP16 362.05 TF " \
        "dense (733 with sparsity: not half of it), TF32 183 TF dense (366 with sparsity), FP32 91.6 TF; 864 GB/s " \
        "GDDR6; PCIe Gen4 x16; no NVLink"
_A10 = "NVIDIA A10 Tensor Core GPU datasheet (https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/" \
       "datasheet-new/nvidia-a10-datasheet.pdf): BF16/FP16 250 TF and TF32 125 TF with sparsity, FP32 31.2 TF; " \
       "600 GB/s GDDR6; PCIe Gen4; the A10G is AWS's A10 variant (EC2 G5), NVIDIA publishes the A10's figures"
_L4 = "NVIDIA L4 Tensor Core GPU datasheet (https://resources.nvidia.com/en-us-data-center-overview/l4-gpu-datasheet): " \
      "BF16/FP16 242 TF and TF32 120 TF with sparsity, FP32 30.3 TF; 300 GB/s; PCIe Gen4 x16"
_GA102 = "NVIDIA Ampere GA102 GPU Architecture whitepaper (https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-" \
         "architecture-whitepaper-v2.pdf), RTX 3090: FP16/BF16 tensor with FP32 accumulate 71 TF (dense), TF32 35.6 TF, " \
         "FP32 35.6 TF; 936 GB/s GDDR6X; NVLink bridge 112.5 GB/s (bidirectional); PCIe Gen4"
_AD102 = "NVIDIA Ada Lovelace GPU Architecture whitepaper (https://images.nvidia.com/aem-dam/Solutions/geforce/ada/" \
         "nvidia-ada-gpu-architecture.pdf), RTX 4090: FP16/BF16 tensor with FP32 accumulate 165.2 TF (dense), TF32 " \
         "82.6 TF, FP32 82.6 TF; 1,008 GB/s GDDR6X; PCIe Gen4; no NVLink"
_V100 = "NVIDIA Tesla V100 datasheet (https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-" \
        "update-us-1165301-r5.pdf), SXM2: tensor 125 TF (FP16), FP32 15.7 TF; HBM2 900 GB/s; NVLink 300 GB/s " \
        "(bidirectional); PCIe Gen3"
_T4 = "NVIDIA T4 datasheet (https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-" \
      "datasheet-951643.pdf): mixed-precision FP16/FP32 65 TF, FP32 8.1 TF; 320 GB/s GDDR6; PCIe Gen3 x16"
_MI250X = "AMD Instinct MI250X datasheet (https://www.amd.com/content/dam/amd/en/documents/instinct-business-docs/" \
          "product-briefs/instinct-mi250x-datasheet.pdf): per card (two GCDs) FP16/BF16 383 TF, FP32 matrix 95.7 TF, " \
          "3.2 TB/s HBM2e, up to 800 GB/s Infinity Fabric peer bandwidth, PCIe Gen4; one preset = one GCD = half; " \
          "inter-node: Frontier node, 4x 200 Gb/s Slingshot per 8 GCDs (OLCF Frontier user guide, " \
          "https://docs.olcf.ornl.gov/systems/frontier_user_guide.html)"
_MI300X = "AMD Instinct MI300X datasheet (https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/data-sheets/" \
          "amd-instinct-mi300x-data-sheet.pdf): FP16/BF16 1,307.4 TF, TF32 653.7 TF, FP32 matrix 163.4 TF (dense); " \
          "5.3 TB/s HBM3; 7 Infinity Fabric links, 896 GB/s peer aggregate (128 GB/s each, bidirectional); PCIe Gen5"


def _row(name: str, bf16: float | None, fp16: float, fp32: float, tf32: float | None, memory_tb_s: float,
         interconnect: str, intra_gb_s: float, pcie_gen: int, inter: float, *sources: str) -> DeviceFigures:
    tflops = {"fp16": fp16, "fp32": fp32}
    if bf16 is not None:
        tflops["bf16"] = bf16
    if tf32 is not None:
        tflops["tf32"] = tf32
    return DeviceFigures(name, {k: v * TFLOPS for k, v in tflops.items()}, memory_tb_s * 1e12, interconnect,
                         intra_gb_s * GB, pcie_gen, inter, sources)


# Intra-node: NVLink per GPU per direction is half the datasheet's bidirectional figure; cards without a GPU link
# talk over PCIe (the host link's rate). An NVLink *bridge* (H100 NVL, RTX 3090) joins pairs only; the default for
# those is the bridge, since 2-GPU boxes are how they are sold.
_ROWS = (
    _row("a100-40gb", 312, 312, 19.5, 156, 1.555, "nvlink3", 300, 4, _DGX_A100_NET, _A100, _DGX_A100, PCIE_SOURCE),
    _row("a100-80gb", 312, 312, 19.5, 156, 2.039, "nvlink3", 300, 4, _DGX_A100_NET, _A100, _DGX_A100, PCIE_SOURCE),
    _row("h100-80gb", 989.5, 989.5, 67, 494.5, 3.35, "nvlink4", 450, 5, _DGX_H100_NET, _H100, _DGX_H100, PCIE_SOURCE),
    _row("h100-pcie", 756.5, 756.5, 51, 378, 2.0, "pcie5", 63.0, 5, _ETHERNET_100G, _H100, _NO_NET, PCIE_SOURCE),
    _row("h100-nvl", 835.5, 835.5, 60, 417.5, 3.9, "nvlink4-bridge", 300, 5, _ETHERNET_100G, _H100, _NO_NET,
         PCIE_SOURCE),
    _row("h200", 989.5, 989.5, 67, 494.5, 4.8, "nvlink4", 450, 5, _DGX_H100_NET, _H200, _DGX_H100, PCIE_SOURCE),
    _row("l40s", 362.05, 362.05, 91.6, 183, 0.864, "pcie4", 31.5, 4, _ETHERNET_100G, _L40S, _NO_NET, PCIE_SOURCE),
    _row("a10g", 125, 125, 31.2, 62.5, 0.6, "pcie4", 31.5, 4, _ETHERNET_100G, _A10, _NO_NET, PCIE_SOURCE),
    _row("l4", 121, 121, 30.3, 60, 0.3, "pcie4", 31.5, 4, _ETHERNET_100G, _L4, _NO_NET, PCIE_SOURCE),
    _row("rtx3090", 71, 71, 35.6, 35.6, 0.936, "nvlink3-bridge", 56.25, 4, _ETHERNET_100G, _GA102, _NO_NET,
         PCIE_SOURCE),
    _row("rtx4090", 165.2, 165.2, 82.6, 82.6, 1.008, "pcie4", 31.5, 4, _ETHERNET_100G, _AD102, _NO_NET, PCIE_SOURCE),
    _row("v100-16gb", None, 125, 15.7, None, 0.9, "nvlink2", 150, 3, _ETHERNET_100G, _V100, _NO_NET, PCIE_SOURCE),
    _row("v100-32gb", None, 125, 15.7, None, 0.9, "nvlink2", 150, 3, _ETHERNET_100G, _V100, _NO_NET, PCIE_SOURCE),
    _row("t4", None, 65, 8.1, None, 0.32, "pcie3", 15.75, 3, _ETHERNET_100G, _T4, _NO_NET, PCIE_SOURCE),
    _row("mi250x", 191.5, 191.5, 47.85, None, 1.6, "infinity-fabric", 200, 4, 4 * 200e9 / 8, _MI250X, PCIE_SOURCE),
    _row("mi300x", 1307.4, 1307.4, 163.4, 653.7, 5.3, "infinity-fabric", 448, 5, _ETHERNET_100G, _MI300X, _NO_NET,
         PCIE_SOURCE),
)

DEVICE_FIGURES: dict[str, DeviceFigures] = {r.name: r for r in _ROWS}
"""Preset name -> published figures; every preset of zerokit/hardware.py has a row (a test checks it)."""

"""CPU RAM per node and NVMe bytes per node.

The CPU figure follows DeepSpeed's estimators (see `states.deepspeed_estimate`):
`additional_buffer_factor (1.5) x max(load peak, offloaded states)`, where

* the load peak is every rank on the node materialising the model in fp32 before DeepSpeed partitions it
  (4 bytes x parameters x ranks per node); ZeRO-3 loads under `zero.Init` (HF Trainer does so when the config
  is ZeRO-3), so only the largest layer is ever whole, and DeepSpeed counts that only when nothing is offloaded;
* offloaded states, summed over the node's ranks (each holds 1/N, so a node holds 1/nodes): fp32 master weights,
  Adam moments and fp32 gradients (16 bytes per parameter) when the optimizer is offloaded to CPU, and the 16-bit
  parameters when they are;
* the 1.5 factor is DeepSpeed's allowance for pinned staging buffers and allocator slack.

NVMe offload (ZeRO-3 only) moves those bytes to NVMe and pins swap buffers in CPU RAM instead, per rank:
`buffer_count (4) x min(sub_group_size, partition) x 4 bytes` for the optimizer swapper and
`buffer_count (5) x buffer_size (1e8, or the largest layer's partition) x dtype bytes` for the parameter swapper (DeepSpeed's defaults,
`runtime/zero/offload_config.py`, `runtime/swap_tensor/optimizer_utils.py`).

Deliberate differences from DeepSpeed's estimators: for ZeRO-2 with CPU offload DeepSpeed counts the fp32 load
peak over all GPUs of all nodes and the offloaded states undivided by nodes; we count per node (the same figure on
one node). The 16-bit parameters offloaded by ZeRO-3 are counted at the training dtype's width.
"""

from __future__ import annotations

from typing import NamedTuple

ADDITIONAL_BUFFER_FACTOR = 1.5
OFFLOADED_OPTIMIZER_BYTES = 16  # fp32 master + momentum + variance + fp32 gradient
NVME_OPT_BUFFER_COUNT = 4
NVME_PARAM_BUFFER_COUNT = 5
NVME_PARAM_BUFFER_SIZE = 100_000_000
SUB_GROUP_SIZE = 1_000_000_000


class HostMemory(NamedTuple):
    cpu_bytes: int
    """CPU RAM needed per node: the larger of `load_peak` and `steady_state`."""
    nvme_bytes: int
    """NVMe bytes per node."""
    load_peak: int
    """While the ranks load the model."""
    offloaded: int
    pinned: int

    @property
    def steady_state(self) -> int:
        """While training: the offloaded states and the pinned swap buffers."""
        return self.offloaded + self.pinned


def host_memory(
    parameters: int,
    largest_layer_parameters: int,
    gpus_per_node: int,
    nodes: int,
    zero_stage: int,
    offload_optimizer: str = "none",
    offload_param: str = "none",
    dtype_bytes: int = 2,
) -> HostMemory:
    """CPU RAM and NVMe bytes per node for one setup."""
    p, world = parameters, gpus_per_node * nodes
    load = 4 * (largest_layer_parameters if zero_stage == 3 else p) * gpus_per_node
    per_node = -(-p // nodes)  # the node's share of every partitioned tensor
    cpu_states = nvme = pinned = 0
    if offload_optimizer == "cpu":
        cpu_states += OFFLOADED_OPTIMIZER_BYTES * per_node
    elif offload_optimizer == "nvme":
        nvme += OFFLOADED_OPTIMIZER_BYTES * per_node
        pinned += gpus_per_node * NVME_OPT_BUFFER_COUNT * min(SUB_GROUP_SIZE, -(-p // world)) * 4
    if offload_param == "cpu":
        cpu_states += dtype_bytes * per_node
    elif offload_param == "nvme":
        nvme += dtype_bytes * per_node
        # The ds_config raises buffer_size to the largest layer's per-rank partition so any one partition fits a buffer.
        buffer = max(NVME_PARAM_BUFFER_SIZE, -(-largest_layer_parameters // world))
        pinned += gpus_per_node * NVME_PARAM_BUFFER_COUNT * buffer * dtype_bytes
    # ZeRO-3 under zero.Init: DeepSpeed counts the per-rank layer load only when nothing is offloaded to CPU.
    peak = (cpu_states or load) if zero_stage == 3 else max(load, cpu_states)
    cpu = int(ADDITIONAL_BUFFER_FACTOR * peak) + pinned
    return HostMemory(cpu, nvme, load, cpu_states, pinned)

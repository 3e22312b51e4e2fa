"""CPU RAM and NVMe bytes per node: while the ranks load the model, and while they train.

Per node the figures are the sum over its ranks. P trainable parameters, N ranks in all, P/N a rank's partition
(padded up), e the training dtype's width, L DeepSpeed's largest module (the largest parameter, near enough).

* `load_peak`: every rank materialises the model on the host before DeepSpeed moves it to the GPU
  (`engine._configure_distributed_model`): all parameters x ranks per node x the bytes each is loaded in
  (`load_bytes`). transformers 5's `from_pretrained` loads the checkpoint's own dtype by default (`dtype="auto"`,
  modeling_utils.from_pretrained), which config.json names (`dtype`, or `torch_dtype`): 2 bytes for a bf16 or fp16
  checkpoint, 4 for fp32, and 4 where the config does not say (`from_config` builds in fp32). ZeRO-3 loads under
  `zero.Init` (the HF Trainer does so for a ZeRO-3 config), which partitions each module as it is built: only the
  largest module is ever whole on the host. A 4-bit QLoRA base is loaded straight onto each rank's GPU
  (bitsandbytes' quantizer sets `device_map={"": current_device}`, quantizer_bnb_4bit.update_device_map): the host
  holds one tensor at a time, the largest.
* `steady_state` (what traced runs show: benchmarks/realrun_memory.py measures it on the host side):
  - optimizer offload to the CPU: fp32 master weights, fp32 gradients and Adam's moments, 16 bytes per parameter
    of the rank's partition; plus ZeRO-1/2's pinned 16-bit copy of the partition
    (`param_buffer_of_bit16_for_cpu_offload_groups`, eP/N) and its gradient staging buffer
    (`temp_grad_buffer_for_cpu_offload`, eL), or ZeRO-3's gradient partitions (`grad_partitions_flat_buffer`,
    eP/N, allocated on the offload device);
  - optimizer offload to NVMe: the fp32 states (16 bytes per parameter) go to the drive; the host keeps the
    gradient partitions (eP/N) and page-locked swap buffers, `buffer_count (4) x min(sub_group_size, P/N) x 4`;
  - parameter offload to the CPU: the rank's 16-bit partition (eP/N); to NVMe: the partition goes to the drive,
    the host keeps a staging copy (eP/N) and `buffer_count (5) x buffer_size` page-locked elements, buffer_size
    being 1e8 or the largest layer's partition (DeepSpeed's defaults, `runtime/zero/offload_config.py`,
    `runtime/swap_tensor/`).
* `cpu_bytes` = the larger of the two.

Deliberate difference from DeepSpeed's estimators (`states.deepspeed_estimate`): they multiply by an
`additional_buffer_factor` of 1.5 and count ZeRO-2's offloaded states undivided by nodes; the figures here are
the bytes a traced run holds.
"""

from __future__ import annotations

from typing import NamedTuple

from zerokit.memory.buffers import DEFAULT_SUB_GROUP_SIZE

OFFLOADED_OPTIMIZER_BYTES = 16  # fp32 master + fp32 gradient + momentum + variance
NVME_OPT_BUFFER_COUNT = 4
NVME_PARAM_BUFFER_COUNT = 5
NVME_PARAM_BUFFER_SIZE = 100_000_000
SUB_GROUP_SIZE = DEFAULT_SUB_GROUP_SIZE  # what a plan's ds_config leaves DeepSpeed's own (`zero_buffer_keys`)
CHECKPOINT_DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2}
"""config.json's dtype names (transformers writes torch's, without the `torch.` prefix) and their widths."""


def load_bytes(config: dict) -> int:
    """Bytes a parameter takes on the host while `from_pretrained` loads it: the checkpoint's dtype as config.json
    names it (`dtype`; transformers 4 wrote `torch_dtype`), else 4 (fp32: `from_config`, and no dtype to go by)."""
    name = config.get("dtype", config.get("torch_dtype"))
    if isinstance(name, str):
        return CHECKPOINT_DTYPE_BYTES.get(name.removeprefix("torch."), 4)
    return 4


class HostMemory(NamedTuple):
    cpu_bytes: int
    """CPU RAM needed per node: the larger of `load_peak` and `steady_state`."""
    nvme_bytes: int
    """NVMe bytes per node."""
    load_peak: int
    """While the ranks load the model."""
    offloaded: int
    """States and staging buffers the ranks keep on the host while training."""
    pinned: int
    """Page-locked NVMe swap buffers."""

    @property
    def steady_state(self) -> int:
        """While training: the offloaded states, staging buffers and swap buffers."""
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
    trainable: int | None = None,
    load_width: int = 4,
    loads_on_gpu: bool = False,
) -> HostMemory:
    """CPU RAM and NVMe bytes per node for one setup (`trainable`: parameters with optimizer states, default all;
    `load_width`: bytes a parameter is loaded in, `load_bytes`; `loads_on_gpu`: a QLoRA base, loaded onto the GPU)."""
    p, world, e = parameters, gpus_per_node * nodes, dtype_bytes
    t = parameters if trainable is None else trainable
    tn, pn = -(-t // world), -(-p // world)  # a rank's partition of the trainable, and of all, parameters
    whole = largest_layer_parameters if zero_stage == 3 or loads_on_gpu else p  # whole on the host at once, a rank
    load = load_width * whole * gpus_per_node
    states = nvme = pinned = 0  # per rank
    if offload_optimizer == "cpu":
        states += OFFLOADED_OPTIMIZER_BYTES * tn + e * tn
        if zero_stage < 3:
            states += e * largest_layer_parameters
    elif offload_optimizer == "nvme":
        nvme += OFFLOADED_OPTIMIZER_BYTES * tn
        states += e * tn
        pinned += NVME_OPT_BUFFER_COUNT * min(SUB_GROUP_SIZE, tn) * 4
    if offload_param == "cpu":
        states += e * pn
    elif offload_param == "nvme":
        nvme += e * pn
        states += e * pn
        # The ds_config raises buffer_size to the largest layer's per-rank partition so any one partition fits a buffer.
        buffer = max(NVME_PARAM_BUFFER_SIZE, -(-largest_layer_parameters // world))
        pinned += NVME_PARAM_BUFFER_COUNT * buffer * e
    n = gpus_per_node
    return HostMemory(max(load, n * (states + pinned)), n * nvme, load, n * states, n * pinned)

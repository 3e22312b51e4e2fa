"""Model states (parameters, gradients, optimizer states) per GPU, in bytes.

Two accountings live here:

* `model_states` follows DeepSpeed's own estimators (`estimate_zero2_model_states_mem_needs` in
  `runtime/zero/stage_1_and_2.py`, `estimate_zero3_model_states_mem_needs` in `runtime/zero/stage3.py`) and splits
  their totals into the CONTRACT's three figures. With 16-bit training and Adam, per parameter:

  - 16-bit parameters: 2 bytes, partitioned only by ZeRO-3;
  - 16-bit gradients: 2 bytes, partitioned from ZeRO-2 on (ZeRO-1 keeps the full 16-bit gradients);
  - fp32 gradients of the partition the optimizer updates: 4 bytes, partitioned from ZeRO-1 on;
  - fp32 master weights + Adam momentum + variance: 4 + 8 bytes (counted as optimizer state), partitioned from
    ZeRO-1 on.

  That gives DeepSpeed's `2P + 18P/N` for ZeRO-2 and `4L + 18P/N` for ZeRO-3, where L is the largest layer
  (its 16-bit parameters and gradients are gathered whole: the ZeRO-3 working set) and ZeRO-3 drops the partitioned
  16-bit gradient because it reduces straight into the fp32 partition. Stages 0 and 1 are the same bookkeeping
  with less partitioning (20 bytes per parameter at stage 0, as DeepSpeed's FP16/BF16 optimizers keep).
  Offloading the optimizer moves the fp32 gradients and optimizer states off the GPU (and, below ZeRO-3, the 16-bit
  gradients too: they stream out through the reduce buckets, which `buffers.py` counts). Offloading parameters
  (ZeRO-3) leaves only the working set on the GPU.

  Deliberate differences from DeepSpeed's estimators: fp32 training counts 4 bytes for the "16-bit" copies
  (DeepSpeed's estimators assume 16-bit); stage 0/1 and offload combinations the estimators do not cover follow the
  same per-tensor bookkeeping.

* `paper_model_states` is the ZeRO paper's accounting (Rajbhandari et al. 2020, Figure 1): (2 + 2 + K) bytes per
  parameter with K = 12 for mixed-precision Adam, no fp32 gradient copy.
"""

from __future__ import annotations

from typing import NamedTuple

FP32_BYTES = 4
ADAM_STATE_BYTES = 8  # momentum + variance, fp32
MASTER_BYTES = 4  # fp32 master weights
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


class ModelStates(NamedTuple):
    """Model states resident on one GPU at the peak of a step."""

    parameters: int
    gradients: int
    optimizer_states: int

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer_states


def model_states(
    parameters: int,
    largest_layer_parameters: int,
    world_size: int,
    zero_stage: int,
    offload_optimizer: str = "none",
    offload_param: str = "none",
    precision: str = "bf16",
) -> ModelStates:
    """Per-GPU model states with DeepSpeed's accounting (see the module docstring for the bytes per parameter)."""
    p, n, w = parameters, world_size, DTYPE_BYTES[precision]
    opt_on_gpu = offload_optimizer == "none"
    if zero_stage == 3:
        working = w * largest_layer_parameters  # the gathered layer's full parameters, and again its gradients
        params = working + (_div(w * p, n) if offload_param == "none" else 0)
        grads = working + (_div(FP32_BYTES * p, n) if opt_on_gpu else 0)
        opt = _div((MASTER_BYTES + ADAM_STATE_BYTES) * p, n) if opt_on_gpu else 0
        return ModelStates(params, grads, opt)
    params = w * p
    if not opt_on_gpu:
        # ZeRO-Offload: gradients stream to the CPU through the buckets; ZeRO-1 still accumulates full 16-bit grads.
        return ModelStates(params, w * p if zero_stage == 1 else 0, 0)
    opt_shards = 1 if zero_stage == 0 else n
    grad16 = w * p if zero_stage < 2 else _div(w * p, n)
    grads = grad16 + _div(FP32_BYTES * p, opt_shards)
    opt = _div((MASTER_BYTES + ADAM_STATE_BYTES) * p, opt_shards)
    return ModelStates(params, grads, opt)


def deepspeed_estimate(
    parameters: int,
    largest_layer_parameters: int,
    gpus_per_node: int,
    nodes: int,
    zero_stage: int,
    offload_optimizer: bool,
    offload_param: bool = False,
    zero_init: bool = True,
    additional_buffer_factor: float = 1.5,
) -> tuple[int, int]:
    """(cpu_bytes, gpu_bytes) exactly as DeepSpeed 0.19's estimators compute them, without importing DeepSpeed.

    Kept so that the planner can report "DeepSpeed's estimator says" next to its own figure, and so that the tests
    can pin our formulas to theirs.
    """
    total_gpus = gpus_per_node * nodes
    p = parameters
    if zero_stage == 3:
        gpus_factor = 1 / nodes
        largest = 4 * largest_layer_parameters
        if offload_optimizer:
            if offload_param:
                gpu = largest
                cpu = p * (18 * gpus_factor if zero_init else max(4 * gpus_per_node, 18 * gpus_factor))
            else:
                gpu = largest + int(2 * p / total_gpus)
                cpu = p * (16 * gpus_factor if zero_init else max(4 * gpus_per_node, 16 * gpus_factor))
        else:
            gpu = largest + int(18 * p / total_gpus)
            cpu = (largest_layer_parameters if zero_init else p) * 4 * gpus_per_node
        return int(cpu * additional_buffer_factor), int(gpu)
    if offload_optimizer:
        return int(p * max(4 * total_gpus, 16) * additional_buffer_factor), 2 * p
    return int(p * 4 * gpus_per_node * additional_buffer_factor), 2 * p + int(18 * p / total_gpus)


def paper_model_states(parameters: int, num_gpus: int, zero_stage: int, k: int = 12) -> int:
    """Per-GPU model-state bytes as the ZeRO paper counts them: 2 (fp16 params) + 2 (fp16 grads) + K (optimizer).

    Stage 1 (P_os) partitions the K bytes, stage 2 (P_os+g) also the gradients, stage 3 (P_os+g+p) everything.
    """
    p, n = parameters, num_gpus
    if zero_stage == 0:
        return (2 + 2 + k) * p
    if zero_stage == 1:
        return (2 + 2) * p + k * p // n
    if zero_stage == 2:
        return 2 * p + (2 + k) * p // n
    return (2 + 2 + k) * p // n


def _div(numerator: int, shards: int) -> int:
    """Bytes of one shard: DeepSpeed pads partitions up to an equal size, so round up."""
    return -(-numerator // shards)

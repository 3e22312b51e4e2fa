"""DeepSpeed's communication buffer settings a plan writes (`buffer_ladder`, from HF's "auto" sizes to frugal ones)
and the fixed overhead reserve.

The settings are ds_config keys (`zero_buffer_keys`): `reduce_bucket_size`, `allgather_bucket_size` and
`overlap_comm` for ZeRO-1/2; `stage3_prefetch_bucket_size`, `stage3_param_persistence_threshold`,
`stage3_max_live_parameters` (and the reuse distance, written the same) for ZeRO-3. What DeepSpeed 0.19 allocates
for them, phase by phase, is the cost layer's (`zerokit.memory.estimate`, traced in real runs: one gradient bucket,
two with `overlap_comm`). The transformers guide's rule of thumb, 4.5x the bucket sizes under `overlap_comm` (5e8
each -> 9 GB in 16-bit), is what `zerokit lint` warns with (ZK307) for a hand-written ds_config.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

DEFAULT_MAX_LIVE_PARAMETERS = 1_000_000_000  # DeepSpeed's default stage3_max_live_parameters
DEFAULT_SUB_GROUP_SIZE = 1_000_000_000
"""DeepSpeed's default `zero_optimization.sub_group_size` (runtime/zero/config.py): ZeRO-3 steps its optimizer one
sub-group of about this many partition elements at a time. zerokit's ds_configs leave it at this default."""

# Overhead: the CUDA context (300-600 MiB with cuBLAS/cuDNN handles), NCCL's communicators and channel buffers
# (a few hundred MiB per process group) and the caching allocator's fragmentation, which grows with the pool.
OVERHEAD_FIXED = 2**30  # 1 GiB: context + NCCL
OVERHEAD_FRACTION = 0.05  # 5% of the GPU: fragmentation


class BufferSettings(NamedTuple):
    """The DeepSpeed knobs that set buffer sizes (elements, as the ds_config takes them)."""

    overlap_comm: bool
    reduce_bucket_size: int
    allgather_bucket_size: int
    prefetch_bucket_size: int
    param_persistence_threshold: int
    max_live_parameters: int
    hf_auto: bool
    """True when the sizes are exactly what HF Trainer / Accelerate fill for "auto" (reduce = hidden^2,
    prefetch = 0.9 hidden^2, persistence = 10 hidden), so a trainer/accelerate config can leave them "auto"."""
    sub_group_size: int = DEFAULT_SUB_GROUP_SIZE
    """ZeRO-3's `sub_group_size`: the optimizer step casts one sub-group's gradients to fp32 at a time. The planner
    keeps DeepSpeed's default and writes nothing; a ds_config that sets another value is estimated with it."""


def hf_auto_settings(hidden_size: int, overlap_comm: bool = True,
                     max_live_parameters: int = DEFAULT_MAX_LIVE_PARAMETERS) -> BufferSettings:
    """The sizes transformers' `HfTrainerDeepSpeedConfig` and Accelerate fill for "auto" from `hidden_size`."""
    h2 = hidden_size * hidden_size
    return BufferSettings(overlap_comm, h2, h2, int(0.9 * h2), 10 * hidden_size, max_live_parameters, True)


@functools.lru_cache(maxsize=256)
def buffer_ladder(hidden_size: int, zero_stage: int) -> tuple[BufferSettings, ...]:
    """Settings from fastest to most frugal; the planner keeps the first that does as well as the last.
    Cached: the planner asks for every stage of every plan, and the ladder depends on the hidden size alone.

    HF's "auto" sizes with overlap_comm come first, so a trainer config can leave them "auto"; then fewer live
    ZeRO-3 parameters; then no overlap; then quarter-size buckets (explicit values).
    """
    if hidden_size < 32:  # shape unknown: DeepSpeed-sized explicit buckets instead of HF's hidden^2 rule
        base = BufferSettings(True, 50_000_000, 50_000_000, 50_000_000, 100_000, DEFAULT_MAX_LIVE_PARAMETERS, False)
        frugal = BufferSettings(False, 5_000_000, 5_000_000, 5_000_000, 100_000, 10_000_000, False)
        return (base,) if zero_stage == 0 else (base, frugal)
    h2 = hidden_size * hidden_size
    small = max(h2 // 4, 1_000_000)
    frugal = BufferSettings(False, small, small, small, 10 * hidden_size, max(small, 10_000_000), False)
    if zero_stage == 3:
        return (
            hf_auto_settings(hidden_size),
            hf_auto_settings(hidden_size, max_live_parameters=100_000_000),
            hf_auto_settings(hidden_size, overlap_comm=False, max_live_parameters=100_000_000),
            frugal,
        )
    if zero_stage == 0:
        return (hf_auto_settings(hidden_size),)  # no ZeRO buckets to tune
    return (hf_auto_settings(hidden_size), hf_auto_settings(hidden_size, overlap_comm=False), frugal)


def zero_buffer_keys(settings: Any, zero_stage: int) -> dict[str, Any]:
    """The `zero_optimization` keys a plan writes for its buffers, in the ds_config's order. `settings`: a
    BufferSettings, or anything with its fields (the planner's Decision). Stage 0 has no ZeRO buffers."""
    if zero_stage == 0:
        return {}
    keys: dict[str, Any] = {"overlap_comm": settings.overlap_comm, "contiguous_gradients": True,
                            "reduce_bucket_size": settings.reduce_bucket_size}
    if zero_stage < 3:
        keys.update(reduce_scatter=True, allgather_partitions=True,
                    allgather_bucket_size=settings.allgather_bucket_size)
    else:
        keys.update(stage3_prefetch_bucket_size=settings.prefetch_bucket_size,
                    stage3_param_persistence_threshold=settings.param_persistence_threshold,
                    stage3_max_live_parameters=settings.max_live_parameters,
                    stage3_max_reuse_distance=settings.max_live_parameters)
        sub_group = getattr(settings, "sub_group_size", DEFAULT_SUB_GROUP_SIZE)
        if sub_group != DEFAULT_SUB_GROUP_SIZE:  # the default is DeepSpeed's own: a plan's ds_config leaves it out
            keys["sub_group_size"] = sub_group
    return keys


def kept_gathered(sizes: tuple[int, ...], distance: float, threshold: float = 0) -> tuple[int, int]:
    """(modules, parameters) of the last of `sizes` (each module's parameters, in forward order) that ZeRO-3 keeps
    gathered from forward into backward, `distance` being `stage3_max_reuse_distance` and `stage3_max_live_parameters`
    alike (a plan writes the two so). DeepSpeed 0.19's coordinator (`partitioned_param_coordinator`) keeps a module
    by either of two rules, and the last modules by whichever keeps more:
    - the reuse window (`__params_to_release`): a module with A parameters after it in forward is used again 2A
      parameters later (the rest of forward, then backward back to it), and is kept when that is less than the
      distance;
    - the prefetcher: it fetches a module ahead at every module it enters (the parameterless ones too, 13 a llama
      layer against 7 with weights), so it reaches backward's part of the trace about half-way through forward, and
      every parameter it passes that is still gathered is marked as needed again and stays, as many as the live
      limit lets it gather: the last modules up to that many gathered parameters.
    All of them where the model is below the distance (DeepSpeed's default 1e9). Modules of at most `threshold`
    parameters (`stage3_param_persistence_threshold`: whole on every rank) count toward the window only. Counted
    in real steps (benchmarks/zero3_gathers.py) and traced (benchmarks/realrun_memory.py's live cases)."""
    return _kept_suffix(sizes, distance, threshold)[1:]


def kept_with_views(sizes: tuple[int, ...], held: tuple[int, ...], distance: float, threshold: float = 0) -> int:
    """Parameters whose gathered storage is still allocated at the end of forward: `kept_gathered`'s, plus the
    `held` parameters (one entry per module of `sizes`) of the modules it releases.

    `held` is what the autograd graph keeps through a view: a stacked expert weight of transformers 5 (an MoE
    layer's `gate_up_proj`, `down_proj`) reaches its matmul as a view, `weight.transpose(-2, -1)` in the default
    grouped_mm experts (`integrations/moe.py`, `_grouped_linear`) or `weight[expert]` in the eager loop, and the
    view saved for backward shares the gathered storage. Releasing the module (`param.data = empty`) frees the
    parameter, not that storage, which lives until the layer's backward: a ZeRO-3 Mixtral at a live limit of 3M
    (benchmarks/realrun_memory.py's mixtral-z3-live3m) held 12.19 MB of gathered buffers at its forward peak, 6.1M
    parameters, where the window keeps 2.82M and the two released layers' experts are 3.15M. An `nn.Linear`'s
    weight reaches DeepSpeed's `zero3_linear_wrap` itself, not a view, and is freed. Without recomputation only:
    a checkpointed layer's forward saves nothing. QLoRA's 4-bit weights are held so too, by bitsandbytes' node
    attribute, with recomputation or without (`zerokit.memory.estimate.quantized_held`)."""
    start, _, kept = _kept_suffix(sizes, distance, threshold)
    return kept + sum(held[:start])


def _kept_suffix(sizes: tuple[int, ...], distance: float, threshold: float) -> tuple[int, int, int]:
    """(index of the first module kept, modules gathered among the kept, their parameters): `kept_gathered`."""
    modules = kept = after = 0
    start = len(sizes)
    for n in reversed(sizes):
        gathered = n > threshold
        if 2 * after >= distance and kept + (n if gathered else 0) > distance:
            break
        if gathered:
            modules += 1
            kept += n
        after += n
        start -= 1
    return start, modules, kept


def default_overhead(gpu_memory_bytes: int) -> int:
    """CUDA context + NCCL + fragmentation reserve: 1 GiB plus 5% of the GPU (5.1 GB on an 80 GB GPU)."""
    return OVERHEAD_FIXED + int(OVERHEAD_FRACTION * gpu_memory_bytes)

"""The cost layer: the bytes one setup needs on one GPU at each phase of a training step, and on the host.

`estimate(model, hardware, training, setup) -> Estimate` sums one setup's memory; the planner's search sums the
same arithmetic through `costs_for`/`step_costs` (split into what depends on the micro-batch and what does not, so
that it can binary-search), and the real-run harness (`benchmarks/realrun_memory.py`) plans each case through it,
holding every figure here against a traced DeepSpeed training. tests/test_estimate_peft.py keeps `estimate()` equal
to the plan's phases, LoRA included.

A step has three phases, each with its own peak (CONTRACT.md `memory.phases`):

- forward: the end of forward, where the loss upcasts the logits to fp32 and allocates the log-probabilities;
- backward: the largest of three moments: the loss backward (fp32 gradients of log-probabilities and logits
  while every activation is still held), the lm_head backward (its weight gradient, the first gradient reduce
  and DeepSpeed's gradient buffers), and one decoder layer's working set (with checkpointing: its recompute);
- optimizer_step: gradients flattened and cast to fp32 (at ZeRO-3 one sub-group at a time), the optimizer, no
  activations.

What DeepSpeed 0.19 allocates, read from its code and confirmed on traced runs (benchmarks/realrun_memory.py).
P trainable parameters, N data-parallel ranks, P/N a rank's partition, e the training dtype's width:

- Which wrapper runs (`engine._do_optimizer_sanity_check`): ZeRO-1/2 `DeepSpeedZeroOptimizer`; ZeRO-3
  `DeepSpeedZeroOptimizer_Stage3`; ZeRO-0 in bf16/fp16 `FP16_Optimizer` (runtime/fp16/fused_optimizer.py);
  ZeRO-0 in fp32 the bare optimizer (FusedAdam).
- ZeRO-0, 16-bit: flat 16-bit parameters eP, an fp32 master copy 4P and Adam's moments 8P, built at
  initialisation. Backward leaves eP gradients and all-reduces them at the accumulation boundary through a flat
  copy (`buffered_allreduce_fallback`, buckets of 5e8 elements). The step casts each gradient to fp32 (a list
  of copies, 4P) and flattens the list (4P more): 24 bytes per parameter at the step, not 16 or 20.
  fp32: parameters 4P and moments 8P; the all-reduce copy 4P at the end of backward; the step adds nothing.
- ZeRO-1/2: 16-bit parameters eP (never partitioned), fp32 master 4P/N, moments 8P/N. Backward's hooks copy
  each gradient into the IPG bucket (`reduce_bucket_size` elements, two buckets with overlap_comm), allocated at
  the first gradient and released at the end of backward, and reduce each full bucket into `grads_in_partition`
  (eP/N), which lives until the step. The step flattens that partition (eP/N) and casts it to fp32 (4P/N; no
  copy in fp32). Stage 1 and 2 allocate the same at accumulation 1; with accumulation stage 2 keeps
  `grads_in_partition` between micro-batches, stage 1 keeps the full 16-bit gradients (eP) and reduces them at
  the boundary.
- ZeRO-3: the rank's partition of the 16-bit parameters eP/N, master 4P/N, moments 8P/N, the gradient
  partitions (`grad_partitions_flat_buffer`, eP/N) and one IPG bucket, all allocated at initialisation.
  Forward gathers each module's parameters and frees them after use unless they are used again within
  `stage3_max_reuse_distance` parameters (`partitioned_param_coordinator.__params_to_release`), or DeepSpeed's
  prefetcher, which runs a module ahead at every module it enters and so into backward's trace half-way through
  forward, has marked them as needed again (as many as `stage3_max_live_parameters` lets it hold): at the end of
  forward the model's last modules stay gathered, by whichever rule keeps more (`buffers.kept_gathered`; counted
  and traced, benchmarks/zero3_gathers.py and realrun_memory.py's live cases), and backward re-gathers the rest.
  Without gradient checkpointing, an MoE's stacked experts stay allocated wherever their module is released: the
  matmul's view of the gathered weight, saved for backward, holds the storage (`buffers.kept_with_views`); and
  QLoRA's gathered 4-bit weights stay until the autograd graph goes, after the optimizer step (`quantized_held`).
  Parameters below `stage3_param_persistence_threshold` elements stay whole on every rank. One rank gathers
  nothing (each parameter is its whole partition), unless the parameters are offloaded: then what stays is fetched
  once (a 0.9B llama on one H100, below the live limit, held all of it). The step works one sub-group at a time
  (below).
- ZeRO-3's optimizer step (runtime/zero/stage3.py of DeepSpeed 0.19.8; S = `zero_optimization.sub_group_size`,
  1e9 by default, config.py:182, handed over at engine.py:2775; zerokit's ds_configs leave it at that):
  - the rank's partition is cut into sub-groups at initialisation (`_create_fp16_sub_groups`, 1210-1233): the
    parameters in order, each counting its partition ceil(numel/N), a sub-group closing at the tensor that brings
    it to S elements (1226), the whole partition one sub-group when it is at most S (1215). Each sub-group has its
    own fp32 master tensor and Adam states (`fp32_partitioned_groups_flat`, `_create_fp32_partitions` at
    1081): 12P/N in all, as with one sub-group.
  - held through the step: the 16-bit partition eP/N, master and moments 12P/N, and `grad_partitions_flat_buffer`
    (eP/N, 791), whose slices are each sub-group's `averaged_gradients` (the backward epilogue, 1424); gathered
    parameters are released first (`_partition_all_parameters`, 2878).
  - before the loop: fp16 only, the overflow check's `torch.isinf`/`isnan` of the whole gradient buffer, a
    boolean copy of 1 byte x P/N (2815-2816, 3013); then the gradient norm (`_get_norm_groups`, 2886), which
    casts each gradient partition to fp64 one at a time (`get_grad_norm_direct`, 2457: 8 bytes x the largest
    tensor's partition). `zero_grad` drops the parameters' own `.grad` (2907).
  - the loop (2910-2927), one sub-group at a time: `_prepare_sub_group` -> `_prepare_fp32_grad_for_sub_group`
    (2683-2699) flattens the sub-group's gradient slices (a new e x s copy: torch's `flatten_dense_tensors`,
    torch/_utils.py:602, concatenates, except that one tensor alone comes back as a view) and casts the flat
    copy to fp32 (4s; the 16-bit copy dies once the cast is done; in fp32 the cast is the copy itself), the fp32
    master's `.grad`; `unscale_and_clip_grads` scales it in place (2988); the optimizer steps that one fp32
    tensor (FusedAdam, DeepSpeed's CPU Adam: no temporaries); the master is copied into the 16-bit partition in
    place (2858); and `_release_sub_group` drops the fp32 gradient (2735) before the next sub-group is prepared.
  So the step's peak beyond the states and the gradient buffer is max(e x s + 4s over the sub-groups of several
  tensors, 4s over those of one tensor, 8 x the largest tensor's partition, fp16: P/N) (`_zero3_step`), s a
  sub-group's elements: (e + 4)P/N when the partition is one sub-group, as every traced run with a partition
  below 1e9 elements shows, about (e + 4) x S when it is larger (a 32B model on 8 GPUs: 6.4 GB, not 24.6 GB).
  Traced with sub-groups (benchmarks/realrun_memory.py SUBGROUP_CASES): the peak is the 887,424-element
  sub-group's 16-bit flat copy and fp32 cast (1.775 + 3.550 MB), and with 100,000-element sub-groups the norm's
  fp64 copy of the embedding's gradient (4.194 MB). The sub-groups come from the model's tensors in
  `model.parameters()` order (`step_sub_groups`); the HF Trainer's no-decay group (norms, biases) makes a second
  parameter group, which moves the boundaries by those small tensors only. With the optimizer offloaded, the
  fp32 gradients are already on the host (1419) and `_prepare_sub_group` casts nothing on the GPU (2706).
- LoRA/QLoRA at ZeRO-3 (traced): backward never reaches the modules before the first adapted computation (the
  embedding, the first layer's q, k, v base weights), so without checkpointing the trace releases them after
  forward. LoRA's adapters stay fp32 on a zero.Init model; QLoRA's base loads without zero.Init, so the engine
  casts its adapters, and its 4-bit weights are partitioned, gathered and thresholded by their bf16 storage
  elements (four weights each) while their quantization constants stay whole on every rank. A PEFT plan turns
  `memory_efficient_linear` off: its `F.linear` replacement would keep every frozen linear's input.
- Optimizer offload (ZeRO-Offload) keeps the master, the moments and the fp32 gradients on the host; parameter
  offload (ZeRO-3) keeps the 16-bit partition there too. What stays on the GPU is the working set: gathered
  parameters, the 16-bit gradients on their way out, buckets.

The phase model ignores a few kilobytes of DeepSpeed bookkeeping (norm scalars, overflow flags), and the
partitions' alignment padding (a few elements per rank).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from zerokit._dataclass import dataclass
from zerokit._memo import IdentityMemo
from zerokit.memory.activations import ActivationEstimate
from zerokit.memory.buffers import BufferSettings, kept_gathered, kept_with_views
from zerokit.memory.host import HostMemory, host_memory, load_bytes
from zerokit.memory.states import DTYPE_BYTES
from zerokit.perf.flops import forward_parts
from zerokit.planner.types import GpuMemory, Hardware, Setup, Training

PHASES = ("forward", "backward", "optimizer_step")
STAGE0_ALLREDUCE_ELEMENTS = 500_000_000
"""`engine.allreduce_gradients` flattens ZeRO-0's gradients into buckets of this many elements."""
FP32 = 4
ADAM = 8
CUBLAS_WORKSPACES = 2 * 32 * 2**20
"""The cuBLAS workspaces torch allocates through the caching allocator, live from a step's first matmul on: one per
cuBLAS handle and stream (`cublas_handle_stream_to_workspace`), so one for the forward's thread and one for
autograd's backward thread; 32 MiB each on Hopper (NVIDIA's recommended size there, torch's default for it),
about 8 MiB on earlier GPUs, planned at Hopper's size. Every phase of every one-GPU training in tests/data/gpu (H100
and H200) held 64 MiB of allocations beyond the model's tensors before it was counted: 67.1 MB."""


@dataclass(frozen=True)
class Estimate:
    """One setup's memory: per-GPU bytes at each phase, the peak phase, and the host's share."""

    setup: Setup
    precision: str
    buffers: BufferSettings
    phases: Mapping[str, GpuMemory]
    """forward, backward, optimizer_step: each phase's components at that phase's own peak."""
    peak_phase: str
    host: HostMemory
    activations_source: str = "modelled"

    @property
    def memory(self) -> GpuMemory:
        """The components at the peak phase (CONTRACT.md `memory.per_gpu`)."""
        return self.phases[self.peak_phase]

    @property
    def total(self) -> int:
        return self.memory.total


class StepCosts:
    """Everything of one setup that does not depend on the micro-batch, by component.

    `phases(act)` adds one micro-batch's activations and returns each phase's components at its peak; `need(act)`
    is the largest phase total, the figure the planner compares with the GPU (plain integer arithmetic: every
    candidate of every plan asks it several times).
    """

    __slots__ = (
        "_base",
        "_end_total",
        "_step_total",
        "buffers_backward",
        "end_grads",
        "end_transient",
        "gathered",
        "grads_backward",
        "grads_held",
        "grads_rest",
        "integral",
        "opt_rest",
        "overhead",
        "params_rest",
        "step_grads",
        "step_held",
        "step_transient",
        "workspace",
    )

    def __init__(self, params_rest: int, gathered: int, opt_rest: int, grads_rest: int, grads_held: int,
                 grads_backward: int, buffers_backward: int, step_grads: int, step_transient: int,
                 end_grads: int = 0, end_transient: int = 0, overhead: int = 0, workspace: int = 0,
                 step_held: int = 0) -> None:
        self.params_rest = params_rest
        """16-bit parameters resident between steps (whole below ZeRO-3, the partition and persistent ones at 3)."""
        self.gathered = gathered
        """ZeRO-3: parameters still gathered at the end of forward (the reuse window)."""
        self.opt_rest = opt_rest
        """fp32 master weights and Adam moments on the GPU."""
        self.grads_rest = grads_rest
        """Gradient storage allocated once for the whole run (ZeRO-3's partitions and IPG bucket)."""
        self.grads_held = grads_held
        """Gradients held from one micro-batch to the next under accumulation."""
        self.grads_backward = grads_backward
        """Gradient storage that backward allocates and the step frees (ZeRO-1/2's partition)."""
        self.buffers_backward = buffers_backward
        """IPG buckets, alive from the first gradient to the end of backward."""
        self.step_grads = step_grads
        """Gradients at the step beyond grads_rest: the partition, its flat copy and its fp32 cast (ZeRO-3: the
        largest sub-group's flat copy and cast, or the norm's fp64 copy of one gradient, `_zero3_step`)."""
        self.step_transient = step_transient
        """Other step temporaries (ZeRO-0's fp32 casts of every gradient)."""
        self.end_grads = end_grads
        self.end_transient = end_transient
        """ZeRO-0 at the end of backward: the gradients and the flat all-reduce copy, activations freed."""
        self.overhead = overhead
        self.workspace = workspace
        """cuBLAS's workspaces, live in the caching allocator from the first matmul on (`CUBLAS_WORKSPACES`), counted
        among the buffers of every phase."""
        self.step_held = step_held
        """ZeRO-3 parameters still allocated at the step though DeepSpeed released them: QLoRA's gathered 4-bit
        weights, which bitsandbytes keeps in the autograd graph until the loss goes (`quantized_held`)."""
        fixed = overhead + workspace
        self._base = params_rest + gathered + opt_rest + grads_rest + grads_held + fixed
        self._step_total = params_rest + step_held + opt_rest + grads_rest + step_grads + step_transient + fixed
        self._end_total = (params_rest + opt_rest + grads_rest + end_grads + end_transient + fixed
                           if end_grads else 0)
        self.integral = (type(self._base) is int and type(self._end_total) is int and type(self._step_total) is int
                         and type(grads_backward) is int and type(buffers_backward) is int)
        """Whether every figure is whole bytes, as `headroom`'s rearranged sums need to be exact."""

    def need(self, act: ActivationEstimate) -> int:
        """The largest phase total for one micro-batch (overhead included)."""
        a = self._base + act.activations
        later = self.grads_backward + self.buffers_backward
        lp = act.loss_transient // 2
        return max(a + act.forward_transient, a + act.loss_transient, a + act.head_transient - lp,
                   a + act.head_weight_gradient - lp + later, a + act.layer_transient - lp + later,
                   self._end_total, self._step_total)

    def headroom(self, capacity: int) -> tuple[int, int] | None:
        """The largest `activation_figures` that fit in `capacity` bytes: `need(act) <= capacity` exactly when
        both of act's figures are within these (None: the phases without activations alone do not fit).

        Integer arithmetic only (the analytic activation model's figures are whole bytes); the planner's search
        asks this once per setup instead of summing `need` for every micro-batch it probes."""
        if self._end_total > capacity or self._step_total > capacity:
            return None
        held = capacity - self._base
        return held, held - self.grads_backward - self.buffers_backward

    def phases(self, act: ActivationEstimate) -> dict[str, GpuMemory]:
        """Each phase's components at its own peak."""
        return {p: GpuMemory(*f) for p, f in zip(PHASES, self.phase_components(act))}

    def phase_components(self, act: ActivationEstimate) -> tuple[tuple[int, ...], ...]:
        """`phases(act)` as GpuMemory's fields, in its order, per phase of PHASES: the planner totals every
        candidate's phases but builds GpuMemory objects only for its peak (a hot path)."""
        return self.phase_totals(act)[0]

    def phase_totals(self, act: ActivationEstimate) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
        """(`phase_components(act)`, each phase's total, added as `GpuMemory.total` adds them)."""
        return self.phase_totals_of(act.activations, act.forward_transient, act.loss_transient, act.head_transient,
                                    act.layer_transient, act.head_weight_gradient)

    def phase_totals_of(self, a: int, forward: int, loss: int, head: int, layer: int, head_gradient: int
                        ) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
        """`phase_totals` of an ActivationEstimate given by its fields (the planner's analytic figures are these
        numbers, and it builds no estimate object for them)."""
        ovh, opt, ws = self.overhead, self.opt_rest, self.workspace
        params = self.params_rest + self.gathered
        grads = self.grads_rest + self.grads_held
        later = grads + self.grads_backward
        lp = loss // 2  # the fp32 log-probabilities, freed once the loss backward is done
        held, buckets = a - lp, self.buffers_backward + ws
        # the loss backward: fp32 gradients of log-probabilities and logits, every activation still held
        backward = (params, grads, opt, a, loss, ws, ovh)
        peak = params + grads + opt + a + loss + ws + ovh
        # the lm_head backward: the logits gradient and the head's weight gradient
        total = params + grads + opt + held + head + ws + ovh
        if total > peak:
            backward, peak = (params, grads, opt, held, head, ws, ovh), total
        # the first reduce (at the next parameter's gradient hook): the head's weight gradient is reduced into the
        # newly allocated partition through the buckets; the logits gradient is gone
        total = params + later + opt + held + head_gradient + buckets + ovh
        if total > peak:
            backward, peak = (params, later, opt, held, head_gradient, buckets, ovh), total
        # one decoder layer's working set (with checkpointing, its recompute), the loss long done
        total = params + later + opt + held + layer + buckets + ovh
        if total > peak:
            backward, peak = (params, later, opt, held, layer, buckets, ovh), total
        if self.end_grads:  # ZeRO-0's all-reduce at the end of backward
            end_grads = self.grads_rest + self.end_grads
            total = self.params_rest + end_grads + opt + 0 + self.end_transient + ws + ovh
            if total > peak:
                backward, peak = (self.params_rest, end_grads, opt, 0, self.end_transient, ws, ovh), total
        step_grads = self.grads_rest + self.step_grads
        step_params = self.params_rest + self.step_held
        return (((params, grads, opt, a, forward, ws, ovh), backward,
                 (step_params, step_grads, opt, 0, self.step_transient, ws, ovh)),
                (params + grads + opt + a + forward + ws + ovh, peak,
                 step_params + step_grads + opt + 0 + self.step_transient + ws + ovh))


def activation_figures(act: ActivationEstimate) -> tuple[int, int]:
    """One micro-batch's activations as `StepCosts.need` weighs them, to hold against `StepCosts.headroom`: (held
    with the largest transient before DeepSpeed's backward buffers exist, held from the lm_head's weight gradient
    on, when they do). need = max(base + first, base + backward buffers + second, the phases without activations)."""
    lp = act.loss_transient // 2
    return (act.activations + max(act.forward_transient, act.loss_transient, act.head_transient - lp),
            act.activations + max(act.head_weight_gradient, act.layer_transient) - lp)


def _div(n: int, shards: int) -> int:
    return -(-n // shards)


@functools.lru_cache(maxsize=4096)
def _reuse_kept(modules: tuple[int, ...], reuse_distance: int, held: tuple[int, ...] = ()) -> tuple[int, int]:
    """(parameters ZeRO-3 keeps gathered at the end of forward, `kept_gathered`; the `held` parameters of the
    modules it releases, whose storage a view saved for backward keeps, `kept_with_views`): modules in forward order,
    the persistent ones already left out of their sizes."""
    kept = kept_gathered(modules, reuse_distance)[1]
    return kept, kept_with_views(modules, held, reuse_distance) - kept if held else 0


def step_costs(*, parameters: int, trainable: int | None = None, frozen_bytes: int = 0, world_size: int,
               zero_stage: int, offload_optimizer: str = "none", offload_param: str = "none",
               precision: str = "bf16", accumulation: int = 1, buffers: BufferSettings, overhead: int = 0,
               modules: tuple[int, ...] = (), persistent: int = 0, largest_layer: int = 0,
               gloo: bool = False, adapter_bytes: int | None = None,
               sub_groups: tuple[int, int, int] | None = None) -> StepCosts:
    """The micro-batch-independent bytes of one setup (see the module docstring for where each comes from).

    `parameters` counts every parameter; `trainable` those with gradients and optimizer states (None: all);
    `frozen_bytes` are the frozen ones' bytes on the GPU when whole (LoRA's 16-bit or QLoRA's 4-bit base);
    `adapter_bytes` the width LoRA adapters' parameters train in at ZeRO-3 (fp32: `zerokit.planner.peft`);
    `modules` the parameter count of each module in forward order (ZeRO-3's reuse window), `persistent` the
    parameters below the persistence threshold (ZeRO-3 keeps them whole), `largest_layer` DeepSpeed's largest
    module (ZeRO-3 gathers at least it; ZeRO-Offload stages gradients through a buffer of its size). `gloo`: the
    ranks communicate over gloo (DeepSpeed's CPU accelerator), which has no all_gather_into_tensor: torch
    emulates it with a temporary the size of the output, so ZeRO-1/2's all-gather of the updated parameters
    costs eP after the step. `sub_groups`: ZeRO-3's optimizer sub-groups as `step_sub_groups` gives them (None:
    bounded from the partition, `buffers.sub_group_size` and `largest_layer`).
    """
    return _step_costs(parameters, trainable, frozen_bytes, world_size, zero_stage, offload_optimizer, offload_param,
                       precision, accumulation, buffers, overhead, modules, persistent, largest_layer, gloo,
                       adapter_bytes, 0, 0, sub_groups)


_KEPT = IdentityMemo(1024)


def _kept(modules: tuple[int, ...], reuse_distance: int, held: tuple[int, ...] = ()) -> tuple[int, int]:
    """`_reuse_kept`, remembered per trace object (`module_trace` hands out the same one for every ZeRO-3 setup of
    a model, and hashing it for the lru_cache showed); `held` is hashed (empty, but for an MoE or QLoRA)."""
    key = (id(modules), reuse_distance, held)
    kept = _KEPT.get(key, modules)
    return kept if kept is not None else _KEPT.put(key, modules, _reuse_kept(modules, reuse_distance, held))


def _step_costs(parameters: int, trainable: int | None, frozen_bytes: int, world_size: int, zero_stage: int,
                offload_optimizer: str, offload_param: str, precision: str, accumulation: int,
                buffers: BufferSettings, overhead: int, modules: tuple[int, ...], persistent: int, largest_layer: int,
                gloo: bool, adapter_bytes: int | None, replicated: int = 0, front: int = 0,
                sub_groups: tuple[int, int, int] | None = None, norm_tensor: int = 0, copies: int = 0,
                grad_partition: int = 0, held_views: tuple[int, ...] = (), graph_held: int = 0) -> StepCosts:
    """`step_costs` with its arguments by position (the planner's hot path: no sixteen keywords to bind)."""
    e = DTYPE_BYTES[precision]
    n = world_size
    ws = 0 if gloo else CUBLAS_WORKSPACES
    t = parameters if trainable is None else trainable
    whole = e * t + frozen_bytes  # every parameter, in the bytes it trains in
    tn = _div(t, n)
    mixed = precision != "fp32"
    opt_on_gpu = offload_optimizer == "none"
    held = accumulation > 1
    bucket = e * buffers.reduce_bucket_size
    if zero_stage == 0:
        grads = e * t
        master = FP32 * t if mixed else 0
        # StepCosts' fields by position, in its order (params_rest, gathered, opt_rest, grads_rest, grads_held,
        # grads_backward, buffers_backward, step_grads, step_transient, end_grads, end_transient, overhead): a
        # dozen of these per plan, where binding twelve keywords showed
        return StepCosts(whole, 0, master + ADAM * t, 0, grads if held else 0, 0, 0,
                         grads, 2 * FP32 * t if mixed else 0, grads, e * min(t, STAGE0_ALLREDUCE_ELEMENTS), overhead,
                         ws)
    buckets = (2 if buffers.overlap_comm else 1) * bucket
    if zero_stage in (1, 2):
        allgather = e * t if gloo else 0
        if not opt_on_gpu:
            # ZeRO-Offload: each reduced gradient goes straight to the host's fp32 buffer through a staging buffer
            # of the largest parameter's size (`temp_grad_buffer_for_gpu_offload`); no partition on the GPU
            held_bytes = e * t + buckets if held and zero_stage == 1 else 0
            return StepCosts(whole, 0, 0, e * largest_layer, held_bytes, 0, 0 if held_bytes else buckets,
                             0, allgather, 0, 0, overhead, ws)
        # the gradient partition's buffer holds every tensor that reaches into the rank's share whole
        # (stage_1_and_2.copy_grads_in_partition sums their numel): `grad_partition` where the tensors are known
        partition = e * (grad_partition or tn)
        opt = FP32 * tn + ADAM * tn
        if zero_stage == 2:
            held_bytes, backward = (partition, 0) if held else (0, partition)
        else:  # stage 1 accumulates whole 16-bit gradients (its buckets stay too) and reduces them at the boundary
            held_bytes, backward = (e * t + buckets, partition) if held else (0, partition)
        step = partition + e * tn + (FP32 * tn if mixed else 0)
        # before it, the gradient norm casts each gradient of the partition to fp64, one at a time
        # (stage_1_and_2.get_grad_norm_direct): the largest trainable tensor's share of it
        step = max(step, partition + NORM_BYTES * min(norm_tensor, tn))
        return StepCosts(whole, 0, opt, 0, held_bytes, backward, 0 if held and zero_stage == 1 else buckets,
                         max(step, allgather), 0, 0, 0, overhead, ws)
    # ZeRO-3: with the optimizer offloaded, the gradient partitions live on the host too (stage3.py allocates
    # grad_partitions_flat_buffer on `self.device`, the offload device) and the step runs there
    params_on_gpu = offload_param == "none"
    # LoRA under zero.Init: the adapters' parameters stay fp32 (partitioned and gathered so), while their gradient
    # partitions are in the training dtype (a traced run shows the bf16 partition and its fp32 copy at the step);
    # the adapters are gathered with the base modules they belong to, a share `kept / parameters` of them at once
    ab = adapter_bytes if adapter_bytes is not None and trainable is not None else e
    whole = ab * t + frozen_bytes - replicated
    adapters_gathered = 0
    partition16 = _div(whole, n) + replicated if params_on_gpu else 0
    opt = FP32 * tn + ADAM * tn if opt_on_gpu else 0
    grad_partitions = e * tn if opt_on_gpu else 0
    views = 0  # parameters released by DeepSpeed whose storage a view still holds
    if not modules:
        kept = largest_layer
    else:
        # the reuse window, or the prefetcher's marks up to the live limit (`_reuse_kept`): a 0.9B llama on one
        # H100 with its parameters offloaded held 16.29 GB at its forward peak, as much as ZeRO-2 with all its
        # weights on the GPU (16.39 GB), where the window alone frees the first 40% (15.51 GB); and the stacked
        # experts of the modules it releases, which their saved views keep, and QLoRA's 4-bit weights, which
        # bitsandbytes keeps (`kept_with_views`)
        kept, views = _kept(modules, buffers.max_live_parameters, held_views)
    # the first `front` parameters of the trace are released after forward: only a window reaching back into them
    # keeps less; their adapters train, so backward reaches them and they stay
    released = max(0, min(front, kept - (sum(modules) - front))) if front else 0
    # (the trace counts persistent modules as 0: whole on every rank, they are `persistent_bytes` below)
    window = max(kept, largest_layer, 0)
    kept = max(kept - released, largest_layer, 0) + views
    if opt_on_gpu:  # one sub-group's gradients at a time (module docstring): the largest sub-group's, or the norm's
        if sub_groups is None:
            sub_groups = sub_group_bound(tn, buffers.sub_group_size, _div(largest_layer, n) if trainable is None else 0)
        step = _zero3_step(sub_groups, e, mixed, precision == "fp16", tn)
    else:
        step = 0
    if trainable is not None and frozen_bytes:  # LoRA: the base's modules (counted below) carry the adapters
        # (modules_to_save copies run in their originals' place in the trace: gathered as the originals would be)
        adapters_gathered = ab * (t - copies) * min(window, parameters) // max(parameters, 1)
    gathered, persistent_bytes = e * min(kept, parameters) + adapters_gathered, e * persistent
    # the step releases every gathered parameter (`_partition_all_parameters`), but not the storage the autograd
    # graph still holds: the loss, and so the graph, lives through the step (accelerate's DeepSpeedEngineWrapper
    # steps inside `backward(loss)`)
    step_held = e * graph_held
    if n == 1 and params_on_gpu:
        # one rank gathers nothing: DeepSpeed's _no_gather_coalesced points each parameter at its partition, which
        # is the whole parameter, persistent ones too (a 0.9B llama on one H100: its forward peak 1.76 GB over
        # ZeRO-2's, the gradient partition, not 2.8 GB)
        gathered = persistent_bytes = step_held = 0
    return StepCosts(partition16 + persistent_bytes, gathered, opt, grad_partitions + bucket, 0, 0, 0, step, 0, 0, 0,
                     overhead, ws, step_held)


def estimate(model: Any, hardware: Hardware, training: Training, setup: Setup, *, precision: str | None = None,
             buffers: BufferSettings | None = None, activations: Callable[[int, bool], ActivationEstimate] | None = None,
             activations_source: str = "modelled", overhead: int | None = None) -> Estimate:
    """The per-phase GPU memory and the host memory of `setup` (see the module docstring).

    `activations(micro_batch, checkpointing)` supplies the activation estimate (the planner passes its cached or
    calibrated one); by default the analytic model runs for a GPU plan. `training.peft` (lora, qlora) is honoured
    as the planner's Context honours it: only the adapters have gradients and optimizer states, the frozen base
    costs its 16-bit (or 4-bit) bytes, and the activations are those of the adapted layers.
    """
    from zerokit.memory.activations import estimate_activations
    from zerokit.memory.buffers import default_overhead, hf_auto_settings
    from zerokit.planner.peft import plan_peft  # here, not at the top: zerokit.planner imports this module

    precision = precision or training.precision or ("bf16" if hardware.bf16 else "fp16")
    buffers = buffers or hf_auto_settings(model.hidden_size)
    if overhead is None:
        overhead = training.overhead_bytes if training.overhead_bytes is not None else \
            default_overhead(hardware.gpu_memory_bytes)
    peft = plan_peft(model, training.peft, training.lora_rank, training.lora_targets, training.lora_dropout,
                     precision, training.lora_modules_to_save)
    peft_costs = {} if peft is None else peft.costs_at(setup.zero_stage, DTYPE_BYTES[precision])
    costs = costs_for(model, hardware, setup, precision, buffers, overhead, **peft_costs)  # front: setup's ckpt
    if activations is None:
        act = estimate_activations(model.config, training.seq_len, setup.micro_batch_size,
                                   attention=training.attention, dtype=precision,
                                   gradient_checkpointing=setup.gradient_checkpointing,
                                   device=hardware.accelerator,
                                   lora=peft.activation_setup(setup.zero_stage, DTYPE_BYTES[precision])
                                   if peft is not None else None)
    else:
        act = activations(setup.micro_batch_size, setup.gradient_checkpointing)
    phases = costs.phases(act)
    peak = max(PHASES, key=lambda p: phases[p].total)
    host = host_memory(model.parameters, model.largest_layer_parameters, hardware.gpus_per_node, hardware.nodes,
                       setup.zero_stage, setup.offload_optimizer, setup.offload_param, DTYPE_BYTES[precision],
                       trainable=peft.trainable if peft is not None else None,
                       load_width=load_bytes(getattr(model, "config", None) or {}),
                       loads_on_gpu=peft is not None and peft.method == "qlora")
    return Estimate(setup, precision, buffers, phases, peak, host, activations_source)


def costs_for(model: Any, hardware: Hardware, setup: Setup, precision: str, buffers: BufferSettings,
              overhead: int, *, trainable: int | None = None, frozen_bytes: int = 0,
              adapter_bytes: int | None = None, replicated_bytes: int = 0, largest_trainable: int = 0,
              saved_parameters: int = 0, embedding_trains: bool = False) -> StepCosts:
    """`step_costs` for a ModelSpec on `hardware` (the planner caches one per candidate and buffer setting).

    `trainable` and `frozen_bytes` describe LoRA/QLoRA (`zerokit.planner.peft.PeftPlan`): adapters with full
    mixed-precision states on a frozen base of `frozen_bytes` (None, 0: every parameter trains)."""
    return costs_of(model, hardware.world_size, hardware.accelerator, setup.zero_stage, setup.offload_optimizer,
                    setup.offload_param, setup.gradient_accumulation_steps, precision, buffers, overhead,
                    trainable=trainable, frozen_bytes=frozen_bytes, adapter_bytes=adapter_bytes,
                    replicated_bytes=replicated_bytes, front_released=not setup.gradient_checkpointing,
                    largest_trainable=largest_trainable, saved_parameters=saved_parameters,
                    embedding_trains=embedding_trains, saved_views=not setup.gradient_checkpointing)


def costs_of(model: Any, world_size: int, accelerator: str, zero_stage: int, offload_optimizer: str,
             offload_param: str, accumulation: int, precision: str, buffers: BufferSettings, overhead: int, *,
             trainable: int | None = None, frozen_bytes: int = 0, adapter_bytes: int | None = None,
             replicated_bytes: int = 0, front_released: bool = False, largest_trainable: int = 0,
             saved_parameters: int = 0, embedding_trains: bool = False, saved_views: bool = False) -> StepCosts:
    """`costs_for` with the hardware's world size and accelerator and the setup's stage, offload and accumulation
    given apart: the planner asks once per candidate and buffer setting of every plan (and for other world sizes
    when nothing fits), without a Setup or a Hardware to build.

    `front_released` (LoRA/QLoRA without gradient checkpointing): backward never reaches the modules before the
    first layer nor the first layer's projections of its input (their outputs need no gradient: the base is
    frozen and nothing before them trains), so ZeRO-3's trace releases them after forward instead of keeping them
    for reuse (`__params_to_release`); a traced run shows the embedding and layer 0's q, k, v released.

    PEFT's modules_to_save copies (LoRA/QLoRA): `embedding_trains`, a copy of the embedding trains, so backward
    reaches the front and nothing there is released after forward; `saved_parameters`, the copies among
    `trainable`, which ZeRO-3 gathers in place of their frozen originals (the wrapper runs the copy alone);
    `largest_trainable`, the largest trainable tensor, a copy's weight (0: only adapters, small; full fine-tuning's
    is the model's largest tensor), which ZeRO-1/2's gradient norm copies to fp64.

    `replicated_bytes` (QLoRA): the frozen base's quantization constants, part of `frozen_bytes` and not parameters,
    so whole on every rank at ZeRO-3; with them the ZeRO-3 trace counts each 4-bit weight by the elements it is
    stored in (`bnb_4bit_quant_storage` = the compute dtype: four weights an element), as DeepSpeed partitions,
    gathers and compares it with its thresholds.

    `saved_views` (no gradient checkpointing): forward saves views of ZeRO-3's gathered stacked expert weights for
    backward, which keep them allocated (`held_trace`); a checkpointed layer saves none. QLoRA's gathered 4-bit
    weights stay allocated at ZeRO-3 with checkpointing or without, into the optimizer step (`quantized_held`)."""
    parameters, largest, front = model.parameters, model.largest_layer_parameters, 0
    threshold = buffers.param_persistence_threshold
    held = held_trace(model, threshold) if zero_stage == 3 and saved_views else ()
    graph = ()
    if zero_stage == 3 and replicated_bytes:  # QLoRA: the front's 4-bit weights see no gradient-needing input
        graph = quantized_held(model, threshold, front_released and not embedding_trains)
        held = tuple(map(sum, zip(held, graph))) if held else graph
    if zero_stage != 3:
        modules, persistent = (), 0
    elif replicated_bytes:
        modules, persistent, front, parameters, largest = quantized_module_trace(
            model, buffers.param_persistence_threshold)
    else:
        modules, persistent, front = module_trace(model, buffers.param_persistence_threshold)
    # ZeRO-3's optimizer sub-groups, from the model's parameters in order (full fine-tuning; LoRA's adapters are
    # bounded from their partition: a few hundred million elements at most, one sub-group at the default size)
    groups = step_sub_groups(model, world_size, buffers.sub_group_size) \
        if zero_stage == 3 and offload_optimizer == "none" and trainable is None and not replicated_bytes else None
    norm = grad_partition = 0
    if zero_stage in (1, 2) and offload_optimizer == "none":
        norm = largest_trainable
        if trainable is None:  # full fine-tuning: the model's own tensors, where zerokit can split it
            key = _config_key(model.config) if getattr(model, "config", None) else None
            norm = (_largest_tensor(key, model.num_layers) if key else 0) or model.largest_layer_parameters
            grad_partition = _grad_partition(key, model.num_layers, world_size) if key else 0
    return _step_costs(parameters, trainable, frozen_bytes, world_size, zero_stage, offload_optimizer, offload_param,
                       precision, accumulation, buffers, overhead, modules, persistent, largest, accelerator == "cpu",
                       adapter_bytes, replicated_bytes,
                       front if front_released and trainable is not None and not embedding_trains else 0,
                       groups, norm, saved_parameters, grad_partition, held, sum(graph) if graph else 0)


@functools.lru_cache(maxsize=1024)
def _grad_partition(config_key: Any, layers: int, n: int) -> int:
    """The largest rank's ZeRO-1/2 gradient-partition buffer, in elements: the tensors of `model.parameters()`,
    flattened in order and cut into `n` equal shares, each counted whole by every rank its elements reach
    (`copy_grads_in_partition` allocates the sum of their numel); 0 where zerokit cannot split the model."""
    sizes = _tensor_sizes(config_key, layers)
    return whole_share(sizes, n) if sizes and n >= 1 else 0


def whole_share(sizes: tuple[int, ...], n: int) -> int:
    """The most elements any of `n` equal shares of the flattened `sizes` reaches when each tensor it reaches
    counts whole (`_grad_partition`)."""
    share = -(-sum(sizes) // n)
    reach = [0] * n
    start = 0
    for size in sizes:
        end = start + size
        for r in range(start // share, min(n, -(-end // share))):
            reach[r] += size
        start = end
    return max(reach)


@functools.lru_cache(maxsize=256)
def _largest_tensor(config_key: Any, layers: int) -> int:
    """The model's largest parameter tensor (`_tensor_sizes`; 0 where zerokit cannot split the model)."""
    sizes = _tensor_sizes(config_key, layers)
    return max(sizes) if sizes else 0


NORM_BYTES = 8
"""ZeRO-3's gradient norm casts each gradient partition to fp64, one at a time (`get_norm_dtype`: fp64 wherever the
accelerator has it, CUDA and CPU included)."""


def _zero3_step(sub_groups: tuple[int, int, int], e: int, mixed: bool, fp16: bool, tn: int) -> int:
    """The bytes ZeRO-3's optimizer step holds beyond the gradient partitions at its peak (module docstring): the
    largest of the fp16 overflow check's boolean copy of the partition, the norm's fp64 copy of the largest
    gradient, and one sub-group's flat 16-bit copy (when it has more than one tensor) and its fp32 cast."""
    several, single, tensor = sub_groups
    fp32 = FP32 if mixed else 0  # in fp32 `.to(fp32)` is the flat copy itself
    return max(e * several + fp32 * several, fp32 * single, NORM_BYTES * tensor, tn if fp16 else 0)


def sub_group_bound(partition: int, sub_group_size: int, largest_tensor: int) -> tuple[int, int, int]:
    """`step_sub_groups` where the parameters' sizes are unknown: the whole partition when it is at most
    `sub_group_size` (one group), else a group of at most `sub_group_size` plus the largest tensor's partition less
    one element (a group closes at the tensor that takes it to the size), counted as several tensors."""
    if partition <= sub_group_size:
        return partition, 0, largest_tensor
    return min(partition, sub_group_size + max(largest_tensor - 1, 0)), 0, largest_tensor


def step_sub_groups(model: Any, world_size: int, sub_group_size: int) -> tuple[int, int, int]:
    """ZeRO-3's optimizer sub-groups on one rank (`DeepSpeedZeroOptimizer_Stage3._create_fp16_sub_groups`): (the
    largest sub-group of several tensors, the largest of one tensor, the largest tensor), in partition elements.

    DeepSpeed walks the parameter group in order and closes a sub-group at the tensor that brings it to
    `sub_group_size` elements (each tensor counts `ceil(numel / N)`, its partition); the whole group is one
    sub-group when it holds no more than that. The tensors are the model's in `model.parameters()` order, as
    `model_parts` lists its modules (a linear's weight and bias apart, a stacked expert tensor apart, any other
    module's parameters as one tensor); a model zerokit cannot split is bounded (`sub_group_bound`)."""
    tn = _div(model.parameters, world_size)
    sizes = _tensor_sizes(_config_key(model.config), model.num_layers) if getattr(model, "config", None) else None
    if not sizes:
        return sub_group_bound(tn, sub_group_size, _div(model.largest_layer_parameters, world_size))
    return _sub_groups(sizes, world_size, sub_group_size, tn)


@functools.lru_cache(maxsize=1024)
def _sub_groups(sizes: tuple[int, ...], n: int, sub_group_size: int, tn: int) -> tuple[int, int, int]:
    parts = [_div(s, n) for s in sizes]
    largest = max(parts)
    if sum(parts) <= sub_group_size:  # `sub_group_size >= params_group_numel`: one sub-group, the partition
        return (tn, 0, largest) if len(parts) > 1 else (0, tn, largest)
    several = single = group = count = 0
    last = len(parts) - 1
    for i, p in enumerate(parts):
        group += p
        count += 1
        if group >= sub_group_size or i == last:
            if count > 1:
                several = max(several, group)
            else:
                single = max(single, group)
            group = count = 0
    return several, single, largest


@functools.lru_cache(maxsize=256)
def _tensor_sizes(config_key: Any, layers: int) -> tuple[int, ...] | None:
    """The elements of each trainable tensor in `model.parameters()` order (None: not a family zerokit splits)."""
    from zerokit.errors import BadInput
    from zerokit.models.params import model_parts, stack_split
    from zerokit.models.params import part_tensors as tensors

    try:
        parts = model_parts(dict(config_key))
    except (BadInput, KeyError, TypeError):
        return None
    if not parts or layers < 1:
        return None

    first, per_layer, last = stack_split(parts)
    out: list[int] = []
    for p in first:
        out += tensors(p)
    for layer in range(layers):
        for p in per_layer:  # copies spread over the layers (a multiple of them for experts of their own)
            out += tensors(p) * ((p.copies * (layer + 1)) // layers - (p.copies * layer) // layers)
    for p in last:
        if not p.tied:  # a tied head's weight is the embedding's, one tensor
            out += tensors(p)
    return tuple(s for s in out if s > 0) or None


def module_trace(model: Any, persistence_threshold: int) -> tuple[tuple[int, ...], int, int]:
    """(parameters per module in forward order, module by module as the step-time model's trace, those below the
    persistence threshold as 0; parameters below the persistence threshold; parameters of the modules a frozen
    base's backward never reaches: `costs_of`'s front_released) for ZeRO-3.

    Remembered per config object (every ZeRO-3 candidate of every plan of a model asks); `_module_trace` keys on
    the content."""
    config = model.config
    key = (id(config), model.parameters, model.num_layers, persistence_threshold)
    trace = _TRACES.get(key, config)
    if trace is None:
        meta = getattr(model, "module_trace", ())
        trace = _TRACES.put(key, config, _meta_trace(meta, model.num_layers, persistence_threshold) if meta else
                            _module_trace(_config_key(config), model.parameters, model.num_layers,
                                          persistence_threshold))
    return trace


def _meta_trace(trace: tuple[tuple[int, int], ...], layers: int, threshold: int) -> tuple[tuple[int, ...], int, int]:
    """`_trace_of` for a model instantiated on the meta device, from its own modules (`ModelSpec.module_trace`), one
    by one in registration order (the order its step time gathers them: `zerokit.perf.flops.meta_model_flops`),
    those below the threshold as 0, a tied head again. No front: LoRA is planned for the families zerokit counts
    only."""
    modules: list[int] = []
    persistent = 0
    for layer, n in trace:
        if layer == -2 or n >= threshold:  # a tied head: the embedding's weight, gathered again
            modules.append(n)
        else:
            modules.append(0)
            persistent += n
    return tuple(modules), persistent, 0


def held_trace(model: Any, persistence_threshold: int) -> tuple[int, ...]:
    """Per module of `module_trace` (and of `quantized_module_trace`: bitsandbytes quantizes `nn.Linear`s, not
    stacked experts), the parameters a view saved for backward keeps allocated after ZeRO-3 releases the module
    (`buffers.kept_with_views`): each decoder layer's stacked experts above the persistence threshold (a router's
    `(experts, hidden)` weight is passed whole, not as a view). Empty for a model without them. A model zerokit
    instantiated on the meta device says its own (`ModelSpec.expert_views`), in `_meta_trace`'s order.

    transformers' `use_experts_implementation(is_transposed=True)` families (gpt_oss, aria) pass the weight itself
    to grouped_mm; zerokit splits none of them into parts."""
    config = getattr(model, "config", None)
    meta = getattr(model, "module_trace", ())
    if meta:
        views = getattr(model, "expert_views", ())
        return _meta_held(meta, views, model.num_layers, persistence_threshold) if views else ()
    if not config:
        return ()
    return _held_trace(_config_key(config), model.num_layers, persistence_threshold)


@functools.lru_cache(maxsize=64)
def _meta_held(trace: tuple[tuple[int, int], ...], views: tuple[int, ...], layers: int,
               threshold: int) -> tuple[int, ...]:
    """`held_trace` of a meta-device model: each module's views where it is gathered, as `_meta_trace` lists it."""
    held = tuple(v if layer != -2 and n >= threshold else 0 for (layer, n), v in zip(trace, views))
    return held if any(held) else ()


_VIEWS = IdentityMemo(512)


def saves_views(model: Any) -> bool:
    """Whether ZeRO-3's costs of `model` depend on gradient checkpointing through `held_trace`; remembered per
    model object (every plan asks once)."""
    hit = _VIEWS.get(id(model), model)
    return hit[0] if hit is not None else _VIEWS.put(id(model), model, (bool(held_trace(model, 0)),))[0]


@functools.lru_cache(maxsize=256)
def _held_trace(config_key: Any, layers: int, threshold: int) -> tuple[int, ...]:
    from zerokit.errors import BadInput
    from zerokit.models.params import model_parts

    try:
        parts = model_parts(dict(config_key))
    except (BadInput, KeyError, TypeError):
        return ()
    # the experts module's tensors (`models.params._experts`), one expert or many; not the router's (n, h) weight
    held = tuple(sum(experts * a * b for _, experts, a, b in p.stacked)
                 if p.layer and p.name.endswith("experts") and p.params >= threshold else 0
                 for p, _ in forward_parts(parts, layers))
    return held if any(held) else ()


def quantized_module_trace(model: Any, persistence_threshold: int) -> tuple[tuple[int, ...], int, int, int, int]:
    """`module_trace` of a QLoRA base at ZeRO-3, in stored elements: each bitsandbytes 4-bit weight of n parameters
    is (n + 1) // 4 elements of the compute dtype (`bnb_4bit_quant_storage`, as the plan sets it at ZeRO-3), its bias
    and every other parameter one element each. Returns (modules, persistent, front, total elements, largest
    module)."""
    trace = _quantized_trace(_config_key(model.config), model.num_layers, persistence_threshold)
    if trace is None:  # a family zerokit cannot split into modules: the 16-bit trace, an overestimate
        return (*module_trace(model, persistence_threshold), model.parameters, model.largest_layer_parameters)
    return trace


def quantized_held(model: Any, persistence_threshold: int, front: bool) -> tuple[int, ...]:
    """Per module of `quantized_module_trace`, the stored elements of its 4-bit weights that the autograd graph
    holds once ZeRO-3 has gathered them: bitsandbytes' `MatMul4Bit.forward` keeps `B.view(-1, 1)` of the gathered
    weight in `ctx.tensors`, a Python attribute of the graph's node (not `save_for_backward`: backward does not free
    it, nor does checkpointing, whose non-reentrant forward builds that node), whenever the matmul's input needs a
    gradient. So the storage outlives DeepSpeed's release until the graph goes, after the optimizer step. `front`:
    without checkpointing, the first layer's input projections see the frozen embedding's output, which needs no
    gradient (with checkpointing the HF Trainer's `enable_input_require_grads` makes it need one). Traced: a QLoRA
    llama at a 1M live limit held 25 gathered 4-bit weights at its optimizer step without checkpointing (all 28 but
    layer 0's q, k, v: 1.384 MB) and all 28 with it (1.450 MB). Empty for a family zerokit cannot split."""
    return _quantized_held(_config_key(model.config), model.num_layers, persistence_threshold, front) \
        if getattr(model, "config", None) else ()


@functools.lru_cache(maxsize=256)
def _quantized_held(config_key: Any, layers: int, threshold: int, front: bool) -> tuple[int, ...]:
    from zerokit.errors import BadInput
    from zerokit.models.params import model_parts
    from zerokit.models.quant import quantized_parts

    config = dict(config_key)
    try:
        parts = model_parts(config)
    except (BadInput, KeyError, TypeError):
        return ()
    quantized = {p.name for p in quantized_parts(parts, str(config.get("model_type")))}
    held = []
    for p, layer in forward_parts(parts, layers):
        weight = (p.linear[0] * p.linear[1] + 1) // 4 if p.name in quantized else 0  # stored; a bias is not held
        if weight < threshold or (front and layer == 0 and p.name.rsplit(".", 1)[-1] in _INPUT_PROJECTIONS):
            weight = 0  # persistent (whole on every rank, held or not), or its input needs no gradient
        held.append(weight)
    return tuple(held) if any(held) else ()


@functools.lru_cache(maxsize=256)
def _quantized_trace(config_key: Any, layers: int, threshold: int) -> tuple[tuple[int, ...], int, int, int, int] | None:
    from zerokit.errors import BadInput
    from zerokit.models.params import model_parts
    from zerokit.models.quant import quantized_parts

    config = dict(config_key)
    try:
        parts = model_parts(config)
    except (BadInput, KeyError, TypeError):
        return None
    quantized = {p.name for p in quantized_parts(parts, str(config.get("model_type")))}

    def stored(p) -> int:
        if p.name not in quantized:
            return p.params
        n = p.linear[0] * p.linear[1]
        return (n + 1) // 4 + (p.params - n)

    elements = [p._replace(params=stored(p)) for p in parts]
    total = sum(p.params * p.copies for p in elements if not p.tied)
    largest = max(p.params for p in elements if p.copies > 0)
    modules, persistent, front = _trace_of(elements, layers, threshold)
    return modules, persistent, front, total, largest


_TRACES = IdentityMemo(512)
_KEYS = IdentityMemo(512)


def _config_key(config: Mapping[str, Any]) -> Any:
    """A hashable key of a config's content; remembered per config object (the planner asks for the same one
    for every ZeRO-3 candidate)."""
    key = _KEYS.get(id(config), config)
    if key is None:
        key = _KEYS.put(id(config), config, tuple(sorted((k, v if not isinstance(v, (list, dict)) else repr(v))
                                                         for k, v in config.items())))
    return key


@functools.lru_cache(maxsize=512)
def _module_trace(config_key: Any, parameters: int, layers: int, threshold: int) -> tuple[tuple[int, ...], int, int]:
    from zerokit.errors import BadInput
    from zerokit.models.params import model_parts

    config = dict(config_key)
    try:
        parts = model_parts(config)
    except (BadInput, KeyError, TypeError):
        parts = None
    if not parts:  # unknown family: uniform layers between an embedding and a head of the same size
        per_layer = parameters // max(layers, 1)
        return (0,) + (per_layer,) * layers + (0,), 0, 0
    return _trace_of(parts, layers, threshold)


# the projections of a layer's input (what the first layer computes before anything that trains can touch it)
_INPUT_PROJECTIONS = frozenset({"q_proj", "k_proj", "v_proj", "qkv_proj", "c_attn", "query_key_value", "Wqkv",
                                "W_pack"})


def _trace_of(parts: list, layers: int, threshold: int) -> tuple[tuple[int, ...], int, int]:
    """(parameters per module in forward order, those below the persistence threshold as 0; parameters below the
    persistence threshold; the front: what comes before the first layer, less a tied embedding the head uses again,
    and the first layer's input projections, above the threshold) of `parts` (`zerokit.perf.flops.forward_parts`)."""
    tied = any(p.tied for p in parts)
    modules: list[int] = []
    persistent = front = 0
    for i, (p, layer) in enumerate(forward_parts(parts, layers)):
        if p.tied:  # the tied head's weight is the embedding's: gathered again at the end
            modules.append(p.params)
            continue
        gathered = p.params >= threshold
        modules.append(p.params if gathered else 0)
        persistent += 0 if gathered else p.params
        before = layer < 0 and not (tied and i == 0)  # a tied embedding is used again by the head
        projection = layer == 0 and p.name.rsplit(".", 1)[-1] in _INPUT_PROJECTIONS
        front += p.params if gathered and (before or projection) else 0
    return tuple(modules), persistent, front

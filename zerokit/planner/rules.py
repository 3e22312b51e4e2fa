"""The rules engine: an ordered table of small named rules.

Each rule reads the planning context, returns `(decision, reason)`, and `plan()` stores the decision on the
context under the rule's name before the next rule runs. A reason is one sentence (or None when the rule has
nothing to say for this plan, e.g. the NVMe rule without --nvme-path); `Plan.reasons` keeps them in order.

How the search works (the README's "How the planner decides" says the same in prose):

1. Precision: bf16 where the GPU has it, else fp16 with dynamic loss scaling; fp32 only when asked.
2. Batch: the micro-batches to try. `auto` tries powers of two 1..64; a global batch (or global batch tokens)
   fixes samples per GPU per step, and the micro-batch must divide it (every divisor up to 64 is tried). One that
   must be rounded becomes the multiple of the GPUs within 5% that trains fastest (`plan` times each). A
   requested micro-batch is tried alone first; only if no setup fits it does a second pass try the smaller ones
   (the largest micro-batch up to the one requested).
3. Candidates, in search order (no offload, then CPU offload, then NVMe): ZeRO-0, 1, 2, 3; ZeRO-2 + CPU
   optimizer offload; ZeRO-3 + CPU optimizer offload; ZeRO-3 + CPU optimizer and parameter offload; then, only
   with --nvme-path, ZeRO-3 with the optimizer on NVMe (parameters on GPU, then on CPU), then both on NVMe.
   Forced options filter this list.
4. For each candidate, with HF's "auto" buffer sizes (overlap_comm on) and with the most frugal ones: the largest
   micro-batch that fits without gradient checkpointing and the largest that fits with it. The step-time model
   (`zerokit.perf`) times each of these options and the candidate keeps the one with the most tokens/s; smaller
   buffers only when that option needs them (then the first setting of the ladder that holds it).
5. Choose: the fitting candidate with the most predicted tokens/s; within 2% of it (closer than the model can
   tell apart) the earlier, simpler setup of the search order, unless that one needs more than 95% of the GPU
   (or of the CPU RAM or NVMe given) and a tied one does not: then the earliest tied one with headroom. Whether
   checkpointing beats offload, or ZeRO-3 beats ZeRO-2 with checkpointing, is the model's answer for this machine,
   not a rule. A candidate fits when GPU, CPU RAM per node and NVMe all hold it.
6. Nothing fits: the most frugal candidate is shown, with what is missing: more GPUs for ZeRO-3 without offload,
   or CPU RAM for full offload, or NVMe; when options were forced and the planner's own choice would fit, that.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable
from dataclasses import field
from typing import TYPE_CHECKING, Any, NamedTuple

from zerokit._dataclass import dataclass
from zerokit._memo import IdentityMemo
from zerokit.errors import BadInput
from zerokit.memory.activations import ActivationEstimate, analytic_figures
from zerokit.memory.buffers import BufferSettings, buffer_ladder, default_overhead
from zerokit.memory.estimate import PHASES, StepCosts, costs_of, saves_views
from zerokit.memory.host import HostMemory, host_memory, load_bytes
from zerokit.memory.states import DTYPE_BYTES
from zerokit.models.spec import ModelSpec
from zerokit.perf.flops import ModelFlops, meta_model_flops, model_flops
from zerokit.perf.model import StepTime, step_setup, step_time_at
from zerokit.planner.types import Candidate, GpuMemory, Hardware, Setup, Training
from zerokit.units import format_bytes, format_count, format_rate, format_seconds

if TYPE_CHECKING:
    from zerokit.planner.peft import PeftPlan

MAX_AUTO_MICRO_BATCH = 64
AUTO_MICRO_BATCHES = tuple(2**i for i in range(MAX_AUTO_MICRO_BATCH.bit_length()))  # 1, 2, 4, ..., 64
TOKENS_PER_STEP_NOTE = 1_000_000
TIE_TOLERANCE = 0.02
"""Setups whose predicted tokens/s differ by less than this are a tie, which the earlier one in search order wins
(unless it is tight and another is not: TIGHT)."""
TIGHT = 0.95
"""In a tie, a setup that needs more than this share of the GPU's memory (or of the CPU RAM or NVMe given) loses to
the earliest tied one that does not: at equal speed the one with headroom is kept. The share counts the overhead
reserve (`--overhead`), so a tight setup still fits as planned; headroom is for what a plan does not see (another
process on the GPU, a longer sequence than planned)."""
GLOBAL_BATCH_SLACK = 0.05
"""How far from the samples asked a global batch that must be rounded anyway may go: the multiples of the GPUs
within it are timed, and the fastest is used (`zerokit.planner.engine.plan`). A global batch asked that divides
evenly is kept; a faster one within it is advised."""
BATCH_OPTIONS = 6
"""The most global batches a plan times: the nearest multiple, then the other multiples within the slack whose
samples per GPU allow the most micro-batches (divisors up to MAX_AUTO_MICRO_BATCH)."""
ADVICE_GAIN = 0.10
"""A global batch asked that divides evenly is kept; a multiple within the slack this much faster is advised."""
BATCH_SCAN = 1024
"""The most multiples of the GPUs the slack is scanned for (nearest first): a huge global batch on few GPUs."""

NO_OFFLOAD = ((0, "none", "none"), (1, "none", "none"), (2, "none", "none"), (3, "none", "none"))
CPU_OFFLOAD = ((2, "cpu", "none"), (3, "cpu", "none"), (3, "cpu", "cpu"))
NVME_OFFLOAD = ((3, "nvme", "none"), (3, "nvme", "cpu"), (3, "nvme", "nvme"))
FORCED_ORDER = NO_OFFLOAD + ((1, "cpu", "none"),) + CPU_OFFLOAD[:2] + ((3, "none", "cpu"),) + CPU_OFFLOAD[2:] \
    + NVME_OFFLOAD
"""Every setup DeepSpeed runs, for when options are forced."""


class Evaluation(NamedTuple):
    """One candidate at its best micro-batch: what `Plan.candidates` lists, plus what the decision needs."""

    candidate: Candidate
    buffers: BufferSettings
    shortfall: float
    """max(need / have) over GPU, CPU RAM and NVMe; <= 1 when it fits."""
    components: tuple
    """The cost layer's components at each phase's peak, as GpuMemory's fields (`StepCosts.phase_components`)."""
    host: HostMemory
    level: int
    """Index of `buffers` in the stage's buffer ladder."""
    fastest: dict
    """Checkpointing -> (micro-batch, StepTime, the largest micro-batch the GPU holds at any buffer setting tried) of
    the fastest option the search timed with it: what forcing --gradient-checkpointing on or off plans for this setup
    (rule_micro_batch's words); empty when the GPU holds no option."""

    @property
    def phases(self) -> dict[str, GpuMemory]:
        """The cost layer's components at each phase's peak (built for the chosen candidate only)."""
        return {p: GpuMemory(*f) for p, f in zip(PHASES, self.components)}


@dataclass
class Context:
    """What the rules read and fill, in table order."""

    model: ModelSpec
    hardware: Hardware
    training: Training
    precision: str = ""
    peft: PeftPlan | None = None
    """LoRA/QLoRA adapters on a frozen base (rule_peft); None: full fine-tuning."""
    batch: BatchChoice | None = None
    candidates: tuple = ()
    evaluations: tuple = ()
    chosen: Evaluation | None = None
    relax_micro_batch: bool = False
    """Second pass when the requested micro-batch fits nowhere: try the smaller ones too."""
    global_batch: int | None = None
    """The rounded global batch to plan, one of `BatchChoice.options` (None: the nearest multiple)."""
    batch_note: str = ""
    """Why `global_batch` is not the nearest multiple (engine.batch_by_speed): added where the rounding is said."""
    warnings: list = field(default_factory=list)
    activation_model: Any = None
    """(seq_len, micro_batch, checkpointing) -> ActivationEstimate; None: the analytic model."""
    machine: Any = None
    """The step-time model's machine (zerokit.perf.MachinePerf): a GPU preset's published figures or a probe
    profile."""
    _activations: dict = field(default_factory=dict)
    _analytic_models: dict = field(default_factory=dict)
    """LoRA at ZeRO-3 -> `analytic_figures` of the plan's setting."""
    _parts: dict = field(default_factory=dict)
    """(micro-batch, checkpointing, LoRA at ZeRO-3) -> the analytic model's figures (`analytic_figures`)."""
    _steps: dict = field(default_factory=dict)
    """(stage, optimizer and parameter offload, buffer level, micro-batch, checkpointing) -> StepTime."""
    _step_setups: dict = field(default_factory=dict)
    """(stage, optimizer and parameter offload, buffer level) -> `step_setup` on the plan's machine."""
    _figures: dict = field(default_factory=dict)
    """(checkpointing, LoRA at ZeRO-3) -> micro-batch -> `activation_figures`."""
    _limits: dict = field(default_factory=dict)
    """A setup's (StepCosts, whether the fit test may compare figures, `StepCosts.headroom` of the GPU)."""
    _hosts: dict = field(default_factory=dict)
    """(stage, optimizer offload, parameter offload) -> HostMemory."""
    _frugal: dict = field(default_factory=dict)
    """(stage, offloads, world size, accumulation held, checkpointing) -> the most frugal buffers' StepCosts
    (`frugal_costs`)."""
    overhead: int = 0

    def __post_init__(self) -> None:
        t, hw = self.training, self.hardware
        if t.overhead_bytes is not None:
            self.overhead = t.overhead_bytes
        else:  # DeepSpeed's CPU accelerator has no CUDA context, NCCL or caching allocator to reserve for
            self.overhead = 0 if hw.accelerator == "cpu" else default_overhead(hw.gpu_memory_bytes)

    def share_setups(self) -> None:
        """Take `_limits`, `_hosts` and `_frugal` from the plans before this one of the same model, hardware,
        precision and reserve (`_SETUPS`), and `_step_setups` from those on the same machine too: what a setup holds
        apart from activations, and its step's communication, offload and optimizer terms, do not depend on the
        sequence, so a sweep over sequence lengths or batches (or `batch_by_speed`'s second pass) prices each setup
        once. Full training with no custom activation model only (LoRA's adapters are planned anew each time, and a
        custom model decides whether the search may compare figures)."""
        if self.peft is not None or self.activation_model is not None or self._limits or self._hosts or self._frugal:
            return
        key = (id(self.model), self.hardware, self.precision, self.overhead)
        shared = _SETUPS.get(key, self.model)
        if shared is None:
            shared = _SETUPS.put(key, self.model, ({}, {}, {}, {}))
        self._limits, self._hosts, self._frugal, machines = shared
        # the step-time terms of a setup (`step`) are the machine's too: a probe profile or a preset's figures
        on = machines.get(id(self.machine))
        if on is None or on[0] is not self.machine:
            if len(machines) >= 8:
                machines.clear()
            on = machines[id(self.machine)] = (self.machine, {})
        self._step_setups = on[1]

    def host_of(self, stage: int, opt: str, param: str) -> HostMemory:
        """A setup's host memory (`host_memory`), computed once per model and hardware (`share_setups`). Not named
        `host`: the rules table sets each decision on the context under its rule's name, rule_host's as `host`."""
        key = (stage, opt, param)
        hit = self._hosts.get(key)
        if hit is None:
            m, hw = self.model, self.hardware
            hit = self._hosts[key] = host_memory(m.parameters, m.largest_layer_parameters, hw.gpus_per_node,
                                                 hw.nodes, stage, opt, param, DTYPE_BYTES[self.precision],
                                                 self.trainable, self.load_width, self.qlora)
        return hit

    def device_cap(self, stage: int, opt: str, param: str) -> int:
        """The bytes a rank may use: the GPU's memory; on DeepSpeed's CPU accelerator, where the ranks' memory and
        what offload keeps on the host are one RAM, its share of the RAM the setup's offloaded states leave
        (`--gpu-memory` is the RAM split among the ranks: counted apart, a CPU offload plan needed 41.6 GB of a
        25.3 GB machine)."""
        hw = self.hardware
        if hw.accelerator != "cpu" or not hw.cpu_memory_bytes:
            return hw.gpu_memory_bytes
        left = hw.cpu_memory_bytes - self.host_of(stage, opt, param).steady_state
        return max(0, min(hw.gpu_memory_bytes, left // hw.gpus_per_node))

    def host_training(self, host: HostMemory, device_total: int) -> int:
        """CPU RAM per node while a setup whose ranks each peak at `device_total` trains: `host.steady_state`; on
        DeepSpeed's CPU accelerator the ranks' own memory too, in the same RAM as the offloaded states."""
        if self.hardware.accelerator != "cpu":
            return host.steady_state
        return self.hardware.gpus_per_node * device_total + host.steady_state

    def host_need(self, host: HostMemory, device_total: int) -> int:
        """CPU RAM per node of such a setup: the larger of the load peak and `host_training` (`host.cpu_bytes` off
        DeepSpeed's CPU accelerator; on it, the model each rank loads becomes its parameters, so the load peak is not
        added to the ranks' memory)."""
        return max(host.load_peak, self.host_training(host, device_total))

    def frugal_costs(self, stage: int, opt: str, param: str, world_size: int, accumulation: int,
                     checkpointing: bool) -> StepCosts:
        """A setup's costs at `world_size` GPUs with the most frugal buffers, what `missing` weighs more GPUs and
        full offload by; computed once per model and hardware (`share_setups`)."""
        key = (stage, opt, param, world_size, accumulation > 1, checkpointing)
        hit = self._frugal.get(key)
        if hit is None:
            hit = self._frugal[key] = costs_of(
                self.model, world_size, self.hardware.accelerator, stage, opt, param, accumulation, self.precision,
                buffer_ladder(self.model.hidden_size, stage)[-1], self.overhead, front_released=not checkpointing,
                saved_views=not checkpointing, **self.peft_costs(stage))
        return hit

    def levels(self, stage: int) -> tuple[BufferSettings, ...]:
        """The buffer ladder for a stage (`buffer_ladder`, which depends on the model's hidden size alone)."""
        return buffer_ladder(self.model.hidden_size, stage)

    def activation(self, micro_batch: int, checkpointing: bool, stage: int = 0) -> ActivationEstimate:
        """One micro-batch's activation estimate; cached: every candidate asks the same questions. `stage` matters
        only with LoRA (the adapters' dtype under DeepSpeed, `PeftPlan.activation_setup`)."""
        key = (micro_batch, checkpointing, stage == 3 if self.peft else False)
        hit = self._activations.get(key)
        if hit is None:
            if self.activation_model is not None:
                hit = self.activation_model(self.training.seq_len, micro_batch, checkpointing)
                if hit.note and hit.note not in self.warnings and not hit.note.startswith("calibrated"):
                    self.warnings.append(hit.note)
            else:
                generic, note, _ = self._analytic(key[2])
                f = self._analytic_figures(micro_batch, checkpointing, key[2])
                hit = ActivationEstimate(f[0], f[1], generic, note, *f[2:])
            self._activations[key] = hit
        return hit

    def _analytic(self, lora3: bool) -> tuple:
        """`analytic_figures` of the plan's setting (LoRA at ZeRO-3 or not), made on the first question; its note
        (the same for every micro-batch) joins the warnings then, where the first estimate would put it."""
        hit = self._analytic_models.get(lora3)
        if hit is None:
            hit = self._analytic_models[lora3] = analytic_figures(
                self.model.config, attention=self.training.attention, dtype=self.precision,
                device=self.hardware.accelerator,
                lora=self.peft.activation_setup(3 if lora3 else 0, DTYPE_BYTES[self.precision]) if self.peft else None)
            note = hit[1]
            if note and note not in self.warnings and not note.startswith("calibrated"):
                self.warnings.append(note)
        return hit

    def _analytic_figures(self, micro_batch: int, checkpointing: bool, lora3: bool) -> tuple[int, ...]:
        """The analytic model's ActivationEstimate fields of one micro-batch (`analytic_figures`), cached."""
        key = (micro_batch, checkpointing, lora3)
        hit = self._parts.get(key)
        if hit is None:
            hit = self._parts[key] = self._analytic(lora3)[2](self.training.seq_len, micro_batch, checkpointing)
        return hit

    def activations(self, micro_batch: int, checkpointing: bool) -> tuple[int, int]:
        """(activations, transient) bytes of one micro-batch."""
        est = self.activation(micro_batch, checkpointing)
        return int(est.activations), int(est.transient)

    def costs(self, stage: int, opt: str, param: str, level: int, accumulation: int,
              checkpointing: bool = True) -> StepCosts:
        """The cost layer's micro-batch-independent bytes of a setup, computed once per plan (ZeRO-1's and ZeRO-2's
        once for both without accumulation: `_costs_key`). `checkpointing` matters only to LoRA/QLoRA at ZeRO-3
        (`front`: what ZeRO-3 releases after forward when nothing recomputes), and to an MoE at ZeRO-3 (its
        experts' saved views, `zerokit.memory.estimate.held_trace`): `bare`."""
        return self._limit_at(stage, opt, param, level, accumulation, checkpointing)[0]

    def _limit_at(self, stage: int, opt: str, param: str, level: int, accumulation: int,
                  checkpointing: bool) -> tuple[StepCosts, bool, Any, int]:
        """`_limit` looked up first, with `bare` derived from the checkpointing choice."""
        bare = not checkpointing and stage == 3 and self.bare_matters
        limit = self._limits.get(_costs_key(stage, opt, param, level, accumulation, bare))
        return limit if limit is not None else self._limit(stage, opt, param, level, accumulation, bare)

    @functools.cached_property
    def bare_matters(self) -> bool:
        """Whether ZeRO-3's costs depend on gradient checkpointing: LoRA/QLoRA's front (`costs_of`'s
        front_released) or an MoE's stacked experts, kept by their saved views (`saves_views`)."""
        return self.peft is not None or saves_views(self.model)

    def step(self, stage: int, opt: str, param: str, level: int, micro_batch: int, checkpointing: bool) -> StepTime:
        """The predicted time of one optimizer step of this setup, computed once per plan (`step_time_at`), against
        the setup's own terms (`step_setup`), computed once per model and machine (`share_setups`)."""
        key = (stage, opt, param, level, micro_batch, checkpointing)
        hit = self._steps.get(key)
        if hit is None:
            setup = self._step_setups.get(key[:4])
            if setup is None:
                b, hw = buffer_ladder(self.model.hidden_size, stage)[level], self.hardware
                # step_setup's arguments, in its order (pin_memory: True, the ds_config's)
                setup = self._step_setups[key[:4]] = step_setup(
                    self.flops, self.machine, self.model.parameters, hw.gpus_per_node, hw.nodes, stage, opt, param,
                    self.precision, b.overlap_comm, b.reduce_bucket_size, b.allgather_bucket_size,
                    b.prefetch_bucket_size, b.param_persistence_threshold, True,
                    self.model.parameters if self.peft is None else self.peft.trainable,
                    None if self.peft is None else self.peft.lora_work,
                    (0, 0) if self.peft is None else self.peft.saved_work,
                    b.max_live_parameters)  # the ds_config's stage3_max_reuse_distance (`zero_buffer_keys`)
            t, per_gpu = self.training, self.batch.per_gpu_samples
            hit = self._steps[key] = step_time_at(setup, self.flops, self.machine, t.seq_len, micro_batch,
                                                  1 if per_gpu is None else per_gpu // micro_batch, checkpointing,
                                                  t.attention)
        return hit

    @functools.cached_property
    def flops(self) -> ModelFlops:
        m = self.model
        if m.source == "meta":  # an architecture zerokit does not count: its matmuls as a llama of its shape
            mf = meta_model_flops(m)
            self.warnings.append(
                f"step times price {m.config.get('model_type')} as a llama of its shape (hidden {m.hidden_size}, "
                f"{m.num_layers} layers) whose MLP, {mf.intermediate_size:,} wide, "
                + ("gives its own weight matrices' matmuls per token (an MoE's routed experts at top-k)"
                   if m.active_matmul_parameters else "is its config's intermediate_size (no top-k for its experts)")
                + (f", gathering its {mf.parameter_modules:,} modules under ZeRO-3" if m.module_trace else "")
                + ": zerokit does not model its FLOPs kernel by kernel; memory and parameters are its own. Probe-free "
                "figures are rough: compare setups, not seconds")
            return mf
        return model_flops(m.config)

    def peft_costs(self, stage: int) -> dict[str, int]:
        """`costs_for`'s LoRA/QLoRA arguments: only the adapters train, the base is frozen (empty: full training)."""
        if self.peft is None:
            return {}
        return self.peft.costs_at(stage, DTYPE_BYTES[self.precision])

    @functools.cached_property
    def qlora_load(self) -> int:
        """Per-GPU bytes while a QLoRA model loads for ZeRO-3: transformers builds a quantized model without
        zero.Init (modeling_utils.get_init_context) and bitsandbytes puts it on the rank's GPU
        (`device_map={"": current_device}`), so the whole base is there before DeepSpeed partitions it; with the
        adapters in fp32 (PEFT's autocast_adapter_dtype), the largest weight in 16 bits while it is quantized, and
        the overhead reserve."""
        return (self.peft.frozen_bytes_at(3) + 4 * self.peft.trainable + 2 * self.model.largest_layer_parameters
                + self.overhead)

    @functools.cached_property
    def load_width(self) -> int:
        """Bytes a parameter takes on the host while the ranks load the model (`zerokit.memory.host.load_bytes`)."""
        return load_bytes(self.model.config)

    @property
    def qlora(self) -> bool:
        """QLoRA: the 4-bit base cannot be offloaded (`zerokit.planner.peft.QLORA_NO_PARAM_OFFLOAD`)."""
        return self.peft is not None and self.peft.method == "qlora"

    @property
    def trainable(self) -> int:
        """Parameters with gradients and optimizer states."""
        return self.model.parameters if self.peft is None else self.peft.trainable

    def accumulation_steps(self, micro_batch: int) -> int:
        per_gpu = self.batch.per_gpu_samples
        return 1 if per_gpu is None else per_gpu // micro_batch

    def need(self, stage: int, opt: str, param: str, level: int, micro_batch: int, checkpointing: bool) -> int:
        """Per-GPU bytes at the largest phase for this setup and micro-batch."""
        costs = self.costs(stage, opt, param, level, self.accumulation_steps(micro_batch), checkpointing)
        return costs.need(self.activation(micro_batch, checkpointing, stage))

    def largest_fitting(self, stage: int, opt: str, param: str, level: int, accumulation: int, checkpointing: bool,
                        micro_batches: tuple[int, ...]) -> int | None:
        """The largest of `micro_batches` (ascending, all of one accumulation) whose `need` is within the GPU's
        memory, by binary search: the bytes grow with the micro-batch, so only ~log2(n) of them are probed.

        The search's hot path: the setup's headroom is computed once, and each micro-batch's activation figures
        once per plan (`zerokit.memory.estimate.activation_figures`), so a probe is two comparisons. Whole bytes
        make the rearranged sums exact; a custom activation model (whose figures may not be) asks `need` itself.
        """
        return self._search(self._limit_at(stage, opt, param, level, accumulation, checkpointing), stage,
                            checkpointing, micro_batches)

    def _search(self, limit: tuple[StepCosts, bool, Any, int], stage: int, checkpointing: bool,
                micro_batches: tuple[int, ...]) -> int | None:
        """`largest_fitting` for a setup's `_limit`, which a candidate looks up once for all its searches."""
        costs, exact, room, cap = limit
        lo, hi, best = 0, len(micro_batches) - 1, None
        if not exact:
            while lo <= hi:
                mid = (lo + hi) // 2
                mb = micro_batches[mid]
                if costs.need(self.activation(mb, checkpointing, stage)) <= cap:
                    best, lo = mb, mid + 1
                else:
                    hi = mid - 1
            return best
        lora3 = self.peft is not None and stage == 3
        if room is None:  # not even the phases without activations fit
            self._analytic(lora3)  # the model's note, in order, as a probe would record it
            return None
        room_first, room_second = room
        # keyed as the activation cache is (`activation`): checkpointing, and LoRA at ZeRO-3
        figures = self._figures.get((checkpointing, lora3))
        if figures is None:
            figures = self._figures[checkpointing, lora3] = {}
        while lo <= hi:
            mid = (lo + hi) // 2
            mb = micro_batches[mid]
            f = figures.get(mb)
            if f is None:
                a, _, fwd, loss, head, layer, head_grad = self._analytic_figures(mb, checkpointing, lora3)
                lp = loss // 2  # as `activation_figures` weighs them
                f = figures[mb] = (a + max(fwd, loss, head - lp), a + max(head_grad, layer) - lp)
            if f[0] <= room_first and f[1] <= room_second:
                best, lo = mb, mid + 1
            else:
                hi = mid - 1
        return best

    def _limit(self, stage: int, opt: str, param: str, level: int, accumulation: int,
               bare: bool = False) -> tuple[StepCosts, bool, Any, int]:
        """A setup's (costs, whether the search may compare activation figures, `StepCosts.headroom` of the rank's
        memory, that memory: `device_cap`),
        computed once per plan; `bare`: ZeRO-3 without checkpointing where that matters (`bare_matters`)."""
        key = _costs_key(stage, opt, param, level, accumulation, bare)
        limit = self._limits.get(key)
        if limit is None:
            hw = self.hardware
            buffers = buffer_ladder(self.model.hidden_size, stage)[level]
            if self.peft is None:
                costs = costs_of(self.model, hw.world_size, hw.accelerator, stage, opt, param, accumulation,
                                 self.precision, buffers, self.overhead, saved_views=bare)
            else:
                costs = costs_of(self.model, hw.world_size, hw.accelerator, stage, opt, param, accumulation,
                                 self.precision, buffers, self.overhead, front_released=bare, saved_views=bare,
                                 **self.peft_costs(stage))
            exact = self.activation_model is None and costs.integral
            cap = self.device_cap(stage, opt, param)
            limit = self._limits[key] = (costs, exact, costs.headroom(cap) if exact else None, cap)
        return limit

    @property
    def gpu_label(self) -> str:
        hw = self.hardware
        return hw.gpu_name if hw.gpu_name != "custom" else format_bytes(hw.gpu_memory_bytes)


_SETUPS = IdentityMemo(1024)
"""(model, hardware, precision, overhead reserve) -> (`Context._limits`, `_hosts`, `_frugal`, and per machine, held by
identity, `_step_setups`) shared by full-training plans (`Context.share_setups`); the model is held by identity, the
rest by value."""


def _costs_key(stage: int, opt: str, param: str, level: int, accumulation: int, bare: bool = False) -> tuple:
    """A setup's key in a plan's cost caches. ZeRO-1 and ZeRO-2 allocate the same without accumulation
    (`zerokit.memory.estimate`), on the same buffer ladder: one entry serves both."""
    held = accumulation > 1
    return (2 if stage == 1 and not held else stage, opt, param, level, held, bare)


@dataclass(frozen=True)
class BatchChoice:
    micro_batches: tuple[int, ...]
    """Micro-batches allowed, ascending."""
    per_gpu_samples: int | None
    """Samples per GPU per optimizer step when a global batch is given; None = accumulation 1."""
    asked: int | None = None
    """The global batch asked for, in samples (--global-batch-tokens over the sequence length, rounded)."""
    options: tuple[int, ...] = ()
    """The global batches the plan may use for it (`global_batch_options`), the nearest multiple first."""
    exact: bool = False
    """What was asked splits evenly (samples a multiple of the GPUs, tokens whole samples of them): it is kept."""


Rule = Callable[[Context], tuple[Any, str | None]]


# ---------------------------------------------------------------------------------------------------------- rules

def rule_forced(ctx: Context) -> tuple[None, str | None]:
    """Refuse combinations DeepSpeed itself rejects, before searching."""
    t, hw = ctx.training, ctx.hardware
    stage, opt, param = t.zero_stage, t.offload_optimizer, t.offload_param
    if param not in (None, "none") and stage is not None and stage < 3:
        raise BadInput(f"--offload-param {param} needs ZeRO stage 3 (DeepSpeed partitions parameters only at "
                       f"stage 3); drop --zero-stage {stage} or --offload-param")
    if opt not in (None, "none") and stage == 0:
        need = "stage 3 (ZeRO-Infinity)" if opt == "nvme" else "stage 1 or higher"
        raise BadInput(f"--offload-optimizer {opt} needs ZeRO {need}; use --zero-stage auto")
    if "nvme" in (opt, param) and stage is not None and stage < 3:
        raise BadInput(f"NVMe offload needs ZeRO stage 3 (ZeRO-Infinity); drop --zero-stage {stage}")
    if "nvme" in (opt, param) and not hw.nvme_path:
        raise BadInput("NVMe offload needs --nvme-path (the local NVMe mount to swap to)")
    if param == "nvme" and opt not in (None, "nvme"):
        raise BadInput(f"--offload-param nvme with --offload-optimizer {opt} is not a DeepSpeed setup; "
                       "use --offload-optimizer nvme (or auto)")
    if t.seq_len < 1:
        raise BadInput(f"--seq-len must be at least 1, got {t.seq_len}")
    if t.micro_batch is not None and t.micro_batch < 1:
        raise BadInput(f"--micro-batch must be at least 1, got {t.micro_batch}")
    if t.global_batch is not None and t.global_batch_tokens is not None:
        raise BadInput("give --global-batch or --global-batch-tokens, not both")
    if t.total_steps is not None and t.warmup_steps > t.total_steps:
        raise BadInput(f"--warmup-steps {t.warmup_steps} is more than --total-steps {t.total_steps}: the decay would "
                       "start at a learning rate of 0 (DeepSpeed only logs a warning); lower --warmup-steps")
    if t.attention == "flash" and hw.accelerator != "cpu" and not hw.bf16:
        raise BadInput(f"--attention flash needs FlashAttention-2, which runs on Ampere or newer GPUs (A100, H100, "
                       f"L40S, RTX 30/40); {hw.gpu_name} is older: use --attention sdpa")
    forced = [f"ZeRO-{stage}" if stage is not None else "",
              f"optimizer offload {opt}" if opt is not None else "",
              f"parameter offload {param}" if param is not None else "",
              # one that fits nowhere is a ceiling (`plan`), which rule_batch words
              f"micro-batch {t.micro_batch}" if t.micro_batch is not None and not ctx.relax_micro_batch else "",
              ("checkpointing " + ("on" if t.gradient_checkpointing else "off"))
              if t.gradient_checkpointing is not None else ""]
    forced = [f for f in forced if f]
    if not forced:
        return None, None
    return None, f"Forced by you: {', '.join(forced)}; the search only considers setups that keep them."


def rule_precision(ctx: Context) -> tuple[str, str]:
    """bf16 where the GPU computes in it (same range as fp32: no loss scaling), else fp16 with dynamic scaling."""
    asked, hw = ctx.training.precision, ctx.hardware
    if asked == "bf16" and not hw.bf16:
        raise BadInput(f"{hw.gpu_name} has no bf16 support; use --precision fp16 (or auto)")
    if asked is not None:
        return asked, f"{asked} because you asked for it."
    if hw.bf16 and hw.gpu_name == "custom":  # a GPU given by its memory alone: nothing says which chip it is
        return "bf16", ("bf16, assuming the GPU computes in it (A100, H100, L40S, RTX 30/40 and newer: fp32's range, "
                        "no loss scaling); on a V100 or T4 pass --precision fp16.")
    if hw.bf16:
        return "bf16", f"bf16 because {ctx.gpu_label} supports it: fp32's range, no loss scaling needed."
    return "fp16", f"fp16 with dynamic loss scaling because {ctx.gpu_label} has no bf16."


def rule_peft(ctx: Context) -> tuple[PeftPlan | None, str | None]:
    """LoRA/QLoRA: count the adapters, price the frozen base, refuse what PEFT, bitsandbytes or DeepSpeed refuse."""
    t = ctx.training
    if t.peft == "none":
        return None, None  # full fine-tuning: zerokit.planner.peft is not even imported
    from zerokit.models.resolve import EXPERTS_KEYS
    from zerokit.planner.peft import QLORA_NO_PARAM_OFFLOAD, plan_peft

    if t.peft == "qlora" and t.offload_param not in (None, "none"):
        raise BadInput(f"--peft qlora cannot use --offload-param {t.offload_param}: {QLORA_NO_PARAM_OFFLOAD}; use "
                       "--offload-param none or auto (optimizer offload of the adapters works)")
    peft = plan_peft(ctx.model, t.peft, t.lora_rank, t.lora_targets, t.lora_dropout, ctx.precision,
                     t.lora_modules_to_save)
    assert peft is not None  # plan_peft's None is full fine-tuning's, returned above
    tied = _tied_head(ctx.model.config)
    if set(peft.saved_roles) == {"embedding", "head"} and tied:
        ctx.warnings.append(
            f"{ctx.model.name} ties its head to its embedding, and PEFT trains the two modules_to_save copies apart "
            "(it warns: ensure_weight_tying is off), so the plan counts both; the trained model's head and embedding "
            "then differ. LoraConfig(ensure_weight_tying=True) keeps one shared copy, which zerokit does not plan "
            "(it would count one copy fewer)")
    elif tied and (in_adapter := _tied_in_adapter(peft)):
        effects = []
        if set(in_adapter) & set(peft.modules_to_save):
            effects.append("a modules_to_save copy trains apart from the weight it was tied to, so the trained "
                           "model's head and embedding differ")
        if set(in_adapter) - set(peft.modules_to_save):
            effects.append("a LoRA on a tied layer changes the weight both share when it is merged")
        ctx.warnings.append(
            f"{ctx.model.name} ties its head to its embedding, and {' and '.join(in_adapter)} "
            f"{'is' if len(in_adapter) == 1 else 'are'} part of the adapter (PEFT warns: ensure_weight_tying is off): "
            f"{'; '.join(effects)}. LoraConfig(ensure_weight_tying=True) ties them, which zerokit does not plan")
    share = peft.trainable / max(1, peft.frozen_parameters)
    moe = any(ctx.model.config.get(k) for k in EXPERTS_KEYS)
    if peft.method == "qlora" and 2 * peft.quantized_parameters < peft.frozen_parameters:
        ctx.warnings.append(
            f"QLoRA quantizes {format_count(peft.quantized_parameters)} of the {format_count(peft.frozen_parameters)} "
            f"base parameters ({peft.quantized_parameters / max(1, peft.frozen_parameters):.0%}): bitsandbytes "
            "replaces modules whose type is nn.Linear, and "
            + ("transformers 5 stores this model's MoE experts as 3-D tensors" if moe else
               "this model's linears are another type (falcon's FalconLinear subclasses it)"
               if not peft.quantized_parameters else "most of this model's parameters lie outside them")
            + f"; the rest stay {ctx.precision}, so the frozen base is {format_bytes(peft.frozen_bytes)} a copy, not "
            f"the {format_bytes(peft.frozen_parameters // 2)} of 4 bits throughout")
    head = "the LM head, which it skips"
    if peft.method == "qlora" and _tied_head(ctx.model.config):
        head = "the LM head, which is the embedding (tied)"
    base = (f"in {ctx.precision} ({format_bytes(peft.frozen_bytes)})" if peft.method == "lora" else
            f"({format_bytes(peft.frozen_bytes)}, of which {format_bytes(peft.quantization_constants)} quantization "
            f"constants): {format_count(peft.quantized_parameters)} in 4-bit NF4 with double quantization, the "
            f"{format_count(peft.frozen_parameters - peft.quantized_parameters)} bitsandbytes leaves in "
            f"{ctx.precision} (" + ("its linears are a subclass of nn.Linear, which it leaves" if not
                                    peft.quantized_parameters else
                                    "embeddings, norms, routers and the experts, which transformers 5 stacks as 3-D "
                                    f"tensors: no nn.Linear; and {head}" if moe else
                                    f"embeddings and norms: no nn.Linear; and {head}") + ")")
    targets = peft.target_modules if isinstance(peft.target_modules, str) else ",".join(peft.target_modules)
    copies = (f" and {peft.saved_parameters:,} in whole copies of {', '.join(peft.modules_to_save)} beside the "
              f"frozen originals (modules_to_save), {100 * share:.2f}% of the base together," if peft.modules_to_save
              else f" ({100 * share:.2f}% of the base),")
    return peft, (f"{'QLoRA' if peft.method == 'qlora' else 'LoRA'} rank {peft.rank} on {targets}: "
                  f"{peft.trainable - peft.saved_parameters:,} trainable adapter parameters{copies} each with "
                  f"gradients, an fp32 master copy and Adam moments; the {format_count(peft.frozen_parameters)} "
                  f"base parameters are frozen {base}, whole on every GPU at ZeRO-0 to 2 and partitioned at "
                  "ZeRO-3" + (" (LoRA dropout 0, not the default 0.05: PEFT puts no dropout on MoE expert and router "
                              "parameters, lora.ParamWrapper)." if t.lora_dropout is None and not peft.dropout
                              else "."))


TIED_LAYER_NAMES = ("embed_tokens", "lm_head")
"""The module names PEFT checks against a tied model's adapter (peft.utils.constants.EMBEDDING_LAYER_NAMES, read by
BaseTuner._check_tied_modules): another family's names (gpt2's wte) draw no warning from it."""


def _tied_in_adapter(peft: PeftPlan) -> list[str]:
    """The modules of `TIED_LAYER_NAMES` among the adapter's modules_to_save and its listed targets, as PEFT's
    _check_tied_modules finds them (a listed target by its last name; all-linear never takes the head)."""
    targets = () if isinstance(peft.target_modules, str) else peft.target_modules
    return list(dict.fromkeys(m for m in (*peft.modules_to_save, *targets) if m.split(".")[-1] in TIED_LAYER_NAMES))


def _tied_head(config: Any) -> bool:
    """Whether the model's output head is its input embedding (transformers' tie_word_embeddings, as zerokit's
    parts read it)."""
    from zerokit.models.params import model_parts

    with contextlib.suppress(BadInput, KeyError, TypeError, ValueError):  # a config without a family's parts
        return model_parts(config)[-1].tied
    return False


def rule_batch(ctx: Context) -> tuple[BatchChoice, str]:
    """Which micro-batches to try, and how a global batch splits into micro-batch x accumulation x GPUs."""
    t, dp = ctx.training, ctx.hardware.world_size
    target = t.global_batch
    reason_prefix = ""
    if t.global_batch_tokens is not None:
        target = max(1, _round_half_up(t.global_batch_tokens / t.seq_len))
        reason_prefix = f"{format_count(t.global_batch_tokens)} tokens per step at {t.seq_len} tokens per sample is " \
                        f"{target} sample{'s' if target > 1 else ''}; "
    if target is None:
        if t.micro_batch is not None and ctx.relax_micro_batch:
            mbs = tuple(m for m in AUTO_MICRO_BATCHES if m < t.micro_batch) + (t.micro_batch,)
            why = (f"micro-batch {t.micro_batch} fits no setup, so the largest power of two below it that fits, "
                   "no gradient accumulation (no global batch given).")
        elif t.micro_batch is not None:
            mbs = (t.micro_batch,)
            why = f"micro-batch {t.micro_batch} as asked, no gradient accumulation (no global batch given)."
        else:
            mbs = AUTO_MICRO_BATCHES
            why = (f"micro-batch: the power of two up to {MAX_AUTO_MICRO_BATCH} that trains fastest among those that "
                   "fit, no gradient accumulation (no global batch given).")
        return BatchChoice(mbs, None), "Batch: " + why
    # a micro-batch relaxed below the one asked (it fit nowhere) no longer sets the multiple: the GPUs do
    unit = dp * (t.micro_batch if t.micro_batch is not None and not ctx.relax_micro_batch else 1)
    options = global_batch_options(target, unit, t.micro_batch is None)
    rounded = ctx.global_batch or options[0]
    tokens = t.global_batch_tokens
    if rounded != target:
        # a multiple already, it is another option timed (engine.batch_by_speed): of tokens rounded to samples, or
        # of an exact global batch, for the advice alone
        of = "the GPUs" if unit == dp else f"{dp} GPU{'s' * (dp != 1)} x micro-batch {t.micro_batch}"
        off = f" ({100 * (rounded - target) / target:+.1f}%)" if not ctx.batch_note else ""  # the note says it
        ctx.warnings.append((f"global batch {target} is not a multiple of {unit} ({of})"
                             if target % unit or tokens is None else
                             f"global batch {target} ({format_count(tokens)} tokens rounded to whole samples)")
                            + f"; using {rounded}{off}{ctx.batch_note}")
        reason_prefix += f"rounded to {rounded}{off}{ctx.batch_note}, a multiple of {unit} ({of}); "
    if tokens is not None and abs(rounded * t.seq_len - tokens) > GLOBAL_BATCH_SLACK * tokens:
        ctx.warnings.append(_tokens_trained(tokens, rounded, t.seq_len, unit, dp))
    per_gpu = rounded // dp
    if t.micro_batch is not None and ctx.relax_micro_batch:
        mbs = _divisors(per_gpu, t.micro_batch)
        reason_prefix += f"micro-batch {t.micro_batch} fits no setup; "
    elif t.micro_batch is not None:
        mbs = (t.micro_batch,)
    else:
        mbs = _divisors(per_gpu, MAX_AUTO_MICRO_BATCH)
    why = (f"global batch {rounded} = {per_gpu} sample{'s' * (per_gpu != 1)} per GPU x {dp} GPU{'s' * (dp != 1)}; "
           "the micro-batch is the divisor of "
           f"{per_gpu} that trains fastest among those that fit, and accumulation makes up the rest.")
    exact = options[0] == target and (tokens is None or target * t.seq_len == tokens)
    return BatchChoice(mbs, per_gpu, target, options, exact), "Batch: " + reason_prefix + why


def _tokens_trained(tokens: int, samples: int, seq_len: int, unit: int, dp: int) -> str:
    """The warning for --global-batch-tokens that train more than GLOBAL_BATCH_SLACK more or fewer tokens a step:
    whole samples of `seq_len`, a multiple of `unit` (GPUs x a forced micro-batch)."""
    trained = samples * seq_len
    head = (f"--global-batch-tokens {format_count(tokens)} trains {samples} sample{'s' if samples > 1 else ''} of "
            f"{seq_len} tokens, {trained:,} tokens per step")
    if samples == unit and trained > 2 * tokens:  # fewer tokens than the smallest step trains
        return (f"{head} ({trained / tokens:.1f}x the tokens asked): a step trains at least {unit} "
                f"sample{'s' if unit > 1 else ''} ({'one per GPU' if unit == dp else 'GPUs x micro-batch'})")
    return (f"{head} ({100 * (trained - tokens) / tokens:+.1f}%): whole samples"
            + (f", a multiple of {unit}" if unit > 1 else ""))


def global_batch_options(target: int, unit: int, free: bool) -> tuple[int, ...]:
    """The global batches a plan may use for `target` samples on `unit` (GPUs x a forced micro-batch): the nearest
    multiple of `unit` first (`target` itself when it is one), then, with a `free` micro-batch, the other multiples
    within GLOBAL_BATCH_SLACK of `target`, those whose samples per GPU have the most divisors up to
    MAX_AUTO_MICRO_BATCH first (the micro-batches they allow: 31 per GPU allows 1 and 31, 30 eight of them), then
    the nearest; BATCH_OPTIONS in all. A forced micro-batch trains every multiple alike: the nearest is the answer.
    """
    nearest = max(unit, _round_half_up(target / unit) * unit)
    if not free:
        return (nearest,)
    centre = nearest // unit
    lo = max(1, math.ceil(target * (1 - GLOBAL_BATCH_SLACK) / unit), centre - BATCH_SCAN // 2)
    hi = min(math.floor(target * (1 + GLOBAL_BATCH_SLACK) / unit), centre + BATCH_SCAN // 2)
    ks = range(lo, hi + 1)
    others = sorted((k * unit for k in ks if k * unit != nearest),
                    key=lambda g: (-len(_divisors(g // unit, MAX_AUTO_MICRO_BATCH)), abs(g - target), g))
    return (nearest, *others[:BATCH_OPTIONS - 1])


def _divisors(per_gpu: int, largest: int) -> tuple[int, ...]:
    """The micro-batches up to `largest` that split `per_gpu` samples evenly, ascending."""
    return tuple(m for m in range(1, min(per_gpu, largest) + 1) if per_gpu % m == 0)


def rule_candidates(ctx: Context) -> tuple[tuple, str]:
    """Setups to evaluate, fastest first, filtered by what the user forced; NVMe only with --nvme-path."""
    t, hw = ctx.training, ctx.hardware
    forced = (t.zero_stage, t.offload_optimizer, t.offload_param)
    if forced == (None, None, None):
        pool = NO_OFFLOAD + CPU_OFFLOAD + (NVME_OFFLOAD if hw.nvme_path else ())
    else:  # forced options may name setups outside the default list, e.g. ZeRO-1 + CPU optimizer offload
        pool = tuple(c for c in FORCED_ORDER if _valid(*c, hw)
                     and all(f is None or f == v for f, v in zip(forced, c)))
    nvme = "" if hw.nvme_path else "; NVMe offload is not considered without --nvme-path"
    if ctx.qlora and any(c[2] != "none" for c in pool):
        pool = tuple(c for c in pool if c[2] == "none")
        nvme += "; parameter offload is skipped for QLoRA (4-bit weights cannot be offloaded)"
    return pool, (f"Candidates, in search order (no offload, then CPU offload, then NVMe): "
                  f"{', '.join(setup_label(*c) for c in pool)}{nvme}.")


def rule_evaluate(ctx: Context) -> tuple[tuple, str]:
    """Every candidate at its best micro-batch, checkpointing and buffer setting."""
    ctx.share_setups()
    evaluations = tuple(_evaluate(ctx, *c) for c in ctx.candidates)
    n_fit = sum(e.candidate.fits for e in evaluations)
    if len(evaluations) == 1:
        fit = "Evaluated 1 setup; it " + ("fits" if n_fit else "does not fit")
    else:
        fit = f"Evaluated {len(evaluations)} setups; {n_fit} fit{'s' * (n_fit == 1)}"
    return evaluations, f"{fit} on {ctx.gpu_label} ({format_bytes(ctx.hardware.gpu_memory_bytes)} per GPU)."


def rule_choose(ctx: Context) -> tuple[Evaluation, str]:
    """The fitting setup with the most predicted tokens/s, else the closest miss."""
    evs = ctx.evaluations
    if not evs:
        raise BadInput("the forced options leave no setup to evaluate; relax --zero-stage/--offload-*")
    fitting = [e for e in evs if e.candidate.fits]
    if not fitting:
        chosen = evs[-1]  # the most frugal: what remains is host memory or more GPUs, which `missing` spells out
        return chosen, (f"Nothing fits; the closest is the most frugal setup, {_label_of(chosen)}, which "
                        f"{chosen.candidate.why_not}.")
    fastest = max(fitting, key=lambda e: e.candidate.performance.tokens_per_s)
    best = fastest.candidate.performance.tokens_per_s
    # Within the model's resolution the earlier (simpler, less communication-bound) setup of the search order wins,
    # unless it is tight on memory and a tied one is not.
    tied = [e for e in fitting if e.candidate.performance.tokens_per_s >= (1 - TIE_TOLERANCE) * best]
    chosen = next((e for e in tied if e.shortfall <= TIGHT), tied[0])
    others = sorted((e for e in fitting if e is not chosen), key=lambda e: -e.candidate.performance.tokens_per_s)
    close = [e for e in others if e.candidate.performance.tokens_per_s >= (1 - TIE_TOLERANCE) * best]
    if chosen is not tied[0]:
        share, what = _tightest(ctx, tied[0])
        why = (f"{_described(ctx, chosen)} is chosen: {_described(ctx, tied[0])} is within {TIE_TOLERANCE:.0%} of "
               f"it, closer than the step-time model can tell apart, but needs {share:.1%} of {what}, and the "
               f"setup with headroom is kept")
    elif close:
        why = (f"{_described(ctx, chosen)} is chosen: {_described(ctx, close[0])} is within {TIE_TOLERANCE:.0%}, "
               "closer than the step-time model can tell apart, and the simpler setup is kept")
    else:
        why = f"{_described(ctx, chosen)} is the fastest setup that fits"
        if others:
            why += f"; it beats {_described(ctx, others[0])}"
    # its place by identity (`evs.index` compares the candidates before it field by field; their setups differ)
    earlier = [e for e in evs[:next(i for i, e in enumerate(evs) if e is chosen)] if not e.candidate.fits]
    if earlier:
        why += f"; {_label_of(earlier[-1])} {earlier[-1].candidate.why_not}"
    return chosen, why + "."


def _tightest(ctx: Context, e: Evaluation) -> tuple[float, str]:
    """(share, what) of the resource `e` fills most (`Evaluation.shortfall`, the largest of the three shares): the
    CPU RAM or the NVMe given where its share reaches it, else the GPU's memory (at its peak phase, or while QLoRA's
    base loads)."""
    hw, c = ctx.hardware, e.candidate
    if hw.cpu_memory_bytes and c.cpu_bytes_per_node / hw.cpu_memory_bytes >= e.shortfall:
        return e.shortfall, "the CPU RAM"
    if hw.nvme_bytes and c.nvme_bytes_per_node / hw.nvme_bytes >= e.shortfall:
        return e.shortfall, "the NVMe"
    return e.shortfall, "the GPU's memory"


def _described(ctx: Context, e: Evaluation) -> str:
    """'ZeRO-2 + checkpointing at micro-batch 4, 1.90 s/step (12,345 tokens/s)'."""
    s, perf = e.candidate.setup, e.candidate.performance
    text = _label_of(e) + (" + checkpointing" if s.gradient_checkpointing else "")
    return f"{text} at micro-batch {s.micro_batch_size}, {_seconds(perf.step_time_s)}/step " \
           f"({format_rate(perf.tokens_per_s)} tokens/s)"


def _seconds(t: float) -> str:
    """`format_seconds`, but seconds past 100 too: reasons compare steps, which read best in one unit."""
    return f"{t:,.0f} s" if round(t, 2) >= 100 else format_seconds(t)


def rule_offload(ctx: Context) -> tuple[tuple[str, str], str | None]:
    s = ctx.chosen.candidate.setup
    t = ctx.training
    if s.offload_optimizer == "none" and s.offload_param == "none":
        if ctx.chosen.candidate.fits:
            return ("none", "none"), "No offload: model states fit on the GPUs, and offload would slow every step."
        # the closest miss offloads nothing only when the options forced it so (unforced, the most frugal offloads)
        forced = [f"--{o} none" for o, v in (("offload-optimizer", t.offload_optimizer),
                                              ("offload-param", t.offload_param)) if v == "none"]
        if t.zero_stage == 0:
            forced.append("--zero-stage 0, which cannot offload")
        return ("none", "none"), (f"No offload, as you asked ({', '.join(forced)}), though nothing fits without "
                                  "it." if forced else "No offload, though nothing fits without it.")
    parts = []
    if s.offload_optimizer != "none":
        parts.append(f"the optimizer (fp32 master weights, Adam moments, fp32 gradients) to {s.offload_optimizer}")
    if s.offload_param != "none":
        parts.append(f"the 16-bit parameters to {s.offload_param}")
    # what fits with less offloaded: none at all, or (parameters offloaded) the optimizer alone
    lighter = [e for e in ctx.evaluations if e.candidate.fits and e is not ctx.chosen
               and (e.candidate.setup.offload_param == "none" if s.offload_param != "none"
                    else e.candidate.setup.offload_optimizer == "none")]
    asked = [f"--offload-{what} {value}" for what, value in (("optimizer", t.offload_optimizer),
                                                             ("param", t.offload_param)) if value not in (None, "none")]
    if not lighter and asked:  # the search kept to the forced offload: it did not try less
        return (s.offload_optimizer, s.offload_param), "Offload " + " and ".join(parts) + \
            f" as you asked ({' '.join(asked)}); setups with less offloaded were not considered."
    if not lighter:
        return (s.offload_optimizer, s.offload_param), "Offload " + " and ".join(parts) + \
            " because the GPU cannot hold them otherwise."
    best = max(lighter, key=lambda e: e.candidate.performance.tokens_per_s)
    if best.shortfall > TIGHT and best.candidate.performance.tokens_per_s >= \
            (1 - TIE_TOLERANCE) * ctx.chosen.candidate.performance.tokens_per_s:  # the tie went to headroom
        share, what = _tightest(ctx, best)
        return (s.offload_optimizer, s.offload_param), (
            f"Offload {' and '.join(parts)} for headroom: the fastest setup with less offloaded, "
            f"{_described(ctx, best)}, is within {TIE_TOLERANCE:.0%} of its speed but needs {share:.1%} of {what}.")
    why = (f"Offload {' and '.join(parts)} for speed, not to fit: {_described(ctx, ctx.chosen)} beats the fastest "
           f"setup with less offloaded, {_described(ctx, best)}")
    if s.micro_batch_size > best.candidate.setup.micro_batch_size:
        why += "; the GPU memory offload frees buys the larger micro-batch"
    return (s.offload_optimizer, s.offload_param), why + "."


def rule_micro_batch(ctx: Context) -> tuple[tuple[int, bool], str]:
    """The micro-batch and checkpointing of the chosen setup, and why checkpointing is on or off: against what
    forcing --gradient-checkpointing the other way plans for this setup, the search's fastest option there at its own
    buffers (`Evaluation.fastest`)."""
    e, b = ctx.chosen, ctx.batch
    s, mem, fits = e.candidate.setup, e.candidate.memory, e.candidate.fits
    largest, mb = b.micro_batches[-1], s.micro_batch_size
    if ctx.training.gradient_checkpointing is not None:
        ck = "gradient checkpointing " + ("on" if s.gradient_checkpointing else "off") + " as you asked"
    elif s.gradient_checkpointing:
        plain = e.fastest.get(False)
        if plain is None:
            ck = ("gradient checkpointing on: without it not even the smallest micro-batch fits"
                  if len(b.micro_batches) > 1 else f"gradient checkpointing on: without it micro-batch {mb} does not fit")
        elif not fits:  # the closest miss: nothing to time
            ck = f"gradient checkpointing on: without it only micro-batch {plain[2]} fits on the GPU"
        else:
            alone, alt, most = plain
            ck = ("gradient checkpointing on: without it " + (f"only micro-batch {alone} fits" if most == alone else
                                                              f"micro-batch {alone} trains fastest ({most} fits with "
                                                              "smaller buffers)")
                  + f", {format_rate(alt.tokens_per_s)} tokens/s against "
                  f"{format_rate(e.candidate.performance.tokens_per_s)} with recomputation at micro-batch {mb}")
    else:
        ck = "no gradient checkpointing: recomputation would only add compute"
        recomputed = e.fastest.get(True) if fits else None
        if recomputed is not None and recomputed[0] > mb:
            ck = (f"no gradient checkpointing: with it micro-batch {recomputed[0]} would fit but train "
                  f"{format_rate(recomputed[1].tokens_per_s)} tokens/s against "
                  f"{format_rate(e.candidate.performance.tokens_per_s)} without")
    own = e.fastest.get(s.gradient_checkpointing)
    where = "" if fits else " on the GPU"  # a closest miss short of host memory or NVMe
    if mem.total > ctx.device_cap(s.zero_stage, s.offload_optimizer, s.offload_param):
        cap = "the smallest, and even it does not fit"
    elif mb == largest:
        cap = "the largest allowed"
    elif own is not None and own[2] > mb:  # HF's auto buffers train faster than the frugal ones that hold more
        cap = (f"the fastest that fits{where} this way (up to {largest}; micro-batch {own[2]} fits with smaller "
               "buffers, but trains slower)")
    else:
        cap = f"the largest that fits{where} this way (up to {largest})"
    return (mb, s.gradient_checkpointing), (f"Micro-batch {mb} ({mb * ctx.training.seq_len:,} tokens), {cap}; {ck}"
                                            f"{_host_paced(ctx)}.")


def _host_paced(ctx: Context) -> str:
    """Where the probe timed this GPU's host and it outlasts the chosen micro-batch's kernels (`host_excess`), a
    clause saying so: more tokens a micro-batch then cost the step little, which the search weighed."""
    from zerokit.perf.model import adapted_linears, host_micro_batch_s

    c, perf = ctx.chosen.candidate, ctx.machine
    t = c.performance
    if t is None or not perf.host_op_s or perf.device != "gpu" or c.setup.zero_stage == 3:
        return ""
    adapted = 0 if ctx.peft is None else adapted_linears(ctx.peft.lora_work)
    host = host_micro_batch_s(perf, ctx.flops, adapted, c.setup.gradient_checkpointing)
    device = t.compute_s / c.setup.gradient_accumulation_steps
    if host <= device:
        return ""
    return (f"; this GPU's host paces it (the probe's figures: {format_seconds(host)} of host time a micro-batch "
            f"against {format_seconds(device)} of kernels), so a larger one's kernels would hide behind the host")


def rule_accumulation(ctx: Context) -> tuple[int, str]:
    b, mb, t = ctx.batch, ctx.chosen.candidate.setup.micro_batch_size, ctx.training
    gas = 1 if b.per_gpu_samples is None else b.per_gpu_samples // mb
    dp = ctx.hardware.world_size
    tokens = mb * gas * dp * t.seq_len
    why = (f"Gradient accumulation {gas}: {mb} x {gas} x {dp} GPU{'s' * (dp != 1)} = {mb * gas * dp} sample{'s' if mb * gas * dp > 1 else ''}, "
           f"{tokens:,} tokens per optimizer step")
    if b.per_gpu_samples is None and tokens < TOKENS_PER_STEP_NOTE:
        why += (" (pre-training usually wants >= 1M tokens per step: set --global-batch-tokens 1M; "
                "for fine-tuning fewer is normal)")
    return gas, why + "."


def rule_buffers(ctx: Context) -> tuple[BufferSettings, str | None]:
    e = ctx.chosen
    b, s = e.buffers, e.candidate.setup
    if s.zero_stage == 0:
        return b, None
    costs = ctx.costs(s.zero_stage, s.offload_optimizer, s.offload_param, e.level, s.gradient_accumulation_steps,
                      s.gradient_checkpointing)
    # the cost layer's IPG buckets during backward (ZeRO-3 keeps its reduce bucket with the gradient partitions)
    bucket = costs.buffers_backward or DTYPE_BYTES[ctx.precision] * b.reduce_bucket_size
    if not b.hf_auto:
        what = f"buckets of {format_count(b.reduce_bucket_size)} elements"
    elif ctx.training.target == "deepspeed":  # no HF fills "auto": the config holds the numbers
        what = f"buckets of {format_count(b.reduce_bucket_size)} elements (reduce = hidden^2, as HF sizes them)"
    else:
        what = "HF's auto bucket sizes (reduce = hidden^2)"
    overlap = ("overlap_comm on" if b.overlap_comm else
               "overlap_comm off (its ~4.5x bucket memory would cost micro-batch size or force checkpointing)")
    live = f", {format_count(b.max_live_parameters)} live parameters" if s.zero_stage == 3 else ""
    when = ""
    if bucket and e.candidate.memory.buffers <= costs.workspace:
        when = (" (alive from the first gradient reduce to the end of backward, so not in the memory table, whose "
                "peak comes before or after them" + (f"; its buffers row is cuBLAS's workspaces, "
                                                      f"{format_bytes(costs.workspace)}" if costs.workspace else "")
                + ")")
    gathered = (f"; up to {format_bytes(costs.gathered)} of parameters gathered at once, in the parameters row"
                if s.zero_stage == 3 and costs.gathered else "")
    return b, (f"Communication buffers: {what}, {overlap}{live}: {format_bytes(bucket)} of buckets per GPU{when}"
               f"{gathered}.")


def rule_host(ctx: Context) -> tuple[int, str | None]:
    c, hw = ctx.chosen.candidate, ctx.hardware
    if c.cpu_bytes_per_node == 0 and c.nvme_bytes_per_node == 0:
        return 0, None
    have = f" of {format_bytes(hw.cpu_memory_bytes)}" if hw.cpu_memory_bytes else " (give --cpu-memory to check it)"
    why = f"CPU RAM per node: {format_bytes(c.cpu_bytes_per_node)}{have}"
    s = c.setup
    if hw.accelerator == "cpu":  # `Context.host_need`
        why += (", the ranks' own memory included: DeepSpeed's CPU accelerator trains them in this RAM"
                + (", beside the offloaded states" if s.offload_optimizer != "none" or s.offload_param != "none" else ""))
    elif s.offload_optimizer == "none" and s.offload_param == "none":
        why += ", the peak while every rank loads the model"
    if s.zero_stage == 3 and ctx.peft is None:  # LoRA's and QLoRA's own warnings say how their base loads
        ctx.warnings.append("ZeRO-3: the CPU RAM per node assumes every rank loads the model under "
                            f"deepspeed.zero.Init, partitioned as it loads: {ZERO_INIT_HOW[ctx.training.target]}; "
                            f"otherwise each rank first holds the whole model in host RAM")
    if c.nvme_bytes_per_node:
        why += f"; NVMe per node: {format_bytes(c.nvme_bytes_per_node)}"
        if hw.nvme_bytes:
            why += f" of {format_bytes(hw.nvme_bytes)}"
    return c.cpu_bytes_per_node, why + "."


def rule_peft_advice(ctx: Context) -> tuple[None, str | None]:
    """LoRA/QLoRA: why ZeRO-2 and ZeRO-3 differ so little, and the ZeRO-3 pitfalls (as warnings), each as the
    installed transformers 5, DeepSpeed 0.19 and accelerate handle it."""
    peft = ctx.peft
    if peft is None:
        return None, None
    from zerokit.planner.peft import ADAPTERS_16BIT

    n, e = ctx.hardware.world_size, DTYPE_BYTES[ctx.precision]
    stage = ctx.chosen.candidate.setup.zero_stage
    if peft.method == "qlora" and ctx.machine.sources.get("quantized_linear") != "probe":
        ctx.warnings.append(
            "QLoRA step times price bitsandbytes dequantizing each 4-bit weight in every forward, backward and "
            "recomputation as a memory pass, which nothing measured on this machine (bitsandbytes' own kernels "
            "and Python overhead may cost more); `zerokit probe` with bitsandbytes installed times its 4-bit "
            "linears, and `--hardware` plans with them")
    if peft.method == "qlora" and ctx.hardware.gpus_per_node > 1 and ctx.hardware.accelerator != "cpu":
        ctx.warnings.append(
            f"QLoRA on {ctx.hardware.gpus_per_node} GPUs a node: bitsandbytes loads the 4-bit base onto the current "
            "CUDA device (transformers' quantizer_bnb_4bit.update_device_map: device_map={'': "
            "torch.cuda.current_device()} when none is given), GPU 0 on every rank until the rank's own is "
            f"set: {QLORA_DEVICE_HOW[ctx.training.target]}, or pass "
            "device_map={'': int(os.environ['LOCAL_RANK'])} to from_pretrained")
    # ZeRO-3 partitions the weights; a QLoRA base's quantization constants are no parameters and stay whole on every
    # rank (`PeftPlan.costs_at`'s replicated_bytes)
    whole = peft.quantization_constants if peft.method == "qlora" else 0
    frozen2, frozen3 = peft.frozen_bytes_at(2), -(-(peft.frozen_bytes_at(3) - whole) // n) + whole
    per_parameter = e + 4 + 8 + (4 if ctx.precision != "fp32" else 0)
    states = peft.trainable * per_parameter
    name = "QLoRA" if peft.method == "qlora" else "LoRA"
    if peft.saved_parameters and n > 1:  # the copies' states, not the adapters', are what ZeRO-1/2 partition
        adapters = (peft.trainable - peft.saved_parameters) * per_parameter
        why = (f"{name} and the ZeRO stage: the adapters' gradients, master weights and Adam moments are only "
               f"{format_bytes(adapters)}, but the whole modules_to_save copies ({', '.join(peft.modules_to_save)}) "
               f"bring them to {format_bytes(states)} in all, which ZeRO-1/2 partition over the {n} GPUs "
               f"({format_bytes(states - -(-states // n))} less per GPU); the frozen base is {format_bytes(frozen2)} "
               "per GPU at ZeRO-0 to 2")
    else:
        why = (f"{name} and the ZeRO stage: the adapters' gradients, master weights and Adam moments are only "
               f"{format_bytes(states)} in all, so ZeRO-1/2 have little to partition; the frozen base is "
               f"{format_bytes(frozen2)} per GPU at ZeRO-0 to 2")
    why += (f" and {format_bytes(frozen3)} at ZeRO-3 ({n} GPUs"
            + (f"; the {format_bytes(whole)} of quantization constants whole on each" if whole else "") + ")."
            if n > 1 else
            " and the same at ZeRO-3 on 1 GPU (nothing to partition across).")
    if stage == 3:
        why += (" memory_efficient_linear is off: DeepSpeed's default replaces F.linear with a function that saves "
                "every linear's input for backward, the frozen base's too (plain F.linear keeps none of them), "
                "which on a 7B llama adds 5 GB of activations per 4,096-token sequence without checkpointing.")
        if peft.method == "lora":
            ctx.warnings.append(
                f"ZeRO-3 with LoRA: load the base under deepspeed.zero.Init, or every rank first holds the whole "
                f"{format_bytes(peft.frozen_bytes)} base: {ZERO_INIT_HOW[ctx.training.target]}")
            if peft.autocast_off(stage):
                ctx.warnings.append(f"ZeRO-3 with LoRA and --lora-modules-to-save: {ADAPTERS_16BIT}")
        else:
            ctx.warnings.append(
                f"ZeRO-3 with QLoRA: bnb_4bit_quant_storage must be the compute dtype ({ctx.precision}, as "
                "peft.quantization_config says) so DeepSpeed can partition the 4-bit weights; transformers loads a "
                "quantized model without zero.Init (modeling_utils.get_init_context), so each rank first holds the "
                f"whole {format_bytes(peft.frozen_bytes_at(3))} 4-bit base")
        ctx.warnings.append(
            "ZeRO-3 partitions the adapters too: saving them gathers 16-bit weights, so the ds_config sets "
            "stage3_gather_16bit_weights_on_model_save (Accelerate's get_state_dict refuses without it; the HF "
            "Trainer gathers a PEFT model's trainable weights with exclude_frozen_parameters): "
            f"{ADAPTER_SAVE_HOW[ctx.training.target].format(base=format_bytes(peft.frozen_bytes_at(3)))}, not "
            "model.save_pretrained(), which writes each rank's "
            "partitions, empty tensors")
    return None, why


ZERO_INIT_HOW = {
    "trainer": "create TrainingArguments(deepspeed=...) (it keeps the HfDeepSpeedConfig alive) before "
               "from_pretrained, and transformers builds the model inside zero.Init",
    "accelerate": "create the Accelerator (its DeepSpeedPlugin's zero3_init_flag is on for a ZeRO-3 config and keeps "
                  "an HfDeepSpeedConfig alive) before from_pretrained, and transformers builds the model inside "
                  "zero.Init",
    "deepspeed": "call deepspeed.init_distributed() first (zero.Init checks the config's batch against the world "
                 "size it sees: 1 before the process group), then build the model inside `with "
                 "deepspeed.zero.Init(config_dict_or_path=ds_config):` (from_config), or keep a transformers "
                 "HfDeepSpeedConfig(ds_config) alive before from_pretrained, which then builds it so",
}
"""How each target's training script loads a model partitioned, under zero.Init (transformers' get_init_context
enters it when is_deepspeed_zero3_enabled(), which a live HfDeepSpeedConfig of a ZeRO-3 config turns on)."""
QLORA_DEVICE_HOW = {
    "trainer": "create TrainingArguments(deepspeed=...) before from_pretrained (accelerate's PartialState, which it "
               "makes, sets the rank's GPU)",
    "accelerate": "create the Accelerator before from_pretrained (its PartialState sets the rank's GPU)",
    "deepspeed": "call torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) before from_pretrained "
                 "(deepspeed.init_distributed does not, deepspeed.initialize only later)",
}
"""How each target's script puts a rank's 4-bit base on its own GPU (`rule_peft_advice`)."""
ADAPTER_SAVE_HOW = {
    "trainer": "save with trainer.save_model()",
    "accelerate": "save with state_dict = model._zero3_consolidated_16bit_state_dict(exclude_frozen_parameters=True) "
                  "on every rank (model: the engine accelerator.prepare returns; what the HF Trainer calls for a PEFT "
                  "model; accelerator.get_state_dict(model) gathers the whole {base} frozen base too, into the main "
                  "rank's host RAM), then accelerator.unwrap_model(model).save_pretrained(OUTPUT, "
                  "state_dict=state_dict) on the main one",
    "deepspeed": "save with state_dict = engine._zero3_consolidated_16bit_state_dict(exclude_frozen_parameters=True) "
                 "on every rank (what the HF Trainer calls for a PEFT model; engine.save_16bit_model writes a "
                 "pytorch_model.bin of the wrapped model's keys, which PeftModel.from_pretrained does not load), then "
                 "engine.module.save_pretrained(OUTPUT, state_dict=state_dict) on rank 0",
}
"""How each target's script saves ZeRO-3-partitioned adapters gathered."""


RULES: tuple[tuple[str, Rule], ...] = (
    ("forced", rule_forced),
    ("precision", rule_precision),
    ("peft", rule_peft),
    ("batch", rule_batch),
    ("candidates", rule_candidates),
    ("evaluations", rule_evaluate),
    ("chosen", rule_choose),
    ("offload", rule_offload),
    ("micro_batch", rule_micro_batch),
    ("accumulation", rule_accumulation),
    ("buffer_settings", rule_buffers),
    ("host", rule_host),
    ("peft_advice", rule_peft_advice),
)


# ------------------------------------------------------------------------------------------- evaluation helpers

def _evaluate(ctx: Context, stage: int, opt: str, param: str) -> Evaluation:
    """The candidate at its fastest fitting micro-batch, checkpointing and buffer setting.

    Options: the largest micro-batch without and with checkpointing, at HF's auto buffers and at the most frugal
    ones; the step-time model picks. Hot path (every candidate of every plan): the rules above read it in words.
    """
    model, hw = ctx.model, ctx.hardware
    cap = ctx.device_cap(stage, opt, param)
    host = ctx.host_of(stage, opt, param)
    levels = buffer_ladder(model.hidden_size, stage)
    last = len(levels) - 1
    forced = ctx.training.gradient_checkpointing
    best = None  # (tokens/s, level, micro-batch, checkpointing, StepTime)
    at_auto: dict[bool, int] = {}  # the largest micro-batch with HF's auto buffers, per checkpointing
    fastest: dict[bool, tuple[int, StepTime, int]] = {}  # `Evaluation.fastest`
    # `Context.largest_fitting` with a global batch's largest micro-batch apart (it may need no accumulation, so
    # holds no gradients between micro-batches), its batch split made once and each setting's limits looked up once
    search, limit_of, batch = ctx._search, ctx._limit, ctx.batch
    mbs = batch.micro_batches
    largest = mbs[-1]
    alone = None
    if batch.per_gpu_samples == largest and len(mbs) > 1:
        alone, mbs = mbs[-1:], mbs[:-1]
    accumulation = ctx.accumulation_steps(mbs[0])
    split = stage == 3 and ctx.bare_matters
    for level in (0, last) if last else (0,):
        limit = limit_alone = None
        for ck in (False, True) if forced is None else (forced,):
            if split:  # what ZeRO-3 holds after forward depends on checkpointing (`Context.costs`)
                limit = limit_alone = None
            if ck and forced is None and at_auto.get(False) == largest:
                continue  # the largest micro-batch fits without recomputation: checkpointing only adds compute
            if level and at_auto.get(ck) == largest:
                continue  # nor can frugal buffers buy a larger one
            bare = split and not ck
            if alone and search(limit_alone or (limit_alone := limit_of(stage, opt, param, level, 1, bare)), stage,
                                ck, alone) is not None:
                mb = largest
            else:
                mb = search(limit or (limit := limit_of(stage, opt, param, level, accumulation, bare)), stage, ck,
                            mbs)
            if mb is None or (level and at_auto.get(ck, 0) >= mb):
                continue  # frugal buffers that buy no larger micro-batch only slow the step
            most = max(mb, fastest[ck][2]) if ck in fastest else mb
            rung = level
            if not level:
                at_auto[ck] = mb
            else:  # the first rung of the ladder that holds this option is its fastest: it is priced there, as the
                # options it competes with are (priced at the most frugal rung, a faster option lost to a slower one)
                held = 1 if alone and mb == largest else accumulation
                rung = next((i for i in range(1, last)
                             if search(limit_of(stage, opt, param, i, held, bare), stage, ck, (mb,)) is not None), last)
            perf = ctx.step(stage, opt, param, rung, mb, ck)
            fastest[ck] = (mb, perf, most) if ck not in fastest or perf.tokens_per_s > fastest[ck][1].tokens_per_s \
                else (*fastest[ck][:2], most)
            if best is None or perf.tokens_per_s > best[0]:
                best = (perf.tokens_per_s, rung, mb, ck, perf)
    if best is None:
        pick, mb = last, ctx.batch.micro_batches[0]  # nothing fits: report the most frugal setting
        ck = forced if forced is not None else True
        performance = None
    else:
        _, pick, mb, ck, performance = best
    accumulation = ctx.accumulation_steps(mb)
    costs = ctx.costs(stage, opt, param, pick, accumulation, ck)
    if ctx.activation_model is None:  # the analytic figures as they are, no ActivationEstimate to build
        a, transient, forward, loss, head, layer, head_gradient = ctx._analytic_figures(mb, ck, ctx.peft is not None
                                                                                        and stage == 3)
        components, totals = costs.phase_totals_of(a, forward, loss, head, layer, head_gradient)
        activations = a + transient
    else:
        estimate = ctx.activation(mb, ck, stage)
        components, totals = costs.phase_totals(estimate)
        activations = int(estimate.activations) + int(estimate.transient)
    peak = 0 if totals[0] >= totals[1] else 1  # the first of the largest, as max(PHASES, key=...) picks
    if totals[2] > totals[peak]:
        peak = 2
    total = totals[peak]
    gpu_ratio = total / cap if cap else math.inf  # 0: a CPU accelerator's offload alone fills the RAM
    loading = ctx.qlora_load if stage == 3 and ctx.qlora else 0
    if loading > total:
        gpu_ratio = loading / cap if cap else math.inf
    cpu_bytes = host.cpu_bytes if hw.accelerator != "cpu" else ctx.host_need(host, total)  # the call saved: hot path
    cpu_ratio = cpu_bytes / hw.cpu_memory_bytes if hw.cpu_memory_bytes else 0.0
    nvme_ratio = host.nvme_bytes / hw.nvme_bytes if hw.nvme_bytes else 0.0
    why_not = None
    if gpu_ratio > 1 or cpu_ratio > 1 or nvme_ratio > 1:
        why_not = _why_not(ctx, total, host, (gpu_ratio, cpu_ratio, nvme_ratio), loading, cap, cpu_bytes)
    fits = why_not is None
    candidate = Candidate(Setup(stage, opt, param, mb, ck, accumulation), GpuMemory(*components[peak]),
                          cpu_bytes, host.nvme_bytes, fits, why_not, dict(zip(PHASES, totals)), PHASES[peak],
                          performance if fits else None, activations)
    return Evaluation(candidate, levels[pick], max(gpu_ratio, cpu_ratio, nvme_ratio), components, host, pick,
                      fastest)


def _why_not(ctx: Context, total: int, host: HostMemory, ratios: tuple[float, float, float], loading: int = 0,
             cap: int | None = None, cpu_bytes: int | None = None) -> str:
    """Why a candidate does not fit, in words. `cap`: the rank's memory (`Context.device_cap`, the GPU's by
    default); `cpu_bytes`: the CPU RAM per node it needs (`Context.host_need`, `host.cpu_bytes` by default)."""
    hw, problems = ctx.hardware, []
    cap = hw.gpu_memory_bytes if cap is None else cap
    cpu_bytes = host.cpu_bytes if cpu_bytes is None else cpu_bytes
    if loading > hw.gpu_memory_bytes:
        problems.append(f"loads the whole {_fmt(ctx.peft.frozen_bytes_at(3))} 4-bit base onto every GPU before "
                        f"DeepSpeed partitions it ({_fmt(loading)} with the adapters, the quantization's staging and "
                        f"the overhead reserve; transformers loads a quantized model without zero.Init), over the "
                        f"{_fmt(hw.gpu_memory_bytes)} of the GPU")
    elif ratios[0] > 1 and cap <= 0:  # DeepSpeed's CPU accelerator: offload shares the ranks' RAM
        problems.append(f"keeps {_fmt(host.steady_state)} of offloaded states in the node's RAM, over the "
                        f"{_fmt(hw.cpu_memory_bytes)} its ranks share")
    elif ratios[0] > 1 and cap < hw.gpu_memory_bytes:
        problems.append(f"needs {_fmt(total)} per rank, over the {_fmt(cap)} each of the {hw.gpus_per_node} ranks has "
                        f"beside the {_fmt(host.steady_state)} its offload keeps in the same RAM")
    elif ratios[0] > 1:
        problems.append(f"needs {_fmt(total)} per GPU, over the {_fmt(hw.gpu_memory_bytes)} of the GPU")
    # on DeepSpeed's CPU accelerator the rank's memory is its share of that RAM: said once
    if ratios[1] > 1 and not (hw.accelerator == "cpu" and ratios[0] > 1):
        problems.append(f"needs {_fmt(cpu_bytes)} of CPU RAM per node, over the {_fmt(hw.cpu_memory_bytes)} given")
    if ratios[2] > 1:
        problems.append(f"needs {_fmt(host.nvme_bytes)} of NVMe per node, over the {_fmt(hw.nvme_bytes)} given")
    return " and ".join(problems)


def _fmt(n: int) -> str:
    """`format_bytes` for the sizes why_not prints, without its loop: it runs for most candidates of most plans."""
    if 10**9 <= n < 10**15:
        return f"{n / 1e12:.1f} TB" if n >= 10**12 else f"{n / 1e9:.1f} GB"
    return format_bytes(n)


def _round_half_up(x: float) -> int:
    return math.floor(x + 0.5)


def _valid(stage: int, opt: str, param: str, hw: Hardware) -> bool:
    if param != "none" and stage < 3:
        return False
    if opt != "none" and stage == 0:
        return False
    if "nvme" in (opt, param) and (stage < 3 or not hw.nvme_path):
        return False
    return not (param == "nvme" and opt != "nvme")


@functools.cache
def setup_label(stage: int, opt: str, param: str) -> str:
    """A setup's name in reasons; cached: a dozen constant setups, asked for on every plan."""
    text = f"ZeRO-{stage}"
    if opt != "none" and param != "none" and opt == param:
        return text + f" + {opt} offload (optimizer and parameters)"
    if opt != "none":
        text += f" + {opt} optimizer offload"
    if param != "none":
        text += f" + {param} parameter offload"
    return text


def _label_of(e: Evaluation) -> str:
    s = e.candidate.setup
    return setup_label(s.zero_stage, s.offload_optimizer, s.offload_param)

"""The planner's inputs and its result. Plain dataclasses: `plan(model, hardware, training) -> Plan`.

Each input attribute's docstring is its option's meaning: `--help`, templates and the README draw on it.
`None` means "derive me" (the planner chooses and says why).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, field, fields
from typing import Any, TypeVar

from zerokit._dataclass import dataclass
from zerokit.models.spec import ModelSpec

ZERO_STAGES = (0, 1, 2, 3)
OFFLOAD_DEVICES = ("none", "cpu", "nvme")
ATTENTION_KERNELS = ("sdpa", "flash", "eager")
PRECISIONS = ("bf16", "fp16", "fp32")
TARGETS = ("trainer", "accelerate", "deepspeed")
PEFT_METHODS = ("none", "lora", "qlora")

_T = TypeVar("_T")


class _Factory:
    """The default of a field with a default_factory in a `_stored_init` signature, shown as dataclass shows it."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


def _stored_init(cls: type[_T]) -> type[_T]:
    """Give a frozen dataclass an __init__ that stores its fields in the instance dict itself, where the one
    `dataclass` writes calls `object.__setattr__` per field (the class's own refuses): the planner builds several
    of these for every candidate of every plan, and that showed. Same parameters, defaults and annotations, same
    instance; only for classes without __post_init__ whose every field is an __init__ parameter."""
    own = fields(cls)
    if hasattr(cls, "__post_init__") or not all(f.init and not f.kw_only for f in own):
        raise TypeError(f"{cls.__name__}: _stored_init handles plain fields only")
    env: dict[str, Any] = {"_FACTORY": _FACTORY}
    params, lines = [], []
    for f in own:
        if f.default is not MISSING:
            env[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
        elif f.default_factory is not MISSING:
            env[f"_factory_{f.name}"] = f.default_factory
            params.append(f"{f.name}=_FACTORY")
            lines.append(f"    if {f.name} is _FACTORY:\n        {f.name} = _factory_{f.name}()")
        else:
            params.append(f.name)
    lines.append("    fields = self.__dict__")
    lines += [f"    fields[{f.name!r}] = {f.name}" for f in own]
    exec(f"def __init__(self, {', '.join(params)}):\n" + "\n".join(lines), env)  # noqa: S102
    init = env["__init__"]
    generated = cls.__init__
    init.__qualname__, init.__annotations__ = generated.__qualname__, generated.__annotations__
    init.__wrapped__ = generated  # what tests/test_planner.py holds it to
    cls.__init__ = init
    return cls


@dataclass(frozen=True)
class Hardware:
    """The machine a plan is for: its GPUs, their memory, and the host memory and NVMe offload can use."""

    gpu_name: str
    """GPU preset name, or `custom` when only --gpu-memory is given."""
    gpu_memory_bytes: int
    """Memory of one GPU as nvidia-smi reports it; --gpu-memory overrides the preset."""
    bf16: bool
    """Whether the GPU computes in bf16 (V100 and T4 do not)."""
    gpus_per_node: int = 1
    """GPUs in each node."""
    nodes: int = 1
    """Nodes; world size = gpus_per_node x nodes."""
    cpu_memory_bytes: int | None = None
    """Host RAM per node available for offload; None = unknown, offload to CPU is assumed to fit."""
    nvme_path: str | None = None
    """A local NVMe mount for ZeRO-Infinity offload; NVMe candidates are considered only when it is given."""
    nvme_bytes: int | None = None
    """Free space on the NVMe path per node; None = unknown, assumed large enough."""
    accelerator: str = "cuda"
    """What the ranks compute on: cuda (a GPU plan) or cpu (DeepSpeed's CPU accelerator, as the real-run harness
    trains here); it decides which kernels the activation model counts."""

    @property
    def world_size(self) -> int:
        return self.gpus_per_node * self.nodes


@dataclass(frozen=True)
class Training:
    """How the model trains: sequence and batch sizes, what is forced, precision, optimizer and adapters."""

    seq_len: int
    """Tokens per sample."""
    micro_batch: int | None = None
    """Samples per GPU per forward pass; None (`auto`) = the largest that fits, up to 64."""
    global_batch: int | None = None
    """Samples per optimizer step; sets gradient accumulation. One that is no multiple of the GPUs (x a forced
    micro-batch) is rounded to the multiple within 5% that trains fastest, or to the nearest where none is within 5%
    (fewer samples than GPUs: one each), with a warning."""
    global_batch_tokens: int | None = None
    """Tokens per optimizer step (e.g. 1M); sets gradient accumulation. Rounded to whole samples, a multiple of the
    GPUs: the one within 5% that trains fastest."""
    zero_stage: int | None = None
    """Force a ZeRO stage 0-3; None = the fastest that fits."""
    offload_optimizer: str | None = None
    """Force optimizer offload: none, cpu or nvme; None = only when needed."""
    offload_param: str | None = None
    """Force parameter offload (ZeRO-3 only): none, cpu or nvme; None = only when needed."""
    gradient_checkpointing: bool | None = None
    """Force activation (gradient) checkpointing on or off; None = on only when it is needed to fit."""
    attention: str = "sdpa"
    """Attention kernel the training uses: sdpa, flash (no s^2 term) or eager (keeps the score matrices)."""
    precision: str | None = None
    """bf16, fp16 or fp32; None = bf16 where the GPU has it, else fp16 with dynamic loss scaling."""
    target: str = "trainer"
    """Who consumes the config: trainer and accelerate leave what they fill as "auto"; deepspeed resolves all."""
    overhead_bytes: int | None = None
    """Per-GPU reserve for the CUDA context, NCCL and allocator fragmentation (e.g. 2GB; 0 for none); None = the
    documented default."""
    lr: float | None = None
    """Learning rate written into the optimizer when target=deepspeed (others leave it "auto"); default 1e-5, except
    that the HF Trainer keeps its own (--learning_rate, 5e-5) unless --lr is given."""
    weight_decay: float = 0.0
    """Weight decay written into the optimizer when target=deepspeed."""
    warmup_steps: int = 0
    """Warmup steps written into the scheduler when target=deepspeed."""
    total_steps: int | None = None
    """Total training steps for the scheduler when target=deepspeed; None = constant LR after warmup."""
    train_tokens: float | None = None
    """Tokens to train (e.g. 10B), for the predicted time to train; None = not asked."""
    peft: str = "none"
    """Parameter-efficient fine-tuning: none (every weight trains), lora (a frozen 16-bit base with trainable
    adapters) or qlora (the same on a bitsandbytes 4-bit NF4 base)."""
    lora_rank: int = 16
    """LoRA adapter rank r (LoraConfig.r)."""
    lora_targets: str = "all-linear"
    """Which linear layers get adapters: all-linear (every linear layer but the output head, as PEFT means it) or a
    comma list of module names, e.g. q_proj,v_proj."""
    lora_dropout: float | None = None
    """LoRA dropout in [0, 1); None = 0.05, or 0 where the targets include MoE expert or router parameters (PEFT
    refuses any dropout there)."""
    lora_modules_to_save: str = ""
    """PEFT's modules_to_save: a comma list of the input embedding and the output head (e.g. embed_tokens,lm_head),
    each trained in full as a copy beside its frozen original (a fine-tune that adds tokens needs them); empty:
    none."""


@_stored_init
@dataclass(frozen=True)
class Setup:
    """One point in the search space: what the candidates table lists."""

    zero_stage: int
    offload_optimizer: str  # none | cpu | nvme
    offload_param: str  # none | cpu | nvme
    micro_batch_size: int
    gradient_checkpointing: bool
    gradient_accumulation_steps: int = 1
    """Micro-batches per optimizer step: with more than one, gradients stay allocated between them."""


@_stored_init
@dataclass(frozen=True)
class GpuMemory:
    """Per-GPU bytes at the peak of a step; CONTRACT.md defines each field."""

    parameters: int
    gradients: int
    optimizer_states: int
    activations: int
    transient: int
    buffers: int
    overhead: int

    @property
    def total(self) -> int:
        return (self.parameters + self.gradients + self.optimizer_states + self.activations + self.transient
                + self.buffers + self.overhead)

    def as_dict(self) -> dict[str, int]:
        return {
            "parameters": self.parameters, "gradients": self.gradients, "optimizer_states": self.optimizer_states,
            "activations": self.activations, "transient": self.transient, "buffers": self.buffers,
            "overhead": self.overhead, "total": self.total,
        }


@_stored_init
@dataclass(frozen=True)
class Candidate:
    """One setup priced: its per-GPU memory, host and NVMe bytes, whether it fits and how fast it would run."""

    setup: Setup
    memory: GpuMemory
    cpu_bytes_per_node: int
    nvme_bytes_per_node: int
    fits: bool
    why_not: str | None = None
    """When it does not fit: which limit it breaks, in words."""
    phases: Mapping[str, int] = field(default_factory=dict)
    """Per-GPU bytes at the peak of each phase (forward, backward, optimizer_step), overhead included."""
    peak_phase: str = "backward"
    performance: Any = None
    """The predicted step time (zerokit.perf.StepTime) when the candidate fits, else None."""
    micro_batch_activations: int = 0
    """Activations plus transient of one micro-batch (its ActivationEstimate), whichever phase is the peak: at an
    optimizer-step peak `memory` holds no activations and the step's temporaries as transient."""


@_stored_init
@dataclass(frozen=True)
class Decision:
    """The chosen setup and the DeepSpeed settings that go with it: what the ds_config is built from."""

    zero_stage: int
    offload_optimizer: str
    offload_param: str
    micro_batch_size: int
    gradient_accumulation_steps: int
    gradient_checkpointing: bool
    precision: str
    overlap_comm: bool
    reduce_bucket_size: int
    allgather_bucket_size: int
    prefetch_bucket_size: int
    param_persistence_threshold: int
    max_live_parameters: int
    fits: bool


@_stored_init
@dataclass(frozen=True)
class Plan:
    """What `plan()` returns: the decision, its memory, every candidate tried and the reasons, in order."""

    model: ModelSpec
    hardware: Hardware
    training: Training
    decision: Decision
    memory: GpuMemory
    cpu_bytes_per_node: int
    nvme_bytes_per_node: int
    candidates: tuple[Candidate, ...]
    reasons: tuple[str, ...]
    missing: str | None = None
    """When nothing fits: what would make it fit, e.g. 'needs 3 more 80 GB GPUs, or 1.2 TB of CPU RAM'."""
    warnings: tuple[str, ...] = ()
    ds_config: dict[str, Any] = field(default_factory=dict)
    """Empty from the planner: the caller builds it (`zerokit.dsconfig.build_ds_config(plan)`)."""
    phases: Mapping[str, GpuMemory] = field(default_factory=dict)
    """The chosen setup's components at each phase's peak; `memory` is the one at `peak_phase`."""
    peak_phase: str = "backward"
    host_steady_state: int = 0
    """Host bytes per node held while training: offloaded states and pinned buffers."""
    host_load_peak: int = 0
    """Host bytes per node while the ranks load the model."""
    activations_source: str = "modelled"
    """modelled (the family's analytic model), calibrated (measured on a CPU miniature) or generic (llama-like)."""
    performance: Any = None
    """The chosen setup's predicted step time (zerokit.perf.StepTime)."""
    time_to_train_s: float | None = None
    peft: Any = None

    @property
    def train_steps(self) -> int | None:
        """Optimizer steps that train --train-tokens (None without them, or without a step time)."""
        if self.performance is None or self.training.train_tokens is None:
            return None
        return self.performance.train_steps(self.training.train_tokens)

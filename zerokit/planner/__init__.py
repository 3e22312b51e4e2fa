"""The planner: `plan(model, hardware, training) -> Plan` and the dataclasses it reads and returns."""

from typing import Any

from zerokit.models.spec import ModelSpec
from zerokit.planner.types import Candidate, Decision, GpuMemory, Hardware, Plan, Setup, Training


def plan(model: ModelSpec, hardware: Hardware, training: Training, *, activations: Any = None,
         activations_source: str | None = None, machine: Any = None, adapters_hint: bool = False) -> Plan:
    """See `zerokit.planner.engine.plan` (the keywords too: a calibrated activation model, the machine a probe
    profile describes, LoRA and QLoRA planned where full fine-tuning fits nowhere); imported on first call so
    `from zerokit.planner import Hardware` stays cheap (and `zerokit.dsconfig`, which the engine imports, can import
    the types without a cycle)."""
    from zerokit.planner.engine import plan as _plan

    return _plan(model, hardware, training, activations=activations, activations_source=activations_source,
                 machine=machine, adapters_hint=adapters_hint)


__all__ = ["Candidate", "Decision", "GpuMemory", "Hardware", "ModelSpec", "Plan", "Setup", "Training", "plan"]

"""The planner: `plan(model, hardware, training) -> Plan` and the dataclasses it reads and returns."""

from zerokit.models.spec import ModelSpec
from zerokit.planner.types import Candidate, Decision, GpuMemory, Hardware, Plan, Setup, Training


def plan(model: ModelSpec, hardware: Hardware, training: Training) -> Plan:
    """See `zerokit.planner.engine.plan`; imported on first call so `from zerokit.planner import Hardware` stays
    cheap (and `zerokit.dsconfig`, which the engine imports, can import the types without a cycle)."""
    from zerokit.planner.engine import plan as _plan

    return _plan(model, hardware, training)


__all__ = ["Candidate", "Decision", "GpuMemory", "Hardware", "ModelSpec", "Plan", "Setup", "Training", "plan"]

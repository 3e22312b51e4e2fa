"""The planner: `plan(model, hardware, training) -> Plan` and the dataclasses it reads and returns."""

from zerokit.planner.types import Candidate, Decision, GpuMemory, Hardware, Plan, Setup, Training


def plan(model, hardware, training):
    from zerokit.planner.plan import plan as _plan

    return _plan(model, hardware, training)


__all__ = ["Candidate", "Decision", "GpuMemory", "Hardware", "Plan", "Setup", "Training", "plan"]

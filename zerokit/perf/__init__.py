"""Step time: how fast a setup trains. Pure: imports neither torch nor deepspeed (`zerokit probe` measures lazily).

    perf = build_machine(gpu="h100-80gb", inter_node_bandwidth="400Gbps")     # or hardware_profile="profile.json"
    t = step_time(spec.config, perf, parameters=spec.parameters, seq_len=4096, micro_batch=1, grad_accum=8,
                  gpus_per_node=8, nodes=2, zero_stage=3, gradient_checkpointing=True)
    t.step_time_s, t.tokens_per_s, t.mfu, t.time_to_train_s(10e9)
"""

from zerokit.perf.devices import DEVICE_FIGURES, DeviceFigures
from zerokit.perf.flops import ModelFlops, model_flops
from zerokit.perf.machine import (
                                  MachinePerf,
                                  build_machine,
                                  load_profile,
                                  machine_from_preset,
                                  parse_bandwidth,
                                  profile_from_json,
                                  profile_to_json,
                                  with_overrides,
)
from zerokit.perf.model import StepTime, step_time, time_to_train_s

__all__ = ["DEVICE_FIGURES", "DeviceFigures", "MachinePerf", "ModelFlops", "StepTime", "build_machine",
           "load_profile", "machine_from_preset", "model_flops", "parse_bandwidth", "profile_from_json",
           "profile_to_json", "step_time", "time_to_train_s", "with_overrides"]

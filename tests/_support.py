"""Helpers several test modules share (imported as `_support`: pytest puts tests/ on sys.path)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent

LEAVE_WITHOUT_DESTRUCTORS = """
# the process group is gone; leave without C++ static destructors, which on the CPU accelerator occasionally abort
# a gloo rank at exit ("terminate called without an active exception", -6), as the probe's ranks and
# examples/train_hf.py do
import os as _os, sys as _sys
_sys.stdout.flush(); _sys.stderr.flush()
_os._exit(0)
"""
"""What a rank script that tests start ends with, once it has destroyed its process group."""


def benchmark(script: str, name: str | None = None, register: bool = True) -> ModuleType:
    """`benchmarks/<script>.py` imported as a module `name` (default: the script's), for the tests that check its
    golden data; `register` puts it in sys.modules first, where its dataclasses look for their module."""
    spec = importlib.util.spec_from_file_location(name or script, ROOT / "benchmarks" / f"{script}.py")
    module = importlib.util.module_from_spec(spec)
    if register:
        sys.modules.setdefault(name or script, module)
    spec.loader.exec_module(module)
    return module


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def one_rank_gloo_group() -> Iterator[object]:
    """deepspeed with a one-process gloo group (what DeepSpeedConfig and deepspeed.initialize ask for), torn down
    at the end with the environment restored, so later test modules see the one they started with."""
    import deepspeed
    import torch

    if torch.distributed.is_initialized():
        yield deepspeed
        return
    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port())}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        deepspeed.init_distributed(dist_backend="gloo", verbose=False)
        yield deepspeed
    finally:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class DataParallelMpu:
    """DeepSpeed's mpu interface, reduced to what DeepSpeedConfig reads: the data-parallel world size."""

    def __init__(self, world_size: int):
        self.world_size = world_size

    def get_data_parallel_world_size(self) -> int:
        return self.world_size


def pids_with(marker: str) -> list[int]:
    """Live processes whose argv holds the marker (read from /proc: ps truncates long command lines)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != "Z":
            pids.append(int(entry.name))
    return pids

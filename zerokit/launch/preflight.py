"""The checks `zerokit launch` runs before starting anything, as data: each check is a small function in an
ordered table that returns a `Check(name, ok, detail, fix)` (or None where it does not apply).

Probing the machine (imports, op builders, nvidia-smi, statvfs, sockets, ssh) lives in `probe_*` functions;
the checks turn probed facts into verdicts. torch and deepspeed are imported inside the probes only, so a
missing install is reported as a failed check rather than a traceback. DeepSpeed's own APIs answer where it
has one: the accelerator's op builders (`create_op_builder(...).is_compatible()`), `installed_ops` from
`deepspeed.git_version_info`, and torch's `is_ninja_available` (what `ds_report` prints, without the text).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import shlex
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, field
from pathlib import Path
from typing import Any

from zerokit._dataclass import dataclass
from zerokit.errors import BadInput, printable
from zerokit.launch.hostfile import MAX_SLOTS
from zerokit.perf.machine import oversubscribed
from zerokit.units import MAX_SIZE, format_bytes

SHM_MIN_BYTES = 512 * 2**20
"""DeepSpeed's env_report warns below this /dev/shm size (docker's default is 64 MB)."""
SHM_CPU_RANK_BYTES = 69_206_024
"""The shared-memory allreduce workspace each rank on DeepSpeed's CPU accelerator maps in /dev/shm
(ops/csrc/cpu/comm/shm.cpp: two states, 2 x 1 MiB and 2 x 32 MiB of buffers, as the files measure)."""
SSH_TIMEOUT_S = 5
LAUNCHER_BINARIES = {
    # What DeepSpeed's multinode_runner checks in backend_exists(), plus the program it then starts.
    "pdsh": ("pdsh",),
    "openmpi": ("ompi_info", "mpirun"),
    "mvapich": ("mpiname", "mpirun"),
    "slurm": ("sinfo", "srun"),
    "mpich": ("mpirun",),
    "impi": ("mpirun",),
}
LAUNCHER_INSTALL = {
    "pdsh": "apt-get install pdsh (on every node)",
    "openmpi": "apt-get install openmpi-bin libopenmpi-dev",
    "mvapich": "install MVAPICH2 (mvapich.cse.ohio-state.edu) and put mpiname/mpirun on PATH",
    "slurm": "run from a SLURM login node (sinfo and srun on PATH)",
    "mpich": "apt-get install mpich",
    "impi": "install Intel MPI and source its setvars.sh",
}


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


class NotChecked(Check):
    """A check the preflight could not make from this machine (no rank of the job runs here, ssh could not ask):
    it fails nothing (ok), and is shown apart from a pass (`format_text`'s mark, `as_json`'s "checked": false)."""


@dataclass(frozen=True)
class Needs:
    """What the config (and, when given, the plan) asks of this machine."""

    cpu_adam: bool = False
    """The optimizer runs on the CPU (offload_optimizer to cpu or nvme): op `cpu_optimizer_op` (cpu_adam for Adam)."""
    cpu_optimizer_op: str = "cpu_adam"
    """The op DeepSpeed builds for the offloaded optimizer (engine._configure_basic_optimizer): DeepSpeedCPUAdam
    needs cpu_adam, DeepSpeedCPULion cpu_lion, DeepSpeedCPUAdagrad cpu_adagrad."""
    dtypes: tuple[str, ...] = ()
    """Half types the config enables ("fp16", "bf16"): DeepSpeed's _do_sanity_check refuses one the device lacks."""
    async_io: bool = False
    """Something is offloaded to NVMe: op async_io, which needs libaio."""
    nvme_paths: tuple[str, ...] = ()
    nvme_missing: tuple[str, ...] = ()
    """Offload blocks that go to NVMe without an nvme_path (DeepSpeed fails at initialize, lint's ZK303)."""
    nvme_bytes: int | None = None
    """Free space the plan needs on the NVMe path, per node."""
    cpu_bytes: int | None = None
    """Host RAM the plan needs per node."""
    gpu_bytes: int | None = None
    """Per-GPU memory the plan needs at the peak of a step."""


RUNNER_EXPORTS = ("MLFLOW", "PYTHON", "MV2", "UCX", "NCCL")
"""The prefixes of the variables DeepSpeed's runner exports to the nodes: runner.EXPORT_ENVS and the CUDA
accelerator's `export_envs` (the CPU accelerator adds none)."""
FRESH_SHELL_LAUNCHERS = frozenset({"pdsh", "openmpi"})
"""Launchers that start the ranks in a fresh shell on each node (ssh, mpirun without -x for the rest); MPICH's and
Intel MPI's hydra and slurm's srun --export=ALL hand this environment on."""


@dataclass(frozen=True)
class Target:
    """What the checks check against."""

    needs: Needs = field(default_factory=Needs)
    gpus_per_node: int | None = None
    hostfile: str | None = None
    hosts: dict[str, int] = field(default_factory=dict)
    """The job's hosts when it spans several nodes (from --hostfile or --hosts)."""
    launcher: str = "pdsh"
    master_port: int = 29500
    no_ssh: bool = False
    """Each node starts its own ranks (launch --no-ssh): no launcher binary, no ssh between nodes."""
    node_rank: int | None = None
    master_addr: str | None = None
    ssh_port: int | None = None
    """The port the runner's ssh uses (launch --ssh-port), which the preflight's ssh uses too; None: ssh's own."""
    env: dict[str, str] = field(default_factory=dict)
    """Variables the ranks get on top of this environment (launch --env)."""
    config: dict[str, Any] = field(default_factory=dict)
    """The ds_config as read (the batch-size check runs lint's rule on it)."""
    config_file: str | None = None
    """The --config path; None where the job is given no config (then `config` is empty and compared with nothing)."""
    document: Any = None
    """The config's lint Document as read (`read_config_document`), which `config` is the data of; None without one."""
    plan: dict[str, Any] | None = None
    """`zerokit plan --format json` output (--plan) as read: the decision the job and the config are held to."""
    bind_cores_to_rank: bool = False
    """launch --bind-cores-to-rank: each local rank under numactl on its own cores (DeepSpeed's launch.py)."""
    bind_core_list: str | None = None
    """launch --bind-core-list: the cores shared out instead of all physical ones."""
    remote: bool = False
    """The runner reaches the hosts through ssh and --launcher (`runner.LaunchSpec.remote_shell`), even where the
    filters leave it only this machine: a hostfile of localhost and node2 with --exclude node2 still takes DeepSpeed's
    multi-node path (its ssh check, pdsh), which launch runs on one node only when the hostfile names this machine
    alone."""
    script: str | None = None
    """The training script as the runner passes it (launch's SCRIPT: absolute, or relative to the working directory,
    where each node's launcher runs it); None for `zerokit preflight`, which is given none."""
    script_args: tuple[str, ...] = ()
    """The script's arguments as the runner passes them (`runner.script_argv`, with `--deepspeed CONFIG` added): the
    config files the ranks read on every node."""
    python: str | None = None
    """The interpreter DeepSpeed's runner runs under (`runner.runner_python`), whose path its backends start on every
    node; None: that of the runner beside this Python."""
    cwd: str | None = None
    """The working directory the runner starts in, which pdsh's command cds to and mpirun's ranks start in on every
    node; None: this process's."""

    @property
    def world_size(self) -> int | None:
        """Ranks in the job: the hosts' slots (after --nodes/--include/--exclude), else --gpus-per-node on one node;
        None where DeepSpeed counts them itself (every device of this host)."""
        return sum(self.hosts.values()) if self.hosts else self.gpus_per_node

    @property
    def multi_node(self) -> bool:
        from zerokit.launch.runner import is_this_host  # here, as parse_resource_filter is: the runner module

        # this machine by any of its names runs without a hostfile, so without ssh (`zerokit launch`'s local_only)
        return self.remote or len(self.hosts) > 1 or any(not is_this_host(h) for h in self.hosts)

    @property
    def hosts_rendezvous(self) -> bool:
        """Whether rank 0's rendezvous (TCPStore on the master port) runs on this host: with --no-ssh on node 0; on
        many nodes where this host is the first of the job's (DeepSpeed's runner starts rank 0 there); on one node."""
        from zerokit.launch.runner import is_this_machine

        if self.no_ssh:
            return self.node_rank == 0
        return not self.multi_node or is_this_machine(next(iter(self.hosts)))

    @functools.cached_property
    def rank_env(self) -> dict[str, str]:
        """The variables the job's ranks on this machine start with: this environment, --env on top. Where the
        runner starts them through a fresh shell (pdsh's ssh, openmpi's mpirun), only what DeepSpeed's runner
        exports reaches them: its prefixes' variables (NCCL..., PYTHON...), the user's .deepspeed_env and --env;
        an OMP_NUM_THREADS of this shell does not."""
        if self.no_ssh or not self.multi_node or self.launcher not in FRESH_SHELL_LAUNCHERS:
            return {**os.environ, **self.env}
        from zerokit.launch.runner import users_deepspeed_env

        try:
            users = users_deepspeed_env()
        except BadInput:  # launch refuses such a file before its preflight; here none of it is counted
            users = {}
        exported = {k: v for k, v in os.environ.items() if k.startswith(RUNNER_EXPORTS)}
        return {**exported, **users, **self.env}

    @functools.cached_property
    def runs_here(self) -> bool:
        """Whether ranks of the job run on this machine: one node, --no-ssh (each node starts its own), or a host of
        the job that is this machine by name or address. Where none does (a login node that starts a job on its
        GPU nodes), this machine's devices, accelerator, RAM and disks are not the job's: `remote_only` says so."""
        from zerokit.launch.runner import is_this_machine

        return self.no_ssh or not self.hosts or any(is_this_machine(h) for h in self.hosts)


# ---------------------------------------------------------------- pure: what a config or plan needs

def needs_from_config(config: dict[str, Any], plan: dict[str, Any] | None = None) -> Needs:
    """Ops and paths the ds_config needs; sizes come from `zerokit plan --format json` output when given. Only what
    has the right type is read: the config's own mistakes are lint's to report."""
    zero = _dict(config.get("zero_optimization"))
    devices, paths, missing = [], [], []
    for key in ("offload_optimizer", "offload_param"):
        block = _dict(zero.get(key))
        device = block.get("device", "none")
        devices.append((key, device))
        if device == "nvme":
            path = block.get("nvme_path")
            if isinstance(path, str) and path.strip() and path != "none":
                paths.append(path)
            else:
                missing.append(f"zero_optimization.{key}")
    optimizer_device = dict(devices)["offload_optimizer"]
    cpu_adam = optimizer_device in ("cpu", "nvme") or zero.get("cpu_offload") is True
    optimizer = _dict(config.get("optimizer")).get("type")
    kind = optimizer.lower() if isinstance(optimizer, str) else ""  # DeepSpeedConfig lowercases its own names
    return Needs(
        cpu_adam=cpu_adam,
        cpu_optimizer_op=CPU_OPTIMIZER_OPS.get(kind, CPU_OPTIMIZER_OPS["adam"])[0],
        dtypes=config_dtypes(config),
        async_io=any(d == "nvme" for _, d in devices),
        nvme_paths=tuple(dict.fromkeys(paths)),
        nvme_missing=tuple(missing),
        nvme_bytes=_plan_size(plan, "memory", "nvme", "total"),
        cpu_bytes=_plan_size(plan, "memory", "per_node_cpu", "total"),
        gpu_bytes=_plan_size(plan, "memory", "per_gpu", "total"),
    )


CPU_OPTIMIZER_OPS = {
    # optimizer.type (lowercased) -> (op, its builder): what DeepSpeed's engine builds when zero_use_cpu_optimizer()
    "adam": ("cpu_adam", "CPUAdamBuilder"),
    "lion": ("cpu_lion", "CPULionBuilder"),
    "adagrad": ("cpu_adagrad", "CPUAdagradBuilder"),
}


def config_dtypes(config: dict[str, Any]) -> tuple[str, ...]:
    """"fp16" and "bf16" where the config enables them, as DeepSpeedConfig reads it (bf16, else the old name
    bfloat16). "auto" (the HF Trainer fills it from its own arguments) enables nothing here."""
    from zerokit.lint.rules import _bf16_key, _is_true

    fp16 = _is_true(_dict(config.get("fp16")).get("enabled"))
    bf16 = _is_true(_dict(config.get(_bf16_key(config))).get("enabled"))
    return tuple(name for name, on in (("fp16", fp16), ("bf16", bf16)) if on)


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _plan_size(plan: dict[str, Any] | None, *keys: str) -> int | None:
    """A byte count from the plan JSON; None where absent or zero. Anything but a whole number is bad input."""
    node: Any = plan or {}
    for key in keys:
        node = _dict(node).get(key)
    if node is None or node == 0:
        return None
    if isinstance(node, bool) or not isinstance(node, int) or node < 0:
        raise BadInput(f"--plan: {'.'.join(keys)} must be a byte count, got {str(node)[:40]!r}; pass the output of "
                       "zerokit plan --format json")
    return node


# ---------------------------------------------------------------- probes: the only code that looks at the machine

def probe_import(module: str) -> tuple[str | None, str]:
    """(version, "") or (None, why the import failed)."""
    try:
        mod = __import__(module)
    except Exception as e:  # noqa: BLE001 -- an import can fail with anything: a missing .so, a CUDA mismatch
        return None, f"{type(e).__name__}: {e}".splitlines()[0]
    return str(getattr(mod, "__version__", "?")), ""


def check_filter_devices(spec: Any) -> Check | None:
    """A one-node job's --include/--exclude against the devices DeepSpeed counts (`runner.check_include_devices`),
    as a check of both preflight's and launch's (`run_job_checks`): `spec` is the job's `runner.LaunchSpec`. None where
    there is no filter, the job spans nodes, or the accelerator was not imported (the imports check failed)."""
    if (spec.include is None and spec.exclude is None) or spec.multi_node:
        return None
    count = accelerator_device_count()
    if count is None:
        return None
    from zerokit.launch.runner import check_include_devices

    try:
        check_include_devices(spec, count)
    except BadInput as e:
        problem, _, fix = str(e).partition("; ")
        return Check("include", False, problem + " (DeepSpeed's runner refuses it)", fix)
    return None


def probe_device_count() -> int | None:
    """The devices DeepSpeed's runner counts on this machine without --num_gpus: the GPUs CUDA_VISIBLE_DEVICES
    leaves, else its accelerator's count (the CPU accelerator: NUMA nodes with cores); None where neither is known."""
    gpus = probe_gpus()
    if gpus:
        return len(visible_gpus(gpus, os.environ.get("CUDA_VISIBLE_DEVICES")))
    try:
        return accelerator_device_count() or None
    except Exception:  # noqa: BLE001 - an accelerator that cannot count is the accelerator check's to report
        return None


def accelerator_device_count() -> int | None:
    """The devices DeepSpeed's accelerator counts (what its runner reads --include/--exclude against), where the
    preflight has imported it; None where it has not (the imports check failed), so that nothing adds the import."""
    if "deepspeed.accelerator" not in sys.modules:
        return None
    return int(sys.modules["deepspeed.accelerator"].get_accelerator().device_count())


def probe_accelerator() -> str:
    from deepspeed.accelerator import get_accelerator

    return get_accelerator().device_name()


def probe_comm_backend() -> str:
    """The collective backend DeepSpeed's accelerator picks (its CPU accelerator: ccl where
    oneccl_bindings_for_pytorch imports, else gloo)."""
    from deepspeed.accelerator import get_accelerator

    return get_accelerator().communication_backend_name()


DTYPES_CODE = ("from deepspeed.accelerator import get_accelerator as g; a = g(); "
               "print(int(bool(a.is_fp16_supported())), int(bool(a.is_bf16_supported())))")


def probe_dtypes(env: dict[str, str] | None = None) -> dict[str, bool]:
    """{"fp16": supported, "bf16": supported} as DeepSpeed's accelerator answers (engine._do_sanity_check asks the
    same). On DeepSpeed's CPU accelerator it is asked here (deepspeed is imported already); on a GPU accelerator in a
    child process with the ranks' environment (DS_ALLOW_DEPRECATED_FP16, CUDA_VISIBLE_DEVICES), so that this
    process, which stays up while the job runs, holds no CUDA context on a GPU the ranks use."""
    if probe_accelerator() == "cpu" and not env:
        from deepspeed.accelerator import get_accelerator

        accelerator = get_accelerator()
        return {"fp16": bool(accelerator.is_fp16_supported()), "bf16": bool(accelerator.is_bf16_supported())}
    r = subprocess.run([sys.executable, "-c", DTYPES_CODE], check=True, capture_output=True, text=True, timeout=300,
                       stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})
    fp16, bf16 = r.stdout.split()[-2:]
    return {"fp16": fp16 == "1", "bf16": bf16 == "1"}


def probe_threads() -> tuple[int, int]:
    """(OpenMP threads torch runs in a process with this environment, CPU cores this process may use)."""
    import torch

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return torch.get_num_threads(), cores


def probe_gpus() -> list[tuple[str, int]] | None:
    """[(name, memory bytes)] from nvidia-smi; None where there is no nvidia-smi."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.strip().splitlines():
        name, _, mib = line.rpartition(",")
        if mib.strip().isdigit():
            gpus.append((name.strip(), int(mib.strip()) * 2**20))
    return gpus


def probe_cuda_versions() -> tuple[str | None, str | None]:
    """(torch's CUDA version, nvcc's CUDA version); None where absent."""
    import torch
    from torch.utils.cpp_extension import CUDA_HOME

    nvcc = Path(CUDA_HOME or "/usr/local/cuda") / "bin" / "nvcc"
    nvcc_version = None
    if nvcc.exists():
        try:
            out = subprocess.run([str(nvcc), "-V"], check=False, capture_output=True, text=True, timeout=30).stdout
            release = out.split("release ", 1)[1].split(",", 1)[0] if "release " in out else None
            nvcc_version = release
        except (OSError, subprocess.SubprocessError):
            pass
    return torch.version.cuda, nvcc_version


def probe_op(builder_name: str) -> tuple[bool, bool, bool, str | None]:
    """(prebuilt into this DeepSpeed install for this accelerator, JIT-compatible here, already in the JIT cache,
    why DeepSpeed would refuse to load the prebuilt one: `prebuilt_mismatch`) for an op builder."""
    import torch
    from deepspeed.accelerator import get_accelerator
    from deepspeed.git_version_info import accelerator_name, installed_ops, torch_info
    from deepspeed.ops.op_builder.builder import CUDAOpBuilder

    accelerator = get_accelerator()
    builder = accelerator.create_op_builder(builder_name)
    if builder is None:
        return False, False, False, None
    # OpBuilder.load takes the prebuilt op only where it was built for this accelerator; else it JIT-builds one
    prebuilt = bool(installed_ops.get(builder.NAME)) and accelerator_name == accelerator._name
    mismatch = None
    if prebuilt:
        on_cuda = torch.cuda.is_available() and isinstance(builder, CUDAOpBuilder)
        mismatch = prebuilt_mismatch(torch_info, torch.__version__, torch.version.cuda if on_cuda else None,
                                     getattr(torch.version, "hip", None) if on_cuda else None)
    return prebuilt, bool(builder.is_compatible(verbose=False)), _jit_cached(builder.NAME), mismatch


def prebuilt_mismatch(torch_info: dict, torch_version: str, cuda: str | None, hip: str | None) -> str | None:
    """Why DeepSpeed refuses to load a prebuilt op here, or None: OpBuilder.load raises "PyTorch version mismatch"
    when the torch it was built with differs in major.minor, and on a GPU "CUDA (HIP) version mismatch" when
    torch's CUDA (HIP) does (deepspeed/ops/op_builder/builder.py validate_torch_version, validate_torch_op_version).
    `cuda`/`hip`: torch's, given only where DeepSpeed compares them (a CUDA op on an available GPU)."""
    def minor(version: str) -> str:
        return ".".join(str(version).split("+")[0].split(".")[:2])

    runtime = ".".join(torch_version.split(".")[:2])  # as DeepSpeed cuts it
    if str(torch_info.get("version")) != runtime:
        return f"built with torch {torch_info.get('version')}, this torch is {runtime}"
    if hip:
        if str(torch_info.get("hip_version")) != minor(hip):
            return f"built for HIP {torch_info.get('hip_version')}, this torch's is {minor(hip)}"
    elif cuda and str(torch_info.get("cuda_version")) != minor(cuda):
        return f"built for CUDA {torch_info.get('cuda_version')}, this torch's is {minor(cuda)}"
    return None


def _jit_cached(name: str) -> bool:
    """Whether torch's JIT cache (TORCH_EXTENSIONS_DIR, ~/.cache/torch_extensions) already holds the built op."""
    try:
        from torch.utils.cpp_extension import _get_build_directory

        return Path(_get_build_directory(name, verbose=False), f"{name}.so").exists()
    except Exception:  # noqa: BLE001 -- a private torch helper: absence only loses the hint
        return False


def probe_extension_locks() -> list[tuple[str, float]]:
    """(path, age in seconds) of every `lock` file in torch's JIT extension cache.

    torch holds `<cache>/<op>/lock` while it builds an op; a build killed mid-way leaves it behind, and every
    later rank then waits on it forever ("Loading extension module ..." never returns).
    """
    import time

    try:
        from torch.utils.cpp_extension import get_default_build_root
    except ImportError:  # torch missing: the imports check already says so
        return []
    # torch builds in $TORCH_EXTENSIONS_DIR/<op> when that is set, else in <default root>/py311_cpu/<op>.
    custom = os.environ.get("TORCH_EXTENSIONS_DIR")
    root, pattern = (Path(custom), "*/lock") if custom else (Path(get_default_build_root()), "*/*/lock")
    now = time.time()
    found = []
    for p in root.glob(pattern):
        with contextlib.suppress(OSError):
            if p.is_file():
                found.append((str(p), now - p.stat().st_mtime))
    return sorted(found)


def probe_building(build_dir: str) -> bool:
    """Whether a process is building the op in `build_dir` now: torch runs ninja, and ninja the compiler, with the
    op's build directory as working directory."""
    target = os.path.realpath(build_dir)
    for proc in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            if os.readlink(proc / "cwd") == target:
                return True
    return False


def probe_ninja() -> bool:
    from torch.utils.cpp_extension import is_ninja_available

    return is_ninja_available()


def probe_libaio_header() -> bool:
    return any(Path(d, "libaio.h").exists() for d in ("/usr/include", "/usr/local/include"))


def probe_path(path: str) -> tuple[str, bool, int | None]:
    """(what is there: "directory", "missing" or e.g. "a regular file", writable, free bytes) of an NVMe path."""
    import stat

    from zerokit.fileio import kind

    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "missing", False, None
    if not stat.S_ISDIR(mode):
        return ("a regular file" if stat.S_ISREG(mode) else kind(mode)), False, None
    st = os.statvfs(path)
    return "directory", os.access(path, os.W_OK | os.X_OK), st.f_bavail * st.f_frsize


def probe_shm() -> tuple[int, int] | None:
    """(size, bytes a new file can still take) of /dev/shm; None where it is not mounted."""
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def probe_ram() -> tuple[int, int]:
    """(total, available) host RAM in bytes."""
    info = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, _, value = line.partition(":")
            info[key] = int(value.split()[0]) * 1024
    total = info.get("MemTotal") or os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return total, info.get("MemAvailable", total)


def probe_port_free(port: int) -> bool:
    """Whether the rendezvous could listen on `port`, tried the way torch's TCPStore binds it: on every address
    (IPv6 dual-stack where the host has IPv6, else IPv4) with SO_REUSEADDR. So a port held only by connections of a
    finished job (TIME_WAIT, for about a minute) is free, as it is for torch; a port another process listens on
    is not."""
    for family, address in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            s = socket.socket(family, socket.SOCK_STREAM)
        except OSError:  # no IPv6 on this host: torch falls back to IPv4 too
            continue
        with s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                with contextlib.suppress(OSError):
                    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            try:
                s.bind((address, port))
                s.listen(1)
            except OSError as e:
                if family == socket.AF_INET6 and e.errno == errno.EADDRNOTAVAIL:
                    continue  # IPv6 present but unusable: try IPv4, as torch does
                return False
            return True
    return False


SSH_PARALLEL = 64
"""ssh probes at once: a 4,096-node hostfile of unreachable hosts takes 64 timeouts, not 256."""
SSH_FAILURES_SHOWN = 5
"""Failed hosts the ssh check names; the rest are counted (a thousand names make no useful line)."""


def probe_ssh(host: str, ssh_port: int | None = None) -> tuple[bool, str]:
    """Whether DeepSpeed's own check, `ssh -o PasswordAuthentication=no HOST hostname` (launcher/runner.py), succeeds,
    within a short timeout and without any prompt (BatchMode): an unknown host key fails here, as it stops
    DeepSpeed's check at a prompt, and nothing is written to ~/.ssh/known_hosts. The user's ssh config applies, as it
    does to DeepSpeed's ssh and pdsh's; `ssh_port`, DeepSpeed's --ssh_port, goes in as its `-p`."""
    r = _ssh(host, "hostname", ssh_port)
    if isinstance(r, str):
        return False, r
    last = (r.stderr.strip().splitlines() or [""])[-1]
    return r.returncode == 0, last


def probe_host_address(host: str, ssh_port: int | None = None) -> tuple[str | None, str]:
    """(the first address `ssh HOST hostname -I` prints, or None; why none): how DeepSpeed's runner finds the master
    address when it is given none (launcher/runner.py: `result.decode('utf-8').split()[0]`), which fails where that
    `hostname` has no -I (busybox, BSD) or the host prints no address."""
    r = _ssh(host, "hostname -I", ssh_port)
    if isinstance(r, str):
        return None, r
    words = r.stdout.split()
    if r.returncode != 0 or not words:
        return None, ((r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1][:120] if r.returncode
                      else "it printed no address")
    return words[0], ""


def _ssh(host: str, command: str, ssh_port: int | None = None) -> subprocess.CompletedProcess | str:
    """`command` run on `host` the way DeepSpeed's runner checks a host (`ssh -o PasswordAuthentication=no`, with
    `-p PORT` where it is given --ssh_port), in batch mode (no prompt) within a short timeout; or why ssh could not
    run it."""
    try:
        return subprocess.run(_ssh_argv(host, command, ssh_port), check=False, capture_output=True, text=True,
                              timeout=SSH_TIMEOUT_S + 5, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return "ssh is not installed"
    except subprocess.TimeoutExpired:
        return "timed out"


REMOTE_ENV_TIMEOUT_S = 60
"""How long the remote-env check waits for one host: ssh's connection, then importing torch and DeepSpeed there (from
a network filesystem, seconds). The hosts are asked SSH_PARALLEL at once, so 64 nodes take this long at most."""
REMOTE_ENV_MARK = "zerokit-remote-env"
"""What starts each line of the remote-env probe's answer: a login shell's banner or a script's chatter is not it."""
REMOTE_ENV_SH = (
    'm=zerokit-remote-env; echo "$m start"; '
    'if cd -- "$1" 2>/dev/null; then echo "$m cwd ok"; else echo "$m cwd missing"; fi; '
    'if [ -f "$2" ] && [ -x "$2" ]; then '
    'PYTHONPATH="$3" "$2" -c "$4" "$m" </dev/null 2>/dev/null || echo "$m exit $?"; '
    'else echo "$m python missing"; fi; '
    'shift 4; i=0; for p in "$@"; do i=$((i + 1)); '
    'if [ -f "$p" ]; then echo "$m file $i ok"; else echo "$m file $i missing"; fi; done; echo "$m end"')
"""Run on a node by `sh -c` with the working directory, the interpreter, the ranks' PYTHONPATH, `REMOTE_ENV_IMPORT`
and the files as its arguments (so no path is ever parsed by a shell, whatever it holds): whether it can cd to the
directory, whether the interpreter is an executable file, what importing torch and DeepSpeed with it gives (there,
with that PYTHONPATH, as the ranks import them), and whether each file is one. One line, and no single quote: a
csh login shell reads it as sh's would, inside the quotes ssh's command gets."""
REMOTE_ENV_IMPORT = (
    'import sys; m = sys.argv[1]; '
    'sys.excepthook = lambda kind, e, tb: print(m, "import", (kind.__name__ + ": " + str(e)).splitlines()[0]); '
    'import torch, deepspeed; print(m, "versions", deepspeed.__version__, torch.__version__)')
"""The interpreter's part of `REMOTE_ENV_SH`: `MARK versions DEEPSPEED TORCH`, or `MARK import` and the error."""


@dataclass(frozen=True)
class RemoteEnv:
    """What one node has of what DeepSpeed's runner starts there (`probe_remote_env`); None: not found out."""

    cwd: bool | None = None
    python: bool | None = None
    """Whether the interpreter's path is an executable file there."""
    versions: tuple[str, str] | None = None
    """(deepspeed, torch) as imported there."""
    import_error: str | None = None
    files: tuple[bool | None, ...] = ()
    """Whether each file asked about is one there, in order."""
    why: str = ""
    """Why the host could not be asked (ssh failed, timed out, gave no answer); '' where it answered."""


def probe_remote_env(host: str, cwd: str, python: str, pythonpath: str, files: list[str],
                     ssh_port: int | None = None, timeout: float | None = None) -> RemoteEnv:
    """`REMOTE_ENV_SH` run on `host` in one ssh call, as `probe_ssh` asks (BatchMode, no prompt, `ssh_port`), within
    `timeout` seconds (REMOTE_ENV_TIMEOUT_S)."""
    timeout = REMOTE_ENV_TIMEOUT_S if timeout is None else timeout
    command = shlex.join(["sh", "-c", REMOTE_ENV_SH, "zerokit", cwd, python, pythonpath, REMOTE_ENV_IMPORT, *files])
    try:
        r = subprocess.run(_ssh_argv(host, command, ssh_port), check=False, capture_output=True, text=True,
                           timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return RemoteEnv(why="ssh is not installed")
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        answered = parse_remote_env(out, len(files))
        return RemoteEnv(why=f"no answer in {timeout:g} s" if answered is None else
                         f"ssh connected, then no answer in {timeout:g} s: importing torch and deepspeed there hangs "
                         "or is that slow (a stale network mount?)")
    answer = parse_remote_env(r.stdout, len(files))
    if answer is None or not r.stdout.count(f"{REMOTE_ENV_MARK} end"):
        last = (r.stderr.strip().splitlines() or [""])[-1][:120]
        return RemoteEnv(why=f"ssh failed: {last or 'exit 255'}" if r.returncode == 255 else
                         f"its shell gave no answer (exit {r.returncode}{': ' + last if last else ''})")
    return answer


def parse_remote_env(out: str, count: int) -> RemoteEnv | None:
    """`REMOTE_ENV_SH`'s answer among whatever else the login printed (a banner, DeepSpeed's own log lines): only
    lines with `REMOTE_ENV_MARK` count. None where it never started."""
    found: dict[str, str] = {}
    files: list[bool | None] = [None] * count
    for line in out.splitlines():
        at = line.find(REMOTE_ENV_MARK + " ")
        if at < 0:
            continue
        key, _, value = line[at + len(REMOTE_ENV_MARK) + 1:].strip().partition(" ")
        if key == "file":
            index, _, state = value.partition(" ")
            if index.isdigit() and 1 <= int(index) <= count:
                files[int(index) - 1] = state == "ok"
        else:
            found.setdefault(key, value)
    if "start" not in found:
        return None
    versions = found.get("versions", "").split()
    error = found.get("import") or (f"it exited with {found['exit']}" if "exit" in found and len(versions) != 2
                                    else None)
    return RemoteEnv(cwd=found["cwd"] == "ok" if "cwd" in found else None,
                     python=False if found.get("python") == "missing" else (True if versions or error else None),
                     versions=(versions[0], versions[1]) if len(versions) == 2 else None,
                     import_error=error if len(versions) != 2 else None, files=tuple(files))


def _ssh_argv(host: str, command: str, ssh_port: int | None = None) -> list[str]:
    """ssh as DeepSpeed's runner checks a host (`-o PasswordAuthentication=no`, `-p PORT` with --ssh_port), in batch
    mode (no prompt) with a short connection timeout."""
    port = ["-p", str(ssh_port)] if ssh_port is not None else []
    return ["ssh", "-o", "PasswordAuthentication=no", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={SSH_TIMEOUT_S}",
            *port, host, command]


# ---------------------------------------------------------------- checks: ordered table

def remote_only(t: Target, name: str, what: str) -> Check:
    """The verdict of a check about the machine the ranks run on (its devices, accelerator, RAM, disks) for a job
    none of whose ranks runs here (`Target.runs_here`): this machine's answer would be another machine's, so a
    CPU-only login node would fail fp16 or the plan's RAM for GPU nodes it only starts the job on."""
    hosts = list(t.hosts)
    shown = ", ".join(hosts[:3]) + (f" and {len(hosts) - 3} more" if len(hosts) > 3 else "")
    return NotChecked(name, True, f"not checked here: no rank runs on this machine (the job's hosts: {shown}); "
                      f"{what}", "run the same `zerokit preflight` on one of the job's nodes to check it there")


def check_imports(t: Target) -> Check:
    found = {m: probe_import(m) for m in ("torch", "deepspeed")}
    missing = [f"{m} ({why})" for m, (v, why) in found.items() if v is None]
    if missing:
        return Check("imports", False, "cannot import " + "; ".join(missing),
                     "pip install 'zerokit[deepspeed]' (install the torch build matching your CUDA first)")
    return Check("imports", True, ", ".join(f"{m} {v}" for m, (v, _) in found.items()))


def check_cuda_toolkit(t: Target) -> Check | None:
    return cuda_verdict(*probe_cuda_versions())


def cuda_verdict(torch_cuda: str | None, nvcc_cuda: str | None) -> Check | None:
    """DeepSpeed JIT-builds ops with nvcc and refuses a toolkit whose major version differs from torch's."""
    if torch_cuda is None:
        return None  # a CPU (or ROCm) build of torch: no CUDA toolkit to match
    if nvcc_cuda is None:
        return Check("cuda toolkit", True, f"torch built for CUDA {torch_cuda}; no nvcc found, so ops cannot be "
                     "JIT-compiled (prebuilt ops still work)")
    same_major = torch_cuda.split(".")[0] == nvcc_cuda.split(".")[0]
    return Check("cuda toolkit", same_major, f"torch CUDA {torch_cuda}, nvcc {nvcc_cuda}",
                 "" if same_major else f"install CUDA toolkit {torch_cuda.split('.')[0]}.x or a torch build for "
                 f"CUDA {nvcc_cuda}; DeepSpeed refuses to JIT-build ops across major versions")


def check_accelerator(t: Target) -> Check:
    if not t.runs_here:
        return remote_only(t, "accelerator", "the nodes' GPUs" + (" against the plan's per-GPU memory"
                                                                   if t.needs.gpu_bytes else ""))
    gpus = probe_gpus()
    if not gpus:
        name = probe_accelerator()
        if name == "cpu":
            ranks = f"{t.gpus_per_node} ranks" if t.gpus_per_node else (
                f"{max(t.hosts.values())} ranks" if t.hosts else "ranks")
            return Check("accelerator", True, f"no GPU found: {ranks} run on DeepSpeed's CPU accelerator "
                         f"({probe_comm_backend()})")
        return Check("accelerator", True, f"DeepSpeed accelerator: {name}")
    return gpu_verdict(visible_gpus(gpus, os.environ.get("CUDA_VISIBLE_DEVICES")), t.gpus_per_node,
                       t.needs.gpu_bytes)


def visible_gpus(gpus: list[tuple[str, int]], visible: str | None) -> list[tuple[str, int]]:
    """The GPUs nvidia-smi lists (all of the machine's) that CUDA_VISIBLE_DEVICES leaves to the ranks, by index
    (nvidia-smi's order, PCI bus order; CUDA's own differs only where CUDA_DEVICE_ORDER is not PCI_BUS_ID and the
    GPUs differ); all of them where it is unset or names devices otherwise (UUIDs: the launch refuses those)."""
    ids = (visible or "").split(",")
    if not visible or not visible.strip() or not all(i.strip().isdigit() for i in ids):
        return gpus
    return [gpus[int(i)] for i in ids if int(i) < len(gpus)]


def gpu_verdict(gpus: list[tuple[str, int]], gpus_per_node: int | None, gpu_bytes: int | None) -> Check:
    """GPUs found (name, memory bytes) against the ranks asked for and the plan's per-GPU peak."""
    want = gpus_per_node or len(gpus)
    if not gpus:  # CUDA_VISIBLE_DEVICES names none of them
        return Check("accelerator", False, "CUDA_VISIBLE_DEVICES leaves none of this machine's GPUs visible",
                     "set CUDA_VISIBLE_DEVICES to the indexes nvidia-smi lists, or unset it")
    smallest = min(mem for _, mem in gpus)
    problems = []
    if len(gpus) < want:
        problems.append(f"{want} GPUs per node asked, {len(gpus)} present")
    if gpu_bytes and smallest < gpu_bytes:
        problems.append(f"the plan needs {format_bytes(gpu_bytes)} per GPU")
    detail = f"{len(gpus)} x {gpus[0][0]} ({format_bytes(smallest, binary=True)})"
    if problems:
        return Check("accelerator", False, detail + "; " + "; ".join(problems),
                     "lower --gpus-per-node, or re-plan with --gpu-memory set to this GPU's memory")
    need = f"; plan needs {format_bytes(gpu_bytes)} per GPU" if gpu_bytes else ""
    return Check("accelerator", True, detail + need)


def check_cpu_threads(t: Target) -> Check | None:
    """On DeepSpeed's CPU accelerator, the OpenMP threads the local ranks run against the cores: the runner leaves
    each rank torch's default (a thread per core) unless OMP_NUM_THREADS is set (`deepspeed --bind_cores_to_rank`
    sets it), so N ranks run N threads a core. DeepSpeed's accelerator decides where the ranks run (a CPU build of
    torch runs them on the CPU beside GPUs too), and asking it runs no nvidia-smi a second time."""
    ranks = t.gpus_per_node or (max(t.hosts.values()) if t.hosts else None)
    if not ranks or not t.runs_here or probe_accelerator() != "cpu":  # the nodes' accelerator is not this one's
        return None
    default, cores = probe_threads()
    if t.bind_cores_to_rank:  # DeepSpeed's launch.py sets OMP_NUM_THREADS to each rank's share of the cores
        share = bound_share(t, ranks)
        if share is not None:
            return threads_verdict(ranks, share, cores, True, "--bind-cores-to-rank")
    asked = t.rank_env.get("OMP_NUM_THREADS")
    threads = default
    if asked is not None:
        first = asked.split(",", 1)[0].strip()
        if not (first.isascii() and first.isdigit() and len(first) <= 6) or int(first) < 1:
            shown = asked if len(asked) <= 40 else asked[:40] + "..."
            return Check("cpu threads", False, f"OMP_NUM_THREADS={shown!r} is not a thread count",
                         "set OMP_NUM_THREADS to a whole number >= 1, or unset it")
        threads = int(first)
    return threads_verdict(ranks, threads, cores, asked is not None)


def bound_share(t: Target, ranks: int) -> int | None:
    """The cores (and OpenMP threads) DeepSpeed gives each of `ranks` local ranks under --bind-cores-to-rank: the
    listed cores' or the physical cores' share, as deepspeed/utils/numa.py counts it; None where that is unknown or
    none (the core-binding check says why)."""
    total = bound_cores(t.bind_core_list) or 0
    return total // ranks if total >= ranks else None


def threads_verdict(ranks: int, threads: int, cores: int, asked: bool, source: str | None = None) -> Check:
    """The cpu-threads check's verdict: a pass either way (an oversubscribed job still trains), with the
    OMP_NUM_THREADS to set when the ranks' threads outnumber the cores. `source`: what set the threads, where not
    OMP_NUM_THREADS or torch's default."""
    source = source or ("OMP_NUM_THREADS" if asked else "torch's default")
    detail = (f"{ranks} rank{'s' * (ranks != 1)} x {threads} OpenMP thread{'s' * (threads != 1)} ({source}) on "
              f"{cores} core{'s' * (cores != 1)}")
    per_rank = oversubscribed(ranks, threads, cores)
    if per_rank is None:
        return Check("cpu threads", True, detail)
    return Check("cpu threads", True, f"{detail}: more threads than cores: small ops stall, steps slow "
                 "down, and a `zerokit probe` profile holds for its own thread count only",
                 f"export OMP_NUM_THREADS={per_rank}, or give zerokit launch --env OMP_NUM_THREADS={per_rank}, or "
                 "--bind-cores-to-rank (which sets it and pins each rank to its cores); probe with the same threads")


def physical_cores() -> int | None:
    """The physical cores DeepSpeed shares out under --bind_cores_to_rank (`psutil.cpu_count(logical=False)`, as
    deepspeed/utils/numa.py counts them); None where psutil cannot tell."""
    try:
        import psutil
    except ImportError:
        return None
    return psutil.cpu_count(logical=False)


def bound_cores(bind_core_list: str | None) -> int | None:
    """The cores DeepSpeed shares out under --bind_cores_to_rank: the listed ones, else the physical ones (None
    where psutil cannot count them)."""
    if bind_core_list is not None:
        from zerokit.launch.runner import parse_core_list  # here, as parse_resource_filter is: the runner module

        return len(parse_core_list(bind_core_list))
    return physical_cores()


def binding_problem(ranks: int | None, bind_core_list: str | None, env: Mapping[str, str]) -> tuple[str, str] | None:
    """(what is wrong, the fix) where DeepSpeed could not start `ranks` local ranks bound to cores on this machine
    under `env`: no numactl (its launcher spawns each rank under it), KMP_AFFINITY set (it refuses it beside
    numactl), a listed core this node lacks, fewer cores than ranks (it gives each rank one at least, and stops at
    its assert); None where it could. The preflight's core-binding check and `zerokit probe --bind-cores-to-rank`
    both ask it."""
    if shutil.which("numactl") is None:
        what = ("--bind-cores-to-rank starts each rank under numactl, which is not installed here: DeepSpeed's "
                "launcher would fail to start the ranks")
        return what, "install numactl (apt-get install numactl, or dnf install numactl), or drop --bind-cores-to-rank"
    if "KMP_AFFINITY" in env:
        return ("KMP_AFFINITY is set, and DeepSpeed refuses it beside numactl's binding (deepspeed/utils/numa.py)",
                "unset KMP_AFFINITY (and drop any --env KMP_AFFINITY=...), or drop --bind-cores-to-rank")
    if bind_core_list is not None:
        from zerokit.launch.runner import parse_core_list

        last, here = parse_core_list(bind_core_list)[-1], os.cpu_count() or 0
        if here and last >= here:
            return (f"--bind-core-list {bind_core_list} names core {last}, and this node's cores are 0 to {here - 1}",
                    "list cores this node has (lscpu shows them)")
    from zerokit.launch.runner import short_of_cores

    total = bound_cores(bind_core_list)
    short = short_of_cores(bind_core_list, total, ranks) if total is not None and ranks else None
    return (short, "run fewer ranks a node, list more cores, or drop --bind-cores-to-rank") if short else None


BIND_ADVICE = ("launch with --bind-cores-to-rank (each rank on its own cores, OMP_NUM_THREADS its share: DeepSpeed's "
               "ZeRO-Offload tutorial advises it, Qwen2.5-3B on 2 A100s stepped in 2.38 s instead of 3.08, "
               "deepspeedai/DeepSpeed#7474), and probe with `zerokit probe --bind-cores-to-rank`, so that the "
               "profile's CPU Adam is the job's")


def unbound_offload(ranks: int, accelerator: str) -> Check | None:
    """The core-binding advice for a job whose `ranks` local ranks (2 or more) step an offloaded optimizer's CPU Adam
    on the host with torch's default threads, on a GPU node (DeepSpeed's CPU accelerator: the cpu-threads check)."""
    if accelerator == "cpu":
        return None
    return Check("core binding", True, f"the config offloads the optimizer: {ranks} ranks a node step CPU Adam on the "
                                       "host at once, each with torch's default threads (one a core, on every core)",
                 BIND_ADVICE)


def check_core_binding(t: Target) -> Check | None:
    """Core binding (launch --bind-cores-to-rank), where it is asked: what DeepSpeed's launch.py needs to start the
    ranks under numactl (numactl itself, no KMP_AFFINITY, a core for every local rank, cores this node has). Where
    it is not, and the config offloads the optimizer to CPU Adam on a GPU node with several local ranks and no
    OMP_NUM_THREADS: advice, for every rank's CPU Adam then runs a thread per core of the node, on every core."""
    ranks = t.gpus_per_node or (max(t.hosts.values()) if t.hosts else None)
    env = t.rank_env
    if not t.bind_cores_to_rank:
        if not t.needs.cpu_adam or (ranks or 0) < 2 or "OMP_NUM_THREADS" in env or not t.runs_here:
            return None
        return unbound_offload(ranks, probe_accelerator())
    if not t.runs_here:
        return remote_only(t, "core binding", "numactl and the nodes' cores")
    problem = binding_problem(ranks, t.bind_core_list, env)
    if problem is not None:
        return Check("core binding", False, *problem)
    total = bound_cores(t.bind_core_list)
    if total is None:
        return Check("core binding", True, "numactl installed; psutil cannot count the physical cores, which "
                                           "DeepSpeed shares out")
    source = "physical cores" if t.bind_core_list is None else f"--bind-core-list {t.bind_core_list}"
    detail = f"numactl installed; {total} cores to share out ({source})"
    if ranks:
        share = total // ranks
        detail += f": {share} a rank for {ranks} rank{'s' * (ranks != 1)} a node (OMP_NUM_THREADS={share})"
    return Check("core binding", True, detail)


def _op_check(label: str, builder: str, why: str, fix: str) -> Check:
    installed, compatible, cached, mismatch = probe_op(builder)
    if installed and mismatch:
        return Check(label, False, f"prebuilt, but {mismatch}: DeepSpeed refuses to load it ({why})",
                     "reinstall deepspeed against this torch (pip install --force-reinstall --no-cache-dir "
                     "deepspeed; DS_BUILD_OPS=1 to prebuild its ops), or install the torch it was built with")
    if installed:
        return Check(label, True, f"prebuilt ({why})")
    if compatible and cached:
        return Check(label, True, f"JIT-built, in the torch extensions cache ({why})")
    if compatible:
        return Check(label, True, f"JIT-compatible, compiled on first use: minutes ({why})")
    return Check(label, False, f"neither prebuilt nor buildable here ({why})", fix)


def check_cpu_adam(t: Target) -> Check | None:
    """The CPU optimizer's op (cpu_adam, cpu_lion or cpu_adagrad, by the config's optimizer.type)."""
    if not t.needs.cpu_adam:
        return None
    op = t.needs.cpu_optimizer_op
    if not t.runs_here:  # DeepSpeed builds it for the nodes' accelerator, not this machine's
        return remote_only(t, f"op {op}", "the nodes build it for their own accelerator")
    builder = next(b for o, b in CPU_OPTIMIZER_OPS.values() if o == op)
    return _op_check(f"op {op}", builder, "the config offloads the optimizer",
                     f"install a C++ compiler (apt-get install build-essential) or DS_BUILD_{op.upper()}=1 pip "
                     "install deepspeed")


def check_dtypes(t: Target) -> Check | None:
    """fp16/bf16 the config enables against the local accelerator: DeepSpeed raises "Type fp16 is not supported on
    your device." at initialize (engine._do_sanity_check) otherwise."""
    if not t.needs.dtypes:
        return None
    if not t.runs_here:
        return remote_only(t, "precision", f"whether the nodes' accelerator supports {' and '.join(t.needs.dtypes)}")
    supported = probe_dtypes(t.env)
    missing = [d for d in t.needs.dtypes if not supported[d]]
    if not missing:
        return Check("precision", True, f"{' and '.join(t.needs.dtypes)} supported on this device")
    if missing == ["fp16"] and supported["bf16"]:
        fix = "set fp16.enabled to false and bf16.enabled to true (this device has bf16), or disable both for fp32"
    elif missing == ["bf16"] and supported["fp16"]:
        fix = "set bf16.enabled to false, and fp16.enabled to true or leave both off for fp32"
    else:
        fix = f"set {' and '.join(d + '.enabled' for d in missing)} to false: train in fp32"
    return Check("precision", False, f"the config enables {' and '.join(missing)}, which DeepSpeed's "
                 f"{probe_accelerator()} accelerator does not support here: initialize raises 'Type {missing[0]} is not "
                 "supported on your device.'", fix)


TRAINING_SECTIONS = frozenset({"zero_optimization", "bf16", "fp16", "optimizer", "scheduler", "train_batch_size",
                               "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping",
                               "activation_checkpointing", "data_types", "zero_allow_untested_optimizer"})
"""Top-level keys that set the training itself (ZeRO, precision, batch, optimizer, schedule): an unknown key that
lint takes for a misspelling or misplacement of one of them fails the config check though DeepSpeed only ignores it
(`zero_optimisation` trains without ZeRO, and runs out of memory later)."""


def check_config_lint(t: Target) -> Check | None:
    """`zerokit lint` on the job's config, with its world size: an error there is a key DeepSpeed rejects at
    initialize, or a value it refuses or misreads, which the training would meet after the launch. Unknown keys
    DeepSpeed silently ignores (ZK100 in the sections it does not validate: LLaMA-Factory's `comms_config`, say)
    are lint's errors, made for CI, but the engine starts without them: they are named, and do not fail the launch,
    unless lint takes one for a misspelt or misplaced key of TRAINING_SECTIONS.
    The batch-size rule (ZK201) is the next check's. The script is unknown: a config with "auto" values is linted
    for the HF Trainer (the `--deepspeed PATH` it gets is the Trainer's convention; nothing else fills them), one
    without for DeepSpeed itself, so that no rule of a consumer the script may not be fails the launch."""
    if t.config_file is None:
        return None
    from zerokit.lint.engine import lint_document
    from zerokit.lint.findings import ERROR
    from zerokit.lint.loader import load_file
    from zerokit.lint.rules import Context, _auto_leaves
    from zerokit.lint.schema import IGNORED

    target = "trainer" if next(_auto_leaves(t.config, ()), None) is not None else "deepspeed"  # as ZK501 finds them
    document = t.document if t.document is not None else load_file(t.config_file, yaml_syntax=False)
    found = [f for f in lint_document(document, Context(target=target, world_size=t.world_size))
             if f.code != "ZK201"]
    ignored = [f.key for f in found if f.code == "ZK100" and IGNORED in f.message
               and (f.suggestion or "").split(".")[0] not in TRAINING_SECTIONS]
    errors = [f for f in found if f.severity == ERROR and f.key not in ignored]
    warnings = len(found) - len(errors) - len(ignored)
    also = f", {warnings} warning{'s' * (warnings != 1)}" if warnings else ""
    if ignored:
        also += f"; DeepSpeed silently ignores {', '.join(ignored)}"
    command = shlex.join(["zerokit", "lint", t.config_file, "--target", target]
                         + (["--world-size", str(t.world_size)] if t.world_size else []))
    if errors:
        first = errors[0]
        return Check("config", False, f"lint finds {len(errors)} error{'s' * (len(errors) != 1)}{also}; the first: "
                     f"{first.message} ({', '.join(filter(None, (first.code, first.key)))})",
                     f"run `{command}` and fix what it lists")  # a finding about a missing key has no key
    return Check("config", True, f"lint finds no errors{also}",
                 f"`{command}` says what each is (a misspelt key is lost)" if ignored else
                 f"`{command}` lists them" if warnings else "")


def check_batch_size(t: Target) -> Check | None:
    """Lint's ZK201 (train_batch_size = micro batch x gradient accumulation x world size, which DeepSpeedConfig
    asserts at initialize) with the job's world size."""
    from zerokit.lint.loader import Document
    from zerokit.lint.rules import Context, _auto_leaves, batch_size_mismatch

    keys = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
    if not any(k in t.config for k in keys) or (t.hostfile and not t.hosts):
        return None  # no batch keys; or a hostfile that did not read, so no world size (its own check says why)
    world = t.world_size
    counted = ""
    if world is None and not t.hosts:  # one node without --gpus-per-node: DeepSpeed starts a rank on every device
        world = probe_device_count()
        counted = " (every device of this machine, which DeepSpeed starts a rank on without --gpus-per-node)"
    # the consumer as check_config_lint guesses it: behind the Trainer a missing gradient_accumulation_steps is 1
    target = "trainer" if next(_auto_leaves(t.config, ()), None) is not None else "deepspeed"
    hits = list(batch_size_mismatch(Document("ds_config", t.config), Context(target=target, world_size=world)))
    if hits:
        return Check("batch size", False, f"{hits[0].message}{counted} (lint: ZK201)",
                     f"set train_batch_size to {hits[0].suggestion}, or change the ranks" if hits[0].suggestion else
                     "make train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps x "
                     "world size")
    shown = {k: t.config[k] for k in keys if k in t.config}
    if all(v == "auto" for v in shown.values()):  # nothing to check: "auto fit world size 2" claimed a check
        return Check("batch size", True, f"{', '.join(shown)} \"auto\": the HF Trainer or Accelerate fills "
                     + ("it" if len(shown) == 1 else "them") + (f" for world size {world}" if world else ""))
    return Check("batch size", True, ", ".join(f"{k} {v}" for k, v in shown.items())
                 + (f" fit world size {world}" if world else ""))


def _decision(t: Target) -> dict[str, Any]:
    return _dict((t.plan or {}).get("decision"))


def check_plan_fits(t: Target) -> Check | None:
    """A plan whose decision is the closest miss (`zerokit plan` exited 1): its sizes are a setup known not to fit."""
    fits = _decision(t).get("fits")
    if fits is None:
        return None
    memory = _dict(t.plan.get("memory")) if t.plan else {}
    total, capacity = _dict(memory.get("per_gpu")).get("total"), memory.get("gpu_capacity")
    sizes = (f"{format_bytes(total)} per GPU of {format_bytes(capacity)}"
             if all(isinstance(n, int) and not isinstance(n, bool) for n in (total, capacity)) else "")
    if fits:
        return Check("plan", True, "fits" + (f": {sizes}" if sizes else ""))
    missing = t.plan.get("missing") if t.plan else None
    why = missing if isinstance(missing, str) and missing.strip() else sizes
    return Check("plan", False, "nothing fits: `zerokit plan` exited 1, and this decision is its closest miss"
                 + (f" ({why})" if why else ""),
                 "re-plan with what it says is missing until `zerokit plan` exits 0, and launch that plan's config")


def _gpus_shape(nodes: int, per: int) -> str:
    """`1 node x 8 GPUs (8)`."""
    return f"{nodes} node{'s' if nodes != 1 else ''} x {per} GPU{'s' if per != 1 else ''} ({nodes * per})"


def _hosts_shape(hosts: dict[str, int]) -> str:
    """`2 nodes x 8 GPUs (16)`, or each host's count where they differ."""
    counts = set(hosts.values())
    if len(counts) == 1:
        return _gpus_shape(len(hosts), counts.pop())
    shown = ", ".join(f"{h}:{n}" for h, n in list(hosts.items())[:4]) + (", ..." if len(hosts) > 4 else "")
    return f"{sum(hosts.values())} GPUs on {len(hosts)} nodes ({shown})"


def check_plan_gpus(t: Target) -> Check | None:
    """The plan's GPUs against the job's ranks: ZeRO partitions the states over the world size, and the host RAM a
    node needs grows with its ranks, so a plan for other GPUs sizes another job."""
    hardware = _dict((t.plan or {}).get("hardware"))
    per, nodes = hardware.get("gpus_per_node"), hardware.get("nodes", 1)
    if per is None:
        return None
    if t.hosts:
        job = dict(t.hosts)
    elif t.hostfile or t.gpus_per_node is None:
        return None  # a hostfile that did not read (its own check says so), or ranks DeepSpeed counts itself
    else:
        job = {"localhost": t.gpus_per_node}
    planned = _gpus_shape(nodes, per)
    if len(job) == nodes and set(job.values()) == {per}:
        return Check("plan GPUs", True, f"{planned}, as the job")
    counts = set(job.values())
    replan = (f"re-plan with --gpus-per-node {counts.pop()} --nodes {len(job)}" if len(counts) == 1 else
              f"give every host {per} slots")
    return Check("plan GPUs", False, f"the plan is for {planned}, the job runs {_hosts_shape(job)}",
                 f"{replan}, or run the job on the plan's {per * nodes} GPUs")


OFFLOAD_DEVICES = ("none", "cpu", "nvme")


def config_decision(config: dict[str, Any]) -> dict[str, Any]:
    """What a ds_config sets of the plan's decision, as DeepSpeed reads it: `zero_stage` (0 without
    zero_optimization), `offload_optimizer`/`offload_param` ("none" without a block; the old cpu_offload and
    cpu_offload_param flags mean "cpu") and `micro_batch_size` where it is a number ("auto": the Trainer's). A value
    of the wrong type is left out: it is lint's to report."""
    zero = config.get("zero_optimization", {})
    if not isinstance(zero, dict):
        return {}
    out: dict[str, Any] = {}
    stage = zero.get("stage", 0)
    if isinstance(stage, int) and not isinstance(stage, bool):
        out["zero_stage"] = stage
    from zerokit.lint.rules import _offload  # lint's reading, the legacy cpu_offload flags with it

    for which in ("optimizer", "param"):
        device, path = _offload(config, which)
        if not path:  # no offload block or flag
            device = "none"
        if isinstance(device, str) and device.lower() in OFFLOAD_DEVICES:
            out[f"offload_{which}"] = device.lower()
    micro = config.get("train_micro_batch_size_per_gpu")
    if isinstance(micro, int) and not isinstance(micro, bool):
        out["micro_batch_size"] = micro
    return out


def check_plan_config(t: Target) -> Check | None:
    """--config against the keys the plan decided: the plan's sizes (and its GPU, RAM and NVMe checks) hold for its
    own ZeRO stage, offload and micro-batch, not for another config's."""
    decision = _decision(t)
    if t.config_file is None or not decision:
        return None
    ours = config_decision(t.config)
    keys = [("zero_stage", "ZeRO stage", "--zero-stage"), ("offload_optimizer", "offload_optimizer",
                                                             "--offload-optimizer"),
            ("offload_param", "offload_param", "--offload-param"),
            ("micro_batch_size", "train_micro_batch_size_per_gpu", "--micro-batch")]
    if 3 not in (ours.get("zero_stage"), decision.get("zero_stage")):
        keys = [k for k in keys if k[0] != "offload_param"]  # DeepSpeed offloads parameters with ZeRO-3 only
    compared = [k for k in keys if k[0] in ours and decision.get(k[0]) is not None]
    differ = [k for k in compared if ours[k[0]] != decision[k[0]]]
    if not differ:
        if not compared:
            return None
        return Check("plan config", True, ", ".join(f"{label} {ours[key]}" for key, label, _ in compared)
                     + ": as the plan decided")
    return Check("plan config", False, f"{t.config_file} differs from the plan's decision: "
                 + "; ".join(f"{label} {ours[key]}, the plan's {decision[key]}" for key, label, _ in differ),
                 "write the config from the plan (zerokit plan ... -o ds_config.json), or re-plan with "
                 + " ".join(f"{option} {ours[key]}" for key, _, option in differ) + " to size this config")


def check_async_io(t: Target) -> Check | None:
    if not t.needs.async_io:
        return None
    if not t.runs_here:
        return remote_only(t, "op async_io", "the nodes build it, against their own libaio")
    fix = "apt-get install libaio-dev, then rerun (DeepSpeed builds async_io on first use)"
    check = _op_check("op async_io", "AsyncIOBuilder", "the config offloads to NVMe", fix)
    if check.ok and not probe_libaio_header() and "JIT-compatible" in check.detail:
        return Check(check.name, False, "libaio.h not found: the JIT build of async_io would fail", fix)
    return check


def check_shm_comm(t: Target) -> Check | None:
    """On DeepSpeed's CPU accelerator with several ranks: the shared-memory allreduce op, which deepspeed.comm builds
    at init_distributed wherever it is compatible (comm/torch.py build_shm_op) and whose failed build stops every
    rank there."""
    ranks = t.world_size
    if not ranks or ranks < 2 or not t.runs_here or probe_accelerator() != "cpu":
        return None
    return _op_check("op deepspeed_shm_comm", "ShareMemCommBuilder", "DeepSpeed's CPU allreduce between the ranks",
                     "install a C++ compiler (apt-get install build-essential), which DeepSpeed builds it with")


def check_ninja(t: Target) -> Check:
    if probe_ninja():
        return Check("ninja", True, "present (JIT builds of DeepSpeed ops)")
    return Check("ninja", False, "missing: DeepSpeed cannot JIT-build ops", "pip install ninja")


STALE_LOCK_AGE_S = 600
"""A JIT build lock this old, with no compiler running, was left by a killed build."""


def check_extension_locks(t: Target) -> Check | None:
    stale = [path for path, age in probe_extension_locks()
             if age > STALE_LOCK_AGE_S and not probe_building(str(Path(path).parent))]
    if not stale:
        return None
    return Check("torch extension locks", False,
                 f"stale JIT build lock {stale[0]}" + (f" and {len(stale) - 1} more" if len(stale) > 1 else "")
                 + ": a killed build left it, and every rank would wait on it forever",
                 "rm " + " ".join(stale))


def check_nvme(t: Target) -> Check | None:
    if not t.needs.nvme_paths and not t.needs.nvme_missing:
        return None
    if t.needs.nvme_missing:
        blocks = " and ".join(t.needs.nvme_missing)
        return Check("nvme path", False, f"{blocks} offloads to NVMe but sets no nvme_path: DeepSpeed accepts the config "
                     "and fails at initialize (lint: ZK303)",
                     f"set {t.needs.nvme_missing[0]}.nvme_path to a directory on a local NVMe drive")
    if not t.runs_here:
        return remote_only(t, "nvme path", f"{', '.join(t.needs.nvme_paths)} on the nodes"
                           + (f" (the plan needs {format_bytes(t.needs.nvme_bytes)})" if t.needs.nvme_bytes else ""))
    problems, details, not_dirs = [], [], []
    for path in t.needs.nvme_paths:
        what, writable, free = probe_path(path)
        if what == "missing":
            problems.append(f"{path} does not exist")
        elif what != "directory":
            problems.append(f"{path} is {what}, not a directory")
            not_dirs.append(path)
        elif not writable:
            problems.append(f"{path} is not writable")
        elif t.needs.nvme_bytes and free is not None and free < t.needs.nvme_bytes:
            problems.append(f"{path} has {format_bytes(free)} free, the plan needs {format_bytes(t.needs.nvme_bytes)}")
        else:
            need = f" (plan needs {format_bytes(t.needs.nvme_bytes)})" if t.needs.nvme_bytes else ""
            details.append(f"{path}: writable, {format_bytes(free or 0)} free{need}")
    if not_dirs:
        return Check("nvme path", False, "; ".join(problems), "set nvme_path in the config to a directory on a local "
                     f"NVMe disk ({not_dirs[0]} is not one; DeepSpeed swaps into files inside it)")
    if problems:
        return Check("nvme path", False, "; ".join(problems),
                     "create the directory on a local NVMe disk (mkdir -p PATH), or set nvme_path in the config to "
                     "one with enough free space")
    return Check("nvme path", True, "; ".join(details))


def check_shm(t: Target) -> Check | None:
    if not t.runs_here:
        return remote_only(t, "/dev/shm", "the nodes' shared memory")
    shm = probe_shm()
    if shm is None:
        return Check("/dev/shm", False, "not mounted", "mount a tmpfs on /dev/shm (docker: --shm-size=1g)")
    size, free = shm
    ok = size >= SHM_MIN_BYTES
    if ok and not t.multi_node:  # several ranks on DeepSpeed's CPU accelerator each map an allreduce workspace
        ranks = t.world_size or probe_device_count() or 0
        need = ranks * SHM_CPU_RANK_BYTES
        if ranks >= 2 and free < need and probe_accelerator() == "cpu":
            return Check("/dev/shm", False, f"{format_bytes(free, binary=True)} free of "
                         f"{format_bytes(size, binary=True)}; {ranks} ranks on DeepSpeed's CPU accelerator map "
                         f"{format_bytes(need, binary=True)} of shared-memory allreduce buffers (69 MB a rank)",
                         "remove stale /dev/shm/deepspeed_allreduce_buffer_* files no job maps, or enlarge /dev/shm "
                         "(mount -o remount,size=... /dev/shm; docker: --shm-size)")
    return Check("/dev/shm", ok, f"{format_bytes(size, binary=True)}" + ("" if ok else " (DeepSpeed wants >= 512 MiB)"),
                 "" if ok else "docker run --shm-size=1g ..., or mount -o remount,size=1G /dev/shm")


def check_ram(t: Target) -> Check:
    if not t.runs_here:
        need = f" against the plan's {format_bytes(t.needs.cpu_bytes, binary=True)} a node" if t.needs.cpu_bytes else ""
        return remote_only(t, "host RAM", f"the nodes' RAM{need}")
    total, available = probe_ram()
    detail = f"{format_bytes(total, binary=True)} total, {format_bytes(available, binary=True)} available"
    if t.needs.cpu_bytes is None:
        return Check("host RAM", True, detail)
    ok = available >= t.needs.cpu_bytes
    return Check("host RAM", ok, f"{detail}; the plan needs {format_bytes(t.needs.cpu_bytes, binary=True)}",
                 "" if ok else "free memory, use a larger node, or re-plan with --cpu-memory set to what is free")


def check_hostfile(t: Target) -> Check | None:
    if not t.hostfile:
        return None
    from zerokit.fileio import Unreadable
    from zerokit.launch.hostfile import read_hostfile

    try:
        hosts = read_hostfile(t.hostfile)
    except Unreadable as e:
        return Check("hostfile", False, str(e), "pass a regular text file to --hostfile: one 'HOST slots=N' line per "
                     "node")
    except BadInput as e:
        return Check("hostfile", False, str(e), "one 'HOST slots=N' line per node, e.g. 'worker-1 slots=8'")
    return Check("hostfile", True, f"{len(hosts)} hosts, {sum(hosts.values())} slots")


def check_launcher(t: Target) -> Check | None:
    if not t.multi_node or t.no_ssh:
        return None
    missing = [b for b in LAUNCHER_BINARIES[t.launcher] if shutil.which(b) is None]
    if missing:
        return Check(f"launcher {t.launcher}", False, f"{', '.join(missing)} not on PATH",
                     LAUNCHER_INSTALL[t.launcher])
    if t.launcher == "mvapich":  # MVAPICHRunner.backend_exists: mpiname must name MVAPICH2-GDR, else "not installed"
        name = probe_mpiname()
        if "MVAPICH2-GDR" not in name:
            return Check("launcher mvapich", False, f"mpiname says {name[:60]!r}, and DeepSpeed's mvapich backend runs "
                         "only on MVAPICH2-GDR (its runner refuses the rest as 'not installed')",
                         "install MVAPICH2-GDR, or use --launcher openmpi or pdsh")
    return Check(f"launcher {t.launcher}", True, ", ".join(shutil.which(b) or b for b in LAUNCHER_BINARIES[t.launcher]))


def probe_mpiname() -> str:
    """What `mpiname` prints (stripped), '' when it fails."""
    try:
        out = subprocess.run(["mpiname"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip()


def check_ssh(t: Target) -> Check | None:
    if not t.multi_node or t.no_ssh:
        return None
    hosts = list(t.hosts)
    if t.launcher == "slurm":  # srun reaches the nodes, but the runner ssh-checks the first host and asks it for its
        hosts = hosts[:1]      # address (`ssh HOST hostname -I`) whatever the backend (deepspeed/launcher/runner.py)
    with ThreadPoolExecutor(max_workers=min(SSH_PARALLEL, len(hosts))) as pool:
        results = dict(zip(hosts, pool.map(lambda host: probe_ssh(host, ssh_port=t.ssh_port), hosts)))
    failed = [f"{h} ({why or 'refused'})" for h, (ok, why) in results.items() if not ok]
    if failed:
        shown = _hosts_named(failed, of=len(hosts))
        other_port = "" if t.ssh_port is not None else "; where the nodes' sshd listens on another port: --ssh-port N"
        return Check("ssh", False, f"no passwordless ssh{on_port(t)} to " + shown,
                     f"ssh-copy-id to each host and accept its host key once ({ssh_shown(t)} HOST hostname must work "
                     f"without a prompt: DeepSpeed's runner checks exactly that){other_port}")
    detail = f"{len(hosts)} hosts answer{on_port(t)} (BatchMode, {SSH_TIMEOUT_S} s timeout)"
    if t.master_addr is None:  # the runner asks the first host for its address, whatever the backend
        from zerokit.launch.runner import DISCOVERY_LAUNCHERS  # here, as is_this_host is: the runner module

        address, why = probe_host_address(hosts[0], ssh_port=t.ssh_port)
        if address is None:
            fix = ("give zerokit launch --master-addr with its address" if t.launcher not in DISCOVERY_LAUNCHERS else
                   f"install a hostname with -I there (Debian's hostname package): --launcher {t.launcher} takes no "
                   "--master-addr")
            return Check("ssh", False, f"`{ssh_shown(t)} {hosts[0]} hostname -I` gives no address ({why}), and "
                         "DeepSpeed's runner asks it for the master address", fix)
        detail += f"; the master address: {address} (`hostname -I` on {hosts[0]})"
    return Check("ssh", True, detail)


def on_port(t: Target) -> str:
    """' on port N' where the job's ssh has its own port (--ssh-port), for the ssh check's lines; '' where not."""
    return f" on port {t.ssh_port}" if t.ssh_port is not None else ""


def ssh_shown(t: Target) -> str:
    """How the job's ssh is typed: `ssh`, or `ssh -p N` with --ssh-port."""
    return "ssh" + (f" -p {t.ssh_port}" if t.ssh_port is not None else "")


def check_remote_env(t: Target) -> Check | None:
    """What DeepSpeed's runner starts on every other node by this node's paths, there: pdsh's command is `cd CWD;
    PYTHON -u -m deepspeed.launcher.launch ... SCRIPT ARGS`, and mpirun (openmpi, mpich, impi, mvapich) starts
    `PYTHON -u SCRIPT ARGS` in CWD (mpich through DeepSpeed's launcher_helper.py, by its path here), PYTHON being the
    runner's own sys.executable (multinode_runner.py get_cmd). Without a shared filesystem the job started, then
    failed on a node with `cd: No such file or directory`, `No module named deepspeed` or a missing script, the other
    nodes waiting on the rendezvous meanwhile. So each remote host of the job is asked, in one ssh call and all at
    once, for the working directory, the interpreter, `import torch, deepspeed` with it (their versions against this
    node's: a difference is advice, and a classic hang), the script and the config files its arguments name. Not
    where no ssh starts the ranks: one node, --no-ssh (each node's zerokit checks itself), slurm (srun)."""
    if not t.multi_node or t.no_ssh or t.launcher == "slurm":
        return None
    from zerokit.launch.runner import is_this_machine, runner_python

    hosts = [h for h in t.hosts if not is_this_machine(h)]
    if not hosts:
        return None
    cwd = t.cwd or os.getcwd()
    python = t.python or runner_python()
    needs = remote_files(t, cwd)
    pythonpath = rank_pythonpath(t, cwd)
    with ThreadPoolExecutor(max_workers=min(SSH_PARALLEL, len(hosts))) as pool:
        answers = pool.map(lambda h: probe_remote_env(h, cwd, python, pythonpath, [p for _, p in needs], t.ssh_port),
                           hosts)
        results = dict(zip(hosts, answers))
    return remote_env_verdict(results, needs, cwd, python, local_versions(python, pythonpath))


def remote_files(t: Target, cwd: str) -> list[tuple[str, str]]:
    """(what, absolute path) of each file the job's ranks open on every node by this node's path: the script
    (relative to the working directory, as the runner passes it), each config file its arguments name (the
    `--deepspeed PATH` launch adds; `zerokit preflight`: --config's), and for mpich DeepSpeed's launcher_helper.py."""
    from zerokit.launch.runner import named_configs

    files = [("script", os.path.join(cwd, t.script))] if t.script is not None else []
    configs = ([v for _, v in named_configs(t.script_args) if v is not None and not v.lstrip().startswith("{")]
               if t.script is not None else [t.config_file] if t.config_file else [])
    files += [("config", os.path.join(cwd, c)) for c in dict.fromkeys(configs)]
    if t.launcher == "mpich":  # MPICHRunner.get_cmd: PYTHON -u <deepspeed/launcher>/launcher_helper.py SCRIPT ...
        import importlib.util

        spec = importlib.util.find_spec("deepspeed")
        if spec is not None and spec.submodule_search_locations:
            package = os.path.realpath(next(iter(spec.submodule_search_locations)))
            files.append(("DeepSpeed launcher_helper.py", os.path.join(package, "launcher", "launcher_helper.py")))
    return files


def rank_pythonpath(t: Target, cwd: str) -> str:
    """The ranks' PYTHONPATH on the nodes: the working directory before this one's (DeepSpeed's runner sets it and
    exports it, as every PYTHON* variable), unless the user's .deepspeed_env or --env gives one."""
    from zerokit.launch.runner import users_deepspeed_env

    try:
        users = users_deepspeed_env()
    except BadInput:  # launch refuses such a file before its preflight
        users = {}
    given = {**users, **t.env}.get("PYTHONPATH")
    if given is not None:
        return given.strip()
    here = os.environ.get("PYTHONPATH")
    return cwd + (":" + here if here else "")


def local_versions(python: str, pythonpath: str) -> tuple[str, str] | None:
    """(deepspeed, torch) of the runner's interpreter here, as the nodes' are asked: this process's where it is that
    interpreter (the imports check imported them), else asked as a node is, without ssh."""
    if os.path.abspath(python) == os.path.abspath(sys.executable):
        (ds, _), (torch, _) = probe_import("deepspeed"), probe_import("torch")
        return (ds, torch) if ds is not None and torch is not None else None
    try:
        r = subprocess.run([python, "-c", REMOTE_ENV_IMPORT, REMOTE_ENV_MARK], check=False, capture_output=True,
                           text=True, timeout=REMOTE_ENV_TIMEOUT_S, stdin=subprocess.DEVNULL,
                           env={**os.environ, "PYTHONPATH": pythonpath})
    except (OSError, subprocess.SubprocessError):
        return None
    answer = parse_remote_env(f"{REMOTE_ENV_MARK} start\n{r.stdout}", 0)
    return answer.versions if answer is not None else None


def _hosts_named(hosts: list[str], of: int | None = None) -> str:
    """The first SSH_FAILURES_SHOWN of `hosts`, and how many more (`of`: of how many the job has, where said)."""
    shown = ", ".join(hosts[:SSH_FAILURES_SHOWN])
    if len(hosts) <= SSH_FAILURES_SHOWN:
        return shown
    return shown + f" and {len(hosts) - SSH_FAILURES_SHOWN} more" + (f" of the {of} hosts" if of is not None else "")


def remote_env_verdict(results: dict[str, RemoteEnv], files: list[tuple[str, str]], cwd: str, python: str,
                       here: tuple[str, str] | None) -> Check:
    """The remote-env check's verdict from each host's answer: a missing directory, interpreter, import or file fails
    it (one line: what, where, on which hosts; the fix: a shared filesystem, or rsync and the same install);
    versions other than this node's (`here`: deepspeed's, torch's) pass with advice; hosts ssh could not ask make it
    not checked where nothing failed (the ssh check says why ssh fails)."""
    problems: dict[str, list[str]] = {}
    versions: dict[tuple[str, str], list[str]] = {}
    missing: dict[str, None] = {}
    lacking: list[str] = []  # the hosts without some path, the first of which the rsync example names
    no_env = False
    for host, r in results.items():
        if r.why:
            continue
        if r.cwd is False:
            problems.setdefault(f"no working directory {cwd}", []).append(host)
            missing[cwd], lacking = None, lacking + [host]
        if r.python is False or r.import_error:
            no_env = True
            problems.setdefault(f"no interpreter {python}" if r.python is False else
                                f"{python} cannot import torch and deepspeed ({r.import_error})", []).append(host)
        elif r.versions is not None and here is not None and r.versions != here:
            versions.setdefault(r.versions, []).append(host)
        for (what, path), ok in zip(files, r.files):
            if ok is False:
                problems.setdefault(f"no {what} {path}", []).append(host)
                missing[path], lacking = None, lacking + [host]
    unasked = [f"{h} ({r.why})" for h, r in results.items() if r.why]
    asked = [h for h, r in results.items() if not r.why]
    ours = f"deepspeed {here[0]}, torch {here[1]}" if here else "torch and deepspeed"
    install = (f"`{shlex.quote(python)} -m pip install deepspeed=={here[0]} torch=={here[1]}`" if here else
               f"`{shlex.quote(python)} -m pip install torch deepspeed`")
    notes = [f"{_hosts_named(hosts)} {'has' if len(hosts) == 1 else 'have'} deepspeed {ds}, torch {torch} (here "
             f"{ours})" for (ds, torch), hosts in versions.items()]
    fixes = [(f"install this node's versions on every node ({install}): ranks of other DeepSpeed or torch versions "
              "can hang at the rendezvous or in a collective")] if versions else []
    if unasked:
        notes.append("not checked on " + _hosts_named(unasked))
    if problems:
        if no_env:
            fixes.insert(0, f"install the same environment at {python} there: DeepSpeed's runner starts that "
                            f"interpreter by its path (the same venv or conda path, with {ours}: {install})")
        if missing:  # a file inside a missing directory comes with it
            copied = [p for p in missing if not any(p.startswith(d.rstrip("/") + "/") for d in missing if d != p)]
            fixes.insert(0, "every node needs these paths as they are here (DeepSpeed's runner starts the ranks by "
                            "this node's paths): put them on a filesystem every node mounts, or copy them, e.g. "
                            f"`rsync -aR {' '.join(shlex.quote(p) for p in copied)} {lacking[0]}:/`")
        detail = "; ".join([f"{what} on {_hosts_named(hosts)}" for what, hosts in problems.items()] + notes)
        return Check("remote env", False, detail, "; ".join(fixes))
    paths = ", ".join([cwd, python] + [path for _, path in files])
    passed = [f"{_hosts_named(asked)} {'has' if len(asked) == 1 else 'have'} {paths}"
              + ("" if versions or not here else f" ({ours}, as here)")] if asked else []
    if unasked:
        return NotChecked("remote env", True, "; ".join(notes[-1:] + passed + notes[:-1]),
                          "; ".join([f"once ssh reaches them, rerun; each needs {paths}, with {ours}"] + fixes))
    return Check("remote env", True, "; ".join(passed + notes), "; ".join(fixes))


def probe_master_addr(addr: str) -> tuple[str | None, bool]:
    """(the address it resolves to, or None; whether this host can bind it, i.e. it is one of this host's)."""
    try:
        infos = socket.getaddrinfo(addr, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return None, False
    for family, _, _, _, sockaddr in infos:
        with contextlib.suppress(OSError), socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((sockaddr[0], 0))
            return sockaddr[0], True
    return infos[0][4][0], False


def check_master_addr(t: Target) -> Check | None:
    """No-ssh mode: every node must reach node 0 at --master-addr, and on node 0 it must be one of its own."""
    if not t.no_ssh or not t.master_addr:
        return None
    ip, local = probe_master_addr(t.master_addr)
    if ip is None:
        return Check("master address", False, f"{t.master_addr} does not resolve on this host",
                     "pass --master-addr as an IP address or a name every node resolves (node 0's)")
    if t.node_rank == 0 and not local:
        return Check("master address", False, f"{t.master_addr} ({ip}) is not an address of this host, but "
                     "--node-rank 0 runs the rendezvous here", "pass node 0's own address as --master-addr on every "
                     "node, or run --node-rank 0 on the host that has it")
    where = "this host's" if local else "node 0's"
    return Check("master address", True, f"{t.master_addr} ({ip}), {where}")


def check_master_port(t: Target) -> Check | None:
    fix = f"pass --master-port with a free port (e.g. {t.master_port + 1}), or stop the job holding it"
    if t.hosts_rendezvous:
        if probe_port_free(t.master_port):
            return Check("master port", True, f"{t.master_port} is free")
        return Check("master port", False, f"{t.master_port} is in use on this host", fix)
    if t.no_ssh or t.launcher == "slurm":
        return None  # the rendezvous listens on node 0, which this host does not reach by ssh
    host = next(iter(t.hosts))  # rank 0's node, which the runner reaches by ssh (check_ssh)
    busy, why = probe_remote_port(host, t.master_port, ssh_port=t.ssh_port)
    if busy is None:
        return NotChecked("master port", True, f"{t.master_port} on {host} (rank 0's node): not checked ({why})")
    if busy:
        return Check("master port", False, f"{t.master_port} is in use on {host}, rank 0's node", fix)
    return Check("master port", True, f"{t.master_port} is free on {host}, rank 0's node")


REMOTE_PORT_PROBE = ("bash -c '(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null || (exec 3<>/dev/tcp/::1/{port}) "
                     "2>/dev/null' && echo busy || echo free")
"""Run on rank 0's node: whether something listens on the port there (a connection opens), over loopback IPv4 or
IPv6, with bash's /dev/tcp (no Python needed on that PATH). A port held only by a finished job's connections
(TIME_WAIT) opens none, and is free for the rendezvous, as `probe_port_free` has it."""


def probe_remote_port(host: str, port: int, ssh_port: int | None = None) -> tuple[bool | None, str]:
    """(whether `port` is in use on `host`, or None where ssh could not ask; why not), asked over ssh as
    `probe_ssh` asks (BatchMode, no prompt, a short timeout, `ssh_port`)."""
    r = _ssh(host, REMOTE_PORT_PROBE.format(port=int(port)), ssh_port)
    if isinstance(r, str):
        return None, r if r.startswith("ssh") else "ssh " + r
    answer = (r.stdout.strip().splitlines() or [""])[-1]
    if r.returncode != 0 or answer not in ("busy", "free"):
        return None, "ssh failed: " + ((r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1])[:120]
    return answer == "busy", ""


CHECKS: tuple[Callable[[Target], Check | None], ...] = (
    check_imports,
    check_cuda_toolkit,
    check_accelerator,
    check_cpu_threads,
    check_core_binding,
    check_dtypes,
    check_config_lint,
    check_batch_size,
    check_plan_fits,
    check_plan_gpus,
    check_plan_config,
    check_cpu_adam,
    check_async_io,
    check_shm_comm,
    check_ninja,
    check_extension_locks,
    check_nvme,
    check_shm,
    check_ram,
    check_hostfile,
    check_launcher,
    check_ssh,
    check_remote_env,
    check_master_addr,
    check_master_port,
)
NEEDS_DEEPSPEED = {check_cuda_toolkit, check_accelerator, check_cpu_threads, check_core_binding, check_dtypes,
                   check_cpu_adam,
                   check_async_io, check_shm_comm, check_ninja}


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """DeepSpeed logs to fd 1 on import and JIT builds print there: keep stdout for our report (and JSON)."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


class _CpuAcceleratorNotice(logging.Filter):
    """DeepSpeed's import logs "Setting accelerator to CPU. If you have GPU ..." on every host without GPUs; the
    accelerator check says the same in its own line (the ranks run on the CPU accelerator)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Setting accelerator to CPU")


@contextlib.contextmanager
def _quiet_deepspeed_import() -> Iterator[None]:
    """Drop that one line of DeepSpeed's logger ("DeepSpeed", deepspeed.utils.logging), which the import in
    check_imports writes; its other warnings and errors still print."""
    logger, notice = logging.getLogger("DeepSpeed"), _CpuAcceleratorNotice()
    logger.addFilter(notice)
    try:
        yield
    finally:
        logger.removeFilter(notice)


@contextlib.contextmanager
def deepspeed_quietly() -> Iterator[None]:
    """Around code that imports DeepSpeed or runs its helpers: what they write to fd 1 goes to stderr (stdout is
    zerokit's report, or its JSON), and DeepSpeed's CPU-accelerator notice is dropped."""
    with _stdout_to_stderr(), _quiet_deepspeed_import():
        yield


def run_checks(target: Target) -> list[Check]:
    """Every applicable check, in table order. Checks that need torch/deepspeed are skipped when they are missing."""
    results: list[Check] = []
    with deepspeed_quietly():
        for check in CHECKS:
            if check in NEEDS_DEEPSPEED and results and results[0].name == "imports" and not results[0].ok:
                continue
            try:
                result = check(target)
            except Exception as e:  # noqa: BLE001 -- a probe that breaks is a failed check, not a crash
                name = check.__name__.removeprefix("check_").replace("_", " ")
                result = Check(name, False, f"check crashed: {type(e).__name__}: {e}".splitlines()[0],
                               "rerun with ZEROKIT_DEBUG=1 and report it")
            if result is not None:
                results.append(result)
    return results


def run_job_checks(target: Target, spec: Any) -> list[Check]:
    """`run_checks`, then the one check that needs the launch's `runner.LaunchSpec` (`check_filter_devices`): what
    `zerokit preflight` shows and what `zerokit launch` runs first, the same list, so that a job one refuses (exit 3)
    the other does not pass."""
    checks = run_checks(target)
    filtered = check_filter_devices(spec)
    return checks + ([filtered] if filtered is not None else [])


def as_json(checks: list[Check]) -> dict[str, Any]:
    """CONTRACT.md's `{"ok", "checks": [{"name", "ok", "detail", "fix"}]}`, each check with "checked" too: false
    for one the preflight could not make from here (`NotChecked`, whose ok is true)."""
    return {"ok": all(c.ok for c in checks),
            "checks": [{**asdict(c), "checked": not isinstance(c, NotChecked)} for c in checks]}


NOT_CHECKED_MARK = "-"
"""`format_text`'s mark of a check not made (`NotChecked`), beside ✓ and ✗."""


def format_text(checks: list[Check]) -> str:
    """Numbered lines, ✓ or ✗ (or `NOT_CHECKED_MARK`), with the fix under each failure (advice, under a pass or a
    check not made that has one)."""
    width = len(str(len(checks)))
    lines = []
    for i, c in enumerate(checks, 1):
        mark = NOT_CHECKED_MARK if isinstance(c, NotChecked) else "✓" if c.ok else "✗"
        lines.append(f"{i:>{width}}. {mark} {c.name}: {printable(c.detail)}")  # paths as typed
        if c.fix:
            lines.append(f"{' ' * (width + 4)}{'fix' if not c.ok else 'advice'}: {printable(c.fix)}")
    failed = sum(not c.ok for c in checks)
    skipped = sum(isinstance(c, NotChecked) for c in checks)
    made = len(checks) - skipped
    lines.append(f"preflight: {made - failed}/{made} passed" + (f", {failed} failed" if failed else "")
                 + (f", {skipped} not checked" if skipped else ""))
    return "\n".join(lines)


def check_input_file(path: str | None, what: str) -> None:
    """A file the job reads (the config, the script): it must be a regular file. Read errors come from its readers."""
    if path is None:
        return
    if not path.strip():
        raise BadInput(f"{what} is empty; give a file path")
    import stat

    from zerokit.fileio import kind

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise BadInput(f"{what} {path}: no such file") from None
    except OSError as e:  # a symlink loop, a permission
        raise BadInput(f"{what} {path}: cannot read it ({e.strerror})") from None
    if not stat.S_ISREG(mode):
        raise BadInput(f"{what} {path}: is {kind(mode)}, not a regular file")


def read_config(path: str, option: str = "--config") -> dict[str, Any]:
    """The ds_config as DeepSpeed reads it (JSON, or HJSON), parsed by lint's loader: launch, preflight and lint
    refuse the same files (empty, malformed, not an object) for the same reasons. `option`: how the user named it
    (launch: the script's own `--deepspeed`, say)."""
    return read_config_document(path, option).data


def read_config_document(path: str, option: str = "--config") -> Any:
    """`read_config`'s lint Document (the data, each key's position, the syntax): read once, it is what the job
    trains with and what the config check lints (`Target.document`), so the two cannot be two versions of a file
    that changed between reads."""
    from zerokit.fileio import read_bytes
    from zerokit.lint.loader import LoadError, load_bytes

    check_input_file(path, option)
    raw = read_bytes(path, option)
    try:
        doc = load_bytes(raw, path, yaml_syntax=False)
    except LoadError as e:
        where = f" (line {e.line}, column {e.column})" if (e.line, e.column) != (1, 1) else ""
        raise BadInput(f"{option} {path}: {e.reason}{where}; fix the file, or write one with "
                       "`zerokit plan ... -o ds_config.json`") from None
    doc.base_dir = Path(path).resolve().parent  # as lint's load_file sets it
    return doc


def read_json(path: str, what: str) -> dict[str, Any]:
    """A JSON (or HJSON, as DeepSpeed accepts) object from a regular file of sane size; BadInput otherwise."""
    import json

    from zerokit.fileio import read_text

    text = read_text(path, what)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        try:
            import hjson

            data = hjson.loads(text)
        except Exception as e:  # noqa: BLE001 -- hjson raises its own error types
            reason = (str(e).splitlines() or [type(e).__name__])[0][:120]
            raise BadInput(f"{what} {path} is neither JSON nor HJSON: {reason}") from None
    if not isinstance(data, dict):
        raise BadInput(f"{what} {path} must hold a JSON object")
    return dict(data)


PLAN_SIZES = ("per_gpu", "per_node_cpu", "nvme")
"""The plan's `memory.<block>.total` byte counts the checks compare against (GPU, host RAM, NVMe), each >= 0."""
PLAN_HARDWARE = (("gpu_memory_bytes", MAX_SIZE), ("gpus_per_node", MAX_SLOTS), ("nodes", None), ("world_size", None))
"""The plan's `hardware` figures its sizes were computed for, each a whole number >= 1 (with its ceiling)."""


PLAN_DECISION: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("fits", lambda v: isinstance(v, bool), "true or false"),
    ("zero_stage", lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 3, "0, 1, 2 or 3"),
    ("offload_optimizer", lambda v: v in OFFLOAD_DEVICES, "none, cpu or nvme"),
    ("offload_param", lambda v: v in OFFLOAD_DEVICES, "none, cpu or nvme"),
    ("micro_batch_size", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1, "a whole number >= 1"),
)
"""The plan's `decision` fields the checks compare the job and the config with."""


def plan_problems(plan: dict[str, Any]) -> list[str]:
    """Every field of a plan JSON that launch and preflight read and that no `zerokit plan` writes, one phrase each.
    A field left out is absent (its check is skipped); one of the wrong type or value is not a plan's."""
    import json

    def shown(value: Any) -> str:
        text = json.dumps(value)
        return text if len(text) <= 40 else text[:37] + "..."

    def whole(value: Any, low: int, high: int | None) -> bool:
        return (isinstance(value, int) and not isinstance(value, bool) and value >= low
                and (high is None or value <= high))

    problems = []
    memory, hardware = plan["memory"], plan["hardware"]
    for block in PLAN_SIZES:
        if block not in memory:
            continue
        if not isinstance(memory[block], dict):
            problems.append(f"memory.{block} must be an object {{total: bytes, ...}}, got {shown(memory[block])}")
        elif "total" in memory[block] and not whole(memory[block]["total"], 0, MAX_SIZE):
            problems.append(f"memory.{block}.total must be a whole number of bytes >= 0, got "
                            f"{shown(memory[block]['total'])}")
    for key, high in PLAN_HARDWARE:
        if key in hardware and not whole(hardware[key], 1, high):
            what = "a whole number of bytes >= 1" if key.endswith("_bytes") else (
                f"a whole number from 1 to {high}" if high else "a whole number >= 1")
            problems.append(f"hardware.{key} must be {what}, got {shown(hardware[key])}")
    shape = [hardware.get(key) for key in ("gpus_per_node", "nodes", "world_size")]
    if all(whole(n, 1, None) for n in shape) and shape[0] * shape[1] != shape[2]:
        problems.append(f"hardware.world_size is {shape[2]}, not gpus_per_node x nodes = {shape[0] * shape[1]}")
    decision = plan.get("decision")
    if decision is not None and not isinstance(decision, dict):
        problems.append(f"decision must be an object {{zero_stage, ..., fits}}, got {shown(decision)}")
    for key, ok, what in PLAN_DECISION:
        if isinstance(decision, dict) and key in decision and not ok(decision[key]):
            problems.append(f"decision.{key} must be {what}, got {shown(decision[key])}")
    return problems


def read_plan(path: str) -> dict[str, Any]:
    """`zerokit plan --format json` output (CONTRACT.md: decision, memory, hardware ...); BadInput for any other
    JSON object, whose sizes would silently add no checks, and for fields of the wrong type or value."""
    data = read_json(path, "--plan")
    missing = [key for key in ("memory", "hardware") if not isinstance(data.get(key), dict)]  # what the checks read
    if missing:
        raise BadInput(f"--plan {path} is not `zerokit plan --format json` output (no {', '.join(missing)}); write "
                       "one with `zerokit plan ... --format json > plan.json`")
    problems = plan_problems(data)
    if problems:
        raise BadInput(f"--plan {path}: {'; '.join(problems)}; write it again with `zerokit plan ... --format json > "
                       "plan.json`")
    return data


def make_target(config: str | None = None, plan: str | None = None, hosts: dict[str, int] | None = None,
                hostfile: str | None = None, gpus_per_node: int | None = None, launcher: str = "pdsh",
                master_port: int = 29500, no_ssh: bool = False, node_rank: int | None = None,
                master_addr: str | None = None, env: dict[str, str] | None = None, nodes: int | None = None,
                include: str | None = None, exclude: str | None = None, document: Any = None,
                bind_cores_to_rank: bool = False, bind_core_list: str | None = None, remote: bool = False,
                ssh_port: int | None = None, script_argv: list[str] | None = None,
                python: str | None = None) -> Target:
    """Read the config and plan files and describe the job the checks check against: `hosts` (or the hostfile's)
    narrowed to the hosts and ranks the runner will use (`runner.select_hosts`). `document`: the config as the
    caller already read it (`read_config_document`; launch reads it before anything starts), not read again.
    `remote`: the job's `runner.LaunchSpec.remote_shell` (`Target.remote`). `ssh_port`: launch --ssh-port, which the
    ssh checks use as the runner does. `script_argv`: the script and its arguments as the runner passes them
    (`runner.script_argv`); `python`: the runner's interpreter (`runner.runner_python`): what every node must have."""
    if config is not None and document is None:
        document = read_config_document(config)
    ds_config = document.data if document is not None else {}
    plan_data = read_plan(plan) if plan is not None else None
    asked = gpus_per_node  # what the runner gets (--num_gpus): the hosts' slots stand without it
    if plan_data is not None and gpus_per_node is None:
        gpus_per_node = plan_data["hardware"].get("gpus_per_node")  # read_plan checked it
    if hostfile and not hosts:
        from zerokit.launch.hostfile import read_hostfile

        with contextlib.suppress(BadInput):  # the hostfile check reports what is wrong with it
            hosts = read_hostfile(hostfile)
    if hosts:  # --no-ssh too: DeepSpeed's --node_rank indexes the hosts left after the filters
        from zerokit.launch.runner import select_hosts  # here, as parse_resource_filter is: the runner module

        hosts = select_hosts(hosts, nodes, include, exclude, asked)
    elif include is not None:  # one node: the ranks --include names on it, where it names slots
        from zerokit.launch.runner import parse_resource_filter

        picked = parse_resource_filter(include)
        hosts = {h: len(set(slots)) for h, slots in picked.items()} if all(picked.values()) else {}
    return Target(needs=needs_from_config(ds_config, plan_data), gpus_per_node=gpus_per_node, hostfile=hostfile,
                  hosts=dict(hosts or {}), launcher=launcher, master_port=master_port, no_ssh=no_ssh,
                  node_rank=node_rank, master_addr=master_addr, env=dict(env or {}), config=ds_config,
                  config_file=config, document=document, plan=plan_data, bind_cores_to_rank=bind_cores_to_rank,
                  bind_core_list=bind_core_list, remote=remote, ssh_port=ssh_port,
                  script=script_argv[0] if script_argv else None, script_args=tuple(script_argv or ())[1:],
                  python=python)


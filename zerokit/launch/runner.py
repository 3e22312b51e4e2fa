"""The `deepspeed` runner's command line as data, and the one function that starts it.

`build_command(spec) -> (argv, env)` is pure, so tests assert on the exact command without spawning
anything; `run(argv, env)` is the only place that touches subprocess. It behaves like a well-mannered
foreground process: output streams through, the job's exit code becomes ours, and SIGINT/SIGTERM stop every
rank (through DeepSpeed's own launcher where there is one, else by the runner's whole process group), so no rank
outlives zerokit.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zerokit._dataclass import dataclass
from zerokit.errors import BadInput
from zerokit.launch.hostfile import MAX_SLOTS, read_hostfile, validate_hostname
from zerokit.launch.render import render

if TYPE_CHECKING:
    from zerokit.launch.watch import NodeWatch

LAUNCHERS = ("pdsh", "openmpi", "mvapich", "slurm", "mpich", "impi")
DEFAULT_MASTER_PORT = 29500
MPI_LAUNCHERS = ("openmpi", "mvapich", "mpich", "impi")
"""DeepSpeed's MPI backends run every slot of the hostfile: their validate_args refuse --num_nodes, --num_gpus,
--include and --exclude (deepspeed/launcher/multinode_runner.py)."""
EQUAL_SLOTS_LAUNCHERS = ("mvapich", "mpich", "impi", "slurm")
"""Backends that start the same number of ranks on every node (mpirun -ppn; srun's validate_active_resources)."""
DISCOVERY_LAUNCHERS = ("openmpi", "mvapich", "slurm")
"""Backends whose command never passes MASTER_ADDR/MASTER_PORT: the ranks find rank 0 through DeepSpeed's
mpi_discovery (mpi4py; rank 0's `hostname -I`, port 29500; deepspeed/comm/comm.py)."""
BINDING_LAUNCHERS = ("impi",)
"""Multi-node backends whose command binds the ranks to cores under --bind_cores_to_rank (numactl before each rank,
OMP_NUM_THREADS its share); pdsh's, openmpi's, mpich's, mvapich's and slurm's drop the flag without a word
(deepspeed/launcher/multinode_runner.py). One node, and each node of a --no_ssh job, binds in DeepSpeed's launch.py."""
DEEPSPEED_DEFAULT_HOSTFILE = "/job/hostfile"
"""The hostfile DeepSpeed's runner reads when it is given none (launcher/runner.py DLTS_HOSTFILE): where it exists, a
one-node launch is pointed at /dev/null instead (not a regular file: the runner takes the machine's devices)."""
GRACE_SECONDS = 10.0
"""After forwarding SIGINT/SIGTERM, how long the ranks get to exit before the process group is SIGKILLed."""

# DeepSpeed writes .deepspeed_env values into `export K=V;` for pdsh and wraps anything outside this set in
# double quotes, where $(...) would still expand: values are held to this set instead.
_SHELL_SAFE = re.compile(r"[\w@%+=:,./-]*")
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SLOT = re.compile(r"[0-9]{1,4}")
_FILTER_HOW = "write it like localhost:0,1 or worker-0@worker-1:0,2"


@dataclass(frozen=True)
class LaunchSpec:
    """Everything `zerokit launch` needs to start one job; `None` means "the runner's default"."""

    script: str
    """The training script the ranks run."""
    script_args: tuple[str, ...] = ()
    """Arguments for the script; `--deepspeed CONFIG` is appended unless they already name that config (another one
    is refused: `check_script_config`)."""
    config: str | None = None
    """The ds_config; reaches the script as `--deepspeed PATH` (the HF Trainer convention)."""
    gpus_per_node: int | None = None
    """Ranks per node (GPUs; on a host without GPUs, ranks on DeepSpeed's CPU accelerator)."""
    nodes: int | None = None
    """Use the first N hosts of the hostfile."""
    include: str | None = None
    """DeepSpeed's resource filter, e.g. `localhost:0,1` or `worker-0@worker-1:0,2`."""
    exclude: str | None = None
    """DeepSpeed's `--exclude`: the ranks not to use, in --include's grammar (e.g. `worker-1:0` or `worker-1`)."""
    hostfile: str | None = None
    """A DeepSpeed hostfile (`HOST slots=N` lines); makes the launch multi-node."""
    hosts: tuple[tuple[str, int], ...] = ()
    """Hosts and slots from `--hosts`; zerokit writes the hostfile for them."""
    launcher: str = "pdsh"
    """How the runner reaches the other nodes: pdsh, openmpi, mvapich, slurm, mpich or impi."""
    master_addr: str | None = None
    """Address of rank 0's node; default: the first address `ssh HOST hostname -I` prints for the job's first host
    (DeepSpeed's runner asks it), 127.0.0.1 on one node."""
    master_port: int = DEFAULT_MASTER_PORT
    """TCP port of the rendezvous on the master node."""
    env: tuple[tuple[str, str], ...] = ()
    """Variables every rank sees; on many nodes they travel through `.deepspeed_env`."""
    files_dir: str = ".zerokit"
    """Where the written hostfile and .deepspeed_env go."""
    runner: str = "deepspeed"
    """The runner executable."""
    extra_runner_args: tuple[str, ...] = field(default_factory=tuple)
    """Passed to the runner before the script (e.g. `--ssh_port 2222`)."""
    no_ssh: bool = False
    """DeepSpeed's no-ssh mode: the same command runs on every node (Kubernetes, srun), each with its --node-rank;
    the runner starts only this node's ranks."""
    node_rank: int | None = None
    """This node's index in the hostfile (0 = the master's node), with no_ssh."""
    visible_devices: str | None = None
    """CUDA_VISIBLE_DEVICES as the launch found it on a machine with GPUs (`visible_devices`), None where unset: the
    GPUs a one-node job's ranks may use, which the command keeps (`build_command`)."""
    bind_cores_to_rank: bool = False
    """DeepSpeed's --bind_cores_to_rank: each local rank runs under numactl on its own share of the node's cores, with
    OMP_NUM_THREADS that share (DeepSpeed's ZeRO-Offload tutorial advises it where CPU Adam steps the optimizer)."""
    bind_core_list: str | None = None
    """DeepSpeed's --bind_core_list (`0-31,64-95`): the cores shared out instead of all the node's physical ones."""
    ssh_port: int | None = None
    """The nodes' ssh port (DeepSpeed's --ssh_port); None: ssh's own (22, or what ~/.ssh/config gives the host).
    DeepSpeed's runner uses it for its ssh check and its `hostname -I` probe whatever the backend, and gives it to
    pdsh's ssh; mpirun's ssh never gets it (`check_mpirun_ssh_port`)."""
    launcher_args: str | None = None
    """Extra arguments for the backend's command (pdsh, mpirun, srun): DeepSpeed's --launcher_args, one string that it
    splits as a shell would (shlex) and adds after its own."""

    @property
    def multi_node(self) -> bool:
        """Whether DeepSpeed takes its multi-node path (a hostfile: ssh check, launcher); a job whose only host is
        this machine takes the single-node one instead (see `local_only`)."""
        return (bool(self.hostfile or self.hosts) or (self.nodes or 1) > 1) and not self.local_only

    @property
    def local_only(self) -> bool:
        """--hosts/--hostfile name one host, this machine: DeepSpeed would still ssh to it whenever a hostfile is
        given (runner.py's ssh check), so the job runs without one, on DeepSpeed's single-node path."""
        if self.no_ssh or (self.nodes or 1) > 1:
            return False
        hosts = self.known_hosts
        return len(hosts) == 1 and is_this_host(next(iter(hosts)))

    @property
    def local_slots(self) -> int | None:
        """The slots --hosts/--hostfile give this machine when it is the job's only host (`local_only`), else None."""
        return next(iter(self.known_hosts.values())) if self.local_only else None

    @functools.cached_property
    def known_hosts(self) -> dict[str, int]:
        """`{host: slots}` of --hosts or a readable --hostfile; `{}` when zerokit cannot know them. Read once per
        spec: `local_only`, and so `multi_node`, ask it on every use."""
        if self.hosts:
            return dict(self.hosts)
        if self.hostfile:
            with contextlib.suppress(BadInput, OSError):  # a broken hostfile is the preflight's to describe
                return read_hostfile(self.hostfile)
        return {}

    @property
    def remote_shell(self) -> bool:
        """Whether the command and the env values pass through a remote shell (pdsh/ssh, MPI's rsh)."""
        return self.multi_node and not self.no_ssh

    @property
    def written_hostfile(self) -> str:
        return str(Path(self.files_dir).absolute() / "hostfile")

    @property
    def env_file(self) -> str:
        return str(Path(self.files_dir).absolute() / ".deepspeed_env")


VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
"""The variable DeepSpeed's CUDA accelerator reads the visible GPUs from (`visible_devices_envs`)."""


def visible_devices(environ: dict[str, str] | os._Environ, gpus_present: bool) -> str | None:
    """CUDA_VISIBLE_DEVICES where it picks GPUs: set, not empty, on a machine with GPUs. DeepSpeed's CPU accelerator
    reads the same variable but counts NUMA nodes, not its ids, so without GPUs it means nothing to the ranks."""
    value = environ.get(VISIBLE_DEVICES, "").strip()
    return value if value and gpus_present else None


GPU_DEVICE_NODES = ("/dev/nvidiactl", "/dev/kfd")
"""NVIDIA's and AMD's (ROCm) device nodes: a machine with GPUs for its ranks."""


def gpus_present() -> bool:
    """Whether this machine has NVIDIA or AMD GPU device nodes (and DS_ACCELERATOR does not pick another
    accelerator): where CUDA_VISIBLE_DEVICES picks the ranks' GPUs."""
    if os.environ.get("DS_ACCELERATOR", "cuda") != "cuda":
        return False
    return any(os.path.exists(node) for node in GPU_DEVICE_NODES)


def kept_devices(spec: LaunchSpec) -> list[int] | None:
    """The GPU ids a one-node job's ranks get under CUDA_VISIBLE_DEVICES, where the command must name them; None
    where DeepSpeed's runner reads the variable itself or it does not apply.

    DeepSpeed's runner honours CUDA_VISIBLE_DEVICES only without --num_gpus/--include/--exclude, and deletes it
    either way (deepspeed/launcher/runner.py main()): `--gpus-per-node 4` under CUDA_VISIBLE_DEVICES=4,5,6,7
    would start its ranks on GPUs 0-3, beside whatever job holds them. The ranks are the first N visible ids,
    passed as `--include localhost:...` instead."""
    if spec.visible_devices is None or spec.multi_node or spec.no_ssh or spec.include is not None \
            or spec.exclude is not None:
        return None
    ranks = spec.gpus_per_node or spec.local_slots
    if ranks is None:
        return None  # no --num_gpus: the runner turns the variable into --include itself
    value = spec.visible_devices
    ids = value.split(",")
    if not all(_SLOT.fullmatch(i.strip()) for i in ids):
        raise BadInput(f"{VISIBLE_DEVICES}={value} names GPUs by something other than an index (a UUID, a MIG "
                       "device), which DeepSpeed's runner cannot pass on: it would start the ranks on GPUs 0 to "
                       f"{ranks - 1}; give the indexes, e.g. {VISIBLE_DEVICES}=2,3, or --include localhost:2,3")
    kept = [int(i) for i in ids]
    if ranks > len(kept):
        asked = f"--gpus-per-node {ranks}" if spec.gpus_per_node else f"{ranks} slots for this host"
        raise BadInput(f"{asked}, but {VISIBLE_DEVICES}={value} leaves {len(kept)} GPU{'s' if len(kept) > 1 else ''}"
                       f" visible; ask for {len(kept)}, or widen {VISIBLE_DEVICES}")
    return kept[:ranks]


def is_this_host(host: str) -> bool:
    """localhost, 127.0.0.1 or this machine's hostname (short or full)."""
    name = socket.gethostname()
    return host in ("localhost", "127.0.0.1", name, name.split(".")[0])


HOSTS_FILE = "/etc/hosts"
"""Where a cluster's node names often map to addresses (`is_this_machine` reads it instead of asking DNS)."""


def is_this_machine(host: str, hosts_file: str = HOSTS_FILE) -> bool:
    """`is_this_host`, or an IP address of this machine's (one a socket here can bind), or a name `hosts_file` maps to
    one: where a rank listed under that host runs here, whichever path DeepSpeed takes to start it (its own ssh to
    this machine included). A name is never sent to DNS, which could wait on every host of the job."""
    import ipaddress

    if is_this_host(host):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return any(_is_this_address(a) for a in _addresses_in(hosts_file, host))
    return _is_this_address(address)


def _addresses_in(hosts_file: str, name: str) -> tuple[Any, ...]:
    """The addresses `hosts_file` gives `name`, as ipaddress objects; none where the file cannot be read. The file is
    read once while it is unchanged (`_hosts_table`), not once per host of the job."""
    try:
        st = os.stat(hosts_file)
    except OSError:
        return ()
    return _hosts_table(hosts_file, st.st_mtime_ns, st.st_size).get(name, ())


@functools.lru_cache(maxsize=4)
def _hosts_table(hosts_file: str, mtime_ns: int, size: int) -> dict[str, tuple[Any, ...]]:
    """{name: its addresses} of a file in the /etc/hosts format (an address, then its names; `#` starts a comment),
    keyed by the file's modification time and size too, so an edited file is read again."""
    import ipaddress

    try:
        with open(hosts_file, encoding="utf-8", errors="replace") as f:
            lines = f.read(1 << 20).splitlines()
    except OSError:
        return {}
    table: dict[str, tuple[Any, ...]] = {}
    for line in lines:
        address, *names = line.split("#", 1)[0].split() or [""]
        try:
            parsed = ipaddress.ip_address(address.split("%", 1)[0])
        except ValueError:
            continue
        for name in names:
            table[name] = (*table.get(name, ()), parsed)
    return table


def _is_this_address(address: Any) -> bool:
    """Whether a socket here can bind `address` (an ipaddress object): one of this machine's, loopback included."""
    family = socket.AF_INET if address.version == 4 else socket.AF_INET6
    try:  # a machine without IPv6 refuses the socket itself
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((str(address), 0))
    except OSError:
        return False
    return True


CONFIG_FLAGS = ("--deepspeed", "--deepspeed_config", "--deepspeed-config", "--deepscale_config",
                "--deepspeed_config_file", "--deepspeed-config-file")
"""How a training script is told its DeepSpeed config: the HF Trainer's `--deepspeed PATH`, DeepSpeed's
`add_config_arguments` (`--deepspeed_config PATH`, its old `--deepscale_config`; its `--deepspeed` is a bare flag
there) and Accelerate's `--deepspeed_config_file PATH` for a script that passes it on itself."""


def named_configs(args: tuple[str, ...] | list[str]) -> list[tuple[str, str | None]]:
    """`(flag, value)` for each config option in the script's arguments, as argparse reads them: options before any
    `--`, the value after `=` or in the next word unless that word is an option (then, or at the end, None: a bare
    flag such as DeepSpeed's `--deepspeed`)."""
    options = list(args[:args.index("--")] if "--" in args else args)
    found: list[tuple[str, str | None]] = []
    i = 0
    while i < len(options):
        name, eq, value = options[i].partition("=")
        if name in CONFIG_FLAGS:
            if eq:
                found.append((name, value))
            elif i + 1 < len(options) and not options[i + 1].startswith("-"):
                found.append((name, options[i + 1]))
                i += 1
            else:
                found.append((name, None))
        i += 1
    return found


def names_config(args: tuple[str, ...] | list[str]) -> bool:
    """Whether the script's arguments already pass a DeepSpeed config file (as an option, before any `--`; a bare
    flag such as DeepSpeed's `--deepspeed` names none)."""
    return any(value is not None for _, value in named_configs(args))


def check_script_config(spec: LaunchSpec) -> None:
    """A config the script's own arguments name must be --config's file: the preflight checks --config, and the
    training would read the other one unchecked (HF's `--deepspeed` also takes inline JSON, never --config's)."""
    from zerokit.fileio import same_path

    if not spec.config:
        return
    for flag, value in named_configs(spec.script_args):
        if value is None or ("\0" not in value and same_path(value, spec.config)):  # a NUL names no file
            continue
        shown = shlex.quote(value if len(value) <= 60 else value[:57] + "...")
        inline = value.lstrip().startswith("{")  # HfTrainerDeepSpeedConfig reads a dict given as JSON text
        if flag == "--deepspeed":  # what zerokit appends: dropping it is enough
            fix = f"drop {flag} {shown} from the script's arguments (zerokit passes --config's file as {flag})"
        else:  # a script that reads another flag may not take --deepspeed: name one file there
            fix = f"give {flag} {shlex.quote(spec.config)} in the script's arguments"
        if not inline:
            fix += f", or pass --config {shown} to check that one"
        raise BadInput(f"the script's arguments name another DeepSpeed config than --config {spec.config} "
                       f"({flag} {shown}): the training would read it, and the preflight checks --config; {fix}")


def script_config(args: tuple[str, ...] | list[str]) -> tuple[str | None, str, str | None]:
    """(the config file the script's arguments name, its option, why none is checked): with no --config, the file
    a single config option names is the job's config and the preflight checks it, as it checks --config's. None
    when they name none; with a reason when they name it inline (HF's `--deepspeed` takes JSON text) or several."""
    named = [(flag, value) for flag, value in named_configs(args) if value is not None]
    inline = [v for _, v in named if v.lstrip().startswith("{")]
    files = list(dict.fromkeys((v, f) for f, v in named if v not in inline))
    if len({v for v, _ in files}) > 1:
        shown = ", ".join(f"{f} {shlex.quote(v)}" for v, f in files)
        return None, "", (f"the script's arguments name {len(files)} DeepSpeed configs ({shown}); none is checked: "
                          "pass --config with the one the training reads")
    if inline:
        return None, "", ("the DeepSpeed config the script's arguments give inline is not checked: write it to a file "
                          "and pass --config FILE")
    return (files[0][0], files[0][1], None) if files else (None, "", None)


def script_argv(spec: LaunchSpec) -> list[str]:
    """The script and its arguments, with `--deepspeed CONFIG` added unless they name one (--config's own file:
    `check_script_config`); before a `--`, after which argparse reads every word as a positional argument. A script
    whose arguments hold a bare `--deepspeed` parses DeepSpeed's `add_config_arguments`, where that is a switch and
    the file goes in `--deepspeed_config`: it gets that instead (`--deepspeed PATH` there fails its argparse)."""
    args = list(spec.script_args)
    if spec.config and not names_config(args):
        end = args.index("--") if "--" in args else len(args)
        switch = ("--deepspeed", None) in named_configs(args)
        args[end:end] = ["--deepspeed_config" if switch else "--deepspeed", str(Path(spec.config).absolute())]
    return [spec.script, *args]


def runner_python(runner: str | None = None) -> str:
    """The interpreter the `deepspeed` runner runs under, so its `sys.executable`, which DeepSpeed's multi-node backends
    start on every node by that very path (multinode_runner.py). `runner`: the runner executable (None: the one beside
    this Python, else on PATH). pip writes the environment's interpreter into the script's `#!` line (for a long path,
    a `#!/bin/sh` line and `'''exec' "PATH" "$0" "$@"`); `#!/usr/bin/env python3` takes it from PATH. This Python's own
    where the runner cannot be read."""
    if runner is None:
        beside = Path(sys.executable).parent / "deepspeed"
        runner = str(beside) if beside.exists() else "deepspeed"
    path = runner if os.sep in runner else shutil.which(runner)
    try:
        with open(path or "", "rb") as f:
            first, second = f.readline(4096), f.readline(4096)
    except OSError:
        return sys.executable
    words = first[2:].decode(errors="replace").split() if first.startswith(b"#!") else []
    if not words:
        return sys.executable
    if words[0] == "/bin/sh" and second.startswith(b"'''exec' "):
        with contextlib.suppress(ValueError, IndexError):
            return shlex.split(second.decode(errors="replace"))[1]
        return sys.executable
    if os.path.basename(words[0]) == "env":
        name = next((w for w in words[1:] if not w.startswith("-") and "=" not in w), None)
        return (shutil.which(name) if name else None) or sys.executable
    return words[0]


def validate(spec: LaunchSpec, launcher_limits: bool = True) -> None:
    """Refuse, with one line each, anything the runner would misread or a remote shell would execute.

    `launcher_limits`: also what the --launcher backend cannot do (off for the sbatch, whose runners use none)."""
    if spec.launcher not in LAUNCHERS:
        raise BadInput(f"--launcher {spec.launcher!r} is not one of {', '.join(LAUNCHERS)}")
    check_script_config(spec)
    if not 1 <= spec.master_port <= 65535:
        raise BadInput(f"--master-port must be 1-65535, got {spec.master_port}")
    if spec.master_addr is not None:
        validate_hostname(spec.master_addr)
    if spec.hostfile and spec.hosts:
        raise BadInput("give either --hostfile or --hosts, not both")
    if spec.include is not None and spec.exclude is not None:
        raise BadInput("give either --include or --exclude, not both (DeepSpeed refuses both)")
    for option, value in (("--include", spec.include), ("--exclude", spec.exclude)):
        if value is None:
            continue
        if spec.gpus_per_node is not None or spec.nodes is not None:
            raise BadInput(f"{option} picks the ranks itself; drop --gpus-per-node/--nodes (DeepSpeed refuses both)")
        parse_resource_filter(value, option)  # its grammar, with or without the job's hosts
        _check_filter(spec, option)
    if (spec.nodes or 1) > 1 and not (spec.hostfile or spec.hosts):
        raise BadInput(f"--nodes {spec.nodes} needs the nodes: give --hostfile FILE or --hosts node1:8,node2:8")
    if spec.nodes is not None and (spec.hostfile or spec.hosts):
        listed = len(spec.hosts)
        if spec.hostfile:
            with contextlib.suppress(BadInput):  # a broken hostfile is the preflight's to describe
                listed = len(read_hostfile(spec.hostfile))
        if listed and spec.nodes > listed:
            raise BadInput(f"--nodes {spec.nodes} is more than the {listed} host{'s' if listed > 1 else ''} given; "
                           f"list them all, or use --nodes {listed}")
    _check_gpus_per_node(spec)
    check_binding(spec, launcher_limits)
    if spec.launcher_args is not None:
        launcher_words(spec.launcher_args)
    if spec.no_ssh:
        for option, value, why in (("--ssh-port", spec.ssh_port, "nothing uses ssh"),
                                   ("--launcher-args", spec.launcher_args, "no launcher runs")):
            if value is not None:
                raise BadInput(f"{option} has no effect with --no-ssh: each node's runner starts its own ranks, and "
                               f"{why}; drop {option}")
    if spec.node_rank is not None and not spec.no_ssh:
        raise BadInput("--node-rank goes with --no-ssh (each node starts its own ranks); without --no-ssh the runner "
                       "reaches every node itself")
    if spec.no_ssh:
        if not (spec.hostfile or spec.hosts):
            raise BadInput("--no-ssh needs every node of the job: give --hosts node1:8,node2:8 or --hostfile FILE "
                           "(the same on every node)")
        if spec.node_rank is None:
            raise BadInput("--no-ssh needs --node-rank N: this node's line in the hostfile, counting from 0")
        if spec.master_addr is None:
            raise BadInput("--no-ssh needs --master-addr: the address of node 0, which every node can reach (without "
                           "ssh, DeepSpeed cannot ask node 0 for it)")
        if spec.hosts and not 0 <= spec.node_rank < min(len(spec.hosts), spec.nodes or len(spec.hosts)):
            raise BadInput(f"--node-rank {spec.node_rank} is not one of the job's "
                           f"{min(len(spec.hosts), spec.nodes or len(spec.hosts))} nodes (0 to "
                           f"{min(len(spec.hosts), spec.nodes or len(spec.hosts)) - 1})")
    for host, _ in spec.hosts:
        validate_hostname(host)
    _check_env_keys(spec.env)
    if spec.remote_shell and spec.env:
        _check_env_file(spec)
    for key, value in spec.env:
        if spec.remote_shell and not _SHELL_SAFE.fullmatch(value):
            raise BadInput(f"--env {key}: value {value!r} has shell characters; DeepSpeed's .deepspeed_env "
                           "cannot carry them to other nodes safely")
    if spec.remote_shell and launcher_limits:
        _check_launcher_limits(spec)
    if spec.remote_shell and spec.launcher == "pdsh":
        # pdsh joins the command into one string for a remote shell: every word must read as itself there.
        script, *args = script_argv(spec)
        for word, quoted in [(script, False), (str(Path.cwd()), False), *((arg, True) for arg in args)]:
            if not word:
                raise BadInput("an empty script argument would vanish on the nodes (DeepSpeed's pdsh command passes "
                               "it bare, and the remote shell drops it); give it a value, or use --launcher openmpi")
            if not pdsh_inert(word, quoted):
                raise BadInput(f"{word!r} has characters a remote shell would interpret (pdsh passes the command "
                               "through one; DeepSpeed double-quotes only a script argument with a space, in which "
                               "$, ` and \\ still act); rename it or use --launcher openmpi")
        # and pdsh itself rewrites %n, %h, %u and %% in that string (DeepSpeed's own --node_rank=%n relies on it)
        env_values = [value for _, value in spec.env]
        for word in [*script_argv(spec), str(Path.cwd()), *env_values]:
            if "%" in word:
                raise BadInput(f"{word!r} has a '%': pdsh replaces %n (the node's rank), %h (its host), %u (the "
                               "user) and %% in the command it runs, so the nodes would get another value; remove "
                               "it or use --launcher openmpi")


def launcher_words(text: str) -> list[str]:
    """--launcher-args as DeepSpeed's runner splits it (shlex.split, as a shell would); what it cannot split (an
    unclosed quote, a trailing backslash) is refused here rather than by its traceback, and so is an empty one."""
    how = "e.g. --launcher-args \"-mca btl_tcp_if_include eth0\""
    if not text.strip():
        raise BadInput(f"--launcher-args is empty; give the launcher's arguments ({how}), or leave it out")
    try:
        return shlex.split(text)
    except ValueError as e:
        raise BadInput(f"--launcher-args {text!r}: {str(e).lower()}; DeepSpeed splits it as a shell would (shlex): "
                       f"close every quote, {how}") from None


_HYDRA_SSH = ((), ("HYDRA_LAUNCHER_EXTRA_ARGS",), "export HYDRA_LAUNCHER_EXTRA_ARGS='-p {port}' (hydra's ssh reads it)")
MPIRUN_SSH = {
    "openmpi": (("plm_rsh_args", "plm_ssh_args"), ("OMPI_MCA_plm_rsh_args", "PRTE_MCA_plm_ssh_args"),
                "--launcher-args \"--mca plm_rsh_args '-p {port}'\""),
    "impi": (("-bootstrap-exec-args",), ("I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS",),
             "--launcher-args \"-bootstrap-exec-args '-p {port}'\""),
    "mpich": _HYDRA_SSH,
    "mvapich": _HYDRA_SSH,
}
"""How mpirun's own ssh is given arguments, per MPI backend: (the option of --launcher-args that carries them: Open
MPI's MCA parameter, Intel MPI's mpirun option; the variables mpirun reads them from; the fix that gives it a port).
DeepSpeed's MPI backends pass --ssh_port to none of them (deepspeed/launcher/multinode_runner.py: only PDSHRunner
reads it)."""


def mpirun_ssh_args(spec: LaunchSpec, launcher_args_only: bool = False) -> list[str] | None:
    """The arguments the job gives the ssh of its MPI backend's mpirun (`MPIRUN_SSH`): from --launcher-args, else
    from the variable mpirun reads (this environment, --env on top); None where it gives none."""
    if spec.launcher not in MPIRUN_SSH:
        return None
    names, variables, _ = MPIRUN_SSH[spec.launcher]
    words = launcher_words(spec.launcher_args) if spec.launcher_args is not None else []
    for i, word in enumerate(words):
        if spec.launcher == "openmpi":  # --mca NAME VALUE
            if word in ("-mca", "--mca", "--prtemca") and i + 2 < len(words) and words[i + 1] in names:
                return _split_loosely(words[i + 2])
        elif word in names and i + 1 < len(words):  # -OPTION VALUE
            return _split_loosely(words[i + 1])
    if launcher_args_only:
        return None
    environ = {**os.environ, **dict(spec.env)}
    given = next((environ[name] for name in variables if environ.get(name)), None)
    return None if given is None else _split_loosely(given)


def _split_loosely(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def ssh_args_port(words: list[str]) -> str | None:
    """The port ssh's arguments give (`-p N`, `-pN`, `-o Port=N`, `-oPort=N`), the first one; None where none."""
    for i, word in enumerate(words):
        flag = word[:2]
        if flag not in ("-p", "-o"):
            continue
        if word == flag:  # the value is the next word (which the loop then reads as a word of its own: harmless)
            value = words[i + 1] if i + 1 < len(words) else ""
        else:
            value = word[2:]
        if flag == "-p":
            return value
        m = re.fullmatch(r"\s*port\s*[= ]\s*(\S+)\s*", value, re.IGNORECASE)
        if m:
            return m.group(1)
    return None


def check_mpirun_ssh_port(spec: LaunchSpec) -> None:
    """--ssh-port with an MPI backend: DeepSpeed's runner runs its own ssh check and `hostname -I` probe on that port,
    but its MPI backends never hand it to mpirun, whose ssh then uses its default port (multinode_runner.py: only
    PDSHRunner reads ssh_port). Refused unless the job gives mpirun's ssh the same port its own way (`MPIRUN_SSH`).
    pdsh gets the port from DeepSpeed (PDSH_SSH_ARGS_APPEND), and srun needs no ssh: the runner's own ssh is all."""
    if spec.ssh_port is None or not spec.remote_shell or spec.launcher not in MPIRUN_SSH:
        return
    port = str(spec.ssh_port)
    given = mpirun_ssh_args(spec)
    said = ssh_args_port(given) if given is not None else None
    if said == port:
        return
    launcher = spec.launcher
    fix = MPIRUN_SSH[launcher][2].format(port=port)
    whose = f"whose ssh is given port {said}" if said is not None else "whose ssh would use its default port"
    raise BadInput(f"--ssh-port {port} with --launcher {launcher}: DeepSpeed's {launcher} backend uses it only for "
                   f"the runner's own ssh check, not for mpirun, {whose}; give mpirun port {port} too: {fix}, or set "
                   f"Port {port} for the nodes in ~/.ssh/config (every ssh reads it) and drop --ssh-port")


def _check_gpus_per_node(spec: LaunchSpec) -> None:
    """--gpus-per-node no larger than the slots of any host the job keeps (the first --nodes): DeepSpeed's
    apply_num_nodes_and_gpus hands every host range(--num_gpus) whatever its slots, so 8 on a 4-slot node would
    start 8 ranks there, on devices it lacks."""
    if spec.gpus_per_node is None:
        return
    known = spec.known_hosts
    kept = list(known.items())[:spec.nodes] if spec.nodes else list(known.items())
    short = [(host, slots) for host, slots in kept if slots < spec.gpus_per_node]
    if not short:
        return
    host, slots = short[0]
    where = f"--hostfile {spec.hostfile}" if spec.hostfile else "--hosts"
    more = f" (and {len(short) - 1} more host{'s' * (len(short) > 2)})" if len(short) > 1 else ""
    raise BadInput(f"--gpus-per-node {spec.gpus_per_node} is more than the {slots} slot{'s' * (slots != 1)} {host} "
                   f"has in {where}{more}: DeepSpeed would start {spec.gpus_per_node} ranks there all the same, on "
                   f"devices it lacks; use --gpus-per-node {min(s for _, s in kept)} or less, or give the hosts "
                   "their real slots")


_QUOTED_ACTIVE = re.compile(r'[$`\\\x00-\x08\x0a-\x1f\x7f]')
"""What still acts inside double quotes ($ and ` expand, \\ escapes; no history expansion in the non-interactive
shell ssh runs), and control characters but the tab (a newline would split pdsh's one-line command, unverified)."""


def pdsh_inert(word: str, quoted: bool) -> bool:
    """Whether the remote shell of DeepSpeed's pdsh command reads `word` as itself. `quoted`: a script argument,
    which PDSHRunner.parse_user_args wraps in double quotes (escaping its '"') where it holds a space; any other
    word, the script and the working directory (`cd DIR;`) included, goes in bare: inert where it is _SHELL_SAFE
    characters, a '~' too except where a shell expands it (at the start of the word, or after '=' or ':' in
    bash's assignment-like words such as `x=a:~/b`), and not empty (a bare '' is no word at all)."""
    if quoted and " " in word:
        return not _QUOTED_ACTIVE.search(word)
    return bool(word) and _SHELL_SAFE.fullmatch(word.replace("~", "")) is not None \
        and re.search(r"(?:^|[=:])~", word) is None


def parse_core_list(text: str, option: str = "--bind-core-list") -> list[int]:
    """The cores of DeepSpeed's core list grammar (`parse_range_list`, deepspeed/utils/numa.py): comma-separated
    numbers and inclusive ranges, ascending and not overlapping, no spaces (`0-31,64-95` is 64 cores)."""
    how = "write it like 0-31 or 0-15,32-47: numbers and ranges, ascending, no spaces"
    cores: list[int] = []
    for part in text.split(","):
        m = re.fullmatch(r"([0-9]{1,6})(?:-([0-9]{1,6}))?", part)
        if m is None:
            raise BadInput(f"{option} {text!r}: {part!r} is not a core number or range; {how}")
        start, end = int(m.group(1)), int(m.group(2) or m.group(1))
        if end < start:
            raise BadInput(f"{option} {text!r}: the range {part} runs backwards; {how}")
        if cores and start <= cores[-1]:
            raise BadInput(f"{option} {text!r}: {part} overlaps or comes before the cores listed ahead of it "
                           f"(DeepSpeed refuses that); {how}")
        cores.extend(range(start, end + 1))
    return cores


def check_core_list(bind_cores_to_rank: bool, bind_core_list: str | None) -> list[int] | None:
    """--bind-core-list's cores (None without it), refused without --bind-cores-to-rank: DeepSpeed's launch.py reads
    the list only with the flag, and would drop it without a word. Launch, preflight and probe share it."""
    if bind_core_list is None:
        return None
    if not bind_cores_to_rank:
        raise BadInput("--bind-core-list is read only with --bind-cores-to-rank (DeepSpeed ignores it alone); "
                       "add --bind-cores-to-rank, or drop --bind-core-list")
    return parse_core_list(bind_core_list)


def short_of_cores(bind_core_list: str | None, cores: int, ranks: int) -> str | None:
    """What is wrong where `cores` (the listed ones, else the node's physical ones) are fewer than a node's `ranks`
    under --bind-cores-to-rank: DeepSpeed gives each rank a whole core at least, and stops at its assert; None where
    they are enough. The launch's static check and the preflight's core-binding check both say it so."""
    if ranks <= cores:
        return None
    plural = "s" * (cores != 1)
    where = (f"--bind-core-list {bind_core_list} gives {cores} core{plural}" if bind_core_list is not None
             else f"this node has {cores} physical core{plural}")
    return f"{where} for {ranks} ranks a node: DeepSpeed gives each rank a whole core at least (and stops at its " \
        "assert)"


def check_binding(spec: LaunchSpec, launcher_limits: bool = True) -> None:
    """--bind-cores-to-rank and --bind-core-list where DeepSpeed would drop them silently or fail on them: the list
    without the flag (launch.py reads it only with the flag), a list that gives a local rank no core (its assert),
    and (`launcher_limits`; an sbatch starts one --no_ssh runner a node, which binds) a multi-node backend whose
    command does not bind (`BINDING_LAUNCHERS`)."""
    cores = check_core_list(spec.bind_cores_to_rank, spec.bind_core_list)
    if cores is not None:
        ranks = max(spec.known_hosts.values(), default=0) if spec.gpus_per_node is None else spec.gpus_per_node
        short = short_of_cores(spec.bind_core_list, len(cores), ranks)
        if short:
            raise BadInput(f"{short}; list more cores, or drop --bind-core-list (all physical cores)")
    if launcher_limits and spec.bind_cores_to_rank and spec.remote_shell and spec.launcher not in BINDING_LAUNCHERS:
        raise BadInput(f"--bind-cores-to-rank with --launcher {spec.launcher}: DeepSpeed's {spec.launcher} backend "
                       "does not pass it to the nodes (their ranks would run unbound, without a word); use --no-ssh "
                       "or --emit-sbatch (each node's runner binds its own ranks), --launcher impi, or "
                       "--env OMP_NUM_THREADS=N (N: a node's cores over its ranks) instead")


def _check_env_keys(env: tuple[tuple[str, str], ...]) -> None:
    for key, _ in env:
        if not _ENV_KEY.fullmatch(key):
            raise BadInput(f"--env {key!r}: a variable name is letters, digits and '_', not starting with a digit")


def _check_env_file(spec: LaunchSpec) -> None:
    """The .deepspeed_env that carries --env to the nodes must be the one DeepSpeed's runner reads, and not one of the
    user's own: zerokit's DS_ENV_FILE points the runner at it (an --env DS_ENV_FILE would point it elsewhere, and every
    --env value would stay behind), and writing it replaces the file there (`--files-dir .` or `~` is where the
    user's own ./.deepspeed_env or ~/.deepspeed_env is read from; an emitted script emptied it before reading it)."""
    from zerokit.fileio import same_path

    if "DS_ENV_FILE" in dict(spec.env):
        raise BadInput("--env DS_ENV_FILE: zerokit points DeepSpeed's runner at the .deepspeed_env it writes in "
                       "--files-dir, which carries --env to the nodes; to add your own env file, export DS_ENV_FILE "
                       "in your shell instead (zerokit merges that file's variables in)")
    for own in users_env_files():
        if same_path(own, spec.env_file):
            raise BadInput(f"--files-dir {spec.files_dir}: the .deepspeed_env zerokit writes there would replace your "
                           f"own {own}, which DeepSpeed's runner reads for every job; give another --files-dir "
                           "(default .zerokit)")


def _check_launcher_limits(spec: LaunchSpec) -> None:
    """What the chosen DeepSpeed backend cannot do, refused before the preflight rather than by its traceback."""
    launcher, known = spec.launcher, spec.known_hosts
    used = dict(list(known.items())[:spec.nodes]) if spec.nodes else known
    if launcher in MPI_LAUNCHERS:
        fix = "list only the hosts and slots to use in --hosts/--hostfile, or use --launcher pdsh"
        if spec.include is not None or spec.exclude is not None:
            option = "--include" if spec.include is not None else "--exclude"
            raise BadInput(f"{option}: --launcher {launcher} runs every slot of the hostfile (DeepSpeed's {launcher} "
                           f"backend refuses --include/--exclude); {fix}")
        if spec.nodes is not None and spec.nodes != len(known):
            raise BadInput(f"--nodes {spec.nodes}: --launcher {launcher} cannot limit the nodes (DeepSpeed's "
                           f"{launcher} backend refuses --num_nodes); {fix}")
        if spec.gpus_per_node is not None and (not known or set(known.values()) != {spec.gpus_per_node}):
            raise BadInput(f"--gpus-per-node {spec.gpus_per_node}: --launcher {launcher} cannot limit the GPUs of a "
                           f"node (DeepSpeed's {launcher} backend refuses --num_gpus); {fix}")
    if launcher == "slurm":
        _check_slurm_slots(spec)
        # the ranks srun starts: what DeepSpeed's SlurmRunner.validate_active_resources counts, filters applied
        used = select_hosts(known, spec.nodes, spec.include, spec.exclude, spec.gpus_per_node) if known else {}
    if launcher in EQUAL_SLOTS_LAUNCHERS and len(set(used.values())) > 1:
        counts = ", ".join(f"{host} {slots}" for host, slots in list(used.items())[:5])
        fix = "give every host the same slots" + (" or --gpus-per-node N" if launcher == "slurm" else "")
        raise BadInput(f"--launcher {launcher} starts the same number of ranks on every node, and the hosts' slots "
                       f"differ ({counts}); {fix}, or use --launcher pdsh|openmpi")
    if launcher in DISCOVERY_LAUNCHERS:
        for option, value, default in (("--master-addr", spec.master_addr, None),
                                       ("--master-port", spec.master_port, DEFAULT_MASTER_PORT)):
            if value != default:
                raise BadInput(f"{option} {value} has no effect with --launcher {launcher}: DeepSpeed's {launcher} "
                               "backend does not pass it, and the ranks find rank 0 through MPI discovery (mpi4py, "
                               f"port {DEFAULT_MASTER_PORT}); drop {option}, or use --launcher pdsh|mpich|impi")


def _check_slurm_slots(spec: LaunchSpec) -> None:
    """srun places ranks by count: DeepSpeed's SlurmRunner.validate_active_resources refuses a host whose slots, after
    --include/--exclude, are not its first N (0, 1, ... N-1). Checked on the slots the runner keeps where the hosts
    are known (`select_slots`), else on those --include names."""
    option, text = ("--include", spec.include) if spec.include is not None else ("--exclude", spec.exclude)
    if text is None:
        return
    known = spec.known_hosts
    if known:
        active = select_slots(known, include=spec.include, exclude=spec.exclude)
    elif option == "--include":
        active = {host: slots for host, slots in parse_resource_filter(text, option).items() if slots}
    else:
        return
    for host, slots in active.items():
        if slots != list(range(len(slots))):
            first = f"{host}:{','.join(map(str, range(len(slots))))}"
            raise BadInput(f"{option} {text!r}: --launcher slurm cannot pick device ids (srun places ranks by count, "
                           f"and DeepSpeed's slurm backend refuses {host} slots {','.join(map(str, slots))}); keep "
                           f"the first slots ({first}), filter whole hosts, or use --launcher pdsh")


def notes(spec: LaunchSpec) -> list[str]:
    """Warnings about the job that are not errors: what the launch depends on that zerokit does not check."""
    out = []
    if spec.remote_shell and spec.launcher in DISCOVERY_LAUNCHERS:
        out.append(f"with --launcher {spec.launcher} the ranks find rank 0 through DeepSpeed's MPI discovery, which "
                   "needs mpi4py (built against the job's MPI) on every node and uses port "
                   f"{DEFAULT_MASTER_PORT} on rank 0's node; --master-addr/--master-port do not reach them")
    if spec.remote_shell and spec.launcher == "slurm" and spec.include is None and spec.exclude is None:
        out.append("with --launcher slurm, srun places the ranks on the nodes of the SLURM allocation this runs in "
                   "(DeepSpeed passes srun no --nodelist): the hosts listed count the ranks, and must be that "
                   "allocation's nodes")
    if spec.master_addr is not None and not spec.multi_node and not spec.no_ssh:
        out.append(f"--master-addr {spec.master_addr} has no effect on one node: DeepSpeed's runner sets 127.0.0.1 "
                   "there, so zerokit leaves it out (it matters to jobs on other hosts, and to --no-ssh)")
    if not spec.multi_node and not spec.no_ssh:
        for option, value, why in (("--ssh-port", spec.ssh_port, "uses no ssh there"),
                                   ("--launcher-args", spec.launcher_args,
                                    "starts the ranks itself there (launch.py), with no launcher")):
            if value is not None:
                out.append(f"{option} {shlex.quote(str(value))} has no effect on one node: DeepSpeed's runner {why}, "
                           "so zerokit leaves it out (it matters to jobs on other hosts)")
    if spec.remote_shell and spec.ssh_port is None and spec.launcher in MPIRUN_SSH:
        given = mpirun_ssh_args(spec, launcher_args_only=True)
        port = ssh_args_port(given) if given is not None else None
        if port is not None:
            out.append(f"--launcher-args gives mpirun's ssh port {port}, but DeepSpeed's runner runs its own ssh check "
                       f"and `hostname -I` probe on ssh's default port: add --ssh-port {port}, unless ~/.ssh/config "
                       "gives the nodes that port")
    if spec.visible_devices is not None and (spec.multi_node or spec.no_ssh):
        out.append(f"{VISIBLE_DEVICES}={spec.visible_devices} does not pick the GPUs of a job with a hostfile: "
                   "DeepSpeed's runner starts a rank on every slot it lists (and the other nodes never see this "
                   "shell's variables); pick GPUs with --include host:2,3 or the hosts' slots")
    return out


def check_include_devices(spec: LaunchSpec, device_count: int) -> None:
    """On one node DeepSpeed reads --include/--exclude against the devices its accelerator counts (the CPU
    accelerator: NUMA nodes with cores), whatever --hosts said; a slot beyond them, or a filter that leaves none, is
    refused here rather than by its traceback."""
    if spec.multi_node:
        return
    argv = build_command(spec)[0]
    for option in ("--include", "--exclude"):
        if option in argv:
            text = argv[argv.index(option) + 1]
            problem = include_beyond_devices(text, device_count, option)
            if problem:
                raise BadInput(f"{problem}; {INCLUDE_FIX}")


INCLUDE_FIX = "for N ranks give --gpus-per-node N instead of --include"


def include_beyond_devices(text: str, device_count: int, option: str = "--include") -> str | None:
    """What is wrong with a one-node filter against the devices DeepSpeed counts (a slot past them, or no rank
    left), or None."""
    for slots in parse_resource_filter(text, option).values():
        for slot in slots:
            if slot >= device_count:
                return (f"{option} {text!r}: DeepSpeed counts {device_count} device"
                        f"{'s' if device_count != 1 else ''} on this machine (slots 0 to {device_count - 1}), not "
                        f"slot {slot}")
    pool = {"localhost": device_count}
    kept = select_hosts(pool, include=text) if option == "--include" else select_hosts(pool, exclude=text)
    if not kept:
        return f"{option} {text!r} leaves none of the {device_count} device{'s' if device_count != 1 else ''} " \
               "DeepSpeed counts on this machine"
    return None


def parse_resource_filter(text: str, option: str = "--include") -> dict[str, list[int]]:
    """DeepSpeed's resource filter as `{host: slots}` (`[]`: all of its slots; a host named twice gets the slots of
    both, each once, ascending): NODE_SPEC[@NODE_SPEC ...], with NODE_SPEC = NAME[:SLOT[,SLOT ...]]
    (deepspeed.launcher.runner.parse_node_config_list). What its split and
    int() would fail on at launch is refused here, and so is a host name a shell would read."""
    if not text.strip():
        raise BadInput(f"{option} is empty; {_FILTER_HOW}, or leave it out for every slot")
    nodes: dict[str, list[int]] = {}
    for node in text.split("@"):
        host, sep, slots = node.partition(":")
        if not host:
            raise BadInput(f"{option} {text!r}: a node without a host name; {_FILTER_HOW}")
        try:
            validate_hostname(host)
        except BadInput:
            raise BadInput(f"{option} {text!r}: host {host!r} is not a valid hostname; {_FILTER_HOW}") from None
        ids = nodes.setdefault(host, [])
        for slot in slots.split(",") if sep else ():
            if not _SLOT.fullmatch(slot) or int(slot) >= MAX_SLOTS:
                raise BadInput(f"{option} {text!r}: slot {slot!r} of {host} is not a whole number from 0 to "
                               f"{MAX_SLOTS - 1}; {_FILTER_HOW}")
            ids.append(int(slot))
    return {host: sorted(set(ids)) for host, ids in nodes.items()}  # parse_node_config_list: each once, ascending


def _check_filter(spec: LaunchSpec, option: str = "--include") -> None:
    """Hosts and slots of --include/--exclude against the job's, where zerokit knows them (--hosts, a readable
    hostfile): DeepSpeed refuses any other with a traceback, after the preflight, and fails on an empty job."""
    known = spec.known_hosts
    text = spec.include if option == "--include" else spec.exclude
    if not known:
        if not spec.multi_node and text is not None:  # DeepSpeed's pool without a hostfile: {"localhost": devices}
            for host in parse_resource_filter(text, option):
                if not is_this_host(host):
                    raise BadInput(f"{option} {text!r}: on one node (no --hostfile or --hosts) DeepSpeed's only host "
                                   f"is this machine, 'localhost', not {host}; write localhost:SLOTS, or give the "
                                   "job's hosts with --hosts or --hostfile")
        return
    if not select_hosts(known, include=spec.include, exclude=spec.exclude):
        # DeepSpeed's parse_resource_filter drops a host named without slots and the slots named; none left fails later
        raise BadInput(f"{option} {text!r} leaves no rank to run; {option[2:]} fewer hosts or slots")


def select_hosts(hosts: dict[str, int], nodes: int | None = None, include: str | None = None,
                 exclude: str | None = None, gpus_per_node: int | None = None) -> dict[str, int]:
    """`{host: ranks}` of the job (`select_slots`, counted)."""
    return {host: len(slots) for host, slots in select_slots(hosts, nodes, include, exclude, gpus_per_node).items()}


def select_slots(hosts: dict[str, int], nodes: int | None = None, include: str | None = None,
                 exclude: str | None = None, gpus_per_node: int | None = None) -> dict[str, list[int]]:
    """`{host: slots}` of the job, as DeepSpeed's runner picks them from the hostfile's slots: --include/--exclude
    first (parse_inclusion_exclusion: hostfile order, each slot once, ascending), then the first --nodes hosts and
    --gpus-per-node ranks on each (apply_num_nodes_and_gpus, as --num_nodes/--num_gpus): its active_resources. The
    filters are parsed by the runner's parse_resource_filter; a host or slot the hosts lack is bad input, as
    DeepSpeed refuses it."""
    pool = {host: list(range(slots)) for host, slots in hosts.items()}
    for option, text in (("--include", include), ("--exclude", exclude)):
        if text is None:
            continue
        picked = parse_resource_filter(text, option)
        for host, slots in picked.items():
            if host not in pool:
                listed = ", ".join(list(pool)[:5]) + (f" and {len(pool) - 5} more" if len(pool) > 5 else "")
                raise BadInput(f"{option} {text!r}: host {host} is not one of the job's hosts ({listed}); "
                               "DeepSpeed refuses it")
            bad = [s for s in slots if s not in pool[host]]
            if bad:
                raise BadInput(f"{option} {text!r}: {host} has {len(pool[host])} slots (0 to {len(pool[host]) - 1}), "
                               f"not slot {bad[0]}")
        if option == "--include":
            pool = {h: picked[h] or pool[h] for h in pool if h in picked}
        else:
            pool = {h: [s for s in pool[h] if picked[h] and s not in picked[h]] if h in picked else pool[h]
                    for h in pool}
    selected = {h: slots for h, slots in pool.items() if slots}
    if nodes:
        selected = dict(list(selected.items())[:nodes])
    if gpus_per_node:
        selected = {h: list(range(gpus_per_node)) for h in selected}
    return selected


def build_command(spec: LaunchSpec) -> tuple[list[str], dict[str, str]]:
    """The runner's argv and the variables to add to the environment (not a copy of os.environ)."""
    validate(spec)
    check_mpirun_ssh_port(spec)
    argv = [spec.runner]
    env: dict[str, str] = {"PYTHONUNBUFFERED": "1"}  # ranks' output streams through as it comes
    if not spec.multi_node and not spec.no_ssh and os.path.isfile(DEEPSPEED_DEFAULT_HOSTFILE):
        # one node: DeepSpeed would read its default hostfile and start the job on the hosts there instead
        argv += ["--hostfile", os.devnull]
    if spec.no_ssh:  # the runner starts this node's ranks itself, with this environment: no .deepspeed_env
        argv += ["--hostfile", spec.hostfile or spec.written_hostfile, "--no_ssh", "--node_rank", str(spec.node_rank),
                 "--master_addr", str(spec.master_addr)]
    elif spec.multi_node:
        # --force_multi: a filter or --nodes may leave one host, and DeepSpeed launches a lone host as if it were
        # this machine (runner.py: multi_node_exec = force_multi or len(active_resources) > 1)
        argv += ["--hostfile", spec.hostfile or spec.written_hostfile, "--launcher", spec.launcher, "--force_multi"]
        if spec.master_addr:
            argv += ["--master_addr", spec.master_addr]
        if spec.ssh_port is not None:
            argv += ["--ssh_port", str(spec.ssh_port)]
        if spec.launcher_args is not None:  # one word: argparse takes a separate '-mca ...' for an option of its own
            argv.append(f"--launcher_args={spec.launcher_args}")
        if spec.env:
            env["DS_ENV_FILE"] = spec.env_file  # the runner joins it to ~ and .; an absolute path wins both
    # An MPI backend refuses --num_nodes/--num_gpus; validate let them through only where they restate the hostfile.
    restated = spec.remote_shell and spec.launcher in MPI_LAUNCHERS
    kept = kept_devices(spec)
    if spec.nodes is not None and not restated and not spec.local_only and kept is None:
        argv += ["--num_nodes", str(spec.nodes)]  # (one node: DeepSpeed refuses it beside --include)
    local_filter = spec.local_only and (spec.include is not None or spec.exclude is not None)
    if kept is not None:  # the GPUs CUDA_VISIBLE_DEVICES leaves, which --num_gpus would make the runner drop
        argv += ["--include", "localhost:" + ",".join(map(str, kept))]
    # no hostfile: the ranks are --num_gpus, not the host's slots
    elif spec.local_only and not local_filter:
        argv += ["--num_gpus", str(spec.gpus_per_node or spec.local_slots)]
    elif local_filter:  # --hosts localhost:N with a filter: DeepSpeed would filter its device count, not N slots
        slots = local_filtered_slots(spec)
        argv += (["--num_gpus", str(len(slots))] if slots == list(range(len(slots)))
                 else ["--include", "localhost:" + ",".join(map(str, slots))])
    elif spec.gpus_per_node is not None and not restated:
        argv += ["--num_gpus", str(spec.gpus_per_node)]
    one_node = not spec.multi_node  # without a hostfile DeepSpeed's only host is "localhost"
    if spec.include is not None and not local_filter:
        argv += ["--include", _localhost_filter(spec.include) if one_node else spec.include]
    if spec.exclude is not None and not local_filter:
        argv += ["--exclude", _localhost_filter(spec.exclude) if one_node else spec.exclude]
    argv += ["--master_port", str(spec.master_port), *binding_args(spec), *spec.extra_runner_args]
    argv += script_argv(spec)
    env.update(dict(spec.env))
    return argv, env


def binding_args(spec: LaunchSpec) -> list[str]:
    """The runner's core-binding options of the job (`check_binding` has refused those it would drop)."""
    if not spec.bind_cores_to_rank:
        return []
    return ["--bind_cores_to_rank", *([f"--bind_core_list={spec.bind_core_list}"] if spec.bind_core_list else [])]


def local_filtered_slots(spec: LaunchSpec) -> list[int]:
    """The slots of this machine's --hosts entry that --include/--exclude leave (DeepSpeed's filter semantics:
    `select_hosts`), ascending."""
    slots = list(range(spec.local_slots or 0))
    for option, text in (("--include", spec.include), ("--exclude", spec.exclude)):
        if text is None:
            continue
        picked = [s for named in parse_resource_filter(_localhost_filter(text), option).values() for s in named]
        if option == "--include":  # a host named without slots: all of them
            slots = [s for s in slots if s in picked] if picked else slots
        else:
            slots = [s for s in slots if s not in picked] if picked else []
    return slots


def _localhost_filter(text: str) -> str:
    return "@".join("localhost" + node[len(node.partition(":")[0]):] for node in text.split("@"))


REDACTED = "<redacted>"
"""What --dry-run shows in place of a value from the user's own .deepspeed_env (`render_files(redact=True)`)."""


def render_files(spec: LaunchSpec, users_env: bool = True, redact: bool = False) -> dict[str, str]:
    """The files the launch writes before starting: `{absolute path: content}` (empty on one node). `users_env`:
    the env file starts with the user's own variables (`users_deepspeed_env`); an emitted script reads those when it
    runs instead, so that no secret of theirs is copied into it. `redact`: their values read `REDACTED` (what
    --dry-run prints: the file itself is written 0600, since it may hold tokens); --env's own stay, as typed."""
    files: dict[str, str] = {}
    if spec.hosts and spec.multi_node:
        files[spec.written_hostfile] = render("hostfile.j2", hosts=dict(spec.hosts))
    if spec.remote_shell and spec.env:
        users = users_deepspeed_env() if users_env else {}
        if redact:
            users = dict.fromkeys(users, REDACTED)
        files[spec.env_file] = render("deepspeed_env.j2", env={**users, **dict(spec.env)})
    return files


def users_deepspeed_env() -> dict[str, str]:
    """The variables DeepSpeed's runner would read from the user's own env files, which zerokit's DS_ENV_FILE (an
    absolute path, joined to ~ and . alike) hides: `$DS_ENV_FILE` or `.deepspeed_env`, in ~ then in the working
    directory, a later line winning (deepspeed.launcher.runner: DEEPSPEED_ENVIRONMENT_NAME/_PATHS, main())."""
    found: dict[str, str] = {}
    for path in users_env_files():
        if not os.path.isfile(path):
            continue
        try:
            with open(path, encoding="utf-8") as f:  # text mode: the lines DeepSpeed's readlines() gives it
                lines = f.readlines()
        except (OSError, UnicodeDecodeError) as e:
            raise BadInput(f"{path}: cannot read it ({e}); DeepSpeed's runner reads it for --env, fix or move "
                           "it") from None
        for lineno, line in enumerate(lines, 1):
            key, sep, value = line.partition("=")
            if not sep or not _ENV_KEY.fullmatch(key.strip()):
                raise BadInput(f"{path}:{lineno}: expected KEY=VALUE, got {line.strip()[:40]!r}; DeepSpeed's runner "
                               "fails on such a line: fix or remove it")
            found[key.strip()] = value.strip()  # deepspeed.launcher.multinode_runner's add_export strips both
    return found


def users_env_files() -> list[str]:
    """Where DeepSpeed's runner looks for the user's own env files: `$DS_ENV_FILE` or `.deepspeed_env` joined to ~,
    then to the working directory (an absolute DS_ENV_FILE is that file, twice)."""
    name = os.environ.get("DS_ENV_FILE", ".deepspeed_env")
    return [os.path.join(directory, name) for directory in (os.path.expanduser("~"), ".")]


def hosts_of(spec: LaunchSpec) -> dict[str, int]:
    """`{host: slots}` the job runs on; one node is `{"localhost": gpus_per_node}`."""
    if spec.hosts:
        return dict(spec.hosts)
    if spec.hostfile:
        return read_hostfile(spec.hostfile)
    return {"localhost": spec.gpus_per_node or 1}


def render_launch_script(spec: LaunchSpec, zerokit_command: str) -> str:
    """A bash script that starts the same runner command (for people who keep a run.sh)."""
    if spec.hostfile and not spec.hosts:
        read_hostfile(spec.hostfile)  # the runner reads it when the script runs: refused now, as --dry-run refuses it
    argv, env = build_command(spec)
    files = render_files(spec, users_env=False)
    # one node with --num_gpus: DeepSpeed's runner would drop a CUDA_VISIBLE_DEVICES the script meets (`kept_devices`)
    guard = "--num_gpus" in argv and not spec.multi_node and not spec.no_ssh
    return render("launch.sh.j2", argv=argv, env=env, cwd=str(Path.cwd()), zerokit_command=zerokit_command,
                  files=files, dirs=sorted({str(Path(path).parent) for path in files}), eof=HEREDOC_END,
                  env_file=spec.env_file if spec.env_file in files else None,
                  gpu_nodes=GPU_DEVICE_NODES if guard else ())


HEREDOC_END = "ZEROKIT_EOF"
"""Ends the quoted here-documents that carry the hostfile and .deepspeed_env in an emitted script. Their lines are
validated hostnames and shell-inert values, none of which can be this word."""


class _Var:
    """A shell variable reference inside a command that is otherwise fully quoted."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return f'"${self.name}"'


SLURM_TIME = re.compile(r"[0-9]+(:[0-9]+){0,2}|[0-9]+-[0-9]+(:[0-9]+){0,2}|UNLIMITED|INFINITE", re.IGNORECASE)
"""sbatch --time's formats (minutes, minutes:seconds, hours:minutes:seconds, days-hours[:minutes[:seconds]])."""


def render_sbatch(spec: LaunchSpec, zerokit_command: str, sbatch_name: str, job_name: str = "zerokit",
                  time_limit: str | None = None) -> str:
    """A SLURM batch script that runs the same job: srun starts one deepspeed runner per node (--no_ssh)."""
    # srun, not pdsh: every word below is quoted for bash, and the --env values are exported, shell-quoted, in the
    # script, whose environment srun passes to every node (no .deepspeed_env to carry them)
    named = bool(spec.hostfile or spec.hosts)
    # --nodes N without hosts: Slurm allocates N nodes (#SBATCH --nodes, no --nodelist), which the script reads from
    # $SLURM_JOB_NODELIST; a direct launch needs the hosts named (`validate`)
    validate(replace(spec, launcher="slurm", env=(), nodes=spec.nodes if named else None), launcher_limits=False)
    _check_env_keys(spec.env)
    for option, value in (("--include", spec.include), ("--exclude", spec.exclude)):
        if value is not None:  # the script's --nodelist and --num_gpus pick the ranks; it would be dropped
            raise BadInput(f"{option} {value!r} has no place in an sbatch script: SLURM picks the nodes (#SBATCH "
                           f"--nodelist) and every GPU of each; give the nodes with --hosts, or drop {option}")
    if spec.master_addr is not None:  # the script takes the job's first node from scontrol
        raise BadInput(f"--master-addr {spec.master_addr} has no place in an sbatch script: the job's first node "
                       "(scontrol show hostnames) is the master; drop --master-addr")
    for option, value, why in (("--ssh-port", spec.ssh_port, "and nothing uses ssh"),
                               ("--launcher-args", spec.launcher_args, "which starts no launcher")):
        if value is not None:  # srun starts one runner per node, with --no_ssh
            raise BadInput(f"{option} has no place in an sbatch script: srun starts one deepspeed runner per node "
                           f"(--no_ssh), {why}; drop {option}, or use --emit-script for a launch through --launcher")
    if spec.launcher in MPI_LAUNCHERS:  # srun starts one runner per node, with --no_ssh: no launcher is used
        raise BadInput(f"--launcher {spec.launcher} has no place in an sbatch script: srun starts one deepspeed "
                       "runner per node; drop --launcher, or use --emit-script for an mpirun launch")
    hosts = hosts_of(spec) if named else {}
    nodes = spec.nodes or len(hosts) or 1
    if hosts and nodes > len(hosts):
        raise BadInput(f"--nodes {nodes} is more than the {len(hosts)} hosts given")
    nodelist = list(hosts)[:nodes]
    if spec.gpus_per_node is None and len({hosts[h] for h in nodelist}) > 1:  # slots= and --num_gpus: one number
        counts = ", ".join(f"{h}:{hosts[h]}" for h in nodelist[:5])
        raise BadInput(f"--emit-sbatch: the hosts have different slots ({counts}) and Slurm's --gpus-per-node is one "
                       "number; give every host the same slots, --gpus-per-node N (N ranks on each), or emit one sbatch per "
                       "group of equal hosts")
    gpus = spec.gpus_per_node or (next(iter(hosts.values())) if hosts else None)
    if gpus is None:
        raise BadInput("--emit-sbatch needs --gpus-per-node N (or --hosts/--hostfile with slots)")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", job_name):
        raise BadInput(f"job name {job_name!r}: use letters, digits, '_', '.' and '-'")
    if time_limit is not None and not SLURM_TIME.fullmatch(time_limit):
        raise BadInput(f"--time {time_limit!r}: write it as SLURM does: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, "
                       "D-HH:MM:SS or UNLIMITED (e.g. 02:00:00 or 1-00:00:00)")
    words: list[object] = [spec.runner, "--hostfile", _Var("HOSTFILE"), "--no_ssh", "--node_rank",
                           _Var("SLURM_NODEID"), "--num_nodes", str(nodes), "--num_gpus", str(gpus),
                           "--master_addr", _Var("MASTER_ADDR"), "--master_port", _Var("MASTER_PORT"),
                           *binding_args(spec), *spec.extra_runner_args, *script_argv(spec)]
    node_command = "exec " + " ".join(str(w) if isinstance(w, _Var) else shlex.quote(w) for w in words)
    env = {"PYTHONUNBUFFERED": "1", **dict(spec.env)}
    return render("slurm.sbatch.j2", job_name=job_name, nodes=nodes, nodelist=",".join(nodelist), gpus_per_node=gpus,
                  time=time_limit,
                  cwd=str(Path.cwd()), env=env, master_port=spec.master_port, node_command=node_command,
                  zerokit_command=zerokit_command, sbatch_name=sbatch_name)


def shell_line(argv: list[str], env: dict[str, str]) -> str:
    """The command as one copy-pasteable, shell-quoted line: `K=V ... deepspeed ...`."""
    return " ".join([*(f"{k}={shlex.quote(v)}" for k, v in env.items()), *map(shlex.quote, argv)])


# pdsh prints this line (on its stderr) as soon as one node's remote command ends with a non-zero code.
_PDSH_FAILED = re.compile(rb"^pdsh@[^:\s]*: ([^:\s]+): ssh exited with exit code (\d+)")


class _PdshWatch:
    """Passes the runner's stderr through unchanged and notes the first node that pdsh says failed.

    DeepSpeed's pdsh path waits for every node: when a rank dies before the rendezvous, the other nodes' ranks wait
    for it in TCPStore for 30 minutes, and pdsh with them. pdsh says at once which node failed, so zerokit stops the
    job then instead (the runner's own Ctrl-C path: it kills the ranks on every node through pdsh)."""

    def __init__(self, pipe: Any):
        self.pipe = pipe
        self.failed: tuple[str, int] | None = None
        self.thread = threading.Thread(target=self._pump, name="zerokit-pdsh-stderr", daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        out = getattr(sys.stderr, "buffer", None)
        pending = b""
        while True:
            try:
                chunk = os.read(self.pipe.fileno(), 65536)
            except OSError:
                break
            if not chunk:
                break
            if out is not None:
                out.write(chunk)
                out.flush()
            else:
                sys.stderr.write(chunk.decode("utf-8", "replace"))
            *lines, pending = (pending + chunk).split(b"\n")
            pending = pending[-4096:]
            for line in lines:
                m = _PDSH_FAILED.match(line)
                if m and int(m.group(2)) != 0 and self.failed is None:
                    self.failed = (m.group(1).decode("ascii", "replace"), int(m.group(2)))

    def close(self) -> None:
        self.thread.join(timeout=5)
        self.pipe.close()


def run(argv: list[str], env: dict[str, str], grace: float = GRACE_SECONDS, pdsh: bool = False,
        watch: NodeWatch | None = None, master_port: int | None = None) -> int:
    """Start the runner in its own session and wait; return the job's exit code (128+N for a signal).

    The runner gets a new session (so a terminal's Ctrl-C reaches only zerokit). SIGINT/SIGTERM/SIGHUP become a
    SIGTERM to DeepSpeed's per-node launcher (launch.py, the runner's child on one node and with --no-ssh; see
    `deepspeed_launchers`), whose handler terminates every rank's process tree and exits, and the runner with it:
    signalled itself, the runner has no handler on that path (a KeyboardInterrupt traceback, or a SIGTERM death
    that leaves launch.py behind), and ranks signalled directly print their own tracebacks. Where there is no such
    launcher (MPI and slurm backends, or before it started), the signal goes to the whole group.
    A group still alive `grace` seconds later, or at a second Ctrl-C, is SIGKILLed; so is anything left
    in the group after the runner exits.

    `pdsh`: the ranks run under ssh on every node, outside this group. The signal goes to the runner alone, whose
    handler kills them through pdsh; and a node that pdsh reports failed stops the job at once (see _PdshWatch).
    `watch`: the node watch of a no-ssh launch; when it says stop (another node failed or was interrupted), this
    node's ranks are stopped as for a Ctrl-C, and its verdict is the exit code.
    `master_port`: once the job's processes are gone, this node's DeepSpeed CPU-accelerator shared-memory buffers
    of that rendezvous are removed (see `remove_shm_buffers`), and before it starts, stale ones no process maps
    (`remove_stale_shm_buffers`).
    """
    if master_port is not None:
        remove_stale_shm_buffers(master_port)
    try:
        proc = subprocess.Popen(argv, env={**os.environ, **env}, start_new_session=True,
                                stderr=subprocess.PIPE if pdsh else None)
    except OSError as e:
        if watch is not None:
            watch.finish(127)
        raise BadInput(f"cannot start {argv[0]}: {e.strerror}; is DeepSpeed installed (pip install "
                       "'zerokit[deepspeed]')?") from None
    pgid = proc.pid
    pdsh_watch = _PdshWatch(proc.stderr) if pdsh else None
    received: list[int] = []
    failure: list[int] = []
    deadline: list[float] = []

    def stop(signum: int) -> None:
        if deadline:
            _killpg(pgid, signal.SIGKILL)
            return
        launchers = [] if pdsh else deepspeed_launchers(proc.pid)
        if pdsh:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signum)
        elif launchers:  # this node's launch.py stops its ranks itself; the runner then exits with it
            for pid in launchers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        else:
            _killpg(pgid, signum)
        deadline.append(time.monotonic() + grace)

    def forward(signum: int, _frame: object) -> None:
        received.append(signum)
        stop(signum)

    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, forward) for s in handled}
    try:
        while True:
            try:
                proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                if deadline and time.monotonic() > deadline[0]:
                    _killpg(pgid, signal.SIGKILL)
                if failure or received:
                    continue
                if pdsh_watch is not None and pdsh_watch.failed is not None:
                    host, code = pdsh_watch.failed
                    print(f"zerokit launch: node {host} failed (exit {code}); stopping the job on every node",
                          file=sys.stderr, flush=True)
                    failure.append(code)
                    stop(signal.SIGTERM)
                elif watch is not None and (code := watch.poll()) is not None:
                    failure.append(code)
                    stop(signal.SIGTERM)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        _reap_group(pgid, grace)
        if pdsh_watch is not None:
            pdsh_watch.close()
        if master_port is not None:
            remove_shm_buffers(master_port)
    if received:
        code = 128 + received[0]
    elif failure:
        code = failure[0]
    else:
        code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
        if code == 0 and pdsh_watch is not None and pdsh_watch.failed is not None:
            code = pdsh_watch.failed[1]  # pdsh said a node failed, whatever the runner's own code
        killed = RANK_SIGNALS.get(256 - code)
        if killed is not None:  # DeepSpeed's launch.py exits with the dead rank's returncode, -N: 256 - N
            print(f"zerokit launch: a rank died of {killed} (DeepSpeed's launcher exits {code} for it); exit "
                  f"{128 + 256 - code}, as a shell reports a signal", file=sys.stderr, flush=True)
            code = 128 + 256 - code
    return watch.finish(code) if watch is not None else code


def deepspeed_launchers(runner_pid: int) -> list[int]:
    """The runner's children that are DeepSpeed's per-node launcher (`python -m deepspeed.launcher.launch`), found in
    /proc; [] where there is none (yet), or /proc cannot tell."""
    found = []
    for pid in _proc_pids():
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
                parent = int(f.read().rpartition(")")[2].split()[1])  # after "(comm)": state, then ppid
            if parent != runner_pid:
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                words = f.read().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if b"deepspeed.launcher.launch" in words:
            found.append(int(pid))
    return found


RANK_SIGNALS = {int(signal.SIGKILL): "SIGKILL (the kernel's OOM killer, or a kill -9)", int(signal.SIGSEGV): "SIGSEGV",
                int(signal.SIGABRT): "SIGABRT", int(signal.SIGBUS): "SIGBUS", int(signal.SIGTERM): "SIGTERM"}
"""Signals a rank dies of that DeepSpeed's launcher turns into exit 256 - N (sys.exit of the negative returncode):
reported as 128 + N, the shell's convention (an OOM kill is 137, not 247)."""


SHM_DIR = "/dev/shm"
SHM_PREFIX = "deepspeed_allreduce_buffer_"


def free_port(address: str = "127.0.0.1") -> int:
    """A TCP port free on `address` now, for a rendezvous started next (the OS picks it: bind to port 0)."""
    import socket

    with socket.socket() as s:
        s.bind((address, 0))
        return s.getsockname()[1]


def remove_shm_buffers(master_port: int, directory: str = SHM_DIR) -> int:
    """Remove this user's DeepSpeed shared-memory allreduce buffers of the rendezvous on `master_port`; how many.

    DeepSpeed's CPU accelerator creates one per local rank, `deepspeed_allreduce_buffer_{uid}_{addr}_{port}_{rank}`
    (ops/csrc/cpu/comm/shm.cpp, 69 MB each), and never unlinks them: every finished CPU job would leave them in
    the RAM-backed /dev/shm. Called when the job's processes are gone; the port keeps other jobs' buffers apart.
    """
    return _unlink(_shm_buffers(master_port, directory))


def remove_stale_shm_buffers(master_port: int, directory: str = SHM_DIR) -> int:
    """Before a job starts: remove the buffers of `master_port` that no process maps, left by a job that was
    killed before it could clean up (or run without zerokit); how many.

    A stale one holds 69 MB of the RAM-backed /dev/shm, and the new job would start on the old job's bytes:
    shm.cpp's shared_open maps another rank's buffer as soon as the name exists, before that rank re-creates and
    resets it (runs started on a killed job's buffers trained normally here; nothing relies on that window). A
    buffer some process still maps belongs to a job running now (say, one whose rank 0 is on another node) and
    stays."""
    paths = _shm_buffers(master_port, directory)
    if not paths:
        return 0
    mapped = _mapped_files()
    return _unlink([path for path in paths if os.path.realpath(path) not in mapped])


def _unlink(paths: list[str]) -> int:
    """Remove the files, those gone already or not ours to remove left alone; how many were removed."""
    removed = 0
    for path in paths:
        with contextlib.suppress(OSError):
            os.unlink(path)
            removed += 1
    return removed


def _shm_buffers(master_port: int, directory: str) -> list[str]:
    """This user's DeepSpeed allreduce buffers of the rendezvous on `master_port` in `directory`."""
    prefix = f"{SHM_PREFIX}{os.getuid()}_"
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    out = []
    for name in names:
        if not name.startswith(prefix):
            continue
        parts = name[len(prefix):].rsplit("_", 2)  # addr, port, rank
        if len(parts) == 3 and parts[1] == str(master_port) and parts[2].isdigit():
            out.append(os.path.join(directory, name))
    return out


def _proc_pids() -> list[str]:
    """The process ids /proc lists ([] where it cannot be read)."""
    try:
        return [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []


def _mapped_files() -> set[str]:
    """The files any process this user can read has mapped (/proc/PID/maps): the shared-memory buffers in use."""
    mapped: set[str] = set()
    for pid in _proc_pids():
        try:
            with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
                for line in f:
                    fields = line.split(maxsplit=5)
                    if len(fields) == 6 and fields[5].startswith("/"):
                        mapped.add(fields[5].rstrip("\n").removesuffix(" (deleted)"))
        except OSError:  # gone, or another user's
            continue
    return mapped


def _killpg(pgid: int, signum: int) -> bool:
    try:
        os.killpg(pgid, signum)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _reap_group(pgid: int, grace: float) -> None:
    """Ranks left in the group after the runner exited: SIGTERM, then SIGKILL after `grace` seconds."""
    if not _killpg(pgid, 0):
        return
    print(f"zerokit: processes of the job outlived the runner; stopping them (group {pgid})", file=sys.stderr)
    _killpg(pgid, signal.SIGTERM)
    end = time.monotonic() + grace
    while time.monotonic() < end:
        if not _killpg(pgid, 0):
            return
        time.sleep(0.1)
    _killpg(pgid, signal.SIGKILL)

"""Two "nodes" on this one machine, for real multi-node launches in the tests.

Where we may (root, iproute2), each node is a network namespace and the two are joined by a veth pair: each has its
own IP address, its own loopback and its own port space, so a rendezvous, a gloo connection or an ssh login really
crosses from one node to the other. The file system and the process table stay shared, which lets a test read the
ranks' output files and find every rank by its command line. Where namespaces cannot be made, `Loopback` gives two
node ranks on 127.0.0.1 with the same interface, and the tests say so.

sshd can run in each namespace (`start_sshd`) with keys generated for the test and an `ssh` wrapper first on PATH,
so DeepSpeed's pdsh launcher reaches the other node over real ssh without touching ~/.ssh.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)


def namespaces_unavailable() -> str | None:
    """Why network namespaces cannot be made here, or None when they can. ZEROKIT_TEST_NODES=loopback forces the
    fallback (to test it on a machine that has namespaces)."""
    if os.environ.get("ZEROKIT_TEST_NODES") == "loopback":
        return "ZEROKIT_TEST_NODES=loopback"
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    if os.geteuid() != 0:
        return "not root: creating network namespaces needs CAP_SYS_ADMIN"
    probe = f"zkprobe{os.getpid()}"
    r = _ip("netns", "add", probe)
    if r.returncode != 0:
        return f"`ip netns add` failed: {r.stderr.strip()}"
    _ip("netns", "del", probe)
    return None


class Loopback:
    """Two node ranks on this host's loopback: the fallback where namespaces are not allowed."""

    kind = "loopback"
    ifname = "lo"

    def __init__(self) -> None:
        self.addresses = ("127.0.0.1", "127.0.0.1")
        self.hostnames = ("localhost", "127.0.0.1")  # distinct names for the hostfile; both are this host

    def argv(self, node: int, argv: Sequence[str]) -> list[str]:
        return list(argv)

    def close(self) -> None:
        pass


class Namespaces:
    """Two network namespaces joined by a veth pair, 10.X.Y.1 and 10.X.Y.2, the interface named `zk0` in both."""

    kind = "namespaces"
    ifname = "zk0"

    def __init__(self) -> None:
        pid = os.getpid()
        tag = f"{pid % 100000}{time.monotonic_ns() % 1000}"
        self.names = (f"zk{tag}a", f"zk{tag}b")
        subnet = f"10.{200 + pid % 50}.{(pid // 50) % 250 + 1}"
        self.addresses = (f"{subnet}.1", f"{subnet}.2")
        self.hostnames = self.addresses
        self._made: list[str] = []
        try:
            self._create(tag)
        except Exception:
            self.close()
            raise

    def _create(self, tag: str) -> None:
        for name in self.names:
            self._check(_ip("netns", "add", name))
            self._made.append(name)
        a, b = f"zkv{tag}a"[:15], f"zkv{tag}b"[:15]
        self._check(_ip("link", "add", a, "type", "veth", "peer", "name", b))
        for name, end in zip(self.names, (a, b)):
            self._check(_ip("link", "set", end, "netns", name))
            self._check(_ip("-n", name, "link", "set", end, "name", self.ifname))
        for name, address in zip(self.names, self.addresses):
            self._check(_ip("-n", name, "addr", "add", f"{address}/24", "dev", self.ifname))
            self._check(_ip("-n", name, "link", "set", "lo", "up"))
            self._check(_ip("-n", name, "link", "set", self.ifname, "up"))

    @staticmethod
    def _check(r: subprocess.CompletedProcess) -> None:
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(r.args)}: {r.stderr.strip()}")

    def argv(self, node: int, argv: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.names[node], *argv]

    def close(self) -> None:
        for name in self._made:  # deleting a namespace deletes its end of the veth pair, and so the pair
            _ip("netns", "del", name)
        self._made.clear()


def make_nodes() -> Namespaces | Loopback:
    return Loopback() if namespaces_unavailable() else Namespaces()


# ---------------------------------------------------------------- ssh between the namespaces

SSHD = "/usr/sbin/sshd"


def ssh_unavailable() -> str | None:
    missing = [p for p in (SSHD, shutil.which("ssh"), shutil.which("ssh-keygen"), shutil.which("pdsh")) if not p]
    if not Path(SSHD).exists():
        return "openssh-server is not installed (make system-deps installs it where apt is ours)"
    if missing or not shutil.which("pdsh"):
        return "pdsh or the ssh client is not installed (make system-deps installs them where apt is ours)"
    return None


class Sshd:
    """sshd in each namespace, a fresh key pair, and a directory with an `ssh` wrapper to put first on PATH. `port`:
    where the sshds listen (another than 22 is a container's sshd, which only `ssh -p PORT` reaches). `hide`: {node:
    directory} that node's sshd, and so every login there, sees as an empty one (a tmpfs mounted over it in the mount
    namespace `ip netns exec` gives it): a node without the shared filesystem that holds a job's files."""

    def __init__(self, nodes: Namespaces, workdir: Path, port: int = 22, hide: dict[int, Path] | None = None):
        self.dir = workdir
        self.port = port
        self.hidden = dict(hide or {})
        workdir.mkdir(parents=True, exist_ok=True)
        for key in ("host_key", "id_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(workdir / key)], check=True,
                           timeout=60)
        (workdir / "authorized_keys").write_text((workdir / "id_key.pub").read_text())
        (workdir / "authorized_keys").chmod(0o600)
        (workdir / "sshd_config").write_text(
            f"Port {port}\nHostKey {workdir / 'host_key'}\nAuthorizedKeysFile {workdir / 'authorized_keys'}\n"
            "PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "UsePAM no\nStrictModes no\nPidFile none\n")
        (workdir / "ssh_config").write_text(
            f"Host *\n  IdentityFile {workdir / 'id_key'}\n  IdentitiesOnly yes\n  UserKnownHostsFile /dev/null\n"
            "  StrictHostKeyChecking no\n  LogLevel ERROR\n  BatchMode yes\n  ConnectTimeout 10\n")
        self.bin = workdir / "bin"
        self.bin.mkdir(exist_ok=True)
        wrapper = self.bin / "ssh"
        wrapper.write_text(f"#!/bin/sh\nexec {shutil.which('ssh')} -F {workdir / 'ssh_config'} \"$@\"\n")
        wrapper.chmod(0o755)
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
        sshd = [SSHD, "-D", "-f", str(workdir / "sshd_config"), "-E"]
        self.procs = [subprocess.Popen(nodes.argv(i, [*self._hiding(i), *sshd, str(workdir / f"sshd{i}.log")]))
                      for i in range(2)]
        self.nodes = nodes
        self._wait_ready()

    def _hiding(self, node: int) -> list[str]:
        """What starts that node's sshd under an empty tmpfs over its hidden directory (none: nothing)."""
        if node not in self.hidden:
            return []
        return ["sh", "-c", 'mount -t tmpfs zk-hidden "$0" && exec "$@"', str(self.hidden[node])]

    def env(self) -> dict[str, str]:
        return {**os.environ, "PATH": f"{self.bin}:{os.environ['PATH']}"}

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 30
        while True:
            r = subprocess.run(self.nodes.argv(0, ["ssh", "-p", str(self.port), self.nodes.addresses[1], "true"]),
                               env=self.env(),
                               capture_output=True, text=True, timeout=30, check=False)
            if r.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"sshd did not answer: {r.stderr.strip()}")
            time.sleep(0.5)

    def close(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()

"""`zerokit preflight`: which checks a config triggers (pure), and the real checks on this machine.

The probes run for real (DeepSpeed's op builders, statvfs, sockets, ssh); the failing cases are produced by
really breaking the thing checked: a port held by a listening socket, a missing NVMe directory, a hostfile
with a bad line, a plan that needs more RAM than exists, deepspeed made unimportable in a child process.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from zerokit.cli import main
from zerokit.launch import preflight
from zerokit.launch.preflight import Check, Needs, Target, format_text, needs_from_config

pytest.importorskip("deepspeed")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


# ---------------------------------------------------------------- pure: what a config needs

def test_plain_zero2_needs_no_ops():
    assert needs_from_config({"zero_optimization": {"stage": 2}}) == Needs()


def test_cpu_optimizer_offload_needs_cpu_adam_only():
    needs = needs_from_config({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}})
    assert (needs.cpu_adam, needs.async_io, needs.nvme_paths) == (True, False, ())


def test_nvme_offload_needs_async_io_cpu_adam_and_each_path_once():
    cfg = {"zero_optimization": {"stage": 3,
                                 "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme/a"},
                                 "offload_param": {"device": "nvme", "nvme_path": "/nvme/a"}}}
    needs = needs_from_config(cfg)
    assert (needs.cpu_adam, needs.async_io, needs.nvme_paths) == (True, True, ("/nvme/a",))


def test_param_offload_alone_does_not_need_cpu_adam():
    needs = needs_from_config({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}})
    assert not needs.cpu_adam and not needs.async_io


def test_plan_json_supplies_the_sizes():
    plan = {"memory": {"per_gpu": {"total": 30 * 10**9}, "per_node_cpu": {"total": 200 * 10**9},
                       "nvme": {"total": 0}}}
    needs = needs_from_config({}, plan)
    assert (needs.gpu_bytes, needs.cpu_bytes, needs.nvme_bytes) == (30 * 10**9, 200 * 10**9, None)


def test_text_output_is_numbered_with_the_fix_under_each_failure():
    text = format_text([Check("ninja", True, "present"), Check("master port", False, "29500 is in use", "pass --master-port")])
    assert text.splitlines() == [
        "1. ✓ ninja: present",
        "2. ✗ master port: 29500 is in use",
        "     fix: pass --master-port",
        "preflight: 1/2 passed, 1 failed",
    ]


# ---------------------------------------------------------------- real checks on this machine

def test_this_machine_passes_for_a_plain_config():
    checks = preflight.run_checks(Target(gpus_per_node=2, master_port=free_port()))
    names = [c.name for c in checks]
    assert names[0] == "imports" and names[-1] == "master port"
    assert {"imports", "accelerator", "ninja", "/dev/shm", "host RAM", "master port"} <= set(names)
    assert "op cpu_adam" not in names and "nvme path" not in names and "hostfile" not in names
    assert all(c.ok for c in checks), format_text(checks)
    import deepspeed
    import torch

    assert by_name(checks)["imports"].detail == f"torch {torch.__version__}, deepspeed {deepspeed.__version__}"


def test_accelerator_on_a_host_without_gpus_says_cpu_ranks():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has GPUs")
    check = preflight.check_accelerator(Target(gpus_per_node=2))
    assert check == Check("accelerator", True, "no GPU found: 2 ranks run on DeepSpeed's CPU accelerator (gloo)")


def test_cpu_adam_is_checked_through_deepspeeds_builder_when_the_optimizer_is_offloaded():
    from deepspeed.accelerator import get_accelerator

    check = preflight.check_cpu_adam(Target(needs=Needs(cpu_adam=True)))
    compatible = get_accelerator().create_op_builder("CPUAdamBuilder").is_compatible(verbose=False)
    assert check.name == "op cpu_adam" and check.ok == compatible


def test_busy_master_port_fails_with_the_fix(capsys):
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        port = s.getsockname()[1]
        code = main(["preflight", "--master-port", str(port), "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 3 and out["ok"] is False
    failed = [c for c in out["checks"] if not c["ok"]]
    assert failed == [{"name": "master port", "ok": False, "detail": f"{port} is in use on this host",
                       "fix": f"pass --master-port with a free port (e.g. {port + 1}), or stop the job holding it",
                       "checked": True}]
    assert all(set(c) == {"name", "ok", "detail", "fix", "checked"} for c in out["checks"])


def test_nvme_path_missing_then_present(tmp_path, capsys):
    nvme = tmp_path / "nvme"
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme",
                                                                                   "nvme_path": str(nvme)}}}))
    code = main(["preflight", "--config", str(cfg), "--master-port", str(free_port())])
    out = capsys.readouterr().out
    assert code == 3
    assert f"✗ nvme path: {nvme} does not exist" in out and "fix: create the directory" in out
    nvme.mkdir()
    checks = by_name(preflight.run_checks(preflight.make_target(config=str(cfg), master_port=free_port())))
    assert checks["nvme path"].ok and checks["nvme path"].detail.startswith(f"{nvme}: writable, ")
    has_header = any(p.joinpath("libaio.h").exists() for p in map(__import__("pathlib").Path,
                                                                 ("/usr/include", "/usr/local/include")))
    assert checks["op async_io"].ok == has_header or "prebuilt" in checks["op async_io"].detail
    if not checks["op async_io"].ok:
        assert checks["op async_io"].fix.startswith("apt-get install libaio-dev")


def test_plan_needing_more_ram_or_nvme_than_exists_fails(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"hardware": {"gpus_per_node": 2},
                                "memory": {"per_node_cpu": {"total": 10**15}, "nvme": {"total": 10**18}}}))
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme",
                                                                                   "nvme_path": str(tmp_path)}}}))
    target = preflight.make_target(config=str(cfg), plan=str(plan), master_port=free_port())
    assert target.gpus_per_node == 2
    checks = by_name(preflight.run_checks(target))
    assert not checks["host RAM"].ok and "the plan needs 909.5 TiB" in checks["host RAM"].detail
    assert not checks["nvme path"].ok and "the plan needs 1000.0 PB" in checks["nvme path"].detail


def test_hostfile_parse_failure_is_a_failed_check(tmp_path):
    bad = tmp_path / "hostfile"
    bad.write_text("node1 slots=2\nnode2 slots=two\n")
    check = preflight.check_hostfile(Target(hostfile=str(bad)))
    assert check == Check("hostfile", False, f"{bad}:2: slots must be a whole number from 1 to 4096, got 'two'",
                          "one 'HOST slots=N' line per node, e.g. 'worker-1 slots=8'")
    bad.write_text("node1 slots=2\nnode2 slots=2\n")
    assert preflight.check_hostfile(Target(hostfile=str(bad))) == Check("hostfile", True, "2 hosts, 4 slots")


def test_many_nodes_check_the_launcher_binary_and_ssh(tmp_path):
    hosts = {"zk-no-such-host-1.invalid": 1, "zk-no-such-host-2.invalid": 1}
    target = Target(hosts=hosts, launcher="pdsh")
    launcher = preflight.check_launcher(target)
    import shutil

    assert launcher.ok == bool(shutil.which("pdsh"))
    if not launcher.ok:
        assert launcher == Check("launcher pdsh", False, "pdsh not on PATH", "apt-get install pdsh (on every node)")
    if not shutil.which("ssh"):
        pytest.skip("no ssh client")
    ssh = preflight.check_ssh(target)
    assert not ssh.ok and ssh.detail.startswith("no passwordless ssh to zk-no-such-host-1.invalid (")
    assert "zk-no-such-host-2.invalid" in ssh.detail and "ssh-copy-id" in ssh.fix


def test_missing_deepspeed_is_reported_not_raised():
    code = ("import sys; sys.modules['deepspeed'] = None; from zerokit.cli import main; "
            "sys.exit(main(['preflight', '--format', 'json']))")
    r = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120)
    out = json.loads(r.stdout)
    assert r.returncode == 3 and out["ok"] is False
    first = out["checks"][0]
    assert first["name"] == "imports" and not first["ok"] and "cannot import deepspeed" in first["detail"]
    assert first["fix"].startswith("pip install 'zerokit[deepspeed]'")
    assert "Traceback" not in r.stderr
    assert [c["name"] for c in out["checks"]] == ["imports", "/dev/shm", "host RAM", "master port"]


def test_json_stdout_is_only_json_even_though_deepspeed_logs():
    r = subprocess.run([sys.executable, "-m", "zerokit", "preflight", "--format", "json", "--master-port",
                        str(free_port())], check=False, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["ok"] is True


# ---------------------------------------------------------------- GPU-host verdicts (this CI host has no GPU)

A100 = ("NVIDIA A100-SXM4-80GB", 81920 * 2**20)  # nvidia-smi memory.total 81920 MiB


def test_gpu_verdict_counts_and_memory_against_the_plan():
    assert preflight.gpu_verdict([A100] * 8, 8, 70 * 10**9) == Check(
        "accelerator", True, "8 x NVIDIA A100-SXM4-80GB (80.0 GiB); plan needs 70.0 GB per GPU")
    short = preflight.gpu_verdict([A100] * 4, 8, 90 * 10**9)  # 80 GiB = 85.9 GB < 90 GB
    assert not short.ok
    assert short.detail == ("4 x NVIDIA A100-SXM4-80GB (80.0 GiB); 8 GPUs per node asked, 4 present; "
                            "the plan needs 90.0 GB per GPU")
    assert "re-plan with --gpu-memory" in short.fix


def test_cuda_verdict_compares_major_versions():
    assert preflight.cuda_verdict(None, "12.4") is None
    assert preflight.cuda_verdict("12.1", "12.4").ok
    mismatch = preflight.cuda_verdict("12.1", "11.8")
    assert not mismatch.ok and mismatch.detail == "torch CUDA 12.1, nvcc 11.8"
    assert mismatch.fix.startswith("install CUDA toolkit 12.x or a torch build for CUDA 11.8")
    assert preflight.cuda_verdict("12.1", None).ok


def test_a_stale_jit_build_lock_fails_with_the_rm_fix(tmp_path, monkeypatch):
    # What a build killed mid-way leaves behind: torch's FileBaton lock in the op's build directory.
    import os

    from torch.utils.file_baton import FileBaton

    # With TORCH_EXTENSIONS_DIR set torch builds in $TORCH_EXTENSIONS_DIR/<op> (no py311_cpu level).
    lock = tmp_path / "fused_adam" / "lock"
    lock.parent.mkdir(parents=True)
    lock.touch()
    assert not FileBaton(str(lock)).try_acquire()  # torch would now wait on it forever
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    assert preflight.check_extension_locks(Target()) is None  # young: a build may be running
    old = lock.stat().st_mtime - preflight.STALE_LOCK_AGE_S - 60
    os.utime(lock, (old, old))
    stale = preflight.check_extension_locks(Target())
    assert stale is not None and not stale.ok
    assert f"stale JIT build lock {lock}" in stale.detail and stale.fix == f"rm {lock}"
    assert main(["preflight", "--master-port", str(free_port())]) == 3
    # a build running in that directory (torch starts ninja there) holds the lock legitimately, however old
    builder = subprocess.Popen(["sleep", "60"], cwd=lock.parent)
    try:
        assert preflight.check_extension_locks(Target()) is None
    finally:
        builder.kill()
        builder.wait()
    lock.unlink()
    assert preflight.check_extension_locks(Target()) is None


def test_stale_locks_are_found_under_the_default_root_too(tmp_path, monkeypatch):
    """Without TORCH_EXTENSIONS_DIR torch builds in <root>/py311_cpu/<op>; a stale lock there hung a CI run."""
    import os

    from torch.utils import cpp_extension

    lock = tmp_path / "py311_cpu" / "deepspeed_shm_comm" / "lock"
    lock.parent.mkdir(parents=True)
    lock.touch()
    old = lock.stat().st_mtime - preflight.STALE_LOCK_AGE_S - 60
    os.utime(lock, (old, old))
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    monkeypatch.setattr(cpp_extension, "get_default_build_root", lambda: str(tmp_path))
    stale = preflight.check_extension_locks(Target())
    assert stale is not None and stale.fix == f"rm {lock}"


# ---------------------------------------------------------------- the master port, as the rendezvous binds it

def _time_wait_port() -> int:
    """A port whose only socket is in TIME_WAIT: what a finished job leaves on its master port for about a minute.
    The side that closes first keeps TIME_WAIT; here the server side, whose local port is the listening port."""
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        conn, _ = server.accept()
        conn.close()  # active close on the server side: its end (local port `port`) enters TIME_WAIT
        client.recv(1)
        client.close()
    return port


def _states(port: int) -> set[str]:
    """TCP states (hex, /proc/net/tcp) of sockets whose local port is `port`."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                if int(local.rsplit(":", 1)[1], 16) == port:
                    found.add(state)
    return found


def test_a_port_in_time_wait_is_free_for_the_rendezvous_as_for_torch():
    import errno

    import torch.distributed as dist

    port = _time_wait_port()
    assert _states(port) == {"06"}  # TIME_WAIT, nothing else
    with socket.socket() as plain:  # what the check did before: no SO_REUSEADDR, so a false "in use"
        with pytest.raises(OSError) as e:
            plain.bind(("0.0.0.0", port))
        assert e.value.errno == errno.EADDRINUSE
    assert preflight.probe_port_free(port)
    assert preflight.check_master_port(Target(master_port=port)).ok
    store = dist.TCPStore("127.0.0.1", port, 1, True, timeout=__import__("datetime").timedelta(seconds=10))
    store.set("k", "v")  # and torch's rendezvous does listen there
    assert store.get("k") == b"v"
    del store


def test_a_port_someone_listens_on_is_in_use_on_ipv4_and_ipv6():
    for family, address in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        try:
            s = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue
        with s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # even a listener that allows reuse
            s.bind((address, 0))
            s.listen()
            assert not preflight.probe_port_free(s.getsockname()[1])


def test_no_ssh_master_address_check(tmp_path):
    local = preflight.check_master_addr(Target(no_ssh=True, node_rank=0, master_addr="127.0.0.1"))
    assert local == Check("master address", True, "127.0.0.1 (127.0.0.1), this host's")
    elsewhere = preflight.check_master_addr(Target(no_ssh=True, node_rank=0, master_addr="192.0.2.1"))  # TEST-NET-1
    assert not elsewhere.ok and elsewhere.detail == ("192.0.2.1 (192.0.2.1) is not an address of this host, but "
                                                     "--node-rank 0 runs the rendezvous here")
    worker = preflight.check_master_addr(Target(no_ssh=True, node_rank=1, master_addr="192.0.2.1"))
    assert worker == Check("master address", True, "192.0.2.1 (192.0.2.1), node 0's")
    nowhere = preflight.check_master_addr(Target(no_ssh=True, node_rank=1, master_addr="zk-no-such-host.invalid"))
    assert not nowhere.ok and nowhere.detail == "zk-no-such-host.invalid does not resolve on this host"
    assert preflight.check_master_port(Target(no_ssh=True, node_rank=1)) is None  # the port is node 0's business
    assert preflight.check_launcher(Target(no_ssh=True, hosts={"a": 1, "b": 1})) is None
    assert preflight.check_ssh(Target(no_ssh=True, hosts={"a": 1, "b": 1})) is None


def test_a_plan_file_that_is_not_a_plan_is_refused_not_skipped(tmp_path, capsys):
    from zerokit.cli import main

    bogus = tmp_path / "plan.json"
    bogus.write_text('{"model": {}}')  # a JSON object, but none of the sizes the checks compare against
    assert main(["preflight", "--plan", str(bogus)]) == 2
    err = capsys.readouterr().err
    assert "is not `zerokit plan --format json` output (no memory, hardware)" in err and err.count("\n") == 1


def test_the_ssh_check_names_five_failed_hosts_and_counts_the_rest():
    import shutil

    if shutil.which("ssh") is None:
        pytest.skip("no ssh client")
    hosts = {f"node{i}.invalid": 8 for i in range(8)}  # .invalid never resolves (RFC 2606): each fails at once
    check = preflight.check_ssh(preflight.make_target(hosts=hosts, launcher="pdsh", master_port=free_port()))
    assert not check.ok and check.detail.count(".invalid (") == 5
    assert check.detail.endswith("and 3 more of the 8 hosts")


# ---------------------------------------------------------------- the CPU accelerator's threads

@pytest.mark.parametrize("ranks, threads, cores, per_rank", [
    (2, 2, 2, 1),      # this VM under the runner: torch's default, a thread per core in each of 2 ranks
    (2, 1, 2, None),   # OMP_NUM_THREADS=1, what --bind_cores_to_rank sets here
    (4, 56, 56, 14),   # a 56-core Xeon, 4 ranks at torch's default: 14 cores each
    (3, 2, 2, 1),      # more ranks than cores: one thread each still
    (1, 8, 8, None),   # one rank owns the machine
])
def test_the_advice_shares_the_cores_out_among_the_ranks(ranks, threads, cores, per_rank):
    check = preflight.threads_verdict(ranks, threads, cores, asked=False)
    assert check.ok  # an oversubscribed job still trains: advice, not a failure
    assert preflight.oversubscribed(ranks, threads, cores) == per_rank
    if per_rank is None:
        assert check.fix == ""
    else:
        assert check.fix.startswith(f"export OMP_NUM_THREADS={per_rank}, ")
        assert "more threads than cores" in check.detail


def test_the_threads_line_reads_as_written():
    assert preflight.threads_verdict(2, 2, 2, asked=False) == Check(
        "cpu threads", True, "2 ranks x 2 OpenMP threads (torch's default) on 2 cores: more threads than cores: small "
        "ops stall, steps slow down, and a `zerokit probe` profile holds for its own thread count only",
        "export OMP_NUM_THREADS=1, or give zerokit launch --env OMP_NUM_THREADS=1, or --bind-cores-to-rank (which "
        "sets it and pins each rank to its cores); probe with the same threads")
    assert preflight.threads_verdict(1, 1, 1, asked=True).detail == "1 rank x 1 OpenMP thread (OMP_NUM_THREADS) on 1 core"
    text = format_text([preflight.threads_verdict(2, 2, 2, asked=False), Check("x", False, "bad", "do y")])
    assert "\n     advice: export OMP_NUM_THREADS=1, " in text and "\n     fix: do y" in text
    assert text.endswith("preflight: 1/2 passed, 1 failed")


def test_the_threads_check_reads_this_machine_and_the_ranks_env(monkeypatch):
    """The real check on this host (no GPU: DeepSpeed's CPU accelerator): more ranks than cores are oversubscribed
    at any thread count; --env's OMP_NUM_THREADS counts over the environment's; a value OpenMP cannot read fails."""
    if preflight.probe_accelerator() != "cpu":
        pytest.skip("DeepSpeed's accelerator is not the CPU: the ranks run on the GPUs")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    default, cores = preflight.probe_threads()
    many = preflight.check_cpu_threads(Target(gpus_per_node=cores + 1))
    assert many.ok and many.fix.startswith("export OMP_NUM_THREADS=1, ")
    assert many.detail.startswith(f"{cores + 1} ranks x {default} OpenMP thread")
    one = preflight.check_cpu_threads(Target(gpus_per_node=1, env={"OMP_NUM_THREADS": str(cores)}))
    assert one == Check("cpu threads", True, f"1 rank x {cores} OpenMP thread{'s' * (cores != 1)} (OMP_NUM_THREADS) "
                                             f"on {cores} core{'s' * (cores != 1)}")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert preflight.check_cpu_threads(Target(gpus_per_node=1)).detail.startswith("1 rank x 1 OpenMP thread ")
    bad = preflight.check_cpu_threads(Target(gpus_per_node=2, env={"OMP_NUM_THREADS": "many"}))
    assert bad == Check("cpu threads", False, "OMP_NUM_THREADS='many' is not a thread count",
                        "set OMP_NUM_THREADS to a whole number >= 1, or unset it")
    for odd in ("²", "9" * 5000, "-1", "0", "1.5", ""):  # a superscript digit, past int()'s 4,300 digits, ...
        check = preflight.check_cpu_threads(Target(gpus_per_node=2, env={"OMP_NUM_THREADS": odd}))
        assert not check.ok and check.detail.endswith("is not a thread count"), odd
    assert preflight.check_cpu_threads(Target(gpus_per_node=2, env={"OMP_NUM_THREADS": " 4,2 "})).detail.startswith(
        "2 ranks x 4 OpenMP threads (OMP_NUM_THREADS)")  # OpenMP's nested list: the outer level's count
    huge = preflight.check_cpu_threads(Target(gpus_per_node=2, env={"OMP_NUM_THREADS": "x" * 100_000}))
    assert huge.detail == f"OMP_NUM_THREADS={'x' * 40 + '...'!r} is not a thread count"  # one short line
    assert preflight.check_cpu_threads(Target()) is None  # no ranks asked for: nothing to count


def test_ranks_started_through_ssh_get_only_what_deepspeeds_runner_exports(monkeypatch, tmp_path):
    """pdsh (ssh) and openmpi start each node's ranks in a fresh shell, and DeepSpeed's runner exports only its
    prefixes' variables (runner.EXPORT_ENVS, NCCL...), the user's .deepspeed_env and --env: the threads check
    counted this shell's OMP_NUM_THREADS=1 for the ranks of a hostfile job that runs here, which start at torch's
    default. On one node, or through slurm's srun --export=ALL, this environment is the ranks'."""
    if preflight.probe_accelerator() != "cpu":
        pytest.skip("DeepSpeed's accelerator is not the CPU: the ranks run on the GPUs")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    default, _ = preflight.probe_threads()
    hosts = {"localhost": 2, "node2": 2}
    for launcher in ("pdsh", "openmpi"):
        target = Target(hosts=hosts, launcher=launcher)
        assert "OMP_NUM_THREADS" not in target.rank_env and target.rank_env["NCCL_DEBUG"] == "INFO"
        assert f"2 ranks x {default} OpenMP thread" in preflight.check_cpu_threads(target).detail
        given = Target(hosts=hosts, launcher=launcher, env={"OMP_NUM_THREADS": "1"})
        assert "2 ranks x 1 OpenMP thread (OMP_NUM_THREADS)" in preflight.check_cpu_threads(given).detail
    (tmp_path / ".deepspeed_env").write_text("OMP_NUM_THREADS=1\n")
    assert "2 ranks x 1 OpenMP thread (OMP_NUM_THREADS)" in preflight.check_cpu_threads(Target(hosts=hosts)).detail
    for target in (Target(gpus_per_node=2), Target(hosts=hosts, launcher="slurm")):
        assert target.rank_env["OMP_NUM_THREADS"] == "1"
        assert "2 ranks x 1 OpenMP thread (OMP_NUM_THREADS)" in preflight.check_cpu_threads(target).detail


def test_launch_hands_its_env_to_the_threads_check(tmp_path, capsys):
    """`zerokit launch --env OMP_NUM_THREADS=...` is what the ranks get, so it is what the preflight counts: a value
    OpenMP cannot read stops the launch before any rank starts (exit 3)."""
    if preflight.probe_accelerator() != "cpu":
        pytest.skip("DeepSpeed's accelerator is not the CPU: the ranks run on the GPUs")
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('the preflight should have stopped the launch')\n")
    rc = main(["launch", "--gpus-per-node", "2", "--master-port", str(free_port()), "--env", "OMP_NUM_THREADS=0",
               str(script)])
    err = capsys.readouterr().err
    assert rc == 3, err
    assert "✗ cpu threads: OMP_NUM_THREADS='0' is not a thread count" in err and "preflight failed" in err


# ---------------------------------------------------------------- what preflight reads: refused as launch refuses it

@pytest.mark.parametrize("content, reason", [
    ("", "empty file: a ds_config is a JSON object"),
    ("\n   \n", "empty file: a ds_config is a JSON object"),
    ("{nope", "syntax error: "),
    ("[]", "top level is a list; a ds_config must be a JSON object"),
])
def test_preflight_refuses_a_config_lint_refuses(capsys, tmp_path, content, reason):
    """An empty file passed every check (exit 0) and the job then failed in DeepSpeed or HF's json.load."""
    cfg = tmp_path / "cfg.json"
    cfg.write_text(content)
    assert main(["preflight", "--config", str(cfg)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # refused before any check ran
    assert captured.err.startswith(f"zerokit preflight: error: --config {cfg}: {reason}")
    assert captured.err.count("\n") == 1


def test_an_empty_config_value_is_refused_as_launch_refuses_it(capsys):
    """`--config ''` (a variable that expanded to nothing) was ignored: preflight checked no config at all."""
    assert main(["preflight", "--config", ""]) == 2
    assert capsys.readouterr().err == "zerokit preflight: error: --config is empty; give a file path\n"
    assert main(["launch", "--dry-run", "--config", "", "train.py"]) == 2
    assert capsys.readouterr().err == "zerokit launch: error: --config is empty; give a file path\n"


@pytest.fixture(scope="module")
def real_plan() -> dict:
    """What `zerokit plan --format json` writes, for a 7B model on two A100s."""
    r = subprocess.run([sys.executable, "-m", "zerokit", "plan", "--model", "7B", "--gpu", "a100-80gb",
                        "--gpus-per-node", "2", "--seq-len", "512", "--format", "json"],
                       capture_output=True, text=True, check=True)
    return json.loads(r.stdout)


FIX = "write it again with `zerokit plan ... --format json > plan.json`"


GPU_BYTES = "hardware.gpu_memory_bytes must be a whole number of bytes >= 1, got"


@pytest.mark.parametrize("section, key, value, message", [
    ("hardware", "gpu_memory_bytes", "80GB", f'{GPU_BYTES} "80GB"'),
    ("hardware", "gpu_memory_bytes", -1, f"{GPU_BYTES} -1"),
    ("hardware", "gpu_memory_bytes", float("nan"), f"{GPU_BYTES} NaN"),
    ("hardware", "world_size", 0, "hardware.world_size must be a whole number >= 1, got 0"),
    ("hardware", "world_size", 3, "hardware.world_size is 3, not gpus_per_node x nodes = 2"),
    ("hardware", "gpus_per_node", True, "hardware.gpus_per_node must be a whole number from 1 to 4096, got true"),
    ("hardware", "nodes", 1.0, "hardware.nodes must be a whole number >= 1, got 1.0"),
    ("memory", "per_node_cpu", None, "memory.per_node_cpu must be an object {total: bytes, ...}, got null"),
    ("memory", "per_gpu", {"total": "70GB"}, 'memory.per_gpu.total must be a whole number of bytes >= 0, got "70GB"'),
    ("memory", "nvme", {"total": -5}, "memory.nvme.total must be a whole number of bytes >= 0, got -5"),
])
def test_plan_fields_of_the_wrong_type_or_value_are_refused(capsys, tmp_path, real_plan, section, key, value,
                                                           message):
    """They were read as absent: launch --dry-run exited 0 and preflight skipped the checks they feed."""
    plan = json.loads(json.dumps(real_plan))
    plan[section][key] = value
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    (tmp_path / "train.py").write_text("")
    for command in (["preflight"], ["launch", "--dry-run"]):
        argv = [*command, "--plan", str(path)] + ([str(tmp_path / "train.py")] if "launch" in command else [])
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err == f"zerokit {command[0]}: error: --plan {path}: {message}; {FIX}\n"


def test_every_bad_plan_field_is_named_in_the_one_line(capsys, tmp_path, real_plan):
    plan = json.loads(json.dumps(real_plan))
    plan["hardware"]["world_size"] = 0
    plan["memory"]["per_node_cpu"] = None
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    assert main(["preflight", "--plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert ": memory.per_node_cpu must be" in err and "; hardware.world_size must be" in err and err.count("\n") == 1


def test_a_real_plan_passes_the_field_checks(tmp_path, real_plan):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(real_plan))
    assert preflight.read_plan(str(path)) == real_plan
    (tmp_path / "train.py").write_text("")
    assert main(["launch", "--dry-run", "--plan", str(path), str(tmp_path / "train.py")]) == 0


def test_a_newline_in_a_checks_detail_stays_on_its_line(tmp_path):
    """A check's detail quotes paths (the hostfile, an nvme_path): the report keeps one line per check."""
    check = preflight.check_hostfile(Target(hostfile=str(tmp_path / "host\nfile")))
    assert not check.ok and "\n" in check.detail
    lines = format_text([check]).splitlines()
    assert len(lines) == 3 and lines[0].endswith("host\\nfile: no such file")


def test_preflight_does_not_repeat_deepspeeds_cpu_accelerator_warning():
    """DeepSpeed logs "Setting accelerator to CPU ..." when preflight imports it on a host without GPUs; the
    accelerator check says the same in its own line, so the warning is dropped and the check kept."""
    r = subprocess.run([sys.executable, "-m", "zerokit", "preflight", "--master-port", str(free_port())],
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode in (0, 3), r.stderr
    assert "Setting accelerator to CPU" not in r.stderr + r.stdout
    assert " accelerator: " in r.stdout


# ---------------------------------------------------------------- the job's hosts, its config's needs, DeepSpeed's ssh

def test_nodes_include_and_exclude_narrow_the_hosts_and_ranks_the_checks_see(tmp_path):
    # DeepSpeed's runner: parse_inclusion_exclusion, then apply_num_nodes_and_gpus (the first --num_nodes hosts)
    hostfile = tmp_path / "hf2"
    hostfile.write_text("node1 slots=4\nnode2 slots=4\n")
    whole = preflight.make_target(hostfile=str(hostfile))
    assert whole.hosts == {"node1": 4, "node2": 4} and whole.world_size == 8
    first = preflight.make_target(hostfile=str(hostfile), nodes=1)
    assert first.hosts == {"node1": 4} and first.world_size == 4
    one = preflight.make_target(hostfile=str(hostfile), include="node1:0")
    assert one.hosts == {"node1": 1} and one.world_size == 1
    assert preflight.make_target(hostfile=str(hostfile), include="node2").hosts == {"node2": 4}
    assert preflight.make_target(hostfile=str(hostfile), exclude="node2").hosts == {"node1": 4}
    assert preflight.make_target(hostfile=str(hostfile), exclude="node1:0,3@node2").hosts == {"node1": 2}
    assert preflight.make_target(hostfile=str(hostfile), gpus_per_node=2).hosts == {"node1": 2, "node2": 2}
    with pytest.raises(preflight.BadInput, match="node3 is not one of the job's hosts"):
        preflight.make_target(hostfile=str(hostfile), include="node3")


def _ssh_refused(monkeypatch) -> list[str]:
    """Every host refuses the preflight's ssh (`probe_ssh`); the list it returns fills with the hosts asked."""
    asked: list[str] = []
    monkeypatch.setattr(preflight, "probe_ssh", lambda host, ssh_port=None: (asked.append(host), (False, "refused"))[1])
    return asked


def test_launch_preflight_checks_ssh_to_the_selected_hosts_only(tmp_path, monkeypatch, capsys):
    hostfile = tmp_path / "hf2"
    hostfile.write_text("node1.invalid slots=4\nnode2.invalid slots=4\n")
    script = tmp_path / "train.py"
    script.write_text("")
    asked = _ssh_refused(monkeypatch)
    monkeypatch.setattr(preflight.shutil, "which", lambda name: f"/usr/bin/{name}")  # pdsh "present"
    for extra in (["--nodes", "1"], ["--include", "node1.invalid:0"]):
        asked.clear()
        code = main(["launch", "--hostfile", str(hostfile), "--master-port", str(free_port()), *extra, str(script)])
        err = capsys.readouterr().err
        assert code == 3 and asked == ["node1.invalid"], err
        assert "node2.invalid" not in err


@pytest.mark.parametrize("narrowed", [["--exclude", "node2.invalid"], ["--nodes", "1"]])
def test_a_hostfile_narrowed_to_this_machine_still_checks_ssh_to_it(tmp_path, monkeypatch, capsys, narrowed):
    """A hostfile of localhost and another node, narrowed to localhost by --exclude or --nodes: DeepSpeed's runner
    still takes its multi-node path (any hostfile does), ssh-checks localhost and starts pdsh, and launch passes it
    --force_multi. The preflight took the narrowed hosts for one node and skipped the ssh and launcher checks, so it
    passed a job the runner then refused ("host=localhost was not reachable via ssh")."""
    import inspect

    from deepspeed.launcher import runner as ds_runner

    source = inspect.getsource(ds_runner.main)
    assert "multi_node_exec = True" in source and "first_host = list(active_resources.keys())[0]" in source
    pool = ds_runner._parse_hostfile(["localhost slots=2", "node2.invalid slots=2"])
    active = ds_runner.parse_inclusion_exclusion(pool, "", "node2.invalid")
    assert list(ds_runner.apply_num_nodes_and_gpus(active, 1, -1)) == list(active) == ["localhost"]
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("localhost slots=2\nnode2.invalid slots=2\n")
    script = tmp_path / "train.py"
    script.write_text("")
    asked = _ssh_refused(monkeypatch)
    monkeypatch.setattr(preflight.shutil, "which", lambda name: f"/usr/bin/{name}")  # pdsh "present"
    for command in (["preflight"], ["launch"]):
        asked.clear()
        code = main([*command, "--hostfile", str(hostfile), "--master-port", str(free_port()), *narrowed,
                     *([str(script)] if command == ["launch"] else [])])
        captured = capsys.readouterr()
        assert code == 3 and asked == ["localhost"], captured
        assert "launcher pdsh" in captured.out + captured.err


def test_offloaded_lion_and_adagrad_check_their_own_cpu_ops():
    from deepspeed.accelerator import get_accelerator

    offload = {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
    for kind, op, builder in (("Lion", "cpu_lion", "CPULionBuilder"), ("adagrad", "cpu_adagrad", "CPUAdagradBuilder"),
                              ("AdamW", "cpu_adam", "CPUAdamBuilder")):
        needs = needs_from_config({**offload, "optimizer": {"type": kind, "params": {"lr": 1e-4}}})
        assert (needs.cpu_adam, needs.cpu_optimizer_op) == (True, op)
        check = preflight.check_cpu_adam(Target(needs=needs))
        compatible = get_accelerator().create_op_builder(builder).is_compatible(verbose=False)
        assert check.name == f"op {op}" and check.ok == compatible
    assert needs_from_config(offload).cpu_optimizer_op == "cpu_adam"  # no optimizer block: the Trainer's AdamW


def test_fp16_on_a_device_without_it_fails_with_the_fix(tmp_path, capsys):
    from deepspeed.accelerator import get_accelerator

    fp16 = bool(get_accelerator().is_fp16_supported())
    bf16 = bool(get_accelerator().is_bf16_supported())
    cfg = tmp_path / "fp16.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": True}}))
    code = main(["preflight", "--config", str(cfg), "--gpus-per-node", "2", "--master-port", str(free_port()),
                 "--format", "json"])
    check = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}["precision"]
    assert check["ok"] == fp16 and (code == 3) == (not fp16)
    if not fp16:  # this CPU: torch._C._is_mkldnn_fp16_supported() is False
        assert "Type fp16 is not supported on your device." in check["detail"]
        assert ("bf16.enabled to true" in check["fix"]) == bf16 and "fp32" in check["fix"]
    assert preflight.check_dtypes(Target(needs=needs_from_config({"bf16": {"enabled": "auto"}}))) is None


def test_batch_size_against_the_jobs_world_size_is_lints_zk201(tmp_path, capsys):
    cfg = tmp_path / "ds_config.json"
    cfg.write_text(json.dumps({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
                               "gradient_accumulation_steps": 2}))
    lint = main(["lint", "--world-size", "3", str(cfg)])
    assert lint == 1 and "ZK201" in capsys.readouterr().out
    code = main(["preflight", "--config", str(cfg), "--gpus-per-node", "3", "--master-port", str(free_port()),
                 "--format", "json"])
    check = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}["batch size"]
    assert code == 3 and not check["ok"] and "ZK201" in check["detail"] and "12" in check["fix"]
    ok = preflight.check_batch_size(preflight.make_target(config=str(cfg), gpus_per_node=2))
    assert ok.ok and "world size 2" in ok.detail
    # A zerokit plan --target trainer config: all "auto", which nothing here checks (it said "auto ... fit").
    cfg.write_text(json.dumps(dict.fromkeys(("train_batch_size", "train_micro_batch_size_per_gpu",
                                             "gradient_accumulation_steps"), "auto")))
    auto = preflight.check_batch_size(preflight.make_target(config=str(cfg), gpus_per_node=2))
    assert auto.ok and "fit" not in auto.detail and "Trainer or Accelerate fills them for world size 2" in auto.detail


def test_ssh_check_is_deepspeeds_and_writes_no_host_keys(monkeypatch):
    seen = []

    def run(argv, **kwargs):
        seen.append(argv)
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(preflight.subprocess, "run", run)
    assert preflight.probe_ssh("node1") == (True, "")
    argv = seen[0]
    assert argv[0] == "ssh" and argv[-2:] == ["node1", "hostname"]  # runner.py: ssh -o PasswordAuthentication=no H hostname
    options = [argv[i + 1] for i, a in enumerate(argv) if a == "-o"]
    assert "PasswordAuthentication=no" in options and "BatchMode=yes" in options
    assert any(o.startswith("ConnectTimeout=") for o in options)
    assert not any(o.startswith(("StrictHostKeyChecking", "UserKnownHostsFile")) for o in options)


def test_cpu_accelerator_line_names_the_backend_deepspeed_picks(monkeypatch):
    import torch
    from deepspeed.accelerator import get_accelerator

    if torch.cuda.is_available():
        pytest.skip("this host has GPUs")
    monkeypatch.setattr(get_accelerator(), "_communication_backend_name", "ccl")  # oneccl_bindings_for_pytorch
    check = preflight.check_accelerator(Target(gpus_per_node=2))
    assert check.detail == "no GPU found: 2 ranks run on DeepSpeed's CPU accelerator (ccl)"


@pytest.mark.parametrize("built", ["same", "2.1", "9.9"])
def test_a_prebuilt_op_for_another_torch_fails_as_deepspeed_refuses_it(built):
    """DeepSpeed's OpBuilder.load refuses a prebuilt op whose torch differs in major.minor; the preflight says it
    first, with the same comparison."""
    torch = pytest.importorskip("torch")
    builder = pytest.importorskip("deepspeed.ops.op_builder.builder")
    runtime = ".".join(torch.__version__.split(".")[:2])
    info = {"version": runtime if built == "same" else built, "cuda_version": "0.0", "hip_version": "0.0"}
    mismatch = preflight.prebuilt_mismatch(info, torch.__version__, None, None)
    try:
        builder.OpBuilder.validate_torch_version(info)
        refused = False
    except RuntimeError:
        refused = True
    assert refused == (mismatch is not None)
    if refused:
        assert mismatch == f"built with torch {built}, this torch is {runtime}"


def test_a_prebuilt_op_for_another_cuda_or_hip():
    info = {"version": "2.4", "cuda_version": "12.1", "hip_version": "6.0"}
    assert preflight.prebuilt_mismatch(info, "2.4.1+cu121", "12.1", None) is None
    assert preflight.prebuilt_mismatch(info, "2.4.1+cu124", "12.4", None) == "built for CUDA 12.1, this torch's is 12.4"
    assert preflight.prebuilt_mismatch(info, "2.4.1", None, None) is None  # no GPU: DeepSpeed does not compare CUDA
    assert preflight.prebuilt_mismatch(info, "2.4.1+rocm6.1", None, "6.1.40091") == \
        "built for HIP 6.0, this torch's is 6.1"


def test_the_op_check_fails_on_a_mismatched_prebuilt_op(monkeypatch):
    monkeypatch.setattr(preflight, "probe_op", lambda name: (True, True, False, "built with torch 2.1, this torch is 2.13"))
    check = preflight._op_check("op cpu_adam", "CPUAdamBuilder", "the config offloads the optimizer", "fix")
    assert not check.ok and "prebuilt, but built with torch 2.1, this torch is 2.13: DeepSpeed refuses" in check.detail
    assert "pip install --force-reinstall" in check.fix
    monkeypatch.setattr(preflight, "probe_op", lambda name: (True, True, False, None))
    assert preflight._op_check("op cpu_adam", "CPUAdamBuilder", "why", "fix").ok


def test_this_install_s_ops_probe_without_a_mismatch():
    pytest.importorskip("deepspeed")
    prebuilt, compatible, _, mismatch = preflight.probe_op("CPUAdamBuilder")
    assert compatible and (mismatch is None or prebuilt)


def test_the_master_port_is_checked_where_rank_0_runs(monkeypatch):
    """DeepSpeed's runner puts rank 0 on the job's first host: the port is checked there, over ssh, unless that
    host is this one; a login node's own ports say nothing about it."""
    asked = []
    monkeypatch.setattr(preflight, "probe_remote_port",
                        lambda host, port, ssh_port=None: asked.append((host, port)) or (True, ""))
    remote = Target(hosts={"gpu-a": 8, "gpu-b": 8}, master_port=29611)
    assert not remote.hosts_rendezvous
    check = preflight.check_master_port(remote)
    assert asked == [("gpu-a", 29611)] and not check.ok
    assert check.detail == "29611 is in use on gpu-a, rank 0's node" and "--master-port" in check.fix
    monkeypatch.setattr(preflight, "probe_remote_port", lambda host, port, ssh_port=None: (None, "ssh failed: refused"))
    assert preflight.check_master_port(remote) == preflight.NotChecked(
        "master port", True, "29611 on gpu-a (rank 0's node): not checked (ssh failed: refused)")
    # a check not made is not shown as passed (it showed ✓)
    assert format_text([preflight.check_master_port(remote)]).splitlines() == [
        "1. - master port: 29611 on gpu-a (rank 0's node): not checked (ssh failed: refused)",
        "preflight: 0/0 passed, 1 not checked"]
    assert preflight.check_master_port(Target(hosts={"gpu-a": 8, "gpu-b": 8}, launcher="slurm")) is None
    here = Target(hosts={socket.gethostname(): 2, "gpu-b": 2})
    assert here.hosts_rendezvous and Target().hosts_rendezvous  # this host first; one node
    assert Target(no_ssh=True, node_rank=0, hosts={"gpu-a": 2, "gpu-b": 2}).hosts_rendezvous


def test_the_remote_port_probe_sees_a_listener_and_not_time_wait():
    """REMOTE_PORT_PROBE as a shell on rank 0's node runs it (here: this host's bash)."""
    def run(port: int) -> str:
        import subprocess

        return subprocess.run(["sh", "-c", preflight.REMOTE_PORT_PROBE.format(port=port)], capture_output=True,
                              text=True, check=True).stdout.strip()

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert run(s.getsockname()[1]) == "busy"
    try:
        six = socket.socket(socket.AF_INET6)
        six.bind(("::1", 0))
    except OSError:  # no IPv6 loopback on this host
        six = None
    if six is not None:
        with six:
            six.listen()
            assert run(six.getsockname()[1]) == "busy"
    assert run(_time_wait_port()) == "free"
    busy, why = preflight.probe_remote_port("zk-no-such-host.invalid", 29500)  # no ssh answer: not a verdict
    assert busy is None and why


def test_several_cpu_ranks_check_the_shm_allreduce_op():
    """deepspeed.comm builds ShareMemCommBuilder at init_distributed on the CPU accelerator (comm/torch.py
    build_shm_op): the preflight asks DeepSpeed's builder about it, as about cpu_adam."""
    pytest.importorskip("deepspeed")
    if preflight.probe_accelerator() != "cpu":
        pytest.skip("DeepSpeed's CPU accelerator only")
    check = preflight.check_shm_comm(Target(gpus_per_node=2))
    assert check.name == "op deepspeed_shm_comm" and check.ok, check
    assert "DeepSpeed's CPU allreduce between the ranks" in check.detail
    assert preflight.check_shm_comm(Target(gpus_per_node=1)) is None  # one rank: nothing to reduce between
    assert preflight.check_shm_comm(Target(hosts={"localhost": 1, "b": 1})).ok  # one rank a node, two in all
    assert preflight.check_shm_comm(Target(hosts={"a": 1, "b": 1})) is None  # their accelerator is not this one


# ---------------------------------------------------------------- --plan against the job and the config

def plan_doc(fits: bool = True, gpus_per_node: int = 2, nodes: int = 1, **decision) -> dict:
    """A plan as `zerokit plan --format json` writes it, its fields by hand: ZeRO-2 with CPU optimizer offload at
    micro-batch 4, 70 GB of an 80 GB GPU."""
    return {"hardware": {"gpus_per_node": gpus_per_node, "nodes": nodes, "world_size": gpus_per_node * nodes},
            "memory": {"per_gpu": {"total": 70 * 10**9}, "gpu_capacity": 80 * 10**9},
            "decision": {"zero_stage": 2, "offload_optimizer": "cpu", "offload_param": "none", "micro_batch_size": 4,
                         "fits": fits, **decision},
            **({} if fits else {"missing": "the closest setup needs 1.7 TB per GPU, over the 34.1 GB of the GPU"})}


def plan_target(tmp_path, plan: dict, config: dict | None = None, **kw) -> Target:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    cfg = None
    if config is not None:
        cfg = tmp_path / "ds.json"
        cfg.write_text(json.dumps(config))
    return preflight.make_target(config=str(cfg) if cfg else None, plan=str(path), **kw)


ZERO2_CPU = {"train_micro_batch_size_per_gpu": 4,
             "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}


def test_a_plan_that_does_not_fit_fails_its_check(tmp_path):
    """`zerokit plan` exits 1 and still writes the closest miss; preflight passed it with a ✓ for every size."""
    target = plan_target(tmp_path, plan_doc(fits=False), ZERO2_CPU)
    assert preflight.check_plan_fits(target) == Check(
        "plan", False, "nothing fits: `zerokit plan` exited 1, and this decision is its closest miss (the closest "
        "setup needs 1.7 TB per GPU, over the 34.1 GB of the GPU)",
        "re-plan with what it says is missing until `zerokit plan` exits 0, and launch that plan's config")
    assert preflight.check_plan_fits(plan_target(tmp_path, plan_doc(), ZERO2_CPU)) == Check(
        "plan", True, "fits: 70.0 GB per GPU of 80.0 GB")
    assert preflight.check_plan_fits(Target()) is None  # no --plan
    del_decision = plan_doc()
    del del_decision["decision"]
    assert preflight.check_plan_fits(plan_target(tmp_path, del_decision)) is None  # a plan without one: as before


def test_a_real_plan_that_does_not_fit_fails_the_preflight(tmp_path, capsys):
    """70B on one 32 GB V100 with ZeRO-0 forced: `zerokit plan` exits 1 (nothing fits); the preflight said 'pass'."""
    r = subprocess.run([sys.executable, "-m", "zerokit", "plan", "--model", "70B", "--gpu", "v100-32gb",
                        "--gpus-per-node", "1", "--seq-len", "4096", "--zero-stage", "0", "--format", "json"],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 1 and json.loads(r.stdout)["decision"]["fits"] is False
    (tmp_path / "plan.json").write_text(r.stdout)
    code = main(["preflight", "--plan", str(tmp_path / "plan.json"), "--master-port", str(free_port())])
    out = capsys.readouterr().out
    assert code == 3 and "✗ plan: nothing fits: `zerokit plan` exited 1, and this decision is its closest miss" in out, out


@pytest.mark.parametrize("kw, plan, detail, fix", [
    ({"gpus_per_node": 4}, plan_doc(), "the plan is for 1 node x 2 GPUs (2), the job runs 1 node x 4 GPUs (4)",
     "re-plan with --gpus-per-node 4 --nodes 1, or run the job on the plan's 2 GPUs"),
    ({"gpus_per_node": 2}, plan_doc(nodes=2), "the plan is for 2 nodes x 2 GPUs (4), the job runs 1 node x 2 GPUs (2)",
     "re-plan with --gpus-per-node 2 --nodes 1, or run the job on the plan's 4 GPUs"),
    ({}, plan_doc(nodes=2), "the plan is for 2 nodes x 2 GPUs (4), the job runs 1 node x 2 GPUs (2)",
     "re-plan with --gpus-per-node 2 --nodes 1, or run the job on the plan's 4 GPUs"),
    # the hosts' slots stand without --gpus-per-node (the runner gets no --num_gpus): the plan's 8 no longer hid them
    ({"hosts": {"node1": 4, "node2": 4}}, plan_doc(gpus_per_node=8),
     "the plan is for 1 node x 8 GPUs (8), the job runs 2 nodes x 4 GPUs (8)",
     "re-plan with --gpus-per-node 4 --nodes 2, or run the job on the plan's 8 GPUs"),
    ({"hosts": {"node1": 8, "node2": 4}}, plan_doc(gpus_per_node=8),
     "the plan is for 1 node x 8 GPUs (8), the job runs 12 GPUs on 2 nodes (node1:8, node2:4)",
     "give every host 8 slots, or run the job on the plan's 8 GPUs"),
])
def test_a_plan_for_other_gpus_fails_its_check(tmp_path, kw, plan, detail, fix):
    target = plan_target(tmp_path, plan, **kw)
    assert preflight.check_plan_gpus(target) == Check("plan GPUs", False, detail, fix)


@pytest.mark.parametrize("kw, plan, detail", [
    ({}, plan_doc(), "1 node x 2 GPUs (2), as the job"),  # the plan's own count where none is given
    ({"gpus_per_node": 2}, plan_doc(), "1 node x 2 GPUs (2), as the job"),
    ({"hosts": {"node1": 8, "node2": 8}, "nodes": 1}, plan_doc(gpus_per_node=8), "1 node x 8 GPUs (8), as the job"),
    ({"hosts": {"node1": 8, "node2": 8}}, plan_doc(gpus_per_node=8, nodes=2), "2 nodes x 8 GPUs (16), as the job"),
    ({"hosts": {"node1": 8, "node2": 8}, "gpus_per_node": 4}, plan_doc(gpus_per_node=4, nodes=2),
     "2 nodes x 4 GPUs (8), as the job"),
])
def test_a_plan_for_the_jobs_gpus_passes(tmp_path, kw, plan, detail):
    assert preflight.check_plan_gpus(plan_target(tmp_path, plan, **kw)) == Check("plan GPUs", True, detail)


def test_a_plan_for_a_billion_nodes_is_described_not_enumerated(tmp_path):
    target = plan_target(tmp_path, plan_doc(gpus_per_node=8, nodes=10**9), gpus_per_node=8)
    assert preflight.check_plan_gpus(target).detail == ("the plan is for 1000000000 nodes x 8 GPUs (8000000000), the "
                                                        "job runs 1 node x 8 GPUs (8)")


def test_the_gpu_check_is_skipped_where_the_job_is_unknown(tmp_path):
    broken = tmp_path / "hostfile"
    broken.write_text("node1 slots=two\n")  # its own check fails; the job's GPUs are not known
    assert preflight.check_plan_gpus(plan_target(tmp_path, plan_doc(), hostfile=str(broken))) is None


@pytest.mark.parametrize("config, detail, replan", [
    ({"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}},
     "ZeRO stage 3, the plan's 2", "--zero-stage 3"),
    ({"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}},
     "offload_optimizer none, the plan's cpu", "--offload-optimizer none"),
    ({"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2, "cpu_offload": False}},
     "offload_optimizer none, the plan's cpu", "--offload-optimizer none"),
    ({"train_micro_batch_size_per_gpu": 8, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "CPU"}}},
     "train_micro_batch_size_per_gpu 8, the plan's 4", "--micro-batch 8"),
    # no zero_optimization: DeepSpeed runs ZeRO-0 without offload
    ({}, "ZeRO stage 0, the plan's 2; offload_optimizer none, the plan's cpu", "--zero-stage 0 --offload-optimizer none"),
    # ZeRO-3 on one side: the parameters' offload counts too
    ({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "nvme",
                                                                                                  "nvme_path": "/n"}}},
     "ZeRO stage 3, the plan's 2; offload_param nvme, the plan's none", "--zero-stage 3 --offload-param nvme"),
])
def test_a_config_other_than_the_plans_fails_its_check(tmp_path, config, detail, replan):
    target = plan_target(tmp_path, plan_doc(), config)
    assert preflight.check_plan_config(target) == Check(
        "plan config", False, f"{tmp_path / 'ds.json'} differs from the plan's decision: {detail}",
        f"write the config from the plan (zerokit plan ... -o ds_config.json), or re-plan with {replan} to size this "
        "config")


@pytest.mark.parametrize("config, detail", [
    (ZERO2_CPU, "ZeRO stage 2, offload_optimizer cpu, train_micro_batch_size_per_gpu 4: as the plan decided"),
    # "auto": the Trainer fills the micro-batch from its own arguments, nothing to compare; the old cpu_offload flag
    ({"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2, "cpu_offload": True}},
     "ZeRO stage 2, offload_optimizer cpu: as the plan decided"),
    # parameters offloaded below ZeRO-3: DeepSpeed ignores it, and so does the check
    ({**ZERO2_CPU, "zero_optimization": {**ZERO2_CPU["zero_optimization"], "offload_param": {"device": "cpu"}}},
     "ZeRO stage 2, offload_optimizer cpu, train_micro_batch_size_per_gpu 4: as the plan decided"),
])
def test_a_config_as_the_plan_decided_passes(tmp_path, config, detail):
    assert preflight.check_plan_config(plan_target(tmp_path, plan_doc(), config)) == Check("plan config", True, detail)


def test_the_config_check_needs_a_config_and_a_decision(tmp_path):
    assert preflight.check_plan_config(plan_target(tmp_path, plan_doc())) is None  # no --config: nothing passed
    plan = plan_doc()
    del plan["decision"]
    assert preflight.check_plan_config(plan_target(tmp_path, plan, ZERO2_CPU)) is None
    # a stage of the wrong type is lint's to report; the rest is still compared
    odd = {"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": "2", "offload_optimizer": {"device": 1}}}
    assert preflight.check_plan_config(plan_target(tmp_path, plan_doc(), odd)).detail.endswith(
        ": train_micro_batch_size_per_gpu 2, the plan's 4")


@pytest.mark.parametrize("key, value, message", [
    ("fits", "no", 'decision.fits must be true or false, got "no"'),
    ("zero_stage", 4, "decision.zero_stage must be 0, 1, 2 or 3, got 4"),
    ("zero_stage", 2.0, "decision.zero_stage must be 0, 1, 2 or 3, got 2.0"),
    ("offload_optimizer", "gpu", 'decision.offload_optimizer must be none, cpu or nvme, got "gpu"'),
    ("micro_batch_size", 0, "decision.micro_batch_size must be a whole number >= 1, got 0"),
])
def test_plan_decision_fields_of_the_wrong_type_are_refused(capsys, tmp_path, key, value, message):
    plan = plan_doc(**{key: value})
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    assert main(["preflight", "--plan", str(path)]) == 2
    assert capsys.readouterr().err == f"zerokit preflight: error: --plan {path}: {message}; {FIX}\n"


def test_the_launch_preflight_fails_on_a_config_other_than_the_plans(tmp_path, capsys, monkeypatch):
    """Through `zerokit launch`: exit 3, nothing started (the script would say so if it ran)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plan.json").write_text(json.dumps(plan_doc()))
    (tmp_path / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 3}}))
    (tmp_path / "train.py").write_text("open('ran', 'w').close()\n")
    code = main(["launch", "--config", "ds.json", "--plan", "plan.json", "--gpus-per-node", "2", "--master-port",
                 str(free_port()), "train.py"])
    err = capsys.readouterr().err
    assert code == 3 and not (tmp_path / "ran").exists()
    assert "✗ plan config: ds.json differs from the plan's decision: ZeRO stage 3, the plan's 2; offload_optimizer " \
           "none, the plan's cpu" in err, err


@pytest.mark.parametrize("config, ok, detail", [
    # no "auto": linted for DeepSpeed itself, so the HF Trainer's refusal of a config without zero_optimization
    # (ZK502) does not fail a script that may not be the Trainer's
    ({"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": True}}, True, "lint finds no errors"),
    ({"train_micro_batch_size_per_gpu": "auto", "fp16": {"enabled": True}}, False,
     ("lint finds 1 error; the first: TrainingArguments(deepspeed=...) refuses a DeepSpeed config without a "
     "zero_optimization section")),
    ({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2, "overlap_com": True}}, False,
     "lint finds 1 error; the first: unknown key 'overlap_com' in zero_optimization"),
])
def test_the_config_check_is_lint_for_the_consumer_the_config_shows(tmp_path, config, ok, detail):
    """A config with "auto" values goes to the HF Trainer (nothing else fills them); one without may be any
    script's, so only what DeepSpeed itself refuses fails the check."""
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps(config))
    target = preflight.make_target(config=str(cfg), gpus_per_node=2, master_port=free_port())
    check = preflight.check_config_lint(target)
    assert check.name == "config" and check.ok is ok and check.detail.startswith(detail)
    assert (check.fix == "") == ok
    if not ok:
        consumer = "trainer" if "auto" in json.dumps(config) else "deepspeed"
        assert check.fix == f"run `zerokit lint {cfg} --target {consumer} --world-size 2` and fix what it lists"


@pytest.mark.parametrize("extra, ok, said", [
    # LLaMA-Factory's ds_z3_config.json (examples/deepspeed) carries both: keys DeepSpeed never reads (its real ones
    # are comms_logger and the top-level monitors), and it trains; lint's errors, named here without failing
    ({"comms_config": {"verbose": False}, "monitor_config": {"enabled": True, "csv_monitor": {"enabled": False}}},
     True, "lint finds no errors; DeepSpeed silently ignores comms_config, monitor_config"),
    # ignored too, but what it means sets the training: ZeRO lost, or overlap_comm at the top level
    ({"zero_optimisation": {"stage": 3}}, False, ("lint finds 1 error; the first: unknown key 'zero_optimisation' "
                                                 "at the top level: DeepSpeed silently ignores it (did you mean")),
    ({"zero_optimization": {"stage": 2}, "overlap_comm": True}, False,
     ("lint finds 1 error; the first: unknown key 'overlap_comm' at the top level: DeepSpeed silently ignores it "
     "(it belongs in zero_optimization")),
])
def test_keys_deepspeed_ignores_fail_the_config_check_only_where_they_set_the_training(tmp_path, extra, ok, said):
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, **extra}))
    check = preflight.check_config_lint(preflight.make_target(config=str(cfg), gpus_per_node=2,
                                                              master_port=free_port()))
    assert check.ok is ok and check.detail.startswith(said)
    if ok:
        assert check.fix == (f"`zerokit lint {cfg} --target deepspeed --world-size 2` says what each is (a misspelt "
                             "key is lost)")


def test_without_a_config_there_is_no_config_check():
    assert preflight.check_config_lint(Target(gpus_per_node=2)) is None


def test_the_config_check_lints_the_config_as_it_was_read_once(tmp_path):
    """The checks hold the document make_target read: a file rewritten (or deleted) afterwards is not read again,
    so every check, lint's among them, sees the config the job's batch and plan checks saw."""
    cfg = tmp_path / "ds.json"
    cfg.write_text('{"train_micro_batch_size_per_gpu": 1,\n "zero_optimization": {"stage": 2}}')
    target = preflight.make_target(config=str(cfg), gpus_per_node=2, master_port=free_port())
    assert target.config == {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}}
    assert target.document.positions[("zero_optimization", "stage")] == (2, 24)  # lint's positions, from that read
    cfg.write_text('{"train_micro_batch_size_per_gpu": 1, "zero_optimisation": {"stage": 2}}')
    assert preflight.check_config_lint(target).ok
    cfg.unlink()
    assert preflight.check_config_lint(target).detail == "lint finds no errors"


def test_slurm_jobs_need_ssh_to_their_first_host(monkeypatch):
    """DeepSpeed's runner ssh-checks the first host and asks it for its address (`ssh HOST hostname -I`) whatever
    the backend; the preflight skipped ssh for slurm and passed a job the runner then refused ("host=node1 was not
    reachable via ssh")."""
    import inspect

    from deepspeed.launcher import runner as ds_runner

    source = inspect.getsource(ds_runner.main)
    assert "if multi_node_exec and not args.no_ssh_check and not args.no_ssh:" in source
    asked = _ssh_refused(monkeypatch)
    check = preflight.check_ssh(Target(hosts={"node1": 2, "node2": 2}, launcher="slurm"))
    assert asked == ["node1"] and not check.ok and "node1" in check.detail


@pytest.mark.parametrize("answer, address", [("", None), ("echo 'hostname: invalid option -- I' >&2; exit 1", None),
                                             ("echo '10.0.0.7 fd00::7 '", "10.0.0.7")])
def test_without_master_addr_the_first_host_must_give_its_address(tmp_path, monkeypatch, answer, address):
    """Without --master_addr DeepSpeed's runner takes the first word of `ssh FIRST_HOST hostname -I`, whatever the
    backend; a hostname without -I (busybox) fails it and an empty answer is an IndexError. The preflight ran
    `ssh HOST hostname` only and passed both. The ssh here is a script that answers as such a host would."""
    import inspect

    from deepspeed.launcher import runner as ds_runner

    source = inspect.getsource(ds_runner.main)
    assert 'ssh_check_cmd += f" {first_host} hostname -I"' in source
    assert "args.master_addr = result.decode('utf-8').split()[0]" in source
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "ssh"
    last = '"$(eval echo \\${$#})"'  # the remote command: ssh's last argument
    fake.write_text(f'#!/bin/sh\ncase {last} in\n  "hostname -I") {answer or "true"};;\n  *) echo node;;\nesac\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    for launcher, fix in (("pdsh", "give zerokit launch --master-addr"), ("slurm", "takes no --master-addr")):
        check = preflight.check_ssh(Target(hosts={"node1": 2, "node2": 2}, launcher=launcher))
        assert check.ok == (address is not None), check
        if address is None:
            assert check.detail.startswith("`ssh node1 hostname -I` gives no address (") and fix in check.fix
        else:
            assert check.detail.endswith(f"the master address: {address} (`hostname -I` on node1)")
    given = preflight.check_ssh(Target(hosts={"node1": 2, "node2": 2}, master_addr="node1"))  # not asked then
    assert given.ok and "hostname -I" not in given.detail


def test_mvapich_needs_mvapich2_gdr_as_deepspeeds_backend_does(monkeypatch, tmp_path):
    from deepspeed.launcher.multinode_runner import MVAPICHRunner

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, out in (("mpiname", "MVAPICH2 2.3.7"), ("mpirun", "")):
        (bin_dir / name).write_text(f"#!/bin/sh\necho '{out}'\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    assert MVAPICHRunner.backend_exists(object.__new__(MVAPICHRunner)) is False  # DeepSpeed: "not installed"
    check = preflight.check_launcher(Target(hosts={"node1": 2, "node2": 2}, launcher="mvapich"))
    assert not check.ok and "MVAPICH2-GDR" in check.detail
    (bin_dir / "mpiname").write_text("#!/bin/sh\necho 'MVAPICH2-GDR 2.3.7'\n")
    assert MVAPICHRunner.backend_exists(object.__new__(MVAPICHRunner)) is True
    assert preflight.check_launcher(Target(hosts={"node1": 2, "node2": 2}, launcher="mvapich")).ok


def test_without_gpus_per_node_the_batch_size_is_checked_against_the_devices(tmp_path, capsys):
    """DeepSpeed starts a rank on every device without --num_gpus; the check was skipped, and a train_batch_size of
    4 at micro-batch 1 passed on this one-device machine, to assert at initialize."""
    accelerator = pytest.importorskip("deepspeed.accelerator").get_accelerator()
    count = preflight.probe_device_count()
    assert count == (len(preflight.probe_gpus() or []) or accelerator.device_count())
    config = tmp_path / "bs.json"
    config.write_text(json.dumps({"train_batch_size": 4 * count + 1, "train_micro_batch_size_per_gpu": 1,
                                  "gradient_accumulation_steps": 1}))
    check = preflight.check_batch_size(preflight.make_target(config=str(config)))
    assert not check.ok and f"x world size {count} = {count}" in check.detail and "every device" in check.detail
    config.write_text(json.dumps({"train_batch_size": count, "train_micro_batch_size_per_gpu": 1,
                                  "gradient_accumulation_steps": 1}))
    assert preflight.check_batch_size(preflight.make_target(config=str(config))).ok


def test_cpu_ranks_need_their_shared_memory_buffers_in_dev_shm(monkeypatch):
    """Each rank on DeepSpeed's CPU accelerator maps a 69 MB allreduce workspace in /dev/shm (the files measure
    69,206,024 bytes): 400 ranks passed the preflight on this 23.5 GiB /dev/shm."""
    import re as re_
    from pathlib import Path

    import deepspeed

    source = Path(deepspeed.__file__).parent / "ops" / "csrc" / "cpu" / "comm" / "shm.cpp"
    text = source.read_text()
    assert re_.search(r"#define NAIVE_ALLREDUCE_THRESHOLD 1048576\b", text)
    assert "#define MAX_BUF_SIZE 1048576 * 32" in text
    assert "char buffer[2 * NAIVE_ALLREDUCE_THRESHOLD + 2 * MAX_BUF_SIZE];" in text
    assert preflight.SHM_CPU_RANK_BYTES - (2 * 2**20 + 2 * 32 * 2**20) == 8  # the two coll_state ints
    monkeypatch.setattr(preflight, "probe_accelerator", lambda: "cpu")
    monkeypatch.setattr(preflight, "probe_shm", lambda: (24 * 2**30, 24 * 2**30))
    check = preflight.check_shm(Target(gpus_per_node=400))
    assert not check.ok and "400 ranks on DeepSpeed's CPU accelerator map 25.8 GiB" in check.detail
    assert preflight.check_shm(Target(gpus_per_node=2)).ok
    monkeypatch.setattr(preflight, "probe_shm", lambda: (24 * 2**30, 100 * 2**20))  # stale buffers fill it
    assert "remove stale /dev/shm/deepspeed_allreduce_buffer_*" in preflight.check_shm(Target(gpus_per_node=2)).fix


@pytest.mark.parametrize("kind", ["missing", "directory", "fifo"])
def test_a_hostfile_that_is_no_file_is_bad_input_to_preflight_and_launch_alike(tmp_path, capsys, kind):
    """A hostfile that cannot be read is bad input (exit 2, one line) to preflight as to launch, and as --hosts'
    mistakes are: preflight failed its hostfile check instead (exit 3) and ran the others without the job's hosts,
    advising a train_batch_size for world size 1."""
    path = tmp_path / "hosts"
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    config = tmp_path / "ds.json"
    config.write_text('{"train_batch_size": 8, "zero_optimization": {"stage": 2}}')
    said = {"missing": "no such file", "directory": "is a directory, not a regular file",
            "fifo": "is a FIFO (named pipe), not a regular file"}[kind]
    assert main(["preflight", "--config", str(config), "--hostfile", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"zerokit preflight: error: --hostfile {path}: {said}\n"
    (tmp_path / "train.py").write_text("")
    assert main(["launch", "--config", str(config), "--hostfile", str(path), str(tmp_path / "train.py")]) == 2
    assert capsys.readouterr().err == f"zerokit launch: error: --hostfile {path}: {said}\n"


# ---------------------------------------------------------------- a job none of whose ranks runs here

def test_a_job_on_other_machines_leaves_this_machines_device_and_ram_checks_unchecked(tmp_path, capsys):
    """From a CPU-only login node, `--hosts gpu-node1:8,gpu-node2:8` failed fp16 (this machine's CPU accelerator has
    none) and `--plan` compared the GPU nodes' RAM with the login node's: launch refused a job it would not run."""
    from deepspeed.accelerator import get_accelerator

    if get_accelerator().is_fp16_supported():
        pytest.skip("this accelerator has fp16: the failure to avoid does not happen here")
    cfg = tmp_path / "fp16.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": True},
                               "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}))
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"hardware": {"gpus_per_node": 8, "nodes": 2},
                                "memory": {"per_node_cpu": {"total": 10**15}}}))
    remote = preflight.make_target(config=str(cfg), plan=str(plan), hosts={"gpu-node1": 8, "gpu-node2": 8})
    assert not remote.runs_here
    for check in (preflight.check_dtypes, preflight.check_ram, preflight.check_accelerator, preflight.check_shm,
                  preflight.check_cpu_adam):
        verdict = check(remote)
        assert isinstance(verdict, preflight.NotChecked) and verdict.ok, verdict
        assert verdict.detail.startswith("not checked here: no rank runs on this machine (the job's hosts: "
                                         "gpu-node1, gpu-node2)")
    assert "the plan's 909.5 TiB a node" in preflight.check_ram(remote).detail
    assert preflight.check_cpu_threads(remote) is None  # the nodes' accelerator decides whether it applies
    text = format_text([preflight.check_dtypes(remote)])
    assert text.splitlines()[0].startswith("1. - precision: not checked here")
    assert text.endswith("preflight: 0/0 passed, 1 not checked")
    # this machine among the hosts, by name or by one of its addresses: its checks are the job's
    for hosts in ({"gpu-node1": 8, "localhost": 8}, {"127.0.0.2": 8}, {socket.gethostname(): 8}):
        here = preflight.make_target(config=str(cfg), plan=str(plan), hosts=hosts)
        assert here.runs_here, hosts
        assert not preflight.check_dtypes(here).ok and not preflight.check_ram(here).ok
    code = main(["preflight", "--config", str(cfg), "--plan", str(plan), "--hosts", "gpu-node1:8,gpu-node2:8",
                 "--format", "json"])
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert (checks["precision"]["ok"], checks["precision"]["checked"]) == (True, False)
    assert (checks["host RAM"]["ok"], checks["host RAM"]["checked"]) == (True, False)
    assert checks["imports"]["checked"] and code == 3  # ssh to gpu-node1 fails here: what still fails is real
    assert [name for name, c in checks.items() if not c["ok"]] == ["ssh"]


@pytest.mark.parametrize("content", ["node1 slots=4\nnode1 slots=4\n", b"node1 slots=2\n\xff\xfe", None])
def test_a_broken_hostfile_is_one_line_of_bad_input_and_no_batch_advice(tmp_path, capsys, content):
    """A duplicate host, non-UTF-8 bytes or a missing file: preflight exited 3 with its hostfile check and, beside
    it, a batch-size check computed for world size 1 ('set train_batch_size to 4'); `--hosts node1:2,node1:2` and
    launch exit 2 for the same mistake."""
    hostfile = tmp_path / "hostfile"
    if isinstance(content, str):
        hostfile.write_text(content)
    elif content is not None:
        hostfile.write_bytes(content)
    config = tmp_path / "ds.json"
    config.write_text('{"train_batch_size": 16, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1}')
    (tmp_path / "train.py").write_text("")
    for argv in (["preflight"], ["launch", "--dry-run"], ["launch"]):
        code = main([*argv, "--config", str(config), "--hostfile", str(hostfile),
                     *([str(tmp_path / "train.py")] if argv[0] == "launch" else [])])
        out, err = capsys.readouterr()
        assert code == 2 and err.count("\n") == 1 and "train_batch_size" not in out + err, (argv, out, err)
    assert main(["preflight", "--config", str(config), "--hosts", "node1:2,node1:2"]) == 2
    # the Target API keeps the failed hostfile check, without a batch check of a world size it does not know
    target = preflight.make_target(config=str(config), hostfile=str(hostfile))
    assert preflight.check_batch_size(target) is None and not preflight.check_hostfile(target).ok


def test_a_finding_without_a_key_is_named_by_its_code_alone(tmp_path):
    """A missing batch size (ZK202) has no key: the config check printed '(ZK202, )'."""
    cfg = tmp_path / "ds.json"
    cfg.write_text('{"zero_optimization": {"stage": 2}}')
    check = preflight.check_config_lint(preflight.make_target(config=str(cfg), gpus_per_node=1))
    assert not check.ok and check.detail.endswith("set train_micro_batch_size_per_gpu (ZK202)"), check.detail

"""Multi-node launches: the no-ssh mode's command line, the node watch that ties nodes together, pdsh failures, the
SLURM batch script under fake srun/scontrol, and (slow) real two-node jobs between two network namespaces.

The fast tests run real processes on loopback: each "node" is a zerokit `run()` with a node watch, its runner a
small Python program that sleeps, fails or prints what pdsh prints. The slow tests start `zerokit launch` in two
network namespaces joined by a veth pair (tests/_nodes.py), so the rendezvous, gloo and ssh cross from one IP address
to another; where namespaces cannot be made they run on loopback, and the namespace-only test says so when skipped.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from _nodes import Loopback, Namespaces, Sshd, make_nodes, namespaces_unavailable, ssh_unavailable
from _support import LEAVE_WITHOUT_DESTRUCTORS, pids_with

from zerokit.cli import main
from zerokit.errors import BadInput
from zerokit.launch.runner import LaunchSpec, build_command, free_port, render_files, render_sbatch, run

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "examples" / "models" / "tiny-llama"
TRAIN_DS = ROOT / "examples" / "train_ds.py"


def spec(**kw) -> LaunchSpec:
    base = {"script": "train.py", "config": "/cfg/ds.json", "runner": "deepspeed"}
    return LaunchSpec(**{**base, **kw})



# ---------------------------------------------------------------- no-ssh: the command line

def test_no_ssh_runs_this_nodes_ranks_with_the_environment_as_is(tmp_path):
    s = spec(hosts=(("node-a", 8), ("node-b", 8)), no_ssh=True, node_rank=1, master_addr="node-a",
             env=(("NCCL_DEBUG", "INFO"), ("X", "$(id) stays literal")), files_dir=str(tmp_path))
    argv, env = build_command(s)
    assert argv == ["deepspeed", "--hostfile", str(tmp_path / "hostfile"), "--no_ssh", "--node_rank", "1",
                    "--master_addr", "node-a", "--master_port", "29500", "train.py", "--deepspeed", "/cfg/ds.json"]
    assert env == {"PYTHONUNBUFFERED": "1", "NCCL_DEBUG": "INFO", "X": "$(id) stays literal"}  # no shell, no env file
    assert set(render_files(s)) == {str(tmp_path / "hostfile")}
    runner = pytest.importorskip("deepspeed.launcher.runner")
    args = runner.parse_args(argv[1:])
    assert (args.no_ssh, args.node_rank, args.master_addr, args.hostfile) == (True, 1, "node-a",
                                                                             str(tmp_path / "hostfile"))
    assert runner._parse_hostfile(render_files(s)[str(tmp_path / "hostfile")].splitlines()) == {"node-a": 8,
                                                                                                  "node-b": 8}


@pytest.mark.parametrize("kw, message", [
    ({"no_ssh": True, "node_rank": 0, "master_addr": "a"}, "--no-ssh needs every node of the job"),
    ({"no_ssh": True, "hosts": (("a", 1), ("b", 1)), "master_addr": "a"}, "--no-ssh needs --node-rank N"),
    ({"no_ssh": True, "hosts": (("a", 1), ("b", 1)), "node_rank": 0}, "--no-ssh needs --master-addr"),
    ({"no_ssh": True, "hosts": (("a", 1), ("b", 1)), "node_rank": 2, "master_addr": "a"},
     r"--node-rank 2 is not one of the job's 2 nodes \(0 to 1\)"),
    ({"hosts": (("a", 1), ("b", 1)), "node_rank": 1}, "--node-rank goes with --no-ssh"),
])
def test_no_ssh_needs_the_hosts_a_node_rank_and_the_master(kw, message):
    with pytest.raises(BadInput, match=message):
        build_command(spec(**kw))


def test_no_ssh_cli_dry_run_and_its_errors(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text("")
    code = main(["launch", "--no-ssh", "--node-rank", "1", "--hosts", "a:2,b:2", "--master-addr", "10.0.0.1",
                 "--dry-run", "train.py"])
    out = capsys.readouterr().out
    assert code == 0
    assert out.splitlines()[-1].split()[1:] == [str(Path(sys.executable).parent / "deepspeed"), "--hostfile",
                                                str(tmp_path / ".zerokit" / "hostfile"), "--no_ssh", "--node_rank",
                                                "1", "--master_addr", "10.0.0.1", "--master_port", "29500", "train.py"]
    Path("hosts").write_text("a slots=1\nb slots=1\n")
    code = main(["launch", "--no-ssh", "--node-rank", "2", "--hostfile", "hosts", "--master-addr", "a", "--dry-run",
                 "train.py"])
    assert code == 2 and "--node-rank 2 is not one of the job's 2 nodes" in capsys.readouterr().err
    code = main(["launch", "--hosts", "a:1,b:1", "--watch-port", "3000", "--dry-run", "train.py"])
    assert code == 2 and "--watch-port goes with --no-ssh" in capsys.readouterr().err


# ---------------------------------------------------------------- the node watch, with stand-in runners

DRIVER = textwrap.dedent("""
    import sys, time
    from zerokit.launch.runner import run
    from zerokit.launch.watch import NodeWatch
    rank, nodes, port, key, marker, program = sys.argv[1:7]
    watch = NodeWatch(int(rank), int(nodes), "127.0.0.1", int(port), key, join_timeout=float(sys.argv[7]),
                      dead_after=3.0).start()
    start = time.monotonic()
    code = run([sys.executable, "-c", program, marker], {}, grace=2.0, watch=watch)
    print(f"node {rank} exit {code} after {time.monotonic() - start:.1f} s", flush=True)
    sys.exit(code)
""")
SLEEP = "import time; time.sleep(120)"
UP_THEN = "import sys, time; print('up', flush=True); time.sleep({delay}); sys.exit({code})"


class Nodes:
    """Two zerokit `run()`s with a node watch on loopback, each running a stand-in for the deepspeed runner."""

    def __init__(self, tmp_path: Path, programs: list[str], key: str = "job", keys: list[str] | None = None,
                 join_timeout: float = 30.0, start: tuple[int, ...] = (0, 1)):
        self.driver = tmp_path / "driver.py"
        self.driver.write_text(DRIVER)
        self.port = free_port()
        self.marker = f"zk-watch-{os.getpid()}-{time.time_ns()}"
        self.procs: dict[int, subprocess.Popen] = {}
        for rank in start:
            self.procs[rank] = subprocess.Popen(
                [sys.executable, str(self.driver), str(rank), str(len(programs)), str(self.port),
                 (keys or [key] * len(programs))[rank], self.marker, programs[rank], str(join_timeout)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def wait_for_runners(self, timeout: float = 30) -> None:
        """Until both stand-in runners run (the drivers carry the marker too): both nodes are past the watch's start."""
        drivers = {p.pid for p in self.procs.values()}
        deadline = time.monotonic() + timeout
        while len(set(pids_with(self.marker)) - drivers) < len(self.procs) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(set(pids_with(self.marker)) - drivers) == len(self.procs)

    def wait(self, timeout: float = 60) -> dict[int, tuple[int, str]]:
        results = {}
        for rank, proc in self.procs.items():
            out, err = proc.communicate(timeout=timeout)
            results[rank] = (proc.returncode, out + err)
        return results

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for pid in pids_with(self.marker):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def nodes_factory(tmp_path):
    made: list[Nodes] = []

    def make(*args, **kw) -> Nodes:
        made.append(Nodes(tmp_path, *args, **kw))
        return made[-1]

    yield make
    for n in made:
        n.close()


def test_a_node_that_fails_stops_every_node_within_seconds(nodes_factory):
    nodes = nodes_factory([SLEEP, UP_THEN.format(delay=1, code=7)])
    start = time.monotonic()
    results = nodes.wait()
    assert time.monotonic() - start < 30  # node 0's runner would have slept 120 s
    assert [code for code, _ in results.values()] == [7, 7], results
    assert "node watch: node 1 exited with 7; stopping the ranks on every node" in results[0][1]
    assert not pids_with(nodes.marker)


def test_a_job_that_ends_well_ends_well_on_every_node(nodes_factory):
    nodes = nodes_factory([UP_THEN.format(delay=1, code=0), UP_THEN.format(delay=3, code=0)])
    results = nodes.wait()
    assert [code for code, _ in results.values()] == [0, 0], results


def test_node_0_failing_stops_the_others(nodes_factory):
    nodes = nodes_factory([UP_THEN.format(delay=1, code=5), SLEEP])
    results = nodes.wait()
    assert [code for code, _ in results.values()] == [5, 5], results
    assert not pids_with(nodes.marker)


@pytest.mark.parametrize("interrupted", [0, 1])
def test_ctrl_c_on_any_node_stops_the_ranks_on_every_node(nodes_factory, interrupted):
    nodes = nodes_factory([UP_THEN.format(delay=120, code=0)] * 2)
    nodes.wait_for_runners()
    nodes.procs[interrupted].send_signal(signal.SIGINT)
    start = time.monotonic()
    results = nodes.wait()
    assert time.monotonic() - start < 30
    assert [code for code, _ in results.values()] == [130, 130], results
    assert not pids_with(nodes.marker)


def test_a_node_whose_zerokit_dies_is_noticed(nodes_factory):
    nodes = nodes_factory([SLEEP, SLEEP])
    nodes.wait_for_runners()
    orphan = [p for p in pids_with(nodes.marker) if p not in (nodes.procs[0].pid, nodes.procs[1].pid)]
    nodes.procs[1].kill()  # SIGKILL: no goodbye; its line drops
    _out, err = nodes.procs[0].communicate(timeout=60)
    assert nodes.procs[0].returncode == 1 and "node 1's zerokit went away before its ranks finished" in err
    for pid in orphan:  # node 1's runner was orphaned by the SIGKILL, as any child of a SIGKILLed process is
        if pid in pids_with(nodes.marker):
            os.kill(pid, signal.SIGKILL)
    nodes.procs[1].wait(timeout=10)


def test_a_node_that_never_joins_fails_the_job_after_the_join_timeout(nodes_factory):
    nodes = nodes_factory([SLEEP, SLEEP], join_timeout=3.0, start=(0,))
    code, out = nodes.wait()[0]
    assert code == 1 and "node 1 did not join within 3 s" in out


def test_a_node_of_another_job_is_refused(nodes_factory):
    nodes = nodes_factory([SLEEP, SLEEP], keys=["job-a", "job-b"], join_timeout=5.0)
    results = nodes.wait()
    assert results[1][0] == 1 and "node 0 refused this node: not the same job" in results[1][1]
    assert results[0][0] == 1 and "node 1 did not join within 5 s" in results[0][1]


def test_node_0_absent_makes_a_worker_give_up_without_starting(tmp_path):
    code = ("import sys; from zerokit.errors import PreflightFailed; from zerokit.launch.watch import NodeWatch\n"
            f"try:\n    NodeWatch(1, 2, '127.0.0.1', {free_port()}, 'k', join_timeout=2).start()\n"
            "except PreflightFailed as e:\n    print(e); sys.exit(3)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 3 and "node 0's zerokit did not answer at 127.0.0.1:" in r.stdout


# ---------------------------------------------------------------- pdsh: a failed node ends the job at once

FAKE_PDSH_RUNNER = textwrap.dedent("""
    # Stands in for `deepspeed --launcher pdsh`: pdsh's stderr line for a failed node, then a wait on the other
    # node (its rank stuck before the rendezvous). SIGTERM makes it exit 1, as DeepSpeed's handler does.
    import signal, sys, time
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(1))
    print("10.0.0.2: node 1 fails before rendezvous", flush=True)
    print("pdsh@launcher: 10.0.0.2: ssh exited with exit code 7", file=sys.stderr, flush=True)
    print("progress\\r" * 3, file=sys.stderr, end="", flush=True)
    if sys.argv[1] == "wait":
        time.sleep(120)
    sys.exit(0)  # pdsh's own exit code has been reported wrong: zerokit does not rely on it
""")


@pytest.mark.parametrize("mode", ["wait", "exit0"])
def test_a_node_pdsh_reports_failed_makes_zerokit_exit_non_zero_at_once(tmp_path, capfd, mode):
    script = tmp_path / "fake_runner.py"
    script.write_text(FAKE_PDSH_RUNNER)
    start = time.monotonic()
    code = run([sys.executable, str(script), mode], {}, grace=5.0, pdsh=True)
    out, err = capfd.readouterr()
    assert code == 7 and time.monotonic() - start < 30
    assert "10.0.0.2: node 1 fails before rendezvous" in out
    assert "pdsh@launcher: 10.0.0.2: ssh exited with exit code 7\n" + "progress\r" * 3 in err  # passed through
    if mode == "wait":
        assert "zerokit launch: node 10.0.0.2 failed (exit 7); stopping the job on every node" in err


# ---------------------------------------------------------------- SLURM: the batch script under fake srun/scontrol

def _stub(path: Path, body: str) -> None:
    path.write_text(body)
    path.chmod(0o755)


def test_sbatch_pins_the_nodelist_and_every_argument_arrives(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.jsonl"
    record = (f"#!{sys.executable}\nimport json, os, sys\n"
              f"open({str(log)!r}, 'a').write(json.dumps({{'prog': os.path.basename(sys.argv[0]), 'argv': "
              "sys.argv[1:], 'node': os.environ.get('SLURM_NODEID'), 'env': {k: os.environ.get(k) for k in "
              "('MASTER_ADDR', 'MASTER_PORT', 'NCCL_DEBUG', 'PYTHONUNBUFFERED')}}) + '\\n')\n")
    _stub(bin_dir / "deepspeed", record)
    # srun: record, then run the task once per node of the allocation, as srun --ntasks-per-node=1 does
    _stub(bin_dir / "srun", record + "import subprocess\nassert sys.argv[1] == '--kill-on-bad-exit=1'\n"
          "codes = [subprocess.call(sys.argv[2:], env={**os.environ, 'SLURM_NODEID': str(n), 'SLURM_PROCID': str(n)})"
          " for n in range(2)]\nsys.exit(max(codes))\n")
    _stub(bin_dir / "scontrol", record + "assert sys.argv[1:3] == ['show', 'hostnames']\nprint('gpu-a\\ngpu-b')\n")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")  # the script names the runner `deepspeed`
    hostile = ("--name", "$(touch PWNED)", "--note", "it's `touch PWNED2`; rm -rf PWNED3\nnext line")
    config = tmp_path / "ds.json"
    config.write_text("{}")
    code = main(["launch", "--config", str(config), "--hosts", "gpu-a,gpu-b", "--gpus-per-node", "8",
                 "--master-port", "29700", "--env", "NCCL_DEBUG=INFO", "--emit-sbatch", "job.sbatch", "--time",
                 "01:00:00", "train.py", *hostile])
    assert code == 0
    text = (tmp_path / "job.sbatch").read_text()
    directives = [line.split(None, 1)[1] for line in text.splitlines() if line.startswith("#SBATCH")]
    assert directives == ["--job-name=zerokit", "--nodes=2", "--nodelist=gpu-a,gpu-b", "--ntasks-per-node=1",
                          "--exclusive", "--gpus-per-node=8", "--output=zerokit-%j.out", "--time=01:00:00"]
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": "gpu-[a-b]",
           "SLURM_JOB_ID": "42", "SLURM_SUBMIT_DIR": str(tmp_path)}
    subprocess.run(["bash", "job.sbatch"], env=env, check=True, cwd=tmp_path, timeout=60)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [c["prog"] for c in calls] == ["scontrol", "scontrol", "srun", "deepspeed", "deepspeed"]
    assert calls[0]["argv"] == calls[1]["argv"] == ["show", "hostnames", "gpu-[a-b]"]
    node_command = ("exec deepspeed --hostfile \"$HOSTFILE\" --no_ssh --node_rank \"$SLURM_NODEID\" --num_nodes 2 "
                    "--num_gpus 8 --master_addr \"$MASTER_ADDR\" --master_port \"$MASTER_PORT\" train.py "
                    + " ".join(shlex.quote(a) for a in hostile) + f" --deepspeed {config}")
    assert calls[2]["argv"] == ["--kill-on-bad-exit=1", shutil.which("bash"), "-c", node_command]
    for node, call in enumerate(calls[3:]):
        assert call["node"] == str(node)
        assert call["argv"] == ["--hostfile", str(tmp_path / "hostfile-42"), "--no_ssh", "--node_rank", str(node),
                                "--num_nodes", "2", "--num_gpus", "8", "--master_addr", "gpu-a", "--master_port",
                                "29700", "train.py", *hostile, "--deepspeed", str(config)]
        assert call["env"] == {"MASTER_ADDR": "gpu-a", "MASTER_PORT": "29700", "NCCL_DEBUG": "INFO",
                               "PYTHONUNBUFFERED": "1"}
    assert (tmp_path / "hostfile-42").read_text() == "gpu-a slots=8\ngpu-b slots=8\n"
    assert not list(tmp_path.glob("PWNED*"))


def test_sbatch_nodelist_takes_the_first_nodes_of_a_hostfile(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("n1 slots=4\nn2 slots=4\nn3 slots=4\n")
    text = render_sbatch(spec(hostfile=str(hostfile), nodes=2), "zerokit launch ...", "job.sbatch")
    assert "#SBATCH --nodelist=n1,n2\n" in text and "#SBATCH --nodes=2\n" in text
    with pytest.raises(BadInput, match="--nodes 4 is more than the 3 hosts given"):
        render_sbatch(spec(hostfile=str(hostfile), nodes=4), "zerokit launch ...", "job.sbatch")
    assert "--nodelist" not in render_sbatch(spec(gpus_per_node=8), "zerokit launch ...", "job.sbatch")


def test_sbatch_without_hosts_lets_slurm_allocate_the_nodes(tmp_path, monkeypatch, capsys):
    """`--emit-sbatch --nodes 2 --gpus-per-node 4` with no hosts: the way a Slurm user asks, leaving the choice of
    nodes to Slurm. It was refused ("--nodes 2 needs the nodes: give --hostfile"), a direct launch's rule, though the
    script reads the allocation from $SLURM_JOB_NODELIST. It asks for 2 nodes and names none; a direct launch still
    needs the hosts."""
    monkeypatch.chdir(tmp_path)
    assert main(["launch", "--nodes", "2", "--gpus-per-node", "4", "--emit-sbatch", "job.sbatch", "train.py"]) == 0
    text = (tmp_path / "job.sbatch").read_text()
    assert "#SBATCH --nodes=2\n" in text and "--nodelist" not in text and "#SBATCH --gpus-per-node=4\n" in text
    assert "--num_nodes 2 --num_gpus 4 " in text
    capsys.readouterr()
    assert main(["launch", "--nodes", "2", "--gpus-per-node", "4", "train.py"]) == 2
    assert "--nodes 2 needs the nodes: give --hostfile FILE" in capsys.readouterr().err


# ---------------------------------------------------------------- slow: real two-node jobs

JOB = textwrap.dedent("""
    # A rank that joins gloo and all-reduces until told otherwise; with --fail-early, node 1's rank dies before the
    # rendezvous (the case that leaves the other nodes waiting 30 minutes in TCPStore without a node watch).
    import os, sys, time
    node = int(os.environ["CROSS_RANK"])
    if "--fail-early" in sys.argv and node == 1:
        print("node 1 fails before the rendezvous", flush=True)
        sys.exit(7)
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    print(f"rank {dist.get_rank()} up on node {node}", flush=True)
    t = torch.ones(4)
    while True:
        dist.all_reduce(t)
        time.sleep(0.2)
""")
RUN_TIMEOUT = 1200  # a two-node DeepSpeed training on 2 busy cores, JIT-loading the CPU comm op: minutes


@pytest.fixture(scope="module")
def two_nodes():
    nodes = make_nodes()
    yield nodes
    nodes.close()


def zerokit_on(nodes, node: int, args: list[str], **kw) -> subprocess.Popen:
    return subprocess.Popen(nodes.argv(node, [sys.executable, "-u", "-m", "zerokit", "launch", *args]),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=kw.pop("cwd", ROOT), **kw)


def no_ssh_args(nodes, node: int, port: int, *extra: str) -> list[str]:
    hosts = ",".join(f"{h}:1" for h in nodes.hostnames)
    return ["--no-ssh", "--node-rank", str(node), "--hosts", hosts, "--master-addr", nodes.addresses[0],
            "--master-port", str(port), "--env", f"GLOO_SOCKET_IFNAME={nodes.ifname}", *extra]


def plan_config(tmp_path: Path, stage: int) -> Path:
    out = tmp_path / f"zero{stage}.json"
    code = main(["plan", "--model", str(MODEL), "--gpu-memory", "16GB", "--gpus-per-node", "1", "--nodes", "2",
                 "--seq-len", "64", "--micro-batch", "2", "--precision", "bf16", "--target", "deepspeed",
                 "--zero-stage", str(stage), "--offload-optimizer", "none", "--offload-param", "none", "-o", str(out)])
    assert code == 0
    return out


@pytest.mark.slow
def test_nodes_are_separate_network_namespaces(two_nodes):
    why = namespaces_unavailable()
    if isinstance(two_nodes, Loopback):
        pytest.skip(f"network namespaces cannot be made here ({why}): the multi-node tests ran with two node ranks "
                    "on loopback instead")
    a, b = two_nodes.addresses
    r = subprocess.run(two_nodes.argv(0, ["ip", "-br", "addr", "show", "zk0"]), capture_output=True, text=True,
                       check=True)
    assert a in r.stdout and b not in r.stdout
    probe = "import socket; s = socket.socket(); s.bind((%r, 0)); print('bound')"
    assert subprocess.run(two_nodes.argv(1, [sys.executable, "-c", probe % b]), capture_output=True, text=True,
                          check=False).returncode == 0
    assert subprocess.run(two_nodes.argv(1, [sys.executable, "-c", probe % a]), capture_output=True, text=True,
                          check=False).returncode != 0  # node 0's address is not node 1's


@pytest.mark.slow
@pytest.mark.parametrize("stage", [2, 3])
def test_two_nodes_train_without_ssh(two_nodes, tmp_path, stage):
    config = plan_config(tmp_path, stage)
    losses = tmp_path / "losses.jsonl"
    port = free_port()
    procs = [zerokit_on(two_nodes, n, [*no_ssh_args(two_nodes, n, port), "--files-dir", str(tmp_path / f"n{n}"),
                                       "--config", str(config), str(TRAIN_DS), "--max-steps", "3", "--loss-file",
                                       str(losses)]) for n in (0, 1)]
    outs = [p.communicate(timeout=RUN_TIMEOUT)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][-4000:] + outs[1][-4000:]
    assert f"ZeRO-{stage}, torch.bfloat16, micro-batch 2 x 1 accumulation x 2 ranks" in outs[0]
    assert "step 3 loss " in outs[0]
    rows = [json.loads(line) for line in losses.read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3] and all(math.isfinite(r["loss"]) for r in rows)
    assert 5.0 < rows[0]["loss"] < 7.5  # ln(512) = 6.24: a random model over a 512-token vocabulary
    assert "--no_ssh --node_rank 1 --master_addr" in outs[1] and "preflight: " in outs[1]


def _start_job(nodes, tmp_path, *extra: str, port: int | None = None) -> tuple[list[subprocess.Popen], str]:
    marker = f"zk-mn-{os.getpid()}-{time.time_ns()}"
    script = tmp_path / "job.py"
    script.write_text(JOB)
    port = port or free_port()
    procs = [zerokit_on(nodes, n, [*no_ssh_args(nodes, n, port), "--no-preflight", "--grace", "5", "--files-dir",
                                   str(tmp_path / f"n{n}"), str(script), marker, *extra]) for n in (0, 1)]
    return procs, marker


def _finish(procs, marker: str, timeout: float) -> list[str]:
    try:
        outs = [p.communicate(timeout=timeout)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for pid in pids_with(marker):
            os.kill(pid, signal.SIGKILL)
    return outs


@pytest.mark.slow
def test_a_rank_failing_before_the_rendezvous_fails_every_node_in_bounded_time(two_nodes, tmp_path):
    procs, marker = _start_job(two_nodes, tmp_path, "--fail-early")
    start = time.monotonic()
    deadline = start + 300
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(0.5)
    elapsed = time.monotonic() - start
    left = pids_with(marker)
    outs = _finish(procs, marker, 10)
    assert [p.returncode for p in procs] == [7, 7], outs
    assert elapsed < 300 and not left, (elapsed, left)  # without the watch: 30 minutes in TCPStore
    assert "node 1 fails before the rendezvous" in outs[1]
    assert "node watch: node 1 exited with 7; stopping the ranks on every node" in outs[0]


@pytest.mark.slow
@pytest.mark.parametrize("interrupted", [0, 1])
def test_ctrl_c_on_one_node_stops_the_ranks_on_every_node(two_nodes, tmp_path, interrupted):
    procs, marker = _start_job(two_nodes, tmp_path)
    try:
        seen = ""
        deadline = time.monotonic() + 600
        for line in procs[0].stdout:  # node 0's output: its rank is up, so the rendezvous completed
            seen += line
            if "rank 0 up" in line or time.monotonic() > deadline:  # `in`: other processes share the pipe
                break
        assert "rank 0 up" in seen, seen[-3000:]
        assert len(pids_with(marker)) >= 6  # per node: zerokit, the runner, DeepSpeed's launcher, the rank
        procs[interrupted].send_signal(signal.SIGINT)
        start = time.monotonic()
        for p in procs:
            p.wait(timeout=120)
        elapsed = time.monotonic() - start
        deadline = time.monotonic() + 15
        while pids_with(marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not pids_with(marker), f"left behind: {pids_with(marker)}"
    finally:
        _finish(procs, marker, 10)
    # the interrupted node exits 130; the other with the watch's 130, or its own non-zero code where gloo's error
    # reached its ranks first (a race that loopback tends to win)
    assert procs[interrupted].returncode == 130 and procs[1 - interrupted].returncode not in (0, None)
    assert elapsed < 60


# ---------------------------------------------------------------- slow: DeepSpeed's pdsh launcher over ssh

def _sshd(two_nodes, tmp_path_factory, **options):
    """An sshd on both namespaces (`Sshd`), closed after the module; skips where there are none."""
    if not isinstance(two_nodes, Namespaces):
        pytest.skip(f"pdsh over ssh needs two network namespaces ({namespaces_unavailable()})")
    why = ssh_unavailable()
    if why:
        pytest.skip(why)
    server = Sshd(two_nodes, tmp_path_factory.mktemp("ssh"), **options)
    yield server
    server.close()


@pytest.fixture(scope="module")
def sshd(two_nodes, tmp_path_factory):
    yield from _sshd(two_nodes, tmp_path_factory)


def pdsh_args(nodes, port: int) -> list[str]:
    hosts = ",".join(f"{h}:1" for h in nodes.hostnames)
    return ["--hosts", hosts, "--launcher", "pdsh", "--master-addr", nodes.addresses[0], "--master-port", str(port),
            "--env", f"GLOO_SOCKET_IFNAME={nodes.ifname}"]


@pytest.mark.slow
def test_pdsh_over_ssh_trains_on_two_nodes(two_nodes, sshd, tmp_path):
    config = plan_config(tmp_path, 3)
    losses = tmp_path / "losses.jsonl"
    proc = zerokit_on(two_nodes, 0, [*pdsh_args(two_nodes, free_port()), "--files-dir", str(tmp_path / "zk"),
                                     "--config", str(config), str(TRAIN_DS), "--max-steps", "3", "--loss-file",
                                     str(losses)], env=sshd.env(), cwd=tmp_path)
    out = proc.communicate(timeout=RUN_TIMEOUT)[0]
    assert proc.returncode == 0, out[-6000:]
    assert "✓ ssh: 2 hosts answer" in out and "✓ launcher pdsh: " in out
    assert f"{two_nodes.addresses[0]}: step 3 loss " in out  # pdsh prefixes each node's lines with its host
    rows = [json.loads(line) for line in losses.read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3] and all(math.isfinite(r["loss"]) for r in rows)


ONCE = textwrap.dedent("""
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    t = torch.ones(1)
    dist.all_reduce(t)
    print(f"rank {dist.get_rank()} of {dist.get_world_size()} up, sum {t.item():g}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
""") + LEAVE_WITHOUT_DESTRUCTORS  # an abort at exit would have pdsh report the node failed


@pytest.fixture(scope="module")
def sshd_2222(two_nodes, tmp_path_factory):
    yield from _sshd(two_nodes, tmp_path_factory, port=2222)


@pytest.mark.slow
def test_pdsh_over_ssh_on_another_port_with_ssh_port(two_nodes, sshd_2222, tmp_path):
    """Nodes whose sshd listens on 2222 alone (containers), with a key no sshd on port 22 knows: with --ssh-port 2222
    the preflight's ssh, DeepSpeed's ssh check, its `hostname -I` probe (no --master-addr) and pdsh's ssh all reach
    it, and the job runs on both nodes; without it the preflight's ssh check fails, where DeepSpeed's would."""
    script = tmp_path / "once.py"
    script.write_text(ONCE)
    hosts = ",".join(f"{h}:1" for h in two_nodes.hostnames)
    args = ["--hosts", hosts, "--master-port", str(free_port()), "--env", f"GLOO_SOCKET_IFNAME={two_nodes.ifname}",
            "--files-dir", str(tmp_path / "zk"), str(script)]
    refused = zerokit_on(two_nodes, 0, args, env=sshd_2222.env(), cwd=tmp_path)
    out = refused.communicate(timeout=120)[0]
    assert refused.returncode == 3 and "no passwordless ssh to " in out, out[-4000:]
    proc = zerokit_on(two_nodes, 0, ["--ssh-port", "2222", *args], env=sshd_2222.env(), cwd=tmp_path)
    out = proc.communicate(timeout=RUN_TIMEOUT)[0]
    assert proc.returncode == 0, out[-6000:]
    assert "✓ ssh: 2 hosts answer on port 2222" in out
    assert f"✓ remote env: {two_nodes.hostnames[1]} has {tmp_path}, {sys.executable}, {script} (deepspeed " in out
    assert f"the master address: {two_nodes.addresses[0]} (`hostname -I` on {two_nodes.hostnames[0]})" in out
    assert "--ssh_port 2222" in out  # the command zerokit starts
    for node, address in enumerate(two_nodes.addresses):  # pdsh prefixes each node's lines with its host
        assert f"{address}: rank {node} of 2 up, sum 2" in out, out[-6000:]


@pytest.fixture(scope="module")
def sshd_node2_apart(two_nodes, tmp_path_factory):
    """sshds on port 2022 whose node 2 sees an empty directory over `.hidden[1]`, which node 1 has."""
    yield from _sshd(two_nodes, tmp_path_factory, port=2022, hide={1: tmp_path_factory.mktemp("node1-only")})


@pytest.mark.slow
def test_pdsh_stops_in_preflight_where_node_2_lacks_the_script(two_nodes, sshd_node2_apart, tmp_path):
    """No shared filesystem for the script: node 2 does not have it. DeepSpeed's runner started pdsh anyway, node 2's
    launcher failed to open the script while node 1's rank waited on the rendezvous; the preflight's remote-env check
    asks node 2 over real ssh and the launch stops there (exit 3), naming node 2 and the script, with nothing started."""
    node1_only = sshd_node2_apart.hidden[1]
    started = tmp_path / "started"
    script = node1_only / "once.py"
    script.write_text(f"open({str(started)!r}, 'a').write('rank up')\n" + ONCE)
    config = tmp_path / "ds.json"  # on both nodes
    config.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1}))
    hosts = ",".join(f"{h}:1" for h in two_nodes.hostnames)
    proc = zerokit_on(two_nodes, 0, ["--hosts", hosts, "--ssh-port", "2022", "--master-port", str(free_port()),
                                     "--env", f"GLOO_SOCKET_IFNAME={two_nodes.ifname}", "--files-dir",
                                     str(tmp_path / "zk"), "--config", str(config), str(script)],
                      env=sshd_node2_apart.env(), cwd=tmp_path)
    out = proc.communicate(timeout=600)[0]
    assert proc.returncode == 3, out[-6000:]
    assert "✓ ssh: 2 hosts answer on port 2022" in out  # node 2 is there; only the script is not
    assert f"✗ remote env: no script {script} on {two_nodes.hostnames[1]}\n" in out, out[-6000:]
    assert f"`rsync -aR {script} {two_nodes.hostnames[1]}:/`" in out
    assert "zerokit launch: preflight failed" in out and "--force_multi" not in out  # no runner command
    assert not started.exists()


@pytest.mark.slow
def test_pdsh_a_failed_node_fails_the_job_in_bounded_time_and_leaves_no_rank(two_nodes, sshd, tmp_path):
    marker = f"zk-pdsh-{os.getpid()}-{time.time_ns()}"
    script = tmp_path / "job.py"
    script.write_text(JOB)
    proc = zerokit_on(two_nodes, 0, [*pdsh_args(two_nodes, free_port()), "--no-preflight", "--grace", "10",
                                     "--files-dir", str(tmp_path / "zk"), str(script), marker, "--fail-early"],
                      env=sshd.env(), cwd=tmp_path)
    start = time.monotonic()
    try:
        out = proc.communicate(timeout=300)[0]
        elapsed = time.monotonic() - start
        deadline = time.monotonic() + 20
        while pids_with(marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = pids_with(marker)
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in pids_with(marker):
            os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 7, out[-4000:]
    assert f"zerokit launch: node {two_nodes.addresses[1]} failed (exit 7); stopping the job on every node" in out
    assert elapsed < 200 and not left, (elapsed, left)  # node 0's rank would wait 30 minutes in TCPStore


@pytest.mark.slow
def test_pdsh_ctrl_c_stops_the_ranks_on_every_node(two_nodes, sshd, tmp_path):
    marker = f"zk-pdsh-c-{os.getpid()}-{time.time_ns()}"
    script = tmp_path / "job.py"
    script.write_text(JOB)
    proc = zerokit_on(two_nodes, 0, [*pdsh_args(two_nodes, free_port()), "--no-preflight", "--grace", "15",
                                     "--files-dir", str(tmp_path / "zk"), str(script), marker],
                      env=sshd.env(), cwd=tmp_path)
    try:
        seen = ""
        deadline = time.monotonic() + 600
        for line in proc.stdout:
            seen += line
            if seen.count(" up on node ") == 2 or time.monotonic() > deadline:
                break
        assert seen.count(" up on node ") == 2, seen[-3000:]
        ranks = [p for p in pids_with(marker) if "job.py" in Path(f"/proc/{p}/cmdline").read_text()]
        assert len(ranks) >= 2
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130
        deadline = time.monotonic() + 20
        while pids_with(marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not pids_with(marker), f"left behind: {pids_with(marker)}"
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in pids_with(marker):
            os.kill(pid, signal.SIGKILL)


# ---------------------------------------------------------------- slow: the default master port, twice in a row

def _tcp_states(argv_prefix: list[str], port: int) -> list[str]:
    """States (hex, /proc/net/tcp) of the TCP sockets whose local port is `port`, in a namespace or here."""
    r = subprocess.run([*argv_prefix, "cat", "/proc/net/tcp", "/proc/net/tcp6"], capture_output=True, text=True,
                       check=True)
    return [f[3] for f in (line.split() for line in r.stdout.splitlines()) if len(f) > 3 and f[1].endswith(
        f":{port:04X}")]


@pytest.mark.slow
def test_launch_twice_back_to_back_on_the_default_port(tmp_path):
    """After a job, its master port sits in TIME_WAIT for a minute; torch's TCPStore binds it anyway
    (SO_REUSEADDR), so preflight must not call it in use. Run in a network namespace of its own, where 29500 is
    ours alone (this machine is shared); on the host namespace otherwise."""
    ns = None if namespaces_unavailable() else f"zkport{os.getpid()}"
    prefix = ["ip", "netns", "exec", ns] if ns else []
    if ns:
        subprocess.run(["ip", "netns", "add", ns], check=True)
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
    elif "0A" in _tcp_states([], 29500):
        pytest.skip("port 29500 is held by a listener of another job on this shared host")
    config = tmp_path / "zero2.json"
    assert main(["plan", "--model", str(MODEL), "--gpu-memory", "16GB", "--gpus-per-node", "2", "--seq-len", "64",
                 "--micro-batch", "2", "--precision", "bf16", "--target", "deepspeed", "--zero-stage", "2",
                 "--offload-optimizer", "none", "-o", str(config)]) == 0
    argv = [*prefix, sys.executable, "-m", "zerokit", "launch", "--config", str(config), "--gpus-per-node", "2",
            str(TRAIN_DS), "--max-steps", "2"]
    try:
        first = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False, cwd=ROOT)
        assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
        if ns:  # the condition of the false alarm: the server side of the finished rendezvous in TIME_WAIT
            assert "06" in _tcp_states(prefix, 29500)
            bind = "import socket; socket.socket().bind(('0.0.0.0', 29500))"
            assert subprocess.run([*prefix, sys.executable, "-c", bind], capture_output=True, check=False
                                  ).returncode != 0  # a plain bind, as preflight did, fails
        second = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False, cwd=ROOT)
        output = second.stdout + second.stderr
        assert second.returncode == 0, output[-4000:]
        assert "✓ master port: 29500 is free" in output and "step 2 loss " in output
    finally:
        if ns:
            subprocess.run(["ip", "netns", "del", ns], check=False)

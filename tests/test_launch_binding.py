"""`zerokit launch --bind-cores-to-rank [--bind-core-list LIST]`: DeepSpeed's core binding, passed where DeepSpeed
binds, refused where it would drop the flag without a word, and checked before the ranks start.

DeepSpeed's own code is the judge: its runner's `parse_args` reads the argv, its `parse_range_list` the core lists,
and a real 2-rank launch on this machine runs each rank under numactl (where numactl is installed).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from zerokit.errors import BadInput
from zerokit.launch import preflight
from zerokit.launch.preflight import Needs, Target
from zerokit.launch.runner import LaunchSpec, build_command, parse_core_list, render_launch_script, render_sbatch


def spec(**kw) -> LaunchSpec:
    base = {"script": "train.py", "config": "/cfg/ds.json", "runner": "deepspeed"}
    return LaunchSpec(**{**base, **kw})


def test_one_node_passes_the_binding_to_deepspeeds_runner_as_it_reads_it():
    runner = pytest.importorskip("deepspeed.launcher.runner")
    argv, _ = build_command(spec(gpus_per_node=2, bind_cores_to_rank=True, bind_core_list="0-3,8-11"))
    assert argv[:8] == ["deepspeed", "--num_gpus", "2", "--master_port", "29500", "--bind_cores_to_rank",
                        "--bind_core_list=0-3,8-11", "train.py"]
    args = runner.parse_args(argv[1:])
    assert (args.bind_cores_to_rank, args.bind_core_list, args.user_script) == (True, "0-3,8-11", "train.py")
    plain, _ = build_command(spec(gpus_per_node=2))
    assert not any(word.startswith("--bind") for word in plain)


def test_no_ssh_and_impi_bind_and_the_backends_that_drop_it_are_refused():
    hosts = (("node1", 2), ("node2", 2))
    argv, _ = build_command(spec(hosts=hosts, no_ssh=True, node_rank=1, master_addr="10.0.0.1",
                                 bind_cores_to_rank=True))
    assert "--bind_cores_to_rank" in argv and "--no_ssh" in argv
    argv, _ = build_command(spec(hosts=hosts, launcher="impi", bind_cores_to_rank=True))
    assert "--bind_cores_to_rank" in argv
    for launcher in ("pdsh", "openmpi", "mpich", "mvapich", "slurm"):
        with pytest.raises(BadInput, match=f"DeepSpeed's {launcher} backend does not pass it to the nodes"):
            build_command(spec(hosts=hosts, launcher=launcher, bind_cores_to_rank=True))
        with pytest.raises(BadInput, match="does not pass it"):  # the emitted script runs that runner too
            render_launch_script(spec(hosts=hosts, launcher=launcher, bind_cores_to_rank=True), "zerokit launch ...")


def test_an_sbatch_binds_in_each_nodes_own_runner():
    text = render_sbatch(spec(hosts=(("node1", 4), ("node2", 4)), bind_cores_to_rank=True, bind_core_list="0-7"),
                         "zerokit launch ...", "job.sbatch")
    assert "--no_ssh" in text and "--bind_cores_to_rank --bind_core_list=0-7 train.py" in text


@pytest.mark.parametrize("text", ["0", "0-3", "0,2,4-7", "0-31,64-95", "7-7,9"])
def test_core_lists_read_as_deepspeed_reads_them(text):
    numa = pytest.importorskip("deepspeed.utils.numa")
    assert parse_core_list(text) == list(numa.parse_range_list(text))


@pytest.mark.parametrize("text,why", [("3-1", "runs backwards"), ("0-3,2-5", "overlaps"), ("4,2", "overlaps"),
                                      ("0, 1", "not a core number"), ("", "not a core number"),
                                      ("a-b", "not a core number"), ("1--2", "not a core number"),
                                      ("9" * 40, "not a core number")])
def test_core_lists_deepspeed_refuses_are_bad_input(text, why):
    with pytest.raises(BadInput, match=why):
        parse_core_list(text)


def test_a_core_list_alone_or_too_short_is_refused_before_anything_starts():
    with pytest.raises(BadInput, match="read only with --bind-cores-to-rank"):
        build_command(spec(gpus_per_node=2, bind_core_list="0-3"))
    with pytest.raises(BadInput, match="gives 3 cores for 4 ranks a node"):
        build_command(spec(gpus_per_node=4, bind_cores_to_rank=True, bind_core_list="0-2"))
    with pytest.raises(BadInput, match="gives 1 core for 2 ranks a node"):
        build_command(spec(hosts=(("node1", 2), ("node2", 2)), no_ssh=True, node_rank=0, master_addr="10.0.0.1",
                           bind_cores_to_rank=True, bind_core_list="5"))


def test_the_cli_refuses_a_dropped_binding_with_one_line(tmp_path):
    (tmp_path / "train.py").write_text("")
    out = subprocess.run([sys.executable, "-m", "zerokit", "launch", "--dry-run", "--bind-cores-to-rank",
                          "--hosts", "n1:2,n2:2", "train.py"], cwd=tmp_path, capture_output=True, text=True,
                         check=False)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.count("\n") == 1 and "--launcher pdsh" in out.stderr and "--no-ssh" in out.stderr


# ---------------------------------------------------------------- the preflight

def test_binding_needs_numactl_and_no_kmp_affinity(monkeypatch):
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))  # this Python's directory only: no numactl there
    if shutil.which("numactl"):
        pytest.skip("numactl beside this Python")
    check = preflight.check_core_binding(Target(gpus_per_node=2, bind_cores_to_rank=True))
    assert not check.ok and "numactl, which is not installed here" in check.detail
    assert "apt-get install numactl" in check.fix
    monkeypatch.undo()
    if shutil.which("numactl") is None:
        pytest.skip("numactl is not installed here (make system-deps installs it)")
    check = preflight.check_core_binding(Target(gpus_per_node=2, bind_cores_to_rank=True,
                                                env={"KMP_AFFINITY": "compact"}))
    assert not check.ok and "KMP_AFFINITY" in check.detail and check.fix.startswith("unset KMP_AFFINITY")


@pytest.mark.skipif(shutil.which("numactl") is None, reason="numactl is not installed here")
def test_binding_counts_the_cores_deepspeed_shares_out():
    physical = preflight.physical_cores()
    ok = preflight.check_core_binding(Target(gpus_per_node=1, bind_cores_to_rank=True))
    assert ok.ok and ok.detail == (f"numactl installed; {physical} cores to share out (physical cores): {physical} "
                                   f"a rank for 1 rank a node (OMP_NUM_THREADS={physical})")
    many = preflight.check_core_binding(Target(gpus_per_node=physical + 1, bind_cores_to_rank=True))
    assert not many.ok and f"this node has {physical} physical core{'s' * (physical != 1)} for {physical + 1} ranks " \
        "a node" in many.detail
    beyond = os.cpu_count()
    listed = preflight.check_core_binding(Target(gpus_per_node=1, bind_cores_to_rank=True,
                                                 bind_core_list=f"0,{beyond}"))
    assert not listed.ok and f"names core {beyond}" in listed.detail
    short = preflight.check_core_binding(Target(gpus_per_node=2, bind_cores_to_rank=True, bind_core_list="0"))
    assert not short.ok and short.detail.startswith("--bind-core-list 0 gives 1 core for 2 ranks a node")


def test_the_threads_check_counts_the_binding_as_the_ranks_threads():
    if preflight.probe_accelerator() != "cpu":
        pytest.skip("the cpu-threads check is DeepSpeed's CPU accelerator's")
    physical, (_, cores) = preflight.physical_cores(), preflight.probe_threads()
    check = preflight.check_cpu_threads(Target(gpus_per_node=1, bind_cores_to_rank=True))
    assert check.detail.startswith(f"1 rank x {physical} OpenMP thread") and "(--bind-cores-to-rank)" in check.detail
    assert bool(check.fix) == (physical > cores)


def test_offload_on_a_gpu_node_without_binding_gets_advice():
    advice = preflight.unbound_offload(8, "cuda")
    assert advice.ok and advice.name == "core binding" and "8 ranks a node step CPU Adam" in advice.detail
    assert advice.fix.startswith("launch with --bind-cores-to-rank") and "deepspeedai/DeepSpeed#7474" in advice.fix
    assert preflight.unbound_offload(8, "cpu") is None  # the cpu-threads check speaks there
    offloaded = Needs(cpu_adam=True)
    # nothing to say: no offload, one rank, or the threads set by hand
    assert preflight.check_core_binding(Target(gpus_per_node=8)) is None
    assert preflight.check_core_binding(Target(gpus_per_node=1, needs=offloaded)) is None
    assert preflight.check_core_binding(Target(gpus_per_node=8, needs=offloaded,
                                               env={"OMP_NUM_THREADS": "8"})) is None


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("numactl") is None, reason="numactl is not installed here")
def test_a_bound_launch_runs_each_rank_under_numactl_on_its_own_cores(tmp_path):
    """A real 2-rank launch on this machine: DeepSpeed's launch.py starts each rank under numactl on its share of the
    physical cores, with OMP_NUM_THREADS that share."""
    share = (preflight.physical_cores() or 0) // 2
    if share < 1:
        pytest.skip("one physical core: nothing to share out between 2 ranks")
    script = tmp_path / "ranks.py"
    script.write_text("import os\nprint('rank', os.environ['LOCAL_RANK'], 'omp', os.environ['OMP_NUM_THREADS'], "
                      "'cpus', len(os.sched_getaffinity(0)), flush=True)\n")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("OMP_NUM_THREADS", None)
    port = str(20000 + os.getpid() % 20000)
    out = subprocess.run([sys.executable, "-m", "zerokit", "launch", "--bind-cores-to-rank", "--gpus-per-node", "2",
                          "--master-port", port, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "core binding: numactl installed" in out.stderr
    for rank in (0, 1):
        assert f"rank {rank} omp {share} cpus {share}" in out.stdout
    assert "spawned with command: ['numactl'" in out.stdout + out.stderr  # DeepSpeed's launch.py says what it ran


def test_preflight_checks_the_binding_as_launch_would_start_it(capsys):
    from zerokit.cli import main

    assert main(["preflight", "--bind-core-list", "0-1", "--gpus-per-node", "1"]) == 2
    assert "read only with --bind-cores-to-rank" in capsys.readouterr().err
    assert main(["preflight", "--bind-cores-to-rank", "--bind-core-list", "1-0", "--gpus-per-node", "1"]) == 2
    assert "runs backwards" in capsys.readouterr().err
    code = main(["preflight", "--bind-cores-to-rank", "--gpus-per-node", "1", "--format", "json"])
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["core binding"]["ok"] == (shutil.which("numactl") is not None) and code in (0, 3)

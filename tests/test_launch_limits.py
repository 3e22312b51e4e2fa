"""What DeepSpeed's launcher backends cannot do, refused by `zerokit launch` before the preflight rather than by a
traceback after it (deepspeed/launcher/multinode_runner.py and runner.py, 0.19); and one-host jobs that need no ssh."""

from __future__ import annotations

import socket

import pytest

from zerokit.cli import main
from zerokit.errors import BadInput
from zerokit.launch.runner import LaunchSpec, build_command, check_include_devices, render_files, render_sbatch


def spec(**kw) -> LaunchSpec:
    return LaunchSpec(**{"script": "train.py", "config": "/cfg/ds.json", "runner": "deepspeed", **kw})


def dry_run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["launch", "--dry-run", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("launcher", ["openmpi", "mvapich", "mpich", "impi"])
def test_mpi_backends_get_no_limits_that_only_restate_the_hostfile(launcher, tmp_path):
    s = spec(hosts=(("node1", 8), ("node2", 8)), gpus_per_node=8, nodes=2, launcher=launcher, files_dir=str(tmp_path))
    argv, _ = build_command(s)
    assert "--num_gpus" not in argv and "--num_nodes" not in argv
    runner = pytest.importorskip("deepspeed.launcher.runner")
    mnr = pytest.importorskip("deepspeed.launcher.multinode_runner")
    args = runner.parse_args(argv[1:])
    backend = {"openmpi": mnr.OpenMPIRunner, "mvapich": mnr.MVAPICHRunner, "mpich": mnr.MPICHRunner,
               "impi": mnr.IMPIRunner}[launcher]
    backend.validate_args(_with_args(backend, args))  # DeepSpeed's own check


def _with_args(cls, args):
    obj = cls.__new__(cls)
    obj.args = args
    return obj


@pytest.mark.parametrize("argv, message", [
    (["--hosts", "node1:8,node2:8", "--gpus-per-node", "4", "--launcher", "openmpi"],
     "--gpus-per-node 4: --launcher openmpi cannot limit the GPUs of a node"),
    (["--hosts", "node1:8,node2:8", "--nodes", "1", "--launcher", "mvapich"],
     "--nodes 1: --launcher mvapich cannot limit the nodes"),
    (["--hosts", "node1:8,node2:8", "--include", "node1:0", "--launcher", "mpich"],
     "--include: --launcher mpich runs every slot of the hostfile"),
    (["--hosts", "node1:8,node2:4", "--launcher", "impi"],
     "--launcher impi starts the same number of ranks on every node, and the hosts' slots differ (node1 8, node2 4)"),
    (["--hosts", "node1:8,node2:4", "--launcher", "slurm"], "--launcher slurm starts the same number of ranks"),
    (["--hosts", "node1:2,node2:2", "--launcher", "slurm", "--include", "node1:1"],
     "--include 'node1:1': --launcher slurm cannot pick device ids"),
    (["--hosts", "node1:2,node2:2", "--launcher", "openmpi", "--master-port", "29611"],
     "--master-port 29611 has no effect with --launcher openmpi"),
    (["--hosts", "node1:2,node2:2", "--launcher", "slurm", "--master-addr", "node1"],
     "--master-addr node1 has no effect with --launcher slurm"),
])
def test_what_the_backend_refuses_is_bad_input_in_one_line(capsys, argv, message):
    code, _, err = dry_run(capsys, *argv, "train.py")
    assert code == 2 and message in err and err.count("\n") == 1, err


def test_what_the_backends_accept_passes(capsys):
    assert build_command(spec(hosts=(("node1", 2), ("node2", 2)), launcher="slurm", include="node1:0,1@node2"))
    assert build_command(spec(hosts=(("node1", 8), ("node2", 4)), launcher="slurm", gpus_per_node=4))
    assert build_command(spec(hosts=(("node1", 8), ("node2", 4)), launcher="openmpi"))
    assert build_command(spec(hosts=(("node1", 8), ("node2", 8)), launcher="mpich", master_port=29611))


@pytest.mark.parametrize("launcher", ["openmpi", "mvapich", "slurm"])
def test_discovery_launchers_warn_that_ranks_need_mpi4py(capsys, launcher):
    code, _, err = dry_run(capsys, "--hosts", "node1:2,node2:2", "--launcher", launcher, "train.py")
    assert code == 0 and "warning: with --launcher " + launcher in err and "mpi4py" in err
    _, _, err = dry_run(capsys, "--hosts", "node1:2,node2:2", "--launcher", "mpich", "train.py")
    assert "warning" not in err


def test_sbatch_refuses_unequal_slots_master_addr_and_mpi_launchers(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for argv, message in [
        (["--hosts", "gpu-a:8,gpu-b:4"], "--emit-sbatch: the hosts have different slots (gpu-a:8, gpu-b:4)"),
        (["--hosts", "gpu-a:8,gpu-b:8", "--master-addr", "gpu-a"], "--master-addr gpu-a has no place in an sbatch"),
        (["--hosts", "gpu-a:8,gpu-b:8", "--launcher", "openmpi"], "--launcher openmpi has no place in an sbatch"),
    ]:
        code, _, err = dry_run(capsys, *argv, "--emit-sbatch", "j3.sbatch", "train.py")
        assert code == 2 and message in err and err.count("\n") == 1, err
    assert not (tmp_path / "j3.sbatch").exists()


def test_sbatch_takes_whole_nodes_and_keeps_a_custom_master_port(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = render_sbatch(spec(hosts=(("gpu-a", 8), ("gpu-b", 8)), master_port=29611), "zerokit launch ...", "j.sbatch")
    assert "#SBATCH --exclusive\n" in text and "export MASTER_PORT=29611\n" in text


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", socket.gethostname()])
def test_a_job_on_this_host_alone_runs_without_a_hostfile(host, tmp_path):
    """DeepSpeed ssh-checks the first host whenever a hostfile exists (runner.py main), even localhost."""
    s = spec(hosts=((host, 2),), master_port=29611, env=(("A", "B"),), files_dir=str(tmp_path))
    argv, env = build_command(s)
    assert argv == ["deepspeed", "--num_gpus", "2", "--master_port", "29611", "train.py", "--deepspeed", "/cfg/ds.json"]
    assert env == {"PYTHONUNBUFFERED": "1", "A": "B"} and render_files(s) == {}
    argv, _ = build_command(spec(hosts=((host, 2),), include=f"{host}:1", files_dir=str(tmp_path)))
    assert argv[1:3] == ["--include", "localhost:1"]
    runner = pytest.importorskip("deepspeed.launcher.runner")
    assert runner.parse_inclusion_exclusion({"localhost": 2}, "localhost:1", "") == {"localhost": [1]}


def test_a_remote_one_host_job_keeps_its_hostfile(tmp_path):
    argv, _ = build_command(spec(hosts=(("node1", 2),), files_dir=str(tmp_path)))
    assert argv[1:3] == ["--hostfile", str(tmp_path / "hostfile")]


def test_one_node_include_is_checked_against_the_devices_deepspeed_counts():
    check_include_devices(spec(include="localhost:0"), 1)
    with pytest.raises(BadInput, match=r"^--include 'localhost:0,1': DeepSpeed counts 1 device on this machine "
                                       r"\(slots 0 to 0\), not slot 1; for N ranks give --gpus-per-node N"):
        check_include_devices(spec(include="localhost:0,1"), 1)
    check_include_devices(spec(hosts=(("node1", 2), ("node2", 2)), include="node1:1"), 1)  # not this machine's


def test_sbatch_carries_env_values_with_shell_characters(tmp_path, monkeypatch):
    """No .deepspeed_env in an sbatch: the values are exported, shell-quoted, in the script, and srun passes its
    environment to every node's runner; pdsh's .deepspeed_env could not carry them."""
    import subprocess

    monkeypatch.chdir(tmp_path)
    value = "a $(id) `x` 'q' \"d\" ;&|\nline two"
    s = spec(hosts=(("gpu-a", 8), ("gpu-b", 8)), env=(("ZK_VALUE", value),), files_dir=str(tmp_path / ".zerokit"))
    with pytest.raises(BadInput, match="has shell characters"):
        build_command(s)  # pdsh: refused as before
    text = render_sbatch(s, "zerokit launch ...", "j.sbatch")
    exports = text[text.index('> "$hostfile"\n') + 14:text.index("export MASTER_ADDR")]
    out = subprocess.run(["bash", "-c", exports + 'printf %s "$ZK_VALUE"'], capture_output=True, text=True,
                         check=True).stdout
    assert out == value
    with pytest.raises(BadInput, match="a variable name is letters"):
        render_sbatch(spec(hosts=(("gpu-a", 8),), env=(("1X", "v"),)), "zerokit launch ...", "j.sbatch")


@pytest.mark.parametrize("hosts, option, text", [
    ((("node1", 4), ("node2", 4), ("node3", 2)), "--exclude", "node3"),    # leaves 4 and 4: accepted
    ((("node1", 4), ("node2", 4)), "--exclude", "node1:0"),                # node1 slots 1,2,3: refused
    ((("node1", 4), ("node2", 4)), "--exclude", "node1:3"),                # node1 3, node2 4: refused
    ((("node1", 4), ("node2", 4)), "--exclude", "node1:2,3@node2:3,2"),    # 2 and 2, the first slots: accepted
    ((("node1", 4), ("node2", 4)), "--include", "node1:1,0@node2:0,1"),    # DeepSpeed sorts the slots: accepted
    ((("node1", 4), ("node2", 4)), "--include", "node1:0,0@node2:0"),      # each slot once: accepted
    ((("node1", 4), ("node2", 4)), "--include", "node1:1@node2"),          # a slot not the first: refused
    ((("node1", 4), ("node2", 2)), "--include", "node1:0,1@node2"),        # 2 and 2: accepted
])
def test_slurm_filters_are_judged_as_deepspeed_applies_them(hosts, option, text, tmp_path):
    """_check_launcher_limits re-applied --include alone: `--hostfile hf --launcher slurm --exclude node3` (4, 4, 2
    slots) was refused though DeepSpeed runs 4 and 4, and `--exclude node1:0` or `node1:3` on 4 and 4 were accepted
    though DeepSpeed's SlurmRunner.validate_active_resources raises on them (slots not the first N, counts that
    differ). Its verdict on the filter DeepSpeed's parse_inclusion_exclusion applies is zerokit's."""
    runner = pytest.importorskip("deepspeed.launcher.runner")
    mnr = pytest.importorskip("deepspeed.launcher.multinode_runner")
    include, exclude = (text, "") if option == "--include" else ("", text)
    active = runner.parse_inclusion_exclusion(dict(hosts), include, exclude)
    try:
        mnr.SlurmRunner.validate_active_resources(active)
        deepspeed_accepts = True
    except ValueError:
        deepspeed_accepts = False
    s = spec(hosts=hosts, launcher="slurm", files_dir=str(tmp_path), **{option[2:]: text})
    try:
        build_command(s)
        zerokit_accepts = True
    except BadInput as e:
        zerokit_accepts = False
        assert "--launcher slurm" in str(e) and "\n" not in str(e)
    assert zerokit_accepts == deepspeed_accepts, active


def test_gpus_per_node_beyond_the_hosts_slots_is_bad_input_to_launch_and_preflight(capsys, tmp_path):
    """`--gpus-per-node 8` over a hostfile of 4 slots a host gave `--num_gpus 8` and a world size of 16: DeepSpeed's
    apply_num_nodes_and_gpus hands every host range(num_gpus), whatever its slots."""
    runner = pytest.importorskip("deepspeed.launcher.runner")
    assert runner.apply_num_nodes_and_gpus({"node1": [0, 1, 2, 3]}, -1, 8) == {"node1": list(range(8))}
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("node1 slots=4\nnode2 slots=4\n")
    message = (f"--gpus-per-node 8 is more than the 4 slots node1 has in --hostfile {hostfile} (and 1 more host): "
               "DeepSpeed would start 8 ranks there all the same, on devices it lacks; use --gpus-per-node 4 or less")
    for command in (["launch", "--dry-run"], ["preflight"]):
        code = main([*command, "--hostfile", str(hostfile), "--gpus-per-node", "8", *(["train.py"] * (
            command[0] == "launch"))])
        err = capsys.readouterr().err
        assert code == 2 and message in err and err.count("\n") == 1, err
    with pytest.raises(BadInput, match=r"^--gpus-per-node 4 is more than the 2 slots node2 has in --hosts: "):
        build_command(spec(hosts=(("node1", 4), ("node2", 2)), gpus_per_node=4, files_dir=str(tmp_path)))
    # the first --nodes hosts are the job's (apply_num_nodes_and_gpus cuts the nodes first), and fewer ranks are fine
    assert build_command(spec(hosts=(("node1", 4), ("node2", 2)), gpus_per_node=4, nodes=1, files_dir=str(tmp_path)))
    assert build_command(spec(hosts=(("node1", 4), ("node2", 4)), gpus_per_node=2, files_dir=str(tmp_path)))

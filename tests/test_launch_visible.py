"""CUDA_VISIBLE_DEVICES on one node: DeepSpeed's runner honours it only without --num_gpus/--include/--exclude and
deletes it either way (deepspeed/launcher/runner.py main(), 0.19), so `--gpus-per-node 2` under
CUDA_VISIBLE_DEVICES=4,5 would start the ranks on GPUs 0 and 1. zerokit passes the visible ids as --include."""

from __future__ import annotations

import os
import subprocess

import pytest

from zerokit.cli import main
from zerokit.errors import BadInput
from zerokit.launch import preflight, runner
from zerokit.launch.runner import LaunchSpec, build_command, notes, render_launch_script, visible_devices

A100 = ("NVIDIA A100-SXM4-80GB", 80 * 2**30)
L4 = ("NVIDIA L4", 24 * 2**30)


def spec(**kw) -> LaunchSpec:
    return LaunchSpec(**{"script": "train.py", "config": "/cfg/ds.json", "runner": "deepspeed", **kw})


def test_the_visible_gpus_become_the_include_list():
    argv, _ = build_command(spec(gpus_per_node=2, visible_devices="4,5,6,7"))
    assert argv[:5] == ["deepspeed", "--include", "localhost:4,5", "--master_port", "29500"]
    assert "--num_gpus" not in argv
    ds = pytest.importorskip("deepspeed.launcher.runner")
    args = ds.parse_args(argv[1:])
    # main()'s own checks: no --num_gpus/--num_nodes beside --include, and the slots it keeps of an 8-GPU node
    assert args.num_gpus == -1 and args.num_nodes == -1
    assert ds.parse_inclusion_exclusion({"localhost": 8}, args.include, args.exclude) == {"localhost": [4, 5]}


def test_one_node_given_as_a_host_of_its_own_and_with_nodes_1():
    argv, _ = build_command(spec(hosts=(("localhost", 2),), visible_devices=" 3 ,1"))
    assert argv[1:3] == ["--include", "localhost:3,1"]  # CUDA's order: rank 0 on GPU 3
    argv, _ = build_command(spec(gpus_per_node=1, nodes=1, visible_devices="6"))
    assert argv[1:3] == ["--include", "localhost:6"] and "--num_nodes" not in argv  # DeepSpeed refuses both


def test_without_a_count_or_with_a_filter_the_runner_decides():
    # no --num_gpus: DeepSpeed turns the variable into --include itself
    assert build_command(spec(visible_devices="4,5"))[0][1:3] == ["--master_port", "29500"]
    # the user's own filter wins, as in DeepSpeed (which then drops the variable)
    assert build_command(spec(include="localhost:0", visible_devices="4,5"))[0][1:3] == ["--include", "localhost:0"]
    assert build_command(spec(gpus_per_node=2))[0][1:3] == ["--num_gpus", "2"]


@pytest.mark.parametrize("kw, message", [
    ({"gpus_per_node": 4, "visible_devices": "2,3"},
     "--gpus-per-node 4, but CUDA_VISIBLE_DEVICES=2,3 leaves 2 GPUs visible; ask for 2, or widen"),
    ({"hosts": (("localhost", 2),), "visible_devices": "5"},
     "2 slots for this host, but CUDA_VISIBLE_DEVICES=5 leaves 1 GPU visible"),
    ({"gpus_per_node": 1, "visible_devices": "GPU-8d1c2a3b-1111-2222-3333-444455556666"},
     "names GPUs by something other than an index"),
    ({"gpus_per_node": 1, "visible_devices": "MIG-0,1"}, "give the indexes, e.g. CUDA_VISIBLE_DEVICES=2,3"),
])
def test_what_the_visible_gpus_cannot_give_is_refused(kw, message):
    with pytest.raises(BadInput) as e:
        build_command(spec(**kw))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_hostfile_job_ignores_the_variable_and_says_so(tmp_path):
    s = spec(hosts=(("node1", 2), ("node2", 2)), gpus_per_node=2, visible_devices="4,5", files_dir=str(tmp_path))
    assert build_command(s)[0][1:7] == ["--hostfile", str(tmp_path / "hostfile"), "--launcher", "pdsh", "--force_multi",
                                        "--num_gpus"]
    assert any("CUDA_VISIBLE_DEVICES=4,5 does not pick the GPUs of a job with a hostfile" in n for n in notes(s))
    assert notes(spec(gpus_per_node=2, visible_devices="4,5")) == []


def test_the_variable_counts_only_where_gpus_are():
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "4,5"}, gpus_present=True) == "4,5"
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "4,5"}, gpus_present=False) is None  # the CPU accelerator
    assert visible_devices({"CUDA_VISIBLE_DEVICES": " "}, gpus_present=True) is None  # DeepSpeed: len() == 0
    assert visible_devices({}, gpus_present=True) is None


def test_the_cli_passes_the_visible_gpus(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    monkeypatch.setattr(runner, "GPU_DEVICE_NODES", (str(tmp_path / "train.py"),))  # a node that exists
    assert main(["launch", "--dry-run", "--gpus-per-node", "2", "train.py"]) == 0
    assert "deepspeed --include localhost:2,3 --master_port" in capsys.readouterr().out
    assert main(["launch", "--dry-run", "--gpus-per-node", "3", "train.py"]) == 2
    assert "--gpus-per-node 3, but CUDA_VISIBLE_DEVICES=2,3 leaves 2 GPUs visible" in capsys.readouterr().err
    monkeypatch.setattr(runner, "GPU_DEVICE_NODES", (str(tmp_path / "absent"),))  # no GPUs: N CPU ranks
    assert main(["launch", "--dry-run", "--gpus-per-node", "3", "train.py"]) == 0
    assert "deepspeed --num_gpus 3 --master_port" in capsys.readouterr().out


def test_an_emitted_script_refuses_to_run_under_the_variable(tmp_path, monkeypatch):
    """The script runs later, under whatever CUDA_VISIBLE_DEVICES it meets: with GPUs there it stops, as its
    runner's --num_gpus would drop the variable."""
    monkeypatch.chdir(tmp_path)
    gpu = tmp_path / "nvidiactl"
    gpu.write_text("")
    monkeypatch.setattr(runner, "GPU_DEVICE_NODES", (str(tmp_path / "kfd"), str(gpu)))
    script = tmp_path / "run.sh"
    script.write_text(render_launch_script(spec(gpus_per_node=2, runner="true"), "zerokit launch ..."))
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    r = subprocess.run(["bash", str(script)], env={**env, "CUDA_VISIBLE_DEVICES": "4,5"}, capture_output=True,
                       text=True, check=False)
    assert r.returncode == 2 and "CUDA_VISIBLE_DEVICES=4,5: DeepSpeed's runner drops it beside --num_gpus" in r.stderr
    assert subprocess.run(["bash", str(script)], env=env, check=False).returncode == 0  # `true` ran
    gpu.unlink()  # no GPUs: the variable means nothing to the ranks
    assert subprocess.run(["bash", str(script)], env={**env, "CUDA_VISIBLE_DEVICES": "4,5"}, check=False).returncode == 0
    hosts = render_launch_script(spec(hosts=(("node1", 2), ("node2", 2)), runner="true", files_dir=str(tmp_path)),
                                 "zerokit launch ...")
    assert "CUDA_VISIBLE_DEVICES" not in hosts  # a hostfile job: the runner never reads it


def test_the_preflight_counts_the_visible_gpus():
    eight = [A100] * 7 + [L4]
    assert preflight.visible_gpus(eight, "1,7") == [A100, L4]
    assert preflight.visible_gpus(eight, None) == eight and preflight.visible_gpus(eight, "GPU-1a2b") == eight
    check = preflight.gpu_verdict(preflight.visible_gpus(eight, "0,1"), 4, None)
    assert not check.ok and "4 GPUs per node asked, 2 present" in check.detail
    check = preflight.gpu_verdict(preflight.visible_gpus(eight, "0,7"), 2, 30 * 10**9)
    assert not check.ok and "the plan needs 30.0 GB per GPU" in check.detail  # the L4 is among them
    check = preflight.gpu_verdict(preflight.visible_gpus(eight, "9"), 1, None)
    assert not check.ok and "leaves none of this machine's GPUs visible" in check.detail


def test_a_visible_devices_value_given_with_env_picks_the_gpus_too(tmp_path, capsys, monkeypatch):
    """`--env CUDA_VISIBLE_DEVICES=4,5 --gpus-per-node 2`: the runner got the variable in its environment, deleted
    it beside --num_gpus, and the ranks ran on GPUs 0 and 1."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    monkeypatch.setattr(runner, "gpus_present", lambda: True)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert main(["launch", "--dry-run", "--gpus-per-node", "2", "--env", "CUDA_VISIBLE_DEVICES=4,5", "train.py"]) == 0
    out = capsys.readouterr().out
    assert " --include localhost:4,5 " in out and "--num_gpus" not in out

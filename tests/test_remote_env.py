"""The preflight's `remote env` check: what DeepSpeed's runner starts on every other node by this node's paths (the
working directory, its interpreter, torch and deepspeed there, the script, the config), asked over ssh.

`ssh` here is a script first on PATH that writes down each call and runs the remote command with this machine's sh,
as a node that shares this filesystem would; per host it can refuse (exit 255, as ssh does), hang, print a login
banner, or lack some paths (it rewrites them in the command to a name that does not exist). The slow test with real
sshds in two network namespaces, one of which lacks the script, is in tests/test_multinode.py.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from zerokit.cli import main
from zerokit.launch import preflight
from zerokit.launch.preflight import NotChecked, Target, check_remote_env, parse_remote_env
from zerokit.launch.runner import runner_python

FAKE_SSH = """#!{python}
import json, os, sys, time
host, command = sys.argv[-2], sys.argv[-1]
with open({log!r}, "a") as f:
    f.write(json.dumps({{"host": host, "argv": sys.argv[1:], "start": time.time()}}) + "\\n")
node = json.loads(os.environ.get("ZK_FAKE_NODES", "{{}}")).get(host, {{}})
if node.get("refuse"):
    sys.exit(print(f"ssh: connect to host {{host}} port 22: Connection refused", file=sys.stderr) or 255)
print("Welcome to " + host + "! (a login banner)", flush=True)
if "hang" in node:
    if node["hang"] == "after start":
        print("zerokit-remote-env start", flush=True)
    os.execvp("sleep", ["sleep", "30"])
for path in node.get("lacks", []):  # this node has no such path: the command names one that does not exist
    command = command.replace(path, path + "-absent-on-" + host)
os.execvp("sh", ["sh", "-c", command])
"""


@pytest.fixture
def nodes(tmp_path, monkeypatch):
    """A working directory with a space in its name and a script and a config in it, the fake ssh first on PATH, and
    `set(host=behaviour)` to make a host refuse, hang or lack paths. Returns a helper with `.calls()`."""
    work = tmp_path / "job dir"
    work.mkdir()
    (work / "train me.py").write_text("print('training')\n")
    (work / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": 1}))
    bin_dir, log = tmp_path / "bin", tmp_path / "ssh.jsonl"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(FAKE_SSH.format(python=sys.executable, log=str(log)))
    (bin_dir / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.chdir(work)

    class Nodes:
        dir = work
        script = work / "train me.py"
        config = work / "ds.json"

        @staticmethod
        def set(**behaviour):
            monkeypatch.setenv("ZK_FAKE_NODES", json.dumps(behaviour))

        @staticmethod
        def calls() -> list[dict]:
            return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    return Nodes


def job(**kw) -> Target:
    """Two remote nodes running `train me.py --deepspeed ds.json` (the runner's interpreter: this one's)."""
    return Target(**{"hosts": {"node1": 1, "node2": 1}, "script": "train me.py",
                     "script_args": ("--deepspeed", "ds.json"), "python": sys.executable, **kw})


def _here() -> str:
    import deepspeed
    import torch

    return f"deepspeed {deepspeed.__version__}, torch {torch.__version__}"


# ---------------------------------------------------------------- every path there: one ssh call a host, at once

def test_each_remote_host_is_asked_once_at_once_and_passes_where_all_is_there(nodes):
    nodes.set()
    start = time.monotonic()
    check = check_remote_env(job(hosts={"node1": 1, "localhost": 1, "node2": 1, "node3": 1}))
    elapsed = time.monotonic() - start
    assert check == preflight.Check("remote env", True, f"node1, node2, node3 have {nodes.dir}, {sys.executable}, "
                                    f"{nodes.script}, {nodes.config} ({_here()}, as here)")
    calls = nodes.calls()
    assert sorted(c["host"] for c in calls) == ["node1", "node2", "node3"]  # not localhost: this machine
    assert max(c["start"] for c in calls) - min(c["start"] for c in calls) < 1.0, calls  # in parallel
    assert elapsed < 30, elapsed
    argv = calls[0]["argv"]
    assert argv[:6] == ["-o", "PasswordAuthentication=no", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5"]


def test_the_ssh_port_reaches_each_call(nodes):
    nodes.set()
    assert check_remote_env(job(ssh_port=2222)).ok
    assert all(c["argv"][6:8] == ["-p", "2222"] for c in nodes.calls())


# ---------------------------------------------------------------- what a node lacks: exit 3, one line, the fix

def test_a_missing_working_directory_names_the_host_and_rsync(nodes):
    nodes.set(node2={"lacks": [str(nodes.dir)]})
    check = check_remote_env(job())
    assert not check.ok
    assert check.detail == (f"no working directory {nodes.dir} on node2; no script {nodes.script} on node2; "
                            f"no config {nodes.config} on node2")
    assert check.fix.startswith("every node needs these paths as they are here")
    assert f"a filesystem every node mounts, or copy them, e.g. `rsync -aR '{nodes.dir}' node2:/`" in check.fix


def test_a_missing_interpreter_says_which_path_the_runner_starts(nodes, tmp_path):
    nodes.set(node1={"lacks": [sys.executable]})
    check = check_remote_env(job())
    assert not check.ok and check.detail == f"no interpreter {sys.executable} on node1"
    assert check.fix.startswith(f"install the same environment at {sys.executable} there: DeepSpeed's runner starts "
                                "that interpreter by its path")
    assert f"with {_here()}" in check.fix


def test_an_interpreter_without_deepspeed_fails_with_the_import_error(nodes, tmp_path):
    bare = tmp_path / "bare python"  # an interpreter without site-packages: no torch, no deepspeed
    bare.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    bare.chmod(0o755)
    nodes.set()
    check = check_remote_env(job(python=str(bare)))
    assert not check.ok
    assert check.detail == (f"{bare} cannot import torch and deepspeed (ModuleNotFoundError: No module named "
                            "'torch') on node1, node2")
    assert check.fix.startswith(f"install the same environment at {bare} there")


def test_a_missing_script_fails_and_nothing_else_does(nodes):
    nodes.set(node2={"lacks": [str(nodes.script)]})
    check = check_remote_env(job(hosts={"node1": 1, "node2": 1, "node3": 1}))
    assert not check.ok and check.detail == f"no script {nodes.script} on node2"
    assert check.fix.endswith(f"e.g. `rsync -aR '{nodes.script}' node2:/`")


def test_a_missing_config_the_arguments_name_fails(nodes, tmp_path):
    elsewhere = tmp_path / "configs" / "zero3.json"  # an absolute path, as launch's --deepspeed CONFIG is
    elsewhere.parent.mkdir()
    elsewhere.write_text("{}")
    nodes.set(node1={"lacks": [str(elsewhere)]}, node2={"lacks": [str(elsewhere)]})
    check = check_remote_env(job(script_args=("--epochs", "1", "--deepspeed", str(elsewhere))))
    assert not check.ok and check.detail == f"no config {elsewhere} on node1, node2"
    # zerokit preflight has no script: --config's own file, as launch would pass it
    check = check_remote_env(Target(hosts={"node1": 1, "node2": 1}, python=sys.executable,
                                    config_file=str(elsewhere)))
    assert not check.ok and check.detail == f"no config {elsewhere} on node1, node2"


def test_other_versions_on_a_node_pass_with_advice(nodes, tmp_path):
    fake = tmp_path / "old site"
    for name, version in (("torch", "2.0.1"), ("deepspeed", "0.9.5")):
        (fake / name).mkdir(parents=True)
        (fake / name / "__init__.py").write_text(f"__version__ = {version!r}\n")
    python = tmp_path / "env python"  # the runner's interpreter here: this one
    python.write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    older = tmp_path / "env python-absent-on-node2"  # what node2 has at that path: torch 2.0.1, deepspeed 0.9.5
    older.write_text(f"#!/bin/sh\nPYTHONPATH='{fake}' exec {sys.executable} -S \"$@\"\n")
    for path in (python, older):
        path.chmod(0o755)
    nodes.set(node2={"lacks": [str(python)]})
    check = check_remote_env(job(python=str(python)))
    import deepspeed
    import torch

    assert check.ok and not isinstance(check, NotChecked)
    assert check.detail.endswith(f"; node2 has deepspeed 0.9.5, torch 2.0.1 (here {_here()})")
    assert check.fix == (f"install this node's versions on every node (`'{python}' -m pip install "
                         f"deepspeed=={deepspeed.__version__} torch=={torch.__version__}`): ranks of other DeepSpeed "
                         "or torch versions can hang at the rendezvous or in a collective")
    assert "advice: install this node's versions" in preflight.format_text([check])


# ---------------------------------------------------------------- hosts that cannot be asked: bounded, not a failure

def test_a_host_that_hangs_costs_the_timeout_once_and_is_not_checked(nodes, monkeypatch):
    monkeypatch.setattr(preflight, "REMOTE_ENV_TIMEOUT_S", 2)
    nodes.set(node2={"hang": "before ssh answers"}, node3={"hang": "after start"}, node4={"refuse": True})
    start = time.monotonic()
    check = check_remote_env(job(hosts={"node1": 1, "node2": 1, "node3": 1, "node4": 1}))
    assert time.monotonic() - start < 2 + 10  # the hosts at once: one timeout, not three
    assert isinstance(check, NotChecked) and check.ok
    assert check.detail.startswith("not checked on node2 (no answer in 2 s), node3 (ssh connected, then no answer in "
                                   "2 s: importing torch and deepspeed there hangs or is that slow (a stale network "
                                   "mount?)), node4 (ssh failed: ssh: connect to host node4 port 22: Connection "
                                   f"refused); node1 has {nodes.dir}, ")
    assert "1. - remote env: not checked on node2" in preflight.format_text([check])


def test_a_failure_elsewhere_still_fails_beside_a_host_not_asked(nodes):
    nodes.set(node1={"refuse": True}, node2={"lacks": [str(nodes.config)]})
    check = check_remote_env(job())
    assert not check.ok and not isinstance(check, NotChecked)
    assert check.detail == (f"no config {nodes.config} on node2; not checked on node1 (ssh failed: ssh: connect to "
                            "host node1 port 22: Connection refused)")


def test_the_answer_is_read_among_banners_and_chatter():
    out = ("Last login: Mon\n*** motd ***zerokit-remote-env start\nzerokit-remote-env cwd ok\n"
           "[WARNING] Setting accelerator to CPU\nzerokit-remote-env versions 0.19.0 2.5.1+cpu\n"
           "zerokit-remote-env file 2 missing\nzerokit-remote-env file 1 ok\nzerokit-remote-env end\nbye\n")
    answer = parse_remote_env(out, 2)
    assert (answer.cwd, answer.python, answer.versions, answer.import_error, answer.files) == (
        True, True, ("0.19.0", "2.5.1+cpu"), None, (True, False))
    assert parse_remote_env("Permission denied\n", 1) is None


# ---------------------------------------------------------------- where it does not apply

@pytest.mark.parametrize("target", [
    Target(),  # one node
    Target(gpus_per_node=2),
    Target(hosts={"localhost": 1, "127.0.0.1": 1}),  # every host is this machine
    Target(hosts={"node1": 1, "node2": 1}, no_ssh=True, node_rank=0, master_addr="node1"),  # each node checks itself
    Target(hosts={"node1": 1, "node2": 1}, launcher="slurm"),  # srun starts the ranks, not ssh
])
def test_it_does_not_apply_without_ssh_to_other_nodes(nodes, target):
    nodes.set()
    assert check_remote_env(target) is None and nodes.calls() == []


def test_emitted_scripts_check_nothing_now(nodes):
    nodes.set()
    for launcher, emit, path in (("openmpi", "--emit-script", "run.sh"), ("pdsh", "--emit-sbatch", "job.sbatch")):
        assert main(["launch", "--hosts", "node1:1,node2:1", "--launcher", launcher, emit, path, "train.py"]) == 0
    assert nodes.calls() == []  # the script runs `zerokit launch` later, whose preflight asks then


# ---------------------------------------------------------------- the runner's interpreter, as DeepSpeed sees it

@pytest.mark.parametrize("first, second, python", [
    ("#!/opt/venv/bin/python3.11", "", "/opt/venv/bin/python3.11"),
    ("#!/bin/sh", "'''exec' \"/very long/venv path/bin/python\" \"$0\" \"$@\"", "/very long/venv path/bin/python"),
    ("#!/usr/bin/env -S python3", "", "ENV"),
])
def test_the_runners_interpreter_is_its_shebangs(tmp_path, first, second, python):
    runner = tmp_path / "deepspeed"
    runner.write_text(f"{first}\n{second}\nfrom deepspeed.launcher.runner import main\n")
    import shutil

    assert runner_python(str(runner)) == (shutil.which("python3") if python == "ENV" else python)
    assert runner_python(str(tmp_path / "none")) == sys.executable


# ---------------------------------------------------------------- through zerokit launch and zerokit preflight

def _fake_launchers(tmp_path: Path) -> Path:
    """pdsh, ompi_info and mpirun that write down that they ran, in the fake ssh's directory."""
    log = tmp_path / "launched"
    for name in ("pdsh", "ompi_info", "mpirun"):
        path = tmp_path / "bin" / name
        path.write_text(f"#!/bin/sh\necho {name} >> '{log}'\n")
        path.chmod(0o755)
    return log


def test_launch_stops_in_preflight_where_a_node_lacks_the_script(nodes, tmp_path, capfd):
    """openmpi: the working directory and the script have spaces in their names, which pdsh cannot carry."""
    launched = _fake_launchers(tmp_path)
    nodes.set(node2={"lacks": [str(nodes.script)]})
    code = main(["launch", "--hosts", "node1:1,node2:1", "--launcher", "openmpi", "--config", "ds.json",
                 "train me.py", "--epochs", "1"])
    err = capfd.readouterr().err
    assert code == 3, err
    assert f"✗ remote env: no script {nodes.script} on node2\n" in err
    assert f"rsync -aR '{nodes.script}' node2:/`" in err
    assert not launched.exists() or launched.read_text() == "ompi_info\n"  # the launcher check's; no mpirun
    assert "zerokit launch: preflight failed" in err
    envs = [c for c in nodes.calls() if "zerokit-remote-env" in c["argv"][-1]]
    assert sorted(c["host"] for c in envs) == ["node1", "node2"]
    # the config launch passes (--deepspeed, absolute) is what each node was asked for
    assert str(nodes.config) in envs[0]["argv"][-1]


def test_zerokit_preflight_json_names_the_check(nodes, capsys, tmp_path):
    _fake_launchers(tmp_path)
    nodes.set(node1={"lacks": [str(nodes.config)]})
    code = main(["preflight", "--hosts", "node1:1,node2:1", "--launcher", "openmpi", "--config", "ds.json",
                 "--format", "json"])  # openmpi: pdsh cannot carry this working directory's space
    out, _ = capsys.readouterr()
    checks = {c["name"]: c for c in json.loads(out)["checks"]}
    assert code == 3 and [name for name, c in checks.items() if not c["ok"]] == ["remote env"]
    assert checks["remote env"]["detail"] == f"no config {nodes.config} on node1"

"""`zerokit launch --ssh-port N` and `--launcher-args TEXT`: DeepSpeed's runner's --ssh_port and --launcher_args.

The runner here is DeepSpeed's own, run for real; only the programs it starts on the way to the nodes (ssh, pdsh,
ompi_info, mpirun) are scripts on PATH that write down how they were called, and answer as a node would.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from _support import free_port

from zerokit.cli import main
from zerokit.errors import BadInput
from zerokit.launch import preflight
from zerokit.launch.runner import LaunchSpec, build_command, notes, render_sbatch

TWO = (("node1", 2), ("node2", 2))
PORT_ARGS = "--mca plm_rsh_args '-p 2222'"


def spec(**kw) -> LaunchSpec:
    return LaunchSpec(**{"script": "train.py", "runner": "deepspeed", "hosts": TWO, **kw})


# ---------------------------------------------------------------- the runner's command line, as DeepSpeed reads it

@pytest.mark.parametrize("launcher_args, words", [
    ("-l trainer", ["-l", "trainer"]),
    ("--oversubscribe", ["--oversubscribe"]),  # one word that starts with '-': argparse's own option, given apart
    (PORT_ARGS + " -mca btl_tcp_if_include eth1", ["--mca", "plm_rsh_args", "-p 2222", "-mca", "btl_tcp_if_include",
                                                   "eth1"]),
])
def test_both_reach_deepspeeds_runner_as_it_parses_and_splits_them(tmp_path, launcher_args, words):
    runner = pytest.importorskip("deepspeed.launcher.runner")
    argv, _ = build_command(spec(ssh_port=2222, launcher_args=launcher_args, files_dir=str(tmp_path),
                                 launcher="openmpi" if "plm_rsh_args" in launcher_args else "pdsh"))
    assert argv[argv.index("--ssh_port") + 1] == "2222" and f"--launcher_args={launcher_args}" in argv
    args = runner.parse_args(argv[1:])
    assert (args.ssh_port, args.launcher_args, args.user_script) == (2222, launcher_args, "train.py")
    assert shlex.split(args.launcher_args) == words  # multinode_runner.py: split(self.args.launcher_args)
    if launcher_args == "--oversubscribe":  # why the command gives it as --launcher_args=VALUE
        with pytest.raises(SystemExit):
            runner.parse_args(["--launcher_args", launcher_args, "train.py"])


def test_pdsh_gives_its_ssh_the_port_and_its_command_the_arguments():
    runner = pytest.importorskip("deepspeed.launcher.runner")
    from deepspeed.launcher.constants import PDSH_MAX_FAN_OUT
    from deepspeed.launcher.multinode_runner import OpenMPIRunner, PDSHRunner

    argv, _ = build_command(spec(ssh_port=2222, launcher_args="-l trainer"))
    cmd, _, env = PDSHRunner(runner.parse_args(argv[1:]), "").get_cmd({}, {"node1": [0, 1], "node2": [0, 1]})
    assert env["PDSH_SSH_ARGS_APPEND"].split() == ["-p", "2222"]
    assert cmd[:7] == ["pdsh", "-S", "-f", str(PDSH_MAX_FAN_OUT), "-w", "node1,node2", "-l"] and cmd[7] == "trainer"
    # openmpi: mpirun gets the arguments, and DeepSpeed's own btl_tcp_if_include eth0 yields to the one given
    argv, _ = build_command(spec(ssh_port=2222, launcher="openmpi",
                                 launcher_args=PORT_ARGS + " --mca btl_tcp_if_include eth1"))
    mpirun = OpenMPIRunner(runner.parse_args(argv[1:]), "", dict(TWO)).get_cmd({}, {})
    assert mpirun[:9] == ["mpirun", "-n", "4", "-hostfile", argv[argv.index("--hostfile") + 1], "--mca", "btl",
                          "^openib", "--mca"]
    assert mpirun[8:14] == ["--mca", "plm_rsh_args", "-p 2222", "--mca", "btl_tcp_if_include", "eth1"]
    assert "eth0" not in mpirun


# ---------------------------------------------------------------- which backend takes the port, and how

@pytest.mark.parametrize("launcher", ["pdsh", "slurm"])
def test_pdsh_and_slurm_take_the_port_as_it_is(launcher):
    """pdsh's ssh gets it from DeepSpeed (PDSH_SSH_ARGS_APPEND); srun needs no ssh, so the runner's own ssh check and
    `hostname -I` probe are all the ssh a slurm job has, and they take it."""
    argv, _ = build_command(spec(ssh_port=2222, launcher=launcher))
    assert argv[argv.index("--ssh_port"):argv.index("--ssh_port") + 2] == ["--ssh_port", "2222"]


def test_deepspeeds_mpi_backends_never_give_mpirun_the_port():
    """What the refusal below stands on: of DeepSpeed's backends only PDSHRunner reads ssh_port."""
    import inspect

    from deepspeed.launcher import multinode_runner as mr

    readers = [cls.__name__ for cls in (mr.PDSHRunner, mr.OpenMPIRunner, mr.MPICHRunner, mr.IMPIRunner,
                                        mr.MVAPICHRunner, mr.SlurmRunner) if "ssh_port" in inspect.getsource(cls)]
    assert readers == ["PDSHRunner"]


@pytest.mark.parametrize("launcher, fix", [
    ("openmpi", "--launcher-args \"--mca plm_rsh_args '-p 2222'\""),
    ("impi", "--launcher-args \"-bootstrap-exec-args '-p 2222'\""),
    ("mpich", "export HYDRA_LAUNCHER_EXTRA_ARGS='-p 2222' (hydra's ssh reads it)"),
    ("mvapich", "export HYDRA_LAUNCHER_EXTRA_ARGS='-p 2222' (hydra's ssh reads it)"),
])
def test_an_mpi_backend_without_the_port_for_mpirun_is_refused_with_its_own_way(monkeypatch, launcher, fix):
    for name in ("OMPI_MCA_plm_rsh_args", "PRTE_MCA_plm_ssh_args", "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS",
                 "HYDRA_LAUNCHER_EXTRA_ARGS"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(BadInput) as e:
        build_command(spec(ssh_port=2222, launcher=launcher))
    assert str(e.value) == (
        f"--ssh-port 2222 with --launcher {launcher}: DeepSpeed's {launcher} backend uses it only for the runner's own "
        "ssh check, not for mpirun, whose ssh would use its default port; give mpirun port 2222 too: "
        f"{fix}, or set Port 2222 for the nodes in ~/.ssh/config (every ssh reads it) and drop --ssh-port")


@pytest.mark.parametrize("launcher, launcher_args, env", [
    ("openmpi", PORT_ARGS, {}),
    ("openmpi", "-mca plm_rsh_args '-o Port=2222 -i key'", {}),
    ("openmpi", None, {"OMPI_MCA_plm_rsh_args": "-p2222"}),
    ("impi", "-bootstrap-exec-args '-p 2222'", {}),
    ("mpich", None, {"HYDRA_LAUNCHER_EXTRA_ARGS": "-p 2222"}),
    ("mvapich", "-v", {"HYDRA_LAUNCHER_EXTRA_ARGS": "-oPort=2222"}),
])
def test_an_mpi_backend_whose_mpirun_is_given_the_port_passes_it_to_the_runner(monkeypatch, launcher, launcher_args,
                                                                               env):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    argv, _ = build_command(spec(ssh_port=2222, launcher=launcher, launcher_args=launcher_args))
    assert "--ssh_port" in argv and argv[argv.index("--ssh_port") + 1] == "2222"


def test_another_port_for_mpirun_is_refused_and_a_port_only_mpirun_has_is_noted(monkeypatch):
    monkeypatch.delenv("OMPI_MCA_plm_rsh_args", raising=False)
    with pytest.raises(BadInput, match=r"not for mpirun, whose ssh is given port 2200; give mpirun port 2222 too"):
        build_command(spec(ssh_port=2222, launcher="openmpi", launcher_args="--mca plm_rsh_args '-p 2200'"))
    # mpirun on 2222 but the runner's own ssh check on ssh's default: said, not refused (~/.ssh/config may give it)
    s = spec(launcher="openmpi", launcher_args=PORT_ARGS)
    assert "--ssh_port" not in build_command(s)[0]
    assert ("--launcher-args gives mpirun's ssh port 2222, but DeepSpeed's runner runs its own ssh check and "
            "`hostname -I` probe on ssh's default port: add --ssh-port 2222, unless ~/.ssh/config gives the nodes that "
            "port") in notes(s)


def test_ssh_args_port_reads_ssh_s_spellings():
    from zerokit.launch.runner import ssh_args_port

    for words, port in ((["-p", "2222"], "2222"), (["-p2222"], "2222"), (["-o", "Port=2222"], "2222"),
                        (["-oPort 2222"], "2222"), (["-o", "StrictHostKeyChecking=no", "-i", "k"], None),
                        (["-o", "port = 7"], "7"), ([], None)):
        assert ssh_args_port(words) == port, words


# ---------------------------------------------------------------- where they do nothing: one node, --no-ssh, sbatch

@pytest.mark.parametrize("hosts", [["--gpus-per-node", "2"], ["--hosts", "localhost:2"]])
def test_on_one_node_both_are_named_as_left_out(capsys, tmp_path, monkeypatch, hosts):
    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text("")
    code = main(["launch", *hosts, "--ssh-port", "2222", "--launcher-args", "-mca btl_tcp_if_include eth0",
                 "--dry-run", "train.py"])
    out, err = capsys.readouterr()
    assert code == 0 and "--ssh_port" not in out and "--launcher_args" not in out
    assert err == ("zerokit launch: warning: --ssh-port 2222 has no effect on one node: DeepSpeed's runner uses no ssh "
                   "there, so zerokit leaves it out (it matters to jobs on other hosts)\n"
                   "zerokit launch: warning: --launcher-args '-mca btl_tcp_if_include eth0' has no effect on one node: "
                   "DeepSpeed's runner starts the ranks itself there (launch.py), with no launcher, so zerokit leaves "
                   "it out (it matters to jobs on other hosts)\n")
    # an emitted script runs the same command: it says so too
    assert main(["launch", *hosts, "--ssh-port", "2222", "--emit-script", "run.sh", "train.py"]) == 0
    assert "--ssh-port 2222 has no effect on one node" in capsys.readouterr().err
    assert "ssh_port" not in Path("run.sh").read_text()


@pytest.mark.parametrize("option, value, why", [("--ssh-port", "2222", "nothing uses ssh"),
                                                ("--launcher-args", "-x", "no launcher runs")])
def test_no_ssh_and_an_sbatch_refuse_them(capsys, tmp_path, monkeypatch, option, value, why):
    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text("")
    code = main(["launch", "--hosts", "node1:2,node2:2", "--no-ssh", "--node-rank", "0", "--master-addr", "node1",
                 option, value, "--dry-run", "train.py"])
    assert code == 2 and capsys.readouterr().err == (
        f"zerokit launch: error: {option} has no effect with --no-ssh: each node's runner starts its own ranks, and "
        f"{why}; drop {option}\n")
    code = main(["launch", "--hosts", "node1,node2", "--gpus-per-node", "2", option, value, "--emit-sbatch",
                 "job.sbatch", "train.py"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and not Path("job.sbatch").exists()
    assert f"error: {option} has no place in an sbatch script: srun starts one deepspeed runner per node" in err
    with pytest.raises(BadInput, match=f"{option} has no place in an sbatch script"):
        render_sbatch(spec(gpus_per_node=2, **{option[2:].replace("-", "_"): 2222 if value == "2222" else value}),
                      "zerokit launch ...", "job.sbatch")


# ---------------------------------------------------------------- --launcher-args DeepSpeed could not split

@pytest.mark.parametrize("text, said", [
    ("-mca plm_rsh_args '-p 2222", "no closing quotation"),
    ("-x FOO=\\", "no escaped character"),
    ("   ", "is empty"),
])
def test_launcher_args_deepspeed_cannot_split_are_bad_input_in_one_line(capsys, tmp_path, monkeypatch, text, said):
    """DeepSpeed's runner splits --launcher_args with shlex.split when it builds the command, after its ssh check:
    an unclosed quote was its ValueError traceback there."""
    if text.strip():
        with pytest.raises(ValueError, match=f"(?i){said}"):
            shlex.split(text)
    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text("")
    for extra in ([], ["--dry-run"], ["--emit-script", "run.sh"]):
        code = main(["launch", "--hosts", "node1:2,node2:2", "--launcher-args", text, *extra, "train.py"])
        captured = capsys.readouterr()
        assert code == 2 and captured.out == "" and captured.err.count("\n") == 1, captured
        assert captured.err.startswith("zerokit launch: error: --launcher-args ") and said in captured.err
        assert "Traceback" not in captured.err and not Path("run.sh").exists()


# ---------------------------------------------------------------- the real runner, with fake nodes on PATH

def _fake_bin(tmp_path: Path) -> tuple[Path, Path]:
    """ssh, pdsh, ompi_info and mpirun that append `{prog, argv, env}` to a log: ssh answers `hostname` and
    `hostname -I` as a node would (and the preflight's port probe: free), the launchers start nothing."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.jsonl"
    bin_dir.mkdir()
    record = (f"#!{sys.executable}\nimport json, os, sys\nopen({str(log)!r}, 'a').write(json.dumps({{'prog': "
              "os.path.basename(sys.argv[0]), 'argv': sys.argv[1:], 'env': {k: os.environ.get(k) for k in "
              "('PDSH_SSH_ARGS_APPEND', 'PDSH_RCMD_TYPE')}}) + '\\n')\n")
    ssh = record + ("remote = ' '.join(sys.argv[sys.argv.index('node1' if 'node1' in sys.argv else 'node2') + 1:])\n"
                    "print({'hostname': 'node', 'hostname -I': '10.0.0.7 fd00::7'}.get(remote, 'free'))\n")
    for name, body in (("ssh", ssh), ("pdsh", record), ("ompi_info", record), ("mpirun", record)):
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    return bin_dir, log


def _calls(log: Path, prog: str) -> list[dict]:
    return [c for c in map(json.loads, log.read_text().splitlines()) if c["prog"] == prog] if log.exists() else []


def _port_before_host(argv: list[str]) -> bool:
    host = next(i for i, word in enumerate(argv) if word in ("node1", "node2"))
    return argv[host - 2:host] == ["-p", "2222"]


def test_the_preflight_and_deepspeeds_runner_ssh_on_the_port_and_pdsh_gets_it(capfd, tmp_path, monkeypatch):
    """A cluster whose sshd listens on 2222 (a container): the preflight's ssh check, its master-port probe, the
    runner's own ssh check and its `hostname -I` probe, and pdsh's ssh all use the port."""
    pytest.importorskip("deepspeed.launcher.runner")
    from deepspeed.launcher.constants import PDSH_MAX_FAN_OUT

    bin_dir, log = _fake_bin(tmp_path)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text("")
    code = main(["launch", "--hosts", "node1:1,node2:1", "--ssh-port", "2222", "--launcher-args", "-l trainer",
                 "--master-port", str(free_port()), "train.py"])
    out, err = capfd.readouterr()
    assert code == 0, out + err
    assert "✓ ssh: 2 hosts answer on port 2222" in err and "the master address: 10.0.0.7" in err
    ssh = [c["argv"] for c in _calls(log, "ssh")]
    remote = [" ".join(a[a.index("node1" if "node1" in a else "node2"):]) for a in ssh]
    # the preflight's: each host, the master address, each host's env (one call a host), rank 0's port; then the
    # runner's check and its probe
    envs = [r for r in remote if "zerokit-remote-env" in r]
    assert sorted(r.split()[0] for r in envs) == ["node1", "node2"]
    assert sorted(remote) == sorted(["node1 hostname", "node2 hostname", "node1 hostname -I", *envs,
                                     next(r for r in remote if "/dev/tcp/" in r), "node1 hostname",
                                     "node1 hostname -I"]), remote
    assert all(_port_before_host(a) for a in ssh), ssh
    [pdsh] = _calls(log, "pdsh")
    assert pdsh["env"]["PDSH_SSH_ARGS_APPEND"].split() == ["-p", "2222"] and pdsh["env"]["PDSH_RCMD_TYPE"] == "ssh"
    assert pdsh["argv"][:7] == ["-S", "-f", str(PDSH_MAX_FAN_OUT), "-w", "node1,node2", "-l", "trainer"]
    assert "--master_addr=10.0.0.7" in pdsh["argv"]  # what `hostname -I` on port 2222 answered


def test_zerokit_preflight_checks_ssh_on_the_port(capsys, tmp_path, monkeypatch):
    bin_dir, log = _fake_bin(tmp_path)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    code = main(["preflight", "--hosts", "node1:1,node2:1", "--ssh-port", "2222", "--master-port", str(free_port()),
                 "--format", "json"])
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert code == 0 and checks["ssh"]["detail"].startswith("2 hosts answer on port 2222 (")
    assert len(_calls(log, "ssh")) == 6 and all(_port_before_host(c["argv"]) for c in _calls(log, "ssh"))
    # each host's env, asked on the port too (this fake ssh answers none of it: not checked, not failed)
    assert (checks["remote env"]["ok"], checks["remote env"]["checked"]) == (True, False)


def test_the_preflight_names_the_port_where_ssh_fails(monkeypatch):
    seen = []

    def run(argv, **kwargs):
        seen.append(argv)
        return subprocess.CompletedProcess(argv, 255, "", "ssh: connect to host node1 port 2222: Connection refused")

    monkeypatch.setattr(preflight.subprocess, "run", run)
    check = preflight.check_ssh(preflight.Target(hosts={"node1": 1, "node2": 1}, ssh_port=2222))
    assert not check.ok and check.detail.startswith("no passwordless ssh on port 2222 to node1 (ssh: connect")
    assert "(ssh -p 2222 HOST hostname must work without a prompt" in check.fix
    assert all(argv[-4:-2] == ["-p", "2222"] for argv in seen)
    assert preflight.probe_remote_port("node1", 29500, ssh_port=2222)[0] is None and seen[-1][-4:-2] == ["-p", "2222"]
    default = preflight.check_ssh(preflight.Target(hosts={"node1": 1, "node2": 1}))
    assert "-p" not in seen[-1] and "where the nodes' sshd listens on another port: --ssh-port N" in default.fix


def test_openmpi_through_deepspeeds_runner_gets_the_port_in_its_launcher_args(capfd, tmp_path, monkeypatch):
    pytest.importorskip("deepspeed.launcher.runner")
    bin_dir, log = _fake_bin(tmp_path)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("OMPI_MCA_plm_rsh_args", raising=False)
    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text("")
    base = ["launch", "--hosts", "node1:1,node2:1", "--launcher", "openmpi", "--ssh-port", "2222", "--no-preflight"]
    assert main([*base, "train.py"]) == 2  # mpirun's ssh would knock on 22: refused before anything starts
    assert "--launcher-args \"--mca plm_rsh_args '-p 2222'\"" in capfd.readouterr().err and not log.exists()
    code = main([*base, "--launcher-args", PORT_ARGS + " --mca btl_tcp_if_include eth1", "train.py", "--epochs", "1"])
    out, err = capfd.readouterr()
    assert code == 0, out + err
    assert all(_port_before_host(c["argv"]) for c in _calls(log, "ssh")) and len(_calls(log, "ssh")) == 2
    [mpirun] = _calls(log, "mpirun")
    words = mpirun["argv"]
    assert words[7:13] == ["--mca", "plm_rsh_args", "-p 2222", "--mca", "btl_tcp_if_include", "eth1"], words
    assert "eth0" not in words and words[-3:] == ["train.py", "--epochs", "1"]


def test_an_emitted_script_hands_the_runner_both_word_for_word(tmp_path, monkeypatch, capsys):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "argv.json"
    (bin_dir / "deepspeed").write_text(f"#!{sys.executable}\nimport json, sys\n"
                                       f"open({str(record)!r}, 'w').write(json.dumps(sys.argv[1:]))\n")
    (bin_dir / "deepspeed").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.chdir(tmp_path)
    launcher_args = PORT_ARGS + " -x NAME=\"it's $(id)\""
    assert main(["launch", "--hosts", "node1:1,node2:1", "--launcher", "openmpi", "--ssh-port", "2222",
                 "--launcher-args", launcher_args, "--emit-script", "run.sh", "train.py"]) == 0
    capsys.readouterr()
    subprocess.run(["bash", "run.sh"], check=True, cwd=tmp_path, timeout=60, env=dict(os.environ))
    argv = json.loads(record.read_text())
    assert argv[argv.index("--ssh_port") + 1] == "2222" and f"--launcher_args={launcher_args}" in argv
    runner = pytest.importorskip("deepspeed.launcher.runner")
    assert shlex.split(runner.parse_args(argv).launcher_args) == ["--mca", "plm_rsh_args", "-p 2222", "-x",
                                                                  "NAME=it's $(id)"]

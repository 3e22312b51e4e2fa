"""`zerokit launch` without a training run: the runner's argv and env, the written files, quoting against hostile
input, and process handling with real subprocesses (exit codes, signals reaching the whole process group).

DeepSpeed's own parsers judge what zerokit builds: `deepspeed.launcher.runner.parse_args` reads the argv and
`_parse_hostfile` reads the written hostfile. The rendered batch and launch scripts are executed by bash with
a stub runner that records the argv it received.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from _support import free_port, pids_with

from zerokit.cli import main
from zerokit.errors import BadInput
from zerokit.launch.hostfile import parse_hostfile, parse_hosts, validate_hostname
from zerokit.launch.runner import (
    LaunchSpec,
    build_command,
    check_include_devices,
    named_configs,
    render_files,
    render_launch_script,
    render_sbatch,
    run,
)

HOSTILE_HOSTS = ["a;rm -rf ~", "$(id)", "`id`", "node1\nnode2", "-oProxyCommand=id", "a b", "host|cat", "ho$t"]


def spec(**kw) -> LaunchSpec:
    base = {"script": "train.py", "config": "/cfg/ds.json", "runner": "deepspeed"}
    return LaunchSpec(**{**base, **kw})


# ---------------------------------------------------------------- argv and env

def test_one_node_command_appends_the_config_and_streams_unbuffered():
    argv, env = build_command(spec(gpus_per_node=2, script_args=("--max-steps", "3")))
    assert argv == ["deepspeed", "--num_gpus", "2", "--master_port", "29500",
                    "train.py", "--max-steps", "3", "--deepspeed", "/cfg/ds.json"]
    assert env == {"PYTHONUNBUFFERED": "1"}


@pytest.mark.parametrize("args", [("--deepspeed", "/cfg/ds.json"), ("--deepspeed=/cfg/../cfg/ds.json",),
                                  ("--deepspeed_config", "/cfg//ds.json"), ("--deepspeed_config_file", "/cfg/ds.json"),
                                  ("--deepspeed", "--deepspeed_config", "/cfg/ds.json")])
def test_config_is_not_appended_when_the_script_args_name_the_same_file(args):
    """DeepSpeed's add_config_arguments: `--deepspeed` is a bare flag there, and `--deepspeed_config` names the file."""
    argv, _ = build_command(spec(gpus_per_node=1, script_args=args))
    assert argv[argv.index("train.py"):] == ["train.py", *args]


def test_a_bare_deepspeed_switch_gets_the_config_as_deepspeed_config():
    """`train.py --deepspeed --epochs 1`: DeepSpeed's add_config_arguments, where --deepspeed is a switch and
    --deepspeed_config names the file; `--deepspeed PATH` appended there would be an unrecognized argument."""
    import argparse

    import deepspeed

    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs")
    parser = deepspeed.add_config_arguments(parser)
    argv, _ = build_command(spec(gpus_per_node=1, script_args=("--deepspeed", "--epochs", "1")))
    assert argv[argv.index("train.py"):] == ["train.py", "--deepspeed", "--epochs", "1", "--deepspeed_config",
                                            "/cfg/ds.json"]
    got = parser.parse_args(argv[argv.index("train.py") + 1:])
    assert (got.deepspeed, got.deepspeed_config, got.epochs) == (True, "/cfg/ds.json", "1")


def test_the_same_config_by_another_name_is_accepted(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text("{}")
    (tmp_path / "link.json").symlink_to("ds.json")
    (tmp_path / "train.py").write_text("")
    for named in ("./ds.json", str(tmp_path / "ds.json"), "link.json"):
        assert main(["launch", "--config", "ds.json", "--gpus-per-node", "2", "--dry-run", "train.py", "--deepspeed",
                     named]) == 0
        assert capsys.readouterr().out.endswith(f" train.py --deepspeed {named}\n")


OTHER = ("the script's arguments name another DeepSpeed config than --config ds.json ({named}): the training would "
         "read it, and the preflight checks --config; ")


DROP = ("drop --deepspeed other.json from the script's arguments (zerokit passes --config's file as --deepspeed), or "
        "pass --config other.json to check that one")
INLINE = '{"zero_optimization": {"stage": 3}}'


@pytest.mark.parametrize("args, named, fix", [
    (["--deepspeed", "other.json"], "--deepspeed other.json", DROP),
    (["--lr", "1", "--deepspeed=other.json"], "--deepspeed other.json", DROP),
    (["--deepspeed", "--deepspeed_config", "other.json"], "--deepspeed_config other.json",
     "give --deepspeed_config ds.json in the script's arguments, or pass --config other.json to check that one"),
    (["--deepspeed_config_file", "other.json"], "--deepspeed_config_file other.json",
     "give --deepspeed_config_file ds.json in the script's arguments, or pass --config other.json to check that one"),
    (["--deepspeed", INLINE], f"--deepspeed '{INLINE}'",  # the HF Trainer takes a config as JSON text too
     f"drop --deepspeed '{INLINE}' from the script's arguments (zerokit passes --config's file as --deepspeed)"),
])
def test_a_script_naming_another_config_is_refused(tmp_path, capsys, monkeypatch, args, named, fix):
    """`zerokit launch --config ds.json train.py --deepspeed other.json` trained with other.json, which no preflight
    had checked; a dry run printed it as fine."""
    monkeypatch.chdir(tmp_path)
    for name in ("ds.json", "other.json"):
        (tmp_path / name).write_text("{}")
    (tmp_path / "train.py").write_text("")
    for extra in ([], ["--emit-script", "run.sh"], ["--emit-sbatch", "job.sbatch"]):
        code = main(["launch", "--config", "ds.json", "--gpus-per-node", "2", "--dry-run", *extra, "train.py", *args])
        captured = capsys.readouterr()
        assert code == 2 and captured.out == ""
        assert captured.err == f"zerokit launch: error: {OTHER.format(named=named)}{fix}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds.json", "other.json", "train.py"]


def test_without_config_the_file_the_script_args_name_is_the_one_checked(tmp_path, capsys, monkeypatch):
    """`zerokit launch train.py --deepspeed ds.json` (the HF Trainer's way) started the training with no check of
    ds.json: a key DeepSpeed rejects passed the preflight. That file is now the job's config, read and checked as
    --config's would be, and nothing starts when it fails."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": 1,
                                                   "zero_optimization": {"stage": 3, "stage3_prefetch_bucket": 5}}))
    (tmp_path / "train.py").write_text("open('started', 'w').close()\n")
    code = main(["launch", "--gpus-per-node", "1", "--master-port", str(free_port()), "train.py", "--deepspeed",
                 "bad.json"])
    err = capsys.readouterr().err
    assert code == 3 and not (tmp_path / "started").exists()
    assert ("✗ config: lint finds 1 error, 1 warning; the first: unknown key 'stage3_prefetch_bucket' in "
            "zero_optimization") in err
    assert "(ZK100, zero_optimization.stage3_prefetch_bucket)" in err
    assert "fix: run `zerokit lint bad.json --target deepspeed --world-size 1` and fix what it lists" in err
    # the script's own option names it in the errors the file itself gets
    assert main(["launch", "--gpus-per-node", "1", "--dry-run", "train.py", "--deepspeed_config=missing.json"]) == 2
    assert capsys.readouterr().err == "zerokit launch: error: the script's --deepspeed_config missing.json: no such file\n"


@pytest.mark.parametrize("args, warned", [
    (["--deepspeed", "a.json", "--deepspeed_config", "b.json"],
     ("the script's arguments name 2 DeepSpeed configs (--deepspeed a.json, --deepspeed_config b.json); none is "
     "checked: pass --config with the one the training reads")),
    (["--deepspeed", INLINE], ("the DeepSpeed config the script's arguments give inline is not checked: write it to a "
                              "file and pass --config FILE")),
])
def test_without_config_a_config_that_cannot_be_told_is_named_unchecked(tmp_path, capsys, monkeypatch, args, warned):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    assert main(["launch", "--gpus-per-node", "1", "--dry-run", "train.py", *args]) == 0
    captured = capsys.readouterr()
    assert f"zerokit launch: warning: {warned}\n" in captured.err
    assert captured.out.endswith(f" train.py {shlex.join(args)}\n")  # passed on as given, nothing appended


def test_named_configs_reads_the_script_args_as_argparse_does():
    assert named_configs(["--deepspeed", "--deepspeed_config", "a.json", "--x", "--deepspeed=b.json", "--",
                          "--deepspeed", "c.json"]) == [("--deepspeed", None), ("--deepspeed_config", "a.json"),
                                                        ("--deepspeed", "b.json")]
    assert named_configs(["--deepspeed"]) == [("--deepspeed", None)]
    assert named_configs(["--deepspeed-x", "a.json", "--deepspeed=", "deepspeed"]) == [("--deepspeed", "")]
    with pytest.raises(BadInput, match=re.escape("(--deepspeed ''): the training would read it")):
        build_command(spec(gpus_per_node=1, script_args=("--deepspeed=",)))
    with pytest.raises(BadInput, match=re.escape("(--deepspeed 'a\x00b'): the training would read it")):
        build_command(spec(gpus_per_node=1, script_args=("--deepspeed", "a\0b")))  # not os.stat's ValueError


def test_the_config_goes_before_a_double_dash_where_argparse_still_reads_options():
    """`train.py --x 1 -- a.txt`: after `--` argparse reads every word as positional, so a `--deepspeed` appended
    there never reached the script; one there is the script's positional, not a config."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--deepspeed")
    parser.add_argument("--x")
    parser.add_argument("files", nargs="*")
    argv, _ = build_command(spec(gpus_per_node=1, script_args=("--x", "1", "--", "a.txt", "--deepspeed")))
    got = parser.parse_args(argv[argv.index("train.py") + 1:])
    assert (got.deepspeed, got.x, got.files) == ("/cfg/ds.json", "1", ["a.txt", "--deepspeed"])


def test_include_replaces_gpu_count_and_conflicts_with_it():
    argv, _ = build_command(spec(include="localhost:0,1"))
    assert argv[:5] == ["deepspeed", "--include", "localhost:0,1", "--master_port", "29500"]
    with pytest.raises(BadInput, match="--include picks the ranks itself"):
        build_command(spec(include="localhost:0", gpus_per_node=2))


def test_many_nodes_write_hostfile_and_deepspeed_env(tmp_path):
    s = spec(hosts=(("node1", 8), ("node2", 8)), launcher="mpich", master_addr="node1", master_port=29600,
             env=(("NCCL_DEBUG", "INFO"), ("NCCL_SOCKET_IFNAME", "eth0")), files_dir=str(tmp_path))
    argv, env = build_command(s)
    assert argv == ["deepspeed", "--hostfile", str(tmp_path / "hostfile"), "--launcher", "mpich", "--force_multi",
                    "--master_addr", "node1", "--master_port", "29600", "train.py", "--deepspeed", "/cfg/ds.json"]
    assert env == {"PYTHONUNBUFFERED": "1", "DS_ENV_FILE": str(tmp_path / ".deepspeed_env"),
                   "NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "eth0"}
    files = render_files(s)
    assert set(files) == {str(tmp_path / "hostfile"), str(tmp_path / ".deepspeed_env")}
    assert files[str(tmp_path / ".deepspeed_env")] == "NCCL_DEBUG=INFO\nNCCL_SOCKET_IFNAME=eth0\n"
    assert parse_hostfile(files[str(tmp_path / "hostfile")]) == {"node1": 8, "node2": 8}


def test_deepspeed_itself_reads_our_argv_and_hostfile(tmp_path):
    runner = pytest.importorskip("deepspeed.launcher.runner")
    s = spec(hosts=(("worker-0", 4), ("worker-1", 4)), nodes=2, gpus_per_node=4, master_addr="10.0.0.1",
             script_args=("--lr", "1e-4"), files_dir=str(tmp_path))
    argv, _ = build_command(s)
    args = runner.parse_args(argv[1:])
    assert (args.hostfile, args.launcher, args.master_addr, args.master_port) == (
        str(tmp_path / "hostfile"), "pdsh", "10.0.0.1", 29500)
    assert (args.num_nodes, args.num_gpus, args.user_script) == (2, 4, "train.py")
    assert args.user_args == ["--lr", "1e-4", "--deepspeed", "/cfg/ds.json"]
    hostfile_text = render_files(s)[str(tmp_path / "hostfile")]
    assert runner._parse_hostfile(hostfile_text.splitlines()) == {"worker-0": 4, "worker-1": 4}


# ---------------------------------------------------------------- validation: nothing reaches a shell

@pytest.mark.parametrize("host", HOSTILE_HOSTS)
def test_hostile_hostnames_are_refused_everywhere(host, tmp_path):
    with pytest.raises(BadInput, match="is not a valid hostname"):
        validate_hostname(host)
    with pytest.raises(BadInput, match="is not a valid hostname"):
        build_command(spec(hosts=((host, 2),)))
    with pytest.raises(BadInput, match="is not a valid hostname"):
        build_command(spec(hosts=(("node1", 2),), master_addr=host))
    if "\n" not in host:
        with pytest.raises(BadInput, match=r"hostfile:2: .*not a valid hostname|hostfile:2: expected 'HOST slots=N'"):
            parse_hostfile(f"node1 slots=2\n{host} slots=2\n")


def test_hostile_hostname_through_the_cli_is_one_line_and_exit_2(capsys):
    code = main(["launch", "--hosts", "a;rm -rf ~:2,$(id):2", "--dry-run", "train.py"])
    err = capsys.readouterr().err
    assert code == 2
    assert err == "zerokit launch: error: host 'a;rm -rf ~' is not a valid hostname; use letters, digits, '-', '_' and '.' only\n"


def test_hosts_option_parses_slots_and_defaults():
    assert parse_hosts("node1:8, node2:4", None) == {"node1": 8, "node2": 4}
    assert parse_hosts("node1,node2", 8) == {"node1": 8, "node2": 8}
    with pytest.raises(BadInput, match=r"give slots as node1:N or set --gpus-per-node"):
        parse_hosts("node1", None)
    with pytest.raises(BadInput, match="listed twice"):
        parse_hosts("node1:2,node1:2", None)
    with pytest.raises(BadInput, match="slots must be a whole number"):
        parse_hostfile("node1 slots=0\n")


def test_pdsh_refuses_arguments_a_remote_shell_would_run_but_mpi_passes_them_verbatim():
    hosts = (("node1", 1), ("node2", 1))
    with pytest.raises(BadInput, match=r"'\$\(touch pwned\)' has characters a remote shell would interpret"):
        build_command(spec(hosts=hosts, script_args=("--name", "$(touch pwned)")))
    argv, _ = build_command(spec(hosts=hosts, launcher="openmpi", script_args=("--name", "$(touch pwned)")))
    assert argv[-4:-2] == ["--name", "$(touch pwned)"]


def test_env_values_for_other_nodes_must_be_inert():
    with pytest.raises(BadInput, match="has shell characters"):
        build_command(spec(hosts=(("node1", 1),), env=(("X", "$(id)"),)))
    with pytest.raises(BadInput, match="a variable name is letters"):
        build_command(spec(gpus_per_node=1, env=(("1X", "y"),)))
    _, env = build_command(spec(gpus_per_node=1, env=(("X", "$(id) stays literal"),)))  # one node: no shell at all
    assert env["X"] == "$(id) stays literal"


@pytest.mark.parametrize("argv, message", [
    (["--nodes", "2", "t.py"], "--nodes 2 needs the nodes"),
    (["--env", "NOEQUALS", "t.py"], "--env 'NOEQUALS': write it as KEY=VALUE"),
    (["--include", "localhost:0", "--gpus-per-node", "2", "t.py"], "--include picks the ranks itself"),
    (["--hostfile", "h", "--hosts", "a:1", "t.py"], "give either --hostfile or --hosts"),
    (["--config", "/nonexistent/ds.json", "t.py"], "--config /nonexistent/ds.json: no such file"),
    (["--hosts", "node1:2,node2:2", "--nodes", "5", "t.py"], "--nodes 5 is more than the 2 hosts given"),
    (["--no-ssh", "--hosts", "node1:2,node2:2", "--master-addr", "node1", "--node-rank", "0", "--watch-port", "29500",
      "t.py"], "--watch-port 29500 is the master port"),
    # DeepSpeed's --node_rank indexes the hosts its filters keep: with node2 excluded there is one node
    (["--no-ssh", "--hosts", "node1:2,node2:2", "--exclude", "node2", "--master-addr", "node1", "--node-rank", "1",
      "t.py"], "--node-rank 1 is not one of the job's 1 nodes (0 to 0)"),
    (["--no-ssh", "--hosts", "node1:2,node2:2,node3:2", "--nodes", "2", "--master-addr", "node1", "--node-rank", "2",
      "t.py"], "--node-rank 2 is not one of the job's 2 nodes (0 to 1)"),
    (["--hosts", "", "t.py"], "--hosts is empty"),
    (["--hostfile", "", "t.py"], "--hostfile is empty"),
    (["--gpus-per-node", "99999999999", "t.py"], "99999999999 is not in the range 1<=x<=4096"),
])
def test_bad_input_exits_2_with_one_line(capsys, argv, message):
    code = main(["launch", "--dry-run", *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1


# ---------------------------------------------------------------- dry run and rendered scripts

def test_dry_run_prints_a_line_the_shell_reads_back_as_the_same_argv(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    cfg = tmp_path / "ds config.json"
    cfg.write_text("{}")
    code = main(["launch", "--config", str(cfg), "--gpus-per-node", "2", "--env", "A=x y", "--dry-run",
                 "train.py", "--name", "it's $(id)"])
    out = capsys.readouterr().out.strip()
    assert code == 0
    words = shlex.split(out)
    assert words[:2] == ["PYTHONUNBUFFERED=1", "A=x y"]
    assert words[2].endswith("deepspeed")
    assert words[3:] == ["--num_gpus", "2", "--master_port", "29500", "train.py", "--name", "it's $(id)",
                         "--deepspeed", str(cfg)]


def _stub(path: Path, body: str) -> None:
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def stub_bin(tmp_path):
    """A PATH with a recording `deepspeed` and fake `srun`/`scontrol`, to execute rendered scripts for real."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _stub(bin_dir / "deepspeed", f"#!{sys.executable}\nimport json, os, sys\n"
          "open(os.environ['RECORD'], 'w').write(json.dumps({'argv': sys.argv[1:], 'env': {k: os.environ.get(k) "
          "for k in ('MASTER_ADDR', 'MASTER_PORT', 'HOSTFILE', 'NCCL_DEBUG')}}))\n")
    _stub(bin_dir / "srun", "#!/bin/sh\nshift\nexec \"$@\"\n")  # drops --kill-on-bad-exit=1
    _stub(bin_dir / "scontrol", "#!/bin/sh\nprintf 'gpu-a\\ngpu-b\\n'\n")
    return bin_dir


HOSTILE_ARGS = ("--name", "$(touch PWNED)", "--note", "it's `touch PWNED2`; rm -rf PWNED3\nnext line")


def test_sbatch_runs_the_same_job_under_srun_and_quotes_every_argument(tmp_path, stub_bin, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = spec(hosts=(("gpu-a", 8), ("gpu-b", 8)), env=(("NCCL_DEBUG", "INFO"),), script_args=HOSTILE_ARGS,
             master_port=29700)
    text = render_sbatch(s, "zerokit launch ... \n touch PWNED4", "job.sbatch", time_limit="01:00:00")
    assert "#SBATCH --nodes=2" in text and "#SBATCH --gpus-per-node=8" in text and "#SBATCH --time=01:00:00" in text
    (tmp_path / "job.sbatch").write_text(text)
    record = tmp_path / "record.json"
    env = {**os.environ, "PATH": f"{stub_bin}:{os.environ['PATH']}", "RECORD": str(record),
           "SLURM_JOB_NODELIST": "gpu-[a-b]", "SLURM_JOB_ID": "42", "SLURM_NODEID": "1", "SLURM_SUBMIT_DIR": str(tmp_path)}
    subprocess.run(["bash", "job.sbatch"], env=env, check=True, cwd=tmp_path)
    got = json.loads(record.read_text())
    assert got["argv"] == ["--hostfile", str(tmp_path / "hostfile-42"), "--no_ssh", "--node_rank", "1",
                           "--num_nodes", "2", "--num_gpus", "8", "--master_addr", "gpu-a", "--master_port", "29700",
                           "train.py", *HOSTILE_ARGS, "--deepspeed", "/cfg/ds.json"]
    assert got["env"]["NCCL_DEBUG"] == "INFO"
    assert (tmp_path / "hostfile-42").read_text() == "gpu-a slots=8\ngpu-b slots=8\n"
    assert not list(tmp_path.glob("PWNED*"))


def test_sbatch_env_path_reaches_the_ranks_but_not_slurms_own_tools(tmp_path, stub_bin, monkeypatch):
    """`--env PATH=...` names the ranks' PATH; scontrol and srun are still the job's, found before it is set."""
    monkeypatch.chdir(tmp_path)
    ranks_bin = tmp_path / "ranks_bin"  # the user's environment: a deepspeed, no Slurm tools
    ranks_bin.mkdir()
    (ranks_bin / "deepspeed").symlink_to(stub_bin / "deepspeed")
    s = spec(hosts=(("gpu-a", 8), ("gpu-b", 8)), env=(("PATH", f"{ranks_bin}:/usr/bin:/bin"),), master_port=29700)
    (tmp_path / "job.sbatch").write_text(render_sbatch(s, "zerokit launch ...", "job.sbatch"))
    record = tmp_path / "record.json"
    env = {**os.environ, "PATH": f"{stub_bin}:/usr/bin:/bin", "RECORD": str(record), "SLURM_JOB_NODELIST": "gpu-[a-b]",
           "SLURM_JOB_ID": "42", "SLURM_NODEID": "0", "SLURM_SUBMIT_DIR": str(tmp_path)}
    done = subprocess.run(["bash", "job.sbatch"], env=env, capture_output=True, text=True, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(record.read_text())["env"]["MASTER_ADDR"] == "gpu-a"


def test_launch_script_execs_the_same_command(tmp_path, stub_bin, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = spec(gpus_per_node=2, script_args=HOSTILE_ARGS, env=(("NCCL_DEBUG", "$(touch PWNED5)"),))
    (tmp_path / "run.sh").write_text(render_launch_script(s, "zerokit launch ...\ntouch PWNED6"))
    record = tmp_path / "record.json"
    env = {**os.environ, "PATH": f"{stub_bin}:{os.environ['PATH']}", "RECORD": str(record)}
    subprocess.run(["bash", "run.sh"], env=env, check=True, cwd=tmp_path)
    argv, _ = build_command(s)
    got = json.loads(record.read_text())
    assert got["argv"] == argv[1:] and got["env"]["NCCL_DEBUG"] == "$(touch PWNED5)"
    assert not list(tmp_path.glob("PWNED*"))


def test_emit_sbatch_cli_writes_an_executable_file_and_starts_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = main(["launch", "--hosts", "n1,n2", "--gpus-per-node", "4", "--emit-sbatch", "job.sbatch", "train.py"])
    assert code == 0 and "sbatch job.sbatch" in capsys.readouterr().out
    mode = (tmp_path / "job.sbatch").stat().st_mode
    assert mode & stat.S_IXUSR
    subprocess.run(["bash", "-n", str(tmp_path / "job.sbatch")], check=True)


@pytest.mark.parametrize("content, message", [(None, "--hostfile hosts: no such file"),
                                              ("a slots=2\na slots=2\n", "host 'a' is listed twice")])
def test_emit_script_reads_the_hostfile_as_a_dry_run_does(tmp_path, capsys, monkeypatch, content, message):
    """The script hands the hostfile to the runner when it runs: a missing or broken one was written into it."""
    monkeypatch.chdir(tmp_path)
    if content is not None:
        (tmp_path / "hosts").write_text(content)
    code = main(["launch", "--hostfile", "hosts", "--emit-script", "run.sh", "train.py"])
    assert code == 2 and not (tmp_path / "run.sh").exists() and message in capsys.readouterr().err


def test_emit_sbatch_refuses_include_rather_than_dropping_it(tmp_path, capsys, monkeypatch):
    """The script's #SBATCH --nodelist and --num_gpus pick the ranks: --include was validated, then left out."""
    monkeypatch.chdir(tmp_path)
    code = main(["launch", "--hosts", "n1:4,n2:4", "--include", "n1:0,1", "--emit-sbatch", "job.sbatch", "train.py"])
    assert code == 2 and not (tmp_path / "job.sbatch").exists()
    assert "--include 'n1:0,1' has no place in an sbatch script" in capsys.readouterr().err


WRITES = "zerokit writes in --files-dir"


@pytest.mark.parametrize("option, target, message", [
    ("--emit-script", "train.py", "--emit-script train.py is the training script; write the script elsewhere"),
    ("--emit-sbatch", "./train.py", "--emit-sbatch ./train.py is the training script; write the sbatch elsewhere"),
    ("--emit-script", "ds.json", "--emit-script ds.json is the --config; write the script elsewhere"),
    ("--emit-script", "hosts", "--emit-script hosts is the --hostfile; write the script elsewhere"),
    ("--emit-script", ".zerokit/hostfile",
     f"--emit-script .zerokit/hostfile is the hostfile {WRITES}; write the script elsewhere"),
    ("--emit-script", ".zerokit/.deepspeed_env",
     f"--emit-script .zerokit/.deepspeed_env is the .deepspeed_env {WRITES}; write the script elsewhere"),
])
def test_an_emit_path_that_can_never_be_right_says_so_before_file_exists(tmp_path, capsys, monkeypatch, option,
                                                                          target, message):
    """`--emit-script train.py train.py` said 'file exists; pass --force to overwrite it', and only with --force
    that the path is the training script: --force was never the fix."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".zerokit").mkdir()
    for name in ("train.py", "ds.json", "hosts", ".zerokit/hostfile", ".zerokit/.deepspeed_env"):
        (tmp_path / name).write_text("mine\n")
    (tmp_path / "ds.json").write_text("{}")
    (tmp_path / "hosts").write_text("n1 slots=2\nn2 slots=2\n")
    kept = {name: (tmp_path / name).read_text() for name in ("train.py", "ds.json", "hosts", ".zerokit/hostfile")}
    for force in ([], ["--force"]):
        code = main(["launch", "--config", "ds.json", "--hostfile", "hosts", option, target, *force, "train.py"])
        captured = capsys.readouterr()
        assert code == 2 and captured.err == f"zerokit launch: error: {message}\n", captured.err
    assert {name: (tmp_path / name).read_text() for name in kept} == kept


def test_both_emits_to_one_existing_file_say_so_before_file_exists(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.sh").write_text("mine\n")
    code = main(["launch", "--hosts", "a:1,b:1", "--emit-script", "x.sh", "--emit-sbatch", "./x.sh", "train.py"])
    assert code == 2 and capsys.readouterr().err == ("zerokit launch: error: --emit-sbatch and --emit-script name the "
                                                      "same file; give each its own path\n")
    # a path that could be used, existing: --force is the fix, and says so
    code = main(["launch", "--hosts", "a:1,b:1", "--emit-script", "x.sh", "train.py"])
    assert code == 2 and capsys.readouterr().err == ("zerokit launch: error: --emit-script x.sh: file exists; pass "
                                                      "--force to overwrite it\n")
    assert (tmp_path / "x.sh").read_text() == "mine\n"


# ---------------------------------------------------------------- process handling, with real processes

def test_exit_code_of_the_job_becomes_ours(tmp_path):
    assert run([sys.executable, "-c", "raise SystemExit(7)"], {}) == 7
    assert run([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"], {}) == 128 + 15


def test_a_rank_killed_by_a_signal_is_128_plus_n_not_deepspeeds_256_minus_n(capfd):
    """DeepSpeed's launch.py ends with sys.exit(process.returncode), -9 for a SIGKILLed (OOM-killed) rank: the
    runner exited 247."""
    import inspect

    from deepspeed.launcher import launch

    assert "sys.exit(last_return_code)" in inspect.getsource(launch)
    assert run([sys.executable, "-c", "import sys; sys.exit(-9)"], {}) == 137
    assert "a rank died of SIGKILL (the kernel's OOM killer, or a kill -9) (DeepSpeed's launcher exits 247 for it); " \
           "exit 137" in capfd.readouterr().err
    assert run([sys.executable, "-c", "import sys; sys.exit(-11)"], {}) == 139


def test_missing_runner_is_bad_input():
    with pytest.raises(BadInput, match="cannot start /nonexistent/deepspeed"):
        run(["/nonexistent/deepspeed"], {})


def _wait_for(predicate, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.1)
    return False


# A stand-in runner: it starts two "ranks" that ignore SIGINT (as a stuck collective does) and waits on them.
FAKE_RUNNER = textwrap.dedent("""
    import signal, subprocess, sys, time
    marker = sys.argv[1]
    rank = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(600)"
    ranks = [subprocess.Popen([sys.executable, "-c", rank, marker]) for _ in range(2)]
    print("ranks up", flush=True)
    for r in ranks:
        r.wait()
""")


def test_sigint_reaches_the_whole_group_and_stuck_ranks_are_killed_after_the_grace(tmp_path):
    marker = f"zk-test-marker-{os.getpid()}-{time.time_ns()}"
    (tmp_path / "runner.py").write_text(FAKE_RUNNER)
    driver = (f"import sys; from zerokit.launch.runner import run; "
              f"sys.exit(run([sys.executable, {str(tmp_path / 'runner.py')!r}, {marker!r}], {{}}, grace=1.0))")
    zk = subprocess.Popen([sys.executable, "-c", driver], stdout=subprocess.PIPE, text=True)
    try:
        assert zk.stdout.readline().strip() == "ranks up"
        assert _wait_for(lambda: len(set(pids_with(marker)) - {zk.pid}) == 3, 10)  # runner + 2 ranks
        zk.send_signal(signal.SIGINT)
        assert zk.wait(timeout=15) == 128 + signal.SIGINT
        assert _wait_for(lambda: not pids_with(marker), 5), f"left behind: {pids_with(marker)}"
    finally:
        zk.kill()
        for pid in pids_with(marker):
            os.kill(pid, signal.SIGKILL)


def test_processes_that_outlive_the_runner_are_stopped(tmp_path):
    marker = f"zk-orphan-marker-{os.getpid()}-{time.time_ns()}"
    orphan = f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', {marker!r}])"
    try:
        assert run([sys.executable, "-c", orphan], {}, grace=2.0) == 0
        assert not pids_with(marker)
    finally:
        for pid in pids_with(marker):
            os.kill(pid, signal.SIGKILL)


def test_ctrl_c_on_a_one_node_launch_stops_it_through_deepspeeds_launcher_without_tracebacks(tmp_path):
    """SIGINT went to the whole group: DeepSpeed's runner, which has no handler on the one-node path, printed a
    KeyboardInterrupt traceback from result.wait() and exited at once (the ranks printed theirs), and zerokit then
    said "processes of the job outlived the runner" of launch.py, still stopping the ranks. DeepSpeed's launch.py
    handles SIGINT and SIGTERM alike (terminate_process_tree of each rank, then exit), so it gets the signal alone."""
    pytest.importorskip("deepspeed")
    marker = f"zk-ctrl-c-{os.getpid()}-{time.time_ns()}"
    # one write(2) a rank, and counted anywhere in the text: the two ranks share the pipe, and two prints interleaved
    # as "rank uprank up" once (CI, 2026-12-07), which a line count missed until the ranks' sleep ended
    (tmp_path / "sleeper.py").write_text("import os, time\nos.write(1, b'rank up\\n')\ntime.sleep(120)\n")
    # SIGINT at its default, as from a terminal (a job started in the background inherits it ignored)
    as_from_a_terminal = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                          "os.execv(sys.executable, [sys.executable, '-m', 'zerokit', *sys.argv[1:]])")
    argv = [sys.executable, "-c", as_from_a_terminal, "launch", "--no-preflight", "--gpus-per-node", "2",
            "--master-port", str(free_port()), "sleeper.py", marker]
    zk = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        seen = ""
        for line in zk.stdout:
            seen += line
            if seen.count("rank up") == 2:
                break
        assert seen.count("rank up") == 2, seen[-3000:]
        # zerokit, the runner, DeepSpeed's launch.py and the two ranks
        assert _wait_for(lambda: len(pids_with(marker)) == 5, 10), pids_with(marker)
        zk.send_signal(signal.SIGINT)
        seen += zk.stdout.read()
        assert zk.wait(timeout=60) == 128 + signal.SIGINT
        assert "Traceback" not in seen and "KeyboardInterrupt" not in seen and "outlived" not in seen, seen[-3000:]
        assert _wait_for(lambda: not pids_with(marker), 5), f"left behind: {pids_with(marker)}"
    finally:
        zk.kill()
        for pid in pids_with(marker):
            os.kill(pid, signal.SIGKILL)


def test_a_missing_script_on_one_node_is_bad_input(capsys, tmp_path):
    code = main(["launch", "--gpus-per-node", "2", "--dry-run", str(tmp_path / "nope.py")])
    assert code == 2
    assert capsys.readouterr().err == f"zerokit launch: error: script {tmp_path / 'nope.py'}: no such file (on one " \
                                      "node the script must exist here)\n"


def test_a_finished_jobs_shm_buffers_are_removed_and_no_others(tmp_path):
    """DeepSpeed's CPU accelerator leaves `deepspeed_allreduce_buffer_{uid}_{addr}_{port}_{rank}` in /dev/shm; launch
    removes its own job's (by master port) once the ranks are gone, and nothing else."""
    from zerokit.launch.runner import remove_shm_buffers

    uid = os.getuid()
    ours = [f"deepspeed_allreduce_buffer_{uid}_127.0.0.1_29511_{r}" for r in (0, 1)]
    others = [f"deepspeed_allreduce_buffer_{uid}_127.0.0.1_29512_0", f"deepspeed_allreduce_buffer_{uid + 1}_x_29511_0",
              "deepspeed_allreduce_buffer_x", "unrelated_29511_0"]
    for name in ours + others:
        (tmp_path / name).write_bytes(b"")
    assert remove_shm_buffers(29511, str(tmp_path)) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(others)
    assert remove_shm_buffers(29511, str(tmp_path / "missing")) == 0


def test_what_the_job_reads_is_checked_in_a_dry_run_too(capsys, tmp_path, monkeypatch):
    """A config that is no JSON object, a --plan that is not a plan, a --files-dir that is a file and a script that
    is a directory failed only when the job started (or never: the plan's checks were silently skipped)."""
    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text("")
    Path("list.json").write_text("[1]")
    Path("cfg.json").write_text("{}")
    Path("sdir").mkdir()
    not_a_plan = "--plan cfg.json is not `zerokit plan --format json` output (no memory, hardware)"
    for argv, message in ((["--config", "list.json", "train.py"], "--config list.json: top level is a list;"),
                          (["--plan", "cfg.json", "train.py"], not_a_plan),
                          (["--files-dir", "train.py", "train.py"], "--files-dir train.py exists and is not a directory"),
                          (["sdir"], "script sdir: is a directory, not a regular file")):
        code = main(["launch", "--gpus-per-node", "1", "--dry-run", *argv])
        err = capsys.readouterr().err
        assert code == 2 and message in err and err.count("\n") == 1, err
    assert main(["launch", "--gpus-per-node", "1", "--config", "cfg.json", "--dry-run", "train.py"]) == 0


@pytest.mark.parametrize(("limit", "ok"), [("::", False), ("-", False), ("1-", False), ("1:2:3:4", False),
                                           ("-1", False), ("90", True), ("02:00:00", True), ("1-12", True),
                                           ("1-00:00:00", True), ("UNLIMITED", True)])
def test_time_limits_are_sbatchs_formats(capsys, tmp_path, monkeypatch, limit, ok):
    monkeypatch.chdir(tmp_path)
    code = main(["launch", "--hosts", "node1,node2", "--gpus-per-node", "8", "--emit-sbatch", "job.sbatch",
                 "--dry-run", "--time", limit, "train.py"])
    out, err = capsys.readouterr()
    assert code == (0 if ok else 2), err
    assert (f"#SBATCH --time={limit}" in out) if ok else "write it as SLURM does" in err


def test_time_without_an_sbatch_is_refused(capsys):
    assert main(["launch", "--gpus-per-node", "1", "--dry-run", "--time", "04:00:00", "train.py"]) == 2
    assert "--time is the SLURM time limit of --emit-sbatch" in capsys.readouterr().err


def test_host_lists_stop_at_4096_hosts(tmp_path):
    from zerokit.launch.hostfile import MAX_HOSTS, parse_hostfile, parse_hosts

    lines = "".join(f"node{i} slots=8\n" for i in range(MAX_HOSTS + 1))
    with pytest.raises(BadInput, match=f"hostfile:{MAX_HOSTS + 1}: more than 4096 hosts"):
        parse_hostfile(lines)
    assert len(parse_hostfile(lines.rsplit("node", 1)[0])) == MAX_HOSTS
    with pytest.raises(BadInput, match="--hosts: more than 4096 hosts"):
        parse_hosts(",".join(f"n{i}:1" for i in range(MAX_HOSTS + 1)), None)


def test_hostfile_messages_say_what_is_wrong():
    from zerokit.launch.hostfile import parse_hostfile

    with pytest.raises(BadInput, match="starts with a UTF-8 byte-order mark"):
        parse_hostfile("\ufefflocalhost slots=2\n")
    with pytest.raises(BadInput, match=r"no spaces around '='"):
        parse_hostfile("localhost slots = 2\n")
    with pytest.raises(BadInput, match=r"expected 'HOST slots=N', got 'a b slots=2'$"):  # no hint about spaces
        parse_hostfile("a b slots=2\n")


# ---------------------------------------------------------------- a config lint refuses, launch refuses too

@pytest.mark.parametrize("content, reason", [
    ("", "empty file: a ds_config is a JSON object"),
    (" \n\t\n", "empty file: a ds_config is a JSON object"),
    ('{"train_batch_size": 8,,}', "syntax error: "),
    ("[1, 2]", "top level is a list; a ds_config must be a JSON object"),
    ('"zero"', "top level is a string; a ds_config must be a JSON object"),
])
def test_a_config_lint_refuses_is_refused_by_launch_dry_run(capsys, tmp_path, monkeypatch, content, reason):
    """An empty or whitespace-only file started the job (exit 0): the ranks then failed in DeepSpeed or HF. The
    reasons are lint's loader's, so `zerokit lint` and `zerokit launch` say the same of the same file."""
    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text("")
    Path("cfg.json").write_text(content)
    code = main(["launch", "--gpus-per-node", "1", "--dry-run", "--config", "cfg.json", "train.py"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"zerokit launch: error: --config cfg.json: {reason}")
    assert err.rstrip().endswith("fix the file, or write one with `zerokit plan ... -o ds_config.json`")
    assert main(["lint", "cfg.json"]) == 2 and reason in capsys.readouterr().out


def test_a_syntax_error_names_its_line_and_column(capsys, tmp_path):
    cfg = tmp_path / "cfg.json"
    cfg.write_text('{\n  "train_batch_size": 8,\n  "gradient_clipping": }\n')  # no value: HJSON refuses it too
    (tmp_path / "train.py").write_text("")
    assert main(["launch", "--gpus-per-node", "1", "--dry-run", "--config", str(cfg), str(tmp_path / "train.py")]) == 2
    assert "syntax error: Expecting value (line 3, column 24);" in capsys.readouterr().err


# ---------------------------------------------------------------- --include: DeepSpeed's resource filter

@pytest.mark.parametrize("value, message", [
    ("localhost:a", "slot 'a' of localhost is not a whole number"),
    ("localhost:", "slot '' of localhost is not a whole number"),
    ("localhost:0,", "slot '' of localhost is not a whole number"),
    ("localhost:-1", "slot '-1' of localhost is not a whole number"),
    ("localhost:1.5", "slot '1.5' of localhost is not a whole number"),
    ("localhost: 1", "slot ' 1' of localhost is not a whole number"),
    ("localhost:0:1", "slot '0:1' of localhost is not a whole number"),
    ("localhost:99999", "slot '99999' of localhost is not a whole number from 0 to 4095"),
    ("@localhost", "a node without a host name"),
    ("localhost@", "a node without a host name"),
    (":0", "a node without a host name"),
    ("", "--include is empty"),
    ("a;id:0", "host 'a;id' is not a valid hostname"),
])
def test_include_is_checked_against_deepspeeds_grammar(capsys, tmp_path, value, message):
    """`localhost:a` reached the runner, whose int() then raised a traceback on every launch."""
    (tmp_path / "train.py").write_text("")
    code = main(["launch", "--dry-run", "--include", value, str(tmp_path / "train.py")])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1, err
    assert err.rstrip().endswith("write it like localhost:0,1 or worker-0@worker-1:0,2") or "is empty" in err


@pytest.mark.parametrize("value", ["localhost", "localhost:0", "localhost:0,1", "worker-0@worker-1:0,2",
                                   "worker-1:3,1@worker-0", "10.0.0.1:0"])
def test_include_values_deepspeed_reads_pass_unchanged(value, tmp_path):
    runner = pytest.importorskip("deepspeed.launcher.runner")
    # other hosts than this one need the job's hosts (on one node DeepSpeed knows 'localhost' alone)
    hosts = () if value.startswith("localhost") else (("worker-0", 4), ("worker-1", 4), ("10.0.0.1", 2))
    argv, _ = build_command(spec(include=value, hosts=hosts, files_dir=str(tmp_path)))
    at = argv.index("--include")
    assert argv[at:at + 2] == ["--include", value]
    assert runner.parse_args(argv[1:]).include == value
    runner.parse_node_config_list(value)  # DeepSpeed's own parser takes it


@pytest.mark.parametrize("value", ["node7", "node7:0", "localhost:0@node7"])
def test_one_node_filters_name_this_machine_alone(value, tmp_path):
    """Without a hostfile DeepSpeed's pool is {"localhost": devices}: `--include node7` passed the preflight, then
    raised "Hostname 'node7' not found in hostfile" (a traceback, exit 1)."""
    runner = pytest.importorskip("deepspeed.launcher.runner")
    with pytest.raises(ValueError, match="not found in hostfile"):
        runner.parse_inclusion_exclusion({"localhost": 2}, value, "")
    with pytest.raises(BadInput, match=r"on one node \(no --hostfile or --hosts\) DeepSpeed's only host is this "
                                       r"machine, 'localhost', not node7"):
        build_command(spec(include=value))
    with pytest.raises(BadInput, match="not node7"):
        build_command(spec(exclude=value))
    argv, _ = build_command(spec(include=f"{socket.gethostname()}:0"))  # this machine by its name: localhost
    assert argv[argv.index("--include") + 1] == "localhost:0"


def test_hosts_localhost_n_with_a_filter_keeps_its_n_slots():
    """`--hosts localhost:4 --exclude localhost:3` passed --exclude alone, so DeepSpeed filtered its own device count
    (1 on this CPU: "No slot '3'"; 8 on an 8-GPU node: 7 ranks, where the preflight counted 3)."""
    argv, _ = build_command(spec(hosts=(("localhost", 4),), exclude="localhost:3"))
    assert argv[1:3] == ["--num_gpus", "3"] and "--exclude" not in argv
    argv, _ = build_command(spec(hosts=(("localhost", 4),), exclude="localhost:1"))
    assert argv[1:3] == ["--include", "localhost:0,2,3"]
    argv, _ = build_command(spec(hosts=(("localhost", 4),), include="localhost:2,3"))
    assert argv[1:3] == ["--include", "localhost:2,3"]
    with pytest.raises(BadInput, match=r"DeepSpeed counts 1 device on this machine \(slots 0 to 0\), not slot 2"):
        check_include_devices(spec(hosts=(("localhost", 4),), exclude="localhost:1"), 1)
    with pytest.raises(BadInput, match="leaves none of the 1 device DeepSpeed counts"):
        check_include_devices(spec(exclude="localhost:0"), 1)


def test_include_names_the_jobs_hosts_and_their_slots():
    hosts = (("node1", 2), ("node2", 2))
    assert build_command(spec(hosts=hosts, include="node2:1@node1"))[0][6:8] == ["--include", "node2:1@node1"]
    with pytest.raises(BadInput, match=r"^--include 'node3:0': host node3 is not one of the job's hosts \(node1, "
                                       r"node2\); DeepSpeed refuses it$"):
        build_command(spec(hosts=hosts, include="node3:0"))
    with pytest.raises(BadInput, match=r"^--include 'node1:2': node1 has 2 slots \(0 to 1\), not slot 2$"):
        build_command(spec(hosts=hosts, include="node1:2"))


# ---------------------------------------------------------------- one line, whatever the path holds

@pytest.mark.parametrize("argv, fragment", [
    (["--config", "/tmp/no\nsuch", "train.py"], "--config /tmp/no\\nsuch: no such file"),
    (["no\nsuch.py"], "script no\\nsuch.py: no such file"),
    (["--plan", "/tmp/no\nsuch", "train.py"], "--plan /tmp/no\\nsuch: no such file"),
])
def test_a_newline_in_a_path_stays_escaped_on_the_one_error_line(capsys, argv, fragment):
    code = main(["launch", "--gpus-per-node", "1", "--dry-run", *argv])
    err = capsys.readouterr().err
    assert code == 2 and fragment in err and err.count("\n") == 1, err


def test_stale_shm_buffers_of_the_port_go_before_the_job_starts_and_mapped_ones_stay(tmp_path):
    """A buffer left by a killed job (or a bare `deepspeed` run) goes before the next job on its port starts, rather
    than hand that job the old bytes (shm.cpp maps another rank's buffer as soon as the name exists); one some
    process maps is a job running now, and stays."""
    import mmap

    from zerokit.launch.runner import SHM_DIR, remove_stale_shm_buffers

    uid = os.getuid()
    stale, live, other = (tmp_path / f"deepspeed_allreduce_buffer_{uid}_127.0.0.1_{port}_{rank}"
                          for port, rank in ((29513, 0), (29513, 1), (29514, 0)))
    for path in (stale, live, other):
        path.write_bytes(b"\0" * 4096)
    with open(live, "r+b") as f, mmap.mmap(f.fileno(), 4096):
        assert remove_stale_shm_buffers(29513, str(tmp_path)) == 1
        assert not stale.exists() and live.exists() and other.exists()
    assert remove_stale_shm_buffers(29513, str(tmp_path)) == 1 and not live.exists() and other.exists()
    # zerokit launch's run() sweeps its port before it starts the runner
    port = free_port()
    left = os.path.join(SHM_DIR, f"deepspeed_allreduce_buffer_{uid}_127.0.0.1_{port}_0")
    with open(left, "wb") as f:
        f.write(b"\0" * 64)
    try:
        assert run(["sh", "-c", f"test ! -e {shlex.quote(left)}"], {}, master_port=port) == 0
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(left)


@pytest.mark.parametrize("kw", [{"include": "node2"}, {"exclude": "node1"}, {"nodes": 1},
                                {"hosts": (("node1", 2),)}])
def test_a_job_left_with_one_remote_host_runs_there_not_here(tmp_path, monkeypatch, kw):
    """DeepSpeed launches a lone host on its local path (runner.py: multi_node_exec = force_multi or more than one
    host), so `--include node2` started the ranks on this machine: --force_multi keeps the launcher."""
    import signal

    runner = pytest.importorskip("deepspeed.launcher.runner")
    s = spec(**{"hosts": (("node1", 2), ("node2", 2)), "master_addr": "10.9.9.9", "files_dir": str(tmp_path), **kw})
    argv, _ = build_command(s)
    for path, text in render_files(s).items():
        Path(path).write_text(text)
    started = []

    class Started:
        returncode = 0

        def __init__(self, cmd, env=None):
            started.append(cmd)

        def wait(self):
            return 0

    monkeypatch.setattr(runner.subprocess, "check_call", lambda *a, **k: 0)  # the ssh check
    monkeypatch.setattr(runner.subprocess, "Popen", Started)
    monkeypatch.setattr(runner.PDSHRunner, "backend_exists", lambda self: True)
    previous = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        runner.main(argv[1:])
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])
    assert started and started[0][0] == "pdsh", started


@pytest.mark.parametrize("kw", [{"script_args": ("--out", "run_%u")}, {"env": (("TAG", "%h"),)},
                                {"script_args": ("--rate", "100%%")}])
def test_pdsh_would_rewrite_a_percent_sign_so_it_is_refused(kw, tmp_path):
    """pdsh replaced `--out run_%n` by run_0 / run_1 on the nodes (and %h, %u, %%): the job would differ from the
    command zerokit printed."""
    with pytest.raises(BadInput, match="has a '%': pdsh replaces %n"):
        build_command(spec(hosts=(("node1", 2), ("node2", 2)), files_dir=str(tmp_path), **kw))
    build_command(spec(hosts=(("node1", 2), ("node2", 2)), launcher="openmpi", files_dir=str(tmp_path), **kw))
    build_command(spec(gpus_per_node=2, **kw))  # one node: no pdsh


def test_a_slurm_job_says_srun_places_the_ranks_on_the_allocation():
    """DeepSpeed's SlurmRunner gives srun `-n TOTAL` and a --nodelist only with --include/--exclude."""
    import inspect

    from deepspeed.launcher.multinode_runner import SlurmRunner

    from zerokit.launch.runner import notes

    source = inspect.getsource(SlurmRunner.get_cmd)
    assert "'--nodelist'" in source and 'if self.args.include != "" or self.args.exclude != "":' in source
    said = notes(spec(hosts=(("node1", 2), ("node2", 2)), launcher="slurm"))
    assert any("srun places the ranks on the nodes of the SLURM allocation" in n for n in said)
    assert not any("srun places" in n for n in notes(spec(hosts=(("node1", 2), ("node2", 2)))))


def test_a_one_node_launch_is_not_taken_over_by_deepspeeds_default_hostfile(tmp_path, monkeypatch):
    """Without --hostfile DeepSpeed reads /job/hostfile where it exists, and a one-node `--gpus-per-node 2` became
    `pdsh -w nodeA,nodeB ...`: zerokit points it at /dev/null, which the runner reads as no hostfile."""
    from deepspeed.launcher import runner as ds_runner

    from zerokit.launch import runner

    assert ds_runner.DLTS_HOSTFILE == runner.DEEPSPEED_DEFAULT_HOSTFILE
    default = tmp_path / "hostfile"
    default.write_text("nodeA slots=2\nnodeB slots=2\n")
    monkeypatch.setattr(runner, "DEEPSPEED_DEFAULT_HOSTFILE", str(default))
    argv, _ = build_command(spec(gpus_per_node=2))
    assert argv[1:3] == ["--hostfile", os.devnull]
    assert ds_runner.fetch_hostfile(os.devnull) is None  # the machine's own devices
    assert "--hostfile" not in build_command(spec(gpus_per_node=2, hosts=(("nodeA", 2), ("nodeB", 2)),
                                                  files_dir=str(tmp_path)))[0][3:]
    monkeypatch.setattr(runner, "DEEPSPEED_DEFAULT_HOSTFILE", str(tmp_path / "none"))
    assert "--hostfile" not in build_command(spec(gpus_per_node=2))[0]


PDSH_SAFE_ARGS = ["my run", "/tmp/x~y", "say \"hi\" now", "it's ok", "a!b c", "a\tb c",
                  "x~", "--out=a~b"]
PDSH_UNSAFE_ARGS = ["a $(id) b", "a `id` b", "a\\\"b c", "~/x", "x=~/q", "x=a:~/q", "a\tb", "a\nb c", "$HOME", ""]


@pytest.mark.parametrize("arg", PDSH_SAFE_ARGS)
def test_pdsh_takes_script_arguments_deepspeeds_quoting_keeps_intact(arg, tmp_path):
    """`train.py --run_name "my run"` was refused ("characters a remote shell would interpret"), though DeepSpeed's
    PDSHRunner.parse_user_args wraps an argument with a space in double quotes, escaping its '"'; and a '~' inside a
    word is not expanded. Each is checked here as the nodes' shells read it: DeepSpeed's own quoting, then bash and
    sh parsing the words as pdsh's ssh hands them over."""
    import subprocess

    argv, _ = build_command(spec(hosts=(("node1", 1), ("node2", 1)), script_args=("--name", arg),
                                 files_dir=str(tmp_path)))
    assert argv[-4:-2] == ["--name", arg]
    runner = pytest.importorskip("deepspeed.launcher.runner")
    from deepspeed.launcher.multinode_runner import PDSHRunner

    words = PDSHRunner(runner.parse_args(["train.py", arg]), "").parse_user_args()
    for shell in ("bash", "sh"):
        out = subprocess.run([shell, "-c", "printf '%s\\n' " + " ".join(words)], capture_output=True, text=True,
                             check=True, env={"HOME": "/home/zk"}).stdout
        assert out == arg + "\n", (shell, words)


@pytest.mark.parametrize("arg", PDSH_UNSAFE_ARGS)
def test_pdsh_still_refuses_what_deepspeeds_quoting_leaves_to_the_shell(arg, tmp_path):
    with pytest.raises(BadInput, match="a remote shell would interpret|would vanish on the nodes"):
        build_command(spec(hosts=(("node1", 1), ("node2", 1)), script_args=("--name", arg), files_dir=str(tmp_path)))


def test_a_name_the_hosts_file_maps_to_this_machine_is_this_machine(tmp_path):
    """A cluster often names its nodes in /etc/hosts: a job whose hostfile says `node-a`, this machine there, was
    taken to run elsewhere (preflight then left this machine's device checks unchecked). The file is read, DNS never
    asked; an address a socket here cannot bind is another machine's."""
    from zerokit.launch.runner import is_this_machine

    hosts = tmp_path / "hosts"
    hosts.write_text("# the cluster\n127.0.0.1 localhost\n127.0.1.7 node-a node-a.cluster  # this machine\n"
                     "192.0.2.55 node-b\nfe80::1%eth0 node-c\nnot-an-address node-d\n\n")
    assert is_this_machine("node-a", str(hosts)) and is_this_machine("node-a.cluster", str(hosts))
    assert not any(is_this_machine(name, str(hosts)) for name in ("node-b", "node-d", "node-z", "#", "cluster"))
    assert not is_this_machine("node-a", str(tmp_path / "missing"))
    assert is_this_machine("127.0.0.3") and not is_this_machine("192.0.2.55")
    hosts.write_text("127.0.1.8 node-b\n")  # read once while unchanged; an edited file is read again
    assert is_this_machine("node-b", str(hosts)) and not is_this_machine("node-a", str(hosts))


@pytest.mark.parametrize("name", ["hostfile", ".deepspeed_env"])
def test_a_job_file_that_is_no_regular_file_stops_the_launch_before_its_preflight(capsys, tmp_path, monkeypatch, name):
    """A directory (or a FIFO) where launch writes the job's hostfile or .deepspeed_env failed after the preflight,
    saying "is a directory; give a file name such as .zerokit/hostfile/ds_config.json", a file --files-dir cannot
    name. It is one line before the checks, with the fix."""
    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text("")
    Path(".zerokit").mkdir()
    if name == "hostfile":
        Path(".zerokit", name).mkdir()
    else:
        os.mkfifo(Path(".zerokit", name))
    code = main(["launch", "--hosts", "node1:2,node2:2", "--env", "A=1", "--master-port", str(free_port()),
                 "train.py"])
    err = capsys.readouterr().err
    assert code == 2 and "preflight" not in err, err
    assert err == (f"zerokit launch: error: --files-dir .zerokit: {tmp_path / '.zerokit' / name} is not a regular "
                   f"file, where zerokit writes the job's {name}; remove it, or give another --files-dir\n")


@pytest.mark.parametrize("hosts", [["--gpus-per-node", "2"], ["--hosts", "localhost:2"]])
def test_a_master_addr_on_one_node_is_named_as_left_out(capsys, tmp_path, monkeypatch, hosts):
    """DeepSpeed's runner sets 127.0.0.1 on its one-node path, and zerokit left --master-addr out without a word,
    where it refuses or names the options that do nothing elsewhere."""
    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text("")
    code = main(["launch", *hosts, "--master-addr", "10.0.0.5", "--dry-run", "train.py"])
    out, err = capsys.readouterr()
    assert code == 0 and "--master_addr" not in out
    assert ("zerokit launch: warning: --master-addr 10.0.0.5 has no effect on one node: DeepSpeed's runner sets "
            "127.0.0.1 there, so zerokit leaves it out (it matters to jobs on other hosts, and to --no-ssh)\n") in err
    code = main(["launch", "--hosts", "node1:2,node2:2", "--master-addr", "node1", "--dry-run", "train.py"])
    assert code == 0 and "has no effect" not in capsys.readouterr().err

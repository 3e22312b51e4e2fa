"""The launch review's findings: an unknown option in the script's place, --exclude, the user's own .deepspeed_env
under --env, hostfiles DeepSpeed accepts, and --master-addr's default."""

from __future__ import annotations

import re
import subprocess

import pytest

from zerokit.cli import main
from zerokit.errors import BadInput
from zerokit.launch.hostfile import parse_hostfile
from zerokit.launch.runner import LaunchSpec, build_command, render_files

TWO_NODES = ["--hosts", "node1:8,node2:8", "--master-addr", "node1"]


def spec(**kw) -> LaunchSpec:
    return LaunchSpec(**{"script": "train.py", "config": "/cfg/ds.json", "runner": "deepspeed", **kw})


@pytest.mark.parametrize("words, meant", [
    (["--exclude-node", "node2", "--dry-run"], "--exclude"),
    (["--frobnicate"], None),
    (["--num-gpus", "2"], "--gpus-per-node"),
    (["--num_gpus=2"], "--gpus-per-node"),
    (["--master_port", "29501"], "--master-port"),
    (["--dryrun"], "--dry-run"),
    (["-H", "hosts"], "--hostfile"),  # DeepSpeed's runner's
    (["--nnodes", "2"], "--nodes"),  # torchrun's
])
def test_an_unknown_option_before_the_script_is_bad_input_not_the_script(capsys, tmp_path, monkeypatch, words,
                                                                          meant):
    """It took the script's place and everything after it (--dry-run included) went to the script: a dry run became a
    real launch (exit 3 from the preflight), or `script --num-gpus: no such file`."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    code = main(["launch", *TWO_NODES, *words, "--dry-run", "train.py"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == "" and captured.err.count("\n") == 1, captured
    assert f"unknown option {words[0].split('=')[0]!r}" in captured.err
    assert (f"did you mean {meant}?" in captured.err) if meant else "see 'zerokit launch --help'" in captured.err
    assert "the script's own arguments after it" in captured.err
    assert not (tmp_path / ".zerokit").exists()


def test_exclude_reaches_the_runner_and_deepspeed_reads_it(capsys, tmp_path, monkeypatch):
    runner = pytest.importorskip("deepspeed.launcher.runner")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    code = main(["launch", "--config", "ds.json", *TWO_NODES, "--exclude", "node2", "--dry-run", "train.py"]) \
        if (tmp_path / "ds.json").write_text("{}") else None
    out = capsys.readouterr().out
    assert code == 0 and "--exclude node2 --master_port 29500 train.py" in out, out
    argv, _ = build_command(spec(hosts=(("node1", 2), ("node2", 2)), exclude="node1:1@node2"))
    args = runner.parse_args(argv[1:])
    assert (args.exclude, args.include) == ("node1:1@node2", "")
    assert runner.parse_inclusion_exclusion({"node1": 2, "node2": 2}, args.include, args.exclude) == {"node1": [0]}


@pytest.mark.parametrize("kw, message", [
    ({"include": "node1", "exclude": "node2"}, "give either --include or --exclude, not both"),
    ({"exclude": "node2", "gpus_per_node": 2}, "--exclude picks the ranks itself"),
    ({"exclude": "node3"}, "--exclude 'node3': host node3 is not one of the job's hosts"),
    ({"exclude": "node1:2"}, "--exclude 'node1:2': node1 has 2 slots (0 to 1), not slot 2"),
    ({"exclude": "node1:x"}, "--exclude 'node1:x': slot 'x' of node1 is not a whole number"),
    ({"exclude": "node1@node2:0,1"}, "--exclude 'node1@node2:0,1' leaves no rank to run"),
])
def test_exclude_is_checked_as_include_is(kw, message):
    with pytest.raises(BadInput, match=re.escape(message)):
        build_command(spec(hosts=(("node1", 2), ("node2", 2)), **kw))


def _home_and_work(tmp_path, monkeypatch) -> tuple:
    """(home, work): new directories, HOME the one, the working directory the other, no DS_ENV_FILE: where
    DeepSpeed's runner looks for the user's own .deepspeed_env (~ then .)."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("DS_ENV_FILE", raising=False)
    monkeypatch.chdir(work)
    return home, work


def test_env_file_keeps_the_users_own_deepspeed_env_files(tmp_path, monkeypatch):
    """zerokit's DS_ENV_FILE is absolute, so DeepSpeed's join with ~ and . gave zerokit's file twice and the user's
    ~/.deepspeed_env and ./.deepspeed_env were no longer read."""
    home, work = _home_and_work(tmp_path, monkeypatch)
    (home / ".deepspeed_env").write_text("NCCL_IB_DISABLE=1\nWANDB_PROJECT = home \nNCCL_DEBUG=WARN\n")
    (work / ".deepspeed_env").write_text("WANDB_PROJECT=work\nHF_HOME=/data/hf")  # no final newline
    s = spec(hosts=(("node1", 8), ("node2", 8)), env=(("NCCL_DEBUG", "INFO"),), files_dir=str(tmp_path / "zk"))
    written = render_files(s)[str(tmp_path / "zk" / ".deepspeed_env")]
    assert written == "NCCL_IB_DISABLE=1\nWANDB_PROJECT=work\nNCCL_DEBUG=INFO\nHF_HOME=/data/hf\n"

    # DeepSpeed's runner reads what zerokit wrote, as it read the user's files before
    runner = pytest.importorskip("deepspeed.launcher.runner")
    env_file = tmp_path / "zk" / ".deepspeed_env"
    env_file.parent.mkdir()
    env_file.write_text(written)
    from deepspeed.launcher.multinode_runner import PDSHRunner

    pdsh = PDSHRunner(runner.parse_args(["train.py"]), "")
    for line in env_file.read_text().splitlines(keepends=True):
        key, val = line.split("=", maxsplit=1)
        pdsh.add_export(key, val)
    assert pdsh.exports == {"NCCL_IB_DISABLE": "1", "WANDB_PROJECT": "work", "NCCL_DEBUG": "INFO",
                            "HF_HOME": "/data/hf"}

    # the user's own DS_ENV_FILE name is the one DeepSpeed would have read
    (home / "cluster.env").write_text("FROM_NAMED=1\n")
    monkeypatch.setenv("DS_ENV_FILE", "cluster.env")
    assert render_files(s)[str(env_file)] == "FROM_NAMED=1\nNCCL_DEBUG=INFO\n"

    # a line DeepSpeed's `key, val = var.split('=', maxsplit=1)` fails on is refused, naming it
    monkeypatch.delenv("DS_ENV_FILE")
    (work / ".deepspeed_env").write_text("A=1\n\n")
    with pytest.raises(BadInput, match=r"^\./\.deepspeed_env:2: expected KEY=VALUE"):
        render_files(s)


def test_the_users_secrets_stay_private_the_launch_writes_0600_and_a_script_reads_them_when_it_runs(
        capsys, tmp_path, monkeypatch):
    """The merged env file may carry the user's tokens: the launch writes it readable by the user alone (even over
    a 0644 one), and --emit-script, whose file is 0755, reads the user's files when it runs instead of copying them."""
    import os
    import stat
    import subprocess

    home, work = _home_and_work(tmp_path, monkeypatch)
    (home / ".deepspeed_env").write_text("SECRET_TOKEN=hush\nNCCL_DEBUG=WARN")  # no final newline
    (work / "ds.json").write_text("{}")
    (work / "train.py").write_text("")
    args = ["launch", "--config", "ds.json", *TWO_NODES, "--env", "NCCL_DEBUG=INFO"]
    assert main([*args, "--emit-script", "run.sh", "train.py"]) == 0
    script = (work / "run.sh").read_text()
    assert "hush" not in script and "SECRET_TOKEN" not in script
    lines = script.splitlines()
    lines[-1] = "true"  # everything but the runner itself
    (work / "run.sh").write_text("\n".join(lines) + "\n")
    subprocess.run(["bash", str(work / "run.sh")], check=True, env={**os.environ, "HOME": str(home)})
    env_file = work / ".zerokit" / ".deepspeed_env"
    assert env_file.read_text() == "SECRET_TOKEN=hush\nNCCL_DEBUG=WARN\nNCCL_DEBUG=INFO\n"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    os.chmod(env_file, 0o644)  # the launch's own write replaces a world-readable one with a private one
    from zerokit.fileio import write_atomic
    from zerokit.launch.runner import render_files as files_of

    s = spec(hosts=(("node1", 8), ("node2", 8)), env=(("NCCL_DEBUG", "INFO"),), files_dir=str(work / ".zerokit"))
    text = files_of(s)[str(env_file)]
    assert "SECRET_TOKEN=hush" in text
    write_atomic(str(env_file), text, "--files-dir", force=True, mode=0o600, keep_mode=False)
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600


def test_a_script_reads_an_absolute_ds_env_file_as_deepspeed_and_the_launch_do(tmp_path, monkeypatch):
    """DeepSpeed joins DS_ENV_FILE to ~ and . with os.path.join, so an absolute one is read as it is (and so does the
    launch, `users_deepspeed_env`); --emit-script's "$HOME/$DS_ENV_FILE" named no file, and its ranks lost them."""
    import os
    import subprocess

    runner = pytest.importorskip("deepspeed.launcher.runner")
    from deepspeed.launcher.multinode_runner import PDSHRunner

    home, work, own = tmp_path / "home", tmp_path / "work", tmp_path / "cluster.env"
    home.mkdir()
    work.mkdir()
    own.write_text("WANDB_PROJECT=abs\nNCCL_DEBUG=WARN\n")
    assert os.path.join(str(home), str(own)) == os.path.join(".", str(own)) == str(own)  # DeepSpeed's two paths
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("DS_ENV_FILE", str(own))
    monkeypatch.chdir(work)
    (work / "ds.json").write_text("{}")
    assert main(["launch", "--config", "ds.json", *TWO_NODES, "--env", "NCCL_DEBUG=INFO", "--emit-script", "run.sh",
                 "train.py"]) == 0
    lines = (work / "run.sh").read_text().splitlines()
    lines[-1] = "true"  # everything but the runner itself
    (work / "run.sh").write_text("\n".join(lines) + "\n")
    subprocess.run(["bash", str(work / "run.sh")], check=True, env={**os.environ})
    s = spec(hosts=(("node1", 8), ("node2", 8)), env=(("NCCL_DEBUG", "INFO"),), files_dir=str(work / ".zerokit"))
    launched = render_files(s)[s.env_file]

    def exports(text: str) -> dict[str, str]:  # what DeepSpeed's runner makes of the file, line by line
        pdsh = PDSHRunner(runner.parse_args(["train.py"]), "")
        for line in text.splitlines(keepends=True):
            key, val = line.split("=", maxsplit=1)
            pdsh.add_export(key, val)
        return pdsh.exports

    expected = {"WANDB_PROJECT": "abs", "NCCL_DEBUG": "INFO"}
    assert exports(launched) == exports((work / ".zerokit" / ".deepspeed_env").read_text()) == expected


@pytest.mark.parametrize("line, hosts", [
    ("node1 slots=4 max_slots=4", {"node1": 4}),
    ("node_1 slots=4", {"node_1": 4}),
    ("node1 slots=4 # the big one", {"node1": 4}),
    ("  # a comment", None),
])
def test_hostfile_lines_deepspeed_accepts_are_accepted(line, hosts):
    runner = pytest.importorskip("deepspeed.launcher.runner")
    text = f"node0 slots=2\n{line}\n"
    assert runner._parse_hostfile(text.splitlines()) == {"node0": 2, **(hosts or {})}
    assert parse_hostfile(text) == {"node0": 2, **(hosts or {})}


def test_a_slot_count_deepspeed_would_cut_short_is_refused():
    """`slots=1.5`: DeepSpeed's regex reads the digits before the dot, one slot, without a word."""
    runner = pytest.importorskip("deepspeed.launcher.runner")
    assert runner._parse_hostfile(["node1 slots=1.5\n"]) == {"node1": 1}
    with pytest.raises(BadInput, match=r"hostfile:1: slots must be a whole number .* got '1.5' \(DeepSpeed would "
                                       r"read 1"):
        parse_hostfile("node1 slots=1.5\n")
    assert parse_hostfile("node1 slots=4#big\n") == {"node1": 4}  # a comment right after the digits


@pytest.mark.parametrize("line", ["node1 slots = 4", "node1 slots=two", "node1", "node1 # slots=4", "slots=4",
                                  "node1 slots=\u00b2"])
def test_hostfile_lines_deepspeed_refuses_are_refused(line):
    runner = pytest.importorskip("deepspeed.launcher.runner")
    with pytest.raises(ValueError):
        runner._parse_hostfile(["node0 slots=2\n", line + "\n"])
    with pytest.raises(BadInput, match="hostfile:2: "):
        parse_hostfile(f"node0 slots=2\n{line}\n")


def test_a_hostfile_with_an_underscore_host_launches(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hostfile").write_text("node_1 slots=4 max_slots=4\nnode_2 slots=4 max_slots=4\n")
    code = main(["launch", "--hostfile", "hostfile", "--master-addr", "node_1", "--dry-run", "train.py"])
    out = capsys.readouterr().out
    assert code == 0 and "--hostfile hostfile --launcher pdsh --force_multi --master_addr node_1" in out


def test_master_addr_help_says_what_deepspeed_does(capsys):
    """DeepSpeed's runner takes the first word of `ssh FIRST_HOST hostname -I`, not the host's name."""
    assert main(["launch", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "hostname -I" in text and "default: the first host)" not in text


def test_dry_run_names_the_users_env_values_without_showing_them_and_writes_nothing(capsys, tmp_path, monkeypatch):
    """--dry-run printed the merged .deepspeed_env, the user's HF_TOKEN=... with it, on stdout (the launch writes that
    file 0600 and --emit-script leaves the values out), and its DS_ENV_FILE named a file it never wrote, unsaid."""
    home, work = _home_and_work(tmp_path, monkeypatch)
    (home / ".deepspeed_env").write_text("HF_TOKEN=hf_hush\nNCCL_DEBUG=WARN\n")
    (work / "train.py").write_text("")
    assert main(["launch", "--dry-run", *TWO_NODES, "--env", "NCCL_DEBUG=INFO", "train.py"]) == 0
    out = capsys.readouterr().out
    env_file = work / ".zerokit" / ".deepspeed_env"
    assert "hf_hush" not in out
    assert (f"# {env_file}: not written by --dry-run; the launch writes it (values from your own .deepspeed_env "
            "shown as <redacted>; written 0600)\nHF_TOKEN=<redacted>\nNCCL_DEBUG=INFO\n") in out
    assert f"# {work / '.zerokit' / 'hostfile'}: not written by --dry-run; the launch writes it\n" in out
    assert f"DS_ENV_FILE={env_file} " in out and not (work / ".zerokit").exists()


# ---------------------------------------------------------------- the emitted artifacts' review

def _run_script_but_the_runner(path, env) -> subprocess.CompletedProcess:
    lines = path.read_text().splitlines()
    assert lines[-1].startswith("exec ") or lines[-1] == "true"
    lines[-1] = "true"  # everything but the runner itself
    path.write_text("\n".join(lines) + "\n")
    return subprocess.run(["bash", str(path)], env=env, capture_output=True, text=True, check=False)


def test_a_script_writes_the_merged_env_file_0600_over_a_world_readable_one_and_never_into_a_directory(
        tmp_path, monkeypatch):
    """The script wrote the file with `> FILE` under umask 077, which keeps the mode of a file already there: the
    user's HF_TOKEN landed in a 0644 file (the launch's own atomic write gives 0600 whatever was there)."""
    import os
    import stat

    home, work = _home_and_work(tmp_path, monkeypatch)
    (home / ".deepspeed_env").write_text("HF_TOKEN=hush\n")
    (work / "ds.json").write_text("{}")
    assert main(["launch", "--config", "ds.json", *TWO_NODES, "--env", "NCCL_DEBUG=INFO", "--emit-script", "run.sh",
                 "train.py"]) == 0
    env_file = work / ".zerokit" / ".deepspeed_env"
    env_file.parent.mkdir()
    env_file.write_text("OLD=1\n")
    env_file.chmod(0o644)
    done = _run_script_but_the_runner(work / "run.sh", {**os.environ, "HOME": str(home)})
    assert done.returncode == 0, done.stderr
    assert env_file.read_text() == "HF_TOKEN=hush\nNCCL_DEBUG=INFO\n"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert sorted(p.name for p in env_file.parent.iterdir()) == [".deepspeed_env", "hostfile"]  # no temp file left
    env_file.unlink()
    env_file.mkdir()  # `mv` would move the file into it, and DeepSpeed would read no env file: one line, exit 2
    done = _run_script_but_the_runner(work / "run.sh", {**os.environ, "HOME": str(home)})
    assert done.returncode == 2 and done.stderr == f"{env_file} is a directory; remove it\n"
    assert list(env_file.iterdir()) == [] and sorted(p.name for p in env_file.parent.iterdir()) == [
        ".deepspeed_env", "hostfile"]


@pytest.mark.parametrize("where", ["work", "home"])
def test_a_files_dir_where_the_users_own_env_file_is_read_is_refused(capsys, tmp_path, monkeypatch, where):
    """`--files-dir .` (or ~) made zerokit's .deepspeed_env the user's own: the launch rewrote the user's file with
    --env merged in (0600, for every later job), and --emit-script's `{ ... } > FILE` emptied it before reading it,
    so the user's HF_TOKEN was gone."""
    home, work = _home_and_work(tmp_path, monkeypatch)
    own = (home if where == "home" else work) / ".deepspeed_env"
    own.write_text("HF_TOKEN=hush\n")
    (work / "ds.json").write_text("{}")
    files_dir = str(home) if where == "home" else "."
    for emit in ([], ["--emit-script", "run.sh"]):
        code = main(["launch", "--config", "ds.json", *TWO_NODES, "--env", "NCCL_DEBUG=INFO", "--files-dir",
                     files_dir, "--dry-run", *emit, "train.py"])
        err = capsys.readouterr().err
        assert code == 2 and err == (f"zerokit launch: error: --files-dir {files_dir}: the .deepspeed_env zerokit "
                                     f"writes there would replace your own {'./' if where == 'work' else ''}"
                                     f"{own if where == 'home' else '.deepspeed_env'}, which DeepSpeed's runner "
                                     "reads for every job; give another --files-dir (default .zerokit)\n"), err
    assert own.read_text() == "HF_TOKEN=hush\n"
    build_command(spec(hosts=(("node1", 8), ("node2", 8)), files_dir=files_dir))  # no --env, no file: fine
    build_command(spec(hosts=(("node1", 8), ("node2", 8)), env=(("A", "1"),), files_dir=files_dir, no_ssh=True,
                       node_rank=0, master_addr="node1"))  # --no-ssh writes no env file


def test_env_ds_env_file_is_refused_where_it_would_hide_zeroKits_env_file():
    """`--env DS_ENV_FILE=x` replaced zerokit's DS_ENV_FILE in the runner's environment: DeepSpeed read ~/x and ./x,
    never the file zerokit wrote, and no --env value reached the other nodes. --no-ssh reads no env file: kept."""
    runner = pytest.importorskip("deepspeed.launcher.runner")
    two = (("node1", 8), ("node2", 8))
    with pytest.raises(BadInput, match=r"^--env DS_ENV_FILE: zerokit points DeepSpeed's runner at the "
                                       r"\.deepspeed_env it writes"):
        build_command(spec(hosts=two, env=(("NCCL_DEBUG", "INFO"), ("DS_ENV_FILE", "mine.env"))))
    _, env = build_command(spec(hosts=two, env=(("DS_ENV_FILE", "mine.env"),), no_ssh=True, node_rank=0,
                                master_addr="node1"))
    assert env["DS_ENV_FILE"] == "mine.env"
    _, env = build_command(spec(hosts=two, env=(("NCCL_DEBUG", "INFO"),), files_dir="/zk"))
    assert env["DS_ENV_FILE"] == "/zk/.deepspeed_env"
    assert [__import__("os").path.join(d, env["DS_ENV_FILE"]) for d in runner.DEEPSPEED_ENVIRONMENT_PATHS] == [
        "/zk/.deepspeed_env"] * 2  # where DeepSpeed's runner looks, under that name: zerokit's file alone


def test_sbatch_env_path_without_the_system_dirs_still_runs_the_scripts_own_tools(tmp_path, monkeypatch):
    """`--env PATH=/venv/bin` (the ranks' deepspeed, nothing else): the script found scontrol and srun first, but then
    ran head, sed and srun's `bash` on that PATH: `head: command not found`, and no rank started."""
    import json
    import os
    import sys

    from zerokit.launch.runner import render_sbatch

    monkeypatch.chdir(tmp_path)
    slurm, venv = tmp_path / "slurm", tmp_path / "venv"
    slurm.mkdir()
    venv.mkdir()
    record_argv = (f"#!{sys.executable}\nimport json, os, sys\nopen(os.environ['RECORD'], 'w').write("
                   "json.dumps({'argv': sys.argv[1:], 'path': os.environ['PATH']}))\n")
    for path, body in ((slurm / "scontrol", "#!/bin/sh\nprintf 'gpu-a\\ngpu-b\\n'\n"),
                       (slurm / "srun", "#!/bin/sh\nshift\nexec \"$@\"\n"),  # drops --kill-on-bad-exit=1
                       (venv / "deepspeed", record_argv)):
        path.write_text(body)
        path.chmod(0o755)
    s = spec(hosts=(("gpu-a", 8), ("gpu-b", 8)), env=(("PATH", str(venv)),))
    (tmp_path / "job.sbatch").write_text(render_sbatch(s, "zerokit launch ...", "job.sbatch"))
    record = tmp_path / "record.json"
    env = {**os.environ, "PATH": f"{slurm}:{os.environ['PATH']}", "RECORD": str(record), "SLURM_JOB_ID": "42",
           "SLURM_JOB_NODELIST": "gpu-[a-b]", "SLURM_NODEID": "1", "SLURM_SUBMIT_DIR": str(tmp_path)}
    done = subprocess.run(["bash", "job.sbatch"], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    got = json.loads(record.read_text())
    assert got["path"] == str(venv)
    assert got["argv"][:12] == ["--hostfile", str(tmp_path / "hostfile-42"), "--no_ssh", "--node_rank", "1",
                                "--num_nodes", "2", "--num_gpus", "8", "--master_addr", "gpu-a", "--master_port"]
    assert (tmp_path / "hostfile-42").read_text() == "gpu-a slots=8\ngpu-b slots=8\n"


def test_sbatch_with_gpus_per_node_takes_hosts_of_different_slots():
    """`--hosts a:4,b:8 --gpus-per-node 4` is 4 ranks on each node (one --gpus-per-node for Slurm); it was refused
    as 'the hosts have different slots'."""
    from zerokit.launch.runner import render_sbatch

    text = render_sbatch(spec(hosts=(("a", 4), ("b", 8)), gpus_per_node=4), "zerokit launch ...", "j.sbatch")
    assert "#SBATCH --gpus-per-node=4\n" in text and "--num_nodes 2 --num_gpus 4 " in text
    with pytest.raises(BadInput, match=r"the hosts have different slots \(a:4, b:8\).*--gpus-per-node N"):
        render_sbatch(spec(hosts=(("a", 4), ("b", 8))), "zerokit launch ...", "j.sbatch")

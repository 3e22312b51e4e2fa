"""`zerokit launch SCRIPT [ARGS]...`: preflight, then the real `deepspeed` runner in the foreground."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

import click

from zerokit.commands.preflight import parsed_hosts, target_options
from zerokit.errors import EXIT_PREFLIGHT, BadInput


def _env_pairs(values: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in values:
        key, sep, value = item.partition("=")
        if not sep:
            raise BadInput(f"--env {item!r}: write it as KEY=VALUE")
        pairs.append((key, value))
    return tuple(pairs)


def runner_path(required: bool = True) -> str:
    """The `deepspeed` runner of this Python's environment, else the one on PATH."""
    beside = Path(sys.executable).parent / "deepspeed"
    if beside.exists():
        return str(beside)
    found = shutil.which("deepspeed")
    if found is None and not required:
        return "deepspeed"
    if found is None:
        raise BadInput("the deepspeed runner is not installed; pip install 'zerokit[deepspeed]'")
    return found


def _write_atomic(path: str, text: str, mode: int = 0o644) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    tmp.chmod(mode)
    os.replace(tmp, p)


@click.command("launch", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@target_options
@click.option("--nodes", type=click.IntRange(min=1), help="Use the first N hosts of the hostfile.")
@click.option("--include", help="DeepSpeed's resource filter instead of --gpus-per-node, e.g. localhost:0,1.")
@click.option("--master-addr", help="Address of rank 0's node (default: the first host).")
@click.option("--env", "env", multiple=True, metavar="KEY=VALUE",
              help="Variable for every rank (repeatable); on many nodes it travels through .deepspeed_env.")
@click.option("--files-dir", default=".zerokit", show_default=True,
              help="Where the written hostfile and .deepspeed_env go.")
@click.option("--emit-sbatch", type=click.Path(dir_okay=False),
              help="Write a SLURM batch script that runs this job under srun, and start nothing.")
@click.option("--emit-script", type=click.Path(dir_okay=False),
              help="Write a bash script that starts this job, and start nothing.")
@click.option("--time", "time_limit", help="SLURM time limit for --emit-sbatch, e.g. 04:00:00.")
@click.option("--dry-run", is_flag=True, help="Print the runner command and the files it would write; start nothing.")
@click.option("--no-preflight", is_flag=True, help="Skip the checks.")
@click.option("--grace", type=click.FloatRange(min=0), default=10.0, show_default=True,
              help="Seconds the ranks get after Ctrl-C/SIGTERM before they are killed.")
@click.argument("script")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
def command(config, plan_file, hostfile, hosts, gpus_per_node, launcher, master_port, nodes, include, master_addr,
            env, files_dir, emit_sbatch, emit_script, time_limit, dry_run, no_preflight, grace, script,
            script_args) -> int:
    """Check the machine, then start SCRIPT on every rank with the deepspeed runner.

    The config reaches the script as `--deepspeed PATH` unless its arguments already name one.
    The job's exit code is zerokit's; Ctrl-C and SIGTERM reach every rank.

    \b
      zerokit launch --config ds_config.json --gpus-per-node 8 train.py --epochs 1
      zerokit launch --config ds_config.json --hosts node1:8,node2:8 --master-addr node1 train.py
      zerokit launch --config ds_config.json --hosts node1,node2 --gpus-per-node 8 --emit-sbatch job.sbatch train.py
    """
    from zerokit.launch import preflight, runner

    if config and not Path(config).is_file():
        raise BadInput(f"--config {config}: no such file")
    host_map = parsed_hosts(hosts, gpus_per_node)
    spec = runner.LaunchSpec(
        script=script, script_args=tuple(script_args), config=config, gpus_per_node=gpus_per_node, nodes=nodes,
        include=include, hostfile=hostfile, hosts=tuple(host_map.items()), launcher=launcher,
        master_addr=master_addr, master_port=master_port, env=_env_pairs(env), files_dir=files_dir,
        runner=_runner_name() if (emit_sbatch or emit_script) else runner_path(required=not dry_run),
    )
    zerokit_command = shlex.join(["zerokit", *sys.argv[1:]]) if sys.argv[1:2] == ["launch"] else "zerokit launch ..."
    if emit_sbatch or emit_script:
        rendered = {}
        if emit_sbatch:
            rendered[emit_sbatch] = (runner.render_sbatch(spec, zerokit_command, Path(emit_sbatch).name,
                                                          time_limit=time_limit), "sbatch")
        if emit_script:
            rendered[emit_script] = (runner.render_launch_script(spec, zerokit_command), "bash")
        for path, (text, how) in rendered.items():
            if dry_run:
                click.echo(f"# {path}\n{text}", nl=False)
            else:
                _write_atomic(path, text, 0o755)
                click.echo(f"wrote {path}: run it with `{how} {shlex.quote(path)}`")
        return 0

    argv, env_add = runner.build_command(spec)
    if not spec.multi_node and not Path(script).is_file():
        raise BadInput(f"script {script}: no such file (on one node the script must exist here)")
    files = runner.render_files(spec)
    if dry_run:
        for path, text in files.items():
            click.echo(f"# {path}\n{text}", nl=False)
        click.echo(runner.shell_line(argv, env_add))
        return 0

    if not no_preflight:
        target = preflight.make_target(config=config, plan=plan_file, hosts=runner.hosts_of(spec) if spec.multi_node
                                       else {}, hostfile=hostfile, gpus_per_node=gpus_per_node, launcher=launcher,
                                       master_port=master_port)
        checks = preflight.run_checks(target)
        click.echo(preflight.format_text(checks), err=True)
        if not all(c.ok for c in checks):
            click.echo("zerokit launch: preflight failed; fix the ✗ above or pass --no-preflight", err=True)
            return EXIT_PREFLIGHT
    for path, text in files.items():
        _write_atomic(path, text)
    click.echo(f"zerokit launch: {runner.shell_line(argv, env_add)}", err=True)
    return runner.run(argv, env_add, grace=grace)


def _runner_name() -> str:
    """For printed and emitted commands: the runner by the name people type, unless only the venv's exists."""
    if shutil.which("deepspeed"):
        return "deepspeed"
    beside = Path(sys.executable).parent / "deepspeed"
    return str(beside) if beside.exists() else "deepspeed"

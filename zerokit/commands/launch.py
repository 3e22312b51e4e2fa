"""`zerokit launch SCRIPT [ARGS]...`: preflight, then the real `deepspeed` runner in the foreground."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

import click

from zerokit.commands.preflight import binding_options, parsed_hosts, target_options
from zerokit.errors import EXIT_PREFLIGHT, BadInput
from zerokit.units import parse_finite

MAX_GRACE_S = 3600.0


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


def check_emit_targets(targets: dict[str, str], force: bool, dry_run: bool, inputs: dict[str, str | None]) -> None:
    """Every --emit-* path, before anything is written: a regular file or a new one (an existing one only with
    --force, never the training script, the config, a file zerokit writes or the other emit's path). What no
    --force can make right is said first: that the file exists is only worth saying of a path that could be used."""
    from zerokit.fileio import check_target, same_path

    def example(option: str) -> str:
        return "job.sbatch" if option == "--emit-sbatch" else "run.sh"

    for option, path in targets.items():
        for what, other in inputs.items():
            if path.strip() and path != "-" and other and same_path(path, other):
                raise BadInput(f"{option} {path} is the {what}; write the {option.removeprefix('--emit-')} "
                               "elsewhere")
    if len(targets) == 2 and all(p.strip() for p in targets.values()) and same_path(*targets.values()):
        raise BadInput("--emit-sbatch and --emit-script name the same file; give each its own path")
    for option, path in targets.items():
        check_target(path, option, force=True, example=example(option))  # empty, '-', a directory, a device ...
    for option, path in targets.items():
        if dry_run and not force and os.path.lexists(path):  # the preview shows it; the real run would refuse it
            click.echo(f"zerokit launch: warning: {option} {path} exists: without --dry-run zerokit refuses to "
                       "replace it; add --force, or give another path", err=True)
        check_target(path, option, force=force or dry_run, example=example(option))


@click.command("launch", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@target_options
@click.option("--nodes", type=click.IntRange(min=1), help="Use the first N hosts of the hostfile.")
@click.option("--include", help="DeepSpeed's resource filter instead of --gpus-per-node, e.g. localhost:0,1.")
@click.option("--exclude", help="DeepSpeed's resource filter of ranks NOT to use, in --include's grammar, e.g. "
              "node2 or node1:0 (not with --include).")
@click.option("--master-addr", help="Address of rank 0's node (default: DeepSpeed's runner takes the first address "
              "`ssh HOST hostname -I` prints on the job's first host; 127.0.0.1 on one node).")
@click.option("--launcher-args", metavar="TEXT",
              help="Extra arguments for the --launcher command (pdsh, mpirun, srun), one string split as a shell "
                   "splits it: DeepSpeed's --launcher_args, e.g. \"-mca btl_tcp_if_include eth0\" for openmpi. Jobs on "
                   "other hosts only.")
@click.option("--no-ssh", is_flag=True,
              help="No ssh between nodes (Kubernetes, srun): run the same command on every node with its "
                   "--node-rank; each starts its own ranks. Needs --hosts/--hostfile and --master-addr.")
@click.option("--node-rank", type=click.IntRange(min=0), help="With --no-ssh: this node's line in the hostfile, "
              "from 0 (node 0 is the master's).")
@click.option("--watch-port", type=click.IntRange(0, 65535),
              help="With --no-ssh: node 0's port for the node watch, which stops every node when one fails or is "
                   "interrupted [default: master port + 1; 0: no watch].")
@click.option("--env", "env", multiple=True, metavar="KEY=VALUE",
              help="Variable for every rank (repeatable); on many nodes it travels through .deepspeed_env.")
@binding_options("DeepSpeed's --bind_cores_to_rank: each rank runs on its own share of the node's physical cores "
                 "(numactl), with OMP_NUM_THREADS that share; DeepSpeed advises it where CPU Adam steps an offloaded "
                 "optimizer. One node, --no-ssh, --emit-sbatch or --launcher impi (the other backends drop it).")
@click.option("--files-dir", default=".zerokit", show_default=True,
              help="Where the written hostfile and .deepspeed_env go.")
@click.option("--emit-sbatch", type=click.Path(dir_okay=False),
              help="Write a SLURM batch script that runs this job under srun, and start nothing.")
@click.option("--emit-script", type=click.Path(dir_okay=False),
              help="Write a bash script that starts this job, and start nothing.")
@click.option("--force", is_flag=True, help="Let --emit-sbatch/--emit-script overwrite an existing file.")
@click.option("--time", "time_limit", help="SLURM time limit for --emit-sbatch, e.g. 04:00:00.")
@click.option("--dry-run", is_flag=True, help="Print the runner command and the files it would write; start nothing.")
@click.option("--no-preflight", is_flag=True, help="Skip the checks.")
@click.option("--grace", type=float, default=10.0, show_default=True,
              help="Seconds the ranks get after Ctrl-C/SIGTERM before they are killed.")
@click.argument("script")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
def command(config, plan_file, hostfile, hosts, gpus_per_node, launcher, master_port, ssh_port, nodes, include,
            exclude, master_addr, no_ssh, launcher_args, node_rank, watch_port, env, bind_cores_to_rank, bind_core_list,
            files_dir, emit_sbatch, emit_script, force, time_limit, dry_run, no_preflight, grace, script,
            script_args) -> int:
    """Check the machine, then start SCRIPT on every rank with the deepspeed runner.

    The config reaches the script as `--deepspeed PATH` unless its arguments already name that file (another
    config there is refused: the training would read it, unchecked). Without --config, the file the script's
    arguments name (`train.py --deepspeed ds.json`) is the one checked.
    The job's exit code is zerokit's (3: the preflight failed and nothing started; 2: bad input); Ctrl-C and
    SIGTERM reach every rank.

    \b
      zerokit launch --config ds_config.json --gpus-per-node 8 train.py --epochs 1
      zerokit launch --config ds_config.json --hosts node1:8,node2:8 --master-addr node1 train.py
      zerokit launch --config ds_config.json --hosts node1:8,node2:8 --master-addr node1 --ssh-port 2222 train.py
      zerokit launch --config ds_config.json --hosts node1:8,node2:8 --master-addr node1 --no-ssh --node-rank 1 train.py
      zerokit launch --config ds_config.json --hosts node1,node2 --gpus-per-node 8 --emit-sbatch job.sbatch train.py
    """
    from zerokit.launch import preflight, runner

    if script.startswith("-"):  # an option click did not know took the script's place, and the rest went to it
        raise BadInput(_unknown_option(script))
    grace = parse_finite(grace, "--grace", minimum=0.0, maximum=MAX_GRACE_S)
    if not script.strip():
        raise BadInput("SCRIPT is empty; give the training script to run")
    if not str(files_dir).strip():
        raise BadInput("--files-dir is empty; give a directory (default .zerokit)")
    unchecked, option = None, "--config"
    if config is None:  # `train.py --deepspeed ds.json`: that file is the job's config, checked as --config's is
        config, flag, unchecked = runner.script_config(script_args)
        option = f"the script's {flag}"
        if config is not None and not os.path.lexists(config) and (hostfile or hosts):
            config, unchecked = None, (f"the DeepSpeed config the script's {flag} names ({config}) is not on this "
                                       "machine, so it is not checked here: pass --config with a copy of it")
    document = None
    if config is not None:  # a ds_config lint can read, even for --dry-run (its content is lint's); read once
        document = preflight.read_config_document(config, option)
    if plan_file is not None:
        preflight.read_plan(plan_file)
    host_map = parsed_hosts(hosts, gpus_per_node, hostfile)
    if os.path.lexists(files_dir) and not os.path.isdir(files_dir):
        raise BadInput(f"--files-dir {files_dir} exists and is not a directory; give a directory (default .zerokit)")
    emits = {option: path for option, path in (("--emit-sbatch", emit_sbatch), ("--emit-script", emit_script))
             if path is not None}
    spec = runner.LaunchSpec(
        script=script, script_args=tuple(script_args), config=config, gpus_per_node=gpus_per_node, nodes=nodes,
        include=include, exclude=exclude, hostfile=hostfile, hosts=tuple(host_map.items()), launcher=launcher,
        master_addr=master_addr, master_port=master_port, env=_env_pairs(env), files_dir=files_dir,
        runner=_runner_name() if emits else runner_path(required=not dry_run), no_ssh=no_ssh, node_rank=node_rank,
        # an emitted script runs later, under the variable it finds then (it checks that one itself)
        # --env's value too: the runner gets it in its environment, and deletes it as it deletes an exported one
        visible_devices=None if emits else runner.visible_devices({**os.environ, **dict(_env_pairs(env))},
                                                                  runner.gpus_present()),
        bind_cores_to_rank=bind_cores_to_rank, bind_core_list=bind_core_list, ssh_port=ssh_port,
        launcher_args=launcher_args,
    )
    if time_limit is not None and emit_sbatch is None:
        raise BadInput("--time is the SLURM time limit of --emit-sbatch; give --emit-sbatch FILE too, or drop --time")
    if watch_port is not None and not no_ssh:
        raise BadInput("--watch-port goes with --no-ssh (the node watch ties together nodes started one by one)")
    if watch_port == master_port:
        raise BadInput(f"--watch-port {watch_port} is the master port; the rendezvous needs that one, give another")
    zerokit_command = shlex.join(["zerokit", *sys.argv[1:]]) if sys.argv[1:2] == ["launch"] else "zerokit launch ..."
    if emits:
        check_emit_targets(emits, force, dry_run, {"training script": script, "--config": config,
                                                   "--hostfile": hostfile, "--plan": plan_file,
                                                   "hostfile zerokit writes in --files-dir": spec.written_hostfile,
                                                   ".deepspeed_env zerokit writes in --files-dir": spec.env_file})
        rendered = {}
        if emit_sbatch is not None:
            rendered[emit_sbatch] = (runner.render_sbatch(spec, zerokit_command, Path(emit_sbatch).name,
                                                          time_limit=time_limit), "sbatch", "--emit-sbatch")
        if emit_script is not None:
            rendered[emit_script] = (runner.render_launch_script(spec, zerokit_command), "bash", "--emit-script")
            for note in runner.notes(spec):  # the script runs the same command: what it leaves out, said here
                click.echo(f"zerokit launch: warning: {note}", err=True)
        for path, (text, how, option) in rendered.items():
            if dry_run:
                click.echo(f"# {path}\n{text}", nl=False)
            else:
                from zerokit.fileio import write_atomic

                write_atomic(path, text, option, force=force, mode=0o777)
                click.echo(f"wrote {path}: run it with `{how} {shlex.quote(path)}`")
        return 0

    argv, env_add = runner.build_command(spec)
    for note in runner.notes(spec) + ([unchecked] if unchecked else []):
        click.echo(f"zerokit launch: warning: {note}", err=True)
    job_hosts = runner.hosts_of(spec) if spec.multi_node or spec.local_only else {}
    # the nodes the runner keeps (--include/--exclude, then --nodes): what --node-rank counts, as DeepSpeed's does
    used = runner.select_hosts(job_hosts, spec.nodes, spec.include, spec.exclude) if job_hosts else {}
    if spec.no_ssh:
        _check_node_rank(spec, used)
    if not spec.remote_shell:
        if not os.path.lexists(script):
            raise BadInput(f"script {script}: no such file (on one node the script must exist here)")
        preflight.check_input_file(script, "script")  # a directory, a FIFO, a symlink loop
    if dry_run:  # the files the command names, which only the launch writes; no value of the user's own env file
        for path, text in runner.render_files(spec, redact=True).items():
            what = (f" (values from your own .deepspeed_env shown as {runner.REDACTED}; written 0600)"
                    if path == spec.env_file else "")
            click.echo(f"# {path}: not written by --dry-run; the launch writes it{what}\n{text}", nl=False)
        click.echo(runner.shell_line(argv, env_add))
        return 0
    files = runner.render_files(spec)
    for path in files:  # before the preflight: a write that fails after it would waste its checks
        if os.path.lexists(path) and not os.path.isfile(path):
            raise BadInput(f"--files-dir {spec.files_dir}: {path} is not a regular file, where zerokit writes the "
                           f"job's {os.path.basename(path)}; remove it, or give another --files-dir")

    watch = _start_watch(spec, watch_port, used) if spec.no_ssh and watch_port != 0 else None
    if not no_preflight:
        target = preflight.make_target(config=config, plan=plan_file, hosts=job_hosts, hostfile=hostfile,
                                       gpus_per_node=gpus_per_node, launcher=launcher, master_port=master_port,
                                       no_ssh=no_ssh, node_rank=node_rank, master_addr=master_addr,
                                       env=dict(spec.env), nodes=spec.nodes, include=spec.include,
                                       exclude=spec.exclude, document=document,  # the runner's hosts and ranks
                                       bind_cores_to_rank=bind_cores_to_rank, bind_core_list=bind_core_list,
                                       remote=spec.remote_shell, ssh_port=spec.ssh_port,
                                       # what the runner starts on every node by this node's paths (remote env)
                                       script_argv=runner.script_argv(spec), python=runner.runner_python(spec.runner))
        checks = preflight.run_job_checks(target, spec)  # zerokit preflight's, --include against the devices too
        click.echo(preflight.format_text(checks), err=True)
        if not all(c.ok for c in checks):
            click.echo("zerokit launch: preflight failed; fix the ✗ above or pass --no-preflight", err=True)
            return watch.finish(EXIT_PREFLIGHT) if watch is not None else EXIT_PREFLIGHT
    from zerokit.fileio import write_atomic

    try:
        for path, text in files.items():
            private = path == spec.env_file  # it may carry the user's own .deepspeed_env: tokens, keys
            write_atomic(path, text, "--files-dir", force=True, make_parents=True, mode=0o600 if private else 0o666,
                         keep_mode=not private)
    except BadInput:
        if watch is not None:
            watch.finish(2)
        raise
    click.echo(f"zerokit launch: {runner.shell_line(argv, env_add)}", err=True)
    pdsh = spec.remote_shell and launcher == "pdsh"
    return runner.run(argv, env_add, grace=grace, pdsh=pdsh, watch=watch, master_port=spec.master_port)


def _unknown_option(word: str) -> str:
    """The error for an unknown option found where the script goes (click passes it on as SCRIPT because the
    script's own options must pass through): which zerokit option was meant, and where the script's go."""
    import difflib

    from zerokit.spellings import meant, normalized

    name = word.split("=", 1)[0]
    options = [opt for param in command.params for opt in param.opts if opt.startswith("--")]
    guess = (meant(name, options)  # DeepSpeed's runner's and the HF Trainer's names for them too
             or next(iter(difflib.get_close_matches(normalized(name), options, n=1, cutoff=0.75)), None))
    hint = f" (did you mean {guess}?)" if guess else " (see 'zerokit launch --help')"
    return (f"unknown option {name!r}{hint}; zerokit launch's options go before the training script, "
            "the script's own arguments after it: zerokit launch [OPTIONS] SCRIPT [ARGS]...")


def _check_node_rank(spec, hosts: dict[str, int]) -> None:
    """`hosts`: the nodes the runner keeps (`runner.select_hosts`)."""
    count = len(hosts)
    if not 0 <= spec.node_rank < count:
        raise BadInput(f"--node-rank {spec.node_rank} is not one of the job's {count} nodes (0 to {count - 1})")


def _start_watch(spec, watch_port: int | None, hosts: dict[str, int]):
    """The node watch (zerokit.launch.watch): node 0 listens, the others connect before anything starts."""
    from zerokit.launch.watch import NodeWatch, default_port, job_key

    nodes = len(hosts)  # the nodes the runner keeps (`runner.select_hosts`)
    port = watch_port if watch_port is not None else default_port(spec.master_port)
    if port == spec.master_port:
        raise BadInput(f"--watch-port {port} is the master port; the rendezvous needs that one, give another")
    key = job_key([spec.master_addr, spec.master_port, nodes, *hosts, Path(spec.script).name])
    return NodeWatch(spec.node_rank, nodes, spec.master_addr, port, key).start()  # PreflightFailed: exit 3


def _runner_name() -> str:
    """For printed and emitted commands: the runner by the name people type, unless only the venv's exists."""
    if shutil.which("deepspeed"):
        return "deepspeed"
    beside = Path(sys.executable).parent / "deepspeed"
    return str(beside) if beside.exists() else "deepspeed"

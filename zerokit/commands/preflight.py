"""`zerokit preflight`: the checks `zerokit launch` runs first, on their own (exit 3 if any fails)."""

from __future__ import annotations

import json

import click

from zerokit.errors import EXIT_PREFLIGHT, BadInput
from zerokit.launch.hostfile import MAX_SLOTS, parse_hosts, read_hostfile
from zerokit.launch.runner import DEFAULT_MASTER_PORT, LAUNCHERS


def target_options(f):
    """Options that describe the job, shared by `preflight` and `launch`."""
    options = [
        click.option("--config", type=click.Path(dir_okay=False), help="ds_config JSON the job uses."),
        click.option("--plan", "plan_file", type=click.Path(dir_okay=False),
                     help="`zerokit plan --format json` output: adds the GPU, RAM and NVMe sizes the plan needs, and "
                          "checks that it fits and that the job's GPUs and the config's ZeRO settings are its own."),
        click.option("--hostfile", type=click.Path(), help="DeepSpeed hostfile ('HOST slots=N' lines)."),
        click.option("--hosts", help="Hosts instead of a hostfile: node1:8,node2:8 (or node1,node2 with --gpus-per-node)."),
        click.option("--gpus-per-node", type=click.IntRange(1, MAX_SLOTS),
                     help="Ranks per node; on a host without GPUs, ranks on DeepSpeed's CPU accelerator."),
        click.option("--launcher", type=click.Choice(LAUNCHERS), default="pdsh", show_default=True,
                     help="How the runner reaches the other nodes."),
        click.option("--master-port", type=click.IntRange(1, 65535), default=DEFAULT_MASTER_PORT, show_default=True,
                     help="Rendezvous port on the master node."),
        click.option("--ssh-port", type=click.IntRange(1, 65535),
                     help="The nodes' ssh port (DeepSpeed's --ssh_port): the runner's ssh check and `hostname -I` "
                          "probe, pdsh's ssh and the preflight's use it; mpirun's needs it in --launcher-args too "
                          "[default: ssh's own, 22 or ~/.ssh/config's]."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def binding_options(what: str):
    """--bind-cores-to-rank and --bind-core-list, shared by launch, preflight and probe; `what` says what the flag
    does in that command (launch: binds the job's ranks; preflight: checks what that needs; probe: binds its own)."""
    def decorate(f):
        f = click.option("--bind-core-list", metavar="LIST",
                         help="With --bind-cores-to-rank: the cores to share out instead of all physical ones "
                              "(DeepSpeed's --bind_core_list), e.g. 0-31,64-95.")(f)
        return click.option("--bind-cores-to-rank", is_flag=True, help=what)(f)
    return decorate


def parsed_hosts(hosts: str | None, gpus_per_node: int | None, hostfile: str | None = None) -> dict[str, int]:
    """--hosts as a map (parse_hosts refuses an empty one); an empty --hostfile (a variable that expanded to
    nothing) is refused too, rather than read as one node."""
    if hostfile is not None and not hostfile.strip():
        raise BadInput("--hostfile is empty; give a hostfile path or leave the option out for one node")
    return parse_hosts(hosts, gpus_per_node) if hosts is not None else {}


@click.command("preflight")
@target_options
@click.option("--nodes", type=click.IntRange(min=1), help="As launch --nodes: check the first N hosts only.")
@click.option("--include", help="As launch --include: check only the hosts and ranks of DeepSpeed's filter.")
@click.option("--exclude", help="As DeepSpeed's --exclude: leave these hosts or slots out of the checks.")
@binding_options("As launch --bind-cores-to-rank: check what DeepSpeed's core binding needs (numactl, a core for "
                 "each rank).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def command(config, plan_file, hostfile, hosts, gpus_per_node, launcher, master_port, ssh_port, nodes, include,
            exclude, bind_cores_to_rank, bind_core_list, fmt) -> int:
    """Check this machine can run a config: DeepSpeed ops, accelerator, memory, NVMe, ports, hosts.

    Exit 0: every check passed; 3: a check failed; 2: bad input (a --config, --plan or --hostfile that cannot be
    read, as launch refuses them).

    \b
      zerokit preflight --config ds_config.json --gpus-per-node 8
      zerokit preflight --config ds_config.json --hostfile hostfile --format json
    """
    from zerokit.launch import preflight, runner

    runner.check_core_list(bind_cores_to_rank, bind_core_list)
    host_map = parsed_hosts(hosts, gpus_per_node, hostfile)
    if hostfile is not None:  # bad input, as --hosts' mistakes are and launch says (the checks would run without it)
        read_hostfile(hostfile)
    # the job as launch would start it: what launch refuses before its preflight (--include beside --gpus-per-node,
    # --nodes without hosts, a filter that leaves no rank ...) is refused here too
    spec = runner.LaunchSpec(script="SCRIPT", config=config, gpus_per_node=gpus_per_node, nodes=nodes, include=include,
                             exclude=exclude, hostfile=hostfile, hosts=tuple(host_map.items()), launcher=launcher,
                             master_port=master_port, bind_cores_to_rank=bind_cores_to_rank,
                             bind_core_list=bind_core_list, ssh_port=ssh_port)
    runner.validate(spec)
    target = preflight.make_target(config=config, plan=plan_file, hosts=host_map, hostfile=hostfile,
                                   gpus_per_node=gpus_per_node, launcher=launcher, master_port=master_port,
                                   nodes=nodes, include=include, exclude=exclude,
                                   bind_cores_to_rank=bind_cores_to_rank, bind_core_list=bind_core_list,
                                   remote=spec.remote_shell, ssh_port=ssh_port)
    checks = preflight.run_job_checks(target, spec)
    if fmt == "json":
        click.echo(json.dumps(preflight.as_json(checks), indent=2))
    else:
        click.echo(preflight.format_text(checks))
    return 0 if all(c.ok for c in checks) else EXIT_PREFLIGHT

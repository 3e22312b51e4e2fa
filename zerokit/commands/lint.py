"""`zerokit lint`: schema and semantic checks of ds_configs; exit 0 clean, 1 errors, 2 unreadable input or bad usage.

Only parsing, printing and the exit code live here; the checks are `zerokit.lint.engine.lint_paths`. This module and
everything it imports stays free of torch, deepspeed and transformers so a CI step starts in a fraction of a second.
"""

from __future__ import annotations

import sys

import click

from zerokit.autofill import TARGETS
from zerokit.errors import BadInput
from zerokit.units import LARGEST_GPU_BYTES, parse_gpu_memory_option, parse_positive_int

MAX_WORLD_SIZE = 1_000_000
"""Ceiling of --world-size: the largest DeepSpeed jobs run tens of thousands of ranks, far from a million."""

HELP = """Check DeepSpeed configs for the mistakes DeepSpeed silently accepts.

\b
FILES are ds_config JSON/HJSON files, Accelerate config YAMLs (*.yaml, *.yml), globs (quote them:
'configs/**/*.json') or - for stdin. Findings print as PATH:LINE:COL: SEVERITY CODE message.
Exit 0: no errors; 1: errors (warnings too with --strict); 2: a file could not be read, or bad usage.

\b
  zerokit lint ds_config.json
  zerokit lint --target deepspeed --world-size 16 --gpu-memory 80GB 'configs/*.json'
  zerokit lint --format github accelerate_config.yaml
"""


@click.command("lint", help=HELP, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.argument("files", nargs=-1, required=True)
@click.option("--target", type=click.Choice(TARGETS, case_sensitive=False), default="trainer", show_default=True,
              help="Who consumes the config: 'trainer' (HF Trainer, the default, as for `zerokit plan`) and "
                   "'accelerate' fill some \"auto\" values; 'deepspeed' (deepspeed.initialize) fills none.")
@click.option("--world-size", default=None, metavar="N",
              help=f"Data-parallel GPUs in total (1 to {MAX_WORLD_SIZE:,}); checks train_batch_size = micro x "
                   "accumulation x world size.")
@click.option("--gpu-memory", "gpu_memory", default=None, metavar="SIZE",
              help="Memory per GPU (80GB, 80GiB, 81920MiB; at most 1TiB); warns when overlap_comm buckets take too "
                   f"much of it, errors when the reduce bucket alone exceeds it (else: the largest GPU's "
                   f"{LARGEST_GPU_BYTES // 10**9} GB).")
@click.option("--format", "fmt", type=click.Choice(("text", "json", "github")), default="text", show_default=True,
              help="text: PATH:LINE:COL lines; json: a list of findings; github: workflow annotations.")
@click.option("--strict", is_flag=True, help="Warnings count as errors for the exit code.")
def command(files: tuple[str, ...], target: str, world_size: str | None, gpu_memory: str | None, fmt: str,
            strict: bool) -> int:
    from zerokit.lint.engine import STDIN, Context, lint_paths
    from zerokit.lint.render import render, summary

    ranks = parse_positive_int(world_size, "--world-size", maximum=MAX_WORLD_SIZE) if world_size is not None else None
    memory = parse_gpu_memory_option(gpu_memory) if gpu_memory is not None else None
    if list(files).count(STDIN) > 1:
        raise BadInput("'-' (stdin) can be given only once")
    stdin = getattr(sys.stdin, "buffer", None) if STDIN in files else None  # None: stdin is closed (<&-)
    result = lint_paths(list(files), Context(target.lower(), ranks, memory), stdin=stdin)
    out = render(result.findings, fmt, result.files)
    if out:
        click.echo(out)
    elif fmt == "json":
        click.echo("[]")
    if fmt == "text":
        click.echo(summary(result.findings, result.files), err=True)
    return result.exit_code(strict)

"""The `zerokit` command: parses, calls the library, prints, picks the exit code.

Subcommands live one per module in `zerokit.commands` and are imported only when named, so
`zerokit lint` never pays for the planner's or the launcher's imports (and never for torch).
"""

from __future__ import annotations

import errno
import gc
import importlib
import os
import sys
from typing import NoReturn

import click

from zerokit import __version__
from zerokit.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, ZerokitError, one_line, printable

# name -> (module in zerokit.commands that defines `command`, one-line help shown by `zerokit --help`)
COMMANDS = {
    "plan": ("plan", "Predict per-GPU memory and write the fastest ds_config that fits."),
    "lint": ("lint", "Check DeepSpeed configs for the mistakes DeepSpeed silently accepts."),
    "preflight": ("preflight", "Check this machine can run a config: ops, memory, NVMe, ports, hosts."),
    "launch": ("launch", "Preflight, then start the deepspeed runner on one node or many."),
    "schema": ("schema", "Print the JSON Schema of a DeepSpeed config (for editors and CI)."),
    "probe": ("probe", "Measure this machine (matmul, copies, collectives, CPU Adam, NVMe) for step-time plans."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module = importlib.import_module(f"zerokit.commands.{COMMANDS[name][0]}")
        return module.command

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple:
        name = args[0] if args else ""
        if name and not name.startswith("-") and name not in COMMANDS:  # click says only "No such command"
            import difflib

            close = difflib.get_close_matches(name, COMMANDS, n=1)
            raise click.UsageError(f"no command {name!r}; " + (f"did you mean {close[0]!r}?" if close else
                                                                f"the commands are {', '.join(COMMANDS)}"))
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Listing commands must not import them: `zerokit --help` stays fast.
        with formatter.section("Commands"):
            formatter.write_dl([(name, help_) for name, (_, help_) in COMMANDS.items()])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, "--version", prog_name="zerokit")
def cli() -> None:
    """Plan, lint and launch DeepSpeed ZeRO training.

    \b
      zerokit plan --model llama-2-7b --gpu a100-80gb --gpus-per-node 8 --seq-len 4096 -o ds_config.json
      zerokit lint ds_config.json
      zerokit launch --config ds_config.json --gpus-per-node 8 train.py
    """


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return the exit code; every error is one line on stderr, never a traceback."""
    args = sys.argv[1:] if argv is None else argv
    prog = "zerokit " + args[0] if args and args[0] in COMMANDS else "zerokit"
    stdout = getattr(sys.stdout, "reconfigure", None)
    if stdout is not None:  # a key that is a lone surrogate ("\udfff" in a JSON file) prints as \udfff, not a crash
        stdout(errors="backslashreplace")
    if sys.stderr is None:  # `2>&-`: nowhere to say anything; the exit code still tells
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 -- for the rest of the process
    if sys.stdout is None:  # `>&-`: Python leaves no stream, and the first print failed as an internal error
        click.echo(f"{prog}: error: stdout is closed; give the output somewhere to go (> file, or > /dev/null)",
                   err=True)
        return EXIT_BAD_INPUT
    if not args:  # click would print the whole help as the error
        click.echo(f"zerokit: error: give a command: {', '.join(COMMANDS)} (see 'zerokit --help')", err=True)
        return EXIT_BAD_INPUT
    try:
        rv = cli.main(args=args, prog_name="zerokit", standalone_mode=False)
        sys.stdout.flush()  # a full disk or a dead terminal is reported here, not at exit
    except click.exceptions.Exit as e:
        return e.exit_code
    except SystemExit as e:  # click's own broken-pipe path (`zerokit schema | true`): EPIPE -> sys.exit(1)
        if e.code != 1 or not _stdout_gone():
            raise
        _drop_stdout()
        return 0
    except click.exceptions.Abort:
        click.echo(f"{prog}: aborted", err=True)
        return 130
    except click.NoSuchOption as e:  # click guesses by spelling alone: `--num-gpus` is closest to `--gpu`
        click.echo(f"{prog}: error: {printable(_no_such_option(e))} (see '{prog} --help')", err=True)
        return EXIT_BAD_INPUT
    except click.ClickException as e:  # usage errors: bad option, missing argument, bad choice
        hint = f" (see '{prog} --help')" if isinstance(e, click.UsageError) else ""
        click.echo(f"{prog}: error: {printable(e.format_message())}{hint}", err=True)
        return EXIT_BAD_INPUT if isinstance(e, click.UsageError) else e.exit_code
    except ZerokitError as e:
        click.echo(f"{prog}: error: {printable(str(e))}", err=True)
        return e.exit_code
    except KeyboardInterrupt:
        click.echo(f"{prog}: interrupted", err=True)
        return 130
    except BrokenPipeError:  # `zerokit plan | head`: the reader left; nothing to say
        _drop_stdout()
        return 0
    except OSError as e:
        if e.errno not in _WRITE_ERRORS:
            return _internal(prog, e)
        click.echo(f"{prog}: error: cannot write the output: {e.strerror}; free space or write elsewhere", err=True)
        return EXIT_BAD_INPUT
    except Exception as e:  # noqa: BLE001 - a bug: still one line; ZEROKIT_DEBUG=1 shows the traceback
        return _internal(prog, e)
    return rv if isinstance(rv, int) else 0


def _stdout_gone() -> bool:
    """Whether click took its broken-pipe path: on EPIPE it wraps stdout in its _PacifyFlushWrapper (`.wrapped`)
    and calls sys.exit(1), even with standalone_mode off."""
    return hasattr(sys.stdout, "wrapped")


def _drop_stdout() -> None:
    """After a broken pipe: what stdout still buffers goes to /dev/null, so the interpreter's last flush at exit
    does not fail again (it turned the exit code into 1: `zerokit schema | true`); and stderr, whose reader may be
    gone too, says nothing more."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no file descriptor (a test's captured stream)
        pass
    sys.stderr.close()


def _no_such_option(e: click.NoSuchOption) -> str:
    """click's message, with the option another tool's name means (`zerokit.spellings`) where it knows one."""
    from zerokit.spellings import meant

    command = e.ctx.command if e.ctx is not None else None
    options = {o for p in (command.params if command is not None else ()) for o in p.opts}
    option = meant(e.option_name, options)
    if option is None or option == e.option_name:
        return e.format_message()
    return f"No such option {e.option_name!r}. Did you mean {option!r}?"


_WRITE_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG, errno.EROFS})
"""What writing the output can fail with that is the machine's doing, not zerokit's (stdout on a full disk)."""


def _internal(prog: str, e: Exception) -> int:
    if os.environ.get("ZEROKIT_DEBUG", "").strip().lower() not in ("", "0", "false", "no", "off"):
        raise e
    click.echo(f"{prog}: internal error: {type(e).__name__}: {one_line(e, 300)} (rerun with ZEROKIT_DEBUG=1 and "
               "report it)", err=True)
    return EXIT_INTERNAL


def run() -> NoReturn:
    """The program (the `zerokit` script, `python -m zerokit`): main(), then exit with its code.

    Just before exiting, gc.freeze() moves every object to the collector's permanent generation, which the
    interpreter's final collections skip: about 10 ms of a 110 ms `zerokit plan`, spent walking objects the process
    is dropping anyway. By then zerokit has closed its files and joined its threads and subprocesses (context
    managers throughout), so the only difference is that objects in reference cycles are not finalized one by one.
    """
    code = main()
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    run()

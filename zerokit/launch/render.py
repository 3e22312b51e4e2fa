"""Render the files people read or run themselves (hostfile, SLURM job, launch script) from `templates/`.

jinja2 runs with StrictUndefined, so a missing value is an error rather than an empty string in a script,
and every value that lands in shell text goes through the `sh` filter (shlex.quote).
"""

from __future__ import annotations

import functools
import shlex
from pathlib import Path
from typing import Any

TEMPLATES_DIR = Path(__file__).resolve().parent.parent.parent / "templates"


def _templates_dir() -> Path:
    try:
        import zerokit.templates as shipped  # installed: templates/ ships as the zerokit.templates package

        return Path(shipped.__file__).resolve().parent
    except ImportError:  # a source checkout without installation
        return TEMPLATES_DIR


def render(name: str, **values: Any) -> str:
    """Render `templates/NAME` with the given values; the result ends with one newline."""
    return _environment().get_template(name).render(**values).rstrip("\n") + "\n"


@functools.cache
def _environment() -> Any:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_templates_dir())),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["sh"] = lambda value: shlex.quote(str(value))
    # For text inside a `#` comment: a newline there would end the comment and start a command.
    env.filters["comment"] = lambda value: str(value).replace("\r", "\\r").replace("\n", "\\n")
    env.filters["shjoin"] = lambda values: " ".join(shlex.quote(str(v)) for v in values)
    return env

"""`dataclass`: the standard library's decorator, with the methods it writes compiled ahead instead of at every start.

`dataclasses.dataclass` writes each class's `__init__`, `__repr__`, `__eq__`, `__hash__` (and for a frozen class
`__setattr__` and `__delattr__`) as source text and compiles it with exec(): about a quarter of a millisecond a method,
over 20 ms of every `zerokit plan` before it can print a thing. This decorator runs the standard one unchanged, except
that its exec() first looks the text up in `zerokit/_dataclass_code.py`, the same texts compiled ahead as ordinary
module code (bytecode, cached like any module), and runs the code found there. A text not found (a class added or
changed since the file was written, another Python version) is compiled as the standard library would. So the
classes are standard dataclasses in every respect (`fields`, `replace`, `asdict`, the same methods from the same
text); only where their code comes from differs. After changing a dataclass, rewrite the file:

    python -m zerokit._dataclass

(tests/test_dataclass.py fails while it is out of date.)
"""

from __future__ import annotations

import _thread
import builtins
import dataclasses
import sys
from types import FunctionType
from typing import TYPE_CHECKING, Any

GENERATED = "zerokit/_dataclass_code.py"
"""The generated module, relative to the repository root."""

missed: list[str] = []
"""Texts compiled here because the generated module lacks them: what `python -m zerokit._dataclass` writes."""

_compiled: dict[str, FunctionType] | None = None
_lock = _thread.RLock()


def _exec(source: Any, globals: dict | None = None, locals: dict | None = None, /) -> None:
    """exec() for dataclasses: a text compiled ahead defines its function from that code, anything else goes to exec.

    What the standard library execs is one `def` statement (no defaults, decorators or annotations on it) into a
    fresh namespace; making a function of the same code with the same globals is what running it does."""
    global _compiled
    if _compiled is None:
        from zerokit._dataclass_code import SOURCES

        _compiled = SOURCES
    fn = _compiled.get(source) if isinstance(source, str) and globals is not None and locals is not None else None
    if fn is None:
        if isinstance(source, str):
            missed.append(source)
        if globals is None:
            frame = sys._getframe(1)
            globals, locals = frame.f_globals, frame.f_locals if locals is None else locals
        if isinstance(source, str):  # compiled without this module's `from __future__`, as in dataclasses
            source = compile(source, "<string>", "exec", dont_inherit=True)
        exec(source, globals, locals)  # noqa: S102
        return
    if "__builtins__" not in globals:
        globals["__builtins__"] = vars(builtins)  # as exec() does
    locals[fn.__name__] = FunctionType(fn.__code__, globals)


def _dataclass(cls: type | None = None, /, **options: Any) -> Any:
    """`dataclasses.dataclass(cls, **options)`, its exec() served from the generated module."""

    def wrap(cls: type) -> type:
        with _lock:
            # dataclasses calls exec() by its bare name, found in the module's namespace before the builtins
            previous = dataclasses.__dict__.get("exec")
            dataclasses.exec = _exec
            try:
                return dataclasses.dataclass(cls, **options)
            finally:
                if previous is None:
                    del dataclasses.exec
                else:
                    dataclasses.exec = previous

    return wrap if cls is None else wrap(cls)


if TYPE_CHECKING:
    from dataclasses import dataclass
else:
    dataclass = _dataclass


def import_all() -> list[str]:
    """Import every zerokit module (so every dataclass is made); returns those that could not be, and why."""
    import importlib
    import os

    package = os.path.dirname(os.path.abspath(__file__))
    skipped = []
    for folder, dirs, files in os.walk(package):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py") and name not in ("__main__.py", os.path.basename(GENERATED)):
                parts = os.path.relpath(os.path.join(folder, name[:-3]), os.path.dirname(package)).split(os.sep)
                module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
                try:
                    importlib.import_module(module)
                except ImportError as e:
                    skipped.append(f"{module} ({e})")
    return skipped


def write(path: str) -> int:
    """Make every zerokit dataclass with nothing compiled ahead and write the texts they compiled to `path`."""
    import os

    global _compiled
    _compiled = {}
    skipped = import_all()
    texts = [text for text in dict.fromkeys(missed) if _one_plain_def(text)]
    version = ".".join(map(str, sys.version_info[:2]))
    lines = [f'"""The methods `dataclasses.dataclass` writes for zerokit\'s classes (Python {version}), compiled ahead.',
             "",
             "Generated by `python -m zerokit._dataclass`; do not edit. zerokit._dataclass explains.",
             '"""',
             "# ruff: noqa",
             "# fmt: off",
             "",
             f"PYTHON = {tuple(sys.version_info[:2])}",
             '"""The Python these texts are from: another writes other texts (compiled at start, as before)."""',
             ""]
    for i, text in enumerate(texts):
        lines += [text, f"_{i} = {text.split('(', 1)[0].removeprefix('def ')}", ""]
    lines.append("SOURCES = {")
    lines += [f"    {text!r}: _{i}," for i, text in enumerate(texts)]
    lines.append("}")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, path), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    for line in skipped:
        print(f"not imported: {line}", file=sys.stderr)
    print(f"{path}: {len(texts)} texts from {len(missed)} methods")
    return 0


def _one_plain_def(text: str) -> bool:
    """Whether running `text` does nothing but define one function without defaults, decorators or annotations: what
    `_exec` can replace with making a function of the precompiled code."""
    import ast

    body = ast.parse(text).body
    if len(body) != 1 or not isinstance(body[0], ast.FunctionDef):
        return False
    fn = body[0]
    args = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs, fn.args.vararg, fn.args.kwarg]
    return (not fn.decorator_list and fn.returns is None and not fn.args.defaults
            and all(d is None for d in fn.args.kw_defaults)
            and all(a is None or a.annotation is None for a in args))


if __name__ == "__main__":
    import importlib

    # write() through the module the others import (running with -m made this copy __main__, a second one)
    sys.exit(importlib.import_module("zerokit._dataclass").write(GENERATED))

"""zerokit._dataclass: the standard decorator with its methods compiled ahead; the classes must not change at all."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from types import CodeType
from typing import ClassVar

import pytest

from zerokit import _dataclass, _dataclass_code
from zerokit.planner.types import Hardware, Plan, Training

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAME_PYTHON = tuple(sys.version_info[:2]) == _dataclass_code.PYTHON


def assert_same_code(ours: CodeType, theirs: CodeType) -> None:
    """The same code object but for where it was compiled (file name and line numbers)."""
    for attr in ("co_name", "co_argcount", "co_posonlyargcount", "co_kwonlyargcount", "co_flags", "co_code",
                 "co_names", "co_varnames", "co_freevars", "co_cellvars"):
        assert getattr(ours, attr) == getattr(theirs, attr), attr
    if hasattr(theirs, "co_qualname"):
        assert ours.co_qualname == theirs.co_qualname
    assert len(ours.co_consts) == len(theirs.co_consts)
    for a, b in zip(ours.co_consts, theirs.co_consts):
        if isinstance(b, CodeType):
            assert_same_code(a, b)
        else:
            assert type(a) is type(b) and a == b


def test_compiled_ahead_is_what_exec_compiles() -> None:
    """Each text's code in the file is what dataclasses' exec(text) compiles (without `from __future__` flags)."""
    assert len(_dataclass_code.SOURCES) > 100
    for text, fn in _dataclass_code.SOURCES.items():
        module = compile(text, "<string>", "exec", dont_inherit=True)
        [defined] = [c for c in module.co_consts if isinstance(c, CodeType)]
        assert_same_code(fn.__code__, defined)


@pytest.mark.skipif(not SAME_PYTHON, reason=f"texts written by Python {_dataclass_code.PYTHON}: this one writes "
                                            "others, compiled at start as without the file")
def test_generated_file_is_current() -> None:
    """Every zerokit dataclass finds its methods compiled ahead; otherwise: python -m zerokit._dataclass."""
    code = ("import sys, zerokit._dataclass as d; skipped = d.import_all(); "
            "print(len(d.missed)); print(*skipped, sep='\\n', file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                         env=dict(os.environ, PYTHONPATH=REPO))
    assert out.stdout.strip() == "0", "zerokit/_dataclass_code.py is out of date: run python -m zerokit._dataclass"
    assert not out.stderr.strip(), out.stderr


@pytest.mark.skipif(not SAME_PYTHON, reason="texts written by another Python")
@pytest.mark.parametrize("cls", [Hardware, Training, Plan])
def test_methods_come_from_the_file(cls: type) -> None:
    for name in ("__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__"):
        fn = getattr(cls, name)
        assert fn.__qualname__ == f"{cls.__qualname__}.{name}"
        fn = getattr(fn, "__wrapped__", fn)  # __repr__ is wrapped against recursion
        assert fn.__code__.co_filename == _dataclass_code.__file__, name
        assert fn.__globals__ is sys.modules[cls.__module__].__dict__  # as exec() with the module's namespace
    assert "exec" not in vars(dataclasses)  # the stand-in is gone once the class is made


def test_planner_types_are_standard_dataclasses() -> None:
    t = Training(seq_len=4096)
    assert dataclasses.is_dataclass(Training) and Training.__dataclass_params__.frozen
    assert [f.name for f in dataclasses.fields(Training)][:3] == ["seq_len", "micro_batch", "global_batch"]
    assert dataclasses.replace(t, seq_len=8) == Training(seq_len=8) != t
    assert hash(t) == hash(Training(seq_len=4096))
    assert dataclasses.asdict(t)["attention"] == "sdpa"
    assert repr(t).startswith("Training(seq_len=4096, micro_batch=None, ")
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'seq_len'"):
        t.seq_len = 1
    with pytest.raises(TypeError, match=r"__init__\(\) missing 1 required positional argument: 'seq_len'"):
        Training()


def _sample(decorator: object) -> type:
    @decorator(frozen=True)
    class Sample:
        """A class no zerokit module has: its texts are not in the file."""

        kind: ClassVar[str] = "sample"
        a: int
        b: tuple = dataclasses.field(default_factory=tuple)
        c: str = dataclasses.field(default="c", repr=False, compare=False)

        def __post_init__(self) -> None:
            if self.a < 0:
                raise ValueError("a < 0")

    return Sample


def test_a_text_not_compiled_ahead_is_compiled_as_the_standard_library_does() -> None:
    ours, theirs = _sample(_dataclass.dataclass), _sample(dataclasses.dataclass)
    for name in ("__init__", "__eq__", "__hash__", "__setattr__", "__delattr__"):
        assert_same_code(getattr(ours, name).__code__, getattr(theirs, name).__code__)
    assert repr(ours(1, (2,))) == repr(theirs(1, (2,))) == "_sample.<locals>.Sample(a=1, b=(2,))"
    assert ours(1) == ours(1, (), "x") and hash(ours(1)) == hash(theirs(1))
    with pytest.raises(ValueError, match="a < 0"):
        ours(-1)
    assert "exec" not in vars(dataclasses)

"""The user's files, read and written safely: regular files only, bounded in size, written atomically.

Every command reads its inputs (configs, hostfiles, plans, config.json) through `read_bytes`/`read_text` and
writes its outputs (`-o`, `--emit-*`, the launch's hostfile) through `write_atomic`, so none of them hangs
on a FIFO, reads /dev/zero until memory runs out, replaces a device node or a symlink, or leaves a temp file
behind when a write fails. Each failure is a `BadInput` with one line that says what to do.
"""

from __future__ import annotations

import contextlib
import os
import stat
from typing import BinaryIO

from zerokit.errors import BadInput

MAX_INPUT_BYTES = 16 * 2**20
"""A ds_config, hostfile or config.json is a few KiB; anything above 16 MiB is refused unread."""

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"))


class Unreadable(BadInput):
    """An input that cannot be read; `reason` is the message without the option name and path."""

    def __init__(self, what: str, path: str, reason: str):
        super().__init__(f"{what} {path}: {reason}" if what else f"{path}: {reason}")
        self.path, self.reason = path, reason


def kind(mode: int) -> str:
    """`a directory`, `a FIFO (named pipe)`, ... for what stat says is not a regular file."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _why(e: OSError) -> str:
    return (e.strerror or str(e)).lower() if e.errno is not None else str(e)


def _too_big(limit: int) -> str:
    return f"larger than {limit // 2**20} MiB, which no config or hostfile is; check the path"


def read_bytes(path: str, what: str = "", limit: int = MAX_INPUT_BYTES, directory_hint: str = "") -> bytes:
    """The content of a regular file of at most `limit` bytes. A FIFO, a device, a directory or a socket is refused
    before anything is read (the open does not block: O_NONBLOCK), and so is a file larger than `limit`.
    `directory_hint` ends the message for a directory: what the caller would take instead."""
    if not str(path).strip():
        raise BadInput(f"{what or 'the path'} is empty; give a file path")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise Unreadable(what, path, "no such file") from None
    except OSError as e:
        raise Unreadable(what, path, f"cannot open: {_why(e)}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            hint = directory_hint if stat.S_ISDIR(st.st_mode) else ""
            raise Unreadable(what, path, f"is {kind(st.st_mode)}, not a regular file{hint}")
        if st.st_size > limit:
            raise Unreadable(what, path, _too_big(limit))
        chunks, size = [], 0
        while size <= limit:  # a file that grows while it is read still stops at the limit
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as e:
        raise Unreadable(what, path, f"cannot read: {_why(e)}") from None
    finally:
        os.close(fd)
    if size > limit:
        raise Unreadable(what, path, _too_big(limit))
    return b"".join(chunks)


def read_stream(stream: BinaryIO | None, what: str = "stdin", limit: int = MAX_INPUT_BYTES) -> bytes:
    """At most `limit` bytes from an open stream (stdin), with the same bound as a file."""
    if stream is None:
        raise Unreadable("", what, f"{what} is closed; pipe the config in (zerokit lint - < ds_config.json)")
    try:
        data = stream.read(limit + 1)
    except (OSError, ValueError) as e:  # ValueError: a closed file object
        raise Unreadable("", what, f"cannot read: {e}") from None
    if data is None:  # a non-blocking stream with nothing in it
        data = b""
    if len(data) > limit:
        raise Unreadable("", what, f"more than {limit // 2**20} MiB arrived, which no config is; nothing was linted")
    return data


def decode_utf8(raw: bytes, what: str, path: str) -> str:
    """UTF-8 text; anything else (UTF-16, Latin-1, binary) is refused with the line of the first bad byte."""
    if b"\x00" in raw:
        raise Unreadable(what, path, "is binary (it holds NUL bytes), not a text file")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise Unreadable(what, path, f"is not UTF-8 text (byte 0x{raw[e.start]:02x} on line {line}); save it as "
                         "UTF-8") from None


def read_text(path: str, what: str = "", limit: int = MAX_INPUT_BYTES) -> str:
    """`read_bytes`, decoded as UTF-8."""
    return decode_utf8(read_bytes(path, what, limit), what, path)


# ---------------------------------------------------------------- writing

def same_path(a: str, b: str) -> bool:
    """Whether two paths name one file (hard links, symlinks and `./` spellings alike); by their resolved names where
    one does not exist yet."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def check_target(path: str, what: str, force: bool = False, example: str = "ds_config.json") -> None:
    """Refuse, before any work is done, a path the command must not write: an empty one, a directory, anything
    that is not a regular file (a symlink too: it counts as existing, and is never replaced), an existing file
    without `force`, or a missing or unwritable parent directory. `example` is the file name the messages suggest."""
    if not str(path).strip():
        raise BadInput(f"{what} is empty; give a file name such as {example}")
    if path == "-":  # stdin/stdout to most tools (`zerokit lint -` reads stdin): never a file named '-' here
        raise BadInput(f"{what} -: give a file name such as {example} ('-' is not stdout here: it would be a file "
                       "named '-')")
    if path.endswith((os.sep, os.sep + ".", os.sep + "..")) or path in (".", ".."):
        raise BadInput(f"{what} {path}: names a directory; give a file name such as "
                       f"{os.path.join(path, example)}")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise BadInput(f"{what} {path}: {_why(e)}") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise BadInput(f"{what} {path}: is a directory; give a file name such as "
                           f"{os.path.join(path, example)}")
        if not stat.S_ISREG(st.st_mode):
            raise BadInput(f"{what} {path}: is {kind(st.st_mode)}; zerokit writes only regular files and replaces "
                           "nothing else, even with --force: remove it or choose another path")
        if not force:
            raise BadInput(f"{what} {path}: file exists; pass --force to overwrite it")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise BadInput(f"{what} {path}: directory {parent} does not exist; create it first")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise BadInput(f"{what} {path}: directory {parent} is not writable; choose another path")


def create_and_remove(directory: str, prefix: str, suffix: str = "") -> None:
    """Create a file in `directory` and remove it at once; OSError where it cannot be created. `os.access` passes
    root everywhere: /proc and /sys refuse a file only when one is created."""
    import tempfile

    fd, tmp = tempfile.mkstemp(dir=directory, prefix=prefix, suffix=suffix)
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(tmp)


def check_creatable(path: str, what: str) -> None:
    """That a file can be created beside `path` (`create_and_remove`): for a command that works a while before it
    writes (`zerokit probe`, a minute). `check_target` asks `os.access`, which passes root everywhere: /proc and
    /sys refused the temp file only when the measuring was done."""
    parent = os.path.dirname(os.path.abspath(path))
    try:
        create_and_remove(parent, f".{os.path.basename(path)}.", ".tmp")
    except OSError as e:
        raise _cannot_create(what, path, parent, e) from None


def _cannot_create(what: str, path: str, parent: str, e: OSError) -> BadInput:
    return BadInput(f"{what} {path}: cannot create a file in {parent} ({_why(e)}); write elsewhere")


def _mode_for(path: str, mode: int) -> int:
    """The permission bits of the file that replaces `path`: those of the regular file there now (the execute bits of
    `mode` added), else `mode`."""
    try:
        st = os.lstat(path)
    except OSError:
        return mode
    return (stat.S_IMODE(st.st_mode) & 0o777) | (mode & 0o111) if stat.S_ISREG(st.st_mode) else mode


def write_atomic(path: str, data: str | bytes, what: str, force: bool = False, mode: int = 0o666,
                 make_parents: bool = False, keep_mode: bool = True) -> None:
    """Write a temp file beside `path`, then rename it over `path`: a reader never sees half a file. Whatever goes
    wrong (a full disk, a file size limit, a read-only directory, Ctrl-C), the temp file is removed and `path` is
    left as it was. A new file gets `mode` filtered through the umask, as any file the user creates; a file replaced
    (`force`) keeps its permission bits, as an editor's save does (a read-only one stays read-only), plus the execute
    bits `mode` asks for (a script written over a plain file can run); `keep_mode=False` gives it `mode` all the same
    (a file of secrets, 0o600, whatever the one it replaces allowed)."""
    import tempfile  # only when writing: it pulls in random and shutil

    if make_parents and str(path).strip():
        try:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        except OSError as e:
            raise BadInput(f"{what} {path}: cannot create its directory: {_why(e)}") from None
    check_target(path, what, force)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    parent = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
            umask = os.umask(0)
            os.umask(umask)
            os.fchmod(f.fileno(), _mode_for(path, mode & ~umask) if keep_mode else mode & ~umask)
        check_target(path, what, force)  # nothing appeared there meanwhile
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        if tmp is None:  # the temp file itself: /proc, a filesystem without new files
            raise _cannot_create(what, path, parent, e) from None
        raise BadInput(f"{what} {path}: cannot write: {_why(e)}") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

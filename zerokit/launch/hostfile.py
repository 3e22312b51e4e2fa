"""Hostnames and hostfiles: parsed strictly, because a hostname ends up in ssh, pdsh and batch scripts.

DeepSpeed's runner reads `HOST slots=N` lines; it accepts any non-blank text as a host. zerokit accepts
only what DNS and IP literals allow, so a value such as `a;rm -rf ~` or `$(id)` is refused before it can
reach a shell.
"""

from __future__ import annotations

import re

from zerokit.errors import BadInput
from zerokit.units import MAX_GPUS_PER_NODE

# RFC 1123 labels (letters, digits, hyphen; no leading/trailing hyphen), dot-separated; IPv4 literals match too.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOSTNAME_RE = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
# DeepSpeed's runner matches r'^(\S+)\s+slots=(\d+)': no spaces around '='. ASCII digits only here (\d also takes
# '²', on which DeepSpeed's int() then fails).
_HOSTFILE_LINE = re.compile(r"(?P<host>\S+)\s+slots=(?P<slots>\S+)")
MAX_SLOTS = MAX_GPUS_PER_NODE
"""Ranks on one node; DeepSpeed lists every slot (range(slots)), so an absurd count is refused here."""
MAX_HOSTS = 4096
"""Nodes of one job (32,768 GPUs at 8 a node): past it a host list is a mistake, and the preflight would ssh to every
one of them."""


def validate_hostname(host: str) -> str:
    """The hostname itself, or BadInput when it is not a plain DNS name or IPv4 address."""
    if len(host) > 253 or not HOSTNAME_RE.fullmatch(host):
        raise BadInput(f"host {_short(host)} is not a valid hostname; use letters, digits, '-' and '.' only")
    return host


def _short(text: str) -> str:
    shown = repr(text)
    return shown if len(shown) <= 60 else shown[:50] + "...'"


def _slots_ok(text: str) -> bool:
    return re.fullmatch(r"[0-9]{1,5}", text) is not None and 1 <= int(text) <= MAX_SLOTS


def read_hostfile(path: str, what: str = "--hostfile") -> dict[str, int]:
    """`{host: slots}` from a hostfile on disk: a regular UTF-8 file of reasonable size, in DeepSpeed's format."""
    from zerokit.fileio import read_text

    return parse_hostfile(read_text(path, what), path)


def parse_hostfile(text: str, source: str = "hostfile") -> dict[str, int]:
    """`{host: slots}` in file order from DeepSpeed's format (`worker-1 slots=8`, `#` comments)."""
    hosts: dict[str, int] = {}
    for lineno, raw in enumerate(re.split(r"\r\n|\r|\n", text), 1):  # the lines open() gives DeepSpeed
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if lineno == 1 and line.startswith("\ufeff"):
            raise BadInput(f"{source}:1: starts with a UTF-8 byte-order mark, which DeepSpeed reads as part of the "
                           "first host's name; save the file without it")
        m = _HOSTFILE_LINE.fullmatch(line)
        if not m:
            spaced = (" (no spaces around '=': DeepSpeed's parser refuses them)"
                      if re.search(r"slots\s+=|=\s+[0-9]", line) else "")
            raise BadInput(f"{source}:{lineno}: expected 'HOST slots=N'{spaced}, got {_short(raw.strip())}")
        host = m["host"]
        try:
            validate_hostname(host)
        except BadInput as e:
            raise BadInput(f"{source}:{lineno}: {e}") from None
        if not _slots_ok(m["slots"]):
            raise BadInput(f"{source}:{lineno}: slots must be a whole number from 1 to {MAX_SLOTS}, got "
                           f"{_short(m['slots'])}")
        if host in hosts:
            raise BadInput(f"{source}:{lineno}: host {host!r} is listed twice; DeepSpeed refuses duplicate hosts")
        if len(hosts) == MAX_HOSTS:
            raise BadInput(f"{source}:{lineno}: more than {MAX_HOSTS} hosts; split the job or check the file")
        hosts[host] = int(m["slots"])
    if not hosts:
        raise BadInput(f"{source}: no hosts found; write one 'HOST slots=N' line per node")
    return hosts


def parse_hosts(text: str, default_slots: int | None) -> dict[str, int]:
    """`--hosts node1:8,node2:8` or `--hosts node1,node2` (slots from --gpus-per-node)."""
    hosts: dict[str, int] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        host, sep, slots = item.partition(":")
        validate_hostname(host)
        if sep:
            if not _slots_ok(slots):
                raise BadInput(f"--hosts: slots for {host!r} must be a whole number from 1 to {MAX_SLOTS}, got "
                               f"{_short(slots)}")
            n = int(slots)
        elif default_slots is None:
            raise BadInput(f"--hosts: give slots as {host}:N or set --gpus-per-node")
        else:
            n = default_slots
        if host in hosts:
            raise BadInput(f"--hosts: host {host!r} is listed twice")
        if len(hosts) == MAX_HOSTS:
            raise BadInput(f"--hosts: more than {MAX_HOSTS} hosts; split the job or use a hostfile of at most that")
        hosts[host] = n
    if not hosts:
        raise BadInput("--hosts is empty; write it like node1:8,node2:8")
    return hosts

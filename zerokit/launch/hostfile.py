"""Hostnames and hostfiles: parsed strictly, because a hostname ends up in ssh, pdsh and batch scripts.

DeepSpeed's runner reads `HOST slots=N` lines; it accepts any non-blank text as a host. zerokit accepts
only what DNS and IP literals allow, so a value such as `a;rm -rf ~` or `$(id)` is refused before it can
reach a shell.
"""

from __future__ import annotations

import re

from zerokit.errors import BadInput
from zerokit.units import MAX_GPUS_PER_NODE

# RFC 1123 labels (letters, digits, hyphen; no leading/trailing hyphen), dot-separated; IPv4 literals match too. An
# underscore is allowed as well: /etc/hosts, ssh and pdsh take `node_1` (Docker and Kubernetes names have them), and so
# does DeepSpeed's runner; it is inert in a shell.
_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
HOSTNAME_RE = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
# deepspeed.launcher.runner._parse_hostfile: re.search(r'^(\S+)\s+slots=(\d+)', line.strip()), so no spaces around
# '=' and whatever follows the digits is ignored (OpenMPI's `node1 slots=4 max_slots=4`, a trailing `# comment`).
_HOSTFILE_LINE = re.compile(r"(?P<host>\S+)\s+slots=(?P<slots>\d+)")
_SLOTS_GIVEN = re.compile(r"\S+\s+slots=(?P<slots>\S*)")
"""A line DeepSpeed refuses for its slots alone (`slots=two`): said as such."""
MAX_SLOTS = MAX_GPUS_PER_NODE
"""Ranks on one node; DeepSpeed lists every slot (range(slots)), so an absurd count is refused here."""
MAX_HOSTS = 4096
"""Nodes of one job (32,768 GPUs at 8 a node): past it a host list is a mistake, and the preflight would ssh to every
one of them."""


def validate_hostname(host: str) -> str:
    """The hostname itself, or BadInput when it is not a plain DNS name or IPv4 address."""
    if len(host) > 253 or not HOSTNAME_RE.fullmatch(host):
        raise BadInput(f"host {_short(host)} is not a valid hostname; use letters, digits, '-', '_' and '.' only")
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
    """`{host: slots}` in file order, read as DeepSpeed's _parse_hostfile reads it (`worker-1 slots=8`, a line
    starting with `#` is a comment, the rest of a line after the slots is ignored); what it accepts is accepted,
    except a host name a shell would read."""
    hosts: dict[str, int] = {}
    for lineno, raw in enumerate(re.split(r"\r\n|\r|\n", text), 1):  # the lines open() gives DeepSpeed
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if lineno == 1 and line.startswith("\ufeff"):
            raise BadInput(f"{source}:1: starts with a UTF-8 byte-order mark, which DeepSpeed reads as part of the "
                           "first host's name; save the file without it")
        m = _HOSTFILE_LINE.match(line)
        given = _SLOTS_GIVEN.match(line)
        rest = given["slots"][len(m["slots"]):] if m and given else ""
        if rest and not rest.startswith("#"):  # `slots=1.5`: DeepSpeed reads the 1 and drops the rest
            raise BadInput(f"{source}:{lineno}: slots must be a whole number from 1 to {MAX_SLOTS}, got "
                           f"{_short(given['slots'])} (DeepSpeed would read {m['slots']}: the digits before the "
                           "first other character)")
        if given and not m:
            raise BadInput(f"{source}:{lineno}: slots must be a whole number from 1 to {MAX_SLOTS}, got "
                           f"{_short(given['slots'])}")
        if not m:
            spaced = (" (no spaces around '=': DeepSpeed's parser refuses them)"
                      if re.search(r"slots\s+=|=\s+[0-9]", line) else "")
            raise BadInput(f"{source}:{lineno}: expected 'HOST slots=N'{spaced}, got {_short(raw.strip())}")
        host = m["host"]
        try:
            validate_hostname(host)
        except BadInput as e:
            raise BadInput(f"{source}:{lineno}: {e}") from None
        try:
            slots = int(m["slots"])  # as DeepSpeed's int(): '²' matches \d and fails, '٣' is 3
        except ValueError:
            slots = 0
        if not 1 <= slots <= MAX_SLOTS:
            raise BadInput(f"{source}:{lineno}: slots must be a whole number from 1 to {MAX_SLOTS}, got "
                           f"{_short(m['slots'])}")
        if host in hosts:
            raise BadInput(f"{source}:{lineno}: host {host!r} is listed twice; DeepSpeed refuses duplicate hosts")
        if len(hosts) == MAX_HOSTS:
            raise BadInput(f"{source}:{lineno}: more than {MAX_HOSTS} hosts; split the job or check the file")
        hosts[host] = slots
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

"""Read a ds_config (JSON, HJSON) or an Accelerate YAML and remember where every key sits.

DeepSpeed reads its config with `hjson` (a superset of JSON); transformers and Accelerate read it with
`json.load`. So a file is tried as strict JSON first and as HJSON second, and the document records which
one parsed it: an HJSON-only file works with the `deepspeed` launcher but not behind HF.
"""

from __future__ import annotations

import bisect
import json
import re
from dataclasses import field
from pathlib import Path
from typing import Any

from zerokit._dataclass import dataclass
from zerokit.errors import BadInput, printable
from zerokit.fileio import MAX_INPUT_BYTES, Unreadable, read_bytes, read_stream

KeyPath = tuple[str | int, ...]
Position = tuple[int, int]

MAX_BYTES = MAX_INPUT_BYTES  # a ds_config is a few KiB; anything this big is not one (stdin too)
MAX_YAML_NODES = 100_000
"""YAML aliases let a 1 KiB file stand for a billion values (an alias bomb); a config expanding past this is refused."""
BOM = b"\xef\xbb\xbf"
# A string as one unrolled loop: `"(?:[^"\\]|\\.)*"` backtracks per character, 1.9 GB and 5 s for a 15 MiB string.
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[{}\[\]:,]')


class LoadError(BadInput):
    """A file that cannot be linted; carries the position of the problem."""

    def __init__(self, path: str, line: int, column: int, message: str):
        super().__init__(f"{printable(path)}:{line}:{column}: {printable(message)}")
        self.path, self.line, self.column, self.reason = path, line, column, message


@dataclass
class Document:
    """A parsed config and the 1-based (line, column) of each key, by key path."""

    path: str
    data: dict
    positions: dict[KeyPath, Position] = field(default_factory=dict)
    syntax: str = "json"  # json | hjson | yaml | accelerate (the ds_config Accelerate builds from a YAML's fields)
    duplicates: list[tuple[KeyPath, Position]] = field(default_factory=list)
    base_dir: Path | None = None
    json_error: str = ""  # why strict JSON rejected an HJSON or YAML file
    json_error_pos: Position | None = None
    bom: bool = False  # starts with a UTF-8 byte-order mark: hjson (DeepSpeed) skips it, json.load (HF) refuses it

    def where(self, key: KeyPath) -> Position:
        """Position of `key`, or of its nearest ancestor that has one (a missing key points at its section)."""
        for n in range(len(key), 0, -1):
            pos = self.positions.get(tuple(key[:n]))
            if pos:
                return pos
        return (1, 1)


class _Lines:
    def __init__(self, text: str):
        self.starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def pos(self, offset: int) -> Position:
        i = bisect.bisect_right(self.starts, offset) - 1
        return i + 1, offset - self.starts[i] + 1


def _json_positions(text: str) -> tuple[dict[KeyPath, Position], list[tuple[KeyPath, Position]]]:
    """One regex pass over valid JSON: the position of every object key, and keys repeated in one object."""
    lines = _Lines(text)
    positions: dict[KeyPath, Position] = {}
    duplicates: list[tuple[KeyPath, Position]] = []
    # stack frames: [path, kind, pending key or index, expecting_key, keys seen]
    stack: list[list[Any]] = []
    pending: str | int | None = None
    for m in _TOKEN.finditer(text):
        tok = m.group()
        top = stack[-1] if stack else None
        if tok in "{[":
            if top is None:
                path: KeyPath = ()
            elif top[1] == "[":
                path = top[0] + (top[2],)
            else:
                path = top[0] + (pending,)
            stack.append([path, tok, 0, True, set()])
        elif tok in "}]":
            if stack:
                stack.pop()
        elif tok == ":":
            if top is not None:
                top[3] = False
        elif tok == ",":
            if top is not None:
                if top[1] == "[":
                    top[2] += 1
                else:
                    top[3] = True
        elif top is not None and top[1] == "{" and top[3]:
            key = json.loads(tok) if "\\" in tok else tok[1:-1]
            pending = key
            keypath = top[0] + (key,)
            pos = lines.pos(m.start())
            if key in top[4]:
                duplicates.append((keypath, pos))
            else:
                top[4].add(key)
                positions[keypath] = pos
    return positions, duplicates


_HJSON_KEY = re.compile(r'''(?m)^[ \t]*(?:"((?:[^"\\]|\\.)*)"|'([^']*)'|([^\s:,{}\[\]"']+))[ \t]*:''')


def _hjson_positions(text: str, data: Any) -> dict[KeyPath, Position]:
    """HJSON keys may be unquoted; match `key:` at line starts in document order (one key per line)."""
    lines = _Lines(text)
    found = [(m.group(1) or m.group(2) or m.group(3), m.start(0) + len(m.group(0)) - len(m.group(0).lstrip()))
             for m in _HJSON_KEY.finditer(text)]
    positions: dict[KeyPath, Position] = {}
    cursor = 0

    def walk(node: Any, path: KeyPath) -> None:
        nonlocal cursor
        if isinstance(node, dict):
            for key, value in node.items():
                for i in range(cursor, len(found)):
                    if found[i][0] == key:
                        positions[path + (key,)] = lines.pos(found[i][1])
                        cursor = i + 1
                        break
                walk(value, path + (key,))
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, path + (i,))

    walk(data, ())
    return positions


def _decode(raw: bytes, path: str) -> str:
    if not raw.strip():
        raise LoadError(path, 1, 1, "empty file: a ds_config is a JSON object such as {\"train_batch_size\": 8}")
    if b"\x00" in raw:
        raise LoadError(path, 1, 1, "binary file, not a JSON/HJSON/YAML config")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise LoadError(path, line, 1, "not UTF-8 text: is this really a ds_config?") from None


MAX_DEPTH = 64  # DeepSpeed's deepest section is 4 levels down; deeper input is not a ds_config


def _depth(data: Any) -> int:
    """Nesting depth, iteratively: the rules may recurse, so absurd nesting is refused here."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        if d > MAX_DEPTH:
            break
        if isinstance(node, dict):
            stack.extend((v, d + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, d + 1) for v in node)
    return deepest


def _check_object(data: Any, path: str) -> dict:
    if _depth(data) > MAX_DEPTH:
        raise LoadError(path, 1, 1, f"nested more than {MAX_DEPTH} levels deep; not a ds_config")
    if not isinstance(data, dict):
        kind = {list: "a list", str: "a string", type(None): "null", bool: "a boolean"}.get(type(data), "a number")
        raise LoadError(path, 1, 1, f"top level is {kind}; a ds_config must be a JSON object {{...}}")
    return data


def parse_json(text: str, path: str) -> Document:
    """Strict JSON first (what HF reads), then HJSON (what DeepSpeed reads)."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise LoadError(path, 1, 1, "nested too deeply to be a ds_config") from None
    except ValueError as e:
        if not isinstance(e, json.JSONDecodeError):  # an integer of more than 4300 digits
            raise LoadError(path, *_long_number(text), "a number has more than 4300 digits; not a ds_config "
                            "value") from None
        json_error = _syntax_message(e.msg, text, e.pos)[0]
        try:
            import hjson

            data = hjson.loads(text)
        except RecursionError:
            raise LoadError(path, 1, 1, "nested too deeply to be a ds_config") from None
        except Exception as he:  # noqa: BLE001 - hjson raises HjsonDecodeError, and others on some garbage
            hpos = getattr(he, "pos", None)
            if not isinstance(hpos, int) or path.endswith(".json"):
                raise _syntax_error(path, text, e.msg, e.pos) from None
            raise _syntax_error(path, text, getattr(he, "msg", str(he)), hpos) from None
        if not isinstance(data, dict):  # HJSON reads almost any text as a string: the JSON error says more
            raise _syntax_error(path, text, e.msg, e.pos)
        data = _check_object(data, path)
        return Document(path, _plain(data), _hjson_positions(text, data), syntax="hjson", json_error=json_error,
                        json_error_pos=(e.lineno, e.colno))
    data = _check_object(data, path)
    try:
        positions, duplicates = _json_positions(text)
    except RecursionError:  # pragma: no cover - the scanner is iterative
        positions, duplicates = {}, []
    return Document(path, data, positions, "json", duplicates)


_ESCAPES = {"\t": ("tab", "\\t"), "\n": ("line break", "\\n"), "\r": ("carriage return", "\\r")}


def _syntax_message(msg: str, text: str, pos: int) -> tuple[str, int]:
    """A json/hjson decoder message made whole, and the offset it is about. The decoders leave the position to their
    exception's str() ("Invalid control character at: line 1 column 43"), and hjson leaves `%r` unformatted (its
    errmsg fills it in) and points after a control character instead of at it."""
    pos = max(0, min(pos, len(text)))
    if msg.startswith("Invalid control character"):
        if not (pos < len(text) and _is_control(text[pos])) and pos > 0 and _is_control(text[pos - 1]):
            pos -= 1  # hjson: the offset after the character
        char = text[pos] if pos < len(text) else "\0"
        name, escape = _ESCAPES.get(char, (f"U+{ord(char):04X}", f"\\u{ord(char):04x}"))
        line, col = _Lines(text).pos(pos)
        msg = (f"Invalid control character (a raw {name}) inside a string at line {line}, column {col}: JSON "
               f"strings cannot hold one; escape it as {escape}, or remove it")
        return msg, pos
    msg = msg.replace("%r", repr(text[pos:pos + 1]))
    if msg.endswith(" at"):  # "Unterminated string starting at"
        line, col = _Lines(text).pos(pos)
        msg += f" line {line}, column {col}"
        if msg.startswith("Unterminated string"):
            msg += ": the file ends before its closing \"; add it"
    return msg, pos


def _is_control(char: str) -> bool:
    return ord(char) < 0x20 or char == "\x7f"


def _syntax_error(path: str, text: str, msg: str, pos: int) -> LoadError:
    msg, pos = _syntax_message(msg, text, pos)
    return LoadError(path, *_Lines(text).pos(pos), f"syntax error: {msg}")


def _long_number(text: str) -> Position:
    m = re.search(r"[0-9]{4300}", text)
    return _Lines(text).pos(m.start()) if m else (1, 1)


def _plain(value: Any) -> Any:
    """hjson returns OrderedDicts; rules compare against plain types."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def parse_yaml(text: str, path: str) -> Document:
    import yaml

    loader_cls = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        loader = loader_cls(text)
        try:
            node = loader.get_single_node()
            if node is not None:
                _check_expansion(node, path)
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        raise LoadError(path, line, col, f"YAML syntax error: {e.problem or e}") from None
    except (yaml.YAMLError, RecursionError) as e:
        raise LoadError(path, 1, 1, f"YAML error: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    except ValueError as e:  # an integer of more than 4300 digits
        raise LoadError(path, *_long_number(text), f"YAML value not usable: {str(e).splitlines()[0][:80]}") from None
    data = _check_object(data, path)
    positions: dict[KeyPath, Position] = {}
    stack = [(node, ())]
    while stack:
        n, p = stack.pop()
        if isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                key = getattr(k, "value", None)
                if isinstance(key, str):
                    positions[p + (key,)] = (k.start_mark.line + 1, k.start_mark.column + 1)
                    stack.append((v, p + (key,)))
        elif isinstance(n, yaml.SequenceNode):
            stack.extend((v, p + (i,)) for i, v in enumerate(n.value))
    doc = Document(path, data, positions, "yaml")
    try:
        json.loads(text)
    except json.JSONDecodeError as e:  # most YAML is no JSON: what HF's json.load says of it
        doc.json_error, doc.json_error_pos = _syntax_message(e.msg, text, e.pos)[0], (e.lineno, e.colno)
    except (ValueError, RecursionError) as e:  # a number of 4300+ digits, nesting json.loads cannot follow
        doc.json_error, doc.json_error_pos = (str(e).splitlines() or [type(e).__name__])[0], (1, 1)
    return doc


def as_json(value: Any) -> Any:
    """A YAML value as the JSON a ds_config holds: keys as json.dumps writes them (1 -> "1", true -> "true"), dates
    and bytes as strings, sets and pairs as lists. The YAML loader has bounded its depth and size."""
    if isinstance(value, dict):
        return {k if isinstance(k, str) else json.dumps(k) if isinstance(k, (bool, int, float)) or k is None
                else str(k): as_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [as_json(v) for v in value]
    if isinstance(value, (str, bool, int, float)) or value is None:
        return value
    return str(value)


def _check_expansion(root: Any, path: str) -> None:
    """Refuse a YAML document whose aliases expand past MAX_YAML_NODES values (or refer to themselves).

    The composer shares an aliased node instead of copying it, so the document is small in memory; it is everything
    that walks it afterwards (the rules, json.dumps, Accelerate) that expands every alias. The expanded size is
    counted once per distinct node, so this costs as little as the document itself."""
    import yaml

    size: dict[int, int] = {}
    active: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            active.discard(key)
            children = _children(node, yaml)
            total = 1 + sum(size[id(c)] for c in children)
            size[key] = total
            if total > MAX_YAML_NODES:
                line, col = node.start_mark.line + 1, node.start_mark.column + 1
                raise LoadError(path, line, col, f"YAML aliases expand to more than {MAX_YAML_NODES:,} values (an "
                                "alias bomb?); an Accelerate config has a few dozen")
            continue
        if key in size:
            continue
        if key in active:
            raise LoadError(path, node.start_mark.line + 1, node.start_mark.column + 1,
                            "a YAML alias refers to the collection that contains it (a recursive structure)")
        active.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node, yaml) if id(c) not in size)


def _children(node: Any, yaml: Any) -> list[Any]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def is_yaml_name(name: str) -> bool:
    return name.lower().endswith((".yaml", ".yml"))


def load_text(text: str, path: str, yaml_syntax: bool = False, bom: bool = False) -> Document:
    if not text.strip():
        raise LoadError(path, 1, 1, "empty file: a ds_config is a JSON object such as {\"train_batch_size\": 8}")
    doc = parse_yaml(text, path) if yaml_syntax else parse_json(text, path)
    doc.bom = bom
    return doc


def load_bytes(raw: bytes, path: str, yaml_syntax: bool = False) -> Document:
    """Parse raw bytes (a file's or stdin's): checks for empty, binary and non-UTF-8 input come first."""
    return load_text(_decode(raw, path), path, yaml_syntax=yaml_syntax, bom=raw.startswith(BOM))


def load_stdin(stream: Any, path: str = "<stdin>") -> Document:
    """stdin, bounded like a file; a closed stdin is one unreadable input, not a crash."""
    try:
        raw = read_stream(stream, "stdin", MAX_BYTES)
    except Unreadable as e:
        raise LoadError(path, 1, 1, e.reason) from None
    return load_bytes(raw, path)


def load_file(path: str, yaml_syntax: bool | None = None) -> Document:
    """Read and parse one file; every failure is a LoadError with a position. Only a regular file of at most
    MAX_BYTES is read: a FIFO, a device or a directory is refused before anything is read. The syntax follows the
    name (`.yaml`/`.yml`: an Accelerate config) unless `yaml_syntax` says."""
    try:
        raw = read_bytes(path, "", MAX_BYTES, directory_hint="; pass the config files in it (a glob such as dir/*.json)")
    except Unreadable as e:
        raise LoadError(path, 1, 1, e.reason) from None
    doc = load_bytes(raw, path, yaml_syntax=is_yaml_name(path) if yaml_syntax is None else yaml_syntax)
    doc.base_dir = Path(path).resolve().parent
    return doc

"""Lint files: expand globs, load each, run the rules, and say which exit code the findings mean.

    from zerokit.lint.engine import lint_paths, Context
    result = lint_paths(["ds_config.json"], Context(target="trainer", world_size=8))
    result.findings, result.exit_code(strict=False)
"""

from __future__ import annotations

import copy
import glob
import os
import re
from collections.abc import Iterator
from dataclasses import field
from typing import BinaryIO

from zerokit._dataclass import dataclass
from zerokit.errors import EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK
from zerokit.fileio import same_path
from zerokit.lint import accelerate
from zerokit.lint.findings import ERROR, WARNING, Finding
from zerokit.lint.loader import Document, LoadError, as_json, load_file, load_stdin, load_text
from zerokit.lint.rules import Context, run_rules

__all__ = ["Context", "LintResult", "expand", "lint_document", "lint_paths", "lint_text"]

STDIN = "-"
UNREADABLE = "ZK001"
SCHEMA_ONLY = ("ZK100", "ZK106", "ZK107", "ZK502")  # not run on the ds_config synthesized from an Accelerate YAML


@dataclass
class LintResult:
    findings: list[Finding] = field(default_factory=list)
    files: int = 0
    unreadable: int = 0

    def exit_code(self, strict: bool = False) -> int:
        """0 clean, 1 errors (or warnings with strict), 2 when any input could not be read. ZK107 (a file DeepSpeed
        reads but json.load behind HF refuses) is an error like any other: zerokit read it."""
        if self.unreadable:
            return EXIT_BAD_INPUT
        bad = (ERROR, WARNING) if strict else (ERROR,)
        return EXIT_FINDINGS if any(f.severity in bad for f in self.findings) else EXIT_OK


def _unreadable(e: LoadError) -> Finding:
    return Finding(e.path, e.line, e.column, ERROR, UNREADABLE, "", e.reason)


def lint_document(doc: Document, ctx: Context) -> list[Finding]:
    """Findings for one parsed ds_config or Accelerate YAML (a YAML's deepspeed_config_file is linted too)."""
    found = _lint_document(doc, ctx)
    order = {p: i for i, p in enumerate(dict.fromkeys(f.path for f in found))}
    return sorted(found, key=lambda f: (order[f.path], f.line, f.column))


def _lint_document(doc: Document, ctx: Context) -> list[Finding]:
    if not accelerate.is_accelerate_yaml(doc):
        if doc.syntax == "yaml":  # no Accelerate config: lint the ds_config it would be, as the JSON of it
            doc = copy.copy(doc)
            doc.data = as_json(doc.data)
        return run_rules(doc, ctx)
    out = accelerate.yaml_findings(doc)
    acc = Context("accelerate", ctx.world_size, ctx.gpu_memory)
    ref = accelerate.config_file(doc)
    if ref is None:
        ds = doc.data.get("deepspeed_config")
        if isinstance(ds, dict) and ds.get("deepspeed_config_file") in (None, "none"):
            synth, names = accelerate.synthesize(doc)
            out += run_rules(synth, acc, key_names=names, skip=SCHEMA_ONLY)
        return out
    line, col = doc.where(("deepspeed_config", "deepspeed_config_file"))
    if "\0" in ref:  # no file can have that name; os.stat would raise ValueError
        return out + [Finding(doc.path, line, col, ERROR, UNREADABLE, "deepspeed_config.deepspeed_config_file",
                              f"deepspeed_config_file {ref!r} has a NUL byte, so it names no file; give the ds_config "
                              "JSON's path")]
    target = ref if os.path.isabs(ref) else os.path.join(str(doc.base_dir or "."), ref)
    shown = os.path.relpath(target) if not os.path.isabs(ref) else ref
    if not os.path.isabs(ref) and doc.base_dir is not None and not same_path(str(doc.base_dir), "."):
        # transformers' HfDeepSpeedConfig opens the path as given: from the directory `accelerate launch` runs in
        here = "which exists" if os.path.isfile(ref) else "where there is no such file"
        out.append(Finding(doc.path, line, col, WARNING, "ZK602", "deepspeed_config.deepspeed_config_file",
                           f"deepspeed_config_file {ref!r} is relative: Accelerate opens it from the directory "
                           f"`accelerate launch` runs in, not next to this YAML (zerokit linted {shown}); launched "
                           f"from here it is ./{os.path.normpath(ref)}, {here}. Give an absolute path, or launch from "
                           f"{os.path.relpath(str(doc.base_dir))}"))
    if doc.base_dir is not None and same_path(target, doc.path):
        return out + [Finding(doc.path, line, col, ERROR, UNREADABLE, "deepspeed_config.deepspeed_config_file",
                              f"deepspeed_config_file {shown} is this Accelerate YAML itself; it must name the ds_config "
                              "JSON file")]
    try:
        child = load_file(target, yaml_syntax=False)  # HfDeepSpeedConfig reads it with json.load, whatever its name
    except LoadError as e:
        return out + [Finding(doc.path, line, col, ERROR, UNREADABLE, "deepspeed_config.deepspeed_config_file",
                              f"deepspeed_config_file {shown}: {e.reason}")]
    child.path = shown
    return out + run_rules(child, acc)


def lint_text(text: str, ctx: Context, path: str = "<stdin>") -> list[Finding]:
    return lint_document(load_text(text, path), ctx)


def expand(patterns: list[str]) -> tuple[list[str], list[Finding]]:
    """Shell-style globs (** included) to files, in order, without repeats; a glob matching nothing is a finding.

    A pattern naming a file that exists is that file, brackets and all (`[x].json`). `**` walks directories without
    following symlinks to directories, so a link back up the tree cannot make the walk endless."""
    files: list[str] = []
    missing: list[Finding] = []
    seen = set()
    for pat in patterns:
        if pat != STDIN and glob.has_magic(pat) and not os.path.lexists(pat):
            matches = sorted(m for m in _glob(pat) if os.path.isfile(m))
            if not matches:
                missing.append(Finding(pat, 1, 1, ERROR, UNREADABLE, "", "no file matches this pattern"))
        else:
            matches = [pat]
        for m in matches:
            if m not in seen or m == STDIN:
                seen.add(m)
                files.append(m)
    return files, missing


def _glob(pattern: str) -> Iterator[str]:
    """glob.glob, except that `**` never descends into a symlinked directory (glob.glob does: with two links back
    up the tree it walks 2^40 paths). As in glob and the shell, a wildcard does not match a leading dot."""
    if "**" not in pattern:
        yield from glob.iglob(pattern)
        return
    parts = pattern.split("/")
    first_magic = next(i for i, part in enumerate(parts) if glob.has_magic(part))
    base = "/".join(parts[:first_magic]) or ("/" if pattern.startswith("/") else "")
    tail = _glob_regex(parts[first_magic:])
    for root, _dirs, names in os.walk(base or ".", followlinks=False):
        rel_root = os.path.relpath(root, base or ".")
        for name in names:
            rel = name if rel_root == "." else f"{rel_root}/{name}"
            if tail.fullmatch(rel):
                yield os.path.join(base, rel) if base else rel


def _glob_regex(parts: list[str]) -> re.Pattern[str]:
    """The magic tail of a pattern (`**/b*.json`) as a regex over a relative path; `**` is zero or more
    directories."""
    out = []
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "**":
            out.append(r"(?:[^./][^/]*/)*" + (r"[^./][^/]*" if last else ""))
        else:
            out.append(_glob_part(part) + ("" if last else "/"))
    return re.compile("".join(out))


def _glob_part(part: str) -> str:
    """One path component: `*`, `?` and `[...]` as fnmatch means them, never matching `/` or a leading dot."""
    out = [r"(?!\.)"] if part[:1] in ("*", "?", "[") else []
    i = 0
    while i < len(part):
        c = part[i]
        end = part.find("]", i + 2) if c == "[" else -1
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif end != -1:
            body = part[i + 1:end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\") + "]")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def lint_paths(patterns: list[str], ctx: Context, stdin_text: str | None = None,
               stdin: BinaryIO | None = None) -> LintResult:
    """Lint every file; an unreadable one is reported (ZK001) and the rest are still linted. `-` reads `stdin_text`
    when given, else at most MAX_BYTES from the `stdin` stream (None: stdin is closed)."""
    files, missing = expand(patterns)
    if files:  # `lint 'a/*.json' 'b/*.yaml'` in CI: a pattern matching nothing is only worth a warning
        missing = [Finding(f.path, f.line, f.column, WARNING, f.code, f.key, f.message) for f in missing]
    result = LintResult(findings=list(missing), unreadable=0 if files else len(missing))
    for path in files:
        result.files += 1
        try:
            if path == STDIN:
                doc = load_text(stdin_text, "<stdin>") if stdin_text is not None else load_stdin(stdin)
            else:
                doc = load_file(path)
            found = lint_document(doc, ctx)
            result.findings += found
            result.unreadable += any(f.code == UNREADABLE for f in found)
        except LoadError as e:
            result.unreadable += 1
            result.findings.append(_unreadable(e))
    return result

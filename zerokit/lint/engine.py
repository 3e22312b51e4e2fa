"""Lint files: expand globs, load each, run the rules, and say which exit code the findings mean.

    from zerokit.lint.engine import lint_paths, Context
    result = lint_paths(["ds_config.json"], Context(target="trainer", world_size=8))
    result.findings, result.exit_code(strict=False)
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field

from zerokit.errors import EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK
from zerokit.lint import accelerate
from zerokit.lint.findings import ERROR, WARNING, Finding
from zerokit.lint.loader import Document, LoadError, load_file, load_text
from zerokit.lint.rules import Context, run_rules

__all__ = ["Context", "LintResult", "expand", "lint_document", "lint_paths", "lint_text"]

STDIN = "-"
UNREADABLE = "ZK001"
HF_UNREADABLE = "ZK107"  # valid HJSON that json.load (HF Trainer, Accelerate) cannot read: malformed JSON for them
SCHEMA_ONLY = ("ZK100", "ZK106", "ZK107", "ZK502")  # not run on the ds_config synthesized from an Accelerate YAML


@dataclass
class LintResult:
    findings: list[Finding] = field(default_factory=list)
    files: int = 0
    unreadable: int = 0

    def exit_code(self, strict: bool = False) -> int:
        """0 clean, 1 errors (or warnings with strict), 2 when any input could not be read (by its consumer)."""
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
        return run_rules(doc, ctx)
    out = accelerate.yaml_findings(doc)
    acc = Context("accelerate", ctx.world_size, ctx.gpu_memory)
    ref = accelerate.config_file(doc)
    if ref is None:
        if isinstance(doc.data.get("deepspeed_config"), dict):
            synth, names = accelerate.synthesize(doc)
            out += run_rules(synth, acc, key_names=names, skip=SCHEMA_ONLY)
        return out
    target = ref if os.path.isabs(ref) else os.path.join(str(doc.base_dir or "."), ref)
    shown = os.path.relpath(target) if not os.path.isabs(ref) else ref
    try:
        child = load_file(target)
    except LoadError as e:
        line, col = doc.where(("deepspeed_config", "deepspeed_config_file"))
        return out + [Finding(doc.path, line, col, ERROR, UNREADABLE, "deepspeed_config.deepspeed_config_file",
                              f"deepspeed_config_file {shown}: {e.reason}")]
    child.path = shown
    return out + run_rules(child, acc)


def lint_text(text: str, ctx: Context, path: str = "<stdin>") -> list[Finding]:
    return lint_document(load_text(text, path), ctx)


def expand(patterns: list[str]) -> tuple[list[str], list[Finding]]:
    """Shell-style globs (** included) to files, in order, without repeats; a glob matching nothing is a finding."""
    files: list[str] = []
    missing: list[Finding] = []
    seen = set()
    for pat in patterns:
        if pat != STDIN and glob.has_magic(pat):
            matches = sorted(glob.glob(pat, recursive=True))
            matches = [m for m in matches if os.path.isfile(m)]
            if not matches:
                missing.append(Finding(pat, 1, 1, ERROR, UNREADABLE, "", "no file matches this pattern"))
        else:
            matches = [pat]
        for m in matches:
            if m not in seen or m == STDIN:
                seen.add(m)
                files.append(m)
    return files, missing


def lint_paths(patterns: list[str], ctx: Context, stdin_text: str | None = None) -> LintResult:
    """Lint every file; an unreadable one is reported (ZK001) and the rest are still linted."""
    files, missing = expand(patterns)
    if files:  # `lint 'a/*.json' 'b/*.yaml'` in CI: a pattern matching nothing is only worth a warning
        missing = [Finding(f.path, f.line, f.column, WARNING, f.code, f.key, f.message) for f in missing]
    result = LintResult(findings=list(missing), unreadable=0 if files else len(missing))
    for path in files:
        result.files += 1
        try:
            if path == STDIN:
                doc = load_text(stdin_text or "", "<stdin>")
            else:
                doc = load_file(path)
            found = lint_document(doc, ctx)
            result.findings += found
            result.unreadable += any(f.code in (UNREADABLE, HF_UNREADABLE) for f in found)
        except LoadError as e:
            result.unreadable += 1
            result.findings.append(_unreadable(e))
    return result

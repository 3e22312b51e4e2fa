"""Findings to text, JSON or GitHub workflow commands (formats fixed by CONTRACT.md)."""

from __future__ import annotations

import json

from zerokit.errors import printable
from zerokit.lint.findings import Finding

FORMATS = ("text", "json", "github")


def _gh_escape(text: str, prop: bool = False) -> str:
    # https://docs.github.com/actions/reference/workflow-commands-for-github-actions (data and property escaping);
    # other line breaks (\v, \f, \x85, \u2028 in a file name) as in text: one command stays one line
    text = printable(text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A"))
    if prop:
        text = text.replace(":", "%3A").replace(",", "%2C")
    return text


def text_line(f: Finding) -> str:
    """PATH:LINE:COL: SEVERITY CODE message (did you mean 'KEY'?)"""
    return f"{printable(f.path)}:{f.line}:{f.column}: {f.severity} {f.code} {printable(f.message)}"


def github_line(f: Finding) -> str:
    """::error file=PATH,line=LINE,col=COL,title=CODE::message"""
    level = "error" if f.severity == "error" else "warning"
    return (f"::{level} file={_gh_escape(f.path, True)},line={f.line},col={f.column},title={_gh_escape(f.code, True)}"
            f"::{_gh_escape(f.message)}")


def summary(findings: list[Finding], files: int) -> str:
    errors = sum(f.severity == "error" for f in findings)
    warnings = sum(f.severity == "warning" for f in findings)
    noun = "file" if files == 1 else "files"
    if not findings:
        return f"{files} {noun} checked: no problems"
    return f"{files} {noun} checked: {errors} error{'s' * (errors != 1)}, {warnings} warning{'s' * (warnings != 1)}"


def render(findings: list[Finding], fmt: str, files: int = 0) -> str:
    """The whole report; text ends with a one-line summary, json is a list, github one command per finding."""
    if fmt == "json":  # one finding per line: readable, greppable, and json's C encoder (indent= is pure Python)
        return "[\n" + ",\n".join(json.dumps(f.as_dict()) for f in findings) + "\n]" if findings else "[]"
    if fmt == "github":
        return "\n".join(github_line(f) for f in findings)
    lines = [text_line(f) for f in findings]
    return "\n".join(lines)

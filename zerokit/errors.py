"""Errors that reach the user as one line and a documented exit code (see CONTRACT.md)."""

EXIT_OK = 0
EXIT_FINDINGS = 1  # plan: nothing fits; lint: errors found
EXIT_BAD_INPUT = 2
EXIT_PREFLIGHT = 3
EXIT_INTERNAL = 70  # a bug in zerokit; never expected, still one line


def one_line(exc: BaseException, limit: int = 160) -> str:
    """An exception's message as one line (its lines joined, whitespace collapsed), at most `limit` characters:
    what a one-line error quotes from a library's multi-line message (huggingface_hub's validation errors name the
    field on one line and the cause on the next)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


def printable(message: str) -> str:
    """A message with its control characters and line breaks escaped as Python writes them (a newline as \\n,
    U+2028 as \\u2028), so that it stays the one line it was written as: a path or a script name given with a newline
    in it, echoed back in an error or a lint finding."""
    return message if message.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)


class ZerokitError(Exception):
    """Base class: the message is one line that says what is wrong and how to fix it."""

    exit_code = EXIT_BAD_INPUT


class BadInput(ZerokitError):
    """The user's input cannot be used: a wrong unit, a missing file, malformed JSON, an unknown name."""

    exit_code = EXIT_BAD_INPUT


class PreflightFailed(ZerokitError):
    exit_code = EXIT_PREFLIGHT

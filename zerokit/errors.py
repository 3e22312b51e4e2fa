"""Errors that reach the user as one line and a documented exit code (see CONTRACT.md)."""

EXIT_OK = 0
EXIT_FINDINGS = 1  # plan: nothing fits; lint: errors found
EXIT_BAD_INPUT = 2
EXIT_PREFLIGHT = 3
EXIT_INTERNAL = 70  # a bug in zerokit; never expected, still one line


class ZerokitError(Exception):
    """Base class: the message is one line that says what is wrong and how to fix it."""

    exit_code = EXIT_BAD_INPUT


class BadInput(ZerokitError):
    """The user's input cannot be used: a wrong unit, a missing file, malformed JSON, an unknown name."""

    exit_code = EXIT_BAD_INPUT


class PreflightFailed(ZerokitError):
    exit_code = EXIT_PREFLIGHT

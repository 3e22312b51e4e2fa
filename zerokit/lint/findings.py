"""The one record lint produces; renderers and the CLI only read it."""

from __future__ import annotations

from zerokit._dataclass import dataclass

ERROR = "error"
WARNING = "warning"


@dataclass(frozen=True)
class Finding:
    """One problem at one key: `key` is the dotted path, `suggestion` the corrected key or value if there is one."""

    path: str
    line: int
    column: int
    severity: str
    code: str
    key: str
    message: str
    suggestion: str | None = None

    def as_dict(self) -> dict:
        return {"path": self.path, "line": self.line, "column": self.column, "severity": self.severity,
                "code": self.code, "key": self.key, "message": self.message, "suggestion": self.suggestion}


def dotted(keypath: tuple) -> str:
    """('zero_optimization', 'offload_param', 'device') -> 'zero_optimization.offload_param.device'."""
    return ".".join(f"[{k}]" if isinstance(k, int) else str(k) for k in keypath).replace(".[", "[")


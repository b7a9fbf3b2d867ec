"""fa.Support: the answer of is_supported -- true or false as a bool is, with the library's reason attached.

A plain (bool, str) tuple is always truthy, so `if fa.is_supported(...)` would pass for an unsupported problem; a
Support is truthy exactly when the problem is supported, and `.reason` says why not ("" when it is).
"""

from __future__ import annotations


class Support:
    """Truthy when supported; `.supported` (bool) and `.reason` (str, "" when supported)."""

    __slots__ = ("supported", "reason")

    def __init__(self, supported: bool, reason: str = "") -> None:
        self.supported = bool(supported)
        self.reason = "" if self.supported else str(reason)

    def __bool__(self) -> bool:
        return self.supported

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Support):
            return (self.supported, self.reason) == (other.supported, other.reason)
        if isinstance(other, bool):
            return self.supported == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.supported, self.reason))

    def __repr__(self) -> str:
        return f"Support(supported={self.supported}, reason={self.reason!r})"

    def __str__(self) -> str:
        return "supported" if self.supported else f"not supported: {self.reason}"

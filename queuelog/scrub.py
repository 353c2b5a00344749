"""Cleaning worker error text before it is stored (V-10): no secrets, bounded length."""
from __future__ import annotations

import re

_REDACTED = "[redacted]"

_PATTERNS = [
    # scheme://user:password@host → keep the scheme and host, drop the credentials
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s/@:]+:[^\s/@]*@"), r"\1" + _REDACTED + "@"),
    # Authorization headers and bearer/basic tokens
    (re.compile(r"(?i)\b(bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{8,}"), r"\1 " + _REDACTED),
    # password=..., api_key: ..., secret="..."
    (re.compile(
        r"(?i)\b((?:password|passwd|pwd|secret|api[_-]?key|access[_-]?key|token|auth|credentials?)"
        r"[\"']?\s*[:=]\s*)(\"[^\"]*\"|'[^']*'|[^\s,;&]+)"
    ), r"\1" + _REDACTED),
    # queuelog's own API keys wherever they appear
    (re.compile(r"\bql_[A-Za-z0-9_-]{16,}"), "ql_" + _REDACTED),
]


def scrub_error(text: str | None, max_chars: int) -> str | None:
    """Redact credentials and trim to ``max_chars`` so a worker cannot leak or flood through errors."""
    if text is None:
        return None
    # PostgreSQL text cannot hold NUL, and a worker's failure must never be refused for its message.
    text = text.replace("\x00", "")
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    if len(text) > max_chars:
        marker = " … [truncated]"
        text = text[: max(0, max_chars - len(marker))] + marker
    return text

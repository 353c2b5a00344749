"""Cleaning worker error text before it is stored (V-10): no secrets, bounded length.

The credentials we redact are one table, ``SCRUB_RULES``, applied in order; tests/unit/test_scrub.py holds an
example for every row and a list of ordinary error text that must come through unchanged.
"""

from __future__ import annotations

import re
from typing import NamedTuple

REDACTED = "[redacted]"

# Words that make a name a secret's name. Matched inside a longer name too (DB_PASSWORD, PGPASSWORD,
# MYSQL_PWD, AWS_SECRET_ACCESS_KEY, client_secret, x-api-key), but only where the word ends the name or a
# part of it, so "author=", "max_tokens:" or "passwords:" stay as they are.
_SECRET_WORDS = (
    r"password|passwd|pwd|secret|api[_-]?key|access[_-]?key|private[_-]?key|token|auth"
    r"|credentials?"
)


class ScrubRule(NamedTuple):
    """One kind of credential: what finds it and what it is replaced with."""

    name: str
    pattern: re.Pattern
    replacement: str


# Error text may be as long as a request body (1 MiB), so no pattern may cost more than linear time: each
# starts only where a run of its characters starts (a look-behind, not \b, which also matches inside
# "a-a-a…"), bounds its repetitions, or never backtracks (*+).
SCRUB_RULES: tuple[ScrubRule, ...] = (
    # scheme://user:password@host and scheme://:password@host (redis, an empty user): keep the scheme and
    # host. The password runs to the last "@" before the path, so one containing "@" is not half left.
    ScrubRule(
        "url-credentials",
        re.compile(r"(?i)(?<![\w+.-])([a-z][a-z0-9+.-]{0,31}://)[^\s/@:]*:(?:[^\s/@]*+@)+"),
        r"\1" + REDACTED + "@",
    ),
    # Authorization: Bearer …, Basic …, token … (GitHub's). Before "name=value", which would take the word
    # "Bearer" for the value and leave the token. A plain word after it ("Basic authentication failed",
    # "token validation failed") is ordinary text, and so is a name=value ("/oauth/token client_id=web"):
    # a random token is practically never a word, and "=" only pads its end.
    ScrubRule(
        "authorization-scheme",
        re.compile(
            r"\b((?i:bearer|basic|token))\s+(?![A-Za-z][a-z]*(?![\w.~+/=-]))"
            r"[\w.~+/-]{8,}=*(?![\w.~+/=-])"
        ),
        r"\1 " + REDACTED,
    ),
    # password=..., DB_PASSWORD=..., api_key: ..., "client_secret": "...", secret='...'.
    ScrubRule(
        "secret-assignment",
        re.compile(
            r"(?i)(?<![\w.-])([\w.-]{0,64}?(?:" + _SECRET_WORDS + r")(?:[_.-][\w.-]{0,64})?"
            r"[\"']?\s*[:=]\s*)(\"[^\"]*\"|'[^']*'|[^\s,;&]+)"
        ),
        r"\1" + REDACTED,
    ),
    # A token alone as a URL's user (https://ghp_…@github.com/…): a user name is short and plain, a token is long.
    ScrubRule(
        "url-token-user",
        re.compile(r"(?i)(?<![\w+.-])([a-z][a-z0-9+.-]{0,31}://)[A-Za-z0-9_-]{20,}+@"),
        r"\1" + REDACTED + "@",
    ),
    # Secrets passed as command-line options with a space: `mysql --password hunter2`, `--api-key abc`.
    ScrubRule(
        "command-line-option",
        re.compile(
            r"(?i)(?<![\w-])(--(?:[a-z0-9]{1,32}-){0,3}(?:password|passwd|pwd|secret|token|api-key"
            r"|access-key)\s+)(\"[^\"]*\"|'[^']*'|[^\s\"'-]\S*+)"
        ),
        r"\1" + REDACTED,
    ),
    # AWS access key ids carry no name in front of them in most tracebacks.
    ScrubRule("aws-access-key-id", re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])"), REDACTED),
    # A PEM private key pasted into an error: keep the BEGIN line, drop the key material.
    ScrubRule(
        "private-key-block",
        re.compile(r"(-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----)[A-Za-z0-9+/=\s]*+"),
        r"\1 " + REDACTED + " ",
    ),
    # queuelog's own API keys wherever they appear
    ScrubRule("queuelog-api-key", re.compile(r"(?<![\w-])ql_[A-Za-z0-9_-]{16,}"), "ql_" + REDACTED),
)


def redact(text: str) -> str:
    """``text`` with every credential ``SCRUB_RULES`` finds replaced by ``[redacted]``."""
    for rule in SCRUB_RULES:
        text = rule.pattern.sub(rule.replacement, text)
    return text


def scrub_error(text: str | None, max_chars: int) -> str | None:
    """Redact credentials and trim to ``max_chars`` so a worker cannot leak or flood through errors."""
    if text is None:
        return None
    # PostgreSQL text cannot hold NUL, and a worker's failure must never be refused for its message.
    text = redact(text.replace("\x00", ""))
    if len(text) > max_chars:
        marker = " … [truncated]"
        text = text[: max(0, max_chars - len(marker))] + marker
    return text

"""Time in one place: every stored time is UTC, every time shown is RFC 3339."""

import functools
from datetime import UTC, datetime


def utcnow() -> datetime:
    """The current time as an aware UTC datetime."""
    return datetime.now(UTC)


# Jobs answered together share their times (one transaction's "now"), eight per job: format each once.
@functools.lru_cache(maxsize=4096)
def rfc3339(value: datetime | None) -> str | None:
    """Format an aware or naive-UTC datetime as RFC 3339 with a trailing Z."""
    if value is None:
        return None
    if value.tzinfo is UTC:
        # The common case (every time read from the database): "…+00:00" → "…Z" without converting.
        return value.isoformat(timespec="microseconds")[:-6] + "Z"
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value.isoformat(timespec="microseconds") + "Z"


def parse_rfc3339(text: str) -> datetime:
    """Parse an RFC 3339 timestamp; an offset is required so there is no guessing about zones."""
    value = datetime.fromisoformat(text.strip().replace("z", "Z").replace("Z", "+00:00"))
    if value.tzinfo is None:
        raise ValueError("timestamp needs a UTC offset, e.g. 2026-01-01T12:00:00Z")
    return value.astimezone(UTC)

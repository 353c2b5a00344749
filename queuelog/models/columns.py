"""The column types every table shares: UTC times that compare alike on both databases, 64-bit ids."""

from __future__ import annotations

from datetime import UTC

from sqlalchemy import BigInteger, Integer
from sqlalchemy.types import DateTime, TypeDecorator


class UTCDateTime(TypeDecorator):
    """Stores naive UTC, hands back aware UTC, so SQLite and PostgreSQL compare times alike."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value, dialect):
        if value is not None and value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return value

    def process_result_value(self, value, dialect):
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value


# Job and event ids: 64-bit on PostgreSQL so a busy queue never runs out; on SQLite every integer
# primary key is already 64-bit, and it must be spelled INTEGER to be the rowid.
BigId = BigInteger().with_variant(Integer(), "sqlite")

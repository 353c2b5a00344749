"""API keys: issuing, verifying on each request, listing and revoking (V-01)."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
from dataclasses import dataclass
from datetime import timedelta

from flask import current_app
from sqlalchemy import insert, select, update

from ..core.clock import utcnow
from ..core.errors import InvalidRequest, QueueError
from ..core.patterns import PRIORITY_LABELS, Priority, one_of
from ..database.transactions import single_statement_read, write_transaction
from ..extensions import db
from ..models import ApiKey, Role
from ..sql import find_key
from .quotas import Quota
from .quotas import parse as parse_quota

KEY_PREFIX = "ql_"
_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
# Writing last_used_at on every request would put a write lock on the hot path; once a minute is plenty.
_LAST_USED_RESOLUTION = timedelta(seconds=60)

keys_table = ApiKey.__table__


@dataclass(frozen=True)
class Caller:
    """The verified key behind a request."""

    id: int
    name: str
    role: str
    max_priority: int
    allowed_types: tuple[str, ...] | None
    quota: Quota | None = None  # a producer's enqueue limits (queuelog/auth/quotas.py); None: none
    acts_as: str | None = None  # who the event log names, when not a key (the server's push deliveries)

    def may_use_type(self, job_type: str) -> bool:
        return self.allowed_types is None or job_type in self.allowed_types

    def owns_or_oversees(self, owner_key_id: int | None) -> bool:
        """May this key see the jobs that key ``owner_key_id`` enqueued? An admin all, a producer only its own
        (V-09), a worker none by who enqueued them (it sees the job it holds: ``queries.visible_to``). The one
        rule for GET /jobs/{id}, the parents an enqueue names and the dedupe hits it is answered with."""
        if self.role == Role.ADMIN.value:
            return True
        return self.role == Role.PRODUCER.value and owner_key_id == self.id

    @property
    def actor(self) -> str:
        return self.acts_as or f"key:{self.name}"


def digest_of(secret: str) -> str:
    """Keys carry 256 random bits, so a fast digest is enough; no slow password hash per request."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def create_key(
    name: str,
    role: str,
    max_priority: str | None = None,
    types: list[str] | None = None,
    enqueue_rate: str | None = None,
    max_pending: str | int | None = None,
) -> str:
    """Issue a key and return its secret, which is never stored and cannot be shown again.

    ``enqueue_rate`` ("N/S": at most N jobs in any S seconds) and ``max_pending`` (M) limit a producer key;
    None or empty text: no such limit.
    """
    problems = []
    if not _NAME_PATTERN.match(name or ""):
        problems.append({"pointer": "/name", "detail": "use 1-100 letters, digits, '.', '_' or '-'"})
    if role not in {r.value for r in Role}:
        problems.append({"pointer": "/role", "detail": "must be " + one_of(r.value for r in Role)})
    ceiling = Priority.MEDIUM if role == Role.PRODUCER.value else Priority.CRITICAL
    if max_priority is not None:
        try:
            ceiling = Priority.from_label(max_priority)
        except KeyError:
            problems.append({"pointer": "/max_priority", "detail": "must be " + one_of(PRIORITY_LABELS)})
    clean_types = sorted({t.strip() for t in types if t.strip()}) if types is not None else None
    if types is not None and not clean_types:
        # An empty limit must not quietly become "any type" (think --types "$UNSET_VARIABLE").
        problems.append({"pointer": "/types", "detail": "name at least one job type, or leave the limit out"})
    unknown = [name for name in clean_types or () if name not in current_app.config["JOB_TYPES"]]
    if unknown:
        # A key limited to a misspelt type could never enqueue or claim a job of it.
        problems.append(
            {
                "pointer": "/types",
                "detail": f"not on this server's QUEUELOG_JOB_TYPES: "
                f"{', '.join(unknown)} (allowed: "
                f"{', '.join(current_app.config['JOB_TYPES'])})",
            }
        )
    quota, quota_problems = parse_quota(role, enqueue_rate, max_pending)
    problems += quota_problems
    if problems:
        raise InvalidRequest(problems)

    # Quota columns only when there is a quota: a key without one is the same row as before quotas existed.
    limits = (
        {}
        if quota is None
        else {
            "enqueue_rate_limit": quota.rate_limit,
            "enqueue_rate_seconds": quota.rate_seconds,
            "max_pending": quota.max_pending,
        }
    )
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    with write_transaction() as conn:
        if conn.execute(select(keys_table.c.id).where(keys_table.c.name == name)).first():
            raise QueueError(f"a key named {name!r} already exists")
        conn.execute(
            insert(keys_table).values(
                name=name,
                role=role,
                max_priority=int(ceiling),
                allowed_types=json.dumps(clean_types) if clean_types else None,
                prefix=secret[: len(KEY_PREFIX) + 6],
                digest=digest_of(secret),
                created_at=utcnow(),
                **limits,
            )
        )
    return secret


def authenticate(secret: str) -> Caller | None:
    """Return the live key for ``secret``, or None. Revocation takes effect on the next request."""
    if not secret.startswith(KEY_PREFIX) or len(secret) > 200:
        return None
    wanted = digest_of(secret)
    # Without BEGIN and ROLLBACK around it the lookup is one round trip instead of three, and
    # revocation still shows on the next request.
    with single_statement_read() as conn:
        row = find_key(conn, wanted)
    if row is None or row.revoked_at is not None or not hmac.compare_digest(row.digest, wanted):
        return None
    now = utcnow()
    if row.last_used_at is None or now - row.last_used_at > _LAST_USED_RESOLUTION:
        _touch(row.id, now)
    types = json.loads(row.allowed_types) if row.allowed_types else None
    return Caller(row.id, row.name, row.role, row.max_priority, tuple(types) if types else None, Quota.of(row))


def _touch(key_id: int, now) -> None:
    with write_transaction() as conn:
        conn.execute(update(keys_table).where(keys_table.c.id == key_id).values(last_used_at=now))


def list_keys() -> list[ApiKey]:
    """Every key, newest first, revoked ones included."""
    return list(db.session.execute(db.select(ApiKey).order_by(ApiKey.id.desc())).scalars())


def revoke_key(name: str) -> bool:
    """Revoke a key by name; False when no live key has that name."""
    with write_transaction() as conn:
        result = conn.execute(
            update(keys_table)
            .where(keys_table.c.name == name, keys_table.c.revoked_at.is_(None))
            .values(revoked_at=utcnow())
        )
    return result.rowcount == 1

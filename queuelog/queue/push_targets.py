"""A job type's push target: where the server POSTs the type's jobs, how, the secrets it signs them with, and
how its last delivery went.

The target itself is a setting of the type (``flow.Settings.push``, a column group of ``type_settings``), changed
with the type's other settings and in its history; this module says what a valid target is and keeps what
goes with it: the Standard Webhooks secrets (``push_secrets``) and the last delivery (``push_status``).

A target's address must be public unless ``QUEUELOG_PUSH_ALLOW_PRIVATE`` is on: the server makes the request,
from inside the network it runs in, so a target naming a loopback, private or link-local address would let
an admin key (or whoever holds one) reach services that trust that network (server-side request forgery).
The check is made when the target is set and again at each delivery, on the addresses the delivery then
connects to: a name that resolved to a public address when it was set may resolve to a private one later
(DNS rebinding).
"""

from __future__ import annotations

import base64
import ipaddress
import secrets
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from sqlalchemy import delete, insert, or_, select, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection

from ..models import PushSecret, PushStatus, TypeSettings

secrets_table = PushSecret.__table__
settings_table = TypeSettings.__table__
status_table = PushStatus.__table__

MODES = ("sync", "async")
DEFAULT_MODE = "sync"
MIN_TIMEOUT_SECONDS, MAX_TIMEOUT_SECONDS = 1, 900
DEFAULT_TIMEOUT_SECONDS = 30
MAX_URL_CHARS = 2048
#: The shape of a target URL, for the API's document: http(s), a host with no user name, no #fragment. Whether
#: the host is public only a lookup tells (``url_problem``).
URL_PATTERN = r"^[Hh][Tt][Tt][Pp][Ss]?://[^/?#@\s]+([/?][^#\s]*)?$"
SECRET_PREFIX = "whsec_"
#: How long a rotated secret keeps signing beside the new one, so a target can move to the new one unhurried.
ROTATION_OVERLAP = timedelta(hours=24)
#: The worker name a push delivery's claim is held under (never an API key's name: those have no colon).
WORKER_PREFIX = "push:"


@dataclass(frozen=True)
class PushTarget:
    """Where and how the server delivers a type's jobs."""

    url: str
    mode: str = DEFAULT_MODE
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS

    def as_json(self) -> dict:
        return {"url": self.url, "mode": self.mode, "timeout_seconds": self.timeout_seconds}

    @classmethod
    def of_row(cls, row) -> PushTarget | None:
        if row is None or row.push_url is None:
            return None
        return cls(row.push_url, row.push_mode or DEFAULT_MODE, row.push_timeout_seconds or DEFAULT_TIMEOUT_SECONDS)


@dataclass(frozen=True)
class LastDelivery:
    """How a type's latest delivery went: the HTTP status (None: no answer) and the error, if it failed."""

    at: datetime
    job_id: int | None
    http_status: int | None
    error: str | None

    def as_json(self, rfc3339) -> dict:
        return {"at": rfc3339(self.at), "job_id": self.job_id, "http_status": self.http_status, "error": self.error}


def targets(conn: Connection, job_types) -> dict[str, PushTarget]:
    """The push target of each of ``job_types`` that has one."""
    rows = conn.execute(
        select(settings_table).where(settings_table.c.push_url.is_not(None), settings_table.c.type.in_(job_types))
    ).all()
    return {row.type: PushTarget.of_row(row) for row in rows}


def worker_name(job_type: str) -> str:
    """The worker a push delivery of ``job_type`` holds its job as."""
    return WORKER_PREFIX + job_type


# --- the address ------------------------------------------------------------------------------------------------


class AddressRefused(Exception):
    """The target's host is, or resolves to, an address the server may not deliver to."""


def url_problem(url: str, allow_private: bool) -> str | None:
    """Why ``url`` cannot be a push target (a sentence for the 422's detail), or None when it can."""
    if len(url) > MAX_URL_CHARS:
        return f"must be at most {MAX_URL_CHARS} characters"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        return f"is not a valid URL ({error})"
    if parts.scheme not in ("http", "https"):
        return "must be an http:// or https:// URL"
    if not parts.hostname:
        return "must name a host"
    if parts.username is not None or parts.password is not None:
        return "must not carry a user name or password: deliveries are signed (webhook-signature)"
    if parts.fragment:
        return "must not carry a #fragment"
    if allow_private:
        return None
    try:
        public_addresses(parts.hostname, port or (443 if parts.scheme == "https" else 80))
    except AddressRefused as refused:
        return f"{refused}; the server delivers only to public addresses unless QUEUELOG_PUSH_ALLOW_PRIVATE=1"
    except UnicodeError:  # the resolver's IDNA codec: an empty or over-long label
        return f"names {parts.hostname!r}, which is not a valid host name"
    except OSError:
        return None  # a name that does not resolve now: each delivery resolves and checks it again
    return None


def public_addresses(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to, all of them public; AddressRefused when any is not (a name that
    resolves to a public and a private address is refused: a client may connect to either). OSError when the
    name does not resolve."""
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses = list(dict.fromkeys(info[4][0] for info in found))
    for address in addresses:
        if not is_public(address):
            raise AddressRefused(f"{host!r} is, or resolves to, {address}, which is not a public address")
    return addresses


def is_public(address: str) -> bool:
    """Is ``address`` reachable on the public internet, neither loopback, private, link-local, shared
    (100.64/10), multicast, reserved nor unspecified? An IPv4 address inside IPv6 is judged as IPv4."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # a zone index (fe80::1%eth0) is link-local anyway
    if isinstance(ip, ipaddress.IPv6Address):
        inner = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if inner is not None:
            ip = inner
    return ip.is_global and not ip.is_multicast


# --- the secrets -------------------------------------------------------------------------------------------


def new_secret() -> str:
    """A Standard Webhooks secret: ``whsec_`` and 32 random bytes in base64."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode("ascii")


def issue_secret(conn: Connection, job_type: str, now: datetime) -> str:
    """A new current secret for ``job_type`` (in the caller's transaction); returned once, never shown again."""
    secret = new_secret()
    conn.execute(insert(secrets_table).values(type=job_type, secret=secret, created_at=now, retires_at=None))
    return secret


def rotate_secret(conn: Connection, job_type: str, now: datetime) -> str:
    """Retire the current secrets ROTATION_OVERLAP from now and issue a new one; forget those already retired."""
    conn.execute(delete(secrets_table).where(secrets_table.c.type == job_type, secrets_table.c.retires_at <= now))
    conn.execute(
        update(secrets_table)
        .where(secrets_table.c.type == job_type, secrets_table.c.retires_at.is_(None))
        .values(retires_at=now + ROTATION_OVERLAP)
    )
    return issue_secret(conn, job_type, now)


def forget_secrets(conn: Connection, job_type: str) -> None:
    """A cleared target takes its secrets with it: a new target gets a new one."""
    conn.execute(delete(secrets_table).where(secrets_table.c.type == job_type))
    conn.execute(delete(status_table).where(status_table.c.type == job_type))


def signing_secrets(conn: Connection, job_type: str, now: datetime) -> list[str]:
    """The secrets a delivery of ``job_type`` is signed with now: the current one first, then those rotated out
    less than ROTATION_OVERLAP ago."""
    rows = conn.execute(
        select(secrets_table.c.secret)
        .where(
            secrets_table.c.type == job_type,
            or_(secrets_table.c.retires_at.is_(None), secrets_table.c.retires_at > now),
        )
        .order_by(secrets_table.c.id.desc())
    ).all()
    return [row.secret for row in rows]


# --- the last delivery -------------------------------------------------------------------------------------


def last_deliveries(conn: Connection, job_types: list[str]) -> dict[str, LastDelivery]:
    rows = conn.execute(select(status_table).where(status_table.c.type.in_(job_types))).all()
    return {row.type: LastDelivery(row.at, row.job_id, row.http_status, row.error) for row in rows}


def note_delivery(conn: Connection, job_type: str, delivery: LastDelivery) -> None:
    """Keep ``delivery`` as the type's last (one row per type, replaced)."""
    values = {
        "job_id": delivery.job_id,
        "at": delivery.at,
        "http_status": delivery.http_status,
        "error": delivery.error,
    }
    dialect_insert = postgresql_insert if conn.dialect.name == "postgresql" else sqlite_insert
    upsert = dialect_insert(status_table).values(type=job_type, **values)
    conn.execute(upsert.on_conflict_do_update(index_elements=["type"], set_=values))

"""One HTTP POST to a push target: to an address checked when it connects, within one deadline for it all.

The host is resolved here and every address it resolves to is checked (``push_targets.public_addresses``),
then the connection is made to one of those very addresses: a name cannot resolve to a public address for
the check and to a private one for the connection (DNS rebinding). TLS still verifies the certificate for the
host name. A redirect is not followed: it is an answer like any other (the target's URL is the admin's to
change). The deadline covers connecting, sending and the whole answer: a target that answers a byte at a time
is cut off at it like one that does not answer at all.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..queue.push_targets import AddressRefused, public_addresses

#: The answer's body is read up to this many bytes; a JSON result larger than the limit is not a result.
MAX_ANSWER_BYTES = 1024 * 1024


class SendFailed(Exception):
    """No answer: the address was refused, the connection failed, or the deadline passed. Its text says which."""


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]  # lower-cased names
    body: bytes  # at most MAX_ANSWER_BYTES + 1 bytes (one more: it was cut)


def post(url: str, body: bytes, headers: dict[str, str], timeout: float, allow_private: bool) -> Answer:
    """POST ``body`` to ``url``; the answer, or SendFailed."""
    parts = urlsplit(url)
    https = parts.scheme == "https"
    port = parts.port or (443 if https else 80)
    host = parts.hostname or ""
    deadline = time.monotonic() + timeout
    try:
        addresses = _resolve(host, port) if allow_private else public_addresses(host, port)
    except AddressRefused as refused:
        raise SendFailed(f"refused: {refused}") from None
    except (OSError, UnicodeError) as error:
        raise SendFailed(f"cannot resolve {host!r}: {error}") from None
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    connection = _connection(host, port, https, addresses, deadline)
    watchdog = threading.Timer(max(0.0, deadline - time.monotonic()), _cut, args=(connection,))
    watchdog.daemon = True
    watchdog.start()
    try:
        connection.request("POST", path, body=body, headers={"Host": parts.netloc.rpartition("@")[2], **headers})
        response = connection.getresponse()
        answer = Answer(
            response.status,
            {name.lower(): value for name, value in response.getheaders()},
            response.read(MAX_ANSWER_BYTES + 1),
        )
    except (OSError, http.client.HTTPException) as error:
        if time.monotonic() >= deadline - 0.001:
            raise SendFailed(f"no answer within {timeout:g} s (timeout_seconds)") from None
        raise SendFailed(f"the connection to {host}:{port} failed: {error or error.__class__.__name__}") from None
    finally:
        watchdog.cancel()
        connection.close()
    return answer


def _resolve(host: str, port: int) -> list[str]:
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(info[4][0] for info in found))


def _cut(connection: http.client.HTTPConnection) -> None:
    """The deadline passed: shut the socket, so the read blocked on it ends at once."""
    sock = connection.sock
    if sock is not None:
        with contextlib.suppress(OSError):  # already closed: nothing to cut
            sock.shutdown(socket.SHUT_RDWR)


def _connection(host: str, port: int, https: bool, addresses: list[str], deadline: float):
    if https:
        return _PinnedHTTPS(host, port, addresses, deadline, ssl.create_default_context())
    return _PinnedHTTP(host, port, addresses, deadline)


def _connect_to_one(addresses: list[str], port: int, deadline: float) -> socket.socket:
    """A connection to the first of ``addresses`` that takes one before the deadline."""
    last: OSError | None = None
    for address in addresses:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            sock = socket.create_connection((address, port), timeout=left)
        except OSError as error:
            last = error
            continue
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
    raise last or TimeoutError("timed out connecting")


class _PinnedHTTP(http.client.HTTPConnection):
    """An HTTP connection to a checked address, whatever the host name would resolve to now."""

    def __init__(self, host: str, port: int, addresses: list[str], deadline: float):
        super().__init__(host, port, timeout=max(0.001, deadline - time.monotonic()))
        self._addresses, self._deadline = addresses, deadline

    def connect(self) -> None:
        self.sock = _connect_to_one(self._addresses, self.port, self._deadline)


class _PinnedHTTPS(http.client.HTTPSConnection):
    """``_PinnedHTTP`` over TLS, the certificate checked against the host name."""

    def __init__(self, host: str, port: int, addresses: list[str], deadline: float, context: ssl.SSLContext):
        super().__init__(host, port, timeout=max(0.001, deadline - time.monotonic()), context=context)
        self._addresses, self._deadline, self._tls = addresses, deadline, context

    def connect(self) -> None:
        raw = _connect_to_one(self._addresses, self.port, self._deadline)
        self.sock = self._tls.wrap_socket(raw, server_hostname=self.host)

"""A small HTTP client for the queuelog API, on the standard library only.

Producers use ``enqueue``/``enqueue_batch``; the worker runner uses the claim/ack calls. Each thread
keeps one keep-alive connection. Errors come in two kinds, so callers can decide what to retry:
``ServerUnavailable`` (network trouble, 5xx, 429: try again later) and ``ApiError`` (the server
refused this request: 4xx with its problem+json body). A 429 from a producer key's quota is a
``QuotaExceeded`` (a ServerUnavailable): the client never retries an enqueue by itself, so the caller
decides whether to wait ``retry_after`` seconds, drop the work, or slow down.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import os
import select
import socket
import ssl
import threading
import time
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

DEFAULT_TIMEOUT = 30.0
#: The longest a ``GET /jobs/{id}?wait=S`` may wait, as the server allows.
MAX_RESULT_WAIT = 30.0
FINAL_STATUSES = frozenset({"completed", "failed", "cancelled"})
USER_AGENT = "queuelog-worker/0.1"


class QueuelogError(Exception):
    """Base of the client's errors."""


class ServerUnavailable(QueuelogError):
    """The request did not get an answer it can act on (network error, 5xx, 429); retry later.

    ``retry_after`` is the seconds the server asked us to wait (its Retry-After), if it said;
    ``problem`` its problem+json body, if any.
    """

    def __init__(
        self, message: str, status: int | None = None, retry_after: float | None = None, problem: dict | None = None
    ):
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after
        self.problem = problem or {}


class QuotaExceeded(ServerUnavailable):
    """The key's producer quota refused the enqueue (429); nothing was stored, a batch not even in part.

    ``quota`` says which limit ("enqueue_rate" or "max_pending"), ``retry_after`` the whole seconds the
    server said to wait, as given (a rate's window may be hours long), ``problem`` the full problem+json
    with the numbers (limit, requested, in_window or pending).
    """

    def __init__(self, message: str, retry_after: float | None, problem: dict):
        super().__init__(message, 429, retry_after, problem)
        self.quota = problem.get("quota")


class ApiError(QueuelogError):
    """The server refused the request (4xx); ``problem`` is its problem+json body."""

    def __init__(self, status: int, problem: dict):
        self.status = status
        self.problem = problem
        super().__init__(f"HTTP {status}: {problem.get('detail') or problem.get('title') or 'refused'}")


class Client:
    """The queuelog API over HTTP(S). ``url`` and ``api_key`` default to QUEUELOG_URL and QUEUELOG_API_KEY."""

    def __init__(self, url: str | None = None, api_key: str | None = None, timeout: float = DEFAULT_TIMEOUT):
        url = url or os.environ.get("QUEUELOG_URL")
        api_key = api_key or os.environ.get("QUEUELOG_API_KEY")
        if not url:
            raise ValueError("no server URL: pass url= or set QUEUELOG_URL")
        if not api_key:
            raise ValueError("no API key: pass api_key= or set QUEUELOG_API_KEY")
        parts = urlsplit(url)
        if parts.scheme not in {"http", "https"} or not parts.hostname:
            raise ValueError(f"the server URL must look like http://host:port, not {url!r}")
        self.url = url.rstrip("/")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._headers = {
            "Authorization": f"Bearer {api_key}",
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": USER_AGENT,
        }
        self.timeout = timeout
        self._local = threading.local()
        self._open: set[http.client.HTTPConnection] = set()
        self._open_lock = threading.Lock()

    # --- producers --------------------------------------------------------------------------

    def enqueue(
        self,
        type: str,
        payload: dict | None = None,
        *,
        priority: str | None = None,
        max_retries: int | None = None,
        idempotency_key: str | None = None,
        run_at: datetime | str | None = None,
        concurrency_key: str | None = None,
        unique_for: int | None = None,
        unique_key: str | None = None,
        expires_at: datetime | str | None = None,
        timeout_seconds: int | None = None,
        depends_on: list[int] | None = None,
        run_when: str | None = None,
    ) -> dict:
        """Enqueue one job; returns the job (an idempotent replay returns the original job).

        ``concurrency_key`` (e.g. a tenant): claims take turns across keys, and a type's per-key limit counts by it.
        ``unique_for`` (seconds) opens a dedupe window on (type, ``unique_key`` or the payload), this key's own
        unless the type's windows are shared: an enqueue inside another's window returns that job, with
        ``"deduplicated": True`` (only ``{"deduplicated": True}`` when the job is one this key may not see).
        ``expires_at``: not claimed
        by then, the job never runs. ``timeout_seconds``: how long a run may take. ``depends_on``: job ids it
        waits for; ``run_when``: "completed" (default) or "finished".
        """
        body = _without_none(
            type=type,
            payload=payload or {},
            priority=priority,
            max_retries=max_retries,
            idempotency_key=idempotency_key,
            run_at=_time(run_at),
            concurrency_key=concurrency_key,
            unique_for=unique_for,
            unique_key=unique_key,
            expires_at=_time(expires_at),
            timeout_seconds=timeout_seconds,
            depends_on=depends_on,
            run_when=run_when,
        )
        return self.request("POST", "/jobs", body)[1]

    def enqueue_batch(self, jobs: list[dict]) -> list[dict]:
        """Enqueue up to 500 jobs (dicts with the enqueue fields; a workflow, with ref and depends_on, up to 1,000)
        all-or-nothing; returns them in order."""
        body = {
            "jobs": [
                _without_none(**dict(job, run_at=_time(job.get("run_at")), expires_at=_time(job.get("expires_at"))))
                for job in jobs
            ]
        }
        return self.request("POST", "/jobs/batch", body)[1]["jobs"]

    def get_job(self, job_id: int) -> dict:
        """One job as the server shows it to this key."""
        return self.request("GET", f"/jobs/{job_id}")[1]

    def wait(self, job_id: int, timeout: float) -> dict:
        """The job once it is final (completed, failed, cancelled), or as it is after ``timeout`` seconds.

        Long-polls ``GET /jobs/{id}?wait=S`` (S at most 30 a request), so the answer comes as soon as the job
        ends, without polling.
        """
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return self.get_job(job_id)
            wait = min(remaining, MAX_RESULT_WAIT)
            job = self.request("GET", f"/jobs/{job_id}?wait={wait:.3f}", timeout=self.timeout + wait)[1]
            if job.get("status") in FINAL_STATUSES:
                return job

    # --- workers ----------------------------------------------------------------------------

    def claim(
        self,
        types: list[str] | None = None,
        limit: int = 1,
        wait: float = 0,
        lease_seconds: int | None = None,
        process_id: int | None = None,
    ) -> list[dict]:
        """Claim up to ``limit`` jobs, waiting up to ``wait`` seconds for one; [] when none came.

        ``process_id``: this worker's registered process (``register_process``), so the jobs show under it.
        """
        body = _without_none(
            types=types, limit=limit, wait=wait or None, lease_seconds=lease_seconds, process_id=process_id
        )
        status, answer = self.request("POST", "/jobs/claim", body, timeout=self.timeout + wait)
        if status == 204:
            return []
        jobs = answer.get("jobs") if isinstance(answer, dict) else None
        if not isinstance(jobs, list) or not all(
            isinstance(job, dict) and {"id", "type", "claim_token"} <= job.keys() for job in jobs
        ):
            raise ServerUnavailable(f"POST /jobs/claim: unexpected answer (HTTP {status}); is {self.url} queuelog?")
        return jobs

    def heartbeat(
        self, job_id: int, claim_token: str, lease_seconds: int | None = None, progress: dict | None = None
    ) -> dict:
        """Extend the lease on a held job, with a progress report (any JSON object up to 4 KiB) when given."""
        body = _without_none(claim_token=claim_token, lease_seconds=lease_seconds, progress=progress)
        return self.request("POST", f"/jobs/{job_id}/heartbeat", body)[1]

    def complete(self, job_id: int, claim_token: str, result: dict | None = None) -> dict:
        """Complete one held job."""
        body = _without_none(claim_token=claim_token, result=result)
        return self.request("POST", f"/jobs/{job_id}/complete", body)[1]

    def complete_many(self, items: list[dict]) -> list[dict]:
        """Complete up to 100 held jobs ({id, claim_token, result?}); one outcome per item, in order."""
        status, answer = self.request("POST", "/jobs/complete", {"jobs": items})
        results = answer.get("results") if isinstance(answer, dict) else None
        if (
            not isinstance(results, list)
            or len(results) != len(items)
            or not all(isinstance(result, dict) and "status" in result for result in results)
        ):
            raise ServerUnavailable(f"POST /jobs/complete: unexpected answer (HTTP {status})")
        return results

    def fail(self, job_id: int, claim_token: str, error: str, retryable: bool = True) -> dict:
        """Report a failed attempt; the server requeues it while retries remain (if retryable)."""
        body = {"claim_token": claim_token, "error": error, "retryable": retryable}
        return self.request("POST", f"/jobs/{job_id}/fail", body)[1]

    def release(self, job_id: int, claim_token: str) -> dict:
        """Give a held job back to the queue without counting a failure."""
        return self.request("POST", f"/jobs/{job_id}/release", {"claim_token": claim_token})[1]

    def register_process(
        self, host: str, pid: int, version: str, concurrency: int, types: list[str] | None = None
    ) -> dict:
        """Register this worker process: its id, its command ("run") and how often to beat (heartbeat_seconds)."""
        body = _without_none(host=host, pid=pid, version=version, concurrency=concurrency, types=types)
        return self.request("POST", "/workers", body)[1]

    def beat_process(self, process_id: int) -> dict:
        """The process is alive; the answer's ``command`` is run, quiet (claim nothing more) or stop (finish, exit)."""
        return self.request("POST", f"/workers/{process_id}/heartbeat", {})[1]

    def deregister_process(self, process_id: int) -> None:
        """A clean exit: the process leaves the server's list."""
        self.request("DELETE", f"/workers/{process_id}")

    # --- transport --------------------------------------------------------------------------

    def request(self, method: str, path: str, body: Any = None, timeout: float | None = None) -> tuple[int, Any]:
        """Send one request; returns (status, decoded JSON or None) for 2xx, raises otherwise."""
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        for attempt in (1, 2):
            conn, reused = self._connection()
            try:
                conn.timeout = timeout or self.timeout
                if conn.sock is not None:
                    conn.sock.settimeout(conn.timeout)
                conn.request(method, self._prefix + path, body=data, headers=self._headers)
                response = conn.getresponse()
                raw = response.read()
            except (
                http.client.RemoteDisconnected,
                ConnectionResetError,
                BrokenPipeError,
                ConnectionAbortedError,
            ) as exc:
                self._discard(conn)
                # A kept-alive connection the server closed while idle: one fresh try is safe,
                # because the server never read this request.
                if reused and attempt == 1:
                    continue
                raise ServerUnavailable(f"{method} {path}: connection lost ({exc.__class__.__name__})") from exc
            except (OSError, http.client.HTTPException) as exc:
                self._discard(conn)
                raise ServerUnavailable(f"{method} {path}: {exc.__class__.__name__}: {exc}") from exc
            return _decode(method, path, response.status, raw, response.getheader("Retry-After"))
        raise AssertionError("unreachable")

    def interrupt(self) -> None:
        """Abort requests in flight in other threads (they raise ServerUnavailable): a shutdown."""
        with self._open_lock:
            connections = list(self._open)
        for conn in connections:
            sock = conn.sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Close this thread's connection."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            self._discard(conn)

    def _connection(self) -> tuple[http.client.HTTPConnection, bool]:
        conn = getattr(self._local, "conn", None)
        if conn is not None and conn.sock is not None and _dropped(conn.sock):
            self._discard(conn)
            conn = None
        if conn is None:
            if self._https:
                conn = http.client.HTTPSConnection(
                    self._host, self._port, timeout=self.timeout, context=ssl.create_default_context()
                )
            else:
                conn = http.client.HTTPConnection(self._host, self._port, timeout=self.timeout)
            self._local.conn = conn
            with self._open_lock:
                self._open.add(conn)
            return conn, False
        return conn, conn.sock is not None

    def _discard(self, conn: http.client.HTTPConnection) -> None:
        conn.close()
        with self._open_lock:
            self._open.discard(conn)
        if getattr(self._local, "conn", None) is conn:
            self._local.conn = None


def _dropped(sock: socket.socket) -> bool:
    """An idle keep-alive socket that is readable has been closed by the server (or holds junk)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def _decode(method: str, path: str, status: int, raw: bytes, retry_after: str | None = None) -> tuple[int, Any]:
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        body = None
    if 200 <= status < 300:
        return status, body
    problem = body if isinstance(body, dict) else {"detail": raw[:200].decode(errors="replace")}
    if status == 429 and problem.get("quota"):
        # A quota's Retry-After is exact (when the window has room), not a server's guess: keep it whole.
        retry_after_seconds = _seconds(retry_after, limit=None)
        raise QuotaExceeded(f"{method} {path}: HTTP 429: {problem.get('detail', '')}", retry_after_seconds, problem)
    if status >= 500 or status == 429:
        raise ServerUnavailable(
            f"{method} {path}: HTTP {status}: {problem.get('detail', '')}", status, _seconds(retry_after), problem
        )
    raise ApiError(status, problem)


#: The longest Retry-After we obey as given; a larger one (or a date) is a server's mistake or a
#: maintenance window, and ordinary backoff serves better than going quiet for hours.
MAX_RETRY_AFTER = 60.0


def _seconds(retry_after: str | None, limit: float | None = MAX_RETRY_AFTER) -> float | None:
    """Retry-After in seconds when it is a number of seconds up to ``limit`` (None: any); the HTTP-date
    form is not used here."""
    try:
        seconds = float(retry_after) if retry_after is not None else None
    except ValueError:
        return None
    if seconds is None or not 0 <= seconds <= (math.inf if limit is None else limit):
        return None
    return seconds


def _without_none(**fields) -> dict:
    return {name: value for name, value in fields.items() if value is not None}


def _time(value: datetime | str | None) -> str | None:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("run_at must be timezone-aware")
        return value.isoformat()
    return value

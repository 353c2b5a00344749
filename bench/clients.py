"""HTTP client code shared by queuelog and the Flask ceiling.

Each ``*_worker`` function runs inside one process started by
:func:`bench.procs.run_processes`; each uses its own ``requests.Session``.
All loops are bounded by the number of jobs they may legitimately see plus a
small allowance for retries, so a misbehaving server cannot hang the run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import requests

# Transient failures a real worker would retry (connection reset while the
# sync gunicorn workers are saturated, a 5xx).  Counted and reported, never
# hidden: the correctness check still demands every job completed exactly once.
MAX_RETRIES_PER_CALL = 5
HTTP_TIMEOUT = 30
MIN_SAMPLES = 20  # the time cap never cuts a latency probe below this many claims

JOB_TYPE = "noop"
JOB_PRIORITY = "medium"


def new_session(token: str | None) -> requests.Session:
    session = requests.Session()
    if token:
        session.headers["Authorization"] = f"Bearer {token}"
    return session


class Tally:
    """Counts the unexpected responses one worker saw."""

    def __init__(self) -> None:
        self.errors = 0
        self.samples: list[str] = []

    def note(self, what: str) -> None:
        self.errors += 1
        if len(self.samples) < 5:
            self.samples.append(what[:300])


def post(session: requests.Session, url: str, body: Any, ok: tuple[int, ...], tally: Tally) -> requests.Response | None:
    """POST with bounded retries on connection errors and 5xx responses.

    Returns the response once its status is in ``ok`` or a non-retryable 4xx
    arrives (returned too, so the caller can decide), ``None`` after retries.
    """
    for attempt in range(MAX_RETRIES_PER_CALL):
        try:
            resp = session.post(url, json=body, timeout=HTTP_TIMEOUT)
        except requests.RequestException as exc:
            tally.note(f"POST {url}: {exc!r}")
            time.sleep(0.05 * (attempt + 1))
            continue
        if resp.status_code in ok:
            return resp
        tally.note(f"POST {url}: {resp.status_code} {resp.text}")
        if resp.status_code < 500:
            return resp
        time.sleep(0.05 * (attempt + 1))
    return None


def job_body(n: int) -> dict:
    return {"type": JOB_TYPE, "payload": {"n": n}, "priority": JOB_PRIORITY}


# --------------------------------------------------------------------------
# Enqueue


def enqueue_worker(arg: dict, go: Callable[[], float]) -> dict:
    """Enqueue ``arg["count"]`` jobs, one per request or ``batch`` per request.

    ``arg["kind"] == "ceiling"`` posts the same bodies to the no-op endpoint
    (single only), which is the framework ceiling for one enqueue request.
    """
    session = new_session(arg.get("token"))
    base, count, batch = arg["base_url"], arg["count"], arg["batch"]
    first = arg.get("first", 0)
    tally, ids = Tally(), []
    end = None
    go()
    if arg["kind"] == "ceiling":
        for i in range(count):
            if post(session, base + "/noop", job_body(first + i), (200,), tally) is not None:
                ids.append(first + i)
            end = time.monotonic()
    elif batch == 1:
        for i in range(count):
            resp = post(session, base + "/jobs", job_body(first + i), (201,), tally)
            if resp is not None and resp.status_code == 201:
                ids.append(resp.json()["id"])
            end = time.monotonic()
    else:
        for start in range(0, count, batch):
            bodies = [job_body(first + i) for i in range(start, min(start + batch, count))]
            resp = post(session, base + "/jobs/batch", {"jobs": bodies}, (201,), tally)
            if resp is not None and resp.status_code == 201:
                ids.extend(j["id"] for j in resp.json()["jobs"])
            end = time.monotonic()
    return {"ids": ids, "end": end, "errors": tally.errors, "error_samples": tally.samples}


# --------------------------------------------------------------------------
# Drain (end-to-end): claim + complete until nothing is claimable


def drain_single_worker(arg: dict, go: Callable[[], float]) -> dict:
    """Claim one job, complete it, repeat until the server answers 204."""
    session = new_session(arg["token"])
    base = arg["base_url"]
    tally, done = Tally(), []
    end = None
    go()
    # Bounded: a healthy run needs at most total_jobs + 1 claims.
    for _ in range(arg["total_jobs"] + MAX_RETRIES_PER_CALL + 1):
        resp = post(session, base + "/jobs/claim", {}, (200, 204), tally)
        if resp is None:
            continue
        if resp.status_code == 204:
            break
        if resp.status_code != 200:
            continue
        job = resp.json()
        done_resp = post(
            session, f"{base}/jobs/{job['id']}/complete", {"claim_token": job["claim_token"]}, (200,), tally
        )
        if done_resp is not None and done_resp.status_code == 200:
            done.append(job["id"])
            end = time.monotonic()
    return {"ids": done, "end": end, "errors": tally.errors, "error_samples": tally.samples}


def _outcome_ok(item: Any) -> bool:
    """Whether one item of a batch-complete answer reports success.

    queuelog answers ``{"results": [{"id", "status": 200, "job": {...}}]}``
    with an HTTP-style status per item (404/409 plus a ``problem`` when
    refused); the job inside must then be completed.
    """
    if not isinstance(item, dict) or item.get("problem") or item.get("error"):
        return False
    if item.get("status") != 200:
        return False
    job = item.get("job")
    return not isinstance(job, dict) or job.get("status") == "completed"


def batch_outcomes(payload: Any) -> list[Any]:
    """The per-item outcome list inside a batch-complete answer."""
    results = payload.get("results") if isinstance(payload, dict) else None
    return results if isinstance(results, list) else []


def drain_batch_worker(arg: dict, go: Callable[[], float]) -> dict:
    """Claim up to ``limit`` jobs at once and complete them in one request."""
    session = new_session(arg["token"])
    base, limit = arg["base_url"], arg["limit"]
    tally, done = Tally(), []
    end = None
    go()
    for _ in range(arg["total_jobs"] + MAX_RETRIES_PER_CALL + 1):
        resp = post(session, base + "/jobs/claim", {"limit": limit}, (200, 204), tally)
        if resp is None:
            continue
        if resp.status_code == 204:
            break
        if resp.status_code != 200:
            continue
        jobs = resp.json().get("jobs", [])
        if not jobs:
            break
        items = [{"id": j["id"], "claim_token": j["claim_token"], "result": {}} for j in jobs]
        done_resp = post(session, base + "/jobs/complete", {"jobs": items}, (200,), tally)
        if done_resp is None or done_resp.status_code != 200:
            continue
        outcomes = batch_outcomes(done_resp.json())
        for item, outcome in zip(items, outcomes, strict=False):  # in request order; a short answer is noted below
            if _outcome_ok(outcome) and outcome.get("id") == item["id"]:
                done.append(item["id"])
            else:
                tally.note(f"batch complete item {item['id']}: {outcome!r}")
        if len(outcomes) != len(items):
            tally.note(f"batch complete: {len(outcomes)} outcomes for {len(items)} items")
        end = time.monotonic()
    return {"ids": done, "end": end, "errors": tally.errors, "error_samples": tally.samples}


def ceiling_cycle_worker(arg: dict, go: Callable[[], float]) -> dict:
    """The ceiling's "job": three no-op requests (enqueue, claim, complete)."""
    session = new_session(None)
    url = arg["base_url"] + "/noop"
    tally, done = Tally(), []
    end = None
    go()
    for i in range(arg["count"]):
        ok = all(post(session, url, {"n": i}, (200,), tally) is not None for _ in range(3))
        if ok:
            done.append(arg["first"] + i)
            end = time.monotonic()
    return {"ids": done, "end": end, "errors": tally.errors, "error_samples": tally.samples}


# --------------------------------------------------------------------------
# Claim latency


def claim_latencies(base_url: str, token: str, samples: int, warmup: int, budget_s: float) -> list[float]:
    """Sequential single claims from one client; returns latencies in ms.

    Each claimed job is completed straight away, outside the timed part, so
    the queue does not fill up with running jobs between samples.  Warm-up
    claims first touch every gunicorn worker's connection pool.  Sampling
    stops early once ``budget_s`` is spent (at least ``MIN_SAMPLES`` are
    taken): a claim that scans a million rows must not stall the whole run.
    """
    session = new_session(token)
    tally = Tally()
    latencies: list[float] = []
    deadline = None
    for i in range(warmup + samples):  # bounded by the requested sample count
        if i == warmup:
            deadline = time.monotonic() + budget_s
        elif deadline and time.monotonic() > deadline and len(latencies) >= MIN_SAMPLES:
            break
        t0 = time.perf_counter()
        resp = post(session, base_url + "/jobs/claim", {}, (200, 204), tally)
        elapsed_ms = (time.perf_counter() - t0) * 1000
        if resp is None or resp.status_code != 200:
            status = None if resp is None else resp.status_code
            raise RuntimeError(f"claim answered {status} with jobs pending: {tally.samples}")
        if i >= warmup:
            latencies.append(elapsed_ms)
        job = resp.json()
        post(session, f"{base_url}/jobs/{job['id']}/complete", {"claim_token": job["claim_token"]}, (200,), tally)
    return latencies

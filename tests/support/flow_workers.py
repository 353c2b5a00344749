"""Client processes for the flow-control proofs (tests/acceptance/races/test_flow_proofs.py): raw HTTP workers
and a producer.

Each runs in a child process (``tests.support.scale.Processes``), with its own ``requests.Session``, as a
worker on another host would. Every loop is bounded by a deadline; results travel back as plain dicts.
"""

from __future__ import annotations

import random
import time

import requests

from tests.support.scale import HTTP_TIMEOUT, session_for


def work_until_done(base_url: str, secret: str, job_type: str, done, total: int, deadline: float, seed: int) -> dict:
    """Claim one ``job_type`` job at a time, "run" it for its payload's ``ms``, complete it; until ``done``
    (a shared counter of completed jobs) reaches ``total``.

    Returns {"completed": [ids], "unexpected": [(what, status, body)]}.
    """
    session = session_for(secret)
    rng = random.Random(seed)
    completed, unexpected = [], []
    while done.value < total and time.monotonic() < deadline:
        response = session.post(f"{base_url}/jobs/claim", json={"types": [job_type]}, timeout=HTTP_TIMEOUT)
        if response.status_code == 204:
            time.sleep(rng.uniform(0.001, 0.01))
            continue
        if response.status_code != 200:
            unexpected.append(("claim", response.status_code, response.text[:300]))
            continue
        job = response.json()
        time.sleep(job["payload"]["ms"] / 1000)
        finished = session.post(
            f"{base_url}/jobs/{job['id']}/complete", json={"claim_token": job["claim_token"]}, timeout=HTTP_TIMEOUT
        )
        if finished.status_code == 200:
            completed.append(job["id"])
            with done.get_lock():
                done.value += 1
        else:
            unexpected.append(("complete", finished.status_code, finished.text[:300]))
    return {"completed": completed, "unexpected": unexpected}


def claim_until(base_url: str, secret: str, job_type: str, stop_at: float) -> dict:
    """Claim ``job_type`` jobs as fast as the server allows until ``stop_at``, completing each at once.

    Returns {"claimed": n, "unexpected": [...]}.
    """
    session = session_for(secret)
    claimed, unexpected = 0, []
    while time.monotonic() < stop_at:
        response = session.post(f"{base_url}/jobs/claim", json={"types": [job_type]}, timeout=HTTP_TIMEOUT)
        if response.status_code == 204:
            time.sleep(0.005)
            continue
        if response.status_code != 200:
            unexpected.append(("claim", response.status_code, response.text[:300]))
            continue
        claimed += 1
        job = response.json()
        finished = session.post(
            f"{base_url}/jobs/{job['id']}/complete", json={"claim_token": job["claim_token"]}, timeout=HTTP_TIMEOUT
        )
        if finished.status_code != 200:
            unexpected.append(("complete", finished.status_code, finished.text[:300]))
    return {"claimed": claimed, "unexpected": unexpected}


def claim_count(base_url: str, secret: str, job_type: str, claimed, wanted: int, deadline: float) -> dict:
    """Claim ``job_type`` jobs one at a time until ``claimed`` (a shared counter) reaches ``wanted``."""
    session = session_for(secret)
    ids = []
    while time.monotonic() < deadline:
        with claimed.get_lock():
            if claimed.value >= wanted:
                break
            claimed.value += 1
        response = session.post(f"{base_url}/jobs/claim", json={"types": [job_type]}, timeout=HTTP_TIMEOUT)
        assert response.status_code == 200, (response.status_code, response.text[:300])
        ids.append(response.json()["id"])
    return {"ids": ids}


def long_poll_workers(base_url: str, secret: str, job_type: str, stop, deadline: float) -> dict:
    """Claim ``job_type`` jobs with ``wait`` (long-polls) and complete them, until ``stop`` is set.

    Returns {"completed": [ids], "unexpected": [...]}; a 503 (too many waiting claims) is waited out.
    """
    session = session_for(secret)
    completed, unexpected = [], []
    while not stop.is_set() and time.monotonic() < deadline:
        response = session.post(f"{base_url}/jobs/claim", json={"types": [job_type], "wait": 1}, timeout=HTTP_TIMEOUT)
        if response.status_code == 204:
            continue
        if response.status_code == 503:
            time.sleep(0.2)
            continue
        if response.status_code != 200:
            unexpected.append(("claim", response.status_code, response.text[:300]))
            continue
        job = response.json()
        finished = session.post(
            f"{base_url}/jobs/{job['id']}/complete", json={"claim_token": job["claim_token"]}, timeout=HTTP_TIMEOUT
        )
        if finished.status_code == 200:
            completed.append(job["id"])
        else:
            unexpected.append(("complete", finished.status_code, finished.text[:300]))
    return {"completed": completed, "unexpected": unexpected}


def enqueue_steadily(
    base_url: str, secret: str, job_type: str, batches: int, per_batch: int, pause_seconds: float
) -> dict:
    """POST /jobs/batch ``batches`` times, ``per_batch`` jobs each, ``pause_seconds`` apart; the new ids."""
    session = session_for(secret)
    ids = []
    for batch in range(batches):
        body = {"jobs": [{"type": job_type, "payload": {"batch": batch, "n": n}} for n in range(per_batch)]}
        response = session.post(f"{base_url}/jobs/batch", json=body, timeout=HTTP_TIMEOUT)
        assert response.status_code == 201, (response.status_code, response.text[:300])
        ids.extend(job["id"] for job in response.json()["jobs"])
        time.sleep(pause_seconds)
    return {"ids": ids}


def one_long_poll(base_url: str, secret: str, job_type: str, wait: float, report) -> None:
    """One claim with ``wait``; puts (status, job id or None, monotonic time of the answer) on ``report``."""
    response = requests.post(
        f"{base_url}/jobs/claim",
        json={"types": [job_type], "wait": wait},
        headers={"Authorization": f"Bearer {secret}"},
        timeout=HTTP_TIMEOUT + wait,
    )
    job_id = response.json()["id"] if response.status_code == 200 else None
    report.put((response.status_code, job_id, time.monotonic()))

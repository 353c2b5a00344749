"""Producer quotas: a key's enqueue rate (N jobs in any S seconds) and its most pending jobs (M), waiting
ones (children whose parents have not finished) included.

Over either, POST /jobs and POST /jobs/batch answer 429 problem+json with Retry-After and store nothing;
a batch is refused whole. Keys without quotas are not limited at all.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from sqlalchemy import func, select

from queuelog.auth.keys import create_key
from queuelog.core.clock import rfc3339, utcnow
from queuelog.extensions import db
from queuelog.models import EnqueueLedger
from tests.support.api import bearer
from tests.support.factories import assert_problem, count_jobs

# The rate windows below are several seconds wide, not one or two: each test needs its first enqueues to
# fall inside one window, and on a loaded CI machine a handful of requests has taken two seconds.
RATE_TYPE = "https://queuelog.dev/problems/enqueue-rate-exceeded"
PENDING_TYPE = "https://queuelog.dev/problems/max-pending-reached"


@pytest.fixture
def quota_key(app):
    """quota_key(enqueue_rate=None, max_pending=None, name="limited") → headers of a producer key with those quotas."""

    def _make(enqueue_rate: str | None = None, max_pending: int | None = None, name: str = "limited") -> dict:
        return bearer(create_key(name, "producer", enqueue_rate=enqueue_rate, max_pending=max_pending))

    return _make


def post(client, headers, **body):
    body.setdefault("type", "email")
    return client.post("/jobs", json=body, headers=headers)


def post_batch(client, headers, count: int, **fields):
    return client.post(
        "/jobs/batch", json={"jobs": [dict({"type": "email"}, **fields) for _ in range(count)]}, headers=headers
    )


def enqueue_ok(client, headers, times: int = 1, **body) -> list[dict]:
    jobs = []
    for _ in range(times):
        response = post(client, headers, **body)
        assert response.status_code == 201, response.get_json()
        jobs.append(response.get_json())
    return jobs


def refusal(response, problem_type: str) -> tuple[dict, int]:
    """The 429's problem body and its Retry-After, checked for shape."""
    body = assert_problem(response, 429)
    assert body["type"] == problem_type
    retry_after = response.headers["Retry-After"]
    assert retry_after.isdigit() and int(retry_after) >= 1, retry_after
    return body, int(retry_after)


# --- the enqueue rate --------------------------------------------------------------------------------


def test_the_sixth_enqueue_within_the_window_is_refused_with_429_and_retry_after(client, quota_key):
    limited = quota_key(enqueue_rate="5/10")
    enqueue_ok(client, limited, 5)
    body, retry_after = refusal(post(client, limited), RATE_TYPE)
    assert retry_after <= 10
    assert body["title"] == "Enqueue rate exceeded"
    assert (body["quota"], body["limit"], body["window_seconds"], body["in_window"], body["requested"]) == (
        "enqueue_rate",
        5,
        10,
        5,
        1,
    )
    assert "at most 5 jobs in any 10 s" in body["detail"]
    assert count_jobs() == 5


def test_after_retry_after_seconds_the_key_may_enqueue_again(client, quota_key):
    limited = quota_key(enqueue_rate="5/4")
    enqueue_ok(client, limited, 5)
    _, retry_after = refusal(post(client, limited), RATE_TYPE)
    time.sleep(retry_after)  # honest: the window has room exactly then, not later
    assert post(client, limited).status_code == 201
    assert count_jobs() == 6


def test_the_window_slides_jobs_leave_it_s_seconds_after_they_were_enqueued(client, quota_key):
    limited = quota_key(enqueue_rate="4/8")
    enqueue_ok(client, limited, 2)
    time.sleep(4)
    enqueue_ok(client, limited, 2)
    _, retry_after = refusal(post(client, limited), RATE_TYPE)
    assert retry_after <= 4  # the first two leave 8 s after they came, not at some fixed boundary
    time.sleep(retry_after)
    enqueue_ok(client, limited, 2)  # their two places, and no more: the later two are still in the window
    refusal(post(client, limited), RATE_TYPE)


def test_a_batch_that_would_pass_the_rate_is_refused_whole_and_stores_nothing(client, quota_key):
    limited = quota_key(enqueue_rate="5/60")
    enqueue_ok(client, limited, 3)
    body, retry_after = refusal(post_batch(client, limited, 3), RATE_TYPE)
    assert (body["in_window"], body["requested"]) == (3, 3)
    assert 55 <= retry_after <= 60
    assert count_jobs() == 3
    assert post_batch(client, limited, 2).status_code == 201  # exactly up to the limit
    assert count_jobs() == 5


def test_a_batch_larger_than_the_rate_says_it_can_never_fit(client, quota_key):
    limited = quota_key(enqueue_rate="5/60")
    body, retry_after = refusal(post_batch(client, limited, 6), RATE_TYPE)
    assert "a batch of 6 can never fit, send at most 5 at a time" in body["detail"]
    assert retry_after == 60
    assert count_jobs() == 0


def test_an_idempotent_replay_is_not_counted_and_is_answered_even_at_the_limit(client, quota_key):
    limited = quota_key(enqueue_rate="2/60")
    [first] = enqueue_ok(client, limited, idempotency_key="order-1")
    enqueue_ok(client, limited, idempotency_key="order-2")
    replay = post(client, limited, idempotency_key="order-1")
    assert (replay.status_code, replay.get_json()["id"]) == (200, first["id"])
    refusal(post(client, limited, idempotency_key="order-3"), RATE_TYPE)
    assert count_jobs() == 2


def test_in_a_batch_only_the_new_jobs_count(client, quota_key):
    limited = quota_key(enqueue_rate="3/60")
    enqueue_ok(client, limited, idempotency_key="a")
    enqueue_ok(client, limited, idempotency_key="b")
    batch = [{"type": "email", "idempotency_key": key} for key in ("a", "b", "c")]
    response = client.post("/jobs/batch", json={"jobs": batch}, headers=limited)
    assert response.status_code == 201
    assert [job["created"] for job in response.get_json()["jobs"]] == [False, False, True]
    refusal(post(client, limited), RATE_TYPE)


def test_the_rate_counts_jobs_that_were_claimed_or_cancelled_since(client, quota_key, claim):
    limited = quota_key(enqueue_rate="2/60")
    _, second = enqueue_ok(client, limited, 2)
    claim()
    assert client.post(f"/jobs/{second['id']}/cancel", headers=limited).status_code == 200
    refusal(post(client, limited), RATE_TYPE)


def test_rows_that_left_the_window_no_longer_count_and_are_deleted_within_two_windows(client, quota_key):
    limited = quota_key(enqueue_rate="3/3")
    enqueue_ok(client, limited, 3)  # running totals 1, 2, 3
    time.sleep(3.1)
    enqueue_ok(client, limited, 3)  # the first three left the window: three more fit …
    _, retry_after = refusal(post(client, limited), RATE_TYPE)  # … and no more
    time.sleep(retry_after)  # the first three are now over two windows old
    enqueue_ok(client, limited)
    with db.engine.connect() as conn:
        totals = conn.execute(select(EnqueueLedger.running_total)).scalars().all()
    assert min(totals) > 3 and max(totals) == 7


# --- the most pending jobs -----------------------------------------------------------------------------


def test_with_m_jobs_pending_a_new_enqueue_is_refused_with_429_and_retry_after(client, quota_key):
    limited = quota_key(max_pending=3)
    enqueue_ok(client, limited, 3)
    body, retry_after = refusal(post(client, limited), PENDING_TYPE)
    assert retry_after == 5  # a fixed hint: when a job leaves pending is up to the workers
    assert body["title"] == "Too many pending jobs"
    assert (body["quota"], body["limit"], body["pending"], body["requested"]) == ("max_pending", 3, 3, 1)
    assert "at most 3 jobs pending" in body["detail"]
    assert count_jobs(status="pending") == 3


def test_completing_one_frees_a_slot(client, quota_key, claim, worker):
    limited = quota_key(max_pending=2)
    enqueue_ok(client, limited, 2)
    refusal(post(client, limited), PENDING_TYPE)
    taken = claim()
    done = client.post(f"/jobs/{taken['id']}/complete", json={"claim_token": taken["claim_token"]}, headers=worker)
    assert done.status_code == 200
    assert post(client, limited).status_code == 201
    refusal(post(client, limited), PENDING_TYPE)


def test_a_cancelled_job_frees_its_slot(client, quota_key):
    limited = quota_key(max_pending=1)
    [job] = enqueue_ok(client, limited)
    assert client.post(f"/jobs/{job['id']}/cancel", headers=limited).status_code == 200
    assert post(client, limited).status_code == 201


def test_a_job_scheduled_for_later_counts_as_pending(client, quota_key):
    limited = quota_key(max_pending=1)
    enqueue_ok(client, limited, run_at=rfc3339(utcnow() + timedelta(hours=1)))
    refusal(post(client, limited), PENDING_TYPE)


def test_a_batch_that_would_pass_max_pending_is_refused_whole(client, quota_key):
    limited = quota_key(max_pending=5)
    enqueue_ok(client, limited, 3)
    body, _ = refusal(post_batch(client, limited, 3), PENDING_TYPE)
    assert (body["pending"], body["requested"]) == (3, 3)
    assert "it has 3, so 3 more would pass the limit" in body["detail"]
    assert count_jobs() == 3
    assert post_batch(client, limited, 2).status_code == 201
    assert count_jobs() == 5


def post_children(client, headers, parent_id: int, count: int):
    """A batch of ``count`` children of one parent: each waits until the parent completes."""
    return client.post(
        "/jobs/batch",
        json={"jobs": [{"type": "email", "depends_on": [parent_id]} for _ in range(count)]},
        headers=headers,
    )


def test_waiting_children_count_toward_max_pending(client, quota_key):
    limited = quota_key(max_pending=10)
    [parent] = enqueue_ok(client, limited)
    assert post_children(client, limited, parent["id"], 9).status_code == 201
    body, _ = refusal(post_children(client, limited, parent["id"], 9), PENDING_TYPE)
    assert (body["pending"], body["requested"]) == (10, 9)
    assert "waiting ones included" in body["detail"]
    assert (count_jobs(status="pending"), count_jobs(status="waiting")) == (1, 9)


def test_a_lone_job_is_refused_while_waiting_children_fill_max_pending(client, quota_key):
    limited = quota_key(max_pending=3)
    [parent] = enqueue_ok(client, limited)
    assert post_children(client, limited, parent["id"], 2).status_code == 201
    body, _ = refusal(post(client, limited), PENDING_TYPE)
    assert (body["pending"], body["requested"]) == (3, 1)
    assert count_jobs() == 3


def test_when_the_parent_completes_its_children_become_pending_within_max_pending(client, quota_key, claim, worker):
    limited = quota_key(max_pending=10)
    [parent] = enqueue_ok(client, limited)
    for _ in range(20):  # the outside test's twenty batches of nine: only the first gets in
        post_children(client, limited, parent["id"], 9)
    taken = claim()
    done = client.post(f"/jobs/{taken['id']}/complete", json={"claim_token": taken["claim_token"]}, headers=worker)
    assert done.status_code == 200
    assert (count_jobs(status="pending"), count_jobs(status="waiting")) == (9, 0)


def test_a_failed_attempt_going_back_to_pending_is_not_refused_and_counts(client, quota_key, claim, worker):
    """A worker's requeue is never refused (the job was counted at its enqueue); the key's next enqueue is."""
    limited = quota_key(max_pending=1)
    enqueue_ok(client, limited)
    taken = claim()
    enqueue_ok(client, limited)  # the first is running: it does not count
    failed = client.post(
        f"/jobs/{taken['id']}/fail", json={"claim_token": taken["claim_token"], "error": "boom"}, headers=worker
    )
    assert (failed.status_code, failed.get_json()["status"]) == (200, "pending")
    body, _ = refusal(post(client, limited), PENDING_TYPE)
    assert body["pending"] == 1  # counted up to the limit only
    assert count_jobs(status="pending") == 2


def test_a_replay_is_answered_even_with_m_jobs_pending(client, quota_key):
    limited = quota_key(max_pending=1)
    [job] = enqueue_ok(client, limited, idempotency_key="once")
    replay = post(client, limited, idempotency_key="once")
    assert (replay.status_code, replay.get_json()["id"]) == (200, job["id"])


def test_other_keys_jobs_do_not_count(client, quota_key, producer):
    limited = quota_key(max_pending=1, enqueue_rate="1/60")
    enqueue_ok(client, producer, 3)
    enqueue_ok(client, limited)
    refusal(post(client, limited), RATE_TYPE)  # the rate is met first; both are full
    assert count_jobs() == 4


def test_with_both_quotas_the_pending_limit_refuses_while_the_rate_has_room(client, quota_key):
    limited = quota_key(enqueue_rate="10/60", max_pending=2)
    enqueue_ok(client, limited, 2)
    refusal(post(client, limited), PENDING_TYPE)


# --- without quotas nothing changes ---------------------------------------------------------------------


def test_a_key_without_quotas_is_not_limited_and_writes_no_ledger(client, producer):
    assert post_batch(client, producer, 500).status_code == 201
    assert post_batch(client, producer, 500).status_code == 201
    assert count_jobs(status="pending") == 1000
    with db.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(EnqueueLedger)).scalar_one() == 0


def test_an_admin_key_enqueues_without_limits(client, admin):
    assert post_batch(client, admin, 500).status_code == 201

"""Every request on a job in each state, and the API's answer to it; what the job then becomes is the product's own
table's to say (queuelog/states.py TRANSITIONS), never a copy of it here. Then failure backoff, retries and the
event log."""

from __future__ import annotations

from datetime import timedelta

import pytest

from queuelog.core.clock import utcnow
from queuelog.states import TRANSITIONS, Actor, JobStatus
from tests.support.factories import assert_problem, event_rows, key_id, when

TRANSITIONS_BY_ACTION = {move.action: move for move in TRANSITIONS}

#: Each request the table sends: the API's name for it → the product's move (queuelog.states.TRANSITIONS).
MOVE_OF = {
    "claim": "claim",
    "complete": "complete",
    "complete-wrong-token": "complete",
    "fail": "fail_retry",
    "fail-for-good": "fail_final",
    "heartbeat": "heartbeat",
    "release": "release",
    "cancel": "cancel",
    "retry": "retry",
}
#: The table's callers as the product's table names them; other_* are a second key of the same role.
ACTOR_OF = {
    "worker": Actor.HOLDER,
    "other_worker": Actor.HOLDER,
    "producer": Actor.PRODUCER,
    "other_producer": Actor.PRODUCER,
    "admin": Actor.ADMIN,
}
#: A request that is not the job's own (another producer's key, a worker without the claim, a stale token) is refused
#: whatever the product's table allows.
NOT_THE_JOBS_OWN = {"other_producer", "other_worker"}

# (from-state, action, actor, the API's answer): what the job becomes is the product's table's to say.
REQUESTS = [
    ("pending", "claim", "worker", 200),
    ("pending", "cancel", "producer", 200),
    ("pending", "cancel", "admin", 200),
    ("pending", "cancel", "other_producer", 404),
    ("pending", "retry", "admin", 409),
    ("pending", "retry", "producer", 403),
    ("pending", "complete", "worker", 409),
    ("pending", "fail", "worker", 409),
    ("pending", "heartbeat", "worker", 409),
    ("pending", "release", "worker", 409),
    ("running", "complete", "worker", 200),
    ("running", "fail", "worker", 200),
    ("running", "fail-for-good", "worker", 200),
    ("running", "heartbeat", "worker", 200),
    ("running", "release", "worker", 200),
    ("running", "complete", "other_worker", 409),
    ("running", "fail", "other_worker", 409),
    ("running", "heartbeat", "other_worker", 409),
    ("running", "release", "other_worker", 409),
    ("running", "complete-wrong-token", "worker", 409),
    ("running", "complete", "producer", 403),
    ("running", "cancel", "producer", 409),
    ("running", "cancel", "admin", 409),
    ("running", "retry", "admin", 409),
    ("running", "claim", "worker", 204),
    ("completed", "complete", "worker", 409),
    ("completed", "fail", "worker", 409),
    ("completed", "heartbeat", "worker", 409),
    ("completed", "release", "worker", 409),
    ("completed", "cancel", "producer", 409),
    ("completed", "cancel", "admin", 409),
    ("completed", "retry", "admin", 409),
    ("completed", "claim", "worker", 204),
    ("failed", "retry", "admin", 200),
    ("failed", "retry", "producer", 403),
    ("failed", "cancel", "admin", 409),
    ("failed", "complete", "worker", 409),
    ("failed", "fail", "worker", 409),
    ("failed", "claim", "worker", 204),
    ("cancelled", "retry", "admin", 200),
    ("cancelled", "cancel", "producer", 409),
    ("cancelled", "cancel", "admin", 409),
    ("cancelled", "complete", "worker", 409),
    ("cancelled", "claim", "worker", 204),
]


def status_after(from_state: str, action: str, actor: str, code: int) -> str:
    """The status the re-read row must have: the product's move on a 200, the status it had on any refusal."""
    move = TRANSITIONS_BY_ACTION[MOVE_OF[action]]
    allowed = JobStatus(from_state) in move.from_statuses and ACTOR_OF[actor] in move.actors
    mine = actor not in NOT_THE_JOBS_OWN and action != "complete-wrong-token"
    assert (code == 200) == (allowed and mine), f"the API's {code} disagrees with states.TRANSITIONS for {action}"
    return move.to_status if code == 200 else from_state


@pytest.fixture
def headers_of(producer, other_producer, worker, other_worker, admin):
    """The table's actor names → their Authorization headers."""
    return {
        "producer": producer,
        "other_producer": other_producer,
        "worker": worker,
        "other_worker": other_worker,
        "admin": admin,
    }


@pytest.fixture
def job_in(make_job, producer):
    """job_in(status, **columns) → id of a job of producer-a in that state (held by worker-a, token-a)."""

    def _make(status: str, **columns) -> int:
        owner = {"producer_key_id": key_id("producer-a"), "producer": "producer-a"}
        if status in {"completed", "failed"}:
            # The old holder and token stay on the row: only the status guard may refuse them.
            owner.update(worker_id="worker-a", claim_token="token-a", claimed_at=utcnow())
        return make_job(status=status, **owner, **columns)

    return _make


def act(client, job_id: int, action: str, headers: dict):
    """Send one action request as the table names it."""
    token = {"claim_token": "token-a"}
    requests = {
        "claim": ("/jobs/claim", {}),
        "complete": (f"/jobs/{job_id}/complete", token),
        "complete-wrong-token": (f"/jobs/{job_id}/complete", {"claim_token": "token-b"}),
        "fail": (f"/jobs/{job_id}/fail", dict(token, error="boom")),
        "fail-for-good": (f"/jobs/{job_id}/fail", dict(token, error="boom", retryable=False)),
        "heartbeat": (f"/jobs/{job_id}/heartbeat", token),
        "release": (f"/jobs/{job_id}/release", token),
        "cancel": (f"/jobs/{job_id}/cancel", None),
        "retry": (f"/jobs/{job_id}/retry", None),
    }
    path, body = requests[action]
    return client.post(path, json=body, headers=headers)


@pytest.mark.parametrize(
    "from_state, action, actor, code",
    REQUESTS,
    ids=[f"{f}-{a}-by-{who}" for f, a, who, _ in REQUESTS],
)
def test_transition(client, headers_of, job_in, read_job, from_state, action, actor, code):
    to_state = status_after(from_state, action, actor, code)
    job_id = job_in(from_state)
    before = read_job(job_id)
    response = act(client, job_id, action, headers_of[actor])
    assert response.status_code == code, response.data
    row = read_job(job_id)
    assert row.status == to_state
    if code == 200:
        body = response.get_json()
        assert body["id"] == job_id and body["status"] == to_state
    elif code == 204:
        assert response.data == b""
    else:
        assert_problem(response, code)
        assert row == before, "a refused action must leave the row exactly as it was"


@pytest.mark.parametrize("action", ["complete", "fail", "heartbeat", "release", "cancel", "retry"])
def test_actions_on_a_job_that_does_not_exist_are_404(client, headers_of, action):
    actor = {"cancel": "producer", "retry": "admin"}.get(action, "worker")
    assert_problem(act(client, 424242, action, headers_of[actor]), 404)


@pytest.mark.parametrize(
    "from_state, action, actor",
    [
        ("running", "complete", "worker"),
        ("running", "fail", "worker"),
        ("running", "fail-for-good", "worker"),
        ("running", "heartbeat", "worker"),
        ("running", "release", "worker"),
        ("pending", "cancel", "producer"),
        ("pending", "cancel", "admin"),
        ("failed", "retry", "admin"),
        ("cancelled", "retry", "admin"),
    ],
)
def test_every_action_answers_200_with_the_job_as_it_now_is(
    client, headers_of, job_in, admin, from_state, action, actor
):
    job_id = job_in(from_state)
    response = act(client, job_id, action, headers_of[actor])
    assert response.status_code == 200
    now_seen_by_admin = client.get(f"/jobs/{job_id}", headers=admin).get_json()
    body = response.get_json()
    # Only what the caller may not see (V-10) can differ.
    assert {k: v for k, v in body.items() if k != "error"} == {
        k: v for k, v in now_seen_by_admin.items() if k != "error"
    }


# --- complete, heartbeat, release ----------------------------------------------------------------


def test_complete_stores_the_result_and_the_time(client, worker, job_in, read_job):
    job_id = job_in("running")
    body = client.post(
        f"/jobs/{job_id}/complete", json={"claim_token": "token-a", "result": {"rows": 3}}, headers=worker
    ).get_json()
    assert body["result"] == {"rows": 3}
    assert body["completed_at"] is not None
    row = read_job(job_id)
    assert row.claim_token is None and row.lease_expires_at is None


def test_complete_without_result_leaves_it_null(client, worker, job_in):
    job_id = job_in("running")
    body = client.post(f"/jobs/{job_id}/complete", json={"claim_token": "token-a"}, headers=worker).get_json()
    assert body["status"] == "completed" and body["result"] is None


@pytest.mark.parametrize("body, seconds", [({}, 300), ({"lease_seconds": 900}, 900), ({"lease_seconds": 1}, 1)])
def test_heartbeat_extends_the_lease(client, worker, job_in, body, seconds):
    job_id = job_in("running", lease_expires_at=utcnow() + timedelta(seconds=5))
    before = utcnow()
    response = client.post(f"/jobs/{job_id}/heartbeat", json=dict(body, claim_token="token-a"), headers=worker)
    lease_end = when(response.get_json()["lease_expires_at"])
    assert before + timedelta(seconds=seconds) <= lease_end <= utcnow() + timedelta(seconds=seconds)


@pytest.mark.parametrize("lease_seconds", [0, 86401, "60"])
def test_heartbeat_lease_out_of_bounds_is_422(client, worker, job_in, lease_seconds):
    job_id = job_in("running")
    response = client.post(
        f"/jobs/{job_id}/heartbeat", json={"claim_token": "token-a", "lease_seconds": lease_seconds}, headers=worker
    )
    assert assert_problem(response, 422)["errors"][0]["pointer"] == "/lease_seconds"


def test_release_keeps_retry_count_and_frees_the_job(client, worker, job_in, read_job):
    job_id = job_in("running", retry_count=2)
    client.post(f"/jobs/{job_id}/release", json={"claim_token": "token-a"}, headers=worker)
    row = read_job(job_id)
    assert (row.status, row.retry_count) == ("pending", 2)
    assert row.worker_id is row.claim_token is row.claimed_at is row.lease_expires_at is None


# --- fail: requeue, backoff, failing for good ----------------------------------------------------


def test_fail_with_retries_left_requeues_and_keeps_the_error(client, worker, admin, job_in, read_job):
    job_id = job_in("running", retry_count=1)
    client.post(f"/jobs/{job_id}/fail", json={"claim_token": "token-a", "error": "smtp timeout"}, headers=worker)
    row = read_job(job_id)
    assert (row.status, row.retry_count, row.error) == ("pending", 2, "smtp timeout")
    assert row.worker_id is row.claimed_at is row.claim_token is row.lease_expires_at is None
    assert client.get(f"/jobs/{job_id}", headers=admin).get_json()["error"] == "smtp timeout"


def test_base_zero_backoff_makes_a_failed_job_claimable_at_once(client, worker, job_in, claim):
    job_id = job_in("running")
    client.post(f"/jobs/{job_id}/fail", json={"claim_token": "token-a"}, headers=worker)
    assert claim()["id"] == job_id


@pytest.mark.parametrize("config_overrides", [{"RETRY_BACKOFF_BASE": 10, "RETRY_BACKOFF_MAX": 50}])
@pytest.mark.parametrize("retry_count, full_delay", [(0, 10), (1, 20), (2, 40), (3, 50), (8, 50)])
def test_fail_backs_off_base_times_two_to_the_retry_count_capped_with_jitter(
    client, worker, job_in, config_overrides, retry_count, full_delay
):
    job_id = job_in("running", retry_count=retry_count, max_retries=10)
    before = utcnow()
    body = client.post(f"/jobs/{job_id}/fail", json={"claim_token": "token-a"}, headers=worker).get_json()
    after = utcnow()
    assert body["status"] == "pending"
    run_at = when(body["run_at"])
    # Jitter scales the delay by a factor in [0.5, 1].
    assert before + timedelta(seconds=full_delay * 0.5) <= run_at <= after + timedelta(seconds=full_delay)


@pytest.mark.parametrize("config_overrides", [{"RETRY_BACKOFF_BASE": 100, "RETRY_BACKOFF_MAX": 3600}])
def test_backoff_is_jittered_so_failed_jobs_do_not_return_in_step(client, worker, job_in, config_overrides):
    delays = set()
    for _ in range(5):
        job_id = job_in("running")
        body = client.post(f"/jobs/{job_id}/fail", json={"claim_token": "token-a"}, headers=worker).get_json()
        delays.add(when(body["run_at"]) - when(body["updated_at"]))
    assert len(delays) > 1


@pytest.mark.parametrize("config_overrides", [{"RETRY_BACKOFF_BASE": 60}])
def test_a_backed_off_job_is_not_claimable_yet(client, worker, job_in, config_overrides):
    job_id = job_in("running")
    client.post(f"/jobs/{job_id}/fail", json={"claim_token": "token-a"}, headers=worker)
    assert client.post("/jobs/claim", headers=worker).status_code == 204


def test_max_retries_zero_fails_on_the_first_failure(client, worker, job_in, read_job):
    job_id = job_in("running", max_retries=0)
    body = client.post(f"/jobs/{job_id}/fail", json={"claim_token": "token-a", "error": "x"}, headers=worker).get_json()
    assert body["status"] == "failed"
    assert (read_job(job_id).status, read_job(job_id).retry_count) == ("failed", 0)


def test_retryable_false_fails_at_once_with_retries_left(client, worker, job_in, read_job):
    job_id = job_in("running", retry_count=0, max_retries=5)
    client.post(f"/jobs/{job_id}/fail", json={"claim_token": "token-a", "retryable": False}, headers=worker)
    assert (read_job(job_id).status, read_job(job_id).retry_count) == ("failed", 0)


def test_the_last_retry_failing_fails_for_good(client, worker, job_in, read_job):
    job_id = job_in("running", retry_count=3, max_retries=3)
    client.post(f"/jobs/{job_id}/fail", json={"claim_token": "token-a", "error": "again"}, headers=worker)
    row = read_job(job_id)
    assert (row.status, row.retry_count, row.error) == ("failed", 3, "again")


@pytest.mark.parametrize("from_state", ["failed", "cancelled"])
def test_retry_resets_retry_count_to_zero(client, admin, job_in, read_job, from_state):
    job_id = job_in(from_state, retry_count=3, max_retries=3)
    body = client.post(f"/jobs/{job_id}/retry", headers=admin).get_json()
    assert (body["status"], body["retry_count"]) == ("pending", 0)
    row = read_job(job_id)
    assert (row.status, row.retry_count, row.worker_id, row.claim_token) == ("pending", 0, None, None)


# --- the event log -------------------------------------------------------------------------------


def test_the_event_log_records_every_change_with_actor_and_error(client, producer, worker, admin, enqueue, claim):
    job_id = enqueue(max_retries=1)["id"]
    token = claim()["claim_token"]
    client.post(f"/jobs/{job_id}/fail", json={"claim_token": token, "error": "first"}, headers=worker)
    token = claim()["claim_token"]
    client.post(f"/jobs/{job_id}/fail", json={"claim_token": token, "error": "second"}, headers=worker)
    client.post(f"/jobs/{job_id}/retry", headers=admin)
    token = claim()["claim_token"]
    client.post(f"/jobs/{job_id}/complete", json={"claim_token": token}, headers=worker)

    response = client.get(f"/jobs/{job_id}/events", headers=admin)
    assert response.status_code == 200
    log = [
        (e["event"], e["from_status"], e["to_status"], e["actor"], e["error"]) for e in response.get_json()["events"]
    ]
    assert log == [
        ("enqueued", None, "pending", "key:producer-a", None),
        ("claimed", "pending", "running", "key:worker-a", None),
        ("requeued", "running", "pending", "key:worker-a", "first"),
        ("claimed", "pending", "running", "key:worker-a", None),
        ("failed", "running", "failed", "key:worker-a", "second"),
        ("retried", "failed", "pending", "key:admin-a", None),
        ("claimed", "pending", "running", "key:worker-a", None),
        ("completed", "running", "completed", "key:worker-a", None),
    ]
    events = response.get_json()["events"]
    assert all(e["job_id"] == job_id and e["at"].endswith("Z") for e in events)
    assert [e["attempt"] for e in events] == [0, 0, 1, 1, 1, 0, 0, 0]


def test_cancel_and_release_are_logged(client, producer, worker, enqueue, claim):
    released = enqueue()["id"]
    token = claim()["claim_token"]
    client.post(f"/jobs/{released}/release", json={"claim_token": token}, headers=worker)
    client.post(f"/jobs/{released}/cancel", headers=producer)
    assert [(e.event, e.actor) for e in event_rows(released)] == [
        ("enqueued", "key:producer-a"),
        ("claimed", "key:worker-a"),
        ("released", "key:worker-a"),
        ("cancelled", "key:producer-a"),
    ]


def test_a_refused_action_writes_no_event(client, worker, job_in):
    job_id = job_in("completed")
    before = len(event_rows(job_id))
    client.post(f"/jobs/{job_id}/complete", json={"claim_token": "token-a"}, headers=worker)
    assert len(event_rows(job_id)) == before


def test_events_of_a_job_that_does_not_exist_are_404(client, admin):
    assert_problem(client.get("/jobs/424242/events", headers=admin), 404)

"""Push deliveries from the server's dispatcher to a real local target: what is sent, how it is signed, and what
each kind of answer does to the job."""

from __future__ import annotations

import base64
import time

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from queuelog import queue
from queuelog.core.clock import utcnow
from queuelog.push import dispatcher, signing
from tests.support.push_target import Reply, push_target

pytestmark = pytest.mark.parametrize("config_overrides", [{"PUSH_ALLOW_PRIVATE": True}], indirect=True)
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture(autouse=True)
def _fresh_copy(fresh_flow_settings):
    """Each test's database is new; the process's copy of which types are pushed must be too."""


@pytest.fixture
def delivering(app):
    """The app's push dispatcher, running for the test."""
    running = dispatcher.start(app)
    yield running
    running.stop()


@pytest.fixture
def target_for(client, admin):
    """target_for(target, mode=..., timeout_seconds=...) → the secret of the email type's new push target."""

    def _set(target, **push):
        response = client.patch("/types/email", json={"push": {"url": target.url, **push}}, headers=admin)
        assert response.status_code == 200, response.get_json()
        return response.get_json()["push"]["secret"]

    return _set


def wait_for_status(client, admin, job_id, *statuses, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.get(f"/jobs/{job_id}", headers=admin).get_json()
        if job["status"] in statuses:
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} is {job['status']}, not {statuses}")


def events_of(client, admin, job_id):
    return client.get(f"/jobs/{job_id}/events", headers=admin).get_json()["events"]


# --- what is sent -------------------------------------------------------------------------------------------


def test_a_delivery_posts_the_job_as_a_claim_shows_it(client, admin, enqueue, target_for, delivering):
    with push_target() as target:
        target_for(target)
        job = enqueue(payload={"to": "ada@example.com"})
        (delivery,) = target.wait_for(1)
    sent = delivery.job
    assert (sent["id"], sent["type"], sent["payload"]) == (job["id"], "email", {"to": "ada@example.com"})
    assert sent["status"] == "running" and sent["worker_id"] == "push:email" and sent["claim_token"]
    assert delivery.headers["content-type"] == "application/json"


def test_every_delivery_verifies_with_the_reference_verifier(client, admin, enqueue, target_for, delivering):
    with push_target() as target:
        secret = target_for(target)
        enqueue()
        (delivery,) = target.wait_for(1)
    assert Webhook(secret).verify(delivery.body, delivery.headers) == delivery.job


def test_the_verifier_rejects_a_wrong_secret(client, admin, enqueue, target_for, delivering):
    with push_target() as target:
        target_for(target)
        enqueue()
        (delivery,) = target.wait_for(1)
    other = "whsec_" + base64.b64encode(b"another key of 32 bytes, not it!").decode()
    with pytest.raises(WebhookVerificationError):
        Webhook(other).verify(delivery.body, delivery.headers)


def test_the_verifier_rejects_a_changed_body(client, admin, enqueue, target_for, delivering):
    with push_target() as target:
        secret = target_for(target)
        enqueue()
        (delivery,) = target.wait_for(1)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(delivery.body.replace(b'"email"', b'"other"'), delivery.headers)


def test_the_verifier_rejects_a_signature_over_five_minutes_old(client, admin, enqueue, target_for, delivering):
    with push_target() as target:
        secret = target_for(target)
        enqueue()
        (delivery,) = target.wait_for(1)
    old = int(time.time()) - 301
    resigned = signing.headers(delivery.webhook_id, old, delivery.body, [secret])
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(delivery.body, resigned)


def test_after_a_rotation_both_the_old_and_the_new_secret_verify(client, admin, enqueue, target_for, delivering):
    with push_target() as target:
        old = target_for(target)
        new = client.post("/types/email/push/rotate", headers=admin).get_json()["push"]["secret"]
        enqueue()
        (delivery,) = target.wait_for(1)
    assert len(delivery.headers["webhook-signature"].split(" ")) == 2
    assert Webhook(old).verify(delivery.body, delivery.headers) == delivery.job
    assert Webhook(new).verify(delivery.body, delivery.headers) == delivery.job


def test_the_webhook_id_is_the_job_and_its_attempt(client, admin, enqueue, target_for, delivering):
    answers = iter([Reply(500), Reply(200)])
    with push_target(lambda delivery: next(answers)) as target:
        target_for(target)
        job = enqueue()
        first, second = target.wait_for(2)
    assert (first.webhook_id, second.webhook_id) == (f"{job['id']}-1", f"{job['id']}-2")


def test_the_trace_context_travels_as_headers(client, admin, producer, target_for, delivering):
    with push_target() as target:
        target_for(target)
        headers = {**producer, "traceparent": TRACEPARENT, "tracestate": "vendor=1"}
        assert client.post("/jobs", json={"type": "email"}, headers=headers).status_code == 201
        (delivery,) = target.wait_for(1)
    assert (delivery.headers["traceparent"], delivery.headers["tracestate"]) == (TRACEPARENT, "vendor=1")


# --- what the answer does (sync) ---------------------------------------------------------------------------


def test_a_2xx_completes_the_job_with_its_json_object_as_the_result(client, admin, enqueue, target_for, delivering):
    with push_target(lambda delivery: Reply(200, {"sent": True})) as target:
        target_for(target)
        job = enqueue()
        done = wait_for_status(client, admin, job["id"], "completed")
    assert done["result"] == {"sent": True}
    delivered = [event for event in events_of(client, admin, job["id"]) if event["event"] == "delivered"]
    assert [(event["http_status"], event["error"]) for event in delivered] == [(200, None)]


def test_a_5xx_fails_the_attempt_with_its_status_and_body(client, admin, enqueue, target_for, delivering):
    with push_target(lambda delivery: Reply(500, b"database is down")) as target:
        target_for(target)
        job = enqueue(max_retries=0)
        failed = wait_for_status(client, admin, job["id"], "failed")
    assert failed["error"] == "HTTP 500: database is down"
    assert events_of(client, admin, job["id"])[-2]["http_status"] == 500


def test_only_the_first_kib_of_a_failed_answer_is_kept(client, admin, enqueue, target_for, delivering):
    with push_target(lambda delivery: Reply(502, b"x" * 5000)) as target:
        target_for(target)
        job = enqueue(max_retries=0)
        failed = wait_for_status(client, admin, job["id"], "failed")
    assert failed["error"] == "HTTP 502: " + "x" * 1024


def test_a_secret_in_a_failed_answer_is_scrubbed(client, admin, enqueue, target_for, delivering):
    with push_target(lambda delivery: Reply(500, b"connect failed: password=hunter2")) as target:
        target_for(target)
        job = enqueue(max_retries=0)
        failed = wait_for_status(client, admin, job["id"], "failed")
    assert "hunter2" not in failed["error"]


@pytest.mark.parametrize("status", [429, 503])
def test_a_retry_after_answer_comes_back_later_without_counting_a_failure(
    client, admin, enqueue, target_for, delivering, read_job, status
):
    with push_target(lambda delivery: Reply(status, headers={"Retry-After": "120"})) as target:
        target_for(target)
        job = enqueue()
        target.wait_for(1)
        back = wait_for_status(client, admin, job["id"], "pending")
    row = read_job(job["id"])
    assert back["retry_count"] == 0
    assert 100 < (row.run_at - utcnow()).total_seconds() <= 120
    assert events_of(client, admin, job["id"])[-1]["event"] == "released"


def test_a_503_without_retry_after_comes_back_after_the_backoff_without_counting_a_failure(
    client, admin, enqueue, target_for, delivering
):
    answers = iter([Reply(503, b"busy"), Reply(200)])
    with push_target(lambda delivery: next(answers)) as target:
        target_for(target)
        job = enqueue()
        first, second = target.wait_for(2)
        done = wait_for_status(client, admin, job["id"], "completed")
    assert done["retry_count"] == 0
    assert first.webhook_id == second.webhook_id == f"{job['id']}-1", "the same attempt, delivered again"


def test_no_answer_within_the_timeout_fails_the_attempt(client, admin, enqueue, target_for, delivering):
    with push_target(lambda delivery: Reply(200, delay=2.5)) as target:
        target_for(target, timeout_seconds=1)
        job = enqueue(max_retries=0)
        failed = wait_for_status(client, admin, job["id"], "failed")
    assert failed["error"] == "no answer within 1 s (timeout_seconds)"
    delivered = [event for event in events_of(client, admin, job["id"]) if event["event"] == "delivered"]
    assert delivered[0]["http_status"] is None


def test_a_target_that_resolves_to_a_private_address_is_refused_at_delivery(
    app, client, admin, enqueue, target_for, delivering
):
    with push_target() as target:
        target_for(target)  # allowed when set
        app.config["PUSH_ALLOW_PRIVATE"] = False  # then the server's rule changes: each delivery checks again
        job = enqueue(max_retries=0)
        failed = wait_for_status(client, admin, job["id"], "failed")
        assert target.deliveries == []
    assert failed["error"].startswith("refused: '127.0.0.1' is, or resolves to, 127.0.0.1")


def test_a_paused_type_is_not_delivered(client, admin, enqueue, target_for, delivering):
    with push_target() as target:
        target_for(target)
        client.patch("/types/email", json={"paused": True}, headers=admin)
        job = enqueue()
        time.sleep(1.5)
        assert target.deliveries == []
        client.patch("/types/email", json={"paused": False}, headers=admin)
        target.wait_for(1)
    wait_for_status(client, admin, job["id"], "completed")


def test_the_types_page_answer_shows_the_last_delivery(client, admin, enqueue, target_for, delivering):
    with push_target(lambda delivery: Reply(404, b"no such hook")) as target:
        target_for(target)
        job = enqueue(max_retries=0)
        wait_for_status(client, admin, job["id"], "failed")
    last = client.get("/types/email", headers=admin).get_json()["push"]["last_delivery"]
    assert (last["job_id"], last["http_status"], last["error"]) == (job["id"], 404, "HTTP 404: no such hook")


# --- async: the target answers later, with its token alone ---------------------------------------------------


def test_async_accepted_leaves_the_job_running_for_the_target(client, admin, enqueue, target_for, delivering):
    with push_target(lambda delivery: Reply(202)) as target:
        target_for(target, mode="async")
        job = enqueue()
        target.wait_for(1)
        time.sleep(0.3)
    assert client.get(f"/jobs/{job['id']}", headers=admin).get_json()["status"] == "running"


def test_async_target_completes_with_its_claim_token_alone(client, admin, enqueue, target_for, delivering):
    with push_target(lambda delivery: Reply(202)) as target:
        target_for(target, mode="async")
        job = enqueue()
        (delivery,) = target.wait_for(1)
    token = delivery.job["claim_token"]
    wait_for_status(client, admin, job["id"], "running")
    beat = client.post(f"/jobs/{job['id']}/heartbeat", json={"claim_token": token})
    assert beat.status_code == 200
    done = client.post(f"/jobs/{job['id']}/complete", json={"claim_token": token, "result": {"ok": 1}})
    assert done.status_code == 200 and done.get_json()["status"] == "completed"
    assert done.get_json()["result"] == {"ok": 1}


def test_async_target_fails_with_its_claim_token_alone(client, admin, enqueue, target_for, delivering):
    with push_target(lambda delivery: Reply(202)) as target:
        target_for(target, mode="async")
        job = enqueue(max_retries=0)
        (delivery,) = target.wait_for(1)
    wait_for_status(client, admin, job["id"], "running")
    failed = client.post(f"/jobs/{job['id']}/fail", json={"claim_token": delivery.job["claim_token"], "error": "no"})
    assert failed.status_code == 200 and failed.get_json()["status"] == "failed"


def test_a_wrong_token_alone_changes_nothing(client, admin, enqueue, target_for, delivering, read_job):
    with push_target(lambda delivery: Reply(202)) as target:
        target_for(target, mode="async")
        job = enqueue()
        target.wait_for(1)
    wait_for_status(client, admin, job["id"], "running")
    before = read_job(job["id"])
    response = client.post(f"/jobs/{job['id']}/complete", json={"claim_token": "guessed"})
    assert response.status_code == 409
    assert read_job(job["id"]) == before


def test_a_token_alone_on_a_job_that_was_not_pushed_is_a_401(client, enqueue, make_job):
    job_id = make_job(status="running", type="report")
    response = client.post(f"/jobs/{job_id}/complete", json={"claim_token": "token-a"})
    assert response.status_code == 401


def test_an_answer_after_the_claim_moved_on_logs_no_delivered_event(client, admin, enqueue, target_for, delivering):
    with push_target(lambda delivery: Reply(202, delay=1.0)) as target:
        target_for(target, mode="async")
        job = enqueue()
        target.wait_for(1)
        client.patch("/types/email", json={"paused": True}, headers=admin)
        queue.release(job["id"], "admin:alice")  # given back while the target was still answering
        time.sleep(1.5)
    assert [event["event"] for event in events_of(client, admin, job["id"])] == ["enqueued", "claimed", "released"]

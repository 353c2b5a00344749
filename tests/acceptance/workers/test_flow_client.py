"""The Python Client and flow control, against a real gunicorn: jobs carry a concurrency key, one by one and in
batches, and a key the server refuses is an ApiError with its pointer."""

from __future__ import annotations

import pytest

from queuelog.worker import ApiError, Client

# One gunicorn and its database for the module (tests/worker_apps/harness.py).
pytestmark = pytest.mark.shared_server


def test_enqueue_sends_the_concurrency_key_and_the_job_carries_it(producer_client):
    job = producer_client.enqueue("ok", {"invoice": 7}, concurrency_key="tenant-42")
    assert job["concurrency_key"] == "tenant-42"
    assert producer_client.get_job(job["id"])["concurrency_key"] == "tenant-42"


def test_enqueue_without_a_concurrency_key_sends_none(producer_client):
    assert producer_client.enqueue("ok")["concurrency_key"] is None


def test_a_batch_item_carries_its_own_concurrency_key(producer_client):
    jobs = producer_client.enqueue_batch(
        [{"type": "ok", "concurrency_key": "a"}, {"type": "ok"}, {"type": "ok", "concurrency_key": "b"}]
    )
    assert [job["concurrency_key"] for job in jobs] == ["a", None, "b"]


def test_a_key_the_server_refuses_is_an_api_error_pointing_at_it(producer_client):
    with pytest.raises(ApiError) as refused:
        producer_client.enqueue("ok", concurrency_key="tenant 42\n")
    assert refused.value.status == 422
    assert [error["pointer"] for error in refused.value.problem["errors"]] == ["/concurrency_key"]


def test_claims_take_turns_across_the_keys_the_client_sent(server, producer_client, make_key):
    producer_client.enqueue_batch([{"type": "ok", "concurrency_key": "big"}] * 20)
    small = producer_client.enqueue("ok", concurrency_key="small")
    worker = Client(server.url, make_key("worker", "turns"))
    claimed = [job["id"] for job in worker.claim(["ok"], limit=3)]
    assert small["id"] in claimed

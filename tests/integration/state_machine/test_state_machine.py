"""A Hypothesis state machine drives random sequences of API calls against a model of the queue.

Rules are what clients and operators do: enqueue (with idempotency keys), claim (one or several),
complete (one, or several in one request), fail, heartbeat, release, cancel, retry, a worker dying
and `flask reap` giving its job back, stale workers and other workers trying tokens that are not
theirs. After every step the API and the database must agree with the model and keep the queue's
invariants: every job in exactly one of the five states, retry_count never above max_retries, a
completed job never changes again, a running job has a worker, a claim token and a lease, claims
come highest priority first then oldest, and every state change is in the event log. Every answer
must also be one that /openapi.json documents. RETRY_BACKOFF_BASE is 0 (conftest), so a requeued
job is claimable at once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from openapi_schema_validator import OAS31Validator
from sqlalchemy import delete, select, update

from queuelog.core.clock import utcnow
from queuelog.extensions import db
from queuelog.models import Job, JobEvent
from tests.support.api import bearer

STATUSES = {"pending", "running", "completed", "failed", "cancelled"}
PRIORITIES = {"low": 0, "medium": 10, "high": 20, "critical": 30}
WORKERS = ("worker-a", "worker-b")
MAX_STALLS = 3  # the default: a job whose worker died this often is quarantined
jobs_table, events_table = Job.__table__, JobEvent.__table__


@dataclass
class ModelJob:
    """What the queue must hold for one job, by the spec alone."""

    id: int
    priority: int
    max_retries: int
    request: tuple
    status: str = "pending"
    retry_count: int = 0
    stall_count: int = 0
    holder: str | None = None
    token: str | None = None


class QueueMachine(RuleBasedStateMachine):
    """One example: a fresh, empty queue and the same keys, then up to stateful_step_count rules."""

    def __init__(self, env: dict):
        super().__init__()
        self.client, self.runner, self.headers = env["client"], env["runner"], env["headers"]
        self.document = env["document"]
        with db.engine.begin() as conn:  # each example starts from an empty queue (keys are kept)
            conn.execute(delete(events_table))
            conn.execute(delete(jobs_table))
        self.jobs: dict[int, ModelJob] = {}
        self.job_by_key: dict[str, int] = {}
        self.stale: list[tuple[str, int, str]] = []  # (worker, job id, a token that is no longer current)
        self.completed_rows: dict[int, dict] = {}

    # --- helpers ------------------------------------------------------------------------------------

    def post(self, path: str, who: str, body: dict | None = None):
        response = self.client.post(path, json=body if body is not None else {}, headers=self.headers[who])
        self.matches_the_document("post", re.sub(r"/jobs/\d+", "/jobs/{job_id}", path), response)
        return response

    def matches_the_document(self, method: str, template: str, response) -> None:
        """Every answer, success or refusal, is one /openapi.json documents for the operation."""
        answers = self.document["paths"][template][method]["responses"]
        assert str(response.status_code) in answers, (method, template, response.status_code)
        content = answers[str(response.status_code)].get("content")
        if content is None:
            assert response.data == b""
            return
        assert response.mimetype in content
        schema = {**content[response.mimetype]["schema"], "components": self.document["components"]}
        OAS31Validator(schema).validate(response.get_json())

    def in_status(self, *statuses: str) -> list[ModelJob]:
        return [job for job in self.jobs.values() if job.status in statuses]

    def claim_order(self) -> list[int]:
        """Pending jobs as the claim must hand them out: highest priority first, then oldest."""
        return [job.id for job in sorted(self.in_status("pending"), key=lambda job: (-job.priority, job.id))]

    def lose_claim(self, job: ModelJob) -> None:
        """The job left running: its holder's token is stale from now on."""
        self.stale.append((job.holder, job.id, job.token))
        job.holder = job.token = None

    def now_completed(self, job: ModelJob) -> None:
        """Remember the completed row as stored: it must never change again."""
        job.status = "completed"
        self.lose_claim(job)
        with db.engine.connect() as conn:
            row = conn.execute(select(jobs_table).where(jobs_table.c.id == job.id)).one()
        self.completed_rows[job.id] = row._asdict()

    def requeue_or_fail(self, job: ModelJob) -> None:
        if job.retry_count < job.max_retries:
            job.status, job.retry_count = "pending", job.retry_count + 1
        else:
            job.status = "failed"

    def running_job(self, data) -> ModelJob:
        return data.draw(st.sampled_from(sorted(self.in_status("running"), key=lambda job: job.id)), label="job")

    def any_job(self, data) -> ModelJob:
        return data.draw(st.sampled_from(sorted(self.jobs.values(), key=lambda job: job.id)), label="job")

    # --- producers ------------------------------------------------------------------------------------

    @initialize(
        jobs=st.lists(st.tuples(st.sampled_from(sorted(PRIORITIES)), st.integers(0, 2)), min_size=1, max_size=4)
    )
    def some_jobs_are_waiting(self, jobs):
        """Start with work in the queue, so that most steps act on jobs rather than on an empty queue."""
        for priority, max_retries in jobs:
            self.enqueue("email", 0, priority, max_retries, None)

    @rule(
        job_type=st.sampled_from(["email", "report"]),
        n=st.integers(0, 2),
        priority=st.sampled_from(sorted(PRIORITIES)),
        max_retries=st.integers(0, 2),
        key=st.sampled_from([None, None, "key-1", "key-2"]),
    )
    def enqueue(self, job_type, n, priority, max_retries, key):
        body = {"type": job_type, "payload": {"n": n}, "priority": priority, "max_retries": max_retries}
        if key is not None:
            body["idempotency_key"] = key
        response = self.post("/jobs", "producer", body)
        request = (job_type, n, priority, max_retries)
        if key in self.job_by_key:
            earlier = self.jobs[self.job_by_key[key]]
            if earlier.request == request:
                assert response.status_code == 200, response.get_json()
                assert response.get_json()["id"] == earlier.id  # the replay is the same job, not a new one
            else:
                assert response.status_code == 422, response.get_json()
            return
        assert response.status_code == 201, response.get_json()
        job = response.get_json()
        assert job["id"] not in self.jobs and job["status"] == "pending"
        self.jobs[job["id"]] = ModelJob(job["id"], PRIORITIES[priority], max_retries, request)
        if key is not None:
            self.job_by_key[key] = job["id"]

    @precondition(lambda self: self.jobs)
    @rule(data=st.data())
    def producer_cancels(self, data):
        job = self.any_job(data)
        response = self.post(f"/jobs/{job.id}/cancel", "producer")
        if job.status == "pending":
            assert response.status_code == 200, response.get_json()
            job.status = "cancelled"
        else:
            assert response.status_code == 409, response.get_json()

    @precondition(lambda self: self.jobs)
    @rule(data=st.data())
    def admin_retries(self, data):
        job = self.any_job(data)
        response = self.post(f"/jobs/{job.id}/retry", "admin")
        if job.status in ("failed", "cancelled"):
            assert response.status_code == 200, response.get_json()
            job.status, job.retry_count, job.stall_count = "pending", 0, 0
        else:
            assert response.status_code == 409, response.get_json()

    # --- workers --------------------------------------------------------------------------------------

    @rule(worker=st.sampled_from(WORKERS), limit=st.sampled_from([None, None, 1, 3]))
    def claim(self, worker, limit):
        expected = self.claim_order()[: limit or 1]
        response = self.post("/jobs/claim", worker, {} if limit is None else {"limit": limit})
        if not expected:
            assert response.status_code == 204, response.get_json()
            return
        assert response.status_code == 200, response.get_json()
        claimed = [response.get_json()] if limit is None else response.get_json()["jobs"]
        assert [job["id"] for job in claimed] == expected  # highest priority first, then oldest
        for job in claimed:
            assert job["status"] == "running" and job["worker_id"] == worker
            assert job["claim_token"] and job["lease_expires_at"] and job["claimed_at"]
            model = self.jobs[job["id"]]
            model.status, model.holder, model.token = "running", worker, job["claim_token"]

    @precondition(lambda self: self.in_status("running"))
    @rule(data=st.data(), with_result=st.booleans())
    def holder_completes(self, data, with_result):
        job = self.running_job(data)
        body = {"claim_token": job.token, **({"result": {"ok": True}} if with_result else {})}
        response = self.post(f"/jobs/{job.id}/complete", job.holder, body)
        assert response.status_code == 200, response.get_json()
        assert response.get_json()["result"] == ({"ok": True} if with_result else None)
        self.now_completed(job)

    @precondition(lambda self: self.in_status("running"))
    @rule(data=st.data(), with_stale=st.booleans())
    def holder_completes_several_at_once(self, data, with_stale):
        worker = data.draw(st.sampled_from(sorted({job.holder for job in self.in_status("running")})))
        held = sorted((job for job in self.in_status("running") if job.holder == worker), key=lambda job: job.id)
        chosen = data.draw(st.lists(st.sampled_from(held), min_size=1, unique_by=lambda job: job.id), label="jobs")
        items = [{"id": job.id, "claim_token": job.token} for job in chosen]
        stale = [(job_id, token) for holder, job_id, token in self.stale if holder == worker]
        if with_stale and stale:
            job_id, token = data.draw(st.sampled_from(stale), label="stale claim")
            items.append({"id": job_id, "claim_token": token})
        response = self.post("/jobs/complete", worker, {"jobs": items})
        assert response.status_code == 200, response.get_json()
        results = response.get_json()["results"]
        assert [result["id"] for result in results] == [item["id"] for item in items]  # one per item, in order
        for job, result in zip(chosen, results, strict=False):  # a stale item may follow the chosen ones
            assert result["status"] == 200 and result["job"]["status"] == "completed", result
            self.now_completed(job)
        if len(items) > len(chosen):  # the stale token is refused, the others complete all the same
            assert results[-1]["status"] == 409 and results[-1]["problem"]["status"] == 409, results[-1]

    @precondition(lambda self: self.in_status("running"))
    @rule(data=st.data(), retryable=st.booleans())
    def holder_fails(self, data, retryable):
        job = self.running_job(data)
        response = self.post(
            f"/jobs/{job.id}/fail", job.holder, {"claim_token": job.token, "error": "boom", "retryable": retryable}
        )
        assert response.status_code == 200, response.get_json()
        self.lose_claim(job)
        if retryable:
            self.requeue_or_fail(job)
        else:
            job.status = "failed"
        assert response.get_json()["status"] == job.status

    @precondition(lambda self: self.in_status("running"))
    @rule(data=st.data())
    def holder_heartbeats(self, data):
        job = self.running_job(data)
        response = self.post(f"/jobs/{job.id}/heartbeat", job.holder, {"claim_token": job.token})
        assert response.status_code == 200, response.get_json()
        assert response.get_json()["status"] == "running"

    @precondition(lambda self: self.in_status("running"))
    @rule(data=st.data())
    def holder_releases(self, data):
        job = self.running_job(data)
        response = self.post(f"/jobs/{job.id}/release", job.holder, {"claim_token": job.token})
        assert response.status_code == 200, response.get_json()
        job.status = "pending"  # a release is not a failure: retry_count stays
        self.lose_claim(job)

    @precondition(lambda self: self.in_status("running"))
    @rule(data=st.data())
    def worker_dies_and_the_reaper_runs(self, data):
        job = self.running_job(data)
        with db.engine.begin() as conn:  # the worker stopped heartbeating long ago: its lease ran out
            conn.execute(
                update(jobs_table)
                .where(jobs_table.c.id == job.id)
                .values(lease_expires_at=utcnow() - timedelta(seconds=1))
            )
        result = self.runner.invoke(args=["reap"])
        assert result.exit_code == 0, result.output
        requeued, failed, quarantined = map(
            int, re.search(r"reaped 1 jobs: (\d+) requeued, (\d+) failed, (\d+) quarantined", result.output).groups()
        )
        self.lose_claim(job)
        job.stall_count += 1
        if job.stall_count >= MAX_STALLS:
            job.status = "failed"
            assert quarantined == 1
        else:
            self.requeue_or_fail(job)
            assert (requeued, failed) == ((1, 0) if job.status == "pending" else (0, 1))

    @precondition(lambda self: self.stale)
    @rule(data=st.data(), action=st.sampled_from(["complete", "fail", "heartbeat", "release"]))
    def stale_worker_is_refused(self, data, action):
        worker, job_id, token = data.draw(st.sampled_from(self.stale), label="stale claim")
        response = self.post(f"/jobs/{job_id}/{action}", worker, {"claim_token": token})
        assert response.status_code == 409, response.get_json()

    @precondition(lambda self: self.in_status("running"))
    @rule(data=st.data(), action=st.sampled_from(["complete", "fail", "heartbeat", "release"]))
    def other_worker_cannot_use_the_holders_token(self, data, action):
        job = self.running_job(data)
        other = WORKERS[1 - WORKERS.index(job.holder)]
        response = self.post(f"/jobs/{job.id}/{action}", other, {"claim_token": job.token})
        assert response.status_code == 409, response.get_json()

    # --- invariants, after every step ---------------------------------------------------------------

    @invariant()
    def the_api_shows_every_job_as_the_model_has_it(self):
        response = self.client.get("/jobs?limit=200", headers=self.headers["admin"])
        self.matches_the_document("get", "/jobs", response)
        assert response.status_code == 200
        listed = response.get_json()["jobs"]
        assert len({job["id"] for job in listed}) == len(listed)  # no job listed twice
        assert {job["id"] for job in listed} == set(self.jobs)
        for job in listed:
            model = self.jobs[job["id"]]
            assert job["status"] in STATUSES
            assert (job["status"], job["retry_count"], job["stall_count"]) == (
                model.status,
                model.retry_count,
                model.stall_count,
            ), job
            assert job["retry_count"] <= job["max_retries"]
            assert job["worker_id"] == model.holder or job["status"] != "running"

    @invariant()
    def the_database_keeps_the_invariants(self):
        with db.engine.connect() as conn:
            rows = conn.execute(select(jobs_table)).all()
            last_event = dict(
                conn.execute(select(events_table.c.job_id, events_table.c.to_status).order_by(events_table.c.id)).all()
            )  # later events overwrite earlier ones
        for row in rows:
            assert row.status in STATUSES
            assert row.retry_count <= row.max_retries
            held = (row.worker_id, row.claim_token, row.claimed_at, row.lease_expires_at)
            if row.status == "running":
                assert all(value is not None for value in held), row
            else:
                assert row.claim_token is None and row.lease_expires_at is None, row
            assert last_event[row.id] == row.status  # every state change is in the event log
            if row.id in self.completed_rows:
                assert row._asdict() == self.completed_rows[row.id]  # completed is final, untouched


def test_random_api_sequences_keep_the_queue_invariants(client, runner, make_key):
    document = client.get("/openapi.json").get_json()
    headers = {
        "producer": bearer(make_key("producer", "producer-a", max_priority="critical")),
        "admin": bearer(make_key("admin", "admin-a")),
        **{name: bearer(make_key("worker", name)) for name in WORKERS},
    }
    env = {"client": client, "runner": runner, "headers": headers, "document": document}
    run_state_machine_as_test(
        lambda: QueueMachine(env),
        settings=settings(
            max_examples=40,
            stateful_step_count=30,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        ),
    )

"""The state machine, walked from its table: every move of states.TRANSITIONS, and every move it refuses.

For each transition and each of its from-statuses, a job is put in that status and the action is performed the
way its actor really performs it (the API, or the queue's own call for the admin's give-back, the server's
give-back and the reaper); the re-read row must be in the to-status and the event log must have gained the
transition's event. For each action and every status *not* among its from-statuses, the same call must be
refused as documented (409 naming the job's status; a claim finds nothing, 204; the reaper and the server's
give-back leave the job alone) with the row and its log untouched. A new transition or actor without a way to
perform it here fails ``test_every_transition_and_actor_is_walked``. The diagram and table of docs/architecture.md
are checked against the same table.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

import pytest
from sqlalchemy import insert

from queuelog import queue
from queuelog.api.openapi import shapes
from queuelog.core.clock import utcnow
from queuelog.core.errors import StateConflict
from queuelog.database.transactions import write_transaction
from queuelog.extensions import db
from queuelog.models import JobDependency, JobEvent
from queuelog.ops import metrics
from queuelog.queue import dependencies, push_access, push_outcomes
from queuelog.states import (
    BY_ACTION,
    EVENT_NAMES,
    STATUS_NAMES,
    TRANSITIONS,
    Actor,
    Event,
    JobStatus,
    Transition,
    names,
)
from tests.support.factories import assert_problem, event_rows, key_id
from tests.support.paths import REPO_ROOT

STATES_DOC = REPO_ROOT / "docs" / "architecture.md"
ADMIN_NAME = "admin:alice"  # how the pages name a signed-in admin in the event log


@dataclass(frozen=True)
class Answer:
    """What the caller was told: an HTTP status (or its equivalent for a queue call) and the refusal's job_status."""

    code: int
    job_id: int | None = None
    job_status: str | None = None


@dataclass(frozen=True)
class Way:
    """One way an actor performs an action: the job it needs, how it is done, and what a refusal looks like."""

    action: str
    actor: Actor
    how: str
    perform: Callable[..., Answer]
    columns: dict = field(default_factory=dict)  # the job's columns beyond its status (retries, lease)
    logged_as: str = ""  # the event row's actor
    refusal: int = 409  # 409 with job_status; 204: nothing happens, nothing said
    through_api: bool = True  # sent as an API request under a key of the actor's role
    prepared_events: int = 0  # event rows ``perform`` writes itself to set the move up

    @property
    def transition(self) -> Transition:
        return BY_ACTION[self.action]

    def __str__(self) -> str:
        return f"{self.action}-by-{self.actor.name.lower()}-{self.how}"


# --- how each actor performs each action ------------------------------------------------------------------


def _api(path: Callable[[int | None], str], body: Callable[[str], dict | None], default_key: str):
    """An action sent to the API: POST ``path(job_id)`` with ``body(token)`` under the key ``default_key`` names."""

    def perform(env, job_id, key: str = default_key, token: str = "token-a") -> Answer:
        response = env.client.post(path(job_id), json=body(token), headers=env.headers[key])
        if response.status_code >= 400:
            problem = assert_problem(response, response.status_code)
            return Answer(response.status_code, job_id, problem.get("job_status"))
        answer_id = response.get_json()["id"] if response.status_code != 204 else None
        if answer_id is not None and job_id is not None:
            assert answer_id == job_id, "the answer is about another job"
        return Answer(response.status_code, answer_id or job_id)

    return perform


def _admin_gives_back(env, job_id) -> Answer:
    """The job page's "Give back to the queue" (queue.release without a holder)."""
    try:
        queue.release(job_id, ADMIN_NAME)
    except StateConflict as refusal:
        return Answer(409, job_id, refusal.extra.get("job_status"))
    return Answer(200, job_id)


def _server_gives_back(env, job_id) -> Answer:
    """A long-poll whose client hung up gives back the job just claimed for it, under that claim's token."""
    claimed = env.read_job(job_id)
    queue.give_back_unanswered([claimed])
    return Answer(204, job_id)  # it answers nobody; the row says what happened


def _reaper(env, job_id) -> Answer:
    """`flask reap` / Reap now: 200 when it took the job (or expired it), 204 when it found nothing to do."""
    report = queue.reap(actor=Actor.REAPER.value)
    taken = report.requeued + report.failed + report.quarantined + report.expired
    return Answer(200 if job_id in taken else 204, job_id)


def _push_delivery_answered(env, job_id) -> Answer:
    """A push delivery of the job was answered: logged if its claim still holds the job (204: it moved on)."""
    held = env.read_job(job_id)
    logged = push_outcomes.log_delivery(held, push_access.push_caller(held.type), 202, None)
    return Answer(200 if logged else 204, job_id)


def _admin_runs_now(env, job_id) -> Answer:
    """The Scheduled page's "Run now" (queue.run_now)."""
    try:
        queue.run_now(job_id, ADMIN_NAME)
    except StateConflict as refusal:
        return Answer(409, job_id, refusal.extra.get("job_status"))
    return Answer(200, job_id)


def _enqueue_after_a_parent(default_key: str):
    """An enqueue that names a pending parent of the same key (depends_on): the new job waits for it."""

    def perform(env, job_id, key: str = default_key, token: str = "") -> Answer:
        parent = env.client.post("/jobs", json={"type": "email"}, headers=env.headers[key])
        if parent.status_code >= 400:
            return Answer(parent.status_code)
        return _api(lambda _: "/jobs", lambda _: {"type": "email", "depends_on": [parent.get_json()["id"]]}, key)(
            env, None
        )

    return perform


def _parent_finishes(parent_status: JobStatus):
    """A parent of the job reaches ``parent_status`` (its transaction decides its waiting children):
    200 when the job moved, 204 when it was left alone."""

    def perform(env, job_id) -> Answer:
        before = env.read_job(job_id).status
        parent = env.make_job(status=parent_status.value, has_dependents=True)
        with db.engine.begin() as conn:
            conn.execute(insert(JobDependency.__table__).values(child_id=job_id, parent_id=parent))
        with write_transaction() as conn:
            dependencies.after_final(conn, [env.read_job(parent)], utcnow())
        return Answer(204 if env.read_job(job_id).status == before else 200, job_id)

    return perform


def _admin_retries_the_parent(env, job_id, key: str = "admin", token: str = "") -> Answer:
    """An admin retries a failed parent whose failure cancelled the job (its last event: dependency_failed)."""
    before = env.read_job(job_id).status
    parent = env.make_job(status=JobStatus.FAILED.value, has_dependents=True)
    with db.engine.begin() as conn:
        conn.execute(insert(JobDependency.__table__).values(child_id=job_id, parent_id=parent))
        if before == JobStatus.CANCELLED:
            conn.execute(
                insert(JobEvent.__table__).values(
                    job_id=job_id,
                    event=Event.DEPENDENCY_FAILED.value,
                    from_status="waiting",
                    to_status="cancelled",
                    actor="server",
                    attempt=0,
                    error=f"parent job {parent} failed",
                    at=utcnow(),
                )
            )
    response = env.client.post(f"/jobs/{parent}/retry", headers=env.headers[key])
    if response.status_code >= 400:
        return Answer(response.status_code, job_id)
    return Answer(204 if env.read_job(job_id).status == before else 200, job_id)


def _token(token: str) -> dict:
    return {"claim_token": token}


EXPIRED = "expired"  # a column value meaning "a time that passed a second ago", resolved when the job is made
LATER = "later"  # a column value meaning "an hour from now"

WAYS: list[Way] = [
    Way(
        "enqueue",
        Actor.PRODUCER,
        "api",
        _api(lambda _: "/jobs", lambda _: {"type": "email"}, "producer"),
        logged_as="key:producer-a",
    ),
    Way(
        "enqueue",
        Actor.ADMIN,
        "api",
        _api(lambda _: "/jobs", lambda _: {"type": "email"}, "admin"),
        logged_as="key:admin-a",
    ),
    Way("enqueue_waiting", Actor.PRODUCER, "api", _enqueue_after_a_parent("producer"), logged_as="key:producer-a"),
    Way("enqueue_waiting", Actor.ADMIN, "api", _enqueue_after_a_parent("admin"), logged_as="key:admin-a"),
    Way(
        "dependencies_met",
        Actor.SERVER,
        "parent-completed",
        _parent_finishes(JobStatus.COMPLETED),
        columns={"run_when": "completed"},
        logged_as=Actor.SERVER.value,
        refusal=204,
        through_api=False,
    ),
    Way(
        "dependency_failed",
        Actor.SERVER,
        "parent-failed",
        _parent_finishes(JobStatus.FAILED),
        columns={"run_when": "completed"},
        logged_as=Actor.SERVER.value,
        refusal=204,
        through_api=False,
    ),
    Way(
        "dependency_retried",
        Actor.ADMIN,
        "parent-retried",
        _admin_retries_the_parent,
        columns={"run_when": "completed"},
        logged_as="key:admin-a",
        refusal=204,
        prepared_events=1,
    ),
    Way(
        "claim",
        Actor.HOLDER,
        "api",
        _api(lambda _: "/jobs/claim", lambda _: {}, "worker"),
        logged_as="key:worker-a",
        refusal=204,
    ),
    Way("heartbeat", Actor.HOLDER, "api", _api(lambda i: f"/jobs/{i}/heartbeat", _token, "worker")),
    Way(
        "deliver",
        Actor.HOLDER,
        "push",
        _push_delivery_answered,
        columns={"worker_id": push_access.push_caller("email").name},
        logged_as=push_access.push_caller("email").actor,
        refusal=204,
        through_api=False,
    ),
    Way(
        "complete",
        Actor.HOLDER,
        "api",
        _api(lambda i: f"/jobs/{i}/complete", lambda t: {"claim_token": t, "result": {"ok": 1}}, "worker"),
        logged_as="key:worker-a",
    ),
    Way(
        "fail_retry",
        Actor.HOLDER,
        "api",
        _api(lambda i: f"/jobs/{i}/fail", lambda t: {"claim_token": t, "error": "boom"}, "worker"),
        columns={"retry_count": 1, "max_retries": 3},
        logged_as="key:worker-a",
    ),
    Way(
        "fail_final",
        Actor.HOLDER,
        "not-retryable",
        _api(lambda i: f"/jobs/{i}/fail", lambda t: {"claim_token": t, "error": "boom", "retryable": False}, "worker"),
        columns={"retry_count": 0, "max_retries": 3},
        logged_as="key:worker-a",
    ),
    Way(
        "fail_final",
        Actor.HOLDER,
        "retries-spent",
        _api(lambda i: f"/jobs/{i}/fail", lambda t: {"claim_token": t, "error": "boom"}, "worker"),
        columns={"retry_count": 3, "max_retries": 3},
        logged_as="key:worker-a",
    ),
    Way(
        "release", Actor.HOLDER, "api", _api(lambda i: f"/jobs/{i}/release", _token, "worker"), logged_as="key:worker-a"
    ),
    Way("release", Actor.ADMIN, "job-page", _admin_gives_back, logged_as=ADMIN_NAME, through_api=False),
    Way(
        "release",
        Actor.SERVER,
        "hung-up-long-poll",
        _server_gives_back,
        logged_as=Actor.SERVER.value,
        refusal=204,
        through_api=False,
    ),
    Way(
        "reap_retry",
        Actor.REAPER,
        "lease-ran-out",
        _reaper,
        columns={"retry_count": 0, "max_retries": 3, "lease_expires_at": EXPIRED},
        logged_as=Actor.REAPER.value,
        refusal=204,
        through_api=False,
    ),
    Way(
        "reap_final",
        Actor.REAPER,
        "retries-spent",
        _reaper,
        columns={"retry_count": 3, "max_retries": 3, "lease_expires_at": EXPIRED},
        logged_as=Actor.REAPER.value,
        refusal=204,
        through_api=False,
    ),
    Way(
        "reap_final",
        Actor.REAPER,
        "quarantine",
        _reaper,
        columns={"retry_count": 0, "max_retries": 3, "stall_count": 2, "lease_expires_at": EXPIRED},
        logged_as=Actor.REAPER.value,
        refusal=204,
        through_api=False,
    ),
    Way(
        "timeout_retry",
        Actor.REAPER,
        "run-outlived-its-timeout",
        _reaper,
        columns={
            "retry_count": 0,
            "max_retries": 3,
            "timeout_seconds": 30,
            "timeout_at": EXPIRED,
            "lease_expires_at": EXPIRED,
        },
        logged_as=Actor.REAPER.value,
        refusal=204,
        through_api=False,
    ),
    Way(
        "timeout_final",
        Actor.REAPER,
        "retries-spent",
        _reaper,
        columns={
            "retry_count": 3,
            "max_retries": 3,
            "timeout_seconds": 30,
            "timeout_at": EXPIRED,
            "lease_expires_at": EXPIRED,
        },
        logged_as=Actor.REAPER.value,
        refusal=204,
        through_api=False,
    ),
    Way(
        "expire",
        Actor.REAPER,
        "expires-at-passed",
        _reaper,
        columns={"expires_at": EXPIRED},
        logged_as=Actor.REAPER.value,
        refusal=204,
        through_api=False,
    ),
    Way(
        "run_now",
        Actor.ADMIN,
        "scheduled-page",
        _admin_runs_now,
        columns={"run_at": LATER},
        logged_as=ADMIN_NAME,
        through_api=False,
    ),
    Way(
        "cancel",
        Actor.PRODUCER,
        "api",
        _api(lambda i: f"/jobs/{i}/cancel", lambda _: None, "producer"),
        logged_as="key:producer-a",
    ),
    Way(
        "cancel",
        Actor.ADMIN,
        "api",
        _api(lambda i: f"/jobs/{i}/cancel", lambda _: None, "admin"),
        logged_as="key:admin-a",
    ),
    Way(
        "retry",
        Actor.ADMIN,
        "api",
        _api(lambda i: f"/jobs/{i}/retry", lambda _: None, "admin"),
        logged_as="key:admin-a",
    ),
]

# The API key role that acts as each actor (the others are the server and the reaper, which have no key).
ROLE_OF = {Actor.PRODUCER: "producer", Actor.HOLDER: "worker", Actor.ADMIN: "admin"}


class Env:
    """What a way of acting needs: the test client, a key per role, and a way to re-read a job."""

    def __init__(self, client, headers: dict, read_job, make_job):
        self.client, self.headers, self.read_job, self.make_job = client, headers, read_job, make_job


@pytest.fixture
def env(client, producer, worker, other_worker, admin, read_job, make_job):
    return Env(
        client,
        {"producer": producer, "worker": worker, "other_worker": other_worker, "admin": admin},
        read_job,
        make_job,
    )


@pytest.fixture
def job_in(make_job):
    """job_in(status, way, holder) → a job of producer-a in ``status`` with the columns ``way`` needs.

    ``holder=True`` leaves worker-a's claim (token-a) on the row whatever its status, so that only the status
    guard can refuse an action; moves get the row a job really has in that status.
    """

    def _make(status: JobStatus, way: Way, holder: bool = False) -> int:
        columns = {"producer_key_id": key_id("producer-a"), "producer": "producer-a", **way.columns}
        if holder or status is JobStatus.RUNNING:
            now = utcnow()
            columns = {
                "worker_id": "worker-a",
                "claim_token": "token-a",
                "claimed_at": now,
                "heartbeat_at": now,
                "lease_expires_at": now + timedelta(seconds=300),
                **columns,
            }
        for name, value in columns.items():
            if value == EXPIRED:
                columns[name] = utcnow() - timedelta(seconds=1)
            elif value == LATER:
                columns[name] = utcnow() + timedelta(hours=1)
        return make_job(status=status.value, **columns)

    return _make


def _moves():
    for way in WAYS:
        # In JobStatus's order, not the frozenset's: that changes with the hash seed, and pytest-xdist's
        # workers (scripts/test) must collect the same tests in the same order.
        for status in [s for s in JobStatus if s in way.transition.from_statuses] or [None]:
            yield pytest.param(way, status, id=f"{status or 'new'}-{way}")


def _refusals():
    for way in WAYS:
        if not way.transition.from_statuses:
            continue  # enqueue makes a job: there is no status it could be refused in
        for status in JobStatus:
            if status not in way.transition.from_statuses:
                yield pytest.param(way, status, id=f"{status}-{way}")


# --- the table itself -----------------------------------------------------------------------------------


def test_every_transition_and_actor_is_walked():
    walked = {(way.action, way.actor) for way in WAYS}
    assert walked == {(t.action, actor) for t in TRANSITIONS for actor in t.actors}


def test_every_event_is_some_transitions_and_every_status_is_reachable():
    assert {t.event for t in TRANSITIONS} - {None} == set(Event)
    assert {t.to_status for t in TRANSITIONS} == set(JobStatus)


def test_the_api_document_and_the_metrics_name_every_status_and_event():
    assert list(STATUS_NAMES) == shapes.STATUSES
    assert list(EVENT_NAMES) == shapes.EVENTS
    assert set(metrics.EVENT_COUNTERS) == set(EVENT_NAMES)


# --- every move -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("way, from_status", list(_moves()))
def test_move(env, job_in, read_job, way, from_status):
    transition = way.transition
    job_id = job_in(from_status, way) if from_status is not None else None
    logged_before = len(event_rows(job_id)) if job_id is not None else 0

    answer = way.perform(env, job_id)

    assert answer.code < 300, answer
    job_id = answer.job_id
    row = read_job(job_id)
    assert row.status == transition.to_status
    log = event_rows(job_id)
    if transition.event is None:
        assert len(log) == logged_before, "a move without an event writes no event row"
        return
    assert len(log) == logged_before + way.prepared_events + 1, [entry.event for entry in log]
    entry = log[-1]
    assert (entry.event, entry.from_status, entry.to_status, entry.actor) == (
        transition.event,
        from_status,
        transition.to_status,
        way.logged_as,
    )
    assert entry.attempt == row.retry_count
    if way.how == "quarantine":
        assert entry.error.startswith("quarantined")


# --- every refusal --------------------------------------------------------------------------------------


@pytest.mark.parametrize("way, status", list(_refusals()))
def test_refusal(env, job_in, read_job, way, status):
    job_id = job_in(status, way, holder=True)
    before, logged = read_job(job_id), event_rows(job_id)

    answer = way.perform(env, job_id)

    assert answer.code == way.refusal, answer
    if way.refusal == 409:
        assert answer.job_status == status
    assert read_job(job_id) == before, "a refused action leaves the row exactly as it was"
    assert event_rows(job_id) == logged, "and writes nothing to its log"


HOLDER_API_WAYS = [way for way in WAYS if way.actor is Actor.HOLDER and way.action != "claim" and way.through_api]


@pytest.mark.parametrize("way", HOLDER_API_WAYS, ids=str)
@pytest.mark.parametrize(
    "key, token", [("other_worker", "token-a"), ("worker", "token-b")], ids=["another-worker", "a-stale-token"]
)
def test_only_the_holder_under_its_claim_token_may_act(env, job_in, read_job, way, key, token):
    job_id = job_in(JobStatus.RUNNING, way)
    before, logged = read_job(job_id), event_rows(job_id)

    answer = way.perform(env, job_id, key=key, token=token)

    assert (answer.code, answer.job_status) == (409, JobStatus.RUNNING)
    assert read_job(job_id) == before and event_rows(job_id) == logged


def _role_refusals():
    for way in WAYS:
        if not way.through_api:
            continue
        allowed_roles = {ROLE_OF[actor] for actor in way.transition.actors if actor in ROLE_OF}
        for role in sorted(set(ROLE_OF.values()) - allowed_roles):
            yield pytest.param(way, role, id=f"{way}-as-{role}")


@pytest.mark.parametrize("way, role", list(_role_refusals()))
def test_no_other_role_may_act(env, job_in, read_job, way, role):
    """Who may move a job is part of the table: a key of any other role is refused with 403."""
    statuses = way.transition.from_statuses
    job_id = job_in(min(statuses), way) if statuses else None
    before = read_job(job_id) if job_id is not None else None

    answer = way.perform(env, job_id, key=role)

    assert answer.code == 403, answer
    if job_id is not None:
        assert read_job(job_id) == before


# --- the documented diagram and table (docs/architecture.md) ------------------------------------------


def _documented_states_section() -> str:
    text = STATES_DOC.read_text(encoding="utf-8")
    start = text.index("States, and who moves a job out of each")
    end = text.find("\n## ", start)
    return text[start : end if end != -1 else len(text)]


def _expected_rows() -> list[list[str]]:
    return [
        [
            ", ".join(names(t.from_statuses)) or "–",
            t.action,
            t.to_status.value,
            t.event.value if t.event else "–",
            ", ".join(actor.value for actor in t.actors),
            t.description,
        ]
        for t in TRANSITIONS
    ]


def test_the_documented_table_is_the_transition_table():
    section = _documented_states_section()
    header = "| From | Action | To | Event | Who | When |"
    assert header in section
    lines = section[section.index(header) :].splitlines()[2:]
    rows = []
    for line in lines:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    expected = _expected_rows()
    should_read = "\n".join("| " + " | ".join(r) + " |" for r in expected)
    assert rows == expected, "docs/architecture.md should read:\n" + should_read


def test_the_documented_diagram_draws_every_transition_and_nothing_else():
    section = _documented_states_section()
    diagram = re.search(r"```mermaid\n(.*?)```", section, re.S)
    assert diagram, "the state diagram of docs/architecture.md is a mermaid stateDiagram block"
    drawn: dict[tuple[str, str], set[str]] = {}
    for line in diagram.group(1).splitlines():
        edge = re.fullmatch(r"\s*(\[\*\]|\w+) --> (\w+)\s*:\s*(.+?)\s*", line)
        if edge:
            drawn.setdefault((edge[1], edge[2]), set()).update(a.strip() for a in edge[3].split(","))
    expected: dict[tuple[str, str], set[str]] = {}
    for t in TRANSITIONS:
        for source in names(t.from_statuses) or ("[*]",):
            expected.setdefault((source, t.to_status.value), set()).add(t.action)
    assert drawn == expected

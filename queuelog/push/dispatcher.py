"""The push dispatcher: a thread in every server process that claims jobs for the push targets and hands each
to a delivery thread.

Started like the schedule ticker (``serving.adopt_worker`` in gunicorn's workers, ``create_app`` under
``flask run``); ``QUEUELOG_PUSH=false`` keeps a process from delivering. Any number of dispatchers may run in
any number of processes: each claim is the queue's atomic claim, so a job is delivered by one of them, and the
type's flow control applies to it as to a worker's claim (paused: nothing is delivered; a concurrency limit
bounds the deliveries in flight across every process, since a job being delivered is running). Within a
process, at most ``QUEUELOG_PUSH_CONCURRENCY`` deliveries are out at once; the dispatcher claims no more than
there are free delivery threads, so a claimed job never waits for one.

When nothing was claimed it sleeps until jobs are announced (the wake-ups the long-polls use) or for
``IDLE_SECONDS``, which also finds retries and scheduled jobs as they come due. A recorder thread writes the
answers, every answer that came in meanwhile in one transaction (``push_outcomes.record``).
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from flask import Flask, current_app

from ..database.transactions import read_connection
from ..queue import claim
from ..queue.push_access import push_caller
from ..queue.push_outcomes import record
from ..queue.push_targets import PushTarget, targets
from ..waiting.wakeup import waker_for_current_app
from .delivery import deliver
from .turns import with_turn

log = logging.getLogger("queuelog.push")

THREAD_NAME = "queuelog-push"
#: The longest the dispatcher sleeps between two looks when nothing wakes it.
IDLE_SECONDS = 0.5
#: At most this many jobs in one claim (a free delivery thread each).
CLAIM_BATCH = 10
#: A sync delivery's lease is its timeout and this much more, to write its answer; an async one's is its timeout
#: and the usual lease (QUEUELOG_LEASE_SECONDS), which the target extends with heartbeats.
SYNC_LEASE_MARGIN_SECONDS = 15
#: At most this many answers written in one transaction.
RECORD_BATCH = 100
#: After an error (the database is down), the dispatcher waits this long, doubling up to the most.
RETRY_SECONDS, MOST_RETRY_SECONDS = 0.5, 10.0

_started: dict[int, tuple[int, _Dispatcher]] = {}  # id(app) → the pid running its dispatcher, and it
_lock = threading.Lock()


def start(app: Flask) -> _Dispatcher | None:
    """Start this process's dispatcher for ``app`` (once per process: a forked child starts its own); the running
    dispatcher (``stop()`` ends it), or None when one runs already or QUEUELOG_PUSH is off."""
    if not app.config.get("PUSH"):
        return None
    with _lock:
        running = _started.get(id(app))
        if running is not None and running[0] == os.getpid() and not running[1].stopped.is_set():
            return None
        dispatcher = _Dispatcher(app)
        _started[id(app)] = (os.getpid(), dispatcher)
    dispatcher.thread.start()
    dispatcher.recorder.start()
    return dispatcher


class _Dispatcher:
    def __init__(self, app: Flask):
        self.app, self.stopped = app, threading.Event()
        self.thread = threading.Thread(target=self.run, name=THREAD_NAME, daemon=True)
        self.capacity = app.config["PUSH_CONCURRENCY"]
        self.pool = ThreadPoolExecutor(max_workers=self.capacity, thread_name_prefix="queuelog-push-delivery")
        self.out = 0  # deliveries handed to the pool and not yet done
        self.room = threading.Condition()
        self.turns = itertools.count()  # which type claims first: each pass starts one further on
        self.answers: queue.SimpleQueue = queue.SimpleQueue()  # answered deliveries, for the recorder
        self.recorder = threading.Thread(target=self._record_forever, name=f"{THREAD_NAME}-recorder", daemon=True)

    def run(self) -> None:
        delay, failing = RETRY_SECONDS, False
        with self.app.app_context():
            waker = waker_for_current_app()
        while not self.stopped.is_set():
            try:
                seen = waker.generation
                handed = self._claim_and_hand_out()
                if failing:
                    log.info("push deliveries go on")
                failing, delay = False, RETRY_SECONDS
                if not handed:
                    waker.wait(seen, IDLE_SECONDS)
                else:
                    self._wait_for_room()
            except Exception as error:  # noqa: BLE001 - whatever broke (a database restart), delivering must go on
                if not failing:
                    log.warning("push deliveries paused (%s: %s); retrying", error.__class__.__name__, error)
                failing = True
                self.stopped.wait(delay)
                delay = min(delay * 2, MOST_RETRY_SECONDS)
        self.pool.shutdown(wait=False)

    def stop(self, timeout: float = 30.0) -> None:
        """Claim nothing more, and return once the deliveries out have been answered and written (tests, a
        script that started it)."""
        self.stopped.set()
        self.thread.join(timeout)
        self.pool.shutdown(wait=True)
        self.recorder.join(timeout)

    def _claim_and_hand_out(self) -> int:
        """One pass over the pushed types: claim for each as many jobs as there are free threads."""
        pushed = with_turn(self.app, _read_targets)
        if not pushed:
            return 0
        names = sorted(pushed)
        first = next(self.turns) % len(names)
        handed = 0
        for job_type in names[first:] + names[:first]:
            free = self._free()
            if free <= 0:
                break
            target = pushed[job_type]
            rows = with_turn(self.app, lambda t=job_type, g=target, n=free: _claim_for(t, g, n))
            for row in rows:
                self._hand_out(row, target)
            handed += len(rows)
        return handed

    def _free(self) -> int:
        with self.room:
            return min(CLAIM_BATCH, self.capacity - self.out)

    def _hand_out(self, row, target: PushTarget) -> None:
        with self.room:
            self.out += 1
        self.pool.submit(self._deliver, row, target)

    def _deliver(self, row, target: PushTarget) -> None:
        try:
            answered = deliver(self.app, row, target)
            if answered is not None:
                self.answers.put(answered)
        finally:
            with self.room:
                self.out -= 1
                self.room.notify_all()

    def _record_forever(self) -> None:
        """Write the answers, every one that came in meanwhile in one batch (push_outcomes.record): a commit per
        batch, not per job. Ends once stopped and every answer is written."""
        while True:
            try:
                first = self.answers.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                if self.stopped.is_set() and self.out == 0:
                    return
                continue
            batch = [first]
            while len(batch) < RECORD_BATCH:
                try:
                    batch.append(self.answers.get_nowait())
                except queue.Empty:
                    break
            self._record(batch)

    def _record(self, batch: list) -> None:
        delay = RETRY_SECONDS
        while True:
            try:
                with_turn(self.app, lambda: record(batch))
                return
            except Exception as error:  # noqa: BLE001 - the answers must be written once the database is back
                if delay >= MOST_RETRY_SECONDS:
                    log.error(
                        "push answers of jobs %s were not written (%s); their leases bring them back",
                        [answer.row.id for answer in batch],
                        error,
                    )
                    return
                log.warning("push answers could not be written (%s: %s); retrying", error.__class__.__name__, error)
                time.sleep(delay)
                delay *= 2

    def _wait_for_room(self) -> None:
        """Claimed something: look again at once while threads are free, else once one comes free."""
        with self.room:
            if self.out >= self.capacity:
                self.room.wait(IDLE_SECONDS)


def _read_targets() -> dict[str, PushTarget]:
    with read_connection() as conn:
        return targets(conn, current_app.config["JOB_TYPES"])


def _claim_for(job_type: str, target: PushTarget, limit: int):
    extra = SYNC_LEASE_MARGIN_SECONDS if target.mode == "sync" else current_app.config["LEASE_SECONDS"]
    return claim(
        push_caller(job_type),
        types=[job_type],
        limit=limit,
        lease_seconds=target.timeout_seconds + extra,
        for_push=True,
    )

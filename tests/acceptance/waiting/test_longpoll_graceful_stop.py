"""A server told to stop answers its waiting claims at once, so a deploy is not held up by idle workers.

gunicorn stops a worker with SIGTERM and waits up to its graceful timeout for requests in flight; an idle
long-poll would hold the restart for the rest of its ``wait`` (up to 30 s) and then be cut off.
gunicorn.conf.py's ``post_worker_init`` hook chains ``wakeup.stop_waiting`` before gunicorn's handler.
"""

from __future__ import annotations

import os
import signal
import threading
import time

from tests.support.api import bearer
from tests.support.database import JOB_TYPES
from tests.support.server import running_server


def test_a_gunicorn_told_to_stop_answers_its_waiting_claim_with_204_at_once(app, database_url, make_key):
    import requests

    env = {
        "QUEUELOG_DATABASE_URL": database_url,
        "QUEUELOG_JOB_TYPES": ",".join(JOB_TYPES),
        "QUEUELOG_SECRET_KEY": "test-secret-key",
    }
    headers = bearer(make_key("worker", "idle-at-deploy"))
    answer: dict = {}
    with running_server(env, workers=1, extra_args=("--threads", "4", "--graceful-timeout", "25")) as server:

        def claim():
            started = time.monotonic()
            response = requests.post(server.url + "/jobs/claim", json={"wait": 30}, headers=headers, timeout=60)
            answer.update(status=response.status_code, seconds=time.monotonic() - started)

        waiting = threading.Thread(target=claim)
        waiting.start()
        time.sleep(1.5)  # the claim is waiting: nothing is due
        stop_asked = time.monotonic()
        os.kill(server.pid, signal.SIGTERM)  # the master's graceful stop: SIGTERM to each worker
        waiting.join(60)
        stopped_after = time.monotonic() - stop_asked
    assert answer["status"] == 204
    # Without the hook the claim waits out its 30 s (or the 25 s graceful timeout cuts it off).
    assert stopped_after < 10

"""A waiting claim (POST /jobs/claim with ``wait``) sent through the test client in a thread, timed."""

from __future__ import annotations

import threading
import time


class Waiter(threading.Thread):
    """A claim request running in the background, timed."""

    def __init__(self, client, headers, **body):
        super().__init__(daemon=True)
        self.client, self.headers, self.body = client, headers, body
        self.response = None
        self.returned_at = None

    def run(self):
        self.response = self.client.post("/jobs/claim", json=self.body, headers=self.headers)
        self.returned_at = time.monotonic()

    def result(self, timeout: float = 20):
        self.join(timeout)
        assert not self.is_alive(), "the waiting claim never returned"
        return self.response


def start_waiting(client, headers, settle_seconds: float = 0.3, **body) -> Waiter:
    """A claim with ``body`` started in the background, given ``settle_seconds`` to reach its empty claim and wait."""
    waiter = Waiter(client, headers, **body)
    waiter.start()
    time.sleep(settle_seconds)
    assert waiter.is_alive(), "the claim returned at once instead of waiting"
    return waiter

"""Idle workers as a crowd: one process holding many long-poll claims open, for load tests.

Run as ``python -m tests.support.longpolls URL COUNT SECONDS BODY`` with the worker key in
QUEUELOG_API_KEY. Each of COUNT threads keeps one keep-alive connection and, for SECONDS, sends
``POST /jobs/claim`` with BODY (JSON) again and again, as a worker does: after a 200 or 204 at once,
after a 503 when its Retry-After says. It prints ``ready`` once every thread has sent its first
claim, then, at the end, one JSON line: every answer's status, seconds and Retry-After, the ids of
the jobs it was given, and the errors (a claim that got no answer counts as one). When SECONDS are
up it hangs up on the claims still waiting, as a worker that exits does.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import select
import socket
import sys
import threading
import time
from urllib.parse import urlsplit


class Crowd:
    def __init__(self, url: str, key: str, count: int, seconds: float, body: bytes):
        parts = urlsplit(url)
        self.host, self.port = parts.hostname, parts.port
        self.headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        self.count, self.body = count, body
        self.deadline = time.monotonic() + seconds
        self.lock = threading.Lock()
        self.started = 0
        self.ready = threading.Event()
        self.answers: list[dict] = []
        self.job_ids: list[int] = []
        self.errors: list[str] = []
        self.connections: list[http.client.HTTPConnection] = []

    def run(self) -> dict:
        threads = [threading.Thread(target=self.claim_loop, daemon=True) for _ in range(self.count)]
        for thread in threads:
            thread.start()
        self.ready.wait(max(0.0, self.deadline - time.monotonic()))
        print("ready", flush=True)
        time.sleep(max(0.0, self.deadline - time.monotonic()))
        self.hang_up()
        for thread in threads:
            thread.join(10)
        return {"answers": self.answers, "job_ids": self.job_ids, "errors": self.errors}

    def claim_loop(self) -> None:
        conn = self.connect()
        first = True
        while time.monotonic() < self.deadline:
            started = time.monotonic()
            try:
                if conn.sock is not None and select.select([conn.sock], [], [], 0)[0]:
                    # The server closed this kept-alive connection while we slept: start a new one.
                    conn.close()
                conn.request("POST", "/jobs/claim", body=self.body, headers=self.headers)
                if first:
                    self.count_started()
                response = conn.getresponse()
                raw = response.read()
            except (OSError, http.client.HTTPException) as exc:
                if time.monotonic() < self.deadline:
                    with self.lock:
                        self.errors.append(f"{exc.__class__.__name__}: {exc}")
                return
            answer = {
                "status": response.status,
                "seconds": time.monotonic() - started,
                "first": first,
                "retry_after": response.getheader("Retry-After"),
                "content_type": response.getheader("Content-Type"),
            }
            first = False
            with self.lock:
                self.answers.append(answer)
                if response.status == 200:
                    self.job_ids.append(json.loads(raw)["id"])
            if response.status == 503:
                time.sleep(min(float(answer["retry_after"] or 1), max(0.0, self.deadline - time.monotonic())))
            elif response.status != 200 and answer["seconds"] < 1:
                time.sleep(1)  # an answer at once without a Retry-After: do not hammer

    def connect(self) -> http.client.HTTPConnection:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        with self.lock:
            self.connections.append(conn)
        return conn

    def count_started(self) -> None:
        with self.lock:
            self.started += 1
            if self.started == self.count:
                self.ready.set()

    def hang_up(self) -> None:
        with self.lock:
            connections = list(self.connections)
        for conn in connections:
            if conn.sock is not None:
                with contextlib.suppress(OSError):
                    conn.sock.shutdown(socket.SHUT_RDWR)


def main() -> None:
    url, count, seconds, body = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4].encode()
    result = Crowd(url, os.environ["QUEUELOG_API_KEY"], count, seconds, body).run()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

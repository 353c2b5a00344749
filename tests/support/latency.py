"""Producers' enqueue latency under load, for the end-to-end tests that promise it.

The promise is "p99 under 250 ms". The test machine is shared and at times several times
overloaded by other runs; a bound that ignores that fails for reasons that have nothing to do with
the server. So a test first measures the same producers against the same idle server (the
baseline) and allows ``max(250 ms, 3 × the baseline's p99)``: on a quiet machine that is the
promise itself, and a server that starves its producers still misses it by far (their requests time
out after 5 s, which is counted as a failure in any case).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field

from queuelog.worker import Client, ServerUnavailable

PROMISED_P99 = 0.25
TIMEOUT = 5.0


def percentile(values: list[float], fraction: float) -> float:
    """The value below which ``fraction`` of ``values`` lie (nearest rank); inf for no values."""
    if not values:
        return math.inf
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


@dataclass
class Enqueues:
    """What producers saw: one latency and job id per answered enqueue, one message per failed one."""

    latencies: list[float] = field(default_factory=list)
    job_ids: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def p99(self) -> float:
        return percentile(self.latencies, 0.99)

    def summary(self) -> str:
        return (
            f"n={len(self.latencies)} p50={percentile(self.latencies, 0.5) * 1000:.0f} ms "
            f"p99={self.p99 * 1000:.0f} ms max={max(self.latencies, default=0) * 1000:.0f} ms "
            f"errors={len(self.errors)}"
        )


def allowed_p99(baseline: Enqueues) -> float:
    """The promise, or three times what this machine managed with nothing else on the server."""
    return max(PROMISED_P99, 3 * baseline.p99)


def enqueue_steadily(
    url: str,
    keys: list[str],
    each: int,
    every: float,
    job_type: str,
    run_at: str | None = None,
    new_connection_each_time: bool = False,
) -> Enqueues:
    """One producer thread per key, each enqueueing ``each`` jobs, one every ``every`` seconds.

    ``run_at`` in the future keeps the jobs from being claimed (a baseline that must not feed workers).
    """
    seen = Enqueues()

    def produce(key: str) -> None:
        client = Client(url, key, timeout=TIMEOUT)
        for n in range(each):
            started = time.monotonic()
            try:
                job = client.enqueue(job_type, {"n": n}, run_at=run_at)
                seen.latencies.append(time.monotonic() - started)
                seen.job_ids.append(job["id"])
            except ServerUnavailable as exc:
                seen.errors.append(str(exc))
            if new_connection_each_time:
                client.close()  # the next request may land on any server process
            time.sleep(max(0.0, every - (time.monotonic() - started)))

    threads = [threading.Thread(target=produce, args=(key,)) for key in keys]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(each * (every + TIMEOUT) + 30)
    return seen

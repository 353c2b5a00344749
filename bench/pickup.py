"""Pickup latency: how soon an idle, waiting worker starts a job that was just enqueued.

Latency = the handler's first clock reading − the producer's reading just before its enqueue
request. Both read CLOCK_MONOTONIC (``time.monotonic``), which is system-wide on Linux, and the
handler sends its reading over UDP only after taking it (bench.tasks), so the report is never timed.

One worker per system (the lowest level: --concurrency 1, one huey thread, one rq process; quick
mode's only level is 2), and one job at a time *on the machine*: the probes of all systems
take turns, so no sample shares the CPU with another system's job, and one system's samples run
while the others' workers sit idle. Before each of its samples a system's worker has been idle for
at least a time drawn from ``pickup_idle_s`` (uniform over more than SQLite's 0.5 s recheck, so no
sample is in step with a poll), and after any sample nothing happens for ``QUIET_S``, so the worker
that just finished has acknowledged its job and gone back to waiting before the next one starts.

queuelog's server has four processes, and its long-poll waits in one of them: between samples the producer
reconnects (untimed), so its enqueues land on any process, and the report splits the samples by whether
the job's claim was made in the enqueue's own process (woken by a call) or in another (woken through its
wake socket on SQLite, a NOTIFY on PostgreSQL), as the server's log lines say.
"""

from __future__ import annotations

import json
import random
import socket
import time
import traceback
from dataclasses import dataclass, field

from bench.config import Check, Config
from bench.targets import percentile
from bench.worker_pool import PoolFailed, WorkerPool
from bench.worker_report import PICKUP_PLACEMENTS
from bench.worker_systems import WorkerSystem, wait_finished

MIN_SAMPLES = 30  # the time budget never cuts a probe below this
QUIET_S = 0.025


def level(cfg: Config) -> int:
    """The workers the probes run against: the lowest level of the drain rounds."""
    return min(cfg.worker_levels)


@dataclass
class Probe:
    """One system's samples so far."""

    system: WorkerSystem
    index: int
    latencies: list[float] = field(default_factory=list)
    ids: list = field(default_factory=list)
    timed_ids: list = field(default_factory=list)  # the job of each latency, in the same order
    taken: int = 0
    next_due: float = 0.0
    done: bool = False
    failed: bool = False


def probe_all(
    systems: list[WorkerSystem], pools: dict[str, WorkerPool], cfg: Config, metrics: dict, checks: list[Check]
) -> None:
    """Probe every system, taking turns; record p50/p99 and check every job ran exactly once."""
    probes = [Probe(system, i) for i, system in enumerate(systems)]
    deadline = time.monotonic() + cfg.pickup_budget_s
    wanted = cfg.pickup_warmup + cfg.pickup_samples
    with Inbox() as inbox:
        last_end = 0.0
        while active := [p for p in probes if not p.done]:
            probe = min(active, key=lambda p: p.next_due)
            time.sleep(max(probe.next_due - time.monotonic(), last_end + QUIET_S - time.monotonic(), 0))
            try:
                _sample(probe, inbox, cfg)
            except Exception as exc:
                traceback.print_exc()
                probe.done = probe.failed = True
                checks.append(Check(probe.system.column, "pickup probe", False, f"aborted: {exc!r}"[:500]))
            else:
                probe.system.between_samples(probe.ids[-1])
            last_end = time.monotonic()
            probe.next_due = last_end + random.uniform(*cfg.pickup_idle_s)
            enough = len(probe.latencies) >= MIN_SAMPLES and last_end > deadline
            probe.done = probe.done or probe.taken >= wanted or enough
        inbox.linger()
    for probe in probes:
        if not probe.failed:
            _record(probe, pools[probe.system.column], inbox.twice.get(probe.index, []), cfg, metrics, checks)


def _sample(probe: Probe, inbox: Inbox, cfg: Config) -> None:
    sample = probe.taken
    probe.taken += 1
    before = time.monotonic()
    probe.ids.append(probe.system.enqueue_one({"report_to": inbox.port, "sample": [probe.index, sample]}))
    started = inbox.wait_for((probe.index, sample), cfg.timeout)
    if sample >= cfg.pickup_warmup:
        probe.latencies.append((started - before) * 1000)
        probe.timed_ids.append(probe.ids[-1])


def _record(probe: Probe, pool: WorkerPool, twice: list[int], cfg: Config, metrics: dict, checks: list[Check]) -> None:
    system = probe.system
    what = f"pickup probe, {len(probe.ids)} jobs one at a time"
    check = wait_finished(system, pool, probe.ids, cfg.timeout, what, "pickup_p50").check
    if twice:
        check = Check(
            check.target, what, False, f"{check.detail}; handler started twice for samples {twice}", check.metric
        )
    checks.append(check)
    system.clear()
    column = metrics.setdefault(system.column, {})
    column.update(
        {
            "pickup_samples": len(probe.latencies),
            "pickup_p50": percentile(probe.latencies, 50),
            "pickup_p99": percentile(probe.latencies, 99),
        }
    )
    print(
        f"[bench] {system.column}: pickup p50 {column['pickup_p50']:.1f} ms, p99 {column['pickup_p99']:.1f} ms "
        f"({len(probe.latencies)} samples)",
        flush=True,
    )
    same = system.same_process(probe.timed_ids)
    for where in PICKUP_PLACEMENTS:
        wanted = where == "same_process"
        latencies = [ms for job, ms in zip(probe.timed_ids, probe.latencies, strict=True) if same.get(job) is wanted]
        if same:
            column[f"pickup_samples_{where}"] = len(latencies)
        if latencies:
            column.update(
                {f"pickup_p50_{where}": percentile(latencies, 50), f"pickup_p99_{where}": percentile(latencies, 99)}
            )
    if same:
        print(
            f"[bench] {system.column}: the claim in the enqueue's server process for "
            f"{column['pickup_samples_same_process']} samples, in another for "
            f"{column['pickup_samples_other_process']}",
            flush=True,
        )


class Inbox:
    """The UDP socket the handlers report their start times to; notes any sample reported twice."""

    def __enter__(self) -> Inbox:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.seen: set[tuple[int, int]] = set()
        self.twice: dict[int, list[int]] = {}
        return self

    def __exit__(self, *exc) -> None:
        self.sock.close()

    def wait_for(self, sample: tuple[int, int], timeout: float) -> float:
        """The start time the handler of ``sample`` reported."""
        deadline = time.monotonic() + timeout
        while True:
            report = self._receive(max(deadline - time.monotonic(), 0.01))
            if report is None:
                raise PoolFailed(f"no handler started sample {sample[1]} within {timeout:.0f}s")
            if report[0] == sample:
                return report[1]

    def linger(self, seconds: float = 0.3) -> None:
        """Late reports: a job whose handler ran twice shows up here."""
        while self._receive(seconds) is not None:
            pass

    def _receive(self, timeout: float) -> tuple[tuple[int, int], float] | None:
        self.sock.settimeout(timeout)
        try:
            report = json.loads(self.sock.recv(4096))
        except TimeoutError:
            return None
        sample = tuple(report["sample"])
        if sample in self.seen:
            self.twice.setdefault(sample[0], []).append(sample[1])
        self.seen.add(sample)
        return sample, report["started"]

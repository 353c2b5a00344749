"""The worker rows: drain rounds and pickup probes with the workers users run.

Per level (1, 4, 16: queuelog-worker's --concurrency, huey_consumer's threads, RQ's processes),
every system's workers are started once on an empty queue (bench.worker_pool) and stay up for all of
that level's rounds:

- a *warm-up round* per system, checked but in no figure, whose pace sets how many jobs the
  system's timed rounds hold: ``worker_round_s`` seconds of its work, within ``worker_jobs_min`` …
  ``worker_jobs_max`` (a forking RQ worker runs tens to hundreds of jobs a second, queuelog-worker
  at 16 thousands: one fixed count would take minutes for the one or be over at once for the other);
- ``repeats`` *drain rounds* per system, interleaved as the throughput rounds are: pause the
  workers, enqueue the round's jobs (untimed), resume them, and time from the first job's start to
  the last completion the queue itself recorded. Figure: jobs ÷ those seconds, the median of the
  repeats. Timing from the first start leaves out how soon an idle worker notices work, which is
  what the pickup probe measures;
- at the lowest level, the *pickup probes* (bench.pickup).
"""

from __future__ import annotations

import statistics
import traceback
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from bench import pickup
from bench.config import Check, Config
from bench.procs import fmt_rate
from bench.worker_pool import READY_TIMEOUT_S, WorkerPool
from bench.worker_systems import WorkerSystem, wait_finished


def drain_key(level: int) -> str:
    return f"drain_c{level}"


def drain_jobs_key(level: int) -> str:
    return f"drain_jobs_c{level}"


def run(
    systems: list[WorkerSystem],
    cfg: Config,
    metrics: dict[str, dict],
    checks: list[Check],
    log_dir: Path,
    drain: bool = True,
    probe: bool = True,
) -> None:
    """Every level's drain rounds (``drain``) and the pickup probes (``probe``)."""
    levels = sorted(set(cfg.worker_levels if drain else ()) | ({pickup.level(cfg)} if probe else set()))
    samples: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    broken: set[str] = set()
    for level in levels:
        pools = _start_pools(systems, level, log_dir, broken, checks)
        try:
            live = [s for s in systems if s.column in pools]
            if drain and level in cfg.worker_levels:
                _drain_level(live, pools, level, cfg, samples, metrics, broken, checks)
            if probe and level == pickup.level(cfg):
                pickup.probe_all([s for s in live if s.column not in broken], pools, cfg, metrics, checks)
        finally:
            for pool in pools.values():
                pool.stop()
    for column, figures in samples.items():
        for key, values in figures.items():
            metrics.setdefault(column, {})[key] = statistics.median(values) if values else None
            metrics[column][f"{key}_repeats"] = values


def _guarded(
    system: WorkerSystem, broken: set[str], checks: list[Check], what: str, action: Callable[[], None]
) -> None:
    """Run one part for one system; a failure marks the system broken and is a failed check."""
    try:
        action()
    except Exception as exc:
        traceback.print_exc()
        broken.add(system.column)
        checks.append(Check(system.column, what, False, f"aborted: {exc!r}"[:500]))


def _start_pools(
    systems: list[WorkerSystem], level: int, log_dir: Path, broken: set[str], checks: list[Check]
) -> dict[str, WorkerPool]:
    """Launch every system's workers at once, then wait for each to listen."""
    pools = {}
    for system in systems:
        if system.column not in broken:
            pools[system.column] = system.pool(level, log_dir)
            _guarded(system, broken, checks, f"start {level} worker(s)", pools[system.column].launch)
    for system in systems:
        if system.column in pools and system.column not in broken:
            _guarded(
                system,
                broken,
                checks,
                f"start {level} worker(s)",
                lambda p=pools[system.column]: p.wait_ready(READY_TIMEOUT_S),
            )
    for column in [c for c in pools if c in broken]:
        pools.pop(column).stop()
    print(f"[bench] workers at level {level} listening: {', '.join(pools)}", flush=True)
    return pools


def _drain_level(
    systems: list[WorkerSystem],
    pools: dict[str, WorkerPool],
    level: int,
    cfg: Config,
    samples: dict,
    metrics: dict,
    broken: set[str],
    checks: list[Check],
) -> None:
    sizes: dict[str, int] = {}
    for system in systems:

        def warm_up(s=system):
            sizes[s.column] = _round_size(s, pools[s.column], level, cfg, checks)
            metrics.setdefault(s.column, {})[drain_jobs_key(level)] = sizes[s.column]

        _guarded(system, broken, checks, f"warm-up, {level} worker(s)", warm_up)
    for repeat in range(cfg.repeats):
        shift = (repeat + level) % len(systems)
        for system in systems[shift:] + systems[:shift]:
            if system.column in broken:
                continue

            def timed(s=system):
                jobs = sizes[s.column]
                seconds = drain(
                    s, pools[s.column], jobs, cfg, drain_key(level), checks, f"drain {jobs} jobs, {level} worker(s)"
                )
                if seconds:
                    samples[s.column][drain_key(level)].append(jobs / seconds)
                print(
                    f"[bench] {s.column}: {jobs} jobs, level {level}: "
                    f"{fmt_rate(jobs / seconds if seconds else None)} jobs/s",
                    flush=True,
                )

            _guarded(system, broken, checks, f"drain round, {level} worker(s)", timed)


def _round_size(system: WorkerSystem, pool: WorkerPool, level: int, cfg: Config, checks: list[Check]) -> int:
    """Jobs per timed round: ``worker_round_s`` of the pace a warm-up round shows, within bounds."""
    if not cfg.worker_warmup_jobs:
        return cfg.worker_jobs_max
    seconds = drain(
        system,
        pool,
        cfg.worker_warmup_jobs,
        cfg,
        None,
        checks,
        f"warm-up {cfg.worker_warmup_jobs} jobs, {level} worker(s)",
    )
    pace = cfg.worker_warmup_jobs / seconds if seconds else 0
    return int(min(max(pace * cfg.worker_round_s, cfg.worker_jobs_min), cfg.worker_jobs_max))


def drain(
    system: WorkerSystem, pool: WorkerPool, jobs: int, cfg: Config, metric: str | None, checks: list[Check], what: str
) -> float | None:
    """One drain round; returns seconds from the first job's start to the last completion."""
    if system.fresh_workers_each_round:
        pool.restart(READY_TIMEOUT_S)
    pool.pause()
    try:
        ids = system.enqueue(jobs)
    finally:
        pool.resume()
    verdict = wait_finished(system, pool, ids, cfg.timeout, what, metric)
    checks.append(verdict.check)
    system.clear()
    if not verdict.check.ok:
        print(f"[bench] {system.column}: FAILED {what}: {verdict.check.detail}", flush=True)
    return verdict.seconds

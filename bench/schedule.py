"""The order of measurements: interleaved rounds, then the latency probes.

Throughput is measured in rounds.  Round *k* pairs the *k*-th enqueue mode
(single, batch of 100, batch of 500) with the *k*-th drain (single path with
1/4/16 workers, then batch path with 1/4/16), and every system runs round *k*
before any system starts round *k+1*, in an order rotated each round.  On a
shared 2-core machine the load drifts over minutes; this keeps the figures a
ratio divides close together in time and spreads any drift evenly.
"""

from __future__ import annotations

import traceback

from bench.config import Check, Config
from bench.procs import fmt_rate
from bench.system import System


def rounds(cfg: Config) -> list[tuple[int | None, tuple[str, int] | None]]:
    """(enqueue batch to time or None, (drain path, workers) to time or None)."""
    drains = [(p, w) for p in ("single", "batch") for w in cfg.workers]
    modes = list(cfg.enqueue_batches)
    n = max(len(drains), len(modes))
    return [(modes[i] if i < len(modes) else None, drains[i] if i < len(drains) else None)
            for i in range(n)]


def throughput(systems: list[System], cfg: Config, metrics: dict[str, dict],
               checks: list[Check]) -> None:
    """Run every round on every system; record figures and exactly-once checks."""
    broken: set[str] = set()
    for idx, (mode, drain) in enumerate(rounds(cfg)):
        order = systems[idx % len(systems):] + systems[:idx % len(systems)]
        for system in order:
            if system.column in broken:
                continue
            try:
                _one_round(system, mode, drain, cfg, metrics.setdefault(system.column, {}), checks)
            except Exception as exc:
                # The system's queue is in an unknown state now: stop timing it.
                traceback.print_exc()
                broken.add(system.column)
                checks.append(Check(system.column, f"round {idx + 1}", False, f"aborted: {exc!r}"[:500]))


def _one_round(system: System, mode: int | None, drain: tuple[str, int] | None, cfg: Config,
               metrics: dict, checks: list[Check]) -> None:
    timed_enqueue = mode in system.enqueue_batches
    timed_drain = drain is not None and drain[0] in system.drain_paths
    if not (timed_enqueue or timed_drain):
        return  # nothing this system can show in this round
    if timed_enqueue:
        # At least one whole batch per enqueue client, or a "batch of 500"
        # round would really be measuring smaller batches.
        rate, ids = system.enqueue(max(cfg.jobs, cfg.enqueue_clients * mode), mode, cfg)
        metrics[f"enqueue_{mode}"] = rate
        print(f"[bench] {system.column}: enqueue batch={mode}: {fmt_rate(rate)} jobs/s", flush=True)
    else:
        ids = system.fill_for_drain(cfg.jobs, cfg)
    if timed_drain:
        path, workers = drain
        metric = f"e2e_{path}_w{workers}"
    else:
        # Every enqueued job still has to be completed (and checked), untimed.
        path, workers, metric = "single", max(cfg.workers), None
    rate, round_checks = system.drain(path, workers, ids, cfg, metric)
    checks.extend(round_checks)
    if metric:
        metrics[metric] = rate
        print(f"[bench] {system.column}: {path} drain, {workers} workers: {fmt_rate(rate)} jobs/s",
              flush=True)


def latency(systems: list, cfg: Config, metrics: dict[str, dict], checks: list[Check]) -> None:
    """Claim-latency probes, one queuelog backend after the other."""
    for system in systems:
        try:
            system.latency(cfg, metrics.setdefault(system.column, {}))
        except Exception as exc:
            traceback.print_exc()
            checks.append(Check(system.column, "claim latency probe", False,
                                f"aborted: {exc!r}"[:500]))

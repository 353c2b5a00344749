"""The order of measurements: interleaved, repeated rounds, then latency probes.

A round is "enqueue N jobs (timed), then drain them (timed)".  Single
enqueues feed the single-path drains (1/4/16 workers), batch enqueues feed
the batch-path drains.  Every system runs a round before any system starts
the next one, in an order rotated each round, and the whole list of rounds
is repeated ``cfg.repeats`` times; each figure is the median of its repeats.
On a shared 2-core machine the load drifts by several times within minutes:
short interleaved rounds keep the two figures of a ratio close in time, and
the median drops the round that hit a burst of someone else's work.
"""

from __future__ import annotations

import statistics
import traceback
from collections import defaultdict

from bench.config import Check, Config
from bench.procs import fmt_rate
from bench.system import System

Round = tuple[int, tuple[str, int] | None]  # (enqueue batch, (drain path, workers) or None)


def rounds(cfg: Config) -> list[Round]:
    """The rounds of one repeat, in order."""
    batches = [b for b in cfg.enqueue_batches if b > 1]
    out: list[Round] = [(1, ("single", w)) for w in cfg.workers]
    if batches:
        out += [(batches[i % len(batches)], ("batch", w)) for i, w in enumerate(cfg.workers)]
    used = {mode for mode, _ in out}
    out += [(mode, None) for mode in cfg.enqueue_batches if mode not in used]
    return out


def throughput(systems: list[System], cfg: Config, metrics: dict[str, dict],
               checks: list[Check]) -> None:
    """Run every round on every system; record median figures and checks."""
    samples: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    broken: set[str] = set()
    schedule = [r for _ in range(cfg.repeats) for r in rounds(cfg)]
    for idx, (mode, drain) in enumerate(schedule):
        order = systems[idx % len(systems):] + systems[:idx % len(systems)]
        for system in order:
            if system.column in broken:
                continue
            try:
                _one_round(system, mode, drain, cfg, samples[system.column], checks)
            except Exception as exc:
                # The system's queue is in an unknown state now: stop timing it.
                traceback.print_exc()
                broken.add(system.column)
                checks.append(Check(system.column, f"round {idx + 1}", False, f"aborted: {exc!r}"[:500]))
    for column, figures in samples.items():
        for key, values in figures.items():
            values = [v for v in values if v is not None]
            metrics.setdefault(column, {})[key] = statistics.median(values) if values else None
            metrics[column][f"{key}_repeats"] = values


def _one_round(system: System, mode: int, drain: tuple[str, int] | None, cfg: Config,
               samples: dict[str, list], checks: list[Check]) -> None:
    timed_enqueue = mode in system.enqueue_batches
    timed_drain = drain is not None and drain[0] in system.drain_paths
    if not (timed_enqueue or timed_drain):
        return  # nothing this system can show in this round
    # At least one whole batch per enqueue client, or a "batch of 500"
    # round would really be measuring smaller batches.
    jobs = max(cfg.jobs, cfg.enqueue_clients * mode) if timed_enqueue else cfg.jobs
    if timed_enqueue:
        rate, ids = system.enqueue(jobs, mode, cfg)
        samples[f"enqueue_{mode}"].append(rate)
        print(f"[bench] {system.column}: enqueue {jobs} in batches of {mode}: {fmt_rate(rate)} jobs/s",
              flush=True)
    else:
        ids = system.fill_for_drain(jobs, cfg)
    if timed_drain:
        path, workers = drain
        metric = f"e2e_{path}_w{workers}"
    elif system.discard_untimed:
        return  # the next enqueue starts from an empty queue anyway
    else:
        # Every job still has to be completed (and checked), just untimed.
        path = "batch" if "batch" in system.drain_paths else "single"
        workers, metric = max(cfg.workers), None
    rate, round_checks = system.drain(path, workers, ids, cfg, metric)
    checks.extend(round_checks)
    if metric:
        samples[metric].append(rate)
        print(f"[bench] {system.column}: {path} drain of {len(ids)}, {workers} workers: "
              f"{fmt_rate(rate)} jobs/s", flush=True)


def latency(systems: list, cfg: Config, metrics: dict[str, dict], checks: list[Check]) -> None:
    """Claim-latency probes, one queuelog backend after the other."""
    for system in systems:
        try:
            system.latency(cfg, metrics.setdefault(system.column, {}))
        except Exception as exc:
            traceback.print_exc()
            checks.append(Check(system.column, "claim latency probe", False,
                                f"aborted: {exc!r}"[:500]))

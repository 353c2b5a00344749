"""The order of measurements: interleaved, repeated rounds, then latency probes.

There are two kinds of round.  An end-to-end round (path × N workers)
enqueues its jobs from N client processes (timed), then drains them with N
workers (timed); its figure is jobs / (enqueue + drain seconds), and the
drain alone is kept as a second, information-only figure.  An enqueue-only
round enqueues from ``cfg.enqueue_clients`` processes in one batch size
(timed) and then completes the jobs untimed, so every job is still checked.

Every system runs a round before any system starts the next one, in an
order rotated each round, and the whole list of rounds is repeated
``cfg.repeats`` times; each figure is the median of its repeats.  On a
shared 2-core machine the load drifts by several times within minutes:
short interleaved rounds keep the two figures of a ratio close in time, and
the median drops the round that hit a burst of someone else's work.
"""

from __future__ import annotations

import statistics
import traceback
from collections import defaultdict
from dataclasses import dataclass

from bench.config import Check, Config, EndToEndRound, end_to_end_rounds
from bench.procs import fmt_rate
from bench.system import System, rate


@dataclass(frozen=True)
class EnqueueRound:
    """Enqueue only, ``batch`` jobs per call, from ``cfg.enqueue_clients`` processes."""

    batch: int


Round = EndToEndRound | EnqueueRound


def rounds(cfg: Config) -> list[Round]:
    """The rounds of one repeat, in order."""
    return [*end_to_end_rounds(cfg), *(EnqueueRound(b) for b in cfg.enqueue_batches)]


def throughput(systems: list[System], cfg: Config, metrics: dict[str, dict], checks: list[Check]) -> None:
    """Run every round on every system; record median figures and checks."""
    samples: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    broken: set[str] = set()
    schedule = [r for _ in range(cfg.repeats) for r in rounds(cfg)]
    for idx, rnd in enumerate(schedule):
        order = systems[idx % len(systems) :] + systems[: idx % len(systems)]
        for system in order:
            if system.column in broken:
                continue
            try:
                if isinstance(rnd, EnqueueRound):
                    _enqueue_round(system, rnd, cfg, samples[system.column], checks)
                else:
                    _end_to_end_round(system, rnd, cfg, samples[system.column], checks)
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


def _end_to_end_round(
    system: System, rnd: EndToEndRound, cfg: Config, samples: dict[str, list], checks: list[Check]
) -> None:
    if rnd.path not in system.drain_paths:
        return
    jobs = cfg.end_to_end_jobs(rnd.path, rnd.workers)
    result = system.end_to_end(rnd.path, rnd.workers, jobs, cfg, rnd.end_to_end)
    checks.extend(result.checks)
    samples[rnd.end_to_end].append(rate(result.jobs, result.seconds))
    line = (
        f"[bench] {system.column}: {rnd.path} path, {result.jobs} jobs, workers={rnd.workers}"
        f": end-to-end {fmt_rate(rate(result.jobs, result.seconds))} jobs/s"
    )
    if result.drain_s is not None:
        samples[rnd.drain].append(rate(result.jobs, result.drain_s))
        samples[rnd.enqueue].append(rate(result.jobs, result.enqueue_s))
        line += (
            f" (enqueue {fmt_rate(rate(result.jobs, result.enqueue_s))}, "
            f"drain {fmt_rate(rate(result.jobs, result.drain_s))})"
        )
    print(line, flush=True)


def _enqueue_round(
    system: System, rnd: EnqueueRound, cfg: Config, samples: dict[str, list], checks: list[Check]
) -> None:
    if rnd.batch not in system.enqueue_batches:
        return
    # At least one whole batch per enqueue client, or a "batch of 500"
    # round would really be measuring smaller batches.
    jobs = max(cfg.jobs, cfg.enqueue_clients * rnd.batch)
    seconds, ids = system.enqueue(jobs, rnd.batch, cfg.enqueue_clients, cfg)
    samples[f"enqueue_{rnd.batch}"].append(rate(jobs, seconds))
    print(
        f"[bench] {system.column}: enqueue {jobs} in batches of {rnd.batch}: {fmt_rate(rate(jobs, seconds))} jobs/s",
        flush=True,
    )
    if system.discard_untimed:
        return  # the next enqueue starts from an empty queue anyway
    # Every job still has to be completed (and checked), just untimed.
    path = "batch" if "batch" in system.drain_paths else "single"
    _, drain_checks = system.drain(path, max(cfg.workers), ids, cfg, None)
    checks.extend(drain_checks)


def latency(systems: list, cfg: Config, metrics: dict[str, dict], checks: list[Check]) -> None:
    """Claim-latency probes, one queuelog backend after the other."""
    for system in systems:
        try:
            system.latency(cfg, metrics.setdefault(system.column, {}))
        except Exception as exc:
            traceback.print_exc()
            checks.append(Check(system.column, "claim latency probe", False, f"aborted: {exc!r}"[:500]))

"""What every measured system offers the scheduler in :mod:`bench.schedule`.

A system is started once (``with system:``), then asked for rounds: an
end-to-end round (enqueue the round's jobs, then drain them, both timed) or
an enqueue-only round.  The scheduler interleaves the systems round by
round, so the figures a ratio divides were taken minutes, not a quarter of
an hour, apart on this shared machine.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from bench.config import Check, Config


@dataclass
class EndToEnd:
    """What one end-to-end round measured."""

    jobs: int
    seconds: float | None  # enqueue + drain; None when nothing completed
    checks: list[Check]
    # The two timed parts, when the system has them (the ceiling does not:
    # its three requests per job run as one cycle).
    enqueue_s: float | None = None
    drain_s: float | None = None


def rate(jobs: int, seconds: float | None) -> float | None:
    """jobs/s, or None when nothing was timed."""
    return jobs / seconds if seconds else None


class System:
    """Base class: a queue (or the ceiling) that can be filled and drained."""

    column = ""  # report column key
    enqueue_batches: frozenset[int] = frozenset({1})  # jobs per enqueue call it supports
    drain_paths: frozenset[str] = frozenset({"single"})
    # True when the jobs of an enqueue-only round may simply be dropped (the
    # next enqueue starts afresh); otherwise they are drained, untimed.
    discard_untimed = False

    def __enter__(self) -> System:
        return self

    def __exit__(self, *exc) -> None:
        pass

    def enqueue(self, jobs: int, batch: int, clients: int, cfg: Config) -> tuple[float, list]:
        """Enqueue ``jobs`` no-op jobs from ``clients`` processes, ``batch``
        per call; returns (seconds, job ids)."""
        raise NotImplementedError

    def drain(
        self, path: str, workers: int, ids: list, cfg: Config, metric: str | None
    ) -> tuple[float | None, list[Check]]:
        """Complete every job in ``ids`` with ``workers`` workers; returns
        (seconds to the last completion or None, correctness checks)."""
        raise NotImplementedError

    def end_to_end(self, path: str, workers: int, jobs: int, cfg: Config, metric: str) -> EndToEnd:
        """Enqueue ``jobs`` from ``workers`` clients, then drain them with
        ``workers`` workers, timing both.

        The enqueue clients are as many as the workers, and use the path's
        own way of enqueueing (one job per call, or batches), so each
        system's figure counts every operation a job needs, like the
        ceiling's 3-request cycle.
        """
        batch = cfg.batch_path_enqueue if path == "batch" else 1
        enqueue_s, ids = self.enqueue(jobs, batch, workers, cfg)
        drain_s, checks = self.drain(path, workers, ids, cfg, metric)
        total = enqueue_s + drain_s if drain_s else None
        return EndToEnd(len(ids), total, checks, enqueue_s, drain_s)


def verify_once(target: str, what: str, enqueued: list, runs: list[dict], metric: str | None = None) -> Check:
    """Compare what was enqueued with what workers report completed."""
    done = [i for r in runs for i in r["ids"]]
    dupes = [i for i, n in Counter(done).items() if n > 1]
    missing = set(enqueued) - set(done)
    errors = sum(r.get("errors", 0) for r in runs)
    samples = [s for r in runs for s in r.get("error_samples", [])][:3]
    ok = not dupes and not missing and len(done) == len(enqueued)
    detail = (
        f"{len(done)} completions for {len(enqueued)} jobs, {len(dupes)} duplicated, "
        f"{len(missing)} missing, {errors} retried/unexpected responses"
    )
    if samples:
        detail += f"; e.g. {samples}"
    return Check(target, what, ok, detail, metric)

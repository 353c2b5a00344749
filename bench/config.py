"""Run sizes and correctness verdicts shared by every part of the benchmark."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Config:
    """Sizes of one run (``--quick`` or full)."""

    jobs: int  # jobs per round (batch-path rounds: see end_to_end_jobs)
    workers: list[int]  # concurrent workers (and enqueue clients) of an end-to-end round
    enqueue_clients: int  # processes enqueueing in parallel in an enqueue-only round
    enqueue_batches: list[int]  # enqueue-only rounds: 1 = single enqueue, else jobs per request
    claim_limit: int  # jobs per batch claim
    fills: list[int]  # pending-job counts for the latency probe
    latency_samples: int
    latency_warmup: int
    latency_budget_s: float  # time cap per pending-count level for the probe
    timeout: float  # upper bound for any one round, seconds
    repeats: int = 1  # interleaved passes over all rounds; figures are medians
    batch_path_enqueue: int = 100  # jobs per POST /jobs/batch on the end-to-end batch path
    # Worker rows (bench.worker_rounds): the shipped worker and the peers' own worker commands.
    worker_levels: tuple[int, ...] = (1, 4, 16)  # concurrency / threads / processes
    # A drain round's jobs: this many seconds of the system's own pace, measured by a warm-up round
    # of worker_warmup_jobs, kept within the bounds. 1.5 s rather than 2: 7 systems × 3 levels × 3
    # repeats of rounds are most of the worker rows' time (each 0.1 s here is about 7 s of a run).
    worker_round_s: float = 1.5
    worker_jobs_min: int = 50
    worker_jobs_max: int = 3_000
    worker_warmup_jobs: int = 100  # 0: no warm-up, every round drains worker_jobs_max
    pickup_samples: int = 100  # per system: one job at a time to an idle worker
    pickup_warmup: int = 3
    pickup_budget_s: float = 60.0  # all systems' probes together; at least pickup.MIN_SAMPLES each
    pickup_idle_s: tuple[float, float] = (0.02, 0.52)  # a worker's idle time before each sample, drawn
    # uniformly over more than SQLite's 0.5 s recheck, so no sample is in step with a poll

    def end_to_end_jobs(self, path: str, workers: int) -> int:
        """Jobs in one end-to-end round.

        A batch-path round gives every one of its ``workers`` enqueue clients
        at least one whole batch, or it would really be measuring smaller
        batches (and most of its batch-claiming workers would find nothing).
        """
        if path == "batch":
            return max(self.jobs, workers * self.batch_path_enqueue)
        return self.jobs


PATHS = ("single", "batch")  # one request per job operation / batch enqueue, claim, complete


@dataclass(frozen=True)
class EndToEndRound:
    """One end-to-end round (path × workers) and the metric keys of its figures."""

    path: str
    workers: int

    @property
    def end_to_end(self) -> str:
        """jobs / (enqueue seconds + drain seconds): the figure every ratio uses."""
        return f"e2e_{self.path}_w{self.workers}"

    @property
    def drain(self) -> str:
        """jobs / drain seconds: claim + complete only, for information."""
        return f"drain_{self.path}_w{self.workers}"

    @property
    def enqueue(self) -> str:
        """jobs / enqueue seconds of the same round (bench.json only)."""
        return f"e2e_enqueue_{self.path}_w{self.workers}"

    def all(self) -> tuple[str, str, str]:
        return self.end_to_end, self.drain, self.enqueue


def end_to_end_rounds(cfg: Config) -> list[EndToEndRound]:
    """Every end-to-end round of one repeat, single path first."""
    return [EndToEndRound(path, w) for path in PATHS for w in cfg.workers]


@dataclass
class Check:
    """One correctness verdict: every job completed exactly once."""

    target: str
    what: str
    ok: bool
    detail: str
    # The figure this check vouches for, if any; for an end-to-end round the
    # end-to-end key, which vouches for that round's drain and enqueue parts too.
    metric: str | None = None

    def as_dict(self) -> dict:
        return {"target": self.target, "what": self.what, "ok": self.ok, "detail": self.detail, "metric": self.metric}


# Quick: a smoke test; 200 jobs over 4 clients is one batch of 50 each in the
# enqueue-only round; batch-path rounds hold 200 and 400 jobs. The worker rows
# run at one level, 2, so queuelog-worker claims and acknowledges in batches.
QUICK = Config(
    jobs=200,
    workers=[1, 4],
    enqueue_clients=4,
    enqueue_batches=[1, 50],
    claim_limit=100,
    fills=[1_000],
    latency_samples=100,
    latency_warmup=10,
    latency_budget_s=15,
    timeout=120,
    repeats=1,
    worker_levels=(2,),
    worker_jobs_min=20,
    worker_jobs_max=20,
    worker_warmup_jobs=0,
    pickup_samples=5,
    pickup_warmup=1,
    pickup_budget_s=10,
)

# Full: 3 interleaved repeats of 300-job rounds (one whole batch per client:
# 2000 jobs for enqueue batches of 500 from 4 clients, 1600 jobs for the
# batch path with 16 workers).  The single path runs at a few
# dozen jobs/s when the shared machine is busy; this keeps the whole run
# well under 20 minutes even then.
FULL = Config(
    jobs=300,
    workers=[1, 4, 16],
    enqueue_clients=4,
    enqueue_batches=[1, 100, 500],
    claim_limit=100,
    fills=[1_000, 100_000, 1_000_000],
    latency_samples=500,
    latency_warmup=8,
    latency_budget_s=45,
    timeout=600,
    repeats=3,
)

"""Run sizes and correctness verdicts shared by every part of the benchmark."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Config:
    """Sizes of one run (``--quick`` or full)."""

    jobs: int                  # jobs per enqueue round and per drain round
    workers: list[int]         # concurrent worker processes to try
    enqueue_clients: int       # processes enqueueing in parallel
    enqueue_batches: list[int]  # 1 = single enqueue, else jobs per request
    claim_limit: int           # jobs per batch claim
    fills: list[int]           # pending-job counts for the latency probe
    latency_samples: int
    latency_warmup: int
    latency_budget_s: float    # time cap per pending-count level for the probe
    timeout: float             # upper bound for any one round, seconds
    repeats: int = 1           # interleaved passes over all rounds; figures are medians


@dataclass
class Check:
    """One correctness verdict: every job completed exactly once."""

    target: str
    what: str
    ok: bool
    detail: str
    metric: str | None = None  # the figure this check vouches for, if any

    def as_dict(self) -> dict:
        return {"target": self.target, "what": self.what, "ok": self.ok, "detail": self.detail,
                "metric": self.metric}


# Quick: a smoke test; 200 jobs over 4 clients is one batch of 50 each.
QUICK = Config(jobs=200, workers=[1, 4], enqueue_clients=4, enqueue_batches=[1, 50],
               claim_limit=100, fills=[1_000], latency_samples=100, latency_warmup=10,
               latency_budget_s=15, timeout=120, repeats=1)

# Full: 3 interleaved repeats of 300-job rounds (batch rounds: one whole batch
# per client, so 2000 jobs for batches of 500).  The single path runs at a few
# dozen jobs/s when the shared machine is busy; this keeps the whole run
# well under 20 minutes even then.
FULL = Config(jobs=300, workers=[1, 4, 16], enqueue_clients=4, enqueue_batches=[1, 100, 500],
              claim_limit=100, fills=[1_000, 100_000, 1_000_000], latency_samples=500,
              latency_warmup=8, latency_budget_s=45, timeout=600, repeats=3)

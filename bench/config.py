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


# Quick: 200 jobs over 4 clients is 50 per client, so one batch size of 50.
QUICK = Config(jobs=200, workers=[1, 4], enqueue_clients=4, enqueue_batches=[1, 50],
               claim_limit=100, fills=[1_000], latency_samples=100, latency_warmup=10,
               latency_budget_s=15,
               timeout=120)

# Full: 2000 jobs = 500 per enqueue client, whole batches of 100 and 500;
# more would not fit well under 20 minutes when the shared machine is busy.
FULL = Config(jobs=2000, workers=[1, 4, 16], enqueue_clients=4, enqueue_batches=[1, 100, 500],
              claim_limit=100, fills=[1_000, 100_000, 1_000_000], latency_samples=500,
              latency_warmup=8, latency_budget_s=45, timeout=600)

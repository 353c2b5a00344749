"""The worker rows' table and the targets of issue #14, each marked met or missed from this run's figures."""

from __future__ import annotations

from dataclasses import dataclass

from bench.config import Config

WORKER_COLUMNS = [
    ("ql_worker_sqlite", "queuelog-worker, SQLite"),
    ("ql_worker_postgresql", "queuelog-worker, PostgreSQL"),
    ("huey_consumer", "huey_consumer -k thread (SqliteHuey)"),
    ("rq_simple", "rq SimpleWorker, Redis not persisted"),
    ("rq_simple_aof", "rq SimpleWorker, Redis AOF always (durable)"),
    ("rq_worker", "rq worker (forking), Redis not persisted"),
    ("rq_worker_aof", "rq worker (forking), Redis AOF always (durable)"),
]
# queuelog-worker column → the throughput column of the same database (its batch path).
SHIPPED = {"ql_worker_sqlite": ("sqlite", "SQLite"), "ql_worker_postgresql": ("postgresql", "PostgreSQL")}
DURABLE_RQ = "rq_simple_aof"
HUEY = "huey_consumer"
TOP_LEVEL = 16

# The targets.
VS_DURABLE_RQ = 2.0  # ≥ 2× RQ's durable SimpleWorker at each level
VS_HUEY = 1.0  # ≥ huey's consumer at each level
VS_BATCH_PATH = 0.8  # at 16, ≥ 0.8× the batch path's end-to-end figure
PICKUP_P50_MS = 5.0
PICKUP_P99_MS = 25.0
# The pickup samples split by where the job's claim ran (bench.pickup): metric suffix → row label.
PICKUP_PLACEMENTS = {
    "other_process": "the claim in another server process than the enqueue's",
    "same_process": "the claim in the enqueue's own server process",
}


def rows(cfg: Config) -> list[tuple[str, str, str]]:
    """(metric key, label, unit) for every row of the worker table."""
    out = []
    for level in cfg.worker_levels:
        out += [
            (f"drain_c{level}", f"Drain pre-enqueued no-op jobs, {level} at once", "jobs/s"),
            (f"drain_jobs_c{level}", f"Jobs per drain round, {level} at once", "jobs"),
        ]
    lowest = min(cfg.worker_levels)
    idle = "one idle worker" if lowest == 1 else f"{lowest} idle workers"
    out += [
        ("pickup_p50", f"Pickup p50, {idle} (enqueue request start → handler start)", "ms"),
        ("pickup_p99", f"Pickup p99, {idle} (enqueue request start → handler start)", "ms"),
        ("pickup_samples", "Pickup samples", "jobs"),
    ]
    for where, label in PICKUP_PLACEMENTS.items():
        out += [
            (f"pickup_p50_{where}", f"Pickup p50, {label}", "ms"),
            (f"pickup_p99_{where}", f"Pickup p99, {label}", "ms"),
            (f"pickup_samples_{where}", f"Pickup samples, {label}", "jobs"),
        ]
    return out


@dataclass
class Target:
    """One target of the issue and where this run stands against it."""

    label: str
    value: float | str | None  # None: not measured in this run; "✗": from a failed round
    goal: str  # e.g. "≥ 2×", "≤ 5 ms"
    met: bool | None

    def line(self) -> str:
        if self.met is None:
            shown = "not measured" if self.value is None else f"{self.value} (its round failed a check)"
            return f"- **not measured** {self.label}: {shown} (target {self.goal})"
        unit = " ms" if self.goal.endswith("ms") else "×"
        return f"- **{'met' if self.met else 'missed'}** {self.label}: {self.value:.2f}{unit} (target {self.goal})"

    def as_dict(self) -> dict:
        return {"label": self.label, "value": self.value, "goal": self.goal, "met": self.met}


def targets(cfg: Config, metrics: dict[str, dict], failed: set[tuple[str, str]], ratio) -> list[Target]:
    """Every target line; ``ratio(metrics, failed, num, den)`` is report's ratio of two figures."""
    out = []
    for column, (throughput_column, name) in SHIPPED.items():
        for level in cfg.worker_levels:
            key = f"drain_c{level}"
            out.append(
                _at_least(
                    f"queuelog-worker ({name}) ÷ rq SimpleWorker on durable Redis, {level} at once",
                    ratio(metrics, failed, (column, key), (DURABLE_RQ, key)),
                    VS_DURABLE_RQ,
                )
            )
            out.append(
                _at_least(
                    f"queuelog-worker ({name}) ÷ huey_consumer, {level} at once",
                    ratio(metrics, failed, (column, key), (HUEY, key)),
                    VS_HUEY,
                )
            )
        out.append(
            _at_least(
                f"queuelog-worker ({name}) at {TOP_LEVEL} ÷ batch path end-to-end, {TOP_LEVEL} workers",
                _median_ratio(
                    metrics, failed, (column, f"drain_c{TOP_LEVEL}"), (throughput_column, f"e2e_batch_w{TOP_LEVEL}")
                ),
                VS_BATCH_PATH,
            )
        )
        for pct, bound in (("p50", PICKUP_P50_MS), ("p99", PICKUP_P99_MS)):
            for key, which in (
                (f"pickup_{pct}", ""),
                (f"pickup_{pct}_other_process", ", the claim in another server process"),
            ):
                value = "✗" if (column, "pickup_p50") in failed else metrics.get(column, {}).get(key)
                met = value <= bound if isinstance(value, float | int) else None
                out.append(Target(f"pickup {pct}, queuelog-worker ({name}){which}", value, f"≤ {bound:g} ms", met))
    return out


def _at_least(label: str, value, bound: float) -> Target:
    met = value >= bound if isinstance(value, float | int) else None
    return Target(label, value, f"≥ {bound:g}×", met)


def _median_ratio(metrics: dict[str, dict], failed: set, num: tuple[str, str], den: tuple[str, str]):
    """Median ÷ median: figures from different phases of the run have no repeats in common."""
    if num in failed or den in failed:
        return "✗"
    a, b = metrics.get(num[0], {}).get(num[1]), metrics.get(den[0], {}).get(den[1])
    return a / b if isinstance(a, float | int) and isinstance(b, float | int) and b else None


def notes(cfg: Config) -> list[str]:
    """How the worker rows are taken, for the notes under the tables."""
    idle = "–".join(f"{s * 1000:.0f}" for s in cfg.pickup_idle_s)
    return [
        "Worker rows: the shipped `queuelog-worker bench.queuelog_tasks:worker --concurrency N` (one process) "
        "against queuelog under the README's production command (gunicorn --workers 4 --threads 8, on "
        "databases of their own), `huey_consumer bench.huey_tasks.huey -k thread -w N` on SqliteHuey, and N "
        "`rq worker` processes (RQ's default forking Worker; `-w rq.worker.SimpleWorker`) on a redis-server "
        "without persistence and on one with appendonly yes, appendfsync always. Every one runs "
        "bench.tasks.noop, loaded as its users load their handlers.",
        "Drain: the workers start on an empty queue and, once listening, are paused (SIGSTOP); the round's "
        "jobs are enqueued (untimed); the workers are resumed (SIGCONT). Timed from the first job's start "
        "(the handler's own clock reading; RQ: its started_at) to the last completion the queue recorded "
        "(queuelog: completed_at; RQ: ended_at; huey records no time: the handler's reading), so how soon an "
        "idle worker notices work is left to the pickup rows. huey's consumer is started afresh for each "
        "round: after idling its threads sleep up to 10 s between polls. "
        f"A round holds {cfg.worker_round_s:g} s of the system's pace in a warm-up round, "
        f"{cfg.worker_jobs_min:,}–{cfg.worker_jobs_max:,} jobs; "
        + (f"median of {cfg.repeats} interleaved rounds. " if cfg.repeats > 1 else "one round. ")
        + "Exactly once is read from each queue's own state (queuelog: status and claimed/completed events "
        "per job; RQ: finished, failed and started registries; huey: one result per task, none pending).",
        f"Pickup: one worker per system, one job at a time on the whole machine (the systems take turns), "
        f"each worker idle for at least {idle} ms (uniform) before each of its jobs; from a clock reading just "
        "before the enqueue request to the handler's first reading (CLOCK_MONOTONIC). queuelog-worker "
        "long-polls and RQ blocks on Redis; huey's consumer polls SqliteHuey, 0.1 s after a task and backing "
        "off ×1.15 per empty poll to 10 s, so its figure grows with the time a worker was idle.",
    ]

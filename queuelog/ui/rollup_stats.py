"""Figures read from the type rollups (``queuelog.queue.rollups``), never from the jobs: the dashboard's
chart over the last hour, 24 hours or 7 days, and each type's wait and run percentiles over the last hour.

Each read is one grouped query on the rollups' primary key (span, metric, period, …): its cost grows with
the types and periods shown, not with the jobs stored.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select

from ..database.transactions import read_connection
from ..models import TypeRollup
from ..queue.rollups import COMPLETED, COUNTS, ENQUEUED, FAILED, HISTOGRAMS, HOUR, MINUTE, RUN, WAIT, period_of
from ..timing_buckets import OVERFLOW, percentile, upper_edge

rollups = TypeRollup.__table__


@dataclass(frozen=True)
class ChartRange:
    """One choice of the dashboard's chart: how far back, in bars of ``span`` seconds."""

    key: str            # ?range=…
    label: str          # the switch's text
    title: str          # "the last hour"
    span: int
    bars: int
    tick_every: int     # bars between time labels, wide
    narrow_tick_every: int
    tick_format: str    # strftime of a time label
    bar_format: str     # strftime of a bar's tooltip
    per: str            # "per minute"


RANGES = {r.key: r for r in (
    ChartRange("1h", "Last hour", "the last hour", MINUTE, 60, 10, 20, "%H:%M", "%H:%M", "per minute"),
    ChartRange("24h", "24 hours", "the last 24 hours", HOUR, 24, 4, 8, "%H:%M", "%d %b %H:00", "per hour"),
    ChartRange("7d", "7 days", "the last 7 days", HOUR, 168, 24, 48, "%a %d", "%a %d %b %H:00", "per hour"),
)}
DEFAULT_RANGE = "1h"


@dataclass
class Period:
    """One bar of the chart: jobs completed and failed for good in it."""

    start: datetime
    completed: int = 0
    failed: int = 0


def throughput(now: datetime, chart_range: ChartRange) -> list[Period]:
    """Jobs completed and failed per bar over ``chart_range``, oldest first, zeros included."""
    last = period_of(now, chart_range.span)
    first = last - (chart_range.bars - 1) * chart_range.span
    periods = {first + i * chart_range.span: Period(_time(first + i * chart_range.span))
               for i in range(chart_range.bars)}
    with read_connection() as conn:
        rows = conn.execute(
            select(rollups.c.metric, rollups.c.period, func.sum(rollups.c.n))
            .where(rollups.c.span == chart_range.span, rollups.c.metric.in_([COMPLETED, FAILED]),
                   rollups.c.period >= first)
            .group_by(rollups.c.metric, rollups.c.period)
        ).all()
    for metric, start, count in rows:
        bar = periods.get(start)
        if bar is None:
            continue
        if metric == COMPLETED:
            bar.completed += int(count)
        else:
            bar.failed += int(count)
    return list(periods.values())


@dataclass
class TypeTimings:
    """One type's last hour: jobs enqueued, completed and failed, and wait and run histograms (bucket → jobs)."""

    type: str
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTS, 0))
    histograms: dict[str, dict[int, int]] = field(default_factory=lambda: {m: {} for m in HISTOGRAMS})

    def p(self, metric: str, fraction: float) -> timedelta | None | str:
        """The ``fraction`` quantile of ``metric`` (wait or run) as a bucket's upper edge; None: no job;
        "over": past the last bucket."""
        bucket = percentile(self.histograms[metric], fraction)
        if bucket is None:
            return None
        return upper_edge(bucket) or "over"

    @property
    def enqueued(self) -> int:
        """Jobs of the type enqueued in the hour."""
        return self.counts[ENQUEUED]

    @property
    def completed(self) -> int:
        """Jobs of the type completed in the hour."""
        return self.counts[COMPLETED]

    @property
    def failed(self) -> int:
        """Jobs of the type failed for good in the hour."""
        return self.counts[FAILED]

    @property
    def timed(self) -> int:
        """Runs timed in the hour: how many the run percentiles are read from."""
        return sum(self.histograms[RUN].values())

    @property
    def waited(self) -> int:
        """Claims in the hour: how many the wait percentiles are read from."""
        return sum(self.histograms[WAIT].values())


def last_hour(now: datetime, job_type: str | None = None) -> dict[str, TypeTimings]:
    """Per type (or for ``job_type`` only), the last 60 minutes (this one included) of counts and histograms."""
    first = period_of(now, MINUTE) - 59 * MINUTE
    query = (select(rollups.c.type, rollups.c.metric, rollups.c.bucket, func.sum(rollups.c.n))
             .where(rollups.c.span == MINUTE, rollups.c.metric.in_(COUNTS + HISTOGRAMS), rollups.c.period >= first)
             .group_by(rollups.c.type, rollups.c.metric, rollups.c.bucket))
    if job_type is not None:
        query = query.where(rollups.c.type == job_type)
    with read_connection() as conn:
        rows = conn.execute(query).all()
    found: dict[str, TypeTimings] = {}
    for name, metric, bucket, count in rows:
        timings = found.setdefault(name, TypeTimings(name))
        if metric in HISTOGRAMS:
            timings.histograms[metric][bucket] = int(count)
        else:
            timings.counts[metric] += int(count)
    return found


def _time(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def bound_text(value: timedelta | None | str) -> str:
    """A percentile as the page prints it: "≤ 45 ms", "≤ 2.8 s", "≤ 23 min", "> 70 min", or "–" for no job."""
    if value is None:
        return "–"
    if value == "over":
        return f"> {upper_edge(OVERFLOW - 1).total_seconds() / 60:.0f} min"
    seconds = value.total_seconds()
    if seconds < 1:
        return f"≤ {seconds * 1000:.3g} ms"
    if seconds < 60:
        return f"≤ {seconds:.3g} s"
    return f"≤ {seconds / 60:.3g} min"

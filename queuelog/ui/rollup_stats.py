"""Figures read from the type rollups (``queuelog.queue.rollups``), never from the jobs: the dashboard's
chart over the last hour, 24 hours or 7 days, and each type's wait and run percentiles over the last hour.

Each read is one grouped query on the rollups' primary key (span, metric, period, …) for the minutes the
rollup step has rolled, plus the minutes after its mark read live from ``job_events`` through
``ix_job_events_event_at`` (normally the current minute and the one before: the step waits a settle lag),
folded by the step's own code. Its cost grows with the types and periods shown, not with the jobs stored.
At most LIVE_MOST minutes are read live: when the mark is further behind (no server's ticker has rolled up,
no ``flask rollup``), the minutes in between are not counted and ``Freshness.behind`` says so on the page.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select

from ..core.timing_buckets import OVERFLOW, percentile, upper_edge
from ..database.transactions import read_connection
from ..models import TypeRollup
from ..queue.rollups import (
    COMPLETED,
    COUNTS,
    ENQUEUED,
    FAILED,
    HISTOGRAMS,
    HOUR,
    MINUTE,
    RUN,
    WAIT,
    Folded,
    as_time,
    fold,
    mark,
    period_of,
)

rollups = TypeRollup.__table__


@dataclass(frozen=True)
class ChartRange:
    """One choice of the dashboard's chart: how far back, in bars of ``span`` seconds."""

    key: str  # ?range=…
    label: str  # the switch's text
    title: str  # "the last hour"
    span: int
    bars: int
    tick_every: int  # bars between time labels, wide
    narrow_tick_every: int
    tick_format: str  # strftime of a time label
    bar_format: str  # strftime of a bar's tooltip
    per: str  # "per minute"


RANGES = {
    r.key: r
    for r in (
        ChartRange("1h", "Last hour", "the last hour", MINUTE, 60, 10, 20, "%H:%M", "%H:%M", "per minute"),
        ChartRange("24h", "24 hours", "the last 24 hours", HOUR, 24, 4, 8, "%H:%M", "%d %b %H:00", "per hour"),
        ChartRange("7d", "7 days", "the last 7 days", HOUR, 168, 24, 48, "%a %d", "%a %d %b %H:00", "per hour"),
    )
}
DEFAULT_RANGE = "1h"


#: Minutes after the rollup mark read live from the events at most (normally 1-2 are).
LIVE_MOST = 10


@dataclass(frozen=True)
class Freshness:
    """How a figure was read: rolled up through the mark, live from ``live_from`` (Unix seconds)."""

    through: int | None  # the rollup mark: the first minute not rolled up; None: never rolled
    live_from: int

    @property
    def behind(self) -> bool:
        """Minutes between the mark and the live ones are not counted: the rollup has not run lately."""
        return self.through is None or self.through < self.live_from

    @property
    def rolled_through(self) -> datetime | None:
        """The start of the last minute rolled up, or None."""
        return None if self.through is None else as_time(self.through - MINUTE)

    @property
    def live_since(self) -> datetime:
        """The start of the first minute read live."""
        return as_time(self.live_from)


def _live(conn, now: datetime) -> tuple[Folded, Freshness]:
    """The minutes after the rollup mark (at most LIVE_MOST, this one included), folded from the events."""
    this_minute = period_of(now, MINUTE)
    floor = this_minute - (LIVE_MOST - 1) * MINUTE
    through = mark(conn)
    live_from = floor if through is None else max(through, floor)
    return fold(conn, live_from, this_minute + MINUTE), Freshness(through, live_from)


@dataclass
class Period:
    """One bar of the chart: jobs completed and failed for good in it."""

    start: datetime
    completed: int = 0
    failed: int = 0


def throughput(now: datetime, chart_range: ChartRange) -> tuple[list[Period], Freshness]:
    """Jobs completed and failed per bar over ``chart_range``, oldest first, zeros included; and how fresh."""
    last = period_of(now, chart_range.span)
    first = last - (chart_range.bars - 1) * chart_range.span
    periods = {
        first + i * chart_range.span: Period(_time(first + i * chart_range.span)) for i in range(chart_range.bars)
    }
    with read_connection() as conn:
        rows = conn.execute(
            select(rollups.c.metric, rollups.c.period, func.sum(rollups.c.n))
            .where(
                rollups.c.span == chart_range.span, rollups.c.metric.in_([COMPLETED, FAILED]), rollups.c.period >= first
            )
            .group_by(rollups.c.metric, rollups.c.period)
        ).all()
        live, freshness = _live(conn, now)
    rows += [
        (metric, period_of(as_time(minute), chart_range.span), n)
        for (minute, metric, _type, _bucket), n in live.items()
        if metric in (COMPLETED, FAILED)
    ]
    for metric, start, count in rows:
        bar = periods.get(start)
        if bar is None:
            continue
        if metric == COMPLETED:
            bar.completed += int(count)
        else:
            bar.failed += int(count)
    return list(periods.values()), freshness


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


def last_hour(now: datetime, job_type: str | None = None) -> tuple[dict[str, TypeTimings], Freshness]:
    """Per type (or for ``job_type`` only), the last 60 minutes (this one included) of counts and histograms;
    and how fresh they are."""
    first = period_of(now, MINUTE) - 59 * MINUTE
    query = (
        select(rollups.c.type, rollups.c.metric, rollups.c.bucket, func.sum(rollups.c.n))
        .where(rollups.c.span == MINUTE, rollups.c.metric.in_(COUNTS + HISTOGRAMS), rollups.c.period >= first)
        .group_by(rollups.c.type, rollups.c.metric, rollups.c.bucket)
    )
    if job_type is not None:
        query = query.where(rollups.c.type == job_type)
    with read_connection() as conn:
        rows = conn.execute(query).all()
        live, freshness = _live(conn, now)
    rows += [
        (name, metric, bucket, n)
        for (minute, metric, name, bucket), n in live.items()
        if minute >= first and (job_type is None or name == job_type)
    ]
    found: dict[str, TypeTimings] = {}
    for name, metric, bucket, count in rows:
        timings = found.setdefault(name, TypeTimings(name))
        if metric in HISTOGRAMS:
            timings.histograms[metric][bucket] = timings.histograms[metric].get(bucket, 0) + int(count)
        else:
            timings.counts[metric] += int(count)
    return found, freshness


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

"""Geometry of the dashboard's throughput chart: stacked bars per minute or hour, drawn as SVG by a template.

SVG text scales with the drawing, so one drawing cannot be readable both across a desktop and across a
phone: the dashboard draws the hour twice, wide and narrow, and the stylesheet shows the one that fits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .rollup_stats import ChartRange, Period

WIDTH, HEIGHT = 1200, 220
# For a phone: about as many units as the screen has pixels, so its 12-unit labels stay about 12 px tall.
NARROW_WIDTH, NARROW_HEIGHT = 360, 200
LEFT, RIGHT, TOP, BOTTOM = 48, 8, 10, 26


@dataclass
class Bar:
    """One period's column: completed stacked under failed, and its tooltip."""

    x: float
    width: float
    completed_y: float
    completed_h: float
    failed_y: float
    failed_h: float
    label: str


@dataclass
class Chart:
    """Everything the template needs to draw the chart, in SVG user units."""

    width: int = WIDTH
    height: int = HEIGHT
    bars: list[Bar] = field(default_factory=list)
    gridlines: list[tuple[float, int]] = field(default_factory=list)  # (y, value)
    ticks: list[tuple[float, str, str]] = field(default_factory=list)  # (x, label, text-anchor)
    completed: int = 0
    failed: int = 0
    peak: int = 0
    plot_left: int = LEFT
    plot_right: int = WIDTH - RIGHT
    plot_top: int = TOP
    plot_bottom: int = HEIGHT - BOTTOM


def nice_ceiling(value: int) -> int:
    """The smallest 1, 2 or 5 × 10^k at or above ``value`` (at least 1), so gridlines read as round numbers."""
    if value <= 1:
        return 1
    magnitude = 10 ** int(math.floor(math.log10(value)))
    for step in (1, 2, 5, 10):
        if step * magnitude >= value:
            return step * magnitude
    return 10 * magnitude


def build_chart(
    periods: list[Period], chart_range: ChartRange, width: int = WIDTH, height: int = HEIGHT, narrow: bool = False
) -> Chart:
    """Lay out one column per period: completed at the bottom, failed stacked on top, in red.

    A time label every ``chart_range.tick_every`` columns (``narrow_tick_every`` when ``narrow``), and one at
    the end.
    """
    tick_every = chart_range.narrow_tick_every if narrow else chart_range.tick_every
    tick_format, bar_format = chart_range.tick_format, chart_range.bar_format
    chart = Chart(width=width, height=height, plot_right=width - RIGHT, plot_bottom=height - BOTTOM)
    chart.completed = sum(m.completed for m in periods)
    chart.failed = sum(m.failed for m in periods)
    chart.peak = max((m.completed + m.failed for m in periods), default=0)
    top = nice_ceiling(chart.peak)
    plot_w = chart.plot_right - chart.plot_left
    plot_h = chart.plot_bottom - chart.plot_top
    slot = plot_w / max(1, len(periods))

    def height_of(count: int) -> float:
        # A period with any job gets at least a sliver, so a single failure is never invisible.
        return 0.0 if count == 0 else max(1.5, plot_h * count / top)

    for index, period in enumerate(periods):
        x = chart.plot_left + index * slot + slot * 0.15
        completed_h = height_of(period.completed)
        failed_h = height_of(period.failed)
        completed_y = chart.plot_bottom - completed_h
        chart.bars.append(
            Bar(
                x=round(x, 2),
                width=round(slot * 0.7, 2),
                completed_y=round(completed_y, 2),
                completed_h=round(completed_h, 2),
                failed_y=round(completed_y - failed_h, 2),
                failed_h=round(failed_h, 2),
                label=f"{period.start:{bar_format}} UTC: {period.completed} completed, {period.failed} failed",
            )
        )
        if index % tick_every == 0 and index < len(periods) - tick_every // 2:
            chart.ticks.append((round(x, 2), f"{period.start:{tick_format}}", "start"))
        elif index == len(periods) - 1:
            chart.ticks.append((round(x + slot * 0.7, 2), f"{period.start:{tick_format}}", "end"))
    for fraction in (0, 0.5, 1):
        value = int(top * fraction)
        if fraction and value == 0:
            continue
        chart.gridlines.append((round(chart.plot_bottom - plot_h * fraction, 2), value))
    return chart

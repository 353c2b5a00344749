"""The figures of ``python -m bench.soak``: the shape of a run, its windows, the contract's verdicts, and the
text and Markdown they are printed as."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

#: The baseline's first seconds are left out of it: the server and the worker are still warming up.
WARM_UP_S = 20


@dataclass
class Shape:
    rate: float
    history: int
    baseline: float
    hold: float
    after: float
    window: float = 10.0
    workers: int = 8


@dataclass
class Window:
    """One sampling window: what the probe and the database said in it."""

    end: float  # seconds since the load started
    phase: str
    claims_ms: list[float] = field(default_factory=list)
    completed_per_s: float = 0.0
    backlog: int = 0
    dead_rows: int = 0
    table_bytes: int = 0

    def p(self, q: float) -> float | None:
        if not self.claims_ms:
            return None
        ordered = sorted(self.claims_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def print_window(w: Window) -> None:
    p50, p99 = w.p(0.5), w.p(0.99)
    print(
        f"{w.end:>6.0f} s  {w.phase:<8} claim p50 {_ms(p50):>7} p99 {_ms(p99):>7}  {w.completed_per_s:>6.1f} jobs/s"
        f"  backlog {w.backlog:>6}  dead rows {w.dead_rows:>8}  live table {w.table_bytes / 2**20:>6.1f} MiB",
        flush=True,
    )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def verdicts(windows: list[Window], shape: Shape) -> dict[str, float | None]:
    """The contract's ratios: hold's last third p99 / baseline p99, hold jobs/s / baseline jobs/s, recovery s."""
    warm_up = min(WARM_UP_S, shape.baseline / 4)
    base = [w for w in windows if w.phase == "baseline" and w.end > warm_up]
    hold = [w for w in windows if w.phase == "hold"]
    last_third = [w for w in hold if w.end > shape.baseline + shape.hold * 2 / 3]
    after = [w for w in windows if w.phase == "after"]
    base_p99 = _pooled(base, 0.99)
    base_rate = statistics.fmean(w.completed_per_s for w in base) if base else 0.0
    hold_rate = statistics.fmean(w.completed_per_s for w in hold) if hold else 0.0
    base_backlog = max((w.backlog for w in base), default=0)
    recovered = None
    for w in after:
        p99 = w.p(0.99)
        if p99 is not None and base_p99 and p99 <= 1.5 * base_p99 and w.backlog <= 2 * base_backlog + shape.rate:
            recovered = w.end - shape.baseline - shape.hold
            break
    held_p99 = _pooled(last_third, 0.99)
    return {
        "baseline_p99_ms": base_p99,
        "held_p99_ms": held_p99,
        "p99_ratio": held_p99 / base_p99 if held_p99 and base_p99 else None,
        "baseline_jobs_per_s": base_rate,
        "held_jobs_per_s": hold_rate,
        "rate_ratio": hold_rate / base_rate if base_rate else None,
        "recovered_after_s": recovered,
        "dead_rows_at_release": hold[-1].dead_rows if hold else None,
        "size_growth": (hold[-1].table_bytes / base[-1].table_bytes) if hold and base else None,
    }


def _pooled(windows: list[Window], q: float) -> float | None:
    return Window(0, "", [ms for w in windows for ms in w.claims_ms]).p(q)


def print_verdicts(label: str, v: dict) -> None:
    def fmt(value, spec):
        return "-" if value is None else format(value, spec)

    print(f"\n{label}:")
    print(
        f"  claim p99, baseline → last third of the hold  {fmt(v['baseline_p99_ms'], '.1f')} → "
        f"{fmt(v['held_p99_ms'], '.1f')} ms  ({fmt(v['p99_ratio'], '.2f')}×, contract ≤ 2×)"
    )
    print(
        f"  jobs/s, baseline → hold                       {fmt(v['baseline_jobs_per_s'], '.1f')} → "
        f"{fmt(v['held_jobs_per_s'], '.1f')}  ({fmt(v['rate_ratio'], '.2f')}×, contract ≥ 0.9×)"
    )
    print(f"  back at the baseline after the hold           {fmt(v['recovered_after_s'], '.0f')} s (contract ≤ 60 s)")
    print(f"  dead rows at release                          {fmt(v['dead_rows_at_release'], 'd')}")
    print(f"  jobs + indexes, end of hold / baseline        {fmt(v['size_growth'], '.2f')}×")


def markdown_timeline(timelines: dict[str, list[Window]]) -> str:
    """The runs' windows side by side, one row per window: each figure as ``vs / this`` when both ran."""
    labels = list(timelines)
    rows = [
        "| s | phase | claim p50 ms | claim p99 ms | jobs/s | backlog | dead rows | live table + indexes MiB |",
        "|---:|---|---|---|---|---|---|---|",
    ]
    for windows in zip(*(timelines[label] for label in labels), strict=True):
        rows.append(
            f"| {windows[0].end:.0f} | {windows[0].phase} | {_both(windows, lambda w: _ms(w.p(0.5)))} | "
            f"{_both(windows, lambda w: _ms(w.p(0.99)))} | {_both(windows, lambda w: f'{w.completed_per_s:.1f}')} | "
            f"{_both(windows, lambda w: str(w.backlog))} | {_both(windows, lambda w: f'{w.dead_rows:,}')} | "
            f"{_both(windows, lambda w: f'{w.table_bytes / 2**20:.1f}')} |"
        )
    return "\n".join(rows) + "\n"


def _both(windows: tuple[Window, ...], figure) -> str:
    return " / ".join(figure(w) for w in windows)

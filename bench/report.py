"""Turn collected metrics into the Markdown table, the ratios and the JSON file."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from bench import worker_report
from bench.config import PATHS, Config, EndToEndRound, end_to_end_rounds

COLUMNS = [
    ("sqlite", "queuelog SQLite"),
    ("sqlite_normal", "queuelog SQLite, synchronous=NORMAL"),
    ("postgresql", "queuelog PostgreSQL"),
    ("huey", "huey (SqliteHuey)"),
    ("rq", "RQ (Redis)"),
    ("ceiling", "Flask ceiling"),
]
QUEUELOG_COLUMNS = [("sqlite", "SQLite"), ("sqlite_normal", "SQLite, NORMAL"), ("postgresql", "PostgreSQL")]
QUEUELOG_KEYS = {key for key, _ in QUEUELOG_COLUMNS}
# Columns whose correctness checks decide the exit status: queuelog's own, with its shipped worker.
OWN_COLUMNS = QUEUELOG_KEYS | set(worker_report.SHIPPED)


def _workers(n: int) -> str:
    return f"{n} worker" + ("s" if n != 1 else "")


def _path_desc(cfg: Config, path: str) -> str:
    if path == "single":
        return "single path (enqueue, claim, complete: one job per call)"
    return (
        f"batch path (enqueue in batches of {cfg.batch_path_enqueue}, batch claim ≤{cfg.claim_limit}, batch complete)"
    )


def rows(cfg: Config) -> list[tuple[str, str, str]]:
    """(metric key, label, unit) for every table row, in display order."""
    clients = f"{cfg.enqueue_clients} clients"
    out = [
        (
            f"enqueue_{b}",
            f"Enqueue only, single, {clients}" if b == 1 else f"Enqueue only, batches of {b}, {clients}",
            "jobs/s",
        )
        for b in cfg.enqueue_batches
    ]
    rounds = end_to_end_rounds(cfg)
    out += [(r.end_to_end, f"End-to-end, {_path_desc(cfg, r.path)}, {_workers(r.workers)}", "jobs/s") for r in rounds]
    # The drain alone flatters every queue (its enqueue is free): shown for
    # information only, never used in a ratio.
    out += [
        (r.drain, f"Claim + complete only (enqueue not timed), {r.path} path, {_workers(r.workers)}", "jobs/s")
        for r in rounds
    ]
    for n in cfg.fills:
        out += [
            (f"claim_p50_{n}", f"Claim latency p50, {n:,} pending", "ms"),
            (f"claim_p99_{n}", f"Claim latency p99, {n:,} pending", "ms"),
        ]
    big = max(cfg.fills)
    out += [
        ("rss_before_mib", f"Server RSS before the {big:,} fill", "MiB"),
        ("rss_after_mib", f"Server RSS after the {big:,} fill + claims", "MiB"),
    ]
    return out


def _fmt(value, unit: str) -> str:
    if value is None:
        return "–"
    if isinstance(value, str):
        return value
    if unit == "ms":
        return f"{value:.1f}"
    if unit == "×":
        return f"{value:.2f}×"
    return f"{value:,.0f}"


FAILED = "✗"


def _ratio(metrics: dict[str, dict], failed: set[tuple[str, str]], num: tuple[str, str], den: tuple[str, str]):
    """``num ÷ den`` for two (column, metric) figures.

    When both figures have one value per repeat in the same order (same
    repeats of the interleaved schedule), the ratio is the median of the
    per-repeat ratios: each pairs two figures taken minutes apart, so a load
    burst that hit one repeat cancels out.  Otherwise the medians are divided.
    A figure from a failed round makes the ratio ✗: a fast wrong answer must
    not read as a good ratio.
    """
    if num in failed or den in failed:
        return FAILED
    m_num, m_den = metrics.get(num[0], {}), metrics.get(den[0], {})
    r_num, r_den = m_num.get(f"{num[1]}_repeats"), m_den.get(f"{den[1]}_repeats")
    if r_num and r_den and len(r_num) == len(r_den):
        per_round = [a / b for a, b in zip(r_num, r_den, strict=True) if b]
        return statistics.median(per_round) if per_round else None
    a, b = m_num.get(num[1]), m_den.get(den[1])
    return a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None


def ratios(cfg: Config, metrics: dict[str, dict], failed: set[tuple[str, str]]) -> list[tuple[str, dict]]:
    """(label, {"sqlite": r, "postgresql": r}) for every ratio the brief asks for."""

    def row(label: str, num_key: str, den_col: str | None, den_key: str) -> tuple[str, dict]:
        # den_col None: the denominator is in the same queuelog column.
        return label, {
            col: _ratio(metrics, failed, (col, num_key), (den_col or col, den_key)) for col, _ in QUEUELOG_COLUMNS
        }

    def e2e(path: str, w: int) -> str:
        return EndToEndRound(path, w).end_to_end

    out = []
    # The ceiling's end-to-end job is 3 no-op requests, so its figure already
    # is "ceiling request rate ÷ 3".
    for w in cfg.workers:
        out.append(
            row(
                f"End-to-end single path ÷ (ceiling requests/s ÷ 3), {_workers(w)}",
                e2e("single", w),
                "ceiling",
                e2e("single", w),
            )
        )
    for w in cfg.workers:
        out.append(row(f"End-to-end batch path ÷ single path, {_workers(w)}", e2e("batch", w), None, e2e("single", w)))
    top = max(cfg.enqueue_batches)
    if top > 1:
        out.append(row(f"Enqueue only, batch-{top} ÷ single", f"enqueue_{top}", None, "enqueue_1"))
    # huey and RQ have one end-to-end figure per worker count (one job per
    # call); both queuelog paths are set against it.
    for name, peer in (("huey", "huey"), ("RQ", "rq")):
        out.append(row(f"queuelog ÷ {name}, enqueue only, single", "enqueue_1", peer, "enqueue_1"))
        for path in PATHS:
            for w in cfg.workers:
                out.append(
                    row(
                        f"queuelog {path} path ÷ {name}, end-to-end, {_workers(w)}",
                        e2e(path, w),
                        peer,
                        e2e("single", w),
                    )
                )
    lo, hi = min(cfg.fills), max(cfg.fills)
    if hi != lo:
        out.append(row(f"Claim p99 at {hi:,} ÷ p99 at {lo:,} pending", f"claim_p99_{hi}", None, f"claim_p99_{lo}"))
    out.append(row(f"RSS after ÷ before the {hi:,} fill", "rss_after_mib", None, "rss_before_mib"))
    return out


def failed_figures(cfg: Config, checks: list[dict]) -> set[tuple[str, str]]:
    """(column, metric) pairs whose round failed a correctness check.

    An end-to-end round's check names its end-to-end figure; the drain and
    enqueue parts of that round fail with it.
    """
    parts = {r.end_to_end: r.all() for r in end_to_end_rounds(cfg)}
    # A pickup probe's check vouches for all its figures.
    suffixes = ("", *(f"_{where}" for where in worker_report.PICKUP_PLACEMENTS))
    parts["pickup_p50"] = tuple(f"pickup_{pct}{suffix}" for suffix in suffixes for pct in ("p50", "p99"))
    return {
        (c["target"], key)
        for c in checks
        if not c["ok"] and c.get("metric")
        for key in parts.get(c["metric"], (c["metric"],))
    }


def markdown(
    cfg: Config, meta: dict, metrics: dict[str, dict], ratio_rows, target_rows, checks: list[dict], notes: list[str]
) -> str:
    lines = [
        f"# queuelog benchmark ({meta['mode']})",
        "",
        f"{meta['started']} · {meta['cpus']} CPUs · commit {meta['commit']} · "
        f"{cfg.jobs} jobs per round (≥ 1 whole batch per client) · "
        + (f"median of {cfg.repeats} interleaved repeats · " if cfg.repeats > 1 else "one pass · ")
        + f"enqueue-only rounds: {cfg.enqueue_clients} clients; end-to-end rounds: "
        "as many enqueue clients as workers · "
        f"gunicorn -w {meta['gunicorn_workers']} (sync) · total {meta['seconds']:.0f}s",
        "",
        "Only ratios within this one run mean anything: the machine is small and shared.",
    ]
    # A figure whose round failed its correctness check is marked, not hidden.
    failed = failed_figures(cfg, checks)
    lines += _table(COLUMNS, rows(cfg), metrics, failed)
    if any(v is not None for _, values in ratio_rows for v in values.values()):
        lines += [
            "",
            "| Ratio | " + " | ".join(h for _, h in QUEUELOG_COLUMNS) + " |",
            "|---|" + "---:|" * len(QUEUELOG_COLUMNS),
        ]
        for label, values in ratio_rows:
            lines.append(f"| {label} | " + " | ".join(_fmt(values.get(c), "×") for c, _ in QUEUELOG_COLUMNS) + " |")
    worker_table = _table(worker_report.WORKER_COLUMNS, worker_report.rows(cfg), metrics, failed)
    if worker_table:
        lines += [
            "",
            "## Workers as users run them",
            "",
            f"queuelog under gunicorn --workers {meta['gunicorn_workers']} "
            f"--threads {meta.get('production_threads')} (the README's production command); "
            '"N at once": queuelog-worker --concurrency N, huey_consumer -w N threads, N rq worker '
            "processes.",
        ] + worker_table
        lines += ["", "Targets (issue #14):"] + [t.line() for t in target_rows]
    own = [c for c in checks if c["target"] in OWN_COLUMNS]
    others = [c for c in checks if c["target"] not in OWN_COLUMNS]
    lines += [
        "",
        "Correctness (every job completed exactly once; ✗ marks a figure from a failed round):",
        f"- queuelog and queuelog-worker: {sum(c['ok'] for c in own)}/{len(own)} checks passed "
        "(these alone decide the exit status)",
        f"- peers and ceiling: {sum(c['ok'] for c in others)}/{len(others)} checks passed",
    ]
    lines += [f"- FAILED {c['target']}: {c['what']}: {c['detail']}" for c in checks if not c["ok"]]
    notes = notes + [_sample_note(cfg, metrics)]
    lines += ["", "Notes:"] + [f"- {n}" for n in notes if n]
    return "\n".join(lines) + "\n"


def _table(
    columns: list[tuple[str, str]],
    table_rows: list[tuple[str, str, str]],
    metrics: dict[str, dict],
    failed: set[tuple[str, str]],
) -> list[str]:
    """A Markdown table of the rows with any figure (none: no lines at all)."""
    body = []
    for key, label, unit in table_rows:
        cells = [
            _fmt(metrics.get(col, {}).get(key), unit) + (f" {FAILED}" if (col, key) in failed else "")
            for col, _ in columns
        ]
        if all(c.startswith("–") for c in cells):
            continue
        body.append(f"| {label} | {unit} | " + " | ".join(cells) + " |")
    if not body:
        return []
    return [
        "",
        "| What | Unit | " + " | ".join(h for _, h in columns) + " |",
        "|---|---|" + "---:|" * len(columns),
        *body,
    ]


def _sample_note(cfg: Config, metrics: dict[str, dict]) -> str | None:
    """How many claims each latency figure rests on (the probe is time-capped)."""
    parts = []
    for col, header in QUEUELOG_COLUMNS:
        counts = [
            f"{n:,}: {metrics[col][f'claim_samples_{n}']}"
            for n in cfg.fills
            if f"claim_samples_{n}" in metrics.get(col, {})
        ]
        if counts:
            parts.append(f"{header} " + ", ".join(counts))
    if not parts:
        return None
    return (
        f"Claim latency samples per pending level (asked for {cfg.latency_samples}, "
        f"capped at {cfg.latency_budget_s:.0f}s per level): " + "; ".join(parts) + "."
    )


def write(out_dir: Path, cfg: Config, meta: dict, metrics: dict, checks: list[dict], notes: list[str]) -> str:
    """Write ``bench.md`` and ``bench.json`` into ``out_dir``; return the Markdown."""
    failed = failed_figures(cfg, checks)
    ratio_rows = ratios(cfg, metrics, failed)
    target_rows = worker_report.targets(cfg, metrics, failed, _ratio)
    text = markdown(cfg, meta, metrics, ratio_rows, target_rows, checks, notes)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "bench.md").write_text(text)
    payload = {
        "meta": meta,
        "config": vars(cfg),
        "metrics": metrics,
        "ratios": {label: values for label, values in ratio_rows},
        "targets": [t.as_dict() for t in target_rows],
        "checks": checks,
        "notes": notes,
    }
    (out_dir / "bench.json").write_text(json.dumps(payload, indent=2, default=str) + "\n")
    return text

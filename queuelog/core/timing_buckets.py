"""The fixed histogram buckets of wait and run times: log-spaced, each √2 times as wide as the one before.

Bucket 1 holds times up to 1 ms, bucket k up to 2^((k-1)/2) ms, the last (OVERFLOW) anything past about
70 minutes. A percentile read from the counts is the upper edge of the bucket it falls in, so it is at
most 41 % above the true value and never below it. Bucket 0 is not a time: rollups use it for plain counts.
"""

from __future__ import annotations

import math
from datetime import timedelta

#: Buckets with an upper edge: 1 ms … 2^22 ms (about 70 minutes).
EDGES = 45
OVERFLOW = EDGES + 1
RESOLUTION = "each bucket √2 (×1.41) wider than the one before, from 1 ms to 70 min"


def bucket_of(elapsed: timedelta) -> int:
    """The bucket ``elapsed`` falls in (a negative time, from clocks apart, counts as none at all)."""
    ms = elapsed / timedelta(milliseconds=1)
    if ms <= 1:
        return 1
    index = 1 + math.ceil(2 * math.log2(ms) - 1e-9)
    return min(index, OVERFLOW)


def upper_edge(bucket: int) -> timedelta | None:
    """The longest time bucket ``bucket`` holds; None for the overflow bucket, which has no bound."""
    if bucket >= OVERFLOW:
        return None
    return timedelta(milliseconds=2 ** ((bucket - 1) / 2))


def percentile(counts: dict[int, int], fraction: float) -> int | None:
    """The bucket the ``fraction`` quantile falls in (the first whose running total reaches it); None when empty."""
    total = sum(counts.values())
    if total == 0:
        return None
    wanted = max(1, math.ceil(total * fraction))
    running = 0
    for bucket in sorted(counts):
        running += counts[bucket]
        if running >= wanted:
            return bucket
    return max(counts)

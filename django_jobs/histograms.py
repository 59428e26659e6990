"""Fixed log-scale histograms of durations, merged by adding counts (the charts' rollups).

A duration of ``ms`` milliseconds falls in bucket ``floor(4 * log2(ms))`` (below 1 ms: bucket
0; past ``MAX_BUCKET``: the last one): four buckets per doubling, so a percentile read back from
the buckets is within 9 % of the exact one (the geometric middle of a bucket is at most
2^(1/8) from either edge). The buckets are the same for every row, so the histograms of any
set of rows merge by adding their counts, and a percentile over a week is that of the week's
merged counts. Stored as JSON objects, ``{"bucket": count}``, holding only the buckets used.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

__all__ = [
    "MAX_BUCKET",
    "PER_DOUBLING",
    "bucket_of",
    "bucket_value",
    "histogram",
    "merge",
    "quantile",
    "quantiles",
]

PER_DOUBLING = 4
#: The last bucket: 2^30 ms (about 12 days) and longer.
MAX_BUCKET = PER_DOUBLING * 30

Histogram = dict[str, int]

#: Added before the floor, here and in the rollups' SQL: a duration on a bucket's edge (2 ms,
#: 4 ms...) falls in the bucket above whichever side computes its logarithm.
EDGE = 1e-9


def bucket_of(ms: float) -> int:
    """The bucket of a duration in milliseconds (the SQL of the rollups computes the same)."""
    if not ms >= 1.0:  # NaN and below 1 ms too
        return 0
    return min(MAX_BUCKET, math.floor(math.log(ms) * (PER_DOUBLING / math.log(2)) + EDGE))


def bucket_value(bucket: int) -> float:
    """The milliseconds a bucket stands for: its geometric middle."""
    return float(2 ** ((bucket + 0.5) / PER_DOUBLING))


_VALUES = {str(bucket): bucket_value(bucket) for bucket in range(MAX_BUCKET + 1)}


def histogram(values_ms: Iterable[float]) -> Histogram:
    """The histogram of these durations (milliseconds)."""
    counts: Histogram = {}
    for ms in values_ms:
        key = str(bucket_of(ms))
        counts[key] = counts.get(key, 0) + 1
    return counts


def merge(histograms: Iterable[Mapping[str, int]]) -> Histogram:
    """One histogram of all these: their counts added bucket by bucket."""
    total: Histogram = {}
    get = total.get
    for counts in histograms:
        for key, n in counts.items():
            total[key] = get(key, 0) + n
    return total


def quantile(counts: Mapping[str, int], q: float) -> float | None:
    """The ``q`` quantile (0 < q <= 1) in milliseconds, nearest rank; None for no values."""
    return quantiles(counts, (q,))[0]


def quantiles(counts: Mapping[str, int], qs: Sequence[float]) -> list[float | None]:
    """The ``qs`` quantiles (each 0 < q <= 1, ascending) in milliseconds, nearest rank, in one
    pass over the buckets; None for each when there is no value."""
    for q in qs:
        if not 0.0 < q <= 1.0:
            raise ValueError(f"q={q!r} must be above 0 and at most 1.")
    keys = sorted((key for key, n in counts.items() if n > 0), key=int)
    total = sum(counts[key] for key in keys)
    if not total:
        return [None] * len(qs)
    found: list[float | None] = []
    at, seen, key = 0, 0, "0"
    for q in qs:
        rank = max(1, math.ceil(q * total))
        while seen < rank:
            key = keys[at]
            at += 1
            seen += counts[key]
        found.append(_VALUES.get(key) or bucket_value(int(key)))
    return found

"""The broker's own timings, quoted (Java, warm JIT), not measured by rmqfilter.

One home for the figures the project's issues quote from the broker: the benchmarks
(``bench/bench_selector.py``, ``bench/report.py``) put ours beside them, and
``rmqfilter cost`` prints them beside its measurement of each group's selector
(docs/cost.md). Every use labels them *quoted*.
"""
from __future__ import annotations

__all__ = ["BROKER_BLOOM_POSITIONS_NS", "BROKER_EVALUATE_NS"]

#: Selector text -> the broker's nanoseconds per ``evaluate`` of that selector on one message.
BROKER_EVALUATE_NS: dict[str, int] = {
    "a > 5": 14,
    "TAGS in ('A','B','C')": 15,
    "(a > 5 AND b < 10) OR (c = 'x' AND d >= 2) OR (e <> 'y' AND f <= 100)": 116,
    "a BETWEEN 1 AND 10": 27,
    "g IS NULL": 4,
    "s CONTAINS 'ell' AND s STARTSWITH 'he'": 23,
    "p > 3.5": 25,
}
#: The broker's nanoseconds per key for Bloom bit positions (approximate, "~100 ns").
BROKER_BLOOM_POSITIONS_NS = 100

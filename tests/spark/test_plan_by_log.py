"""A read of a store in object storage packed by CommitLog stretch (pyspark_udfs._plan.pack_by_log,
docs/spark.md#partitions): as many partitions as the queue-order packing, of the same shares, each
holding the units of one stretch of the log from every queue."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from pyspark_udfs._plan import pack_by_log, pack_ranges


def _store(seed: int, queues: int, units: int):
    """Queues' units interleaved over one CommitLog at random: ``(ranges, offsets_of, log range)``."""
    rng = np.random.default_rng(seed)
    owner = rng.integers(0, queues, units)  # which queue each record of the log is dispatched to
    sizes = rng.integers(100, 5000, units)
    offsets = 1000 + np.concatenate([[0], np.cumsum(sizes)[:-1]])
    by_queue = {q: offsets[owner == q] for q in range(queues)}
    ranges = [("T", q, 0, len(o)) for q, o in by_queue.items() if len(o)]
    return ranges, (lambda r: by_queue[r[1]][r[2]:r[3]]), (1000, int(offsets[-1] + sizes[-1]))


@pytest.mark.parametrize("seed, queues, units, size", [
    (1, 4, 20_000, 7_000), (2, 16, 50_000, 12_345), (3, 1, 9_000, 1_000), (4, 3, 5_000, 5_000), (5, 7, 3_001, 3_000),
])
def test_each_partition_is_one_stretch_of_the_log_in_equal_shares(seed, queues, units, size):
    ranges, offsets_of, log = _store(seed, queues, units)
    groups = pack_by_log(ranges, size, offsets_of, log)
    assert [sum(e - s for _, _, s, e in g) for g in groups] == [
        sum(e - s for _, _, s, e in g) for g in pack_ranges(ranges, size)]
    # every unit once
    covered = sorted((q, o) for g in groups for _, q, s, e in g for o in range(s, e))
    assert covered == sorted((q, o) for _, q, s, e in ranges for o in range(s, e))
    # each partition's records lie before the next partition's: its own stretch of the log
    spans = [(min(int(offsets_of(r).min()) for r in g), max(int(offsets_of(r).max()) for r in g)) for g in groups]
    assert all(a[1] < b[0] for a, b in itertools.pairwise(spans))
    # a queue's ranges keep its order inside a partition
    for g in groups:
        for q in {q for _, q, _, _ in g}:
            mine = [(s, e) for _, qq, s, e in g if qq == q]
            assert all(a[1] <= b[0] for a, b in itertools.pairwise(mine))


def test_a_read_of_one_share_or_none_is_packed_as_before():
    ranges, offsets_of, log = _store(9, 4, 1_000)
    assert pack_by_log(ranges, 10_000, offsets_of, log) == pack_ranges(ranges, 10_000)
    assert pack_by_log([], 100, offsets_of, log) == [] == pack_by_log([("T", 0, 5, 5)], 100, offsets_of, log)

"""The records of a filter-cost report (:mod:`cq.analyses.cost`): the groups asked about, one pass's
tally over a store's units, each group's and each broker's cost, the report, and the error of a
store that has no ext units to measure. docs/cost.md describes every field.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..tags import EXPRESSION_TYPE_SQL92

__all__ = [
    "BrokerCost",
    "CostGroup",
    "CostReport",
    "GroupCost",
    "NoExtUnitsError",
    "StorePass",
    "Tally",
]


class NoExtUnitsError(ValueError):
    """The topic has no ConsumeQueueExt units, so the store's bitmap cannot be evaluated.

    ``report`` holds the layer-2-only costs (and the in-memory replay) all the same.
    """

    def __init__(self, topic: str, root: str, report: CostReport) -> None:
        self.topic = topic
        self.report = report
        super().__init__(
            f"topic {topic!r} of store {root} has no ConsumeQueueExt units (enableConsumeQueueExt was off): "
            "the broker keeps no bitmap for it, so the bitmap cannot be evaluated on this store; "
            "the report gives layer-2-only costs (every unit evaluated on pull) and the in-memory replay")


@dataclass(frozen=True)
class CostGroup:
    """A group to report on or to count as registered, given explicitly.

    Attributes
    ----------
    group : str
    expression : str
        SQL92 selector, or a tag subscription (``"TagA || TagB"``) when ``expression_type`` is ``"TAG"``.
    expression_type : {"SQL92", "TAG"}
    born_time : int
        ``bornTime`` (ms) of a SQL92 group's filter data: ext bitmaps of messages stored at or
        before it are not trusted (default 0: registered before every message).
    registered : bool
        A SQL92 group registered on the topic: the dispatcher evaluates it for every message.
    bloom_data : bloom.BloomFilterData, optional
        Persisted bit positions (default: generated from ``"{group}#{topic}"``).
    """

    group: str
    expression: str
    expression_type: str = EXPRESSION_TYPE_SQL92
    born_time: int = 0
    registered: bool = True
    bloom_data: Any = None

    @property
    def is_sql(self) -> bool:
        return self.expression_type == EXPRESSION_TYPE_SQL92


@dataclass
class Tally:
    """Counts of one pass over some of a topic's units; tallies of disjoint ranges add up.

    Per-group arrays follow ``groups`` (the reported groups then the other registered ones).
    """

    groups: list[str]
    registered: list[str]
    units: int = 0
    commit_log_missing: int = 0
    records: int = 0
    record_bytes: int = 0
    ext_units: int = 0
    ext_unit_bytes: int = 0
    ext_bitmap_bytes: int = 0
    ext_bitmaps: int = 0
    queues_without_ext: int = 0
    queues: int = 0
    passed_consume_queue: np.ndarray = None
    bloom_tested: np.ndarray = None
    bloom_false_positives: np.ndarray = None
    matched: np.ndarray = None
    delivered: np.ndarray = None
    client_filtered: np.ndarray = None
    passed_bytes: np.ndarray = None
    #: packed answers of the registered groups (one bit per group, TRUE = set) -> messages
    patterns: dict[bytes, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("passed_consume_queue", "bloom_tested", "bloom_false_positives", "matched", "delivered",
                     "client_filtered", "passed_bytes"):
            if getattr(self, name) is None:
                setattr(self, name, np.zeros(len(self.groups), dtype=np.int64))

    def widened(self, groups: list[str], registered: list[str]) -> Tally:
        """This tally over ``groups`` and ``registered`` (supersets of its own, in another order): a
        group it lacks counts nothing, and in the answer rows it is FALSE (the broker lacking it builds
        no bit of it into its bitmaps)."""
        out = Tally(list(groups), list(registered))
        for name in ("units", "commit_log_missing", "records", "record_bytes", "ext_units", "ext_unit_bytes",
                     "ext_bitmap_bytes", "ext_bitmaps", "queues_without_ext", "queues"):
            setattr(out, name, getattr(self, name))
        at = np.array([groups.index(g) for g in self.groups], dtype=np.int64)
        for name in ("passed_consume_queue", "bloom_tested", "bloom_false_positives", "matched", "delivered",
                     "client_filtered", "passed_bytes"):
            getattr(out, name)[at] = getattr(self, name)
        where = [registered.index(g) for g in self.registered]
        for key, count in self.patterns.items():
            bits = np.unpackbits(np.frombuffer(key, dtype=np.uint8), count=len(self.registered)).astype(bool)
            row = np.zeros(len(registered), dtype=bool)
            row[where] = bits
            wide = np.packbits(row).tobytes()
            out.patterns[wide] = out.patterns.get(wide, 0) + count
        return out

    def add(self, other: Tally) -> Tally:
        """Add ``other`` (a tally of other units of the same topic and groups) into this one."""
        if other.groups != self.groups or other.registered != self.registered:
            raise ValueError("tallies of different groups do not add up")
        for name in ("units", "commit_log_missing", "records", "record_bytes", "ext_units", "ext_unit_bytes",
                     "ext_bitmap_bytes", "ext_bitmaps", "queues_without_ext", "queues"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in ("passed_consume_queue", "bloom_tested", "bloom_false_positives", "matched", "delivered",
                     "client_filtered", "passed_bytes"):
            getattr(self, name).__iadd__(getattr(other, name))
        for key, count in other.patterns.items():
            self.patterns[key] = self.patterns.get(key, 0) + count
        return self


@dataclass
class GroupCost:
    """One group's row of the report (every number is documented in docs/cost.md)."""

    group: str
    expression_type: str
    expression: str
    registered: bool
    born_time: int
    units: int
    passed_consume_queue: int
    bloom_tested: int
    bloom_false_positives: int
    delivered: int
    client_filtered: int
    evaluations_without_bitmap: int
    evaluations_with_bitmap: int | None
    commit_log_reads_without_bitmap: int
    commit_log_reads_with_bitmap: int | None
    commit_log_bytes_without_bitmap: int
    commit_log_bytes_with_bitmap: int | None
    ns_per_evaluation: float | None
    quoted_java_ns_per_evaluation: int | None
    cpu_ms_without_bitmap: float | None
    cpu_ms_with_bitmap: float | None


@dataclass
class BrokerCost:
    """One broker's part of a report over several stores (docs/cost.md#clusters): its own rows."""

    broker: str
    store: str
    bitmap_available: bool
    messages: int
    units: int
    commit_log_missing: int
    registered_groups: list[str]
    groups: list[GroupCost]
    #: groups of the report this broker does not have (not registered on it): it counts nothing for them
    missing_groups: list[str] = field(default_factory=list)


@dataclass
class CostReport:
    """The filtering-cost report of one topic (:func:`filter_cost`); over several stores, the
    counts are the sums over the brokers and :attr:`brokers` holds each broker's rows."""

    store: str
    topic: str
    bitmap_available: bool
    bloom: dict
    messages: int
    units: int
    commit_log_missing: int
    registered_groups: list[str]
    dispatch_evaluations: int | None
    dispatch_cpu_ms: float | None
    ext: dict
    groups: list[GroupCost]
    fp_by_groups: list[dict]
    fp_by_config: list[dict]
    fp_target: float | None
    fp_target_choice: dict | None
    verdict: dict
    measurement: dict
    quoted: dict
    seconds: float = 0.0
    #: a report over several stores (a cluster's brokers): each broker holding the topic, in order
    brokers: list[BrokerCost] = field(default_factory=list)

    def to_dict(self) -> dict:
        """A JSON-ready dict (the ``--json`` document)."""
        return asdict(self)

    def group(self, name: str) -> GroupCost:
        """The row of group ``name``."""
        for g in self.groups:
            if g.group == name:
                return g
        raise KeyError(name)


# ------------------------------------------------------------------ the report
@dataclass
class StorePass:
    """One store's pass over a topic (:func:`filter_cost` per broker, or its Spark variant): what
    :func:`finish_cluster_report` turns into the report."""

    root: str
    reported: list[CostGroup]
    registered: list[CostGroup]
    tally: Tally
    ns_per_evaluation: dict[str, float]
    timed_messages: int

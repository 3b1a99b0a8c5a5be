"""The ``rocketmq`` data source's group filter over a slice (:class:`_GroupFilter`) and the presence test of a
slice's records (:func:`_in_commit_log`): the broker's path, :func:`cq.store.decide.decide_units`' (what
``Store.consume`` runs), applied to a slice's unit columns. Part of the executor side
(:mod:`pyspark_udfs._reader`)."""
from __future__ import annotations

import logging

import numpy as np

import cq
from cq.filter.layers import Layers
from cq.store.decide import UnitDecisions, decide_records, decide_units, decodes_once, records_present
from pyspark_udfs._reader_skips import Skips

_LOG = logging.getLogger("rmqfilter.datasource")


def _cut(part) -> cq.StoreCut | None:
    """The CommitLog range of the slice's cut (None for a slice planned without one)."""
    if getattr(part, "commit_log_end", None) is None:
        return None
    return cq.StoreCut(part.commit_log_min, part.commit_log_end)


def _in_commit_log(store, offsets: np.ndarray, sizes: np.ndarray, part=None, tier=None) -> np.ndarray:
    """Units whose record is inside the cut's CommitLog range, as ``cq.Store.consume`` decides.

    Records below the first file were deleted and records past the recovered
    end were never completed; the broker skips their units (docs/live.md). ``tier``: the units of a range the
    broker serves from its tier, whose records lie in the tier's flat CommitLog (docs/reading.md#tiered-storage).
    """
    if tier is not None:
        present = records_present(tier.commit_log, offsets, sizes)
    else:
        present = store.records_present(offsets, sizes, _cut(part))
    _warn_missing(part, len(present) - int(np.count_nonzero(present)))
    return present


def _warn_missing(part, missing: int) -> None:
    """Say that ``missing`` units of the slice ``part`` were skipped for their records (none: nothing)."""
    if missing and part is not None:  # counted, as Store.consume counts them (stats.commit_log_missing)
        _LOG.warning("rocketmq: %d unit(s) of %s queue %s in offsets [%s, %s) skipped: their CommitLog records are "
                     "gone (expired by the broker since the read was planned) or past the end of the data "
                     "(commit_log_missing)", missing, part.topic, part.queue_id, part.start, part.end)


class _GroupFilter:
    """The filter ``cq.Store.make_filter`` builds for the group, applied to a slice of units."""

    def __init__(self, store, options, topic: str, part=None, tier=None) -> None:
        self.store = store
        self.part = part
        # a range the broker serves from its tier: its flat CommitLog, no ext (docs/reading.md#tiered-storage)
        self.tier = tier
        self.log = tier.commit_log if tier is not None else store.commit_log
        self.filter = store.make_filter(topic, options.group, sql=options.sql, tags=options.tags,
                                        born_time=options.born_time, bloom_data=options.bloom_data)
        self.layers = Layers(self.filter)
        self.layer2_in_spark = options.layer2 == "spark"
        if self.layer2_in_spark and not self.layers.plain_sql:
            # Only a plain SQL92 filter's layer 2 is the selector alone (and its client check keeps all).
            raise ValueError(f"rocketmq option layer2=spark: the filter of group {options.group!r} on topic "
                             f"{topic!r} is a {type(self.filter).__name__}, not a plain SQL92 filter")

    def decide(self, units, tags_code, known, ext_batch, candidates, skips: Skips | None = None,
               queue_offsets: np.ndarray | None = None, *, layer2: bool = True) -> UnitDecisions:
        """The broker's path over the slice's candidate units (:func:`cq.store.decide.decide_units`): layer 1
        on every candidate, layer 2 and the client's re-check only where layer 1 passed and the record is
        present, as the broker does.

        ``units`` maps the ConsumeQueue fields to the slice's columns
        (:meth:`cq.ConsumeQueue.read_columns`).

        Layer 2 needs only the records' properties (or tags), gathered in one batch call.
        A record that cannot be decoded raises, or with ``skips`` enabled marks
        its unit ``skipped`` and records it there. With ``layer2=False`` (or ``layer2=spark``)
        only layer 1 runs: ``reached`` marks the records layer 2 is to read (the caller decides
        them with :meth:`layer2_rows` or :meth:`delivered`).
        """
        offsets = units["commit_log_offset"]
        # presence (and, from a bucket, the records' fetch) where layer 1 passed only, as the broker's
        # (cq.store.decide.decide_units); the missing counted as Store.consume counts them
        d = decide_units(self.layers, self.log, offsets, units["size"], tags_code, known=known,
                         ext_batch=ext_batch, candidates=candidates, layer2=False,
                         cut=None if self.tier is not None else _cut(self.part))
        _warn_missing(self.part, int(np.count_nonzero(d.consume_queue & ~d.present)))
        if self.layer2_in_spark or not layer2:
            # Layer 2 comes later (Spark's, on the properties column, or the caller's, batch by batch):
            # the reader only says which records it reads.
            return d
        return self.layer2_rows(d, offsets, np.flatnonzero(d.reached), skips, queue_offsets)

    def layer2_rows(self, d: UnitDecisions, offsets, rows: np.ndarray, skips: Skips | None,
                    queue_offsets: np.ndarray | None) -> UnitDecisions:
        """Layer 2 and the client check on the records of units ``rows`` (``offsets``: every unit's
        CommitLog offset), filling ``d`` (:func:`cq.store.decide.decide_records`); the records it cannot
        decode are recorded in ``skips`` (``on_corrupt="skip"``)."""
        before = len(d.errors)
        decide_records(self.layers, self.log, d, rows, offsets, skip=skips is not None and skips.enabled)
        if len(d.errors) > before:
            bad, errors = zip(*d.errors[before:])
            skips.add_units(queue_offsets[np.asarray(bad, dtype=np.int64)], list(errors))
        return d

    def delivered(self, cols) -> np.ndarray:
        """Layer 2 and the client's re-check over decoded records (``cols`` holds :meth:`layer2_fields`)."""
        return self.layers.layer2_columns(cols) & self.layers.client_columns(cols)

    def fuses_layer2(self, options, record_fields: list[str]) -> bool:
        """Whether layer 2 should run on the output batches' own decode instead of a decode of its own.

        Each record layer 1 lets through is then decoded once, with every field the
        output needs, and the rows layer 2 rejects are dropped from the batch. That
        pays where layer 1 already knew the answer, so layer 2 keeps nearly every
        record: a tag code match, or a Bloom bitmap written for this group's
        expression (docs/filtering.md#expression-filter). Without a bitmap layer 1 passes
        everything, and decoding only the properties of records layer 2 then rejects
        costs less. Not with ``decisions`` (every unit is a row) or ``layer2=spark``.
        A batch with a record that does not decode whole goes the unfused way
        (:meth:`layer2_rows` first), so a record the group does not receive never
        fails the read, nor is it skipped, for its body.
        """
        fields = self.layer2_fields()
        if (options.decisions or self.layer2_in_spark or fields is None
                or not set(fields) <= set(record_fields)):
            return False
        return decodes_once(self.layers)

    def layer2_fields(self) -> list[str] | None:
        """Record fields layer 2 and the client check read (:meth:`cq.filter.layers.Layers.layer2_fields`)."""
        return self.layers.layer2_fields()

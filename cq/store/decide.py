"""The broker's path for a run of units, written once (docs/data-path.md#consume, docs/filtering.md).

Every unit a group pulls takes the same steps on the broker: layer 1 on the ConsumeQueue unit (its tags
code, or the ext unit's Bloom bitmap), then, where it passed, is the record still in the CommitLog
(:func:`records_present`), then layer 2 on the record's properties, then the client's exact tag
re-check (``PullAPIWrapper``); a custom message filter, if any, narrows what is left
(:func:`decide_custom`). The rules of each layer live in :class:`cq.filter.layers.Layers` (the custom
filter's call in :class:`cq.filter.custom.MessageFilter`); this module chains them.

:func:`decide_units` decides a run of units through those steps into a :class:`UnitDecisions` (one
bool per unit and step). :meth:`cq.Store.consume`, :meth:`cq.Store.batch_decisions`, the
``rocketmq`` data source, :func:`cq.analyses.cost.tally_range` and :func:`cq.why` all decide through
it, and ``consume`` and the data source run the custom filter through :func:`decide_custom`, so their
answers cannot drift apart. :func:`decodes_once` is the one rule for when a reader decodes
each record whole once (layer 2, the re-check and the output from the same decode) instead of
decoding the properties for layer 2 first.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .. import format as fmt
from ..errors import StoreFileDeleted, StoreFormatError
from ..filter.custom import MessageFilter
from ..filter.layers import Layers, RetryPropertiesError
from ..readers.skipping import decode_skipping

__all__ = ["BatchDecisions", "UnitDecisions", "decide_custom", "decide_records", "decide_units", "decodes_once",
           "in_range", "records_present"]

class UnitDecisions:
    """The broker's decisions over a run of units, one bool per unit and step (:func:`decide_units`).

    For a BatchCQ queue (:meth:`cq.Store.batch_decisions`) a unit is a batch record and its decisions hold
    for every message of the batch (docs/reading.md#batchcq).

    Attributes
    ----------
    units : ndarray or None
        The units decided (for a BatchCQ queue, :data:`cq.format.BCQ_UNIT_DTYPE`'s fields), in queue order.
    consume_queue : ndarray
        Layer 1 passed (the unit's tags code, or its ext unit's Bloom bitmap).
    hits : ndarray
        Layer 1 found every one of the group's bits set in the unit's bitmap.
    present : ndarray
        The record is inside the cut's CommitLog range and still on disk.
    reached : ndarray
        Layer 1 passed and the record is present: layer 2 reads it.
    commit_log : ndarray or None
        Layer 2 passed (the selector on the record's properties; always for tags); None when layer 2
        was not run.
    delivered : ndarray or None
        Layer 2 and the client's tag re-check passed; None when the re-check was not run.
    skipped : ndarray
        Layer 2 could not decode the record (only when asked to skip); ``errors`` holds
        ``(unit index, StoreFormatError)`` of each.
    custom : ndarray or None
        The custom message filter kept the delivered message (:func:`decide_custom`); None when no
        custom filter ran on these units.
    filter_skipped : ndarray
        The custom filter failed on the delivered message and it was dropped (``on_filter_error="skip"``).
    """

    def __init__(self, units: np.ndarray | None, consume_queue: np.ndarray, present: np.ndarray,
                 commit_log: np.ndarray | None = None, *, hits: np.ndarray | None = None) -> None:
        n = len(consume_queue)
        self.units = units
        self.consume_queue = consume_queue
        self.hits = hits if hits is not None else np.zeros(n, dtype=bool)
        self.present = present
        self.reached = consume_queue & present
        self.commit_log = commit_log
        self.delivered: np.ndarray | None = None
        self.skipped = np.zeros(n, dtype=bool)
        self.errors: list[tuple[int, StoreFormatError]] = []
        self.custom: np.ndarray | None = None
        self.filter_skipped = np.zeros(n, dtype=bool)

    def __len__(self) -> int:
        return len(self.consume_queue)

    @property
    def messages(self) -> np.ndarray:
        """Messages per unit (a BatchCQ unit's batch size), int64."""
        return self.units["batch_size"].astype(np.int64)

    def count(self, stats) -> None:
        """Add these decisions of BatchCQ units to ``stats`` (a ``ConsumeStats``), each unit counted once per
        message of its batch: a BatchCQ's ``units_scanned`` counts messages (queue offsets), as a
        ConsumeQueue's units do."""
        n = self.messages
        stats.units_scanned += int(n.sum())
        stats.passed_consume_queue += int(n[self.consume_queue].sum())
        stats.commit_log_missing += int(n[self.consume_queue & ~self.present].sum())
        stats.passed_commit_log += int(n[self.commit_log].sum())


#: The name :meth:`cq.Store.batch_decisions` has always returned.
BatchDecisions = UnitDecisions


def in_range(offsets: np.ndarray, sizes: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Bool mask: the records ``[offset, offset + size)`` lie inside CommitLog range ``[lo, hi)`` (a cut's,
    docs/live.md). :func:`records_present` is this and the files still there; a reader that opens no
    CommitLog file asks this alone."""
    offsets = np.asarray(offsets, dtype=np.int64)
    return (offsets >= lo) & (offsets + np.asarray(sizes, dtype=np.int64) <= hi)


def records_present(log, offsets: np.ndarray, sizes: np.ndarray, cut=None) -> np.ndarray:
    """Bool mask: the records are inside the cut's CommitLog range and still on disk (the one presence test).

    ``cut`` is a :class:`cq.StoreCut` (None: the log's range now). The CommitLog files the records lie in
    are mapped now: a file the broker expired since the cut was taken moves ``min_offset`` (its records
    are deleted, as for the broker), and a file mapped stays readable (docs/live.md).
    """
    lo, hi = (cut.commit_log_min, cut.commit_log_end) if cut is not None else (log.min_offset, log.max_offset)
    offsets = np.asarray(offsets, dtype=np.int64)
    # a record below the first file listed now is gone, whatever the cut says: the broker expired
    # its file since the cut was taken, and the listing that dropped the file released its map
    present = in_range(offsets, sizes, max(lo, log.min_offset), hi)
    for _ in range(3):
        try:
            held = offsets[present]
            if len(held):
                log.hold_records(held, np.asarray(sizes, dtype=np.int64)[present])
            return present
        except StoreFileDeleted:
            log.refresh_files()
            present &= offsets >= log.min_offset
    return present


def decodes_once(layers: Layers) -> bool:
    """Whether the records layer 1 lets through are decoded whole once, layer 2, the client's re-check and
    the output all reading that decode, rather than their properties first for layer 2.

    That pays where layer 1 already nearly knew the answer (a tag code match, or a Bloom bitmap of the
    group's expression: :attr:`Layers.layer1_decides`), so layer 2 keeps nearly every record; without a
    bitmap layer 1 passes everything, and decoding only the properties of the records layer 2 then
    rejects costs less (docs/data-path.md#consume).
    """
    return layers.layer1_decides


def decide_units(layers: Layers, log, offsets: np.ndarray, sizes: np.ndarray, slots: np.ndarray, *, cut=None,
                 units: np.ndarray | None = None, ext=None, raw=None, known: np.ndarray | None = None,
                 ext_batch=None, candidates: np.ndarray | None = None, present: np.ndarray | None = None,
                 present_all: bool = False, stats=None, layer2: bool = True, client: bool = True,
                 skip: bool = False) -> UnitDecisions:
    """The broker's path for a run of units: layer 1, is the record present, layer 2, the client's re-check.

    Parameters
    ----------
    layers : cq.filter.layers.Layers
        The group's filter.
    log : cq.CommitLog
    offsets, sizes : ndarray
        Each unit's record (CommitLog offset and size).
    slots : ndarray
        Each unit's ``tags_code`` slot, for layer 1 (:meth:`Layers.layer1`, with ``ext``, ``raw``,
        ``known``, ``ext_batch`` and ``stats`` as there).
    cut : cq.StoreCut, optional
        The CommitLog range read (:func:`records_present`).
    units : ndarray, optional
        Kept as :attr:`UnitDecisions.units`.
    candidates : ndarray, optional
        Only these units are decided (layer 1 fails the others).
    present : ndarray, optional
        The presence of every unit's record, found already by the caller (it is not tested again).
    present_all : bool
        Test every unit's presence, not only where layer 1 passed (the default).
    layer2 : bool
        Run layer 2 (and the re-check) on the units that reached it; else :attr:`UnitDecisions.commit_log`
        stays None and the caller runs :func:`decide_records` itself.
    client : bool
        Run the client's tag re-check too (a BatchCQ's is each unwrapped message's, not the record's).
    skip : bool
        A record layer 2 cannot decode is marked skipped (its error kept) instead of raising.
    """
    passed, hits = layers.layer1(slots, ext=ext, raw=raw, known=known, ext_batch=ext_batch, stats=stats)
    if candidates is not None:
        passed = passed & candidates
    if present is None:
        if present_all:
            present = records_present(log, offsets, sizes, cut)
        else:
            present = np.zeros(len(passed), dtype=bool)
            rows = np.flatnonzero(passed)
            present[rows] = records_present(log, np.asarray(offsets)[rows], np.asarray(sizes)[rows], cut)
    d = UnitDecisions(units, passed, present, hits=hits)
    if layer2:
        decide_records(layers, log, d, np.flatnonzero(d.reached), offsets, skip=skip, client=client)
    return d


def decide_records(layers: Layers, log, d: UnitDecisions, rows: np.ndarray, offsets: np.ndarray, *,
                   skip: bool = False, client: bool = True, cols=None) -> UnitDecisions:
    """Layer 2 and (``client``) the client's re-check on the records of units ``rows`` of ``d`` (``offsets``:
    every unit's CommitLog offset), filling ``d``.

    ``cols``: the records of ``rows`` decoded whole already (:func:`decodes_once`), which both steps read;
    else the records' properties (or tags) are decoded here, nothing else: over columns where the filter
    can, else as property dicts (None where a record stores none, as the broker's). A record that cannot
    be decoded raises, or with ``skip`` marks its unit skipped (its error in ``d.errors``).
    """
    if d.commit_log is None:
        d.commit_log = np.zeros(len(d), dtype=bool)
    if client and d.delivered is None:
        d.delivered = np.zeros(len(d), dtype=bool)
    if not len(rows):
        return d
    offs = np.asarray(offsets)[rows].astype(np.int64, copy=False)
    good, errors, keep = None, [], None
    if cols is not None:
        layer2 = layers.layer2_records(log, offs, cols)
        keep = layers.client_columns(cols) if client else None
    elif not client:  # layer 2 alone: over the properties column where the filter can, else property dicts
        layer2, good, errors = decode_skipping(lambda o: layers.layer2_records(log, o), offs, skip)
    else:
        layer2, fields = None, layers.layer2_fields()
        if fields is not None:
            got, good, errors = decode_skipping(lambda o: log.decode_columns(o, fields), offs, skip)
            try:
                layer2 = layers.layer2_columns(got)
            except (ImportError, TypeError):
                pass  # no pyarrow, or a selector without an Arrow evaluator: property dicts
            else:
                keep = layers.client_columns(got)
        if layer2 is None:  # a filter that decides record by record
            kept = offs[good] if errors else offs
            props, ok, more = decode_skipping(lambda o: log.gather_properties(o, absent_as_none=True), kept, skip)
            if more:  # (only when the properties were not decoded as columns first)
                good, errors, kept = ok, more, kept[ok]
            layer2 = _layer2_dicts(layers, log, kept, props)
            keep = layers.client_tags([p.get(fmt.PROPERTY_TAGS) if p is not None else None for p in props])
    if errors:
        bad = rows[~good]
        d.skipped[bad] = True
        d.errors += list(zip(bad.tolist(), errors))
        rows = rows[good]
    d.commit_log[rows] = layer2
    if client:
        d.delivered[rows] = layer2 & keep
    return d


def decide_custom(custom: MessageFilter, n: int, *, messages: Callable[[slice], Sequence] | None = None,
                  batch: Callable[[slice], object] | None = None,
                  where: Callable[[int], tuple[str, int, int]] | None = None, chunk: int | None = None,
                  d: UnitDecisions | None = None, rows: np.ndarray | None = None,
                  stats=None) -> tuple[np.ndarray, np.ndarray]:
    """The last step of the path: the custom message filter on ``n`` rows the client's re-check delivered
    (docs/custom-filters.md); ``(kept, skipped)``, bool arrays of ``n`` (``skipped``: the filter failed on
    the row, ``on_filter_error="skip"``; with ``"fail"`` a :class:`cq.FilterError` names the message).

    Parameters
    ----------
    custom : cq.filter.custom.MessageFilter
    n : int
        Rows to decide.
    messages : callable(slice) -> sequence of cq.Message, optional
        The messages of rows ``slice`` (a per-message filter gets them; a batch filter too when ``batch``
        is not given, as one ``RecordBatch`` built from them).
    batch : callable(slice) -> pyarrow.RecordBatch, optional
        For a batch filter: the ``RecordBatch`` of rows ``slice`` (:data:`cq.filter.custom.MESSAGE_COLUMNS`),
        with ``where(row)`` the ``(topic, queue id, queue offset)`` of a row, naming the batch's first and
        last message in an error.
    chunk : int, optional
        Call the filter on runs of at most this many rows (default: all ``n`` at once).
    d, rows : UnitDecisions and unit indices, optional
        Record the answer on ``d``: :attr:`UnitDecisions.custom` and ``filter_skipped`` of units ``rows``
        (row ``i`` is unit ``rows[i]``).
    stats : cq.ConsumeStats, optional
        Count ``filter_skipped`` and ``filter_rejected`` (kept by no error and rejected by the filter).
    """
    kept = np.zeros(n, dtype=bool)
    skipped = np.zeros(n, dtype=bool)
    step = chunk or max(n, 1)
    for start in range(0, n, step):
        run = slice(start, min(n, start + step))
        if custom.batch and batch is not None:
            kept[run], skipped[run] = custom.apply_record_batch(batch(run), where(run.start), where(run.stop - 1))
        else:
            kept[run], skipped[run] = custom.apply(messages(run))
    if d is not None:
        if d.custom is None:
            d.custom = np.zeros(len(d), dtype=bool)
        d.custom[rows] = kept
        d.filter_skipped[rows] = skipped
    if stats is not None:
        stats.filter_skipped += int(skipped.sum())
        stats.filter_rejected += int((~kept & ~skipped).sum())
    return kept, skipped


def _layer2_dicts(layers: Layers, log, offs: np.ndarray, props) -> np.ndarray:
    """Layer 2 over property dicts; a retry record without properties fails as the broker's pull does,
    naming the CommitLog file and byte (:meth:`Layers.layer2_records`, docs/filtering.md#retry-filter)."""
    try:
        return layers.layer2_properties(props)
    except RetryPropertiesError:
        bare = [i for i, p in enumerate(props) if p is None]
        if not bare:
            raise
        return layers.layer2_records(log, offs[bare[:1]])  # raises, naming the record

"""What a consumer group would receive (:meth:`cq.Store.consume`, docs/data-path.md#consume): each queue of the
cut read in batches, each batch decided by the broker's path (:mod:`cq.store.decide`), the records delivered
as :class:`cq.Message` objects, with counts per layer (:class:`ConsumeStats`)."""
from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, fields

import numpy as np

from .. import format as fmt
from ..errors import StoreFileDeleted, StoreFormatError, UnknownGroupError
from ..filter.custom import BATCH_RECORD_FIELDS, ON_FILTER_ERROR, as_message_filter, records_record_batch
from ..filter.layers import Layers, TagFilter
from ..filter.subscription import DEFAULT_BLOOM, group_filter
from ..kernels import _objects
from ..readers.batchcq import BatchConsumeQueue, expand_batch
from ..readers.commitlog import Message
from ..readers.compaction import CompactionConsumeQueue
from ..readers.consumequeue import ConsumeQueue
from ..readers.tiered import TieredStoreError
from .cuts import StoreCut
from .decide import BatchDecisions, UnitDecisions, decide_custom, decide_records, decide_units, decodes_once
from .tiered import READ_AHEAD_UNITS

#: Units handled per batch by :meth:`Store.consume`.
CONSUME_BATCH = 1 << 16
#: Layer 2 of :meth:`Store.consume` reads records in slices of at most this many records
#: spanning at most this many CommitLog bytes, and lets the kernel drop the pages read
#: after each slice (they stay in the page cache), so its RSS does not grow with the log.
_SLICE_RECORDS = 8192
_SLICE_SPAN = 64 << 20


def _slices(offs: np.ndarray, span: int, count: int) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` runs of ``offs`` of at most ``count`` items within ``span`` bytes of the first."""
    n = len(offs)
    if n == 0:
        return
    if n <= count and int(offs.max()) - int(offs.min()) <= span:
        yield 0, n
        return
    if (offs[1:] >= offs[:-1]).all():  # queue order: offsets ascend, so each run ends at a bisection
        start = 0
        while start < n:
            stop = min(start + count, int(np.searchsorted(offs, offs[start] + span, side="right")))
            yield start, stop
            start = stop
        return
    start, base = 0, int(offs[0])
    for i, off in enumerate(offs.tolist()):
        if i - start >= count or abs(off - base) > span:
            yield start, i
            start, base = i, off
    yield start, n


@dataclass
class ConsumeStats:
    """Counts per filter layer, filled in while :meth:`Store.consume` runs.

    Attributes
    ----------
    units_scanned : int
        ConsumeQueue units examined.
    passed_consume_queue : int
        Units that passed layer 1 (tags code / Bloom bitmap).
    passed_commit_log : int
        Messages that passed layer 2 (selector on the properties; always for tags).
    delivered : int
        Messages yielded (after the client's exact tag re-check).
    bloom_tested : int
        Units whose ext bitmap was actually tested in layer 1.
    bloom_pruned : int
        Units layer 1 dropped because a group bit was clear.
    bloom_false_positives : int
        Bitmap hits that layer 2 then rejected.
    client_filtered : int
        Messages the client's exact tag re-check dropped (hash collisions, no TAGS).
    commit_log_missing : int
        Units whose record is not in the CommitLog (removed, or past its end):
        skipped, as the broker skips them.
    ext_missing : int
        Units holding an ext address the ext file could not resolve.
    filter_rejected : int
        Messages both broker layers (and the client re-check) passed that the custom
        message filter rejected (docs/custom-filters.md).
    filter_skipped : int
        Messages not delivered because the custom filter failed on them
        (``on_filter_error="skip"``; the whole batch for a batch filter).
    """

    units_scanned: int = 0
    passed_consume_queue: int = 0
    passed_commit_log: int = 0
    delivered: int = 0
    bloom_tested: int = 0
    bloom_pruned: int = 0
    bloom_false_positives: int = 0
    client_filtered: int = 0
    commit_log_missing: int = 0
    ext_missing: int = 0
    filter_rejected: int = 0
    filter_skipped: int = 0

    def as_dict(self) -> dict[str, int]:
        """The counts as a plain dict."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


class ConsumeResult:
    """The messages a group would receive (an iterator), with :attr:`stats` per layer.

    Iterating drives the scan; ``stats`` is complete once the iterator is exhausted.
    """

    def __init__(self, gen_factory: Callable[[ConsumeStats], Iterator[Iterator[Message]]]) -> None:
        self.stats = ConsumeStats()
        # the factory yields chunks (iterators counting what they hand out): one C-level chain
        # hands the messages out, instead of a resumed generator per message
        self._messages = itertools.chain.from_iterable(gen_factory(self.stats))

    def __iter__(self) -> Iterator[Message]:
        return self._messages

    def __next__(self) -> Message:
        return next(self._messages)


class ConsumeRoom:
    """The :class:`cq.Store` methods that decide and deliver what a group receives."""

    def make_filter(self, topic: str, group: str, *, sql: str | None = None, tags: str | None = None,
                    bloom_filter=DEFAULT_BLOOM, born_time: int | None = None, bloom_data=None):
        """The filter :meth:`consume` uses: a :class:`SqlFilter` for ``sql``, a :class:`TagFilter` for
        ``tags``; neither: the group's registration in ``config/consumerFilter.json``
        (:meth:`registered_filter`: its expression, bornTime and bloom data, as the broker pulls
        with them), :class:`cq.UnknownGroupError` when there is none. A ``sql`` that is the group's
        registered expression, with no ``born_time`` or ``bloom_data`` given, is that registration's
        filter too (:meth:`registration_of`); another ``sql`` has bornTime ``born_time`` (default 0)
        (:func:`cq.filter.subscription.group_filter`)."""
        return group_filter(topic, group, lambda bf: self.registered_filter(topic, group, bloom_filter=bf), sql=sql,
                            tags=tags, bloom_filter=bloom_filter, born_time=born_time, bloom_data=bloom_data)

    def consume(self, topic: str, group: str, *, sql: str | None = None, tags: str | None = None,
                queue_ids: Iterable[int] | None = None, filter=None, bloom_filter=DEFAULT_BLOOM,
                born_time: int | None = None, verify_crc: bool | str = False,
                progress: Callable[[int, int], None] | None = None,
                ranges: Mapping[int, tuple[int, int | None]] | None = None,
                message_filter=None, on_filter_error: str = "fail", cut: StoreCut | None = None) -> ConsumeResult:
        """The messages consumer group ``group`` would receive from ``topic``, in queue order.

        Parameters
        ----------
        topic, group : str
        sql : str, optional
            A SQL92 selector: the group is taken as registered with the broker's
            default Bloom filter, so layer 1 prunes on ext bitmaps.
        tags : str, optional
            A tag subscription such as ``"TagA || TagB"`` (``"*"``: everything).
            Neither sql nor tags: the group's SQL92 registration in
            ``config/consumerFilter.json`` (expression, bornTime, bloom data);
            :class:`cq.UnknownGroupError` (a ValueError) when it has none.
        queue_ids : iterable of int, optional
            Queues to read (default: all, ascending).
        filter : TagFilter, SqlFilter or callable, optional
            A ready-made broker filter instead of sql/tags; or a custom message filter (any
            other callable), the same as ``message_filter=``.
        bloom_filter : bloom.BloomFilter, DEFAULT_BLOOM or NO_BLOOM
            For sql: the broker's Bloom filter (DEFAULT_BLOOM, ``"default"``: ``bloom.BloomFilter()``);
            NO_BLOOM (None) = no bloom data (layer 1 passes all).
        born_time : int, optional
            For sql: the filter's bornTime (ms). Default: the group's registered bornTime when
            ``sql`` is the expression it registered (the group's own answer), else 0.
        verify_crc : bool or {"body", "property"}
            Check the CRC of each delivered message (see :func:`cq.readers.commitlog.decode_message`).
        progress : callable(units_done, units_total), optional
            Called after each batch.
        ranges : mapping of queue id to (start, end), optional
            Read only queue offsets ``[start, end)`` of these queues (``end`` None: to the
            queue's end; clamped to the queue), e.g. from a group's committed offset.
        message_filter : callable, str or cq.filter.custom.MessageFilter, optional
            A custom filter run after both broker layers and the client re-check:
            ``fn(cq.Message) -> bool``, a :func:`cq.batch_filter` ``fn(pyarrow.RecordBatch) ->
            bool array``, or ``"package.module:function"`` (docs/custom-filters.md). With
            neither sql nor tags, the broker's layers are the group's registration if it has
            one, else ``"*"`` (the class-filter mode: they pass everything).
        on_filter_error : {"fail", "skip"}
            An exception in the custom filter raises :class:`cq.FilterError` naming the
            message and the filter (``fail``), or drops the message and counts it in
            ``stats.filter_skipped`` (``skip``).
        cut : StoreCut, optional
            Read this cut (from :meth:`cut`); by default one is taken now, when
            ``consume`` is called (refreshing first unless ``refresh="never"``).
            Queue offsets outside the cut are not read (docs/live.md).

        Returns
        -------
        ConsumeResult
            Iterator of :class:`cq.Message` (queue by queue, in queue-offset
            order) with ``.stats`` (:class:`ConsumeStats`).
        """
        if filter is not None and not hasattr(filter, "is_matched_by_consume_queue"):
            if message_filter is not None:
                raise ValueError("give the custom filter once: filter= (a callable) or message_filter=, not both")
            filter, message_filter = None, filter  # a callable, not a broker filter: the custom filter
        custom = as_message_filter(message_filter, on_filter_error)
        if on_filter_error not in ON_FILTER_ERROR:
            raise ValueError(f"on_filter_error must be fail or skip, got {on_filter_error!r}")
        if filter is not None:
            flt = filter
        elif custom is not None and sql is None and tags is None:
            try:  # the group's registration narrows as well, if it has one; else class-filter mode
                flt = self.make_filter(topic, group, bloom_filter=bloom_filter)
            except UnknownGroupError:
                flt = TagFilter("*")
        else:
            flt = self.make_filter(topic, group, sql=sql, tags=tags, bloom_filter=bloom_filter, born_time=born_time)
        qids = list(queue_ids) if queue_ids is not None else None
        if cut is None:
            # a store in a bucket: the queues' objects and the recovery walk's heads at once (docs/object-storage.md#costs)
            self.prefetch(topic, qids, ext=not Layers(flt).passes_all)
            cut = self.cut(topic, qids)
        if qids is None:
            qids = sorted(cut.ends(topic))

        def run(stats: ConsumeStats) -> Iterator[Iterator[Message]]:
            bounds = []
            for q in qids:
                r = cut.queue_range(topic, q)
                if r is None:
                    continue  # not in the cut: nothing of it is read
                lo, hi = r
                start, end = (ranges or {}).get(q, (None, None))
                lo = lo if start is None else max(lo, int(start))
                hi = hi if end is None else min(hi, int(end))
                if hi > lo:
                    bounds.append((q, (lo, hi)))
            total = sum(hi - lo for _, (lo, hi) in bounds)
            # a store in a bucket: the queues' objects layer 1 reads, many at once (docs/object-storage.md#costs)
            self._prefetch_queues([(topic, q) for q, _ in bounds], ext=not Layers(flt).passes_all)
            try:
                for q, b in bounds:
                    yield from self._consume_queue(topic, q, flt, stats, verify_crc, progress, total, cut, b,
                                                   custom)
            finally:
                self.release_records()

        return ConsumeResult(run)

    def _consume_queue(self, topic, queue_id, flt, stats, verify_crc, progress, total, cut, bounds,
                       custom=None):
        # pulls below the local minimum: from the tier (docs/reading.md#tiered-storage)
        for lo, hi, from_tier in self.tier_runs(topic, queue_id, cut.tier_range(topic, queue_id), *bounds, flt=flt,
                                                cut=cut):
            if from_tier:
                yield from self._consume_units(None, None, flt, stats, verify_crc, progress, total, None, (lo, hi),
                                               custom, tier=self.tier_queue(topic, queue_id))
            else:
                yield from self._consume_local(topic, queue_id, flt, stats, verify_crc, progress, total, cut,
                                               (lo, hi), custom)

    def _consume_local(self, topic, queue_id, flt, stats, verify_crc, progress, total, cut, bounds, custom=None):
        cqueue, ext = self._queue_readers(topic, queue_id)
        try:
            if cqueue.max_offset < bounds[1]:  # opened before the cut was taken (refresh="never" never is)
                cqueue.refresh()
                if ext is not None:
                    ext.refresh()
            if isinstance(cqueue, CompactionConsumeQueue):
                yield from self._consume_compacted(cqueue, flt, stats, verify_crc, progress, total, bounds, custom)
            elif isinstance(cqueue, BatchConsumeQueue):
                yield from self._consume_batches(cqueue, flt, stats, verify_crc, progress, total, cut, bounds, custom)
            else:
                yield from self._consume_units(cqueue, ext, flt, stats, verify_crc, progress, total, cut, bounds,
                                               custom)
        finally:
            self._release(topic, queue_id, cqueue, ext)

    def _layer2(self, layers: Layers, log, found: UnitDecisions, idx, offs, stats, verify_crc, custom=None,
                units=None, ext=None, sizes=None):
        """Layer 2 and the client's re-check (:func:`cq.store.decide.decide_records`) of the units ``idx`` of
        ``found`` (records at ``offs``, one slice), then what is delivered: in chunks, each an iterator counting
        its messages as it hands them out (a caller may stop early); ConsumeResult chains the chunks."""
        batch_custom = custom is not None and custom.batch
        cols = None  # the records decoded once
        if not verify_crc and not batch_custom and decodes_once(layers):
            # one decoder pass serves layer 2, the client's re-check and delivery: layer 1 nearly
            # decided, so most records are delivered (docs/data-path.md#consume); copied with a
            # read each, not faulted into the map (a queue's records lie far apart)
            cols = log.decode_columns(offs) if sizes is None else log.decode_copied(offs, sizes)
        # with a CRC check or a batch filter the re-check runs on what is read for them, below
        client = not (verify_crc or batch_custom)
        decide_records(layers, log, found, idx, units["commit_log_offset"], client=client, cols=cols)
        ok = found.commit_log[idx]
        stats.bloom_false_positives += int((found.hits[idx] & ~ok).sum())
        stats.passed_commit_log += int(np.count_nonzero(ok))
        if batch_custom:
            yield from self._deliver_batch_filtered(layers, log, idx[ok], offs[ok], stats, verify_crc, custom, units,
                                                    ext, found)
            return
        pending: list[Message] = []
        units_of = None  # the unit of each pending message, where known
        if verify_crc:  # record by record: the messages before a bad CRC are delivered before the error
            checked = self._client_checked(layers, (log.read_message(off, verify_crc=verify_crc)
                                                    for off in offs[ok].tolist()), stats)
            if custom is None:
                yield _objects.Delivered(checked, stats)
            else:
                pending = list(checked)
        else:
            delivered = found.delivered[idx]
            stats.client_filtered += int(np.count_nonzero(ok & ~delivered))
            rows = np.flatnonzero(delivered)
            if cols is None:  # layer 2 read the records' properties: decode those delivered
                msgs = log.read_messages(offs[rows])
                if custom is None:
                    yield _objects.Delivered(msgs, stats)
                else:
                    pending = msgs
            elif custom is None:  # each message built as it is handed out: one alive at a time
                yield _objects.Delivered.built(Message, cols.columns, *log.message_args(offs, rows), stats)
            else:
                pending = log.messages_from_columns(cols, offs, rows)
            units_of = idx[rows]  # the unit of each pending message
        if pending:
            yield _objects.Delivered(self._custom_kept(custom, pending, stats, found, units_of), stats)

    @staticmethod
    def _custom_kept(custom, msgs: list[Message], stats: ConsumeStats, found: UnitDecisions | None = None,
                     units_of: np.ndarray | None = None) -> list[Message]:
        """The messages of ``msgs`` the custom filter keeps (:func:`cq.store.decide.decide_custom`, counting
        those it skips and rejects; recorded on ``found`` for units ``units_of`` when given)."""
        keep, _ = decide_custom(custom, len(msgs), messages=msgs.__getitem__,
                                d=found if units_of is not None else None, rows=units_of, stats=stats)
        return [msg for msg, ok in zip(msgs, keep.tolist()) if ok]

    @staticmethod
    def _client_checked(layers: Layers, msgs: Iterable[Message], stats: ConsumeStats) -> Iterator[Message]:
        """The messages of ``msgs`` the client's tag re-check keeps, counting the others."""
        for msg in msgs:
            if layers.filter.is_matched_by_client(msg.tags):
                yield msg
            else:
                stats.client_filtered += 1

    @staticmethod
    def _deliver_batch_filtered(layers: Layers, log, idx, offs, stats, verify_crc, custom, units, ext, found=None):
        """The client re-check and a batch custom filter over the decoder's columns of the records at
        ``offs`` (units ``idx``), then the messages it keeps, decoded as :class:`Message` (only those).

        The filter's batch is the one the data source builds (:func:`cq.filter.custom.records_record_batch`),
        no Python object per row; the batch is the slice, as for the per-message path's messages.
        """
        checked = None
        if verify_crc:  # a bad CRC fails before any filter runs, as on the per-message path
            checked = [log.read_message(off, verify_crc=verify_crc) for off in offs.tolist()]
        records = log.decode_columns(offs, BATCH_RECORD_FIELDS)
        client = layers.client_columns(records)
        stats.client_filtered += int((~client).sum())
        rows = np.flatnonzero(client)
        if not len(rows):
            return
        slots = units["tags_code"][idx].astype(np.int64)
        has_ext = ext is not None and bool((slots <= fmt.MAX_ADDR).any())
        batch = records_record_batch(records, slots, ext.read_batch(slots) if has_ext else None)
        if len(rows) < len(records):
            batch = batch.take(rows)

        def where(i: int) -> tuple[str, int, int]:
            row = int(rows[i])
            return (records.value("topic", row), records.value("queue_id", row), records.value("queue_offset", row))

        # the custom filter narrows what both layers delivered (docs/custom-filters.md)
        keep, _ = decide_custom(custom, len(rows), batch=lambda _run: batch, where=where, d=found, rows=idx[rows],
                                stats=stats)
        kept = rows[keep]
        msgs = [checked[i] for i in kept.tolist()] if checked is not None else log.read_messages(offs[kept])
        yield _objects.Delivered(msgs, stats)

    def _consume_batches(self, cqueue: BatchConsumeQueue, flt, stats, verify_crc, progress, total, cut, bounds,
                         custom=None):
        """One queue of a BatchCQ topic (docs/reading.md#batchcq): the broker's two layers judge each
        unit by its batch record (its tags code, its own properties), then the client unwraps the
        record into its messages and re-checks each one's tag. Every batch holding a message of queue
        offsets ``bounds`` is read whole, as the broker serves a pull at an offset inside a batch; the
        counts are of messages, each message counted as its batch's unit was judged."""
        log = self.commit_log
        layers = Layers(flt)
        found = self._batch_decisions(cqueue, layers, cut, bounds)
        found.count(stats)
        offs = found.units["commit_log_offset"][found.commit_log].astype(np.int64)
        unwrapped = (msg for off in offs.tolist() for msg in expand_batch(log.read_message(off, verify_crc=verify_crc)))
        msgs = list(self._client_checked(layers, unwrapped, stats))
        if custom is not None and msgs:
            msgs = self._custom_kept(custom, msgs, stats)
        yield _objects.Delivered(msgs, stats)
        if progress is not None:
            progress(stats.units_scanned, total)

    def _consume_compacted(self, cqueue: CompactionConsumeQueue, flt, stats, verify_crc, progress, total, bounds,
                           custom=None):
        """One queue of a compaction topic (docs/reading.md#compaction-topics): the broker serves every
        unit of its compaction CQ in ``bounds`` from the compaction log, without its two layers; the
        client's tag re-check and a custom filter narrow what it received. ``units_scanned`` counts the
        compaction CQ's units (the queue offsets compaction removed are not read)."""
        with self.compaction_log(cqueue.topic, cqueue.queue_id) as log:
            found = self._compacted_decisions(cqueue, log, flt, bounds)
            units = found.units
            stats.units_scanned += len(units)
            stats.passed_consume_queue += len(units)
            stats.commit_log_missing += int(np.count_nonzero(~found.present))
            stats.passed_commit_log += int(np.count_nonzero(found.commit_log))
            offs = units["commit_log_offset"].astype(np.int64)
            if verify_crc:
                msgs = list(self._client_checked(Layers(flt, broker=False),
                                                 (log.read_message(off, verify_crc=verify_crc)
                                                  for off in offs[found.commit_log].tolist()), stats))
            else:
                stats.client_filtered += int(np.count_nonzero(found.commit_log & ~found.delivered))
                msgs = log.read_messages(offs[found.delivered])
            if custom is not None and msgs:
                msgs = self._custom_kept(custom, msgs, stats)
            yield _objects.Delivered(msgs, stats)
        if progress is not None:
            progress(stats.units_scanned, total)

    @staticmethod
    def _compacted_decisions(cqueue: CompactionConsumeQueue, log, flt, bounds, *, skip: bool = False) -> UnitDecisions:
        """The decisions over the units of queue offsets ``bounds`` of a compaction topic's queue, records
        in compaction log ``log`` (the one home of consume's, why's and the data source's): no broker
        layer (:class:`Layers` with ``broker=False``), a record present where a listed file of the log
        holds it, then the client's re-check (docs/reading.md#compaction-topics)."""
        units = cqueue.units_between(*bounds)
        offs = units["commit_log_offset"].astype(np.int64)
        index = log.file_indices(offs)
        present = (index >= 0) & (offs - log.file_starts[np.maximum(index, 0)] + units["size"] <= log.file_size)
        held = np.flatnonzero(present)
        if len(held):  # a record is its unit's: a compaction round replaces files of the same names
            got = log.decode_columns(offs[held], ["queue_offset"]).columns["queue_offset"]
            wrong = np.flatnonzero(np.asarray(got, dtype=np.int64) != units["base_offset"][held])
            if len(wrong):
                at = int(offs[held[wrong[0]]])
                start, path = log.files[int(index[held[wrong[0]]])]
                raise StoreFormatError(
                    f"compaction log record at position {at} has queue offset {int(got[wrong[0]])}, but its compaction "
                    f"CQ unit says {int(units['base_offset'][held[wrong[0]]])} (a compaction round replaced the files "
                    "while they were read: read again)", path, at - start)
        return decide_units(Layers(flt, broker=False), log, offs, units["size"], units["tags_code"].astype(np.int64),
                            units=units, present=present, skip=skip)

    def compacted_decisions(self, topic: str, queue_id: int, flt, start: int, end: int, *,
                            cut: StoreCut | None = None, skip: bool = False) -> UnitDecisions:
        """The broker's decisions over the units of compaction topic ``topic``'s queue ``queue_id`` in queue
        offsets ``[start, end)`` inside ``cut`` (default: one taken now), as :meth:`consume` makes them
        (docs/reading.md#compaction-topics): a :class:`UnitDecisions` whose ``units`` are the compaction
        CQ's (their ``commit_log_offset`` a compaction log position); read the records with
        :meth:`compaction_log`."""
        if cut is None:
            cut = self.cut(topic, [queue_id])
        r = cut.queue_range(topic, queue_id)
        lo, hi = (0, 0) if r is None else (max(r[0], int(start)), min(r[1], int(end)))
        with self.queue_readers(topic, queue_id, ext=False) as (cqueue, _):
            if not isinstance(cqueue, CompactionConsumeQueue):
                raise TypeError(f"topic {topic!r} is not a compaction topic")
            if cqueue.max_offset < hi:
                cqueue.refresh()
            with self.compaction_log(topic, queue_id) as log:
                return self._compacted_decisions(cqueue, log, flt, (lo, max(lo, hi)), skip=skip)

    def _batch_decisions(self, cqueue: BatchConsumeQueue, layers: Layers, cut, bounds, *, layer2: bool = True,
                         skip: bool = False) -> BatchDecisions:
        """The broker's two layers over the units holding a message of queue offsets ``bounds`` of a
        BatchCQ queue (the one home of both :meth:`consume` and the data source's reads of such a
        queue): layer 1 by the unit's tags code, layer 2 by the batch record's own properties, records
        no longer in the CommitLog or outside ``cut`` not reached. ``skip``: a record layer 2 cannot
        decode is marked skipped (its error kept) instead of raising."""
        log = self.commit_log
        if not log.files or log.files[-1][0] + log.file_size < cut.commit_log_end:
            log.refresh_files()
        units = cqueue.units_between(*bounds)
        return decide_units(layers, log, units["commit_log_offset"], units["size"], units["tags_code"].astype(np.int64),
                            cut=cut, units=units, present_all=True, layer2=layer2, client=False, skip=skip)

    def batch_decisions(self, topic: str, queue_id: int, flt, start: int, end: int, *,
                        cut: StoreCut | None = None, layer2: bool = True, skip: bool = False) -> BatchDecisions:
        """The broker's decisions over the units of BatchCQ queue ``queue_id`` holding a message of
        queue offsets ``[start, end)`` inside ``cut`` (default: one taken now), as :meth:`consume`
        makes them (docs/reading.md#batchcq): a :class:`BatchDecisions`, per unit, whose records the
        caller unwraps, applying the client's re-check to each message. ``layer2=False``: layer 1
        only (``commit_log`` None); ``skip``: a record layer 2 cannot decode is marked ``skipped``
        (with its error) instead of raising."""
        if cut is None:
            cut = self.cut(topic, [queue_id])
        r = cut.queue_range(topic, queue_id)
        lo, hi = (0, 0) if r is None else (max(r[0], int(start)), min(r[1], int(end)))
        with self.queue_readers(topic, queue_id, ext=False) as (cqueue, _):
            if not isinstance(cqueue, BatchConsumeQueue):
                raise TypeError(f"topic {topic!r} queue {queue_id} is not a BatchCQ queue")
            if hi <= lo:
                empty = cqueue.units[:0]
                return BatchDecisions(empty, np.zeros(0, bool), np.zeros(0, bool),
                                      np.zeros(0, bool) if layer2 else None)
            if cqueue.max_offset < hi:
                cqueue.refresh()
            return self._batch_decisions(cqueue, Layers(flt), cut, (lo, hi), layer2=layer2, skip=skip)

    def _raw_chunks(self, cqueue: ConsumeQueue, start: int, end: int) -> Iterator[tuple[int, memoryview]]:
        """``cqueue.raw_chunks`` over ``[start, end)``; a file the broker expired meanwhile moves the
        start past it (its units are below the queue's new minimum, as for the broker)."""
        q = start
        while q < end:
            try:
                for first, raw in cqueue.raw_chunks(q, end - q):
                    q = first + len(raw) // fmt.CQ_STORE_UNIT_SIZE
                    yield first, raw
                return
            except StoreFileDeleted:
                cqueue.refresh()
                if self.commit_log.files and self.commit_log.min_offset > 0:
                    cqueue.correct_min_offset(self.commit_log.min_offset)
                if cqueue.min_offset <= q:  # pragma: no cover - the file is gone, so the minimum moved
                    raise
                q = cqueue.min_offset

    def tier_and_local_decisions(self, topic: str, queue_id: int, flt, start: int, end: int,
                                 cut: StoreCut | None) -> tuple[np.ndarray, UnitDecisions, UnitDecisions]:
        """The broker's decisions over queue offsets ``[start, end)`` both ways: served from the tier (its
        flat files, no ext file) and from the local store (with its ext file). ``(offsets, tier, local)``,
        over the offsets both hold (docs/reading.md#tiered-storage)."""
        tier = self.tier_queue(topic, queue_id)
        layers = Layers(flt)
        lo, hi = max(start, tier.min_offset), min(end, tier.end_offset)
        with self.queue_readers(topic, queue_id) as (cqueue, ext):
            lo = max(lo, cqueue.min_offset)
            hi = max(lo, min(hi, cqueue.max_offset))
            here = cqueue.read(lo, hi - lo)
            there = tier.units(lo, hi)
            mine = decide_units(layers, self.commit_log, here["commit_log_offset"], here["size"], here["tags_code"],
                                cut=cut, ext=ext, present_all=True)
        theirs = decide_units(layers, tier.commit_log, there["commit_log_offset"], there["size"], there["tags_code"],
                              present_all=True)
        return np.arange(lo, hi, dtype=np.int64), theirs, mine

    def check_read_ahead(self, topic: str, queue_id: int, flt, local_min: int, end: int,
                         cut: StoreCut | None) -> None:
        """A pull served from the tier reads on past the local minimum, up to :data:`READ_AHEAD_UNITS` units
        from where it started, filtering there without bitmaps; which offsets a consumer gets that way depends
        on its pull batches. Where the group's filter gives the same messages from both (a tag filter always;
        a SQL92 filter unless a local bitmap drops what its selector takes) the answer is exact; otherwise
        :class:`cq.TieredStoreError` names the offsets (docs/reading.md#tiered-storage)."""
        offsets, tier, local = self.tier_and_local_decisions(topic, queue_id, flt, local_min,
                                                             min(end, local_min + READ_AHEAD_UNITS - 1), cut)
        differ = np.flatnonzero(tier.delivered != local.delivered)
        if len(differ):
            tq = self.tier_queue(topic, queue_id)
            raise TieredStoreError(
                f"queue {topic}/{queue_id}: offsets {offsets[differ][:5].tolist()} (of {len(differ)}) at or after "
                f"the local minimum {local_min} give the group other messages read from the tier (no bitmap) than "
                "from the local store (its bitmap), and a pull that starts below the local minimum reads them from "
                "the tier: what the consumer gets depends on its pull batches", tq.directory)

    def _consume_units(self, cqueue, ext, flt, stats, verify_crc, progress, total, cut, bounds,
                       custom=None, *, tier=None):
        """One queue's units ``bounds`` through the broker's path: from the local files, or (``tier``, a
        :class:`cq.TieredQueue`) from the tier's flat files, with no ext file and the tier's own CommitLog
        (docs/filtering.md#tiered-filter)."""
        if tier is not None:
            log, chunks = tier.commit_log, tier.raw_chunks(*bounds)
        else:
            log, chunks = self.commit_log, self._raw_chunks(cqueue, *bounds)
            if not log.files or log.files[-1][0] + log.file_size < cut.commit_log_end:
                log.refresh_files()
        layers = Layers(flt)
        expected = bounds[0]  # the next queue offset of the cut: one the chunks pass over went away
        for first, raw in chunks:
            if first > expected:  # below the queue's minimum now: the broker expired them (docs/live.md)
                stats.units_scanned += first - expected
                stats.commit_log_missing += first - expected
            expected = first + len(raw) // fmt.CQ_STORE_UNIT_SIZE
            for b in range(0, len(raw) // fmt.CQ_STORE_UNIT_SIZE, CONSUME_BATCH):
                chunk = raw[b * fmt.CQ_STORE_UNIT_SIZE:(b + CONSUME_BATCH) * fmt.CQ_STORE_UNIT_SIZE]
                units = np.frombuffer(chunk, dtype=fmt.CQ_UNIT_DTYPE)
                stats.units_scanned += len(units)
                # layer 1 and presence here; layer 2 and the re-check slice by slice (_layer2)
                found = decide_units(layers, log, units["commit_log_offset"], units["size"], units["tags_code"],
                                     cut=cut, ext=ext, raw=chunk, stats=stats, layer2=False)
                idx = np.flatnonzero(found.consume_queue).astype(np.int64)
                stats.passed_consume_queue += len(idx)
                stats.commit_log_missing += len(idx) - int(np.count_nonzero(found.present))
                idx = np.flatnonzero(found.reached).astype(np.int64)
                offs = units["commit_log_offset"][idx].astype(np.int64)
                # layer 2 in slices of nearby records, dropping the CommitLog pages read after
                # each (they stay in the page cache): RSS follows one slice, not the whole log
                kept_sizes = units["size"][idx].astype(np.int64)
                ends = offs + kept_sizes
                for a, b in _slices(offs, _SLICE_SPAN, _SLICE_RECORDS):
                    yield from self._layer2(layers, log, found, idx[a:b], offs[a:b], stats, verify_crc,
                                            custom, units, ext, kept_sizes[a:b])
                    log.drop_resident_range(int(offs[a:b].min()), int(ends[a:b].max()))
                if progress is not None:
                    progress(stats.units_scanned, total)
        if expected < bounds[1]:  # the queue's minimum moved past the rest of the cut's range
            stats.units_scanned += bounds[1] - expected
            stats.commit_log_missing += bounds[1] - expected

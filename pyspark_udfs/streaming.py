"""The ``rocketmq`` streaming source: ``spark.readStream.format("rocketmq")`` (docs/live.md).

>>> q = (spark.readStream.format("rocketmq")
...      .option("topic", "TopicTest").option("group", "GID_RED").option("sql", "color = 'red'")
...      .option("startingOffsets", "earliest").option("maxUnitsPerTrigger", "10000")
...      .load("/data/rocketmq/store")
...      .writeStream.format("parquet").option("checkpointLocation", "/tmp/ck")
...      .start("/tmp/out"))                                        # doctest: +SKIP

Options: every option of the batch source (``topic``, ``table``, ``group`` with
``sql``/``tags`` or its registration, ``decisions``, ``layer2``, ``partition_units``,
``min_partitions``, ``on_corrupt``, ``skipped_log``; not ``from_committed``, which ``startingOffsets``
replaces), plus:

``startingOffsets``
    ``latest`` (default), ``earliest``, ``committed`` (the group's offsets in
    ``config/consumerOffset.json``) or a JSON object of queue offsets
    ``{"topic": {"queue_id": offset}}`` (see :mod:`cq.store.stream`); over several stores
    offsets per broker, ``{"brokers": {"<broker>": {"topic": {"queue_id": offset}}}}``. Used
    only when the query starts without a checkpoint.
``maxUnitsPerTrigger``
    At most this many ConsumeQueue units per micro-batch, shared among the
    queues (of every broker; default: everything available). Over a BatchCQ topic: messages,
    whole batches, a queue's next batch whole even when larger than its share
    (docs/live.md#batchcq-topics).
``paths``
    Several stores, a cluster's brokers, as a JSON array of roots (a stream's ``load()`` takes
    one string: a glob pattern there works too; docs/live.md#offsets-per-broker).

Offsets are the queues' ConsumeQueue offsets, ``{"topic": {"queue_id": next}}``;
``latestOffset`` is each queue's end in a cut of the store taken then, and each
micro-batch reads ``[start, end)`` of each queue with the batch reader (both
filter layers), at the CommitLog end of a cut taken when it is planned. The
offsets are in Spark's checkpoint, so a restarted query goes on where it left
off: with a sink that commits by batch id (file sinks, ``foreachBatch`` that
does) the output is exactly once. Over several stores each broker's offsets are
its own and each trigger takes one cut per broker (docs/reading.md#clusters).

A micro-batch's queue ranges are packed into partitions (Spark tasks) as the batch
source packs a read's (``partition_units``, ``min_partitions``; docs/spark.md#partitions),
since a task costs more than reading a few thousand units. The driver keeps its
Store and queue readers from trigger to trigger, and each Python worker its
Stores from task to task, each checked before use (docs/live.md#cached-readers).
"""
from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Sequence

from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

import cq
from cq.store import stream

from ._plan import TIER_RANGE, align_to_batches, pack_ranges
from ._source import ConsumeQueueSlice, ReadOptions, SlicesPartition, positive_int_option

__all__ = ["RocketMQStreamReader", "StreamOptions", "StreamPartition", "pack_ranges"]

_LOG = logging.getLogger("rmqfilter.streaming")


@dataclasses.dataclass(frozen=True)
class StreamOptions:
    """The streaming source's options: the batch source's, plus where to start and how much per batch."""

    read: ReadOptions
    starting_offsets: str | dict = "latest"
    max_units_per_trigger: int | None = None

    @classmethod
    def parse(cls, options: dict, read: ReadOptions | None = None) -> StreamOptions:
        """Parse Spark's string options; ``ValueError`` naming the option on bad input."""
        lower = {str(k).lower(): v for k, v in dict(options).items()}
        read = read if read is not None else ReadOptions.parse(options)
        if read.from_committed:
            raise ValueError("rocketmq streaming: use startingOffsets=committed instead of from_committed")
        starting = stream.parse_starting_offsets(lower.get("startingoffsets", "latest"),
                                                 [b for b, _ in read.brokers] or None)
        if starting == "committed" and read.group is None:
            raise ValueError("rocketmq option startingOffsets=committed needs 'group' (whose committed offsets)")
        limit = positive_int_option(lower, "maxUnitsPerTrigger")
        return cls(read, starting, limit)


#: A micro-batch's task: the batch source's partition, queue ranges read one after the other.
StreamPartition = SlicesPartition


class RocketMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of queue-offset ranges, read by the batch source's reader.

    Over several stores (a cluster's brokers, docs/reading.md#clusters) each trigger takes one cut
    per broker, never one across them; the offsets are each broker's own, under ``"brokers"``
    (:mod:`cq.store.stream`), and each slice carries its broker and its broker's cut.
    """

    def __init__(self, options: StreamOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        #: ``(broker, root)`` of each store; one store is ``(None, root)``
        self._roots = options.read.brokers or ((None, options.read.path),)
        self._stores: dict[str | None, cq.Store] = {}  # driver side: refreshed by each cut
        self._had_topic: set[str | None] = set()  # stores whose cut held the topic
        self._target: dict | None = None

    # one store's offsets are as they are; several stores' are per broker, under "brokers"
    def _split(self, offsets: dict) -> dict:
        return dict(offsets[stream.BROKERS_KEY]) if self.options.read.brokers else {None: offsets}

    def _join(self, per_broker: dict) -> dict:
        return {stream.BROKERS_KEY: per_broker} if self.options.read.brokers else per_broker[None]

    def _cuts(self) -> dict[str | None, cq.StoreCut]:
        """A cut of each store holding the topic, taken now, store by store."""
        cuts = {}
        for broker, root in self._roots:
            cut = self._cut(broker, root)
            if cut is not None:
                cuts[broker] = cut
        if not cuts:
            raise ValueError(f"rocketmq option 'topic': no topic {self.options.read.topic!r} in any of the stores "
                             f"{self.options.read.path}")
        return cuts

    def _cut(self, broker: str | None, root: str) -> cq.StoreCut | None:
        """A cut of one store taken now, by the Store kept from the previous trigger if it still reads
        this store; None for a broker of several that does not hold the topic (now)."""
        topic = self.options.read.topic
        store = self._stores.get(broker)
        try:
            if store is not None and store.replaced() is not None:
                store.close()  # the directory or a mapped file was replaced: open it again
                store = None
            if store is None:
                store = self._stores[broker] = cq.Store(root, tier=self.options.read.tier)
            # keep_readers: each queue's recovery goes on from the previous trigger's end
            cut = store.cut(topic, keep_readers=True)  # a store directory deleted meanwhile fails, named
        except cq.StoreFormatError as exc:
            raise ValueError(f"rocketmq streaming: store {root!r}: {exc}") from exc
        except KeyError as exc:
            if broker in self._had_topic:  # it was read at an earlier trigger
                try:
                    store.replaced()
                except cq.StoreFormatError as gone:
                    raise ValueError(f"rocketmq streaming: store {root!r}: {gone}") from exc
                raise ValueError(f"rocketmq streaming: store {root!r}: topic {topic!r} has no "
                                 f"consume queues any more (the topic was deleted, or the store directory is being "
                                 f"deleted)") from exc
            if broker is not None:
                return None  # a topic need not be on every broker (docs/reading.md#clusters)
            raise ValueError(f"rocketmq option 'topic': no topic {topic!r} in store {root!r}") from exc
        self._had_topic.add(broker)
        return cut

    def _batches(self, cuts: dict[str | None, cq.StoreCut]) -> dict[str | None, stream.Batches]:
        """Each store's BatchCQ queues' batch starts in its cut (none for a topic of ConsumeQueues)."""
        return {b: stream.batch_starts(self._stores[b], cut, self.options.read.topic) for b, cut in cuts.items()}

    def initialOffset(self) -> dict:
        """Where a query without a checkpoint starts (``startingOffsets``), each store from its own cut."""
        cuts = self._cuts()
        spec = self.options.starting_offsets
        own = stream.broker_starting(spec, list(cuts), self.options.read.topic) if self.options.read.brokers \
            else {None: spec}
        per_broker = {b: {} for b, _ in self._roots}  # a broker without the topic: its queues from 0 once they appear
        for b, cut in cuts.items():
            per_broker[b] = stream.starting_offsets(self._stores[b], cut, own[b], group=self.options.read.group,
                                                    broker=b)
        return self._join(per_broker)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_units_per_trigger is not None:
            return ReadMaxRows(self.options.max_units_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """Each queue's end in a cut of its store taken now, within ``limit`` (units, shared among
        every store's queues) and the AvailableNow target."""
        max_units = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        target = None if self._target is None else self._split(self._target)
        cuts = self._cuts()  # a BatchCQ topic's ends are batch boundaries (docs/live.md#batchcq-topics)
        return self._join(stream.next_broker_offsets(self._split(start), cuts, max_units=max_units,
                                                     target=target, batches=self._batches(cuts)))

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._join({b: stream.cut_offsets(cut) for b, cut in self._cuts().items()})

    def partitions(self, start: dict, end: dict) -> Sequence[StreamPartition]:
        """``[start, end)`` of each queue at a cut of its store taken now, packed into partitions as
        the batch source packs its ranges (:func:`~pyspark_udfs._plan.pack_ranges`), a BatchCQ queue's
        bounds moved to batch starts as there (:func:`~pyspark_udfs._plan.align_to_batches`), so no
        partition splits a batch.

        Every unit below ``end`` was in the cut ``latestOffset`` took of its store, so its record is
        below that cut's CommitLog end and below this one's: a batch replayed after a restart
        reads the same records (unless the broker expired them meanwhile).
        """
        cuts = self._cuts()
        batches = self._batches(cuts)
        starts, ends = self._split(start), self._split(end)
        ranges = []  # a range's key is (broker, topic): packing sees it as one opaque name
        for b, cut in cuts.items():
            first, last = starts.get(b, {}), ends.get(b, {})
            compacted = self._stores[b].layout.compaction_topics
            for t, q, s, lo in stream.expired(first, cut, compacted):  # fell behind the broker's expiry: said
                _LOG.warning("rocketmq streaming: %s", stream.lost_text(
                    t, q, min(lo, int(last.get(t, {}).get(str(q), lo))) - s,
                    f"offsets [{s}, {lo}) expired by the broker before this micro-batch read them", b))
            # from each queue's minimum (the rest is lost, said), a BatchCQ queue's from a batch start
            begin = stream.next_offsets(first, cut, max_units=0, batches=batches[b])
            for topic in sorted(last):
                for q, (s, e) in sorted(stream.ranges(begin, last, topic).items()):
                    ranges += self._tier_split(b, cut, topic, q, s, e)
        return [StreamPartition(tuple(ConsumeQueueSlice(key[1], q, s, e, broker=key[0], tier=len(key) > 2,
                                                        commit_log_min=cuts[key[0]].commit_log_min,
                                                        commit_log_end=cuts[key[0]].commit_log_end)
                                      for key, q, s, e in group))
                for group in align_to_batches(self.options.read.pack(self.schema, ranges), {
                    ((b, t), q): starts for b, own in batches.items() for (t, q), starts in own.items()})]

    def _tier_split(self, broker, cut: cq.StoreCut, topic: str, queue_id: int, start: int, end: int) -> list[tuple]:
        """A queue's ``[start, end)`` as ranges: the part the broker serves from its tier (keyed ``(broker, topic,
        TIER_RANGE)``, read from the tier's flat files), then the local part; a read crossing into the local
        range checked as ``Store.consume`` checks it (docs/reading.md#tiered-storage)."""
        served = cut.tier_range(topic, queue_id)
        if served is None:
            return [((broker, topic), queue_id, start, end)]
        read, store = self.options.read, self._stores[broker]
        flt = None if read.group is None else store.make_filter(
            topic, read.group, sql=read.sql, tags=read.tags, born_time=read.born_time, bloom_data=read.bloom_data)
        return [((broker, topic, TIER_RANGE) if from_tier else (broker, topic), queue_id, a, b)
                for a, b, from_tier in store.tier_runs(topic, queue_id, served, start, end, flt=flt, cut=cut)]

    def read(self, partition: StreamPartition):
        """The partition's rows, each slice read as the batch source reads it (heavy imports happen here)."""
        # lazy: the heavy imports run on the executor, as in the batch source's read()
        from pyspark_udfs import _reader

        yield from _reader.read_partition(self.options.read, self.schema, partition, [])

    def commit(self, end: dict) -> None:
        """Nothing to do: the offsets live in Spark's checkpoint and the store is never written."""

    def stop(self) -> None:
        for store in self._stores.values():
            store.close()
        self._stores.clear()


def offsets_json(offsets: dict) -> str:
    """Offsets as the JSON text ``startingOffsets`` takes."""
    return json.dumps(offsets, sort_keys=True)

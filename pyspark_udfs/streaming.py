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
    ``{"topic": {"queue_id": offset}}`` (see :mod:`cq.store.stream`). Used only when
    the query starts without a checkpoint.
``maxUnitsPerTrigger``
    At most this many ConsumeQueue units per micro-batch, shared among the
    queues (default: everything available).

Offsets are the queues' ConsumeQueue offsets, ``{"topic": {"queue_id": next}}``;
``latestOffset`` is each queue's end in a cut of the store taken then, and each
micro-batch reads ``[start, end)`` of each queue with the batch reader (both
filter layers), at the CommitLog end of a cut taken when it is planned. The
offsets are in Spark's checkpoint, so a restarted query goes on where it left
off: with a sink that commits by batch id (file sinks, ``foreachBatch`` that
does) the output is exactly once.

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

from ._plan import pack_ranges
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
        starting = stream.parse_starting_offsets(lower.get("startingoffsets", "latest"))
        if starting == "committed" and read.group is None:
            raise ValueError("rocketmq option startingOffsets=committed needs 'group' (whose committed offsets)")
        limit = positive_int_option(lower, "maxUnitsPerTrigger")
        return cls(read, starting, limit)


#: A micro-batch's task: the batch source's partition, queue ranges read one after the other.
StreamPartition = SlicesPartition


class RocketMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of queue-offset ranges, read by the batch source's reader."""

    def __init__(self, options: StreamOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._store: cq.Store | None = None  # driver side: refreshed by each cut
        self._target: stream.Offsets | None = None

    def _cut(self) -> cq.StoreCut:
        """A cut taken now, by the Store kept from the previous trigger if it still reads this store."""
        topic = self.options.read.topic
        try:
            if self._store is not None and self._store.replaced() is not None:
                self._store.close()  # the directory or a mapped file was replaced: open it again
                self._store = None
            if self._store is None:
                self._store = cq.Store(self.options.read.path)
            # keep_readers: each queue's recovery goes on from the previous trigger's end
            return self._store.cut(topic, keep_readers=True)  # a store directory deleted meanwhile fails, named
        except cq.StoreFormatError as exc:
            raise ValueError(f"rocketmq streaming: store {self.options.read.path!r}: {exc}") from exc
        except KeyError as exc:
            if self._store is not None:  # it was read at an earlier trigger
                try:
                    self._store.replaced()
                except cq.StoreFormatError as gone:
                    raise ValueError(f"rocketmq streaming: store {self.options.read.path!r}: {gone}") from exc
                raise ValueError(f"rocketmq streaming: store {self.options.read.path!r}: topic {topic!r} has no "
                                 f"consume queues any more (the topic was deleted, or the store directory is being "
                                 f"deleted)") from exc
            raise ValueError(f"rocketmq option 'topic': no topic {topic!r} in store {self.options.read.path!r}") \
                from exc

    def initialOffset(self) -> dict:
        """Where a query without a checkpoint starts (``startingOffsets``)."""
        cut = self._cut()
        return stream.starting_offsets(self._store, cut, self.options.starting_offsets, group=self.options.read.group)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_units_per_trigger is not None:
            return ReadMaxRows(self.options.max_units_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """Each queue's end in a cut taken now, within ``limit`` (units) and the AvailableNow target."""
        max_units = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return stream.next_offsets(start, self._cut(), max_units=max_units, target=self._target)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = stream.cut_offsets(self._cut())

    def partitions(self, start: dict, end: dict) -> Sequence[StreamPartition]:
        """``[start, end)`` of each queue at a cut taken now, packed into partitions as the batch
        source packs its ranges (:func:`~pyspark_udfs._plan.pack_ranges`).

        Every unit below ``end`` was in the cut ``latestOffset`` took, so its record is
        below that cut's CommitLog end and below this one's: a batch replayed after
        a restart reads the same records (unless the broker expired them meanwhile).
        """
        cut = self._cut()
        for t, q, s, lo in stream.expired(start, cut):  # the stream fell behind the broker's expiry: said
            _LOG.warning("rocketmq streaming: %s", stream.lost_text(
                t, q, min(lo, int(end.get(t, {}).get(str(q), lo))) - s,
                f"offsets [{s}, {lo}) expired by the broker before this micro-batch read them"))
        begin = stream.next_offsets(start, cut, max_units=0)  # from each queue's minimum: the rest is lost, said
        ranges = [(topic, q, s, e) for topic in sorted(end)
                  for q, (s, e) in sorted(stream.ranges(begin, end, topic).items())]
        return [StreamPartition(tuple(ConsumeQueueSlice(t, q, s, e, commit_log_min=cut.commit_log_min,
                                                        commit_log_end=cut.commit_log_end)
                                      for t, q, s, e in group))
                for group in self.options.read.pack(self.schema, ranges)]

    def read(self, partition: StreamPartition):
        """The partition's rows, each slice read as the batch source reads it (heavy imports happen here)."""
        # lazy: the heavy imports run on the executor, as in the batch source's read()
        from pyspark_udfs import _reader

        yield from _reader.read_partition(self.options.read, self.schema, partition, [])

    def commit(self, end: dict) -> None:
        """Nothing to do: the offsets live in Spark's checkpoint and the store is never written."""

    def stop(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


def offsets_json(offsets: dict) -> str:
    """Offsets as the JSON text ``startingOffsets`` takes."""
    return json.dumps(offsets, sort_keys=True)

"""Write RocketMQ broker stores byte for byte: CommitLog, ConsumeQueue, ConsumeQueueExt.

:class:`StoreWriter` appends messages the way a broker's ``DefaultMessageStore``
does, then dispatches each record the way the broker's reput service does, in
the broker's dispatcher order (docs/formats.md#consumequeue-which-messages,
docs/formats.md#ext-end-of-file, docs/formats.md#commitlog-blank-record,
docs/filtering.md#bitmap-dispatch):

1. **CommitLog.** The record is encoded as ``MessageExtEncoder`` lays it out
   (V1, or V2 when the topic is longer than 127 characters; IPv4 or IPv6 hosts
   with the matching SYSFLAG bits; BODYCRC = ``crc32(body) & 0x7FFFFFFF``;
   properties ``name\\x01value\\x02...``). A record of length L goes into the
   current file only if ``L + 8 <= remaining``; otherwise an 8-byte blank
   record (TOTALSIZE = remaining, MAGICCODE ``0xCBD43194``) ends the file and
   the record starts the next one. Files are created full-size and zero-filled
   when the first byte is written to them.
2. **Bitmap** (``CommitLogDispatcherCalcBitMap``). If SQL92 groups are
   registered for the record's physical topic, a zeroed ``ceil(m/8)``-byte
   bitmap is built and, for every group whose selector evaluates to TRUE on the
   stored properties, the k Bloom positions of ``"<group>#<topic>"`` are set.
   Evaluation errors and NULL leave the group's bits unset.
3. **ConsumeQueueExt** (when enabled). Every unit dispatched gets an ext unit
   first (34 bytes with the default 14-byte bitmap, 20 without); a unit that
   does not fit in ``file_size - write_position - 4`` bytes is preceded by the
   int16 end marker ``-1`` and goes to the next file. The ConsumeQueue slot then
   holds the unit's decorated address (``offset - 2**63``).
4. **ConsumeQueue.** Only NOT_TYPE and COMMIT transaction records get a 20-byte
   unit ``(commit_log_offset, size, tags_code)``; queue offsets are assigned per
   ``(topic, queue_id)``. tags_code is ``String.hashCode`` of the stored TAGS
   (0 without), or the delivery time for ``SCHEDULE_TOPIC_XXXX`` records with a
   DELAY level.

Properties given as a mapping are re-serialised the way the broker does it
(``string2messageProperties`` then ``CLUSTER`` added, then
``messageProperties2String`` over a ``HashMap(128)``): empty and None values are
dropped, pairs follow :func:`cq.format.hashmap_order`, and the mapping's own
order breaks ties inside a bucket (that is the producer's insertion order).
Properties given as ``str``/``bytes`` are stored verbatim, so a golden store
round-trips byte for byte.

Only writers open store files read-write; :mod:`cq`'s readers map them
read-only. The writing side is split by job: this module (the writer), :mod:`cq.writer._filequeue`
(files opened for appending, the store lock), :mod:`cq.writer.recovery` (an interrupted
writer's torn tail, and the re-dispatch of the records it left without units, in decoded
batches through :mod:`cq.writer.dispatch_unit`), :mod:`cq.writer.rebuild` (:func:`~cq.writer.rebuild.rebuild_bitmaps` re-dispatches
an existing store for a new set of groups into a new directory) and :mod:`cq.writer.sample`
(:func:`~cq.writer.sample.generate_sample_store`, the deterministic sample store of
``rmqfilter gen-store``).
"""
from __future__ import annotations

import atexit
import contextlib
import os
import re
import struct
import sys
import time
import weakref
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

import bloom
import rmqfilter_java as javalang
import selector

from ..filter.layers import bloom_key
from ..format import (
    BLANK_MAGIC_CODE,
    BORNHOST_V6_FLAG,
    COMMIT_LOG_DIR,
    COMPRESSED_FLAG,
    COMPRESSION_LZ4,
    COMPRESSION_ZLIB,
    COMPRESSION_ZSTD,
    CONSUME_QUEUE_DIR,
    CONSUME_QUEUE_EXT_DIR,
    CQ_STORE_UNIT_SIZE,
    CQ_UNIT_STRUCT,
    CRC32_RESERVED_LEN,
    DEFAULT_COMMIT_LOG_FILE_SIZE,
    DEFAULT_CONSUME_QUEUE_FILE_SIZE,
    DEFAULT_EXT_FILE_SIZE,
    END_FILE_MIN_BLANK_LENGTH,
    EXT_END_BLANK_DATA_LENGTH,
    EXT_END_MARKER,
    EXT_UNIT_HEADER_STRUCT,
    MAX_EXT_UNIT_SIZE,
    MAX_PROPERTIES_LENGTH,
    MAX_REAL_OFFSET,
    MESSAGE_MAGIC_CODE_V1,
    MESSAGE_MAGIC_CODE_V2,
    MIN_EXT_UNIT_SIZE,
    NAME_VALUE_SEPARATOR,
    PLACEHOLDER_UNIT,
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    RECORD_HEAD_STRUCT,
    RECORD_OFFSETS_POSITION,
    RECORD_OFFSETS_STRUCT,
    SCHEDULE_TOPIC,
    STOREHOSTADDRESS_V6_FLAG,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_TYPE_MASK,
    body_crc,
    decode_properties_bytes,
    decorate,
    encode_topic_field,
    hashmap_order,
    is_ext_addr,
    list_queue_files,
    pack_record,
    parse_host,
    round_consume_queue_file_size,
    undecorate,
)
from ..readers.columns import property_values
from ..readers.commitlog import CommitLog
from ..readers.config import CONFIG_DIR, CONSUMER_FILTER_FILE, RegisteredFilter, read_registered_filters
from ..tags import tags_code, tags_code_utf8
from ._filequeue import COMMIT_LOG_FLUSH, FileQueue, check_classic, holds_store, lock_store
from .config_writer import write_consumer_filters
from .record_bytes import fill_property_crc, offset_msg_id, strip_property_crc
from .recovery import (
    last_unit,
    recover_commit_log,
    recover_consume_queue,
    recover_ext,
    redispatch,
    truncate_consume_queue,
    truncate_ext,
)

if TYPE_CHECKING:
    from typing_extensions import Self  # typing only: not a run-time dependency

    from ..readers.columns import MessageColumns

__all__ = [
    "DEFAULT_MESSAGE_DELAY_LEVEL",
    "DEFAULT_STORE_HOST",
    "AppendResult",
    "SqlGroup",
    "StoreWriter",
    "compress_body",
]

#: ``BrokerConfig.brokerClusterName`` default; the broker adds it as property ``CLUSTER``.
DEFAULT_CLUSTER = "DefaultCluster"
#: A broker listening on the default port of localhost.
DEFAULT_STORE_HOST = "127.0.0.1:10911"
#: ``MessageStoreConfig.messageDelayLevel`` default (18 levels).
DEFAULT_MESSAGE_DELAY_LEVEL = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
#: Property the broker adds to every message it stores.
PROPERTY_CLUSTER = "CLUSTER"
#: Topic names the broker accepts from clients (``TopicValidator``).
TOPIC_PATTERN = re.compile(r"[%|a-zA-Z0-9_-]+\Z")
#: Longest topic the broker accepts (retry and DLQ topics; normal topics stop at 127).
TOPIC_MAX_LENGTH = 255
#: Longest topic a V1 record can hold: its length byte is read as a signed int8.
V1_TOPIC_MAX_BYTES = 127

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_BLANK = RECORD_HEAD_STRUCT
_CQ_UNIT = CQ_UNIT_STRUCT
_I16 = struct.Struct(">h")
_EXT_MARKER = _I16.pack(EXT_END_MARKER)

#: Messages prepared before their bitmaps are computed together.
BATCH_SIZE = 8192


class AppendResult(NamedTuple):
    """Where :meth:`StoreWriter.append` put a message.

    Attributes
    ----------
    commit_log_offset : int
        Physical offset of the record (PHYSICALOFFSET).
    store_size : int
        TOTALSIZE of the record.
    queue_offset : int or None
        Offset in its ConsumeQueue; None for PREPARED/ROLLBACK transaction
        records, which get no unit (their QUEUEOFFSET field is 0).
    tags_code : int
        The tags code dispatched (tag hash, 0, or delivery time).
    ext_address : int or None
        Decorated address of its ConsumeQueueExt unit (the value in the
        ConsumeQueue slot), or None when no ext unit was written.
    msg_id : str
        The offset message id: store-host address, port and physical offset in hex.
    """

    commit_log_offset: int
    store_size: int
    queue_offset: int | None
    tags_code: int
    ext_address: int | None
    msg_id: str


@dataclass(frozen=True)
class SqlGroup:
    """A SQL92 consumer group registered for bitmap calculation on a topic."""

    topic: str
    group: str
    sql: str

    @property
    def bloom_key(self) -> str:
        """The broker's Bloom key ``"<group>#<topic>"``."""
        return bloom_key(self.group, self.topic)


class _Group:
    """A registered group with its compiled selector and its bitmap bits."""

    __slots__ = ("bits", "selector", "spec")

    def __init__(self, spec: SqlGroup, selector: Any, bits: np.ndarray):
        self.spec = spec
        self.selector = selector
        self.bits = bits


# --------------------------------------------------------------- validation
def check_int(name: str, value: Any, lo: int, hi: int) -> int:
    """``value`` as an int in ``[lo, hi]``, or a TypeError/ValueError naming ``name`` (the writer's
    argument checks, and the sample store's)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    value = int(value)
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {value}")
    return value


def _check_size(name: str, value: Any, minimum: int) -> int:
    value = check_int(name, value, 1, _INT32[1])
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum} bytes, got {value}")
    return value


def parse_delay_levels(text: str) -> list[int]:
    """Delays in ms of ``messageDelayLevel`` text such as ``"1s 5s 1m 2h"`` (level = index + 1)."""
    units = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
    out = []
    for token in text.split(" "):
        if len(token) < 2 or token[-1] not in units or not token[:-1].isascii() or not token[:-1].isdigit():
            raise ValueError(f"message_delay_level token {token!r} is not <digits><s|m|h|d>")
        out.append(int(token[:-1]) * units[token[-1]])
    return out


#: ``compressMsgBodyOverHowmuch``: the producer compresses bodies at least this long.
COMPRESS_MSG_BODY_OVER_HOWMUCH = 4096
_COMPRESSION_TYPES = {"zlib": COMPRESSION_ZLIB, "lz4": COMPRESSION_LZ4, "zstd": COMPRESSION_ZSTD}


def compress_body(body: bytes, compress_type: str = "zlib", level: int = 5) -> tuple[bytes, int]:
    """Compress a body as the producer does before sending it (docs/formats.md#body-compression).

    Parameters
    ----------
    body : bytes-like
        The uncompressed body.
    compress_type : {"zlib", "lz4", "zstd"}
        The producer's ``rocketmq.message.compressType`` (default ZLIB); LZ4
        (frame format) needs the ``lz4`` package, ZSTD the ``zstandard`` package.
    level : int
        ``rocketmq.message.compressLevel`` (default 5).

    Returns
    -------
    (bytes, int)
        The stored body and the SYSFLAG bits to OR into ``sys_flag``
        (``COMPRESSED_FLAG`` | type << 8). The broker stores the compressed
        bytes unchanged and its BODYCRC covers them. The codecs are the same;
        byte-identical output to the Java producer's is not guaranteed across
        zlib/lz4/zstd builds.

    Examples
    --------
    >>> stored, bits = compress_body(b"x" * 5000)
    >>> hex(bits)
    '0x301'
    """
    kind = _COMPRESSION_TYPES.get(compress_type)
    if kind is None:
        raise ValueError(f"compress_type must be one of {sorted(_COMPRESSION_TYPES)}, got {compress_type!r}")
    data = bytes(body)
    if kind == COMPRESSION_ZLIB:
        out = zlib.compress(data, level)
    elif kind == COMPRESSION_LZ4:
        import lz4.frame  # lazy: an optional codec, needed only by those who ask for it

        out = lz4.frame.compress(data, compression_level=level)
    else:
        import zstandard  # lazy: an optional codec, needed only by those who ask for it

        out = zstandard.ZstdCompressor(level=level).compress(data)
    return out, COMPRESSED_FLAG | (kind << 8)


class _QueueState:
    """Write state of one (topic, queue_id): its ConsumeQueue, ConsumeQueueExt and next offset."""

    __slots__ = ("cq", "ext", "next_offset", "started")

    def __init__(self, cq: FileQueue, ext: FileQueue | None, next_offset: int, started: bool):
        self.cq = cq
        self.ext = ext
        self.next_offset = next_offset
        self.started = started  # False until the queue holds a unit or a file


class Prepared:
    """One message, validated and encoded, waiting for its offsets."""

    __slots__ = ("dispatch", "props", "queue_id", "record", "size", "store_timestamp", "tags_code", "topic")

    def __init__(self, topic, queue_id, record, dispatch, tags_code_value, store_timestamp, props):
        self.topic = topic
        self.queue_id = queue_id
        self.record = record
        self.size = len(record)
        self.dispatch = dispatch
        self.tags_code = tags_code_value
        self.store_timestamp = store_timestamp
        self.props = props


# --------------------------------------------------------------- the writer
#: Writers not closed yet. An atexit hook closes them (flushing, releasing the lock) while the
#: interpreter is whole: a finalizer run during its teardown could not (builtins are gone by then).
_OPEN_WRITERS: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _close_open_writers() -> None:
    for writer in list(_OPEN_WRITERS):
        with contextlib.suppress(OSError):
            writer.close()


class StoreWriter:
    """Append messages to a RocketMQ store directory exactly as a broker writes them.

    Parameters
    ----------
    root : str or os.PathLike
        Store root (``storePathRootDir``); created if missing. It must not
        already hold a store unless ``append=True``.
    commit_log_file_size : int, default 1 GiB
        ``mappedFileSizeCommitLog``.
    consume_queue_file_size : int, default 6,000,000
        ``mappedFileSizeConsumeQueue``; rounded up to a multiple of 20 like the broker.
    ext_file_size : int, default 48 MiB
        ``mappedFileSizeConsumeQueueExt``.
    enable_ext : bool, default False
        ``enableConsumeQueueExt`` (store-wide). Bitmaps of registered groups are
        only stored when it is on.
    store_host : str, default "127.0.0.1:10911"
        STOREHOST of every record unless :meth:`append` overrides it.
    cluster : str or None, default "DefaultCluster"
        ``brokerClusterName``: added as property ``CLUSTER`` to messages whose
        properties are given as a mapping (the broker adds it on receipt).
        None adds nothing. Pre-serialised properties are never changed.
    append : bool, default False
        Continue an existing store: offsets and write positions are recovered
        from its files (which must have the configured sizes). The groups in
        its ``config/consumerFilter.json`` are kept in that file, but bitmaps are
        computed only for groups registered with this writer: register them again.
    bloom_filter : bloom.BloomFilter, optional
        The broker's filter (default ``BloomFilter(20, 32)``: k=3, m=112).
    auto_message_version_on_topic_len : bool, default True
        ``autoMessageVersionOnTopicLen``: V2 records for topics longer than 127 characters.
    message_delay_level : str, default the broker's 18 levels
        ``messageDelayLevel``, for the tags code of ``SCHEDULE_TOPIC_XXXX`` records.
    enabled_append_prop_crc : bool, default False
        ``enabledAppendPropCRC``: end every record with a ``__CRC32#`` property
        holding the CRC-32 of the record's other bytes (docs/formats.md#record-crc-property); an existing
        ``__CRC32#`` property is dropped first.

    Examples
    --------
    >>> with StoreWriter(path, enable_ext=True, commit_log_file_size=1 << 20) as w:  # doctest: +SKIP
    ...     w.register_group("TopicTest", "GID_RED", "color = 'red'")
    ...     r = w.append("TopicTest", b"hello", tags="TagA", properties={"color": "red"},
    ...                  born_timestamp=1700000000000, store_timestamp=1700000000123)
    >>> r.commit_log_offset, r.queue_offset  # doctest: +SKIP
    (0, 0)
    """

    def __init__(
        self,
        root: str | os.PathLike,
        *,
        commit_log_file_size: int = DEFAULT_COMMIT_LOG_FILE_SIZE,
        consume_queue_file_size: int = DEFAULT_CONSUME_QUEUE_FILE_SIZE,
        ext_file_size: int = DEFAULT_EXT_FILE_SIZE,
        enable_ext: bool = False,
        store_host: str = DEFAULT_STORE_HOST,
        cluster: str | None = DEFAULT_CLUSTER,
        append: bool = False,
        bloom_filter: Any = None,
        auto_message_version_on_topic_len: bool = True,
        message_delay_level: str = DEFAULT_MESSAGE_DELAY_LEVEL,
        enabled_append_prop_crc: bool = False,
    ) -> None:
        self.root = os.fspath(root)
        self.commit_log_file_size = _check_size("commit_log_file_size", commit_log_file_size, 64)
        self.consume_queue_file_size = round_consume_queue_file_size(
            _check_size("consume_queue_file_size", consume_queue_file_size, 1)
        )
        self.bloom_filter = bloom.BloomFilter(20, 32) if bloom_filter is None else bloom_filter
        self.bit_map_size = (self.bloom_filter.m + 7) // 8
        self.ext_file_size = _check_size(
            "ext_file_size", ext_file_size, MIN_EXT_UNIT_SIZE + self.bit_map_size + EXT_END_BLANK_DATA_LENGTH
        )
        self.enable_ext = bool(enable_ext)
        self.store_host = store_host
        self._store_host = parse_host(store_host, what="store_host")
        if cluster is not None and (not isinstance(cluster, str) or not cluster):
            raise ValueError(f"cluster must be a non-empty str or None, got {cluster!r}")
        self.cluster = cluster
        self.auto_message_version_on_topic_len = bool(auto_message_version_on_topic_len)
        self.enabled_append_prop_crc = bool(enabled_append_prop_crc)
        self._delays = parse_delay_levels(message_delay_level)
        self._topics: dict[str, tuple[int, bytes]] = {}
        self._groups: dict[str, dict[str, _Group]] = {}
        # consumerFilter.json's entries: those of an existing store are kept when it is rewritten
        self._filter_data: dict[tuple[str, str], RegisteredFilter] = {}
        self._queues: dict[tuple[str, int], _QueueState] = {}
        self._key_orders: dict[tuple[str, ...], list[str]] = {}
        self._closed = False
        self._lock_fd: int | None = None
        self.messages_written = 0

        if os.path.exists(self.root) and not os.path.isdir(self.root):
            raise ValueError(f"store root {self.root!r} exists and is not a directory")
        check_classic(self.root)
        existing = holds_store(self.root)
        if existing is not None and not append:
            raise FileExistsError(
                f"{self.root!r} already holds a store ({existing}); pass append=True to add to it"
            )
        os.makedirs(self.root, exist_ok=True)
        self._lock_fd = lock_store(self.root)
        _OPEN_WRITERS.add(self)
        self._commit_log = FileQueue(
            os.path.join(self.root, COMMIT_LOG_DIR), self.commit_log_file_size, flush_at=COMMIT_LOG_FLUSH
        )
        if existing is not None:
            try:
                self._filter_data = {
                    (f.topic, f.group): f
                    for f in read_registered_filters(os.path.join(self.root, CONFIG_DIR, CONSUMER_FILTER_FILE),
                                                     self.bloom_filter)
                }
                self._recover()
            except BaseException:
                self._unlock()
                raise

    # ----------------------------------------------------------- groups
    def register_group(self, topic: str, group: str, sql: str, *, born_time: int | None = None,
                       client_version: int | None = None) -> SqlGroup:
        """Register a SQL92 consumer group whose bitmap bits are computed for ``topic``.

        Like the broker's ``ConsumerFilterManager``, the group's Bloom data is
        ``generate("<group>#<topic>")``; registering the same (topic, group)
        again replaces its expression. Messages appended afterwards carry the
        group's bits where the selector evaluates to TRUE. The registration is
        persisted to ``config/consumerFilter.json`` as the broker persists it
        (fastjson, ``.bak`` kept), so readers can look the group up by name.

        Parameters
        ----------
        topic, group : str
            The physical topic whose records are evaluated, and the consumer group.
        sql : str
            SQL92 selector text.
        born_time : int, optional
            ``bornTime`` (ms) of the filter data: default now. Bitmaps are trusted only for
            messages stored strictly after it, so a store written with past store
            timestamps should register its groups with a born time before them.
            Re-registering the same expression keeps the first born time, as the broker does.
        client_version : int, optional
            The subscription's version (default: the born time).

        Returns
        -------
        SqlGroup

        Raises
        ------
        selector.SelectorSyntaxError
            ``sql`` does not compile (the broker would refuse the registration).
        ValueError
            ``enable_ext`` is off (bitmaps would not be stored), or the topic or group is invalid.
        """
        self._check_open()
        if not self.enable_ext:
            raise ValueError(
                "bitmaps are stored in ConsumeQueueExt units: create the StoreWriter with enable_ext=True "
                "to register SQL92 groups"
            )
        self.topic_info(topic)
        if not isinstance(group, str) or not group:
            raise ValueError(f"group must be a non-empty str, got {group!r}")
        if not isinstance(sql, str) or not sql.strip():
            raise ValueError(f"sql of group {group!r} must be a non-empty SQL92 expression")
        if born_time is not None:
            born_time = check_int("born_time", born_time, *_INT64)
        if client_version is not None:
            client_version = check_int("client_version", client_version, *_INT64)
        compiled = selector.compile(sql)
        spec = SqlGroup(topic, group, sql)
        bits = bloom.BitsArray(self.bloom_filter.m)
        bloom_data = self.bloom_filter.generate(spec.bloom_key)
        self.bloom_filter.hash_to(bloom_data, bits)
        arr = np.frombuffer(bytes(bits), dtype=np.uint8).copy()
        self._groups.setdefault(topic, {})[group] = _Group(spec, compiled, arr)
        self._register_filter_data(spec, bloom_data, born_time, client_version)
        return spec

    def _register_filter_data(self, spec: SqlGroup, bloom_data: Any, born_time: int | None,
                              client_version: int | None) -> None:
        """``ConsumerFilterManager.register`` for one group, then persist ``consumerFilter.json``."""
        now = time.time_ns() // 1_000_000
        old = self._filter_data.get((spec.topic, spec.group))
        if born_time is None:
            unchanged = (old is not None and old.expression == spec.sql and old.expression_type == "SQL92"
                         and old.bloom_data == bloom_data)
            born_time = old.born_time if unchanged else now
        self._filter_data[(spec.topic, spec.group)] = RegisteredFilter(
            group=spec.group, topic=spec.topic, expression=spec.sql, expression_type="SQL92",
            born_time=born_time, dead_time=0, bloom_data=bloom_data,
            client_version=born_time if client_version is None else client_version, bloom_matches=True,
        )
        write_consumer_filters(self.root, self._filter_data.values())

    @property
    def groups(self) -> list[SqlGroup]:
        """Every registered group, in registration order per topic."""
        return [g.spec for by_group in self._groups.values() for g in by_group.values()]

    # ----------------------------------------------------------- append
    def append(
        self,
        topic: str,
        body: bytes = b"",
        *,
        queue_id: int = 0,
        properties: Mapping[str, str | None] | str | bytes | None = None,
        tags: str | None = None,
        keys: str | Sequence[str] | None = None,
        flag: int = 0,
        sys_flag: int = 0,
        born_timestamp: int | None = None,
        store_timestamp: int | None = None,
        born_host: str | None = None,
        store_host: str | None = None,
        reconsume_times: int = 0,
        prepared_transaction_offset: int = 0,
    ) -> AppendResult:
        """Append one message and dispatch it to its ConsumeQueue (and ext unit).

        Parameters
        ----------
        topic : str
            Topic as stored (the physical topic, e.g. ``%RETRY%group``).
        body : bytes-like
            Stored body. Set :data:`~cq.format.COMPRESSED_FLAG` and the
            compression type in ``sys_flag`` if it is compressed.
        queue_id : int
            Queue of the topic (>= 0).
        properties : mapping, str or bytes, optional
            A mapping is serialised as the broker does (see the module doc);
            ``str``/``bytes`` is the stored properties text, used verbatim.
        tags, keys : optional
            Set the ``TAGS`` / ``KEYS`` properties (keys joined by spaces).
            Only with a mapping (or no) ``properties``.
        flag, sys_flag, reconsume_times, prepared_transaction_offset : int
            Record fields. The IPv6 host bits of ``sys_flag`` follow the hosts.
            Transaction type PREPARED (0x4) or ROLLBACK (0xC) records get no
            ConsumeQueue unit and QUEUEOFFSET 0.
        born_timestamp, store_timestamp : int, optional
            Milliseconds since the epoch; default now (store defaults to born).
        born_host, store_host : str, optional
            ``"ip:port"`` or ``"[ipv6]:port"``; default the writer's store host.

        Returns
        -------
        AppendResult

        Raises
        ------
        ValueError
            Invalid topic, host, field range, properties over 32,767 bytes, a
            record that cannot fit a CommitLog file, or a DELAY level that is
            not an int on ``SCHEDULE_TOPIC_XXXX``. Nothing is written then.
        """
        self._check_open()
        prepared = self._prepare(
            topic=topic, body=body, queue_id=queue_id, properties=properties, tags=tags, keys=keys, flag=flag,
            sys_flag=sys_flag, born_timestamp=born_timestamp, store_timestamp=store_timestamp,
            born_host=born_host, store_host=store_host, reconsume_times=reconsume_times,
            prepared_transaction_offset=prepared_transaction_offset,
        )
        return self._write([prepared], collect=True)[0]

    def append_many(
        self,
        messages: Iterable[Mapping[str, Any]],
        *,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Append many messages; bitmaps are computed per batch with ``matches_many``.

        Parameters
        ----------
        messages : iterable of mappings
            Each holds the keyword arguments of :meth:`append` (``topic`` required).
        progress : callable, optional
            Called with the number of messages written so far after each batch.

        Returns
        -------
        int
            Number of messages written.

        Raises
        ------
        ValueError
            As :meth:`append`, naming the message's index. Every message before
            the bad one is written.
        """
        self._check_open()
        written = 0
        batch: list[Prepared] = []
        prepare = self._prepare
        for index, m in enumerate(messages):
            try:
                if not isinstance(m, Mapping):
                    raise TypeError(f"expected a mapping of append() arguments, got {type(m).__name__}")
                batch.append(prepare(**m))
            except (TypeError, ValueError) as exc:
                if batch:
                    self._write(batch, collect=False)
                    written += len(batch)
                kind = TypeError if isinstance(exc, TypeError) else ValueError
                raise kind(f"message #{index}: {exc}") from exc
            if len(batch) >= BATCH_SIZE:
                self._write(batch, collect=False)
                written += len(batch)
                batch = []
                if progress is not None:
                    progress(written)
        if batch:
            self._write(batch, collect=False)
            written += len(batch)
            if progress is not None:
                progress(written)
        return written

    # ----------------------------------------------------------- lifecycle
    def flush(self) -> None:
        """Write every buffered byte to the store files."""
        self._finish_recovery()
        self._flush_queues()

    def _flush_queues(self) -> None:
        # CommitLog first, then every ext queue, then every ConsumeQueue: an interrupted
        # writer leaves units for a prefix of the log, each pointing at data on disk
        self._commit_log.flush()
        for state in self._queues.values():
            if state.ext is not None:
                state.ext.flush()
        for state in self._queues.values():
            state.cq.flush()

    def close(self) -> None:
        """Flush, release the store's ``lock`` file and stop accepting messages (idempotent)."""
        if not self._closed:
            try:
                self.flush()
            finally:
                self._closed = True
                self._unlock()
                _OPEN_WRITERS.discard(self)

    def __del__(self) -> None:
        # Like a file object: an abandoned writer still flushes and releases the lock. At
        # interpreter exit the atexit hook has closed it already, while builtins still exist;
        # a finalizer run later (module teardown) has nothing left to do and prints nothing.
        if hasattr(self, "_commit_log") and not self._closed and not sys.is_finalizing():
            with contextlib.suppress(OSError):
                self.close()

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = None

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self.messages_written} message(s) written"
        return (
            f"StoreWriter({self.root!r}, commit_log_file_size={self.commit_log_file_size}, "
            f"enable_ext={self.enable_ext}, groups={len(self.groups)}; {state})"
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"StoreWriter for {self.root!r} is closed")

    @property
    def commit_log_max_offset(self) -> int:
        """Physical offset where the next record would start (before the 8-byte rule)."""
        return self._commit_log.offset

    def queue_max_offset(self, topic: str, queue_id: int) -> int:
        """Next queue offset of ``(topic, queue_id)`` (0 for a queue never written)."""
        state = self._queues.get((topic, queue_id))
        return state.next_offset if state is not None else 0

    # ----------------------------------------------------------- encoding
    def topic_info(self, topic: str) -> tuple[int, bytes]:
        """``(magic code, encoded topic field)`` of this topic's records (V1, or V2 for a long name
        when allowed), checked once per topic: a bad topic name raises here, before anything is written."""
        info = self._topics.get(topic)
        if info is not None:
            return info
        if not isinstance(topic, str):
            raise TypeError(f"topic must be a str, got {type(topic).__name__}")
        if not TOPIC_PATTERN.match(topic):
            raise ValueError(f"topic {topic!r} does not match the broker's topic pattern ^[%|a-zA-Z0-9_-]+$")
        if len(topic) > TOPIC_MAX_LENGTH:
            raise ValueError(f"topic of {len(topic)} characters is longer than {TOPIC_MAX_LENGTH}")
        encoded = topic.encode("ascii")
        if self.auto_message_version_on_topic_len and len(topic) > V1_TOPIC_MAX_BYTES:
            info = (MESSAGE_MAGIC_CODE_V2, encode_topic_field(encoded, MESSAGE_MAGIC_CODE_V2))
        elif len(encoded) > V1_TOPIC_MAX_BYTES:
            raise ValueError(
                f"topic of {len(encoded)} bytes does not fit the signed length byte of a V1 record "
                f"(max {V1_TOPIC_MAX_BYTES}); enable auto_message_version_on_topic_len for V2"
            )
        else:
            info = (MESSAGE_MAGIC_CODE_V1, encode_topic_field(encoded, MESSAGE_MAGIC_CODE_V1))
        self._topics[topic] = info
        return info

    def _serialise(self, properties: Mapping[str, Any] | None, tags: Any, keys: Any) -> tuple[bytes, dict]:
        """Broker re-serialisation of a property mapping: ``(stored bytes, parsed properties)``."""
        props: dict[str, str] = {}
        if properties is not None:
            if type(properties) is not dict and not isinstance(properties, Mapping):
                raise TypeError(f"properties must be a mapping, str or bytes, got {type(properties).__name__}")
            # Values that are None or "" never reach the store: the producer skips None and the
            # broker's string2messageProperties drops empty values before re-serialising.
            props = {k: v for k, v in properties.items() if v is not None and v != ""}
            try:  # str.join is a C-speed "every item is a str" check
                "".join(props)
                "".join(props.values())
            except TypeError:
                k, v = next((k, v) for k, v in props.items() if not (isinstance(k, str) and isinstance(v, str)))
                raise TypeError(
                    f"property {k!r}: names and values must be str, got {type(k).__name__}: {type(v).__name__}"
                ) from None
        if tags is not None:
            if not isinstance(tags, str):
                raise TypeError(f"tags must be a str, got {type(tags).__name__}")
            if tags:
                props[PROPERTY_TAGS] = tags
        if keys is not None:
            if not isinstance(keys, str):
                keys = " ".join(keys)
            if keys:
                props[PROPERTY_KEYS] = keys
        if self.cluster is not None:
            props[PROPERTY_CLUSTER] = self.cluster
        names = tuple(props)
        order = self._key_orders.get(names)
        if order is None:
            for k in names:
                if not k or NAME_VALUE_SEPARATOR in k or PROPERTY_SEPARATOR in k:
                    raise ValueError(f"property name {k!r} is empty or contains a \\x01/\\x02 separator")
            order = hashmap_order(names)
            if len(self._key_orders) > 4096:
                self._key_orders.clear()
            self._key_orders[names] = order
        text = "".join([f"{k}\x01{props[k]}\x02" for k in order])
        if text.count(PROPERTY_SEPARATOR) != len(order):
            bad = next(k for k in order if PROPERTY_SEPARATOR in props[k])
            raise ValueError(f"property {bad!r}: value contains the \\x02 property separator")
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"properties are not encodable as UTF-8 (lone surrogate?): {exc}") from exc
        return data, props

    def _prepare(
        self, *, topic: str, body: Any = b"", queue_id: int = 0, properties: Any = None, tags: Any = None,
        keys: Any = None, flag: int = 0, sys_flag: int = 0, born_timestamp: int | None = None,
        store_timestamp: int | None = None, born_host: str | None = None, store_host: str | None = None,
        reconsume_times: int = 0, prepared_transaction_offset: int = 0,
    ) -> Prepared:
        """Validate and encode one message (no state changes; offsets are filled in by _write)."""
        magic, topic_field = self.topic_info(topic)
        if isinstance(properties, (str, bytes, bytearray, memoryview)):
            if tags is not None or keys is not None:
                raise ValueError("tags/keys cannot be combined with a pre-serialised properties string")
            if isinstance(properties, str):
                try:
                    props_b = properties.encode("utf-8")
                except UnicodeEncodeError as exc:
                    raise ValueError(f"properties are not encodable as UTF-8: {exc}") from exc
            else:
                props_b = bytes(properties)
            props = decode_properties_bytes(props_b)
        else:
            props_b, props = self._serialise(properties, tags, keys)
        reserved = 0
        if self.enabled_append_prop_crc:
            props_b, props = strip_property_crc(props_b, props)
            reserved = CRC32_RESERVED_LEN
        if len(props_b) + reserved > MAX_PROPERTIES_LENGTH:
            raise ValueError(
                f"properties of {len(props_b) + reserved} bytes exceed the broker's limit of "
                f"{MAX_PROPERTIES_LENGTH} (PROPERTIES_SIZE_EXCEEDED)"
            )
        if type(body) is not bytes:
            if not isinstance(body, (bytes, bytearray, memoryview)):
                raise TypeError(f"body must be bytes-like, got {type(body).__name__}")
            body = bytes(body)
        born, born_v6 = parse_host(born_host if born_host is not None else self.store_host, what="born_host")
        store, store_v6 = (
            self._store_host if store_host is None else parse_host(store_host, what="store_host")
        )
        if born_timestamp is None:
            born_timestamp = time.time_ns() // 1_000_000
        if store_timestamp is None:
            store_timestamp = born_timestamp
        if isinstance(sys_flag, int) and not isinstance(sys_flag, bool):
            v6_bits = (BORNHOST_V6_FLAG if born_v6 else 0) | (STOREHOSTADDRESS_V6_FLAG if store_v6 else 0)
            wrong = (sys_flag & (BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)) & ~v6_bits
            if wrong:
                raise ValueError(
                    f"sys_flag {sys_flag:#x} marks an IPv6 {'born' if wrong & BORNHOST_V6_FLAG else 'store'} "
                    "host but the host given is IPv4"
                )
            sys_flag |= v6_bits
        try:
            record = pack_record(magic, body_crc(body), queue_id, flag, 0, 0, sys_flag, born_timestamp,
                                 born, store_timestamp, store, reconsume_times, prepared_transaction_offset, body,
                                 topic_field, props_b, reserved)
        except struct.error:
            check_int("queue_id", queue_id, 0, _INT32[1])
            check_int("flag", flag, *_INT32)
            check_int("sys_flag", sys_flag, *_INT32)
            check_int("born_timestamp", born_timestamp, *_INT64)
            check_int("store_timestamp", store_timestamp, *_INT64)
            check_int("reconsume_times", reconsume_times, *_INT32)
            check_int("prepared_transaction_offset", prepared_transaction_offset, *_INT64)
            raise
        if queue_id < 0:
            raise ValueError(f"queue_id must be >= 0, got {queue_id}")
        size = len(record)
        if size + END_FILE_MIN_BLANK_LENGTH > self.commit_log_file_size:
            raise ValueError(
                f"a record of {size} bytes cannot fit a commit log file of {self.commit_log_file_size} bytes "
                f"(the broker needs size + {END_FILE_MIN_BLANK_LENGTH} <= file size)"
            )
        transaction = sys_flag & TRANSACTION_TYPE_MASK
        dispatch = transaction == TRANSACTION_NOT_TYPE or transaction == TRANSACTION_COMMIT_TYPE
        code = self.dispatch_tags_code(topic, props, store_timestamp)
        return Prepared(topic, queue_id, record, dispatch, code, store_timestamp, props)

    def dispatch_tags_code(self, topic: str, props: Mapping[str, str], store_timestamp: int) -> int:
        """The tags code the reput service computes from a stored record (docs/formats.md#tagscode-slot)."""
        code = tags_code(props.get(PROPERTY_TAGS))
        if topic == SCHEDULE_TOPIC and PROPERTY_DELAY in props:
            level = self._delay_level(props[PROPERTY_DELAY])
            if level > 0:
                code = store_timestamp + self._delays[level - 1]
        return code

    def _delay_level(self, text: str) -> int:
        """The delay level of a ``SCHEDULE_TOPIC_XXXX`` record's DELAY text, capped at the last level.

        Raises ValueError where the broker's dispatch fails (the text is not a Java int).
        """
        try:
            level = javalang.parse_int(text)
        except javalang.JavaNumberFormatError:
            raise ValueError(
                f"DELAY property {text!r} of a {SCHEDULE_TOPIC} record is not an int; the broker could not dispatch it"
            ) from None
        return min(level, len(self._delays))

    def dispatch_tags_codes(self, columns: MessageColumns, topic_ids: np.ndarray,
                             topics: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`dispatch_tags_code` over decoded records: ``(tags code int64, dispatchable bool)`` per row.

        Parameters
        ----------
        columns : cq.readers.columns.MessageColumns
            Holds ``tags``, ``store_timestamp`` and, when ``topics`` has
            ``SCHEDULE_TOPIC_XXXX``, ``properties``.
        topic_ids, topics : numpy.ndarray, list of str
            The ``topic`` column factorized (:func:`cq.readers.columns.factorize`).

        Returns
        -------
        (numpy.ndarray, numpy.ndarray)
            The codes from the ``tags`` column (:func:`cq.tags.tags_code_utf8`); for
            ``SCHEDULE_TOPIC_XXXX`` rows with a DELAY level, the delivery time, each
            distinct DELAY text parsed once. Dispatchable is False where the broker's
            dispatch fails (a DELAY that is not an int): that record gets no unit.
        """
        c = columns.columns
        codes = tags_code_utf8(*c["tags"]).astype(np.int64)
        ok = np.ones(len(columns), dtype=bool)
        if SCHEDULE_TOPIC not in topics:
            return codes, ok
        rows, value_index, values = property_values(c["properties"], PROPERTY_DELAY,
                                                    topic_ids == topics.index(SCHEDULE_TOPIC))
        stamps = c["store_timestamp"]
        for v, text in enumerate(values):
            sel = rows[value_index == v]
            try:
                level = self._delay_level(text)
            except ValueError:
                ok[sel] = False  # the broker's dispatch fails on such a record: it gets no unit
                continue
            if level > 0:
                codes[sel] = stamps[sel] + self._delays[level - 1]
        return codes, ok

    # ----------------------------------------------------------- writing
    def batch_bitmaps(self, batch: Sequence[Prepared]) -> list[bytes | None]:
        """``CommitLogDispatcherCalcBitMap`` over a batch: the bitmap of each record, or None."""
        out: list[bytes | None] = [None] * len(batch)
        if not self._groups:
            return out
        by_topic: dict[str, list[int]] = {}
        for i, p in enumerate(batch):
            if p.dispatch and self._groups.get(p.topic):
                by_topic.setdefault(p.topic, []).append(i)
        for topic, idx in by_topic.items():
            rows = [batch[i].props for i in idx]
            bitmaps = np.zeros((len(idx), self.bit_map_size), dtype=np.uint8)
            for group in self._groups[topic].values():
                hit = np.asarray(group.selector.matches_many(rows), dtype=bool)
                bitmaps[hit] |= group.bits
            for j, i in enumerate(idx):
                out[i] = bitmaps[j].tobytes()
        return out

    def column_bitmaps(self, topic: str, columns: MessageColumns, rows: np.ndarray) -> np.ndarray | None:
        """:meth:`batch_bitmaps` over decoded records: the columnar form :func:`cq.writer.rebuild.rebuild_bitmaps` uses.

        Parameters
        ----------
        topic : str
            The physical topic of every row in ``rows``.
        columns : cq.readers.columns.MessageColumns
            Decoded records holding ``properties``.
        rows : numpy.ndarray of int
            Rows of ``columns`` that get a unit (NOT_TYPE and COMMIT records of ``topic``).

        Returns
        -------
        numpy.ndarray or None
            ``(len(rows), bit_map_size)`` uint8 bitmaps, row j that of ``rows[j]``;
            None when no group is registered for ``topic`` (the record gets no bitmap).
            Each selector runs over the Arrow ``map<string, string>`` properties
            (``Selector.matches_arrow``), no dict per record; without pyarrow over
            property dicts, as :meth:`batch_bitmaps` does.
        """
        groups = self._groups.get(topic)
        if not groups:
            return None
        bitmaps = np.zeros((len(rows), self.bit_map_size), dtype=np.uint8)
        if not len(rows):
            return bitmaps
        try:
            import pyarrow as pa  # lazy: pyarrow is optional (the spark extra); without it, dicts below
        except ImportError:
            pa = None
        if pa is not None:
            props = columns.arrow("properties")
            # most rows asked for: evaluate every row and pick (cheaper than copying the map with take)
            pick = rows if 2 * len(rows) >= len(columns) else None
            if pick is None and len(rows) < len(columns):
                props = props.take(pa.array(rows))
            for group in groups.values():
                hit = np.asarray(group.selector.matches_arrow(props).to_numpy(zero_copy_only=False), dtype=bool)
                bitmaps[hit if pick is None else hit[pick]] |= group.bits
            return bitmaps
        dicts = columns.dicts()
        props_rows = [dicts[i] for i in rows.tolist()]
        for group in groups.values():
            bitmaps[np.asarray(group.selector.matches_many(props_rows), dtype=bool)] |= group.bits
        return bitmaps

    def _write(self, batch: Sequence[Prepared], *, collect: bool) -> list[AppendResult]:
        self._finish_recovery()
        bitmaps = self.batch_bitmaps(batch)
        results: list[AppendResult] = []
        log = self._commit_log
        for p, bitmap in zip(batch, bitmaps):
            if p.size + END_FILE_MIN_BLANK_LENGTH > log.remaining:
                log.write(_BLANK.pack(log.remaining, BLANK_MAGIC_CODE))
                log.roll()
            phys = log.offset
            queue_offset = None
            state = None
            if p.dispatch:
                state = self.queue_state(p.topic, p.queue_id)
                queue_offset = state.next_offset
            RECORD_OFFSETS_STRUCT.pack_into(p.record, RECORD_OFFSETS_POSITION, queue_offset or 0, phys)
            if self.enabled_append_prop_crc:
                fill_property_crc(p.record)
            log.write(p.record)
            address = None
            if state is not None:
                address = self.dispatch_unit(state, phys, p.size, p.tags_code, p.store_timestamp, bitmap)
            self.messages_written += 1
            if collect:
                results.append(
                    AppendResult(phys, p.size, queue_offset, p.tags_code, address, offset_msg_id(p.record, phys))
                )
        return results

    def dispatch_unit(
        self, state: _QueueState, phys: int, size: int, code: int, store_timestamp: int, bitmap: bytes | None,
        queue_offset: int | None = None,
    ) -> int | None:
        """Build the ext unit and the ConsumeQueue unit of one record; returns the ext address."""
        address = None
        slot = code
        if state.ext is not None:
            bm = bitmap or b""
            unit_size = MIN_EXT_UNIT_SIZE + len(bm)
            ext = state.ext
            if unit_size <= MAX_EXT_UNIT_SIZE and ext.offset + unit_size <= MAX_REAL_OFFSET:
                if unit_size > ext.remaining - EXT_END_BLANK_DATA_LENGTH:
                    ext.write(_EXT_MARKER)
                    ext.roll()
                address = decorate(ext.offset)
                ext.write(EXT_UNIT_HEADER_STRUCT.pack(unit_size, code, store_timestamp, len(bm)) + bm)
                slot = address
        cq = state.cq
        if queue_offset is not None:  # a re-dispatch: the queue continues after this unit's offset
            self._seek_queue(state, queue_offset)
            state.next_offset = queue_offset
        if cq.remaining < CQ_STORE_UNIT_SIZE:
            cq.roll()
        cq.write(_CQ_UNIT.pack(phys, size, slot))
        state.next_offset += 1
        state.started = True
        return address

    def _seek_queue(self, state: _QueueState, queue_offset: int) -> None:
        """Position a queue for a unit with a given offset (re-dispatch of an existing CommitLog).

        The first unit of a queue that starts at a non-zero offset is preceded
        by placeholder units in its file, as the broker fills a first-created
        file; later units are appended at the write position (the broker only
        warns when the offsets disagree).
        """
        if state.started or queue_offset == 0:
            return
        cq = state.cq
        logical = queue_offset * CQ_STORE_UNIT_SIZE
        cq.position_at(logical - logical % cq.file_size, 0)
        filler = _CQ_UNIT.pack(*PLACEHOLDER_UNIT)
        cq.write(filler * ((logical - cq.start) // CQ_STORE_UNIT_SIZE))
        state.next_offset = queue_offset

    def queue_state(self, topic: str, queue_id: int) -> _QueueState:
        """The write state of one queue (its ConsumeQueue and ext file queues), created on first use;
        what :meth:`dispatch_unit` writes to (the batch dispatch of rebuild and recovery uses it)."""
        key = (topic, queue_id)
        state = self._queues.get(key)
        if state is None:
            ext = None
            if self.enable_ext:
                ext = FileQueue(
                    os.path.join(self.root, CONSUME_QUEUE_EXT_DIR, topic, str(queue_id)), self.ext_file_size,
                    after=self._commit_log, flush_all=self._flush_queues,
                )
            cq = FileQueue(
                os.path.join(self.root, CONSUME_QUEUE_DIR, topic, str(queue_id)), self.consume_queue_file_size,
                after=ext if ext is not None else self._commit_log, flush_all=self._flush_queues,
            )
            state = self._queues[key] = _QueueState(cq, ext, 0, False)
        return state

    # ----------------------------------------------------------- append=True
    def _recover(self) -> None:
        """Find the write positions of an existing store, as the broker's recovery does.

        The CommitLog ends where the readers' recovery ends it
        (:attr:`cq.CommitLog.max_offset`: from the third-to-last file, lengths and
        body CRC checked), its torn tail cleared; each ConsumeQueue at its first
        invalid unit, less the units that point past the CommitLog's end; each ext
        queue just past the unit its ConsumeQueue's last unit points at (docs/formats.md#ext-walk).
        Records past the last dispatched one (a writer killed between writing
        a record and its unit) are dispatched again before anything new is
        written, as the broker's reput service does on restart.
        """
        self._commit_log.position_at(*recover_commit_log(
            os.path.join(self.root, COMMIT_LOG_DIR), self.commit_log_file_size
        ))
        # lowest CommitLog offset whose record may lack its unit: past the last unit of every queue
        self._redispatch_from: int | None = self._commit_log.offset
        cq_root = os.path.join(self.root, CONSUME_QUEUE_DIR)
        if not os.path.isdir(cq_root):
            self._redispatch_from = 0
            return
        for topic in sorted(os.listdir(cq_root)):
            topic_dir = os.path.join(cq_root, topic)
            if not os.path.isdir(topic_dir) or not TOPIC_PATTERN.match(topic):
                continue
            for qid in sorted(os.listdir(topic_dir)):
                if not qid.isdigit():
                    continue
                files = list_queue_files(os.path.join(topic_dir, qid))
                if not files:
                    continue
                state = self.queue_state(topic, int(qid))
                start, pos = recover_consume_queue(files, self.consume_queue_file_size)
                start, pos = truncate_consume_queue(files, self.consume_queue_file_size, (start, pos),
                                                     self._commit_log.offset)
                state.cq.position_at(start, pos)
                state.next_offset = (start + pos) // CQ_STORE_UNIT_SIZE
                state.started = True
                last = last_unit(files, start + pos, self.consume_queue_file_size)
                self._redispatch_from = min(self._redispatch_from, last[0] + last[1] if last else 0)
                if state.ext is not None:
                    ext_files = list_queue_files(os.path.join(self.root, CONSUME_QUEUE_EXT_DIR, topic, qid))
                    if ext_files:
                        start, pos = recover_ext(ext_files, self.ext_file_size)
                        if last is not None and is_ext_addr(last[2]):
                            # ConsumeQueue recovery truncates the ext queue past its last referenced unit
                            start, pos = truncate_ext(ext_files, self.ext_file_size, undecorate(last[2]),
                                                       (start, pos))
                        state.ext.position_at(start, pos)
        if self._redispatch_from >= self._commit_log.offset:
            self._redispatch_from = None

    def _finish_recovery(self) -> None:
        """Dispatch the records an interrupted writer left without units (the broker's reput on restart).

        Deferred to the first write or flush so groups registered after
        opening the store get their bits in the re-dispatched ext bitmaps.
        The records are read and decided in :class:`cq.readers.columns.MessageColumns`
        batches (:func:`cq.writer.recovery.redispatch`).
        """
        start = getattr(self, "_redispatch_from", None)
        if start is None:
            return
        self._redispatch_from = None
        with CommitLog(os.path.join(self.root, COMMIT_LOG_DIR), file_size=self.commit_log_file_size) as log:
            redispatch(self, log, start, self._commit_log.offset)


_APPEND_FIELDS = frozenset(
    [
        "topic", "body", "queue_id", "properties", "tags", "keys", "flag", "sys_flag", "born_timestamp",
        "store_timestamp", "born_host", "store_host", "reconsume_times", "prepared_transaction_offset",
    ]
)

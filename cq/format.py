"""The three RocketMQ store file types the broker's filter touches.

This module is the specification in code: constants first, then the numpy
dtypes of the fixed-width records, then small encode/read functions. Every
integer in every file is **big-endian** and signed (docs/formats.md#conventions).

Mapped-file queues (docs/formats.md#mapped-file-queues)
----------------------------
CommitLog, ConsumeQueue and ConsumeQueueExt are each a directory of files of
one size that together form one logical byte space. A file is named by the
logical offset of its first byte, in decimal, zero-padded to 20 digits
(:func:`file_name`, :func:`parse_file_name`); starts are multiples of the file
size and consecutive files differ by exactly one file size. Logical offset X
lives in the file whose start S satisfies ``S <= X < S + size``, at X - S.
Files are created full-size, so never-written bytes are zero.

Layout of a store root::

    {root}/commitlog/{20-digit offset}                          1 GiB files
    {root}/consumequeue/{topic}/{queueId}/{20-digit offset}       6,000,000 B files
    {root}/consumequeue_ext/{topic}/{queueId}/{20-digit offset}   48 MiB files

ConsumeQueue (docs/formats.md#consumequeue)
----------------------
A dense array of 20-byte units, no header: ``commit_log_offset`` int64 (the
record's CommitLog offset), ``size`` int32 (the record's TOTALSIZE) and
``tags_code`` int64 (:data:`CQ_UNIT_DTYPE`). Queue offset q sits at byte
q * 20. A unit is valid iff ``commit_log_offset >= 0 and size > 0``; the first
invalid unit ends the data (offset 0 is a real offset, not an end marker).
Placeholder units ``(0, 2147483647, 0)`` fill the slots before the first real
unit of a queue created at a non-zero offset. The tags_code slot holds the
Java ``String.hashCode`` of TAGS sign-extended (0 without tags), a delivery
time on ``SCHEDULE_TOPIC_XXXX``, or - when ConsumeQueueExt is enabled - an
*ext address* <= :data:`MAX_ADDR`.

ConsumeQueueExt (docs/formats.md#consumequeueext)
-------------------------
Variable-size units, never crossing a file: ``size`` int16 (= 20 +
bitMapSize), ``tags_code`` int64, ``msg_store_time`` int64, ``bit_map_size``
int16, then the Bloom bitmap bytes (:data:`EXT_UNIT_HEADER_DTYPE`). An address
is ``decorate(real_offset) = real_offset - 2**63``; :func:`undecorate` inverts
it. A writer keeps the last :data:`EXT_END_BLANK_DATA_LENGTH` bytes of a file
free and, when a unit does not fit, writes int16 -1 (``FF FF``) and moves on.
A walk reads int16 s: s > 0 is a unit, s <= 0 means "next file".

CommitLog (docs/formats.md#commitlog)
-------------------
Records of TOTALSIZE bytes::

    TOTALSIZE i32 | MAGICCODE i32 | BODYCRC i32 | QUEUEID i32 | FLAG i32 |
    QUEUEOFFSET i64 | PHYSICALOFFSET i64 | SYSFLAG i32 | BORNTIMESTAMP i64 |
    BORNHOST (4 or 16 B + port i32) | STORETIMESTAMP i64 |
    STOREHOST (4 or 16 B + port i32) | RECONSUMETIMES i32 |
    PREPAREDTRANSACTIONOFFSET i64 | BODYLENGTH i32 | BODY |
    TOPICLENGTH (V1: i8, V2: i16) | TOPIC | PROPERTIESLENGTH i16 | PROPERTIES

Magic :data:`MESSAGE_MAGIC_CODE_V1` or :data:`MESSAGE_MAGIC_CODE_V2`; hosts are
IPv6 when SYSFLAG has :data:`BORNHOST_V6_FLAG` / :data:`STOREHOSTADDRESS_V6_FLAG`.
BODYCRC is ``crc32(stored body) & 0x7FFFFFFF``. A record never spans files: when
a record of length L does not satisfy ``L + 8 <= remaining``, the writer puts an
8-byte blank marker (TOTALSIZE = remaining, MAGICCODE = :data:`BLANK_MAGIC_CODE`)
and continues at the next file. Properties are UTF-8 ``name\\x01value\\x02``
pairs (:func:`decode_properties`, :func:`encode_properties`).
"""
from __future__ import annotations

import ipaddress
import mmap
import os
import re
import struct
import zlib
from collections.abc import Iterable, Mapping

import numpy as np

from rmqfilter_java import string_hash

from .errors import StoreFormatError

# ---------------------------------------------------------------- file queues
#: Width of a file name: the 20-digit, zero-padded start offset.
FILE_NAME_LENGTH = 20
#: Default ``mappedFileSizeCommitLog`` (1 GiB).
DEFAULT_COMMIT_LOG_FILE_SIZE = 1024 * 1024 * 1024
#: Default ``mappedFileSizeConsumeQueue`` (300,000 units).
DEFAULT_CONSUME_QUEUE_FILE_SIZE = 300_000 * 20
#: Default ``mappedFileSizeConsumeQueueExt`` (48 MiB).
DEFAULT_EXT_FILE_SIZE = 48 * 1024 * 1024
COMMIT_LOG_DIR = "commitlog"
CONSUME_QUEUE_DIR = "consumequeue"
CONSUME_QUEUE_EXT_DIR = "consumequeue_ext"

# --------------------------------------------------------------- ConsumeQueue
#: ``CQ_STORE_UNIT_SIZE``.
CQ_STORE_UNIT_SIZE = 20
#: ``MSG_TAG_OFFSET_INDEX``: byte offset of the tags_code slot in a unit.
MSG_TAG_OFFSET_INDEX = 12
#: A ConsumeQueue unit as stored (big-endian, packed).
CQ_UNIT_DTYPE = np.dtype([("commit_log_offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])
#: The same record in native byte order, as :meth:`cq.ConsumeQueue.read` returns it.
CQ_UNIT_NATIVE_DTYPE = np.dtype([("commit_log_offset", "=i8"), ("size", "=i4"), ("tags_code", "=i8")])
#: A ConsumeQueue unit as ``struct`` packs it.
CQ_UNIT_STRUCT = struct.Struct(">qiq")
#: Size field of a pre-blank placeholder unit (``Integer.MAX_VALUE``).
PLACEHOLDER_SIZE = 0x7FFFFFFF
#: The placeholder unit ``(commit_log_offset, size, tags_code)``.
PLACEHOLDER_UNIT = (0, PLACEHOLDER_SIZE, 0)

# ------------------------------------------------------------ ConsumeQueueExt
#: ``MAX_ADDR`` = Integer.MIN_VALUE - 1: every value <= this is an ext address.
MAX_ADDR = -(2**31) - 1
#: ``MAX_REAL_OFFSET`` = MAX_ADDR - Long.MIN_VALUE.
MAX_REAL_OFFSET = MAX_ADDR + 2**63
#: ``MIN_EXT_UNIT_SIZE``: size + tagsCode + msgStoreTime + bitMapSize.
MIN_EXT_UNIT_SIZE = 20
#: ``MAX_EXT_UNIT_SIZE`` (Short.MAX_VALUE).
MAX_EXT_UNIT_SIZE = 32767
#: ``END_BLANK_DATA_LENGTH``: bytes an ext writer keeps free at a file's end.
EXT_END_BLANK_DATA_LENGTH = 4
#: The int16 written where a unit did not fit (``FF FF``).
EXT_END_MARKER = -1
#: The fixed 20-byte head of an ext unit (the bitmap follows it).
EXT_UNIT_HEADER_DTYPE = np.dtype(
    [("size", ">i2"), ("tags_code", ">i8"), ("msg_store_time", ">i8"), ("bit_map_size", ">i2")]
)
#: The same head as ``struct`` packs it.
EXT_UNIT_HEADER_STRUCT = struct.Struct(">hqqh")
#: The ``size`` field that opens an ext unit, read alone by the ext walk (docs/formats.md#ext-walk).
EXT_UNIT_SIZE_STRUCT = struct.Struct(">h")

# ---------------------------------------------------------- the 5.x timer (docs/formats.md#timer-files)
#: ``{root}/timerlog/``: a mapped-file queue of 52-byte units (``mappedFileSizeTimerLog``, 100 MiB by default).
TIMER_LOG_DIR = "timerlog"
#: ``{root}/timerwheel``: one file of slots.
TIMER_WHEEL_FILE = "timerwheel"
#: ``{root}/config/timercheck``: the timer's progress.
TIMER_CHECK_FILE = "timercheck"
#: A timerlog unit (``TimerLog.UNIT_SIZE``): the message's CommitLog offset and size, when it was
#: written and due (``write_time_ms + delay_delta``), what kind of unit (``magic``), and the previous
#: unit of the same wheel slot (``prev_pos``, -1 for the first).
TIMER_LOG_UNIT_DTYPE = np.dtype([("size", ">i4"), ("prev_pos", ">i8"), ("magic", ">i4"), ("write_time_ms", ">i8"),
                                 ("delay_delta", ">i4"), ("offset_py", ">i8"), ("size_py", ">i4"),
                                 ("topic_hash", ">i4"), ("reserved", ">i8")])
TIMER_LOG_UNIT_SIZE = TIMER_LOG_UNIT_DTYPE.itemsize
#: ``TimerMessageStore.MAGIC_*``: bits of a unit's ``magic``; a valid magic has no bit above them
#: (``isMagicOK``: ``(magic | 0xF) == 0xF``).
TIMER_MAGIC_DEFAULT, TIMER_MAGIC_ROLL, TIMER_MAGIC_DELETE = 1, 2, 4
TIMER_MAGIC_MASK = 0xF
#: A timerlog file ends with a blank of ``size`` = the bytes left and magic :data:`BLANK_MAGIC_CODE`
#: (``TimerLog.BLANK_MAGIC_CODE`` is the CommitLog's).
#: ``TimerLog.MIN_BLANK_LEN``: size i32, prev pos i64, magic i32.
TIMER_LOG_MIN_BLANK_LEN = 16
#: A wheel slot (``Slot``): its time in precision units, the first and last timerlog unit of the
#: slot, how many messages it holds (a delete marker counts -1), and an unused magic.
TIMER_SLOT_DTYPE = np.dtype([("time", ">i8"), ("first_pos", ">i8"), ("last_pos", ">i8"), ("num", ">i4"),
                             ("magic", ">i4")])
#: ``TIMER_WHEEL_TTL_DAY * DAY_SECS``: the wheel holds twice this many slots, whatever the precision.
TIMER_WHEEL_SLOTS = 7 * 86400
TIMER_WHEEL_FILE_SIZE = 2 * TIMER_WHEEL_SLOTS * TIMER_SLOT_DTYPE.itemsize
#: ``timerPrecisionMs``' default: a slot per second.
TIMER_PRECISION_MS = 1000
#: ``TimerCheckpoint``: four i64 (the time the timer has fired up to, the timerlog's flushed
#: position, the timer topic's queue offset it has enqueued up to, the master's) and the data
#: version (state version, timestamp, counter); the file is one mapped OS page.
TIMER_CHECK_DTYPE = np.dtype([("last_read_time_ms", ">i8"), ("flush_pos", ">i8"), ("last_timer_queue_offset", ">i8"),
                              ("master_timer_queue_offset", ">i8"), ("state_version", ">i8"),
                              ("data_version_timestamp", ">i8"), ("data_version_counter", ">i8")])

# ---------------------------------------------------------- replicas (docs/formats.md#replicas)
#: ``{root}/checkpoint`` (``StoreCheckpoint``): one mapped OS page starting with five i64.
STORE_CHECKPOINT_FILE = "checkpoint"
STORE_CHECKPOINT_DTYPE = np.dtype([("physic_msg_timestamp", ">i8"), ("logics_msg_timestamp", ">i8"),
                                   ("index_msg_timestamp", ">i8"), ("master_flushed_offset", ">i8"),
                                   ("confirm_phy_offset", ">i8")])
#: ``{root}/epochFileCheckpoint`` (controller mode): the epoch entries, text; the broker's previous
#: copy has ``.bak`` (:data:`cq.readers.config.BAK_SUFFIX`).
EPOCH_FILE = "epochFileCheckpoint"
#: ``{root}/brokerIdentity`` (controller mode): ``clusterName#brokerName#brokerId``.
BROKER_IDENTITY_FILE = "brokerIdentity"
BROKER_IDENTITY_SEPARATOR = "#"
#: An epoch entry's line: ``epoch-startOffset``.
EPOCH_ENTRY_SEPARATOR = "-"
#: ``CheckpointFile``'s CRC: ``UtilAll.crc32`` keeps the low 31 bits; 0 means "not checked".
EPOCH_CRC_MASK = 0x7FFFFFFF

# ---------------------------------------------------------- store modes
# Which CommitLog, consume queues and metadata a store root holds (docs/reading.md#store-modes).
#: A DLedger CommitLog lives in ``{root}/dledger-{dLegerSelfId}/data/`` (docs/formats.md#dledger-commitlog).
DLEDGER_DIR_PREFIX = "dledger-"
DLEDGER_DATA_DIR = "data"
#: ``batchconsumequeue/{topic}/{queueId}/``: the BatchCQ of topics whose ``queue.type`` is ``BatchCQ``.
BATCH_CONSUME_QUEUE_DIR = "batchconsumequeue"
#: The topic attribute naming a topic's consume-queue type (``TopicAttributes.QUEUE_TYPE_ATTRIBUTE``).
QUEUE_TYPE_ATTRIBUTE = "queue.type"
QUEUE_TYPE_BATCH = "BatchCQ"
#: A BatchConsumeQueue unit (docs/formats.md#batch-consume-queue): 46 bytes, big-endian: the
#: batch record's CommitLog offset and size, its tags code and store time, the queue offset of its
#: first message (``msgBaseOffset``; queue offsets count messages, not units), its message count,
#: the compacted offset (-1 unless compacted) and 4 reserved bytes.
BCQ_UNIT_DTYPE = np.dtype([("commit_log_offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8"),
                           ("store_timestamp", ">i8"), ("base_offset", ">i8"), ("batch_size", ">i2"),
                           ("compacted_offset", ">i4"), ("reserved", ">i4")])
BCQ_STORE_UNIT_SIZE = BCQ_UNIT_DTYPE.itemsize
#: An inner message of a batch record's body (``MessageDecoder.encodeMessage``): totalSize i32,
#: magic i32, body CRC i32, flag i32, bodyLen i32, then the body, propertiesLen i16 and the
#: properties (docs/formats.md#inner-batch).
INNER_MESSAGE_HEAD_STRUCT = struct.Struct(">iiiii")
INNER_PROPERTIES_LENGTH_STRUCT = struct.Struct(">h")
#: A batch record's own properties: its message count and the queue offset of its first message.
PROPERTY_INNER_NUM = "INNER_NUM"
PROPERTY_INNER_BASE = "INNER_BASE"
#: The compaction store (docs/formats.md#compaction-store): a topic whose ``cleanup.policy`` attribute is
#: ``COMPACTION`` (``TopicAttributes.CLEANUP_POLICY_ATTRIBUTE``) is served from ``compaction/``: per queue,
#: a compaction log (CommitLog records, their PHYSICALOFFSET their compaction log position) in
#: ``compactionLog/{topic}/{queueId}/`` and a sparse compaction CQ of :data:`BCQ_UNIT_DTYPE` units in
#: ``compactionCq/{topic}/{queueId}/``, one CQ file per log file, of the same name; and the position
#: checkpoint, ``{"queueOffsetMap": {"{topic}_{queueId}": offset}}``.
CLEANUP_POLICY_ATTRIBUTE = "cleanup.policy"
CLEANUP_POLICY_COMPACTION = "COMPACTION"
COMPACTION_DIR = "compaction"
COMPACTION_LOG_DIR = "compactionLog"
COMPACTION_CQ_DIR = "compactionCq"
COMPACTION_CHECKPOINT_FILE = "position-checkpoint"
#: Sub-directories of a queue's compaction log and CQ directories (docs/formats.md#compaction-rounds): a
#: compaction round writes its output in ``compacting/``, a slave copies its master's compaction log into
#: ``replicating/``; each is then swapped into the queue's directory, the files it replaces first renamed
#: with :data:`DELETED_FILE_SUFFIX`.
COMPACTING_SUB_DIR = "compacting"
REPLICATING_SUB_DIR = "replicating"
DELETED_FILE_SUFFIX = ".delete"
#: LMQ (docs/formats.md#lmq): queues named ``%LMQ%...`` (one queue, id 0) whose units point at
#: records of other topics; a record names them in ``INNER_MULTI_DISPATCH`` and its offset in each
#: in ``INNER_MULTI_QUEUE_OFFSET`` (both joined by ``,``); their committed offsets are kept in
#: ``config/lmqConsumerOffset.json``.
LMQ_PREFIX = "%LMQ%"
LMQ_QUEUE_ID = 0
PROPERTY_INNER_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"
PROPERTY_INNER_MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"
LMQ_DISPATCH_SEPARATOR = ","


def lmq_offset(properties: Mapping[str, str], queue: str) -> int | None:
    """The offset of a record in LMQ ``queue`` as the broker wrote it in the record's properties
    (``INNER_MULTI_DISPATCH`` / ``INNER_MULTI_QUEUE_OFFSET``), None when it was not dispatched there."""
    names = properties.get(PROPERTY_INNER_MULTI_DISPATCH)
    offsets = properties.get(PROPERTY_INNER_MULTI_QUEUE_OFFSET)
    if not names or not offsets:
        return None
    names_list, offsets_list = names.split(LMQ_DISPATCH_SEPARATOR), offsets.split(LMQ_DISPATCH_SEPARATOR)
    if queue not in names_list or len(offsets_list) != len(names_list):
        return None
    try:
        return int(offsets_list[names_list.index(queue)])
    except ValueError:
        return None
#: A RocksDB database directory holds this file (``consumequeue/CURRENT`` in ``storeType=defaultRocksDB``).
ROCKSDB_CURRENT_FILE = "CURRENT"
#: The RocksDB databases of the broker's metadata, under ``config/`` (v1: one per table; v2: ``rdb``).
ROCKSDB_METADATA_DIRS = ("consumerOffsets", "subscriptionGroups", "topics", "rdb")
#: The RocksDB consume queue (docs/formats.md#rocksdb-consume-queue): a unit's key is
#: topicLen i32, 0x01, topic, 0x01, queueId i32, 0x01, queue offset i64 (big-endian) in the
#: ``default`` column family; its value the 28 bytes below.
ROCKSDB_CQ_SEPARATOR = b"\x01"
ROCKSDB_CQ_VALUE_DTYPE = np.dtype([("commit_log_offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8"),
                                   ("store_timestamp", ">i8")])
#: Each queue's lowest and highest unit: ``offset`` column family, key topicLen i32, 0x01, topic,
#: 0x01, ``min``/``max``, 0x01, queueId i32; value commitLogOffset i64, queue offset i64.
ROCKSDB_CQ_OFFSET_FAMILY = "offset"
ROCKSDB_CQ_MIN, ROCKSDB_CQ_MAX = b"min", b"max"
ROCKSDB_CQ_OFFSET_VALUE_SIZE = 16
#: The family's dispatch checkpoint: a ``max`` key of this topic, queue 0, whose 8-byte value is the
#: CommitLog offset the dispatch has reached (``RMQ_SYS_ROCKSDB_OFFSET_TOPIC``), not a queue.
ROCKSDB_CQ_CHECKPOINT_TOPIC = "CHECKPOINT_TOPIC"
#: Metadata tables in RocksDB: ``consumerOffsets`` keys are ``{topic}@{group}``, values the JSON
#: ``{"offsetTable": {queueId: offset}}``; ``subscriptionGroups`` and ``topics`` keys are the
#: group and topic names, values their JSON settings (the entries of the JSON files' tables).
ROCKSDB_OFFSET_KEY_SEPARATOR = "@"
#: Config v2 (``configManagerVersion=v2``; docs/formats.md#rocksdb-metadata-v2): every metadata table
#: in one database, ``config/rdb``, ``default`` column family. A key is the table prefix (u8), the
#: table id (u16), the record prefix (u8), then the record's own key; every integer big-endian.
ROCKSDB_V2_DIR = "rdb"
ROCKSDB_V2_TABLE_PREFIX = 1
#: Table ids (``TableId``): ``pullOffsets`` holds how far each pull reached, kept by v2 alone.
ROCKSDB_V2_TABLE_IDS = {"consumerOffsets": 1, "pullOffsets": 2, "topics": 3, "subscriptionGroups": 4}
#: Record prefixes: a table's data version record (key suffix ``data_version``, value three i64)
#: and its data records.
ROCKSDB_V2_DATA_VERSION_RECORD, ROCKSDB_V2_DATA_RECORD = 1, 2
#: Offset records (both offset tables): group length u16, group, 0x01, topic length u16, topic,
#: 0x01, queue id i32; value the offset i64. Named records (topics, subscription groups): name
#: length u16, name; value a serialization type byte, then the settings.
ROCKSDB_V2_SEPARATOR = b"\x01"
ROCKSDB_V2_OFFSET_VALUE_SIZE = 8
#: The one serialization type the broker writes and reads: the JSON text of the settings.
ROCKSDB_V2_SERIALIZATION_JSON = 1

# -------------------------------------------------------- DLedger CommitLog
#: A DLedger entry's header (``DLedgerEntry``; docs/formats.md#dledger-entry): magic, size (the
#: whole entry), index, term, pos, channel, chainCrc, bodyCrc, bodyLen; the body (one CommitLog
#: record) follows.
DLEDGER_ENTRY_HEADER_STRUCT = struct.Struct(">iiqqqiiii")
#: ``DLedgerEntry.BODY_OFFSET``: where the record starts inside an entry (48).
DLEDGER_BODY_OFFSET = DLEDGER_ENTRY_HEADER_STRUCT.size
#: ``DLedgerEntryType`` magics: NORMAL (a record), NOOP (no body), CONFIG_CHANGE.
DLEDGER_MAGIC_NORMAL = 1
DLEDGER_MAGIC_NOOP = 2
DLEDGER_MAGIC_CONFIG_CHANGE = 3
DLEDGER_ENTRY_MAGICS = (DLEDGER_MAGIC_NORMAL, DLEDGER_MAGIC_NOOP, DLEDGER_MAGIC_CONFIG_CHANGE)
#: ``MmapFileList.BLANK_MAGIC_CODE``: magic -1 then the blank's size (the rest of the file).
DLEDGER_BLANK_MAGIC_CODE = -1
#: ``MmapFileList.MIN_BLANK_LEN``: an entry always leaves room for a blank (magic + size).
DLEDGER_MIN_BLANK_LEN = 8

# ------------------------------------------------------------------ CommitLog
#: ``MESSAGE_MAGIC_CODE`` (V1, 1-byte topic length) = 0xDAA320A7.
MESSAGE_MAGIC_CODE_V1 = -626843481
#: ``MESSAGE_MAGIC_CODE_V2`` (2-byte topic length) = 0xDAA320AB.
MESSAGE_MAGIC_CODE_V2 = -626843477
#: ``BLANK_MAGIC_CODE`` of the end-of-file marker = 0xCBD43194 (the timerlog's too).
BLANK_MAGIC_CODE = -875286124
#: TOTALSIZE and MAGICCODE, the first 8 bytes of every record and of the blank marker.
RECORD_HEAD_STRUCT = struct.Struct(">ii")
#: TOTALSIZE .. BORNTIMESTAMP, the fixed 48 bytes that open a record (BORNHOST follows).
RECORD_PREFIX_STRUCT = struct.Struct(">iiiiiqqiq")
#: RECONSUMETIMES, PREPAREDTRANSACTIONOFFSET, BODYLENGTH: the fixed 16 bytes after STOREHOST.
RECORD_BODY_HEAD_STRUCT = struct.Struct(">iqi")
#: QUEUEOFFSET and PHYSICALOFFSET, at :data:`RECORD_OFFSETS_POSITION`: a writer fills them last.
RECORD_OFFSETS_STRUCT = struct.Struct(">qq")
#: Byte position of QUEUEOFFSET in a record.
RECORD_OFFSETS_POSITION = 20
#: Byte position of SYSFLAG in a record.
RECORD_SYS_FLAG_POSITION = 36
#: Byte position of BORNHOST in a record (STORETIMESTAMP, then STOREHOST, follow it).
RECORD_BORN_HOST_POSITION = 48
#: Length of the blank end-of-file marker, and the slack the writer keeps.
END_FILE_MIN_BLANK_LENGTH = 8
#: Fixed overhead of a record besides the two hosts, body, topic and properties.
RECORD_FIXED_SIZE = 72
#: Overhead of a V1 record with two IPv4 hosts, empty body, topic and properties.
RECORD_V1_IPV4_OVERHEAD = 91
#: Largest properties text, in bytes (the field is an int16).
MAX_PROPERTIES_LENGTH = 32767

#: The fields of a decoded CommitLog record, in decoder order (``cq/kernels/_decode.pyx``
#: ``decode_columns``; docs/data-path.md): name and kind. ``i4``/``i8``: a fixed
#: int32/int64 field; ``str``/``bin``: variable-length text (UTF-8, malformed bytes
#: replaced by U+FFFD) or bytes; ``map``: the properties. Bit ``1 << i`` of a
#: column mask asks for field ``i``.
RECORD_FIELDS = (
    ("store_size", "i4"), ("magic_code", "i4"), ("body_crc", "i4"), ("queue_id", "i4"), ("flag", "i4"),
    ("queue_offset", "i8"), ("commit_log_offset", "i8"), ("sys_flag", "i4"), ("born_timestamp", "i8"),
    ("born_host", "str"), ("store_timestamp", "i8"), ("store_host", "str"), ("reconsume_times", "i4"),
    ("prepared_transaction_offset", "i8"), ("body", "bin"), ("topic", "str"), ("properties", "map"),
    ("tags", "str"), ("keys", "str"),
)
#: Column mask of every record field.
ALL_RECORD_FIELDS = (1 << len(RECORD_FIELDS)) - 1


def record_field_mask(names) -> int:
    """The column mask asking for the record fields ``names`` (ValueError naming an unknown one)."""
    index = {name: i for i, (name, _) in enumerate(RECORD_FIELDS)}
    mask = 0
    for name in names:
        if name not in index:
            raise ValueError(f"unknown record field {name!r}; fields are {', '.join(index)}")
        mask |= 1 << index[name]
    return mask


# SYSFLAG bits (docs/formats.md#sysflag)
COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
TRANSACTION_TYPE_MASK = 0xC
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
BORNHOST_V6_FLAG = 0x10
STOREHOSTADDRESS_V6_FLAG = 0x20
NEED_UNWRAP_FLAG = 0x40
INNER_BATCH_FLAG = 0x80
COMPRESSION_TYPE_MASK = 0x700
#: The compression type is ``(sys_flag & COMPRESSION_TYPE_MASK) >> COMPRESSION_TYPE_SHIFT``.
COMPRESSION_TYPE_SHIFT = 8
#: Type 0: bodies written before the type bits existed, ZLIB (docs/formats.md#body-compression).
COMPRESSION_ZLIB_LEGACY = 0
COMPRESSION_LZ4 = 1
COMPRESSION_ZSTD = 2
COMPRESSION_ZLIB = 3
#: The types whose bodies are ZLIB streams (RFC 1950).
ZLIB_COMPRESSION_TYPES = (COMPRESSION_ZLIB_LEGACY, COMPRESSION_ZLIB)


def compression_type(sys_flag: int) -> int:
    """The compression type bits of ``sys_flag`` (meaningful only with ``COMPRESSED_FLAG``)."""
    return (sys_flag & COMPRESSION_TYPE_MASK) >> COMPRESSION_TYPE_SHIFT

# Properties text (docs/formats.md#properties)
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
PROPERTY_TAGS = "TAGS"
PROPERTY_KEYS = "KEYS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_DELAY = "DELAY"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_CRC32 = "__CRC32#"
#: ``CRC32_RESERVED_LEN``: bytes the optional record-CRC property takes at a record's end.
CRC32_RESERVED_LEN = 20
KEY_SEPARATOR = " "
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
# The paths a message takes besides its topic (docs/paths.md): system topics and the
# properties the broker adds when it moves a message there.
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
TIMER_TOPIC = "rmq_sys_wheel_timer"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
#: The tag of a transaction op record (its body: the half's queue offsets joined by ",").
TRANS_OP_TAG = "d"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
#: A timer recall's marker (docs/paths.md#timers): ``{REAL_TOPIC}+{UNIQ_KEY}`` of the recalled message
#: (5.3.x), or its bare ``UNIQ_KEY`` (5.4+ unless ``appendTopicForTimerDeleteKey``): :func:`timer_delete_keys`.
PROPERTY_TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
TIMER_DEL_KEY_SEPARATOR = "+"
# POP consumption (docs/paths.md#pop): the broker's revive log, one topic per cluster, holds the
# checkpoints (a pop: which offsets, when, for how long) and the acks, as JSON bodies.
REVIVE_TOPIC_PREFIX = "rmq_sys_REVIVE_LOG_"
#: The broker's revive service: its committed offset on a revive queue is the last record it processed.
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"
POP_CK_TAG, POP_ACK_TAG, POP_BATCH_ACK_TAG = "ck", "ack", "bAck"
#: A POP group's retry topic: ``%RETRY%{group}{sep}{topic}``, ``_`` (v1) or ``+`` (``enableRetryTopicV2``).
POP_RETRY_SEPARATORS = ("_", "+")
#: Checkpoint JSON fields: start offset, pop time, invisible time, ack bitmap, count, queue id,
#: topic, group, offset deltas (offset i = start + d[i]), broker name.
CK_START_OFFSET, CK_POP_TIME, CK_INVISIBLE_TIME, CK_BITMAP, CK_NUM = "so", "pt", "it", "bm", "n"
CK_QUEUE_ID, CK_TOPIC, CK_GROUP, CK_OFFSET_DIFFS, CK_BROKER_NAME = "q", "t", "c", "d", "bn"
#: Ack JSON fields besides the checkpoint's (t, c, q, so, pt, bn): the acked offset, or a batch
#: ack's list; each with the long name fastjson also reads.
ACK_OFFSET, BATCH_ACK_OFFSETS = "ao", "aol"
ACK_LONG_NAMES = {"ao": "ackOffset", "so": "startOffset", "c": "consumerGroup", "t": "topic", "q": "queueId",
                  "pt": "popTime", "bn": "brokerName", "aol": "ackOffsetList"}

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")
_NAME_RE = re.compile(r"[0-9]{20}\Z")


# ----------------------------------------------------------- file name rules
def file_name(offset: int) -> str:
    """The 20-digit name of the file that starts at logical ``offset``."""
    if offset < 0:
        raise ValueError(f"file start offset must be >= 0, got {offset}")
    return f"{offset:020d}"


def parse_file_name(name: str) -> int | None:
    """Start offset encoded in a file name, or None if ``name`` is not a store file name."""
    if not _NAME_RE.match(name):
        return None
    value = int(name)
    return value if value < 2**63 else None


def round_consume_queue_file_size(configured: int) -> int:
    """Effective ConsumeQueue file size: ``configured`` rounded up to a multiple of 20."""
    return -(-configured // CQ_STORE_UNIT_SIZE) * CQ_STORE_UNIT_SIZE


# -------------------------------------------------------- ext address algebra
def is_ext_addr(value: int) -> bool:
    """``isExtAddr``: True iff ``value`` (a tags_code slot) is an ext address (<= MAX_ADDR)."""
    return value <= MAX_ADDR


def decorate(real_offset: int) -> int:
    """``decorate``: the ext address of byte ``real_offset`` of the ext queue (offset - 2**63).

    Values that already are ext addresses are returned unchanged.
    """
    if real_offset <= MAX_ADDR:
        return real_offset
    return (real_offset % 2**64) - 2**63 if real_offset >= 0 else real_offset + 2**63  # int64 wrap


def undecorate(address: int) -> int:
    """``unDecorate``: the ext queue byte offset of an ext address; other values unchanged."""
    if address <= MAX_ADDR:
        return address + 2**63
    return address


# ------------------------------------------------------------- encode units
def encode_cq_unit(commit_log_offset: int, size: int, tags_code: int) -> bytes:
    """The 20 bytes of one ConsumeQueue unit."""
    return CQ_UNIT_STRUCT.pack(commit_log_offset, size, tags_code)


def encode_ext_unit(tags_code: int, msg_store_time: int, filter_bitmap: bytes | None = None) -> bytes:
    """The bytes of one ConsumeQueueExt unit (20 bytes, plus the bitmap if any)."""
    bitmap = bytes(filter_bitmap or b"")
    size = MIN_EXT_UNIT_SIZE + len(bitmap)
    if size > MAX_EXT_UNIT_SIZE:
        raise ValueError(f"ext unit of {size} bytes exceeds MAX_EXT_UNIT_SIZE={MAX_EXT_UNIT_SIZE}")
    return EXT_UNIT_HEADER_STRUCT.pack(size, tags_code, msg_store_time, len(bitmap)) + bitmap


def decode_ext_head(buf, pos: int) -> tuple[int, int, int, int]:
    """``(size, tags_code, msg_store_time, bit_map_size)`` of the ext unit at ``pos`` of ``buf``."""
    return EXT_UNIT_HEADER_STRUCT.unpack_from(buf, pos)


# ------------------------------------------------------- properties text
def decode_properties(text: str) -> dict[str, str]:
    """``string2messageProperties``: parse a properties string as the broker does.

    Split at U+0002 (a missing final separator is fine), ignore segments shorter
    than 3 characters, split each at its first U+0001; key and value must both be
    non-empty, otherwise the segment is ignored. Later duplicates win.
    """
    props: dict[str, str] = {}
    for segment in text.split(PROPERTY_SEPARATOR):
        if len(segment) < 3:
            continue
        key, sep, value = segment.partition(NAME_VALUE_SEPARATOR)
        if sep and key and value:
            props[key] = value
    return props


def decode_properties_bytes(data: bytes) -> dict[str, str]:
    """Decode stored properties bytes (UTF-8, malformed input replaced with U+FFFD)."""
    return decode_properties(bytes(data).decode("utf-8", "replace"))


java_string_hash = string_hash
"""Java ``String.hashCode`` of a string over UTF-16 code units, as a signed int32
(:func:`rmqfilter_java.string_hash`, the home of the rule)."""


def hashmap_order(keys: Iterable[str]) -> list[str]:
    """``keys`` in the iteration order of a Java ``HashMap`` created with capacity 128.

    The broker re-serialises properties from such a map (docs/formats.md#properties): buckets in
    index order, ``(h ^ (h >>> 16)) & (table - 1)`` with h = ``String.hashCode``,
    insertion order within a bucket. The table doubles past 0.75 load. Derived
    from JDK behaviour (UNVERIFIED upstream); bucket treeification (8+ collisions
    in one bucket) is not modelled.
    """
    keys = list(dict.fromkeys(keys))
    table = 128
    while len(keys) > table * 3 // 4:
        table *= 2

    def bucket(key: str) -> int:
        h = java_string_hash(key) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (table - 1)

    return sorted(keys, key=bucket)  # sorted() is stable: insertion order within a bucket


def encode_properties(properties: Mapping[str, str | None], *, order: str = "given") -> str:
    """``messageProperties2String``: ``name\\x01value\\x02`` for each pair, None values skipped.

    ``order="hashmap"`` orders the pairs as the broker's HashMap iterates them
    (:func:`hashmap_order`); ``"given"`` keeps the mapping's order.
    """
    if order not in ("given", "hashmap"):
        raise ValueError(f"order must be 'given' or 'hashmap', got {order!r}")
    names = list(properties)
    if order == "hashmap":
        names = hashmap_order(names)
    return "".join(
        f"{k}{NAME_VALUE_SEPARATOR}{properties[k]}{PROPERTY_SEPARATOR}"
        for k in names
        if properties[k] is not None
    )


# ---------------------------------------------------------------- hosts
def host_width(sys_flag: int, *, store: bool) -> int:
    """Bytes taken by the born (``store=False``) or store host for this SYSFLAG: 8 or 20."""
    flag = STOREHOSTADDRESS_V6_FLAG if store else BORNHOST_V6_FLAG
    return 20 if sys_flag & flag else 8


def decode_host(raw: bytes) -> str:
    """``"ip:port"`` (IPv4) or ``"[ipv6]:port"`` from 8 or 20 stored bytes."""
    port = _I32.unpack_from(raw, len(raw) - 4)[0]
    if len(raw) == 8:
        return f"{ipaddress.IPv4Address(bytes(raw[:4]))}:{port}"
    return f"[{ipaddress.IPv6Address(bytes(raw[:16]))}]:{port}"


_HOSTS: dict[str, tuple[bytes, bool]] = {}


def parse_host(host: str, *, what: str = "host", any_port: bool = False) -> tuple[bytes, bool]:
    """Stored bytes of ``"ip:port"`` or ``"[ipv6]:port"`` and whether it is IPv6.

    The address, then the port as int32. A writer's hosts must have a port in
    0..65535; ``any_port=True`` accepts any int32 port, as a stored record may
    hold (:func:`decode_host` output round-trips). Results are cached (a writer
    parses the same few hosts for every record).

    Raises
    ------
    ValueError
        ``host`` is not an IPv4 ``ip:port`` or a bracketed IPv6 ``[ip]:port``
        with a port in range; the message names ``what``.
    """
    cached = _HOSTS.get(host)
    if cached is not None:
        return cached
    if not isinstance(host, str):
        raise TypeError(f"{what} must be a str 'ip:port', got {type(host).__name__}")
    addr, sep, port_s = host.rpartition(":")
    digits = port_s[1:] if any_port and port_s[:1] == "-" else port_s
    port = int(port_s) if sep and digits.isascii() and digits.isdigit() else None
    if port is None or not (-(2**31) <= port < 2**31 if any_port else port <= 65535):
        raise ValueError(f"{what} {host!r} is not 'ip:port' with a port in "
                         f"{'the int32 range' if any_port else '0..65535'}")
    try:
        if addr.startswith("[") and addr.endswith("]"):
            ip: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.IPv6Address(addr[1:-1])
        else:
            ip = ipaddress.IPv4Address(addr)
    except ValueError as exc:
        raise ValueError(f"{what} {host!r}: {exc} (IPv6 hosts are written '[ip]:port')") from exc
    out = (ip.packed + _I32.pack(port), ip.version == 6)
    if len(_HOSTS) < 4096 and 0 <= port <= 65535:  # only what every caller accepts is cached
        _HOSTS[host] = out
    return out


def encode_host(host: str) -> bytes:
    """Stored bytes of ``"ip:port"`` / ``"[ipv6]:port"`` (address, then int32 port); see :func:`parse_host`.

    Any int32 port is accepted, so a stored host read by :func:`decode_host` encodes back.
    """
    return parse_host(host, any_port=True)[0]


def offset_msg_id(store_host: str, commit_log_offset: int) -> str:
    """The broker's offset message id: the store host's bytes then the CommitLog offset (int64), upper-case hex
    (docs/config-and-index.md#message-ids)."""
    return (encode_host(store_host) + struct.pack(">q", commit_log_offset)).hex().upper()


def body_crc(body: bytes) -> int:
    """BODYCRC: CRC-32 of the stored body with the sign bit cleared."""
    return zlib.crc32(body) & 0x7FFFFFFF


def record_size(
    *, magic_code: int, sys_flag: int, body_length: int, topic_length: int, properties_length: int
) -> int:
    """TOTALSIZE of a record from its variable parts (docs/formats.md#commitlog-record)."""
    topic_len_size = 2 if magic_code == MESSAGE_MAGIC_CODE_V2 else 1
    return (
        RECORD_FIXED_SIZE
        + host_width(sys_flag, store=False)
        + host_width(sys_flag, store=True)
        + max(body_length, 0)
        + topic_len_size
        + topic_length
        + 2
        + max(properties_length, 0)
    )


def encode_topic_field(topic: bytes, magic_code: int) -> bytes:
    """TOPICLENGTH then TOPIC: a 1-byte length in a V1 record, an int16 in a V2 record."""
    if magic_code == MESSAGE_MAGIC_CODE_V2:
        return _I16.pack(len(topic)) + topic
    return bytes([len(topic)]) + topic


def pack_record(
    magic_code: int,
    body_crc: int,
    queue_id: int,
    flag: int,
    queue_offset: int,
    commit_log_offset: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    store_timestamp: int,
    store_host: bytes,
    reconsume_times: int,
    prepared_transaction_offset: int,
    body: bytes,
    topic_field: bytes,
    properties: bytes,
    reserved: int = 0,
) -> bytearray:
    """Lay out one CommitLog record from its encoded parts (``MessageExtEncoder``, docs/formats.md#commitlog-record).

    The one place the record layout is written. Fields are positional and
    unchecked, because :class:`cq.writer.writer.StoreWriter` calls this per message:
    hosts are :func:`parse_host` bytes, ``topic_field`` is
    :func:`encode_topic_field`'s, ``properties`` the UTF-8 text. ``reserved``
    zero bytes end the properties (``__CRC32#`` is filled in there once the
    record's offsets are known, docs/formats.md#record-crc-property). An int out of its field's range
    raises ``struct.error``; :func:`encode_record` is the checked entry point.
    """
    properties_length = len(properties) + reserved
    total = (
        RECORD_PREFIX_STRUCT.size + len(born_host) + 8 + len(store_host) + RECORD_BODY_HEAD_STRUCT.size
        + len(body) + len(topic_field) + 2 + properties_length
    )
    record = bytearray(b"".join((
        RECORD_PREFIX_STRUCT.pack(total, magic_code, body_crc, queue_id, flag, queue_offset, commit_log_offset,
                                  sys_flag, born_timestamp),
        born_host,
        _I64.pack(store_timestamp),
        store_host,
        RECORD_BODY_HEAD_STRUCT.pack(reconsume_times, prepared_transaction_offset, len(body)),
        body,
        topic_field,
        _I16.pack(properties_length),
        properties,
    )))
    if reserved:
        record += bytes(reserved)
    return record


def encode_record(
    *,
    topic: str,
    body: bytes,
    properties: Mapping[str, str] | str,
    queue_id: int = 0,
    flag: int = 0,
    queue_offset: int = 0,
    commit_log_offset: int = 0,
    sys_flag: int = 0,
    born_timestamp: int = 0,
    born_host: str = "127.0.0.1:0",
    store_timestamp: int = 0,
    store_host: str = "127.0.0.1:10911",
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    magic_code: int | None = None,
) -> bytes:
    """The bytes of one CommitLog record (``MessageExtEncoder`` layout, docs/formats.md#commitlog-record).

    ``properties`` is a mapping (encoded in its order) or the ready-made text.
    ``magic_code`` defaults to V2 for topics longer than 127 UTF-16 units, else V1
    (``autoMessageVersionOnTopicLen``). Host families must agree with
    ``sys_flag``'s IPv6 bits. The layout is :func:`pack_record`'s.
    """
    if magic_code is None:
        magic_code = MESSAGE_MAGIC_CODE_V2 if len(topic.encode("utf-16-le")) // 2 > 127 else MESSAGE_MAGIC_CODE_V1
    if magic_code not in (MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2):
        raise ValueError(f"magic_code must be V1 or V2, got {magic_code:#x}")
    props_text = properties if isinstance(properties, str) else encode_properties(properties)
    props = props_text.encode("utf-8")
    topic_b = topic.encode("utf-8")
    if len(props) > MAX_PROPERTIES_LENGTH:
        raise ValueError(f"properties of {len(props)} bytes exceed {MAX_PROPERTIES_LENGTH}")
    if magic_code == MESSAGE_MAGIC_CODE_V1 and len(topic_b) > 127:
        raise ValueError(f"topic of {len(topic_b)} bytes does not fit a V1 record")
    born = encode_host(born_host)
    store = encode_host(store_host)
    if len(born) != host_width(sys_flag, store=False) or len(store) != host_width(sys_flag, store=True):
        raise ValueError("host address family disagrees with the SYSFLAG IPv6 bits")
    body = bytes(body)
    out = pack_record(
        magic_code, body_crc(body), queue_id, flag, queue_offset, commit_log_offset, sys_flag, born_timestamp,
        born, store_timestamp, store, reconsume_times, prepared_transaction_offset, body,
        encode_topic_field(topic_b, magic_code), props,
    )
    assert len(out) == record_size(
        magic_code=magic_code, sys_flag=sys_flag, body_length=len(body), topic_length=len(topic_b),
        properties_length=len(props),
    )
    return bytes(out)


def encode_property_crc(crc: int) -> str:
    """The ``__CRC32#`` value for ``crc``: ten decimal digits, least significant first (docs/formats.md#record-crc-property)."""
    if not 0 <= crc <= 0x7FFFFFFF:
        raise ValueError(f"record CRC must be in [0, 2**31), got {crc}")
    return str(crc)[::-1].ljust(10, "0")


def decode_property_crc(value: str) -> int | None:
    """The CRC a ``__CRC32#`` value encodes (digits read last to first), or None if not digits."""
    if not value or not all("0" <= ch <= "9" for ch in value):
        return None
    return int(value[::-1])


def timer_delete_key(real_topic: str, uniq_key: str) -> str:
    """``TimerMessageStore.buildDeleteKey`` of 5.3.x: the ``TIMER_DEL_UNIQKEY`` of a recall of ``uniq_key`` in ``real_topic``."""
    return f"{real_topic}{TIMER_DEL_KEY_SEPARATOR}{uniq_key}"


def timer_delete_keys(real_topic: str, uniq_key: str) -> tuple[str, str]:
    """Every ``TIMER_DEL_UNIQKEY`` that recalls ``uniq_key`` in ``real_topic`` (docs/paths.md#timers):
    ``{topic}+{UNIQ_KEY}`` (5.3.x, and 5.4+ with ``appendTopicForTimerDeleteKey=true``) and the bare
    ``UNIQ_KEY`` (5.4+ by default). The broker builds the marker and the key it matches the slot's
    messages with by one setting, so a marker of either form names the message."""
    return timer_delete_key(real_topic, uniq_key), uniq_key


def encode_blank_record(remaining: int) -> bytes:
    """The 8-byte end-of-file marker for a file with ``remaining`` bytes left."""
    return RECORD_HEAD_STRUCT.pack(remaining, BLANK_MAGIC_CODE)


# ------------------------------------------------------------ file access
def map_file(path: str | os.PathLike) -> memoryview:
    """Map a store file read-only (``mmap.ACCESS_READ``); an empty file maps to ``b""``."""
    return map_file_identity(path)[0]


def file_identity(st: os.stat_result) -> tuple[int, int, int]:
    """``(device, inode, size)``: which file a path named when it was mapped (docs/live.md#cached-readers).

    Store files are created at their full size and only appended into, so a
    different triple at the same path is a different file (replaced, or the
    store rewritten), whatever a writer appended meanwhile.
    """
    return st.st_dev, st.st_ino, st.st_size


def map_file_identity(path: str | os.PathLike) -> tuple[memoryview, tuple[int, int, int]]:
    """:func:`map_file`, and the :func:`file_identity` of the file mapped (from the open descriptor)."""
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        if st.st_size == 0:
            return memoryview(b""), file_identity(st)
        return memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)), file_identity(st)


def release_maps(maps: dict) -> None:
    """Close mapped files that nothing else still views; the rest close when collected."""
    for m in maps.values():
        obj = m.obj
        try:
            m.release()
            if hasattr(obj, "close"):
                obj.close()
        except BufferError:  # an array returned to the caller still views the map
            pass
    maps.clear()


def list_queue_files(directory: str | os.PathLike) -> list[tuple[int, str]]:
    """``(start_offset, path)`` of every store file in ``directory``, ascending.

    Names that are not 20 decimal digits are ignored (the broker only lists
    its own files); a missing directory gives an empty list.
    """
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        start = parse_file_name(name)
        path = os.path.join(directory, name)
        if start is not None and os.path.isfile(path):
            out.append((start, path))
    out.sort()
    return out


def check_queue_files(
    files: list[tuple[int, str]], file_size: int | None, *, kind: str, unit: int = 1, contiguous: bool = True,
    size_of=os.path.getsize,
) -> tuple[list[tuple[int, str]], int]:
    """Validate a mapped-file queue as the broker's load does; returns ``(files, file_size)``.

    A trailing 0-byte file is dropped. ``file_size`` defaults to the size most
    files share. Every file must have that size, start at a multiple of it, and
    follow its predecessor by exactly one file size; otherwise
    :class:`StoreFormatError` names the file. ``contiguous=False`` (the compaction store's files,
    docs/formats.md#compaction-store): the sizes alone are checked, names may skip and need not be
    multiples of the size. ``size_of(path)`` gives a file's size (an object store's listing,
    docs/object-storage.md#a-snapshot).
    """
    files = list(files)
    if files and size_of(files[-1][1]) == 0:
        files.pop()
    if not files:
        return files, file_size or 0
    if file_size is None:
        # the size most files share (ties: the larger), so one truncated file is named as such
        sizes = [size_of(p) for _, p in files]
        file_size = max(set(sizes), key=lambda s: (sizes.count(s), s))
    if file_size <= 0 or file_size % unit:
        raise StoreFormatError(
            f"{kind} file size {file_size} is not a positive multiple of {unit}", files[0][1], 0
        )
    prev = None
    for start, path in files:
        actual = size_of(path)
        if actual != file_size:
            raise StoreFormatError(
                f"{kind} file is {actual} bytes, expected {file_size} like the others "
                "(truncated or foreign file)",
                path,
                min(actual, file_size),
            )
        if not contiguous:
            continue
        if start % file_size:
            raise StoreFormatError(f"{kind} file start {start} is not a multiple of {file_size}", path, 0)
        if prev is not None and start != prev + file_size:
            raise StoreFormatError(f"{kind} files are not contiguous: expected start {prev + file_size}", path, 0)
        prev = start
    return files, file_size


# ---------------------------------------------------------- releases after 5.3.3
# What RocketMQ 5.4 and 5.5 write that 5.3.3 did not (docs/formats.md#releases-after-533).
#: RIP-82 (5.4.0+): every broker opens a RocksDB database at ``{root}/rocksdbstore/`` at start-up,
#: whatever its settings; its column families hold the index (``default``, with
#: ``indexRocksDBEnable``), the timer's timeline (``timer``, ``timerRocksDBEnable``) and the
#: transaction halves (``trans``, ``transRocksDBEnable``); each is empty unless its setting is on.
MESSAGE_ROCKSDB_DIR = "rocksdbstore"
MESSAGE_ROCKSDB_FAMILIES = {"default": "indexRocksDBEnable", "timer": "timerRocksDBEnable",
                            "trans": "transRocksDBEnable"}
#: The release that introduced the message RocksDB (RIP-82).
MESSAGE_ROCKSDB_RELEASE = "5.4.0"
#: ``transRocksDBEnable`` (5.4.0+): transaction halves and op records go to these topics instead of
#: ``RMQ_SYS_TRANS_HALF_TOPIC`` / ``RMQ_SYS_TRANS_OP_HALF_TOPIC``, resolved through the ``trans`` family.
ROCKSDB_TRANS_HALF_TOPIC = "RMQ_SYS_ROCKSDB_TRANS_HALF_TOPIC"
ROCKSDB_TRANS_OP_HALF_TOPIC = "RMQ_SYS_ROCKSDB_TRANS_OP_HALF_TOPIC"
#: The topic attribute naming a topic's message type (``TopicAttributes.TOPIC_MESSAGE_TYPE_ATTRIBUTE``),
#: and the values later releases added to it, each with the release that added it: a broker before
#: that release refuses the value, so a topic table holding it was written by that release or later.
MESSAGE_TYPE_ATTRIBUTE = "message.type"
MESSAGE_TYPE_RELEASES = {"PRIORITY": "5.4.0", "LITE": "5.5.0"}
#: From 5.5.1 a broker with ``enableCalcFilterBitMap=false`` persists SQL92 registrations without
#: ``bloomFilterData``; every earlier release wrote it (docs/config-and-index.md#no-bloom-data).
NO_BLOOM_DATA_RELEASE = "5.5.1"
#: RIP-80 (5.4.0+): a priority message's priority; the broker stores it in queue
#: ``min(priority, writeQueueNums - 1)`` of its topic, an ordinary unit of an ordinary queue.
PROPERTY_PRIORITY = "_SYS_MSG_PRIORITY_"
#: RIP-83 (5.5.0+): a Lite topic's messages name it here; the broker dispatches each to the LMQ
#: queue ``%LMQ%$<parentTopic>$<liteTopic>`` (``INNER_MULTI_DISPATCH``).
PROPERTY_LITE_TOPIC = "__LITE_TOPIC"
LITE_QUEUE_PREFIX = LMQ_PREFIX + "$"

# The store layout as C constants: _layout.h, written by setup.py from cq/format.py through
# cq/kernels/layout.py (the one home of every offset below; see that module for each).
from libc.stdint cimport int64_t

cdef extern from "_layout.h":
    # ConsumeQueue unit
    enum: RMQ_CQ_UNIT_SIZE          # bytes of a unit
    enum: RMQ_CQ_PHYS               # offset of its big-endian int64 commit_log_offset
    enum: RMQ_CQ_SIZE               # offset of its big-endian int32 size
    enum: RMQ_CQ_TAG_LOW            # offset of the low 32 bits of its big-endian tags_code
    # ConsumeQueueExt unit head (the bitmap follows it)
    enum: RMQ_EXT_SIZE              # offset of the int16 unit size
    enum: RMQ_EXT_SIZE_WIDTH        # bytes of the size field
    enum: RMQ_EXT_TAGS_CODE         # offset of the int64 tags code
    enum: RMQ_EXT_STORE_TIME        # offset of the int64 msgStoreTime
    enum: RMQ_EXT_BITMAP_SIZE       # offset of the int16 bitMapSize
    enum: RMQ_EXT_HEAD              # bytes of the head (MIN_EXT_UNIT_SIZE)
    int64_t RMQ_MAX_ADDR            # every value <= this is an ext address
    # CommitLog record: the fixed prefix, each field's offset from the record's start
    enum: RMQ_REC_HEAD              # TOTALSIZE + MAGICCODE: the bytes every record and blank marker open with
    enum: RMQ_REC_TOTAL
    enum: RMQ_REC_MAGIC
    enum: RMQ_REC_BODY_CRC
    enum: RMQ_REC_QUEUE_ID
    enum: RMQ_REC_FLAG
    enum: RMQ_REC_QUEUE_OFFSET
    enum: RMQ_REC_PHYS
    enum: RMQ_REC_SYS_FLAG
    enum: RMQ_REC_BORN_TS
    enum: RMQ_REC_BORN_HOST         # BORNHOST: address, port; STORETIMESTAMP; STOREHOST: address, port
    enum: RMQ_IPV4_WIDTH            # address bytes of an IPv4 host
    enum: RMQ_IPV6_WIDTH            # address bytes of an IPv6 host (SYSFLAG's V6 bit)
    enum: RMQ_PORT_WIDTH            # bytes of a host's int32 port
    enum: RMQ_STORE_TS_WIDTH        # bytes of STORETIMESTAMP
    enum: RMQ_REC_TAIL              # RECONSUMETIMES, PREPAREDTRANSACTIONOFFSET, BODYLENGTH after STOREHOST
    enum: RMQ_REC_TAIL_PREPARED     # offset of PREPAREDTRANSACTIONOFFSET in that tail
    enum: RMQ_REC_TAIL_BODY_LEN     # offset of BODYLENGTH in that tail
    enum: RMQ_REC_MIN_SIZE          # the smallest record (V1, IPv4 hosts, nothing else)
    enum: RMQ_MAGIC_V1              # MAGICCODE of a record with a 1-byte topic length
    enum: RMQ_MAGIC_V2              # MAGICCODE of a record with a 2-byte topic length
    enum: RMQ_MAGIC_BLANK           # MAGICCODE of the end-of-file marker
    enum: RMQ_BORN_V6_FLAG          # SYSFLAG bit: the born host is IPv6
    enum: RMQ_STORE_V6_FLAG         # SYSFLAG bit: the store host is IPv6
    # properties text
    enum: RMQ_NAME_VALUE_SEP        # the byte between a key and its value
    enum: RMQ_PROPERTY_SEP          # the byte after each entry
    const char* RMQ_PROPERTY_TAGS   # the TAGS key
    const char* RMQ_PROPERTY_KEYS   # the KEYS key
    # body compression (SYSFLAG)
    enum: RMQ_COMPRESSED_FLAG
    enum: RMQ_COMPRESSION_TYPE_MASK
    enum: RMQ_COMPRESSION_TYPE_SHIFT
    enum: RMQ_COMPRESSION_ZLIB_LEGACY
    enum: RMQ_COMPRESSION_ZLIB
    # DLedger entry header: each field's offset from the entry's start, then the body (a record)
    enum: RMQ_DLEDGER_MAGIC
    enum: RMQ_DLEDGER_SIZE          # int32: the whole entry
    enum: RMQ_DLEDGER_INDEX         # int64: the entry's index (one more than the entry before)
    enum: RMQ_DLEDGER_TERM          # int64: the leader's term (never below the entry before's)
    enum: RMQ_DLEDGER_POS           # int64: the entry's own offset in the log
    enum: RMQ_DLEDGER_BODY_LEN      # int32
    enum: RMQ_DLEDGER_BODY          # bytes of the header: where the record starts
    enum: RMQ_DLEDGER_MAGIC_NORMAL  # an entry holding a record
    enum: RMQ_DLEDGER_MAGIC_NOOP
    enum: RMQ_DLEDGER_MAGIC_CONFIG_CHANGE
    enum: RMQ_DLEDGER_BLANK         # magic of the blank that fills a file's end
    enum: RMQ_DLEDGER_MIN_BLANK     # bytes an entry leaves for a blank
    # an inner message of a batch record's body (docs/formats.md#inner-batch)
    enum: RMQ_INNER_TOTAL           # offset of the int32 totalSize
    enum: RMQ_INNER_BODY_CRC        # offset of the int32 body CRC
    enum: RMQ_INNER_FLAG            # offset of the int32 flag
    enum: RMQ_INNER_BODY_LEN        # offset of the int32 body length (the body follows the head)
    enum: RMQ_INNER_HEAD            # bytes of the head
    enum: RMQ_INNER_PROPS_LEN_WIDTH # bytes of the int16 properties length after the body

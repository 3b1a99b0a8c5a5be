# The CommitLog record walk's shared part (_record.pyx): one record's layout, parsed and
# validated as the broker validates it. _parse is inline: the decoder (_decode.pyx) parses
# each record with its own copy, on its hot path; the offsets come from _layout.h.
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t

from ._bytes cimport rmq_load_be16, rmq_load_be32
from ._layout cimport (RMQ_BORN_V6_FLAG, RMQ_IPV4_WIDTH, RMQ_IPV6_WIDTH, RMQ_MAGIC_BLANK, RMQ_MAGIC_V1,
                       RMQ_MAGIC_V2, RMQ_PORT_WIDTH, RMQ_REC_BORN_HOST, RMQ_REC_HEAD, RMQ_REC_MAGIC,
                       RMQ_REC_MIN_SIZE, RMQ_REC_SYS_FLAG, RMQ_REC_TAIL, RMQ_REC_TAIL_BODY_LEN, RMQ_REC_TOTAL,
                       RMQ_STORE_TS_WIDTH, RMQ_STORE_V6_FLAG)


cdef struct Rec:
    int32_t total       # TOTALSIZE
    int32_t magic       # MAGICCODE
    int32_t sys_flag    # SYSFLAG
    int32_t body_len    # BODYLENGTH as stored (may be negative)
    int32_t topic_len   # TOPICLENGTH
    int32_t props_len   # PROPERTIESLENGTH as stored (may be negative)
    int64_t blen        # the body's bytes (body_len, 0 when negative)
    int64_t plen        # the properties text's bytes (props_len, 0 when negative)
    int64_t body        # position of the body in the buffer
    int64_t topic       # position of the topic
    int64_t props       # position of the properties text
    int64_t at          # the offset an error names (set on every return)
    int bw              # the born host's address bytes (4 or 16)
    int sw              # the store host's address bytes (4 or 16)


cdef inline int _parse(const uint8_t* b, int64_t pos, int64_t limit, Rec* r) noexcept nogil:
    # The record layout at ``pos`` with the broker's validation
    # (docs/formats.md#commitlog-record, docs/formats.md#commitlog-validation).
    # 0 = valid; otherwise an error code for _parse_error, r.at the offset to name.
    cdef int64_t p, end
    cdef int width
    r.at = pos
    if pos < 0 or limit - pos < RMQ_REC_HEAD:
        return 2
    r.total = <int32_t>rmq_load_be32(b + pos + RMQ_REC_TOTAL)
    r.magic = <int32_t>rmq_load_be32(b + pos + RMQ_REC_MAGIC)
    if r.magic == RMQ_MAGIC_BLANK:
        return 3
    if r.magic != RMQ_MAGIC_V1 and r.magic != RMQ_MAGIC_V2:
        return 4
    if r.total < RMQ_REC_MIN_SIZE:
        return 5
    if r.total > limit - pos:
        return 6
    end = pos + r.total
    r.sys_flag = <int32_t>rmq_load_be32(b + pos + RMQ_REC_SYS_FLAG)
    r.bw = RMQ_IPV6_WIDTH if r.sys_flag & RMQ_BORN_V6_FLAG else RMQ_IPV4_WIDTH
    r.sw = RMQ_IPV6_WIDTH if r.sys_flag & RMQ_STORE_V6_FLAG else RMQ_IPV4_WIDTH
    p = (pos + RMQ_REC_BORN_HOST + r.bw + RMQ_PORT_WIDTH + RMQ_STORE_TS_WIDTH + r.sw + RMQ_PORT_WIDTH
         + RMQ_REC_TAIL)
    if p > end:
        return 7
    r.body_len = <int32_t>rmq_load_be32(b + p - RMQ_REC_TAIL + RMQ_REC_TAIL_BODY_LEN)
    r.blen = r.body_len if r.body_len > 0 else 0
    width = 2 if r.magic == RMQ_MAGIC_V2 else 1
    if p + r.blen + width > end:
        r.at = p - RMQ_REC_TAIL + RMQ_REC_TAIL_BODY_LEN
        return 8
    r.body = p
    p += r.blen
    r.topic_len = <int16_t>rmq_load_be16(b + p) if width == 2 else <int8_t>b[p]
    if r.topic_len < 0:
        r.at = p
        return 9
    p += width
    if p + r.topic_len + 2 > end:
        r.at = p - width
        return 10
    r.topic = p
    p += r.topic_len
    r.props_len = <int16_t>rmq_load_be16(b + p)
    p += 2
    r.plen = r.props_len if r.props_len > 0 else 0
    r.props = p
    if p + r.plen != end:
        return 11
    return 0


# The reason of a _parse error code, as decode_record raises it (GIL held).
cdef str _parse_error(int code, const Rec* r, int64_t pos, int64_t limit)

# zlib's CRC-32 of n bytes (short ones inline): the body CRC the recovery walks check.
cdef uint32_t _crc32(const uint8_t* p, int64_t n) noexcept nogil

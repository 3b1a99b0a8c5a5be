"""Cython engine of the ConsumeQueue / ext / CommitLog scan kernels (twin: ``cq/_scan_py.py``).

Every kernel takes a uint8 buffer (one mapped file, or a slice of one) and
byte positions inside it; the loops run without the GIL over typed
memoryviews. Inputs are validated here, at the boundary: the build turns
bounds checking off.
"""
import numpy as np

cimport numpy as cnp
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.string cimport memcmp, memcpy, memset

from . import format as fmt

cnp.import_array()

cdef extern from *:
    """
    static inline uint32_t rmq_load_be32(const uint8_t* p) {
        uint32_t v; memcpy(&v, p, 4); return __builtin_bswap32(v);
    }
    static inline uint16_t rmq_load_be16(const uint8_t* p) {
        uint16_t v; memcpy(&v, p, 2); return __builtin_bswap16(v);
    }
    static inline uint64_t rmq_load_be64(const uint8_t* p) {
        uint64_t v; memcpy(&v, p, 8); return __builtin_bswap64(v);
    }
    static inline uint32_t rmq_load_raw32(const uint8_t* p) {
        uint32_t v; memcpy(&v, p, 4); return v;
    }
    static inline uint32_t rmq_bswap32(uint32_t v) { return __builtin_bswap32(v); }
    """
    uint32_t rmq_load_be32(const uint8_t* p) noexcept nogil
    uint16_t rmq_load_be16(const uint8_t* p) noexcept nogil
    uint64_t rmq_load_be64(const uint8_t* p) noexcept nogil
    uint32_t rmq_load_raw32(const uint8_t* p) noexcept nogil
    uint32_t rmq_bswap32(uint32_t v) noexcept nogil

cdef enum:
    C_PRUNED = 0
    C_PASS = 1
    C_HIT = 2
    C_UNDERFLOW = 3
    C_FOUND = 0
    C_NOT_FOUND = 1

PRUNED, PASS, HIT, UNDERFLOW = C_PRUNED, C_PASS, C_HIT, C_UNDERFLOW
FOUND, NOT_FOUND = C_FOUND, C_NOT_FOUND

DEF UNIT = 20
DEF TAG_LOW = 16          # the low 32 bits of the big-endian int64 at offset 12
DEF SCAN_BLOCK = 2048     # units per branch-free candidate pass (16 KiB of candidates on the stack)


cdef struct CodeSet:
    uint32_t small[4]     # n <= 4: compared branch-free (padded with the first code)
    int n
    uint64_t pre[256]      # 16384-bit prefilter of the code set (2 KiB, stays in L1)
    uint32_t* keys        # open addressing, 0-slot marked by used[]
    uint8_t* used
    uint32_t mask
    uint32_t shift        # 32 - log2(table size): the table index is the product's top bits


cdef inline uint32_t _mix(uint32_t x) noexcept nogil:
    # x is the raw (byte-swapped) word: swap it back first, so that codes that
    # differ only in their low bits -- tags like "Tag_1", "Tag_2", whose Java
    # hash codes are consecutive -- differ in the product's top bits, which
    # the prefilter and the table index read. Without the swap such codes
    # shared prefilter bits and table buckets (64 codes: 6 GB/s instead of 12).
    return rmq_bswap32(x) * <uint32_t>2654435761u


cdef int _codeset_init(CodeSet* cs, const int32_t[::1] codes) except -1:
    cdef Py_ssize_t i, n = codes.shape[0]
    cdef uint32_t size = 256, h, x
    while size < 4 * <uint32_t>n:
        size *= 2
    cs.n = <int>n
    cs.mask = size - 1
    cs.shift = 32
    while (<uint32_t>1 << (32 - cs.shift)) < size:
        cs.shift -= 1
    memset(cs.pre, 0, sizeof(cs.pre))
    cs.keys = <uint32_t*>malloc(size * sizeof(uint32_t))
    cs.used = <uint8_t*>malloc(size)
    if cs.keys == NULL or cs.used == NULL:
        free(cs.keys); free(cs.used)
        raise MemoryError()
    memset(cs.used, 0, size)
    for i in range(4):
        cs.small[i] = rmq_bswap32(<uint32_t>codes[i if i < n else 0]) if n else 0
    for i in range(n):
        x = rmq_bswap32(<uint32_t>codes[i])
        h = _mix(x)
        cs.pre[(h >> 18) >> 6] |= (<uint64_t>1) << ((h >> 18) & 63)
        h = h >> cs.shift
        while cs.used[h] and cs.keys[h] != x:
            h = (h + 1) & cs.mask
        cs.used[h] = 1
        cs.keys[h] = x
    return 0


cdef inline uint32_t _pre(const CodeSet* cs, uint32_t x) noexcept nogil:
    cdef uint32_t h = _mix(x) >> 18
    return <uint32_t>(cs.pre[h >> 6] >> (h & 63)) & 1


cdef inline bint _codeset_has(const CodeSet* cs, uint32_t x) noexcept nogil:
    cdef uint32_t h = _mix(x)
    if not (cs.pre[(h >> 18) >> 6] >> ((h >> 18) & 63)) & 1:
        return 0
    h = h >> cs.shift
    while cs.used[h]:
        if cs.keys[h] == x:
            return 1
        h = (h + 1) & cs.mask
    return 0


cdef int64_t _push(int64_t** out, int64_t* cap, int64_t count, int64_t value) noexcept nogil:
    cdef int64_t* grown
    if count == cap[0]:
        grown = <int64_t*>realloc(out[0], 2 * cap[0] * sizeof(int64_t))
        if grown == NULL:
            return -1
        out[0] = grown
        cap[0] *= 2
    out[0][count] = value
    return count + 1


def scan_tags(const uint8_t[::1] units, const int32_t[::1] codes):
    """Indices (int64) of the 20-byte big-endian units whose low 32 tag-code bits are in ``codes``."""
    cdef int64_t n = units.shape[0] // UNIT
    cdef CodeSet cs
    cdef int64_t i, count = 0, cap = 4096
    cdef int64_t* out
    cdef const uint8_t* p
    cdef uint32_t x, a, b, c, d
    cdef int64_t j, blk, stop, nc
    cdef int64_t cand[SCAN_BLOCK]
    cdef bint fail = 0, dense
    if codes.shape[0] == 0 or n == 0:
        return np.zeros(0, dtype=np.int64)
    _codeset_init(&cs, codes)
    out = <int64_t*>malloc(cap * sizeof(int64_t))
    if out == NULL:
        free(cs.keys); free(cs.used)
        raise MemoryError()
    p = &units[0]
    with nogil:
        # Keys hold the raw in-memory words (codes byte-swapped once), so the
        # loop compares and hashes the loaded word without swapping it. Each
        # block collects candidates (prefilter or small-set hits); where they
        # are frequent the pass is branch-free (index always written, count
        # advanced by the test) so no hit rate costs mispredictions; the exact
        # table check then runs on the candidates only.
        blk = 0
        dense = 0
        while blk < n and not fail:
            stop = blk + SCAN_BLOCK if blk + SCAN_BLOCK < n else n
            nc = 0
            if cs.n <= 4:
                a, b, c, d = cs.small[0], cs.small[1], cs.small[2], cs.small[3]
                if dense:
                    for i in range(blk, stop):
                        x = rmq_load_raw32(p + i * UNIT + TAG_LOW)
                        cand[nc] = i
                        nc += (x == a) | (x == b) | (x == c) | (x == d)
                else:
                    for i in range(blk, stop):
                        x = rmq_load_raw32(p + i * UNIT + TAG_LOW)
                        if (x == a) | (x == b) | (x == c) | (x == d):
                            cand[nc] = i
                            nc += 1
                for j in range(nc):
                    count = _push(&out, &cap, count, cand[j])
                    if count < 0:
                        fail = 1
                        break
            else:
                if dense:
                    for i in range(blk, stop):
                        x = rmq_load_raw32(p + i * UNIT + TAG_LOW)
                        cand[nc] = i
                        nc += _pre(&cs, x)
                else:
                    for i in range(blk, stop):
                        x = rmq_load_raw32(p + i * UNIT + TAG_LOW)
                        if _pre(&cs, x):
                            cand[nc] = i
                            nc += 1
                for j in range(nc):
                    if _codeset_has(&cs, rmq_load_raw32(p + cand[j] * UNIT + TAG_LOW)):
                        count = _push(&out, &cap, count, cand[j])
                        if count < 0:
                            fail = 1
                            break
            # branch-free when candidates are frequent enough to make a branch
            # mispredict often (> 1/32 of the block), branchy when they are rare
            dense = nc * 32 > stop - blk
            blk = stop
    free(cs.keys); free(cs.used)
    if fail:
        free(out)
        raise MemoryError()
    result = np.empty(count, dtype=np.int64)
    cdef int64_t[::1] r = result
    if count:
        memcpy(&r[0], out, count * sizeof(int64_t))
    free(out)
    return result


def ext_walk(const uint8_t[::1] buf, int64_t pos):
    """Walk ext units from ``pos``: ``(end_position, status)``; status 2 = unit past the buffer."""
    cdef int64_t n = buf.shape[0]
    cdef int16_t size
    cdef int status = 0
    if pos < 0:
        raise ValueError(f"pos must be >= 0, got {pos}")
    with nogil:
        while pos + 2 <= n:
            size = <int16_t>rmq_load_be16(&buf[pos])
            if size <= 0:
                break
            if pos + size > n:
                status = 2
                break
            pos += size
    return pos, status


cdef inline int8_t _ext_head(const uint8_t* base, int64_t pos, int64_t limit,
                             int64_t* tags, int64_t* time, int16_t* bms) noexcept nogil:
    if pos < 0 or pos >= limit or limit - pos < 2:
        return C_NOT_FOUND
    if <int16_t>rmq_load_be16(base + pos) < 1:
        return C_NOT_FOUND
    if limit - pos < 20:
        return C_UNDERFLOW
    tags[0] = <int64_t>rmq_load_be64(base + pos + 2)
    time[0] = <int64_t>rmq_load_be64(base + pos + 10)
    bms[0] = <int16_t>rmq_load_be16(base + pos + 18)
    if bms[0] >= 1 and pos + 20 + bms[0] > limit:
        return C_UNDERFLOW
    return C_FOUND


def ext_units_at(const uint8_t[::1] buf, const int64_t[::1] positions, int64_t limit):
    """Ext unit heads at ``positions``: ``(status int8, tags_code, msg_store_time, bit_map_size)``."""
    cdef Py_ssize_t i, k = positions.shape[0]
    if limit < 0 or limit > buf.shape[0]:
        raise ValueError(f"limit {limit} outside the buffer of {buf.shape[0]} bytes")
    status = np.full(k, NOT_FOUND, dtype=np.int8)
    tags = np.zeros(k, dtype=np.int64)
    times = np.zeros(k, dtype=np.int64)
    bms = np.zeros(k, dtype=np.int16)
    cdef int8_t[::1] s = status
    cdef int64_t[::1] t = tags, st = times
    cdef int16_t[::1] b = bms
    cdef int64_t one_tags, one_time
    cdef int16_t one_bms
    cdef const uint8_t* base = &buf[0] if buf.shape[0] else NULL
    if base == NULL:
        return status, tags, times, bms
    with nogil:
        for i in range(k):
            # only a FOUND unit fills its row: an underflowing head leaves zeros, as in the twin
            s[i] = _ext_head(base, positions[i], limit, &one_tags, &one_time, &one_bms)
            if s[i] == C_FOUND:
                t[i] = one_tags
                st[i] = one_time
                b[i] = one_bms
    return status, tags, times, bms


def ext_bloom_check(const uint8_t[::1] buf, const int64_t[::1] positions, int64_t limit,
                    const int32_t[::1] byte_idx, const uint8_t[::1] masks, int64_t bit_num, int64_t born_time):
    """The ConsumeQueue-layer SQL92 decision per ext unit: PASS, HIT, PRUNED or UNDERFLOW (uint8)."""
    cdef Py_ssize_t i, j, k = positions.shape[0], nb = byte_idx.shape[0]
    cdef int64_t tags, time, pos
    cdef int16_t bms
    cdef int8_t st
    cdef bint hit
    if limit < 0 or limit > buf.shape[0]:
        raise ValueError(f"limit {limit} outside the buffer of {buf.shape[0]} bytes")
    if masks.shape[0] != nb:
        raise ValueError("byte_idx and masks differ in length")
    for j in range(nb):
        if byte_idx[j] < 0 or byte_idx[j] * 8 >= bit_num:
            raise ValueError(f"bit byte index {byte_idx[j]} outside a {bit_num}-bit bitmap")
    out = np.full(k, PASS, dtype=np.uint8)
    cdef uint8_t[::1] o = out
    cdef const uint8_t* base = &buf[0] if buf.shape[0] else NULL
    if base == NULL:
        return out
    with nogil:
        for i in range(k):
            pos = positions[i]
            st = _ext_head(base, pos, limit, &tags, &time, &bms)
            if st == C_UNDERFLOW:
                o[i] = C_UNDERFLOW
                continue
            if st != C_FOUND or time <= born_time or bms < 1 or <int64_t>bms * 8 != bit_num:
                continue
            hit = 1
            for j in range(nb):
                if not (base[pos + 20 + byte_idx[j]] & masks[j]):
                    hit = 0
            o[i] = C_HIT if hit else C_PRUNED
    return out


cdef struct Rec:
    int32_t total, magic, sys_flag, body_len, topic_len, props_len
    int64_t blen, plen, body, topic, props, at
    int bw, sw


cdef int _parse(const uint8_t* b, int64_t pos, int64_t limit, Rec* r) noexcept nogil:
    # The record layout at ``pos`` with the broker's validation
    # (docs/formats.md#commitlog-record, docs/formats.md#commitlog-validation).
    # 0 = valid; otherwise an error code for _parse_error, r.at the offset to name.
    cdef int64_t p, end
    cdef int width
    r.at = pos
    if pos < 0 or limit - pos < 8:
        return 2
    r.total = <int32_t>rmq_load_be32(b + pos)
    r.magic = <int32_t>rmq_load_be32(b + pos + 4)
    if r.magic == -875286124:
        return 3
    if r.magic != -626843481 and r.magic != -626843477:
        return 4
    if r.total < 91:
        return 5
    if r.total > limit - pos:
        return 6
    end = pos + r.total
    r.sys_flag = <int32_t>rmq_load_be32(b + pos + 36)
    r.bw = 16 if r.sys_flag & 0x10 else 4
    r.sw = 16 if r.sys_flag & 0x20 else 4
    p = pos + 48 + r.bw + 4 + 8 + r.sw + 4 + 16
    if p > end:
        return 7
    r.body_len = <int32_t>rmq_load_be32(b + p - 4)
    r.blen = r.body_len if r.body_len > 0 else 0
    width = 2 if r.magic == -626843477 else 1
    if p + r.blen + width > end:
        r.at = p - 4
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


cdef int _span(const uint8_t* base, int64_t pos, int64_t limit, int64_t* start, int64_t* length,
               const char** why) noexcept nogil:
    # The properties text of the record at ``pos``, validated by _parse (the same
    # checks as decode_record); ``why`` gets a short reason for an invalid record.
    cdef Rec r
    cdef int code = _parse(base, pos, limit, &r)
    if code == 0:
        start[0] = r.props
        length[0] = r.plen
        return 0
    if code == 2:
        why[0] = "record header runs past the end of the file"
    elif code == 3 or code == 4:
        why[0] = "bad magic code"
    elif code == 5 or code == 6:
        why[0] = "TOTALSIZE does not fit the bytes left in the file"
    elif code == 7:
        why[0] = "record too short for its hosts"
    elif code == 8:
        why[0] = "BODYLENGTH runs past the record"
    elif code == 9:
        why[0] = "negative topic length"
    elif code == 10:
        why[0] = "topic length runs past the record"
    else:
        why[0] = "field lengths do not add up to TOTALSIZE"
    return -1


def record_properties_span(const uint8_t[::1] buf, int64_t pos, int64_t limit):
    """``(start, length)`` of the properties text of the record at ``pos``; ValueError if corrupt."""
    cdef int64_t start = 0, length = 0
    cdef const char* why = NULL
    if limit < 0 or limit > buf.shape[0] or buf.shape[0] == 0:
        raise ValueError("record header runs past the end of the file")
    if _span(&buf[0], pos, limit, &start, &length, &why) < 0:
        raise ValueError(why.decode())
    return start, length


cdef dict _decode_props(const uint8_t* p, int64_t n):
    # Split at 0x02, key = up to the first 0x01; key and value must be non-empty.
    # Splitting bytes before decoding equals the broker's decode-then-split: 0x01
    # and 0x02 never occur inside a UTF-8 sequence and never join a malformed one.
    cdef dict props = {}
    cdef int64_t i = 0, seg, sep
    while i < n:
        seg = i
        sep = -1
        while i < n and p[i] != 2:
            if sep < 0 and p[i] == 1:
                sep = i
            i += 1
        if sep > seg and i > sep + 1:
            props[PyUnicode_DecodeUTF8(<const char*>p + seg, sep - seg, "replace")] = \
                PyUnicode_DecodeUTF8(<const char*>p + sep + 1, i - sep - 1, "replace")
        i += 1
    return props


def gather_properties(const uint8_t[::1] buf, const int64_t[::1] positions, int64_t limit):
    """Properties dicts of the records at ``positions``; ValueError("<index>: <reason>") if corrupt."""
    cdef Py_ssize_t i, k = positions.shape[0]
    cdef int64_t start, length
    cdef const char* why = NULL
    cdef list out = []
    if k == 0:
        return out
    if limit < 0 or limit > buf.shape[0] or buf.shape[0] == 0:
        raise ValueError("0: record header runs past the end of the file")
    cdef const uint8_t* base = &buf[0]
    for i in range(k):
        if _span(base, positions[i], limit, &start, &length, &why) < 0:
            raise ValueError(f"{i}: {why.decode()}")
        out.append(_decode_props(base + start, length) if length else {})
    return out


def commit_log_walk(const uint8_t[::1] buf, int64_t pos):
    """Walk CommitLog records from ``pos`` of one file: ``(position, status, records)``.

    status 0: unwritten space (TOTALSIZE and MAGICCODE both 0) or fewer than 8
    bytes left - the end of the data; 1: a blank end-of-file record at
    ``position``; 2: an invalid record at ``position`` (bad magic, a size that
    does not fit, or fields that do not add up), where the broker's recovery
    truncates. ``records`` counts the valid records passed.
    """
    cdef int64_t n = buf.shape[0], start = 0, length = 0, records = 0
    cdef int32_t total, magic
    cdef int status = 0
    cdef const char* why = NULL
    if pos < 0:
        raise ValueError(f"pos must be >= 0, got {pos}")
    if n == 0:
        return pos, 0, 0
    cdef const uint8_t* base = &buf[0]
    with nogil:
        while True:
            if n - pos < 8:
                status = 0
                break
            total = <int32_t>rmq_load_be32(base + pos)
            magic = <int32_t>rmq_load_be32(base + pos + 4)
            if magic == -875286124:
                status = 1
                break
            if total == 0 and magic == 0:
                status = 0
                break
            if _span(base, pos, n, &start, &length, &why) < 0:
                status = 2
                break
            pos += total
            records += 1
    return pos, status, records


def decode_properties_at(const uint8_t[::1] buf, int64_t start, int64_t length):
    """The properties dict of ``length`` bytes at ``start`` (broker parsing rules, UTF-8 with replacement)."""
    if start < 0 or length < 0 or start + length > buf.shape[0]:
        raise ValueError(f"properties [{start}, {start + length}) outside the buffer of {buf.shape[0]} bytes")
    if length == 0:
        return {}
    return _decode_props(&buf[start], length)


cdef str _parse_error(int code, const Rec* r, int64_t pos, int64_t limit):
    if code == 2:
        return f"record header needs 8 bytes, {limit - pos} left in the file"
    if code == 3:
        return "blank end-of-file record, not a message"
    if code == 4:
        return f"bad magic code {<uint32_t>r.magic:#010x} (TOTALSIZE {r.total})"
    if code == 5:
        return f"TOTALSIZE {r.total} is smaller than the smallest record"
    if code == 6:
        return f"TOTALSIZE {r.total} runs past the end of the file ({limit - pos} bytes left)"
    if code == 7:
        return f"record of {r.total} bytes is too short for its hosts (sys_flag {r.sys_flag:#x})"
    if code == 8:
        return f"BODYLENGTH {r.body_len} runs past the record of {r.total} bytes"
    if code == 9:
        return f"negative topic length {r.topic_len}"
    if code == 10:
        return f"topic length {r.topic_len} runs past the record"
    return f"field lengths add up to {r.props + r.plen - pos} bytes but TOTALSIZE is {r.total}"


def decode_record(const uint8_t[::1] buf, int64_t pos, int64_t limit):
    """Decode the CommitLog record at ``pos`` (readable end ``limit``).

    Returns ``(total, magic, body_crc, queue_id, flag, queue_offset, physical_offset,
    sys_flag, born_timestamp, born_ip, born_port, store_timestamp, store_ip,
    store_port, reconsume_times, prepared_transaction_offset, body, topic,
    properties)``; raises ``ValueError(reason, offset)`` for a record that is not valid.
    """
    cdef int64_t n = buf.shape[0]
    cdef Rec r
    cdef int code
    if limit < 0 or limit > n:
        raise ValueError(f"limit {limit} outside the buffer of {n} bytes", pos)
    if pos < 0 or limit - pos < 8:
        raise ValueError(f"record header needs 8 bytes, {limit - pos} left in the file", pos)
    cdef const uint8_t* b = &buf[0]
    code = _parse(b, pos, limit, &r)
    if code:
        raise ValueError(_parse_error(code, &r, pos, limit), r.at)
    body = PyBytes_FromStringAndSize(<const char*>b + r.body, r.blen)
    topic = PyUnicode_DecodeUTF8(<const char*>b + r.topic, r.topic_len, "replace")
    props = _decode_props(b + r.props, r.plen) if r.plen else {}
    cdef int64_t h = pos + 48
    born_ip = PyBytes_FromStringAndSize(<const char*>b + h, r.bw)
    born_port = <int32_t>rmq_load_be32(b + h + r.bw)
    h += r.bw + 4
    store_ts = <int64_t>rmq_load_be64(b + h)
    h += 8
    store_ip = PyBytes_FromStringAndSize(<const char*>b + h, r.sw)
    store_port = <int32_t>rmq_load_be32(b + h + r.sw)
    h += r.sw + 4
    return (r.total, r.magic, <int32_t>rmq_load_be32(b + pos + 8), <int32_t>rmq_load_be32(b + pos + 12),
            <int32_t>rmq_load_be32(b + pos + 16), <int64_t>rmq_load_be64(b + pos + 20),
            <int64_t>rmq_load_be64(b + pos + 28), r.sys_flag, <int64_t>rmq_load_be64(b + pos + 40),
            born_ip, born_port, store_ts, store_ip, store_port,
            <int32_t>rmq_load_be32(b + h), <int64_t>rmq_load_be64(b + h + 4), body, topic, props)


#: decode_records column names, in order: int32 / int64 fixed fields, then spans
RECORD_INT_COLUMNS = (
    ("store_size", "i4"), ("magic_code", "i4"), ("body_crc", "i4"), ("queue_id", "i4"), ("flag", "i4"),
    ("queue_offset", "i8"), ("commit_log_offset", "i8"), ("sys_flag", "i4"), ("born_timestamp", "i8"),
    ("born_port", "i4"), ("store_timestamp", "i8"), ("store_port", "i4"), ("reconsume_times", "i4"),
    ("prepared_transaction_offset", "i8"),
)
RECORD_SPAN_COLUMNS = ("body_start", "body_len", "topic_start", "topic_len", "props_start", "props_len")


def decode_records(const uint8_t[::1] buf, const int64_t[::1] positions, int64_t limit):
    """Decode the records at ``positions`` into columns (the batch form of :func:`decode_record`).

    Returns ``(columns, error)``: ``columns`` maps each ``RECORD_INT_COLUMNS``
    name to an int32/int64 array, ``born_ip``/``store_ip`` to (k, 16) uint8
    arrays (IPv4 in the first 4 bytes), and each ``RECORD_SPAN_COLUMNS`` name to
    int64 byte positions/lengths inside ``buf``. ``error`` is None, or
    ``(index, reason, offset)`` of the first record that is not valid (the rows
    from it on are left zero), with the reason and offset of ``decode_record``.
    """
    cdef Py_ssize_t i, k = positions.shape[0]
    cdef int64_t n = buf.shape[0], pos, h
    cdef Rec r
    cdef int code = 0
    cdef Py_ssize_t bad = -1
    if limit < 0 or limit > n:
        raise ValueError(f"limit {limit} outside the buffer of {n} bytes")
    cols = {name: np.zeros(k, dtype=dt) for name, dt in RECORD_INT_COLUMNS}
    for name in RECORD_SPAN_COLUMNS:
        cols[name] = np.zeros(k, dtype=np.int64)
    cols["born_ip"] = np.zeros((k, 16), dtype=np.uint8)
    cols["store_ip"] = np.zeros((k, 16), dtype=np.uint8)
    cdef int32_t[::1] total = cols["store_size"], magic = cols["magic_code"], crc = cols["body_crc"]
    cdef int32_t[::1] qid = cols["queue_id"], flag = cols["flag"], sysf = cols["sys_flag"]
    cdef int32_t[::1] bport = cols["born_port"], sport = cols["store_port"], recon = cols["reconsume_times"]
    cdef int64_t[::1] qoff = cols["queue_offset"], phys = cols["commit_log_offset"], bts = cols["born_timestamp"]
    cdef int64_t[::1] sts = cols["store_timestamp"], prep = cols["prepared_transaction_offset"]
    cdef int64_t[::1] bs = cols["body_start"], bl = cols["body_len"], ts = cols["topic_start"]
    cdef int64_t[::1] tl = cols["topic_len"], ps = cols["props_start"], pl = cols["props_len"]
    cdef uint8_t[:, ::1] bip = cols["born_ip"], sip = cols["store_ip"]
    if k == 0:
        return cols, None
    if n == 0:
        return cols, (0, f"record header needs 8 bytes, {limit - positions[0]} left in the file", positions[0])
    cdef const uint8_t* b = &buf[0]
    with nogil:
        for i in range(k):
            pos = positions[i]
            code = _parse(b, pos, limit, &r)
            if code:
                bad = i
                break
            total[i] = r.total
            magic[i] = r.magic
            crc[i] = <int32_t>rmq_load_be32(b + pos + 8)
            qid[i] = <int32_t>rmq_load_be32(b + pos + 12)
            flag[i] = <int32_t>rmq_load_be32(b + pos + 16)
            qoff[i] = <int64_t>rmq_load_be64(b + pos + 20)
            phys[i] = <int64_t>rmq_load_be64(b + pos + 28)
            sysf[i] = r.sys_flag
            bts[i] = <int64_t>rmq_load_be64(b + pos + 40)
            h = pos + 48
            memcpy(&bip[i, 0], b + h, r.bw)
            bport[i] = <int32_t>rmq_load_be32(b + h + r.bw)
            h += r.bw + 4
            sts[i] = <int64_t>rmq_load_be64(b + h)
            h += 8
            memcpy(&sip[i, 0], b + h, r.sw)
            sport[i] = <int32_t>rmq_load_be32(b + h + r.sw)
            h += r.sw + 4
            recon[i] = <int32_t>rmq_load_be32(b + h)
            prep[i] = <int64_t>rmq_load_be64(b + h + 4)
            bs[i] = r.body
            bl[i] = r.blen
            ts[i] = r.topic
            tl[i] = r.topic_len
            ps[i] = r.props
            pl[i] = r.plen
    if bad >= 0:
        return cols, (bad, _parse_error(code, &r, positions[bad], limit), r.at)
    return cols, None


def _check_spans(buf_len, starts, lengths):
    if starts.shape[0] != lengths.shape[0]:
        raise ValueError("starts and lengths differ in length")
    # lengths are compared with the room left after each start (a sum could overflow int64)
    if len(starts) and (np.min(starts) < 0 or np.min(lengths) < 0 or np.max(starts) > buf_len
                        or (np.asarray(lengths) > buf_len - np.asarray(starts)).any()):
        raise ValueError(f"a span lies outside the buffer of {buf_len} bytes")


def gather_spans(const uint8_t[::1] buf, const int64_t[::1] starts, const int64_t[::1] lengths):
    """Concatenate ``buf[starts[i]:starts[i] + lengths[i]]``: ``(offsets int64 (k + 1), data uint8)``.

    The Arrow (large) binary layout of the spans.
    """
    cdef Py_ssize_t i, k = starts.shape[0]
    _check_spans(buf.shape[0], np.asarray(starts), np.asarray(lengths))
    offsets = np.zeros(k + 1, dtype=np.int64)
    cdef int64_t[::1] o = offsets
    for i in range(k):
        o[i + 1] = o[i] + lengths[i]
    data = np.empty(o[k], dtype=np.uint8)
    cdef uint8_t[::1] d = data
    cdef const uint8_t* b = &buf[0] if buf.shape[0] else NULL
    with nogil:
        for i in range(k):
            if lengths[i]:
                memcpy(&d[o[i]], b + starts[i], lengths[i])
    return offsets, data


cdef inline bint _span_eq(const uint8_t* b, int64_t s1, int64_t n1, int64_t s2, int64_t n2) noexcept nogil:
    return n1 == n2 and (n1 == 0 or memcmp(b + s1, b + s2, n1) == 0)


def split_properties(const uint8_t[::1] buf, const int64_t[::1] starts, const int64_t[::1] lengths):
    """Split each record's properties text into map entries, as :func:`gather_properties` parses it.

    Returns ``(map_offsets int64 (k + 1), key_start, key_len, value_start,
    value_len, tags_entry, keys_entry)``: record ``i`` owns entries
    ``map_offsets[i]:map_offsets[i + 1]`` in first-seen key order, a repeated key
    (equal bytes) keeping its first place and its last value, as a dict does;
    ``tags_entry``/``keys_entry`` give the entry of ``TAGS``/``KEYS`` or -1.
    """
    cdef Py_ssize_t i, k = starts.shape[0]
    cdef int64_t j, e, m, cap = 0, seg, sep, end, p
    _check_spans(buf.shape[0], np.asarray(starts), np.asarray(lengths))
    cdef const uint8_t* b = &buf[0] if buf.shape[0] else NULL
    with nogil:
        for i in range(k):  # upper bound on entries: one per 0x01
            for j in range(starts[i], starts[i] + lengths[i]):
                cap += b[j] == 1
    map_offsets = np.zeros(k + 1, dtype=np.int64)
    ks, kl = np.empty(cap, dtype=np.int64), np.empty(cap, dtype=np.int64)
    vs, vl = np.empty(cap, dtype=np.int64), np.empty(cap, dtype=np.int64)
    tags_entry = np.full(k, -1, dtype=np.int64)
    keys_entry = np.full(k, -1, dtype=np.int64)
    cdef int64_t[::1] mo = map_offsets, a_ks = ks, a_kl = kl, a_vs = vs, a_vl = vl
    cdef int64_t[::1] te = tags_entry, ke = keys_entry
    e = 0
    with nogil:
        for i in range(k):
            p = starts[i]
            end = p + lengths[i]
            while p < end:
                seg = p
                sep = -1
                while p < end and b[p] != 2:
                    if sep < 0 and b[p] == 1:
                        sep = p
                    p += 1
                if sep > seg and p > sep + 1:
                    for m in range(mo[i], e):
                        if _span_eq(b, a_ks[m], a_kl[m], seg, sep - seg):
                            break
                    else:
                        m = e
                        e += 1
                        a_ks[m] = seg
                        a_kl[m] = sep - seg
                    a_vs[m] = sep + 1
                    a_vl[m] = p - sep - 1
                p += 1
            mo[i + 1] = e
            for m in range(mo[i], e):
                if a_kl[m] == 4 and memcmp(b + a_ks[m], b"TAGS", 4) == 0:
                    te[i] = m
                elif a_kl[m] == 4 and memcmp(b + a_ks[m], b"KEYS", 4) == 0:
                    ke[i] = m
    return map_offsets, ks[:e], kl[:e], vs[:e], vl[:e], tags_entry, keys_entry

"""Cython engine of the CommitLog record walk: validation, recovery walk, one-record decode, body CRCs (twin: ``_record_py.py``).

Every kernel takes a uint8 buffer (one mapped file, or a slice of one) and byte
positions inside it; the loops run without the GIL over typed memoryviews. Inputs
are validated here, at the boundary: the build turns bounds checking off. The record
layout (``Rec``, ``_parse``) is in ``_record.pxd``, shared with the decoder.
"""
import numpy as np

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t
from libc.string cimport memcpy
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeUTF8

from ._bytes cimport rmq_load_be32, rmq_load_be64
from ._layout cimport (RMQ_NAME_VALUE_SEP, RMQ_PORT_WIDTH, RMQ_PROPERTY_SEP, RMQ_REC_BODY_CRC, RMQ_REC_BORN_TS,
                       RMQ_REC_FLAG, RMQ_REC_PHYS, RMQ_REC_QUEUE_ID, RMQ_REC_QUEUE_OFFSET, RMQ_REC_TAIL_PREPARED,
                       RMQ_STORE_TS_WIDTH)

cdef extern from "zlib.h" nogil:
    unsigned long crc32(unsigned long crc, const unsigned char* buf, unsigned int len)

cdef extern from "_crc32.h" nogil:
    void rmq_crc_init() noexcept                                  # fill the tables (once, at import)
    uint32_t rmq_crc32_short(const uint8_t* p, int64_t n) noexcept  # zlib's CRC-32 of n bytes, inline


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



cdef dict _decode_props(const uint8_t* p, int64_t n):
    # Split at 0x02, key = up to the first 0x01; key and value must be non-empty.
    # Splitting bytes before decoding equals the broker's decode-then-split: 0x01
    # and 0x02 never occur inside a UTF-8 sequence and never join a malformed one.
    cdef dict props = {}
    cdef int64_t i = 0, seg, sep
    while i < n:
        seg = i
        sep = -1
        while i < n and p[i] != RMQ_PROPERTY_SEP:
            if sep < 0 and p[i] == RMQ_NAME_VALUE_SEP:
                sep = i
            i += 1
        if sep > seg and i > sep + 1:
            props[PyUnicode_DecodeUTF8(<const char*>p + seg, sep - seg, "replace")] = \
                PyUnicode_DecodeUTF8(<const char*>p + sep + 1, i - sep - 1, "replace")
        i += 1
    return props


def gather_properties(const uint8_t[::1] buf, const int64_t[::1] positions, int64_t limit,
                      bint absent_as_none=False):
    """Properties dicts of the records at ``positions``; ValueError("<index>: <reason>") if corrupt.

    A record that stores no properties (PROPERTIES length 0) gives ``{}``, or None with
    ``absent_as_none`` (the broker's decoded properties are then null).
    """
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
        out.append(_decode_props(base + start, length) if length else (None if absent_as_none else {}))
    return out


cdef inline int _walk_stop(const uint8_t* base, int64_t pos, int64_t limit) noexcept nogil:
    # Where a walk of the records stops (one rule for commit_log_walk and record_positions):
    # -1 = a valid record starts at pos; 0 = unwritten space or fewer than 8 bytes left (the
    # end of the data); 1 = a blank end-of-file record; 2 = an invalid record.
    cdef int64_t start = 0, length = 0
    cdef const char* why = NULL
    cdef int32_t total, magic
    if limit - pos < RMQ_REC_HEAD:
        return 0
    total = <int32_t>rmq_load_be32(base + pos + RMQ_REC_TOTAL)
    magic = <int32_t>rmq_load_be32(base + pos + RMQ_REC_MAGIC)
    if magic == RMQ_MAGIC_BLANK:
        return 1
    if total == 0 and magic == 0:
        return 0
    if _span(base, pos, limit, &start, &length, &why) < 0:
        return 2
    return -1


def commit_log_walk(const uint8_t[::1] buf, int64_t pos):
    """Walk CommitLog records from ``pos`` of one file: ``(position, status, records)``.

    status 0: unwritten space (TOTALSIZE and MAGICCODE both 0) or fewer than 8
    bytes left - the end of the data; 1: a blank end-of-file record at
    ``position``; 2: an invalid record at ``position`` (bad magic, a size that
    does not fit, or fields that do not add up), where the broker's recovery
    truncates. ``records`` counts the valid records passed.
    """
    cdef int64_t n = buf.shape[0], records = 0
    cdef int status = 0
    if pos < 0:
        raise ValueError(f"pos must be >= 0, got {pos}")
    if n == 0:
        return pos, 0, 0
    cdef const uint8_t* base = &buf[0]
    with nogil:
        while True:
            status = _walk_stop(base, pos, n)
            if status >= 0:
                break
            pos += <int32_t>rmq_load_be32(base + pos + RMQ_REC_TOTAL)
            records += 1
    return pos, status, records


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
    if pos < 0 or limit - pos < RMQ_REC_HEAD:
        raise ValueError(f"record header needs 8 bytes, {limit - pos} left in the file", pos)
    cdef const uint8_t* b = &buf[0]
    code = _parse(b, pos, limit, &r)
    if code:
        raise ValueError(_parse_error(code, &r, pos, limit), r.at)
    body = PyBytes_FromStringAndSize(<const char*>b + r.body, r.blen)
    topic = PyUnicode_DecodeUTF8(<const char*>b + r.topic, r.topic_len, "replace")
    props = _decode_props(b + r.props, r.plen) if r.plen else {}
    cdef int64_t h = pos + RMQ_REC_BORN_HOST
    born_ip = PyBytes_FromStringAndSize(<const char*>b + h, r.bw)
    born_port = <int32_t>rmq_load_be32(b + h + r.bw)
    h += r.bw + RMQ_PORT_WIDTH
    store_ts = <int64_t>rmq_load_be64(b + h)
    h += RMQ_STORE_TS_WIDTH
    store_ip = PyBytes_FromStringAndSize(<const char*>b + h, r.sw)
    store_port = <int32_t>rmq_load_be32(b + h + r.sw)
    h += r.sw + RMQ_PORT_WIDTH
    return (r.total, r.magic, <int32_t>rmq_load_be32(b + pos + RMQ_REC_BODY_CRC), <int32_t>rmq_load_be32(b + pos + RMQ_REC_QUEUE_ID),
            <int32_t>rmq_load_be32(b + pos + RMQ_REC_FLAG), <int64_t>rmq_load_be64(b + pos + RMQ_REC_QUEUE_OFFSET),
            <int64_t>rmq_load_be64(b + pos + RMQ_REC_PHYS), r.sys_flag, <int64_t>rmq_load_be64(b + pos + RMQ_REC_BORN_TS),
            born_ip, born_port, store_ts, store_ip, store_port,
            <int32_t>rmq_load_be32(b + h), <int64_t>rmq_load_be64(b + h + RMQ_REC_TAIL_PREPARED), body, topic, props)


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


rmq_crc_init()
DEF SHORT_CRC = 2048  # bodies up to this many bytes are checked inline, longer ones by zlib


cdef uint32_t _crc32(const uint8_t* p, int64_t n) noexcept nogil:
    # zlib's CRC-32 of n bytes: short ones inline, long ones by zlib (whose length is an unsigned int)
    cdef uint32_t crc = 0
    cdef int64_t done = 0, step
    if n <= SHORT_CRC:
        return rmq_crc32_short(p, n)
    while done < n:
        step = n - done if n - done < (1 << 30) else (1 << 30)
        crc = <uint32_t>crc32(crc, p + done, <unsigned int>step)
        done += step
    return crc


def crc32_of(const uint8_t[::1] data):
    """CRC-32 of ``data`` as ``zlib.crc32`` gives it, by the recovery walk's own code (tests compare the two)."""
    if data.shape[0] == 0:
        return 0
    return _crc32(&data[0], data.shape[0])


def body_crc_mismatch(const uint8_t[::1] buf, int64_t pos, int64_t end):
    """Position of the first record in ``buf[pos:end]`` whose BODYCRC does not match, or -1.

    ``buf[pos:end]`` holds records that passed the recovery walk's checks
    (``commit_log_walk``); each is parsed again here, so nothing is read
    outside a record. BODYCRC is the body's CRC-32 with the sign bit cleared.
    """
    cdef Rec r
    cdef int64_t found = -1
    cdef uint32_t crc
    if pos < 0 or end > buf.shape[0] or pos > end:
        raise ValueError(f"range [{pos}, {end}) outside the buffer of {buf.shape[0]} bytes")
    if pos == end:
        return -1
    cdef const uint8_t* b = &buf[0]
    with nogil:
        while pos < end:
            if _parse(b, pos, end, &r):
                found = pos
                break
            crc = _crc32(b + r.body, r.blen)
            if <int32_t>(crc & 0x7FFFFFFF) != <int32_t>rmq_load_be32(b + pos + RMQ_REC_BODY_CRC):
                found = pos
                break
            pos += r.total
    return found


def record_positions(const uint8_t[::1] buf, int64_t pos, int64_t limit, int64_t max_records):
    """Positions of the valid records from ``pos`` (readable end ``limit``), at most ``max_records``.

    Returns ``(positions int64, position, status)``: ``position`` is where the
    walk stopped; status 0: unwritten space or fewer than 8 bytes left (the end
    of the data); 1: a blank end-of-file record there; 2: an invalid record
    there; 3: ``max_records`` found (call again from ``position``). The checks
    are ``commit_log_walk``'s.
    """
    cdef int64_t count = 0
    cdef int status = 0
    if pos < 0 or max_records < 0:
        raise ValueError(f"pos and max_records must be >= 0, got {pos}, {max_records}")
    if limit < 0 or limit > buf.shape[0]:
        raise ValueError(f"limit {limit} outside the buffer of {buf.shape[0]} bytes")
    out = np.empty(max_records, dtype=np.int64)
    cdef int64_t[::1] o = out
    if limit == 0:
        return out[:0], pos, 0
    cdef const uint8_t* base = &buf[0]
    with nogil:
        while True:
            if count == max_records:
                status = 3
                break
            status = _walk_stop(base, pos, limit)
            if status >= 0:
                break
            o[count] = pos
            count += 1
            pos += <int32_t>rmq_load_be32(base + pos + RMQ_REC_TOTAL)
    return out[:count], pos, status


def record_totals(const uint8_t[::1] buf, const int64_t[::1] pos, const int64_t[::1] end, int64_t min_total):
    """TOTALSIZE of the records at ``pos`` (their first 8 bytes in ``buf``), and whether each is a
    message's record (MAGICCODE V1 or V2) of at least ``min_total`` bytes that ends by ``end``:
    ``(total int64, ok bool)``. What a ranged CommitLog read checks before it decodes bytes it fetched
    by the units' sizes (docs/object-storage.md#coalescing)."""
    cdef Py_ssize_t i, n = pos.shape[0]
    cdef int64_t p, t
    cdef int32_t magic
    if end.shape[0] != n:
        raise ValueError(f"record_totals: {n} positions but {end.shape[0]} ends")
    for i in range(n):
        if pos[i] < 0 or pos[i] + RMQ_REC_HEAD > buf.shape[0]:
            raise ValueError(f"record_totals: position {pos[i]} has no 8-byte head in the {buf.shape[0]} bytes")
    total = np.empty(n, dtype=np.int64)
    ok = np.empty(n, dtype=np.bool_)
    cdef int64_t[::1] to = total
    cdef uint8_t[::1] oo = ok.view(np.uint8)
    cdef const uint8_t* base = &buf[0] if buf.shape[0] else NULL
    with nogil:
        for i in range(n):
            p = pos[i]
            t = <int64_t>rmq_load_be32(base + p + RMQ_REC_TOTAL)
            magic = <int32_t>rmq_load_be32(base + p + RMQ_REC_MAGIC)
            to[i] = t
            oo[i] = (magic == <int32_t>RMQ_MAGIC_V1 or magic == <int32_t>RMQ_MAGIC_V2) and t >= min_total \
                and p + t <= end[i]
    return total, ok

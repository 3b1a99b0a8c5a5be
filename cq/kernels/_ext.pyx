"""Cython engine of the ConsumeQueueExt kernels: unit heads, their Bloom bitmaps, ext addresses (twin: ``_ext_py.py``).

Every kernel takes a uint8 buffer (one mapped ext file, or a prefix of one) and byte
positions inside it; the loops run without the GIL. The unit head's offsets come from
cq/format.py (through ``_layout.h``).
"""
import numpy as np

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint64_t
from libc.string cimport memcpy

from ._bytes cimport rmq_load_be16, rmq_load_be64
from ._layout cimport (RMQ_EXT_BITMAP_SIZE, RMQ_EXT_HEAD, RMQ_EXT_SIZE, RMQ_EXT_SIZE_WIDTH, RMQ_EXT_STORE_TIME,
                       RMQ_EXT_TAGS_CODE, RMQ_MAX_ADDR)

cdef enum:
    C_PRUNED = 0
    C_PASS = 1
    C_HIT = 2
    C_UNDERFLOW = 3
    C_FOUND = 0
    C_NOT_FOUND = 1

#: ext_bloom_check results
PRUNED, PASS, HIT, UNDERFLOW = C_PRUNED, C_PASS, C_HIT, C_UNDERFLOW
#: ext_units_at statuses
FOUND, NOT_FOUND = C_FOUND, C_NOT_FOUND


def ext_walk(const uint8_t[::1] buf, int64_t pos):
    """Walk ext units from ``pos``: ``(end_position, status)``; status 2 = unit past the buffer."""
    cdef int64_t n = buf.shape[0]
    cdef int16_t size
    cdef int status = 0
    if pos < 0:
        raise ValueError(f"pos must be >= 0, got {pos}")
    with nogil:
        while pos + RMQ_EXT_SIZE_WIDTH <= n:
            size = <int16_t>rmq_load_be16(&buf[pos + RMQ_EXT_SIZE])
            if size <= 0:
                break
            if pos + size > n:
                status = 2
                break
            pos += size
    return pos, status


cdef inline int8_t _ext_head(const uint8_t* base, int64_t pos, int64_t limit,
                             int64_t* tags, int64_t* time, int16_t* bms) noexcept nogil:
    if pos < 0 or pos >= limit or limit - pos < RMQ_EXT_SIZE_WIDTH:
        return C_NOT_FOUND
    if <int16_t>rmq_load_be16(base + pos + RMQ_EXT_SIZE) < 1:
        return C_NOT_FOUND
    if limit - pos < RMQ_EXT_HEAD:
        return C_UNDERFLOW
    tags[0] = <int64_t>rmq_load_be64(base + pos + RMQ_EXT_TAGS_CODE)
    time[0] = <int64_t>rmq_load_be64(base + pos + RMQ_EXT_STORE_TIME)
    bms[0] = <int16_t>rmq_load_be16(base + pos + RMQ_EXT_BITMAP_SIZE)
    if bms[0] >= 1 and pos + RMQ_EXT_HEAD + bms[0] > limit:
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


def ext_units_read(const uint8_t[::1] buf, const int64_t[::1] positions, int64_t limit):
    """:func:`ext_units_at` with each unit's size field and bitmap bytes, in one pass.

    Returns ``(status int8, size int16, tags_code int64, msg_store_time int64,
    bit_map_size int16, bitmap_offsets int64 (k + 1), bitmap_data uint8)``: a row
    not FOUND is zero everywhere and has no bitmap bytes; a FOUND unit with
    ``bit_map_size >= 1`` has its ``bit_map_size`` bitmap bytes (the Arrow binary layout).
    """
    cdef Py_ssize_t i, k = positions.shape[0]
    if limit < 0 or limit > buf.shape[0]:
        raise ValueError(f"limit {limit} outside the buffer of {buf.shape[0]} bytes")
    status = np.full(k, NOT_FOUND, dtype=np.int8)
    sizes = np.zeros(k, dtype=np.int16)
    tags = np.zeros(k, dtype=np.int64)
    times = np.zeros(k, dtype=np.int64)
    bms = np.zeros(k, dtype=np.int16)
    offsets = np.zeros(k + 1, dtype=np.int64)
    cdef int8_t[::1] s = status
    cdef int16_t[::1] z = sizes, b = bms
    cdef int64_t[::1] t = tags, st = times, o = offsets
    cdef int64_t one_tags, one_time, total = 0
    cdef int16_t one_bms
    cdef const uint8_t* base = &buf[0] if buf.shape[0] else NULL
    if base == NULL:
        return status, sizes, tags, times, bms, offsets, np.empty(0, dtype=np.uint8)
    with nogil:
        for i in range(k):
            s[i] = _ext_head(base, positions[i], limit, &one_tags, &one_time, &one_bms)
            if s[i] == C_FOUND:
                z[i] = <int16_t>rmq_load_be16(base + positions[i] + RMQ_EXT_SIZE)
                t[i] = one_tags
                st[i] = one_time
                b[i] = one_bms
                if one_bms >= 1:
                    total += one_bms
            o[i + 1] = total
    data = np.empty(total, dtype=np.uint8)
    cdef uint8_t[::1] d = data
    with nogil:
        for i in range(k):
            if o[i + 1] > o[i]:  # FOUND and inside ``limit`` (_ext_head checked the bitmap's end)
                memcpy(&d[o[i]], base + positions[i] + RMQ_EXT_HEAD, o[i + 1] - o[i])
    return status, sizes, tags, times, bms, offsets, data


cdef inline uint8_t _bloom_verdict(const uint8_t* bitmap, int64_t time, int16_t bms, const int32_t* byte_idx,
                                   const uint8_t* masks, Py_ssize_t nb, int64_t bit_num,
                                   int64_t born_time) noexcept nogil:
    # Rules 3-5 of docs/filtering.md#expression-filter for a found ext unit (``bitmap``: its
    # bitmap bytes, ``bms`` of them): let through untested, or HIT / PRUNED on the k bits.
    cdef Py_ssize_t j
    cdef bint hit = 1
    if time <= born_time or bms < 1 or <int64_t>bms * 8 != bit_num:
        return C_PASS
    for j in range(nb):  # every bit, no early exit: a branch on random bitmap bits mispredicts
        hit &= (bitmap[byte_idx[j]] & masks[j]) != 0
    return C_HIT if hit else C_PRUNED


cdef _check_bit_bytes(const int32_t[::1] byte_idx, const uint8_t[::1] masks, int64_t bit_num):
    cdef Py_ssize_t j
    if masks.shape[0] != byte_idx.shape[0]:
        raise ValueError("byte_idx and masks differ in length")
    for j in range(byte_idx.shape[0]):
        if byte_idx[j] < 0 or byte_idx[j] * 8 >= bit_num:
            raise ValueError(f"bit byte index {byte_idx[j]} outside a {bit_num}-bit bitmap")


def bloom_check_units(const uint8_t[::1] found, const int64_t[::1] msg_store_time, const int16_t[::1] bit_map_size,
                      const int64_t[::1] bitmap_offsets, const uint8_t[::1] bitmap_data,
                      const int32_t[::1] byte_idx, const uint8_t[::1] masks, int64_t bit_num, int64_t born_time):
    """:func:`ext_bloom_check`'s decision over ext units already read (``cq.readers.ext.ExtBatch``'s columns).

    Returns uint8 per unit: PASS (not found, or let through untested), HIT or PRUNED.
    A tested row's bitmap is ``bitmap_data[bitmap_offsets[i]:bitmap_offsets[i + 1]]``,
    which must hold its ``bit_map_size`` bytes (ValueError otherwise).
    """
    cdef Py_ssize_t i, k = found.shape[0], nb = byte_idx.shape[0]
    cdef int64_t n = bitmap_data.shape[0]
    _check_bit_bytes(byte_idx, masks, bit_num)
    if msg_store_time.shape[0] != k or bit_map_size.shape[0] != k or bitmap_offsets.shape[0] != k + 1:
        raise ValueError(f"ext unit columns of different lengths ({k} found rows)")
    out = np.full(k, PASS, dtype=np.uint8)
    cdef uint8_t[::1] o = out
    cdef const uint8_t* data = &bitmap_data[0] if n else NULL
    cdef const int32_t* bi = &byte_idx[0] if nb else NULL
    cdef const uint8_t* bm = &masks[0] if nb else NULL
    cdef Py_ssize_t bad = -1
    with nogil:
        for i in range(k):
            if not found[i] or bit_map_size[i] < 1 or <int64_t>bit_map_size[i] * 8 != bit_num:
                continue  # (untested: no bitmap bytes are read)
            if (bitmap_offsets[i] < 0 or bitmap_offsets[i + 1] > n
                    or bitmap_offsets[i + 1] - bitmap_offsets[i] != bit_map_size[i]):
                bad = i
                break
            o[i] = _bloom_verdict(data + bitmap_offsets[i], msg_store_time[i], bit_map_size[i], bi, bm, nb,
                                  bit_num, born_time)
    if bad >= 0:
        raise ValueError(f"row {bad}: bitmap bytes [{bitmap_offsets[bad]}, {bitmap_offsets[bad + 1]}) do not hold "
                         f"its {bit_map_size[bad]}-byte bitmap within {n} bytes")
    return out


def ext_bloom_check(const uint8_t[::1] buf, const int64_t[::1] positions, int64_t limit,
                    const int32_t[::1] byte_idx, const uint8_t[::1] masks, int64_t bit_num, int64_t born_time,
                    uint8_t[::1] found=None):
    """The ConsumeQueue-layer SQL92 decision per ext unit: PASS, HIT, PRUNED or UNDERFLOW (uint8).

    ``found`` (optional, uint8 of ``len(positions)``) gets 1 where a unit is found (as
    :func:`ext_units_at`'s FOUND), else 0: the missing units, without a second pass.
    """
    cdef Py_ssize_t i, k = positions.shape[0], nb = byte_idx.shape[0]
    cdef bint want_found = found is not None
    cdef int64_t tags, time, pos
    cdef int16_t bms
    cdef int8_t st
    cdef const int32_t* bi = &byte_idx[0] if nb else NULL
    cdef const uint8_t* bm = &masks[0] if nb else NULL
    if limit < 0 or limit > buf.shape[0]:
        raise ValueError(f"limit {limit} outside the buffer of {buf.shape[0]} bytes")
    _check_bit_bytes(byte_idx, masks, bit_num)
    if want_found:
        if found.shape[0] != k:
            raise ValueError(f"found holds {found.shape[0]} entries for {k} positions")
        found[:] = 0
    out = np.full(k, PASS, dtype=np.uint8)
    cdef uint8_t[::1] o = out
    cdef const uint8_t* base = &buf[0] if buf.shape[0] else NULL
    if base == NULL:
        return out
    with nogil:
        for i in range(k):
            pos = positions[i]
            st = _ext_head(base, pos, limit, &tags, &time, &bms)
            if want_found and st == C_FOUND:
                found[i] = 1
            if st == C_UNDERFLOW:
                o[i] = C_UNDERFLOW
                continue
            if st == C_FOUND:  # (_ext_head checked that a bitmap lies inside ``limit``)
                o[i] = _bloom_verdict(base + pos + RMQ_EXT_HEAD, time, bms, bi, bm, nb, bit_num, born_time)
    return out


def ext_locate(const int64_t[::1] addresses, const int64_t[::1] starts, int64_t file_size):
    """Each ext address's file and position: ``(index int64, pos int64)``, index -1 where no file holds it.

    An address is an ext address when ``<= MAX_ADDR``; its offset is the address with
    the top bit flipped (docs/formats.md#ext-address); the file is the last whose
    start is at or below the offset, if the offset lies within it (offset 0: the first
    file); the position is the offset modulo ``file_size``.
    """
    cdef Py_ssize_t i, k = addresses.shape[0], nf = starts.shape[0], lo, hi, mid, c = 0
    cdef int64_t a, real
    if file_size <= 0:
        raise ValueError(f"file size {file_size} must be positive")
    index = np.full(k, -1, dtype=np.int64)
    positions = np.zeros(k, dtype=np.int64)
    cdef int64_t[::1] ix = index, ps = positions
    if nf == 0:
        return index, positions
    with nogil:
        for i in range(k):
            a = addresses[i]
            if a > RMQ_MAX_ADDR:
                continue
            real = <int64_t>(<uint64_t>a ^ (<uint64_t>1 << 63))
            if real == 0:
                c = 0
            elif not (starts[c] <= real < starts[c] + file_size):
                lo = 0  # the last start <= real
                hi = nf
                while lo < hi:
                    mid = (lo + hi) >> 1
                    if starts[mid] <= real:
                        lo = mid + 1
                    else:
                        hi = mid
                if lo == 0:
                    continue
                c = lo - 1
            if real < starts[c] + file_size:
                ix[i] = c
                ps[i] = real % file_size
    return index, positions

"""Pure-Python twin of ``_ext.pyx``: the ConsumeQueueExt kernels.

Buffers are uint8 ndarrays (one mapped ext file or a prefix of one); positions are byte
offsets inside that buffer. The functions mirror the compiled engine name for name and
result for result.
"""
from __future__ import annotations

import numpy as np

from .. import format as fmt
from ._record_py import gather_spans

#: ext_bloom_check results
PRUNED, PASS, HIT, UNDERFLOW = 0, 1, 2, 3
#: ext_units_at statuses
FOUND, NOT_FOUND = 0, 1


def ext_walk(buf, pos):
    """Walk ext units from ``pos``: ``(end_position, status)``.

    status 0: stopped at s <= 0 or at the file's end; 2: a unit of size s runs
    past the end of the buffer (end_position is where it starts).
    """
    if pos < 0:
        raise ValueError(f"pos must be >= 0, got {pos}")
    n = len(buf)
    while pos + 2 <= n:
        size = int.from_bytes(bytes(buf[pos:pos + 2]), "big", signed=True)
        if size <= 0:
            return pos, 0
        if pos + size > n:
            return pos, 2
        pos += size
    return pos, 0


def _head(buf, pos):
    return fmt.decode_ext_head(bytes(buf[pos:pos + fmt.MIN_EXT_UNIT_SIZE]), 0)


def ext_units_at(buf, positions, limit):
    """Read the ext unit heads at ``positions`` (file positions; the readable end is ``limit``).

    Returns ``(status int8, tags_code int64, msg_store_time int64, bit_map_size int16)``;
    status FOUND, NOT_FOUND (the broker's lookup returns null: past ``limit``,
    fewer than 2 bytes, or size < 1) or UNDERFLOW (head or bitmap past ``limit``).
    """
    if limit < 0 or limit > len(buf):
        raise ValueError(f"limit {limit} outside the buffer of {len(buf)} bytes")
    k = len(positions)
    status = np.full(k, NOT_FOUND, dtype=np.int8)
    tags = np.zeros(k, dtype=np.int64)
    times = np.zeros(k, dtype=np.int64)
    bms = np.zeros(k, dtype=np.int16)
    for i, pos in enumerate(positions.tolist()):
        if pos < 0 or pos >= limit or limit - pos < 2:
            continue
        if int.from_bytes(bytes(buf[pos:pos + 2]), "big", signed=True) < 1:
            continue
        if limit - pos < fmt.MIN_EXT_UNIT_SIZE:
            status[i] = UNDERFLOW
            continue
        _, t, st, b = _head(buf, pos)
        if b >= 1 and pos + fmt.MIN_EXT_UNIT_SIZE + b > limit:
            status[i] = UNDERFLOW
            continue
        status[i], tags[i], times[i], bms[i] = FOUND, t, st, b
    return status, tags, times, bms


def ext_units_read(buf, positions, limit):
    """:func:`ext_units_at` with each unit's size field and bitmap bytes.

    Returns ``(status int8, size int16, tags_code int64, msg_store_time int64,
    bit_map_size int16, bitmap_offsets int64 (k + 1), bitmap_data uint8)``: a row
    not FOUND is zero everywhere and has no bitmap bytes; a FOUND unit with
    ``bit_map_size >= 1`` has its ``bit_map_size`` bitmap bytes (the Arrow binary layout).
    """
    status, tags, times, bms = ext_units_at(buf, positions, limit)
    found = status == FOUND
    sizes = np.zeros(len(positions), dtype=np.int16)
    for i in np.flatnonzero(found).tolist():
        sizes[i] = _head(buf, int(positions[i]))[0]
    lengths = np.where(found & (bms >= 1), bms, 0).astype(np.int64)
    starts = np.where(lengths > 0, np.asarray(positions, dtype=np.int64) + fmt.MIN_EXT_UNIT_SIZE, 0)
    offsets, data = gather_spans(buf, starts, lengths)
    return status, sizes, tags, times, bms, offsets, data


def ext_locate(addresses, starts, file_size):
    """Each ext address's file and position: ``(index int64, pos int64)``, index -1 where no file holds it.

    An address is an ext address when ``<= MAX_ADDR``; its offset is the address with
    the top bit flipped (docs/formats.md#ext-address); the file is the last whose
    start is at or below the offset, if the offset lies within it (offset 0: the first
    file); the position is the offset modulo ``file_size``.
    """
    if file_size <= 0:
        raise ValueError(f"file size {file_size} must be positive")
    addresses = np.asarray(addresses, dtype=np.int64)
    starts = np.asarray(starts, dtype=np.int64)
    index = np.full(len(addresses), -1, dtype=np.int64)
    positions = np.zeros(len(addresses), dtype=np.int64)
    if not len(starts):
        return index, positions
    is_ext = addresses <= fmt.MAX_ADDR
    real = np.where(is_ext, addresses.astype(np.uint64) ^ np.uint64(1 << 63), 0).astype(np.int64)
    idx = np.searchsorted(starts, real, side="right") - 1
    idx[is_ext & (real == 0)] = 0
    ok = is_ext & (idx >= 0)
    ok &= real < starts[np.clip(idx, 0, None)] + file_size
    index[ok] = idx[ok]
    positions[ok] = real[ok] % file_size
    return index, positions


def _check_bit_bytes(byte_idx, masks, bit_num):
    if len(masks) != len(byte_idx):
        raise ValueError("byte_idx and masks differ in length")
    for b in np.asarray(byte_idx).tolist():
        if b < 0 or b * 8 >= bit_num:
            raise ValueError(f"bit byte index {b} outside a {bit_num}-bit bitmap")


def bloom_check_units(found, msg_store_time, bit_map_size, bitmap_offsets, bitmap_data, byte_idx, masks,
                      bit_num, born_time):
    """:func:`ext_bloom_check`'s decision over ext units already read (``cq.readers.ext.ExtBatch``'s columns).

    Rules 3-5 of docs/filtering.md#expression-filter. Returns uint8 per unit: PASS (not
    found, or let through untested: store time <= born_time, no bitmap, or bitmap length
    * 8 != bit_num), HIT (every bit set) or PRUNED (some bit clear). A tested row's bitmap
    is ``bitmap_data[bitmap_offsets[i]:bitmap_offsets[i + 1]]``, which must hold its
    ``bit_map_size`` bytes (ValueError otherwise).
    """
    _check_bit_bytes(byte_idx, masks, bit_num)
    k = len(found)
    if len(msg_store_time) != k or len(bit_map_size) != k or len(bitmap_offsets) != k + 1:
        raise ValueError(f"ext unit columns of different lengths ({k} found rows)")
    found = np.asarray(found).astype(bool)
    bms = np.asarray(bit_map_size).astype(np.int64)
    offsets = np.asarray(bitmap_offsets, dtype=np.int64)
    with_bitmap = found & (bms >= 1) & (bms * 8 == bit_num)
    lengths = offsets[1:] - offsets[:-1]
    bad = np.flatnonzero(with_bitmap & ((offsets[:-1] < 0) | (offsets[1:] > len(bitmap_data)) | (lengths != bms)))
    if len(bad):
        i = int(bad[0])
        raise ValueError(f"row {i}: bitmap bytes [{offsets[i]}, {offsets[i + 1]}) do not hold its {bms[i]}-byte "
                         f"bitmap within {len(bitmap_data)} bytes")
    out = np.full(k, PASS, dtype=np.uint8)
    rows = np.flatnonzero(with_bitmap & (np.asarray(msg_store_time) > born_time))
    data, first = np.asarray(bitmap_data), offsets[rows]
    hit = np.ones(len(rows), dtype=bool)
    for b, m in zip(np.asarray(byte_idx).tolist(), np.asarray(masks).tolist()):
        hit &= (data[first + b] & m) != 0
    out[rows] = np.where(hit, HIT, PRUNED)
    return out


def ext_bloom_check(buf, positions, limit, byte_idx, masks, bit_num, born_time, found=None):
    """The ConsumeQueue-layer SQL92 decision for each ext unit (rules 3-5 of docs/filtering.md#expression-filter).

    ``byte_idx``/``masks`` are the group's k bit positions as (p // 8, 1 << p % 8).
    Returns uint8: PASS (no unit, store time <= born_time, no bitmap, or bitmap
    length * 8 != bit_num: the broker lets the message through untested), HIT
    (every bit set), PRUNED (some bit clear), UNDERFLOW (corrupt unit).
    ``found`` (optional, uint8 of ``len(positions)``) gets 1 where a unit is found, else 0.
    """
    _check_bit_bytes(byte_idx, masks, bit_num)
    status, _, _, times, bms, offsets, data = ext_units_read(buf, positions, limit)
    if found is not None:
        if len(found) != len(positions):
            raise ValueError(f"found holds {len(found)} entries for {len(positions)} positions")
        found[:] = status == FOUND
    out = bloom_check_units(status == FOUND, times, bms, offsets, data, byte_idx, masks, bit_num, born_time)
    out[status == UNDERFLOW] = UNDERFLOW
    return out

"""Batch kernels over store bytes: tag-code scans, ext resolution, Bloom checks, properties.

The work is done by ``cq/_scan.pyx`` (or its twin ``cq/_scan_py.py`` under
``RMQFILTER_PUREPYTHON=1``); this module validates inputs at the boundary.
"""
from __future__ import annotations

import numpy as np

from rmqfilter_engine import load

from . import format as fmt

_scan, ENGINE = load("cq", "_scan")


def kernel_array(values, dtype) -> np.ndarray:
    """``values`` as the kernels take an array argument: ``dtype``, C-contiguous and aligned.

    ``np.ascontiguousarray`` alone passes a misaligned view as it is: one ConsumeQueue unit's
    ``tags_code`` field is contiguous but 4 bytes off an 8-byte boundary, and a kernel's load of
    it is undefined behaviour (UBSan reports it; some machines fault). Aligned input is not copied.
    """
    return np.require(np.asarray(values, dtype=dtype), dtype, ["C", "A"])


def _as_u8(buf, name: str) -> np.ndarray:
    if isinstance(buf, np.ndarray):
        if buf.dtype != np.uint8:
            if buf.dtype == fmt.CQ_UNIT_DTYPE:
                return np.ascontiguousarray(buf).view(np.uint8).reshape(-1)
            raise TypeError(f"{name} must be bytes-like or a uint8 array, got dtype {buf.dtype}")
        return np.ascontiguousarray(buf.reshape(-1))
    try:
        return np.frombuffer(buf, dtype=np.uint8)
    except TypeError as exc:
        raise TypeError(f"{name} must be bytes-like, got {type(buf).__name__}") from exc


def gather_spans(buf, starts, lengths) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate byte spans of ``buf`` into the Arrow (large) binary layout.

    Parameters
    ----------
    buf : uint8 ndarray
        The bytes (e.g. a mapped store file).
    starts, lengths : int64 ndarray
        Span ``i`` is ``buf[starts[i]:starts[i] + lengths[i]]``; spans outside
        ``buf`` raise ValueError.

    Returns
    -------
    (offsets, data)
        ``offsets`` int64 (k + 1) and ``data`` uint8: an Arrow binary array's buffers.
    """
    return _scan.gather_spans(buf, kernel_array(starts, np.int64), kernel_array(lengths, np.int64))


def scan_tags(units, codes) -> np.ndarray:
    """Select ConsumeQueue units by tag code, as the broker's tag filter compares them.

    Parameters
    ----------
    units : bytes-like or uint8 ndarray
        Whole 20-byte big-endian ConsumeQueue units (e.g. a mapped file).
    codes : iterable of int
        Tag codes (``cq.tags_code`` values). Only the low 32 bits are compared,
        as the broker's ``(int) tagsCode``; values outside int32 are reduced.

    Returns
    -------
    numpy.ndarray
        int64 indices of the units whose tag code is in ``codes``, ascending.

    Raises
    ------
    ValueError
        If the buffer length is not a multiple of 20.

    Examples
    --------
    >>> from cq import format as fmt
    >>> units = fmt.encode_cq_unit(0, 100, tags_code("TagA")) + fmt.encode_cq_unit(100, 90, 7)
    >>> scan_tags(units, [tags_code("TagA")]).tolist()
    [0]
    """
    u8 = _as_u8(units, "units")
    if len(u8) % fmt.CQ_STORE_UNIT_SIZE:
        raise ValueError(
            f"units buffer of {len(u8)} bytes is not a whole number of {fmt.CQ_STORE_UNIT_SIZE}-byte units"
        )
    code_arr = np.asarray(list(codes) if not isinstance(codes, np.ndarray) else codes)
    if code_arr.size and code_arr.dtype.kind not in "iu":
        raise TypeError(f"codes must be integers, got dtype {code_arr.dtype}")
    code_arr = np.unique(code_arr.astype(np.int64).astype(np.uint32).astype(np.int32))
    return _scan.scan_tags(u8, np.ascontiguousarray(code_arr, dtype=np.int32))


def bloom_masks(bit_pos) -> tuple[np.ndarray, np.ndarray]:
    """``(byte_idx int32, masks uint8)`` of Bloom bit positions in a ``BitsArray`` (LSB first)."""
    pos = np.asarray(list(bit_pos), dtype=np.int64)
    return (pos // 8).astype(np.int32), (1 << (pos % 8)).astype(np.uint8)


def check_bitmaps(ext_bytes, positions, bit_pos, *, bit_num: int = 112, born_time: int = 0,
                  limit: int | None = None) -> np.ndarray:
    """The SQL92 ConsumeQueue-layer decision for many ext units of one ext file.

    Parameters
    ----------
    ext_bytes : bytes-like or uint8 ndarray
        One ConsumeQueueExt file (or a prefix of one).
    positions : array of int
        Byte positions of the units inside ``ext_bytes`` (``undecorate(address) % file_size``).
    bit_pos : sequence of int
        The group's Bloom bit positions (``BloomFilterData.bit_pos``).
    bit_num : int
        ``BloomFilterData.bit_num`` (m); a bitmap of another length is not tested.
    born_time : int
        The filter's bornTime: units stored at or before it are not tested.
    limit : int, optional
        Readable end of the file (the broker's write position); default the whole buffer.

    Returns
    -------
    numpy.ndarray
        uint8 per unit: ``PASS`` (1, let through untested: no unit, too old, no
        bitmap or another length), ``HIT`` (2, every bit set), ``PRUNED`` (0),
        ``UNDERFLOW`` (3, the unit runs past ``limit``).
    """
    buf = _as_u8(ext_bytes, "ext_bytes")
    pos = kernel_array(positions, np.int64)
    lim = len(buf) if limit is None else int(limit)
    bits = bloom_bit_bytes(bit_pos, bit_num)
    if bits is None:
        return np.full(len(pos), PASS, dtype=np.uint8)
    return _scan.ext_bloom_check(buf, pos, lim, *bits, int(bit_num), int(born_time))


def check_ext_batch(batch, bit_pos, *, bit_num: int = 112, born_time: int = 0) -> np.ndarray:
    """:func:`check_bitmaps` over ext units already read (a :class:`cq.ext.ExtBatch`).

    Returns uint8 per row: ``PASS`` (no unit, or let through untested), ``HIT`` or ``PRUNED``.
    """
    n = len(batch.found)
    bits = bloom_bit_bytes(bit_pos, bit_num)
    if bits is None:
        return np.full(n, PASS, dtype=np.uint8)
    c = kernel_array
    return _scan.bloom_check_units(c(batch.found, np.bool_).view(np.uint8), c(batch.msg_store_time, np.int64),
                                   c(batch.bit_map_size, np.int16), c(batch.bitmap_offsets, np.int64),
                                   c(batch.bitmap_data, np.uint8), *bits, int(bit_num), int(born_time))


def bloom_bit_bytes(bit_pos, bit_num: int) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`bloom_masks` of a group's bit positions, or None when one lies outside ``[0, bit_num)``:
    ``isHit`` then throws and the broker matches every unit (docs/filtering.md#expression-filter, rule 5)."""
    bp = np.asarray(list(bit_pos), dtype=np.int64)
    if not ((bp >= 0) & (bp < bit_num)).all():
        return None
    return bloom_masks(bp)


PRUNED, PASS, HIT, UNDERFLOW = _scan.PRUNED, _scan.PASS, _scan.HIT, _scan.UNDERFLOW

"""The store kernels: batch loops over store bytes, compiled (Cython) with a pure-Python twin each.

One module per concern, each ``_x.pyx`` beside its twin ``_x_py.py`` (``RMQFILTER_PUREPYTHON=1``
selects the twins; ``rmqfilter_engine.load`` chooses):

========== ====================================================================================
module     concern
========== ====================================================================================
_tagscan   the ConsumeQueue unit scans: tags (:func:`scan_tags`), the end of the data (:func:`data_end`)
_ext       ConsumeQueueExt unit heads, Bloom bitmap checks, ext addresses
_record    the CommitLog record walk: validation, recovery walk, one-record decode, body CRCs
_dledger   the DLedger CommitLog walk: entry headers stepped over, each entry's record validated
_inner     inner-batch bodies split into their messages (a BatchCQ topic's batches)
_decode    the data path's decoder: records (and properties texts) straight into Arrow buffers
_pool      the decoder's output memory, kept for reuse (``pool_bytes``)
_inflate   zlib bodies of a decoded body column (``inflate_bodies``)
_objects   strs, property dicts and Messages built from decoded columns
_tags      Java ``String.hashCode`` of tags (facade: :mod:`cq.tags`)
_layout    the store layout the compiled kernels were built with (``LAYOUT``)
========== ====================================================================================

What the compiled modules share is declared in ``.pxd`` files (``_record.pxd``: one record's
layout and parse; ``_pool.pxd``: growable buffers; ``_bytes.pxd``, ``_layout.pxd``: C from the
``.h`` files). Every byte offset comes from :mod:`cq.format` through :mod:`cq.kernels.layout`
(``_layout.h`` is written from it at build time). This module validates inputs at the boundary.
"""
from __future__ import annotations

import importlib
from types import ModuleType

import numpy as np

from rmqfilter_engine import load

from .. import format as fmt

_tagscan, _e1 = load("cq.kernels", "_tagscan")
_ext, _e2 = load("cq.kernels", "_ext")
_record, _e3 = load("cq.kernels", "_record")
_decode, _e4 = load("cq.kernels", "_decode")
_pool, _e5 = load("cq.kernels", "_pool")
_inflate, _e6 = load("cq.kernels", "_inflate")
_objects, _e7 = load("cq.kernels", "_objects")
_layout, _e8 = load("cq.kernels", "_layout")
_dledger, _e9 = load("cq.kernels", "_dledger")
_inner, _e10 = load("cq.kernels", "_inner")
#: "cython" when every store kernel is compiled, else "python" (the twins).
ENGINE = "cython" if {_e1, _e2, _e3, _e4, _e5, _e6, _e7, _e8, _e9, _e10} == {"cython"} else "python"
#: The names of the kernel modules above (``_tags`` has its own facade, :mod:`cq.tags`).
MODULES = ("_tagscan", "_ext", "_record", "_decode", "_pool", "_inflate", "_objects", "_layout", "_dledger", "_inner")


def engine_modules(engine: str) -> dict[str, ModuleType]:
    """Each of :data:`MODULES` in one engine, by name: ``"cython"`` (ImportError when not built) or ``"python"``.

    For code that runs both engines side by side (the differential tests, the benchmarks'
    twin rounds); the library itself uses the modules loaded above.
    """
    suffix = {"cython": "", "python": "_py"}[engine]
    return {name: importlib.import_module(f"{__name__}.{name}{suffix}") for name in MODULES}


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
    return _record.gather_spans(buf, kernel_array(starts, np.int64), kernel_array(lengths, np.int64))


def split_inner(body) -> tuple[np.ndarray, int, str | None]:
    """The messages of an inner-batch record's body (docs/formats.md#inner-batch).

    Returns
    -------
    (spans, error_pos, error)
        ``spans`` int64 (k, 5): each message's body CRC, flag, body start, body length and
        properties length (the properties text follows the body and its 2-byte length), for the
        messages up to the first that does not fit; ``error`` None, or what is wrong at byte
        ``error_pos`` of ``body``.
    """
    return _inner.split_inner(_as_u8(body, "body"))


def split_records(buf, starts, lengths) -> tuple[np.ndarray, np.ndarray, int, int, str | None]:
    """:func:`split_inner` of many inner-batch bodies inside one buffer (a decoded body column).

    Body ``i`` is ``buf[starts[i]:starts[i] + lengths[i]]``.

    Returns
    -------
    (spans, counts, bad, error_pos, error)
        ``spans`` int64 (m, 5) as :func:`split_inner`'s, every body's messages in order, with
        body starts counted from the start of ``buf``; ``counts`` int64: each body's messages.
        ``bad`` -1, or the first body that does not split (``error`` at its byte ``error_pos``;
        ``spans`` then hold the bodies before it).
    """
    return _inner.split_records(_as_u8(buf, "buf"), kernel_array(starts, np.int64), kernel_array(lengths, np.int64))


def properties_columns(buf, starts, lengths, fields) -> dict:
    """The decoder's ``properties``/``tags``/``keys`` columns (those in ``fields``) of properties texts
    outside a record (an inner-batch message's): text ``i`` is ``buf[starts[i]:starts[i] + lengths[i]]``,
    parsed and laid out as :meth:`cq.readers.commitlog.CommitLog.decode_columns` does a record's."""
    mask = fmt.record_field_mask([f for f in fields if f in ("properties", "tags", "keys")])
    return _decode.properties_columns(_as_u8(buf, "buf"), kernel_array(starts, np.int64),
                                      kernel_array(lengths, np.int64), mask)


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
    return _tagscan.scan_tags(u8, np.ascontiguousarray(code_arr, dtype=np.int32))


def data_end(units) -> int:
    """How many of the ConsumeQueue ``units`` (whole 20-byte big-endian units, bytes-like or a uint8 or unit
    array) come before the first that ends the queue's data in the broker's recovery: ``commit_log_offset < 0``
    or ``size <= 0`` (docs/formats.md#consumequeue); all of them when none does. No unit past that one is read.

    Examples
    --------
    >>> from cq import format as fmt
    >>> data_end(fmt.encode_cq_unit(0, 100, 7) + fmt.encode_cq_unit(100, 0, 0) + fmt.encode_cq_unit(200, 9, 1))
    1
    """
    return int(_tagscan.data_end(_as_u8(units, "units")))


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
    return _ext.ext_bloom_check(buf, pos, lim, *bits, int(bit_num), int(born_time))


def check_ext_batch(batch, bit_pos, *, bit_num: int = 112, born_time: int = 0) -> np.ndarray:
    """:func:`check_bitmaps` over ext units already read (a :class:`cq.readers.ext.ExtBatch`).

    Returns uint8 per row: ``PASS`` (no unit, or let through untested), ``HIT`` or ``PRUNED``.
    """
    n = len(batch.found)
    bits = bloom_bit_bytes(bit_pos, bit_num)
    if bits is None:
        return np.full(n, PASS, dtype=np.uint8)
    c = kernel_array
    return _ext.bloom_check_units(c(batch.found, np.bool_).view(np.uint8), c(batch.msg_store_time, np.int64),
                                   c(batch.bit_map_size, np.int16), c(batch.bitmap_offsets, np.int64),
                                   c(batch.bitmap_data, np.uint8), *bits, int(bit_num), int(born_time))


def bloom_bit_bytes(bit_pos, bit_num: int) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`bloom_masks` of a group's bit positions, or None when one lies outside ``[0, bit_num)``:
    ``isHit`` then throws and the broker matches every unit (docs/filtering.md#expression-filter, rule 5)."""
    bp = np.asarray(list(bit_pos), dtype=np.int64)
    if not ((bp >= 0) & (bp < bit_num)).all():
        return None
    return bloom_masks(bp)


PRUNED, PASS, HIT, UNDERFLOW = _ext.PRUNED, _ext.PASS, _ext.HIT, _ext.UNDERFLOW
FOUND, NOT_FOUND = _ext.FOUND, _ext.NOT_FOUND

"""Arrow-batch bodies of the Spark functions, run inside Spark's Python workers.

Every function here takes and returns ``pyarrow`` arrays, crosses into the
library's batch kernels (``Selector.matches_arrow``, ``cq.tags_code_many``,
``BloomFilter.calc_bit_positions_many`` / ``is_hit_many``) once per batch, and
never imports pyspark, so it can be tested and benchmarked without a JVM.

Compiled selectors and Bloom filters are cached per Python worker: a selector's
text is compiled once in each worker however many batches it sees (Spark reuses
its Python workers between tasks, ``spark.python.worker.reuse`` = true).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import bloom
import cq
import selector

# sql text -> compiled selector; (f, n) -> BloomFilter. Per worker process.
_SELECTORS: dict[str, Any] = {}
_BLOOMS: dict[tuple[int, int], Any] = {}


def compiled_selector(sql: str):
    """Return the compiled selector for ``sql``, compiling it once per process."""
    s = _SELECTORS.get(sql)
    if s is None:
        s = _SELECTORS[sql] = selector.compile(sql)
    return s


def bloom_filter(f: int, n: int):
    """Return ``bloom.BloomFilter(f, n)``, built once per process."""
    bf = _BLOOMS.get((f, n))
    if bf is None:
        bf = _BLOOMS[(f, n)] = bloom.BloomFilter(f=f, n=n)
    return bf


def _as_array(values) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks()
    return values


def _bool_array(decisions, valid: np.ndarray | None = None) -> pa.Array:
    """Arrow boolean array from a numpy bool array; rows where ``valid`` is False are NULL."""
    mask = None if valid is None or valid.all() else ~valid
    return pa.array(np.asarray(decisions, dtype=np.bool_), type=pa.bool_(), mask=mask)


def selector_match_columns(sql: str, names: tuple[str, ...], columns: list[pa.Array]) -> pa.Array:
    """Broker decision of selector ``sql`` for each row, given one string column per property.

    Parameters
    ----------
    sql : str
        Selector text.
    names : tuple of str
        Property names, parallel to ``columns`` (the selector's ``properties``).
        Empty when the selector reads no property; ``columns`` then holds one
        placeholder column that only gives the batch length.
    columns : list of pyarrow.Array
        String arrays; NULL means the property is absent from that message.

    Returns
    -------
    pyarrow.BooleanArray
        True only where the selector evaluates to TRUE (never NULL).
    """
    s = compiled_selector(sql)
    if not names:
        # Nothing to look up: every row gets the same decision.
        n = len(columns[0])
        return _bool_array(np.full(n, bool(s.matches({}))))
    props = {name: _as_array(col) for name, col in zip(names, columns)}
    return _as_array(s.matches_arrow(props))


def selector_match_map(sql: pa.Array, props: pa.Array) -> pa.Array:
    """Broker decision of per-row selector text ``sql`` over per-row property maps.

    The SQL-registered form: ``props`` is the whole ``map<string,string>``
    column. Rows sharing a selector text are evaluated together, one kernel
    call per distinct text. A NULL ``sql`` gives NULL; a NULL map means the
    message has no properties.
    """
    sql = _as_array(sql)
    props = _as_array(props)
    n = len(sql)
    if n == 0:
        return pa.array([], type=pa.bool_())
    if sql.null_count == 0:
        distinct = pc.unique(sql)
        if len(distinct) == 1:
            return _as_array(compiled_selector(distinct[0].as_py()).matches_arrow(props))
    out = np.zeros(n, dtype=np.bool_)
    valid = sql.is_valid().to_numpy(zero_copy_only=False)
    for text in pc.unique(sql.drop_null()).to_pylist():
        rows = np.flatnonzero(pc.equal(sql, text).fill_null(False).to_numpy(zero_copy_only=False))
        decided = compiled_selector(text).matches_arrow(props.take(pa.array(rows)))
        out[rows] = _as_array(decided).to_numpy(zero_copy_only=False)
    return _bool_array(out, valid)


def tags_code(tags: pa.Array) -> pa.Array:
    """``cq.tags_code`` of each tag as an Arrow int32 array (NULL or empty tag -> 0)."""
    return pa.array(np.asarray(cq.tags_code_many(_as_array(tags)), dtype=np.int32), type=pa.int32())


def _null_mask(values: pa.Array) -> np.ndarray:
    return values.is_null().to_numpy(zero_copy_only=False)


def bloom_positions(keys: pa.Array, f: int = 20, n: int = 32) -> pa.Array:
    """``calcBitPositions`` of each key as an Arrow ``list<int32>`` array; NULL key -> NULL."""
    keys = _as_array(keys)
    bf = bloom_filter(f, n)
    nulls = _null_mask(keys)
    # The kernel gives a row of -1 for a NULL key; the list mask hides it.
    positions = np.ascontiguousarray(bf.calc_bit_positions_many(keys), dtype=np.int32).reshape(len(keys), bf.k)
    rows, k = positions.shape
    offsets = pa.array(np.arange(0, rows * k + 1, k, dtype=np.int32))
    values = pa.array(positions.reshape(-1), type=pa.int32())
    mask = pa.array(nulls) if nulls.any() else None
    return pa.ListArray.from_arrays(offsets, values, type=pa.list_(pa.int32()), mask=mask)


def _fixed_width_rows(bitmaps: pa.Array, width: int, rows: np.ndarray) -> np.ndarray:
    """Gather ``rows`` of a binary array whose values are all ``width`` bytes long into (len(rows), width)."""
    buffers = bitmaps.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int32)[bitmaps.offset:]
    data = np.frombuffer(buffers[2] or b"", dtype=np.uint8)
    starts = offsets[rows].astype(np.int64)
    return data[starts[:, None] + np.arange(width, dtype=np.int64)]


def bloom_is_hit(keys: pa.Array, bitmaps: pa.Array, f: int = 20, n: int = 32) -> pa.Array:
    """``isHit(generate(key), bitmap)`` for each row.

    NULL where the key or bitmap is NULL, or the bitmap is not ``m / 8`` bytes
    long (the broker's ``isHit`` throws there; its ConsumeQueue layer then lets
    the message through).
    """
    keys = _as_array(keys)
    bitmaps = _as_array(bitmaps)
    if pa.types.is_large_binary(bitmaps.type):
        bitmaps = bitmaps.cast(pa.binary())
    bf = bloom_filter(f, n)
    width = bf.m // 8
    count = len(keys)
    lengths = pc.binary_length(bitmaps).fill_null(-1).to_numpy(zero_copy_only=False)
    valid = (~_null_mask(keys)) & (lengths == width)
    out = np.zeros(count, dtype=np.bool_)
    if valid.any():
        rows = np.flatnonzero(valid)
        bits = _fixed_width_rows(bitmaps, width, rows)
        row_keys = keys.take(pa.array(rows))
        for key in pc.unique(row_keys).to_pylist():
            sel = pc.equal(row_keys, key).to_numpy(zero_copy_only=False)
            out[rows[sel]] = bf.is_hit_many(bf.generate(key), bits[sel])
    return _bool_array(out, valid)

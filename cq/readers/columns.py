"""CommitLog records as columns in Arrow layout: what :meth:`cq.CommitLog.decode_columns` returns.

The decoder (``decode_columns`` in ``cq/kernels/_decode.pyx``, twin ``_decode_py.py``)
writes each field of many records straight into Arrow buffers: numpy arrays
of offsets, data and validity (docs/data-path.md). This module holds them,
joins the runs of several CommitLog files, and turns them into pyarrow arrays
on request. pyarrow is imported only there (``cq`` works without it).
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from rmqfilter_arrow import binary_array, fixed_array

from .. import format as fmt
from ..kernels import _objects, gather_spans, kernel_array

#: field name -> kind ("i4", "i8", "str", "bin", "map"), from cq.format.RECORD_FIELDS
FIELD_KINDS = dict(fmt.RECORD_FIELDS)
#: Fields whose absence is a NULL (the property is missing)
_NULLABLE = ("tags", "keys")


def field_mask(fields: Iterable[str] | None) -> int:
    """Column mask of ``fields`` (None: every field); ValueError naming an unknown field."""
    return fmt.ALL_RECORD_FIELDS if fields is None else fmt.record_field_mask(fields)


class MessageColumns:
    """Decoded CommitLog records, one entry per asked field, in Arrow layout.

    Attributes
    ----------
    num_rows : int
    columns : dict
        Per field name: an int32/int64 array (fixed fields); ``(offsets int32
        (n + 1), data uint8, valid)`` for text and bytes (``valid`` a uint8 0/1
        array for ``tags``/``keys``, else None; text is UTF-8 with malformed
        bytes replaced by U+FFFD, as :meth:`cq.CommitLog.read_message` gives);
        for ``properties``, ``(map_offsets, key_offsets, key_data,
        value_offsets, value_data)`` (int32 offsets), entries in
        :attr:`cq.Message.properties` order.

    Examples
    --------
    >>> import cq
    >>> store = cq.Store("tests/data/golden_store")
    >>> q = store.consume_queue("GoldenFilterTopic", 0)
    >>> cols = store.commit_log.decode_columns(q.read(0, 3)["commit_log_offset"], ["tags", "store_timestamp"])
    >>> [cols.value("tags", i) for i in range(3)] == [store.commit_log.read_message(int(o)).tags
    ...                                                for o in q.read(0, 3)["commit_log_offset"]]
    True
    """

    __slots__ = ("columns", "num_rows")

    def __init__(self, columns: dict, num_rows: int) -> None:
        self.columns = columns
        self.num_rows = num_rows

    def __len__(self) -> int:
        return self.num_rows

    def __repr__(self) -> str:
        return f"MessageColumns({self.num_rows} rows: {', '.join(self.columns)})"

    def nbytes(self) -> int:
        """Bytes held by the columns' buffers."""
        total = 0
        for col in self.columns.values():
            for part in (col if isinstance(col, tuple) else (col,)):
                if part is not None:
                    total += part.nbytes
        return total

    def value(self, name: str, i: int):
        """Row ``i`` of field ``name`` as :class:`cq.Message` holds it (int, str, bytes, dict or None)."""
        col = self.columns[name]
        kind = FIELD_KINDS[name]
        if kind in ("i4", "i8"):
            return int(col[i])
        if kind == "map":
            mo, ko, kd, vo, vd = col
            return {kd[ko[e]:ko[e + 1]].tobytes().decode(): vd[vo[e]:vo[e + 1]].tobytes().decode()
                    for e in range(int(mo[i]), int(mo[i + 1]))}
        offsets, data, valid = col
        if valid is not None and not valid[i]:
            return None
        raw = data[offsets[i]:offsets[i + 1]].tobytes()
        return raw if kind == "bin" else raw.decode()

    def texts(self, name: str, *, binary: bool = False, rows: np.ndarray | None = None) -> list:
        """Field ``name`` (text or bytes) as a list of str (bytes with ``binary``), None where absent.

        ``rows`` (int64 row numbers, default all) picks the rows, in that order.
        """
        offsets, data, valid = self.columns[name]
        rows = None if rows is None else kernel_array(rows, np.int64)
        out = _objects.texts_list(offsets, data, binary, rows)
        if valid is not None:
            ok = valid if rows is None else valid[rows]
            out = [v if k else None for v, k in zip(out, ok.tolist())]
        return out

    def dicts(self, rows: np.ndarray | None = None) -> list[dict]:
        """The ``properties`` field as one dict per row (:attr:`cq.Message.properties`); ``rows`` as :meth:`texts`."""
        return _objects.property_dicts(*self.columns["properties"], None if rows is None else kernel_array(rows, np.int64))

    # ------------------------------------------------------------------ Arrow
    def arrow(self, name: str, *, large: bool = False):
        """Field ``name`` as a pyarrow array, without copying the buffers.

        Types: int32/int64; ``string`` (``tags``, ``keys``, ``topic``, hosts);
        ``binary`` (``body``); ``map<string, string>`` (``properties``).
        ``large`` gives ``large_string``/``large_binary`` (int64 offsets).
        """
        import pyarrow as pa  # deliberately lazy: cq itself does not need pyarrow

        col = self.columns[name]
        kind = FIELD_KINDS[name]
        n = self.num_rows
        if kind in ("i4", "i8"):
            return fixed_array(col)
        if kind == "map":
            mo, ko, kd, vo, vd = col
            keys = binary_array(pa.string(), len(ko) - 1, ko, kd)
            values = binary_array(pa.string(), len(vo) - 1, vo, vd)
            return pa.MapArray.from_arrays(fixed_array(mo), keys, values)
        offsets, data, valid = col
        t = pa.binary() if kind == "bin" else pa.string()
        arr = binary_array(t, n, offsets, data, valid)
        if large:
            arr = arr.cast(pa.large_binary() if kind == "bin" else pa.large_string())
        return arr

    def to_arrow(self, names: Iterable[str] | None = None) -> dict:
        """``{name: pyarrow array}`` of ``names`` (default: every decoded field)."""
        return {name: self.arrow(name) for name in (names if names is not None else self.columns)}


def _shift(offsets: np.ndarray, by: int) -> np.ndarray:
    if by + int(offsets[-1]) > 0x7FFFFFFF:
        raise OverflowError("joined column passes 2 GiB: decode fewer records at a time")
    return offsets + np.int32(by)


def concat(parts: list[MessageColumns], names: list[str]) -> MessageColumns:
    """Join the columns of consecutive runs (rows in order)."""
    if len(parts) == 1:
        return parts[0]
    n = sum(p.num_rows for p in parts)
    out = {}
    for name in names:
        kind = FIELD_KINDS[name]
        cols = [p.columns[name] for p in parts]
        if not cols:
            continue
        if kind in ("i4", "i8"):
            out[name] = np.concatenate(cols)
        elif kind == "map":
            mos, kos, vos = [np.zeros(1, np.int32)], [np.zeros(1, np.int32)], [np.zeros(1, np.int32)]
            for mo, ko, _, vo, _ in cols:
                mos.append(_shift(mo[1:], int(mos[-1][-1])))
                kos.append(_shift(ko[1:], int(kos[-1][-1])))
                vos.append(_shift(vo[1:], int(vos[-1][-1])))
            out[name] = (np.concatenate(mos), np.concatenate(kos), np.concatenate([c[2] for c in cols]),
                         np.concatenate(vos), np.concatenate([c[4] for c in cols]))
        else:
            offs = [np.zeros(1, np.int32)]
            for o, _, _ in cols:
                offs.append(_shift(o[1:], int(offs[-1][-1])))
            valid = None if cols[0][2] is None else np.concatenate([c[2] for c in cols])
            out[name] = (np.concatenate(offs), np.concatenate([c[1] for c in cols]), valid)
    return MessageColumns(out, n)


def empty(names: list[str]) -> MessageColumns:
    """No rows of ``names``."""
    z = np.zeros(1, np.int32)
    u = np.zeros(0, np.uint8)
    out = {}
    for name in names:
        kind = FIELD_KINDS[name]
        if kind in ("i4", "i8"):
            out[name] = np.zeros(0, dtype=kind)
        elif kind == "map":
            out[name] = (z, z, u, z, u)
        else:
            out[name] = (z, u, np.zeros(0, np.uint8) if name in _NULLABLE else None)
    return MessageColumns(out, 0)


def factorize(offsets: np.ndarray, data: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Codes of a text column: ``(code per row, distinct values)``, values decoded once each."""
    n = len(offsets) - 1
    lengths = np.diff(offsets).astype(np.int64)
    width = int(lengths.max()) if n else 0
    # one row per value: its length (4 bytes) then its bytes, zero padded; equal rows are equal values
    matrix = np.zeros((n, width + 4), dtype=np.uint8)
    matrix[:, :4] = lengths.astype(">i4").view(np.uint8).reshape(n, 4)
    row = np.repeat(np.arange(n), lengths)
    col = np.arange(int(lengths.sum())) - np.repeat(offsets[:-1].astype(np.int64) - offsets[0], lengths)
    matrix[row, col + 4] = data[int(offsets[0]):int(offsets[-1])]
    first, codes = distinct_rows(matrix)
    values = [data[offsets[i]:offsets[i + 1]].tobytes().decode() for i in first.tolist()]
    return codes, values


def distinct_rows(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows of a 2-D uint8 array: ``(row of each distinct value's first occurrence, code per row)``.

    The rows are compared as uint64 words with one ``lexsort`` (``np.unique(axis=0)``
    sorts a structured view and is an order of magnitude slower).
    """
    n, width = matrix.shape
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    words = np.zeros((n, -(-width // 8) * 8 or 8), dtype=np.uint8)
    words[:, :width] = matrix
    words = words.view(np.uint64)
    order = np.lexsort(words.T[::-1])  # stable: equal rows keep their input order
    ranked = words[order]
    new = np.ones(n, dtype=bool)
    new[1:] = (ranked[1:] != ranked[:-1]).any(axis=1)
    codes = np.empty(n, dtype=np.int64)
    codes[order] = np.cumsum(new) - 1
    return order[new], codes


def property_values(properties: tuple, name: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Property ``name`` of the rows where bool mask ``rows`` is set, from a decoded ``properties`` column.

    Returns ``(row, code, values)``: the rows that hold the property, and per such row the
    index of its value in ``values`` (the distinct values, each decoded once), no Python
    object per row.
    """
    mo, ko, kd, vo, vd = properties
    want = np.frombuffer(name.encode(), np.uint8)
    entries = np.flatnonzero(np.diff(ko) == len(want))
    if len(entries):
        at = ko[entries].astype(np.int64)[:, None] + np.arange(len(want))
        entries = entries[(kd[at] == want).all(axis=1)]
    row = np.searchsorted(mo, entries, side="right") - 1  # the row whose entries hold each one
    keep = rows[row]
    entries, row = entries[keep], row[keep]
    if not len(entries):
        return row, np.zeros(0, dtype=np.int64), []
    starts = vo[entries].astype(np.int64)
    offsets, data = gather_spans(vd, starts, vo[entries + 1].astype(np.int64) - starts)
    codes, values = factorize(offsets, data)
    return row, codes, values

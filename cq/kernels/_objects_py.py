"""Pure-Python twin of ``_objects.pyx``: strs, property dicts and Messages from decoded columns.
"""
from __future__ import annotations

from .. import format as fmt


def _rows(rows, n):
    out = list(range(n)) if rows is None else [int(r) for r in rows]
    for r in out:
        if r < 0 or r >= n:
            raise IndexError(f"row {r} outside the {n} rows of the column")
    return out


def texts_list(offsets, data, binary=False, rows=None):
    """Rows of a text (or, with ``binary``, bytes) column as str (bytes): rows ``rows`` (default all), in order."""
    o = [int(x) for x in offsets]
    if o[-1] > len(data) or o[0] < 0:
        raise ValueError(f"offsets run to {o[-1]}, past the {len(data)} bytes of data")
    raw = bytes(data)
    out = [raw[o[r]:o[r + 1]] for r in _rows(rows, len(o) - 1)]
    return out if binary else [r.decode("utf-8") for r in out]


def property_dicts(map_offsets, key_offsets, key_data, value_offsets, value_data, rows=None):
    """Rows of a ``properties`` column as dicts (entries in order): rows ``rows`` (default all), in order."""
    mo = [int(x) for x in map_offsets]
    if mo[-1] > len(key_offsets) - 1 or mo[-1] > len(value_offsets) - 1:
        raise ValueError(f"map offsets run to entry {mo[-1]}, past the entries given")
    keys = texts_list(key_offsets[:mo[-1] + 1], key_data)
    values = texts_list(value_offsets[:mo[-1] + 1], value_data)
    return [dict(zip(keys[mo[r]:mo[r + 1]], values[mo[r]:mo[r + 1]])) for r in _rows(rows, len(mo) - 1)]


def message_objects(cls, columns, rows, file_index, paths, file_offsets):
    """``cls(*fields)`` for rows ``rows`` of a decoded column set (every record field), in order."""
    names = [name for name, _ in fmt.RECORD_FIELDS]
    names = names[:names.index("properties") + 1]
    n = len(columns["properties"][0]) - 1
    rows = [int(r) for r in rows]
    if len(file_index) != len(rows) or len(file_offsets) != len(rows):
        raise ValueError(f"{len(rows)} rows need {len(rows)} file indices and offsets")
    for r in rows:
        if r < 0 or r >= n:
            raise IndexError(f"row {r} outside the {n} rows of the columns")
    values = []
    for name, kind in fmt.RECORD_FIELDS:
        if name not in names:
            continue
        col = columns[name]
        if kind in ("i4", "i8"):
            values.append([int(col[r]) for r in rows])
        elif kind == "map":
            values.append(property_dicts(*col, rows))
        else:
            values.append(texts_list(col[0], col[1], kind == "bin", rows))
    for f in file_index:
        if f < 0 or f >= len(paths):
            raise IndexError(f"file index {f} outside the {len(paths)} paths")
    values.append([paths[int(f)] for f in file_index])
    values.append([int(o) for o in file_offsets])
    return list(map(cls, *values))


class Delivered:
    """An iterator handing out messages and counting each in ``stats.delivered`` as it goes."""

    def __init__(self, items, stats):
        self._items = iter(items)
        self._stats = stats

    @staticmethod
    def built(message_cls, columns, rows, file_index, paths, file_offsets, stats):
        return Delivered(message_objects(message_cls, columns, rows, file_index, paths, file_offsets), stats)

    def __iter__(self):
        return self

    def __next__(self):
        msg = next(self._items)
        self._stats.delivered += 1
        return msg


#: The most bytes a body column may hold: int32 offsets.
_INT32_MAX = 0x7FFFFFFF

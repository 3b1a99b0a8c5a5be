"""Arrow arrays built straight from numpy buffers, without pandas: the one home of these builders.

``pa.array``, ``pa.scalar`` and ``Array.to_numpy`` check for pandas objects first, which imports
pandas, some 0.4 s, on a process's first call: a selector over one Arrow column, a store read or a
Spark task would pay it for nothing. The functions here build (and, for booleans, read) the same
arrays from their buffers instead, without copying where the buffers allow.

Why a top-level module: ``selector``, ``cq`` and ``pyspark_udfs`` all build such arrays, and
``selector`` imports no other package of the project (docs/contributing.md#layers); like
``rmqfilter_engine`` this module imports nothing of the project. pyarrow is optional (the
``spark`` extra; only Arrow input and output need it), so it is imported on first use.
"""
from __future__ import annotations

import numpy as np

__all__ = ["binary_array", "bool_array", "bool_values", "fixed_array", "string_scalar"]


def _validity(valid: np.ndarray | None, n: int):
    """``(validity buffer or None, null count)`` of a numpy bool mask (True: a value; None: no NULLs)."""
    import pyarrow as pa  # lazy: pyarrow is optional (the spark extra); only Arrow output needs it

    nulls = 0 if valid is None else n - int(np.count_nonzero(valid))
    if not nulls:
        return None, 0
    return pa.py_buffer(np.packbits(valid.view(np.bool_), bitorder="little")), nulls


def fixed_array(values: np.ndarray):
    """A native-endian numpy int (or float) column as an Arrow array over the same buffer (copied
    only when it is not C-contiguous and aligned, as Arrow's buffers must be)."""
    import pyarrow as pa  # lazy: as above

    values = np.require(values, values.dtype, ["C", "A"])
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)])


def binary_array(arrow_type, n: int, offsets: np.ndarray, data: np.ndarray, valid: np.ndarray | None = None):
    """``n`` values of a string or binary ``arrow_type`` (``large_*`` with int64 ``offsets``) over
    ``offsets`` (n + 1 of them) and ``data``; NULL where the bool mask ``valid`` is False."""
    import pyarrow as pa  # lazy: as above

    validity, nulls = _validity(valid, n)
    return pa.Array.from_buffers(arrow_type, n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)],
                                 null_count=nulls)


def bool_array(values: np.ndarray, valid: np.ndarray | None = None):
    """``pa.array(values, mask=~valid)`` for a numpy bool array, built from packed bits."""
    import pyarrow as pa  # lazy: as above

    validity, nulls = _validity(valid, len(values))
    return pa.Array.from_buffers(pa.bool_(), len(values),
                                 [validity, pa.py_buffer(np.packbits(values, bitorder="little"))], null_count=nulls)


def string_scalar(text: str, arrow_type):
    """``pa.scalar(text, arrow_type)`` for a string or large_string type, built from buffers."""
    import pyarrow as pa  # lazy: as above

    data = text.encode("utf-8")
    offsets = np.array([0, len(data)], dtype=np.int64 if pa.types.is_large_string(arrow_type) else np.int32)
    return pa.Array.from_buffers(arrow_type, 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)])[0]


def bool_values(arr) -> np.ndarray:
    """A pyarrow bool array as numpy bools, NULL as False, unpacked from its bits."""
    if arr.null_count:
        import pyarrow.compute as pc  # lazy: as above

        arr = pc.and_kleene(arr, pc.is_valid(arr))  # NULL AND false is false
    bits = np.frombuffer(arr.buffers()[1], dtype=np.uint8)
    return np.unpackbits(bits, count=arr.offset + len(arr), bitorder="little")[arr.offset:].view(np.bool_)

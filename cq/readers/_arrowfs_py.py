"""Pure-Python twin of ``_arrowfs.pyx``: ranged reads of a ``pyarrow.fs`` filesystem's objects.

It opens each object by path (``open_input_file``), so Arrow's S3 file asks the server for the
object's size first: a HEAD, then the GET (docs/object-storage.md#requests). The compiled module
opens by the listed size and makes the GET alone.
"""
from __future__ import annotations

#: Requests a :func:`read_range_into` makes (an S3 server's count): the HEAD of the open, and the GET.
REQUESTS_PER_READ = 2


def read_range_into(filesystem, path: str, size: int, start: int, out) -> int:
    """Read bytes ``[start, start + len(out))`` of the object at ``path`` of ``filesystem`` into ``out``
    (``size``, its listed size, is not used: the open asks the server); the number of bytes read, fewer
    than ``len(out)`` only where the object ends first. A failed request raises pyarrow's ``OSError``."""
    out = memoryview(out).cast("B")
    want, got = len(out), 0
    if not want:
        return 0
    with filesystem.open_input_file(path) as f:
        f.seek(start)
        while got < want:  # a read may return less than asked: go on to the end
            n = f.readinto(out[got:])
            if not n:
                break
            got += n
    return got

"""Pure-Python twin of ``cq/_tags.pyx``: the broker's tag hash code.

``tags_code(s)`` is Java ``String.hashCode`` over the UTF-16 code units of
``s`` (a character outside the BMP contributes its two surrogates; a lone
surrogate contributes itself), as a signed int32; None and "" give 0, which
is ``tagsString2tagsCode``. The hash itself is :func:`cq.format.java_string_hash`,
the one Python definition of ``String.hashCode`` (the compiled engine ``_tags.pyx``
computes the same fold in C).
"""
from __future__ import annotations

import numpy as np

from ..format import java_string_hash


def tags_code(tag):
    """Tag hash code of one TAGS string (None or "" -> 0)."""
    if tag is None:
        return 0
    if not isinstance(tag, str):
        raise TypeError(f"tags_code() expects str or None, got {type(tag).__name__}")
    return java_string_hash(tag)


def tags_code_many_str(tags):
    """Tag hash codes of a sequence of str/None -> int32 ndarray."""
    out = np.empty(len(tags), dtype=np.int32)
    for i, tag in enumerate(tags):
        out[i] = tags_code(tag)
    return out


def tags_code_many_utf8(offsets, data, valid):
    """Tag hash codes of an Arrow-style string column.

    ``offsets`` is int64 (N + 1), ``data`` the UTF-8 bytes (uint8), ``valid``
    uint8 (N), 0 for null. Decoding is strict UTF-8 (Arrow validates it).
    """
    n = len(offsets) - 1
    out = np.zeros(n, dtype=np.int32)
    raw = bytes(data)
    for i in range(n):
        if valid[i]:
            out[i] = tags_code(raw[offsets[i]:offsets[i + 1]].decode("utf-8", "surrogatepass"))
    return out

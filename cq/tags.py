"""Tags: the broker's tag hash code and tag-subscription parsing.

The rules are in docs/filtering.md#tags-code and docs/filtering.md#tag-subscription.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from rmqfilter_engine import load

from .errors import TagSubscriptionError

_tags, ENGINE = load("cq.kernels", "_tags")

#: ``SubscriptionData.SUB_ALL``.
SUB_ALL = "*"
#: Expression type of tag subscriptions.
EXPRESSION_TYPE_TAG = "TAG"
#: Expression type of SQL92 subscriptions (case-sensitive).
EXPRESSION_TYPE_SQL92 = "SQL92"


def bloom_key(group: str, topic: str) -> str:
    """The key the broker hashes into a SQL92 group's Bloom bits: ``"{group}#{topic}"``
    (``ConsumerFilterData``, docs/filtering.md#expression-filter)."""
    return f"{group}#{topic}"


def tags_code(tag: str | None) -> int:
    """The tags code the broker stores for a TAGS value (``tagsString2tagsCode``).

    Parameters
    ----------
    tag : str or None
        The TAGS property as stored.

    Returns
    -------
    int
        Java ``String.hashCode`` of ``tag`` over its UTF-16 code units, a
        signed 32-bit int; 0 for None or "".

    Examples
    --------
    >>> tags_code("TagA")
    2598919
    >>> tags_code("polygenelubricants")
    -2147483648
    """
    return _tags.tags_code(tag)


def _arrow_string_buffers(arr):
    import pyarrow as pa  # lazy: pyarrow is optional (the spark extra); only Arrow input needs it

    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        pass
    elif pa.types.is_string_view(arr.type) if hasattr(pa.types, "is_string_view") else False:
        arr = arr.cast(pa.large_string())
    else:
        raise TypeError(f"tags_code_many() expects an Arrow string array, got type {arr.type}")
    n = len(arr)
    validity, offsets_buf, data_buf = arr.buffers()
    off_dtype = np.int64 if pa.types.is_large_string(arr.type) else np.int32
    offsets = np.frombuffer(offsets_buf, dtype=off_dtype, count=arr.offset + n + 1)[arr.offset:].astype(np.int64)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    if validity is None or arr.null_count == 0:
        valid = np.ones(n, dtype=np.uint8)
    else:
        valid = arr.is_valid().to_numpy(zero_copy_only=False).astype(np.uint8)
    return offsets, data, valid


def tags_code_many(tags) -> np.ndarray:
    """Tag hash codes of many tags at once.

    Parameters
    ----------
    tags : iterable of str or None, or a pyarrow string / large_string array
        One TAGS value per message; None (or an Arrow null) gives 0.

    Returns
    -------
    numpy.ndarray
        int32 array of the same length, element i = ``tags_code(tags[i])``.
    """
    mod = type(tags).__module__ or ""
    if mod.startswith("pyarrow"):
        return tags_code_utf8(*_arrow_string_buffers(tags))
    if isinstance(tags, np.ndarray):
        tags = tags.tolist()
    elif not isinstance(tags, (list, tuple)):
        if isinstance(tags, (str, bytes)) or not isinstance(tags, Iterable):
            raise TypeError(f"tags_code_many() expects a sequence of str/None, got {type(tags).__name__}")
        tags = list(tags)  # pandas Series, generators, ...
    return _tags.tags_code_many_str(tags)


def tags_code_utf8(offsets: np.ndarray, data: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
    """Tag hash codes of a string column in Arrow layout, without a Python object per row.

    Parameters
    ----------
    offsets : numpy.ndarray of int
        N + 1 offsets into ``data``.
    data : numpy.ndarray of uint8
        The UTF-8 bytes (a decoded ``tags`` column of :class:`cq.readers.columns.MessageColumns`).
    valid : numpy.ndarray of uint8 or bool, optional
        N flags, 0 where the value is null (code 0); default every row valid.

    Returns
    -------
    numpy.ndarray
        int32 array, element i = ``tags_code`` of row i.

    Examples
    --------
    >>> import numpy as np
    >>> tags_code_utf8(np.array([0, 4, 4]), np.frombuffer(b"TagA", np.uint8), np.array([1, 0], np.uint8)).tolist()
    [2598919, 0]
    """
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    n = len(offsets) - 1
    valid = np.ones(n, np.uint8) if valid is None else np.ascontiguousarray(valid, dtype=np.uint8)
    return _tags.tags_code_many_utf8(offsets, np.ascontiguousarray(data, dtype=np.uint8), valid)


@dataclass(frozen=True)
class SubscriptionData:
    """A subscription as ``FilterAPI.buildSubscriptionData`` builds it.

    Attributes
    ----------
    topic : str or None
    sub_string : str
        The expression, verbatim (``"*"`` for match-all).
    tags_set : frozenset of str
        Trimmed tags (empty for ``*`` and for SQL92).
    code_set : frozenset of int
        ``tags_code`` of each tag in ``tags_set``.
    expression_type : str
        ``"TAG"`` or ``"SQL92"``.
    tags_list : tuple of str
        The tags in the order they were written (duplicates removed).
    """

    topic: str | None
    sub_string: str
    tags_set: frozenset
    code_set: frozenset
    expression_type: str = EXPRESSION_TYPE_TAG
    tags_list: tuple = ()

    @property
    def is_sub_all(self) -> bool:
        """True iff sub_string is exactly ``"*"``."""
        return self.sub_string == SUB_ALL


def _java_trim(s: str) -> str:
    start, end = 0, len(s)
    while start < end and ord(s[start]) <= 0x20:
        start += 1
    while end > start and ord(s[end - 1]) <= 0x20:
        end -= 1
    return s[start:end]


def _java_split_literal(s: str, sep: str) -> list[str]:
    pieces = s.split(sep)
    while pieces and pieces[-1] == "":  # String.split(regex, 0) drops trailing empties
        pieces.pop()
    return pieces


def is_tag_type(expression_type: str | None) -> bool:
    """``ExpressionType.isTagType``: None, "" or "TAG" (case-sensitive)."""
    return expression_type is None or expression_type in ("", EXPRESSION_TYPE_TAG)


def parse_tag_subscription(sub: str | None, topic: str | None = None) -> SubscriptionData:
    """Parse a tag subscription exactly as the broker's ``FilterAPI`` does (docs/filtering.md#tag-subscription).

    Parameters
    ----------
    sub : str or None
        Subscription text such as ``"TagA || TagB"``; None, "" and "*" mean all.
    topic : str, optional
        Recorded on the result.

    Returns
    -------
    SubscriptionData

    Raises
    ------
    TagSubscriptionError
        "subString split error" when splitting on ``||`` leaves nothing (``"||"``).

    Examples
    --------
    >>> s = parse_tag_subscription("TagA || TagB")
    >>> sorted(s.tags_set), sorted(s.code_set)
    (['TagA', 'TagB'], [2598919, 2598920])
    """
    if sub is not None and not isinstance(sub, str):
        raise TypeError(f"subscription must be str or None, got {type(sub).__name__}")
    if sub is None or sub == "" or sub == SUB_ALL:
        return SubscriptionData(topic, SUB_ALL, frozenset(), frozenset())
    pieces = _java_split_literal(sub, "||")
    if not pieces:
        raise TagSubscriptionError(f"subString split error: tag subscription {sub!r} has no tags")
    tags: dict[str, None] = {}
    for piece in pieces:
        tag = _java_trim(piece)
        if tag:
            tags[tag] = None
    return SubscriptionData(
        topic,
        sub,
        frozenset(tags),
        frozenset(tags_code(t) for t in tags),
        EXPRESSION_TYPE_TAG,
        tuple(tags),
    )


def build_subscription(topic: str | None, sub: str | None, expression_type: str | None) -> SubscriptionData:
    """``FilterAPI.build``: tag types are parsed; other types keep the text with empty tag sets.

    Raises ValueError ("Expression can't be null! <type>") for an empty non-tag expression.
    """
    if expression_type is None or expression_type == EXPRESSION_TYPE_TAG:
        return parse_tag_subscription(sub, topic)
    if not sub:
        raise ValueError(f"Expression can't be null! {expression_type}")
    return SubscriptionData(topic, sub, frozenset(), frozenset(), expression_type)

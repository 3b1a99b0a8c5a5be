"""Exceptions of the ``cq`` package."""
from __future__ import annotations

import os


class StoreFormatError(ValueError):
    """A store file is not what the RocketMQ format says.

    Attributes
    ----------
    path : str or None
        The file that holds the bad bytes.
    offset : int or None
        Byte offset inside that file where the problem was found.
    """

    def __init__(self, message: str, path: str | os.PathLike | None = None, offset: int | None = None):
        self.path = os.fspath(path) if path is not None else None
        self.offset = offset
        where = ""
        if self.path is not None:
            where = f"{self.path}" + (f" at byte offset {offset}" if offset is not None else "") + ": "
        super().__init__(where + message)
        self.reason = message


class StoreFileDeleted(StoreFormatError):
    """A store file listed when the read began was deleted before it was mapped.

    The broker expires CommitLog and ConsumeQueue files from the front of their
    queues; a reader that meets one treats what it held as deleted (see docs/live.md).
    """


class UnitsLostWarning(UserWarning):
    """A stream fell behind the broker's expiry: units it had not read yet were deleted (docs/live.md)."""


class ReplicaWarning(UserWarning):
    """Several stores of one broker name were given: which replica a read takes, and why
    (docs/reading.md#replicas)."""


class CompactionWarning(UserWarning):
    """A compaction topic's queue was read while a compaction round or a slave's copy of its master's
    compaction log was writing beside it: the answer is what the broker served then
    (docs/reading.md#compaction-topics)."""


class TagSubscriptionError(ValueError):
    """``FilterAPI.buildSubscriptionData`` refused a tag subscription ("subString split error")."""


class UnknownGroupError(ValueError):
    """A consumer group has no SQL92 registration for a topic in ``config/consumerFilter.json``.

    Attributes
    ----------
    group, topic : str
        What was asked for.
    registered : list of str
        The groups registered for ``topic``.
    path : str
        The consumerFilter.json looked in.
    """

    def __init__(self, group: str, topic: str, registered: list[str], path: str | os.PathLike) -> None:
        self.group = group
        self.topic = topic
        self.registered = list(registered)
        self.path = os.fspath(path)
        listed = ", ".join(self.registered) if self.registered else "none"
        super().__init__(
            f"group {group!r} has no SQL92 filter registered for topic {topic!r} in {self.path} "
            f"(registered groups: {listed}); give its subscription (sql or tags) instead"
        )


class UnsupportedLayoutError(StoreFormatError):
    """A store holds a layout rmqfilter cannot read (docs/reading.md#store-modes).

    Raised instead of an empty answer: a store whose consume queues live in RocksDB would
    otherwise list no topics, and a store whose CommitLog is not found would count every
    unit as missing.

    Attributes
    ----------
    layout : str
        The layout found (``"RocksDB consume queue"``, ``"RocksDB metadata"``, ``"BatchCQ"``, ...).
    path : str
        Where it was found.
    advice : str
        What to do about it.
    """

    def __init__(self, layout: str, path: str | os.PathLike, advice: str) -> None:
        self.layout = layout
        self.advice = advice
        super().__init__(f"{layout}: not supported by this rmqfilter; {advice}", path)


class ObjectStoreError(StoreFormatError):
    """A store in object storage could not be read (docs/object-storage.md#errors).

    Raised for a missing bucket or prefix, a denied request, an object shorter than its listing:
    the message names the URI and, where one was being read, the byte range; never a credential.
    A :class:`StoreFormatError` (``path`` is the URI, ``offset`` the range's start), so every
    command reports it as it reports a bad store file.

    Attributes
    ----------
    uri : str
        The object (or store root) that was being read.
    byte_range : tuple of int or None
        ``(start, end)`` of the bytes asked for, end exclusive; None for a listing.
    """

    def __init__(self, message: str, uri: str, byte_range: tuple[int, int] | None = None) -> None:
        self.uri = self.path = uri
        self.byte_range = byte_range
        self.offset = byte_range[0] if byte_range is not None else None
        where = uri + (f" bytes [{byte_range[0]}, {byte_range[1]})" if byte_range is not None else "")
        ValueError.__init__(self, f"{where}: {message}")
        self.reason = message

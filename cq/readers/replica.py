"""The files that say what a replica of a broker holds (docs/formats.md#replicas).

``checkpoint`` (every store: its confirm offset), ``epochFileCheckpoint`` and ``brokerIdentity``
(controller mode). Each reader takes a store root, reads its file whole and returns plain values;
a file that is absent is ``None`` (a classic-HA store has no epoch file), a file that is there but
not what the format says is a :class:`cq.StoreFormatError` naming it.
"""
from __future__ import annotations

import os
import zlib
from dataclasses import asdict, dataclass

import numpy as np

from rmqfilter_java import parse_int, parse_long, read_lines, split_literal

from .. import format as fmt
from ..errors import StoreFormatError
from .config import BAK_SUFFIX
from .entry import ReaderEntry

__all__ = ["BrokerIdentity", "EpochEntry", "ReplicaFiles", "StoreCheckpoint", "read_broker_identity",
           "read_epoch_file", "read_store_checkpoint"]


@dataclass(frozen=True)
class StoreCheckpoint:
    """``{root}/checkpoint``: the broker's ``StoreCheckpoint`` (docs/formats.md#replicas)."""

    physic_msg_timestamp: int
    logics_msg_timestamp: int
    index_msg_timestamp: int
    master_flushed_offset: int
    confirm_phy_offset: int


@dataclass(frozen=True)
class EpochEntry:
    """One line of ``epochFileCheckpoint``: from ``start_offset`` on, the replica was written in ``epoch``."""

    epoch: int
    start_offset: int


@dataclass(frozen=True)
class BrokerIdentity:
    """``{root}/brokerIdentity``: the id the controller gave this replica."""

    cluster_name: str
    broker_name: str
    broker_id: int


def read_store_checkpoint(root: str | os.PathLike) -> StoreCheckpoint | None:
    """``{root}/checkpoint``, or None when the store has none; shorter than its fields: an error."""
    path = os.path.join(os.fspath(root), fmt.STORE_CHECKPOINT_FILE)
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as f:
        data = f.read(fmt.STORE_CHECKPOINT_DTYPE.itemsize)
    if len(data) < fmt.STORE_CHECKPOINT_DTYPE.itemsize:
        field = fmt.STORE_CHECKPOINT_DTYPE.names[len(data) // 8]
        raise StoreFormatError(f"checkpoint is {len(data)} bytes, shorter than its "
                               f"{fmt.STORE_CHECKPOINT_DTYPE.itemsize} bytes of fields (cut short in {field})",
                               path, len(data) // 8 * 8)
    row = np.frombuffer(data, dtype=fmt.STORE_CHECKPOINT_DTYPE, count=1)[0]
    return StoreCheckpoint(*(int(v) for v in row.tolist()))


def _parse_epoch_text(path: str, data: bytes) -> list[EpochEntry]:
    """The entries of one epoch file's bytes, checked as ``CheckpointFile.read`` checks them: lines as
    ``BufferedReader.readLine`` splits them, numbers as ``Integer.parseInt`` / ``Long.parseLong`` read them
    (no blanks around), an entry's fields as ``String.split("-")`` parts them (docs/formats.md#replicas)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StoreFormatError(f"not UTF-8 text ({exc.reason})", path, exc.start) from exc
    lines = read_lines(text)
    if len(lines) < 2:
        raise StoreFormatError("no entry count and CRC lines", path, 0)
    # byte offset of each line's start: its text and the break after it (\r\n, \r or \n)
    starts, at = [], 0
    for line in lines:
        starts.append(at)
        at += len(line.encode("utf-8"))
        at += 2 if data[at:at + 2] == b"\r\n" else 1
    head = []
    for line, offset in zip(lines[:2], starts):
        try:
            head.append(parse_int(line))
        except ValueError:
            raise StoreFormatError(f"expected a decimal int32, found {line[:40]!r}", path, offset) from None
    count, crc = head
    entries = []
    for line, offset in zip(lines[2:], starts[2:]):
        parts = split_literal(line, fmt.EPOCH_ENTRY_SEPARATOR)
        if len(parts) == 2:          # the broker skips a line that is not two fields
            try:
                entries.append(EpochEntry(parse_int(parts[0]), int(parse_long(parts[1]))))
            except ValueError:
                raise StoreFormatError(f"epoch entry {line[:40]!r} is not epoch-startOffset", path, offset) from None
    if len(entries) != count:
        raise StoreFormatError(f"the file says {count} entries, found {len(entries)}", path, 0)
    # the broker's CRC covers each line with the line separator it wrote (System.lineSeparator)
    sep = "\r\n" if "\r\n" in text else "\n"
    got = zlib.crc32("".join(b + sep for b in lines[2:]).encode("utf-8")) & fmt.EPOCH_CRC_MASK
    if crc != 0 and got != crc:
        raise StoreFormatError(f"entries CRC32 {got} does not match the file's {crc}", path, 0)
    return entries


def read_epoch_file(root: str | os.PathLike) -> tuple[list[EpochEntry], str] | None:
    """``(entries, path read)`` of ``{root}/epochFileCheckpoint``, or None when the store has none.

    As the broker does, the ``.bak`` copy is read when the file is missing or empty or fails its
    checks; when neither reads, the error names the file (docs/formats.md#replicas).
    """
    path = os.path.join(os.fspath(root), fmt.EPOCH_FILE)
    bak = path + BAK_SUFFIX
    if not os.path.isfile(path) and not os.path.isfile(bak):
        return None
    first_error = None
    for candidate in (path, bak):
        if not os.path.isfile(candidate):
            continue
        with open(candidate, "rb") as f:
            data = f.read()
        try:
            entries = _parse_epoch_text(candidate, data) if data else []
        except StoreFormatError as exc:
            first_error = first_error or exc
            continue
        if entries:
            return entries, candidate
    if first_error is not None:
        raise first_error
    return [], path


def read_broker_identity(root: str | os.PathLike) -> BrokerIdentity | None:
    """``{root}/brokerIdentity``, or None when the store has none (classic HA, not yet registered)."""
    path = os.path.join(os.fspath(root), fmt.BROKER_IDENTITY_FILE)
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        raise StoreFormatError(f"not UTF-8 text ({exc.reason})", path, exc.start) from exc
    parts = text.split(fmt.BROKER_IDENTITY_SEPARATOR)
    try:
        if len(parts) != 3:
            raise ValueError
        return BrokerIdentity(parts[0], parts[1], int(parts[2]))
    except ValueError:
        raise StoreFormatError(f"expected clusterName#brokerName#brokerId, found {text[:80]!r}", path, 0) from None


@dataclass(frozen=True)
class ReplicaFiles:
    """The files of one store root that say what the replica holds (docs/formats.md#replicas), read whole
    by :meth:`read`: ``checkpoint``, ``epochFileCheckpoint`` (or its ``.bak``) and ``brokerIdentity``.
    Nothing is held open; it pickles as its root."""

    root: str

    def files(self) -> list[str]:
        """The files of these kinds the root holds."""
        names = (fmt.STORE_CHECKPOINT_FILE, fmt.EPOCH_FILE, fmt.EPOCH_FILE + BAK_SUFFIX, fmt.BROKER_IDENTITY_FILE)
        return [p for p in (os.path.join(self.root, n) for n in names) if os.path.isfile(p)]

    def read(self) -> tuple[StoreCheckpoint | None, tuple[list[EpochEntry], str] | None, BrokerIdentity | None]:
        """``(checkpoint, epochs, identity)``, each None where the file is absent."""
        return read_store_checkpoint(self.root), read_epoch_file(self.root), read_broker_identity(self.root)

    def close(self) -> None:
        """Nothing to release (each file is read whole and closed)."""


def _read_replica_files(files: ReplicaFiles) -> list:
    checkpoint, epochs, identity = files.read()
    return [asdict(checkpoint) if checkpoint else None,
            None if epochs is None else ([asdict(e) for e in epochs[0]], os.path.basename(epochs[1])),
            asdict(identity) if identity else None]


# This reader's registry entry (docs/contributing.md#add-a-reader): the replica store of tests/data is a
# controller-mode replica RocketMQ 5.3.3 wrote (tests/data/REPLICA_STORE.md).
READERS = (
    ReaderEntry("ReplicaFiles", ReplicaFiles, lambda root: ReplicaFiles(root).files(), _read_replica_files,
                store="replica_store"),
)

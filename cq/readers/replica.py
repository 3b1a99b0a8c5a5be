"""The files that say what a replica of a broker holds (docs/formats.md#replicas).

``checkpoint`` (every store: its confirm offset), ``epochFileCheckpoint`` and ``brokerIdentity``
(controller mode). Each reader takes a store root, reads its file whole and returns plain values;
a file that is absent is ``None`` (a classic-HA store has no epoch file), a file that is there but
not what the format says is a :class:`cq.StoreFormatError` naming it.
"""
from __future__ import annotations

import os
import zlib
from dataclasses import dataclass

import numpy as np

from .. import format as fmt
from ..errors import StoreFormatError
from .config import BAK_SUFFIX

__all__ = ["BrokerIdentity", "EpochEntry", "StoreCheckpoint", "read_broker_identity", "read_epoch_file",
           "read_store_checkpoint"]


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
    """The entries of one epoch file's bytes, checked as ``CheckpointFile.read`` checks them."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StoreFormatError(f"not UTF-8 text ({exc.reason})", path, exc.start) from exc
    lines = text.splitlines(keepends=True)
    if len(lines) < 2:
        raise StoreFormatError("no entry count and CRC lines", path, 0)
    offset = 0
    head = []
    for line in lines[:2]:
        try:
            head.append(int(line.strip()))
        except ValueError:
            raise StoreFormatError(f"expected a decimal number, found {line.strip()!r}", path, offset) from None
        offset += len(line.encode("utf-8"))
    count, crc = head
    entries, body = [], []
    for line in lines[2:]:
        stripped = line.rstrip("\r\n")
        body.append(stripped)
        parts = stripped.split(fmt.EPOCH_ENTRY_SEPARATOR)
        if len(parts) == 2:          # the broker skips a line that is not two fields
            try:
                entries.append(EpochEntry(int(parts[0]), int(parts[1])))
            except ValueError:
                raise StoreFormatError(f"epoch entry {stripped!r} is not epoch-startOffset", path, offset) from None
        offset += len(line.encode("utf-8"))
    if len(entries) != count:
        raise StoreFormatError(f"the file says {count} entries, found {len(entries)}", path, 0)
    # the broker's CRC covers each line with the line separator it wrote (System.lineSeparator)
    sep = "\r\n" if lines[2:] and lines[2].endswith("\r\n") else "\n"
    got = zlib.crc32("".join(b + sep for b in body).encode("utf-8")) & fmt.EPOCH_CRC_MASK
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

"""A DLedger store from a classic one: :func:`write_dledger_store` (docs/formats.md#dledger-commitlog).

What a broker with ``enableDLegerCommitLog=true`` would have written for the same messages:
each CommitLog record becomes the body of one DLedger entry in ``dledger-{selfId}/data/``, its
PHYSICALOFFSET field rewritten to the body's offset (entry position + 48, as the broker's
append hook does), and every ConsumeQueue unit points at the new offset. With
``classic_files=k`` the first ``k`` CommitLog files stay in ``commitlog/`` and the DLedger
entries start at the next file boundary: a store migrated to DLedger
(docs/formats.md#dledger-migrated).
"""
from __future__ import annotations

import os
import shutil
import struct

import numpy as np

from .. import format as fmt
from ..readers.commitlog import CommitLog

__all__ = ["write_dledger_store"]

#: PHYSICALOFFSET: the second int64 at RECORD_OFFSETS_POSITION (QUEUEOFFSET comes first).
_PHYS_POSITION = fmt.RECORD_OFFSETS_POSITION + struct.calcsize(">q")


def _entry(record: bytes, index: int, term: int, pos: int) -> bytes:
    body = bytearray(record)
    struct.pack_into(">q", body, _PHYS_POSITION, pos + fmt.DLEDGER_BODY_OFFSET)
    # channel, chainCrc and bodyCrc are 0, as RocketMQ 5.3.3's DLedger CommitLog leaves them
    head = fmt.DLEDGER_ENTRY_HEADER_STRUCT.pack(
        fmt.DLEDGER_MAGIC_NORMAL, fmt.DLEDGER_BODY_OFFSET + len(body), index, term, pos, 0, 0, 0, len(body))
    return head + bytes(body)


def write_dledger_store(source: str | os.PathLike, dest: str | os.PathLike, *, self_id: str = "n0",
                        classic_files: int = 0, term: int = 0) -> dict[int, int]:
    """Write the classic store ``source`` again at ``dest`` with a DLedger CommitLog.

    Parameters
    ----------
    source : str or os.PathLike
        A store root with a classic ``commitlog/`` (every record valid).
    dest : str or os.PathLike
        A new directory (must not exist).
    self_id : str
        ``dLegerSelfId``: the log goes to ``dest/dledger-{self_id}/data/``.
    classic_files : int
        Keep the first ``classic_files`` CommitLog files as they are (a migrated store); the
        entries start at the next file boundary, ``dividedCommitlogOffset``.
    term : int
        The DLedger term written in every entry.

    Returns
    -------
    dict
        Old CommitLog offset -> new offset of every record moved into entries.
    """
    source, dest = os.fspath(source), os.fspath(dest)
    os.makedirs(dest)
    moved: dict[int, int] = {}
    with CommitLog(os.path.join(source, fmt.COMMIT_LOG_DIR)) as log:
        size = log.file_size
        divided = log.files[classic_files][0] if classic_files < len(log.files) else (
            log.files[-1][0] + size if log.files else 0)
        if classic_files:
            os.makedirs(os.path.join(dest, fmt.COMMIT_LOG_DIR))
            for start, path in log.files[:classic_files]:
                shutil.copyfile(path, os.path.join(dest, fmt.COMMIT_LOG_DIR, fmt.file_name(start)))
        data_dir = os.path.join(dest, fmt.DLEDGER_DIR_PREFIX + self_id, fmt.DLEDGER_DATA_DIR)
        os.makedirs(data_dir)
        files: list[bytearray] = []
        pos = divided  # the next entry's offset
        index = 0
        for msg in log.messages():
            if msg.commit_log_offset < divided:
                continue
            file = log.file_index(msg.commit_log_offset)
            at = msg.commit_log_offset - log.files[file][0]
            record = bytes(log.buffer(file)[at:at + msg.store_size])
            length = fmt.DLEDGER_BODY_OFFSET + len(record)
            if length + fmt.DLEDGER_MIN_BLANK_LEN > size:
                raise ValueError(f"record of {msg.store_size} B does not fit a {size} B DLedger file")
            at = (pos - divided) % size
            if at + length + fmt.DLEDGER_MIN_BLANK_LEN > size:  # MmapFileList.preAppend: a blank, next file
                files[-1][at:at + 8] = struct.pack(">ii", fmt.DLEDGER_BLANK_MAGIC_CODE, size - at)
                pos += size - at
                at = 0
            entry = _entry(record, index, term, pos)
            if at == 0:
                files.append(bytearray(size))
            files[-1][at:at + len(entry)] = entry
            moved[msg.commit_log_offset] = pos + fmt.DLEDGER_BODY_OFFSET
            pos += len(entry)
            index += 1
        for i, data in enumerate(files):
            with open(os.path.join(data_dir, fmt.file_name(divided + i * size)), "wb") as f:
                f.write(data)
    _copy_queues(source, dest, moved)
    for name in os.listdir(source):  # the rest of the root (config/, checkpoint, ...); index/ holds old offsets
        if name in (fmt.COMMIT_LOG_DIR, fmt.CONSUME_QUEUE_DIR, "index"):
            continue
        src = os.path.join(source, name)
        (shutil.copytree if os.path.isdir(src) else shutil.copyfile)(src, os.path.join(dest, name))
    return moved


def _copy_queues(source: str, dest: str, moved: dict[int, int]) -> None:
    """``consumequeue/`` of ``source`` at ``dest``, each unit's CommitLog offset moved by ``moved``."""
    old = np.array(sorted(moved), dtype=np.int64)
    new = np.array([moved[o] for o in old.tolist()], dtype=np.int64)
    top = os.path.join(source, fmt.CONSUME_QUEUE_DIR)
    for topic in sorted(os.listdir(top)):
        for queue in sorted(os.listdir(os.path.join(top, topic))):
            out_dir = os.path.join(dest, fmt.CONSUME_QUEUE_DIR, topic, queue)
            os.makedirs(out_dir)
            for start, path in fmt.list_queue_files(os.path.join(top, topic, queue)):
                with open(path, "rb") as f:
                    units = np.frombuffer(f.read(), dtype=fmt.CQ_UNIT_DTYPE).copy()
                offs = units["commit_log_offset"].astype(np.int64)
                valid = (offs >= 0) & (units["size"] > 0) & (units["size"] != 0x7FFFFFFF)
                at = np.searchsorted(old, offs)
                hit = valid & (at < len(old)) & (old[np.minimum(at, len(old) - 1)] == offs)
                units["commit_log_offset"][hit] = new[at[hit]]
                with open(os.path.join(out_dir, fmt.file_name(start)), "wb") as f:
                    f.write(units.tobytes())

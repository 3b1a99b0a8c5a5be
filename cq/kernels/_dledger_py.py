"""Pure-Python twin of ``_dledger.pyx``: the DLedger CommitLog walk.

Entry layout and recovery rules: docs/formats.md#dledger-entry, docs/formats.md#dledger-recovery.
"""
from __future__ import annotations

import struct

import numpy as np

from ._layout_py import LAYOUT
from ._record_py import _parse, body_crc_mismatch

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_BODY = LAYOUT["DLEDGER_BODY"]
_MAGICS = (LAYOUT["DLEDGER_MAGIC_NORMAL"], LAYOUT["DLEDGER_MAGIC_NOOP"], LAYOUT["DLEDGER_MAGIC_CONFIG_CHANGE"])


def _problem(buf, file_start, pos, limit, magic, size, last_index, last_term):
    """Why the entry at ``pos`` is not valid (DLedgerMmapFileStore's recovery checks), or None."""
    if magic not in _MAGICS:
        return f"unknown DLedger entry magic {magic}"
    if size < _BODY or pos + size > limit:
        return f"DLedger entry size {size} does not fit (header {_BODY} B, {limit - pos} B left in the file)"
    (body_len,) = _I32.unpack_from(buf, pos + LAYOUT["DLEDGER_BODY_LEN"])
    if body_len + _BODY != size:
        return f"DLedger entry size {size} != bodyLen {body_len} + {_BODY}"
    (entry_pos,) = _I64.unpack_from(buf, pos + LAYOUT["DLEDGER_POS"])
    if entry_pos != file_start + pos:
        return f"DLedger entry pos field {entry_pos} is not its offset {file_start + pos}"
    (index,) = _I64.unpack_from(buf, pos + LAYOUT["DLEDGER_INDEX"])
    if last_index >= 0 and index != last_index + 1:
        return f"DLedger entry index {index} does not follow {last_index}"
    (term,) = _I64.unpack_from(buf, pos + LAYOUT["DLEDGER_TERM"])
    if term < last_term:
        return f"DLedger entry term {term} is below the term {last_term} of the entry before it"
    if magic == LAYOUT["DLEDGER_MAGIC_NORMAL"] and body_len == 0:
        return "DLedger NORMAL entry without a body"
    return None


def dledger_scan(buf, file_start, pos, limit, check_crc, max_records, last_index, last_term=-1):
    """Walk the DLedger entries of one file from ``pos`` (readable end ``limit``).

    Returns ``(record_positions int64, position, status, reason, last_index, last_term)``: the file
    positions of the records inside the valid entries passed (entry position + 48; only NORMAL
    entries hold one), where the walk stopped, and why: 0 end of data (unwritten space, or fewer
    than 8 bytes before ``limit``), 1 a blank filling the rest of the file, 2 an invalid entry at
    ``position`` (``reason`` says what, else None), 3 ``max_records`` found (-1: no bound).
    ``last_index`` is the DLedger index of the entry before ``pos`` (-1: none known) on the way
    in, of the last entry passed on the way out; ``last_term`` likewise its term (-1: none known),
    which an entry's term may not fall below. ``check_crc``: a record whose body CRC does not
    match is invalid too.
    """
    if pos < 0 or limit < 0 or limit > len(buf):
        raise ValueError(f"pos {pos} and limit {limit} must lie in the buffer of {len(buf)} bytes")
    out: list[int] = []
    reason = None
    while True:
        if len(out) == max_records:
            status = 3
            break
        if limit - pos < LAYOUT["DLEDGER_MIN_BLANK"]:
            status = 0
            break
        (magic,) = _I32.unpack_from(buf, pos + LAYOUT["DLEDGER_MAGIC"])
        (size,) = _I32.unpack_from(buf, pos + LAYOUT["DLEDGER_SIZE"])
        if magic == LAYOUT["DLEDGER_BLANK"]:
            if size >= LAYOUT["DLEDGER_MIN_BLANK"] and pos + size == len(buf):
                status = 1
                break
            if size >= LAYOUT["DLEDGER_MIN_BLANK"] and pos + size <= limit:
                pos += size  # a blank inside a file: DLedger's recovery steps over it
                continue
            status, reason = 2, f"DLedger blank of size {size} does not end inside the file"
            break
        if size == 0 and magic == 0:
            status = 0
            break
        reason = _problem(buf, file_start, pos, limit, magic, size, last_index, last_term)
        if reason is None and magic == LAYOUT["DLEDGER_MAGIC_NORMAL"]:
            try:
                total = _parse(buf, pos + _BODY, pos + size)[0][0]
            except ValueError:
                total = -1
            if total != size - _BODY:
                reason = "the DLedger entry's body is not one CommitLog record"
            elif check_crc and body_crc_mismatch(buf, pos + _BODY, pos + size) >= 0:
                reason = "the record in the DLedger entry fails its body CRC"
            else:
                out.append(pos + _BODY)
        if reason is not None:
            status = 2
            break
        (last_index,) = _I64.unpack_from(buf, pos + LAYOUT["DLEDGER_INDEX"])
        (last_term,) = _I64.unpack_from(buf, pos + LAYOUT["DLEDGER_TERM"])
        pos += size
    return np.array(out, dtype=np.int64), pos, status, reason, last_index, last_term

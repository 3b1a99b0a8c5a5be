"""Pure-Python twin of ``_record.pyx``: the CommitLog record walk and one-record decode.

Buffers are uint8 ndarrays (one mapped file or a slice of one); positions are byte
offsets inside that buffer. The functions mirror the compiled engine name for name and
result for result; they are the readable statement of what the engine computes.
"""
from __future__ import annotations

import struct
import zlib

import numpy as np

from .. import format as fmt
from ._layout_py import LAYOUT

_HEAD = fmt.RECORD_HEAD_STRUCT  # TOTALSIZE, MAGICCODE
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")


def _properties_span(buf, pos, limit):
    """``(start, length)`` of the properties text of the record at ``pos``; raise ValueError if corrupt."""
    if limit - pos < _HEAD.size:
        raise ValueError("record header runs past the end of the file")
    total, magic = _HEAD.unpack_from(buf, pos)
    if magic not in (fmt.MESSAGE_MAGIC_CODE_V1, fmt.MESSAGE_MAGIC_CODE_V2):
        raise ValueError(f"bad magic code {magic & 0xFFFFFFFF:#010x}")
    if total < fmt.RECORD_V1_IPV4_OVERHEAD or total > limit - pos:
        raise ValueError(f"TOTALSIZE {total} does not fit the {limit - pos} bytes left in the file")
    (sys_flag,) = _I32.unpack_from(buf, pos + fmt.RECORD_SYS_FLAG_POSITION)
    p = (pos + fmt.RECORD_BORN_HOST_POSITION + fmt.host_width(sys_flag, store=False) + LAYOUT["STORE_TS_WIDTH"]
         + fmt.host_width(sys_flag, store=True) + LAYOUT["REC_TAIL_BODY_LEN"])  # at BODYLENGTH
    end = pos + total
    if p + _I32.size > end:
        raise ValueError("record too short for its hosts")
    (body_len,) = _I32.unpack_from(buf, p)
    p += _I32.size + max(body_len, 0)
    width = 2 if magic == fmt.MESSAGE_MAGIC_CODE_V2 else 1
    if p + width > end:
        raise ValueError(f"BODYLENGTH {body_len} runs past the record")
    topic_len = int.from_bytes(bytes(buf[p:p + width]), "big", signed=True)
    if topic_len < 0:
        raise ValueError(f"negative topic length {topic_len}")
    p += width + topic_len
    if p + _I16.size > end:
        raise ValueError(f"topic length {topic_len} runs past the record")
    (props_len,) = _I16.unpack_from(buf, p)
    p += _I16.size
    if p + max(props_len, 0) != end:
        raise ValueError(f"field lengths add up to {p + max(props_len, 0) - pos}, TOTALSIZE says {total}")
    return p, max(props_len, 0)


def gather_properties(buf, positions, limit, absent_as_none=False):
    """Properties dicts of the records at ``positions`` of one CommitLog file buffer.

    A record that stores no properties gives ``{}``, or None with ``absent_as_none``.
    Raises ValueError("<index>: <reason>") at the first corrupt record.
    """
    out = []
    for i, pos in enumerate(positions.tolist()):
        try:
            start, length = _properties_span(buf, pos, limit)
        except ValueError as exc:
            raise ValueError(f"{i}: {exc}") from None
        out.append(fmt.decode_properties_bytes(bytes(buf[start:start + length])) if length
                   else (None if absent_as_none else {}))
    return out


def commit_log_walk(buf, pos):
    """Walk CommitLog records from ``pos`` of one file: ``(position, status, records)``.

    status 0: unwritten space or fewer than 8 bytes left (end of data); 1: a
    blank end-of-file record at ``position``; 2: an invalid record at
    ``position``. ``records`` counts the valid records passed.
    """
    if pos < 0:
        raise ValueError(f"pos must be >= 0, got {pos}")
    n = len(buf)
    records = 0
    while True:
        if n - pos < _HEAD.size:
            return pos, 0, records
        total, magic = _HEAD.unpack_from(buf, pos)
        if magic == fmt.BLANK_MAGIC_CODE:
            return pos, 1, records
        if total == 0 and magic == 0:
            return pos, 0, records
        try:
            _properties_span(buf, pos, n)
        except ValueError:
            return pos, 2, records
        pos += total
        records += 1


# The fixed part of a record, TOTALSIZE .. BODYLENGTH, per host family:


def _host(v6: bool) -> str:
    return f"{LAYOUT['IPV6_WIDTH' if v6 else 'IPV4_WIDTH']}si"  # the address, then the int32 port


_FIXED = [
    struct.Struct(fmt.RECORD_PREFIX_STRUCT.format + _host(b6) + "q" + _host(s6) + fmt.RECORD_BODY_HEAD_STRUCT.format[1:])
    for s6 in (False, True)
    for b6 in (False, True)
]



def _parse(buf, pos, limit):
    """The record layout at ``pos``, validated: ``(head, body_start, body_len, topic_start,
    topic_len, props_start, props_len)``; ``head`` is the fixed part as ``_FIXED`` unpacks it.
    Raises ``ValueError(reason, offset)`` for a record that is not valid."""
    if pos < 0 or limit - pos < _HEAD.size:
        raise ValueError(f"record header needs 8 bytes, {limit - pos} left in the file", pos)
    total, magic = _HEAD.unpack_from(buf, pos)
    if magic == fmt.BLANK_MAGIC_CODE:
        raise ValueError("blank end-of-file record, not a message", pos)
    if magic not in (fmt.MESSAGE_MAGIC_CODE_V1, fmt.MESSAGE_MAGIC_CODE_V2):
        raise ValueError(f"bad magic code {magic & 0xFFFFFFFF:#010x} (TOTALSIZE {total})", pos)
    if total < fmt.RECORD_V1_IPV4_OVERHEAD:
        raise ValueError(f"TOTALSIZE {total} is smaller than the smallest record", pos)
    if total > limit - pos:
        raise ValueError(f"TOTALSIZE {total} runs past the end of the file ({limit - pos} bytes left)", pos)
    end = pos + total
    (sys_flag,) = _I32.unpack_from(buf, pos + fmt.RECORD_SYS_FLAG_POSITION)
    fixed = _FIXED[(sys_flag >> 4) & 3]
    if pos + fixed.size > end:
        raise ValueError(f"record of {total} bytes is too short for its hosts (sys_flag {sys_flag:#x})", pos)
    head = fixed.unpack_from(buf, pos)
    body_len = head[-1]
    p = pos + fixed.size
    blen = max(body_len, 0)
    width = 2 if magic == fmt.MESSAGE_MAGIC_CODE_V2 else 1
    if p + blen + width > end:
        raise ValueError(f"BODYLENGTH {body_len} runs past the record of {total} bytes", p - _I32.size)
    body_start = p
    p += blen
    topic_len = struct.unpack_from(">h" if width == 2 else ">b", buf, p)[0]
    if topic_len < 0:
        raise ValueError(f"negative topic length {topic_len}", p)
    p += width
    if p + topic_len + 2 > end:
        raise ValueError(f"topic length {topic_len} runs past the record", p - width)
    topic_start = p
    p += topic_len
    (props_len,) = _I16.unpack_from(buf, p)
    p += _I16.size
    plen = max(props_len, 0)
    if p + plen != end:
        raise ValueError(f"field lengths add up to {p + plen - pos} bytes but TOTALSIZE is {total}", pos)
    return head, body_start, blen, topic_start, topic_len, p, plen


def decode_record(buf, pos, limit):
    """Decode the CommitLog record at ``pos`` (readable end ``limit``).

    Layout and validation: docs/formats.md#commitlog-record, docs/formats.md#commitlog-validation.

    Returns ``(total, magic, body_crc, queue_id, flag, queue_offset, physical_offset,
    sys_flag, born_timestamp, born_ip, born_port, store_timestamp, store_ip,
    store_port, reconsume_times, prepared_transaction_offset, body, topic,
    properties)``; raises ``ValueError(reason, offset)`` for a record that is not valid.
    """
    if limit < 0 or limit > len(buf):
        raise ValueError(f"limit {limit} outside the buffer of {len(buf)} bytes", pos)
    head, bs, bl, ts, tl, ps, pl = _parse(buf, pos, limit)
    body = bytes(buf[bs:bs + bl])
    topic = bytes(buf[ts:ts + tl]).decode("utf-8", "replace")
    props = fmt.decode_properties_bytes(bytes(buf[ps:ps + pl])) if pl else {}
    return (*head[:7], _I32.unpack_from(buf, pos + fmt.RECORD_SYS_FLAG_POSITION)[0], *head[8:16], body, topic, props)




def _check_spans(buf_len, starts, lengths):
    if len(starts) != len(lengths):
        raise ValueError("starts and lengths differ in length")
    # lengths are compared with the room left after each start (a sum could overflow int64)
    if len(starts) and (np.min(starts) < 0 or np.min(lengths) < 0 or np.max(starts) > buf_len
                        or (np.asarray(lengths) > buf_len - np.asarray(starts)).any()):
        raise ValueError(f"a span lies outside the buffer of {buf_len} bytes")


def gather_spans(buf, starts, lengths):
    """Concatenate ``buf[starts[i]:starts[i] + lengths[i]]``: ``(offsets int64 (k + 1), data uint8)``.

    The Arrow (large) binary layout of the spans.
    """
    _check_spans(len(buf), starts, lengths)
    offsets = np.zeros(len(starts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    parts = [bytes(buf[s:s + n]) for s, n in zip(starts.tolist(), lengths.tolist())]
    return offsets, np.frombuffer(b"".join(parts), dtype=np.uint8).copy()




def body_crc_mismatch(buf, pos, end):
    """Position of the first record in ``buf[pos:end]`` whose BODYCRC does not match, or -1."""
    if pos < 0 or end > len(buf) or pos > end:
        raise ValueError(f"range [{pos}, {end}) outside the buffer of {len(buf)} bytes")
    while pos < end:
        try:
            head, bs, bl, *_ = _parse(buf, pos, end)
        except ValueError:
            return pos
        if zlib.crc32(memoryview(buf)[bs:bs + bl]) & 0x7FFFFFFF != head[2]:
            return pos
        pos += head[0]
    return -1


def record_positions(buf, pos, limit, max_records):
    """Positions of the valid records from ``pos`` (readable end ``limit``), at most ``max_records``.

    Returns ``(positions int64, position, status)`` with ``commit_log_walk``'s
    statuses 0 (end of data), 1 (blank record), 2 (invalid record), and 3
    (``max_records`` found).
    """
    if pos < 0 or max_records < 0:
        raise ValueError(f"pos and max_records must be >= 0, got {pos}, {max_records}")
    if limit < 0 or limit > len(buf):
        raise ValueError(f"limit {limit} outside the buffer of {len(buf)} bytes")
    out: list[int] = []
    while True:
        if len(out) == max_records:
            return np.array(out, dtype=np.int64), pos, 3
        if limit - pos < _HEAD.size:
            return np.array(out, dtype=np.int64), pos, 0
        total, magic = _HEAD.unpack_from(buf, pos)
        if magic == fmt.BLANK_MAGIC_CODE:
            return np.array(out, dtype=np.int64), pos, 1
        if total == 0 and magic == 0:
            return np.array(out, dtype=np.int64), pos, 0
        try:
            _properties_span(buf, pos, limit)
        except ValueError:
            return np.array(out, dtype=np.int64), pos, 2
        out.append(pos)
        pos += total


def crc32_of(data):
    """CRC-32 of ``data`` as ``zlib.crc32`` gives it (the compiled engine computes short ones inline)."""
    return zlib.crc32(bytes(data))


def record_totals(buf, pos, end, min_total):
    """TOTALSIZE of the records at ``pos`` (their first 8 bytes in ``buf``), and whether each is a
    message's record (MAGICCODE V1 or V2) of at least ``min_total`` bytes that ends by ``end``:
    ``(total int64, ok bool)``."""
    pos = np.asarray(pos, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    if len(end) != len(pos):
        raise ValueError(f"record_totals: {len(pos)} positions but {len(end)} ends")
    total = np.empty(len(pos), dtype=np.int64)
    ok = np.empty(len(pos), dtype=np.bool_)
    for i, p in enumerate(pos.tolist()):
        if p < 0 or p + _HEAD.size > len(buf):
            raise ValueError(f"record_totals: position {p} has no 8-byte head in the {len(buf)} bytes")
        t, magic = _HEAD.unpack_from(buf, p)
        t &= 0xFFFFFFFF  # TOTALSIZE read unsigned, as the compiled engine reads it
        total[i] = t
        ok[i] = magic in (fmt.MESSAGE_MAGIC_CODE_V1, fmt.MESSAGE_MAGIC_CODE_V2) and t >= min_total and p + t <= end[i]
    return total, ok

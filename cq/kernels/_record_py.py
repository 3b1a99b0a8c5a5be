"""Pure-Python twin of ``cq/_scan.pyx``: the ConsumeQueue / ext / CommitLog scan kernels.

Buffers are uint8 ndarrays (one mapped file or a slice of one); positions
are byte offsets inside that buffer. The functions mirror the compiled engine
name for name and result for result; they are the readable statement of what
the engine computes.
"""
from __future__ import annotations

import os
import socket
import struct
import zlib

import numpy as np

from . import format as fmt

#: ext_bloom_check results
PRUNED, PASS, HIT, UNDERFLOW = 0, 1, 2, 3
#: ext_units_at statuses
FOUND, NOT_FOUND = 0, 1


def scan_tags(units, codes):
    """Indices (int64) of the 20-byte big-endian units whose low 32 tag-code bits are in ``codes``.

    ``units`` is a uint8 array whose length is a multiple of 20; ``codes`` int32.
    The broker compares ``(int) tagsCode`` with its code set (docs/filtering.md#tag-match).
    """
    n = len(units) // fmt.CQ_STORE_UNIT_SIZE
    low32 = np.frombuffer(memoryview(units)[: n * 20], dtype=fmt.CQ_UNIT_DTYPE)["tags_code"].astype(np.int64)
    low32 = low32.astype(np.int32)  # keep the low 32 bits, signed, as Java's (int) cast
    return np.flatnonzero(np.isin(low32, np.asarray(codes, dtype=np.int32))).astype(np.int64)


def ext_walk(buf, pos):
    """Walk ext units from ``pos``: ``(end_position, status)``.

    status 0: stopped at s <= 0 or at the file's end; 2: a unit of size s runs
    past the end of the buffer (end_position is where it starts).
    """
    if pos < 0:
        raise ValueError(f"pos must be >= 0, got {pos}")
    n = len(buf)
    while pos + 2 <= n:
        size = int.from_bytes(bytes(buf[pos:pos + 2]), "big", signed=True)
        if size <= 0:
            return pos, 0
        if pos + size > n:
            return pos, 2
        pos += size
    return pos, 0


def _head(buf, pos):
    return fmt.decode_ext_head(bytes(buf[pos:pos + fmt.MIN_EXT_UNIT_SIZE]), 0)


def ext_units_at(buf, positions, limit):
    """Read the ext unit heads at ``positions`` (file positions; the readable end is ``limit``).

    Returns ``(status int8, tags_code int64, msg_store_time int64, bit_map_size int16)``;
    status FOUND, NOT_FOUND (the broker's lookup returns null: past ``limit``,
    fewer than 2 bytes, or size < 1) or UNDERFLOW (head or bitmap past ``limit``).
    """
    if limit < 0 or limit > len(buf):
        raise ValueError(f"limit {limit} outside the buffer of {len(buf)} bytes")
    k = len(positions)
    status = np.full(k, NOT_FOUND, dtype=np.int8)
    tags = np.zeros(k, dtype=np.int64)
    times = np.zeros(k, dtype=np.int64)
    bms = np.zeros(k, dtype=np.int16)
    for i, pos in enumerate(positions.tolist()):
        if pos < 0 or pos >= limit or limit - pos < 2:
            continue
        if int.from_bytes(bytes(buf[pos:pos + 2]), "big", signed=True) < 1:
            continue
        if limit - pos < fmt.MIN_EXT_UNIT_SIZE:
            status[i] = UNDERFLOW
            continue
        _, t, st, b = _head(buf, pos)
        if b >= 1 and pos + fmt.MIN_EXT_UNIT_SIZE + b > limit:
            status[i] = UNDERFLOW
            continue
        status[i], tags[i], times[i], bms[i] = FOUND, t, st, b
    return status, tags, times, bms


def ext_units_read(buf, positions, limit):
    """:func:`ext_units_at` with each unit's size field and bitmap bytes.

    Returns ``(status int8, size int16, tags_code int64, msg_store_time int64,
    bit_map_size int16, bitmap_offsets int64 (k + 1), bitmap_data uint8)``: a row
    not FOUND is zero everywhere and has no bitmap bytes; a FOUND unit with
    ``bit_map_size >= 1`` has its ``bit_map_size`` bitmap bytes (the Arrow binary layout).
    """
    status, tags, times, bms = ext_units_at(buf, positions, limit)
    found = status == FOUND
    sizes = np.zeros(len(positions), dtype=np.int16)
    for i in np.flatnonzero(found).tolist():
        sizes[i] = _head(buf, int(positions[i]))[0]
    lengths = np.where(found & (bms >= 1), bms, 0).astype(np.int64)
    starts = np.where(lengths > 0, np.asarray(positions, dtype=np.int64) + fmt.MIN_EXT_UNIT_SIZE, 0)
    offsets, data = gather_spans(buf, starts, lengths)
    return status, sizes, tags, times, bms, offsets, data


def ext_locate(addresses, starts, file_size):
    """Each ext address's file and position: ``(index int64, pos int64)``, index -1 where no file holds it.

    An address is an ext address when ``<= MAX_ADDR``; its offset is the address with
    the top bit flipped (docs/formats.md#ext-address); the file is the last whose
    start is at or below the offset, if the offset lies within it (offset 0: the first
    file); the position is the offset modulo ``file_size``.
    """
    if file_size <= 0:
        raise ValueError(f"file size {file_size} must be positive")
    addresses = np.asarray(addresses, dtype=np.int64)
    starts = np.asarray(starts, dtype=np.int64)
    index = np.full(len(addresses), -1, dtype=np.int64)
    positions = np.zeros(len(addresses), dtype=np.int64)
    if not len(starts):
        return index, positions
    is_ext = addresses <= fmt.MAX_ADDR
    real = np.where(is_ext, addresses.astype(np.uint64) ^ np.uint64(1 << 63), 0).astype(np.int64)
    idx = np.searchsorted(starts, real, side="right") - 1
    idx[is_ext & (real == 0)] = 0
    ok = is_ext & (idx >= 0)
    ok &= real < starts[np.clip(idx, 0, None)] + file_size
    index[ok] = idx[ok]
    positions[ok] = real[ok] % file_size
    return index, positions


def _check_bit_bytes(byte_idx, masks, bit_num):
    if len(masks) != len(byte_idx):
        raise ValueError("byte_idx and masks differ in length")
    for b in np.asarray(byte_idx).tolist():
        if b < 0 or b * 8 >= bit_num:
            raise ValueError(f"bit byte index {b} outside a {bit_num}-bit bitmap")


def bloom_check_units(found, msg_store_time, bit_map_size, bitmap_offsets, bitmap_data, byte_idx, masks,
                      bit_num, born_time):
    """:func:`ext_bloom_check`'s decision over ext units already read (``cq.ext.ExtBatch``'s columns).

    Rules 3-5 of docs/filtering.md#expression-filter. Returns uint8 per unit: PASS (not
    found, or let through untested: store time <= born_time, no bitmap, or bitmap length
    * 8 != bit_num), HIT (every bit set) or PRUNED (some bit clear). A tested row's bitmap
    is ``bitmap_data[bitmap_offsets[i]:bitmap_offsets[i + 1]]``, which must hold its
    ``bit_map_size`` bytes (ValueError otherwise).
    """
    _check_bit_bytes(byte_idx, masks, bit_num)
    k = len(found)
    if len(msg_store_time) != k or len(bit_map_size) != k or len(bitmap_offsets) != k + 1:
        raise ValueError(f"ext unit columns of different lengths ({k} found rows)")
    found = np.asarray(found).astype(bool)
    bms = np.asarray(bit_map_size).astype(np.int64)
    offsets = np.asarray(bitmap_offsets, dtype=np.int64)
    with_bitmap = found & (bms >= 1) & (bms * 8 == bit_num)
    lengths = offsets[1:] - offsets[:-1]
    bad = np.flatnonzero(with_bitmap & ((offsets[:-1] < 0) | (offsets[1:] > len(bitmap_data)) | (lengths != bms)))
    if len(bad):
        i = int(bad[0])
        raise ValueError(f"row {i}: bitmap bytes [{offsets[i]}, {offsets[i + 1]}) do not hold its {bms[i]}-byte "
                         f"bitmap within {len(bitmap_data)} bytes")
    out = np.full(k, PASS, dtype=np.uint8)
    rows = np.flatnonzero(with_bitmap & (np.asarray(msg_store_time) > born_time))
    data, first = np.asarray(bitmap_data), offsets[rows]
    hit = np.ones(len(rows), dtype=bool)
    for b, m in zip(np.asarray(byte_idx).tolist(), np.asarray(masks).tolist()):
        hit &= (data[first + b] & m) != 0
    out[rows] = np.where(hit, HIT, PRUNED)
    return out


def ext_bloom_check(buf, positions, limit, byte_idx, masks, bit_num, born_time, found=None):
    """The ConsumeQueue-layer SQL92 decision for each ext unit (rules 3-5 of docs/filtering.md#expression-filter).

    ``byte_idx``/``masks`` are the group's k bit positions as (p // 8, 1 << p % 8).
    Returns uint8: PASS (no unit, store time <= born_time, no bitmap, or bitmap
    length * 8 != bit_num: the broker lets the message through untested), HIT
    (every bit set), PRUNED (some bit clear), UNDERFLOW (corrupt unit).
    ``found`` (optional, uint8 of ``len(positions)``) gets 1 where a unit is found, else 0.
    """
    _check_bit_bytes(byte_idx, masks, bit_num)
    status, _, _, times, bms, offsets, data = ext_units_read(buf, positions, limit)
    if found is not None:
        if len(found) != len(positions):
            raise ValueError(f"found holds {len(found)} entries for {len(positions)} positions")
        found[:] = status == FOUND
    out = bloom_check_units(status == FOUND, times, bms, offsets, data, byte_idx, masks, bit_num, born_time)
    out[status == UNDERFLOW] = UNDERFLOW
    return out


def record_properties_span(buf, pos, limit):
    """``(start, length)`` of the properties text of the record at ``pos``; raise ValueError if corrupt."""
    if limit - pos < 8:
        raise ValueError("record header runs past the end of the file")
    total = int.from_bytes(bytes(buf[pos:pos + 4]), "big", signed=True)
    magic = int.from_bytes(bytes(buf[pos + 4:pos + 8]), "big", signed=True)
    if magic not in (fmt.MESSAGE_MAGIC_CODE_V1, fmt.MESSAGE_MAGIC_CODE_V2):
        raise ValueError(f"bad magic code {magic & 0xFFFFFFFF:#010x}")
    if total < fmt.RECORD_V1_IPV4_OVERHEAD or total > limit - pos:
        raise ValueError(f"TOTALSIZE {total} does not fit the {limit - pos} bytes left in the file")
    sys_flag = int.from_bytes(bytes(buf[pos + 36:pos + 40]), "big", signed=True)
    p = pos + 48 + fmt.host_width(sys_flag, store=False) + 8 + fmt.host_width(sys_flag, store=True) + 12
    end = pos + total
    if p + 4 > end:
        raise ValueError("record too short for its hosts")
    body_len = int.from_bytes(bytes(buf[p:p + 4]), "big", signed=True)
    p += 4 + max(body_len, 0)
    width = 2 if magic == fmt.MESSAGE_MAGIC_CODE_V2 else 1
    if p + width > end:
        raise ValueError(f"BODYLENGTH {body_len} runs past the record")
    topic_len = int.from_bytes(bytes(buf[p:p + width]), "big", signed=True)
    if topic_len < 0:
        raise ValueError(f"negative topic length {topic_len}")
    p += width + topic_len
    if p + 2 > end:
        raise ValueError(f"topic length {topic_len} runs past the record")
    props_len = int.from_bytes(bytes(buf[p:p + 2]), "big", signed=True)
    p += 2
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
            start, length = record_properties_span(buf, pos, limit)
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
        if n - pos < 8:
            return pos, 0, records
        total = int.from_bytes(bytes(buf[pos:pos + 4]), "big", signed=True)
        magic = int.from_bytes(bytes(buf[pos + 4:pos + 8]), "big", signed=True)
        if magic == fmt.BLANK_MAGIC_CODE:
            return pos, 1, records
        if total == 0 and magic == 0:
            return pos, 0, records
        try:
            record_properties_span(buf, pos, n)
        except ValueError:
            return pos, 2, records
        pos += total
        records += 1


def decode_properties_at(buf, start, length):
    """The properties dict of ``length`` bytes at ``start`` (broker parsing rules, UTF-8 with replacement)."""
    if start < 0 or length < 0 or start + length > len(buf):
        raise ValueError(f"properties [{start}, {start + length}) outside the buffer of {len(buf)} bytes")
    return fmt.decode_properties_bytes(bytes(buf[start:start + length])) if length else {}


# The fixed part of a record, TOTALSIZE .. BODYLENGTH, per host family:
# index (sys_flag >> 4) & 3 = born IPv6 bit | store IPv6 bit << 1.
_FIXED = [
    struct.Struct(">iiiiiqqiq" + ("16si" if b6 else "4si") + "q" + ("16si" if s6 else "4si") + "iqi")
    for s6 in (False, True)
    for b6 in (False, True)
]


def _parse(buf, pos, limit):
    """The record layout at ``pos``, validated: ``(head, body_start, body_len, topic_start,
    topic_len, props_start, props_len)``; ``head`` is the fixed part as ``_FIXED`` unpacks it.
    Raises ``ValueError(reason, offset)`` for a record that is not valid."""
    if pos < 0 or limit - pos < 8:
        raise ValueError(f"record header needs 8 bytes, {limit - pos} left in the file", pos)
    total, magic = struct.unpack_from(">ii", buf, pos)
    if magic == fmt.BLANK_MAGIC_CODE:
        raise ValueError("blank end-of-file record, not a message", pos)
    if magic not in (fmt.MESSAGE_MAGIC_CODE_V1, fmt.MESSAGE_MAGIC_CODE_V2):
        raise ValueError(f"bad magic code {magic & 0xFFFFFFFF:#010x} (TOTALSIZE {total})", pos)
    if total < fmt.RECORD_V1_IPV4_OVERHEAD:
        raise ValueError(f"TOTALSIZE {total} is smaller than the smallest record", pos)
    if total > limit - pos:
        raise ValueError(f"TOTALSIZE {total} runs past the end of the file ({limit - pos} bytes left)", pos)
    end = pos + total
    sys_flag = struct.unpack_from(">i", buf, pos + 36)[0]
    fixed = _FIXED[(sys_flag >> 4) & 3]
    if pos + fixed.size > end:
        raise ValueError(f"record of {total} bytes is too short for its hosts (sys_flag {sys_flag:#x})", pos)
    head = fixed.unpack_from(buf, pos)
    body_len = head[-1]
    p = pos + fixed.size
    blen = max(body_len, 0)
    width = 2 if magic == fmt.MESSAGE_MAGIC_CODE_V2 else 1
    if p + blen + width > end:
        raise ValueError(f"BODYLENGTH {body_len} runs past the record of {total} bytes", p - 4)
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
    (props_len,) = struct.unpack_from(">h", buf, p)
    p += 2
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
    return (*head[:7], struct.unpack_from(">i", buf, pos + 36)[0], *head[8:16], body, topic, props)


#: decode_records column names, in order: int32 / int64 fixed fields, then spans
RECORD_INT_COLUMNS = (
    ("store_size", "i4"), ("magic_code", "i4"), ("body_crc", "i4"), ("queue_id", "i4"), ("flag", "i4"),
    ("queue_offset", "i8"), ("commit_log_offset", "i8"), ("sys_flag", "i4"), ("born_timestamp", "i8"),
    ("born_port", "i4"), ("store_timestamp", "i8"), ("store_port", "i4"), ("reconsume_times", "i4"),
    ("prepared_transaction_offset", "i8"),
)
RECORD_SPAN_COLUMNS = ("body_start", "body_len", "topic_start", "topic_len", "props_start", "props_len")
# head fields (as _FIXED unpacks them) of each int column
_HEAD_INDEX = (0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 13, 14, 15)


def decode_records(buf, positions, limit):
    """Decode the records at ``positions`` into columns (the batch form of :func:`decode_record`).

    Returns ``(columns, error)``: ``columns`` maps each ``RECORD_INT_COLUMNS``
    name to an int32/int64 array, ``born_ip``/``store_ip`` to (k, 16) uint8
    arrays (IPv4 in the first 4 bytes), and each ``RECORD_SPAN_COLUMNS`` name to
    int64 byte positions/lengths inside ``buf``. ``error`` is None, or
    ``(index, reason, offset)`` of the first record that is not valid (the rows
    from it on are left zero), with the reason and offset of ``decode_record``.
    """
    if limit < 0 or limit > len(buf):
        raise ValueError(f"limit {limit} outside the buffer of {len(buf)} bytes")
    k = len(positions)
    cols = {name: np.zeros(k, dtype=dt) for name, dt in RECORD_INT_COLUMNS}
    for name in RECORD_SPAN_COLUMNS:
        cols[name] = np.zeros(k, dtype=np.int64)
    cols["born_ip"] = np.zeros((k, 16), dtype=np.uint8)
    cols["store_ip"] = np.zeros((k, 16), dtype=np.uint8)
    for i, pos in enumerate(positions.tolist()):
        try:
            head, *spans = _parse(buf, pos, limit)
        except ValueError as exc:
            return cols, (i, exc.args[0], exc.args[1])
        for (name, _), h in zip(RECORD_INT_COLUMNS, _HEAD_INDEX):
            cols[name][i] = head[h]
        cols["sys_flag"][i] = struct.unpack_from(">i", buf, pos + 36)[0]
        for name, ip in (("born_ip", head[9]), ("store_ip", head[12])):
            cols[name][i, :len(ip)] = np.frombuffer(ip, np.uint8)
        for name, v in zip(RECORD_SPAN_COLUMNS, spans):
            cols[name][i] = v
    return cols, None


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


def split_properties(buf, starts, lengths):
    """Split each record's properties text into map entries, as :func:`gather_properties` parses it.

    Returns ``(map_offsets int64 (k + 1), key_start, key_len, value_start,
    value_len, tags_entry, keys_entry)``: record ``i`` owns entries
    ``map_offsets[i]:map_offsets[i + 1]`` in first-seen key order, a repeated key
    (equal bytes) keeping its first place and its last value, as a dict does;
    ``tags_entry``/``keys_entry`` give the entry of ``TAGS``/``KEYS`` or -1.
    """
    _check_spans(len(buf), starts, lengths)
    k = len(starts)
    map_offsets = np.zeros(k + 1, dtype=np.int64)
    entries = []  # (key_start, key_len, value_start, value_len)
    tags_entry = np.full(k, -1, dtype=np.int64)
    keys_entry = np.full(k, -1, dtype=np.int64)
    for i, (start, length) in enumerate(zip(starts.tolist(), lengths.tolist())):
        text = bytes(buf[start:start + length])
        seen: dict[bytes, int] = {}
        at = start
        for seg in text.split(b"\x02"):
            key, sep, value = seg.partition(b"\x01")
            if sep and key and value:
                if key not in seen:
                    seen[key] = len(entries)
                    entries.append([at, len(key), 0, 0])
                entries[seen[key]][2:] = [at + len(key) + 1, len(value)]
            at += len(seg) + 1
        map_offsets[i + 1] = len(entries)
        tags_entry[i] = seen.get(b"TAGS", -1)
        keys_entry[i] = seen.get(b"KEYS", -1)
    e = np.array(entries, dtype=np.int64).reshape(-1, 4)
    return (map_offsets, e[:, 0].copy(), e[:, 1].copy(), e[:, 2].copy(), e[:, 3].copy(), tags_entry, keys_entry)


# ------------------------------------------------------------------ the decoder

def _host_text(ip: bytes, port: int) -> str:
    """``"ip:port"`` / ``"[ipv6]:port"`` of a stored address and int32 port (read_message's text)."""
    if len(ip) == 4:
        return f"{socket.inet_ntop(socket.AF_INET, ip)}:{port}"
    return f"[{socket.inet_ntop(socket.AF_INET6, ip)}]:{port}"


def _text(raw: bytes) -> bytes:
    return raw.decode("utf-8", "replace").encode("utf-8")


def _var(values, with_valid: bool):
    """``(offsets int32, data uint8, valid)`` of a list of bytes (None = absent)."""
    lengths = [0 if v is None else len(v) for v in values]
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if len(offsets) and offsets[-1] > 0x7FFFFFFF:
        raise OverflowError(f"a column of {len(values)} records passes 2 GiB: decode fewer records at a time")
    data = np.frombuffer(b"".join(v for v in values if v is not None), dtype=np.uint8).copy()
    valid = np.array([v is not None for v in values], dtype=np.uint8) if with_valid else None
    return offsets.astype(np.int32), data, valid


def _field(name, bip, bport, sip, sport, body, topic, props):
    """One variable-length field of a decoded record, as the decoder lays it out (bytes, None or a dict)."""
    if name == "born_host":
        return _host_text(bip, bport).encode()
    if name == "store_host":
        return _host_text(sip, sport).encode()
    if name == "body":
        return body
    if name == "topic":
        return topic.encode("utf-8")
    if name == "properties":
        return props
    value = props.get(fmt.PROPERTY_TAGS if name == "tags" else fmt.PROPERTY_KEYS)
    return None if value is None else value.encode("utf-8")


def decode_columns(buf, positions, limit, mask):
    """Decode the records at ``positions`` into the Arrow buffers of the fields in ``mask``.

    The statement of ``cq/_scan.pyx``'s ``decode_columns``: each record is
    decoded as :func:`decode_record` decodes it (text with ``"replace"``,
    properties as ``fmt.decode_properties_bytes`` parses them), then laid out
    in Arrow buffers. Returns ``(columns, error)`` as the engine does.
    """
    if limit < 0 or limit > len(buf):
        raise ValueError(f"limit {limit} outside the buffer of {len(buf)} bytes")
    names = [name for name, _ in fmt.RECORD_FIELDS]
    want = {name for i, name in enumerate(names) if (mask >> i) & 1}
    k = len(positions)
    cols = {name: np.zeros(k, dtype=kind) for name, kind in fmt.RECORD_FIELDS
            if name in want and kind in ("i4", "i8")}
    values: dict[str, list] = {name: [] for name in want if name not in cols}
    error = None
    for i, pos in enumerate(positions.tolist()):
        try:
            rec = decode_record(buf, pos, limit)
        except ValueError as exc:
            error = (i, exc.args[0], exc.args[1])
            break
        (total, magic, crc, qid, flag, qoff, phys, sys_flag, bts, bip, bport, sts, sip, sport, recon,
         prep, body, topic, props) = rec
        fixed = {"store_size": total, "magic_code": magic, "body_crc": crc, "queue_id": qid, "flag": flag,
                 "queue_offset": qoff, "commit_log_offset": phys, "sys_flag": sys_flag, "born_timestamp": bts,
                 "store_timestamp": sts, "reconsume_times": recon, "prepared_transaction_offset": prep}
        for name, col in cols.items():
            col[i] = fixed[name]
        for name, out in values.items():
            out.append(_field(name, bip, bport, sip, sport, body, topic, props))
    rows = k if error is None else error[0]
    for name, out in values.items():
        out.extend([None if name in ("tags", "keys") else (b"" if name != "properties" else {})]
                   * (k - rows))
        if name == "properties":
            counts = np.array([len(p) for p in out], dtype=np.int64)
            map_offsets = np.zeros(k + 1, dtype=np.int64)
            np.cumsum(counts, out=map_offsets[1:])
            koffs, kdata, _ = _var([key.encode("utf-8") for p in out for key in p], False)
            voffs, vdata, _ = _var([v.encode("utf-8") for p in out for v in p.values()], False)
            cols[name] = (map_offsets.astype(np.int32), koffs, kdata, voffs, vdata)
        else:
            offsets, data, valid = _var(out, name in ("tags", "keys"))
            if name in ("tags", "keys") and rows < k:
                valid[rows:] = 0
            cols[name] = (offsets, data, valid)
    return cols, error


def copy_records(fds, positions, sizes, file_size):
    """Copy record ``i`` from open file ``fds[i]`` at ``positions[i]``, back to back: ``(data, starts)`` or None."""
    if len(sizes) != len(positions) or len(fds) != len(positions):
        raise ValueError(f"{len(positions)} positions need {len(positions)} sizes and file descriptors, got "
                         f"{len(sizes)} and {len(fds)}")
    out, starts = bytearray(), []
    for fd, pos, size in zip((int(f) for f in fds), (int(p) for p in positions), (int(s) for s in sizes)):
        if pos < 0 or size < 8 or size > file_size - pos:
            return None
        raw = os.pread(fd, size, pos)
        if len(raw) != size or int.from_bytes(raw[:4], "big", signed=True) != size:
            return None
        starts.append(len(out))
        out += raw
    return np.frombuffer(bytes(out), dtype=np.uint8), np.array(starts, dtype=np.int64)


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
        if limit - pos < 8:
            return np.array(out, dtype=np.int64), pos, 0
        total, magic = struct.unpack_from(">ii", buf, pos)
        if magic == fmt.BLANK_MAGIC_CODE:
            return np.array(out, dtype=np.int64), pos, 1
        if total == 0 and magic == 0:
            return np.array(out, dtype=np.int64), pos, 0
        try:
            record_properties_span(buf, pos, limit)
        except ValueError:
            return np.array(out, dtype=np.int64), pos, 2
        out.append(pos)
        pos += total


def crc32_of(data):
    """CRC-32 of ``data`` as ``zlib.crc32`` gives it (the compiled engine computes short ones inline)."""
    return zlib.crc32(bytes(data))


def adler32_of(data):
    """Adler-32 of ``data`` as ``zlib.adler32`` gives it (the compiled engine checks inflated bodies with its own)."""
    return zlib.adler32(bytes(data))


def _rows(rows, n):
    out = list(range(n)) if rows is None else [int(r) for r in rows]
    for r in out:
        if r < 0 or r >= n:
            raise IndexError(f"row {r} outside the {n} rows of the column")
    return out


def texts_list(offsets, data, binary=False, rows=None):
    """Rows of a text (or, with ``binary``, bytes) column as str (bytes): rows ``rows`` (default all), in order."""
    o = [int(x) for x in offsets]
    if o[-1] > len(data) or o[0] < 0:
        raise ValueError(f"offsets run to {o[-1]}, past the {len(data)} bytes of data")
    raw = bytes(data)
    out = [raw[o[r]:o[r + 1]] for r in _rows(rows, len(o) - 1)]
    return out if binary else [r.decode("utf-8") for r in out]


def property_dicts(map_offsets, key_offsets, key_data, value_offsets, value_data, rows=None):
    """Rows of a ``properties`` column as dicts (entries in order): rows ``rows`` (default all), in order."""
    mo = [int(x) for x in map_offsets]
    if mo[-1] > len(key_offsets) - 1 or mo[-1] > len(value_offsets) - 1:
        raise ValueError(f"map offsets run to entry {mo[-1]}, past the entries given")
    keys = texts_list(key_offsets[:mo[-1] + 1], key_data)
    values = texts_list(value_offsets[:mo[-1] + 1], value_data)
    return [dict(zip(keys[mo[r]:mo[r + 1]], values[mo[r]:mo[r + 1]])) for r in _rows(rows, len(mo) - 1)]


def message_objects(cls, columns, rows, file_index, paths, file_offsets):
    """``cls(*fields)`` for rows ``rows`` of a decoded column set (every record field), in order."""
    names = [name for name, _ in fmt.RECORD_FIELDS]
    names = names[:names.index("properties") + 1]
    n = len(columns["properties"][0]) - 1
    rows = [int(r) for r in rows]
    if len(file_index) != len(rows) or len(file_offsets) != len(rows):
        raise ValueError(f"{len(rows)} rows need {len(rows)} file indices and offsets")
    for r in rows:
        if r < 0 or r >= n:
            raise IndexError(f"row {r} outside the {n} rows of the columns")
    values = []
    for name, kind in fmt.RECORD_FIELDS:
        if name not in names:
            continue
        col = columns[name]
        if kind in ("i4", "i8"):
            values.append([int(col[r]) for r in rows])
        elif kind == "map":
            values.append(property_dicts(*col, rows))
        else:
            values.append(texts_list(col[0], col[1], kind == "bin", rows))
    for f in file_index:
        if f < 0 or f >= len(paths):
            raise IndexError(f"file index {f} outside the {len(paths)} paths")
    values.append([paths[int(f)] for f in file_index])
    values.append([int(o) for o in file_offsets])
    return list(map(cls, *values))


class Delivered:
    """An iterator handing out messages and counting each in ``stats.delivered`` as it goes."""

    def __init__(self, items, stats):
        self._items = iter(items)
        self._stats = stats

    @staticmethod
    def built(cls, columns, rows, file_index, paths, file_offsets, stats):
        return Delivered(message_objects(cls, columns, rows, file_index, paths, file_offsets), stats)

    def __iter__(self):
        return self

    def __next__(self):
        msg = next(self._items)
        self._stats.delivered += 1
        return msg


#: The most bytes a body column may hold: int32 offsets.
_INT32_MAX = 0x7FFFFFFF


def inflate_bodies(offsets, data, sys_flag, max_bytes=_INT32_MAX):
    """The body column with every ``COMPRESSED_FLAG`` row of a zlib type inflated.

    Returns ``(offsets, data, rest)`` as the engine does: the new column and
    the int64 indices of the rows left to ``cq.commitlog.decompress_body``
    (LZ4, ZSTD, unknown types, bodies that do not inflate), empty in the
    column. No compressed row: the inputs unchanged. OverflowError when the
    column would pass ``max_bytes`` (at most 2 GiB - 1), before inflating past it.
    """
    k = len(sys_flag)
    if len(offsets) != k + 1:
        raise ValueError(f"offsets must have len(sys_flag) + 1 = {k + 1} entries, got {len(offsets)}")
    o = offsets.astype(np.int64)
    bad = np.flatnonzero((o[:-1] < 0) | (o[1:] < o[:-1]) | (o[1:] > len(data)))
    if len(bad):
        raise ValueError(f"offsets out of order or outside the data of {len(data)} bytes at row {bad[0]}")
    flags = np.asarray(sys_flag, dtype=np.int32)
    if not (flags & fmt.COMPRESSED_FLAG).any():
        return offsets, data, np.zeros(0, dtype=np.int64)
    cap = max_bytes if 0 <= max_bytes < _INT32_MAX else _INT32_MAX
    overflow = OverflowError(f"the body column of {k} records passes {cap} bytes once decompressed"
                             f"{'' if cap < _INT32_MAX else ' (2 GiB, int32 offsets)'}: "
                             "decode fewer records at a time")
    raw = memoryview(np.ascontiguousarray(data)).cast("B")
    out: list[bytes] = []
    rest: list[int] = []
    size = 0
    for i, (a, b, flag) in enumerate(zip(o[:-1].tolist(), o[1:].tolist(), flags.tolist())):
        body = bytes(raw[a:b])
        if flag & fmt.COMPRESSED_FLAG:
            body = None  # left to decompress_body unless it inflates here
            if fmt.compression_type(flag) in fmt.ZLIB_COMPRESSION_TYPES:
                # bounded: never more than the column can still hold, whatever the body inflates to
                inflater = zlib.decompressobj()
                try:
                    got = inflater.decompress(raw[a:b], cap - size + 1)
                except zlib.error:
                    got = None
                if got is not None and size + len(got) > cap:
                    raise overflow
                if got is not None and inflater.eof:  # bytes after the stream's end are ignored
                    body = got
            if body is None:
                rest.append(i)
                body = b""
        size += len(body)
        if size > cap:
            raise overflow
        out.append(body)
    new_offsets = np.zeros(k + 1, dtype=np.int32)
    np.cumsum([len(b) for b in out], out=new_offsets[1:])
    return new_offsets, np.frombuffer(b"".join(out), dtype=np.uint8), np.array(rest, dtype=np.int64)


def pool_bytes():
    """Bytes of freed decode buffers kept for reuse: the twin keeps none (numpy allocates)."""
    return 0

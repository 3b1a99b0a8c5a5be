"""Pure-Python twin of ``_decode.pyx``: CommitLog records into Arrow buffers, as the decoder lays them out.
"""
from __future__ import annotations

import os
import socket

import numpy as np

from .. import format as fmt
from ._record_py import decode_record


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

    The statement of ``_decode.pyx``'s ``decode_columns``: each record is
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
        cols[name] = _layout(name, out)
        if name in ("tags", "keys") and rows < k:
            cols[name][2][rows:] = 0
    return cols, error


def _layout(name, out):
    """A variable-length column's buffers from one value per row (bytes, None, or a dict for ``properties``)."""
    if name == "properties":
        counts = np.array([len(p) for p in out], dtype=np.int64)
        map_offsets = np.zeros(len(out) + 1, dtype=np.int64)
        np.cumsum(counts, out=map_offsets[1:])
        koffs, kdata, _ = _var([key.encode("utf-8") for p in out for key in p], False)
        voffs, vdata, _ = _var([v.encode("utf-8") for p in out for v in p.values()], False)
        return map_offsets.astype(np.int32), koffs, kdata, voffs, vdata
    return _var(out, name in ("tags", "keys"))


def properties_columns(buf, starts, lengths, mask):
    """``decode_columns``' ``properties``, ``tags`` and ``keys`` columns (those in ``mask``) of the
    properties texts ``buf[starts[i]:starts[i] + lengths[i]]``, parsed as in a record."""
    n, k = len(buf), len(starts)
    if len(lengths) != k:
        raise ValueError(f"{k} starts need {k} lengths, got {len(lengths)}")
    props = []
    for i, (a, m) in enumerate(zip(starts.tolist(), lengths.tolist())):
        if a < 0 or m < 0 or a + m > n:
            raise ValueError(f"properties span {i} ({a}, {m}) outside the buffer of {n} bytes")
        props.append(fmt.decode_properties_bytes(bytes(buf[a:a + m])))
    names = [name for name, _ in fmt.RECORD_FIELDS]
    return {name: _layout(name, [_field(name, None, None, None, None, None, None, p) for p in props])
            for name in ("tags", "keys", "properties") if (mask >> names.index(name)) & 1}


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

"""The last touches on a record's bytes before it is written: the ``__CRC32#`` property the
broker appends (``enabledAppendPropCRC``, docs/formats.md#record-crc-property) and the offset
message id it answers the producer with (docs/formats.md).

:class:`cq.writer.writer.StoreWriter` calls these per record; they know nothing of the writer.
"""
from __future__ import annotations

import struct
import zlib

from ..format import (
    CRC32_RESERVED_LEN,
    NAME_VALUE_SEPARATOR,
    PROPERTY_CRC32,
    RECORD_BORN_HOST_POSITION,
    RECORD_SYS_FLAG_POSITION,
    encode_property_crc,
    host_width,
)

__all__ = ["fill_property_crc", "offset_msg_id", "strip_property_crc"]

_CRC_PREFIX = (PROPERTY_CRC32 + NAME_VALUE_SEPARATOR).encode()


def strip_property_crc(props_b: bytes, props: dict[str, str]) -> tuple[bytes, dict[str, str]]:
    """Drop every ``__CRC32#`` pair and end the text with U+0002 (``enabledAppendPropCRC``).

    See docs/formats.md#record-crc-property.
    """
    if _CRC_PREFIX in props_b:
        props_b = b"\x02".join(seg for seg in props_b.split(b"\x02") if not seg.startswith(_CRC_PREFIX))
        props = {k: v for k, v in props.items() if k != PROPERTY_CRC32}
    if props_b and not props_b.endswith(b"\x02"):
        props_b += b"\x02"
    return props_b, props


def fill_property_crc(record: bytearray) -> None:
    """Write ``__CRC32#`` + CRC-32 of bytes [0, size - 20), ten digits least significant first."""
    crc = zlib.crc32(memoryview(record)[:-CRC32_RESERVED_LEN]) & 0x7FFFFFFF
    record[-CRC32_RESERVED_LEN:] = _CRC_PREFIX + encode_property_crc(crc).encode() + b"\x02"


def offset_msg_id(record: bytes | bytearray, phys: int) -> str:
    """Offset message id: store-host address bytes, int32 port, int64 physical offset, in hex."""
    sys_flag = int.from_bytes(record[RECORD_SYS_FLAG_POSITION:RECORD_SYS_FLAG_POSITION + 4], "big", signed=True)
    at = RECORD_BORN_HOST_POSITION + host_width(sys_flag, store=False) + 8  # past BORNHOST and STORETIMESTAMP
    width = host_width(sys_flag, store=True)
    return (bytes(record[at:at + width]) + struct.pack(">q", phys)).hex().upper()

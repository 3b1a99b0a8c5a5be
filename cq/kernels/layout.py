"""The store layout as the kernels see it: every byte offset and constant they use, from ``cq/format.py``.

``cq/format.py`` is the one home of the store formats. The compiled kernels take these
values as C constants from ``_layout.h``, which ``setup.py`` writes at build time with
:func:`header` (the file is not kept in git); the pure-Python twins read them at import
(``_layout_py.py``). Both go through :func:`layout`, so an offset is derived here once
and written nowhere else; a test compares the compiled table with this one.

This module imports only the standard library: ``setup.py`` loads it by path, before the
package is built (:func:`load_format` loads ``cq/format.py`` the same way).
"""
from __future__ import annotations

import importlib.util
import os
import struct
import sys
import types


def _offsets(st: struct.Struct) -> list[int]:
    """Byte offset of each field of a ``struct.Struct`` (a packed, big-endian layout)."""
    out, fmt = [], st.format
    order, codes = fmt[0], fmt[1:]
    for i in range(len(codes)):
        out.append(struct.calcsize(order + codes[:i]))
    return out


def layout(fmt) -> dict[str, int | str]:
    """The kernels' constants from the format module ``fmt``, by their C names (without ``RMQ_``).

    Raises AssertionError when format's named positions and its structs disagree.
    """
    cq_code = fmt.MSG_TAG_OFFSET_INDEX
    assert _offsets(fmt.CQ_UNIT_STRUCT)[2] == cq_code and fmt.CQ_UNIT_STRUCT.size == fmt.CQ_STORE_UNIT_SIZE
    ext = _offsets(fmt.EXT_UNIT_HEADER_STRUCT)
    assert fmt.EXT_UNIT_HEADER_STRUCT.size == fmt.MIN_EXT_UNIT_SIZE
    rec = _offsets(fmt.RECORD_PREFIX_STRUCT)  # TOTALSIZE .. BORNTIMESTAMP
    assert rec[5] == fmt.RECORD_OFFSETS_POSITION and rec[7] == fmt.RECORD_SYS_FLAG_POSITION
    assert fmt.RECORD_PREFIX_STRUCT.size == fmt.RECORD_BORN_HOST_POSITION
    tail = _offsets(fmt.RECORD_BODY_HEAD_STRUCT)  # RECONSUMETIMES, PREPAREDTRANSACTIONOFFSET, BODYLENGTH
    entry = _offsets(fmt.DLEDGER_ENTRY_HEADER_STRUCT)  # magic, size, index, term, pos, channel, 2 CRCs, bodyLen
    assert fmt.DLEDGER_ENTRY_HEADER_STRUCT.size == fmt.DLEDGER_BODY_OFFSET
    inner = _offsets(fmt.INNER_MESSAGE_HEAD_STRUCT)  # totalSize, magic, body CRC, flag, bodyLen
    port = struct.calcsize(">i")  # a host's port, after its address
    return {
        # ConsumeQueue unit: 20 bytes, the tag code an int64 whose low 32 bits (big-endian) come last
        "CQ_UNIT_SIZE": fmt.CQ_STORE_UNIT_SIZE,
        "CQ_PHYS": _offsets(fmt.CQ_UNIT_STRUCT)[0],
        "CQ_SIZE": _offsets(fmt.CQ_UNIT_STRUCT)[1],
        "CQ_TAG_LOW": cq_code + struct.calcsize(">i"),
        # ext unit head, then its bitmap
        "EXT_SIZE": ext[0],
        "EXT_SIZE_WIDTH": ext[1] - ext[0],
        "EXT_TAGS_CODE": ext[1],
        "EXT_STORE_TIME": ext[2],
        "EXT_BITMAP_SIZE": ext[3],
        "EXT_HEAD": fmt.MIN_EXT_UNIT_SIZE,
        "MAX_ADDR": fmt.MAX_ADDR,
        # CommitLog record: the fixed prefix
        "REC_HEAD": fmt.RECORD_HEAD_STRUCT.size,
        "REC_TOTAL": rec[0],
        "REC_MAGIC": rec[1],
        "REC_BODY_CRC": rec[2],
        "REC_QUEUE_ID": rec[3],
        "REC_FLAG": rec[4],
        "REC_QUEUE_OFFSET": rec[5],
        "REC_PHYS": rec[6],
        "REC_SYS_FLAG": rec[7],
        "REC_BORN_TS": rec[8],
        "REC_BORN_HOST": fmt.RECORD_BORN_HOST_POSITION,
        # the two hosts (address, then port), STORETIMESTAMP between them
        "IPV4_WIDTH": fmt.host_width(0, store=False) - port,
        "IPV6_WIDTH": fmt.host_width(fmt.BORNHOST_V6_FLAG, store=False) - port,
        "PORT_WIDTH": port,
        "STORE_TS_WIDTH": struct.calcsize(">q"),
        # after STOREHOST: RECONSUMETIMES, PREPAREDTRANSACTIONOFFSET, BODYLENGTH
        "REC_TAIL": fmt.RECORD_BODY_HEAD_STRUCT.size,
        "REC_TAIL_PREPARED": tail[1],
        "REC_TAIL_BODY_LEN": tail[2],
        "REC_MIN_SIZE": fmt.RECORD_V1_IPV4_OVERHEAD,
        "MAGIC_V1": fmt.MESSAGE_MAGIC_CODE_V1,
        "MAGIC_V2": fmt.MESSAGE_MAGIC_CODE_V2,
        "MAGIC_BLANK": fmt.BLANK_MAGIC_CODE,
        "BORN_V6_FLAG": fmt.BORNHOST_V6_FLAG,
        "STORE_V6_FLAG": fmt.STOREHOSTADDRESS_V6_FLAG,
        # properties text
        "NAME_VALUE_SEP": ord(fmt.NAME_VALUE_SEPARATOR),
        "PROPERTY_SEP": ord(fmt.PROPERTY_SEPARATOR),
        "PROPERTY_TAGS": fmt.PROPERTY_TAGS,
        "PROPERTY_KEYS": fmt.PROPERTY_KEYS,
        # body compression (SYSFLAG)
        "COMPRESSED_FLAG": fmt.COMPRESSED_FLAG,
        "COMPRESSION_TYPE_MASK": fmt.COMPRESSION_TYPE_MASK,
        "COMPRESSION_TYPE_SHIFT": fmt.COMPRESSION_TYPE_SHIFT,
        "COMPRESSION_ZLIB_LEGACY": fmt.ZLIB_COMPRESSION_TYPES[0],
        "COMPRESSION_ZLIB": fmt.ZLIB_COMPRESSION_TYPES[1],
        # DLedger entry header (docs/formats.md#dledger-entry), then its body: one record
        "DLEDGER_MAGIC": entry[0],
        "DLEDGER_SIZE": entry[1],
        "DLEDGER_INDEX": entry[2],
        "DLEDGER_TERM": entry[3],
        "DLEDGER_POS": entry[4],
        "DLEDGER_BODY_LEN": entry[8],
        "DLEDGER_BODY": fmt.DLEDGER_BODY_OFFSET,
        "DLEDGER_MAGIC_NORMAL": fmt.DLEDGER_MAGIC_NORMAL,
        "DLEDGER_MAGIC_NOOP": fmt.DLEDGER_MAGIC_NOOP,
        "DLEDGER_MAGIC_CONFIG_CHANGE": fmt.DLEDGER_MAGIC_CONFIG_CHANGE,
        "DLEDGER_BLANK": fmt.DLEDGER_BLANK_MAGIC_CODE,
        "DLEDGER_MIN_BLANK": fmt.DLEDGER_MIN_BLANK_LEN,
        # an inner message of a batch record's body (docs/formats.md#inner-batch)
        "INNER_TOTAL": inner[0],
        "INNER_BODY_CRC": inner[2],
        "INNER_FLAG": inner[3],
        "INNER_BODY_LEN": inner[4],
        "INNER_HEAD": fmt.INNER_MESSAGE_HEAD_STRUCT.size,
        "INNER_PROPS_LEN_WIDTH": fmt.INNER_PROPERTIES_LENGTH_STRUCT.size,
    }


def header(values: dict[str, int | str]) -> str:
    """``_layout.h``'s text: one ``#define RMQ_<name>`` per value of :func:`layout`."""
    lines = ["/* Generated by setup.py from cq/format.py (cq/kernels/layout.py): do not edit, not in git. */",
             "#ifndef RMQ_LAYOUT_H", "#define RMQ_LAYOUT_H", "#include <stdint.h>"]
    for name, value in values.items():
        if isinstance(value, str):
            text = '"' + value.encode("unicode_escape").decode("ascii").replace('"', '\\"') + '"'
        elif -(2**31) <= value < 2**31:
            text = f"({value})"
        else:
            text = f"((int64_t){value}LL)" if value > -(2**63) else f"((int64_t)({value + 1}LL - 1))"
        lines.append(f"#define RMQ_{name} {text}")
    lines.append("#endif")
    return "\n".join(lines) + "\n"


def load_format(cq_dir: str):
    """``cq/format.py`` loaded from ``cq_dir`` without importing the ``cq`` package (for setup.py).

    Its relative imports resolve inside a private stand-in package of the same folder; the
    project's top-level modules (``rmqfilter_java``, standard library only) from the folder above.
    """
    name = "_rmqfilter_build_cq"
    pkg = types.ModuleType(name)
    pkg.__path__ = [cq_dir]
    sys.modules[name] = pkg
    root = os.path.dirname(os.path.abspath(cq_dir))
    sys.path.insert(0, root)
    try:
        spec = importlib.util.spec_from_file_location(f"{name}.format", os.path.join(cq_dir, "format.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(root)
        for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
            del sys.modules[key]

"""Format details the golden store does not exercise: spec vectors, IPv6, V2, compression, transactions."""
from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest
from helpers import load_jsonl

import cq
from cq import format as fmt


def test_spec_vector_consume_queue_unit():
    raw = fmt.encode_cq_unit(0, 123, cq.tags_code("TagA"))
    assert raw.hex(" ") == "00 00 00 00 00 00 00 00 00 00 00 7b 00 00 00 00 00 27 a8 07"
    unit = np.frombuffer(raw, dtype=fmt.CQ_UNIT_DTYPE)[0]
    assert (int(unit["commit_log_offset"]), int(unit["size"]), int(unit["tags_code"])) == (0, 123, 2598919)
    assert fmt.CQ_UNIT_DTYPE.itemsize == fmt.CQ_STORE_UNIT_SIZE == 20


def test_spec_vector_ext_unit_and_addresses():
    bitmap = bytes.fromhex("00001008000000001000000000 00".replace(" ", ""))
    raw = fmt.encode_ext_unit(cq.tags_code("TagA"), 1700000000123, bitmap)
    assert raw.hex() == ("0022" "000000000027a807" "0000018bcfe5687b" "000e" "0000100800000000100000000000")
    assert fmt.decode_ext_head(raw, 0) == (34, 2598919, 1700000000123, 14)
    assert cq.decorate(0) == -(2**63)
    assert cq.decorate(34) & (2**64 - 1) == 0x8000000000000022
    assert cq.decorate(50331648) & (2**64 - 1) == 0x8000000003000000
    assert cq.undecorate(cq.decorate(50331648)) == 50331648
    assert cq.MAX_ADDR == -2147483649 and cq.is_ext_addr(cq.MAX_ADDR) and not cq.is_ext_addr(-(2**31))
    assert cq.decorate(cq.MAX_ADDR) == cq.MAX_ADDR and cq.undecorate(5) == 5
    assert fmt.MAX_REAL_OFFSET == 9223372034707292159
    assert fmt.encode_cq_unit(0, 34, cq.decorate(0))[12:].hex() == "8000000000000000"


def test_spec_vector_commit_log_record():
    raw = fmt.encode_record(
        topic="TopicTest", body=b"Hello", properties="TAGS\x01TagA\x02KEYS\x01k1\x02",
        born_timestamp=1700000000000, born_host="127.0.0.1:54321",
        store_timestamp=1700000000123, store_host="192.168.0.1:10911",
    )
    assert len(raw) == 123
    assert raw[:16].hex() == "0000007bdaa320a777d1898200000000"
    assert raw[0x30:0x40].hex() == "7f000001 0000d431 0000018bcfe5687b".replace(" ", "")
    m = cq.readers.commitlog.decode_message(raw, 0, len(raw), verify_crc=True)
    assert (m.topic, m.tags, m.keys, m.body) == ("TopicTest", "TagA", "k1", b"Hello")
    assert m.msg_id == "C0A8000100002A9F0000000000000000"
    assert fmt.encode_blank_record(8).hex() == "00000008cbd43194"


def test_properties_parsing_rules():
    assert fmt.decode_properties("a\x01b\x02c\x01d") == {"a": "b", "c": "d"}  # missing final separator
    assert fmt.decode_properties("\x01x\x02k\x01\x02ab\x02k\x01v\x01w\x02") == {"k": "v\x01w"}
    assert fmt.decode_properties("k\x011\x02k\x012\x02") == {"k": "2"}
    assert fmt.encode_properties({"a": "1", "n": None, "b": "2"}) == "a\x011\x02b\x012\x02"


def test_hashmap_order_reproduces_the_golden_properties_order():
    for row in load_jsonl("golden_store.jsonl"):
        stored = [seg.split("\x01", 1)[0] for seg in row["propertiesString"].split("\x02") if seg]
        assert fmt.hashmap_order(stored) == stored


def _write_log(tmp_path, records, file_size=4096):
    d = tmp_path / "commitlog"
    d.mkdir()
    start, buf, offsets = 0, bytearray(), []
    for make in records:
        rec = make(start + len(buf))
        if len(buf) + len(rec) + 8 > file_size:
            buf += fmt.encode_blank_record(file_size - len(buf))
            (d / fmt.file_name(start)).write_bytes(bytes(buf.ljust(file_size, b"\0")))
            start, buf = start + file_size, bytearray()
            rec = make(start)
        offsets.append(start + len(buf))
        buf += rec
    (d / fmt.file_name(start)).write_bytes(bytes(buf.ljust(file_size, b"\0")))
    return cq.CommitLog(d), offsets


def _rec(**kw):
    def make(offset):
        return fmt.encode_record(commit_log_offset=offset, **kw)
    return make


def test_ipv6_v2_transactions_and_blank_records(tmp_path):
    long_topic = "T" * 200
    log, offsets = _write_log(tmp_path, [
        _rec(topic="v6", body=b"x" * 2500, properties={"TAGS": "a"}, sys_flag=0x30,
             born_host="[2001:db8::1]:1234", store_host="[::1]:10911"),
        _rec(topic=long_topic, body=b"y" * 2500, properties={"KEYS": "k1 k2"}),
        _rec(topic="tx", body=b"z" * 1500, properties={}, sys_flag=fmt.TRANSACTION_PREPARED_TYPE,
             prepared_transaction_offset=77),
        _rec(topic="v4", body=b"", properties={"TAGS": "b"}, sys_flag=0x10, born_host="[fe80::2]:1"),
    ])
    msgs = list(log.messages(verify_crc=True))
    assert [m.commit_log_offset for m in msgs] == offsets
    assert offsets[1] == 4096  # the second record did not fit: a blank record ended file 0
    v6, v2, tx, mixed = msgs
    assert (v6.born_host, v6.store_host) == ("[2001:db8::1]:1234", "[::1]:10911")
    assert len(v6.msg_id) == 56
    assert v2.magic_code == fmt.MESSAGE_MAGIC_CODE_V2 and v2.topic == long_topic and v2.keys == "k1 k2"
    assert tx.transaction_type == fmt.TRANSACTION_PREPARED_TYPE and tx.prepared_transaction_offset == 77
    assert tx.properties == {} and tx.tags is None
    assert mixed.born_host == "[fe80::2]:1" and mixed.store_host == "127.0.0.1:10911" and mixed.body == b""
    assert log.max_offset == offsets[-1] + mixed.store_size
    assert log.read_message(offsets[1]) == v2
    with pytest.raises(cq.StoreFormatError, match="blank"):
        log.read_message(offsets[0] + v6.store_size)


def test_compressed_bodies(tmp_path):
    text = b"compress me " * 500
    log, _ = _write_log(tmp_path, [
        _rec(topic="z", body=zlib.compress(text, 5), properties={}, sys_flag=0x1 | 0x300),
        _rec(topic="z", body=zlib.compress(text), properties={}, sys_flag=0x1),  # legacy type 0 = zlib
        _rec(topic="z", body=b"not zlib", properties={}, sys_flag=0x1 | 0x300),
        _rec(topic="z", body=b"?", properties={}, sys_flag=0x1 | 0x500),
        _rec(topic="z", body=text[:10], properties={}, sys_flag=0x300),  # flag bit off: stored as is
    ], file_size=16384)
    a, b, bad, unknown, plain = log.messages(verify_crc=True)
    assert a.is_compressed and a.uncompressed_body() == text and a.body != text
    assert b.uncompressed_body() == text
    with pytest.raises(cq.StoreFormatError, match="does not decompress"):
        bad.uncompressed_body()
    with pytest.raises(cq.StoreFormatError, match="Unknown compress type value 5"):
        unknown.uncompressed_body()
    assert plain.uncompressed_body() == text[:10]


@pytest.mark.parametrize("ctype, package", [(0x100, "lz4"), (0x200, "zstandard")])
def test_optional_codecs(tmp_path, ctype, package):
    text = b"abc" * 1000
    try:
        mod = __import__(package + (".frame" if package == "lz4" else ""))
    except ImportError:
        mod = None
    if mod is None:
        body = b"\x00" * 10
    elif package == "lz4":
        import lz4.frame
        body = lz4.frame.compress(text)
    else:
        import zstandard
        body = zstandard.ZstdCompressor().compress(text)
    log, _ = _write_log(tmp_path, [_rec(topic="c", body=body, properties={}, sys_flag=0x1 | ctype)])
    (m,) = log.messages()
    if mod is None:
        with pytest.raises(ImportError, match=f"pip install {package}"):
            m.uncompressed_body()
    else:
        assert m.uncompressed_body() == text


def test_placeholders_and_min_offset(tmp_path):
    d = tmp_path / "cq"
    d.mkdir()
    units = [fmt.PLACEHOLDER_UNIT] * 3 + [(100, 50, 7), (150, 60, 8)]
    raw = b"".join(fmt.encode_cq_unit(*u) for u in units)
    (d / fmt.file_name(200)).write_bytes(raw.ljust(200, b"\0"))  # 10 units/file, starts at q=10
    c = cq.ConsumeQueue(d)
    assert (c.min_offset, c.max_offset, len(c)) == (13, 15, 2)
    assert c.read().tolist() == [(100, 50, 7), (150, 60, 8)]
    assert c.read(start=14).tolist() == [(150, 60, 8)]
    assert c.unit(13) == (100, 50, 7)
    with pytest.raises(IndexError):
        c.unit(12)
    assert c.correct_min_offset(120) == 14
    assert cq.ConsumeQueue(d, file_size=190).file_size == 200  # rounded up to whole units


def test_host_roundtrip_and_errors():
    for host in ("10.0.3.7:10911", "[2001:db8::1]:80"):
        assert fmt.decode_host(fmt.encode_host(host)) == host
    with pytest.raises(ValueError):
        fmt.encode_host("nohost")
    with pytest.raises(ValueError, match="SYSFLAG"):
        fmt.encode_record(topic="t", body=b"", properties={}, born_host="[::1]:1")
    assert struct.calcsize(">hqqh") == fmt.MIN_EXT_UNIT_SIZE


def test_record_crc_property(tmp_path):
    props = "TAGS\x01TagA\x02"
    reserved = "__CRC32#\x01" + "0" * 10 + "\x02"
    raw = bytearray(fmt.encode_record(topic="T", body=b"payload", properties=props + reserved))
    crc = zlib.crc32(bytes(raw[:len(raw) - fmt.CRC32_RESERVED_LEN])) & 0x7FFFFFFF
    raw[-11:-1] = fmt.encode_property_crc(crc).encode()
    assert fmt.decode_property_crc(fmt.encode_property_crc(123)) == 123
    assert fmt.encode_property_crc(123) == "3210000000"
    decode = cq.readers.commitlog.decode_message
    m = decode(bytes(raw), 0, len(raw), verify_crc="property")
    assert m.properties["__CRC32#"] == fmt.encode_property_crc(crc) and m.tags == "TagA"
    bad = bytearray(raw)
    bad[20] ^= 1  # queue offset changes: the record CRC no longer matches, the body CRC still does
    decode(bytes(bad), 0, len(bad), verify_crc=True)
    with pytest.raises(cq.StoreFormatError, match="record CRC mismatch"):
        decode(bytes(bad), 0, len(bad), verify_crc="property")
    plain = fmt.encode_record(topic="T", body=b"payload", properties=props)
    with pytest.raises(cq.StoreFormatError, match="no __CRC32# property"):
        decode(plain, 0, len(plain), verify_crc="property")
    with pytest.raises(ValueError, match="verify_crc must be"):
        decode(plain, 0, len(plain), verify_crc="everything")


def test_a_queue_files_data_guessed_from_its_head():
    """A bucket fetch asks for a queue file's data at once after its first head (docs/object-storage.md#costs):
    units spread evenly over the log guess their file's data a quarter past its end; a head without spread,
    or past the log's end, gives no guess."""
    from cq.readers.consumequeue import GUESS_MARGIN, data_bytes_guess

    units = b"".join(fmt.encode_cq_unit(1000 * i, 200, 7) for i in range(1000))  # 1000 units over 1,000,000 bytes
    head = units[:100 * fmt.CQ_STORE_UNIT_SIZE]
    guess = data_bytes_guess(head, 1_000_000)
    assert guess == int(100 * 1_000_000 / 99_000 * GUESS_MARGIN) * fmt.CQ_STORE_UNIT_SIZE
    assert len(units) < guess < 1.3 * len(units)
    assert data_bytes_guess(units[:fmt.CQ_STORE_UNIT_SIZE], 1_000_000) is None  # one unit: no spread
    assert data_bytes_guess(fmt.encode_cq_unit(5, 1, 0) * 2, 1_000_000) is None  # one offset
    assert data_bytes_guess(head, 50_000) is None  # the head runs past the bound given

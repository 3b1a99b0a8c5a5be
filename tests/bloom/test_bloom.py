"""The broker's Bloom filter and BitsArray: conformance with RocketMQ's own output, and every error path."""
from __future__ import annotations

import pickle

import numpy as np
import pytest
from helpers import PUREPYTHON, load_jsonl

import bloom

CASES = load_jsonl("bloom_cases.jsonl")
VALID = [c for c in CASES if not c.get("error")]
WITH_BITS = [c for c in CASES if c.get("bits_u8") is not None]


def test_engine_is_the_requested_one():
    assert bloom.ENGINE == ("python" if PUREPYTHON else "cython")


@pytest.mark.parametrize("case", [c for c in CASES if c.get("error")], ids=lambda c: c["id"])
def test_invalid_parameters_raise_the_brokers_message(case):
    with pytest.raises(ValueError) as err:
        bloom.BloomFilter(f=case["f"], n=case["n"])
    assert str(err.value) == case["error_message"]


def test_k_and_m_agree_for_every_parameter_case():
    bad = [(c["id"], c["f"], c["n"]) for c in VALID
           if (bloom.BloomFilter(c["f"], c["n"]).k, bloom.BloomFilter(c["f"], c["n"]).m) != (c["k"], c["m"])]
    assert bad == []


def test_positions_agree_for_every_key():
    checked = 0
    for c in VALID:
        bf = bloom.BloomFilter(c["f"], c["n"])
        for key, want in zip(c.get("keys", []), c.get("positions", [])):
            assert bf.calc_bit_positions(key) == want, (c["id"], key)
            checked += 1
    assert checked > 3000


@pytest.mark.parametrize("case", WITH_BITS[:40], ids=lambda c: c["id"])
def test_bitmaps_and_probes_agree(case):
    bf = bloom.BloomFilter(case["f"], case["n"])
    bits = bloom.BitsArray(bf.m)
    for key in case["keys"]:
        bf.hash_to(bf.generate(key), bits)
    assert list(bytes(bits)) == case["bits_u8"]
    assert bits.bit_length == case["bits_bitlength"]
    for probe in case["probes"]:
        assert bf.is_hit(bf.generate(probe["key"]), bits) is probe["hit"]
        assert bf.is_hit(probe["key"], bits) is probe["hit"]


def test_batch_forms_agree_with_single_forms_on_every_bitmap_case():
    for case in WITH_BITS:
        bf = bloom.BloomFilter(case["f"], case["n"])
        got = bf.calc_bit_positions_many(case["keys"])
        assert got.dtype == np.int32 and got.shape == (len(case["keys"]), bf.k)
        assert got.tolist() == case["positions"], case["id"]
        bits = bloom.BitsArray(bf.m)
        bf.hash_to_many(case["keys"], bits)
        assert list(bytes(bits)) == case["bits_u8"], case["id"]
        if bf.m % 8 == 0:
            probes = case["probes"]
            rows = np.tile(np.frombuffer(bytes(bits), np.uint8), (1, 1))
            for probe in probes:
                assert bool(bf.is_hit_many(bf.generate(probe["key"]), rows)[0]) is probe["hit"]


def test_arrow_keys_give_the_same_positions_with_nulls_and_slices():
    pa = pytest.importorskip("pyarrow")
    keys = next(c for c in WITH_BITS if c["f"] == 20 and c["n"] == 32)["keys"]
    bf = bloom.BloomFilter()
    want = bf.calc_bit_positions_many(keys)
    with_null = keys[:3] + [None] + keys[3:]
    for arr in (pa.array(keys), pa.array(keys, pa.large_string()), pa.chunked_array([keys[:2], keys[2:]])):
        assert bf.calc_bit_positions_many(arr).tolist() == want.tolist()
    got = bf.calc_bit_positions_many(pa.array(with_null)[2:])
    assert got[1].tolist() == [-1] * bf.k
    assert got[0].tolist() == want[2].tolist() and got[2:].tolist() == want[3:].tolist()
    assert bf.calc_bit_positions_many(with_null)[3].tolist() == [-1] * bf.k


def test_spec_vectors():
    bf = bloom.BloomFilter()
    assert (bf.k, bf.m) == (3, 112)
    assert bf.calc_bit_positions("") == [0, 0, 0]
    assert bf.calc_bit_positions("a") == [94, 99, 7]
    assert bf.calc_bit_positions("中文#主题") == [59, 9, 65]
    assert bloom.murmur3_h1("a") == -8839064797231613815
    bits = bloom.BitsArray(112)
    bf.hash_to("CID_A#TopicTest", bits)
    assert bytes(bits).hex(" ") == "00 00 10 08 00 00 00 00 10 00 00 00 00 00"
    assert bits.to_string() == (
        "000000000000000000000000000000000000000000010000\n"
        "0000000000000000000000000000000000001000000100000000000000000000\n")
    assert str(bf) == "f: 20, n: 32, k: 3, m: 112"
    assert str(bf.generate("a")) == "BloomFilterData{bitPos=[94, 99, 7], bitNum=112}"


def test_murmur_matches_mmh3_on_every_tail_length():
    mmh3 = pytest.importorskip("mmh3")
    rng = np.random.default_rng(7)
    for length in range(70):
        data = rng.integers(0, 256, length, dtype=np.uint8).tobytes()
        assert bloom.murmur3_h1(data) == mmh3.hash64(data, 0, signed=True)[0]


def test_unpaired_surrogates_hash_like_java_question_marks():
    bf = bloom.BloomFilter()
    assert bf.calc_bit_positions("a\ud800b") == bf.calc_bit_positions("a?b")
    # A pair held as two code points is one character to Java.
    assert bf.calc_bit_positions("\ud83d\ude00") == bf.calc_bit_positions("\U0001F600")
    assert bf.calc_bit_positions_many(["a\ud800b"]).tolist() == [bf.calc_bit_positions("a?b")]


def test_data_from_another_filter_is_rejected():
    bf, other = bloom.BloomFilter(20, 32), bloom.BloomFilter(20, 64)
    bits = bloom.BitsArray(bf.m)
    foreign = other.generate("g#t")
    assert not bf.is_valid(foreign) and not bf.is_valid(None)
    assert not bf.is_valid(bloom.BloomFilterData([1, 2], 112))
    for op in (bf.hash_to, bf.is_hit):
        with pytest.raises(ValueError, match="may not belong to this filter"):
            op(foreign, bits)
    with pytest.raises(ValueError, match="may not belong"):
        bf.is_hit_many(foreign, np.zeros((2, 14), np.uint8))


def test_bitmap_of_the_wrong_length_is_rejected():
    bf = bloom.BloomFilter()
    with pytest.raises(ValueError, match=r"Length\(120\) of bits in BitsArray is not equal to 112!"):
        bf.hash_to("g#t", bloom.BitsArray(120))
    with pytest.raises(ValueError, match=r"Length\(64\) of bits"):
        bf.is_hit(bf.generate("g#t"), bloom.BitsArray.from_bytes(bytes(8)))
    with pytest.raises(ValueError, match=r"Length\(128\)"):
        bf.is_hit_many(bf.generate("g#t"), np.zeros((3, 16), np.uint8))
    with pytest.raises(ValueError, match="2-D uint8"):
        bf.is_hit_many(bf.generate("g#t"), np.zeros((3, 14), np.int64))
    with pytest.raises(ValueError, match="Length"):
        bf.hash_to_many(["a"], bloom.BitsArray(8))


def test_positions_outside_the_bitmap_raise_index_error():
    bf = bloom.BloomFilter()
    bad = bloom.BloomFilterData([1, 2, 500], 112)
    with pytest.raises(IndexError, match="500"):
        bf.is_hit(bad, bloom.BitsArray(112))
    with pytest.raises(IndexError, match="500"):
        bf.is_hit_many(bad, np.zeros((1, 14), np.uint8))
    with pytest.raises(IndexError, match="-1"):
        bf.hash_to([0, -1, 3], bloom.BitsArray(112))


def test_is_hit_many_empty_and_dense_rows():
    bf = bloom.BloomFilter()
    data = bf.generate("GID#Topic")
    assert bf.is_hit_many(data, np.zeros((0, 14), np.uint8)).shape == (0,)
    rows = np.zeros((5, 14), np.uint8)
    rows[::2] = 0xFF
    assert bf.is_hit_many(data, rows).tolist() == [True, False, True, False, True]
    big = bloom.BloomFilter(1, 32)  # k = 7: the general loop
    rows = np.zeros((2, big.m // 8), np.uint8)
    rows[1] = 0xFF
    assert big.is_hit_many(big.generate("x"), rows).tolist() == [False, True]


def test_check_false_hit_has_no_length_check():
    bf = bloom.BloomFilter()
    bits = bloom.BitsArray(16)
    bits.set_bit(3)
    assert bf.check_false_hit([3, 3], bits) is True
    assert bf.check_false_hit([3, 4], bits) is False


def test_filters_and_data_pickle_and_compare():
    bf = bloom.BloomFilter(10, 128)
    assert pickle.loads(pickle.dumps(bf)) == bf and (bf.k, bf.m) == (4, 616)
    data = bf.generate("g#t")
    assert pickle.loads(pickle.dumps(data)) == data
    assert bf != bloom.BloomFilter()


@pytest.mark.parametrize("f, n", [(20.5, 32), (20, "32"), (True, 32)])
def test_non_integer_parameters_are_rejected(f, n):
    with pytest.raises((ValueError, TypeError)):
        bloom.BloomFilter(f, n)


def test_calc_bit_positions_many_rejects_other_types():
    with pytest.raises(TypeError, match=r"keys\[1\]"):
        bloom.BloomFilter().calc_bit_positions_many(["a", 5])


class TestBitsArray:
    def test_layout_is_lsb_first(self):
        bits = bloom.BitsArray(24)
        bits.set_bit(20)
        assert bytes(bits) == b"\x00\x00\x10"
        assert bits.get_bit(20) and not bits.get_bit(19)
        bits.set_bit(20, False)
        assert bytes(bits) == bytes(3)

    def test_bounds_follow_the_broker(self):
        bits = bloom.BitsArray(12)
        bits.set_bit(12)  # == bitLength on a 12-bit array: a padding bit, as the broker does
        assert bytes(bits) == b"\x00\x10"
        with pytest.raises(IndexError, match="13 out of range for a BitsArray of 12 bits"):
            bits.set_bit(13)
        with pytest.raises(IndexError, match="-1"):
            bits.get_bit(-1)
        with pytest.raises(IndexError, match="16"):
            bloom.BitsArray(16).get_bit(16)

    def test_create_errors(self):
        with pytest.raises(ValueError, match="Bytes is empty!"):
            bloom.BitsArray.from_bytes(b"")
        with pytest.raises(ValueError, match="Bit is less than 1."):
            bloom.BitsArray(0)
        with pytest.raises(ValueError, match="BitLength is less than"):
            bloom.BitsArray.from_bytes(b"\x00\x00", 9)
        assert bloom.BitsArray.from_bytes(b"\x01", 12).bit_length == 12

    def test_logic_over_the_common_prefix(self):
        a = bloom.BitsArray.from_bytes(b"\x0f\xff")
        b = bloom.BitsArray.from_bytes(b"\xf0")
        a.or_(b)
        assert bytes(a) == b"\xff\xff"
        a.and_(b)
        assert bytes(a) == b"\xf0\xff"
        a.xor(b)
        assert bytes(a) == b"\x00\xff"
        a.or_(0, True)
        a.and_(8, False)
        a.xor(1, True)
        a.not_(2)
        assert bytes(a) == b"\x07\xfe"
        c = a.clone()
        c.set_bit(15, False)
        assert a != c and a.get_bit(15)

    def test_to_string_quirks(self):
        assert bloom.BitsArray.from_bytes(b"\x81").to_string() == "10000001\n"
        assert bloom.BitsArray.from_bytes(b"\x01\x80").to_string() == "1000000000000001\n"
        bits = bloom.BitsArray(12)
        for p in (0, 9, 11):
            bits.set_bit(p)
        assert bits.to_string() == "0101000000001\n"

    def test_bytes_access(self):
        bits = bloom.BitsArray(16)
        bits.set_byte(1, 0x1FF)
        assert bits.get_byte(1) == 0xFF
        with pytest.raises(IndexError, match="byte position 2"):
            bits.get_byte(2)

"""Fuzz target: the Bloom filter and BitsArray over arbitrary keys, bitmaps and positions.

Only ValueError / IndexError (the documented errors) may escape; the Cython
engine must agree with the pure-Python twin on every key.
"""
import sys

import atheris

with atheris.instrument_imports():
    import numpy as np

    import bloom
    from bloom import _bloom, _bloom_py


def test_one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    f = fdp.ConsumeIntInRange(-2, 101)
    n = fdp.ConsumeIntInRange(-2, 5000)
    try:
        bf = bloom.BloomFilter(f, n)
    except ValueError:
        return
    keys = [fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 64)) for _ in range(fdp.ConsumeIntInRange(0, 8))]
    got = bf.calc_bit_positions_many(keys)
    for row, key in enumerate(keys):
        raw = bloom.encode_key(key)
        want = _bloom_py.bit_positions(raw, bf.k, bf.m)
        assert got[row].tolist() == want == _bloom.bit_positions(raw, bf.k, bf.m), key
    raw_bitmap = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 40))
    try:
        bits = bloom.BitsArray.from_bytes(raw_bitmap, fdp.ConsumeIntInRange(-1, 400) or None)
    except ValueError:
        return
    positions = [fdp.ConsumeIntInRange(-3, 400) for _ in range(bf.k)]
    try:
        bf.is_hit(positions, bits)
        bf.hash_to(positions, bits)
    except (ValueError, IndexError):
        pass
    if bits.byte_length * 8 == bf.m:
        rows = np.frombuffer(bytes(bits) * 3, np.uint8).reshape(3, -1)
        try:
            hits = bf.is_hit_many(bloom.BloomFilterData(positions, bf.m), rows)
        except IndexError:
            return
        # Each row is a bitmap as the broker reads it from an ext unit: bit length = bytes x 8.
        row_bits = bloom.BitsArray.from_bytes(bytes(bits))
        assert hits.tolist() == [bf.is_hit(positions, row_bits)] * 3


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()

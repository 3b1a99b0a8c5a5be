"""The broker's stateless Bloom filter, ``BloomFilter`` / ``BloomFilterData``
(docs/filtering.md#bloom-parameters, docs/filtering.md#bloom-operations).

The broker builds one filter with f = ``maxErrorRateOfBloomFilter`` (20 %) and
n = ``expectConsumerNumUseFilter`` (32), giving k = 3 hash functions over
m = 112 bits, and hashes each SQL92 group under the key ``"<group>#<topic>"``.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Union

import numpy as np

from bloom.bits import BitsArray
from rmqfilter_engine import load
from rmqfilter_java import int_cast, utf8_bytes

_kernel, ENGINE = load("bloom", "_bloom")

encode_key = utf8_bytes
"""UTF-8 bytes of a key as Java's ``String.getBytes(UTF_8)`` produces them: the bytes the broker
hashes (:func:`rmqfilter_java.utf8_bytes`, the home of the rule)."""


def murmur3_h1(data: bytes | str) -> int:
    """First 64 bits (signed) of MurmurHash3 x64-128, seed 0: Guava's ``murmur3_128().hash*(...).asLong()``."""
    if isinstance(data, str):
        data = encode_key(data)
    return _kernel.murmur3_h1(bytes(data))


class BloomFilterData:
    """A key's bit positions and the bit count of the filter that made them (``bitPos``, ``bitNum``)."""

    __slots__ = ("bit_num", "bit_pos")

    def __init__(self, bit_pos: Sequence[int], bit_num: int) -> None:
        self.bit_pos = [int(p) for p in bit_pos]
        self.bit_num = int(bit_num)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BloomFilterData):
            return NotImplemented
        return self.bit_num == other.bit_num and self.bit_pos == other.bit_pos

    def __hash__(self) -> int:
        return hash((tuple(self.bit_pos), self.bit_num))

    def __reduce__(self):
        return (BloomFilterData, (self.bit_pos, self.bit_num))

    def __repr__(self) -> str:
        return f"BloomFilterData(bit_pos={self.bit_pos}, bit_num={self.bit_num})"

    def __str__(self) -> str:
        return f"BloomFilterData{{bitPos=[{', '.join(map(str, self.bit_pos))}], bitNum={self.bit_num}}}"


Target = Union[BloomFilterData, str, Sequence[int]]  # noqa: UP007 (a runtime alias on 3.10)


class BloomFilter:
    """The broker's Bloom filter, ``BloomFilter.createByFn(f, n)``.

    Parameters
    ----------
    f : int
        Error rate in percent, 1 <= f < 100 (broker default 20).
    n : int
        Expected number of keys, >= 1 (broker default 32).

    Raises
    ------
    ValueError
        With the broker's message, for f or n out of range.

    Examples
    --------
    >>> bf = BloomFilter()
    >>> bf.k, bf.m
    (3, 112)
    >>> bf.calc_bit_positions("CID_A#TopicTest")
    [20, 68, 27]
    """

    __slots__ = ("f", "k", "m", "n")

    def __init__(self, f: int = 20, n: int = 32) -> None:
        if isinstance(f, bool) or isinstance(n, bool) or int(f) != f or int(n) != n:
            raise ValueError(f"f and n must be whole numbers, got f={f!r}, n={n!r}")
        f, n = int(f), int(n)
        if f < 1 or f >= 100:
            raise ValueError("f must be greater or equal than 1 and less than 100")
        if n < 1:
            raise ValueError("n must be greater than 0")
        e = f / 100.0
        k = int_cast(math.ceil(math.log(e) / math.log(0.5)))
        if k < 1:
            raise ValueError(f"Hash function num is less than 1, maybe you should change the value of error rate or bit num! f={f}, n={n}")
        m0 = int_cast(math.ceil(n * (math.log(1 / e) / math.log(2)) * (math.log(math.e) / math.log(2))))
        self.f, self.n, self.k = f, n, k
        self.m = int_cast(8 * math.ceil(m0 / 8.0))

    # -- identity --------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BloomFilter):
            return NotImplemented
        return (self.f, self.n, self.k, self.m) == (other.f, other.n, other.k, other.m)

    def __hash__(self) -> int:
        return hash((self.f, self.n, self.k, self.m))

    def __reduce__(self):
        return (BloomFilter, (self.f, self.n))

    def __repr__(self) -> str:
        return f"BloomFilter(f={self.f}, n={self.n})  # k={self.k}, m={self.m}"

    def __str__(self) -> str:
        return f"f: {self.f}, n: {self.n}, k: {self.k}, m: {self.m}"

    # -- single keys -------------------------------------------------------
    def calc_bit_positions(self, key: str) -> list[int]:
        """The k bit positions of ``key`` (in order i = 1..k; they may repeat)."""
        return _kernel.bit_positions(encode_key(key), self.k, self.m)

    def generate(self, key: str) -> BloomFilterData:
        """``BloomFilterData(calc_bit_positions(key), m)``."""
        return BloomFilterData(self.calc_bit_positions(key), self.m)

    def is_valid(self, data: BloomFilterData | None) -> bool:
        """True iff ``data`` belongs to this filter: bit_num == m and k positions (not range-checked)."""
        return (data is not None and data.bit_num == self.m
                and data.bit_pos is not None and len(data.bit_pos) == self.k)

    def _positions(self, target: Target) -> list[int]:
        if isinstance(target, BloomFilterData):
            if not self.is_valid(target):
                raise ValueError(f"Bloom filter data may not belong to this filter! {target}, {self}")
            return target.bit_pos
        if isinstance(target, str):
            return self.calc_bit_positions(target)
        return [int(p) for p in target]

    def _check_length(self, bits: BitsArray) -> None:
        if bits.bit_length != self.m:
            raise ValueError(f"Length({bits.bit_length}) of bits in BitsArray is not equal to {self.m}!")

    def hash_to(self, target: Target, bits: BitsArray) -> None:
        """Set the bits of ``target`` (BloomFilterData, key or positions) in ``bits``."""
        positions = self._positions(target)
        self._check_length(bits)
        for p in positions:
            bits.set_bit(p)

    def is_hit(self, target: Target, bits: BitsArray) -> bool:
        """True iff every bit of ``target`` (BloomFilterData, key or positions) is set in ``bits``."""
        positions = self._positions(target)
        self._check_length(bits)
        # No early exit: like the broker, every position is bounds-checked.
        return all([bits.get_bit(p) for p in positions])  # noqa: C419 (no short-circuit, as the broker)

    def check_false_hit(self, positions: Sequence[int], bits: BitsArray) -> bool:
        """True iff every position is already set (no length check)."""
        return all([bits.get_bit(p) for p in positions])  # noqa: C419 (no short-circuit, as the broker)

    # -- batches: one crossing into the engine per call ----------------------
    def calc_bit_positions_many(self, keys: Any) -> np.ndarray:
        """Positions of many keys -> int32 array (N, k).

        Parameters
        ----------
        keys : sequence of str (or None), or a pyarrow string / large_string array
            A None (null) key gives a row of -1.
        """
        buffers = _arrow_string_buffers(keys)
        if buffers is not None:
            data, offsets, valid = buffers
            return _kernel.bit_positions_buffers(data, offsets, valid, self.k, self.m)
        if not isinstance(keys, (list, tuple)):
            keys = list(keys)
        try:
            return _kernel.bit_positions_many(keys, self.k, self.m)
        except UnicodeEncodeError:
            return _kernel.bit_positions_many(
                [encode_key(key) if isinstance(key, str) else key for key in keys], self.k, self.m)

    def is_hit_many(self, target: Target, bitmaps: np.ndarray) -> np.ndarray:
        """``is_hit(target, row)`` for every row of a uint8 array (N, m // 8) -> bool array (N,).

        Raises ValueError (the broker's message) when a row's bit length (bytes x 8)
        is not m, and IndexError when a position falls outside the row.
        """
        positions = self._positions(target)
        bitmaps = np.asarray(bitmaps)
        if bitmaps.dtype != np.uint8 or bitmaps.ndim != 2:
            raise ValueError(f"bitmaps: expected a 2-D uint8 array (N, {self.m // 8}), "
                             f"got {bitmaps.ndim}-D {bitmaps.dtype}")
        if bitmaps.shape[1] * 8 != self.m:
            raise ValueError(f"Length({bitmaps.shape[1] * 8}) of bits in BitsArray is not equal to {self.m}!")
        for p in positions:
            if p < 0 or p >= self.m:
                raise IndexError(f"bit position {p} out of range for a BitsArray of {self.m} bits")
        masks: dict[int, int] = {}
        for p in positions:
            masks[p >> 3] = masks.get(p >> 3, 0) | (1 << (p & 7))
        byte_idx = np.fromiter(masks.keys(), dtype=np.intp, count=len(masks))
        mask = np.fromiter(masks.values(), dtype=np.uint8, count=len(masks))
        return _kernel.is_hit_many(np.ascontiguousarray(bitmaps), byte_idx, mask)

    def hash_to_many(self, keys: Any, bits: BitsArray) -> None:
        """Set the bits of every key (nulls skipped) in one ``BitsArray`` of m bits."""
        self._check_length(bits)
        positions = self.calc_bit_positions_many(keys)
        buf = np.frombuffer(bits.writable_view(), dtype=np.uint8)
        _kernel.set_positions(buf, np.ascontiguousarray(positions, dtype=np.int32))


def _arrow_string_buffers(keys: Any):
    """(data uint8, offsets int32|int64, validity bool|None) of a pyarrow string array, else None."""
    module = type(keys).__module__
    if not module.startswith("pyarrow"):
        return None
    import pyarrow as pa  # lazy: pyarrow is optional (the spark extra); only Arrow input needs it

    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if pa.types.is_string(keys.type) or pa.types.is_binary(keys.type):
        off_type = np.int32
    elif pa.types.is_large_string(keys.type) or pa.types.is_large_binary(keys.type):
        off_type = np.int64
    else:
        keys = keys.cast(pa.large_string())
        off_type = np.int64
    _, offsets_buf, data_buf = keys.buffers()[:3]
    n = len(keys)
    offsets = np.frombuffer(offsets_buf, dtype=off_type, count=n + 1,
                            offset=keys.offset * np.dtype(off_type).itemsize).astype(np.int64, copy=False)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    valid = None
    if keys.null_count:
        valid = keys.is_valid().to_numpy(zero_copy_only=False)
    return data, offsets, valid

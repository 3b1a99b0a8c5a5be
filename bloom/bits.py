"""``BitsArray``: the broker's bit set, with its byte layout and bounds rules (docs/filtering.md#bitsarray).

Bit *i* lives in byte ``i // 8`` under mask ``1 << (i % 8)`` (LSB first, byte 0
first), so ``bytes(bits)`` is exactly what the broker stores in a
ConsumeQueueExt unit.
"""
from __future__ import annotations

from collections.abc import Iterable


class BitsArray:
    """A fixed-length bit array laid out as the broker's ``BitsArray``.

    Parameters
    ----------
    bit_length : int
        Number of bits; ``ceil(bit_length / 8)`` zero bytes are allocated.

    Examples
    --------
    >>> bits = BitsArray(112)
    >>> bits.set_bit(20)
    >>> bytes(bits)[2]
    16
    """

    __slots__ = ("_bit_length", "_bytes")

    def __init__(self, bit_length: int) -> None:
        bit_length = int(bit_length)
        if bit_length < 1:
            raise ValueError(f"Bit is less than 1. (bit_length={bit_length})")
        self._bit_length = bit_length
        self._bytes = bytearray((bit_length + 7) // 8)

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview | Iterable[int],
                   bit_length: int | None = None) -> BitsArray:
        """A copy of ``data``; ``bit_length`` defaults to ``len(data) * 8`` (the broker's ``create``)."""
        raw = bytearray(data)
        if not raw:
            raise ValueError("Bytes is empty!")
        if bit_length is None:
            bit_length = len(raw) * 8
        elif bit_length < 1:
            raise ValueError("Bit is less than 1.")
        elif bit_length < len(raw) * 8:
            raise ValueError("BitLength is less than bytes.length() * 8")
        bits = cls.__new__(cls)
        bits._bytes = raw
        bits._bit_length = int(bit_length)
        return bits

    # -- sizes -------------------------------------------------------------
    @property
    def bit_length(self) -> int:
        return self._bit_length

    @property
    def byte_length(self) -> int:
        return len(self._bytes)

    def __len__(self) -> int:
        return self._bit_length

    def __bytes__(self) -> bytes:
        return bytes(self._bytes)

    def __buffer__(self, flags: int) -> memoryview:
        return memoryview(self._bytes)

    def writable_view(self) -> memoryview:
        """A writable view of the bytes themselves (not a copy): what the Bloom kernels set bits in."""
        return memoryview(self._bytes)

    # -- single bits ---------------------------------------------------------
    def _check_bit(self, pos: int) -> int:
        pos = int(pos)
        # The broker rejects pos > bitLength (not >=): pos == bitLength reaches a
        # padding bit when bitLength is not a multiple of 8, else falls off the array.
        if pos < 0 or pos > self._bit_length or pos >> 3 >= len(self._bytes):
            raise IndexError(f"bit position {pos} out of range for a BitsArray of {self._bit_length} bits")
        return pos

    def get_bit(self, pos: int) -> bool:
        pos = self._check_bit(pos)
        return bool(self._bytes[pos >> 3] & (1 << (pos & 7)))

    def set_bit(self, pos: int, value: bool = True) -> None:
        pos = self._check_bit(pos)
        if value:
            self._bytes[pos >> 3] |= 1 << (pos & 7)
        else:
            self._bytes[pos >> 3] &= ~(1 << (pos & 7)) & 0xFF

    def get_byte(self, index: int) -> int:
        return self._bytes[self._check_byte(index)]

    def set_byte(self, index: int, value: int) -> None:
        self._bytes[self._check_byte(index)] = value & 0xFF

    def _check_byte(self, index: int) -> int:
        index = int(index)
        if index < 0 or index >= len(self._bytes):
            raise IndexError(f"byte position {index} out of range for a BitsArray of {len(self._bytes)} bytes")
        return index

    # -- logic: with another BitsArray (byte-wise, over the common prefix) or on one bit
    def _combine(self, other: BitsArray, op) -> None:
        for i in range(min(len(self._bytes), len(other._bytes))):
            self._bytes[i] = op(self._bytes[i], other._bytes[i]) & 0xFF

    def and_(self, other: BitsArray | int, value: bool | None = None) -> None:
        """``and_(other)`` in place over the common bytes, or ``and_(pos, value)``: clear bit if not value."""
        if isinstance(other, BitsArray):
            self._combine(other, int.__and__)
        elif not value:
            self.set_bit(other, False)
        else:
            self._check_bit(other)

    def or_(self, other: BitsArray | int, value: bool | None = None) -> None:
        """``or_(other)`` in place over the common bytes, or ``or_(pos, value)``: set bit if value."""
        if isinstance(other, BitsArray):
            self._combine(other, int.__or__)
        elif value:
            self.set_bit(other, True)
        else:
            self._check_bit(other)

    def xor(self, other: BitsArray | int, value: bool | None = None) -> None:
        """``xor(other)`` in place over the common bytes, or ``xor(pos, value)``: bit ^= value."""
        if isinstance(other, BitsArray):
            self._combine(other, int.__xor__)
        else:
            self.set_bit(other, self.get_bit(other) ^ bool(value))

    def not_(self, pos: int) -> None:
        """Flip one bit."""
        self.set_bit(pos, not self.get_bit(pos))

    def clone(self) -> BitsArray:
        return BitsArray.from_bytes(self._bytes, self._bit_length)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BitsArray):
            return NotImplemented
        return self._bit_length == other._bit_length and self._bytes == other._bytes

    __hash__ = None  # mutable

    def to_string(self) -> str:
        """The broker's ``toString()``: bytes last to first, MSB to LSB, a newline after bytes 8k."""
        out = []
        rest = self._bit_length % 8
        for i in range(len(self._bytes) - 1, -1, -1):
            width = rest + 1 if (i == len(self._bytes) - 1 and rest) else 8
            out.append(format(self._bytes[i], "08b")[8 - width :])
            if i % 8 == 0:
                out.append("\n")
        return "".join(out)

    def __repr__(self) -> str:
        return f"BitsArray(bit_length={self._bit_length}, bytes={bytes(self._bytes).hex()})"

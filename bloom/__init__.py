"""The broker's Bloom filter, BitsArray and MurmurHash3, exact to RocketMQ (docs/filtering.md#bloom).

>>> import bloom
>>> bf = bloom.BloomFilter(f=20, n=32)
>>> bits = bloom.BitsArray(bf.m)
>>> bf.hash_to(bf.generate("GID_A#TopicTest"), bits)
>>> bf.is_hit(bf.generate("GID_A#TopicTest"), bits)
True
"""
from bloom.bits import BitsArray
from bloom.bloom_filter import ENGINE, BloomFilter, BloomFilterData, encode_key, murmur3_h1

__all__ = ["ENGINE", "BitsArray", "BloomFilter", "BloomFilterData", "encode_key", "murmur3_h1"]

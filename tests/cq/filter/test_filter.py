"""The broker's filter rules, one by one.

The rules: docs/filtering.md#tag-match, docs/filtering.md#client-recheck,
docs/filtering.md#expression-filter and docs/filtering.md#retry-filter.
"""
from __future__ import annotations

import warnings

import pytest

import bloom
import cq
from cq.filter.layers import RetryPropertiesError
from cq.filter.subscription import FilterRegistry
from cq.readers.config import ConfigWarning
from selector.errors import SelectorEvaluationError

A = cq.tags_code("TagA")


class FakeSelector:
    """Stands in for a compiled selector: returns a fixed result per property 'r'."""

    def __init__(self):
        self.seen = []

    def evaluate(self, props):
        self.seen.append(props)
        r = props.get("r")
        if r == "boom":
            raise SelectorEvaluationError("evaluation throws")
        return {"t": True, "f": False, "n": None, "s": "true"}.get(r)


def test_tag_filter_layer1_rules():
    f = cq.TagFilter("TagA || TagB")
    assert f.is_matched_by_consume_queue(A)
    assert f.is_matched_by_consume_queue(A + (5 << 32))  # only the low 32 bits are compared
    assert f.is_matched_by_consume_queue(None)  # unresolved ext address: match
    assert not f.is_matched_by_consume_queue(0)
    assert not f.is_matched_by_consume_queue(cq.tags_code("TagC"))
    assert cq.TagFilter("*").is_matched_by_consume_queue(12345)
    assert cq.TagFilter(None).is_matched_by_consume_queue(12345)
    assert cq.TagFilter("TagA", class_filter_mode=True).is_matched_by_consume_queue(7)
    assert not cq.TagFilter(" * ").is_matched_by_consume_queue(12345)  # not SUB_ALL
    assert cq.TagFilter(" * ").is_matched_by_consume_queue(42)
    assert not cq.TagFilter("   ").is_matched_by_consume_queue(0)
    assert f.is_matched_by_commit_log({}) and f.is_matched_by_commit_log(None)


def test_tag_filter_client_recheck():
    f = cq.TagFilter("Aa")
    assert f.is_matched_by_consume_queue(cq.tags_code("BB"))  # hash collision passes the broker
    assert not f.is_matched_by_client("BB")  # ... and the client drops it
    assert not f.is_matched_by_client(None)
    assert f.is_matched_by_client("Aa")
    assert cq.TagFilter("*").is_matched_by_client(None)
    assert cq.TagFilter("   ").is_matched_by_client(None)  # empty tags set: no re-check


def _ext(bitmap, store_time=100):
    return cq.CqExtUnit(20 + len(bitmap or b""), 0, store_time, len(bitmap or b""), bitmap)


def _sql(bf=None, **kw):
    return cq.SqlFilter("G", "T", "r = 1", bf, compiled=FakeSelector(), **kw)


def test_sql_layer1_rules():
    bf = bloom.BloomFilter()
    f = _sql(bf, born_time=50)
    pos = f.bit_positions
    assert pos == bf.calc_bit_positions("G#T") and f.uses_bitmap()
    bits = bloom.BitsArray(bf.m)
    for p in pos:
        bits.set_bit(p)
    hit, empty = bytes(bits), bytes(bf.m // 8)
    assert f.is_matched_by_consume_queue(None, _ext(hit))
    assert not f.is_matched_by_consume_queue(None, _ext(empty))
    assert f.is_matched_by_consume_queue(None, None)  # no ext unit
    assert f.is_matched_by_consume_queue(None, _ext(empty, store_time=50))  # not in live: strict >
    assert f.is_matched_by_consume_queue(None, _ext(None))  # no bitmap
    assert f.is_matched_by_consume_queue(None, _ext(empty + b"\0"))  # length * 8 != bitNum
    # no bloom data (subscription carried in the pull): always match
    assert _sql(None).is_matched_by_consume_queue(None, _ext(empty))
    # bloom data not valid for the filter (other m): match
    other = bloom.BloomFilter(20, 64).generate("G#T")
    assert _sql(bf, bloom_data=other).is_matched_by_consume_queue(None, _ext(empty))
    # a position past the bitmap throws inside isHit: match
    far = bloom.BloomFilterData([1, 2, 200], bf.m)
    assert _sql(bf, bloom_data=far).is_matched_by_consume_queue(None, _ext(empty))
    assert _sql(bf, class_filter_mode=True).is_matched_by_consume_queue(None, _ext(empty))


def test_sql_layer2_rules():
    f = _sql()
    assert f.is_matched_by_commit_log({"r": "t"})
    for r in ("f", "n", "boom", "s"):  # FALSE, NULL, exception, non-Boolean: no match
        assert not f.is_matched_by_commit_log({"r": r})
    assert not f.is_matched_by_commit_log(None)
    assert f.is_matched_by_commit_log_many([{"r": "t"}, {"r": "n"}]).tolist() == [True, False]
    assert f.is_matched_by_client(None)


def test_retry_filter_uses_the_registered_filter_of_the_real_topic():
    registered = FakeSelector()
    reg = {("RealTopic", "G"): cq.SqlFilter("G", "RealTopic", "x", compiled=registered)}
    own = FakeSelector()
    f = cq.RetrySqlFilter("G", "%RETRY%G", "y", registry=reg, compiled=own)
    assert f.is_matched_by_commit_log({"RETRY_TOPIC": "RealTopic", "r": "t"})
    assert not f.is_matched_by_commit_log({"RETRY_TOPIC": "RealTopic", "r": "n"})
    assert registered.seen and not own.seen
    # no registration for (real topic, group), or no RETRY_TOPIC: match
    assert f.is_matched_by_commit_log({"RETRY_TOPIC": "Other", "r": "f"})
    assert f.is_matched_by_commit_log({"r": "f"})
    with pytest.raises(ValueError, match="without properties"):
        f.is_matched_by_commit_log(None)
    # POP v2 retry topic: the group is the part before '+'
    pop = cq.RetrySqlFilter("G", "%RETRY%G+RealTopic", "y", registry=reg, compiled=FakeSelector())
    assert not pop.is_matched_by_commit_log({"RETRY_TOPIC": "RealTopic", "r": "f"})
    # not a retry topic: the filter's own expression
    plain = cq.RetrySqlFilter("G", "T", "y", registry=reg, compiled=own)
    assert not plain.is_matched_by_commit_log({"RETRY_TOPIC": "RealTopic", "r": "f"})
    assert own.seen


def test_retry_lookup_names_the_deciding_filter():
    registered = cq.SqlFilter("G", "RealTopic", "x", compiled=FakeSelector())
    f = cq.RetrySqlFilter("G", "%RETRY%G", "y", registry={("RealTopic", "G"): registered}, compiled=FakeSelector())
    hit = f.lookup({"RETRY_TOPIC": "RealTopic", "r": "f"})
    assert (hit.reason, hit.retry_topic, hit.group, hit.key, hit.filter) == (
        "registered", "RealTopic", "G", ("RealTopic", "G"), registered)
    miss = f.lookup({"RETRY_TOPIC": "Other"})
    assert (miss.reason, miss.key, miss.filter) == ("not_registered", ("Other", "G"), None)
    assert (f.lookup({}).reason, f.lookup({}).key) == ("no_retry_topic", None)
    with pytest.raises(RetryPropertiesError, match="without properties"):
        f.lookup(None)
    plain = cq.RetrySqlFilter("G", "T", "y", registry={}, compiled=FakeSelector())
    assert (plain.lookup(None).reason, plain.lookup(None).filter) == ("not_retry_topic", plain)
    assert cq.RetrySqlFilter("G", "%RETRY%G", "y", registry={}, class_filter_mode=True,
                             compiled=FakeSelector()).lookup(None).reason == "class_filter_mode"


def test_retry_filter_from_a_registered_filter_keeps_its_layer1():
    own = cq.SqlFilter("G", "%RETRY%G", "a > 1", bloom.BloomFilter(), born_time=7)
    retry = cq.RetrySqlFilter.from_filter(own, registry={})
    assert (retry.sql, retry.born_time, retry.bit_positions, retry.compiled) == (
        own.sql, 7, own.bit_positions, own.compiled)
    assert retry.is_matched_by_commit_log({"RETRY_TOPIC": "T", "a": "0"})  # nothing registered for (T, G)


def test_filter_registry_builds_the_registered_filters_on_lookup():
    data = bloom.BloomFilter().generate("G#T")
    good = cq.RegisteredFilter("G", "T", "a > 1", "SQL92", 5, 0, data, 5, True)
    broken = cq.RegisteredFilter("G", "U", "a >", "SQL92", 5, 0, data, 5, True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the broken registration is not compiled until it is looked up
        registry = FilterRegistry([good, broken])
        assert len(registry) == 2 and ("T", "G") in registry and ("V", "G") not in registry
        assert registry.registration("T", "G") is good and registry.registration("V", "G") is None
        assert registry[("T", "G")] is registry[("T", "G")] and registry[("T", "G")].sql == "a > 1"
        assert registry.get(("V", "G")) is None
    with pytest.warns(ConfigWarning, match="'G' on topic 'U'.*does not compile"):
        uncompiled = registry[("U", "G")]  # warns when looked up, not before
    # no compiled expression: the broker lets the retry through
    retry = cq.RetrySqlFilter("G", "%RETRY%G", "a > 1", registry=registry)
    assert retry.is_matched_by_commit_log({"RETRY_TOPIC": "U", "a": "0"}) and uncompiled.is_matched_by_commit_log({})
    assert not retry.is_matched_by_commit_log({"RETRY_TOPIC": "T", "a": "0"})

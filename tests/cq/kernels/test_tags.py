"""Tag hash codes and tag-subscription parsing agree with the broker.

The rules: docs/filtering.md#tags-code and docs/filtering.md#tag-subscription.
"""
from __future__ import annotations

import numpy as np
import pytest
from helpers import PUREPYTHON, load_jsonl

import cq
from cq import format as fmt

CASES = load_jsonl("tagcodes.jsonl")


def test_engine_is_the_one_requested():
    assert cq.ENGINE == ("python" if PUREPYTHON else "cython")


def test_every_tagcodes_line_agrees():
    bad = [c["id"] for c in CASES if cq.tags_code(c["s"]) != c["hashcode"]]
    assert not bad, f"{len(bad)} of {len(CASES)} disagree: {bad[:10]}"


def test_lone_surrogates_are_covered_and_agree():
    # json joins surrogate pairs, so any surrogate left in a decoded str is a lone one
    lone = [c for c in CASES if any(0xD800 <= ord(ch) <= 0xDFFF for ch in c["s"])]
    assert lone, "fixture should contain lone surrogates"
    assert all(cq.tags_code(c["s"]) == c["hashcode"] for c in lone)


def test_many_matches_single_and_is_int32():
    tags = [c["s"] for c in CASES] + [None]
    out = cq.tags_code_many(tags)
    assert out.dtype == np.int32 and out.shape == (len(tags),)
    assert out.tolist() == [c["hashcode"] for c in CASES] + [0]


def test_many_accepts_arrow_strings_with_nulls_and_slices():
    pa = pytest.importorskip("pyarrow")
    # Arrow strings must be valid UTF-8: lone surrogates cannot be represented.
    good = [c for c in CASES if not any(0xD800 <= ord(ch) <= 0xDFFF for ch in c["s"])]
    tags = [c["s"] for c in good] + [None]
    expected = [c["hashcode"] for c in good] + [0]
    for typ in (pa.string(), pa.large_string()):
        arr = pa.array(tags, type=typ)
        assert cq.tags_code_many(arr).tolist() == expected
        assert cq.tags_code_many(arr.slice(3, 20)).tolist() == expected[3:23]
        assert cq.tags_code_many(pa.chunked_array([arr[:5], arr[5:]])).tolist() == expected


def test_spec_vectors():
    assert cq.tags_code("TagA") == 2598919
    assert cq.tags_code("😀") == 1772899
    assert cq.tags_code("TagA || TagB") == 1359775119
    assert cq.tags_code("Aa") == cq.tags_code("BB") == 2112
    assert cq.tags_code(None) == 0 and cq.tags_code("") == 0
    assert not fmt.is_ext_addr(cq.tags_code("polygenelubricants"))


def test_bad_types_are_refused():
    with pytest.raises(TypeError):
        cq.tags_code(b"TagA")
    with pytest.raises(TypeError):
        cq.tags_code_many(["a", 3])
    with pytest.raises(TypeError):
        cq.tags_code_many("TagA")


A, B = 2598919, 2598920


@pytest.mark.parametrize(
    "sub, sub_string, tags, codes",
    [
        (None, "*", set(), set()),
        ("", "*", set(), set()),
        ("*", "*", set(), set()),
        ("TagA || TagB", "TagA || TagB", {"TagA", "TagB"}, {A, B}),
        (" * ", " * ", {"*"}, {42}),
        ("   ", "   ", set(), set()),
        ("TagA||", "TagA||", {"TagA"}, {A}),
        ("||TagA", "||TagA", {"TagA"}, {A}),
        ("TagA|||TagB", "TagA|||TagB", {"TagA", "|TagB"}, {A, cq.tags_code("|TagB")}),
        ("a|b", "a|b", {"a|b"}, {cq.tags_code("a|b")}),
        ("\tTagA\x01||\u00a0TagB", "\tTagA\x01||\u00a0TagB", {"TagA", "\u00a0TagB"},
         {A, cq.tags_code("\u00a0TagB")}),
    ],
)
def test_subscription_table(sub, sub_string, tags, codes):
    s = cq.parse_tag_subscription(sub)
    assert s.sub_string == sub_string
    assert s.tags_set == tags
    assert s.code_set == codes
    assert s.expression_type == "TAG"
    assert s.is_sub_all == (sub_string == "*")


@pytest.mark.parametrize("sub", ["||", "||||", "|| ||"[:2]])
def test_subscription_split_error(sub):
    with pytest.raises(cq.TagSubscriptionError, match="subString split error"):
        cq.parse_tag_subscription(sub)


def test_subscription_of_only_blank_pieces_is_not_an_error():
    # "|| ||" splits into ["", " "]: pieces remain, all trim to empty
    s = cq.parse_tag_subscription("|| ||")
    assert s.tags_set == frozenset() and s.sub_string == "|| ||"


def test_build_for_other_expression_types():
    from cq.tags import build_subscription

    s = build_subscription("T", "a > 1", "SQL92")
    assert s.expression_type == "SQL92" and not s.tags_set
    with pytest.raises(ValueError, match="Expression can't be null! SQL92"):
        build_subscription("T", "", "SQL92")


def test_many_accepts_any_iterable_and_pandas():
    tags = ["TagA", None, "", "😀"]
    want = [2598919, 0, 0, 1772899]
    assert cq.tags_code_many(iter(tags)).tolist() == want
    assert cq.tags_code_many(np.array(tags, dtype=object)).tolist() == want
    pd = pytest.importorskip("pandas")
    assert cq.tags_code_many(pd.Series(tags)).tolist() == want


def test_utf8_buffers_match_single_without_pyarrow():
    """tags_code_utf8 reads a decoded tags column (Arrow layout in numpy): what rebuild_bitmaps hashes."""
    from cq.tags import tags_code_utf8

    good = [c for c in CASES if not any(0xD800 <= ord(ch) <= 0xDFFF for ch in c["s"])]
    tags = [c["s"] for c in good] + [None, ""]
    raw = [(t or "").encode() for t in tags]
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in raw])]).astype(np.int32)
    data = np.frombuffer(b"".join(raw), dtype=np.uint8)
    valid = np.array([t is not None for t in tags], dtype=np.uint8)
    want = [c["hashcode"] for c in good] + [0, 0]
    assert tags_code_utf8(offsets, data, valid).tolist() == want
    assert tags_code_utf8(offsets, data).tolist() == want
    assert tags_code_utf8(offsets[3:], data).tolist() == want[3:]  # offsets need not start at 0

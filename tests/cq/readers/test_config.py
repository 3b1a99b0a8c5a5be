"""The broker's config files: fastjson's dialect, the ``.bak`` fallback, and what the Store reads from them."""
from __future__ import annotations

import json
import os
import time
import warnings

import pytest

import bloom
import cq
from cq.filter.subscription import registration_filter
from cq.readers.config import (
    ConfigFormatError,
    ConfigWarning,
    load_config,
    parse_fastjson,
    read_registered_filters,
)
from cq.writer.config_writer import (
    dumps_fastjson,
    write_config_file,
    write_consumer_filters,
    write_consumer_offsets,
    write_subscription_groups,
    write_topic_configs,
)
from cq.writer.writer import StoreWriter

BF = bloom.BloomFilter()

# consumerOffset.json as fastjson writes it, compact and pretty (tabs, a newline before a map's "}")
OFFSETS_COMPACT = ('{"dataVersion":{"counter":3,"stateVersion":0,"timestamp":1700000000000},'
                   '"offsetTable":{"TopicTest@GID_A":{0:5280,1:5312,2:-1},"%RETRY%GID_A@GID_A":{0:0}}}')
OFFSETS_PRETTY = """{
\t"dataVersion":{
\t\t"counter":3,
\t\t"stateVersion":0,
\t\t"timestamp":1700000000000
\t},
\t"offsetTable":{
\t\t"TopicTest@GID_A":{0:5280,1:5312,2:-1
\t\t},
\t\t"%RETRY%GID_A@GID_A":{0:0
\t\t}
\t}
}"""


def filter_entry(group: str, topic: str, expression: str, *, born: int = 1_700_000_000_000, dead: int = 0,
                 bit_pos=None, extra: dict | None = None) -> dict:
    data = BF.generate(f"{group}#{topic}")
    entry = {"consumerGroup": group, "topic": topic, "expression": expression, "expressionType": "SQL92",
             "bornTime": born, "deadTime": dead,
             "bloomFilterData": {"bitPos": list(data.bit_pos) if bit_pos is None else bit_pos,
                                 "bitNum": data.bit_num},
             "clientVersion": born}
    entry.update(extra or {})
    return entry


def filter_document(*entries: dict) -> dict:
    by_topic: dict = {}
    for e in entries:
        by_topic.setdefault(e["topic"], {"topic": e["topic"], "groupFilterData": {}})["groupFilterData"][
            e["consumerGroup"]] = e
    return {"filterDataByTopic": by_topic}


@pytest.fixture
def store_root(tmp_path):
    """A tiny store with one message, and an empty config/ directory for the test to fill."""
    root = tmp_path / "store"
    with StoreWriter(root, commit_log_file_size=1 << 16) as w:
        w.append("TopicTest", b"x", tags="TagA", properties={"a": "1"})
    (root / "config").mkdir(exist_ok=True)
    return root


def write(path, text: str | bytes) -> None:
    data = text.encode() if isinstance(text, str) else text
    with open(path, "wb") as f:
        f.write(data)


# ------------------------------------------------------------------ the dialect
@pytest.mark.parametrize("text", [OFFSETS_COMPACT, OFFSETS_PRETTY])
def test_bare_integer_keys_pretty_and_compact(text):
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)  # what the Python json module makes of fastjson's text
    parsed = parse_fastjson(text)
    assert parsed["offsetTable"] == {"TopicTest@GID_A": {0: 5280, 1: 5312, 2: -1}, "%RETRY%GID_A@GID_A": {0: 0}}
    assert parsed["dataVersion"]["timestamp"] == 1700000000000


def test_standard_json_reads_as_json_does():
    text = ('{"s":"a\\u00fc\\"\\\\\\/\\n\\ud83d\\ude00\\t","n":-1.5e3,"i":-0,"l":[true,false,null,[],{}],'
            '"big":9223372036854775807,"u":"标签"}')
    assert parse_fastjson(text) == json.loads(text)
    assert parse_fastjson(text.encode()) == json.loads(text)


def test_writer_text_round_trips():
    doc = {"offsetTable": {"T@G": {0: 1, 17: 2 ** 40}}, "s": "grün", "l": [1, 2.5, None]}
    for pretty in (False, True):
        assert parse_fastjson(dumps_fastjson(doc, pretty=pretty)) == doc
    assert dumps_fastjson(doc) == '{"offsetTable":{"T@G":{0:1,17:1099511627776}},"s":"grün","l":[1,2.5,null]}'


@pytest.mark.parametrize("text, line, column, what", [
    ('{"a":1,}', 1, 8, "expected an object key"),          # trailing comma
    ("{a:1}", 1, 2, "expected an object key"),             # bare keys are integers only
    ("{'a':1}", 1, 2, "expected an object key"),           # no single quotes
    ('{"a":NaN}', 1, 6, "expected a JSON value"),
    ('{"a":1} x', 1, 9, "after the JSON value"),
    ('{"a":1 // c\n}', 1, 8, "expected ',' or '}'"),       # no comments
    ('{"a":[1 2]}', 1, 9, "expected ',' or ']'"),
    ('{"a":"x', 1, 6, "unterminated string"),
    ('{\n\t"a":{0:1\n\t},\n\t"b":01\n}', 4, 7, "expected ',' or '}'"),   # no leading zeros
    ('{"a"\n:\n', 3, 1, "expected a JSON value"),
])
def test_malformed_json_names_the_position(text, line, column, what):
    with pytest.raises(ConfigFormatError, match=what) as info:
        parse_fastjson(text, "/x/consumerOffset.json")
    err = info.value
    assert (err.line, err.column) == (line, column)
    assert isinstance(err, cq.StoreFormatError) and isinstance(err, ValueError)
    assert str(err).startswith(f"/x/consumerOffset.json at byte offset {err.offset}: line {line} column {column}")


def test_byte_offset_counts_utf8_bytes():
    text = '{"k":"标签",?}'
    with pytest.raises(ConfigFormatError) as info:
        parse_fastjson(text.encode(), "f.json")
    assert info.value.offset == len('{"k":"标签",'.encode()) and info.value.column == len('{"k":"标签",') + 1


def test_not_utf8_and_empty_are_errors():
    with pytest.raises(ConfigFormatError, match="not UTF-8") as info:
        parse_fastjson(b'{"a":"\xff"}', "f.json")
    assert info.value.offset == 6
    with pytest.raises(ConfigFormatError, match="empty file"):
        parse_fastjson(b"  \n", "f.json")


# ------------------------------------------------------------------ .bak fallback
def test_missing_file_and_bak_is_an_empty_result(store_root):
    store = cq.Store(store_root)
    assert store.registered_filters() == []
    assert store.committed_offsets("GID_A", "TopicTest") == {}
    assert store.subscription_groups() == {} and store.topic_configs() == {}
    assert store.config_file("consumerOffset.json").source is None


@pytest.mark.parametrize("main", [None, b"", b"   ", b'{"offsetTable":{"TopicTest@GID_A":{0:5', b"\x00" * 64])
def test_bak_is_read_when_the_file_is_missing_empty_or_garbled(store_root, main):
    path = store_root / "config" / "consumerOffset.json"
    write(str(path) + ".bak", OFFSETS_PRETTY)
    if main is not None:
        write(path, main)
    store = cq.Store(store_root)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert store.committed_offsets("GID_A", "TopicTest") == {0: 5280, 1: 5312}
        loaded = store.config_file("consumerOffset.json")
    assert loaded.source == str(path) + ".bak"
    if main is None:
        assert caught == []  # a missing file is the broker's ordinary first start
    else:
        assert any(issubclass(w.category, ConfigWarning) and str(path) + ".bak" in str(w.message)
                   for w in caught)


def test_garbled_file_without_usable_bak_raises_naming_the_file(store_root):
    path = store_root / "config" / "consumerOffset.json"
    write(path, '{"offsetTable":{"TopicTest@GID_A":{0:5,\n1 5}}}')
    store = cq.Store(store_root)
    with pytest.raises(ConfigFormatError, match="line 2 column 3") as info:
        store.committed_offsets("GID_A", "TopicTest")
    assert info.value.path == str(path)
    write(str(path) + ".bak", "{{")  # a broken .bak does not hide the file's own error
    with pytest.raises(ConfigFormatError) as info:
        store.committed_offsets("GID_A", "TopicTest")
    assert info.value.path == str(path)


def test_wrong_layout_names_the_field(store_root):
    path = store_root / "config" / "consumerOffset.json"
    write(path, '{"offsetTable":{"TopicTest@GID_A":{0:"5"}}}')
    with pytest.raises(ConfigFormatError, match=r"field offsetTable\.TopicTest@GID_A\.0: expected an integer"):
        cq.Store(store_root).committed_offsets("GID_A", "TopicTest")
    write(path, '{"filterDataByTopic":[]}')
    with pytest.raises(ConfigFormatError, match="expected an object"):
        read_registered_filters(path)


# ------------------------------------------------------------------ what the Store reads
@pytest.mark.parametrize("text", [OFFSETS_COMPACT, OFFSETS_PRETTY])
def test_committed_offsets(store_root, text):
    write(store_root / "config" / "consumerOffset.json", text)
    store = cq.Store(store_root)
    assert store.committed_offsets("GID_A", "TopicTest") == {0: 5280, 1: 5312}   # -1: none committed
    assert store.committed_offsets("GID_A", "%RETRY%GID_A") == {0: 0}
    assert store.committed_offsets("GID_B", "TopicTest") == {}


def test_registered_filters_ignore_unknown_fields_and_report_dead(store_root):
    now = time.time_ns() // 1_000_000
    doc = filter_document(
        filter_entry("GID_A", "TopicTest", "a > 5", extra={"dead": False, "howLongAfterDeath": -1,
                                                             "compiledExpression": None, "someFutureField": [1]}),
        filter_entry("GID_B", "TopicTest", "b = 'x'", born=1_700_000_000_000, dead=1_700_000_500_000,
                     extra={"dead": True}),
        filter_entry("GID_A", "OtherTopic", "c IS NULL"),
    )
    doc["filterDataByTopic"]["TopicTest"]["unknown"] = {"x": 1}
    doc["dataVersion"] = {"counter": 1}
    write(store_root / "config" / "consumerFilter.json", dumps_fastjson(doc, pretty=True))
    store = cq.Store(store_root)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        filters = store.registered_filters()
    assert [(f.group, f.topic, f.expression) for f in filters] == [
        ("GID_A", "TopicTest", "a > 5"), ("GID_B", "TopicTest", "b = 'x'"), ("GID_A", "OtherTopic", "c IS NULL")]
    a, b, other = filters
    assert a.expression_type == "SQL92" and a.born_time == 1_700_000_000_000 and a.client_version == a.born_time
    assert a.bloom_data == BF.generate("GID_A#TopicTest") and a.bloom_matches
    assert not a.is_dead and b.is_dead and b.dead_time == 1_700_000_500_000
    # a broker loading the file marks a live entry dead 30 s before "now"
    assert a.dead_time_on_load(now) == now - 30_000 and b.dead_time_on_load(now) == b.dead_time
    assert [f.group for f in store.registered_filters("TopicTest")] == ["GID_A", "GID_B"]
    assert store.registered_filter("OtherTopic", "GID_A") == other


def test_unknown_group_lists_the_registered_ones(store_root):
    write(store_root / "config" / "consumerFilter.json",
          dumps_fastjson(filter_document(filter_entry("GID_A", "TopicTest", "a > 5"))))
    with pytest.raises(cq.UnknownGroupError, match=r"'GID_NOPE'.*'TopicTest'.*registered groups: GID_A") as info:
        cq.Store(store_root).registered_filter("TopicTest", "GID_NOPE")
    assert info.value.registered == ["GID_A"] and isinstance(info.value, ValueError)


def test_bloom_data_that_does_not_match_warns_naming_the_group(store_root):
    write(store_root / "config" / "consumerFilter.json", dumps_fastjson(filter_document(
        filter_entry("GID_OK", "TopicTest", "a > 5"),
        filter_entry("GID_STALE", "TopicTest", "a > 6", bit_pos=[1, 2, 3]),
    )))
    with pytest.warns(ConfigWarning, match=r"group 'GID_STALE' on topic 'TopicTest' has bloom data") as caught:
        filters = cq.Store(store_root).registered_filters()
    assert len(caught) == 1
    assert [f.bloom_matches for f in filters] == [True, False]
    # a filter made from it keeps the persisted positions, as the broker pulls with them
    assert registration_filter(filters[1]).bit_positions == [1, 2, 3]


def test_a_registration_without_bloom_data_reads_without_a_warning(store_root, recwarn):
    # what a RocketMQ 5.5.1 broker with enableCalcFilterBitMap=false writes
    # (docs/config-and-index.md#no-bloom-data): no bloomFilterData at all
    bare = filter_entry("GID_BARE", "TopicTest", "a > 5")
    del bare["bloomFilterData"]
    write(store_root / "config" / "consumerFilter.json", dumps_fastjson(filter_document(bare)))
    (f,) = cq.Store(store_root).registered_filters()
    assert not [w for w in recwarn if issubclass(w.category, ConfigWarning)]
    assert f.bloom_data is None and not f.bloom_matches
    assert registration_filter(f).bit_positions is None    # layer 1 passes every unit


def test_subscription_groups_and_topic_configs(store_root):
    write_subscription_groups(store_root, {"GID_A": {"consumeEnable": False}, "GID_B": {}})
    write_topic_configs(store_root, {"TopicTest": 8})
    store = cq.Store(store_root)
    groups = store.subscription_groups()
    assert list(groups) == ["GID_A", "GID_B"] and groups["GID_A"]["consumeEnable"] is False
    assert groups["GID_B"]["retryMaxTimes"] == 16
    assert store.topic_configs()["TopicTest"]["readQueueNums"] == 8


# ------------------------------------------------------------------ the writing side
def test_write_config_file_keeps_the_previous_text_as_bak(tmp_path):
    path = tmp_path / "config" / "x.json"
    write_config_file(path, '{"v":1}')
    assert not os.path.exists(str(path) + ".bak")
    write_config_file(path, '{"v":2}')
    assert path.read_text() == '{"v":2}' and (tmp_path / "config" / "x.json.bak").read_text() == '{"v":1}'
    assert not os.path.exists(str(path) + ".tmp")
    assert load_config(path).data == {"v": 2}


def test_a_config_file_read_again_is_its_new_text_and_a_copy_of_its_own(tmp_path):
    """A broker replaces its config files (a new file renamed into place) or rewrites them; every
    read gives the file's text as it is now, and changing what a read returned changes no other read."""
    path = tmp_path / "config" / "x.json"
    write_config_file(path, '{"offsetTable":{"T@G":{0:5}}}')
    first = load_config(path).data
    first["offsetTable"]["T@G"][0] = 99
    assert load_config(path).data == {"offsetTable": {"T@G": {0: 5}}}
    write_config_file(path, '{"offsetTable":{"T@G":{0:6}}}')       # renamed into place
    assert load_config(path).data == {"offsetTable": {"T@G": {0: 6}}}
    with open(path, "w") as f:                                       # rewritten in place, longer
        f.write('{"offsetTable":{"T@G":{0:6,1:7}}}')
    assert load_config(path).data == {"offsetTable": {"T@G": {0: 6, 1: 7}}}


def test_store_writer_persists_its_sql92_groups(tmp_path):
    root = tmp_path / "w"
    before = time.time_ns() // 1_000_000
    with StoreWriter(root, enable_ext=True, commit_log_file_size=1 << 16) as w:
        w.register_group("TopicTest", "GID_NOW", "a > 5")
        w.register_group("TopicTest", "GID_PAST", "b = 'x'", born_time=1_600_000_000_000)
        w.append("TopicTest", b"x", properties={"a": "7"})
    after = time.time_ns() // 1_000_000
    text = (root / "config" / "consumerFilter.json").read_text()
    assert '"dead":false' in text  # fastjson writes the isDead() getter too
    now, past = cq.Store(root).registered_filters("TopicTest")
    assert before <= now.born_time <= after and now.expression == "a > 5" and now.bloom_matches
    assert past.born_time == 1_600_000_000_000 and past.client_version == past.born_time
    assert now.bloom_data == BF.generate("GID_NOW#TopicTest")

    # appending: the registrations are kept; the same expression keeps its bornTime, a new one gets a new bornTime
    with StoreWriter(root, enable_ext=True, commit_log_file_size=1 << 16, append=True) as w:
        w.register_group("TopicTest", "GID_NOW", "a > 5")
        w.register_group("TopicTest", "GID_NEW", "c = 1", born_time=5)
    got = {f.group: f for f in cq.Store(root).registered_filters()}
    assert sorted(got) == ["GID_NEW", "GID_NOW", "GID_PAST"]
    assert got["GID_NOW"].born_time == now.born_time and got["GID_PAST"] == past
    assert os.path.exists(root / "config" / "consumerFilter.json.bak")


def test_write_consumer_offsets_is_fastjson(tmp_path):
    path = write_consumer_offsets(tmp_path, {("T", "G"): {1: 7, 0: 3}, "T2@G": {0: -1}}, timestamp=1)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    assert '"offsetTable":{"T@G":{1:7,0:3},"T2@G":{0:-1}}' in text and '"timestamp":1' in text
    store_dir = tmp_path
    (store_dir / "commitlog").mkdir()
    store = cq.Store(store_dir)
    assert store.committed_offsets("G", "T") == {0: 3, 1: 7} and store.committed_offsets("G", "T2") == {}


@pytest.mark.parametrize("pretty", [False, True])
def test_consumer_filters_round_trip(store_root, pretty):
    filters = [
        cq.RegisteredFilter("GID_A", "TopicTest", "a > 5", "SQL92", 10, 0, BF.generate("GID_A#TopicTest"), 11, True),
        cq.RegisteredFilter("GID_B", "TopicTest", "b IN ('ü')", "SQL92", 10, 20, BF.generate("GID_B#TopicTest"),
                            12, True),
    ]
    write_consumer_filters(store_root, filters, pretty=pretty)
    assert cq.Store(store_root).registered_filters() == filters


@pytest.mark.parametrize("text", [
    OFFSETS_COMPACT, OFFSETS_PRETTY,
    '{"expr":"a IN (\'{1:2}\', \',3:4\')","k":{ 7 :{"x":"\\\\"},"8":[1,{9:0}]},"-1":{-2:-3}}',
    '{"s":"\\u0000 {1:2}","n":{0:1}}',            # the exact reader takes texts with \\u0000
    '{"a":[{},[],{"b":{10:{11:12}}}],"f":1.5e-3,"t":true,"z":null}',
])
def test_fast_path_gives_what_the_exact_reader_gives(text):
    from cq.readers.config import _NOT_PARSED, _parse_fast, _Parser

    fast = _parse_fast(text)
    assert (fast is _NOT_PARSED) == ("\\u0000" in text)   # only texts with that escape need the exact reader
    assert parse_fastjson(text) == _Parser(text, "x").parse()
    got = parse_fastjson(text)
    keys = [k for k in _walk_keys(got)]
    assert all(isinstance(k, int) for k in keys if not isinstance(k, str))
    if '"8"' in text:
        assert "8" in got["k"] and 7 in got["k"] and "-1" in got and -2 in got["-1"]


def _walk_keys(obj):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield k
            yield from _walk_keys(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _walk_keys(v)

"""Custom message filters (the class-filter mode): Store.consume, the CLI and the Spark data source."""
from __future__ import annotations

import struct

import filters_for_tests as ff
import numpy as np
import pytest
from helpers import DATA, patch_file

import cq
import rmqfilter
from cq.filter.custom import BATCH_RECORD_FIELDS, MESSAGE_COLUMNS, message_schema

STORE = DATA / "golden_store"
TOPIC = "GoldenFilterTopic"
SQL = "TAGS = 'TagA' OR color IN ('red', 'grün')"
GROUP = "GID_SQL_B"


@pytest.fixture(scope="module")
def store():
    s = cq.Store(STORE)
    yield s
    s.close()


def _keys(messages):
    return [(m.queue_id, m.queue_offset) for m in messages]


def test_callable_narrows_what_both_layers_deliver(store):
    plain = list(store.consume(TOPIC, GROUP, sql=SQL))
    result = store.consume(TOPIC, GROUP, sql=SQL, filter=ff.queue0)
    got = list(result)
    assert _keys(got) == [(m.queue_id, m.queue_offset) for m in plain if m.queue_id == 0]
    assert 0 < len(got) < len(plain)
    st = result.stats
    assert st.delivered == len(got) and st.filter_rejected == len(plain) - len(got) and st.filter_skipped == 0
    # the same through message_filter=, and by name
    for how in ({"message_filter": ff.queue0}, {"message_filter": "filters_for_tests:queue0"}):
        assert _keys(store.consume(TOPIC, GROUP, sql=SQL, **how)) == _keys(got)


def test_batch_form_equals_the_per_message_form_and_sees_the_messages_columns(store):
    per_message = _keys(store.consume(TOPIC, GROUP, sql=SQL, filter=ff.queue0))
    assert _keys(store.consume(TOPIC, GROUP, sql=SQL, filter=ff.queue0_batch)) == per_message
    seen = []

    @cq.batch_filter
    def spy(batch):
        seen.append(batch)
        return np.ones(batch.num_rows, dtype=bool)

    msgs = list(store.consume(TOPIC, GROUP, sql=SQL, filter=spy))
    rows = [r for b in seen for r in b.to_pylist()]
    assert seen[0].schema.names == [name for name, _ in MESSAGE_COLUMNS]
    assert len(rows) == len(msgs)
    for m, r in zip(msgs, rows):
        unit = store.ext(TOPIC, m.queue_id).get(int(store.consume_queue(TOPIC, m.queue_id).unit(m.queue_offset)[2]))
        assert (r["queue_offset"], r["commit_log_offset"], r["tags"], r["keys"], r["body"], dict(r["properties"])) \
            == (m.queue_offset, m.commit_log_offset, m.tags, m.keys, m.body, m.properties)
        assert (r["tags_code"], r["msg_store_time"], r["filter_bitmap"]) == (unit.tags_code, unit.msg_store_time,
                                                                             unit.filter_bitmap)


def _spied(store, topic, group, **how):
    """What a keep-everything filter sees in each form: (batches, messages), and consume's outputs."""
    batches, messages = [], []

    @cq.batch_filter
    def spy_batch(batch):
        batches.append(batch)
        return np.ones(batch.num_rows, dtype=bool)

    def spy_message(m):
        messages.append(m)
        return True

    out_batch = list(store.consume(topic, group, filter=spy_batch, **how))
    out_message = list(store.consume(topic, group, filter=spy_message, **how))
    return batches, messages, out_batch, out_message


def _expected_units(store, topic, m):
    """``(tags_code, msg_store_time, filter_bitmap)`` of the message's ConsumeQueue (and ext) unit."""
    slot = store.consume_queue(topic, m.queue_id).unit(m.queue_offset)[2]
    if slot > cq.MAX_ADDR:
        return slot, None, None
    ext = store.ext(topic, m.queue_id)
    unit = ext.get(slot) if ext is not None else None
    return (None, None, None) if unit is None else (unit.tags_code, unit.msg_store_time, unit.filter_bitmap)


def check_batch_sees_the_messages(store, topic, group, **how) -> int:
    """Every candidate row: the batch filter's row holds what the per-message filter's Message holds, in
    the messages schema; consume delivers the same with either form. Returns the number of candidates."""
    batches, messages, out_batch, out_message = _spied(store, topic, group, **how)
    assert out_batch == out_message == messages
    assert all(b.schema == message_schema() for b in batches)
    assert [(f.name, str(f.type)) for f in batches[0].schema] == list(MESSAGE_COLUMNS)
    rows = [r for b in batches for r in b.to_pylist()]
    assert len(rows) == len(messages) > 0
    for m, r in zip(messages, rows):
        for name in BATCH_RECORD_FIELDS:
            want = list(m.properties.items()) if name == "properties" else getattr(m, name)
            assert r[name] == want, (name, m.queue_id, m.queue_offset)
        assert (r["tags_code"], r["msg_store_time"], r["filter_bitmap"]) == _expected_units(store, topic, m)
    return len(rows)


@pytest.mark.parametrize("topic,group,how", [
    (TOPIC, "G", {"tags": "*"}),
    ("GoldenPlainTopic", "G", {"tags": "*"}),
    (TOPIC, GROUP, {"sql": SQL}),
    (TOPIC, "G", {"tags": "TagA || 标签 || Ωmega"}),
])
def test_the_batch_sees_what_the_message_filter_sees_on_the_golden_store(store, topic, group, how):
    n = check_batch_sees_the_messages(store, topic, group, **how)
    assert n == len(list(store.consume(topic, group, **how)))


def test_the_batch_sees_what_the_message_filter_sees_past_the_client_recheck(golden_copy):
    # unresolvable ext addresses: layer 1 lets them through (no tag code), the client re-check
    # drops those whose tag is not subscribed, and the batch shows the rest with a NULL tags_code
    path = golden_copy / "consumequeue" / TOPIC / "0" / cq.format.file_name(0)
    for i in range(0, 40, 3):
        patch_file(path, 20 * i + 12, struct.pack(">q", cq.decorate(10**9 + i)))
    s = cq.Store(golden_copy)
    try:
        result = s.consume(TOPIC, "G", tags="TagA || 标签")
        plain = list(result)
        assert result.stats.ext_missing and result.stats.client_filtered
        assert check_batch_sees_the_messages(s, TOPIC, "G", tags="TagA || 标签") == len(plain)
    finally:
        s.close()


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("custom_filters") / "store"
    cq.generate_sample_store(root, messages=3000, seed=11, commit_log_file_size=256 * 1024)
    s = cq.Store(root)
    yield s
    s.close()


@pytest.mark.parametrize("topic,group,how", [
    ("SampleTopic", "G", {"tags": "*"}),
    ("SampleTopic", "GID_TAGA_OR_EU", {}),  # its registration: SQL92 with Bloom bitmaps in the ext units
    ("OrderTopic", "G", {"tags": "TagA || TagC"}),
])
def test_the_batch_sees_what_the_message_filter_sees_on_a_sample_store(sample_store, topic, group, how):
    assert len(sample_store.commit_log.files) > 1
    check_batch_sees_the_messages(sample_store, topic, group, **how)


def _by_color_or_long_body(m: cq.Message) -> bool:
    return m.properties.get("color") in ("red", "grün") or len(m.body) > 100


@cq.batch_filter
def _by_color_or_long_body_batch(batch):
    import pyarrow as pa
    import pyarrow.compute as pc

    color = pc.map_lookup(batch["properties"], pa.scalar("color"), "first")
    return pc.or_(pc.fill_null(pc.is_in(color, pa.array(["red", "grün"])), False),
                  pc.greater(pc.binary_length(batch["body"]), 100))


@pytest.mark.parametrize("where", ["golden", "sample"])
def test_consume_with_a_batch_filter_equals_the_per_message_filter(store, sample_store, where):
    s, topic = (store, TOPIC) if where == "golden" else (sample_store, "SampleTopic")
    # bloom_filter=None: "G" is not registered, so the ext units carry no bits of it
    for how in ({"tags": "*"}, {"sql": "color IS NOT NULL OR TAGS = 'TagB'", "bloom_filter": None}):
        a = s.consume(topic, "G", filter=_by_color_or_long_body, **how)
        b = s.consume(topic, "G", filter=_by_color_or_long_body_batch, **how)
        got_a, got_b = list(a), list(b)
        assert got_a == got_b and 0 < len(got_a) < a.stats.passed_commit_log
        assert a.stats == b.stats and a.stats.filter_rejected > 0


def test_verify_crc_checks_every_message_before_either_form_filters(store, golden_copy):
    assert list(store.consume(TOPIC, "G", tags="*", filter=ff.queue0_batch, verify_crc=True)) == list(
        store.consume(TOPIC, "G", tags="*", filter=ff.queue0))
    offset = store.consume_queue(TOPIC, 1).unit(1)[0]
    patch_file(golden_copy / "commitlog" / cq.format.file_name(0), offset + 88, b"X")  # a body byte, queue 1
    s = cq.Store(golden_copy)
    try:
        with pytest.raises(cq.StoreFormatError, match="CRC"):
            s.commit_log.read_message(offset, verify_crc=True)
        for fn in (ff.queue0, ff.queue0_batch):  # the filter would reject the message: the CRC fails first
            with pytest.raises(cq.StoreFormatError, match="CRC"):
                list(s.consume(TOPIC, "G", tags="*", filter=fn, verify_crc=True))
            assert len(list(s.consume(TOPIC, "G", tags="*", filter=fn))) == 100
    finally:
        s.close()


def test_a_failing_batch_names_its_first_and_last_message(store):
    @cq.batch_filter
    def explode(batch):
        raise KeyError("no price")

    with pytest.raises(cq.FilterError) as exc:
        list(store.consume(TOPIC, "G", tags="*", filter=explode))
    e = exc.value
    # a batch is what one ConsumeQueue file of the golden store holds: 50 units
    assert (e.topic, e.queue_id, e.queue_offset, e.last_queue_offset) == (TOPIC, 0, 0, 49)
    assert "queue 0 offsets 0..49: KeyError" in str(e) and isinstance(e.__cause__, KeyError)
    result = store.consume(TOPIC, "G", tags="*", filter=explode, on_filter_error="skip")
    assert list(result) == [] and result.stats.filter_skipped == 200 and result.stats.filter_rejected == 0


def test_ready_made_broker_filter_still_works_and_both_keywords_conflict(store):
    flt = store.make_filter(TOPIC, GROUP, sql=SQL)
    assert _keys(store.consume(TOPIC, GROUP, filter=flt)) == _keys(store.consume(TOPIC, GROUP, sql=SQL))
    with pytest.raises(ValueError, match="not both"):
        store.consume(TOPIC, GROUP, filter=ff.queue0, message_filter=ff.queue0)
    with pytest.raises(ValueError, match="on_filter_error"):
        store.consume(TOPIC, GROUP, filter=ff.queue0, on_filter_error="ignore")


def test_without_a_subscription_an_unregistered_group_gets_every_message_through_the_filter(store):
    result = store.consume(TOPIC, "GID_CLASS_FILTER", filter=ff.queue0)
    got = list(result)
    assert result.stats.passed_commit_log == result.stats.units_scanned == 200
    assert _keys(got) == [(0, q) for q in range(len(store.consume_queue(TOPIC, 0)))]


def test_an_exception_names_the_message_and_the_filter(store):
    with pytest.raises(cq.FilterError) as exc:
        list(store.consume(TOPIC, "G", tags="*", filter=ff.boom))
    e = exc.value
    assert (e.topic, e.queue_id, e.queue_offset) == (TOPIC, 0, 0)
    assert "filters_for_tests:boom" in str(e) and "queue 0 offset 0" in str(e) and "RuntimeError" in str(e)
    assert isinstance(e.__cause__, RuntimeError)


def test_skip_counts_the_messages_it_drops(store):
    result = store.consume(TOPIC, "G", tags="*", filter=ff.boom, on_filter_error="skip")
    got = list(result)
    assert all(m.queue_offset % 3 for m in got)
    assert result.stats.filter_skipped == 200 - len(got) and result.stats.filter_rejected == 0


def test_decide_custom_is_the_paths_last_step_and_records_it_on_the_decisions(store):
    """decide_custom (the pipeline's custom-filter step) keeps what consume keeps, in chunks or at once,
    records kept and skipped rows on UnitDecisions and counts them as consume does."""
    from cq.store.decide import UnitDecisions, decide_custom

    msgs = list(store.consume(TOPIC, "G", tags="*"))
    n = len(msgs)
    d = UnitDecisions(None, np.ones(n + 2, bool), np.ones(n + 2, bool))
    rows = np.arange(1, n + 1)
    stats = cq.ConsumeStats()
    kept, skipped = decide_custom(cq.MessageFilter(ff.boom, on_error="skip"), n, messages=msgs.__getitem__,
                                  chunk=7, d=d, rows=rows, stats=stats)
    assert kept.tolist() == [m.queue_offset % 3 != 0 for m in msgs] and (skipped == ~kept).all()
    assert d.custom[rows].tolist() == kept.tolist() and not d.custom[0] and not d.custom[-1]
    assert d.filter_skipped[rows].tolist() == skipped.tolist() and not d.filter_skipped[[0, -1]].any()
    result = store.consume(TOPIC, "G", tags="*", filter=ff.boom, on_filter_error="skip")
    assert _keys(result) == _keys(m for m, k in zip(msgs, kept) if k)
    assert (stats.filter_skipped, stats.filter_rejected) == (result.stats.filter_skipped, 0)
    with pytest.raises(cq.FilterError, match="queue 0 offset 0"):
        decide_custom(cq.MessageFilter(ff.boom), n, messages=msgs.__getitem__)


@pytest.mark.parametrize("fn,needle", [(ff.not_a_bool, "not a bool"), (ff.wrong_length, "201 values"),
                                       ])
def test_a_result_that_is_not_a_bool_is_a_filter_error(store, fn, needle):
    with pytest.raises(cq.FilterError, match="failed on"):
        list(store.consume(TOPIC, "G", tags="*", filter=fn))
    result = store.consume(TOPIC, "G", tags="*", filter=fn, on_filter_error="skip")
    assert list(result) == [] and result.stats.filter_skipped == 200


@pytest.mark.parametrize("spec,needle", [
    ("filters_for_tests", "expected package.module:function"),
    ("no_such_module_xyz:f", "cannot import module 'no_such_module_xyz'"),
    ("filters_for_tests:nope", "has no attribute 'nope'"),
    ("filters_for_tests:NOT_CALLABLE", "not a callable"),
])
def test_load_filter_errors(spec, needle):
    with pytest.raises(ValueError, match=needle):
        cq.load_filter(spec)


def test_messages_columns_are_the_data_sources():
    pytest.importorskip("pyspark")
    from pyspark.sql.pandas.types import to_arrow_schema

    from pyspark_udfs.datasource import ReadOptions

    ours = message_schema()
    theirs = to_arrow_schema(ReadOptions(path=str(STORE)).schema())
    assert ours.names == theirs.names
    assert [f.type for f in ours] == [f.type for f in theirs]


# ------------------------------------------------------------------ CLI
def _cli(argv, capsys):
    code = rmqfilter.main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_consume_filter(capsys):
    code, out, err = _cli(["consume", STORE, "--topic", TOPIC, "--group", GROUP, "--sql", SQL, "--filter",
                           "filters_for_tests:queue0_batch", "--format", "jsonl"], capsys)
    assert code == 0 and out and all('"queue_id": 0' in line for line in out.splitlines())
    assert "custom filter rejected" in err
    code, out, err = _cli(["consume", STORE, "--topic", TOPIC, "--group", "G", "--filter", "filters_for_tests:boom",
                           "--on-filter-error", "skip", "--format", "none"], capsys)
    store = cq.Store(STORE)
    divisible = sum((len(store.consume_queue(TOPIC, q)) + 2) // 3 for q in store.queue_ids(TOPIC))
    store.close()
    assert code == 0 and f"delivered {200 - divisible}; " in err and f"skipped on error {divisible};" in err


@pytest.mark.parametrize("spec,needle", [
    ("filters_for_tests:boom", "failed on message topic 'GoldenFilterTopic' queue 0 offset 0"),
    ("no_such_module_xyz:f", "cannot import module"),
])
def test_cli_consume_bad_filter_exits_2(capsys, spec, needle):
    code, _, err = _cli(["consume", STORE, "--topic", TOPIC, "--group", "G", "--tags", "*", "--filter", spec,
                         "--format", "none"], capsys)
    assert code == 2 and needle in err and "Traceback" not in err


def test_cli_consume_filter_alone_needs_no_registration(capsys):
    # a group named alone is looked up in consumerFilter.json; with a custom filter an unregistered one is "*"
    code, _, err = _cli(["consume", STORE, "--topic", TOPIC, "--group", "G"], capsys)
    assert code == 2 and "'G'" in err
    code, out, err = _cli(["consume", STORE, "--topic", TOPIC, "--group", "G", "--filter",
                           "filters_for_tests:queue0", "--format", "text"], capsys)
    assert code == 0 and "passed CommitLog layer 200" in err and out.count("\n") == sum(
        1 for line in out.splitlines() if line.startswith("0\t"))


# ------------------------------------------------------------------ Spark
@pytest.mark.spark
def test_spark_data_source_filter(spark, store):

    spark.sparkContext.addPyFile(str(DATA.parent / "filters_for_tests.py"))
    expected = _keys(store.consume(TOPIC, GROUP, sql=SQL, filter=ff.queue0))

    def read(**options):
        r = spark.read.format("rocketmq").option("topic", TOPIC).option("group", GROUP).option("sql", SQL)
        for k, v in options.items():
            r = r.option(k, v)
        return r.load(str(STORE))

    for spec in ("filters_for_tests:queue0", "filters_for_tests:queue0_batch"):
        rows = read(filter=spec).select("queue_id", "queue_offset").collect()
        assert sorted((r[0], r[1]) for r in rows) == sorted(expected)
    dec = read(filter="filters_for_tests:boom", on_filter_error="skip", decisions="true")
    agg = dec.selectExpr("sum(cast(delivered as int))", "sum(cast(filter_skipped as int))").first()
    plain = [k for k in _keys(store.consume(TOPIC, GROUP, sql=SQL))]
    assert agg[0] == sum(1 for _, q in plain if q % 3) and agg[1] == sum(1 for _, q in plain if q % 3 == 0)
    with pytest.raises(Exception, match="cannot import module 'no_such_module_xyz'"):
        read(filter="no_such_module_xyz:f").collect()
    with pytest.raises(Exception, match="FilterError"):
        read(filter="filters_for_tests:boom").collect()


@pytest.mark.spark
def test_spark_scan_with_a_filter(spark, store):

    from pyspark_udfs.job import GroupScan, scan

    spark.sparkContext.addPyFile(str(DATA.parent / "filters_for_tests.py"))
    group = GroupScan(GROUP, sql=SQL)
    plain = _keys(store.consume(TOPIC, GROUP, sql=SQL))
    result = scan(spark, str(STORE), TOPIC, group, message_filter="filters_for_tests:queue0_batch")
    assert result.delivered == sum(1 for q, _ in plain if q == 0) and result.filter_skipped == 0
    assert result.passed_commit_log == len(plain) and result.layer2.startswith("python")
    result = scan(spark, str(STORE), TOPIC, group, message_filter="filters_for_tests:boom", on_filter_error="skip")
    assert result.filter_skipped == sum(1 for _, o in plain if o % 3 == 0)
    assert result.delivered == len(plain) - result.filter_skipped

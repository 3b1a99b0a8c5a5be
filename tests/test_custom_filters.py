"""Custom message filters (the class-filter mode): Store.consume, the CLI and the Spark data source."""
from __future__ import annotations

import filters_for_tests as ff
import numpy as np
import pytest
from helpers import DATA

import cq
from cq.custom_filter import MESSAGE_COLUMNS, message_schema
from pyspark_udfs import cli

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
    code = cli.main([str(a) for a in argv])
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
    import os

    spark.sparkContext.addPyFile(os.path.join(os.path.dirname(__file__), "filters_for_tests.py"))
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
    import os

    from pyspark_udfs.job import GroupScan, scan

    spark.sparkContext.addPyFile(os.path.join(os.path.dirname(__file__), "filters_for_tests.py"))
    group = GroupScan(GROUP, sql=SQL)
    plain = _keys(store.consume(TOPIC, GROUP, sql=SQL))
    result = scan(spark, str(STORE), TOPIC, group, message_filter="filters_for_tests:queue0_batch")
    assert result.delivered == sum(1 for q, _ in plain if q == 0) and result.filter_skipped == 0
    assert result.passed_commit_log == len(plain) and result.layer2.startswith("python")
    result = scan(spark, str(STORE), TOPIC, group, message_filter="filters_for_tests:boom", on_filter_error="skip")
    assert result.filter_skipped == sum(1 for _, o in plain if o % 3 == 0)
    assert result.delivered == len(plain) - result.filter_skipped

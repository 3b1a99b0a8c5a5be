"""Failures in Spark: a corrupt store fails with file and offset or is skipped and reported
(``on_corrupt``), and a task that dies or raises once gives the same answer after Spark's retry."""
from __future__ import annotations

import json
import os
import re
import struct

import pytest
from helpers import DATA, load_jsonl, patch_file, tasks_passed_on_retry

from cq import format as fmt

pytestmark = pytest.mark.spark

ROWS = load_jsonl("golden_store.jsonl")
TOPIC = "GoldenFilterTopic"
SQL_A = "a > 5 AND b = 'abc'"
KEY = ("topic", "queue_id", "queue_offset")


def _commit_log_file(root, physical_offset: int) -> str:
    start = physical_offset - physical_offset % 65536
    return str(root / "commitlog" / fmt.file_name(start))


def _break_body_length(root, row: dict) -> tuple[str, int]:
    """Make a record's body length disagree with its total size (every decoder refuses it)."""
    assert row["sysFlag"] & 0x30 == 0  # IPv4 hosts: BODYLENGTH sits at byte 84 of the record
    path = _commit_log_file(root, row["commitLogOffset"])
    at = row["commitLogOffset"] % 65536
    patch_file(path, at + 84, struct.pack(">i", row["bodyLength"] - 3))
    return path, at


def _read(spark, root, **options):
    reader = spark.read.format("rocketmq")
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load(str(root))


def _keys(rows) -> set:
    return {tuple(r[k] for k in KEY) for r in rows}


def _golden_key(g: dict) -> tuple:
    return g["topic"], g["queueId"], g["queueOffset"]


# ------------------------------------------------------------------ on_corrupt=fail


def test_corrupt_record_fails_the_query_naming_file_and_offset(spark, golden_copy):
    row = ROWS[3]
    path = _commit_log_file(golden_copy, row["commitLogOffset"])
    patch_file(path, row["commitLogOffset"] + 4, b"\x12\x34\x56\x78")  # bad magic code
    with pytest.raises(Exception) as exc:
        _read(spark, golden_copy).count()
    text = str(exc.value)
    assert "StoreFormatError" in text
    assert f"{path} at byte offset {row['commitLogOffset']}: bad magic code 0x12345678" in text


def test_truncated_consume_queue_fails_while_planning_naming_file_and_offset(spark, golden_copy):
    path = golden_copy / "consumequeue" / TOPIC / "0" / fmt.file_name(0)
    os.truncate(path, 990)
    with pytest.raises(Exception) as exc:
        _read(spark, golden_copy, table="consumequeue").count()
    assert f"{path} at byte offset 990" in str(exc.value)


def test_on_corrupt_option_is_checked(spark, golden_copy):
    from pyspark_udfs.datasource import ReadOptions

    with pytest.raises(ValueError, match="rocketmq option 'on_corrupt': expected fail or skip, got 'ignore'"):
        ReadOptions.parse({"path": str(golden_copy), "on_corrupt": "ignore"})
    with pytest.raises(ValueError, match="'skipped_log' needs on_corrupt=skip"):
        ReadOptions.parse({"path": str(golden_copy), "skipped_log": str(golden_copy / "x")})
    with pytest.raises(Exception, match="on_corrupt"):
        _read(spark, golden_copy, on_corrupt="Maybe").schema  # noqa: B018 - the schema call makes the source
    assert ReadOptions.parse({"path": str(golden_copy), "on_corrupt": " SKIP "}).on_corrupt == "skip"


# ------------------------------------------------------------------ on_corrupt=skip


def test_skip_drops_the_unit_of_a_corrupt_record_and_reports_it(spark, golden_copy, tmp_path):
    from pyspark_udfs.datasource import skipped_ranges

    row = ROWS[3]
    path = _commit_log_file(golden_copy, row["commitLogOffset"])
    patch_file(path, row["commitLogOffset"] + 4, b"\x12\x34\x56\x78")
    log = tmp_path / "skipped"
    rows = _read(spark, golden_copy, on_corrupt="skip", skipped_log=str(log)).collect()
    assert _keys(rows) == {_golden_key(g) for g in ROWS} - {_golden_key(row)}
    by_key = {tuple(r[k] for k in KEY): r for r in rows}
    for g in ROWS[:10]:  # the records around it are read as before
        if g is not row:
            assert by_key[_golden_key(g)]["properties"] == g["properties"]
    assert skipped_ranges(log) == [{
        "topic": TOPIC, "queue_id": 1, "start": row["queueOffset"], "end": row["queueOffset"] + 1, "units": 1,
        "path": path, "offset": row["commitLogOffset"], "reason": "bad magic code 0x12345678 (TOTALSIZE 396)",
    }]


def test_skip_a_consume_queue_that_cannot_be_opened_drops_that_queue(spark, golden_copy, tmp_path):
    from pyspark_udfs.datasource import skipped_ranges

    path = golden_copy / "consumequeue" / TOPIC / "0" / fmt.file_name(0)
    os.truncate(path, 990)
    log = tmp_path / "skipped"
    rows = _read(spark, golden_copy, table="consumequeue", on_corrupt="skip", skipped_log=str(log)).collect()
    assert _keys(rows) == {_golden_key(g) for g in ROWS if (g["topic"], g["queueId"]) != (TOPIC, 0)}
    [skipped] = skipped_ranges(log)
    assert (skipped["topic"], skipped["queue_id"], skipped["end"], skipped["units"]) == (TOPIC, 0, None, None)
    assert (skipped["path"], skipped["offset"]) == (str(path), 990)
    assert "truncated" in skipped["reason"]


def test_skip_an_ext_unit_whose_bitmap_runs_past_the_data(spark, golden_copy, tmp_path):
    from pyspark_udfs.datasource import skipped_ranges

    ext_path = golden_copy / "consumequeue_ext" / TOPIC / "0" / fmt.file_name(3072)
    last = max((g for g in ROWS if g["topic"] == TOPIC and g["queueId"] == 0), key=lambda g: g["ext"]["fileOffset"])
    patch_file(ext_path, last["ext"]["fileOffset"] - 3072 + 18, struct.pack(">h", 900))
    with pytest.raises(Exception, match="runs past the readable end"):
        _read(spark, golden_copy, topic=TOPIC, group="GID_SQL_A", sql=SQL_A).count()
    log = tmp_path / "skipped"
    df = _read(spark, golden_copy, topic=TOPIC, table="consumequeue", on_corrupt="skip", skipped_log=str(log))
    assert _keys(df.collect()) == {_golden_key(g) for g in ROWS if g["topic"] == TOPIC} - {_golden_key(last)}
    [skipped] = skipped_ranges(log)
    assert (skipped["queue_id"], skipped["start"], skipped["units"]) == (0, last["queueOffset"], 1)
    assert (skipped["path"], skipped["offset"]) == (str(ext_path), last["ext"]["fileOffset"] - 3072)


def test_skip_an_ext_file_that_cannot_be_opened_drops_the_ranges_that_need_it(spark, golden_copy, tmp_path):
    from pyspark_udfs.datasource import skipped_ranges

    ext_path = golden_copy / "consumequeue_ext" / TOPIC / "1" / fmt.file_name(3072)
    os.truncate(ext_path, 100)
    with pytest.raises(Exception) as exc:
        _read(spark, golden_copy, topic=TOPIC, table="consumequeue").count()
    assert f"{ext_path} at byte offset" in str(exc.value)
    log = tmp_path / "skipped"
    df = _read(spark, golden_copy, topic=TOPIC, table="consumequeue", on_corrupt="skip", skipped_log=str(log))
    assert _keys(df.collect()) == {_golden_key(g) for g in ROWS if (g["topic"], g["queueId"]) == (TOPIC, 0)}
    skipped = skipped_ranges(log)
    # queue 1 is two ConsumeQueue files, so two partitions, each skipped whole
    assert [(r["queue_id"], r["start"], r["end"]) for r in skipped] == [(1, 0, 50), (1, 50, 100)]
    assert {r["path"] for r in skipped} == {str(ext_path)}


def _sql_a_row_that_matches() -> dict:
    return next(g for g in ROWS if g["topic"] == TOPIC and g["sysFlag"] & 0x30 == 0
                and any(x["group"] == "GID_SQL_A" and x["matched"] for x in g["groups"]))


@pytest.mark.parametrize("layer2", ["python", "native"])
def test_scan_job_skips_a_corrupt_record_and_counts_it(spark, golden_copy, layer2):
    import cq
    from pyspark_udfs import job

    golden = cq.Store(DATA / "golden_store").consume(TOPIC, "GID_SQL_A", sql=SQL_A)
    list(golden)
    stats = golden.stats
    row = _sql_a_row_that_matches()
    path, at = _break_body_length(golden_copy, row)
    with pytest.raises(Exception) as exc:
        job.scan(spark, str(golden_copy), TOPIC, job.GroupScan("GID_SQL_A", sql=SQL_A), layer2=layer2)
    found = re.search(rf"StoreFormatError: {re.escape(str(path))} at byte offset (\d+)", str(exc.value))
    assert found and at <= int(found.group(1)) < at + row["storeSize"], str(exc.value)[-400:]
    got = job.scan(spark, str(golden_copy), TOPIC, job.GroupScan("GID_SQL_A", sql=SQL_A), on_corrupt="skip",
                   layer2=layer2)
    assert got.layer2 == ("native" if layer2 == "native" else "python (reader, Cython engine)")
    # The skipped unit had passed both layers on the intact store.
    assert got.units_scanned == stats.units_scanned - 1
    assert got.passed_consume_queue == stats.passed_consume_queue - 1
    assert got.passed_commit_log == stats.passed_commit_log - 1
    assert got.delivered == stats.delivered - 1
    [skipped] = got.skipped
    assert (skipped["queue_id"], skipped["start"], skipped["path"]) == (row["queueId"], row["queueOffset"], path)
    # the record's start (properties decoder) or the field inside it (full decoder) where it went wrong
    assert at <= skipped["offset"] < at + row["storeSize"]
    assert f"{path} at byte offset {skipped['offset']}" in job.format_skipped([got])


def test_cli_scan_prints_the_skipped_ranges(spark, golden_copy, tmp_path, capsys):
    import rmqfilter

    row = _sql_a_row_that_matches()
    path, at = _break_body_length(golden_copy, row)
    out, summary = tmp_path / "out", tmp_path / "summary.json"
    code = rmqfilter.main(["scan", str(golden_copy), "--topic", TOPIC, "--group", "GID_SQL_A", "--sql", SQL_A,
                     "--on-corrupt", "skip", "--out", str(out), "--format", "json", "--json", str(summary)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "GID_SQL_A: skipped 1 corrupt range(s), 1 unit(s)" in printed
    report = json.loads(summary.read_text())
    assert len(report["skipped"]) == 1
    offset = report["skipped"][0]["offset"]  # the record's start, or the field inside it that is wrong
    assert at <= offset < at + row["storeSize"]
    assert f"queue {row['queueId']} offsets [{row['queueOffset']}, {row['queueOffset'] + 1}): {path} " \
           f"at byte offset {offset}" in printed
    written = {(r["queue_id"], r["queue_offset"]) for r in spark.read.json(str(out)).collect()}
    assert (row["queueId"], row["queueOffset"]) not in written and len(written) > 0


# ------------------------------------------------------------------ retries

# The shared test session is local[2,2] (tests/conftest.py): a task that fails is tried once
# more. The flaky sources are made here (test-only, classes built in a function so Spark's
# workers get them by value), wrapping the real one.

def _flaky_source(mode: str, markers: str):
    """A rocketmq source whose task for partition 1 fails once: raises, or its Python worker dies."""
    from pyspark import TaskContext

    from pyspark_udfs.datasource import RocketMQDataSource, RocketMQPushdownReader

    class FlakyReader(RocketMQPushdownReader):
        def read(self, partition):
            ctx = TaskContext.get()
            if ctx.partitionId() == 1:
                # The first attempt to get here fails; the marker is created atomically.
                try:
                    fd = os.open(os.path.join(markers, "failed"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                except FileExistsError:
                    with open(os.path.join(markers, f"retried-{ctx.attemptNumber()}"), "w"):
                        pass
                else:
                    os.write(fd, str(ctx.attemptNumber()).encode())
                    os.close(fd)
                    if mode == "die":
                        os._exit(17)
                    raise RuntimeError("injected failure")
            yield from super().read(partition)

    class FlakySource(RocketMQDataSource):
        @classmethod
        def name(cls):
            return f"rocketmq_flaky_{mode}"

        def reader(self, schema):
            return FlakyReader(self.read_options, schema)

    return FlakySource


def _decision_rows(df) -> list[list]:
    return sorted([r.queue_id, r.queue_offset, r.matched_by_consume_queue, r.matched_by_commit_log, r.delivered]
                  for r in df.collect())


@pytest.mark.task_retries
@pytest.mark.parametrize("mode", ["raise", "die"])
def test_a_task_that_fails_once_gives_the_same_rows_after_retry(spark, tmp_path, mode):
    """A task that raises, and one whose Python worker dies, run again and give the same rows."""
    options = {"topic": TOPIC, "group": "GID_SQL_A", "sql": SQL_A, "decisions": "true", "table": "consumequeue"}
    expected = _decision_rows(_read(spark, DATA / "golden_store", **options))
    spark.dataSource.register(_flaky_source(mode, str(tmp_path)))
    reader = spark.read.format(f"rocketmq_flaky_{mode}").option("partition_units", "50")
    for name, value in options.items():
        reader = reader.option(name, value)
    df = reader.load(str(DATA / "golden_store"))
    assert df.rdd.getNumPartitions() > 1
    jobs_before = set(spark.sparkContext.statusTracker().getJobIdsForGroup())
    assert _decision_rows(df) == expected and len(expected) == 200
    # Spark saw the failed attempt (and conftest's check of every other Spark test would report it)
    assert tasks_passed_on_retry(spark, jobs_before) != []
    # The failure was injected on a first attempt and the task ran again.
    assert (tmp_path / "failed").read_text() == "0"
    assert any(name.startswith("retried-") and name != "retried-0" for name in os.listdir(tmp_path))


@pytest.mark.parametrize("bad_every", [1, 2, 97, None])
def test_finding_bad_values_costs_a_few_decodes_of_the_batch(bad_every):
    """Any number of corrupt records in a slice is found in linear work (no hang on a garbage store)."""
    import numpy as np

    from cq import StoreFormatError
    from pyspark_udfs._reader import decode_skipping

    n = 5000
    bad = set(range(0, n, bad_every)) if bad_every else set()
    decoded = [0]

    def decode(values):
        decoded[0] += len(values)
        for v in values.tolist():
            if v in bad:
                raise StoreFormatError("bad record", "/store/commitlog/0", v)
        return values.tolist()

    result, good, errors = decode_skipping(decode, np.arange(n), True)
    assert result == [v for v in range(n) if v not in bad]
    assert set(np.flatnonzero(~good).tolist()) == bad and [e.offset for e in errors] == sorted(bad)
    assert decoded[0] <= 6 * n
    if bad:
        with pytest.raises(StoreFormatError, match=f"at byte offset {min(bad)}: bad record"):
            decode_skipping(decode, np.arange(n), False)

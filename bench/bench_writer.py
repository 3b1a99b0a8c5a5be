"""Store writer throughput beside the obvious alternative, in the same run.

- ``StoreWriter.append_many``: the batch path (bitmaps per batch with ``matches_many``,
  Bloom positions once per group, buffered ``pwrite``);
- ``StoreWriter.append``: the same writer one message at a time;
- the obvious alternative: a straightforward loop over ``cq.format.encode_record`` /
  ``encode_cq_unit`` / ``encode_ext_unit`` that evaluates every group's selector on every
  message and writes each piece with ``file.write`` (it produces the same bytes: checked);
- ``generate_sample_store``: the ``rmqfilter gen-store`` path end to end;
- ``rebuild_bitmaps`` (the CommitLog read through ``column_batches``, tag codes and bitmaps
  per batch over the decoded columns) beside its former per-message reader (one ``cq.Message``
  and one properties dict per record), kept reachable as ``cq.writer.rebuild._dispatch_messages``;
  both write the same bytes (checked);
- the re-dispatch of ``StoreWriter(append=True)`` (the records an interrupted writer left
  without units, here every record of a store whose ConsumeQueue and ext files were lost), read
  in decoded column batches and decided per batch (``cq.writer.recovery.redispatch``), beside the
  former path (one ``cq.Message`` per record from a record-by-record walk, re-implemented below
  as ``_redispatch_per_message`` and patched in); both write the same bytes (checked).

Messages are the sample store's: three topics, Zipf-like tags, four properties,
three SQL92 groups on the main topic, ext units on.

Run: ``make bench`` or ``.venv/bin/python -m pytest bench/bench_writer.py``.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

import bloom
import selector
from cq import format as fmt
from cq import tags_code
from cq.readers.commitlog import CommitLog
from cq.writer import rebuild
from cq.writer.sample import SAMPLE_GROUPS, SAMPLE_TOPICS, _sample_messages, generate_sample_store
from cq.writer.writer import DEFAULT_MESSAGE_DELAY_LEVEL, Prepared, StoreWriter

N_MESSAGES = 50_000
QUEUES = {t: (4 if i == 0 else 2) for i, t in enumerate(SAMPLE_TOPICS)}
CONFIG = {"commit_log_file_size": 64 << 20, "ext_file_size": 4 << 20, "enable_ext": True}


@pytest.fixture(scope="module")
def messages() -> list[dict]:
    return list(_sample_messages(N_MESSAGES, 3, SAMPLE_TOPICS, QUEUES))


@pytest.fixture
def scratch():
    root = Path(tempfile.mkdtemp(prefix="rmq-bench-"))
    counter = iter(range(10**9))

    def fresh() -> Path:
        return root / f"s{next(counter)}"

    yield fresh
    shutil.rmtree(root, ignore_errors=True)


def _ours_batch(root: Path, messages: list[dict]) -> None:
    with StoreWriter(root, **CONFIG) as w:
        for group, sql in SAMPLE_GROUPS:
            w.register_group(SAMPLE_TOPICS[0], group, sql)
        w.append_many(messages)


def _ours_one_by_one(root: Path, messages: list[dict]) -> None:
    with StoreWriter(root, **CONFIG) as w:
        for group, sql in SAMPLE_GROUPS:
            w.register_group(SAMPLE_TOPICS[0], group, sql)
        for m in messages:
            w.append(**m)


class _NaiveFiles:
    """One open file per queue directory, a new one each time the current is full."""

    def __init__(self, directory: str, size: int):
        self.directory, self.size, self.start, self.pos, self.f = directory, size, 0, 0, None

    def write(self, data: bytes) -> None:
        if self.f is None:
            os.makedirs(self.directory, exist_ok=True)
            self.f = open(os.path.join(self.directory, fmt.file_name(self.start)), "wb")  # noqa: SIM115
            self.f.truncate(self.size)
        self.f.write(data)
        self.pos += len(data)

    def roll(self) -> None:
        self.f.close()
        self.f, self.start, self.pos = None, self.start + self.size, 0

    def close(self) -> None:
        if self.f is not None:
            self.f.close()


def _naive(root: Path, messages: list[dict]) -> None:
    """The straightforward writer: per message, per group, per file piece."""
    bf = bloom.BloomFilter()
    groups = []
    for group, sql in SAMPLE_GROUPS:
        positions = bf.calc_bit_positions(f"{group}#{SAMPLE_TOPICS[0]}")
        groups.append((selector.compile(sql), positions))
    log = _NaiveFiles(str(root / "commitlog"), CONFIG["commit_log_file_size"])
    queues: dict = {}
    offsets: dict = {}
    for m in messages:
        topic, qid = m["topic"], m["queue_id"]
        props = dict(m["properties"])
        props["TAGS"] = m["tags"]
        props["KEYS"] = m["keys"]
        props = {k: v for k, v in props.items() if v}
        props["CLUSTER"] = "DefaultCluster"
        qoff = offsets.get((topic, qid), 0)
        record = fmt.encode_record(
            topic=topic, body=m["body"], properties=fmt.encode_properties(props, order="hashmap"),
            queue_id=qid, queue_offset=qoff, commit_log_offset=log.start + log.pos,
            born_timestamp=m["born_timestamp"], born_host=m["born_host"],
            store_timestamp=m["store_timestamp"], store_host="127.0.0.1:10911", sys_flag=m["sys_flag"],
        )
        if len(record) + 8 > log.size - log.pos:
            log.write(fmt.encode_blank_record(log.size - log.pos))
            log.roll()
            record = fmt.encode_record(
                topic=topic, body=m["body"], properties=fmt.encode_properties(props, order="hashmap"),
                queue_id=qid, queue_offset=qoff, commit_log_offset=log.start,
                born_timestamp=m["born_timestamp"], born_host=m["born_host"],
                store_timestamp=m["store_timestamp"], store_host="127.0.0.1:10911", sys_flag=m["sys_flag"],
            )
        phys = log.start + log.pos
        log.write(record)
        offsets[(topic, qid)] = qoff + 1
        bitmap = None
        if topic == SAMPLE_TOPICS[0]:
            bits = bloom.BitsArray(bf.m)
            for compiled, positions in groups:
                if compiled.matches(props):
                    bf.hash_to(positions, bits)
            bitmap = bytes(bits)
        if (topic, qid) not in queues:
            queues[(topic, qid)] = (
                _NaiveFiles(str(root / "consumequeue" / topic / str(qid)), fmt.DEFAULT_CONSUME_QUEUE_FILE_SIZE),
                _NaiveFiles(str(root / "consumequeue_ext" / topic / str(qid)), CONFIG["ext_file_size"]),
            )
        cq, ext = queues[(topic, qid)]
        unit = fmt.encode_ext_unit(tags_code(props.get("TAGS")), m["store_timestamp"], bitmap)
        if len(unit) > ext.size - ext.pos - 4:
            ext.write(b"\xff\xff")
            ext.roll()
        address = fmt.decorate(ext.start + ext.pos)
        ext.write(unit)
        if cq.size - cq.pos < 20:
            cq.roll()
        cq.write(fmt.encode_cq_unit(phys, len(record), address))
    log.close()
    for cq, ext in queues.values():
        cq.close()
        ext.close()


def test_naive_writer_writes_the_same_bytes(messages, scratch):
    a, b = scratch(), scratch()
    _ours_batch(a, messages[:5000])
    _naive(b, messages[:5000])
    for sub in ("commitlog", "consumequeue", "consumequeue_ext"):  # not the writer's lock file
        for path in sorted((a / sub).rglob("*")):
            if path.is_file():
                assert path.read_bytes() == (b / path.relative_to(a)).read_bytes(), path


def test_writer_append_many(benchmark, messages, scratch):
    benchmark.group = f"store writer, {N_MESSAGES} sample messages, 3 SQL92 groups"
    benchmark.extra_info.update(items=len(messages), role="ours")
    benchmark.pedantic(lambda: _ours_batch(scratch(), messages), rounds=3, iterations=1)


def test_writer_append_one_by_one(benchmark, messages, scratch):
    benchmark.group = f"store writer, {N_MESSAGES} sample messages, 3 SQL92 groups"
    benchmark.extra_info.update(items=len(messages), role="ours")
    benchmark.pedantic(lambda: _ours_one_by_one(scratch(), messages), rounds=3, iterations=1)


def test_writer_naive_alternative(benchmark, messages, scratch):
    benchmark.group = f"store writer, {N_MESSAGES} sample messages, 3 SQL92 groups"
    benchmark.extra_info.update(items=len(messages), role="alternative")
    benchmark.pedantic(lambda: _naive(scratch(), messages), rounds=3, iterations=1)


def test_generate_sample_store(benchmark, scratch):
    n = 200_000
    benchmark.group = "gen-store end to end"
    benchmark.extra_info.update(items=n, role="ours")
    benchmark.pedantic(lambda: generate_sample_store(scratch(), messages=n, seed=1), rounds=2, iterations=1)


# ------------------------------------------------------------ rebuild bitmaps
REBUILD_MESSAGES = 100_000


@pytest.fixture(scope="module")
def rebuild_source():
    """A sample store whose bitmaps are rebuilt for its three groups (sources are only read)."""
    root = Path(tempfile.mkdtemp(prefix="rmq-bench-rebuild-"))
    generate_sample_store(root / "src", messages=REBUILD_MESSAGES, seed=3)
    yield root / "src"
    shutil.rmtree(root, ignore_errors=True)


def _rebuild_groups() -> list[tuple[str, str, str]]:
    return [(SAMPLE_TOPICS[0], group, sql) for group, sql in SAMPLE_GROUPS]


def _rebuild_per_message(source: Path, dest: Path) -> None:
    """The former reader of ``rebuild_bitmaps``: one ``cq.Message`` and one properties dict per record,
    bitmaps with ``matches_many`` over the dicts."""
    rebuild._rebuild(str(source), str(dest), rebuild._as_groups(_rebuild_groups()), rebuild._dispatch_messages,
                     64 << 20, fmt.DEFAULT_CONSUME_QUEUE_FILE_SIZE, fmt.DEFAULT_EXT_FILE_SIZE, None,
                     DEFAULT_MESSAGE_DELAY_LEVEL, None)


def test_rebuild_paths_write_the_same_bytes(rebuild_source, scratch):
    a, b = scratch(), scratch()
    rebuild.rebuild_bitmaps(rebuild_source, a, _rebuild_groups())
    _rebuild_per_message(rebuild_source, b)
    for sub in ("commitlog", "consumequeue", "consumequeue_ext"):
        for path in sorted((a / sub).rglob("*")):
            if path.is_file():
                assert path.read_bytes() == (b / path.relative_to(a)).read_bytes(), path


def test_rebuild_bitmaps_columns(benchmark, rebuild_source, scratch):
    benchmark.group = f"rebuild_bitmaps, {REBUILD_MESSAGES} sample records, 3 SQL92 groups"
    benchmark.extra_info.update(items=REBUILD_MESSAGES, role="ours")
    benchmark.pedantic(lambda: rebuild.rebuild_bitmaps(rebuild_source, scratch(), _rebuild_groups()),
                       rounds=3, iterations=1)


def test_rebuild_bitmaps_per_message_alternative(benchmark, rebuild_source, scratch):
    benchmark.group = f"rebuild_bitmaps, {REBUILD_MESSAGES} sample records, 3 SQL92 groups"
    benchmark.extra_info.update(items=REBUILD_MESSAGES, role="alternative")
    benchmark.pedantic(lambda: _rebuild_per_message(rebuild_source, scratch()), rounds=3, iterations=1)


# ------------------------------------------------------------ append=True re-dispatch
def _records_between(log: CommitLog, start: int, end: int):
    """The former walk of the re-dispatch: one ``cq.Message`` per record, across blank records."""
    off = start
    while off < end:
        index = log.file_index(off)
        if index is None:
            return
        file_start = log.files[index][0]
        pos = off - file_start
        if log.file_size - pos < 8:
            off = file_start + log.file_size
            continue
        _total, magic = fmt.RECORD_HEAD_STRUCT.unpack_from(log.buffer(index), pos)
        if magic == fmt.BLANK_MAGIC_CODE:
            off = file_start + log.file_size
            continue
        msg = log.read_message(off)
        yield msg
        off += msg.store_size


def _redispatch_per_message(self: StoreWriter) -> None:
    """The former ``StoreWriter._finish_recovery``: decisions per ``cq.Message``, bitmaps with
    ``matches_many`` over one properties dict per record."""
    start = getattr(self, "_redispatch_from", None)
    if start is None:
        return
    self._redispatch_from = None
    end = self._commit_log.offset
    with CommitLog(os.path.join(self.root, fmt.COMMIT_LOG_DIR), file_size=self.commit_log_file_size) as log:
        batch: list = []
        expected: dict = {}
        for msg in _records_between(log, start, end):
            transaction = msg.sys_flag & fmt.TRANSACTION_TYPE_MASK
            if transaction not in (fmt.TRANSACTION_NOT_TYPE, fmt.TRANSACTION_COMMIT_TYPE):
                continue
            key = (msg.topic, msg.queue_id)
            state = self.queue_state(*key)
            if msg.queue_offset < expected.get(key, state.next_offset):
                continue
            if not state.started and key not in expected and msg.queue_offset > 0 and start > log.min_offset:
                self._redispatch_from = log.min_offset
                _redispatch_per_message(self)
                return
            props = msg.properties or {}
            try:
                code = self.dispatch_tags_code(msg.topic, props, msg.store_timestamp)
            except ValueError:
                continue
            p = Prepared(msg.topic, msg.queue_id, b"", True, code, msg.store_timestamp, props)
            p.size = msg.store_size
            batch.append((p, msg.commit_log_offset, msg.queue_offset))
            expected[key] = msg.queue_offset + 1
        for (p, phys, qoff), bitmap in zip(batch, self.batch_bitmaps([p for p, _, _ in batch])):
            state = self.queue_state(p.topic, p.queue_id)
            state.next_offset = qoff
            self.dispatch_unit(state, phys, p.size, p.tags_code, p.store_timestamp, bitmap, queue_offset=qoff)


def _units_lost(source: Path, dest: Path) -> Path:
    """A copy of ``source`` whose ConsumeQueue and ext files never reached the disk."""
    shutil.copytree(source / "commitlog", dest / "commitlog")
    return dest


def _reopen(root: Path) -> None:
    """``StoreWriter(append=True)`` with the sample store's sizes and groups: the re-dispatch runs at close."""
    with StoreWriter(root, append=True, commit_log_file_size=64 << 20, enable_ext=True) as w:
        for group, sql in SAMPLE_GROUPS:
            w.register_group(SAMPLE_TOPICS[0], group, sql)


@pytest.fixture
def per_message_redispatch(monkeypatch):
    monkeypatch.setattr(StoreWriter, "_finish_recovery", _redispatch_per_message)


def _redispatch_rounds(benchmark, source: Path, scratch, role: str) -> None:
    benchmark.group = f"append=True re-dispatch, {REBUILD_MESSAGES} sample records without units, 3 SQL92 groups"
    benchmark.extra_info.update(items=REBUILD_MESSAGES, role=role)
    benchmark.pedantic(_reopen, setup=lambda: ((_units_lost(source, scratch()),), {}), rounds=3, iterations=1)


def test_redispatch_paths_write_the_same_bytes(rebuild_source, scratch, monkeypatch):
    a, b = _units_lost(rebuild_source, scratch()), _units_lost(rebuild_source, scratch())
    _reopen(a)
    with monkeypatch.context() as m:
        m.setattr(StoreWriter, "_finish_recovery", _redispatch_per_message)
        _reopen(b)
    for sub in ("commitlog", "consumequeue", "consumequeue_ext"):
        for path in sorted((rebuild_source / sub).rglob("*")):  # the store as written in one go
            if path.is_file():
                assert (a / path.relative_to(rebuild_source)).read_bytes() == path.read_bytes(), path
                assert (b / path.relative_to(rebuild_source)).read_bytes() == path.read_bytes(), path


def test_redispatch_columns(benchmark, rebuild_source, scratch):
    _redispatch_rounds(benchmark, rebuild_source, scratch, "ours")


def test_redispatch_per_message_alternative(benchmark, rebuild_source, scratch, per_message_redispatch):
    _redispatch_rounds(benchmark, rebuild_source, scratch, "alternative")

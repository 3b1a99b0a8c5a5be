"""Systematic corruption sweeps over copies of the golden store.

Every single-byte flip in CommitLog record headers, every truncation point of a
record, every byte of sampled ConsumeQueue and ConsumeQueueExt units, and
random garbage files named like store files: each read path either succeeds,
skips the way the broker does, or raises :class:`cq.StoreFormatError` naming
the file and the byte offset. Nothing else may escape (no ``struct.error``,
``IndexError``, ``OverflowError``, ``MemoryError``), nothing may hang.

Each sweep loops inside one test over a copy in ``tmp_path`` (the original
bytes are written back after every case) and names the failing case. The
suite runs under both engines (``make test`` repeats it with
``RMQFILTER_PUREPYTHON=1``); where the compiled engine is loaded the kernels'
verdicts are also compared with the pure-Python twin on every mutated buffer.
"""
from __future__ import annotations

import contextlib
import itertools
import os
import random
import signal
import tracemalloc

import numpy as np
import pytest
from helpers import DATA, entry_root, kernels, load_jsonl

import cq
from cq import format as fmt
from cq.kernels import ENGINE
from cq.readers.registry import READERS

ROWS = load_jsonl("golden_store.jsonl")
FILTER_TOPIC = "GoldenFilterTopic"
PLAIN_TOPIC = "GoldenPlainTopic"
CL_FILE_SIZE = 65536
SQL = "a > 5 AND b = 'abc'"
ROWS_BY_OFFSET = sorted(ROWS, key=lambda r: r["commitLogOffset"])

# the twin is always importable; the compiled kernel only where it was built
_PY = kernels("twin")
_CY = kernels("compiled") if ENGINE == "cython" else None
# The compiled run sweeps every case and checks each kernel against the twin on the same
# bytes; the pure-Python run (10-50x slower) takes every third case of each sweep.
STRIDE = 1 if ENGINE == "cython" else 3


class Budget:
    """Fail (naming the case) instead of hanging: SIGALRM after ``seconds`` for the whole sweep."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.case = "(before the first case)"

    def _alarm(self, signum, frame):
        raise AssertionError(f"sweep exceeded {self.seconds} s; last case: {self.case}")

    def __enter__(self):
        self._old = signal.signal(signal.SIGALRM, self._alarm)
        signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *exc):
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self._old)


def _read(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _write(path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def _flipped(data: bytes, at: int, mask: int) -> bytes:
    return data[:at] + bytes([data[at] ^ mask]) + data[at + 1:]


def attempt(case: str, fn, *args, **kwargs):
    """``fn(*args)``; a StoreFormatError must name a file and an offset. Returns the result or the error."""
    try:
        return fn(*args, **kwargs)
    except cq.StoreFormatError as exc:
        assert exc.path is not None, f"{case}: {fn.__name__} raised without a path: {exc}"
        assert exc.offset is not None, f"{case}: {fn.__name__} raised without an offset: {exc}"
        assert isinstance(exc.offset, int) and exc.offset >= 0, f"{case}: bad offset {exc.offset!r}"
        assert exc.path in str(exc) and str(exc.offset) in str(exc), f"{case}: message lacks file/offset: {exc}"
        return exc
    except Exception as exc:  # anything else escaping is the bug this sweep looks for
        raise AssertionError(f"{case}: {fn.__name__} raised {type(exc).__name__}: {exc}") from exc


def drain(method, *, limit: int | None = None) -> list:
    """``list(method())``, at most ``limit`` items."""
    return list(itertools.islice(method(), limit))


def _verdict(fn, *args):
    try:
        out = fn(*args)
    except ValueError as exc:
        return ("error", *exc.args)
    return ("ok", _plain(out))


def _plain(value):
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.tolist())
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def same_in_both_engines(case: str, name: str, *args) -> None:
    """The compiled kernel and its pure-Python twin agree on a (possibly corrupt) buffer."""
    if _CY is None:
        return
    got = _verdict(getattr(_CY, name), *args)
    want = _verdict(getattr(_PY, name), *args)
    assert got == want, f"{case}: {name} differs between engines: cython {got!r:.300} != python {want!r:.300}"


# ------------------------------------------------------------------ CommitLog
#: ``(position, width)`` of the V1 IPv4/IPv4 header fields the decoder copies out whole without a
#: check of its own (docs/formats.md#commitlog-record): BODYCRC (compared whole with the body's
#: CRC), QUEUEID, FLAG, BORNTIMESTAMP, BORNHOST (address, port), STORETIMESTAMP, STOREHOST
#: (address, port), RECONSUMETIMES, PREPAREDTRANSACTIONOFFSET. A flip of any of their bytes takes one path; the sweeps flip their
#: first byte (sign, a far value) and last byte (a near value). Every other header byte (the
#: lengths, the magic code, SYSFLAG, the two offsets) is flipped.
_VALUE_FIELDS = [(8, 4), (12, 4), (16, 4), (40, 8), (48, 4), (52, 4), (56, 8), (64, 4), (68, 4), (72, 4), (76, 8)]


def _header_positions(row) -> list[int]:
    """Byte positions (inside the record) of the header fields of a V1 IPv4/IPv4 record: every
    byte of each, but of the fields of :data:`_VALUE_FIELDS` their first and last."""
    inner = {at + i for at, width in _VALUE_FIELDS for i in range(1, width - 1)}
    fixed = [at for at in range(88) if at not in inner]  # TOTALSIZE .. BODYLENGTH
    topic_len_at = 88 + row["bodyLength"]
    props_len_at = topic_len_at + 1 + len(row["topic"].encode())
    return fixed + [topic_len_at, props_len_at, props_len_at + 1]


def _commit_log_reads(case: str, store: cq.Store, offsets: np.ndarray, off: int, walk: int) -> None:
    log = store.commit_log
    attempt(case, log.read_message, off)
    attempt(case, log.read_message, off, verify_crc=True)
    attempt(case, log.read_message, off, verify_crc="property")
    attempt(case, log.decode_columns, offsets)
    attempt(case, log.gather_properties, offsets)
    # the log walks, up to just past the mutated record (the rest of the log is intact)
    attempt(case, drain, log.messages, limit=walk)
    # the broker's recovery never raises: it truncates at the first invalid record
    recovered = list(itertools.islice(log.messages(strict=False), walk))
    assert len(recovered) <= walk, case
    attempt(case, log.count_records)
    attempt(case, log.__getattribute__, "max_offset")


def _file_of(offset: int) -> tuple[int, str]:
    start = offset // CL_FILE_SIZE * CL_FILE_SIZE
    return start, fmt.file_name(start)


def _around(row) -> np.ndarray:
    """The CommitLog offsets of ``row``'s record and of the records either side of it in its file.

    The batch decoders (``decode_columns``, ``gather_properties``) decode each record at its own
    offset, reading no byte of another record: a flip in one record changes only its own
    decode, so the sweeps decode it between its two intact neighbours (it stays inside a batch,
    neither first nor last) instead of every record of the file each case.
    """
    start, _ = _file_of(row["commitLogOffset"])
    in_file = [r["commitLogOffset"] for r in ROWS_BY_OFFSET if start <= r["commitLogOffset"] < start + CL_FILE_SIZE]
    i = in_file.index(row["commitLogOffset"])
    return np.array(in_file[max(i - 1, 0):i + 2], dtype=np.int64)


def test_every_header_byte_flip_of_commit_log_records(golden_copy):
    """All header bytes of the first records of two files (two masks), one flip per header byte of a sample."""
    rng = random.Random(7)
    first_records = ROWS_BY_OFFSET[:2]
    second_file = [r for r in ROWS_BY_OFFSET if r["commitLogOffset"] >= CL_FILE_SIZE][:1]
    # a sample of the other records of the first two files (each header byte once, a random mask)
    sampled = rng.sample([r for r in ROWS_BY_OFFSET[2:] if r["commitLogOffset"] < 2 * CL_FILE_SIZE], 4)
    cases = []
    for row in first_records + second_file:
        for at in _header_positions(row):
            cases += [(row, at, 0xFF), (row, at, 0x01)]
    for row in sampled:
        for at in _header_positions(row):
            cases.append((row, at, rng.choice((0xFF, 0x80, 0x01, 0x40))))
    outcomes = {"ok": 0, "error": 0}
    with Budget(60) as budget:
        for row, at, mask in cases[::STRIDE]:
            off = row["commitLogOffset"]
            start, name = _file_of(off)
            path = golden_copy / "commitlog" / name
            original = _read(path)
            mutated = _flipped(original, off - start + at, mask)
            budget.case = case = f"{name} record @{off} byte +{at} ^{mask:#04x}"
            _write(path, mutated)
            try:
                same_in_both_engines(case, "decode_record", np.frombuffer(mutated, np.uint8), off - start,
                                     CL_FILE_SIZE)
                same_in_both_engines(case, "commit_log_walk", np.frombuffer(mutated, np.uint8), 0)
                store = cq.Store(golden_copy)
                offsets = _around(row)
                same_in_both_engines(case, "decode_columns", np.frombuffer(mutated, np.uint8), offsets - start,
                                     CL_FILE_SIZE, fmt.ALL_RECORD_FIELDS)
                result = attempt(case, store.commit_log.read_message, off)
                outcomes["error" if isinstance(result, Exception) else "ok"] += 1
                if isinstance(result, cq.StoreFormatError):
                    assert result.path == str(path), case
                    assert off - start <= result.offset < off - start + row["storeSize"] + 1, (case, result)
                _commit_log_reads(case, store, offsets, off, ROWS_BY_OFFSET.index(row) + 2)
                store.close()
            finally:
                _write(path, original)
    # the sweep must actually exercise both outcomes (flips of padding-like bytes decode fine)
    assert outcomes["ok"] and outcomes["error"], outcomes


def test_every_truncation_point_of_the_last_record(golden_copy):
    """Cut the last record at every byte, as a killed writer leaves it: zeros after the cut
    (files are pre-allocated) and, separately, a file physically shorter."""
    last = ROWS_BY_OFFSET[-1]
    off = last["commitLogOffset"]
    start, name = _file_of(off)
    path = golden_copy / "commitlog" / name
    original = _read(path)
    pos = off - start
    size = last["storeSize"]
    intact = cq.Store(golden_copy)
    assert intact.commit_log.max_offset == off + size
    props_end = _header_positions(last)[-1] + 1
    with Budget(60) as budget:
        for cut in sorted({*range(0, size + 1, STRIDE), size}):
            budget.case = case = f"{name}: last record @{off} cut after {cut} of {size} bytes (zero tail)"
            zeroed = original[:pos + cut] + bytes(len(original) - pos - cut)
            _write(path, zeroed)
            same_in_both_engines(case, "commit_log_walk", np.frombuffer(zeroed, np.uint8), 0)
            same_in_both_engines(case, "decode_record", np.frombuffer(zeroed, np.uint8), pos, CL_FILE_SIZE)
            store = cq.Store(golden_copy)
            log = store.commit_log
            # broker recovery: a record cut before the end of its PROPERTIESLENGTH field no longer
            # adds up (zeros read as lengths), so the data ends where it starts; cut inside the
            # properties text it still adds up and its body CRC matches: the broker keeps it
            valid = cut >= props_end
            assert log.max_offset == (off + size if valid else off), case
            recovered = list(log.messages(strict=False))
            assert len(recovered) == len(ROWS) - (not valid), case
            strict = attempt(case, drain, log.messages)
            if not valid and any(zeroed[pos:pos + 8]):
                assert isinstance(strict, cq.StoreFormatError) and strict.offset == pos, (case, strict)
            else:  # all-zero header: never-written space, the end of the data
                assert len(strict) == len(recovered), case
            # the queue unit that points at the cut record is a counted skip, never an error
            result = store.consume(last["topic"], "G", tags="*", queue_ids=[last["queueId"]])
            got = attempt(case, list, result)
            assert not isinstance(got, Exception), (case, got)
            assert result.stats.commit_log_missing == (not valid), case
            store.close()

            budget.case = case = f"{name}: file truncated to {pos + cut} bytes"
            _write(path, original[:pos + cut])
            if pos + cut == 0:
                continue  # a trailing empty file is dropped, like the broker
            err = attempt(case, cq.Store(golden_copy).__getattribute__, "commit_log")
            assert isinstance(err, cq.StoreFormatError), case
            assert (err.path, err.offset) == (str(path), pos + cut), (case, err)
        _write(path, original)


def test_recovery_checks_the_body_crc_like_check_crc_on_recover(golden_copy):
    """A record whose lengths add up but whose body CRC does not match ends the data (docs/formats.md#commitlog-validation)."""
    last = ROWS_BY_OFFSET[-1]
    off = last["commitLogOffset"]
    start, name = _file_of(off)
    path = golden_copy / "commitlog" / name
    original = _read(path)
    _write(path, _flipped(original, off - start + 88 + 3, 0x20))  # a body byte
    store = cq.Store(golden_copy)
    assert store.commit_log.max_offset == off
    assert len(list(store.commit_log.messages(strict=False))) == len(ROWS) - 1
    lax = cq.CommitLog(golden_copy / "commitlog", check_crc_on_recover=False)
    assert lax.max_offset == off + last["storeSize"]
    result = store.consume(last["topic"], "G", tags="*", queue_ids=[last["queueId"]])
    assert last["queueOffset"] not in [m.queue_offset for m in result]
    assert result.stats.commit_log_missing == 1


def test_truncation_points_inside_an_earlier_file_are_errors_with_the_file_and_offset(golden_copy):
    """A cut record with zeros after it in an early file: strict reads name file and offset;
    recovery does not look there (it starts at the third-to-last file,
    docs/formats.md#consumequeue-end-of-data, docs/formats.md#commitlog-validation)."""
    row = next(r for r in ROWS_BY_OFFSET if r["commitLogOffset"] >= 2 * CL_FILE_SIZE)
    off = row["commitLogOffset"]
    start, name = _file_of(off)
    path = golden_copy / "commitlog" / name
    original = _read(path)
    pos = off - start
    # every 31st byte of the record, but of its body (27 KB of this record) a fixed-seed sample:
    # the readers do not look into a body, so a cut anywhere in it leaves the same record (whole
    # lengths, zeros for the rest of the body, a body CRC that fails); header and properties cuts all stay
    body = range(88, 88 + row["bodyLength"])
    every = range(0, row["storeSize"], 31)
    cuts = [c for c in every if c not in body] + sorted(random.Random(31).sample([c for c in every if c in body], 24))
    with Budget(60) as budget:
        for cut in cuts:
            budget.case = case = f"{name}: record @{off} cut after {cut} bytes"
            _write(path, original[:pos + cut] + bytes(len(original) - pos - cut))
            store = cq.Store(golden_copy)
            err = attempt(case, drain, store.commit_log.messages)
            assert isinstance(err, cq.StoreFormatError) and err.path == str(path), (case, err)
            # recovery starts at the third-to-last file and takes the ones before it as full
            assert store.commit_log.max_offset == ROWS_BY_OFFSET[-1]["commitLogOffset"] + ROWS_BY_OFFSET[-1][
                "storeSize"], case
            attempt(case, store.commit_log.read_message, off)
            store.close()
    _write(path, original)


# ------------------------------------------------------- ConsumeQueue and ext
def _queue_reads(case: str, store: cq.Store, topic: str, queue_id: int) -> None:
    cqueue = attempt(case, store.consume_queue, topic, queue_id)
    if isinstance(cqueue, Exception):
        return
    units = cqueue.read()
    for _first, batch in cqueue.iter_batches(batch_size=37):
        assert len(batch) <= 37
    assert len(units) == len(cqueue) == cqueue.max_offset - cqueue.min_offset, case
    ext = attempt(case, store.ext, topic, queue_id)
    if ext is not None and not isinstance(ext, Exception):
        for addr in units["tags_code"][:8].tolist():
            attempt(case, ext.get, addr)
        attempt(case, ext.read_batch, units["tags_code"])
        attempt(case, ext.read_many, units["tags_code"])
        attempt(case, drain, ext.units)
    for how in ({"tags": "TagA || TagB"}, {"sql": SQL}):
        result = store.consume(topic, "GID_SQL_A", queue_ids=[queue_id], **how)
        got = attempt(case, list, result)
        if not isinstance(got, Exception):
            stats = result.stats
            assert stats.units_scanned == len(units), case
            assert stats.delivered == len(got) <= stats.passed_commit_log <= stats.passed_consume_queue, case


def test_every_byte_flip_in_sampled_consume_queue_units(golden_copy):
    """Every byte of the first unit (^0xFF) and the last unit (^0x80) of every ConsumeQueue file."""
    cases = []
    for topic in (FILTER_TOPIC, PLAIN_TOPIC):
        for d in sorted((golden_copy / "consumequeue" / topic).iterdir()):
            for f in sorted(d.iterdir()):
                n_units = f.stat().st_size // fmt.CQ_STORE_UNIT_SIZE
                for u, mask in ((0, 0xFF), (n_units - 1, 0x80)):
                    for b in range(fmt.CQ_STORE_UNIT_SIZE):
                        cases.append((topic, int(d.name), f, u * 20 + b, mask))
    with Budget(120) as budget:
        for topic, queue_id, path, at, mask in cases[::STRIDE]:
            original = _read(path)
            budget.case = case = f"{path.relative_to(golden_copy)} byte {at} ^{mask:#04x}"
            mutated = _flipped(original, at, mask)
            _write(path, mutated)
            try:
                same_in_both_engines(case, "scan_tags", np.frombuffer(mutated, np.uint8),
                                     np.array(sorted({cq.tags_code("TagA"), cq.tags_code("TagB")}), np.int32))
                store = cq.Store(golden_copy)
                _queue_reads(case, store, topic, queue_id)
                store.close()
            finally:
                _write(path, original)


def _ext_unit_starts(path) -> list[int]:
    data = _read(path)
    pos, out = 0, []
    while pos + 2 <= len(data):
        size = int.from_bytes(data[pos:pos + 2], "big", signed=True)
        if size <= 0:
            break
        out.append(pos)
        pos += size
    return out


#: How many bitmap bytes of each swept ext unit are flipped (a fixed-seed sample).
EXT_BITMAP_SAMPLE = 3


def _ext_flip_points(size: int, rng: random.Random) -> list[int]:
    """The bytes of an ext unit of ``size`` bytes that the sweep flips, relative to its start.

    ``size`` and ``bitMapSize`` are read as lengths: every byte of them. ``tagsCode`` and
    ``msgStoreTime`` are copied out and compared whole (with a tag's hash code, with a group's
    born time): their first byte (sign, a far value) and last byte (a near value) take both
    kinds of change the others can. The bitmap is copied out as it is and tested bit by bit by
    the Bloom check alone (a flip there turns a hit into a prune or changes nothing, both
    already seen on intact units): a fixed-seed sample of its bytes.
    """
    head = fmt.EXT_UNIT_HEADER_DTYPE
    points: list[int] = []
    for name in head.names:
        dtype, at = head.fields[name][:2]
        ends = (at, at + dtype.itemsize - 1)
        points += ends if name in ("tags_code", "msg_store_time") else range(at, at + dtype.itemsize)
    bitmap = range(head.itemsize, size)
    return points + sorted(rng.sample(bitmap, min(EXT_BITMAP_SAMPLE, len(bitmap))))


def test_every_byte_flip_in_sampled_ext_units(golden_copy):
    """The length fields' bytes, the ends of the value fields and sampled bitmap bytes
    (:func:`_ext_flip_points`) of the first unit (^0xFF) and the last unit (^0x80) of each ext file."""
    rng = random.Random(11)
    cases = []
    for topic in (FILTER_TOPIC, PLAIN_TOPIC):
        for d in sorted((golden_copy / "consumequeue_ext" / topic).iterdir()):
            for f in sorted(d.iterdir()):
                starts = _ext_unit_starts(f)
                picks = sorted(set(starts[:1] + starts[-1:]))
                data = _read(f)
                for s in picks:
                    size = int.from_bytes(data[s:s + 2], "big")
                    for b in _ext_flip_points(size, rng):
                        cases.append((topic, int(d.name), f, s + b, 0xFF if s == starts[0] else 0x80))
                if starts:  # and the end-of-file marker / first unwritten bytes after the last unit
                    end = starts[-1] + int.from_bytes(data[starts[-1]:starts[-1] + 2], "big")
                    cases += [(topic, int(d.name), f, end + b, 0xFF) for b in range(2) if end + b < len(data)]
    with Budget(120) as budget:
        for topic, queue_id, path, at, mask in cases[::STRIDE]:
            original = _read(path)
            budget.case = case = f"{path.relative_to(golden_copy)} byte {at} ^{mask:#04x}"
            mutated = _flipped(original, at, mask)
            _write(path, mutated)
            try:
                buf = np.frombuffer(mutated, np.uint8)
                same_in_both_engines(case, "ext_walk", buf, 0)
                positions = np.array(_ext_unit_starts(path) or [0], dtype=np.int64)
                same_in_both_engines(case, "ext_units_at", buf, positions, len(mutated))
                same_in_both_engines(case, "ext_units_read", buf, positions, len(mutated))
                store = cq.Store(golden_copy)
                _queue_reads(case, store, topic, queue_id)
                store.close()
            finally:
                _write(path, original)


# ------------------------------------------------------------- garbage files
def _all_reads(case: str, root) -> None:
    store = attempt(case, cq.Store, root)
    if isinstance(store, Exception):
        return
    log = attempt(case, store.__getattribute__, "commit_log")
    if not isinstance(log, Exception):
        attempt(case, drain, log.messages)
        list(log.messages(strict=False))
        offsets = np.array([r["commitLogOffset"] for r in ROWS_BY_OFFSET], dtype=np.int64)
        attempt(case, log.decode_columns, offsets)
        attempt(case, log.gather_properties, offsets)
    for topic in store.topics():
        for q in store.queue_ids(topic):
            _queue_reads(case, store, topic, q)
    store.close()


@contextlib.contextmanager
def _allocation_cap(case: str, limit: int):
    """Python and numpy allocations (numpy reports to tracemalloc) stay under ``limit`` bytes."""
    tracemalloc.start()
    try:
        yield
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < limit, f"{case}: {peak} bytes allocated at peak (limit {limit})"


def _garbage(rng: random.Random, size: int, style: str) -> bytes:
    if style == "random":
        return rng.randbytes(size)
    if style == "ones":
        return b"\xff" * size
    if style == "big-sizes":  # every int32/int16 read from the file is huge or negative
        return (b"\x7f\xff\xff\xf0\xda\xa3\x20\xa7" * (size // 8 + 1))[:size]
    raise ValueError(style)


@pytest.mark.parametrize("style", ["random", "ones", "big-sizes"])
def test_garbage_files_named_like_store_files(golden_copy, style):
    """Whole files replaced by garbage, or added beside real ones: errors name file and offset,
    and no size read from the garbage makes a reader allocate more than a few MB."""
    rng = random.Random(f"garbage-{style}")
    targets = [
        ("replace", golden_copy / "commitlog" / fmt.file_name(0), CL_FILE_SIZE),
        ("replace", golden_copy / "commitlog" / fmt.file_name(6 * CL_FILE_SIZE), CL_FILE_SIZE),
        ("add", golden_copy / "commitlog" / fmt.file_name(7 * CL_FILE_SIZE), CL_FILE_SIZE),
        ("add", golden_copy / "commitlog" / fmt.file_name(7 * CL_FILE_SIZE), 1234),
        ("replace", golden_copy / "consumequeue" / FILTER_TOPIC / "0" / fmt.file_name(0), 1000),
        ("replace", golden_copy / "consumequeue" / FILTER_TOPIC / "1" / fmt.file_name(1000), 1000),
        ("add", golden_copy / "consumequeue" / PLAIN_TOPIC / "0" / fmt.file_name(1000), 1000),
        ("add", golden_copy / "consumequeue" / PLAIN_TOPIC / "7" / fmt.file_name(0), 1000),
        ("replace", golden_copy / "consumequeue_ext" / FILTER_TOPIC / "0" / fmt.file_name(0), 1024),
        ("replace", golden_copy / "consumequeue_ext" / FILTER_TOPIC / "0" / fmt.file_name(3072), 1024),
        ("add", golden_copy / "consumequeue_ext" / PLAIN_TOPIC / "0" / fmt.file_name(1024), 1024),
        ("add", golden_copy / "consumequeue_ext" / PLAIN_TOPIC / "7" / fmt.file_name(0), 1000),
    ]
    # the modules the reads import on first use (pyarrow, and what it imports) are no allocation
    # of theirs: read the intact copy once first, so that the test alone measures what it would
    # after other tests
    _all_reads("intact", golden_copy)
    with Budget(120) as budget:
        for how, path, size in targets[::STRIDE] if STRIDE > 1 and style != "random" else targets:
            budget.case = case = f"{style} garbage: {how} {path.relative_to(golden_copy)} ({size} bytes)"
            existed = path.exists()
            original = _read(path) if existed else None
            path.parent.mkdir(parents=True, exist_ok=True)
            _write(path, _garbage(rng, size, style))
            try:
                with _allocation_cap(case, 16 << 20):
                    _all_reads(case, golden_copy)
            finally:
                if existed:
                    _write(path, original)
                else:
                    os.remove(path)


# ------------------------------------------------ every registered reader (cq/readers/registry.py)
def _read_whole(case: str, entry, root) -> None:
    """Open ``entry``'s reader over ``root`` and read it whole; a StoreFormatError names a file of root."""
    def run():
        reader = entry.open(str(root))
        try:
            return entry.read_all(reader)
        finally:
            reader.close()
    run.__name__ = f"{entry.name} read whole"
    out = attempt(case, run)
    if isinstance(out, cq.StoreFormatError):
        assert out.path.startswith(str(root)), f"{case}: the error names {out.path}, outside the store"


def _sample_points(size: int, count: int) -> list[int]:
    """``count`` points spread over [0, size), the first and last byte included."""
    return sorted({0, size - 1, *(size * i // count for i in range(count))}) if size else []


def _sweep(golden_copy, entry, mutations) -> None:
    """Write each ``(label, bytes)`` of ``mutations(original)`` over every file ``entry`` reads, then read it whole."""
    root = entry_root(entry, golden_copy)
    with Budget(120) as budget:
        for path in entry.files(str(root)):
            original = _read(path)
            try:
                for label, data in mutations(original):
                    budget.case = case = f"{entry.name}: {os.path.basename(path)} {label}"
                    _write(path, data)
                    _read_whole(case, entry, root)
            finally:
                _write(path, original)


@pytest.mark.parametrize("entry", READERS, ids=repr)
def test_byte_flips_in_every_file_of_each_registered_reader(golden_copy, entry):
    """Sampled single-byte flips (all bits, then the high bit) in every file the reader reads."""
    _sweep(golden_copy, entry, lambda original: (
        (f"byte {at} ^ {mask:#x}", _flipped(original, at, mask))
        for at in _sample_points(len(original), 48 // STRIDE) for mask in (0xFF, 0x80)))


@pytest.mark.parametrize("entry", READERS, ids=repr)
def test_cut_points_of_every_file_of_each_registered_reader(golden_copy, entry):
    """Every file the reader reads cut at sampled points (and emptied): an answer or a named error."""
    _sweep(golden_copy, entry, lambda original: (
        (f"cut at {cut}", original[:cut]) for cut in _sample_points(len(original), 24 // STRIDE)))


# ------------------------------------------------ bounded-memory windows and slices
@pytest.mark.parametrize("window", [64, 700, 4096])
def test_windowed_walks_find_the_same_end(golden_copy, monkeypatch, window):
    """The walks map a CommitLog file window by window (records longer than a window included);
    every cut of the last record must still end the data where the whole-file walk does."""
    from cq.readers import commitlog

    last = ROWS_BY_OFFSET[-1]
    off = last["commitLogOffset"]
    start, name = _file_of(off)
    path = golden_copy / "commitlog" / name
    original = _read(path)
    expected = {}
    for cut in (0, 9, 100, last["storeSize"] - 1, last["storeSize"]):
        _write(path, original[:off - start + cut] + bytes(len(original) - (off - start) - cut))
        expected[cut] = (cq.Store(golden_copy).commit_log.max_offset, cq.Store(golden_copy).commit_log.count_records(),
                         len(list(cq.Store(golden_copy).commit_log.messages(strict=False))))
    monkeypatch.setattr(commitlog, "_WALK_WINDOW", window)
    for cut, want in expected.items():
        _write(path, original[:off - start + cut] + bytes(len(original) - (off - start) - cut))
        store = cq.Store(golden_copy)
        got = (store.commit_log.max_offset, store.commit_log.count_records(),
               len(list(store.commit_log.messages(strict=False))))
        assert got == want, (window, cut)
    _write(path, original)


def test_consume_in_small_slices_gives_the_same_messages(monkeypatch):
    import cq.store.consume as store_module

    store = cq.Store(DATA / "golden_store")
    cases = [{"sql": SQL}, {"tags": "TagA || TagB"}, {"tags": "*"}]

    def run():
        out = []
        for how in cases:
            result = store.consume(FILTER_TOPIC, "GID_SQL_A", **how)
            out.append(([(m.queue_id, m.queue_offset) for m in result], result.stats.as_dict()))
        return out

    want = run()
    assert all(messages for messages, _ in want)
    monkeypatch.setattr(store_module, "_SLICE_RECORDS", 3)
    monkeypatch.setattr(store_module, "_SLICE_SPAN", 1000)
    assert run() == want


@pytest.mark.parametrize("end", [0, 1, 203, 204, 205, 611, 612, 1427, 4999, 5000])
def test_consume_queue_recovery_in_growing_chunks_finds_every_end(tmp_path, end):
    """The end-of-data scan reads the file in growing chunks; the end is found wherever it falls."""
    units = np.zeros(5000, dtype=fmt.CQ_UNIT_DTYPE)
    units["commit_log_offset"] = np.arange(5000) * 100
    units["size"] = 100
    units["size"][end:] = 0
    if end < 5000 and end % 2:
        units["commit_log_offset"][end] = -1  # the other half of the validity rule
        units["size"][end] = 100
    d = tmp_path / "q"
    d.mkdir()
    units.tofile(d / fmt.file_name(0))
    cqueue = cq.ConsumeQueue(d)
    first_bad = next((i for i in range(5000) if units["commit_log_offset"][i] < 0 or units["size"][i] <= 0), 5000)
    assert first_bad == end
    assert cqueue.max_offset == end
    assert len(cqueue.read()) == end

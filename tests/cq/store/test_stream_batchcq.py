"""Streams over a BatchCQ topic read whole batches, each once (docs/live.md#batchcq-topics).

A queue offset of a BatchCQ topic counts messages and the broker serves a pull at an offset inside
a batch with the whole batch (docs/reading.md#batchcq). So a stream's offsets and batch ends stay
on batch boundaries: a batch end cut by ``max_units`` inside a batch would have the next batch read
that batch again. ``rmqfilter tail`` follows the same rule (cq.store.stream).
"""
from __future__ import annotations

import json
from contextlib import closing

from live_support import BatchCQWriter

import cq
from cq.store import stream

TOPIC = "T"
#: Batch sizes per queue: larger and smaller than the budgets below, so ends would fall inside batches.
SIZES = {0: [3, 5, 1, 7, 2], 1: [4, 4, 6]}


def _write(root, sizes=SIZES) -> BatchCQWriter:
    w = BatchCQWriter(root, TOPIC, queues=len(sizes))
    for q, ns in sizes.items():
        for n in ns:
            w.append(q, n)
    return w


def _bounds(w: BatchCQWriter) -> dict[str, set[int]]:
    """Each queue's batch boundaries, as offsets are keyed."""
    out = {}
    for q in range(len(w.ends)):
        units = w._units(q)
        out[str(q)] = {int(b) for b in units["base_offset"]} | {w.ends[q]}
    return out


def _all(store) -> list[tuple[int, int]]:
    return sorted((m.queue_id, m.queue_offset) for m in store.consume(TOPIC, "G", tags="*"))


def _stream(store, offsets, max_units, seen, ends, rounds=100):
    """Read ``store`` batch after batch as the streaming source does, from ``offsets``: what each read
    delivered into ``seen``, each batch's ends into ``ends``; returns the offsets reached."""
    for _ in range(rounds):
        cut = store.cut(TOPIC, keep_readers=True)
        batches = stream.batch_starts(store, cut, TOPIC)
        end = stream.next_offsets(offsets, cut, max_units=max_units, batches=batches)
        todo = stream.ranges(stream.next_offsets(offsets, cut, max_units=0, batches=batches), end, TOPIC)
        if not todo:
            return offsets
        ends.append(end[TOPIC])
        for q, r in todo.items():
            seen += [(m.queue_id, m.queue_offset)
                     for m in store.consume(TOPIC, "G", tags="*", queue_ids=[q], ranges={q: r}, cut=cut)]
        offsets = end
    raise AssertionError("the stream did not reach the end")


def test_batch_ends_are_batch_boundaries_and_every_message_is_read_once(tmp_path):
    """Budgets below, between and above the batch sizes: each message once, equal to ``Store.consume``,
    every batch end a batch boundary; a budget smaller than the next batch still moves on (whole batch)."""
    w = _write(tmp_path)
    bounds = _bounds(w)
    with closing(cq.Store(tmp_path)) as store:
        want = _all(store)
        assert len(want) == sum(map(sum, SIZES.values()))
        for max_units in (1, 2, 5, 9, None):
            seen, ends = [], []
            start = stream.starting_offsets(store, store.cut(TOPIC), "earliest")
            _stream(store, start, max_units, seen, ends)
            assert sorted(seen) == want and len(seen) == len(set(seen)), max_units
            assert all(int(off) in bounds[q] for e in ends for q, off in e.items()), (max_units, ends)
        # budget 2 over queue 1's batches of 4: the first batch end takes the next batch of each queue
        # whole (3 and 4 messages), more than the budget, rather than stand still
        cut = store.cut(TOPIC)
        first = stream.next_offsets({TOPIC: {"0": 0, "1": 0}}, cut, max_units=2,
                                    batches=stream.batch_starts(store, cut, TOPIC))
        assert first == {TOPIC: {"0": 3, "1": 4}}


def test_an_offset_inside_a_batch_starts_at_its_start_as_the_broker_serves_it(tmp_path):
    """JSON and committed offsets inside a batch start at the batch's start: the first read gives that
    batch whole (as the broker's pull does), and the offsets kept are batch boundaries from then on."""
    _write(tmp_path)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "consumerOffset.json").write_text(json.dumps({"offsetTable": {f"{TOPIC}@G": {"0": 5,
                                                                                                       "1": 9}}}))
    with closing(cq.Store(tmp_path)) as store:
        cut = store.cut(TOPIC)
        given = stream.starting_offsets(store, cut, {TOPIC: {"0": 4, "1": 8}})
        committed = stream.starting_offsets(store, cut, "committed", group="G")
        assert given == {TOPIC: {"0": 3, "1": 8}}  # 4 is inside [3, 8) of queue 0; 8 starts a batch of queue 1
        assert committed == {TOPIC: {"0": 3, "1": 8}}  # 5 inside [3, 8), 9 inside [8, 14)
        seen, ends = [], []
        _stream(store, given, 2, seen, ends)
        assert sorted(seen) == [(q, o) for q, o in _all(store) if o >= (3 if q == 0 else 8)]
        assert len(seen) == len(set(seen))


def test_tail_gives_each_message_of_a_growing_batch_cq_topic_once(tmp_path):
    """``rmqfilter tail`` over a BatchCQ topic while batches arrive between its rounds, from an offset
    inside a batch: that batch whole, then every message once."""
    w = _write(tmp_path)
    arriving = [(0, 4), (1, 2), (0, 1), (1, 5)]
    idle, rounds = [], []  # rounds that found nothing new once every batch had arrived; every round

    def stop():
        rounds.append(True)
        return bool(idle) or len(rounds) > 50  # bounded, should a tail never run out of new messages

    def sleep(_interval):
        if arriving:
            w.append(*arriving.pop(0))
        else:
            idle.append(True)

    with closing(cq.Store(tmp_path)) as store:
        got = [(m.queue_id, m.queue_offset, m.body) for m in stream.tail(
            store, TOPIC, "G", tags="*", starting={TOPIC: {"0": 10}}, sleep=sleep, interval=0, stop=stop)]
        want = [(q, o, f"{q}:{o}".encode()) for q, o in _all(store) if q == 1 or o >= 9]  # 10 is inside [9, 16)
    assert sorted(got) == want and len(got) == len(set(got))


def test_offsets_per_broker_keep_each_brokers_batches_whole(tmp_path):
    """Over several stores each broker's batch ends are its own batches' boundaries and the budget is
    shared: every message of both once."""
    writers = {b: _write(tmp_path / b, sizes) for b, sizes in (("east", SIZES), ("west", {0: [6, 1, 6], 1: [2]}))}
    stores = {b: cq.Store(tmp_path / b) for b in writers}
    try:
        offsets = {b: {} for b in stores}
        seen = []
        for _ in range(100):
            cuts = {b: s.cut(TOPIC, keep_readers=True) for b, s in stores.items()}
            batches = {b: stream.batch_starts(stores[b], cut, TOPIC) for b, cut in cuts.items()}
            end = stream.next_broker_offsets(offsets, cuts, max_units=3, batches=batches)
            if end == offsets:
                break
            for b, s in stores.items():
                assert all(int(o) in _bounds(writers[b])[q] for q, o in end[b][TOPIC].items())
                begin = stream.next_offsets(offsets[b], cuts[b], max_units=0, batches=batches[b])
                for q, r in stream.ranges(begin, end[b], TOPIC).items():
                    seen += [(b, m.queue_id, m.queue_offset)
                             for m in s.consume(TOPIC, "G", tags="*", queue_ids=[q], ranges={q: r}, cut=cuts[b])]
            offsets = end
        want = sorted((b, q, o) for b, s in stores.items() for q, o in _all(s))
        assert sorted(seen) == want and len(seen) == len(set(seen))
    finally:
        for s in stores.values():
            s.close()

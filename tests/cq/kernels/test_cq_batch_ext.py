"""``ConsumeQueueExt.read_batch`` equals ``get`` per address: on the golden store and on corrupt files."""
from __future__ import annotations

import shutil
import struct

import numpy as np
import pytest
from helpers import DATA

import cq
from cq import format as fmt

TOPIC = "GoldenFilterTopic"


def _per_item(ext, addresses):
    out = []
    for a in addresses:
        try:
            out.append(ext.get(int(a)))
        except cq.StoreFormatError as exc:
            return out, (str(exc), exc.path, exc.offset)
    return out, None


def _batch(ext, addresses):
    try:
        b = ext.read_batch(addresses)
    except cq.StoreFormatError as exc:
        return None, (str(exc), exc.path, exc.offset)
    return [b.unit(i) for i in range(len(addresses))], None


def _assert_same(ext, addresses):
    items, err = _per_item(ext, addresses)
    batch, berr = _batch(ext, addresses)
    assert berr == err
    if err is None:
        assert batch == items
    return items


def _queue_slots(store, topic):
    out = []
    for q in store.queue_ids(topic):
        units = store.consume_queue(topic, q).read(0, 1 << 20)
        out.append((q, units["tags_code"]))
    return out


def test_golden_store_every_slot_and_probe_addresses():
    store = cq.Store(DATA / "golden_store")
    seen = 0
    for topic in store.topics():
        for q, slots in _queue_slots(store, topic):
            ext = store.ext(topic, q)
            if ext is None:
                continue
            max_addr = fmt.decorate(ext.max_offset)
            probes = np.array([fmt.decorate(0), fmt.decorate(1), max_addr, max_addr - 1, fmt.decorate(ext.file_size),
                               fmt.decorate(10 * ext.file_size), 0, 7, -1, fmt.MAX_ADDR, np.iinfo(np.int64).min],
                              dtype=np.int64)
            items = _assert_same(ext, np.concatenate([slots[::-1], slots]))
            for probe in probes.tolist():  # one probe per call: a probe that raises hides the rest
                _assert_same(ext, np.array([slots[0], probe, slots[-1]], dtype=np.int64))
            seen += sum(u is not None and u.filter_bitmap is not None for u in items)
    assert seen > 0  # bitmaps were compared, not only misses


def test_batch_fields_and_shapes():
    store = cq.Store(DATA / "golden_store")
    ext = store.ext(TOPIC, 0)
    slots = store.consume_queue(TOPIC, 0).read(0, 1 << 20)["tags_code"]
    b = ext.read_batch(slots)
    assert b.found.all()
    assert b.bitmaps.shape == (len(slots), int(b.bit_map_size.max()))
    assert (b.size == 20 + np.maximum(b.bit_map_size, 0)).all()
    assert ext.read_batch(np.zeros(0, dtype=np.int64)).bitmaps.shape == (0, 0)


@pytest.fixture
def ext_copy(tmp_path):
    src = DATA / "golden_store" / "consumequeue_ext" / TOPIC / "0"
    dst = tmp_path / "ext"
    shutil.copytree(src, dst)
    ext = cq.ConsumeQueueExt(dst)
    units = list(ext.units())
    ext.close()
    return dst, units


def _file(dst, real):
    """(path, position) of real ext offset ``real`` in the copied directory."""
    ext = cq.ConsumeQueueExt(dst)
    index = ext.file_index(real)
    path, size = ext.files[index][1], ext.file_size
    ext.close()
    return path, real % size


def test_bitmap_past_the_readable_end_raises_like_get(ext_copy):
    dst, units = ext_copy
    addr, _ = units[-1]
    path, pos = _file(dst, fmt.undecorate(addr))
    with open(path, "r+b") as f:  # last unit claims a bitmap far longer than what follows
        f.seek(pos + 18)
        f.write(struct.pack(">h", 4000))
    ext = cq.ConsumeQueueExt(dst)
    addresses = np.array([a for a, _ in units] + [units[0][0]], dtype=np.int64)
    _, err = _per_item(ext, addresses)
    assert err is not None and err[2] == pos
    _assert_same(ext, addresses)


def test_first_error_in_input_order_and_short_heads(ext_copy):
    dst, units = ext_copy
    ext = cq.ConsumeQueueExt(dst)
    last = len(ext.files) - 1
    start, limit = ext.files[last][0], ext.limit(last)
    # misaligned addresses into the last units: where two bytes read as size >= 1
    # with fewer than 20 bytes readable, get() raises on the short head
    short = []
    for k in range(1, 20):
        address = fmt.decorate(start + limit - k)
        _, err = _per_item(ext, [address])
        if err is not None:
            assert "head needs 20 bytes" in err[0] and err[2] == limit - k
            short.append(address)
        _assert_same(ext, np.array([units[0][0], address, units[1][0]], dtype=np.int64))
    assert short, "no short head found near the readable end"
    # two failing addresses in either order: the error is the first one's
    bad = np.array([units[0][0], fmt.decorate(1), short[0]], dtype=np.int64)
    _assert_same(ext, bad)
    _assert_same(ext, bad[::-1].copy())


def test_one_long_bitmap_stays_compact(ext_copy):
    dst, units = ext_copy
    addr = units[0][0]
    path, pos = _file(dst, fmt.undecorate(addr))
    ext0 = cq.ConsumeQueueExt(dst)
    room = ext0.limit(ext0.file_index(fmt.undecorate(addr))) - pos - fmt.MIN_EXT_UNIT_SIZE
    ext0.close()
    with open(path, "r+b") as f:  # the first unit's bitmap now reads across the units after it
        f.seek(pos + 18)
        f.write(struct.pack(">h", room))
    ext = cq.ConsumeQueueExt(dst)
    addresses = np.array([a for a, _ in units] * 50, dtype=np.int64)
    items = _assert_same(ext, addresses)
    assert len(items[0].filter_bitmap) == room
    b = ext.read_batch(addresses)
    assert len(b.bitmap_data) == sum(len(u.filter_bitmap or b"") for u in items if u is not None)
    assert b.bitmaps.shape[1] == room


def test_addresses_across_several_ext_files(tmp_path):
    """A queue whose ext units fill several files: rows in any order, and misses beside them, come
    back as ``get`` gives each (the batch gathers each file's units, then places them in input order)."""
    t0 = 1_700_000_000_000
    with cq.StoreWriter(tmp_path, enable_ext=True, cluster=None, commit_log_file_size=1 << 16,
                        ext_file_size=1 << 10, consume_queue_file_size=20 * 64) as w:
        w.register_group("T", "G", "n > 3", born_time=t0 - 1)
        for i in range(300):
            w.append("T", b"x", properties={"n": str(i % 7)}, store_timestamp=t0 + i)
    store = cq.Store(tmp_path)
    ext = store.ext("T", 0)
    assert len(ext.files) > 3
    slots = store.consume_queue("T", 0).read(0, 1 << 20)["tags_code"]
    order = np.random.default_rng(3).permutation(len(slots))
    items = _assert_same(ext, np.concatenate([slots[order], [0, 7, fmt.decorate(50 * ext.file_size)]]).astype(np.int64))
    assert sum(u is not None and u.filter_bitmap is not None for u in items) == len(slots)
    store.close()

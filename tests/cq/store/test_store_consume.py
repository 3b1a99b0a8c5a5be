"""Store.consume replays what each golden SQL92 group received, with the per-layer counts."""
from __future__ import annotations

import itertools
import os

import pytest
from helpers import DATA, load_jsonl

import cq

ROWS = load_jsonl("golden_store.jsonl")
TOPIC = "GoldenFilterTopic"
GROUPS = {g["group"]: g["sql"] for g in ROWS[0]["groups"]}


@pytest.fixture(scope="module")
def store():
    selector = pytest.importorskip("selector")
    if not hasattr(selector, "compile"):
        pytest.skip("selector.compile has not landed yet")
    s = cq.Store(DATA / "golden_store")
    yield s
    s.close()


def _decisions(group):
    out = []
    for r in sorted(ROWS, key=lambda r: (r["queueId"], r["queueOffset"])):
        if r["topic"] == TOPIC:
            g = next(g for g in r["groups"] if g["group"] == group)
            out.append(((r["queueId"], r["queueOffset"]), g["matched"], g["bloomHit"]))
    return out


def test_delivered_counts_what_the_caller_took(store):
    """A caller that stops early (``consume --limit``) sees ``delivered`` count the messages it took."""
    group = max(GROUPS, key=lambda g: sum(m for _, m, _ in _decisions(g)))  # the most per slice
    result = store.consume(TOPIC, group, sql=GROUPS[group])
    took = list(itertools.islice(result, 2))
    assert len(took) == 2 and result.stats.delivered == 2
    assert result.stats.passed_commit_log > 2  # the slice was decoded whole, only two were handed out


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_received_set_and_layer_counts(store, group):
    decisions = _decisions(group)
    result = store.consume(TOPIC, group, sql=GROUPS[group])
    got = [(m.queue_id, m.queue_offset) for m in result]
    assert got == [k for k, matched, _ in decisions if matched]
    st = result.stats
    hits = sum(1 for _, _, hit in decisions if hit)
    assert st.units_scanned == st.bloom_tested == 200
    assert st.passed_consume_queue == hits and st.bloom_pruned == 200 - hits
    assert st.bloom_false_positives == sum(1 for _, m, hit in decisions if hit and not m)
    assert st.passed_commit_log == st.delivered == len(got)
    assert all(not m or hit for _, m, hit in decisions)  # the bitmap never loses a match


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_without_bitmaps_the_commit_log_layer_alone_decides(store, group):
    decisions = _decisions(group)
    for kwargs in ({"bloom_filter": None}, {"born_time": 2**62}):
        result = store.consume(TOPIC, group, sql=GROUPS[group], **kwargs)
        assert [(m.queue_id, m.queue_offset) for m in result] == [k for k, m, _ in decisions if m]
        assert result.stats.bloom_tested == 0 and result.stats.passed_consume_queue == 200


def test_a_group_whose_bits_were_never_computed_is_pruned_by_its_own_positions(store):
    # a new SQL for GID_SQL_A: the stored bitmaps still carry the old expression's bits,
    # so layer 1 prunes exactly as the broker would, then layer 2 decides
    result = store.consume(TOPIC, "GID_SQL_A", sql="a IS NOT NULL")
    got = {(m.queue_id, m.queue_offset) for m in result}
    assert got == {k for k, _, hit in _decisions("GID_SQL_A") if hit}
    assert result.stats.bloom_false_positives == 0


def test_queue_selection_and_progress(store):
    seen = []
    result = store.consume(TOPIC, "GID_SQL_B", sql=GROUPS["GID_SQL_B"], queue_ids=[1],
                           progress=lambda done, total: seen.append((done, total)))
    got = list(result)
    assert {m.queue_id for m in got} == {1} and seen[-1] == (100, 100)
    with pytest.raises(ValueError, match="not both"):
        store.consume(TOPIC, "G", sql="a = 1", tags="TagA")


def test_bitmap_hits_rejected_by_the_selector_count_as_false_positives(store):
    # GID_SQL_B's stored bits were set by "TAGS = 'TagA' OR color IN (...)"; consuming with a
    # narrower selector makes every bitmap hit without TAGS = 'TagA' a layer-2 rejection
    hits = {k for k, _, hit in _decisions("GID_SQL_B") if hit}
    tag_a = {(r["queueId"], r["queueOffset"]) for r in ROWS if r["topic"] == TOPIC and r["tags"] == "TagA"}
    result = store.consume(TOPIC, "GID_SQL_B", sql="TAGS = 'TagA'")
    got = {(m.queue_id, m.queue_offset) for m in result}
    assert got == hits & tag_a
    assert result.stats.bloom_false_positives == len(hits - tag_a) > 0
    assert result.stats.passed_consume_queue == len(hits)


def test_store_without_ext_files(tmp_path, store):
    """With ext disabled the slot holds the tag code itself: the scan_tags path, and no bitmap layer."""
    import shutil

    import numpy as np

    from cq import format as fmt

    root = tmp_path / "store"
    shutil.copytree(DATA / "golden_store", root)
    for topic in store.topics():
        for q in store.queue_ids(topic):
            ext = store.ext(topic, q)
            for start, path in store.consume_queue(topic, q).files:
                local = root / "consumequeue" / topic / str(q) / os.path.basename(path)
                units = np.fromfile(local, dtype=fmt.CQ_UNIT_DTYPE)
                for i in range(len(units)):
                    if cq.is_ext_addr(int(units[i]["tags_code"])):
                        units[i]["tags_code"] = ext.get(int(units[i]["tags_code"])).tags_code
                units.tofile(local)
    shutil.rmtree(root / "consumequeue_ext")
    plain = cq.Store(root)
    assert plain.ext(TOPIC, 0) is None
    for tags in ("TagA || TagB", "标签", "*"):
        want = [(m.queue_id, m.queue_offset) for m in store.consume(TOPIC, "G", tags=tags)]
        assert [(m.queue_id, m.queue_offset) for m in plain.consume(TOPIC, "G", tags=tags)] == want
    for group, sql in GROUPS.items():
        result = plain.consume(TOPIC, group, sql=sql)
        assert [(m.queue_id, m.queue_offset) for m in result] == [k for k, m, _ in _decisions(group) if m]
        assert result.stats.bloom_tested == 0 and result.stats.passed_consume_queue == 200

"""``cq.why`` and ``cq.backlog``: one message through the broker's filter, and the real backlog.

The central property: why's verdict for every unit equals membership in ``Store.consume``'s
output, for every group, on the golden store (written by RocketMQ) and on a sample store.
"""
from __future__ import annotations

import json
import shutil

import pytest
from helpers import DATA, RETRY_MESSAGES, write_retry_store

import bloom
import cq
from cq.analyses.why import MessageNotFoundError, resolve_subscription
from cq.writer.config_writer import write_consumer_filters, write_consumer_offsets
from cq.writer.sample import SAMPLE_GROUPS, generate_sample_store

GOLDEN = DATA / "golden_store"
FILTER_TOPIC = "GoldenFilterTopic"
GOLDEN_GROUPS = {
    "GID_SQL_A": "a > 5 AND b = 'abc'",
    "GID_SQL_B": "TAGS = 'TagA' OR color IN ('red', 'grün')",
    "GID_SQL_C": "num BETWEEN 10 AND 20 OR (city IS NOT NULL AND city = '北京')",
}
SMALL = {"commit_log_file_size": 1 << 20, "ext_file_size": 1 << 16, "consume_queue_file_size": 20_000}
BF = bloom.BloomFilter()


def golden_rows() -> list[dict]:
    with open(DATA / "golden_store.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def golden_registered(tmp_path_factory):
    """A copy of the golden store with the config a broker serving its three groups would persist.

    GID_SQL_A was born before every message, GID_SQL_B in the middle of the traffic (older
    bitmaps are not trusted: isMsgInLive), GID_SQL_C after the last message.
    """
    root = tmp_path_factory.mktemp("golden") / "store"
    shutil.copytree(GOLDEN, root)
    times = sorted(r["storeTimestamp"] for r in golden_rows() if r["topic"] == FILTER_TOPIC)
    born = {"GID_SQL_A": times[0] - 1, "GID_SQL_B": times[len(times) // 2], "GID_SQL_C": times[-1]}
    write_consumer_filters(root, [
        cq.RegisteredFilter(g, FILTER_TOPIC, sql, "SQL92", born[g], 0, BF.generate(f"{g}#{FILTER_TOPIC}"), born[g],
                            True)
        for g, sql in GOLDEN_GROUPS.items()
    ], pretty=True)
    write_consumer_offsets(root, {(FILTER_TOPIC, "GID_SQL_A"): {0: 40, 1: 0},
                                  (FILTER_TOPIC, "GID_SQL_B"): {0: 99, 1: -1}}, timestamp=0)
    return root


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    # 1,000 messages: every group still has units each layer drops and units it delivers (the
    # agreement tests assert both), and why runs once per unit of the topic for each group
    return generate_sample_store(tmp_path_factory.mktemp("sample") / "store", messages=1000, seed=3, **SMALL)


def check_why_agrees_with_consume(store: cq.Store, topic: str, group: str, **how) -> dict:
    """Every unit of every queue: why's verdict == membership in consume's output; per-step
    counts == consume's per-layer stats. Returns the counts."""
    result = store.consume(topic, group, **how)
    delivered = {m.commit_log_offset for m in result}
    st = result.stats
    counts = {"units": 0, "layer1_drop": 0, "layer2_drop": 0, "client_drop": 0, "delivered": 0}
    for q in store.queue_ids(topic):
        cqueue = store.consume_queue(topic, q)
        for off in range(cqueue.min_offset, cqueue.max_offset):
            w = cq.why(store, topic, group, queue_id=q, queue_offset=off, **how)
            counts["units"] += 1
            assert w.delivered == (w.commit_log_offset in delivered), (group, q, off, str(w))
            assert (w.dropped_by is None) == w.delivered
            counts["delivered"] += w.delivered
            counts["layer1_drop"] += w.dropped_by == "consume_queue"
            counts["layer2_drop"] += w.dropped_by == "commit_log"
            counts["client_drop"] += w.dropped_by == "client"
    assert counts["units"] == st.units_scanned
    assert counts["delivered"] == st.delivered == len(delivered)
    assert counts["layer1_drop"] == st.units_scanned - st.passed_consume_queue
    assert counts["layer2_drop"] == st.passed_consume_queue - st.passed_commit_log  # missing records included
    assert counts["client_drop"] == st.client_filtered
    return counts


# ------------------------------------------------------------------ agreement with consume
@pytest.mark.parametrize("group", sorted(GOLDEN_GROUPS))
def test_why_agrees_with_consume_on_the_golden_store_given_sql(group):
    store = cq.Store(GOLDEN)
    counts = check_why_agrees_with_consume(store, FILTER_TOPIC, group, sql=GOLDEN_GROUPS[group])
    assert counts["layer1_drop"] > 0 and counts["delivered"] > 0  # the bitmaps prune, and some get through
    store.close()


@pytest.mark.parametrize("tags", ["TagA || TagC", "*", "标签 || Ωmega", "   "])
@pytest.mark.parametrize("topic", ["GoldenFilterTopic", "GoldenPlainTopic"])
def test_why_agrees_with_consume_on_the_golden_store_for_tags(topic, tags):
    store = cq.Store(GOLDEN)
    check_why_agrees_with_consume(store, topic, "GID_TAGS", tags=tags)
    store.close()


@pytest.mark.parametrize("group", sorted(GOLDEN_GROUPS))
def test_why_agrees_with_consume_for_registered_groups(golden_registered, group):
    store = cq.Store(golden_registered)
    counts = check_why_agrees_with_consume(store, FILTER_TOPIC, group)
    # looked up or given, the group receives the same messages (layer 1 only prunes) ...
    by_sql = {m.commit_log_offset for m in store.consume(FILTER_TOPIC, group, sql=GOLDEN_GROUPS[group])}
    assert counts["delivered"] == len(by_sql)
    # ... but bitmaps older than the registration are not used
    if group == "GID_SQL_C":
        assert counts["layer1_drop"] == 0
    store.close()


@pytest.mark.parametrize("group", [g for g, _ in SAMPLE_GROUPS])
def test_why_agrees_with_consume_on_a_sample_store(sample, group):
    store = cq.Store(sample.root)
    counts = check_why_agrees_with_consume(store, sample.main_topic, group)
    assert counts["layer1_drop"] > 0 and counts["delivered"] > 0
    store.close()


def test_why_agrees_with_consume_for_a_tag_group_on_a_sample_store(sample):
    store = cq.Store(sample.root)
    counts = check_why_agrees_with_consume(store, sample.main_topic, "GID_TAGS", tags="TagB || TagC")
    assert counts["layer1_drop"] > 0 and counts["delivered"] > 0
    store.close()


# ------------------------------------------------------------------ what why shows
def test_is_msg_in_live_uses_the_registered_born_time(golden_registered):
    store = cq.Store(golden_registered)
    born = store.registered_filter(FILTER_TOPIC, "GID_SQL_B").born_time
    reasons = set()
    for r in golden_rows():
        if r["topic"] != FILTER_TOPIC:
            continue
        w = cq.why(store, FILTER_TOPIC, "GID_SQL_B", queue_id=r["queueId"], queue_offset=r["queueOffset"])
        live = next(s for s in w.steps if s.name == "is_msg_in_live")
        assert live.evidence["in_live"] == (r["storeTimestamp"] > born)
        if not live.evidence["in_live"]:
            assert w.steps[1].reason == "not_in_live" and w.steps[1].result == "pass"
        reasons.add(w.steps[1].reason)
    assert reasons == {"not_in_live", "bloom_hit", "bloom_miss"}


def test_why_shows_every_step_with_its_evidence(golden_registered):
    store = cq.Store(golden_registered)
    rows = [r for r in golden_rows() if r["topic"] == FILTER_TOPIC]
    row = next(r for r in rows if any(g["group"] == "GID_SQL_A" and not g["bloomHit"] for g in r["groups"])
               and r["storeTimestamp"] > 0)
    w = cq.why(store, FILTER_TOPIC, "GID_SQL_A", queue_id=row["queueId"], queue_offset=row["queueOffset"])
    assert (w.delivered, w.dropped_by) == (False, "consume_queue")
    assert (w.commit_log_offset, w.msg_id) == (row["commitLogOffset"], row["msgId"])
    names = [s.name for s in w.steps]
    assert names == ["consume_queue_unit", "consume_queue", "is_msg_in_live", "commit_log", "client"]
    layer1 = w.steps[1]
    positions = next(g["bloomBitPos"] for g in row["groups"] if g["group"] == "GID_SQL_A")
    assert layer1.reason == "bloom_miss" and layer1.evidence["bit_positions"] == positions
    assert layer1.evidence["ext_unit"]["bitmap"] == bytes(row["ext"]["bitmap"]).hex()
    assert layer1.evidence["bits_missing"] and set(layer1.evidence["bits_missing"]) <= set(positions)
    assert w.steps[2].evidence == {"msg_store_time": row["storeTimestamp"], "born_time": w.subscription.born_time,
                                   "in_live": True}
    assert [s.result for s in w.steps[3:]] == ["not_reached", "not_reached"]
    text = str(w)
    assert "CLEAR" in text and "NOT DELIVERED: dropped by the ConsumeQueue layer" in text
    assert "registered in config/consumerFilter.json: bornTime" in text
    d = json.loads(json.dumps(w.to_dict()))
    assert {"delivered", "dropped_by", "queue_id", "queue_offset", "commit_log_offset", "steps"} <= set(d)
    assert d["dropped_by"] == "consume_queue" and d["steps"][1]["evidence"]["bits_missing"]


def test_why_layer2_carries_the_explain_tree(golden_registered):
    store = cq.Store(golden_registered)
    rows = [r for r in golden_rows() if r["topic"] == FILTER_TOPIC]
    # a message that passes layer 1 and that the selector rejects: a Bloom false positive, or not in live
    seen = {"delivered": False, "commit_log": False}
    for r in rows:
        w = cq.why(store, FILTER_TOPIC, "GID_SQL_B", queue_id=r["queueId"], queue_offset=r["queueOffset"])
        g = next(g for g in r["groups"] if g["group"] == "GID_SQL_B")
        if w.steps[1].result == "pass":
            layer2 = next(s for s in w.steps if s.name == "commit_log")
            assert w.explanation is not None and w.explanation.matched == g["matched"]
            assert layer2.evidence["explain"]["value"] == w.explanation.value
            assert ("TRUE" if g["matched"] else w.explanation.value) == layer2.evidence["value"]
            assert "selector:" in layer2.detail and "decided at" in layer2.detail
            seen["delivered" if w.delivered else "commit_log"] = True
            if not w.delivered:
                assert w.dropped_by == "commit_log"
    assert all(seen.values())


def test_why_tag_group_client_recheck(tmp_path):
    """A tag-code collision passes layer 1 and is dropped by the client's exact re-check."""
    root = tmp_path / "s"
    with cq.StoreWriter(root, commit_log_file_size=1 << 16) as w:
        # "Aa" and "BB" have the same String.hashCode
        assert cq.tags_code("Aa") == cq.tags_code("BB")
        w.append("T", b"1", tags="Aa", queue_id=0)
        w.append("T", b"2", tags="BB", queue_id=0)
        w.append("T", b"3", queue_id=0)
    store = cq.Store(root)
    got = [cq.why(store, "T", "G", tags="Aa", queue_id=0, queue_offset=i) for i in range(3)]
    assert [(x.delivered, x.dropped_by) for x in got] == [(True, None), (False, "client"), (False, "consume_queue")]
    assert got[1].steps[-1].reason == "tag_not_in_set" and "collision" in got[1].steps[-1].detail
    assert got[2].steps[1].reason == "tags_code_not_in_set"
    check_why_agrees_with_consume(store, "T", "G", tags="Aa")


# ------------------------------------------------------------------ retry topics (filterSupportRetry)
RETRY_TOPIC_OF_G = "%RETRY%GID_ORDERS"


@pytest.fixture(scope="module")
def retry_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("retry") / "store"
    write_retry_store(root)
    store = cq.Store(root)
    yield store
    store.close()


def _retry_whys(store: cq.Store, **how) -> list:
    return [cq.why(store, RETRY_TOPIC_OF_G, "GID_ORDERS", queue_id=0, queue_offset=i, filter_support_retry=True, **how)
            for i in range(len(RETRY_MESSAGES))]


def _layer2(w):
    return next(s for s in w.steps if s.name == "commit_log")


def test_why_retry_filter_names_the_registered_filter_that_decided(retry_store):
    got = _retry_whys(retry_store)
    assert all(w.subscription.retry_filter and w.steps[1].result == "pass" for w in got)  # layer 1 lets all through
    assert [(w.delivered, w.dropped_by) for w in got] == [
        (True, None), (False, "commit_log"), (True, None), (False, "commit_log"), (True, None)]
    assert [_layer2(w).reason for w in got] == [
        "retry_selector_true", "retry_selector_false", "retry_not_registered", "retry_no_properties",
        "retry_no_retry_topic"]
    # the registered filter of (OrderTopic, GID_ORDERS) decided, not the group's own "price > 100"
    decided = _layer2(got[1])
    retry = decided.evidence["retry"]
    assert retry["retry_topic"] == "OrderTopic" and retry["lookup"] == ["OrderTopic", "GID_ORDERS"]
    assert retry["decided_by"] == "registered" and retry["expression"] == "price > 30"
    assert retry["registration"]["born_time"] == retry_store.registered_filter("OrderTopic", "GID_ORDERS").born_time
    assert decided.evidence["value"] == "FALSE" and got[1].explanation.sql == "price > 30"
    assert got[0].explanation.value == "TRUE"
    text = str(got[1])
    assert "the filter registered for (OrderTopic, GID_ORDERS) decides: selector FALSE" in text
    assert "registered SQL92 'price > 30'" in text and "price > 100" not in text.split("filter    ")[1]
    assert "filterSupportRetry" in text.splitlines()[2]
    assert got[1].verdict.startswith("NOT DELIVERED: dropped by the CommitLog layer (layer 2): retry filter: "
                                     "RETRY_TOPIC 'OrderTopic'")
    # nothing registered for (AuditTopic, GID_ORDERS): delivered, and said so
    audit = _layer2(got[2])
    assert audit.evidence["retry"]["lookup"] == ["AuditTopic", "GID_ORDERS"]
    assert audit.evidence["retry"]["registration"] is None and got[2].explanation is None
    assert "no filter registered for (AuditTopic, GID_ORDERS): the broker delivers it" in str(got[2])
    # a retry record without properties: an explanation, not a crash
    bare = _layer2(got[3])
    assert bare.evidence["retry"]["decided_by"] == "no_properties" and bare.result == "drop"
    assert "the record has no properties" in got[3].verdict and "lookup throws" in got[3].verdict
    assert "no RETRY_TOPIC property" in _layer2(got[4]).detail
    docs = json.loads(json.dumps([w.to_dict() for w in got]))
    assert [d["subscription"]["retry_filter"] for d in docs] == [True] * len(got)
    assert [d["steps"][-2]["evidence"]["retry"]["decided_by"] for d in docs] == [
        "registered", "registered", "not_registered", "no_properties", "no_retry_topic"]


def test_why_retry_topic_without_filter_support_retry_uses_the_groups_own_expression(retry_store):
    w = cq.why(retry_store, RETRY_TOPIC_OF_G, "GID_ORDERS", queue_id=0, queue_offset=0)
    assert not w.subscription.retry_filter and w.to_dict()["subscription"]["retry_filter"] is False
    assert (w.delivered, w.dropped_by) == (False, "commit_log")  # price > 100, the broker's default
    layer2 = _layer2(w)
    assert layer2.reason == "selector_false" and layer2.evidence["retry"] == {
        "filter_support_retry": False, "retry_topic": "OrderTopic"}
    assert "filterSupportRetry is off" in layer2.detail
    # the record without properties is an ordinary NULL there
    assert _layer2(cq.why(retry_store, RETRY_TOPIC_OF_G, "GID_ORDERS", queue_id=0, queue_offset=3)).reason == \
        "selector_null"


def test_why_retry_filter_given_sql_and_tags(retry_store):
    # a given SQL92 subscription goes through the retry filter too; its own expression never decides
    given = _retry_whys(retry_store, sql="price < 0")
    assert [w.delivered for w in given] == [True, False, True, False, True]
    assert given[0].subscription.source == "given" and given[0].subscription.retry_filter
    assert _layer2(given[0]).evidence["retry"]["expression"] == "price > 30"
    # a TAG subscription matches at layer 2 before the RETRY_TOPIC lookup (the Java push consumer's "*")
    tagged = _retry_whys(retry_store, tags="*")
    assert all(w.delivered and _layer2(w).reason == "tag_subscription" for w in tagged)
    assert "never reaches its RETRY_TOPIC lookup" in _layer2(tagged[1]).detail
    assert "a TAG subscription matches at layer 2 before the RETRY_TOPIC lookup" in str(tagged[1])


def test_why_retry_filter_registration_without_expression(tmp_path):
    """A registration for the RETRY_TOPIC whose expression does not compile: the broker has no compiled
    expression there and delivers; why says so, and warns naming the registration."""
    root = tmp_path / "store"
    write_retry_store(root)
    store = cq.Store(root)
    broken = cq.RegisteredFilter("GID_ORDERS", "AuditTopic", "price >", "SQL92", 5, 0,
                                 BF.generate("GID_ORDERS#AuditTopic"), 5, True)
    write_consumer_filters(root, [*store.registered_filters(), broken])
    with pytest.warns(cq.readers.config.ConfigWarning, match="'GID_ORDERS' on topic 'AuditTopic'.*does not compile"):
        w = cq.why(store, RETRY_TOPIC_OF_G, "GID_ORDERS", queue_id=0, queue_offset=2, filter_support_retry=True)
    layer2 = _layer2(w)
    assert w.delivered and layer2.reason == "retry_registered_no_expression"
    assert layer2.evidence["retry"]["registration"]["born_time"] == 5
    assert "registered for (AuditTopic, GID_ORDERS) decides: it has no compiled expression" in layer2.detail
    store.close()


def test_why_retry_filter_agrees_with_consume_through_the_same_filter(retry_store):
    """why's verdicts are consume's with the retry filter why builds; at the record without properties
    consume fails, naming it, as the broker's pull does (why says the pull fails there)."""
    flt, _ = resolve_subscription(retry_store, RETRY_TOPIC_OF_G, "GID_ORDERS", filter_support_retry=True)
    assert isinstance(flt, cq.RetrySqlFilter)
    bare = [i for i, (props, _) in enumerate(RETRY_MESSAGES) if props is None]
    at = retry_store.consume_queue(RETRY_TOPIC_OF_G, 0).read(bare[0], 1)["commit_log_offset"][0]
    with pytest.raises(cq.filter.layers.RetryPropertiesError, match=rf"at byte \d+ \(CommitLog offset {at}\)"):
        list(retry_store.consume(RETRY_TOPIC_OF_G, "GID_ORDERS", filter=flt))
    delivered = {m.queue_offset for r in ((0, bare[0]), (bare[0] + 1, None))
                 for m in retry_store.consume(RETRY_TOPIC_OF_G, "GID_ORDERS", filter=flt, ranges={0: r})}
    for w in _retry_whys(retry_store):
        if w.queue_offset not in bare:
            assert w.delivered == (w.queue_offset in delivered), str(w)
        else:
            assert not w.delivered


# ------------------------------------------------------------------ finding the message
def test_why_by_offset_msg_id_uniq_key_and_key(golden_registered):
    store = cq.Store(golden_registered)
    row = [r for r in golden_rows() if r["topic"] == FILTER_TOPIC][17]
    by_id = cq.why(store, FILTER_TOPIC, "GID_SQL_C", msg_id=row["msgId"])
    assert [w.commit_log_offset for w in by_id] == [row["commitLogOffset"]] and by_id[0].found_by == "msg_id"
    by_uniq = cq.why(store, FILTER_TOPIC, "GID_SQL_C", msg_id=row["uniqKey"])
    assert [w.commit_log_offset for w in by_uniq] == [row["commitLogOffset"]] and by_uniq[0].found_by == "index"
    assert by_uniq[0].delivered == by_id[0].delivered
    key = row["keys"].split(" ")[0]
    by_key = cq.why(store, FILTER_TOPIC, "GID_SQL_C", key=key)
    assert row["commitLogOffset"] in [w.commit_log_offset for w in by_key] and by_key[0].found_by == "index"
    # a key several messages carry gives one Why per message, in CommitLog order
    shared = [r for r in golden_rows() if r["topic"] == FILTER_TOPIC and "order-115" in (r["keys"] or "").split(" ")]
    many = cq.why(store, FILTER_TOPIC, "GID_SQL_C", key="order-115")
    assert [w.commit_log_offset for w in many] == sorted(r["commitLogOffset"] for r in shared)


def test_why_falls_back_to_a_scan_without_index_files(sample):
    store = cq.Store(sample.root)
    msg = next(iter(store.consume(sample.main_topic, "G", tags="*")))
    ws = cq.why(store, sample.main_topic, "GID_RED_CHEAP", msg_id=msg.properties["UNIQ_KEY"])
    assert [w.commit_log_offset for w in ws] == [msg.commit_log_offset]
    assert ws[0].found_by == "scan" and "the store has no index files" in ws[0].note
    ws = cq.why(store, sample.main_topic, "GID_RED_CHEAP", key=msg.keys)
    assert ws[0].found_by == "scan" and ws[0].queue_offset == msg.queue_offset
    assert cq.why(store, sample.main_topic, "GID_RED_CHEAP", msg_id=msg.msg_id)[0].found_by == "msg_id"


def test_unknown_group_and_missing_message_are_clear_errors(golden_registered):
    store = cq.Store(golden_registered)
    with pytest.raises(cq.UnknownGroupError, match="GID_NOPE.*registered groups: GID_SQL_A, GID_SQL_B, GID_SQL_C"):
        cq.why(store, FILTER_TOPIC, "GID_NOPE", queue_id=0, queue_offset=0)
    with pytest.raises(MessageNotFoundError, match=r"queue offset 100 is outside queue GoldenFilterTopic/0's units"):
        cq.why(store, FILTER_TOPIC, "GID_SQL_A", queue_id=0, queue_offset=100)
    with pytest.raises(MessageNotFoundError, match="no message of topic 'GoldenFilterTopic' has key 'nope'"):
        cq.why(store, FILTER_TOPIC, "GID_SQL_A", key="nope")
    with pytest.raises(MessageNotFoundError, match="UNIQ_KEY '0A00030700002A9F00000000DEADBEEF'"):
        cq.why(store, FILTER_TOPIC, "GID_SQL_A", msg_id="0A00030700002A9F00000000DEADBEEF")
    plain = next(r for r in golden_rows() if r["topic"] == "GoldenPlainTopic")
    with pytest.raises(MessageNotFoundError, match="is on topic 'GoldenPlainTopic'"):
        cq.why(store, FILTER_TOPIC, "GID_SQL_A", msg_id=plain["msgId"])
    with pytest.raises(ValueError, match="give queue_id with queue_offset, or msg_id, or key"):
        cq.why(store, FILTER_TOPIC, "GID_SQL_A", key="x", msg_id="y")


# ------------------------------------------------------------------ backlog
def test_backlog_replays_the_filter_from_the_committed_offsets(sample):
    store = cq.Store(sample.root)
    for group, _sql in SAMPLE_GROUPS:
        committed = store.committed_offsets(group, sample.main_topic)
        b = cq.backlog(store, sample.main_topic, group)
        assert [q.queue_id for q in b.queues] == store.queue_ids(sample.main_topic)
        everything = list(store.consume(sample.main_topic, group))
        for q in b.queues:
            cqueue = store.consume_queue(sample.main_topic, q.queue_id)
            assert q.committed_offset == committed[q.queue_id] > 0
            assert q.max_offset == cqueue.max_offset and q.lag == q.max_offset - q.committed_offset
            assert q.will_receive == sum(1 for m in everything
                                         if m.queue_id == q.queue_id and m.queue_offset >= q.committed_offset)
        assert b.lag == sum(q.lag for q in b.queues) and b.will_receive == sum(q.will_receive for q in b.queues)
        assert 0 < b.will_receive < b.lag   # the broker's lag counts what the filter drops
        d = json.loads(json.dumps(b.to_dict()))
        assert set(d["queues"][0]) >= {"queue_id", "committed_offset", "max_offset", "lag", "will_receive"}
        assert d["total"] == {"lag": b.lag, "will_receive": b.will_receive}
    store.close()


def test_backlog_of_a_queue_without_committed_offset(golden_registered):
    store = cq.Store(golden_registered)
    b = cq.backlog(store, FILTER_TOPIC, "GID_SQL_B")
    q0, q1 = b.queues
    assert (q0.committed_offset, q0.lag) == (99, 1) and q0.will_receive in (0, 1)
    assert (q1.committed_offset, q1.lag, q1.will_receive) == (None, None, None)   # -1: nothing committed
    assert b.lag == 1 and "none: no committed offset" in str(b)
    a = cq.backlog(store, FILTER_TOPIC, "GID_SQL_A", sql=GOLDEN_GROUPS["GID_SQL_A"])
    assert [q.lag for q in a.queues] == [60, 100]
    assert a.will_receive == sum(1 for m in store.consume(FILTER_TOPIC, "GID_SQL_A")
                                 if m.queue_id == 1 or m.queue_offset >= 40)
    store.close()


def test_rebuilt_store_registers_its_groups_before_every_message(tmp_path):
    """rebuild_bitmaps sets the groups' bits in every message, so their bornTime precedes them all:
    a lookup by name prunes with the bitmaps and receives what the SQL given directly receives."""
    dest = tmp_path / "rebuilt"
    cq.rebuild_bitmaps(GOLDEN, dest, [cq.SqlGroup(FILTER_TOPIC, g, sql) for g, sql in GOLDEN_GROUPS.items()])
    store = cq.Store(dest)
    first = min(m.store_timestamp for m in store.commit_log.messages())
    for group, sql in GOLDEN_GROUPS.items():
        assert store.registered_filter(FILTER_TOPIC, group).born_time == first - 1
        looked_up = store.consume(FILTER_TOPIC, group)
        got = [m.commit_log_offset for m in looked_up]
        assert got == [m.commit_log_offset for m in store.consume(FILTER_TOPIC, group, sql=sql)]
        assert looked_up.stats.bloom_pruned > 0
    store.close()


@pytest.mark.parametrize("damage", ["no_ext_dir", "ext_zeroed_tail", "commit_log_file_gone", "commit_log_tail_lost"])
def test_why_agrees_with_consume_on_a_damaged_store(tmp_path, damage):
    """Units whose ext address cannot be resolved, or whose record is gone, decide the same way in both."""
    root = tmp_path / "store"
    shutil.copytree(GOLDEN, root)
    if damage == "no_ext_dir":
        shutil.rmtree(root / "consumequeue_ext" / FILTER_TOPIC / "0")
    elif damage == "ext_zeroed_tail":
        for f in sorted((root / "consumequeue_ext" / FILTER_TOPIC / "1").iterdir())[1:]:
            f.write_bytes(b"\0" * f.stat().st_size)
    elif damage == "commit_log_file_gone":  # the broker deleted the oldest CommitLog file
        min((root / "commitlog").iterdir()).unlink()
    else:  # the newest CommitLog file lost its records: units pointing there are past the log's end
        last = max((root / "commitlog").iterdir())
        last.write_bytes(b"\0" * last.stat().st_size)
    store = cq.Store(root)
    reasons = set()
    for how in ({"sql": GOLDEN_GROUPS["GID_SQL_B"]}, {"tags": "TagA || TagC"}):
        check_why_agrees_with_consume(store, FILTER_TOPIC, "G", **how)
        for q in store.queue_ids(FILTER_TOPIC):
            cqueue = store.consume_queue(FILTER_TOPIC, q)
            for off in range(cqueue.min_offset, cqueue.max_offset, 5):
                w = cq.why(store, FILTER_TOPIC, "G", queue_id=q, queue_offset=off, **how)
                reasons.add(w.steps[1].reason)
    if damage in ("no_ext_dir", "ext_zeroed_tail"):
        assert {"no_ext_unit", "tags_code_unknown"} <= reasons
    if damage == "commit_log_tail_lost":
        missing = [w for q in store.queue_ids(FILTER_TOPIC)
                   for w in (cq.why(store, FILTER_TOPIC, "G", tags="*", queue_id=q, queue_offset=o)
                             for o in range(store.consume_queue(FILTER_TOPIC, q).max_offset))
                   if w.steps[2].reason == "record_missing"]
        assert missing and all(w.dropped_by == "commit_log" for w in missing)
    store.close()


def test_steps_are_facts_and_the_renderer_words_them():
    """why's steps hold codes, evidence and data; why_render words them (the branches no store above reaches)."""
    from cq.analyses.why import WhyStep
    from cq.analyses.why_codes import DROP, INFO, PASS

    no_unit = WhyStep("consume_queue_unit", DROP, "no_unit", {"commit_log_offset": 500, "queue_offset": 7},
                      {"topic": "T", "queue_id": 1, "transaction_type": 4})
    assert no_unit.title == "ConsumeQueue unit" and no_unit.detail == (
        "no ConsumeQueue unit of queue T/1 at offset 7 points at CommitLog offset 500 (transaction type 0x4): "
        "the broker never serves this record to consumers")
    assert no_unit.to_dict() == {"step": "consume_queue_unit", "title": "ConsumeQueue unit", "result": "drop",
                                 "reason": "no_unit", "detail": no_unit.detail,
                                 "evidence": {"commit_log_offset": 500, "queue_offset": 7}}
    gone = WhyStep("commit_log", DROP, "record_missing", {}, {"batch": True, "missing": (100, 20, 200, 900)})
    assert gone.detail == "the batch record [100, 120) is not in the CommitLog [200, 900): the broker skips the unit"
    retry = {"filter_support_retry": True, "retry_topic": "Orders", "group": "G", "lookup": ["Orders", "G"],
             "decided_by": "registered", "expression": None,
             "registration": {"born_time": 5, "dead_time": 9, "is_dead": True}}
    step = WhyStep("commit_log", PASS, "retry_registered_no_expression", {"retry": retry}, {"kind": "retry"})
    assert step.detail == ("retry filter: RETRY_TOPIC 'Orders', so the filter registered for (Orders, G) decides: it "
                           "has no compiled expression (not SQL92, or it does not compile), so the broker delivers "
                           "it (config/consumerFilter.json: bornTime 5, dead since 9)")
    mode = WhyStep("commit_log", PASS, "class_filter_mode", {"retry": dict(retry, decided_by="class_filter_mode")},
                   {"kind": "retry"})
    assert mode.detail == "class filter mode: the CommitLog layer matches everything"
    batch = WhyStep("client", DROP, "tag_not_in_set", {"tags": "B", "tags_set": ["A"]},
                    {"layer1_reason": "tags_code_in_set", "batch": True})
    assert batch.detail == ("TAGS 'B' is not in the subscription's tags ['A'] (the batch's tags code passed layer 1 "
                            "for every message of it): the client drops it")
    worded = WhyStep("state", INFO, "x", {}, {"title": "A title", "detail": "said by its maker"})
    assert (worded.title, worded.detail) == ("A title", "said by its maker")

"""Stores holding message-trace records for the tests (docs/formats.md#trace-records).

:func:`encode` writes records as RocketMQ's ``TraceDataEncoder`` does, from the layout the docs give;
:func:`write_store` writes three messages of ``Orders`` and the trace messages their clients would send
(as ``AsyncTraceDispatcher`` does: KEYS the traced ids and keys, several records per message, born host the
writing client). The real clients' records are checked by tests/broker/test_broker_trace.py.
"""
from __future__ import annotations

from cq.analyses.trace import TRACE_TOPIC
from cq.writer import StoreWriter
from cq.writer.index import write_index_files

C, F = "\x01", "\x02"
T0 = 1_700_000_000_000
TOPIC = "Orders"


def encode(*records: list) -> bytes:
    """Records as the client's encoder writes them: str() of each field (None as Java's "null")."""
    def text(v):
        return "null" if v is None else ("true" if v is True else "false" if v is False else str(v))
    return "".join(C.join(text(v) for v in r) + F for r in records).encode()


def pub(uniq, *, ts=T0, group="PG", topic=TOPIC, tags="TagA", keys="k1", cost=3, mtype=0, offset_id="OFF", ok=True):
    return ["Pub", ts, "DefaultRegion", group, topic, uniq, tags, keys, "127.0.0.1:10911", 5, cost, mtype, offset_id,
            ok]


def sub_before(uniq, rid, *, ts=T0 + 10, group="CG", retry=0, keys="k1"):
    return ["SubBefore", ts, "DefaultRegion", group, rid, uniq, retry, keys]


def sub_after(uniq, rid, *, ok=True, cost=7, keys="k1", code=0, ts=T0 + 20, group="CG"):
    return ["SubAfter", rid, uniq, cost, ok, keys, code, ts, group]


def end_tx(uniq, *, state="COMMIT_MESSAGE", check=False):
    return ["EndTransaction", T0 + 5, "DefaultRegion", "TXG", TOPIC, uniq, "TagT", "kt", "127.0.0.1:10911", 2,
            "TXID-1", state, check]


def write_store(root, *, bad: bool = False, index: bool = True, trace_topic: str = TRACE_TOPIC):
    """Three messages of Orders and the trace messages their clients would write (as the dispatcher does:
    KEYS are the traced ids and keys, several records per message, born host the writing client)."""
    with StoreWriter(root, commit_log_file_size=1 << 20) as w:
        for i in range(3):
            w.append(TOPIC, b"x", tags="TagA", keys=[f"k{i}"], properties={"UNIQ_KEY": f"U{i}"},
                     store_timestamp=T0 + i)
        w.append(trace_topic, encode(pub("U0", keys="k0"), pub("U1", keys="k1")), keys=["U0", "k0", "U1", "k1"],
                 born_host="10.0.0.1:4000", store_timestamp=T0 + 50)
        w.append(trace_topic, encode(sub_before("U0", "R1", keys="k0"), sub_after("U0", "R1", ok=False, keys="k0", code=4)),
                 keys=["U0", "k0"], born_host="10.0.0.2:4001", store_timestamp=T0 + 60)
        w.append(trace_topic, encode(sub_before("U0", "R2", retry=1, keys="k0", ts=T0 + 1000),
                                     sub_after("U0", "R2", keys="k0", ts=T0 + 1010),
                                     sub_before("U0", "R3", group="OTHER", keys="k0")),
                 keys=["U0", "k0"], born_host="10.0.0.3:4002", store_timestamp=T0 + 70)
        if bad:
            w.append(trace_topic, encode(pub("U2", keys="k2")) + b"Pub\x01oops" + F.encode(), keys=["U2", "k2"],
                     store_timestamp=T0 + 80)
    if index:
        write_index_files(root, hash_slot_num=64, index_num=400)

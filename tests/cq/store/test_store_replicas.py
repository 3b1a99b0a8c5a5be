"""Several stores of one broker name read as its replicas (docs/reading.md#replicas).

A "master" is a sample store; its "slave" is a copy cut back to a CommitLog record boundary, as a
slave that had copied the master up to there holds it (docs/formats.md#replicas: the same bytes at
the same offsets, the same units at the same queue offsets); so the master's tail is known exactly.
"""
from __future__ import annotations

import json
import pickle
import shutil
import struct
import warnings
import zlib

import pytest
from helpers import DATA, replica_pair

import cq
import rmqfilter
from cq.errors import ReplicaWarning
from cq.readers.replica import BrokerIdentity, read_broker_identity, read_epoch_file, read_store_checkpoint
from cq.writer.sample import SAMPLE_GROUPS, SAMPLE_TOPICS

SMALL = {"commit_log_file_size": 1 << 20, "ext_file_size": 1 << 16, "consume_queue_file_size": 20_000}
TOPIC = SAMPLE_TOPICS[0]
GROUP, SQL = SAMPLE_GROUPS[0]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """``(master, slave, end)``: one broker name (``broker-x``) twice; the slave ends at ``end``."""
    return replica_pair(tmp_path_factory.mktemp("replicas"), **SMALL)


def units(result) -> dict:
    return {(m.queue_id, m.queue_offset): m.msg_id for m in result}


def open_quietly(*args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ReplicaWarning)
        return cq.Cluster(*args, **kw)


def test_the_slave_alone_is_the_masters_prefix(pair):
    master, slave, end = pair
    m, s = cq.Store(master), cq.Store(slave)
    assert s.cut().commit_log_end == end < m.cut().commit_log_end
    got, want = units(s.consume(TOPIC, GROUP)), units(m.consume(TOPIC, GROUP))
    kept = {k for k in want if m.consume_queue(TOPIC, k[0]).unit(k[1])[0] < end}
    assert got == {k: want[k] for k in kept} and 0 < len(got) < len(want)
    m.close()
    s.close()


def test_two_roots_of_one_broker_name_are_its_replicas_and_the_furthest_is_read(pair):
    master, slave, _ = pair
    with pytest.warns(ReplicaWarning, match=r"broker broker-x: 2 replicas; reading .*/m/broker-x \(its CommitLog "
                                            r"reaches furthest"):
        c = cq.Cluster([slave, master])
    assert c.brokers == ["broker-x"] and c.store("broker-x").root == str(master)
    rs = c.replicas["broker-x"]
    assert rs.picked_by == "furthest" and [r.root for r in rs.replicas] == [str(slave), str(master)]
    assert c.replica_read == {"broker-x": str(master)}
    alone = cq.Store(master)
    assert units(c.consume(TOPIC, GROUP)) == units(alone.consume(TOPIC, GROUP))
    alone.close()
    # pickling keeps the replica read
    again = pickle.loads(pickle.dumps(c))
    assert again.replica_read == c.replica_read
    again.close()
    c.close()


def test_replica_picks_the_one_read(pair):
    master, slave, _ = pair
    c = open_quietly([master, slave], replica=slave)
    assert c.replicas["broker-x"].picked_by == "given" and c.store("broker-x").root == str(slave)
    alone = cq.Store(slave)
    assert units(c.consume(TOPIC, GROUP)) == units(alone.consume(TOPIC, GROUP))
    got, want = cq.backlog(c, TOPIC, GROUP), cq.backlog(alone, TOPIC, GROUP)
    assert [(q.queue_id, q.committed_offset, q.max_offset, q.will_receive) for q in got.queues] == \
        [(q.queue_id, q.committed_offset, q.max_offset, q.will_receive) for q in want.queues]
    assert {q.broker for q in got.queues} == {"broker-x"}
    alone.close()
    c.close()
    c = open_quietly([master, slave], replica={"broker-x": str(master)})
    assert c.store("broker-x").root == str(master)
    c.close()
    with pytest.raises(KeyError, match="no replica is"):
        open_quietly([master, slave], replica={"broker-x": "/nowhere"})
    with pytest.raises(KeyError, match="no replica is '/nowhere'"):
        open_quietly([master, slave], replica="/nowhere")
    with pytest.raises(KeyError, match="one store"):
        cq.open_stores(str(master), replica=str(master))


def test_tails_are_the_masters_units_past_the_slaves_queue_ends(pair):
    master, slave, end = pair
    c = open_quietly([master, slave])
    rs = c.replicas["broker-x"]
    tails = rs.tails(TOPIC)
    m, s = cq.Store(master), cq.Store(slave)
    want = []
    for q in m.queue_ids(TOPIC):
        lo, hi = m.consume_queue(TOPIC, q).min_offset, m.consume_queue(TOPIC, q).max_offset
        first = next((o for o in range(lo, hi) if m.consume_queue(TOPIC, q).unit(o)[0] >= end), hi)
        assert s.consume_queue(TOPIC, q).max_offset == first
        if first < hi:
            want.append((TOPIC, q, str(master), str(slave), first, hi))
    assert [(t.topic, t.queue_id, t.holder, t.lacking, t.start, t.end) for t in tails] == want and want
    d = rs.describe(TOPIC)
    assert d["read"] == str(master) and [r["root"] for r in d["replicas"]] == [str(master), str(slave)]
    assert d["replicas"][0]["mode"] == "classic" and d["replicas"][0]["epochs"] is None
    m.close()
    s.close()
    c.close()


def test_why_names_the_replica_and_what_the_slave_lacks(pair):
    master, slave, _ = pair
    c = open_quietly([master, slave], replica=slave)
    t = c.replicas["broker-x"].tails(TOPIC)[0]
    # an offset of the master's tail: the slave read lacks it, the master's walk answers and says so
    w = cq.why(c, TOPIC, GROUP, queue_id=t.queue_id, queue_offset=t.start)
    assert w.replica == str(master) and w.broker == "broker-x"
    assert f"not on {slave}" in w.replica_note and "does not receive it" in w.replica_note
    assert "replica   only on" in str(w) and w.to_dict()["replica"] == str(master)
    # an offset both hold: read from the slave, the replica read
    w = cq.why(c, TOPIC, GROUP, queue_id=t.queue_id, queue_offset=t.start - 1)
    assert w.replica == str(slave) and w.replica_note.startswith("on every replica")
    # by msg id: the message of the tail is found on the master only
    m = cq.Store(master)
    msg = m.commit_log.read_message(int(m.consume_queue(TOPIC, t.queue_id).unit(t.start)[0]))
    found = cq.why(c, TOPIC, GROUP, msg_id=msg.msg_id)
    assert [(x.replica, x.queue_offset) for x in found] == [(str(master), t.start)]
    m.close()
    c.close()
    # read from the master: the tail's message is the read replica's, and the note says the slave lacks it
    c = open_quietly([master, slave])
    w = cq.why(c, TOPIC, GROUP, queue_id=t.queue_id, queue_offset=t.start)
    assert w.replica == str(master) and f"not on {slave} (its queue ends at offset {t.start})" in w.replica_note
    c.close()


def write_epochs(root, entries, *, crc=None, name="epochFileCheckpoint") -> None:
    body = "".join(f"{e}-{o}\n" for e, o in entries)
    crc = zlib.crc32(body.encode()) & 0x7FFFFFFF if crc is None else crc
    (root / name).write_text(f"{len(entries)}\n{crc}\n{body}")


def test_controller_mode_files_are_read_and_the_highest_epoch_is_read(pair, tmp_path):
    master, slave, end = pair
    m, s = tmp_path / "m" / "broker-x", tmp_path / "s" / "broker-x"
    shutil.copytree(master, m)
    shutil.copytree(slave, s)
    # the slave was elected in epoch 2 after the master's epoch 1: it is the master now
    write_epochs(m, [(1, 0)])
    write_epochs(s, [(1, 0), (2, end)])
    (m / "brokerIdentity").write_text("HarnessCluster#broker-x#1")
    (s / "brokerIdentity").write_text("HarnessCluster#broker-x#2")
    page = bytearray(4096)
    struct.pack_into(">5q", page, 0, 1, 2, 3, 0, end)
    (s / "checkpoint").write_bytes(bytes(page))
    assert read_epoch_file(s)[0][-1].epoch == 2 and read_broker_identity(s).broker_id == 2
    assert read_store_checkpoint(s).confirm_phy_offset == end
    c = open_quietly([m, s])
    rs = c.replicas["broker-x"]
    assert rs.picked_by == "epoch" and rs.read.root == str(s) and rs.read.confirm_offset == end
    text = rmqfilter_inspect([str(m), str(s)])
    assert "Replicas: 2; read" in text and "controller; brokerId 2; epochs 1@0, 2@" in text and "Tail:" in text
    c.close()


def rmqfilter_inspect(args) -> str:
    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert rmqfilter.main(["inspect", *args]) == 0
    return out.getvalue()


def test_a_bad_epoch_file_falls_back_to_its_bak_and_else_is_named(tmp_path):
    write_epochs(tmp_path, [(1, 0), (3, 500)], crc=12345)
    with pytest.raises(cq.StoreFormatError, match=r"epochFileCheckpoint at byte offset 0: entries CRC32 \d+ does "
                                                   r"not match the file's 12345"):
        read_epoch_file(tmp_path)
    write_epochs(tmp_path, [(1, 0)], name="epochFileCheckpoint.bak")
    entries, path = read_epoch_file(tmp_path)
    assert [(e.epoch, e.start_offset) for e in entries] == [(1, 0)] and path.endswith(".bak")
    write_epochs(tmp_path, [(1, 0), (3, 500)], crc=0)      # 0: not checked
    assert [e.epoch for e in read_epoch_file(tmp_path)[0]] == [1, 3]
    (tmp_path / "epochFileCheckpoint").write_text("2\n0\n1-0\n")
    entries, path = read_epoch_file(tmp_path)                   # one entry, not two: the .bak
    assert path.endswith(".bak")
    (tmp_path / "brokerIdentity").write_text("only#two")
    with pytest.raises(cq.StoreFormatError, match="brokerIdentity at byte offset 0: expected clusterName#"):
        read_broker_identity(tmp_path)
    (tmp_path / "checkpoint").write_bytes(b"\0" * 20)
    with pytest.raises(cq.StoreFormatError, match="checkpoint at byte offset 16: checkpoint is 20 bytes.*"
                                                  "index_msg_timestamp"):
        read_store_checkpoint(tmp_path)
    assert read_epoch_file(tmp_path / "nowhere") is None


def test_the_command_line_reads_the_replica_asked(pair, capsys):
    master, slave, _ = pair
    assert rmqfilter.main(["consume", str(master), str(slave), "--topic", TOPIC, "--group", GROUP,
                           "--replica", str(slave), "--format", "jsonl"]) == 0
    out, err = capsys.readouterr()
    alone = cq.Store(slave)
    assert len(out.splitlines()) == len(units(alone.consume(TOPIC, GROUP)))
    alone.close()
    assert f"reading {slave} (as asked" in err
    assert rmqfilter.main(["consume", str(master), str(slave), "--topic", TOPIC, "--group", GROUP,
                           "--replica", "/nowhere"]) == 2
    assert "no replica is '/nowhere'" in capsys.readouterr().err


def test_epochs_say_where_two_replicas_part(pair, tmp_path):
    """Controller mode: a new master elected in epoch 2 at offset X wrote its own records from X on,
    so neither replica holds the other's records past X, whatever their queue ends say."""
    master, _, end = pair
    old, new = tmp_path / "old" / "broker-x", tmp_path / "new" / "broker-x"
    shutil.copytree(master, old)
    shutil.copytree(master, new)         # the same queue ends: only the epochs tell them apart
    write_epochs(old, [(1, 0)])
    write_epochs(new, [(1, 0), (2, end)])
    page = bytearray(4096)
    struct.pack_into(">5q", page, 0, 0, 0, 0, 0, end)
    (old / "checkpoint").write_bytes(bytes(page))
    c = open_quietly([old, new])
    rs = c.replicas["broker-x"]
    assert rs.read.root == str(new) and rs.picked_by == "epoch"
    ends = {r.root: r.store.cut().commit_log_end for r in rs.replicas}
    assert rs.consistent_offset(rs.replicas[0], rs.replicas[1], ends) == end
    tails = rs.tails(TOPIC)
    assert {(t.holder, t.lacking) for t in tails} == {(str(old), str(new)), (str(new), str(old))}
    m = cq.Store(master)
    for t in tails:
        cqueue = m.consume_queue(TOPIC, t.queue_id)
        assert int(cqueue.unit(t.start)[0]) >= end and (t.start == 0 or int(cqueue.unit(t.start - 1)[0]) < end)
    # why: a unit past X on the replica read is its own; the same offset on the other is another message
    t = next(x for x in tails if x.holder == str(new))
    w = cq.why(c, TOPIC, GROUP, queue_id=t.queue_id, queue_offset=t.start)
    assert w.replica == str(new) and f"not on {old} (its record there is another" in w.replica_note
    w = cq.why(c, TOPIC, GROUP, queue_id=t.queue_id, queue_offset=t.start - 1)
    assert w.replica_note.startswith("on every replica")
    text = rmqfilter_inspect([str(old), str(new)])
    assert f"Tail: {TOPIC} queue {t.queue_id} offsets [{t.start:,}, {t.end:,}) " in text
    m.close()
    c.close()


def test_the_why_command_walks_the_tail_on_the_replica_that_holds_it(pair, capsys):
    master, slave, _ = pair
    c = open_quietly([master, slave])
    t = c.replicas["broker-x"].tails(TOPIC)[0]
    c.close()
    assert rmqfilter.main(["why", str(master), str(slave), "--topic", TOPIC, "--group", GROUP, "--broker",
                           "broker-x", "--queue", str(t.queue_id), "--offset", str(t.start), "--replica",
                           str(slave), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["broker"] == "broker-x" and doc["replica"] == str(master)
    assert f"a consumer reading {slave}, the replica read, does not receive it" in doc["replica_note"]


def test_the_files_a_real_controller_mode_replica_wrote(tmp_path):
    """tests/data/replica_store (RocketMQ 5.3.3, elected master in epoch 2): its epoch file, the broker's
    previous copy, its identity and checkpoint, read as the broker reads them."""
    root = DATA / "replica_store"
    entries, path = read_epoch_file(root)
    assert [(e.epoch, e.start_offset) for e in entries] == [(1, 0), (2, 312936)] and path.endswith("Checkpoint")
    assert read_broker_identity(root) == BrokerIdentity("HarnessCluster", "broker-c", 2)
    assert read_store_checkpoint(root).confirm_phy_offset == 312936
    shutil.copytree(root, tmp_path / "r")
    (tmp_path / "r" / "epochFileCheckpoint").unlink()       # gone: the broker's previous copy is read
    entries, path = read_epoch_file(tmp_path / "r")
    assert [(e.epoch, e.start_offset) for e in entries] == [(1, 0)] and path.endswith(".bak")


@pytest.mark.parametrize(("text", "entries"), [
    ("2\r\n0\r\n1-0\r\n2-500\r\n", [(1, 0), (2, 500)]),     # \r\n and \r end a line, as readLine's
    ("2\r0\r1-0\r2-500", [(1, 0), (2, 500)]),
    ("2\n0\n1-0\n2-500-\n", [(1, 0), (2, 500)]),            # String.split drops a trailing empty field
    ("2\n0\n1-0\n-\n2-500\n", [(1, 0), (2, 500)]),          # a line of no two fields is skipped
])
def test_epoch_lines_and_fields_split_as_the_broker_splits_them(tmp_path, text, entries):
    (tmp_path / "epochFileCheckpoint").write_text(text, newline="")
    assert [(e.epoch, e.start_offset) for e in read_epoch_file(tmp_path)[0]] == entries


@pytest.mark.parametrize(("text", "message", "offset"), [
    ("2\n0\n1-0\x0b2-500\n", "the file says 2 entries, found 0", 0),   # a vertical tab breaks no line in Java
    (" 2\n0\n1-0\n2-500\n", r"expected a decimal int32, found ' 2'", 0),  # Integer.parseInt trims nothing
    ("2\n0\n1-0\n2-5_0\n", r"epoch entry '2-5_0' is not epoch-startOffset", 8),
    ("1\n0\n2147483648-0\n", r"epoch entry '2147483648-0' is not epoch-startOffset", 4),
])
def test_epoch_text_java_does_not_read_is_named_with_its_offset(tmp_path, text, message, offset):
    (tmp_path / "epochFileCheckpoint").write_text(text, newline="")
    with pytest.raises(cq.StoreFormatError, match=message) as e:
        read_epoch_file(tmp_path)
    assert e.value.offset == offset

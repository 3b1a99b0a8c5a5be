"""``why`` where the broker serves a unit from other files than a plain ConsumeQueue's record: a
message inside a BatchCQ batch record (docs/reading.md#batchcq) and a compaction topic's unit,
served from the broker's compaction store (docs/reading.md#compaction-topics).

Built from the steps of :mod:`cq.analyses.why_steps`; :func:`cq.analyses.why.why_unit` routes a
compaction topic's unit here.
"""
from __future__ import annotations

import numpy as np

from ..filter.layers import (
    Layers,
    RetryPropertiesError,
)
from ..readers.batchcq import expand_batch
from ..store.store import Store
from .find import (
    MessageNotFoundError,
)
from .why_codes import (
    DROP,
    DROPPED_BY_CLIENT,
    DROPPED_BY_COMMIT_LOG,
    DROPPED_BY_COMPACTION,
    DROPPED_BY_CONSUME_QUEUE,
    DROPPED_BY_EXPIRY,
    INFO,
    PASS,
)
from .why_steps import (
    Subscription,
    Why,
    WhyStep,
    client_step,
    layer2,
    not_reached,
)

__all__ = ["why_batch_message", "why_compacted"]


def why_batch_message(store: Store, topic: str, group: str, flt, sub: Subscription, queue_id: int,
                      queue_offset: int, *, found_by: str = "queue_offset", note: str | None = None) -> Why:
    """Walk the message at (``queue_id``, ``queue_offset``) of BatchCQ topic ``topic`` through ``flt``
    (docs/reading.md#batchcq): the broker judges the unit of its batch (layer 1, its tags code) and
    the batch record (layer 2, the record's own properties); the client unwraps the record and
    re-checks the message's own tag."""
    try:
        cut = store.cut(topic, [queue_id])
        lo, hi = cut.queue_range(topic, queue_id)
        cqueue = store.consume_queue(topic, queue_id)
    except KeyError as exc:
        raise MessageNotFoundError(str(exc.args[0]) if exc.args else str(exc)) from None
    if not lo <= queue_offset < hi:
        raise MessageNotFoundError(
            f"queue offset {queue_offset} is outside BatchCQ queue {topic}/{queue_id}'s messages [{lo}, {hi}) "
            f"in {store.root}")
    unit = cqueue.units_between(queue_offset, queue_offset + 1)[0]
    phys, size, code = int(unit["commit_log_offset"]), int(unit["size"]), int(unit["tags_code"])
    base, count = int(unit["base_offset"]), int(unit["batch_size"])
    path, pos = cqueue.file_position(queue_offset)
    steps = [WhyStep("consume_queue_unit", INFO, "read",
                     {"commit_log_offset": phys, "size": size, "tags_code": code, "base_offset": base,
                      "batch_size": count, "file": path, "file_position": pos},
                     {"batch": True, "index": queue_offset - base})]
    kind = "tags" if Layers(flt).kind == "tags" else "sql"
    _, reason = flt.explain_consume_queue(code if kind == "tags" else None, None)
    # the decisions Store.consume makes over this batch's unit (cq.store.decide); the steps explain them
    try:
        found = store.batch_decisions(topic, queue_id, flt, queue_offset, queue_offset + 1, cut=cut)
    except RetryPropertiesError:  # a retry record without properties: the pull fails, nothing is delivered
        found = store.batch_decisions(topic, queue_id, flt, queue_offset, queue_offset + 1, cut=cut, layer2=False)
        found.commit_log = np.zeros(1, dtype=bool)
    matched = bool(found.consume_queue[0])
    steps.append(WhyStep("consume_queue", PASS if matched else DROP, reason, {"tags_code": code},
                         {"batch": True, "kind": kind}))
    delivered, dropped_by, explanation, msg_id = False, None, None, None
    log = store.commit_log
    present = bool(found.present[0])
    if not matched:
        dropped_by = DROPPED_BY_CONSUME_QUEUE
        not_reached(steps, "commit_log", "client")
    elif not present:
        dropped_by = DROPPED_BY_EXPIRY if phys < log.min_offset else DROPPED_BY_COMMIT_LOG
        steps.append(WhyStep("commit_log", DROP, "record_missing", {},
                             {"batch": True, "missing": (phys, size, log.min_offset, log.max_offset)}))
        not_reached(steps, "client")
    else:
        record = log.read_message(phys)
        msg_id = record.msg_id
        _, reason2, data2, ev2, explanation = layer2(flt, sub, record, log, phys)
        matched2 = bool(found.commit_log[0])
        steps.append(WhyStep("commit_log", PASS if matched2 else DROP, reason2, ev2, {**data2, "batch": True}))
        if not matched2:
            dropped_by = DROPPED_BY_COMMIT_LOG
            not_reached(steps, "client")
        else:
            msg = expand_batch(record)[queue_offset - base]
            ok, step = client_step(flt, reason, msg, batch=True)
            steps.append(step)
            delivered, dropped_by = ok, None if ok else DROPPED_BY_CLIENT
    return Why(topic, group, sub, queue_id, queue_offset, phys, size, msg_id, found_by, delivered, dropped_by,
               steps, explanation, note)


def why_compacted(store: Store, topic: str, group: str, flt, sub: Subscription, queue_id: int, queue_offset: int, *,
                  found_by: str = "queue_offset", note: str | None = None) -> Why:
    """Walk the message at (``queue_id``, ``queue_offset``) of compaction topic ``topic`` through ``flt``
    (docs/reading.md#compaction-topics): the broker serves the queue from its compaction store without its
    two layers, so a message its compaction CQ holds reaches the client's re-check; one it does not hold
    was compacted (a newer message with the same KEYS replaced it, where the ConsumeQueue shows one)."""
    try:
        cut = store.cut(topic, [queue_id])
        lo, hi = cut.queue_range(topic, queue_id)
    except (KeyError, TypeError) as exc:
        raise MessageNotFoundError(f"no queue {topic}/{queue_id} in {store.root}") from exc
    found = store.compacted_decisions(topic, queue_id, flt, queue_offset, queue_offset + 1, cut=cut)
    if not len(found.units) or int(found.units["base_offset"][0]) != queue_offset:
        return _compacted_unit(store, topic, group, sub, queue_id, queue_offset, (lo, hi), found_by, note)
    unit = found.units[0]
    phys, size, code = int(unit["commit_log_offset"]), int(unit["size"]), int(unit["tags_code"])
    with store.queue_readers(topic, queue_id, ext=False) as (cqueue, _):
        path, pos = cqueue.file_position(queue_offset)
    record = _dispatched_record(store, topic, queue_id, queue_offset)
    steps = [WhyStep("consume_queue_unit", INFO, "read", {"commit_log_offset": phys, "size": size, "tags_code": code,
                                                          "file": path, "file_position": pos,
                                                          "dispatched_commit_log_offset": record},
                     {"compaction": True}),
             WhyStep("consume_queue", PASS, "compaction_no_filter", {"tags_code": code}, {"compaction": True})]
    delivered, dropped_by, msg_id = False, None, None
    if not found.present[0]:
        dropped_by = DROPPED_BY_COMMIT_LOG
        steps.append(WhyStep("commit_log", DROP, "record_missing", {}, {"compaction": True, "missing": (phys, size)}))
        not_reached(steps, "client")
    else:
        with store.compaction_log(topic, queue_id) as log:
            msg = log.read_message(phys)
        msg_id = msg.msg_id
        steps.append(WhyStep("commit_log", PASS, "compaction_no_filter",
                             {"record_topic": msg.topic, "tags": msg.tags, "keys": msg.keys}, {"compaction": True}))
        ok, step = client_step(flt, "compaction_no_filter", msg, ok=bool(found.delivered[0]))
        steps.append(step)
        delivered, dropped_by = ok, None if ok else DROPPED_BY_CLIENT
    # commit_log_offset: the record's CommitLog offset (where the compaction store copied it from); the
    # compaction log position, which the consumer's offset message id names, is the unit step's
    return Why(topic, group, sub, queue_id, queue_offset, phys if record is None else record, size, msg_id, found_by,
               delivered, dropped_by, steps, None, note)


def _dispatched_record(store: Store, topic: str, queue_id: int, queue_offset: int) -> int | None:
    """The CommitLog offset of the ConsumeQueue unit at ``queue_offset`` of a compaction topic's queue (None
    when the ConsumeQueue no longer holds it)."""
    try:
        with store.dispatched_queue(topic, queue_id) as dispatched:
            if dispatched.min_offset <= queue_offset < dispatched.max_offset:
                return int(dispatched.read(queue_offset, 1)["commit_log_offset"][0])
    except KeyError:
        pass
    return None


#: How many newer offsets of the same KEYS a compacted message's Why lists (the scan stops there).
_NEWER_SHOWN = 5


#: ConsumeQueue units read per step of that scan.
_NEWER_CHUNK = 1 << 14


def _compacted_unit(store: Store, topic: str, group: str, sub: Subscription, queue_id: int, queue_offset: int,
                    served: tuple[int, int], found_by: str, note: str | None) -> Why:
    """The Why of a compaction topic's message its compaction CQ does not hold: the message the ConsumeQueue
    has at that offset (its KEYS), the first newer messages of the same KEYS there (:data:`_NEWER_SHOWN`,
    read in chunks from the ConsumeQueue and CommitLog until found), and the newest message of those KEYS
    the compaction store serves after it (its served units' records, from the compaction log)."""
    log = store.commit_log
    try:
        with store.dispatched_queue(topic, queue_id) as dispatched:
            lo, hi = dispatched.min_offset, dispatched.max_offset
            if not lo <= queue_offset < hi:
                raise MessageNotFoundError(
                    f"queue offset {queue_offset} is outside queue {topic}/{queue_id}'s units [{lo}, {hi}) in "
                    f"{store.root}")
            first = dispatched.read(queue_offset, 1)
            phys, size = int(first["commit_log_offset"][0]), int(first["size"][0])
            present = bool(store.records_present(first["commit_log_offset"].astype(np.int64),
                                                 first["size"].astype(np.int64))[0])
            keys = msg_id = None
            newer: list[int] = []
            if present:
                msg = log.read_message(phys)
                keys, msg_id = msg.keys, msg.msg_id
            at = queue_offset + 1
            while keys and at < hi and len(newer) < _NEWER_SHOWN:
                units = dispatched.read(at, min(_NEWER_CHUNK, hi - at))
                offs = units["commit_log_offset"].astype(np.int64)
                rows = np.flatnonzero(store.records_present(offs, units["size"].astype(np.int64)))
                texts = log.decode_columns(offs[rows], ["keys"]).texts("keys") if len(rows) else []
                newer += [at + int(r) for r, k in zip(rows.tolist(), texts) if k == keys][:_NEWER_SHOWN - len(newer)]
                at += len(units)
    except KeyError as exc:
        raise MessageNotFoundError(str(exc.args[0]) if exc.args else str(exc)) from None
    kept = None
    if newer:  # the newest message of these KEYS the compaction store serves after it
        with store.queue_readers(topic, queue_id, ext=False) as (cqueue, _):
            units = cqueue.units_between(queue_offset + 1, cqueue.max_offset)
        if len(units):
            with store.compaction_log(topic, queue_id) as clog:
                texts = clog.decode_columns(units["commit_log_offset"].astype(np.int64), ["keys"]).texts("keys")
            same = [int(o) for o, k in zip(units["base_offset"].tolist(), texts) if k == keys]
            kept = same[-1] if same else None
    reason = "compacted" if newer else "compacted_no_newer"
    steps = [WhyStep("consume_queue_unit", DROP, reason,
                     {"keys": keys, "newer_offsets": newer, "kept_offset": kept, "compaction_min_offset": served[0],
                      "compaction_max_offset": served[1], "commit_log_offset": phys, "size": size,
                      "record_present": present},
                     {"topic": topic, "queue_id": queue_id, "queue_offset": queue_offset, "compaction": True})]
    not_reached(steps, "consume_queue", "commit_log", "client")
    return Why(topic, group, sub, queue_id, queue_offset, phys, size, msg_id, found_by, False, DROPPED_BY_COMPACTION,
               steps, None, note)

"""Why did (or didn't) a consumer group receive a message: one message through the broker's filter.

:func:`why` walks one ConsumeQueue unit through every step the broker takes for a group, and
keeps the evidence of each: the unit; layer 1 (the tags code, or the ext unit with its Bloom
bitmap, the group's k bits and which are clear; ``isMsgInLive`` against the registered
``bornTime``); layer 2 (the selector's evaluation tree, :func:`selector.explain`); the
client's exact tag re-check; and the verdict. Each decision is made by the same filter
methods :meth:`cq.Store.consume` uses (``is_matched_by_consume_queue`` through
``explain_consume_queue``, ``is_matched_by_commit_log``, ``is_matched_by_client``), so the
two never disagree. A message named by its offset message id, ``UNIQ_KEY`` or a key is found
by :mod:`cq.analyses.find` (:func:`~cq.analyses.find.find_messages`, re-exported here); the
text a person reads is written by :mod:`cq.analyses.why_render`. ``docs/why.md`` shows the output.
The records and each layer's step live in :mod:`cq.analyses.why_steps`; a unit the broker serves
from a BatchCQ batch record or its compaction store, in :mod:`cq.analyses.why_places`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from .. import format as fmt
from ..errors import StoreFormatError
from ..filter.layers import Layers, low_int32
from ..filter.subscription import DEFAULT_BLOOM
from ..readers.commitlog import Message
from ..store.cluster import Cluster
from ..store.replicas import replica_place
from ..store.store import Store
from ..store.tiered import READ_AHEAD_UNITS
from ..tags import tags_code as _tag_hash
from .find import (  # MessageNotFoundError and find_messages: public here too (cq.why's API)
    MessageNotFoundError,
    brokers_to_ask,
    check_message_args,
    compaction_positions,
    find_batch_messages,
    find_messages,
    message_at,
    parse_offset_msg_id,
    position,
)
from .why_codes import (
    DROP,
    DROPPED_BY_CLIENT,
    DROPPED_BY_COMMIT_LOG,
    DROPPED_BY_CONSUME_QUEUE,
    DROPPED_BY_EXPIRY,
    INFO,
    PASS,
)
from .why_places import why_batch_message, why_compacted
from .why_steps import (
    Subscription,
    Why,
    WhyStep,
    client_step,
    decide_record,
    expired_unit,
    layer1_sql,
    layer2,
    not_reached,
    resolve_subscription,
)

__all__ = [
    "MessageNotFoundError",
    "Subscription",
    "Why",
    "WhyStep",
    "find_messages",
    "resolve_subscription",
    "why",
]


def why_unit(store: Store, topic: str, group: str, flt, sub: Subscription, queue_id: int, queue_offset: int, *,
             found_by: str = "queue_offset", note: str | None = None) -> Why:
    """Walk the unit at (``queue_id``, ``queue_offset``) of ``topic`` through ``flt`` (a compaction topic's
    through the broker's compaction store: :func:`why_compacted`)."""
    if topic in store.layout.compaction_topics:  # docs/reading.md#compaction-topics
        return why_compacted(store, topic, group, flt, sub, queue_id, queue_offset, found_by=found_by, note=note)
    try:
        # a read: it follows the broker first (a cut), so a minimum the broker moved is seen
        cut = store.cut(topic, [queue_id])
        lo, hi = cut.queue_range(topic, queue_id)
        cqueue = store.consume_queue(topic, queue_id)
    except KeyError as exc:
        raise MessageNotFoundError(str(exc.args[0]) if exc.args else str(exc)) from None
    served = cut.tier_range(topic, queue_id)
    from_tier = served is not None and served[0] <= queue_offset < served[1]
    if 0 <= queue_offset < lo or (not from_tier and lo <= queue_offset < cqueue.min_offset):
        # below the minimum, or below the local one where the tier does not serve it (docs/reading.md#tiered-storage)
        return expired_unit(store, topic, group, flt, sub, cqueue, queue_id, queue_offset,
                             max(lo, cqueue.min_offset) if queue_offset >= lo else lo, found_by, note)
    if not lo <= queue_offset < hi:
        raise MessageNotFoundError(
            f"queue offset {queue_offset} is outside queue {topic}/{queue_id}'s units [{lo}, {hi}) in {store.root}")
    if served is not None and not from_tier and served[1] <= queue_offset < served[1] + READ_AHEAD_UNITS - 1:
        # a pull that started in the tier may read this offset there: as consume, exact only where both agree
        store.check_read_ahead(topic, queue_id, flt, served[1], queue_offset + 1, cut)
    steps: list[WhyStep] = []
    log, ext = store.commit_log, store.ext(topic, queue_id)
    if from_tier:  # the broker serves this pull from its tier: its flat files, no ext file there
        tier = store.tier_queue(topic, queue_id)
        cqueue, log, ext = tier.consume_queue, tier.commit_log, None
        steps.append(WhyStep("tier", INFO, "served_from_tier",
                             {"tier_min_offset": tier.min_offset, "tier_end_offset": tier.end_offset,
                              "local_min_offset": served[1] if served[1] < tier.end_offset else None,
                              "directory": tier.directory},
                             {"topic": topic, "queue_id": queue_id, "queue_offset": queue_offset}))
    phys, size, slot = cqueue.unit(queue_offset)
    path, pos = cqueue.file_position(queue_offset)
    is_ext = fmt.is_ext_addr(slot)
    unit_ev = {"commit_log_offset": phys, "size": size, "tags_code_slot": slot, "is_ext_address": is_ext,
               "file": path, "file_position": pos}
    steps.append(WhyStep("consume_queue_unit", INFO, "read", unit_ev,
                         {"ext_offset": fmt.undecorate(slot) if is_ext else None}))

    # ---- the decisions: the pipeline consume runs (cq.store.decide), so the verdict is consume's;
    # the steps below explain each of them
    found = decide_record(flt, log, phys, size, slot, ext)
    ext_unit = ext.get(slot) if (is_ext and ext is not None) else None
    if Layers(flt).kind == "tags":
        tags_code = slot if not is_ext else (ext_unit.tags_code if ext_unit is not None else None)
        matched, reason = flt.explain_consume_queue(tags_code, ext_unit)
        sub_data = flt.subscription
        ev = {"tags_code": tags_code,
              "code_set": sorted(sub_data.code_set) if sub_data is not None else None}
        if tags_code is not None:
            ev["tags_code_int32"] = low_int32(tags_code)
        data = {"kind": "tags", "from_ext": is_ext, "code_set": (
            sorted((t, _tag_hash(t)) for t in sub_data.tags_set)
            if sub_data is not None and sub_data.sub_string != "*" else None)}
    else:
        matched, reason = flt.explain_consume_queue(None, ext_unit)
        ev, data = layer1_sql(flt, sub, ext_unit, slot if ext_unit is not None else None)
    matched = bool(found.consume_queue[0])
    steps.append(WhyStep("consume_queue", PASS if matched else DROP, reason, ev, data))
    if Layers(flt).sql92 and sub.registration is not None and ext_unit is not None:
        live = ext_unit.msg_store_time > flt.born_time
        steps.append(WhyStep("is_msg_in_live", INFO, "live" if live else "not_live",
                             {"msg_store_time": ext_unit.msg_store_time, "born_time": flt.born_time, "in_live": live}))

    delivered, dropped_by, explanation, msg_id = False, None, None, None
    present = bool(found.present[0])
    expired = phys < log.min_offset
    if present and not matched:
        # not needed for the decision (the broker never reads it), but a person wants its id
        try:
            msg_id = log.read_message(phys).msg_id
        except StoreFormatError:
            msg_id = None
    if not matched:
        dropped_by = DROPPED_BY_CONSUME_QUEUE
        not_reached(steps, "commit_log", "client")
    else:
        if not present:
            dropped_by = DROPPED_BY_EXPIRY if expired else DROPPED_BY_COMMIT_LOG
            steps.append(WhyStep("commit_log", DROP, "expired" if expired else "record_missing",
                                 {"commit_log_min_offset": log.min_offset, "commit_log_max_offset": log.max_offset},
                                 {"missing": (phys, size, log.min_offset, log.max_offset)}))
            not_reached(steps, "client")
        else:
            msg = log.read_message(phys)
            msg_id = msg.msg_id
            _, reason2, data2, ev2, explanation = layer2(flt, sub, msg, log, phys)
            matched2 = bool(found.commit_log[0])
            steps.append(WhyStep("commit_log", PASS if matched2 else DROP, reason2, ev2, data2))
            if not matched2:
                dropped_by = DROPPED_BY_COMMIT_LOG
                not_reached(steps, "client")
            else:
                ok, step = client_step(flt, reason, msg, ok=bool(found.delivered[0]))
                steps.append(step)
                if ok:
                    delivered = True
                else:
                    dropped_by = DROPPED_BY_CLIENT
    return Why(topic, group, sub, queue_id, queue_offset, phys, size, msg_id, found_by, delivered, dropped_by,
               steps, explanation, note)


def why(store: Store | Cluster, topic: str, group: str, *, sql: str | None = None, tags: str | None = None,
        queue_id: int | None = None, queue_offset: int | None = None, msg_id: str | None = None,
        key: str | None = None, bloom_filter=DEFAULT_BLOOM, filter_support_retry: bool = False,
        broker: str | None = None) -> Why | list[Why]:
    """Walk one message through every step of the broker's filter for ``group``.

    Parameters
    ----------
    store : cq.Store or cq.Cluster
        A Cluster asks each broker holding the topic (its own registration): a msg id or key
        gives the messages of every broker that holds one, each :class:`Why` naming its
        ``broker`` (docs/reading.md#clusters).
    topic, group : str
    sql, tags : str, optional
        The group's subscription; neither: its registration in ``config/consumerFilter.json``
        (:class:`cq.UnknownGroupError` when it has none).
    queue_id, queue_offset : int, optional
        The message by its ConsumeQueue unit.
    msg_id : str, optional
        The offset message id (store host + CommitLog offset, :attr:`cq.Message.msg_id`) or
        a ``UNIQ_KEY`` (found through the IndexFiles, else by a scan of the topic).
    key : str, optional
        A key of ``KEYS`` (IndexFiles, else a scan).
    bloom_filter : bloom.BloomFilter, DEFAULT_BLOOM or NO_BLOOM
        The broker's Bloom filter, as for :meth:`cq.Store.consume`.
    filter_support_retry : bool
        The broker's ``filterSupportRetry`` (default off, as on the broker; its config is not
        in the store). On, for a ``%RETRY%`` topic and a SQL92 subscription, layer 2 is
        :class:`cq.RetrySqlFilter`'s: the filter registered in ``config/consumerFilter.json``
        for (the message's ``RETRY_TOPIC``, group) decides, none registered matches
        (docs/why.md#retry-topics).
    broker : str, optional
        For a Cluster: only this broker; needed with ``queue_id`` when several brokers hold the topic.

    Returns
    -------
    cq.analyses.why.Why or list of cq.analyses.why.Why
        One :class:`~cq.analyses.why.Why` for a queue offset; a list (one per matching message,
        CommitLog order) for ``msg_id`` / ``key``. ``.delivered``, ``.dropped_by``
        (None, ``"consume_queue"``, ``"commit_log"``, ``"client"``), ``.steps`` with their
        evidence, ``str()`` for people, ``to_dict()`` for JSON.

    Raises
    ------
    cq.analyses.why.MessageNotFoundError
        No such unit or message (a ValueError and a LookupError).

    Examples
    --------
    >>> w = why(Store("tests/data/golden_store"),  # doctest: +SKIP
    ...         "GoldenFilterTopic", "GID_SQL_A", sql="a > 5 AND b = 'abc'", queue_id=0, queue_offset=0)
    >>> w.delivered, w.dropped_by  # doctest: +SKIP
    (False, 'consume_queue')
    """
    given = check_message_args(queue_id, queue_offset, msg_id, key, sql, tags)
    if isinstance(store, Cluster):
        return _why_cluster(store, topic, group, broker, queue_id=queue_id, queue_offset=queue_offset, msg_id=msg_id,
                            key=key, sql=sql, tags=tags, bloom_filter=bloom_filter,
                            filter_support_retry=filter_support_retry)
    if broker is not None:
        raise ValueError("broker= is for a cq.Cluster; a Store is one broker")
    flt, sub = resolve_subscription(store, topic, group, sql=sql, tags=tags, bloom_filter=bloom_filter,
                                    filter_support_retry=filter_support_retry)
    if topic in store.layout.compaction_topics:  # docs/reading.md#compaction-topics
        if given[0]:
            return why_compacted(store, topic, group, flt, sub, int(queue_id), int(queue_offset))
        # an offset message id a consumer of the topic saw names a compaction log position
        served = compaction_positions(store, topic, msg_id) if msg_id is not None else []
        if served:
            note = f"offset message id of the compaction log position {parse_offset_msg_id(msg_id)[1]}"
            return [why_compacted(store, topic, group, flt, sub, q, o, found_by="msg_id", note=note) for q, o in served]
        messages, found_by, note = find_messages(store, topic, msg_id=msg_id, key=key)
        return [why_compacted(store, topic, group, flt, sub, *position(m, topic), found_by=found_by, note=note)
                for m in messages]
    if topic in store.layout.batch_cq_topics:  # docs/reading.md#batchcq
        if given[0]:
            return why_batch_message(store, topic, group, flt, sub, int(queue_id), int(queue_offset))
        return [why_batch_message(store, topic, group, flt, sub, q, o, found_by="scan",
                                  note=f"found by scanning the batch records of topic {topic}")
                for q, o in find_batch_messages(store, topic, msg_id, key)]
    if given[0]:
        return why_unit(store, topic, group, flt, sub, int(queue_id), int(queue_offset))
    messages, found_by, note = find_messages(store, topic, msg_id=msg_id, key=key)
    out = []
    for msg in messages:
        w = _why_message(store, topic, group, flt, sub, msg, found_by, note)
        out.append(w)
    return out


def _why_message(store: Store, topic: str, group: str, flt, sub: Subscription, msg: Message, found_by: str,
                 note: str) -> Why:
    """:func:`why_unit` for a found record, or a Why saying it has no ConsumeQueue unit."""
    queue_id, queue_offset = position(msg, topic)
    try:
        cqueue = store.consume_queue(topic, queue_id)
        lo, hi = cqueue.min_offset, cqueue.max_offset
        unit = cqueue.unit(queue_offset) if lo <= queue_offset < hi else None
    except KeyError:
        unit = None
    if unit is not None and unit[0] == msg.commit_log_offset:
        return why_unit(store, topic, group, flt, sub, queue_id, queue_offset, found_by=found_by, note=note)
    # the record exists but no unit points at it: never dispatched (a prepared or rolled-back
    # transaction), or its unit is gone
    steps = [WhyStep("consume_queue_unit", DROP, "no_unit",
                     {"commit_log_offset": msg.commit_log_offset, "queue_offset": msg.queue_offset},
                     {"topic": topic, "queue_id": msg.queue_id, "transaction_type": msg.transaction_type})]
    not_reached(steps, "consume_queue", "commit_log", "client")
    return Why(topic, group, sub, msg.queue_id, msg.queue_offset, msg.commit_log_offset, msg.store_size,
               msg.msg_id, found_by, False, DROPPED_BY_CONSUME_QUEUE, steps, None, note)


def _why_cluster(cluster: Cluster, topic: str, group: str, broker: str | None, *, queue_id, queue_offset, msg_id,
                 key, **subscription) -> Why | list[Why]:
    """:func:`why` over the brokers of a cluster holding ``topic``, each with its own registration."""
    names = brokers_to_ask(cluster, topic, broker, queue_id)
    if queue_id is not None:
        return ask_replicas(cluster, names[0], topic, lambda store: [
            why(store, topic, group, queue_id=queue_id, queue_offset=queue_offset, **subscription)])[0]
    parsed = parse_offset_msg_id(msg_id) if msg_id is not None else None
    if parsed is not None:
        # an offset message id names one record of one broker (its store host): ask that broker alone
        wanted = msg_id.strip().upper()
        holders = [n for n in names if (m := message_at(cluster.stores[n], parsed[1])) is not None
                   and m.msg_id == wanted]
        names = holders or names
    found: list[Why] = []
    misses = []
    for name in names:
        try:
            found += ask_replicas(cluster, name, topic, lambda store: why(store, topic, group, msg_id=msg_id,
                                                                           key=key, **subscription))
        except MessageNotFoundError as exc:
            misses.append(f"{name}: {exc}")
    if not found:
        raise MessageNotFoundError("no broker of the cluster holds it; " + "; ".join(misses))
    return found


def _tag_why(w: Why, broker: str, root: str | None, note: str | None) -> Why:
    return replace(w, broker=broker, replica=root, replica_note=note)


def ask_replicas(cluster: Cluster, name: str, topic: str, ask: Callable[[Store], list], *,
                 why_of: Callable[[Any], Why | None] = lambda w: w,
                 tag: Callable[[Any, str, str | None, str | None], Any] = _tag_why) -> list:
    """``ask`` of broker ``name``'s store; for a broker given as several replicas, of the replica read
    first, then of the others for the messages the replica read lacks (docs/reading.md#replicas).

    Each answer (a :class:`Why`, or what ``why_of`` finds one in) is returned through ``tag(answer,
    broker, replica root, replica note)``: which replica answered and where the message lies among
    them (:func:`cq.store.replicas.replica_place`; ``None`` for one store). Answers without a Why
    come from the replica read only. MessageNotFoundError when no replica holds it (the replica
    read's own).
    """
    replicas = cluster.replicas.get(name)
    if replicas is None:
        return [tag(a, name, None, None) for a in ask(cluster.stores[name])]
    read = replicas.read
    try:
        answers = [(read, a) for a in ask(read.store)]
        missing = None
    except MessageNotFoundError as exc:
        answers, missing = [], exc
    seen = {(w.queue_id, w.queue_offset) for _, a in answers if (w := why_of(a)) is not None}
    for other in replicas.replicas:
        if other is read:
            continue
        try:
            more = ask(other.store)
        except MessageNotFoundError:
            continue
        for a in more:
            w = why_of(a)
            if w is not None and (w.queue_id, w.queue_offset) not in seen:
                seen.add((w.queue_id, w.queue_offset))
                answers.append((other, a))
    if not answers:
        raise missing
    return [tag(a, name, r.root, None if (w := why_of(a)) is None else replica_place(replicas, topic, w, r.root))
            for r, a in answers]

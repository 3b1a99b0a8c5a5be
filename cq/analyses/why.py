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
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

import selector

from .. import format as fmt
from ..errors import StoreFormatError
from ..filter.layers import (
    RETRY_CLASS_FILTER_MODE,
    RETRY_NO_RETRY_TOPIC,
    RETRY_NOT_REGISTERED,
    RETRY_REGISTERED,
    Layers,
    RetryPropertiesError,
    RetrySqlFilter,
    SqlFilter,
    bloom_key,
    low_int32,
    retry_group,
)
from ..filter.subscription import DEFAULT_BLOOM, registration_filter, retry_filter
from ..readers.batchcq import expand_batch
from ..readers.commitlog import Message
from ..readers.config import CONSUMER_FILTER_FILE, RegisteredFilter
from ..store.cluster import Cluster
from ..store.decide import decide_units
from ..store.releases import check_lite
from ..store.replicas import replica_place
from ..store.store import Store
from ..store.tiered import READ_AHEAD_UNITS
from ..tags import EXPRESSION_TYPE_SQL92, EXPRESSION_TYPE_TAG
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
    DROPPED_BY_COMPACTION,
    DROPPED_BY_CONSUME_QUEUE,
    DROPPED_BY_EXPIRY,
    INFO,
    NOT_REACHED,
    PASS,
)
from .why_render import format_why, step_detail, step_title, verdict_line

__all__ = [
    "MessageNotFoundError",
    "Subscription",
    "Why",
    "WhyStep",
    "find_messages",
    "resolve_subscription",
    "why",
]



@dataclass(frozen=True)
class Subscription:
    """The subscription a :class:`Why` replays.

    Attributes
    ----------
    type : str
        ``"SQL92"`` or ``"TAG"``.
    expression : str
        The SQL92 text or the tag expression.
    source : str
        ``"config/consumerFilter.json"`` (looked up by group) or ``"given"``.
    registration : RegisteredFilter or None
        The registration it came from.
    retry_filter : bool
        Layer 2 goes through the broker's retry filter (``filterSupportRetry`` on, a
        ``%RETRY%`` topic): the filter registered for (the message's ``RETRY_TOPIC``, group)
        decides (docs/filtering.md#retry-filter).
    """

    type: str
    expression: str
    source: str
    registration: RegisteredFilter | None = None
    retry_filter: bool = False

    @property
    def born_time(self) -> int | None:
        """The registered bornTime (None when the subscription was given)."""
        return None if self.registration is None else self.registration.born_time

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "expression": self.expression, "source": self.source,
                               "retry_filter": self.retry_filter}
        if self.registration is not None:
            out.update(_registration_dict(self.registration))
        return out


def _registration_dict(r: RegisteredFilter) -> dict[str, Any]:
    """A registration's facts as ``why``'s JSON shows them."""
    return {"born_time": r.born_time, "dead_time": r.dead_time, "is_dead": r.is_dead,
            "client_version": r.client_version, "bloom_matches": r.bloom_matches}


def resolve_subscription(store: Store, topic: str, group: str, *, sql: str | None = None,
                         tags: str | None = None, bloom_filter=DEFAULT_BLOOM, filter_support_retry: bool = False):
    """``(filter, Subscription)`` for a group: the given sql/tags, or its registration.

    With ``filter_support_retry`` (the broker's ``filterSupportRetry``) and a ``%RETRY%``
    topic, a SQL92 subscription's filter is a :class:`cq.RetrySqlFilter` whose registry is the
    store's ``config/consumerFilter.json`` (docs/filtering.md#retry-filter).

    Raises :class:`cq.UnknownGroupError` when neither is given and the group has no
    registration for ``topic``. Raises :class:`cq.UnsupportedLayoutError` for a Lite topic's
    consumption (5.5.0+, docs/formats.md#lite-topics), which the store does not show.
    """
    check_lite(store, topic, group, "the group's view of the topic")
    if sql is not None or tags is not None:
        flt = store.make_filter(topic, group, sql=sql, tags=tags, bloom_filter=bloom_filter)
        if sql is not None:   # the group's registration when sql is its expression (Store.make_filter)
            sub = Subscription(EXPRESSION_TYPE_SQL92, sql, "given", store.registration_of(topic, group, sql))
        else:
            sub = Subscription(EXPRESSION_TYPE_TAG, tags, "given")
    else:
        reg = store.registered_filter(topic, group)
        flt = registration_filter(reg, bloom_filter)  # what Store.make_filter builds for a group named alone
        sub = Subscription(reg.expression_type or EXPRESSION_TYPE_SQL92, reg.expression or "", f"config/{CONSUMER_FILTER_FILE}",
                           reg)
    if filter_support_retry and retry_group(topic) is not None:
        if Layers(flt).sql92:
            checked_with = None if isinstance(bloom_filter, str) else bloom_filter
            flt = retry_filter(flt, store.registered_filters(bloom_filter=checked_with))
            sub = replace(sub, retry_filter=True)
        elif sub.type != EXPRESSION_TYPE_SQL92:  # a TAG subscription matches at layer 2 before the retry lookup
            sub = replace(sub, retry_filter=True)
    return flt, sub


@dataclass(frozen=True)
class WhyStep:
    """One step of the broker's filter for one message.

    Attributes
    ----------
    name : str
        ``"consume_queue_unit"``, ``"consume_queue"`` (layer 1), ``"is_msg_in_live"``,
        ``"commit_log_record"``, ``"commit_log"`` (layer 2), ``"client"``.
    result : str
        ``"pass"``, ``"drop"``, ``"not_reached"`` or ``"info"``.
    reason : str
        A reason code (layer 1: :meth:`cq.SqlFilter.explain_consume_queue`'s codes).
    evidence : dict
        The facts read (JSON-ready).
    data : dict
        What the step's wording needs besides the evidence (not in ``to_dict()``; e.g. layer 2's
        ``selector.Explanation``); a step worded by its maker (paths) carries ``title`` and ``detail`` here.
    title : str
        What a person calls it (:func:`cq.analyses.why_render.step_title`).
    detail : str
        One or a few lines saying why (:func:`cq.analyses.why_render.step_detail`).
    """

    name: str
    result: str
    reason: str
    evidence: dict = field(default_factory=dict)
    data: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def title(self) -> str:
        """What a person calls the step (worded by :mod:`cq.analyses.why_render`)."""
        return step_title(self)

    @property
    def detail(self) -> str:
        """Why the step went as it did, in words (:mod:`cq.analyses.why_render`)."""
        return step_detail(self)

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.name, "title": self.title, "result": self.result, "reason": self.reason,
                "detail": self.detail, "evidence": self.evidence}


@dataclass(frozen=True)
class Why:
    """One message walked through a group's filter (:func:`cq.why`).

    Attributes
    ----------
    topic, group : str
    subscription : Subscription
    queue_id, queue_offset : int
    commit_log_offset : int
        From the ConsumeQueue unit (a compaction topic's: the CommitLog record its compaction store copied,
        where the ConsumeQueue still holds it; else the compaction log position).
    size : int
        The unit's record size.
    msg_id : str or None
        The offset message id (None when the record could not be read).
    found_by : str
        ``"queue_offset"``, ``"msg_id"``, ``"index"`` or ``"scan"``.
    delivered : bool
        Whether the group receives the message.
    dropped_by : str or None
        ``None`` (delivered), ``"consume_queue"``, ``"commit_log"``, ``"client"``, ``"expired"``
        (the broker deleted it: the unit is below its queue's minimum, or its record is gone), or
        ``"compaction"`` (a compaction topic's message its compaction store no longer holds).
    steps : list of WhyStep
    explanation : selector.Explanation or None
        Layer 2's evaluation tree (SQL92 only, when layer 2 ran).
    note : str or None
        How the message was found (index, or a scan and why).
    broker : str or None
        The broker holding the message, when asked of a :class:`cq.Cluster` (None for one store).
    replica : str or None
        For a broker given as several replicas: the store root this walk read (the replica a
        read takes, or the one that alone holds the message; docs/reading.md#replicas).
    replica_note : str or None
        For a broker given as several replicas: which replicas hold the message, and whether a
        consumer reading the replica read receives it at all.
    """

    topic: str
    group: str
    subscription: Subscription
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    size: int
    msg_id: str | None
    found_by: str
    delivered: bool
    dropped_by: str | None
    steps: list[WhyStep]
    explanation: Any = None
    note: str | None = None
    broker: str | None = None
    replica: str | None = None
    replica_note: str | None = None

    @property
    def verdict(self) -> str:
        """One line: delivered, or which step dropped it and why (``why_render.verdict_line``)."""
        return verdict_line(self)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``delivered``, ``dropped_by``, ``queue_id``, ``queue_offset``,
        ``commit_log_offset``, ``steps`` (each with its evidence), and more."""
        return {
            **({} if self.broker is None else {"broker": self.broker}),
            **({} if self.replica is None else {"replica": self.replica, "replica_note": self.replica_note}),
            "topic": self.topic, "group": self.group, "subscription": self.subscription.to_dict(),
            "queue_id": self.queue_id, "queue_offset": self.queue_offset,
            "commit_log_offset": self.commit_log_offset, "size": self.size, "msg_id": self.msg_id,
            "found_by": self.found_by, "note": self.note,
            "delivered": self.delivered, "dropped_by": self.dropped_by, "verdict": self.verdict,
            "steps": [s.to_dict() for s in self.steps],
        }

    def __str__(self) -> str:
        """The walk as a person reads it (:func:`cq.analyses.why_render.format_why`)."""
        return format_why(self)


def _layer1_sql(flt: SqlFilter, sub: Subscription, ext_unit, address: int | None) -> tuple[dict, dict]:
    """Layer 1's facts for a SQL92 filter: ``(evidence, data)`` (the ext unit, the group's bits and which are set)."""
    evidence: dict[str, Any] = {"bloom_key": bloom_key(flt.group, flt.topic), "born_time": flt.born_time}
    if ext_unit is not None:
        evidence["ext_unit"] = {"address": address, "ext_offset": fmt.undecorate(address),
                                "size": ext_unit.size, "tags_code": ext_unit.tags_code,
                                "msg_store_time": ext_unit.msg_store_time, "bit_map_size": ext_unit.bit_map_size,
                                "bitmap": None if ext_unit.filter_bitmap is None else ext_unit.filter_bitmap.hex()}
    if flt.bloom_data is not None:
        positions = list(flt.bloom_data.bit_pos)
        evidence["bit_positions"] = positions
        evidence["bit_num"] = flt.bloom_data.bit_num
        bitmap = ext_unit.filter_bitmap if ext_unit is not None else None
        if bitmap is not None:
            n = len(bitmap) * 8
            is_set = [bool(0 <= p < n and bitmap[p >> 3] & (1 << (p & 7))) for p in positions]
            evidence["bits_set"] = is_set
            evidence["bits_missing"] = [p for p, ok in zip(positions, is_set) if not ok]
    return evidence, {"kind": "sql", "born_time_assumed": sub.registration is None and Layers(flt).sql92}


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
        return _expired_unit(store, topic, group, flt, sub, cqueue, queue_id, queue_offset,
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
    found = _decide(flt, log, phys, size, slot, ext)
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
        ev, data = _layer1_sql(flt, sub, ext_unit, slot if ext_unit is not None else None)
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
        _not_reached(steps, "commit_log", "client")
    else:
        if not present:
            dropped_by = DROPPED_BY_EXPIRY if expired else DROPPED_BY_COMMIT_LOG
            steps.append(WhyStep("commit_log", DROP, "expired" if expired else "record_missing",
                                 {"commit_log_min_offset": log.min_offset, "commit_log_max_offset": log.max_offset},
                                 {"missing": (phys, size, log.min_offset, log.max_offset)}))
            _not_reached(steps, "client")
        else:
            msg = log.read_message(phys)
            msg_id = msg.msg_id
            _, reason2, data2, ev2, explanation = _layer2(flt, sub, msg, log, phys)
            matched2 = bool(found.commit_log[0])
            steps.append(WhyStep("commit_log", PASS if matched2 else DROP, reason2, ev2, data2))
            if not matched2:
                dropped_by = DROPPED_BY_COMMIT_LOG
                _not_reached(steps, "client")
            else:
                ok, step = _client_step(flt, reason, msg, ok=bool(found.delivered[0]))
                steps.append(step)
                if ok:
                    delivered = True
                else:
                    dropped_by = DROPPED_BY_CLIENT
    return Why(topic, group, sub, queue_id, queue_offset, phys, size, msg_id, found_by, delivered, dropped_by,
               steps, explanation, note)


def _decide(flt, log, phys: int, size: int, slot: int, ext):
    """The broker's decisions over one unit (:func:`cq.store.decide.decide_units`, what consume runs); a retry
    record without properties fails the pull (layer 2 then delivers nothing)."""
    one = np.array
    args = (Layers(flt), log, one([phys], np.int64), one([size], np.int64), one([slot], np.int64))
    try:
        return decide_units(*args, ext=ext, present_all=True)
    except RetryPropertiesError:
        found = decide_units(*args, ext=ext, present_all=True, layer2=False)
        found.commit_log = found.delivered = np.zeros(1, dtype=bool)
        return found


def _client_step(flt, reason: str, msg: Message, batch: bool = False, *, ok: bool | None = None) -> tuple[bool, WhyStep]:
    """The client's tag re-check of ``msg`` (``reason``: layer 1's; ``batch``: a message unwrapped from a batch
    record), as a step; ``ok`` the decision when the pipeline made it already."""
    if ok is None:
        ok = flt.is_matched_by_client(msg.tags)
    tags_set = sorted(flt.subscription.tags_set) if Layers(flt).kind == "tags" and \
        flt.subscription is not None else []
    reason3 = "no_recheck" if not tags_set else "tag_in_set" if ok else "tag_not_in_set"
    return ok, WhyStep("client", PASS if ok else DROP, reason3, {"tags": msg.tags, "tags_set": tags_set},
                       {"layer1_reason": reason, "batch": batch})


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
        _not_reached(steps, "commit_log", "client")
    elif not present:
        dropped_by = DROPPED_BY_EXPIRY if phys < log.min_offset else DROPPED_BY_COMMIT_LOG
        steps.append(WhyStep("commit_log", DROP, "record_missing", {},
                             {"batch": True, "missing": (phys, size, log.min_offset, log.max_offset)}))
        _not_reached(steps, "client")
    else:
        record = log.read_message(phys)
        msg_id = record.msg_id
        _, reason2, data2, ev2, explanation = _layer2(flt, sub, record, log, phys)
        matched2 = bool(found.commit_log[0])
        steps.append(WhyStep("commit_log", PASS if matched2 else DROP, reason2, ev2, {**data2, "batch": True}))
        if not matched2:
            dropped_by = DROPPED_BY_COMMIT_LOG
            _not_reached(steps, "client")
        else:
            msg = expand_batch(record)[queue_offset - base]
            ok, step = _client_step(flt, reason, msg, batch=True)
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
        _not_reached(steps, "client")
    else:
        with store.compaction_log(topic, queue_id) as log:
            msg = log.read_message(phys)
        msg_id = msg.msg_id
        steps.append(WhyStep("commit_log", PASS, "compaction_no_filter",
                             {"record_topic": msg.topic, "tags": msg.tags, "keys": msg.keys}, {"compaction": True}))
        ok, step = _client_step(flt, "compaction_no_filter", msg, ok=bool(found.delivered[0]))
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
    _not_reached(steps, "consume_queue", "commit_log", "client")
    return Why(topic, group, sub, queue_id, queue_offset, phys, size, msg_id, found_by, False, DROPPED_BY_COMPACTION,
               steps, None, note)


def _expired_unit(store: Store, topic: str, group: str, flt, sub: Subscription, cqueue, queue_id: int,
                  queue_offset: int, lo: int, found_by: str, note: str | None) -> Why:
    """The Why of a unit below its queue's minimum: the broker expired it (its record, and maybe its
    ConsumeQueue file, deleted); a consumer at that offset is moved to the minimum and never gets it."""
    phys = size = -1
    try:  # the unit itself, while its ConsumeQueue file is still there
        if cqueue.files and queue_offset >= cqueue.files[0][0] // fmt.CQ_STORE_UNIT_SIZE:
            phys, size, _ = cqueue.unit(queue_offset)
    except (StoreFormatError, IndexError, ValueError):
        pass
    steps = [WhyStep("consume_queue_unit", DROP, DROPPED_BY_EXPIRY,
                     {"min_offset": lo, "commit_log_offset": phys, "size": size,
                      "commit_log_min_offset": store.commit_log.min_offset},
                     {"topic": topic, "queue_id": queue_id, "queue_offset": queue_offset})]
    _not_reached(steps, "consume_queue", "commit_log", "client")
    return Why(topic, group, sub, queue_id, queue_offset, phys, size, None, found_by, False, DROPPED_BY_EXPIRY,
               steps, None, note)


def _layer2(flt, sub: Subscription, msg: Message, log, phys: int) -> tuple[bool, str, dict, dict, Any]:
    """Layer 2 for the record ``msg`` read at ``phys``: ``(matched, reason, data, evidence, explanation)``."""
    ev: dict[str, Any] = {"record_topic": msg.topic, "store_timestamp": msg.store_timestamp,
                          "tags": msg.tags, "keys": msg.keys}
    if Layers(flt).kind == "retry":
        # None when the record stores no properties: the broker's decoded properties are then null
        props = log.gather_properties([phys], absent_as_none=True)[0]
        return _layer2_retry(flt, msg, ev, props)
    if Layers(flt).sql92:
        matched, reason, data, explanation = _layer2_sql(flt, flt.sql, msg, ev)
        if retry_group(flt.topic) is not None:  # filterSupportRetry off: the group's own expression decides
            ev["retry"] = {"filter_support_retry": False, "retry_topic": msg.properties.get(fmt.PROPERTY_RETRY_TOPIC)}
        return matched, reason, data, ev, explanation
    matched = flt.is_matched_by_commit_log(msg.properties)
    return matched, "tag_subscription", {"kind": "tags", "retry_filter": sub.retry_filter}, ev, None


def _layer2_sql(flt, sql: str, msg: Message, ev: dict, matched: bool | None = None,
                kind: str = "sql") -> tuple[bool, str, dict, Any]:
    """SQL92 layer 2: the decision (``flt``'s, unless ``matched`` is given) and the selector's tree."""
    if matched is None:
        matched = flt.is_matched_by_commit_log(msg.properties)
    explanation = selector.explain(sql, msg.properties)
    ev["explain"] = explanation.to_dict()
    ev["value"] = explanation.value
    return matched, "selector_" + explanation.value.lower(), {"kind": kind, "matched": matched,
                                                              "explanation": explanation}, explanation


def _layer2_retry(flt: RetrySqlFilter, msg: Message, ev: dict,
                  props: dict[str, str] | None) -> tuple[bool, str, dict, dict, Any]:
    """Layer 2 of the retry filter: which registered filter decided (:meth:`cq.RetrySqlFilter.lookup`) and how;
    ``props`` the record's properties, None when it stores none."""
    group = retry_group(flt.topic)
    retry: dict[str, Any] = {"filter_support_retry": True, "retry_topic": None, "group": group, "lookup": None,
                             "decided_by": None, "registration": None, "expression": None}
    ev["retry"] = retry
    data = {"kind": "retry"}
    try:
        look = flt.lookup(props)
    except RetryPropertiesError:
        retry["decided_by"] = "no_properties"
        return False, "retry_no_properties", data, ev, None
    retry.update(retry_topic=look.retry_topic, decided_by=look.reason,
                 lookup=list(look.key) if look.key is not None else None)
    matched = flt.is_matched_by_commit_log(props)
    if look.reason == RETRY_REGISTERED:
        registration = getattr(flt.registry, "registration", None)  # a FilterRegistry knows its entries
        reg = registration(*look.key) if registration is not None else None
        if reg is not None:
            retry["registration"] = _registration_dict(reg)
        target = look.filter
        if not Layers(target).sql92:
            return matched, "retry_registered_no_expression", data, ev, None
        retry["expression"] = target.sql
        matched, reason, data, explanation = _layer2_sql(target, target.sql, msg, ev, matched, "retry")
        return matched, "retry_" + reason, data, ev, explanation
    reasons = {RETRY_NOT_REGISTERED: "retry_not_registered", RETRY_NO_RETRY_TOPIC: "retry_no_retry_topic",
               RETRY_CLASS_FILTER_MODE: "class_filter_mode"}
    if look.reason in reasons:
        return matched, reasons[look.reason], data, ev, None
    # RETRY_NOT_RETRY_TOPIC (resolve_subscription builds the retry filter only for %RETRY% topics): the
    # filter's own expression decides
    matched, reason, data, explanation = _layer2_sql(flt, flt.sql, msg, ev, matched, "retry")
    return matched, reason, data, ev, explanation


def _not_reached(steps: list[WhyStep], *names: str) -> None:
    """The steps ``names``, not reached (an earlier step dropped the message)."""
    steps.extend(WhyStep(name, NOT_REACHED, "not_reached") for name in names)


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
    _not_reached(steps, "consume_queue", "commit_log", "client")
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

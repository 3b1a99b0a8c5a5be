"""The pieces a ``why`` is made of (:mod:`cq.analyses.why`): the subscription replayed, the steps and
their evidence, and the step of each filter layer and of the client's re-check over one record.

:class:`Subscription` (with :func:`resolve_subscription`), :class:`WhyStep` and :class:`Why` are
the records; :func:`layer1_sql`, :func:`decide_record`, :func:`layer2`, :func:`client_step` and
:func:`expired_unit` make the steps, each decision by the same filter methods
:meth:`cq.Store.consume` uses; :mod:`cq.analyses.why` walks a unit through them, and
:mod:`cq.analyses.why_places` does so where the broker serves from other files.
"""
from __future__ import annotations

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
    retry_group,
)
from ..filter.subscription import DEFAULT_BLOOM, registration_filter, retry_filter
from ..readers.commitlog import Message
from ..readers.config import CONSUMER_FILTER_FILE, RegisteredFilter
from ..store.decide import decide_units
from ..store.releases import check_lite
from ..store.store import Store
from ..tags import EXPRESSION_TYPE_SQL92, EXPRESSION_TYPE_TAG
from .why_codes import (
    DROP,
    DROPPED_BY_EXPIRY,
    NOT_REACHED,
    PASS,
)
from .why_render import format_why, step_detail, step_title, verdict_line

__all__ = ["Subscription", "Why", "WhyStep", "client_step", "decide_record", "expired_unit", "layer1_sql", "layer2",
           "not_reached", "resolve_subscription"]


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


def layer1_sql(flt: SqlFilter, sub: Subscription, ext_unit, address: int | None) -> tuple[dict, dict]:
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


def decide_record(flt, log, phys: int, size: int, slot: int, ext):
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


def client_step(flt, reason: str, msg: Message, batch: bool = False, *, ok: bool | None = None) -> tuple[bool, WhyStep]:
    """The client's tag re-check of ``msg`` (``reason``: layer 1's; ``batch``: a message unwrapped from a batch
    record), as a step; ``ok`` the decision when the pipeline made it already."""
    if ok is None:
        ok = flt.is_matched_by_client(msg.tags)
    tags_set = sorted(flt.subscription.tags_set) if Layers(flt).kind == "tags" and \
        flt.subscription is not None else []
    reason3 = "no_recheck" if not tags_set else "tag_in_set" if ok else "tag_not_in_set"
    return ok, WhyStep("client", PASS if ok else DROP, reason3, {"tags": msg.tags, "tags_set": tags_set},
                       {"layer1_reason": reason, "batch": batch})


def expired_unit(store: Store, topic: str, group: str, flt, sub: Subscription, cqueue, queue_id: int,
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
    not_reached(steps, "consume_queue", "commit_log", "client")
    return Why(topic, group, sub, queue_id, queue_offset, phys, size, None, found_by, False, DROPPED_BY_EXPIRY,
               steps, None, note)


def layer2(flt, sub: Subscription, msg: Message, log, phys: int) -> tuple[bool, str, dict, dict, Any]:
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


def not_reached(steps: list[WhyStep], *names: str) -> None:
    """The steps ``names``, not reached (an earlier step dropped the message)."""
    steps.extend(WhyStep(name, NOT_REACHED, "not_reached") for name in names)

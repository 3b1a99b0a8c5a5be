"""``why`` written for people: the text of a :class:`cq.analyses.why.Why` (``str(w)``, ``w.verdict``).

:mod:`cq.analyses.why` decides (each step with its result code and evidence); this module words
what it decided, as :mod:`cq.analyses.cost_render` does for the cost report. ``docs/why.md`` shows
the output. It reads a ``Why`` by its attributes and never imports :mod:`cq.analyses.why`.
"""
from __future__ import annotations

import binascii

from ..filter.layers import retry_group
from ..readers.config import CONSUMER_FILTER_FILE
from ..tags import EXPRESSION_TYPE_SQL92
from .why_codes import (
    DROP,
    DROPPED_BY_CLIENT,
    DROPPED_BY_COMMIT_LOG,
    DROPPED_BY_CONSUME_QUEUE,
    DROPPED_BY_EXPIRY,
    INFO,
    NOT_REACHED,
    PASS,
)

__all__ = ["DROPPED_BY_TEXT", "LAYER1_TEXT", "STEP_MARKS", "bits_text", "format_why", "retry_filter_text", "source_text", "verdict_line"]

#: A step's result as the text's margin marks it.
STEP_MARKS = {PASS: "PASS", DROP: "DROP", NOT_REACHED: "----", INFO: "info"}

#: What layer 1 did, by the reason code of :meth:`cq.SqlFilter.explain_consume_queue` (and the tag
#: filter's): the first line of the layer-1 step's detail.
LAYER1_TEXT = {
    "no_subscription": "no subscription: every unit passes",
    "class_filter_mode": "class filter mode: every unit passes",
    "tags_code_unknown": "the slot holds an ext address that cannot be resolved: the tags code is unknown, "
                         "so the unit passes",
    "sub_all": "subscription \"*\": every tags code passes",
    "tags_code_in_set": "the tags code is in the subscription's code set",
    "tags_code_not_in_set": "the tags code is not in the subscription's code set",
    "no_bloom_data": "the filter has no bloom data: layer 1 lets every unit through",
    "no_ext_unit": "no ext unit (the slot is not an ext address, the store has no ext files, or the address "
                   "cannot be resolved): the unit passes",
    "not_in_live": "isMsgInLive is false (msgStoreTime <= bornTime): the bitmap was not computed for this "
                   "version of the filter, so the unit passes",
    "no_bitmap": "the ext unit has no bitmap: the unit passes",
    "bloom_data_invalid": "the bloom data is not valid for the broker's Bloom filter: the unit passes",
    "bitmap_length": "the bitmap's bit length differs from the bloom data's bitNum: the unit passes",
    "position_out_of_range": "a bit position lies outside the bitmap (isHit throws, the broker logs it and "
                             "matches): the unit passes",
    "bloom_hit": "every one of the group's bits is set (a Bloom hit; layer 2 decides)",
    "bloom_miss": "some of the group's bits are clear: the broker skips the unit without reading the CommitLog",
}


#: ``dropped_by`` as a person says it.
DROPPED_BY_TEXT = {DROPPED_BY_CONSUME_QUEUE: "the ConsumeQueue layer (layer 1)",
            DROPPED_BY_COMMIT_LOG: "the CommitLog layer (layer 2)",
            DROPPED_BY_CLIENT: "the client's tag re-check",
            DROPPED_BY_EXPIRY: "the broker's expiry of old files"}


def source_text(sub) -> str:
    """Where the subscription came from: given, or its registration (bornTime, dead, bloom data)."""
    r = sub.registration
    if r is None:
        return "given, not looked up in config/consumerFilter.json"
    dead = f", dead since {r.dead_time}" if r.is_dead else ""
    bloom = ("" if r.bloom_matches else ", no bloom data (layer 1 passes every unit)" if r.bloom_data is None
             else ", bloom data does NOT match the broker's filter")
    where = (f"given, the expression registered in config/{CONSUMER_FILTER_FILE}" if sub.source == "given"
             else f"registered in {sub.source}")   # docs/filtering.md#born-time
    return f"{where}: bornTime {r.born_time}{dead}{bloom}"


def retry_filter_text(sub, group: str | None) -> str:
    """The retry filter's line (``filterSupportRetry`` on a ``%RETRY%`` topic)."""
    head = "ExpressionForRetryMessageFilter (filterSupportRetry): "
    if sub.type != EXPRESSION_TYPE_SQL92:
        return head + "a TAG subscription matches at layer 2 before the RETRY_TOPIC lookup"
    return head + f"layer 2 evaluates the filter registered for (the message's RETRY_TOPIC, {group})"


def bits_text(bitmap: bytes | None) -> str:
    """A bitmap as spaced hex bytes, or ``none``."""
    return "none" if bitmap is None else binascii.hexlify(bitmap, " ").decode()


def verdict_line(w) -> str:
    """One line: delivered, or which step dropped it and why."""
    if w.delivered:
        return "DELIVERED: the group receives this message"
    step = next(s for s in w.steps if s.result == DROP)
    return f"NOT DELIVERED: dropped by {DROPPED_BY_TEXT[w.dropped_by]}: {step.detail.splitlines()[0]}"


def format_why(w) -> str:
    """The walk of ``w`` (a :class:`cq.analyses.why.Why`): the message, the subscription, each step
    with its mark and detail, the verdict."""
    sub = w.subscription
    lines = [
        (f"message   {w.topic} queue {w.queue_id} offset {w.queue_offset}"
         f"{'' if w.broker is None else ' on broker ' + w.broker}: CommitLog offset "
         f"{w.commit_log_offset}, {w.size} bytes, msgId {w.msg_id or '?'}"),
        f"group     {w.group}: {sub.type} {sub.expression!r} ({source_text(sub)})",
    ]
    if sub.retry_filter:
        lines.append(f"filter    {retry_filter_text(sub, retry_group(w.topic))}")
    if w.note:
        lines.append(f"found     {w.note}")
    lines.append("")
    for i, s in enumerate(w.steps, 1):
        mark = STEP_MARKS[s.result]
        lines.append(f"{i}. [{mark}] {s.title}")
        lines.extend("     " + line if line.strip() else "" for line in s.detail.splitlines())
    lines.append("")
    lines.append(f"verdict   {verdict_line(w)}")
    return "\n".join(lines)

"""``why`` written for people: the text of a :class:`cq.analyses.why.Why` (``str(w)``, ``w.verdict``) and
of each of its steps (``WhyStep.title``, ``WhyStep.detail``).

:mod:`cq.analyses.why` decides: each step is facts (its name, result code, reason code, evidence and a
``data`` dict of what the wording needs besides the evidence); this module words them
(:func:`step_title`, :func:`step_detail`), as :mod:`cq.analyses.cost_render` does for the cost report.
``docs/why.md`` shows the output. It reads a ``Why`` and its steps by their attributes and never imports
:mod:`cq.analyses.why`.
"""
from __future__ import annotations

import binascii
from typing import Any

from ..filter.layers import RETRY_REGISTERED, retry_group
from ..readers.config import CONSUMER_FILTER_FILE
from ..tags import EXPRESSION_TYPE_SQL92
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

__all__ = ["DROPPED_BY_TEXT", "LAYER1_TEXT", "STEP_MARKS", "STEP_TITLES", "bits_text", "format_why", "retry_filter_text",
           "source_text", "step_detail", "step_title", "verdict_line"]

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
    "compaction_no_filter": "a compaction topic is served from the compaction store, which ignores the group's "
                            "filter: the unit passes",
}


#: ``dropped_by`` as a person says it.
DROPPED_BY_TEXT = {DROPPED_BY_CONSUME_QUEUE: "the ConsumeQueue layer (layer 1)",
            DROPPED_BY_COMMIT_LOG: "the CommitLog layer (layer 2)",
            DROPPED_BY_CLIENT: "the client's tag re-check",
            DROPPED_BY_EXPIRY: "the broker's expiry of old files",
            DROPPED_BY_COMPACTION: "the broker's compaction"}


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
    if w.replica is not None:
        lines.append(f"replica   {w.replica_note}")
    lines.append("")
    for i, s in enumerate(w.steps, 1):
        mark = STEP_MARKS[s.result]
        lines.append(f"{i}. [{mark}] {s.title}")
        lines.extend("     " + line if line.strip() else "" for line in s.detail.splitlines())
    lines.append("")
    lines.append(f"verdict   {verdict_line(w)}")
    return "\n".join(lines)


# ------------------------------------------------------------------ the steps' words
#: Each step's title, by its name (a BatchCQ unit's: ``data["batch"]``).
STEP_TITLES = {
    "tier": "Tiered store (TieredMessageStore.fetchFromCurrentStore)",
    "consume_queue_unit": "ConsumeQueue unit",
    "consume_queue": "Layer 1: ConsumeQueue (isMatchedByConsumeQueue)",
    "is_msg_in_live": "isMsgInLive (the bitmap was computed for this filter version)",
    "commit_log": "Layer 2: CommitLog (isMatchedByCommitLog)",
    "client": "Client re-check (PullAPIWrapper)",
}


def step_title(step) -> str:
    """A step's title: ``data["title"]`` when its maker worded it (paths' steps), else by its name."""
    if "title" in step.data:
        return step.data["title"]
    if step.name == "consume_queue_unit" and step.data.get("batch"):
        return "BatchConsumeQueue unit"
    if step.name == "consume_queue_unit" and step.data.get("compaction"):
        return "Compaction CQ unit"
    return STEP_TITLES[step.name]


def step_detail(step) -> str:
    """A step's detail (one or a few lines): ``data["detail"]`` when its maker worded it, else from its
    codes, evidence and data."""
    if "detail" in step.data:
        return step.data["detail"]
    if step.reason == "not_reached":
        return "not reached"
    return _DETAILS[step.name](step.reason, step.evidence, step.data)


def _unit_detail(reason: str, ev: dict, data: dict) -> str:
    if reason == "expired":  # below the queue's minimum (DROPPED_BY_EXPIRY)
        lo, phys = ev["min_offset"], ev["commit_log_offset"]
        where = f" (it pointed at CommitLog offset {phys}, now below the CommitLog's first byte " \
                f"{ev['commit_log_min_offset']})" if phys >= 0 else " (its ConsumeQueue file is deleted too)"
        return (f"queue offset {data['queue_offset']} is below queue {data['topic']}/{data['queue_id']}'s minimum "
                f"{lo}: the broker expired it{where}; a consumer asking for it is moved to offset {lo}, so the group "
                "never receives it")
    if reason in ("compacted", "compacted_no_newer"):  # a compaction topic's (DROPPED_BY_COMPACTION)
        where = f"queue {data['topic']}/{data['queue_id']} offset {data['queue_offset']}"
        keys = f"KEYS {ev['keys']!r}" if ev["keys"] is not None else "its KEYS (its record is gone)"
        if reason == "compacted":
            kept = (f"; the compaction store serves offset {ev['kept_offset']}" if ev["kept_offset"] is not None
                    else "; the compaction store serves none of its KEYS after it (each was replaced in turn)")
            return (f"compacted: a newer message with the same key replaced it ({keys}, newer at queue offset(s) "
                    f"{', '.join(map(str, ev['newer_offsets']))}{kept}): the compaction CQ of queue "
                    f"{data['topic']}/{data['queue_id']} has no unit at offset {data['queue_offset']}, so the group "
                    "never receives it")
        return (f"compacted: the compaction CQ has no unit at {where} and no newer message has {keys} (an empty "
                "body deletes its key): the group never receives it")
    if reason == "no_unit":
        return (f"no ConsumeQueue unit of queue {data['topic']}/{data['queue_id']} at offset {ev['queue_offset']} "
                f"points at CommitLog offset {ev['commit_log_offset']} (transaction type "
                f"{data['transaction_type']:#x}): the broker never serves this record to consumers")
    head = f"{ev['file']} at byte {ev['file_position']}: commitLogOffset {ev['commit_log_offset']}, size {ev['size']}"
    if data.get("compaction"):
        return f"{head} (a compaction log position), tagsCode {ev['tags_code']}"
    if data.get("batch"):
        return (f"{head}, tagsCode {ev['tags_code']}, a batch of {ev['batch_size']} message(s) from queue offset "
                f"{ev['base_offset']}; this is message {data['index']} of it")
    text = f"{head}, tagsCode slot {ev['tags_code_slot']}"
    if ev["is_ext_address"]:
        text += f" (an ext address: ext offset {data['ext_offset']})"
    return text


def _layer1_detail(reason: str, ev: dict, data: dict) -> str:
    if data.get("compaction"):
        return LAYER1_TEXT[reason]
    if data.get("batch"):
        if data["kind"] == "tags":
            return (f"{LAYER1_TEXT[reason]}\nthe batch's tags code {ev['tags_code']} (the record's own TAGS, none "
                    "for a batch: 0), compared for the whole batch")
        return "a BatchCQ keeps no ext units (no bitmap): layer 1 passes the batch"
    lines = [LAYER1_TEXT[reason]]
    if data["kind"] == "tags":
        if ev["tags_code"] is not None:
            src = "from the ext unit" if data["from_ext"] else "from the unit"
            lines.append(f"tags code {ev['tags_code']} ({src}); compared as int {ev['tags_code_int32']}")
        if data["code_set"] is not None:
            lines.append("subscription code set: " + ", ".join(f"{t}={code}" for t, code in data["code_set"]))
        return "\n".join(lines)
    unit = ev.get("ext_unit")
    if unit is not None:
        bitmap = None if unit["bitmap"] is None else bytes.fromhex(unit["bitmap"])
        lines.append(f"ext unit at ext offset {unit['ext_offset']}: size {unit['size']}, tags code "
                     f"{unit['tags_code']}, msgStoreTime {unit['msg_store_time']}, bitmap "
                     f"({unit['bit_map_size']} bytes) {bits_text(bitmap)}")
    if "bit_positions" in ev:
        positions, key = ev["bit_positions"], ev["bloom_key"]
        if "bits_set" in ev:
            missing = ev["bits_missing"]
            lines.append(f"bits of {key} (k={len(positions)}, m={ev['bit_num']}): "
                         + ", ".join(f"{p} {'set' if ok else 'CLEAR'}" for p, ok in zip(positions, ev["bits_set"]))
                         + (f"; missing: {missing}" if missing else ""))
        else:
            lines.append(f"bits of {key}: {positions} (m={ev['bit_num']})")
    if data["born_time_assumed"]:
        lines.append(f"bornTime {ev['born_time']} assumed (subscription given, not looked up)")
    return "\n".join(lines)


def _live_detail(reason: str, ev: dict, data: dict) -> str:
    live = ev["in_live"]
    return (f"msgStoreTime {ev['msg_store_time']} {'>' if live else '<='} bornTime {ev['born_time']}: "
            + ("the group's bits in this bitmap can be trusted" if live else
               "stored before the filter was built, so layer 1 does not use the bitmap"))


def _layer2_detail(reason: str, ev: dict, data: dict) -> str:
    if data.get("compaction"):
        if "missing" in data:
            phys, size = data["missing"]
            return f"the record [{phys}, {phys + size}) is in no file of the compaction log: the broker skips the unit"
        return ("a compaction topic is served from the compaction store, which ignores the group's filter: the "
                f"record passes (TAGS {ev['tags']!r}, KEYS {ev['keys']!r})")
    if "missing" in data:  # the record is not in the CommitLog: layer 2 never reads it
        phys, size, lo, hi = data["missing"]
        if data.get("batch"):
            return (f"the batch record [{phys}, {phys + size}) is not in the CommitLog [{lo}, {hi}): the broker "
                    "skips the unit")
        return (f"the record [{phys}, {phys + size}) is not in the CommitLog [{lo}, {hi}) "
                f"({'the broker expired it' if reason == 'expired' else 'past its end'}): the broker skips the unit")
    text = _layer2_text(reason, ev, data)
    return "on the batch record's own properties, not the message's\n" + text if data.get("batch") else text


def _selector_text(data: dict) -> str:
    """SQL92 layer 2: the selector's value and evaluation tree (``data["explanation"]``)."""
    explanation = data["explanation"]
    head = f"selector {explanation.value}: " + ("matched" if data["matched"] else
                                                "not matched (the broker delivers only TRUE)")
    return head + "\n" + str(explanation)


def _layer2_text(reason: str, ev: dict, data: dict) -> str:
    kind = data["kind"]
    if kind == "tags":
        detail = "TAG subscriptions: the CommitLog layer always matches"
        if data["retry_filter"]:
            detail += " (the retry filter too: a TAG subscription never reaches its RETRY_TOPIC lookup)"
        return detail
    if kind == "sql":
        detail = _selector_text(data)
        if "retry" in ev:  # a %RETRY% topic without filterSupportRetry
            first, rest = detail.split("\n", 1)
            detail = (f"{first}\nfilterSupportRetry is off (the broker's default): the group's own expression "
                      f"decides, not the filter registered for the message's RETRY_TOPIC\n{rest}")
        return detail
    return _retry_text(reason, ev["retry"], data)


def _retry_text(reason: str, retry: dict[str, Any], data: dict) -> str:
    """Layer 2 of the retry filter (docs/filtering.md#retry-filter), from ``evidence["retry"]``."""
    group = retry["group"]
    if reason == "retry_no_properties":
        return ("retry filter: the record has no properties, so no RETRY_TOPIC: the broker's lookup throws (the "
                "filter does not catch it) and the pull that reaches this record fails instead of delivering it")
    if reason == "retry_not_registered":
        return (f"retry filter: RETRY_TOPIC {retry['retry_topic']!r}: no filter registered for "
                f"({retry['retry_topic']}, {group}): the broker delivers it")
    if reason == "retry_no_retry_topic":
        return ("retry filter: the record has no RETRY_TOPIC property, so no (topic, group) registration can be "
                "found for it: it matches")
    if reason == "class_filter_mode":
        return "class filter mode: the CommitLog layer matches everything"
    if retry["decided_by"] != RETRY_REGISTERED:  # not a retry topic: the filter's own expression decided
        return _selector_text(data)
    head = (f"retry filter: RETRY_TOPIC {retry['retry_topic']!r}, so the filter registered for "
            f"({retry['lookup'][0]}, {group}) decides")
    reg = retry["registration"]
    where = "" if reg is None else f" (config/{CONSUMER_FILTER_FILE}: bornTime {reg['born_time']}" + (
        f", dead since {reg['dead_time']})" if reg["is_dead"] else ")")
    if reason == "retry_registered_no_expression":
        return (f"{head}: it has no compiled expression (not SQL92, or it does not compile), so the broker "
                f"delivers it{where}")
    first, rest = _selector_text(data).split("\n", 1)
    return f"{head}: {first}\nregistered SQL92 {retry['expression']!r}{where}\n{rest}"


def _client_detail(reason: str, ev: dict, data: dict) -> str:
    tags, tags_set = ev["tags"], ev["tags_set"]
    if reason == "no_recheck":
        return "the subscription's tag set is empty (SQL92, \"*\" or none): the client keeps every message"
    if reason == "tag_in_set":
        return f"TAGS {tags!r} is in the subscription's tags {tags_set}"
    if data.get("batch"):
        why_passed = "the batch's tags code passed layer 1 for every message of it"
    elif data["layer1_reason"] == "compaction_no_filter":
        why_passed = "the compaction store served it unfiltered"
    elif data["layer1_reason"] == "tags_code_in_set":
        why_passed = "its tags code equals a subscribed tag's: a hash collision"
    else:
        why_passed = "layer 1 could not compare its tags code"
    what = "the message has no TAGS" if tags is None else \
        f"TAGS {tags!r} is not in the subscription's tags {tags_set} ({why_passed})"
    return what + ": the client drops it"


def _tier_detail(reason: str, ev: dict, data: dict) -> str:
    local = ev["local_min_offset"]
    below = (f"below the local minimum {local}, so its record is not in the local store"
             if local is not None else "inside the tier's range")
    return (f"queue offset {data['queue_offset']} of {data['topic']}/{data['queue_id']} is {below}: the broker "
            f"serves it from the tier (holding [{ev['tier_min_offset']}, {ev['tier_end_offset']}) in "
            f"{ev['directory']}), where layer 1 has no ext unit and no bitmap")


_DETAILS = {"tier": _tier_detail, "consume_queue_unit": _unit_detail, "consume_queue": _layer1_detail, "is_msg_in_live": _live_detail,
            "commit_log": _layer2_detail, "client": _client_detail}

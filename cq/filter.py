"""The broker's two-layer message filter (spec §5.3-§5.4, §6.3-§6.7).

Layer 1 (``is_matched_by_consume_queue``) sees only the ConsumeQueue unit: the
tags code, or for SQL92 the ext unit's Bloom bitmap. Layer 2
(``is_matched_by_commit_log``) sees the message's properties. Tag
subscriptions get a third, client-side step (``is_matched_by_client``): the
exact TAGS string re-check of ``PullAPIWrapper``.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from . import format as fmt
from .ext import CqExtUnit
from .tags import (
    EXPRESSION_TYPE_SQL92,
    SubscriptionData,
    build_subscription,
    parse_tag_subscription,
)


class TagFilter:
    """A TAG subscription's filter (``ExpressionMessageFilter`` with a tag expression).

    Parameters
    ----------
    subscription : str, SubscriptionData or None
        ``"TagA || TagB"``, ``"*"``, ... parsed with :func:`cq.parse_tag_subscription`;
        None means "no subscription" (everything matches, no client re-check).
    class_filter_mode : bool
        The subscription's class-filter flag: everything matches.

    Examples
    --------
    >>> f = TagFilter("TagA || TagB")
    >>> f.is_matched_by_consume_queue(2598919), f.is_matched_by_client("TagB"), f.is_matched_by_client(None)
    (True, True, False)
    """

    def __init__(self, subscription: str | SubscriptionData | None, *, class_filter_mode: bool = False) -> None:
        if isinstance(subscription, str):
            subscription = parse_tag_subscription(subscription)
        self.subscription = subscription
        self.class_filter_mode = class_filter_mode
        # the broker compares the low 32 bits of the tags code with an int set
        self._codes = frozenset(subscription.code_set) if subscription is not None else frozenset()

    def is_matched_by_consume_queue(self, tags_code: int | None, ext_unit: CqExtUnit | None = None) -> bool:
        """Layer 1: rules 1-5 of spec §5.3. ``tags_code`` None = unresolvable ext address."""
        sub = self.subscription
        if sub is None or self.class_filter_mode or tags_code is None or sub.sub_string == "*":
            return True
        return _low_int32(tags_code) in self._codes

    def explain_consume_queue(self, tags_code: int | None, ext_unit: CqExtUnit | None = None) -> tuple[bool, str]:
        """:meth:`is_matched_by_consume_queue` and the rule that decided it (a reason code).

        Codes: ``no_subscription``, ``class_filter_mode``, ``tags_code_unknown``, ``sub_all``,
        ``tags_code_in_set``, ``tags_code_not_in_set``.
        """
        sub = self.subscription
        matched = self.is_matched_by_consume_queue(tags_code, ext_unit)
        if sub is None:
            return matched, "no_subscription"
        if self.class_filter_mode:
            return matched, "class_filter_mode"
        if tags_code is None:
            return matched, "tags_code_unknown"
        if sub.sub_string == "*":
            return matched, "sub_all"
        return matched, "tags_code_in_set" if matched else "tags_code_not_in_set"

    def is_matched_by_commit_log(self, properties: Mapping[str, str] | None) -> bool:
        """Layer 2: always True for TAG subscriptions."""
        return True

    def is_matched_by_client(self, tags: str | None) -> bool:
        """The client's exact re-check (spec §5.4): only when tags_set is non-empty."""
        sub = self.subscription
        if sub is None or self.class_filter_mode or not sub.tags_set:
            return True
        return tags is not None and tags in sub.tags_set

    @property
    def codes(self) -> frozenset:
        """The int32 code set layer 1 compares with."""
        return self._codes


class SqlFilter:
    """A SQL92 subscription's filter, as registered with the broker (``ExpressionMessageFilter``).

    Parameters
    ----------
    group, topic : str
        The consumer group and topic; the Bloom key is ``"<group>#<topic>"``.
    sql : str
        The selector; compiled with :func:`selector.compile` (a selector that
        does not parse raises :class:`selector.SelectorSyntaxError`).
    bloom_filter : bloom.BloomFilter, optional
        The broker's Bloom filter. Given: the group's ``BloomFilterData`` is
        generated from it, and layer 1 tests ext bitmaps. None: no bloom data,
        so layer 1 always passes (the "subscription carried in the pull" path).
    born_time : int
        ``ConsumerFilterData.bornTime`` (ms): bitmaps of messages stored at or
        before it are not trusted (``isMsgInLive`` is strict). Default 0: the
        group was registered before any message.
    bloom_data : bloom.BloomFilterData, optional
        Use these bit positions instead of generating them.
    class_filter_mode : bool
        Everything matches.
    compiled : selector.Selector, optional
        An already compiled selector for ``sql`` (anything with ``evaluate``).
    """

    expression_type = EXPRESSION_TYPE_SQL92

    def __init__(self, group: str, topic: str, sql: str, bloom_filter=None, *, born_time: int = 0,
                 bloom_data=None, class_filter_mode: bool = False, compiled=None) -> None:
        from selector.errors import SelectorEvaluationError

        self.group = group
        self.topic = topic
        self.sql = sql
        self.subscription = build_subscription(topic, sql, EXPRESSION_TYPE_SQL92)
        if compiled is None:
            import selector

            compiled = selector.compile(sql)
        self.compiled = compiled
        self._evaluation_error = SelectorEvaluationError
        self.bloom_filter = bloom_filter
        self.born_time = born_time
        self.class_filter_mode = class_filter_mode
        if bloom_data is None and bloom_filter is not None:
            bloom_data = bloom_filter.generate(f"{group}#{topic}")
        self.bloom_data = bloom_data
        self.bloom_data_valid = bool(
            bloom_data is not None and bloom_filter is not None and _bloom_valid(bloom_filter, bloom_data)
        )

    def __repr__(self) -> str:
        return f"SqlFilter(group={self.group!r}, topic={self.topic!r}, sql={self.sql!r})"

    @property
    def bit_positions(self) -> list[int] | None:
        """The group's Bloom bit positions, or None without bloom data."""
        return None if self.bloom_data is None else list(self.bloom_data.bit_pos)

    def uses_bitmap(self) -> bool:
        """True when layer 1 can prune on ext bitmaps (bloom data present and valid)."""
        return not self.class_filter_mode and self.bloom_data is not None and self.bloom_data_valid

    def is_matched_by_consume_queue(self, tags_code: int | None, ext_unit: CqExtUnit | None = None) -> bool:
        """Layer 1 for SQL92: rules 1-7 of spec §6.5 (``tags_code`` is ignored)."""
        return self.explain_consume_queue(tags_code, ext_unit)[0]

    def explain_consume_queue(self, tags_code: int | None, ext_unit: CqExtUnit | None = None) -> tuple[bool, str]:
        """:meth:`is_matched_by_consume_queue` and the rule that decided it (a reason code).

        Codes, in the broker's order: ``class_filter_mode``, ``no_bloom_data``, ``no_ext_unit``,
        ``not_in_live`` (``msgStoreTime <= bornTime``), ``no_bitmap``, ``bloom_data_invalid``,
        ``bitmap_length`` (bitmap bits != bitNum), ``position_out_of_range`` (``isHit`` throws:
        matched), ``bloom_hit``, ``bloom_miss``.
        """
        if self.class_filter_mode:
            return True, "class_filter_mode"
        if self.bloom_data is None:
            return True, "no_bloom_data"
        if ext_unit is None:
            return True, "no_ext_unit"
        if not ext_unit.msg_store_time > self.born_time:  # isMsgInLive is strict
            return True, "not_in_live"
        bitmap = ext_unit.filter_bitmap
        if bitmap is None:
            return True, "no_bitmap"
        if not self.bloom_data_valid:
            return True, "bloom_data_invalid"
        if len(bitmap) * 8 != self.bloom_data.bit_num:
            return True, "bitmap_length"
        positions = self.bloom_data.bit_pos
        # isHit reads every position (no early exit), so one out of range throws;
        # the broker logs the exception and matches.
        if any(p < 0 or p >= len(bitmap) * 8 for p in positions):
            return True, "position_out_of_range"
        if all(bitmap[p >> 3] & (1 << (p & 7)) for p in positions):
            return True, "bloom_hit"
        return False, "bloom_miss"

    def evaluate(self, properties: Mapping[str, str] | None):
        """The selector's raw result (True/False/None), None where evaluation throws."""
        try:
            return self.compiled.evaluate(properties if properties is not None else {})
        except self._evaluation_error:
            return None

    def is_matched_by_commit_log(self, properties: Mapping[str, str] | None) -> bool:
        """Layer 2 (spec §6.5): True only where the selector evaluates to TRUE."""
        if self.class_filter_mode:
            return True
        return self.evaluate(properties) is True

    def is_matched_by_commit_log_many(self, rows) -> np.ndarray:
        """Layer 2 for many property maps at once (bool ndarray), via ``Selector.matches_many``."""
        if self.class_filter_mode:
            return np.ones(len(rows), dtype=bool)
        matches_many = getattr(self.compiled, "matches_many", None)
        if matches_many is None:
            return np.array([self.is_matched_by_commit_log(r) for r in rows], dtype=bool)
        return np.asarray(matches_many([r if r is not None else {} for r in rows]), dtype=bool)

    def is_matched_by_client(self, tags: str | None) -> bool:
        """SQL92 subscriptions have an empty tags set: the client keeps everything."""
        return True


class RetrySqlFilter(SqlFilter):
    """``ExpressionForRetryMessageFilter`` (``filterSupportRetry = true``), spec §6.7.

    For a subscription topic ``%RETRY%{group}`` (or ``%RETRY%{group}+{topic}``)
    layer 2 evaluates the filter *registered* for (the message's
    ``RETRY_TOPIC``, group), looked up in ``registry``; a missing registration
    matches. Layer 1 is the inherited one.

    Parameters
    ----------
    registry : mapping of (topic, group) -> SqlFilter
        The broker's registered SQL92 filters.
    """

    def __init__(self, group: str, topic: str, sql: str, bloom_filter=None, *,
                 registry: Mapping[tuple[str, str], SqlFilter], **kwargs) -> None:
        super().__init__(group, topic, sql, bloom_filter, **kwargs)
        self.registry = registry

    def is_matched_by_commit_log(self, properties: Mapping[str, str] | None) -> bool:
        """Layer 2 with the retry-topic lookup; raises ValueError for a retry message without properties."""
        if self.class_filter_mode:
            return True
        target: SqlFilter | None = self
        if self.topic.startswith(fmt.RETRY_GROUP_TOPIC_PREFIX):
            if properties is None:
                raise ValueError(
                    "retry message without properties: the broker's RETRY_TOPIC lookup fails on it"
                )
            real_topic = properties.get(fmt.PROPERTY_RETRY_TOPIC)
            group = self.topic[len(fmt.RETRY_GROUP_TOPIC_PREFIX):].split("+", 1)[0]
            target = self.registry.get((real_topic, group)) if real_topic is not None else None
            if target is None:
                return True
        return target.evaluate(properties) is True

    def is_matched_by_commit_log_many(self, rows) -> np.ndarray:
        """Layer 2 row by row (each row may resolve to a different registered filter)."""
        return np.array([self.is_matched_by_commit_log(r) for r in rows], dtype=bool)


def _low_int32(tags_code: int) -> int:
    """``(int) tagsCode``: the low 32 bits as a signed int, as the broker compares them."""
    low = tags_code & 0xFFFFFFFF
    return low - (1 << 32) if low & 0x80000000 else low


def _bloom_valid(bloom_filter, data) -> bool:
    """``BloomFilter.isValid``: bitNum == m and k positions."""
    is_valid = getattr(bloom_filter, "is_valid", None)
    if is_valid is not None:
        return bool(is_valid(data))
    return data.bit_num == bloom_filter.m and len(data.bit_pos) == bloom_filter.k

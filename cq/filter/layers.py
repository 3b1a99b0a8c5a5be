"""The broker's two-layer message filter (docs/filtering.md#tag-match to docs/filtering.md#retry-filter).

Layer 1 (``is_matched_by_consume_queue``) sees only the ConsumeQueue unit: the
tags code, or for SQL92 the ext unit's Bloom bitmap. Layer 2
(``is_matched_by_commit_log``) sees the message's properties. Tag
subscriptions get a third, client-side step (``is_matched_by_client``): the
exact TAGS string re-check of ``PullAPIWrapper``.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

import selector
from rmqfilter_arrow import bool_values
from selector.errors import SelectorEvaluationError

from .. import format as fmt
from ..kernels import HIT, PASS, PRUNED, bloom_bit_bytes, check_ext_batch, scan_tags
from ..readers.ext import CqExtUnit
from ..tags import (
    EXPRESSION_TYPE_SQL92,
    SubscriptionData,
    bloom_key,
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
        """Layer 1: the rules of docs/filtering.md#tag-match. ``tags_code`` None = unresolvable ext address."""
        sub = self.subscription
        if sub is None or self.class_filter_mode or tags_code is None or sub.sub_string == "*":
            return True
        return low_int32(tags_code) in self._codes

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
        """The client's exact re-check (docs/filtering.md#client-recheck): only when tags_set is non-empty."""
        sub = self.subscription
        if sub is None or self.class_filter_mode or not sub.tags_set:
            return True
        return tags is not None and tags in sub.tags_set

    def is_matched_by_client_columns(self, columns) -> np.ndarray:
        """The client's exact tag re-check over the ``tags`` column of decoded records (bool ndarray).

        Compares the UTF-8 bytes of each row's tag with the subscribed tags
        (a missing tag fails), as :meth:`is_matched_by_client` compares strings.
        """
        n = len(columns)
        sub = self.subscription
        if sub is None or self.class_filter_mode or not sub.tags_set:
            return np.ones(n, dtype=bool)
        offsets, data, valid = columns.columns["tags"]
        lengths = np.diff(offsets)
        out = np.zeros(n, dtype=bool)
        for tag in sub.tags_set:
            want = np.frombuffer(tag.encode("utf-8"), dtype=np.uint8)
            rows = np.flatnonzero((lengths == len(want)) & (valid != 0) & ~out)
            if len(want) == 0 or len(rows) == 0:
                out[rows] = len(want) == 0
                continue
            starts = offsets[rows].astype(np.int64)
            got = data[starts[:, None] + np.arange(len(want))]
            out[rows[(got == want).all(axis=1)]] = True
        return out

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
        self.group = group
        self.topic = topic
        self.sql = sql
        self.subscription = build_subscription(topic, sql, EXPRESSION_TYPE_SQL92)
        if compiled is None:
            compiled = selector.compile(sql)
        self.compiled = compiled
        self._evaluation_error = SelectorEvaluationError
        self.bloom_filter = bloom_filter
        self.born_time = born_time
        self.class_filter_mode = class_filter_mode
        if bloom_data is None and bloom_filter is not None:
            bloom_data = bloom_filter.generate(bloom_key(group, topic))
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
        """Layer 1 for SQL92: the rules of docs/filtering.md#expression-filter (``tags_code`` is ignored)."""
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
        """Layer 2 (docs/filtering.md#expression-filter): True only where the selector evaluates to TRUE."""
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

    def is_matched_by_commit_log_columns(self, columns) -> np.ndarray:
        """Layer 2 over decoded records (a :class:`cq.readers.columns.MessageColumns` holding ``properties``).

        The selector runs over the Arrow map array (``Selector.matches_arrow``),
        no dict per record. Raises ImportError without pyarrow, TypeError when
        the compiled selector has no Arrow evaluator (callers then use
        :meth:`is_matched_by_commit_log_many`).
        """
        if self.class_filter_mode:
            return np.ones(len(columns), dtype=bool)
        matches_arrow = getattr(self.compiled, "matches_arrow", None)
        if matches_arrow is None:
            raise TypeError(f"{type(self.compiled).__name__} has no matches_arrow")
        if len(columns) == 0:
            return np.zeros(0, dtype=bool)
        return bool_values(matches_arrow(columns.arrow("properties")))

    def is_matched_by_client(self, tags: str | None) -> bool:
        """SQL92 subscriptions have an empty tags set: the client keeps everything."""
        return True

    def is_matched_by_client_columns(self, columns) -> np.ndarray:
        """The client's re-check over decoded records: SQL92 keeps every one."""
        return np.ones(len(columns), dtype=bool)


#: :attr:`RetryLookup.reason` codes.
RETRY_CLASS_FILTER_MODE = "class_filter_mode"
RETRY_NOT_RETRY_TOPIC = "not_retry_topic"
RETRY_REGISTERED = "registered"
RETRY_NOT_REGISTERED = "not_registered"
RETRY_NO_RETRY_TOPIC = "no_retry_topic"


class RetryPropertiesError(ValueError):
    """A record of a ``%RETRY%`` topic has no properties: the broker's ``RETRY_TOPIC`` lookup fails on it."""


@dataclass(frozen=True)
class RetryLookup:
    """Which filter decides layer 2 of a :class:`RetrySqlFilter` for one record (:meth:`RetrySqlFilter.lookup`).

    Attributes
    ----------
    reason : str
        ``"class_filter_mode"`` (everything matches), ``"not_retry_topic"`` (the filter's own
        expression decides), ``"registered"`` (the filter registered for (``retry_topic``,
        ``group``) decides), ``"not_registered"`` (none is registered: the record matches),
        ``"no_retry_topic"`` (the record has no ``RETRY_TOPIC`` property: nothing to look up,
        the record matches).
    retry_topic : str or None
        The record's ``RETRY_TOPIC`` property.
    group : str or None
        The group taken from the subscription topic (the part before ``+`` of
        ``%RETRY%{group}+{topic}``); None when it is not a retry topic.
    filter : SqlFilter, TagFilter or None
        The filter whose layer 2 decides; None: the record matches without evaluation.
    """

    reason: str
    retry_topic: str | None = None
    group: str | None = None
    filter: SqlFilter | TagFilter | None = None

    @property
    def key(self) -> tuple[str, str] | None:
        """The (topic, group) looked up in the registry, or None when nothing was looked up."""
        if self.retry_topic is None or self.group is None:
            return None
        return self.retry_topic, self.group


def retry_group(topic: str) -> str | None:
    """The consumer group of a retry topic (``%RETRY%{group}`` or ``%RETRY%{group}+{topic}``), else None."""
    if not topic.startswith(fmt.RETRY_GROUP_TOPIC_PREFIX):
        return None
    return topic[len(fmt.RETRY_GROUP_TOPIC_PREFIX):].split("+", 1)[0]


class RetrySqlFilter(SqlFilter):
    """``ExpressionForRetryMessageFilter`` (``filterSupportRetry = true``), docs/filtering.md#retry-filter.

    For a subscription topic ``%RETRY%{group}`` (or ``%RETRY%{group}+{topic}``)
    layer 2 evaluates the filter *registered* for (the message's
    ``RETRY_TOPIC``, group), looked up in ``registry``; a missing registration
    matches. Layer 1 is the inherited one. :meth:`lookup` says which filter decides.

    Parameters
    ----------
    registry : mapping of (topic, group) -> SqlFilter
        The broker's registered SQL92 filters (:class:`cq.filter.subscription.FilterRegistry` builds them
        from ``config/consumerFilter.json``); a value may be any filter with
        ``is_matched_by_commit_log``.
    """

    def __init__(self, group: str, topic: str, sql: str, bloom_filter=None, *,
                 registry: Mapping[tuple[str, str], SqlFilter], **kwargs) -> None:
        super().__init__(group, topic, sql, bloom_filter, **kwargs)
        self.registry = registry

    @classmethod
    def from_filter(cls, flt: SqlFilter, *, registry: Mapping[tuple[str, str], SqlFilter]) -> RetrySqlFilter:
        """The retry filter a broker with ``filterSupportRetry`` pulls with where it would use ``flt``
        (same expression, bornTime, bloom data and class-filter mode)."""
        return cls(flt.group, flt.topic, flt.sql, flt.bloom_filter, registry=registry, born_time=flt.born_time,
                   bloom_data=flt.bloom_data, class_filter_mode=flt.class_filter_mode, compiled=flt.compiled)

    def lookup(self, properties: Mapping[str, str] | None) -> RetryLookup:
        """Which filter decides layer 2 for a record with these ``properties`` (None: it has none).

        Raises
        ------
        RetryPropertiesError
            A record of a retry topic without properties (the broker's lookup throws).
        """
        if self.class_filter_mode:
            return RetryLookup(RETRY_CLASS_FILTER_MODE)
        group = retry_group(self.topic)
        if group is None:
            return RetryLookup(RETRY_NOT_RETRY_TOPIC, filter=self)
        if properties is None:
            raise RetryPropertiesError(
                "retry message without properties: the broker's RETRY_TOPIC lookup fails on it"
            )
        real_topic = properties.get(fmt.PROPERTY_RETRY_TOPIC)
        if real_topic is None:
            return RetryLookup(RETRY_NO_RETRY_TOPIC, group=group)
        target = self.registry.get((real_topic, group))
        return RetryLookup(RETRY_REGISTERED if target is not None else RETRY_NOT_REGISTERED, real_topic, group,
                           target)

    def is_matched_by_commit_log(self, properties: Mapping[str, str] | None) -> bool:
        """Layer 2 with the retry-topic lookup; raises ValueError for a retry message without properties."""
        target = self.lookup(properties).filter
        if target is None:
            return True
        if target is self:
            return self.evaluate(properties) is True
        return target.is_matched_by_commit_log(properties)

    def is_matched_by_commit_log_columns(self, columns) -> np.ndarray:
        """Not over columns: each row may resolve to a different registered filter (TypeError)."""
        raise TypeError("RetrySqlFilter decides row by row")

    def is_matched_by_commit_log_many(self, rows) -> np.ndarray:
        """Layer 2 row by row (each row may resolve to a different registered filter)."""
        return np.array([self.is_matched_by_commit_log(r) for r in rows], dtype=bool)


def low_int32(tags_code: int) -> int:
    """``(int) tagsCode``: the low 32 bits as a signed int, as the broker compares them."""
    low = tags_code & 0xFFFFFFFF
    return low - (1 << 32) if low & 0x80000000 else low


def _bloom_valid(bloom_filter, data) -> bool:
    """``BloomFilter.isValid``: bitNum == m and k positions."""
    is_valid = getattr(bloom_filter, "is_valid", None)
    if is_valid is not None:
        return bool(is_valid(data))
    return data.bit_num == bloom_filter.m and len(data.bit_pos) == bloom_filter.k


# ------------------------------------------------------------------ over arrays
#: :attr:`Layers.kind` of each filter class; any other filter (one with the per-unit methods only) is ``"units"``.
_KINDS = ((RetrySqlFilter, "retry"), (SqlFilter, "sql92"), (TagFilter, "tags"))


class Layers:
    """The broker's two layers and the client's re-check of one filter, over arrays of units and records.

    The one home of the filter's array rules: the broker's path for a run of units
    (:func:`cq.store.decide.decide_units`, which :meth:`cq.Store.consume`, the ``rocketmq`` data
    source, :func:`cq.analyses.cost.tally_range` and :func:`cq.why` call, and :func:`cq.backlog`
    through ``consume``) asks it, never the filter's class. The rules are those of the filter's per-unit methods
    (docs/filtering.md#tag-match, docs/filtering.md#expression-filter, docs/filtering.md#retry-filter);
    a filter of another class (with only ``is_matched_by_consume_queue``,
    ``is_matched_by_commit_log`` and ``is_matched_by_client``) is asked unit by unit.

    Parameters
    ----------
    flt : TagFilter, SqlFilter, RetrySqlFilter or a filter with the per-unit methods
    broker : bool, default True
        False for a queue the broker serves without its two layers: a compaction topic's, read from
        the compaction store, where the pull ignores the group's filter and only the client's re-check
        applies (docs/reading.md#compaction-topics). Layer 1 and layer 2 then pass every unit.
    """

    def __init__(self, flt, *, broker: bool = True) -> None:
        self.filter = flt
        #: Whether the broker's two layers run (False: a compaction topic's queue).
        self.broker = bool(broker)
        #: ``"tags"``, ``"sql92"``, ``"retry"`` (a :class:`RetrySqlFilter`) or ``"units"`` (another class).
        self.kind = next((k for cls, k in _KINDS if isinstance(flt, cls)), "units")
        if self.kind == "tags":
            self._codes = np.fromiter(flt.codes, dtype=np.int32, count=len(flt.codes))

    @property
    def sql92(self) -> bool:
        """A SQL92 filter (a retry filter too): layer 1 on Bloom bitmaps, layer 2 a selector."""
        return self.kind in ("sql92", "retry")

    @property
    def passes_all(self) -> bool:
        """Layer 1 passes every unit (no tags to compare, ``"*"``, class-filter mode, no valid bloom data)."""
        f = self.filter
        if not self.broker:
            return True
        if self.kind == "tags":
            sub = f.subscription
            return sub is None or f.class_filter_mode or sub.sub_string == "*"
        if self.kind in ("sql92", "retry"):
            return not f.uses_bitmap()
        return False

    @property
    def layer1_decides(self) -> bool:
        """Layer 1 nearly decides alone: a tag code match, or a Bloom bitmap of the group's expression,
        so the records it lets through are mostly delivered (docs/data-path.md#consume); without the
        broker's layers (:attr:`broker` False) every record reaches the client, so it is decoded once."""
        return not self.broker or self.kind == "tags" or (self.kind in ("sql92", "retry") and self.filter.uses_bitmap())

    @property
    def has_layer2(self) -> bool:
        """Layer 2 can drop a record (a SQL92 selector); a tag filter's layer 2 is always true, and so is
        every layer without the broker's (:attr:`broker` False)."""
        return self.broker and self.kind != "tags"

    @property
    def plain_sql(self) -> bool:
        """Layer 2 is the selector alone, and the client keeps everything: a SQL92 filter, not a retry one,
        not in class-filter mode (what Spark may evaluate instead of the broker's layer 2)."""
        return self.broker and self.kind == "sql92" and not self.filter.class_filter_mode

    def layer2_fields(self) -> list[str] | None:
        """Record fields layer 2 and the client re-check read over columns (None: they decide
        record by record, on property dicts)."""
        if self.kind == "tags" or not self.broker:
            return ["tags"]
        if self.kind == "sql92" and hasattr(self.filter.compiled, "matches_arrow"):
            return ["properties"]
        return None

    def layer1(self, slots: np.ndarray, *, ext=None, raw=None, known: np.ndarray | None = None,
               ext_batch=None, stats=None) -> tuple[np.ndarray, np.ndarray]:
        """Layer 1 over units: ``(passed, hits)`` bool masks (``hits``: the units whose ext bitmap
        held every bit of the group).

        Parameters
        ----------
        slots : ndarray
            The units' ``tags_code`` slots as stored (an ext address where the unit has one), resolved
            through ``ext`` (:class:`cq.ConsumeQueueExt` or None); ``raw``, the units' bytes, lets a tag
            filter scan them in the kernel when no slot is an ext address. Or, with ``known`` given,
            the tags codes already resolved (``known`` False where an ext address did not resolve)
            and ``ext_batch`` the units' ext units (:meth:`cq.ConsumeQueueExt.read_batch`, or None).
        stats : cq.ConsumeStats, optional
            Counts ``ext_missing``, ``bloom_tested`` and ``bloom_pruned``.
        """
        n = len(slots)
        hits = np.zeros(n, dtype=bool)
        if self.passes_all:
            return np.ones(n, dtype=bool), hits
        f = self.filter
        if known is None:
            is_ext = slots <= fmt.MAX_ADDR
            if self.kind == "tags" and raw is not None and not is_ext.any():
                passed = np.zeros(n, dtype=bool)
                passed[scan_tags(raw, f.codes)] = True
                return passed, hits
        if self.kind == "tags":
            if known is None:
                codes, known = slots.copy(), ~is_ext
                if ext is not None:
                    found, tags, _ = ext.read_many(slots)
                    codes = np.where(found, tags, codes)
                    known |= found
                if stats is not None:
                    stats.ext_missing += int((is_ext & ~known).sum())
            else:
                codes = slots
            return ~known | np.isin(_low_int32_array(codes), self._codes), hits
        if self.kind in ("sql92", "retry"):
            data = f.bloom_data
            if ext_batch is not None:
                verdict = check_ext_batch(ext_batch, data.bit_pos, bit_num=int(data.bit_num), born_time=f.born_time)
            elif known is not None or ext is None:
                return np.ones(n, dtype=bool), hits
            else:
                verdict = np.full(n, PASS, dtype=np.uint8)
                bits = bloom_bit_bytes(data.bit_pos, data.bit_num)
                if bits is not None:  # (None: isHit throws and the broker matches)
                    verdict, found = ext.bloom_verdicts(slots, *bits, data.bit_num, f.born_time)
                    if stats is not None:
                        stats.ext_missing += int((is_ext & (found == 0)).sum())
            hits = verdict == HIT
            if stats is not None:
                stats.bloom_tested += int((hits | (verdict == PRUNED)).sum())
                stats.bloom_pruned += int((verdict == PRUNED).sum())
            return verdict != PRUNED, hits
        # a filter of another class: unit by unit
        if known is None:
            ext_batch = ext.read_batch(slots) if ext is not None else None
            known = ~is_ext | (ext_batch.found if ext_batch is not None else False)
            codes = np.where(known & is_ext, ext_batch.tags_code, slots) if ext_batch is not None else slots
        else:
            codes = slots
        codes = codes.tolist()
        passed = np.fromiter(
            (f.is_matched_by_consume_queue(codes[i] if known[i] else None,
                                           ext_batch.unit(i) if ext_batch is not None else None) for i in range(n)),
            dtype=bool, count=n)
        return passed, hits

    def layer2_columns(self, cols) -> np.ndarray:
        """Layer 2 over decoded records holding :meth:`layer2_fields` (bool per record)."""
        if self.kind == "tags" or not self.broker:
            return np.ones(len(cols), dtype=bool)
        return np.asarray(self.filter.is_matched_by_commit_log_columns(cols), dtype=bool)

    def layer2_properties(self, props) -> np.ndarray:
        """Layer 2 over property dicts (None: a record without properties), bool per record."""
        f = self.filter
        if not self.broker:
            return np.ones(len(props), dtype=bool)
        many = getattr(f, "is_matched_by_commit_log_many", None)
        if many is not None:
            return np.asarray(many(props), dtype=bool)
        return np.fromiter((f.is_matched_by_commit_log(p) for p in props), dtype=bool, count=len(props))

    def layer2_records(self, log, offs: np.ndarray, cols=None) -> np.ndarray:
        """Layer 2 for the CommitLog records at ``offs`` of ``log``: over the decoded properties
        column where the filter can (``cols``, when given, the records decoded already), else over
        property dicts. A retry record without properties raises :class:`RetryPropertiesError`
        naming the CommitLog file and byte (docs/filtering.md#retry-filter)."""
        if not self.broker:
            return np.ones(len(offs), dtype=bool)
        if self.kind in ("tags", "sql92"):
            try:
                return self.layer2_columns(cols if cols is not None else log.decode_columns(offs, ["properties"]))
            except (ImportError, TypeError):
                pass  # no pyarrow, or a selector without an Arrow evaluator
        props = log.gather_properties(offs, absent_as_none=True)  # null where none are stored, as the broker's
        try:
            return self.layer2_properties(props)
        except RetryPropertiesError as exc:  # the broker's pull fails at this record
            bare = [i for i, p in enumerate(props) if p is None]
            if not bare:
                raise
            at = int(offs[bare[0]])
            start, path = log.files[log.file_index(at)]
            raise RetryPropertiesError(f"{exc}: {path} at byte {at - start} (CommitLog offset {at})") from None

    def client_columns(self, cols, rows: np.ndarray | None = None) -> np.ndarray:
        """The client's tag re-check of decoded records (``rows`` of them, default all), bool per row:
        over the tags column where the filter can, else one tag at a time."""
        f = self.filter
        over_columns = getattr(f, "is_matched_by_client_columns", None)
        if over_columns is not None:
            keep = np.asarray(over_columns(cols), dtype=bool)
            return keep if rows is None else keep[rows]
        n = len(cols) if rows is None else len(rows)
        return np.fromiter((f.is_matched_by_client(t) for t in cols.texts("tags", rows=rows)), dtype=bool, count=n)

    def client_tags(self, tags) -> np.ndarray:
        """The client's tag re-check of records by their ``TAGS`` values (None: no TAGS), bool per record."""
        f = self.filter
        if self.kind == "tags":
            sub = f.subscription
            if sub is None or f.class_filter_mode or not sub.tags_set:
                return np.ones(len(tags), dtype=bool)
            # "" for no TAGS: a tag subscription's set never holds "" (its tags are trimmed, non-empty)
            return np.isin(np.array([t or "" for t in tags], dtype=str), np.array(sorted(sub.tags_set), dtype=str))
        return np.fromiter((f.is_matched_by_client(t) for t in tags), dtype=bool, count=len(tags))


def _low_int32_array(codes: np.ndarray) -> np.ndarray:
    """``(int) tagsCode`` of each code: the low 32 bits as a signed int, as the broker compares them."""
    return np.asarray(codes).astype(np.int64).astype(np.uint32).astype(np.int32)

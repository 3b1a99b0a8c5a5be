"""The one place that builds the broker's filter for a group (docs/filtering.md#expression-filter).

A filter comes from one of three sources, each built here and nowhere else:

- an explicit subscription (:func:`subscription_filter`): a SQL92 selector or a tag expression, as a
  consumer pulling with it carries it;
- a registration of ``config/consumerFilter.json`` (:func:`registration_filter`): the persisted
  expression, bornTime and bloom data, as the broker pulls with them; :func:`group_filter` picks
  between the two the way :meth:`cq.Store.consume` does;
- a retry group (:func:`retry_filter`): ``ExpressionForRetryMessageFilter``, whose layer 2 looks the
  message's ``RETRY_TOPIC`` up in the registrations (:class:`FilterRegistry`,
  docs/filtering.md#retry-filter).

``bloom_filter`` takes the same values everywhere here: :data:`DEFAULT_BLOOM` (the broker's default
filter, ``bloom.BloomFilter()``), a :class:`bloom.BloomFilter`, or :data:`NO_BLOOM` (no bloom data:
layer 1 passes every SQL92 unit, the subscription-carried-in-the-pull path).
"""
from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import bloom
import selector

from ..errors import UnknownGroupError
from ..readers.config import ConfigWarning, RegisteredFilter
from ..tags import EXPRESSION_TYPE_SQL92
from .layers import Layers, RetrySqlFilter, SqlFilter, TagFilter

__all__ = ["DEFAULT_BLOOM", "NO_BLOOM", "FilterRegistry", "broker_bloom", "group_filter", "registered_as", "registration_filter",
           "retry_filter", "subscription_filter"]

#: ``bloom_filter=`` value naming the broker's default Bloom filter (``bloom.BloomFilter()``: f=20, n=32).
DEFAULT_BLOOM = "default"
#: ``bloom_filter=`` value for no bloom data: a SQL92 filter's layer 1 then passes every unit.
NO_BLOOM = None


def broker_bloom(bloom_filter: Any = DEFAULT_BLOOM, *, required: str | None = None):
    """The :class:`bloom.BloomFilter` a ``bloom_filter=`` value names (:data:`DEFAULT_BLOOM`: a new default
    filter; a filter: itself), or None for :data:`NO_BLOOM`. ``required`` names a caller that needs a real
    filter (the cost report replays bitmaps): :data:`NO_BLOOM` there is a ValueError naming it."""
    if isinstance(bloom_filter, str):
        if bloom_filter != DEFAULT_BLOOM:
            raise ValueError(f"bloom_filter must be a bloom.BloomFilter, {DEFAULT_BLOOM!r} or None, got {bloom_filter!r}")
        return bloom.BloomFilter()
    if bloom_filter is NO_BLOOM and required is not None:
        raise ValueError(f"{required} needs the broker's Bloom filter: bloom_filter must be a bloom.BloomFilter "
                         f"or {DEFAULT_BLOOM!r} (DEFAULT_BLOOM), not None (NO_BLOOM)")
    return bloom_filter


def subscription_filter(topic: str, group: str, *, sql: str | None = None, tags: str | None = None,
                        bloom_filter: Any = DEFAULT_BLOOM, born_time: int = 0, bloom_data=None):
    """The filter of an explicit subscription: a :class:`SqlFilter` for ``sql`` (as registered with
    ``bloom_filter``; its bloom data generated unless ``bloom_data`` is given), a :class:`TagFilter`
    for ``tags``. Exactly one of the two."""
    if (sql is None) == (tags is None):
        raise ValueError("give sql or tags, not both" if sql is not None else "give sql or tags")
    if sql is not None:
        bf = broker_bloom(bloom_filter)
        return SqlFilter(group, topic, sql, bf, born_time=born_time, bloom_data=bloom_data if bf is not None else None)
    return TagFilter(tags)


def registration_filter(registration: RegisteredFilter, bloom_filter: Any = DEFAULT_BLOOM):
    """The filter the broker pulls with for a registration of ``config/consumerFilter.json`` (its layer 1
    and layer 2).

    Parameters
    ----------
    registration : cq.RegisteredFilter
    bloom_filter : bloom.BloomFilter, DEFAULT_BLOOM or NO_BLOOM
        The broker's filter; :data:`NO_BLOOM`: no bloom data, so layer 1 passes everything.

    Returns
    -------
    cq.SqlFilter
        With the persisted expression, bornTime and bloom data. When the expression type
        is not ``"SQL92"`` or the expression does not compile, the broker has no compiled
        expression and lets every message through both layers: a :class:`cq.TagFilter`
        without subscription is returned and a :class:`cq.ConfigWarning` names the group.
    """
    r = registration
    bf = broker_bloom(bloom_filter)
    problem = None
    compiled = None
    if r.expression_type != EXPRESSION_TYPE_SQL92:
        problem = f"expression type {r.expression_type!r} is not {EXPRESSION_TYPE_SQL92!r}"
    elif not r.expression or not r.expression.strip():
        problem = "it has no expression"
    else:
        try:
            compiled = selector.compile(r.expression)
        except selector.SelectorSyntaxError as exc:
            problem = f"its expression does not compile ({exc})"
    if problem is not None:
        warnings.warn(f"group {r.group!r} on topic {r.topic!r}: {problem}; the broker keeps no "
                      f"compiled expression and lets every message through", ConfigWarning, stacklevel=2)
        return TagFilter(None)
    if r.bloom_data is None:
        # a registration persisted without bloom data (a 5.5.1+ broker with bitmaps off,
        # docs/config-and-index.md#no-bloom-data) has none on the broker either: layer 1 passes
        bf = None
    return SqlFilter(r.group, r.topic, r.expression, bf, born_time=r.born_time,
                     bloom_data=r.bloom_data if bf is not None else None, compiled=compiled)


def group_filter(topic: str, group: str, registered: Callable[[Any], RegisteredFilter], *, sql: str | None = None,
                 tags: str | None = None, bloom_filter: Any = DEFAULT_BLOOM, born_time: int | None = None,
                 bloom_data=None):
    """The filter :meth:`cq.Store.consume` uses: :func:`subscription_filter` for ``sql`` or ``tags``;
    neither: the group's registration (``registered(bloom_filter)``, which raises
    :class:`cq.UnknownGroupError` when there is none) through :func:`registration_filter`.

    A ``sql`` that is the group's registered expression, with neither ``born_time`` nor ``bloom_data``
    given, is that registration's filter too (:func:`registered_as`: its bornTime and bloom data, the
    group's own answer); another ``sql`` has bornTime ``born_time`` (default 0: every bitmap
    trusted; docs/filtering.md#born-time)."""
    if sql is not None and tags is not None:
        raise ValueError("give sql or tags, not both")
    bf = broker_bloom(bloom_filter)
    if sql is None and tags is None:
        return registration_filter(registered(bf), bf)
    if sql is not None and born_time is None and bloom_data is None:
        reg = registered_as(registered, sql, bf)
        if reg is not None:
            return registration_filter(reg, bf)
    return subscription_filter(topic, group, sql=sql, tags=tags, bloom_filter=bf, born_time=born_time or 0,
                               bloom_data=bloom_data)


def registered_as(registered: Callable[[Any], RegisteredFilter], sql: str,
                  bloom_filter: Any = DEFAULT_BLOOM) -> RegisteredFilter | None:
    """The group's registration (``registered(bloom_filter)``) when ``sql`` is the SQL92 expression it
    registered (the same text), else None (no registration, or another expression)."""
    try:
        reg = registered(bloom_filter)
    except UnknownGroupError:
        return None
    return reg if reg.expression_type == EXPRESSION_TYPE_SQL92 and reg.expression == sql else None


class FilterRegistry(Mapping):
    """``consumerFilter.json``'s registrations as the broker looks them up (``ConsumerFilterManager.get``).

    A mapping ``(topic, group) -> filter``: the filter the broker pulls with for that
    registration (:func:`registration_filter`), built on its first lookup, so a
    registration whose expression does not compile warns only when it is looked up. Dead
    registrations are included (the broker's lookups return them too). This is the
    ``registry`` of :class:`cq.RetrySqlFilter` (docs/filtering.md#retry-filter).

    Parameters
    ----------
    registrations : iterable of RegisteredFilter
        Usually ``Store.registered_filters()``; a later duplicate (topic, group) wins.
    bloom_filter : bloom.BloomFilter, DEFAULT_BLOOM or NO_BLOOM
        As for :func:`registration_filter`. The retry filter only evaluates the
        looked-up filters' expressions, so :data:`NO_BLOOM` is enough there.
    """

    def __init__(self, registrations: Iterable[RegisteredFilter], bloom_filter: Any = NO_BLOOM) -> None:
        self._registrations = {(r.topic, r.group): r for r in registrations}
        self._bloom_filter = bloom_filter
        self._filters: dict[tuple[str, str], Any] = {}

    def registration(self, topic: str, group: str) -> RegisteredFilter | None:
        """The registration of (``topic``, ``group``), or None."""
        return self._registrations.get((topic, group))

    def __getitem__(self, key: tuple[str, str]):
        flt = self._filters.get(key)
        if flt is None:
            flt = self._filters[key] = registration_filter(self._registrations[key], self._bloom_filter)
        return flt

    def __contains__(self, key: object) -> bool:
        return key in self._registrations

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._registrations)

    def __len__(self) -> int:
        return len(self._registrations)


def retry_filter(flt, registrations: Iterable[RegisteredFilter]):
    """The filter a broker with ``filterSupportRetry`` pulls a retry group's topic with where it would use
    ``flt``: for a SQL92 ``flt`` a :class:`RetrySqlFilter` (same expression, bornTime, bloom data) whose
    layer 2 evaluates the filter registered for the message's ``RETRY_TOPIC`` (a :class:`FilterRegistry`
    of ``registrations``); any other filter is returned as it is (a TAG subscription matches at layer 2
    before the lookup). docs/filtering.md#retry-filter."""
    if not Layers(flt).sql92:
        return flt
    return RetrySqlFilter.from_filter(flt, registry=FilterRegistry(registrations))

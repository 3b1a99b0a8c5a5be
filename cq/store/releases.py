"""What a store shows of the RocketMQ release that wrote it, and the refusals for what releases after
5.3.3 keep where rmqfilter does not read (docs/formats.md#releases-after-533).

:func:`written_by` names the lowest release that writes what the store holds, from files only a
release from then on writes; where nothing in the store tells, it says so (``release`` None), never
a guess. :func:`check_message_rocksdb` raises :class:`cq.errors.UnsupportedLayoutError` where a
5.4+ broker kept the timer's timeline or the transaction halves in its message RocksDB (RIP-82):
rmqfilter reads neither, so a timer or transaction answer from the files alone would be silently
wrong.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass

from .. import format as fmt
from ..errors import UnsupportedLayoutError
from ..readers import config as cfg
from ..readers.rocksdb import families_with_data
from .modes import StoreLayout, detect_layout, topic_attributes

__all__ = ["WrittenBy", "check_lite", "check_message_rocksdb", "message_rocksdb_families", "written_by"]

#: What each message-RocksDB family keeps in place of what rmqfilter reads, and which reads refuse
#: a store whose family holds records (docs/formats.md#message-rocksdb). The ``default`` family
#: (the index, ``indexRocksDBEnable``) refuses nothing: the broker still writes the IndexFiles
#: unless ``indexFileWriteEnable=false``, and without them rmqfilter scans the topic instead.
_REFUSED = {
    "timer": "timer messages' timeline kept in RocksDB (timerRocksDBEnable)",
    "trans": "transaction halves kept in RocksDB (transRocksDBEnable)",
}


def _release_key(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.split("."))


@dataclass(frozen=True)
class WrittenBy:
    """The release a store shows it was written by (:func:`written_by`).

    Attributes
    ----------
    release : str or None
        The lowest RocketMQ release that writes what the store holds (``"5.4.0"``: 5.4.0 or later),
        None when no file tells.
    evidence : tuple of str
        What tells it, one phrase per file or setting, the strongest first.
    """

    release: str | None
    evidence: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line, as ``rmqfilter inspect`` prints it."""
        if self.release is None:
            return ("unknown (no file in the store names a release: releases up to 5.3.x leave none, "
                    f"and there is no {fmt.MESSAGE_ROCKSDB_DIR}/, which every broker from "
                    f"{fmt.MESSAGE_ROCKSDB_RELEASE} creates)")
        return f"RocketMQ {self.release} or later ({'; '.join(self.evidence)})"

    def as_dict(self) -> dict:
        """The finding as plain values (``rmqfilter inspect --json``)."""
        return {"release": self.release, "at_least": self.release is not None, "evidence": list(self.evidence)}


def written_by(root: str | os.PathLike, layout: StoreLayout | None = None) -> WrittenBy:
    """The lowest RocketMQ release that writes what store root ``root`` holds.

    Reads directory listings and the topic table only. Evidence (docs/formats.md#releases-after-533):
    ``rocksdbstore/`` (every broker from 5.4.0 opens it at start-up), a topic whose ``message.type``
    is ``PRIORITY`` (5.4.0) or ``LITE`` (5.5.0), which earlier brokers refuse, and the topics of
    ``transRocksDBEnable`` (5.4.0). None of these: ``release`` None.
    """
    root = os.fspath(root)
    layout = layout or detect_layout(root)
    found: list[tuple[str, str]] = []
    if os.path.isfile(os.path.join(root, fmt.MESSAGE_ROCKSDB_DIR, fmt.ROCKSDB_CURRENT_FILE)):
        found.append((fmt.MESSAGE_ROCKSDB_RELEASE, f"{fmt.MESSAGE_ROCKSDB_DIR}/: RIP-82's message RocksDB"))
    for topic, values in sorted(topic_attributes(root, layout.rocksdb_table_of(cfg.TOPICS_FILE)).items()):
        kind = values.get(fmt.MESSAGE_TYPE_ATTRIBUTE)
        if kind in fmt.MESSAGE_TYPE_RELEASES:
            found.append((fmt.MESSAGE_TYPE_RELEASES[kind], f"topic {topic}: {fmt.MESSAGE_TYPE_ATTRIBUTE}={kind}"))
    queues = os.path.join(root, fmt.CONSUME_QUEUE_DIR)
    for topic in (fmt.ROCKSDB_TRANS_HALF_TOPIC, fmt.ROCKSDB_TRANS_OP_HALF_TOPIC):
        if os.path.isdir(os.path.join(queues, topic)):
            found.append((fmt.MESSAGE_ROCKSDB_RELEASE, f"{fmt.CONSUME_QUEUE_DIR}/{topic}/: transRocksDBEnable"))
            break
    bare = _registrations_without_bloom_data(root)
    if bare:
        evidence = f"config/{cfg.CONSUMER_FILTER_FILE}: {bare} registration(s) without bloomFilterData"
        found.append((fmt.NO_BLOOM_DATA_RELEASE, evidence))
    if not found:
        return WrittenBy(None)
    found.sort(key=lambda f: _release_key(f[0]), reverse=True)
    return WrittenBy(found[0][0], tuple(text for _, text in found))


def _registrations_without_bloom_data(root: str) -> int:
    """How many SQL92 registrations of ``config/consumerFilter.json`` carry no bloom data (what a
    5.5.1+ broker with bitmaps off writes); 0 where the file is missing or unreadable (no evidence)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", cfg.ConfigWarning)
            registered = cfg.read_registered_filters(os.path.join(root, cfg.CONFIG_DIR, cfg.CONSUMER_FILTER_FILE))
    except cfg.ConfigFormatError:
        return 0
    return sum(1 for r in registered if r.bloom_data is None)


def message_rocksdb_families(root: str | os.PathLike) -> tuple[str, ...]:
    """The column families of ``{root}/rocksdbstore/`` that hold records (none where the store
    has no such database): ``default`` (the index), ``timer``, ``trans``."""
    directory = os.path.join(os.fspath(root), fmt.MESSAGE_ROCKSDB_DIR)
    if not os.path.isfile(os.path.join(directory, fmt.ROCKSDB_CURRENT_FILE)):
        return ()
    return families_with_data(directory, f"RocketMQ {fmt.MESSAGE_ROCKSDB_RELEASE}+ message RocksDB (RIP-82)")


def check_message_rocksdb(root: str | os.PathLike, family: str, reading: str) -> None:
    """Raise :class:`UnsupportedLayoutError` when the message RocksDB of store ``root`` keeps
    ``family``'s data (``"timer"`` or ``"trans"``), which ``reading`` (what the caller was about to
    read, e.g. ``"the timer's state"``) would need; the transaction topics of ``transRocksDBEnable``
    count for ``"trans"`` even where the family is empty (their halves are resolved there)."""
    root = os.fspath(root)
    directory = os.path.join(root, fmt.MESSAGE_ROCKSDB_DIR)
    feature = f"{_REFUSED[family]}, RocketMQ {fmt.MESSAGE_ROCKSDB_RELEASE}+ (RIP-82)"
    advice = (f"rmqfilter does not read the {family!r} column family of {fmt.MESSAGE_ROCKSDB_DIR}/, so "
              f"{reading} would be wrong; read this store with a broker, or one written with "
              f"{fmt.MESSAGE_ROCKSDB_FAMILIES[family]}=false")
    if family == "trans":
        queues = os.path.join(root, fmt.CONSUME_QUEUE_DIR)
        for topic in (fmt.ROCKSDB_TRANS_HALF_TOPIC, fmt.ROCKSDB_TRANS_OP_HALF_TOPIC):
            if os.path.isdir(os.path.join(queues, topic)):
                raise UnsupportedLayoutError(feature, os.path.join(queues, topic), advice)
    if family in message_rocksdb_families(root):
        raise UnsupportedLayoutError(feature, directory, advice)


#: The subscription-group setting that binds a group to a Lite topic (``SubscriptionGroupConfig.liteBindTopic``).
LITE_BIND_TOPIC = "liteBindTopic"


def check_lite(store, topic: str, group: str, reading: str) -> None:
    """Raise :class:`UnsupportedLayoutError` when ``group``'s consumption of ``topic`` is a Lite
    topic's (RIP-83, RocketMQ 5.5.0+; docs/formats.md#lite-topics): ``topic`` is a Lite topic's
    queue (``%LMQ%$parent$lite``) or a topic whose ``message.type`` is ``LITE``, or the group is
    bound to one (``liteBindTopic`` in its subscription group). A Lite group pops each Lite
    topic's queue through the broker's Lite subscriptions, which the store does not hold, so
    ``reading`` (a group's view: ``why``, ``backlog``) would be a guess. The queues themselves
    are LMQ queues, read as such (``Store.consume`` with a subscription given).
    """
    feature = "Lite topic consumption (RIP-83, RocketMQ 5.5.0+)"
    advice = (f"a Lite group pops each Lite topic's queue by the broker's Lite subscriptions, which the "
              f"store does not keep, so {reading} cannot be told from the files; a Lite topic's queue "
              f"({fmt.LITE_QUEUE_PREFIX}<parent>$<lite>) reads as an LMQ queue with a subscription given")
    if topic.startswith(fmt.LITE_QUEUE_PREFIX):
        raise UnsupportedLayoutError(feature, os.path.join(store.root, fmt.CONSUME_QUEUE_DIR, topic), advice)
    # the tables as detect_layout reads them: a broken or missing table is reported by the readers
    # that need it, not here, and a .bak read instead warns there, once
    attributes = topic_attributes(store.root, store.layout.rocksdb_table_of(cfg.TOPICS_FILE)).get(topic, {})
    if attributes.get(fmt.MESSAGE_TYPE_ATTRIBUTE) == "LITE":
        raise UnsupportedLayoutError(feature, os.path.join(store.root, cfg.CONFIG_DIR, cfg.TOPICS_FILE), advice)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            settings = store.subscription_groups().get(group)
    except (ValueError, ImportError):
        return
    if isinstance(settings, dict) and settings.get(LITE_BIND_TOPIC):
        raise UnsupportedLayoutError(feature, os.path.join(store.root, cfg.CONFIG_DIR, cfg.SUBSCRIPTION_GROUP_FILE),
                                     advice)

"""Write the broker's config files (``{store}/config/*.json``) as a broker persists them.

Writers only (:class:`cq.StoreWriter`, :func:`cq.generate_sample_store`, tests); readers use
:mod:`cq.readers.config`. The text is fastjson's dialect: standard JSON, except that a map whose keys
are integers is written with bare keys (``{0:5280,1:5312}``); fields of a bean in
alphabetical order, as fastjson sorts them; compact, or pretty-printed with tabs. A file is
replaced the way ``MixAll.string2File`` does it: the new text goes to ``{file}.tmp``, the old
text is kept as ``{file}.bak``, then the temp file is renamed over ``{file}``
(``docs/config-and-index.md``).
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping
from typing import Any

from ..readers.config import (
    BAK_SUFFIX,
    CONFIG_DIR,
    CONSUMER_FILTER_FILE,
    CONSUMER_OFFSET_FILE,
    SUBSCRIPTION_GROUP_FILE,
    TOPIC_GROUP_SEPARATOR,
    TOPICS_FILE,
    RegisteredFilter,
)

__all__ = [
    "consumer_filter_document",
    "dumps_fastjson",
    "write_config_file",
    "write_consumer_filters",
    "write_consumer_offsets",
    "write_subscription_groups",
    "write_topic_configs",
]

#: Suffix of the temp file the broker writes first.
TMP_SUFFIX = ".tmp"


def dumps_fastjson(obj: Any, *, pretty: bool = False) -> str:
    """``obj`` as fastjson writes it: int dict keys bare, everything else standard JSON.

    Examples
    --------
    >>> dumps_fastjson({"offsetTable": {"T@G": {0: 5, 1: 7}}})
    '{"offsetTable":{"T@G":{0:5,1:7}}}'
    """
    out: list[str] = []
    _dump(obj, out, 0 if pretty else None)
    return "".join(out)


def _dump(obj: Any, out: list[str], indent: int | None) -> None:
    if isinstance(obj, Mapping):
        items = list(obj.items())
        if not items:
            out.append("{}")
            return
        out.append("{")
        for i, (key, value) in enumerate(items):
            if i:
                out.append(",")
            if indent is not None:
                out.append("\n" + "\t" * (indent + 1))
            if isinstance(key, bool) or not isinstance(key, (int, str)):
                raise TypeError(f"config keys are str or int, got {key!r}")
            out.append(str(key) if isinstance(key, int) else json.dumps(key, ensure_ascii=False))
            out.append(":")
            _dump(value, out, None if indent is None else indent + 1)
        if indent is not None:
            out.append("\n" + "\t" * indent)
        out.append("}")
    elif isinstance(obj, (list, tuple)):
        out.append("[")
        for i, value in enumerate(obj):
            if i:
                out.append(",")
            _dump(value, out, indent)
        out.append("]")
    else:
        out.append(json.dumps(obj, ensure_ascii=False))


def write_config_file(path: str | os.PathLike, text: str) -> None:
    """Replace a config file as the broker does: ``{path}.tmp``, old text to ``{path}.bak``, rename."""
    path = os.fspath(path)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + TMP_SUFFIX
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    try:
        with open(path, "rb") as f:
            previous = f.read()
    except FileNotFoundError:
        previous = None
    if previous is not None:
        with open(path + BAK_SUFFIX, "wb") as f:
            f.write(previous)
    os.replace(tmp, path)


def _config_path(root: str | os.PathLike, name: str) -> str:
    return os.path.join(os.fspath(root), CONFIG_DIR, name)


def _data_version(timestamp: int | None) -> dict[str, int]:
    """``DataVersion`` as the managers persist it (``timestamp`` default now, in ms)."""
    return {"counter": 1, "stateVersion": 0,
            "timestamp": time.time_ns() // 1_000_000 if timestamp is None else int(timestamp)}


def consumer_filter_document(filters: Iterable[RegisteredFilter]) -> dict[str, Any]:
    """The ``consumerFilter.json`` object for ``filters`` (``ConsumerFilterManager``'s bean)."""
    by_topic: dict[str, dict[str, Any]] = {}
    for f in filters:
        entry = by_topic.setdefault(f.topic, {"groupFilterData": {}, "topic": f.topic})
        data: dict[str, Any] = {}
        if f.bloom_data is not None:
            data["bloomFilterData"] = {"bitNum": f.bloom_data.bit_num, "bitPos": list(f.bloom_data.bit_pos)}
        data.update({
            "bornTime": f.born_time,
            "clientVersion": f.client_version,
            "consumerGroup": f.group,
            # fastjson serialises the isDead() getter too
            "dead": f.is_dead,
            "deadTime": f.dead_time,
        })
        if f.expression is not None:
            data["expression"] = f.expression
        if f.expression_type is not None:
            data["expressionType"] = f.expression_type
        data["topic"] = f.topic
        entry["groupFilterData"][f.group] = data
    return {"filterDataByTopic": by_topic}


def write_consumer_filters(root: str | os.PathLike, filters: Iterable[RegisteredFilter], *,
                           pretty: bool = False) -> str:
    """Write ``{root}/config/consumerFilter.json`` for ``filters``; returns its path."""
    path = _config_path(root, CONSUMER_FILTER_FILE)
    write_config_file(path, dumps_fastjson(consumer_filter_document(filters), pretty=pretty))
    return path


def write_consumer_offsets(root: str | os.PathLike,
                           offsets: Mapping[tuple[str, str] | str, Mapping[int, int]], *,
                           pretty: bool = False, timestamp: int | None = None) -> str:
    """Write ``{root}/config/consumerOffset.json``.

    ``offsets``: ``(topic, group)`` (or ``"topic@group"``) -> {queue id: next offset}.
    ``timestamp``: the ``dataVersion`` timestamp (ms, default now). Returns the path.
    """
    table: dict[str, dict[int, int]] = {}
    for key, queues in offsets.items():
        name = key if isinstance(key, str) else f"{key[0]}{TOPIC_GROUP_SEPARATOR}{key[1]}"
        table[name] = {int(q): int(o) for q, o in queues.items()}
    path = _config_path(root, CONSUMER_OFFSET_FILE)
    write_config_file(path, dumps_fastjson({"dataVersion": _data_version(timestamp), "offsetTable": table}, pretty=pretty))
    return path


def write_subscription_groups(root: str | os.PathLike, groups: Iterable[str] | Mapping[str, Mapping[str, Any]], *,
                              pretty: bool = False, timestamp: int | None = None) -> str:
    """Write ``{root}/config/subscriptionGroup.json``; groups given by name get the broker's defaults."""
    table: dict[str, dict[str, Any]] = {}
    items = groups.items() if isinstance(groups, Mapping) else ((g, {}) for g in groups)
    for name, settings in items:
        entry = {"brokerId": 0, "consumeBroadcastEnable": True, "consumeEnable": True,
                 "consumeFromMinEnable": True, "consumeMessageOrderly": False, "groupName": name,
                 "notifyConsumerIdsChangedEnable": True, "retryMaxTimes": 16, "retryQueueNums": 1,
                 "whichBrokerWhenConsumeSlowly": 1}
        entry.update(settings)
        table[name] = entry
    path = _config_path(root, SUBSCRIPTION_GROUP_FILE)
    write_config_file(path, dumps_fastjson(
        {"dataVersion": _data_version(timestamp), "subscriptionGroupTable": table}, pretty=pretty))
    return path


def write_topic_configs(root: str | os.PathLike, topics: Mapping[str, int | Mapping[str, Any]], *,
                        pretty: bool = False, timestamp: int | None = None) -> str:
    """Write ``{root}/config/topics.json``; a topic given a number gets that many read/write queues."""
    table: dict[str, dict[str, Any]] = {}
    for name, spec in topics.items():
        entry: dict[str, Any] = {"order": False, "perm": 6, "readQueueNums": 4, "topicFilterType": "SINGLE_TAG",
                                 "topicName": name, "topicSysFlag": 0, "writeQueueNums": 4}
        if isinstance(spec, Mapping):
            entry.update(spec)
        else:
            entry["readQueueNums"] = entry["writeQueueNums"] = int(spec)
        table[name] = entry
    path = _config_path(root, TOPICS_FILE)
    write_config_file(path, dumps_fastjson({"dataVersion": _data_version(timestamp), "topicConfigTable": table},
                                           pretty=pretty))
    return path

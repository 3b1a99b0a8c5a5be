"""The Store's config files (docs/config-and-index.md): ``config/*.json`` or, where the broker keeps them
instead, its RocksDB tables (docs/reading.md#store-modes), and the store's IndexFiles and timer files."""
from __future__ import annotations

import os

from ..errors import UnknownGroupError, UnsupportedLayoutError
from ..filter.subscription import registered_as
from ..readers import config as cfg
from ..readers.indexfile import IndexFiles
from ..readers.rocksdb import metadata_table, pull_offset_table
from ..readers.rocksdb import offset_table as rocksdb_offset_table
from ..readers.timer import TimerFiles
from .releases import check_message_rocksdb


class MetadataRoom:
    """The :class:`cq.Store` methods that read the broker's config files, IndexFiles and timer files."""

    def config_path(self, name: str) -> str:
        """``{root}/config/{name}``: where the broker keeps its config file ``name``.

        Raises :class:`cq.errors.UnsupportedLayoutError` when the broker keeps that table in
        RocksDB instead (the JSON file is then stale, docs/reading.md#store-modes).
        """
        self.layout.check_config(name)
        return os.path.join(self.root, cfg.CONFIG_DIR, name)

    def config_file(self, name: str) -> cfg.ConfigFile:
        """Load config file ``name`` with the ``.bak`` fallback; ``.source`` says which file was read."""
        return cfg.load_config(self.config_path(name))

    def registered_filters(self, topic: str | None = None, *, bloom_filter=None) -> list[cfg.RegisteredFilter]:
        """The SQL92 registrations of ``config/consumerFilter.json`` (all topics, or ``topic``'s).

        Parameters
        ----------
        topic : str, optional
            Only this topic's registrations.
        bloom_filter : bloom.BloomFilter, optional
            The broker's filter the bloom data is checked against (default ``bloom.BloomFilter()``).

        Returns
        -------
        list of cq.readers.config.RegisteredFilter
            In file order; ``[]`` when the file (and its ``.bak``) is missing.

        Warns
        -----
        cq.readers.config.ConfigWarning
            For each group whose bloom data is not what the filter computes, naming it, and
            when the ``.bak`` file was read instead of a broken one.

        Raises
        ------
        cq.readers.config.ConfigFormatError
            The file (and its ``.bak``) is malformed: names the file, byte offset and line:column.
        """
        return cfg.read_registered_filters(self.config_path(cfg.CONSUMER_FILTER_FILE), bloom_filter, topic)

    def registered_filter(self, topic: str, group: str, *, bloom_filter=None) -> cfg.RegisteredFilter:
        """``group``'s registration for ``topic``; :class:`cq.UnknownGroupError` (listing the
        registered groups) when there is none."""
        filters = self.registered_filters(topic, bloom_filter=bloom_filter)
        for f in filters:
            if f.group == group:
                return f
        raise UnknownGroupError(group, topic, [f.group for f in filters],
                                self.config_path(cfg.CONSUMER_FILTER_FILE))

    def registration_of(self, topic: str, group: str, sql: str) -> cfg.RegisteredFilter | None:
        """``group``'s registration for ``topic`` when ``sql`` is the SQL92 expression it registered
        (the same text), else None: a filter given that expression is the group's own, bornTime and
        all (docs/filtering.md#born-time)."""
        return registered_as(lambda _bf: self.registered_filter(topic, group), sql)

    def committed_offsets(self, group: str, topic: str) -> dict[int, int]:
        """``config/consumerOffset.json``: queue id -> the next offset ``group`` will consume in ``topic``.

        Queues without a committed offset (absent, or -1) are left out; a missing file gives ``{}``.
        """
        return cfg.committed_from_table(self.offset_table(), group, topic)

    def offset_table(self) -> dict[tuple[str, str], dict[int, int]]:
        """Every committed offset: (topic, group) -> {queue id: offset} (raw, -1 kept), from
        ``config/consumerOffset.json``, or where the broker keeps it instead: its RocksDB table (v1's
        ``config/consumerOffsets``, v2's ``config/rdb``), or ``config/lmqConsumerOffset.json`` of a
        broker with ``enableLmq`` (docs/formats.md#lmq)."""
        rocks = self.layout.rocksdb_table_of(cfg.CONSUMER_OFFSET_FILE)
        if rocks is not None:
            return rocksdb_offset_table(rocks)
        lmq = os.path.join(self.root, cfg.CONFIG_DIR, cfg.LMQ_CONSUMER_OFFSET_FILE)
        if os.path.exists(lmq) or os.path.exists(lmq + ".bak"):
            return cfg.read_lmq_offset_table(lmq)
        return cfg.read_offset_table(self.config_path(cfg.CONSUMER_OFFSET_FILE))

    def pull_offset_table(self) -> dict[tuple[str, str], dict[int, int]]:
        """How far each group's pulls reached: (topic, group) -> {queue id: the next offset of the
        last pull the broker served}, :meth:`offset_table`'s form. Only a config v2 broker keeps
        it (``config/rdb``; docs/formats.md#rocksdb-metadata-v2); any other store raises
        :class:`cq.errors.UnsupportedLayoutError`, since its broker held it in memory alone."""
        rocks = self.layout.rocksdb_table_of(cfg.CONSUMER_OFFSET_FILE)
        if rocks is None or self.layout.rocksdb_config != "v2":
            raise UnsupportedLayoutError(
                "pull offsets", os.path.join(self.root, cfg.CONFIG_DIR),
                "a broker keeps them on disk only with configManagerVersion=v2 (config/rdb); this one kept "
                "them in memory")
        return pull_offset_table(rocks)

    def subscription_groups(self) -> dict[str, dict]:
        """``config/subscriptionGroup.json`` (or its RocksDB table): group name -> its settings as
        stored (``{}`` if missing)."""
        rocks = self.layout.rocksdb_table_of(cfg.SUBSCRIPTION_GROUP_FILE)
        if rocks is not None:
            return metadata_table(rocks, "subscriptionGroups")
        return cfg.read_subscription_groups(self.config_path(cfg.SUBSCRIPTION_GROUP_FILE))

    def topic_configs(self) -> dict[str, dict]:
        """``config/topics.json`` (or its RocksDB table): topic name -> its settings as stored (``{}`` if missing)."""
        rocks = self.layout.rocksdb_table_of(cfg.TOPICS_FILE)
        if rocks is not None:
            return metadata_table(rocks, "topics")
        return cfg.read_topic_configs(self.config_path(cfg.TOPICS_FILE))

    def index_files(self) -> IndexFiles:
        """The store's IndexFiles (``{root}/index``), opened now; close them after use
        (:class:`cq.IndexFiles`; :class:`cq.StoreFormatError` when they cannot be read)."""
        return IndexFiles(self.root)

    def timer_files(self, reading: str = "the timer's files") -> TimerFiles:
        """The store's 5.x timer files (timercheck, timerlog, timerwheel), opened now; a context manager
        (:class:`cq.TimerFiles`). :class:`cq.UnsupportedLayoutError` where a 5.4+ broker kept the
        timer's timeline in its message RocksDB instead, which ``reading`` (what the caller reads
        them for) would miss (docs/formats.md#message-rocksdb)."""
        check_message_rocksdb(self.root, "timer", reading)
        return TimerFiles(self.root)

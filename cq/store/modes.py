"""Which layout a store root holds: its CommitLog, consume queues and metadata (docs/reading.md#store-modes).

The one home of mode detection. :func:`detect_layout` looks at a store root without reading
any record and says what it holds; :class:`StoreLayout`'s ``check_*`` methods raise
:class:`cq.errors.UnsupportedLayoutError` for what rmqfilter cannot read, so a reader never
answers "no topics" for a RocksDB consume queue or "missing in the CommitLog" for a log it did
not find. Facts: docs/formats.md#dledger-commitlog and docs/reading.md#store-modes.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field, replace

from .. import format as fmt
from ..errors import StoreFormatError, UnsupportedLayoutError
from ..readers import config as cfg
from ..readers.rocksdb import V2_LAYOUT, metadata_table, require_binding

__all__ = ["StoreLayout", "detect_layout"]

#: The JSON file each RocksDB metadata table replaces (``config/{table}/`` in RocksDB mode, v1).
_ROCKSDB_TABLE_FILES = {
    "consumerOffsets": cfg.CONSUMER_OFFSET_FILE,
    "subscriptionGroups": cfg.SUBSCRIPTION_GROUP_FILE,
    "topics": cfg.TOPICS_FILE,
}
#: LMQ queues ``describe`` names (the rest are counted).
_LMQ_SHOWN = 5


def _is_rocksdb(directory: str) -> bool:
    return os.path.isfile(os.path.join(directory, fmt.ROCKSDB_CURRENT_FILE))


def _has_store_files(directory: str) -> bool:
    return bool(fmt.list_queue_files(directory))


@dataclass(frozen=True)
class StoreLayout:
    """What a store root holds (:func:`detect_layout`).

    Attributes
    ----------
    root : str
    commit_log : {"classic", "dledger", "dledger+classic", "none"}
        ``commitlog/``; a DLedger log (``dledger-{selfId}/data/``); a DLedger log with the
        classic files of a store migrated to DLedger below it; or no CommitLog at all.
    commit_log_dir, dledger_dir : str or None
        The classic ``commitlog/`` and the DLedger data directory, where found.
    consume_queues : {"files", "rocksdb", "files+rocksdb", "none"}
        ``consumequeue/{topic}/{queueId}/`` files, a RocksDB database in ``consumequeue/``, both.
    batch_cq_topics : tuple of str
        Topics whose consume queue is a BatchCQ (``queue.type=BatchCQ`` in ``topics.json``, or
        a ``batchconsumequeue/{topic}`` directory; docs/formats.md#batch-consume-queue).
    compaction_topics : tuple of str
        Compaction topics (``cleanup.policy=COMPACTION`` in the topic table), which the broker serves
        from its compaction store (docs/formats.md#compaction-store, docs/reading.md#compaction-topics).
    lmq_queues : tuple of str
        LMQ queues (``consumequeue/%LMQ%...``; docs/formats.md#lmq), whose units point at records of
        other topics.
    metadata : {"json", "rocksdb", "json+rocksdb", "none"}
        ``config/*.json``; RocksDB databases under ``config/``; both (the JSON files are then no
        longer refreshed by the broker for the tables in RocksDB).
    rocksdb_tables : tuple of str
        The metadata tables kept in RocksDB (``consumerOffsets``, ``subscriptionGroups``,
        ``topics``; all three for config v2's ``rdb``).
    rocksdb_config : {"v1", "v2"} or None
        Which RocksDB metadata: v1, one database per table (``config/{table}/``), or v2, every
        table in ``config/rdb/`` (``configManagerVersion=v2``; docs/formats.md#rocksdb-metadata-v2).
    """

    root: str
    commit_log: str
    commit_log_dir: str | None
    dledger_dir: str | None
    consume_queues: str
    batch_cq_topics: tuple[str, ...] = ()
    metadata: str = "none"
    lmq_queues: tuple[str, ...] = ()
    rocksdb_tables: tuple[str, ...] = field(default=())
    rocksdb_config: str | None = None
    compaction_topics: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line naming the modes, as ``rmqfilter inspect`` prints it."""
        if self.dledger_dir is not None:
            log = f"DLedger ({os.path.relpath(self.dledger_dir, self.root)}/)" + (
                " above a classic commitlog/ (migrated)" if self.commit_log == "dledger+classic" else "")
        else:
            log = "classic (commitlog/)" if self.commit_log == "classic" else "none found"
        queues = {"files": "files", "rocksdb": "RocksDB", "none": "none",
                  "files+rocksdb": "files and RocksDB (not supported)"}[self.consume_queues]
        if self.batch_cq_topics:
            queues += f"; BatchCQ topics: {', '.join(self.batch_cq_topics)}"
        if self.compaction_topics:
            queues += f"; compaction topics: {', '.join(self.compaction_topics)}"
        if self.lmq_queues:
            shown = ", ".join(self.lmq_queues[:_LMQ_SHOWN]) + (", ..." if len(self.lmq_queues) > _LMQ_SHOWN else "")
            queues += f"; {len(self.lmq_queues)} LMQ queue(s): {shown}"
        if self.rocksdb_config == "v2":  # the JSON files beside it hold the other tables, not stale copies
            meta = f"RocksDB v2 ({cfg.CONFIG_DIR}/{fmt.ROCKSDB_V2_DIR}: offsets, subscription groups, topics)" + (
                " beside JSON files of the other tables" if self.metadata == "json+rocksdb" else "")
        else:
            meta = {"json": "JSON files", "none": "none", "rocksdb": "RocksDB",
                    "json+rocksdb": "RocksDB beside stale JSON files"}[self.metadata]
        return f"CommitLog {log}; consume queues {queues}; metadata {meta}"

    def as_dict(self) -> dict:
        """The layout as plain values (``rmqfilter inspect --json``)."""
        return {"commit_log": self.commit_log, "commit_log_dir": self.commit_log_dir,
                "dledger_dir": self.dledger_dir, "consume_queues": self.consume_queues,
                "batch_cq_topics": list(self.batch_cq_topics), "compaction_topics": list(self.compaction_topics),
                "lmq_queues": list(self.lmq_queues),
                "metadata": self.metadata,
                "rocksdb_tables": list(self.rocksdb_tables), "rocksdb_config": self.rocksdb_config}

    # ------------------------------------------------------------ checks
    def check_commit_log(self) -> None:
        """Raise unless the store holds a CommitLog rmqfilter reads."""
        if self.commit_log == "none":
            raise UnsupportedLayoutError(
                "no CommitLog", self.root,
                f"found neither {fmt.COMMIT_LOG_DIR}/ nor {fmt.DLEDGER_DIR_PREFIX}<selfId>/{fmt.DLEDGER_DATA_DIR}/ "
                "with files: give the storePathRootDir itself (a broker's storePathCommitLog or "
                "storePathDLedgerCommitLog set elsewhere must be copied into the root)")

    def check_consume_queues(self) -> None:
        """Raise when the consume queues are in RocksDB (alone or beside files)."""
        path = os.path.join(self.root, fmt.CONSUME_QUEUE_DIR)
        if self.consume_queues == "rocksdb":  # read with the rmqfilter[rocksdb] extra: it must be installed
            require_binding("RocksDB consume queue (storeType=defaultRocksDB)", path)
        if self.consume_queues == "files+rocksdb":
            raise UnsupportedLayoutError(
                "consume queues both as files and in RocksDB (combined consume queue store)", path,
                "unsupported mode: the broker may serve either; rmqfilter cannot tell which files are current")

    def rocksdb_table_of(self, name: str) -> str | None:
        """The directory of the RocksDB database that holds config file ``name``'s table instead
        (``consumerOffset.json`` -> ``config/consumerOffsets``, or ``config/rdb`` for config v2),
        None when the JSON file is current."""
        for table in self.rocksdb_tables:
            if _ROCKSDB_TABLE_FILES.get(table) == name:
                return os.path.join(self.root, cfg.CONFIG_DIR,
                                    fmt.ROCKSDB_V2_DIR if self.rocksdb_config == "v2" else table)
        return None

    def check_config(self, name: str) -> None:
        """Raise when config file ``name`` (``consumerOffset.json``, ...) is kept in RocksDB instead:
        its JSON file is stale (:meth:`cq.Store.committed_offsets` and the others read the database)."""
        directory = self.rocksdb_table_of(name)
        if directory is not None:
            raise UnsupportedLayoutError(
                V2_LAYOUT if self.rocksdb_config == "v2" else
                f"RocksDB metadata ({os.path.basename(directory)})", directory,
                f"the broker keeps {name} in RocksDB and no longer refreshes the JSON file: read it "
                "through cq.Store's committed_offsets, subscription_groups or topic_configs")


def _dledger_dir(root: str) -> str | None:
    """The DLedger data directory of ``root`` (``dledger-{selfId}/data``), None when there is none."""
    try:
        names = sorted(n for n in os.listdir(root) if n.startswith(fmt.DLEDGER_DIR_PREFIX))
    except FileNotFoundError:
        return None
    found = [os.path.join(root, n, fmt.DLEDGER_DATA_DIR) for n in names
             if os.path.isdir(os.path.join(root, n, fmt.DLEDGER_DATA_DIR))]
    if len(found) > 1:
        with_files = [d for d in found if _has_store_files(d)]
        if len(with_files) > 1:
            raise StoreFormatError(
                f"several DLedger CommitLogs ({', '.join(os.path.relpath(d, root) for d in with_files)}): "
                "a store root holds one broker's log; open a copy holding only its own dledger-<selfId>", root)
        found = with_files or found[:1]
    return found[0] if found else None


def topic_attributes(root: str, topics_db: str | None) -> dict[str, dict[str, str]]:
    """Each topic's attributes (``queue.type``, ``message.type``, ...; their ``+`` prefixes
    dropped) from the topic table: ``topics.json``, or the RocksDB database ``topics_db`` holding
    it instead. Empty where the table is missing, broken or needs the RocksDB binding: the readers
    that need the table say so."""
    try:
        if topics_db is not None:  # docs/formats.md#rocksdb-metadata-v2: the JSON file is stale
            table = metadata_table(topics_db, "topics")
        else:
            with warnings.catch_warnings():  # a .bak read instead: Store.topic_configs warns when it is asked
                warnings.simplefilter("ignore")
                table = cfg.read_topic_configs(os.path.join(root, cfg.CONFIG_DIR, cfg.TOPICS_FILE))
    except (ValueError, ImportError):
        return {}
    found = {}
    for name, conf in table.items():
        attributes = conf.get("attributes") if isinstance(conf, dict) else None
        if isinstance(attributes, dict):
            found[name] = {str(k).lstrip("+"): v for k, v in attributes.items()}
    return found


def _batch_cq_topics(root: str, topics_db: str | None) -> tuple[str, ...]:
    """Topics whose consume queue is a BatchCQ: those with a ``batchconsumequeue/`` directory, and those
    the topic table marks ``queue.type=BatchCQ`` (:func:`topic_attributes`), directory or not: an
    empty one is still not a classic topic."""
    topics = set()
    batch_dir = os.path.join(root, fmt.BATCH_CONSUME_QUEUE_DIR)
    if os.path.isdir(batch_dir):
        topics.update(t for t in os.listdir(batch_dir) if os.path.isdir(os.path.join(batch_dir, t)))
    for name, values in topic_attributes(root, topics_db).items():
        if values.get(fmt.QUEUE_TYPE_ATTRIBUTE) == fmt.QUEUE_TYPE_BATCH:
            topics.add(name)
    return tuple(sorted(topics))


def _compaction_topics(root: str, topics_db: str | None) -> tuple[str, ...]:
    """Compaction topics: those the topic table marks ``cleanup.policy=COMPACTION`` (:func:`topic_attributes`),
    and those with a ``compaction/compactionCq/{topic}`` directory (the broker makes one for a compaction
    topic alone), table or not: the broker serves them from its compaction store
    (docs/formats.md#compaction-store), so none is ever read as a classic topic."""
    cq_dir = os.path.join(root, fmt.COMPACTION_DIR, fmt.COMPACTION_CQ_DIR)
    topics = {t for t in os.listdir(cq_dir) if os.path.isdir(os.path.join(cq_dir, t))} if os.path.isdir(cq_dir) else set()
    topics.update(name for name, values in topic_attributes(root, topics_db).items()
                  if values.get(fmt.CLEANUP_POLICY_ATTRIBUTE) == fmt.CLEANUP_POLICY_COMPACTION)
    return tuple(sorted(topics))


def detect_layout(root: str | os.PathLike) -> StoreLayout:
    """Look at store root ``root`` and say which CommitLog, consume queues and metadata it holds.

    Reads directory listings and the topic table only (``config/topics.json``, or the RocksDB
    database keeping it: which topics are BatchCQ ones). Raises :class:`StoreFormatError`
    when ``root`` is not a directory or holds none of ``commitlog/``, ``dledger-*/``,
    ``consumequeue/``; the ``check_*`` methods of the result raise for what cannot be read.
    """
    root = os.fspath(root)
    if not os.path.isdir(root):
        raise StoreFormatError("not a directory", root)
    classic = os.path.join(root, fmt.COMMIT_LOG_DIR)
    classic = classic if os.path.isdir(classic) else None
    dledger = _dledger_dir(root)
    cq_dir = os.path.join(root, fmt.CONSUME_QUEUE_DIR)
    if classic is None and dledger is None and not os.path.isdir(cq_dir):
        raise StoreFormatError(
            f"not a RocketMQ store: no {fmt.COMMIT_LOG_DIR}/, {fmt.DLEDGER_DIR_PREFIX}<selfId>/ or "
            f"{fmt.CONSUME_QUEUE_DIR}/ directory", root)
    if dledger is not None:
        log = "dledger+classic" if classic is not None and _has_store_files(classic) else "dledger"
    else:
        log = "classic" if classic is not None else "none"

    queues = "none"
    if os.path.isdir(cq_dir):
        rocks = _is_rocksdb(cq_dir)
        files = any(os.path.isdir(os.path.join(cq_dir, t)) for t in os.listdir(cq_dir))
        queues = {(True, True): "files+rocksdb", (True, False): "rocksdb", (False, True): "files",
                  (False, False): "files"}[(rocks, files)]

    lmq = ()
    if queues == "files":
        lmq = tuple(sorted(t for t in os.listdir(cq_dir)
                           if t.startswith(fmt.LMQ_PREFIX) and os.path.isdir(os.path.join(cq_dir, t))))

    config_dir = os.path.join(root, cfg.CONFIG_DIR)
    # a v2 broker reads config/rdb alone: v1 databases beside it (a broker switched to v2) are stale
    if _is_rocksdb(os.path.join(config_dir, fmt.ROCKSDB_V2_DIR)):
        tables, version = tuple(_ROCKSDB_TABLE_FILES), "v2"
    else:
        tables = tuple(t for t in _ROCKSDB_TABLE_FILES if _is_rocksdb(os.path.join(config_dir, t)))
        version = "v1" if tables else None
    has_json = os.path.isdir(config_dir) and any(n.endswith(".json") for n in os.listdir(config_dir))
    metadata = ("json+rocksdb" if has_json else "rocksdb") if tables else ("json" if has_json else "none")
    layout = StoreLayout(root=root, commit_log=log, commit_log_dir=classic, dledger_dir=dledger,
                         consume_queues=queues, metadata=metadata, rocksdb_tables=tables, rocksdb_config=version,
                         lmq_queues=lmq)
    topics_db = layout.rocksdb_table_of(cfg.TOPICS_FILE)
    return replace(layout, batch_cq_topics=_batch_cq_topics(root, topics_db),
                   compaction_topics=_compaction_topics(root, topics_db))
